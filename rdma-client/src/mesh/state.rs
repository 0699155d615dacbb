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
mod tests {
    use super::*;
    use crate::mesh::rtt::Rtt;
    use proptest::prelude::*;

    const US: Duration = Duration::from_micros(1);

    fn config() -> StateConfig {
        crate::mesh::MeshConfig::default().state
    }

    fn ok(us: u64) -> Outcome {
        Outcome::Ok {
            rtt: Rtt::wall(Duration::from_micros(us)),
            stalled: false,
        }
    }

    fn failed(cause: Cause) -> Outcome {
        Outcome::Failed { cause }
    }

    fn tr(from: PairState, to: PairState, cause: Option<Cause>) -> Transition {
        Transition { from, to, cause }
    }

    /// Feeds `outcomes`, returning the transitions.
    fn feed(pair: &mut Pair, c: &StateConfig, outcomes: &[Outcome]) -> Vec<Transition> {
        outcomes
            .iter()
            .filter_map(|o| pair.observe(c, o).transition)
            .collect()
    }

    #[test]
    fn the_default_config_is_valid() {
        assert_eq!(config().validate(), Ok(()));
        let mut bad = config();
        bad.up_after = 0;
        assert_eq!(bad.validate(), Err(StateError::ZeroCount));
        let mut bad = config();
        bad.slow_factor = 1.0;
        assert!(matches!(bad.validate(), Err(StateError::BadFactor(_))));
        let mut bad = config();
        bad.baseline_window = bad.baseline_min - 1;
        assert_eq!(bad.validate(), Err(StateError::BadBaseline));
        let mut bad = config();
        bad.loss_threshold = 1.5;
        assert_eq!(bad.validate(), Err(StateError::BadLoss));
    }

    #[test]
    fn up_after_good_probes_down_after_failures_and_back() {
        let c = config(); // up 2, down 3
        let mut p = Pair::new();
        assert_eq!(p.state(), PairState::Unknown);
        let t = feed(&mut p, &c, &[ok(10), ok(10)]);
        assert_eq!(t, [tr(PairState::Unknown, PairState::Up, None)]);
        let host = failed(Cause::Host);
        assert!(feed(&mut p, &c, &[host, host]).is_empty());
        let t = feed(&mut p, &c, &[host]);
        assert_eq!(t, [tr(PairState::Up, PairState::Down, Some(Cause::Host))]);
        // One good probe is not enough to come back; two are.
        assert!(feed(&mut p, &c, &[ok(10)]).is_empty());
        assert_eq!(feed(&mut p, &c, &[ok(10)]).len(), 1);
        assert_eq!(p.state(), PairState::Up);
    }

    #[test]
    fn a_slow_run_degrades_and_the_baseline_does_not_follow_it() {
        let c = config(); // factor 3, floor 200 µs, min 5
        let mut p = Pair::new();
        feed(&mut p, &c, &[ok(300); 10]);
        assert_eq!(p.baseline(&c), Some(300 * US));
        // 3 × 300 = 900 µs: 1000 µs is slow, 800 is not.
        assert_eq!(p.observe(&c, &ok(800)).mark, Mark::Good);
        let marks: Vec<_> = (0..3).map(|_| p.observe(&c, &ok(1000))).collect();
        assert!(marks.iter().all(|o| o.mark == Mark::Slow));
        assert_eq!(
            marks[2].transition,
            Some(tr(PairState::Up, PairState::Degraded, Some(Cause::Slow)))
        );
        // The regression stays visible: one in 8 slow ones learnt, the median holds.
        for _ in 0..40 {
            assert_eq!(p.observe(&c, &ok(1000)).mark, Mark::Slow);
        }
        assert_eq!(p.baseline(&c), Some(300 * US));
        assert_eq!(p.state(), PairState::Degraded);
        feed(&mut p, &c, &[ok(300), ok(300)]);
        assert_eq!(p.state(), PairState::Up);
    }

