use super::*;

pub const TH: Thresholds = Thresholds {
    lat_factor: 2.0,
    bw_fraction: 0.5,
};

/// A verified pair of a 3-node check, with the given latency and bandwidth.
pub fn ok(w: usize, t: usize, lat: f64, bw: Option<f64>) -> PairResult {
    PairResult {
        round: 0,
        world: 3,
        writer: w,
        writer_host: format!("node{}", w + 1),
        target: t,
        target_host: format!("node{}", t + 1),
        verified: true,
        error_kind: None,
        error: None,
        write_us: Some(lat),
        waited_ms: 0,
        lat_us: None,
        bw_mbs: bw,
        retest: false,
        rail: None,
    }
}

fn failed(w: usize, t: usize) -> PairResult {
    PairResult {
        verified: false,
        error_kind: Some(Exit::Network),
        error: Some("could not reach the server".into()),
        write_us: None,
        ..ok(w, t, 0.0, None)
    }
}

/// All six pairs of three nodes; pairs touching `slow` take `factor` times longer.
pub fn three(slow: Option<usize>, factor: f64) -> Vec<PairResult> {
    let mut v = Vec::new();
    for w in 0..3 {
        for t in 0..3 {
            if w != t {
                let s = if slow == Some(w) || slow == Some(t) {
                    factor
                } else {
                    1.0
                };
                v.push(ok(w, t, 10.0 * s, Some(1000.0 / s)));
            }
        }
    }
    v
}

#[test]
fn a_healthy_fabric_passes() {
    let r = analyze(&three(None, 1.0), 0, TH).unwrap();
    assert_eq!(
        (r.pairs, r.passed, r.slow, r.failed, r.missing),
        (6, 6, 0, 0, 0)
    );
    assert!(r.bad_pairs.is_empty() && r.suspects.is_empty());
    assert!(!r.any_failed());
    assert_eq!(r.hosts, ["node1", "node2", "node3"]);
    assert_eq!(r.latency_source, LatencySource::Write);
    assert!(r.matrix[1][1].is_none());
}

#[test]
fn one_slow_node_is_flagged_though_it_sits_in_most_pairs() {
    let r = analyze(&three(Some(2), 4.0), 0, TH).unwrap();
    // The plain median is dragged up (4 of 6 pairs are slow); the reference is not.
    assert_eq!(r.lat_median_us, Some(40.0));
    assert_eq!(r.lat_reference_us, Some(10.0));
    assert_eq!(r.slow, 4);
    let bad: Vec<(usize, usize)> = r.bad_pairs.iter().map(|b| (b.writer, b.target)).collect();
    assert_eq!(bad, [(0, 2), (1, 2), (2, 0), (2, 1)]);
    assert_eq!(r.suspects.len(), 1);
    assert_eq!(
        (
            r.suspects[0].host.as_str(),
            r.suspects[0].bad,
            r.suspects[0].of
        ),
        ("node3", 4, 4)
    );
    assert!(!r.any_failed(), "slow is reported, not failed");
    let Cell::Slow { why, .. } = &r.bad_pairs[0].cell else {
        panic!()
    };
    assert!(
        why.contains("latency 40.0 us > 2 x 10.0 us") && why.contains("bandwidth"),
        "{why}"
    );
    // Just under the factor is no outlier.
    let r = analyze(&three(Some(2), 1.9), 0, TH).unwrap();
    assert_eq!(r.slow, 0);
}

#[test]
fn failed_and_missing_pairs_fail_the_check_and_name_the_node() {
    let mut v: Vec<PairResult> = three(None, 1.0)
        .into_iter()
        .filter(|p| p.writer != 1) // node2's task died: its writes are missing
        .collect();
    v.retain(|p| p.target != 1);
    v.push(failed(0, 1));
    v.push(failed(2, 1));
    let r = analyze(&v, 3, TH).unwrap();
    assert_eq!(
        (r.passed, r.failed, r.missing, r.skipped_lines),
        (2, 2, 2, 3)
    );
    assert!(r.any_failed());
    assert_eq!(r.suspects.iter().map(|s| s.rank).collect::<Vec<_>>(), [1]);
    assert!(matches!(r.matrix[1][0], Some(Cell::Missing)));
    assert!(matches!(&r.matrix[0][1], Some(Cell::Fail { kind, .. }) if *kind == Exit::Network));
}

