//! 10,000 nodes in 250 ToRs of 40 at the default fan-out (8) and interval, with four faults
//! injected at once: a dead host, a NIC that drops RoCE, a ToR cut off from the others, and
//! loss on one link. What the mesh must show at that scale: a prober's series, each server's
//! probe load, how soon each path through a fault is down, and what the root-cause rules count
//! (a node's votes from its ToR, the failures into a ToR from the others).

use rdma_client::mesh::metrics::SERIES_PER_PATH;
use rdma_client::mesh::state::PairState;
use rdma_fleet_sim::{Change, Fault, Fleet, Shape};
use std::collections::BTreeSet;

const TORS: usize = 250;
const PER_TOR: usize = 40;
const DEAD: usize = PER_TOR + 7; // in tor001
const NIC: usize = 2 * PER_TOR + 11; // in tor002
const CUT: usize = 3; // tor003
const LOSSY: [usize; 2] = [4 * PER_TOR + 1, 4 * PER_TOR + 2]; // in tor004
const HEALTHY: usize = 9 * PER_TOR + 5; // in tor009, far from every fault

/// The lines of a path's own series (those with a `peer`) of an exposition, by peer.
fn own_peers(text: &str) -> (usize, BTreeSet<String>) {
    let mut lines = 0;
    let mut peers = BTreeSet::new();
    for l in text.lines().filter(|l| !l.starts_with('#')) {
        if let Some(i) = l.find("peer=\"") {
            let rest = &l[i + 6..];
            peers.insert(rest[..rest.find('"').unwrap_or(0)].to_owned());
            lines += 1;
        }
    }
    (lines, peers)
}

fn samples(text: &str) -> usize {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .count()
}

/// The intervals from `from` on in which `prober` probes `peer`, the first `n` of them.
fn turns(f: &Fleet, prober: usize, peer: usize, from: u64, n: usize) -> Vec<u64> {
    let node = f.schedule.node(prober).expect("a node of the fleet");
    (from..from + 100 * f.schedule.cycle())
        .filter(|&t| node.peers(t).any(|p| p == peer))
        .take(n)
        .collect()
}

