//! Runs the plans (in guests, or on this host) and turns what came back into the run's
//! [`Transcript`], plus the problems outside any scenario and the device diagnostics.

use super::scenarios::Scenario;
use super::steps;
use crate::agent;
use crate::plan::Plan;
use crate::scenario::exit::Speaks;
use crate::scenario::transcript::{Guest, Transcript};
use crate::text::tail;
use crate::vm::{self, PlanGuest, VmOptions};
use color_eyre::eyre::Result;
use std::time::{Duration, Instant};

/// Named phase timings, printed at the end.
pub(super) type Phases = Vec<(&'static str, Duration)>;

/// What a run left to judge.
#[derive(Debug, Default)]
pub(super) struct Collected {
    /// Every step of every node, as a role.
    pub transcript: Transcript,
    /// Problems outside any scenario (guest died, plan could not run).
    pub problems: Vec<String>,
    /// Device state from each node (rdma link, ibv_devinfo, dmesg), shown when something failed.
    pub diagnostics: Vec<String>,
    /// Output of a nested `xtask e2e` (one-node guest), shown as is.
    pub nested: Option<String>,
}

/// Boots the guests, runs their plans, collects the results. `nested`: the guests run a nested
/// `xtask e2e`, whose output is the report.
pub(super) fn in_guests(
    guests: &[PlanGuest],
    selected: &[Scenario],
    nested: bool,
    opts: &VmOptions,
    phases: &mut Phases,
) -> Result<Collected> {
    let run = vm::run_plans(guests, opts)?;
    let p = &run.guests.prepared;
    phases.push(("kernel", p.kernel_time));
    phases.push(("initramfs", p.initramfs_time));
    phases.push(("guests", run.guests.guests_time));
    let cast = steps::cast(selected);
    let transcript = Transcript::from_guests(&run, &|n: &str| cast(n));
    let mut c = Collected::default();
    for g in &transcript.guests {
        if let Some(why) = &g.died {
            c.problems.push(why.clone());
            continue;
        }
        if nested {
            c.nested = transcript
                .roles_of(&g.name)
                .next()
                .map(|s| format!("{}{}", s.stdout, s.stderr));
            if !g.ok {
                c.problems.push(format!(
                    "guest {}: {}",
                    g.name,
                    g.plan_error.as_deref().unwrap_or("nested e2e failed")
                ));
            }
        }
        c.problems.extend(g.setup_problem());
        c.diagnostics.extend(diagnostics(g));
    }
    c.transcript = transcript;
    Ok(c)
}

/// A guest's device state, with its console's tail.
fn diagnostics(g: &Guest) -> Option<String> {
    let d = g.diagnostics.as_ref()?;
    Some(format!(
        "guest {} diagnostics:\n--- rdma link ---\n{}\n--- ibv_devinfo ---\n{}\n--- dmesg (rdma/rxe) ---\n{}\n--- console tail ---\n{}",
        g.name,
        d.rdma_link,
        tail(&d.ibv_devinfo, 2000),
        d.dmesg,
        g.console_tail.as_deref().unwrap_or_default()
    ))
}

/// Runs `plan` on this host (`guest-agent`'s code, without a guest).
pub(super) fn on_host(plan: &Plan, selected: &[Scenario], phases: &mut Phases) -> Collected {
    let t = Instant::now();
    let result = agent::run_local(plan);
    phases.push(("scenarios", t.elapsed()));
    let cast = steps::cast(selected);
    let transcript = Transcript::from_local(&result, &|n: &str| -> Speaks { cast(n) });
    let host = transcript.guests.first();
    Collected {
        problems: host
            .and_then(|g| g.plan_error.as_ref())
            .map(|e| format!("plan: {e}"))
            .into_iter()
            .collect(),
        diagnostics: host
            .and_then(|g| g.diagnostics.as_ref())
            .map(|d| {
                format!(
                    "diagnostics:\n--- rdma link ---\n{}\n--- dmesg (rdma/rxe) ---\n{}",
                    d.rdma_link, d.dmesg
                )
            })
            .into_iter()
            .collect(),
        transcript,
        nested: None,
    }
}
