//! `rdma-server`: parse the command line ([`cli::Args`]), run ([`run::run`]), and end with the
//! exit code `--help` documents for what happened (`classify`), through `rdma_app::main`,
//! the one way both binaries end.

use rdma_app as app;
use rdma_server::{classify::classify, cli, run};
use std::process::ExitCode;

fn main() -> ExitCode {
    app::main(|args: &cli::Args| args.output.json, run::run, classify)
}
