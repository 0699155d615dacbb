//! The mesh's own usage errors ([`MeshError`]), and which exit each of its errors ends in.

use super::http::HttpError;
use super::metrics::MetricsError;
use super::textfile::TextfileError;
use rdma_app::Exit;

/// The mesh's own usage errors.
#[derive(Debug, thiserror::Error)]
pub enum MeshError {
    #[error("mesh @{path}: cannot read it: {source} (one node name per line)")]
    ReadList {
        path: String,
        source: std::io::Error,
    },
    #[error("mesh @{0}: no node name in it (one per line; # starts a comment)")]
    EmptyList(String),
    #[error("--topology {path}: cannot read it: {source}")]
    ReadTopology {
        path: String,
        source: std::io::Error,
    },
    #[error("--topology {path}: {source}")]
    Topology {
        path: String,
        source: super::topology::TopologyError,
    },
    #[error(
        "the mesh's settings: {0} (see --fan-out, --every, --jitter, --down-after, \
         --degrade-after, --up-after, --slow-factor)"
    )]
    Config(String),
}

/// The exit code for the mesh's own errors (`None`: not one of them). All are the user's to
/// fix (a service restarting would not help).
pub fn exit_of(cause: &(dyn std::error::Error + 'static)) -> Option<Exit> {
    (cause.is::<MeshError>()
        || cause.is::<HttpError>()
        || cause.is::<TextfileError>()
        || cause.is::<MetricsError>())
    .then_some(Exit::Usage)
}
