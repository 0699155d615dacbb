//! Documented exit codes, and the mapping from an error report to one of them.

use rdma_core_rs::ErrorKind as VerbsKind;
use rdma_proto::{ErrorCode, ProtoError, framing::FrameError};

/// Why the client stopped; each kind is one documented exit code (see `--help`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitKind {
    Internal,
    Rdma,
    Network,
    Timeout,
    Protocol,
    Refused,
    Transfer,
    Unverified,
}

impl ExitKind {
    /// The process exit code.
    pub fn code(self) -> u8 {
        match self {
            ExitKind::Internal => 1,
            ExitKind::Rdma => 3,
            ExitKind::Network => 4,
            ExitKind::Timeout => 5,
            ExitKind::Protocol => 6,
            ExitKind::Refused => 7,
            ExitKind::Transfer => 8,
            ExitKind::Unverified => 9,
        }
    }

    /// A stable name for `--json` output.
    pub fn as_str(self) -> &'static str {
        match self {
            ExitKind::Internal => "internal",
            ExitKind::Rdma => "rdma",
            ExitKind::Network => "network",
            ExitKind::Timeout => "timeout",
            ExitKind::Protocol => "protocol",
            ExitKind::Refused => "refused",
            ExitKind::Transfer => "transfer",
            ExitKind::Unverified => "unverified",
        }
    }
}

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
}

/// Maps an error report to the exit code documented in `--help`, looking at the most specific
/// typed error in its chain.
pub fn classify(report: &color_eyre::Report) -> ExitKind {
    for cause in report.chain() {
        if let Some(e) = cause.downcast_ref::<rdma_core_rs::Error>() {
            return match e.kind() {
                VerbsKind::Timeout => ExitKind::Timeout,
                VerbsKind::Transfer => ExitKind::Transfer,
                VerbsKind::Usage => ExitKind::Internal,
                VerbsKind::NoDevice | VerbsKind::Port | VerbsKind::Setup => ExitKind::Rdma,
            };
        }
        if let Some(e) = cause.downcast_ref::<ProtoError>() {
            return from_code(e.code(), matches!(e, ProtoError::Remote(_)));
        }
        if let Some(e) = cause.downcast_ref::<FrameError>() {
            return match e {
                FrameError::Timeout { .. } => ExitKind::Timeout,
                FrameError::LineTooLong { .. } => ExitKind::Protocol,
                _ => ExitKind::Network,
            };
        }
        if let Some(e) = cause.downcast_ref::<ClientError>() {
            return match e {
                ClientError::Connect { source, .. }
                    if source.kind() == std::io::ErrorKind::TimedOut =>
                {
                    ExitKind::Timeout
                }
                ClientError::Connect { .. } | ClientError::BadAddress(_) => ExitKind::Network,
                ClientError::ReadFile { .. } | ClientError::EmptyPayload => ExitKind::Internal,
            };
        }
    }
    ExitKind::Internal
}

fn from_code(code: ErrorCode, remote: bool) -> ExitKind {
    match code {
        ErrorCode::Timeout => ExitKind::Timeout,
        ErrorCode::VerifyFailed => ExitKind::Unverified,
        ErrorCode::WriteFailed => ExitKind::Transfer,
        ErrorCode::TooLong
        | ErrorCode::Unauthorized
        | ErrorCode::Forbidden
        | ErrorCode::Busy
        | ErrorCode::RdmaSetup
        | ErrorCode::ShuttingDown => ExitKind::Refused,
        _ if remote => ExitKind::Refused,
        _ => ExitKind::Protocol,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use color_eyre::eyre::eyre;

    #[test]
    fn codes_are_distinct_and_documented() {
        let all = [
            ExitKind::Internal,
            ExitKind::Rdma,
            ExitKind::Network,
            ExitKind::Timeout,
            ExitKind::Protocol,
            ExitKind::Refused,
            ExitKind::Transfer,
            ExitKind::Unverified,
        ];
        let mut codes: Vec<u8> = all.iter().map(|k| k.code()).collect();
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), all.len());
        for k in all {
            let line = format!("  {}  ", k.code());
            assert!(
                crate::cli::EXIT_CODES_DOC.contains(&line),
                "exit code {} undocumented",
                k.code()
            );
        }
    }

    #[test]
    fn typed_errors_deep_in_the_chain_choose_the_code() {
        let io = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let report = color_eyre::Report::new(ClientError::Connect {
            addr: "10.0.0.1:7471".into(),
            port: 7471,
            source: io,
        })
        .wrap_err("connecting");
        assert_eq!(classify(&report), ExitKind::Network);
        assert_eq!(classify(&eyre!("something odd")), ExitKind::Internal);
        assert_eq!(from_code(ErrorCode::TooLong, true), ExitKind::Refused);
        assert_eq!(from_code(ErrorCode::BadJson, false), ExitKind::Protocol);
        assert_eq!(
            from_code(ErrorCode::VerifyFailed, true),
            ExitKind::Unverified
        );
    }
}
