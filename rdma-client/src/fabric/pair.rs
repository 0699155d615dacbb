//! The one record of a fabric check: what happened when one node wrote to another. The runner
//! prints it (a `fabric_pair` JSON Lines event) and `fabric report` reads it back; the type
//! is the contract's ([`rdma_proto::events::fabric::PairResult`]).

pub use rdma_proto::events::client::FABRIC_PAIR as TYPE;
pub use rdma_proto::events::fabric::PairResult;

/// The largest world a fabric check runs and `fabric report` merges: the report holds an
/// N x N matrix, so N is bounded before anything is allocated by it.
pub const MAX_WORLD: usize = 1024;
