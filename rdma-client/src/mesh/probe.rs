//! One probe of one peer: the [`Prober`] seam the mesh runner drives, and [`VerbsProber`], the
//! client's one prober, which the mesh runs every interval and the fabric check once for each
//! pair (`fabric::runner`), with the client's own steps: a verified write (`run::Write`, step by
//! step so that a failure knows its [`Stage`]), then a short `bench --mode lat`
//! (`bench::Measure`), then, when due, a short `bench --mode bw`. With `--rails`, from each
//! rail's device to the peer's address on that rail ([`Ends::Rails`]).
//!
//! **Waiting its turn** ([`VerbsProber::wait_busy`], the fabric check's lockstep): a server that
//! answers `busy` (it serves one client at a time, `--max-clients 1`) or is not listening yet is
//! tried again, backing off from 20 ms to 500 ms, until the probe's deadline is near. The mesh
//! does not wait: a busy peer is a failed probe.
//!
//! **The write and the lat exchange reuse their sessions** where the server offers rounds
//! ([`rdma_proto::rounds`]; for the exchange, `bench-rounds`): a path keeps each session
//! ([`super::kept`]) when the server keeps it longer than the path's next probe is away, and
//! that probe writes again on the same queue pairs (a `next`, fresh rkeys), with no TCP
//! connect, handshake or queue pair of its own. A kept session the server has closed since
//! (it restarted, its keep-alive ran out) is dropped, and the probe connects anew, as it does
//! everywhere else. The bandwidth sample, taken only every `--bw-every` probes (further apart
//! than a server keeps a session), is a session of its own each time.
//!
//! **Deadline.** A probe has one deadline (the runner's: from `--every`); each session of it
//! gets `--timeout` or what is left of the deadline, whichever is shorter, as the deadline of
//! each of its waits, and none starts once the deadline has passed. So a probe ends about when
//! its deadline does, whatever the peer does.
//!
//! **Round trip.** The lat exchange ends with the stamped exchange (PROTOCOL.md §3.7.1) where
//! the server offers it: where both devices stamped it, the probe's round trip is that
//! exchange's, split into the network's part and the hosts' ([`rtt_of`]). Elsewhere it is the
//! wall time of the lat exchange: twice its typical (median) half round trip, as perftest
//! reports lat ([`super::rtt::Rtt::wall`]). With `--lat-iters 0`, the verified write's own
//! time, from posting it to its completion.

use super::cause::Stage;
use super::kept::Kept;
use super::rtt::{DeviceClock, Exchange, Rtt, RttError, SendStamp, Stamps};
use crate::bench::{Bench, Knobs, Measure, Stamped, Sweep};
use crate::run::{Connected, Write};
use crate::session::{SessionOptions, Target};
use color_eyre::eyre::{Report, Result};
use rdma_app::device::DeviceArgs;
use rdma_core_rs::route::Rail;
use rdma_core_rs::{CompletionClock, LocalPort};
use rdma_proto::bench::BenchMode;
use rdma_proto::{ErrorCode, FrameError, Notify, ProtoError};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One probe the runner asks for.
#[derive(Clone, Copy, Debug)]
pub struct Job {
    /// The peer's rank.
    pub peer: usize,
    /// This node's rail it leaves from (0 without `--rails`).
    pub rail: usize,
    /// The interval it belongs to.
    pub interval: u64,
    /// Whether to take a bandwidth sample too (`--bw-every`).
    pub bw: bool,
    /// When it must be over.
    pub deadline: Instant,
}

