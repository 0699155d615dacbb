//! `rdma-misbehave-server`: `rdma-server`, misconfigured on purpose.

use rdma_server::grant::Grant;

/// What the server does wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ServerFault {
    /// Register each session's buffer and queue pair without remote write, as the classic
    /// demo did: every client's write fails with a remote access error.
    NoRemoteWrite,
}

/// The command line: the fault, then everything `rdma-server` takes.
#[derive(Debug, clap::Parser)]
#[command(name = "rdma-misbehave-server", version)]
pub struct Args {
    /// What to do wrong.
    #[arg(long)]
    pub fault: ServerFault,
    #[command(flatten)]
    pub server: rdma_server::cli::Args,
}

impl ServerFault {
    /// What each write session grants its client.
    #[must_use]
    pub fn grant(self) -> Grant {
        match self {
            ServerFault::NoRemoteWrite => Grant::local_only(),
        }
    }
}
