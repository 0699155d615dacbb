//! `cargo xtask guest-agent --plan FILE` (hidden): runs inside a guest, started by /init.
//! Configures the node ([`node`]: modules, NICs, IPv4/IPv6, rxe/siw), runs the plan's steps
//! (argv placeholders such as a GID index resolved by [`gid`]) and writes `result.json`.

mod gid;
mod node;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Args;
use color_eyre::eyre::{Result, WrapErr, eyre};

use crate::deadline::{self, Failure};
use crate::exec::{self, Captured, Finished};
use crate::plan::{
    DEADLINE_ARG, Diagnostics, GUEST_SYNC, Plan, PlanResult, RESULT_FILE, Step, StepResult,
};
use crate::text;

/// How long a background step has to exit by itself after the marker that ends its job, or
/// after SIGTERM: [`deadline::GRACE`], what each step's derived deadline leaves for it. The
/// unit tests, which play steps that never exit, wait 2 s rather than the full grace.
#[cfg(not(test))]
const GRACE: Duration = deadline::GRACE;
#[cfg(test)]
const GRACE: Duration = Duration::from_secs(2);

/// Arguments of `guest-agent`.
#[derive(Debug, Args)]
pub struct AgentArgs {
    /// The plan (JSON).
    #[arg(long)]
    pub plan: PathBuf,
    /// Where to write the result (default: result.json next to the plan).
    #[arg(long)]
    pub result: Option<PathBuf>,
}

/// Entry point: always writes a result file; fails (exit 1) when the plan did not succeed.
pub fn cmd(args: &AgentArgs) -> Result<()> {
    let started = Instant::now();
    let result_path = args.result.clone().unwrap_or_else(|| {
        args.plan
            .parent()
            .unwrap_or(Path::new("/"))
            .join(RESULT_FILE)
    });
    let mut result = PlanResult::default();
    let guest = own_name();
    let outcome = std::fs::read(&args.plan)
        .wrap_err_with(|| format!("reading plan {}", args.plan.display()))
        .and_then(|b| {
            serde_json::from_slice::<Plan>(&b)
                .wrap_err_with(|| format!("parsing plan {}", args.plan.display()))
        })
        .inspect_err(|e| {
            // No plan, so no sync dir of its own: the guests' usual one, if it is there.
            let sync = Path::new(GUEST_SYNC);
            if sync.is_dir() {
                report_failure(sync, &guest, &format!("the guest agent: {e:#}"));
            }
        })
        .and_then(|plan| run_plan(&plan, &guest, &mut result));
    if let Err(e) = &outcome {
        result.error.get_or_insert_with(|| format!("{e:#}"));
    }
    result.ok = outcome.is_ok() && result.error.is_none();
    if !result.ok && result.diagnostics.is_none() {
        result.diagnostics = Some(diagnostics());
    }
    result.elapsed_s = started.elapsed().as_secs_f64();
    write_result(&result_path, &result)?;
    if result.ok {
        println!("guest-agent: plan succeeded in {:.1} s", result.elapsed_s);
        Ok(())
    } else {
        Err(eyre!(
            "guest-agent: plan failed: {}",
            result.error.as_deref().unwrap_or("unknown error")
        ))
    }
}

/// This guest's name, for its failure marker: `XTASK_GUEST` (set by the guest's init), else
/// the hostname (which the init set to it too).
fn own_name() -> String {
    std::env::var("XTASK_GUEST")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|n| n.trim().to_owned())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "guest".to_owned())
}

/// Says in the run's sync dir that this guest failed (unless a guest already did: see
/// [`deadline::report_failure`]), so that every other guest stops waiting for it.
fn report_failure(sync: &Path, guest: &str, reason: &str) {
    if let Err(e) = deadline::report_failure(sync, guest, reason) {
        eprintln!(
            "guest-agent: could not leave the failure marker in {}: {e}",
            sync.display()
        );
    }
}

