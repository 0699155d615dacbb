//! One pair's state ([`Pair`]: `unknown`, `up`, `degraded`, `down`), moved only by runs of
//! consecutive probes, so that one lost probe does not flap it; and the pair's own RTT baseline,
//! which tells a slow probe.
//!
//! # Marks
//!
//! Each probe gets a [`Mark`]:
//!
//! - `failed(cause)`: the probe failed (`host`, `refused`, `rdma`, `corrupt`).
//! - `slow`: it succeeded, with a round trip above `slow_factor` × the pair's baseline **and**
//!   above `slow_floor` (microsecond jitter of a fast path is not a regression); or it
//!   `stalled`: it waited out a retransmission (the probe's own test: `probe::stalled`; RC
//!   hides a lost packet as that wait, and the exchange's median does not move).
//! - `lossy(cause)`: it succeeded, but more than `loss_threshold` of the last `loss_window`
//!   probes failed (the cause: the latest failure's). This is how a path that fails every other
//!   probe, which never fails `down_after` times in a row, still shows.
//! - `good`: none of these.
//!
//! # Transitions
//!
//! - `down_after` consecutive `failed` → `down` (from any state).
//! - `degrade_after` `slow` or `lossy` marks in a row (a failure between them neither counts
//!   nor breaks the run; a good probe breaks it) → `degraded`, from `unknown` or `up`.
//! - `up_after` consecutive `good` → `up`, from `unknown` or `degraded`.
//! - Out of `down`: `up_after` consecutive probes that did not fail → `up` if all were good,
//!   else `degraded`. Going down empties the loss window, and failures while down stay out of
//!   it: the outage is told by the pair's being down, and must not keep it degraded a whole
//!   window after it is back.
//!
//! Each change is returned as a [`Transition`] (from, to, cause) for the caller to log.
//!
//! # Baseline
//!
//! The median of the last `baseline_window` admitted round trips (the network's part where the
//! devices stamp completions, else the wall time: [`Rtt::judged`](super::rtt::Rtt::judged)).
//! Nothing is slow before `baseline_min` of them. A good probe is admitted; a slow one only one
//! in `learn_slow_every` (0: never), so a lasting regression stays visible for about
//! `learn_slow_every × baseline_window / 2` probes before the baseline takes it as the new
//! normal.

use super::cause::{Cause, Outcome};
use std::collections::VecDeque;
use std::time::Duration;

/// A pair's state: the contract's type (the `state` of the `mesh_probe` event).
pub use rdma_proto::events::mesh::PairState;

/// The knobs of a pair's state machine and baseline (defaults: [`super::MeshConfig`]'s docs).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StateConfig {
    /// Consecutive failed probes to go down.
    pub down_after: u32,
    /// Consecutive slow (or lossy) probes to go degraded.
    pub degrade_after: u32,
    /// Consecutive good probes to come back up.
    pub up_after: u32,
    /// A probe is slow above this many times the baseline (and above `slow_floor`).
    pub slow_factor: f64,
    /// Nothing under this is slow.
    pub slow_floor: Duration,
    /// Round trips the baseline's median is taken over.
    pub baseline_window: usize,
    /// Round trips needed before anything is judged slow.
    pub baseline_min: usize,
    /// One slow round trip in this many enters the baseline (0: none).
    pub learn_slow_every: u32,
    /// Probes the loss rate is taken over.
    pub loss_window: usize,
    /// A good probe is lossy when more than this fraction of the window failed.
    pub loss_threshold: f64,
}

/// A [`StateConfig`] that cannot work.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StateError {
    #[error("down_after, degrade_after and up_after count probes: each at least 1")]
    ZeroCount,
    #[error("the slow factor must be above 1 (a multiple of the baseline); {0} is not")]
    BadFactor(f64),
    #[error(
        "the baseline needs at least one round trip before judging, and its window at least as many"
    )]
    BadBaseline,
    #[error("the loss window must hold a probe, and the loss threshold be a fraction in 0..=1")]
    BadLoss,
}

