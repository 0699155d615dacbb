//! The shapes `cargo xtask test` runs (`vm-smoke --suite`), one after the other.

use color_eyre::eyre::Result;

use super::{SmokeArgs, run};
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
            prepare_only: false,
            suite: false,
        }
    }
}

/// The guest infrastructure the later scenarios stand on, one `vm-smoke` each (10-20 s warm):
/// two NICs with eth0's link cut, IPv6-only NICs, siw with rping, the RoCE v2 capture.
/// What `cargo xtask test` runs as one phase.
pub fn suite(vm: &vm::VmOptions) -> Result<()> {
    let plain = || SmokeArgs::plain(vm);
    let runs = [
        SmokeArgs {
            nics: 2,
            dead_link: Some(0),
            ..plain()
        },
        SmokeArgs {
            ipv6: true,
            ..plain()
        },
        SmokeArgs {
            transport: LinkKind::Siw,
            ..plain()
        },
        SmokeArgs {
            capture: true,
            ..plain()
        },
        // rdma-write itself with no device flags: two NICs, each link dead in turn; IPv6-only.
        SmokeArgs {
            nics: 2,
            dead_link: Some(0),
            rdma_write: true,
            ..plain()
        },
        SmokeArgs {
            nics: 2,
            dead_link: Some(1),
            rdma_write: true,
            ..plain()
        },
        SmokeArgs {
            ipv6: true,
            rdma_write: true,
            ..plain()
        },
        // Through RDMA CM: on Soft-iWARP by itself (notify tcp; also over IPv6 and on two
        // NICs with eth0's link cut), on rxe with --cm.
        SmokeArgs {
            transport: LinkKind::Siw,
            rdma_write: true,
            ..plain()
        },
        SmokeArgs {
            transport: LinkKind::Siw,
            ipv6: true,
            rdma_write: true,
            ..plain()
        },
        SmokeArgs {
            transport: LinkKind::Siw,
            nics: 2,
            dead_link: Some(0),
            rdma_write: true,
            ..plain()
        },
        SmokeArgs {
            rdma_cm: true,
            rdma_write: true,
            cm_bad_nonce: true,
            ..plain()
        },
        // The bench on each transport and host shape, with no device flags.
        SmokeArgs {
            transport: LinkKind::Siw,
            rdma_write: true,
            bench: Some("lat".into()),
            ..plain()
        },
        SmokeArgs {
            transport: LinkKind::Siw,
            rdma_write: true,
            bench: Some("bw".into()),
            ..plain()
        },
        SmokeArgs {
            rdma_cm: true,
            rdma_write: true,
            bench: Some("bw".into()),
            ..plain()
        },
        SmokeArgs {
            nics: 2,
            dead_link: Some(0),
            rdma_write: true,
            bench: Some("lat".into()),
            ..plain()
        },
        SmokeArgs {
            ipv6: true,
            rdma_write: true,
            bench: Some("bw".into()),
            ..plain()
        },
        // --tclass reaches the IP header: DSCP 26 with ECN capable (0x6a), on every packet.
        SmokeArgs {
            rdma_write: true,
            tclass: Some(0x6a),
            capture: true,
            ..plain()
        },
    ];
    for a in &runs {
        run(a)?;
    }
    Ok(())
}
