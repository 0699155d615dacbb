//! `cargo xtask e2e`: build, bring up Soft-RoCE (real hardware, host rxe, or QEMU guests), run
//! `rdma-server` and `rdma-client` through the scenarios, and judge them from their output.
//!
//! The same scenarios run on every backend: they become [`Plan`]s of steps. With two guests the
//! servers run in guest A and the clients in guest B; with one node (a guest, or this host with
//! rxe/hardware) both run side by side. A one-node guest runs `xtask e2e --backend rxe` itself,
//! so the host-rxe backend is exercised in CI too.

pub mod scenarios;

use crate::agent;
use crate::backend::{self, Backend, BackendChoice};
use crate::deps::{self, Group};
use crate::exec;
use crate::plan::{GUEST_SYNC, Node, Plan, PlanResult, Step, StepResult};
use crate::text::indent;
use crate::vm::{self, PlanGuest, VmOptions};
use clap::Args;
use color_eyre::eyre::{Result, WrapErr as _, bail, eyre};
use scenarios::{ClientRun, Expect, Scenario, Target, Tool};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use xshell::{Shell, cmd};

const SERVER_IP: &str = "10.0.0.1";
const CLIENT_IP: &str = "10.0.0.2";
/// Step name of rdma-core-rs's device self-test.
const SELFTEST: &str = "rdma-core-rs self-test";
/// Step name of the load test.
const LOAD: &str = "load";
/// Marker the client guest leaves when all its steps ran.
const CLIENTS_FINISHED: &str = "clients-finished";

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
    /// Do not build: use the binaries already in target/debug (used inside guests).
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
    let mut phases: Vec<(&str, Duration)> = Vec::new();
    if !args.no_build {
        deps::ensure(&[Group::Build, Group::Run])?;
        let t = Instant::now();
        build(args.selftest)?;
        phases.push(("build", t.elapsed()));
    }
    let detection = backend::detect(args.backend)?;
    println!("e2e: backend {detection}");
    let in_guest = std::env::var_os("XTASK_GUEST").is_some();
    let selected: Vec<Scenario> = if matches!(detection.backend, Backend::Vm { .. }) || in_guest {
        selected
    } else {
        let (kept, skipped): (Vec<_>, Vec<_>) = selected.into_iter().partition(|s| !s.guest_only);
        for s in skipped {
            println!(
                "SKIP  {:<20} it takes a network link down: runs only inside the guests",
                s.name
            );
        }
        kept
    };
    let bins = Bins::locate(args.selftest)?;
    let files = Files::write()?;

    let verdicts = match &detection.backend {
        Backend::Vm { .. } => {
            deps::ensure(&[Group::Vm])?;
            run_vm(args, &selected, &bins, &files, &mut phases)?
        }
        Backend::Rxe { netdev, ipv4 } => {
            let t = Instant::now();
            let link = crate::rxe::RxeLink::create("rxe-e2e", netdev, Duration::from_secs(20))?;
            phases.push(("rxe up", t.elapsed()));
            // Clients reach the server at the rxe netdev's address: the GID a peer announces
            // must be routable through that netdev (`::ffff:127.0.0.1` is not).
            let ip = ipv4.split('/').next().unwrap_or(ipv4);
            run_local(
                &selected,
                &bins,
                &files,
                args.load,
                link.name(),
                ip,
                &mut phases,
            )?
        }
        Backend::Hardware { device } => run_local(
            &selected,
            &bins,
            &files,
            args.load,
            device,
            "127.0.0.1",
            &mut phases,
        )?,
    };
    phases.push(("total", t0.elapsed()));
    report(&selected, &verdicts, &phases)
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

fn build(selftest: bool) -> Result<()> {
    let sh = Shell::new()?;
    println!("e2e: building rdma-server and rdma-client");
    let example: &[&str] = if selftest {
        &["--package", "rdma-core-rs", "--example", "loopback"]
    } else {
        &[]
    };
    exec::run_loud(
        cmd!(
            sh,
            "cargo build --package rdma-server --package rdma-client {example...}"
        ),
        Duration::from_secs(1200),
    )
    .wrap_err("building the binaries")
}

