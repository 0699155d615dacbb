use super::*;

#[test]
fn gid_ipv6_roundtrip_and_mapping() {
    let g: Gid = "::ffff:10.0.0.1".parse().unwrap();
    assert!(g.is_ipv4_mapped());
    assert!(!g.is_zero());
    assert!(!g.is_link_local());
    assert_eq!(g.0[12..], [10, 0, 0, 1]);
    assert_eq!(g.to_string(), "::ffff:10.0.0.1");
    let ll: Gid = "fe80::5054:ff:fe12:3401".parse().unwrap();
    assert!(ll.is_link_local());
    assert!(!ll.is_ipv4_mapped());
    let back: Ipv6Addr = ll.into();
    assert_eq!(Gid::from(back), ll);
    assert!(Gid::ZERO.is_zero());
    assert!(!Gid::ZERO.is_ipv4_mapped());
    // ::ffff:0:0/96 needs the ffff marker exactly at bytes 10..12.
    let mut almost = g;
    almost.0[9] = 1;
    assert!(!almost.is_ipv4_mapped());
    assert_eq!(format!("{g:?}"), "Gid(::ffff:10.0.0.1)");
}

#[test]
fn gid_ffi_roundtrip() {
    let g: Gid = "2001:db8::1".parse().unwrap();
    assert_eq!(Gid::from_ffi(&g.to_ffi()), g);
}

#[test]
fn mtu_conversions() {
    for m in Mtu::ALL {
        assert_eq!(Mtu::from_bytes(m.bytes()), Some(m));
        assert_eq!(Mtu::from_ibv(m.to_ibv()), Some(m));
    }
    assert_eq!(Mtu::M1024.to_ibv(), 3);
    assert_eq!(Mtu::from_ibv(0), None);
    assert_eq!(Mtu::from_ibv(6), None);
    assert_eq!(Mtu::from_bytes(1500), None);
    assert_eq!(Mtu::from_bytes(0), None);
    assert_eq!(Mtu::M4096.min(Mtu::M1024), Mtu::M1024);
    assert_eq!(Mtu::min(Mtu::M256, Mtu::M2048), Mtu::M256);
    assert_eq!(Mtu::M512.min(Mtu::M512), Mtu::M512);
    assert_eq!(Mtu::M2048.to_string(), "2048");
}

#[test]
fn access_flags() {
    let server = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
    assert!(server.contains(Access::REMOTE_WRITE));
    assert!(!server.contains(Access::REMOTE_READ));
    assert!(server.contains(Access::NONE));
    assert_eq!(server.bits(), 1 | 2);
    assert_eq!(format!("{server:?}"), "Access(LOCAL_WRITE | REMOTE_WRITE)");
    assert_eq!(format!("{:?}", Access::NONE), "Access(NONE)");
    let mut a = Access::NONE;
    a |= Access::REMOTE_READ;
    assert_eq!(format!("{a:?}"), "Access(REMOTE_READ)");
    assert_eq!(
        format!("{:?}", Access(0x100 | 4)),
        "Access(REMOTE_READ | 0x100)"
    );
}

#[test]
fn enum_conversions() {
    assert_eq!(PortState::from_ibv(4), PortState::Active);
    assert_eq!(PortState::from_ibv(1), PortState::Down);
    assert_eq!(PortState::from_ibv(0), PortState::Other(0));
    assert_eq!(PortState::Down.to_string(), "DOWN");
    assert_eq!(LinkLayer::from_ibv(2), LinkLayer::Ethernet);
    assert_eq!(LinkLayer::from_ibv(1), LinkLayer::InfiniBand);
    assert_eq!(LinkLayer::from_ibv(0), LinkLayer::Unspecified);
    assert_eq!(LinkLayer::from_ibv(9), LinkLayer::Unspecified);
    assert_eq!(GidKind::from_ibv(2), Some(GidKind::RoceV2));
    assert_eq!(GidKind::from_ibv(1), Some(GidKind::RoceV1));
    assert_eq!(GidKind::from_ibv(0), Some(GidKind::Ib));
    assert_eq!(GidKind::from_ibv(7), None);
    assert_eq!(WcOpcode::from_ibv(1), WcOpcode::RdmaWrite);
    assert_eq!(WcOpcode::from_ibv(129), WcOpcode::RecvRdmaWithImm);
    assert_eq!(WcOpcode::from_ibv(128), WcOpcode::Recv);
    assert_eq!(WcOpcode::from_ibv(77), WcOpcode::Other(77));
    assert_eq!(WcStatus::from_ibv(0), WcStatus::Success);
    assert_eq!(WcStatus::from_ibv(10), WcStatus::RemAccessErr);
    assert_eq!(WcStatus::from_ibv(12), WcStatus::RetryExcErr);
    assert_eq!(WcStatus::from_ibv(13), WcStatus::RnrRetryExcErr);
    assert_eq!(WcStatus::from_ibv(5), WcStatus::WrFlushErr);
    assert_eq!(WcStatus::from_ibv(99), WcStatus::Other(99));
    assert_eq!(QpState::from_ibv(3), QpState::Rts);
    assert_eq!(QpState::from_ibv(6), QpState::Err);
}

#[test]
fn gid_table_description() {
    assert_eq!(describe_gid_table(&[]), "  (no valid GID entries)");
    let t = [
        GidEntry {
            index: 0,
            gid: "fe80::1".parse().unwrap(),
            kind: GidKind::RoceV2,
        },
        GidEntry {
            index: 1,
            gid: "::ffff:10.0.0.1".parse().unwrap(),
            kind: GidKind::RoceV2,
        },
    ];
    assert_eq!(
        describe_gid_table(&t),
        "  [0] fe80::1 (RoCE v2)\n  [1] ::ffff:10.0.0.1 (RoCE v2)"
    );
}
