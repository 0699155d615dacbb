//! The one record of a fabric check: what happened when one node wrote to another. The runner
//! prints it (a `fabric_pair` JSON Lines event, see [`crate::output::Event::FabricPair`]) and
//! `--fabric-report` reads it back, so both use this type.

use serde::{Deserialize, Serialize};

/// One directed pair's result: `writer` RDMA-Wrote into `target`'s server in `round`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PairResult {
    /// Round of the schedule (see `fabric::schedule`).
    pub round: usize,
    /// Number of nodes in the check.
    pub world: usize,
    /// The writer's rank.
    pub writer: usize,
    /// The writer's node name.
    pub writer_host: String,
    /// The target's rank.
    pub target: usize,
    /// The target's node name.
    pub target_host: String,
    /// The target's server verified the bytes and their CRC32C.
    pub verified: bool,
    /// Why the pair failed: the exit kind the seed client would have ended with (`network`,
    /// `timeout`, `refused`, `transfer`...); `None` when verified.
    pub error_kind: Option<String>,
    /// The failure's message, with advice; `None` when verified.
    pub error: Option<String>,
    /// Microseconds from posting the verified write to its completion on the writer.
    pub write_us: Option<f64>,
    /// Milliseconds spent waiting for the target's server to be free or up.
    pub waited_ms: u64,
    /// Latency in microseconds: the typical (median) half round trip of a short
    /// `--bench lat` (2 bytes, `--lat-iters`); `None` when not measured.
    pub lat_us: Option<f64>,
    /// Bandwidth in MB/s (MB = 2^20 bytes, as perftest and `--bench bw` count): the average of
    /// a short `--bench bw` (64 KiB writes, `--bw-iters`); `None` when not measured.
    pub bw_mbs: Option<f64>,
    /// A re-test of this pair alone (`--fabric --retest HOST`); it replaces the pair's earlier
    /// line in the report.
    #[serde(default)]
    pub retest: bool,
}

/// The largest world a fabric check runs and `--fabric-report` merges: the report holds an
/// N x N matrix, so N is bounded before anything is allocated by it.
pub const MAX_WORLD: usize = 1024;

/// The `type` tag of [`PairResult`] events.
pub const TYPE: &str = "fabric_pair";
