//! `cargo xtask bench`: speed and memory targets, measured, never asserted in timed tests.
//!
//! 1. **Turnaround**: the seed scenario across two guests, warm cache: at most 30 s wall
//!    (a person waits for this every time they run `cargo xtask e2e`).
//! 2. **Write latency next to perftest, in the same guests and the same run** (absolute numbers
//!    under TCG drift; only the ratio means something): `ib_write_lat` (half a round trip per
//!    exchange) against the `micros` that `rdma-client` reports for its write-with-immediate
//!    (post to send completion: one full round trip). Target: rdma-write's median at most
//!    3 × perftest's typical round trip.
//!
//! Results are printed as a table and written to `target/xtask/bench/latest.json`.

use crate::e2e::{self, E2eArgs};
use crate::plan::{GUEST_SYNC, Node, Plan, PlanResult, Step};
use crate::vm::{self, PlanGuest, VmOptions};
use clap::Args;
use color_eyre::eyre::{Result, WrapErr as _, bail, eyre};
use serde::Serialize;
use std::time::{Duration, Instant};

/// Arguments of `cargo xtask bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Exchanges of `ib_write_lat`.
    #[arg(long, default_value_t = 1000)]
    pub iters: u32,
    /// `rdma-client` runs (one write each).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(3..=500))]
    pub clients: u32,
    /// Stream the guest consoles.
    #[arg(long, short)]
    pub verbose: bool,
}

/// Turnaround target of `cargo xtask e2e` (seed scenario, two guests, warm cache).
const E2E_TARGET: Duration = Duration::from_secs(30);
/// rdma-write's median write round trip may be at most this many perftest round trips.
const LATENCY_RATIO_TARGET: f64 = 3.0;
const PERFTEST_STARTED: &str = "perftest-started";
const PERFTEST_DONE: &str = "perftest-done";
const CLIENTS_DONE: &str = "bench-clients-done";

/// What one bench run measured.
#[derive(Debug, Serialize)]
struct Report {
    e2e_wall_s: f64,
    e2e_target_s: f64,
    perftest_t_typical_us: f64,
    perftest_t_avg_us: f64,
    perftest_p99_us: f64,
    rdma_write_median_us: f64,
    rdma_write_p99_us: f64,
    rdma_client_process_median_ms: f64,
    ratio_to_perftest_round_trip: f64,
    ratio_target: f64,
    clients: usize,
    perftest_iters: u32,
}

