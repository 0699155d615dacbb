//! The mesh under measurement (issue 24): both guests run `rdma-server --serve` and
//! `rdma-client mesh A,B` for a fixed number of cycles, and the bench takes each node's
//! probe rate, the time one probe takes, and what its server spent serving the other's probes.
//!
//! In each guest, after every other measurement (its server stays until the session ends,
//! and an idle one still wakes every 20 ms): its server (on [`PORT`], until the bench is done); the server's
//! `/proc` reading once it listens (the flood's [`super::flood`] reads);
//! its prober, once the other guest's server is read, under `xtask bench-stamp`
//! ([`super::stamp`]: the events carry no time, the stamps say when each line came); and the
//! server's second reading once the other prober has ended. The schedule has no jitter, so
//! each probe's fire time is known: the run's start, its interval, the node's phase.
//!
//! The figures ([`figures`]): probes per second per node = ok probes / the seconds from
//! `mesh_started` to `mesh_stopped`; one probe's time = from its fire time to its result; the
//! server's CPU (utime + stime, after less before) per probe it served (the other node's
//! probes that ran); its `VmRSS` before and after and `VmHWM`. A figure that did not come is an
//! error ([`collect`]), which fails the bench.

pub mod figures;

use std::time::Duration;

use rdma_proto::events::server::Event as ServerEvent;

use crate::deadline::GRACE;
use crate::e2e::Bins;
use crate::plan::{DEADLINE_ARG, Step};
use crate::scenario::exit::Speaks;
use crate::scenario::role::Invocation;
use crate::scenario::transcript::Transcript;

use super::procfs::Usage;
use super::results::Target;
use super::stamp::Stamps;
use figures::{Mesh, MeshNode, Setting};

/// The mesh servers' port (beside the bench's own server's 7471 and the flood's 7473, 7474).
pub const PORT: u16 = 7475;
/// Each server's `--max-clients`: two nodes give each server one prober per interval
/// (`--fan-out 1`), which holds at most one session at a time; the default, said aloud.
const MAX_CLIENTS: &str = "16";
/// How long a prober may take to start (the process, the device) before its first interval,
/// as the bench's runs allow for their start-up.
const START_S: f64 = 60.0;
/// The runner's own bounds on a stopping run: the last probe's deadline is at most
/// `min(--every, PROBE_CAP_S)` after its fire time, and it waits [`DRAIN_GRACE_S`] past it.
const PROBE_CAP_S: f64 = 30.0;
const DRAIN_GRACE_S: f64 = 5.0;

fn server_name(rank: usize) -> String {
    format!("mesh server r{rank}")
}
fn before_name(rank: usize) -> String {
    format!("mesh cpu before r{rank}")
}
fn after_name(rank: usize) -> String {
    format!("mesh cpu after r{rank}")
}
fn prober_name(rank: usize) -> String {
    format!("mesh prober r{rank}")
}
/// The markers: rank's server started; its server listens and was read (its peer may
/// probe); its prober ended (its peer's server may be read again).
fn up(rank: usize) -> String {
    format!("mesh-server-r{rank}-up")
}
fn ready(rank: usize) -> String {
    format!("mesh-r{rank}-ready")
}
fn ended(rank: usize) -> String {
    format!("mesh-r{rank}-ended")
}

/// Which role a step of the mesh plays, when it is one of the mesh's.
pub fn speaks(name: &str) -> Option<Speaks> {
    (0..2).find_map(|r| {
        if name == server_name(r) {
            Some(Speaks::Server)
        } else if name == prober_name(r) {
            Some(Speaks::Client)
        } else if name == before_name(r) || name == after_name(r) {
            Some(Speaks::Other)
        } else {
            None
        }
    })
}

/// One prober's deadline: its start, every interval, the last probe's deadline and the
/// runner's drain grace; plus [`GRACE`], which `bench-stamp`'s own deadline leaves to the step.
pub fn prober_timeout(every: Duration, cycles: u32) -> f64 {
    let every_s = every.as_secs_f64();
    GRACE.as_secs_f64()
        + START_S
        + f64::from(cycles) * every_s
        + every_s.min(PROBE_CAP_S)
        + DRAIN_GRACE_S
}

