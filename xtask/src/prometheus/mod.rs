//! `cargo xtask prometheus-check`: the mesh's Prometheus alerting rules and Grafana dashboard,
//! checked offline.
//!
//! - `promtool check rules deploy/prometheus/rdma-mesh.rules.yml`: the rules parse, and their
//!   PromQL too;
//! - `promtool test rules deploy/prometheus/rdma-mesh.rules.test.yml`: the alerts fire as the
//!   test file expects from its input series (labels, `cause`, annotations), and not before;
//! - every series the rules and every panel and variable of
//!   `deploy/grafana/rdma-mesh.dashboard.json` read is one the mesh exposes (`SERIES` in
//!   `rdma-client/src/mesh/metrics.rs`; a test there checks that list against the exposition).
//!
//! - `amtool check-config deploy/alertmanager/alertmanager.yml`, and a real Alertmanager on
//!   127.0.0.1 with it: one page per root cause ([`alertmanager`]).
//!
//! promtool comes from Debian's `prometheus` package (deps group `prometheus`, which
//! `cargo xtask test` installs): without it this fails, naming the group; it is never skipped.

pub mod alertmanager;
pub mod fleet;
pub mod promql;

use crate::deps::{self, Group};
use crate::exec;
use clap::Args;
use color_eyre::eyre::{Result, WrapErr as _, bail, eyre};
use std::path::{Path, PathBuf};
use std::time::Duration;
use xshell::{Shell, cmd};

/// The rules file, in `deploy/prometheus/`.
pub const RULES: &str = "rdma-mesh.rules.yml";
/// Its unit tests (`promtool test rules`), beside it.
pub const RULES_TEST: &str = "rdma-mesh.rules.test.yml";
/// The dashboard, in `deploy/grafana/`.
pub const DASHBOARD: &str = "rdma-mesh.dashboard.json";
/// Series the rules may read besides the mesh's own: Prometheus's scrape health.
const PROMETHEUS_OWN: &[&str] = &["up"];

/// The `for:` the guests' and the simulated fleet's copy of the shipped rules has (theirs are
/// minutes).
pub const ALERT_FOR_S: u64 = 3;

/// The shipped rules with every `for:` set to [`ALERT_FOR_S`] (a test cannot wait their
/// minutes: the guests' and the simulated fleet's Prometheus load these), and nothing else
/// changed; an error if some alert has no `for:`.
pub fn fast_rules(shipped: &str) -> Result<String> {
    let alerts = shipped
        .lines()
        .filter(|l| l.trim_start().starts_with("- alert:"))
        .count();
    let mut changed = 0;
    let mut out = String::with_capacity(shipped.len());
    for line in shipped.split_inclusive('\n') {
        let t = line.trim_start();
        if let Some(rest) = t.strip_prefix("for:") {
            let indent = &line[..line.len() - t.len()];
            let eol = if rest.ends_with('\n') { "\n" } else { "" };
            out.push_str(&format!("{indent}for: {ALERT_FOR_S}s{eol}"));
            changed += 1;
        } else {
            out.push_str(line);
        }
    }
    if changed != alerts || alerts == 0 {
        bail!("the shipped rules have {alerts} alerts but {changed} `for:` lines");
    }
    Ok(out)
}

/// Arguments of `cargo xtask prometheus-check`.
#[derive(Debug, Args)]
pub struct PrometheusArgs {}

/// Entry point.
pub fn cmd(_: &PrometheusArgs) -> Result<()> {
    deps::ensure(&[Group::Prometheus])?;
    let root = exec::workspace_root();
    let promtool = promtool()?;
    let rules = check_rules(&promtool, &root.join("deploy/prometheus"))?;
    let series = mesh_series(&root)?;
    let dash = check_dashboard(&root.join("deploy/grafana").join(DASHBOARD), &series)?;
    let inhibit = alertmanager::check(&root.join("deploy/alertmanager"))?;
    println!(
        "prometheus-check: {rules} alerting rules pass promtool check and test; {dash} dashboard queries read only the mesh's {} series; {inhibit} inhibit rules leave a real Alertmanager one page per root cause",
        series.len()
    );
    let t = std::time::Instant::now();
    let f = fleet::check(&root)?;
    let pages: Vec<String> = f
        .pages
        .iter()
        .map(|(a, peer, _, tor, _, link)| format!("{a} {peer}{tor}{link}"))
        .collect();
    println!(
        "prometheus-check: a real Prometheus and Alertmanager on 127.0.0.1 over {} simulated probers: {} series, rule groups evaluated in at most {:.3} s; healthy, no alert; after a dead host, a broken NIC, a ToR cut off and a lossy link, {} alerts held and {} paged, one per root cause: {} ({:.0} s)",
        f.probers,
        f.series,
        f.rule_eval_s,
        f.held,
        f.pages.len(),
        pages.join(", "),
        t.elapsed().as_secs_f64()
    );
    Ok(())
}

