//! Ties a peer's RDMA endpoint to the TCP connection it came on, both ways, so that neither
//! side can make the other connect its queue pair (and RDMA-Write) to somebody else's GID: a
//! reflection and amplification attack.
//!
//! * The server binds a hello's GID to the client's TCP address ([`GidBinding::check`],
//!   [`ServerHandshake::bind`](crate::ServerHandshake::bind)): a client cannot make the server
//!   connect its queue pair (and, for a bench `lat` session, write its pongs) to a third host.
//! * The client binds an accept's GID to the server's TCP address
//!   ([`GidBinding::check_accept`], [`ClientHandshake::bind`](crate::ClientHandshake::bind)): a
//!   server, or anything answering on its address, cannot make the client connect its queue
//!   pair and write its payload (or a bench sweep, or every mesh probe) to a third host.
//!
//! On RoCE a GID *is* an IP address (RoCE v2: the IPv4-mapped or IPv6 address of the
//! interface; RoCE v1 and link-local: the interface's IPv6 link-local address), so the rule is
//! plain: the peer's GID must be the address of the TCP connection's other end (an IPv4 peer
//! as `::ffff:a.b.c.d`). A peer on loopback is on this host: its GID must be one of this host's
//! own GIDs. On InfiniBand a LID and a GID are not the TCP address and cannot be checked
//! against it; there is nothing to bind ([`GidBinding::Unbound`]): the server asks for a token
//! instead, and the client trusts the server it chose (a residual risk, see SECURITY.md). An
//! RDMA CM session does not use the GID at all (its path is resolved from the TCP peer's own
//! address, and the server checks it with [`GidBinding::check_path`]).

use std::net::IpAddr;

use crate::error::ProtoError;
use crate::wire::Gid;

/// What the peer's GID (a client's hello's, a server's accept's) must be, for one connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GidBinding {
    /// RoCE: the GID must be `peer` (the TCP peer's address, IPv4 as IPv4-mapped), or, when
    /// `peer` is loopback, one of `local` (this host's own GIDs).
    Peer {
        /// The TCP peer's address: the client's for a server, the server's for a client.
        peer: IpAddr,
        /// This host's GIDs (the GID table of the port that connects the queue pair; only
        /// looked at when `peer` is loopback).
        local: Vec<Gid>,
    },
    /// Nothing to bind: InfiniBand, where a LID or GID is not the TCP address. A bench session
    /// there needs the token ([`ServerHandshake::bind`](crate::ServerHandshake::bind)); a
    /// client connects to the GID the server it chose announces.
    Unbound,
}

/// The GID a RoCE peer at `ip` announces: `::ffff:a.b.c.d` for IPv4, the address for IPv6.
#[must_use]
pub fn gid_of(ip: IpAddr) -> Gid {
    match ip.to_canonical() {
        IpAddr::V4(v4) => Gid::from(v4.to_ipv6_mapped()),
        IpAddr::V6(v6) => Gid::from(v6),
    }
}

impl GidBinding {
    /// The binding for a connection with `peer` on a port whose GIDs are `local`: RoCE
    /// ([`Peer`](Self::Peer)), or InfiniBand where `local` is `None` ([`Unbound`](Self::Unbound)).
    #[must_use]
    pub fn on_port(local: Option<&[Gid]>, peer: IpAddr) -> Self {
        match local {
            Some(local) => GidBinding::Peer {
                peer,
                local: local.to_vec(),
            },
            None => GidBinding::Unbound,
        }
    }

    /// Checks the hello's `gid` (the server's side).
    ///
    /// # Errors
    /// [`ProtoError::InvalidField`] naming `gid`, the address the connection comes from, and
    /// what to do.
    pub fn check(&self, gid: Gid) -> Result<(), ProtoError> {
        self.whose(gid, Side::Server).map_or(Ok(()), |whose| {
            Err(ProtoError::invalid(
                "hello",
                "gid",
                format!(
                    "{gid} is not {whose}: on RoCE the server connects only to the GID of the client's own \
                     TCP address. Announce the GID of the address you connect from (rdma-client \
                     --gid-idx), or connect from the address of the GID you announce"
                ),
            ))
        })
    }

    /// Checks the accept's `gid` (the client's side), before the client connects its queue
    /// pair to it. Not for an RDMA CM session, whose accept's GID connects nothing.
    ///
    /// # Errors
    /// [`ProtoError::InvalidField`] naming `gid`, the address the connection goes to, and what
    /// to do.
    pub fn check_accept(&self, gid: Gid) -> Result<(), ProtoError> {
        self.whose(gid, Side::Client).map_or(Ok(()), |whose| {
            Err(ProtoError::invalid(
                "accept",
                "gid",
                format!(
                    "{gid} is not {whose}: on RoCE the client connects its queue pair, and writes, \
                     only to the GID of the server's own TCP address, never to a third host the \
                     server names. Connect to the server at the address of the GID it announces, \
                     or have it announce the GID of the address you connect to (rdma-server \
                     --gid-idx)"
                ),
            ))
        })
    }

    /// Checks the destination GID of the path RDMA CM set up for a `cm` session (what the
    /// connection request said, which the requester writes itself): the same rule as
    /// [`check`](Self::check), so that a CM session cannot point the server's queue pair at a
    /// third host either.
    ///
    /// # Errors
    /// Why not, for the log and the client.
    pub fn check_path(&self, dgid: Gid) -> Result<(), String> {
        self.whose(dgid, Side::Server).map_or(Ok(()), |whose| {
            Err(format!(
                "its RDMA CM path leads to GID {dgid}, which is not {whose}: on RoCE the server \
                 connects only to the GID of the client's own TCP address; connect through RDMA \
                 CM from the address you reach the server's TCP port from, with its own path"
            ))
        })
    }

