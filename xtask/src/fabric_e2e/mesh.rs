//! The mesh phase of `fabric-e2e`, after the fabric check, in the same three guests under two
//! labelled ToRs (node1 alone under `tor1`, node2 and node3 under `tor2`: [`SWITCHES_FILE`]):
//! every node runs `rdma-server --serve` and `rdma-client mesh` (metrics on
//! [`METRICS_PORT`]), node1 runs Debian's Prometheus scraping all three with the shipped
//! alerting rules and Debian's Alertmanager with the shipped inhibit rules, and the faults come
//! one after another, each checked from Prometheus and Alertmanager by `xtask mesh-guest
//! STAGE` on node1 ([`crate::mesh_guest`]) before the next:
//!
//! 1. steady;
//! 2. node3 sends nothing at all (`tc … u32 match u32 0 0 … drop` on its link): a dead host;
//! 3. node3 sends again;
//! 4. node2 drops every RoCE packet it sends (`tc … u32 … udp dport 4791 … drop`: TCP open):
//!    a broken NIC;
//! 5. node2's server stopped too;
//! 6. both restored (the filter gone, a new server);
//! 7. [`LOSS_PCT`] % loss on the node2–node3 link, both ways (`prio` with a `netem loss` band
//!    that a `u32` filter on the peer's address feeds).
//!
//! The steps take turns through markers; every deadline is derived (the checks' from the
//! probers' flags, [`crate::mesh_guest::budget`]). The probers' events come back as their
//! steps' output and are judged on the host too ([`super::mesh_judge`]).

use std::path::Path;

use color_eyre::eyre::{Result, WrapErr as _};

use crate::deadline::GRACE;
use crate::mesh_guest::{Stage, Topology, budget};
use crate::plan::{DEADLINE_ARG, Step};
use crate::scenario::role::Invocation;

/// The probers' interval, and the runs of probes that move a pair's state.
pub const EVERY_S: u64 = 5;
pub const DOWN_AFTER: u32 = 3;
/// The servers' `--bench-max-time`: a kept lat session ends that long after its accept, so
/// the stage sees the probers open a new one (transparently: no probe fails for it).
pub const BENCH_MAX_TIME_S: u64 = 60;
/// The servers' `--timeout`: no round of a kept session begins within it of the session's end,
/// so a kept lat session serves rounds for `BENCH_MAX_TIME_S - SERVER_TIMEOUT_S`.
pub const SERVER_TIMEOUT_S: u64 = 10;

/// Intervals after which the servers end a prober's kept lat session: it then opens a new one.
pub const RENEW_EVERY: u64 = (BENCH_MAX_TIME_S - SERVER_TIMEOUT_S) / EVERY_S;
pub const UP_AFTER: u32 = 2;
pub const DEGRADE_AFTER: u32 = 3;
/// Slow above this many times a pair's own median: TCG guests sharing two cores see a median
/// move 3 x now and then (the default would degrade healthy pairs here).
pub const SLOW_FACTOR: u32 = 5;
/// Ping-pongs of each probe's lat exchange, and 64 KiB writes of a bandwidth sample.
pub const LAT_ITERS: u32 = 10;
pub const BW_ITERS: u32 = 5;
/// Every queue pair's local ACK timeout code (`--qp-timeout`, both binaries): 18 is 1.07 s. A
/// probe takes a ping-pong that waited out a resend for loss (`probe::stalled`: the timeout
/// plus a round trip); at the default 67 ms, TCG guests sharing two cores stall that long now
/// and then with no packet lost, and healthy pairs looked lossy.
pub const QP_TIMEOUT: u8 = 18;
/// A bandwidth sample every this many probes of a pair (the dashboard has a panel for it).
pub const BW_EVERY: u32 = 3;
/// The port of the probers' `/metrics`.
pub const METRICS_PORT: u16 = 9478;
/// Prometheus's and Alertmanager's ports on node1.
pub const PROMETHEUS_PORT: u16 = 9090;
pub const ALERTMANAGER_PORT: u16 = 9093;
/// The lossy link's loss, and how many probes each of its paths must have under it.
pub const LOSS_PCT: u32 = 5;
pub const LOSS_PROBES: u32 = 12;
/// The name of each node's prober step.
pub const PROBER: &str = "mesh-prober";
/// The marker every mesh step lives until.
pub const DONE: &str = "mesh-done";
/// The node with the broken NIC, the dead one (its ToR-mate: each is judged by the other and
/// by node1, across), and the lossy link's ends.
pub const FAULTED: &str = "node2";
pub const DEAD: &str = "node3";
pub const LOSSY: [&str; 2] = ["node2", "node3"];
/// The node whose rxe devices the fabric check's down phase deleted: it adds them back, and
/// its server starts last.
const REVIVED: &str = "node3";

