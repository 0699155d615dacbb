//! `fabric report`: every rank's `fabric_pair` lines merged into one N x N matrix, the pairs
//! that are bad (failed, missing, or outliers), and the nodes common to them. Pure: lines in,
//! a [`Report`] out; printing is in `table`, drawing in `heatmap`.
//!
//! **Outliers**, as ClusterKit flags them: a verified pair whose latency is over
//! `lat_factor` x the reference, or whose bandwidth is under `bw_fraction` x the reference.
//! ClusterKit's reference is the fabric's median; with few nodes one slow node sits in most
//! pairs (4 of the 6 of three nodes) and drags that median with it, so the reference here is
//! the median over nodes of each node's *best* pair (lowest latency, highest bandwidth), which
//! stays the healthy value while fewer than half the nodes are bad. Both are reported. The
//! latency of a pair is its measured `lat_us`, or the verified write's own time (`write_us`)
//! where no measurement ran.
//!
//! **Suspects**, the nodes common to the bad pairs: a node with a broken or slow link spoils
//! all its `2 (n - 1)` pairs (as writer and as target), a healthy node only its pairs with the
//! bad ones. So the nodes in the most bad pairs are named, if that is more than half of their
//! pairs; their pairs count as explained, and the rest is looked at again the same way. Bad
//! pairs no named node explains are bad links (or bad luck): the list of bad pairs shows them.
//! Two nodes alone cannot be told apart: both are named.
//!
//! A re-test alone (`fabric --retest HOST`) is the pair's verdict, wherever its line stands
//! in the input: it replaces the pair's round line, and no round line replaces it. Between two
//! lines of the same kind the later one wins. The report lists
//! the outliers not re-tested yet (`to_retest`, what `--retest-list` prints) and, for every
//! pair that was, whether it stayed bad or cleared (`retests`).

use super::pair::{self, MAX_WORLD, PairResult};
use super::validate;
use rdma_proto::Exit;
pub use rdma_proto::events::fabric::{
    BadPair, Cell, LatencySource, PairRef, Report, Retest, Suspect, Thresholds,
};
use std::io::BufRead;

/// Why the inputs cannot be merged: a usage error.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("cannot read {name}: {source}")]
    Read {
        name: String,
        source: std::io::Error,
    },
    #[error("{name} line {line}: a `fabric_pair` event that cannot be used: {reason}")]
    BadPair {
        name: String,
        line: usize,
        reason: String,
    },
    #[error(
        "no `fabric_pair` event in the input ({skipped} other lines): give the JSON Lines of \
         `rdma-client fabric --json`"
    )]
    NoPairs { skipped: usize },
    #[error("the input mixes fabric checks of {a} and {b} nodes: give the lines of one run only")]
    MixedWorlds { a: usize, b: usize },
    #[error(
        "a `fabric_pair` event names rank {rank} in a world of {world}, or a pair of one node with itself"
    )]
    BadRank { rank: usize, world: usize },
    #[error("a `fabric_pair` event has `world` {world}: out of range 2..={MAX_WORLD}")]
    BadWorld { world: usize },
}

/// Reads the `fabric_pair` events of one input; returns them and how many lines were other
/// things. A leading `N: ` (`srun --label`) or `HOST: ` (pdsh) is taken off first. Every
/// event is checked on its own and against the lines before it, in this input and the ones
/// read before with the same `seen` (see [`validate`]). A line longer than [`MAX_LINE`] is
/// not buffered: no runner writes one, so it is skipped as other output.
///
/// # Errors
/// The input cannot be read, or a `fabric_pair` line is malformed or contradicts another.
pub fn read(
    mut input: impl BufRead,
    name: &str,
    seen: &mut validate::Consistency,
) -> Result<(Vec<PairResult>, usize), ReportError> {
    let mut pairs = Vec::new();
    let mut skipped = 0;
    let mut buf = Vec::new();
    let mut number = 0;
    let unreadable = |source| ReportError::Read {
        name: name.to_owned(),
        source,
    };
    while let Some(fits) = next_line(&mut input, &mut buf).map_err(unreadable)? {
        number += 1;
        let Some(line) = fits.then(|| std::str::from_utf8(&buf).ok()).flatten() else {
            skipped += 1;
            continue;
        };
        let text = strip_label(line.trim());
        let Ok(value) = serde_json::from_str::<serde_json::Value>(text) else {
            skipped += 1;
            continue;
        };
        if value.get("type").and_then(|t| t.as_str()) != Some(pair::TYPE) {
            skipped += 1;
            continue;
        }
        let bad = |reason: String| ReportError::BadPair {
            name: name.to_owned(),
            line: number,
            reason,
        };
        let p: PairResult = serde_json::from_value(value).map_err(|e| bad(e.to_string()))?;
        seen.check(&p, name, number).map_err(bad)?;
        pairs.push(p);
    }
    Ok((pairs, skipped))
}