#[test]
fn the_suspect_is_the_node_that_explains_the_bad_pairs() {
    // node3 slow, and the link node1 -> node2 broken: only node3 is named.
    let mut v = three(Some(2), 4.0);
    v.push(failed(0, 1));
    let r = analyze(&v, 0, TH).unwrap();
    assert_eq!((r.slow, r.failed), (4, 1));
    assert_eq!(r.suspects.iter().map(|s| s.rank).collect::<Vec<_>>(), [2]);
    // Two nodes cannot be told apart.
    let two: Vec<PairResult> = [failed(0, 1), failed(1, 0)]
        .into_iter()
        .map(|p| PairResult { world: 2, ..p })
        .collect();
    let r = analyze(&two, 0, TH).unwrap();
    assert_eq!(
        r.suspects.iter().map(|s| s.rank).collect::<Vec<_>>(),
        [0, 1]
    );
    // One bad link among healthy nodes names nobody.
    let r = analyze(&[three(None, 1.0), vec![failed(0, 1)]].concat(), 0, TH).unwrap();
    assert!(r.suspects.is_empty() && r.failed == 1);
}

#[test]
fn a_later_line_replaces_an_earlier_one() {
    let mut v = vec![failed(0, 1)];
    v.extend(three(None, 1.0));
    let r = analyze(&v, 0, TH).unwrap();
    assert_eq!(r.failed, 0);
}

#[test]
fn a_retest_alone_is_the_pairs_verdict() {
    let mut v = three(Some(2), 4.0);
    // Re-tested alone: 2 -> 0 was fine after all, 2 -> 1 stays slow.
    v.push(PairResult {
        retest: true,
        ..ok(2, 0, 10.0, Some(1000.0))
    });
    v.push(PairResult {
        retest: true,
        ..ok(2, 1, 40.0, Some(250.0))
    });
    let r = analyze(&v, 0, TH).unwrap();
    assert_eq!(r.slow, 3);
    let retested: Vec<(usize, usize)> = r
        .bad_pairs
        .iter()
        .filter(|b| b.retested)
        .map(|b| (b.writer, b.target))
        .collect();
    assert_eq!(retested, [(2, 1)]);
    let outcome: Vec<(usize, usize, bool)> = r
        .retests
        .iter()
        .map(|x| (x.pair.writer, x.pair.target, x.still_bad))
        .collect();
    assert_eq!(outcome, [(2, 0, false), (2, 1, true)]);
    // Only the outliers not re-tested yet are left to re-test.
    let left: Vec<(usize, usize)> = r.to_retest.iter().map(|p| (p.writer, p.target)).collect();
    assert_eq!(left, [(0, 2), (1, 2)]);
    assert!(text_has_retest_summary(&r));
    let text = super::super::table::render(&r);
    assert!(text.contains("node3 -> node2: slow: latency 40.0 us > 2 x 10.0 us; bandwidth 250.0 MB/s < 0.5 x 1000.0 MB/s (re-tested alone)"), "{text}");
}

#[test]
fn a_retest_wins_whatever_the_order_of_the_lines() {
    let retest = PairResult {
        retest: true,
        ..ok(2, 0, 10.0, Some(1000.0))
    };
    let mut after = three(Some(2), 4.0);
    after.push(retest.clone());
    let mut before = vec![retest];
    before.extend(three(Some(2), 4.0));
    for (order, v) in [("re-test last", after), ("re-test first", before)] {
        let r = analyze(&v, 0, TH).unwrap();
        let outcome: Vec<(usize, usize, bool)> = r
            .retests
            .iter()
            .map(|x| (x.pair.writer, x.pair.target, x.still_bad))
            .collect();
        assert_eq!(outcome, [(2, 0, false)], "{order}");
        assert_eq!(r.slow, 3, "{order}: 2 -> 0 cleared");
    }
}

fn text_has_retest_summary(r: &Report) -> bool {
    let text = super::super::table::render(r);
    text.contains("re-tested alone: 2 pair(s), 1 still bad, 1 cleared")
        && text.contains("  node3 -> node1: cleared")
        && text.contains("not re-tested yet: 2 slow pair(s) (--retest-list)")
}

#[test]
fn failed_pairs_are_not_outliers_to_retest() {
    let mut v = three(Some(2), 4.0);
    v.push(failed(0, 1));
    let r = analyze(&v, 0, TH).unwrap();
    assert_eq!(r.to_retest.len(), 4);
    assert!(r.to_retest.iter().all(|p| p.writer == 2 || p.target == 2));
    assert!(r.retests.is_empty());
    let r = analyze(&three(None, 1.0), 0, TH).unwrap();
    assert!(r.to_retest.is_empty());
}