/// promtool, or an error naming the deps group that installs it.
pub fn promtool() -> Result<PathBuf> {
    exec::which("promtool").ok_or_else(|| {
        eyre!(
            "promtool is not installed (Debian's `prometheus` package ships it): run `cargo xtask deps --groups prometheus` as root"
        )
    })
}

/// The series the mesh exposes, read from rdma-client's source.
pub fn mesh_series(root: &Path) -> Result<Vec<String>> {
    let path = root.join("rdma-client/src/mesh/metrics.rs");
    let src =
        std::fs::read_to_string(&path).wrap_err_with(|| format!("reading {}", path.display()))?;
    promql::exposed_series(&src).wrap_err_with(|| format!("in {}", path.display()))
}

/// `promtool check rules` and `promtool test rules` in `dir`, then the series the rules read
/// checked against the mesh's and the rules' own recorded ones; returns how many rules there
/// are.
pub fn check_rules(promtool: &Path, dir: &Path) -> Result<usize> {
    let sh = Shell::new()?;
    sh.change_dir(dir);
    for (what, step) in [("check", RULES), ("test", RULES_TEST)] {
        let out = exec::output_with(
            cmd!(sh, "{promtool} {what} rules {step}"),
            None,
            Duration::from_secs(120),
        )?;
        exec::check_output(&format!("promtool {what} rules {step}"), &out)
            .wrap_err_with(|| format!("`promtool {what} rules` failed in {}", dir.display()))?;
    }
    let path = dir.join(RULES);
    let yaml =
        std::fs::read_to_string(&path).wrap_err_with(|| format!("reading {}", path.display()))?;
    let exprs = promql::rule_exprs(&yaml);
    let series = mesh_series(&exec::workspace_root())?;
    let mut allowed = series;
    allowed.extend(PROMETHEUS_OWN.iter().map(|s| (*s).to_owned()));
    // And what the file's own recording rules record (`level:metric:operations`).
    allowed.extend(
        yaml.lines()
            .filter_map(|l| l.trim().strip_prefix("- record:"))
            .map(|n| n.trim().to_owned()),
    );
    check_reads(&path, &exprs, &allowed)?;
    Ok(exprs.len())
}

/// Every query of the dashboard reads at least one series, and only the mesh's; returns how
/// many queries it has.
pub fn check_dashboard(path: &Path, series: &[String]) -> Result<usize> {
    let text =
        std::fs::read_to_string(path).wrap_err_with(|| format!("reading {}", path.display()))?;
    let json: serde_json::Value =
        serde_json::from_str(&text).wrap_err_with(|| format!("{} is not JSON", path.display()))?;
    let exprs = promql::dashboard_exprs(&json);
    if exprs.is_empty() {
        bail!("{}: no panel query (`expr`) at all", path.display());
    }
    check_reads(path, &exprs, series)?;
    Ok(exprs.len())
}

