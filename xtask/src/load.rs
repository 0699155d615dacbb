//! `cargo xtask load`: many real clients against one long-running `rdma-server`, in one guest.
//!
//! Starts the server itself (`--serve --json`, on 127.0.0.1), runs `--sequential` client
//! processes one after another, then `--concurrent` at once (exactly the server's
//! `--max-clients`), each writing its own random payload of random length, and optionally
//! `--kill-stages` (clients that SIGKILL themselves mid-session, each followed by a normal one).
//! Every client must exit 0 with a `verified` event whose length and CRC32C match its payload.
//!
//! Between phases it waits until the server is quiescent (its thread count is back to the
//! baseline taken after `listening`: every session thread has ended), then reads its RSS and
//! open file descriptors. The run fails if RSS grew by more than `--rss-slack-mib` or the fd
//! count grew by more than `--fd-slack` (0) between the warm-up and the end. Finally SIGTERM:
//! the server must exit 0 in time and print a `stopped` event whose counters match.
//!
//! Every wait has a deadline; the server is killed on every exit path ([`ServerGuard`]).

use clap::Args;
use color_eyre::eyre::{Result, WrapErr as _, bail, eyre};
use serde_json::{Value, json};
use std::io::{BufRead as _, BufReader, Read};
use std::os::unix::process::ExitStatusExt as _;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often child processes and /proc are polled.
const POLL: Duration = Duration::from_millis(5);
/// Most stderr kept per process, for failure reports.
const KEEP_STDERR: usize = 16 * 1024;

/// Run many clients against one server and check it neither fails nor leaks (hidden; e2e).
#[derive(Debug, Clone, Args)]
pub struct LoadArgs {
    /// The rdma-server binary.
    #[arg(long)]
    pub server_bin: PathBuf,

    /// The rdma-client binary.
    #[arg(long)]
    pub client_bin: PathBuf,

    /// TCP port for the server on 127.0.0.1.
    #[arg(long, default_value_t = 7472)]
    pub port: u16,

    /// Clients run one after another (the first --warmup of them are the warm-up).
    #[arg(long, default_value_t = 200)]
    pub sequential: u32,

    /// Clients run at once after that; also the server's --max-clients.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub concurrent: u32,

    /// Sessions before the first memory / fd measurement.
    #[arg(long, default_value_t = 10)]
    pub warmup: u32,

    /// The server's --buffer-size; payloads are 1..=this many bytes.
    #[arg(long, default_value_t = 65536, value_parser = clap::value_parser!(u64).range(1..=1 << 30))]
    pub buffer_size: u64,

    /// Most RSS growth (MiB) allowed between the warm-up and the end.
    #[arg(long, default_value_t = 8)]
    pub rss_slack_mib: u64,

    /// Most open-fd growth allowed between the warm-up and the end.
    #[arg(long, default_value_t = 0)]
    pub fd_slack: u64,

    /// Also run clients that SIGKILL themselves after hello, after accept and after the write
    /// (both notify modes), each followed by a normal client.
    #[arg(long)]
    pub kill_stages: bool,

    /// Extra server argument (repeatable), e.g. --server-arg=--cq-mode=poll.
    #[arg(long = "server-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub server_args: Vec<String>,

    /// Extra client argument (repeatable), e.g. --client-arg=--device=rxe0.
    #[arg(long = "client-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub client_args: Vec<String>,

    /// Deadline for each client process.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    pub client_deadline: Duration,

    /// Deadline for the server to listen, to become quiescent, and to stop on SIGTERM.
    #[arg(long, default_value = "20s", value_parser = humantime::parse_duration)]
    pub server_deadline: Duration,

    /// Directory for the payload files (default: the system temp dir).
    #[arg(long)]
    pub tmp_dir: Option<PathBuf>,

    /// Print a final JSON line with the numbers.
    #[arg(long)]
    pub json: bool,

