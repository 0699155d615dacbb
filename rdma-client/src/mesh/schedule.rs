//! Whom each node probes in each interval ([`Schedule`]), and when in the interval it fires
//! ([`Timing`]).
//!
//! # Peers: a rotation of offsets
//!
//! With `n` nodes and a fan-out `k` (peers per node per interval, clamped to `n - 1`), node `i`
//! probes in interval `t` the nodes `(i + o_j) mod n` for the offsets
//!
//! ```text
//! o_j = 1 + ((t·k + j) mod (n - 1)),   j = 0 .. k-1
//! ```
//!
//! - **No self-probe, no peer twice in an interval**: the `k ≤ n - 1` offsets are distinct and
//!   lie in `1 ..= n - 1`.
//! - **Every server is probed by exactly `k` nodes per interval**, whatever `n`: all nodes use
//!   the same offsets, so server `s` is probed by the `k` distinct nodes `s - o_j`. That is the
//!   load bound of the server (`--max-clients` must leave room for it, with the other clients).
//! - **Every ordered pair within one cycle**: `k` consecutive intervals take the residues
//!   `t·k .. t·k + k - 1`, so any `cycle = ceil((n - 1) / k)` consecutive intervals take at least
//!   `n - 1` consecutive residues, i.e. every offset, i.e. every peer. When `k` does not divide
//!   `n - 1` the last interval of a cycle repeats a few offsets of the next.
//!
//! This is Pingmesh's rotation with the whole mesh as one ToR: every node does the same small
//! amount of work per interval and the coverage of all `n·(n-1)` ordered pairs takes `cycle`
//! intervals.
//!
//! # ToRs: a mesh within, a rotating sample across
//!
//! With a topology of `T > 1` ToRs ([`Schedule::with_tors`]) a node's `k` peers split into
//! `across = max(k/4, 1)` (at most `T - 1`) in other ToRs and `within = k - across` in its own,
//! where the rotation above runs over the ToR's `S` nodes (at most `S - 1` of them).
//! Across, node `pos` of ToR `a` takes in interval `t` the slots `p = (t·S_a + pos)·across + j`,
//! and slot `p` is ToR `b = a + 1 + (p mod (T - 1))`, at its node `(pos + t) mod S_b`:
//!
//! - a ToR's slots are consecutive over its nodes and intervals, so it reaches every other ToR
//!   within `ceil((T - 1) / (S_a·across))` intervals: **every ordered ToR pair each cycle**;
//! - where every ToR has `S` nodes, server `(b, q)` is probed across in interval `t` only by
//!   the node `pos = q - t` of each ToR, and for each `j` by exactly one ToR: **each server
//!   takes exactly `k` probers an interval**, `within` from its ToR and `across` from others.
//!   A smaller ToR's nodes take more of the probes across (the tests measure it).
//!
//! A cycle is the longer of the two coverages. Within a ToR it is every ordered node pair; across,
//! every ToR pair through a sample of node pairs that turns with `t`.
//!
//! # Timing: phase and jitter
//!
//! Interval `t` starts at `t·every`. Node `i` (a [`NodeSchedule`]: a node known to be one of
//! the `n`) fires at a deterministic **phase** spread over the interval (`i/n` of its first
//! `1 - jitter` part), so the `n` nodes do not all fire at once, plus a **jitter** drawn in
//! `[0, jitter·every)` from `(seed, node, t)` by a fixed mixing function (SplitMix64): a pure
//! function, the same on every run with the same seed. The offset into the interval is always
//! below `every`: a probe round belongs to its interval.

use super::topology::Tors;
use std::sync::Arc;
use std::time::Duration;

