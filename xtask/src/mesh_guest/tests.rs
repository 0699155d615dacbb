//! The stages against a fake Prometheus: each passes on what it must see, and each broken
//! shape (a flap, a wrong cause, an alert that never fires, loss that never shows, a corrupt
//! probe) is named.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};

use color_eyre::eyre::Result;

use super::prom::{Query, Sample};
use super::stages::{Check, Checker, NODE_VERDICTS, PATHS_UP, RESULTS, RTTS, grafana_expr};
use super::{Stage, Topology, budget};

const UP: &str = "max by (instance, peer) (rdma_mesh_path_up)";
const ALERTS: &str = r#"ALERTS{alertname="RdmaMeshPathDown",alertstate="firing"}"#;
/// Where the fake keeps what Alertmanager pages.
const PAGES: &str = "(alertmanager)";

#[derive(Default)]
struct Fake {
    answers: RefCell<HashMap<String, Vec<Sample>>>,
}

fn sample(labels: &[(&str, &str)], value: f64) -> Sample {
    Sample {
        labels: labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect::<BTreeMap<_, _>>(),
        value,
    }
}

impl Fake {
    fn set(&self, q: &str, s: Vec<Sample>) {
        self.answers.borrow_mut().insert(q.to_owned(), s);
    }

    /// The paths as a prober exports them: `down` ones with their own `path_up` 0,
    /// `recovered` ones (back up, keeping their series a while) with 1, the others healthy
    /// (no series of their own); each prober's paths up, but for `down` and `unjudged`.
    fn up(&self, down: &[(&str, &str)], recovered: &[(&str, &str)], unjudged: &[(&str, &str)]) {
        let mut v = Vec::new();
        let mut up = Vec::new();
        for a in ["node1", "node2", "node3"] {
            let mut n = 0.0;
            for b in ["node1", "node2", "node3"].into_iter().filter(|b| *b != a) {
                let path = sample(&[("instance", &inst(a)), ("peer", b)], 0.0);
                if down.contains(&(a, b)) {
                    v.push(path);
                } else if recovered.contains(&(a, b)) {
                    v.push(Sample { value: 1.0, ..path });
                    n += 1.0;
                } else if !unjudged.contains(&(a, b)) {
                    n += 1.0;
                }
            }
            up.push(sample(&[("instance", &inst(a))], n));
        }
        self.set(UP, v);
        self.set(PATHS_UP, up);
    }

    /// Each prober's results: `n` ok probes of each of its two peers, plus `extra` (path,
    /// result, count), summed by prober.
    fn probes(&self, n: f64, extra: &[((&str, &str), &str, f64)]) {
        let mut v = Vec::new();
        for a in ["node1", "node2", "node3"] {
            v.push(sample(&[("instance", &inst(a)), ("result", "ok")], 2.0 * n));
            for ((x, _), r, c) in extra {
                if *x == a {
                    v.push(sample(&[("instance", &inst(a)), ("result", r)], *c));
                }
            }
        }
        self.set(RESULTS, v);
    }

    /// Alertmanager pages these `(alertname, peer)`.
    fn pages(&self, alerts: &[(&str, &str)]) {
        self.set(
            PAGES,
            alerts
                .iter()
                .map(|(name, peer)| sample(&[("alertname", name), ("peer", peer)], 1.0))
                .collect(),
        );
    }

    fn firing(&self, paths: &[((&str, &str), &str)]) {
        self.set(
            ALERTS,
            paths
                .iter()
                .map(|((a, b), cause)| {
                    sample(
                        &[("instance", &inst(a)), ("peer", b), ("cause", cause)],
                        1.0,
                    )
                })
                .collect(),
        );
    }
}

impl Query for Fake {
    fn query(&self, expr: &str) -> Result<Vec<Sample>> {
        Ok(self.answers.borrow().get(expr).cloned().unwrap_or_default())
    }

    fn pages(&self) -> Result<Vec<Sample>> {
        self.query(PAGES)
    }
}

fn inst(node: &str) -> String {
    format!("{node}:9478")
}

fn topo() -> Topology {
    Topology {
        nodes: vec!["node1".into(), "node2".into(), "node3".into()],
        metrics_port: 9478,
        faulted: "node3".into(),
        dead: "node2".into(),
        lossy: ["node2".into(), "node3".into()],
        prometheus: "http://node1:9090".into(),
        alertmanager: "http://node1:9093".into(),
        dashboard: "/dev/null".into(),
        every_s: 3,
        cycle: 1,
        down_after: 2,
        up_after: 2,
        bw_every: 3,
        alert_for_s: 3,
        loss_probes: 4,
    }
}

