//! Ties a hello's RDMA endpoint to the TCP connection it came on, so that a client cannot make
//! the server connect its queue pair (and, for a bench `lat` session, RDMA-Write its pongs) to
//! somebody else's GID: a reflection and amplification attack.
//!
//! On RoCE a GID *is* an IP address (RoCE v2: the IPv4-mapped or IPv6 address of the
//! interface; RoCE v1 and link-local: the interface's IPv6 link-local address), so the rule is
//! plain: the hello's GID must be the address the TCP connection comes from (an IPv4 peer as
//! `::ffff:a.b.c.d`). A peer on loopback is on this host: its GID must be one of this host's own
//! GIDs. On InfiniBand a LID and a GID are not the TCP address and cannot be checked against it;
//! there is nothing to bind ([`GidBinding::Unbound`]), and the server asks for a token instead.

use std::net::IpAddr;

use crate::error::ProtoError;
use crate::wire::Gid;

/// What a hello's GID must be, for one connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GidBinding {
    /// RoCE: the GID must be `peer` (the TCP peer's address, IPv4 as IPv4-mapped), or, when
    /// `peer` is loopback, one of `local` (this host's own GIDs).
    Peer {
        /// The TCP peer's address.
        peer: IpAddr,
        /// This host's GIDs (the server's port's GID table).
        local: Vec<Gid>,
    },
    /// Nothing to bind: InfiniBand, where a LID or GID is not the TCP address. A bench session
    /// there needs the token ([`ServerHandshake::bind`](crate::ServerHandshake::bind)).
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
    /// Checks the hello's `gid`.
    ///
    /// # Errors
    /// [`ProtoError::InvalidField`] naming `gid`, the address the connection comes from, and
    /// what to do.
    pub fn check(&self, gid: Gid) -> Result<(), ProtoError> {
        self.whose(gid).map_or(Ok(()), |whose| {
            Err(ProtoError::invalid(
                "hello",
                "gid",
                format!(
                    "{gid} is not {whose}: on RoCE the server connects only to the GID of the client's own \
                     TCP address. Announce the GID of the address you connect from (rdma-client \
                     --gid-index), or connect from the address of the GID you announce"
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
        self.whose(dgid).map_or(Ok(()), |whose| {
            Err(format!(
                "its RDMA CM path leads to GID {dgid}, which is not {whose}: on RoCE the server \
                 connects only to the GID of the client's own TCP address; connect through RDMA \
                 CM from the address you reach the server's TCP port from, with its own path"
            ))
        })
    }

    /// `None` when `gid` may be connected to; else whose GID it should have been.
    fn whose(&self, gid: Gid) -> Option<String> {
        let GidBinding::Peer { peer, local } = self else {
            return None;
        };
        let peer = peer.to_canonical();
        if gid == gid_of(peer) || (peer.is_loopback() && local.contains(&gid)) {
            return None;
        }
        Some(if peer.is_loopback() {
            "one of this host's own GIDs (the connection comes over loopback)".to_owned()
        } else {
            format!("{}, the address this connection comes from", gid_of(peer))
        })
    }
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
}
