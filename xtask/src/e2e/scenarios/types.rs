//! What a scenario is: one server, its clients, and what each must show.

use rdma_proto::Exit;
use rdma_proto::events::client::Event as ClientEvent;
use rdma_proto::events::server::Event as ServerEvent;
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
pub(super) const HOSTILE_CAPS: &[&str] = &["--max-per-ip", "4", "--max-pinned", "12582912"];

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
    /// A line of stdout contains this text. Only where the human text itself is what is tested
    /// (the seed's lines, the zh lines): a fact an event carries is checked on the event.
    StdoutHas(&'static str),
    /// stderr contains this text, case aside. Only for human lines no event carries (the
    /// misbehaving peer's own account of what it did).
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
    /// `rdma-misbehave-client --fault KIND SERVER:PORT ARGS…`: `rdma-client` with one step done
    /// wrong (the test-only peer).
    Misbehave(&'static str),
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
    /// Run the test-only `rdma-misbehave-server --fault KIND` instead of `rdma-server`.
    pub server_fault: Option<&'static str>,
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
    pub(super) fn new(name: &'static str, about: &'static str) -> Self {
        Self {
            name,
            about,
            server_args: Vec::new(),
            server_fault: None,
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
