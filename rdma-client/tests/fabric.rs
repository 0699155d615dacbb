//! The fabric check's paths that need no RDMA, through the real binary: `--plan`, the rank
//! and node-list mistakes (usage errors, exit 2), and `fabric report` on hand-made pair
//! results (the matrix, the exit code, the heat map files).

use std::collections::HashSet;
use std::io::Write as _;
use std::process::{Command, Output, Stdio};

fn client() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_rdma-client"));
    for var in [
        "SLURM_STEP_NODELIST",
        "SLURM_JOB_NODELIST",
        "SLURM_NTASKS",
        "SLURM_PROCID",
        "SLURMD_NODENAME",
    ] {
        c.env_remove(var);
    }
    c
}

fn run(c: &mut Command, stdin: &str) -> Output {
    let mut child = c
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn rdma-client");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin.as_bytes())
        .expect("write stdin");
    child.wait_with_output().expect("wait")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn plan_lists_every_ordered_pair_once_in_n_minus_1_rounds() {
    let o = run(
        client().args(["fabric", "--plan", "--hosts", "node[07,01-03]", "--json"]),
        "",
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let events: Vec<serde_json::Value> = text(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect();
    assert_eq!(events.len(), 12);
    let pairs: HashSet<(String, String)> = events
        .iter()
        .map(|e| {
            assert_eq!(e["type"], "fabric_plan");
            assert_eq!(e["rounds"], 3);
            (
                e["writer_host"].as_str().unwrap_or_default().to_owned(),
                e["target_host"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    assert_eq!(pairs.len(), 12);
    // Rank order is the sorted list, whatever the spelling.
    assert_eq!(events[0]["writer_host"], "node01");
    assert_eq!(events[0]["target_host"], "node07");
}

/// Arguments, environment, and what stderr must say.
type Mistake<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a str);

#[test]
fn rank_and_node_list_mistakes_are_usage_errors_that_say_what_is_wrong() {
    let cases: &[Mistake] = &[
        (
            &["fabric", "--plan", "--hosts", "n1"],
            &[],
            "needs at least two",
        ),
        (
            &["fabric", "--plan", "--hosts", "n[1-"],
            &[],
            "never closed",
        ),
        (
            &["fabric", "--hosts", "n[1-3]"],
            &[],
            "is not in --hosts \"n[1-3]\": give --rank N",
        ),
        (
            &["fabric", "--hosts", "n[1-3]", "--rank", "3"],
            &[],
            "rank 3 is out of range",
        ),
        (
            &["fabric"],
            &[],
            "SLURM_STEP_NODELIST nor SLURM_JOB_NODELIST",
        ),
        (
            &["fabric"],
            &[("SLURM_JOB_NODELIST", "n[1-3]"), ("SLURM_PROCID", "0")],
            "SLURM_NTASKS is not set",
        ),
        (
            &["fabric"],
            &[
                ("SLURM_STEP_NODELIST", "n[1-3]"),
                ("SLURM_NTASKS", "6"),
                ("SLURM_PROCID", "0"),
            ],
            "world size mismatch",
        ),
        (&["fabric", "--rank", "1"], &[], "--hosts"),
        (&["h", "--fabric"], &[], "--fabric"),
        (&["h", "fabric"], &[], "fabric"),
        (
            &[
                "fabric", "--hosts", "n[1-3]", "--rank", "0", "--retest", "n9",
            ],
            &[],
            "--retest \"n9\" is not in the node list",
        ),
        (
            &[
                "fabric", "--hosts", "n[1-3]", "--rank", "0", "--retest", "n1",
            ],
            &[],
            "or is this node itself",
        ),
        (
            &["fabric", "--hosts", "n[1-3]", "--rank", "0", "--rails", "0"],
            &[],
            "is not `auto` or a number of rails from 1 to 64",
        ),
        (
            &[
                "fabric", "--hosts", "n[1-3]", "--rank", "0", "--rails", "auto", "--ib-dev", "rxe0",
            ],
            &[],
            "cannot be used with",
        ),
        (&["fabric", "report", "--rails", "auto"], &[], "--rails"),
    ];
    for (args, env, want) in cases {
        let mut c = client();
        c.args(*args).envs(env.iter().copied());
        let o = run(&mut c, "");
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o.stderr));
        assert!(
            text(&o.stderr).contains(want),
            "{args:?}: {}",
            text(&o.stderr)
        );
    }
}

/// One `fabric_pair` line, as the runner prints it.
fn pair(w: usize, t: usize, verified: bool, write_us: f64) -> String {
    serde_json::json!({
        "type": "fabric_pair", "round": 0, "world": 3,
        "writer": w, "writer_host": format!("node{}", w + 1),
        "target": t, "target_host": format!("node{}", t + 1),
        "verified": verified,
        "error_kind": if verified { None } else { Some("network") },
        "error": if verified { None } else { Some("could not reach the server") },
        "write_us": verified.then_some(write_us), "waited_ms": 0,
        "lat_us": null, "bw_mbs": null,
    })
    .to_string()
}

fn fabric(fail: Option<(usize, usize)>) -> String {
    let mut lines = vec!["srun: job 42 step 0 started".to_owned()];
    for w in 0..3 {
        for t in (0..3).filter(|&t| t != w) {
            let slow = if w == 2 || t == 2 { 50.0 } else { 10.0 };
            lines.push(format!("{w}: {}", pair(w, t, fail != Some((w, t)), slow)));
        }
    }
    lines.join("\n") + "\n"
}

#[test]
fn report_flags_the_slow_node_and_draws_the_heat_map() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = dir.path().join("fabric.jsonl");
    std::fs::write(&input, fabric(None)).expect("write input");
    let (png, svg) = (dir.path().join("f.png"), dir.path().join("f.svg"));
    let o = run(
        client()
            .args(["fabric", "report"])
            .arg(&input)
            .arg("--heatmap")
            .arg(&png)
            .arg("--heatmap")
            .arg(&svg),
        "",
    );
    let out = text(&o.stdout);
    assert!(o.status.success(), "{out}{}", text(&o.stderr));
    assert!(
        out.contains("2 passed, 4 slow, 0 failed, 0 missing"),
        "{out}"
    );
    assert!(out.contains("node3 (rank 2): 4 of 4 pairs bad"), "{out}");
    let bytes = std::fs::read(&png).expect("png written");
    assert_eq!(&bytes[..4], b"\x89PNG");
    let svg = std::fs::read_to_string(&svg).expect("svg written");
    assert!(svg.contains("<svg") && svg.contains("<rect"));
}

#[test]
fn report_exits_8_when_a_pair_failed_and_2_without_pairs() {
    let o = run(
        client().args(["fabric", "report", "-", "--json"]),
        &fabric(Some((0, 1))),
    );
    assert_eq!(o.status.code(), Some(8), "{}", text(&o.stderr));
    let lines: Vec<serde_json::Value> = text(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect();
    assert_eq!(lines[0]["type"], "fabric_report");
    assert_eq!(lines[0]["failed"], 1);
    assert_eq!(lines[0]["matrix"][0][1]["status"], "fail");
    assert_eq!(lines[0]["suspects"][0]["host"], "node3");
    assert_eq!(lines[1]["type"], "error");
    assert_eq!(lines[1]["exit_code"], 8);

    let o = run(client().args(["fabric", "report"]), "not a pair\n");
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("no `fabric_pair` event"),
        "{}",
        text(&o.stderr)
    );
}

/// `pair`, on rail `index` of `rails` from `rxe{index}`.
fn on_rail(w: usize, t: usize, index: usize, rails: usize) -> String {
    let mut v: serde_json::Value = serde_json::from_str(&pair(w, t, true, 10.0)).expect("pair");
    v["rail"] = serde_json::json!({
        "index": index, "rails": rails, "device": format!("rxe{index}"),
        "addr": format!("10.0.{index}.{}", w + 1), "target_addr": format!("10.0.{index}.{}", t + 1),
    });
    v.to_string()
}

#[test]
fn a_rails_report_has_one_matrix_per_rail_and_refuses_nodes_that_disagree() {
    let mut lines = Vec::new();
    for w in 0..3 {
        for t in (0..3).filter(|&t| t != w) {
            for k in 0..2 {
                lines.push(format!("{w}: {}", on_rail(w, t, k, 2)));
            }
        }
    }
    let o = run(
        client().args(["fabric", "report", "-", "--json"]),
        &(lines.join("\n") + "\n"),
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let reports: Vec<serde_json::Value> = text(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect();
    assert_eq!(reports.len(), 2, "{}", text(&o.stdout));
    for (k, r) in reports.iter().enumerate() {
        assert_eq!(r["type"], "fabric_report");
        assert_eq!(r["rail"]["index"], k);
        assert_eq!(r["rail"]["rails"], 2);
        assert_eq!(r["rail"]["devices"][2], format!("rxe{k}"));
        assert_eq!(r["passed"], 6);
    }
    let human = run(
        client().args(["fabric", "report"]),
        &(lines.join("\n") + "\n"),
    );
    let human = text(&human.stdout);
    assert!(
        human.contains("rail 1 of 2: writers' devices node1 rxe1, node2 rxe1, node3 rxe1"),
        "{human}"
    );
    // node3 found one rail: its lines say so, and the report names it.
    let mismatched: Vec<String> = lines
        .iter()
        .filter(|l| !l.starts_with("2: "))
        .cloned()
        .chain([format!("2: {}", on_rail(2, 0, 0, 1))])
        .collect();
    let o = run(
        client().args(["fabric", "report"]),
        &(mismatched.join("\n") + "\n"),
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains(
            "the nodes disagree on the number of rails (node1, node2: 2 rails; node3: 1 rail)"
        ),
        "{}",
        text(&o.stderr)
    );
}

#[test]
fn retest_list_names_the_outliers_and_the_report_marks_the_retested() {
    // The failed pair 0 -> 1 is no outlier to re-test; the list exits 0 all the same.
    let o = run(
        client().args(["fabric", "report", "-", "--retest-list"]),
        &fabric(Some((0, 1))),
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(
        text(&o.stdout),
        "node1 node3\nnode2 node3\nnode3 node1\nnode3 node2\n"
    );
    // node3 -> node1 re-tested alone clears; node3 -> node2 stays slow.
    let mut input = fabric(None);
    for (t, write_us) in [(0, 10.0), (1, 50.0)] {
        let mut line: serde_json::Value =
            serde_json::from_str(&pair(2, t, true, write_us)).expect("pair");
        line["retest"] = true.into();
        input.push_str(&format!("{line}\n"));
    }
    let o = run(
        client().args(["fabric", "report", "-", "--retest-list"]),
        &input,
    );
    assert_eq!(text(&o.stdout), "node1 node3\nnode2 node3\n");
    let o = run(client().args(["fabric", "report", "-", "--json"]), &input);
    let report: serde_json::Value =
        serde_json::from_str(text(&o.stdout).lines().next().expect("a line")).expect("JSON");
    assert_eq!(report["slow"], 3);
    assert_eq!(
        report["retests"],
        serde_json::json!([
            {"writer": 2, "writer_host": "node3", "target": 0, "target_host": "node1", "still_bad": false},
            {"writer": 2, "writer_host": "node3", "target": 1, "target_host": "node2", "still_bad": true},
        ])
    );
    assert_eq!(report["to_retest"].as_array().map(Vec::len), Some(2));
    let o = run(client().args(["fabric", "report", "-"]), &input);
    let out = text(&o.stdout);
    assert!(
        out.contains("re-tested alone: 2 pair(s), 1 still bad, 1 cleared")
            && out.contains("node3 -> node2: slow:")
            && out.contains("(re-tested alone)"),
        "{out}"
    );
}

/// A rank that cannot write (no RDMA here, or, with RDMA, a partner that does not resolve)
/// still prints its pair, failed with the reason, and exits non-zero; `--retest` runs only
/// the pair with that partner.
#[test]
fn a_rank_whose_pairs_fail_says_why_in_each() {
    let o = run(
        client().args([
            "fabric",
            "--hosts",
            "nosuch-a.invalid,nosuch-b.invalid,nosuch-c.invalid",
            "--rank",
            "0",
            "--retest",
            "nosuch-b.invalid",
            "--json",
            "--timeout",
            "2s",
            "--pair-deadline",
            "2s",
        ]),
        "",
    );
    let lines: Vec<serde_json::Value> = text(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect();
    assert_eq!(lines.len(), 2, "{}", text(&o.stdout));
    let pair = &lines[0];
    assert_eq!(pair["type"], "fabric_pair");
    assert_eq!(pair["target_host"], "nosuch-b.invalid");
    assert_eq!(pair["verified"], false);
    assert_eq!(pair["retest"], true);
    let kind = pair["error_kind"].as_str().unwrap_or_default();
    let code = o.status.code();
    match kind {
        "rdma" => assert_eq!(code, Some(3)),
        "network" => assert_eq!(code, Some(8)),
        other => panic!("unexpected error kind {other}: {pair}"),
    }
    assert_eq!(lines[1]["type"], "error");
}

/// A report input that lies is a usage error naming the line, not an abort: `"world":200000`
/// used to end the report with exit 134 (allocation failure). Also a rank outside the world, a
/// second world, and a rank named two ways (issue 16, item 8).
#[test]
fn report_refuses_lying_lines_with_exit_2_naming_the_line() {
    let edit = |line: String, from: &str, to: &str| line.replacen(from, to, 1);
    let cases = [
        (
            edit(pair(0, 1, true, 10.0), "\"world\":3", "\"world\":200000"),
            "`world` 200000",
        ),
        (
            edit(pair(0, 1, true, 10.0), "\"target\":1", "\"target\":9"),
            "`target` 9",
        ),
        (
            edit(pair(0, 1, true, 10.0), "\"world\":3", "\"world\":4"),
            "`world` is 4 but stdin line 1 says 3",
        ),
        (
            edit(
                pair(1, 0, true, 10.0),
                "\"target_host\":\"node1\"",
                "\"target_host\":\"evil\"",
            ),
            "rank 0 is named \"evil\"",
        ),
    ];
    for (second, want) in cases {
        assert!(second.contains("fabric_pair"), "{second}");
        let input = format!("{}\n{second}\n", pair(2, 0, true, 10.0));
        let o = run(client().args(["fabric", "report", "-"]), &input);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{want}: {err}");
        assert!(
            err.contains("stdin line 2") && err.contains(want),
            "{want}: {err}"
        );
    }
}
