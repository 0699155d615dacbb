//! Holding what a process printed to a scenario's [`Expect`]s.

use super::types::*;
use serde_json::Value;

/// Checks `expect` against what a process printed; returns the failures, human-readable.
pub fn check(expect: &[Expect], stdout: &str, stderr: &str) -> Vec<String> {
    let mut failures = Vec::new();
    for e in expect {
        match e {
            Expect::StdoutHas(text) => {
                if !stdout.lines().any(|l| l.contains(text)) {
                    failures.push(format!("stdout lacks {text:?}"));
                }
            }
            Expect::StderrHas(text) => {
                if !stderr.to_lowercase().contains(&text.to_lowercase()) {
                    failures.push(format!("stderr lacks {text:?}"));
                }
            }
            Expect::Server(what, check) => find(stdout, what, check.as_ref(), &mut failures),
            Expect::Client(what, check) => find(stdout, what, check.as_ref(), &mut failures),
            Expect::HostileClean => {
                let clean = json_lines(stdout).any(|l| {
                    serde_json::from_str::<Value>(l).is_ok_and(|v| {
                        v["type"] == "summary" && v["failed"].as_array().is_some_and(Vec::is_empty)
                    })
                });
                if !clean {
                    failures.push("no hostile summary without failed cases".to_owned());
                }
            }
        }
    }
    failures
}

/// The lines of `stdout` that are JSON objects (the binaries' `--json` events).
fn json_lines(stdout: &str) -> impl Iterator<Item = &str> {
    stdout.lines().filter(|l| l.trim_start().starts_with('{'))
}

/// Whether some JSON line of `stdout` is an `E` that `check` holds for; a JSON line that is no
/// `E` at all is a failure of its own, naming the line.
fn find<E: serde::de::DeserializeOwned>(
    stdout: &str,
    what: &str,
    check: &(dyn Fn(&E) -> bool + Send + Sync),
    failures: &mut Vec<String>,
) {
    let mut found = false;
    for line in json_lines(stdout) {
        match rdma_proto::events::parse::<E>(line) {
            Ok(event) => found |= check(&event),
            Err(e) => failures.push(e.to_string()),
        }
    }
    if !found {
        failures.push(format!("no {what} event"));
    }
}
