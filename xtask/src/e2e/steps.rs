//! How scenarios become plan steps: one background server step per scenario (its own port),
//! the client steps in order, then the extras (self-test, load test) and the end marker.

use super::bins::Bins;
use super::files::Files;
use super::scenarios::{self, ClientRun, Scenario, Target, Tool};
use crate::deadline::Work;
use crate::plan::Step;
use crate::scenario::exit::Speaks;
use crate::scenario::role::Invocation;
use color_eyre::eyre::Result;
use std::collections::HashMap;

/// Step name of rdma-core-rs's device self-test.
pub(super) const SELFTEST: &str = "rdma-core-rs self-test";
/// Step name of the load test.
pub(super) const LOAD: &str = "load";
/// The load test's server port: just below [`scenarios::BASE_PORT`].
const LOAD_PORT: u16 = scenarios::BASE_PORT - 1;

/// The client's uses a scenario's client arguments may start with.
const USES: [&str; 1] = [crate::scenario::role::BENCH];
/// The marker a scenario's last client leaves when it has ended (whatever its outcome): its
/// server's job is over then.
pub(super) fn clients_done(s: &Scenario) -> String {
    format!("clients-done-{}", s.name)
}

/// The step name of a scenario's server.
pub(super) fn server_step_name(s: &Scenario) -> String {
    format!("server:{}", s.name)
}

/// The step name of a scenario's `j`-th client.
pub(super) fn client_step_name(s: &Scenario, j: usize) -> String {
    let label = s.clients.get(j).map_or("?", |c| c.label);
    format!("client:{}:{j} ({label})", s.name)
}

/// The server steps (background, one port each) and the client steps (in order).
pub(super) fn steps(
    selected: &[Scenario],
    bins: &Bins,
    files: &Files,
    server_ip: &str,
    load: bool,
    device: Option<&str>,
) -> Result<(Vec<Step>, Vec<Step>)> {
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
        let listen = ["--listen".to_owned(), format!("[::]:{port}")];
        let program = match s.server_fault {
            Some(fault) => Invocation::misbehaving(&bins.misbehave_server, fault),
            None => Invocation::server(&bins.server),
        };
        let mut server = Step::new(server_step_name(s), &[]);
        server.argv = program
            .env(&s.server_env)
            .wrapper(s.wrapper)
            .args(listen)
            .args(s.server_args.iter().map(|a| files.expand(a)))
            .device(device)
            .argv();
        server.background = true;
        server.expect_exit = scenarios::status(s.server_exit);
        // It lives until its own clients are done, plus a grace: its deadline is derived from
        // theirs (crate::deadline), never a fixed total over the whole scenario list.
        let done = clients_done(s);
        if s.server_args.iter().any(|a| a == "--serve") {
            server.stop_when_file = Some(done.clone());
        } else {
            server.exit_after_file = Some(done.clone());
        }
        server.waits_on = (0..s.clients.len())
            .map(|j| client_step_name(s, j))
            .collect();
        servers.push(server);
        for (j, c) in s.clients.iter().enumerate() {
            clients.push(client_step(s, j, c, bins, files, server_ip, port, device));
        }
        match clients.last_mut() {
            Some(last) if !s.clients.is_empty() => last.create_file_when_ended = Some(done),
            _ => {
                let mut none = Step::new(format!("{}: no clients", s.name), &["true"]);
                none.create_file_when_ended = Some(done);
                clients.push(none);
            }
        }
    }
    if load {
        let mut args = crate::load::LoadArgs::new(&bins.server, &bins.client)?;
        args.misbehave_bin = Some(bins.misbehave_client.clone().into());
        args.kill_stages = true;
        // Bursts of strangers with quiet gaps, each followed by a real client.
        args.soak_rounds = 3;
        args.json = true;
        // Below the scenarios' ports (BASE_PORT + i): no scenario server, however late it
        // exits, holds it.
        args.port = LOAD_PORT;
        if let Some(d) = device {
            args.server_args.push(format!("--ib-dev={d}"));
            args.client_args.push(format!("--ib-dev={d}"));
        }
        let mut step = Step::new(LOAD, &[bins.xtask.as_str()]);
        step.argv.extend(args.argv());
        // As long as its own phases may take (every client at its deadline, ...).
        step.timeout_s = crate::load::worst_case(&args).as_secs_f64();
        step.allow_failure = true;
        clients.push(step);
    }
    Ok((servers, clients))
}

/// Which role each scenario step plays: the servers speak as servers, our clients (and the
/// misbehaving one) as clients; the hostile peer and plain commands are not ours.
pub(super) fn cast(selected: &[Scenario]) -> impl Fn(&str) -> Speaks + use<> {
    let mut roles = HashMap::new();
    for s in selected {
        roles.insert(server_step_name(s), Speaks::Server);
        for (j, c) in s.clients.iter().enumerate() {
            let speaks = match c.tool {
                Tool::RdmaClient | Tool::Misbehave(_) => Speaks::Client,
                Tool::Hostile | Tool::Command(_) => Speaks::Other,
            };
            roles.insert(client_step_name(s, j), speaks);
        }
    }
    move |name: &str| roles.get(name).copied().unwrap_or_default()
}

