//! `mesh`: this node's prober, running until stopped. One scheduler (the calling thread) asks
//! the pure core whom to probe and when ([`super::schedule`]), hands each probe to a bounded
//! pool of workers running a [`Prober`], and takes each result back: its cause
//! ([`super::cause`]), the pair's state ([`super::state`]), the events and the metrics.
//!
//! - **A probe never delays the next.** The scheduler only sends jobs and receives results; the
//!   workers run the probes. Interval `t`'s probes go out at its fire time whatever the ones
//!   before are doing.
//! - **At most one probe in flight per peer.** A peer whose probe is still running (or still
//!   queued) when its next one is due has that one skipped (`mesh_probe` with outcome
//!   `skipped`, counted), never queued behind it; so is a probe no worker is free for, and
//!   one a worker only reaches after its deadline.
//! - **Every probe has a deadline**, before its peer's next turn: its fire time plus
//!   `min(every, 30 s)`, but no later than [`TURN_MARGIN`] before this node next fires at the
//!   same peer; the prober ends its waits by it. So a failing probe, which takes its whole
//!   deadline, never costs the next one its turn: `--down-after` failures in a row are
//!   `--down-after` turns.
//! - Only the scheduler touches the pairs' states and emits: the events come in one order.
//!
//! After a stall of more than an interval (a paused VM, a suspended host), the intervals missed
//! are dropped (their probes counted as skipped, without an event each), not fired in a burst.
//!
//! It stops at `stop` (SIGINT, SIGTERM) or after `--mesh-cycles` cycles; then the probes in
//! flight are finished (by their deadlines) and counted, and `mesh_stopped` says why.

use super::MeshConfig;
use super::cause::{Cause, Outcome};
use super::clock::{self, Answer};
use super::metrics::{MeshMetrics, PathState, ProbeReport, ResultLabel};
use super::probe::{Job, ProbeFailure, Probed, Prober};
use super::state::{Observed, Pair, PairState};
use super::textfile::Textfile;
use super::topology::Tors;
use crate::fabric::ranks::World;
use crate::output::Event;
use color_eyre::eyre::{Report, Result, WrapErr as _};
use rdma_app::wake::Stop;
use rdma_proto::events::mesh::ProbeOutcome;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::time::{Duration, Instant, SystemTime};

/// The longest a probe may take, whatever the interval.
pub const PROBE_CAP: Duration = Duration::from_secs(30);
/// At most this many workers (the systemd unit's `TasksMax` counts them).
pub const MAX_WORKERS: usize = 16;
/// A probe ends at least this share of an interval before its peer's next turn, so that its
/// result is taken (and its path no longer in flight) when that turn comes.
pub const TURN_MARGIN: f64 = 0.1;

/// How long past the last deadline a stopping run waits for the probes in flight.
const DRAIN_GRACE: Duration = Duration::from_secs(5);

/// What the runner runs.
#[derive(Debug)]
pub struct Plan<'a> {
    pub world: &'a World,
    /// Each node's ToR (`--topology`): the schedule goes over ToRs ([`MeshConfig::schedule`]).
    pub tors: Option<&'a Tors>,
    pub config: MeshConfig,
    /// A bandwidth sample every this many probes of a pair (0: never).
    pub bw_every: u64,
    /// Stop after this many cycles (`None`: at `stop`).
    pub cycles: Option<u64>,
    /// The local device of each rail the probes leave from (one without `--rails`): the events'
    /// and metrics' `device`, by `rail`.
    pub devices: &'a [String],
    /// What each device (in `devices`' order) answered when asked for its completion clock:
    /// said once, in `mesh_started` and `rdma_mesh_timestamps_supported` ([`clock::said`]).
    pub clocks: &'a [Answer],
}

/// Where the runner's results go besides the events.
#[derive(Debug, Default)]
pub struct Sinks<'a> {
    pub metrics: Option<&'a MeshMetrics>,
    pub textfile: Option<&'a Textfile>,
}

/// How the run ended, and its counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// Intervals whose probes were sent.
    pub intervals: u64,
    /// Probes that ran and were judged (not those the prober itself failed: outcome `error`).
    pub probes: u64,
    pub failed: u64,
    pub skipped: u64,
    /// Stopped by `--mesh-cycles` rather than a signal.
    pub by_cycles: bool,
}

