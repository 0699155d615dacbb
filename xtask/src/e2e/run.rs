//! Runs the plans (in guests, or on this host) and collects every step's result, the problems
//! outside any scenario and the device diagnostics.

use crate::agent;
use crate::plan::{Plan, StepResult};
use crate::text::tail;
use crate::vm::{self, PlanGuest, VmOptions};
use color_eyre::eyre::Result;
use std::time::{Duration, Instant};

/// Named phase timings, printed at the end.
pub(super) type Phases = Vec<(&'static str, Duration)>;

/// What a run left to judge.
#[derive(Debug, Default)]
pub(super) struct Collected {
    /// Every step's result, from every node.
    pub results: Vec<StepResult>,
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
    nested: bool,
    opts: &VmOptions,
    phases: &mut Phases,
) -> Result<Collected> {
    let run = vm::run_plans(guests, opts)?;
    let p = &run.guests.prepared;
    phases.push(("kernel", p.kernel_time));
    phases.push(("initramfs", p.initramfs_time));
    phases.push(("guests", run.guests.guests_time));
    let mut c = Collected::default();
    for (o, r) in run.guests.outcomes.iter().zip(&run.results) {
        let r = match r {
            Ok(r) => r,
            Err(e) => {
                c.problems.push(e.clone());
                continue;
            }
        };
        if nested {
            c.nested = r.steps.first().map(|s| format!("{}{}", s.stdout, s.stderr));
            if !r.ok {
                c.problems.push(format!(
                    "guest {}: {}",
                    o.name,
                    r.error.as_deref().unwrap_or("nested e2e failed")
                ));
            }
        }
        if let Some(e) = r.setup.iter().find(|s| !s.ok) {
            c.problems.push(format!(
                "guest {} setup `{}` failed: {}{}",
                o.name,
                e.argv.join(" "),
                e.stderr,
                e.error.as_deref().unwrap_or("")
            ));
        }
        if let Some(d) = &r.diagnostics {
            c.diagnostics.push(format!(
                "guest {} diagnostics:\n--- rdma link ---\n{}\n--- ibv_devinfo ---\n{}\n--- dmesg (rdma/rxe) ---\n{}\n--- console tail ---\n{}",
                o.name,
                d.rdma_link,
                tail(&d.ibv_devinfo, 2000),
                d.dmesg,
                o.console_tail
            ));
        }
        c.results.extend(r.steps.iter().cloned());
    }
    Ok(c)
}

/// Runs `plan` on this host (`guest-agent`'s code, without a guest).
pub(super) fn on_host(plan: &Plan, phases: &mut Phases) -> Collected {
    let t = Instant::now();
    let result = agent::run_local(plan);
    phases.push(("scenarios", t.elapsed()));
    Collected {
        results: result.steps,
        problems: result.error.iter().map(|e| format!("plan: {e}")).collect(),
        diagnostics: result
            .diagnostics
            .iter()
            .map(|d| {
                format!(
                    "diagnostics:\n--- rdma link ---\n{}\n--- dmesg (rdma/rxe) ---\n{}",
                    d.rdma_link, d.dmesg
                )
            })
            .collect(),
        nested: None,
    }
}
