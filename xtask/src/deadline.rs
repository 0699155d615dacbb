//! Deadlines derived from what each wait is for, never a fixed total.
//!
//! Times are on the run's clock: every guest's plan starts at the latest [`BOOT_AND_SETUP`]
//! after the run's start (a plan run alone counts from its own first step). Each marker comes
//! at the latest when its maker's steps, each at every attempt of its own deadline, have got
//! that far; a wait lasts until its marker comes, so a chain of turns between guests adds up
//! to the chain's own steps. A step that waits for a marker (a client's `wait_for_file`, a
//! server that lives until its scenario's clients are done) gets that marker's latest time;
//! a guest's own deadline is its plan's latest end plus one wait that runs out
//! ([`guest_deadlines`]). So a plan that grows (one more scenario, a slower machine whose
//! steps use more of their own deadlines) moves every deadline that covers it, and a wait that
//! runs out says which step it was waiting on (the agent reads the `.steps-started/` markers).
//! Waits in a circle are a plan error, not a deadline that grows until it is clamped.
//!
//! Only per-step deadlines are fixed numbers: one attempt of one command, one boot.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::plan::{Plan, Step, secs};

/// Milliseconds of deadline granted since the last [`take_granted`].
static GRANTED_MS: AtomicU64 = AtomicU64::new(0);

/// Counts `d` as the deadline of one wait that runs after the ones before it (a long command,
/// one run of guests): `cargo xtask test` reports each phase's time against their sum.
pub fn grant(d: Duration) {
    let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    GRANTED_MS.fetch_add(ms, Ordering::Relaxed);
}

/// The deadlines granted since the last call, and starts counting again.
pub fn take_granted() -> Duration {
    Duration::from_millis(GRANTED_MS.swap(0, Ordering::Relaxed))
}

/// How long one guest may take from its QEMU's start to its plan's first step (kernel boot,
/// modules, NICs, RDMA devices): measured at 5-15 s under TCG here; generous, since a guest
/// pinned to a shared core boots several times slower.
pub const BOOT_AND_SETUP: Duration = Duration::from_secs(120);

/// After the marker that ends a background step's job: how long it has to exit by itself
/// (or, told to stop, to finish its SIGTERM).
pub const GRACE: Duration = Duration::from_secs(20);

/// One short command (a tool of the system, one check, the start and exit of any process and
/// its output): the allowance every step's command gets on top of what it waits for.
pub const ONE_SHOT: Duration = Duration::from_secs(30);

/// How many times slower a process runs under a scenario's wrapper (valgrind and the like).
pub const WRAPPED_SLOWDOWN: u32 = 3;

/// The phases of one session of ours that each end within the binary's `--timeout`: connect,
/// handshake, completion, verdict.
pub const SESSION_PHASES: u32 = 4;

/// rdma-client's and rdma-server's `--timeout` when a command line sets none.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// What one step's command waits for, from which its deadline follows ([`Work::deadline`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Work {
    /// A short command of its own: [`ONE_SHOT`].
    OneShot,
    /// One session of our client or server: its wait for the server (`--wait-for-server`),
    /// then each of its [`SESSION_PHASES`] at its `--timeout`.
    Session {
        timeout: Duration,
        wait_for_server: Duration,
    },
}

impl Work {
    /// The session of a command line whose own flags are `args`: its `--timeout` (else
    /// [`DEFAULT_TIMEOUT`]) and its `--wait-for-server` (else none). A value that is no
    /// duration stands for the default: the binary refuses it at once.
    pub fn session_of(args: &[String]) -> Work {
        let flag = |name: &str| {
            args.windows(2)
                .find(|w| w[0] == name)
                .and_then(|w| humantime::parse_duration(&w[1]).ok())
        };
        Work::Session {
            timeout: flag("--timeout").unwrap_or(DEFAULT_TIMEOUT),
            wait_for_server: flag("--wait-for-server").unwrap_or_default(),
        }
    }

