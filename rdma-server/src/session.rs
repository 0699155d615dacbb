//! One client's session: banner, hello, a fresh PD/MR/CQ/QP, accept, wait for the write, verify,
//! verdict. Every failure is logged and answered with an error line where the socket allows;
//! nothing a client does can take the server down.
//!
//! Secrets (rkey, buffer address, QPN) are only sent in the `accept`, after the hello passed
//! every check of the handshake state machine (version, token, length).

use crate::cli::Fault;
use crate::output::Event;
use crate::run::Shared;
use rdma_core_rs::{
    Access, Completion, ErrorKind, Mtu, QpCaps, RemoteQp, RtrParams, RtsParams, WcOpcode,
};
use rdma_proto::framing::{FrameError, LineConn};
use rdma_proto::{
    ClientMessage, ErrorCode, ErrorMsg, Notify, Outcome, ProtoError, QpEndpoint, ServerEvent,
    ServerHandshake, ServerMessage, ServerPolicy,
};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Work request id of the receive that catches the write-with-immediate.
const RECV_WR_ID: u64 = 0x5245_4356; // "RECV"
/// How often a session waiting for the write checks the socket and the stop flag.
const SLICE: Duration = Duration::from_millis(100);

/// Why a session ended without a verdict.
#[derive(Debug)]
struct Failure {
    code: ErrorCode,
    message: String,
    /// Whether an error line should (still) be sent to the client.
    tell_peer: bool,
    /// The client went away (closed or reset the connection): logged as `client_gone`, which
    /// is the client's doing, not a server fault.
    gone: bool,
}

impl Failure {
    fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            tell_peer: true,
            gone: false,
        }
    }

    /// The client closed or reset the connection; nobody is left to tell.
    fn gone(message: impl Into<String>) -> Self {
        Self {
            gone: true,
            ..Self::new(ErrorCode::Internal, message).silent()
        }
    }

    /// The code in the server's own log line.
    fn log_code(&self) -> &'static str {
        if self.gone {
            "client_gone"
        } else {
            self.code.as_str()
        }
    }

    fn silent(mut self) -> Self {
        self.tell_peer = false;
        self
    }
}

impl From<FrameError> for Failure {
    fn from(e: FrameError) -> Self {
        let code = match e {
            FrameError::Timeout { .. } => ErrorCode::Timeout,
            FrameError::LineTooLong { .. } => ErrorCode::LineTooLong,
            _ => ErrorCode::Internal,
        };
        if matches!(
            e,
            FrameError::Closed | FrameError::Truncated | FrameError::Io(_)
        ) {
            return Failure::gone(format!("connection: {e}"));
        }
        Failure {
            code,
            message: format!("connection: {e}"),
            tell_peer: true,
            gone: false,
        }
    }
}

impl From<ProtoError> for Failure {
    fn from(e: ProtoError) -> Self {
        let tell_peer = !matches!(e, ProtoError::Remote(_));
        Failure {
            code: e.code(),
            message: e.to_string(),
            tell_peer,
            gone: false,
        }
    }
}

