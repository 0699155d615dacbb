//! The load's phases, in order: sequential clients (the warm-up measurement inside them),
//! `--concurrent` clients at once, then optionally the kill stages. Between phases the server
//! must be quiescent, and it is measured.

use super::args::LoadArgs;
use super::clients::{Clients, KILL_STAGES};
use super::policy::Observed;
use super::sample::{Sample, quiesce};
use super::server::ServerGuard;
use color_eyre::eyre::{Result, eyre};
use rdma_proto::events::server::Event;

/// Notify modes alternate so that both are under load.
fn notify(i: u32) -> &'static str {
    if i % 2 == 0 { "imm" } else { "tcp" }
}

/// The worst case of [`run`] with `args`, for the deadline of whoever waits on a load test:
/// the server's start, every client at its whole deadline (the concurrent batch once), each
/// quiescence wait, and the server's stop. Follows the phases below, one term each.
pub fn worst_case(args: &LoadArgs) -> std::time::Duration {
    let kills = if args.kill_stages {
        // Each stage in both notify modes, each followed by a normal client.
        KILL_STAGES.len() as u32 * 2 * 2
    } else {
        0
    };
    let clients = args.sequential + 1 + kills;
    let quiesces = 3 + u32::from(args.kill_stages);
    // Listening, the quiescence waits and the stop, each at the server's deadline.
    args.client_deadline * clients + args.server_deadline * (quiesces + 2)
}

/// Runs every phase; returns what was observed of the server.
pub(super) fn run(
    args: &LoadArgs,
    server: &mut ServerGuard,
    clients: &mut Clients<'_>,
    baseline_threads: u64,
) -> Result<Observed> {
    let pid = server.pid();
    let quiet = || quiesce(pid, baseline_threads, args.server_deadline);

    // Sequential, with the warm-up measurement inside it.
    let mut warm = None;
    for i in 0..args.sequential {
        clients.run(notify(i), None)?;
        server.alive()?;
        if i + 1 == args.warmup {
            quiet()?;
            warm = Some(Sample::take(pid)?);
        }
    }
    let warm = warm.ok_or_else(|| eyre!("no warm-up sample (--warmup > --sequential?)"))?;
    quiet()?;
    let after_sequential = Sample::take(pid)?;
    let errors_before_concurrent = server.errors();

    // Concurrent: exactly the server's --max-clients at once.
    let batch = (0..args.concurrent)
        .map(|i| clients.spawn(notify(i), None))
        .collect::<Result<Vec<_>>>()?;
    let busy_before = clients.busy_waits;
    for c in batch {
        clients.finish(c)?;
    }
    // More clients at once than one host may hold: some heard `busy`, and waited their turn
    // (issue 23, item 11: `busy` is transient, not final).
    if args.max_per_ip < args.concurrent && clients.busy_waits == busy_before {
        clients.failures.push(format!(
            "{} clients at once against --max-per-ip {}: none was answered busy and waited \
             its turn (no `busy` event), so the retry was not exercised",
            args.concurrent, args.max_per_ip
        ));
    }
    server.alive()?;
    quiet()?;
    let errors_before_kills = server.errors();

    // Clients that SIGKILL themselves at each stage, each followed by a normal one.
    if args.kill_stages {
        for stage in KILL_STAGES {
            for notify in ["imm", "tcp"] {
                clients.run(notify, Some(stage))?;
                clients.run(notify, None)?;
                server.alive()?;
            }
        }
        quiet()?;
    }
    Ok(Observed {
        warm,
        after_sequential,
        end: Sample::take(pid)?,
        errors_before_concurrent,
        errors_before_kills,
        errors_total: server.errors(),
        unverified: server.count(|e| {
            matches!(
                e,
                Event::Verified {
                    verified: false,
                    ..
                }
            )
        }),
        error_examples: server.errors_text(),
    })
}
