//! What the server checks of a write, once its buffer is its own again: pure.

use super::ServerHandshake;
use crate::wire::{Notify, Outcome, Written};
use crate::{crc32c, preview_text};

impl ServerHandshake {
    /// Checks the bytes the server sees against what the client announced. Pure.
    ///
    /// `payload` is what the server reads from its buffer (normally the first `hello.length`
    /// bytes, or as many as the immediate says). `imm` is the immediate data of the completion
    /// (notify=imm), `written` the client's `written` message (notify=tcp; when `None`, the one
    /// received through `on_message` is used). Checks, all reported in `reason`:
    /// length == hello.length; imm == length (imm mode); written.length == length and
    /// written.crc32c == crc32c(payload) (tcp mode); hello.crc32c == crc32c(payload) if given.
    pub fn verify(&self, payload: &[u8], imm: Option<u32>, written: Option<&Written>) -> Outcome {
        let crc = crc32c(payload);
        let (text, truncated) = preview_text(payload);
        let length = payload.len() as u64;
        let mut problems = Vec::new();
        match &self.hello {
            None => problems
                .push("no hello was accepted, so there is nothing to check against".to_owned()),
            Some(h) => {
                let (want, by) = (self.length(), self.announced_by());
                if length != want {
                    problems.push(format!("saw {length} bytes but {by} announced {want}"));
                }
                match h.notify {
                    Notify::Imm => match imm {
                        None => {
                            problems.push("notify=imm but no immediate data arrived".to_owned())
                        }
                        Some(i) if u64::from(i) != want => {
                            problems.push(format!(
                                "immediate data {i} differs from the announced length {want}"
                            ));
                        }
                        Some(_) => {}
                    },
                    Notify::Tcp => match written.or(self.written.as_ref()) {
                        None => {
                            problems.push("notify=tcp but no `written` message arrived".to_owned())
                        }
                        Some(w) => {
                            if w.length != want {
                                problems.push(format!(
                                    "`written` says {} bytes but {by} announced {want}",
                                    w.length
                                ));
                            }
                            if w.crc32c != crc {
                                problems.push(format!(
                                    "crc32c of the buffer is {crc:#010x} but `written` says {:#010x}",
                                    w.crc32c
                                ));
                            }
                        }
                    },
                }
                if let Some(want) = self.announced_crc() {
                    if want != crc {
                        problems.push(format!(
                            "crc32c of the buffer is {crc:#010x} but {by} announced {want:#010x}"
                        ));
                    }
                }
            }
        }
        Outcome {
            verified: problems.is_empty(),
            length,
            crc32c: crc,
            text,
            truncated,
            reason: (!problems.is_empty()).then(|| problems.join("; ")),
            stamps: None,
        }
    }
}
