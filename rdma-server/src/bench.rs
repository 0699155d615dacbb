//! A bench session (`hello.bench`, from `rdma-client --bench`): the client carries every
//! parameter, the server sizes a fresh buffer for it (up to `--bench-max-bytes`), under the
//! same token / allow-list / max-clients rules as a write.
//!
//! `lat`: for each size, the server spins on the last byte of its buffer until the client's
//! ping (counter `n`) lands, then writes its pong (the same size, last byte `n`) into the
//! client's buffer — `ib_write_lat`'s exchange. `bw`: the server only waits. Both end like a
//! tcp-mode write: the client's `written` names the final bytes, the server revokes the
//! client's access, checks its buffer against them and sends the verdict.

use std::net::TcpStream;
use std::sync::atomic::Ordering;
use std::time::Instant;

use rdma_core_rs::{
    Access, CompletionQueue, ExposedRegion, MemoryRegion, QpCaps, QueuePair, RemoteBuffer, Rts,
    WriteFlags,
};
use rdma_proto::bench::{self, BenchKind, BenchParams, SIGNAL_EVERY};
use rdma_proto::framing::LineConn;
use rdma_proto::{ErrorCode, Hello, ServerEvent, ServerHandshake};

use crate::output::{Event, SessionNotify};
use crate::session::{
    Failure, SessionCtx, client_spoke, connect_and_accept, emit_qp_ready, next_event, out_of_order,
    report_verdict, revoke,
};

/// Send-queue depth of a bench QP; a signalled pong at least every `SIGNAL_EVERY`.
const SQ_DEPTH: u32 = 4 * SIGNAL_EVERY as u32;
/// Inline data asked for (rxe and most NICs offer at least this); 0 if the device refuses.
const INLINE: u32 = 256;

/// Runs one bench session after its hello was accepted by the handshake.
pub(crate) fn session(
    s: &SessionCtx,
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
    let local = &s.local;
    let pd = local.ctx.alloc_pd().map_err(rdma)?;
    let mr = pd
        .register_exposed(len, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .map_err(rdma)?;
    // lat: our pongs, and the client's buffer they go to.
    let mut pongs = match b.kind {
        BenchKind::Lat(to) => {
            let mut m = pd.register(len, Access::NONE).map_err(rdma)?;
            bench::fill_pattern(m.as_mut_slice());
            Some((m, to))
        }
        BenchKind::Bw => None,
    };
    let cq = local
        .ctx
        .create_cq(SQ_DEPTH * 2, rdma_core_rs::CqMode::Poll)
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
    let qp = connect_and_accept(s, conn, hs, hello, qp, &mr, rdma)?;
    let h = &hello.endpoint;
    let mode = SessionNotify::from(b.mode());
    let path_mtu = qp.path_mtu().bytes();
    emit_qp_ready(s, id, &qp, hello, mode, || {
        format!(
            "[{id}] QP {:#08x} <- client QP {:#08x}, path MTU {path_mtu}, {mode}: sizes {:?}, {} iterations each",
            qp.qpn(),
            h.qpn,
            b.sizes,
            b.iters
        )
    });

    if let Some((src, to)) = pongs.as_mut() {
        let remote = RemoteBuffer {
            addr: to.addr,
            rkey: to.rkey,
            len: hello.length,
        };
        let pong = Pong {
            qp: &qp,
            cq: &cq,
            mr: &mr,
            remote,
            inline,
        };
        pong.run(s, conn, hs, b, src)?;
    }

    // The client's `written` ends both modes: after its last pong (lat) or its last write
    // completed (bw). The server-side cap bounds how long a client may hold the buffer.
    let deadline = Instant::now() + s.timeout.max(s.bench_max_time);
    let written = match next_event(conn, hs, deadline)? {
        ServerEvent::Written(w) => w,
        other => return Err(out_of_order(&other)),
    };
    s.out.emit(
        &Event::Written {
            session: id,
            length: hello.length,
            notify: mode,
        },
        || format!("[{id}] {mode} done ({} bytes checked next)", hello.length),
    );
    // As for a write: no more packets from the client's QP, its rkey revoked, then read.
    let buf = revoke(qp, mr)?;
    drop(pongs);
    drop(cq);
    drop(pd);
    let mut outcome = hs.verify(&buf[..len.min(buf.len())], None, Some(&written));
    drop(buf);
    // The bench pattern is not text: say what was checked instead of echoing bytes.
    outcome.text = format!("{mode} {:?} x {}", b.sizes, b.iters);
    outcome.truncated = false;
    report_verdict(s, id, &outcome, || match &outcome.reason {
        None => format!(
            "[{id}] {mode} verified: the final {} bytes match (crc32c {:#010x})",
            outcome.length, outcome.crc32c
        ),
        Some(r) => format!("[{id}] {mode} verification FAILED: {r}"),
    });
    let result = hs.result(outcome)?;
    conn.send_line(&result.to_line(), Instant::now() + s.timeout)?;
    Ok(())
}

/// The server's half of the ping-pong.
struct Pong<'a> {
    qp: &'a QueuePair<Rts>,
    cq: &'a CompletionQueue,
    /// Where the client's pings land.
    mr: &'a ExposedRegion,
    /// The client's buffer, where pongs go.
    remote: RemoteBuffer,
    inline: u32,
}