/// A schedule that cannot be built.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ScheduleError {
    #[error("a mesh needs at least one node")]
    NoNodes,
    #[error("the fan-out must be at least 1 (peers each node probes per interval)")]
    NoFanOut,
    #[error("node {node} is not one of the mesh's {n} nodes (0 .. {n})")]
    NoSuchNode { node: usize, n: usize },
    #[error("the probe interval must be longer than zero")]
    NoInterval,
    #[error("the jitter is a fraction of the interval, between 0 and 1; {0} is not")]
    BadJitter(f64),
    #[error(
        "a topology of {tors} ToRs needs a fan-out of at least 2 (a probe within the ToR and one \
         to another ToR each interval), not 1: raise --fan-out"
    )]
    FanOutBelowTors { tors: usize },
    #[error(
        "node {node} is under ToR {tor}, but there are {tors} ToRs (build them with Tors::place)"
    )]
    NoSuchTor {
        node: usize,
        tor: usize,
        tors: usize,
    },
    #[error("ToR {0} has no node (build the ToRs with Tors::place)")]
    EmptyTor(usize),
}

/// Who probes whom in each interval, for `n` nodes and a fan-out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schedule {
    n: usize,
    k: usize,
    /// With a topology of more than one ToR: the ToR mesh and the sample across ToRs.
    racks: Option<Arc<Racks>>,
}

/// The plan over ToRs (see the module doc, "ToRs").
#[derive(Debug, PartialEq, Eq)]
struct Racks {
    /// Each ToR's nodes, by rank.
    members: Vec<Vec<usize>>,
    /// Each node's ToR and its place in it.
    tor: Vec<usize>,
    pos: Vec<usize>,
    /// Peers per interval within the ToR (at most its size less one) and across ToRs.
    within: usize,
    across: usize,
}

impl Racks {
    fn within(&self, tor: usize) -> usize {
        self.within.min(self.members[tor].len() - 1)
    }
}

/// `(pos + o_j) mod s` for the `k` offsets of interval `t` (the module doc's rotation).
fn rotation(pos: usize, s: usize, k: usize, t: u64) -> impl Iterator<Item = usize> {
    let m = u128::from(as_u64(s.saturating_sub(1)));
    let base = if m == 0 {
        0
    } else {
        u128::from(t) * u128::from(as_u64(k)) % m
    };
    (0..k).map(move |j| {
        // m ≥ 1 whenever k ≥ 1, so the loop never runs with m = 0.
        let residue = (base + u128::from(as_u64(j))) % m.max(1);
        let offset = usize::try_from(residue).unwrap_or(0) + 1;
        (pos + offset) % s
    })
}

impl Schedule {
    /// The schedule of `n` nodes, each probing `fan_out` peers per interval (at most `n - 1`).
    ///
    /// # Errors
    /// No nodes, or a fan-out of 0.
    pub fn new(n: usize, fan_out: usize) -> Result<Self, ScheduleError> {
        if n == 0 {
            return Err(ScheduleError::NoNodes);
        }
        if fan_out == 0 {
            return Err(ScheduleError::NoFanOut);
        }
        Ok(Schedule {
            n,
            k: fan_out.min(n - 1),
            racks: None,
        })
    }

    /// The schedule over `tors` (each node's ToR, by rank): a rotation within each ToR and a
    /// rotating sample across them, `fan_out` peers per node per interval in all, of which a
    /// quarter (at least 1, at most one per other ToR) go to other ToRs. One ToR is
    /// [`Self::new`]'s schedule.
    ///
    /// # Errors
    /// No nodes, a fan-out below 2 with several ToRs.
    pub fn with_tors(tors: &Tors, fan_out: usize) -> Result<Self, ScheduleError> {
        let n = tors.of.len();
        let m = tors.names.len();
        if m <= 1 {
            return Self::new(n, fan_out);
        }
        if fan_out < 2 {
            return Err(if fan_out == 0 {
                ScheduleError::NoFanOut
            } else {
                ScheduleError::FanOutBelowTors { tors: m }
            });
        }
        let mut members = vec![Vec::new(); m];
        let mut pos = Vec::with_capacity(n);
        for (node, &tor) in tors.of.iter().enumerate() {
            let Some(list) = members.get_mut(tor) else {
                return Err(ScheduleError::NoSuchTor { node, tor, tors: m });
            };
            pos.push(list.len());
            list.push(node);
        }
        if let Some(tor) = members.iter().position(Vec::is_empty) {
            return Err(ScheduleError::EmptyTor(tor));
        }
        let across = (fan_out / 4).max(1).min(m - 1);
        let racks = Racks {
            members,
            tor: tors.of.clone(),
            pos,
            within: fan_out - across,
            across,
        };
        let k = (0..m).map(|a| racks.within(a)).max().unwrap_or(0) + across;
        Ok(Schedule {
            n,
            k,
            racks: Some(Arc::new(racks)),
        })
    }

