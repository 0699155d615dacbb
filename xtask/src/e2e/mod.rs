//! `cargo xtask e2e`: build, bring up Soft-RoCE (real hardware, host rxe, or QEMU guests), run
//! `rdma-server` and `rdma-client` through the scenarios, and judge them from their output.
//!
//! The same scenarios run on every backend: they become [`Plan`](crate::plan::Plan)s of steps.
//! With two guests the servers run in guest A and the clients in guest B; with one node (a
//! guest, or this host with rxe/hardware) both run side by side. A one-node guest runs
//! `xtask e2e --backend rxe` itself, so the host-rxe backend is exercised in CI too.
//!
//! The parts: [`scenarios`] (the table: what runs and what must be seen), [`bins`] (build and
//! find the binaries), [`files`] (the input files), [`steps`] (scenarios as plan steps),
//! [`plans`] (which node runs which steps), [`run`] (run the plans, collect the results),
//! [`report`] (judge and print).

pub mod bins;
mod files;
mod plans;
mod report;
mod run;
pub mod scenarios;
mod steps;

pub use bins::{Bins, build};

use crate::backend::{self, Backend, BackendChoice};
use crate::deps::{self, Group};
use crate::vm::VmOptions;
use clap::Args;
use color_eyre::eyre::{Result, bail};
use files::Files;
use scenarios::Scenario;
use std::time::{Duration, Instant};

/// Arguments of `cargo xtask e2e`.
#[derive(Debug, Clone, Args)]
pub struct E2eArgs {
    /// Where the RDMA comes from; `auto` picks and says why.
    #[arg(long, default_value = "auto")]
    pub backend: BackendChoice,
    /// VM backend: 2 = server in guest A, client in guest B; 1 = both in one guest.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u8).range(1..=2))]
    pub nodes: u8,
    /// Run every scenario (default: the quick ones: the seed's write, human and --json).
    #[arg(long)]
    pub all: bool,
    /// Run only these scenarios (repeatable); see `--list`.
    #[arg(long = "scenario", value_name = "NAME")]
    pub only: Vec<String>,
    /// List the scenarios and exit.
    #[arg(long)]
    pub list: bool,
    #[command(flatten)]
    pub vm: VmOptions,
    /// Also run rdma-core-rs's device self-test (`examples/loopback`) on the server node.
    #[arg(long)]
    pub selftest: bool,
    /// Also run the load test on the client node: 200 sequential + 16 concurrent sessions with
    /// random payloads, a client SIGKILLed at each stage, server RSS and fds checked.
    #[arg(long)]
    pub load: bool,
    /// Do not build: use the release binaries already built (used inside guests).
    #[arg(long, hide = true)]
    pub no_build: bool,
}

/// Entry point of `cargo xtask e2e`.
pub fn cmd(args: &E2eArgs) -> Result<()> {
    let selected = select(args)?;
    if args.list {
        for s in scenarios::all() {
            println!(
                "{:<20} {}{}",
                s.name,
                s.about,
                if s.quick { " (quick)" } else { "" }
            );
        }
        return Ok(());
    }
    let t0 = Instant::now();
    let mut phases: run::Phases = Vec::new();
    // What is missing is installed before the build, in at most two rounds: the build's and
    // the run's tools (the backend's detection needs `rdma` and `modprobe`), then the guests'
    // if no device here can carry the write, so a new machine learns of QEMU before a build
    // of minutes, not after it.
    if !args.no_build {
        deps::ensure(&[Group::Build, Group::Run])?;
    }
    let detection = backend::detect(args.backend)?;
    println!("e2e: backend {detection}");
    if matches!(detection.backend, Backend::Vm { .. }) {
        deps::ensure(&[Group::Vm])?;
    }
    if !args.no_build {
        let t = Instant::now();
        bins::build()?;
        phases.push(("build", t.elapsed()));
    }
    let in_guest = std::env::var_os("XTASK_GUEST").is_some();
    let selected = if matches!(detection.backend, Backend::Vm { .. }) || in_guest {
        selected
    } else {
        skip_guest_only(selected)
    };
    let bins = Bins::locate(args.selftest)?;
    let files = Files::write()?;

    let collected = match &detection.backend {
        Backend::Vm { .. } => {
            let topo = plans::Topology {
                nodes: args.nodes,
                selftest: args.selftest,
                load: args.load,
            };
            let guests = plans::guests(topo, &selected, &bins, &files)?;
            run::in_guests(&guests, &selected, args.nodes == 1, &args.vm, &mut phases)?
        }
        Backend::Rxe { netdev, ipv4 } => {
            let t = Instant::now();
            let link = crate::rxe::RxeLink::create("rxe-e2e", netdev, Duration::from_secs(20))?;
            phases.push(("rxe up", t.elapsed()));
            // Clients reach the server at the rxe netdev's address: the GID a peer announces
            // must be routable through that netdev (`::ffff:127.0.0.1` is not).
            let ip = ipv4.split('/').next().unwrap_or(ipv4);
            on_host(args, &selected, &bins, &files, link.name(), ip, &mut phases)?
        }
        Backend::Hardware { device } => on_host(
            args,
            &selected,
            &bins,
            &files,
            device,
            "127.0.0.1",
            &mut phases,
        )?,
    };
    phases.push(("total", t0.elapsed()));
    report::report(&selected, &collected, &phases)
}

