//! `fabric`: this node's part of the check. For each round of the schedule in which it is
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
//! server: the bench's own sessions (`bench::Measure`, as `bench --mode lat` and `bench --mode bw` with
//! 2-byte and 64 KiB messages, `--lat-iters` and `--bw-iters` of them; 0 turns one off). A
//! measurement that fails fails the pair, with the reason. The server must allow bench
//! sessions (its default).
//!
//! With `--rails`, each pair runs once per rail of this node, one after the other in the
//! pair's round: to the partner's address on that rail (`rails::match_peer`), from the local
//! end `DeviceArgs::open_for` picks for the address that connection leaves from (opened once
//! per rail); each line carries its `rail`. A partner whose name has no address on one of our
//! rails fails those pairs, with the reason.

use super::FabricTask;
use super::error::FabricError;
use super::pair::PairResult;
use super::rails;
use super::ranks::{RankError, World};
use super::schedule;
use crate::bench::{Measure, Sweep};
use crate::output::{Event, Output};
use crate::run::Write;
use crate::session::Target;
use color_eyre::eyre::{Report, Result};
use rdma_core_rs::LocalPort;
use rdma_core_rs::route::Rail;
use rdma_proto::bench::BenchMode;
use rdma_proto::events::fabric::RailOf;
use rdma_proto::{ErrorCode, ProtoError};
use std::borrow::Cow;
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs as _};
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
    let ends = match f.rails {
        Some(want) => LocalPort::rails()
            .map_err(Report::new)
            .and_then(|found| {
                rails::select(&world.hosts[world.rank], found, want).map_err(Report::new)
            })
            .map(|rails| Ends::Rails {
                rails,
                opened: HashMap::new(),
            }),
        None => task.device.open().map(Ends::One).map_err(Report::new),
    };
    let mut ends = match ends {
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
            for (round, target) in partners() {
                let mut r = blank(&world, round, target, Duration::ZERO);
                r.retest = f.retest.is_some();
                r.rail.clone_from(&rail);
                let r = with_failure(r, &e, "the writer's local RDMA: ");
                out.emit(&Event::FabricPair(Cow::Borrowed(&r)));
            }
            return Err(e);
        }
    };
    let mut failed = 0;
    let mut pairs = 0;
    for (round, target) in partners() {
        let job = Pair {
            task,
            world: &world,
            round,
            target,
        };
        for result in ends.run(&job, &payload, token.as_deref()) {
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

/// This node's ends: one device (today's check), or its rails.
enum Ends {
    One(LocalPort),
    Rails {
        rails: Vec<Rail>,
        /// Each rail's local end, by the address its connections leave from, opened once.
        opened: HashMap<IpAddr, LocalPort>,
    },
}

impl Ends {
    /// `job` on each of this node's ends: one result, or one per rail.
    fn run(&mut self, job: &Pair<'_>, payload: &[u8], token: Option<&str>) -> Vec<PairResult> {
        let f = &job.task.fabric;
        let host = &job.world.hosts[job.target];
        let (rails, opened) = match self {
            Ends::One(local) => {
                return vec![match Target::at(host, f.fabric_port) {
                    Ok(server) => job.run(local, &server, None, payload, token),
                    Err(e) => job.failed(None, &e, ""),
                }];
            }
            Ends::Rails { rails, opened } => (&*rails, opened),
        };
        let me = &job.world.hosts[job.world.rank];
        let on = |index: usize| RailOf {
            index,
            rails: rails.len(),
            device: Some(rails[index].device.clone()),
            addr: None,
            target_addr: None,
        };
        let peer = routes(host, f.fabric_port)
            .and_then(|routes| rails::match_peer(me, rails, host, &routes).map_err(Report::new));
        let peer = match peer {
            Ok(peer) => peer,
            Err(e) => {
                return (0..rails.len())
                    .map(|i| job.failed(Some(on(i)), &e, ""))
                    .collect();
            }
        };
        peer.iter()
            .enumerate()
            .map(|(i, p)| {
                let mut rail = RailOf {
                    addr: Some(p.source),
                    target_addr: Some(p.target),
                    ..on(i)
                };
                let local = match opened.entry(p.source) {
                    Entry::Occupied(o) => o.into_mut(),
                    // The device that holds the address the connection leaves from: the
                    // client's own rule (`DeviceArgs::open_for`).
                    Entry::Vacant(v) => match job.task.device.open_for(p.source) {
                        Ok((local, _)) => v.insert(local),
                        Err(e) => {
                            return job.failed(
                                Some(rail),
                                &Report::new(e),
                                "the writer's local RDMA: ",
                            );
                        }
                    },
                };
                rail.device = Some(local.ctx.name().to_owned());
                let server = Target {
                    name: SocketAddr::new(p.target, f.fabric_port).to_string(),
                    addr: SocketAddr::new(p.target, f.fabric_port),
                };
                job.run(local, &server, Some(rail), payload, token)
            })
            .collect()
    }
}

/// Every address `host` resolves to, with the local address its route leaves from.
pub(crate) fn routes(host: &str, port: u16) -> Result<Vec<(IpAddr, Option<IpAddr>)>> {
    let mut ips: Vec<IpAddr> = Vec::new();
    match (host, port).to_socket_addrs() {
        Ok(found) => {
            for a in found {
                if !ips.contains(&a.ip()) {
                    ips.push(a.ip());
                }
            }
        }
        // The one-address lookup's error, which says what to give.
        Err(_) => {
            Target::at(host, port)?;
        }
    }
    Ok(ips
        .into_iter()
        .map(|ip| {
            let t = Target {
                name: host.to_owned(),
                addr: SocketAddr::new(ip, port),
            };
            (ip, t.route_source())
        })
        .collect())
}

/// This node's (round, target) for every round but its bye.
fn partners(world: &World) -> impl Iterator<Item = (usize, usize)> + '_ {
    let n = world.size();
    (0..schedule::rounds(n))
        .filter_map(move |round| schedule::partner(n, round, world.rank).map(|t| (round, t)))
}

/// One write of this node in one round (on each of its rails, with `--rails`).
struct Pair<'a> {
    task: &'a FabricTask,
    world: &'a World,
    round: usize,
    target: usize,
}

