//! Line framing over real TCP sockets on 127.0.0.1 and over an in-memory stream.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may unwrap (clippy.toml covers only #[test] fns)

use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use rdma_proto::*;

fn pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (b, _) = l.accept().unwrap();
    (a, b)
}

fn after(ms: u64) -> Instant {
    Instant::now() + Duration::from_millis(ms)
}

#[test]
fn slow_loris_is_cut_at_the_deadline() {
    let (mut tx, rx) = pair();
    let stop = Arc::new(AtomicUsize::new(0));
    let stop2 = stop.clone();
    let writer = thread::spawn(move || {
        // One byte every 50 ms, never a newline, for at most 10 s.
        for _ in 0..200 {
            if stop2.load(Ordering::Relaxed) != 0 || tx.write_all(b"x").is_err() {
                break;
            }
            thread::sleep(Duration::from_millis(50));
        }
    });
    let mut conn = LineConn::new(rx, DEFAULT_MAX_LINE);
    let t0 = Instant::now();
    let r = conn.read_line(after(600));
    let took = t0.elapsed();
    stop.store(1, Ordering::Relaxed);
    let e = r.unwrap_err();
    assert!(matches!(e, FrameError::Timeout { .. }), "{e:?}");
    assert_eq!(e.code(), ErrorCode::Timeout);
    assert!(took >= Duration::from_millis(590), "{took:?}");
    assert!(
        took < Duration::from_millis(1500),
        "a trickling peer kept us for {took:?}"
    );
    writer.join().unwrap();
}

#[test]
fn silent_peer_times_out() {
    let (_tx, rx) = pair();
    let mut conn = LineConn::new(rx, DEFAULT_MAX_LINE);
    let t0 = Instant::now();
    assert!(matches!(
        conn.read_line(after(200)),
        Err(FrameError::Timeout { .. })
    ));
    assert!(t0.elapsed() < Duration::from_millis(1000));
    // A deadline in the past fails at once.
    assert!(matches!(
        conn.read_line(Instant::now()),
        Err(FrameError::Timeout { .. })
    ));
}

#[test]
fn ten_mib_without_newline_is_refused() {
    let (mut tx, rx) = pair();
    let writer = thread::spawn(move || {
        let chunk = vec![b'a'; 1 << 20];
        for _ in 0..10 {
            if tx.write_all(&chunk).is_err() {
                break;
            }
        }
    });
    let mut conn = LineConn::new(rx, DEFAULT_MAX_LINE);
    let t0 = Instant::now();
    let e = conn.read_line(after(5000)).unwrap_err();
    assert!(
        matches!(
            e,
            FrameError::LineTooLong {
                max: DEFAULT_MAX_LINE
            }
        ),
        "{e:?}"
    );
    assert_eq!(e.code(), ErrorCode::LineTooLong);
    assert!(t0.elapsed() < Duration::from_secs(3));
    drop(conn); // closes: the writer gets an error and stops
    writer.join().unwrap();
}

#[test]
fn crlf_blank_lines_and_pieces() {
    let (mut tx, rx) = pair();
    let writer = thread::spawn(move || {
        tx.write_all(b"\r\n\n   \n\t\r\n{\"a\":").unwrap();
        thread::sleep(Duration::from_millis(50));
        tx.write_all(b"1}\r\nsecond\nthird").unwrap();
        thread::sleep(Duration::from_millis(50));
        tx.write_all(b"\n").unwrap();
    });
    let mut conn = LineConn::new(rx, DEFAULT_MAX_LINE);
    assert_eq!(conn.read_line(after(2000)).unwrap(), b"{\"a\":1}");
    assert_eq!(conn.read_line(after(2000)).unwrap(), b"second");
    assert_eq!(conn.read_line(after(2000)).unwrap(), b"third");
    writer.join().unwrap();
    assert!(matches!(
        conn.read_line(after(2000)),
        Err(FrameError::Closed)
    ));
}

#[test]
fn eof_mid_line_is_truncated() {
    let (mut tx, rx) = pair();
    tx.write_all(b"{\"type\":\"hel").unwrap();
    drop(tx);
    let mut conn = LineConn::new(rx, DEFAULT_MAX_LINE);
    assert!(matches!(
        conn.read_line(after(2000)),
        Err(FrameError::Truncated)
    ));
}

#[test]
fn eof_after_blank_lines_is_closed() {
    let (mut tx, rx) = pair();
    tx.write_all(b"\n\r\n").unwrap();
    drop(tx);
    let mut conn = LineConn::new(rx, DEFAULT_MAX_LINE);
    assert!(matches!(
        conn.read_line(after(2000)),
        Err(FrameError::Closed)
    ));
}

#[test]
fn send_line_to_a_peer_that_never_reads_times_out() {
    let (tx, _rx) = pair();
    let mut conn = LineConn::new(tx, DEFAULT_MAX_LINE);
    let big = "x".repeat(64 << 20);
    let t0 = Instant::now();
    let e = conn.send_line(&big, after(400)).unwrap_err();
    assert!(matches!(e, FrameError::Timeout { .. }), "{e:?}");
    assert!(t0.elapsed() < Duration::from_secs(2));
}