    /// Seed of the random number generator for payload lengths and bytes (printed, to replay
    /// a run).
    #[arg(long)]
    pub rng_seed: Option<u64>,
}

/// The client faults that kill the client (its hidden `--fault` values).
pub const KILL_STAGES: [&str; 3] = ["kill-after-hello", "kill-after-accept", "kill-after-write"];

/// Runs the load test; `Err` if anything failed.
pub fn cmd(args: &LoadArgs) -> Result<()> {
    if args.warmup == 0 || args.warmup > args.sequential {
        bail!(
            "--warmup must be 1..=--sequential ({}), got {}",
            args.sequential,
            args.warmup
        );
    }
    let started = Instant::now();
    let rng_seed = args.rng_seed.unwrap_or_else(|| fastrand::u64(..));
    let mut rng = fastrand::Rng::with_seed(rng_seed);
    let tmp = match &args.tmp_dir {
        Some(d) => tempfile::TempDir::new_in(d),
        None => tempfile::TempDir::new(),
    }
    .wrap_err("creating a directory for the payload files")?;
    let addr = format!("127.0.0.1:{}", args.port);
    // Interrupted (the harness gives up on us): stop between clients so the guards kill the
    // server and the clients instead of leaving them behind.
    let interrupted = Arc::new(AtomicBool::new(false));
    for sig in [libc::SIGINT, libc::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&interrupted))
            .wrap_err("installing the SIGINT/SIGTERM handler")?;
    }

    let mut server = ServerGuard::start(args, &addr)?;
    let listening = server.wait_for("listening", Instant::now() + args.server_deadline)?;
    check_listening(&listening, args)?;
    let pid = server.pid();
    let baseline_threads = proc_threads(pid)?;
    println!(
        "load: server pid {pid} listening on {addr} ({} threads); rng seed {rng_seed}",
        baseline_threads
    );

    let mut run = Run {
        args,
        addr,
        dir: tmp.path().to_path_buf(),
        rng: &mut rng,
        interrupted,
        clients: 0,
        verified: 0,
        kills: 0,
        failures: Vec::new(),
    };

    // Sequential phase, with the warm-up measurement inside it.
    let mut warm = None;
    for i in 0..args.sequential {
        let notify = if i % 2 == 0 { "imm" } else { "tcp" };
        let c = run.spawn(notify, None)?;
        run.finish(c);
        server.alive()?;
        if i + 1 == args.warmup {
            quiesce(pid, baseline_threads, args.server_deadline)?;
            warm = Some(Sample::take(pid)?);
        }
    }
    let warm = warm.ok_or_else(|| eyre!("no warm-up sample (--warmup > --sequential?)"))?;
    quiesce(pid, baseline_threads, args.server_deadline)?;
    let after_seq = Sample::take(pid)?;
    let errors_before_concurrent = server.count(|e| e["type"] == "error");

    // Concurrent phase: exactly the server's --max-clients at once.
    let mut batch = Vec::new();
    for i in 0..args.concurrent {
        let notify = if i % 2 == 0 { "imm" } else { "tcp" };
        batch.push(run.spawn(notify, None)?);
    }
    for c in batch {
        run.finish(c);
    }
    server.alive()?;
    quiesce(pid, baseline_threads, args.server_deadline)?;
    let errors_before_kills = server.count(|e| e["type"] == "error");

    if args.kill_stages {
        for stage in KILL_STAGES {
            for notify in ["imm", "tcp"] {
                let c = run.spawn(notify, Some(stage))?;
                run.finish(c);
                let c = run.spawn(notify, None)?;
                run.finish(c);
                server.alive()?;
            }
        }
        quiesce(pid, baseline_threads, args.server_deadline)?;
    }
    let end = Sample::take(pid)?;
    let errors_total = server.count(|e| e["type"] == "error");
    let unverified = server.count(|e| e["type"] == "verified" && e["verified"] != true);

    // Leak checks.
    let rss_growth = end.rss_kib.saturating_sub(warm.rss_kib);
    if rss_growth > args.rss_slack_mib * 1024 {
        run.failures.push(format!(
            "server RSS grew by {rss_growth} KiB (from {} to {} KiB) over {} sessions: more than --rss-slack-mib {}",
            warm.rss_kib,
            end.rss_kib,
            run.clients - u64::from(args.warmup),
            args.rss_slack_mib
        ));
    }
    if end.fds > warm.fds + args.fd_slack {
        run.failures.push(format!(
            "server open fds grew from {} to {} (allowed slack {}): a descriptor leaks per session",
            warm.fds, end.fds, args.fd_slack
        ));
    }
    if errors_before_concurrent > 0 || errors_before_kills > errors_before_concurrent {
        run.failures.push(format!(
            "the server logged {errors_before_kills} session error(s) while only well-behaved clients ran: {}",
            server.errors_text()
        ));
    }
    if errors_total - errors_before_kills > run.kills {
        run.failures.push(format!(
            "the server logged {} session errors for {} killed clients",
            errors_total - errors_before_kills,
            run.kills
        ));
    }
    if unverified > 0 {
        run.failures.push(format!(
            "the server reported {unverified} session(s) with verified=false"
        ));
    }

    // Stop: SIGTERM, exit 0 in time, a `stopped` event with the right counters.
    let stop = server.terminate(args.server_deadline);
    let (exit, stopped) = match stop {
        Ok(s) => s,
        Err(e) => {
            run.failures.push(format!("{e:#}"));
            (None, None)
        }
    };
    match &stopped {
        Some(ev) => {
            let sessions = ev["sessions"].as_u64();
            let verified = ev["verified"].as_u64().unwrap_or(0);
            if ev["reason"] != "signal" {
                run.failures.push(format!(
                    "`stopped` says reason {}, not \"signal\"",
                    ev["reason"]
                ));
            }
            if sessions != Some(run.clients) {
                run.failures.push(format!(
                    "`stopped` counts {sessions:?} connections, but {} clients connected",
                    run.clients
                ));
            }
            if verified < run.verified {
                run.failures.push(format!(
                    "`stopped` counts {verified} verified writes, but {} clients were verified",
                    run.verified
                ));
            }
        }
        None => run
            .failures
            .push("the server printed no `stopped` event".to_owned()),
    }

    let wall = started.elapsed();
    let failures = std::mem::take(&mut run.failures);
    print_table(&Table {
        sessions: run.clients,
        verified: run.verified,
        kills: run.kills,
        failures: failures.len(),
        warm: &warm,
        after_seq: &after_seq,
        end: &end,
        exit,
        wall,
    });
    for f in &failures {
        println!("FAIL {f}");
    }
    if args.json {
        println!(
            "{}",
            json!({
                "type": "load_summary",
                "pass": failures.is_empty(),
                "sessions": run.clients,
                "verified": run.verified,
                "kills": run.kills,
                "failures": failures,
                "rss_kib": {"warm": warm.rss_kib, "after_sequential": after_seq.rss_kib, "end": end.rss_kib},
                "fds": {"warm": warm.fds, "after_sequential": after_seq.fds, "end": end.fds},
                "threads": {"baseline": baseline_threads, "end": end.threads},
                "server_exit": exit,
                "wall_ms": wall.as_millis() as u64,
                "rng_seed": rng_seed,
            })
        );
    }
    if !failures.is_empty() {
        bail!(
            "load test failed: {} problem(s), first: {}",
            failures.len(),
            failures[0]
        );
    }
    Ok(())
}

