//! Who may use the server: client address allow-list and the shared access token.

use ipnet::IpNet;
use std::net::IpAddr;

// The token is read as both binaries read it: from a file only its owner can read, else from
// the environment (rdma-core-rs's `app::token`).
pub use rdma_proto::app::token::{TOKEN_ENV, TokenError as AccessError, load as load_token};

/// Whether a client address passes `--allow` (an empty list allows everyone).
pub fn allowed(allow: &[IpNet], peer: IpAddr) -> bool {
    let peer = peer.to_canonical();
    allow.is_empty() || allow.iter().any(|net| net.contains(&peer))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allow_list_matches_networks_and_mapped_addresses() {
        let nets: Vec<IpNet> = vec!["10.0.0.0/24".parse().unwrap(), "fd00::/8".parse().unwrap()];
        assert!(allowed(&nets, "10.0.0.7".parse().unwrap()));
        assert!(allowed(&nets, "::ffff:10.0.0.7".parse().unwrap()));
        assert!(allowed(&nets, "fd12::1".parse().unwrap()));
        assert!(!allowed(&nets, "10.0.1.7".parse().unwrap()));
        assert!(!allowed(&nets, "127.0.0.1".parse().unwrap()));
        assert!(allowed(&[], "192.0.2.1".parse().unwrap()));
    }
}
