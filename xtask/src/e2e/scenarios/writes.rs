//! The scenarios of plain writes and of clients that misbehave.

use super::build::*;
use super::types::*;
use rdma_proto::events::client::Event as ClientEvent;
use rdma_proto::events::server::{Event as ServerEvent, SessionNotify};
use rdma_proto::{ErrorCode, Exit};

/// One-shot writes that must be verified: the seed's, JSON, TCP notice, polling, 1 MiB, exact fit.
pub(super) fn writes() -> Vec<Scenario> {
    vec![
        Scenario {
            // The seed's human lines are what this scenario tests: read as text.
            server_expect: vec![
                Expect::StdoutHas("received message: Hello RDMA Write!"),
                Expect::StdoutHas("verified: RDMA Write data landed in server memory"),
            ],
            clients: vec![ClientRun {
                tool: Tool::RdmaClient,
                target: Target::Server,
                label: "seed client",
                args: vec![],
                env: vec![],
                exit: None,
                expect: vec![Expect::StdoutHas("server verified 17 bytes")],
            }],
            quick: true,
            ..Scenario::new(
                "seed",
                "the seed's demo with human output: the server prints what landed in its memory",
            )
        },
        Scenario {
            server_args: strings(&["--json"]),
            server_expect: vec![
                server("listening", |e| matches!(e, ServerEvent::Listening { .. })),
                server("qp_ready, notify imm", |e| {
                    matches!(
                        e,
                        ServerEvent::QpReady {
                            notify: SessionNotify::Imm,
                            ..
                        }
                    )
                }),
                // No device flags: the session's port is the one that holds the address the
                // client came in on, and the server says so.
                server("port_chosen for the client's address", |e| {
                    matches!(e, ServerEvent::PortChosen { why, gid, .. }
                        if why.contains("holds ") && gid.starts_with("::ffff:"))
                }),
                server_verified(SEED_MESSAGE),
            ],
            clients: vec![{
                let mut c = good_client("client", SEED_MESSAGE, &[]);
                c.expect
                    .push(client("connected, port chosen by the route", |e| {
                        matches!(e, ClientEvent::Connected { chosen: Some(why), .. }
                        if why.contains("holds ::ffff:"))
                    }));
                c
            }],
            quick: true,
            ..Scenario::new(
                "seed-json",
                "the same write, checked through both sides' --json events",
            )
        },
        Scenario {
            server_args: strings(&["--json"]),
            server_expect: vec![
                server("written, notify tcp", |e| {
                    matches!(
                        e,
                        ServerEvent::Written {
                            notify: SessionNotify::Tcp,
                            ..
                        }
                    )
                }),
                server_verified(SEED_MESSAGE),
            ],
            clients: vec![good_client("client", SEED_MESSAGE, &["--notify", "tcp"])],
            ..Scenario::new(
                "notify-tcp",
                "plain RDMA Write, then a `written` notice over TCP",
            )
        },
        Scenario {
            server_args: strings(&["--json", "--cq-mode", "poll"]),
            server_expect: vec![server_verified(SEED_MESSAGE)],
            clients: vec![good_client("client", SEED_MESSAGE, &["--cq-mode", "poll"])],
            ..Scenario::new("cq-poll", "busy-polling completion queues on both sides")
        },
        Scenario {
            server_args: strings(&["--json", "--buffer-size", "1048576"]),
            server_expect: vec![server("verified 1 MiB, text truncated", |e| {
                matches!(
                    e,
                    ServerEvent::Verified {
                        verified: true,
                        length: 1_048_576,
                        truncated: true,
                        ..
                    }
                )
            })],
            clients: vec![ClientRun {
                tool: Tool::RdmaClient,
                target: Target::Server,
                label: "1 MiB client",
                args: strings(&["--json", "--file", "{payload}"]),
                env: vec![],
                exit: None,
                expect: vec![client("verified 1 MiB", |e| {
                    matches!(
                        e,
                        ClientEvent::Verified {
                            verified: true,
                            length: 1_048_576,
                            ..
                        }
                    )
                })],
            }],
            ..Scenario::new("one-mib", "a 1 MiB payload into a 1 MiB buffer")
        },
        Scenario {
            server_args: strings(&["--json"]),
            server_expect: vec![server_verified(EXACT_64)],
            clients: vec![good_client("64 bytes", EXACT_64, &[])],
            ..Scenario::new(
                "exact-fit",
                "a payload that exactly fills the 64-byte buffer",
            )
        },
    ]
}