/// A complete handshake over a real socket: server thread vs client, both driven by the sans-IO
/// machines through LineConn.
#[test]
fn handshake_over_tcp() {
    let payload: &[u8] = b"Hello RDMA Write!";
    let ep = |qpn| QpEndpoint {
        qpn,
        psn: 1,
        gid: "::ffff:127.0.0.1".parse().unwrap(),
        lid: 0,
        mtu: 1024,
    };
    for notify in [Notify::Imm, Notify::Tcp] {
        let (c, s) = pair();
        let server = thread::spawn(move || {
            let mut conn = LineConn::new(s, DEFAULT_MAX_LINE);
            let mut hs = ServerHandshake::new(ServerPolicy {
                buffer_size: 64,
                token: None,
                program_version: "0.1.0".into(),
                features: ServerPolicy::default_features(),
                bench_max_len: 0,
                keep_alive_ms: 0,
            });
            conn.send_line(&hs.banner().unwrap().to_line(), after(2000))
                .unwrap();
            let line = conn.read_line(after(2000)).unwrap();
            let ServerEvent::Hello(h) = hs.on_line(&line).unwrap() else {
                panic!()
            };
            let peer = conn.get_ref().peer_addr().unwrap().ip();
            hs.bind(GidBinding::Peer {
                peer,
                local: vec![h.endpoint.gid],
            })
            .unwrap();
            conn.send_line(
                &hs.accept(ep(2), 0x7f00_0000_0000, 9, 64).unwrap().to_line(),
                after(2000),
            )
            .unwrap();
            let imm = match h.notify {
                Notify::Tcp => {
                    let line = conn.read_line(after(2000)).unwrap();
                    hs.on_line(&line).unwrap();
                    None
                }
                Notify::Imm => Some(17),
            };
            let outcome = hs.verify(b"Hello RDMA Write!", imm, None);
            conn.send_line(&hs.result(outcome).unwrap().to_line(), after(2000))
                .unwrap();
            hs.state()
        });
        let mut conn = LineConn::new(c, DEFAULT_MAX_LINE);
        let mut hs = ClientHandshake::new(ClientRequest::for_payload(payload, notify, None));
        // Over loopback: the server's GID must be one of this host's (the one it accepts with).
        let at = conn.get_ref().peer_addr().unwrap().ip();
        hs.bind(GidBinding::on_port(Some(&[ep(2).gid]), at))
            .unwrap();
        hs.on_banner(ServerMessage::parse(&conn.read_line(after(2000)).unwrap()).unwrap())
            .unwrap();
        conn.send_line(&hs.hello(ep(1)).unwrap().to_line(), after(2000))
            .unwrap();
        let a = hs
            .on_accept(ServerMessage::parse(&conn.read_line(after(2000)).unwrap()).unwrap())
            .unwrap();
        assert_eq!(a.addr, 0x7f00_0000_0000);
        if let Some(w) = hs.written().unwrap() {
            conn.send_line(&w.to_line(), after(2000)).unwrap();
        }
        let o = hs
            .on_result(ServerMessage::parse(&conn.read_line(after(2000)).unwrap()).unwrap())
            .unwrap();
        assert_eq!(o.text, "Hello RDMA Write!");
        assert_eq!(server.join().unwrap(), ServerState::Done);
        assert_eq!(
            conn.get_ref().peer_addr().unwrap().ip().to_string(),
            "127.0.0.1"
        );
    }
}

// ------------------------------------------------------------ in memory

/// An in-memory stream: reads from `input` (then an endless filler, if any), counts bytes read,
/// records writes and the timeouts set.
struct Mem {
    input: Vec<u8>,
    pos: usize,
    filler: Option<u8>,
    read: Arc<AtomicUsize>,
    out: Vec<u8>,
    timeouts_set: std::cell::Cell<usize>,
}

impl Mem {
    fn new(input: &[u8], filler: Option<u8>) -> Self {
        Mem {
            input: input.to_vec(),
            pos: 0,
            filler,
            read: Arc::new(AtomicUsize::new(0)),
            out: Vec::new(),
            timeouts_set: std::cell::Cell::new(0),
        }
    }
}

impl Read for Mem {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = if self.pos < self.input.len() {
            let n = buf.len().min(self.input.len() - self.pos);
            buf[..n].copy_from_slice(&self.input[self.pos..self.pos + n]);
            self.pos += n;
            n
        } else if let Some(f) = self.filler {
            buf.fill(f);
            buf.len()
        } else {
            0
        };
        self.read.fetch_add(n, Ordering::Relaxed);
        Ok(n)
    }
}

