//! `rdma-client`: RDMA-Write a message straight into an `rdma-server`'s registered buffer.
//!
//! `main` hands the command line ([`cli::Args`]), the run ([`run::run`]) and the mapping of
//! errors to documented exit codes ([`exit::classify`]) to [`app::main`], the one way both
//! binaries end. Everything else lives in the modules.

mod bench;
mod cli;
mod exit;
mod fabric;
mod output;
mod rewrite;
mod run;

use rdma_proto::app;
use std::process::ExitCode;

fn main() -> ExitCode {
    app::main(
        |args: &cli::Args| args.output.json,
        |args, out| {
            if args.fabric.asked() {
                fabric::run(&args, &out)
            } else if args.bench.bench.is_some() {
                bench::run(&args, &out)
            } else {
                run::run(&args, &out)
            }
        },
        exit::classify,
    )
}