impl Pair<'_> {
    /// The result, before anything ran.
    fn blank(&self, rail: Option<RailOf>) -> PairResult {
        let mut r = blank(self.world, self.round, self.target, Duration::ZERO);
        r.retest = self.task.fabric.retest.is_some();
        r.rail = rail;
        r
    }

    /// The pair, failed before it ran with `e` (after `context`).
    fn failed(&self, rail: Option<RailOf>, e: &Report, context: &str) -> PairResult {
        with_failure(self.blank(rail), e, context)
    }

    /// The write and the measurements from `local` to `server`.
    fn run(
        &self,
        local: &LocalPort,
        server: &Target,
        rail: Option<RailOf>,
        payload: &[u8],
        token: Option<&str>,
    ) -> PairResult {
        let f = &self.task.fabric;
        let opts = &self.task.session;
        let started = Instant::now();
        let deadline = started + f.pair_deadline;
        let mut r = self.blank(rail);
        let notify = match crate::session::notify_for(self.task.notify, local) {
            Ok((notify, _)) => notify,
            Err(e) => return with_failure(r, &e, ""),
        };
        let token = || token.map(str::to_owned);
        let (written, waited) = wait_turn(deadline, || {
            let w = Write {
                target: server.clone(),
                payload,
                notify,
                token: token(),
                // The fabric check prints one event per pair, not the sessions' own.
                chosen: None,
                rounds: false,
            };
            w.run(local, opts, None)
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
                    target: server,
                    params: p.clone(),
                    token: token(),
                    knobs: self.task.knobs,
                    chosen: None,
                    rounds: false,
                    stamps: false,
                };
                m.run(local, opts, Instant::now(), None)
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
                        &format!("the write verified, but bench --mode {mode}: "),
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
        rail: None,
    }
}

/// `r`, failed with `e` (its exit kind and message, after `context`).
fn with_failure(mut r: PairResult, e: &Report, context: &str) -> PairResult {
    r.verified = false;
    r.error_kind = Some(crate::classify::classify(e));
    r.error = Some(format!("{context}{}", rdma_app::report::message(e)));
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
