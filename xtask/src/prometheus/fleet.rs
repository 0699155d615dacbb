//! A real Prometheus and Alertmanager on 127.0.0.1 over a simulated fleet. `rdma-fleet-sim`
//! (rdma-client/fleet-sim) serves 1,000 probers in 25 ToRs through the mesh's own metrics
//! endpoint, one loopback port each; Prometheus scrapes them and evaluates the shipped rules
//! (only `for:` shortened, as in the guests: [`super::fast_rules`]) and sends its
//! alerts to Alertmanager, which runs the shipped inhibit rules. While the fleet is healthy no
//! alert fires; after the four faults (a dead host, a broken NIC, a ToR cut off, loss on one
//! link) what Alertmanager leaves active is one alert per root cause, naming it. The report
//! gives the series Prometheus holds and how long its rule evaluations take.

use super::alertmanager::{self, Alert, Alertmanager};
use crate::exec::{self, Captured};
use crate::mesh_guest::prom::Http;
use color_eyre::eyre::{Result, WrapErr as _, bail, eyre};
use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};
use xshell::{Shell, cmd};

const TORS: usize = 25;
const PER_TOR: usize = 40;
/// Prometheus's scrape and evaluation interval.
const SCRAPE: Duration = Duration::from_secs(5);
/// The simulated fleet's interval, in wall time.
const STEP: Duration = Duration::from_secs(1);
/// The lossy link's share of probes that wait out a retransmission: far more than 1% loss gives
/// (0.18), so that its alert needs well under a minute, not minutes (its paths go degraded now
/// and then too, and its alert must silence theirs).
const STALL: f64 = 0.6;
/// One start (the simulation binding its 1,000 ports, Prometheus, a request): a single step's
/// bound.
const START: Duration = Duration::from_secs(120);

/// What the check saw.
#[derive(Debug)]
pub struct Report {
    pub probers: usize,
    /// Series Prometheus holds (its head), the mesh's and its own.
    pub series: f64,
    /// The longest evaluation of a rule group, seconds.
    pub rule_eval_s: f64,
    /// What paged, one alert per root cause.
    pub pages: BTreeSet<Alert>,
    /// Alerts Alertmanager holds, the inhibited ones included.
    pub held: usize,
}

/// Polls `done` every half second until it gives a value, up to `within`.
fn wait<T>(what: &str, within: Duration, mut done: impl FnMut() -> Result<Option<T>>) -> Result<T> {
    let deadline = Instant::now() + within;
    let mut last = None;
    loop {
        match done() {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(e) => last = Some(e),
        }
        if Instant::now() > deadline {
            let why = last.map_or(String::new(), |e| format!(" (last error: {e:#})"));
            bail!("fleet: {what} not within {within:?}{why}");
        }
        exec::sleep(Duration::from_millis(500))?;
    }
}

fn scalar(q: &Http, expr: &str) -> Result<f64> {
    Ok(q.query(expr)?.first().map_or(0.0, |s| s.value))
}

