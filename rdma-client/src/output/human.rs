//! The client's human lines, each event's in one place, and the lines of the tables a person
//! reads around them (the bench's perftest columns): what its user reads without `--json`.
//! Text that came from the server or a peer's record reaches the terminal only through
//! [`rdma_proto::printable`] (or `{:?}`, for the verdict's text).

use super::{Detail, Event};
use crate::fabric::table;
use rdma_core_rs::LinkLayer;
use rdma_proto::bench::BenchMode;
use rdma_proto::events::QpVia;
use rdma_proto::events::bench::{BwRow, LatRow};
use rdma_proto::events::fabric::PairResult;
use rdma_proto::{Exit, Notify, printable};

/// The header of `ib_write_lat`'s table.
pub const LAT_HEADER: &str = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec]";
/// The header of `ib_write_bw`'s table.
pub const BW_HEADER: &str = " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   BW peak[Gb/sec]   BW average[Gb/sec]   MsgRate[Mpps]";
/// The rule above and below a bench table.
pub const RULE: &str =
    "---------------------------------------------------------------------------------------";

/// The line (or lines) that `event` shows the user, with `detail`.
#[must_use]
pub fn line(event: &Event<'_>, detail: &Detail<'_>) -> String {
    match event {
        Event::Connected {
            server,
            program,
            program_version,
            device,
            port,
            gid_index,
            gid,
            chosen,
        } => {
            let mut line = format!(
                "connected to {server} ({} {}); local {device} port {port} gid[{gid_index}] {gid}",
                printable(program),
                printable(program_version),
            );
            if let Detail::Bench {
                mode,
                sizes,
                duration,
                iters,
            } = detail
            {
                let per_size = match duration {
                    Some(d) => format!("{d:?} per size"),
                    None => format!("{iters} iterations per size"),
                };
                line = format!("{line}; bench {mode}, sizes {sizes:?}, {per_size}");
            }
            match chosen {
                Some(why) => format!("{line} (chosen: {why})"),
                None => line,
            }
        }
        Event::Busy {
            server,
            retry_in_ms,
            ..
        } => format!(
            "{server} is busy (all its client slots taken); trying again in {retry_in_ms} ms \
             (--wait-for-server)"
        ),
        Event::QpReady {
            local_qpn,
            remote_qpn,
            path_mtu,
            remote_addr,
            rkey,
            buf_len,
            via,
        } => {
            let head = format!(
                "QP {local_qpn:#08x} ready (RTS) -> server QP {remote_qpn:#08x}, path MTU {path_mtu}"
            );
            if let Detail::BenchQp { inline, cq_mode } = detail {
                return format!("{head}, inline up to {inline} B, completions by {cq_mode}");
            }
            let link = match (via, detail) {
                (QpVia::Cm, Detail::Link(local)) => {
                    format!(", {} via RDMA CM", local.ctx.transport())
                }
                (QpVia::Cm, _) => ", via RDMA CM".to_owned(),
                (QpVia::Handshake, Detail::Link(local))
                    if local.port.link_layer == LinkLayer::Ethernet =>
                {
                    ", RoCE".to_owned()
                }
                (QpVia::Handshake, _) => String::new(),
            };
            format!(
                "{head}, remote buffer {remote_addr:#x} ({buf_len} bytes, rkey {rkey:#x}){link}"
            )
        }
        Event::NotifyChosen { why, .. } => why.to_string(),
        Event::Written {
            length,
            notify,
            crc32c,
            micros,
        } => format!(
            "wrote {length} bytes with RDMA Write{} in {micros} us (crc32c {crc32c:#010x}){}",
            if *notify == Notify::Imm {
                " with immediate"
            } else {
                ""
            },
            if matches!(detail, Detail::AnsweredFirst) {
                "; the server answered before our completion came (a lost ACK)"
            } else {
                ""
            }
        ),
        Event::Verified {
            length,
            crc32c,
            text,
            truncated,
            ..
        } => match detail {
            Detail::BenchFinal => {
                format!("server verified the final {length} bytes (crc32c {crc32c:#010x})")
            }
            _ => format!(
                "server verified {length} bytes (crc32c {crc32c:#010x}): {:?}{}",
                text.as_ref(),
                if *truncated { " (truncated)" } else { "" }
            ),
        },
        Event::BenchSetup { ready_us } => format!("ready to post after {ready_us:.0} us"),
        Event::BenchLat(row) => lat_line(row),
        Event::BenchBw(row) => bw_line(row),
        Event::FabricPlan {
            round,
            writer,
            writer_host,
            target,
            target_host,
            ..
        } => format!("round {round:>3}: {writer:>4} {writer_host} -> {target:>4} {target_host}"),
        Event::FabricPair(r) => pair_line(r),
        Event::FabricReport(r) => table::render(r),
        Event::MeshStarted { .. }
        | Event::MeshProbe { .. }
        | Event::MeshState { .. }
        | Event::MeshStopped { .. } => mesh_line(event),
        Event::Error { kind, message, .. } => format!("error ({kind}): {}", printable(message)),
    }
}

