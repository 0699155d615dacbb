//! The hostile client against a fake server on 127.0.0.1 (`rdma-proto`'s reference state
//! machine, no RDMA): a correct server passes every case, and each kind of wrong server or
//! wrong expectation fails the case it should.

use super::args::Config;
use super::case::{Case, select};
use super::report::print_verdict;
use super::runner::{Verdict, run_case};
use rdma_proto::{
    DEFAULT_MAX_LINE, ErrorCode, ErrorMsg, FrameError, LineConn, QpEndpoint, ServerEvent,
    ServerHandshake, ServerMessage, ServerPolicy,
};
use std::io::Write as _;
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How the fake server behaves: the reference state machine, no RDMA.
#[derive(Debug, Clone, Copy)]
struct Fake {
    timeout: Duration,
    max_clients: usize,
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
            forbid: false,
            leak_in_banner: false,
            same_rkey: false,
            token: None,
        }
    }
}

fn refuse(mut s: TcpStream, code: ErrorCode) {
    let line = ServerMessage::Error(ErrorMsg {
        code,
        message: "refused by the fake".to_owned(),
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
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(s) = s else { continue };
            if f.forbid {
                refuse(s, ErrorCode::Forbidden);
                continue;
            }
            if active.load(Ordering::Acquire) >= f.max_clients {
                refuse(s, ErrorCode::Busy);
                continue;
            }
            active.fetch_add(1, Ordering::AcqRel);
            let (active, rkeys) = (Arc::clone(&active), Arc::clone(&rkeys));
            std::thread::spawn(move || {
                fake_session(s, f, &rkeys);
                active.fetch_sub(1, Ordering::AcqRel);
            });
        }
    });
    addr
}

fn fake_session(s: TcpStream, f: Fake, rkeys: &AtomicU32) {
    let soon = || Instant::now() + Duration::from_secs(1);
    let mut conn = LineConn::new(s, DEFAULT_MAX_LINE);
    let mut hs = ServerHandshake::new(ServerPolicy {
        buffer_size: 64,
        token: f.token.map(str::to_owned),
        program_version: "0".to_owned(),
        features: ServerPolicy::default_features(),
        bench_max_len: 8 << 20,
    });
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
        let reply = match hs.on_line(&line) {
            Ok(ServerEvent::Hello(_)) => {
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
                match hs.accept(ep, 0x7f00_dead_b000, rkey, 64) {
                    Ok(a) => a,
                    Err(e) => hs.fail(&e),
                }
            }
            Ok(ServerEvent::PeerError(_)) => return,
            Ok(ServerEvent::Written(_)) => ServerMessage::Error(ErrorMsg {
                code: ErrorCode::UnexpectedMessage,
                message: "`written` before `hello`".to_owned(),
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

fn config(server: SocketAddr, f: &Fake) -> Arc<Config> {
    Arc::new(Config {
        server_timeout: f.timeout,
        token: f.token.map(str::to_owned),
        max_clients: (f.max_clients < 64).then_some(f.max_clients as u32),
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

fn failed(vs: &[Verdict]) -> Vec<String> {
    vs.iter()
        .filter(|v| !v.pass)
        .map(|v| format!("{}: {}", v.case.name(), v.seen))
        .collect()
}

#[test]
fn a_correct_server_passes_every_case() {
    let vs = run_all(Fake::default());
    for v in &vs {
        print_verdict(v, false);
    }
    assert!(vs.len() >= 20, "{} cases", vs.len());
    assert_eq!(failed(&vs), Vec::<String>::new());
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
    ]
    .into_iter()
    .enumerate()
    {
        let v = run_case(&cfg, case, i as u64);
        assert!(v.pass, "{}: {}", case.name(), v.seen);
    }
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
