//! A session's queue pair through RDMA CM (the hello's `cm`, PROTOCOL.md §3.8): a listener of
//! the session's own, offered in the accept with a fresh nonce, and the one connection request
//! that is the session's client's.

use super::ctx::{Failure, SessionCtx};
use rdma_core_rs::{ExposedRegion, Init, LocalPort, QueuePair, Rts};
use rdma_proto::framing::LineConn;
use rdma_proto::{CmOffer, ErrorCode, ServerHandshake};
use std::net::{IpAddr, TcpStream};
use std::sync::atomic::Ordering;
use std::time::Instant;

/// RDMA CM mode: an RDMA CM listener of this session's own on the address
/// the client came in on, offered in the accept with a fresh nonce; `qp` goes to RTS with the
/// one connection request that carries the nonce and comes from the TCP peer's address
/// (others are rejected), within the session's timeout.
#[allow(clippy::too_many_arguments)]
pub(crate) fn accept(
    s: &SessionCtx,
    local: &LocalPort,
    conn: &mut LineConn<TcpStream>,
    hs: &mut ServerHandshake,
    qp: QueuePair<Init>,
    mr: &ExposedRegion,
    psn: u32,
    rdma: impl Fn(rdma_core_rs::Error) -> Failure,
) -> Result<QueuePair<Rts>, Failure> {
    let sock = conn.get_ref();
    let (ours_ip, peer_ip) = match (sock.local_addr(), sock.peer_addr()) {
        (Ok(l), Ok(p)) => (l.ip().to_canonical(), p.ip().to_canonical()),
        _ => {
            return Err(Failure::new(
                ErrorCode::Internal,
                "the connection has no address",
            ));
        }
    };
    let listener = rdma_core_rs::cm::Listener::bind(ours_ip).map_err(&rdma)?;
    let mut nonce = [0u8; rdma_proto::cm::NONCE_LEN];
    getrandom::fill(&mut nonce)
        .map_err(|e| Failure::new(ErrorCode::Internal, format!("no randomness: {e}")))?;
    let offer = CmOffer {
        port: listener.port(),
        nonce,
    };
    let ours = rdma_app::verbs::to_wire(local.endpoint(&qp, psn));
    let accept = hs.accept_cm(ours, mr.addr(), mr.rkey(), mr.len() as u64, Some(offer))?;
    conn.send_line(&accept.to_line(), Instant::now() + s.timeout)?;
    let admit = |r: &rdma_core_rs::cm::Request<'_>| cm_admits(&offer, peer_ip, r);
    let conn = &*conn;
    let cancel = || s.stopping.load(Ordering::Acquire) || conn.peer_spoke();
    listener
        .accept(qp, local, &admit, Instant::now() + s.timeout, &cancel)
        .map_err(|e| {
            Failure::new(
                ErrorCode::RdmaSetup,
                format!("the client's queue pair did not connect through RDMA CM: {e}"),
            )
        })
}

/// Whether an RDMA CM connection request is this session's client's: from its TCP peer's
/// address, with the nonce of the session's offer. `Err` says why not (logged).
fn cm_admits(
    offer: &CmOffer,
    peer: IpAddr,
    req: &rdma_core_rs::cm::Request<'_>,
) -> Result<(), String> {
    match req.peer.map(|p| p.ip().to_canonical()) {
        Some(ip) if ip != peer.to_canonical() => {
            Err(format!("from {ip}, not the session's client {peer}"))
        }
        None => Err("from an unknown address".to_owned()),
        Some(_) if !offer.admits(req.private_data) => Err("without the session's nonce".to_owned()),
        Some(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only the session's client gets the CM connection: its address (IPv4-mapped or not) and
    /// the nonce, both.
    #[test]
    fn a_cm_request_needs_the_peers_address_and_the_nonce() {
        let offer = CmOffer {
            port: 9,
            nonce: [7; rdma_proto::cm::NONCE_LEN],
        };
        let peer: IpAddr = "10.0.0.2".parse().unwrap();
        let req = |from: &str, data: &'static [u8]| rdma_core_rs::cm::Request {
            peer: Some(from.parse().unwrap()),
            private_data: data,
        };
        let good = &[7u8; rdma_proto::cm::NONCE_LEN];
        assert_eq!(cm_admits(&offer, peer, &req("10.0.0.2:5000", good)), Ok(()));
        assert_eq!(
            cm_admits(&offer, peer, &req("[::ffff:10.0.0.2]:5000", good)),
            Ok(())
        );
        let other = cm_admits(&offer, peer, &req("10.0.0.3:5000", good)).unwrap_err();
        assert!(other.contains("not the session's client"), "{other}");
        let bad = cm_admits(&offer, peer, &req("10.0.0.2:5000", &[7; 15])).unwrap_err();
        assert!(bad.contains("nonce"), "{bad}");
        let unknown = rdma_core_rs::cm::Request {
            peer: None,
            private_data: good,
        };
        assert!(cm_admits(&offer, peer, &unknown).is_err());
    }
}
