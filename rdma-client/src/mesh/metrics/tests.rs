use super::*;
use std::collections::BTreeSet;

pub(crate) fn paths() -> Vec<Path> {
    ["node2", "node3"]
        .iter()
        .map(|p| Path {
            peer: (*p).to_owned(),
            device: "rxe0".to_owned(),
            rail: "0".to_owned(),
        })
        .collect()
}

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
        at: UNIX_EPOCH + Duration::from_secs(1_700_000_000),
    }
}

/// The sample names of an exposition (what Prometheus stores).
fn sample_names(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| l.split(['{', ' ']).next().unwrap_or("").to_owned())
        .collect()
}

/// `SERIES` (what the dashboard and rules may use) is exactly what both formats expose.
#[test]
fn series_lists_exactly_what_is_exposed() {
    let m = MeshMetrics::new(&paths()).unwrap();
    m.record(&report("node2", ResultLabel::Ok)).unwrap();
    m.set_timestamps_supported("rxe0", true).unwrap();
    let want: BTreeSet<String> = SERIES.iter().map(|s| (*s).to_owned()).collect();
    assert_eq!(sample_names(&m.encode(Format::Text)), want);
    assert_eq!(sample_names(&m.encode(Format::OpenMetrics)), want);
}

#[test]
fn a_report_lands_in_its_series() {
    let m = MeshMetrics::new(&paths()).unwrap();
    m.record(&report("node2", ResultLabel::Ok)).unwrap();
    m.record(&report("node3", ResultLabel::Rdma)).unwrap();
    let t = m.encode(Format::Text);
    let l = |s: &str| assert!(t.lines().any(|x| x == s), "no line {s:?} in\n{t}");
    l("# TYPE rdma_mesh_probes_total counter");
    l("# TYPE rdma_mesh_rtt_seconds histogram");
    l(r#"rdma_mesh_probes_total{peer="node2",device="rxe0",rail="0",result="ok"} 1"#);
    l(r#"rdma_mesh_probes_total{peer="node2",device="rxe0",rail="0",result="corrupt"} 0"#);
    l(r#"rdma_mesh_probes_total{peer="node3",device="rxe0",rail="0",result="rdma"} 1"#);
    l(r#"rdma_mesh_rtt_seconds_bucket{peer="node2",device="rxe0",rail="0",le="2e-05"} 0"#);
    l(r#"rdma_mesh_rtt_seconds_bucket{peer="node2",device="rxe0",rail="0",le="5e-05"} 1"#);
    l(r#"rdma_mesh_path_up{peer="node2",device="rxe0",rail="0"} 1"#);
    l(r#"rdma_mesh_path_up{peer="node3",device="rxe0",rail="0"} 0"#);
    l(r#"rdma_mesh_path_state{peer="node3",device="rxe0",rail="0",state="down"} 1"#);
    l(r#"rdma_mesh_path_state{peer="node3",device="rxe0",rail="0",state="up"} 0"#);
    l(
        r#"rdma_mesh_last_probe_timestamp_seconds{peer="node2",device="rxe0",rail="0"} 1700000000.0"#,
    );
    l(r#"rdma_mesh_bandwidth_bytes_per_second{peer="node2",device="rxe0",rail="0"} 1250000000.0"#);
    assert!(m.encode(Format::OpenMetrics).ends_with("# EOF\n"));
    assert!(!t.contains("# EOF"));
}

/// Before its first verdict a path is `unknown`, never `down`: it has no `rdma_mesh_path_up`
/// (which `RdmaMeshPathDown` reads as `== 0`) and `state="unknown"` is 1; a probe judged without
/// a verdict (its state still `unknown`) leaves it so; the first verdict ends it.
#[test]
fn no_path_is_down_before_its_first_verdict() {
    let m = MeshMetrics::new(&paths()).unwrap();
    let no_verdict = ProbeReport {
        state: None,
        ..report("node2", ResultLabel::Host)
    };
    m.record(&no_verdict).unwrap();
    let state = |peer: &str, s: &str, v: u8| {
        format!(r#"rdma_mesh_path_state{{peer="{peer}",device="rxe0",rail="0",state="{s}"}} {v}"#)
    };
    for format in [Format::Text, Format::OpenMetrics] {
        let t = m.encode(format);
        assert!(
            !t.lines().any(|l| l.starts_with("rdma_mesh_path_up{")),
            "a path_up before any verdict:\n{t}"
        );
        for peer in ["node2", "node3"] {
            let has = |line: String| assert!(t.lines().any(|x| x == line), "no {line:?} in\n{t}");
            has(state(peer, UNKNOWN_STATE, 1));
            for s in PathState::ALL {
                has(state(peer, s.as_str(), 0));
            }
        }
    }
    // node3's first verdict: down. Now, and only for node3, path_up says so.
    m.record(&report("node3", ResultLabel::Rdma)).unwrap();
    let t = m.encode(Format::Text);
    let ups: Vec<&str> = t
        .lines()
        .filter(|l| l.starts_with("rdma_mesh_path_up{"))
        .collect();
    assert_eq!(
        ups,
        [r#"rdma_mesh_path_up{peer="node3",device="rxe0",rail="0"} 0"#],
        "{t}"
    );
    for line in [
        state("node3", UNKNOWN_STATE, 0),
        state("node3", "down", 1),
        state("node2", UNKNOWN_STATE, 1),
    ] {
        assert!(t.lines().any(|x| x == line), "no {line:?} in\n{t}");
    }
}

/// Each change the state machine reports counts once, under the state it went to; a probe that
/// changed nothing, or gave no verdict, counts nothing. Every path's counters are there from
/// the start at 0 (so `increase()` sees a path's first change).
#[test]
fn each_change_of_state_is_counted_under_where_it_went() {
    let m = MeshMetrics::new(&paths()).unwrap();
    let change = |peer: &str, to: &str, v: u8| {
        format!(
            r#"rdma_mesh_path_state_changes_total{{peer="{peer}",device="rxe0",rail="0",to="{to}"}} {v}"#
        )
    };
    let has = |t: &str, line: String| assert!(t.lines().any(|x| x == line), "no {line:?} in\n{t}");
    let t = m.encode(Format::Text);
    has(
        &t,
        "# TYPE rdma_mesh_path_state_changes_total counter".to_owned(),
    );
    for peer in ["node2", "node3"] {
        for to in PathState::ALL {
            has(&t, change(peer, to.as_str(), 0));
        }
    }
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
    m.record(&at(ResultLabel::Rdma, Some(PathState::Down), true))
        .unwrap();
    m.record(&at(ResultLabel::Slow, Some(PathState::Degraded), true))
        .unwrap();
    m.record(&at(ResultLabel::Ok, Some(PathState::Up), true))
        .unwrap();
    for format in [Format::Text, Format::OpenMetrics] {
        let t = m.encode(format);
        has(&t, change("node2", "up", 2));
        has(&t, change("node2", "down", 1));
        has(&t, change("node2", "degraded", 1));
        has(&t, change("node3", "up", 0));
    }
}

/// Cardinality is bounded: a peer, device or rail not configured adds no series.
#[test]
fn an_unknown_path_is_refused_and_adds_nothing() {
    let m = MeshMetrics::new(&paths()).unwrap();
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
            matches!(MeshMetrics::new(&p), Err(MetricsError::BadLabel { .. })),
            "{bad:?}"
        );
    }
    let long = vec![Path {
        peer: "n".repeat(MAX_LABEL_LEN + 1),
        ..paths()[0].clone()
    }];
    assert!(MeshMetrics::new(&long).is_err());
    let many: Vec<Path> = (0..=MAX_PATHS)
        .map(|i| Path {
            peer: format!("n{i}"),
            ..paths()[0].clone()
        })
        .collect();
    assert!(matches!(
        MeshMetrics::new(&many),
        Err(MetricsError::TooManyPaths(_))
    ));
}

#[test]
fn results_are_a_closed_set() {
    for r in ResultLabel::ALL {
        assert_eq!(r.as_str().parse::<ResultLabel>().unwrap(), r);
    }
    assert!("timeout".parse::<ResultLabel>().is_err());
    let names: Vec<_> = ResultLabel::ALL.iter().map(|r| r.as_str()).collect();
    assert_eq!(names, ["ok", "host", "refused", "rdma", "slow", "corrupt"]);
}

/// Without completion timestamps only the wall RTT is observed.
#[test]
fn network_rtt_and_host_delay_only_where_timestamps_exist() {
    let m = MeshMetrics::new(&paths()).unwrap();
    let r = ProbeReport {
        network_rtt: None,
        host_delay: None,
        ..report("node2", ResultLabel::Ok)
    };
    m.record(&r).unwrap();
    let t = m.encode(Format::Text);
    assert!(
        t.contains(r#"rdma_mesh_rtt_seconds_count{peer="node2",device="rxe0",rail="0"} 1"#),
        "{t}"
    );
    assert!(!t.contains("rdma_mesh_network_rtt_seconds_count{"), "{t}");
    assert!(!t.contains("rdma_mesh_host_delay_seconds_count{"), "{t}");
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
