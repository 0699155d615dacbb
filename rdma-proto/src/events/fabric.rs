//! The fabric check's records: what one node's write to another gave ([`PairResult`], the
//! `fabric_pair` event the runner prints and `fabric report` reads back) and the merged
//! check ([`Report`], the `fabric_report` event, which xtask judges). The analysis that makes
//! a report is rdma-client's; these are only its shapes.

use crate::exit::Exit;
use serde::{Deserialize, Serialize};
use std::net::IpAddr;

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
    pub error_kind: Option<Exit>,
    /// The failure's message, with advice; `None` when verified.
    pub error: Option<String>,
    /// Microseconds from posting the verified write to its completion on the writer.
    pub write_us: Option<f64>,
    /// Milliseconds spent waiting for the target's server to be free or up.
    pub waited_ms: u64,
    /// Latency in microseconds: the typical (median) half round trip of a short
    /// `bench --mode lat` (2 bytes, `--lat-iters`); `None` when not measured.
    pub lat_us: Option<f64>,
    /// Bandwidth in MB/s (MB = 2^20 bytes, as perftest and `bench --mode bw` count): the average of
    /// a short `bench --mode bw` (64 KiB writes, `--bw-iters`); `None` when not measured.
    pub bw_mbs: Option<f64>,
    /// A re-test of this pair alone (`fabric --retest HOST`); it replaces the pair's earlier
    /// line in the report.
    #[serde(default)]
    pub retest: bool,
    /// With `--rails`: the rail this pair ran on, and over what; absent in a one-rail check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rail: Option<RailOf>,
}

/// Which rail a pair of a `--rails` check ran on: rail `index` of the writer's `rails` (its
/// ACTIVE RDMA ports by device name), to the target's address on the same rail.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RailOf {
    /// From 0, in the order of the writer's device names.
    pub index: usize,
    /// How many rails the writer has.
    pub rails: usize,
    /// The writer's device on this rail (`None` when it could not be opened).
    pub device: Option<String>,
    /// The writer's address on it, the connection's local address.
    pub addr: Option<IpAddr>,
    /// The target's address on this rail, where the writer connected (`None` when its name
    /// resolves to none on this rail).
    pub target_addr: Option<IpAddr>,
}

/// The outlier rule's settings.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Thresholds {
    /// A pair is slow when its latency is over this factor of the reference.
    pub lat_factor: f64,
    /// A pair is slow when its bandwidth is under this fraction of the reference.
    pub bw_fraction: f64,
}

/// One ordered pair in the matrix.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Cell {
    /// Verified, and not an outlier.
    Pass {
        lat_us: Option<f64>,
        bw_mbs: Option<f64>,
    },
    /// Verified, but an outlier; `why` says which rule.
    Slow {
        lat_us: Option<f64>,
        bw_mbs: Option<f64>,
        why: String,
    },
    /// Not verified; the writer's reason (`unverified` when it gave none).
    Fail { kind: Exit, error: String },
    /// No line for this pair: its writer's task died or never ran.
    Missing,
}

impl Cell {
    /// Anything but a clean pass.
    #[must_use]
    pub fn bad(&self) -> bool {
        !matches!(self, Cell::Pass { .. })
    }

    /// The latency shown for it.
    #[must_use]
    pub fn lat_us(&self) -> Option<f64> {
        match self {
            Cell::Pass { lat_us, .. } | Cell::Slow { lat_us, .. } => *lat_us,
            _ => None,
        }
    }
}

/// A pair that is not a clean pass.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BadPair {
    pub writer: usize,
    pub writer_host: String,
    pub target: usize,
    pub target_host: String,
    pub cell: Cell,
    /// Its result comes from a re-test alone (`fabric --retest`).
    pub retested: bool,
}

/// An ordered pair, by rank and name.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PairRef {
    pub writer: usize,
    pub writer_host: String,
    pub target: usize,
    pub target_host: String,
}

/// A pair whose verdict comes from a re-test alone.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Retest {
    #[serde(flatten)]
    pub pair: PairRef,
    /// Still not a clean pass after the re-test (else it cleared).
    pub still_bad: bool,
}

/// A node common to the bad pairs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Suspect {
    pub rank: usize,
    pub host: String,
    /// Its bad pairs, as writer or target.
    pub bad: usize,
    /// All its pairs: `2 (n - 1)`.
    pub of: usize,
}

/// Where a report's latencies come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LatencySource {
    /// The pairs' measured `lat_us`.
    Measured,
    /// The verified writes' own times (`write_us`): no measurement ran.
    Write,
    /// No verified pair has a latency.
    None,
}

/// The merged check (`fabric report --json`, a `fabric_report` event).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Node names by rank (`rank K` where no line named one).
    pub hosts: Vec<String>,
    /// Ordered pairs: `n (n - 1)`.
    pub pairs: usize,
    pub passed: usize,
    pub slow: usize,
    pub failed: usize,
    pub missing: usize,
    /// Where the latencies come from.
    pub latency_source: LatencySource,
    /// The outlier references (see the module doc) and the plain fabric medians.
    pub lat_reference_us: Option<f64>,
    pub lat_median_us: Option<f64>,
    pub bw_reference_mbs: Option<f64>,
    pub bw_median_mbs: Option<f64>,
    pub thresholds: Thresholds,
    /// `matrix[writer][target]`; `None` on the diagonal.
    pub matrix: Vec<Vec<Option<Cell>>>,
    pub bad_pairs: Vec<BadPair>,
    /// In the order they were found (most bad pairs first).
    pub suspects: Vec<Suspect>,
    /// Outliers (slow pairs) whose result is not yet from a re-test alone: the pairs to re-test.
    pub to_retest: Vec<PairRef>,
    /// The pairs re-tested alone, and whether each stayed bad.
    pub retests: Vec<Retest>,
    /// Lines that were not `fabric_pair` events (other events, srun's chatter).
    pub skipped_lines: usize,
    /// With `--rails`: the rail this matrix is of (one report per rail); absent in a one-rail
    /// check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rail: Option<RailMatrix>,
}

/// The rail a report's matrix is of.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RailMatrix {
    /// From 0.
    pub index: usize,
    /// How many rails every node has.
    pub rails: usize,
    /// The device each rank wrote from on this rail (by rank; `None` where no line says).
    pub devices: Vec<Option<String>>,
}

impl Report {
    /// Whether any pair failed or is missing (the report then exits non-zero).
    #[must_use]
    pub fn any_failed(&self) -> bool {
        self.failed + self.missing > 0
    }
}
