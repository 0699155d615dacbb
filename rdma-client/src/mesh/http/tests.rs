//! Over 127.0.0.1 only: scrapes with a tiny client, and the ways a client can misbehave.

use super::*;
use crate::mesh::metrics::ResultLabel;
use crate::mesh::metrics::tests::{metrics, report};

const SHORT: Duration = Duration::from_millis(400);

fn server(limits: Limits) -> MetricsServer {
    let m = metrics();
    m.record(&report("node2", ResultLabel::Ok)).unwrap();
    let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
    MetricsServer::bind(addr, Arc::new(m), limits).unwrap()
}

fn short() -> Limits {
    Limits {
        head_timeout: SHORT,
        io_timeout: SHORT,
        ..Limits::default()
    }
}

/// Sends `request`, reads to the end (with a deadline): status line, headers, body.
fn ask(addr: SocketAddr, request: &[u8]) -> (String, String, String) {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(request).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    let (status, headers) = head.split_once("\r\n").unwrap_or((head, ""));
    (status.to_owned(), headers.to_owned(), body.to_owned())
}

fn get(addr: SocketAddr, path: &str, extra: &str) -> (String, String, String) {
    ask(
        addr,
        format!("GET {path} HTTP/1.1\r\nHost: x\r\n{extra}\r\n").as_bytes(),
    )
}

/// Every sample line is `name{labels} value` with a number for the value.
fn check_exposition(body: &str) {
    let mut samples = 0;
    for l in body.lines().filter(|l| !l.starts_with('#')) {
        let (series, value) = l.rsplit_once(' ').unwrap();
        assert!(value.parse::<f64>().is_ok(), "{l}");
        let name = series.split('{').next().unwrap();
        assert!(name.starts_with("rdma_mesh_"), "{l}");
        assert!(!series.contains('{') || series.ends_with('}'), "{l}");
        samples += 1;
    }
    assert!(samples > 20, "{body}");
}

#[test]
fn a_scrape_gets_the_text_format_or_openmetrics_as_asked() {
    let srv = server(Limits::default());
    let (status, headers, body) = get(srv.local_addr(), "/metrics", "");
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(
        headers.contains("Content-Type: text/plain; version=0.0.4"),
        "{headers}"
    );
    assert!(
        headers.contains(&format!("Content-Length: {}", body.len())),
        "{headers}"
    );
    check_exposition(&body);
    assert!(
        body.contains(
            r#"rdma_mesh_tor_probes_total{tor="tor1",peer_tor="tor1",scope="tor",device="rxe0",rail="0",outcome="ok"} 1"#
        )
    );

    // What Prometheus sends.
    let accept =
        "Accept: application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5\r\n";
    let (status, headers, body) = get(srv.local_addr(), "/metrics?x=1", accept);
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(
        headers.contains("Content-Type: application/openmetrics-text; version=1.0.0"),
        "{headers}"
    );
    assert!(body.ends_with("# EOF\n"), "{body}");
    check_exposition(&body);

    let (status, _, body) = ask(srv.local_addr(), b"HEAD /metrics HTTP/1.1\r\n\r\n");
    assert_eq!((status.as_str(), body.as_str()), ("HTTP/1.1 200 OK", ""));
    srv.stop();
}