/// The files node1's steps read (in the fabric's files directory).
pub const TOPOLOGY_FILE: &str = "mesh.json";
pub const PROMETHEUS_FILE: &str = "prometheus.yml";
pub const RULES_FILE: &str = "rdma-mesh.rules.guests.yml";
/// The shipped Alertmanager configuration (its inhibit rules), as node1's Alertmanager reads it.
pub const ALERTMANAGER_FILE: &str = "alertmanager.yml";
/// The nodes' switches as Slurm's tree plugin writes them, for `mesh --topology`: node1 alone
/// under `tor1`, the others under `tor2`, both under a spine.
pub const SWITCHES_FILE: &str = "topology.conf";

fn switches(n: usize) -> String {
    format!(
        "# the guests' racks\nSwitchName=tor1 Nodes=node1\nSwitchName=tor2 Nodes=node[2-{n}]\nSwitchName=spine Switches=tor[1-2]\n"
    )
}

/// Intervals in which every path is probed once under [`switches`]: each node probes one node
/// of the other ToR an interval, so node1 takes the `n - 1` nodes of `tor2` in turn (the
/// others probe within their ToR in full, and node1 each interval).
fn cycle(n: usize) -> u64 {
    n.saturating_sub(1).max(1) as u64
}

/// The mesh of `n` nodes, as the check reads it.
pub fn topology(n: usize, dashboard: &Path) -> Topology {
    Topology {
        nodes: (1..=n).map(|i| format!("node{i}")).collect(),
        metrics_port: METRICS_PORT,
        faulted: FAULTED.into(),
        dead: DEAD.into(),
        lossy: LOSSY.map(str::to_owned),
        prometheus: format!("http://node1:{PROMETHEUS_PORT}"),
        alertmanager: format!("http://node1:{ALERTMANAGER_PORT}"),
        dashboard: dashboard.to_owned(),
        every_s: EVERY_S,
        cycle: cycle(n),
        down_after: DOWN_AFTER,
        up_after: UP_AFTER,
        bw_every: BW_EVERY,
        alert_for_s: crate::prometheus::ALERT_FOR_S,
        loss_probes: LOSS_PROBES,
    }
}

/// Prometheus's configuration: every node's prober scraped every 2 s (a scrape that times out
/// makes its target's series stale at once: a second leaves TCG guests too little), the rules
/// evaluated each second, the alerts sent to node1's Alertmanager.
pub fn prometheus_yml(n: usize, rules: &str) -> String {
    let targets: Vec<String> = (1..=n)
        .map(|i| format!("'node{i}:{METRICS_PORT}'"))
        .collect();
    format!(
        "global:\n  scrape_interval: 2s\n  scrape_timeout: 2s\n  evaluation_interval: 1s\nrule_files:\n  - {rules}\nalerting:\n  alertmanagers:\n    - static_configs:\n        - targets: ['node1:{ALERTMANAGER_PORT}']\nscrape_configs:\n  - job_name: rdma-mesh\n    static_configs:\n      - targets: [{}]\n",
        targets.join(", ")
    )
}

