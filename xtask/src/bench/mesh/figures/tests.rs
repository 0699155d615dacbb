use super::*;

pub fn setting() -> Setting {
    Setting {
        every: Duration::from_secs(1),
        cycles: 3,
        nodes: vec!["10.0.0.1".into(), "10.0.0.2".into()],
        no_reuse: false,
    }
}

fn started(rank: usize) -> String {
    format!(
        r#"{{"type":"mesh_started","node":"10.0.0.{}","rank":{rank},"hosts":["10.0.0.1","10.0.0.2"],"fan_out":1,"every_ms":1000,"cycle":1,"device":"rxe0","timestamps":false,"timestamps_why":"wall time","cycles":3}}"#,
        rank + 1
    )
}

fn probe(peer: usize, interval: u64, outcome: &str) -> String {
    let cause = if outcome == "failed" {
        r#","cause":"host""#
    } else {
        ""
    };
    format!(
        r#"{{"type":"mesh_probe","interval":{interval},"peer":"10.0.0.{}","peer_rank":{peer},"device":"rxe0","rail":0,"outcome":"{outcome}"{cause},"wall_ns":400000,"state":"up"}}"#,
        peer + 1
    )
}

fn stopped(why: &str, probes: u64, skipped: u64) -> String {
    format!(
        r#"{{"type":"mesh_stopped","why":"{why}","intervals":3,"probes":{probes},"failed":0,"skipped":{skipped}}}"#
    )
}

