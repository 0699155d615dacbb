//! The end-to-end scenarios: what each server and client is asked to do, and what must be seen.
//!
//! A scenario is one `rdma-server` process (its own TCP port) and a sequence of `rdma-client`
//! runs against it. Every scenario that feeds the server bad input ends with a well-behaved
//! client that must still be verified: that is how "the server survives" is proven, and it is
//! also what lets a one-shot server exit 0 on its own.
//!
//! Verdicts are read from the run's transcript (`crate::scenario`): the binaries' `--json`
//! events, parsed as the contract's types (`rdma_proto::events`); a check names the fields it looks at, so a renamed field is a
//! compile error here; a JSON line that is no event of its binary fails the check, naming it.
//! Exit codes are `rdma_proto::Exit` kinds, never numbers; a failing client is judged by its
//! `error` event (kind and message). Text is read only where the human text is what is
//! tested: the seed's lines, the zh lines, the misbehaving peer's own account.

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
    use super::build::{self, client_verified};
    use super::*;
    use crate::scenario::exit::Speaks;
    use crate::scenario::transcript::Role;

    fn role(speaks: Speaks, stdout: &str, stderr: &str) -> Role {
        let step = crate::plan::StepResult {
            name: "r".into(),
            exit_code: Some(0),
            stdout: stdout.into(),
            stderr: stderr.into(),
            ..Default::default()
        };
        Role::of(&step, "B", speaks)
    }

    #[test]
    fn checks_fail_when_output_lacks_what_is_expected() {
        let expect = vec![Expect::StdoutHas("received message: hi"), client_verified()];
        let verdict = |v: bool| {
            format!(
                r#"{{"type":"verified","verified":{v},"length":2,"crc32c":1,"text":"hi","truncated":false}}"#
            )
        };
        let client = |out: &str| role(Speaks::Client, out, "");
        let good = format!("received message: hi\n{}\n", verdict(true));
        assert!(check(&expect, &client(&good)).is_empty());
        let bad = format!("{}\n", verdict(false));
        let failures = check(&expect, &client(&bad));
        assert_eq!(failures.len(), 2, "{failures:?}");
        // A line that is no client event (a field renamed) fails by itself, named.
        let renamed = format!(
            "{}\n{}\n",
            verdict(true),
            verdict(true).replace("crc32c", "crc")
        );
        let failures = check(&[client_verified()], &client(&renamed));
        assert_eq!(failures.len(), 1, "{failures:?}");
        assert!(failures[0].contains(r#""crc":1"#), "{failures:?}");
        // A client's verdict is no server's: read by the role's own binary.
        assert_eq!(
            check(&[client_verified()], &role(Speaks::Server, &good, "")).len(),
            2
        );
        assert!(
            check(
                &[Expect::StderrHas("Remote Access")],
                &role(Speaks::Client, "", "remote access error")
            )
            .is_empty()
        );
    }

    #[test]
    fn a_failing_client_is_judged_by_its_error_event() {
        let c = build::failing_client("no token", rdma_proto::Exit::Refused, &[], "token");
        let error = |kind: rdma_proto::Exit, message: &str| {
            let e = rdma_proto::events::client::Event::Error {
                kind,
                exit_code: kind.code(),
                message: message.into(),
            };
            serde_json::to_string(&e).unwrap() + "\n"
        };
        let refused = error(rdma_proto::Exit::Refused, "refused:\n  a Token is required");
        assert!(check(&c.expect, &role(Speaks::Client, &refused, "")).is_empty());
        // The needle on stderr alone, or an error of another kind, is not enough.
        let elsewhere = error(rdma_proto::Exit::Refused, "refused");
        assert_eq!(
            check(&c.expect, &role(Speaks::Client, &elsewhere, "error: token")).len(),
            1
        );
        let usage = error(rdma_proto::Exit::Usage, "token file unreadable");
        assert_eq!(check(&c.expect, &role(Speaks::Client, &usage, "")).len(), 1);
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
