//! `rdma-client`: RDMA-Write a message straight into an `rdma-server`'s registered buffer.
//!
//! `main` only parses the command line, calls [`run::run`] and maps the outcome to a documented
//! exit code (see [`exit::ExitKind`]). Everything else lives in the modules.

mod cli;
mod exit;
mod output;
mod run;

use clap::Parser as _;
use std::io::IsTerminal as _;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args = cli::Args::parse();
    let out = output::Output::new(args.json);
    install_error_reporter();
    match run::run(&args, &out) {
        Ok(()) => ExitCode::SUCCESS,
        Err(report) => {
            let kind = exit::classify(&report);
            out.error(kind, &report);
            ExitCode::from(kind.code())
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
