//! The mesh's Alertmanager inhibit rules (`deploy/alertmanager/alertmanager.yml`), checked by
//! `amtool check-config` and proven on a real Alertmanager on 127.0.0.1: the alerts a dead
//! node, a node whose RDMA is broken, one failing path, a ToR cut off and a lossy link raise are
//! posted to it, and what it leaves active must be exactly one alert per root cause ([`PAGES`]),
//! every other one inhibited by its node's, its ToR's or its link's alert.
//!
//! Alertmanager comes from Debian's `prometheus-alertmanager` package (deps group
//! `prometheus`); it runs with gossip off (`--cluster.listen-address=`), listening on loopback
//! only, and is killed when the check ends.

use crate::exec;
use color_eyre::eyre::{Result, WrapErr as _, bail, eyre};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use xshell::{Shell, cmd};

/// The configuration, in `deploy/alertmanager/`.
pub const CONFIG: &str = "alertmanager.yml";

/// How long Alertmanager may take to start and answer, and each request.
const START: Duration = Duration::from_secs(30);
const REQUEST: Duration = Duration::from_secs(5);

/// An alert by the labels the inhibit rules read: `(alertname, peer, instance, tor, peer_tor,
/// link)`, empty for a label the alert has not.
pub type Labels = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
);

/// The alerts the rules raise for five faults at once: node3 down (its paths to and from it,
/// its stale probes and its scrape, under `RdmaMeshNodeDown`), node4's RDMA broken (its paths,
/// under `RdmaMeshNodeRdmaBroken`), node1's one path to node2, all under the ToR `tor1`; and the
/// ToR `tor3` cut off from the others (the paths across to and from it, the RTT of the ToR pair,
/// under `RdmaMeshTorUnreachable`); and loss on the link node5~node6 (its two paths degraded,
/// under `RdmaMeshLinkLossy`).
#[rustfmt::skip]
pub const RAISED: &[Labels] = &[
    ("RdmaMeshNodeDown", "node3", "node3:9478", "", "tor1", ""),
    ("RdmaMeshPathDown", "node3", "node1:9478", "tor1", "tor1", ""),
    ("RdmaMeshPathDown", "node3", "node2:9478", "tor1", "tor1", ""),
    ("RdmaMeshPathDown", "node1", "node3:9478", "tor1", "tor1", ""),
    ("RdmaMeshProbesStale", "", "node3:9478", "", "", ""),
    ("RdmaMeshScrapeFailing", "", "node3:9478", "", "", ""),
    ("RdmaMeshNodeRdmaBroken", "node4", "node4:9478", "", "tor1", ""),
    ("RdmaMeshPathDown", "node4", "node1:9478", "tor1", "tor1", ""),
    ("RdmaMeshPathDegraded", "node4", "node2:9478", "tor1", "tor1", "node2~node4"),
    ("RdmaMeshPathDown", "node1", "node4:9478", "tor1", "tor1", ""),
    ("RdmaMeshPathDown", "node2", "node1:9478", "tor1", "tor1", ""),
    ("RdmaMeshTorUnreachable", "", "", "tor3", "tor3", ""),
    ("RdmaMeshPathDown", "node9", "node1:9478", "tor1", "tor3", ""),
    ("RdmaMeshPathDown", "node1", "node9:9478", "tor3", "tor1", ""),
    ("RdmaMeshRttRegression", "", "", "tor2", "tor3", ""),
    ("RdmaMeshLinkLossy", "", "", "", "", "node5~node6"),
    ("RdmaMeshPathDegraded", "node6", "node5:9478", "tor1", "tor1", "node5~node6"),
    ("RdmaMeshPathDegraded", "node5", "node6:9478", "tor1", "tor1", "node5~node6"),
];

/// What must page of [`RAISED`]: one alert per root cause.
#[rustfmt::skip]
pub const PAGES: &[Labels] = &[
    ("RdmaMeshNodeDown", "node3", "node3:9478", "", "tor1", ""),
    ("RdmaMeshNodeRdmaBroken", "node4", "node4:9478", "", "tor1", ""),
    ("RdmaMeshPathDown", "node2", "node1:9478", "tor1", "tor1", ""),
    ("RdmaMeshTorUnreachable", "", "", "tor3", "tor3", ""),
    ("RdmaMeshLinkLossy", "", "", "", "", "node5~node6"),
];

/// An alert by the labels the inhibit rules read, as [`Labels`] (owned).
pub type Alert = (String, String, String, String, String, String);

