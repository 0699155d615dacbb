//! `fabric`: this node's part of the check. For each round of the schedule in which it is
//! not on the bye, it probes its partner once with the mesh's prober (`mesh::probe::VerbsProber`,
//! the client's one prober: the seed's verified write, then the short measurements) and prints
//! one `fabric_pair` event.
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
//! server: the bench's own sessions (as `bench --mode lat` and `bench --mode bw` with 2-byte
//! and 64 KiB messages, `--lat-iters` and `--bw-iters` of them; 0 turns one off). A
//! measurement that fails fails the pair, with the reason. The server must allow bench
//! sessions (its default). The pair's sessions share one deadline, `--pair-deadline`, and wait
//! their turn (`VerbsProber::wait_busy`); none is kept for another round.
//!
//! With `--rails`, each pair runs once per rail of this node, one after the other in the
//! pair's round: to the partner's address on that rail (`rails::match_peer`), from the local
//! end `DeviceArgs::open_for` picks for the address that connection leaves from (opened once
//! per rail, the prober's `Ends::Rails`); each line carries its `rail`. A partner whose name has no address on one of our
//! rails fails those pairs, with the reason.

use super::FabricTask;
use super::error::FabricError;
use super::pair::PairResult;
use super::rails;
use super::ranks::{RankError, World};
use super::schedule;
use crate::mesh::kept::Kept;
use crate::mesh::probe::{Ends, Job, ProbeFailure, Probed, VerbsProber};
use crate::output::{Event, Output};
use color_eyre::eyre::{Report, Result};
use rdma_core_rs::LocalPort;
use rdma_proto::events::fabric::RailOf;
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
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
    let payload = task.payload.load()?;
    let token = task.session.token.load()?;
    let me = &world.hosts[world.rank];
    let ends = match f.rails {
        Some(want) => LocalPort::rails()
            .map_err(Report::new)
            .and_then(|found| rails::select(me, found, want).map_err(Report::new))
            .map(|rails| Ends::Rails {
                me: me.clone(),
                rails,
                device: &task.device,
                opened: Mutex::new(HashMap::new()),
            }),
        None => task
            .device
            .open()
            .map(|local| Ends::One(Arc::new(local)))
            .map_err(Report::new),
    };
    let ends = match ends {
        Ok(ends) => ends,
        Err(e) => {
            // Every pair of this writer fails; say why in each, rather than leave the report
            // to call them missing. The exit is the local RDMA problem's own.
            let rail = f.rails.map(|_| RailOf {
                index: 0,
                rails: 0,
                device: None,
                addr: None,
                target_addr: None,
            });
            for (round, target) in partners(&world, only) {
                let mut r = blank(&world, round, target, f.retest.is_some());
                r.rail.clone_from(&rail);
                let r = with_failure(r, &e, "the writer's local RDMA: ");
                out.emit(&Event::FabricPair(Cow::Borrowed(&r)));
            }
            return Err(e);
        }
    };
    let rails: Option<Vec<String>> = match &ends {
        Ends::One(_) => None,
        Ends::Rails { rails, .. } => Some(rails.iter().map(|r| r.device.clone()).collect()),
    };
    let prober = VerbsProber {
        ends,
        port: f.fabric_port,
        payload: &payload,
        notify: task.notify,
        token,
        session: task.session.clone(),
        knobs: task.knobs,
        lat_iters: f.lat_iters,
        bw_iters: f.bw_iters,
        ack_timeout: None,
        kept: Kept::new(false),
        kept_lat: Kept::new(false),
        revisit: Duration::ZERO,
        stamps: false,
        wait_busy: true,
    };
    let mut failed = 0;
    let mut pairs = 0;
    for (round, target) in partners(&world, only) {
        let pair = Pair {
            world: &world,
            round,
            target,
            retest: f.retest.is_some(),
            deadline: f.pair_deadline,
        };
        for result in pair.run(&prober, rails.as_deref()) {
            pairs += 1;
            failed += usize::from(!result.verified);
            out.emit(&Event::FabricPair(Cow::Borrowed(&result)));
        }
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

/// This node's (round, target) for every round but its bye; with `--retest`, only that
/// target's.
fn partners(world: &World, only: Option<usize>) -> impl Iterator<Item = (usize, usize)> + '_ {
    let n = world.size();
    (0..schedule::rounds(n))
        .filter_map(move |round| schedule::partner(n, round, world.rank).map(|t| (round, t)))
        .filter(move |&(_, t)| only.is_none_or(|o| o == t))
}

/// One probe of this node in one round (on each of its rails, with `--rails`).
struct Pair<'a> {
    world: &'a World,
    round: usize,
    target: usize,
    retest: bool,
    /// `--pair-deadline`: each rail's probe ends by it.
    deadline: Duration,
}

