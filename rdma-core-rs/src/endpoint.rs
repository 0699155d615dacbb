//! [`Endpoint`], one side's queue pair as the two sides exchange it, and
//! [`QueuePair::connect_to`], which connects an `Init` queue pair to such an endpoint, and
//! [`LocalPort::endpoint`], which says ours: the seam above both the queue pair and the
//! local port, which neither of them needs.

use crate::error::{Error, Result};
use crate::local::LocalPort;
use crate::qp::{Init, QueuePair, RemoteQp, RtrParams, Rts, RtsParams};
use crate::types::{Gid, Mtu, PortInfo};

/// One side's queue pair as the two sides exchange it (out of band, e.g. in a handshake):
/// everything the other side needs to connect to it. Plain values; no wire format here: the
/// binaries' protocol converts to and from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// QP number (24 bits).
    pub qpn: u32,
    /// Initial send PSN (24 bits): the other side's receive PSN.
    pub psn: u32,
    /// The GID its address vector uses (RoCE: required).
    pub gid: Gid,
    /// Its port's LID (InfiniBand: required; RoCE: 0).
    pub lid: u16,
    /// Its port's active MTU in bytes (256, 512, 1024, 2048 or 4096).
    pub mtu: u32,
}

impl Endpoint {
    /// An endpoint from its parts.
    #[must_use]
    pub fn new(qpn: u32, psn: u32, gid: Gid, lid: u16, mtu: u32) -> Endpoint {
        Endpoint {
            qpn,
            psn,
            gid,
            lid,
            mtu,
        }
    }
}

impl LocalPort {
    /// This side of a connection through `qp`, for the peer: the QPN, our send PSN `psn` (give
    /// the same to [`QueuePair::connect_to`]), and this port's GID, LID and active MTU.
    #[must_use]
    pub fn endpoint<S>(&self, qp: &QueuePair<S>, psn: u32) -> Endpoint {
        Endpoint {
            qpn: qp.qpn(),
            psn,
            gid: self.gid.gid,
            lid: self.port.lid,
            mtu: self.port.active_mtu.bytes(),
        }
    }
}

impl QueuePair<Init> {
    /// INIT -> RTR -> RTS towards `peer`, on `local`'s port and GID, marked with its
    /// [`PathClass`](crate::PathClass): the path MTU is the smaller of both ports' active
    /// MTUs, our send PSN is `sq_psn` (the one sent to the peer with [`LocalPort::endpoint`]),
    /// the local ACK timeout `local.qp_timeout`, every other attribute is the [`RtrParams`] /
    /// [`RtsParams`] default.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an out-of-range peer (MTU, QPN, PSN, zero GID on RoCE, LID
    /// 0 on InfiniBand), [`Error::Verb`] ([`VerbOp::ModifyQpRtr`], [`VerbOp::ModifyQpRts`]); the
    /// QP is destroyed.
    ///
    /// [`VerbOp::ModifyQpRtr`]: crate::VerbOp::ModifyQpRtr
    /// [`VerbOp::ModifyQpRts`]: crate::VerbOp::ModifyQpRts
    pub fn connect_to(
        self,
        local: &LocalPort,
        peer: &Endpoint,
        sq_psn: u32,
    ) -> Result<QueuePair<Rts>> {
        let rtr = RtrParams {
            class: local.class,
            ..rtr_params_towards(&local.port, local.gid.index, peer)?
        };
        self.to_rtr(&rtr)?.to_rts(&RtsParams {
            timeout: local.qp_timeout,
            ..RtsParams::new(sq_psn)
        })
    }
}

/// The INIT -> RTR attributes that connect our `port` (GID `sgid_index`) to `peer`.
fn rtr_params_towards(port: &PortInfo, sgid_index: u32, peer: &Endpoint) -> Result<RtrParams> {
    let peer_mtu = Mtu::from_bytes(peer.mtu).ok_or_else(|| {
        Error::invalid(
            format!("the peer's MTU of {} bytes", peer.mtu),
            "an MTU is 256, 512, 1024, 2048 or 4096 bytes: check the peer's handshake data",
        )
    })?;
    let remote = RemoteQp {
        qpn: peer.qpn,
        psn: peer.psn,
        gid: peer.gid,
        lid: peer.lid,
    };
    Ok(RtrParams::new(
        remote,
        Mtu::min(port.active_mtu, peer_mtu),
        port.num,
        sgid_index,
        port.link_layer,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;
    use crate::qp::tests::remote_qp;
    use crate::types::LinkLayer;

    #[test]
    fn rtr_towards_a_peer_takes_the_smaller_mtu_and_our_port() {
        let port = PortInfo {
            num: 2,
            state: crate::types::PortState::Active,
            link_layer: LinkLayer::Ethernet,
            active_mtu: Mtu::M1024,
            max_mtu: Mtu::M4096,
            lid: 0,
            gid_tbl_len: 16,
        };
        let r = remote_qp();
        let peer = Endpoint::new(r.qpn, r.psn, r.gid, r.lid, 4096);
        let p = rtr_params_towards(&port, 3, &peer).unwrap();
        assert_eq!(p.remote, r);
        assert_eq!((p.path_mtu, p.port, p.sgid_index), (Mtu::M1024, 2, 3));
        assert_eq!(p.link_layer, LinkLayer::Ethernet);
        let small = Endpoint { mtu: 512, ..peer };
        assert_eq!(
            rtr_params_towards(&port, 3, &small).unwrap().path_mtu,
            Mtu::M512
        );
        let e = rtr_params_towards(&port, 3, &Endpoint { mtu: 1500, ..peer }).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Usage);
        assert!(e.to_string().contains("1500"), "{e}");
    }
}