/// Absolute paths of the binaries (valid in the guests too: they see the host's root).
#[derive(Debug, Clone)]
pub struct Bins {
    pub server: String,
    pub client: String,
    pub xtask: String,
    /// rdma-core-rs's device self-test, when asked for.
    pub selftest: Option<String>,
}

impl Bins {
    pub fn locate(selftest: bool) -> Result<Self> {
        let xtask = std::env::current_exe().wrap_err("finding the xtask binary")?;
        let dir = xtask
            .parent()
            .ok_or_else(|| eyre!("xtask binary has no directory"))?;
        let path = |name: &str| -> Result<String> {
            let p = dir.join(name);
            if !p.exists() {
                bail!(
                    "{} is missing: run `cargo build -p {name}` (or drop --no-build)",
                    p.display()
                );
            }
            p.to_str()
                .map(str::to_owned)
                .ok_or_else(|| eyre!("{} is not UTF-8", p.display()))
        };
        Ok(Self {
            server: path("rdma-server")?,
            client: path("rdma-client")?,
            xtask: path("xtask")?,
            selftest: if selftest {
                Some(path("examples/loopback")?)
            } else {
                None
            },
        })
    }
}

/// Files the scenarios read, under target/ so that guests (which see the host root) read
/// them too; `{payload}` and `{token_file}` in scenario arguments expand to their paths.
#[derive(Debug, Clone)]
struct Files {
    payload: String,
    token_file: String,
}

impl Files {
    fn write() -> Result<Self> {
        let dir = vm::xtask_dir().join("e2e");
        std::fs::create_dir_all(&dir).wrap_err_with(|| format!("creating {}", dir.display()))?;
        let payload = dir.join(scenarios::ONE_MIB_FILE);
        if std::fs::metadata(&payload).map(|m| m.len()).ok() != Some(1 << 20) {
            let mut bytes = vec![0u8; 1 << 20];
            let mut urandom = std::fs::File::open("/dev/urandom")?;
            std::io::Read::read_exact(&mut urandom, &mut bytes)?;
            std::fs::write(&payload, bytes)
                .wrap_err_with(|| format!("writing {}", payload.display()))?;
        }
        let token_file = dir.join("token");
        std::fs::write(&token_file, format!("{}\n", scenarios::TOKEN))
            .wrap_err_with(|| format!("writing {}", token_file.display()))?;
        let utf8 = |p: PathBuf| {
            p.to_str()
                .map(str::to_owned)
                .ok_or_else(|| eyre!("{} is not UTF-8", p.display()))
        };
        Ok(Self {
            payload: utf8(payload)?,
            token_file: utf8(token_file)?,
        })
    }

    fn expand(&self, arg: &str) -> String {
        arg.replace(scenarios::PAYLOAD, &self.payload)
            .replace(scenarios::TOKEN_FILE, &self.token_file)
    }
}

/// argv: `env NAME=VALUE…` when the run needs an environment, then the wrapper (valgrind),
/// then the program.
fn argv(
    env: &[(&str, &str)],
    wrapper: &[&str],
    program: &str,
    args: impl IntoIterator<Item = String>,
) -> Vec<String> {
    let mut v = Vec::new();
    if !env.is_empty() {
        v.push("env".to_owned());
        v.extend(env.iter().map(|(k, val)| format!("{k}={val}")));
    }
    v.extend(wrapper.iter().map(|w| (*w).to_owned()));
    v.push(program.to_owned());
    v.extend(args);
    v
}

fn server_step_name(s: &Scenario) -> String {
    format!("server:{}", s.name)
}

fn client_step_name(s: &Scenario, j: usize) -> String {
    let label = s.clients.get(j).map_or("?", |c| c.label);
    format!("client:{}:{j} ({label})", s.name)
}