/// The longest line `read` looks at, in bytes.
pub const MAX_LINE: usize = 64 * 1024;

/// Reads the next line into `buf` (without its newline): `Some(true)`, or `Some(false)` for a
/// line longer than [`MAX_LINE`] (the rest of it is read and dropped, never buffered); `None`
/// at the end.
fn next_line(input: &mut impl BufRead, buf: &mut Vec<u8>) -> std::io::Result<Option<bool>> {
    use std::io::Read as _;
    buf.clear();
    let n = input
        .by_ref()
        .take(MAX_LINE as u64 + 1)
        .read_until(b'\n', buf)?;
    if n == 0 {
        return Ok(None);
    }
    if buf.last() == Some(&b'\n') {
        buf.pop();
        return Ok(Some(true));
    }
    if buf.len() <= MAX_LINE {
        return Ok(Some(true)); // the last line, without a newline
    }
    loop {
        let chunk = input.fill_buf()?;
        if chunk.is_empty() {
            break;
        }
        match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => {
                input.consume(i + 1);
                break;
            }
            None => {
                let len = chunk.len();
                input.consume(len);
            }
        }
    }
    buf.clear();
    Ok(Some(false))
}

/// Takes off the `LABEL: ` that `srun --label` (`3: `) or pdsh (`node03: `) puts before a line.
fn strip_label(line: &str) -> &str {
    match line.split_once(": ") {
        Some((label, rest))
            if !label.is_empty() && !label.contains(['{', '"', ' ']) && rest.starts_with('{') =>
        {
            rest
        }
        _ => line,
    }
}

