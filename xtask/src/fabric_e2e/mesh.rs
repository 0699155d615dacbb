//! The mesh phase of `fabric-e2e` (issue 24, steady state): every node runs `rdma-client
//! --mesh` against the others' servers for a few cycles, through the real RDMA path; every
//! ordered pair must be probed and verified, end up, never go down, and no probe may be
//! corrupt. Judged from the labelled JSON Lines of the `srun` (`RANK: {event}`).

use std::collections::BTreeMap;

use rdma_proto::events::client::Event;
use rdma_proto::events::mesh::{Cause, PairState, ProbeOutcome};

/// The mesh phase's interval and cycles: `mesh EVERY CYCLES` in the script (seconds).
pub const EVERY_S: u64 = 5;
pub const CYCLES: u64 = 4;

/// What one ordered pair showed.
#[derive(Debug, Default)]
struct PairSeen {
    ok: u64,
    failed: u64,
    skipped: u64,
    /// The pair's state after its last probe.
    last: PairState,
    /// The interval of the first probe after which it was up.
    up_at: Option<u64>,
}

/// Judges the mesh phase of `n` nodes from the `srun`'s exit status and its labelled lines.
/// Returns the verdict line, or why the phase is wrong.
pub fn check(srun_ok: bool, lines: &str, n: usize) -> Result<String, String> {
    let mut started: BTreeMap<usize, u64> = BTreeMap::new();
    let mut stopped: BTreeMap<usize, String> = BTreeMap::new();
    let mut pairs: BTreeMap<(usize, usize), PairSeen> = BTreeMap::new();
    let mut wrong = Vec::new();
    for line in lines.lines().filter(|l| !l.trim().is_empty()) {
        // srun --label: `RANK: LINE` (the task's rank is the node's place in the allocation).
        let Some((label, json)) = line.split_once(": ") else {
            return Err(format!("a line without srun's label: {line}"));
        };
        let task: usize = label
            .trim()
            .parse()
            .map_err(|_| format!("a line whose label is no task number: {line}"))?;
        let event: Event<'static> =
            rdma_proto::events::parse(json).map_err(|e| format!("task {task}: {e}"))?;
        match event {
            Event::MeshStarted { rank, cycle, .. } => {
                if rank != task {
                    wrong.push(format!("task {task} says it is rank {rank}"));
                }
                started.insert(task, cycle);
            }
            Event::MeshProbe {
                interval,
                peer_rank,
                outcome,
                cause,
                state,
                error,
                ..
            } => {
                let p = pairs.entry((task, peer_rank)).or_default();
                match outcome {
                    ProbeOutcome::Ok => p.ok += 1,
                    ProbeOutcome::Failed => p.failed += 1,
                    ProbeOutcome::Skipped => p.skipped += 1,
                    ProbeOutcome::Error => wrong.push(format!(
                        "{task} -> {peer_rank}: the prober's own error: {}",
                        error.as_deref().unwrap_or("?")
                    )),
                }
                if cause == Some(Cause::Corrupt) {
                    wrong.push(format!("{task} -> {peer_rank}: a corrupt verdict"));
                }
                p.last = state;
                if state == PairState::Up && p.up_at.is_none() {
                    p.up_at = Some(interval);
                }
            }
            Event::MeshState {
                peer_rank,
                to: PairState::Down,
                cause,
                ..
            } => wrong.push(format!(
                "{task} -> {peer_rank} went down ({cause:?}) on a healthy mesh"
            )),
            Event::MeshStopped { why, .. } => {
                stopped.insert(task, why.into_owned());
            }
            _ => {}
        }
    }
    if !srun_ok {
        wrong.push("the srun of the probers did not exit 0".into());
    }
    for rank in 0..n {
        if !started.contains_key(&rank) {
            wrong.push(format!("rank {rank}: no mesh_started"));
        }
        match stopped.get(&rank).map(String::as_str) {
            Some("cycles") => {}
            other => wrong.push(format!(
                "rank {rank}: should stop after its cycles; stopped: {other:?}"
            )),
        }
    }
    let mut latest_up = 0;
    for w in 0..n {
        for t in (0..n).filter(|&t| t != w) {
            let Some(p) = pairs.get(&(w, t)) else {
                wrong.push(format!("{w} -> {t}: never probed"));
                continue;
            };
            if p.ok == 0 || p.last != PairState::Up {
                wrong.push(format!(
                    "{w} -> {t}: {} ok, {} failed, {} skipped, last state {:?}: not up",
                    p.ok, p.failed, p.skipped, p.last
                ));
            }
            latest_up = latest_up.max(p.up_at.unwrap_or(u64::MAX));
        }
    }
    if pairs.keys().any(|&(w, t)| w == t || w >= n || t >= n) {
        wrong.push(format!(
            "a probe of a pair outside the mesh: {:?}",
            pairs.keys()
        ));
    }
    if !wrong.is_empty() {
        return Err(wrong.join("; "));
    }
    let (ok, failed, skipped) = pairs.values().fold((0, 0, 0), |(o, f, s), p| {
        (o + p.ok, f + p.failed, s + p.skipped)
    });
    let cycle = started.values().copied().max().unwrap_or(1).max(1);
    Ok(format!(
        "{} ordered pairs up (the last by interval {latest_up}, cycle {} of {CYCLES}); probes: {ok} ok, {failed} failed, {skipped} skipped",
        n * (n - 1),
        latest_up / cycle + 1
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn started(rank: usize) -> String {
        format!(
            r#"{rank}: {{"type":"mesh_started","node":"node{}","rank":{rank},"hosts":["node1","node2","node3"],"fan_out":2,"every_ms":5000,"cycle":1,"device":"rxe0","timestamps":false,"timestamps_why":"wall time","cycles":4}}"#,
            rank + 1
        )
    }

    fn probe(w: usize, t: usize, interval: u64, outcome: &str, state: &str) -> String {
        format!(
            r#"{w}: {{"type":"mesh_probe","interval":{interval},"peer":"node{}","peer_rank":{t},"device":"rxe0","rail":0,"outcome":"{outcome}","wall_ns":900000,"state":"{state}"}}"#,
            t + 1
        )
    }

    fn stopped(rank: usize) -> String {
        format!(
            r#"{rank}: {{"type":"mesh_stopped","why":"cycles","intervals":4,"probes":8,"failed":0,"skipped":0}}"#
        )
    }

    fn healthy(n: usize) -> Vec<String> {
        let mut lines: Vec<String> = (0..n).map(started).collect();
        for i in 0..2 {
            for w in 0..n {
                for t in (0..n).filter(|&t| t != w) {
                    let state = if i == 0 { "unknown" } else { "up" };
                    lines.push(probe(w, t, i, "ok", state));
                }
            }
        }
        lines.extend((0..n).map(stopped));
        lines
    }

    #[test]
    fn a_healthy_mesh_passes_with_every_pair_up() {
        let v = check(true, &healthy(3).join("\n"), 3).unwrap();
        assert!(
            v.starts_with("6 ordered pairs up (the last by interval 1"),
            "{v}"
        );
    }

    #[test]
    fn a_missing_pair_a_corrupt_probe_a_down_pair_or_a_failed_srun_fail_it() {
        let mut lines = healthy(3);
        lines.retain(|l| !l.contains(r#""peer_rank":2,"#) || !l.starts_with("1: "));
        let e = check(true, &lines.join("\n"), 3).unwrap_err();
        assert!(e.contains("1 -> 2: never probed"), "{e}");

        let mut lines = healthy(3);
        lines.push(r#"0: {"type":"mesh_probe","interval":3,"peer":"node2","peer_rank":1,"device":"rxe0","rail":0,"outcome":"failed","cause":"corrupt","state":"up"}"#.into());
        let e = check(true, &lines.join("\n"), 3).unwrap_err();
        assert!(e.contains("0 -> 1: a corrupt verdict"), "{e}");

        let mut lines = healthy(3);
        lines.push(r#"2: {"type":"mesh_state","peer":"node1","peer_rank":0,"device":"rxe0","rail":0,"from":"up","to":"down","cause":"rdma"}"#.into());
        lines.push(probe(2, 0, 3, "failed", "down"));
        let e = check(true, &lines.join("\n"), 3).unwrap_err();
        assert!(e.contains("2 -> 0 went down"), "{e}");
        assert!(e.contains("last state Down"), "{e}");

        let e = check(false, &healthy(3).join("\n"), 3).unwrap_err();
        assert!(e.contains("did not exit 0"), "{e}");
    }

    #[test]
    fn a_line_that_is_no_labelled_event_is_named() {
        let mut lines = healthy(3);
        lines.push("srun: error: node3: task 2: Exited with exit code 1".into());
        let e = check(true, &lines.join("\n"), 3).unwrap_err();
        assert!(
            e.contains("task number") || e.contains("not an event"),
            "{e}"
        );
    }
}
