//! The two guests' plans for one bench session: guest A serves (a plain `rdma-server
//! --serve` for the whole session, one perftest server per perftest run, the TCP sink),
//! guest B measures (the TCP stream, then for every size and repetition both tools,
//! alternating which goes first). Before those, in both, the stranger flood; after them the
//! mesh.

use crate::e2e::Bins;
use crate::plan::{GUEST_SYNC, Node, Plan, Step};
use crate::scenario::role::Invocation;
use crate::vm::PlanGuest;

use super::results::{Mode, Tool};

pub const SERVER_IP: &str = "10.0.0.1";
pub const CLIENT_IP: &str = "10.0.0.2";
const OUR_PORT: u16 = 7471;
const TCP_PORT: u16 = 5201;
const SERVER_UP: &str = "rdma-server-up";
const TCP_UP: &str = "tcp-sink-up";
const ALL_DONE: &str = "bench-done";
/// The step name of our server.
pub const OUR_SERVER: &str = "rdma-server";
/// The step names of the link measurement.
pub const TCP_SINK: &str = "tcp sink";
pub const TCP_SOURCE: &str = "tcp source";

/// What a session measures.
#[derive(Debug, Clone)]
pub struct Params {
    pub sizes: Vec<u64>,
    pub reps: u32,
    /// Most exchanges of a latency run (fewer for big messages).
    pub lat_iters: u64,
    /// Most writes of a bandwidth run (fewer for big messages).
    pub bw_iters: u64,
    pub tx_depth: u32,
    /// Seconds of the TCP stream.
    pub tcp_secs: f64,
    /// Setup probes per tool (5-exchange latency runs).
    pub setup_reps: u32,
    /// Milliseconds each guest delays its frames by (netem), 0 for none.
    pub delay_ms: u32,
    /// Seconds of the stranger flood ([`super::flood`]), 0 for none.
    pub flood_secs: f64,
    /// The mesh ([`super::mesh`]) over both guests (A rank 0, B rank 1), if any.
    pub mesh: Option<super::mesh::figures::Setting>,
}

/// The guests' one link.
const DEV: &str = "eth0";

/// `tc qdisc replace … netem delay`: the guest's frames wait `ms` before they leave.
fn delay_step(ms: u32) -> Step {
    let mut s = Step::new(
        format!("netem delay {ms} ms"),
        &[
            "tc",
            "qdisc",
            "replace",
            "dev",
            DEV,
            "root",
            "netem",
            "delay",
            &format!("{ms}ms"),
        ],
    );
    s.timeout_s = 20.0;
    s
}

/// One measured client run.
#[derive(Debug, Clone, PartialEq)]
pub struct Unit {
    pub tool: Tool,
    pub mode: Mode,
    pub bytes: u64,
    pub rep: u32,
    pub iters: u64,
    pub tx_depth: u32,
    /// A setup probe rather than a sample of the sweep.
    pub setup: bool,
}

impl Unit {
    /// The step name in guest B's plan (and the key results are found by).
    pub fn step_name(&self) -> String {
        format!(
            "{} {} {} {} r{}",
            if self.setup { "setup" } else { "run" },
            self.tool.name(),
            match self.mode {
                Mode::Lat => "lat",
                Mode::Bw => "bw",
            },
            self.bytes,
            self.rep
        )
    }
}

/// Latency runs move about 4 MiB each way, at least 10 exchanges.
pub fn lat_iters(bytes: u64, max: u64) -> u64 {
    (4 * 1024 * 1024 / bytes.max(1)).clamp(10, max.max(10))
}

/// Bandwidth runs move about 32 MiB, at least 10 writes.
pub fn bw_iters(bytes: u64, max: u64) -> u64 {
    (32 * 1024 * 1024 / bytes.max(1)).clamp(10, max.max(10))
}

/// Every client run of the session, in order: setup probes (alternating tools), then per
/// size latency and bandwidth, each repetition both tools, the first tool alternating.
pub fn units(p: &Params) -> Vec<Unit> {
    let mut v = Vec::new();
    let order = |rep: u32| {
        if rep % 2 == 0 {
            [Tool::Ours, Tool::Perftest]
        } else {
            [Tool::Perftest, Tool::Ours]
        }
    };
    for rep in 0..p.setup_reps {
        for tool in order(rep) {
            v.push(Unit {
                tool,
                mode: Mode::Lat,
                bytes: 2,
                rep,
                iters: 5,
                tx_depth: 1,
                setup: true,
            });
        }
    }
    for &bytes in &p.sizes {
        for mode in [Mode::Lat, Mode::Bw] {
            let iters = match mode {
                Mode::Lat => lat_iters(bytes, p.lat_iters),
                Mode::Bw => bw_iters(bytes, p.bw_iters),
            };
            let tx_depth = match mode {
                Mode::Lat => 1,
                Mode::Bw => u32::try_from(iters).unwrap_or(u32::MAX).min(p.tx_depth),
            };
            for rep in 0..p.reps {
                for tool in order(rep) {
                    v.push(Unit {
                        tool,
                        mode,
                        bytes,
                        rep,
                        iters,
                        tx_depth,
                        setup: false,
                    });
                }
            }
        }
    }
    v
}

