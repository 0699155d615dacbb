//! A simulated fabric for the mesh's pure core: thousands of nodes in ToRs, each probing the
//! peers its [`Schedule`] gives it every interval, each probe's outcome told by the faults in
//! force ([`Fault`]), judged by the same [`Pair`] state machine, and recorded in the same
//! [`MeshMetrics`] as `rdma-client mesh` does, for the probers watched. No RDMA, no network, no
//! clock: an interval is a step.
//!
//! What it is for: what a prober exports at fleet scale (series), what each server takes (probe
//! load), how soon a fault shows (the intervals from the fault to each path's `down`), and,
//! through [`Fleet::promtool_input`], the shipped rules run by promtool over a fleet's
//! expositions.

use rdma_client::mesh::MeshConfig;
use rdma_client::mesh::cause::{Cause, Outcome};
use rdma_client::mesh::metrics::{Format, MeshMetrics, Path, ProbeReport};
use rdma_client::mesh::rtt::Rtt;
use rdma_client::mesh::runner::probe_report;
use rdma_client::mesh::schedule::{NodeSchedule, Schedule};
use rdma_client::mesh::state::{Pair, PairState, StateConfig};
use rdma_client::mesh::topology::Tors;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The fleet's shape: `tors` ToRs of `per_tor` nodes.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub tors: usize,
    pub per_tor: usize,
    pub fan_out: usize,
}

/// What goes wrong, from an interval on.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Fault {
    /// The node is down: nothing answers it, it probes nothing, nobody scrapes it.
    DeadHost(usize),
    /// The node's NIC drops RoCE: its probes and the probes of it fail `rdma` (TCP answers).
    BrokenNic(usize),
    /// The ToR's uplinks are down: every probe between it and another ToR fails `host`.
    TorCut(usize),
    /// Packet loss on the link between two nodes: a probe between them waits out a
    /// retransmission (`stalled`) with this probability.
    Loss { a: usize, b: usize, stall: f64 },
}

/// The wall round trip of a good probe, and of one that waited out a retransmission.
const RTT: Duration = Duration::from_micros(20);
const STALLED: Duration = Duration::from_millis(8);
/// The simulated clock's start: Prometheus's unit tests start at 0 too.
const T0: Duration = Duration::ZERO;

/// A change of a path's state, in interval `t`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Change {
    pub t: u64,
    pub prober: usize,
    pub peer: usize,
    pub to: PairState,
    pub cause: Option<Cause>,
}

/// The fleet.
#[derive(Debug)]
pub struct Fleet {
    /// Node names (`n00000`, …), by rank.
    pub names: Vec<String>,
    /// ToR names (`tor000`, …) and each node's.
    pub tors: Tors,
    pub schedule: Schedule,
    nodes: Vec<NodeSchedule>,
    state: StateConfig,
    every: Duration,
    pairs: HashMap<(u32, u32), Pair>,
    watched: BTreeMap<usize, Arc<MeshMetrics>>,
    faults: Vec<(u64, Fault)>,
    rng: u64,
    /// The next interval.
    pub t: u64,
    /// Every change of state so far.
    pub changes: Vec<Change>,
    /// The probes each node took as a server in the last interval.
    pub received: Vec<u32>,
    /// The probes from each ToR to each other one, `[ok, failed]`, since this was last cleared.
    pub across: HashMap<(usize, usize), [u64; 2]>,
}

impl Fleet {
    /// The fleet, every path unknown, with the mesh's default state machine and interval.
    ///
    /// # Errors
    /// A shape the schedule refuses.
    pub fn new(shape: Shape) -> color_eyre::Result<Self> {
        let n = shape.tors * shape.per_tor;
        let names: Vec<String> = (0..n).map(|i| format!("n{i:05}")).collect();
        let leaves: Vec<(String, Vec<String>)> = (0..shape.tors)
            .map(|t| {
                let nodes = names[t * shape.per_tor..(t + 1) * shape.per_tor].to_vec();
                (format!("tor{t:03}"), nodes)
            })
            .collect();
        let tors = Tors::place(&names, &leaves)?;
        let schedule = Schedule::with_tors(&tors, shape.fan_out)?;
        let nodes = (0..n)
            .map(|i| schedule.node(i))
            .collect::<Result<Vec<_>, _>>()?;
        let config = MeshConfig::default();
        Ok(Fleet {
            names,
            tors,
            schedule,
            nodes,
            state: config.state,
            every: config.every,
            pairs: HashMap::new(),
            watched: BTreeMap::new(),
            faults: Vec::new(),
            rng: 0x9e37_79b9_7f4a_7c15,
            t: 0,
            changes: Vec::new(),
            received: vec![0; n],
            across: HashMap::new(),
        })
    }

