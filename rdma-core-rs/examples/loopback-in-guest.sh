#!/bin/sh
# Runs the `loopback` device self-test inside a guest that has rdma_rxe loaded:
#   cargo build -p rdma-core-rs --example loopback
#   cargo xtask vm-run --timeout 150 "$PWD/rdma-core-rs/examples/loopback-in-guest.sh" \
#       "$PWD/target/debug/examples/loopback"
# Brings up eth0 with 10.0.0.1/24, creates rxe0 on it, then runs the test (exit code = result).
set -eu
BIN=${1:?usage: loopback-in-guest.sh /abs/path/to/loopback}
ip link set eth0 up
ip addr add 10.0.0.1/24 dev eth0
rdma link add rxe0 type rxe netdev eth0
rdma link
exec "$BIN"