    /// `None` when `gid` may be connected to; else whose GID it should have been, told from
    /// `side`.
    fn whose(&self, gid: Gid, side: Side) -> Option<String> {
        let GidBinding::Peer { peer, local } = self else {
            return None;
        };
        let peer = peer.to_canonical();
        if gid == gid_of(peer) || (peer.is_loopback() && local.contains(&gid)) {
            return None;
        }
        Some(match (peer.is_loopback(), side) {
            (true, Side::Server) => {
                "one of this host's own GIDs (the connection comes over loopback)".to_owned()
            }
            (true, Side::Client) => {
                "one of this host's own GIDs (the server is reached over loopback)".to_owned()
            }
            (false, Side::Server) => {
                format!("{}, the address this connection comes from", gid_of(peer))
            }
            (false, Side::Client) => {
                format!("{}, the address this connection goes to", gid_of(peer))
            }
        })
    }
}

/// Which side checks: the server (the peer is the client, whose connection comes from it) or
/// the client (the peer is the server, whose address the connection goes to).
#[derive(Debug, Clone, Copy)]
enum Side {
    Server,
    Client,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;

    fn gid(s: &str) -> Gid {
        s.parse().unwrap()
    }

    /// Issue 16, item 1: a hello naming another host's GID is refused, naming the field.
    #[test]
    fn the_gid_must_be_the_peers_address() {
        let b = GidBinding::Peer {
            peer: "10.0.0.2".parse().unwrap(),
            local: vec![],
        };
        assert!(b.check(gid("::ffff:10.0.0.2")).is_ok());
        let e = b.check(gid("::ffff:10.0.0.9")).unwrap_err();
        assert_eq!(e.code(), ErrorCode::InvalidField);
        let shown = e.to_string();
        assert!(shown.contains("field `gid`"), "{shown}");
        assert!(
            shown.contains("::ffff:10.0.0.2, the address this connection comes from"),
            "{shown}"
        );
        // A mapped IPv4 peer (dual-stack listener) is the same peer.
        let mapped = GidBinding::Peer {
            peer: "::ffff:10.0.0.2".parse().unwrap(),
            local: vec![],
        };
        assert!(mapped.check(gid("::ffff:10.0.0.2")).is_ok());
        let v6 = GidBinding::Peer {
            peer: "fe80::5054:ff:fe12:3401".parse().unwrap(),
            local: vec![],
        };
        assert!(v6.check(gid("fe80::5054:ff:fe12:3401")).is_ok());
        assert!(v6.check(gid("fe80::5054:ff:fe12:3402")).is_err());
    }

    #[test]
    fn a_loopback_peer_may_use_only_this_hosts_gids() {
        let b = GidBinding::Peer {
            peer: "127.0.0.1".parse().unwrap(),
            local: vec![gid("::ffff:10.0.0.1"), gid("fe80::1")],
        };
        assert!(b.check(gid("::ffff:10.0.0.1")).is_ok());
        assert!(b.check(gid("fe80::1")).is_ok());
        let e = b.check(gid("::ffff:10.0.0.2")).unwrap_err().to_string();
        assert!(e.contains("this host's own GIDs"), "{e}");
        assert!(GidBinding::Unbound.check(gid("::ffff:192.0.2.1")).is_ok());
    }

    /// Issue 23, item 1: an RDMA CM path to a third host is refused, by the same rule as a
    /// hello's GID; the client's own path passes.
    #[test]
    fn a_cm_path_must_lead_to_the_peers_address() {
        let b = GidBinding::Peer {
            peer: "10.0.0.2".parse().unwrap(),
            local: vec![],
        };
        assert_eq!(b.check_path(gid("::ffff:10.0.0.2")), Ok(()));
        let e = b.check_path(gid("::ffff:10.0.0.3")).unwrap_err();
        assert!(e.contains("leads to GID ::ffff:10.0.0.3"), "{e}");
        assert!(e.contains("::ffff:10.0.0.2, the address"), "{e}");
        assert_eq!(
            GidBinding::Unbound.check_path(gid("::ffff:10.0.0.3")),
            Ok(())
        );
    }

    /// The client's side reads from its side: the address the connection goes to, the server
    /// reached over loopback; an `Unbound` port checks nothing.
    #[test]
    fn an_accepts_gid_must_be_the_servers_address() {
        let b = GidBinding::on_port(Some(&[]), "10.0.0.2".parse().unwrap());
        assert!(b.check_accept(gid("::ffff:10.0.0.2")).is_ok());
        let e = b.check_accept(gid("::ffff:10.0.0.9")).unwrap_err();
        assert_eq!(e.code(), ErrorCode::InvalidField);
        let shown = e.to_string();
        assert!(
            shown.contains("`accept`") && shown.contains("field `gid`"),
            "{shown}"
        );
        assert!(
            shown.contains(
                "::ffff:10.0.0.9 is not ::ffff:10.0.0.2, the address this connection goes to"
            ),
            "{shown}"
        );
        let lo = GidBinding::on_port(Some(&[gid("fe80::1")]), "::1".parse().unwrap());
        assert!(lo.check_accept(gid("fe80::1")).is_ok());
        let e = lo.check_accept(gid("fe80::2")).unwrap_err().to_string();
        assert!(e.contains("the server is reached over loopback"), "{e}");
        let ib = GidBinding::on_port(None, "10.0.0.2".parse().unwrap());
        assert_eq!(ib, GidBinding::Unbound);
        assert!(ib.check_accept(gid("::ffff:192.0.2.1")).is_ok());
    }
}