#[test]
fn ten_thousand_nodes_in_250_tors() {
    let mut f = Fleet::new(Shape {
        tors: TORS,
        per_tor: PER_TOR,
        fan_out: 8,
    })
    .unwrap();
    let cycle = f.schedule.cycle();
    assert_eq!(cycle, 7);
    let watched = [HEALTHY, PER_TOR, CUT * PER_TOR, LOSSY[0]];
    for w in watched {
        f.watch(w).unwrap();
    }
    // Warm up: every path within a ToR judged up (two good probes, one a cycle).
    let fault_at = 3 * cycle;
    while f.t < fault_at {
        f.step().unwrap();
        // Each server takes exactly `--fan-out` probers an interval.
        assert!(f.received.iter().all(|&r| r == 8), "interval {}", f.t);
    }
    for w in watched {
        for mate in (0..PER_TOR)
            .map(|i| f.tor(w) * PER_TOR + i)
            .filter(|&m| m != w)
        {
            assert_eq!(f.state(w, mate), PairState::Up, "{w} -> {mate}");
        }
    }
    let healthy = samples(&f.exposition(HEALTHY).unwrap());
    assert!(healthy <= 1_000, "{healthy} series from a healthy prober");
    assert_eq!(own_peers(&f.exposition(HEALTHY).unwrap()).0, 0);

    f.inject(fault_at, Fault::DeadHost(DEAD));
    f.inject(fault_at, Fault::BrokenNic(NIC));
    f.inject(fault_at, Fault::TorCut(CUT));
    f.inject(
        fault_at,
        Fault::Loss {
            a: LOSSY[0],
            b: LOSSY[1],
            stall: 0.18,
        },
    );
    f.across.clear();
    let end = fault_at + 3 * cycle + 1;
    while f.t < end {
        f.step().unwrap();
    }

    // Detection: each ToR-mate's path to the dead host, and to the broken NIC, is down at its
    // third probe after the fault (`--down-after` 3: no failure costs the next its turn).
    let down = |prober: usize, peer: usize| -> Option<Change> {
        f.changes
            .iter()
            .find(|c| (c.prober, c.peer) == (prober, peer) && c.to == PairState::Down)
            .copied()
    };
    for (x, cause) in [
        (DEAD, rdma_client::mesh::cause::Cause::Host),
        (NIC, rdma_client::mesh::cause::Cause::Rdma),
    ] {
        let tor = f.tor(x);
        for m in (0..PER_TOR).map(|i| tor * PER_TOR + i).filter(|&m| m != x) {
            let c = down(m, x).unwrap_or_else(|| panic!("{m} -> {x} never down"));
            let third = turns(&f, m, x, fault_at, 3)[2];
            assert_eq!(
                c.t, third,
                "{m} -> {x}: down at {}, its third probe at {third}",
                c.t
            );
            assert!(c.t < fault_at + 3 * cycle, "{m} -> {x}");
            assert_eq!(c.cause, Some(cause), "{m} -> {x}");
        }
    }

    // Nothing else goes down but the paths through a fault (the loss only slows its link).
    let through = |c: &Change| {
        let (tp, tq) = (f.tor(c.prober), f.tor(c.peer));
        c.peer == DEAD || c.prober == NIC || c.peer == NIC || (tp != tq && (tp == CUT || tq == CUT))
    };
    let stray: Vec<&Change> = f
        .changes
        .iter()
        .filter(|c| c.t >= fault_at && c.to == PairState::Down && !through(c))
        .collect();
    assert!(stray.is_empty(), "{stray:?}");

    // What the node verdicts count: the probers of a node's own ToR that find it down. The
    // dead host and the broken NIC have every other node of their ToR; no other node more
    // than one (the broken NIC's prober finds each of its ToR-mates down).
    for y in 0..TORS * PER_TOR {
        let tor = f.tor(y);
        let votes = (0..PER_TOR)
            .map(|i| tor * PER_TOR + i)
            .filter(|&m| m != y && f.alive(m) && f.state(m, y) == PairState::Down)
            .count();
        if y == DEAD || y == NIC {
            assert_eq!(votes, PER_TOR - 1, "node {y}");
        } else {
            assert!(votes <= 1, "node {y}: {votes} votes");
        }
    }

    // What the ToR verdict counts: of the probes into a ToR from the others, the failed share.
    // All of them into the cut ToR, from every other ToR; at most the cut ToR's share (and the
    // dead host's and the NIC's) into any other.
    let mut into = vec![[0u64; 2]; TORS];
    let mut failing_from = vec![BTreeSet::new(); TORS];
    for (&(from, to), &[ok, failed]) in &f.across {
        into[to][0] += ok;
        into[to][1] += failed;
        if failed > 0 {
            failing_from[to].insert(from);
        }
    }
    let share = |t: usize| into[t][1] as f64 / (into[t][0] + into[t][1]) as f64;
    assert_eq!(share(CUT), 1.0);
    assert!(failing_from[CUT].len() >= 2);
    for t in (0..TORS).filter(|&t| t != CUT) {
        assert!(
            share(t) < 0.1,
            "ToR {t}: {:.3} of the probes into it failed",
            share(t)
        );
    }

    // Series: the healthy prober exports as before; the dead host's ToR-mate exactly
    // SERIES_PER_PATH more for each path of its that is not healthy.
    assert_eq!(samples(&f.exposition(HEALTHY).unwrap()), healthy);
    let mate = f.exposition(PER_TOR).unwrap();
    let (lines, peers) = own_peers(&mate);
    assert!(peers.contains(&f.names[DEAD]), "{peers:?}");
    assert_eq!(lines, SERIES_PER_PATH * peers.len());
    assert!(samples(&mate) - lines <= 1_000);

    // The lossy link: slowed, never down.
    for (a, b) in [(LOSSY[0], LOSSY[1]), (LOSSY[1], LOSSY[0])] {
        assert_ne!(f.state(a, b), PairState::Down);
    }
    // Its slow probes put the path in the exposition, where the dashboard and
    // RdmaMeshPathDegraded look, cause slow.
    let lossy = f.exposition(LOSSY[0]).unwrap();
    let slow = lossy
        .lines()
        .find(|l| {
            l.starts_with("rdma_mesh_probes_total{")
                && l.contains(&format!("peer=\"{}\"", f.names[LOSSY[1]]))
                && l.contains("result=\"slow\"")
        })
        .unwrap_or_else(|| panic!("no slow probes of the lossy path in\n{lossy}"));
    eprintln!("{slow}");
    let last_down = f
        .changes
        .iter()
        .filter(|c| c.to == PairState::Down && (c.peer == DEAD || c.peer == NIC))
        .map(|c| c.t - fault_at)
        .max();
    eprintln!(
        "fleet of {}: healthy prober {healthy} series, the dead host's ToR-mate {} ({} paths of its own); paths to the dead host and the NIC down within {last_down:?} intervals of the fault (cycle {cycle}); lossy link {:?}/{:?}",
        TORS * PER_TOR,
        samples(&mate),
        peers.len(),
        f.state(LOSSY[0], LOSSY[1]),
        f.state(LOSSY[1], LOSSY[0]),
    );
}
