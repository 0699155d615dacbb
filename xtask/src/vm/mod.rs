//! QEMU guests that run the host's userland on a Debian kernel with rdma_rxe.
//!
//! [`prepare`] makes the kernel and initramfs (cached); [`run_guests`] boots guests on one
//! virtual L2 link (`-netdev socket` over 127.0.0.1), each with a per-guest results share and
//! a run-wide sync share, and a hard deadline; [`run_plans`] is the same with a
//! [`Plan`](crate::plan::Plan) per guest, run by `guest-agent`.

pub mod initramfs;
pub mod kernel;
pub mod run_cmd;

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use color_eyre::eyre::{Result, WrapErr, bail, eyre};
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use xshell::{Shell, cmd};

use crate::backend::{self, Accel};
use crate::deps::{self, Group};
use crate::exec;
use crate::plan::{GUEST_SHARE, PLAN_FILE, Plan, PlanResult, RESULT_FILE};

/// One guest.
#[derive(Clone, Debug)]
pub struct GuestSpec {
    /// Short name (hostname, console prefix, share directory name).
    pub name: String,
    /// MAC of its virtio-net NIC, e.g. `52:54:00:12:34:01`.
    pub mac: String,
    /// The command /init runs in the chroot (absolute program path; no spaces or commas).
    pub argv: Vec<String>,
    /// Guest memory.
    pub mem_mb: u32,
    /// Hard deadline for the whole guest (boot included); the QEMU is killed after it.
    pub timeout: Duration,
    /// Files written into the guest's share before boot (name, contents).
    pub files: Vec<(String, Vec<u8>)>,
}

