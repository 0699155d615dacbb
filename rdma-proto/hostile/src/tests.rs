//! The hostile client against a fake server on 127.0.0.1 (`rdma-proto`'s reference state
//! machine, no RDMA): a correct server passes every case, and each kind of wrong server or
//! wrong expectation fails the case it should.

use crate::case::{Case, select};
use crate::config::Config;
use crate::runner::{Verdict, run_case};
use rdma_proto::{
    DEFAULT_MAX_LINE, ErrorCode, ErrorMsg, FrameError, GidBinding, LineConn, QpEndpoint,
    ServerEvent, ServerHandshake, ServerMessage, ServerPolicy,
};
use std::io::Write as _;
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How the fake server behaves: the reference state machine, no RDMA.
#[derive(Debug, Clone, Copy)]
struct Fake {
    timeout: Duration,
    max_clients: usize,
    /// Connections at once from one address (all of ours are from 127.0.0.1).
    max_per_ip: usize,
    /// What bench sessions may pin together (a lat session twice its length).
    max_pinned: Option<u64>,
    /// Does not bind the hello's GID to the connection.
    unbound: bool,
    /// Offers a heap-like `addr` (the old, unrandomised registration).
    heap_addr: bool,
    forbid: bool,
    leak_in_banner: bool,
    same_rkey: bool,
    token: Option<&'static str>,
}

impl Default for Fake {
    fn default() -> Self {
        Self {
            timeout: Duration::from_millis(800),
            max_clients: 64,
            max_per_ip: 64,
            max_pinned: None,
            unbound: false,
            heap_addr: false,
            forbid: false,
            leak_in_banner: false,
            same_rkey: false,
            token: None,
        }
    }
}

fn refuse(mut s: TcpStream, code: ErrorCode, why: &str) {
    let line = ServerMessage::Error(ErrorMsg {
        code,
        message: format!("refused by the fake: {why}"),
        supported: None,
    })
    .to_line();
    let _ = s.write_all(line.as_bytes());
    let _ = s.shutdown(Shutdown::Both);
}

/// A multi-client fake of rdma-server's session flow on 127.0.0.1.
fn fake_server(f: Fake) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let active = Arc::new(AtomicUsize::new(0));
    let rkeys = Arc::new(AtomicU32::new(0x1000));
    let pinned = Arc::new(AtomicU64::new(0));
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(s) = s else { continue };
            if f.forbid {
                refuse(s, ErrorCode::Forbidden, "--allow");
                continue;
            }
            let live = active.load(Ordering::Acquire);
            if live >= f.max_clients {
                refuse(s, ErrorCode::Busy, "--max-clients");
                continue;
            }
            if live >= f.max_per_ip {
                refuse(s, ErrorCode::Busy, "--max-per-ip");
                continue;
            }
            active.fetch_add(1, Ordering::AcqRel);
            let (active, rkeys, pinned) =
                (Arc::clone(&active), Arc::clone(&rkeys), Arc::clone(&pinned));
            std::thread::spawn(move || {
                fake_session(s, f, &rkeys, &pinned);
                active.fetch_sub(1, Ordering::AcqRel);
            });
        }
    });
    addr
}