#[test]
fn other_paths_are_404_and_other_methods_405() {
    let srv = server(Limits::default());
    let a = srv.local_addr();
    assert_eq!(get(a, "/", "").0, "HTTP/1.1 404 Not Found");
    assert_eq!(get(a, "/metrics/x", "").0, "HTTP/1.1 404 Not Found");
    let (status, headers, _) = ask(a, b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
    assert_eq!(status, "HTTP/1.1 405 Method Not Allowed");
    assert!(headers.contains("Allow: GET, HEAD"), "{headers}");
    assert_eq!(
        ask(a, b"DELETE /metrics HTTP/1.1\r\n\r\n").0,
        "HTTP/1.1 405 Method Not Allowed"
    );
    assert_eq!(ask(a, b"nonsense\r\n\r\n").0, "HTTP/1.1 400 Bad Request");
    assert_eq!(
        ask(a, b"GET /metrics SPDY/3\r\n\r\n").0,
        "HTTP/1.1 400 Bad Request"
    );
}

/// A client that connects and sends nothing holds one worker until its deadline, and the next
/// scrape is answered at once meanwhile; then the silent one is dropped.
#[test]
fn a_silent_client_does_not_block_the_next_scrape() {
    let srv = server(short());
    let mut silent = TcpStream::connect(srv.local_addr()).unwrap();
    std::thread::sleep(POLL * 2);
    let t = Instant::now();
    assert_eq!(get(srv.local_addr(), "/metrics", "").0, "HTTP/1.1 200 OK");
    assert!(t.elapsed() < SHORT, "{:?}", t.elapsed());
    silent
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut buf = [0u8; 64];
    // Closed by the server at its deadline, with nothing said.
    assert_eq!(silent.read(&mut buf).unwrap_or(0), 0);
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
}

#[test]
fn an_oversized_request_is_refused() {
    let srv = server(short());
    let mut req = b"GET /metrics HTTP/1.1\r\n".to_vec();
    req.extend(std::iter::repeat_n(b'a', 64 * 1024));
    let mut s = TcpStream::connect(srv.local_addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    // The server may close before all of it is sent: only its answer matters.
    let _ = s.write_all(&req);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let out = String::from_utf8_lossy(&out);
    assert!(out.starts_with("HTTP/1.1 431 "), "{out}");
    // A head just under the cap passes.
    let pad = format!(
        "X-Pad: {}\r\n",
        "a".repeat(Limits::default().max_request - 100)
    );
    assert_eq!(get(srv.local_addr(), "/metrics", &pad).0, "HTTP/1.1 200 OK");
}

/// Past the bounds, a newcomer takes the place of the oldest connection still waiting for its
/// request, which is closed with nothing said; the others are kept.
#[test]
fn a_newcomer_replaces_the_oldest_waiting_connection() {
    let limits = Limits {
        max_connections: 2,
        ..Limits::default()
    };
    let srv = server(limits);
    let addr = srv.local_addr();
    let mut held: Vec<TcpStream> = (0..2)
        .map(|_| {
            let s = connect_from([127, 0, 0, 2], addr);
            std::thread::sleep(POLL);
            s
        })
        .collect();
    assert_eq!(scrape_from([127, 0, 0, 1], addr), "HTTP/1.1 200 OK");
    let mut buf = [0u8; 64];
    held[0]
        .set_read_timeout(Some(Duration::from_secs(1)))
        .unwrap();
    assert_eq!(
        held[0].read(&mut buf).unwrap_or(1),
        0,
        "the oldest is closed"
    );
    // The younger one is still open, and served when it asks.
    held[1]
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    held[1].write_all(b"GET /metrics HTTP/1.1\r\n\r\n").unwrap();
    let mut out = Vec::new();
    held[1].read_to_end(&mut out).unwrap();
    assert!(out.starts_with(b"HTTP/1.1 200 OK"));
}

fn conn(id: u64, from: [u8; 4], age_ms: u64, waiting: bool) -> Conn {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    Conn {
        id,
        from: IpAddr::from(from),
        accepted: Instant::now() - Duration::from_millis(age_ms),
        waiting,
        stream: TcpStream::connect(listener.local_addr().unwrap()).unwrap(),
    }
}

/// The admission rule: an address at its bound replaces its own oldest waiting connection; a
/// full endpoint replaces the oldest waiting one of the address holding the most; `503` only
/// where every candidate is being answered.
#[test]
fn admission_replaces_waiting_connections_or_answers_503() {
    let l = Limits {
        max_connections: 4,
        max_per_source: 2,
        ..Limits::default()
    };
    let (a, b, c) = ([10, 0, 0, 1], [10, 0, 0, 2], [10, 0, 0, 3]);
    let ip = IpAddr::from;
    assert_eq!(admit(&[], ip(a), l), Admit::Serve);
    let two_of_a = [conn(1, a, 50, true), conn(2, a, 90, true)];
    assert_eq!(admit(&two_of_a, ip(a), l), Admit::Replace(2));
    assert_eq!(admit(&two_of_a, ip(b), l), Admit::Serve);
    // `a` at its bound, all being answered: 503 for `a`, not for `b`.
    let busy_a = [conn(1, a, 50, false), conn(2, a, 90, false)];
    assert_eq!(admit(&busy_a, ip(a), l), Admit::Busy);
    assert_eq!(admit(&busy_a, ip(b), l), Admit::Serve);
    // Full: `b` holds the most waiting, its oldest goes, though `c`'s one is older.
    let full = [
        conn(1, b, 10, true),
        conn(2, b, 20, true),
        conn(3, c, 900, true),
        conn(4, a, 5, false),
    ];
    assert_eq!(admit(&full, ip(a), l), Admit::Replace(2));
    // Full of connections being answered: 503.
    let answering = [
        conn(1, a, 10, false),
        conn(2, b, 20, false),
        conn(3, c, 30, false),
        conn(4, [10, 0, 0, 4], 40, false),
    ];
    assert_eq!(admit(&answering, ip([10, 0, 0, 5]), l), Admit::Busy);
}

/// `stop` returns while a silent client is connected (within its deadline), and the port is
/// closed after.
#[test]
fn it_stops_cleanly() {
    let srv = server(short());
    let addr = srv.local_addr();
    let _silent = TcpStream::connect(addr).unwrap();
    std::thread::sleep(POLL * 2);
    let t = Instant::now();
    srv.stop();
    assert!(t.elapsed() < SHORT + POLL * 4, "{:?}", t.elapsed());
    assert!(TcpStream::connect_timeout(&addr, Duration::from_secs(2)).is_err());
}

#[test]
fn a_port_in_use_is_named() {
    let srv = server(Limits::default());
    let m = Arc::new(metrics());
    let e = MetricsServer::bind(srv.local_addr(), m, Limits::default()).unwrap_err();
    let e = e.to_string();
    assert!(
        e.contains(&srv.local_addr().to_string()) && e.contains("cannot listen"),
        "{e}"
    );
}

/// A TCP connection to `to` from `from` (any 127.0.0.0/8 address is loopback on Linux): std
/// cannot bind a socket before it connects.
fn connect_from(from: [u8; 4], to: SocketAddr) -> TcpStream {
    use std::os::fd::FromRawFd as _;
    let SocketAddr::V4(to) = to else {
        panic!("{to} is not IPv4")
    };
    let sin = |ip: [u8; 4], port: u16| libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from_ne_bytes(ip),
        },
        sin_zero: [0; 8],
    };
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: a plain socket(2) call.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
    // SAFETY: `fd` is the socket just made, owned by nobody else; TcpStream closes it.
    let stream = unsafe { TcpStream::from_raw_fd(fd) };
    let local = sin(from, 0);
    // SAFETY: `local` is a valid sockaddr_in of `len` bytes.
    let rc = unsafe { libc::bind(fd, (&raw const local).cast(), len) };
    assert_eq!(rc, 0, "bind {from:?}: {}", std::io::Error::last_os_error());
    let remote = sin(to.ip().octets(), to.port());
    // SAFETY: as above.
    let rc = unsafe { libc::connect(fd, (&raw const remote).cast(), len) };
    assert_eq!(rc, 0, "connect {to}: {}", std::io::Error::last_os_error());
    stream
}

