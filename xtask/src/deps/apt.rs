//! apt-get, run so that it never removes or downgrades anything.
//!
//! Every install is simulated first (`apt-get -s`) and then run with `--no-remove`. When the
//! simulation shows that a wanted package would make apt remove one the machine already has,
//! and that installed package came from backports (its version carries `~bpoNN`), the wanted
//! package is installed from the same backports suite through a temporary source list (the
//! system's sources are left as they are), with that suite as apt's *target release*
//! (`-t bookworm-backports`): the whole dependency set resolves from backports where backports
//! has it. Pinning only the named package (`pkg/bookworm-backports`) is not enough: its
//! dependencies still resolve to bookworm and the plan breaks. A machine image of our CI kind
//! ships qemu-utils 10 from bookworm-backports, which Breaks Debian 12's qemu-system-common
//! 7.2: the plain `apt-get install qemu-system-x86` removes it; from backports it brings
//! qemu-system-common, qemu-system-data and seabios of the same release and removes nothing.
//! Anything that apt could only install by removing or downgrading a package stops here,
//! naming the package.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use color_eyre::eyre::{Result, WrapErr as _, bail};
use xshell::{Shell, cmd};

use crate::exec;

/// Where the temporary backports source points (the Debian mirror every Debian box can reach).
const MIRROR: &str = "http://deb.debian.org/debian";

/// What `apt-get -s install` would do.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Simulation {
    /// Packages it would install or upgrade.
    pub install: Vec<String>,
    /// Installed packages it would replace by another version: `(name, installed, new)`.
    pub replace: Vec<(String, String, String)>,
    /// Installed packages it would remove.
    pub remove: Vec<String>,
}

/// Parses the `Inst …` / `Remv …` lines of `apt-get -s install …`
/// (`Inst NAME [INSTALLED] (NEW SUITE [ARCH])` when a version is replaced).
pub fn parse_simulation(out: &str) -> Simulation {
    let mut sim = Simulation::default();
    for line in out.lines() {
        let mut words = line.split_whitespace();
        match (words.next(), words.next()) {
            (Some("Inst"), Some(name)) => {
                sim.install.push(name.to_owned());
                let old = words
                    .next()
                    .and_then(|w| w.strip_prefix('[')?.strip_suffix(']'));
                let new = words.next().and_then(|w| w.strip_prefix('('));
                if let (Some(old), Some(new)) = (old, new) {
                    sim.replace
                        .push((name.to_owned(), old.to_owned(), new.to_owned()));
                }
            }
            (Some("Remv"), Some(name)) => sim.remove.push(name.to_owned()),
            _ => {}
        }
    }
    sim
}

/// The packages of `sim` whose new version is older than the installed one, as
/// `NAME INSTALLED -> NEW` (versions compared by `dpkg --compare-versions`).
pub fn downgrades(sim: &Simulation) -> Result<Vec<String>> {
    let sh = Shell::new()?;
    let mut out = Vec::new();
    for (name, old, new) in &sim.replace {
        let lower = exec::output(cmd!(sh, "dpkg --compare-versions {new} lt {old}"))?;
        if lower.status.success() {
            out.push(format!("{name} {old} -> {new}"));
        }
    }
    Ok(out)
}

/// The backports suite an installed version came from (`~bpo12+1` on bookworm), if any.
pub fn backports_suite(installed_version: &str, codename: &str) -> Option<String> {
    installed_version
        .contains("~bpo")
        .then(|| format!("{codename}-backports"))
}

/// `VERSION_CODENAME` of an `/etc/os-release`.
pub fn os_codename(os_release: &str) -> Option<String> {
    os_release.lines().find_map(|l| {
        l.strip_prefix("VERSION_CODENAME=")
            .map(|v| v.trim().trim_matches('"').to_owned())
            .filter(|v| !v.is_empty())
    })
}

