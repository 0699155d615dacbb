//! Process helpers shared by every subcommand: annotated command runs, tool checks,
//! children with deadlines, and the Ctrl-C flag that lets every wait loop unwind
//! (so guards drop, QEMU children die and temp dirs go away).

use std::ffi::OsStr;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use color_eyre::eyre::{Result, WrapErr, bail, eyre};
use xshell::{Cmd, Shell};

// Re-exported: subprocess errors quote the tail of stderr.
pub use crate::text::tail;

static INTERRUPTED: OnceLock<Arc<AtomicBool>> = OnceLock::new();

/// Installs SIGINT/SIGTERM/SIGHUP handlers that set a flag (checked by every wait loop).
/// A second signal while the flag is already set terminates the process at once.
pub fn install_signal_handlers() -> Result<()> {
    let flag = INTERRUPTED.get_or_init(|| Arc::new(AtomicBool::new(false)));
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // Order matters: the conditional shutdown must see the flag *before* this signal sets it.
        signal_hook::flag::register_conditional_shutdown(sig, 130, Arc::clone(flag))
            .wrap_err("could not install the second-signal shutdown handler")?;
        signal_hook::flag::register(sig, Arc::clone(flag))
            .wrap_err("could not install the Ctrl-C handler")?;
    }
    Ok(())
}

/// True once the user pressed Ctrl-C (or the process got SIGTERM/SIGHUP).
pub fn interrupted() -> bool {
    INTERRUPTED.get().is_some_and(|f| f.load(Ordering::SeqCst))
}

/// Fails when interrupted, so that `?` unwinds to the guards.
pub fn check_interrupted() -> Result<()> {
    if interrupted() {
        bail!("interrupted (Ctrl-C): cleaning up");
    }
    Ok(())
}

/// Sleeps in small slices, returning early with an error when interrupted.
pub fn sleep(d: Duration) -> Result<()> {
    let end = Instant::now() + d;
    loop {
        check_interrupted()?;
        let now = Instant::now();
        if now >= end {
            return Ok(());
        }
        std::thread::sleep((end - now).min(Duration::from_millis(50)));
    }
}

/// Deadline for ordinary helper commands (dpkg, depmod, cpio, rdma, ...).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5 * 60);
/// Deadline for package installation.
pub const INSTALL_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// Runs a command quietly and returns its output, whatever the exit status. Fails (naming
/// the command) when it cannot be started or does not finish within [`DEFAULT_TIMEOUT`].
pub fn output(cmd: Cmd<'_>) -> Result<Output> {
    output_with(cmd, None, DEFAULT_TIMEOUT)
}

/// [`output`] with bytes fed to stdin and an explicit deadline.
pub fn output_with(cmd: Cmd<'_>, input: Option<Vec<u8>>, timeout: Duration) -> Result<Output> {
    let shown = cmd.to_string();
    let child = Captured::spawn_command(Command::from(cmd), shown.clone(), input)?;
    let (status, timed_out, stdout, stderr, _) = child.finish_raw(Instant::now() + timeout)?;
    match status {
        Some(status) if !timed_out => Ok(Output {
            status,
            stdout,
            stderr,
        }),
        _ => Err(eyre!(
            "`{shown}` did not finish within {timeout:?} and was killed; stderr so far: {}",
            tail(String::from_utf8_lossy(&stderr).trim(), 2000)
        )),
    }
}

