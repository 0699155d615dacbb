//! Which exit code each failure of the client ends in: the outermost typed error in its chain
//! decides, among the codes `--help` documents ([`EXITS`]).

use crate::exit::{ClientError, EXITS};
use rdma_app::{self as app, Exit};
use rdma_proto::{ErrorCode, ProtoError, framing::FrameError};
use std::error::Error as StdError;

/// The exit for the error that ends the client, as documented in `--help`.
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
    if let Some(exit) = crate::fabric::error::exit_of(cause) {
        return Some(exit);
    }
    if let Some(exit) = crate::mesh::error::exit_of(cause) {
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
