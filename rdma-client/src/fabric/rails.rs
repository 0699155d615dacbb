//! `--rails`: the fabric check and the mesh on every rail of multi-rail nodes. Pure: which of
//! this node's rails are checked ([`select`]), which address of a peer is its address on each
//! of them ([`match_peer`], over what [`routes`] looked up), and, for `fabric report`, the lines split into one matrix per rail once
//! every node agrees on the rail count ([`split`]).
//!
//! A node's rails are its ACTIVE RoCE ports by device name (`rdma_core_rs::route::rails`),
//! rail `i` of every node checked against rail `i` of every other. There is no exchange
//! between the nodes: a peer's name resolves to one address per rail (DNS or `/etc/hosts`,
//! what `getent ahosts NODE` lists), and the rail an address is on is the one its route
//! leaves from here (the local address the kernel picks for it, held by that rail's GID
//! table). Addresses whose route leaves by no rail (a management network) are not rails.

use super::pair::PairResult;
use crate::session::Target;
use rdma_core_rs::route::Rail;
use rdma_proto::events::fabric::{RailMatrix, RailOf};
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs as _};

/// `--rails`: every rail this node has, or exactly this many (the first by device name).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rails {
    Auto,
    Count(usize),
}

/// Parses `auto` or a count of 1 to 64.
///
/// # Errors
/// Anything else, saying what is accepted.
pub fn parse(text: &str) -> Result<Rails, String> {
    if text == "auto" {
        return Ok(Rails::Auto);
    }
    match text.parse::<usize>() {
        Ok(n @ 1..=super::validate::MAX_RAILS) => Ok(Rails::Count(n)),
        _ => Err(format!(
            "{text:?} is not `auto` or a number of rails from 1 to 64"
        )),
    }
}

/// Why the rails cannot be checked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RailError {
    #[error(
        "{node} has no rail: no ACTIVE RDMA port holds an IP address in its GID table (see \
         `rdma link` and `ibv_devinfo -v`); --rails needs RoCE ports with addresses"
    )]
    NoRails { node: String },
    #[error(
        "--rails {want}: {node} has only {found} rail(s) ({list}); give at most {found}, or \
         `auto`"
    )]
    TooFew {
        node: String,
        want: usize,
        found: usize,
        list: String,
    },
    #[error(
        "{peer}'s name resolves to addresses on {reached} of {node}'s {rails} rails ({detail}): \
         the nodes disagree on their rails, or {peer}'s name lacks an address per rail. Every \
         node of a --rails check needs the same number of ACTIVE rails, and each node's name \
         one address on each (`getent ahosts {peer}`)"
    )]
    PeerMismatch {
        node: String,
        rails: usize,
        peer: String,
        reached: usize,
        detail: String,
    },
    #[error(
        "the nodes disagree on the number of rails ({counts}): every node of a --rails check \
         needs the same ACTIVE rails; see each node's `rdma link`"
    )]
    Counts { counts: String },
    #[error(
        "the input mixes lines of a --rails check with lines of a one-rail check: give the \
         lines of one run only"
    )]
    Mixed,
    #[error("a `fabric_pair` line of {writer} is on rail {index} of {rails}: out of range")]
    BadIndex {
        writer: String,
        index: usize,
        rails: usize,
    },
}

/// The rails of `node` to check: all of `found` (`auto`) or the first `n`.
///
/// # Errors
/// No rail at all, or fewer than asked for.
pub fn select(node: &str, found: Vec<Rail>, want: Rails) -> Result<Vec<Rail>, RailError> {
    if found.is_empty() {
        return Err(RailError::NoRails {
            node: node.to_owned(),
        });
    }
    match want {
        Rails::Auto => Ok(found),
        Rails::Count(n) if n <= found.len() => Ok(found.into_iter().take(n).collect()),
        Rails::Count(n) => Err(RailError::TooFew {
            node: node.to_owned(),
            want: n,
            found: found.len(),
            list: describe(&found),
        }),
    }
}

