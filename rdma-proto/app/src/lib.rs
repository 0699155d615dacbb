//! What both binaries share to start and end a run: the rule that turns a failure into one of
//! the contract's exit codes ([`classify`]), the `--json` writer of the contract's events
//! ([`Output`]), one error reporter ([`report`]), and [`main`], the one way a binary ends;
//! [`device`] (the flags that choose the local end), [`token`] (the access token) and
//! [`generate`] (man page, completions), and [`wake`] (how a loop that runs for days sleeps
//! until a client or a signal).
//!
//! It is where the protocol (rdma-proto) and the verbs layer (rdma-core-rs) meet, so that
//! neither depends on the other: [`verbs`] says which exit a verbs error ends in and converts
//! the handshake's endpoint. Nothing here does network I/O or posts a verb.

#[cfg(feature = "verbs")]
pub mod device;
pub mod generate;
mod output;
pub mod report;
#[cfg(feature = "test-support")]
pub mod testing;
pub mod token;
#[cfg(feature = "verbs")]
pub mod verbs;
pub mod wake;

pub use output::{Events, Output};
pub use rdma_proto::exit::{Documented, Exit, exit_codes_help};

use color_eyre::eyre::{Result, eyre};
use std::error::Error as StdError;
use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

/// The exit for `report`: the most specific typed error in its chain (outermost first) decides,
/// as `own` (the binary's view of its errors, the protocol's and the verbs layer's) sees it.
/// Anything else, and any exit the binary does not document, is [`Exit::Internal`].
pub fn classify(
    report: &color_eyre::Report,
    documented: Documented,
    own: impl Fn(&(dyn StdError + 'static)) -> Option<Exit>,
) -> Exit {
    match report.chain().find_map(own) {
        Some(exit) if documented.iter().any(|(d, _)| *d == exit) => exit,
        _ => Exit::Internal,
    }
}

/// `--json`, the flag both binaries share (flatten it into their arguments).
#[derive(Clone, Copy, Debug, clap::Args)]
pub struct JsonFlag {
    /// Print JSON Lines events (each with a `type` tag) instead of human text.
    #[arg(long)]
    pub json: bool,
}

/// Runs a binary: installs the reporter, parses `A`, calls `run`, and turns its outcome into an
/// exit code. A failure is reported through [`Output::fatal`], with the exit `classify` chooses;
/// a mistake on the command line is a usage error (2) reported the same way, so with `--json`
/// it too ends in a JSON `error` event.
pub fn main<A, E>(
    json: impl FnOnce(&A) -> bool,
    run: impl FnOnce(A, Output<E>) -> Result<()>,
    classify: impl FnOnce(&color_eyre::Report) -> Exit,
) -> ExitCode
where
    A: clap::Parser,
    E: Events,
{
    if let Some(code) = generate::if_asked::<A>() {
        return code;
    }
    report::install();
    let args = match A::try_parse() {
        Ok(args) => args,
        Err(e) => {
            let out = Output::<E>::new(json_requested(std::env::args_os()));
            return command_line_error(&e, out);
        }
    };
    let out = Output::new(json(&args));
    match run(args, out) {
        Ok(()) => ExitCode::SUCCESS,
        Err(report) => out.fatal(classify(&report), &report),
    }
}

/// `--help` and `--version` print and succeed; anything else clap refuses is a usage error:
/// clap's own text for a person, the `error` event plus one line with `--json`.
fn command_line_error<E: Events>(e: &clap::Error, out: Output<E>) -> ExitCode {
    if !e.use_stderr() || !out.json() {
        let _ = e.print();
        return if e.use_stderr() {
            Exit::Usage.into()
        } else {
            ExitCode::SUCCESS
        };
    }
    let text = e.to_string();
    let first = text.lines().next().unwrap_or_default();
    let message = first.strip_prefix("error: ").unwrap_or(first);
    out.fatal(Exit::Usage, &eyre!("{message}; see --help"))
}

/// Whether `--json` is among the arguments (before any `--`), for reporting a command line that
/// did not parse. No option of either binary takes a value that could be `--json`.
fn json_requested(args: impl IntoIterator<Item = OsString>) -> bool {
    args.into_iter()
        .skip(1)
        .take_while(|a| a != "--")
        .any(|a| a == "--json")
}

/// Value parser for the durations on both command lines (`10s`, `500ms`, `1m`): zero is refused,
/// since every deadline would already have passed.
///
/// # Errors
/// A text humantime does not read, or zero.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    match humantime::parse_duration(text) {
        Ok(d) if d.is_zero() => {
            Err("a duration must be longer than zero (e.g. 10s, 500ms, 1m)".into())
        }
        Ok(d) => Ok(d),
        Err(e) => Err(format!("{e} (write e.g. 10s, 500ms, 1m)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_is_seen_only_as_a_flag() {
        let argv = |a: &[&str]| a.iter().map(OsString::from).collect::<Vec<_>>();
        assert!(json_requested(argv(&[
            "rdma-client",
            "h",
            "--json",
            "--timeout",
            "x"
        ])));
        assert!(!json_requested(argv(&[
            "rdma-client",
            "h",
            "--message=--json"
        ])));
        assert!(!json_requested(argv(&["rdma-client", "--", "--json"])));
        assert!(!json_requested(argv(&["--json"])), "argv[0] is the program");
    }

    #[test]
    fn the_outermost_typed_error_decides_and_undocumented_codes_are_internal() {
        const DOCS: Documented = &[(Exit::Usage, "usage error"), (Exit::Timeout, "timeout")];
        #[derive(Debug, thiserror::Error)]
        #[error("inner")]
        struct Inner;
        let report = || color_eyre::Report::new(Inner).wrap_err("outer");
        let inner = |c: &(dyn StdError + 'static)| c.is::<Inner>().then_some(Exit::Usage);
        assert_eq!(classify(&report(), DOCS, inner), Exit::Usage);
        assert_eq!(classify(&report(), DOCS, |_| None), Exit::Internal);
        // The outermost cause `own` knows wins.
        assert_eq!(
            classify(&report(), DOCS, |_| Some(Exit::Timeout)),
            Exit::Timeout
        );
        // A code the binary does not document never escapes.
        assert_eq!(
            classify(&report(), DOCS, |_| Some(Exit::Refused)),
            Exit::Internal
        );
        assert_eq!(classify(&eyre!("odd"), DOCS, |_| None), Exit::Internal);
    }

    #[test]
    fn durations_must_be_positive() {
        assert_eq!(parse_duration("1500ms"), Ok(Duration::from_millis(1500)));
        assert!(
            parse_duration("0s")
                .unwrap_err()
                .contains("longer than zero")
        );
        assert!(parse_duration("soon").unwrap_err().contains("e.g. 10s"));
    }
}