/// One way of running apt-get: the system's sources, or those plus a backports suite as the
/// target release.
#[derive(Debug)]
pub struct Apt {
    /// `-o` options (a temporary source list and its own lists directory) and `-t SUITE`.
    options: Vec<String>,
    /// The target release (`-t SUITE`), when not the default.
    suite: Option<String>,
    verbose: bool,
    /// Keeps the temporary source list and lists alive.
    _dir: Option<tempfile::TempDir>,
}

impl Apt {
    /// apt-get with the system's configuration.
    pub fn system(verbose: bool) -> Self {
        Self {
            options: Vec::new(),
            suite: None,
            verbose,
            _dir: None,
        }
    }

    /// apt-get that also sees `suite` (e.g. `bookworm-backports`) from the Debian mirror,
    /// through a temporary source list and lists directory, and takes it as the target
    /// release (`-t suite`: every package of the plan, dependencies included, from that suite
    /// where it has the package). The system's apt configuration is not changed.
    pub fn with_suite(suite: &str, verbose: bool) -> Result<Self> {
        let dir = tempfile::Builder::new().prefix("xtask-apt-").tempdir()?;
        let lists = dir.path().join("lists");
        std::fs::create_dir_all(lists.join("partial"))?;
        // The system's one-line sources (if any) plus the suite; sources.list.d stays in use.
        let mut sources = std::fs::read_to_string("/etc/apt/sources.list").unwrap_or_default();
        sources.push_str(&format!("\ndeb {MIRROR} {suite} main\n"));
        let list = dir.path().join("sources.list");
        std::fs::write(&list, sources).wrap_err_with(|| format!("writing {}", list.display()))?;
        let opt = |k: &str, v: &Path| format!("{k}={}", v.display());
        Ok(Self {
            options: vec![
                "-o".into(),
                opt("Dir::Etc::sourcelist", &list),
                "-o".into(),
                opt("Dir::State::lists", &lists),
                // The temporary directory is root's; apt's download sandbox user cannot use it.
                "-o".into(),
                "APT::Sandbox::User=root".into(),
                "-t".into(),
                suite.to_owned(),
            ],
            suite: Some(suite.to_owned()),
            verbose,
            _dir: Some(dir),
        })
    }

    /// `apt-get update`.
    pub fn update(&self) -> Result<()> {
        let sh = Shell::new()?;
        let o = &self.options;
        let what = match &self.suite {
            Some(s) => format!("apt-get update (with {s})"),
            None => "apt-get update".to_owned(),
        };
        self.step(&what, cmd!(sh, "apt-get {o...} update -q"))
    }

    /// `apt-get -s install`: what installing `pkgs` would do (nothing is changed).
    pub fn simulate(&self, pkgs: &[String]) -> Result<Simulation> {
        let sh = Shell::new()?;
        let o = &self.options;
        let out = exec::run(cmd!(
            sh,
            "apt-get {o...} -s install --no-install-recommends {pkgs...}"
        ))
        .wrap_err("apt-get could not plan the installation")?;
        Ok(parse_simulation(&out))
    }

    /// `apt-get install --no-remove`: installs `pkgs`, never removing (nor, without
    /// `--allow-downgrades`, downgrading) anything.
    pub fn install(&self, pkgs: &[String]) -> Result<()> {
        let sh = Shell::new()?;
        let _env = sh.push_env("DEBIAN_FRONTEND", "noninteractive");
        let o = &self.options;
        self.step(
            &format!("installing {}", pkgs.join(" ")),
            cmd!(
                sh,
                "apt-get {o...} install -y -q --no-install-recommends --no-remove {pkgs...}"
            ),
        )
    }

    /// Runs one apt step: a line when it starts and when it ends, apt's own output only with
    /// `--verbose` or when it fails.
    fn step(&self, what: &str, c: xshell::Cmd<'_>) -> Result<()> {
        let t = Instant::now();
        if self.verbose {
            println!("deps: {what}");
            return exec::run_loud(c, exec::INSTALL_TIMEOUT);
        }
        let shown = c.to_string();
        let out = exec::output_with(c, None, exec::INSTALL_TIMEOUT)?;
        if !out.status.success() {
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            bail!(
                "deps: {what} failed: `{shown}` ({}):\n{}",
                out.status,
                exec::tail(text.trim(), 3000)
            );
        }
        println!("deps: {what}: done ({})", secs(t.elapsed()));
        Ok(())
    }
}

