//! The mesh's figures from what the guests printed, pure: each prober's run from its events
//! and when each line came ([`prober`]), each server's cost from its `/proc` readings
//! ([`server`]), and the rows `results.json` and `mesh.csv` keep ([`Mesh`]). Anything missing
//! or that does not add up is an error that says what: a figure is never a silent zero.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use rdma_proto::events::client::Event;
use rdma_proto::events::mesh::{Cause, ProbeOutcome};
use serde::{Deserialize, Serialize};

use crate::bench::procfs::Usage;
use crate::bench::stamp::Stamps;

/// How far before its fire time a probe's result may seem to come (the two lines' stamps
/// are taken by a reader thread that a loaded emulated CPU can delay) before the stamps are
/// taken not to fit the schedule.
const EARLY_MS: f64 = 100.0;

/// What the bench ran: `--every`, `--mesh-cycles`, the nodes (rank order).
#[derive(Debug, Clone, PartialEq)]
pub struct Setting {
    pub every: Duration,
    pub cycles: u32,
    pub nodes: Vec<String>,
    /// The probers run with `--no-reuse`: a new write session every probe, instead of the
    /// path's kept one (rounds).
    pub no_reuse: bool,
}

/// The whole measurement, as `results.json` keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Mesh {
    pub every_s: f64,
    pub cycles: u32,
    /// The probers ran with `--no-reuse` (see [`Setting::no_reuse`]).
    #[serde(default)]
    pub no_reuse: bool,
    pub nodes: Vec<MeshNode>,
}

/// One node: its prober, and its server under the other nodes' probes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MeshNode {
    pub rank: usize,
    pub node: String,
    pub prober: ProberRun,
    pub server: ServerUse,
}

/// One prober's run, from its events and when each came.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProberRun {
    pub ok: u64,
    /// Ok probes whose write went on the path's kept session (rounds), not a new one.
    #[serde(default)]
    pub reused: u64,
    pub failed: u64,
    /// Skipped probes, from `mesh_stopped` (it also counts the intervals a stall dropped,
    /// which have no event).
    pub skipped: u64,
    /// Probes the prober itself failed (outcome `error`).
    pub errors: u64,
    pub intervals: u64,
    /// Why it stopped (`cycles` or `signal`).
    pub stopped: String,
    /// Seconds from `mesh_started` to `mesh_stopped` (device open and process start left out).
    pub wall_s: f64,
    /// `ok / wall_s`.
    pub probes_per_s: f64,
    /// From the fire time (the run's start, its interval, this node's phase) of a probe that
    /// went through all its steps (ok, or failed only as `slow`) to its result: the time one
    /// probe takes, median and most, milliseconds.
    pub probe_ms_median: f64,
    pub probe_ms_max: f64,
}

/// One server's cost over the mesh, from `/proc` before the other probers started and after
/// they ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerUse {
    /// The other nodes' probes of this server that ran (ok or failed).
    pub served: u64,
    /// utime + stime over the mesh, milliseconds.
    pub cpu_ms: f64,
    pub cpu_per_probe_ms: f64,
    /// `VmRSS` before the probes, after them, and `VmHWM` after them, KiB.
    pub rss_before_kb: u64,
    pub rss_kb: u64,
    pub hwm_kb: u64,
    /// Sessions the server counted over its life (its `stopped` event), when it said.
    pub sessions: Option<u64>,
}

/// A prober's run and the probes it ran to each peer rank.
#[derive(Debug, Clone, PartialEq)]
pub struct Probed {
    pub run: ProberRun,
    pub ran_to: BTreeMap<usize, u64>,
}

