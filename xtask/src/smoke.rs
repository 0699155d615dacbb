//! `cargo xtask vm-smoke`: proves the VM infrastructure: guests boot, rxe comes up, and a
//! perftest pair (`ib_write_bw`) runs across the virtual link (or inside one guest).

use std::time::{Duration, Instant};

use clap::Args;
use color_eyre::eyre::{Result, bail};

use crate::plan::{Node, Plan, PlanResult, Step};
use crate::vm::{self, PlanGuest};

/// Arguments of `cargo xtask vm-smoke`.
#[derive(Debug, Args)]
pub struct SmokeArgs {
    /// 2: server in guest A, client in guest B; 1: both in one guest.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u8).range(1..=2))]
    pub nodes: u8,
    #[command(flatten)]
    pub guests: vm::GuestFlags,
    /// Messages the perftest pair sends.
    #[arg(long, default_value_t = 200)]
    pub iters: u32,
}

const SERVER_IP: &str = "10.0.0.1";
const MARKER: &str = "server-started";

fn perftest(iters: u32, server: Option<&str>) -> Vec<String> {
    let mut v: Vec<String> = ["ib_write_bw", "-x", "1", "-s", "4096", "-n"]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    v.push(iters.to_string());
    v.extend(server.map(str::to_owned));
    v
}

fn server_step(iters: u32) -> Step {
    let mut s = Step {
        argv: perftest(iters, None),
        ..Step::new("server", &[])
    };
    s.background = true;
    s.create_file_when_started = Some(MARKER.to_owned());
    s.timeout_s = 90.0;
    s
}

fn client_step(iters: u32) -> Step {
    let mut c = Step {
        argv: perftest(iters, Some(SERVER_IP)),
        ..Step::new("client", &[])
    };
    c.wait_for_file = Some(MARKER.to_owned());
    // The marker says the server process started, not that it listens yet: retry.
    c.retries = 20;
    c.retry_delay_s = 0.5;
    c.timeout_s = 60.0;
    c
}

/// The plans for `nodes` guests.
pub fn plans(nodes: u8, iters: u32) -> Vec<(String, Plan)> {
    let node = |ip: &str| Node::guest(ip, true);
    let info = Step::new("ibv_devinfo", &["ibv_devinfo"]);
    if nodes == 1 {
        let plan = Plan {
            node: node(SERVER_IP),
            steps: vec![info, server_step(iters), client_step(iters)],
            sync_dir: crate::plan::GUEST_SYNC.into(),
        };
        return vec![("A".into(), plan)];
    }
    // Ping-pong through the sync share before the perftest pair: B looks up "ping" before A
    // creates it, so a stale (cached) negative lookup would show up as a timeout here.
    let mut ping = Step::new("sync-ping", &["true"]);
    ping.create_file_when_done = Some("ping".into());
    let mut wait_pong = Step::new("sync-pong", &["true"]);
    wait_pong.wait_for_file = Some("pong".into());
    wait_pong.timeout_s = 30.0;
    let mut pong = Step::new("sync-pong", &["true"]);
    pong.wait_for_file = Some("ping".into());
    pong.timeout_s = 30.0;
    pong.create_file_when_done = Some("pong".into());
    let sync = crate::plan::GUEST_SYNC.to_owned();
    vec![
        (
            "A".into(),
            Plan {
                node: node(SERVER_IP),
                steps: vec![info.clone(), ping, wait_pong, server_step(iters)],
                sync_dir: sync.clone(),
            },
        ),
        (
            "B".into(),
            Plan {
                node: node("10.0.0.2"),
                steps: vec![info, pong, client_step(iters)],
                sync_dir: sync,
            },
        ),
    ]
}

/// The `BW average[MB/sec]` of an `ib_write_bw` report (the data line after the header).
pub fn parse_bw_average(stdout: &str) -> Option<f64> {
    let mut lines = stdout.lines().skip_while(|l| !l.contains("BW average"));
    lines.next()?;
    lines.find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.len() >= 4 && f[0].parse::<u64>().is_ok())
            .then(|| f[3].parse().ok())
            .flatten()
    })
}