/// Runs a command quietly; on a non-zero exit fails with what ran, its status and stderr.
/// Returns stdout as (lossy) UTF-8.
pub fn run(cmd: Cmd<'_>) -> Result<String> {
    let shown = cmd.to_string();
    let out = output(cmd)?;
    check_output(&shown, &out)?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Like [`run`] but returns stdout as bytes, optionally feeding `input` to stdin.
pub fn run_bytes(cmd: Cmd<'_>, input: Option<Vec<u8>>) -> Result<Vec<u8>> {
    let shown = cmd.to_string();
    let out = output_with(cmd, input, DEFAULT_TIMEOUT)?;
    check_output(&shown, &out)?;
    Ok(out.stdout)
}

/// Runs a command with inherited stdout/stderr (for long, chatty steps like apt-get),
/// killed after `timeout`.
pub fn run_loud(cmd: Cmd<'_>, timeout: Duration) -> Result<()> {
    crate::deadline::grant(timeout);
    let shown = cmd.to_string();
    let mut child = Command::from(cmd)
        .stdin(Stdio::null())
        .spawn()
        .wrap_err_with(|| format!("could not start `{shown}` (is it installed and on PATH?)"))?;
    match wait_deadline(&mut child, Instant::now() + timeout, &shown)? {
        (Some(status), _) if status.success() => Ok(()),
        (Some(status), _) => bail!("`{shown}` failed ({status}); its output is above"),
        (None, _) => bail!("`{shown}` did not finish within {timeout:?} and was killed"),
    }
}

/// Runs a command whose output is its progress: every line of its stdout and stderr is
/// printed as it comes, after `prefix`; killed after `timeout` (with every process it started:
/// it runs in its own process group). On a non-zero exit fails with what ran, its status and
/// the tail of its output. Returns everything it printed.
pub fn run_streamed(cmd: Cmd<'_>, prefix: &str, timeout: Duration) -> Result<String> {
    crate::deadline::grant(timeout);
    use std::io::BufRead as _;
    use std::os::unix::process::CommandExt as _;
    let shown = cmd.to_string();
    let mut child = Command::from(cmd)
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .wrap_err_with(|| format!("could not start `{shown}` (is it installed and on PATH?)"))?;
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let pipes: [Option<Box<dyn Read + Send>>; 2] = [
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    ];
    let readers: Vec<JoinHandle<()>> = pipes
        .into_iter()
        .flatten()
        .map(|pipe| {
            let tx = tx.clone();
            let prefix = prefix.to_owned();
            std::thread::spawn(move || {
                for line in std::io::BufReader::new(pipe)
                    .split(b'\n')
                    .map_while(Result::ok)
                {
                    let line = String::from_utf8_lossy(&line).into_owned();
                    println!("{prefix}{line}");
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            })
        })
        .collect();
    drop(tx);
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child
            .try_wait()
            .wrap_err_with(|| format!("waiting for `{shown}`"))?
        {
            break Some(status);
        }
        if interrupted() || Instant::now() >= deadline {
            kill_group(&child);
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    // A process it left behind may hold the pipes open: wait for the readers a little only.
    let grace = Instant::now() + Duration::from_secs(5);
    while readers.iter().any(|r| !r.is_finished()) && Instant::now() < grace {
        std::thread::sleep(Duration::from_millis(20));
    }
    let text = rx.try_iter().collect::<Vec<_>>().join("\n");
    check_interrupted()?;
    match status {
        Some(status) if status.success() => Ok(text),
        Some(status) => bail!("`{shown}` failed ({status}):\n{}", tail(&text, 3000)),
        None => bail!(
            "`{shown}` did not finish within {timeout:?} and was killed:\n{}",
            tail(&text, 3000)
        ),
    }
}

/// SIGKILLs the process group that `child` leads (spawned with `process_group(0)`).
fn kill_group(child: &Child) {
    // `child` is not reaped yet, so its pid (= the group id) is still ours.
    if let Ok(pid) = libc::pid_t::try_from(child.id()) {
        // SAFETY: kill(2) takes two integers and touches no memory of ours.
        unsafe { libc::kill(-pid, libc::SIGKILL) };
    }
}

/// Turns a failed [`Output`] into an error that names the command and quotes its stderr.
pub fn check_output(shown: &str, out: &Output) -> Result<()> {
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let detail = if stderr.trim().is_empty() {
        stdout.trim().to_owned()
    } else {
        stderr.trim().to_owned()
    };
    Err(eyre!(
        "`{shown}` failed ({}): {}",
        out.status,
        tail(&detail, 2000)
    ))
}

/// The workspace root (xtask's manifest dir is `ROOT/xtask`).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

/// The path guests run this very xtask from, as UTF-8 (it travels on their command line).
///
/// Normally the file it was started from. When that file was replaced while it runs (`cargo
/// test --workspace` relinks `target/debug/xtask` with the whole workspace's features, in the
/// middle of `cargo xtask test`), the kernel names it `PATH (deleted)`: then the running image
/// itself, read from `/proc/self/exe`, is copied beside it (`target/debug/xtask-running`) and
/// that copy is what the guests run, so they run exactly this build.
pub fn self_exe() -> Result<String> {
    let exe = std::env::current_exe().wrap_err("finding the xtask binary")?;
    let shown = exe
        .to_str()
        .ok_or_else(|| eyre!("the xtask path {} is not UTF-8", exe.display()))?;
    let Some(original) = shown.strip_suffix(" (deleted)") else {
        return Ok(shown.to_owned());
    };
    // Beside the original, where the binaries it runs are found too (`target/debug`).
    let dir = Path::new(original)
        .parent()
        .ok_or_else(|| eyre!("the xtask binary {original} has no directory"))?;
    let copy = dir.join("xtask-running");
    let partial = dir.join(format!("xtask-running.{}", std::process::id()));
    std::fs::copy("/proc/self/exe", &partial).wrap_err_with(|| {
        format!(
            "copying the running xtask ({shown}) to {}",
            partial.display()
        )
    })?;
    // Renamed over the last copy: a guest still running that one keeps its file.
    std::fs::rename(&partial, &copy)?;
    copy.to_str()
        .map(str::to_owned)
        .ok_or_else(|| eyre!("{} is not UTF-8", copy.display()))
}

/// Finds `tool` on PATH (plus the sbin directories that non-root PATHs often lack).
pub fn which(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/local/sbin", "/usr/sbin", "/sbin"].map(PathBuf::from))
        .map(|dir| dir.join(tool))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Checks that every `(tool, package)` is available; otherwise fails listing the packages
/// to install (and the `cargo xtask deps` command that installs them).
pub fn require_tools(tools: &[(&str, &str)]) -> Result<()> {
    let missing: Vec<_> = tools.iter().filter(|(t, _)| which(t).is_none()).collect();
    if missing.is_empty() {
        return Ok(());
    }
    let names: Vec<_> = missing.iter().map(|(t, _)| *t).collect();
    let mut pkgs: Vec<_> = missing.iter().map(|(_, p)| *p).collect();
    pkgs.dedup();
    bail!(
        "missing tools: {}; install them with `cargo xtask deps` or `apt-get install {}`",
        names.join(", "),
        pkgs.join(" ")
    )
}

/// A child whose stdout and stderr are drained by threads (so it never blocks on a full pipe).
#[derive(Debug)]
pub struct Captured {
    child: Child,
    shown: String,
    stdout: Option<JoinHandle<Vec<u8>>>,
    stderr: Option<JoinHandle<Vec<u8>>>,
    started: Instant,
}

/// What a [`Captured`] child did.
#[derive(Debug, Clone)]
pub struct Finished {
    /// Exit code; `None` when killed by a signal (or by our deadline).
    pub code: Option<i32>,
    /// True when the deadline passed and we killed it.
    pub timed_out: bool,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

impl Captured {
    /// Spawns `argv` (through xshell, no shell involved) with piped stdout/stderr and null stdin.
    pub fn spawn<S: AsRef<OsStr>>(argv: &[S]) -> Result<Self> {
        let (prog, args) = argv
            .split_first()
            .ok_or_else(|| eyre!("empty command line"))?;
        let sh = Shell::new()?;
        let cmd = sh.cmd(prog.as_ref()).args(args);
        let shown = cmd.to_string();
        Self::spawn_command(Command::from(cmd), shown, None)
    }

    /// Spawns an already-built command with piped stdout/stderr; stdin gets `input` (then
    /// EOF) or is null.
    pub fn spawn_command(mut cmd: Command, shown: String, input: Option<Vec<u8>>) -> Result<Self> {
        cmd.stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .wrap_err_with(|| format!("could not start `{shown}` (is it installed?)"))?;
        if let (Some(mut stdin), Some(bytes)) = (child.stdin.take(), input) {
            std::thread::spawn(move || {
                use std::io::Write;
                let _ = stdin.write_all(&bytes);
            });
        }
        let stdout = child.stdout.take().map(drain);
        let stderr = child.stderr.take().map(drain);
        Ok(Self {
            child,
            shown,
            stdout,
            stderr,
            started: Instant::now(),
        })
    }

    /// Asks it to stop (SIGTERM), as a service manager would.
    pub fn terminate(&mut self) {
        let _ = sigterm(&mut self.child);
    }

    /// Non-blocking: has it exited?
    pub fn exited(&mut self) -> Result<bool> {
        Ok(self
            .child
            .try_wait()
            .wrap_err_with(|| format!("waiting for `{}`", self.shown))?
            .is_some())
    }

    /// Waits until it exits or `deadline` passes (then kills it). Ctrl-C kills it too and fails.
    pub fn finish(self, deadline: Instant) -> Result<Finished> {
        let (status, timed_out, stdout, stderr, elapsed) = self.finish_raw(deadline)?;
        Ok(Finished {
            code: status.and_then(|s| s.code()),
            timed_out,
            stdout: String::from_utf8_lossy(&stdout).into_owned(),
            stderr: String::from_utf8_lossy(&stderr).into_owned(),
            elapsed,
        })
    }

    /// [`finish`](Self::finish) with the raw status and bytes.
    #[allow(clippy::type_complexity)]
    pub fn finish_raw(
        mut self,
        deadline: Instant,
    ) -> Result<(Option<ExitStatus>, bool, Vec<u8>, Vec<u8>, Duration)> {
        let (status, timed_out) = wait_deadline(&mut self.child, deadline, &self.shown)?;
        let stdout = self.stdout.take().map(join).unwrap_or_default();
        let stderr = self.stderr.take().map(join).unwrap_or_default();
        Ok((status, timed_out, stdout, stderr, self.started.elapsed()))
    }
}

impl Drop for Captured {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn drain<R: Read + Send + 'static>(r: R) -> JoinHandle<Vec<u8>> {
    drain_tail(r, usize::MAX)
}

/// Reads a child's pipe to its end on a thread (so the child never blocks on a full pipe),
/// keeping at most the last `keep` bytes.
pub fn drain_tail<R: Read + Send + 'static>(mut r: R, keep: usize) -> JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut all = Vec::new();
        let mut buf = [0u8; 8192];
        loop {
            match r.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    all.extend_from_slice(&buf[..n]);
                    if all.len() > keep.saturating_mul(2) {
                        let cut = all.len() - keep;
                        all.drain(..cut);
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        if all.len() > keep {
            let cut = all.len() - keep;
            all.drain(..cut);
        }
        all
    })
}

/// Sends SIGTERM to `child` unless it has already exited (then there is nothing to stop).
pub fn sigterm(child: &mut Child) -> std::io::Result<()> {
    // Reaping happens only through `child`, which we hold: while `try_wait` says it runs, the
    // pid is still ours (a zombie keeps it), so the signal cannot reach another process.
    if child.try_wait()?.is_some() {
        return Ok(());
    }
    let pid = libc::pid_t::try_from(child.id()).map_err(std::io::Error::other)?;
    // SAFETY: kill(2) takes two integers and touches no memory of ours.
    if unsafe { libc::kill(pid, libc::SIGTERM) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

fn join(h: JoinHandle<Vec<u8>>) -> Vec<u8> {
    h.join().unwrap_or_default()
}

/// Waits for `child` until `deadline`; kills it when the deadline passes (returns `(None, true)`)
/// or when interrupted (returns an error). `shown` names it in errors.
pub fn wait_deadline(
    child: &mut Child,
    deadline: Instant,
    shown: &str,
) -> Result<(Option<ExitStatus>, bool)> {
    let mut poll = Duration::from_millis(1);
    loop {
        if let Some(status) = child
            .try_wait()
            .wrap_err_with(|| format!("waiting for `{shown}`"))?
        {
            return Ok((Some(status), false));
        }
        if interrupted() {
            let _ = child.kill();
            let _ = child.wait();
            bail!("interrupted while waiting for `{shown}`; killed it");
        }
        let now = Instant::now();
        if now >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Ok((None, true));
        }
        // Poll often at first (short-lived children), then every 20 ms.
        std::thread::sleep(poll.min(deadline - now));
        poll = (poll * 2).min(Duration::from_millis(20));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drain_tail_keeps_the_last_bytes() {
        let data: Vec<u8> = (0..50_000u32).map(|i| (i % 251) as u8).collect();
        let kept = drain_tail(std::io::Cursor::new(data.clone()), 100)
            .join()
            .unwrap();
        assert_eq!(kept, data[data.len() - 100..]);
        let all = drain_tail(std::io::Cursor::new(data.clone()), usize::MAX)
            .join()
            .unwrap();
        assert_eq!(all, data);
    }

    #[test]
    fn sigterm_stops_a_child_and_is_harmless_after_it_exited() {
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        sigterm(&mut child).unwrap();
        let (status, timed_out) = wait_deadline(
            &mut child,
            Instant::now() + Duration::from_secs(10),
            "sleep",
        )
        .unwrap();
        assert!(!timed_out);
        use std::os::unix::process::ExitStatusExt as _;
        assert_eq!(status.and_then(|s| s.signal()), Some(libc::SIGTERM));
        sigterm(&mut child).unwrap();
    }

    #[test]
    fn captured_collects_output_and_status() {
        let f = Captured::spawn(&["sh", "-c", "echo out; echo err >&2; exit 3"])
            .unwrap()
            .finish(Instant::now() + Duration::from_secs(10))
            .unwrap();
        assert_eq!(f.code, Some(3));
        assert!(!f.timed_out);
        assert_eq!(f.stdout, "out\n");
        assert_eq!(f.stderr, "err\n");
    }

    #[test]
    fn captured_kills_at_deadline() {
        let f = Captured::spawn(&["sleep", "30"])
            .unwrap()
            .finish(Instant::now() + Duration::from_millis(200))
            .unwrap();
        assert!(f.timed_out);
        assert_eq!(f.code, None);
        assert!(f.elapsed < Duration::from_secs(5));
    }

    #[test]
    fn output_feeds_stdin_and_times_out() {
        let sh = Shell::new().unwrap();
        let out = run_bytes(xshell::cmd!(sh, "cat"), Some(b"hello".to_vec())).unwrap();
        assert_eq!(out, b"hello");
        let err = output_with(
            xshell::cmd!(sh, "sleep 30"),
            None,
            Duration::from_millis(200),
        )
        .unwrap_err();
        assert!(err.to_string().contains("did not finish"), "{err}");
        let err = run(xshell::cmd!(sh, "ls /no/such/dir"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("`ls /no/such/dir` failed") && err.contains("No such file"),
            "{err}"
        );
    }

    #[test]
    fn require_tools_names_the_package() {
        let err = require_tools(&[("sh", "dash"), ("no-such-tool-xyz", "pkg-xyz")])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("no-such-tool-xyz") && err.contains("pkg-xyz"),
            "{err}"
        );
    }
}
