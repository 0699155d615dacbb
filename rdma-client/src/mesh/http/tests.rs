//! Over 127.0.0.1 only: scrapes with a tiny client, and the ways a client can misbehave.

use super::*;
use crate::mesh::metrics::ResultLabel;
use crate::mesh::metrics::tests::{paths, report};

const SHORT: Duration = Duration::from_millis(400);

fn server(limits: Limits) -> MetricsServer {
    let m = MeshMetrics::new(&paths()).unwrap();
    m.record(&report("node2", ResultLabel::Ok)).unwrap();
    let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
    MetricsServer::bind(addr, Arc::new(m), limits).unwrap()
}

fn short() -> Limits {
    Limits {
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
            r#"rdma_mesh_probes_total{peer="node2",device="rxe0",rail="0",result="ok"} 1"#
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

/// Past `max_connections` at once, a client gets 503 at once; once the held ones pass their
/// deadline, scrapes are served again.
#[test]
fn connections_are_bounded() {
    let limits = Limits {
        max_connections: 2,
        ..short()
    };
    let srv = server(limits);
    let held: Vec<TcpStream> = (0..2)
        .map(|_| TcpStream::connect(srv.local_addr()).unwrap())
        .collect();
    std::thread::sleep(POLL * 3);
    // 503, or (where the request came after the answer) a reset: never served.
    let mut s = TcpStream::connect(srv.local_addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\n\r\n").unwrap();
    let mut out = Vec::new();
    let read = s.read_to_end(&mut out);
    let out = String::from_utf8_lossy(&out);
    assert!(
        out.starts_with("HTTP/1.1 503 Service Unavailable")
            || read.is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset),
        "{out}"
    );
    std::thread::sleep(SHORT + POLL * 4);
    assert_eq!(get(srv.local_addr(), "/metrics", "").0, "HTTP/1.1 200 OK");
    drop(held);
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
    let m = Arc::new(MeshMetrics::new(&paths()).unwrap());
    let e = MetricsServer::bind(srv.local_addr(), m, Limits::default()).unwrap_err();
    let e = e.to_string();
    assert!(
        e.contains(&srv.local_addr().to_string()) && e.contains("cannot listen"),
        "{e}"
    );
}