    /// The deadline of one attempt of a step doing this work: the work at its own bounds,
    /// and [`ONE_SHOT`] for the process around it.
    pub fn deadline(self) -> Duration {
        ONE_SHOT
            + match self {
                Work::OneShot => Duration::ZERO,
                Work::Session {
                    timeout,
                    wait_for_server,
                } => wait_for_server + timeout * SESSION_PHASES,
            }
    }

    /// [`Work::deadline`] of a process under a wrapper ([`WRAPPED_SLOWDOWN`] times slower).
    pub fn wrapped(self) -> Duration {
        self.deadline() * WRAPPED_SLOWDOWN
    }
}

/// Directory (in the sync share; a name no plan marker takes) of the markers every step leaves when it starts: each holds
/// the seconds since its agent started, so a wait that runs out can say how far the steps it
/// waited on had got.
pub const STARTED_DIR: &str = ".steps-started";

/// The marker file name a step called `name` leaves in [`STARTED_DIR`] when it starts.
pub fn started_marker(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Directory (in the sync share) of the failure markers: `.failed/GUEST` holds why GUEST's plan
/// failed (a step that was not allowed to fail, its setup, a marker that never came, the agent
/// itself). Its agent writes it at once, unless some guest's marker is already there (then its
/// failure is that one's consequence); every wait for a marker, in every guest, ends as soon as
/// one appears, and the host stops the guests still running [`STOP_GRACE`] after it. So a case
/// whose guest failed ends within seconds, not at the deadline of what the others waited for.
pub const FAILED_DIR: &str = ".failed";

/// After the first failure marker of a run: how long the guests still running have to end by
/// themselves (their waits end at once, their background steps get [`GRACE`] to exit on
/// SIGTERM, then come their diagnostics and result) before the host stops them.
pub const STOP_GRACE: Duration = Duration::from_secs(GRACE.as_secs() + 25);

/// A guest's plan failed: the first of a run is the cause, what ends after it a consequence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    pub guest: String,
    pub reason: String,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "guest {} failed: {}", self.guest, self.reason.trim())
    }
}

/// The file name of `guest`'s failure marker: letters, digits, `-` and `_` (others become
/// `_`), never empty and never hidden (a `.` name is a marker being written).
fn failure_marker(guest: &str) -> String {
    let name: String = guest
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if name.is_empty() {
        "guest".into()
    } else {
        name
    }
}

/// Says in `sync` that `guest` failed for `reason`, unless a failure marker is already there
/// (its own, or another guest's: then this failure is a consequence of that one). Returns
/// whether it wrote one. The marker appears whole (written aside, then renamed).
pub fn report_failure(sync: &Path, guest: &str, reason: &str) -> std::io::Result<bool> {
    if first_failure(sync).is_some() {
        return Ok(false);
    }
    let dir = sync.join(FAILED_DIR);
    std::fs::create_dir_all(&dir)?;
    let name = failure_marker(guest);
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::write(&tmp, reason)?;
    std::fs::rename(&tmp, dir.join(name))?;
    Ok(true)
}

/// The run's first failure in `sync` (the oldest marker; by name among equals), if any guest
/// failed. Cheap when none did (one failed `read_dir`), so waits poll it with their marker.
pub fn first_failure(sync: &Path) -> Option<Failure> {
    let entries = std::fs::read_dir(sync.join(FAILED_DIR)).ok()?;
    entries
        .filter_map(|e| {
            let e = e.ok()?;
            let guest = e.file_name().to_str()?.to_owned();
            if guest.starts_with('.') {
                return None;
            }
            let at = e.metadata().and_then(|m| m.modified()).ok()?;
            Some((at, guest, e.path()))
        })
        .min()
        .map(|(_, guest, path)| Failure {
            reason: std::fs::read_to_string(&path)
                .unwrap_or_else(|e| format!("(its marker {} unreadable: {e})", path.display())),
            guest,
        })
}

/// The worst case of one foreground step's command: every attempt at its full deadline, and
/// the pauses between them (its wait for a marker is not in it: see [`Timeline`]).
pub fn worst_case(step: &Step) -> Duration {
    let attempts = step.retries.saturating_add(1);
    step.timeout() * attempts + secs(step.retry_delay_s.clamp(0.0, 60.0)) * step.retries
}

