//! The server's exit codes (the shared [`Exit`]) as `--help` documents them, and the errors that
//! end it. Which error ends in which code is `main`'s classifier.

use rdma_app::{Documented, Exit};

/// `--help`'s line for exit code 0.
pub const SUCCESS: &str =
    "one-shot: a client's write was verified; --serve: stopped cleanly by SIGINT/SIGTERM";

/// The exit codes the server returns besides 0 and 1, as `--help` states them.
pub const EXITS: Documented = &[
    (
        Exit::Usage,
        "usage error: an unknown, missing or bad flag or value, an unreadable, empty, short (< 16 characters) or group/world-readable \
         --token-file (or empty or short $RDMA_WRITE_TOKEN), an unreadable or invalid --config file, a --max-pinned budget that cannot hold one \
         --buffer-size session, no such --ib-dev or --ib-port, a --gid-idx not in the GID table",
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
