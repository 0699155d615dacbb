//! `rdma-server`: register a buffer, let clients RDMA-Write into it, and verify what landed.
//!
//! `main` hands the command line ([`cli::Args`]), the run ([`run::run`]) and the mapping of
//! errors to documented exit codes ([`exit::classify`]) to [`app::main`], the one way both
//! binaries end. Everything else lives in the modules.

mod access;
mod admission;
mod bench;
mod budget;
mod cli;
mod cm;
mod config;
mod exit;
mod i18n;
mod output;
mod run;
mod session;

use rdma_app as app;
use std::process::ExitCode;

fn main() -> ExitCode {
    app::main(
        |args: &cli::Args| args.output.json,
        run::run,
        exit::classify,
    )
}