/// The latest times at which one plan's steps end and create their markers, with every step
/// at every attempt of its own deadline and every marker it waits for at the latest time that
/// marker may come. Times are from the run's start: a plan starts at the latest at `start`.
///
/// A wait ends when its marker comes, so it costs `max(now, marker)`, not `now + wait`: waits
/// that take turns between two guests (vm-smoke's workloads) then add up to the longest chain
/// of what they wait on, not to a sum that doubles with every turn.
#[derive(Debug, Default)]
struct Timeline {
    /// When the plan's last step (foreground or background) is over.
    end: Duration,
    /// The markers the plan creates, each at the latest time it may.
    created: Vec<(String, Duration)>,
    /// The longest wait of the plan at its own deadline: what one wait that runs out (its
    /// marker's maker failed) adds to the plan, which then ends.
    longest_wait: Duration,
}

impl Timeline {
    /// `marker_at` says when a marker comes at the latest (`None`: not known, the waiting
    /// step's own wait deadline stands for it).
    fn of(plan: &Plan, start: Duration, marker_at: &dyn Fn(&str) -> Option<Duration>) -> Self {
        let mut tl = Timeline::default();
        let mut t = start;
        let mut background: Vec<(Duration, &Step)> = Vec::new();
        for step in &plan.steps {
            let begins = match &step.wait_for_file {
                Some(m) => {
                    tl.longest_wait = tl.longest_wait.max(step.wait_timeout());
                    t.max(marker_at(m).unwrap_or_else(|| step.wait_timeout()))
                }
                None => t,
            };
            if let Some(m) = &step.create_file_when_started {
                tl.created.push((m.clone(), begins));
            }
            if step.background {
                t = begins;
                background.push((begins, step));
                continue;
            }
            t = begins + worst_case(step);
            for m in [&step.create_file_when_done, &step.create_file_when_ended]
                .into_iter()
                .flatten()
            {
                tl.created.push((m.clone(), t));
            }
        }
        // The background steps are collected once the foreground ones are over: each is
        // stopped once the marker it lives until comes (then has its grace), or at its own
        // deadline.
        tl.end = t;
        for (begun, step) in background {
            // Living until a marker, it is stopped when that comes ([`derive`] makes its own
            // deadline no shorter); else it has its own deadline.
            let own = begun + step.timeout();
            let over = match step.until_file() {
                Some(u) => t.max(marker_at(u).unwrap_or(own)),
                None => t.max(own),
            } + GRACE;
            for m in [&step.create_file_when_done, &step.create_file_when_ended]
                .into_iter()
                .flatten()
            {
                tl.created.push((m.clone(), over));
            }
            tl.end = tl.end.max(over);
        }
        tl
    }
}

/// Worst-case run time of a plan run alone, from its first step (node setup excluded): every
/// step at every attempt of its deadline, each marker at the latest time its maker makes it,
/// plus one wait that runs out.
pub fn budget(plan: &Plan) -> color_eyre::Result<Duration> {
    let own = markers(std::slice::from_ref(plan), Duration::ZERO)?;
    let tl = Timeline::of(plan, Duration::ZERO, &|m| own.get(m).copied());
    Ok(tl.end + tl.longest_wait)
}

/// Each guest's hard deadline, from its QEMU's start, for the plans of one run (after
/// [`derive`]): the boot and node setup, then its plan's worst case (the markers it waits for
/// at their latest), one wait that runs out, and the grace of its last step.
pub fn guest_deadlines(plans: &[Plan]) -> color_eyre::Result<Vec<Duration>> {
    let start = plans_start(plans);
    let at = markers(plans, start)?;
    Ok(plans
        .iter()
        .map(|p| {
            let tl = Timeline::of(p, start, &|m| at.get(m).copied());
            // A plan alone counts from its own first step: its guest boots first.
            let boot = if plans.len() > 1 {
                Duration::ZERO
            } else {
                BOOT_AND_SETUP
            };
            boot + tl.end + tl.longest_wait + GRACE
        })
        .collect())
}

