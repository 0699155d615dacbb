//! How a role ended, as a kind: our binaries' documented exits are [`Exit`] kinds, never
//! numbers; another program's status stays its number; a process with no status was killed.

use rdma_proto::Exit;

/// Which `--json` events a role prints, and so how its stdout and its status are read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Speaks {
    /// `rdma-server` (or the misbehaving server): server events, [`Exit`] kinds.
    Server,
    /// `rdma-client` (or the misbehaving client): client events, [`Exit`] kinds.
    Client,
    /// Anything else (ping, tc, perftest, the hostile peer, a nested xtask): no events of
    /// ours, its status as a number.
    #[default]
    Other,
}

impl Speaks {
    /// Whether this role is one of our binaries (its status is an [`Exit`] kind).
    pub fn is_ours(self) -> bool {
        self != Speaks::Other
    }
}

/// How one role's last attempt ended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ExitKind {
    /// Status 0.
    Success,
    /// One of our binaries, with one of its documented exits.
    Ours(Exit),
    /// Another status: a program that is not ours, or a status none of ours returns.
    Status(i32),
    /// Killed at its deadline (the agent's error says which, and what it waited on).
    TimedOut,
    /// No status: killed by a signal, or never started (its error says which).
    #[default]
    Killed,
}

impl ExitKind {
    /// The kind of a step's outcome: `code` its status (`None`: none), `timed_out` whether
    /// its deadline killed it, `speaks` whose status it is.
    pub fn of(code: Option<i32>, timed_out: bool, speaks: Speaks) -> Self {
        match code {
            _ if timed_out => ExitKind::TimedOut,
            None => ExitKind::Killed,
            Some(0) => ExitKind::Success,
            Some(c) => match Exit::from_code(c) {
                Some(e) if speaks.is_ours() => ExitKind::Ours(e),
                _ => ExitKind::Status(c),
            },
        }
    }

    /// Whether one of our binaries ended as `want` says (`None`: success).
    pub fn is(self, want: Option<Exit>) -> bool {
        match (self, want) {
            (ExitKind::Success, None) => true,
            (ExitKind::Ours(e), Some(w)) => e == w,
            _ => false,
        }
    }
}

/// `exit 0`, `exit 7 (refused)`, `exit 1`, `killed at its deadline`, `killed (no status)`.
impl std::fmt::Display for ExitKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExitKind::Success => f.write_str("exit 0"),
            ExitKind::Ours(e) => write!(f, "exit {} ({e})", e.code()),
            ExitKind::Status(c) => write!(f, "exit {c}"),
            ExitKind::TimedOut => f.write_str("killed at its deadline"),
            ExitKind::Killed => f.write_str("killed (no status)"),
        }
    }
}

/// How `want` reads in a failure: `0` or `7 (refused)`.
pub fn wanted(want: Option<Exit>) -> String {
    match want {
        None => "0".to_owned(),
        Some(e) => format!("{} ({e})", e.code()),
    }
}