fn check_reads(path: &Path, exprs: &[(String, String)], allowed: &[String]) -> Result<()> {
    let mut wrong = Vec::new();
    for (at, e) in exprs {
        let names = promql::metric_names(e);
        if names.is_empty() {
            wrong.push(format!("{at}: reads no series: {e}"));
        }
        for n in names.iter().filter(|n| !allowed.contains(n)) {
            wrong.push(format!("{at}: reads `{n}`, which the mesh does not expose"));
        }
    }
    if !wrong.is_empty() {
        bail!(
            "{}: {}\n(the mesh's series are SERIES in rdma-client/src/mesh/metrics.rs)",
            path.display(),
            wrong.join("\n")
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn copy_rules(to: &Path) {
        let dir = exec::workspace_root().join("deploy/prometheus");
        for f in [RULES, RULES_TEST] {
            std::fs::copy(dir.join(f), to.join(f)).unwrap();
        }
    }

    /// The shipped rules pass promtool's check and their unit tests, and promtool can fail:
    /// an alert that waits longer than its test expects fails `test rules`, a PromQL typo fails
    /// `check rules`, a series the mesh does not expose fails ours. Never skipped: without
    /// promtool it fails naming the deps group (`cargo xtask test` installs it first).
    #[test]
    fn the_fast_rules_differ_from_the_shipped_only_in_their_for() {
        let shipped = std::fs::read_to_string(
            crate::exec::workspace_root()
                .join("deploy/prometheus")
                .join(RULES),
        )
        .unwrap();
        let fast = fast_rules(&shipped).unwrap();
        assert!(fast.contains(&format!("for: {ALERT_FOR_S}s\n")));
        assert!(!fast.contains("for: 3m"));
        let (a, b): (Vec<&str>, Vec<&str>) = (shipped.lines().collect(), fast.lines().collect());
        assert_eq!(a.len(), b.len());
        for (x, y) in a.iter().zip(&b) {
            if x != y {
                assert!(x.trim_start().starts_with("for:"), "{x} -> {y}");
            }
        }
        // An alert without its `for:` is refused.
        let cut = shipped.replacen("        for: 3m\n", "", 1);
        assert_ne!(cut, shipped);
        assert!(fast_rules(&cut).is_err());
    }

    #[test]
    fn the_rules_pass_promtool_and_a_broken_one_fails() {
        let promtool = promtool().unwrap();
        let shipped = exec::workspace_root().join("deploy/prometheus");
        assert!(check_rules(&promtool, &shipped).unwrap() >= 5);

        let slow = tempfile::tempdir().unwrap();
        copy_rules(slow.path());
        let rules = slow.path().join(RULES);
        let text = std::fs::read_to_string(&rules).unwrap();
        let later = text.replacen("for: 3m", "for: 30m", 1);
        assert_ne!(later, text, "RdmaMeshPathDown's `for` moved");
        std::fs::write(&rules, later).unwrap();
        let e = format!("{:#}", check_rules(&promtool, slow.path()).unwrap_err());
        assert!(
            e.contains("promtool test rules") && e.contains("RdmaMeshPathDown"),
            "{e}"
        );

        let typo = tempfile::tempdir().unwrap();
        copy_rules(typo.path());
        let rules = typo.path().join(RULES);
        std::fs::write(
            &rules,
            text.replacen("(rdma_mesh_path_up == 0)", "(rdma_mesh_path_up == )", 1),
        )
        .unwrap();
        let e = format!("{:#}", check_rules(&promtool, typo.path()).unwrap_err());
        assert!(e.contains("promtool check rules"), "{e}");

        let alien = tempfile::tempdir().unwrap();
        copy_rules(alien.path());
        let rules = alien.path().join(RULES);
        let other = text.replacen(
            "expr: absent(rdma_mesh_build_info)",
            "expr: absent(node_load1)",
            1,
        );
        assert_ne!(other, text);
        std::fs::write(&rules, other).unwrap();
        // promtool's unit tests pass with it (absent of anything fires alike); ours does not.
        let e = format!("{:#}", check_rules(&promtool, alien.path()).unwrap_err());
        assert!(e.contains("`node_load1`"), "{e}");
    }

    /// Every panel of the shipped dashboard reads the mesh's series, and a panel reading
    /// another is named.
    #[test]
    fn the_dashboard_reads_only_the_meshs_series() {
        let root = exec::workspace_root();
        let series = mesh_series(&root).unwrap();
        assert!(
            series.contains(&"rdma_mesh_rtt_seconds_bucket".to_owned()),
            "{series:?}"
        );
        let path = root.join("deploy/grafana").join(DASHBOARD);
        assert!(check_dashboard(&path, &series).unwrap() >= 10);
        let text = std::fs::read_to_string(&path).unwrap();
        // The panels: the up/down matrix, results, RTT, network vs host, bandwidth.
        for s in [
            "rdma_mesh_path_up",
            "rdma_mesh_probes_total",
            "rdma_mesh_rtt_seconds_bucket",
            "rdma_mesh_network_rtt_seconds_bucket",
            "rdma_mesh_host_delay_seconds_bucket",
            "rdma_mesh_bandwidth_bytes_per_second",
        ] {
            assert!(text.contains(s), "no panel reads {s}");
        }

        let dir = tempfile::tempdir().unwrap();
        let bad = dir.path().join(DASHBOARD);
        let other = text.replacen(
            "rdma_mesh_bandwidth_bytes_per_second{",
            "node_network_receive_bytes_total{",
            1,
        );
        assert_ne!(other, text);
        std::fs::write(&bad, other).unwrap();
        let e = format!("{:#}", check_dashboard(&bad, &series).unwrap_err());
        assert!(
            e.contains("panel \"Bandwidth samples\": reads `node_network_receive_bytes_total`"),
            "{e}"
        );
    }
}
