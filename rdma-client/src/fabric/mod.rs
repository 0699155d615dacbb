//! The fabric check: every ordered pair of N nodes does the seed's verified RDMA Write, round by
//! round (`--fabric`, one task per node, e.g. under `srun`), and `--fabric-report` merges what
//! the ranks printed into a matrix, the bad pairs and the nodes common to them.
//!
//! `schedule` (who writes to whom in which round), `ranks` (node list and rank, from Slurm or
//! `--hosts/--rank`), `pair` (the per-pair event both sides share), `runner` (this node's
//! rounds), `rails` (`--rails`: which rail pairs with which, one matrix per rail), `report`
//! (the merge and the outlier rule), `table` and `heatmap` (how a report is shown).

pub mod error;
pub mod heatmap;
pub mod pair;
pub mod rails;
pub mod ranks;
pub mod report;
pub mod runner;
pub mod schedule;
pub mod table;
pub mod validate;

use crate::output::{Event, Output};
use color_eyre::eyre::{Result, WrapErr as _};
use error::FabricError;
use rdma_app as app;
use rdma_proto::DEFAULT_PORT;
use std::borrow::Cow;
use std::io::BufReader;
use std::path::PathBuf;
use std::time::Duration;

/// The fabric check's flags (flattened into the client's).
#[derive(Debug, clap::Args)]
#[command(next_help_heading = "Fabric check (every pair of N nodes)")]
pub struct FabricArgs {
    /// Run this node's part of a fabric check: in each round of the schedule, the seed's verified
    /// write to this round's partner, then a short latency and bandwidth measurement; prints one
    /// `fabric_pair` event per pair. Node list and rank come from Slurm (srun -N N
    /// --ntasks-per-node=1) or --hosts/--rank. Every node runs `rdma-server --serve
    /// --max-clients 1`.
    #[arg(long, conflicts_with = "fabric_report")]
    pub fabric: bool,

    /// With --fabric: print the schedule (round, writer, target) and exit, touching no RDMA.
    #[arg(long, requires = "fabric")]
    pub plan: bool,

    /// The nodes, as a hostlist (e.g. node[01-04,07],login1); ranks are their places in the list
    /// sorted in natural order. Default: Slurm's SLURM_STEP_NODELIST or SLURM_JOB_NODELIST.
    #[arg(long, value_name = "LIST", requires = "fabric")]
    pub hosts: Option<String>,

    /// This node's rank among --hosts (or --mesh's nodes) (from 0, in the sorted order);
    /// default: the place in the list of this node's name (SLURMD_NODENAME in a Slurm step,
    /// else the host name).
    #[arg(long, value_name = "N", requires = "node_list")]
    pub rank: Option<usize>,

    /// TCP port of every node's rdma-server.
    #[arg(long, value_name = "PORT", default_value_t = DEFAULT_PORT)]
    pub fabric_port: u16,

    /// How long one pair may wait for its target's server to be free (it answers `busy` while it
    /// serves the round before) or to come up, before the pair counts as failed.
    #[arg(long, value_name = "DURATION", default_value = "120s", value_parser = app::parse_duration)]
    pub pair_deadline: Duration,

    /// With --fabric (or --mesh): after each pair's verified write, a short `--bench lat` to
    /// the same server (2-byte ping-pongs, this many; 0: none). Default: 200 with --fabric,
    /// 20 with --mesh (a probe every few seconds).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    pub lat_iters: Option<u64>,

    /// With --fabric: then a short `--bench bw` (64 KiB writes, this many; 0: none); with
    /// --mesh, the size of each bandwidth sample (--bw-every).
    #[arg(long, value_name = "N", default_value_t = 200, value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    pub bw_iters: u64,

