//! `xtask mesh-guest STAGE` (inside a guest): one stage of the fabric phase's mesh check
//! (issue 24), read from the guests' own Prometheus, which scrapes every node's `rdma-client
//! mesh --metrics-listen` and evaluates the shipped alerting rules.
//!
//! The stages, each its own plan step on node1 between the faults the other guests' steps make
//! ([`crate::fabric_e2e`]'s mesh plan):
//!
//! 1. `steady`: every ordered pair up, every RTT histogram filled, every query of the shipped
//!    Grafana dashboard returning series;
//! 2. `down` (the dead node sends nothing at all): the paths to it down, one root cause,
//!    `RdmaMeshNodeDown` for it, and in Alertmanager that alone: its path alerts and its
//!    failing scrape inhibited; the other paths up;
//! 3. `up`: it sends again: every path up again, every alert resolved;
//! 4. `blocked` (the faulted node drops every RoCE packet it sends, TCP still open): its paths
//!    down, the probes to it with cause `rdma`, never `host`; `RdmaMeshPathDown` firing for
//!    each; one root cause, `RdmaMeshNodeRdmaBroken`, alone in Alertmanager; the other paths
//!    up;
//! 5. `stopped` (its server stopped too): probes to it fail `host` or `refused`;
//! 6. `restored`: every path up again, every alert resolved;
//! 7. `lossy` (5% loss on one link): its two paths slow or degraded, never corrupt, the other
//!    paths never leaving up; one alert, `RdmaMeshLinkLossy`, the only page.
//!
//! The dead node and the faulted one share a ToR; the third node is alone under the other.
//!
//! A stage polls until its check is done, finds something it must never see, or runs out of
//! its deadline (the step's, derived from the mesh's own flags: [`budget`]). It prints one
//! line, `mesh-guest: STAGE: …`, that the host shows.

pub mod prom;
pub mod stages;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use color_eyre::eyre::{Result, WrapErr as _, bail};
use serde::{Deserialize, Serialize};

use stages::{Check, Checker};

/// The stages, in their order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Stage {
    Steady,
    Down,
    Up,
    Blocked,
    Stopped,
    Restored,
    Lossy,
}

impl Stage {
    #[cfg(test)]
    pub const ALL: [Stage; 7] = [
        Stage::Steady,
        Stage::Down,
        Stage::Up,
        Stage::Blocked,
        Stage::Stopped,
        Stage::Restored,
        Stage::Lossy,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Stage::Steady => "steady",
            Stage::Down => "down",
            Stage::Up => "up",
            Stage::Blocked => "blocked",
            Stage::Stopped => "stopped",
            Stage::Restored => "restored",
            Stage::Lossy => "lossy",
        }
    }
}

/// The mesh under test, as the host wrote it for the guests (`mesh.json`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Topology {
    /// The nodes, as the probers name their peers.
    pub nodes: Vec<String>,
    /// The probers' metrics port (Prometheus's targets are `NODE:PORT`).
    pub metrics_port: u16,
    /// The node whose RoCE is blocked, then whose server is stopped.
    pub faulted: String,
    /// The node that sends nothing, then sends again (before the faulted one's faults).
    pub dead: String,
    /// The two ends of the lossy link.
    pub lossy: [String; 2],
    /// Prometheus (`http://node1:9090`).
    pub prometheus: String,
    /// Alertmanager (`http://node1:9093`), which Prometheus sends its alerts to.
    pub alertmanager: String,
    /// The shipped dashboard (read through the host's root).
    pub dashboard: PathBuf,
    /// The probers' `--every`, seconds.
    pub every_s: u64,
    /// Intervals in which the schedule probes every path once (2 where a node alone under
    /// its ToR probes the other ToR's two nodes in turn).
    pub cycle: u64,
    pub down_after: u32,
    pub up_after: u32,
    /// The probers' `--bw-every` (the dashboard's bandwidth panel waits for a sample).
    pub bw_every: u32,
    /// The `for:` of the rules Prometheus evaluates here, seconds.
    pub alert_for_s: u64,
    /// Probes of each lossy path the lossy stage waits for.
    pub loss_probes: u32,
}

impl Topology {
    /// The scrape target (`instance` label) of `node`'s prober.
    pub fn instance(&self, node: &str) -> String {
        format!("{node}:{}", self.metrics_port)
    }
}

/// How long Prometheus may take to start in a guest before the first stage can query it.
pub const PROMETHEUS_START: Duration = Duration::from_secs(90);