/// What a probe that ran to the server's verdicts found.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Probed {
    /// The server's verdict on the write (`false`: it saw other bytes).
    pub verified: bool,
    /// The round trip (see the module docs).
    pub rtt: Rtt,
    /// The bandwidth sample, MB/s (2^20 bytes), when one was taken.
    pub bw_mbs: Option<f64>,
    /// The write, or one ping-pong of the lat exchange, took longer than the ACK timeout: it
    /// waited out a retransmission ([`stalled`]).
    pub stalled: bool,
    /// The probe opened no session: its write, and its lat exchange where it had one, went on
    /// sessions kept from the path's last probe ([`super::kept`]).
    pub reused: bool,
    /// The lat exchange ended with the stamped exchange (a write with immediate each way,
    /// [`crate::bench::hot::stamped`]); where both devices stamped it, `rtt` is its split.
    pub stamped: bool,
    /// The verified write, from posting it to its completion.
    pub write: Duration,
    /// The lat exchange's typical half round trip (µs), as `bench --mode lat` reports it.
    pub lat_us: Option<f64>,
    /// How long the write waited for its turn before its last attempt ([`VerbsProber::wait_busy`]).
    pub waited: Duration,
}

/// Whether a wait of `took` (the write from post to completion, or one ping-pong's round trip)
/// can only be explained by a retransmission: a packet lost on RC is resent after the queue
/// pair's local ACK timeout, so a round trip that needed it takes at least that timeout plus a
/// round trip of its own (`floor`: the exchange's fastest; zero for the write). A healthy
/// path's round trip is orders of magnitude shorter (microseconds against 67 ms at the
/// default), so this tells loss that RC otherwise hides (the exchange's median does not move);
/// a host that stalls for less than that is not taken for loss. No ACK timeout (infinite):
/// never.
#[must_use]
pub fn stalled(took: Duration, floor: Duration, ack_timeout: Option<Duration>) -> bool {
    ack_timeout.is_some_and(|t| took >= t + floor)
}

/// A probe that failed: how far it got, and the client's error.
#[derive(Debug)]
pub struct ProbeFailure {
    pub stage: Stage,
    pub error: Report,
}

/// Probes one peer (by name) for the runner; called from several worker threads at once.
pub trait Prober: Sync {
    /// Runs `job` against `peer`, ending by `job.deadline`.
    ///
    /// # Errors
    /// The probe failed, at a stage.
    fn probe(&self, peer: &str, job: &Job) -> Result<Probed, ProbeFailure>;
}

/// The bytes of the bandwidth sample's writes (the fabric check's).
pub const BW_SIZE: u64 = 65536;
/// The lat exchange's message size (the fabric check's).
pub const LAT_SIZE: u64 = 2;

/// Where this node's probes leave from: one device (the device flags' choice), or one per rail
/// (`--rails`: the peer's address on rail `i` from its name (`fabric::rails::match_peer`),
/// from the local end `DeviceArgs::open_for` picks for the address that connection leaves
/// from, opened once per address).
#[derive(Debug)]
pub enum Ends<'a> {
    One(Arc<LocalPort>),
    Rails {
        /// This node's name.
        me: String,
        rails: Vec<Rail>,
        device: &'a DeviceArgs,
        opened: Mutex<HashMap<IpAddr, Arc<LocalPort>>>,
    },
}

/// The real prober: this node's device(s), the client's steps.
#[derive(Debug)]
pub struct VerbsProber<'a> {
    pub ends: Ends<'a>,
    /// The peers' servers' port.
    pub port: u16,
    /// What the verified write writes (`--probe-bytes`).
    pub payload: &'a [u8],
    /// `--notify`; `None`: what the device has (`session::notify_for`).
    pub notify: Option<Notify>,
    pub token: Option<String>,
    /// `--timeout`, `--cq-mode`, `--cm` (its token and retry are not used: the token is loaded
    /// once, and a probe never waits for a server to come up).
    pub session: SessionOptions,
    pub knobs: Knobs,
    /// Ping-pongs of the lat exchange (0: none).
    pub lat_iters: u64,
    /// Writes of a bandwidth sample.
    pub bw_iters: u64,
    /// The queue pairs' local ACK timeout (`RtsParams::ack_timeout`): a wait this long is a
    /// retransmission.
    pub ack_timeout: Option<Duration>,
    /// The write sessions kept between probes (`--no-reuse`: none).
    pub kept: Kept<Connected<'a>>,
    /// The lat exchanges' sessions kept between probes (`--no-reuse`: none).
    pub kept_lat: Kept<Bench<'a>>,
    /// How long until a path is probed again, at most: a session its server keeps for less is
    /// not kept.
    pub revisit: Duration,
    /// Ask servers that offer it for the stamped exchange after the lat sweep (the mesh: its
    /// round trip's split; the fabric check reports the sweep's own figure).
    pub stamps: bool,
    /// Wait for a busy or not yet listening server until the deadline (see the module docs).
    pub wait_busy: bool,
}

