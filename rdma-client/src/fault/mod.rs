//! Test hooks: a client that misbehaves on purpose (`--fault`), for the end-to-end fault tests.
//! They exist only in a build with the `fault-injection` feature, which `cargo xtask e2e`
//! turns on; a release build (and so the .deb) has no `--fault` flag and no hook code: there
//! [`Faults`] is empty and every hook does nothing.

#[cfg(feature = "fault-injection")]
mod rewrite;

use crate::bench::hot::{self, Link};
use rdma_core_rs::{CompletionQueue, ProtectionDomain, QueuePair, RemoteBuffer, Rts};
use rdma_proto::Outcome;
use std::time::Duration;

/// Deliberate misbehaviour for fault-injection tests.
#[cfg(feature = "fault-injection")]
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Fault {
    /// Write with a corrupted rkey: the server's NIC must refuse it.
    WrongRkey,
    /// Write just past the end of the server's buffer.
    OutOfBounds,
    /// SIGKILL ourselves right after sending the hello.
    KillAfterHello,
    /// SIGKILL ourselves after the accept, with our QP in RTS.
    KillAfterAccept,
    /// SIGKILL ourselves after the write completed, before the verdict.
    KillAfterWrite,
    /// After the write the server is told about, keep RDMA-Writing other bytes into its buffer;
    /// exit 0 only if the server's verdict describes bytes we wrote, consistently.
    RewriteAfterImm,
    /// In a `--bench lat` session, wait a second before each ping: a peer that holds its
    /// bench slot by pinging just often enough (the server must end it at --bench-max-time).
    SlowPing,
    /// Through RDMA CM, present a nonce one bit off the server's: the server must reject the
    /// connection request (and go on serving).
    CmBadNonce,
}

/// How long `slow-ping` waits before each ping.
#[cfg(feature = "fault-injection")]
pub const SLOW_PING: Duration = Duration::from_secs(1);

/// A [`Link`] whose pings go out [`SLOW_PING`] apart.
#[cfg(feature = "fault-injection")]
struct Paced<'a, L>(&'a mut L);

#[cfg(feature = "fault-injection")]
impl<L: Link> Link for Paced<'_, L> {
    type Error = L::Error;
    fn post(
        &mut self,
        size: usize,
        last: Option<u8>,
        signaled: bool,
        wr_id: u64,
    ) -> Result<(), L::Error> {
        std::thread::sleep(SLOW_PING);
        self.0.post(size, last, signaled, wr_id)
    }
    fn try_poll(&mut self) -> Result<Option<u64>, L::Error> {
        self.0.try_poll()
    }
    fn poll(&mut self, deadline: std::time::Instant) -> Result<u64, L::Error> {
        self.0.poll(deadline)
    }
    fn byte(&self, index: usize) -> u8 {
        self.0.byte(index)
    }
    fn timeout(&self, what: &'static str, waited: Duration) -> L::Error {
        self.0.timeout(what, waited)
    }
}

/// Where a client can be told to die: right after this step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Our hello is sent.
    Hello,
    /// The server's accept is in, our QP in RTS.
    Accept,
    /// Our write completed, before the verdict.
    Write,
}

/// The hooks this run was asked for (always none without `fault-injection`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Faults {
    #[cfg(feature = "fault-injection")]
    pub fault: Option<Fault>,
}

/// Completions the hooks may add to a write's completion queue.
#[cfg(feature = "fault-injection")]
pub const EXTRA_COMPLETIONS: u32 = 2 * rewrite::DEPTH as u32;
/// Completions the hooks may add to a write's completion queue.
#[cfg(not(feature = "fault-injection"))]
pub const EXTRA_COMPLETIONS: u32 = 0;

impl Faults {
    /// The lat ping-pong over `link`; with `slow-ping` (fault-injection builds only) its pings
    /// are paced a second apart (`SLOW_PING`).
    pub fn ping_pong<L: Link>(
        &self,
        link: &mut L,
        size: usize,
        iters: u64,
        wr_base: u64,
        timeout: Duration,
        samples: &mut Vec<f64>,
    ) -> Result<(), L::Error> {
        #[cfg(feature = "fault-injection")]
        if self.fault == Some(Fault::SlowPing) {
            return hot::ping_pong(&mut Paced(link), size, iters, wr_base, timeout, samples);
        }
        hot::ping_pong(link, size, iters, wr_base, timeout, samples)
    }

