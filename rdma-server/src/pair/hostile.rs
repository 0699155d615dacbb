//! The hostile matrix (`rdma-hostile`, which `cargo xtask hostile` runs against the live server
//! in the guests) against the real server session on the fake fabric: every case that needs
//! no real device, each judged by the matrix's own checks and its health probe (a fresh
//! connection still gets its banner). The session's cases run on the session alone, and after
//! each every session must have ended with nothing left exposed; what the accept loop decides
//! before a session starts (`--allow`, `--max-clients`, `--max-per-ip`:
//! [`THROUGH_THE_ACCEPT_LOOP`]) runs through the real accept loop (`run::accept_with`).
//!
//! The guests keep [`IN_THE_GUESTS`]: the bench lat sessions, which run on a device of their
//! own and not through the fabric's `WriteVerbs`.

use super::fabric::Fabric;
use super::{OnePort, TIMEOUT, TOKEN, context};
use crate::ports::Served;
use crate::session::{SessionCtx, serve};
use clap::{Parser as _, ValueEnum as _};
use rdma_hostile::{Case, Config, Verdict};
use rdma_proto::Gid;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The cases of the accept loop's admission, with the server's flags they need.
const THROUGH_THE_ACCEPT_LOOP: &[(Case, &[&str])] = &[
    (Case::Forbidden, &["--allow", "10.0.0.0/8"]),
    (Case::Busy, &["--max-clients", "3"]),
    (Case::PerIp, &["--max-per-ip", "2"]),
];