/// The scenarios, less those that take a network link down (they run only inside the guests,
/// never on a user's host).
fn skip_guest_only(selected: Vec<Scenario>) -> Vec<Scenario> {
    let (kept, skipped): (Vec<_>, Vec<_>) = selected.into_iter().partition(|s| !s.guest_only);
    for s in skipped {
        println!(
            "SKIP  {:<20} it takes a network link down: runs only inside the guests",
            s.name
        );
    }
    kept
}

/// Runs every scenario on this host, on `device`.
fn on_host(
    args: &E2eArgs,
    selected: &[Scenario],
    bins: &Bins,
    files: &Files,
    device: &str,
    server_ip: &str,
    phases: &mut run::Phases,
) -> Result<run::Collected> {
    let sync = tempfile::Builder::new().prefix("rdma-e2e-sync").tempdir()?;
    let plan = plans::local(
        selected,
        bins,
        files,
        args.load,
        device,
        server_ip,
        sync.path().display().to_string(),
    )?;
    Ok(run::on_host(&plan, selected, phases))
}

fn select(args: &E2eArgs) -> Result<Vec<Scenario>> {
    let all = scenarios::all();
    for name in &args.only {
        if !all.iter().any(|s| s.name == name) {
            let names: Vec<_> = all.iter().map(|s| s.name).collect();
            bail!("no scenario `{name}`; known: {}", names.join(", "));
        }
    }
    Ok(all
        .into_iter()
        .filter(|s| {
            if args.only.is_empty() {
                args.all || s.quick
            } else {
                args.only.iter().any(|n| n == s.name)
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    #[derive(Debug, clap::Parser)]
    struct Cli {
        #[command(flatten)]
        e2e: E2eArgs,
    }

    fn parse(argv: &[&str]) -> E2eArgs {
        Cli::try_parse_from(std::iter::once("e2e").chain(argv.iter().copied()))
            .unwrap()
            .e2e
    }

    #[test]
    fn selection_is_quick_all_or_named() {
        let names =
            |a: &E2eArgs| -> Vec<&str> { select(a).unwrap().iter().map(|s| s.name).collect() };
        let quick = names(&parse(&[]));
        assert!(!quick.is_empty());
        assert!(
            scenarios::all()
                .iter()
                .filter(|s| s.quick)
                .all(|s| quick.contains(&s.name))
        );
        assert_eq!(names(&parse(&["--all"])).len(), scenarios::all().len());
        assert_eq!(names(&parse(&["--scenario", "token"])), vec!["token"]);
        let err = select(&parse(&["--scenario", "nope"]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("no scenario `nope`") && err.contains("token"),
            "{err}"
        );
        let kept = skip_guest_only(scenarios::all());
        assert!(kept.iter().all(|s| !s.guest_only));
    }
}
