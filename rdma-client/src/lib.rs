//! `rdma-client`: RDMA-Write a message straight into an `rdma-server`'s registered buffer.
//!
//! The library behind the binary: [`cli::Args`] is the command line, split into its typed
//! [`cli::Task`]; [`run::run`], [`bench::run`] and [`fabric::run`] run each task. `main` adds the
//! mapping of errors to the documented exit codes and hands them to `rdma_app::main`, the one
//! way both binaries end.

pub mod bench;
pub mod classify;
pub mod cli;
pub mod exit;
pub mod fabric;
pub mod mesh;
pub mod output;
pub mod run;
pub mod session;
