//! What every session shares ([`SessionCtx`]) and how one ends without a verdict ([`Failure`]).

use crate::admission::{Log, LogLimit};
use crate::budget::PinBudget;
use crate::output::Output;
use crate::ports::PortSource;
use rdma_core_rs::CqMode;
use rdma_proto::framing::FrameError;
use rdma_proto::{ErrorCode, ProtoError, ServerPolicy};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::{Duration, Instant};

#[derive(Debug)]
pub(crate) struct SessionCtx {
    /// Where each session gets its device, port and GID (chosen by the address its client
    /// came in on, after the hello; [`crate::ports`]).
    pub ports: Box<dyn PortSource>,
    /// What a hello may ask for (`buffer_size`: each session's buffer, `--buffer-size`) and what the banner says.
    pub policy: ServerPolicy,
    /// The deadline of each phase of a session.
    pub timeout: Duration,
    /// How the session's completion queue waits.
    pub cq_mode: CqMode,
    /// What a write session grants its client (remote write, in `rdma-server`).
    pub grant: crate::grant::Grant,
    pub out: Output,
    /// Set when the server is stopping: sessions abort with `shutting_down`.
    pub stopping: AtomicBool,
    /// Writes verified so far.
    pub verified: AtomicU64,
    /// How long a bench session may hold its buffer (`--bench-max-time`).
    pub bench_max_time: Duration,
    /// What the live sessions may pin together (`--max-pinned`).
    pub pinned: PinBudget,
    /// How many lines connections that are not (yet) admitted may log: anyone can open a
    /// connection, so its `connected` line and a failure before its hello is admitted are
    /// rate-limited, as the accept loop's refusals are.
    pub stranger_log: Mutex<LogLimit>,
    /// Rung on a verified write: wakes the accept loop, which a one-shot server leaves on it.
    pub wake: rdma_app::wake::Ringer,
    /// How many sessions may have rounds at once (`policy.keep_alive_ms` says for how long
    /// each is kept after a verdict).
    pub kept: super::KeptSlots,
}

impl SessionCtx {
    /// Whether a line of a connection not admitted yet is logged now ([`Self::stranger_log`]);
    /// says once in a while how many were left out.
    pub(crate) fn stranger_line(&self) -> bool {
        let log = self
            .stranger_log
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .refusal(Instant::now());
        match log {
            Log::Drop => false,
            Log::Line { dropped } => {
                if dropped > 0 {
                    tracing::warn!(
                        "{dropped} more line(s) of connections without an admitted hello not logged (at most {} a second)",
                        crate::admission::LOG_BURST
                    );
                }
                true
            }
        }
    }
}

/// Why a session ended without a verdict.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) code: ErrorCode,
    pub(crate) message: String,
    /// Whether an error line should (still) be sent to the client.
    pub(crate) tell_peer: bool,
    /// The client went away (closed or reset the connection): logged as `client_gone`, which
    /// is the client's doing, not a server fault.
    pub(crate) gone: bool,
    /// A read or send on the connection failed: what a server stopping causes (it shuts the
    /// sessions' sockets for reading), unlike a failure with a cause of its own (a write that
    /// did not land, a device error), which stays what it is when the stop comes after it.
    pub(crate) on_connection: bool,
}

impl Failure {
    pub(crate) fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            tell_peer: true,
            gone: false,
            on_connection: false,
        }
    }

    /// What went wrong, as logged and told.
    #[cfg(test)]
    pub(crate) fn message(&self) -> &str {
        &self.message
    }

    /// The code in the server's own log line.
    pub(crate) fn log_code(&self) -> &'static str {
        if self.gone {
            "client_gone"
        } else {
            self.code.as_str()
        }
    }

    pub(crate) fn silent(mut self) -> Self {
        self.tell_peer = false;
        self
    }

    /// What the session's end is told and logged as, once the server may be stopping: a
    /// failure the stop could have caused (its connection failed, or its wait was cancelled) is
    /// `shutting_down`, naming what it saw; one with a cause of its own keeps it, so a write
    /// that failed just before the stop is still logged as `write_failed`.
    pub(crate) fn told(self, stopping: bool) -> Self {
        if !stopping || !self.on_connection || self.code == ErrorCode::ShuttingDown {
            return self;
        }
        Failure::new(
            ErrorCode::ShuttingDown,
            format!("the server is shutting down ({})", self.message),
        )
    }
}

/// A failed read or send on the connection. Whatever could still be said to the client was
/// said by then (see [`read_failed`]), so this is only logged.
impl From<FrameError> for Failure {
    fn from(e: FrameError) -> Self {
        Failure {
            code: e.code(),
            message: format!("connection: {e}"),
            tell_peer: false,
            gone: e.peer_gone(),
            on_connection: true,
        }
    }
}

impl From<ProtoError> for Failure {
    fn from(e: ProtoError) -> Self {
        let tell_peer = !matches!(e, ProtoError::Remote(_));
        Failure {
            code: e.code(),
            message: e.to_string(),
            tell_peer,
            gone: false,
            on_connection: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The stop shuts the sessions' sockets for reading: a session whose connection failed then
    /// ends by the stop, and says so.
    #[test]
    fn a_connection_failure_while_stopping_is_the_stop() {
        let f = Failure::from(FrameError::Closed).told(true);
        assert_eq!(f.code, ErrorCode::ShuttingDown);
        assert!(
            f.message().starts_with("the server is shutting down ("),
            "{}",
            f.message()
        );
        let f = Failure::from(FrameError::Closed).told(false);
        assert_eq!(f.log_code(), "client_gone");
    }

    /// A write that failed on its own (the e2e `broken-server`: the client's write met a buffer
    /// without remote write) stays a `write_failed` however soon the stop follows it: the
    /// stop's flag was set while the flushed completion was on its way (seen in CI).
    #[test]
    fn a_failure_with_its_own_cause_keeps_it_while_stopping() {
        for code in [
            ErrorCode::WriteFailed,
            ErrorCode::RdmaSetup,
            ErrorCode::Timeout,
        ] {
            let f = Failure::new(code, "the client's write did not land").told(true);
            assert_eq!(f.code, code);
            assert_eq!(f.message(), "the client's write did not land");
        }
    }
}
