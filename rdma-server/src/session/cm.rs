//! A session's queue pair through RDMA CM (the hello's `cm`, PROTOCOL.md §3.8): a listener of
//! the session's own, offered in the accept with a fresh nonce, and the one connection request
//! that is the session's client's.

use super::ctx::SessionCtx;
use crate::failure::Failure;
use crate::output::{Event, LOGGED_REJECTS};
use rdma_core_rs::cm::{Gate, Request, Verdict};
use rdma_core_rs::{ExposedRegion, Init, LocalPort, QueuePair, Rts};
use rdma_proto::framing::LineConn;
use rdma_proto::{CmOffer, ErrorCode, GidBinding, ServerHandshake};
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
    id: u64,
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
    let mut gate = SessionGate {
        offer,
        peer: peer_ip,
        binding: hs.binding().clone(),
        out: &s.out,
        id,
        rejected: 0,
        rejected_own: 0,
    };
    let conn = &*conn;
    let cancel = || s.stopping.load(Ordering::Acquire) || conn.peer_spoke();
    listener
        .accept(qp, local, &mut gate, Instant::now() + s.timeout, &cancel)
        .map_err(|e| {
            // The stop cancels the wait: the session ends by it, not by the client.
            let code = if s.stopping.load(Ordering::Acquire) {
                ErrorCode::ShuttingDown
            } else {
                ErrorCode::RdmaSetup
            };
            Failure::new(
                code,
                format!("the client's queue pair did not connect through RDMA CM: {e}"),
            )
        })
}

/// Rejected requests from the session's own client address (the TCP peer's) after which the
/// session stops waiting for its client's request (a client that keeps getting it wrong).
/// Requests from any other address, or none, are rejected without counting towards it: a
/// stranger must not be able to end someone else's session. They are bounded by the session's
/// deadline (`--timeout`), and logged only for the first [`LOGGED_REJECTS`].
const MAX_REJECTS: u32 = 16;

/// A session's judge of the RDMA CM requests to its listener: the client's only (its address,
/// the nonce), along the path to its own GID (issue 23, items 1 and 4).
struct SessionGate<'a> {
    offer: CmOffer,
    peer: IpAddr,
    /// The session's binding: the path must lead where a hello's GID must be.
    binding: GidBinding,
    out: &'a crate::output::Output,
    id: u64,
    /// Rejected requests from anyone (for the log's rate limit).
    rejected: u32,
    /// Rejected requests from the session's client address (for [`MAX_REJECTS`]).
    rejected_own: u32,
}

impl Gate for SessionGate<'_> {
    fn request(&mut self, req: &Request<'_>) -> Verdict {
        let from = req.peer.map(|p| p.ip());
        let Err(why) = self.offer.admits_request(self.peer, from, req.private_data) else {
            return Verdict::Take;
        };
        self.rejected += 1;
        let own = from.is_some_and(|ip| ip.to_canonical() == self.peer.to_canonical());
        if own {
            self.rejected_own += 1;
        }
        let give_up = self.rejected_own >= MAX_REJECTS;
        if self.rejected <= LOGGED_REJECTS || give_up {
            let peer = req.peer.map(|p| p.to_string());
            let id = self.id;
            let rejected = self.rejected;
            self.out.emit(&Event::CmRejected {
                session: id,
                peer: peer.as_deref().map(Into::into),
                why: why.as_str().into(),
                rejected,
            });
        }
        if give_up {
            Verdict::GiveUp
        } else {
            Verdict::Reject
        }
    }

    fn path(&mut self, dgid: rdma_core_rs::Gid) -> Result<(), String> {
        self.binding.check_path(rdma_proto::Gid(dgid.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gate(out: &crate::output::Output) -> SessionGate<'_> {
        SessionGate {
            offer: CmOffer {
                port: 9,
                nonce: [7; rdma_proto::cm::NONCE_LEN],
            },
            peer: "10.0.0.2".parse().unwrap(),
            binding: GidBinding::Peer {
                peer: "10.0.0.2".parse().unwrap(),
                local: vec![],
            },
            out,
            id: 1,
            rejected: 0,
            rejected_own: 0,
        }
    }

    fn request<'a>(from: &str, data: &'a [u8]) -> Request<'a> {
        Request {
            peer: Some(from.parse().unwrap()),
            private_data: data,
        }
    }

    /// Issue 23, item 4: wrong requests are rejected, and after MAX_REJECTS from the client's
    /// own address the session gives up instead of waiting on (its deadline is checked before
    /// every event in rdma-core-rs too); the client's own request is taken.
    #[test]
    fn a_session_takes_its_clients_request_and_gives_up_on_a_flood() {
        let out = crate::output::Output::new(true);
        let mut g = gate(&out);
        let good = [7u8; rdma_proto::cm::NONCE_LEN];
        assert_eq!(g.request(&request("10.0.0.2:5000", &good)), Verdict::Take);
        let mut g = gate(&out);
        for _ in 1..MAX_REJECTS {
            assert_eq!(
                g.request(&request("10.0.0.2:5000", &[1; 16])),
                Verdict::Reject
            );
        }
        assert_eq!(
            g.request(&request("10.0.0.2:5000", &[0; 16])),
            Verdict::GiveUp
        );
        assert_eq!((g.rejected, g.rejected_own), (MAX_REJECTS, MAX_REJECTS));
    }

    /// Strangers' requests (another address, or none) are rejected, however many, but do not
    /// end the session: a stranger cannot use the cap to cut someone else's session short
    /// (its deadline still bounds the wait). The client's own request is taken after them.
    #[test]
    fn strangers_cannot_end_a_session_by_the_reject_cap() {
        let out = crate::output::Output::new(true);
        let mut g = gate(&out);
        let good = [7u8; rdma_proto::cm::NONCE_LEN];
        for i in 0..10 * MAX_REJECTS {
            let r = g.request(&request(&format!("10.0.0.{}:5000", 3 + i % 200), &good));
            assert_eq!(r, Verdict::Reject, "stranger's request {i}");
            let unknown = Request {
                peer: None,
                private_data: &good,
            };
            assert_eq!(g.request(&unknown), Verdict::Reject, "unknown address {i}");
        }
        assert_eq!(g.request(&request("10.0.0.2:5001", &good)), Verdict::Take);
    }

    /// Issue 23, item 1: the path of the request taken must lead to the TCP peer's GID; one
    /// that points the server's queue pair at a third host is refused.
    #[test]
    fn the_path_must_lead_to_the_client() {
        let out = crate::output::Output::new(true);
        let mut g = gate(&out);
        let gid = |s: &str| rdma_core_rs::Gid(s.parse::<std::net::Ipv6Addr>().unwrap().octets());
        assert_eq!(g.path(gid("::ffff:10.0.0.2")), Ok(()));
        let e = g.path(gid("::ffff:10.0.0.9")).unwrap_err();
        assert!(e.contains("::ffff:10.0.0.9"), "{e}");
    }
}
