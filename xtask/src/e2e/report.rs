//! Judges the scenarios from what their processes printed, and prints the report: one line
//! per scenario (and per extra: self-test, load test), the proof of the seed-style scenarios,
//! the outputs of what failed, the problems, the timings.

use super::run::{Collected, Phases};
use super::scenarios::{self, Expect, Scenario};
use super::steps::{LOAD, SELFTEST, client_step_name, server_step_name};
use crate::scenario::judge;
use crate::scenario::transcript::{Role, Transcript};
use crate::text::{indent, tail};
use color_eyre::eyre::{Result, bail};

/// The steps run besides the scenarios, and what passing them shows.
const EXTRAS: [(&str, &str); 2] = [
    (
        SELFTEST,
        "verbs layer on the device: poll/event write-with-imm, 64 KiB write, wrong rkey, RNR, CQ timeout, extended CQs",
    ),
    (
        LOAD,
        "sequential + concurrent sessions, kill stages, no RSS/fd growth",
    ),
];

/// Judges every scenario, prints the report, fails if anything failed.
pub(super) fn report(selected: &[Scenario], c: &Collected, phases: &Phases) -> Result<()> {
    let mut failed = 0usize;
    match &c.nested {
        // The guest's own e2e judged its scenarios and printed its report.
        Some(nested) => {
            println!(
                "--- e2e inside the guest (backend rxe) ---\n{}",
                nested.trim_end()
            );
            println!("--- end of the guest's e2e ---");
        }
        None => {
            failed += report_extras(&c.transcript);
            failed += report_scenarios(selected, &c.transcript);
        }
    }
    for p in &c.problems {
        println!("problem: {p}");
    }
    let ok = failed == 0 && c.problems.is_empty();
    if !ok {
        for d in &c.diagnostics {
            println!("{d}");
        }
    }
    let timings: Vec<String> = phases
        .iter()
        .map(|(n, d)| format!("{n} {:.1} s", d.as_secs_f64()))
        .collect();
    println!("timings: {}", timings.join(", "));
    if !ok {
        bail!(
            "e2e FAILED: {failed} of {} scenario(s) failed{}",
            selected.len(),
            if c.problems.is_empty() {
                ""
            } else {
                ", plus the problems above"
            }
        );
    }
    if c.nested.is_none() {
        println!(
            "e2e PASS: {} scenario(s), every write verified as expected",
            selected.len()
        );
    }
    Ok(())
}

/// The self-test and the load test, when they ran; returns how many failed.
fn report_extras(t: &Transcript) -> usize {
    let mut failed = 0;
    for (name, about) in EXTRAS {
        let Some(r) = t.role(name) else {
            continue;
        };
        if r.ok {
            println!("PASS  {name:<20} {about}");
            // The load test ends with its numbers, the self-test says what the device stamps:
            // show them.
            if let Some(summary) = r
                .stdout
                .lines()
                .rev()
                .find(|l| l.contains("load_summary") || l.starts_with("timestamps: "))
            {
                println!("      {summary}");
            }
        } else {
            failed += 1;
            println!(
                "FAIL  {name} ({}):\n{}\n{}",
                r.exit,
                indent(&tail(&r.stdout, 4000)),
                indent(&tail(&r.stderr, 4000))
            );
        }
    }
    failed
}

/// One line per scenario, its proof when it passed, its failures and outputs when not;
/// returns how many failed.
fn report_scenarios(selected: &[Scenario], t: &Transcript) -> usize {
    let mut failed = 0;
    for s in selected {
        let failures = scenario_failures(s, t);
        let status = if failures.is_empty() { "PASS" } else { "FAIL" };
        println!("{status}  {:<20} {}", s.name, s.about);
        if failures.is_empty() {
            let server = t.role(&server_step_name(s));
            for line in server.map(|r| proof(s, &r.stdout)).unwrap_or_default() {
                println!("      server: {line}");
            }
        }
        for f in &failures {
            println!("      - {f}");
        }
        if !failures.is_empty() {
            failed += 1;
            print_outputs(s, t);
        }
    }
    failed
}

/// The server's human lines that the scenario expects (the seed's "received message: …"):
/// shown under a passing scenario as its proof.
fn proof<'a>(s: &Scenario, server_stdout: &'a str) -> Vec<&'a str> {
    server_stdout
        .lines()
        .filter(|l| {
            s.server_expect
                .iter()
                .any(|e| matches!(e, Expect::StdoutHas(text) if l.contains(text)))
        })
        .collect()
}

/// What went wrong in one scenario (empty = pass).
fn scenario_failures(s: &Scenario, t: &Transcript) -> Vec<String> {
    let mut failures = Vec::new();
    let mut check_role = |name: String, exit, expect: &[Expect]| match t.role(&name) {
        None => failures.push(format!("{name}: never ran")),
        Some(r) => {
            failures.extend(judge::exit(r, exit).map(|f| format!("{name}: {f}")));
            failures.extend(
                scenarios::check(expect, r)
                    .into_iter()
                    .map(|f| format!("{name}: {f}")),
            );
        }
    };
    check_role(server_step_name(s), s.server_exit, &s.server_expect);
    for (j, c) in s.clients.iter().enumerate() {
        check_role(client_step_name(s, j), c.exit, &c.expect);
    }
    failures
}

fn print_outputs(s: &Scenario, t: &Transcript) {
    let names: Vec<String> = std::iter::once(server_step_name(s))
        .chain((0..s.clients.len()).map(|j| client_step_name(s, j)))
        .collect();
    let roles = t.roles.iter().filter(|r| names.contains(&r.name));
    for r in roles {
        print_role(r);
    }
}

