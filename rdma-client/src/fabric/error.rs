//! The fabric check's own failure ([`FabricError`]), and which exit each of its errors ends in.

use rdma_app::Exit;

/// The fabric check's failures that are not the user's mistakes.
#[derive(Debug, thiserror::Error)]
pub enum FabricError {
    #[error(
        "{failed} of {pairs} pair(s) failed{missing}; see the bad pairs above",
        missing = if *.missing > 0 { format!(" and {} had no result", .missing) } else { String::new() }
    )]
    PairsFailed {
        failed: usize,
        missing: usize,
        pairs: usize,
    },
}

/// The exit code for a fabric check's own errors (`None`: not one of them).
pub fn exit_of(cause: &(dyn std::error::Error + 'static)) -> Option<Exit> {
    if cause.is::<super::ranks::RankError>()
        || cause.is::<super::report::ReportError>()
        || cause.is::<super::heatmap::HeatmapError>()
        || cause.is::<super::rails::RailError>()
    {
        return Some(Exit::Usage);
    }
    cause.is::<FabricError>().then_some(Exit::Transfer)
}
