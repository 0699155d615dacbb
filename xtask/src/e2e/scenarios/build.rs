//! The pieces scenarios are made of: checks on one event, and the usual clients.

use super::types::*;
use rdma_proto::events::client::Event as ClientEvent;
use rdma_proto::events::server::{Event as ServerEvent, StopReason};
use rdma_proto::{BenchMode, ErrorCode, Exit};
use std::sync::Arc;

/// 64 bytes: exactly a 64-byte buffer.
pub(super) const EXACT_64: &str =
    "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
/// 65 bytes: one more than a 64-byte buffer holds.
pub(super) const OVER_64: &str =
    "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdefX";

/// A server event that `check` holds for; `what` says which, for the failure message.
pub(super) fn server(
    what: impl Into<String>,
    check: impl Fn(&ServerEvent<'static>) -> bool + Send + Sync + 'static,
) -> Expect {
    Expect::Server(what.into(), Arc::new(check))
}

/// A client event that `check` holds for; `what` says which, for the failure message.
pub(super) fn client(
    what: impl Into<String>,
    check: impl Fn(&ClientEvent<'static>) -> bool + Send + Sync + 'static,
) -> Expect {
    Expect::Client(what.into(), Arc::new(check))
}

/// The server stopped after verifying at least `n` writes.
pub(super) fn stopped_after(n: u64) -> Expect {
    server(
        format!("stopped with verified >= {n}"),
        move |e| matches!(e, ServerEvent::Stopped { verified, .. } if *verified >= n),
    )
}

/// The server stopped for `why`.
pub(super) fn stopped_by(why: StopReason) -> Expect {
    server(
        format!("stopped by {why}"),
        move |e| matches!(e, ServerEvent::Stopped { reason, .. } if *reason == why),
    )
}

/// The server logged a session error with `code`.
pub(super) fn server_error(code: ErrorCode) -> Expect {
    server(
        format!("error {}", code.as_str()),
        move |e| matches!(e, ServerEvent::Error { code: c, .. } if c == code.as_str()),
    )
}

pub(super) fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| (*s).to_owned()).collect()
}

/// A client that writes `message` (JSON mode) and must be verified.
pub(super) fn good_client(label: &'static str, message: &'static str, extra: &[&str]) -> ClientRun {
    let mut args = strings(&["--json", "--message", message]);
    args.extend(strings(extra));
    ClientRun {
        label,
        tool: Tool::RdmaClient,
        target: Target::Server,
        args,
        env: vec![],
        exit: None,
        expect: vec![
            client("qp_ready", |e| matches!(e, ClientEvent::QpReady { .. })),
            client(
                format!("written of {} bytes", message.len()),
                move |e| matches!(e, ClientEvent::Written { length, .. } if *length == message.len() as u64),
            ),
            client(
                format!("verified {message:?}"),
                move |e| matches!(e, ClientEvent::Verified { verified: true, text, .. } if text == message),
            ),
        ],
    }
}

/// `rdma-client bench SERVER --mode MODE --size SIZE --iters 100`: one row of perftest's figures (a
/// `bench_lat` or `bench_bw` event) for exactly that size and all 100 iterations, and the
/// server's verdict on the final bytes.
pub(super) fn bench_client(label: &'static str, mode: BenchMode, size: u64) -> ClientRun {
    ClientRun {
        label,
        tool: Tool::RdmaClient,
        target: Target::Server,
        args: strings(&[
            crate::scenario::role::BENCH,
            "--json",
            "--mode",
            mode.as_str(),
            "--size",
            &size.to_string(),
            "--iters",
            "100",
        ]),
        env: vec![],
        exit: None,
        expect: vec![
            client(
                format!("bench_{mode} row of {size} bytes, 100 iterations"),
                move |e| match (mode, e) {
                    (BenchMode::Lat, ClientEvent::BenchLat(r)) => {
                        (r.bytes, r.iterations) == (size, 100)
                    }
                    (BenchMode::Bw, ClientEvent::BenchBw(r)) => {
                        (r.bytes, r.iterations) == (size, 100)
                    }
                    _ => false,
                },
            ),
            client_verified(),
        ],
    }
}

/// The server verified exactly `message`.
pub(super) fn server_verified(message: &'static str) -> Expect {
    server(
        format!("verified {message:?}"),
        move |e| matches!(e, ServerEvent::Verified { verified: true, text, .. } if text == message),
    )
}

/// The client heard the server's verdict: verified.
pub(super) fn client_verified() -> Expect {
    client("verified", |e| {
        matches!(e, ClientEvent::Verified { verified: true, .. })
    })
}

/// A command on the client's node that must succeed.
pub(super) fn command(label: &'static str, argv: &'static [&'static str]) -> ClientRun {
    ClientRun {
        label,
        tool: Tool::Command(argv),
        target: Target::Server,
        args: vec![],
        env: vec![],
        exit: None,
        expect: vec![],
    }
}

/// The hostile peer: exits 0 only if every case got the answer PROTOCOL.md promises and, after
/// each case, a real `rdma-client` still got its write verified (`--probe-client`, added by
/// the harness).
pub(super) fn hostile(label: &'static str, args: &[&str]) -> ClientRun {
    let mut all = strings(&["--json"]);
    all.extend(strings(args));
    ClientRun {
        label,
        tool: Tool::Hostile,
        target: Target::Server,
        args: all,
        env: vec![],
        exit: None,
        expect: vec![Expect::HostileClean],
    }
}

/// A client that must fail with `exit` and a JSON error of that kind whose message mentions
/// `needle` (the message `--json` also writes, on one line, to stderr).
pub(super) fn failing_client(
    label: &'static str,
    exit: Exit,
    args: &[&str],
    needle: &'static str,
) -> ClientRun {
    // The client's use (`bench`), if any, stays first: `--json` goes after it.
    let (sub, rest) = match args.split_first() {
        Some((s, r)) if *s == crate::scenario::role::BENCH => (Some(*s), r),
        _ => (None, args),
    };
    let mut all = strings(&sub.into_iter().collect::<Vec<_>>());
    all.push("--json".to_owned());
    all.extend(strings(rest));
    ClientRun {
        label,
        tool: Tool::RdmaClient,
        target: Target::Server,
        args: all,
        env: vec![],
        exit: Some(exit),
        expect: vec![client(
            format!("error of kind {exit} whose message mentions {needle:?}"),
            move |e| crate::scenario::judge::failed_as(e, exit, needle),
        )],
    }
}
