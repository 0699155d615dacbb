//! Documented exit codes of the server, and the mapping from a fatal error to one of them.

use crate::access::AccessError;
use rdma_core_rs::ErrorKind as VerbsKind;

/// Errors that end the server (session errors never do).
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error(
        "cannot listen on {addr}: {source}. Is another rdma-server running there? Pick another --listen address"
    )]
    Listen {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
    #[error("no verified write within --lifetime {0:?}; giving up")]
    Lifetime(std::time::Duration),
    #[error("cannot install the SIGINT/SIGTERM handler: {0}")]
    Signals(std::io::Error),
}

/// Maps a fatal error to `(json code, exit code)` as documented in `--help`.
pub fn classify(report: &color_eyre::Report) -> (&'static str, u8) {
    for cause in report.chain() {
        if let Some(e) = cause.downcast_ref::<rdma_core_rs::Error>() {
            return match e.kind() {
                VerbsKind::NoDevice | VerbsKind::Port | VerbsKind::Setup => ("rdma", 3),
                VerbsKind::Timeout => ("timeout", 5),
                VerbsKind::Transfer | VerbsKind::Usage => ("internal", 1),
            };
        }
        if cause.downcast_ref::<AccessError>().is_some() {
            return ("usage", 2);
        }
        if let Some(e) = cause.downcast_ref::<ServerError>() {
            return match e {
                ServerError::Listen { .. } => ("listen", 4),
                ServerError::Lifetime(_) => ("timeout", 5),
                ServerError::Signals(_) => ("internal", 1),
            };
        }
    }
    ("internal", 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_exit_code_is_documented() {
        let listen = color_eyre::Report::new(ServerError::Listen {
            addr: "0.0.0.0:7471".parse().unwrap(),
            source: std::io::ErrorKind::AddrInUse.into(),
        });
        let cases = [
            (classify(&listen), ("listen", 4)),
            (
                classify(&color_eyre::Report::new(ServerError::Lifetime(
                    std::time::Duration::from_secs(1),
                ))),
                ("timeout", 5),
            ),
            (
                classify(&color_eyre::Report::new(AccessError::EmptyToken(
                    "f".into(),
                ))),
                ("usage", 2),
            ),
            (classify(&color_eyre::eyre::eyre!("odd")), ("internal", 1)),
        ];
        for (got, want) in cases {
            assert_eq!(got, want);
            assert!(crate::cli::EXIT_CODES_DOC.contains(&format!("  {}  ", want.1)));
        }
    }
}
