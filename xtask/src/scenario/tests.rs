//! The engine on canned results: the transcript builder, the judges against broken fakes, the
//! argv builder.

use super::exit::{ExitKind, Speaks};
use super::judge;
use super::role::Invocation;
use super::transcript::{HOST, Machine, Role, Transcript};
use crate::plan::{PlanResult, StepResult};
use rdma_proto::Exit;
use rdma_proto::events::client::Event as ClientEvent;
use rdma_proto::events::server::Event as ServerEvent;

fn line(event: &impl serde::Serialize) -> String {
    serde_json::to_string(event).unwrap() + "\n"
}

fn verified(v: bool) -> ClientEvent<'static> {
    ClientEvent::Verified {
        verified: v,
        length: 2,
        crc32c: 1,
        text: "hi".into(),
        truncated: false,
    }
}

fn step(name: &str, exit: Option<i32>, stdout: &str) -> StepResult {
    StepResult {
        name: name.into(),
        exit_code: exit,
        ok: exit == Some(0),
        stdout: stdout.into(),
        attempts: 1,
        ..StepResult::default()
    }
}

fn cast(name: &str) -> Speaks {
    match name.split(':').next() {
        Some("server") => Speaks::Server,
        Some("client") => Speaks::Client,
        _ => Speaks::Other,
    }
}

fn machine(name: &str) -> Machine {
    Machine {
        name: name.into(),
        console_tail: Some("tail".into()),
        ..Machine::default()
    }
}

#[test]
fn the_transcript_reads_events_keeps_strangers_and_human_lines_apart() {
    let stopped = ServerEvent::Stopped {
        reason: rdma_proto::events::server::StopReason::Verified,
        sessions: 1,
        verified: 1,
        cpu_ms: None,
    };
    let client_out = format!(
        "{}not json at all\n{}\n",
        line(&verified(true)),
        line(&verified(true)).trim_end().replace("crc32c", "crc")
    );
    let a = PlanResult {
        ok: true,
        setup: vec![step("ip", Some(0), "")],
        steps: vec![
            step("server:x", Some(0), &line(&stopped)),
            step("ping", Some(1), "{\"not\":\"ours\"}\n"),
        ],
        ..PlanResult::default()
    };
    let mut killed = step("client:x", None, &client_out);
    killed.timed_out = true;
    killed.error = Some("killed at its 60 s deadline".into());
    let b = PlanResult {
        ok: false,
        error: Some("step client:x failed".into()),
        steps: vec![killed, step("client:y", Some(7), "")],
        ..PlanResult::default()
    };
    let t = Transcript::build(
        [
            (machine("A"), Ok(a)),
            (machine("B"), Ok(b)),
            (
                machine("C"),
                Err("C: no result.json (exit code None)".into()),
            ),
        ],
        &cast,
    );
    assert_eq!(t.guests.len(), 3);
    assert_eq!(t.roles.len(), 4);
    let server = t.role("server:x").unwrap();
    assert_eq!(
        (server.guest.as_str(), server.exit),
        ("A", ExitKind::Success)
    );
    assert_eq!(server.server, vec![stopped]);
    // Not ours: its status stays a number, its JSON is not read as our events.
    let ping = t.role("ping").unwrap();
    assert_eq!(ping.exit, ExitKind::Status(1));
    assert!(ping.strangers.is_empty() && ping.client.is_empty());
    let client = t.role("client:x").unwrap();
    assert_eq!(client.exit, ExitKind::TimedOut);
    assert_eq!(client.client, vec![verified(true)]);
    assert_eq!(client.human, ["not json at all"]);
    assert_eq!(client.strangers.len(), 1);
    assert!(client.strangers[0].line.contains("\"crc\""));
    assert_eq!(
        t.role("client:y").unwrap().exit,
        ExitKind::Ours(Exit::Refused)
    );
    // A guest with no result is a death, with no roles; a failed plan keeps its error.
    assert_eq!(
        t.deaths().collect::<Vec<_>>(),
        ["C: no result.json (exit code None)"]
    );
    assert_eq!(t.roles_of("C").count(), 0);
    assert!(!t.guests[1].ok);
    assert_eq!(
        t.guests[1].plan_error.as_deref(),
        Some("step client:x failed")
    );
    assert!(t.guests[0].setup_problem().is_none());
}