/// `rxe0 10.0.0.1, rxe1 10.0.1.1`.
fn describe(rails: &[Rail]) -> String {
    rails
        .iter()
        .map(|r| {
            let addrs: Vec<String> = r.addrs.iter().map(ToString::to_string).collect();
            format!("{} {}", r.device, addrs.join(" "))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// A peer on one rail: where to connect, and the local address that connection leaves from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerRail {
    pub target: IpAddr,
    pub source: IpAddr,
}

/// The peer's address on each of `rails` (this node's, `node`), from `routes`: each address
/// the peer's name resolved to, with the local address its route leaves from (`None`: no
/// route). An address whose source is on no rail is not on one; of several on one rail, the
/// first is taken.
///
/// # Errors
/// A rail of ours that no address of the peer is on (the nodes disagree on their rails).
pub fn match_peer(
    node: &str,
    rails: &[Rail],
    peer: &str,
    routes: &[(IpAddr, Option<IpAddr>)],
) -> Result<Vec<PeerRail>, RailError> {
    let mut found: Vec<Option<PeerRail>> = vec![None; rails.len()];
    for &(target, source) in routes {
        let Some(source) = source.map(|s| s.to_canonical()) else {
            continue;
        };
        if let Some(i) = rails.iter().position(|r| r.addrs.contains(&source))
            && found[i].is_none()
        {
            found[i] = Some(PeerRail {
                target: target.to_canonical(),
                source,
            });
        }
    }
    let reached = found.iter().flatten().count();
    if reached == rails.len() {
        return Ok(found.into_iter().flatten().collect());
    }
    let addrs: Vec<String> = routes.iter().map(|(a, _)| a.to_string()).collect();
    let missing: Vec<String> = rails
        .iter()
        .zip(&found)
        .enumerate()
        .filter(|(_, (_, f))| f.is_none())
        .map(|(i, (r, _))| format!("rail {i}, {}", describe(std::slice::from_ref(r))))
        .collect();
    Err(RailError::PeerMismatch {
        node: node.to_owned(),
        rails: rails.len(),
        peer: peer.to_owned(),
        reached,
        detail: format!(
            "{peer} resolves to {}; none on {}",
            if addrs.is_empty() {
                "nothing".to_owned()
            } else {
                addrs.join(", ")
            },
            missing.join("; ")
        ),
    })
}

/// The lines of one check: one-rail (`None`), or one group per rail, each with its
/// [`RailMatrix`] (the devices each rank wrote from).
pub type Split = Option<Vec<(RailMatrix, Vec<PairResult>)>>;

/// Every address `host` resolves to, with the local address its route leaves from.
///
/// # Errors
/// `host` does not resolve (the one-address lookup's error, which says what to give).
pub fn routes(host: &str, port: u16) -> color_eyre::Result<Vec<(IpAddr, Option<IpAddr>)>> {
    let mut ips: Vec<IpAddr> = Vec::new();
    match (host, port).to_socket_addrs() {
        Ok(found) => {
            for a in found {
                if !ips.contains(&a.ip()) {
                    ips.push(a.ip());
                }
            }
        }
        Err(_) => {
            Target::at(host, port)?;
        }
    }
    Ok(ips
        .into_iter()
        .map(|ip| {
            let t = Target {
                name: host.to_owned(),
                addr: SocketAddr::new(ip, port),
            };
            (ip, t.route_source())
        })
        .collect())
}

/// Splits the lines of a `--rails` check by rail, after checking that every writer has the
/// same number of rails.
///
/// # Errors
/// Lines with and without a rail, writers that disagree on the rail count (naming them), or
/// a rail index out of range.
pub fn split(pairs: &[PairResult]) -> Result<Split, RailError> {
    let with = pairs.iter().filter(|p| p.rail.is_some()).count();
    if with == 0 {
        return Ok(None);
    }
    let mut tagged: Vec<(&PairResult, &RailOf)> = Vec::with_capacity(pairs.len());
    for p in pairs {
        tagged.push((p, p.rail.as_ref().ok_or(RailError::Mixed)?));
    }
    // Each writer's count, by writer, then the writers of each count.
    let mut by_writer: BTreeMap<(usize, &str), usize> = BTreeMap::new();
    for (p, r) in &tagged {
        by_writer.insert((p.writer, &p.writer_host), r.rails);
    }
    let mut by_count: BTreeMap<usize, Vec<&str>> = BTreeMap::new();
    for (&(_, host), &n) in &by_writer {
        by_count.entry(n).or_default().push(host);
    }
    if by_count.len() > 1 || by_count.contains_key(&0) {
        let counts = by_count
            .iter()
            .rev()
            .map(|(n, hosts)| {
                let hosts: Vec<String> = hosts.iter().map(|h| rdma_proto::printable(h)).collect();
                format!(
                    "{}: {n} rail{}",
                    hosts.join(", "),
                    if *n == 1 { "" } else { "s" }
                )
            })
            .collect::<Vec<_>>()
            .join("; ");
        return Err(RailError::Counts { counts });
    }
    let rails = by_count.keys().next().copied().unwrap_or_default();
    let world = pairs.first().map_or(0, |p| p.world);
    let mut out: Vec<(RailMatrix, Vec<PairResult>)> = (0..rails)
        .map(|index| {
            (
                RailMatrix {
                    index,
                    rails,
                    devices: vec![None; world],
                },
                Vec::new(),
            )
        })
        .collect();
    for (p, r) in tagged {
        let Some((matrix, lines)) = out.get_mut(r.index) else {
            return Err(RailError::BadIndex {
                writer: rdma_proto::printable(&p.writer_host),
                index: r.index,
                rails,
            });
        };
        if let (Some(slot), Some(d)) = (matrix.devices.get_mut(p.writer), &r.device) {
            slot.get_or_insert_with(|| d.clone());
        }
        lines.push(p.clone());
    }
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::super::report::tests::ok;
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn rail(device: &str, addrs: &[&str]) -> Rail {
        Rail {
            device: device.into(),
            port: 1,
            addrs: addrs.iter().map(|a| ip(a)).collect(),
        }
    }

    /// node1's two rails, as in the guests.
    fn mine() -> Vec<Rail> {
        vec![rail("rxe0", &["10.0.0.1"]), rail("rxe1", &["10.0.1.1"])]
    }

    #[test]
    fn rails_are_auto_or_a_count() {
        assert_eq!(parse("auto"), Ok(Rails::Auto));
        assert_eq!(parse("2"), Ok(Rails::Count(2)));
        for bad in ["0", "65", "all", ""] {
            assert!(
                parse(bad).unwrap_err().contains("`auto` or a number"),
                "{bad}"
            );
        }
        assert_eq!(select("node1", mine(), Rails::Auto).unwrap().len(), 2);
        let one = select("node1", mine(), Rails::Count(1)).unwrap();
        assert_eq!(one, [rail("rxe0", &["10.0.0.1"])]);
        let e = select("node1", mine(), Rails::Count(3)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "--rails 3: node1 has only 2 rail(s) (rxe0 10.0.0.1, rxe1 10.0.1.1); give at most 2, or `auto`"
        );
        let e = select("node1", vec![], Rails::Auto).unwrap_err();
        assert!(e.to_string().starts_with("node1 has no rail"), "{e}");
    }

    #[test]
    fn each_peer_address_goes_to_the_rail_its_route_leaves_from() {
        // node2 listed rail 1 first, a management address with no rail, and an IPv4-mapped
        // source (a dual-stack socket's).
        let routes = [
            (ip("10.0.1.2"), Some(ip("10.0.1.1"))),
            (ip("192.168.5.2"), Some(ip("192.168.5.1"))),
            (ip("10.0.0.2"), Some(ip("::ffff:10.0.0.1"))),
            (ip("10.0.0.9"), Some(ip("10.0.0.1"))),
            (ip("172.16.0.2"), None),
        ];
        let got = match_peer("node1", &mine(), "node2", &routes).unwrap();
        assert_eq!(
            got,
            [
                PeerRail {
                    target: ip("10.0.0.2"),
                    source: ip("10.0.0.1")
                },
                PeerRail {
                    target: ip("10.0.1.2"),
                    source: ip("10.0.1.1")
                },
            ]
        );
    }

    #[test]
    fn a_peer_with_fewer_rails_is_an_error_naming_both_and_the_counts() {
        // node3 has one rail: its name resolves to its rail-0 address only.
        let routes = [(ip("10.0.0.3"), Some(ip("10.0.0.1")))];
        let e = match_peer("node1", &mine(), "node3", &routes).unwrap_err();
        assert_eq!(
            e,
            RailError::PeerMismatch {
                node: "node1".into(),
                rails: 2,
                peer: "node3".into(),
                reached: 1,
                detail: "node3 resolves to 10.0.0.3; none on rail 1, rxe1 10.0.1.1".into(),
            }
        );
        let text = e.to_string();
        assert!(
            text.starts_with("node3's name resolves to addresses on 1 of node1's 2 rails"),
            "{text}"
        );
        let e = match_peer("node1", &mine(), "node3", &[]).unwrap_err();
        assert!(e.to_string().contains("node3 resolves to nothing"), "{e}");
    }

    /// A line of writer `w` to target `t` on rail `index` of `rails`, from `device`.
    fn on(w: usize, t: usize, index: usize, rails: usize) -> PairResult {
        PairResult {
            rail: Some(RailOf {
                index,
                rails,
                device: Some(format!("rxe{index}")),
                addr: None,
                target_addr: None,
            }),
            ..ok(w, t, 10.0, Some(100.0))
        }
    }

    #[test]
    fn lines_split_into_one_matrix_per_rail() {
        let mut v = Vec::new();
        for w in 0..3 {
            for t in (0..3).filter(|&t| t != w) {
                v.extend([on(w, t, 0, 2), on(w, t, 1, 2)]);
            }
        }
        let s = split(&v).unwrap().unwrap();
        assert_eq!(s.len(), 2);
        for (i, (m, lines)) in s.iter().enumerate() {
            assert_eq!((m.index, m.rails), (i, 2));
            assert_eq!(m.devices, vec![Some(format!("rxe{i}")); 3]);
            assert_eq!(lines.len(), 6);
            assert!(lines.iter().all(|p| p.rail.as_ref().unwrap().index == i));
        }
        // A one-rail check's lines are not split.
        assert_eq!(split(&[ok(0, 1, 1.0, None)]).unwrap(), None);
    }

    #[test]
    fn nodes_that_disagree_on_the_rail_count_are_named_with_their_counts() {
        // node3 (rank 2) has one rail, the others two.
        let mut v = vec![
            on(0, 1, 0, 2),
            on(0, 1, 1, 2),
            on(1, 0, 1, 2),
            on(2, 0, 0, 1),
        ];
        let e = split(&v).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the nodes disagree on the number of rails (node1, node2: 2 rails; node3: 1 rail): \
             every node of a --rails check needs the same ACTIVE rails; see each node's `rdma link`"
        );
        // A node that found no rail at all is named too, even alone.
        let e = split(&[on(2, 0, 0, 0)]).unwrap_err();
        assert!(e.to_string().contains("(node3: 0 rails)"), "{e}");
        v.push(ok(1, 2, 1.0, None));
        assert_eq!(split(&v).unwrap_err(), RailError::Mixed);
        let e = split(&[on(0, 1, 2, 2)]).unwrap_err();
        assert!(matches!(e, RailError::BadIndex { index: 2, .. }), "{e}");
    }
}
