//! What the client tells its user: its `--json` events (human lines by default). The events are
//! the contract's ([`rdma_proto::events::client`]), written by the writer both binaries share
//! ([`app::Output`]). Every JSON event is one object with a `type` tag, so scripts can dispatch
//! on it.

use rdma_app as app;
pub use rdma_proto::events::client::Event;

/// Where the client's events go.
pub type Output = app::Output<app::ClientEvents>;
