//! The client's failure paths that need no RDMA link, held to what its `--help` promises. The
//! harness and the one list of user mistakes are shared with the server's tests
//! (`rdma_app::testing`); this file only says how to make each mistake here.

use rdma_app::Exit;
use rdma_app::testing::{Binary, Case, EMPTY_FILE, MISSING_FILE, Mistake};

fn client() -> Binary {
    Binary::new(env!("CARGO_BIN_EXE_rdma-client"))
}

/// Where a client that got past its checks would go: nothing listens on port 1.
const NOWHERE: &str = "127.0.0.1:1";

/// How the client meets each mistake (`None`: it has no such input).
fn mistake(m: Mistake) -> Option<Case> {
    Some(match m {
        Mistake::UnknownFlag => Case::new(&[NOWHERE, "--frobnicate"], "--frobnicate"),
        Mistake::MissingValue => Case::new(&[NOWHERE, "--timeout"], "--timeout"),
        Mistake::MissingArgument => Case::new(&[], "<SERVER>"),
        Mistake::ConflictingFlags => {
            Case::new(&[NOWHERE, "--message", "x", "--file", EMPTY_FILE], "--file")
        }
        Mistake::BadNumber => Case::new(&[NOWHERE, "--ib-port", "256"], "256"),
        Mistake::BadChoice => Case::new(&[NOWHERE, "--notify", "carrier-pigeon"], "carrier-pigeon"),
        Mistake::BadDuration => Case::new(&[NOWHERE, "--timeout", "soon"], "soon"),
        Mistake::ZeroDuration => Case::new(&[NOWHERE, "--timeout", "0s"], "longer than zero"),
        // The server address is resolved (DNS) after the device is open: a network error.
        Mistake::BadAddress => return None,
        Mistake::UnreadableFile => Case::new(&[NOWHERE, "--file", MISSING_FILE], MISSING_FILE),
        Mistake::EmptyFile => Case::new(&[NOWHERE, "--file", EMPTY_FILE], "empty"),
        Mistake::EmptyValue => Case::new(&[NOWHERE, "--message", ""], "at least one byte"),
        Mistake::NoSuchDevice => Case::new(&[NOWHERE, "--ib-dev", "nosuch0"], "nosuch0"),
        Mistake::NoSuchPort => Case::new(&[NOWHERE, "--ib-port", "9"], "port 9"),
        Mistake::GidIndexOutOfRange => Case::new(&[NOWHERE, "--gid-idx", "99"], "GID index 99"),
    })
}

#[test]
fn every_mistake_is_a_documented_usage_error() {
    client().check_mistakes(mistake);
}

#[test]
fn help_documents_exactly_the_codes_the_client_returns() {
    assert_eq!(client().documented_codes(), (0..=9).collect::<Vec<_>>());
}

/// On a kernel without RDMA (like CI's) the client says so and how to get RDMA; with RDMA, that
/// nobody listens. Either way: message and advice, no backtrace even with RUST_BACKTRACE=1, and
/// one line on stderr with --json.
#[test]
fn an_expected_failure_shows_advice_and_no_backtrace() {
    client().check_first_failure(&[NOWHERE], (Exit::Network, "could not reach the server"));
}

/// The binary has no test hooks: `--fault` is an unknown argument (the misbehaviours live in
/// the test-only `rdma-misbehave` peer, never in the binary the package ships).
#[test]
fn the_binary_has_no_fault_flag() {
    client().assert_no_flag(&[NOWHERE, "--fault", "wrong-rkey"], "--fault");
}

/// The mesh's mistakes are usage errors that name what to fix, before any RDMA (so the same on
/// a host without it).
#[test]
fn the_meshs_mistakes_are_usage_errors() {
    let short_topology =
        std::env::temp_dir().join(format!("rdma-topology-{}.conf", std::process::id()));
    std::fs::write(&short_topology, "SwitchName=tor1 Nodes=n1\n").expect("a temporary file");
    let short_topology = short_topology.display().to_string();
    let args = |extra: &[&str]| -> Vec<String> {
        ["mesh", "n1,n2"]
            .iter()
            .chain(extra)
            .map(|s| (*s).to_owned())
            .collect()
    };
    for (extra, names) in [
        (
            &["--rank", "0", "--metrics-textfile", "/tmp/mesh.txt"][..],
            "*.prom",
        ),
        (&["--rank", "2"][..], "rank 2 is out of range"),
        (
            &["--rank", "0", "--token-file", MISSING_FILE][..],
            MISSING_FILE,
        ),
        (
            &["--rank", "0", "--topology", MISSING_FILE][..],
            "--topology",
        ),
        (
            &["--rank", "0", "--topology", &short_topology][..],
            "(n2): add them to their ToR",
        ),
    ] {
        let (exit, run) = client().check_expected_failure(&args(extra), &[]);
        assert_eq!(exit, Exit::Usage, "{run:?}");
        assert!(run.stderr.contains(names), "{names}: {run:?}");
    }
    let missing = format!("@{MISSING_FILE}");
    let (exit, run) = client().check_expected_failure(&["mesh".to_owned(), missing], &[]);
    assert_eq!(exit, Exit::Usage, "{run:?}");
    assert!(run.stderr.contains("cannot read it"), "{run:?}");
}

/// Each use's `--help` is one screen, and the top-level one lists the four uses first; the
/// exit-code table is in the long help (`rdma-client help`).
#[test]
fn each_help_is_one_screen_and_the_uses_come_first() {
    let help = |args: &[&str]| {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_rdma-client"))
            .args(args)
            .output()
            .expect("run rdma-client");
        assert!(o.status.success(), "{args:?}: {o:?}");
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let top = help(&["--help"]);
    assert!(top.lines().count() <= 40, "{top}");
    let usage: Vec<&str> = top
        .lines()
        .skip_while(|l| !l.starts_with("Usage:"))
        .take(4)
        .collect();
    for (line, word) in usage.iter().zip(["<SERVER>", "bench", "fabric", "mesh"]) {
        assert!(line.contains(word), "{usage:?}");
    }
    for args in [
        &["bench", "--help"][..],
        &["fabric", "--help"],
        &["fabric", "report", "-h"],
        &["mesh", "--help"],
    ] {
        let text = help(args);
        assert!(text.lines().count() <= 45, "{args:?}:\n{text}");
        assert!(text.contains("Usage: rdma-client"), "{text}");
    }
    assert!(help(&["help"]).contains("Exit codes:"));
    assert!(
        help(&["help", "mesh"]).contains("--tclass"),
        "the long help has every option"
    );
}