fn checker(stage: Stage, f: &Fake, dashboard: Vec<(String, String)>) -> Checker {
    Checker::start(stage, topo(), dashboard, f).unwrap()
}

fn done(c: Check) -> String {
    match c {
        Check::Done(s) => s,
        other => panic!("not done: {other:?}"),
    }
}

fn wrong(c: Check) -> String {
    match c {
        Check::Wrong(s) => s,
        other => panic!("not wrong: {other:?}"),
    }
}

fn not_yet(c: Check) -> String {
    match c {
        Check::NotYet(s) => s,
        other => panic!("not 'not yet': {other:?}"),
    }
}

const THROUGH: [(&str, &str); 4] = [
    ("node1", "node3"),
    ("node2", "node3"),
    ("node3", "node1"),
    ("node3", "node2"),
];

#[test]
fn steady_waits_for_every_path_the_histograms_and_every_dashboard_query() {
    let f = Fake::default();
    f.probes(1.0, &[]);
    let dash = vec![(
        "panel \"RTT\"".to_owned(),
        "rate(x[$__rate_interval])".to_owned(),
    )];
    let c = checker(Stage::Steady, &f, dash);
    f.up(&[], &[], &[("node2", "node3")]);
    let n = not_yet(c.poll(&f).unwrap());
    assert!(
        n.contains("probers without all 2 paths up: node2:9478 (1)"),
        "{n}"
    );
    f.up(&[("node1", "node3")], &[], &[]);
    let n = not_yet(c.poll(&f).unwrap());
    assert!(
        n.contains("node1:9478 (1); down: node1:9478 -> node3 (path_up 0)"),
        "{n}"
    );
    f.up(&[], &[], &[]);
    f.set(RTTS, vec![sample(&[("instance", &inst("node1"))], 5.0)]);
    let n = not_yet(c.poll(&f).unwrap());
    assert!(
        n.contains("fewer round trips than peers") && n.contains("node2:9478 (0)"),
        "{n}"
    );
    let rtt: Vec<Sample> = ["node1", "node2", "node3"]
        .iter()
        .map(|a| sample(&[("instance", &inst(a))], 5.0))
        .collect();
    f.set(RTTS, rtt);
    assert!(not_yet(c.poll(&f).unwrap()).contains("dashboard panel \"RTT\": no series"));
    f.set(
        &grafana_expr("rate(x[$__rate_interval])"),
        vec![sample(&[], 1.0)],
    );
    assert!(done(c.poll(&f).unwrap()).contains("all 6 paths up"));
    // A panel of the network/host split is empty where no device stamps completions, and
    // said; where one does, it is waited for.
    let split = (
        "panel \"net\"".to_owned(),
        "rate(rdma_mesh_network_rtt_seconds_bucket[$__rate_interval])".to_owned(),
    );
    let unhealthy = (
        "panel \"state\"".to_owned(),
        "max by (instance, peer) (rdma_mesh_path_state{peer=~\"$peer\"}) == 1".to_owned(),
    );
    let dash = vec![
        (
            "panel \"RTT\"".to_owned(),
            "rate(x[$__rate_interval])".to_owned(),
        ),
        split,
        unhealthy,
    ];
    let c2 = checker(Stage::Steady, &f, dash);
    assert!(not_yet(c2.poll(&f).unwrap()).contains("dashboard panel \"net\""));
    f.set(
        "max(rdma_mesh_timestamps_supported)",
        vec![sample(&[], 0.0)],
    );
    let d = done(c2.poll(&f).unwrap());
    assert!(
        d.contains("1 of 3 dashboard queries") && d.contains("panel \"net\""),
        "{d}"
    );
    // A panel of the unhealthy paths' own series is empty in a healthy mesh, and said.
    assert!(
        d.contains(
            "1 read only the series of paths that are not healthy, none here: panel \"state\""
        ),
        "{d}"
    );
    f.probes(2.0, &[(("node1", "node2"), "corrupt", 1.0)]);
    assert!(wrong(c.poll(&f).unwrap()).contains("corrupt probes from node1:9478"));
}