/// One client's step; our client (and the misbehaving one) name `device` unless the scenario
/// names its own.
#[allow(clippy::too_many_arguments)]
fn client_step(
    s: &Scenario,
    j: usize,
    c: &ClientRun,
    bins: &Bins,
    files: &Files,
    ip: &str,
    port: u16,
    device: Option<&str>,
) -> Step {
    if let Tool::Command(argv) = c.tool {
        let mut step = Step::new(client_step_name(s, j), argv);
        step.expect_exit = scenarios::status(c.exit);
        step.timeout_s = Work::OneShot.deadline().as_secs_f64();
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
        // The hostile peer is xtask itself, not one of our binaries.
        let mut step = Step::new(client_step_name(s, j), &[]);
        if !c.env.is_empty() {
            step.argv.push("env".to_owned());
            step.argv
                .extend(c.env.iter().map(|(k, v)| format!("{k}={v}")));
        }
        step.argv.push(bins.xtask.clone());
        step.argv.extend(args);
        step.expect_exit = scenarios::status(c.exit);
        step.timeout_s = 180.0;
        step.allow_failure = true;
        return step;
    }
    let target = match c.target {
        Target::Server => vec![
            format!("{ip}:{port}"),
            "--wait-for-server".to_owned(),
            "30s".to_owned(),
        ],
        // Scenario ports are consecutive from BASE_PORT; nothing listens this far above.
        Target::Nowhere => vec![format!("{ip}:{}", port.saturating_add(500))],
    };
    let client = match c.tool {
        Tool::Misbehave(fault) => Invocation::misbehaving(&bins.misbehave_client, fault),
        _ => Invocation::client(&bins.client),
    };
    // A scenario's client arguments may start with the client's use (`bench`), which comes
    // before the server.
    let (client, args) = match c.args.split_first() {
        Some((sub, rest)) if USES.contains(&sub.as_str()) => (client.subcommand(sub), rest),
        _ => (client, &c.args[..]),
    };
    let mut step = Step::new(client_step_name(s, j), &[]);
    step.argv = client
        .env(&c.env)
        .wrapper(s.wrapper)
        .args(target)
        .args(args.iter().map(|a| files.expand(a)))
        .device(device)
        .argv();
    step.expect_exit = scenarios::status(c.exit);
    // One session at the bounds its own command line sets, slower under a wrapper.
    let work = Work::session_of(&step.argv);
    step.timeout_s = if s.wrapper.is_empty() {
        work.deadline()
    } else {
        work.wrapped()
    }
    .as_secs_f64();
    // Keep going: every scenario is judged on its own, and the servers wait for the end marker.
    step.allow_failure = true;
    step
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bench client's use comes before its server (and after the test-only peer's fault):
    /// `rdma-client bench SERVER ...`, as the client's command line wants it.
    #[test]
    fn a_bench_clients_use_comes_before_its_server() {
        let (bins, files) = (Bins::for_tests(), Files::for_tests());
        let (_, clients) = steps(&scenarios::all(), &bins, &files, "10.0.0.1", true, None).unwrap();
        let benches: Vec<&Step> = clients
            .iter()
            .filter(|c| c.argv.iter().any(|a| a == "--mode"))
            .collect();
        assert!(benches.len() >= 4, "{benches:?}");
        for c in benches {
            let at = |pred: &dyn Fn(&String) -> bool| c.argv.iter().position(pred);
            let (Some(sub), Some(server)) = (
                at(&|a| a == crate::scenario::role::BENCH),
                at(&|a| a.starts_with("10.0.0.1:")),
            ) else {
                panic!("{:?}", c.argv)
            };
            assert!(sub < server, "{:?}", c.argv);
            let program = &c.argv[sub - 1];
            let after_fault = sub >= 3 && c.argv[sub - 2] == "--fault";
            assert!(program.ends_with("client") || after_fault, "{:?}", c.argv);
        }
    }

    #[test]
    fn a_known_device_is_named_unless_the_scenario_names_its_own() {
        let (bins, files) = (Bins::for_tests(), Files::for_tests());
        let all = scenarios::all();
        let (servers, clients) =
            steps(&all, &bins, &files, "127.0.0.1", true, Some("rxe-e2e")).unwrap();
        let names_dev =
            |argv: &[String], dev: &str| argv.windows(2).any(|w| w[0] == "--ib-dev" && w[1] == dev);
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
                .windows(2)
                .any(|w| w[0] == "--port" && w[1] == LOAD_PORT.to_string())
        );
        // Its deadline comes from its own phases: 200 sequential clients at 30 s at least.
        assert!(load.timeout_s > 200.0 * 30.0, "{}", load.timeout_s);
        assert!(
            load.argv
                .contains(&"--client-arg=--ib-dev=rxe-e2e".to_owned())
        );
        let (servers, _) = steps(&all, &bins, &files, "10.0.0.1", false, None).unwrap();
        assert!(
            servers
                .iter()
                .all(|s| !s.argv.contains(&"--ib-dev".to_owned()))
        );
    }

    #[test]
    fn steps_put_each_server_on_its_own_port_and_clients_in_order() {
        let (bins, files) = (Bins::for_tests(), Files::for_tests());
        let all = scenarios::all();
        let (servers, clients) = steps(&all, &bins, &files, "10.0.0.1", false, None).unwrap();
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
        // Each server lives until its own scenario's last client has ended, not a shared end.
        for (server, s) in servers.iter().zip(&all) {
            let done = clients_done(s);
            assert_eq!(server.until_file(), Some(done.as_str()), "{}", s.name);
            let last = clients
                .iter()
                .rposition(|c| c.name.starts_with(&format!("client:{}:", s.name)))
                .unwrap();
            assert_eq!(clients[last].create_file_when_ended.as_ref(), Some(&done));
            assert_eq!(server.waits_on.len(), s.clients.len());
        }
        let zh = servers.iter().find(|s| s.name == "server:zh").unwrap();
        assert_eq!(&zh.argv[..2], ["env", "LANG=zh_CN.UTF-8"]);
        assert!(clients.iter().any(|c| c.argv.iter().any(|a| a == "/p.bin")));
    }
}
