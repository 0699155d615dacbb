//! The mesh phase judged from the probers' own events (each node's `--json` output), beside
//! what Prometheus showed the checks: every pair's state changes, in order, must be the ones
//! its faults explain and no others.
//!
//! - a pair the faults do not touch: `unknown → up`, then nothing (no flap);
//! - a pair through a faulted node, for each of its faults in turn (the dead node's, then the
//!   broken NIC's): `up → down` after exactly `--down-after` failed probes, `down → up` (or
//!   through `degraded`, when a probe of its way back was slow). Through the dead node, some
//!   probe failed `host` while it was down; through the NIC's, it went down with cause `rdma`,
//!   and probes to that node failed `host` or `refused` while its server was stopped. A pair
//!   of the lossy link may then go `degraded` and back, never `down`;
//! - no probe `corrupt`, none the prober's own `error`;
//! - a pair whose server was never restarted writes and pings on its first sessions all along
//!   (rounds and bench rounds, the servers' default keep-alive outlasting an interval): every
//!   ok probe after its first opened no session (`reused`: its write and its lat exchange on
//!   the path's kept ones), but where a failed probe before it explains a new one, or the
//!   servers' lifetime of a kept lat session (`--bench-max-time`) ran out since the last;
//! - every ok probe's lat exchange ended with the stamped exchange (`stamped`: a write with
//!   immediate each way; the guests' Soft-RoCE stamps nothing, so round trips stay wall time).

use std::collections::BTreeMap;

use crate::scenario::transcript::Role;
use rdma_proto::events::client::Event;
use rdma_proto::events::mesh::{Cause, PairState, ProbeOutcome};

/// What one ordered pair showed, in order.
#[derive(Debug, Default)]
struct Pair {
    /// State changes: (from, to).
    changes: Vec<(PairState, PairState)>,
    /// Each time it went down, in order.
    downs: Vec<Outage>,
    run: u32,
    /// The causes of the failed probes of the run so far.
    run_causes: Vec<Cause>,
    ok: u64,
    failed: u64,
    /// Ok probes that reused the path's kept session.
    reused: u64,
    /// The last interval it was probed in.
    last_interval: u64,
    /// Ok probes whose lat exchange ended with the stamped exchange.
    stamped: u64,
}

/// One time a pair went down.
#[derive(Debug, Default)]
struct Outage {
    /// Failed probes in a row just before.
    before: u32,
    /// The cause the prober gave the change.
    cause: Option<Cause>,
    /// The causes of those failed probes, and of those while it was down.
    causes: Vec<Cause>,
}