#[test]
fn blocked_wants_rdma_down_and_the_alert_with_its_cause_and_nothing_else_moving() {
    let f = Fake::default();
    f.probes(3.0, &[(("node1", "node3"), "host", 1.0)]);
    f.up(&[], &[], &[]);
    let c = checker(Stage::Blocked, &f, Vec::new());
    // A host failure from before the stage does not count; rdma ones do not yet go down.
    f.probes(
        4.0,
        &[
            (("node1", "node3"), "host", 1.0),
            (("node3", "node1"), "rdma", 1.0),
        ],
    );
    assert!(not_yet(c.poll(&f).unwrap()).contains("not down yet"));
    f.up(&THROUGH, &[], &[]);
    assert!(not_yet(c.poll(&f).unwrap()).contains("RdmaMeshPathDown not firing yet"));
    f.firing(&THROUGH.map(|p| (p, "rdma")));
    assert!(
        not_yet(c.poll(&f).unwrap()).contains("RdmaMeshNodeRdmaBroken not firing yet for node3")
    );
    let verdict = |name: &str, node: &str| sample(&[("alertname", name), ("peer", node)], 1.0);
    f.set(
        NODE_VERDICTS,
        vec![verdict("RdmaMeshNodeRdmaBroken", "node3")],
    );
    // Paged: the verdict, and a path alert not inhibited yet.
    f.pages(&[
        ("RdmaMeshNodeRdmaBroken", "node3"),
        ("RdmaMeshPathDown", "node3"),
    ]);
    assert!(
        not_yet(c.poll(&f).unwrap()).contains(
            r#"Alertmanager pages ["RdmaMeshNodeRdmaBroken node3", "RdmaMeshPathDown node3"], not RdmaMeshNodeRdmaBroken node3 alone"#
        )
    );
    f.pages(&[("RdmaMeshNodeRdmaBroken", "node3")]);
    let d = done(c.poll(&f).unwrap());
    assert!(d.contains("4 paths through node3 down"), "{d}");
    assert!(
        d.contains(
            "one root cause, RdmaMeshNodeRdmaBroken for node3, the one alert Alertmanager pages"
        ),
        "{d}"
    );
    // A path from the faulted node may name the cause most frequent on it lately (its probes
    // of the dead node); one to it may not.
    f.firing(&[
        (("node1", "node3"), "rdma"),
        (("node2", "node3"), "rdma"),
        (("node3", "node1"), "rdma"),
        (("node3", "node2"), "host"),
    ]);
    assert!(done(c.poll(&f).unwrap()).contains("4 paths through node3 down"));
    f.firing(&THROUGH.map(|p| (p, "rdma")));
    // A second verdict, or one of the wrong kind, is not one alert per root cause.
    f.set(
        NODE_VERDICTS,
        vec![
            verdict("RdmaMeshNodeRdmaBroken", "node3"),
            verdict("RdmaMeshNodeRdmaBroken", "node1"),
        ],
    );
    assert!(wrong(c.poll(&f).unwrap()).contains("RdmaMeshNodeRdmaBroken fires for node1"));
    f.set(NODE_VERDICTS, vec![verdict("RdmaMeshNodeDown", "node3")]);
    assert!(wrong(c.poll(&f).unwrap()).contains("RdmaMeshNodeDown fires for node3"));
    f.set(
        NODE_VERDICTS,
        vec![verdict("RdmaMeshNodeRdmaBroken", "node3")],
    );

    // The broken shapes.
    f.firing(&[(THROUGH[0], "host")]);
    assert!(wrong(c.poll(&f).unwrap()).contains("cause \"host\", not \"rdma\""));
    f.probes(5.0, &[(("node2", "node3"), "host", 1.0)]);
    assert!(wrong(c.poll(&f).unwrap()).contains("node2:9478: 1 probe(s) failed `host`"));
    f.up(&[("node1", "node2")], &[], &[]);
    assert!(wrong(c.poll(&f).unwrap()).contains("left up: node1:9478 -> node2"));
    // A healthy path (no series of its own) is no flap.
    f.up(&THROUGH, &[], &[]);
    f.firing(&THROUGH.map(|p| (p, "rdma")));
    f.probes(6.0, &[]);
    assert!(done(c.poll(&f).unwrap()).contains("4 paths through node3 down"));
}

