//! QEMU guests that run the host's userland on a Debian kernel with rdma_rxe.
//!
//! [`prepare`] makes the kernel and initramfs (cached); [`run_guests`] boots guests on one
//! virtual L2 link (`-netdev socket` over 127.0.0.1, or a hub on a unix socket), each with a per-guest results share and
//! a run-wide sync share, and a hard deadline; [`run_plans`] is the same with a
//! [`Plan`](crate::plan::Plan) per guest, run by `guest-agent`.
//!
//! The parts: [`kernel`] and [`initramfs`] (what the guests boot), [`qemu`] (one QEMU's
//! command line and process), [`console`] (its output), [`guest`] (one guest from start to
//! outcome), [`rundir`] (the run's directory), [`plans`] (guests that run plans),
//! [`run_cmd`] (`cargo xtask vm-run`).

mod console;
mod guest;
mod hub;
pub mod initramfs;
pub mod kernel;
mod plans;
mod qemu;
pub mod run_cmd;
mod rundir;
pub mod siw;
mod wire;

pub use plans::{PlanGuest, PlanRun, run_plans, run_plans_booted, run_plans_on};
pub use wire::{Net, mac};

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use color_eyre::eyre::{Result, WrapErr, bail, eyre};
use indicatif::{MultiProgress, ProgressStyle};

use crate::backend::{self, Accel};
use crate::deps::{self, Group};
use crate::exec;
use guest::{Boot, Guest};
use rundir::RunDir;

/// The environment variable that pins every guest's QEMU to these host CPUs (a list such as
/// `0` or `0,1`): `cargo xtask test --slow-guests` sets `0`, so that all guests share one core
/// and run at a fraction of their speed, which proves the suite's deadlines have headroom.
pub const GUEST_CPUS_ENV: &str = "XTASK_GUEST_CPUS";

/// The CPU set of [`GUEST_CPUS_ENV`], if it is set; an error names a list that is no list.
pub fn pinned_cpus() -> Result<Option<libc::cpu_set_t>> {
    let Some(list) = std::env::var_os(GUEST_CPUS_ENV) else {
        return Ok(None);
    };
    let list = list.to_string_lossy();
    let cpus = parse_cpu_list(&list).map_err(|e| {
        eyre!("{GUEST_CPUS_ENV}={list:?}: {e}; give host CPU numbers such as `0` or `0,1`")
    })?;
    // SAFETY: cpu_set_t is a plain bit array; all zeroes is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for c in cpus {
        // SAFETY: `c` is below CPU_SETSIZE (checked by parse_cpu_list), and `set` is ours.
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    Ok(Some(set))
}

/// `0,2` as CPU numbers: at least one, each below `CPU_SETSIZE`.
fn parse_cpu_list(list: &str) -> std::result::Result<Vec<usize>, String> {
    let cpus = list
        .split(',')
        .map(|c| {
            let n: usize = c
                .trim()
                .parse()
                .map_err(|_| format!("{c:?} is not a CPU number"))?;
            if n >= libc::CPU_SETSIZE as usize {
                return Err(format!("CPU {n} is past the last one a set can hold"));
            }
            Ok(n)
        })
        .collect::<std::result::Result<Vec<_>, _>>()?;
    Ok(cpus)
}

/// The vCPUs each of `guests` guests gets on a host with `host` CPUs: the host's CPUs shared
/// out (TCG runs each vCPU on a host thread), at least one, at most two. A guest alone (the
/// one-node e2e, where server and client run side by side) gets both cores of a 2-core host;
/// two or more get one each, as before.
pub fn vcpus(guests: usize, host: usize) -> usize {
    (host / guests.max(1)).clamp(1, 2)
}

/// The CPUs this process may run on (its affinity), at least one.
fn host_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
}

/// What runs as the guest's PID 1 once the host root is mounted (`xtask.init=` on the kernel
/// command line; see `init.sh`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Init {
    /// Busybox's `/init` chroots into the root, runs the command and powers off.
    #[default]
    Busybox,
    /// `switch_root` into the root with the host's systemd as PID 1: the basic system, then
    /// the command in `xtask-guest.service`, which powers off (units that cannot work in a
    /// guest of the host's root, such as udev, the host's network and timers, masked).
    Systemd,
}

impl Init {
    /// The value of `xtask.init=`.
    pub fn as_str(self) -> &'static str {
        match self {
            Init::Busybox => "busybox",
            Init::Systemd => "systemd",
        }
    }
}

