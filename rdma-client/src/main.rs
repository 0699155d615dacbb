//! `rdma-client`: parse the command line ([`cli::Args`], split into its typed [`cli::Task`]),
//! run it, and end with the exit code `--help` documents for what happened (`classify`),
//! through `rdma_app::main`, the one way both binaries end.

use rdma_app as app;
use rdma_client::{bench, classify::classify, cli, fabric, mesh, run};
use std::process::ExitCode;

fn main() -> ExitCode {
    app::main(
        |args: &cli::Args| args.json(),
        |args, out| match args.task()? {
            cli::Task::Write(task) => run::run(&task, &out),
            cli::Task::Bench(task) => bench::run(&task, &out),
            cli::Task::Fabric(task) => fabric::run(&task, &out),
            cli::Task::FabricReport(report) => fabric::report(&report, &out),
            cli::Task::Mesh(task) => mesh::task::run(&task, &out),
        },
        classify,
    )
}