#[test]
fn inputs_are_read_with_srun_labels_and_chatter() {
    let line = serde_json::to_string(&crate::output::Event::FabricPair(std::borrow::Cow::Owned(
        ok(0, 1, 5.0, None),
    )))
    .unwrap();
    assert!(line.contains("\"type\":\"fabric_pair\""), "{line}");
    let text =
        format!("{line}\n1: {line}\nnode02: {line}\nsrun: job 7 queued\n{{\"type\":\"error\"}}\n");
    let (pairs, skipped) = read(text.as_bytes(), "x", &mut Default::default()).unwrap();
    assert_eq!((pairs.len(), skipped), (3, 2));
    assert_eq!(pairs[0], ok(0, 1, 5.0, None));
    let bad = read(
        &b"{\"type\":\"fabric_pair\",\"round\":\"x\"}\n"[..],
        "f.jsonl",
        &mut Default::default(),
    )
    .unwrap_err();
    assert!(bad.to_string().contains("f.jsonl line 1"), "{bad}");
}

/// The line that breaks a report is named, before anything is sized by it (issue 16,
/// item 8: `"world":200000` used to abort the report on an allocation failure).
#[test]
fn a_line_out_of_range_or_contradicting_another_is_named() {
    let line = |p: &PairResult| {
        serde_json::to_string(&crate::output::Event::FabricPair(
            std::borrow::Cow::Borrowed(p),
        ))
        .unwrap()
    };
    let mut huge = ok(0, 1, 5.0, None);
    huge.world = 200_000;
    let text = format!("srun: chatter\n{}\n", line(&huge));
    let e = read(text.as_bytes(), "f.jsonl", &mut Default::default()).unwrap_err();
    assert!(e.to_string().contains("f.jsonl line 2"), "{e}");
    assert!(e.to_string().contains("`world` 200000"), "{e}");
    assert!(matches!(
        analyze(&[huge], 0, TH),
        Err(ReportError::BadWorld { world: 200_000 })
    ));
    // Across inputs: the second file's rank 0 has another name than the first file's.
    let mut seen = validate::Consistency::default();
    read(line(&ok(0, 1, 5.0, None)).as_bytes(), "a", &mut seen).unwrap();
    let mut renamed = ok(1, 0, 5.0, None);
    renamed.target_host = "other".into();
    let text = format!("{}\n{}\n", line(&ok(1, 2, 5.0, None)), line(&renamed));
    let e = read(text.as_bytes(), "b", &mut seen).unwrap_err();
    assert!(e.to_string().contains("b line 2"), "{e}");
    assert!(e.to_string().contains("a line 1 names it \"node1\""), "{e}");
}

/// A line longer than MAX_LINE is skipped without being held; the lines after it count.
#[test]
fn an_endless_line_is_skipped_unbuffered() {
    let good = serde_json::to_string(&crate::output::Event::FabricPair(
        std::borrow::Cow::Borrowed(&ok(0, 1, 5.0, None)),
    ))
    .unwrap();
    let text = format!(
        "{}\n{good}\n{}",
        "x".repeat(3 * MAX_LINE),
        "y".repeat(MAX_LINE + 1)
    );
    let (pairs, skipped) = read(text.as_bytes(), "x", &mut Default::default()).unwrap();
    assert_eq!((pairs.len(), skipped), (1, 2));
}

#[test]
fn inputs_that_cannot_be_merged_are_refused() {
    assert!(matches!(
        analyze(&[], 4, TH),
        Err(ReportError::NoPairs { skipped: 4 })
    ));
    let mut four = ok(0, 1, 1.0, None);
    four.world = 4;
    let e = analyze(&[ok(0, 1, 1.0, None), four], 0, TH).unwrap_err();
    assert!(matches!(e, ReportError::MixedWorlds { a: 3, b: 4 }));
    let e = analyze(&[ok(0, 3, 1.0, None)], 0, TH).unwrap_err();
    assert!(matches!(e, ReportError::BadRank { rank: 3, world: 3 }));
}

#[test]
fn medians() {
    assert_eq!(median(vec![]), None);
    assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
    assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), Some(2.5));
    assert_eq!(median(vec![f64::NAN, 1.0]), Some(1.0));
}
