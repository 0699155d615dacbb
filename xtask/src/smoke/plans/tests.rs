//! The plans of each vm-smoke shape, and of several in one boot.

use super::*;
use crate::smoke::cm::{BAD_NONCE, CM_EXAMPLE, CM_FLOOD, CM_LATE, CM_TWICE};

pub(crate) fn shape() -> Shape {
    Shape {
        nodes: 2,
        nics: 1,
        dead: None,
        down: None,
        ipv6: false,
        transport: LinkKind::Rxe,
        capture: false,
        cm: false,
        iters: 200,
        modules: None,
        ours: None,
        tclass: None,
        bench: None,
        cm_bad_nonce: false,
        loss: None,
    }
}

/// Our binaries, as the guests would run them.
fn our_bins() -> Ours {
    Ours {
        server: "/t/rdma-server".into(),
        client: "/t/rdma-client".into(),
        misbehave_client: "/t/rdma-misbehave-client".into(),
        cm_example: Some("/t/examples/cm_connect".into()),
    }
}

fn step<'a>(p: &'a Plan, name: &str) -> &'a Step {
    p.steps.iter().find(|s| s.name == name).unwrap()
}

#[test]
fn the_default_run_is_todays_pair_on_eth0() {
    let two = plans(&shape());
    assert_eq!(two.len(), 2);
    assert_eq!(two[0].1.node, Node::guest("10.0.0.1", true));
    assert_eq!(two[1].1.node, Node::guest("10.0.0.2", true));
    let server = step(&two[0].1, "server");
    let client = step(&two[1].1, "client");
    assert!(server.background);
    assert_eq!(server.create_file_when_started.as_deref(), Some(MARKER));
    assert_eq!(client.wait_for_file.as_deref(), Some(MARKER));
    assert_eq!(
        client.argv.join(" "),
        "ib_write_bw -d rxe0 -x @gid-index:rxe0:10.0.0.2 -s 4096 -n 200 10.0.0.1"
    );
    assert_eq!(step(&two[1].1, "ping-live-link").expect_exit, 0);
    let one = plans(&Shape {
        nodes: 1,
        ..shape()
    });
    assert_eq!(one.len(), 1);
    assert_eq!(one[0].1.steps.len(), 3);
}

#[test]
fn a_dead_eth0_sends_the_pair_over_rxe1() {
    let s = Shape {
        nics: 2,
        dead: Some(0),
        ..shape()
    };
    let p = plans(&s);
    let b = &p[1].1;
    assert_eq!(b.node.nics.len(), 2);
    assert_eq!(b.node.nics[1].ipv4.as_deref(), Some("10.0.1.2/24"));
    assert_eq!(b.node.nics[1].rdma, Some(RdmaDev::rxe("rxe1")));
    assert_eq!(
        step(b, "client").argv.join(" "),
        "ib_write_bw -d rxe1 -x @gid-index:rxe1:10.0.1.2 -s 4096 -n 200 10.0.1.1"
    );
    // Both links are proven: the cut one does not answer, the live one does.
    let dead = step(b, "ping-dead-link");
    assert_eq!(
        (dead.expect_exit, dead.argv.last().unwrap().as_str()),
        (1, "10.0.0.1")
    );
    assert_eq!(step(b, "ping-live-link").argv.last().unwrap(), "10.0.1.1");
    let other_way = Shape {
        dead: Some(1),
        ..s.clone()
    };
    assert_eq!(other_way.traffic_link(), 0);
    // A NIC left down: both guests keep eth0 down, the pair takes rxe1.
    let down = Shape {
        dead: None,
        down: Some(0),
        ..s
    };
    let p = plans(&down);
    assert!(!p[0].1.node.nics[0].up && p[0].1.node.nics[1].up);
    assert_eq!(step(&p[1].1, "ping-down-link").expect_exit, 1);
    assert_eq!(
        step(&p[1].1, "ping-live-link").argv.last().unwrap(),
        "10.0.1.1"
    );
    assert!(step(&p[1].1, "client").argv.contains(&"rxe1".to_owned()));
}