/// Runs the check.
///
/// # Errors
/// A tool is missing, something did not start, or what pages is not one alert per root cause.
pub fn check(root: &Path) -> Result<Report> {
    let sh = Shell::new()?;
    exec::run_loud(
        cmd!(sh, "cargo build --quiet -p rdma-fleet-sim"),
        Duration::from_secs(1500),
    )?;
    let sim_bin = crate::vm::target_dir().join("debug/rdma-fleet-sim");
    let prometheus = alertmanager::tool(&["prometheus"])?;
    let am_bin = alertmanager::tool(&["prometheus-alertmanager", "alertmanager"])?;
    let dir = tempfile::tempdir()?;
    let file = |name: &str| dir.path().join(name);
    let (targets, fault_when, faults) = (file("targets.json"), file("fault"), file("faults.json"));
    let mut sim = Captured::spawn(&[
        sim_bin.display().to_string(),
        format!("--tors={TORS}"),
        format!("--per-tor={PER_TOR}"),
        format!("--targets={}", targets.display()),
        format!("--fault-when={}", fault_when.display()),
        format!("--faults={}", faults.display()),
        format!("--step={}ms", STEP.as_millis()),
        format!("--stall={STALL}"),
    ])?;
    // `true`: it exited before writing them.
    let exited = wait("the simulated fleet's targets", START, || {
        Ok(if sim.exited()? {
            Some(true)
        } else {
            targets.exists().then_some(false)
        })
    })?;
    if exited {
        let f = sim.finish(Instant::now())?;
        bail!(
            "rdma-fleet-sim exited (code {:?}) before writing its targets: {}",
            f.code,
            f.stderr.trim()
        );
    }

    let shipped = std::fs::read_to_string(root.join("deploy/prometheus").join(super::RULES))?;
    let rules = dir.path().join("rules.yml");
    std::fs::write(&rules, super::fast_rules(&shipped)?)?;
    let am = Alertmanager::start(
        &am_bin,
        &root.join("deploy/alertmanager").join(alertmanager::CONFIG),
    )?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let scrape = format!("{}s", SCRAPE.as_secs());
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: {scrape}\n  scrape_timeout: {scrape}\n  evaluation_interval: {scrape}\nrule_files: ['{}']\nalerting:\n  alertmanagers:\n    - static_configs:\n        - targets: ['{}']\nscrape_configs:\n  - job_name: rdma-mesh\n    file_sd_configs:\n      - files: ['{}']\n  - job_name: prometheus\n    static_configs:\n      - targets: ['127.0.0.1:{port}']\n",
            rules.display(),
            am.address(),
            targets.display()
        ),
    )?;
    let _prom = Captured::spawn(&[
        prometheus.display().to_string(),
        format!("--config.file={}", config.display()),
        format!("--storage.tsdb.path={}", file("data").display()),
        format!("--web.listen-address=127.0.0.1:{port}"),
    ])?;
    let q = Http::new(&format!("http://127.0.0.1:{port}"), Duration::from_secs(30));
    wait("Prometheus ready", START, || Ok(q.ready().then_some(())))?;
    let probers = TORS * PER_TOR;
    let within_tors = (probers * (PER_TOR - 1)) as f64;
    // Healthy: every prober scraped with every path of its ToR up, then no alert for the
    // rules' `for:` and a few evaluations more.
    wait("every prober scraped, healthy", START + 4 * SCRAPE, || {
        let up = scalar(&q, r#"count(up{job="rdma-mesh"} == 1)"#)?;
        let paths = scalar(&q, r#"sum(rdma_mesh_paths{state="up"})"#)?;
        Ok((up == probers as f64 && paths >= within_tors).then_some(()))
    })?;
    let calm = Duration::from_secs(super::ALERT_FOR_S) + 3 * SCRAPE;
    let until = Instant::now() + calm;
    while Instant::now() < until {
        let firing = q.query(r#"ALERTS{alertstate="firing"}"#)?;
        if let Some(a) = firing.first() {
            bail!(
                "fleet: {} fires over a healthy fleet: {:?}",
                a.label("alertname"),
                a.labels
            );
        }
        exec::sleep(Duration::from_millis(500))?;
    }

    // The faults.
    std::fs::write(&fault_when, "")?;
    let said: serde_json::Value = wait("the faults injected", START, || {
        if !faults.exists() {
            return Ok(None);
        }
        Ok(Some(serde_json::from_str(&std::fs::read_to_string(
            &faults,
        )?)?))
    })?;
    let s = |k: &str| said[k].as_str().unwrap_or("").to_owned();
    let mut lossy: Vec<String> = said["lossy"]
        .as_array()
        .map(|l| {
            l.iter()
                .filter_map(|n| n.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    lossy.sort();
    let none = String::new;
    let want: BTreeSet<Alert> = [
        (
            "RdmaMeshNodeDown",
            s("dead"),
            format!("{}:9478", s("dead")),
            none(),
            s("dead_tor"),
            none(),
        ),
        (
            "RdmaMeshNodeRdmaBroken",
            s("nic"),
            format!("{}:9478", s("nic")),
            none(),
            s("nic_tor"),
            none(),
        ),
        (
            "RdmaMeshTorUnreachable",
            none(),
            none(),
            s("cut"),
            s("cut"),
            none(),
        ),
        (
            "RdmaMeshLinkLossy",
            none(),
            none(),
            none(),
            none(),
            lossy.join("~"),
        ),
    ]
    .into_iter()
    .map(|(a, p, i, t, pt, l)| (a.to_owned(), p, i, t, pt, l))
    .collect();
    // Up to the whole healthy time in Prometheus's 10-minute windows must be outweighed by
    // failures (a ToR's verdict), then `for:`, and a few scrapes and evaluations. The lossy
    // link needs its slow probes (3 in 15 minutes, one path's): at its stall rate that many
    // probes of a path, twice over, one cycle each.
    let healthy_for = START + calm;
    let cycle = said["cycle"]
        .as_u64()
        .and_then(|c| u32::try_from(c).ok())
        .ok_or_else(|| eyre!("fleet: the faults file names no schedule cycle: {said}"))?;
    let lossy_for = STEP.mul_f64(2.0 * 3.0 / STALL) * cycle;
    let mut held = 0;
    let pages = wait(
        "one page per root cause",
        healthy_for.max(lossy_for) + calm + 6 * SCRAPE,
        || {
            let (all, active) = am.alerts()?;
            held = all.len();
            Ok((active == want).then_some(active))
        },
    )
    .wrap_err_with(|| {
        let now = am.alerts().map(|(_, a)| a).unwrap_or_default();
        format!("Alertmanager's pages {now:?}, not one per root cause {want:?}")
    })?;
    let series = scalar(&q, "prometheus_tsdb_head_series")?;
    let rule_eval_s = scalar(&q, "max(prometheus_rule_group_last_duration_seconds)")?;
    Ok(Report {
        probers,
        series,
        rule_eval_s,
        pages,
        held,
    })
}