/// One guest.
#[derive(Clone, Debug)]
pub struct GuestSpec {
    /// Short name (hostname, console prefix, share directory name).
    pub name: String,
    /// MAC of each virtio-net NIC (eth0 first), e.g. `52:54:00:12:34:01`; as many as the
    /// run's [`Net`] has NICs.
    pub macs: Vec<String>,
    /// The command /init runs in the chroot (absolute program path; no spaces or commas).
    pub argv: Vec<String>,
    /// Guest memory.
    pub mem_mb: u32,
    /// Hard deadline for the whole guest (boot included); the QEMU is killed after it.
    pub timeout: Duration,
    /// Files written into the guest's share before boot (name, contents).
    pub files: Vec<(String, Vec<u8>)>,
    /// Its PID 1 after the initramfs.
    pub init: Init,
}

impl GuestSpec {
    /// A guest named `name` with one NIC whose MAC ends in `index` (1-based), 1 GiB, 120 s.
    pub fn new(name: &str, index: u8, argv: Vec<String>) -> Self {
        Self::with_nics(name, index, 1, argv)
    }

    /// [`new`](Self::new) with `nics` NICs (MACs from [`mac`]).
    pub fn with_nics(name: &str, index: u8, nics: usize, argv: Vec<String>) -> Self {
        Self {
            name: name.to_owned(),
            macs: (0..nics).map(|k| mac(index, k)).collect(),
            argv,
            mem_mb: 1024,
            timeout: Duration::from_secs(120),
            files: Vec::new(),
            init: Init::Busybox,
        }
    }
}

/// Options shared by all guests of a run (also the flags of the commands that boot guests).
#[derive(Clone, Debug, Default, clap::Args)]
pub struct VmOptions {
    /// Stream the guest consoles, prefixed with the guest name.
    #[arg(long, short)]
    pub verbose: bool,
    /// Keep the run directory (plans, results, shares, console logs) instead of removing it.
    #[arg(long)]
    pub keep: bool,
}

/// Flags of the commands that boot guests themselves (`vm-smoke`, `vm-run`).
#[derive(Clone, Debug, clap::Args)]
pub struct GuestFlags {
    #[command(flatten)]
    pub vm: VmOptions,
    /// Hard deadline per guest, seconds.
    #[arg(long, default_value_t = 120)]
    pub timeout: u64,
}

/// What one guest did.
#[derive(Clone, Debug)]
pub struct GuestOutcome {
    pub name: String,
    /// Exit code of the command, as recorded by /init; `None` if it never got there.
    pub exit_code: Option<i32>,
    /// True when we killed it at its deadline.
    pub timed_out: bool,
    /// That deadline (boot included).
    pub deadline: Duration,
    /// The last lines of its console.
    pub console_tail: String,
    /// Its share directory on the host (valid while the [`GuestRun`] lives).
    pub share_dir: PathBuf,
    /// Time from QEMU start to the command starting (from the console), if seen.
    pub boot: Option<Duration>,
    /// Time from QEMU start to exit.
    pub elapsed: Duration,
    /// Why we killed it before its deadline: another guest of the run had failed (its
    /// `timed_out` is true too).
    pub stopped: Option<String>,
}

/// Phase timings of preparing guests.
#[derive(Clone, Debug, Default)]
pub struct Prepared {
    pub kernel: Option<kernel::Kernel>,
    pub initramfs: PathBuf,
    /// Download + unpack (or cache lookup).
    pub kernel_time: Duration,
    pub initramfs_built: bool,
    pub initramfs_time: Duration,
    pub accel: Option<Accel>,
    pub accel_why: String,
}

/// The result of [`run_guests`]; owns the run directory (removed on drop unless kept).
#[derive(Debug)]
pub struct GuestRun {
    pub outcomes: Vec<GuestOutcome>,
    /// The directory shared by all guests (mounted at /xtask-sync).
    pub sync_dir: PathBuf,
    pub prepared: Prepared,
    /// Wall time of the boot-to-poweroff part.
    pub guests_time: Duration,
    dir: RunDir,
}

impl GuestRun {
    /// The run directory (`target/xtask/run-*`).
    pub fn dir(&self) -> &Path {
        &self.dir.path
    }
}

/// `target/xtask` of this workspace (next to the xtask binary's target dir).
pub fn xtask_dir() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| manifest.parent().unwrap_or(manifest).join("target"));
    target.join("xtask")
}

/// The workspace's target directory (honours `CARGO_TARGET_DIR`).
pub fn target_dir() -> PathBuf {
    let xtask = xtask_dir();
    xtask.parent().map_or(xtask.clone(), Path::to_path_buf)
}