#[test]
fn stopped_wants_host_or_refused_to_the_node_and_its_paths_still_down() {
    let f = Fake::default();
    f.probes(
        3.0,
        &[
            (("node1", "node3"), "rdma", 4.0),
            (("node2", "node3"), "rdma", 4.0),
        ],
    );
    f.up(&THROUGH, &[], &[]);
    let c = checker(Stage::Stopped, &f, Vec::new());
    f.probes(
        3.0,
        &[
            (("node1", "node3"), "host", 1.0),
            (("node2", "node3"), "rdma", 5.0),
        ],
    );
    assert!(not_yet(c.poll(&f).unwrap()).contains("node2:9478 -> node3: no probe failed host"));
    f.probes(
        3.0,
        &[
            (("node1", "node3"), "host", 1.0),
            (("node2", "node3"), "refused", 1.0),
        ],
    );
    let d = done(c.poll(&f).unwrap());
    assert!(
        d.contains("host 1 refused 0") && d.contains("host 0 refused 1"),
        "{d}"
    );
    f.up(&THROUGH[1..], &[THROUGH[0]], &[]);
    assert!(wrong(c.poll(&f).unwrap()).contains("came up: node1:9478 -> node3"));
    // A scrape that failed (the series absent) is not a path that came up.
    f.up(&THROUGH[1..], &[], &[]);
    assert!(done(c.poll(&f).unwrap()).contains("its paths still down"));
}

#[test]
fn restored_waits_for_every_path_and_the_alert_to_resolve() {
    let f = Fake::default();
    f.probes(1.0, &[]);
    f.up(&THROUGH, &[], &[]);
    f.firing(&THROUGH.map(|p| (p, "rdma")));
    let c = checker(Stage::Restored, &f, Vec::new());
    assert!(not_yet(c.poll(&f).unwrap()).contains("not up again yet"));
    // Reachable again (path_up 1) but still degraded is not restored.
    f.up(&[], &THROUGH, &[]);
    let mut states: Vec<Sample> = f.answers.borrow()[PATHS_UP].clone();
    states[1].value = 1.0;
    f.set(PATHS_UP, states.clone());
    assert!(not_yet(c.poll(&f).unwrap()).contains("not up again yet"));
    states[1].value = 2.0;
    f.set(PATHS_UP, states);
    assert!(not_yet(c.poll(&f).unwrap()).contains("still firing"));
    f.firing(&[]);
    f.pages(&[("RdmaMeshNodeRdmaBroken", "node3")]);
    assert!(not_yet(c.poll(&f).unwrap()).contains("Alertmanager still pages"));
    f.pages(&[]);
    assert!(done(c.poll(&f).unwrap()).contains("RdmaMeshPathDown resolved, nothing paged"));
    // A path between the dead node and the faulted one flapped (two faults in minutes): said,
    // not waited out; a flap elsewhere is waited for.
    let flap = |i: &str, peer: &str| {
        sample(
            &[
                ("alertname", "RdmaMeshPathFlapping"),
                ("instance", &inst(i)),
                ("peer", peer),
            ],
            1.0,
        )
    };
    f.set(PAGES, vec![flap("node2", "node3")]);
    assert!(done(c.poll(&f).unwrap()).contains(
        r#"nothing paged but ["RdmaMeshPathFlapping node3"] (down and up for each of two faults)"#
    ));
    f.set(PAGES, vec![flap("node1", "node3")]);
    assert!(not_yet(c.poll(&f).unwrap()).contains("still pages"));
}

#[test]
fn down_wants_the_paths_to_the_dead_node_down_and_one_page_for_it() {
    let f = Fake::default();
    f.probes(3.0, &[]);
    f.up(&[], &[], &[]);
    let c = checker(Stage::Down, &f, Vec::new());
    let into = [("node1", "node2"), ("node3", "node2")];
    assert!(not_yet(c.poll(&f).unwrap()).contains("not down yet"));
    // Its own paths go unscraped (absent): no flap.
    f.up(&into, &[], &[("node2", "node1"), ("node2", "node3")]);
    assert!(not_yet(c.poll(&f).unwrap()).contains("RdmaMeshNodeDown not firing yet for node2"));
    let verdict = |name: &str, node: &str| sample(&[("alertname", name), ("peer", node)], 1.0);
    f.set(NODE_VERDICTS, vec![verdict("RdmaMeshNodeDown", "node2")]);
    f.pages(&[("RdmaMeshNodeDown", "node2"), ("RdmaMeshScrapeFailing", "")]);
    assert!(not_yet(c.poll(&f).unwrap()).contains("Alertmanager pages"));
    f.pages(&[("RdmaMeshNodeDown", "node2")]);
    let d = done(c.poll(&f).unwrap());
    assert!(
        d.contains("2 paths to node2 down, the other 2 up; one root cause, RdmaMeshNodeDown for node2, the one alert Alertmanager pages"),
        "{d}"
    );
    // Its NIC's verdict, or another node's, is not its root cause; a path off it down is a flap.
    f.set(
        NODE_VERDICTS,
        vec![verdict("RdmaMeshNodeRdmaBroken", "node2")],
    );
    assert!(wrong(c.poll(&f).unwrap()).contains("RdmaMeshNodeRdmaBroken fires for node2"));
    f.set(NODE_VERDICTS, vec![verdict("RdmaMeshNodeDown", "node2")]);
    f.up(
        &[("node1", "node2"), ("node3", "node2"), ("node1", "node3")],
        &[],
        &[],
    );
    assert!(wrong(c.poll(&f).unwrap()).contains("left up: node1:9478 -> node3"));
}