    /// The number of ToRs (1 without a topology).
    #[must_use]
    pub fn tors(&self) -> usize {
        self.racks.as_ref().map_or(1, |r| r.members.len())
    }

    /// The number of nodes.
    #[must_use]
    pub fn nodes(&self) -> usize {
        self.n
    }

    /// Peers each node probes per interval, which is also the number of nodes that probe each
    /// server per interval: the fan-out asked for, at most `n - 1` (0 for a single node). Over
    /// ToRs: the most any node probes (a small ToR's nodes probe fewer within it).
    #[must_use]
    pub fn fan_out(&self) -> usize {
        self.k
    }

    /// Intervals in which every ordered pair is probed at least once: `ceil((n - 1) / k)`
    /// (1 for a single node, which has nothing to cover).
    #[must_use]
    pub fn cycle(&self) -> u64 {
        if let Some(r) = &self.racks {
            let m = r.members.len();
            let within = (0..m).map(|a| {
                let (s, k) = (r.members[a].len(), r.within(a));
                if k == 0 { 1 } else { (s - 1).div_ceil(k) }
            });
            let across = r
                .members
                .iter()
                .map(|ms| (m - 1).div_ceil(ms.len() * r.across));
            return as_u64(within.chain(across).max().unwrap_or(1).max(1));
        }
        let peers = self.n - 1;
        if peers == 0 {
            return 1;
        }
        // k ≥ 1 here: k = min(fan_out ≥ 1, n - 1 ≥ 1).
        as_u64(peers.div_ceil(self.k))
    }

    /// Node `node`'s view of the schedule.
    ///
    /// # Errors
    /// `node` is not below `n`.
    pub fn node(&self, node: usize) -> Result<NodeSchedule, ScheduleError> {
        if node >= self.n {
            return Err(ScheduleError::NoSuchNode { node, n: self.n });
        }
        Ok(NodeSchedule {
            schedule: self.clone(),
            node,
        })
    }
}

/// One node's peers in each interval.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeSchedule {
    schedule: Schedule,
    node: usize,
}

impl NodeSchedule {
    /// The node.
    #[must_use]
    pub fn node(&self) -> usize {
        self.node
    }

    /// The peers this node probes in interval `t`: `fan_out` distinct nodes, never itself.
    pub fn peers(&self, t: u64) -> impl Iterator<Item = usize> + use<> {
        let node = self.node;
        let Some(r) = &self.schedule.racks else {
            let Schedule { n, k, .. } = self.schedule;
            return rotation(node, n, k, t).collect::<Vec<_>>().into_iter();
        };
        let (tor, pos) = (r.tor[node], r.pos[node]);
        let mine = &r.members[tor];
        let m = r.members.len();
        let mut peers: Vec<usize> = rotation(pos, mine.len(), r.within(tor), t)
            .map(|q| mine[q])
            .collect();
        // Across: this ToR's slots of interval t are consecutive over (t, pos, j), so its
        // nodes take every other ToR in turn; the target in that ToR turns with t.
        let first = (u128::from(t) * u128::from(as_u64(mine.len())) + u128::from(as_u64(pos)))
            * u128::from(as_u64(r.across));
        let others = u128::from(as_u64(m - 1));
        for j in 0..r.across {
            let d = usize::try_from((first + u128::from(as_u64(j))) % others).unwrap_or(0) + 1;
            let theirs = &r.members[(tor + d) % m];
            let q = (u128::from(as_u64(pos)) + u128::from(t)) % u128::from(as_u64(theirs.len()));
            peers.push(theirs[usize::try_from(q).unwrap_or(0)]);
        }
        peers.into_iter()
    }
}