/// Each guest's mesh steps, in rank order of `setting.nodes` (two: the bench's guests, in
/// the mesh's natural order); every server lives until `all_done`.
pub fn steps(bins: &Bins, setting: &Setting, all_done: &str) -> Vec<Vec<Step>> {
    let list = setting.nodes.join(",");
    let every_ms = setting.every.as_millis().to_string();
    let (port, cycles) = (PORT.to_string(), setting.cycles.to_string());
    (0..2)
        .map(|rank| {
            let peer = 1 - rank;
            let mut server = Step::new(server_name(rank), &[]);
            server.argv = Invocation::server(&bins.server)
                .args([
                    "--serve",
                    "--json",
                    "--listen",
                    &format!("0.0.0.0:{PORT}"),
                    "--max-clients",
                    MAX_CLIENTS,
                ])
                .argv();
            server.background = true;
            server.create_file_when_started = Some(up(rank));
            server.stop_when_file = Some(all_done.into());
            server.allow_failure = true;
            let [before, after] = super::flood::cpu_reads(
                bins,
                PORT,
                [before_name(rank).as_str(), after_name(rank).as_str()],
                Some(up(rank).as_str()),
                &ready(rank),
                &ended(peer),
            );
            let mut prober = Step::new(prober_name(rank), &[]);
            prober.argv = Invocation::client(&bins.client)
                .wrapper(&[&bins.xtask, "bench-stamp", "--timeout", DEADLINE_ARG, "--"])
                .subcommand("mesh")
                .args([
                    &list,
                    "--rank",
                    &rank.to_string(),
                    "--mesh-port",
                    &port,
                    "--every",
                    &format!("{every_ms}ms"),
                    "--jitter",
                    "0",
                    "--fan-out",
                    "1",
                    "--mesh-cycles",
                    &cycles,
                    "--json",
                ])
                .args(setting.no_reuse.then_some("--no-reuse"))
                .argv();
            prober.wait_for_file = Some(ready(peer));
            prober.waits_on = vec![before_name(peer)];
            prober.timeout_s = prober_timeout(setting.every, setting.cycles);
            prober.create_file_when_ended = Some(ended(rank));
            prober.allow_failure = true;
            vec![server, before, prober, after]
        })
        .collect()
}

/// The measurement from both guests' steps, or what is missing.
pub fn collect(t: &Transcript, setting: &Setting) -> Result<Mesh, String> {
    let mut probed = Vec::new();
    for rank in 0..2 {
        let role = t
            .role(&prober_name(rank))
            .ok_or_else(|| format!("rank {rank}: its prober did not run"))?;
        let p = Stamps::of(&role.stderr)
            .and_then(|s| figures::prober(&role.stdout, &s, rank, setting))
            .map_err(|e| format!("rank {rank}'s prober ({}): {e}", role.exit))?;
        probed.push(p);
    }
    let mut nodes = Vec::new();
    for (rank, p) in probed.iter().enumerate() {
        let reading = |name: String| {
            super::flood::json_of::<Usage>(t, &name)
                .ok_or_else(|| format!("rank {rank}'s server: `{name}` gave no reading"))
        };
        let (before, after) = (reading(before_name(rank))?, reading(after_name(rank))?);
        let served = probed
            .iter()
            .enumerate()
            .filter(|&(other, _)| other != rank)
            .map(|(_, o)| o.ran_to.get(&rank).copied().unwrap_or(0))
            .sum();
        let sessions = t.role(&server_name(rank)).and_then(|s| {
            s.server.iter().find_map(|e| match e {
                ServerEvent::Stopped { sessions, .. } => Some(*sessions),
                _ => None,
            })
        });
        let server = figures::server(&before, &after, served, sessions)
            .map_err(|e| format!("rank {rank}'s server: {e}"))?;
        nodes.push(MeshNode {
            rank,
            node: setting.nodes.get(rank).cloned().unwrap_or_default(),
            prober: p.run.clone(),
            server,
        });
    }
    Ok(Mesh {
        every_s: setting.every.as_secs_f64(),
        cycles: setting.cycles,
        no_reuse: setting.no_reuse,
        nodes,
    })
}

