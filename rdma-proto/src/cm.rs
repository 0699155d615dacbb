//! RDMA CM connection mode (feature `cm`, PROTOCOL.md §3.8): the JSON handshake still carries
//! the buffer, its key and the verdict, but the queue pairs are connected through the RDMA
//! connection manager instead of by the `qpn`/`psn`/`gid` the hello and accept carry. iWARP
//! needs it (its QPs reach RTS only through the CM); RoCE and InfiniBand may use it.
//!
//! The client asks with `hello.cm = true`, only to a server whose banner lists `"cm"`. The
//! server answers with [`CmOffer`] in `accept.cm`: the port of an RDMA CM listener it opened
//! for this session alone, and a nonce. The client connects there with the nonce as the CM
//! private data; the server takes only a connection request that carries the nonce and comes
//! from the TCP peer's address, so no one else can take the session's queue pair.

use std::fmt;
use std::net::IpAddr;

use serde::{Serialize, Serializer};
use subtle::ConstantTimeEq;

/// The banner feature that offers RDMA CM connection mode.
pub const FEATURE: &str = "cm";
/// Bytes of the nonce (hex in the accept: twice as many characters).
pub const NONCE_LEN: usize = 16;

/// Where and how the client connects its queue pair through RDMA CM (`accept.cm`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct CmOffer {
    /// The RDMA CM port the server listens on for this session (TCP port space; on iWARP a real
    /// TCP port).
    pub port: u16,
    /// What the client's connection request must carry as its private data.
    pub nonce: [u8; NONCE_LEN],
}

impl CmOffer {
    /// Whether a connection request's private data is this offer's nonce (constant time; the
    /// private data may be padded with zeros by the transport, e.g. InfiniBand's 56 bytes).
    #[must_use]
    pub fn admits(&self, private_data: &[u8]) -> bool {
        let Some((head, tail)) = private_data.split_at_checked(NONCE_LEN) else {
            return false;
        };
        bool::from(head.ct_eq(&self.nonce)) && tail.iter().all(|b| *b == 0)
    }

    /// Whether an RDMA CM connection request is the offer's session's client's: `from` (where
    /// it came from) is `peer`, the session's TCP peer (IPv4-mapped or not), and its
    /// `private_data` carries the nonce. `Err` says why not (for the log).
    ///
    /// # Errors
    /// From another address, an unknown one, or without the nonce.
    pub fn admits_request(
        &self,
        peer: IpAddr,
        from: Option<IpAddr>,
        private_data: &[u8],
    ) -> Result<(), String> {
        let peer = peer.to_canonical();
        match from.map(|ip| ip.to_canonical()) {
            Some(ip) if ip != peer => Err(format!("from {ip}, not the session's client {peer}")),
            None => Err("from an unknown address".to_owned()),
            Some(_) if !self.admits(private_data) => Err("without the session's nonce".to_owned()),
            Some(_) => Ok(()),
        }
    }

    /// The nonce as the accept carries it: 32 lowercase hex digits.
    #[must_use]
    pub fn nonce_hex(&self) -> String {
        hex::encode(self.nonce)
    }

    /// Parses the accept's nonce text; `None` unless exactly 32 hex digits.
    #[must_use]
    pub fn parse_nonce(text: &str) -> Option<[u8; NONCE_LEN]> {
        let mut nonce = [0u8; NONCE_LEN];
        hex::decode_to_slice(text, &mut nonce).ok()?;
        Some(nonce)
    }
}

/// The nonce is a session secret: never in logs.
impl fmt::Debug for CmOffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CmOffer")
            .field("port", &self.port)
            .field("nonce", &"<redacted>")
            .finish()
    }
}

impl Serialize for CmOffer {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct as _;
        let mut st = s.serialize_struct("CmOffer", 2)?;
        st.serialize_field("port", &self.port)?;
        st.serialize_field("nonce", &self.nonce_hex())?;
        st.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_nonce_admits_padding_included() {
        let offer = CmOffer {
            port: 7,
            nonce: [0xab; NONCE_LEN],
        };
        assert!(offer.admits(&[0xab; NONCE_LEN]));
        let mut padded = vec![0xab; NONCE_LEN];
        padded.extend([0; 40]);
        assert!(offer.admits(&padded));
        padded[NONCE_LEN + 3] = 1;
        assert!(!offer.admits(&padded));
        assert!(!offer.admits(&[0xab; NONCE_LEN - 1]));
        let mut wrong = [0xab; NONCE_LEN];
        wrong[15] = 0xac;
        assert!(!offer.admits(&wrong));
        assert!(!offer.admits(&[]));
    }

    /// Only the session's client gets the CM connection: its address (IPv4-mapped or not) and
    /// the nonce, both.
    #[test]
    fn a_cm_request_needs_the_peers_address_and_the_nonce() {
        let offer = CmOffer {
            port: 9,
            nonce: [7; NONCE_LEN],
        };
        let peer: IpAddr = "10.0.0.2".parse().unwrap();
        let ip = |s: &str| Some(s.parse::<IpAddr>().unwrap());
        let good = &[7u8; NONCE_LEN];
        assert_eq!(offer.admits_request(peer, ip("10.0.0.2"), good), Ok(()));
        assert_eq!(
            offer.admits_request(peer, ip("::ffff:10.0.0.2"), good),
            Ok(())
        );
        let other = offer
            .admits_request(peer, ip("10.0.0.3"), good)
            .unwrap_err();
        assert!(other.contains("not the session's client"), "{other}");
        let bad = offer
            .admits_request(peer, ip("10.0.0.2"), &[7; 15])
            .unwrap_err();
        assert!(bad.contains("nonce"), "{bad}");
        assert!(offer.admits_request(peer, None, good).is_err());
    }

    #[test]
    fn the_nonce_is_hex_on_the_wire_and_redacted_in_debug() {
        let offer = CmOffer {
            port: 40000,
            nonce: *b"0123456789abcdef",
        };
        let json = serde_json::to_string(&offer).unwrap();
        assert_eq!(
            json,
            r#"{"port":40000,"nonce":"30313233343536373839616263646566"}"#
        );
        assert_eq!(
            CmOffer::parse_nonce(&offer.nonce_hex()),
            Some(*b"0123456789abcdef")
        );
        assert_eq!(CmOffer::parse_nonce("abc"), None);
        assert_eq!(CmOffer::parse_nonce(&"zz".repeat(16)), None);
        assert!(!format!("{offer:?}").contains("3031"));
    }
}