fn write_result(path: &Path, result: &PlanResult) -> Result<()> {
    let json = serde_json::to_vec_pretty(result)?;
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, json).wrap_err_with(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path)
        .wrap_err_with(|| format!("renaming {} to {}", tmp.display(), path.display()))
}

fn setup_step(result: &mut PlanResult, name: &str, argv: &[&str]) -> Result<()> {
    let r = run_once(name, argv, Duration::from_secs(20));
    let ok = r.ok;
    let msg = format!("setup `{}` failed: {}", argv.join(" "), r.stderr.trim());
    result.setup.push(r);
    if ok { Ok(()) } else { Err(eyre!(msg)) }
}

fn run_once(name: &str, argv: &[&str], timeout: Duration) -> StepResult {
    let mut r = StepResult {
        name: name.to_owned(),
        argv: argv.iter().map(|s| (*s).to_owned()).collect(),
        attempts: 1,
        ..Default::default()
    };
    match Captured::spawn(argv).and_then(|c| c.finish(Instant::now() + timeout)) {
        Ok(f) => fill(&mut r, &f, 0),
        Err(e) => r.error = Some(format!("{e:#}")),
    }
    r
}

fn fill(r: &mut StepResult, f: &Finished, expect: i32) {
    r.exit_code = f.code;
    r.timed_out = f.timed_out;
    r.stdout = text::tail(&f.stdout, 64 * 1024);
    r.stderr = text::tail(&f.stderr, 64 * 1024);
    r.elapsed_s = f.elapsed.as_secs_f64();
    r.ok = f.code == Some(expect) && !f.timed_out;
    if let Some(line) = r.panic_line().map(str::to_owned) {
        r.ok = false;
        r.error = Some(format!("panicked: {line}"));
    }
}

fn run_plan(plan: &Plan, guest: &str, result: &mut PlanResult) -> Result<()> {
    match node::setup_node(plan, result) {
        Ok(rxe) => {
            let out = run_steps(plan, guest, result);
            // Always, and while the rxe device still exists: steps may be allowed to fail,
            // and whoever judges them later needs the device's state too.
            result.diagnostics = Some(diagnostics());
            drop(rxe);
            out
        }
        Err(e) => {
            report_failure(
                Path::new(&plan.sync_dir),
                guest,
                &format!("its node setup: {e:#}"),
            );
            result.diagnostics = Some(diagnostics());
            Err(e)
        }
    }
}

/// Runs a plan's steps on this host, without node setup: the `rxe` and `hardware` backends,
/// where the RDMA device already exists.
pub fn run_local(plan: &Plan) -> PlanResult {
    let started = Instant::now();
    let mut result = PlanResult::default();
    let mut plan = plan.clone();
    let outcome = crate::deadline::derive(std::slice::from_mut(&mut plan))
        .and_then(|()| run_steps(&plan, "host", &mut result));
    if let Err(e) = &outcome {
        result.error.get_or_insert_with(|| format!("{e:#}"));
    }
    result.diagnostics = Some(diagnostics());
    result.ok = outcome.is_ok() && result.error.is_none();
    result.elapsed_s = started.elapsed().as_secs_f64();
    result
}

/// Runs the steps (foreground in order, background collected at the end) as guest `guest`.
/// A failure that ends the plan (a step not allowed to fail, a marker that never came, the agent
/// itself) is reported in the sync dir at once ([`deadline::FAILED_DIR`]); every wait here ends
/// as soon as any guest of the run reports one, and the background steps are told to stop.
fn run_steps(plan: &Plan, guest: &str, result: &mut PlanResult) -> Result<()> {
    let sync = PathBuf::from(&plan.sync_dir);
    match steps(plan, &sync, guest, result) {
        Ok(None) => Ok(()),
        Ok(Some(e)) => {
            result.error = Some(e.clone());
            Err(eyre!(e))
        }
        Err(e) => {
            report_failure(&sync, guest, &format!("the guest agent: {e:#}"));
            Err(e)
        }
    }
}

