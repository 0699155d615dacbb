//! The whole runner, driven by a fake prober in memory: its schedule, its states, its skips,
//! its stop, its metrics.

use super::*;
use crate::exit::ClientError;
use crate::mesh::cause::Stage;
use crate::mesh::http::{Limits, MetricsServer};
use crate::mesh::metrics::Path;
use crate::mesh::rtt::Rtt;
use crate::mesh::state::PairState;
use crate::mesh::topology::Tors;
use rdma_core_rs::CompletionClock;
use std::collections::BTreeSet;
use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;

mod stamps;
mod stop;

/// What Soft-RoCE answers when asked for its completion clock.
const RXE: CompletionClock = CompletionClock::NoClock {
    hca_core_clock_khz: 0,
    timestamp_mask: 0,
};

type Behaviour<'a> = dyn Fn(&str, &Job) -> Result<Probed, ProbeFailure> + Sync + 'a;

/// A prober that does what `behave` says and remembers each call: peer, interval, when.
struct Fake<'a> {
    behave: &'a Behaviour<'a>,
    calls: Mutex<Vec<(String, u64, Instant)>>,
}

impl<'a> Fake<'a> {
    fn new(behave: &'a Behaviour<'a>) -> Self {
        Fake {
            behave,
            calls: Mutex::new(Vec::new()),
        }
    }

    fn calls(&self) -> Vec<(String, u64, Instant)> {
        self.calls.lock().unwrap().clone()
    }
}

impl Prober for Fake<'_> {
    fn probe(&self, peer: &str, job: &Job) -> Result<Probed, ProbeFailure> {
        self.calls
            .lock()
            .unwrap()
            .push((peer.to_owned(), job.interval, Instant::now()));
        (self.behave)(peer, job)
    }
}

fn good(_: &str, _: &Job) -> Result<Probed, ProbeFailure> {
    Ok(Probed {
        verified: true,
        rtt: Rtt::wall(Duration::from_micros(40)),
        bw_mbs: None,
        stalled: false,
        reused: false,
        stamped: false,
        write: Duration::ZERO,
        lat_us: None,
        waited: Duration::ZERO,
    })
}

fn refused() -> ProbeFailure {
    ProbeFailure {
        stage: Stage::Connect,
        error: Report::new(ClientError::Connect {
            addr: "10.0.0.2:7471".into(),
            port: 7471,
            source: std::io::ErrorKind::ConnectionRefused.into(),
        }),
    }
}

fn world(n: usize, rank: usize) -> World {
    World {
        hosts: (1..=n).map(|i| format!("node{i}")).collect(),
        rank,
    }
}

fn config(every_ms: u64, fan_out: usize) -> MeshConfig {
    let mut c = MeshConfig {
        every: Duration::from_millis(every_ms),
        fan_out,
        ..MeshConfig::default()
    };
    c.state.down_after = 3;
    c.state.up_after = 2;
    c
}

/// Runs to the end of `cycles`; the events as a reader parses them back.
fn run_mesh(
    world: &World,
    config: MeshConfig,
    cycles: u64,
    prober: &Fake<'_>,
    sinks: &Sinks<'_>,
) -> (Summary, Vec<Event<'static>>) {
    run_rails(world, config, cycles, prober, sinks, &["fake0".to_owned()])
}

/// [`run_mesh`] from several rails.
fn run_rails(
    world: &World,
    config: MeshConfig,
    cycles: u64,
    prober: &Fake<'_>,
    sinks: &Sinks<'_>,
    devices: &[String],
) -> (Summary, Vec<Event<'static>>) {
    let plan = Plan {
        world,
        tors: None,
        config,
        bw_every: 0,
        cycles: Some(cycles),
        devices,
        clocks: &vec![Ok(RXE); devices.len()],
    };
    let mut events = Vec::new();
    let stop = rdma_app::wake::Stop::new().unwrap();
    let summary = run(&plan, prober, sinks, &stop, &mut |e| {
        let line = serde_json::to_string(e).unwrap();
        events.push(rdma_proto::events::parse::<Event<'static>>(&line).unwrap());
    })
    .unwrap();
    (summary, events)
}

fn transitions(events: &[Event<'_>]) -> Vec<(PairState, PairState, Option<Cause>)> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::MeshState {
                from, to, cause, ..
            } => Some((*from, *to, *cause)),
            _ => None,
        })
        .collect()
}

