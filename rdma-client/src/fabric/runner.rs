//! `--fabric`: this node's part of the check. For each round of the schedule in which it is
//! not on the bye, it does the seed's verified write (`run::Write`, the client's one write path)
//! to its partner's server and prints one `fabric_pair` event.
//!
//! Rounds stay in step without a scheduler of our own: every server runs with
//! `--max-clients 1`, so a server still serving the round before answers `busy`, and the writer
//! waits its turn (backing off, up to `--pair-deadline`); a server not up yet (connection
//! refused) is waited for the same way. A node's round ends when its own write and the
//! measurements after it have the target's verdicts, or one has failed; it then starts the
//! next round at once. Since a server serves one client at a time, nothing else ever writes
//! into a node while its writer of the round does.
//!
//! After the verified write, a short latency and bandwidth measurement runs against the same
//! server: the bench's own sessions (`bench::Measure`, as `--bench lat` and `--bench bw` with
//! 2-byte and 64 KiB messages, `--lat-iters` and `--bw-iters` of them; 0 turns one off). A
//! measurement that fails fails the pair, with the reason. The server must allow bench
//! sessions (its default).

use super::FabricTask;
use super::pair::PairResult;
use super::ranks::{RankError, World};
use super::{FabricError, schedule};
use crate::bench::{Measure, Sweep};
use crate::exit;
use crate::output::{Event, Output};
use crate::run::Write;
use crate::session::Target;
use color_eyre::eyre::{Report, Result};
use rdma_core_rs::LocalPort;
use rdma_proto::bench::BenchMode;
use rdma_proto::{ErrorCode, Exit, ProtoError};
use std::borrow::Cow;
use std::time::{Duration, Instant};

/// Runs every round of this node; `Err` when any of its pairs failed.
pub fn run(task: &FabricTask, out: &Output) -> Result<()> {
    let f = &task.fabric;
    let world = super::world(f)?;
    let only = match &f.retest {
        Some(host) => Some(
            world
                .hosts
                .iter()
                .position(|h| h == host)
                .filter(|&t| t != world.rank)
                .ok_or_else(|| RankError::NotAPartner(host.clone()))?,
        ),
        None => None,
    };
    let partners = || partners(&world).filter(|&(_, t)| only.is_none_or(|o| o == t));
    let payload = task.payload.load()?;
    let token = task.session.token.load()?;
    let local = match task.device.open() {
        Ok(local) => local,
        Err(e) => {
            // Every pair of this writer fails; say why in each, rather than leave the report
            // to call them missing. The exit is the local RDMA problem's own.
            let e = Report::new(e);
            for (round, target) in partners() {
                let mut r = blank(&world, round, target, Duration::ZERO);
                r.retest = f.retest.is_some();
                let r = with_failure(r, &e, "the writer's local RDMA: ");
                out.emit(&Event::FabricPair(Cow::Borrowed(&r)), || human(&r));
            }
            return Err(e);
        }
    };
    let mut failed = 0;
    let mut pairs = 0;
    for (round, target) in partners() {
        let job = Pair {
            task,
            local: &local,
            world: &world,
            round,
            target,
        };
        let result = job.run(&payload, token.as_deref());
        pairs += 1;
        failed += usize::from(!result.verified);
        out.emit(&Event::FabricPair(Cow::Borrowed(&result)), || {
            human(&result)
        });
    }
    if failed > 0 {
        return Err(FabricError::PairsFailed {
            failed,
            missing: 0,
            pairs,
        }
        .into());
    }
    Ok(())
}

/// This node's (round, target) for every round but its bye.
fn partners(world: &World) -> impl Iterator<Item = (usize, usize)> + '_ {
    let n = world.size();
    (0..schedule::rounds(n))
        .filter_map(move |round| schedule::partner(n, round, world.rank).map(|t| (round, t)))
}