/// [`run_steps`]'s work: the plan's first error (`Ok(None)`: none), or the agent's own.
fn steps(plan: &Plan, sync: &Path, guest: &str, result: &mut PlanResult) -> Result<Option<String>> {
    let clock = Instant::now();
    let started_dir = sync.join(deadline::STARTED_DIR);
    std::fs::create_dir_all(&started_dir)
        .wrap_err_with(|| format!("creating {}", started_dir.display()))?;
    // Every step says when it started, for the error of a wait that runs out elsewhere.
    let mark_started = |name: &str| {
        let p = started_dir.join(deadline::started_marker(name));
        let at = format!("{:.1}", clock.elapsed().as_secs_f64());
        std::fs::write(&p, at).wrap_err_with(|| format!("creating marker {}", p.display()))
    };
    let mut background: Vec<(usize, Captured, Instant)> = Vec::new();
    let mut first_error: Option<String> = None;
    // Why the plan stops here (a failure no step was allowed), reported before the
    // background steps are collected.
    let mut fatal: Option<String> = None;
    for step in &plan.steps {
        let idx = result.steps.len();
        let resolved = gid::resolve_step(step).map(|mut s| {
            let own = s.timeout().saturating_sub(deadline::GRACE).as_secs().max(1);
            for a in &mut s.argv {
                if a == DEADLINE_ARG {
                    *a = own.to_string();
                }
            }
            s
        });
        let step = match &resolved {
            Ok(s) => s,
            Err(e) => {
                let r = StepResult {
                    name: step.name.clone(),
                    argv: step.argv.clone(),
                    error: Some(format!("{e:#}")),
                    ..Default::default()
                };
                first_error.get_or_insert_with(|| describe_failure(&r));
                result.steps.push(r);
                if step.allow_failure {
                    continue;
                }
                fatal = result.steps.last().map(describe_failure);
                break;
            }
        };
        let mut r = StepResult {
            name: step.name.clone(),
            argv: step.argv.clone(),
            ..Default::default()
        };
        if let Some(marker) = &step.wait_for_file {
            let t = Instant::now();
            let waited = wait_for_marker(&sync.join(marker), sync, t + step.wait_timeout())?;
            r.waited_s = t.elapsed().as_secs_f64();
            let stopped = matches!(waited, Waited::Failed(_));
            let error = match waited {
                Waited::Appeared => None,
                Waited::TimedOut => Some(format!(
                    "marker {marker} did not appear in {} within its {:.0} s deadline{}",
                    sync.display(),
                    step.wait_timeout().as_secs_f64(),
                    progress(&started_dir, &step.waits_on)
                )),
                Waited::Failed(f) => Some(format!("{f}: stopping (waited for marker {marker})")),
            };
            if let Some(error) = error {
                let why = format!("step {}: {error}", step.name);
                r.error = Some(error);
                first_error.get_or_insert_with(|| why.clone());
                result.steps.push(r);
                // The run has failed: no step goes on, whatever it was allowed.
                if step.allow_failure && !stopped {
                    continue;
                }
                fatal = Some(why);
                break;
            }
        }
        mark_started(&step.name)?;
        if step.background {
            r.attempts = 1;
            match Captured::spawn(&step.argv) {
                Ok(c) => {
                    touch(sync, step.create_file_when_started.as_deref())?;
                    background.push((idx, c, Instant::now() + step.timeout()));
                }
                Err(e) => {
                    let why = format!("step {} could not start: {e:#}", step.name);
                    r.error = Some(format!("{e:#}"));
                    if !step.allow_failure {
                        report_failure(sync, guest, &why);
                    }
                    first_error.get_or_insert(why);
                }
            }
            result.steps.push(r);
            continue;
        }
        let stopped = run_foreground(step, sync, &mut r)?;
        touch(sync, step.create_file_when_ended.as_deref())?;
        let ok = r.ok;
        // A step may be allowed to fail; never to panic.
        let panicked = r.panic_line().is_some();
        if !ok {
            first_error.get_or_insert_with(|| describe_failure(&r));
        }
        let why = describe_failure(&r);
        result.steps.push(r);
        if !ok && (!step.allow_failure || panicked || stopped) {
            fatal = Some(why);
            break;
        }
    }
    if let Some(why) = &fatal {
        report_failure(sync, guest, why);
    }
    // Collect background steps: each until its own deadline (killed after), or until the
    // marker that ends its job, then its grace; told to stop once a guest of the run failed.
    for (idx, child, deadline) in background {
        let step = plan
            .steps
            .iter()
            .find(|s| Some(&s.name) == result.steps.get(idx).map(|r| &r.name));
        let Some(r) = result.steps.get_mut(idx) else {
            continue;
        };
        let Some(step) = step else { continue };
        let stopped = collect(step, child, deadline, sync, &started_dir, r)?;
        if r.ok {
            touch(sync, step.create_file_when_done.as_deref())?;
        } else if !step.allow_failure || r.panic_line().is_some() || stopped {
            let why = describe_failure(r);
            report_failure(sync, guest, &why);
            first_error.get_or_insert(why);
        }
        touch(sync, step.create_file_when_ended.as_deref())?;
    }
    Ok(first_error)
}

