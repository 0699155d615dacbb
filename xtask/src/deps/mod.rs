//! `cargo xtask deps [--check] [--verbose]`: the Debian packages (and cargo tools) the build,
//! the run, the VM guests and the packaging need.
//!
//! apt never removes or downgrades a package here ([`apt`]), and every program the project runs
//! is in [`tools::TOOLS`] with its package (a test keeps that true).

pub mod apt;
pub mod tools;

use std::collections::HashSet;
use std::time::Duration;

use clap::{Args, ValueEnum};
use color_eyre::eyre::{Result, WrapErr as _, bail};
use xshell::{Shell, cmd};

use crate::exec;

/// A group of packages, needed by a family of commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Group {
    /// Building the workspace (ibverbs-sys runs cmake, make and bindgen; binaries link libibverbs).
    Build,
    /// Running against RDMA here or in the guests (providers incl. librxe, `ip`/`rdma`, perftest).
    Run,
    /// QEMU guests with the Debian kernel (busybox initramfs, depmod, cpio, module decompressors,
    /// vde_switch for three or more).
    Vm,
    /// `cargo xtask dist`: cargo-deb (and dpkg-shlibdeps for its `$auto`), systemd-analyze, and
    /// `man` for `systemd-analyze verify` of the unit's `Documentation=man:` (pkg-test's guest).
    Dist,
    /// `cargo xtask fabric-e2e`: munge and a minimal Slurm (slurmctld, slurmd, srun) in the guests.
    Slurm,
    /// `cargo xtask bench`: a TrueType font for the plots' text (DejaVu Sans).
    Bench,
    /// `cargo xtask k8s-validate`: python3 and its venv, for the pinned `kubernetes-validate`.
    K8s,
    /// `cargo xtask prometheus-check`: promtool (Debian's prometheus package; its service is not
    /// started here) for the mesh's alerting rules, amtool and Alertmanager
    /// (prometheus-alertmanager) for its inhibit rules.
    Prometheus,
    /// `cargo xtask fresh-root`: debootstrap (the new machine) and git (which files to copy).
    FreshRoot,
    /// Guests beyond one RoCE NIC (`cargo xtask vm-smoke --transport siw`, `--capture`): the
    /// out-of-tree soft-iWARP build for the guest kernel (gcc, make, xz-utils for its source
    /// tarball; the kernel's own `linux-headers-RELEASE` is installed by that build, as its
    /// name follows the guest kernel), rping (rdmacm-utils) and tcpdump in the guests.
    Transports,
}

/// A cargo subcommand installed with `cargo install --locked`.
#[derive(Clone, Copy, Debug)]
pub struct CargoTool {
    /// The program (`cargo-deb`).
    pub bin: &'static str,
    /// The crate, with a pinned version where the project relies on its behaviour.
    pub krate: &'static str,
}

/// cargo-deb: builds the .deb packages (`cargo xtask dist`).
pub const CARGO_DEB: CargoTool = CargoTool {
    bin: "cargo-deb",
    krate: "cargo-deb@3.8.0",
};
/// cargo-fuzz: runs the parser fuzz target (`cargo xtask fuzz`).
pub const CARGO_FUZZ: CargoTool = CargoTool {
    bin: "cargo-fuzz",
    krate: "cargo-fuzz",
};

impl Group {
    /// Every group.
    pub const ALL: [Group; 10] = [
        Group::Build,
        Group::Run,
        Group::Vm,
        Group::Dist,
        Group::Slurm,
        Group::Bench,
        Group::K8s,
        Group::Prometheus,
        Group::FreshRoot,
        Group::Transports,
    ];

    /// Debian package names.
    pub fn packages(self) -> &'static [&'static str] {
        match self {
            Group::Build => &[
                "gcc",
                "libc6-dev",
                "make",
                "cmake",
                "clang",
                "libclang-dev",
                "pkg-config",
                "libibverbs-dev",
                // rdma-core-rs's build script binds RDMA CM over the system's librdmacm header.
                "librdmacm-dev",
            ],
            Group::Run => &[
                "rdma-core",
                // The binaries link librdmacm (RDMA CM connection mode).
                "librdmacm1",
                "ibverbs-utils",
                "ibverbs-providers",
                "iproute2",
                "kmod",
                "perftest",
                "valgrind",
            ],
            Group::Vm => &[
                "qemu-system-x86",
                // Three or more guests' shared segment (a hub on a unix socket).
                "vde2",
                "busybox-static",
                "kmod",
                "cpio",
                "xz-utils",
                "zstd",
            ],
            // man-db: `systemd-analyze verify` (pkg-test's guest, over the host's root) checks
            // the unit's `Documentation=man:` pages with `man`, and fails without it.
            Group::Dist => &["dpkg-dev", "systemd", "man-db"],
            // The fabric phase's mesh stops one node's server with pkill.
            Group::Slurm => &["slurm-wlm", "munge", "procps"],
            Group::Bench => &["fonts-dejavu-core"],
            Group::K8s => &["python3", "python3-venv"],
            Group::Prometheus => &["prometheus", "prometheus-alertmanager"],
            Group::FreshRoot => &["debootstrap", "git"],
            Group::Transports => &["gcc", "make", "xz-utils", "rdmacm-utils", "tcpdump"],
        }
    }

    /// Cargo subcommands the group needs.
    pub fn cargo_tools(self) -> &'static [CargoTool] {
        match self {
            Group::Dist => &[CARGO_DEB],
            Group::Build
            | Group::Run
            | Group::Vm
            | Group::Slurm
            | Group::Bench
            | Group::K8s
            | Group::Prometheus
            | Group::FreshRoot
            | Group::Transports => &[],
        }
    }

    /// `(program, package)` pairs of the group, checked when dpkg is not available.
    pub fn tools(self) -> Vec<(&'static str, &'static str)> {
        tools::TOOLS
            .iter()
            .filter(|(_, p)| self.packages().contains(p))
            .copied()
            .collect()
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
    /// Show apt's and cargo's own output (default: one line per step).
    #[arg(long, short)]
    pub verbose: bool,
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
        let mut missing = missing(&groups)?;
        missing.extend(
            groups
                .iter()
                .flat_map(|g| g.cargo_tools())
                .filter(|t| exec::which(t.bin).is_none())
                .map(|t| t.bin),
        );
        // Installed is not enough: each program the project runs must be on PATH.
        let programs: Vec<String> = groups
            .iter()
            .flat_map(|g| g.tools())
            .filter(|(t, _)| exec::which(t).is_none())
            .map(|(t, p)| format!("{t} (from {p})"))
            .collect();
        if missing.is_empty() && !programs.is_empty() {
            bail!("deps: installed, but not on PATH: {}", programs.join(", "));
        }
        if missing.is_empty() {
            println!("deps: all {total} packages present ({names})");
            return Ok(());
        }
        bail!(
            "deps: missing {}; run `cargo xtask deps` (as root) to install them",
            missing.join(" ")
        );
    }
    let installed = install_missing(&groups, args.verbose)?;
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
    install_missing(groups, false).map(|_| ())
}

