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
    let bpo = etc.join("sources.list.d/backports.list");
    let mut last = String::new();
    for step in new_machine() {
        match step {
            Step::Sources => {
                std::fs::write(etc.join("sources.list"), sources_list())?;
                std::fs::write(&bpo, format!("deb {MIRROR} {SUITE}-backports main\n"))?;
            }
            Step::Run(argv) => {
                let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
                last = ch.quiet(&argv)?;
            }
            Step::DropBackports => std::fs::remove_file(&bpo)?,
        }
    }
    let version = last;
    if !version.contains("~bpo") {
        bail!(
            "the new machine's {FROM_BACKPORTS} is {version}, not from {SUITE}-backports: it \
             would not hold the conflict a new machine of this kind has"
        );
    }
    Ok(format!("{FROM_BACKPORTS} {version}"))
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

/// What makes the minbase root a new machine, in order; the last command prints the version
/// of [`FROM_BACKPORTS`].
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
        run(&[
            "dpkg-query",
            "-W",
            "--showformat=${Version}",
            FROM_BACKPORTS,
        ]),
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

    /// The sources come first, backports' go before the last update, the version query is
    /// last; the worst case counts every command (and the e2e run) at its step timeout.
    #[test]
    fn the_new_machine_is_made_in_order_and_its_worst_case_counts_each_command() {
        let steps = new_machine();
        assert_eq!(steps.first(), Some(&Step::Sources));
        let drop = steps
            .iter()
            .position(|s| *s == Step::DropBackports)
            .unwrap();
        let Some(Step::Run(last)) = steps.last() else {
            panic!("{steps:?}")
        };
        assert_eq!(last[0], "dpkg-query");
        assert!(matches!(&steps[drop + 1], Step::Run(a) if a[..2] == ["apt-get", "update"]));
        let runs = steps.iter().filter(|s| matches!(s, Step::Run(_))).count();
        assert_eq!(commands(), runs);
        let commands = u32::try_from(runs).unwrap();
        assert_eq!(
            super::super::worst_case(),
            2 * exec::INSTALL_TIMEOUT + (commands + 1) * super::super::STEP_TIMEOUT
        );
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
