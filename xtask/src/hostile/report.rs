//! The hostile client's output: one line (or JSON object) per case, then a summary.

use rdma_hostile::Verdict;
use serde_json::json;

/// Prints one case's verdict, on one line whatever the server sent.
pub(super) fn print_verdict(v: &Verdict, json: bool) {
    // One line per case, whatever the server sent.
    let seen = v.seen.replace(['\n', '\r'], " ");
    if json {
        println!(
            "{}",
            json!({
                "type": "case",
                "case": v.case.name(),
                "pass": v.pass,
                "seen": seen,
                "ms": v.elapsed.as_millis() as u64,
            })
        );
    } else {
        println!(
            "{} {:<22} {:>6} ms  {}",
            if v.pass { "PASS" } else { "FAIL" },
            v.case.name(),
            v.elapsed.as_millis(),
            seen
        );
    }
}

/// Prints the summary; returns the names of the failed cases.
pub(super) fn print_summary(verdicts: &[Verdict], rng_seed: u64, json: bool) -> Vec<String> {
    let failed: Vec<String> = verdicts
        .iter()
        .filter(|v| !v.pass)
        .map(|v| v.case.name())
        .collect();
    if json {
        println!(
            "{}",
            json!({
                "type": "summary",
                "cases": verdicts.len(),
                "passed": verdicts.len() - failed.len(),
                "failed": failed,
                "rng_seed": rng_seed,
            })
        );
    } else {
        println!(
            "hostile: {}/{} passed",
            verdicts.len() - failed.len(),
            verdicts.len()
        );
    }
    failed
}