impl StateConfig {
    /// Checks the knobs fit together.
    ///
    /// # Errors
    /// A zero count, a factor not above 1, a baseline window smaller than its minimum (or 0),
    /// an empty loss window or a threshold outside `0 ..= 1`.
    pub fn validate(&self) -> Result<(), StateError> {
        if self.down_after == 0 || self.degrade_after == 0 || self.up_after == 0 {
            return Err(StateError::ZeroCount);
        }
        if !(self.slow_factor > 1.0 && self.slow_factor.is_finite()) {
            return Err(StateError::BadFactor(self.slow_factor));
        }
        if self.baseline_min == 0 || self.baseline_window < self.baseline_min {
            return Err(StateError::BadBaseline);
        }
        if self.loss_window == 0 || !(0.0..=1.0).contains(&self.loss_threshold) {
            return Err(StateError::BadLoss);
        }
        Ok(())
    }
}

/// What one probe counted as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mark {
    Good,
    Slow,
    Lossy(Cause),
    Failed(Cause),
}

impl Mark {
    /// The cause this mark counts under, `None` for a good probe.
    #[must_use]
    pub fn cause(self) -> Option<Cause> {
        match self {
            Mark::Good => None,
            Mark::Slow => Some(Cause::Slow),
            Mark::Lossy(c) | Mark::Failed(c) => Some(c),
        }
    }
    /// This probe's own cause (its `result`, its event's `cause`): a failure's, or `slow`; a
    /// lossy probe itself succeeded.
    #[must_use]
    pub fn probe_cause(self) -> Option<Cause> {
        match self {
            Mark::Good | Mark::Lossy(_) => None,
            Mark::Slow => Some(Cause::Slow),
            Mark::Failed(c) => Some(c),
        }
    }
}

/// A change of a pair's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transition {
    pub from: PairState,
    pub to: PairState,
    /// Why (the last bad probe's cause); `None` going up.
    pub cause: Option<Cause>,
}

/// What observing one probe did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Observed {
    pub mark: Mark,
    pub transition: Option<Transition>,
}

/// One ordered pair's state, runs, baseline and loss window.
#[derive(Clone, Debug, Default)]
pub struct Pair {
    state: PairState,
    fail_run: u32,
    bad_run: u32,
    good_run: u32,
    ok_run: u32,
    last_bad: Option<Cause>,
    baseline: VecDeque<Duration>,
    slow_seen: u32,
    recent: VecDeque<Option<Cause>>,
}

impl Pair {
    /// A pair never probed: `unknown`.
    #[must_use]
    pub fn new() -> Self {
        Pair::default()
    }

    /// The pair's state.
    #[must_use]
    pub fn state(&self) -> PairState {
        self.state
    }

    /// The baseline round trip, once it has `config.baseline_min` samples.
    #[must_use]
    pub fn baseline(&self, config: &StateConfig) -> Option<Duration> {
        if self.baseline.len() < config.baseline_min.max(1) {
            return None;
        }
        let mut sorted: Vec<Duration> = self.baseline.iter().copied().collect();
        sorted.sort_unstable();
        sorted.get(sorted.len() / 2).copied()
    }

