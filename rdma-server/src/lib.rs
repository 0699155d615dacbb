//! `rdma-server`: register a buffer, let clients RDMA-Write into it, and verify what landed.
//!
//! The library behind the binary: [`cli::Args`] is the command line, [`run::run`] the run;
//! `main` adds the mapping of errors to the documented exit codes and hands all three to
//! `rdma_app::main`, the one way both binaries end.

pub mod access;
mod admission;
pub mod budget;
pub mod classify;
pub mod cli;
pub mod config;
pub mod exit;
mod failure;
pub mod grant;
mod i18n;
mod kept;
pub mod output;
#[cfg(test)]
mod pair;
mod ports;
pub mod run;
mod session;
mod verbs;
mod workers;
