//! `cargo xtask bench`: our tools next to perftest, measured in the same two-guest session.
//!
//! For each size of the sweep, `rdma-client bench --mode lat|bw` (against a plain `rdma-server
//! --serve`, started with no bench flags) and `ib_write_lat` / `ib_write_bw` run with the same
//! parameters, alternating which goes first, a few repetitions each. A plain TCP stream
//! between the guests measures the link itself (the ceiling here). The warm e2e turnaround is
//! timed as before. Writes `target/bench/results.json` (schema-versioned: raw samples and
//! summaries), `results.csv`, and the plots `latency.{svg,png}` and `bandwidth.{svg,png}`.
//!
//! The same boot also floods a server with strangers (`flood`) and runs the mesh on both guests
//! (`mesh`: probes per second per node, one probe's time, the server's CPU per probe and its
//! memory; `mesh.csv`).
//!
//! Modules: `plans` (what each guest runs), `parse` (the tools' outputs), `results` (samples,
//! summaries, targets, files), `report` (the table), `plot`, `tcp` (the hidden link probe),
//! `procfs` (a server's CPU and memory from `/proc`), `stamp` (when each line of a command's
//! output came).

pub mod flood;
mod mesh;
mod parse;
mod plans;
mod plot;
mod procfs;
mod report;
mod results;
pub mod stamp;
pub mod tcp;

use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use clap::Args;
use color_eyre::eyre::{Result, WrapErr as _, bail};

use crate::e2e::{self, E2eArgs};
use crate::scenario::exit::Speaks;
use crate::scenario::transcript::{Role, Transcript};
use crate::vm::{self, VmOptions};

use plans::{Params, TCP_SINK, Unit, units};
use results::{Mode, Results, SCHEMA, Sample};

/// Arguments of `cargo xtask bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Message sizes in bytes, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "2,64,1024,4096,65536,1048576"
    )]
    pub sizes: Vec<u64>,
    /// Every power of two from 2 B to 8 MiB (like perftest's -a) instead of --sizes.
    #[arg(long)]
    pub all_sizes: bool,
    /// Repetitions per size and tool.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub reps: u32,
    /// Most exchanges of a latency run (big messages get fewer, at least 10).
    #[arg(long, default_value_t = 500)]
    pub lat_iters: u64,
    /// Most writes of a bandwidth run (big messages get fewer, at least 10).
    #[arg(long, default_value_t = 1000)]
    pub bw_iters: u64,
    /// Writes in flight in bandwidth runs (both tools).
    #[arg(long, default_value_t = 128)]
    pub tx_depth: u32,
    /// Seconds of the TCP stream that measures the link.
    #[arg(long, default_value_t = 5.0)]
    pub tcp_secs: f64,
    /// Delay each guest's frames by this many milliseconds (`tc qdisc … netem delay`, so a
    /// round trip takes twice it more): a slow link, where a latency loop that naps through a
    /// live exchange shows (issue 23, item 12). 0: none.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=1000))]
    pub delay_ms: u32,
    /// Seconds of the stranger flood: connections that read the banner and close, against a
    /// server with a token; the server's CPU a connection is a target (0: none).
    #[arg(long, default_value_t = 10.0)]
    pub flood_secs: f64,
    /// Cycles of the mesh (both guests run `rdma-server --serve` and `rdma-client mesh`; two
    /// nodes make a cycle one interval): its probe rate, one probe's time, and the server's CPU
    /// per probe and memory (0: none).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u32).range(0..=200))]
    pub mesh_cycles: u32,
    /// Seconds of the mesh's `--every` (each node probes the other once an interval; a probe
    /// must end within it).
    #[arg(long, default_value_t = 1.0)]
    pub mesh_every: f64,
    /// The mesh's probers open a new write session every probe (`--no-reuse`), to compare
    /// with the default, which writes on each path's kept session (rounds).
    #[arg(long)]
    pub mesh_no_reuse: bool,
    /// Skip timing the warm `cargo xtask e2e` (then the binaries must be built already).
    #[arg(long)]
    pub no_e2e: bool,
    /// Exit non-zero when a target is missed (default: report it and exit 0).
    #[arg(long)]
    pub strict: bool,
    /// Boot nothing: re-read target/bench/results.json, recompute its summaries and targets,
    /// and rewrite the files, the plots and the table.
    #[arg(long)]
    pub from_results: bool,
    #[command(flatten)]
    pub vm: VmOptions,
}

