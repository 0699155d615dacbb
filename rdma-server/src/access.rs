//! Who may use the server: client address allow-list and the shared access token.

use ipnet::IpNet;
use std::net::{IpAddr, SocketAddr};

// The token is read as both binaries read it: from a file only its owner can read, else from
// the environment (rdma-core-rs's `app::token`).
pub use rdma_app::token::{TOKEN_ENV, TokenError as AccessError, load as load_token};

/// Whether a client address passes `--allow` (an empty list allows everyone).
pub fn allowed(allow: &[IpNet], peer: IpAddr) -> bool {
    let peer = peer.to_canonical();
    allow.is_empty() || allow.iter().any(|net| in_family(net).contains(&peer))
}

/// `net` in the family its clients come in with: an IPv4-mapped IPv6 network (inside
/// `::ffff:0:0/96`) is the IPv4 network it maps, as a client's mapped address is its IPv4 one.
fn in_family(net: &IpNet) -> IpNet {
    match net {
        IpNet::V6(v6) if v6.prefix_len() >= 96 => v6
            .network()
            .to_ipv4_mapped()
            .and_then(|v4| IpNet::new(IpAddr::V4(v4), v6.prefix_len() - 96).ok())
            .unwrap_or(*net),
        _ => *net,
    }
}

/// The largest private range of `net`'s family (RFC 1918's 10.0.0.0/8, RFC 4193's
/// fc00::/7), with its prefix length: an allowed network broader than it admits public
/// addresses, hosts on the Internet.
fn widest_private(net: &IpNet) -> (&'static str, u8) {
    match net {
        IpNet::V4(_) => ("10.0.0.0/8", 8),
        IpNet::V6(_) => ("fc00::/7", 7),
    }
}

/// The name of `net`'s family.
fn family(net: &IpNet) -> &'static str {
    match net {
        IpNet::V4(_) => "IPv4",
        IpNet::V6(_) => "IPv6",
    }
}

/// What `--allow` admits that narrows nothing: the first network of the list's union (mapped
/// entries counted as IPv4, adjacent networks merged) broader than the largest private range
/// of its family, a whole family (`/0`) included, with the entries that make it up.
fn too_broad(allow: &[IpNet]) -> Option<(IpNet, Vec<IpNet>)> {
    let nets: Vec<IpNet> = allow.iter().map(in_family).collect();
    let wide = IpNet::aggregate(&nets)
        .into_iter()
        .find(|net| net.prefix_len() < widest_private(net).1)?;
    let entries = allow
        .iter()
        .filter(|n| wide.contains(&in_family(n)))
        .copied()
        .collect();
    Some((wide, entries))
}

/// Most `--allow` entries a warning names.
const NAMED_MAX: usize = 8;