/// One write of this node in one round.
struct Pair<'a> {
    task: &'a FabricTask,
    local: &'a LocalPort,
    world: &'a World,
    round: usize,
    target: usize,
}

impl Pair<'_> {
    fn run(&self, payload: &[u8], token: Option<&str>) -> PairResult {
        let f = &self.task.fabric;
        let opts = &self.task.session;
        let started = Instant::now();
        let deadline = started + f.pair_deadline;
        let mut r = blank(self.world, self.round, self.target, Duration::ZERO);
        r.retest = f.retest.is_some();
        let server = match Target::at(&self.world.hosts[self.target], f.fabric_port) {
            Ok(server) => server,
            Err(e) => return with_failure(r, &e, ""),
        };
        let notify = match crate::session::notify_for(self.task.notify, self.local) {
            Ok((notify, _)) => notify,
            Err(e) => return with_failure(r, &e, ""),
        };
        let token = || token.map(str::to_owned);
        let (written, waited) = wait_turn(deadline, || {
            let w = Write {
                target: &server,
                payload,
                notify,
                token: token(),
                // The fabric check prints one event per pair, not the sessions' own.
                chosen: None,
            };
            w.run(self.local, opts, None)
        });
        r.waited_ms = u64::try_from(waited.as_millis()).unwrap_or(u64::MAX);
        let delivered = match written {
            Ok(d) => d,
            Err(e) => return with_failure(r, &e, ""),
        };
        r.verified = delivered.outcome.verified;
        r.write_us = Some(delivered.write_micros as f64);
        // The short measurement: the bench's own sessions, to the same server.
        for (mode, size, iters) in [
            (BenchMode::Lat, 2, f.lat_iters),
            (BenchMode::Bw, 65536, f.bw_iters),
        ] {
            if iters == 0 || !r.verified {
                continue;
            }
            let p = Sweep {
                mode,
                sizes: vec![size],
                iters,
            };
            let (rows, _) = wait_turn(deadline, || {
                let m = Measure {
                    target: &server,
                    params: p.clone(),
                    token: token(),
                    knobs: self.task.knobs,
                    chosen: None,
                };
                m.run(self.local, opts, Instant::now(), None)
            });
            match rows {
                Ok(rows) => {
                    r.lat_us = r.lat_us.or(rows.lat.first().map(|l| l.t_typical_us));
                    r.bw_mbs = r.bw_mbs.or(rows.bw.first().map(|b| b.bw_avg_mbs));
                }
                Err(e) => {
                    r.verified = false;
                    return with_failure(
                        r,
                        &e,
                        &format!("the write verified, but --bench {mode}: "),
                    );
                }
            }
        }
        r
    }
}

/// A pair's result with nothing done yet.
fn blank(w: &World, round: usize, target: usize, waited: Duration) -> PairResult {
    PairResult {
        round,
        world: w.size(),
        writer: w.rank,
        writer_host: w.hosts[w.rank].clone(),
        target,
        target_host: w.hosts[target].clone(),
        verified: false,
        error_kind: None,
        error: None,
        write_us: None,
        waited_ms: u64::try_from(waited.as_millis()).unwrap_or(u64::MAX),
        lat_us: None,
        bw_mbs: None,
        retest: false,
    }
}

/// `r`, failed with `e` (its exit kind and message, after `context`).
fn with_failure(mut r: PairResult, e: &Report, context: &str) -> PairResult {
    r.verified = false;
    r.error_kind = Some(exit::classify(e));
    r.error = Some(format!("{context}{}", rdma_proto::app::report::message(e)));
    r
}

/// Runs `attempt` until it is not told to wait (see [`must_wait`]) or `deadline` is near,
/// backing off from 20 ms to 500 ms; also returns how long it waited before the last attempt.
fn wait_turn<T>(
    deadline: Instant,
    mut attempt: impl FnMut() -> Result<T>,
) -> (Result<T>, Duration) {
    let started = Instant::now();
    let mut pause = Duration::from_millis(20);
    loop {
        let this = Instant::now();
        match attempt() {
            Err(e) if must_wait(&e) && Instant::now() + pause < deadline => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(500));
            }
            done => return (done, this - started),
        }
    }
}