/// Waits for background `step` (spawned as `child`, to be collected by `deadline`): until the
/// marker that ends its job, then its grace; killed at its deadline, with an error that says
/// what it was waiting on and how far that had got. Once a guest of the run reports failure,
/// it is told to stop (SIGTERM) and has its grace: then it returns true.
fn collect(
    step: &Step,
    mut child: Captured,
    deadline: Instant,
    sync: &Path,
    started_dir: &Path,
    r: &mut StepResult,
) -> Result<bool> {
    let mut why_killed = None;
    let mut stopped = None;
    let end = match step.until_file() {
        None => deadline,
        Some(marker) => match wait_for_marker(&sync.join(marker), sync, deadline)? {
            Waited::Appeared => {
                if step.stop_when_file.is_some() {
                    child.terminate();
                }
                why_killed = Some(format!(
                    "still running {:.0} s after marker {marker} (the end of its job) appeared",
                    GRACE.as_secs_f64()
                ));
                Instant::now() + GRACE
            }
            Waited::TimedOut => {
                why_killed = Some(format!(
                    "killed at its {:.0} s deadline (derived from what it waits on) before \
                     marker {marker} appeared{}",
                    step.timeout().as_secs_f64(),
                    progress(started_dir, &step.waits_on)
                ));
                Instant::now()
            }
            Waited::Failed(f) => {
                child.terminate();
                stopped = Some(f);
                Instant::now() + GRACE
            }
        },
    };
    let f = match stopped {
        Some(_) => child.finish(end)?,
        None => {
            let (f, failed) = finish_watching(child, end, sync)?;
            stopped = failed;
            f
        }
    };
    fill(r, &f, step.expect_exit);
    if let Some(failure) = &stopped {
        // Cut short, whatever it exited with.
        r.ok = false;
        let killed = if f.timed_out {
            format!("; still running {:.0} s after SIGTERM", GRACE.as_secs_f64())
        } else {
            String::new()
        };
        r.error = Some(format!("{failure}: stopping (told to stop{killed})"));
    } else if f.timed_out {
        r.error = why_killed.or_else(|| {
            Some(format!(
                "killed at its {:.0} s deadline",
                step.timeout().as_secs_f64()
            ))
        });
    }
    Ok(stopped.is_some())
}

/// What the steps named `waits_on` had done, from their `.steps-started/` markers: ", while they
/// were still running: 2 of 3 had started (the last, `client:bench:1 (lat)`, at 118.0 s of
/// its guest)".
fn progress(started_dir: &Path, waits_on: &[String]) -> String {
    if waits_on.is_empty() {
        return String::new();
    }
    let started: Vec<(&String, String)> = waits_on
        .iter()
        .filter_map(|n| {
            let at = std::fs::read_to_string(started_dir.join(deadline::started_marker(n)));
            at.ok().map(|at| (n, at.trim().to_owned()))
        })
        .collect();
    match started.last() {
        None => format!(
            ", while none of the {} step(s) it waits on had started (`{}` first)",
            waits_on.len(),
            waits_on[0]
        ),
        Some((name, at)) => format!(
            ", while they were still running: {} of {} had started (the last, `{name}`, at \
             {at} s of its guest)",
            started.len(),
            waits_on.len()
        ),
    }
}