/// Clients that write where or what they may not: they fail, the server survives.
pub(super) fn misbehaving_clients() -> Vec<Scenario> {
    vec![
        Scenario {
            server_args: strings(&["--json"]),
            server_expect: vec![
                server_error(ErrorCode::TooLong),
                server_verified(SEED_MESSAGE),
            ],
            clients: vec![
                failing_client(
                    "65 bytes",
                    Exit::Refused,
                    &["--message", OVER_64],
                    "too_long",
                ),
                good_client("then a normal client", SEED_MESSAGE, &[]),
            ],
            ..Scenario::new(
                "one-byte-too-many",
                "65 bytes for a 64-byte buffer: refused before any RDMA, server keeps waiting",
            )
        },
        Scenario {
            server_args: strings(&["--json"]),
            server_expect: vec![
                server("a session error", |e| {
                    matches!(e, ServerEvent::Error { .. })
                }),
                server_verified(SEED_MESSAGE),
            ],
            clients: vec![
                ClientRun {
                    tool: Tool::Misbehave("wrong-rkey"),
                    ..failing_client("wrong rkey", Exit::Transfer, &[], "remote access")
                },
                good_client("then a normal client", SEED_MESSAGE, &[]),
            ],
            ..Scenario::new(
                "wrong-rkey",
                "a write with a corrupted rkey: remote access error on the client, server unharmed",
            )
        },
        Scenario {
            server_args: strings(&["--json"]),
            server_expect: vec![server_verified(SEED_MESSAGE)],
            clients: vec![
                ClientRun {
                    tool: Tool::Misbehave("out-of-bounds"),
                    ..failing_client("past the end", Exit::Transfer, &[], "remote access")
                },
                good_client("then a normal client", SEED_MESSAGE, &[]),
            ],
            ..Scenario::new(
                "out-of-bounds",
                "a write aimed past the end of the buffer: refused by the server's NIC",
            )
        },
        Scenario {
            server_args: strings(&["--json", "--serve"]),
            server_expect: vec![server_verified(SEED_MESSAGE), stopped_after(1)],
            clients: vec![
                ClientRun {
                    // It exits 0 only if the server's verdict describes bytes it really wrote
                    // (the payload or one whole rewrite), with `verified` true for the payload.
                    // Its account of its rewrites is a human line of the test-only peer's
                    // own: no event carries it.
                    expect: vec![
                        Expect::StderrHas("rewrote the server's buffer"),
                        Expect::StderrHas("the server's verdict (verified="),
                        client("verified of 17 bytes", |e| {
                            matches!(e, ClientEvent::Verified { length: 17, .. })
                        }),
                    ],
                    tool: Tool::Misbehave("rewrite-after-imm"),
                    ..good_client("keeps rewriting after its write", SEED_MESSAGE, &[])
                },
                ClientRun {
                    // With notify=tcp its rewrites race its `written` notice instead.
                    expect: vec![Expect::StderrHas("the server's verdict (verified=")],
                    tool: Tool::Misbehave("rewrite-after-imm"),
                    ..good_client(
                        "keeps rewriting, notify tcp",
                        SEED_MESSAGE,
                        &["--notify", "tcp"],
                    )
                },
                good_client("then a normal client", SEED_MESSAGE, &[]),
            ],
            ..Scenario::new(
                "rewrite-race",
                "a client keeps rewriting the buffer after its write-with-immediate: the server revokes its access before reading, its verdict matches the bytes it holds, and it keeps serving",
            )
        },
    ]
}
