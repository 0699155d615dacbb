//! What the server tells its operator: its `--json` events (human lines by default). The writer
//! is the one both binaries share ([`app::Output`]); it writes each event as one whole line, so
//! the sessions' threads never interleave lines.

use rdma_proto::app::{self, Exit};
use serde::Serialize;

/// One `--json` event; `session` numbers tie the events of one client together.
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event<'a> {
    /// Ready for clients.
    Listening {
        addr: String,
        device: &'a str,
        port: u8,
        gid_index: u32,
        gid: String,
        mtu: u32,
        buffer_size: u64,
        mode: &'a str,
        max_clients: u32,
        auth: &'a str,
        /// The deadline of each session phase (`--timeout`), in milliseconds.
        timeout_ms: u128,
    },
    /// A client connected (before any check).
    Connected { session: u64, peer: String },
    /// A client turned away before its session started (`forbidden`, `busy`).
    Refused {
        peer: String,
        code: &'a str,
        message: &'a str,
    },
    /// This session's QP is connected to the client's and the buffer is offered.
    QpReady {
        session: u64,
        local_qpn: u32,
        remote_qpn: u32,
        path_mtu: u32,
        notify: &'a str,
        length: u64,
    },
    /// The server saw the write complete (immediate completion or `written` notice).
    Written {
        session: u64,
        length: u64,
        notify: &'a str,
    },
    /// The server checked the bytes in its own buffer.
    Verified {
        session: u64,
        verified: bool,
        length: u64,
        crc32c: u32,
        text: &'a str,
        truncated: bool,
        reason: Option<&'a str>,
    },
    /// A session failed; the server goes on. `fatal` errors end the server.
    Error {
        session: Option<u64>,
        peer: Option<String>,
        code: &'a str,
        message: String,
        fatal: bool,
        exit_code: Option<u8>,
    },
    /// The server stopped.
    Stopped {
        reason: &'a str,
        sessions: u64,
        verified: u64,
    },
}

/// The server's events, for the shared writer.
#[derive(Debug, Clone, Copy)]
pub enum ServerEvents {}

impl app::Events for ServerEvents {
    type Event<'a> = Event<'a>;

    fn fatal(exit: Exit, message: String) -> Event<'static> {
        Event::Error {
            session: None,
            peer: None,
            code: exit.name(),
            message,
            fatal: true,
            exit_code: Some(exit.code()),
        }
    }
}

/// Where the server's events go.
pub type Output = app::Output<ServerEvents>;
