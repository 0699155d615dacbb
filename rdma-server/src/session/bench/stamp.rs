//! The stamped exchange that ends a `lat` sweep where the client asked for it
//! (`hello.bench.stamped`, [`Turnaround`]): the client's one-byte write with immediate
//! [`STAMP_IMM`] completes the receive posted for it, the server answers with one byte with
//! immediate into the client's buffer, and, where the device stamps completions (an extended
//! CQ, [`rdma_core_rs::Context::create_cq_ex`]), the two stamps go back in the `result`.
//! Both writes carry the byte that is already there (the last exchange's counter), so the
//! final content does not change.

use std::net::TcpStream;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rdma_core_rs::{Completion, CompletionClock, MemoryRegion, WcOpcode, WriteFlags};
use rdma_proto::bench::{STAMP_IMM, Turnaround};
use rdma_proto::framing::LineConn;
use rdma_proto::{ErrorCode, ServerEvent, ServerHandshake};

use super::pong::{Pong, SessionClock};
use crate::failure::Failure;
use crate::session::ctx::SessionCtx;
use crate::session::steps::next_event;

/// The work request id of the receive posted for the client's stamped ping.
pub(super) const RECV_WR: u64 = u64::MAX - 1;
/// The work request id of the server's stamped answer.
const ANSWER_WR: u64 = u64::MAX - 2;
/// The longest sleep between two looks for the stamped ping.
const NAP: Duration = Duration::from_micros(200);

/// The `result.stamps` of an exchange whose ping was received at `ping` and answered at
/// `answer`: only where the device has a clock and both completions carry its stamp.
pub(super) fn turnaround(
    clock: Option<CompletionClock>,
    ping: &Completion,
    answer: &Completion,
) -> Option<Turnaround> {
    let Some(CompletionClock::Clock {
        hca_core_clock_khz,
        timestamp_mask,
    }) = clock
    else {
        return None;
    };
    Some(Turnaround {
        recv: ping.timestamp?,
        send: answer.timestamp?,
        clock_khz: hca_core_clock_khz,
        mask: timestamp_mask,
    })
}

impl Pong<'_> {
    /// The stamped exchange, after the sweep's last pong was reaped: waits for the client's
    /// ping (its receive completion), answers it, waits for the answer's completion, and posts
    /// the receive for the next round's ping when the session is kept. Returns the stamps,
    /// where the device gives them.
    pub(super) fn stamped(
        &self,
        s: &SessionCtx,
        conn: &mut LineConn<TcpStream>,
        hs: &mut ServerHandshake,
        src: &MemoryRegion,
        clock: &SessionClock,
        stamps: Option<CompletionClock>,
    ) -> Result<Option<Turnaround>, Failure> {
        let failed = |e: rdma_core_rs::Error| {
            Failure::new(
                ErrorCode::WriteFailed,
                format!("bench lat: the stamped exchange failed: {e}"),
            )
        };
        let ping = self.stamped_ping(s, conn, hs, clock)?;
        if ping.imm != Some(STAMP_IMM) {
            return Err(Failure::new(
                ErrorCode::InvalidField,
                format!(
                    "bench lat: the stamped exchange's ping carried immediate {:?}, not {STAMP_IMM:#x}",
                    ping.imm
                ),
            ));
        }
        // The last byte of the session's buffers: the last exchange's counter on both sides.
        let at = src.len().saturating_sub(1);
        let to = self.remote.range(at as u64, 1).ok_or_else(|| {
            Failure::new(
                ErrorCode::Internal,
                "bench lat: the client's buffer is shorter than the session's",
            )
        })?;
        self.qp
            .post_write_with(
                src,
                at..at + 1,
                to,
                WriteFlags::with_imm(STAMP_IMM),
                ANSWER_WR,
            )
            .map_err(failed)?;
        let (deadline, _) = clock.wait_deadline(Instant::now());
        let answer = loop {
            let c = self.cq.poll(deadline).map_err(failed)?;
            if c.wr_id == ANSWER_WR {
                break c;
            }
        };
        if hs.keep_alive().is_some() {
            self.qp.post_recv(RECV_WR).map_err(failed)?;
        }
        Ok(turnaround(stamps, &ping, &answer))
    }

    /// The receive completion of the client's stamped ping: reaped already by the sweep's
    /// loop, or waited for here (naps of at most [`NAP`]); a client that speaks or leaves
    /// instead, a stop, or the wait's deadline ends the wait.
    fn stamped_ping(
        &self,
        s: &SessionCtx,
        conn: &mut LineConn<TcpStream>,
        hs: &mut ServerHandshake,
        clock: &SessionClock,
    ) -> Result<Completion, Failure> {
        if let Some(c) = self.early.take() {
            return Ok(c);
        }
        let (deadline, limit) = clock.wait_deadline(Instant::now());
        loop {
            let polled = self.cq.try_poll().map_err(|e| {
                Failure::new(
                    ErrorCode::WriteFailed,
                    format!("bench lat: waiting for the stamped exchange's ping: {e}"),
                )
            })?;
            if let Some(c) = polled.filter(|c| c.opcode == WcOpcode::RecvRdmaWithImm) {
                return Ok(c);
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(clock.expired(limit));
            }
            if conn.peer_spoke() {
                let what = match next_event(conn, hs, deadline)? {
                    ServerEvent::Written(_) => "`written`",
                    ServerEvent::Next(_) => "`next`",
                    ServerEvent::Hello(_) => "`hello`",
                    ServerEvent::PeerError(_) => "an `error`",
                };
                return Err(Failure::new(
                    ErrorCode::UnexpectedMessage,
                    format!(
                        "bench lat: the client sent {what} instead of the stamped exchange's ping its hello asked for"
                    ),
                ));
            }
            if s.stopping.load(Ordering::Acquire) {
                return Err(Failure::new(
                    ErrorCode::ShuttingDown,
                    "the server is shutting down",
                ));
            }
            std::thread::sleep(NAP.min(deadline - now));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn done(opcode: WcOpcode, timestamp: Option<u64>) -> Completion {
        Completion {
            wr_id: 1,
            opcode,
            byte_len: 1,
            imm: Some(STAMP_IMM),
            timestamp,
        }
    }

    #[test]
    fn stamps_go_back_only_with_a_clock_and_both_stamps() {
        let clock = Some(CompletionClock::Clock {
            hca_core_clock_khz: 156_250,
            timestamp_mask: 0xffff,
        });
        let ping = done(WcOpcode::RecvRdmaWithImm, Some(10));
        let answer = done(WcOpcode::RdmaWrite, Some(25));
        assert_eq!(
            turnaround(clock, &ping, &answer),
            Some(Turnaround {
                recv: 10,
                send: 25,
                clock_khz: 156_250,
                mask: 0xffff
            })
        );
        // Soft-RoCE: no clock, no stamps; a completion without its stamp: none either.
        let rxe = Some(CompletionClock::NoClock {
            hca_core_clock_khz: 0,
            timestamp_mask: 0,
        });
        assert_eq!(turnaround(rxe, &ping, &answer), None);
        assert_eq!(turnaround(None, &ping, &answer), None);
        let unstamped = done(WcOpcode::RdmaWrite, None);
        assert_eq!(turnaround(clock, &ping, &unstamped), None);
        assert_eq!(turnaround(clock, &unstamped, &answer), None);
    }
}