fn fake_session(s: TcpStream, f: Fake, rkeys: &AtomicU32, pinned: &AtomicU64) {
    let soon = || Instant::now() + Duration::from_secs(1);
    let peer = s.peer_addr().map(|a| a.ip());
    let mut conn = LineConn::new(s, DEFAULT_MAX_LINE);
    let mut hs = ServerHandshake::new(ServerPolicy {
        buffer_size: 64,
        token: f.token.map(str::to_owned),
        program_version: "0".to_owned(),
        features: ServerPolicy::default_features(),
        bench_max_len: 8 << 20,
        keep_alive_ms: 0,
    });
    let binding = match (f.unbound, peer) {
        // Our hellos come over loopback announcing Config::for_tests's GID: "this host's".
        (false, Ok(peer)) => GidBinding::Peer {
            peer,
            local: vec!["::ffff:10.0.0.2".parse().unwrap()],
        },
        _ => GidBinding::Unbound,
    };
    // Given back when the session ends, however it ends.
    let mut reserved: Vec<Reserved<'_>> = Vec::new();
    let mut banner = hs.banner().unwrap().to_line();
    if f.leak_in_banner {
        banner = banner.replacen("\"v\":1", "\"v\":1,\"rkey\":4660", 1);
    }
    if conn.send_line(&banner, soon()).is_err() {
        return;
    }
    loop {
        let line = match conn.read_line(Instant::now() + f.timeout) {
            Ok(l) => l,
            Err(e @ (FrameError::Timeout { .. } | FrameError::LineTooLong { .. })) => {
                let _ = conn.send_line(&ServerMessage::Error(e.to_error_msg()).to_line(), soon());
                return;
            }
            Err(_) => return,
        };
        let event = match hs.on_line(&line) {
            // As the real server: the hello is bound once admitted, by its port's rules.
            Ok(ServerEvent::Hello(h)) => hs.bind(binding.clone()).map(|()| ServerEvent::Hello(h)),
            other => other,
        };
        let reply = match event {
            Ok(ServerEvent::Hello(h))
                if h.bench.is_some()
                    && reserve(f, pinned, &h).map(|r| reserved.push(r)).is_none() =>
            {
                ServerMessage::Error(ErrorMsg {
                    code: ErrorCode::Busy,
                    message: "the fake's pinned-memory budget is in use".to_owned(),
                    supported: None,
                })
            }
            Ok(ServerEvent::Hello(h)) => {
                let rkey = if f.same_rkey {
                    0x1000
                } else {
                    rkeys.fetch_add(1, Ordering::AcqRel)
                };
                let ep = QpEndpoint {
                    qpn: 0x12,
                    psn: 0x5678,
                    gid: rdma_proto::Gid::from(Ipv4Addr::LOCALHOST.to_ipv6_mapped()),
                    lid: 0,
                    mtu: 1024,
                };
                let addr = if f.heap_addr {
                    0x7f00_dead_b000
                } else {
                    0x4a5e_00d1_7000_0000
                };
                let buf_len = if h.bench.is_some() { h.length } else { 64 };
                match hs.accept(ep, addr, rkey, buf_len) {
                    Ok(a) => a,
                    Err(e) => hs.fail(&e),
                }
            }
            Ok(ServerEvent::PeerError(_)) => return,
            Ok(ServerEvent::Written(_) | ServerEvent::Next(_)) => ServerMessage::Error(ErrorMsg {
                code: ErrorCode::UnexpectedMessage,
                message: "`written` or `next` before `hello`".to_owned(),
                supported: None,
            }),
            Err(e) => hs.fail(&e),
        };
        let last = matches!(reply, ServerMessage::Error(_));
        if conn.send_line(&reply.to_line(), soon()).is_err() || last {
            return;
        }
    }
}

/// A bench session's share of the fake's budget; `None` when it does not fit (no budget: a
/// share of nothing).
fn reserve<'a>(f: Fake, pinned: &'a AtomicU64, h: &rdma_proto::Hello) -> Option<Reserved<'a>> {
    let lat = h
        .bench
        .as_ref()
        .is_some_and(|b| b.mode() == rdma_proto::BenchMode::Lat);
    let need = if f.max_pinned.is_none() {
        0
    } else if lat {
        2 * h.length
    } else {
        h.length
    };
    let before = pinned.fetch_add(need, Ordering::AcqRel);
    if f.max_pinned.is_some_and(|budget| before + need > budget) {
        pinned.fetch_sub(need, Ordering::AcqRel);
        return None;
    }
    Some(Reserved(pinned, need))
}

/// Bytes of the fake's budget, given back when dropped.
struct Reserved<'a>(&'a AtomicU64, u64);

impl Drop for Reserved<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(self.1, Ordering::AcqRel);
    }
}

fn config(server: SocketAddr, f: &Fake) -> Arc<Config> {
    Arc::new(Config {
        server_timeout: f.timeout,
        token: f.token.map(str::to_owned),
        max_clients: (f.max_clients < 64).then_some(f.max_clients as u32),
        max_per_ip: (f.max_per_ip < 64).then_some(f.max_per_ip as u32),
        max_pinned: f.max_pinned,
        expect_forbidden: f.forbid,
        ..Config::for_tests(server)
    })
}

fn run_all(f: Fake) -> Vec<Verdict> {
    let cfg = config(fake_server(f), &f);
    let cases = select(&[], &cfg).unwrap();
    cases
        .iter()
        .enumerate()
        .map(|(i, &c)| run_case(&cfg, c, i as u64))
        .collect()
}

#[test]
fn a_correct_server_passes_every_case() {
    let vs = run_all(Fake::default());
    for v in &vs {
        println!(
            "{} {}: {}",
            if v.pass { "PASS" } else { "FAIL" },
            v.case.name(),
            v.seen
        );
    }
    assert!(vs.len() >= 20, "{} cases", vs.len());
    assert_eq!(Verdict::failures(&vs), Vec::<String>::new());
}

#[test]
fn token_and_busy_cases_pass_against_a_correct_server() {
    let f = Fake {
        token: Some("s3cret-token-0123"),
        max_clients: 3,
        ..Fake::default()
    };
    let cfg = config(fake_server(f), &f);
    for (i, case) in [
        Case::WrongToken,
        Case::MissingToken,
        Case::Busy,
        Case::DuplicateHello,
        Case::NextOutOfTurn,
    ]
    .into_iter()
    .enumerate()
    {
        let v = run_case(&cfg, case, i as u64);
        assert!(v.pass, "{}: {}", case.name(), v.seen);
    }
}

