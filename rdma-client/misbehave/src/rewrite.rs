//! `rewrite-after-imm`: a client that keeps RDMA-Writing other bytes into the server's buffer
//! right behind the write it announced, and then holds the server's verdict to what it really
//! wrote.
//!
//! A server that reads its buffer while the client can still write it may verify one thing and
//! report another. Whatever the timing, a correct server revokes the client's access first and
//! then reads, so its verdict describes one whole write of ours (the payload, or rewrite `n`),
//! one that landed no earlier than the last rewrite the server acknowledged, and says
//! `verified` exactly when it describes the payload.

use color_eyre::eyre::Result;
use rdma_core_rs::{
    Access, CompletionQueue, MemoryRegion, ProtectionDomain, QueuePair, RemoteBuffer, Rts,
};
use rdma_proto::{Outcome, ProtoError};
use std::time::{Duration, Instant};

/// Work request id of the rewrites.
const REWRITE_WR_ID: u64 = 0x5245_5752; // "REWR"
/// Rewrites in flight at once (the send queue and the CQ hold more than this plus our write).
pub const DEPTH: usize = 8;
/// How long the rewrites go on at most, and how many there are at most.
const REWRITE_FOR: Duration = Duration::from_secs(3);
const MAX_REWRITES: u32 = 1000;

/// What the rewrites did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RewriteLog {
    /// Rewrites posted: 1..=posted may have landed.
    pub posted: u32,
    /// The last rewrite whose write completed: the server's NIC placed it (0: none).
    pub acked: u32,
}

/// The `n`th rewrite of a payload of `len` bytes (n >= 1): printable, telling which it is.
fn rewrite(len: usize, n: u32) -> Vec<u8> {
    format!("<rewrite {n}>").bytes().cycle().take(len).collect()
}

/// Rewrites in flight, each from its own slot of one source region (a slot is refilled only
/// after its write completed, so no write ever sends half of two rewrites).
#[derive(Debug)]
pub struct Rewriter {
    slots: MemoryRegion,
    len: usize,
    remote: RemoteBuffer,
    log: RewriteLog,
    until: Instant,
}

impl Rewriter {
    /// Posts the first [`DEPTH`] rewrites right behind the write already posted on `qp`.
    ///
    /// # Errors
    /// Registering the slots failed.
    pub fn start(
        pd: &ProtectionDomain,
        qp: &QueuePair<Rts>,
        len: usize,
        remote: RemoteBuffer,
    ) -> Result<Self> {
        let mut r = Rewriter {
            slots: pd.register(len * DEPTH, Access::NONE)?,
            len,
            remote,
            log: RewriteLog {
                posted: 0,
                acked: 0,
            },
            until: Instant::now() + REWRITE_FOR,
        };
        for _ in 0..DEPTH {
            if !r.post_next(qp) {
                break;
            }
        }
        Ok(r)
    }

    /// Posts rewrite `posted + 1` into its slot; false when done or refused.
    fn post_next(&mut self, qp: &QueuePair<Rts>) -> bool {
        if self.log.posted >= MAX_REWRITES || Instant::now() >= self.until {
            return false;
        }
        let n = self.log.posted + 1;
        let at = (n as usize % DEPTH) * self.len;
        let range = at..at + self.len;
        self.slots.as_mut_slice()[range.clone()].copy_from_slice(&rewrite(self.len, n));
        if qp
            .post_write(&self.slots, range, self.remote, None, REWRITE_WR_ID)
            .is_err()
        {
            return false;
        }
        self.log.posted = n;
        true
    }

    /// Keeps [`DEPTH`] rewrites in flight (completions arrive in posting order) until one fails
    /// (the server revoked our access, as it must before it reads) or time is up.
    pub fn finish(
        mut self,
        qp: &QueuePair<Rts>,
        cq: &CompletionQueue,
        timeout: Duration,
    ) -> RewriteLog {
        while self.log.acked < self.log.posted {
            if cq.poll(Instant::now() + timeout).is_err() {
                break;
            }
            self.log.acked += 1;
            self.post_next(qp);
        }
        eprintln!(
            "misbehave: rewrote the server's buffer {} time(s) after the write ({} posted)",
            self.log.acked, self.log.posted
        );
        self.log
    }
}

