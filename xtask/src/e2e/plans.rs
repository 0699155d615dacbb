//! Which node runs what: the plans for two guests (servers in A, clients in B), for one guest
//! (which runs `xtask e2e --backend rxe` itself), and for this host (rxe or hardware).

use super::bins::Bins;
use super::files::Files;
use super::scenarios::Scenario;
use super::steps::steps;
use crate::deadline;
use crate::plan::{GUEST_SYNC, Node, Plan, Step};
use crate::vm::PlanGuest;
use color_eyre::eyre::{Result, WrapErr as _};

const SERVER_IP: &str = "10.0.0.1";
const CLIENT_IP: &str = "10.0.0.2";
/// Name of the one-node guest's only step.
pub(super) const NESTED: &str = "nested e2e --backend rxe";

/// How many guests, and what they run besides the scenarios.
#[derive(Debug, Clone, Copy)]
pub(super) struct Topology {
    /// 1: one guest runs the nested e2e; 2: servers in A, clients in B.
    pub nodes: u8,
    pub selftest: bool,
    pub load: bool,
}

/// The guests' plans.
pub(super) fn guests(
    topo: Topology,
    selected: &[Scenario],
    bins: &Bins,
    files: &Files,
) -> Result<Vec<PlanGuest>> {
    let guest = |name: &str, node: Node, steps: Vec<Step>| PlanGuest {
        name: name.into(),
        plan: Plan {
            node,
            steps,
            sync_dir: GUEST_SYNC.into(),
        },
        mem_mb: 1024,
    };
    if topo.nodes == 1 {
        // One guest runs this very command with the rxe backend: its deadline is the worst
        // case of the plan that command runs, plus bringing up rxe.
        let mut step = Step::new(NESTED, &[]);
        step.argv = nested_argv(topo, selected, bins);
        let mut nested = local(
            selected,
            bins,
            files,
            topo.load,
            "rxe-e2e",
            SERVER_IP,
            "/s".into(),
        )?;
        deadline::derive(std::slice::from_mut(&mut nested))
            .wrap_err("deriving the one-node plan's deadlines")?;
        step.timeout_s = (deadline::budget(&nested)? + deadline::BOOT_AND_SETUP).as_secs_f64();
        return Ok(vec![guest("A", Node::guest(SERVER_IP, false), vec![step])]);
    }
    let (servers, clients) = steps(selected, bins, files, SERVER_IP, topo.load, None)?;
    Ok(vec![
        guest("A", Node::guest(SERVER_IP, true), servers),
        guest("B", Node::guest(CLIENT_IP, true), clients),
    ])
}

/// `xtask e2e --backend rxe --no-build` with the same scenarios and extras.
fn nested_argv(topo: Topology, selected: &[Scenario], bins: &Bins) -> Vec<String> {
    let mut argv = vec![
        bins.xtask.clone(),
        "e2e".into(),
        "--backend".into(),
        "rxe".into(),
        "--no-build".into(),
    ];
    if topo.selftest {
        argv.push("--selftest".into());
    }
    if topo.load {
        argv.push("--load".into());
    }
    for s in selected {
        argv.push("--scenario".into());
        argv.push(s.name.to_owned());
    }
    argv
}

/// One plan for this host: servers and clients side by side on `device`, the clients reaching
/// the servers at `server_ip`.
pub(super) fn local(
    selected: &[Scenario],
    bins: &Bins,
    files: &Files,
    load: bool,
    device: &str,
    server_ip: &str,
    sync_dir: String,
) -> Result<Plan> {
    let (mut steps, clients) = steps(selected, bins, files, server_ip, load, Some(device))?;
    steps.extend(clients);
    Ok(Plan {
        node: Node::guest("127.0.0.1", false),
        steps,
        sync_dir,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::e2e::scenarios;
    use crate::e2e::steps::LOAD;

    #[test]
    fn two_guests_split_servers_and_clients_one_guest_nests() {
        let (bins, files) = (Bins::for_tests(), Files::for_tests());
        let all = scenarios::all();
        let two = Topology {
            nodes: 2,
            selftest: false,
            load: true,
        };
        let g = guests(two, &all, &bins, &files).unwrap();
        assert_eq!(g.len(), 2);
        assert_eq!(g[0].plan.node, Node::guest("10.0.0.1", true));
        assert_eq!(g[1].plan.node, Node::guest("10.0.0.2", true));
        assert!(
            g[0].plan
                .steps
                .iter()
                .all(|s| s.name.starts_with("server:"))
        );
        assert!(g[1].plan.steps.iter().any(|s| s.name == LOAD));

        let one = Topology {
            nodes: 1,
            selftest: true,
            load: false,
        };
        let g = guests(one, &all[..2], &bins, &files).unwrap();
        assert_eq!(g.len(), 1);
        assert_eq!(
            g[0].plan.node.nics[0].rdma, None,
            "the nested e2e brings up rxe itself"
        );
        let argv = &g[0].plan.steps[0].argv;
        assert_eq!(
            argv.join(" "),
            format!(
                "/bin/xtask e2e --backend rxe --no-build --selftest --scenario {} --scenario {}",
                all[0].name, all[1].name
            )
        );
        // The nested run's deadline covers the worst case of the plan it runs.
        let mut nested =
            local(&all[..2], &bins, &files, false, "d", "1.2.3.4", "/s".into()).unwrap();
        deadline::derive(std::slice::from_mut(&mut nested)).unwrap();
        assert!(g[0].plan.steps[0].timeout() > deadline::budget(&nested).unwrap());
    }

    #[test]
    fn the_local_plan_runs_servers_before_clients_on_the_device() {
        let (bins, files) = (Bins::for_tests(), Files::for_tests());
        let all = scenarios::all();
        let p = local(
            &all,
            &bins,
            &files,
            false,
            "rxe-e2e",
            "10.1.2.3",
            "/s".into(),
        )
        .unwrap();
        assert_eq!(p.node.nics[0].rdma, None);
        let first_client = p.steps.iter().position(|s| !s.background).unwrap();
        assert!(p.steps[..first_client].iter().all(|s| s.background));
        assert!(
            p.steps
                .iter()
                .any(|s| s.argv.iter().any(|a| a.starts_with("10.1.2.3:")))
        );
    }
}
