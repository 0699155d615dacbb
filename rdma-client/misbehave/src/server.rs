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
pub struct MisbehaveArgs {
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory as _, Parser as _};

    #[test]
    fn the_server_command_line_comes_after_the_fault() {
        MisbehaveArgs::command().debug_assert();
        let a = MisbehaveArgs::try_parse_from([
            "rdma-misbehave-server",
            "--fault",
            "no-remote-write",
            "--serve",
            "--json",
        ])
        .unwrap();
        assert_eq!(a.fault.grant(), Grant::local_only());
        assert!(a.server.serve && a.server.output.json);
    }
}
