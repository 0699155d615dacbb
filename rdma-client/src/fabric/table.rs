//! The human text of a fabric report: a summary, the N x N matrix (rows write, columns are
//! written), the bad pairs with their reasons, and the suspect nodes.

use super::report::{Cell, LatencySource, Report};
use std::fmt::Write as _;

/// Past this many nodes the matrix is left to the heat map and `--json`: a terminal is too
/// narrow for it.
pub const MAX_TABLE_NODES: usize = 64;

/// The whole report as text.
#[must_use]
pub fn render(r: &Report) -> String {
    let mut s = String::new();
    let n = r.hosts.len();
    if let Some(rail) = &r.rail {
        let devices: Vec<String> = r
            .hosts
            .iter()
            .zip(&rail.devices)
            .map(|(h, d)| {
                format!(
                    "{} {}",
                    rdma_proto::printable(h),
                    d.as_deref().map_or("?".into(), rdma_proto::printable)
                )
            })
            .collect();
        let _ = writeln!(
            s,
            "rail {} of {}: writers' devices {}",
            rail.index,
            rail.rails,
            devices.join(", ")
        );
    }
    let _ = writeln!(
        s,
        "fabric check: {n} nodes, {} pairs: {} passed, {} slow, {} failed, {} missing",
        r.pairs, r.passed, r.slow, r.failed, r.missing
    );
    let _ = writeln!(
        s,
        "latency ({}): reference {}, fabric median {}; slow above {} x the reference",
        match r.latency_source {
            LatencySource::Measured => "measured",
            LatencySource::Write => "time of the verified write; no measurement ran",
            LatencySource::None => "none",
        },
        num(r.lat_reference_us, "us"),
        num(r.lat_median_us, "us"),
        r.thresholds.lat_factor
    );
    let _ = writeln!(
        s,
        "bandwidth: reference {}, fabric median {}; slow under {} x the reference",
        num(r.bw_reference_mbs, "MB/s"),
        num(r.bw_median_mbs, "MB/s"),
        r.thresholds.bw_fraction
    );
    if n <= MAX_TABLE_NODES {
        s.push('\n');
        matrix(&mut s, r, "writer \\ target", |c| match c {
            Cell::Pass { .. } => "ok".into(),
            Cell::Slow { .. } => "SLOW".into(),
            Cell::Fail { .. } => "FAIL".into(),
            Cell::Missing => "?".into(),
        });
        if r.latency_source != LatencySource::None {
            s.push('\n');
            matrix(&mut s, r, "latency us", |c| {
                c.lat_us().map_or_else(|| "-".into(), |v| format!("{v:.1}"))
            });
        }
    } else {
        let _ = writeln!(
            s,
            "\n({n} nodes: see the heat map or --json for the matrix)"
        );
    }
    if !r.bad_pairs.is_empty() {
        let _ = writeln!(s, "\nbad pairs:");
        for b in &r.bad_pairs {
            let why = match &b.cell {
                Cell::Slow { why, .. } => format!("slow: {why}"),
                Cell::Fail { kind, error } => {
                    format!("FAILED ({kind}): {}", rdma_proto::printable(error))
                }
                Cell::Missing => "missing: no result from the writer (its task died?)".into(),
                Cell::Pass { .. } => continue,
            };
            let _ = writeln!(
                s,
                "  {} -> {}: {why}{}",
                rdma_proto::printable(&b.writer_host),
                rdma_proto::printable(&b.target_host),
                if b.retested { " (re-tested alone)" } else { "" }
            );
        }
    }
    if !r.retests.is_empty() {
        let still = r.retests.iter().filter(|x| x.still_bad).count();
        let _ = writeln!(
            s,
            "\nre-tested alone: {} pair(s), {still} still bad, {} cleared",
            r.retests.len(),
            r.retests.len() - still
        );
        for x in r.retests.iter().filter(|x| !x.still_bad) {
            let _ = writeln!(
                s,
                "  {} -> {}: cleared",
                rdma_proto::printable(&x.pair.writer_host),
                rdma_proto::printable(&x.pair.target_host)
            );
        }
    }
    if !r.to_retest.is_empty() {
        let _ = writeln!(
            s,
            "\nnot re-tested yet: {} slow pair(s) (--retest-list)",
            r.to_retest.len()
        );
    }
    if !r.suspects.is_empty() {
        let _ = writeln!(s, "\nsuspect nodes (bad in more than half of their pairs):");
        for k in &r.suspects {
            let _ = writeln!(
                s,
                "  {} (rank {}): {} of {} pairs bad",
                rdma_proto::printable(&k.host),
                k.rank,
                k.bad,
                k.of
            );
        }
    }
    if r.skipped_lines > 0 {
        let _ = writeln!(
            s,
            "\n({} input lines were not fabric_pair events)",
            r.skipped_lines
        );
    }
    s.truncate(s.trim_end().len());
    s
}

