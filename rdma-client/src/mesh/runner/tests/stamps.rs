//! What the runner says of completion timestamps: once at the start, what each device answered;
//! then, probe by probe, a round trip split by both devices' stamps.

use super::*;

/// What the devices answered is said once, at the start: `mesh_started`'s `timestamps_why`
/// (`timestamps: true` where a device has a clock) and each device's
/// `rdma_mesh_timestamps_supported`, 1 only where the device has a clock.
#[test]
fn what_the_devices_said_of_their_clocks_is_said_once_at_start() {
    let devices = ["rxe0".to_owned(), "mlx5_0".to_owned()];
    let w = world(2, 0);
    let paths: Vec<Path> = devices
        .iter()
        .enumerate()
        .map(|(rail, d)| Path {
            peer: "node2".into(),
            peer_tor: "all".into(),
            device: d.clone(),
            rail: rail.to_string(),
        })
        .collect();
    let metrics = MeshMetrics::new("me", "all", &paths).unwrap();
    let clock = CompletionClock::Clock {
        hca_core_clock_khz: 156_250,
        timestamp_mask: 0xffff_ffff_ffff,
    };
    let plan = Plan {
        world: &w,
        tors: None,
        config: config(30, 1),
        bw_every: 0,
        cycles: Some(2),
        devices: &devices,
        clocks: &[Ok(RXE), Ok(clock)],
    };
    let sinks = Sinks {
        metrics: Some(&metrics),
        textfile: None,
    };
    let fake = Fake::new(&good);
    let mut events = Vec::new();
    run(
        &plan,
        &fake,
        &sinks,
        &rdma_app::wake::Stop::new().unwrap(),
        &mut |e| {
            let line = serde_json::to_string(e).unwrap();
            events.push(line);
        },
    )
    .unwrap();
    let said: Vec<&String> = events.iter().filter(|l| l.contains("completion")).collect();
    assert_eq!(said.len(), 1, "{events:#?}");
    assert!(
        said[0].starts_with(r#"{"type":"mesh_started""#),
        "{}",
        said[0]
    );
    assert!(
        said[0].contains(
            r#""timestamps":true,"timestamps_why":"rxe0 gives no completion timestamps (hca_core_clock 0 kHz): round trips are wall time; mlx5_0 has a completion clock (156250 kHz, mask 0xffffffffffff): round trips are split into network time and host delay where the peer's device stamps too""#
        ),
        "{}",
        said[0]
    );
    let text = metrics.encode(crate::mesh::metrics::Format::Text);
    for line in [
        r#"rdma_mesh_timestamps_supported{device="rxe0"} 0"#,
        r#"rdma_mesh_timestamps_supported{device="mlx5_0"} 1"#,
    ] {
        assert!(text.lines().any(|l| l == line), "no {line:?} in\n{text}");
    }
    // No probe was split: the fake's round trips are wall time (no stamped exchange).
    assert!(
        !text.contains("rdma_mesh_network_rtt_seconds_count{"),
        "{text}"
    );
}

/// A probe whose stamped exchange both devices stamped: `mesh_probe` carries its split and
/// says it was stamped, and the network and host-delay histograms count it.
#[test]
fn a_split_round_trip_reaches_the_event_and_the_histograms() {
    let devices = ["mlx5_0".to_owned()];
    let w = world(2, 0);
    let paths = [Path {
        peer: "node2".into(),
        peer_tor: "all".into(),
        device: devices[0].clone(),
        rail: "0".into(),
    }];
    let metrics = MeshMetrics::new("me", "all", &paths).unwrap();
    let clock = CompletionClock::Clock {
        hca_core_clock_khz: 1_000_000,
        timestamp_mask: (1 << 48) - 1,
    };
    let plan = Plan {
        world: &w,
        tors: None,
        config: config(30, 1),
        bw_every: 0,
        cycles: Some(1),
        devices: &devices,
        clocks: &[Ok(clock)],
    };
    let sinks = Sinks {
        metrics: Some(&metrics),
        textfile: None,
    };
    let us = Duration::from_micros(1);
    let stamped = |_: &str, _: &Job| {
        let stamps = |send, recv| crate::mesh::rtt::Stamps {
            clock: crate::mesh::rtt::DeviceClock::new(1_000_000, (1 << 48) - 1).unwrap(),
            send,
            recv,
        };
        let exchange = crate::mesh::rtt::Exchange {
            transport: crate::mesh::rtt::SendStamp::Acked,
            prober: stamps(1_000, 31_000),
            responder: stamps(540_000, 500_000),
        };
        Ok(Probed {
            verified: true,
            rtt: Rtt::split(45 * us, &exchange).unwrap(),
            bw_mbs: None,
            stalled: false,
            reused: false,
            stamped: true,
            write: Duration::ZERO,
            lat_us: None,
            waited: Duration::ZERO,
        })
    };
    let fake = Fake::new(&stamped);
    let mut events = Vec::new();
    run(
        &plan,
        &fake,
        &sinks,
        &rdma_app::wake::Stop::new().unwrap(),
        &mut |e| events.push(serde_json::to_string(e).unwrap()),
    )
    .unwrap();
    let probes: Vec<&String> = events
        .iter()
        .filter(|l| l.starts_with(r#"{"type":"mesh_probe""#))
        .collect();
    assert!(!probes.is_empty(), "{events:#?}");
    for p in &probes {
        assert!(
            p.contains(r#""wall_ns":45000,"network_ns":10000,"host_delay_ns":35000"#)
                && p.contains(r#""stamped":true"#),
            "{p}"
        );
    }
    let text = metrics.encode(crate::mesh::metrics::Format::Text);
    for family in [
        "rdma_mesh_network_rtt_seconds_count{",
        "rdma_mesh_host_delay_seconds_count{",
    ] {
        let n: f64 = text
            .lines()
            .find(|l| l.starts_with(family))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        assert!(n >= 1.0, "{family} counts {n} in\n{text}");
    }
}