/// The state of one load run.
struct Run<'a> {
    args: &'a LoadArgs,
    addr: String,
    dir: PathBuf,
    rng: &'a mut fastrand::Rng,
    /// Set by SIGINT/SIGTERM.
    interrupted: Arc<AtomicBool>,
    /// Client processes started (each makes one TCP connection).
    clients: u64,
    /// Normal clients verified.
    verified: u64,
    /// Clients that killed themselves as expected.
    kills: u64,
    failures: Vec<String>,
}

/// A running client process and what it should report.
struct Spawned {
    child: Child,
    out: JoinHandle<String>,
    err: JoinHandle<String>,
    payload: PathBuf,
    len: usize,
    crc: u32,
    notify: &'static str,
    fault: Option<&'static str>,
    id: u64,
    deadline: Instant,
}

impl Run<'_> {
    /// Writes a fresh random payload and starts one client for it.
    fn spawn(&mut self, notify: &'static str, fault: Option<&'static str>) -> Result<Spawned> {
        if self.interrupted.load(Ordering::Relaxed) {
            bail!(
                "interrupted by a signal after {} clients; stopping the server",
                self.clients
            );
        }
        let max = usize::try_from(self.args.buffer_size).unwrap_or(usize::MAX);
        let len = self.rng.usize(1..=max);
        let mut payload = vec![0u8; len];
        self.rng.fill(&mut payload);
        let id = self.clients;
        let path = self.dir.join(format!("payload-{id}.bin"));
        std::fs::write(&path, &payload)
            .wrap_err_with(|| format!("writing the payload file {}", path.display()))?;
        let mut cmd = Command::new(&self.args.client_bin);
        cmd.arg(&self.addr)
            .arg("--json")
            .arg("--file")
            .arg(&path)
            .arg("--notify")
            .arg(notify)
            .args(&self.args.client_args);
        if let Some(f) = fault {
            cmd.arg("--fault").arg(f);
        }
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .wrap_err_with(|| format!("starting the client {}", self.args.client_bin.display()))?;
        self.clients += 1;
        let out = drain(child.stdout.take(), usize::MAX);
        let err = drain(child.stderr.take(), KEEP_STDERR);
        Ok(Spawned {
            child,
            out,
            err,
            payload: path,
            len,
            crc: crc32c::crc32c(&payload),
            notify,
            fault,
            id,
            deadline: Instant::now() + self.args.client_deadline,
        })
    }

    /// Waits for a client and checks its outcome; failures are recorded, not returned.
    fn finish(&mut self, mut c: Spawned) {
        let status = wait_until(&mut c.child, c.deadline);
        let stdout = c.out.join().unwrap_or_default();
        let stderr = c.err.join().unwrap_or_default();
        let _ = std::fs::remove_file(&c.payload);
        let what = format!(
            "client #{} ({} bytes, notify {}{})",
            c.id,
            c.len,
            c.notify,
            c.fault
                .map(|f| format!(", --fault {f}"))
                .unwrap_or_default()
        );
        let verdict = match (c.fault, status) {
            (_, None) => Err(format!(
                "did not finish within {:?} (killed)",
                self.args.client_deadline
            )),
            (Some(_), Some(st)) if st.signal() == Some(libc::SIGKILL) => {
                self.kills += 1;
                Ok(())
            }
            (Some(_), Some(st)) => Err(format!("expected death by SIGKILL, got {st}")),
            (None, Some(st)) => check_client(&stdout, st, c.len, c.crc).map(|()| {
                self.verified += 1;
            }),
        };
        if let Err(e) = verdict {
            self.failures
                .push(format!("{what}: {e}; stderr: {}", tail(&stderr, 600)));
        }
    }
}

