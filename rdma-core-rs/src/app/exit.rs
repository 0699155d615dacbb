//! The exit codes of both binaries, and the rule that turns a failure into one of them.
//!
//! One enum for both programs: a code means the same thing in `rdma-server` and `rdma-client`
//! (4 is "the network", be it a server that cannot listen or a client that cannot connect).
//! Each binary documents the subset it can return ([`Documented`]); its `--help` table is
//! written from that list ([`exit_codes_help`]), and [`classify`] never returns a code outside
//! it, so the code and the help cannot drift apart.

use crate::{Error, ErrorKind, VerbOp};
use color_eyre::Report;
use std::error::Error as StdError;

/// Why a binary stopped; each kind is one documented exit code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
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

    /// The exit for an error of the verbs layer. A named device that does not exist, a port
    /// that does not exist and a GID index outside the table are the user's mistakes; a kernel
    /// without RDMA or a port that is down is the machine's; an invalid argument the program
    /// itself built is a bug.
    #[must_use]
    pub fn of_verbs(e: &Error) -> Exit {
        match e {
            Error::DeviceNotFound { .. } | Error::GidIndexInvalid { .. } => Exit::Usage,
            Error::Verb {
                op: VerbOp::QueryPort,
                errno: libc::EINVAL,
                ..
            } => Exit::Usage,
            _ => match e.kind() {
                ErrorKind::NoDevice | ErrorKind::Port | ErrorKind::Setup => Exit::Rdma,
                ErrorKind::Timeout => Exit::Timeout,
                ErrorKind::Transfer => Exit::Transfer,
                ErrorKind::Usage => Exit::Internal,
            },
        }
    }
}

impl From<Exit> for std::process::ExitCode {
    fn from(exit: Exit) -> Self {
        std::process::ExitCode::from(exit.code())
    }
}

/// The exit for `report`: the most specific typed error in its chain (outermost first) decides,
/// asked first of the binary (`own`), then of the verbs layer. Anything else, and any exit the
/// binary does not document, is [`Exit::Internal`].
pub fn classify(
    report: &Report,
    documented: Documented,
    own: impl Fn(&(dyn StdError + 'static)) -> Option<Exit>,
) -> Exit {
    let found = report
        .chain()
        .find_map(|cause| own(cause).or_else(|| cause.downcast_ref::<Error>().map(Exit::of_verbs)));
    match found {
        Some(exit) if documented.iter().any(|(d, _)| *d == exit) => exit,
        _ => Exit::Internal,
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
    use crate::{PortState, WcOpcode, WcStatus};
    use color_eyre::eyre::eyre;
    use std::time::Duration;

    const DOCS: Documented = &[
        (Exit::Usage, "usage error"),
        (Exit::Rdma, "local RDMA problem"),
        (Exit::Timeout, "timeout"),
    ];

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
    fn the_users_mistakes_are_usage_errors_and_the_machines_are_rdma_errors() {
        let table = "  [0] fe80::1 (RoCE v2)".to_owned();
        let cases = [
            (
                Error::DeviceNotFound {
                    wanted: "nosuch".into(),
                    available: vec!["rxe0".into()],
                },
                Exit::Usage,
            ),
            (
                Error::GidIndexInvalid {
                    port: 1,
                    index: 99,
                    table: table.clone(),
                },
                Exit::Usage,
            ),
            (
                Error::verb(VerbOp::QueryPort, "port 9", libc::EINVAL),
                Exit::Usage,
            ),
            (
                Error::verb(VerbOp::QueryPort, "port 1", libc::EIO),
                Exit::Rdma,
            ),
            (
                Error::NoRdmaInKernel {
                    errno: libc::ENOSYS,
                },
                Exit::Rdma,
            ),
            (Error::NoDevices, Exit::Rdma),
            (
                Error::PortNotActive {
                    port: 1,
                    state: PortState::Down,
                },
                Exit::Rdma,
            ),
            (Error::NoUsableGid { port: 1, table }, Exit::Rdma),
            (Error::verb(VerbOp::RegMr, "", libc::ENOMEM), Exit::Rdma),
            (
                Error::Timeout {
                    what: "for a completion",
                    waited: Duration::from_secs(1),
                },
                Exit::Timeout,
            ),
            (
                Error::Completion {
                    status: WcStatus::RemAccessErr,
                    status_str: "remote access error".into(),
                    vendor_err: 0,
                    wr_id: 1,
                    opcode: WcOpcode::RdmaWrite,
                    advice: String::new(),
                },
                Exit::Transfer,
            ),
            (
                Error::InvalidRange {
                    what: "0..99".into(),
                },
                Exit::Internal,
            ),
        ];
        for (error, want) in cases {
            assert_eq!(Exit::of_verbs(&error), want, "{error}");
        }
    }

    #[test]
    fn the_outermost_typed_error_decides_and_undocumented_codes_are_internal() {
        let verbs = || {
            color_eyre::Report::new(Error::DeviceNotFound {
                wanted: "nosuch".into(),
                available: vec![],
            })
            .wrap_err("opening the device")
        };
        assert_eq!(classify(&verbs(), DOCS, |_| None), Exit::Usage);
        // The binary's own view of an error wins over the verbs layer's.
        assert_eq!(
            classify(&verbs(), DOCS, |_| Some(Exit::Timeout)),
            Exit::Timeout
        );
        // A code the binary does not document never escapes.
        assert_eq!(
            classify(&verbs(), DOCS, |_| Some(Exit::Refused)),
            Exit::Internal
        );
        assert_eq!(classify(&eyre!("odd"), DOCS, |_| None), Exit::Internal);
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