    /// The ToR of `node` (an index into `tors.names`).
    pub fn tor(&self, node: usize) -> usize {
        self.tors.of[node]
    }

    /// The interval's length (the mesh's default `--every`).
    pub fn every(&self) -> Duration {
        self.every
    }

    /// Keeps `node`'s metrics, as its prober would export them.
    ///
    /// # Errors
    /// A label the metrics refuse.
    pub fn watch(&mut self, node: usize) -> color_eyre::Result<()> {
        let tor = |i: usize| self.tors.names[self.tors.of[i]].clone();
        let paths: Vec<Path> = (0..self.names.len())
            .filter(|&p| p != node)
            .map(|p| Path {
                peer: self.names[p].clone(),
                peer_tor: tor(p),
                device: "mlx5_0".to_owned(),
                rail: "0".to_owned(),
            })
            .collect();
        let m = MeshMetrics::new(&self.names[node], &tor(node), &paths)?;
        m.set_timestamps_supported("mlx5_0", false)?;
        self.watched.insert(node, Arc::new(m));
        Ok(())
    }

    /// `fault` from interval `from` on.
    pub fn inject(&mut self, from: u64, fault: Fault) {
        self.faults.push((from, fault));
    }

    fn active(&self) -> impl Iterator<Item = Fault> + '_ {
        self.faults
            .iter()
            .filter(|(from, _)| *from <= self.t)
            .map(|(_, f)| *f)
    }

    /// `node` is up (not a [`Fault::DeadHost`] now).
    pub fn alive(&self, node: usize) -> bool {
        !self.active().any(|f| f == Fault::DeadHost(node))
    }

    /// A number in [0, 1), the same run after run (splitmix64).
    fn uniform(&mut self) -> f64 {
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }

    /// What a probe from `p` to `q` comes to now.
    fn outcome(&mut self, p: usize, q: usize) -> Outcome {
        let (tp, tq) = (self.tor(p), self.tor(q));
        let mut stall = 0.0;
        for i in 0..self.faults.len() {
            let (from, f) = self.faults[i];
            if from > self.t {
                continue;
            }
            match f {
                Fault::DeadHost(x) if x == q => {
                    return Outcome::Failed { cause: Cause::Host };
                }
                Fault::BrokenNic(x) if x == p || x == q => {
                    return Outcome::Failed { cause: Cause::Rdma };
                }
                Fault::TorCut(u) if tp != tq && (tp == u || tq == u) => {
                    return Outcome::Failed { cause: Cause::Host };
                }
                Fault::Loss { a, b, stall: s } if (p, q) == (a, b) || (p, q) == (b, a) => {
                    stall = s;
                }
                _ => {}
            }
        }
        let stalled = stall > 0.0 && self.uniform() < stall;
        let wall = if stalled { STALLED } else { RTT };
        Outcome::Ok {
            rtt: Rtt::wall(wall),
            stalled,
        }
    }

    /// One interval: every node that is up probes the peers the schedule gives it, at the
    /// simulated clock's time (interval `t` at `t` × the interval from Unix time 0).
    ///
    /// # Errors
    /// The metrics refused a report (a bug of the simulation's paths).
    pub fn step(&mut self) -> color_eyre::Result<()> {
        let at = UNIX_EPOCH + T0 + self.every * u32::try_from(self.t).unwrap_or(u32::MAX);
        self.step_at(at)
    }

    /// A watched node's metrics, to serve.
    pub fn metrics(&self, node: usize) -> Option<Arc<MeshMetrics>> {
        self.watched.get(&node).cloned()
    }

    /// [`Self::step`] with the probes ending at `at` (the wall clock, where a real Prometheus
    /// scrapes the fleet).
    ///
    /// # Errors
    /// As [`Self::step`].
    pub fn step_at(&mut self, at: SystemTime) -> color_eyre::Result<()> {
        let t = self.t;
        self.received.iter_mut().for_each(|r| *r = 0);
        for p in 0..self.names.len() {
            if !self.alive(p) {
                continue;
            }
            let peers: Vec<usize> = self.nodes[p].peers(t).collect();
            for q in peers {
                self.received[q] += 1;
                let outcome = self.outcome(p, q);
                let (tp, tq) = (self.tor(p), self.tor(q));
                if tp != tq {
                    let failed = matches!(outcome, Outcome::Failed { .. });
                    self.across.entry((tp, tq)).or_default()[usize::from(failed)] += 1;
                }
                let pair = self.pairs.entry((p as u32, q as u32)).or_default();
                let observed = pair.observe(&self.state, &outcome);
                let state = pair.state();
                if let Some(tr) = observed.transition {
                    self.changes.push(Change {
                        t,
                        prober: p,
                        peer: q,
                        to: tr.to,
                        cause: tr.cause,
                    });
                }
                if let Some(m) = self.watched.get(&p) {
                    let report = ProbeReport {
                        at,
                        ..probe_report(&self.names[q], "mlx5_0", "0", &observed, state, &outcome)
                    };
                    m.record(&report)?;
                }
            }
        }
        self.t += 1;
        Ok(())
    }

    /// The state of the path from `prober` to `peer`.
    pub fn state(&self, prober: usize, peer: usize) -> PairState {
        self.pairs
            .get(&(prober as u32, peer as u32))
            .map_or(PairState::Unknown, Pair::state)
    }

    /// A watched node's exposition (text format), as its prober would serve it.
    pub fn exposition(&self, node: usize) -> Option<String> {
        self.watched.get(&node).map(|m| m.encode(Format::Text))
    }

    /// The samples Prometheus would scrape now from every watched node that is up, as
    /// `(series, value)` with the scrape's `instance` (`NODE:9478`) and `job` (`rdma-mesh`), and
    /// each target's `up`.
    pub fn scrape(&self) -> Vec<(String, f64)> {
        let mut out = Vec::new();
        for (&node, m) in &self.watched {
            let target = format!(r#"instance="{}:9478",job="rdma-mesh""#, self.names[node]);
            let alive = self.alive(node);
            out.push((format!("up{{{target}}}"), if alive { 1.0 } else { 0.0 }));
            if !alive {
                continue;
            }
            for line in m.encode(Format::Text).lines() {
                if line.starts_with('#') || line.is_empty() {
                    continue;
                }
                let Some((series, value)) = line.rsplit_once(' ') else {
                    continue;
                };
                let Ok(value) = value.parse::<f64>() else {
                    continue;
                };
                let series = match series.split_once('{') {
                    Some((name, rest)) => format!("{name}{{{target},{rest}"),
                    None => format!("{series}{{{target}}}"),
                };
                out.push((series, value));
            }
        }
        out
    }
}