/// [`ensure`], returning what it installed.
pub fn install_missing(groups: &[Group], verbose: bool) -> Result<Vec<&'static str>> {
    let mut done = install_packages(groups, verbose)?;
    for tool in groups.iter().flat_map(|g| g.cargo_tools()) {
        if ensure_cargo_tool(tool, verbose)? {
            done.push(tool.bin);
        }
    }
    Ok(done)
}

fn install_packages(groups: &[Group], verbose: bool) -> Result<Vec<&'static str>> {
    if exec::which("dpkg-query").is_none() {
        // Not Debian: we cannot install, but we can check for the tools themselves.
        let tools: Vec<_> = groups.iter().flat_map(|g| g.tools()).collect();
        exec::require_tools(&tools)?;
        return Ok(Vec::new());
    }
    let missing = missing(groups)?;
    if missing.is_empty() {
        return Ok(missing);
    }
    let list = missing.join(" ");
    let command = format!(
        "apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends --no-remove {list}"
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
    let owned: Vec<String> = missing.iter().map(|s| (*s).to_owned()).collect();
    apt::install(&owned, verbose)?;
    let still = self::missing(groups)?;
    if !still.is_empty() {
        bail!(
            "apt-get reported success but these are still not installed: {}",
            still.join(" ")
        );
    }
    Ok(missing)
}

/// Installs a cargo subcommand once (`cargo install --locked`); true when it installed it.
pub fn ensure_cargo_tool(tool: &CargoTool, verbose: bool) -> Result<bool> {
    if exec::which(tool.bin).is_some() {
        return Ok(false);
    }
    println!(
        "deps: installing {} (cargo install, once: a few minutes)",
        tool.krate
    );
    let sh = Shell::new()?;
    let krate = tool.krate;
    let c = cmd!(sh, "cargo install --locked {krate}");
    let timeout = Duration::from_secs(1800);
    if verbose {
        exec::run_loud(c, timeout)
    } else {
        let shown = c.to_string();
        let out = exec::output_with(c, None, timeout)?;
        exec::check_output(&shown, &out)
    }
    .wrap_err_with(|| format!("installing {}", tool.krate))?;
    if exec::which(tool.bin).is_none() {
        bail!(
            "`cargo install {}` succeeded but {} is not on PATH: add ~/.cargo/bin to PATH",
            tool.krate,
            tool.bin
        );
    }
    Ok(true)
}

/// The packages of `groups` that dpkg does not report as installed.
pub fn missing(groups: &[Group]) -> Result<Vec<&'static str>> {
    let mut pkgs: Vec<&'static str> = groups
        .iter()
        .flat_map(|g| g.packages().iter().copied())
        .collect();
    pkgs.sort_unstable();
    pkgs.dedup();
    let sh = Shell::new()?;
    // dpkg-query exits 1 when a package is unknown; we read stdout regardless.
    let fmt = "${Package}\t${db:Status-Status}\n";
    let list = &pkgs;
    let out = exec::output(cmd!(sh, "dpkg-query -W --showformat={fmt} {list...}"))?;
    let installed = parse_dpkg_query(&String::from_utf8_lossy(&out.stdout));
    Ok(pkgs
        .into_iter()
        .filter(|p| !installed.contains(*p))
        .collect())
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
        // make and iproute2: a debootstrap minbase root lacks both (cmake's build of the
        // vendored rdma-core runs make; the guests run ip and rdma).
        for p in [
            "make",
            "iproute2",
            "cmake",
            "libibverbs-dev",
            "perftest",
            "qemu-system-x86",
            "busybox-static",
            "kmod",
            "cpio",
            "dpkg-dev",
        ] {
            assert!(all.contains(&p), "{p}");
        }
        assert_eq!(Group::Dist.cargo_tools()[0].bin, "cargo-deb");
        assert!(Group::Run.tools().contains(&("rdma", "iproute2")));
    }
}