/// A normal client must exit 0 with a `verified` event matching its payload.
fn check_client(stdout: &str, status: ExitStatus, len: usize, crc: u32) -> Result<(), String> {
    let events: Vec<Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    if !status.success() {
        let err = events
            .iter()
            .find(|e| e["type"] == "error")
            .map(|e| e.to_string())
            .unwrap_or_default();
        return Err(format!("exited with {status} {err}"));
    }
    let Some(v) = events.iter().find(|e| e["type"] == "verified") else {
        return Err(format!(
            "exit 0 but no `verified` event in its output: {}",
            tail(stdout, 400)
        ));
    };
    if v["verified"] != true || v["length"] != json!(len) || v["crc32c"] != json!(crc) {
        return Err(format!(
            "`verified` event does not match the payload (length {len}, crc32c {crc}): {v}"
        ));
    }
    Ok(())
}

/// Reads a child's pipe to its end on a thread, keeping at most the last `keep` bytes.
fn drain<R: Read + Send + 'static>(pipe: Option<R>, keep: usize) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut all = Vec::new();
        if let Some(mut p) = pipe {
            let mut buf = [0u8; 8192];
            loop {
                match p.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        all.extend_from_slice(&buf[..n]);
                        if all.len() > keep.saturating_mul(2) {
                            let cut = all.len() - keep;
                            all.drain(..cut);
                        }
                    }
                }
            }
        }
        String::from_utf8_lossy(&all).into_owned()
    })
}