impl Pair<'_> {
    /// The probe on each end: one result, or one per rail (`rails`: their devices).
    fn run(&self, prober: &VerbsProber<'_>, rails: Option<&[String]>) -> Vec<PairResult> {
        let host = &self.world.hosts[self.target];
        let count = rails.map_or(1, <[String]>::len);
        (0..count)
            .map(|index| {
                let job = Job {
                    peer: self.target,
                    rail: index,
                    interval: self.round as u64,
                    bw: true,
                    deadline: Instant::now() + self.deadline,
                };
                let mut r = blank(self.world, self.round, self.target, self.retest);
                r.rail = rails.map(|devices| RailOf {
                    index,
                    rails: devices.len(),
                    device: Some(devices[index].clone()),
                    addr: None,
                    target_addr: None,
                });
                let end = match prober.end(host, &job) {
                    Ok(end) => end,
                    Err(f) => return with_failure(r, &f.error, ""),
                };
                if let Some(rail) = &mut r.rail {
                    rail.device = Some(end.local.ctx.name().to_owned());
                    rail.addr = end.source;
                    rail.target_addr = Some(end.target.addr.ip());
                }
                record(r, prober.probe_at(&end, host, &job))
            })
            .collect()
    }
}

/// A pair's result with nothing done yet.
fn blank(w: &World, round: usize, target: usize, retest: bool) -> PairResult {
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
        waited_ms: 0,
        lat_us: None,
        bw_mbs: None,
        retest,
        rail: None,
    }
}

/// `r` with what its probe found.
fn record(mut r: PairResult, probed: Result<Probed, ProbeFailure>) -> PairResult {
    match probed {
        Ok(p) => {
            r.verified = p.verified;
            r.waited_ms = u64::try_from(p.waited.as_millis()).unwrap_or(u64::MAX);
            r.write_us = Some(p.write.as_micros() as f64);
            r.lat_us = p.lat_us;
            r.bw_mbs = p.bw_mbs;
            r
        }
        Err(f) => with_failure(r, &f.error, ""),
    }
}

/// `r`, failed with `e` (its exit kind and message, after `context`).
fn with_failure(mut r: PairResult, e: &Report, context: &str) -> PairResult {
    r.verified = false;
    r.error_kind = Some(crate::classify::classify(e));
    r.error = Some(format!("{context}{}", rdma_app::report::message(e)));
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mesh::cause::Stage;
    use crate::mesh::rtt::Rtt;
    use rdma_proto::{ErrorCode, ErrorMsg, ProtoError};

    fn world(n: usize, rank: usize) -> World {
        World {
            hosts: (1..=n).map(|i| format!("node{i}")).collect(),
            rank,
        }
    }

    #[test]
    fn every_partner_once_and_with_retest_only_that_one() {
        let w = world(4, 0);
        let all: Vec<usize> = partners(&w, None).map(|(_, t)| t).collect();
        let mut sorted = all.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, [1, 2, 3], "each partner once: {all:?}");
        let rounds: Vec<usize> = partners(&w, None).map(|(r, _)| r).collect();
        assert!(rounds.windows(2).all(|p| p[0] < p[1]), "in round order");
        let only: Vec<(usize, usize)> = partners(&w, Some(2)).collect();
        assert_eq!(only.len(), 1);
        assert_eq!(only[0].1, 2);
        // An odd world: each node has a bye, and still meets everyone once.
        let w = world(3, 1);
        let mut met: Vec<usize> = partners(&w, None).map(|(_, t)| t).collect();
        met.sort_unstable();
        assert_eq!(met, [0, 2]);
    }

    #[test]
    fn a_probe_becomes_its_pair_record() {
        let w = world(3, 0);
        let ok = Probed {
            verified: true,
            rtt: Rtt::wall(Duration::from_micros(24)),
            bw_mbs: Some(900.5),
            stalled: false,
            reused: false,
            stamped: false,
            write: Duration::from_micros(31),
            lat_us: Some(12.0),
            waited: Duration::from_millis(60),
        };
        let r = record(blank(&w, 1, 2, true), Ok(ok));
        assert!(r.verified && r.retest);
        assert_eq!((r.round, r.writer, r.target), (1, 0, 2));
        assert_eq!(r.target_host, "node3");
        assert_eq!(r.write_us, Some(31.0));
        assert_eq!(r.lat_us, Some(12.0));
        assert_eq!(r.bw_mbs, Some(900.5));
        assert_eq!(r.waited_ms, 60);
        assert!(r.error.is_none() && r.error_kind.is_none());
        // The server saw other bytes: not verified, and no error of ours.
        let r = record(
            blank(&w, 1, 2, false),
            Ok(Probed {
                verified: false,
                ..ok
            }),
        );
        assert!(!r.verified && r.error.is_none());
        // A failed probe: its message and its exit kind.
        let failed = ProbeFailure {
            stage: Stage::Handshake,
            error: Report::new(ProtoError::Remote(ErrorMsg::new(
                ErrorCode::Forbidden,
                "not in --allow",
            )))
            .wrap_err("the write verified, but bench --mode lat"),
        };
        let r = record(blank(&w, 0, 1, false), Err(failed));
        assert!(!r.verified);
        let e = r.error.unwrap();
        assert!(
            e.starts_with("the write verified, but bench --mode lat: ") && e.contains("--allow"),
            "{e}"
        );
        assert!(r.error_kind.is_some());
    }
}
