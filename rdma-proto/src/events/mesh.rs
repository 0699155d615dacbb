//! The mesh's records (`rdma-client mesh`): why a probe failed ([`Cause`]), a pair's state
//! ([`PairState`]), what one probe came to ([`ProbeOutcome`]). The events that carry them are
//! [`super::client::Event`]'s `mesh_*`; the judging (the causes from errors, the states from
//! runs of probes) is rdma-client's `mesh`; these are only the shapes.

use serde::{Deserialize, Serialize};

/// Why a probe of a pair failed, or was judged bad.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Cause {
    /// No TCP (or no answer on it before the banner): the host or its server is gone.
    Host,
    /// The server refused the probe: token, caps (`busy`, `too_long`), a protocol error.
    Refused,
    /// TCP answers but the RDMA path fails: no completion, retry exceeded, a wrong GID or MTU.
    Rdma,
    /// The round trip is far above the pair's own baseline.
    Slow,
    /// The server's verdict failed: it saw other bytes than were written.
    Corrupt,
}

impl Cause {
    /// Every cause, in declaration order.
    pub const ALL: [Cause; 5] = [
        Cause::Host,
        Cause::Refused,
        Cause::Rdma,
        Cause::Slow,
        Cause::Corrupt,
    ];

    /// The stable name, for metrics labels (the same as its serde name).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Cause::Host => "host",
            Cause::Refused => "refused",
            Cause::Rdma => "rdma",
            Cause::Slow => "slow",
            Cause::Corrupt => "corrupt",
        }
    }

    /// Whether this cause counts towards a pair going down (all but [`Cause::Slow`], which
    /// degrades it).
    #[must_use]
    pub fn is_failure(self) -> bool {
        self != Cause::Slow
    }
}

impl std::fmt::Display for Cause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A pair's state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PairState {
    /// No verdict yet.
    #[default]
    Unknown,
    Up,
    Degraded,
    Down,
}

impl PairState {
    /// Every state, in declaration order.
    pub const ALL: [PairState; 4] = [
        PairState::Unknown,
        PairState::Up,
        PairState::Degraded,
        PairState::Down,
    ];

    /// The stable name, for metrics labels (the same as its serde name).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            PairState::Unknown => "unknown",
            PairState::Up => "up",
            PairState::Degraded => "degraded",
            PairState::Down => "down",
        }
    }
}

impl std::fmt::Display for PairState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What one scheduled probe came to (`mesh_probe.outcome`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProbeOutcome {
    /// The server verified the write and the latency exchange (and bandwidth sample) ran.
    Ok,
    /// The probe ran and failed, or its round trip was judged slow (`cause` says which).
    Failed,
    /// Not run: the pair's previous probe was still running, or no worker was free. Neither
    /// counts towards the pair's state.
    Skipped,
    /// The probe failed through a fault of the prober itself (a bug, a bad local setting),
    /// which says nothing of the pair and does not count towards its state.
    Error,
}

impl ProbeOutcome {
    /// The stable name (its serde name).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            ProbeOutcome::Ok => "ok",
            ProbeOutcome::Failed => "failed",
            ProbeOutcome::Skipped => "skipped",
            ProbeOutcome::Error => "error",
        }
    }
}