/// Waits for a child until `deadline`; kills it then (and returns `None`).
fn wait_until(child: &mut Child, deadline: Instant) -> Option<ExitStatus> {
    loop {
        match child.try_wait() {
            Ok(Some(st)) => return Some(st),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(POLL),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
}

fn tail(s: &str, max: usize) -> String {
    let s = s.trim();
    if s.len() <= max {
        return s.to_owned();
    }
    let mut start = s.len() - max;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    format!("…{}", &s[start..])
}

/// The server process, its events, and a guarantee that it does not outlive the run.
struct ServerGuard {
    child: Child,
    events: Arc<Mutex<Vec<Value>>>,
    stderr: Option<JoinHandle<String>>,
    reader: Option<JoinHandle<()>>,
}

impl ServerGuard {
    fn start(args: &LoadArgs, addr: &str) -> Result<Self> {
        let mut child = Command::new(&args.server_bin)
            .args(["--serve", "--json", "--listen", addr])
            .arg("--buffer-size")
            .arg(args.buffer_size.to_string())
            .arg("--max-clients")
            .arg(args.concurrent.to_string())
            .args(&args.server_args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .wrap_err_with(|| format!("starting the server {}", args.server_bin.display()))?;
        let events = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&events);
        let stdout = child.stdout.take();
        let reader = std::thread::spawn(move || {
            let Some(stdout) = stdout else { return };
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let ev = serde_json::from_str(&line)
                    .unwrap_or_else(|_| json!({"type": "not_json", "line": line}));
                if let Ok(mut v) = sink.lock() {
                    v.push(ev);
                }
            }
        });
        let stderr = drain(child.stderr.take(), KEEP_STDERR);
        Ok(Self {
            child,
            events,
            stderr: Some(stderr),
            reader: Some(reader),
        })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn count(&self, pred: impl Fn(&Value) -> bool) -> u64 {
        self.events
            .lock()
            .map(|v| v.iter().filter(|e| pred(e)).count() as u64)
            .unwrap_or(0)
    }

    fn find(&self, ty: &str) -> Option<Value> {
        self.events
            .lock()
            .ok()
            .and_then(|v| v.iter().find(|e| e["type"] == ty).cloned())
    }

    fn errors_text(&self) -> String {
        self.events
            .lock()
            .map(|v| {
                v.iter()
                    .filter(|e| e["type"] == "error")
                    .take(3)
                    .map(Value::to_string)
                    .collect::<Vec<_>>()
                    .join("; ")
            })
            .unwrap_or_default()
    }

    /// Waits for the first event of type `ty`; fails early if the server exits.
    fn wait_for(&mut self, ty: &str, deadline: Instant) -> Result<Value> {
        loop {
            if let Some(ev) = self.find(ty) {
                return Ok(ev);
            }
            if let Ok(Some(st)) = self.child.try_wait() {
                bail!(
                    "the server exited ({st}) before its `{ty}` event; stderr: {}",
                    self.stderr_tail()
                );
            }
            if Instant::now() >= deadline {
                bail!(
                    "no `{ty}` event from the server in time; stderr: {}",
                    self.stderr_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Fails if the server has exited.
    fn alive(&mut self) -> Result<()> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(st)) => bail!(
                "the server died during the load ({st}); stderr: {}",
                self.stderr_tail()
            ),
            Err(e) => bail!("cannot check the server process: {e}"),
        }
    }

    /// Sends SIGTERM; the server must exit 0 before the deadline with a `stopped` event.
    fn terminate(&mut self, within: Duration) -> Result<(Option<i32>, Option<Value>)> {
        let pid = libc::pid_t::try_from(self.pid()).wrap_err("server pid out of range")?;
        // SAFETY: kill(2) has no memory-safety preconditions; `pid` is our own child, which
        // has not been reaped yet (we only reap in `wait_until` / Drop), so it is not reused.
        let rc = unsafe { libc::kill(pid, libc::SIGTERM) };
        if rc != 0 {
            bail!(
                "cannot send SIGTERM to the server: {}",
                std::io::Error::last_os_error()
            );
        }
        let status = wait_until(&mut self.child, Instant::now() + within);
        // The stdout reader ends with the process; wait for it so no event is missed.
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        let stopped = self.find("stopped");
        match status {
            None => bail!("the server did not exit within {within:?} of SIGTERM (killed)"),
            Some(st) if st.code() == Some(0) => Ok((Some(0), stopped)),
            Some(st) => bail!(
                "the server exited with {st} after SIGTERM, not 0; stderr: {}",
                self.stderr_tail()
            ),
        }
    }

    fn stderr_tail(&mut self) -> String {
        // Only once the process is gone does the pipe end; do not block on a live server.
        if matches!(self.child.try_wait(), Ok(Some(_)))
            && let Some(h) = self.stderr.take()
        {
            return tail(&h.join().unwrap_or_default(), 1500);
        }
        "(server still running)".to_owned()
    }
}

impl Drop for ServerGuard {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The server's `listening` event must show the configuration we asked for.
fn check_listening(ev: &Value, args: &LoadArgs) -> Result<()> {
    if ev["buffer_size"] != json!(args.buffer_size)
        || ev["max_clients"] != json!(args.concurrent)
        || ev["mode"] != "serve"
    {
        bail!("the server's `listening` event does not match the requested configuration: {ev}");
    }
    Ok(())
}

/// Resource use of the server at one moment.
#[derive(Debug, Clone, Copy)]
struct Sample {
    rss_kib: u64,
    fds: u64,
    threads: u64,
}

impl Sample {
    fn take(pid: u32) -> Result<Self> {
        let status = proc_status(pid)?;
        Ok(Self {
            rss_kib: status_field(&status, "VmRSS")
                .ok_or_else(|| eyre!("no VmRSS in /proc/{pid}/status"))?,
            fds: std::fs::read_dir(format!("/proc/{pid}/fd"))
                .wrap_err_with(|| format!("listing /proc/{pid}/fd"))?
                .count() as u64,
            threads: status_field(&status, "Threads")
                .ok_or_else(|| eyre!("no Threads in /proc/{pid}/status"))?,
        })
    }
}

fn proc_status(pid: u32) -> Result<String> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .wrap_err_with(|| format!("reading /proc/{pid}/status (is /proc mounted?)"))
}

fn proc_threads(pid: u32) -> Result<u64> {
    status_field(&proc_status(pid)?, "Threads")
        .ok_or_else(|| eyre!("no Threads in /proc/{pid}/status"))
}

/// The number in a `/proc/PID/status` line such as `VmRSS:\t  1234 kB`.
fn status_field(status: &str, name: &str) -> Option<u64> {
    status.lines().find_map(|l| {
        let (key, rest) = l.split_once(':')?;
        if key != name {
            return None;
        }
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// Waits until the server's thread count is back to `baseline` (every session thread ended).
fn quiesce(pid: u32, baseline: u64, within: Duration) -> Result<()> {
    let deadline = Instant::now() + within;
    loop {
        let n = proc_threads(pid)?;
        if n <= baseline {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!(
                "the server still runs {n} threads ({baseline} when idle) {within:?} after its clients finished: sessions do not end"
            );
        }
        std::thread::sleep(POLL * 4);
    }
}

struct Table<'a> {
    sessions: u64,
    verified: u64,
    kills: u64,
    failures: usize,
    warm: &'a Sample,
    after_seq: &'a Sample,
    end: &'a Sample,
    exit: Option<i32>,
    wall: Duration,
}

fn print_table(t: &Table<'_>) {
    let exit = t.exit.map_or_else(|| "-".to_owned(), |c| c.to_string());
    println!(
        "{:<28} {:>12} {:>16} {:>12}",
        "", "warm-up", "after sequential", "end"
    );
    println!(
        "{:<28} {:>12} {:>16} {:>12}",
        "server RSS (KiB)", t.warm.rss_kib, t.after_seq.rss_kib, t.end.rss_kib
    );
    println!(
        "{:<28} {:>12} {:>16} {:>12}",
        "server open fds", t.warm.fds, t.after_seq.fds, t.end.fds
    );
    println!(
        "{:<28} {:>12} {:>16} {:>12}",
        "server threads", t.warm.threads, t.after_seq.threads, t.end.threads
    );
    println!("{:<28} {:>12}", "sessions (client processes)", t.sessions);
    println!("{:<28} {:>12}", "verified clients", t.verified);
    println!("{:<28} {:>12}", "killed on purpose", t.kills);
    println!("{:<28} {:>12}", "failures", t.failures);
    println!("{:<28} {:>12}", "server exit after SIGTERM", exit);
    println!("{:<28} {:>12.1}", "wall time (s)", t.wall.as_secs_f64());
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;
    use std::os::unix::fs::PermissionsExt as _;

    #[derive(Debug, clap::Parser)]
    struct Cli {
        #[command(flatten)]
        load: LoadArgs,
    }

    fn script(dir: &std::path::Path, name: &str, body: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    const FAKE_SERVER: &str = r#"trap 'echo "{\"type\":\"stopped\",\"reason\":\"signal\",\"sessions\":3,\"verified\":3}"; exit 0' TERM
echo '{"type":"listening","buffer_size":64,"max_clients":1,"mode":"serve"}'
while :; do sleep 0.05; done"#;

    fn args(
        dir: &std::path::Path,
        server: &std::path::Path,
        client: &std::path::Path,
        extra: &[&str],
    ) -> LoadArgs {
        let mut argv = vec![
            "load".to_owned(),
            format!("--server-bin={}", server.display()),
            format!("--client-bin={}", client.display()),
            format!("--tmp-dir={}", dir.display()),
            "--sequential=2".to_owned(),
            "--warmup=1".to_owned(),
            "--concurrent=1".to_owned(),
            "--buffer-size=64".to_owned(),
            "--server-deadline=5s".to_owned(),
            "--client-deadline=5s".to_owned(),
        ];
        argv.extend(extra.iter().map(|s| (*s).to_owned()));
        Cli::try_parse_from(argv).unwrap().load
    }

    #[test]
    fn proc_status_fields_are_read() {
        let s = "Name:\tx\nVmRSS:\t  1234 kB\nThreads:\t7\n";
        assert_eq!(status_field(s, "VmRSS"), Some(1234));
        assert_eq!(status_field(s, "Threads"), Some(7));
        assert_eq!(status_field(s, "VmHWM"), None);
        let me = Sample::take(std::process::id()).unwrap();
        assert!(me.rss_kib > 0 && me.fds >= 3 && me.threads >= 1, "{me:?}");
    }

    #[test]
    fn client_output_is_checked_against_the_payload() {
        let ok = ExitStatus::from_raw(0);
        let good = r#"{"type":"connected"}
{"type":"verified","verified":true,"length":17,"crc32c":617249076,"text":"x","truncated":false}"#;
        assert!(check_client(good, ok, 17, 617_249_076).is_ok());
        assert!(check_client(good, ok, 16, 617_249_076).is_err());
        assert!(check_client(good, ok, 17, 1).is_err());
        assert!(check_client(good, ExitStatus::from_raw(7 << 8), 17, 617_249_076).is_err());
        assert!(check_client(r#"{"type":"connected"}"#, ok, 17, 617_249_076).is_err());
        let unverified = good.replace("\"verified\":true", "\"verified\":false");
        assert!(check_client(&unverified, ok, 17, 617_249_076).is_err());
    }

    #[test]
    fn a_server_that_stops_on_sigterm_is_accepted() {
        let dir = tempfile::tempdir().unwrap();
        let server = script(dir.path(), "server", FAKE_SERVER);
        let a = args(dir.path(), &server, &server, &[]);
        let mut g = ServerGuard::start(&a, "127.0.0.1:1").unwrap();
        let ev = g
            .wait_for("listening", Instant::now() + Duration::from_secs(5))
            .unwrap();
        check_listening(&ev, &a).unwrap();
        let (code, stopped) = g.terminate(Duration::from_secs(5)).unwrap();
        assert_eq!(code, Some(0));
        assert_eq!(stopped.unwrap()["reason"], "signal");
    }

    #[test]
    fn a_server_that_ignores_sigterm_fails_and_is_killed() {
        let dir = tempfile::tempdir().unwrap();
        let body = FAKE_SERVER.replace("trap '", "trap '' TERM; : '");
        let server = script(dir.path(), "server", &body);
        let a = args(dir.path(), &server, &server, &[]);
        let mut g = ServerGuard::start(&a, "127.0.0.1:1").unwrap();
        g.wait_for("listening", Instant::now() + Duration::from_secs(5))
            .unwrap();
        let pid = g.pid();
        let err = g.terminate(Duration::from_millis(500)).unwrap_err();
        assert!(err.to_string().contains("did not exit"), "{err}");
        drop(g);
        assert!(!std::path::Path::new(&format!("/proc/{pid}/status")).exists());
    }

    #[test]
    fn a_client_reporting_the_wrong_crc_fails_the_run() {
        let dir = tempfile::tempdir().unwrap();
        let server = script(dir.path(), "server", FAKE_SERVER);
        let client = script(
            dir.path(),
            "client",
            r#"echo '{"type":"verified","verified":true,"length":1,"crc32c":0}'"#,
        );
        let err = cmd(&args(dir.path(), &server, &client, &[])).unwrap_err();
        assert!(
            err.to_string().contains("does not match the payload"),
            "{err}"
        );
    }

    #[test]
    fn kill_stages_expect_death_by_sigkill() {
        let dir = tempfile::tempdir().unwrap();
        let server = script(dir.path(), "server", FAKE_SERVER);
        // Dies by SIGKILL when given --fault, otherwise exits 3 (no RDMA): every normal client fails.
        let client = script(
            dir.path(),
            "client",
            r#"case "$*" in *--fault*) kill -9 $$;; esac; exit 3"#,
        );
        let a = args(dir.path(), &server, &client, &["--kill-stages", "--json"]);
        let err = cmd(&a).unwrap_err();
        assert!(err.to_string().contains("exited with"), "{err}");
    }

    #[test]
    fn warmup_must_fit_the_sequential_phase() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x");
        let mut a = args(dir.path(), &p, &p, &[]);
        a.warmup = 3;
        assert!(cmd(&a).unwrap_err().to_string().contains("--warmup"));
    }
}
