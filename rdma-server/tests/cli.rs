//! The server's failure paths that need no RDMA link, held to what its `--help` promises. The
//! harness and the one list of user mistakes are shared with the client's tests
//! (`rdma_app::testing`); this file only says how to make each mistake here.

use rdma_app::Exit;
use rdma_app::testing::{Binary, Case, EMPTY_FILE, MISSING_FILE, Mistake};

fn server() -> Binary {
    Binary::new(env!("CARGO_BIN_EXE_rdma-server"))
}

/// How the server meets each mistake (`None`: it has no such input).
fn mistake(m: Mistake) -> Option<Case> {
    Some(match m {
        Mistake::UnknownFlag => Case::new(&["--frobnicate"], "--frobnicate"),
        Mistake::MissingValue => Case::new(&["--timeout"], "--timeout"),
        Mistake::MissingArgument | Mistake::ConflictingFlags => return None,
        Mistake::BadNumber => Case::new(&["--buffer-size", "0"], "--buffer-size"),
        Mistake::BadChoice => Case::new(&["--cq-mode", "sometimes"], "sometimes"),
        Mistake::BadDuration => Case::new(&["--timeout", "soon"], "soon"),
        Mistake::ZeroDuration => Case::new(&["--timeout", "0s"], "longer than zero"),
        Mistake::BadAddress => Case::new(&["--allow", "10.0.0.0/40"], "10.0.0.0/40"),
        Mistake::UnreadableFile => Case::new(&["--token-file", MISSING_FILE], MISSING_FILE),
        Mistake::EmptyFile => Case::new(&["--token-file", EMPTY_FILE], "empty"),
        Mistake::EmptyValue => Case::new(&[], "empty").env("RDMA_WRITE_TOKEN", ""),
        Mistake::NoSuchDevice => Case::new(&["--ib-dev", "nosuch0"], "nosuch0"),
        Mistake::NoSuchPort => Case::new(&["--ib-port", "9"], "port 9"),
        Mistake::GidIndexOutOfRange => Case::new(&["--gid-idx", "99"], "GID index 99"),
    })
}

/// Puts a case on a command line that cannot hold a test up: loopback, any port, a lifetime.
fn contained(mut case: Case) -> Case {
    let mut args: Vec<String> = ["--listen", "127.0.0.1:0", "--lifetime", "10s"]
        .map(String::from)
        .to_vec();
    args.append(&mut case.args);
    case.args = args;
    case
}

#[test]
fn every_mistake_is_a_documented_usage_error() {
    server().check_mistakes(|m| mistake(m).map(contained));
}

#[test]
fn help_documents_exactly_the_codes_the_server_returns() {
    assert_eq!(server().documented_codes(), [0, 1, 2, 3, 4, 5]);
}

/// Without RDMA in the kernel the server says so and how to get it; with RDMA, it gives up after
/// its --lifetime. Either way: message and advice, no backtrace, one line with --json.
#[test]
fn an_expected_failure_shows_advice_and_no_backtrace() {
    server().check_first_failure(
        &["--listen", "127.0.0.1:0", "--lifetime", "1s"],
        (Exit::Timeout, "--lifetime"),
    );
}

/// The binary has no test hooks: `--fault` is an unknown argument (the misbehaviours live in
/// the test-only `rdma-misbehave` peer, never in the binary the package ships).
#[test]
fn the_binary_has_no_fault_flag() {
    server().assert_no_flag(&["--fault", "no-remote-write"], "--fault");
}

/// A guessable token is refused at start, as a usage error naming the minimum, from the
/// variable as from a file (issue 16, item 7).
#[test]
fn a_short_token_is_a_usage_error() {
    let args: Vec<String> = ["--listen", "127.0.0.1:0", "--lifetime", "10s"]
        .map(String::from)
        .to_vec();
    let (exit, run) = server().check_expected_failure(&args, &[("RDMA_WRITE_TOKEN", "a")]);
    assert_eq!(exit, Exit::Usage, "{run:?}");
    assert!(run.stderr.contains("at least 16"), "{run:?}");
}

/// The seed's zero-config start still starts, and warns loudly on stderr when it listens
/// beyond loopback with no token and no --allow; on loopback, or with a token, it does not
/// (issue 16, item 3). The warning comes before the device is opened, so this runs anywhere.
#[test]
fn an_exposed_start_is_warned_about() {
    let run = |listen: &str, env: &[(&str, &str)]| {
        let args: Vec<String> = ["--listen", listen, "--lifetime", "1s"]
            .map(String::from)
            .to_vec();
        server().run(&args, env)
    };
    let open = run("0.0.0.0:0", &[]);
    assert!(
        open.stderr
            .lines()
            .any(|l| l.starts_with("WARNING: listening on 0.0.0.0:0")),
        "{open:?}"
    );
    let local = run("127.0.0.1:0", &[]);
    assert!(!local.stderr.contains("WARNING"), "{local:?}");
    let with_token = run("0.0.0.0:0", &[("RDMA_WRITE_TOKEN", "0123456789abcdef0123")]);
    assert!(!with_token.stderr.contains("WARNING"), "{with_token:?}");
}

/// A pinned-memory budget that cannot hold one write session stops the server at start, as a
/// usage error naming both settings (issue 16, item 4). Checked before the device is opened.
#[test]
fn a_budget_below_one_session_is_a_usage_error() {
    let args: Vec<String> = [
        "--listen",
        "127.0.0.1:0",
        "--lifetime",
        "10s",
        "--max-pinned",
        "65536",
        "--buffer-size",
        "1048576",
    ]
    .map(String::from)
    .to_vec();
    let (exit, run) = server().check_expected_failure(&args, &[]);
    assert_eq!(exit, Exit::Usage, "{run:?}");
    assert!(
        run.stderr.contains("--max-pinned") && run.stderr.contains("--buffer-size 1048576"),
        "{run:?}"
    );
}
