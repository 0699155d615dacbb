//! Completion queues, polled either by busy-polling or through a completion channel: plain
//! ones (`ibv_create_cq`, polled with `ibv_poll_cq`) and extended ones (`ex`: made by
//! `ibv_create_cq_ex`, polled with `ibv_start_poll`, and able to stamp completions with the
//! device's clock). What a completion means is one rule for both (`wc`). A wait polled in
//! slices is one [`Wait`] (`wait`): its back-off and its timeout span all its slices.

mod ex;
mod wait;
mod wc;

pub use wait::Wait;

use std::ptr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ibverbs_sys as ffi;

use crate::context::Context;
use crate::error::{Error, Result, VerbOp};
use crate::types::WcOpcode;

/// How [`CompletionQueue::poll`] waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum CqMode {
    /// Busy-poll: spin briefly, then yield, then sleep with a back-off of at most 1 ms.
    #[default]
    Poll,
    /// Sleep in `poll(2)` on a completion channel, after asking for an event with
    /// `ibv_req_notify_cq`.
    Event,
}

impl CqMode {
    /// `"poll"` or `"event"`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            CqMode::Poll => "poll",
            CqMode::Event => "event",
        }
    }
}

impl std::fmt::Display for CqMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Parses `poll` or `event` (ASCII case-insensitive), e.g. for a `--cq-mode` option.
impl std::str::FromStr for CqMode {
    type Err = ParseCqModeError;
    fn from_str(s: &str) -> std::result::Result<CqMode, ParseCqModeError> {
        if s.eq_ignore_ascii_case("poll") {
            Ok(CqMode::Poll)
        } else if s.eq_ignore_ascii_case("event") {
            Ok(CqMode::Event)
        } else {
            Err(ParseCqModeError(s.to_owned()))
        }
    }
}

/// A string that is neither `poll` nor `event`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown completion mode `{0}`: use `poll` or `event`")]
pub struct ParseCqModeError(pub String);

/// One successful work completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    /// The id given when posting.
    pub wr_id: u64,
    /// What finished.
    pub opcode: WcOpcode,
    /// Bytes transferred. Defined for receive completions (for a write-with-immediate: the
    /// length of the write); verbs leaves it undefined for RDMA Write completions on the sender.
    pub byte_len: u32,
    /// The immediate value in host byte order, if the completion carries one.
    pub imm: Option<u32>,
    /// The device's clock when it made the completion, in its own ticks (it runs at
    /// [`CompletionClock::Clock`](crate::CompletionClock::Clock)'s `hca_core_clock_khz`), from
    /// a CQ made to stamp completions ([`Context::create_cq_ex`]); `None` from any other CQ.
    pub timestamp: Option<u64>,
}

pub(crate) struct CqInner {
    /// The CQ; for an extended one, `ibv_cq_ex_to_cq` of it (the same address).
    pub(crate) cq: *mut ffi::ibv_cq,
    channel: *mut ffi::ibv_comp_channel,
    mode: CqMode,
    /// How it is polled: `None` for a plain CQ.
    ex: Option<ex::Extended>,
    ctx: Context,
}

// SAFETY: CQ and completion channel handles may be used from any thread: ibv_poll_cq,
// ibv_req_notify_cq, ibv_get_cq_event and ibv_ack_cq_events are thread-safe in libibverbs. They
// are destroyed once, in Drop, after every QP holding an Arc of this inner.
unsafe impl Send for CqInner {}
// SAFETY: see `Send`.
unsafe impl Sync for CqInner {}

impl Drop for CqInner {
    fn drop(&mut self) {
        // Every event taken with ibv_get_cq_event was acked right away in `poll`, so
        // ibv_destroy_cq cannot block on unacked events.
        // SAFETY: `cq` came from ibv_create_cq, or is the `ibv_cq` of one from
        // ibv_create_cq_ex (which ibv_destroy_cq destroys too); all QPs using it are gone
        // (they hold Arcs).
        let rc = unsafe { ffi::ibv_destroy_cq(self.cq) };
        if rc != 0 {
            tracing::warn!(rc, "ibv_destroy_cq failed");
        }
        if !self.channel.is_null() {
            // SAFETY: the channel came from ibv_create_comp_channel; its only CQ is destroyed.
            let rc = unsafe { ffi::ibv_destroy_comp_channel(self.channel) };
            if rc != 0 {
                tracing::warn!(rc, "ibv_destroy_comp_channel failed");
            }
        }
    }
}

