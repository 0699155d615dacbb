//! The lossy-link workload (`vm-smoke --rdma-write --loss PCT`): both guests drop that share
//! of the frames they send on the traffic link (`tc qdisc … netem loss`), so writes, ACKs and
//! the handshake's TCP segments are all lost now and then, and our pair must still deliver as
//! perftest does: [`WRITES`] one-shot writes in a row against one `--serve` server, each
//! verified; then, with every RoCE packet guest A sends dropped (`tc filter … u32 … udp dport
//! 4791 … drop`: the server's ACKs, never its TCP), [`ACKLESS`] more writes, each verified on
//! the server's word (its verdict comes over TCP; the client's completion never comes, or comes
//! as retry-exceeded); then a [`BENCH_SECS`] s `bench --mode bw` of 64 KiB writes under the loss
//! again, whose row must come. The loss is taken away once the workload is done, so a workload
//! after it in the same boot sees a clean link.

use crate::plan::Step;
use crate::scenario::judge;
use crate::scenario::role::BENCH;
use crate::scenario::transcript::Transcript;
use rdma_proto::events::client::Event as ClientEvent;

/// One-shot writes in a row. With 5% of the frames lost each way, about one in twenty lost
/// the server's ACK of its write-with-immediate; before the client waited for its verdict as
/// well as for its completion, that write waited out its whole `--timeout`.
pub const WRITES: usize = 20;
/// Writes with every ACK of the server lost.
pub const ACKLESS: usize = 3;
/// How long the bench writes.
pub const BENCH_SECS: u32 = 4;
/// Each client's `--timeout` (a phase's deadline): a write that stalls waits this long.
const CLIENT_TIMEOUT: &str = "20s";

/// What the workload's steps, markers and files are called in its boot (its `Tag`'s naming:
/// `server`, `server-2`).
pub type Names<'a> = &'a dyn Fn(&str) -> String;

/// The name of write `j`'s step (1-based).
pub fn write_step_name(tag: Names<'_>, j: usize) -> String {
    tag(&format!("write-{j}"))
}

/// The name of ack-less write `j`'s step (1-based).
pub fn ackless_step_name(tag: Names<'_>, j: usize) -> String {
    tag(&format!("ackless-{j}"))
}

/// The name of the bench step.
pub fn bench_step_name(tag: Names<'_>) -> String {
    tag("bench-bw")
}

/// `tc` on the traffic link `dev`, as one step.
fn tc(dev: &str, name: String, args: &[&str]) -> Step {
    let mut s = Step::new(name, &[]);
    s.argv = std::iter::once("tc")
        .chain(args.iter().map(|a| if *a == "DEV" { dev } else { a }))
        .map(str::to_owned)
        .collect();
    s.timeout_s = 20.0;
    s
}

/// `tc qdisc` on the traffic link: `loss` percent dropped, or (`None`) the loss taken away.
fn netem(dev: &str, tag: Names<'_>, loss: Option<u8>) -> Step {
    match loss {
        Some(pct) => tc(
            dev,
            tag("netem-loss"),
            &[
                "qdisc",
                "replace",
                "dev",
                "DEV",
                "root",
                "netem",
                "loss",
                &format!("{pct}%"),
            ],
        ),
        None => tc(
            dev,
            tag("netem-off"),
            &["qdisc", "del", "dev", "DEV", "root"],
        ),
    }
}

/// What the workload is made of: its boot's names, the traffic link, the loss, our client's
/// argv (to the server), our server's step (made `--serve` here) and the marker it sets once
/// started.
pub struct Parts<'a> {
    pub tag: Names<'a>,
    pub dev: String,
    pub loss: u8,
    pub client: Vec<String>,
    pub server: Step,
    pub started: String,
}

impl std::fmt::Debug for Parts<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Parts")
            .field("dev", &self.dev)
            .field("loss", &self.loss)
            .field("client", &self.client)
            .field("started", &self.started)
            .finish_non_exhaustive()
    }
}

