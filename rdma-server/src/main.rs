//! `rdma-server`: register a buffer, let clients RDMA-Write into it, and verify what landed.
//!
//! `main` only parses the command line, calls [`run::run`] and maps the outcome to a documented
//! exit code (see [`cli::EXIT_CODES_DOC`]). Everything else lives in the modules.

mod access;
mod cli;
mod exit;
mod i18n;
mod output;
mod run;
mod session;

use clap::Parser as _;
use std::io::IsTerminal as _;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args = cli::Args::parse();
    let out = output::Output::new(args.json);
    install_error_reporter();
    init_logging();
    match run::run(args, out) {
        Ok(()) => ExitCode::SUCCESS,
        Err(report) => {
            let (code, exit_code) = exit::classify(&report);
            out.fatal(code, exit_code, &report);
            ExitCode::from(exit_code)
        }
    }
}

/// color-eyre reports, without colour codes when stderr is not a terminal.
fn install_error_reporter() {
    let hook = color_eyre::config::HookBuilder::default().display_env_section(false);
    let hook = if std::io::stderr().is_terminal() {
        hook
    } else {
        hook.theme(color_eyre::config::Theme::new())
    };
    if let Err(err) = hook.install() {
        eprintln!("warning: could not install the error reporter: {err}");
    }
}

/// Diagnostics that are not events (warnings about the host) go to stderr; `RUST_LOG` tunes them.
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}
