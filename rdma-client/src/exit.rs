//! The client's exit codes (the shared [`Exit`]) as `--help` documents them, and its own errors.
//! Which error ends in which code is `main`'s classifier.

use rdma_app::{Documented, Exit};

/// `--help`'s line for exit code 0.
pub const SUCCESS: &str = "the server verified the write (bytes and CRC32C)";

/// The exit codes the client returns besides 0 and 1, as `--help` states them.
pub const EXITS: Documented = &[
    (
        Exit::Usage,
        "usage error: an unknown, missing or bad flag or argument, an unreadable or empty --file, \
         an empty --message, an unreadable, empty or group/world-readable --token-file, no such \
         --ib-dev or --ib-port, a --gid-idx not in the GID table; a bad --hosts or --rank, Slurm \
         variables missing or not one task per node, fabric report input without pair results, or with a pair line malformed, out of range (world at most 1024) or contradicting another; --rails: more rails than a node has, none, or nodes that disagree on their rails",
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
         fabric and fabric report: a pair of the fabric check failed or has no result",
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
