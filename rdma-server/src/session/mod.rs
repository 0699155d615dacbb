//! One client's session: banner, hello, a fresh PD/MR/CQ/QP, accept, wait for the write, revoke
//! the client's access, verify, verdict. Every failure is logged and answered with an error line
//! where the socket allows; nothing a client does can take the server down.
//!
//! Secrets (rkey, buffer address, QPN) are only sent in the `accept`, after the hello passed
//! every check of the handshake state machine (version, token, length). Every line the client
//! sends, and every failed read, goes through that machine, which says what to answer.

mod bench;
mod cm;
mod connect;
mod ctx;
mod rounds;
mod steps;
mod write;

use crate::failure::Failure;
pub(crate) use ctx::SessionCtx;
#[cfg(test)]
pub(crate) use rounds::ROUND_OVERHEAD;
use steps::*;

use crate::output::Event;
use rdma_proto::framing::LineConn;
use rdma_proto::{ErrorCode, ErrorMsg, ServerEvent, ServerHandshake, ServerMessage};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Serves one connection to its end; never panics on client input, never returns an error.
pub fn serve(s: &SessionCtx, stream: TcpStream, peer: SocketAddr, id: u64) {
    if s.stranger_line() {
        s.out.emit(&Event::Connected {
            session: id,
            peer: peer.to_string().into(),
        });
    }
    let mut conn = LineConn::new(stream, rdma_proto::DEFAULT_MAX_LINE);
    let mut hs = ServerHandshake::new(s.policy.clone());
    let failure = match session(s, &mut conn, &mut hs, peer, id) {
        Ok(()) => return,
        Err(f) => f,
    };
    // A client whose session the stop ended gets told so.
    let failure = failure.told(s.stopping.load(Ordering::Acquire));
    // Before its hello is admitted a connection is anyone's: its line is rate-limited.
    if hs.hello().is_some() || s.stranger_line() {
        s.out.emit(&Event::Error {
            session: Some(id),
            peer: Some(peer.to_string().into()),
            code: failure.log_code().into(),
            message: failure.message.as_str().into(),
            fatal: false,
            exit_code: None,
        });
    }
    if failure.tell_peer {
        let line = ServerMessage::Error(ErrorMsg {
            code: failure.code,
            message: failure.message,
            supported: None,
        })
        .to_line();
        let _ = conn.send_line(&line, Instant::now() + Duration::from_secs(1));
    }
}

