//! `rdma-misbehave-client`: `rdma-client`'s own session steps ([`rdma_client::run`],
//! [`rdma_client::session`], [`rdma_client::bench`]), with one done wrong.

use crate::cm::SLOW_PING;
use crate::rewrite::{self, Rewriter};
use color_eyre::eyre::{Result, bail};
use rdma_client::bench;
use rdma_client::bench::hot::Link;
use rdma_client::cli::{self as client_cli, Task};
use rdma_client::output::Detail;
use rdma_client::output::Output;
use rdma_client::run::{Connected, WriteTask};
use rdma_core_rs::RemoteBuffer;
use std::time::{Duration, Instant};

/// What the client does wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ClientFault {
    /// Write with a corrupted rkey: the server's NIC must refuse it.
    WrongRkey,
    /// Write just past the end of the server's buffer.
    OutOfBounds,
    /// SIGKILL ourselves right after sending the hello.
    KillAfterHello,
    /// SIGKILL ourselves after the accept, with our QP in RTS.
    KillAfterAccept,
    /// SIGKILL ourselves after the write completed, before the verdict.
    KillAfterWrite,
    /// After the write the server is told about, keep RDMA-Writing other bytes into its buffer;
    /// exit 0 only if the server's verdict describes bytes we wrote, consistently.
    RewriteAfterImm,
    /// In a `bench --mode lat` session, wait a second before each ping: a peer that holds its
    /// bench slot by pinging just often enough (the server must end it at --bench-max-time).
    SlowPing,
    /// A `bench --mode lat` session kept for rounds: two verified rounds (the second on a fresh
    /// rkey), then a write into the second round's buffer after its verdict, which the server
    /// deregistered: the server's NIC must refuse it ([`stale_bench_round`]).
    StaleBenchRound,
    /// Through RDMA CM, present a nonce one bit off the server's: the server must reject the
    /// connection request (and go on serving).
    CmBadNonce,
    /// Through RDMA CM, flood the session's listener with wrong-nonce requests: the server
    /// must give the session up, naming the rejects, within its --timeout ([`crate::cm`]).
    CmFlood,
    /// Through RDMA CM, connect, then send a second request with the right nonce: it must be
    /// refused at once (nothing listens any more).
    CmTwice,
    /// A bench lat session through RDMA CM that connects late and pings slowly: the server
    /// must end it at --bench-max-time counted from its accept ([`crate::cm::late_bench`];
    /// give the server's --bench-max-time with --server-bench-max-time).
    CmLateBench,
    /// Through RDMA CM, the right nonce from our own address, but along a path naming a third
    /// host's GID as ours: the server must reject it ([`crate::cm::foreign_path`]).
    CmForeignPath,
}

/// The command line: the fault, then everything `rdma-client` takes (`--fault KIND SERVER
/// ...` for a write, `--fault KIND bench SERVER ...` for a bench session). The fault comes
/// first, so a subcommand may follow options here (the client's own command line refuses
/// that: a word after an option is its SERVER).
#[derive(Debug, clap::Parser)]
#[command(
    name = "rdma-misbehave-client",
    version,
    args_conflicts_with_subcommands = false
)]
pub struct MisbehaveArgs {
    /// What to do wrong.
    #[arg(long)]
    pub fault: ClientFault,
    /// For `cm-late-bench`: the server's --bench-max-time, which must bound the session from
    /// its accept (before or after the client's `bench`).
    #[arg(long, global = true, value_parser = rdma_app::parse_duration)]
    pub server_bench_max_time: Option<Duration>,
    #[command(flatten)]
    pub client: client_cli::Args,
}

/// Runs the client's task with the fault.
///
/// # Errors
/// As `rdma-client`'s, and the fault's own (a task it does not apply to).
pub fn run(args: MisbehaveArgs, out: &Output) -> Result<()> {
    let fault = args.fault;
    match (args.client.task()?, fault) {
        (Task::Bench(task), ClientFault::SlowPing) => slow_ping(&task, out),
        (Task::Bench(task), ClientFault::StaleBenchRound) => stale_bench_round(&task, out),
        (Task::Bench(task), ClientFault::CmLateBench) => {
            let Some(max) = args.server_bench_max_time else {
                bail!(
                    "--fault cm-late-bench needs --server-bench-max-time (the server's --bench-max-time)"
                );
            };
            crate::cm::late_bench(&task, out, max)
        }
        (Task::Write(task), f)
            if !matches!(
                f,
                ClientFault::SlowPing | ClientFault::CmLateBench | ClientFault::StaleBenchRound
            ) =>
        {
            write(&task, f, out)
        }
        (_, f) => bail!("--fault {f:?} applies to {}", applies_to(f)),
    }
}

