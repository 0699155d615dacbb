//! `bench --mode bw --qps N`: N queue pairs writing at once, as perftest's `-q N`. Each QP is its own
//! bench session (its own connection, QP and server buffer, verified on its own), so the server
//! needs nothing new; the N sessions of one size start together and their figures add up.

use std::time::Instant;

use color_eyre::eyre::{Result, eyre};
use rdma_core_rs::LocalPort;

use super::stats::{self, BwRow};
use super::{Measure, Rows, Sweep};
use crate::output::{Event, Output, human};
use crate::session::SessionOptions;
use rdma_proto::bench::BenchMode;

/// The figures of N concurrent writers of one size, added up (peak: the sum of each QP's
/// peak, an upper bound, as their peaks need not coincide).
pub fn sum(rows: &[BwRow]) -> Option<BwRow> {
    let first = rows.first()?;
    let add = |f: fn(&BwRow) -> f64| rows.iter().map(f).sum::<f64>();
    Some(BwRow {
        schema: stats::SCHEMA,
        bytes: first.bytes,
        iterations: rows.iter().map(|r| r.iterations).sum(),
        bw_peak_mbs: add(|r| r.bw_peak_mbs),
        bw_avg_mbs: add(|r| r.bw_avg_mbs),
        bw_peak_gbps: add(|r| r.bw_peak_gbps),
        bw_avg_gbps: add(|r| r.bw_avg_gbps),
        msg_rate_mpps: add(|r| r.msg_rate_mpps),
    })
}

/// For each size of `p`, `qps` sessions of that size at once; one summed row per size.
pub fn run(
    m: &Measure<'_>,
    qps: usize,
    local: &LocalPort,
    opts: &SessionOptions,
    out: &Output,
) -> Result<()> {
    let p = &m.params;
    out.human(|| format!("{}  (#QPs {qps})", human::bench_header(BenchMode::Bw)));
    for &size in &p.sizes {
        let one = Sweep {
            sizes: vec![size],
            ..p.clone()
        };
        let results: Vec<Result<Rows>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..qps)
                .map(|_| {
                    let m = Measure {
                        params: one.clone(),
                        ..m.clone()
                    };
                    s.spawn(move || m.run(local, opts, Instant::now(), None))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(eyre!("a bench session thread panicked")))
                })
                .collect()
        });
        let mut rows = Vec::with_capacity(qps);
        for (i, r) in results.into_iter().enumerate() {
            let r = r.map_err(|e| e.wrap_err(format!("QP {} of {qps} ({size} B)", i + 1)))?;
            rows.extend(r.bw);
        }
        let row = sum(&rows).ok_or_else(|| eyre!("no figures for {size} B"))?;
        out.emit(&Event::BenchBw(row));
    }
    out.human(|| {
        format!(
            "{}\nserver verified the final bytes of all {} sessions",
            human::RULE,
            qps * p.sizes.len()
        )
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concurrent_figures_add_up() {
        let a = stats::bw_row(4096, 100, 1.0, 0.0);
        let b = stats::bw_row(4096, 300, 1.0, 0.0);
        let s = sum(&[a, b]).unwrap();
        assert_eq!(s.iterations, 400);
        assert!((s.bw_avg_mbs - (a.bw_avg_mbs + b.bw_avg_mbs)).abs() < 1e-12);
        assert!((s.msg_rate_mpps - 0.0004).abs() < 1e-12);
        assert!(sum(&[]).is_none());
    }
}