/// The run of the prober of `rank`, one of `setting`'s nodes, from its stdout (JSON Lines of
/// `rdma-client mesh --json --jitter 0`) and the stamps of those lines.
pub fn prober(
    stdout: &str,
    stamps: &Stamps,
    rank: usize,
    setting: &Setting,
) -> Result<Probed, String> {
    let lines: Vec<&str> = stdout.lines().collect();
    if lines.len() != stamps.line_ms.len() {
        return Err(format!(
            "{} stdout lines but {} stamps (output cut?)",
            lines.len(),
            stamps.line_ms.len()
        ));
    }
    let every_ms = setting.every.as_secs_f64() * 1000.0;
    let n = setting.nodes.len().max(1);
    // With no jitter, node i of n fires i/n into each interval (the mesh's schedule).
    let phase_ms = every_ms * rank as f64 / n as f64;
    let (mut started, mut stopped) = (None, None);
    let (mut ok, mut failed, mut errors, mut reused_ok) = (0u64, 0u64, 0u64, 0u64);
    let mut ran_to: BTreeMap<usize, u64> = BTreeMap::new();
    let mut took: Vec<f64> = Vec::new();
    for (i, (line, &at)) in lines.iter().zip(&stamps.line_ms).enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let event: Event<'static> =
            rdma_proto::events::parse(line).map_err(|e| format!("line {}: {e}", i + 1))?;
        match event {
            Event::MeshStarted {
                rank: r,
                every_ms: e,
                hosts,
                ..
            } => {
                let want = u64::try_from(setting.every.as_millis()).unwrap_or(u64::MAX);
                if r != rank || e != want || hosts != setting.nodes {
                    return Err(format!(
                        "mesh_started says rank {r} of {hosts:?} every {e} ms; the bench ran rank {rank} of {:?} every {want} ms",
                        setting.nodes
                    ));
                }
                started = Some(at);
            }
            Event::MeshProbe {
                interval,
                peer_rank,
                outcome,
                cause,
                reused,
                ..
            } => {
                let Some(t0) = started else {
                    return Err(format!("line {}: a probe before mesh_started", i + 1));
                };
                match outcome {
                    ProbeOutcome::Ok => {
                        ok += 1;
                        reused_ok += u64::from(reused);
                    }
                    ProbeOutcome::Failed => failed += 1,
                    ProbeOutcome::Skipped => {}
                    ProbeOutcome::Error => errors += 1,
                }
                if matches!(outcome, ProbeOutcome::Ok | ProbeOutcome::Failed) {
                    *ran_to.entry(peer_rank).or_default() += 1;
                }
                // A probe that went through all its steps: ok, or judged slow after them.
                let whole = outcome == ProbeOutcome::Ok || cause == Some(Cause::Slow);
                if whole {
                    let fire = t0 + interval as f64 * every_ms + phase_ms;
                    if at < fire - EARLY_MS {
                        return Err(format!(
                            "the result of interval {interval} came {:.0} ms before its fire time: the stamps do not fit the schedule",
                            fire - at
                        ));
                    }
                    took.push((at - fire).max(0.0));
                }
            }
            Event::MeshStopped {
                why,
                intervals,
                probes,
                skipped,
                ..
            } => {
                if probes != ok + failed {
                    return Err(format!(
                        "mesh_stopped counts {probes} probes, its events {} (ok {ok}, failed {failed}): lines lost?",
                        ok + failed
                    ));
                }
                stopped = Some((at, why.into_owned(), intervals, skipped));
            }
            Event::Error { message, .. } => return Err(format!("the prober failed: {message}")),
            _ => {}
        }
    }
    let t0 = started.ok_or("no mesh_started")?;
    let (t1, why, intervals, skipped) = stopped.ok_or("no mesh_stopped (killed or cut short?)")?;
    if why != "cycles" {
        return Err(format!(
            "it stopped by {why:?}, not after its {} cycles",
            setting.cycles
        ));
    }
    let wall_s = (t1 - t0) / 1000.0;
    if ok == 0 || wall_s <= 0.0 {
        return Err(format!(
            "no probe was ok ({failed} failed, {errors} the prober's own errors) in {wall_s:.1} s: no rate to measure"
        ));
    }
    // ok > 0, so `took` has a value at least (results.rs's median is not used: it needs this
    // file's types, and a file may not need what needs it).
    took.sort_by(f64::total_cmp);
    let mid = took.len() / 2;
    let median = match (took.len() % 2, mid.checked_sub(1)) {
        (0, Some(below)) => f64::midpoint(took[below], took[mid]),
        _ => took.get(mid).copied().unwrap_or(0.0),
    };
    let run = ProberRun {
        ok,
        reused: reused_ok,
        failed,
        skipped,
        errors,
        intervals,
        stopped: why,
        wall_s,
        probes_per_s: ok as f64 / wall_s,
        probe_ms_median: median,
        probe_ms_max: took.last().copied().unwrap_or(0.0),
    };
    Ok(Probed { run, ran_to })
}