/// The nodes' events: `probers[r]` is rank `r`'s prober step, its output read as client
/// events by the run's `Transcript` (`None`: it did not run). `dead` (the node that sent
/// nothing, first), `faulted` (its NIC broken, then its server stopped) and `lossy` are ranks;
/// the servers end a kept lat session every `renew_every` intervals (their
/// `--bench-max-time`), so a pair opens a new one that often. Returns the verdict line, or
/// what is wrong.
pub fn check(
    probers: &[Option<&Role>],
    dead: usize,
    faulted: usize,
    lossy: [usize; 2],
    down_after: u32,
    renew_every: u64,
) -> Result<String, String> {
    let n = probers.len();
    let mut wrong = Vec::new();
    let mut pairs: BTreeMap<(usize, usize), Pair> = BTreeMap::new();
    for (me, role) in probers.iter().enumerate() {
        let Some(role) = role else {
            wrong.push(format!("node{}: its prober did not run", me + 1));
            continue;
        };
        wrong.extend(
            role.strangers
                .iter()
                .map(|e| format!("node{}: {e}", me + 1)),
        );
        let mut started = false;
        for event in role.client.iter().cloned() {
            match event {
                Event::MeshStarted { rank, .. } => {
                    started = true;
                    if rank != me {
                        wrong.push(format!("node{} says it is rank {rank}", me + 1));
                    }
                }
                Event::MeshProbe {
                    interval,
                    peer_rank,
                    outcome,
                    cause,
                    error,
                    reused,
                    stamped,
                    ..
                } => {
                    let p = pairs.entry((me, peer_rank)).or_default();
                    p.last_interval = p.last_interval.max(interval);
                    if reused && outcome == ProbeOutcome::Ok {
                        p.reused += 1;
                    }
                    if stamped && outcome == ProbeOutcome::Ok {
                        p.stamped += 1;
                    }
                    match outcome {
                        // A slow probe (reported failed, cause slow) reached the server: like
                        // an ok one it ends a run of failures, as the prober's state machine
                        // counts them.
                        ProbeOutcome::Ok => {
                            p.ok += 1;
                            p.run = 0;
                            p.run_causes.clear();
                        }
                        ProbeOutcome::Failed if cause == Some(Cause::Slow) => {
                            p.run = 0;
                            p.run_causes.clear();
                        }
                        ProbeOutcome::Failed => {
                            p.failed += 1;
                            p.run += 1;
                            p.run_causes.extend(cause);
                            let down = p.changes.last().is_some_and(|c| c.1 == PairState::Down);
                            if let (true, Some(c), Some(d)) = (down, cause, p.downs.last_mut()) {
                                d.causes.push(c);
                            }
                        }
                        ProbeOutcome::Skipped => {}
                        ProbeOutcome::Error => wrong.push(format!(
                            "{me} -> {peer_rank}: the prober's own error: {}",
                            error.as_deref().unwrap_or("?")
                        )),
                    }
                    if cause == Some(Cause::Corrupt) {
                        wrong.push(format!("{me} -> {peer_rank}: a corrupt probe"));
                    }
                }
                Event::MeshState {
                    peer_rank,
                    from,
                    to,
                    cause,
                    ..
                } => {
                    let p = pairs.entry((me, peer_rank)).or_default();
                    if to == PairState::Down {
                        // The probe that moved it is reported just before the change.
                        p.downs.push(Outage {
                            before: p.run,
                            cause,
                            causes: p.run_causes.clone(),
                        });
                    }
                    p.changes.push((from, to));
                }
                _ => {}
            }
        }
        if !started {
            wrong.push(format!("node{}: no mesh_started", me + 1));
        }
    }
    use PairState::{Degraded, Down, Unknown, Up};
    for w in 0..n {
        for t in (0..n).filter(|&t| t != w) {
            let name = format!("node{} -> node{}", w + 1, t + 1);
            let Some(p) = pairs.get(&(w, t)) else {
                wrong.push(format!("{name}: never probed"));
                continue;
            };
            let moves = &p.changes;
            let touches = |node: usize| w == node || t == node;
            // Its faults, in the order they came.
            let faults: Vec<usize> = [dead, faulted]
                .into_iter()
                .filter(|&f| touches(f))
                .collect();
            let on_lossy = lossy.contains(&w) && lossy.contains(&t);
            let fresh = p.ok - p.reused;
            let renewed = p.last_interval / renew_every.max(1);
            if !touches(faulted) && fresh > 1 + p.failed + renewed {
                wrong.push(format!(
                    "{name}: {fresh} of its {} ok probes opened a new session ({} failed, {renewed} \
                     ended by the server's lifetime): a kept session was not reused",
                    p.ok, p.failed
                ));
            }
            if p.stamped < p.ok {
                wrong.push(format!(
                    "{name}: {} of its {} ok probes did not end their lat exchange with the stamped exchange",
                    p.ok - p.stamped,
                    p.ok
                ));
            }
            // Up; for each fault down and back up (through degraded when a probe of its way
            // back was slow); then only the lossy link's pairs may degrade and recover.
            let mut rest = match moves.as_slice() {
                [(Unknown, Up), tail @ ..] => Some(tail),
                _ => None,
            };
            for _ in &faults {
                rest = rest.and_then(|r| match r {
                    [(Up, Down), (Down, Up), tail @ ..]
                    | [(Up, Down), (Down, Degraded), (Degraded, Up), tail @ ..] => Some(tail),
                    _ => None,
                });
            }
            let ok = rest.is_some_and(|tail| {
                tail.iter()
                    .all(|&(f, to)| on_lossy && matches!((f, to), (Up, Degraded) | (Degraded, Up)))
            });
            if !ok {
                wrong.push(format!(
                    "{name}: state changes {moves:?} are not what its faults explain"
                ));
                continue;
            }
            for (&fault, d) in faults.iter().zip(&p.downs) {
                if d.before != down_after {
                    wrong.push(format!(
                        "{name}: went down after {} failed probes in a row, not --down-after {down_after}",
                        d.before
                    ));
                }
                if fault == dead {
                    if !d.causes.contains(&Cause::Host) {
                        wrong.push(format!(
                            "{name}: no probe failed host while node{} sent nothing (causes: {:?})",
                            dead + 1,
                            d.causes
                        ));
                    }
                    continue;
                }
                if d.cause != Some(Cause::Rdma) {
                    wrong.push(format!(
                        "{name}: went down with {:?}, not cause rdma (only RoCE was blocked)",
                        d.cause
                    ));
                }
                if t == faulted
                    && !d
                        .causes
                        .iter()
                        .any(|c| matches!(c, Cause::Host | Cause::Refused))
                {
                    wrong.push(format!(
                        "{name}: no probe failed host or refused while its server was stopped (causes: {:?})",
                        d.causes
                    ));
                }
            }
        }
    }
    if !wrong.is_empty() {
        return Err(wrong.join("; "));
    }
    let (ok, failed, reused) = pairs.values().fold((0, 0, 0), |(o, f, r), p| {
        (o + p.ok, f + p.failed, r + p.reused)
    });
    Ok(format!(
        "{} ordered pairs: the {} through node{} down (host, after {down_after} probes) and up again, then the {} through node{} (rdma), {untouched}; probes: {ok} ok ({reused} on a kept session, every one's lat exchange ended with the stamped exchange), {failed} failed, none corrupt",
        n * (n - 1),
        2 * (n - 1),
        dead + 1,
        2 * (n - 1),
        faulted + 1,
        untouched = match (n * (n - 1)).saturating_sub(2 * (2 * (n - 1) - 1)) {
            0 => "no pair untouched".to_owned(),
            k => format!("the other {k} never moved"),
        }
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::exit::Speaks;

    /// A probe's event; an ok one's lat exchange ended with the stamped exchange.
    fn probe(t: usize, outcome: &str, cause: Option<&str>, state: &str) -> String {
        let cause = cause.map_or(String::new(), |c| format!(r#","cause":"{c}""#));
        let stamped = if outcome == "ok" {
            r#","stamped":true"#
        } else {
            ""
        };
        format!(
            r#"{{"type":"mesh_probe","interval":0,"peer":"node{}","peer_rank":{t},"device":"rxe0","rail":0,"outcome":"{outcome}"{cause},"state":"{state}"{stamped}}}"#,
            t + 1
        )
    }

    fn state(t: usize, from: &str, to: &str, cause: Option<&str>) -> String {
        let cause = cause.map_or(String::new(), |c| format!(r#","cause":"{c}""#));
        format!(
            r#"{{"type":"mesh_state","peer":"node{}","peer_rank":{t},"device":"rxe0","rail":0,"from":"{from}","to":"{to}"{cause}}}"#,
            t + 1
        )
    }

    fn started(r: usize) -> String {
        format!(
            r#"{{"type":"mesh_started","node":"node{}","rank":{r},"hosts":["node1","node2","node3"],"fan_out":8,"every_ms":3000,"cycle":1,"device":"rxe0","timestamps":false,"timestamps_why":"wall time"}}"#,
            r + 1
        )
    }

    /// What a good run of rank `me` prints: up; through node2 (dead): down (a kept session's
    /// rdma, then host, 2 failed), host while down, up again; through node3: down (rdma, 2
    /// failed), host while its server is stopped (when probing node3), up again.
    fn good(me: usize) -> String {
        let mut l = vec![started(me)];
        for t in (0..3).filter(|&t| t != me) {
            // A probe's event comes before the change it makes; the second writes on the
            // first's session.
            l.push(probe(t, "ok", None, "unknown"));
            l.push(reused(&probe(t, "ok", None, "up")));
            l.push(state(t, "unknown", "up", None));
            if me == 1 || t == 1 {
                l.push(probe(t, "failed", Some("rdma"), "up"));
                l.push(probe(t, "failed", Some("host"), "down"));
                l.push(state(t, "up", "down", Some("host")));
                l.push(probe(t, "failed", Some("host"), "down"));
                l.push(probe(t, "ok", None, "down"));
                l.push(probe(t, "ok", None, "up"));
                l.push(state(t, "down", "up", None));
            }
            if me == 2 || t == 2 {
                l.push(probe(t, "failed", Some("rdma"), "up"));
                l.push(probe(t, "failed", Some("rdma"), "down"));
                l.push(state(t, "up", "down", Some("rdma")));
                let c = if t == 2 { "host" } else { "rdma" };
                l.push(probe(t, "failed", Some(c), "down"));
                l.push(probe(t, "ok", None, "down"));
                l.push(probe(t, "ok", None, "up"));
                l.push(state(t, "down", "up", None));
            }
        }
        l.join("\n")
    }

    /// The servers end a kept lat session every this many intervals.
    const RENEW_EVERY: u64 = 12;

    fn reused(probe: &str) -> String {
        probe.replacen(r#""state""#, r#""reused":true,"state""#, 1)
    }

    fn run(streams: &[String]) -> Result<String, String> {
        let roles: Vec<Role> = streams
            .iter()
            .map(|out| Role::of_stdout(crate::fabric_e2e::mesh::PROBER, out, Speaks::Client))
            .collect();
        let probers: Vec<Option<&Role>> = roles.iter().map(Some).collect();
        check(&probers, 1, 2, [1, 2], 2, RENEW_EVERY)
    }

    #[test]
    fn the_faults_own_changes_pass() {
        let mut s: Vec<String> = (0..3).map(good).collect();
        // The lossy link's pair may degrade and recover after the restore.
        s[1].push('\n');
        s[1].push_str(&state(2, "up", "degraded", Some("slow")));
        s[1].push('\n');
        s[1].push_str(&state(2, "degraded", "up", None));
        let v = run(&s).unwrap();
        assert!(
            v.starts_with("6 ordered pairs: the 4 through node2 down (host, after 2 probes) and up again, then the 4 through node3"),
            "{v}"
        );
        // Through the dead node, a host failure among those that took the pair down will do
        // (it came back before its next probe).
        let went = state(1, "up", "down", Some("host"));
        let while_down = probe(1, "failed", Some("host"), "down");
        let both = format!("{went}\n{while_down}");
        assert!(s[0].contains(&both));
        s[0] = s[0].replacen(&both, &went, 1);
        assert!(run(&s).is_ok(), "{:?}", run(&s));
        // Back from down through degraded (a slow probe on its way back), then up: fine;
        // left degraded, or degraded again off the lossy link: not.
        let back = |tail: &[String]| {
            let mut s: Vec<String> = (0..3).map(good).collect();
            s[2] = s[2].replace(
                &state(0, "down", "up", None),
                &[state(0, "down", "degraded", Some("slow"))]
                    .iter()
                    .chain(tail)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join("\n"),
            );
            run(&s)
        };
        assert!(back(&[state(0, "degraded", "up", None)]).is_ok());
        assert!(
            back(&[])
                .unwrap_err()
                .contains("node3 -> node1: state changes")
        );
        let again = [
            state(0, "degraded", "up", None),
            state(0, "up", "degraded", Some("slow")),
        ];
        assert!(
            back(&again)
                .unwrap_err()
                .contains("node3 -> node1: state changes")
        );
    }

    /// A line that is no client event, and a prober that did not run, are named.
    #[test]
    fn a_line_that_is_no_event_and_a_missing_prober_are_named() {
        let mut s: Vec<String> = (0..3).map(good).collect();
        s[2].push_str("\n{\"type\":\"mesh_nonsense\"}");
        let e = run(&s).unwrap_err();
        assert!(e.contains("node3: ") && e.contains("mesh_nonsense"), "{e}");
        let e = check(&[None, None, None], 1, 2, [1, 2], 2, RENEW_EVERY).unwrap_err();
        assert!(e.contains("node1: its prober did not run"), "{e}");
    }

    #[test]
    fn an_ok_probe_without_the_stamped_exchange_is_named() {
        let mut s: Vec<String> = (0..3).map(good).collect();
        let stamped = reused(&probe(0, "ok", None, "up"));
        assert!(s[1].contains(&stamped));
        s[1] = s[1].replacen(&stamped, &stamped.replace(r#","stamped":true"#, ""), 1);
        let e = run(&s).unwrap_err();
        assert!(
            e.contains("node2 -> node1: 1 of its 4 ok probes did not end their lat exchange with the stamped exchange"),
            "{e}"
        );
    }

    #[test]
    fn a_pair_that_opened_new_sessions_unexplained_is_named() {
        let v = run(&(0..3).map(good).collect::<Vec<_>>()).unwrap();
        assert!(v.contains("(6 on a kept session, "), "{v}");
        // node1 -> node2 (its server never restarted): three more new sessions than its 2
        // failed probes explain.
        let mut s: Vec<String> = (0..3).map(good).collect();
        let fresh = probe(1, "ok", None, "up");
        for _ in 0..3 {
            s[0].push('\n');
            s[0].push_str(&fresh);
        }
        let e = run(&s).unwrap_err();
        assert!(
            e.contains("node1 -> node2: 6 of its 7 ok probes opened a new session (3 failed, 0 ended by the server's lifetime)"),
            "{e}"
        );
        // Explained by the server's lifetime of a kept session, run out since: fine.
        let mut late = s[0].clone();
        late.push('\n');
        late.push_str(&reused(&fresh).replace(
            r#""interval":0"#,
            &format!(r#""interval":{}"#, 2 * RENEW_EVERY),
        ));
        assert!(run(&[late, s[1].clone(), s[2].clone()]).is_ok());
        // Explained by failed probes before them: fine.
        s[0].push('\n');
        s[0].push_str(
            &[
                probe(1, "failed", Some("rdma"), "up"),
                probe(1, "failed", Some("rdma"), "up"),
            ]
            .join("\n"),
        );
        assert!(run(&s).is_ok(), "{:?}", run(&s));
    }

    #[test]
    fn a_flap_a_wrong_cause_a_late_down_or_a_corrupt_probe_is_named() {
        let mut s: Vec<String> = (0..3).map(good).collect();
        s[0].push('\n');
        s[0].push_str(&state(1, "up", "degraded", Some("slow")));
        let e = run(&s).unwrap_err();
        assert!(e.contains("node1 -> node2: state changes"), "{e}");

        // Degraded off the lossy link.
        let mut s: Vec<String> = (0..3).map(good).collect();
        s[0].push('\n');
        s[0].push_str(&state(2, "up", "degraded", Some("slow")));
        assert!(
            run(&s)
                .unwrap_err()
                .contains("node1 -> node3: state changes")
        );

        let s: Vec<String> = (0..3)
            .map(|m| {
                good(m).replace(
                    r#""to":"down","cause":"rdma""#,
                    r#""to":"down","cause":"host""#,
                )
            })
            .collect();
        assert!(run(&s).unwrap_err().contains("not cause rdma"));

        // A slow probe before the failures does not count among them.
        let mut s: Vec<String> = (0..3).map(good).collect();
        s[1] = s[1].replacen(
            &probe(2, "failed", Some("rdma"), "up"),
            &format!(
                "{}\n{}",
                probe(2, "failed", Some("slow"), "up"),
                probe(2, "failed", Some("rdma"), "up")
            ),
            1,
        );
        assert!(run(&s).is_ok(), "{:?}", run(&s));

        let mut s: Vec<String> = (0..3).map(good).collect();
        s[0] = s[0].replacen(
            &probe(2, "failed", Some("rdma"), "up"),
            &format!(
                "{}\n{}",
                probe(2, "failed", Some("rdma"), "up"),
                probe(2, "failed", Some("rdma"), "up")
            ),
            1,
        );
        assert!(run(&s).unwrap_err().contains("after 3 failed probes"));

        let s: Vec<String> = (0..3)
            .map(|m| good(m).replace("\"host\"", "\"rdma\""))
            .collect();
        assert!(
            run(&s)
                .unwrap_err()
                .contains("no probe failed host or refused")
        );

        let mut s: Vec<String> = (0..3).map(good).collect();
        s[1].push('\n');
        s[1].push_str(&probe(0, "failed", Some("corrupt"), "up"));
        assert!(run(&s).unwrap_err().contains("node1") || run(&s).unwrap_err().contains("corrupt"));

        let mut s: Vec<String> = (0..3).map(good).collect();
        s[2] = String::new();
        let e = run(&s).unwrap_err();
        assert!(
            e.contains("node3: no mesh_started") && e.contains("never probed"),
            "{e}"
        );
    }
}
