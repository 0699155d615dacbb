//! The mesh's pure core: an RDMA pingmesh in which every node probes its peers on a schedule,
//! through the real RDMA path, and tells a broken RDMA path from a dead host.
//!
//! `fabric` checks every pair once; the mesh runs until stopped. In each interval each node
//! probes a few peers (a small verified write and a short latency exchange, a bandwidth sample
//! now and then); the set rotates so that every ordered pair is covered within a cycle while the
//! load on each server stays `fan_out` probers per interval whatever the mesh's size. Each
//! failed probe has a cause; each pair has a state that only a run of consecutive probes moves.
//!
//! The core is sans-IO: no socket, no verbs, no clock, no thread. The runner ([`runner`]) asks
//! it whom to probe and when, runs the probes with the client's own steps ([`probe`]), and feeds
//! what came back in.
//!
//! - [`schedule`]: whom node `i` of `n` probes in interval `t` ([`schedule::Schedule`]), and when
//!   in the interval it fires ([`schedule::Timing`]: phase and jitter).
//! - [`topology`]: each node's ToR, from Slurm's `topology.conf` or `NODE SWITCH` lines
//!   ([`topology::Tors`]); with one, the schedule is a full mesh within each ToR and a
//!   rotating sample across them ([`schedule::Schedule::with_tors`]).
//! - [`cause`]: what a probe came to ([`cause::Outcome`]) and why one failed
//!   ([`cause::Cause`]), from the client's own error classification.
//! - [`state`]: one pair's state (`unknown`, `up`, `degraded`, `down`) and its RTT baseline
//!   ([`state::Pair`]).
//! - [`rtt`]: a round trip split into network time and host delay from the devices'
//!   completion timestamps (R-Pingmesh's arithmetic), or the wall time alone.
//!
//!
//! The operations side: [`clock`] (what the devices say of their completion timestamps, said
//! once at start), [`metrics`] (the metric families, fed with typed probe reports),
//! [`http`] (the `/metrics` endpoint, `--metrics-listen`), [`textfile`] (node_exporter's
//! textfile collector, `--metrics-textfile`, written atomically).
//!
//! Running it: [`task`] (the `mesh` flags, the setup, [`task::run`]), [`runner`] (the
//! scheduler and its bounded worker pool, over the [`probe::Prober`] seam, which a fake prober
//! drives in the tests), [`probe`] (the real prober: the fabric runner's steps), [`error`] (the
//! mesh's usage errors and their exit).
//!
//! Known limits: each probe is its own sessions, one per step (the server serves one write or
//! bench run per session: reusing sessions and queue pairs between probes needs a protocol
//! change); round trips are wall time (completion timestamps, `ibv_create_cq_ex`, are not read
//! yet: [`rtt`]'s split is ready for them, and `mesh_started` says `timestamps: false` and what
//! each device answered when asked for its completion clock, [`clock`]).
//! With `--rails`, each rail is a path of its own (the fabric check's rail matching).
//!
//! [`MeshConfig`] gathers the knobs, with defaults argued on each field.

pub mod cause;
pub mod clock;
pub mod error;
pub mod http;
pub mod kept;
pub mod metrics;
pub mod probe;
pub mod rtt;
pub mod runner;
pub mod schedule;
pub mod state;
pub mod task;
pub mod textfile;
pub mod topology;

use schedule::{Schedule, ScheduleError, Timing};
use state::{StateConfig, StateError};
use std::time::Duration;
use topology::Tors;

/// The mesh's knobs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MeshConfig {
    /// One probe round per node every this long. Default **10 s**: Pingmesh's order of
    /// magnitude; with the default fan-out a 1024-node mesh covers every ordered pair in 128
    /// intervals (21 min), a 64-node one in 8 (80 s), and `down_after` probes of one pair come
    /// at most one cycle apart.
    pub every: Duration,
    /// Peers each node probes per interval, which is also the probers each server gets per
    /// interval (clamped to `n - 1`). Default **8**: half of the server's default
    /// `--max-clients` (16) even if every probe of an interval overlapped, and at most one
    /// session per prober, well inside `--max-per-ip` (8).
    pub fan_out: usize,
    /// Random delay added to each node's phase, as a fraction of `every`. Default **0.1**
    /// (10 %): the phases already spread the nodes over the interval; the jitter keeps
    /// neighbouring nodes from locking step with each other's timers.
    pub jitter: f64,
    /// Seed of the jitter (a pure function of seed, node and interval). Default 0.
    pub seed: u64,
    /// Each pair's state machine and baseline.
    pub state: StateConfig,
}