impl NodeSchedule {
    /// The next interval after `t` in which this node probes `peer` again: within a cycle
    /// and one interval (`None` for a peer it never probes).
    #[must_use]
    pub fn next_turn(&self, peer: usize, t: u64) -> Option<u64> {
        let horizon = self.schedule.cycle().saturating_add(1);
        (1..=horizon)
            .map(|d| t.saturating_add(d))
            .find(|&u| self.peers(u).any(|p| p == peer))
    }
}

/// When in each interval a node fires.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Timing {
    every: Duration,
    jitter: f64,
    seed: u64,
}

impl Timing {
    /// One probe round every `every`, each node's delayed by its phase and up to `jitter`
    /// (a fraction of `every`, `0.0 ..= 1.0`) drawn from `seed`.
    ///
    /// # Errors
    /// A zero interval, or a jitter outside `0 ..= 1` (or not a number).
    pub fn new(every: Duration, jitter: f64, seed: u64) -> Result<Self, ScheduleError> {
        if every.is_zero() {
            return Err(ScheduleError::NoInterval);
        }
        if !(0.0..=1.0).contains(&jitter) {
            return Err(ScheduleError::BadJitter(jitter));
        }
        Ok(Timing {
            every,
            jitter,
            seed,
        })
    }

    /// The interval.
    #[must_use]
    pub fn every(&self) -> Duration {
        self.every
    }

    /// The width of the jitter window: `jitter · every`, whole nanoseconds.
    #[must_use]
    pub fn jitter_window(&self) -> Duration {
        Duration::from_nanos(self.window_nanos())
    }

    fn every_nanos(&self) -> u64 {
        u64::try_from(self.every.as_nanos()).unwrap_or(u64::MAX)
    }

    fn window_nanos(&self) -> u64 {
        // Rounded down (and saturated), so never above the interval.
        let w = (self.every_nanos() as f64 * self.jitter) as u64;
        w.min(self.every_nanos())
    }

    /// `node`'s phase: `node/n` of the interval less the jitter window.
    #[must_use]
    pub fn phase(&self, node: &NodeSchedule) -> Duration {
        let span = u128::from(self.every_nanos() - self.window_nanos());
        let (i, n) = (node.node, node.schedule.n);
        let nanos = span * u128::from(as_u64(i)) / u128::from(as_u64(n));
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }

    /// `node`'s jitter in interval `t`, in `[0, jitter_window)` (0 when the window is empty).
    #[must_use]
    pub fn jitter(&self, node: &NodeSchedule, t: u64) -> Duration {
        let window = self.window_nanos();
        if window == 0 {
            return Duration::ZERO;
        }
        let draw = splitmix64(splitmix64(self.seed ^ as_u64(node.node)) ^ t);
        Duration::from_nanos(draw % window)
    }

    /// Where in interval `t` `node` fires: its phase plus its jitter, below `every`.
    #[must_use]
    pub fn offset(&self, node: &NodeSchedule, t: u64) -> Duration {
        self.phase(node) + self.jitter(node, t)
    }

    /// When `node` fires in interval `t`, from the start of interval 0 (saturating at
    /// `u64::MAX` nanoseconds, some 584 years).
    #[must_use]
    pub fn fire_at(&self, node: &NodeSchedule, t: u64) -> Duration {
        let start = self.every.as_nanos().saturating_mul(u128::from(t));
        Duration::from_nanos(u64::try_from(start).unwrap_or(u64::MAX))
            .saturating_add(self.offset(node, t))
    }
}

