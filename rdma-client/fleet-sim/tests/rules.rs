//! The shipped rules (deploy/prometheus/rdma-mesh.rules.yml), run by promtool over what 40
//! simulated probers in 5 ToRs of 8 export: scraped every minute for 25 minutes, a dead host, a
//! broken NIC, a ToR cut off and a lossy link from minute 5. Healthy, nothing fires; then
//! exactly one verdict per fault fires, naming its node, ToR or link, and no alert fires off
//! the faults. (promtool's unit tests load at most 10,000 samples a query: 40 probers' worth.)
//! Never skipped: without promtool it fails naming the deps group.

use rdma_fleet_sim::{Fault, Fleet, PromtoolInput, Shape};
use std::path::{Path, PathBuf};
use std::process::Command;

const PER_TOR: usize = 8;
const DEAD: usize = PER_TOR + 3; // tor001
const NIC: usize = 2 * PER_TOR + 5; // tor002
const CUT: usize = 3; // tor003
const LOSSY: [usize; 2] = [4 * PER_TOR + 1, 4 * PER_TOR + 2]; // tor004
const MINUTES: u64 = 25;
const FAULT_MINUTE: u64 = 5;

fn shipped_rules() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/prometheus/rdma-mesh.rules.yml")
}

/// The fleet's scrapes, one a minute.
fn scrapes() -> (Fleet, PromtoolInput) {
    let mut f = Fleet::new(Shape {
        tors: 5,
        per_tor: PER_TOR,
        fan_out: 8,
    })
    .expect("a fleet");
    for n in 0..f.names.len() {
        f.watch(n).expect("metrics");
    }
    let per_minute = 60 / f.every().as_secs();
    let at = FAULT_MINUTE * per_minute;
    for fault in [
        Fault::DeadHost(DEAD),
        Fault::BrokenNic(NIC),
        Fault::TorCut(CUT),
        Fault::Loss {
            a: LOSSY[0],
            b: LOSSY[1],
            stall: 0.18,
        },
    ] {
        f.inject(at, fault);
    }
    let mut input = PromtoolInput::default();
    for _ in 0..=MINUTES {
        input.add(f.scrape());
        for _ in 0..per_minute {
            f.step().expect("a step");
        }
    }
    (f, input)
}

/// A test file for promtool over `rules`.
fn test_file(f: &Fleet, input: &PromtoolInput, rules: &Path) -> String {
    let n = |i: usize| f.names[i].as_str();
    let verdicts =
        r#"ALERTS{alertstate="firing",alertname=~"RdmaMeshNode.*|RdmaMeshTor.*|RdmaMeshLink.*"}"#;
    let link = format!("{}~{}", n(LOSSY[0]), n(LOSSY[1]));
    let off_the_faults = format!(
        r#"ALERTS{{alertstate="firing",alertname!~"RdmaMeshNode.*|RdmaMeshTor.*|RdmaMeshLink.*",peer!~"{d}|{c}",instance!~"{d}:9478|{c}:9478",tor!="tor003",peer_tor!="tor003",link!="{link}"}}"#,
        d = n(DEAD),
        c = n(NIC)
    );
    format!(
        r#"rule_files:
  - {rules}
evaluation_interval: 1m
tests:
  - interval: 1m
{input}
    promql_expr_test:
      - expr: 'ALERTS{{alertstate="firing"}}'
        eval_time: 4m
        exp_samples: []
      - expr: '{verdicts}'
        eval_time: 24m
        exp_samples:
          - labels: 'ALERTS{{alertname="RdmaMeshNodeDown",alertstate="firing",cause="host",instance="{dead}:9478",job="rdma-mesh",peer="{dead}",peer_tor="tor001",severity="critical"}}'
            value: 1
          - labels: 'ALERTS{{alertname="RdmaMeshNodeRdmaBroken",alertstate="firing",cause="rdma",instance="{nic}:9478",job="rdma-mesh",peer="{nic}",peer_tor="tor002",severity="critical"}}'
            value: 1
          - labels: 'ALERTS{{alertname="RdmaMeshTorUnreachable",alertstate="firing",job="rdma-mesh",peer_tor="tor003",severity="critical",tor="tor003"}}'
            value: 1
          - labels: 'ALERTS{{alertname="RdmaMeshLinkLossy",alertstate="firing",job="rdma-mesh",link="{link}",rail="0",severity="warning"}}'
            value: 1
      - expr: '{off_the_faults}'
        eval_time: 24m
        exp_samples: []
"#,
        rules = rules.display(),
        input = input.yaml(),
        dead = n(DEAD),
        nic = n(NIC),
    )
}

/// promtool's verdict on the test file, and what it printed.
fn promtool(dir: &Path, text: &str) -> (bool, String) {
    let file = dir.join("fleet.test.yml");
    std::fs::write(&file, text).expect("writing the test file");
    let out = Command::new("promtool")
        .arg("test")
        .arg("rules")
        .arg(&file)
        .output()
        .expect(
            "promtool (Debian's `prometheus` package ships it): run `cargo xtask deps --groups prometheus` as root",
        );
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), said)
}

#[test]
fn promtool_finds_one_verdict_per_fault_of_a_simulated_fleet_and_nothing_else() {
    let (f, input) = scrapes();
    assert!(input.len() > 1_000, "{} series", input.len());
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (ok, said) = promtool(dir.path(), &test_file(&f, &input, &shipped_rules()));
    assert!(ok, "{said}");

    // The same fleet under rules that need more votes than a ToR has: no node verdict, and
    // promtool says so.
    let rules = std::fs::read_to_string(shipped_rules()).expect("the shipped rules");
    let strict = dir.path().join("strict.rules.yml");
    let broken = rules.replace(
        "group_left 0.5 * rdma_mesh:tor_peers:max",
        "group_left 2 * rdma_mesh:tor_peers:max",
    );
    assert_ne!(broken, rules);
    std::fs::write(&strict, broken).expect("writing the rules");
    let (ok, said) = promtool(dir.path(), &test_file(&f, &input, &strict));
    assert!(!ok && said.contains("RdmaMeshNodeDown"), "{said}");
}