fn secs(d: Duration) -> String {
    format!("{:.0} s", d.as_secs_f64())
}

/// Installed versions of `pkgs` (`dpkg-query`), by name.
pub fn installed_versions(pkgs: &[String]) -> Result<BTreeMap<String, String>> {
    let sh = Shell::new()?;
    let fmt = "${Package}\t${Version}\n";
    let out = exec::output(cmd!(sh, "dpkg-query -W --showformat={fmt} {pkgs...}"))?;
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once('\t'))
        .map(|(n, v)| (n.to_owned(), v.trim().to_owned()))
        .collect())
}

/// This machine's Debian codename (`bookworm`).
pub fn codename() -> Option<String> {
    os_codename(&std::fs::read_to_string("/etc/os-release").ok()?)
}

/// Installs `missing`, never removing or downgrading anything; see the module docs.
pub fn install(missing: &[String], verbose: bool) -> Result<()> {
    let apt = Apt::system(verbose);
    apt.update()?;
    let sim = apt.simulate(missing)?;
    if sim.remove.is_empty() {
        refuse_downgrades(&sim, missing)?;
        return apt.install(missing);
    }
    // Which of the wanted packages make apt remove something, and where those came from.
    let mut plain = Vec::new();
    let mut culprits = Vec::new();
    for p in missing {
        if apt.simulate(std::slice::from_ref(p))?.remove.is_empty() {
            plain.push(p.clone());
        } else {
            culprits.push(p.clone());
        }
    }
    let versions = installed_versions(&sim.remove)?;
    let conflict = || {
        let removed: Vec<String> = versions.iter().map(|(n, v)| format!("{n} {v}")).collect();
        format!(
            "installing {} would make apt remove {} (installed here); `cargo xtask deps` never \
             removes or downgrades packages. Install a {} that fits the installed package (same \
             suite), or remove the conflicting package yourself if nothing needs it",
            culprits.join(" "),
            removed.join(", "),
            culprits.join("/"),
        )
    };
    let suite = codename().and_then(|c| versions.values().find_map(|v| backports_suite(v, &c)));
    let Some(suite) = suite else {
        bail!("deps: {}", conflict());
    };
    println!(
        "deps: {} would remove {} (from {suite}): installing {} from {suite} instead",
        culprits.join(" "),
        sim.remove.join(" "),
        culprits.join(" ")
    );
    if !plain.is_empty() {
        let sim = apt.simulate(&plain)?;
        refuse_downgrades(&sim, &plain)?;
        apt.install(&plain)?;
    }
    let bpo = Apt::with_suite(&suite, verbose)?;
    bpo.update()?;
    let sim = bpo
        .simulate(&culprits)
        .wrap_err_with(|| format!("deps: {}", conflict()))?;
    if !sim.remove.is_empty() {
        bail!(
            "deps: {} (and from {suite} it would still remove {})",
            conflict(),
            sim.remove.join(" ")
        );
    }
    refuse_downgrades(&sim, &culprits)?;
    println!(
        "deps: from {suite} (target release): {}",
        sim.install.join(" ")
    );
    bpo.install(&culprits)
}