/// Guest A's steps (around the server) and guest B's (the clients); B's last step makes
/// `done` whatever happened, and A's server stops then.
pub fn steps(parts: Parts<'_>, done: &str) -> (Vec<Step>, Vec<Step>) {
    let Parts {
        tag,
        dev,
        loss,
        client: client_argv,
        mut server,
        started,
    } = parts;
    let (dev, loss) = (dev.as_str(), Some(loss));
    server.argv.push("--serve".to_owned());
    server.stop_when_file = Some(done.to_owned());
    let marker = |m: &str| tag(m);
    // The ack-less phase: a classful root (prio) whose filter drops every RoCE v2 packet A
    // sends, after B's lossy writes; the loss back in place of it after B's ack-less writes.
    let mut prio = tc(
        dev,
        tag("drop-acks-qdisc"),
        &[
            "qdisc", "replace", "dev", "DEV", "root", "handle", "1:", "prio",
        ],
    );
    prio.wait_for_file = Some(marker("lossy-writes-done"));
    let mut drop = tc(
        dev,
        tag("drop-acks"),
        &[
            "filter", "add", "dev", "DEV", "parent", "1:", "protocol", "ip", "prio", "1", "u32",
            "match", "ip", "protocol", "17", "0xff", "match", "ip", "dport", "4791", "0xffff",
            "action", "drop",
        ],
    );
    drop.create_file_when_done = Some(marker("acks-dropped"));
    let mut back = netem(dev, tag, loss);
    back.name = tag("acks-back");
    back.wait_for_file = Some(marker("ackless-done"));
    back.create_file_when_done = Some(marker("acks-back"));
    let mut off_a = netem(dev, tag, None);
    off_a.wait_for_file = Some(done.to_owned());
    let a = vec![netem(dev, tag, loss), server, prio, drop, back, off_a];

    let client = |name: String, extra: &[&str]| {
        let mut argv = client_argv.clone();
        // The client's use (`bench`) goes right after the program, before the server.
        if let Some((sub, _)) = extra.split_first().filter(|(s, _)| **s == BENCH) {
            let program = argv
                .iter()
                .position(|a| a.ends_with("rdma-client"))
                .unwrap_or(0);
            argv.insert(program + 1, (*sub).to_owned());
            // A bench writes its own pattern: the message is the write's option alone.
            if let Some(m) = argv.iter().position(|a| a == "--message") {
                argv.drain(m..(m + 2).min(argv.len()));
            }
        }
        let extra = extra.strip_prefix(&[BENCH]).unwrap_or(extra);
        argv.extend(
            ["--timeout", CLIENT_TIMEOUT, "--wait-for-server", "30s"]
                .iter()
                .chain(extra)
                .map(|s| (*s).to_owned()),
        );
        let mut s = Step::new(name, &[]);
        s.argv = argv;
        s.wait_for_file = Some(started.clone());
        // No retry: a write that fails or stalls must show, not be run again.
        s.timeout_s = 90.0;
        s.allow_failure = true;
        s
    };
    let mut b = vec![netem(dev, tag, loss)];
    b.extend((1..=WRITES).map(|j| client(write_step_name(tag, j), &[])));
    if let Some(last) = b.last_mut() {
        last.create_file_when_ended = Some(marker("lossy-writes-done"));
    }
    let first_ackless = b.len();
    b.extend((1..=ACKLESS).map(|j| client(ackless_step_name(tag, j), &[])));
    b[first_ackless].wait_for_file = Some(marker("acks-dropped"));
    if let Some(last) = b.last_mut() {
        last.create_file_when_ended = Some(marker("ackless-done"));
    }
    let secs = format!("{BENCH_SECS}s");
    let mut bench = client(
        bench_step_name(tag),
        &[
            BENCH,
            "--mode",
            "bw",
            "--size",
            "65536",
            "--duration",
            &secs,
        ],
    );
    bench.wait_for_file = Some(marker("acks-back"));
    b.push(bench);
    let mut off_b = netem(dev, tag, None);
    off_b.create_file_when_ended = Some(done.to_owned());
    b.push(off_b);
    (a, b)
}

