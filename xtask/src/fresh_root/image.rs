//! The new machine itself: a debootstrap minbase root of Debian 12, from a cached tarball of
//! its packages, made into what a machine of our kind holds when it is new.

use std::path::Path;

use color_eyre::eyre::{Result, WrapErr as _, bail};
use xshell::{Shell, cmd};

use super::Chroot;
use crate::exec;

/// The suite of the project's machines.
pub const SUITE: &str = "bookworm";
/// The Debian mirror every Debian box reaches.
pub const MIRROR: &str = "http://deb.debian.org/debian";

/// The apt sources of a machine of our kind: the suite, its updates and security; no
/// backports (its image took qemu-utils from there, then dropped the source).
pub fn sources_list() -> String {
    format!(
        "deb {MIRROR} {SUITE} main\n\
         deb {MIRROR} {SUITE}-updates main\n\
         deb http://deb.debian.org/debian-security {SUITE}-security main\n"
    )
}

/// What a new machine of our kind has besides the Rust toolchain (bound in), per its image.
pub const NEW_MACHINE: &[&str] = &["gcc", "libc6-dev", "git", "ca-certificates", "python3"];
/// What it has from backports: qemu-utils 10 (it Breaks bookworm's qemu-system-common).
pub const FROM_BACKPORTS: &str = "qemu-utils";

/// Makes `tarball` (debootstrap `--make-tarball`: the minbase packages, downloaded once), unless
/// it is there. Written beside itself and renamed, so an interrupted run leaves no half file.
pub fn ensure_tarball(tarball: &Path, scratch: &Path) -> Result<bool> {
    if tarball.exists() {
        return Ok(false);
    }
    let partial = tarball.with_extension("partial.tgz");
    let _ = std::fs::remove_file(&partial);
    super::mounts::remove_root(scratch)?;
    std::fs::create_dir_all(scratch)?;
    let sh = Shell::new()?;
    let out = exec::output_with(
        cmd!(
            sh,
            "debootstrap --variant=minbase --make-tarball={partial} {SUITE} {scratch} {MIRROR}"
        ),
        None,
        exec::INSTALL_TIMEOUT,
    )?;
    exec::check_output("debootstrap --make-tarball", &out)?;
    std::fs::rename(&partial, tarball)
        .wrap_err_with(|| format!("moving the tarball to {}", tarball.display()))?;
    super::mounts::remove_root(scratch)?;
    Ok(true)
}

/// A minbase root at `root` (which must not exist) from `tarball`: no download.
pub fn unpack(tarball: &Path, root: &Path) -> Result<()> {
    let sh = Shell::new()?;
    let out = exec::output_with(
        cmd!(
            sh,
            "debootstrap --variant=minbase --unpack-tarball={tarball} {SUITE} {root} {MIRROR}"
        ),
        None,
        exec::INSTALL_TIMEOUT,
    )?;
    exec::check_output("debootstrap --unpack-tarball", &out)
}

/// Makes the minbase root what a new machine of our kind is: its apt sources, [`NEW_MACHINE`],
/// and [`FROM_BACKPORTS`] from backports (whose source is then dropped again, as on the
/// image). Fails unless qemu-utils really came from backports: the root must hold the very
/// conflict that a new user's `cargo xtask e2e` meets.
pub fn make_new_machine(ch: &Chroot) -> Result<String> {
    let etc = ch.path("/etc/apt");
    std::fs::write(etc.join("sources.list"), sources_list())?;
    let bpo = etc.join("sources.list.d/backports.list");
    std::fs::write(&bpo, format!("deb {MIRROR} {SUITE}-backports main\n"))?;
    ch.quiet(&["apt-get", "update", "-q"])?;
    let mut install = vec!["apt-get", "install", "-y", "-q", "--no-install-recommends"];
    install.extend_from_slice(NEW_MACHINE);
    ch.quiet(&install)?;
    let backports = format!("{SUITE}-backports");
    ch.quiet(&[
        "apt-get",
        "install",
        "-y",
        "-q",
        "--no-install-recommends",
        "-t",
        &backports,
        FROM_BACKPORTS,
    ])?;
    std::fs::remove_file(&bpo)?;
    ch.quiet(&["apt-get", "update", "-q"])?;
    let version = ch.quiet(&[
        "dpkg-query",
        "-W",
        "--showformat=${Version}",
        FROM_BACKPORTS,
    ])?;
    if !version.contains("~bpo") {
        bail!(
            "the new machine's {FROM_BACKPORTS} is {version}, not from {backports}: it would not \
             hold the conflict a new machine of this kind has"
        );
    }
    Ok(format!("{FROM_BACKPORTS} {version}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_new_machine_has_no_backports_source_and_what_the_issue_lists() {
        let list = sources_list();
        assert!(list.contains("bookworm main") && list.contains("bookworm-security main"));
        assert!(!list.contains("backports"));
        for p in ["gcc", "libc6-dev", "git", "ca-certificates", "python3"] {
            assert!(NEW_MACHINE.contains(&p), "{p}");
        }
        // What a new machine lacks is deps' job: none of it may be in the image here.
        for p in [
            "cmake",
            "clang",
            "make",
            "qemu-system-x86",
            "iproute2",
            "kmod",
        ] {
            assert!(!NEW_MACHINE.contains(&p), "{p}");
        }
    }
}