/// Rank `rank`'s healthy run: started at 10 ms, each probe's result `took` ms after its
/// fire time (the interval, and the phase: rank/2 of the second), stopped 5 ms after the
/// last.
pub fn run(rank: usize, took: [f64; 3]) -> (String, Stamps) {
    let phase = 500.0 * rank as f64;
    let peer = 1 - rank;
    let mut lines = vec![started(rank)];
    let mut at = vec![10.0];
    for (t, ms) in took.iter().enumerate() {
        // The first probe's write opens the path's session; the others reuse it.
        let line = probe(peer, t as u64, "ok");
        lines.push(if t == 0 {
            line
        } else {
            line.replacen(r#""state""#, r#""reused":true,"state""#, 1)
        });
        at.push(10.0 + t as f64 * 1000.0 + phase + ms);
    }
    lines.push(stopped("cycles", 3, 0));
    at.push(at.last().copied().unwrap_or(0.0) + 5.0);
    (lines.join("\n") + "\n", Stamps { line_ms: at })
}

#[test]
fn a_healthy_run_gives_its_rate_and_each_probes_time() {
    for rank in [0, 1] {
        let (out, stamps) = run(rank, [250.0, 300.0, 400.0]);
        let p = prober(&out, &stamps, rank, &setting()).unwrap();
        let r = &p.run;
        assert_eq!((r.ok, r.failed, r.skipped, r.errors), (3, 0, 0, 0));
        assert_eq!(r.reused, 2);
        assert_eq!((r.intervals, r.stopped.as_str()), (3, "cycles"));
        // From 10 ms to 2000 + phase + 400 + 5 ms after it.
        let wall = (2000.0 + 500.0 * rank as f64 + 400.0 + 5.0) / 1000.0;
        assert!((r.wall_s - wall).abs() < 1e-9, "{r:?}");
        assert!((r.probes_per_s - 3.0 / wall).abs() < 1e-9, "{r:?}");
        assert!((r.probe_ms_median - 300.0).abs() < 1e-9, "{r:?}");
        assert!((r.probe_ms_max - 400.0).abs() < 1e-9, "{r:?}");
        assert_eq!(p.ran_to, BTreeMap::from([(1 - rank, 3)]));
    }
}

#[test]
fn failed_skipped_and_the_probers_own_errors_are_counted_apart() {
    let (out, mut stamps) = run(0, [100.0, 200.0, 400.0]);
    let mut lines: Vec<String> = out.lines().map(str::to_owned).collect();
    lines[2] = probe(1, 1, "failed");
    lines.insert(3, probe(1, 2, "skipped"));
    lines.insert(4, probe(1, 2, "error"));
    // Judged slow: it went through its steps, so its time counts.
    lines[5] = lines[5].replace(r#""outcome":"ok""#, r#""outcome":"failed","cause":"slow""#);
    stamps.line_ms.insert(3, 2100.0);
    stamps.line_ms.insert(4, 2100.0);
    // The stopped line counts the skipped intervals a stall dropped too.
    let last = lines.len() - 1;
    lines[last] = stopped("cycles", 3, 4);
    let p = prober(&lines.join("\n"), &stamps, 0, &setting()).unwrap();
    assert_eq!(
        (p.run.ok, p.run.failed, p.run.skipped, p.run.errors),
        (1, 2, 4, 1)
    );
    assert_eq!(
        p.ran_to,
        BTreeMap::from([(1, 3)]),
        "ok and failed reached it"
    );
    // The ok one took 100 ms, the slow one 400: the median between them; the one that
    // failed to reach its host is no probe's time.
    assert!((p.run.probe_ms_median - 250.0).abs() < 1e-9, "{:?}", p.run);
    assert!((p.run.probe_ms_max - 400.0).abs() < 1e-9, "{:?}", p.run);
}

#[test]
fn a_broken_run_is_an_error_that_says_what() {
    let bad = |out: &str, stamps: &Stamps, rank: usize| {
        prober(out, stamps, rank, &setting()).unwrap_err()
    };
    let (out, stamps) = run(0, [100.0; 3]);
    // Output cut: a stamp per line or nothing.
    let cut = Stamps {
        line_ms: stamps.line_ms[1..].to_vec(),
    };
    assert!(bad(&out, &cut, 0).contains("4 stamps"));
    // Killed before it stopped.
    let lines: Vec<&str> = out.lines().collect();
    let short = Stamps {
        line_ms: stamps.line_ms[..4].to_vec(),
    };
    assert!(bad(&lines[..4].join("\n"), &short, 0).contains("no mesh_stopped"));
    // Never started.
    let headless = Stamps {
        line_ms: stamps.line_ms[1..].to_vec(),
    };
    assert!(bad(&lines[1..].join("\n"), &headless, 0).contains("before mesh_started"));
    // A line that is no event of the client's.
    let mut garbled: Vec<String> = lines.iter().map(|l| (*l).to_owned()).collect();
    garbled[2] = r#"{"type":"mesh_probe","interval":1}"#.into();
    assert!(bad(&garbled.join("\n"), &stamps, 0).starts_with("line 3:"));
    garbled[2] = "not json".into();
    assert!(bad(&garbled.join("\n"), &stamps, 0).starts_with("line 3:"));
    // Stopped by a signal, not its cycles.
    let mut signalled: Vec<String> = lines.iter().map(|l| (*l).to_owned()).collect();
    signalled[4] = stopped("signal", 3, 0);
    assert!(bad(&signalled.join("\n"), &stamps, 0).contains("\"signal\""));
    // The counts of mesh_stopped and of the events disagree: a line lost.
    signalled[4] = stopped("cycles", 5, 0);
    assert!(bad(&signalled.join("\n"), &stamps, 0).contains("lines lost"));
    // Another rank, another node list, another interval.
    assert!(bad(&out, &stamps, 1).contains("rank 0"));
    let other = Setting {
        nodes: vec!["a".into(), "b".into()],
        ..setting()
    };
    assert!(prober(&out, &stamps, 0, &other).is_err());
    let slower = Setting {
        every: Duration::from_secs(2),
        ..setting()
    };
    assert!(prober(&out, &stamps, 0, &slower).is_err());
    // No probe ok: no rate, not a rate of zero.
    let mut failing: Vec<String> = lines.iter().map(|l| (*l).to_owned()).collect();
    for (i, line) in failing.iter_mut().enumerate().take(4).skip(1) {
        *line = probe(1, i as u64 - 1, "failed");
    }
    assert!(bad(&failing.join("\n"), &stamps, 0).contains("no probe was ok"));
    // The prober's own error event.
    let mut died: Vec<String> = lines[..2].iter().map(|l| (*l).to_owned()).collect();
    died.push(r#"{"type":"error","kind":"rdma","exit_code":3,"message":"no device"}"#.into());
    let three = Stamps {
        line_ms: stamps.line_ms[..3].to_vec(),
    };
    assert!(bad(&died.join("\n"), &three, 0).contains("no device"));
}

#[test]
fn results_before_their_fire_time_do_not_fit_the_schedule() {
    // Rank 1 fires half an interval late: a result 300 ms into the interval is 200 ms
    // before its fire time (rank 0's stamps read as rank 1's, say).
    let (out, stamps) = run(0, [300.0; 3]);
    let out = out.replace(r#""rank":0"#, r#""rank":1"#);
    let e = prober(&out, &stamps, 1, &setting()).unwrap_err();
    assert!(e.contains("before its fire time"), "{e}");
    // Within the reader's slack it is taken as no time at all.
    let (out, stamps) = run(0, [-50.0, 10.0, 20.0]);
    let p = prober(&out, &stamps, 0, &setting()).unwrap();
    assert!((p.run.probe_ms_median - 10.0).abs() < 1e-9);
}

pub fn usage(pid: u32, cpu_ms: f64, rss: Option<u64>) -> Usage {
    Usage {
        pid,
        cpu_ms,
        rss_kb: rss,
        hwm_kb: rss.map(|r| r + 100),
    }
}

#[test]
fn a_servers_cost_is_its_cpu_over_the_probes_it_served() {
    let s = server(
        &usage(7, 1000.0, Some(8000)),
        &usage(7, 1150.0, Some(8200)),
        30,
        Some(60),
    )
    .unwrap();
    assert_eq!(s.cpu_ms, 150.0);
    assert_eq!(s.cpu_per_probe_ms, 5.0);
    assert_eq!((s.rss_before_kb, s.rss_kb, s.hwm_kb), (8000, 8200, 8300));
    assert_eq!((s.served, s.sessions), (30, Some(60)));
    // Broken readings: another process, time going back, no probe, no memory.
    let e = |b: Usage, a: Usage, n: u64| server(&b, &a, n, None).unwrap_err();
    assert!(e(usage(7, 1.0, Some(1)), usage(8, 2.0, Some(1)), 3).contains("restarted"));
    assert!(e(usage(7, 9.0, Some(1)), usage(7, 2.0, Some(1)), 3).contains("CPU went"));
    assert!(e(usage(7, 1.0, Some(1)), usage(7, f64::NAN, Some(1)), 3).contains("CPU went"));
    assert!(e(usage(7, 1.0, Some(1)), usage(7, 2.0, Some(1)), 0).contains("no probe"));
    assert!(e(usage(7, 1.0, None), usage(7, 2.0, Some(1)), 3).contains("before"));
    assert!(e(usage(7, 1.0, Some(1)), usage(7, 2.0, None), 3).contains("after"));
}

pub fn mesh() -> Mesh {
    let nodes = (0..2)
        .map(|rank| {
            let (out, stamps) = run(rank, [250.0, 300.0, 400.0]);
            MeshNode {
                rank,
                node: setting().nodes[rank].clone(),
                prober: prober(&out, &stamps, rank, &setting()).unwrap().run,
                server: server(
                    &usage(7, 1000.0, Some(8000)),
                    &usage(7, 1150.0, Some(9216)),
                    3,
                    None,
                )
                .unwrap(),
            }
        })
        .collect();
    Mesh {
        every_s: 1.0,
        cycles: 3,
        no_reuse: false,
        nodes,
    }
}

#[test]
fn the_csv_has_a_row_per_node_and_the_report_every_figure() {
    let m = mesh();
    let c = csv(&m);
    let lines: Vec<&str> = c.lines().collect();
    assert_eq!(lines.len(), 3);
    let cols = lines[0].split(',').count();
    assert!(lines.iter().all(|l| l.split(',').count() == cols), "{c}");
    assert!(lines[1].starts_with("0,10.0.0.1,1,3,3,0,0,0,"), "{c}");
    assert!(lines[2].starts_with("1,10.0.0.2,"), "{c}");
    let r = render(&m);
    assert!(r.contains("rank 0 (10.0.0.1): 1.25 probes/s"), "{r}");
    assert!(r.contains("(3 ok, 2 of them on a kept session,"), "{r}");
    assert!(r.contains("the write: on the path's kept session"), "{r}");
    let fresh = render(&Mesh {
        no_reuse: true,
        ..m.clone()
    });
    assert!(
        fresh.contains("a new session every probe (--no-reuse)"),
        "{fresh}"
    );
    assert!(lines[1].ends_with(",2"), "{c}");
    assert!(
        r.contains(
            "one probe 300 ms median, 400 ms most (one at a time: at most 3.33/s to a peer)"
        ),
        "{r}"
    );
    assert!(r.contains("50.00 ms CPU per probe served"), "{r}");
    assert!(r.contains("VmRSS 9.0 MiB"), "{r}");
    // results.json keeps it (to the last bit or so: serde_json's float parsing).
    let back: Mesh = serde_json::from_str(&serde_json::to_string(&m).unwrap()).unwrap();
    assert_eq!(
        (back.nodes.len(), &back.nodes[1].server),
        (2, &m.nodes[1].server)
    );
    assert!((back.nodes[0].prober.probes_per_s - m.nodes[0].prober.probes_per_s).abs() < 1e-12);
}
