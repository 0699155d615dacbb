//! Guests that run a [`Plan`] each with `xtask guest-agent`, and the plans' results.

use super::{GuestRun, GuestSpec, Init, Net, VmOptions, run_guests_on};
use crate::deadline;
use crate::plan::{GUEST_SHARE, PLAN_FILE, Plan, PlanResult, RESULT_FILE};
use color_eyre::eyre::{Result, eyre};

/// A guest that runs a plan with `guest-agent`. Its deadline is derived from its plan
/// ([`deadline::guest_deadlines`], after [`deadline::derive`] over every plan of the run).
#[derive(Clone, Debug)]
pub struct PlanGuest {
    pub name: String,
    pub plan: Plan,
    pub mem_mb: u32,
}

/// What [`run_plans`] returns: the guests plus each plan's parsed result (same order).
#[derive(Debug)]
pub struct PlanRun {
    pub guests: GuestRun,
    /// `Err` holds why there is no result (guest died, agent crashed...).
    pub results: Vec<std::result::Result<PlanResult, String>>,
}

/// Boots one guest per plan; each runs `xtask guest-agent` with its plan.
pub fn run_plans(nodes: &[PlanGuest], opts: &VmOptions) -> Result<PlanRun> {
    run_plans_on(nodes, &Net::default(), opts)
}

/// [`run_plans`] on `net`. Each plan NIC is told its MAC, so the agent proves which QEMU NIC
/// became which interface; a plan may configure fewer NICs than the guests have.
pub fn run_plans_on(nodes: &[PlanGuest], net: &Net, opts: &VmOptions) -> Result<PlanRun> {
    run_plans_booted(nodes, net, opts, &|_| Init::Busybox)
}

/// [`run_plans_on`], each guest booted with the PID 1 `init` says for it (systemd for a guest
/// that runs packaged units as they are meant to run).
pub fn run_plans_booted(
    nodes: &[PlanGuest],
    net: &Net,
    opts: &VmOptions,
    init: &dyn Fn(&PlanGuest) -> Init,
) -> Result<PlanRun> {
    let exe = crate::exec::self_exe()?;
    let mut plans: Vec<Plan> = nodes.iter().map(|n| n.plan.clone()).collect();
    deadline::derive(&mut plans)?;
    let deadlines = deadline::guest_deadlines(&plans)?;
    let specs = nodes
        .iter()
        .zip(plans.into_iter().zip(deadlines))
        .enumerate()
        .map(|(i, (n, (mut plan, deadline)))| {
            let idx = u8::try_from(i + 1).map_err(|_| eyre!("too many guests"))?;
            if plan.node.nics.len() > net.nics {
                return Err(eyre!(
                    "{}'s plan sets up {} NICs; the guests have {}",
                    n.name,
                    plan.node.nics.len(),
                    net.nics
                ));
            }
            let mut s = GuestSpec::with_nics(
                &n.name,
                idx,
                net.nics,
                vec![
                    exe.clone(),
                    "guest-agent".into(),
                    "--plan".into(),
                    format!("{GUEST_SHARE}/{PLAN_FILE}"),
                ],
            );
            s.mem_mb = n.mem_mb;
            s.timeout = deadline;
            s.init = init(n);
            for (nic, mac) in plan.node.nics.iter_mut().zip(&s.macs) {
                nic.mac.get_or_insert_with(|| mac.clone());
            }
            s.files
                .push((PLAN_FILE.to_owned(), serde_json::to_vec_pretty(&plan)?));
            Ok(s)
        })
        .collect::<Result<Vec<_>>>()?;
    let guests = run_guests_on(&specs, net, opts)?;
    let results = guests
        .outcomes
        .iter()
        .map(|o| {
            let p = o.share_dir.join(RESULT_FILE);
            let bytes = std::fs::read(&p).map_err(|e| {
                let why = if let Some(stopped) = &o.stopped {
                    stopped.clone()
                } else if o.timed_out {
                    format!("killed at its {:.0} s deadline", o.deadline.as_secs_f64())
                } else {
                    format!("exit code {:?}", o.exit_code)
                };
                format!(
                    "{}: no {RESULT_FILE} ({e}; {why}); console tail:\n{}",
                    o.name, o.console_tail
                )
            })?;
            serde_json::from_slice(&bytes)
                .map_err(|e| format!("{}: bad {RESULT_FILE}: {e}", o.name))
        })
        .collect();
    Ok(PlanRun { guests, results })
}