/// Where one probe runs: the local end, the peer's server, and the local address its
/// connection leaves from (with `--rails`).
#[derive(Debug)]
pub struct End {
    pub local: Arc<LocalPort>,
    pub target: Target,
    pub source: Option<IpAddr>,
}

impl<'a> VerbsProber<'a> {
    /// The options of a session starting now: each wait at most `--timeout` or what is left
    /// of the deadline.
    fn options(&self, job: &Job, stage: Stage) -> Result<SessionOptions, ProbeFailure> {
        let left = job.deadline.saturating_duration_since(Instant::now());
        if left < Duration::from_millis(1) {
            return Err(ProbeFailure {
                stage,
                error: Report::new(FrameError::Timeout {
                    after: Duration::ZERO,
                })
                .wrap_err("the probe's deadline (the mesh's from --every, the fabric check's --pair-deadline) passed before its next session"),
            });
        }
        Ok(SessionOptions {
            timeout: self.session.timeout.min(left),
            wait_for_server: None,
            ..self.session.clone()
        })
    }

    /// The local end and the server of `job`'s rail to `peer`.
    ///
    /// # Errors
    /// The peer's name or its rail does not resolve, or the local device does not open.
    pub fn end(&self, peer: &str, job: &Job) -> Result<End, ProbeFailure> {
        let port = self.port;
        let connect = |e: Report| ProbeFailure {
            stage: Stage::Connect,
            error: e,
        };
        let (me, rails, device, opened) = match &self.ends {
            Ends::One(local) => {
                let target = Target::at(peer, port).map_err(connect)?;
                return Ok(End {
                    local: local.clone(),
                    target,
                    source: None,
                });
            }
            Ends::Rails {
                me,
                rails,
                device,
                opened,
            } => (me, rails, device, opened),
        };
        let routes = crate::fabric::rails::routes(peer, port).map_err(connect)?;
        let on = crate::fabric::rails::match_peer(me, rails, peer, &routes)
            .map_err(|e| connect(Report::new(e)))?;
        let Some(p) = on.get(job.rail) else {
            return Err(connect(color_eyre::eyre::eyre!(
                "no rail {} here",
                job.rail
            )));
        };
        let target = Target {
            name: SocketAddr::new(p.target, port).to_string(),
            addr: SocketAddr::new(p.target, port),
        };
        let mut opened = opened
            .lock()
            .map_err(|_| connect(color_eyre::eyre::eyre!("a probe worker panicked")))?;
        let local = match opened.get(&p.source) {
            Some(l) => l.clone(),
            None => {
                let (l, _) = device
                    .open_for(p.source)
                    .map_err(|e| connect(Report::new(e).wrap_err("the writer's local RDMA")))?;
                let l = Arc::new(l);
                opened.insert(p.source, l.clone());
                l
            }
        };
        Ok(End {
            local,
            target,
            source: Some(p.source),
        })
    }

    /// The verified write, on the path's kept session where there is one that still works,
    /// else on a new one; its verdict, its time from post to completion, whether it reused a
    /// session, and how long it waited for its turn.
    fn write(
        &self,
        local: &LocalPort,
        target: &Target,
        job: &Job,
        path: super::kept::Key,
    ) -> Result<Written, ProbeFailure> {
        let opts = self.options(job, Stage::Connect)?;
        if let Some(mut c) = self.kept.take(&path, Instant::now()) {
            // A kept session the server closed since fails here, before anything is written:
            // it is dropped, and the probe connects anew.
            if c.again(opts.timeout).is_ok() {
                let (verified, took) = self.round(c, path)?;
                return Ok(Written {
                    verified,
                    took,
                    reused: true,
                    waited: Duration::ZERO,
                });
            }
        }
        let (notify, _) =
            crate::session::notify_for(self.notify, local).map_err(at(Stage::Connect))?;
        let (c, waited) = wait_turn(self.wait_busy, job.deadline, || {
            let opts = self.options(job, Stage::Connect)?;
            let w = Write {
                target: target.clone(),
                payload: self.payload,
                notify,
                token: self.token.clone(),
                chosen: None,
                rounds: self.kept.enabled(),
            };
            let opened = w.open(local, &opts, None, 0).map_err(at(Stage::Connect))?;
            opened.connect(local).map_err(at(Stage::Handshake))
        });
        let (verified, took) = self.round(c?, path)?;
        Ok(Written {
            verified,
            took,
            reused: false,
            waited,
        })
    }