/// Turnaround target of `cargo xtask e2e` (seed scenario, two guests, warm cache).
const E2E_TARGET: Duration = Duration::from_secs(30);

/// 2 B .. 8 MiB.
fn all_sizes() -> Vec<u64> {
    (1..=23).map(|i| 1u64 << i).collect()
}

/// Where the results go: `target/bench` (next to `target/xtask`).
fn out_dir() -> PathBuf {
    let x = vm::xtask_dir();
    x.parent()
        .map_or_else(|| x.join("bench"), |t| t.join("bench"))
}

/// The release binaries, as users get them (perftest is optimised C: a debug build would
/// measure the compiler, not the tool); guests see the host's files.
fn release_bins() -> Result<e2e::Bins> {
    e2e::build()?;
    e2e::Bins::locate(false)
}

/// Entry point.
pub fn cmd(args: &BenchArgs) -> Result<()> {
    crate::deps::ensure(&[crate::deps::Group::Bench])?;
    if args.from_results {
        let path = out_dir().join("results.json");
        let bytes = std::fs::read(&path).wrap_err_with(|| format!("reading {}", path.display()))?;
        let mut r: Results = serde_json::from_slice(&bytes)
            .wrap_err_with(|| format!("parsing {}", path.display()))?;
        if r.schema != SCHEMA {
            bail!(
                "{} has schema {}, this xtask writes {SCHEMA}",
                path.display(),
                r.schema
            );
        }
        r.summary = results::summarize(&r.samples, &r.sizes, r.link_mbs);
        r.targets = results::judge(&r.summary, &r.setup, r.e2e_wall_s, E2E_TARGET.as_secs_f64());
        if r.flood_secs > 0.0 {
            r.targets.extend(flood::targets(r.flood.as_ref()));
        }
        if r.mesh_cycles > 0 {
            r.targets
                .extend(mesh::targets(r.mesh.as_ref(), r.mesh_error.as_deref()));
        }
        return finish(args, &r);
    }
    let mut sizes = if args.all_sizes {
        all_sizes()
    } else {
        args.sizes.clone()
    };
    sizes.sort_unstable();
    sizes.dedup();
    if sizes.is_empty() || sizes.iter().any(|&s| s == 0 || s > 1 << 30) {
        bail!("bench: sizes must be 1 B .. 1 GiB (got {sizes:?})");
    }
    let e2e_wall_s = if args.no_e2e {
        None
    } else {
        let seed = E2eArgs {
            backend: crate::backend::BackendChoice::Vm,
            nodes: 2,
            all: false,
            only: vec!["seed".into()],
            list: false,
            vm: args.vm.clone(),
            selftest: false,
            load: false,
            no_build: false,
        };
        // The first run builds and warms the kernel cache; the second is what a user waits for.
        e2e::cmd(&seed).wrap_err("bench: the seed scenario failed")?;
        let t = Instant::now();
        e2e::cmd(&seed).wrap_err("bench: the seed scenario failed")?;
        Some(t.elapsed().as_secs_f64())
    };
    let bins = release_bins()?;
    let params = Params {
        sizes: sizes.clone(),
        reps: args.reps,
        lat_iters: args.lat_iters,
        bw_iters: args.bw_iters,
        tx_depth: args.tx_depth.max(1),
        tcp_secs: args.tcp_secs.clamp(1.0, 60.0),
        setup_reps: 3,
        delay_ms: args.delay_ms,
        flood_secs: args.flood_secs.clamp(0.0, 300.0),
        mesh: (args.mesh_cycles > 0).then(|| mesh::figures::Setting {
            every: Duration::from_secs_f64(args.mesh_every.clamp(0.1, 60.0)),
            cycles: args.mesh_cycles,
            nodes: vec![plans::SERVER_IP.to_owned(), plans::CLIENT_IP.to_owned()],
            no_reuse: args.mesh_no_reuse,
        }),
    };
    let guests = plans::plans(&params, &bins);
    let run = vm::run_plans(&guests, &args.vm)?;
    let t = Transcript::from_guests(&run, &|name: &str| cast(&params, name));
    let why: Vec<String> = t
        .guests
        .iter()
        .filter_map(|g| g.died.as_ref().map(|e| format!("guest {}: {e}", g.name)))
        .collect();
    if !why.is_empty() {
        bail!("bench: a guest gave no result: {}", why.join("; "));
    }
    // xtask's own TCP measurement: its line is its own, no event of our binaries.
    let link = t.role(TCP_SINK).and_then(|s| parse::tcp(&s.stdout));
    let link_mbs = link.map(|l| l.mbs());
    let (mut samples, mut setup) = (Vec::new(), Vec::new());
    for u in units(&params) {
        let s = sample(&u, &t);
        if u.setup {
            setup.push(s);
        } else {
            samples.push(s);
        }
    }
    let summary = results::summarize(&samples, &sizes, link_mbs);
    let mut targets = results::judge(&summary, &setup, e2e_wall_s, E2E_TARGET.as_secs_f64());
    let flood = (params.flood_secs > 0.0)
        .then(|| flood::collect(&t))
        .flatten();
    if params.flood_secs > 0.0 {
        targets.extend(flood::targets(flood.as_ref()));
    }
    let (mesh, mesh_error) = match params.mesh.as_ref().map(|s| mesh::collect(&t, s)) {
        Some(Ok(m)) => (Some(m), None),
        Some(Err(e)) => (None, Some(e)),
        None => (None, None),
    };
    if params.mesh.is_some() {
        targets.extend(mesh::targets(mesh.as_ref(), mesh_error.as_deref()));
    }
    let environment = format!(
        "Soft-RoCE (rdma_rxe) between two QEMU guests on one virtual link, {} \
         (emulated CPUs: compare the tools, not absolute numbers){}, host with {} CPU(s)",
        run.guests.prepared.accel_why,
        if params.delay_ms > 0 {
            format!(", each frame delayed {} ms (netem)", params.delay_ms)
        } else {
            String::new()
        },
        std::thread::available_parallelism().map_or(0, std::num::NonZero::get)
    );
    let r = Results {
        schema: SCHEMA,
        finished_unix_s: SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        environment,
        sizes,
        reps: args.reps,
        tx_depth: params.tx_depth,
        link,
        link_mbs,
        e2e_wall_s,
        setup,
        samples,
        summary,
        targets,
        flood_secs: params.flood_secs,
        flood,
        mesh_cycles: params.mesh.as_ref().map_or(0, |s| s.cycles),
        mesh,
        mesh_error,
    };
    if let Some(a) = t.guests.first().filter(|a| !a.ok) {
        println!(
            "  note: guest A's plan reported: {}",
            a.plan_error.as_deref().unwrap_or("?")
        );
    }
    finish(args, &r)
}