impl Write for Mem {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        // Accept at most 3 bytes per call to exercise partial writes.
        let n = buf.len().min(3);
        self.out.extend_from_slice(&buf[..n]);
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Deadlined for Mem {
    fn set_timeouts(&self, remaining: Option<Duration>) -> io::Result<()> {
        assert!(
            remaining.is_some_and(|d| !d.is_zero()),
            "LineConn must always pass a positive timeout"
        );
        self.timeouts_set.set(self.timeouts_set.get() + 1);
        Ok(())
    }
}

#[test]
fn mem_endless_input_stops_at_the_cap() {
    let mem = Mem::new(b"", Some(b'a'));
    let counter = mem.read.clone();
    let mut conn = LineConn::new(mem, 1000);
    assert!(matches!(
        conn.read_line(after(5000)),
        Err(FrameError::LineTooLong { max: 1000 })
    ));
    let n = counter.load(Ordering::Relaxed);
    assert!(n <= 1000 + 8192, "read {n} bytes for a 1000-byte cap");
}

#[test]
fn mem_cap_is_exact() {
    // Exactly max bytes (plus CRLF) is fine; max+1 is not.
    let mut input = vec![b'x'; 10];
    input.extend_from_slice(b"\r\n");
    input.extend_from_slice(&[b'y'; 11]);
    input.push(b'\n');
    let mut conn = LineConn::new(Mem::new(&input, None), 10);
    assert_eq!(conn.read_line(after(1000)).unwrap(), vec![b'x'; 10]);
    assert!(matches!(
        conn.read_line(after(1000)),
        Err(FrameError::LineTooLong { max: 10 })
    ));
    // 10 bytes + a bare '\r' kept inside, then 'z': 11 bytes of content is too long.
    let mut conn = LineConn::new(Mem::new(b"xxxxxxxxxx\rz\n", None), 10);
    assert!(matches!(
        conn.read_line(after(1000)),
        Err(FrameError::LineTooLong { .. })
    ));
}

#[test]
fn mem_lines_and_partial_writes() {
    let mut conn = LineConn::new(Mem::new(b"\n\none\r\ntwo\n", None), 64);
    assert_eq!(conn.read_line(after(1000)).unwrap(), b"one");
    assert_eq!(conn.read_line(after(1000)).unwrap(), b"two");
    assert!(matches!(
        conn.read_line(after(1000)),
        Err(FrameError::Closed)
    ));
    let line = ClientMessage::Written(Written {
        length: 1,
        crc32c: 2,
    })
    .to_line();
    conn.send_line(&line, after(1000)).unwrap();
    assert_eq!(conn.get_ref().out, line.as_bytes());
    assert!(
        conn.get_ref().timeouts_set.get() >= line.len() / 3,
        "timeout must be re-armed per write"
    );
    let mut conn = LineConn::new(Mem::new(b"abc", None), 64);
    assert!(matches!(
        conn.read_line(after(1000)),
        Err(FrameError::Truncated)
    ));
}

#[test]
fn frame_error_messages() {
    let e = FrameError::LineTooLong { max: 65536 };
    assert!(e.to_string().contains("65536"));
    assert_eq!(e.to_error_msg().code, ErrorCode::LineTooLong);
    assert_eq!(FrameError::Closed.code(), ErrorCode::Internal);
}

#[test]
fn a_second_line_read_with_the_first_is_reported_as_buffered() {
    let (a, mut b) = pair();
    b.write_all(b"{\"type\":\"hello\"}\n{\"type\":\"error\"}\n")
        .unwrap();
    let mut conn = LineConn::new(a, DEFAULT_MAX_LINE);
    assert!(!conn.has_buffered());
    let first = conn.read_line(after(2000)).unwrap();
    assert_eq!(first, b"{\"type\":\"hello\"}");
    // Both lines arrived in one segment: the second now sits in the buffer, where a peek at
    // the socket would not see it.
    assert!(conn.has_buffered());
    assert_eq!(
        conn.read_line(after(2000)).unwrap(),
        b"{\"type\":\"error\"}"
    );
    assert!(!conn.has_buffered());
}

/// `peer_spoke` sees a line waiting (on the socket, or already in our buffer) and a closed
/// connection, without consuming either, and nothing while the peer is quiet.
#[test]
fn peer_spoke_sees_a_waiting_line_and_a_close_without_consuming_them() {
    let (mut server, client) = pair();
    let mut conn = LineConn::new(client, 1024);
    assert!(!conn.peer_spoke(), "a quiet peer said nothing");
    server.write_all(b"one\ntwo\n").unwrap();
    let waited = Instant::now();
    while !conn.peer_spoke() {
        assert!(
            waited.elapsed() < Duration::from_secs(5),
            "the line never showed"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(conn.peer_spoke(), "looking consumed nothing");
    assert_eq!(conn.read_line(after(1000)).unwrap(), b"one");
    // "two" came in the same read: it waits in our buffer, not on the socket.
    assert!(conn.peer_spoke());
    assert_eq!(conn.read_line(after(1000)).unwrap(), b"two");
    assert!(!conn.peer_spoke());
    drop(server);
    let waited = Instant::now();
    while !conn.peer_spoke() {
        assert!(
            waited.elapsed() < Duration::from_secs(5),
            "the close never showed"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}
