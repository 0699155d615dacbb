//! The server's exit codes (the shared [`Exit`]), and which of its errors ends in which.

use crate::access::AccessError;
use crate::config::ConfigError;
use rdma_app::{self as app, Documented, Exit};

/// `--help`'s line for exit code 0.
pub const SUCCESS: &str =
    "one-shot: a client's write was verified; --serve: stopped cleanly by SIGINT/SIGTERM";

/// The exit codes the server returns besides 0 and 1, as `--help` states them.
pub const EXITS: Documented = &[
    (
        Exit::Usage,
        "usage error: an unknown, missing or bad flag or value, an unreadable, empty, short (< 16 characters) or group/world-readable \
         --token-file (or empty or short $RDMA_WRITE_TOKEN), an unreadable or invalid --config file, a --max-pinned budget that cannot hold one \
         --buffer-size session, no such --device or --port, a --gid-index not in the GID table",
    ),
    (
        Exit::Rdma,
        "local RDMA problem: kernel without RDMA, no RDMA device at all, port not ACTIVE, no usable GID",
    ),
    (
        Exit::Network,
        "cannot listen on the TCP address (in use, or not allowed)",
    ),
    (
        Exit::Timeout,
        "timeout: --lifetime passed without a verified write (one-shot)",
    ),
];

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

/// The exit for the error that ends the server, as documented in `--help`.
pub fn classify(report: &color_eyre::Report) -> Exit {
    app::classify(report, EXITS, |cause| {
        if cause.is::<AccessError>()
            || cause.is::<ConfigError>()
            || cause.is::<crate::budget::TooSmall>()
        {
            return Some(Exit::Usage);
        }
        cause
            .downcast_ref::<ServerError>()
            .map(|e| match e {
                ServerError::Listen { .. } => Exit::Network,
                ServerError::Lifetime(_) => Exit::Timeout,
                ServerError::Signals(_) => Exit::Internal,
            })
            .or_else(|| rdma_app::verbs::verbs_exit(cause))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use color_eyre::Report;

    #[test]
    fn each_server_error_has_its_documented_exit() {
        let listen = Report::new(ServerError::Listen {
            addr: "0.0.0.0:7471".parse().unwrap(),
            source: std::io::ErrorKind::AddrInUse.into(),
        });
        let lifetime = Report::new(ServerError::Lifetime(std::time::Duration::from_secs(1)));
        let token =
            Report::new(AccessError::EmptyToken("f".into())).wrap_err("loading the access token");
        let signals = Report::new(ServerError::Signals(std::io::ErrorKind::Other.into()));
        assert_eq!(classify(&listen), Exit::Network);
        assert_eq!(classify(&lifetime), Exit::Timeout);
        assert_eq!(classify(&token), Exit::Usage);
        assert_eq!(classify(&signals), Exit::Internal);
        assert_eq!(classify(&color_eyre::eyre::eyre!("odd")), Exit::Internal);
    }
}