/// The server steps (background, one port each) and the client steps (in order).
fn steps(
    selected: &[Scenario],
    bins: &Bins,
    files: &Files,
    server_ip: &str,
    load: bool,
    device: Option<&str>,
) -> (Vec<Step>, Vec<Step>) {
    let mut servers = Vec::new();
    let mut clients = Vec::new();
    if let Some(selftest) = &bins.selftest {
        let mut step = Step::new(SELFTEST, &[selftest.as_str()]);
        step.argv.extend(device.map(str::to_owned));
        step.timeout_s = 120.0;
        step.allow_failure = true;
        servers.push(step);
    }
    for (i, s) in selected.iter().enumerate() {
        let port =
            scenarios::BASE_PORT + u16::try_from(i).unwrap_or(u16::MAX - scenarios::BASE_PORT);
        let mut args = vec!["--listen".to_owned(), format!("0.0.0.0:{port}")];
        args.extend(s.server_args.iter().map(|a| files.expand(a)));
        with_device(&mut args, device);
        let mut server = Step::new(server_step_name(s), &[]);
        server.argv = argv(&s.server_env, s.wrapper, &bins.server, args);
        server.background = true;
        server.expect_exit = s.server_exit;
        server.timeout_s = 120.0;
        if s.server_args.iter().any(|a| a == "--serve") {
            server.stop_when_file = Some(CLIENTS_FINISHED.to_owned());
        }
        servers.push(server);
        for (j, c) in s.clients.iter().enumerate() {
            let mut step = client_step(s, j, c, bins, files, server_ip, port);
            if c.tool == Tool::RdmaClient {
                with_device(&mut step.argv, device);
            }
            clients.push(step);
        }
    }
    let mut done = Step::new("clients finished", &["true"]);
    done.create_file_when_done = Some(CLIENTS_FINISHED.to_owned());
    clients.push(done);
    if load {
        let mut step = Step::new(
            LOAD,
            &[
                bins.xtask.as_str(),
                "load",
                "--server-bin",
                bins.server.as_str(),
                "--client-bin",
                bins.client.as_str(),
                "--kill-stages",
                "--json",
            ],
        );
        if let Some(d) = device {
            step.argv.push(format!("--server-arg=--device={d}"));
            step.argv.push(format!("--client-arg=--device={d}"));
        }
        step.timeout_s = 480.0;
        step.allow_failure = true;
        clients.push(step);
    }
    (servers, clients)
}

/// Names the device explicitly (the rxe and hardware backends know which one they brought up),
/// unless the scenario picks its own.
fn with_device(argv: &mut Vec<String>, device: Option<&str>) {
    if let Some(d) = device
        && !argv.iter().any(|a| a == "--device")
    {
        argv.push("--device".to_owned());
        argv.push(d.to_owned());
    }
}

fn client_step(
    s: &Scenario,
    j: usize,
    c: &ClientRun,
    bins: &Bins,
    files: &Files,
    ip: &str,
    port: u16,
) -> Step {
    if let Tool::Command(argv) = c.tool {
        let mut step = Step::new(client_step_name(s, j), argv);
        step.expect_exit = c.exit;
        step.timeout_s = 30.0;
        step.allow_failure = true;
        return step;
    }
    if c.tool == Tool::Hostile {
        let mut args = vec![
            "hostile".to_owned(),
            "--server".to_owned(),
            format!("{ip}:{port}"),
            "--probe-client".to_owned(),
            bins.client.clone(),
        ];
        args.extend(c.args.iter().map(|a| files.expand(a)));
        let mut step = Step::new(client_step_name(s, j), &[]);
        step.argv = argv(&c.env, &[], &bins.xtask, args);
        step.expect_exit = c.exit;
        step.timeout_s = 180.0;
        step.allow_failure = true;
        return step;
    }
    let mut args = match c.target {
        Target::Server => vec![
            format!("{ip}:{port}"),
            "--wait-for-server".to_owned(),
            "30s".to_owned(),
        ],
        // Scenario ports are consecutive from BASE_PORT; nothing listens this far above.
        Target::Nowhere => vec![format!("{ip}:{}", port.saturating_add(500))],
    };
    args.extend(c.args.iter().map(|a| files.expand(a)));
    let mut step = Step::new(client_step_name(s, j), &[]);
    step.argv = argv(&c.env, s.wrapper, &bins.client, args);
    step.expect_exit = c.exit;
    step.timeout_s = 60.0;
    // Keep going: every scenario is judged on its own, and the servers wait for the end marker.
    step.allow_failure = true;
    if !s.wrapper.is_empty() {
        step.timeout_s = 180.0;
    }
    step
}

