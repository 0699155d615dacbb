//! What each stage of the mesh phase must see in Prometheus, as checks polled until they are
//! done, found wrong, or out of time. Pure over [`Query`]: the tests drive them with a fake
//! Prometheus, broken ones included.
//!
//! They read what a prober exports at any scale: a path's own series only while it is not
//! healthy (`rdma_mesh_path_up` absent is a healthy path), its paths by state, and its probes
//! by result (`rdma_mesh_probe_results_total`, per prober).

use std::collections::BTreeMap;

use color_eyre::eyre::Result;

use super::prom::{Query, Sample};
use super::{Stage, Topology};

/// One poll's verdict.
#[derive(Clone, Debug, PartialEq)]
pub enum Check {
    /// The stage saw what it must: a line saying what.
    Done(String),
    /// Not yet: why not (the error if time runs out).
    NotYet(String),
    /// Something it must never see: the stage fails now.
    Wrong(String),
}

/// A path: the probing node's scrape target (`instance`) and the peer it probes.
type PathKey = (String, String);

/// The series of `expr` by (instance, peer), summed over what else they carry.
fn by_path(q: &dyn Query, expr: &str) -> Result<BTreeMap<PathKey, f64>> {
    let mut m = BTreeMap::new();
    for s in q.query(expr)? {
        *m.entry(key(&s)).or_insert(0.0) += s.value;
    }
    Ok(m)
}

fn key(s: &Sample) -> PathKey {
    (s.label("instance").to_owned(), s.label("peer").to_owned())
}

/// What a prober's probes came to: `(instance, result)`.
type Counts = BTreeMap<(String, String), f64>;

/// The series a path has of its own, only while it is not healthy (`SERIES_PER_PATH` in
/// rdma-client/src/mesh/metrics.rs).
pub const PATH_SERIES: [&str; 4] = [
    "rdma_mesh_path_up",
    "rdma_mesh_path_state",
    "rdma_mesh_probes_total",
    "rdma_mesh_path_state_changes_total",
];

/// Each prober's probes by result.
pub const RESULTS: &str = "sum by (instance, result) (rdma_mesh_probe_results_total)";
/// Each prober's paths that are up.
pub const PATHS_UP: &str = r#"sum by (instance) (rdma_mesh_paths{state="up"})"#;
/// Each prober's round trips observed.
pub const RTTS: &str = "sum by (instance) (rdma_mesh_rtt_seconds_count)";

fn counts(q: &dyn Query) -> Result<Counts> {
    let mut m = Counts::new();
    for s in q.query(RESULTS)? {
        let k = (s.label("instance").to_owned(), s.label("result").to_owned());
        *m.entry(k).or_insert(0.0) += s.value;
    }
    Ok(m)
}

/// How many probes of the prober `instance` with `result` (any result: `None`) since `from`.
fn delta(now: &Counts, from: &Counts, instance: &str, result: Option<&str>) -> f64 {
    now.iter()
        .filter(|((i, r), _)| i == instance && result.is_none_or(|want| want == r))
        .map(|(k, v)| v - from.get(k).copied().unwrap_or(0.0))
        // A fold from +0 (`sum` starts at -0, which prints as `-0`).
        .fold(0.0, |a, x| a + x)
}

/// Each prober's value of `expr` (by instance).
fn by_instance(q: &dyn Query, expr: &str) -> Result<BTreeMap<String, f64>> {
    let mut m = BTreeMap::new();
    for s in q.query(expr)? {
        *m.entry(s.label("instance").to_owned()).or_insert(0.0) += s.value;
    }
    Ok(m)
}

/// The probers whose `values` are below `want`, shown with what they have.
fn short_of(values: &BTreeMap<String, f64>, instances: &[String], want: f64) -> Vec<String> {
    instances
        .iter()
        .filter(|i| values.get(*i).copied().unwrap_or(0.0) < want)
        .map(|i| format!("{i} ({})", values.get(i).copied().unwrap_or(0.0)))
        .collect()
}

/// The paths of the mesh, named as the series name them.
fn paths(t: &Topology) -> Vec<PathKey> {
    let mut out = Vec::new();
    for a in &t.nodes {
        for b in t.nodes.iter().filter(|b| *b != a) {
            out.push((t.instance(a), b.clone()));
        }
    }
    out
}

fn show(p: &PathKey) -> String {
    format!("{} -> {}", p.0, p.1)
}

