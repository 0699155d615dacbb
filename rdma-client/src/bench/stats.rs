//! The figures a bench run reports, computed the way perftest reports them, as the `--json`
//! rows (schema-versioned); their human table (perftest's column names) is
//! [`crate::output::human`]'s.

pub use rdma_proto::events::bench::{BwRow, LatRow, SCHEMA};

/// Nearest-rank percentile of sorted samples.
fn rank(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let r = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[r - 1]
}

/// Summarises half-round-trip samples (µs). Sorts `samples`.
pub fn lat_row(bytes: u64, samples: &mut [f64]) -> LatRow {
    samples.sort_by(f64::total_cmp);
    let n = samples.len().max(1) as f64;
    let avg = samples.iter().sum::<f64>() / n;
    let var = samples.iter().map(|x| (x - avg) * (x - avg)).sum::<f64>() / n;
    LatRow {
        schema: SCHEMA,
        bytes,
        iterations: samples.len() as u64,
        t_min_us: samples.first().copied().unwrap_or(0.0),
        t_max_us: samples.last().copied().unwrap_or(0.0),
        t_typical_us: rank(samples, 0.5),
        t_avg_us: avg,
        t_stdev_us: var.sqrt(),
        p99_us: rank(samples, 0.99),
        p999_us: rank(samples, 0.999),
    }
}

/// A bandwidth run: `writes` of `bytes` completed in `secs`; `peak_bytes_per_s` is the best
/// rate between two consecutive completions seen.
pub fn bw_row(bytes: u64, writes: u64, secs: f64, peak_bytes_per_s: f64) -> BwRow {
    let total = (bytes * writes) as f64;
    let avg = if secs > 0.0 { total / secs } else { 0.0 };
    let peak = peak_bytes_per_s.max(avg);
    BwRow {
        schema: SCHEMA,
        bytes,
        iterations: writes,
        bw_peak_mbs: peak / 1_048_576.0,
        bw_avg_mbs: avg / 1_048_576.0,
        bw_peak_gbps: peak * 8.0 / 1e9,
        bw_avg_gbps: avg * 8.0 / 1e9,
        msg_rate_mpps: if secs > 0.0 {
            writes as f64 / secs / 1e6
        } else {
            0.0
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_summary_like_perftest() {
        let mut s: Vec<f64> = (1..=1000).map(f64::from).collect();
        s.reverse();
        let r = lat_row(2, &mut s);
        assert_eq!((r.t_min_us, r.t_max_us), (1.0, 1000.0));
        assert_eq!(r.t_typical_us, 500.0);
        assert_eq!(r.p99_us, 990.0);
        assert_eq!(r.p999_us, 999.0);
        assert!((r.t_avg_us - 500.5).abs() < 1e-9);
        assert!((r.t_stdev_us - 288.67).abs() < 0.01);
        assert_eq!(r.iterations, 1000);
        let line = crate::output::human::lat_line(&r);
        let cols: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(cols.len(), 9);
        assert_eq!(cols[4], "500.00");
    }

    #[test]
    fn bandwidth_units() {
        // 1024 writes of 1 MiB in 2 s: 512 MiB/s = 4.294967296 Gb/s, 512 msg/s.
        let r = bw_row(1 << 20, 1024, 2.0, 0.0);
        assert_eq!(r.bw_avg_mbs, 512.0);
        assert_eq!(r.bw_peak_mbs, 512.0, "peak is never below the average");
        assert!((r.bw_avg_gbps - 4.294_967_296).abs() < 1e-9);
        assert!((r.msg_rate_mpps - 0.000_512).abs() < 1e-12);
        let r = bw_row(64, 10, 0.0, 0.0);
        assert_eq!((r.bw_avg_mbs, r.msg_rate_mpps), (0.0, 0.0));
        assert_eq!(r.schema, SCHEMA);
    }
}
