//! `rdma-misbehave-client --fault KIND [rdma-client's arguments]`.

use rdma_client::classify::classify;
use rdma_misbehave::client::{self, MisbehaveArgs};
use std::process::ExitCode;

fn main() -> ExitCode {
    rdma_app::main(
        |args: &MisbehaveArgs| args.client.json(),
        |args, out| client::run(args, &out),
        classify,
    )
}
