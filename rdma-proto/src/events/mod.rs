//! The `--json` events of both binaries: what they print, one JSON object per line with a
//! `type` tag, and what everything that reads them (xtask, `fabric report`, scripts) parses.
//! One definition for both sides of the pipe, so a renamed field is a compile error in the
//! reader, not a failure found in the guests.
//!
//! * [`server`]: `rdma-server --json`.
//! * [`client`]: `rdma-client --json`, with the measurement rows of `bench` ([`bench`](mod@bench)) and
//!   the fabric check's records ([`fabric`]) and the mesh's ([`mesh`]).
//!
//! Text fields are [`Cow`](std::borrow::Cow): a binary writes them borrowed, a reader gets
//! them owned (`serde_json::from_str::<client::Event<'static>>` works on any line).
//! Pure types; no I/O.

pub mod bench;
pub mod client;
pub mod fabric;
pub mod mesh;
pub mod server;

/// How a queue pair was connected (`qp_ready.via`): with the QP numbers, PSNs and GIDs the
/// handshake exchanged (the default, not written), or through RDMA CM (PROTOCOL.md §3.8).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QpVia {
    /// `qpn`/`psn`/`gid` from the hello and the accept.
    #[default]
    Handshake,
    /// RDMA CM (iWARP always; `--cm` elsewhere).
    Cm,
}

impl QpVia {
    /// `Cm` for a queue pair RDMA CM connected (the hello's `cm`), else `Handshake`.
    #[must_use]
    pub fn from_cm(cm: bool) -> QpVia {
        if cm { QpVia::Cm } else { QpVia::Handshake }
    }

    /// Whether this is the default (not written to the event).
    #[must_use]
    pub fn is_handshake(&self) -> bool {
        *self == QpVia::Handshake
    }
}

/// Reads `line` as an event of `E`; the error names the line, so a reader that meets
/// something it cannot parse says what it was instead of dropping it.
///
/// # Errors
/// The line is not an event of `E` (not JSON, an unknown `type`, a missing or mistyped field).
pub fn parse<E: serde::de::DeserializeOwned>(line: &str) -> Result<E, EventError> {
    serde_json::from_str(line).map_err(|e| EventError {
        line: crate::printable(line.get(..200).unwrap_or(line)),
        reason: e.to_string(),
    })
}

/// A line that is not the event its reader expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not an event this reader knows ({reason}): {line}")]
pub struct EventError {
    /// The line (its first 200 bytes), printable.
    pub line: String,
    /// What serde found wrong.
    pub reason: String,
}