fn applies_to(f: ClientFault) -> &'static str {
    match f {
        ClientFault::SlowPing | ClientFault::StaleBenchRound => "a `bench --mode lat` session",
        ClientFault::CmLateBench => "a `bench --mode lat` session through RDMA CM (--cm)",
        _ => "a plain write (no bench, fabric or mesh)",
    }
}

/// SIGKILLs the process, as a crash would.
fn die(at: &str) -> ! {
    eprintln!("misbehave: SIGKILL {at}");
    // SAFETY: kill(2) on our own pid with a valid signal number has no memory-safety
    // preconditions; SIGKILL ends the process here, as a crash would.
    unsafe {
        libc::kill(libc::getpid(), libc::SIGKILL);
    }
    unreachable!("SIGKILL returned")
}

/// `rdma-client SERVER`'s write ([`rdma_client::run::run`]), step by step, one step wrong.
fn write(task: &WriteTask, fault: ClientFault, out: &Output) -> Result<()> {
    let r = task.resolve()?;
    let local = &r.local;
    let w = r.write();
    let more = if fault == ClientFault::RewriteAfterImm {
        2 * rewrite::DEPTH as u32
    } else {
        0
    };
    let opened = w.open(local, &task.session, Some(out), more)?;
    let mut c = match fault {
        ClientFault::CmFlood => return crate::cm::flood(opened, local, task.session.timeout),
        ClientFault::CmTwice => return crate::cm::twice(opened, local),
        ClientFault::CmForeignPath => {
            return crate::cm::foreign_path(opened, local, task.session.timeout);
        }
        ClientFault::KillAfterHello | ClientFault::KillAfterAccept | ClientFault::CmBadNonce => {
            let (mut session, qp, resources) = opened.into_parts();
            let psn = session.hello(local, &qp)?;
            if fault == ClientFault::KillAfterHello {
                die("after the hello");
            }
            let accept = session.await_accept()?;
            let nonce = accept.cm.map(|offer| {
                let mut off = offer.nonce;
                if fault == ClientFault::CmBadNonce {
                    off[0] ^= 1;
                }
                off
            });
            let link = Detail::Link(local);
            let qp = session.connect_qp(local, qp, psn, &accept, nonce.as_ref(), &link)?;
            if fault == ClientFault::KillAfterAccept {
                die("after the accept");
            }
            Connected::new(session, qp, &accept, resources)
        }
        _ => opened.connect(local)?,
    };
    let remote = aim(fault, c.remote);
    let started = c.post(remote)?;
    let rewrites = match fault {
        ClientFault::RewriteAfterImm => Some(Rewriter::start(
            &c.resources.pd,
            &c.qp,
            c.resources.write.payload.len(),
            remote,
        )?),
        _ => None,
    };
    let micros = c.complete(started)?;
    if fault == ClientFault::KillAfterWrite {
        die("after the write");
    }
    match rewrites {
        Some(rewriter) => judge_rewrites(c, rewriter),
        None => c.finish(micros).map(|_| ()),
    }
}

/// Where the write goes: a corrupted rkey, or past the buffer's end (while still claiming it
/// fits); else the server's buffer.
fn aim(fault: ClientFault, mut remote: RemoteBuffer) -> RemoteBuffer {
    match fault {
        ClientFault::WrongRkey => remote.rkey ^= 0x00ff_ff00,
        ClientFault::OutOfBounds => remote.addr = remote.addr.wrapping_add(remote.len),
        _ => {}
    }
    remote
}

/// Lets the rewrites run out, then holds the server's verdict to what we wrote: any verdict
/// that describes bytes we wrote is right (see [`rewrite`]).
fn judge_rewrites(mut c: Connected<'_>, rewriter: Rewriter) -> Result<()> {
    c.session.written()?;
    let judged = c.session.result();
    let Some(verdict) = c.session.verdict().cloned() else {
        return judged.map(|_| ());
    };
    let w = c.resources.write;
    let log = rewriter.finish(&c.qp, &c.resources.cq, w.timeout);
    rewrite::check_verdict(w.payload, log, &verdict)?;
    c.emit_verified(&verdict);
    Ok(())
}

/// `rdma-client bench SERVER --mode lat`, its pings paced [`SLOW_PING`] apart.
fn slow_ping(task: &bench::BenchTask, out: &Output) -> Result<()> {
    let t_start = Instant::now();
    let r = task.resolve()?;
    let mut bench = r
        .measure(task)
        .connect(&r.local, &task.session, t_start, Some(out))?;
    {
        let (session, link, run) = bench.link();
        run.measure(session, &mut Paced(link))?;
    }
    bench.finish()
}

