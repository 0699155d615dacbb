//! What every session shares ([`SessionCtx`]).

use crate::admission::{Log, LogLimit};
use crate::budget::PinBudget;
use crate::output::Output;
use crate::ports::PortSource;
use rdma_core_rs::CqMode;
use rdma_proto::ServerPolicy;
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
    pub kept: crate::kept::KeptSlots,
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
