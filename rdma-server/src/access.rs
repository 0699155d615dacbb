//! Who may use the server: client address allow-list and the shared access token.

use ipnet::IpNet;
use std::net::{IpAddr, SocketAddr};

// The token is read as both binaries read it: from a file only its owner can read, else from
// the environment (rdma-core-rs's `app::token`).
pub use rdma_app::token::{TOKEN_ENV, TokenError as AccessError, load as load_token};

/// Whether a client address passes `--allow` (an empty list allows everyone).
pub fn allowed(allow: &[IpNet], peer: IpAddr) -> bool {
    let peer = peer.to_canonical();
    allow.is_empty() || allow.iter().any(|net| net.contains(&peer))
}

/// The warning to print at start when the server is open to anyone who can reach it: it listens
/// beyond loopback (an unspecified address counts) with no token and no `--allow` that narrows
/// who may connect. A `/0` network narrows nothing, in any family: with `--allow 10.0.0.0/8
/// --allow ::/0` every IPv6 host is admitted, so that list is no narrowing either. `None` when
/// it is not exposed that way.
#[must_use]
pub fn exposure_warning(
    listen: SocketAddr,
    token: bool,
    allow: &[IpNet],
    bench_max_bytes: u64,
) -> Option<String> {
    let loopback = listen.ip().to_canonical().is_loopback();
    let everyone = allow.iter().find(|n| n.prefix_len() == 0);
    let narrowed = !allow.is_empty() && everyone.is_none();
    if loopback || token || narrowed {
        return None;
    }
    let bench = if bench_max_bytes > 0 {
        format!(", and have it serve bench sessions of up to {bench_max_bytes} bytes")
    } else {
        String::new()
    };
    let allow = match everyone {
        Some(net) => format!("--allow {net}, which admits every host of its address family"),
        None => "no --allow".to_owned(),
    };
    Some(format!(
        "WARNING: listening on {listen} with no access token and {allow}: anyone who can reach \
         this port can RDMA-Write into this server's memory{bench}. Set --token-file (or \
         RDMA_WRITE_TOKEN) and/or --allow CIDR, or listen on 127.0.0.1; see SECURITY.md"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 16, item 3: the seed's zero-config start works but says loudly that it is open.
    #[test]
    fn an_open_server_beyond_loopback_is_warned_about() {
        let any: SocketAddr = "0.0.0.0:7471".parse().unwrap();
        let w = exposure_warning(any, false, &[], 8 << 20).unwrap();
        assert!(w.starts_with("WARNING: listening on 0.0.0.0:7471"), "{w}");
        assert!(w.contains("--token-file") && w.contains("--allow") && w.contains("8388608"));
        for open in ["[::]:7471", "10.0.0.1:7471", "[fd00::1]:1"] {
            assert!(
                exposure_warning(open.parse().unwrap(), false, &[], 0).is_some(),
                "{open}"
            );
        }
        let everyone: Vec<IpNet> = vec!["0.0.0.0/0".parse().unwrap()];
        assert!(exposure_warning(any, false, &everyone, 0).is_some());
        // Issue 23, item 10: a /0 in either family opens that family whatever else is listed.
        let v6_open: Vec<IpNet> = vec!["10.0.0.0/8".parse().unwrap(), "::/0".parse().unwrap()];
        let w = exposure_warning(any, false, &v6_open, 0).unwrap();
        assert!(w.contains("--allow ::/0, which admits every host"), "{w}");
        // Issue 23, item 13: one sentence, no runs of spaces from the source's line breaks.
        assert!(!w.contains("  "), "{w}");
        assert!(
            w.contains("anyone who can reach this port can RDMA-Write"),
            "{w}"
        );
        // Narrowed any of the three ways: no warning.
        assert_eq!(exposure_warning(any, true, &[], 8 << 20), None);
        let lan: Vec<IpNet> = vec!["10.0.0.0/24".parse().unwrap()];
        assert_eq!(exposure_warning(any, false, &lan, 8 << 20), None);
        for local in ["127.0.0.1:7471", "[::1]:7471", "[::ffff:127.0.0.1]:7471"] {
            assert_eq!(
                exposure_warning(local.parse().unwrap(), false, &[], 1),
                None,
                "{local}"
            );
        }
    }

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