/// The warning to print at start when the server is open to anyone who can reach it: it listens
/// beyond loopback (an unspecified address counts) with no token and no `--allow` that narrows
/// who may connect. An `--allow` list narrows nothing when its union, in either family, admits
/// more than that family's largest private range: a `/0`, `0.0.0.0/1` with `128.0.0.0/1`, all
/// of 2000::/3 (every global IPv6 address). With `--allow 10.0.0.0/8 --allow ::/0` every IPv6
/// host is admitted, so that list is no narrowing either. `None` when it is not exposed that
/// way.
#[must_use]
pub fn exposure_warning(
    listen: SocketAddr,
    token: bool,
    allow: &[IpNet],
    bench_max_bytes: u64,
) -> Option<String> {
    let loopback = listen.ip().to_canonical().is_loopback();
    let broad = too_broad(allow);
    let narrowed = !allow.is_empty() && broad.is_none();
    if loopback || token || narrowed {
        return None;
    }
    let bench = if bench_max_bytes > 0 {
        format!(", and have it serve bench sessions of up to {bench_max_bytes} bytes")
    } else {
        String::new()
    };
    let allow = match broad {
        Some((wide, entries)) if entries == [wide] && wide.prefix_len() == 0 => {
            format!("--allow {wide}, which admits every host of its address family")
        }
        Some((wide, entries)) => {
            let mut named: Vec<String> = entries
                .iter()
                .take(NAMED_MAX)
                .map(|n| format!("--allow {n}"))
                .collect();
            if entries.len() > NAMED_MAX {
                named.push(format!("and {} more", entries.len() - NAMED_MAX));
            }
            let admit = if entries.len() == 1 {
                "admits"
            } else {
                "together admit"
            };
            let what = if wide.prefix_len() == 0 {
                format!("every {} host ({wide})", family(&wide))
            } else {
                format!(
                    "{wide}, more than the largest private {} range ({}) and so hosts on the \
                     Internet",
                    family(&wide),
                    widest_private(&wide).0
                )
            };
            format!("{}, which {admit} {what}", named.join(" "))
        }
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

    fn cidrs(list: &[&str]) -> Vec<IpNet> {
        list.iter()
            .map(|n| n.parse().expect("a test CIDR"))
            .collect()
    }

    /// An `--allow` list whose union covers a whole family admits everyone of it just as a /0
    /// does, and is warned about the same way, naming the entries that do it; so is one that
    /// admits more than the largest private range of its family (10.0.0.0/8, fc00::/7: past
    /// it, public addresses), such as all of IPv6's global unicast 2000::/3. IPv4-mapped IPv6
    /// entries count as the IPv4 networks they are.
    #[test]
    fn an_allow_list_whose_union_admits_everyone_is_warned_about() {
        let any: SocketAddr = "[::]:7471".parse().unwrap();
        for (list, named) in [
            (
                &["0.0.0.0/1", "128.0.0.0/1"][..],
                &["0.0.0.0/1", "128.0.0.0/1"][..],
            ),
            (&["::/1", "8000::/1", "10.0.0.0/8"], &["::/1", "8000::/1"]),
            (&["2000::/3"], &["2000::/3"]),
            (
                &["2000::/4", "3000::/4", "fd00::/8"],
                &["2000::/4", "3000::/4"],
            ),
            (
                &["::ffff:0.0.0.0/97", "128.0.0.0/1"],
                &["::ffff:0.0.0.0/97", "128.0.0.0/1"],
            ),
            (
                &["0.0.0.0/2", "64.0.0.0/2", "192.168.0.0/16"],
                &["0.0.0.0/2", "64.0.0.0/2"],
            ),
            (&["10.0.0.0/7"], &["10.0.0.0/7"]),
        ] {
            let w = exposure_warning(any, false, &cidrs(list), 0);
            let w = w.unwrap_or_else(|| panic!("no warning for {list:?}"));
            assert!(w.starts_with("WARNING: "), "{w}");
            for n in named {
                assert!(w.contains(&format!("--allow {n}")), "{list:?}: {w}");
            }
            assert!(
                !w.contains("192.168.0.0/16") && !w.contains("fd00::/8"),
                "{w}"
            );
            assert!(!w.contains("  "), "{w}");
        }
        // Private ranges, however many, admit no stranger from the Internet: no warning.
        for list in [
            &["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7"][..],
            &["::ffff:10.0.0.0/104", "fe80::/10", "100.64.0.0/10"],
        ] {
            assert_eq!(
                exposure_warning(any, false, &cidrs(list), 0),
                None,
                "{list:?}"
            );
        }
        // A token narrows whatever the list says.
        assert_eq!(
            exposure_warning(any, true, &cidrs(&["0.0.0.0/1", "128.0.0.0/1"]), 0),
            None
        );
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
        // An IPv4-mapped entry admits the IPv4 clients it names, as the warning counts it.
        let mapped = cidrs(&["::ffff:10.0.0.0/120"]);
        assert!(allowed(&mapped, "10.0.0.7".parse().unwrap()));
        assert!(allowed(&mapped, "::ffff:10.0.0.7".parse().unwrap()));
        assert!(!allowed(&mapped, "10.0.1.7".parse().unwrap()));
    }
}