fn num(v: Option<f64>, unit: &str) -> String {
    v.map_or_else(|| "not measured".into(), |v| format!("{v:.1} {unit}"))
}

/// One matrix: a row per writer, a column per target (by rank).
fn matrix(s: &mut String, r: &Report, corner: &str, show: impl Fn(&Cell) -> String) {
    let names: Vec<String> = r
        .hosts
        .iter()
        .enumerate()
        .map(|(k, h)| format!("{k} {}", rdma_proto::printable(h)))
        .collect();
    let rows: Vec<Vec<String>> = r
        .matrix
        .iter()
        .map(|row| {
            row.iter()
                .map(|c| c.as_ref().map_or_else(|| "-".into(), &show))
                .collect()
        })
        .collect();
    let first = names
        .iter()
        .map(String::len)
        .chain([corner.len()])
        .max()
        .unwrap_or(0);
    let width = rows
        .iter()
        .flatten()
        .map(String::len)
        .chain((0..r.hosts.len()).map(|k| k.to_string().len()))
        .max()
        .unwrap_or(1);
    let _ = write!(s, "{corner:<first$}");
    for k in 0..r.hosts.len() {
        let _ = write!(s, " {k:>width$}");
    }
    s.push('\n');
    for (name, row) in names.iter().zip(&rows) {
        let _ = write!(s, "{name:<first$}");
        for v in row {
            let _ = write!(s, " {v:>width$}");
        }
        s.push('\n');
    }
}

#[cfg(test)]
mod tests {
    use super::super::report::{analyze, tests};
    use super::*;

    #[test]
    fn the_table_shows_the_matrix_the_bad_pairs_and_the_suspect() {
        let r = analyze(&tests::three(Some(2), 4.0), 0, tests::TH).unwrap();
        let text = render(&r);
        assert!(
            text.contains("3 nodes, 6 pairs: 2 passed, 4 slow, 0 failed"),
            "{text}"
        );
        let row = |start: &str| -> Vec<&str> {
            let line = text
                .lines()
                .find(|l| l.starts_with(start))
                .unwrap_or_default();
            line.split_whitespace().collect()
        };
        assert_eq!(row("0 node1"), ["0", "node1", "-", "ok", "SLOW"], "{text}");
        assert_eq!(
            row("2 node3"),
            ["2", "node3", "SLOW", "SLOW", "-"],
            "{text}"
        );
        assert_eq!(
            row("writer"),
            ["writer", "\\", "target", "0", "1", "2"],
            "{text}"
        );
        assert!(
            text.contains("node3 -> node1: slow: latency 40.0 us"),
            "{text}"
        );
        assert!(text.contains("node3 (rank 2): 4 of 4 pairs bad"), "{text}");
        assert!(
            text.contains("reference 10.0 us, fabric median 40.0 us"),
            "{text}"
        );
        assert!(!text.contains("rail"), "{text}");
    }

    #[test]
    fn a_rail_s_table_names_the_rail_and_its_devices() {
        let mut r = analyze(&tests::three(None, 1.0), 0, tests::TH).unwrap();
        r.rail = Some(rdma_proto::events::fabric::RailMatrix {
            index: 1,
            rails: 2,
            devices: vec![Some("rxe1".into()), Some("mlx5_1".into()), None],
        });
        let text = render(&r);
        assert!(
            text.starts_with("rail 1 of 2: writers' devices node1 rxe1, node2 mlx5_1, node3 ?\n"),
            "{text}"
        );
    }
}