/// Issue 16: the cases that keep the server from being a weapon pass against a server that
/// binds GIDs, caps each source, budgets pinned memory and hides its heap...
#[test]
fn weapon_cases_pass_against_a_correct_server() {
    let f = Fake {
        max_per_ip: 3,
        max_pinned: Some(3 << 20),
        ..Fake::default()
    };
    let cfg = config(fake_server(f), &f);
    for (i, case) in [
        Case::VictimGid,
        Case::PerIp,
        Case::PinnedBudget,
        Case::FreshRkey,
    ]
    .into_iter()
    .enumerate()
    {
        let v = run_case(&cfg, case, i as u64);
        assert!(v.pass, "{}: {}", case.name(), v.seen);
    }
}

/// ...and each fails against a server without its defence.
#[test]
fn weapon_cases_fail_against_a_server_without_the_defence() {
    let unbound = Fake {
        unbound: true,
        ..Fake::default()
    };
    let v = run_case(&config(fake_server(unbound), &unbound), Case::VictimGid, 0);
    assert!(!v.pass && v.seen.contains("victim GID"), "{}", v.seen);

    let heap = Fake {
        heap_addr: true,
        ..Fake::default()
    };
    let v = run_case(&config(fake_server(heap), &heap), Case::FreshRkey, 0);
    assert!(!v.pass && v.seen.contains("heap"), "{}", v.seen);

    // The harness says --max-per-ip 3 and --max-pinned 3 MiB; the server has neither.
    let open = Fake::default();
    let cfg = Config {
        max_per_ip: Some(3),
        max_pinned: Some(3 << 20),
        ..Arc::try_unwrap(config(fake_server(open), &open)).unwrap()
    };
    let cfg = Arc::new(cfg);
    let v = run_case(&cfg, Case::PerIp, 0);
    assert!(
        !v.pass && v.seen.contains("expected error `busy`"),
        "{}",
        v.seen
    );
    let v = run_case(&cfg, Case::PinnedBudget, 1);
    assert!(!v.pass && v.seen.contains("second"), "{}", v.seen);
}

#[test]
fn forbidden_config_runs_only_forbidden_and_passes() {
    let f = Fake {
        forbid: true,
        ..Fake::default()
    };
    let vs = run_all(f);
    assert_eq!(vs.len(), 1);
    assert_eq!(vs[0].case, Case::Forbidden);
    assert!(vs[0].pass, "{}", vs[0].seen);
}

#[test]
fn a_leaking_banner_fails() {
    let f = Fake {
        leak_in_banner: true,
        ..Fake::default()
    };
    let cfg = config(fake_server(f), &f);
    let v = run_case(&cfg, Case::BadJson, 0);
    assert!(!v.pass);
    assert!(v.seen.contains("SECRET LEAK"), "{}", v.seen);
}

#[test]
fn a_reused_rkey_fails() {
    let f = Fake {
        same_rkey: true,
        ..Fake::default()
    };
    let cfg = config(fake_server(f), &f);
    let v = run_case(&cfg, Case::FreshRkey, 0);
    assert!(!v.pass);
    assert!(v.seen.contains("twice"), "{}", v.seen);
}

#[test]
fn wrong_expectations_fail() {
    let f = Fake::default();
    let addr = fake_server(f);
    // The harness claims a longer timeout than the server has: `timeout` comes too early.
    let mut cfg = Config {
        server_timeout: Duration::from_secs(3),
        ..Arc::try_unwrap(config(addr, &f)).unwrap()
    };
    let v = run_case(&Arc::new(cfg), Case::SlowLoris, 0);
    assert!(
        !v.pass && v.seen.contains("before the server's --timeout"),
        "{}",
        v.seen
    );
    // The harness claims a token is required: the banner says otherwise.
    cfg = Config {
        token: Some("x".to_owned()),
        ..Arc::try_unwrap(config(addr, &f)).unwrap()
    };
    let v = run_case(&Arc::new(cfg), Case::BadJson, 0);
    assert!(!v.pass && v.seen.contains("auth"), "{}", v.seen);
    // Busy with a wrong --max-clients: the extra connection is admitted.
    cfg = Config {
        max_clients: Some(2),
        ..Arc::try_unwrap(config(addr, &f)).unwrap()
    };
    let v = run_case(&Arc::new(cfg), Case::Busy, 0);
    assert!(
        !v.pass && v.seen.contains("expected error `busy`"),
        "{}",
        v.seen
    );
}

#[test]
fn nothing_listening_fails_the_case() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let f = Fake::default();
    let v = run_case(&config(port, &f), Case::BadJson, 0);
    assert!(!v.pass && v.seen.contains("cannot connect"), "{}", v.seen);
}
