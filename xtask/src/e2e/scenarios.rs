//! The end-to-end scenarios: what each server and client is asked to do, and what must be seen.
//!
//! A scenario is one `rdma-server` process (its own TCP port) and a sequence of `rdma-client`
//! runs against it. Every scenario that feeds the server bad input ends with a well-behaved
//! client that must still be verified: that is how "the server survives" is proven, and it is
//! also what lets a one-shot server exit 0 on its own.
//!
//! Verdicts are read from the binaries' `--json` events, parsed as the contract's types
//! (`rdma_proto::events`): a check names the fields it looks at, so a renamed field is a
//! compile error here; a JSON line that is no event of its binary fails the check, naming it.
//! Exit codes are `rdma_proto::Exit` kinds, never numbers. The human lines are read for the
//! scenario that shows the seed's output.

use rdma_proto::events::client::Event as ClientEvent;
use rdma_proto::events::server::{AuthMode, Event as ServerEvent, SessionNotify, StopReason};
use rdma_proto::{BenchMode, ErrorCode, Exit};
use serde_json::Value;
use std::sync::Arc;

/// The message the seed writes.
pub const SEED_MESSAGE: &str = "Hello RDMA Write!";
/// First TCP port used by scenario servers; scenario `i` listens on `BASE_PORT + i`.
pub const BASE_PORT: u16 = 7471;
/// Payload file for the 1 MiB scenario, written under `target/xtask/e2e/` by the host.
pub const ONE_MIB_FILE: &str = "payload-1mib.bin";
/// Placeholder in argv for the 1 MiB payload file.
pub const PAYLOAD: &str = "{payload}";
/// The caps the `hostile-token` server runs with, told to its hostile peer as they are: 4
/// connections per address (`per_ip`), 12 MiB pinned (`pinned_budget`: one 4 MiB lat session
/// fits, two do not).
const HOSTILE_CAPS: &[&str] = &["--max-per-ip", "4", "--max-pinned", "12582912"];

/// Placeholder in argv for the file holding [`TOKEN`].
pub const TOKEN_FILE: &str = "{token_file}";
/// The shared access token of the `token` scenario.
pub const TOKEN: &str = "e2e-token-6f1c2a9b4d7e";
/// valgrind as a leak checker: definite leaks and memory errors fail the run.
pub const VALGRIND: &[&str] = &[
    "valgrind",
    "--quiet",
    "--leak-check=full",
    "--show-leak-kinds=definite",
    "--errors-for-leak-kinds=definite",
    "--error-exitcode=99",
];

/// A test of one event.
pub type Check<E> = Arc<dyn Fn(&E) -> bool + Send + Sync>;

