//! One client's session: banner, hello, a fresh PD/MR/CQ/QP, accept, wait for the write, revoke
//! the client's access, verify, verdict. Every failure is logged and answered with an error line
//! where the socket allows; nothing a client does can take the server down.
//!
//! Secrets (rkey, buffer address, QPN) are only sent in the `accept`, after the hello passed
//! every check of the handshake state machine (version, token, length). Every line the client
//! sends, and every failed read, goes through that machine, which says what to answer.

use crate::budget::{self, PinBudget};
use crate::cli::Fault;
use crate::i18n::Lang;
use crate::output::{Event, Output, SessionNotify};
use rdma_core_rs::{
    Access, Completion, CqMode, ErrorKind, ExposedRegion, Init, LocalPort, OwnedBuffer, QpCaps,
    QueuePair, Rts, WcOpcode,
};
use rdma_proto::events::QpVia;
use rdma_proto::framing::{FrameError, LineConn};
use rdma_proto::{
    ErrorCode, ErrorMsg, GidBinding, Hello, Notify, Outcome, ProtoError, ServerEvent,
    ServerHandshake, ServerMessage, ServerPolicy,
};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Work request id of the receive that catches the write-with-immediate.
const RECV_WR_ID: u64 = 0x5245_4356; // "RECV"
/// How often a session waiting for the write checks the socket and the stop flag.
const SLICE: Duration = Duration::from_millis(100);

/// What every session needs from the server, shared by the session threads.
#[derive(Debug)]
pub struct SessionCtx {
    /// The device, its port and GID, opened once.
    pub local: LocalPort,
    /// What a hello may ask for (`buffer_size`: each session's buffer, `--buffer-size`) and what the banner says.
    pub policy: ServerPolicy,
    /// The deadline of each phase of a session.
    pub timeout: Duration,
    /// How the session's completion queue waits.
    pub cq_mode: CqMode,
    /// Deliberate misconfiguration, for tests.
    pub fault: Option<Fault>,
    pub out: Output,
    pub lang: Lang,
    /// Set when the server is stopping: sessions abort with `shutting_down`.
    pub stopping: AtomicBool,
    /// Writes verified so far.
    pub verified: AtomicU64,
    /// How long a bench session may hold its buffer (`--bench-max-time`).
    pub bench_max_time: Duration,
    /// What the live sessions may pin together (`--max-pinned`).
    pub pinned: PinBudget,
    /// The device flags: without `--gid-index`, each session uses the device, port and GID
    /// that carry the address its client came in on (`DeviceArgs::open_for`).
    pub device: rdma_app::device::DeviceArgs,
    /// On RoCE, this port's own GIDs: every hello's GID is bound to its TCP peer (a loopback
    /// peer to one of these). `None` on InfiniBand, where nothing can be bound.
    pub bind_gids: Option<Vec<rdma_proto::Gid>>,
}

impl SessionCtx {
    /// The local end of a session whose client came in on `local`: the port opened at start
    /// where the flags fix it or the address is loopback, else the one that carries `local`
    /// (and why).
    fn local_for(&self, local: IpAddr) -> Result<(LocalPort, Option<String>), Failure> {
        if !self.device.chooses_by(local) {
            return Ok((self.local.clone(), None));
        }
        self.device.open_for(local).map_err(|e| {
            Failure::new(
                ErrorCode::RdmaSetup,
                format!(
                    "the server has no RDMA port for the address this client reached it at: {e}"
                ),
            )
        })
    }

    /// What the hello of a connection from `peer` must announce (see [`GidBinding`]).
    pub fn binding(&self, peer: SocketAddr) -> GidBinding {
        match &self.bind_gids {
            Some(local) => GidBinding::Peer {
                peer: peer.ip(),
                local: local.clone(),
            },
            None => GidBinding::Unbound,
        }
    }
}

/// Why a session ended without a verdict.
#[derive(Debug)]
pub(crate) struct Failure {
    code: ErrorCode,
    message: String,
    /// Whether an error line should (still) be sent to the client.
    tell_peer: bool,
    /// The client went away (closed or reset the connection): logged as `client_gone`, which
    /// is the client's doing, not a server fault.
    gone: bool,
}