/// The mesh's target: every probe of every node ok (none failed, skipped, or the prober's own
/// error), so the figures are those of a healthy mesh. `error`: why there are no figures.
pub fn targets(m: Option<&Mesh>, error: Option<&str>) -> Vec<Target> {
    let what = "mesh: every probe of both nodes ok (none failed, skipped or the prober's own error), figures from a healthy mesh".to_owned();
    let Some(m) = m else {
        return vec![Target {
            what,
            met: false,
            detail: format!("not measured: {}", error.unwrap_or("no mesh ran")),
        }];
    };
    let bad: Vec<String> = m
        .nodes
        .iter()
        .filter(|n| n.prober.failed + n.prober.skipped + n.prober.errors > 0)
        .map(|n| {
            format!(
                "rank {}: {} failed, {} skipped, {} errors",
                n.rank, n.prober.failed, n.prober.skipped, n.prober.errors
            )
        })
        .collect();
    let ok: u64 = m.nodes.iter().map(|n| n.prober.ok).sum();
    vec![Target {
        what,
        met: bad.is_empty(),
        detail: if bad.is_empty() {
            format!(
                "{ok} probes ok over {} cycles at --every {} s",
                m.cycles, m.every_s
            )
        } else {
            bad.join("; ")
        },
    }]
}

#[cfg(test)]
mod tests {
    use super::figures::tests::{run, setting};
    use super::*;
    use crate::plan::{PlanResult, StepResult};
    use crate::scenario::transcript::Machine;

    #[test]
    fn each_guest_serves_reads_probes_and_reads_again_waiting_on_the_other() {
        let bins = Bins::for_tests();
        let g = steps(&bins, &setting(), "done");
        assert_eq!(g.len(), 2);
        for (rank, s) in g.iter().enumerate() {
            let names: Vec<&str> = s.iter().map(|x| x.name.as_str()).collect();
            assert_eq!(
                names,
                [
                    server_name(rank),
                    before_name(rank),
                    prober_name(rank),
                    after_name(rank)
                ]
            );
            let (server, before, prober, after) = (&s[0], &s[1], &s[2], &s[3]);
            assert!(
                server.background
                    && server
                        .argv
                        .ends_with(&["--max-clients".into(), "16".into()])
            );
            assert!(server.argv.contains(&"0.0.0.0:7475".to_owned()));
            assert_eq!(before.argv[1..], ["bench-flood", "--cpu-of", "7475"]);
            assert_eq!(before.wait_for_file, server.create_file_when_started);
            // Each prober waits until the other's server was read, and the other's second
            // reading waits until it ended.
            let peer = &g[1 - rank];
            assert_eq!(prober.wait_for_file, peer[1].create_file_when_done);
            assert_eq!(peer[3].wait_for_file, prober.create_file_when_ended);
            let a = prober.argv.join(" ");
            assert!(
                a.starts_with("/bin/xtask bench-stamp --timeout {deadline_s} -- /bin/rdma-client mesh 10.0.0.1,10.0.0.2 "),
                "{a}"
            );
            assert!(
                a.ends_with(&format!("--rank {rank} --mesh-port 7475 --every 1000ms --jitter 0 --fan-out 1 --mesh-cycles 3 --json")),
                "{a}"
            );
            assert!(prober.timeout_s >= prober_timeout(setting().every, 3));
            let fresh = Setting {
                no_reuse: true,
                ..setting()
            };
            let a = steps(&bins, &fresh, "done")[rank][2].argv.join(" ");
            assert!(a.ends_with("--mesh-cycles 3 --json --no-reuse"), "{a}");
            assert_eq!(speaks(&prober.name), Some(Speaks::Client));
            assert_eq!(speaks(&server.name), Some(Speaks::Server));
            assert_eq!(speaks(&after.name), Some(Speaks::Other));
        }
        assert_eq!(speaks("rdma-server"), None);
    }

    #[test]
    fn a_probers_deadline_covers_its_cycles_and_the_drain() {
        let t = |s: u64, c: u32| prober_timeout(Duration::from_secs(s), c);
        // 60 s to start, 30 x 1 s, the last probe's 1 s and 5 s, and the stamp's grace.
        assert_eq!(t(1, 30), 20.0 + 60.0 + 30.0 + 1.0 + 5.0);
        assert!(t(1, 60) > t(1, 30) && t(2, 30) > t(1, 30));
        // A probe's deadline is at most 30 s, whatever the interval.
        assert_eq!(t(100, 1) - t(40, 1), 60.0);
    }

    fn step(name: &str, stdout: &str, stderr: &str) -> StepResult {
        StepResult {
            name: name.into(),
            exit_code: Some(0),
            ok: true,
            stdout: stdout.into(),
            stderr: stderr.into(),
            ..Default::default()
        }
    }

