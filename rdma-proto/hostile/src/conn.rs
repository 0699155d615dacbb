//! One TCP connection to the server: raw sends, and lines read through `rdma-proto`'s
//! [`LineConn`] (cap, deadline) and classified as [`Got`].

use crate::answer::{Answer, Got, check_answer, parse_server_line, secrets_in};
use rdma_proto::{FrameError, LineConn};
use std::io::{self, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// Lines from the server longer than this are a failure (no v1 message comes close).
const MAX_SERVER_LINE: usize = 64 * 1024;

/// What a case saw, on success, or what went wrong.
pub(crate) type CaseResult = Result<String, String>;

/// One TCP connection to the server with a line reader.
#[derive(Debug)]
pub(crate) struct Conn {
    line: LineConn<TcpStream>,
    /// Set once a valid hello was sent: from then on the server may reveal its buffer.
    pub secrets_allowed: bool,
}

/// Time left until `deadline`, at least 1 ms (a zero socket timeout means "block forever").
fn left(deadline: Instant) -> Duration {
    deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1))
}

impl Conn {
    pub fn open(server: SocketAddr, deadline: Instant) -> Result<Conn, String> {
        let stream = TcpStream::connect_timeout(&server, left(deadline))
            .map_err(|e| format!("cannot connect to {server}: {e}"))?;
        let _ = stream.set_nodelay(true);
        Ok(Conn {
            line: LineConn::new(stream, MAX_SERVER_LINE),
            secrets_allowed: false,
        })
    }

    /// The socket, for cases that write byte by byte or from another thread.
    pub fn stream(&mut self) -> &mut TcpStream {
        self.line.get_mut()
    }

    /// Sends `bytes` as they are (they need not be UTF-8, nor end in a newline).
    pub fn send(&mut self, bytes: &[u8], deadline: Instant) -> Result<(), String> {
        let stream = self.line.get_mut();
        stream
            .set_write_timeout(Some(left(deadline)))
            .and_then(|()| stream.write_all(bytes))
            .map_err(|e| format!("sending {} bytes failed: {e}", bytes.len()))
    }

    /// Reads one line before `deadline`; checks it for secrets while no valid hello was sent.
    pub fn recv(&mut self, deadline: Instant) -> Got {
        let got = match self.line.read_line(deadline) {
            Ok(bytes) => match parse_server_line(&bytes) {
                Ok(v) => Got::Line(v),
                Err(e) => Got::Bad(e),
            },
            Err(e) => classify(e),
        };
        if let Got::Line(v) = &got
            && !self.secrets_allowed
        {
            let leaked = secrets_in(v);
            if !leaked.is_empty() {
                return Got::Bad(format!(
                    "SECRET LEAK: a line sent before any valid hello carries {leaked:?}: {v}"
                ));
            }
        }
        got
    }

    /// Whether the server sent something (or closed) before `deadline`, without consuming it:
    /// lets a case keep writing while it waits, and then read a whole line with [`recv`].
    ///
    /// [`recv`]: Self::recv
    pub fn readable(&mut self, deadline: Instant) -> bool {
        if self.line.has_buffered() {
            return true;
        }
        let stream = self.line.get_ref();
        if stream.set_read_timeout(Some(left(deadline))).is_err() {
            return true; // let `recv` report the broken socket
        }
        match stream.peek(&mut [0u8; 1]) {
            Ok(_) => true,
            Err(e) if is_timeout(&e) || e.kind() == io::ErrorKind::Interrupted => false,
            Err(_) => true,
        }
    }

    /// The next thing must be a close (after an `error`, the sender closes).
    pub fn expect_closed(&mut self, deadline: Instant) -> Result<(), String> {
        match self.recv(deadline) {
            Got::Eof | Got::Reset => Ok(()),
            Got::Timeout => Err("the connection stayed open after the error line".to_owned()),
            other => Err(format!(
                "after the error line the server sent {}",
                other.describe()
            )),
        }
    }

