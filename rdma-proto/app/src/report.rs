//! How a failure reads: the color-eyre reporter, logging, and the text of a fatal error.

use color_eyre::Report;
use rdma_proto::exit::Exit;
use std::io::IsTerminal as _;

/// Installs color-eyre (without colour codes when stderr is not a terminal) and the logger:
/// diagnostics that are not events (warnings about the host) go to stderr; `RUST_LOG` tunes them.
pub fn install() {
    let hook = color_eyre::config::HookBuilder::default().display_env_section(false);
    let hook = if std::io::stderr().is_terminal() {
        hook
    } else {
        hook.theme(color_eyre::config::Theme::new())
    };
    if let Err(err) = hook.install() {
        eprintln!("warning: could not install the error reporter: {err}");
    }
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let _ = tracing_subscriber::registry()
        .with(tracing_subscriber::fmt::layer().with_writer(std::io::stderr))
        .with(log_filter(std::env::var("RUST_LOG").ok().as_deref()))
        .try_init();
}

/// The levels `RUST_LOG` asks for, as a list of `target=level` directives or one level
/// (`debug`, `rdma_server=trace,warn`); `warn` when unset, and when it does not parse (then
/// stderr says so).
fn log_filter(env: Option<&str>) -> tracing_subscriber::filter::Targets {
    use tracing_subscriber::filter::{LevelFilter, Targets};
    let warn = || Targets::new().with_default(LevelFilter::WARN);
    match env.map(str::trim) {
        None | Some("") => warn(),
        Some(text) => text.parse().unwrap_or_else(|e| {
            eprintln!(
                "warning: RUST_LOG={text:?} ignored ({e}): give a level (warn, debug) or \
                 target=level pairs separated by commas; logging at warn"
            );
            warn()
        }),
    }
}

/// The stderr text of the failure that ends the process.
///
/// * `--json`: one line (the JSON event on stdout has the rest).
/// * An expected failure ([`Exit::is_expected`]): the message and its causes, whose text carries
///   the advice; never a backtrace, whatever `RUST_BACKTRACE` says.
/// * An internal error: color-eyre's full report, with a backtrace when `RUST_BACKTRACE=1`.
#[must_use]
pub fn render(report: &Report, exit: Exit, json: bool) -> String {
    if json {
        let text = one_line(&message(report));
        return if exit.is_expected() {
            format!("error: {text}")
        } else {
            format!("internal error: {text} (run without --json for the full report)")
        };
    }
    if !exit.is_expected() {
        return format!("Error: {report:?}");
    }
    let mut chain = causes(report).into_iter();
    let mut text = format!("Error: {}", chain.next().unwrap_or_default());
    for cause in chain {
        text.push_str(&format!("\n  caused by: {cause}"));
    }
    text
}

/// The whole message of `report`, outermost first, as the `--json` error event carries it.
#[must_use]
pub fn message(report: &Report) -> String {
    causes(report).join(": ")
}

/// The messages of `report`'s chain, outermost first, without a cause that the one before
/// already quotes (an error type that prints its `source` in its own message). xtask's
/// failures read the same way.
#[must_use]
pub fn causes(report: &Report) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for cause in report.chain() {
        let text = cause.to_string();
        if !out.last().is_some_and(|before| before.contains(&text)) {
            out.push(text);
        }
    }
    out
}

/// `text` on one line: line breaks (e.g. in a GID table) become single spaces.
fn one_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use color_eyre::eyre::{WrapErr as _, eyre};

    fn report() -> Report {
        Err::<(), _>(eyre!(
            "connection refused; is the server running?\n  [0] a\n  [1] b"
        ))
        .wrap_err("could not reach the server")
        .unwrap_err()
    }

    /// RUST_LOG: unset or unreadable is warn; one level, or per-target levels.
    #[test]
    fn rust_log_sets_the_levels_and_a_bad_one_leaves_warn() {
        use tracing::Level;
        let f = log_filter(None);
        assert!(f.would_enable("rdma_server", &Level::WARN));
        assert!(!f.would_enable("rdma_server", &Level::INFO));
        let f = log_filter(Some("debug"));
        assert!(f.would_enable("anything", &Level::DEBUG));
        assert!(!f.would_enable("anything", &Level::TRACE));
        let f = log_filter(Some("rdma_server=trace,error"));
        assert!(f.would_enable("rdma_server::session", &Level::TRACE));
        assert!(!f.would_enable("rdma_client", &Level::WARN));
        let f = log_filter(Some("rdma_server=loud"));
        assert!(f.would_enable("rdma_server", &Level::WARN));
        assert!(!f.would_enable("rdma_server", &Level::INFO));
    }

    #[test]
    fn expected_failures_print_message_and_advice_only() {
        for exit in Exit::ALL.into_iter().filter(|e| e.is_expected()) {
            let text = render(&report(), exit, false);
            assert_eq!(
                text,
                "Error: could not reach the server\n  caused by: connection refused; is the server running?\n  [0] a\n  [1] b"
            );
        }
    }

    #[derive(Debug, thiserror::Error)]
    #[error("cannot read /x: {source}")]
    struct ReadError {
        source: std::io::Error,
    }

    #[test]
    fn a_cause_the_message_already_quotes_is_not_repeated() {
        let io = std::io::Error::from(std::io::ErrorKind::NotFound);
        let text = io.to_string();
        let report = Report::new(ReadError { source: io }).wrap_err("loading the payload");
        assert_eq!(report.chain().count(), 3);
        assert_eq!(
            message(&report),
            format!("loading the payload: cannot read /x: {text}")
        );
        assert_eq!(
            render(&report, Exit::Usage, false),
            format!("Error: loading the payload\n  caused by: cannot read /x: {text}")
        );
    }

    #[test]
    fn json_mode_leaves_one_line_on_stderr() {
        for exit in Exit::ALL {
            let text = render(&report(), exit, true);
            assert_eq!(text.lines().count(), 1, "{text}");
            assert!(
                text.contains("could not reach the server: connection refused; is the server running? [0] a [1] b"),
                "{text}"
            );
        }
    }

    #[test]
    fn internal_errors_get_the_reporters_full_report() {
        // Whatever hook the test process has (the binaries install color-eyre's): its Debug
        // output is where a captured backtrace goes.
        let report = report();
        let text = render(&report, Exit::Internal, false);
        assert_eq!(text, format!("Error: {report:?}"));
        assert_ne!(text, render(&report, Exit::Usage, false));
    }
}