impl GuestSpec {
    /// A guest named `name` whose NIC's MAC ends in `index` (1-based), 1 GiB, 120 s.
    pub fn new(name: &str, index: u8, argv: Vec<String>) -> Self {
        Self {
            name: name.to_owned(),
            mac: format!("52:54:00:12:34:{index:02x}"),
            argv,
            mem_mb: 1024,
            timeout: Duration::from_secs(120),
            files: Vec::new(),
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
    /// The last lines of its console.
    pub console_tail: String,
    /// Its share directory on the host (valid while the [`GuestRun`] lives).
    pub share_dir: PathBuf,
    /// Time from QEMU start to the command starting (from the console), if seen.
    pub boot: Option<Duration>,
    /// Time from QEMU start to exit.
    pub elapsed: Duration,
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

#[derive(Debug)]
struct RunDir {
    path: PathBuf,
    keep: bool,
}

/// Marks a run directory as in use by a process (its pid inside); removed when the run ends.
const IN_PROGRESS: &str = ".in-progress";

impl RunDir {
    fn create(base: &Path, keep: bool) -> Result<Self> {
        remove_stale_runs(base);
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let path = base.join(format!("run-{stamp}-{}", std::process::id()));
        std::fs::create_dir_all(&path).wrap_err_with(|| format!("creating {}", path.display()))?;
        std::fs::write(path.join(IN_PROGRESS), std::process::id().to_string())?;
        Ok(Self { path, keep })
    }
}

/// Removes run directories left by xtask processes that died without cleaning up
/// (SIGKILL): they still have the in-progress marker and their pid is gone.
fn remove_stale_runs(base: &Path) {
    let Ok(it) = std::fs::read_dir(base) else {
        return;
    };
    for e in it.flatten() {
        let p = e.path();
        if !e.file_name().to_string_lossy().starts_with("run-") {
            continue;
        }
        let Ok(pid) = std::fs::read_to_string(p.join(IN_PROGRESS)) else {
            continue;
        };
        let alive = pid
            .trim()
            .parse::<u32>()
            .is_ok_and(|pid| Path::new(&format!("/proc/{pid}")).exists());
        if !alive {
            let _ = std::fs::remove_dir_all(&p);
        }
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(self.path.join(IN_PROGRESS));
        if self.keep {
            eprintln!("vm: kept run directory {}", self.path.display());
        } else if let Err(e) = std::fs::remove_dir_all(&self.path) {
            eprintln!("warning: could not remove {}: {e}", self.path.display());
        }
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

/// The VM cache (`target/xtask/vm`).
pub fn cache_dir() -> PathBuf {
    xtask_dir().join("vm")
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

/// Console state shared between the reader thread and the monitor loop.
#[derive(Debug, Default)]
struct Console {
    tail: VecDeque<String>,
    running_at: Option<Instant>,
}

/// A QEMU process, killed on drop.
#[derive(Debug)]
struct Guest {
    spec: GuestSpec,
    child: Option<Child>,
    started: Instant,
    console: Arc<Mutex<Console>>,
    reader: Option<std::thread::JoinHandle<()>>,
    share: PathBuf,
    bar: ProgressBar,
    exited: Option<(Duration, bool)>,
}

impl Drop for Guest {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Boots `specs` together on one L2 link, waits for all (each up to its deadline), and
/// returns what each did. The first guest listens on a free 127.0.0.1 port, the others connect.
pub fn run_guests(specs: &[GuestSpec], opts: &VmOptions) -> Result<GuestRun> {
    if specs.is_empty() {
        bail!("no guests to run");
    }
    for s in specs {
        check_argv(&s.argv).wrap_err_with(|| format!("guest {}", s.name))?;
        if s.name.is_empty()
            || !s
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            bail!(
                "guest name {:?} must be non-empty ASCII letters, digits, - or _",
                s.name
            );
        }
    }
    let prepared = prepare()?;
    let kernel = prepared
        .kernel
        .clone()
        .ok_or_else(|| eyre!("no kernel prepared"))?;
    let accel = prepared.accel.unwrap_or(Accel::Tcg);

    let base = xtask_dir();
    std::fs::create_dir_all(&base)?;
    let dir = RunDir::create(&base, opts.keep)?;
    let sync_dir = dir.path.join("sync");
    std::fs::create_dir_all(&sync_dir)?;

    let port = free_port()?;
    let mp = MultiProgress::new();
    let style =
        ProgressStyle::with_template("{spinner} {msg} [{elapsed}]").map_err(|e| eyre!("{e}"))?;
    let t0 = Instant::now();
    let mut guests: Vec<Guest> = Vec::new();
    for (i, spec) in specs.iter().enumerate() {
        let share = dir.path.join(&spec.name);
        std::fs::create_dir_all(&share)?;
        for (name, bytes) in &spec.files {
            std::fs::write(share.join(name), bytes)?;
        }
        let net = if i == 0 {
            format!("socket,id=n0,listen=127.0.0.1:{port}")
        } else {
            format!("socket,id=n0,connect=127.0.0.1:{port}")
        };
        let mut cmdline = format!(
            "console=ttyS0 panic=-1 oops=panic loglevel=4 xtask.name={} xtask.argv={}",
            spec.name,
            spec.argv.join(",")
        );
        if opts.verbose {
            cmdline = cmdline.replace("loglevel=4", "loglevel=6");
        }
        let sh = Shell::new()?;
        let [a0, a1, a2, a3] = accel.qemu_args();
        let vmlinuz = &kernel.vmlinuz;
        let initrd = &prepared.initramfs;
        let mem = spec.mem_mb.to_string();
        let gname = &spec.name;
        let nic = format!("virtio-net-pci,netdev=n0,mac={}", spec.mac);
        let rootfs =
            "local,path=/,mount_tag=hostroot,readonly=on,security_model=none,multidevs=remap"
                .to_owned();
        let sharefs = format!(
            "local,path={},mount_tag=xshare,security_model=none",
            share.display()
        );
        let syncfs = format!(
            "local,path={},mount_tag=xsync,security_model=none",
            sync_dir.display()
        );
        let c = cmd!(
            sh,
            "qemu-system-x86_64 -name {gname} {a0} {a1} {a2} {a3} -smp 1 -m {mem}
             -nodefaults -no-user-config -display none -serial stdio -no-reboot
             -kernel {vmlinuz} -initrd {initrd} -append {cmdline}
             -netdev {net} -device {nic}
             -virtfs {rootfs} -virtfs {sharefs} -virtfs {syncfs}"
        );
        let shown = c.to_string();
        let mut command = Command::from(c);
        command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        let parent = std::process::id();
        let hook = move || -> std::io::Result<()> {
            // SAFETY: prctl(PR_SET_PDEATHSIG) takes plain integers and touches no memory.
            if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) } != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // SAFETY: getppid has no preconditions.
            if unsafe { libc::getppid() } as u32 != parent {
                return Err(std::io::Error::other("xtask exited before QEMU started"));
            }
            Ok(())
        };
        // SAFETY: the hook runs in the forked child before exec and only calls
        // async-signal-safe functions (prctl, getppid). QEMU is spawned from the main thread,
        // which lives as long as the run (PDEATHSIG fires when the spawning thread exits).
        unsafe { command.pre_exec(hook) };
        let bar = mp.add(
            ProgressBar::new_spinner()
                .with_style(style.clone())
                .with_message(format!("{}: booting", spec.name)),
        );
        bar.enable_steady_tick(Duration::from_millis(100));
        let mut child = command
            .spawn()
            .wrap_err_with(|| format!("starting `{shown}`"))?;
        let console = Arc::new(Mutex::new(Console::default()));
        let log = std::fs::File::create(dir.path.join(format!("{}.console.log", spec.name)))?;
        let reader = child.stdout.take().map(|out| {
            let console = Arc::clone(&console);
            let mp = mp.clone();
            let name = spec.name.clone();
            let verbose = opts.verbose;
            std::thread::spawn(move || read_console(out, log, console, mp, name, verbose))
        });
        // QEMU's own stderr (e.g. socket errors) goes into the console tail too.
        if let Some(err) = child.stderr.take() {
            let console = Arc::clone(&console);
            let name = spec.name.clone();
            let mp = mp.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(err).lines().map_while(Result::ok) {
                    say(&mp, format!("[{name} qemu] {line}"));
                    push_tail(&console, format!("[qemu] {line}"));
                }
            });
        }
        guests.push(Guest {
            spec: spec.clone(),
            child: Some(child),
            started: Instant::now(),
            console,
            reader,
            share,
            bar,
            exited: None,
        });
        if i == 0 && specs.len() > 1 {
            wait_listening(
                port,
                &mut guests[0],
                Instant::now() + Duration::from_secs(20),
            )?;
        }
    }

    // Monitor until every guest exited or hit its deadline.
    loop {
        exec::check_interrupted()?;
        let mut all_done = true;
        for g in &mut guests {
            if g.exited.is_some() {
                continue;
            }
            let Some(child) = g.child.as_mut() else {
                continue;
            };
            let timed_out = g.started.elapsed() >= g.spec.timeout;
            let done = child
                .try_wait()
                .wrap_err_with(|| format!("waiting for QEMU of {}", g.spec.name))?
                .is_some();
            if done || timed_out {
                if timed_out && !done {
                    let _ = child.kill();
                }
                let _ = child.wait();
                g.child = None;
                g.exited = Some((g.started.elapsed(), timed_out && !done));
                let code = read_exit_code(&g.share);
                let msg = match (timed_out && !done, code) {
                    (true, _) => format!(
                        "{}: KILLED at its {:?} deadline",
                        g.spec.name, g.spec.timeout
                    ),
                    (false, Some(c)) => format!(
                        "{}: done in {:.1} s (exit {c})",
                        g.spec.name,
                        g.started.elapsed().as_secs_f64()
                    ),
                    (false, None) => format!(
                        "{}: QEMU exited after {:.1} s without an exit code",
                        g.spec.name,
                        g.started.elapsed().as_secs_f64()
                    ),
                };
                if g.bar.is_hidden() {
                    eprintln!("{msg}");
                }
                g.bar.finish_with_message(msg);
                continue;
            }
            all_done = false;
            let running = g.console.lock().ok().and_then(|c| c.running_at);
            if let Some(at) = running {
                g.bar.set_message(format!(
                    "{}: running (booted in {:.1} s)",
                    g.spec.name,
                    (at - g.started).as_secs_f64()
                ));
            }
        }
        if all_done {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let guests_time = t0.elapsed();

    let mut outcomes = Vec::new();
    for g in &mut guests {
        if let Some(r) = g.reader.take() {
            let _ = r.join();
        }
        let (elapsed, timed_out) = g.exited.unwrap_or((g.started.elapsed(), true));
        let (console_tail, boot) = match g.console.lock() {
            Ok(c) => (
                c.tail.iter().cloned().collect::<Vec<_>>().join("\n"),
                c.running_at.map(|t| t - g.started),
            ),
            Err(_) => (String::new(), None),
        };
        outcomes.push(GuestOutcome {
            name: g.spec.name.clone(),
            exit_code: read_exit_code(&g.share),
            timed_out,
            console_tail,
            share_dir: g.share.clone(),
            boot,
            elapsed,
        });
    }
    Ok(GuestRun {
        outcomes,
        sync_dir,
        prepared,
        guests_time,
        dir,
    })
}

/// Prints above the spinners, or plainly when they are hidden (not a terminal).
fn say(mp: &MultiProgress, line: String) {
    if mp.is_hidden() {
        eprintln!("{line}");
    } else {
        let _ = mp.println(line);
    }
}

fn read_exit_code(share: &Path) -> Option<i32> {
    std::fs::read_to_string(share.join("exit_code"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

const TAIL_LINES: usize = 80;

fn push_tail(console: &Mutex<Console>, line: String) {
    if let Ok(mut c) = console.lock() {
        if c.tail.len() >= TAIL_LINES {
            c.tail.pop_front();
        }
        c.tail.push_back(line);
    }
}

fn read_console(
    out: impl std::io::Read,
    mut log: std::fs::File,
    console: Arc<Mutex<Console>>,
    mp: MultiProgress,
    name: String,
    verbose: bool,
) {
    let mut r = BufReader::new(out);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match r.read_until(b'\n', &mut buf) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let _ = log.write_all(&buf);
        let line = String::from_utf8_lossy(&buf)
            .trim_end_matches(['\r', '\n'])
            .to_owned();
        if line.contains("xtask-init: running") {
            if let Ok(mut c) = console.lock() {
                c.running_at.get_or_insert_with(Instant::now);
            }
        }
        if verbose {
            say(&mp, format!("[{name}] {line}"));
        }
        push_tail(&console, line);
    }
}

/// A free TCP port on 127.0.0.1 (bound and released; QEMU binds it right after).
fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")
        .wrap_err("binding 127.0.0.1:0 to find a free port")?;
    Ok(l.local_addr()?.port())
}

/// Waits until QEMU listens on `port` (read from /proc/net/tcp: a probe connection would be
/// taken as the peer by `-netdev socket,listen`).
fn wait_listening(port: u16, g: &mut Guest, deadline: Instant) -> Result<()> {
    loop {
        let tcp = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
        if is_listening(&tcp, port) {
            return Ok(());
        }
        if let Some(c) = g.child.as_mut() {
            if let Some(st) = c.try_wait()? {
                let tail = g
                    .console
                    .lock()
                    .map(|c| c.tail.iter().cloned().collect::<Vec<_>>().join("\n"))
                    .unwrap_or_default();
                bail!(
                    "QEMU of {} exited ({st}) before listening on 127.0.0.1:{port}:\n{tail}",
                    g.spec.name
                );
            }
        }
        if Instant::now() >= deadline {
            bail!(
                "QEMU of {} did not listen on 127.0.0.1:{port} in time",
                g.spec.name
            );
        }
        exec::sleep(Duration::from_millis(20))?;
    }
}

/// True when /proc/net/tcp has a LISTEN socket on 127.0.0.1:`port`.
pub fn is_listening(proc_net_tcp: &str, port: u16) -> bool {
    let want = format!("0100007F:{port:04X}");
    proc_net_tcp.lines().skip(1).any(|l| {
        let mut f = l.split_whitespace();
        let (_, local, _, state) = (f.next(), f.next(), f.next(), f.next());
        local == Some(want.as_str()) && state == Some("0A")
    })
}

/// A guest that runs a plan with `guest-agent`.
#[derive(Clone, Debug)]
pub struct PlanGuest {
    pub name: String,
    pub plan: Plan,
    pub mem_mb: u32,
    pub timeout: Duration,
}

/// What [`run_plans`] returns: the guests plus each plan's parsed result (same order).
#[derive(Debug)]
pub struct PlanRun {
    pub guests: GuestRun,
    /// `Err` holds why there is no result (guest died, agent crashed...).
    pub results: Vec<std::result::Result<PlanResult, String>>,
}

/// Boots one guest per plan; each runs `xtask guest-agent` with its plan.
pub fn run_plans(nodes: &[PlanGuest], opts: &VmOptions) -> Result<PlanRun> {
    let exe = std::env::current_exe().wrap_err("finding the xtask binary")?;
    let exe = exe
        .to_str()
        .ok_or_else(|| eyre!("xtask path {} is not UTF-8", exe.display()))?
        .to_owned();
    let specs = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let idx = u8::try_from(i + 1).map_err(|_| eyre!("too many guests"))?;
            let mut s = GuestSpec::new(
                &n.name,
                idx,
                vec![
                    exe.clone(),
                    "guest-agent".into(),
                    "--plan".into(),
                    format!("{GUEST_SHARE}/{PLAN_FILE}"),
                ],
            );
            s.mem_mb = n.mem_mb;
            s.timeout = n.timeout;
            s.files
                .push((PLAN_FILE.to_owned(), serde_json::to_vec_pretty(&n.plan)?));
            Ok(s)
        })
        .collect::<Result<Vec<_>>>()?;
    let guests = run_guests(&specs, opts)?;
    let results = guests
        .outcomes
        .iter()
        .map(|o| {
            let p = o.share_dir.join(RESULT_FILE);
            let bytes = std::fs::read(&p).map_err(|e| {
                let why = if o.timed_out {
                    "killed at its deadline".to_owned()
                } else {
                    format!("exit code {:?}", o.exit_code)
                };
                format!(
                    "{}: no {RESULT_FILE} ({e}; {why}); console tail:\n{}",
                    o.name, o.console_tail
                )
            })?;
            serde_json::from_slice(&bytes)
                .map_err(|e| format!("{}: bad {RESULT_FILE}: {e}", o.name))
        })
        .collect();
    Ok(PlanRun { guests, results })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_net_tcp_listen() {
        let tcp = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0000000000000000 100 0 0 10 0\n\
   1: 0100007F:1F91 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 2 1 0000000000000000 100 0 0 10 0\n";
        assert!(is_listening(tcp, 8080));
        assert!(!is_listening(tcp, 8081));
        assert!(!is_listening(tcp, 80));
    }

    #[test]
    fn argv_must_fit_the_cmdline() {
        assert!(check_argv(&["/usr/bin/true".into()]).is_ok());
        assert!(check_argv(&[]).is_err());
        assert!(check_argv(&["a b".into()]).is_err());
        assert!(check_argv(&["a,b".into()]).is_err());
        assert!(check_argv(&[String::new()]).is_err());
    }
}