impl std::fmt::Debug for CqInner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompletionQueue")
            .field("device", &self.ctx.name())
            .field("mode", &self.mode)
            .field("extended", &self.ex)
            .finish()
    }
}

/// A completion queue. Cheap to clone; keeps its context and completion channel alive.
#[derive(Clone, Debug)]
#[must_use]
pub struct CompletionQueue(pub(crate) Arc<CqInner>);

/// Owns a completion channel until it is handed to a CQ.
struct ChannelGuard(*mut ffi::ibv_comp_channel);

impl Drop for ChannelGuard {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: created by ibv_create_comp_channel, no CQ uses it (creation failed).
            unsafe { ffi::ibv_destroy_comp_channel(self.0) };
        }
    }
}

impl Context {
    /// Creates a completion queue with room for at least `entries` completions.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for 0 or more than `i32::MAX` entries, [`Error::Verb`]
    /// ([`VerbOp::CreateCompChannel`], [`VerbOp::CreateCq`]).
    pub fn create_cq(&self, entries: u32, mode: CqMode) -> Result<CompletionQueue> {
        let cqe = cq_entries(entries)?;
        let channel = self.comp_channel(mode)?;
        // SAFETY: valid context; the channel is null or valid and outlives the CQ (both are
        // destroyed by CqInner, CQ first).
        let cq = unsafe { ffi::ibv_create_cq(self.raw(), cqe, ptr::null_mut(), channel.0, 0) };
        if cq.is_null() {
            return Err(Error::last_os(
                VerbOp::CreateCq,
                format!("{entries} entries"),
            ));
        }
        Ok(channel.into_cq(cq, mode, None, self))
    }

    /// The completion channel a CQ in `mode` needs (none for [`CqMode::Poll`]), its fd
    /// non-blocking.
    fn comp_channel(&self, mode: CqMode) -> Result<ChannelGuard> {
        let mut guard = ChannelGuard(ptr::null_mut());
        if mode == CqMode::Event {
            // SAFETY: valid context.
            let ch = unsafe { ffi::ibv_create_comp_channel(self.raw()) };
            if ch.is_null() {
                return Err(Error::last_os(
                    VerbOp::CreateCompChannel,
                    self.name().to_owned(),
                ));
            }
            guard.0 = ch;
            // SAFETY: `ch` is valid; fd is its open file descriptor.
            let fd = unsafe { (*ch).fd };
            crate::fd::set_nonblocking(fd)
                .map_err(|errno| Error::verb(VerbOp::CreateCompChannel, "O_NONBLOCK", errno))?;
        }
        Ok(guard)
    }
}

/// The `cqe` of a CQ with room for `entries` completions.
fn cq_entries(entries: u32) -> Result<libc::c_int> {
    libc::c_int::try_from(entries)
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| {
            Error::invalid(
                format!("completion queue size {entries}"),
                "use between 1 and the device's max_cqe entries",
            )
        })
}

impl ChannelGuard {
    /// Hands the channel to `cq`, just created with it, and owns both from now on.
    fn into_cq(
        mut self,
        cq: *mut ffi::ibv_cq,
        mode: CqMode,
        ex: Option<ex::Extended>,
        ctx: &Context,
    ) -> CompletionQueue {
        let channel = std::mem::replace(&mut self.0, ptr::null_mut());
        CompletionQueue(Arc::new(CqInner {
            cq,
            channel,
            mode,
            ex,
            ctx: ctx.clone(),
        }))
    }
}

impl CompletionQueue {
    /// How this CQ waits.
    #[must_use]
    pub fn mode(&self) -> CqMode {
        self.0.mode
    }

    pub(crate) fn same_context(&self, ctx: &Context) -> bool {
        Arc::ptr_eq(&self.0.ctx.0, &ctx.0)
    }

    /// Waits for ONE completion until `deadline`.
    ///
    /// # Errors
    /// [`Error::Timeout`] at the deadline; [`Error::Completion`] if the completion has an error
    /// status (with advice for that status); [`Error::Verb`] if polling itself fails.
    pub fn poll(&self, deadline: Instant) -> Result<Completion> {
        let mut wait = Wait::until(deadline);
        match self.poll_until(&mut wait, deadline)? {
            Some(c) => Ok(c),
            None => Err(wait.timed_out()),
        }
    }

