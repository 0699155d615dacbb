//! `cargo xtask hostile`: a protocol-level hostile client for a live `rdma-server`.
//!
//! No RDMA, and none of `rdma-proto`'s message types: it speaks raw TCP and builds and checks
//! its lines with `serde_json`, so it tests the wire as `PROTOCOL.md` writes it, not as our own
//! library happens to implement it (only the line framing, `LineConn`, is shared).
//! Each case connects, misbehaves, and checks what the server answers (an `error` line with the
//! expected `code`, then a close; or a silent close) before a deadline. After every case a fresh
//! connection must still get a banner: nothing a client does may take the server down.
//!
//! Every line the server sends before a valid `hello` is checked for secrets (`rkey`, `addr`,
//! `qpn`): finding one fails the case.
//!
//! Output: one line per case (`PASS`/`FAIL`, the case, what was seen), or one JSON object per
//! case with `--json`, then a summary; the exit status is non-zero if any case failed.
//!
//! The parts: [`args`] (the command line) and [`config`] (the [`Config`](config::Config) it gives the cases),
//! [`case`] (the table of cases and which fit a server), [`misbehave`] (what each case does on
//! the wire), [`conn`] (one connection and its line reader), [`answer`] (pure checks of what
//! the server sent), [`runner`] (one case on its own thread, then the health probes),
//! [`report`] (the output).

mod answer;
mod args;
mod case;
mod config;
mod conn;
mod misbehave;
mod report;
mod runner;
#[cfg(test)]
mod tests;

pub use args::HostileArgs;

use color_eyre::eyre::{Result, bail};
use std::sync::Arc;

/// Runs the selected cases and reports; `Err` if any failed.
pub fn cmd(args: &HostileArgs) -> Result<()> {
    let cfg = Arc::new(args.config()?);
    let cases = case::select(&args.cases, &cfg)?;
    if !args.json {
        println!(
            "hostile: {} case(s) against {} (rng seed {}, hello gid {})",
            cases.len(),
            cfg.server,
            cfg.rng_seed,
            cfg.gid
        );
    }
    let mut verdicts = Vec::new();
    for (i, &case) in cases.iter().enumerate() {
        let v = runner::run_case(&cfg, case, i as u64);
        report::print_verdict(&v, args.json);
        verdicts.push(v);
    }
    let failed = report::print_summary(&verdicts, cfg.rng_seed, args.json);
    if !failed.is_empty() {
        bail!(
            "{} hostile case(s) failed: {}",
            failed.len(),
            failed.join(", ")
        );
    }
    Ok(())
}