    /// Loss on an RC path: each probe's median is the path's own, but one of its ping-pongs
    /// waited out a retransmission. Slow, a run of them degraded; the baseline still learns
    /// the medians, and clean probes bring it back.
    /// Found in the guests: a server stopped for a while, then back. The failures while the
    /// pair was down must not make its first good probes `lossy`: it comes back up.
    #[test]
    fn failures_while_down_do_not_bring_it_back_degraded() {
        let c = config();
        let mut p = Pair::new();
        feed(&mut p, &c, &[ok(300); 10]);
        let host = Outcome::Failed { cause: Cause::Host };
        for _ in 0..c.down_after + 4 {
            p.observe(&c, &host);
        }
        assert_eq!(p.state(), PairState::Down);
        let back: Vec<_> = (0..c.up_after).map(|_| p.observe(&c, &ok(300))).collect();
        assert!(back.iter().all(|o| o.mark == Mark::Good), "{back:?}");
        assert_eq!(p.state(), PairState::Up);
    }

    #[test]
    fn a_stalled_probe_is_slow_though_its_median_is_normal() {
        let c = config();
        let mut p = Pair::new();
        feed(&mut p, &c, &[ok(300); 10]);
        let stalled = Outcome::Ok {
            rtt: Rtt::wall(Duration::from_micros(300)),
            stalled: true,
        };
        let marks: Vec<_> = (0..3).map(|_| p.observe(&c, &stalled)).collect();
        assert!(marks.iter().all(|o| o.mark == Mark::Slow));
        assert_eq!(
            marks[2].transition,
            Some(tr(PairState::Up, PairState::Degraded, Some(Cause::Slow)))
        );
        assert_eq!(p.baseline(&c), Some(300 * US));
        feed(&mut p, &c, &[ok(300), ok(300)]);
        assert_eq!(p.state(), PairState::Up);
    }

    #[test]
    fn under_the_floor_nothing_is_slow() {
        let c = config(); // floor 200 µs
        let mut p = Pair::new();
        feed(&mut p, &c, &[ok(5); 10]);
        // 150 µs is 30 × the baseline, but under the floor.
        assert_eq!(p.observe(&c, &ok(150)).mark, Mark::Good);
        assert_eq!(p.observe(&c, &ok(250)).mark, Mark::Slow);
    }

    #[test]
    fn nothing_is_slow_before_the_baseline_has_its_minimum() {
        let c = config();
        let mut p = Pair::new();
        feed(&mut p, &c, &[ok(300); 4]);
        assert_eq!(p.baseline(&c), None);
        assert_eq!(p.observe(&c, &ok(5_000)).mark, Mark::Good);
    }

    #[test]
    fn every_other_probe_failing_degrades_through_the_loss_window() {
        let c = config(); // loss window 20, threshold 10 %
        let mut p = Pair::new();
        feed(&mut p, &c, &[ok(10), ok(10)]);
        let mut transitions = Vec::new();
        for _ in 0..10 {
            transitions.extend(feed(&mut p, &c, &[failed(Cause::Rdma), ok(10)]));
        }
        assert_eq!(
            transitions,
            [tr(PairState::Up, PairState::Degraded, Some(Cause::Rdma))]
        );
        assert_eq!(p.state(), PairState::Degraded);
    }

    #[test]
    fn out_of_down_slow_successes_come_back_degraded() {
        let c = config();
        let mut p = Pair::new();
        feed(&mut p, &c, &[ok(300); 10]);
        feed(&mut p, &c, &[failed(Cause::Corrupt); 3]);
        assert_eq!(p.state(), PairState::Down);
        // Going down cleared the loss window: a slow success, then a good one, is two that
        // did not fail, not both good.
        assert_eq!(p.observe(&c, &ok(2000)).mark, Mark::Slow);
        let o = p.observe(&c, &ok(300));
        assert_eq!(o.mark, Mark::Good);
        assert_eq!(
            o.transition,
            Some(tr(PairState::Down, PairState::Degraded, Some(Cause::Slow)))
        );
    }