/// Serves one connection to its end; never panics on client input, never returns an error.
pub fn serve(s: &Shared, stream: TcpStream, peer: SocketAddr, id: u64) {
    s.out.emit(
        &Event::Connected {
            session: id,
            peer: peer.to_string(),
        },
        || format!("[{id}] client {peer} connected"),
    );
    let _ = stream.set_nodelay(true);
    let mut conn = LineConn::new(stream, rdma_proto::DEFAULT_MAX_LINE);
    let mut hs = ServerHandshake::new(ServerPolicy {
        max_len: s.args.buffer_size,
        token: s.token.clone(),
        program_version: env!("CARGO_PKG_VERSION").to_owned(),
        features: ServerPolicy::default_features(),
    });
    let failure = match session(s, &mut conn, &mut hs, id) {
        Ok(()) => return,
        Err(f) => f,
    };
    // A client that stopped because we are stopping gets told so.
    let failure = if s.stopping.load(Ordering::Acquire) && failure.code != ErrorCode::ShuttingDown {
        Failure::new(
            ErrorCode::ShuttingDown,
            format!("the server is shutting down ({})", failure.message),
        )
    } else {
        failure
    };
    s.out.emit(
        &Event::Error {
            session: Some(id),
            peer: Some(peer.to_string()),
            code: failure.log_code(),
            message: failure.message.clone(),
            fatal: false,
            exit_code: None,
        },
        || {
            format!(
                "[{id}] session failed ({}): {}; still serving",
                failure.log_code(),
                failure.message
            )
        },
    );
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

fn session(
    s: &Shared,
    conn: &mut LineConn<TcpStream>,
    hs: &mut ServerHandshake,
    id: u64,
) -> Result<(), Failure> {
    let phase = s.args.timeout;
    conn.send_line(&hs.banner()?.to_line(), Instant::now() + phase)?;

    let hello = match next_event(conn, hs, Instant::now() + phase)? {
        ServerEvent::Hello(hello) => hello,
        other => return Err(out_of_order(&other)),
    };

    // A fresh PD, MR (fresh rkey) and QP for this client only; all released when this returns.
    let rdma = |e: rdma_core_rs::Error| {
        Failure::new(
            ErrorCode::RdmaSetup,
            format!("server-side RDMA setup failed: {e}"),
        )
    };
    let (mr_access, qp_access) = if s.args.fault == Some(Fault::NoRemoteWrite) {
        (Access::LOCAL_WRITE, Access::NONE)
    } else {
        (
            Access::LOCAL_WRITE | Access::REMOTE_WRITE,
            Access::REMOTE_WRITE,
        )
    };
    let len = usize::try_from(s.args.buffer_size)
        .map_err(|_| Failure::new(ErrorCode::Internal, "buffer size does not fit in memory"))?;
    let pd = s.ctx.alloc_pd().map_err(rdma)?;
    let mr = pd.register(len, mr_access).map_err(rdma)?;
    let cq = s.ctx.create_cq(4, s.args.local.cq_mode).map_err(rdma)?;
    let qp = pd.create_rc_qp(&cq, QpCaps::default()).map_err(rdma)?;
    let qp = qp.to_init(s.port.num, qp_access).map_err(rdma)?;
    if hello.notify == Notify::Imm {
        // Posted before the client can know our QP: the write-with-immediate finds it waiting.
        qp.post_recv(RECV_WR_ID).map_err(rdma)?;
    }
    let remote_mtu = Mtu::from_bytes(hello.endpoint.mtu).unwrap_or(Mtu::M1024);
    let path_mtu = Mtu::min(s.port.active_mtu, remote_mtu);
    let psn = rdma_core_rs::random_psn().map_err(rdma)?;
    let qp = qp
        .to_rtr(&RtrParams {
            remote: RemoteQp {
                qpn: hello.endpoint.qpn,
                psn: hello.endpoint.psn,
                gid: rdma_core_rs::Gid(hello.endpoint.gid.0),
                lid: hello.endpoint.lid,
            },
            path_mtu,
            port: s.port.num,
            sgid_index: s.gid.index,
            link_layer: s.port.link_layer,
            ..RtrParams::default()
        })
        .map_err(rdma)?;
    let qp = qp
        .to_rts(&RtsParams {
            sq_psn: psn,
            ..RtsParams::default()
        })
        .map_err(rdma)?;
    let local = QpEndpoint {
        qpn: qp.qpn(),
        psn,
        gid: rdma_proto::Gid(s.gid.gid.0),
        lid: s.port.lid,
        mtu: s.port.active_mtu.bytes(),
    };
    let accept = hs.accept(local, mr.addr(), mr.rkey(), mr.len() as u64)?;
    conn.send_line(&accept.to_line(), Instant::now() + phase)?;
    let notify = hello.notify.as_str();
    s.out.emit(
        &Event::QpReady {
            session: id,
            local_qpn: qp.qpn(),
            remote_qpn: hello.endpoint.qpn,
            path_mtu: path_mtu.bytes(),
            notify,
            length: hello.length,
        },
        || {
            format!(
                "[{id}] QP {:#08x} <- client QP {:#08x}, path MTU {}, offering {} bytes (notify {notify})",
                qp.qpn(),
                hello.endpoint.qpn,
                path_mtu.bytes(),
                mr.len()
            )
        },
    );

    // Wait for the write: its immediate completion, or the client's `written` notice.
    let deadline = Instant::now() + phase;
    let (imm, written) = match hello.notify {
        Notify::Imm => {
            let c = wait_for_completion(s, conn, &cq, deadline)?;
            if c.opcode != WcOpcode::RecvRdmaWithImm {
                return Err(Failure::new(
                    ErrorCode::WriteFailed,
                    format!("expected an RDMA Write with immediate, got {:?}", c.opcode),
                ));
            }
            (c.imm, None)
        }
        Notify::Tcp => match next_event(conn, hs, deadline)? {
            ServerEvent::Written(w) => (None, Some(w)),
            other => return Err(out_of_order(&other)),
        },
    };
    s.out.emit(
        &Event::Written {
            session: id,
            length: hello.length,
            notify,
        },
        || {
            format!(
                "[{id}] write complete ({} bytes, notify {notify})",
                hello.length
            )
        },
    );

    // The NIC wrote these bytes; the CPU only reads them to prove it.
    let length = usize::try_from(hello.length)
        .unwrap_or(usize::MAX)
        .min(mr.len());
    let outcome: Outcome = hs.verify(&mr.as_slice()[..length], imm, written.as_ref());
    // Release this client's verbs objects before it hears the verdict: its rkey dies now, and
    // its slot under --max-clients is free by the time it (or the next client) connects again.
    drop(qp);
    drop(cq);
    drop(mr);
    drop(pd);
    if outcome.verified {
        s.verified.fetch_add(1, Ordering::AcqRel);
    }
    report_verdict(s, id, &outcome);
    let result = hs.result(outcome)?;
    conn.send_line(&result.to_line(), Instant::now() + phase)
        .map_err(|e| Failure::from(e).silent())?;
    Ok(())
}

/// Reads the client's next line and feeds it to the handshake. A line the state machine refuses
/// (malformed, wrong order, bad token, too long) is answered here with the machine's own error
/// line; an `error` from the client ends the session quietly.
fn next_event(
    conn: &mut LineConn<TcpStream>,
    hs: &mut ServerHandshake,
    deadline: Instant,
) -> Result<ServerEvent, Failure> {
    let line = conn.read_line(deadline)?;
    match hs.on_line(&line) {
        Ok(ServerEvent::PeerError(e)) => Err(peer_gave_up(&e)),
        Ok(event) => Ok(event),
        Err(e) => {
            let msg = hs.fail(&e);
            let _ = conn.send_line(&msg.to_line(), Instant::now() + Duration::from_secs(1));
            Err(Failure::from(e).silent())
        }
    }
}

/// An event the state machine accepted but this point of the session does not expect (the
/// machine refuses wrong orders itself, so this is a server bug, reported as such).
fn out_of_order(event: &ServerEvent) -> Failure {
    let what = match event {
        ServerEvent::Hello(_) => "hello",
        ServerEvent::Written(_) => "written",
        ServerEvent::PeerError(_) => "error",
    };
    Failure::new(
        ErrorCode::Internal,
        format!("`{what}` accepted by the handshake where the server did not expect it"),
    )
}

/// Waits for the receive completion of a write-with-immediate, in slices, so that a client that
/// vanished, an error line it sent, or a server shutdown end the wait early.
fn wait_for_completion(
    s: &Shared,
    conn: &mut LineConn<TcpStream>,
    cq: &rdma_core_rs::CompletionQueue,
    deadline: Instant,
) -> Result<Completion, Failure> {
    loop {
        let now = Instant::now();
        if now >= deadline {
            return Err(Failure::new(
                ErrorCode::Timeout,
                format!(
                    "no RDMA Write arrived within {:?}; the client may have failed its write",
                    s.args.timeout
                ),
            ));
        }
        match cq.poll((now + SLICE).min(deadline)) {
            Ok(c) => return Ok(c),
            Err(e) if e.kind() == ErrorKind::Timeout => {}
            Err(e) => {
                return Err(Failure::new(
                    ErrorCode::WriteFailed,
                    format!("the client's write did not land: {e}"),
                ));
            }
        }
        if s.stopping.load(Ordering::Acquire) {
            return Err(Failure::new(
                ErrorCode::ShuttingDown,
                "the server is shutting down",
            ));
        }
        if let Some(f) = peer_state(conn) {
            return Err(f);
        }
    }
}

/// Looks (without blocking) whether the client closed the connection or sent an error line.
fn peer_state(conn: &mut LineConn<TcpStream>) -> Option<Failure> {
    let peeked = if conn.has_buffered() {
        // A line that arrived together with an earlier one is already in our buffer.
        Ok(1)
    } else {
        let sock = conn.get_ref();
        if sock.set_nonblocking(true).is_err() {
            return None;
        }
        let mut byte = [0u8; 1];
        let peeked = sock.peek(&mut byte);
        let _ = sock.set_nonblocking(false);
        peeked
    };
    match peeked {
        Ok(0) => Some(Failure::gone(
            "the client closed the connection before writing",
        )),
        Ok(_) => {
            // The client said something while it should be writing: most likely an error.
            let line = conn
                .read_line(Instant::now() + Duration::from_secs(1))
                .ok()?;
            match ClientMessage::parse(&line) {
                Ok(ClientMessage::Error(e)) => Some(peer_gave_up(&e)),
                Ok(other) => Some(Failure::new(
                    ErrorCode::UnexpectedMessage,
                    format!(
                        "`{}` while the server waits for the RDMA Write",
                        other.kind()
                    ),
                )),
                Err(e) => Some(Failure::from(e)),
            }
        }
        Err(_) => None,
    }
}

fn peer_gave_up(e: &ErrorMsg) -> Failure {
    Failure::new(
        e.code,
        format!(
            "the client gave up: {}: {}",
            e.code.as_str(),
            rdma_proto::printable(&e.message)
        ),
    )
    .silent()
}

fn report_verdict(s: &Shared, id: u64, outcome: &Outcome) {
    s.out.emit(
        &Event::Verified {
            session: id,
            verified: outcome.verified,
            length: outcome.length,
            crc32c: outcome.crc32c,
            text: &outcome.text,
            truncated: outcome.truncated,
            reason: outcome.reason.as_deref(),
        },
        || {
            if outcome.verified {
                format!(
                    "{}\n{}",
                    s.lang.received(&outcome.text),
                    s.lang.verified(outcome.length, outcome.crc32c)
                )
            } else {
                format!(
                    "[{id}] {}\n[{id}] verification FAILED: {}",
                    s.lang.received(&outcome.text),
                    outcome.reason.as_deref().unwrap_or("unknown reason")
                )
            }
        },
    );
}