#[test]
fn lossy_wants_slow_or_degraded_on_its_link_only_after_enough_probes() {
    let f = Fake::default();
    f.probes(10.0, &[]);
    f.up(&[], &[], &[]);
    let mut c = checker(Stage::Lossy, &f, Vec::new());
    c.elapsed_s = 12.3;
    let degraded =
        r#"max by (instance, peer) (max_over_time(rdma_mesh_path_state{state="degraded"}[13s]))"#;
    f.probes(12.0, &[]);
    assert!(not_yet(c.poll(&f).unwrap()).contains("about 2 of 4 probes under loss"));
    // Enough probes, and the loss never showed: wrong, said so.
    f.probes(14.0, &[]);
    assert!(wrong(c.poll(&f).unwrap()).contains("the loss did not show"));
    // Slow on one way, degraded on the other: done.
    f.probes(14.0, &[(("node2", "node3"), "slow", 2.0)]);
    f.set(
        degraded,
        vec![sample(
            &[("instance", &inst("node3")), ("peer", "node2")],
            1.0,
        )],
    );
    // The loss shows; the link's one alert has yet to fire, then to be the one page.
    assert!(
        not_yet(c.poll(&f).unwrap()).contains("RdmaMeshLinkLossy not firing yet for node2~node3")
    );
    let lossy = sample(
        &[("alertname", "RdmaMeshLinkLossy"), ("link", "node2~node3")],
        1.0,
    );
    f.set(
        r#"ALERTS{alertname="RdmaMeshLinkLossy",alertstate="firing",link="node2~node3"}"#,
        vec![lossy.clone()],
    );
    f.pages(&[("RdmaMeshPathDegraded", "node3")]);
    assert!(not_yet(c.poll(&f).unwrap()).contains(
        r#"Alertmanager pages ["RdmaMeshPathDegraded node3"], not RdmaMeshLinkLossy node2~node3 alone"#
    ));
    f.set(PAGES, vec![lossy]);
    let d = done(c.poll(&f).unwrap());
    assert!(
        d.contains("node2:9478 -> node3: about 5 probes, its prober's 2 slow")
            && d.contains("degraded yes")
            && d.contains("one alert, RdmaMeshLinkLossy node2~node3, the one Alertmanager pages"),
        "{d}"
    );
    // A path off the link degraded, or a corrupt probe: wrong.
    f.set(
        degraded,
        vec![sample(
            &[("instance", &inst("node1")), ("peer", "node2")],
            1.0,
        )],
    );
    assert!(wrong(c.poll(&f).unwrap()).contains("off the lossy link went degraded"));
    f.probes(14.0, &[(("node3", "node2"), "corrupt", 1.0)]);
    assert!(wrong(c.poll(&f).unwrap()).contains("corrupt"));
}

#[test]
fn each_stage_budget_grows_with_the_probes_it_waits_for() {
    let t = topo();
    for s in Stage::ALL {
        assert!(budget(s, &t).as_secs() > 0);
    }
    let mut slower = t.clone();
    slower.every_s *= 2;
    for s in Stage::ALL {
        assert!(budget(s, &slower) > budget(s, &t), "{s:?}");
    }
    let mut more = t.clone();
    more.loss_probes += 10;
    assert!(budget(Stage::Lossy, &more) > budget(Stage::Lossy, &t));
    assert!(budget(Stage::Blocked, &t).as_secs() >= t.alert_for_s + 4 * t.every_s);
}