    /// Both guests' results of a healthy mesh: each server read at 1000 ms of CPU, then
    /// 1000 + 60 ms (A) or + 90 ms (B), after the other's 3 probes.
    fn guests() -> [PlanResult; 2] {
        [0usize, 1].map(|rank| {
            let (out, stamps) = run(rank, [250.0, 300.0, 400.0]);
            let read = |cpu: f64, rss: u64| {
                format!(
                    r#"{{"pid":42,"cpu_ms":{cpu},"rss_kb":{rss},"hwm_kb":{}}}"#,
                    rss + 512
                )
            };
            let stopped = r#"{"type":"stopped","reason":"signal","sessions":6,"verified":3}"#;
            PlanResult {
                steps: vec![
                    step(&server_name(rank), stopped, ""),
                    step(&before_name(rank), &read(1000.0, 7000), ""),
                    step(
                        &prober_name(rank),
                        &out,
                        &format!("a warning\n{}\n", serde_json::to_string(&stamps).unwrap()),
                    ),
                    step(
                        &after_name(rank),
                        &read(1000.0 + 60.0 * (rank as f64 + 1.0), 8000),
                        "",
                    ),
                ],
                ..Default::default()
            }
        })
    }

    fn transcript(g: [PlanResult; 2]) -> Transcript {
        let cast = |n: &str| speaks(n).unwrap_or(Speaks::Other);
        Transcript::build(g.map(|r| (Machine::default(), Ok(r))), &cast)
    }

    #[test]
    fn the_figures_come_from_both_guests_steps() {
        let m = collect(&transcript(guests()), &setting()).unwrap();
        assert_eq!((m.every_s, m.cycles, m.nodes.len()), (1.0, 3, 2));
        let (a, b) = (&m.nodes[0], &m.nodes[1]);
        assert_eq!((a.node.as_str(), b.node.as_str()), ("10.0.0.1", "10.0.0.2"));
        assert_eq!((a.prober.ok, b.prober.ok), (3, 3));
        // Each server served the other's 3 probes.
        assert_eq!((a.server.served, a.server.cpu_ms), (3, 60.0));
        assert_eq!(a.server.cpu_per_probe_ms, 20.0);
        assert_eq!(b.server.cpu_per_probe_ms, 40.0);
        assert_eq!(
            (a.server.rss_before_kb, a.server.rss_kb, a.server.hwm_kb),
            (7000, 8000, 8512)
        );
        assert_eq!(a.server.sessions, Some(6));
        let t = targets(Some(&m), None);
        assert!(t[0].met, "{t:?}");
    }

    #[test]
    fn a_missing_piece_is_an_error_naming_it() {
        let e = |g: [PlanResult; 2]| collect(&transcript(g), &setting()).unwrap_err();
        // No stamps (bench-stamp killed), no prober at all, no reading, a reading cut.
        let mut g = guests();
        g[1].steps[2].stderr.clear();
        let why = e(g);
        assert!(
            why.contains("rank 1's prober") && why.contains("no stamps"),
            "{why}"
        );
        let mut g = guests();
        g[0].steps.truncate(2);
        assert!(e(g).contains("rank 0: its prober did not run"));
        let mut g = guests();
        g[1].steps[3].stdout = "{\"pid\":42,\"cpu".into();
        let why = e(g);
        assert!(
            why.contains("rank 1's server") && why.contains("no reading"),
            "{why}"
        );
        // A reading without memory is no figure either.
        let mut g = guests();
        g[0].steps[1].stdout = r#"{"pid":42,"cpu_ms":1000.0}"#.into();
        assert!(e(g).contains("no VmRSS"));
        // The server's own count is a cross-check, not a figure: without it, still figures.
        let mut g = guests();
        g[0].steps[0].stdout.clear();
        let m = collect(&transcript(g), &setting()).unwrap();
        assert_eq!(m.nodes[0].server.sessions, None);
    }

    #[test]
    fn the_target_wants_every_probe_ok_and_figures() {
        let mut m = collect(&transcript(guests()), &setting()).unwrap();
        m.nodes[1].prober.skipped = 2;
        let t = targets(Some(&m), None);
        assert!(
            !t[0].met && t[0].detail.contains("rank 1: 0 failed, 2 skipped"),
            "{t:?}"
        );
        let t = targets(None, Some("rank 0's prober: no stamps"));
        assert!(
            !t[0].met && t[0].detail.contains("not measured: rank 0"),
            "{t:?}"
        );
    }
}
