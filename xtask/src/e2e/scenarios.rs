//! The end-to-end scenarios: what each server and client is asked to do, and what must be seen.
//!
//! A scenario is one `rdma-server` process (its own TCP port) and a sequence of `rdma-client`
//! runs against it. Every scenario that feeds the server bad input ends with a well-behaved
//! client that must still be verified: that is how "the server survives" is proven, and it is
//! also what lets a one-shot server exit 0 on its own.
//!
//! Verdicts are read from the binaries' `--json` events (JSON Lines with a `type` tag), plus
//! the human lines for the scenario that shows the seed's output.

use serde_json::Value;

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

/// A check on the lines a process printed.
#[derive(Debug, Clone)]
pub enum Expect {
    /// A line of stdout contains this text.
    StdoutHas(&'static str),
    /// stderr contains this text (the human error report).
    StderrHas(&'static str),
    /// A JSON event with this `type` exists and has these fields (values compared as JSON).
    Event(&'static str, Vec<(&'static str, Value)>),
    /// A JSON event with this `type` has a numeric field at least this large.
    EventAtLeast(&'static str, &'static str, u64),
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
    pub exit: i32,
    pub expect: Vec<Expect>,
}

/// One server and its clients.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub name: &'static str,
    pub about: &'static str,
    pub server_args: Vec<String>,
    pub server_env: Vec<(&'static str, &'static str)>,
    pub server_exit: i32,
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
            server_exit: 0,
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
        exit: 0,
        expect: vec![
            Expect::Event("qp_ready", vec![]),
            Expect::Event("written", vec![("length", Value::from(message.len()))]),
            Expect::Event(
                "verified",
                vec![
                    ("verified", Value::Bool(true)),
                    ("text", Value::from(message)),
                ],
            ),
        ],
    }
}

/// `rdma-client --bench MODE --size SIZE --iters 100`: one row of perftest's figures (the JSON
/// event `event`) for exactly that size and all 100 iterations, and the server's verdict on the
/// final bytes.
fn bench_client(label: &'static str, mode: &str, size: u64, event: &'static str) -> ClientRun {
    ClientRun {
        label,
        tool: Tool::RdmaClient,
        target: Target::Server,
        args: strings(&[
            "--json",
            "--bench",
            mode,
            "--size",
            &size.to_string(),
            "--iters",
            "100",
        ]),
        env: vec![],
        exit: 0,
        expect: vec![
            Expect::Event(
                event,
                vec![
                    ("bytes", Value::from(size)),
                    ("iterations", Value::from(100)),
                ],
            ),
            Expect::Event("verified", vec![("verified", Value::Bool(true))]),
        ],
    }
}

/// The server verified exactly `message`.
fn server_verified(message: &'static str) -> Expect {
    Expect::Event(
        "verified",
        vec![
            ("verified", Value::Bool(true)),
            ("text", Value::from(message)),
        ],
    )
}