#[test]
fn with_a_topology_a_node_probes_its_whole_tor_and_samples_the_other() {
    // node1-3 under torA, node4-6 under torB; 2 peers an interval: 1 within, 1 across.
    let leaves = crate::mesh::topology::parse(
        "SwitchName=torA Nodes=node[1-3]\nSwitchName=torB Nodes=node[4-6]",
    )
    .unwrap();
    let w = world(6, 0);
    let tors = Tors::place(&w.hosts, &leaves).unwrap();
    let fake = Fake::new(&good);
    let devices = ["fake0".to_owned()];
    let plan = Plan {
        world: &w,
        tors: Some(&tors),
        config: config(40, 2),
        bw_every: 0,
        cycles: Some(1),
        devices: &devices,
        clocks: &[Ok(RXE)],
    };
    let stop = rdma_app::wake::Stop::new().unwrap();
    let mut events = Vec::new();
    let summary = run(&plan, &fake, &Sinks::default(), &stop, &mut |e| {
        let line = serde_json::to_string(e).unwrap();
        events.push(rdma_proto::events::parse::<Event<'static>>(&line).unwrap());
    })
    .unwrap();
    // A cycle: 2 intervals (two ToR peers at 1 an interval), 2 probes each.
    assert_eq!((summary.intervals, summary.probes), (2, 4));
    // It says where it sits.
    match events.first() {
        Some(Event::MeshStarted { tor, tors, .. }) => {
            assert_eq!((tor.as_deref(), tors), (Some("torA"), &Some(2)));
        }
        other => panic!("{other:?}"),
    }
    let calls: Vec<(String, u64)> = fake.calls().into_iter().map(|(p, t, _)| (p, t)).collect();
    let within: BTreeSet<&str> = calls
        .iter()
        .map(|(p, _)| p.as_str())
        .filter(|p| ["node2", "node3"].contains(p))
        .collect();
    assert_eq!(within, BTreeSet::from(["node2", "node3"]));
    let across = calls
        .iter()
        .filter(|(p, _)| ["node4", "node5", "node6"].contains(&p.as_str()))
        .count();
    assert_eq!(across, 2, "{calls:?}");
}

#[test]
fn every_ordered_pair_is_probed_within_a_cycle() {
    // 5 nodes, 2 peers an interval: a cycle is 2 intervals, and each node covers its 4 peers.
    for rank in 0..5 {
        let w = world(5, rank);
        let fake = Fake::new(&good);
        let (summary, events) = run_mesh(&w, config(40, 2), 1, &fake, &Sinks::default());
        let peers: BTreeSet<String> = fake.calls().into_iter().map(|(p, _, _)| p).collect();
        let want: BTreeSet<String> = w
            .hosts
            .iter()
            .filter(|h| **h != w.hosts[rank])
            .cloned()
            .collect();
        assert_eq!(peers, want, "rank {rank}");
        assert_eq!(
            (summary.intervals, summary.probes, summary.skipped),
            (2, 4, 0)
        );
        assert!(summary.by_cycles);
        assert!(matches!(
            events.first(),
            Some(Event::MeshStarted {
                cycle: 2,
                fan_out: 2,
                timestamps: false,
                ..
            })
        ));
        assert!(matches!(
            events.last(),
            Some(Event::MeshStopped { probes: 4, .. })
        ));
    }
}

#[test]
fn a_pair_goes_down_only_after_down_after_failures_and_up_after_up_after() {
    // Intervals 2..=5 fail (4 in a row), the rest succeed.
    let behave = |p: &str, j: &Job| {
        if (2..=5).contains(&j.interval) {
            Err(refused())
        } else {
            good(p, j)
        }
    };
    let fake = Fake::new(&behave);
    let path = Path {
        peer: "node2".into(),
        peer_tor: "all".into(),
        device: "fake0".into(),
        rail: "0".into(),
    };
    let metrics = MeshMetrics::new("me", "all", &[path]).unwrap();
    let sinks = Sinks {
        metrics: Some(&metrics),
        textfile: None,
    };
    let (summary, events) = run_mesh(&world(2, 0), config(30, 1), 8, &fake, &sinks);
    assert_eq!((summary.probes, summary.failed), (8, 4));
    assert_eq!(
        transitions(&events),
        vec![
            (PairState::Unknown, PairState::Up, None),
            (PairState::Up, PairState::Down, Some(Cause::Host)),
            (PairState::Down, PairState::Up, None),
        ]
    );
    // The state each probe reported: down at the third failure (interval 4), up at the second
    // good probe after (interval 7).
    let states: Vec<(u64, PairState)> = events
        .iter()
        .filter_map(|e| match e {
            Event::MeshProbe {
                interval, state, ..
            } => Some((*interval, *state)),
            _ => None,
        })
        .collect();
    use PairState::{Down, Unknown, Up};
    let want = [Unknown, Up, Up, Up, Down, Down, Down, Up];
    assert_eq!(
        states,
        want.iter()
            .enumerate()
            .map(|(i, s)| (i as u64, *s))
            .collect::<Vec<_>>()
    );
    // Each transition counted once (unknown → up, up → down, down → up), on the path's own
    // series, which it keeps, back up for less than `KEEP_RECOVERED`.
    let text = metrics.encode(crate::mesh::metrics::Format::Text);
    let path = r#"tor="all",peer="node2",link="me~node2",peer_tor="all",scope="tor",device="fake0",rail="0""#;
    for line in [
        format!("rdma_mesh_path_state_changes_total{{{path}}} 3"),
        format!(r#"rdma_mesh_path_state{{{path},state="up"}} 1"#),
    ] {
        assert!(text.lines().any(|l| l == line), "no {line:?} in\n{text}");
    }
}

/// A failing probe that takes its whole deadline (a path that drops RoCE: the write waits out
/// its retries) never costs the next probe its turn: with `--down-after 3` the path is down at
/// its third failed probe, the third interval of the fault, with nothing skipped, whatever the
/// jitter (it was down after 4.5 to 7 intervals when a probe's deadline was a whole interval).
#[test]
fn a_failure_that_takes_its_whole_deadline_costs_the_next_probe_nothing() {
    let behave = |p: &str, j: &Job| {
        if j.interval >= 1 {
            std::thread::sleep(j.deadline.saturating_duration_since(Instant::now()));
            Err(refused())
        } else {
            good(p, j)
        }
    };
    let fake = Fake::new(&behave);
    for jitter in [0.0, 0.3] {
        let mut c = config(40, 1);
        c.jitter = jitter;
        let (summary, events) = run_mesh(&world(2, 0), c, 6, &fake, &Sinks::default());
        assert_eq!(summary.skipped, 0, "jitter {jitter}: a probe lost its turn");
        assert_eq!((summary.probes, summary.failed), (6, 5), "jitter {jitter}");
        let down_at = events.iter().find_map(|e| match e {
            Event::MeshProbe {
                interval,
                state: PairState::Down,
                ..
            } => Some(*interval),
            _ => None,
        });
        assert_eq!(
            down_at,
            Some(3),
            "jitter {jitter}: down at the third failure"
        );
    }
}

#[test]
fn one_lost_probe_does_not_flap_the_pair_and_a_bad_verdict_is_corrupt() {
    let behave = |p: &str, j: &Job| match j.interval {
        3 => Err(refused()),
        5 => Ok(Probed {
            verified: false,
            ..good(p, j)?
        }),
        _ => good(p, j),
    };
    let fake = Fake::new(&behave);
    let (summary, events) = run_mesh(&world(2, 1), config(30, 1), 8, &fake, &Sinks::default());
    assert_eq!(
        transitions(&events),
        vec![(PairState::Unknown, PairState::Up, None)]
    );
    assert_eq!(summary.failed, 2);
    let causes: Vec<(u64, Cause)> = events
        .iter()
        .filter_map(|e| match e {
            Event::MeshProbe {
                interval,
                cause: Some(c),
                ..
            } => Some((*interval, *c)),
            _ => None,
        })
        .collect();
    assert_eq!(causes, vec![(3, Cause::Host), (5, Cause::Corrupt)]);
}

#[test]
fn a_stuck_probe_delays_no_other_peer_and_its_next_ones_are_skipped() {
    // node2's probes hang for 6 intervals (past their deadline); node3's must still go out on
    // time, every interval.
    let every = Duration::from_millis(50);
    let behave = |p: &str, j: &Job| {
        if p == "node2" {
            std::thread::sleep(every * 6);
        }
        good(p, j)
    };
    let fake = Fake::new(&behave);
    let started = Instant::now();
    let (summary, events) = run_mesh(&world(3, 0), config(50, 2), 8, &fake, &Sinks::default());
    let calls = fake.calls();
    let node3: Vec<Instant> = calls
        .iter()
        .filter(|c| c.0 == "node3")
        .map(|c| c.2)
        .collect();
    assert_eq!(node3.len(), 8, "node3 probed in every interval");
    for (t, at) in node3.iter().enumerate() {
        // Interval t fires within its own interval (phase + jitter < every), plus slack for a
        // loaded test machine; never a whole stuck probe (300 ms) late.
        let due = every * u32::try_from(t).unwrap();
        let late = at.duration_since(started).saturating_sub(due);
        assert!(
            late < every + Duration::from_millis(60),
            "interval {t}: {late:?} late"
        );
    }
    let node2 = calls.iter().filter(|c| c.0 == "node2").count();
    assert!(node2 <= 3, "node2 probed {node2} times while stuck");
    assert_eq!(summary.skipped, 8 - node2 as u64);
    let skipped = events
        .iter()
        .filter(|e| {
            matches!(e, Event::MeshProbe { outcome: ProbeOutcome::Skipped, peer, .. } if peer == "node2")
        })
        .count();
    assert_eq!(skipped as u64, summary.skipped);
}

#[test]
fn the_metrics_endpoint_serves_the_probe_counts() {
    let w = world(3, 0);
    let paths: Vec<Path> = ["node2", "node3"]
        .iter()
        .map(|p| Path {
            peer: (*p).to_owned(),
            peer_tor: "all".into(),
            device: "fake0".into(),
            rail: "0".into(),
        })
        .collect();
    let metrics = Arc::new(MeshMetrics::new("me", "all", &paths).unwrap());
    let server = MetricsServer::bind(
        "127.0.0.1:0".parse::<SocketAddr>().unwrap(),
        metrics.clone(),
        Limits::default(),
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let textfile = Textfile::new(dir.path().join("rdma_mesh.prom")).unwrap();
    let behave = |p: &str, j: &Job| {
        if p == "node3" {
            Err(refused())
        } else {
            good(p, j)
        }
    };
    let fake = Fake::new(&behave);
    let sinks = Sinks {
        metrics: Some(&metrics),
        textfile: Some(&textfile),
    };
    // 3 cycles of 1 interval: each peer probed 3 times.
    let (summary, _) = run_mesh(&w, config(30, 2), 3, &fake, &sinks);
    assert_eq!(summary.probes, 6);
    let mut s = TcpStream::connect(server.local_addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).unwrap();
    for line in [
        r#"rdma_mesh_tor_probes_total{tor="all",peer_tor="all",scope="tor",device="fake0",rail="0",outcome="ok"} 3"#,
        r#"rdma_mesh_tor_probes_total{tor="all",peer_tor="all",scope="tor",device="fake0",rail="0",outcome="failed"} 3"#,
        r#"rdma_mesh_probes_total{tor="all",peer="node3",link="me~node3",peer_tor="all",scope="tor",device="fake0",rail="0",result="host"} 3"#,
        r#"rdma_mesh_path_up{tor="all",peer="node3",link="me~node3",peer_tor="all",scope="tor",device="fake0",rail="0"} 0"#,
        r#"rdma_mesh_paths{state="up"} 1"#,
        r#"rdma_mesh_timestamps_supported{device="fake0"} 0"#,
    ] {
        assert!(body.contains(line), "{line} not in:\n{body}");
    }
    let file = std::fs::read_to_string(textfile.path()).unwrap();
    assert!(file.contains(r#"result="host"} 3"#), "{file}");
    server.stop();
}

#[test]
fn a_slow_round_trip_is_slow_and_the_probers_own_fault_moves_nothing() {
    // Six good probes make the baseline (40 us); interval 6 takes 10 ms; interval 7 fails by a
    // bug of the prober's, which says nothing of the pair.
    let behave = |p: &str, j: &Job| match j.interval {
        6 => Ok(Probed {
            rtt: Rtt::wall(Duration::from_millis(10)),
            ..good(p, j)?
        }),
        7 => Err(ProbeFailure {
            stage: Stage::Transfer,
            error: color_eyre::eyre::eyre!("a bug"),
        }),
        _ => good(p, j),
    };
    let fake = Fake::new(&behave);
    let (summary, events) = run_mesh(&world(2, 0), config(30, 1), 8, &fake, &Sinks::default());
    let probes: Vec<(u64, ProbeOutcome, Option<Cause>, PairState)> = events
        .iter()
        .filter_map(|e| match e {
            Event::MeshProbe {
                interval,
                outcome,
                cause,
                state,
                ..
            } => Some((*interval, *outcome, *cause, *state)),
            _ => None,
        })
        .collect();
    assert_eq!(
        probes[6..],
        [
            (6, ProbeOutcome::Failed, Some(Cause::Slow), PairState::Up),
            (7, ProbeOutcome::Error, None, PairState::Up),
        ]
    );
    assert_eq!((summary.probes, summary.failed), (7, 1));
    assert_eq!(
        transitions(&events),
        vec![(PairState::Unknown, PairState::Up, None)]
    );
}

#[test]
fn after_a_stall_only_the_interval_before_the_current_one_is_still_due() {
    let every = Duration::from_millis(100);
    let ms = Duration::from_millis;
    assert_eq!(current(ms(0), every), 0);
    assert_eq!(current(ms(150), every), 0);
    assert_eq!(current(ms(250), every), 1);
    // Ten intervals stalled: the scheduler resumes at interval 9, not 0.
    assert_eq!(current(ms(1_050), every), 9);
}

#[test]
fn each_rail_is_a_path_of_its_own() {
    // Rail 1 to node2 fails; rail 0 to node2 and both rails to node3 work.
    let behave = |p: &str, j: &Job| {
        if p == "node2" && j.rail == 1 {
            Err(refused())
        } else {
            good(p, j)
        }
    };
    let fake = Fake::new(&behave);
    let devices = ["rxe0".to_owned(), "rxe1".to_owned()];
    let w = world(3, 0);
    let (summary, events) = run_rails(&w, config(30, 2), 4, &fake, &Sinks::default(), &devices);
    // 4 intervals x 2 peers x 2 rails.
    assert_eq!((summary.probes, summary.failed), (16, 4));
    let mut downs = Vec::new();
    for e in &events {
        match e {
            Event::MeshProbe { device, rail, .. } => assert_eq!(device, &devices[*rail]),
            Event::MeshState {
                peer,
                rail,
                device,
                to: PairState::Down,
                ..
            } => downs.push((peer.to_string(), *rail, device.to_string())),
            Event::MeshStarted { device, .. } => assert_eq!(device, "rxe0,rxe1"),
            _ => {}
        }
    }
    assert_eq!(downs, [("node2".to_owned(), 1, "rxe1".to_owned())]);
}
