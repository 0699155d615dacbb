//! Holding a role of the transcript to a scenario's [`Expect`]s.

use super::types::*;
use crate::hostile::report::Line;
use crate::scenario::judge;
use crate::scenario::transcript::Role;

/// Checks `expect` against what a role printed; returns the failures, human-readable.
pub fn check(expect: &[Expect], role: &Role) -> Vec<String> {
    let mut failures = Vec::new();
    // Every JSON line of a role whose events are judged must be an event of its binary.
    if expect
        .iter()
        .any(|e| matches!(e, Expect::Server(..) | Expect::Client(..)))
    {
        failures.extend(judge::strangers(role));
    }
    for e in expect {
        match e {
            Expect::StdoutHas(text) => {
                if !role.stdout.lines().any(|l| l.contains(text)) {
                    failures.push(format!("stdout lacks {text:?}"));
                }
            }
            Expect::StderrHas(text) => {
                if !role.stderr.to_lowercase().contains(&text.to_lowercase()) {
                    failures.push(format!("stderr lacks {text:?}"));
                }
            }
            Expect::Server(what, check) => {
                if !judge::has_server(role, |e| check(e)) {
                    failures.push(format!("no {what} event"));
                }
            }
            Expect::Client(what, check) => {
                if !judge::has_client(role, |e| check(e)) {
                    failures.push(format!("no {what} event"));
                }
            }
            // The hostile peer is xtask's own, and so is its summary line: no event of our
            // binaries carries it, so it is read as the line type it writes.
            Expect::HostileClean => {
                let clean = role.stdout.lines().any(|l| {
                    serde_json::from_str::<Line>(l).is_ok_and(|line| line.is_clean_summary())
                });
                if !clean {
                    failures.push("no hostile summary without failed cases".to_owned());
                }
            }
        }
    }
    failures
}
