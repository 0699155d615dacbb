//! `--fabric`: this node's part of the check. For each round of the schedule in which it is
//! not on the bye, it does the seed's verified write (`run::write`, the client's one write path)
//! to its partner's server and prints one `fabric_pair` event.
//!
//! Rounds stay in step without a scheduler of our own: every server runs with
//! `--max-clients 1`, so a server still serving the round before answers `busy`, and the writer
//! waits its turn (backing off, up to `--pair-deadline`); a server not up yet (connection
//! refused) is waited for the same way. A node's round ends when its own write has the
//! target's verdict or has failed; it then starts the next round at once.
//!
//! The latency and bandwidth fields stay empty (`null`) until the bench client exists; the
//! report then takes the verified write's own time as the pair's latency.

use super::pair::PairResult;
use super::ranks::World;
use super::{FabricError, schedule};
use crate::cli::Args;
use crate::exit;
use crate::output::{Event, Output};
use crate::run::{self, Delivered};
use color_eyre::eyre::{Report, Result};
use rdma_core_rs::LocalPort;
use rdma_proto::{ErrorCode, ProtoError};
use std::time::{Duration, Instant};

/// Runs every round of this node; `Err` when any of its pairs failed.
pub fn run(args: &Args, out: &Output) -> Result<()> {
    let world = super::world(&args.fabric)?;
    let payload = run::load_payload(args)?;
    let token = run::load_token(args)?;
    let local = args.local.open()?;
    let n = world.size();
    let mut failed = 0;
    let mut pairs = 0;
    for round in 0..schedule::rounds(n) {
        let Some(target) = schedule::partner(n, round, world.rank) else {
            continue;
        };
        let job = Pair {
            args,
            local: &local,
            world: &world,
            round,
            target,
        };
        let result = job.run(&payload, token.as_deref());
        pairs += 1;
        failed += usize::from(!result.verified);
        out.emit(&Event::FabricPair(&result), || human(&result));
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

/// One write of this node in one round.
struct Pair<'a> {
    args: &'a Args,
    local: &'a LocalPort,
    world: &'a World,
    round: usize,
    target: usize,
}

impl Pair<'_> {
    fn run(&self, payload: &[u8], token: Option<&str>) -> PairResult {
        let host = &self.world.hosts[self.target];
        let port = self.args.fabric.fabric_port;
        let server = if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        let started = Instant::now();
        let deadline = started + self.args.fabric.pair_deadline;
        let mut pause = Duration::from_millis(20);
        loop {
            let attempt = Instant::now();
            let done = run::write(
                self.args,
                self.local,
                &server,
                payload,
                token.map(str::to_owned),
                None,
            );
            match done {
                Ok(d) => return self.result(Ok(d), attempt - started),
                Err(e) if must_wait(&e) && Instant::now() + pause < deadline => {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(500));
                }
                Err(e) => return self.result(Err(e), attempt - started),
            }
        }
    }

    fn result(&self, done: Result<Delivered>, waited: Duration) -> PairResult {
        let w = self.world;
        let mut r = PairResult {
            round: self.round,
            world: w.size(),
            writer: w.rank,
            writer_host: w.hosts[w.rank].clone(),
            target: self.target,
            target_host: w.hosts[self.target].clone(),
            verified: false,
            error_kind: None,
            error: None,
            write_us: None,
            waited_ms: u64::try_from(waited.as_millis()).unwrap_or(u64::MAX),
            lat_us: None,
            bw_mbps: None,
        };
        match done {
            Ok(d) => {
                r.verified = d.outcome.verified;
                r.write_us = Some(d.write_micros as f64);
            }
            Err(e) => {
                r.error_kind = Some(exit::classify(&e).name().to_owned());
                r.error = Some(rdma_core_rs::app::report::message(&e));
            }
        }
        r
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
        "round {}: {} -> {}",
        r.round,
        rdma_proto::printable(&r.writer_host),
        rdma_proto::printable(&r.target_host)
    );
    if r.verified {
        format!(
            "{head}: verified, write {:.0} us (waited {} ms)",
            r.write_us.unwrap_or_default(),
            r.waited_ms
        )
    } else {
        format!(
            "{head}: FAILED ({}): {}",
            r.error_kind.as_deref().unwrap_or("unverified"),
            rdma_proto::printable(r.error.as_deref().unwrap_or_default())
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exit::ClientError;
    use rdma_proto::ErrorMsg;

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