impl Failure {
    pub(crate) fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            tell_peer: true,
            gone: false,
        }
    }

    /// What went wrong, as logged and told.
    #[cfg(test)]
    pub(crate) fn message(&self) -> &str {
        &self.message
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

/// A failed read or send on the connection. Whatever could still be said to the client was
/// said by then (see [`read_failed`]), so this is only logged.
impl From<FrameError> for Failure {
    fn from(e: FrameError) -> Self {
        Failure {
            code: e.code(),
            message: format!("connection: {e}"),
            tell_peer: false,
            gone: e.peer_gone(),
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
pub fn serve(s: &SessionCtx, stream: TcpStream, peer: SocketAddr, id: u64) {
    s.out.emit(
        &Event::Connected {
            session: id,
            peer: peer.to_string().into(),
        },
        || format!("[{id}] client {peer} connected"),
    );
    let _ = stream.set_nodelay(true);
    let mut conn = LineConn::new(stream, rdma_proto::DEFAULT_MAX_LINE);
    let mut hs = ServerHandshake::new(s.policy.clone()).bind(s.binding(peer));
    let local_ip = conn.get_ref().local_addr().map(|a| a.ip());
    let chosen = local_ip
        .map_or_else(|_| Ok((s.local.clone(), None)), |ip| s.local_for(ip))
        .inspect(|(local, why)| {
            if let Some(why) = why {
                emit_port_chosen(s, id, local, why);
            }
        });
    let failure = match chosen.and_then(|(local, _)| session(s, &local, &mut conn, &mut hs, id)) {
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
            peer: Some(peer.to_string().into()),
            code: failure.log_code().into(),
            message: failure.message.as_str().into(),
            fatal: false,
            exit_code: None,
        },
        || failed_line(id, failure.log_code(), &failure.message),
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

/// The human log line of a failed session. Its message may quote what the client sent: it is
/// escaped once more here ([`rdma_proto::printable`]), so that no failure, whatever built its
/// text, can forge a log line or drive the operator's terminal.
fn failed_line(id: u64, code: &str, message: &str) -> String {
    format!(
        "[{id}] session failed ({code}): {}; still serving",
        rdma_proto::printable(message)
    )
}

fn session(
    s: &SessionCtx,
    local: &LocalPort,
    conn: &mut LineConn<TcpStream>,
    hs: &mut ServerHandshake,
    id: u64,
) -> Result<(), Failure> {
    let phase = s.timeout;
    conn.send_line(&hs.banner()?.to_line(), Instant::now() + phase)?;

    let hello = match next_event(conn, hs, Instant::now() + phase)? {
        ServerEvent::Hello(hello) => hello,
        other => return Err(out_of_order(&other)),
    };
    if let Some(b) = &hello.bench {
        return crate::bench::session(s, local, conn, hs, id, &hello, b);
    }

    // Before anything is reserved or registered: a write this device cannot take.
    if hello.notify == Notify::Imm && !local.ctx.transport().has_write_with_imm() {
        return Err(Failure::new(
            ErrorCode::InvalidField,
            format!(
                "notify imm: this server's device {} is iWARP, which has no RDMA Write with immediate; use notify tcp",
                local.ctx.name()
            ),
        ));
    }

    // A fresh PD, MR (fresh rkey) and QP for this client only; all released before the verdict.
    let rdma = |e: rdma_core_rs::Error| {
        Failure::new(
            ErrorCode::RdmaSetup,
            format!("server-side RDMA setup failed: {e}"),
        )
    };
    let (mr_access, qp_access) = if s.fault == Some(Fault::NoRemoteWrite) {
        (Access::LOCAL_WRITE, Access::NONE)
    } else {
        (
            Access::LOCAL_WRITE | Access::REMOTE_WRITE,
            Access::REMOTE_WRITE,
        )
    };
    let buffer_size = usize::try_from(s.policy.buffer_size)
        .map_err(|_| Failure::new(ErrorCode::Internal, "buffer size does not fit in memory"))?;
    // Held until the session ends, after the buffer is gone.
    let _pins = s
        .pinned
        .reserve(budget::write_session(s.policy.buffer_size))
        .map_err(|m| Failure::new(ErrorCode::Busy, m))?;
    let pd = local.ctx.alloc_pd().map_err(rdma)?;
    let mr = pd.register_exposed(buffer_size, mr_access).map_err(rdma)?;
    let cq = local.ctx.create_cq(4, s.cq_mode).map_err(rdma)?;
    let qp = pd.create_rc_qp(&cq, QpCaps::default()).map_err(rdma)?;
    let qp = qp.to_init(local.port.num, qp_access).map_err(rdma)?;
    if hello.notify == Notify::Imm {
        // Posted before the client can know our QP: the write-with-immediate finds it waiting.
        qp.post_recv(RECV_WR_ID).map_err(rdma)?;
    }
    let qp = connect_and_accept(s, local, conn, hs, &hello, qp, &mr, rdma)?;
    let h = &hello.endpoint;
    let notify = SessionNotify::from(hello.notify);
    let path_mtu = qp.path_mtu().bytes();
    emit_qp_ready(s, id, &qp, &hello, notify, || {
        format!(
            "[{id}] QP {:#08x} <- client QP {:#08x}, path MTU {path_mtu}, offering {} bytes (notify {notify})",
            qp.qpn(),
            h.qpn,
            mr.len()
        )
    });

    // Wait for the write: its immediate completion, or the client's `written` notice.
    let deadline = Instant::now() + phase;
    let (imm, written) = match hello.notify {
        Notify::Imm => {
            let c = wait_for_completion(s, conn, hs, &cq, deadline)?;
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

    // Take the client's access away before reading a byte; this also frees its slot under
    // --max-clients before it hears the verdict.
    let buf = revoke(qp, mr)?;
    drop(cq);
    drop(pd);
    let length = usize::try_from(hello.length)
        .unwrap_or(usize::MAX)
        .min(buf.len());
    let outcome: Outcome = hs.verify(&buf[..length], imm, written.as_ref());
    drop(buf);
    report_verdict(s, id, &outcome, || {
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
    });
    let result = hs.result(outcome)?;
    conn.send_line(&result.to_line(), Instant::now() + phase)?;
    Ok(())
}

/// Connects `qp` to the client's endpoint from its `hello` (with a fresh send PSN) and sends
/// the accept: our endpoint and `mr`, the buffer the client may write. `rdma` words a failed
/// verb.
#[allow(clippy::too_many_arguments)]
pub(crate) fn connect_and_accept(
    s: &SessionCtx,
    local: &LocalPort,
    conn: &mut LineConn<TcpStream>,
    hs: &mut ServerHandshake,
    hello: &Hello,
    qp: QueuePair<Init>,
    mr: &ExposedRegion,
    rdma: impl Fn(rdma_core_rs::Error) -> Failure,
) -> Result<QueuePair<Rts>, Failure> {
    let psn = rdma_core_rs::random_psn().map_err(&rdma)?;
    if hello.cm {
        return crate::cm::accept(s, local, conn, hs, qp, mr, psn, rdma);
    }
    let client = rdma_app::verbs::from_wire(&hello.endpoint);
    let qp = qp.connect_to(local, &client, psn).map_err(&rdma)?;
    let ours = rdma_app::verbs::to_wire(local.endpoint(&qp, psn));
    let accept = hs.accept(ours, mr.addr(), mr.rkey(), mr.len() as u64)?;
    conn.send_line(&accept.to_line(), Instant::now() + s.timeout)?;
    Ok(qp)
}

/// The client could still write: its QP is connected and the rkey is live. Takes both away
/// before the CPU reads a byte: destroys our QP (no more packets from it are taken), then
/// deregisters the MR (the rkey dies); returns the buffer.
pub(crate) fn revoke(qp: QueuePair<Rts>, mr: ExposedRegion) -> Result<OwnedBuffer, Failure> {
    drop(qp);
    mr.deregister().map_err(|e| {
        Failure::new(
            ErrorCode::Internal,
            format!("could not revoke the client's access to the buffer: {e}"),
        )
    })
}

/// Logs [`Event::QpReady`]: `qp` is in RTS towards the client's QP from `hello`; `notify` says
/// how the session goes on (`imm`, `tcp`, `bench-lat`, `bench-bw`), `human` is the line
/// without `--json`.
/// Says which device, port and GID the session uses, and why (chosen by its address).
fn emit_port_chosen(s: &SessionCtx, id: u64, local: &LocalPort, why: &str) {
    s.out.emit(
        &Event::PortChosen {
            session: id,
            device: local.ctx.name().into(),
            port: local.port.num,
            gid_index: local.gid.index,
            gid: local.gid.gid.to_string().into(),
            why: why.into(),
        },
        || format!("[{id}] RDMA on {why}"),
    );
}

pub(crate) fn emit_qp_ready(
    s: &SessionCtx,
    id: u64,
    qp: &QueuePair<Rts>,
    hello: &Hello,
    notify: SessionNotify,
    human: impl FnOnce() -> String,
) {
    s.out.emit(
        &Event::QpReady {
            session: id,
            local_qpn: qp.qpn(),
            remote_qpn: hello.endpoint.qpn,
            path_mtu: qp.path_mtu().bytes(),
            notify,
            length: hello.length,
            via: QpVia::from_cm(hello.cm),
        },
        human,
    );
}

/// Reads the client's next line and feeds it to the handshake (see [`feed`]); a failed read
/// goes to the handshake too (see [`read_failed`]).
pub(crate) fn next_event(
    conn: &mut LineConn<TcpStream>,
    hs: &mut ServerHandshake,
    deadline: Instant,
) -> Result<ServerEvent, Failure> {
    match conn.read_line(deadline) {
        Ok(line) => feed(conn, hs, &line),
        Err(e) => Err(read_failed(conn, hs, e)),
    }
}

/// Feeds one client line to the handshake. A line the state machine refuses (malformed, wrong
/// order, bad token, too long) is answered here with the machine's own error line; an `error`
/// from the client ends the session quietly.
fn feed(
    conn: &mut LineConn<TcpStream>,
    hs: &mut ServerHandshake,
    line: &[u8],
) -> Result<ServerEvent, Failure> {
    match hs.on_line(line) {
        Ok(ServerEvent::PeerError(e)) => Err(peer_gave_up(&e)),
        Ok(event) => Ok(event),
        Err(e) => {
            let msg = hs.fail(&e);
            let _ = conn.send_line(&msg.to_line(), Instant::now() + Duration::from_secs(1));
            Err(Failure::from(e).silent())
        }
    }
}

/// A read from the client failed: the handshake says what, if anything, to answer.
fn read_failed(conn: &mut LineConn<TcpStream>, hs: &mut ServerHandshake, e: FrameError) -> Failure {
    if let Some(msg) = hs.on_read_error(&e) {
        let _ = conn.send_line(&msg.to_line(), Instant::now() + Duration::from_secs(1));
    }
    Failure::from(e)
}

/// An event the state machine accepted but this point of the session does not expect (the
/// machine refuses wrong orders itself, so this is a server bug, reported as such).
pub(crate) fn out_of_order(event: &ServerEvent) -> Failure {
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
/// vanished, a line it sent (fed to the handshake), or a server shutdown end the wait early.
fn wait_for_completion(
    s: &SessionCtx,
    conn: &mut LineConn<TcpStream>,
    hs: &mut ServerHandshake,
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
                    s.timeout
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
        if client_spoke(conn) {
            // Nothing is expected from the client now: the handshake refuses whatever it sent
            // (or takes its `error`), and a closed connection is a failed read.
            let event = next_event(conn, hs, deadline)?;
            return Err(out_of_order(&event));
        }
    }
}

/// Whether the client sent something or closed the connection (looked at without blocking).
pub(crate) fn client_spoke(conn: &LineConn<TcpStream>) -> bool {
    if conn.has_buffered() {
        // A line that arrived together with an earlier one is already in our buffer.
        return true;
    }
    let sock = conn.get_ref();
    if sock.set_nonblocking(true).is_err() {
        return false;
    }
    let mut byte = [0u8; 1];
    let peeked = sock.peek(&mut byte);
    let _ = sock.set_nonblocking(false);
    // Ok(0): closed; Ok(_): bytes to read; an error other than WouldBlock: reset. The read
    // that follows tells which.
    !matches!(peeked, Err(ref e) if e.kind() == std::io::ErrorKind::WouldBlock)
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

/// Counts a verified session and logs [`Event::Verified`] with the verdict; `human` is its line
/// without `--json`.
pub(crate) fn report_verdict(
    s: &SessionCtx,
    id: u64,
    outcome: &Outcome,
    human: impl FnOnce() -> String,
) {
    if outcome.verified {
        s.verified.fetch_add(1, Ordering::AcqRel);
    }
    s.out.emit(
        &Event::Verified {
            session: id,
            verified: outcome.verified,
            length: outcome.length,
            crc32c: outcome.crc32c,
            text: outcome.text.as_str().into(),
            truncated: outcome.truncated,
            reason: outcome.reason.as_deref().map(Into::into),
        },
        human,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client cannot forge a log line or send ANSI escapes through a failure's text: neither
    /// through what the protocol quotes (its `type`) nor through any message (issue 16, item 6).
    #[test]
    fn failure_lines_escape_what_the_client_sent() {
        let line = "[3] session failed (bad_json): x\n[9] verified: RDMA Write data landed\x1b[31m";
        let shown = failed_line(3, "bad_json", line);
        assert!(!shown.chars().any(char::is_control), "{shown:?}");
        assert!(shown.contains(r"x\n[9] verified"), "{shown}");
        assert!(shown.contains(r"\u{1b}[31m"), "{shown}");
        let hostile = br#"{"type":"\n[9] verified\u001b[31m","v":1}"#;
        let Err(e) = rdma_proto::ClientMessage::parse(hostile) else {
            panic!("parsed a hostile type")
        };
        let f = Failure::from(e);
        let shown = failed_line(3, f.log_code(), &f.message);
        assert!(!shown.chars().any(char::is_control), "{shown:?}");
        assert!(shown.contains(r"\n[9] verified\u{1b}[31m"), "{shown}");
    }
}
