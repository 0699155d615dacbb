//! The mesh's pure core: an RDMA pingmesh in which every node probes its peers on a schedule,
//! through the real RDMA path, and tells a broken RDMA path from a dead host.
//!
//! Everything here is sans-IO: no socket, no verbs, no clock, no thread.
//!
//! - [`schedule`]: whom node `i` of `n` probes in interval `t` ([`schedule::Schedule`]), and when
//!   in the interval it fires ([`schedule::Timing`]: phase and jitter).
//! - [`cause`]: what a probe came to ([`cause::Outcome`]) and why one failed
//!   ([`cause::Cause`]), from the client's own error classification.
//! - [`rtt`]: a round trip split into network time and host delay from the devices'
//!   completion timestamps (R-Pingmesh's arithmetic), or the wall time alone.

pub mod cause;
pub mod rtt;
pub mod schedule;
