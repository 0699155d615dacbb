//! The exit codes of both binaries: one table, part of the contract with whatever runs them.
//!
//! One enum for both programs: a code means the same thing in `rdma-server` and `rdma-client`
//! (4 is "the network", be it a server that cannot listen or a client that cannot connect).
//! Each binary documents the subset it can return ([`Documented`]); its `--help` table is
//! written from that list ([`exit_codes_help`]), and `rdma_app::classify` never
//! returns a code outside it, so the code and the help cannot drift apart. Readers of the
//! binaries (xtask) turn a process status back into an [`Exit`] with [`Exit::from_code`] and
//! compare kinds, never numbers. Which verbs errors end in which kind is
//! `rdma_app::verbs::exit_of_verbs`, where the two layers meet.

use serde::{Deserialize, Serialize};

/// Why a binary stopped; each kind is one documented exit code. In `--json` events it is
/// spelled by [`Exit::name`] (`"usage"`, `"network"`, ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Exit {
    /// A bug, or a failure nobody planned for (1). The only kind that shows a backtrace.
    Internal,
    /// The user asked for something impossible: a bad flag value, an unreadable or empty file,
    /// no such device or port, a GID index that is not in the table (2).
    Usage,
    /// The machine's RDMA: no RDMA in the kernel, no device at all, port not ACTIVE, no usable
    /// GID, verbs setup failed (3).
    Rdma,
    /// TCP: cannot listen, cannot connect, connection lost (4).
    Network,
    /// A deadline passed (5).
    Timeout,
    /// The peer broke the protocol (6).
    Protocol,
    /// The server said no (7).
    Refused,
    /// The RDMA Write itself failed (8).
    Transfer,
    /// The server saw the write but could not verify it (9).
    Unverified,
}

/// The exit codes one binary can return besides 0 and 1, each with its `--help` wording.
pub type Documented = &'static [(Exit, &'static str)];

impl Exit {
    /// Every kind, in code order.
    pub const ALL: [Exit; 9] = [
        Exit::Internal,
        Exit::Usage,
        Exit::Rdma,
        Exit::Network,
        Exit::Timeout,
        Exit::Protocol,
        Exit::Refused,
        Exit::Transfer,
        Exit::Unverified,
    ];

    /// The process exit status.
    #[must_use]
    pub fn code(self) -> u8 {
        match self {
            Exit::Internal => 1,
            Exit::Usage => 2,
            Exit::Rdma => 3,
            Exit::Network => 4,
            Exit::Timeout => 5,
            Exit::Protocol => 6,
            Exit::Refused => 7,
            Exit::Transfer => 8,
            Exit::Unverified => 9,
        }
    }

    /// A stable name for `--json` output.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Exit::Internal => "internal",
            Exit::Usage => "usage",
            Exit::Rdma => "rdma",
            Exit::Network => "network",
            Exit::Timeout => "timeout",
            Exit::Protocol => "protocol",
            Exit::Refused => "refused",
            Exit::Transfer => "transfer",
            Exit::Unverified => "unverified",
        }
    }

    /// Whether this is a failure the program expected (it prints the message and its advice,
    /// never a backtrace). Only [`Exit::Internal`] is not.
    #[must_use]
    pub fn is_expected(self) -> bool {
        self != Exit::Internal
    }

    /// The kind of process exit status `code`; `None` for 0 and for codes no binary returns.
    #[must_use]
    pub fn from_code(code: i32) -> Option<Exit> {
        Exit::ALL.into_iter().find(|e| i32::from(e.code()) == code)
    }
}

/// Its [`Exit::name`].
impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl From<Exit> for std::process::ExitCode {
    fn from(exit: Exit) -> Self {
        std::process::ExitCode::from(exit.code())
    }
}

/// The `Exit codes:` table of a binary's `--help`: `success` for 0, 1 for internal errors, then
/// `documented` in code order.
#[must_use]
pub fn exit_codes_help(success: &str, documented: Documented) -> String {
    let mut lines = vec![
        "Exit codes:".to_owned(),
        format!("  0  {success}"),
        "  1  unexpected internal error (a bug; the only case that shows a backtrace, with RUST_BACKTRACE=1)"
            .to_owned(),
    ];
    for exit in Exit::ALL {
        if let Some((_, text)) = documented.iter().find(|(d, _)| *d == exit) {
            lines.push(format!("  {}  {text}", exit.code()));
        }
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_distinct_and_named() {
        let mut codes: Vec<u8> = Exit::ALL.iter().map(|e| e.code()).collect();
        codes.dedup();
        assert_eq!(codes, (1..=9).collect::<Vec<u8>>());
        let mut names: Vec<&str> = Exit::ALL.iter().map(|e| e.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Exit::ALL.len());
        assert_eq!(
            Exit::ALL.iter().filter(|e| !e.is_expected()).count(),
            1,
            "only Internal shows a backtrace"
        );
    }

    #[test]
    fn json_spells_the_name_and_codes_read_back() {
        for exit in Exit::ALL {
            let json = serde_json::to_string(&exit).unwrap();
            assert_eq!(json, format!("\"{}\"", exit.name()));
            assert_eq!(serde_json::from_str::<Exit>(&json).unwrap(), exit);
            assert_eq!(Exit::from_code(i32::from(exit.code())), Some(exit));
        }
        assert_eq!(Exit::from_code(0), None);
        assert_eq!(Exit::from_code(10), None);
    }

    #[test]
    fn the_help_table_lists_what_is_documented_in_code_order() {
        let help = exit_codes_help("done", &[(Exit::Timeout, "late"), (Exit::Usage, "oops")]);
        assert_eq!(
            help.lines()
                .map(|l| l.get(..5).unwrap_or(l))
                .collect::<Vec<_>>(),
            ["Exit ", "  0  ", "  1  ", "  2  ", "  5  "]
        );
        assert!(
            help.contains("  2  oops") && help.contains("  5  late"),
            "{help}"
        );
    }
}