/// Entry point.
pub fn cmd(args: &BenchArgs) -> Result<()> {
    let seed = E2eArgs {
        backend: crate::backend::BackendChoice::Vm,
        nodes: 2,
        all: false,
        only: vec!["seed".into()],
        list: false,
        vm: VmOptions {
            verbose: args.verbose,
            keep: false,
        },
        selftest: false,
        load: false,
        no_build: false,
    };
    // The first run warms the build and the kernel cache; the second is what a user waits for.
    e2e::cmd(&seed).wrap_err("bench: the seed scenario failed")?;
    let t = Instant::now();
    e2e::cmd(&seed)?;
    let e2e_wall = t.elapsed();

    let bins = e2e::Bins::locate(false)?;
    let run = vm::run_plans(
        &plans(args, &bins),
        &VmOptions {
            verbose: args.verbose,
            keep: false,
        },
    )?;
    let results: Vec<&PlanResult> = run
        .results
        .iter()
        .map(|r| r.as_ref().map_err(|e| eyre!("{e}")))
        .collect::<Result<_>>()?;
    let step = |name: &str| {
        results
            .iter()
            .find_map(|r| r.step(name))
            .ok_or_else(|| eyre!("bench step `{name}` did not run"))
    };
    let lat = step("ib_write_lat client")?;
    if !lat.ok {
        bail!(
            "ib_write_lat failed (exit {:?}):\n{}\n{}",
            lat.exit_code,
            lat.stdout,
            lat.stderr
        );
    }
    let perf = parse_write_lat(&lat.stdout)
        .ok_or_else(|| eyre!("no result line in ib_write_lat's output:\n{}", lat.stdout))?;
    let mut micros = Vec::new();
    let mut process_ms = Vec::new();
    for i in 0..args.clients {
        let r = step(&format!("client {i}"))?;
        if !r.ok {
            bail!(
                "rdma-client run {i} failed (exit {:?}):\n{}",
                r.exit_code,
                r.stderr
            );
        }
        micros.push(
            written_micros(&r.stdout).ok_or_else(|| eyre!("client {i}: no `written` event"))?,
        );
        process_ms.push(r.elapsed_s * 1000.0);
    }
    let median = percentile(&mut micros, 0.5);
    let report = Report {
        e2e_wall_s: e2e_wall.as_secs_f64(),
        e2e_target_s: E2E_TARGET.as_secs_f64(),
        perftest_t_typical_us: perf.typical,
        perftest_t_avg_us: perf.avg,
        perftest_p99_us: perf.p99,
        rdma_write_median_us: median,
        rdma_write_p99_us: percentile(&mut micros, 0.99),
        rdma_client_process_median_ms: percentile(&mut process_ms, 0.5),
        ratio_to_perftest_round_trip: median / (2.0 * perf.typical),
        ratio_target: LATENCY_RATIO_TARGET,
        clients: micros.len(),
        perftest_iters: args.iters,
    };
    print_report(&report);
    let dir = vm::xtask_dir().join("bench");
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("latest.json"), serde_json::to_vec_pretty(&report)?)?;
    let mut missed = Vec::new();
    if e2e_wall > E2E_TARGET {
        missed.push(format!(
            "e2e took {:.1} s > {:.0} s",
            report.e2e_wall_s, report.e2e_target_s
        ));
    }
    if report.ratio_to_perftest_round_trip > LATENCY_RATIO_TARGET {
        missed.push(format!(
            "rdma-write's median write is {:.1} perftest round trips > {LATENCY_RATIO_TARGET}",
            report.ratio_to_perftest_round_trip
        ));
    }
    if missed.is_empty() {
        println!(
            "bench: all targets met (results in {})",
            dir.join("latest.json").display()
        );
        Ok(())
    } else {
        bail!("bench: targets missed: {}", missed.join("; "))
    }
}

fn plans(args: &BenchArgs, bins: &e2e::Bins) -> Vec<PlanGuest> {
    let node = |ip: &str| Node::guest(ip, true);
    let lat = |server: Option<&'static str>| -> Vec<String> {
        let mut v: Vec<String> = ["ib_write_lat", "-F", "-x", "1", "-s", "17", "-n"]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        v.push(args.iters.to_string());
        v.extend(server.map(str::to_owned));
        v
    };
    let mut perf_server = Step::new("ib_write_lat server", &[]);
    perf_server.argv = lat(None);
    perf_server.background = true;
    perf_server.create_file_when_started = Some(PERFTEST_STARTED.into());
    perf_server.timeout_s = 300.0;
    let mut server = Step::new(
        "rdma-server",
        &[
            bins.server.as_str(),
            "--serve",
            "--json",
            "--cq-mode",
            "poll",
            "--listen",
            "0.0.0.0:7471",
        ],
    );
    server.background = true;
    server.wait_for_file = Some(PERFTEST_DONE.into());
    server.stop_when_file = Some(CLIENTS_DONE.into());
    server.timeout_s = 300.0;

    let mut perf_client = Step::new("ib_write_lat client", &[]);
    perf_client.argv = lat(Some("10.0.0.1"));
    perf_client.wait_for_file = Some(PERFTEST_STARTED.into());
    // The marker says the perftest server started, not that it listens yet.
    perf_client.retries = 20;
    perf_client.retry_delay_s = 0.5;
    perf_client.timeout_s = 240.0;
    perf_client.create_file_when_done = Some(PERFTEST_DONE.into());
    let mut b_steps = vec![perf_client];
    for i in 0..args.clients {
        let mut c = Step::new(
            format!("client {i}"),
            &[
                bins.client.as_str(),
                "10.0.0.1",
                "--json",
                "--cq-mode",
                "poll",
                "--wait-for-server",
                "30s",
            ],
        );
        c.timeout_s = 60.0;
        b_steps.push(c);
    }
    let mut done = Step::new("clients done", &["true"]);
    done.create_file_when_done = Some(CLIENTS_DONE.into());
    b_steps.push(done);
    let guest = |name: &str, ip: &str, steps| PlanGuest {
        name: name.into(),
        plan: Plan {
            node: node(ip),
            steps,
            sync_dir: GUEST_SYNC.into(),
        },
        mem_mb: 1024,
        timeout: Duration::from_secs(420),
    };
    vec![
        guest("A", "10.0.0.1", vec![perf_server, server]),
        guest("B", "10.0.0.2", b_steps),
    ]
}