#[test]
fn ipv6_only_nics_and_the_v6_gid() {
    let s = Shape {
        ipv6: true,
        nics: 2,
        ..shape()
    };
    let n = s.node(2);
    assert_eq!(n.nics[0].ipv4, None);
    assert_eq!(n.nics[0].ipv6.as_deref(), Some("fd00::2/64"));
    assert_eq!(n.nics[1].ipv6.as_deref(), Some("fd00:1::2/64"));
    let p = plans(&s);
    assert_eq!(
        step(&p[1].1, "client").argv.join(" "),
        "ib_write_bw -d rxe0 -x @gid-index:rxe0:fd00::2 -s 4096 -n 200 10.0.2.1"
    );
    // perftest's out-of-band exchange needs IPv4: a third NIC carries it, with no RDMA
    // device (so the pair's GID is the IPv6 one on rxe0).
    assert_eq!(s.total_nics(), 3);
    assert_eq!(n.nics[2].ipv4.as_deref(), Some("10.0.2.2/24"));
    assert_eq!(n.nics[2].rdma, None);
    let siw = Shape {
        transport: LinkKind::Siw,
        ..s
    };
    assert_eq!(siw.total_nics(), 2);
    assert_eq!(step(&plans(&siw)[1].1, "client").argv[3], "fd00::1");
}

#[test]
fn our_pair_takes_no_device_flags_and_needs_no_ipv4_on_ipv6() {
    let s = Shape {
        nics: 2,
        dead: Some(0),
        ours: Some(our_bins()),
        ..shape()
    };
    let p = plans(&s);
    assert_eq!(
        step(&p[0].1, "server").argv.join(" "),
        "/t/rdma-server --json --timeout 30s"
    );
    assert_eq!(
        step(&p[1].1, "client").argv.join(" "),
        "/t/rdma-client --json --message Hello RDMA Write! 10.0.1.1"
    );
    let v6 = Shape {
        nics: 1,
        dead: None,
        ipv6: true,
        ..s
    };
    // Our handshake runs over IPv6 itself: no out-of-band IPv4 NIC.
    assert_eq!(v6.total_nics(), 1);
    assert_eq!(
        step(&plans(&v6)[1].1, "client").argv.last().unwrap(),
        "fd00::1"
    );
    // A bench is the client's `bench` use, with no message (the write's option alone).
    let bench = Shape {
        bench: Some("lat".into()),
        ..v6.clone()
    };
    assert_eq!(
        step(&plans(&bench)[1].1, "client").argv.join(" "),
        "/t/rdma-client bench --json fd00::1 --mode lat --size 4096 --iters 200"
    );
    // --tclass goes to both ends (the server's ACKs are marked too).
    let tc = Shape {
        tclass: Some(106),
        ..v6
    };
    let p = plans(&tc);
    for (guest, name) in [(0, "server"), (1, "client")] {
        assert!(
            step(&p[guest].1, name)
                .argv
                .ends_with(&owned(&["--tclass", "106"]))
        );
    }
}

#[test]
fn siw_runs_rping_through_rdma_cm_and_capture_runs_tcpdump() {
    let s = Shape {
        transport: LinkKind::Siw,
        modules: Some(Modules::default()),
        ..shape()
    };
    let p = plans(&s);
    assert_eq!(p[0].1.node.nics[0].rdma, Some(RdmaDev::siw("siw0")));
    assert!(p[0].1.node.modules.is_some());
    let server = step(&p[0].1, "server");
    assert_eq!(server.argv.join(" "), "rping -s -a 10.0.0.1 -C 3 -v");
    assert_eq!(server.stop_when_file.as_deref(), Some("client-done"));
    assert_eq!(
        step(&p[1].1, "client").argv.join(" "),
        "rping -c -a 10.0.0.1 -C 3 -v -V"
    );
    // RDMA CM on rxe: rping too, on rxe0.
    let cm = Shape {
        cm: true,
        ..shape()
    };
    let p = plans(&cm);
    assert_eq!(p[0].1.node.nics[0].rdma, Some(RdmaDev::rxe("rxe0")));
    assert_eq!(step(&p[0].1, "server").argv[0], "rping");
    let c = Shape {
        capture: true,
        ..shape()
    };
    let a = &plans(&c)[0].1;
    let names: Vec<&str> = a.steps.iter().map(|s| s.name.as_str()).collect();
    assert!(names.iter().position(|n| *n == "tcpdump") < names.iter().position(|n| *n == "server"));
    assert!(
        step(a, "tcpdump")
            .argv
            .ends_with(&owned(&["udp", "port", "4791"]))
    );
    assert_eq!(
        rping_verified("ping data: rdma-ping-0: ABC\nping data: rdma-ping-1: BCD\nother\n"),
        2
    );
}

