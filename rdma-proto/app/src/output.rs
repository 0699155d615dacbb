//! Where a binary's events go: human lines by default, JSON Lines (`--json`) otherwise, and the
//! one path that reports the failure ending the process.
//!
//! Each binary keeps its own event enum (their fields differ); [`Events`] names it and says how
//! it spells a fatal error, so the writer and the fatal path are shared.

use crate::report;
use color_eyre::Report;
use rdma_proto::events::{client, server};
use rdma_proto::exit::Exit;
use serde::Serialize;
use std::io::Write as _;
use std::marker::PhantomData;

/// A binary's `--json` events.
pub trait Events {
    /// One event; it may borrow from the caller.
    type Event<'a>: Serialize;

    /// The event that reports the failure ending the process.
    fn fatal(exit: Exit, message: String) -> Self::Event<'static>;
}

/// The client's events ([`client::Event`]), for [`Output`].
#[derive(Debug, Clone, Copy)]
pub enum ClientEvents {}

impl Events for ClientEvents {
    type Event<'a> = client::Event<'a>;

    fn fatal(exit: Exit, message: String) -> client::Event<'static> {
        client::Event::Error {
            kind: exit,
            exit_code: exit.code(),
            message: message.into(),
        }
    }
}

/// The server's events ([`server::Event`]), for [`Output`].
#[derive(Debug, Clone, Copy)]
pub enum ServerEvents {}

impl Events for ServerEvents {
    type Event<'a> = server::Event<'a>;

    fn fatal(exit: Exit, message: String) -> server::Event<'static> {
        server::Event::Error {
            session: None,
            peer: None,
            code: exit.name().into(),
            message: message.into(),
            fatal: true,
            exit_code: Some(exit.code()),
        }
    }
}

/// Where `E`'s events go. Copy it freely: every event is written as one whole line under the
/// stdout lock, so threads never interleave lines.
#[derive(Debug)]
pub struct Output<E> {
    json: bool,
    events: PhantomData<fn() -> E>,
}

impl<E> Clone for Output<E> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<E> Copy for Output<E> {}

impl<E: Events> Output<E> {
    /// JSON Lines when `json`, human text otherwise.
    #[must_use]
    pub fn new(json: bool) -> Self {
        Self {
            json,
            events: PhantomData,
        }
    }

    /// Whether events are JSON Lines.
    #[must_use]
    pub fn json(&self) -> bool {
        self.json
    }

    /// Lines for a person only (a table's rule or header, which no event carries): written
    /// without `--json`, as an event's are; nothing with it.
    pub fn human(&self, lines: impl FnOnce() -> String) {
        if !self.json {
            write_line(&lines());
        }
    }

    /// `text` as it is, in either mode: a listing meant for a shell (one item a line, no event
    /// around it, e.g. the client's `--retest-list`). Nothing is written for an empty one.
    pub fn listing(&self, text: &str) {
        let body = text.strip_suffix('\n').unwrap_or(text);
        if !body.is_empty() {
            write_line(body);
        }
    }

    /// Emits `event` as one JSON line, or the `human` lines.
    pub fn emit(&self, event: &E::Event<'_>, human: impl FnOnce() -> String) {
        let text = if self.json {
            serde_json::to_string(event).unwrap_or_else(|e| {
                // Unreachable for the binaries' plain enums; still one valid JSON line.
                serde_json::json!({"type": "error", "code": "internal", "message": format!("cannot encode event: {e}")})
                    .to_string()
            })
        } else {
            human()
        };
        write_line(&text);
    }

    /// Reports the failure that ends the process and returns its exit code: with `--json`, the
    /// fatal event on stdout and one line on stderr; otherwise the report on stderr. Expected
    /// failures show their message and advice, never a backtrace (see [`report::render`]).
    #[must_use]
    pub fn fatal(&self, exit: Exit, report: &Report) -> std::process::ExitCode {
        if self.json {
            self.emit(&E::fatal(exit, report::message(report)), String::new);
        }
        eprintln!("{}", report::render(report, exit, self.json));
        exit.into()
    }
}

/// One whole line (or lines) on stdout under its lock, so that threads never interleave lines.
fn write_line(text: &str) {
    let mut stdout = std::io::stdout().lock();
    // Losing stdout (e.g. `| head`) must not turn a success into a failure.
    let _ = writeln!(stdout, "{text}");
    let _ = stdout.flush();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize)]
    #[serde(tag = "type", rename_all = "snake_case")]
    enum Event<'a> {
        Hello { name: &'a str },
        Error { kind: &'a str, exit_code: u8 },
    }

    enum Test {}

    impl Events for Test {
        type Event<'a> = Event<'a>;
        fn fatal(exit: Exit, _message: String) -> Event<'static> {
            Event::Error {
                kind: exit.name(),
                exit_code: exit.code(),
            }
        }
    }

    #[test]
    fn events_are_tagged_json_and_the_fatal_event_is_the_binarys_own() {
        let name = String::from("borrowed");
        let line = serde_json::to_string(&Event::Hello { name: &name }).unwrap();
        assert_eq!(line, r#"{"type":"hello","name":"borrowed"}"#);
        let fatal = serde_json::to_value(Test::fatal(Exit::Usage, String::new())).unwrap();
        assert_eq!(fatal["exit_code"], 2);
        assert_eq!(fatal["kind"], "usage");
        let out = Output::<Test>::new(true);
        let copy = out;
        assert!(out.json() && copy.json());
    }
}
