//! `cargo xtask load`: many real clients against one long-running `rdma-server`, in one guest.
//!
//! Starts the server itself (`--serve --json`, on 127.0.0.1), runs `--sequential` client
//! processes one after another, then `--concurrent` at once (exactly the server's
//! `--max-clients`), each writing its own random payload of random length, and optionally
//! `--kill-stages` (clients that SIGKILL themselves mid-session, each followed by a normal one).
//! Every client must exit 0 with a `verified` event whose length and CRC32C match its payload.
//!
//! Between phases it waits until the server is quiescent (its thread count is back to the
//! baseline taken after `listening`: every session thread has ended), then reads its RSS and
//! open file descriptors. The run fails if RSS grew by more than `--rss-slack-mib` or the fd
//! count grew by more than `--fd-slack` (0) between the warm-up and the end. Finally SIGTERM:
//! the server must exit 0 in time and print a `stopped` event whose counters match.
//!
//! Every wait has a deadline; the server and the clients are killed on every exit path.
//!
//! The parts: [`args`] (the command line), [`server`] (the server process and its events),
//! [`clients`] (client processes and their verdicts), [`sample`] (`/proc` readings),
//! [`phases`] (what runs in which order), [`policy`] (what counts as a leak or a wrong stop),
//! [`report`] (the output).

mod args;
mod clients;
mod phases;
mod policy;
mod report;
mod sample;
mod server;
pub(crate) mod strangers;
#[cfg(test)]
mod tests;

pub use args::LoadArgs;

pub use phases::worst_case;

use clients::Clients;
use color_eyre::eyre::{Result, WrapErr as _, bail};
use policy::Limits;
use rdma_proto::events::server::Event;
use server::{ServerGuard, check_listening};
use std::time::Instant;

/// Runs the load test; `Err` if anything failed.
pub fn cmd(args: &LoadArgs) -> Result<()> {
    if args.warmup == 0 || args.warmup > args.sequential {
        bail!(
            "--warmup must be 1..=--sequential ({}), got {}",
            args.sequential,
            args.warmup
        );
    }
    let started = Instant::now();
    let rng_seed = args.rng_seed.unwrap_or_else(|| fastrand::u64(..));
    let tmp = match &args.tmp_dir {
        Some(d) => tempfile::TempDir::new_in(d),
        None => tempfile::TempDir::new(),
    }
    .wrap_err("creating a directory for the payload files")?;
    let addr = format!("127.0.0.1:{}", args.port);

    let mut server = ServerGuard::start(args, &addr)?;
    let listening = server.wait_for(
        "listening",
        |e| matches!(e, Event::Listening { .. }),
        Instant::now() + args.server_deadline,
    )?;
    check_listening(&listening, args)?;
    let pid = server.pid();
    let baseline_threads = sample::proc_threads(pid)?;
    println!(
        "load: server pid {pid} listening on {addr} ({baseline_threads} threads); rng seed {rng_seed}"
    );

    let mut clients = Clients::new(args, addr, tmp.path().to_path_buf(), rng_seed);
    let observed = phases::run(args, &mut server, &mut clients, baseline_threads)?;
    let limits = Limits {
        rss_slack_mib: args.rss_slack_mib,
        fd_slack: args.fd_slack,
    };
    let mut failures = std::mem::take(&mut clients.failures);
    let after_warmup = clients.started - u64::from(args.warmup);
    failures.extend(policy::leak_failures(
        &observed,
        limits,
        after_warmup,
        clients.kills,
        u64::from(args.concurrent),
    ));

    // Stop: SIGTERM, exit 0 in time, a `stopped` event with the right counters.
    let exit = match server.terminate(args.server_deadline) {
        Ok((exit, stopped)) => {
            failures.extend(policy::stop_failures(
                stopped.as_ref(),
                clients.started + clients.extra_connections,
                clients.strangers,
                clients.verified,
            ));
            exit
        }
        Err(e) => {
            failures.push(format!("{e:#}"));
            failures.extend(policy::stop_failures(
                None,
                clients.started + clients.extra_connections,
                clients.strangers,
                clients.verified,
            ));
            None
        }
    };

    report::print(
        &report::Summary {
            observed: &observed,
            baseline_threads,
            sessions: clients.started,
            verified: clients.verified,
            kills: clients.kills,
            failures: &failures,
            exit,
            wall: started.elapsed(),
            rng_seed,
        },
        args.json,
    );
    if let Some(first) = failures.first() {
        bail!(
            "load test failed: {} problem(s), first: {first}",
            failures.len()
        );
    }
    Ok(())
}
