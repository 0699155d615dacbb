//! The load's phases, in order: sequential clients (the warm-up measurement inside them),
//! `--concurrent` clients at once, then optionally the kill stages. Between phases the server
//! must be quiescent, and it is measured.

use super::args::LoadArgs;
use super::clients::{Clients, KILL_STAGES};
use super::policy::Observed;
use super::sample::{Sample, quiesce};
use super::server::ServerGuard;
use super::strangers;
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
    // The busy phase's client once more, and each soak round's.
    let clients = args.sequential + 1 + kills + 1 + args.soak_rounds;
    let quiesces = 4 + u32::from(args.kill_stages) + args.soak_rounds;
    // Listening, the quiescence waits and the stop, each at the server's deadline; each
    // burst of strangers (its connects end within a second of its length).
    args.client_deadline * clients
        + args.server_deadline * (quiesces + 2)
        + (args.soak_burst + std::time::Duration::from_secs(1)) * args.soak_rounds
}

/// Every slot of the server held by idle connections from this host, then a normal client:
/// it must be answered `busy` (the server's `refused` event says so), wait its turn with
/// `--wait-for-server` (its own `busy` event), and verify once the slots are given back (issue
/// 23, item 11: `busy` is transient, not final). Deterministic: the slots are released only
/// after the server has refused the client at least once.
fn busy(args: &LoadArgs, server: &mut ServerGuard, clients: &mut Clients<'_>) -> Result<()> {
    let deadline = std::time::Instant::now() + args.client_deadline;
    let held = match (0..args.concurrent)
        .map(|_| clients.hold_slot(deadline))
        .collect::<Result<Vec<_>>>()
    {
        Ok(held) => held,
        Err(e) => {
            clients.failures.push(format!("busy phase: {e:#}"));
            return Ok(());
        }
    };
    let refused_before = refused_busy(server);
    let c = clients.spawn("imm", None)?;
    let turned_away = server.wait_until(
        "a `refused` event with code busy for the client",
        |s| refused_busy(s) > refused_before,
        deadline,
    );
    let holders = held.len() as u64;
    drop(held);
    let waited_before = clients.busy_waits;
    clients.finish(c)?;
    clients.extra_connections += holders + (refused_busy(server) - refused_before);
    match turned_away {
        Err(e) => clients.failures.push(format!(
            "with all {} slots held, the server never answered a client busy: {e:#}",
            args.concurrent
        )),
        Ok(()) if clients.busy_waits == waited_before => clients.failures.push(
            "a client answered busy did not say it waited its turn (no `busy` event)".to_owned(),
        ),
        Ok(()) => {}
    }
    Ok(())
}

/// `--soak-rounds` rounds of strangers: a burst, a quiet gap until every session thread has
/// ended (longer than the workers' idle time), the server's RSS and open files against the
/// warm-up's, then a real client that must verify. A server that cannot start a session after
/// a burst (its worker pool wedged, its slots never given back) fails the round's client.
fn soak(
    args: &LoadArgs,
    server: &mut ServerGuard,
    clients: &mut Clients<'_>,
    warm: &Sample,
    baseline_threads: u64,
) -> Result<()> {
    let pid = server.pid();
    let addr = clients.addr()?;
    for round in 1..=args.soak_rounds {
        let b = strangers::burst(
            addr,
            args.soak_threads,
            args.soak_burst,
            strangers::junk_line,
        );
        clients.strangers += b.connected;
        let (cases, failed) = strangers::hostile(
            addr,
            args.buffer_size,
            // The server's --timeout: its default (the load does not set it).
            crate::deadline::DEFAULT_TIMEOUT,
            clients.seed() ^ u64::from(round),
        );
        clients.strangers += cases * strangers::HOSTILE_CONNECTIONS;
        println!(
            "load: soak round {round}: {} strangers connected in {:?} ({} connects failed), \
             {cases} hostile cases ({} failed)",
            b.connected,
            args.soak_burst,
            b.failed,
            failed.len()
        );
        for f in failed {
            clients
                .failures
                .push(format!("soak round {round}: hostile case {f}"));
        }
        server.alive()?;
        quiesce(pid, baseline_threads, args.server_deadline)?;
        let after = Sample::take(pid)?;
        if after.fds > warm.fds + args.fd_slack {
            clients.failures.push(format!(
                "after soak round {round} the server has {} open files, {} after the warm-up",
                after.fds, warm.fds
            ));
        }
        if after.rss_kib > warm.rss_kib + args.rss_slack_mib * 1024 {
            clients.failures.push(format!(
                "after soak round {round} the server's RSS is {} KiB, {} KiB after the warm-up \
                 (more than --rss-slack-mib {})",
                after.rss_kib, warm.rss_kib, args.rss_slack_mib
            ));
        }
        let verified = clients.verified;
        clients.run(notify(round), None)?;
        if clients.verified == verified {
            clients.failures.push(format!(
                "the real client after soak round {round} was not verified: the server does \
                 not serve after a burst of strangers"
            ));
        }
    }
    Ok(())
}

fn refused_busy(server: &ServerGuard) -> u64 {
    server.count(|e| matches!(e, Event::Refused { code, .. } if code == "busy"))
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
    for c in batch {
        clients.finish(c)?;
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
    let errors_before_busy = server.errors();
    busy(args, server, clients)?;
    quiet()?;
    // The strangers' junk lines each cost a session error: the policy counts those before.
    let errors_total = server.errors();
    soak(args, server, clients, &warm, baseline_threads)?;
    Ok(Observed {
        warm,
        after_sequential,
        end: Sample::take(pid)?,
        errors_before_concurrent,
        errors_before_kills,
        errors_before_busy,
        errors_total,
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
