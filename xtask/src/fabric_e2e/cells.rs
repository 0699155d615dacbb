//! What every judge of the fabric phase reads off a report: a cell's status, and the rails.

use rdma_proto::events::fabric::{Cell, Report};

/// Rails of every guest in the rails phase (`rxe0` on eth0, `rxe1` on eth1).
pub const RAILS: usize = 2;

/// The status of the cell (writer row, target column): pass, slow, fail, missing.
pub fn status(report: &Report, w: usize, t: usize) -> &'static str {
    match report.matrix.get(w).and_then(|row| row.get(t)) {
        Some(Some(Cell::Pass { .. })) => "pass",
        Some(Some(Cell::Slow { .. })) => "slow",
        Some(Some(Cell::Fail { .. })) => "fail",
        _ => "missing",
    }
}
