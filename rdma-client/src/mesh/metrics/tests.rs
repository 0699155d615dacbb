use super::*;
use std::collections::BTreeSet;

/// This node (under `tor1`) with two peers: `node2` in its ToR, `node3` under `tor2`.
pub(crate) fn paths() -> Vec<Path> {
    [("node2", "tor1"), ("node3", "tor2")]
        .iter()
        .map(|(p, t)| Path {
            peer: (*p).to_owned(),
            peer_tor: (*t).to_owned(),
            device: "rxe0".to_owned(),
            rail: "0".to_owned(),
        })
        .collect()
}

pub(crate) fn metrics() -> MeshMetrics {
    MeshMetrics::new("me", "tor1", &paths()).unwrap()
}

const T0: u64 = 1_700_000_000;

pub(crate) fn report(peer: &str, result: ResultLabel) -> ProbeReport<'_> {
    ProbeReport {
        peer,
        device: "rxe0",
        rail: "0",
        result,
        state: Some(if result == ResultLabel::Ok {
            PathState::Up
        } else {
            PathState::Down
        }),
        changed: false,
        wall_rtt: Some(Duration::from_micros(30)),
        network_rtt: Some(Duration::from_micros(12)),
        host_delay: Some(Duration::from_micros(18)),
        bandwidth: Some(1.25e9),
        at: UNIX_EPOCH + Duration::from_secs(T0),
    }
}

/// The sample lines of an exposition.
fn samples(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .collect()
}

/// The sample names of an exposition (what Prometheus stores).
fn sample_names(text: &str) -> BTreeSet<String> {
    samples(text)
        .iter()
        .map(|l| l.split(['{', ' ']).next().unwrap_or("").to_owned())
        .collect()
}

/// A path's own series in an exposition: those with a `peer` label.
fn own_series<'a>(text: &'a str, peer: &str) -> Vec<&'a str> {
    let label = format!(r#"peer="{peer}""#);
    samples(text)
        .into_iter()
        .filter(|l| l.contains(&label))
        .collect()
}

fn has(t: &str, line: &str) {
    assert!(t.lines().any(|x| x == line), "no line {line:?} in\n{t}");
}

/// `SERIES` (what the dashboard and rules may use) is exactly what both formats expose, once a
/// path is broken and a device stamps.
#[test]
fn series_lists_exactly_what_is_exposed() {
    let m = metrics();
    m.record(&report("node2", ResultLabel::Ok)).unwrap();
    m.record(&report("node3", ResultLabel::Host)).unwrap();
    m.set_timestamps_supported("rxe0", true).unwrap();
    let want: BTreeSet<String> = SERIES.iter().map(|s| (*s).to_owned()).collect();
    assert_eq!(sample_names(&m.encode(Format::Text)), want);
    assert_eq!(sample_names(&m.encode(Format::OpenMetrics)), want);
}