impl Pong<'_> {
    fn run(
        &self,
        s: &SessionCtx,
        conn: &mut LineConn<TcpStream>,
        hs: &mut ServerHandshake,
        b: &BenchParams,
        src: &mut MemoryRegion,
    ) -> Result<(), Failure> {
        let failed = |e: rdma_core_rs::Error| {
            Failure::new(
                ErrorCode::WriteFailed,
                format!("bench lat: a pong failed: {e}"),
            )
        };
        let mut posted: u64 = 0;
        let mut completed: u64 = 0;
        let mut restore: Option<usize> = None;
        for &size in &b.sizes {
            let size = usize::try_from(size).unwrap_or(usize::MAX).min(src.len());
            let last = size - 1;
            let flags = |n: u64| WriteFlags {
                imm: None,
                signaled: n % SIGNAL_EVERY == 0 || n == b.iters,
                inline: size <= self.inline as usize,
            };
            for n in 1..=b.iters {
                let want = bench::counter(n);
                self.wait_ping(s, conn, hs, last, want, &mut completed)?;
                // A ping of the next size means the client read our last pong of the previous
                // one: the byte that carried its counter goes back to the pattern.
                if let Some(i) = restore.take() {
                    src.as_mut_slice()[i] = bench::pattern_byte(i);
                }
                src.as_mut_slice()[last] = want;
                if n == b.iters {
                    // Once this pong is read the next size's pongs carry the pattern here.
                    restore = Some(last);
                }
                // Keep the send queue from filling: reap until a slot is free.
                while posted - completed >= u64::from(SQ_DEPTH) - 1 {
                    let c = self.cq.poll(Instant::now() + s.timeout).map_err(failed)?;
                    completed = c.wr_id + 1;
                }
                self.qp
                    .post_write_with(src, 0..size, self.remote, flags(n), posted)
                    .map_err(failed)?;
                posted += 1;
            }
        }
        Ok(())
    }

    /// Spins on the last byte of the ping until it is `want`, reaping completions meanwhile;
    /// a client that stops answering, or a server stopping, ends the wait.
    fn wait_ping(
        &self,
        s: &SessionCtx,
        conn: &mut LineConn<TcpStream>,
        hs: &mut ServerHandshake,
        last: usize,
        want: u8,
        completed: &mut u64,
    ) -> Result<(), Failure> {
        // The clock is read only when a ping is slow to come (a read is costly under
        // emulation), and the spin never pauses the CPU.
        let mut start: Option<Instant> = None;
        let mut spins: u32 = 0;
        loop {
            if self.mr.volatile_byte(last) == Some(want) {
                return Ok(());
            }
            spins = spins.wrapping_add(1);
            if spins % 1024 == 0 {
                let start = *start.get_or_insert_with(Instant::now);
                if let Some(c) = self.cq.try_poll().map_err(|e| {
                    Failure::new(
                        ErrorCode::WriteFailed,
                        format!("bench lat: a pong failed: {e}"),
                    )
                })? {
                    *completed = c.wr_id + 1;
                }
                if start.elapsed() > s.timeout {
                    return Err(Failure::new(
                        ErrorCode::Timeout,
                        format!(
                            "bench lat: no ping arrived within {:?}; the client stopped",
                            s.timeout
                        ),
                    ));
                }
                // A client that closed or spoke mid-exchange ends the session now, not at the
                // deadline (a syscall every ~64 Ki spins).
                if spins % (64 * 1024) == 0 && client_spoke(conn) {
                    let event = next_event(conn, hs, Instant::now() + s.timeout)?;
                    return Err(out_of_order(&event));
                }
                if s.stopping.load(Ordering::Acquire) {
                    return Err(Failure::new(
                        ErrorCode::ShuttingDown,
                        "the server is shutting down",
                    ));
                }
            }
        }
    }
}