#[test]
fn workloads_of_one_boot_take_turns_on_their_own_names_and_ports() {
    let ours = Shape {
        ours: Some(our_bins()),
        ..shape()
    };
    let v6 = Shape {
        ipv6: true,
        ..ours.clone()
    };
    let p = plans_for(&[shape(), ours.clone(), v6.clone()]);
    let (a, b) = (&p[0].1, &p[1].1);
    // The network is proven once; each workload has its own steps and markers.
    assert_eq!(
        b.steps
            .iter()
            .filter(|s| s.name.starts_with("ping-"))
            .count(),
        1
    );
    assert_eq!(step(a, "server").argv[0], "ib_write_bw");
    assert_eq!(
        step(a, "server-1").argv.join(" "),
        "/t/rdma-server --json --timeout 30s --listen [::]:7472"
    );
    assert_eq!(step(b, "client-1").argv.last().unwrap(), "10.0.0.1:7472");
    assert_eq!(step(b, "client-2").argv.last().unwrap(), "[fd00::1]:7473");
    assert_eq!(
        step(b, "client-1").wait_for_file.as_deref(),
        Some("server-started-1")
    );
    // Workload 1's server starts once workload 0's client has ended, whatever its outcome.
    let names: Vec<&str> = a.steps.iter().map(|s| s.name.as_str()).collect();
    let at = |n: &str| names.iter().position(|x| *x == n).unwrap();
    assert!(at("turn-1") < at("server-1") && at("server") < at("turn-1"));
    assert_eq!(
        step(a, "turn-1").wait_for_file.as_deref(),
        Some("client-done")
    );
    assert_eq!(
        step(b, "client").create_file_when_ended.as_deref(),
        Some("client-done")
    );
    assert!(step(b, "client").allow_failure);
    // Files too: capture.pcap, capture-1.pcap.
    assert_eq!(Tag(1).name(CAPTURE), "capture-1.pcap");
    assert_eq!(Tag(0).name(CAPTURE), CAPTURE);
    // One workload alone: today's names, and its failure is the plan's.
    assert!(!step(&plans(&ours)[1].1, "client").allow_failure);
}

/// The wrong-nonce client is the test-only peer with rdma-client's own arguments after its
/// `--fault`, and the real client follows it.
#[test]
fn a_bad_nonce_is_presented_by_the_misbehaving_peer() {
    let s = Shape {
        cm: true,
        cm_bad_nonce: true,
        ours: Some(our_bins()),
        ..shape()
    };
    let two = plans(&s);
    let bad = step(&two[1].1, BAD_NONCE);
    assert_eq!(
        bad.argv[..3],
        owned(&["/t/rdma-misbehave-client", "--fault", "cm-bad-nonce"])[..]
    );
    assert!(bad.argv.iter().any(|a| a == "--cm"), "{:?}", bad.argv);
    // Then the flood and the second request (issue 23, items 4 and 5), judged by their output.
    for (name, fault) in [(CM_FLOOD, "cm-flood"), (CM_TWICE, "cm-twice")] {
        let s = step(&two[1].1, name);
        assert_eq!(
            s.argv[..3],
            owned(&["/t/rdma-misbehave-client", "--fault", fault])[..]
        );
        assert!(s.allow_failure && s.argv.iter().any(|a| a == "--cm"));
    }
    // The late bench client has a server of its own, with short limits (issue 23, item 6).
    let late = step(&two[1].1, CM_LATE);
    assert_eq!(late.argv[1..3], owned(&["--fault", "cm-late-bench"])[..]);
    assert!(late.argv.iter().any(|a| a == "--server-bench-max-time"));
    let example = step(&two[0].1, CM_EXAMPLE);
    assert_eq!(example.argv[0], "/t/examples/cm_connect");
    let server = step(&two[0].1, "server-late-bench");
    assert!(server.background && server.argv.iter().any(|a| a == "--bench-max-time"));
    let names: Vec<&str> = two[1].1.steps.iter().map(|s| s.name.as_str()).collect();
    let at = |n: &str| names.iter().position(|m| m.ends_with(n));
    assert!(at(CM_TWICE) < at("client"), "{names:?}");
    assert_eq!(step(&two[1].1, "client").argv[0], "/t/rdma-client");
}