/// Paths whose `path_up` is not `want` (absent counts as not).
fn not_up(up: &BTreeMap<PathKey, f64>, paths: &[PathKey], want: f64) -> Vec<String> {
    paths
        .iter()
        .filter(|p| up.get(*p).copied() != Some(want))
        .map(|p| {
            format!(
                "{} (path_up {})",
                show(p),
                up.get(p).map_or("absent".into(), |v| v.to_string())
            )
        })
        .collect()
}

/// Paths whose `path_up` is there and not `want`: a state that moved. An absent series is a
/// scrape that failed (its target's series go stale at once), not a state.
fn moved(up: &BTreeMap<PathKey, f64>, paths: &[PathKey], want: f64) -> Vec<String> {
    paths
        .iter()
        .filter_map(|p| {
            let v = *up.get(p)?;
            (v != want).then(|| format!("{} (path_up {v})", show(p)))
        })
        .collect()
}

/// The paths through `node`, and the others.
fn split(t: &Topology, node: &str) -> (Vec<PathKey>, Vec<PathKey>) {
    let f = t.instance(node);
    paths(t)
        .into_iter()
        .partition(|(i, p)| *i == f || p == node)
}

/// The paths of the lossy link (both ways), and the others.
fn lossy_split(t: &Topology) -> (Vec<PathKey>, Vec<PathKey>) {
    let [a, b] = &t.lossy;
    paths(t)
        .into_iter()
        .partition(|(i, p)| (*i == t.instance(a) && p == b) || (*i == t.instance(b) && p == a))
}

/// The node verdicts (the shipped root-cause alerts) firing now.
pub const NODE_VERDICTS: &str = r#"ALERTS{alertname=~"RdmaMeshNode.*",alertstate="firing"}"#;

/// The mesh's alerts Alertmanager would page now.
fn paged(q: &dyn Query) -> Result<Vec<Sample>> {
    let mut v = q.pages()?;
    v.retain(|s| s.label("alertname").starts_with("RdmaMesh"));
    Ok(v)
}

/// Alerts as `alertname peer` (or `alertname instance`, `alertname link`), sorted.
fn names(alerts: &[Sample]) -> Vec<String> {
    let mut v: Vec<String> = alerts
        .iter()
        .map(|s| {
            let who = [s.label("peer"), s.label("instance"), s.label("link")]
                .into_iter()
                .find(|w| !w.is_empty())
                .unwrap_or("");
            format!("{} {who}", s.label("alertname"))
        })
        .collect();
    v.sort();
    v
}

/// The alerts Alertmanager would page now, by [`names`].
fn pages(q: &dyn Query) -> Result<Vec<String>> {
    Ok(names(&paged(q)?))
}

/// The node verdicts firing now, `(alertname, peer)`.
fn verdicts(q: &dyn Query) -> Result<Vec<(String, String)>> {
    Ok(q.query(NODE_VERDICTS)?
        .iter()
        .map(|s| (s.label("alertname").to_owned(), s.label("peer").to_owned()))
        .collect())
}

/// The one root cause of a node's fault: `alert` for `node` the only verdict firing, and the
/// only alert Alertmanager pages (its paths', its scrape's, inhibited). `Done` says so; any
/// other verdict is wrong.
fn one_root_cause(q: &dyn Query, alert: &str, node: &str) -> Result<Check> {
    let want = (alert.to_owned(), node.to_owned());
    let v = verdicts(q)?;
    if let Some(other) = v.iter().find(|v| **v != want) {
        return Ok(Check::Wrong(format!(
            "{} fires for {} while only {node} is faulted: one verdict, {alert} for {node}, is the root cause",
            other.0, other.1
        )));
    }
    if v.is_empty() {
        return Ok(Check::NotYet(format!("{alert} not firing yet for {node}")));
    }
    let paged = pages(q)?;
    let page = format!("{alert} {node}");
    if paged != [page.clone()] {
        return Ok(Check::NotYet(format!(
            "Alertmanager pages {paged:?}, not {page} alone"
        )));
    }
    Ok(Check::Done(format!(
        "one root cause, {alert} for {node}, the one alert Alertmanager pages"
    )))
}