/// Writes the files and the plots, prints the table; a mesh that ran without its figures
/// fails, and with --strict so does a missed target.
fn finish(args: &BenchArgs, r: &Results) -> Result<()> {
    let dir = out_dir();
    results::write(&dir, r)?;
    print!("{}", report::render(r));
    match plot::write(&dir, r, "Soft-RoCE under QEMU TCG emulation") {
        Ok(files) => println!(
            "  plots: {}",
            files
                .iter()
                .map(|f| f.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Err(e) => println!("  plots: not drawn: {e:#}"),
    }
    println!(
        "  results: {}/results.{{json,csv}}{}",
        dir.display(),
        if r.mesh.is_some() { ", mesh.csv" } else { "" }
    );
    if r.mesh_cycles > 0 && r.mesh.is_none() {
        bail!(
            "bench: the mesh ran without its figures: {}",
            r.mesh_error.as_deref().unwrap_or("none recorded")
        );
    }
    let missed = r.targets.iter().filter(|t| !t.met).count();
    if args.strict && missed > 0 {
        bail!("bench: {missed} target(s) missed (see above)");
    }
    Ok(())
}

/// Which role a step of the session plays: our server (the session's and the flood's), our
/// client (each measured run of ours, the flood's real client); perftest, tc and xtask's own
/// steps are not ours.
fn cast(params: &Params, name: &str) -> Speaks {
    if name == plans::OUR_SERVER || name == flood::SERVER {
        return Speaks::Server;
    }
    if let Some(speaks) = mesh::speaks(name) {
        return speaks;
    }
    let ours = units(params)
        .iter()
        .any(|u| u.tool == results::Tool::Ours && u.step_name() == name);
    if ours || name == flood::CLIENT {
        Speaks::Client
    } else {
        Speaks::Other
    }
}

/// The result of one unit's step in guest B.
fn sample(u: &Unit, t: &Transcript) -> Sample {
    let step: Option<&Role> = t.role(&u.step_name());
    let mut s = Sample {
        tool: u.tool,
        mode: u.mode,
        bytes: u.bytes,
        rep: u.rep,
        wall_s: step.map_or(0.0, |s| s.elapsed_s),
        lat: None,
        bw: None,
        error: None,
    };
    let Some(step) = step else {
        s.error = Some("did not run (the plan stopped before it)".into());
        return s;
    };
    match (u.tool, u.mode) {
        (results::Tool::Perftest, Mode::Lat) => s.lat = parse::perftest_lat(&step.stdout),
        (results::Tool::Perftest, Mode::Bw) => s.bw = parse::perftest_bw(&step.stdout),
        (results::Tool::Ours, Mode::Lat) => match parse::ours_lat(step) {
            Ok(row) => s.lat = row,
            Err(e) => s.error = Some(e),
        },
        (results::Tool::Ours, Mode::Bw) => match parse::ours_bw(step) {
            Ok(row) => s.bw = row,
            Err(e) => s.error = Some(e),
        },
    }
    if s.error.is_some() {
        return s;
    }
    if !step.ok || (s.lat.is_none() && s.bw.is_none()) {
        s.lat = None;
        s.bw = None;
        s.error = Some(format!(
            "{}{}: {}",
            step.exit,
            step.error
                .as_deref()
                .map_or_else(String::new, |e| format!(", {e}")),
            crate::text::shorten(
                crate::text::tail(
                    if step.stderr.trim().is_empty() {
                        &step.stdout
                    } else {
                        &step.stderr
                    },
                    400
                )
                .trim(),
                400
            )
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_sizes_is_2_b_to_8_mib() {
        let s = all_sizes();
        assert_eq!(s.first(), Some(&2));
        assert_eq!(s.last(), Some(&(8 << 20)));
        assert_eq!(s.len(), 23);
    }

    #[test]
    fn a_failed_step_is_a_sample_with_an_error() {
        use crate::plan::{PlanResult, StepResult};
        use crate::scenario::transcript::Machine;
        let u = Unit {
            tool: results::Tool::Perftest,
            mode: Mode::Lat,
            bytes: 2,
            rep: 0,
            iters: 10,
            tx_depth: 1,
            setup: false,
        };
        let params = Params {
            sizes: vec![2],
            reps: 1,
            lat_iters: 10,
            bw_iters: 10,
            tx_depth: 1,
            tcp_secs: 1.0,
            setup_reps: 1,
            delay_ms: 0,
            flood_secs: 0.0,
            mesh: None,
        };
        let t = |r: &PlanResult| {
            Transcript::build([(Machine::default(), Ok(r.clone()))], &|n: &str| {
                cast(&params, n)
            })
        };
        let mut r = PlanResult::default();
        assert!(sample(&u, &t(&r)).error.unwrap().contains("did not run"));
        r.steps.push(StepResult {
            name: u.step_name(),
            exit_code: Some(1),
            stderr: "Couldn't connect to 10.0.0.1:18515".into(),
            ..Default::default()
        });
        let s = sample(&u, &t(&r));
        assert!(s.lat.is_none());
        assert!(s.error.unwrap().contains("Couldn't connect"));
        // Ours: a step whose row never came, or whose line is no event, is an error.
        let ours = Unit {
            tool: results::Tool::Ours,
            ..u
        };
        assert_eq!(cast(&params, &ours.step_name()), Speaks::Client);
        assert_eq!(cast(&params, &u.step_name()), Speaks::Other);
        assert_eq!(cast(&params, plans::OUR_SERVER), Speaks::Server);
        let mut r = PlanResult::default();
        r.steps.push(StepResult {
            name: ours.step_name(),
            exit_code: Some(0),
            ok: true,
            stdout: "{\"type\":\"bench_lat\"}\n".into(),
            ..Default::default()
        });
        let s = sample(&ours, &t(&r));
        assert!(s.lat.is_none());
        assert!(s.error.unwrap().contains("bench_lat"));
        r.steps[0].stdout.clear();
        let s = sample(&ours, &t(&r));
        assert!(s.error.unwrap().contains("exit 0"));
    }
}
