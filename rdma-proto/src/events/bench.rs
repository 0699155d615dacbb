//! The rows of `rdma-client bench --json` (`bench_lat`, `bench_bw` events): perftest's
//! columns, one row per size.

use serde::{Deserialize, Serialize};

/// Version of the `bench_lat` / `bench_bw` rows.
pub const SCHEMA: u32 = 1;

/// One latency row: half round trips, microseconds (like `ib_write_lat`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LatRow {
    pub schema: u32,
    pub bytes: u64,
    pub iterations: u64,
    pub t_min_us: f64,
    pub t_max_us: f64,
    /// The median.
    pub t_typical_us: f64,
    pub t_avg_us: f64,
    pub t_stdev_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
}

/// One bandwidth row (like `ib_write_bw`; MB = 2^20 bytes as perftest, Gb = 10^9 bits).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BwRow {
    pub schema: u32,
    pub bytes: u64,
    pub iterations: u64,
    pub bw_peak_mbs: f64,
    pub bw_avg_mbs: f64,
    pub bw_peak_gbps: f64,
    pub bw_avg_gbps: f64,
    pub msg_rate_mpps: f64,
}

/// Gb/s (10^9 bits) of `mbs` MB/s (2^20 bytes).
#[must_use]
pub fn gbps(mbs: f64) -> f64 {
    mbs * 1_048_576.0 * 8.0 / 1e9
}