/// The human log line of a failed session. Its message may quote what the client sent: it is
/// escaped once more here ([`rdma_proto::printable`]), so that no failure, whatever built its
/// text, can forge a log line or drive the operator's terminal.
fn session(
    s: &SessionCtx,
    conn: &mut LineConn<TcpStream>,
    hs: &mut ServerHandshake,
    peer: SocketAddr,
    id: u64,
) -> Result<(), Failure> {
    let phase = s.timeout;
    conn.send_line(&hs.banner()?.to_line(), Instant::now() + phase)?;

    let hello = match next_event(conn, hs, Instant::now() + phase)? {
        ServerEvent::Hello(hello) => hello,
        other => return Err(out_of_order(&other)),
    };
    // Admitted: only now is the device touched (and the socket tuned: nothing a stranger's
    // connection needs; Nagle never held back the banner, the first segment).
    let _ = conn.get_ref().set_nodelay(true);
    // The port is the one that carries the address the client came in on, and its rules
    // bind the hello.
    let local_ip = conn.get_ref().local_addr().ok().map(|a| a.ip());
    let (served, why) = s.ports.serve(local_ip)?;
    let verbs = &*served.verbs;
    if let Some(why) = why {
        emit_port_chosen(s, id, &verbs.name(), &why);
    }
    hs.bind(served.binding(peer.ip()))?;
    // Rounds only while a kept slot is free, for this client's source too (held until the
    // session ends).
    let kept = if hello.rounds {
        s.kept.take(peer.ip())
    } else {
        None
    };
    if kept.is_none() {
        hs.decline_rounds();
    }
    if let Some(b) = &hello.bench {
        let local = verbs.device().ok_or_else(|| {
            Failure::new(ErrorCode::RdmaSetup, "bench sessions need an RDMA device")
        })?;
        return bench::session(s, local, conn, hs, id, &hello, b);
    }

    write::session(s, conn, hs, verbs, &hello, id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ports::{PortSource, Served};
    use std::io::{BufRead as _, BufReader, Write as _};
    use std::net::TcpListener;
    use std::sync::Arc;
    use std::sync::atomic::AtomicUsize;

    /// A port source that counts its calls and has no port to give (no RDMA in `cargo test`);
    /// shared, so that the test reads the count the session's context moved on.
    #[derive(Debug, Default)]
    struct CountingPorts(AtomicUsize);

    impl PortSource for Arc<CountingPorts> {
        fn serve(
            &self,
            _: Option<std::net::IpAddr>,
        ) -> Result<(Arc<Served>, Option<String>), Failure> {
            self.0.fetch_add(1, Ordering::AcqRel);
            Err(Failure::new(
                ErrorCode::RdmaSetup,
                "the fake has no RDMA port",
            ))
        }
    }

    fn ctx(ports: Arc<CountingPorts>) -> SessionCtx {
        crate::pair::context(Box::new(ports), 64)
    }

    /// One session over loopback TCP with `token` in the hello; returns the server's answer.
    fn one_session(s: &SessionCtx, token: Option<&str>) -> rdma_proto::ServerMessage {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::scope(|scope| {
            scope.spawn(|| {
                let (stream, peer) = l.accept().unwrap();
                serve(s, stream, peer, 1);
            });
            let stream = TcpStream::connect(addr).unwrap();
            stream
                .set_read_timeout(Some(Duration::from_secs(10)))
                .unwrap();
            let mut lines = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            lines.read_line(&mut line).unwrap();
            // Sent as it is, token or none: a stranger's client need not be ours.
            let hello = rdma_proto::ClientMessage::Hello(rdma_proto::Hello {
                endpoint: rdma_proto::QpEndpoint {
                    qpn: 7,
                    psn: 1,
                    gid: "::ffff:127.0.0.1".parse().unwrap(),
                    lid: 0,
                    mtu: 1024,
                },
                length: 2,
                notify: rdma_proto::Notify::Tcp,
                crc32c: None,
                token: token.map(str::to_owned),
                bench: None,
                cm: false,
                rounds: false,
            });
            (&stream).write_all(hello.to_line().as_bytes()).unwrap();
            line.clear();
            lines.read_line(&mut line).unwrap();
            rdma_proto::ServerMessage::parse(line.as_bytes()).unwrap()
        })
    }

    fn code(m: &rdma_proto::ServerMessage) -> ErrorCode {
        match m {
            rdma_proto::ServerMessage::Error(e) => e.code,
            other => panic!("expected an error, got {other:?}"),
        }
    }

    /// Issue 23, item 3: a connection whose hello is not admitted (a wrong token, none) costs
    /// no device work: the port is chosen only after the hello passed, once per session.
    #[test]
    fn no_device_work_before_the_hello_is_admitted() {
        let ports = Arc::new(CountingPorts::default());
        let s = ctx(Arc::clone(&ports));
        for token in [
            Some("wrong"),
            None,
            Some(&format!("{}!", crate::pair::TOKEN)[..]),
        ] {
            let answer = one_session(&s, token);
            assert_eq!(code(&answer), ErrorCode::Unauthorized, "{answer:?}");
        }
        assert_eq!(
            ports.0.load(Ordering::Acquire),
            0,
            "device work for a stranger"
        );
        let answer = one_session(&s, Some(crate::pair::TOKEN));
        assert_eq!(code(&answer), ErrorCode::RdmaSetup, "{answer:?}");
        assert_eq!(ports.0.load(Ordering::Acquire), 1);
    }

    /// Issue 23, item 3: the lines of connections not admitted are rate-limited (a flood of
    /// strangers cannot fill the log); an admitted session's lines are not.
    #[test]
    fn strangers_lines_are_rate_limited() {
        let s = ctx(Arc::new(CountingPorts::default()));
        let logged = (0..1000).filter(|_| s.stranger_line()).count();
        assert_eq!(logged, crate::admission::LOG_BURST as usize);
    }

    /// A client cannot forge a log line or send ANSI escapes through a failure's text: neither
    /// through what the protocol quotes (its `type`) nor through any message (issue 16, item 6).
    #[test]
    fn failure_lines_escape_what_the_client_sent() {
        let line = "[3] session failed (bad_json): x\n[9] verified: RDMA Write data landed\x1b[31m";
        let shown = crate::output::human::failed_line(3, "bad_json", line);
        assert!(!shown.chars().any(char::is_control), "{shown:?}");
        assert!(shown.contains(r"x\n[9] verified"), "{shown}");
        assert!(shown.contains(r"\u{1b}[31m"), "{shown}");
        let hostile = br#"{"type":"\n[9] verified\u001b[31m","v":1}"#;
        let Err(e) = rdma_proto::ClientMessage::parse(hostile) else {
            panic!("parsed a hostile type")
        };
        let f = Failure::from(e);
        let shown = crate::output::human::failed_line(3, f.log_code(), &f.message);
        assert!(!shown.chars().any(char::is_control), "{shown:?}");
        assert!(shown.contains(r"\n[9] verified\u{1b}[31m"), "{shown}");
    }
}
