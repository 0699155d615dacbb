//! The load's clients: each one a real `rdma-client` process with its own random payload,
//! judged from its exit status and its `verified` event. Failures are collected, not returned,
//! so that one bad session does not hide the others.

use super::args::LoadArgs;
use crate::exec::{self, Captured};
use crate::scenario::exit::Speaks;
use crate::scenario::judge;
use crate::scenario::role::Invocation;
use crate::scenario::transcript::Role;
use crate::text::tail;
use color_eyre::eyre::{Result, WrapErr as _, bail};
use rdma_proto::events::client::Event as ClientEvent;
use std::os::unix::process::ExitStatusExt as _;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::time::Instant;

/// The client faults that kill the client (its hidden `--fault` values).
pub(super) const KILL_STAGES: [&str; 3] =
    ["kill-after-hello", "kill-after-accept", "kill-after-write"];

/// Starts clients, waits for them, and keeps the score.
#[derive(Debug)]
pub(super) struct Clients<'a> {
    args: &'a LoadArgs,
    /// The server's address, `127.0.0.1:PORT`.
    addr: String,
    /// Where the payload files go.
    dir: PathBuf,
    rng: fastrand::Rng,
    /// Client processes started (each makes one TCP connection).
    pub started: u64,
    /// Normal clients verified.
    pub verified: u64,
    /// Clients that killed themselves as expected.
    pub kills: u64,
    /// Normal clients that were answered `busy` and waited their turn (`busy` events).
    pub busy_waits: u64,
    /// TCP connections the server saw besides one per client process: the busy phase's
    /// idle connections, and its client's connections that were turned away.
    pub extra_connections: u64,
    /// Connections of the bursts of strangers (`--soak-rounds`) that were established.
    pub strangers: u64,
    /// What went wrong, one line per client.
    pub failures: Vec<String>,
}

/// A running client process and what it should report.
#[derive(Debug)]
pub(super) struct Spawned {
    /// Killed on drop if still running.
    proc: Captured,
    payload: PathBuf,
    len: usize,
    crc: u32,
    notify: &'static str,
    fault: Option<&'static str>,
    id: u64,
    deadline: Instant,
}

impl<'a> Clients<'a> {
    pub fn new(args: &'a LoadArgs, addr: String, dir: PathBuf, rng_seed: u64) -> Self {
        Self {
            args,
            addr,
            dir,
            rng: fastrand::Rng::with_seed(rng_seed),
            started: 0,
            verified: 0,
            kills: 0,
            busy_waits: 0,
            extra_connections: 0,
            strangers: 0,
            failures: Vec::new(),
        }
    }

    /// Writes a fresh random payload and starts one client for it.
    pub fn spawn(&mut self, notify: &'static str, fault: Option<&'static str>) -> Result<Spawned> {
        if exec::interrupted() {
            bail!(
                "interrupted by a signal after {} clients; stopping the server",
                self.started
            );
        }
        let max = usize::try_from(self.args.buffer_size).unwrap_or(usize::MAX);
        let payload = random_payload(&mut self.rng, max);
        let id = self.started;
        let path = self.dir.join(format!("payload-{id}.bin"));
        std::fs::write(&path, &payload)
            .wrap_err_with(|| format!("writing the payload file {}", path.display()))?;
        let base = match (fault, &self.args.misbehave_bin) {
            (None, _) => Invocation::client(&self.args.client_bin.to_string_lossy()),
            (Some(f), Some(bin)) => Invocation::misbehaving(&bin.to_string_lossy(), f),
            (Some(f), None) => bail!("a client that dies ({f}) needs --misbehave-bin"),
        };
        // A busy server is waited for within half the client's own deadline.
        let wait = format!("{}ms", self.args.client_deadline.as_millis() / 2);
        let argv = base
            .args([self.addr.as_str(), "--json", "--file"])
            .args([path.to_string_lossy().as_ref(), "--notify", notify])
            .args(["--wait-for-server", wait.as_str()])
            .args(&self.args.client_args)
            .argv();
        let proc = Captured::spawn(&argv)
            .wrap_err_with(|| format!("starting the client {}", argv.join(" ")))?;
        self.started += 1;
        Ok(Spawned {
            proc,
            payload: path,
            len: payload.len(),
            crc: crc32c::crc32c(&payload),
            notify,
            fault,
            id,
            deadline: Instant::now() + self.args.client_deadline,
        })
    }

    /// Waits for a client and checks its outcome; a failed client is recorded, not returned
    /// (`Err` only when interrupted).
    pub fn finish(&mut self, c: Spawned) -> Result<()> {
        let (status, _, stdout, stderr, _) = c.proc.finish_raw(c.deadline)?;
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
            (None, Some(st)) => {
                let stdout = String::from_utf8_lossy(&stdout);
                check_client(&stdout, st, c.len, c.crc).map(|waited| {
                    self.verified += 1;
                    self.busy_waits += u64::from(waited);
                })
            }
        };
        if let Err(e) = verdict {
            let stderr = String::from_utf8_lossy(&stderr);
            self.failures
                .push(format!("{what}: {e}; stderr: {}", tail(stderr.trim(), 600)));
        }
        Ok(())
    }

    /// A number from the run's random number generator (replayed with `--rng-seed`).
    pub fn seed(&mut self) -> u64 {
        self.rng.u64(..)
    }

    /// The server's address.
    pub fn addr(&self) -> Result<std::net::SocketAddr> {
        self.addr
            .parse()
            .wrap_err_with(|| format!("the server's address {}", self.addr))
    }

    /// One idle TCP connection to the server: it holds a slot (of `--max-clients` and of
    /// `--max-per-ip`) until dropped, sending nothing.
    pub fn hold_slot(&self, deadline: Instant) -> Result<std::net::TcpStream> {
        let addr = self.addr()?;
        let left = deadline.saturating_duration_since(Instant::now());
        std::net::TcpStream::connect_timeout(&addr, left.max(std::time::Duration::from_millis(1)))
            .wrap_err_with(|| format!("holding a slot of the server at {addr}"))
    }

    /// Starts a client and waits for it.
    pub fn run(&mut self, notify: &'static str, fault: Option<&'static str>) -> Result<()> {
        let c = self.spawn(notify, fault)?;
        self.finish(c)
    }
}

