//! The client's exit codes (the shared [`Exit`]), and which of its errors ends in which.

use rdma_app::{self as app, Documented, Exit};
use rdma_proto::{ErrorCode, ProtoError, framing::FrameError};
use std::error::Error as StdError;

/// `--help`'s line for exit code 0.
pub const SUCCESS: &str = "the server verified the write (bytes and CRC32C)";

/// The exit codes the client returns besides 0 and 1, as `--help` states them.
pub const EXITS: Documented = &[
    (
        Exit::Usage,
        "usage error: an unknown, missing or bad flag or argument, an unreadable or empty --file, \
         an empty --message, an unreadable, empty or group/world-readable --token-file, no such \
         --device or --port, a --gid-index not in the GID table; a bad --hosts or --rank, Slurm \
         variables missing or not one task per node, --fabric-report input without pair results, or with a pair line malformed, out of range (world at most 1024) or contradicting another; --rails: more rails than a node has, none, or nodes that disagree on their rails",
    ),
    (
        Exit::Rdma,
        "local RDMA problem: kernel without RDMA, no RDMA device at all, port not ACTIVE, no usable \
         GID, verbs setup failed",
    ),
    (
        Exit::Network,
        "network: server unreachable or the connection was lost",
    ),
    (
        Exit::Timeout,
        "timeout: a deadline passed (connect, handshake, completion, verdict)",
    ),
    (
        Exit::Protocol,
        "protocol error: malformed message or unsupported protocol version",
    ),
    (
        Exit::Refused,
        "refused by the server (too long, unauthorized, forbidden, busy, server-side RDMA setup)",
    ),
    (
        Exit::Transfer,
        "the RDMA Write itself failed (completion error, e.g. remote access error); \
         --fabric and --fabric-report: a pair of the fabric check failed or has no result",
    ),
    (
        Exit::Unverified,
        "the server saw the write but could not verify it (length or CRC mismatch)",
    ),
];

/// An error the client itself detects, outside the two libraries.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error(
        "could not reach the server at {addr}: {source}. Is `rdma-server` running there, and is TCP port {port} open?"
    )]
    Connect {
        addr: String,
        port: u16,
        source: std::io::Error,
    },
    #[error("cannot resolve `{0}`: give HOST or HOST:PORT, e.g. 10.0.0.1 or server.example:7471")]
    BadAddress(String),
    #[error("cannot read the payload file {path}: {source}")]
    ReadFile {
        path: String,
        source: std::io::Error,
    },
    #[error("the payload is empty: an RDMA Write needs at least one byte")]
    EmptyPayload,
    #[error(
        "--notify imm: {0} is iWARP, which has no RDMA Write with immediate; use --notify tcp, or leave --notify out (tcp is then chosen)"
    )]
    NoWriteWithImm(String),
}

/// The exit for the error that ends the run, as documented in `--help`.
pub fn classify(report: &color_eyre::Report) -> Exit {
    app::classify(report, EXITS, own)
}

/// The client's, the protocol's and the verbs layer's errors (`rdma_app::verbs::verbs_exit`).
fn own(cause: &(dyn StdError + 'static)) -> Option<Exit> {
    if let Some(exit) = rdma_app::verbs::verbs_exit(cause) {
        return Some(exit);
    }
    if cause.is::<rdma_app::token::TokenError>() {
        return Some(Exit::Usage);
    }
    if let Some(exit) = crate::fabric::exit_of(cause) {
        return Some(exit);
    }
    if let Some(e) = cause.downcast_ref::<ProtoError>() {
        return Some(from_code(e.code(), matches!(e, ProtoError::Remote(_))));
    }
    if let Some(e) = cause.downcast_ref::<FrameError>() {
        return Some(match e {
            FrameError::Timeout { .. } => Exit::Timeout,
            FrameError::LineTooLong { .. } => Exit::Protocol,
            _ => Exit::Network,
        });
    }
    cause.downcast_ref::<ClientError>().map(|e| match e {
        ClientError::Connect { source, .. } if source.kind() == std::io::ErrorKind::TimedOut => {
            Exit::Timeout
        }
        ClientError::Connect { .. } | ClientError::BadAddress(_) => Exit::Network,
        ClientError::ReadFile { .. }
        | ClientError::EmptyPayload
        | ClientError::NoWriteWithImm(_) => Exit::Usage,
    })
}

fn from_code(code: ErrorCode, remote: bool) -> Exit {
    match code {
        ErrorCode::Timeout => Exit::Timeout,
        ErrorCode::VerifyFailed => Exit::Unverified,
        ErrorCode::WriteFailed => Exit::Transfer,
        ErrorCode::TooLong
        | ErrorCode::Unauthorized
        | ErrorCode::Forbidden
        | ErrorCode::Busy
        | ErrorCode::RdmaSetup
        | ErrorCode::ShuttingDown => Exit::Refused,
        _ if remote => Exit::Refused,
        _ => Exit::Protocol,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use color_eyre::eyre::eyre;

    #[test]
    fn typed_errors_deep_in_the_chain_choose_the_code() {
        let io = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let report = color_eyre::Report::new(ClientError::Connect {
            addr: "10.0.0.1:7471".into(),
            port: 7471,
            source: io,
        })
        .wrap_err("connecting");
        assert_eq!(classify(&report), Exit::Network);
        assert_eq!(classify(&eyre!("something odd")), Exit::Internal);
        assert_eq!(from_code(ErrorCode::TooLong, true), Exit::Refused);
        assert_eq!(from_code(ErrorCode::BadJson, false), Exit::Protocol);
        assert_eq!(from_code(ErrorCode::VerifyFailed, true), Exit::Unverified);
    }

    #[test]
    fn unreadable_or_empty_input_is_a_usage_error() {
        let unreadable = color_eyre::Report::new(ClientError::ReadFile {
            path: "/nonexistent".into(),
            source: std::io::ErrorKind::NotFound.into(),
        });
        assert_eq!(classify(&unreadable), Exit::Usage);
        assert_eq!(classify(&ClientError::EmptyPayload.into()), Exit::Usage);
    }

    #[test]
    fn every_exit_the_client_can_choose_is_documented() {
        let mut chosen: Vec<Exit> = [
            ErrorCode::Timeout,
            ErrorCode::VerifyFailed,
            ErrorCode::WriteFailed,
            ErrorCode::Busy,
            ErrorCode::BadJson,
        ]
        .into_iter()
        .map(|c| from_code(c, false))
        .collect();
        chosen.extend([Exit::Usage, Exit::Network]);
        for exit in chosen {
            assert!(
                EXITS.iter().any(|(d, _)| *d == exit),
                "{exit:?} undocumented"
            );
        }
    }
}
