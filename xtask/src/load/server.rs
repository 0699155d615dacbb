//! The `rdma-server` under load: started with `--serve --json`, its events collected as they
//! come, stopped with SIGTERM, and killed on every other exit path.

use super::args::LoadArgs;
use crate::exec;
use crate::scenario::role::Invocation;
use crate::text::tail;
use color_eyre::eyre::{Result, WrapErr as _, bail};
use rdma_proto::events::server::{Event, ServeMode};
use rdma_proto::events::{self, EventError};
use std::io::{BufRead as _, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Most stderr kept from the server, for failure reports.
const KEEP_STDERR: usize = 16 * 1024;

/// One line of the server's stdout: an event, or the error that names a line that is none.
type Line = Result<Event<'static>, EventError>;

/// The server process, its events, and a guarantee that it does not outlive the run.
#[derive(Debug)]
pub(super) struct ServerGuard {
    child: Child,
    /// Every stdout line, as the server's event it must be.
    events: Arc<Mutex<Vec<Line>>>,
    stderr: Option<JoinHandle<Vec<u8>>>,
    reader: Option<JoinHandle<()>>,
}

impl ServerGuard {
    pub fn start(args: &LoadArgs, addr: &str) -> Result<Self> {
        let (buffer_size, max_clients) =
            (args.buffer_size.to_string(), args.concurrent.to_string());
        let argv = Invocation::server(&args.server_bin.to_string_lossy())
            .args(["--serve", "--json", "--listen", addr])
            .args(["--buffer-size", buffer_size.as_str()])
            .args([
                "--max-clients",
                max_clients.as_str(),
                "--max-per-ip",
                &max_clients,
            ])
            .args(&args.server_args)
            .argv();
        let mut command = Command::new(&argv[0]);
        command.args(&argv[1..]);
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .wrap_err_with(|| format!("starting the server {}", argv.join(" ")))?;
        let events = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&events);
        let stdout = child.stdout.take();
        let reader = std::thread::spawn(move || {
            let Some(stdout) = stdout else { return };
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let ev = events::parse(&line);
                if let Ok(mut v) = sink.lock() {
                    v.push(ev);
                }
            }
        });
        let stderr = child
            .stderr
            .take()
            .map(|e| exec::drain_tail(e, KEEP_STDERR));
        Ok(Self {
            child,
            events,
            stderr,
            reader: Some(reader),
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// How many events so far satisfy `pred`.
    pub fn count(&self, pred: impl Fn(&Event<'_>) -> bool) -> u64 {
        self.events
            .lock()
            .map(|v| v.iter().flatten().filter(|e| pred(e)).count() as u64)
            .unwrap_or(0)
    }

    /// How many failures so far: `error` events (a session that failed), and lines that are
    /// no server event at all (the contract broken).
    pub fn errors(&self) -> u64 {
        self.events
            .lock()
            .map(|v| v.iter().filter(|l| is_error(l)).count() as u64)
            .unwrap_or(0)
    }

    fn find(&self, pred: impl Fn(&Event<'_>) -> bool) -> Option<Event<'static>> {
        self.events
            .lock()
            .ok()
            .and_then(|v| v.iter().flatten().find(|e| pred(e)).cloned())
    }

    /// The first few failures, for a failure report.
    pub fn errors_text(&self) -> String {
        self.events
            .lock()
            .map(|v| {
                v.iter()
                    .filter(|l| is_error(l))
                    .take(3)
                    .map(|l| match l {
                        Ok(e) => serde_json::to_string(e).unwrap_or_default(),
                        Err(e) => e.to_string(),
                    })
                    .collect::<Vec<_>>()
                    .join("; ")
            })
            .unwrap_or_default()
    }

    /// Waits for the first event `pred` holds for (`what` names it); fails early if the
    /// server exits.
    /// Waits until `cond` holds of the server (its events so far), until `deadline`; fails
    /// naming `what` when it does not, or when the server exits first.
    pub fn wait_until(
        &mut self,
        what: &str,
        cond: impl Fn(&Self) -> bool,
        deadline: Instant,
    ) -> Result<()> {
        loop {
            if cond(self) {
                return Ok(());
            }
            if let Ok(Some(st)) = self.child.try_wait() {
                bail!(
                    "the server exited ({st}) while waiting for {what}; stderr: {}",
                    self.stderr_tail()
                );
            }
            if Instant::now() >= deadline {
                bail!("no {what} in time; stderr: {}", self.stderr_tail());
            }
            exec::sleep(Duration::from_millis(20))?;
        }
    }

    pub fn wait_for(
        &mut self,
        ty: &str,
        pred: impl Fn(&Event<'_>) -> bool,
        deadline: Instant,
    ) -> Result<Event<'static>> {
        loop {
            if let Some(ev) = self.find(&pred) {
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
            exec::sleep(Duration::from_millis(20))?;
        }
    }

    /// Fails if the server has exited.
    pub fn alive(&mut self) -> Result<()> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(st)) => bail!(
                "the server died during the load ({st}); stderr: {}",
                self.stderr_tail()
            ),
            Err(e) => bail!("cannot check the server process: {e}"),
        }
    }

    /// Sends SIGTERM; the server must exit 0 before the deadline. Returns its exit code and its
    /// `stopped` event, if it printed one.
    pub fn terminate(&mut self, within: Duration) -> Result<(Option<i32>, Option<Event<'static>>)> {
        exec::sigterm(&mut self.child).wrap_err("cannot send SIGTERM to the server")?;
        let (status, _) = exec::wait_deadline(
            &mut self.child,
            Instant::now() + within,
            "the server after SIGTERM",
        )?;
        // The stdout reader ends with the process; wait for it so no event is missed.
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        let stopped = self.find(|e| matches!(e, Event::Stopped { .. }));
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
            let bytes = h.join().unwrap_or_default();
            return tail(String::from_utf8_lossy(&bytes).trim(), 1500);
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

/// A session's `error` event, or a line that is no event.
fn is_error(line: &Line) -> bool {
    matches!(line, Ok(Event::Error { .. }) | Err(_))
}

/// The server's `listening` event must show the configuration we asked for.
pub(super) fn check_listening(ev: &Event<'_>, args: &LoadArgs) -> Result<()> {
    match ev {
        Event::Listening {
            buffer_size,
            max_clients,
            mode: ServeMode::Serve,
            ..
        } if *buffer_size == args.buffer_size && *max_clients == args.concurrent => Ok(()),
        _ => bail!(
            "the server's `listening` event does not match the requested configuration: {ev:?}"
        ),
    }
}