    /// One write on `c` and its verdict; then `c` is kept for `path`'s next probe where its
    /// server keeps it long enough.
    fn round(
        &self,
        mut c: Connected<'a>,
        path: super::kept::Key,
    ) -> Result<(bool, Duration), ProbeFailure> {
        let started = c.post(c.remote).map_err(at(Stage::Transfer))?;
        let micros = c.complete(started).map_err(at(Stage::Transfer))?;
        let delivered = c.verdict(micros).map_err(at(Stage::Transfer))?;
        let took = Duration::from_micros(u64::try_from(micros).unwrap_or(u64::MAX));
        if let Some(keep) = c.session.keep_alive() {
            self.kept.put(path, c, Instant::now(), keep, self.revisit);
        }
        Ok((delivered.outcome.verified, took))
    }

    /// A short bench session of `mode`: the lat's typical, shortest and longest half round
    /// trips in µs, or the bw's average MB/s (thrice); and whether it ran on a session kept
    /// from the path's last probe (`lat` only: a `bw` sample opens its own).
    fn measure(
        &self,
        local: &LocalPort,
        target: &Target,
        job: &Job,
        mode: BenchMode,
        iters: u64,
        path: &super::kept::Key,
    ) -> Result<Swept, ProbeFailure> {
        // Out of time after the write: the path took it (a timeout in transfer is `rdma`).
        let opts = self.options(job, Stage::Transfer)?;
        let lat = mode == BenchMode::Lat;
        if let Some(mut bench) = lat
            .then(|| self.kept_lat.take(path, Instant::now()))
            .flatten()
        {
            // As for the write: a kept session the server closed since fails here, before
            // anything is written, and the probe connects anew.
            if bench.again(opts.timeout).is_ok() {
                return self
                    .sweep(bench, mode, path)
                    .map(|s| Swept { kept: true, ..s });
            }
        }
        let size = match mode {
            BenchMode::Lat => LAT_SIZE,
            BenchMode::Bw => BW_SIZE,
        };
        let (bench, _) = wait_turn(self.wait_busy, job.deadline, || {
            let opts = self.options(job, Stage::Transfer)?;
            let m = Measure {
                target,
                params: Sweep {
                    mode,
                    sizes: vec![size],
                    iters,
                },
                token: self.token.clone(),
                knobs: self.knobs,
                chosen: None,
                rounds: lat && self.kept_lat.enabled(),
                stamps: lat && self.stamps,
            };
            let opened = m.open(local, &opts, None).map_err(at(Stage::Connect))?;
            opened.connect(Instant::now()).map_err(at(Stage::Handshake))
        });
        self.sweep(bench?, mode, path)
    }