    #[test]
    fn marks_and_states_name_themselves() {
        assert_eq!(Mark::Good.cause(), None);
        assert_eq!(Mark::Slow.cause(), Some(Cause::Slow));
        for s in PairState::ALL {
            let json = serde_json::to_string(&s).expect("serializes");
            assert_eq!(json, format!("\"{}\"", s.as_str()));
        }
    }

    fn any_failure() -> impl Strategy<Value = Cause> {
        prop::sample::select(vec![
            Cause::Host,
            Cause::Refused,
            Cause::Rdma,
            Cause::Corrupt,
        ])
    }

    fn any_outcome() -> impl Strategy<Value = Outcome> {
        prop_oneof![
            (1u64..5_000).prop_map(ok),
            any_failure().prop_map(failed),
            Just(failed(Cause::Slow)),
        ]
    }

    fn any_config() -> impl Strategy<Value = StateConfig> {
        (
            (2u32..8, 1u32..8, 1u32..8),
            (2.0f64..10.0, 0u64..2_000, 1usize..10, 0usize..40, 0u32..10),
            (1usize..60, 0.0f64..=1.0),
        )
            .prop_map(
                |((down, degrade, up), (f, floor, min, extra, learn), (w, th))| StateConfig {
                    down_after: down,
                    degrade_after: degrade,
                    up_after: up,
                    slow_factor: f,
                    slow_floor: Duration::from_micros(floor),
                    baseline_window: min + extra,
                    baseline_min: min,
                    learn_slow_every: learn,
                    loss_window: w,
                    loss_threshold: th,
                },
            )
    }

    proptest! {
        /// With `down_after ≥ 2` (and a loss threshold that one failure in the window does not
        /// pass), one failed probe among good ones changes nothing.
        #[test]
        fn one_failure_among_good_probes_never_changes_the_state(
            c in any_config(),
            before in 0usize..50,
            after in 0usize..50,
            cause in any_failure(),
            rtts in prop::collection::vec(100u64..120, 110),
        ) {
            let mut c = c;
            let one = 1.0 / c.loss_window as f64;
            c.loss_threshold = c.loss_threshold.max(one);
            prop_assert_eq!(c.validate(), Ok(()));
            let mut p = Pair::new();
            // Settle: good probes until up (the round trips within 20 %, never slow).
            for &us in &rtts[..before + c.up_after as usize] {
                p.observe(&c, &ok(us));
            }
            prop_assert_eq!(p.state(), PairState::Up);
            let o = p.observe(&c, &failed(cause));
            prop_assert_eq!(o.transition, None);
            for &us in &rtts[before + 10..before + 10 + after] {
                let o = p.observe(&c, &ok(us));
                prop_assert_eq!(o.transition, None);
            }
        }

        /// `down_after` failures in a row put a pair down, whatever came before.
        #[test]
        fn down_after_failures_in_a_row_always_put_it_down(
            c in any_config(),
            history in prop::collection::vec(any_outcome(), 0..80),
            causes in prop::collection::vec(any_failure(), 8),
        ) {
            let mut p = Pair::new();
            feed(&mut p, &c, &history);
            for cause in &causes[..c.down_after as usize] {
                p.observe(&c, &failed(*cause));
            }
            prop_assert_eq!(p.state(), PairState::Down);
        }

        /// And one good probe among failures does not bring a down pair back when
        /// `up_after ≥ 2`.
        #[test]
        fn one_good_probe_among_failures_does_not_bring_it_back(
            c in any_config(),
            cause in any_failure(),
            rtt in 1u64..5_000,
        ) {
            let mut c = c;
            c.up_after = c.up_after.max(2);
            let mut p = Pair::new();
            feed(&mut p, &c, &vec![failed(cause); c.down_after as usize]);
            prop_assert_eq!(p.state(), PairState::Down);
            prop_assert_eq!(p.observe(&c, &ok(rtt)).transition, None);
            prop_assert_eq!(p.observe(&c, &failed(cause)).transition, None);
        }
    }
}
