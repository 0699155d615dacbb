//! `cargo xtask hostile`: the hostile matrix (the test-only crate `rdma-hostile`: the cases,
//! what each does on the wire, the checks of the answers, the runner) against a live
//! `rdma-server`, as the guests' end-to-end scenarios run it. Here only the command: the
//! arguments ([`args`]), the real client's write after every case (`--probe-client`,
//! [`probe`]), the output ([`report`]) and the exit status. `rdma-server`'s tests run the same
//! matrix against the real session on the in-memory Pair.
//!
//! Output: one line per case (`PASS`/`FAIL`, the case, what was seen), or one JSON object per
//! case with `--json`, then a summary; the exit status is non-zero if any case failed.

mod args;
mod probe;
pub mod report;

pub use args::HostileArgs;

use color_eyre::eyre::{Result, bail, eyre};
use std::sync::Arc;

/// Runs the selected cases and reports; `Err` if any failed.
pub fn cmd(args: &HostileArgs) -> Result<()> {
    let cfg = Arc::new(args.config()?);
    let cases = rdma_hostile::select(&args.cases, &cfg).map_err(|e| eyre!(e))?;
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
        let v = rdma_hostile::run_case_then(&cfg, case, i as u64, &|| match &args.probe_client {
            Some(client) => probe::probe_write(client, &cfg),
            None => Ok(()),
        });
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
