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
mod steps;

use connect::connect_and_accept;
use ctx::Failure;
pub use ctx::SessionCtx;
use steps::*;

use crate::budget::{self};
use crate::output::{Event, SessionNotify};
use rdma_core_rs::{LocalPort, QpCaps, WcOpcode};
use rdma_proto::framing::LineConn;
use rdma_proto::{
    ErrorCode, ErrorMsg, Notify, Outcome, ServerEvent, ServerHandshake, ServerMessage,
};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Work request id of the receive that catches the write-with-immediate.
const RECV_WR_ID: u64 = 0x5245_4356; // "RECV"

/// What every session needs from the server, shared by the session threads.
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
        return bench::session(s, local, conn, hs, id, &hello, b);
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
    let (mr_access, qp_access) = (s.grant.region, s.grant.qp);
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
