use super::*;
use crate::error::ErrorKind;

fn e(index: u32, gid: &str, kind: GidKind) -> GidEntry {
    GidEntry {
        index,
        gid: gid.parse().unwrap(),
        kind,
    }
}

/// What rxe over eth0 with 10.0.0.1 shows (measured in the guests): link-local at 0,
/// IPv4-mapped at 1.
fn rxe_table() -> Vec<GidEntry> {
    vec![
        e(0, "fe80::5054:ff:fe12:3401", GidKind::RoceV2),
        e(1, "::ffff:10.0.0.1", GidKind::RoceV2),
    ]
}

#[test]
fn auto_on_roce_prefers_ipv4_mapped_v2() {
    let g = select_gid_in(&rxe_table(), LinkLayer::Ethernet, 1, None).unwrap();
    assert_eq!(g.index, 1);
    assert!(g.gid.is_ipv4_mapped());
}

#[test]
fn auto_on_roce_order_of_preference() {
    // A Mellanox-style table: v1 and v2 pairs per address, unsorted input.
    let t = vec![
        e(3, "::ffff:192.168.1.5", GidKind::RoceV2),
        e(0, "fe80::1", GidKind::RoceV1),
        e(1, "fe80::1", GidKind::RoceV2),
        e(2, "::ffff:192.168.1.5", GidKind::RoceV1),
    ];
    assert_eq!(
        select_gid_in(&t, LinkLayer::Ethernet, 1, None)
            .unwrap()
            .index,
        3
    );
    // Without an IPv4-mapped v2: the first v2.
    let t2: Vec<_> = t.iter().copied().filter(|x| x.index != 3).collect();
    assert_eq!(
        select_gid_in(&t2, LinkLayer::Ethernet, 1, None)
            .unwrap()
            .index,
        1
    );
    // Only v1 left: the first v1.
    let t3: Vec<_> = t
        .iter()
        .copied()
        .filter(|x| x.kind == GidKind::RoceV1)
        .collect();
    assert_eq!(
        select_gid_in(&t3, LinkLayer::Ethernet, 1, None)
            .unwrap()
            .index,
        0
    );
    // IB-type GIDs are not usable on Ethernet.
    let t4 = vec![e(0, "fe80::1", GidKind::Ib)];
    let err = select_gid_in(&t4, LinkLayer::Ethernet, 2, None).unwrap_err();
    assert!(matches!(err, Error::NoUsableGid { port: 2, .. }), "{err}");
}

#[test]
fn zero_gids_are_never_selected() {
    let t = vec![e(0, "::", GidKind::RoceV2), e(1, "::", GidKind::RoceV2)];
    let err = select_gid_in(&t, LinkLayer::Ethernet, 1, None).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Port);
    let msg = err.to_string();
    assert!(msg.contains("no valid GID entries"), "{msg}");
    assert!(msg.contains("--gid-idx"), "{msg}");
    assert!(msg.contains("IP address"), "{msg}");
    let err = select_gid_in(&t, LinkLayer::Ethernet, 1, Some(0)).unwrap_err();
    assert!(matches!(err, Error::GidIndexInvalid { index: 0, .. }));
}

#[test]
fn explicit_index() {
    let g = select_gid_in(&rxe_table(), LinkLayer::Ethernet, 1, Some(0)).unwrap();
    assert_eq!(g.index, 0);
    assert!(g.gid.is_link_local());
    let err = select_gid_in(&rxe_table(), LinkLayer::Ethernet, 1, Some(5)).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Usage);
    let msg = err.to_string();
    assert!(msg.contains("GID index 5"), "{msg}");
    assert!(msg.contains("[1] ::ffff:10.0.0.1 (RoCE v2)"), "{msg}");
}

#[test]
fn auto_on_infiniband_is_index_zero() {
    let t = vec![e(1, "fe80::2", GidKind::Ib), e(0, "fe80::1", GidKind::Ib)];
    assert_eq!(
        select_gid_in(&t, LinkLayer::InfiniBand, 1, None)
            .unwrap()
            .index,
        0
    );
    assert_eq!(
        select_gid_in(&t, LinkLayer::Unspecified, 1, None)
            .unwrap()
            .index,
        0
    );
    let err = select_gid_in(&t[..1], LinkLayer::InfiniBand, 1, None).unwrap_err();
    assert!(matches!(err, Error::NoUsableGid { .. }));
}

#[test]
fn list_failure_classification() {
    assert!(matches!(
        classify_list_failure(libc::ENOSYS, true),
        Error::NoRdmaInKernel { errno } if errno == libc::ENOSYS
    ));
    assert!(matches!(
        classify_list_failure(libc::ENOENT, false),
        Error::NoRdmaInKernel { errno } if errno == libc::ENOENT
    ));
    assert!(matches!(
        classify_list_failure(0, false),
        Error::NoRdmaInKernel { .. }
    ));
    let e = classify_list_failure(libc::EACCES, true);
    assert!(matches!(
        e,
        Error::Verb {
            op: VerbOp::ListDevices,
            ..
        }
    ));
    assert_eq!(e.kind(), ErrorKind::NoDevice);
}

#[test]
fn port_attr_conversion() {
    // SAFETY: (test) ibv_port_attr is plain old data; all-zero is a valid value.
    let mut attr: ffi::ibv_port_attr = unsafe { std::mem::zeroed() };
    attr.state = ffi::ibv_port_state::IBV_PORT_ACTIVE;
    attr.active_mtu = ffi::IBV_MTU_1024;
    attr.max_mtu = ffi::IBV_MTU_4096;
    attr.link_layer = 2;
    attr.gid_tbl_len = 1024;
    let p = port_info_from_attr(1, &attr).unwrap();
    assert_eq!(p.state, PortState::Active);
    assert_eq!(p.active_mtu, Mtu::M1024);
    assert_eq!(p.max_mtu, Mtu::M4096);
    assert_eq!(p.link_layer, LinkLayer::Ethernet);
    assert_eq!(p.gid_tbl_len, 1024);
    attr.active_mtu = 0;
    assert!(port_info_from_attr(1, &attr).is_none());
    attr.state = ffi::ibv_port_state::IBV_PORT_DOWN;
    let p = port_info_from_attr(1, &attr).unwrap();
    assert_eq!((p.state, p.active_mtu), (PortState::Down, Mtu::M256));
}

/// This host kernel has no RDMA (no /sys/class/infiniband): opening must say so, with the
/// advice. On a host that has RDMA the test checks the other outcomes are sane instead.
#[test]
fn open_without_kernel_rdma_gives_advice() {
    let has_sysfs = Path::new(SYSFS_INFINIBAND).exists();
    match Context::open(None) {
        Err(e) if !has_sysfs => {
            assert!(matches!(e, Error::NoRdmaInKernel { .. }), "{e}");
            assert_eq!(e.kind(), ErrorKind::NoDevice);
            let msg = e.to_string();
            assert!(msg.contains("this kernel has no RDMA support"), "{msg}");
            assert!(msg.contains("modprobe rdma_rxe"), "{msg}");
            assert!(msg.contains("cargo xtask e2e"), "{msg}");
            assert!(matches!(devices(), Err(Error::NoRdmaInKernel { .. })));
            assert!(matches!(
                Context::open(Some("rxe0")),
                Err(Error::NoRdmaInKernel { .. })
            ));
        }
        Ok(ctx) => {
            assert!(has_sysfs, "opened a device without /sys/class/infiniband");
            assert!(!ctx.name().is_empty());
        }
        Err(e) => assert_eq!(e.kind(), ErrorKind::NoDevice, "{e}"),
    }
}
