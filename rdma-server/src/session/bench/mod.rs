//! A bench session (`hello.bench`, from `rdma-client bench`): the client carries every
//! parameter, the server sizes a fresh buffer for it (up to `--bench-max-bytes`), under the
//! same token / allow-list / max-clients rules as a write.
//!
//! `lat`: for each size, the server spins on the last byte of its buffer until the client's
//! ping (counter `n`) lands, then writes its pong (the same size, last byte `n`) into the
//! client's buffer — `ib_write_lat`'s exchange. `bw`: the server only waits. Both end like a
//! tcp-mode write: the client's `written` names the final bytes, the server revokes the
//! client's access, checks its buffer against them and sends the verdict.
//!
//! With rounds ([`rdma_proto::rounds`], `bench-rounds`) the session then waits for the
//! client's `next` and runs its sweep again on the same queue pairs: a buffer registered anew
//! for the pings, the `lat` answers into the client's fresh buffer the `next` names. Between
//! rounds nothing of the session's is exposed: the pings' buffer is deregistered before a byte
//! of it is read.

use std::net::TcpStream;
use std::time::Instant;

use rdma_core_rs::{
    Access, CompletionQueue, ExposedRegion, LocalPort, MemoryRegion, ProtectionDomain, QpCaps,
    QueuePair, RemoteBuffer, Rts,
};
use rdma_proto::bench::{self, BenchKind, BenchParams, SIGNAL_EVERY};
use rdma_proto::framing::LineConn;
use rdma_proto::{ErrorCode, Hello, ServerEvent, ServerHandshake};

use super::connect::connect_and_accept;
use super::ctx::SessionCtx;
use super::rounds;
use super::steps::{emit_qp_ready, next_event, out_of_order, report_verdict};
use crate::failure::Failure;
use crate::output::{Detail, Event, SessionNotify};
use crate::verbs::{Region, revoke_region};

mod pong;
mod stamp;

use pong::{Pong, SessionClock};

/// Send-queue depth of a bench QP; a signalled pong at least every `SIGNAL_EVERY`.
const SQ_DEPTH: u32 = 4 * SIGNAL_EVERY as u32;
/// Inline data asked for (rxe and most NICs offer at least this); 0 if the device refuses.
const INLINE: u32 = 256;

/// A bench session's verbs objects. Field order is drop order: the queue pair, the regions,
/// the completion queue, then their protection domain.
struct Rig {
    /// `None` once revoked.
    qp: Option<QueuePair<Rts>>,
    /// Where the pings land; `None` once revoked, and between rounds.
    mr: Option<ExposedRegion>,
    /// `lat`: the answers' source, the pattern (never exposed).
    src: Option<MemoryRegion>,
    cq: CompletionQueue,
    pd: ProtectionDomain,
    inline: u32,
    /// `lat` with the stamped exchange, on a device that stamps completions: its clock (the
    /// CQ stamps them then).
    stamps: Option<rdma_core_rs::CompletionClock>,
}

