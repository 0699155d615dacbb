use super::*;
use crate::error::ErrorKind;
use crate::pd::MemoryRegion;

pub(crate) fn remote_qp() -> RemoteQp {
    RemoteQp {
        qpn: 0x11,
        psn: 0xabcdef,
        gid: "::ffff:10.0.0.2".parse().unwrap(),
        lid: 0,
    }
}

#[test]
fn the_ack_timeout_decodes_as_the_spec_says() {
    // 4.096 µs × 2^14: the default, about 67 ms.
    assert_eq!(
        RtsParams::default().ack_timeout(),
        Some(std::time::Duration::from_nanos(67_108_864))
    );
    let p = |timeout| RtsParams {
        timeout,
        ..RtsParams::default()
    };
    assert_eq!(p(0).ack_timeout(), None);
    assert_eq!(
        p(1).ack_timeout(),
        Some(std::time::Duration::from_nanos(8192))
    );
    assert!(p(31).ack_timeout().is_some_and(|d| d.as_secs() > 8000));
}

#[test]
fn the_path_class_marks_the_address_vector() {
    let p = RtrParams {
        class: PathClass {
            traffic_class: 106,
            hop_limit: 9,
            sl: 3,
        },
        ..RtrParams::new(remote_qp(), Mtu::M1024, 1, 1, LinkLayer::Ethernet)
    };
    let (a, _) = rtr_attr(&p).unwrap();
    assert_eq!(
        (
            a.ah_attr.grh.traffic_class,
            a.ah_attr.grh.hop_limit,
            a.ah_attr.sl
        ),
        (106, 9, 3)
    );
    // InfiniBand: no GRH, but the service level.
    let ib = RtrParams {
        link_layer: LinkLayer::InfiniBand,
        remote: RemoteQp {
            lid: 7,
            ..remote_qp()
        },
        ..p
    };
    let (a, _) = rtr_attr(&ib).unwrap();
    assert_eq!((a.ah_attr.is_global, a.ah_attr.sl), (0, 3));
}

#[test]
fn rtr_on_roce_has_a_global_address_vector_and_full_mask() {
    let p = RtrParams::new(remote_qp(), Mtu::M1024, 1, 1, LinkLayer::Ethernet);
    let (a, mask) = rtr_attr(&p).unwrap();
    assert_eq!(a.qp_state, ffi::ibv_qp_state::IBV_QPS_RTR);
    assert_eq!(a.ah_attr.is_global, 1);
    assert_eq!(Gid::from_ffi(&a.ah_attr.grh.dgid), remote_qp().gid);
    assert_eq!(a.ah_attr.grh.sgid_index, 1);
    assert_eq!(a.ah_attr.grh.hop_limit, 64);
    assert_eq!(a.ah_attr.port_num, 1);
    assert_eq!(a.path_mtu, ffi::IBV_MTU_1024);
    assert_eq!(a.dest_qp_num, 0x11);
    assert_eq!(a.rq_psn, 0xabcdef);
    assert_eq!(a.max_dest_rd_atomic, 1);
    assert_eq!(a.min_rnr_timer, 12);
    for bit in [
        M::IBV_QP_STATE,
        M::IBV_QP_AV,
        M::IBV_QP_PATH_MTU,
        M::IBV_QP_DEST_QPN,
        M::IBV_QP_RQ_PSN,
        M::IBV_QP_MAX_DEST_RD_ATOMIC,
        M::IBV_QP_MIN_RNR_TIMER,
    ] {
        assert_eq!(mask.0 & bit.0, bit.0, "mask lacks {bit:?}");
    }
    assert_eq!(mask.0 & M::IBV_QP_SQ_PSN.0, 0);
}

#[test]
fn rtr_rejects_bad_parameters() {
    // The default's zero remote GID must never reach ibv_modify_qp.
    assert!(rtr_attr(&RtrParams::default()).is_err());
    assert_eq!(RtrParams::default().max_dest_rd_atomic, 1);
    assert_eq!(RtrParams::default().min_rnr_timer, 12);
    let mut r = remote_qp();
    r.gid = Gid::ZERO;
    assert!(rtr_attr(&RtrParams::new(r, Mtu::M1024, 1, 1, LinkLayer::Ethernet)).is_err());
    let mut r = remote_qp();
    r.psn = 1 << 24;
    assert!(rtr_attr(&RtrParams::new(r, Mtu::M1024, 1, 1, LinkLayer::Ethernet)).is_err());
    let e = rtr_attr(&RtrParams::new(
        remote_qp(),
        Mtu::M1024,
        1,
        256,
        LinkLayer::Ethernet,
    ))
    .err();
    assert_eq!(e.map(|e| e.kind()), Some(ErrorKind::Usage));
    // InfiniBand routes by LID: 0 is rejected, a real LID gives a non-global AV.
    assert!(
        rtr_attr(&RtrParams::new(
            remote_qp(),
            Mtu::M2048,
            1,
            0,
            LinkLayer::InfiniBand
        ))
        .is_err()
    );
    let mut r = remote_qp();
    r.lid = 7;
    let (a, _) = rtr_attr(&RtrParams::new(r, Mtu::M2048, 1, 0, LinkLayer::InfiniBand)).unwrap();
    assert_eq!(a.ah_attr.is_global, 0);
    assert_eq!(a.ah_attr.dlid, 7);
}

#[test]
fn rts_and_init_attributes() {
    let (a, mask) = rts_attr(&RtsParams::new(0x123456)).unwrap();
    assert_eq!(a.qp_state, ffi::ibv_qp_state::IBV_QPS_RTS);
    assert_eq!(
        (
            a.sq_psn,
            a.timeout,
            a.retry_cnt,
            a.rnr_retry,
            a.max_rd_atomic
        ),
        (0x123456, 14, 7, 7, 1)
    );
    let want = M::IBV_QP_STATE
        | M::IBV_QP_TIMEOUT
        | M::IBV_QP_RETRY_CNT
        | M::IBV_QP_RNR_RETRY
        | M::IBV_QP_SQ_PSN
        | M::IBV_QP_MAX_QP_RD_ATOMIC;
    assert_eq!(mask.0, want.0);
    assert!(rts_attr(&RtsParams::new(1 << 24)).is_err());
    assert!(
        rts_attr(&RtsParams {
            retry_cnt: 8,
            ..RtsParams::default()
        })
        .is_err()
    );

    let (a, mask) = init_attr(1, Access::REMOTE_WRITE);
    assert_eq!(a.qp_state, ffi::ibv_qp_state::IBV_QPS_INIT);
    assert_eq!(a.port_num, 1);
    assert_eq!(a.pkey_index, 0);
    assert_eq!(
        a.qp_access_flags,
        ffi::ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0
    );
    let want = M::IBV_QP_STATE | M::IBV_QP_PKEY_INDEX | M::IBV_QP_PORT | M::IBV_QP_ACCESS_FLAGS;
    assert_eq!(mask.0, want.0);
}

#[test]
fn handles_are_send_and_sync() {
    fn is_send_sync<T: Send + Sync>() {}
    is_send_sync::<QueuePair<Rts>>();
    is_send_sync::<crate::Context>();
    is_send_sync::<ProtectionDomain>();
    is_send_sync::<MemoryRegion>();
    is_send_sync::<crate::ExposedRegion>();
    is_send_sync::<crate::OwnedBuffer>();
    is_send_sync::<CompletionQueue>();
}
