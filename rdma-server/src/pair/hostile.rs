//! The hostile matrix (`rdma-hostile`, which `cargo xtask hostile` runs against the live server
//! in the guests) against the real server session on the fake fabric: every case that needs
//! neither a real device nor the accept loop, each judged by the matrix's own checks and its
//! health probe (a fresh connection still gets its banner), and after each, every session
//! ended with nothing left exposed.
//!
//! The guests keep [`IN_THE_GUESTS`]: what the accept loop decides before a session starts
//! (`--allow`, `--max-clients`, `--max-per-ip`), and the bench lat sessions, which run on a
//! device of their own and not through the fabric's `WriteVerbs`.

use super::fabric::Fabric;
use super::{OnePort, TIMEOUT, TOKEN, context};
use crate::ports::Served;
use crate::session::{SessionCtx, serve};
use clap::ValueEnum as _;
use rdma_hostile::{Case, Config, Verdict};
use rdma_proto::Gid;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The cases the guests keep, and why.
const IN_THE_GUESTS: &[(Case, &str)] = &[
    (
        Case::Forbidden,
        "--allow is the accept loop's, before any session",
    ),
    (
        Case::Busy,
        "--max-clients is the accept loop's, before any session",
    ),
    (
        Case::PerIp,
        "--max-per-ip is the accept loop's, before any session",
    ),
    (
        Case::PinnedBudget,
        "it needs two bench lat sessions accepted, which run on a real device",
    ),
    (
        Case::BenchVanish,
        "it needs a bench lat session accepted, which runs on a real device",
    ),
];

/// How long the sessions of a case may take to end once it is over (each phase has
/// [`TIMEOUT`]).
const SETTLE: Duration = Duration::from_secs(5);

/// The GID of the fake port, which a hello from loopback must name.
fn port_gid() -> Gid {
    Gid::from(Ipv4Addr::LOCALHOST.to_ipv6_mapped())
}

/// The real session, on one port of a fake fabric, for every connection to `addr`, each on a
/// thread of its own (what the accept loop does once it admitted one).
struct Server {
    fabric: Arc<Fabric>,
    addr: SocketAddr,
    /// Sessions not ended yet.
    live: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    acceptor: Option<JoinHandle<()>>,
}

impl Server {
    /// A server of 64-byte buffers with [`TOKEN`], bench sessions up to 1 MiB, on a RoCE-like
    /// port (`bound`: it binds a hello's GID to its connection; else, as on InfiniBand, not).
    fn start(bound: bool) -> Self {
        let fabric = Fabric::new();
        let gids = bound.then(|| vec![port_gid()]);
        let port = Served::with(Arc::new(fabric.port(true)), gids);
        let mut ctx = context(Box::new(OnePort(Arc::new(port))), 64);
        ctx.policy.bench_max_len = 1 << 20;
        let ctx = Arc::new(ctx);
        let l = TcpListener::bind("127.0.0.1:0").expect("a loopback listener");
        let addr = l.local_addr().expect("its address");
        l.set_nonblocking(true).expect("a non-blocking listener");
        let live = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let acceptor = {
            let (live, stop) = (Arc::clone(&live), Arc::clone(&stop));
            std::thread::spawn(move || accept(&l, &ctx, &live, &stop))
        };
        Server {
            fabric,
            addr,
            live,
            stop,
            acceptor: Some(acceptor),
        }
    }

    /// What the matrix knows of this server.
    fn config(&self) -> Arc<Config> {
        Arc::new(Config {
            server_timeout: TIMEOUT,
            token: Some(TOKEN.to_owned()),
            gid: port_gid().to_string(),
            rng_seed: 22,
            ..Config::for_tests(self.addr)
        })
    }

    /// Waits for every session to end, then checks none left a region exposed.
    fn settled(&self) -> Result<(), String> {
        let until = Instant::now() + SETTLE;
        while self.live.load(Ordering::Acquire) > 0 {
            if Instant::now() >= until {
                return Err(format!(
                    "{} session(s) still running {SETTLE:?} after the case",
                    self.live.load(Ordering::Acquire)
                ));
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        match self.fabric.live_regions() {
            0 => Ok(()),
            n => Err(format!("{n} region(s) outlived their session")),
        }
    }

    /// Runs `case` (the `index`th), its health probe, then [`Self::settled`].
    fn run(&self, cfg: &Arc<Config>, case: Case, index: u64) -> Verdict {
        rdma_hostile::run_case_then(cfg, case, index, &|| self.settled())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(a) = self.acceptor.take() {
            let _ = a.join();
        }
    }
}

/// Accepts until `stop`, serving each connection with the real session on a thread of its own.
fn accept(l: &TcpListener, ctx: &Arc<SessionCtx>, live: &Arc<AtomicUsize>, stop: &AtomicBool) {
    let mut id = 0;
    while !stop.load(Ordering::Acquire) {
        let Ok((stream, peer)) = l.accept() else {
            std::thread::sleep(Duration::from_millis(1));
            continue;
        };
        let _ = stream.set_nonblocking(false);
        id += 1;
        live.fetch_add(1, Ordering::AcqRel);
        let (ctx, live) = (Arc::clone(ctx), Arc::clone(live));
        std::thread::spawn(move || {
            serve(&ctx, stream, peer, id);
            live.fetch_sub(1, Ordering::AcqRel);
        });
    }
}

fn failed(vs: &[Verdict]) -> Vec<String> {
    vs.iter()
        .filter(|v| !v.pass)
        .map(|v| format!("{}: {}", v.case.name(), v.seen))
        .collect()
}

/// Issue 22: every case of the matrix runs here or is named in [`IN_THE_GUESTS`], and every
/// one that runs here passes against the real session.
#[test]
fn every_hostile_case_without_rdma_passes_against_the_real_session() {
    let started = Instant::now();
    let server = Server::start(true);
    let cfg = server.config();
    let guests: Vec<Case> = IN_THE_GUESTS.iter().map(|&(c, _)| c).collect();
    let here: Vec<Case> = rdma_hostile::select(&[], &cfg)
        .expect("every case fits")
        .into_iter()
        .filter(|c| !guests.contains(c))
        .collect();
    for c in Case::value_variants() {
        assert!(
            here.contains(c) != guests.contains(c),
            "{}: runs here or in the guests, not both nor neither",
            c.name()
        );
    }
    let verdicts: Vec<Verdict> = (0u64..)
        .zip(&here)
        .map(|(i, &case)| server.run(&cfg, case, i))
        .collect();
    for v in &verdicts {
        println!(
            "{} {:<22} {:>5} ms  {}",
            if v.pass { "PASS" } else { "FAIL" },
            v.case.name(),
            v.elapsed.as_millis(),
            v.seen
        );
    }
    println!(
        "{} hostile cases in {:?}",
        verdicts.len(),
        started.elapsed()
    );
    assert_eq!(failed(&verdicts), Vec::<String>::new());
    assert_eq!(verdicts.len(), 25, "the cases that run here");
    assert!(
        server.fabric.exposed().len() >= 5,
        "the sessions that got an accept exposed their buffers on the fabric"
    );
}

/// The matrix has teeth here too: against a port that binds no GID (as on InfiniBand) the
/// victim-GID case fails, naming it.
#[test]
fn the_victim_gid_case_fails_where_nothing_binds_the_hello() {
    let server = Server::start(false);
    let v = server.run(&server.config(), Case::VictimGid, 0);
    assert!(!v.pass && v.seen.contains("victim GID"), "{}", v.seen);
}