/// A payload of 1..=`max` random bytes (`max` >= 1).
fn random_payload(rng: &mut fastrand::Rng, max: usize) -> Vec<u8> {
    let mut payload = vec![0u8; rng.usize(1..=max.max(1))];
    rng.fill(&mut payload);
    payload
}

/// A normal client must exit 0 with a `verified` event matching its payload. Says whether it
/// was answered `busy` first (and waited its turn).
pub(super) fn check_client(
    stdout: &str,
    status: ExitStatus,
    len: usize,
    crc: u32,
) -> Result<bool, String> {
    // Read as every step's output is (the scenario's one reader of events).
    let role = Role::of_stdout("client", stdout, Speaks::Client);
    judge::only_events(&role).map_err(|e| format!("exited with {status}, and {e}"))?;
    let events = &role.client;
    if !status.success() {
        let err = events
            .iter()
            .find(|e| matches!(e, ClientEvent::Error { .. }))
            .map(|e| serde_json::to_string(e).unwrap_or_default())
            .unwrap_or_default();
        return Err(format!("exited with {status} {err}"));
    }
    let Some(v) = events
        .iter()
        .find(|e| matches!(e, ClientEvent::Verified { .. }))
    else {
        return Err(format!(
            "exit 0 but no `verified` event in its output: {}",
            tail(stdout.trim(), 400)
        ));
    };
    let matches = matches!(v, ClientEvent::Verified { verified: true, length, crc32c, .. }
        if *length == len as u64 && *crc32c == crc);
    if !matches {
        return Err(format!(
            "`verified` event does not match the payload (length {len}, crc32c {crc}): {v:?}"
        ));
    }
    Ok(events.iter().any(|e| matches!(e, ClientEvent::Busy { .. })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_output_is_checked_against_the_payload() {
        let ok = ExitStatus::from_raw(0);
        let connected = r#"{"type":"connected","server":"h","program":"rdma-server","program_version":"0.1.0","device":"rxe0","port":1,"gid_index":1,"gid":"::1"}"#;
        let good = format!(
            "{connected}\n{}",
            r#"{"type":"verified","verified":true,"length":17,"crc32c":617249076,"text":"x","truncated":false}"#
        );
        let good = good.as_str();
        assert_eq!(check_client(good, ok, 17, 617_249_076), Ok(false));
        // A client that heard `busy` first and waited its turn says so.
        let waited = format!(
            "{}\n{good}",
            r#"{"type":"busy","server":"h","attempt":1,"retry_in_ms":20}"#
        );
        assert_eq!(check_client(&waited, ok, 17, 617_249_076), Ok(true));
        assert!(check_client(good, ok, 16, 617_249_076).is_err());
        assert!(check_client(good, ok, 17, 1).is_err());
        assert!(check_client(good, ExitStatus::from_raw(7 << 8), 17, 617_249_076).is_err());
        assert!(check_client(connected, ok, 17, 617_249_076).is_err());
        // A line that is no client event is named, not skipped.
        let renamed = good.replace("crc32c", "crc");
        let err = check_client(&renamed, ok, 17, 617_249_076).unwrap_err();
        assert!(err.contains(r#""crc":617249076"#), "{err}");
        let human = format!("connected to h\n{good}");
        let err = check_client(&human, ok, 17, 617_249_076).unwrap_err();
        assert!(err.contains("(no JSON): connected to h"), "{err}");
        let unverified = good.replace("\"verified\":true", "\"verified\":false");
        assert!(check_client(&unverified, ok, 17, 617_249_076).is_err());
    }

    #[test]
    fn payloads_replay_from_the_rng_seed_and_fit_the_buffer() {
        let run = |rng_seed| {
            let mut rng = fastrand::Rng::with_seed(rng_seed);
            (0..300)
                .map(|_| random_payload(&mut rng, 64))
                .collect::<Vec<_>>()
        };
        let a = run(1);
        assert_eq!(
            a,
            run(1),
            "the same --rng-seed must replay the same payloads"
        );
        assert_ne!(a, run(2));
        assert!(a.iter().all(|p| (1..=64).contains(&p.len())));
        // Both ends of the range come up: one byte, and a payload that fills the buffer.
        assert!(a.iter().any(|p| p.len() == 1) && a.iter().any(|p| p.len() == 64));
        assert_eq!(random_payload(&mut fastrand::Rng::with_seed(3), 1).len(), 1);
    }
}