impl Default for MeshConfig {
    fn default() -> Self {
        MeshConfig {
            every: Duration::from_secs(10),
            fan_out: 8,
            jitter: 0.1,
            seed: 0,
            state: StateConfig {
                // Three lost probes in a row: one is noise (a restart, a scheduling stall),
                // three at 10 s apart is half a minute of a path that does not work.
                down_after: 3,
                // The same for a slow or lossy run.
                degrade_after: 3,
                // Coming back takes fewer: a recovered path shows quickly, and two in a row
                // still rule out a single lucky probe.
                up_after: 2,
                // Three times the pair's own median: RDMA round trips are tight, and a queue
                // that triples one is congestion, not jitter.
                slow_factor: 3.0,
                // 200 µs: above a hardware path's round trip plus its host noise (a few µs to
                // tens of µs), so that a 10 µs path wobbling to 40 µs is not "slow", yet below
                // the hundreds of µs that PFC pauses and deep queues add. On Soft-RoCE, whose
                // wall-time round trips are already hundreds of µs, the factor decides.
                slow_floor: Duration::from_micros(200),
                // Median of the last 32 good round trips (a few minutes at one probe a cycle on
                // small meshes): robust to a few outliers either way.
                baseline_window: 32,
                // Five round trips before anything is judged slow.
                baseline_min: 5,
                // One slow round trip in 8 learnt: a lasting regression stays slow for about
                // 8 × 16 = 128 probes before it becomes the new normal.
                learn_slow_every: 8,
                // More than 10 % of the last 20 probes failed (3 or more): a path that loses
                // probes without ever losing `down_after` in a row.
                loss_window: 20,
                loss_threshold: 0.1,
            },
        }
    }
}

/// A [`MeshConfig`] that cannot work.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    #[error(transparent)]
    Schedule(#[from] ScheduleError),
    #[error(transparent)]
    State(#[from] StateError),
}

impl MeshConfig {
    /// Checks every knob.
    ///
    /// # Errors
    /// The first knob that cannot work.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.timing()?;
        if self.fan_out == 0 {
            return Err(ScheduleError::NoFanOut.into());
        }
        self.state.validate()?;
        Ok(())
    }

    /// The schedule of a mesh of `n` nodes, over `tors` where a topology gives them.
    ///
    /// # Errors
    /// No nodes, a zero fan-out, or one below 2 over several ToRs.
    pub fn schedule(&self, n: usize, tors: Option<&Tors>) -> Result<Schedule, ScheduleError> {
        match tors {
            Some(t) => Schedule::with_tors(t, self.fan_out),
            None => Schedule::new(n, self.fan_out),
        }
    }

    /// The timing of the probe rounds.
    ///
    /// # Errors
    /// A zero interval, or a jitter outside `0 ..= 1`.
    pub fn timing(&self) -> Result<Timing, ScheduleError> {
        Timing::new(self.every, self.jitter, self.seed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_valid_and_each_bad_knob_is_named() {
        let c = MeshConfig::default();
        assert_eq!(c.validate(), Ok(()));
        assert_eq!(c.schedule(1024, None).map(|s| s.cycle()), Ok(128));
        let bad = MeshConfig { fan_out: 0, ..c };
        assert_eq!(bad.validate(), Err(ScheduleError::NoFanOut.into()));
        let bad = MeshConfig {
            every: Duration::ZERO,
            ..c
        };
        assert_eq!(bad.validate(), Err(ScheduleError::NoInterval.into()));
        let mut bad = c;
        bad.state.down_after = 0;
        assert_eq!(bad.validate(), Err(StateError::ZeroCount.into()));
    }
}
