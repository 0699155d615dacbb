//! What the server tells its operator: human lines by default, JSON Lines with `--json`.
//!
//! Sessions run on their own threads; each event is written as one whole line under the stdout
//! lock, so lines never interleave.

use serde::Serialize;
use std::io::Write as _;

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

/// Where events go.
#[derive(Debug, Clone, Copy)]
pub struct Output {
    json: bool,
}

impl Output {
    pub fn new(json: bool) -> Self {
        Self { json }
    }

    /// Emits `event` as one JSON line, or the `human` lines.
    pub fn emit(&self, event: &Event<'_>, human: impl FnOnce() -> String) {
        let text = if self.json {
            serde_json::to_string(event).unwrap_or_else(|e| {
                format!(r#"{{"type":"error","code":"internal","message":"cannot encode event: {e}","fatal":false}}"#)
            })
        } else {
            human()
        };
        let mut stdout = std::io::stdout().lock();
        // Losing stdout (e.g. `| head`) must not take the server down.
        let _ = writeln!(stdout, "{text}");
        let _ = stdout.flush();
    }

    /// Reports the error that ends the server: a JSON event with `--json`, and always the full
    /// human report (with its suggestion) on stderr.
    pub fn fatal(&self, code: &str, exit_code: u8, report: &color_eyre::Report) {
        if self.json {
            self.emit(
                &Event::Error {
                    session: None,
                    peer: None,
                    code,
                    message: format!("{report:#}"),
                    fatal: true,
                    exit_code: Some(exit_code),
                },
                String::new,
            );
        }
        eprintln!("Error: {report:?}");
    }
}