/// How many times its probes' own time a stage may take (the guests share two host cores, a
/// probe may take its whole interval).
const SLACK: u64 = 2;

/// A stage's deadline, from what it waits for: the probes its check needs (each a cycle of
/// `--every` at the latest), twice over, plus a few scrapes and evaluations and, where an
/// alert must fire, its `for:`.
pub fn budget(stage: Stage, t: &Topology) -> Duration {
    let probes = |n: u32| SLACK * (u64::from(n) + 2) * t.every_s * t.cycle.max(1);
    let scrape = 5;
    Duration::from_secs(match stage {
        Stage::Steady => PROMETHEUS_START.as_secs() + probes(t.up_after + t.bw_every) + scrape,
        Stage::Down | Stage::Blocked => probes(t.down_after) + t.alert_for_s + scrape,
        Stage::Stopped => probes(1) + scrape,
        Stage::Up | Stage::Restored => probes(t.up_after) + t.alert_for_s + scrape,
        // The link's alert wants 3 slow probes of a path at least, and more than 5% of its
        // probes in 15 minutes (the earlier stages' included): twice the probes the loss
        // check counts, then its `for:`.
        Stage::Lossy => probes(2 * t.loss_probes) + t.alert_for_s + scrape,
    })
}

/// Arguments of `xtask mesh-guest`.
#[derive(Debug, Args)]
pub struct MeshGuestArgs {
    pub stage: Stage,
    /// The topology (`mesh.json`, written by the host).
    #[arg(long)]
    pub config: PathBuf,
    /// Seconds this stage may take (the plan step's deadline less its grace).
    #[arg(long)]
    pub deadline_s: u64,
}

/// Entry point: polls the stage's check once a second until it is done.
pub fn cmd(args: &MeshGuestArgs) -> Result<()> {
    let text = std::fs::read_to_string(&args.config)
        .wrap_err_with(|| format!("reading {}", args.config.display()))?;
    let topo: Topology = serde_json::from_str(&text)
        .wrap_err_with(|| format!("{} is not a mesh topology", args.config.display()))?;
    let t0 = Instant::now();
    let deadline = t0 + Duration::from_secs(args.deadline_s);
    let http = prom::Monitor::new(&topo.prometheus, &topo.alertmanager, Duration::from_secs(5));
    let name = args.stage.name();
    while !http.ready() {
        if Instant::now() >= deadline {
            bail!(
                "mesh-guest: {name}: Prometheus at {} or Alertmanager at {} never became ready within {} s",
                topo.prometheus,
                topo.alertmanager,
                args.deadline_s
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let dashboard = if args.stage == Stage::Steady {
        let text = std::fs::read_to_string(&topo.dashboard)
            .wrap_err_with(|| format!("reading {}", topo.dashboard.display()))?;
        let json = serde_json::from_str(&text)
            .wrap_err_with(|| format!("{} is not JSON", topo.dashboard.display()))?;
        crate::prometheus::promql::dashboard_exprs(&json)
    } else {
        Vec::new()
    };
    // A scrape or two first: the snapshot then holds what the stage's fault found.
    let mut checker = loop {
        match Checker::start(args.stage, topo.clone(), dashboard.clone(), &http) {
            Ok(c) => break c,
            Err(e) if Instant::now() < deadline => {
                eprintln!("mesh-guest: {name}: {e:#} (again)");
                std::thread::sleep(Duration::from_secs(1));
            }
            Err(e) => return Err(e.wrap_err(format!("mesh-guest: {name}: no snapshot"))),
        }
    };
    let mut last = String::new();
    loop {
        checker.elapsed_s = t0.elapsed().as_secs_f64();
        match checker.poll(&http) {
            Ok(Check::Done(what)) => {
                println!("mesh-guest: {name}: {what} ({:.1} s)", checker.elapsed_s);
                return Ok(());
            }
            Ok(Check::Wrong(why)) => {
                bail!("mesh-guest: {name}: {why} (at {:.1} s)", checker.elapsed_s)
            }
            Ok(Check::NotYet(why)) => {
                // Each new reason once, with its time: the step's stderr tells how it went.
                if why != last {
                    eprintln!("mesh-guest: {name}: {:.1} s: {why}", checker.elapsed_s);
                }
                last = why;
            }
            Err(e) => last = format!("{e:#}"),
        }
        if Instant::now() >= deadline {
            bail!(
                "mesh-guest: {name}: not seen within its {} s deadline: {last}",
                args.deadline_s
            );
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

#[cfg(test)]
mod tests;