/// Scrapes gathered into promtool's `input_series`: one series a line, its values one a scrape
/// (`_` where it was absent).
#[derive(Debug, Default)]
pub struct PromtoolInput {
    scrapes: usize,
    series: BTreeMap<String, Vec<Option<f64>>>,
}

impl PromtoolInput {
    /// Adds one scrape of the fleet.
    pub fn add(&mut self, samples: Vec<(String, f64)>) {
        let k = self.scrapes;
        for (s, v) in samples {
            let values = self.series.entry(s).or_insert_with(|| vec![None; k]);
            values.push(Some(v));
        }
        self.scrapes += 1;
        for values in self.series.values_mut() {
            values.resize(self.scrapes, None);
        }
    }

    /// How many series.
    pub fn len(&self) -> usize {
        self.series.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.series.is_empty()
    }

    /// The `input_series:` block, indented for a test of promtool's.
    pub fn yaml(&self) -> String {
        let mut out = String::from("    input_series:\n");
        for (s, values) in &self.series {
            let v: Vec<String> = values
                .iter()
                .map(|v| v.map_or("_".to_owned(), |x| format!("{x}")))
                .collect();
            out += &format!(
                "      - series: '{}'\n        values: '{}'\n",
                s,
                v.join(" ")
            );
        }
        out
    }
}