/// Runs one bench session after its hello was accepted by the handshake.
pub(crate) fn session(
    s: &SessionCtx,
    local: &LocalPort,
    conn: &mut LineConn<TcpStream>,
    hs: &mut ServerHandshake,
    id: u64,
    hello: &Hello,
    b: &BenchParams,
) -> Result<(), Failure> {
    let rdma = |e: rdma_core_rs::Error| {
        Failure::new(
            ErrorCode::RdmaSetup,
            format!("server-side RDMA setup for the bench session failed: {e}"),
        )
    };
    let len = usize::try_from(hello.length)
        .map_err(|_| Failure::new(ErrorCode::TooLong, "bench buffer does not fit in memory"))?;
    // Held until the session ends, after both buffers are gone.
    let _pins = s
        .pinned
        .reserve(crate::budget::bench_session(
            hello.length,
            matches!(b.kind, BenchKind::Lat(_)),
        ))
        .map_err(|m| Failure::new(ErrorCode::Busy, m))?;
    let pd = local.ctx.alloc_pd().map_err(rdma)?;
    let exposed = |pd: &ProtectionDomain| {
        pd.register_exposed(len, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
            .map_err(rdma)
    };
    let mr = exposed(&pd)?;
    // lat: our answers' source.
    let src = match b.kind {
        BenchKind::Lat(_) => {
            let mut m = pd.register(len, Access::NONE).map_err(rdma)?;
            bench::fill_pattern(m.as_mut_slice());
            Some(m)
        }
        BenchKind::Bw => None,
    };
    // The stamped exchange is stamped where the device has a clock: an extended CQ then.
    let stamps = if b.stamped {
        local.ctx.completion_clock().ok().filter(|c| c.has_clock())
    } else {
        None
    };
    let cq = match stamps {
        Some(_) => local
            .ctx
            .create_cq_ex(SQ_DEPTH * 2, rdma_core_rs::CqMode::Poll, true),
        None => local
            .ctx
            .create_cq(SQ_DEPTH * 2, rdma_core_rs::CqMode::Poll),
    }
    .map_err(rdma)?;
    let caps = |inline| QpCaps {
        max_send_wr: SQ_DEPTH,
        max_inline_data: inline,
        ..QpCaps::default()
    };
    let (qp, inline) = match pd.create_rc_qp(&cq, caps(INLINE)) {
        Ok(qp) => (qp, INLINE),
        Err(_) => (pd.create_rc_qp(&cq, caps(0)).map_err(rdma)?, 0),
    };
    let qp = qp
        .to_init(local.port.num, Access::REMOTE_WRITE)
        .map_err(rdma)?;
    // The stamped ping's receive, before the accept lets the client connect.
    if b.stamped {
        qp.post_recv(stamp::RECV_WR).map_err(rdma)?;
    }
    // From the accept, which `connect_and_accept` sends: an RDMA CM connection (up to
    // --timeout) counts against --bench-max-time like the rest (issue 23, item 6).
    let accepted = Instant::now();
    // One clock for the whole session, every round's waits end by its end.
    let clock = SessionClock::new(accepted, s.timeout, s.bench_max_time);
    let mut kept = kept_for(
        &s.kept,
        accepted,
        s.bench_max_time,
        s.timeout,
        hello.length,
        matches!(b.kind, BenchKind::Lat(_)),
    );
    let qp = connect_and_accept(s, local, conn, hs, hello, qp, &mr, id, rdma)?;
    let mode = SessionNotify::from(b.mode());
    let detail = Detail::Bench {
        mode,
        sizes: &b.sizes,
        iters: b.iters,
    };
    emit_qp_ready(
        s,
        id,
        (qp.qpn(), qp.path_mtu().bytes()),
        hello,
        mode,
        &detail,
    );
    let mut rig = Rig {
        qp: Some(qp),
        mr: Some(mr),
        src,
        cq,
        pd,
        inline,
        stamps,
    };
    loop {
        bench_round(s, conn, hs, id, &mut rig, b, &clock, &detail)?;
        // The next round: a fresh buffer for the pings (a new rkey), the answers' source back
        // to the pattern (the last round's answers landed: the client's `written` said so).
        let mut rearm = |_: &ServerHandshake| {
            let mr = exposed(&rig.pd)?;
            let r = Region {
                addr: mr.addr(),
                rkey: mr.rkey(),
                len: mr.len() as u64,
            };
            rig.mr = Some(mr);
            if let Some(src) = rig.src.as_mut() {
                bench::fill_pattern(src.as_mut_slice());
            }
            Ok(r)
        };
        if !rounds::next(s, conn, hs, id, &mut kept, &mut rearm)? {
            return Ok(());
        }
    }
}

/// A bench session's rounds, from its accept at `accepted`: kept at most `--bench-max-time`
/// (the whole session's bound, rounds and all) and the server's lifetime of a kept session,
/// each round paced by what it registers and refills (its buffer,
/// and for `lat` the answers' source too).
fn kept_for(
    slots: &crate::kept::KeptSlots,
    accepted: Instant,
    bench_max_time: std::time::Duration,
    round: std::time::Duration,
    len: u64,
    lat: bool,
) -> rounds::Kept {
    rounds::Kept::new(
        accepted,
        slots.lifetime.min(bench_max_time),
        round,
        crate::budget::bench_session(len, lat),
        slots.rate,
    )
}

/// One round of a bench session, from the accept (or region) sent to the verdict sent: the
/// `lat` answers, the client's `written`, its access taken away (the whole session's, or with
/// rounds this round's buffer), the check.
#[allow(clippy::too_many_arguments)]
fn bench_round(
    s: &SessionCtx,
    conn: &mut LineConn<TcpStream>,
    hs: &mut ServerHandshake,
    id: u64,
    rig: &mut Rig,
    b: &BenchParams,
    clock: &SessionClock,
    detail: &Detail<'_>,
) -> Result<(), Failure> {
    let gone = || {
        Failure::new(
            ErrorCode::Internal,
            "the bench session's buffer is revoked already",
        )
    };
    let length = hs.length();
    let mut stamps = None;
    if let (Some(src), Some(to)) = (rig.src.as_mut(), hs.pong()) {
        let (Some(qp), Some(mr)) = (rig.qp.as_ref(), rig.mr.as_ref()) else {
            return Err(gone());
        };
        let pong = Pong {
            qp,
            cq: &rig.cq,
            mr,
            remote: RemoteBuffer {
                addr: to.addr,
                rkey: to.rkey,
                len: length,
            },
            inline: rig.inline,
            early: std::cell::Cell::new(None),
        };
        pong.run(s, conn, hs, b, src, clock)?;
        if b.stamped {
            stamps = pong.stamped(s, conn, hs, src, clock, rig.stamps)?;
        }
    }

    // The client's `written` ends both modes: after its last pong (lat) or its last write
    // completed (bw). The session's end (--bench-max-time from its accept) bounds how long a
    // client may hold the buffer, in every round.
    let written = match next_event(conn, hs, clock.end)? {
        ServerEvent::Written(w) => w,
        other => return Err(out_of_order(&other)),
    };
    let mode = SessionNotify::from(b.mode());
    s.out.emit(&Event::Written {
        session: id,
        length,
        notify: mode,
    });
    // As for a write: no more packets from the client's QP (unless the session is kept), its
    // rkey revoked, then read.
    if hs.keep_alive().is_none() {
        rig.qp = None;
        rig.src = None;
    }
    let buf = revoke_region(rig.mr.take().ok_or_else(gone)?)?;
    let len = usize::try_from(length).unwrap_or(usize::MAX).min(buf.len());
    let mut outcome = hs.verify(&buf[..len], None, Some(&written));
    drop(buf);
    // The bench pattern is not text: say what was checked instead of echoing bytes.
    outcome.text = format!("{mode} {:?} x {}", b.sizes, b.iters);
    outcome.truncated = false;
    outcome.stamps = stamps;
    report_verdict(s, id, &outcome, detail);
    let result = hs.result(outcome)?;
    conn.send_line(&result.to_line(), Instant::now() + s.timeout)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// `--bench-max-time` bounds the whole bench session from its accept, rounds and all (as
    /// SECURITY.md promises): no wait for a `next` runs past it, no round begins after it, and
    /// every round's waits end by the same end.
    #[test]
    fn the_bench_max_time_bounds_a_kept_session_from_its_accept() {
        let t0 = Instant::now();
        let max = Duration::from_secs(3);
        let keep = Duration::from_secs(30);
        let slots = crate::kept::KeptSlots::new(1);
        assert!(
            slots.lifetime > max,
            "the kept sessions' own lifetime is longer"
        );
        let round = Duration::from_secs(1);
        let kept = kept_for(&slots, t0, max, round, 4096, true);
        let clock = SessionClock::new(t0, Duration::from_secs(10), max);
        assert_eq!(kept.end(), clock.end);
        // No round begins, and no `next` is waited for, within one round's bound of the end:
        // a round begun then would be cut off, and its client see a failed sweep where the
        // session should have ended at its last verdict.
        let last = t0 + max - round;
        assert_eq!(kept.idle_until(t0 + max / 3, keep), Some(last));
        assert_eq!(kept.idle_until(last, keep), None);
        assert!(kept.start_at(last - Duration::from_millis(1)).is_some());
        assert_eq!(kept.start_at(last), None);
        assert_eq!(kept.start_at(t0 + max), None);
    }
}