fn node(ip: &str, rxe: bool) -> Node {
    Node {
        ip: format!("{ip}/24"),
        iface: "eth0".to_owned(),
        rxe: rxe.then(|| "rxe0".to_owned()),
    }
}

/// Where each process's result is found after the run.
struct Verdicts {
    results: Vec<StepResult>,
    /// Problems outside any scenario (guest died, plan could not run).
    problems: Vec<String>,
    /// Device state from each node (rdma link, ibv_devinfo, dmesg), shown when something failed.
    diagnostics: Vec<String>,
    /// Output of a nested `xtask e2e` (one-node guest), shown as is.
    nested: Option<String>,
}

fn run_vm(
    args: &E2eArgs,
    selected: &[Scenario],
    bins: &Bins,
    files: &Files,
    phases: &mut Vec<(&'static str, Duration)>,
) -> Result<Verdicts> {
    let opts = &args.vm;
    // The load test runs ~230 client processes under TCG: give it room.
    let timeout = Duration::from_secs(if args.load { 720 } else { 240 });
    let guests = if args.nodes == 1 {
        // One guest runs this very command with the rxe backend.
        let mut nested = vec![
            bins.xtask.clone(),
            "e2e".into(),
            "--backend".into(),
            "rxe".into(),
            "--no-build".into(),
        ];
        if args.selftest {
            nested.push("--selftest".into());
        }
        if args.load {
            nested.push("--load".into());
        }
        for s in selected {
            nested.push("--scenario".into());
            nested.push(s.name.to_owned());
        }
        let mut step = Step::new("nested e2e --backend rxe", &[]);
        step.argv = nested;
        step.timeout_s = timeout.as_secs_f64() - 30.0;
        vec![PlanGuest {
            name: "A".into(),
            plan: Plan {
                node: node(SERVER_IP, false),
                steps: vec![step],
                sync_dir: GUEST_SYNC.into(),
            },
            mem_mb: 1024,
            timeout,
        }]
    } else {
        let (servers, clients) = steps(selected, bins, files, SERVER_IP, args.load, None);
        vec![
            PlanGuest {
                name: "A".into(),
                plan: Plan {
                    node: node(SERVER_IP, true),
                    steps: servers,
                    sync_dir: GUEST_SYNC.into(),
                },
                mem_mb: 1024,
                timeout,
            },
            PlanGuest {
                name: "B".into(),
                plan: Plan {
                    node: node(CLIENT_IP, true),
                    steps: clients,
                    sync_dir: GUEST_SYNC.into(),
                },
                mem_mb: 1024,
                timeout,
            },
        ]
    };
    let run = vm::run_plans(&guests, opts)?;
    let p = &run.guests.prepared;
    phases.push(("kernel", p.kernel_time));
    phases.push(("initramfs", p.initramfs_time));
    phases.push(("guests", run.guests.guests_time));
    let mut verdicts = Verdicts {
        results: Vec::new(),
        problems: Vec::new(),
        diagnostics: Vec::new(),
        nested: None,
    };
    for (o, r) in run.guests.outcomes.iter().zip(&run.results) {
        match r {
            Ok(r) => {
                if args.nodes == 1 {
                    verdicts.nested = r.steps.first().map(|s| format!("{}{}", s.stdout, s.stderr));
                    if !r.ok {
                        verdicts.problems.push(format!(
                            "guest {}: {}",
                            o.name,
                            r.error.as_deref().unwrap_or("nested e2e failed")
                        ));
                    }
                }
                if let Some(e) = r.setup.iter().find(|s| !s.ok) {
                    verdicts.problems.push(format!(
                        "guest {} setup `{}` failed: {}{}",
                        o.name,
                        e.argv.join(" "),
                        e.stderr,
                        e.error.as_deref().unwrap_or("")
                    ));
                }
                if let Some(d) = &r.diagnostics {
                    {
                        verdicts.diagnostics.push(format!(
                            "guest {} diagnostics:\n--- rdma link ---\n{}\n--- ibv_devinfo ---\n{}\n--- dmesg (rdma/rxe) ---\n{}\n--- console tail ---\n{}",
                            o.name, d.rdma_link, crate::text::tail(&d.ibv_devinfo, 2000), d.dmesg, o.console_tail
                        ));
                    }
                }
                verdicts.results.extend(r.steps.iter().cloned());
            }
            Err(e) => verdicts.problems.push(e.clone()),
        }
    }
    Ok(verdicts)
}

fn run_local(
    selected: &[Scenario],
    bins: &Bins,
    files: &Files,
    load: bool,
    device: &str,
    server_ip: &str,
    phases: &mut Vec<(&'static str, Duration)>,
) -> Result<Verdicts> {
    let sync = tempfile::Builder::new().prefix("rdma-e2e-sync").tempdir()?;
    let (mut steps, clients) = steps(selected, bins, files, server_ip, load, Some(device));
    steps.extend(clients);
    let plan = Plan {
        node: node("127.0.0.1", false),
        steps,
        sync_dir: sync.path().display().to_string(),
    };
    let t = Instant::now();
    let result: PlanResult = agent::run_local(&plan);
    phases.push(("scenarios", t.elapsed()));
    let diagnostics = result
        .diagnostics
        .iter()
        .map(|d| {
            format!(
                "diagnostics:\n--- rdma link ---\n{}\n--- dmesg (rdma/rxe) ---\n{}",
                d.rdma_link, d.dmesg
            )
        })
        .collect();
    let problems = result.error.iter().map(|e| format!("plan: {e}")).collect();
    Ok(Verdicts {
        results: result.steps,
        problems,
        diagnostics,
        nested: None,
    })
}

/// Judges every scenario, prints the table and the seed's proof, fails if anything failed.
fn report(selected: &[Scenario], v: &Verdicts, phases: &[(&str, Duration)]) -> Result<()> {
    if let Some(nested) = &v.nested {
        println!(
            "--- e2e inside the guest (backend rxe) ---\n{}",
            nested.trim_end()
        );
        println!("--- end of the guest's e2e ---");
    }
    let mut failed = 0usize;
    let judged = v.nested.is_none();
    if judged {
        let extras = [
            (
                SELFTEST,
                "verbs layer on the device: poll/event write-with-imm, 64 KiB write, wrong rkey, RNR, CQ timeout",
            ),
            (
                LOAD,
                "sequential + concurrent sessions, kill stages, no RSS/fd growth",
            ),
        ];
        for (name, about) in extras {
            let Some(r) = v.results.iter().find(|r| r.name == name) else {
                continue;
            };
            if r.ok {
                println!("PASS  {name:<20} {about}");
                // The load test ends with its numbers: show them.
                if let Some(summary) = r.stdout.lines().rev().find(|l| l.contains("load_summary")) {
                    println!("      {summary}");
                }
            } else {
                failed += 1;
                println!(
                    "FAIL  {name} (exit {:?}):\n{}\n{}",
                    r.exit_code,
                    indent(&crate::text::tail(&r.stdout, 4000)),
                    indent(&crate::text::tail(&r.stderr, 4000))
                );
            }
        }
    }
    if judged {
        for s in selected {
            let failures = judge(s, &v.results);
            let status = if failures.is_empty() { "PASS" } else { "FAIL" };
            println!("{status}  {:<20} {}", s.name, s.about);
            if s.name == "seed" && failures.is_empty() {
                if let Some(server) = v.results.iter().find(|r| r.name == server_step_name(s)) {
                    for line in server.stdout.lines().filter(|l| {
                        l.starts_with("received message:") || l.starts_with("verified:")
                    }) {
                        println!("      server: {line}");
                    }
                }
            }
            for f in &failures {
                println!("      - {f}");
            }
            if !failures.is_empty() {
                failed += 1;
                print_outputs(s, &v.results);
            }
        }
    }
    for p in &v.problems {
        println!("problem: {p}");
    }
    if failed > 0 || !v.problems.is_empty() {
        for d in &v.diagnostics {
            println!("{d}");
        }
    }
    let timings: Vec<String> = phases
        .iter()
        .map(|(n, d)| format!("{n} {:.1} s", d.as_secs_f64()))
        .collect();
    println!("timings: {}", timings.join(", "));
    if failed > 0 || !v.problems.is_empty() {
        bail!(
            "e2e FAILED: {failed} of {} scenario(s) failed{}",
            selected.len(),
            if v.problems.is_empty() {
                ""
            } else {
                ", plus the problems above"
            }
        );
    }
    if judged {
        println!(
            "e2e PASS: {} scenario(s), every write verified as expected",
            selected.len()
        );
    }
    Ok(())
}

/// What went wrong in one scenario (empty = pass).
fn judge(s: &Scenario, results: &[StepResult]) -> Vec<String> {
    let mut failures = Vec::new();
    let mut judge_one = |name: String, exit: i32, expect: &[Expect]| match results
        .iter()
        .find(|r| r.name == name)
    {
        None => failures.push(format!("{name}: never ran")),
        Some(r) => {
            if r.timed_out {
                failures.push(format!("{name}: killed at its deadline"));
            } else if r.exit_code != Some(exit) {
                failures.push(format!(
                    "{name}: exit {:?}, expected {exit}{}",
                    r.exit_code,
                    r.error
                        .as_deref()
                        .map(|e| format!(" ({e})"))
                        .unwrap_or_default()
                ));
            }
            failures.extend(
                scenarios::check(expect, &r.stdout, &r.stderr)
                    .into_iter()
                    .map(|f| format!("{name}: {f}")),
            );
        }
    };
    judge_one(server_step_name(s), s.server_exit, &s.server_expect);
    for (j, c) in s.clients.iter().enumerate() {
        judge_one(client_step_name(s, j), c.exit, &c.expect);
    }
    failures
}

fn print_outputs(s: &Scenario, results: &[StepResult]) {
    let names: Vec<String> = std::iter::once(server_step_name(s))
        .chain((0..s.clients.len()).map(|j| client_step_name(s, j)))
        .collect();
    for r in results.iter().filter(|r| names.contains(&r.name)) {
        println!("      --- {} ({}) ---", r.name, r.argv.join(" "));
        for (label, text) in [("stdout", &r.stdout), ("stderr", &r.stderr)] {
            if !text.trim().is_empty() {
                println!("      {label}:\n{}", indent(&crate::text::tail(text, 3000)));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(name: String, exit: Option<i32>, stdout: &str) -> StepResult {
        StepResult {
            name,
            exit_code: exit,
            stdout: stdout.to_owned(),
            ..Default::default()
        }
    }

    #[test]
    fn a_scenario_fails_on_wrong_exit_missing_output_or_missing_step() {
        let seed = scenarios::all()
            .into_iter()
            .find(|s| s.name == "seed-json")
            .unwrap();
        let server_ok = "{\"type\":\"listening\"}\n{\"type\":\"qp_ready\",\"notify\":\"imm\"}\n{\"type\":\"verified\",\"verified\":true,\"text\":\"Hello RDMA Write!\"}\n";
        let client_ok = "{\"type\":\"qp_ready\"}\n{\"type\":\"written\",\"length\":17}\n{\"type\":\"verified\",\"verified\":true,\"text\":\"Hello RDMA Write!\"}\n";
        let good = vec![
            result(server_step_name(&seed), Some(0), server_ok),
            result(client_step_name(&seed, 0), Some(0), client_ok),
        ];
        assert!(judge(&seed, &good).is_empty(), "{:?}", judge(&seed, &good));

        let mut wrong_exit = good.clone();
        wrong_exit[1].exit_code = Some(8);
        assert_eq!(judge(&seed, &wrong_exit).len(), 1);

        let mut unverified = good.clone();
        unverified[0].stdout = server_ok.replace("\"verified\":true", "\"verified\":false");
        assert_eq!(judge(&seed, &unverified).len(), 1);

        let missing = vec![good[0].clone()];
        assert!(judge(&seed, &missing)[0].contains("never ran"));

        let mut killed = good;
        killed[0].timed_out = true;
        assert!(judge(&seed, &killed)[0].contains("deadline"));
    }

    #[test]
    fn a_known_device_is_named_unless_the_scenario_names_its_own() {
        let bins = Bins {
            server: "/bin/rdma-server".into(),
            client: "/bin/rdma-client".into(),
            xtask: "/bin/xtask".into(),
            selftest: None,
        };
        let files = Files {
            payload: "/p.bin".into(),
            token_file: "/t".into(),
        };
        let all = scenarios::all();
        let (servers, clients) = steps(&all, &bins, &files, "127.0.0.1", true, Some("rxe-e2e"));
        let names_dev =
            |argv: &[String], dev: &str| argv.windows(2).any(|w| w[0] == "--device" && w[1] == dev);
        assert!(servers.iter().all(|s| names_dev(&s.argv, "rxe-e2e")));
        let unknown = clients
            .iter()
            .find(|c| c.name.contains("no such device"))
            .unwrap();
        assert!(names_dev(&unknown.argv, "no-such-dev0"));
        assert!(!names_dev(&unknown.argv, "rxe-e2e"));
        let load = clients.iter().find(|c| c.name == LOAD).unwrap();
        assert!(
            load.argv
                .contains(&"--client-arg=--device=rxe-e2e".to_owned())
        );
        let (servers, _) = steps(&all, &bins, &files, "10.0.0.1", false, None);
        assert!(
            servers
                .iter()
                .all(|s| !s.argv.contains(&"--device".to_owned()))
        );
    }

    #[test]
    fn steps_put_each_server_on_its_own_port_and_clients_in_order() {
        let bins = Bins {
            server: "/bin/rdma-server".into(),
            client: "/bin/rdma-client".into(),
            xtask: "/bin/xtask".into(),
            selftest: None,
        };
        let all = scenarios::all();
        let files = Files {
            payload: "/p.bin".into(),
            token_file: "/t".into(),
        };
        let (servers, clients) = steps(&all, &bins, &files, "10.0.0.1", false, None);
        assert_eq!(servers.len(), all.len());
        assert!(servers.iter().all(|s| s.background));
        let ports: std::collections::HashSet<_> = servers
            .iter()
            .map(|s| {
                s.argv
                    .iter()
                    .position(|a| a == "--listen")
                    .map(|i| s.argv[i + 1].clone())
            })
            .collect();
        assert_eq!(ports.len(), all.len());
        assert_eq!(
            clients
                .last()
                .and_then(|c| c.create_file_when_done.clone())
                .as_deref(),
            Some(CLIENTS_FINISHED)
        );
        let zh = servers.iter().find(|s| s.name == "server:zh").unwrap();
        assert_eq!(&zh.argv[..2], ["env", "LANG=zh_CN.UTF-8"]);
        assert!(clients.iter().any(|c| c.argv.iter().any(|a| a == "/p.bin")));
    }
}