/// Writes the topology, the rules' guest copy and Prometheus's configuration into `files`.
pub fn write_files(files: &Path, files_s: &str, n: usize) -> Result<()> {
    let root = crate::exec::workspace_root();
    let shipped = root
        .join("deploy/prometheus")
        .join(crate::prometheus::RULES);
    let text = std::fs::read_to_string(&shipped)
        .wrap_err_with(|| format!("reading {}", shipped.display()))?;
    let dashboard = root
        .join("deploy/grafana")
        .join(crate::prometheus::DASHBOARD);
    let topo = serde_json::to_string_pretty(&topology(n, &dashboard))?;
    let am = root
        .join("deploy/alertmanager")
        .join(crate::prometheus::alertmanager::CONFIG);
    let am = std::fs::read_to_string(&am).wrap_err_with(|| format!("reading {}", am.display()))?;
    for (name, body) in [
        (RULES_FILE, crate::prometheus::fast_rules(&text)?),
        (
            PROMETHEUS_FILE,
            prometheus_yml(n, &format!("{files_s}/{RULES_FILE}")),
        ),
        (TOPOLOGY_FILE, topo),
        (SWITCHES_FILE, switches(n)),
        (ALERTMANAGER_FILE, am),
    ] {
        std::fs::write(files.join(name), body)
            .wrap_err_with(|| format!("writing {name} into {}", files.display()))?;
    }
    Ok(())
}

/// What the steps run: our binaries, xtask (for the checks), and where the files are.
#[derive(Clone, Copy, Debug)]
pub struct Bins<'a> {
    pub server: &'a str,
    pub client: &'a str,
    pub xtask: &'a str,
    pub files: &'a str,
}

fn step(name: &str, argv: &[&str]) -> Step {
    Step::new(name, argv)
}

/// A fault's step: a failure is reported (a failed step fails the phase) but lets the turns
/// go on, so the checks after it end by themselves instead of waiting out their markers.
fn fault(name: &str, argv: &[&str]) -> Step {
    let mut s = step(name, argv);
    s.timeout_s = 20.0;
    s.allow_failure = true;
    s
}

fn tc(name: &str, args: &[&str]) -> Step {
    let mut argv = vec!["tc"];
    argv.extend_from_slice(args);
    fault(name, &argv)
}

fn after(mut s: Step, marker: &str) -> Step {
    s.wait_for_file = Some(marker.to_owned());
    s
}

fn then(mut s: Step, marker: &str) -> Step {
    s.create_file_when_ended = Some(marker.to_owned());
    s
}

/// A check of `stage` on node1, from `marker` on; it makes `next` however it ends.
fn check(b: Bins<'_>, topo: &Topology, stage: Stage, marker: &str, next: &str) -> Step {
    let config = format!("{}/{TOPOLOGY_FILE}", b.files);
    let mut s = step(
        &format!("mesh-{}", stage.name()),
        &[
            b.xtask,
            "mesh-guest",
            stage.name(),
            "--config",
            &config,
            "--deadline-s",
            DEADLINE_ARG,
        ],
    );
    s.timeout_s = (budget(stage, topo) + GRACE).as_secs_f64();
    s.allow_failure = true;
    then(after(s, marker), next)
}

/// A background step that lives until [`DONE`].
fn service<S: AsRef<str>>(name: &str, argv: &[S]) -> Step {
    let argv: Vec<&str> = argv.iter().map(AsRef::as_ref).collect();
    let mut s = step(name, &argv);
    s.background = true;
    s.stop_when_file = Some(DONE.into());
    s
}

/// The link's loss toward `peer_ip`, on this node's eth0: a prio root, a netem band, a filter
/// on the peer's address feeding it.
fn loss_steps(peer_ip: &str, marker: &str, next: &str) -> Vec<Step> {
    let pct = format!("{LOSS_PCT}%");
    let dst = format!("{peer_ip}/32");
    vec![
        after(
            tc(
                "mesh-loss-root",
                &[
                    "qdisc", "replace", "dev", "eth0", "root", "handle", "1:", "prio",
                ],
            ),
            marker,
        ),
        tc(
            "mesh-loss-netem",
            &[
                "qdisc", "add", "dev", "eth0", "parent", "1:3", "handle", "30:", "netem", "loss",
                &pct,
            ],
        ),
        then(
            tc(
                "mesh-loss-filter",
                &[
                    "filter", "add", "dev", "eth0", "parent", "1:", "protocol", "ip", "prio", "1",
                    "u32", "match", "ip", "dst", &dst, "flowid", "1:3",
                ],
            ),
            next,
        ),
    ]
}