/// A probe lands in its destination ToR's aggregates and its scope's histograms; a healthy path
/// has no series of its own, a down one has them.
#[test]
fn a_report_lands_in_its_series() {
    let m = metrics();
    m.record(&report("node2", ResultLabel::Ok)).unwrap();
    m.record(&report("node3", ResultLabel::Rdma)).unwrap();
    let t = m.encode(Format::Text);
    let l = |s: &str| has(&t, s);
    l("# TYPE rdma_mesh_tor_probes_total counter");
    l("# TYPE rdma_mesh_rtt_seconds histogram");
    let own = r#"tor="tor1",peer_tor="tor1",scope="tor",device="rxe0",rail="0""#;
    let across = r#"tor="tor1",peer_tor="tor2",scope="across",device="rxe0",rail="0""#;
    l(&format!(
        r#"rdma_mesh_tor_probes_total{{{own},outcome="ok"}} 1"#
    ));
    l(&format!(
        r#"rdma_mesh_tor_probes_total{{{own},outcome="failed"}} 0"#
    ));
    l(&format!(
        r#"rdma_mesh_tor_probes_total{{{across},outcome="ok"}} 0"#
    ));
    l(&format!(
        r#"rdma_mesh_tor_probes_total{{{across},outcome="failed"}} 1"#
    ));
    // Only the round trips of the probes that succeeded.
    l(&format!(
        r#"rdma_mesh_tor_rtt_seconds_total{{{own}}} 0.00003"#
    ));
    l(&format!(
        r#"rdma_mesh_tor_rtt_seconds_total{{{across}}} 0.0"#
    ));
    l(r#"rdma_mesh_probe_results_total{scope="tor",device="rxe0",rail="0",result="ok"} 1"#);
    l(r#"rdma_mesh_probe_results_total{scope="across",device="rxe0",rail="0",result="rdma"} 1"#);
    l(r#"rdma_mesh_probe_results_total{scope="across",device="rxe0",rail="0",result="ok"} 0"#);
    l(r#"rdma_mesh_rtt_seconds_bucket{scope="tor",device="rxe0",rail="0",le="2e-05"} 0"#);
    l(r#"rdma_mesh_rtt_seconds_bucket{scope="tor",device="rxe0",rail="0",le="5e-05"} 1"#);
    l(r#"rdma_mesh_bandwidth_bytes_per_second{scope="tor",device="rxe0",rail="0"} 1250000000.0"#);
    l(r#"rdma_mesh_last_probe_timestamp_seconds{device="rxe0",rail="0"} 1700000000.0"#);
    l(r#"rdma_mesh_tor_peers{tor="tor1"} 1"#);
    l(r#"rdma_mesh_paths{state="up"} 1"#);
    l(r#"rdma_mesh_paths{state="down"} 1"#);
    l(r#"rdma_mesh_paths{state="unknown"} 0"#);
    let path = r#"tor="tor1",peer="node3",link="me~node3",peer_tor="tor2",scope="across",device="rxe0",rail="0""#;
    l(&format!(r#"rdma_mesh_path_up{{{path}}} 0"#));
    l(&format!(r#"rdma_mesh_path_state{{{path},state="down"}} 1"#));
    l(&format!(r#"rdma_mesh_path_state{{{path},state="up"}} 0"#));
    l(&format!(
        r#"rdma_mesh_probes_total{{{path},result="rdma"}} 1"#
    ));
    l(&format!(
        r#"rdma_mesh_probes_total{{{path},result="ok"}} 0"#
    ));
    assert_eq!(own_series(&t, "node2"), Vec::<&str>::new());
    assert_eq!(own_series(&t, "node3").len(), SERIES_PER_PATH, "{t}");
    assert!(m.encode(Format::OpenMetrics).ends_with("# EOF\n"));
    assert!(!t.contains("# EOF"));
}

/// Before its first verdict a path is `unknown`, never `down`: it has no series of its own
/// (`RdmaMeshPathDown` reads `rdma_mesh_path_up == 0`) and `rdma_mesh_paths` counts it unknown;
/// a probe judged without a verdict leaves it so; a first verdict of `down` exposes it.
#[test]
fn no_path_is_down_before_its_first_verdict() {
    let m = metrics();
    let no_verdict = ProbeReport {
        state: None,
        ..report("node2", ResultLabel::Host)
    };
    m.record(&no_verdict).unwrap();
    for format in [Format::Text, Format::OpenMetrics] {
        let t = m.encode(format);
        assert!(
            !t.contains("rdma_mesh_path_"),
            "a path's series before any verdict:\n{t}"
        );
        has(&t, r#"rdma_mesh_paths{state="unknown"} 2"#);
    }
    m.record(&report("node3", ResultLabel::Rdma)).unwrap();
    let t = m.encode(Format::Text);
    let ups: Vec<&str> = t
        .lines()
        .filter(|l| l.starts_with("rdma_mesh_path_up{"))
        .collect();
    assert_eq!(ups.len(), 1, "{t}");
    assert!(
        ups[0].contains(r#"peer="node3""#) && ups[0].ends_with(" 0"),
        "{t}"
    );
    has(&t, r#"rdma_mesh_paths{state="unknown"} 1"#);
    // node2's earlier failure (without a verdict) is in its count, should it ever be exposed.
    m.record(&report("node2", ResultLabel::Host)).unwrap();
    let t = m.encode(Format::Text);
    assert!(
        own_series(&t, "node2")
            .iter()
            .any(|l| l.contains(r#"rdma_mesh_probes_total"#) && l.contains(r#"result="host"} 2"#)),
        "{t}"
    );
}

/// A broken path's series stay while it is back up for less than `KEEP_RECOVERED` (its state
/// `up`, `rdma_mesh_path_up` 1), go at `KEEP_RECOVERED`, and come back with its counts where
/// they were when it breaks again: a counter never goes back.
#[test]
fn a_recovered_path_keeps_its_series_a_while_then_loses_them_and_counts_on() {
    let m = metrics();
    let at = |result, s: u64| ProbeReport {
        at: UNIX_EPOCH + Duration::from_secs(T0 + s),
        ..report("node3", result)
    };
    let down = r#"rdma_mesh_path_state{tor="tor1",peer="node3",link="me~node3",peer_tor="tor2",scope="across",device="rxe0",rail="0",state="down"}"#;
    let host = r#"rdma_mesh_probes_total{tor="tor1",peer="node3",link="me~node3",peer_tor="tor2",scope="across",device="rxe0",rail="0",result="host"}"#;
    m.record(&at(ResultLabel::Host, 0)).unwrap();
    m.record(&at(ResultLabel::Host, 10)).unwrap();
    m.record(&at(ResultLabel::Ok, 20)).unwrap();
    let t = m.encode(Format::Text);
    has(&t, &format!("{down} 0"));
    has(&t, &format!("{host} 2"));
    assert_eq!(own_series(&t, "node3").len(), SERIES_PER_PATH);
    // Still up, a second short of KEEP_RECOVERED (told by another path's report too).
    let keep = KEEP_RECOVERED.as_secs();
    let other = |s: u64| ProbeReport {
        at: UNIX_EPOCH + Duration::from_secs(T0 + s),
        ..report("node2", ResultLabel::Ok)
    };
    m.record(&other(20 + keep - 1)).unwrap();
    assert_eq!(
        own_series(&m.encode(Format::Text), "node3").len(),
        SERIES_PER_PATH
    );
    m.record(&other(20 + keep)).unwrap();
    let t = m.encode(Format::Text);
    assert_eq!(own_series(&t, "node3"), Vec::<&str>::new(), "{t}");
    assert!(!t.contains("rdma_mesh_path_"), "{t}");
    // Broken again: the series come back with the path's counts since the start.
    m.record(&at(ResultLabel::Host, 30 + keep)).unwrap();
    let t = m.encode(Format::Text);
    has(&t, &format!("{down} 1"));
    has(&t, &format!("{host} 3"));
}

/// Each change the state machine reports counts once; a probe that changed nothing, or gave no
/// verdict, counts nothing; the count is the path's since the start.
#[test]
fn each_change_of_state_is_counted() {
    let m = metrics();
    let changes = r#"rdma_mesh_path_state_changes_total{tor="tor1",peer="node2",link="me~node2",peer_tor="tor1",scope="tor",device="rxe0",rail="0"}"#;
    let at = |result, state: Option<PathState>, changed| ProbeReport {
        state,
        changed,
        ..report("node2", result)
    };
    // No verdict; the first verdict (unknown → up); up again; down; degraded; up.
    m.record(&at(ResultLabel::Host, None, false)).unwrap();
    m.record(&at(ResultLabel::Ok, Some(PathState::Up), true))
        .unwrap();
    m.record(&at(ResultLabel::Ok, Some(PathState::Up), false))
        .unwrap();
    assert!(!m.encode(Format::Text).contains(changes));
    m.record(&at(ResultLabel::Rdma, Some(PathState::Down), true))
        .unwrap();
    has(&m.encode(Format::Text), &format!("{changes} 2"));
    m.record(&at(ResultLabel::Slow, Some(PathState::Degraded), true))
        .unwrap();
    m.record(&at(ResultLabel::Ok, Some(PathState::Up), true))
        .unwrap();
    for format in [Format::Text, Format::OpenMetrics] {
        has(&m.encode(format), &format!("{changes} 4"));
    }
}

/// Cardinality is bounded: a peer, device or rail not configured adds no series.
#[test]
fn an_unknown_path_is_refused_and_adds_nothing() {
    let m = metrics();
    let before = m.encode(Format::Text);
    for (peer, device, rail) in [
        ("evil", "rxe0", "0"),
        ("node2", "mlx5_9", "0"),
        ("node2", "rxe0", "7"),
    ] {
        let r = ProbeReport {
            peer,
            device,
            rail,
            ..report("node2", ResultLabel::Ok)
        };
        let e = m.record(&r).unwrap_err();
        assert!(matches!(e, MetricsError::UnknownPath { .. }), "{e}");
    }
    assert_eq!(m.encode(Format::Text), before);
    assert!(m.set_timestamps_supported("mlx5_9", true).is_err());
}

#[test]
fn bad_labels_and_too_many_paths_are_refused() {
    for bad in ["", "a\"b", "a\\b", "a b", "nöde", "x\n"] {
        let p = vec![Path {
            peer: bad.to_owned(),
            ..paths()[0].clone()
        }];
        assert!(
            matches!(
                MeshMetrics::new("me", "tor1", &p),
                Err(MetricsError::BadLabel { .. })
            ),
            "{bad:?}"
        );
        let p = vec![Path {
            peer_tor: bad.to_owned(),
            ..paths()[0].clone()
        }];
        assert!(MeshMetrics::new("me", "tor1", &p).is_err(), "{bad:?}");
        assert!(MeshMetrics::new("me", bad, &paths()).is_err(), "{bad:?}");
    }
    let long = vec![Path {
        peer: "n".repeat(MAX_LABEL_LEN + 1),
        ..paths()[0].clone()
    }];
    assert!(MeshMetrics::new("me", "tor1", &long).is_err());
    let many: Vec<Path> = (0..=MAX_PATHS)
        .map(|i| Path {
            peer: format!("n{i}"),
            ..paths()[0].clone()
        })
        .collect();
    assert!(matches!(
        MeshMetrics::new("me", "tor1", &many),
        Err(MetricsError::TooManyPaths(_))
    ));
}

#[test]
fn results_are_a_closed_set() {
    for (i, r) in ResultLabel::ALL.into_iter().enumerate() {
        assert_eq!(r.as_str().parse::<ResultLabel>().unwrap(), r);
        // `Entry::counts` is indexed by the discriminant.
        assert_eq!(r as usize, i);
    }
    assert!("timeout".parse::<ResultLabel>().is_err());
    let names: Vec<_> = ResultLabel::ALL.iter().map(|r| r.as_str()).collect();
    assert_eq!(names, ["ok", "host", "refused", "rdma", "slow", "corrupt"]);
}

/// Without completion timestamps only the wall RTT is observed.
#[test]
fn network_rtt_and_host_delay_only_where_timestamps_exist() {
    let m = metrics();
    let r = ProbeReport {
        network_rtt: None,
        host_delay: None,
        ..report("node2", ResultLabel::Ok)
    };
    m.record(&r).unwrap();
    let t = m.encode(Format::Text);
    has(
        &t,
        r#"rdma_mesh_rtt_seconds_count{scope="tor",device="rxe0",rail="0"} 1"#,
    );
    assert!(!t.contains("rdma_mesh_network_rtt_seconds_count{"), "{t}");
    assert!(!t.contains("rdma_mesh_host_delay_seconds_count{"), "{t}");
}

/// A healthy prober of 10,000 nodes in 250 ToRs of 40, every path up and every kind of sample
/// taken (stamped round trips, bandwidth, within and across), exports at most 1,000 series;
/// each broken path adds `SERIES_PER_PATH`, and only while it is broken (and `KEEP_RECOVERED`).
#[test]
fn healthy_fleet_of_ten_thousand_stays_under_a_thousand_series() {
    let node = |i: usize| format!("n{i:05}");
    let tor = |i: usize| format!("tor{:03}", i / 40);
    let paths: Vec<Path> = (1..10_000)
        .map(|i| Path {
            peer: node(i),
            peer_tor: tor(i),
            device: "mlx5_0".to_owned(),
            rail: "0".to_owned(),
        })
        .collect();
    let m = MeshMetrics::new("n0", &tor(0), &paths).unwrap();
    m.set_timestamps_supported("mlx5_0", true).unwrap();
    let probe = |i: usize, result: ResultLabel, s: u64| {
        let peer = node(i);
        let r = ProbeReport {
            peer: &peer,
            device: "mlx5_0",
            at: UNIX_EPOCH + Duration::from_secs(T0 + s),
            ..report("", result)
        };
        m.record(&r).unwrap();
    };
    for i in (1..10_000).step_by(7) {
        probe(i, ResultLabel::Ok, 0);
    }
    let healthy = samples(&m.encode(Format::Text)).len();
    assert!(healthy <= 1_000, "{healthy} series when healthy");
    // Three broken paths (one within, two across): exactly their own series more.
    for i in [3, 4_000, 9_999] {
        probe(i, ResultLabel::Rdma, 10);
    }
    let broken = samples(&m.encode(Format::Text)).len();
    assert_eq!(
        broken,
        healthy + 3 * SERIES_PER_PATH,
        "{healthy} → {broken}"
    );
    for i in [3, 4_000, 9_999] {
        probe(i, ResultLabel::Ok, 20);
    }
    probe(1, ResultLabel::Ok, 20 + KEEP_RECOVERED.as_secs());
    assert_eq!(samples(&m.encode(Format::Text)).len(), healthy);
}

#[test]
fn buckets_span_a_microsecond_to_a_second() {
    assert_eq!(RTT_BUCKETS[0], 1e-6);
    assert_eq!(RTT_BUCKETS[RTT_BUCKETS.len() - 1], 1.0);
    assert!(RTT_BUCKETS.windows(2).all(|w| w[0] < w[1]));
}

#[test]
fn each_cause_is_its_result_label_and_unknown_leaves_the_state() {
    use crate::mesh::cause::Cause;
    use crate::mesh::state::PairState;
    assert_eq!(ResultLabel::from(None), ResultLabel::Ok);
    for c in Cause::ALL {
        assert_eq!(ResultLabel::from(Some(c)).as_str(), c.as_str());
    }
    assert_eq!(PathState::of(PairState::Unknown), None);
    assert_eq!(UNKNOWN_STATE, PairState::Unknown.as_str());
    for s in [PairState::Up, PairState::Degraded, PairState::Down] {
        assert_eq!(PathState::of(s).map(PathState::as_str), Some(s.as_str()));
    }
}

/// An `up` path's first failed probe exposes its series while it is still `up`, so that the
/// failures that take it down are increases Prometheus sees (a counter first seen at 3 would
/// give `RdmaMeshPathDown` no cause); a slow probe does too.
#[test]
fn an_up_path_shows_from_its_first_failure_not_only_once_down() {
    let m = metrics();
    let probes = r#"rdma_mesh_probes_total{tor="tor1",peer="node2",link="me~node2",peer_tor="tor1",scope="tor",device="rxe0",rail="0",result="rdma"}"#;
    m.record(&report("node2", ResultLabel::Ok)).unwrap();
    assert_eq!(
        own_series(&m.encode(Format::Text), "node2"),
        Vec::<&str>::new()
    );
    let still_up = ProbeReport {
        state: Some(PathState::Up),
        ..report("node2", ResultLabel::Rdma)
    };
    m.record(&still_up).unwrap();
    let t = m.encode(Format::Text);
    has(&t, &format!("{probes} 1"));
    assert_eq!(own_series(&t, "node2").len(), SERIES_PER_PATH);
    m.record(&still_up).unwrap();
    m.record(&report("node2", ResultLabel::Rdma)).unwrap();
    has(&m.encode(Format::Text), &format!("{probes} 3"));
    let slow = ProbeReport {
        state: Some(PathState::Up),
        ..report("node3", ResultLabel::Slow)
    };
    m.record(&slow).unwrap();
    assert_eq!(
        own_series(&m.encode(Format::Text), "node3").len(),
        SERIES_PER_PATH
    );
}

/// A link's two probers label its paths alike (`link`, the two ends in name order), whichever
/// end sorts first, so that one rule makes one alert of both directions.
#[test]
fn both_ends_of_a_link_name_it_alike() {
    let path = |peer: &str| Path {
        peer: peer.to_owned(),
        peer_tor: "tor1".to_owned(),
        device: "rxe0".to_owned(),
        rail: "0".to_owned(),
    };
    let mut links = Vec::new();
    for (me, peer) in [("node7", "node10"), ("node10", "node7")] {
        let m = MeshMetrics::new(me, "tor1", &[path(peer)]).unwrap();
        m.record(&report(peer, ResultLabel::Slow)).unwrap();
        let t = m.encode(Format::Text);
        let up = own_series(&t, peer)
            .into_iter()
            .find(|l| l.starts_with("rdma_mesh_path_up{"))
            .map(str::to_owned);
        links.push(up.unwrap_or_else(|| panic!("no path_up of {peer} in\n{t}")));
    }
    for l in &links {
        assert!(l.contains(r#"link="node10~node7""#), "{l}");
    }
}