/// What xtask downloads and derives only from downloads, kept across clones and `cargo clean`:
/// `rdma-write/` in the user's cache directory (`$XDG_CACHE_HOME`, else `~/.cache`), else
/// `target/xtask/cache`. Every entry is named by what it was made from (a package and its
/// version, a kernel release, a hash of the initramfs's inputs), so a cached one is the
/// download or build itself.
pub fn user_cache_dir() -> PathBuf {
    dirs::cache_dir().map_or_else(|| xtask_dir().join("cache"), |d| d.join("rdma-write"))
}

/// The VM cache: the guest kernel, its initramfs and siw.ko ([`user_cache_dir`]`/vm`).
pub fn cache_dir() -> PathBuf {
    user_cache_dir().join("vm")
}

/// Makes sure tools, kernel and initramfs are there (cached after the first run).
pub fn prepare() -> Result<Prepared> {
    deps::ensure(&[Group::Vm])?;
    exec::require_tools(&[
        ("qemu-system-x86_64", "qemu-system-x86"),
        ("apt-get", "apt"),
        ("dpkg", "dpkg"),
        ("depmod", "kmod"),
        ("cpio", "cpio"),
    ])?;
    let cache = cache_dir();
    std::fs::create_dir_all(&cache).wrap_err_with(|| format!("creating {}", cache.display()))?;
    let t = Instant::now();
    let k = kernel::ensure_kernel(&cache)?;
    let kernel_time = t.elapsed();
    let t = Instant::now();
    let (initramfs, built) = initramfs::ensure_initramfs(&k, &cache)?;
    let (accel, accel_why) = backend::detect_accel();
    Ok(Prepared {
        kernel: Some(k),
        initramfs,
        kernel_time,
        initramfs_built: built,
        initramfs_time: t.elapsed(),
        accel: Some(accel),
        accel_why,
    })
}

/// Characters allowed in `xtask.argv=` (it travels on the kernel command line).
fn check_argv(argv: &[String]) -> Result<()> {
    if argv.is_empty() {
        bail!("guest argv is empty");
    }
    for a in argv {
        if a.is_empty()
            || !a
                .chars()
                .all(|c| c.is_ascii_graphic() && c != ',' && c != '"' && c != '\'')
        {
            bail!(
                "guest argument {a:?} cannot travel on the kernel command line (no spaces, commas, quotes or non-ASCII; empty not allowed)"
            );
        }
    }
    Ok(())
}

/// A guest name travels on the kernel command line and names a directory.
fn check_name(name: &str) -> Result<()> {
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        bail!("guest name {name:?} must be non-empty ASCII letters, digits, - or _");
    }
    Ok(())
}

/// Boots `specs` together on one L2 link, waits for all (each up to its deadline), and
/// returns what each did. Two guests share a UDP link on 127.0.0.1, three or more a hub on a
/// unix socket (no IP address); one guest alone listens on a free port.
pub fn run_guests(specs: &[GuestSpec], opts: &VmOptions) -> Result<GuestRun> {
    run_guests_on(specs, &Net::default(), opts)
}

