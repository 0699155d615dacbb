//! `rdma-client`: RDMA-Write a message straight into an `rdma-server`'s registered buffer.
//!
//! `main` hands the command line ([`cli::Args`], split into its typed [`cli::Task`]), the run
//! and the mapping of errors to documented exit codes ([`exit::classify`]) to [`app::main`],
//! the one way both binaries end. Everything else lives in the modules.

mod bench;
mod cli;
mod exit;
mod fabric;
mod fault;
mod output;
mod run;
mod session;

use rdma_app as app;
use std::process::ExitCode;

fn main() -> ExitCode {
    app::main(
        |args: &cli::Args| args.output.json,
        |args, out| match args.task()? {
            cli::Task::Write(task) => run::run(&task, &out),
            cli::Task::Bench(task) => bench::run(&task, &out),
            cli::Task::Fabric(task) => fabric::run(&task, &out),
        },
        exit::classify,
    )
}
