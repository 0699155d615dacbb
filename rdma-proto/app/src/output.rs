//! Where a binary's events go: human lines by default, JSON Lines (`--json`) otherwise, and the
//! one path that reports the failure ending the process.
//!
//! Each binary keeps its own event enum (their fields differ) and renders its human lines in one
//! place: its [`Events`] names the enum, renders an event as a person reads it, and says how it
//! spells a fatal error; the writer and the fatal path are shared. Nothing else of a binary
//! prints to stdout.

use crate::report;
use color_eyre::Report;
use rdma_proto::exit::Exit;
use serde::Serialize;
use std::fmt;
use std::io::Write as _;

/// A binary's `--json` events and their human lines.
pub trait Events {
    /// One event; it may borrow from the caller.
    type Event<'a>: Serialize;

    /// How the human lines are told, fixed for a run (the server's language); `()` where there
    /// is nothing to choose.
    type Style: Copy + Default + fmt::Debug;

    /// What a human line may need that its event does not carry and that has no place in the
    /// JSON contract (a bench run's sizes, the link a queue pair runs on); its `Default` is
    /// "nothing", which most events need.
    type Detail<'a>: Default;

    /// The line (or lines) that `event` shows a person, without `--json`.
    fn human(event: &Self::Event<'_>, style: Self::Style, detail: &Self::Detail<'_>) -> String;

    /// The event that reports the failure ending the process.
    fn fatal(exit: Exit, message: String) -> Self::Event<'static>;
}

/// Where `E`'s events go. Copy it freely: every event is written as one whole line under the
/// stdout lock, so threads never interleave lines.
pub struct Output<E: Events> {
    json: bool,
    style: E::Style,
}

impl<E: Events> fmt::Debug for Output<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Output")
            .field("json", &self.json)
            .field("style", &self.style)
            .finish()
    }
}

impl<E: Events> Clone for Output<E> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<E: Events> Copy for Output<E> {}

impl<E: Events> Output<E> {
    /// JSON Lines when `json`, human text (in the default style) otherwise.
    #[must_use]
    pub fn new(json: bool) -> Self {
        Self {
            json,
            style: E::Style::default(),
        }
    }

    /// The same output, its human lines told in `style`.
    #[must_use]
    pub fn with_style(self, style: E::Style) -> Self {
        Self { style, ..self }
    }

    /// The style of the human lines.
    #[must_use]
    pub fn style(&self) -> E::Style {
        self.style
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

    /// Emits `event` as one JSON line, or its human lines.
    pub fn emit(&self, event: &E::Event<'_>) {
        self.emit_with(event, &E::Detail::default());
    }

    /// Emits `event` as one JSON line, or its human lines told with `detail` (what the line
    /// needs that the event does not carry).
    pub fn emit_with(&self, event: &E::Event<'_>, detail: &E::Detail<'_>) {
        let text = if self.json {
            serde_json::to_string(event).unwrap_or_else(|e| {
                // Unreachable for the binaries' plain enums; still one valid JSON line.
                serde_json::json!({"type": "error", "code": "internal", "message": format!("cannot encode event: {e}")})
                    .to_string()
            })
        } else {
            E::human(event, self.style, detail)
        };
        write_line(&text);
    }

    /// Reports the failure that ends the process and returns its exit code: with `--json`, the
    /// fatal event on stdout and one line on stderr; otherwise the report on stderr. Expected
    /// failures show their message and advice, never a backtrace (see [`report::render`]).
    #[must_use]
    pub fn fatal(&self, exit: Exit, report: &Report) -> std::process::ExitCode {
        if self.json {
            self.emit(&E::fatal(exit, report::message(report)));
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
        type Style = bool;
        type Detail<'a> = Option<&'a str>;
        fn human(event: &Event<'_>, loud: bool, detail: &Option<&str>) -> String {
            let line = match event {
                Event::Hello { name } => format!("hello {name}{}", detail.unwrap_or_default()),
                Event::Error { kind, .. } => format!("error {kind}"),
            };
            if loud { line.to_uppercase() } else { line }
        }
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

    #[test]
    fn the_style_is_the_outputs_and_the_detail_the_callers() {
        let out = Output::<Test>::new(false);
        assert!(!out.style());
        let loud = out.with_style(true);
        assert!(loud.style() && !loud.json());
        let hello = Event::Hello { name: "x" };
        assert_eq!(Test::human(&hello, out.style(), &None), "hello x");
        assert_eq!(Test::human(&hello, loud.style(), &Some("!")), "HELLO X!");
    }
}
