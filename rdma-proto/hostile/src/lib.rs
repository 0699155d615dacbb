//! The hostile matrix: a protocol-level hostile client for a live `rdma-server`, and the checks
//! of what it answers. Test-only (`publish = false`): `cargo xtask hostile` runs it against the
//! real server in the guests, and `rdma-server`'s tests against the real session on the
//! in-memory Pair (`rdma-server/src/pair/`), where every case that needs no RDMA runs.
//!
//! No RDMA, and none of `rdma-proto`'s message types: it speaks raw TCP and builds and checks
//! its lines with `serde_json`, so it tests the wire as `PROTOCOL.md` writes it, not as our own
//! library happens to implement it (only the line framing, `LineConn`, is shared).
//! Each case connects, misbehaves, and checks what the server answers (an `error` line with the
//! expected `code`, then a close; or a silent close) before a deadline. After every case a fresh
//! connection must still get a banner: nothing a client does may take the server down.
//!
//! Every line the server sends before a valid `hello` is checked for secrets (`rkey`, `addr`,
//! `qpn`): finding one fails the case.
//!
//! The parts: [`case`] (the table of cases and which fit a server), [`config`] (the
//! [`Config`] the cases read), [`misbehave`] (what each case does on the wire), [`conn`] (one
//! connection and its line reader), [`answer`] (pure checks of what the server sent),
//! [`runner`] (one case on its own thread, then the health probes).

mod answer;
pub mod case;
pub mod config;
mod conn;
mod misbehave;
pub mod runner;
#[cfg(test)]
mod tests;

pub use case::{Case, select};
pub use config::Config;
pub use runner::{Verdict, run_case, run_case_then};
