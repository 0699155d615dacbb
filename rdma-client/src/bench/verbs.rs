//! The real [`Link`]: our QP, its CQ, the source buffer and (lat) the buffer the server's
//! pongs land in.

use std::time::{Duration, Instant};

use rdma_core_rs::{
    Completion, CompletionQueue, Error, ExposedRegion, MemoryRegion, QueuePair, RemoteBuffer, Rts,
    WcOpcode, WriteFlags,
};

use super::hot::{Done, Link, STAMP_IMM};

#[derive(Debug)]
pub struct Verbs<'a> {
    pub qp: &'a QueuePair<Rts>,
    pub cq: &'a CompletionQueue,
    pub src: &'a mut MemoryRegion,
    /// Where the server's pongs land (lat only).
    pub pongs: Option<&'a ExposedRegion>,
    pub remote: RemoteBuffer,
    /// Largest write sent inline (0: none).
    pub inline: usize,
    /// Where the last ping counter was put into `src` (lat), to restore the pattern there
    /// when the size changes: the server's final bytes must be the pattern (see
    /// `rdma_proto::bench::final_content`).
    pub counter_at: Option<usize>,
    /// The receive completion of the stamped exchange's answer, where `try_poll` or `poll`
    /// reaped it (a peer that answered before the loop expected it): kept for `poll_done`.
    pub early: Option<Completion>,
}

impl Verbs<'_> {
    /// A send completion's id; a receive's is kept for the stamped exchange (`None`).
    fn sent(&mut self, c: Completion) -> Option<u64> {
        if c.opcode == WcOpcode::RecvRdmaWithImm {
            self.early = Some(c);
            None
        } else {
            Some(c.wr_id)
        }
    }
}

fn done(c: Completion) -> Done {
    Done {
        wr_id: c.wr_id,
        received: c.opcode == WcOpcode::RecvRdmaWithImm,
        timestamp: c.timestamp,
    }
}

impl Link for Verbs<'_> {
    type Error = Error;

    fn post(
        &mut self,
        size: usize,
        last: Option<u8>,
        signaled: bool,
        wr_id: u64,
    ) -> Result<(), Error> {
        if let Some(c) = last {
            // The previous write of this buffer has landed (its pong came back), so changing
            // the byte changes only what the next write sends.
            let buf = self.src.as_mut_slice();
            if let Some(i) = self.counter_at.filter(|&i| i != size - 1) {
                buf[i] = rdma_proto::bench::pattern_byte(i);
            }
            buf[size - 1] = c;
            self.counter_at = Some(size - 1);
        }
        let flags = WriteFlags {
            imm: None,
            signaled,
            inline: size <= self.inline,
        };
        self.qp
            .post_write_with(self.src, 0..size, self.remote, flags, wr_id)
    }

    fn try_poll(&mut self) -> Result<Option<u64>, Error> {
        Ok(self.cq.try_poll()?.and_then(|c| self.sent(c)))
    }

    fn poll(&mut self, deadline: Instant) -> Result<u64, Error> {
        loop {
            let c = self.cq.poll(deadline)?;
            if let Some(id) = self.sent(c) {
                return Ok(id);
            }
        }
    }

    fn byte(&self, index: usize) -> u8 {
        self.pongs.and_then(|p| p.volatile_byte(index)).unwrap_or(0)
    }

    fn post_stamp(&mut self, at: usize, wr_id: u64) -> Result<(), Error> {
        let to = self
            .remote
            .range(at as u64, 1)
            .ok_or_else(|| Error::InvalidRange {
                what: format!("byte {at} of the server's {}-byte buffer", self.remote.len),
            })?;
        let flags = WriteFlags::with_imm(STAMP_IMM);
        self.qp
            .post_write_with(self.src, at..at + 1, to, flags, wr_id)
    }

    fn poll_done(&mut self, deadline: Instant) -> Result<Done, Error> {
        if let Some(c) = self.early.take() {
            return Ok(done(c));
        }
        Ok(done(self.cq.poll(deadline)?))
    }

    fn timeout(&self, what: &'static str, waited: Duration) -> Error {
        Error::Timeout { what, waited }
    }
}