    /// One sweep on `bench` and its verdict, its figure; then a `lat` session is kept for
    /// `path`'s next probe where its server keeps it long enough.
    fn sweep(
        &self,
        mut bench: Bench<'a>,
        mode: BenchMode,
        path: &super::kept::Key,
    ) -> Result<Swept, ProbeFailure> {
        let rows = {
            let (session, mut link, run) = bench.link();
            run.measure(session, &mut link)
        }
        .map_err(at(Stage::Transfer))?;
        let theirs = bench.verdict().map_err(at(Stage::Transfer))?;
        let stamped = rows.stamped.map(|s| Stamped { theirs, ..s });
        if let (BenchMode::Lat, Some(keep)) = (mode, bench.keep_alive()) {
            self.kept_lat
                .put(path.clone(), bench, Instant::now(), keep, self.revisit);
        }
        let figure = match mode {
            BenchMode::Lat => rows
                .lat
                .first()
                .map(|r| (r.t_typical_us, r.t_min_us, r.t_max_us)),
            BenchMode::Bw => rows
                .bw
                .first()
                .map(|r| (r.bw_avg_mbs, r.bw_avg_mbs, r.bw_avg_mbs)),
        };
        let swept = |figure| Swept {
            figure,
            kept: false,
            stamped,
        };
        figure.map(swept).ok_or_else(|| ProbeFailure {
            stage: Stage::Transfer,
            error: color_eyre::eyre::eyre!("bench --mode {mode} gave no row"),
        })
    }
}

impl<'a> VerbsProber<'a> {
    /// [`Prober::probe`] from `end` ([`Self::end`]).
    ///
    /// # Errors
    /// The probe failed, at a stage.
    pub fn probe_at(&self, end: &End, peer: &str, job: &Job) -> Result<Probed, ProbeFailure> {
        let (local, target) = (&*end.local, &end.target);
        let path = (peer.to_owned(), job.rail);
        let Written {
            verified,
            took: write,
            mut reused,
            waited,
        } = self.write(local, target, job, path.clone())?;
        let mut stall = stalled(write, Duration::ZERO, self.ack_timeout);
        if !verified {
            return Ok(Probed {
                verified,
                rtt: Rtt::wall(write),
                bw_mbs: None,
                stalled: stall,
                reused,
                stamped: false,
                write,
                lat_us: None,
                waited,
            });
        }
        let bench_failed = |mode: BenchMode| {
            move |f: ProbeFailure| ProbeFailure {
                error: f
                    .error
                    .wrap_err(format!("the write verified, but bench --mode {mode}")),
                ..f
            }
        };
        let round = |half_us: f64| Duration::from_secs_f64((2.0 * half_us / 1e6).max(0.0));
        let (rtt, stamped, lat_us) = if self.lat_iters > 0 {
            let Swept {
                figure: (typical, least, worst),
                kept,
                stamped,
            } = self
                .measure(local, target, job, BenchMode::Lat, self.lat_iters, &path)
                .map_err(bench_failed(BenchMode::Lat))?;
            reused &= kept;
            stall |= stalled(round(worst), round(least), self.ack_timeout);
            (
                rtt_of(round(typical), stamped.as_ref()),
                stamped.is_some(),
                Some(typical),
            )
        } else {
            (Rtt::wall(write), false, None)
        };
        let bw_mbs = if job.bw && self.bw_iters > 0 {
            Some(
                self.measure(local, target, job, BenchMode::Bw, self.bw_iters, &path)
                    .map_err(bench_failed(BenchMode::Bw))?
                    .figure
                    .0,
            )
        } else {
            None
        };
        Ok(Probed {
            verified,
            rtt,
            bw_mbs,
            stalled: stall,
            reused,
            stamped,
            write,
            lat_us,
            waited,
        })
    }
}

impl Prober for VerbsProber<'_> {
    fn probe(&self, peer: &str, job: &Job) -> Result<Probed, ProbeFailure> {
        let end = self.end(peer, job)?;
        self.probe_at(&end, peer, job)
    }
}

/// Runs `attempt` once; if `wait_busy`, again while it is told to wait (see [`must_wait`])
/// and `deadline` is not near, backing off from 20 ms to 500 ms. Also returns how long it
/// waited before the last attempt.
fn wait_turn<T>(
    wait_busy: bool,
    deadline: Instant,
    mut attempt: impl FnMut() -> Result<T, ProbeFailure>,
) -> (Result<T, ProbeFailure>, Duration) {
    let started = Instant::now();
    let mut pause = Duration::from_millis(20);
    loop {
        let this = Instant::now();
        match attempt() {
            Err(e) if wait_busy && must_wait(&e.error) && Instant::now() + pause < deadline => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(500));
            }
            done => return (done, this - started),
        }
    }
}