/// When the plans of a run start at the latest, on the run's clock: a plan alone counts from
/// its own first step; several guests boot side by side, and one may start its plan a whole
/// boot after another.
fn plans_start(plans: &[Plan]) -> Duration {
    if plans.len() > 1 {
        BOOT_AND_SETUP
    } else {
        Duration::ZERO
    }
}

/// When each marker of the run comes at the latest (the plans' deadlines as they stand).
/// Waits that go round in a circle (a step waits, directly or through other guests, for a
/// marker that only comes after it: a run that could only hang) are an error.
fn markers(plans: &[Plan], start: Duration) -> color_eyre::Result<HashMap<String, Duration>> {
    // Monotone from nothing: each round's times are at least the last round's, so the
    // rounds end at the longest chain of waits, or grow without end around a circle.
    let mut at: HashMap<String, Duration> = HashMap::new();
    for _ in 0..rounds(plans) {
        let mut next: HashMap<String, Duration> = HashMap::new();
        for p in plans {
            let tl = Timeline::of(p, start, &|m| Some(at.get(m).copied().unwrap_or_default()));
            for (m, t) in tl.created {
                let e = next.entry(m).or_default();
                *e = (*e).max(t);
            }
        }
        if next == at {
            return Ok(at);
        }
        at = next;
    }
    let circle: Vec<&str> = at.keys().map(String::as_str).collect();
    color_eyre::eyre::bail!(
        "the plans' waits go round in a circle: a step waits, directly or through other \
         guests, for a marker that only comes after it (a run that could only hang); markers: {}",
        circle.join(", ")
    )
}

/// Enough rounds for the longest chain of markers through every step of the run.
fn rounds(plans: &[Plan]) -> usize {
    plans.iter().map(|p| p.steps.len()).sum::<usize>() + 2
}

/// The latest time (from the plan's first step) at which `plan`, run alone, creates `marker`.
#[cfg(test)]
fn time_to_marker(plan: &Plan, marker: &str) -> Option<Duration> {
    markers(std::slice::from_ref(plan), Duration::ZERO)
        .ok()?
        .get(marker)
        .copied()
}

/// Derives the deadlines of every step that waits (in place, over all plans of one run): a
/// wait for a marker gets the latest time that marker may come, on the run's clock (the
/// waiting step starts no earlier than the run); a background step that lives until a marker
/// gets that time plus [`GRACE`]. A deadline its plan set higher stays. A marker no step
/// creates, and waits that go round in a circle (a plan that could only hang), are errors.
pub fn derive(plans: &mut [Plan]) -> color_eyre::Result<()> {
    let at = markers(plans, plans_start(plans))?;
    for plan in plans.iter_mut() {
        for step in &mut plan.steps {
            if let Some(m) = step.wait_for_file.clone() {
                let need = bound_or_err(&at, &m, &step.name)?;
                if need > step.wait_timeout() {
                    step.wait_s = Some(need.as_secs_f64());
                }
            }
            if let Some(u) = step.until_file().map(str::to_owned) {
                let need = bound_or_err(&at, &u, &step.name)? + GRACE;
                if need > step.timeout() {
                    step.timeout_s = need.as_secs_f64();
                }
            }
        }
    }
    Ok(())
}