/// [`run_guests`] on `net`: every guest has `net.nics` NICs, NIC `k` on link `k` (see
/// [`wire`]), the links in `net.dead` cut.
pub fn run_guests_on(specs: &[GuestSpec], net: &Net, opts: &VmOptions) -> Result<GuestRun> {
    if specs.is_empty() {
        bail!("no guests to run");
    }
    for s in specs {
        check_name(&s.name)?;
        check_argv(&s.argv).wrap_err_with(|| format!("guest {}", s.name))?;
        if s.macs.len() != net.nics {
            bail!(
                "guest {} has {} MACs for {} NICs",
                s.name,
                s.macs.len(),
                net.nics
            );
        }
    }
    let ports = wire::free_ports(wire::ports_needed(specs.len(), net), specs.len() == 1)?;
    let links = wire::wire(specs.len(), net, &ports)?;
    let prepared = prepare()?;
    let kernel = prepared
        .kernel
        .clone()
        .ok_or_else(|| eyre!("no kernel prepared"))?;

    let base = xtask_dir();
    std::fs::create_dir_all(&base)?;
    let dir = RunDir::create(&base, opts.keep)?;
    let sync_dir = dir.path.join("sync");
    std::fs::create_dir_all(&sync_dir)?;
    // The shared segments, up before the QEMUs that join them and down after they exit.
    let hubs = wire::hubs_needed(specs.len(), net)
        .iter()
        .map(|k| hub::Hub::start(&dir.path.join(format!("hub{k}"))))
        .collect::<Result<Vec<_>>>()?;
    let hub_socks: Vec<PathBuf> = (0..net.nics)
        .map(|k| dir.path.join(format!("hub{k}")))
        .collect();

    let progress = MultiProgress::new();
    let style =
        ProgressStyle::with_template("{spinner} {msg} [{elapsed}]").map_err(|e| eyre!("{e}"))?;
    let boot = Boot {
        vmlinuz: &kernel.vmlinuz,
        initrd: &prepared.initramfs,
        accel: prepared.accel.unwrap_or(Accel::Tcg),
        run_dir: &dir.path,
        sync_dir: &sync_dir,
        hubs: &hub_socks,
        cpus: vcpus(specs.len(), host_cpus()),
        progress: &progress,
        style: &style,
        verbose: opts.verbose,
    };
    let t0 = Instant::now();
    // The guests run side by side: the run may take as long as its longest deadline.
    crate::deadline::grant(specs.iter().map(|s| s.timeout).max().unwrap_or_default());
    let mut guests = start_all(specs, &links, &boot)?;
    // Watch until every guest exited or hit its deadline. Once a guest reports failure in the
    // sync dir (its agent's marker), the others still running have deadline::STOP_GRACE left:
    // their agents stop by themselves at once, and whatever does not is killed then.
    let mut failed = false;
    loop {
        exec::check_interrupted()?;
        if !failed && let Some(f) = crate::deadline::first_failure(&sync_dir) {
            failed = true;
            let grace = crate::deadline::STOP_GRACE;
            let msg = format!(
                "{f}: stopping the run's guests (each killed if still running in {:.0} s)",
                grace.as_secs_f64()
            );
            if progress.is_hidden() {
                eprintln!("{msg}");
            } else {
                let _ = progress.println(msg);
            }
            let why = format!("stopped {:.0} s after {f}", grace.as_secs_f64());
            for g in &mut guests {
                g.stop_by(Instant::now() + grace, &why);
            }
        }
        let mut all_done = true;
        for g in &mut guests {
            all_done &= g.poll()?;
            // A guest that ended badly before its agent could say so: said for it, so that
            // the others stop rather than wait for it until their deadlines.
            if let Some(why) = g.take_ended_badly() {
                let _ = crate::deadline::report_failure(&sync_dir, g.name(), &why);
            }
        }
        if all_done {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let guests_time = t0.elapsed();
    let outcomes = guests.iter_mut().map(Guest::outcome).collect();
    drop(hubs);
    Ok(GuestRun {
        outcomes,
        sync_dir,
        prepared,
        guests_time,
        dir,
    })
}

/// Starts every guest on its links (`links[i]` for guest `i`). Guests already started are
/// killed if a later one fails to start.
fn start_all(
    specs: &[GuestSpec],
    links: &[Vec<qemu::Link>],
    boot: &Boot<'_>,
) -> Result<Vec<Guest>> {
    specs
        .iter()
        .zip(links)
        .map(|(spec, l)| Guest::start(spec, l, boot))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_guest_alone_gets_the_host_cores_and_several_share_them() {
        assert_eq!(vcpus(1, 2), 2);
        assert_eq!(vcpus(2, 2), 1);
        assert_eq!(vcpus(3, 2), 1);
        assert_eq!(vcpus(1, 1), 1);
        assert_eq!(vcpus(1, 16), 2);
        assert_eq!(vcpus(0, 2), 2);
    }

    #[test]
    fn guest_cpu_lists_are_numbers_and_name_what_is_wrong() {
        assert_eq!(parse_cpu_list("0"), Ok(vec![0]));
        assert_eq!(parse_cpu_list("0, 1"), Ok(vec![0, 1]));
        assert!(parse_cpu_list("").unwrap_err().contains("not a CPU number"));
        assert!(parse_cpu_list("one").unwrap_err().contains("\"one\""));
        assert!(parse_cpu_list("99999").unwrap_err().contains("99999"));
    }

    #[test]
    fn argv_must_fit_the_cmdline() {
        assert!(check_argv(&["/usr/bin/true".into()]).is_ok());
        assert!(check_argv(&[]).is_err());
        assert!(check_argv(&["a b".into()]).is_err());
        assert!(check_argv(&["a,b".into()]).is_err());
        assert!(check_argv(&[String::new()]).is_err());
    }

    #[test]
    fn names_must_fit_a_directory_and_the_cmdline() {
        assert!(check_name("A").is_ok() && check_name("guest-b_2").is_ok());
        assert!(check_name("").is_err());
        assert!(check_name("a b").is_err());
        assert!(check_name("../x").is_err());
    }
}