/// What the verified write of a probe gave.
struct Written {
    verified: bool,
    took: Duration,
    reused: bool,
    waited: Duration,
}

/// The target is not ready for us yet: its server is busy (serving the one before) or not
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

/// A probe's round trip: the stamped exchange's, split into the network's part and the hosts',
/// where both devices stamped it; else `wall` (the lat exchange's typical round trip). Stamps
/// that do not fit together ([`RttError`]) are not used: the wall time then, never a guess.
fn rtt_of(wall: Duration, stamped: Option<&Stamped>) -> Rtt {
    stamped
        .and_then(|s| {
            let e = exchange_of(s).ok().flatten()?;
            Rtt::split(s.ours.wall, &e).ok()
        })
        .unwrap_or(Rtt::wall(wall))
}

/// The stamped exchange as [`Exchange`], where both sides stamped it: on RC a send completes
/// when the peer's ACK comes back ([`SendStamp::Acked`]).
///
/// # Errors
/// A side's clock that cannot time its stamps ([`DeviceClock::new`]).
fn exchange_of(s: &Stamped) -> Result<Option<Exchange>, RttError> {
    let (
        Some(CompletionClock::Clock {
            hca_core_clock_khz,
            timestamp_mask,
        }),
        Some(send),
        Some(recv),
        Some(t),
    ) = (s.clock, s.ours.ping, s.ours.answer, s.theirs)
    else {
        return Ok(None);
    };
    Ok(Some(Exchange {
        transport: SendStamp::Acked,
        prober: Stamps {
            clock: DeviceClock::new(hca_core_clock_khz, timestamp_mask)?,
            send,
            recv,
        },
        responder: Stamps {
            clock: DeviceClock::new(t.clock_khz, t.mask)?,
            recv: t.recv,
            send: t.send,
        },
    }))
}

/// What one bench session of a probe gave.
struct Swept {
    /// `lat`: the typical, shortest and longest half round trips (µs); `bw`: the average MB/s
    /// (thrice).
    figure: (f64, f64, f64),
    /// It ran on a session kept from the path's last probe.
    kept: bool,
    /// `lat`: the stamped exchange that ended the sweep, both sides' stamps.
    stamped: Option<Stamped>,
}