    /// With --fabric: re-test one pair alone, this node's write to HOST (a node of the list),
    /// e.g. an outlier the report flagged, from a script that runs one at a time. Its line
    /// (`retest: true`) replaces the pair's earlier one in --fabric-report.
    #[arg(
        long,
        value_name = "HOST",
        requires = "fabric",
        conflicts_with = "plan"
    )]
    pub retest: Option<String>,

    /// With --fabric (or --mesh): check every rail (`auto`: each ACTIVE RoCE port, by device name) or the
    /// first N, rail i of each node against rail i of every other, in the same rounds, over
    /// that rail's device and the peer's address on it (a node's name resolves to one address
    /// per rail); the report gives one matrix per rail.
    #[arg(
        long,
        value_name = "auto|N",
        requires = "rail_check",
        value_parser = rails::parse,
        conflicts_with_all = ["device", "gid_index"]
    )]
    pub rails: Option<rails::Rails>,

    /// Merge the `fabric_pair` JSON Lines of a fabric check (files, or stdin when none or `-`)
    /// into the N x N matrix, the bad pairs and the suspect nodes; exit non-zero if a pair failed.
    #[arg(long, value_name = "FILE", num_args = 0.., conflicts_with = "fabric")]
    pub fabric_report: Option<Vec<PathBuf>>,

    /// With --fabric-report: print only the outliers not yet re-tested alone, one `WRITER
    /// TARGET` line each (host names), for a script to re-test one at a time (`srun -N1 -w
    /// WRITER rdma-client --fabric --retest TARGET`); exits 0 whatever the pairs' verdicts.
    #[arg(long, requires = "fabric_report")]
    pub retest_list: bool,

    /// With --fabric-report: draw the matrix as a heat map into FILE (.png or .svg; repeatable).
    #[arg(long, value_name = "FILE", requires = "fabric_report")]
    pub heatmap: Vec<PathBuf>,

    /// A pair is an outlier when its latency is over FACTOR x the fabric's reference.
    #[arg(long, value_name = "FACTOR", default_value_t = 2.0, value_parser = positive)]
    pub lat_factor: f64,

    /// A pair is an outlier when its bandwidth is under FRACTION x the fabric's reference.
    #[arg(long, value_name = "FRACTION", default_value_t = 0.5, value_parser = positive)]
    pub bw_fraction: f64,
}

impl FabricArgs {
    /// Whether the command line asks for the fabric check or its report.
    #[must_use]
    pub fn asked(&self) -> bool {
        self.fabric || self.fabric_report.is_some()
    }

    /// `--lat-iters`, or the fabric check's default.
    #[must_use]
    pub fn lat_iters(&self) -> u64 {
        self.lat_iters.unwrap_or(200)
    }
}

fn positive(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("{text:?} is not a positive number")),
    }
}

/// `--fabric` or `--fabric-report`, from the command line.
#[derive(Debug)]
pub struct FabricTask {
    pub fabric: FabricArgs,
    /// What each pair writes, and how the target learns it is done.
    pub payload: crate::run::PayloadSource,
    /// `--notify`; `None`: what the device has (see [`crate::session::notify_for`]).
    pub notify: Option<rdma_proto::Notify>,
    /// How each pair's measurements post.
    pub knobs: crate::bench::Knobs,
    pub session: crate::session::SessionOptions,
    pub device: rdma_app::device::DeviceArgs,
}

/// Runs `--fabric` (with or without `--plan`) or `--fabric-report`.
pub fn run(task: &FabricTask, out: &Output) -> Result<()> {
    let f = &task.fabric;
    if let Some(files) = &f.fabric_report {
        return report_files(f, files, out);
    }
    if f.plan {
        return plan(f, out);
    }
    runner::run(task, out)
}

/// The world this task is part of: `--hosts/--rank`, else Slurm's environment.
pub fn world(f: &FabricArgs) -> Result<ranks::World, ranks::RankError> {
    match (&f.hosts, f.rank) {
        (Some(list), Some(rank)) => ranks::explicit(list, rank),
        (Some(list), None) => ranks::by_hostname(list, &this_host()),
        (None, _) => ranks::from_slurm(&|k| std::env::var(k).ok()),
    }
}

/// This node's name: Slurm's when in a Slurm step, else the host's own.
#[must_use]
pub fn this_host() -> String {
    let name = std::env::var("SLURMD_NODENAME").unwrap_or_else(|_| {
        std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default()
    });
    name.trim().to_owned()
}