/// The lossy workload: the loss on both guests before the pair, a `--serve` server stopped
/// when B is done, every write its own step with no retry, the bench, then the loss taken
/// away on both sides.
#[test]
fn the_lossy_link_drops_frames_on_both_sides_around_its_own_writes() {
    let s = Shape {
        loss: Some(5),
        ours: Some(our_bins()),
        ..shape()
    };
    let two = plans(&s);
    let (a, b) = (&two[0].1, &two[1].1);
    let names = |p: &Plan| p.steps.iter().map(|s| s.name.clone()).collect::<Vec<_>>();
    let (na, nb) = (names(a), names(b));
    let at = |n: &[String], x: &str| n.iter().position(|s| s == x).unwrap();
    assert!(at(&na, "netem-loss") < at(&na, "server"));
    assert!(at(&na, "server") < at(&na, "netem-off"));
    let loss = step(a, "netem-loss");
    assert_eq!(
        loss.argv,
        owned(&[
            "tc", "qdisc", "replace", "dev", "eth0", "root", "netem", "loss", "5%"
        ])
    );
    let server = step(a, "server");
    assert!(server.argv.iter().any(|x| x == "--serve"));
    assert_eq!(server.stop_when_file.as_deref(), Some("client-done"));
    assert_eq!(
        step(a, "netem-off").wait_for_file.as_deref(),
        Some("client-done")
    );
    let writes: Vec<&Step> = b
        .steps
        .iter()
        .filter(|s| s.name.starts_with("write-"))
        .collect();
    assert_eq!(writes.len(), super::super::lossy::WRITES);
    assert!(
        writes
            .iter()
            .all(|w| w.retries == 0 && w.argv[0] == "/t/rdma-client")
    );
    assert!(at(&nb, "netem-loss") < at(&nb, "write-1"));
    assert!(at(&nb, "write-20") < at(&nb, "ackless-1"));
    assert!(at(&nb, "ackless-3") < at(&nb, "bench-bw"));
    // The ack-less phase: A drops every RoCE packet it sends between B's two series of writes.
    assert_eq!(
        step(b, "write-20").create_file_when_ended.as_deref(),
        Some("lossy-writes-done")
    );
    assert_eq!(
        step(a, "drop-acks-qdisc").wait_for_file.as_deref(),
        Some("lossy-writes-done")
    );
    let drop = step(a, "drop-acks");
    assert!(
        drop.argv
            .join(" ")
            .ends_with("match ip dport 4791 0xffff action drop")
    );
    assert_eq!(
        step(b, "ackless-1").wait_for_file.as_deref(),
        Some("acks-dropped")
    );
    assert_eq!(
        step(b, "ackless-3").create_file_when_ended.as_deref(),
        Some("ackless-done")
    );
    assert_eq!(
        step(a, "acks-back").wait_for_file.as_deref(),
        Some("ackless-done")
    );
    assert_eq!(
        step(b, "bench-bw").wait_for_file.as_deref(),
        Some("acks-back")
    );
    // The bench is the client's `bench` use, without the write's message.
    let bench = &step(b, "bench-bw").argv;
    assert_eq!(bench[..2], owned(&["/t/rdma-client", "bench"])[..]);
    assert!(!bench.iter().any(|a| a == "--message"), "{bench:?}");
    let off = step(b, "netem-off");
    assert_eq!(off.create_file_when_ended.as_deref(), Some("client-done"));
    assert_eq!(nb.last().map(String::as_str), Some("netem-off"));
}

#[test]
fn the_cast_names_our_roles_by_the_program_they_run() {
    use crate::scenario::exit::Speaks;
    let cm = Shape {
        cm: true,
        cm_bad_nonce: true,
        ours: Some(our_bins()),
        ..shape()
    };
    let p = plans(&cm);
    let cast = super::cast(&p, cm.ours.as_ref());
    assert_eq!(cast.get("server"), Some(&Speaks::Server));
    assert_eq!(cast.get("server-late-bench"), Some(&Speaks::Server));
    for client in ["client", BAD_NONCE, CM_FLOOD, CM_TWICE, CM_LATE] {
        assert_eq!(cast.get(client), Some(&Speaks::Client), "{client}");
    }
    // rdma-core-rs's example and the pings are not ours.
    assert_eq!(cast.get(CM_EXAMPLE), None);
    assert_eq!(cast.get("ping-live-link"), None);
    // perftest's pair has no role of ours.
    assert!(super::cast(&plans(&shape()), None).is_empty());
}
