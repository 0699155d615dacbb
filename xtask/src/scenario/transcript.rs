//! The typed result of a run: for each guest what went wrong outside the steps, and for each
//! step (a role) how it ended as an [`ExitKind`], its stdout read as typed events
//! (`rdma_proto::events`), the raw output kept for reports. One builder for guests
//! ([`Transcript::from_guests`], over a [`vm::PlanRun`]) and one for this host
//! ([`Transcript::from_local`], over `agent::run_local`'s result).

use super::exit::{ExitKind, Speaks};
use crate::plan::{Diagnostics, PlanResult, StepResult};
use crate::vm;
use rdma_proto::events::client::Event as ClientEvent;
use rdma_proto::events::server::Event as ServerEvent;
use rdma_proto::events::{self, EventError};
use std::time::Duration;

/// Which role a step plays, by step name (the harness knows: it named them).
pub type Cast<'a> = &'a dyn Fn(&str) -> Speaks;

/// One step of a plan, as the judges read it.
#[derive(Clone, Debug, Default)]
pub struct Role {
    pub name: String,
    /// The guest it ran in (`host` for this host).
    pub guest: String,
    pub argv: Vec<String>,
    /// How its last attempt ended.
    pub exit: ExitKind,
    /// Whether the agent counted it a success (its status was the plan's `expect_exit`).
    pub ok: bool,
    /// Why it failed, when it did not simply exit (spawn error, marker timeout, deadline).
    pub error: Option<String>,
    /// Its server events, in order (a server role).
    pub server: Vec<ServerEvent<'static>>,
    /// Its client events, in order (a client role).
    pub client: Vec<ClientEvent<'static>>,
    /// The JSON lines of its stdout that are no event of its binary, each named.
    pub strangers: Vec<EventError>,
    /// The non-empty lines of its stdout that are not JSON (human lines).
    pub human: Vec<String>,
    pub stdout: String,
    pub stderr: String,
    /// Run time of the last attempt, seconds.
    pub elapsed_s: f64,
    /// Time spent waiting for its marker, seconds.
    pub waited_s: f64,
    pub attempts: u32,
}

impl Role {
    /// The role of a process xtask ran on this host itself (`exec`), called `name`.
    pub fn finished(name: &str, f: &crate::exec::Finished, speaks: Speaks) -> Self {
        let step = StepResult {
            name: name.to_owned(),
            exit_code: f.code,
            ok: ExitKind::of(f.code, f.timed_out, speaks) == ExitKind::Success,
            timed_out: f.timed_out,
            attempts: 1,
            stdout: f.stdout.clone(),
            stderr: f.stderr.clone(),
            elapsed_s: f.elapsed.as_secs_f64(),
            ..StepResult::default()
        };
        Self::of(&step, HOST, speaks)
    }

    /// The role of output that no plan step ran (a file of events, a process of this host's
    /// own): `stdout` read as `speaks` prints, on this host.
    pub fn of_stdout(name: &str, stdout: &str, speaks: Speaks) -> Self {
        let step = StepResult {
            name: name.to_owned(),
            stdout: stdout.to_owned(),
            ..StepResult::default()
        };
        Self::of(&step, HOST, speaks)
    }

    /// The role of `step`, run in `guest`, playing `speaks`.
    pub fn of(step: &StepResult, guest: &str, speaks: Speaks) -> Self {
        let mut role = Role {
            name: step.name.clone(),
            guest: guest.to_owned(),
            argv: step.argv.clone(),
            exit: ExitKind::of(step.exit_code, step.timed_out, speaks),
            ok: step.ok,
            error: step.error.clone(),
            stdout: step.stdout.clone(),
            stderr: step.stderr.clone(),
            elapsed_s: step.elapsed_s,
            waited_s: step.waited_s,
            attempts: step.attempts,
            ..Role::default()
        };
        for line in step.stdout.lines().filter(|l| !l.trim().is_empty()) {
            if !line.trim_start().starts_with('{') {
                role.human.push(line.to_owned());
                continue;
            }
            let parsed = match speaks {
                Speaks::Server => events::parse::<ServerEvent<'static>>(line).map(|e| {
                    role.server.push(e);
                }),
                Speaks::Client => events::parse::<ClientEvent<'static>>(line).map(|e| {
                    role.client.push(e);
                }),
                // Not ours: its JSON is its own (the hostile peer's summary), kept as text.
                Speaks::Other => Ok(()),
            };
            if let Err(e) = parsed {
                role.strangers.push(e);
            }
        }
        role
    }
}

