//! `rdma-fleet-sim`: a simulated fleet whose every prober serves its metrics on
//! 127.0.0.1 through the mesh's own endpoint, for a real Prometheus to scrape
//! (`cargo xtask prometheus-check`). Each prober gets a port; `--targets` is a Prometheus
//! `file_sd` file naming them, with each one's `instance` as the rules expect it
//! (`NODE:9478`). The fleet steps one interval every `--step` of wall time. Once the file
//! `--fault-when` exists it injects the four faults at once (a dead host, a broken NIC, a ToR
//! cut off, loss on one link), runs three cycles at once so that they show, and writes what it
//! injected to `--faults`. It runs until it is killed, or for `--max-run` at most.

use clap::Parser;
use color_eyre::eyre::{Result, WrapErr as _};
use rdma_client::mesh::http::{Limits, MetricsServer};
use rdma_fleet_sim::{Fault, Fleet, Shape};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

#[derive(Debug, Parser)]
struct Args {
    /// ToRs.
    #[arg(long, default_value_t = 25)]
    tors: usize,
    /// Nodes a ToR.
    #[arg(long, default_value_t = 40)]
    per_tor: usize,
    /// Where to write Prometheus's `file_sd` targets.
    #[arg(long)]
    targets: PathBuf,
    /// The faults are injected once this file exists.
    #[arg(long)]
    fault_when: PathBuf,
    /// Where to write the faults injected (JSON), once they are.
    #[arg(long)]
    faults: PathBuf,
    /// Wall time an interval takes.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "1s")]
    step: Duration,
    /// The lossy link's share of probes that wait out a retransmission (0.18: about what 1%
    /// packet loss does to a probe's exchange).
    #[arg(long, default_value_t = 0.18)]
    stall: f64,
    /// Ends after this long whatever happens.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "15m")]
    max_run: Duration,
}

/// Writes `text` to `path` at once (a rename), so that a reader never sees half of it.
fn write_atomically(path: &Path, text: &str) -> Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).wrap_err_with(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).wrap_err_with(|| format!("renaming to {}", path.display()))
}

fn main() -> Result<()> {
    color_eyre::install()?;
    let args = Args::parse();
    let started = Instant::now();
    let mut fleet = Fleet::new(Shape {
        tors: args.tors,
        per_tor: args.per_tor,
        fan_out: 8,
    })?;
    let n = fleet.names.len();
    for node in 0..n {
        fleet.watch(node)?;
    }
    // Warm up: every path within a ToR judged up before Prometheus looks.
    let cycle = fleet.schedule.cycle();
    for _ in 0..3 * cycle {
        fleet.step_at(SystemTime::now())?;
    }
    let mut servers = Vec::with_capacity(n);
    let mut targets = Vec::with_capacity(n);
    for node in 0..n {
        let Some(m) = fleet.metrics(node) else {
            continue;
        };
        let server = MetricsServer::bind(
            "127.0.0.1:0".parse().wrap_err("the loopback address")?,
            m,
            Limits::default(),
        )?;
        targets.push(serde_json::json!({
            "targets": [server.local_addr().to_string()],
            "labels": { "instance": format!("{}:9478", fleet.names[node]) },
        }));
        servers.push(server);
    }
    write_atomically(&args.targets, &serde_json::to_string(&targets)?)?;

    // Each fault in a ToR of its own: the second, third, fourth and fifth.
    if args.tors < 5 || args.per_tor < 3 {
        color_eyre::eyre::bail!("the faults need 5 ToRs of 3 nodes at least");
    }
    let node = |tor: usize, i: usize| tor * args.per_tor + i % args.per_tor;
    let (dead, nic, cut) = (node(1, 7), node(2, 11), 3);
    let lossy = [node(4, 1), node(4, 2)];
    let mut injected = false;
    while started.elapsed() < args.max_run {
        std::thread::sleep(args.step);
        if !injected && args.fault_when.exists() {
            injected = true;
            let t = fleet.t;
            fleet.inject(t, Fault::DeadHost(dead));
            fleet.inject(t, Fault::BrokenNic(nic));
            fleet.inject(t, Fault::TorCut(cut));
            fleet.inject(
                t,
                Fault::Loss {
                    a: lossy[0],
                    b: lossy[1],
                    stall: args.stall,
                },
            );
            for _ in 0..3 * cycle {
                fleet.step_at(SystemTime::now())?;
            }
            let said = serde_json::json!({
                "dead": fleet.names[dead],
                "dead_tor": fleet.tors.names[fleet.tor(dead)],
                "nic": fleet.names[nic],
                "nic_tor": fleet.tors.names[fleet.tor(nic)],
                "cut": fleet.tors.names[cut],
                "lossy": [fleet.names[lossy[0]], fleet.names[lossy[1]]],
                "stall": args.stall,
                "cycle": cycle,
            });
            write_atomically(&args.faults, &said.to_string())?;
        }
        fleet.step_at(SystemTime::now())?;
    }
    drop(servers);
    Ok(())
}
