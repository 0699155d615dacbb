//! The RDMA CM workload's extra steps (`vm-smoke --rdma-cm --rdma-write --cm-bad-nonce`): the
//! test-only peer's CM misbehaviours (issue 23, items 1 and 4-6), each before the real client,
//! and rdma-core-rs's own CM example in guest A before the pair.

use super::lossy::Names;
use crate::plan::Step;
use crate::scenario::role::Invocation;
use rdma_proto::Exit;

/// What the steps are made of: the workload's names, our client's step (rdma-client's argv
/// with its marker and deadline), our binaries, guest A's address (`server`, as clients
/// write it; `guest_a`, bare) and the marker of the real client's end.
pub struct Parts<'a> {
    pub tag: Names<'a>,
    pub client: Step,
    pub server_bin: &'a str,
    pub misbehave_client: &'a str,
    pub cm_example: Option<&'a str>,
    pub server: String,
    pub guest_a: String,
    pub done: &'a str,
}

/// The step of a client that presents a wrong RDMA CM nonce (`--cm-bad-nonce`).
pub const BAD_NONCE: &str = "client-bad-nonce";
/// How the wrong nonce must end: rejected by the server's RDMA CM listener, an RDMA error.
pub const BAD_NONCE_EXIT: Exit = Exit::Rdma;
/// The step of a client that floods its session's RDMA CM listener (`--cm-bad-nonce`).
pub const CM_FLOOD: &str = "client-cm-flood";
/// The step of a client that sends a second RDMA CM request after its own (`--cm-bad-nonce`).
pub const CM_TWICE: &str = "client-cm-twice";
/// The step of rdma-core-rs's RDMA CM example in guest A (`--cm-bad-nonce`).
pub const CM_EXAMPLE: &str = "cm-example";
/// The step of a client whose RDMA CM request names a third host's GID (`--cm-bad-nonce`).
pub const CM_FOREIGN: &str = "client-cm-foreign-path";
/// The step of a bench client that connects through RDMA CM late and pings slowly, against
/// a server of its own (`--cm-bad-nonce`).
pub const CM_LATE: &str = "client-cm-late-bench";
/// That server's `--timeout` and `--bench-max-time`, and its port.
const LATE_TIMEOUT: &str = "2s";
const LATE_MAX_TIME: &str = "4s";
const LATE_PORT: u16 = 7499;

/// The late bench client's server (a `--serve` of its own, with short limits: issue 23, item
/// 6), until `done`, and the client.
fn late_bench(p: &Parts<'_>) -> (Step, Step) {
    let tag = p.tag;
    let listen = format!("[::]:{LATE_PORT}");
    let mut server = Step::new(tag("server-late-bench"), &[]);
    server.argv = Invocation::server(p.server_bin)
        .args([
            "--serve",
            "--json",
            "--timeout",
            LATE_TIMEOUT,
            "--bench-max-time",
            LATE_MAX_TIME,
            "--listen",
            &listen,
        ])
        .argv();
    server.background = true;
    server.create_file_when_started = Some(tag("late-bench-up"));
    server.stop_when_file = Some(p.done.to_owned());
    server.allow_failure = true;
    let to = crate::plan::host_port(&p.server, LATE_PORT);
    let mut client = Step::new(tag(CM_LATE), &[]);
    client.argv = Invocation::misbehaving(p.misbehave_client, "cm-late-bench")
        .args(["--server-bench-max-time", LATE_MAX_TIME])
        .subcommand("bench")
        .args([
            "--json",
            "--cm",
            "--mode",
            "lat",
            "--size",
            "4096",
            "--iters",
            "100000",
            // The marker says the server started, not that it listens yet: the client waits,
            // and is tried once.
            "--wait-for-server",
            "20s",
            &to,
        ])
        .argv();
    client.wait_for_file = Some(tag("late-bench-up"));
    client.timeout_s = 60.0;
    client.allow_failure = true;
    (server, client)
}

/// Our client's step made the test-only peer's, with `--fault fault`, named `name`.
fn misbehaving(p: &Parts<'_>, name: &str, fault: &str) -> Step {
    let mut step = p.client.clone();
    step.name = (p.tag)(name);
    // The test-only peer, with rdma-client's arguments; tried once: a peer that fails must
    // say so, not be tried again; the client itself waits for a server that does not listen
    // yet.
    step.argv = Invocation::misbehaving(p.misbehave_client, fault)
        .args(p.client.argv.iter().skip(1))
        .args(["--wait-for-server", "20s"])
        .argv();
    step.retries = 0;
    step
}

/// The workload's extra steps: guest A's before and after its server, guest B's before the real
/// client (whose end, `done`, stops the late bench's server).
pub fn steps(p: &Parts<'_>) -> ((Vec<Step>, Vec<Step>), Vec<Step>) {
    let (mut before, mut after, mut b) = (Vec::new(), Vec::new(), Vec::new());
    if let Some(example) = p.cm_example {
        // rdma-core-rs's own RDMA CM example, both ends in guest A, before our pair.
        let mut step = Step::new((p.tag)(CM_EXAMPLE), &[example, &p.guest_a]);
        step.timeout_s = 60.0;
        step.allow_failure = true;
        before.push(step);
    }
    let mut bad = misbehaving(p, BAD_NONCE, "cm-bad-nonce");
    // Rejected by the server's RDMA CM listener: an RDMA error, not a crash.
    bad.expect_exit = i32::from(BAD_NONCE_EXIT.code());
    b.push(bad);
    // Each exits 0 only where the server behaved; judged (with its output) by
    // `judge::rejected`, so a failure shows what it saw.
    for (name, fault) in [
        (CM_FLOOD, "cm-flood"),
        (CM_TWICE, "cm-twice"),
        (CM_FOREIGN, "cm-foreign-path"),
    ] {
        let mut step = misbehaving(p, name, fault);
        step.allow_failure = true;
        b.push(step);
    }
    let (server, client) = late_bench(p);
    after.push(server);
    b.push(client);
    ((before, after), b)
}