/// The mesh's lines: its start (with, once, whether round trips are wall time), each probe,
/// each change of a pair's state, its stop.
fn mesh_line(event: &Event<'_>) -> String {
    match event {
        Event::MeshStarted {
            node,
            rank,
            hosts,
            fan_out,
            every_ms,
            cycle,
            device,
            timestamps,
            timestamps_why,
            cycles,
            tor,
            tors,
        } => {
            let mut line = format!(
                "mesh: {} (rank {rank} of {}) probes {fan_out} peer(s) every {every_ms} ms from {device}; every pair within {cycle} interval(s)",
                printable(node),
                hosts.len()
            );
            if let (Some(tor), Some(tors)) = (tor, tors) {
                line.push_str(&format!(
                    "; under ToR {} of {tors}: its ToR in full, the others by a sample",
                    printable(tor)
                ));
            }
            if let Some(c) = cycles {
                line.push_str(&format!("; stopping after {c} cycle(s)"));
            }
            let why = match (timestamps, timestamps_why.as_deref()) {
                (_, Some(why)) => why,
                (false, None) => "no completion timestamps: round trips are wall time",
                (true, None) => "round trips are split by completion timestamps",
            };
            line.push_str(&format!("\nmesh: {}", printable(why)));
            line
        }
        Event::MeshProbe {
            interval,
            peer,
            outcome,
            cause,
            wall_ns,
            network_ns,
            host_delay_ns,
            bw_mbs,
            state,
            error,
            ..
        } => {
            let us = |ns: u64| ns as f64 / 1000.0;
            let mut line = format!("[{interval}] {} {}", printable(peer), outcome.as_str());
            if let Some(c) = cause {
                line.push_str(&format!(" ({c})"));
            }
            if let Some(ns) = wall_ns {
                line.push_str(&format!(", rtt {:.1} us", us(*ns)));
            }
            if let (Some(net), Some(host)) = (network_ns, host_delay_ns) {
                line.push_str(&format!(
                    " (network {:.1} us, hosts {:.1} us)",
                    us(*net),
                    us(*host)
                ));
            }
            if let Some(bw) = bw_mbs {
                line.push_str(&format!(", {bw:.0} MB/s"));
            }
            line.push_str(&format!("; pair {state}"));
            if let Some(e) = error {
                line.push_str(&format!(": {}", printable(e)));
            }
            line
        }
        Event::MeshState {
            peer,
            from,
            to,
            cause,
            ..
        } => format!(
            "{} is now {to} (was {from}){}",
            printable(peer),
            cause.map(|c| format!(", cause {c}")).unwrap_or_default()
        ),
        Event::MeshStopped {
            why,
            intervals,
            probes,
            failed,
            skipped,
        } => format!(
            "mesh stopped ({}) after {intervals} interval(s): {probes} probe(s), {failed} failed, {skipped} skipped",
            printable(why)
        ),
        _ => String::new(),
    }
}

/// A bench table's rule and header, above its rows.
#[must_use]
pub fn bench_header(mode: BenchMode) -> String {
    let header = match mode {
        BenchMode::Lat => LAT_HEADER,
        BenchMode::Bw => BW_HEADER,
    };
    format!("{RULE}\n{header}")
}

/// `row`'s table line under [`LAT_HEADER`].
#[must_use]
pub fn lat_line(r: &LatRow) -> String {
    format!(
        " {:<7} {:<13} {:<14.2} {:<12.2} {:<17.2} {:<14.2} {:<16.2} {:<22.2} {:.2}",
        r.bytes,
        r.iterations,
        r.t_min_us,
        r.t_max_us,
        r.t_typical_us,
        r.t_avg_us,
        r.t_stdev_us,
        r.p99_us,
        r.p999_us
    )
}

/// `row`'s table line under [`BW_HEADER`].
#[must_use]
pub fn bw_line(r: &BwRow) -> String {
    format!(
        " {:<10} {:<14} {:<18.2} {:<20.2} {:<17.3} {:<20.3} {:.6}",
        r.bytes,
        r.iterations,
        r.bw_peak_mbs,
        r.bw_avg_mbs,
        r.bw_peak_gbps,
        r.bw_avg_gbps,
        r.msg_rate_mpps
    )
}

