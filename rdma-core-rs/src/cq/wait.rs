//! One wait for a completion, which a caller may poll in slices (to look at something else
//! between them: a stop, the peer's TCP answer): when it started, when it ends, and how far
//! its back-off has gone. Its timeout error quotes the whole wait, not the last slice.

use std::time::{Duration, Instant};

use crate::error::Error;

/// What a completion queue's timeout says was waited for.
pub(crate) const WAITED_FOR: &str = "waiting for a work completion";

/// One wait for a completion until a deadline, polled at once
/// ([`CompletionQueue::poll`](crate::CompletionQueue::poll)) or in slices
/// ([`CompletionQueue::poll_slice`](crate::CompletionQueue::poll_slice)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wait {
    started: Instant,
    deadline: Instant,
    /// Empty polls so far, for the back-off (carried from one slice to the next).
    pub(crate) idle_rounds: u32,
}

impl Wait {
    /// A wait of `timeout` from now (a timeout too long to add is a wait without end, in
    /// practice: a century).
    #[must_use]
    pub fn new(timeout: Duration) -> Self {
        let now = Instant::now();
        let deadline = now
            .checked_add(timeout)
            .or_else(|| now.checked_add(Duration::from_secs(100 * 365 * 86_400)))
            .unwrap_or(now);
        Self::between(now, deadline)
    }

    /// A wait from now until `deadline`.
    #[must_use]
    pub fn until(deadline: Instant) -> Self {
        Self::between(Instant::now(), deadline)
    }

    /// A wait that started at `started` and ends at `deadline`.
    #[must_use]
    pub fn between(started: Instant, deadline: Instant) -> Self {
        Self {
            started,
            deadline,
            idle_rounds: 0,
        }
    }

    /// When it ends.
    #[must_use]
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// How long the caller asked to wait in all.
    #[must_use]
    pub fn asked(&self) -> Duration {
        self.deadline.saturating_duration_since(self.started)
    }

    /// Whether it is over at `now`.
    #[must_use]
    pub fn is_over(&self, now: Instant) -> bool {
        now >= self.deadline
    }

    /// Begins a slice at `now` of at most `len`: its end, never past the deadline.
    pub(crate) fn begin_slice(&self, now: Instant, len: Duration) -> Instant {
        now.checked_add(len)
            .map_or(self.deadline, |end| end.min(self.deadline))
    }

    /// The error for the wait being over: it quotes the whole wait the caller asked for (to
    /// the millisecond), however it was sliced. Its message and advice say what to do.
    pub(crate) fn timed_out(&self) -> Error {
        let asked = self.asked();
        let waited = if asked >= Duration::from_millis(10) {
            Duration::from_millis(
                u64::try_from(asked.as_micros().div_ceil(1000)).unwrap_or(u64::MAX),
            )
        } else {
            asked
        };
        Error::Timeout {
            what: WAITED_FOR,
            waited,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client's write waits 6 s in 20 ms slices (it looks for the server's answer between
    /// them): the error at the end says 6 s, not the last slice's few milliseconds.
    #[test]
    fn the_timeout_quotes_the_whole_wait_not_the_last_slice() {
        let t0 = Instant::now();
        let wait = Wait::between(t0, t0 + Duration::from_secs(6));
        let slice = Duration::from_millis(20);
        let mut now = t0;
        let mut slices = 0;
        loop {
            let end = wait.begin_slice(now, slice);
            assert!(end <= wait.deadline());
            // Nothing came in this slice; the poll returns a little after its end.
            now = end + Duration::from_micros(30);
            slices += 1;
            if wait.is_over(now) {
                break;
            }
        }
        assert_eq!(slices, 300);
        let e = wait.timed_out();
        let msg = e.to_string();
        assert!(
            msg.starts_with("timed out after 6s waiting for a work completion"),
            "{msg}"
        );
        assert_eq!(e.kind(), crate::ErrorKind::Timeout);
        // What to do: the message says where to look, the advice how to allow more.
        assert!(msg.contains("drop counters"), "{msg}");
        assert!(e.advice().is_some_and(|a| a.contains("--timeout")), "{e:?}");
        // A wait polled at once says the same.
        let wait = Wait::between(t0, t0 + Duration::from_micros(1_499_873));
        let e = wait.timed_out();
        assert!(e.to_string().starts_with("timed out after 1.5s "), "{e}");
    }

    #[test]
    fn a_slice_never_ends_past_the_deadline() {
        let t0 = Instant::now();
        let wait = Wait::between(t0, t0 + Duration::from_millis(50));
        let later = t0 + Duration::from_millis(40);
        assert_eq!(
            wait.begin_slice(later, Duration::from_millis(20)),
            wait.deadline()
        );
        assert_eq!(
            wait.begin_slice(t0, Duration::from_millis(20)),
            t0 + Duration::from_millis(20)
        );
        assert_eq!(wait.begin_slice(t0, Duration::MAX), wait.deadline());
        assert_eq!(wait.asked(), Duration::from_millis(50));
        assert!(Wait::new(Duration::MAX).deadline() > t0);
    }
}