/// A command on the client's node that must succeed.
fn command(label: &'static str, argv: &'static [&'static str]) -> ClientRun {
    ClientRun {
        label,
        tool: Tool::Command(argv),
        target: Target::Server,
        args: vec![],
        env: vec![],
        exit: 0,
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
        exit: 0,
        expect: vec![Expect::Event(
            "summary",
            vec![("failed", Value::Array(vec![]))],
        )],
    }
}

/// A client that must fail with `exit` and a JSON error whose message mentions `needle`.
fn failing_client(
    label: &'static str,
    exit: i32,
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
        exit,
        expect: vec![
            Expect::Event("error", vec![("exit_code", Value::from(exit))]),
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
                exit: 0,
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
                Expect::Event("listening", vec![]),
                Expect::Event("qp_ready", vec![("notify", Value::from("imm"))]),
                server_verified(SEED_MESSAGE),
            ],
            clients: vec![good_client("client", SEED_MESSAGE, &[])],
            quick: true,
            ..Scenario::new(
                "seed-json",
                "the same write, checked through both sides' --json events",
            )
        },
        Scenario {
            server_args: strings(&["--json"]),
            server_expect: vec![
                Expect::Event("written", vec![("notify", Value::from("tcp"))]),
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
            server_expect: vec![Expect::Event(
                "verified",
                vec![
                    ("verified", Value::Bool(true)),
                    ("length", Value::from(1_048_576)),
                    ("truncated", Value::Bool(true)),
                ],
            )],
            clients: vec![ClientRun {
                tool: Tool::RdmaClient,
                target: Target::Server,
                label: "1 MiB client",
                args: strings(&["--json", "--file", "{payload}"]),
                env: vec![],
                exit: 0,
                expect: vec![Expect::Event(
                    "verified",
                    vec![
                        ("verified", Value::Bool(true)),
                        ("length", Value::from(1_048_576)),
                    ],
                )],
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
                Expect::Event("error", vec![("code", Value::from("too_long"))]),
                server_verified(SEED_MESSAGE),
            ],
            clients: vec![
                failing_client("65 bytes", 7, &["--message", over64], "too_long"),
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
                Expect::Event("error", vec![]),
                server_verified(SEED_MESSAGE),
            ],
            clients: vec![
                failing_client("wrong rkey", 8, &["--fault", "wrong-rkey"], "remote access"),
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
                    8,
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
            server_expect: vec![
                server_verified(SEED_MESSAGE),
                Expect::EventAtLeast("stopped", "verified", 1),
            ],
            clients: vec![
                ClientRun {
                    // It exits 0 only if the server's verdict describes bytes it really wrote
                    // (the payload or one whole rewrite), with `verified` true for the payload.
                    expect: vec![
                        Expect::StderrHas("rewrote the server's buffer"),
                        Expect::StderrHas("the server's verdict (verified="),
                        Expect::Event("verified", vec![("length", Value::from(17))]),
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
            server_expect: vec![
                server_verified(SEED_MESSAGE),
                Expect::EventAtLeast("stopped", "verified", 3),
            ],
            clients: vec![
                bench_client("bench lat, 64 B", "lat", 64, "bench_lat"),
                bench_client("bench bw, 64 KiB", "bw", 65536, "bench_bw"),
                good_client("then a normal client", SEED_MESSAGE, &[]),
            ],
            ..Scenario::new(
                "bench",
                "rdma-client --bench lat and bw against a server started with no bench flags: perftest's rows, and the server verifies the final bytes",
            )
        },
        Scenario {
            server_args: strings(&["--json", "--serve", "--fault", "no-remote-write"]),
            server_expect: vec![
                Expect::Event("error", vec![("code", Value::from("write_failed"))]),
                Expect::Event(
                    "stopped",
                    vec![
                        ("reason", Value::from("signal")),
                        ("verified", Value::from(0)),
                    ],
                ),
            ],
            clients: vec![failing_client(
                "client",
                8,
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
                exit: 0,
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
                Expect::Event("listening", vec![("auth", Value::from("token"))]),
                Expect::Event("error", vec![("code", Value::from("unauthorized"))]),
                server_verified(SEED_MESSAGE),
            ],
            clients: vec![
                failing_client("no token", 7, &[], "token"),
                ClientRun {
                    env: vec![("RDMA_WRITE_TOKEN", "e2e-token-wrong-guess")],
                    ..failing_client("wrong token", 7, &[], "unauthorized")
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
                Expect::Event("refused", vec![("code", Value::from("forbidden"))]),
                Expect::Event("stopped", vec![("verified", Value::from(0))]),
            ],
            clients: vec![failing_client(
                "outside the allow list",
                7,
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
            server_expect: vec![Expect::Event("stopped", vec![("sessions", Value::from(0))])],
            clients: vec![
                failing_client(
                    "no such device",
                    2,
                    &["--device", "no-such-dev0"],
                    "`no-such-dev0` not found; available: ",
                ),
                ClientRun {
                    target: Target::Nowhere,
                    ..failing_client("nobody listening", 4, &[], "could not reach the server")
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
                Expect::Event("stopped", vec![("reason", Value::from("signal"))]),
                // One probe write verified after each of the 21 cases, plus the last client.
                Expect::EventAtLeast("stopped", "verified", 22),
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
            server_expect: vec![Expect::Event(
                "stopped",
                vec![("reason", Value::from("signal"))],
            )],
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
            server_expect: vec![
                server_verified(SEED_MESSAGE),
                Expect::EventAtLeast("stopped", "verified", 2),
            ],
            clients: vec![
                good_client("a normal client first", SEED_MESSAGE, &[]),
                command(
                    "take the client's link down",
                    &["ip", "link", "set", "eth0", "down"],
                ),
                failing_client("port DOWN", 3, &[], "not ACTIVE"),
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
    let events: Vec<Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v.get("type").is_some())
        .collect();
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
            Expect::EventAtLeast(kind, field, min) => {
                let found = events.iter().any(|ev| {
                    ev.get("type").and_then(Value::as_str) == Some(kind)
                        && ev
                            .get(*field)
                            .and_then(Value::as_u64)
                            .is_some_and(|n| n >= *min)
                });
                if !found {
                    failures.push(format!("no `{kind}` event with {field} >= {min}"));
                }
            }
            Expect::Event(kind, fields) => {
                let found = events.iter().any(|ev| {
                    ev.get("type").and_then(Value::as_str) == Some(kind)
                        && fields.iter().all(|(k, want)| ev.get(*k) == Some(want))
                });
                if !found {
                    let fields: Vec<String> =
                        fields.iter().map(|(k, v)| format!("{k}={v}")).collect();
                    failures.push(format!("no `{kind}` event with [{}]", fields.join(", ")));
                }
            }
        }
    }
    failures
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_fail_when_output_lacks_what_is_expected() {
        let expect = vec![
            Expect::StdoutHas("received message: hi"),
            Expect::Event("verified", vec![("verified", Value::Bool(true))]),
        ];
        let good = "received message: hi\n{\"type\":\"verified\",\"verified\":true}\n";
        assert!(check(&expect, good, "").is_empty());
        let bad = "{\"type\":\"verified\",\"verified\":false}\n";
        let failures = check(&expect, bad, "");
        assert_eq!(failures.len(), 2, "{failures:?}");
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
            if s.server_exit == 0 && !s.server_args.iter().any(|a| a == "--serve") {
                assert_eq!(s.clients.last().map(|c| c.exit), Some(0), "{}", s.name);
            }
        }
    }
}
