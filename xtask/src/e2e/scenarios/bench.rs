//! The scenarios of the bench, and of the server's own side.

use super::build::*;
use super::types::*;
use rdma_proto::events::server::{Event as ServerEvent, StopReason};
use rdma_proto::{BenchMode, ErrorCode, Exit};

/// The bench modes against a server.
pub(super) fn bench() -> Vec<Scenario> {
    vec![
        Scenario {
            // No bench flag on the server: the client's hello carries every parameter.
            server_args: strings(&["--json", "--serve"]),
            server_expect: vec![server_verified(SEED_MESSAGE), stopped_after(3)],
            clients: vec![
                bench_client("bench lat, 64 B", BenchMode::Lat, 64),
                bench_client("bench bw, 64 KiB", BenchMode::Bw, 65536),
                good_client("then a normal client", SEED_MESSAGE, &[]),
            ],
            ..Scenario::new(
                "bench",
                "rdma-client bench (lat and bw) against a server started with no bench flags: perftest's rows, and the server verifies the final bytes",
            )
        },
        Scenario {
            // A ping every second keeps each wait under --timeout: only the session's own
            // bound (--bench-max-time) can end it, long before its 20 pings are done.
            server_args: strings(&[
                "--json",
                "--serve",
                "--bench-max-time",
                "3s",
                "--timeout",
                "2s",
            ]),
            server_expect: vec![
                server("the slow bench session ended at --bench-max-time", |e| {
                    matches!(e, ServerEvent::Error { code, message, .. }
                        if code == ErrorCode::Timeout.as_str() && message.contains("--bench-max-time"))
                }),
                server_verified(SEED_MESSAGE),
                stopped_after(1),
            ],
            clients: vec![
                ClientRun {
                    label: "bench lat pinging once a second",
                    tool: Tool::Misbehave("slow-ping"),
                    target: Target::Server,
                    args: strings(&[
                        crate::scenario::role::BENCH,
                        "--json",
                        "--mode",
                        "lat",
                        "--size",
                        "64",
                        "--iters",
                        "20",
                    ]),
                    env: vec![],
                    exit: Some(Exit::Timeout),
                    expect: vec![],
                },
                good_client("then a normal client", SEED_MESSAGE, &[]),
            ],
            ..Scenario::new(
                "bench-time",
                "a bench lat client that pings just often enough is cut off at --bench-max-time, and the server goes on serving",
            )
        },
        Scenario {
            // `--serve` keeps sessions (its default --keep-alive): the bench session gets rounds.
            server_args: strings(&["--json", "--serve"]),
            server_expect: vec![
                server("the bench session's second round", |e| {
                    matches!(e, ServerEvent::Round { round: 2, .. })
                }),
                server_verified(SEED_MESSAGE),
                stopped_after(3),
            ],
            clients: vec![
                ClientRun {
                    tool: Tool::Misbehave("stale-bench-round"),
                    ..failing_client(
                        "two bench rounds, then a write into the last one's buffer",
                        Exit::Transfer,
                        &[
                            crate::scenario::role::BENCH,
                            "--mode",
                            "lat",
                            "--size",
                            "64",
                            "--iters",
                            "20",
                        ],
                        "remote access",
                    )
                },
                good_client("then a normal client", SEED_MESSAGE, &[]),
            ],
            ..Scenario::new(
                "bench-rounds",
                "a lat bench session kept for two verified rounds, each on a fresh rkey; a write into the last round's buffer after its verdict is refused by the server's NIC, and the server goes on serving",
            )
        },
    ]
}

/// A server that fails to set up, and one that speaks Chinese.
pub(super) fn server_side() -> Vec<Scenario> {
    vec![
        Scenario {
            server_args: strings(&["--json", "--serve"]),
            server_fault: Some("no-remote-write"),
            server_expect: vec![
                server_error(ErrorCode::WriteFailed),
                server("stopped by signal, nothing verified", |e| {
                    matches!(
                        e,
                        ServerEvent::Stopped {
                            reason: StopReason::Signal,
                            verified: 0,
                            ..
                        }
                    )
                }),
            ],
            clients: vec![failing_client(
                "client",
                Exit::Transfer,
                &["--message", SEED_MESSAGE],
                "remote",
            )],
            ..Scenario::new(
                "broken-server",
                "a server that registers without remote write (the seed's bug) fails readably",
            )
        },
        Scenario {
            server_env: vec![("LANG", "zh_CN.UTF-8")],
            // The zh human lines are what this scenario tests: read as text.
            server_expect: vec![
                Expect::StdoutHas("服务端收到消息: Hello RDMA Write!"),
                Expect::StdoutHas("验证通过：RDMA Write数据已写入服务端内存"),
            ],
            clients: vec![ClientRun {
                tool: Tool::RdmaClient,
                target: Target::Server,
                label: "client",
                args: vec![],
                env: vec![],
                exit: None,
                expect: vec![],
            }],
            ..Scenario::new(
                "zh",
                "with a zh locale the server prints the seed's own two lines",
            )
        },
    ]
}
