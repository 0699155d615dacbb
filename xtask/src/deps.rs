//! `cargo xtask deps [--check]`: the Debian packages the build, the run and the VM guests need.

use std::collections::HashSet;

use clap::{Args, ValueEnum};
use color_eyre::eyre::{Result, bail};
use xshell::{Shell, cmd};

use crate::exec;

/// A group of packages, needed by a family of commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Group {
    /// Building the workspace (ibverbs-sys runs cmake + bindgen; binaries link libibverbs).
    Build,
    /// Running against RDMA on this host (providers incl. librxe, `rdma`, perftest).
    Run,
    /// QEMU guests with the Debian kernel (busybox initramfs, depmod, cpio).
    Vm,
}

impl Group {
    /// Every group.
    pub const ALL: [Group; 3] = [Group::Build, Group::Run, Group::Vm];

    /// Debian package names.
    pub fn packages(self) -> &'static [&'static str] {
        match self {
            Group::Build => &[
                "cmake",
                "clang",
                "libclang-dev",
                "pkg-config",
                "libibverbs-dev",
            ],
            Group::Run => &[
                "rdma-core",
                "ibverbs-utils",
                "ibverbs-providers",
                "perftest",
                "valgrind",
            ],
            Group::Vm => &["qemu-system-x86", "busybox-static", "kmod", "cpio"],
        }
    }

    /// `(tool, package)` pairs used when dpkg is not available (non-Debian hosts).
    pub fn tools(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Group::Build => &[
                ("cmake", "cmake"),
                ("clang", "clang"),
                ("pkg-config", "pkg-config"),
            ],
            Group::Run => &[
                ("rdma", "iproute2"),
                ("ibv_devinfo", "ibverbs-utils"),
                ("ib_write_bw", "perftest"),
                ("valgrind", "valgrind"),
            ],
            Group::Vm => &[
                ("qemu-system-x86_64", "qemu-system-x86"),
                ("busybox", "busybox-static"),
                ("depmod", "kmod"),
                ("cpio", "cpio"),
            ],
        }
    }
}

/// Arguments of `cargo xtask deps`.
#[derive(Debug, Args)]
pub struct DepsArgs {
    /// Only report what is missing (exit status 1 if anything is); install nothing.
    #[arg(long)]
    pub check: bool,
    /// Groups to consider (default: all).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub groups: Vec<Group>,
}

/// Entry point of `cargo xtask deps`.
pub fn cmd(args: &DepsArgs) -> Result<()> {
    let groups = if args.groups.is_empty() {
        Group::ALL.to_vec()
    } else {
        args.groups.clone()
    };
    let names = groups
        .iter()
        .map(|g| format!("{g:?}").to_lowercase())
        .collect::<Vec<_>>()
        .join(", ");
    let total: usize = groups.iter().map(|g| g.packages().len()).sum();
    if args.check {
        let missing = missing(&groups)?;
        if missing.is_empty() {
            println!("deps: all {total} packages present ({names})");
            return Ok(());
        }
        bail!(
            "deps: missing {}; run `cargo xtask deps` (as root) to install them",
            missing.join(" ")
        );
    }
    let installed = install_missing(&groups)?;
    if installed.is_empty() {
        println!("deps: all {total} packages present ({names})");
    } else {
        println!("deps: installed {}", installed.join(" "));
    }
    Ok(())
}

/// Makes sure the packages of `groups` are installed, installing the missing ones when root
/// with apt (otherwise fails with the exact command to run). Silent when all is present.
pub fn ensure(groups: &[Group]) -> Result<()> {
    install_missing(groups).map(|_| ())
}

/// [`ensure`], returning what it installed.
pub fn install_missing(groups: &[Group]) -> Result<Vec<&'static str>> {
    if exec::which("dpkg-query").is_none() {
        // Not Debian: we cannot install, but we can check for the tools themselves.
        let tools: Vec<_> = groups
            .iter()
            .flat_map(|g| g.tools().iter().copied())
            .collect();
        exec::require_tools(&tools)?;
        return Ok(Vec::new());
    }
    let missing = missing(groups)?;
    if missing.is_empty() {
        return Ok(missing);
    }
    let list = missing.join(" ");
    let command = format!(
        "apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends {list}"
    );
    // SAFETY: geteuid has no preconditions and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        bail!("missing packages: {list}; not root, so run as root:\n    {command}");
    }
    if exec::which("apt-get").is_none() {
        bail!(
            "missing packages: {list}, and there is no apt-get here; install them with your package manager"
        );
    }
    eprintln!("deps: installing {list}");
    let sh = Shell::new()?;
    let _env = sh.push_env("DEBIAN_FRONTEND", "noninteractive");
    exec::run_loud(cmd!(sh, "apt-get update -q"), exec::INSTALL_TIMEOUT)?;
    let args = &missing;
    exec::run_loud(
        cmd!(
            sh,
            "apt-get install -y -q --no-install-recommends {args...}"
        ),
        exec::INSTALL_TIMEOUT,
    )?;
    let still = self::missing(groups)?;
    if !still.is_empty() {
        bail!(
            "apt-get reported success but these are still not installed: {}",
            still.join(" ")
        );
    }
    Ok(missing)
}

/// The packages of `groups` that dpkg does not report as installed.
pub fn missing(groups: &[Group]) -> Result<Vec<&'static str>> {
    let pkgs: Vec<&'static str> = groups
        .iter()
        .flat_map(|g| g.packages().iter().copied())
        .collect();
    let sh = Shell::new()?;
    // dpkg-query exits 1 when a package is unknown; we read stdout regardless.
    let fmt = "${Package}\t${db:Status-Status}\n";
    let list = &pkgs;
    let out = exec::output(cmd!(sh, "dpkg-query -W --showformat={fmt} {list...}"))?;
    let installed = parse_dpkg_query(&String::from_utf8_lossy(&out.stdout));
    let mut missing: Vec<_> = pkgs
        .into_iter()
        .filter(|p| !installed.contains(*p))
        .collect();
    missing.dedup();
    Ok(missing)
}

/// Parses `dpkg-query -W -f='${Package}\t${db:Status-Status}\n'` into the set of installed
/// package names (architecture qualifiers like `:amd64` stripped).
pub fn parse_dpkg_query(out: &str) -> HashSet<String> {
    out.lines()
        .filter_map(|l| l.split_once('\t'))
        .filter(|(_, status)| status.trim() == "installed")
        .map(|(name, _)| name.split(':').next().unwrap_or(name).trim().to_owned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dpkg_query_parsing() {
        let out = "cmake\tinstalled\nclang\tconfig-files\nlibibverbs-dev:amd64\tinstalled\nkmod\tnot-installed\n";
        let set = parse_dpkg_query(out);
        assert!(set.contains("cmake"));
        assert!(set.contains("libibverbs-dev"));
        assert!(!set.contains("clang"));
        assert!(!set.contains("kmod"));
        assert_eq!(set.len(), 2);
    }

    #[test]
    fn groups_cover_the_brief() {
        let all: Vec<_> = Group::ALL
            .iter()
            .flat_map(|g| g.packages().iter().copied())
            .collect();
        for p in [
            "cmake",
            "libibverbs-dev",
            "perftest",
            "qemu-system-x86",
            "busybox-static",
            "kmod",
            "cpio",
        ] {
            assert!(all.contains(&p), "{p}");
        }
    }
}
