//! Test-only peers of rdma-write: an `rdma-client` and an `rdma-server` that misbehave on
//! purpose, for the end-to-end tests (`cargo xtask e2e`). They are composed from the binaries'
//! own libraries, step by step, with one step done wrong; the binaries themselves have no test
//! hook, so what the package ships is exactly what the tests drive.
//!
//! - [`client`]: `rdma-misbehave-client --fault KIND [rdma-client's arguments]`: a wrong rkey, a
//!   write past the buffer's end, a crash (SIGKILL) after the hello, the accept or the write,
//!   rewrites racing the verdict ([`rewrite`]), pings paced a second apart, a write into a
//!   kept bench session's buffer after its round, a wrong RDMA CM
//!   nonce, a flood of RDMA CM requests and a second one ([`cm`]).
//! - [`server`]: `rdma-misbehave-server --fault no-remote-write [rdma-server's arguments]`: a
//!   server whose buffers grant no remote write (the classic demo's bug).

pub mod client;
pub mod cm;
pub mod rewrite;
pub mod server;