/// A check on the lines a process printed.
#[derive(Clone)]
pub enum Expect {
    /// A line of stdout contains this text.
    StdoutHas(&'static str),
    /// stderr contains this text (the human error report).
    StderrHas(&'static str),
    /// `rdma-server --json` printed an event the check holds for (described by the text).
    Server(String, Check<ServerEvent<'static>>),
    /// `rdma-client --json` printed an event the check holds for (described by the text).
    Client(String, Check<ClientEvent<'static>>),
    /// `xtask hostile --json` printed its summary, with no failed case.
    HostileClean,
}

impl std::fmt::Debug for Expect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Expect::StdoutHas(t) => write!(f, "StdoutHas({t:?})"),
            Expect::StderrHas(t) => write!(f, "StderrHas({t:?})"),
            Expect::Server(what, _) => write!(f, "Server({what})"),
            Expect::Client(what, _) => write!(f, "Client({what})"),
            Expect::HostileClean => f.write_str("HostileClean"),
        }
    }
}

/// A server event that `check` holds for; `what` says which, for the failure message.
fn server(
    what: impl Into<String>,
    check: impl Fn(&ServerEvent<'static>) -> bool + Send + Sync + 'static,
) -> Expect {
    Expect::Server(what.into(), Arc::new(check))
}

/// A client event that `check` holds for; `what` says which, for the failure message.
fn client(
    what: impl Into<String>,
    check: impl Fn(&ClientEvent<'static>) -> bool + Send + Sync + 'static,
) -> Expect {
    Expect::Client(what.into(), Arc::new(check))
}

/// The server stopped after verifying at least `n` writes.
fn stopped_after(n: u64) -> Expect {
    server(
        format!("stopped with verified >= {n}"),
        move |e| matches!(e, ServerEvent::Stopped { verified, .. } if *verified >= n),
    )
}

/// The server stopped for `why`.
fn stopped_by(why: StopReason) -> Expect {
    server(
        format!("stopped by {why}"),
        move |e| matches!(e, ServerEvent::Stopped { reason, .. } if *reason == why),
    )
}

/// The server logged a session error with `code`.
fn server_error(code: ErrorCode) -> Expect {
    server(
        format!("error {}", code.as_str()),
        move |e| matches!(e, ServerEvent::Error { code: c, .. } if c == code.as_str()),
    )
}

/// Where a client connects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// The scenario's server (waiting for it to start listening).
    Server,
    /// A port where nothing listens, without waiting.
    Nowhere,
}

/// Which program plays the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tool {
    /// `rdma-client SERVER:PORT ARGS…`
    RdmaClient,
    /// `xtask hostile --server SERVER:PORT ARGS…`: the protocol-level misbehaviour matrix.
    Hostile,
    /// A plain command on the client's node (e.g. `ip link set eth0 down`); `args` unused.
    Command(&'static [&'static str]),
}

/// One client run.
#[derive(Debug, Clone)]
pub struct ClientRun {
    pub label: &'static str,
    pub tool: Tool,
    pub target: Target,
    /// Extra arguments after `SERVER:PORT`.
    pub args: Vec<String>,
    /// Environment for the client (`env NAME=VALUE ...`).
    pub env: Vec<(&'static str, &'static str)>,
    /// How it must end: `None` is success (0), else the documented exit of that kind.
    pub exit: Option<Exit>,
    pub expect: Vec<Expect>,
}

/// The process status `exit` stands for (0 for success).
pub fn status(exit: Option<Exit>) -> i32 {
    exit.map_or(0, |e| i32::from(e.code()))
}

/// One server and its clients.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub name: &'static str,
    pub about: &'static str,
    pub server_args: Vec<String>,
    pub server_env: Vec<(&'static str, &'static str)>,
    /// How the server must end: `None` is success (0).
    pub server_exit: Option<Exit>,
    pub server_expect: Vec<Expect>,
    /// Runs server and clients under this program (e.g. [`VALGRIND`]).
    pub wrapper: &'static [&'static str],
    pub clients: Vec<ClientRun>,
    /// Part of the quick `cargo xtask e2e` run (the rest runs in `cargo xtask test`).
    pub quick: bool,
    /// Disturbs the node's network: runs only inside the guests, never on a user's host.
    pub guest_only: bool,
}

impl Scenario {
    /// A scenario with a plain one-shot server (exit 0), no clients yet, not quick.
    fn new(name: &'static str, about: &'static str) -> Self {
        Self {
            name,
            about,
            server_args: Vec::new(),
            server_env: Vec::new(),
            server_exit: None,
            server_expect: Vec::new(),
            wrapper: &[],
            clients: Vec::new(),
            quick: false,
            guest_only: false,
        }
    }
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| (*s).to_owned()).collect()
}