/// `get` of `/metrics` from address `from`: the status line.
fn scrape_from(from: [u8; 4], addr: SocketAddr) -> String {
    let mut s = connect_from(from, addr);
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut out = Vec::new();
    // A reset (a 503 before the request was read) reads as an error: what came is the answer.
    let _ = s.read_to_end(&mut out);
    let out = String::from_utf8_lossy(&out);
    out.lines().next().unwrap_or("(nothing)").to_owned()
}

/// With the default limits, idle sockets from one address (as many as the endpoint serves at
/// once, reopened before they time out) do not starve Prometheus or a liveness probe: a scrape
/// from another address, and one from the same address, are answered at once.
#[test]
fn idle_sockets_from_one_address_do_not_starve_scrapes() {
    let srv = server(Limits::default());
    let addr = srv.local_addr();
    let n = Limits::default().max_connections;
    let hog: Vec<TcpStream> = (0..n).map(|_| connect_from([127, 0, 0, 2], addr)).collect();
    std::thread::sleep(POLL * 3);
    for from in [[127, 0, 0, 1], [127, 0, 0, 3], [127, 0, 0, 2]] {
        let t = Instant::now();
        assert_eq!(scrape_from(from, addr), "HTTP/1.1 200 OK", "from {from:?}");
        assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    }
    // Idle sockets from a second address too: still served, from either and from a third.
    let hog2: Vec<TcpStream> = (0..n).map(|_| connect_from([127, 0, 0, 1], addr)).collect();
    std::thread::sleep(POLL * 3);
    for from in [[127, 0, 0, 4], [127, 0, 0, 1], [127, 0, 0, 2]] {
        let t = Instant::now();
        assert_eq!(scrape_from(from, addr), "HTTP/1.1 200 OK", "from {from:?}");
        assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    }
    drop((hog, hog2));
}

/// A client that sends no request is dropped at the head deadline (a scrape's request comes at
/// once), not after the whole answer's time.
#[test]
fn a_silent_client_is_dropped_at_the_head_deadline() {
    let srv = server(Limits::default());
    let t = Instant::now();
    let mut silent = TcpStream::connect(srv.local_addr()).unwrap();
    silent
        .set_read_timeout(Some(Duration::from_secs(15)))
        .unwrap();
    let mut buf = [0u8; 64];
    assert_eq!(silent.read(&mut buf).unwrap_or(0), 0);
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
}