/// A server's cost over the probes it `served`, from its readings `before` the others' probes
/// and `after` them; `sessions` from its own `stopped` event.
pub fn server(
    before: &Usage,
    after: &Usage,
    served: u64,
    sessions: Option<u64>,
) -> Result<ServerUse, String> {
    if before.pid != after.pid {
        return Err(format!(
            "read process {} before and {} after: the server restarted?",
            before.pid, after.pid
        ));
    }
    let cpu_ms = after.cpu_ms - before.cpu_ms;
    if !cpu_ms.is_finite() || cpu_ms < 0.0 {
        return Err(format!(
            "CPU went from {} ms to {} ms",
            before.cpu_ms, after.cpu_ms
        ));
    }
    if served == 0 {
        return Err("no probe reached it: no CPU per probe".into());
    }
    let memory = |u: &Usage, when: &str| match (u.rss_kb, u.hwm_kb) {
        (Some(rss), Some(hwm)) => Ok((rss, hwm)),
        _ => Err(format!("the reading {when} has no VmRSS or VmHWM")),
    };
    let (rss_before_kb, _) = memory(before, "before")?;
    let (rss_kb, hwm_kb) = memory(after, "after")?;
    Ok(ServerUse {
        served,
        cpu_ms,
        cpu_per_probe_ms: cpu_ms / served as f64,
        rss_before_kb,
        rss_kb,
        hwm_kb,
        sessions,
    })
}

/// `mesh.csv`: one row per node.
pub fn csv(m: &Mesh) -> String {
    let mut s = String::from(
        "rank,node,every_s,cycles,ok,failed,skipped,errors,wall_s,probes_per_s,probe_ms_median,\
         probe_ms_max,served,server_cpu_ms,server_cpu_per_probe_ms,server_rss_before_kb,\
         server_rss_kb,server_hwm_kb,server_sessions,reused\n",
    );
    for n in &m.nodes {
        let (p, v) = (&n.prober, &n.server);
        let _ = writeln!(
            s,
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
            n.rank,
            n.node,
            m.every_s,
            m.cycles,
            p.ok,
            p.failed,
            p.skipped,
            p.errors,
            p.wall_s,
            p.probes_per_s,
            p.probe_ms_median,
            p.probe_ms_max,
            v.served,
            v.cpu_ms,
            v.cpu_per_probe_ms,
            v.rss_before_kb,
            v.rss_kb,
            v.hwm_kb,
            v.sessions.map_or_else(String::new, |x| x.to_string()),
            p.reused,
        );
    }
    s
}

/// The report's lines.
pub fn render(m: &Mesh) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "    the write: {}",
        if m.no_reuse {
            "a new session every probe (--no-reuse)"
        } else {
            "on the path's kept session (rounds), after its first"
        }
    );
    let mib = |kb: u64| kb as f64 / 1024.0;
    for n in &m.nodes {
        let (p, v) = (&n.prober, &n.server);
        let _ = writeln!(
            s,
            "    rank {} ({}): {:.2} probes/s ({} ok, {} of them on a kept session, {} failed, {} skipped, {} errors in {:.1} s); one probe {:.0} ms median, {:.0} ms most (one at a time: at most {:.2}/s to a peer)",
            n.rank,
            n.node,
            p.probes_per_s,
            p.ok,
            p.reused,
            p.failed,
            p.skipped,
            p.errors,
            p.wall_s,
            p.probe_ms_median,
            p.probe_ms_max,
            1000.0 / p.probe_ms_median.max(1.0),
        );
        let _ = writeln!(
            s,
            "      its server: {:.2} ms CPU per probe served ({:.0} ms for {} probes{}), VmRSS {:.1} MiB (before {:.1} MiB), VmHWM {:.1} MiB",
            v.cpu_per_probe_ms,
            v.cpu_ms,
            v.served,
            v.sessions
                .map_or_else(String::new, |x| format!(", {x} sessions")),
            mib(v.rss_kb),
            mib(v.rss_before_kb),
            mib(v.hwm_kb),
        );
    }
    s
}

#[cfg(test)]
pub(super) mod tests;