/// Entry point.
pub fn cmd(args: &SmokeArgs) -> Result<()> {
    let t0 = Instant::now();
    let nodes: Vec<PlanGuest> = plans(args.nodes, args.iters)
        .into_iter()
        .map(|(name, plan)| PlanGuest {
            name,
            plan,
            mem_mb: 1024,
            timeout: Duration::from_secs(args.guests.timeout),
        })
        .collect();
    let run = vm::run_plans(&nodes, &args.guests.vm)?;
    let mut problems = Vec::new();
    let mut results: Vec<Option<&PlanResult>> = Vec::new();
    for (o, r) in run.guests.outcomes.iter().zip(&run.results) {
        match r {
            Ok(r) if r.ok => results.push(Some(r)),
            Ok(r) => {
                problems.push(format!(
                    "{}: plan failed: {}\n  diagnostics: {}",
                    o.name,
                    r.error.as_deref().unwrap_or("?"),
                    serde_json::to_string_pretty(&r.diagnostics).unwrap_or_default()
                ));
                results.push(Some(r));
            }
            Err(e) => {
                problems.push(e.clone());
                results.push(None);
            }
        }
    }
    let client = results.iter().flatten().find_map(|r| r.step("client"));
    let server = results.iter().flatten().find_map(|r| r.step("server"));
    let bw = client.and_then(|c| parse_bw_average(&c.stdout));
    // The marker crossed from guest A to the host (and to B) through the 9p sync share.
    if !run.guests.sync_dir.join(MARKER).exists() {
        problems.push(format!(
            "marker {MARKER} is missing from the sync dir {}",
            run.guests.sync_dir.display()
        ));
    }
    if problems.is_empty() {
        match (client, server, bw) {
            (Some(c), Some(s), Some(_)) if c.ok && s.ok => {}
            _ => problems.push(format!(
                "perftest pair did not report a bandwidth: client {client:?}, server {:?}",
                server.map(|s| (&s.exit_code, &s.stderr))
            )),
        }
    }

    let p = &run.guests.prepared;
    println!(
        "vm-smoke ({} guest{}, {}):",
        nodes.len(),
        if nodes.len() > 1 { "s" } else { "" },
        p.accel_why
    );
    println!(
        "  kernel     {:>6.1} s  ({})",
        p.kernel_time.as_secs_f64(),
        match &p.kernel {
            Some(k) if k.fresh => format!("downloaded + unpacked {}", k.release),
            Some(k) => format!("cached {}", k.release),
            None => "?".into(),
        }
    );
    println!(
        "  initramfs  {:>6.1} s  ({})",
        p.initramfs_time.as_secs_f64(),
        if p.initramfs_built { "built" } else { "cached" }
    );
    for (o, r) in run.guests.outcomes.iter().zip(&results) {
        let boot = o
            .boot
            .map_or("?".to_owned(), |b| format!("{:.1} s", b.as_secs_f64()));
        let steps = r.map_or("?".to_owned(), |r| format!("{:.1} s", r.elapsed_s));
        println!(
            "  guest {}    boot {boot}, plan {steps}, total {:.1} s, exit {:?}",
            o.name,
            o.elapsed.as_secs_f64(),
            o.exit_code
        );
        if let Some(r) = r {
            for s in r.setup.iter().chain(&r.steps) {
                let wait = if s.waited_s > 0.0 {
                    format!(", waited {:.2} s for marker", s.waited_s)
                } else {
                    String::new()
                };
                println!(
                    "      {:<12} {:>5.2} s  attempts {} exit {:?}{wait}",
                    s.name, s.elapsed_s, s.attempts, s.exit_code
                );
            }
        }
    }
    println!(
        "  guests     {:>6.1} s wall",
        run.guests.guests_time.as_secs_f64()
    );
    println!("  total      {:>6.1} s", t0.elapsed().as_secs_f64());
    if let Some(bw) = bw {
        println!(
            "  ib_write_bw 4096 B x {}: BW average {bw:.2} MB/sec (TCG: only ratios mean anything)",
            args.iters
        );
    }
    if !problems.is_empty() {
        bail!("vm-smoke failed:\n{}", problems.join("\n"));
    }
    println!("vm-smoke: OK");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bw_parsing() {
        let out = "---------------------------------------------------------------------------------------\n \
#bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n \
4096       200              12.34              11.56  \t\t   0.002960\n\
---------------------------------------------------------------------------------------\n";
        assert_eq!(parse_bw_average(out), Some(11.56));
        assert_eq!(
            parse_bw_average("Couldn't connect to 10.0.0.1:18515\n"),
            None
        );
    }

    #[test]
    fn plans_synchronize_by_marker() {
        let two = plans(2, 200);
        assert_eq!(two.len(), 2);
        let server = two[0].1.steps.iter().find(|s| s.name == "server").unwrap();
        let client = two[1].1.steps.iter().find(|s| s.name == "client").unwrap();
        assert!(server.background);
        assert_eq!(server.create_file_when_started.as_deref(), Some(MARKER));
        assert_eq!(client.wait_for_file.as_deref(), Some(MARKER));
        assert_eq!(client.argv.last().map(String::as_str), Some(SERVER_IP));
        assert_ne!(two[0].1.node.ip, two[1].1.node.ip);
        let one = plans(1, 200);
        assert_eq!(one.len(), 1);
        assert_eq!(one[0].1.steps.len(), 3);
    }
}
