//! The end-to-end scenarios: what each server and client is asked to do, and what must be seen.
//!
//! A scenario is one `rdma-server` process (its own TCP port) and a sequence of `rdma-client`
//! runs against it. Every scenario that feeds the server bad input ends with a well-behaved
//! client that must still be verified: that is how "the server survives" is proven, and it is
//! also what lets a one-shot server exit 0 on its own.
//!
//! Verdicts are read from the binaries' `--json` events, parsed as the contract's types
//! (`rdma_proto::events`): a check names the fields it looks at, so a renamed field is a
//! compile error here; a JSON line that is no event of its binary fails the check, naming it.
//! Exit codes are `rdma_proto::Exit` kinds, never numbers. The human lines are read for the
//! scenario that shows the seed's output.

mod access;
mod bench;
mod build;
mod check;
mod types;
mod writes;

pub use check::check;
pub use types::*;

/// Every scenario, in the order they run (scenario `i` listens on [`BASE_PORT`]` + i`).
pub fn all() -> Vec<Scenario> {
    [
        writes::writes(),
        writes::misbehaving_clients(),
        bench::bench(),
        bench::server_side(),
        access::access(),
        access::tools(),
    ]
    .concat()
}

#[cfg(test)]
mod tests {
    use super::build::client_verified;
    use super::*;

    #[test]
    fn checks_fail_when_output_lacks_what_is_expected() {
        let expect = vec![Expect::StdoutHas("received message: hi"), client_verified()];
        let verdict = |v: bool| {
            format!(
                r#"{{"type":"verified","verified":{v},"length":2,"crc32c":1,"text":"hi","truncated":false}}"#
            )
        };
        let good = format!("received message: hi\n{}\n", verdict(true));
        assert!(check(&expect, &good, "").is_empty());
        let bad = format!("{}\n", verdict(false));
        let failures = check(&expect, &bad, "");
        assert_eq!(failures.len(), 2, "{failures:?}");
        // A line that is no client event (a field renamed) fails by itself, named.
        let renamed = format!(
            "{}\n{}\n",
            verdict(true),
            verdict(true).replace("crc32c", "crc")
        );
        let failures = check(&[client_verified()], &renamed, "");
        assert_eq!(failures.len(), 1, "{failures:?}");
        assert!(failures[0].contains(r#""crc":1"#), "{failures:?}");
        assert!(
            check(
                &[Expect::StderrHas("Remote Access")],
                "",
                "remote access error"
            )
            .is_empty()
        );
    }

    #[test]
    fn scenarios_are_well_formed() {
        let all = all();
        let mut names: Vec<_> = all.iter().map(|s| s.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), all.len(), "scenario names must be unique");
        assert!(all.iter().any(|s| s.quick));
        for s in &all {
            assert!(!s.clients.is_empty(), "{} has no client", s.name);
            // A one-shot server that must exit 0 needs a last client that gets verified.
            if s.server_exit.is_none() && !s.server_args.iter().any(|a| a == "--serve") {
                assert_eq!(s.clients.last().map(|c| c.exit), Some(None), "{}", s.name);
            }
        }
    }
}