/// Runs foreground `step` (its attempts); true when a guest of the run failed meanwhile and the
/// step was told to stop.
fn run_foreground(step: &Step, sync: &Path, r: &mut StepResult) -> Result<bool> {
    loop {
        r.attempts += 1;
        let child = match Captured::spawn(&step.argv) {
            Ok(c) => c,
            Err(e) => {
                r.error = Some(format!("{e:#}"));
                return Ok(false);
            }
        };
        touch(sync, step.create_file_when_started.as_deref())?;
        let (f, stopped) = finish_watching(child, Instant::now() + step.timeout(), sync)?;
        fill(r, &f, step.expect_exit);
        if let Some(failure) = stopped {
            // Cut short, whatever it exited with.
            r.ok = false;
            r.error = Some(format!("{failure}: stopping (told to stop)"));
            return Ok(true);
        }
        if f.timed_out {
            r.error = Some(format!(
                "killed at its {:.0} s deadline (attempt {} of {})",
                step.timeout().as_secs_f64(),
                r.attempts,
                step.retries + 1
            ));
        } else {
            r.error = None;
        }
        if r.ok {
            touch(sync, step.create_file_when_done.as_deref())?;
            return Ok(false);
        }
        if r.attempts > step.retries {
            return Ok(false);
        }
        exec::sleep(Duration::from_secs_f64(step.retry_delay_s.clamp(0.0, 60.0)))?;
    }
}

/// Waits for `child` until it exits or `deadline` passes (then it is killed), as
/// [`Captured::finish`] does; but when a guest of the run reports failure first, the child is
/// told to stop (SIGTERM) and has [`GRACE`] (within its deadline) to exit, and the
/// failure comes back with what it did.
fn finish_watching(
    mut child: Captured,
    deadline: Instant,
    sync: &Path,
) -> Result<(Finished, Option<Failure>)> {
    let mut poll = Duration::from_millis(1);
    loop {
        let now = Instant::now();
        if child.exited()? || now >= deadline {
            return Ok((child.finish(deadline)?, None));
        }
        if let Some(failure) = deadline::first_failure(sync) {
            child.terminate();
            let end = deadline.min(Instant::now() + GRACE);
            return Ok((child.finish(end)?, Some(failure)));
        }
        exec::sleep(poll.min(deadline - now))?;
        // Often at first (short-lived commands), then every 20 ms.
        poll = (poll * 2).min(Duration::from_millis(20));
    }
}

fn describe_failure(r: &StepResult) -> String {
    if let Some(e) = &r.error {
        return format!("step {}: {e}", r.name);
    }
    let how = if r.timed_out {
        "timed out".to_owned()
    } else {
        r.exit_code.map_or_else(
            || "was killed by a signal".to_owned(),
            |c| format!("exited with {c}"),
        )
    };
    format!(
        "step {} (`{}`) {how} after {} attempt(s): {}",
        r.name,
        r.argv.join(" "),
        r.attempts,
        text::tail(r.stderr.trim(), 400)
    )
}

fn touch(sync: &Path, marker: Option<&str>) -> Result<()> {
    if let Some(m) = marker {
        let p = sync.join(m);
        std::fs::write(&p, b"").wrap_err_with(|| format!("creating marker {}", p.display()))?;
    }
    Ok(())
}

/// What a wait for a marker came to.
#[derive(Debug)]
enum Waited {
    Appeared,
    /// Its deadline passed first.
    TimedOut,
    /// A guest of the run reported failure first (the run's first failure).
    Failed(Failure),
}