#[test]
fn a_failed_setup_and_the_host_backend_are_told() {
    let mut ip = step("ip", Some(2), "");
    ip.argv = vec!["ip".into(), "link".into()];
    ip.stderr = "no such device".into();
    let r = PlanResult {
        setup: vec![ip],
        ..PlanResult::default()
    };
    let t = Transcript::from_local(&r, &cast);
    assert_eq!(t.guests[0].name, HOST);
    assert_eq!(t.guests[0].console_tail, None);
    let p = t.guests[0].setup_problem().unwrap();
    assert!(p.contains("`ip link` failed: no such device"), "{p}");
}

#[test]
fn exit_kinds_are_ours_only_for_our_binaries_and_killed_without_a_status() {
    assert_eq!(
        ExitKind::of(Some(0), false, Speaks::Other),
        ExitKind::Success
    );
    assert_eq!(
        ExitKind::of(Some(3), false, Speaks::Client),
        ExitKind::Ours(Exit::Rdma)
    );
    assert_eq!(
        ExitKind::of(Some(3), false, Speaks::Other),
        ExitKind::Status(3)
    );
    assert_eq!(
        ExitKind::of(Some(99), false, Speaks::Server),
        ExitKind::Status(99)
    );
    assert_eq!(ExitKind::of(None, false, Speaks::Client), ExitKind::Killed);
    assert_eq!(
        ExitKind::of(Some(0), true, Speaks::Client),
        ExitKind::TimedOut
    );
    assert!(ExitKind::Success.is(None));
    assert!(!ExitKind::Success.is(Some(Exit::Usage)));
    assert!(ExitKind::Ours(Exit::Usage).is(Some(Exit::Usage)));
    assert!(!ExitKind::Status(2).is(Some(Exit::Usage)));
    assert_eq!(
        ExitKind::Ours(Exit::Refused).to_string(),
        "exit 7 (refused)"
    );
}

fn role(speaks: Speaks, exit: Option<i32>, stdout: &str) -> Role {
    Role::of(&step("r", exit, stdout), "B", speaks)
}

