//! `rdma-server --json`: one event per line; `session` numbers tie the events of one client
//! together.

use serde::{Deserialize, Serialize};
use std::borrow::Cow;

/// One `--json` event of the server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event<'a> {
    /// Ready for clients.
    Listening {
        addr: Cow<'a, str>,
        device: Cow<'a, str>,
        port: u8,
        gid_index: u32,
        gid: Cow<'a, str>,
        mtu: u32,
        /// The size of the buffer each plain session registers (`--buffer-size`).
        buffer_size: u64,
        mode: ServeMode,
        max_clients: u32,
        auth: AuthMode,
        /// The deadline of each session phase (`--timeout`), in milliseconds.
        timeout_ms: u64,
        /// Whether the banner offers RDMA CM connections (feature `cm`: RDMA CM works here).
        #[serde(default)]
        cm: bool,
    },
    /// A client connected (before any check).
    Connected { session: u64, peer: Cow<'a, str> },
    /// The device, port and GID this session uses, chosen by the address the client came in
    /// on (not emitted when the flags chose them).
    PortChosen {
        session: u64,
        device: Cow<'a, str>,
        port: u8,
        gid_index: u32,
        gid: Cow<'a, str>,
        why: Cow<'a, str>,
    },
    /// A client turned away before its session started (`forbidden`, `busy`).
    Refused {
        peer: Cow<'a, str>,
        code: Cow<'a, str>,
        message: Cow<'a, str>,
    },
    /// An RDMA CM connection request to this session's listener that is not its client's was
    /// rejected (from another address, or without the session's nonce). At most a few are
    /// logged per session; `rejected` counts them all so far.
    CmRejected {
        session: u64,
        /// Where the request came from, when known.
        peer: Option<Cow<'a, str>>,
        why: Cow<'a, str>,
        rejected: u32,
    },
    /// This session's QP is connected to the client's and the buffer is offered.
    QpReady {
        session: u64,
        local_qpn: u32,
        remote_qpn: u32,
        path_mtu: u32,
        notify: SessionNotify,
        length: u64,
        /// How the queue pair was connected (absent: by the handshake's QP numbers).
        #[serde(default, skip_serializing_if = "super::QpVia::is_handshake")]
        via: super::QpVia,
    },
    /// The server saw the write complete (immediate completion or `written` notice).
    Written {
        session: u64,
        length: u64,
        notify: SessionNotify,
    },
    /// The server checked the bytes in its own buffer.
    Verified {
        session: u64,
        verified: bool,
        length: u64,
        crc32c: u32,
        text: Cow<'a, str>,
        truncated: bool,
        reason: Option<Cow<'a, str>>,
    },
    /// A session with rounds goes on ([`crate::rounds`]): round `round` (2 and on) of
    /// `length` bytes, a fresh buffer on the same queue pairs.
    Round {
        session: u64,
        round: u64,
        length: u64,
    },
    /// A session failed; the server goes on. `fatal` errors end the server (`code` is then
    /// the exit's name, `exit_code` its status).
    Error {
        session: Option<u64>,
        peer: Option<Cow<'a, str>>,
        code: Cow<'a, str>,
        message: Cow<'a, str>,
        fatal: bool,
        exit_code: Option<u8>,
    },
    /// The server stopped.
    Stopped {
        reason: StopReason,
        sessions: u64,
        verified: u64,
        /// The CPU time the server used, user and system, in milliseconds (`getrusage`), when
        /// known: over `sessions`, what a connection costs it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cpu_ms: Option<u64>,
    },
}

/// How a session learns that the client's write is complete, or that it is a bench session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SessionNotify {
    /// RDMA Write with immediate: the server's completion.
    #[serde(rename = "imm")]
    Imm,
    /// A `written` notice over TCP.
    #[serde(rename = "tcp")]
    Tcp,
    /// A `bench --mode lat` session (ping-pong; it ends with a `written` notice).
    #[serde(rename = "bench-lat")]
    BenchLat,
    /// A `bench --mode bw` session (a stream; it ends with a `written` notice).
    #[serde(rename = "bench-bw")]
    BenchBw,
}

impl SessionNotify {
    /// The name `--json` prints.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            SessionNotify::Imm => "imm",
            SessionNotify::Tcp => "tcp",
            SessionNotify::BenchLat => "bench-lat",
            SessionNotify::BenchBw => "bench-bw",
        }
    }
}

impl From<crate::Notify> for SessionNotify {
    fn from(n: crate::Notify) -> Self {
        match n {
            crate::Notify::Imm => SessionNotify::Imm,
            crate::Notify::Tcp => SessionNotify::Tcp,
        }
    }
}

impl From<crate::BenchMode> for SessionNotify {
    fn from(m: crate::BenchMode) -> Self {
        match m {
            crate::BenchMode::Lat => SessionNotify::BenchLat,
            crate::BenchMode::Bw => SessionNotify::BenchBw,
        }
    }
}

/// Why the server stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StopReason {
    /// SIGINT or SIGTERM.
    Signal,
    /// One-shot: a client's write was verified.
    Verified,
}

impl std::fmt::Display for StopReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            StopReason::Signal => "signal",
            StopReason::Verified => "verified",
        })
    }
}

/// One-shot (exit after the first verified write) or `--serve`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ServeMode {
    Oneshot,
    Serve,
}

/// Whether clients must present the shared token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AuthMode {
    Token,
    None,
}

impl std::fmt::Display for ServeMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ServeMode::Oneshot => "oneshot",
            ServeMode::Serve => "serve",
        })
    }
}

impl std::fmt::Display for SessionNotify {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_the_ones_readers_know() {
        let qp = Event::QpReady {
            session: 1,
            local_qpn: 2,
            remote_qpn: 3,
            path_mtu: 1024,
            notify: SessionNotify::BenchLat,
            length: 8,
            via: crate::events::QpVia::Handshake,
        };
        let line = serde_json::to_string(&qp).unwrap();
        assert_eq!(
            line,
            r#"{"type":"qp_ready","session":1,"local_qpn":2,"remote_qpn":3,"path_mtu":1024,"notify":"bench-lat","length":8}"#
        );
        assert_eq!(super::super::parse::<Event<'static>>(&line).unwrap(), qp);
        for n in [
            SessionNotify::Imm,
            SessionNotify::Tcp,
            SessionNotify::BenchLat,
            SessionNotify::BenchBw,
        ] {
            assert_eq!(
                serde_json::to_string(&n).unwrap(),
                format!("\"{}\"", n.as_str())
            );
        }
        let err = super::super::parse::<Event<'static>>(r#"{"type":"nope"}"#).unwrap_err();
        assert!(err.to_string().contains(r#"{"type":"nope"}"#), "{err}");
    }
}