/// `ib_write_lat`'s latency line.
#[derive(Debug, Clone, Copy, PartialEq)]
struct WriteLat {
    typical: f64,
    avg: f64,
    p99: f64,
}

/// Parses the row under the `t_typical` header: `#bytes #iters t_min t_max t_typical t_avg
/// t_stdev p99 p99.9` (microseconds).
fn parse_write_lat(stdout: &str) -> Option<WriteLat> {
    let mut lines = stdout.lines().skip_while(|l| !l.contains("t_typical"));
    lines.next()?;
    lines.find_map(|l| {
        let f: Vec<f64> = l.split_whitespace().map_while(|x| x.parse().ok()).collect();
        (f.len() >= 8).then(|| WriteLat {
            typical: f[4],
            avg: f[5],
            p99: f[7],
        })
    })
}

/// The `micros` of a client's `written` event.
fn written_micros(stdout: &str) -> Option<f64> {
    stdout.lines().find_map(|l| {
        let v: serde_json::Value = serde_json::from_str(l).ok()?;
        (v.get("type")?.as_str()? == "written").then(|| v.get("micros")?.as_f64())?
    })
}

/// Nearest-rank percentile (sorts `xs`).
fn percentile(xs: &mut [f64], p: f64) -> f64 {
    xs.sort_by(f64::total_cmp);
    let rank = ((p * xs.len() as f64).ceil() as usize).clamp(1, xs.len().max(1));
    xs.get(rank - 1).copied().unwrap_or(f64::NAN)
}

fn print_report(r: &Report) {
    println!("bench (TCG guests: compare ratios, not absolute numbers)");
    println!(
        "  e2e seed, two guests, warm     {:>9.1} s    target <= {:.0} s",
        r.e2e_wall_s, r.e2e_target_s
    );
    println!(
        "  ib_write_lat 17 B (half RTT)   typical {:>9.1} us  avg {:.1} us  p99 {:.1} us  ({} iters)",
        r.perftest_t_typical_us, r.perftest_t_avg_us, r.perftest_p99_us, r.perftest_iters
    );
    println!(
        "  rdma-client write (full RTT)   median  {:>9.1} us  p99 {:.1} us  ({} clients)",
        r.rdma_write_median_us, r.rdma_write_p99_us, r.clients
    );
    println!(
        "  ratio to perftest round trip   {:>9.2}       target <= {:.1}",
        r.ratio_to_perftest_round_trip, r.ratio_target
    );
    println!(
        "  rdma-client process, median    {:>9.0} ms   (exec, device open, handshake, write, verdict)",
        r.rdma_client_process_median_ms
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_lat_line_is_parsed() {
        let out = "\
---------------------------------------------------------------------------------------
 #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] 
 17      1000          18000.12       30000.50     22300.25          22900.75        800.10          25400.00               29000.00    
---------------------------------------------------------------------------------------
";
        let w = parse_write_lat(out).unwrap();
        assert_eq!(
            w,
            WriteLat {
                typical: 22300.25,
                avg: 22900.75,
                p99: 25400.0
            }
        );
        assert!(parse_write_lat("no table here").is_none());
    }

    #[test]
    fn client_micros_and_percentiles() {
        let out = "{\"type\":\"qp_ready\"}\n{\"type\":\"written\",\"micros\":5229}\n";
        assert_eq!(written_micros(out), Some(5229.0));
        assert_eq!(written_micros("{\"type\":\"verified\"}"), None);
        let mut xs = vec![5.0, 1.0, 3.0, 2.0, 4.0];
        assert_eq!(percentile(&mut xs, 0.5), 3.0);
        assert_eq!(percentile(&mut xs, 0.99), 5.0);
    }
}