/// `rdma-client bench SERVER --mode lat`, asking for rounds: two verified rounds on one session,
/// the second on a buffer with a fresh rkey, then one write into that buffer after its verdict.
/// The server deregistered it before reading it (PROTOCOL.md §3.9), so the write must fail
/// with a remote access error: that error is this fault's expected end. Anything else (no
/// rounds granted, an rkey used twice, the write landing) is an error that says so.
fn stale_bench_round(task: &bench::BenchTask, out: &Output) -> Result<()> {
    let t_start = Instant::now();
    let r = task.resolve()?;
    let m = bench::Measure {
        rounds: true,
        stamps: false,
        ..r.measure(task)
    };
    let mut b = m.connect(&r.local, &task.session, t_start, Some(out))?;
    let mut rkeys = Vec::new();
    for round in 1..=2 {
        if round > 1 {
            b.again(task.session.timeout)?;
        }
        {
            let (session, mut link, run) = b.link();
            rkeys.push(link.remote.rkey);
            run.measure(session, &mut link)?;
        }
        b.verdict()?;
        if b.keep_alive().is_none() {
            bail!("the server granted no rounds: run it with --serve and a --keep-alive");
        }
    }
    if rkeys[0] == rkeys[1] {
        bail!(
            "the second round's buffer has the first round's rkey {:#x}",
            rkeys[0]
        );
    }
    let (_, mut link, _) = b.link();
    link.post(1, None, true, u64::from(u32::MAX))?;
    match link.poll(Instant::now() + task.session.timeout) {
        Ok(_) => bail!(
            "a write into the last round's buffer after its verdict landed: its rkey {:#x} outlived the round",
            rkeys[1]
        ),
        Err(e) => Err(e.into()),
    }
}

/// A [`Link`] whose pings go out [`SLOW_PING`] apart.
#[derive(Debug)]
struct Paced<L>(L);

impl<L: Link> Link for Paced<L> {
    type Error = L::Error;
    fn post(
        &mut self,
        size: usize,
        last: Option<u8>,
        signaled: bool,
        wr_id: u64,
    ) -> Result<(), L::Error> {
        std::thread::sleep(SLOW_PING);
        self.0.post(size, last, signaled, wr_id)
    }
    fn try_poll(&mut self) -> Result<Option<u64>, L::Error> {
        self.0.try_poll()
    }
    fn poll(&mut self, deadline: Instant) -> Result<u64, L::Error> {
        self.0.poll(deadline)
    }
    fn byte(&self, index: usize) -> u8 {
        self.0.byte(index)
    }
    fn post_stamp(&mut self, at: usize, wr_id: u64) -> Result<(), L::Error> {
        self.0.post_stamp(at, wr_id)
    }
    fn poll_done(&mut self, deadline: Instant) -> Result<bench::hot::Done, L::Error> {
        self.0.poll_done(deadline)
    }
    fn timeout(&self, what: &'static str, waited: Duration) -> L::Error {
        self.0.timeout(what, waited)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    #[test]
    fn the_client_command_line_comes_after_the_fault() {
        <MisbehaveArgs as clap::CommandFactory>::command().debug_assert();
        let a = MisbehaveArgs::try_parse_from([
            "rdma-misbehave-client",
            "--fault",
            "wrong-rkey",
            "10.0.0.1",
            "--json",
            "--message",
            "x",
        ])
        .unwrap();
        assert_eq!(a.fault, ClientFault::WrongRkey);
        assert!(a.client.json());
        assert!(matches!(a.client.task().unwrap(), Task::Write(_)));
        let a = MisbehaveArgs::try_parse_from([
            "rdma-misbehave-client",
            "--fault",
            "slow-ping",
            "bench",
            "10.0.0.1",
            "--mode",
            "lat",
            "--json",
            "--ib-dev",
            "rxe0",
        ])
        .unwrap();
        assert!(a.client.json());
        assert!(matches!(a.client.task().unwrap(), Task::Bench(ref b) if b.server == "10.0.0.1"));
        let a = MisbehaveArgs::try_parse_from([
            "rdma-misbehave-client",
            "--fault",
            "cm-late-bench",
            "bench",
            "--server-bench-max-time",
            "3s",
            "--cm",
            "10.0.0.1",
        ])
        .unwrap();
        assert_eq!(a.server_bench_max_time, Some(Duration::from_secs(3)));
        let e = MisbehaveArgs::try_parse_from(["rdma-misbehave-client", "10.0.0.1"]).unwrap_err();
        assert!(e.to_string().contains("--fault"), "{e}");
    }

    #[test]
    fn a_wrong_aim_is_wrong_where_it_should_be() {
        let r = RemoteBuffer {
            addr: 0x1000,
            rkey: 0x1234_5678,
            len: 64,
        };
        assert_eq!(aim(ClientFault::WrongRkey, r).rkey, 0x12cb_a978);
        assert_eq!(aim(ClientFault::WrongRkey, r).addr, r.addr);
        assert_eq!(aim(ClientFault::OutOfBounds, r).addr, 0x1040);
        assert_eq!(aim(ClientFault::KillAfterWrite, r), r);
    }
}
