//! The one record of a fabric check: what happened when one node wrote to another. The runner
//! prints it (a `fabric_pair` JSON Lines event) and `--fabric-report` reads it back; the type
//! is the contract's ([`rdma_proto::events::fabric::PairResult`]).

pub use rdma_proto::events::client::FABRIC_PAIR as TYPE;
pub use rdma_proto::events::fabric::PairResult;