/// Node `i`'s (0-based) mesh steps, after the fabric check (`fabric-done`) is over.
pub fn steps(i: usize, n: usize, b: Bins<'_>) -> Vec<Step> {
    let name = format!("node{}", i + 1);
    let topo = topology(n, Path::new(""));
    let nodes = format!("node[1-{n}]");
    let every = format!("{EVERY_S}s");
    let (down, up, degrade) = (
        DOWN_AFTER.to_string(),
        UP_AFTER.to_string(),
        DEGRADE_AFTER.to_string(),
    );
    let (lat, bw) = (LAT_ITERS.to_string(), BW_EVERY.to_string());
    let slow = SLOW_FACTOR.to_string();
    let listen = format!("0.0.0.0:{METRICS_PORT}");
    let switches = format!("{}/{SWITCHES_FILE}", b.files);
    let qp_timeout = QP_TIMEOUT.to_string();
    let bw_iters = BW_ITERS.to_string();
    // Each server keeps a write and a lat session for each of its n - 1 probers: half of
    // --max-clients (the kept sessions' cap) holds them with room to spare.
    let max_clients = (4 * n.saturating_sub(1) + 4).to_string();
    let bench_max_time = format!("{BENCH_MAX_TIME_S}s");
    let server_timeout = format!("{SERVER_TIMEOUT_S}s");
    let server = || {
        let argv = Invocation::server(b.server)
            .args(["--serve", "--max-clients", &max_clients])
            .args(["--bench-max-time", &bench_max_time])
            .args(["--timeout", &server_timeout, "--qp-timeout", &qp_timeout])
            .argv();
        service("mesh-server", &argv)
    };
    let prober_argv = Invocation::client(b.client)
        .subcommand("mesh")
        .args([
            &nodes,
            "--every",
            &every,
            "--down-after",
            &down,
            "--up-after",
            &up,
        ])
        .args(["--degrade-after", &degrade, "--slow-factor", &slow])
        .args([
            "--lat-iters",
            &lat,
            "--bw-every",
            &bw,
            "--bw-iters",
            &bw_iters,
        ])
        .args(["--qp-timeout", &qp_timeout, "--metrics-listen", &listen])
        .args(["--topology", &switches, "--json"])
        .argv();
    let prober = after(
        service(PROBER, &prober_argv),
        // The faulted node's server starts last (its devices come back first).
        "mesh-servers-up",
    );
    let mut s = Vec::new();
    if name == REVIVED {
        // The fabric check's down phase deleted its devices.
        for (k, dev) in ["rxe0", "rxe1"].iter().enumerate() {
            let eth = format!("eth{k}");
            s.push(fault(
                &format!("mesh-{dev}-back"),
                &["rdma", "link", "add", dev, "type", "rxe", "netdev", &eth],
            ));
        }
        let mut first = server();
        first.create_file_when_started = Some("mesh-servers-up".into());
        s.push(first);
    } else {
        s.push(server());
    }
    s.push(prober);
    let root = || {
        tc(
            "mesh-root",
            &[
                "qdisc", "replace", "dev", "eth0", "root", "handle", "1:", "prio",
            ],
        )
    };
    if name == DEAD {
        // Nothing leaves its link: no TCP, no RoCE, no ARP; its prober goes unscraped.
        s.push(after(root(), "mesh-steady"));
        s.push(then(
            tc(
                "mesh-dead",
                &[
                    "filter", "add", "dev", "eth0", "parent", "1:", "protocol", "all", "prio", "1",
                    "u32", "match", "u32", "0", "0", "action", "drop",
                ],
            ),
            "mesh-down",
        ));
        s.push(then(
            after(
                tc("mesh-alive", &["qdisc", "del", "dev", "eth0", "root"]),
                "mesh-down-seen",
            ),
            "mesh-up",
        ));
    }
    if name == FAULTED {
        s.push(after(root(), "mesh-up-seen"));
        s.push(then(
            tc(
                "mesh-block",
                &[
                    "filter", "add", "dev", "eth0", "parent", "1:", "protocol", "ip", "prio", "1",
                    "u32", "match", "ip", "protocol", "17", "0xff", "match", "ip", "dport", "4791",
                    "0xffff", "action", "drop",
                ],
            ),
            "mesh-blocked",
        ));
        let stop = fault("mesh-stop-server", &["pkill", "-TERM", "-x", "rdma-server"]);
        s.push(then(after(stop, "mesh-blocked-seen"), "mesh-stopped"));
        s.push(after(
            tc("mesh-unblock", &["qdisc", "del", "dev", "eth0", "root"]),
            "mesh-stopped-seen",
        ));
        let mut again = server();
        again.name = "mesh-server-again".into();
        again.create_file_when_started = Some("mesh-restored".into());
        s.push(again);
    }
    if name == "node1" {
        s.push(service(
            "mesh-prometheus",
            &[
                "prometheus",
                &format!("--config.file={}/{PROMETHEUS_FILE}", b.files),
                "--storage.tsdb.path=/tmp/prometheus",
                &format!("--web.listen-address=0.0.0.0:{PROMETHEUS_PORT}"),
                "--log.level=warn",
            ],
        ));
        s.push(service(
            "mesh-alertmanager",
            &[
                "prometheus-alertmanager",
                &format!("--config.file={}/{ALERTMANAGER_FILE}", b.files),
                "--storage.path=/tmp/alertmanager",
                &format!("--web.listen-address=0.0.0.0:{ALERTMANAGER_PORT}"),
                "--cluster.listen-address=",
                "--log.level=warn",
            ],
        ));
        for (stage, marker, next) in [
            (Stage::Steady, "mesh-servers-up", "mesh-steady"),
            (Stage::Down, "mesh-down", "mesh-down-seen"),
            (Stage::Up, "mesh-up", "mesh-up-seen"),
            (Stage::Blocked, "mesh-blocked", "mesh-blocked-seen"),
            (Stage::Stopped, "mesh-stopped", "mesh-stopped-seen"),
            (Stage::Restored, "mesh-restored", "mesh-restored-seen"),
            (Stage::Lossy, "mesh-lossy", DONE),
        ] {
            s.push(check(b, &topo, stage, marker, next));
        }
    }
    if name == LOSSY[1] {
        s.extend(loss_steps("10.0.0.2", "mesh-restored-seen", "mesh-lossy-3"));
    }
    if name == LOSSY[0] {
        s.extend(loss_steps("10.0.0.3", "mesh-lossy-3", "mesh-lossy"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prometheus_scrapes_every_node_and_loads_the_guests_rules() {
        let y = prometheus_yml(3, "/f/r.yml");
        assert!(y.contains("rule_files:\n  - /f/r.yml\n"), "{y}");
        assert!(
            y.contains("targets: ['node1:9478', 'node2:9478', 'node3:9478']"),
            "{y}"
        );
        assert!(y.contains("job_name: rdma-mesh"), "{y}");
        assert!(
            y.contains("alertmanagers:\n    - static_configs:\n        - targets: ['node1:9093']"),
            "{y}"
        );
        assert_eq!(
            switches(3),
            "# the guests' racks\nSwitchName=tor1 Nodes=node1\nSwitchName=tor2 Nodes=node[2-3]\nSwitchName=spine Switches=tor[1-2]\n"
        );
        assert_eq!(cycle(3), 2);
    }

    #[test]
    fn the_faults_and_checks_take_turns_through_markers() {
        let b = Bins {
            server: "/s",
            client: "/c",
            xtask: "/x",
            files: "/f",
        };
        let names =
            |i: usize| -> Vec<String> { steps(i, 3, b).iter().map(|s| s.name.clone()).collect() };
        assert_eq!(
            names(0),
            [
                "mesh-server",
                "mesh-prober",
                "mesh-prometheus",
                "mesh-alertmanager",
                "mesh-steady",
                "mesh-down",
                "mesh-up",
                "mesh-blocked",
                "mesh-stopped",
                "mesh-restored",
                "mesh-lossy"
            ]
        );
        assert_eq!(
            names(1),
            [
                "mesh-server",
                "mesh-prober",
                "mesh-root",
                "mesh-block",
                "mesh-stop-server",
                "mesh-unblock",
                "mesh-server-again",
                "mesh-loss-root",
                "mesh-loss-netem",
                "mesh-loss-filter"
            ]
        );
        let n2 = steps(1, 3, b);
        let at = |name: &str| n2.iter().find(|s| s.name == name).unwrap();
        assert_eq!(
            at("mesh-root").wait_for_file.as_deref(),
            Some("mesh-up-seen")
        );
        assert_eq!(
            at("mesh-block").create_file_when_ended.as_deref(),
            Some("mesh-blocked")
        );
        assert_eq!(
            at("mesh-stop-server").argv,
            ["pkill", "-TERM", "-x", "rdma-server"]
        );
        assert_eq!(
            at("mesh-server-again").create_file_when_started.as_deref(),
            Some("mesh-restored")
        );
        // The dead node: nothing leaves its link from the steady stage's end to the down
        // stage's.
        let n3 = steps(2, 3, b);
        let at = |name: &str| n3.iter().find(|s| s.name == name).unwrap();
        assert_eq!(
            at("mesh-root").wait_for_file.as_deref(),
            Some("mesh-steady")
        );
        assert!(
            at("mesh-dead")
                .argv
                .join(" ")
                .ends_with("protocol all prio 1 u32 match u32 0 0 action drop")
        );
        assert_eq!(
            at("mesh-dead").create_file_when_ended.as_deref(),
            Some("mesh-down")
        );
        assert_eq!(
            at("mesh-alive").wait_for_file.as_deref(),
            Some("mesh-down-seen")
        );
        assert_eq!(
            at("mesh-alive").create_file_when_ended.as_deref(),
            Some("mesh-up")
        );
        assert_eq!(
            at("mesh-server").create_file_when_started.as_deref(),
            Some("mesh-servers-up")
        );
        // The checks: each waits for its fault and lets the next go however it ended; the
        // last ends the mesh.
        let n1 = steps(0, 3, b);
        let lossy = n1.iter().find(|s| s.name == "mesh-lossy").unwrap();
        assert_eq!(lossy.create_file_when_ended.as_deref(), Some(DONE));
        assert!(lossy.allow_failure && lossy.argv.contains(&DEADLINE_ARG.to_owned()));
        let prober = &n1[1];
        assert!(
            prober
                .argv
                .windows(2)
                .any(|w| w == ["--topology", "/f/topology.conf"])
        );
        assert!(prober.background && prober.stop_when_file.as_deref() == Some(DONE));
        assert!(
            prober
                .argv
                .windows(2)
                .any(|w| w == ["--metrics-listen", "0.0.0.0:9478"])
        );
        // Every marker a step waits for is made by some step.
        let all: Vec<Step> = (0..3).flat_map(|i| steps(i, 3, b)).collect();
        for s in &all {
            if let Some(m) = &s.wait_for_file {
                assert!(
                    all.iter().any(|o| [
                        &o.create_file_when_started,
                        &o.create_file_when_ended,
                        &o.create_file_when_done
                    ]
                    .into_iter()
                    .any(|c| c.as_deref() == Some(m))),
                    "{} waits for {m}, which nothing makes",
                    s.name
                );
            }
        }
    }
}
