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
/// image); [`held`] then checks it.
pub fn make_new_machine(ch: &Chroot) -> Result<()> {
    let etc = ch.path("/etc/apt");
    let bpo = etc.join("sources.list.d/backports.list");
    for step in new_machine() {
        match step {
            Step::Sources => {
                std::fs::write(etc.join("sources.list"), sources_list())?;
                std::fs::write(&bpo, format!("deb {MIRROR} {SUITE}-backports main\n"))?;
            }
            Step::Run(argv) => {
                let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
                ch.quiet(&argv)?;
            }
            Step::DropBackports => std::fs::remove_file(&bpo)?,
        }
    }
    Ok(())
}

/// What the new machine holds from backports: fails unless qemu-utils really came from there
/// (and backports' source is gone again): the root must hold the very conflict that a new
/// user's `cargo xtask e2e` meets.
pub fn held(ch: &Chroot) -> Result<String> {
    if ch.path("/etc/apt/sources.list.d/backports.list").exists() {
        bail!("the new machine still has a backports source; a machine of this kind has none");
    }
    let version = ch.quiet(&[
        "dpkg-query",
        "-W",
        "--showformat=${Version}",
        FROM_BACKPORTS,
    ])?;
    if !version.contains("~bpo") {
        bail!(
            "the new machine's {FROM_BACKPORTS} is {version}, not from {SUITE}-backports: it \
             would not hold the conflict a new machine of this kind has"
        );
    }
    Ok(format!("{FROM_BACKPORTS} {version}"))
}

/// The cached new machine's file name: the suite, and a digest of the steps that make it, so
/// that changed steps make it anew.
pub fn machine_name() -> String {
    let steps = format!("{:?}{:?}", new_machine(), sources_list());
    format!(
        "new-machine-{SUITE}-{:08x}.tar",
        crc32c::crc32c(steps.as_bytes())
    )
}

/// Saves the made machine at `root` to `tar` (written beside it and renamed: a cut run leaves
/// no half of it).
pub fn save(root: &Path, tar: &Path) -> Result<()> {
    let partial = tar.with_extension("partial");
    let sh = Shell::new()?;
    let out = exec::output_with(
        cmd!(sh, "tar --numeric-owner --xattrs -C {root} -cf {partial} ."),
        None,
        exec::INSTALL_TIMEOUT,
    )?;
    exec::check_output("tar (saving the new machine)", &out)?;
    std::fs::rename(&partial, tar)
        .wrap_err_with(|| format!("moving the new machine to {}", tar.display()))
}

/// The saved machine `tar` unpacked at `root` (which must not exist).
pub fn restore(tar: &Path, root: &Path) -> Result<()> {
    std::fs::create_dir_all(root)?;
    let sh = Shell::new()?;
    let out = exec::output_with(
        cmd!(sh, "tar --numeric-owner --xattrs -p -C {root} -xf {tar}"),
        None,
        exec::INSTALL_TIMEOUT,
    )?;
    exec::check_output("tar (unpacking the new machine)", &out)
}

/// One step of [`make_new_machine`].
#[derive(Debug, PartialEq)]
pub enum Step {
    /// The suite's sources, and backports' beside them.
    Sources,
    /// A command in the new machine (each within the fresh root's step timeout).
    Run(Vec<String>),
    /// Backports' source dropped again.
    DropBackports,
}

/// What makes the minbase root a new machine, in order.
pub fn new_machine() -> Vec<Step> {
    let run = |argv: &[&str]| Step::Run(argv.iter().map(|a| (*a).to_owned()).collect());
    let install = ["apt-get", "install", "-y", "-q", "--no-install-recommends"];
    let backports = format!("{SUITE}-backports");
    vec![
        Step::Sources,
        run(&["apt-get", "update", "-q"]),
        run(&[&install[..], NEW_MACHINE].concat()),
        run(&[&install[..], &["-t", &backports, FROM_BACKPORTS]].concat()),
        Step::DropBackports,
        run(&["apt-get", "update", "-q"]),
    ]
}

/// How many commands [`make_new_machine`] runs in the new machine.
pub fn commands() -> usize {
    new_machine()
        .iter()
        .filter(|s| matches!(s, Step::Run(_)))
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sources come first, backports' go right before the last update; the worst case
    /// counts every command, the check of what the machine holds and the e2e run at the step
    /// timeout; the cached machine's name changes with the steps.
    #[test]
    fn the_new_machine_is_made_in_order_and_its_worst_case_counts_each_command() {
        let steps = new_machine();
        assert_eq!(steps.first(), Some(&Step::Sources));
        let drop = steps
            .iter()
            .position(|s| *s == Step::DropBackports)
            .unwrap();
        assert_eq!(drop, steps.len() - 2, "{steps:?}");
        assert!(matches!(&steps[drop + 1], Step::Run(a) if a[..2] == ["apt-get", "update"]));
        let runs = steps.iter().filter(|s| matches!(s, Step::Run(_))).count();
        assert_eq!(commands(), runs);
        let commands = u32::try_from(runs).unwrap();
        assert_eq!(
            super::super::worst_case(),
            3 * exec::INSTALL_TIMEOUT + (commands + 2) * super::super::STEP_TIMEOUT
        );
        let name = machine_name();
        assert!(
            name.starts_with("new-machine-bookworm-") && name.ends_with(".tar"),
            "{name}"
        );
        assert_eq!(name, machine_name());
    }

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
