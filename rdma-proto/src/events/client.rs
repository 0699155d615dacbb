//! `rdma-client --json`: one event per line.

use super::bench::{BwRow, LatRow};
use super::fabric::{PairResult, Report};
use super::mesh::{Cause, PairState, ProbeOutcome};
use crate::exit::Exit;
use crate::wire::Notify;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;

/// One `--json` event of the client.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event<'a> {
    /// TCP connected and the server's banner accepted.
    Connected {
        server: Cow<'a, str>,
        program: Cow<'a, str>,
        program_version: Cow<'a, str>,
        device: Cow<'a, str>,
        port: u8,
        gid_index: u32,
        gid: Cow<'a, str>,
        /// Why this device, port and GID, when they were chosen by the route to the server
        /// (absent when the flags chose them).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        chosen: Option<Cow<'a, str>>,
    },
    /// The server answered `busy` (its `--max-clients` or `--max-per-ip` are taken, for now):
    /// with `--wait-for-server` the client connects again after `retry_in_ms`, until then.
    Busy {
        server: Cow<'a, str>,
        /// How many times it has answered `busy` so far.
        attempt: u32,
        retry_in_ms: u64,
    },
    /// Our queue pair is in RTS, connected to the server's.
    QpReady {
        local_qpn: u32,
        remote_qpn: u32,
        path_mtu: u32,
        remote_addr: u64,
        rkey: u32,
        /// The server's buffer (the accept's `buf_len`).
        buf_len: u64,
        /// How the queue pair was connected (absent: by the handshake's QP numbers).
        #[serde(default, skip_serializing_if = "super::QpVia::is_handshake")]
        via: super::QpVia,
    },
    /// The notify mode was chosen for the device, not as the default says (iWARP has no
    /// RDMA Write with immediate: `tcp`).
    NotifyChosen { notify: Notify, why: Cow<'a, str> },
    /// Our RDMA Write completed successfully on our side, or (with immediate) the server
    /// answered before our completion came, which a lost ACK causes: the verdict that follows
    /// says what landed.
    Written {
        length: u64,
        notify: Notify,
        crc32c: u32,
        /// From posting the write to its completion (or to the server's answer).
        micros: u64,
    },
    /// The server's verdict.
    Verified {
        verified: bool,
        length: u64,
        crc32c: u32,
        text: Cow<'a, str>,
        truncated: bool,
    },
    /// `bench`: connected and ready to post, `ready_us` after the run started.
    BenchSetup { ready_us: f64 },
    /// `bench --mode lat`: one size's figures (perftest's columns).
    BenchLat(LatRow),
    /// `bench --mode bw`: one size's figures (perftest's columns).
    BenchBw(BwRow),
    /// `fabric --plan`: one directed write of the schedule.
    FabricPlan {
        round: usize,
        rounds: usize,
        writer: usize,
        writer_host: Cow<'a, str>,
        target: usize,
        target_host: Cow<'a, str>,
    },
    /// `fabric`: one pair's result (read back by `fabric report`).
    FabricPair(Cow<'a, PairResult>),
    /// `fabric report`: the merged matrix, bad pairs and suspect nodes.
    FabricReport(Cow<'a, Report>),
    /// `mesh`: the prober started (once). `timestamps`: whether round trips are split into
    /// network time and host delay by the devices' completion timestamps (where a device of
    /// this node has a clock: probe by probe where the peer's device stamps too);
    /// `timestamps_why` says what each device answered when asked for its completion clock,
    /// and what follows for its round trips.
    MeshStarted {
        /// This node's name, as in `hosts`.
        node: Cow<'a, str>,
        rank: usize,
        /// Every node of the mesh, in rank order.
        hosts: Vec<Cow<'a, str>>,
        /// Peers probed per interval (and probers per server per interval).
        fan_out: usize,
        every_ms: u64,
        /// Intervals in which every ordered pair is probed at least once.
        cycle: u64,
        /// The local RDMA device the probes leave from; with `--rails`, each rail's, in rail
        /// order, separated by commas.
        device: Cow<'a, str>,
        timestamps: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timestamps_why: Option<Cow<'a, str>>,
        /// `--mesh-cycles`: the run ends by itself after this many cycles (absent: at a signal).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cycles: Option<u64>,
        /// With `--topology`: this node's ToR (its leaf switch).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tor: Option<Cow<'a, str>>,
        /// With `--topology`: how many ToRs the mesh's nodes are under.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tors: Option<usize>,
    },
    /// `mesh`: one scheduled probe of one peer, in interval `interval`.
    MeshProbe {
        interval: u64,
        peer: Cow<'a, str>,
        peer_rank: usize,
        device: Cow<'a, str>,
        rail: usize,
        outcome: ProbeOutcome,
        /// Why it failed (`failed`; `slow` for a good probe judged slow).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cause: Option<Cause>,
        /// The round trip, on this host's monotonic clock.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        wall_ns: Option<u64>,
        /// The network's part, where the devices give completion timestamps.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        network_ns: Option<u64>,
        /// `wall - network`, where the devices give completion timestamps.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        host_delay_ns: Option<u64>,
        /// A bandwidth sample (MB/s, MB = 2^20 bytes), when this probe took one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        bw_mbs: Option<f64>,
        /// The pair's state after this probe.
        state: PairState,
        /// Whether the probe opened no session: its write, and its lat exchange where it had
        /// one, went on sessions kept from the path's last probe (rounds: no new connection,
        /// handshake or queue pairs).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        reused: bool,
        /// Whether its lat exchange ended with the stamped exchange (a write with immediate
        /// each way; feature `stamped`): where both devices stamped it, `network_ns` and
        /// `host_delay_ns` are its split.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        stamped: bool,
        /// What went wrong (`failed`, `skipped`, `error`), with advice.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<Cow<'a, str>>,
    },
    /// `mesh`: a pair's state changed (after a run of probes).
    MeshState {
        peer: Cow<'a, str>,
        peer_rank: usize,
        device: Cow<'a, str>,
        rail: usize,
        from: PairState,
        to: PairState,
        /// The last bad probe's cause; absent going up.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cause: Option<Cause>,
    },
    /// `mesh`: the prober stopped (`why`: `signal` or `cycles`), with its counts.
    MeshStopped {
        why: Cow<'a, str>,
        intervals: u64,
        probes: u64,
        failed: u64,
        skipped: u64,
    },
    /// The run failed; `exit_code` is the process exit status.
    Error {
        kind: Exit,
        exit_code: u8,
        message: Cow<'a, str>,
    },
}

/// The `type` tag of [`Event::FabricPair`].
pub const FABRIC_PAIR: &str = "fabric_pair";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_error_event_names_its_exit_and_reads_back() {
        let e = Event::Error {
            kind: Exit::Refused,
            exit_code: Exit::Refused.code(),
            message: "busy".into(),
        };
        let line = serde_json::to_string(&e).unwrap();
        assert_eq!(
            line,
            r#"{"type":"error","kind":"refused","exit_code":7,"message":"busy"}"#
        );
        assert_eq!(super::super::parse::<Event<'static>>(&line).unwrap(), e);
    }

    #[test]
    fn rows_and_records_are_flat_objects_with_their_tag() {
        let row = LatRow {
            schema: 1,
            bytes: 2,
            iterations: 3,
            t_min_us: 1.0,
            t_max_us: 2.0,
            t_typical_us: 1.5,
            t_avg_us: 1.5,
            t_stdev_us: 0.5,
            p99_us: 2.0,
            p999_us: 2.0,
        };
        let line = serde_json::to_string(&Event::BenchLat(row)).unwrap();
        assert!(
            line.starts_with(r#"{"type":"bench_lat","schema":1,"bytes":2,"#),
            "{line}"
        );
        assert_eq!(
            super::super::parse::<Event<'static>>(&line).unwrap(),
            Event::BenchLat(row)
        );
        let pair = PairResult {
            round: 0,
            world: 2,
            writer: 0,
            writer_host: "a".into(),
            target: 1,
            target_host: "b".into(),
            verified: false,
            error_kind: Some(Exit::Network),
            error: Some("x".into()),
            write_us: None,
            waited_ms: 0,
            lat_us: None,
            bw_mbs: None,
            retest: false,
            rail: None,
        };
        let line = serde_json::to_string(&Event::FabricPair(Cow::Borrowed(&pair))).unwrap();
        // A one-rail check's line is what it was before rails existed.
        assert!(!line.contains("rail"), "{line}");
        assert!(
            line.starts_with(r#"{"type":"fabric_pair","round":0,"#),
            "{line}"
        );
        assert!(line.contains(r#""error_kind":"network""#), "{line}");
        match super::super::parse::<Event<'static>>(&line).unwrap() {
            Event::FabricPair(p) => assert_eq!(*p, pair),
            other => panic!("{other:?}"),
        }
        let pair = PairResult {
            rail: Some(crate::events::fabric::RailOf {
                index: 1,
                rails: 2,
                device: Some("rxe1".into()),
                addr: Some("10.0.1.1".parse().unwrap()),
                target_addr: Some("10.0.1.2".parse().unwrap()),
            }),
            ..pair
        };
        let line = serde_json::to_string(&Event::FabricPair(Cow::Borrowed(&pair))).unwrap();
        assert!(
            line.contains(r#""rail":{"index":1,"rails":2,"device":"rxe1","addr":"10.0.1.1","target_addr":"10.0.1.2"}"#),
            "{line}"
        );
        match super::super::parse::<Event<'static>>(&line).unwrap() {
            Event::FabricPair(p) => assert_eq!(*p, pair),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_mesh_events_are_flat_and_read_back() {
        let probe = Event::MeshProbe {
            interval: 7,
            peer: "node2".into(),
            peer_rank: 1,
            device: "rxe0".into(),
            rail: 0,
            outcome: ProbeOutcome::Failed,
            cause: Some(Cause::Host),
            wall_ns: None,
            network_ns: None,
            host_delay_ns: None,
            bw_mbs: None,
            state: PairState::Down,
            reused: false,
            stamped: false,
            error: Some("connection refused".into()),
        };
        let line = serde_json::to_string(&probe).unwrap();
        assert_eq!(
            line,
            r#"{"type":"mesh_probe","interval":7,"peer":"node2","peer_rank":1,"device":"rxe0","rail":0,"outcome":"failed","cause":"host","state":"down","error":"connection refused"}"#
        );
        assert_eq!(super::super::parse::<Event<'static>>(&line).unwrap(), probe);
        let ok = Event::MeshProbe {
            interval: 7,
            peer: "node2".into(),
            peer_rank: 1,
            device: "rxe0".into(),
            rail: 0,
            outcome: ProbeOutcome::Ok,
            cause: None,
            wall_ns: Some(41_000),
            network_ns: None,
            host_delay_ns: None,
            bw_mbs: Some(1200.5),
            state: PairState::Up,
            reused: false,
            stamped: false,
            error: None,
        };
        let line = serde_json::to_string(&ok).unwrap();
        assert!(
            line.contains(r#""outcome":"ok","wall_ns":41000,"bw_mbs":1200.5,"state":"up"}"#),
            "{line}"
        );
        assert_eq!(super::super::parse::<Event<'static>>(&line).unwrap(), ok);
        // A stamped exchange split by both devices' stamps.
        let ok = Event::MeshProbe {
            interval: 7,
            peer: "node2".into(),
            peer_rank: 1,
            device: "mlx5_0".into(),
            rail: 0,
            outcome: ProbeOutcome::Ok,
            cause: None,
            wall_ns: Some(41_000),
            network_ns: Some(9_000),
            host_delay_ns: Some(32_000),
            bw_mbs: None,
            state: PairState::Up,
            reused: false,
            stamped: true,
            error: None,
        };
        let line = serde_json::to_string(&ok).unwrap();
        assert!(
            line.contains(r#""wall_ns":41000,"network_ns":9000,"host_delay_ns":32000,"state":"up","stamped":true}"#),
            "{line}"
        );
        assert_eq!(super::super::parse::<Event<'static>>(&line).unwrap(), ok);
        let state = Event::MeshState {
            peer: "node2".into(),
            peer_rank: 1,
            device: "rxe0".into(),
            rail: 0,
            from: PairState::Up,
            to: PairState::Down,
            cause: Some(Cause::Rdma),
        };
        let line = serde_json::to_string(&state).unwrap();
        assert_eq!(
            line,
            r#"{"type":"mesh_state","peer":"node2","peer_rank":1,"device":"rxe0","rail":0,"from":"up","to":"down","cause":"rdma"}"#
        );
        assert_eq!(super::super::parse::<Event<'static>>(&line).unwrap(), state);
        let started = Event::MeshStarted {
            node: "node1".into(),
            rank: 0,
            hosts: vec!["node1".into(), "node2".into()],
            fan_out: 1,
            every_ms: 10_000,
            cycle: 1,
            device: "rxe0".into(),
            timestamps: false,
            timestamps_why: Some("wall time".into()),
            cycles: None,
            tor: None,
            tors: None,
        };
        let line = serde_json::to_string(&started).unwrap();
        assert!(
            line.starts_with(
                r#"{"type":"mesh_started","node":"node1","rank":0,"hosts":["node1","node2"],"#
            ),
            "{line}"
        );
        assert!(
            line.contains(r#""timestamps":false,"timestamps_why":"wall time"}"#),
            "{line}"
        );
        assert_eq!(
            super::super::parse::<Event<'static>>(&line).unwrap(),
            started
        );
        let stopped = Event::MeshStopped {
            why: "cycles".into(),
            intervals: 4,
            probes: 8,
            failed: 1,
            skipped: 0,
        };
        let line = serde_json::to_string(&stopped).unwrap();
        assert_eq!(
            line,
            r#"{"type":"mesh_stopped","why":"cycles","intervals":4,"probes":8,"failed":1,"skipped":0}"#
        );
        assert_eq!(
            super::super::parse::<Event<'static>>(&line).unwrap(),
            stopped
        );
        for c in Cause::ALL {
            assert_eq!(serde_json::to_string(&c).unwrap(), format!("\"{c}\""));
        }
        for s in PairState::ALL {
            assert_eq!(serde_json::to_string(&s).unwrap(), format!("\"{s}\""));
        }
    }
}