    /// Takes one probe's outcome: marks it, moves the runs, the baseline and the loss window,
    /// and changes the state where a run is long enough. `config` should have passed
    /// [`StateConfig::validate`].
    pub fn observe(&mut self, config: &StateConfig, outcome: &Outcome) -> Observed {
        let mark = self.mark(config, outcome);
        match mark {
            Mark::Good => {
                self.good_run = self.good_run.saturating_add(1);
                self.ok_run = self.ok_run.saturating_add(1);
                self.bad_run = 0;
                self.fail_run = 0;
            }
            Mark::Slow | Mark::Lossy(_) => {
                self.bad_run = self.bad_run.saturating_add(1);
                self.ok_run = self.ok_run.saturating_add(1);
                self.good_run = 0;
                self.fail_run = 0;
                self.last_bad = mark.cause();
            }
            Mark::Failed(cause) => {
                self.fail_run = self.fail_run.saturating_add(1);
                self.ok_run = 0;
                self.good_run = 0;
                self.last_bad = Some(cause);
            }
        }
        let to = self.next(config, mark);
        if to == PairState::Down && self.state != PairState::Down {
            // The failures that put it down are told by its being down; coming back starts
            // with a clean loss window, or a long outage would keep it degraded for a window.
            self.recent.clear();
        }
        let transition = (to != self.state).then(|| Transition {
            from: self.state,
            to,
            cause: if to == PairState::Up {
                None
            } else {
                self.last_bad
            },
        });
        self.state = to;
        Observed { mark, transition }
    }

    /// The state the runs call for after `mark`.
    fn next(&self, config: &StateConfig, mark: Mark) -> PairState {
        use PairState::{Degraded, Down, Unknown, Up};
        if matches!(mark, Mark::Failed(_)) && self.fail_run >= config.down_after {
            return Down;
        }
        match self.state {
            Down if self.ok_run >= config.up_after => {
                if self.good_run >= config.up_after {
                    Up
                } else {
                    Degraded
                }
            }
            Unknown | Up if self.bad_run >= config.degrade_after => Degraded,
            Unknown | Degraded if self.good_run >= config.up_after => Up,
            state => state,
        }
    }

    /// Marks `outcome`, and feeds the baseline and the loss window.
    fn mark(&mut self, config: &StateConfig, outcome: &Outcome) -> Mark {
        let rtt = match outcome {
            Outcome::Failed { cause } if !cause.is_failure() => return Mark::Slow,
            Outcome::Failed { cause } => {
                // A failure while down is the outage itself, told by the state: kept out of
                // the loss window, or the pair would come back degraded for a window.
                if self.state != PairState::Down {
                    self.remember(config, Some(*cause));
                }
                return Mark::Failed(*cause);
            }
            Outcome::Ok { rtt, stalled } => (rtt.judged(), *stalled),
        };
        let (rtt, stalled) = rtt;
        self.remember(config, None);
        let slow = self.baseline(config).is_some_and(|base| {
            rtt > config.slow_floor && rtt.as_secs_f64() > base.as_secs_f64() * config.slow_factor
        });
        if stalled && !slow {
            // Its typical round trip is the path's own: learnt; the wait is the loss.
            self.learn(config, rtt);
            return Mark::Slow;
        }
        if slow {
            self.slow_seen = self.slow_seen.wrapping_add(1);
            let learn = config.learn_slow_every;
            if learn > 0 && self.slow_seen % learn == 0 {
                self.learn(config, rtt);
            }
            return Mark::Slow;
        }
        self.learn(config, rtt);
        match self.loss(config) {
            Some(cause) => Mark::Lossy(cause),
            None => Mark::Good,
        }
    }

    fn learn(&mut self, config: &StateConfig, rtt: Duration) {
        self.baseline.push_back(rtt);
        while self.baseline.len() > config.baseline_window.max(1) {
            self.baseline.pop_front();
        }
    }

    fn remember(&mut self, config: &StateConfig, failure: Option<Cause>) {
        self.recent.push_back(failure);
        while self.recent.len() > config.loss_window.max(1) {
            self.recent.pop_front();
        }
    }

    /// The latest failure's cause, when more than the threshold of the loss window failed
    /// (over the whole window, so the first probes of a pair do not overreact).
    fn loss(&self, config: &StateConfig) -> Option<Cause> {
        let failed = self.recent.iter().filter(|f| f.is_some()).count();
        let rate = failed as f64 / config.loss_window.max(1) as f64;
        if rate > config.loss_threshold {
            self.recent.iter().rev().find_map(|f| *f)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests;
