//! The scenarios of access control, and of running under other tools.

use super::build::*;
use super::types::*;
use rdma_proto::events::server::{AuthMode, Event as ServerEvent, StopReason};
use rdma_proto::{ErrorCode, Exit};

/// Who may write: the token, the allow list, the client's own mistakes.
pub(super) fn access() -> Vec<Scenario> {
    vec![
        Scenario {
            server_args: strings(&["--json", "--token-file", TOKEN_FILE]),
            server_expect: vec![
                server("listening, auth token", |e| {
                    matches!(
                        e,
                        ServerEvent::Listening {
                            auth: AuthMode::Token,
                            ..
                        }
                    )
                }),
                server_error(ErrorCode::Unauthorized),
                server_verified(SEED_MESSAGE),
            ],
            clients: vec![
                failing_client("no token", Exit::Refused, &[], "token"),
                ClientRun {
                    env: vec![("RDMA_WRITE_TOKEN", "e2e-token-wrong-guess")],
                    ..failing_client("wrong token", Exit::Refused, &[], "unauthorized")
                },
                ClientRun {
                    env: vec![("RDMA_WRITE_TOKEN", TOKEN)],
                    ..good_client("right token", SEED_MESSAGE, &[])
                },
            ],
            ..Scenario::new(
                "token",
                "a server with a shared token: none or a wrong one is refused, the right one works",
            )
        },
        Scenario {
            server_args: strings(&["--json", "--serve", "--allow", "192.0.2.0/24"]),
            server_expect: vec![
                server(
                    "refused as forbidden",
                    |e| matches!(e, ServerEvent::Refused { code, .. } if code == ErrorCode::Forbidden.as_str()),
                ),
                server("stopped, nothing verified", |e| {
                    matches!(e, ServerEvent::Stopped { verified: 0, .. })
                }),
            ],
            clients: vec![failing_client(
                "outside the allow list",
                Exit::Refused,
                &[],
                "forbidden",
            )],
            ..Scenario::new(
                "allow",
                "a client outside --allow gets `forbidden` before any banner or secret",
            )
        },
        Scenario {
            server_args: strings(&["--json", "--serve"]),
            server_expect: vec![server("stopped, no session", |e| {
                matches!(e, ServerEvent::Stopped { sessions: 0, .. })
            })],
            clients: vec![
                failing_client(
                    "no such device",
                    Exit::Usage,
                    &["--ib-dev", "no-such-dev0"],
                    "`no-such-dev0` not found; available: ",
                ),
                ClientRun {
                    target: Target::Nowhere,
                    ..failing_client(
                        "nobody listening",
                        Exit::Network,
                        &[],
                        "could not reach the server",
                    )
                },
            ],
            ..Scenario::new(
                "client-errors",
                "clean client failures: unknown device (the real ones listed), server unreachable",
            )
        },
    ]
}

/// Under other tools: valgrind, the hostile peer, a port that goes down.
pub(super) fn tools() -> Vec<Scenario> {
    vec![
        Scenario {
            server_args: strings(&["--json", "--timeout", "60s"]),
            wrapper: VALGRIND,
            server_expect: vec![server_verified(SEED_MESSAGE)],
            clients: vec![good_client("client", SEED_MESSAGE, &["--timeout", "60s"])],
            ..Scenario::new(
                "valgrind",
                "server and client under valgrind: no definite leak, no memory error",
            )
        },
        Scenario {
            server_args: strings(&[
                "--json",
                "--serve",
                "--buffer-size",
                "4096",
                "--timeout",
                "3s",
                "--max-clients",
                "4",
            ]),
            server_expect: vec![
                stopped_by(StopReason::Signal),
                // One probe write verified after each of the 21 cases, plus the last client.
                stopped_after(22),
            ],
            clients: vec![
                hostile(
                    "hostile peer",
                    &[
                        "--buffer-size",
                        "4096",
                        "--server-timeout",
                        "3s",
                        "--max-clients",
                        "4",
                    ],
                ),
                good_client("then a normal client", SEED_MESSAGE, &[]),
            ],
            ..Scenario::new(
                "hostile",
                "a --serve server against the hostile-peer matrix (garbage, wrong order, slow loris, vanishing, busy, ...)",
            )
        },
        Scenario {
            server_args: strings(&[
                "--json",
                "--serve",
                "--timeout",
                "3s",
                "--token-file",
                TOKEN_FILE,
            ])
            .into_iter()
            .chain(strings(HOSTILE_CAPS))
            .collect(),
            server_expect: vec![stopped_by(StopReason::Signal)],
            clients: vec![hostile(
                "hostile peer with token",
                &["--server-timeout", "3s", "--token-file", TOKEN_FILE]
                    .into_iter()
                    .chain(HOSTILE_CAPS.iter().copied())
                    .collect::<Vec<_>>(),
            )],
            ..Scenario::new(
                "hostile-token",
                "the hostile-peer matrix against a server that requires a token",
            )
        },
        Scenario {
            // --serve, and a first client: the server is surely up before the link goes down
            // (with one node, the server's port goes down too).
            server_args: strings(&["--json", "--serve"]),
            server_expect: vec![server_verified(SEED_MESSAGE), stopped_after(2)],
            clients: vec![
                good_client("a normal client first", SEED_MESSAGE, &[]),
                command(
                    "take the client's link down",
                    &["ip", "link", "set", "eth0", "down"],
                ),
                failing_client("port DOWN", Exit::Rdma, &[], "not ACTIVE"),
                command("bring it back up", &["ip", "link", "set", "eth0", "up"]),
                command("let the port settle", &["sleep", "2"]),
                good_client("then a normal client", SEED_MESSAGE, &[]),
            ],
            guest_only: true,
            ..Scenario::new(
                "port-down",
                "a client whose RDMA port is DOWN says so and exits 3; after the link is back it works",
            )
        },
    ]
}