/// perftest's arguments (the same on both sides: perftest needs that).
fn perftest_argv(u: &Unit, server: Option<&str>) -> Vec<String> {
    let prog = match u.mode {
        Mode::Lat => "ib_write_lat",
        Mode::Bw => "ib_write_bw",
    };
    let mut v: Vec<String> = [prog, "-x", "1", "-F", "-s"]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    v.extend([u.bytes.to_string(), "-n".into(), u.iters.to_string()]);
    if u.mode == Mode::Bw {
        v.extend(["-t".into(), u.tx_depth.to_string()]);
    }
    v.extend(server.map(str::to_owned));
    v
}

/// Ours: the client alone carries the parameters; the server was started without any.
fn ours_argv(u: &Unit, bins: &Bins) -> Vec<String> {
    let mode = match u.mode {
        Mode::Lat => "lat",
        Mode::Bw => "bw",
    };
    let mut v = Invocation::client(&bins.client).subcommand("bench").args([
        format!("{SERVER_IP}:{OUR_PORT}"),
        "--mode".into(),
        mode.into(),
        "--size".into(),
        u.bytes.to_string(),
        "--iters".into(),
        u.iters.to_string(),
        "--json".into(),
    ]);
    if u.mode == Mode::Bw {
        v = v.args(["--tx-depth".into(), u.tx_depth.to_string()]);
    }
    v.argv()
}

/// Seconds one run may take: generous, the emulated link is slow and noisy; a delayed link
/// adds a round trip (twice the delay) per exchange, and per window of writes.
fn run_timeout(u: &Unit, delay_ms: u32) -> f64 {
    let bytes = (u.bytes * u.iters) as f64 * if u.mode == Mode::Lat { 2.0 } else { 1.0 };
    let round_trips = match u.mode {
        Mode::Lat => u.iters,
        Mode::Bw => u.iters / u64::from(u.tx_depth.max(1)) + 1,
    } + 20;
    // 1 MB/s worst case plus start-up.
    60.0 + bytes / 1e6 + round_trips as f64 * 2.0 * f64::from(delay_ms) / 1e3
}