/// A client that writes `message` (JSON mode) and must be verified.
fn good_client(label: &'static str, message: &'static str, extra: &[&str]) -> ClientRun {
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

/// `rdma-client --bench MODE --size SIZE --iters 100`: one row of perftest's figures (a
/// `bench_lat` or `bench_bw` event) for exactly that size and all 100 iterations, and the
/// server's verdict on the final bytes.
fn bench_client(label: &'static str, mode: BenchMode, size: u64) -> ClientRun {
    ClientRun {
        label,
        tool: Tool::RdmaClient,
        target: Target::Server,
        args: strings(&[
            "--json",
            "--bench",
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
fn server_verified(message: &'static str) -> Expect {
    server(
        format!("verified {message:?}"),
        move |e| matches!(e, ServerEvent::Verified { verified: true, text, .. } if text == message),
    )
}

/// The client heard the server's verdict: verified.
fn client_verified() -> Expect {
    client("verified", |e| {
        matches!(e, ClientEvent::Verified { verified: true, .. })
    })
}

/// A command on the client's node that must succeed.
fn command(label: &'static str, argv: &'static [&'static str]) -> ClientRun {
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
fn hostile(label: &'static str, args: &[&str]) -> ClientRun {
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
/// `needle`.
fn failing_client(
    label: &'static str,
    exit: Exit,
    args: &[&str],
    needle: &'static str,
) -> ClientRun {
    let mut all = strings(&["--json"]);
    all.extend(strings(args));
    ClientRun {
        label,
        tool: Tool::RdmaClient,
        target: Target::Server,
        args: all,
        env: vec![],
        exit: Some(exit),
        expect: vec![
            client(format!("error of kind {exit}"), move |e| {
                matches!(e, ClientEvent::Error { kind, exit_code, .. }
                    if *kind == exit && *exit_code == exit.code())
            }),
            Expect::StderrHas(needle),
        ],
    }
}

/// Every scenario, in run order.
pub fn all() -> Vec<Scenario> {
    let exact64 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    let over64 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdefX";
    vec![
        Scenario {
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
            server_expect: vec![server_verified(exact64)],
            clients: vec![good_client("64 bytes", exact64, &[])],
            ..Scenario::new(
                "exact-fit",
                "a payload that exactly fills the 64-byte buffer",
            )
        },
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
                    &["--message", over64],
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
                failing_client(
                    "wrong rkey",
                    Exit::Transfer,
                    &["--fault", "wrong-rkey"],
                    "remote access",
                ),
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
                failing_client(
                    "past the end",
                    Exit::Transfer,
                    &["--fault", "out-of-bounds"],
                    "remote access",
                ),
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
                    expect: vec![
                        Expect::StderrHas("rewrote the server's buffer"),
                        Expect::StderrHas("the server's verdict (verified="),
                        client("verified of 17 bytes", |e| {
                            matches!(e, ClientEvent::Verified { length: 17, .. })
                        }),
                    ],
                    ..good_client(
                        "keeps rewriting after its write",
                        SEED_MESSAGE,
                        &["--fault", "rewrite-after-imm"],
                    )
                },
                ClientRun {
                    // With notify=tcp its rewrites race its `written` notice instead.
                    expect: vec![Expect::StderrHas("the server's verdict (verified=")],
                    ..good_client(
                        "keeps rewriting, notify tcp",
                        SEED_MESSAGE,
                        &["--fault", "rewrite-after-imm", "--notify", "tcp"],
                    )
                },
                good_client("then a normal client", SEED_MESSAGE, &[]),
            ],
            ..Scenario::new(
                "rewrite-race",
                "a client keeps rewriting the buffer after its write-with-immediate: the server revokes its access before reading, its verdict matches the bytes it holds, and it keeps serving",
            )
        },
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
                "rdma-client --bench lat and bw against a server started with no bench flags: perftest's rows, and the server verifies the final bytes",
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
                    tool: Tool::RdmaClient,
                    target: Target::Server,
                    args: strings(&[
                        "--json",
                        "--bench",
                        "lat",
                        "--size",
                        "64",
                        "--iters",
                        "20",
                        "--fault",
                        "slow-ping",
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
            server_args: strings(&["--json", "--serve", "--fault", "no-remote-write"]),
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
                    &["--device", "no-such-dev0"],
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

/// Checks `expect` against what a process printed; returns the failures, human-readable.
pub fn check(expect: &[Expect], stdout: &str, stderr: &str) -> Vec<String> {
    let mut failures = Vec::new();
    for e in expect {
        match e {
            Expect::StdoutHas(text) => {
                if !stdout.lines().any(|l| l.contains(text)) {
                    failures.push(format!("stdout lacks {text:?}"));
                }
            }
            Expect::StderrHas(text) => {
                if !stderr.to_lowercase().contains(&text.to_lowercase()) {
                    failures.push(format!("stderr lacks {text:?}"));
                }
            }
            Expect::Server(what, check) => find(stdout, what, check.as_ref(), &mut failures),
            Expect::Client(what, check) => find(stdout, what, check.as_ref(), &mut failures),
            Expect::HostileClean => {
                let clean = json_lines(stdout).any(|l| {
                    serde_json::from_str::<Value>(l).is_ok_and(|v| {
                        v["type"] == "summary" && v["failed"].as_array().is_some_and(Vec::is_empty)
                    })
                });
                if !clean {
                    failures.push("no hostile summary without failed cases".to_owned());
                }
            }
        }
    }
    failures
}

/// The lines of `stdout` that are JSON objects (the binaries' `--json` events).
fn json_lines(stdout: &str) -> impl Iterator<Item = &str> {
    stdout.lines().filter(|l| l.trim_start().starts_with('{'))
}

/// Whether some JSON line of `stdout` is an `E` that `check` holds for; a JSON line that is no
/// `E` at all is a failure of its own, naming the line.
fn find<E: serde::de::DeserializeOwned>(
    stdout: &str,
    what: &str,
    check: &(dyn Fn(&E) -> bool + Send + Sync),
    failures: &mut Vec<String>,
) {
    let mut found = false;
    for line in json_lines(stdout) {
        match rdma_proto::events::parse::<E>(line) {
            Ok(event) => found |= check(&event),
            Err(e) => failures.push(e.to_string()),
        }
    }
    if !found {
        failures.push(format!("no {what} event"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_fail_when_output_lacks_what_is_expected() {
        let expect = vec![Expect::StdoutHas("received message: hi"), client_verified()];
        let verdict = |v: bool| {
            format!(
                r#"{{"type":"verified","verified":{v},"length":2,"crc32c":1,"text":"hi","truncated":false}}"#
            )
        };
        let good = format!("received message: hi\n{}\n", verdict(true));
        assert!(check(&expect, &good, "").is_empty());
        let bad = format!("{}\n", verdict(false));
        let failures = check(&expect, &bad, "");
        assert_eq!(failures.len(), 2, "{failures:?}");
        // A line that is no client event (a field renamed) fails by itself, named.
        let renamed = format!(
            "{}\n{}\n",
            verdict(true),
            verdict(true).replace("crc32c", "crc")
        );
        let failures = check(&[client_verified()], &renamed, "");
        assert_eq!(failures.len(), 1, "{failures:?}");
        assert!(failures[0].contains(r#""crc":1"#), "{failures:?}");
        assert!(
            check(
                &[Expect::StderrHas("Remote Access")],
                "",
                "remote access error"
            )
            .is_empty()
        );
    }

    #[test]
    fn scenarios_are_well_formed() {
        let all = all();
        let mut names: Vec<_> = all.iter().map(|s| s.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), all.len(), "scenario names must be unique");
        assert!(all.iter().any(|s| s.quick));
        for s in &all {
            assert!(!s.clients.is_empty(), "{} has no client", s.name);
            // A one-shot server that must exit 0 needs a last client that gets verified.
            if s.server_exit.is_none() && !s.server_args.iter().any(|a| a == "--serve") {
                assert_eq!(s.clients.last().map(|c| c.exit), Some(None), "{}", s.name);
            }
        }
    }
}