/// SplitMix64's finaliser (Steele, Lea, Flood 2014): a fixed, well-mixed 64-bit hash.
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn as_u64(x: usize) -> u64 {
    u64::try_from(x).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashSet;

    fn peers(s: &Schedule, node: usize, t: u64) -> Vec<usize> {
        s.node(node).expect("in range").peers(t).collect()
    }

    /// How many nodes probe each server in interval `t`, checking each node's list on the way.
    fn load(s: &Schedule, t: u64) -> Vec<usize> {
        let mut load = vec![0; s.nodes()];
        for i in 0..s.nodes() {
            let p = peers(s, i, t);
            assert_eq!(p.len(), s.fan_out(), "node {i} interval {t}");
            assert!(!p.contains(&i), "node {i} probes itself in {t}");
            let distinct: HashSet<_> = p.iter().collect();
            assert_eq!(distinct.len(), p.len(), "node {i}: a peer twice in {t}");
            for peer in p {
                load[peer] += 1;
            }
        }
        load
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        #[test]
        fn each_server_is_probed_by_exactly_k_nodes_and_each_pair_once_a_cycle(
            n in 1usize..=1024,
            fan_out in 1usize..=1100,
            first in 0u64..=u64::MAX / 2,
        ) {
            let s = Schedule::new(n, fan_out).expect("valid");
            prop_assert_eq!(s.fan_out(), fan_out.min(n - 1));
            // Any `cycle` consecutive intervals, from an arbitrary one.
            let mut covered = vec![vec![false; n]; n];
            for t in first..first + s.cycle() {
                let load = load(&s, t);
                prop_assert!(load.iter().all(|&l| l == s.fan_out()), "load {:?}", load);
                for (i, row) in covered.iter_mut().enumerate() {
                    for p in peers(&s, i, t) {
                        row[p] = true;
                    }
                }
            }
            for (i, row) in covered.iter().enumerate() {
                for (j, &c) in row.iter().enumerate() {
                    prop_assert_eq!(c, i != j, "pair ({}, {})", i, j);
                }
            }
        }

        #[test]
        fn a_node_fires_within_its_interval_and_its_jitter_within_the_window(
            every_ms in 1u64..=3_600_000,
            jitter in 0.0f64..=1.0,
            seed in any::<u64>(),
            n in 1usize..=1024,
            node in 0usize..1024,
            t in any::<u64>(),
        ) {
            let node = Schedule::new(n, 8).expect("valid").node(node % n).expect("in range");
            let node = &node;
            let every = Duration::from_millis(every_ms);
            let timing = Timing::new(every, jitter, seed).expect("valid");
            let j = timing.jitter(node, t);
            prop_assert!(j < timing.jitter_window() || j.is_zero());
            prop_assert!(timing.jitter_window() <= every.mul_f64(jitter) + Duration::from_nanos(1));
            prop_assert!(timing.offset(node, t) < every);
            // Pure: the same inputs, the same offset.
            prop_assert_eq!(timing.offset(node, t), Timing::new(every, jitter, seed).expect("valid").offset(node, t));
        }
    }

    /// ToRs of these sizes, their nodes in rank order.
    fn tors(sizes: &[usize]) -> Tors {
        Tors {
            names: (0..sizes.len()).map(|a| format!("tor{a}")).collect(),
            of: sizes
                .iter()
                .enumerate()
                .flat_map(|(a, &s)| std::iter::repeat_n(a, s))
                .collect(),
        }
    }

    /// Over one cycle from `first`: every ordered pair within each ToR, and every ordered pair
    /// of ToRs through some node pair; returns the most probes any server took in an interval.
    fn covers_tors(s: &Schedule, t: &Tors, first: u64) -> usize {
        let m = t.names.len();
        let mut within = HashSet::new();
        let mut across = vec![vec![false; m]; m];
        let mut most = 0;
        for i in first..first + s.cycle() {
            let mut load = vec![0usize; s.nodes()];
            for node in 0..s.nodes() {
                let p = peers(s, node, i);
                assert!(p.len() <= s.fan_out(), "node {node}: {p:?}");
                assert!(!p.contains(&node), "node {node} probes itself in {i}");
                assert_eq!(p.iter().collect::<HashSet<_>>().len(), p.len(), "{p:?}");
                for q in p {
                    load[q] += 1;
                    if t.of[q] == t.of[node] {
                        within.insert((node, q));
                    } else {
                        across[t.of[node]][t.of[q]] = true;
                    }
                }
            }
            most = most.max(load.into_iter().max().unwrap_or(0));
        }
        for a in 0..s.nodes() {
            for b in 0..s.nodes() {
                if a != b && t.of[a] == t.of[b] {
                    assert!(
                        within.contains(&(a, b)),
                        "({a}, {b}) in one ToR, never probed"
                    );
                }
            }
        }
        for (a, row) in across.iter().enumerate() {
            for (b, &c) in row.iter().enumerate() {
                assert_eq!(c, a != b, "ToRs ({a}, {b})");
            }
        }
        most
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]

        #[test]
        fn over_equal_tors_each_server_takes_exactly_the_fan_out_and_a_cycle_covers_all(
            m in 2usize..=12,
            size in 1usize..=12,
            fan_out in 2usize..=16,
            first in 0u64..=u64::MAX / 4,
        ) {
            let t = tors(&vec![size; m]);
            let s = Schedule::with_tors(&t, fan_out).expect("valid");
            prop_assert_eq!(s.tors(), m);
            let most = covers_tors(&s, &t, first);
            prop_assert_eq!(most, s.fan_out());
        }

        #[test]
        fn over_uneven_tors_a_cycle_still_covers_every_pair_of_tors(
            sizes in proptest::collection::vec(1usize..=9, 2..=10),
            fan_out in 2usize..=12,
            first in 0u64..=1_000_000,
        ) {
            let t = tors(&sizes);
            let s = Schedule::with_tors(&t, fan_out).expect("valid");
            covers_tors(&s, &t, first);
        }
    }

    #[test]
    fn ten_thousand_nodes_in_250_tors_at_the_default_fan_out() {
        // The fleet of the scale target: 40 nodes a ToR; 6 peers within, 2 across.
        let t = tors(&[40; 250]);
        let s = Schedule::with_tors(&t, 8).expect("valid");
        assert_eq!(s.fan_out(), 8);
        // Within: 39 peers at 6 an interval; across: 249 ToRs at 40 × 2 an interval.
        assert_eq!(s.cycle(), 7);
        assert_eq!(covers_tors(&s, &t, 12_345), 8);
    }

    #[test]
    fn one_tor_is_the_plain_rotation_and_a_fan_out_of_one_cannot_cross() {
        let s = Schedule::with_tors(&tors(&[5]), 2).expect("valid");
        assert_eq!(s, Schedule::new(5, 2).expect("valid"));
        assert_eq!(
            Schedule::with_tors(&tors(&[2, 2]), 1),
            Err(ScheduleError::FanOutBelowTors { tors: 2 })
        );
        assert_eq!(
            Schedule::with_tors(&tors(&[2, 2]), 0),
            Err(ScheduleError::NoFanOut)
        );
    }

    #[test]
    fn a_single_node_has_nothing_to_probe() {
        let s = Schedule::new(1, 8).expect("valid");
        assert_eq!((s.fan_out(), s.cycle()), (0, 1));
        assert_eq!(peers(&s, 0, 0), Vec::<usize>::new());
        assert_eq!(peers(&s, 0, u64::MAX), Vec::<usize>::new());
    }

    #[test]
    fn two_nodes_probe_each_other_every_interval() {
        let s = Schedule::new(2, 8).expect("valid");
        assert_eq!((s.fan_out(), s.cycle()), (1, 1));
        for t in [0, 1, 7, u64::MAX] {
            assert_eq!(peers(&s, 0, t), vec![1]);
            assert_eq!(peers(&s, 1, t), vec![0]);
        }
    }

    #[test]
    fn the_rotation_by_hand() {
        // n = 5, k = 2: offsets {1,2} in t=0, {3,4} in t=1, {1,2} in t=2; cycle 2.
        let s = Schedule::new(5, 2).expect("valid");
        assert_eq!(s.cycle(), 2);
        assert_eq!(peers(&s, 0, 0), vec![1, 2]);
        assert_eq!(peers(&s, 0, 1), vec![3, 4]);
        assert_eq!(peers(&s, 4, 1), vec![2, 3]);
        assert_eq!(peers(&s, 0, 2), vec![1, 2]);
        // n = 4, k = 2 (3 offsets): {1,2}, {3,1}, {2,3}.
        let s = Schedule::new(4, 2).expect("valid");
        assert_eq!(s.cycle(), 2);
        assert_eq!(peers(&s, 0, 1), vec![3, 1]);
        assert_eq!(peers(&s, 0, 2), vec![2, 3]);
    }

    #[test]
    fn the_largest_mesh_at_the_default_fan_out_covers_in_128_intervals() {
        let s = Schedule::new(1024, 8).expect("valid");
        assert_eq!(s.cycle(), 128);
        assert!(load(&s, 5).iter().all(|&l| l == 8));
    }

    #[test]
    fn bad_schedules_and_timings_are_refused() {
        assert_eq!(Schedule::new(0, 1), Err(ScheduleError::NoNodes));
        assert_eq!(Schedule::new(3, 0), Err(ScheduleError::NoFanOut));
        let s = Schedule::new(3, 1).expect("valid");
        assert_eq!(s.node(3), Err(ScheduleError::NoSuchNode { node: 3, n: 3 }));
        let every = Duration::from_secs(10);
        assert_eq!(
            Timing::new(Duration::ZERO, 0.1, 0),
            Err(ScheduleError::NoInterval)
        );
        assert!(matches!(
            Timing::new(every, 1.5, 0),
            Err(ScheduleError::BadJitter(_))
        ));
        assert!(matches!(
            Timing::new(every, f64::NAN, 0),
            Err(ScheduleError::BadJitter(_))
        ));
    }

    #[test]
    fn phases_spread_the_nodes_over_the_interval() {
        // 10 s, 10 % jitter: phases over the first 9 s; node 2 of 4 at 4.5 s.
        let timing = Timing::new(Duration::from_secs(10), 0.1, 7).expect("valid");
        assert_eq!(timing.jitter_window(), Duration::from_secs(1));
        let four = Schedule::new(4, 1).expect("valid");
        let node = |i| four.node(i).expect("in range");
        assert_eq!(timing.phase(&node(0)), Duration::ZERO);
        assert_eq!(timing.phase(&node(2)), Duration::from_millis(4_500));
        let at = timing.fire_at(&node(2), 3);
        assert!(at >= Duration::from_millis(34_500) && at < Duration::from_millis(35_500));
        // Without jitter, the phase alone.
        let timing = Timing::new(Duration::from_secs(10), 0.0, 7).expect("valid");
        assert_eq!(timing.offset(&node(1), 99), Duration::from_millis(2_500));
        // Far intervals saturate rather than wrap.
        assert_eq!(
            timing.fire_at(&node(0), u64::MAX),
            Duration::from_nanos(u64::MAX)
        );
    }

    #[test]
    fn the_jitter_differs_between_nodes_and_intervals() {
        let timing = Timing::new(Duration::from_secs(10), 0.1, 42).expect("valid");
        let mesh = Schedule::new(64, 8).expect("valid");
        let draws: HashSet<_> = (0..64)
            .flat_map(|node| (0..4).map(move |t| (node, t)))
            .map(|(node, t)| timing.jitter(&mesh.node(node).expect("in range"), t))
            .collect();
        assert!(draws.len() > 250, "{} distinct of 256", draws.len());
    }
}