/// Tags an error with the stage it happened at.
fn at(stage: Stage) -> impl Fn(Report) -> ProbeFailure {
    move |error| ProbeFailure { stage, error }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::hot;
    use rdma_proto::bench::Turnaround;

    const US: Duration = Duration::from_micros(1);

    /// One tick a nanosecond, 48 bits.
    const CLOCK: CompletionClock = CompletionClock::Clock {
        hca_core_clock_khz: 1_000_000,
        timestamp_mask: (1 << 48) - 1,
    };

    /// An exchange on RC: the server turned the ping around in 30 µs, a round trip on the wire
    /// took 10 µs, and we saw the answer 45 µs after posting the ping.
    fn exchange() -> Stamped {
        Stamped {
            ours: hot::Stamped {
                wall: 45 * US,
                // The ping's ACK, then the answer 30 µs later (the server's turnaround).
                ping: Some(1_000),
                answer: Some(31_000),
            },
            clock: Some(CLOCK),
            // From the ping's arrival to the answer's ACK: turnaround + round trip.
            theirs: Some(Turnaround {
                recv: 500_000,
                send: 540_000,
                clock_khz: 1_000_000,
                mask: (1 << 48) - 1,
            }),
        }
    }

    #[test]
    fn a_stamped_exchange_splits_the_round_trip() {
        let rtt = rtt_of(77 * US, Some(&exchange()));
        assert_eq!(rtt.wall, 45 * US, "the stamped exchange's own wall time");
        let split = rtt.split.expect("both sides stamped");
        assert_eq!(split.network, 10 * US);
        assert_eq!(split.host_delay, 35 * US);
        assert_eq!(split.responder, 30 * US);
    }

    #[test]
    fn without_both_sides_stamps_the_round_trip_is_the_lat_exchanges_wall_time() {
        let typical = 77 * US;
        assert_eq!(rtt_of(typical, None), Rtt::wall(typical));
        // Soft-RoCE on either side: the exchange ran, nothing is stamped.
        let mut s = exchange();
        s.theirs = None;
        assert_eq!(rtt_of(typical, Some(&s)), Rtt::wall(typical));
        let mut s = exchange();
        s.clock = None;
        assert_eq!(rtt_of(typical, Some(&s)), Rtt::wall(typical));
        let mut s = exchange();
        s.ours.answer = None;
        assert_eq!(rtt_of(typical, Some(&s)), Rtt::wall(typical));
        // Stamps that do not fit together (the server's span shorter than ours), or a clock
        // that cannot time them, are not used: never a guessed split.
        let mut s = exchange();
        s.theirs = s.theirs.map(|t| Turnaround { send: 510_000, ..t });
        assert_eq!(rtt_of(typical, Some(&s)), Rtt::wall(typical));
        let mut s = exchange();
        s.theirs = s.theirs.map(|t| Turnaround { mask: 0xf0, ..t });
        assert!(exchange_of(&s).is_err());
        assert_eq!(rtt_of(typical, Some(&s)), Rtt::wall(typical));
    }

    fn busy() -> ProbeFailure {
        ProbeFailure {
            stage: Stage::Handshake,
            error: Report::new(ProtoError::Remote(rdma_proto::ErrorMsg::new(
                ErrorCode::Busy,
                "busy",
            ))),
        }
    }

    #[test]
    fn a_busy_target_is_waited_for_until_the_deadline_when_the_prober_waits() {
        // Busy twice, then served: the wait is the two pauses (20 + 40 ms).
        let mut tries = 0;
        let (r, waited) = wait_turn(true, Instant::now() + Duration::from_secs(5), || {
            tries += 1;
            if tries < 3 { Err(busy()) } else { Ok(tries) }
        });
        assert_eq!(r.unwrap(), 3);
        assert!(waited >= Duration::from_millis(60), "{waited:?}");
        // Another error ends it at once.
        let mut tries = 0;
        let (r, _) = wait_turn(true, Instant::now() + Duration::from_secs(5), || {
            tries += 1;
            Err::<(), _>(ProbeFailure {
                stage: Stage::Handshake,
                error: Report::new(ProtoError::Remote(rdma_proto::ErrorMsg::new(
                    ErrorCode::Forbidden,
                    "no",
                ))),
            })
        });
        assert!(r.is_err() && tries == 1);
        // Busy for ever: the busy error once the deadline is near.
        let t = Instant::now();
        let (r, _) = wait_turn(
            true,
            t + Duration::from_millis(300),
            || Err::<(), _>(busy()),
        );
        assert!(must_wait(&r.unwrap_err().error));
        assert!(t.elapsed() < Duration::from_secs(2));
        // The mesh's prober does not wait: busy is a failed probe at once.
        let mut tries = 0;
        let (r, waited) = wait_turn(false, Instant::now() + Duration::from_secs(5), || {
            tries += 1;
            Err::<(), _>(busy())
        });
        assert!(r.is_err() && tries == 1 && waited < Duration::from_millis(20));
    }

    #[test]
    fn busy_and_refused_mean_wait_anything_else_means_fail() {
        use crate::exit::ClientError;
        use rdma_proto::ErrorMsg;
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

    #[test]
    fn only_a_wait_as_long_as_the_ack_timeout_is_a_stall() {
        let t = rdma_core_rs::RtsParams::default().ack_timeout();
        let ms = Duration::from_millis;
        assert!(!stalled(ms(66), ms(0), t));
        assert!(stalled(ms(68), ms(0), t));
        // A retransmitted ping-pong is the timeout plus a round trip of its own: on a path
        // whose fastest round trip is 10 ms, 70 ms is a host that stalled, not a resend.
        assert!(!stalled(ms(70), ms(10), t));
        assert!(stalled(ms(78), ms(10), t));
        // An infinite ACK timeout never retransmits: nothing is a stall.
        assert!(!stalled(Duration::from_secs(60), ms(0), None));
    }
}