/// A verified write the server saw other bytes of.
const CORRUPT: &str = "the server's verdict: the bytes it saw are not the ones written";

/// One probe's path and interval: the peer, on one of this node's rails.
#[derive(Clone, Copy, Debug)]
struct Key {
    peer: usize,
    rail: usize,
    interval: u64,
}

/// What a worker sends back.
struct Done {
    job: Job,
    result: Ran,
}

/// What the scheduler waits for: a worker's result, or its stop's bell (a signal, or the run
/// ending), passed on by the watcher thread, so that it sleeps until one of them comes.
enum Msg {
    Done(Done),
    Rung,
}

/// Says the run is over and rings the stop's bell, however the run ends, so that the watcher
/// thread ends before the scope joins it.
struct Release<'a>(&'a Stop, &'a AtomicBool);

impl Drop for Release<'_> {
    fn drop(&mut self) {
        self.1.store(true, Ordering::SeqCst);
        self.0.bell().ringer().ring();
    }
}

enum Ran {
    Probed(Result<Probed, ProbeFailure>),
    /// Not run: no worker reached it before its deadline, or the run is stopping.
    Late,
    Stopping,
}

/// Runs the mesh until `stop` or the plan's cycles; every event goes to `emit`.
///
/// # Errors
/// A schedule that cannot be made, metrics that refuse a report, a textfile that cannot be
/// written.
pub fn run<P: Prober>(
    plan: &Plan<'_>,
    prober: &P,
    sinks: &Sinks<'_>,
    stop: &Stop,
    emit: &mut dyn FnMut(&Event<'_>),
) -> Result<Summary> {
    let world = plan.world;
    let config = &plan.config;
    let schedule = config.schedule(world.size(), plan.tors)?;
    let node = schedule.node(world.rank)?;
    let timing = config.timing()?;

    let limit = plan.cycles.map(|c| c.saturating_mul(schedule.cycle()));
    let rails = plan.devices.len().max(1);
    // Two intervals' worth of probes at once, at most MAX_WORKERS; an interval's worth may wait.
    let per_interval = schedule.fan_out() * rails;
    let workers = (2 * per_interval).clamp(1, MAX_WORKERS);
    let said = clock::said(plan.devices, plan.clocks);
    if let Some(m) = sinks.metrics {
        for (d, yes) in &said.supported {
            m.set_timestamps_supported(d, *yes)?;
        }
    }
    emit(&Event::MeshStarted {
        node: world.hosts[world.rank].as_str().into(),
        rank: world.rank,
        hosts: world.hosts.iter().map(|h| h.as_str().into()).collect(),
        fan_out: schedule.fan_out(),
        every_ms: u64::try_from(timing.every().as_millis()).unwrap_or(u64::MAX),
        cycle: schedule.cycle(),
        device: plan.devices.join(",").into(),
        timestamps: said.split,
        timestamps_why: Some(said.why.into()),
        cycles: plan.cycles,
        tor: plan
            .tors
            .and_then(|t| t.of.get(world.rank).and_then(|&i| t.names.get(i)))
            .map(|n| n.as_str().into()),
        tors: plan.tors.map(|t| t.names.len()),
    });
    let mut s = Scheduler {
        plan,
        pairs: vec![Pair::new(); world.size() * rails],
        in_flight: vec![false; world.size() * rails],
        runs: vec![0; world.size() * rails],
        summary: Summary::default(),
        sinks,
        emit,
    };
    let (jobs, queue) = mpsc::sync_channel::<Job>(per_interval.max(1));
    let (done_tx, done) = mpsc::channel::<Msg>();
    let queue = Mutex::new(queue);
    let probe_time = timing.every().min(PROBE_CAP);
    let start = Instant::now();
    let over = AtomicBool::new(false);
    std::thread::scope(|scope| -> Result<()> {
        for _ in 0..workers {
            let (queue, done_tx) = (&queue, done_tx.clone());
            scope.spawn(move || work(prober, &world.hosts, queue, &done_tx, stop));
        }
        {
            let (done_tx, over) = (done_tx.clone(), &over);
            scope.spawn(move || {
                // Woken by a signal, the run's end, or an interruption: the scheduler looks
                // at its stop each time; this ends once either is so.
                while !stop.requested() && !over.load(Ordering::SeqCst) {
                    if stop.bell().sleep().is_err() {
                        std::thread::sleep(Duration::from_millis(100));
                    }
                    let _ = done_tx.send(Msg::Rung);
                }
            });
        }
        let _release = Release(stop, &over);
        drop(done_tx);
        let r = (|| -> Result<()> {
            let mut t = 0u64;
            loop {
                if limit.is_some_and(|l| t >= l) {
                    s.summary.by_cycles = true;
                    return Ok(());
                }
                // After a stall (a paused VM, a suspended host) the intervals that passed are
                // dropped, not fired in a burst that would load the servers beyond the fan-out.
                let now = t.max(current(start.elapsed(), timing.every()));
                if now > t {
                    let missed = (now - t).saturating_mul(as_u64(schedule.fan_out() * rails));
                    s.summary.skipped = s.summary.skipped.saturating_add(missed);
                    t = limit.map_or(now, |l| now.min(l));
                    continue;
                }
                let fire = start + timing.fire_at(&node, t);
                if !s.wait_until(fire, &done, stop)? {
                    return Ok(());
                }
                write_textfile(sinks)?;
                for peer in node.peers(t) {
                    // Before this node's next probe of the same peer, whatever its jitter.
                    let deadline = node.next_turn(peer, t).map_or(fire + probe_time, |u| {
                        let next = start + timing.fire_at(&node, u);
                        let margin = timing.every().mul_f64(TURN_MARGIN);
                        (fire + probe_time).min(next.checked_sub(margin).unwrap_or(next))
                    });
                    for rail in 0..rails {
                        let key = Key {
                            peer,
                            rail,
                            interval: t,
                        };
                        s.send(&jobs, key, deadline)?;
                    }
                }
                s.summary.intervals = t + 1;
                t += 1;
            }
        })();
        // No more jobs: the workers finish what they hold (by its deadline) and end. A result
        // later than any deadline plus a grace is not waited for (the scope still joins the
        // worker, which the prober's own deadline ends).
        drop(jobs);
        let last = Instant::now() + probe_time + DRAIN_GRACE;
        while s.in_flight.iter().any(|&f| f) {
            let left = last.saturating_duration_since(Instant::now());
            match done.recv_timeout(left) {
                Ok(Msg::Done(d)) => s.take(d)?,
                Ok(Msg::Rung) => {}
                Err(_) => break,
            }
        }
        r
    })?;
    write_textfile(sinks)?;
    let summary = s.summary;
    (s.emit)(&Event::MeshStopped {
        why: if summary.by_cycles {
            "cycles"
        } else {
            "signal"
        }
        .into(),
        intervals: summary.intervals,
        probes: summary.probes,
        failed: summary.failed,
        skipped: summary.skipped,
    });
    Ok(summary)
}

/// A worker: takes jobs until the queue closes.
fn work<P: Prober>(
    prober: &P,
    hosts: &[String],
    queue: &Mutex<Receiver<Job>>,
    done: &mpsc::Sender<Msg>,
    stop: &Stop,
) {
    loop {
        // The lock is held only while waiting for the next job.
        let job = match queue.lock() {
            Ok(q) => q.recv(),
            Err(_) => return,
        };
        let Ok(job) = job else { return };
        let result = if stop.requested() {
            Ran::Stopping
        } else if Instant::now() >= job.deadline {
            Ran::Late
        } else {
            Ran::Probed(prober.probe(&hosts[job.peer], &job))
        };
        if done.send(Msg::Done(Done { job, result })).is_err() {
            return;
        }
    }
}

/// The scheduler's state: the pairs, what is in flight, the counts.
struct Scheduler<'p, 'e> {
    plan: &'p Plan<'p>,
    pairs: Vec<Pair>,
    in_flight: Vec<bool>,
    /// Probes sent to each peer (for `--bw-every`).
    runs: Vec<u64>,
    summary: Summary,
    sinks: &'p Sinks<'p>,
    emit: &'e mut dyn FnMut(&Event<'_>),
}