/// The target is not ready for us yet: its server is busy (serving the round before) or not
/// listening yet.
fn must_wait(e: &Report) -> bool {
    e.chain().any(|c| {
        if let Some(p) = c.downcast_ref::<ProtoError>() {
            return matches!(p, ProtoError::Remote(_)) && p.code() == ErrorCode::Busy;
        }
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused)
    })
}

fn human(r: &PairResult) -> String {
    let head = format!(
        "round {}{}: {} -> {}",
        r.round,
        if r.retest { " (re-test)" } else { "" },
        rdma_proto::printable(&r.writer_host),
        rdma_proto::printable(&r.target_host)
    );
    if r.verified {
        let measured = |v: Option<f64>, unit: &str| {
            v.map_or_else(|| "-".to_owned(), |v| format!("{v:.2} {unit}"))
        };
        format!(
            "{head}: verified, write {:.0} us, latency {}, bandwidth {} (waited {} ms)",
            r.write_us.unwrap_or_default(),
            measured(r.lat_us, "us"),
            measured(r.bw_mbs, "MB/s"),
            r.waited_ms
        )
    } else {
        format!(
            "{head}: FAILED ({}): {}",
            r.error_kind.unwrap_or(Exit::Unverified),
            rdma_proto::printable(r.error.as_deref().unwrap_or_default())
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exit::ClientError;
    use rdma_proto::ErrorMsg;

    fn busy() -> Report {
        Report::new(ProtoError::Remote(ErrorMsg::new(ErrorCode::Busy, "busy")))
    }

    #[test]
    fn a_busy_target_is_waited_for_until_the_deadline() {
        // Busy twice, then served: the wait is the two pauses (20 + 40 ms).
        let mut tries = 0;
        let (r, waited) = wait_turn(Instant::now() + Duration::from_secs(5), || {
            tries += 1;
            if tries < 3 { Err(busy()) } else { Ok(tries) }
        });
        assert_eq!(r.unwrap(), 3);
        assert!(waited >= Duration::from_millis(60), "{waited:?}");
        // Another error ends it at once.
        let mut tries = 0;
        let (r, _) = wait_turn(Instant::now() + Duration::from_secs(5), || {
            tries += 1;
            Err::<(), _>(Report::new(ProtoError::Remote(ErrorMsg::new(
                ErrorCode::Forbidden,
                "no",
            ))))
        });
        assert!(r.is_err() && tries == 1);
        // Busy for ever: the busy error once the deadline is near.
        let t = Instant::now();
        let (r, _) = wait_turn(t + Duration::from_millis(300), || Err::<(), _>(busy()));
        assert!(must_wait(&r.unwrap_err()));
        assert!(t.elapsed() < Duration::from_secs(2));
    }

    #[test]
    fn busy_and_refused_mean_wait_anything_else_means_fail() {
        let busy = ErrorMsg::new(ErrorCode::Busy, "serving its maximum of 1 clients");
        let e = Report::new(ProtoError::Remote(busy)).wrap_err("handshake");
        assert!(must_wait(&e));
        let refused = ClientError::Connect {
            addr: "10.0.0.2:7471".into(),
            port: 7471,
            source: std::io::ErrorKind::ConnectionRefused.into(),
        };
        assert!(must_wait(&Report::new(refused)));
        let forbidden = ErrorMsg::new(ErrorCode::Forbidden, "not in --allow");
        assert!(!must_wait(&Report::new(ProtoError::Remote(forbidden))));
        let timeout = ClientError::Connect {
            addr: "10.0.0.2:7471".into(),
            port: 7471,
            source: std::io::ErrorKind::TimedOut.into(),
        };
        assert!(!must_wait(&Report::new(timeout)));
    }
}