    /// Reads the answer and checks it; after an expected error, also the close.
    pub fn expect(&mut self, want: &Answer, deadline: Instant, reply: Duration) -> CaseResult {
        let got = self.recv(deadline);
        let seen = check_answer(want, &got)?;
        if matches!(want, Answer::Error { .. }) {
            self.expect_closed(Instant::now() + reply)?;
            return Ok(format!("{seen}, then close"));
        }
        Ok(seen)
    }
}

/// What a framing error means for the case: a close, a reset, a timeout or a broken protocol.
fn classify(e: FrameError) -> Got {
    match e {
        FrameError::Closed => Got::Eof,
        FrameError::Timeout { .. } => Got::Timeout,
        FrameError::Truncated => {
            Got::Bad("the server closed in the middle of a line (no final newline)".to_owned())
        }
        FrameError::LineTooLong { max } => Got::Bad(format!(
            "the server sent more than {max} bytes without a newline"
        )),
        FrameError::Io(e)
            if matches!(
                e.kind(),
                io::ErrorKind::ConnectionReset | io::ErrorKind::ConnectionAborted
            ) =>
        {
            Got::Reset
        }
        other => Got::Bad(format!("reading from the server: {other}")),
    }
}

pub(crate) fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// A server that writes `bytes` on the first connection, then closes.
    fn serve_once(bytes: &'static [u8]) -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            s.write_all(bytes).unwrap();
            std::thread::sleep(Duration::from_millis(50));
            drop(s);
        });
        addr
    }

    fn conn(addr: SocketAddr) -> Conn {
        Conn::open(addr, Instant::now() + Duration::from_secs(5)).unwrap()
    }

    #[test]
    fn lines_closes_and_broken_framing_are_told_apart() {
        let soon = || Instant::now() + Duration::from_secs(5);
        let mut c = conn(serve_once(b"\r\n{\"type\":\"banner\",\"v\":1}\r\n"));
        assert!(matches!(c.recv(soon()), Got::Line(v) if v["type"] == "banner"));
        assert_eq!(c.recv(soon()), Got::Eof);

        let mut c = conn(serve_once(b"{\"type\":\"ban"));
        assert!(matches!(c.recv(soon()), Got::Bad(s) if s.contains("middle of a line")));

        let mut c = conn(serve_once(b"{\"type\":\"error\",\"v\":1,\"rkey\":5}\n"));
        assert!(matches!(c.recv(soon()), Got::Bad(s) if s.contains("SECRET LEAK")));

        let mut c = conn(serve_once(b"not json\n"));
        assert!(matches!(c.recv(soon()), Got::Bad(s) if s.contains("not JSON")));
    }

    #[test]
    fn an_overlong_line_and_silence_are_reported() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let _ = s.write_all(&vec![b'x'; MAX_SERVER_LINE + 10]);
            std::thread::sleep(Duration::from_secs(2));
        });
        let mut c = conn(addr);
        assert!(
            matches!(c.recv(Instant::now() + Duration::from_secs(5)), Got::Bad(s) if s.contains("without a newline"))
        );

        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || {
            let (s, _) = l.accept().unwrap();
            std::thread::sleep(Duration::from_secs(2));
            drop(s);
        });
        let mut c = conn(addr);
        let t = Instant::now();
        assert!(!c.readable(Instant::now() + Duration::from_millis(100)));
        assert_eq!(
            c.recv(Instant::now() + Duration::from_millis(200)),
            Got::Timeout
        );
        assert!(t.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn readable_does_not_consume_the_line() {
        let mut c = conn(serve_once(b"{\"type\":\"banner\",\"v\":1}\n"));
        assert!(c.readable(Instant::now() + Duration::from_secs(5)));
        assert!(matches!(
            c.recv(Instant::now() + Duration::from_secs(5)),
            Got::Line(_)
        ));
    }
}
