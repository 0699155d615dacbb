//! The fabric check: every ordered pair of N nodes does the seed's verified RDMA Write, round by
//! round (`fabric`, one task per node, e.g. under `srun`), and `fabric report` merges what
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

/// The fabric check's flags (`rdma-client fabric`): this node's part of the check. In each
/// round of the schedule, the seed's verified write to this round's partner, then a short
/// latency and bandwidth measurement; one `fabric_pair` event per pair. Every node runs
/// `rdma-server --serve --max-clients 1`.
#[derive(Debug, clap::Args)]
#[command(next_help_heading = "Fabric check")]
pub struct FabricArgs {
    /// Print the schedule (round, writer, target) and exit, touching no RDMA
    #[arg(long)]
    pub plan: bool,

    /// The nodes, a hostlist (node[01-04,07],login1); default: Slurm's node list
    #[arg(long, value_name = "LIST")]
    pub hosts: Option<String>,

    /// This node's rank among --hosts (sorted); default: its place by host name
    #[arg(long, value_name = "N", requires = "hosts")]
    pub rank: Option<usize>,

    /// TCP port of every node's rdma-server
    #[arg(long, value_name = "PORT", default_value_t = DEFAULT_PORT)]
    pub fabric_port: u16,

    /// How long each pair may take, its wait for its target's server to be free or up included
    #[arg(long, value_name = "DURATION", default_value = "120s", value_parser = app::parse_duration)]
    pub pair_deadline: Duration,

    /// 2-byte ping-pongs after each pair's write (0: none)
    #[arg(long, value_name = "N", default_value_t = 200, value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    pub lat_iters: u64,

    /// 64 KiB writes after that (0: none)
    #[arg(long, value_name = "N", default_value_t = 200, value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    pub bw_iters: u64,

    /// Re-test one pair alone, this node's write to HOST (an outlier of the report)
    #[arg(long, value_name = "HOST", conflicts_with = "plan")]
    pub retest: Option<String>,

    /// Check every rail (auto: each ACTIVE RoCE port) or the first N, rail i against rail i
    #[arg(
        long,
        value_name = "auto|N",
        value_parser = rails::parse,
        conflicts_with_all = ["device", "gid_index"]
    )]
    pub rails: Option<rails::Rails>,
}

/// `rdma-client fabric report [FILE]...`: merge the `fabric_pair` lines of a check.
#[derive(Debug, Clone, clap::Args)]
pub struct ReportArgs {
    /// The nodes' JSON Lines (default, or `-`: stdin)
    #[arg(value_name = "FILE")]
    pub files: Vec<PathBuf>,

    /// Print only the outliers not yet re-tested, one `WRITER TARGET` line each; exit 0
    #[arg(long)]
    pub retest_list: bool,

    /// Draw the matrix as a heat map into FILE (.png or .svg; repeatable)
    #[arg(long, value_name = "FILE")]
    pub heatmap: Vec<PathBuf>,

    /// A pair is an outlier when its latency is over FACTOR x the fabric's reference
    #[arg(long, value_name = "FACTOR", default_value_t = 2.0, value_parser = positive)]
    pub lat_factor: f64,

    /// A pair is an outlier when its bandwidth is under FRACTION x the fabric's reference
    #[arg(long, value_name = "FRACTION", default_value_t = 0.5, value_parser = positive)]
    pub bw_fraction: f64,
}

fn positive(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("{text:?} is not a positive number")),
    }
}

/// `rdma-client fabric`, from the command line.
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

/// Runs `rdma-client fabric` (with or without `--plan`).
pub fn run(task: &FabricTask, out: &Output) -> Result<()> {
    let f = &task.fabric;
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

/// Runs `rdma-client fabric report`.
pub fn report(f: &ReportArgs, out: &Output) -> Result<()> {
    let files = &f.files;
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