impl<'p> Scheduler<'p, '_> {
    /// Takes results until `fire`; `false` when `stop` came first.
    fn wait_until(&mut self, fire: Instant, done: &Receiver<Msg>, stop: &Stop) -> Result<bool> {
        loop {
            if stop.requested() {
                return Ok(false);
            }
            let now = Instant::now();
            if now >= fire {
                return Ok(true);
            }
            match done.recv_timeout(fire - now) {
                Ok(Msg::Done(d)) => self.take(d)?,
                // A signal (its flag is read above), or a ring that was not one.
                Ok(Msg::Rung) => {}
                Err(RecvTimeoutError::Timeout) => {}
                // No worker left: a bug (they end only when the queue closes).
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(color_eyre::eyre::eyre!(
                        "the mesh's probe workers all ended"
                    ));
                }
            }
        }
    }

    /// The device of `key`'s rail.
    fn device(&self, key: Key) -> &'p str {
        self.plan.devices.get(key.rail).map_or("", String::as_str)
    }

    /// The index of `key`'s path (peer and rail) in the pairs.
    fn ix(&self, key: Key) -> usize {
        key.peer * self.plan.devices.len().max(1) + key.rail
    }

    /// Sends `key`'s probe, or skips it.
    fn send(&mut self, jobs: &SyncSender<Job>, key: Key, deadline: Instant) -> Result<()> {
        let ix = self.ix(key);
        if self.in_flight[ix] {
            self.skipped(key, "its previous probe is still running");
            return Ok(());
        }
        let every = self.plan.bw_every;
        let bw = every > 0 && self.runs[ix] % every == every - 1;
        let job = Job {
            peer: key.peer,
            rail: key.rail,
            interval: key.interval,
            bw,
            deadline,
        };
        match jobs.try_send(job) {
            Ok(()) => {
                self.in_flight[ix] = true;
                self.runs[ix] += 1;
            }
            Err(TrySendError::Full(_)) => {
                self.skipped(key, "no probe worker was free (earlier probes are stuck)");
            }
            Err(TrySendError::Disconnected(_)) => {
                return Err(color_eyre::eyre::eyre!(
                    "the mesh's probe workers all ended"
                ));
            }
        }
        Ok(())
    }

    fn skipped(&mut self, key: Key, why: &str) {
        self.summary.skipped += 1;
        let state = self.pairs[self.ix(key)].state();
        self.probe_event(
            key,
            ProbeOutcome::Skipped,
            None,
            None,
            None,
            state,
            Some(why),
            (false, false),
        );
    }

    /// Takes one worker's result.
    fn take(&mut self, d: Done) -> Result<()> {
        let Done { job, result } = d;
        let key = Key {
            peer: job.peer,
            rail: job.rail,
            interval: job.interval,
        };
        let ix = self.ix(key);
        self.in_flight[ix] = false;
        let reused = matches!(&result, Ran::Probed(Ok(p)) if p.reused);
        let stamped = matches!(&result, Ran::Probed(Ok(p)) if p.stamped);
        let probed = match result {
            Ran::Stopping => return Ok(()),
            Ran::Late => {
                let why = "no probe worker was free before its deadline";
                self.skipped(key, why);
                return Ok(());
            }
            Ran::Probed(r) => r,
        };
        let (outcome, error, bw) = match probed {
            Ok(p) if !p.verified => (
                Outcome::Failed {
                    cause: Cause::Corrupt,
                },
                Some(CORRUPT.to_owned()),
                None,
            ),
            Ok(p) => (
                Outcome::Ok {
                    rtt: p.rtt,
                    stalled: p.stalled,
                },
                None,
                p.bw_mbs,
            ),
            Err(f) => {
                let why = rdma_app::report::message(&f.error);
                let Some(o) = Outcome::failed(&f.error, f.stage) else {
                    // The prober's own fault: says nothing of the pair.
                    let state = self.pairs[ix].state();
                    let e = ProbeOutcome::Error;
                    self.probe_event(key, e, None, None, None, state, Some(&why), (false, false));
                    return Ok(());
                };
                (o, Some(why), None)
            }
        };
        let cfg = &self.plan.config.state;
        let observed = self.pairs[ix].observe(cfg, &outcome);
        let state = self.pairs[ix].state();
        let cause = observed.mark.probe_cause();
        let rtt = match outcome {
            Outcome::Ok { rtt, .. } => Some(rtt),
            Outcome::Failed { .. } => None,
        };
        self.summary.probes += 1;
        let verdict = if cause.is_some() {
            self.summary.failed += 1;
            ProbeOutcome::Failed
        } else {
            ProbeOutcome::Ok
        };
        if let Some(m) = self.sinks.metrics {
            let rail = key.rail.to_string();
            let peer = &self.plan.world.hosts[key.peer];
            let report = ProbeReport {
                bandwidth: bw.map(|mbs| mbs * 1_048_576.0),
                ..probe_report(peer, self.device(key), &rail, &observed, state, &outcome)
            };
            m.record(&report)
                .wrap_err("recording a probe in the metrics")?;
        }
        self.probe_event(
            key,
            verdict,
            cause,
            rtt,
            bw,
            state,
            error.as_deref(),
            (reused, stamped),
        );
        if let Some(tr) = observed.transition {
            let host = &self.plan.world.hosts[key.peer];
            let device = self.device(key);
            (self.emit)(&Event::MeshState {
                peer: host.as_str().into(),
                peer_rank: key.peer,
                device: device.into(),
                rail: key.rail,
                from: tr.from,
                to: tr.to,
                cause: tr.cause,
            });
        }
        Ok(())
    }

    #[expect(
        clippy::too_many_arguments,
        reason = "one event's fields, named at the call"
    )]
    fn probe_event(
        &mut self,
        key: Key,
        outcome: ProbeOutcome,
        cause: Option<Cause>,
        rtt: Option<super::rtt::Rtt>,
        bw_mbs: Option<f64>,
        state: PairState,
        error: Option<&str>,
        (reused, stamped): (bool, bool),
    ) {
        let ns = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let split = rtt.and_then(|r| r.split);
        let device = self.device(key);
        (self.emit)(&Event::MeshProbe {
            interval: key.interval,
            peer: self.plan.world.hosts[key.peer].as_str().into(),
            peer_rank: key.peer,
            device: device.into(),
            rail: key.rail,
            outcome,
            cause,
            wall_ns: rtt.map(|r| ns(r.wall)),
            network_ns: split.map(|s| ns(s.network)),
            host_delay_ns: split.map(|s| ns(s.host_delay)),
            bw_mbs,
            state,
            reused,
            stamped,
            error: error.map(Into::into),
        });
    }
}