fn bound_or_err(
    at: &HashMap<String, Duration>,
    marker: &str,
    step: &str,
) -> color_eyre::Result<Duration> {
    at.get(marker).copied().ok_or_else(|| {
        color_eyre::eyre::eyre!(
            "step {step} waits for marker {marker}, which no step of this run creates \
             (a plan bug: its wait could only run out)"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_failure_is_the_cause_and_later_ones_are_not_written() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(first_failure(dir.path()), None);
        assert!(report_failure(dir.path(), "A", "step verify exited with 1").unwrap());
        // B's failure after A's is its consequence: no marker of its own.
        assert!(!report_failure(dir.path(), "B", "guest A failed: ...: stopping").unwrap());
        // A marker being written (hidden) is not read.
        std::fs::write(dir.path().join(FAILED_DIR).join(".C.tmp"), "half").unwrap();
        let f = first_failure(dir.path()).unwrap();
        assert_eq!(f.guest, "A");
        assert_eq!(f.to_string(), "guest A failed: step verify exited with 1");
        assert_eq!(failure_marker("../x y"), "___x_y");
        assert_eq!(failure_marker(""), "guest");
    }
    use crate::plan::Node;

    fn plan(steps: Vec<Step>) -> Plan {
        Plan {
            node: Node::guest("10.0.0.1", false),
            steps,
            sync_dir: "/s".into(),
        }
    }

    fn client(name: &str, timeout: f64) -> Step {
        let mut s = Step::new(name, &["true"]);
        s.timeout_s = timeout;
        s
    }

    fn server(name: &str, until: &str) -> Step {
        let mut s = Step::new(name, &["sleep", "1"]);
        s.background = true;
        s.timeout_s = 30.0;
        s.exit_after_file = Some(until.into());
        s
    }

    #[test]
    fn a_server_lives_as_long_as_the_clients_before_its_marker_may_take() {
        // The failure: 21 servers, each with a fixed 120 s, while the clients' sum
        // grew past it. Derived, each server's deadline covers every client up to its own.
        let mut clients = Vec::new();
        for i in 0..30 {
            let mut c = client(&format!("client {i}"), 60.0);
            if i % 3 == 2 {
                c.create_file_when_ended = Some(format!("done:{}", i / 3));
            }
            clients.push(c);
        }
        let servers: Vec<Step> = (0..10)
            .map(|i| server(&format!("server {i}"), &format!("done:{i}")))
            .collect();
        let mut plans = [plan(servers), plan(clients)];
        derive(&mut plans).unwrap();
        for (i, s) in plans[0].steps.iter().enumerate() {
            let clients_up_to_mine = Duration::from_secs(60 * 3 * (i as u64 + 1));
            assert_eq!(
                s.timeout(),
                clients_up_to_mine + BOOT_AND_SETUP + GRACE,
                "{i}"
            );
        }
        // The server guest's deadline covers its last server; the client guest's its clients.
        let guests = guest_deadlines(&plans).unwrap();
        assert!(guests[0] > Duration::from_secs(60 * 30) + BOOT_AND_SETUP);
        assert_eq!(
            guests[1],
            BOOT_AND_SETUP + Duration::from_secs(60 * 30) + GRACE
        );
        // One more scenario moves the last server's deadline with it: nothing is a fixed total.
        plans[1].steps.push(client("client 30", 60.0));
        plans[1].steps[30].create_file_when_ended = Some("done:9".into());
        derive(&mut plans).unwrap();
        assert_eq!(
            plans[0].steps[9].timeout(),
            Duration::from_secs(60 * 31) + BOOT_AND_SETUP + GRACE
        );
    }

    #[test]
    fn waits_chain_through_other_plans_and_keep_higher_deadlines() {
        let mut up = client("server up", 10.0);
        up.background = true;
        up.create_file_when_started = Some("up".into());
        up.stop_when_file = Some("done".into());
        let mut first = client("first", 40.0);
        first.wait_for_file = Some("up".into());
        first.retries = 2;
        first.retry_delay_s = 1.0;
        let mut last = client("last", 5.0);
        last.create_file_when_done = Some("done".into());
        let mut plans = [plan(vec![up]), plan(vec![first, last])];
        derive(&mut plans).unwrap();
        // "up" is created at the server plan's start: the client waits a boot for it.
        assert_eq!(plans[1].steps[0].wait_timeout(), BOOT_AND_SETUP);
        // "done", on the run's clock: the client plan's start at the latest (a boot), three
        // attempts of 40 s, two pauses, then 5 s; the server lives until then, and its grace.
        let steps = Duration::from_secs(3 * 40 + 2 + 5);
        assert_eq!(time_to_marker(&plans[1], "done"), Some(steps));
        assert_eq!(plans[0].steps[0].timeout(), BOOT_AND_SETUP + steps + GRACE);
        // A deadline set higher by its plan stays.
        plans[0].steps[0].timeout_s = 10_000.0;
        derive(&mut plans).unwrap();
        assert_eq!(plans[0].steps[0].timeout(), Duration::from_secs(10_000));
    }

    /// vm-smoke's workloads take turns between two guests: A's server of workload `i` starts
    /// once B's client of `i - 1` is done, B's client of `i` waits for it. A wait costs until
    /// its marker comes, so the deadlines grow by each turn's own time: 9 turns made 6 days
    /// of deadline when every wait counted in full on top of the one before (CI's vm-smoke
    /// phase: "369 s of 523682 s").
    #[test]
    fn turns_between_guests_add_up_to_the_chain_not_to_a_doubling_sum() {
        let turns = 9;
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for i in 0..turns {
            if i > 0 {
                let mut turn = client(&format!("turn {i}"), 1.0);
                turn.wait_for_file = Some(format!("done {}", i - 1));
                a.push(turn);
            }
            let mut server = client(&format!("server {i}"), 30.0);
            server.background = true;
            server.create_file_when_started = Some(format!("up {i}"));
            server.stop_when_file = Some(format!("done {i}"));
            a.push(server);
            let mut c = client(&format!("client {i}"), 60.0);
            c.wait_for_file = Some(format!("up {i}"));
            c.create_file_when_ended = Some(format!("done {i}"));
            b.push(c);
        }
        let mut plans = [plan(a), plan(b)];
        derive(&mut plans).unwrap();
        // Client 0 ends 60 s after the latest start; each turn after it adds its own 1 s and
        // the next client's 60 s.
        let last_done = BOOT_AND_SETUP + Duration::from_secs(60 + 61 * (turns - 1));
        let last_server = &plans[0].steps[plans[0].steps.len() - 1];
        assert_eq!(last_server.timeout(), last_done + GRACE);
        let guests = guest_deadlines(&plans).unwrap();
        // A: its last server is stopped at the last "done", then its grace; one wait (its
        // longest, for the turn before the last) may run out; then the guest's grace.
        assert!(guests[0] <= 2 * last_done + 3 * GRACE, "{guests:?}");
        assert!(guests[1] <= 2 * last_done + 2 * GRACE, "{guests:?}");
        assert!(guests.iter().all(|g| *g > last_done), "{guests:?}");
    }

    #[test]
    fn waits_in_a_circle_are_a_plan_error() {
        let mut x = client("x", 5.0);
        x.wait_for_file = Some("b".into());
        x.create_file_when_done = Some("a".into());
        let mut y = client("y", 5.0);
        y.wait_for_file = Some("a".into());
        y.create_file_when_done = Some("b".into());
        let e = derive(&mut [plan(vec![x]), plan(vec![y])])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("circle") && e.contains('a') && e.contains('b'),
            "{e}"
        );
    }

    #[test]
    fn a_marker_nobody_creates_is_a_plan_error_naming_it() {
        let mut plans = [plan(vec![server("server", "never")])];
        let e = derive(&mut plans).unwrap_err().to_string();
        assert!(e.contains("never") && e.contains("server"), "{e}");
    }

    #[test]
    fn a_sessions_deadline_follows_its_binarys_own_flags() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let plain = Work::session_of(&args(&["--json"]));
        assert_eq!(
            plain.deadline(),
            ONE_SHOT + DEFAULT_TIMEOUT * SESSION_PHASES
        );
        // Raising the binary's --timeout raises the step's deadline by each phase's share.
        let slow = Work::session_of(&args(&["--timeout", "60s"]));
        assert_eq!(
            slow.deadline(),
            plain.deadline() + Duration::from_secs(50 * 4)
        );
        // Its wait for the server comes first.
        let waits = Work::session_of(&args(&["--wait-for-server", "30s", "--timeout", "2s"]));
        assert_eq!(waits.deadline(), ONE_SHOT + Duration::from_secs(30 + 2 * 4));
        assert_eq!(waits.wrapped(), waits.deadline() * WRAPPED_SLOWDOWN);
        assert_eq!(Work::OneShot.deadline(), ONE_SHOT);
    }

    #[test]
    fn started_markers_are_plain_file_names() {
        assert_eq!(
            started_marker("client:bench:1 (lat)"),
            "client_bench_1__lat_"
        );
        assert_eq!(started_marker("../x"), ".._x");
    }
}
