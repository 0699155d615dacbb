//! What the client tells its user: human lines by default, JSON Lines with `--json`.
//!
//! Every JSON event is one object with a `type` tag, so scripts can dispatch on it.

use crate::exit::ExitKind;
use serde::Serialize;
use std::io::Write as _;

/// One `--json` event.
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event<'a> {
    /// TCP connected and the server's banner accepted.
    Connected {
        server: &'a str,
        program: &'a str,
        program_version: &'a str,
        device: &'a str,
        port: u8,
        gid_index: u32,
        gid: String,
    },
    /// Our queue pair is in RTS, connected to the server's.
    QpReady {
        local_qpn: u32,
        remote_qpn: u32,
        path_mtu: u32,
        remote_addr: u64,
        rkey: u32,
        buf_len: u64,
    },
    /// Our RDMA Write completed successfully on our side.
    Written {
        length: u64,
        notify: &'a str,
        crc32c: u32,
        micros: u128,
    },
    /// The server's verdict.
    Verified {
        verified: bool,
        length: u64,
        crc32c: u32,
        text: &'a str,
        truncated: bool,
    },
    /// The run failed; `exit_code` is the process exit status.
    Error {
        kind: &'a str,
        exit_code: u8,
        message: String,
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

    /// Emits `event` as a JSON line, or `human` as text.
    pub fn emit(&self, event: &Event<'_>, human: impl FnOnce() -> String) {
        let mut stdout = std::io::stdout().lock();
        let line = if self.json {
            serde_json::to_string(event).unwrap_or_else(|e| {
                format!(r#"{{"type":"error","kind":"internal","exit_code":1,"message":"cannot encode event: {e}"}}"#)
            })
        } else {
            human()
        };
        // A closed stdout (e.g. `| head`) must not turn a verified write into a failure.
        let _ = writeln!(stdout, "{line}");
    }

    /// Reports the error that ends the run: a JSON event on stdout with `--json`, and always the
    /// full human report (with its suggestion) on stderr.
    pub fn error(&self, kind: ExitKind, report: &color_eyre::Report) {
        if self.json {
            self.emit(
                &Event::Error {
                    kind: kind.as_str(),
                    exit_code: kind.code(),
                    message: format!("{report:#}"),
                },
                String::new,
            );
        }
        eprintln!("Error: {report:?}");
    }
}
