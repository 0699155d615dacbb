//! InfiniBand/RoCE queue pairs through RDMA CM: the RTR and RTS attributes the CM resolved
//! (`rdma_init_qp_attr`), applied through the typestate transitions.

use super::sys as cm;

use super::raw::Id;
use crate::error::{Error, Result, VerbOp};
use crate::local::LocalPort;
use crate::types::{Gid, Mtu, PortInfo};
use crate::{Init, PathClass, QueuePair, RemoteQp, RtrParams, Rts, RtsParams};

/// `rdma_init_qp_attr` for `state`.
fn cm_attr(id: &Id, state: ibverbs_sys::ibv_qp_state::Type) -> Result<ibverbs_sys::ibv_qp_attr> {
    // SAFETY: ibv_qp_attr is plain data; all zeros is a valid (empty) value.
    let mut attr: ibverbs_sys::ibv_qp_attr = unsafe { std::mem::zeroed() };
    attr.qp_state = state;
    let mut mask: libc::c_int = 0;
    // SAFETY: valid, connecting id; both out-pointers are writable.
    let rc = unsafe { cm::rdma_init_qp_attr(id.raw(), &mut attr, &mut mask) };
    if rc != 0 {
        return Err(Error::last_os(
            VerbOp::CmInitQpAttr,
            format!("state {state}"),
        ));
    }
    Ok(attr)
}

/// Our [`RtrParams`] from the CM's INIT -> RTR attributes, for our `port`, marked with `class`.
fn rtr_params(
    a: &ibverbs_sys::ibv_qp_attr,
    port: &PortInfo,
    class: PathClass,
) -> Result<RtrParams> {
    let path_mtu = Mtu::from_ibv(a.path_mtu).ok_or_else(|| {
        Error::invalid(
            format!("RDMA CM resolved path MTU code {}", a.path_mtu),
            "check the port's MTU with `ibv_devinfo`",
        )
    })?;
    // SAFETY: the GID union is 16 plain bytes in every member.
    let dgid = unsafe { a.ah_attr.grh.dgid.raw };
    Ok(RtrParams {
        remote: RemoteQp {
            qpn: a.dest_qp_num,
            psn: a.rq_psn,
            gid: Gid(dgid),
            lid: a.ah_attr.dlid,
        },
        path_mtu: Mtu::min(path_mtu, port.active_mtu),
        port: a.ah_attr.port_num,
        sgid_index: u32::from(a.ah_attr.grh.sgid_index),
        link_layer: port.link_layer,
        max_dest_rd_atomic: a.max_dest_rd_atomic,
        min_rnr_timer: a.min_rnr_timer,
        class,
    })
}

fn rts_params(a: &ibverbs_sys::ibv_qp_attr) -> RtsParams {
    RtsParams {
        sq_psn: a.sq_psn,
        timeout: a.timeout,
        retry_cnt: a.retry_cnt,
        rnr_retry: a.rnr_retry,
        max_rd_atomic: a.max_rd_atomic,
    }
}

impl QueuePair<Init> {
    /// INIT -> RTR -> RTS with what the CM resolved for `id`'s connection: the peer's QP and
    /// PSN, the path (GID, LID, MTU), our send PSN. `path` judges the destination GID first
    /// (on the passive side it comes from the connection request, which the requester
    /// writes); its `Err` leaves the queue pair where it was and is [`Error::CmPath`].
    pub(super) fn ready_by_cm(
        self,
        id: &Id,
        local: &LocalPort,
        path: &mut dyn FnMut(Gid) -> std::result::Result<(), String>,
    ) -> Result<QueuePair<Rts>> {
        let attr = cm_attr(id, ibverbs_sys::ibv_qp_state::IBV_QPS_RTR)?;
        let rtr = rtr_params(&attr, &local.port, local.class)?;
        path(rtr.remote.gid).map_err(|why| Error::CmPath { why })?;
        let qp = self.to_rtr(&rtr)?;
        let rts = rts_params(&cm_attr(id, ibverbs_sys::ibv_qp_state::IBV_QPS_RTS)?);
        qp.to_rts(&rts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CM's attributes become our RTR/RTS parameters field for field; the path MTU is
    /// never above our port's, and the path class is ours.
    #[test]
    fn the_cms_attributes_become_our_parameters() {
        let port = PortInfo {
            num: 1,
            state: crate::types::PortState::Active,
            link_layer: crate::types::LinkLayer::Ethernet,
            active_mtu: Mtu::M1024,
            max_mtu: Mtu::M4096,
            lid: 0,
            gid_tbl_len: 16,
        };
        let class = PathClass {
            traffic_class: 106,
            ..PathClass::default()
        };
        // SAFETY: plain data, zeros are valid.
        let mut a: ibverbs_sys::ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.path_mtu = ibverbs_sys::IBV_MTU_4096;
        a.dest_qp_num = 0x12;
        a.rq_psn = 0x345;
        a.sq_psn = 0x678;
        a.ah_attr.grh.dgid.raw = [0xfe; 16];
        a.ah_attr.grh.sgid_index = 3;
        a.ah_attr.dlid = 0;
        a.ah_attr.port_num = 1;
        a.max_dest_rd_atomic = 1;
        a.min_rnr_timer = 12;
        a.timeout = 18;
        a.retry_cnt = 7;
        a.rnr_retry = 7;
        a.max_rd_atomic = 1;
        let p = rtr_params(&a, &port, class).unwrap();
        assert_eq!(
            p.remote,
            RemoteQp {
                qpn: 0x12,
                psn: 0x345,
                gid: Gid([0xfe; 16]),
                lid: 0
            }
        );
        assert_eq!((p.path_mtu, p.port, p.sgid_index), (Mtu::M1024, 1, 3));
        assert_eq!(p.class, class);
        let r = rts_params(&a);
        assert_eq!((r.sq_psn, r.timeout, r.retry_cnt), (0x678, 18, 7));
        a.path_mtu = 9;
        assert!(rtr_params(&a, &port, class).is_err());
    }
}
