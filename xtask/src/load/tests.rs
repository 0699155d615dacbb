//! The load test against fake servers and clients (shell scripts): a server that stops on
//! SIGTERM passes, one that ignores it fails and is killed, and wrong clients fail the run.

use super::args::LoadArgs;
use super::cmd;
use super::server::{ServerGuard, check_listening};
use clap::Parser as _;
use rdma_proto::events::server::{Event, StopReason};
use std::os::unix::fs::PermissionsExt as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(Debug, clap::Parser)]
struct Cli {
    #[command(flatten)]
    load: LoadArgs,
}

fn script(dir: &std::path::Path, name: &str, body: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

const FAKE_SERVER: &str = r#"trap 'echo "{\"type\":\"stopped\",\"reason\":\"signal\",\"sessions\":3,\"verified\":3}"; exit 0' TERM
echo '{"type":"listening","addr":"127.0.0.1:1","device":"rxe0","port":1,"gid_index":1,"gid":"::1","mtu":1024,"buffer_size":64,"mode":"serve","max_clients":1,"auth":"none","timeout_ms":10000}'
while :; do sleep 0.05; done"#;

fn args(
    dir: &std::path::Path,
    server: &std::path::Path,
    client: &std::path::Path,
    extra: &[&str],
) -> LoadArgs {
    let mut argv = vec![
        "load".to_owned(),
        format!("--server-bin={}", server.display()),
        format!("--client-bin={}", client.display()),
        format!("--tmp-dir={}", dir.display()),
        "--sequential=2".to_owned(),
        "--warmup=1".to_owned(),
        "--concurrent=1".to_owned(),
        "--buffer-size=64".to_owned(),
        "--server-deadline=5s".to_owned(),
        "--client-deadline=5s".to_owned(),
    ];
    argv.extend(extra.iter().map(|s| (*s).to_owned()));
    Cli::try_parse_from(argv).unwrap().load
}

#[test]
fn a_server_that_stops_on_sigterm_is_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let server = script(dir.path(), "server", FAKE_SERVER);
    let a = args(dir.path(), &server, &server, &[]);
    let mut g = ServerGuard::start(&a, "127.0.0.1:1").unwrap();
    let ev = g
        .wait_for(
            "listening",
            |e| matches!(e, Event::Listening { .. }),
            Instant::now() + Duration::from_secs(5),
        )
        .unwrap();
    check_listening(&ev, &a).unwrap();
    let (code, stopped) = g.terminate(Duration::from_secs(5)).unwrap();
    assert_eq!(code, Some(0));
    assert!(matches!(
        stopped,
        Some(Event::Stopped {
            reason: StopReason::Signal,
            ..
        })
    ));
}

#[test]
fn a_server_that_ignores_sigterm_fails_and_is_killed() {
    let dir = tempfile::tempdir().unwrap();
    let body = FAKE_SERVER.replace("trap '", "trap '' TERM; : '");
    let server = script(dir.path(), "server", &body);
    let a = args(dir.path(), &server, &server, &[]);
    let mut g = ServerGuard::start(&a, "127.0.0.1:1").unwrap();
    g.wait_for(
        "listening",
        |e| matches!(e, Event::Listening { .. }),
        Instant::now() + Duration::from_secs(5),
    )
    .unwrap();
    let pid = g.pid();
    let err = g.terminate(Duration::from_millis(500)).unwrap_err();
    assert!(err.to_string().contains("did not exit"), "{err}");
    drop(g);
    assert!(!std::path::Path::new(&format!("/proc/{pid}/status")).exists());
}

#[test]
fn a_client_reporting_the_wrong_crc_fails_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let server = script(dir.path(), "server", FAKE_SERVER);
    let client = script(
        dir.path(),
        "client",
        r#"echo '{"type":"verified","verified":true,"length":1,"crc32c":0,"text":"x","truncated":false}'"#,
    );
    let err = cmd(&args(dir.path(), &server, &client, &[])).unwrap_err();
    assert!(
        err.to_string().contains("does not match the payload"),
        "{err}"
    );
}

#[test]
fn kill_stages_expect_death_by_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let server = script(dir.path(), "server", FAKE_SERVER);
    // Dies by SIGKILL when given --fault, otherwise exits 3 (no RDMA): every normal client fails.
    let client = script(
        dir.path(),
        "client",
        r#"case "$*" in *--fault*) kill -9 $$;; esac; exit 3"#,
    );
    let misbehave = format!("--misbehave-bin={}", client.display());
    let a = args(
        dir.path(),
        &server,
        &client,
        &["--kill-stages", "--json", &misbehave],
    );
    let err = cmd(&a).unwrap_err();
    assert!(err.to_string().contains("exited with"), "{err}");
    // Without the misbehaving peer, no client can be told to die: said, not skipped.
    let a = args(dir.path(), &server, &client, &["--kill-stages", "--json"]);
    let err = format!("{:#}", cmd(&a).unwrap_err());
    assert!(err.contains("needs --misbehave-bin"), "{err}");
}

#[test]
fn warmup_must_fit_the_sequential_phase() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("x");
    let mut a = args(dir.path(), &p, &p, &[]);
    a.warmup = 3;
    assert!(cmd(&a).unwrap_err().to_string().contains("--warmup"));
}

/// The plan's typed arguments are what its step runs: its argv parses back to them, and the
/// step's deadline follows their numbers (more sequential clients, a longer deadline).
#[test]
fn the_load_steps_argv_and_deadline_come_from_one_set_of_arguments() {
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: super::LoadArgs,
    }
    use clap::Parser as _;
    let mut args = super::LoadArgs::new("/bin/s", "/bin/c").unwrap();
    args.kill_stages = true;
    args.soak_rounds = 3;
    args.client_args.push("--ib-dev=rxe0".into());
    let back = Cli::try_parse_from(args.argv()).unwrap().args;
    assert_eq!(format!("{back:?}"), format!("{args:?}"));
    let before = super::worst_case(&args);
    args.sequential += 10;
    assert_eq!(super::worst_case(&args), before + args.client_deadline * 10);
}
