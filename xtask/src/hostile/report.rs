//! The hostile client's output: one line (or JSON object) per case, then a summary.

use rdma_hostile::Verdict;
use serde::{Deserialize, Serialize};

/// One `--json` line of the hostile client: written here, read by the e2e scenario that runs it.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Line {
    /// One case's verdict.
    Case {
        case: String,
        pass: bool,
        seen: String,
        ms: u64,
    },
    /// The run's summary, last.
    Summary {
        cases: usize,
        passed: usize,
        failed: Vec<String>,
        rng_seed: u64,
    },
}

impl Line {
    /// A summary with no failed case.
    pub fn is_clean_summary(&self) -> bool {
        matches!(self, Line::Summary { failed, .. } if failed.is_empty())
    }
}

/// `line` as JSON (a `Line` always serializes).
fn to_json(line: &Line) -> String {
    serde_json::to_string(line).unwrap_or_default()
}

/// Prints one case's verdict, on one line whatever the server sent.
pub(super) fn print_verdict(v: &Verdict, json: bool) {
    // One line per case, whatever the server sent.
    let seen = v.seen.replace(['\n', '\r'], " ");
    if json {
        let line = Line::Case {
            case: v.case.name(),
            pass: v.pass,
            seen,
            ms: u64::try_from(v.elapsed.as_millis()).unwrap_or(u64::MAX),
        };
        println!("{}", to_json(&line));
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
        let line = Line::Summary {
            cases: verdicts.len(),
            passed: verdicts.len() - failed.len(),
            failed: failed.clone(),
            rng_seed,
        };
        println!("{}", to_json(&line));
    } else {
        println!(
            "hostile: {}/{} passed",
            verdicts.len() - failed.len(),
            verdicts.len()
        );
    }
    failed
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The summary line reads back as what it said: clean only with no failed case.
    #[test]
    fn the_summary_line_reads_back_and_is_clean_only_without_failures() {
        let summary = |failed: &[&str]| Line::Summary {
            cases: 3,
            passed: 3 - failed.len(),
            failed: failed.iter().map(|f| (*f).to_owned()).collect(),
            rng_seed: 7,
        };
        let text = to_json(&summary(&[]));
        assert_eq!(
            text,
            r#"{"type":"summary","cases":3,"passed":3,"failed":[],"rng_seed":7}"#
        );
        let back: Line = serde_json::from_str(&text).unwrap();
        assert!(back.is_clean_summary());
        let bad: Line = serde_json::from_str(&to_json(&summary(&["huge-length"]))).unwrap();
        assert!(!bad.is_clean_summary());
        let case = Line::Case {
            case: "x".into(),
            pass: true,
            seen: "y".into(),
            ms: 1,
        };
        assert!(!case.is_clean_summary());
    }
}