/// One guest (or this host): what went wrong outside its steps.
#[derive(Clone, Debug, Default)]
pub struct Guest {
    pub name: String,
    /// Why there is no result at all (the guest died, the agent crashed, a bad result file).
    pub died: Option<String>,
    /// Whether setup and every step succeeded (false when it died).
    pub ok: bool,
    /// The plan's first error, when it failed.
    pub plan_error: Option<String>,
    /// Its node setup commands (ip, rdma), as roles of nobody.
    pub setup: Vec<Role>,
    /// The device state gathered when something failed.
    pub diagnostics: Option<Diagnostics>,
    /// The last lines of its console (`None` on this host).
    pub console_tail: Option<String>,
    /// The status /init recorded; `None` if it never got there (or on this host).
    pub exit_code: Option<i32>,
    /// From QEMU start to the plan starting, if seen.
    pub boot: Option<Duration>,
    /// From QEMU start to exit.
    pub elapsed: Option<Duration>,
    /// The plan's own wall time inside the guest, seconds (when it reported).
    pub plan_s: Option<f64>,
}

impl Guest {
    /// The first setup command that failed.
    pub fn setup_failure(&self) -> Option<&Role> {
        self.setup.iter().find(|s| !s.ok)
    }

    /// "guest A setup `ip link …` failed: …", when a setup command failed.
    pub fn setup_problem(&self) -> Option<String> {
        self.setup_failure().map(|e| {
            format!(
                "guest {} setup `{}` failed: {}{}",
                self.name,
                e.argv.join(" "),
                e.stderr,
                e.error.as_deref().unwrap_or("")
            )
        })
    }
}

/// What a run left to judge: its guests, and every step of every guest as a role.
#[derive(Clone, Debug, Default)]
pub struct Transcript {
    pub guests: Vec<Guest>,
    /// Every step's role, guest by guest, in plan order (steps not reached are absent).
    pub roles: Vec<Role>,
}

/// What the builder knows of a guest before its result: its name and, for a real guest, how
/// its QEMU ended.
#[derive(Clone, Debug, Default)]
pub struct Machine {
    pub name: String,
    pub console_tail: Option<String>,
    pub exit_code: Option<i32>,
    pub boot: Option<Duration>,
    pub elapsed: Option<Duration>,
}

impl Transcript {
    /// The transcript of guests that ran plans.
    pub fn from_guests(run: &vm::PlanRun, cast: Cast<'_>) -> Self {
        let machines = run.guests.outcomes.iter().map(|o| Machine {
            name: o.name.clone(),
            console_tail: Some(o.console_tail.clone()),
            exit_code: o.exit_code,
            boot: o.boot,
            elapsed: Some(o.elapsed),
        });
        Self::build(machines.zip(run.results.iter().cloned()), cast)
    }

    /// The transcript of a plan run on this host (`agent::run_local`): one guest, `host`.
    pub fn from_local(result: &PlanResult, cast: Cast<'_>) -> Self {
        let host = Machine {
            name: HOST.to_owned(),
            ..Machine::default()
        };
        Self::build([(host, Ok(result.clone()))], cast)
    }

    /// The transcript of `results`, one per machine (`Err`: why it has none).
    pub fn build(
        results: impl IntoIterator<Item = (Machine, Result<PlanResult, String>)>,
        cast: Cast<'_>,
    ) -> Self {
        let mut t = Transcript::default();
        for (m, r) in results {
            let mut g = Guest {
                name: m.name,
                console_tail: m.console_tail,
                exit_code: m.exit_code,
                boot: m.boot,
                elapsed: m.elapsed,
                ..Guest::default()
            };
            match r {
                Err(why) => g.died = Some(why),
                Ok(r) => {
                    g.ok = r.ok;
                    g.plan_error = r.error;
                    g.diagnostics = r.diagnostics;
                    g.plan_s = Some(r.elapsed_s);
                    g.setup = r
                        .setup
                        .iter()
                        .map(|s| Role::of(s, &g.name, Speaks::Other))
                        .collect();
                    t.roles
                        .extend(r.steps.iter().map(|s| Role::of(s, &g.name, cast(&s.name))));
                }
            }
            t.guests.push(g);
        }
        t
    }

    /// The role called `name` (in any guest).
    pub fn role(&self, name: &str) -> Option<&Role> {
        self.roles.iter().find(|r| r.name == name)
    }

    /// The roles of guest `guest`, in plan order.
    pub fn roles_of<'a>(&'a self, guest: &'a str) -> impl Iterator<Item = &'a Role> + 'a {
        self.roles.iter().filter(move |r| r.guest == guest)
    }

    /// Why guests have no result, one line each.
    pub fn deaths(&self) -> impl Iterator<Item = &str> {
        self.guests.iter().filter_map(|g| g.died.as_deref())
    }
}

/// The guest name of this host's plan.
pub const HOST: &str = "host";