/// Holds the server's verdict to the bytes we wrote (see the module docs).
///
/// # Errors
/// `verify_failed` (exit code 9) naming the contradiction.
pub fn check_verdict(payload: &[u8], log: RewriteLog, verdict: &Outcome) -> Result<()> {
    let fail = |reason: String| Err(ProtoError::VerifyFailed { reason }.into());
    let described = (0..=log.posted).find(|&n| {
        let candidate = if n == 0 {
            payload.to_vec()
        } else {
            rewrite(payload.len(), n)
        };
        let (text, truncated) = rdma_proto::preview_text(&candidate);
        verdict.length == candidate.len() as u64
            && verdict.crc32c == rdma_proto::crc32c(&candidate)
            && verdict.text == text
            && verdict.truncated == truncated
    });
    let Some(n) = described else {
        return fail(format!(
            "the server reported {} bytes with crc32c {:#010x} and text {:?}, which is none of \
             the {} payload(s) we wrote: it read bytes that were still changing",
            verdict.length,
            verdict.crc32c,
            rdma_proto::printable(&verdict.text),
            log.posted + 1
        ));
    };
    if n < log.acked {
        return fail(format!(
            "the server's verdict describes write {n}, but write {} had landed before it revoked \
             our access: it read its buffer while we could still write it",
            log.acked
        ));
    }
    if verdict.verified != (n == 0) {
        return fail(format!(
            "the server reports verified={} for write {n} (0 is the payload it was told about)",
            verdict.verified
        ));
    }
    eprintln!(
        "misbehave: the server's verdict (verified={}) describes write {n} of {} whole",
        verdict.verified, log.posted
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdict_of(bytes: &[u8], verified: bool) -> Outcome {
        let (text, truncated) = rdma_proto::preview_text(bytes);
        Outcome {
            verified,
            length: bytes.len() as u64,
            crc32c: rdma_proto::crc32c(bytes),
            text,
            truncated,
            reason: None,
            stamps: None,
        }
    }

    const PAYLOAD: &[u8] = b"Hello RDMA Write!";

    #[test]
    fn rewrites_differ_and_keep_the_length() {
        assert_eq!(rewrite(17, 3), b"<rewrite 3><rewri");
        assert_ne!(rewrite(17, 1), rewrite(17, 2));
        assert_eq!(rewrite(5, 10).len(), 5);
    }

    #[test]
    fn a_verdict_on_one_whole_write_passes() {
        let log = RewriteLog {
            posted: 5,
            acked: 3,
        };
        let none = RewriteLog {
            posted: 5,
            acked: 0,
        };
        assert!(check_verdict(PAYLOAD, none, &verdict_of(PAYLOAD, true)).is_ok());
        for n in 3..=5 {
            let v = verdict_of(&rewrite(17, n), false);
            assert!(check_verdict(PAYLOAD, log, &v).is_ok(), "rewrite {n}");
        }
    }

    #[test]
    fn contradictions_fail() {
        let log = RewriteLog {
            posted: 5,
            acked: 3,
        };
        let why = |v: &Outcome| check_verdict(PAYLOAD, log, v).unwrap_err().to_string();
        // Read before rewrite 3 landed, although it landed before access was revoked.
        assert!(why(&verdict_of(&rewrite(17, 2), false)).contains("while we could still write"));
        assert!(why(&verdict_of(PAYLOAD, true)).contains("while we could still write"));
        // The CRC of one write with the text of another: bytes that changed during the read.
        let mut torn = verdict_of(&rewrite(17, 4), false);
        torn.crc32c = rdma_proto::crc32c(&rewrite(17, 5));
        assert!(why(&torn).contains("none of"));
        // Half of one write, half of another.
        let mut mixed = rewrite(17, 4);
        mixed[..8].copy_from_slice(&PAYLOAD[..8]);
        assert!(why(&verdict_of(&mixed, false)).contains("none of"));
        // `verified` for a rewrite.
        assert!(why(&verdict_of(&rewrite(17, 4), true)).contains("verified=true"));
        // A rewrite never posted.
        assert!(why(&verdict_of(&rewrite(17, 6), false)).contains("none of"));
        let e = check_verdict(PAYLOAD, log, &verdict_of(b"x", true)).unwrap_err();
        assert!(
            e.downcast_ref::<ProtoError>()
                .is_some_and(|p| p.code() == rdma_proto::ErrorCode::VerifyFailed)
        );
    }
}