/// The paths the shipped `RdmaMeshPathDown` fires for now, with the alert's `cause`.
fn firing_down(q: &dyn Query) -> Result<BTreeMap<PathKey, String>> {
    Ok(
        q.query(r#"ALERTS{alertname="RdmaMeshPathDown",alertstate="firing"}"#)?
            .iter()
            .map(|s| (key(s), s.label("cause").to_owned()))
            .collect(),
    )
}

/// A dashboard query with Grafana's variables as the check reads it: every instance and
/// peer, and a rate window of a minute.
pub fn grafana_expr(e: &str) -> String {
    e.replace("$__rate_interval", "1m")
        .replace("$instance", ".*")
        .replace("$tor", ".*")
        .replace("$peer", ".*")
}

/// A stage's checker: what it snapshot at its start, polled with [`Checker::poll`].
#[derive(Debug)]
pub struct Checker {
    stage: Stage,
    topo: Topology,
    /// The probe counters when the stage began.
    start: Counts,
    /// The dashboard's queries, `(where, expr)` (the steady stage's).
    dashboard: Vec<(String, String)>,
    /// Seconds since the stage began, at the last poll.
    pub elapsed_s: f64,
}

impl Checker {
    /// Starts `stage`: snapshots the probe counters.
    ///
    /// # Errors
    /// Prometheus did not answer.
    pub fn start(
        stage: Stage,
        topo: Topology,
        dashboard: Vec<(String, String)>,
        q: &dyn Query,
    ) -> Result<Self> {
        let start = counts(q)?;
        Ok(Self {
            stage,
            topo,
            start,
            dashboard,
            elapsed_s: 0.0,
        })
    }

    /// One look.
    ///
    /// # Errors
    /// Prometheus did not answer (the caller polls again).
    pub fn poll(&self, q: &dyn Query) -> Result<Check> {
        match self.stage {
            Stage::Steady => self.steady(q),
            Stage::Down => self.down(q),
            Stage::Up => self.back(q, &self.topo.dead),
            Stage::Blocked => self.blocked(q),
            Stage::Stopped => self.stopped(q),
            Stage::Restored => self.back(q, &self.topo.faulted),
            Stage::Lossy => self.lossy(q),
        }
    }

    fn up(&self, q: &dyn Query) -> Result<BTreeMap<PathKey, f64>> {
        by_path(q, "max by (instance, peer) (rdma_mesh_path_up)")
    }

    /// Paths that must stay up (not through the fault) but are down: a flap ([`moved`]).
    fn others_flapped(&self, up: &BTreeMap<PathKey, f64>, others: &[PathKey]) -> Option<Check> {
        let bad = moved(up, others, 1.0);
        (!bad.is_empty()).then(|| {
            Check::Wrong(format!(
                "a path the fault does not touch left up: {}",
                bad.join(", ")
            ))
        })
    }

    /// Every prober's scrape target.
    fn instances(&self) -> Vec<String> {
        self.topo
            .nodes
            .iter()
            .map(|n| self.topo.instance(n))
            .collect()
    }

    /// Each prober has every path up (`rdma_mesh_paths{state="up"}`), and no path of its
    /// own series is down.
    fn all_up(&self, q: &dyn Query) -> Result<Option<String>> {
        let peers = self.topo.nodes.len().saturating_sub(1) as f64;
        let bad = short_of(&by_instance(q, PATHS_UP)?, &self.instances(), peers);
        let down = moved(&self.up(q)?, &paths(&self.topo), 1.0);
        Ok((!bad.is_empty() || !down.is_empty()).then(|| {
            format!(
                "probers without all {peers} paths up: {}{}",
                bad.join(", "),
                if down.is_empty() {
                    String::new()
                } else {
                    format!("; down: {}", down.join(", "))
                }
            )
        }))
    }

    fn steady(&self, q: &dyn Query) -> Result<Check> {
        let all = paths(&self.topo);
        if let Some(why) = self.all_up(q)? {
            return Ok(Check::NotYet(format!("not up yet: {why}")));
        }
        let peers = self.topo.nodes.len().saturating_sub(1) as f64;
        let rtt = by_instance(q, RTTS)?;
        let empty = short_of(&rtt, &self.instances(), peers);
        if !empty.is_empty() {
            return Ok(Check::NotYet(format!(
                "fewer round trips than peers in the RTT histogram: {}",
                empty.join(", ")
            )));
        }
        // The network/host split needs completion timestamps: where no device has them
        // (`rdma_mesh_timestamps_supported` 0, as on Soft-RoCE) those panels stay empty, said.
        let stamps = q.query("max(rdma_mesh_timestamps_supported)")?;
        let no_stamps = stamps.first().is_some_and(|s| s.value == 0.0);
        let mut empty_by_device = Vec::new();
        let mut empty_healthy = Vec::new();
        for (at, e) in &self.dashboard {
            if !q.query(&grafana_expr(e))?.is_empty() {
                continue;
            }
            let names = crate::prometheus::promql::metric_names(e);
            let split_only = !names.is_empty()
                && names.iter().all(|n| {
                    n.starts_with("rdma_mesh_network_rtt_")
                        || n.starts_with("rdma_mesh_host_delay_")
                });
            if split_only && no_stamps {
                empty_by_device.push(at.clone());
                continue;
            }
            // A panel of the unhealthy paths' own series is empty while every path is up.
            if !names.is_empty() && names.iter().all(|n| PATH_SERIES.contains(&n.as_str())) {
                empty_healthy.push(at.clone());
                continue;
            }
            return Ok(Check::NotYet(format!(
                "dashboard {at}: no series yet for {e}"
            )));
        }
        let corrupt = self.corrupt(q)?;
        if let Some(w) = corrupt {
            return Ok(w);
        }
        let mut told = String::new();
        if !empty_by_device.is_empty() {
            told += &format!(
                " (the other {} read the network/host split, which no device here stamps: rdma_mesh_timestamps_supported 0: {})",
                empty_by_device.len(),
                empty_by_device.join(", ")
            );
        }
        if !empty_healthy.is_empty() {
            told += &format!(
                " ({} read only the series of paths that are not healthy, none here: {})",
                empty_healthy.len(),
                empty_healthy.join(", ")
            );
        }
        Ok(Check::Done(format!(
            "all {} paths up, every prober's RTT histogram filled ({} observations), {} of {} dashboard queries return series{told}",
            all.len(),
            rtt.values().sum::<f64>(),
            self.dashboard.len() - empty_by_device.len() - empty_healthy.len(),
            self.dashboard.len()
        )))
    }

    /// Any corrupt probe since the stage began is wrong.
    fn corrupt(&self, q: &dyn Query) -> Result<Option<Check>> {
        let now = counts(q)?;
        let bad: Vec<String> = self
            .instances()
            .into_iter()
            .filter(|i| delta(&now, &self.start, i, Some("corrupt")) > 0.0)
            .collect();
        Ok((!bad.is_empty())
            .then(|| Check::Wrong(format!("corrupt probes from {}", bad.join(", ")))))
    }

    /// The dead node sends nothing: the paths to it down (its own go unscraped), the other
    /// paths up, and one root cause, `RdmaMeshNodeDown` for it, alone in Alertmanager.
    fn down(&self, q: &dyn Query) -> Result<Check> {
        let dead = &self.topo.dead;
        let (through, others) = split(&self.topo, dead);
        let up = self.up(q)?;
        if let Some(w) = self.others_flapped(&up, &others) {
            return Ok(w);
        }
        if let Some(w) = self.corrupt(q)? {
            return Ok(w);
        }
        let into: Vec<PathKey> = through.into_iter().filter(|p| p.1 == *dead).collect();
        let still = not_up(&up, &into, 0.0);
        if !still.is_empty() {
            return Ok(Check::NotYet(format!("not down yet: {}", still.join(", "))));
        }
        Ok(match one_root_cause(q, "RdmaMeshNodeDown", dead)? {
            Check::Done(what) => Check::Done(format!(
                "{} paths to {dead} down, the other {} up; {what}",
                into.len(),
                others.len()
            )),
            other => other,
        })
    }

    /// RoCE dropped by the faulted node: its paths down, the probes to it with cause `rdma`
    /// (never `host`) and the shipped alert firing for each (with that cause, for the paths
    /// to it: a path from it that probed the dead node lately may name that node's cause,
    /// the most frequent on it); one root cause, alone in Alertmanager; the others up.
    fn blocked(&self, q: &dyn Query) -> Result<Check> {
        let faulted = &self.topo.faulted;
        let (through, others) = split(&self.topo, faulted);
        let up = self.up(q)?;
        if let Some(w) = self.others_flapped(&up, &others) {
            return Ok(w);
        }
        // Every failure now is on a path through the faulted node (the others stay up), and
        // the RDMA path's (TCP open).
        let now = counts(q)?;
        for i in self.instances() {
            for r in ["host", "refused", "corrupt"] {
                let n = delta(&now, &self.start, &i, Some(r));
                if n > 0.0 {
                    return Ok(Check::Wrong(format!(
                        "{i}: {n} probe(s) failed `{r}` while only {faulted}'s RoCE was blocked (TCP open): the cause must be `rdma`"
                    )));
                }
            }
        }
        let still = not_up(&up, &through, 0.0);
        if !still.is_empty() {
            return Ok(Check::NotYet(format!("not down yet: {}", still.join(", "))));
        }
        let firing = firing_down(q)?;
        let mut missing = Vec::new();
        for p in &through {
            match firing.get(p).map(String::as_str) {
                Some("rdma") => {}
                Some(other) if p.1 == *faulted => {
                    return Ok(Check::Wrong(format!(
                        "{}: RdmaMeshPathDown fires with cause {other:?}, not \"rdma\"",
                        show(p)
                    )));
                }
                Some(_) => {}
                None => missing.push(show(p)),
            }
        }
        if !missing.is_empty() {
            return Ok(Check::NotYet(format!(
                "RdmaMeshPathDown not firing yet for {}",
                missing.join(", ")
            )));
        }
        Ok(
            match one_root_cause(q, "RdmaMeshNodeRdmaBroken", faulted)? {
                Check::Done(what) => Check::Done(format!(
                    "{} paths through {faulted} down, RdmaMeshPathDown firing for each (cause=\"rdma\" to it); {what}; the other {} up",
                    through.len(),
                    others.len()
                )),
                other => other,
            },
        )
    }

    /// The faulted node's server stopped too: probes to it fail `host` or `refused`, as it
    /// really is; its own probes still `rdma`; the others up.
    fn stopped(&self, q: &dyn Query) -> Result<Check> {
        let (through, others) = split(&self.topo, &self.topo.faulted);
        let up = self.up(q)?;
        if let Some(w) = self.others_flapped(&up, &others) {
            return Ok(w);
        }
        let back = moved(&up, &through, 0.0);
        if !back.is_empty() {
            return Ok(Check::Wrong(format!(
                "a path through the stopped node came up: {}",
                back.join(", ")
            )));
        }
        // The other probers' failures are their probes of the faulted node.
        let now = counts(q)?;
        let mut seen = Vec::new();
        let faulted = self.topo.instance(&self.topo.faulted);
        for i in self.instances().into_iter().filter(|i| *i != faulted) {
            let host = delta(&now, &self.start, &i, Some("host"));
            let refused = delta(&now, &self.start, &i, Some("refused"));
            let rdma = delta(&now, &self.start, &i, Some("rdma"));
            if host + refused == 0.0 {
                return Ok(Check::NotYet(format!(
                    "{i} -> {}: no probe failed host or refused yet ({rdma} rdma)",
                    self.topo.faulted
                )));
            }
            seen.push(format!(
                "{i} -> {} host {host} refused {refused}",
                self.topo.faulted
            ));
        }
        Ok(Check::Done(format!(
            "with its server stopped, probes to {}: {}; its paths still down, the other {} up",
            self.topo.faulted,
            seen.join("; "),
            others.len()
        )))
    }

    /// What Alertmanager pages: the flaps of the paths between the dead node and the faulted
    /// one, which went down and up for each of the two faults within minutes (more than 4
    /// changes in 30 minutes: `RdmaMeshPathFlapping`), and the rest.
    fn paged_but_flaps(&self, q: &dyn Query) -> Result<(Vec<Sample>, Vec<Sample>)> {
        let (dead, faulted) = (&self.topo.dead, &self.topo.faulted);
        Ok(paged(q)?.into_iter().partition(|s| {
            let (i, p) = (s.label("instance"), s.label("peer"));
            s.label("alertname") == "RdmaMeshPathFlapping"
                && ((i == self.topo.instance(dead) && p == faulted)
                    || (i == self.topo.instance(faulted) && p == dead))
        }))
    }

    /// `node` restored: every path up again (its state `up`, not only reachable), no path
    /// alert firing and nothing paged.
    fn back(&self, q: &dyn Query, node: &str) -> Result<Check> {
        let (_, others) = split(&self.topo, node);
        let up = self.up(q)?;
        if let Some(w) = self.others_flapped(&up, &others) {
            return Ok(w);
        }
        let all = paths(&self.topo);
        if let Some(why) = self.all_up(q)? {
            return Ok(Check::NotYet(format!("not up again yet: {why}")));
        }
        let firing = firing_down(q)?;
        if !firing.is_empty() {
            let f: Vec<String> = firing.keys().map(show).collect();
            return Ok(Check::NotYet(format!(
                "RdmaMeshPathDown still firing for {}",
                f.join(", ")
            )));
        }
        let (flapping, rest) = self.paged_but_flaps(q)?;
        if !rest.is_empty() {
            return Ok(Check::NotYet(format!(
                "Alertmanager still pages {:?}",
                names(&rest)
            )));
        }
        let told = if flapping.is_empty() {
            "nothing paged".to_owned()
        } else {
            format!(
                "nothing paged but {:?} (down and up for each of two faults)",
                names(&flapping)
            )
        };
        Ok(Check::Done(format!(
            "{node} back: all {} paths up again, RdmaMeshPathDown resolved, {told}",
            all.len()
        )))
    }

    /// Loss on one link: after enough probes of its two paths, each showed slow probes or went
    /// degraded; no probe anywhere corrupt; every other path stayed up and never degraded; and
    /// the link's one alert fired, the one page.
    fn lossy(&self, q: &dyn Query) -> Result<Check> {
        let (lossy, others) = lossy_split(&self.topo);
        let up = self.up(q)?;
        if let Some(w) = self.others_flapped(&up, &others) {
            return Ok(w);
        }
        if let Some(w) = self.corrupt(q)? {
            return Ok(w);
        }
        let window = format!("{}s", self.elapsed_s.ceil().max(1.0));
        let degraded = by_path(
            q,
            &format!(
                r#"max by (instance, peer) (max_over_time(rdma_mesh_path_state{{state="degraded"}}[{window}]))"#
            ),
        )?;
        let bad: Vec<String> = others
            .iter()
            .filter(|p| degraded.get(*p).copied().unwrap_or(0.0) > 0.0)
            .map(show)
            .collect();
        if !bad.is_empty() {
            return Ok(Check::Wrong(format!(
                "a path off the lossy link went degraded: {}",
                bad.join(", ")
            )));
        }
        // A lossy end's probes: one peer of its in turn is the other end.
        let now = counts(q)?;
        let peers = self.topo.nodes.len().saturating_sub(1) as f64;
        let mut told = Vec::new();
        for p in &lossy {
            let probes = delta(&now, &self.start, &p.0, None) / peers;
            if probes < self.topo.loss_probes as f64 {
                return Ok(Check::NotYet(format!(
                    "{}: about {probes} of {} probes under loss so far",
                    show(p),
                    self.topo.loss_probes
                )));
            }
            let slow = delta(&now, &self.start, &p.0, Some("slow"));
            let failed: f64 = ["host", "refused", "rdma"]
                .iter()
                .map(|r| delta(&now, &self.start, &p.0, Some(r)))
                .sum();
            let was_degraded = degraded.get(p).copied().unwrap_or(0.0) > 0.0;
            if slow == 0.0 && !was_degraded {
                return Ok(Check::Wrong(format!(
                    "{}: {probes} probes under 5% loss, none slow and never degraded ({failed} failed): the loss did not show",
                    show(p)
                )));
            }
            told.push(format!(
                "{}: about {probes} probes, its prober's {slow} slow and {failed} failed, degraded {}",
                show(p),
                if was_degraded { "yes" } else { "no" }
            ));
        }
        // One alert for the link, whichever way: RdmaMeshLinkLossy, the only page (its
        // degraded paths inhibited under it).
        let link = {
            let [a, b] = &self.topo.lossy;
            if a <= b {
                format!("{a}~{b}")
            } else {
                format!("{b}~{a}")
            }
        };
        let firing = q.query(&format!(
            r#"ALERTS{{alertname="RdmaMeshLinkLossy",alertstate="firing",link="{link}"}}"#
        ))?;
        if firing.is_empty() {
            return Ok(Check::NotYet(format!(
                "RdmaMeshLinkLossy not firing yet for {link}: {}",
                told.join("; ")
            )));
        }
        let (flapping, rest) = self.paged_but_flaps(q)?;
        let page = format!("RdmaMeshLinkLossy {link}");
        if names(&rest) != [page.clone()] {
            return Ok(Check::NotYet(format!(
                "Alertmanager pages {:?}, not {page} alone",
                names(&rest)
            )));
        }
        Ok(Check::Done(format!(
            "lossy link {}-{}: {}; no probe corrupt; the other {} paths stayed up, never degraded; one alert, {page}, the one Alertmanager pages{}",
            self.topo.lossy[0],
            self.topo.lossy[1],
            told.join("; "),
            others.len(),
            if flapping.is_empty() {
                String::new()
            } else {
                format!(" but {:?}", names(&flapping))
            }
        )))
    }
}