fn print_role(r: &Role) {
    println!("      --- {} ({}) ---", r.name, r.argv.join(" "));
    for (label, text) in [("stdout", &r.stdout), ("stderr", &r.stderr)] {
        if !text.trim().is_empty() {
            println!("      {label}:\n{}", indent(&tail(text, 3000)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{PlanResult, StepResult};
    use crate::scenario::transcript::Machine;

    use rdma_proto::events::client::Event as ClientEvent;
    use rdma_proto::events::server::{AuthMode, Event as ServerEvent, ServeMode, SessionNotify};

    /// The JSON line a binary prints for `event`.
    fn line(event: &impl serde::Serialize) -> String {
        serde_json::to_string(event).unwrap() + "\n"
    }

    /// The transcript of one guest that ran `steps`, cast as e2e casts them.
    fn t(steps: &[StepResult]) -> Transcript {
        let cast = crate::e2e::steps::cast(&scenarios::all());
        let r = PlanResult {
            steps: steps.to_vec(),
            ..PlanResult::default()
        };
        Transcript::build([(Machine::default(), Ok(r))], &|n: &str| cast(n))
    }

    fn result(name: String, exit: Option<i32>, stdout: &str) -> StepResult {
        StepResult {
            name,
            exit_code: exit,
            stdout: stdout.to_owned(),
            ..Default::default()
        }
    }

    #[test]
    fn a_scenario_fails_on_wrong_exit_missing_output_or_missing_step() {
        let seed = scenarios::all()
            .into_iter()
            .find(|s| s.name == "seed-json")
            .unwrap();
        let server_ok = [
            line(&ServerEvent::Listening {
                addr: "0.0.0.0:7471".into(),
                device: "rxe0".into(),
                port: 1,
                gid_index: 1,
                gid: "::ffff:10.0.0.1".into(),
                mtu: 1024,
                buffer_size: 64,
                mode: ServeMode::Oneshot,
                max_clients: 1,
                auth: AuthMode::None,
                timeout_ms: 10_000,
                cm: false,
            }),
            line(&ServerEvent::PortChosen {
                session: 1,
                device: "rxe0".into(),
                port: 1,
                gid_index: 1,
                gid: "::ffff:10.0.0.1".into(),
                why: "rxe0 port 1 for 10.0.0.1: holds ::ffff:10.0.0.1 (RoCE v2) at GID index 1"
                    .into(),
            }),
            line(&ServerEvent::QpReady {
                session: 1,
                local_qpn: 17,
                remote_qpn: 18,
                path_mtu: 1024,
                notify: SessionNotify::Imm,
                length: 17,
                via: rdma_proto::events::QpVia::Handshake,
            }),
            line(&ServerEvent::Verified {
                session: 1,
                verified: true,
                length: 17,
                crc32c: 1,
                text: scenarios::SEED_MESSAGE.into(),
                truncated: false,
                reason: None,
            }),
        ]
        .concat();
        let client_ok = [
            line(&ClientEvent::Connected {
                server: "10.0.0.1".into(),
                program: "rdma-server".into(),
                program_version: "0.1.0".into(),
                device: "rxe0".into(),
                port: 1,
                gid_index: 1,
                gid: "::ffff:10.0.0.2".into(),
                chosen: Some(
                    "rxe0 port 1 for 10.0.0.2: holds ::ffff:10.0.0.2 (RoCE v2) at GID index 1"
                        .into(),
                ),
            }),
            line(&ClientEvent::QpReady {
                local_qpn: 18,
                remote_qpn: 17,
                path_mtu: 1024,
                remote_addr: 0x1000,
                rkey: 7,
                buf_len: 64,
                via: rdma_proto::events::QpVia::Handshake,
            }),
            line(&ClientEvent::Written {
                length: 17,
                notify: rdma_proto::Notify::Imm,
                crc32c: 1,
                micros: 5,
            }),
            line(&ClientEvent::Verified {
                verified: true,
                length: 17,
                crc32c: 1,
                text: scenarios::SEED_MESSAGE.into(),
                truncated: false,
            }),
        ]
        .concat();
        let server_ok = server_ok.as_str();
        let client_ok = client_ok.as_str();
        let good = vec![
            result(server_step_name(&seed), Some(0), server_ok),
            result(client_step_name(&seed, 0), Some(0), client_ok),
        ];
        assert!(
            scenario_failures(&seed, &t(&good)).is_empty(),
            "{:?}",
            scenario_failures(&seed, &t(&good))
        );

        let mut wrong_exit = good.clone();
        wrong_exit[1].exit_code = Some(i32::from(rdma_proto::Exit::Transfer.code()));
        assert_eq!(scenario_failures(&seed, &t(&wrong_exit)).len(), 1);

        let mut unverified = good.clone();
        unverified[0].stdout = server_ok.replace("\"verified\":true", "\"verified\":false");
        assert_eq!(scenario_failures(&seed, &t(&unverified)).len(), 1);

        let missing = vec![good[0].clone()];
        assert!(scenario_failures(&seed, &t(&missing))[0].contains("never ran"));

        let mut killed = good;
        killed[0].timed_out = true;
        assert!(scenario_failures(&seed, &t(&killed))[0].contains("deadline"));
    }

    #[test]
    fn the_proof_is_the_expected_human_lines() {
        let all = scenarios::all();
        let seed = all.iter().find(|s| s.name == "seed").unwrap();
        let out = "listening on 0.0.0.0:7471\nreceived message: Hello RDMA Write!\nverified: RDMA Write data landed in server memory\n";
        assert_eq!(
            proof(seed, out),
            vec![
                "received message: Hello RDMA Write!",
                "verified: RDMA Write data landed in server memory"
            ]
        );
        let json = all.iter().find(|s| s.name == "seed-json").unwrap();
        assert!(proof(json, out).is_empty(), "no human lines expected");
    }
}