#[test]
fn judges_fail_a_transcript_that_lacks_what_they_look_for() {
    let good = role(Speaks::Client, Some(0), &line(&verified(true)));
    assert!(judge::client_verified(&good));
    assert_eq!(judge::exit(&good, None), None);
    // No verified event, or a negative one: the judge fails.
    assert!(!judge::client_verified(&role(Speaks::Client, Some(0), "")));
    assert!(!judge::client_verified(&role(
        Speaks::Client,
        Some(0),
        &line(&verified(false))
    )));
    // A server's stdout is not read as a client's.
    assert!(!judge::client_verified(&role(
        Speaks::Server,
        Some(0),
        &line(&verified(true))
    )));
    // Exit kinds, not numbers.
    let refused = role(Speaks::Client, Some(7), "");
    assert_eq!(judge::exit(&refused, Some(Exit::Refused)), None);
    let e = judge::exit(&refused, None).unwrap();
    assert_eq!(e, "exit 7 (refused), expected exit 0");
    let e = judge::exit(&good, Some(Exit::Refused)).unwrap();
    assert!(e.contains("expected exit 7 (refused)"), "{e}");
    let mut late = step("r", None, "");
    late.timed_out = true;
    late.error = Some("killed at its 9 s deadline before marker m appeared".into());
    let late = Role::of(&late, "B", Speaks::Client);
    assert!(judge::exit(&late, None).unwrap().contains("marker m"));
    // A role that panicked fails whatever its status: a verified client and a refused one.
    for (status, want) in [(0, None), (7, Some(Exit::Refused))] {
        let mut panicked = step("r", Some(status), &line(&verified(true)));
        panicked.stderr =
            "thread 'session' panicked at src/workers.rs:1:1:\nattempt to subtract with overflow\n"
                .into();
        let panicked = Role::of(&panicked, "B", Speaks::Client);
        let e = judge::exit(&panicked, want).unwrap();
        assert!(
            e.starts_with("panicked: thread 'session' panicked at"),
            "{e}"
        );
    }
    // The error event: its kind and its message (one line, case aside), or the judge fails.
    let error = ClientEvent::Error {
        kind: Exit::Refused,
        exit_code: Exit::Refused.code(),
        message: "the server said no:\n  Unauthorized token".into(),
    };
    let failed = role(Speaks::Client, Some(7), &line(&error));
    let failed_as = |r: &Role, exit: Exit, needle: &str| {
        judge::has_client(r, |e| judge::failed_as(e, exit, needle))
    };
    assert!(failed_as(&failed, Exit::Refused, "no: unauthorized"));
    assert!(!failed_as(&failed, Exit::Usage, "unauthorized"));
    assert!(!failed_as(&failed, Exit::Refused, "forbidden"));
    assert!(!failed_as(&good, Exit::Refused, "unauthorized"));
    // A JSON line that is no event of the binary is named, and so is a line that is no JSON.
    let odd = role(Speaks::Server, Some(0), "{\"type\":\"nope\"}\n");
    assert_eq!(judge::strangers(&odd).len(), 1);
    assert!(judge::strangers(&odd)[0].contains("nope"));
    assert!(judge::only_events(&odd).unwrap_err().contains("nope"));
    let human = role(Speaks::Client, Some(0), "server verified 17 bytes\n");
    assert!(judge::only_events(&human).unwrap_err().contains("17 bytes"));
    assert_eq!(judge::only_events(&good), Ok(()));
}

#[test]
fn our_binaries_argv_is_built_in_one_order() {
    let v = Invocation::misbehaving("/b/mc", "wrong-rkey")
        .env(&[("LANG", "zh_CN.UTF-8")])
        .wrapper(&["valgrind", "-q"])
        .args(["10.0.0.1:7471", "--json"])
        .device(Some("rxe0"))
        .argv();
    assert_eq!(
        v.join(" "),
        "env LANG=zh_CN.UTF-8 valgrind -q /b/mc --fault wrong-rkey 10.0.0.1:7471 --json --ib-dev rxe0"
    );
    let named = Invocation::client("/b/c")
        .args(["--ib-dev", "mine"])
        .device(Some("rxe0"));
    assert_eq!(named.argv(), ["/b/c", "--ib-dev", "mine"]);
    let bench = Invocation::misbehaving("/b/mc", "slow-ping")
        .subcommand("bench")
        .args(["--mode", "lat", "10.0.0.1"])
        .device(Some("rxe0"));
    assert_eq!(
        bench.argv().join(" "),
        "/b/mc --fault slow-ping bench --mode lat 10.0.0.1 --ib-dev rxe0"
    );
    assert_eq!(Invocation::server("/b/s").argv(), ["/b/s"]);
}

#[test]
fn a_process_xtask_ran_itself_is_a_role_too() {
    let f = crate::exec::Finished {
        code: Some(8),
        timed_out: false,
        stdout: line(&verified(false)),
        stderr: "error: x".into(),
        elapsed: std::time::Duration::from_millis(1500),
    };
    let r = Role::finished("probe", &f, Speaks::Client);
    assert_eq!(
        (r.guest.as_str(), r.exit, r.ok),
        (HOST, ExitKind::Ours(Exit::Transfer), false)
    );
    assert_eq!(r.client, vec![verified(false)]);
    assert_eq!(r.elapsed_s, 1.5);
    let late = crate::exec::Finished {
        code: None,
        timed_out: true,
        ..f
    };
    assert_eq!(
        Role::finished("p", &late, Speaks::Client).exit,
        ExitKind::TimedOut
    );
}