/// `amtool check-config`, then [`RAISED`] posted to a real Alertmanager running `dir`'s
/// configuration; returns the alerts it left active (not inhibited).
///
/// # Errors
/// amtool or Alertmanager is missing, the configuration is refused, or Alertmanager did not
/// start or answer.
pub fn active_alerts(dir: &Path) -> Result<BTreeSet<Alert>> {
    let config = dir.join(CONFIG);
    let amtool = tool(&["amtool"])?;
    let sh = Shell::new()?;
    let out = exec::output_with(
        cmd!(sh, "{amtool} check-config {config}"),
        None,
        Duration::from_secs(60),
    )?;
    exec::check_output("amtool check-config", &out)?;
    let am = Alertmanager::start(
        &tool(&["prometheus-alertmanager", "alertmanager"])?,
        &config,
    )?;
    am.post(RAISED)?;
    // Posted alerts are listed at once; inhibition is worked out as they are listed.
    let deadline = Instant::now() + START;
    loop {
        let (all, active) = am.alerts()?;
        if all.len() >= RAISED.len() {
            return Ok(active);
        }
        if Instant::now() > deadline {
            bail!(
                "Alertmanager lists {} of the {} alerts posted after {START:?}",
                all.len(),
                RAISED.len()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// [`active_alerts`] must be [`PAGES`] exactly; returns how many inhibit rules the shipped
/// configuration has.
///
/// # Errors
/// An alert pages that a verdict should have silenced, or a verdict is itself silenced.
pub fn check(dir: &Path) -> Result<usize> {
    let active = active_alerts(dir)?;
    let want: BTreeSet<Alert> = PAGES.iter().map(|a| own(*a)).collect();
    if active != want {
        let extra: Vec<_> = active.difference(&want).collect();
        let missing: Vec<_> = want.difference(&active).collect();
        bail!(
            "{}: Alertmanager left active {extra:?} beyond one alert per root cause, and silenced {missing:?} (inhibit_rules in {CONFIG})",
            dir.join(CONFIG).display()
        );
    }
    let text = std::fs::read_to_string(dir.join(CONFIG))?;
    Ok(text.matches("source_matchers:").count())
}

pub fn own((name, peer, instance, tor, peer_tor, link): Labels) -> Alert {
    (
        name.to_owned(),
        peer.to_owned(),
        instance.to_owned(),
        tor.to_owned(),
        peer_tor.to_owned(),
        link.to_owned(),
    )
}

/// The first of `names` on PATH, or an error naming the deps group that installs it.
pub fn tool(names: &[&str]) -> Result<PathBuf> {
    names.iter().find_map(|n| exec::which(n)).ok_or_else(|| {
        eyre!(
            "{} is not installed (Debian's `prometheus-alertmanager` package ships it): run `cargo xtask deps --groups prometheus` as root",
            names[0]
        )
    })
}

/// A running Alertmanager on 127.0.0.1, killed when dropped.
#[derive(Debug)]
pub struct Alertmanager {
    child: Child,
    base: String,
    agent: ureq::Agent,
    _storage: tempfile::TempDir,
}

impl Alertmanager {
    /// Starts `bin` with `config`, and waits until it is ready.
    ///
    /// # Errors
    /// It could not start, or was not ready within its start time.
    pub fn start(bin: &Path, config: &Path) -> Result<Self> {
        let storage = tempfile::tempdir()?;
        // A port the kernel has free now: Alertmanager takes it a moment later.
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let child = Command::new(bin)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.path={}", storage.path().display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--cluster.listen-address=")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .wrap_err_with(|| format!("starting {}", bin.display()))?;
        let agent = ureq::Agent::config_builder()
            .timeout_global(Some(REQUEST))
            .http_status_as_error(false)
            .build()
            .into();
        let mut am = Self {
            child,
            base: format!("http://127.0.0.1:{port}"),
            agent,
            _storage: storage,
        };
        let deadline = Instant::now() + START;
        while !am.ready() {
            if let Some(status) = am.child.try_wait()? {
                bail!("{} exited ({status}) before it was ready", bin.display());
            }
            if Instant::now() > deadline {
                bail!("Alertmanager was not ready on {} after {START:?}", am.base);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(am)
    }

    fn ready(&self) -> bool {
        self.agent
            .get(format!("{}/-/ready", self.base))
            .call()
            .is_ok_and(|r| r.status() == 200)
    }

    fn post(&self, alerts: &[Labels]) -> Result<()> {
        let body: Vec<serde_json::Value> = alerts
            .iter()
            .map(|(name, peer, instance, tor, peer_tor, link)| {
                let mut labels = serde_json::Map::new();
                labels.insert("alertname".into(), (*name).into());
                labels.insert("job".into(), "rdma-mesh".into());
                for (k, v) in [
                    ("peer", peer),
                    ("instance", instance),
                    ("tor", tor),
                    ("peer_tor", peer_tor),
                    ("link", link),
                ] {
                    if !v.is_empty() {
                        labels.insert(k.into(), (*v).into());
                    }
                }
                serde_json::json!({ "labels": labels })
            })
            .collect();
        let url = format!("{}/api/v2/alerts", self.base);
        let resp = self
            .agent
            .post(&url)
            .header("Content-Type", "application/json")
            .send(serde_json::to_string(&body)?)
            .wrap_err_with(|| format!("POST {url}"))?;
        if resp.status() != 200 {
            bail!("POST {url}: HTTP {}", resp.status());
        }
        Ok(())
    }

    /// Where Prometheus sends its alerts (`127.0.0.1:PORT`).
    pub fn address(&self) -> &str {
        self.base.trim_start_matches("http://")
    }

    /// Every alert it holds, and those of them active (neither inhibited nor silenced).
    ///
    /// # Errors
    /// It did not answer.
    pub fn alerts(&self) -> Result<(Vec<Alert>, BTreeSet<Alert>)> {
        let url = format!("{}/api/v2/alerts", self.base);
        let mut resp = self
            .agent
            .get(&url)
            .call()
            .wrap_err_with(|| format!("GET {url}"))?;
        let body = resp.body_mut().read_to_string()?;
        let list: Vec<serde_json::Value> = serde_json::from_str(&body)
            .wrap_err_with(|| format!("GET {url}: not a JSON list of alerts"))?;
        let mut all = Vec::new();
        let mut active = BTreeSet::new();
        for a in &list {
            let label = |k: &str| a["labels"][k].as_str().unwrap_or("").to_owned();
            let alert = (
                label("alertname"),
                label("peer"),
                label("instance"),
                label("tor"),
                label("peer_tor"),
                label("link"),
            );
            if a["status"]["state"] == "active" {
                active.insert(alert.clone());
            }
            all.push(alert);
        }
        Ok((all, active))
    }
}

impl Drop for Alertmanager {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shipped() -> PathBuf {
        exec::workspace_root().join("deploy/alertmanager")
    }

    /// The shipped inhibit rules leave one page per root cause; without them every alert
    /// pages (so the check can fail); a rule that silences on the wrong label is named.
    /// Never skipped: without Alertmanager it fails naming the deps group.
    #[test]
    fn the_inhibit_rules_leave_one_page_per_root_cause_and_a_broken_one_fails() {
        assert_eq!(check(&shipped()).unwrap(), 5);
        let text = std::fs::read_to_string(shipped().join(CONFIG)).unwrap();

        let none = tempfile::tempdir().unwrap();
        let cut = text.find("inhibit_rules:").unwrap();
        std::fs::write(none.path().join(CONFIG), &text[..cut]).unwrap();
        assert_eq!(active_alerts(none.path()).unwrap().len(), RAISED.len());
        let e = format!("{:#}", check(none.path()).unwrap_err());
        assert!(e.contains("RdmaMeshScrapeFailing"), "{e}");

        // Each rule with the wrong `equal`: what it should have silenced pages.
        for (rule, broken, still) in [
            (
                "equal: [job, instance]",
                "equal: [job, peer]",
                "RdmaMeshPathDown\", \"node1\", \"node3:9478",
            ),
            (
                "equal: [job, tor]",
                "equal: [job, instance]",
                "RdmaMeshPathDown\", \"node1\", \"node9:9478",
            ),
            (
                "equal: [job, link, rail]",
                "equal: [job, peer, rail]",
                "RdmaMeshPathDegraded\", \"node6\", \"node5:9478",
            ),
        ] {
            let dir = tempfile::tempdir().unwrap();
            std::fs::write(dir.path().join(CONFIG), text.replace(rule, broken)).unwrap();
            let e = format!("{:#}", check(dir.path()).unwrap_err());
            assert!(
                e.contains(still),
                "{rule} as {broken}: {still} should page: {e}"
            );
        }
    }
}