/// Fails, naming each package, when the plan `sim` for `wanted` would downgrade anything.
fn refuse_downgrades(sim: &Simulation, wanted: &[String]) -> Result<()> {
    let down = downgrades(sim)?;
    if down.is_empty() {
        return Ok(());
    }
    bail!(
        "deps: installing {} would downgrade {}; `cargo xtask deps` never removes or downgrades \
         packages. Install {} yourself in a version that fits what is installed",
        wanted.join(" "),
        down.join(", "),
        wanted.join("/")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_simulation_names_what_apt_would_install_and_remove() {
        let out = "NOTE: This is only a simulation!\n\
Remv qemu-utils [1:10.0.2+ds-2+deb13u1~bpo12+1]\n\
Inst qemu-system-common (1:7.2+dfsg-7+deb12u18+b3 Debian:12.11/oldstable [amd64])\n\
Inst qemu-system-x86 (1:7.2+dfsg-7+deb12u18+b3 Debian:12.11/oldstable [amd64])\n\
Conf qemu-system-x86 (1:7.2+dfsg-7+deb12u18+b3 Debian:12.11/oldstable [amd64])\n";
        let sim = parse_simulation(out);
        assert_eq!(sim.remove, ["qemu-utils"]);
        assert_eq!(sim.install, ["qemu-system-common", "qemu-system-x86"]);
        assert_eq!(
            parse_simulation("0 upgraded, 0 newly installed\n"),
            Simulation::default()
        );
    }

    #[test]
    fn backports_versions_name_their_suite() {
        assert_eq!(
            backports_suite("1:10.0.2+ds-2+deb13u1~bpo12+1", "bookworm").as_deref(),
            Some("bookworm-backports")
        );
        assert_eq!(
            backports_suite("1:7.2+dfsg-7+deb12u18+b3", "bookworm"),
            None
        );
        let os = "PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nVERSION_CODENAME=bookworm\nID=debian\n";
        assert_eq!(os_codename(os).as_deref(), Some("bookworm"));
        assert_eq!(os_codename("ID=debian\nVERSION_CODENAME=\n"), None);
    }

    #[test]
    fn a_simulation_names_the_versions_it_replaces() {
        let out = "Inst libc6 [2.36-9+deb12u9] (2.36-9+deb12u10 Debian:12.12/oldstable [amd64])\n\
Inst seabios (1.16.3-2~bpo12+1 Debian Backports:bookworm-backports [all])\n";
        let sim = parse_simulation(out);
        assert_eq!(sim.install, ["libc6", "seabios"]);
        assert_eq!(
            sim.replace,
            [(
                "libc6".to_owned(),
                "2.36-9+deb12u9".to_owned(),
                "2.36-9+deb12u10".to_owned()
            )]
        );
    }

    #[test]
    fn downgrades_are_named_and_upgrades_are_not() {
        let sim = parse_simulation(
            "Inst qemu-utils [1:10.0.2+ds-2+deb13u1~bpo12+1] (1:7.2+dfsg-7+deb12u18 Debian:12.12/oldstable [amd64])\n\
Inst libc6 [2.36-9+deb12u9] (2.36-9+deb12u10 Debian:12.12/oldstable [amd64])\n",
        );
        assert_eq!(
            downgrades(&sim).unwrap(),
            ["qemu-utils 1:10.0.2+ds-2+deb13u1~bpo12+1 -> 1:7.2+dfsg-7+deb12u18"]
        );
        let err = refuse_downgrades(&sim, &["qemu-system-x86".to_owned()])
            .unwrap_err()
            .to_string();
        assert!(err.contains("would downgrade qemu-utils"), "{err}");
        assert!(refuse_downgrades(&Simulation::default(), &[]).is_ok());
    }

    #[test]
    fn a_suite_apt_takes_that_suite_as_target_release_through_its_own_source_list() {
        let apt = Apt::with_suite("bookworm-backports", false).unwrap();
        // `-t SUITE`: the whole plan, dependencies included, resolves from the suite.
        let t = apt.options.iter().position(|o| o == "-t").unwrap();
        assert_eq!(apt.options[t + 1], "bookworm-backports");
        assert!(!Apt::system(false).options.contains(&"-t".to_owned()));
        let list = apt
            .options
            .iter()
            .find_map(|o| o.strip_prefix("Dir::Etc::sourcelist="))
            .unwrap();
        let text = std::fs::read_to_string(list).unwrap();
        assert!(text.ends_with("deb http://deb.debian.org/debian bookworm-backports main\n"));
    }
}