/// Polls for `path` until `deadline`, and the run's failure markers in `sync` with it: a wait
/// ends as soon as any guest failed.
fn wait_for_marker(path: &Path, sync: &Path, deadline: Instant) -> Result<Waited> {
    loop {
        if path.exists() {
            return Ok(Waited::Appeared);
        }
        if let Some(f) = deadline::first_failure(sync) {
            return Ok(Waited::Failed(f));
        }
        if Instant::now() >= deadline {
            return Ok(Waited::TimedOut);
        }
        exec::sleep(Duration::from_millis(20))?;
    }
}

fn diagnostics() -> Diagnostics {
    let grab = |argv: &[&str]| {
        let r = run_once("diag", argv, Duration::from_secs(10));
        let mut s = r.stdout;
        if !r.stderr.is_empty() || r.error.is_some() {
            s.push_str(&format!(
                "\n[stderr] {}{}",
                r.stderr,
                r.error.unwrap_or_default()
            ));
        }
        s
    };
    Diagnostics {
        rdma_link: grab(&["rdma", "link"]),
        ibv_devinfo: grab(&["ibv_devinfo", "-v"]),
        dmesg: filter_dmesg(&grab(&["dmesg"])),
    }
}

/// The dmesg lines that mention rdma, rxe or ib_ (case-insensitive).
pub fn filter_dmesg(dmesg: &str) -> String {
    dmesg
        .lines()
        .filter(|l| {
            let l = l.to_lowercase();
            l.contains("rdma") || l.contains("rxe") || l.contains("ib_")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Node;

    #[test]
    fn dmesg_filter() {
        let d = "[1.0] virtio_net ok\n[2.0] RDMA_RXE: loaded\n[3.0] rdma_rxe: failed to add eth0\n[4.0] ib_core x\n[5.0] other";
        assert_eq!(
            filter_dmesg(d),
            "[2.0] RDMA_RXE: loaded\n[3.0] rdma_rxe: failed to add eth0\n[4.0] ib_core x"
        );
    }

    fn plan_in(dir: &Path, steps: Vec<Step>) -> Plan {
        Plan {
            node: Node::guest("10.0.0.1", false),
            steps,
            sync_dir: dir.to_string_lossy().into_owned(),
        }
    }

    fn run_steps_only(plan: &Plan) -> (Result<()>, PlanResult) {
        run_steps_as(plan, "A")
    }

    fn run_steps_as(plan: &Plan, guest: &str) -> (Result<()>, PlanResult) {
        let mut result = PlanResult::default();
        let out = run_steps(plan, guest, &mut result);
        (out, result)
    }

    #[test]
    fn markers_retries_and_background() {
        let dir = tempfile::tempdir().unwrap();
        let mut server = Step::new("server", &["sleep", "0.3"]);
        server.background = true;
        server.create_file_when_started = Some("started".into());
        server.create_file_when_done = Some("server-done".into());
        let mut client = Step::new("client", &["test", "-e", "ready"]);
        client.wait_for_file = Some("started".into());
        client.retries = 0;
        client.allow_failure = true;
        let mut flaky = Step::new(
            "flaky",
            &["test", "-e", &dir.path().join("started").to_string_lossy()],
        );
        flaky.retries = 2;
        flaky.retry_delay_s = 0.05;
        flaky.create_file_when_done = Some("flaky-done".into());
        let plan = plan_in(dir.path(), vec![server, client, flaky]);
        let (out, r) = run_steps_only(&plan);
        // "client" fails (allowed) but is recorded as the plan's first error.
        assert!(out.is_err());
        assert!(
            r.error.as_deref().unwrap().contains("client"),
            "{:?}",
            r.error
        );
        assert_eq!(r.step("client").unwrap().exit_code, Some(1));
        assert!(r.step("flaky").unwrap().ok);
        assert_eq!(r.step("server").unwrap().exit_code, Some(0));
        assert!(dir.path().join("server-done").exists());
        assert!(dir.path().join("flaky-done").exists());
    }

    #[test]
    fn a_server_lives_until_its_clients_marker_and_says_what_it_waited_on() {
        let dir = tempfile::tempdir().unwrap();
        // One-shot: exits by itself once its clients are done.
        let mut ok = Step::new("server:ok", &["sleep", "0.2"]);
        ok.background = true;
        ok.exit_after_file = Some("done-ok".into());
        // One-shot that does not exit after its clients: killed after the grace, named.
        let mut stuck = Step::new("server:stuck", &["sleep", "60"]);
        stuck.background = true;
        stuck.exit_after_file = Some("done-ok".into());
        // Its clients never finish (their marker is never made): killed at its deadline, and
        // the error names how far they had got.
        let mut lost = Step::new("server:lost", &["sleep", "60"]);
        lost.background = true;
        lost.timeout_s = 0.5;
        lost.stop_when_file = Some("done-lost".into());
        lost.waits_on = vec!["client:lost:0".into(), "client:lost:1".into()];
        let mut c = Step::new("client:lost:0", &["true"]);
        c.create_file_when_ended = Some("done-ok".into());
        let plan = plan_in(dir.path(), vec![ok, lost, c]);
        let (_, r) = run_steps_only(&plan);
        assert!(r.step("server:ok").unwrap().ok, "{r:?}");
        let lost = r.step("server:lost").unwrap();
        assert!(lost.timed_out && !lost.ok);
        let e = lost.error.as_deref().unwrap();
        assert!(
            e.contains("killed at its 0 s deadline") || e.contains("deadline"),
            "{e}"
        );
        assert!(e.contains("done-lost"), "{e}");
        assert!(
            e.contains("1 of 2 had started") && e.contains("`client:lost:0`"),
            "{e}"
        );

        let dir = tempfile::tempdir().unwrap();
        let mut c = Step::new("client", &["true"]);
        c.create_file_when_ended = Some("done-ok".into());
        let plan = plan_in(dir.path(), vec![stuck, c]);
        let t = Instant::now();
        let (_, r) = run_steps_only(&plan);
        let stuck = r.step("server:stuck").unwrap();
        assert!(stuck.timed_out, "{stuck:?}");
        assert!(
            stuck
                .error
                .as_deref()
                .unwrap()
                .contains("after marker done-ok"),
            "{stuck:?}"
        );
        assert!(t.elapsed() < GRACE + Duration::from_secs(10));
    }

    #[test]
    fn missing_marker_times_out_and_background_deadline_kills() {
        let dir = tempfile::tempdir().unwrap();
        let mut bg = Step::new("bg", &["sleep", "30"]);
        bg.background = true;
        bg.timeout_s = 0.2;
        let mut w = Step::new("waiter", &["true"]);
        w.wait_for_file = Some("never".into());
        w.timeout_s = 0.2;
        let plan = plan_in(dir.path(), vec![bg, w]);
        let (out, r) = run_steps_only(&plan);
        assert!(out.is_err());
        assert!(
            r.step("waiter")
                .unwrap()
                .error
                .as_deref()
                .unwrap()
                .contains("never")
        );
        let bg = r.step("bg").unwrap();
        assert!(bg.timed_out && !bg.ok);
    }

    /// Guest A fails a step early; guest B, waiting for A's marker (and running a server that
    /// lives until a marker A never makes), and guest C, running a long command, end within
    /// seconds naming A and why, not at their deadlines; A's own server is stopped too, and only
    /// A leaves a failure marker.
    #[test]
    fn a_failed_guest_ends_every_wait_of_the_run_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let mut a_server = Step::new("A server", &["sleep", "60"]);
        a_server.background = true;
        a_server.timeout_s = 60.0;
        a_server.stop_when_file = Some("b-done".into());
        let mut verify = Step::new(
            "systemd-analyze verify",
            &[
                "sh",
                "-c",
                "sleep 0.3; echo 'man: command not found' >&2; exit 1",
            ],
        );
        verify.create_file_when_done = Some("a-ready".into());
        let plan_a = plan_in(dir.path(), vec![a_server, verify]);
        let mut b_server = Step::new("B server", &["sleep", "60"]);
        b_server.background = true;
        b_server.timeout_s = 60.0;
        b_server.stop_when_file = Some("a-done".into());
        let mut client = Step::new("client", &["true"]);
        client.wait_for_file = Some("a-ready".into());
        client.wait_s = Some(60.0);
        let plan_b = plan_in(dir.path(), vec![b_server, client]);
        let mut long = Step::new("long", &["sleep", "60"]);
        long.timeout_s = 60.0;
        let plan_c = plan_in(dir.path(), vec![long, Step::new("after", &["true"])]);
        let t = Instant::now();
        let b = std::thread::spawn(move || {
            let out = run_steps_as(&plan_b, "B");
            (out, t.elapsed())
        });
        let c = std::thread::spawn(move || {
            let out = run_steps_as(&plan_c, "C");
            (out, t.elapsed())
        });
        let (out_a, a) = run_steps_as(&plan_a, "A");
        let a_took = t.elapsed();
        let ((out_b, b), b_took) = b.join().unwrap();
        let ((out_c, c), c_took) = c.join().unwrap();
        assert!(out_a.is_err() && out_b.is_err() && out_c.is_err());
        assert!(c_took < Duration::from_secs(5), "C took {c_took:?}: {c:?}");
        let long = c.step("long").unwrap();
        assert!(!long.ok && !long.timed_out, "{long:?}");
        assert!(
            long.error
                .as_deref()
                .unwrap()
                .starts_with("guest A failed:"),
            "{long:?}"
        );
        assert!(c.step("after").is_none(), "C went on after A failed: {c:?}");
        assert!(a_took < Duration::from_secs(5), "A took {a_took:?}: {a:?}");
        assert!(b_took < Duration::from_secs(5), "B took {b_took:?}: {b:?}");
        let e = b.error.as_deref().unwrap();
        assert!(
            e.contains("guest A failed: step systemd-analyze verify")
                && e.contains("man: command not found")
                && e.contains("stopping"),
            "{e}"
        );
        assert!(b.step("client").unwrap().error.is_some(), "{b:?}");
        let b_server = b.step("B server").unwrap();
        assert!(!b_server.timed_out, "{b_server:?}");
        assert!(
            b_server
                .error
                .as_deref()
                .unwrap()
                .contains("guest A failed"),
            "{b_server:?}"
        );
        assert!(!a.step("A server").unwrap().timed_out, "{a:?}");
        let first = deadline::first_failure(dir.path()).unwrap();
        assert_eq!(first.guest, "A");
        assert!(first.reason.contains("systemd-analyze verify"), "{first:?}");
        let markers = std::fs::read_dir(dir.path().join(deadline::FAILED_DIR)).unwrap();
        assert_eq!(
            markers.count(),
            1,
            "B's failure is a consequence, not a cause"
        );
    }

    /// A panic fails the plan even in a step allowed to fail, and in a background step that
    /// exited as expected: the release binaries the guests run wrap on overflow where a debug
    /// build panics, and neither may pass unseen.
    #[test]
    fn a_panic_fails_the_plan_whatever_the_step_was_allowed() {
        let dir = tempfile::tempdir().unwrap();
        let panics = "echo \"thread 'main' panicked at src/main.rs:1:1:\" >&2; exit 0";
        let mut bg = Step::new("server", &["sh", "-c", panics]);
        bg.background = true;
        let plan = plan_in(dir.path(), vec![bg]);
        let (out, r) = run_steps_only(&plan);
        assert!(out.is_err(), "a background step that panicked passed");
        let s = r.step("server").unwrap();
        assert!(!s.ok);
        assert!(
            s.error
                .as_deref()
                .unwrap()
                .starts_with("panicked: thread 'main'")
        );
        let mut fg = Step::new("client", &["sh", "-c", panics]);
        fg.allow_failure = true;
        let after = Step::new("after", &["true"]);
        // A run of its own: the first one's failure marker would stop this one at once.
        let dir = tempfile::tempdir().unwrap();
        let plan = plan_in(dir.path(), vec![fg, after]);
        let (out, r) = run_steps_only(&plan);
        assert!(out.is_err(), "a step allowed to fail that panicked passed");
        assert!(r.step("after").is_none(), "the plan went on after a panic");
    }
}