/// One pair's line of the fabric check; the host names are the peers' records'.
fn pair_line(r: &PairResult) -> String {
    let head = format!(
        "round {}{}: {} -> {}",
        r.round,
        if r.retest { " (re-test)" } else { "" },
        printable(&r.writer_host),
        printable(&r.target_host)
    );
    if r.verified {
        let measured = |v: Option<f64>, unit: &str| {
            v.map_or_else(|| "-".to_owned(), |v| format!("{v:.2} {unit}"))
        };
        format!(
            "{head}: verified, write {:.0} us, latency {}, bandwidth {} (waited {} ms)",
            r.write_us.unwrap_or_default(),
            measured(r.lat_us, "us"),
            measured(r.bw_mbs, "MB/s"),
            r.waited_ms
        )
    } else {
        format!(
            "{head}: FAILED ({}): {}",
            r.error_kind.unwrap_or(Exit::Unverified),
            printable(r.error.as_deref().unwrap_or_default())
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::borrow::Cow;
    use std::time::Duration;

    fn connected(chosen: Option<&'static str>) -> Event<'static> {
        Event::Connected {
            server: "10.0.0.1".into(),
            program: "rdma-server".into(),
            program_version: "0.1.0\u{1b}[2J".into(),
            device: "rxe0".into(),
            port: 1,
            gid_index: 1,
            gid: "::ffff:10.0.0.2".into(),
            chosen: chosen.map(Into::into),
        }
    }

    /// The README's session, line for line (the banner's text is the server's: escaped).
    #[test]
    fn a_writes_lines_are_the_readmes() {
        assert_eq!(
            line(&connected(None), &Detail::None),
            r"connected to 10.0.0.1 (rdma-server 0.1.0\u{1b}[2J); local rxe0 port 1 gid[1] ::ffff:10.0.0.2"
        );
        assert!(
            line(&connected(Some("the route to 10.0.0.1")), &Detail::None)
                .ends_with("::ffff:10.0.0.2 (chosen: the route to 10.0.0.1)")
        );
        let qp = Event::QpReady {
            local_qpn: 0x11,
            remote_qpn: 0x11,
            path_mtu: 1024,
            remote_addr: 0x7fd3_0000,
            rkey: 0x3c3,
            buf_len: 64,
            via: QpVia::Handshake,
        };
        assert_eq!(
            line(&qp, &Detail::None),
            "QP 0x000011 ready (RTS) -> server QP 0x000011, path MTU 1024, remote buffer 0x7fd30000 (64 bytes, rkey 0x3c3)"
        );
        let written = Event::Written {
            length: 17,
            notify: Notify::Imm,
            crc32c: 0x24ca_7934,
            micros: 5229,
        };
        assert_eq!(
            line(&written, &Detail::None),
            "wrote 17 bytes with RDMA Write with immediate in 5229 us (crc32c 0x24ca7934)"
        );
        assert_eq!(
            line(&written, &Detail::AnsweredFirst),
            "wrote 17 bytes with RDMA Write with immediate in 5229 us (crc32c 0x24ca7934); the server answered before our completion came (a lost ACK)"
        );
        let verified = |text: &'static str, truncated| Event::Verified {
            verified: true,
            length: 17,
            crc32c: 0x24ca_7934,
            text: text.into(),
            truncated,
        };
        assert_eq!(
            line(&verified("Hello RDMA Write!", false), &Detail::None),
            r#"server verified 17 bytes (crc32c 0x24ca7934): "Hello RDMA Write!""#
        );
        assert_eq!(
            line(&verified("a\nb", true), &Detail::None),
            r#"server verified 17 bytes (crc32c 0x24ca7934): "a\nb" (truncated)"#
        );
        assert_eq!(
            line(&verified("x", false), &Detail::BenchFinal),
            "server verified the final 17 bytes (crc32c 0x24ca7934)"
        );
    }

    #[test]
    fn a_bench_says_what_it_measures_around_perftests_table() {
        let bench = |duration| Detail::Bench {
            mode: BenchMode::Lat,
            sizes: &[2, 4096],
            duration,
            iters: 1000,
        };
        assert_eq!(
            line(&connected(Some("route")), &bench(None)),
            r"connected to 10.0.0.1 (rdma-server 0.1.0\u{1b}[2J); local rxe0 port 1 gid[1] ::ffff:10.0.0.2; bench lat, sizes [2, 4096], 1000 iterations per size (chosen: route)"
        );
        assert!(
            line(&connected(None), &bench(Some(Duration::from_secs(2))))
                .ends_with("; bench lat, sizes [2, 4096], 2s per size")
        );
        let qp = Event::QpReady {
            local_qpn: 0x11,
            remote_qpn: 0x12,
            path_mtu: 4096,
            remote_addr: 0,
            rkey: 0,
            buf_len: 4096,
            via: QpVia::Handshake,
        };
        let posting = Detail::BenchQp {
            inline: 220,
            cq_mode: rdma_core_rs::CqMode::default(),
        };
        assert!(
            line(&qp, &posting).starts_with(
                "QP 0x000011 ready (RTS) -> server QP 0x000012, path MTU 4096, inline up to 220 B, completions by "
            ),
            "{}",
            line(&qp, &posting)
        );
        assert_eq!(
            line(&Event::BenchSetup { ready_us: 1234.6 }, &Detail::None),
            "ready to post after 1235 us"
        );
        assert_eq!(bench_header(BenchMode::Bw), format!("{RULE}\n{BW_HEADER}"));
    }

    /// A peer's record names its hosts and its error: neither can drive the terminal.
    #[test]
    fn a_fabric_pairs_line_escapes_the_records_text() {
        let pair = PairResult {
            round: 2,
            world: 2,
            writer: 0,
            writer_host: "a\u{1b}[31m".into(),
            target: 1,
            target_host: "b".into(),
            verified: false,
            error_kind: Some(Exit::Network),
            error: Some("gone\nround 9: forged".into()),
            write_us: None,
            waited_ms: 0,
            lat_us: None,
            bw_mbs: None,
            retest: true,
            rail: None,
        };
        let shown = line(&Event::FabricPair(Cow::Borrowed(&pair)), &Detail::None);
        assert_eq!(
            shown,
            r"round 2 (re-test): a\u{1b}[31m -> b: FAILED (network): gone\nround 9: forged"
        );
        let plan = Event::FabricPlan {
            round: 1,
            rounds: 3,
            writer: 0,
            writer_host: "node-a".into(),
            target: 1,
            target_host: "node-b".into(),
        };
        assert_eq!(
            line(&plan, &Detail::None),
            "round   1:    0 node-a ->    1 node-b"
        );
    }

    #[test]
    fn the_mesh_says_wall_time_once_at_its_start_and_one_line_a_probe() {
        use rdma_proto::events::mesh::{Cause, PairState, ProbeOutcome};
        let started = Event::MeshStarted {
            node: "node1".into(),
            rank: 0,
            hosts: vec!["node1".into(), "node2".into(), "node3".into()],
            fan_out: 2,
            every_ms: 10_000,
            cycle: 1,
            device: "rxe0".into(),
            timestamps: false,
            timestamps_why: Some(
                "rxe0 gives no completion timestamps (hca_core_clock 0 kHz): round trips are \
                 wall time"
                    .into(),
            ),
            cycles: None,
            tor: None,
            tors: None,
        };
        assert_eq!(
            line(&started, &Detail::None),
            "mesh: node1 (rank 0 of 3) probes 2 peer(s) every 10000 ms from rxe0; every pair \
             within 1 interval(s)\nmesh: rxe0 gives no completion timestamps (hca_core_clock 0 \
             kHz): round trips are wall time"
        );
        let mut over_tors = started.clone();
        if let Event::MeshStarted { tor, tors, .. } = &mut over_tors {
            *tor = Some("tor07".into());
            *tors = Some(250);
        }
        assert!(
            line(&over_tors, &Detail::None)
                .contains("; under ToR tor07 of 250: its ToR in full, the others by a sample\n"),
            "{}",
            line(&over_tors, &Detail::None)
        );
        let probe = Event::MeshProbe {
            interval: 4,
            peer: "node3\u{1b}[2J".into(),
            peer_rank: 2,
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
        let l = line(&probe, &Detail::None);
        assert!(l.starts_with("[4] node3"), "{l}");
        assert!(!l.contains('\u{1b}'), "{l}");
        assert!(
            l.ends_with(" failed (host); pair down: connection refused"),
            "{l}"
        );
        // A round trip split by both devices' completion stamps.
        let split = Event::MeshProbe {
            interval: 4,
            peer: "node3".into(),
            peer_rank: 2,
            device: "mlx5_0".into(),
            rail: 0,
            outcome: ProbeOutcome::Ok,
            cause: None,
            wall_ns: Some(41_000),
            network_ns: Some(9_000),
            host_delay_ns: Some(32_000),
            bw_mbs: None,
            state: PairState::Up,
            reused: true,
            stamped: true,
            error: None,
        };
        assert_eq!(
            line(&split, &Detail::None),
            "[4] node3 ok, rtt 41.0 us (network 9.0 us, hosts 32.0 us); pair up"
        );
        let state = Event::MeshState {
            peer: "node3".into(),
            peer_rank: 2,
            device: "rxe0".into(),
            rail: 0,
            from: PairState::Up,
            to: PairState::Down,
            cause: Some(Cause::Host),
        };
        assert_eq!(
            line(&state, &Detail::None),
            "node3 is now down (was up), cause host"
        );
        let stopped = Event::MeshStopped {
            why: "signal".into(),
            intervals: 5,
            probes: 10,
            failed: 3,
            skipped: 1,
        };
        assert_eq!(
            line(&stopped, &Detail::None),
            "mesh stopped (signal) after 5 interval(s): 10 probe(s), 3 failed, 1 skipped"
        );
    }
}