fn plan(f: &FabricArgs, out: &Output) -> Result<()> {
    let list = match &f.hosts {
        Some(list) => list.clone(),
        None => ranks::slurm_node_list(&|k| std::env::var(k).ok())?,
    };
    let hosts = ranks::at_least_two(&list)?;
    let n = hosts.len();
    for s in schedule::plan(n) {
        out.emit(&Event::FabricPlan {
            round: s.round,
            rounds: schedule::rounds(n),
            writer: s.writer,
            writer_host: hosts[s.writer].as_str().into(),
            target: s.target,
            target_host: hosts[s.target].as_str().into(),
        });
    }
    Ok(())
}

fn report_files(f: &FabricArgs, files: &[PathBuf], out: &Output) -> Result<()> {
    let mut pairs = Vec::new();
    let mut skipped = 0;
    let mut seen = validate::Consistency::default();
    let stdin = [PathBuf::from("-")];
    for path in if files.is_empty() { &stdin[..] } else { files } {
        let (mut p, s) = if path.as_os_str() == "-" {
            report::read(std::io::stdin().lock(), "stdin", &mut seen)?
        } else {
            let name = path.display().to_string();
            let file = std::fs::File::open(path).map_err(|source| report::ReportError::Read {
                name: name.clone(),
                source,
            })?;
            report::read(BufReader::new(file), &name, &mut seen)?
        };
        pairs.append(&mut p);
        skipped += s;
    }
    let thresholds = report::Thresholds {
        lat_factor: f.lat_factor,
        bw_fraction: f.bw_fraction,
    };
    // One report, or one per rail.
    let reports = match rails::split(&pairs)? {
        None => vec![report::analyze(&pairs, skipped, thresholds)?],
        Some(by_rail) => by_rail
            .into_iter()
            .map(|(rail, lines)| {
                let mut r = report::analyze(&lines, skipped, thresholds)?;
                r.rail = Some(rail);
                Ok(r)
            })
            .collect::<Result<_, report::ReportError>>()?,
    };
    if f.retest_list {
        out.listing(&retest_list(&reports));
        return Ok(());
    }
    for r in &reports {
        out.emit(&Event::FabricReport(Cow::Borrowed(r)));
        for path in &f.heatmap {
            let path = match &r.rail {
                Some(rail) => heatmap::for_rail(path, rail.index),
                None => path.clone(),
            };
            heatmap::draw(r, &path).wrap_err("writing the heat map")?;
        }
    }
    let (failed, missing, pairs) = reports.iter().fold((0, 0, 0), |(f, m, p), r| {
        (f + r.failed, m + r.missing, p + r.pairs)
    });
    if failed + missing > 0 {
        return Err(FabricError::PairsFailed {
            failed,
            missing,
            pairs,
        }
        .into());
    }
    Ok(())
}

/// `--retest-list`: one `WRITER TARGET` line per outlier not yet re-tested alone (once for
/// a pair slow on several rails: its re-test runs them all).
fn retest_list(reports: &[report::Report]) -> String {
    let mut lines: Vec<String> = Vec::new();
    for p in reports.iter().flat_map(|r| &r.to_retest) {
        let line = format!(
            "{} {}\n",
            rdma_proto::printable(&p.writer_host),
            rdma_proto::printable(&p.target_host)
        );
        if !lines.contains(&line) {
            lines.push(line);
        }
    }
    lines.concat()
}

#[cfg(test)]
mod tests {
    use super::report::tests::{TH, three};
    use super::*;

    #[test]
    fn the_retest_list_names_the_outliers_not_yet_retested() {
        let mut v = three(Some(2), 4.0);
        let r = report::analyze(&v, 0, TH).unwrap();
        let want = "node1 node3\nnode2 node3\nnode3 node1\nnode3 node2\n";
        assert_eq!(retest_list(std::slice::from_ref(&r)), want);
        // Slow on two rails, listed once.
        assert_eq!(retest_list(&[r.clone(), r]), want);
        for p in &mut v {
            p.retest = true;
        }
        let r = report::analyze(&v, 0, TH).unwrap();
        assert_eq!(retest_list(std::slice::from_ref(&r)), "");
        assert_eq!(r.retests.len(), 6);
    }
}
