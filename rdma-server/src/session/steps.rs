//! The steps every kind of session takes alike: logging the
//! queue pair and the verdict, feeding the client's lines to the handshake, waiting for the
//! write's completion.

use crate::output::{Detail, Event, SessionNotify};
use crate::verbs::PortName;
use rdma_core_rs::{Completion, ErrorKind};
use rdma_proto::events::QpVia;
use rdma_proto::framing::{FrameError, LineConn};
use rdma_proto::{ErrorCode, ErrorMsg, Hello, Outcome, ServerEvent, ServerHandshake};
use std::net::TcpStream;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::ctx::SessionCtx;
use crate::failure::Failure;

/// How often a session waiting for the write checks the socket and the stop flag.
const SLICE: Duration = Duration::from_millis(100);

/// Says which device, port and GID the session uses, and why (chosen by its address).
pub(crate) fn emit_port_chosen(s: &SessionCtx, id: u64, port: &PortName, why: &str) {
    s.out.emit(&Event::PortChosen {
        session: id,
        device: port.device.as_str().into(),
        port: port.port,
        gid_index: port.gid_index,
        gid: port.gid.as_str().into(),
        why: why.into(),
    });
}

/// Logs [`Event::QpReady`]: `qp` is in RTS towards the client's QP from `hello`; `notify` says
/// how the session goes on (`imm`, `tcp`, `bench-lat`, `bench-bw`), `detail` what its line
/// says besides (the buffer offered, a bench's sizes).
pub(crate) fn emit_qp_ready(
    s: &SessionCtx,
    id: u64,
    (qpn, path_mtu): (u32, u32),
    hello: &Hello,
    notify: SessionNotify,
    detail: &Detail<'_>,
) {
    s.out.emit_with(
        &Event::QpReady {
            session: id,
            local_qpn: qpn,
            remote_qpn: hello.endpoint.qpn,
            path_mtu,
            notify,
            length: hello.length,
            via: QpVia::from_cm(hello.cm),
        },
        detail,
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
pub(crate) fn feed(
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
pub(crate) fn read_failed(
    conn: &mut LineConn<TcpStream>,
    hs: &mut ServerHandshake,
    e: FrameError,
) -> Failure {
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
        ServerEvent::Next(_) => "next",
        ServerEvent::PeerError(_) => "error",
    };
    Failure::new(
        ErrorCode::Internal,
        format!("`{what}` accepted by the handshake where the server did not expect it"),
    )
}

/// Waits for the receive completion of a write-with-immediate, in slices, so that a client that
/// vanished, a line it sent (fed to the handshake), or a server shutdown end the wait early.
pub(crate) fn wait_for_completion(
    s: &SessionCtx,
    conn: &mut LineConn<TcpStream>,
    hs: &mut ServerHandshake,
    poll: &dyn Fn(Instant) -> Result<Completion, rdma_core_rs::Error>,
    deadline: Instant,
) -> Result<Completion, Failure> {
    let did_not_land = |e: rdma_core_rs::Error| {
        Failure::new(
            ErrorCode::WriteFailed,
            format!("the client's write did not land: {e}"),
        )
    };
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
        match poll((now + SLICE).min(deadline)) {
            Ok(c) => return Ok(c),
            Err(e) if e.kind() == ErrorKind::Timeout => {}
            Err(e) => return Err(did_not_land(e)),
        }
        if s.stopping.load(Ordering::Acquire) {
            // One last look: a completion already queued (the write, or its failure) is the
            // session's answer, not the stop.
            return match poll(Instant::now()) {
                Ok(c) => Ok(c),
                Err(e) if e.kind() == ErrorKind::Timeout => Err(Failure::new(
                    ErrorCode::ShuttingDown,
                    "the server is shutting down",
                )),
                Err(e) => Err(did_not_land(e)),
            };
        }
        if conn.peer_spoke() {
            // Nothing is expected from the client now: the handshake refuses whatever it sent
            // (or takes its `error`), and a closed connection is a failed read.
            let event = next_event(conn, hs, deadline)?;
            return Err(out_of_order(&event));
        }
    }
}

/// The client's `error` ended the session: logged (escaped, its message cut to the protocol's
/// bound on human text, [`rdma_proto::MAX_TEXT`] bytes, not the 64 KiB a line may carry), not
/// answered.
pub(crate) fn peer_gave_up(e: &ErrorMsg) -> Failure {
    Failure::new(
        e.code,
        format!(
            "the client gave up: {}: {}",
            e.code.as_str(),
            rdma_proto::printable_capped(&e.message, rdma_proto::MAX_TEXT)
        ),
    )
    .silent()
}

/// Counts a verified session and logs [`Event::Verified`] with the verdict (`detail`: a bench
/// session's, for its line).
pub(crate) fn report_verdict(s: &SessionCtx, id: u64, outcome: &Outcome, detail: &Detail<'_>) {
    if outcome.verified {
        s.verified.fetch_add(1, Ordering::AcqRel);
        s.wake.ring();
    }
    s.out.emit_with(
        &Event::Verified {
            session: id,
            verified: outcome.verified,
            length: outcome.length,
            crc32c: outcome.crc32c,
            text: outcome.text.as_str().into(),
            truncated: outcome.truncated,
            reason: outcome.reason.as_deref().map(Into::into),
        },
        detail,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client's `error` is logged with at most `MAX_TEXT` bytes of its message (the
    /// protocol's bound on human text), with a marker, not the up to 64 KiB a line may carry;
    /// and it is not echoed back.
    #[test]
    fn a_clients_long_error_is_logged_cut() {
        let message = format!("\u{1b}[2J{}{}", "x".repeat(2000), "y".repeat(60_000));
        let f = peer_gave_up(&ErrorMsg {
            code: ErrorCode::Internal,
            message: message.clone(),
            supported: None,
        });
        let left = message.len() - rdma_proto::MAX_TEXT;
        assert!(
            f.message.len() < rdma_proto::MAX_TEXT + 100,
            "{}",
            f.message.len()
        );
        assert!(
            f.message
                .ends_with(&format!("… ({left} more bytes not shown)")),
            "{}",
            &f.message[f.message.len().saturating_sub(80)..]
        );
        assert!(!f.message.contains('\u{1b}') && f.message.contains(r"\u{1b}[2Jxxx"));
        assert!(
            !f.message.contains("yy"),
            "only the first MAX_TEXT bytes are kept"
        );
        assert!(!f.tell_peer, "a client's own error is not echoed to it");
        // A short one is kept whole, escaped.
        let f = peer_gave_up(&ErrorMsg {
            code: ErrorCode::Internal,
            message: "disk full\u{202e}".to_owned(),
            supported: None,
        });
        assert_eq!(
            f.message,
            "the client gave up: internal: disk full\\u{202e}"
        );
    }
}
