//! Deadlines derived from what each wait is for, never a fixed total.
//!
//! A step that waits for a marker (a client's `wait_for_file`, a server that lives until its
//! scenario's clients are done) gets the worst case of the steps that create that marker,
//! wherever they run, plus [`BOOT_AND_SETUP`] when they run in another guest (which may start
//! that much later). A guest's own deadline is its boot plus the worst case of its plan
//! ([`guest_deadline`]). So a plan that grows (one more scenario, a slower machine whose
//! steps use more of their own deadlines) moves every deadline that covers it, and a wait that
//! runs out says which step it was waiting on (the agent reads the `.steps-started/` markers).
//!
//! Only per-step deadlines are fixed numbers: one attempt of one command, one boot.

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

/// The worst case of one foreground step: its wait for a marker, every attempt at its full
/// deadline, and the pauses between them.
pub fn worst_case(step: &Step) -> Duration {
    let wait = if step.wait_for_file.is_some() {
        step.wait_timeout()
    } else {
        Duration::ZERO
    };
    let attempts = step.retries.saturating_add(1);
    wait + step.timeout() * attempts + secs(step.retry_delay_s.clamp(0.0, 60.0)) * step.retries
}

/// When a background step started at `start` is collected at the latest (its deadline, then
/// the grace after the marker it lives until).
fn background_end(start: Duration, step: &Step) -> Duration {
    start + step.timeout() + GRACE
}

/// Worst-case run time of a plan's steps, from its first step (node setup excluded): the
/// foreground steps one after another, and the last background step's collection.
pub fn budget(plan: &Plan) -> Duration {
    let mut t = Duration::ZERO;
    let mut end = Duration::ZERO;
    for step in &plan.steps {
        if step.background {
            end = end.max(background_end(t, step));
        } else {
            t += worst_case(step);
        }
    }
    end.max(t)
}

/// A guest's hard deadline: its boot and node setup, then its plan's worst case, then the
/// grace of its last step.
pub fn guest_deadline(plan: &Plan) -> Duration {
    BOOT_AND_SETUP + budget(plan) + GRACE
}

/// The latest time (from the plan's first step) at which `plan` creates `marker`, if it does.
pub fn time_to_marker(plan: &Plan, marker: &str) -> Option<Duration> {
    let is = |m: &Option<String>| m.as_deref() == Some(marker);
    let mut t = Duration::ZERO;
    let mut latest: Option<Duration> = None;
    let mut seen = |at: Duration| latest = Some(latest.map_or(at, |l| l.max(at)));
    for step in &plan.steps {
        let start = t + if step.wait_for_file.is_some() {
            step.wait_timeout()
        } else {
            Duration::ZERO
        };
        if is(&step.create_file_when_started) {
            // A step that retries creates it again at each attempt: the last one is latest.
            seen(if step.background {
                start
            } else {
                t + worst_case(step)
            });
        }
        if step.background {
            if is(&step.create_file_when_done) || is(&step.create_file_when_ended) {
                seen(budget(plan));
            }
        } else {
            t += worst_case(step);
            if is(&step.create_file_when_done) || is(&step.create_file_when_ended) {
                seen(t);
            }
        }
    }
    latest
}

/// When `marker` exists at the latest, seen from plan `me` of `plans` (every plan of one run,
/// started together): its own plan's time, or another's plus [`BOOT_AND_SETUP`].
fn marker_bound(plans: &[Plan], me: usize, marker: &str) -> Option<Duration> {
    plans
        .iter()
        .enumerate()
        .filter_map(|(i, p)| {
            time_to_marker(p, marker).map(|t| if i == me { t } else { t + BOOT_AND_SETUP })
        })
        .max()
}

/// Derives the deadline of every wait for a marker in the plans of one run (the guests booted
/// together, or the one plan of this host): a `wait_for_file` waits as long as its marker's
/// creators may take, and a step that lives until a marker (a background one, or a foreground
/// one that waits for it itself) lives that long plus [`GRACE`]. A deadline a plan already sets higher is kept. Fails naming a marker that no
/// plan creates (the wait could only run out).
pub fn derive(plans: &mut [Plan]) -> color_eyre::Result<()> {
    // Waits feed the times of later markers, which other waits wait on: repeat until nothing
    // moves (plans are short chains; a cycle stops growing after the passes below).
    for _ in 0..8 {
        let mut changed = false;
        for me in 0..plans.len() {
            for k in 0..plans[me].steps.len() {
                let step = &plans[me].steps[k];
                if let Some(m) = step.wait_for_file.clone() {
                    let need = bound_or_err(plans, me, &m, &step.name)?;
                    let step = &mut plans[me].steps[k];
                    if need > step.wait_timeout() {
                        step.wait_s = Some(need.as_secs_f64());
                        changed = true;
                    }
                }
                let step = &plans[me].steps[k];
                if let Some(m) = step.until_file().map(str::to_owned) {
                    let need = bound_or_err(plans, me, &m, &step.name)? + GRACE;
                    let step = &mut plans[me].steps[k];
                    if need > step.timeout() {
                        step.timeout_s = need.as_secs_f64();
                        changed = true;
                    }
                }
            }
        }
        if !changed {
            break;
        }
    }
    Ok(())
}

fn bound_or_err(
    plans: &[Plan],
    me: usize,
    marker: &str,
    step: &str,
) -> color_eyre::Result<Duration> {
    marker_bound(plans, me, marker).ok_or_else(|| {
        color_eyre::eyre::eyre!(
            "step {step} waits for marker {marker}, which no step of this run creates \
             (a plan bug: its wait could only run out)"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
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
        assert!(guest_deadline(&plans[0]) > Duration::from_secs(60 * 30) + BOOT_AND_SETUP);
        assert_eq!(
            guest_deadline(&plans[1]),
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
        // "done": that wait, three attempts of 40 s, two pauses, then 5 s.
        let done = BOOT_AND_SETUP + Duration::from_secs(3 * 40 + 2 + 5);
        assert_eq!(time_to_marker(&plans[1], "done"), Some(done));
        assert_eq!(plans[0].steps[0].timeout(), done + BOOT_AND_SETUP + GRACE);
        // A deadline set higher by its plan stays.
        plans[0].steps[0].timeout_s = 10_000.0;
        derive(&mut plans).unwrap();
        assert_eq!(plans[0].steps[0].timeout(), Duration::from_secs(10_000));
    }

    #[test]
    fn a_marker_nobody_creates_is_a_plan_error_naming_it() {
        let mut plans = [plan(vec![server("server", "never")])];
        let e = derive(&mut plans).unwrap_err().to_string();
        assert!(e.contains("never") && e.contains("server"), "{e}");
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
