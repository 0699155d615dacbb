//! `rdma-misbehave-server --fault KIND [rdma-server's arguments]`.

use rdma_misbehave::server::MisbehaveArgs;
use rdma_server::{classify::classify, run};
use std::process::ExitCode;

fn main() -> ExitCode {
    rdma_app::main(
        |args: &MisbehaveArgs| args.server.output.json,
        |args, out| run::run_granting(args.server, out, args.fault.grant()),
        classify,
    )
}