/// The plans of guests A (serves) and B (measures).
pub fn plans(p: &Params, bins: &Bins) -> Vec<PlanGuest> {
    let mut a = Vec::new();
    let mut b = Vec::new();
    if p.delay_ms > 0 {
        a.push(delay_step(p.delay_ms));
        b.push(delay_step(p.delay_ms));
    }
    let mut server = Step::new(OUR_SERVER, &[]);
    server.argv = Invocation::server(&bins.server)
        .args([
            "--serve",
            "--json",
            "--listen",
            &format!("0.0.0.0:{OUR_PORT}"),
        ])
        .argv();
    server.background = true;
    server.create_file_when_started = Some(SERVER_UP.into());
    // Until the measurements are done: derived from their deadlines (crate::deadline).
    server.stop_when_file = Some(ALL_DONE.into());
    server.allow_failure = true;
    a.push(server);
    if p.flood_secs > 0.0 {
        // First: its CPU is read before and after, while nothing else runs in the guest.
        let (fa, fb) = super::flood::steps(bins, SERVER_IP, p.flood_secs, ALL_DONE);
        a.extend(fa);
        b.extend(fb);
    }
    let mut sink = Step::new(
        TCP_SINK,
        &[
            bins.xtask.as_str(),
            "bench-tcp",
            "--listen",
            &format!("0.0.0.0:{TCP_PORT}"),
            "--timeout",
            &format!("{}", p.tcp_secs + 60.0),
        ],
    );
    sink.create_file_when_started = Some(TCP_UP.into());
    sink.timeout_s = p.tcp_secs + 90.0;
    sink.allow_failure = true;
    a.push(sink);
    let mut source = Step::new(
        TCP_SOURCE,
        &[
            bins.xtask.as_str(),
            "bench-tcp",
            "--connect",
            &format!("{SERVER_IP}:{TCP_PORT}"),
            "--secs",
            &format!("{}", p.tcp_secs),
        ],
    );
    source.wait_for_file = Some(TCP_UP.into());
    source.retries = 20;
    source.retry_delay_s = 0.5;
    source.timeout_s = p.tcp_secs + 60.0;
    source.allow_failure = true;
    b.push(source);

    for (k, u) in units(p).iter().enumerate() {
        let mut c = Step::new(u.step_name(), &[]);
        c.timeout_s = run_timeout(u, p.delay_ms);
        c.allow_failure = true;
        c.retry_delay_s = 0.5;
        match u.tool {
            Tool::Perftest => {
                let marker = format!("perftest-{k}-up");
                let mut s = Step::new(format!("perftest server {k}"), &[]);
                s.argv = perftest_argv(u, None);
                s.create_file_when_started = Some(marker.clone());
                // Waits for its client: the client's retries plus the run.
                s.timeout_s = run_timeout(u, p.delay_ms) + 30.0;
                s.allow_failure = true;
                a.push(s);
                c.argv = perftest_argv(u, Some(SERVER_IP));
                c.wait_for_file = Some(marker);
                // The marker says the perftest server started, not that it listens yet.
                c.retries = 20;
            }
            Tool::Ours => {
                c.argv = ours_argv(u, bins);
                c.wait_for_file = Some(SERVER_UP.into());
                // Only the first run can find the server not listening yet.
                c.retries = if k < 2 { 10 } else { 0 };
            }
        }
        b.push(c);
    }
    if let Some(setting) = &p.mesh {
        // Last: its servers live until the session ends (an idle one still wakes every
        // 20 ms), so no other measurement runs beside them.
        let mut per_rank = super::mesh::steps(bins, setting, ALL_DONE).into_iter();
        a.extend(per_rank.next().unwrap_or_default());
        b.extend(per_rank.next().unwrap_or_default());
    }
    let mut done = Step::new("bench done", &["true"]);
    done.create_file_when_done = Some(ALL_DONE.into());
    b.push(done);

    let guest = |name: &str, ip: &str, steps| PlanGuest {
        name: name.into(),
        plan: Plan {
            node: Node::guest(ip, true),
            steps,
            sync_dir: GUEST_SYNC.into(),
        },
        mem_mb: 1024,
    };
    vec![guest("A", SERVER_IP, a), guest("B", CLIENT_IP, b)]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> Params {
        Params {
            sizes: vec![2, 65536],
            reps: 2,
            lat_iters: 500,
            bw_iters: 1000,
            tx_depth: 128,
            tcp_secs: 3.0,
            setup_reps: 1,
            delay_ms: 0,
            flood_secs: 0.0,
            mesh: None,
        }
    }

    /// Issue 23, item 3: the flood comes first in both guests (A reads the flooded server's
    /// CPU before and after it, then serves the TCP stream), so neither waits on the other.
    #[test]
    fn the_flood_runs_first_in_both_guests() {
        let bins = crate::e2e::Bins::for_tests();
        let g = plans(
            &Params {
                flood_secs: 10.0,
                ..params()
            },
            &bins,
        );
        let names =
            |k: usize| -> Vec<&str> { g[k].plan.steps.iter().map(|s| s.name.as_str()).collect() };
        assert_eq!(
            names(0)[..7],
            [
                "rdma-server",
                "flood server",
                "bare server",
                "flood cpu before",
                "flood cpu after",
                "bare cpu before",
                "bare cpu after",
            ]
        );
        assert_eq!(names(0)[7], TCP_SINK);
        assert_eq!(
            names(1)[..4],
            ["flood", "flood client", "bare flood", TCP_SOURCE]
        );
        assert!(plans(&params(), &bins)[1].plan.steps[0].name == TCP_SOURCE);
    }

    /// Issue 24: the mesh runs in both guests after everything else (its servers stay until
    /// the end), and the deadlines of the whole session still derive (no wait in a circle,
    /// every marker made).
    #[test]
    fn the_mesh_runs_last_in_both_guests() {
        let bins = crate::e2e::Bins::for_tests();
        let setting = super::super::mesh::figures::Setting {
            every: std::time::Duration::from_secs(1),
            cycles: 30,
            nodes: vec![SERVER_IP.into(), CLIENT_IP.into()],
            no_reuse: false,
        };
        let g = plans(
            &Params {
                flood_secs: 10.0,
                mesh: Some(setting),
                ..params()
            },
            &bins,
        );
        let names =
            |k: usize| -> Vec<&str> { g[k].plan.steps.iter().map(|s| s.name.as_str()).collect() };
        let mesh = |r: usize| {
            [
                format!("mesh server r{r}"),
                format!("mesh cpu before r{r}"),
                format!("mesh prober r{r}"),
                format!("mesh cpu after r{r}"),
            ]
        };
        let (a, b) = (names(0), names(1));
        assert_eq!(a[a.len() - 4..], mesh(0));
        assert_eq!(b[b.len() - 5..b.len() - 1], mesh(1));
        assert_eq!(b.last(), Some(&"bench done"));
        assert!(a[..a.len() - 4].iter().all(|n| !n.starts_with("mesh")));
        let mut plans: Vec<Plan> = g.into_iter().map(|p| p.plan).collect();
        crate::deadline::derive(&mut plans).unwrap();
        let prober = plans[1]
            .steps
            .iter()
            .find(|s| s.name == "mesh prober r1")
            .unwrap();
        // It waits at least as long as guest A may take to get its server read.
        assert!(prober.wait_timeout().as_secs_f64() > 10.0, "{prober:?}");
    }

    /// Issue 23, item 12: `--delay-ms` delays both guests' frames before anything runs, and
    /// the runs' deadlines grow with the round trips it adds.
    #[test]
    fn a_delayed_bench_delays_both_guests_first() {
        let bins = crate::e2e::Bins::for_tests();
        let plain = plans(&params(), &bins);
        let delayed = plans(
            &Params {
                delay_ms: 5,
                ..params()
            },
            &bins,
        );
        for (p, d) in plain.iter().zip(&delayed) {
            assert!(
                p.plan
                    .steps
                    .iter()
                    .all(|s| !s.argv.contains(&"netem".to_owned()))
            );
            assert_eq!(
                d.plan.steps[0].argv,
                [
                    "tc", "qdisc", "replace", "dev", "eth0", "root", "netem", "delay", "5ms"
                ]
            );
            assert_eq!(d.plan.steps.len(), p.plan.steps.len() + 1);
        }
        let lat = &units(&params())[0];
        assert!(run_timeout(lat, 5) > run_timeout(lat, 0));
    }

    #[test]
    fn iterations_shrink_with_size_within_bounds() {
        assert_eq!(lat_iters(2, 500), 500);
        assert_eq!(lat_iters(1 << 20, 500), 10);
        assert_eq!(bw_iters(65536, 1000), 512);
        assert_eq!(bw_iters(8 << 20, 1000), 10);
    }

    #[test]
    fn units_alternate_and_cover_every_size() {
        let u = units(&params());
        // 1 setup pair + 2 sizes x 2 modes x 2 reps x 2 tools.
        assert_eq!(u.len(), 2 + 16);
        assert!(u[0].setup && u[1].setup);
        let runs: Vec<&Unit> = u.iter().filter(|x| !x.setup).collect();
        assert_eq!(runs[0].tool, Tool::Ours);
        assert_eq!(runs[2].tool, Tool::Perftest, "rep 1 starts with perftest");
        for &bytes in &[2, 65536] {
            for mode in [Mode::Lat, Mode::Bw] {
                for tool in [Tool::Ours, Tool::Perftest] {
                    assert_eq!(
                        runs.iter()
                            .filter(|x| x.bytes == bytes && x.mode == mode && x.tool == tool)
                            .count(),
                        2
                    );
                }
            }
        }
        let names: std::collections::HashSet<String> = u.iter().map(Unit::step_name).collect();
        assert_eq!(names.len(), u.len(), "step names are unique");
    }

    #[test]
    fn same_parameters_for_both_tools_and_no_flags_on_our_server() {
        let bins = Bins::for_tests();
        let g = plans(&params(), &bins);
        let (a, b) = (&g[0].plan.steps, &g[1].plan.steps);
        let server = &a[0];
        assert!(server.argv.iter().all(|x| !x.contains("bench")));
        let perf: Vec<&Step> = b
            .iter()
            .filter(|s| s.argv.first().is_some_and(|p| p.starts_with("ib_write_")))
            .collect();
        let perf_servers: Vec<&Step> = a
            .iter()
            .filter(|s| s.name.starts_with("perftest server"))
            .collect();
        assert_eq!(perf.len(), perf_servers.len());
        for (c, s) in perf.iter().zip(&perf_servers) {
            assert_eq!(&c.argv[..c.argv.len() - 1], &s.argv[..]);
            assert_eq!(c.wait_for_file, s.create_file_when_started);
        }
        let ours = b
            .iter()
            .find(|s| s.name == "run rdma-client bw 65536 r0")
            .unwrap();
        let perf = b
            .iter()
            .find(|s| s.name == "run perftest bw 65536 r0")
            .unwrap();
        let after = |v: &[String], f: &str| {
            v.iter()
                .position(|x| x == f)
                .and_then(|i| v.get(i + 1))
                .cloned()
        };
        assert_eq!(after(&ours.argv, "--size"), after(&perf.argv, "-s"));
        assert_eq!(after(&ours.argv, "--iters"), after(&perf.argv, "-n"));
        assert_eq!(after(&ours.argv, "--tx-depth"), after(&perf.argv, "-t"));
        assert_eq!(
            b.last().unwrap().create_file_when_done.as_deref(),
            Some(ALL_DONE)
        );
    }
}