/// The cases the guests keep, and why.
const IN_THE_GUESTS: &[(Case, &str)] = &[
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

/// Issue 22: every case of the matrix runs here or is named in [`IN_THE_GUESTS`], and every
/// one that runs here passes against the real session.
#[test]
fn every_hostile_case_without_rdma_passes_against_the_real_session() {
    let started = Instant::now();
    let server = Server::start(true);
    let cfg = server.config();
    let guests: Vec<Case> = IN_THE_GUESTS.iter().map(|&(c, _)| c).collect();
    let admission: Vec<Case> = THROUGH_THE_ACCEPT_LOOP.iter().map(|&(c, _)| c).collect();
    let here: Vec<Case> = rdma_hostile::select(&[], &cfg)
        .expect("every case fits")
        .into_iter()
        .filter(|c| !guests.contains(c))
        .collect();
    for c in Case::value_variants() {
        let places = [&here, &admission, &guests].map(|p| p.contains(c));
        assert_eq!(
            places.iter().filter(|&&p| p).count(),
            1,
            "{}: runs on the session, through the accept loop or in the guests: one of them",
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
    assert_eq!(Verdict::failures(&verdicts), Vec::<String>::new());
    assert_eq!(verdicts.len(), 26, "the cases that run on the session");
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

/// The real accept loop ([`crate::run::accept_with`]) with `flags`, its sessions on a fake
/// fabric's port; stopped when dropped.
struct AcceptLoop {
    addr: SocketAddr,
    /// Its `--max-clients` and `--max-per-ip`, as the harness is told them.
    caps: (u32, u32),
    stop: Arc<rdma_app::wake::Stop>,
    thread: Option<JoinHandle<()>>,
}

impl AcceptLoop {
    /// Each session phase's deadline under the accept loop: the admission cases hold idle
    /// connections while they open the next.
    const TIMEOUT: Duration = Duration::from_secs(2);

    fn start(flags: &[&str]) -> Self {
        Self::start_as(flags, "accept-loop")
    }

    /// [`Self::start`], its thread named `thread`.
    fn start_as(flags: &[&str], thread: &str) -> Self {
        let fabric = Fabric::new();
        let port = Served::with(Arc::new(fabric.port(true)), Some(vec![port_gid()]));
        let mut ctx = context(Box::new(OnePort(Arc::new(port))), 64);
        let timeout = format!("{}ms", Self::TIMEOUT.as_millis());
        let argv = ["rdma-server", "--serve", "--timeout", &timeout];
        let args = crate::cli::Args::try_parse_from(argv.iter().chain(flags)).expect("the flags");
        ctx.timeout = args.timeout;
        let caps = (args.max_clients, args.max_per_ip);
        let l = TcpListener::bind("127.0.0.1:0").expect("a loopback listener");
        let addr = l.local_addr().expect("its address");
        let stop = Arc::new(rdma_app::wake::Stop::new().expect("a stop bell"));
        let thread = {
            let stop = Arc::clone(&stop);
            std::thread::Builder::new()
                .name(thread.to_owned())
                .spawn(move || {
                    if let Err(e) = crate::run::accept_with(args, ctx, &l, &stop) {
                        panic!("the accept loop failed: {e:#}");
                    }
                })
                .expect("a thread")
        };
        AcceptLoop {
            addr,
            caps,
            stop,
            thread: Some(thread),
        }
    }

    /// What the matrix knows of this server: the value of `case`'s flag, as the guests pass it.
    fn config(&self, case: Case) -> Arc<Config> {
        let mut cfg = Config {
            server_timeout: Self::TIMEOUT,
            token: Some(TOKEN.to_owned()),
            gid: port_gid().to_string(),
            rng_seed: 22,
            ..Config::for_tests(self.addr)
        };
        match case {
            Case::Forbidden => cfg.expect_forbidden = true,
            Case::Busy => cfg.max_clients = Some(self.caps.0),
            Case::PerIp => cfg.max_per_ip = Some(self.caps.1),
            _ => {}
        }
        Arc::new(cfg)
    }
}

impl Drop for AcceptLoop {
    fn drop(&mut self) {
        self.stop.request();
        // The loop stops its sessions, each within its deadline, before it returns.
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Issue 22: what the accept loop decides before a session starts, through the real accept
/// loop: `--allow`, `--max-clients`, `--max-per-ip`, each judged by the matrix.
#[test]
fn the_admission_cases_pass_through_the_real_accept_loop() {
    let started = Instant::now();
    for (i, &(case, flags)) in (0u64..).zip(THROUGH_THE_ACCEPT_LOOP) {
        let server = AcceptLoop::start(flags);
        let cfg = server.config(case);
        assert_eq!(
            rdma_hostile::select(&[], &cfg).map(|c| c.contains(&case)),
            Ok(true)
        );
        let v = rdma_hostile::run_case(&cfg, case, i);
        println!(
            "{} {}: {} ({:?})",
            if v.pass { "PASS" } else { "FAIL" },
            case.name(),
            v.seen,
            v.elapsed
        );
        assert!(v.pass, "{}: {}", case.name(), v.seen);
    }
    println!(
        "{} admission cases in {:?}",
        THROUGH_THE_ACCEPT_LOOP.len(),
        started.elapsed()
    );
}

/// ...and they have teeth: a harness that claims a --max-clients the server does not have
/// fails `busy`.
#[test]
fn busy_fails_against_a_server_with_more_room_than_claimed() {
    let server = AcceptLoop::start(&["--max-clients", "3"]);
    let cfg = Config {
        max_clients: Some(2),
        ..Arc::unwrap_or_clone(server.config(Case::Busy))
    };
    let v = rdma_hostile::run_case(&Arc::new(cfg), Case::Busy, 0);
    assert!(
        !v.pass && v.seen.contains("expected error `busy`"),
        "{}",
        v.seen
    );
}

/// An idle `--serve` server sleeps: its accept loop wakes for a client or a stop, not on a
/// tick (it polled every 20 ms, 50 wake-ups a second, for days).
#[test]
fn an_idle_accept_loop_sleeps_until_a_client_or_a_stop() {
    // Its own name: the other tests' accept loops run beside it.
    const THREAD: &str = "idle-accept";
    let mut al = AcceptLoop::start_as(&[], THREAD);
    let wait_for = rdma_app::testing::wait_for;
    wait_for("the accept loop's thread", &|| {
        rdma_app::testing::thread_switches(THREAD).is_some()
    });
    std::thread::sleep(Duration::from_millis(200));
    let idle = || {
        let before = rdma_app::testing::thread_switches(THREAD).expect("the accept loop's thread");
        std::thread::sleep(Duration::from_secs(1));
        rdma_app::testing::thread_switches(THREAD).expect("the accept loop's thread") - before
    };
    let woke = idle();
    assert!(
        woke <= 2,
        "an idle accept loop woke {woke} times in a second"
    );
    // A client still gets in (and is served) at once.
    let cfg = al.config(Case::Forbidden);
    let c = std::net::TcpStream::connect(al.addr).expect("a connection");
    let mut banner = String::new();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(&c), &mut banner).unwrap();
    assert!(banner.contains("\"banner\""), "{banner} ({cfg:?})");
    drop(c);
    std::thread::sleep(Duration::from_millis(200));
    let woke = idle();
    assert!(
        woke <= 2,
        "after a client, the idle accept loop woke {woke} times in a second"
    );
    // A stop wakes it: the loop ends without a client.
    al.stop.request();
    let thread = al.thread.take().expect("the thread");
    wait_for("the accept loop to stop", &|| thread.is_finished());
    thread.join().expect("the accept loop");
}