    /// The nonce our RDMA CM connection request presents: the server's (with `cm-bad-nonce`,
    /// one bit off).
    pub fn nonce(&self, nonce: [u8; rdma_proto::cm::NONCE_LEN]) -> [u8; rdma_proto::cm::NONCE_LEN] {
        #[cfg(feature = "fault-injection")]
        if self.fault == Some(Fault::CmBadNonce) {
            let mut off = nonce;
            off[0] ^= 1;
            return off;
        }
        nonce
    }
}

#[cfg(feature = "fault-injection")]
impl Faults {
    /// SIGKILLs the process, as a crash would, when told to die at `stage`.
    pub fn kill_at(&self, stage: Stage) {
        let at = match stage {
            Stage::Hello => Fault::KillAfterHello,
            Stage::Accept => Fault::KillAfterAccept,
            Stage::Write => Fault::KillAfterWrite,
        };
        if self.fault == Some(at) {
            eprintln!("fault injection: SIGKILL at {at:?}");
            // SAFETY: kill(2) on our own pid with a valid signal number has no memory-safety
            // preconditions; SIGKILL ends the process here, as a crash would.
            unsafe {
                libc::kill(libc::getpid(), libc::SIGKILL);
            }
        }
    }

    /// Where the write goes: the server's buffer, or a corrupted rkey, or past its end.
    pub fn aim(&self, mut remote: RemoteBuffer) -> RemoteBuffer {
        match self.fault {
            Some(Fault::WrongRkey) => remote.rkey ^= 0x00ff_ff00,
            // Aim past the end of the buffer while still claiming it fits.
            Some(Fault::OutOfBounds) => remote.addr = remote.addr.wrapping_add(remote.len),
            _ => {}
        }
        remote
    }

    /// With `rewrite-after-imm`: more writes right behind ours, still going when the server
    /// hears of ours.
    pub fn rewrites(
        &self,
        pd: &ProtectionDomain,
        qp: &QueuePair<Rts>,
        len: usize,
        remote: RemoteBuffer,
    ) -> color_eyre::Result<Option<Rewrites>> {
        Ok(match self.fault {
            Some(Fault::RewriteAfterImm) => {
                Some(Rewrites(rewrite::Rewriter::start(pd, qp, len, remote)?))
            }
            _ => None,
        })
    }
}

#[cfg(not(feature = "fault-injection"))]
impl Faults {
    /// No hooks in this build.
    pub fn kill_at(&self, _stage: Stage) {}

    /// No hooks in this build: the server's buffer.
    pub fn aim(&self, remote: RemoteBuffer) -> RemoteBuffer {
        remote
    }

    /// No hooks in this build.
    pub fn rewrites(
        &self,
        _pd: &ProtectionDomain,
        _qp: &QueuePair<Rts>,
        _len: usize,
        _remote: RemoteBuffer,
    ) -> color_eyre::Result<Option<Rewrites>> {
        Ok(None)
    }
}

/// Rewrites in flight (`rewrite-after-imm`); there are none without `fault-injection`.
#[derive(Debug)]
pub struct Rewrites(
    #[cfg(feature = "fault-injection")] rewrite::Rewriter,
    #[cfg(not(feature = "fault-injection"))] std::convert::Infallible,
);

impl Rewrites {
    /// Lets the rewrites run out, then holds the server's `verdict` to what we wrote: any
    /// verdict that describes bytes we wrote is right (see `rewrite`).
    pub fn check(
        self,
        qp: &QueuePair<Rts>,
        cq: &CompletionQueue,
        timeout: Duration,
        payload: &[u8],
        verdict: &Outcome,
    ) -> color_eyre::Result<()> {
        #[cfg(feature = "fault-injection")]
        {
            let log = self.0.finish(qp, cq, timeout);
            rewrite::check_verdict(payload, log, verdict)
        }
        #[cfg(not(feature = "fault-injection"))]
        {
            let _ = (qp, cq, timeout, payload, verdict);
            match self.0 {}
        }
    }
}