/// What the lossy workload showed: its verdict lines, or what went wrong.
pub fn judge(tag: Names<'_>, t: &Transcript) -> Result<Vec<String>, Vec<String>> {
    let step = |name: &str| t.role(name);
    let mut problems = Vec::new();
    let mut slowest: f64 = 0.0;
    let names = (1..=WRITES)
        .map(|j| write_step_name(tag, j))
        .chain((1..=ACKLESS).map(|j| ackless_step_name(tag, j)));
    for name in names {
        match step(&name) {
            Some(s) if s.ok && judge::client_verified(s) => slowest = slowest.max(s.elapsed_s),
            Some(s) => problems.push(format!(
                "{name}: not verified ({}, {:.1} s): {}",
                s.exit,
                s.elapsed_s,
                crate::text::tail(&s.stderr, 600)
            )),
            None => problems.push(format!("{name}: did not run")),
        }
    }
    let bench = bench_step_name(tag);
    let row = step(&bench).and_then(|s| {
        s.client.iter().find_map(|e| match e {
            ClientEvent::BenchBw(r) if r.bytes == 65536 => Some(*r),
            _ => None,
        })
    });
    match (step(&bench), row) {
        (Some(s), Some(r)) if s.ok => {
            if problems.is_empty() {
                return Ok(vec![
                    format!(
                        "lossy link: {WRITES} of {WRITES} writes verified, then {ACKLESS} of {ACKLESS} with every ACK of the server dropped (the slowest in {slowest:.1} s)"
                    ),
                    format!(
                        "lossy link: bench bw 64 KiB for {BENCH_SECS} s: {} writes, {:.2} MB/s average",
                        r.iterations, r.bw_avg_mbs
                    ),
                ]);
            }
        }
        (s, _) => problems.push(format!(
            "{bench}: no bench_bw row of 64 KiB ({}): {}",
            s.map_or("did not run".to_owned(), |s| s.exit.to_string()),
            s.map(|s| crate::text::tail(&s.stderr, 600))
                .unwrap_or_default()
        )),
    }
    Err(problems)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{PlanResult, StepResult};
    use crate::scenario::exit::Speaks;
    use crate::scenario::transcript::Machine;

    fn verified() -> String {
        serde_json::to_string(&ClientEvent::Verified {
            verified: true,
            length: 17,
            crc32c: 1,
            text: "Hello RDMA Write!".into(),
            truncated: false,
        })
        .unwrap()
    }

    #[test]
    fn every_write_must_be_verified_and_the_bench_row_must_come() {
        let tag = |n: &str| n.to_owned();
        let ok = |name: String, stdout: String| StepResult {
            name,
            exit_code: Some(0),
            ok: true,
            stdout,
            ..StepResult::default()
        };
        let mut steps: Vec<StepResult> = (1..=WRITES)
            .map(|j| write_step_name(&tag, j))
            .chain((1..=ACKLESS).map(|j| ackless_step_name(&tag, j)))
            .map(|n| ok(n, verified()))
            .collect();
        let row = rdma_proto::events::bench::BwRow {
            schema: 1,
            bytes: 65536,
            iterations: 10,
            bw_peak_mbs: 1.0,
            bw_avg_mbs: 1.0,
            bw_peak_gbps: 1.0,
            bw_avg_gbps: 1.0,
            msg_rate_mpps: 1.0,
        };
        let bench = serde_json::to_string(&ClientEvent::BenchBw(row)).unwrap();
        steps.push(ok(bench_step_name(&tag), bench));
        let t = |steps: &[StepResult]| {
            let r = PlanResult {
                steps: steps.to_vec(),
                ..PlanResult::default()
            };
            Transcript::build([(Machine::default(), Ok(r))], &|_: &str| Speaks::Client)
        };
        assert!(judge(&tag, &t(&steps)).is_ok());
        // One write whose verdict never came: the judge fails, naming it.
        let mut lacking = steps.clone();
        lacking[3].stdout.clear();
        let e = judge(&tag, &t(&lacking)).unwrap_err();
        assert!(e[0].starts_with("write-4: not verified"), "{e:?}");
        // No bench row.
        let mut no_row = steps;
        no_row.pop();
        let e = judge(&tag, &t(&no_row)).unwrap_err();
        assert!(e[0].contains("no bench_bw row"), "{e:?}");
    }
}
