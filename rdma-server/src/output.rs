//! What the server tells its operator: its `--json` events (human lines by default). The events
//! are the contract's ([`rdma_proto::events::server`]), the writer the one both binaries share
//! ([`app::Output`]); it writes each event as one whole line, so the sessions' threads never
//! interleave lines.

use rdma_app as app;
pub use rdma_proto::events::server::{AuthMode, Event, ServeMode, SessionNotify, StopReason};

/// Where the server's events go.
pub type Output = app::Output<app::ServerEvents>;