/// Merges pair results into the report.
///
/// # Errors
/// No pair at all, lines from checks of different sizes, or a rank outside the world.
pub fn analyze(
    results: &[PairResult],
    skipped_lines: usize,
    thresholds: Thresholds,
) -> Result<Report, ReportError> {
    let first = results.first().ok_or(ReportError::NoPairs {
        skipped: skipped_lines,
    })?;
    let n = first.world;
    if !(2..=MAX_WORLD).contains(&n) {
        return Err(ReportError::BadWorld { world: n });
    }
    let mut hosts: Vec<String> = (0..n).map(|r| format!("rank {r}")).collect();
    let mut latest: Vec<Option<&PairResult>> = vec![None; n * n];
    for p in results {
        if p.world != n {
            return Err(ReportError::MixedWorlds { a: n, b: p.world });
        }
        if p.writer >= n || p.target >= n || p.writer == p.target {
            return Err(ReportError::BadRank {
                rank: p.writer.max(p.target),
                world: n,
            });
        }
        hosts[p.writer].clone_from(&p.writer_host);
        hosts[p.target].clone_from(&p.target_host);
        let slot = &mut latest[p.writer * n + p.target];
        *slot = Some(match *slot {
            Some(earlier) if earlier.retest && !p.retest => earlier,
            _ => p,
        });
    }

    let lat = |p: &PairResult| p.lat_us.or(p.write_us);
    let verified = || latest.iter().flatten().filter(|p| p.verified);
    let latency_source = if verified().any(|p| p.lat_us.is_some()) {
        LatencySource::Measured
    } else if verified().any(|p| p.write_us.is_some()) {
        LatencySource::Write
    } else {
        LatencySource::None
    };
    let lat_median_us = median(verified().filter_map(|p| lat(p)).collect());
    let bw_median_mbs = median(verified().filter_map(|p| p.bw_mbs).collect());
    let best = |value: &dyn Fn(&PairResult) -> Option<f64>, better: fn(f64, f64) -> f64| {
        let per_node = (0..n)
            .filter_map(|k| {
                verified()
                    .filter(|p| p.writer == k || p.target == k)
                    .filter_map(|p| value(p))
                    .reduce(better)
            })
            .collect();
        median(per_node)
    };
    let lat_reference_us = best(&lat, f64::min);
    let bw_reference_mbs = best(&|p: &PairResult| p.bw_mbs, f64::max);

    let cell = |p: Option<&PairResult>| -> Cell {
        let Some(p) = p else { return Cell::Missing };
        if !p.verified {
            return Cell::Fail {
                kind: p.error_kind.unwrap_or(Exit::Unverified),
                error: p.error.clone().unwrap_or_default(),
            };
        }
        let (lat_us, bw_mbs) = (lat(p), p.bw_mbs);
        let mut why = Vec::new();
        if let (Some(v), Some(r)) = (lat_us, lat_reference_us)
            && v > thresholds.lat_factor * r
        {
            why.push(format!(
                "latency {v:.1} us > {} x {r:.1} us",
                thresholds.lat_factor
            ));
        }
        if let (Some(v), Some(r)) = (bw_mbs, bw_reference_mbs)
            && v < thresholds.bw_fraction * r
        {
            why.push(format!(
                "bandwidth {v:.1} MB/s < {} x {r:.1} MB/s",
                thresholds.bw_fraction
            ));
        }
        if why.is_empty() {
            Cell::Pass { lat_us, bw_mbs }
        } else {
            Cell::Slow {
                lat_us,
                bw_mbs,
                why: why.join("; "),
            }
        }
    };
    let matrix: Vec<Vec<Option<Cell>>> = (0..n)
        .map(|w| {
            (0..n)
                .map(|t| (w != t).then(|| cell(latest[w * n + t])))
                .collect()
        })
        .collect();

    let pair_ref = |w: usize, t: usize| PairRef {
        writer: w,
        writer_host: hosts[w].clone(),
        target: t,
        target_host: hosts[t].clone(),
    };
    let retested = |w: usize, t: usize| latest[w * n + t].is_some_and(|p| p.retest);
    let mut bad_pairs = Vec::new();
    let mut to_retest = Vec::new();
    let mut retests = Vec::new();
    let mut bad_of = vec![0usize; n];
    let (mut passed, mut slow, mut failed, mut missing) = (0, 0, 0, 0);
    for (w, row) in matrix.iter().enumerate() {
        for (t, c) in row.iter().enumerate() {
            let Some(c) = c else { continue };
            if retested(w, t) {
                retests.push(Retest {
                    pair: pair_ref(w, t),
                    still_bad: c.bad(),
                });
            } else if matches!(c, Cell::Slow { .. }) {
                to_retest.push(pair_ref(w, t));
            }
            match c {
                Cell::Pass { .. } => passed += 1,
                Cell::Slow { .. } => slow += 1,
                Cell::Fail { .. } => failed += 1,
                Cell::Missing => missing += 1,
            }
            if c.bad() {
                bad_of[w] += 1;
                bad_of[t] += 1;
                bad_pairs.push(BadPair {
                    writer: w,
                    writer_host: hosts[w].clone(),
                    target: t,
                    target_host: hosts[t].clone(),
                    cell: c.clone(),
                    retested: retested(w, t),
                });
            }
        }
    }
    let suspects = suspects(&hosts, &bad_pairs, &bad_of);
    Ok(Report {
        hosts,
        pairs: n * (n - 1),
        passed,
        slow,
        failed,
        missing,
        latency_source,
        lat_reference_us,
        lat_median_us,
        bw_reference_mbs,
        bw_median_mbs,
        thresholds,
        matrix,
        bad_pairs,
        suspects,
        to_retest,
        retests,
        skipped_lines,
        rail: None,
    })
}

/// The nodes that explain the bad pairs (see the module doc): repeatedly, the nodes in the
/// most bad pairs not yet explained, if that is more than half of their `2 (n - 1)` pairs.
fn suspects(hosts: &[String], bad_pairs: &[BadPair], bad_of: &[usize]) -> Vec<Suspect> {
    let n = hosts.len();
    let of = 2 * (n - 1);
    let mut open: Vec<&BadPair> = bad_pairs.iter().collect();
    let mut named = Vec::new();
    loop {
        let mut count = vec![0usize; n];
        for b in &open {
            count[b.writer] += 1;
            count[b.target] += 1;
        }
        let most = count.iter().copied().max().unwrap_or(0);
        if 2 * most <= of {
            break;
        }
        let now: Vec<usize> = (0..n).filter(|&k| count[k] == most).collect();
        open.retain(|b| !now.contains(&b.writer) && !now.contains(&b.target));
        named.extend(now.into_iter().map(|k| Suspect {
            rank: k,
            host: hosts[k].clone(),
            bad: bad_of[k],
            of,
        }));
    }
    named
}

/// The median (mean of the middle two for an even count); `None` when empty.
fn median(mut v: Vec<f64>) -> Option<f64> {
    v.retain(|x| x.is_finite());
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    Some(if v.len() % 2 == 0 {
        f64::midpoint(v[mid - 1], v[mid])
    } else {
        v[mid]
    })
}

#[cfg(test)]
pub(crate) mod tests;
