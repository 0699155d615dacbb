//! The shapes `cargo xtask test` runs (`vm-smoke --suite`), one after the other.

use color_eyre::eyre::Result;

use super::{SmokeArgs, run_group};
use crate::plan::LinkKind;
use crate::vm;

impl SmokeArgs {
    /// Today's smoke: two guests, one NIC, rxe, 200 messages.
    fn plain(vm: &vm::VmOptions) -> Self {
        Self {
            nodes: 2,
            guests: vm::GuestFlags {
                vm: vm.clone(),
                timeout: 120,
            },
            iters: 200,
            nics: 1,
            dead_link: None,
            down_link: None,
            ipv6: false,
            transport: LinkKind::Rxe,
            capture: false,
            rdma_cm: false,
            rdma_write: false,
            tclass: None,
            bench: None,
            cm_bad_nonce: false,
            loss: None,
            prepare_only: false,
            suite: false,
        }
    }
}

/// The guest infrastructure the later scenarios stand on, and our pair with no device flags on
/// each shape of network: eighteen workloads in nine boots, those of one network one after
/// the other in one boot (`run_group`; a boot costs about 9 s under TCG before the first step).
/// What `cargo xtask test` runs as one phase.
pub fn suite(vm: &vm::VmOptions) -> Result<()> {
    for group in groups(vm) {
        run_group(&group)?;
    }
    Ok(())
}

/// The suite's workloads, grouped by the network they need.
fn groups(vm: &vm::VmOptions) -> Vec<Vec<SmokeArgs>> {
    let plain = || SmokeArgs::plain(vm);
    let ours = || SmokeArgs {
        rdma_write: true,
        ..plain()
    };
    let bench = |mode: &str, a: SmokeArgs| SmokeArgs {
        bench: Some(mode.into()),
        ..a
    };
    let nics2 = |dead: u8, a: SmokeArgs| SmokeArgs {
        nics: 2,
        dead_link: Some(dead),
        ..a
    };
    let v6 = |a: SmokeArgs| SmokeArgs { ipv6: true, ..a };
    let siw = |a: SmokeArgs| SmokeArgs {
        transport: LinkKind::Siw,
        ..a
    };
    let cm = |a: SmokeArgs| SmokeArgs { rdma_cm: true, ..a };
    vec![
        // Two NICs, eth0's link cut: perftest, then rdma-write and its bench lat on rxe1.
        vec![
            nics2(0, plain()),
            nics2(0, ours()),
            bench("lat", nics2(0, ours())),
        ],
        // eth1's link cut: rdma-write picks rxe0.
        vec![nics2(1, ours())],
        // IPv6-only NICs: perftest (with its out-of-band IPv4 NIC), then our pair, which needs
        // none (so a network of its own), and its bench bw.
        vec![v6(plain())],
        vec![v6(ours()), bench("bw", v6(ours()))],
        // Soft-iWARP: rping, then rdma-write through RDMA CM by itself, its bench lat and bw.
        vec![
            siw(plain()),
            siw(ours()),
            bench("lat", siw(ours())),
            bench("bw", siw(ours())),
        ],
        vec![siw(v6(ours()))],
        vec![siw(nics2(0, ours()))],
        // RDMA CM on rxe (--cm): a wrong nonce rejected first, then the bench bw.
        vec![
            SmokeArgs {
                cm_bad_nonce: true,
                ..cm(ours())
            },
            bench("bw", cm(ours())),
        ],
        // The RoCE v2 capture: perftest's packets, then --tclass 0x6a (DSCP 26, ECN capable)
        // on every packet of our pair; then the lossy link (5% of the frames lost each way),
        // last, though it takes its loss away again.
        vec![
            SmokeArgs {
                capture: true,
                ..plain()
            },
            SmokeArgs {
                tclass: Some(0x6a),
                capture: true,
                ..ours()
            },
            SmokeArgs {
                loss: Some(5),
                ..ours()
            },
        ],
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shape of `a`, our pair played by stand-in binaries where it runs.
    fn shape(a: &SmokeArgs) -> crate::smoke::plans::Shape {
        a.shape(
            None,
            a.rdma_write.then(|| crate::smoke::plans::Ours {
                server: "s".to_owned(),
                client: "c".to_owned(),
                misbehave_client: "m".to_owned(),
                cm_example: Some("x".to_owned()),
            }),
        )
        .unwrap()
    }

    /// The eighteen shapes of the suite, each once, in boots whose workloads share a network.
    #[test]
    fn the_suite_keeps_every_shape_and_groups_by_network() {
        let vm = vm::VmOptions::default();
        let groups = groups(&vm);
        let shapes: Vec<_> = groups.iter().flatten().collect();
        assert_eq!(shapes.len(), 18);
        assert!(shapes.iter().any(|a| a.loss == Some(5) && a.rdma_write));
        assert_eq!(groups.len(), 9);
        let key = |a: &SmokeArgs| shape(a).network();
        for g in &groups {
            assert!(g.iter().all(|a| key(a) == key(&g[0])), "{g:?}");
        }
        let desc: std::collections::HashSet<String> =
            shapes.iter().map(|a| format!("{a:?}")).collect();
        assert_eq!(desc.len(), shapes.len(), "a shape appears twice");
    }

    /// Each boot's guest deadlines are derived from what its plans wait for, and stay within
    /// twice the whole boot's steps run one after another (the turns its workloads take
    /// between the guests once summed every wait on top of the one before: 523682 s for the
    /// suite's nine boots).
    #[test]
    fn each_boots_deadlines_stay_within_its_steps_end_to_end() {
        use crate::deadline;
        let vm = vm::VmOptions::default();
        for g in groups(&vm) {
            let shapes: Vec<_> = g.iter().map(shape).collect();
            let mut plans: Vec<_> = crate::smoke::plans::plans_for(&shapes)
                .into_iter()
                .map(|(_, p)| p)
                .collect();
            deadline::derive(&mut plans).unwrap();
            let serial: std::time::Duration = plans
                .iter()
                .flat_map(|p| &p.steps)
                .map(|s| {
                    if s.background {
                        deadline::GRACE
                    } else {
                        deadline::worst_case(s)
                    }
                })
                .sum();
            let bound = 2 * (deadline::BOOT_AND_SETUP + serial + deadline::GRACE);
            let guests = deadline::guest_deadlines(&plans).unwrap();
            for d in &guests {
                assert!(
                    *d <= bound,
                    "{} workload(s): {guests:?} over {bound:?}",
                    shapes.len()
                );
            }
        }
    }
}