    /// Waits for ONE completion for a slice of `wait`: at most `slice`, never past its
    /// deadline. For a caller that looks at something else between slices (a stop, the
    /// peer's answer): the back-off goes on from where the last slice left it, and the
    /// timeout quotes the whole wait, not the last slice.
    ///
    /// ```no_run
    /// # fn f(cq: &rdma_core_rs::CompletionQueue) -> rdma_core_rs::Result<()> {
    /// use std::time::Duration;
    /// let mut wait = rdma_core_rs::Wait::new(Duration::from_secs(6));
    /// let done = loop {
    ///     if let Some(c) = cq.poll_slice(&mut wait, Duration::from_millis(20))? {
    ///         break c;
    ///     }
    ///     // Look at something else; `Err(Timeout)` above once the 6 s have passed.
    /// };
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Timeout`] once the whole wait is over (`Ok(None)` when only the slice is);
    /// [`Error::Completion`], [`Error::Verb`] as [`poll`](Self::poll).
    pub fn poll_slice(&self, wait: &mut Wait, slice: Duration) -> Result<Option<Completion>> {
        let end = wait.begin_slice(Instant::now(), slice);
        match self.poll_until(wait, end)? {
            Some(c) => Ok(Some(c)),
            None if wait.is_over(Instant::now()) => Err(wait.timed_out()),
            None => Ok(None),
        }
    }

    /// Polls for ONE completion until `end` (within `wait`): `None` at `end`.
    fn poll_until(&self, wait: &mut Wait, end: Instant) -> Result<Option<Completion>> {
        let mut notify_requested = false;
        loop {
            if let Some(c) = self.poll_once()? {
                return c.map(Some);
            }
            let now = Instant::now();
            if now >= end {
                return Ok(None);
            }
            match self.0.mode {
                CqMode::Poll => {
                    wait.idle_rounds = wait.idle_rounds.saturating_add(1);
                    backoff(wait.idle_rounds, end - now);
                }
                CqMode::Event => {
                    if notify_requested {
                        self.wait_event(end - now)?;
                        notify_requested = false;
                    } else {
                        self.request_notify()?;
                        notify_requested = true;
                        // Poll again before sleeping: a completion may have arrived before the
                        // request.
                    }
                }
            }
        }
    }

    /// Non-blocking: takes at most one completion, if one is there. For loops that spin on
    /// something else as well (a ping-pong byte) and must never sleep.
    ///
    /// # Errors
    /// [`Error::Completion`] for a completion with an error status, [`Error::Verb`] if polling
    /// fails.
    pub fn try_poll(&self) -> Result<Option<Completion>> {
        self.poll_once()?.transpose()
    }

    /// Non-blocking: takes at most one completion.
    fn poll_once(&self) -> Result<Option<Result<Completion>>> {
        let cq = self.0.cq;
        if let Some(ex) = &self.0.ex {
            return ex.poll_once(cq);
        }
        let mut wc = ffi::ibv_wc::default();
        // SAFETY: `cq` is valid; its context pointer is the open context we hold.
        let poll_fn = unsafe { (*(*cq).context).ops.poll_cq };
        let Some(poll_fn) = poll_fn else {
            return Err(Error::verb(
                VerbOp::PollCq,
                "(provider has no poll_cq)",
                libc::ENOSYS,
            ));
        };
        // SAFETY: valid CQ, room for exactly one ibv_wc.
        let n = unsafe { poll_fn(cq, 1, &mut wc) };
        if n < 0 {
            // ibv_poll_cq returns a negative value without a defined errno.
            return Err(Error::verb(
                VerbOp::PollCq,
                format!("(returned {n})"),
                libc::EIO,
            ));
        }
        if n == 0 {
            return Ok(None);
        }
        Ok(Some(wc::RawWc::from_wc(&wc).judge()))
    }

    /// Asks for an event on the completion channel at the next completion
    /// (`ibv_req_notify_cq`).
    fn request_notify(&self) -> Result<()> {
        let cq = self.0.cq;
        // SAFETY: as in `poll_once`.
        let notify = unsafe { (*(*cq).context).ops.req_notify_cq };
        let Some(notify) = notify else {
            return Err(Error::verb(
                VerbOp::ReqNotifyCq,
                "(provider has none)",
                libc::ENOSYS,
            ));
        };
        // SAFETY: valid CQ; 0 = notify on any completion.
        let rc = unsafe { notify(cq, 0) };
        if rc != 0 {
            return Err(Error::verb(VerbOp::ReqNotifyCq, "", rc));
        }
        Ok(())
    }

    /// Sleeps in poll(2) until the channel is readable or `timeout` passes, then takes and acks
    /// every pending event. Returning without an event is fine: the caller polls and re-checks
    /// its deadline.
    fn wait_event(&self, timeout: Duration) -> Result<()> {
        let channel = self.0.channel;
        // SAFETY: in Event mode the channel is valid for the CQ's lifetime.
        let fd = unsafe { (*channel).fd };
        let readable = crate::fd::wait_readable(fd, timeout)
            .map_err(|errno| Error::verb(VerbOp::WaitCqEvent, "poll(2)", errno))?;
        if !readable {
            return Ok(());
        }
        loop {
            let mut ev_cq: *mut ffi::ibv_cq = ptr::null_mut();
            let mut ev_ctx: *mut libc::c_void = ptr::null_mut();
            // SAFETY: valid channel (non-blocking fd) and out-pointers.
            let rc = unsafe { ffi::ibv_get_cq_event(channel, &mut ev_cq, &mut ev_ctx) };
            if rc != 0 {
                let errno = std::io::Error::last_os_error()
                    .raw_os_error()
                    .unwrap_or(libc::EIO);
                return if errno == libc::EAGAIN || errno == libc::EINTR {
                    Ok(())
                } else {
                    Err(Error::verb(VerbOp::WaitCqEvent, "", errno))
                };
            }
            if !ev_cq.is_null() {
                // SAFETY: ack the one event just taken, so destroy_cq never waits for it.
                unsafe { ffi::ibv_ack_cq_events(ev_cq, 1) };
            }
        }
    }
}

/// What busy polling does between two empty polls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Backoff {
    Spin,
    Yield,
    Sleep(Duration),
}

/// The longest sleep between two polls.
const MAX_BACKOFF_SLEEP: Duration = Duration::from_millis(1);

/// Back-off for busy polling after `round` empty polls: spin, then yield, then sleep a growing
/// step of at most [`MAX_BACKOFF_SLEEP`], never past the `left` time to the deadline.
fn backoff_step(round: u32, left: Duration) -> Backoff {
    if round < 64 {
        Backoff::Spin
    } else if round < 256 {
        Backoff::Yield
    } else {
        let step = Duration::from_micros(u64::from(round - 255));
        Backoff::Sleep(step.min(left).min(MAX_BACKOFF_SLEEP))
    }
}

fn backoff(round: u32, left: Duration) {
    match backoff_step(round, left) {
        Backoff::Spin => std::hint::spin_loop(),
        Backoff::Yield => std::thread::yield_now(),
        Backoff::Sleep(d) => std::thread::sleep(d),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cq_mode_parses_and_prints() {
        assert_eq!("poll".parse::<CqMode>(), Ok(CqMode::Poll));
        assert_eq!("EVENT".parse::<CqMode>(), Ok(CqMode::Event));
        assert!(
            "busy"
                .parse::<CqMode>()
                .unwrap_err()
                .to_string()
                .contains("`poll` or `event`")
        );
        for m in [CqMode::Poll, CqMode::Event] {
            assert_eq!(m.to_string().parse::<CqMode>(), Ok(m));
        }
    }

    #[test]
    fn backoff_never_sleeps_past_the_deadline_or_the_cap() {
        let lefts = [
            Duration::ZERO,
            Duration::from_micros(10),
            Duration::from_micros(999),
            Duration::from_secs(5),
        ];
        for left in lefts {
            for round in [0, 63, 64, 255, 256, 300, 1255, 1256, 5000, u32::MAX] {
                if let Backoff::Sleep(d) = backoff_step(round, left) {
                    assert!(d <= left, "round {round}: sleeps {d:?} with {left:?} left");
                    assert!(d <= MAX_BACKOFF_SLEEP, "round {round}: sleeps {d:?}");
                }
            }
        }
        // The phases, and a step that grows to the cap when time allows.
        let long = Duration::from_secs(5);
        assert_eq!(backoff_step(0, long), Backoff::Spin);
        assert_eq!(backoff_step(64, long), Backoff::Yield);
        assert_eq!(
            backoff_step(256, long),
            Backoff::Sleep(Duration::from_micros(1))
        );
        assert_eq!(
            backoff_step(100_000, long),
            Backoff::Sleep(MAX_BACKOFF_SLEEP)
        );
    }
}
