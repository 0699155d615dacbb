//! A write session, once its hello is bound: a fresh PD, MR, CQ and QP for this client only,
//! the accept, then round after round (one, unless the accept granted rounds): the write, the
//! client's access taken away, the verdict.

use super::connect::accept_exposed;
use super::ctx::SessionCtx;
use super::rounds;
use super::steps::{emit_qp_ready, next_event, out_of_order, report_verdict, wait_for_completion};
use crate::budget;
use crate::failure::Failure;
use crate::output::{Detail, Event, SessionNotify};
use crate::verbs::{Exposure, WriteVerbs};
use rdma_core_rs::WcOpcode;
use rdma_proto::framing::LineConn;
use rdma_proto::{ErrorCode, Hello, Notify, Outcome, ServerEvent, ServerHandshake};
use std::net::TcpStream;
use std::time::Instant;

/// Serves the write session `hello` asked for on `verbs`, to its end.
pub(super) fn session(
    s: &SessionCtx,
    conn: &mut LineConn<TcpStream>,
    hs: &mut ServerHandshake,
    verbs: &dyn WriteVerbs,
    hello: &Hello,
    id: u64,
) -> Result<(), Failure> {
    // Before anything is reserved or registered: a write this device cannot take.
    if hello.notify == Notify::Imm && !verbs.has_write_with_imm() {
        return Err(Failure::new(
            ErrorCode::InvalidField,
            format!(
                "notify imm: this server's device {} is iWARP, which has no RDMA Write with immediate; use notify tcp",
                verbs.name().device
            ),
        ));
    }

    // A fresh PD, MR (fresh rkey) and QP for this client only; all released before the verdict
    // (with rounds: each round's MR before its verdict, the rest when the session ends).
    let rdma = |e: rdma_core_rs::Error| {
        Failure::new(
            ErrorCode::RdmaSetup,
            format!("server-side RDMA setup failed: {e}"),
        )
    };
    let buffer_size = usize::try_from(s.policy.buffer_size)
        .map_err(|_| Failure::new(ErrorCode::Internal, "buffer size does not fit in memory"))?;
    // Held until the session ends, after the buffer is gone.
    let _pins = s
        .pinned
        .reserve(budget::write_session(s.policy.buffer_size))
        .map_err(|m| Failure::new(ErrorCode::Busy, m))?;
    // With `imm` the receive is posted before the client can know our QP: the
    // write-with-immediate finds it waiting.
    let imm = hello.notify == Notify::Imm;
    let mut x = verbs
        .expose(buffer_size, &s.grant, s.cq_mode, imm)
        .map_err(rdma)?;
    // From the accept: the session's lifetime, and its rounds' pace.
    let mut kept = rounds::Kept::new(
        Instant::now(),
        s.kept.lifetime,
        s.timeout,
        budget::write_session(s.policy.buffer_size),
        s.kept.rate,
    );
    accept_exposed(s, conn, hs, hello, &mut *x, id, rdma)?;
    let notify = SessionNotify::from(hello.notify);
    let (qpn, path_mtu) = x.qp();
    let offered = x.region().map_or(0, |r| r.len);
    emit_qp_ready(
        s,
        id,
        (qpn, path_mtu),
        hello,
        notify,
        &Detail::Offered(offered),
    );
    loop {
        write_round(s, conn, hs, &mut *x, id, notify)?;
        let mut rearm = |hs: &ServerHandshake| {
            let imm = hs.notify() == Some(Notify::Imm);
            x.rearm(buffer_size, &s.grant, imm).map_err(rdma)?;
            x.region().ok_or_else(|| {
                Failure::new(ErrorCode::Internal, "a round's buffer was not registered")
            })
        };
        if !rounds::next(s, conn, hs, id, &mut kept, &mut rearm)? {
            return Ok(());
        }
    }
}

/// One round of a write session, from the accept (or region) sent to the verdict sent: waits
/// for the write (its immediate completion, or the client's `written` notice), takes the
/// client's access away (the whole exposure, or with rounds this round's buffer), verifies.
fn write_round(
    s: &SessionCtx,
    conn: &mut LineConn<TcpStream>,
    hs: &mut ServerHandshake,
    x: &mut dyn Exposure,
    id: u64,
    notify: SessionNotify,
) -> Result<(), Failure> {
    let deadline = Instant::now() + s.timeout;
    let length = hs.length();
    let (imm, written) = match hs.notify() {
        Some(Notify::Imm) => {
            let c = wait_for_completion(s, conn, hs, &|d| x.poll(d), deadline)?;
            if c.opcode != WcOpcode::RecvRdmaWithImm {
                return Err(Failure::new(
                    ErrorCode::WriteFailed,
                    format!("expected an RDMA Write with immediate, got {:?}", c.opcode),
                ));
            }
            (c.imm, None)
        }
        _ => match next_event(conn, hs, deadline)? {
            ServerEvent::Written(w) => (None, Some(w)),
            other => return Err(out_of_order(&other)),
        },
    };
    s.out.emit(&Event::Written {
        session: id,
        length,
        notify,
    });

    // Take the client's access away before reading a byte; without rounds this also frees its
    // slot under --max-clients before it hears the verdict.
    let buf = if hs.keep_alive().is_some() {
        x.end_round()?
    } else {
        x.revoke()?
    };
    let length = usize::try_from(length).unwrap_or(usize::MAX).min(buf.len());
    let outcome: Outcome = hs.verify(&buf[..length], imm, written.as_ref());
    drop(buf);
    report_verdict(s, id, &outcome, &Detail::None);
    let result = hs.result(outcome)?;
    conn.send_line(&result.to_line(), Instant::now() + s.timeout)?;
    Ok(())
}