/// The interval `elapsed` falls in, minus one: the latest whose probes may still go out (an
/// interval's round fires within it, so the one before the current may be still due).
fn current(elapsed: Duration, every: Duration) -> u64 {
    let n = elapsed.as_nanos() / every.as_nanos().max(1);
    u64::try_from(n).unwrap_or(u64::MAX).saturating_sub(1)
}

fn as_u64(x: usize) -> u64 {
    u64::try_from(x).unwrap_or(u64::MAX)
}

/// The one place a judged probe becomes its metrics report (the runner's, and the fleet
/// simulation's): its `result` from its mark, its state, whether it changed it, its round trips,
/// ending now; no bandwidth sample.
pub fn probe_report<'a>(
    peer: &'a str,
    device: &'a str,
    rail: &'a str,
    observed: &Observed,
    state: PairState,
    outcome: &Outcome,
) -> ProbeReport<'a> {
    let rtt = match outcome {
        Outcome::Ok { rtt, .. } => Some(*rtt),
        Outcome::Failed { .. } => None,
    };
    ProbeReport {
        peer,
        device,
        rail,
        result: ResultLabel::from(observed.mark.probe_cause()),
        state: PathState::of(state),
        changed: observed.transition.is_some(),
        wall_rtt: rtt.map(|r| r.wall),
        network_rtt: rtt.and_then(|r| r.split).map(|s| s.network),
        host_delay: rtt.and_then(|r| r.split).map(|s| s.host_delay),
        bandwidth: None,
        at: SystemTime::now(),
    }
}

/// Writes `metrics` to the textfile, when there are both.
fn write_textfile(sinks: &Sinks<'_>) -> Result<()> {
    match (sinks.textfile, sinks.metrics) {
        (Some(f), Some(m)) => f.write(m).map_err(Report::new),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests;
