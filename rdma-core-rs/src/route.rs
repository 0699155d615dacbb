//! Which device, port and GID carry a local IP address: the choice that needs no flags.
//!
//! A connection's TCP socket knows its local address (`getsockname`). On RoCE the port to use
//! is the one whose GID table holds that address: `::ffff:a.b.c.d` for IPv4, the address
//! itself for IPv6, a RoCE v2 entry before a RoCE v1 one. Looking across every ACTIVE port of
//! every device picks the NIC the traffic really takes, where "the first device" tests the
//! wrong rail, or fails, on a host with several. InfiniBand GID tables hold no IP address: an
//! address reached over IPoIB cannot be matched that way, so a host whose only ACTIVE ports
//! are InfiniBand and that has exactly one of them uses it (and says why); with several, the
//! user names the device.
//!
//! [`choose`] is the pure rule over a snapshot of the ports ([`Candidate`]), so it is tested
//! without a device; [`LocalPort::open_for`](crate::LocalPort::open_for) takes that snapshot.

use std::fmt;
use std::net::IpAddr;

use crate::{Gid, GidEntry, GidKind, LinkLayer, PortInfo, PortState, describe_gid_table};

/// One port of one device, as the choice sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// The device's name (`rxe0`, `mlx5_1`).
    pub device: String,
    /// The port's attributes.
    pub port: PortInfo,
    /// Its valid GID entries.
    pub table: Vec<GidEntry>,
}

/// What [`choose`] picked, and why, for the user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Choice {
    /// Index into the candidates.
    pub candidate: usize,
    /// The GID for the address vector.
    pub gid: GidEntry,
    /// Why this one, as a phrase (`"holds ::ffff:10.0.1.2 (RoCE v2)"`).
    pub why: String,
}

/// Why no port could be chosen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NoChoice {
    /// No ACTIVE port's GID table holds the address (the ports seen are listed).
    NoGidFor {
        /// The local address.
        addr: IpAddr,
        /// Every port looked at, with its state and GIDs.
        seen: String,
    },
    /// The named device does not carry the address, but another one does.
    DeviceMismatch {
        /// The device asked for.
        wanted: String,
        /// The local address.
        addr: IpAddr,
        /// The device and port that hold it.
        carrier: String,
    },
    /// The port that holds the address is not ACTIVE (its link is down).
    HolderNotActive {
        /// The local address.
        addr: IpAddr,
        /// The device and port that hold it.
        holder: String,
        /// Its state.
        state: PortState,
    },
    /// Only InfiniBand ports are ACTIVE, several of them: an IP address does not say which.
    AmbiguousInfiniBand {
        /// The local address.
        addr: IpAddr,
        /// The ACTIVE InfiniBand ports.
        ports: Vec<String>,
    },
}

impl fmt::Display for NoChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NoChoice::NoGidFor { addr, seen } => write!(
                f,
                "no ACTIVE RDMA port has a GID for {addr} (the local address of this \
                 connection), so its traffic would not leave through an RDMA NIC. Is RoCE/rxe \
                 on the interface that holds {addr} (`rdma link`)? Or pass --ib-dev and \
                 --gid-idx. Ports seen:\n{seen}"
            ),
            NoChoice::DeviceMismatch {
                wanted,
                addr,
                carrier,
            } => write!(
                f,
                "--ib-dev {wanted} does not carry {addr} (the local address of this \
                 connection), {carrier} does: drop --ib-dev, pass --ib-dev with that one, or \
                 connect through an address of {wanted}"
            ),
            NoChoice::HolderNotActive {
                addr,
                holder,
                state,
            } => write!(
                f,
                "{holder} holds {addr} (the local address of this connection) but is not ACTIVE \
                 (state {state}): check `rdma link` / `ibv_devinfo`; the netdev must be up"
            ),
            NoChoice::AmbiguousInfiniBand { addr, ports } => write!(
                f,
                "{addr} is reached over IP, and InfiniBand GID tables hold no IP address, so it \
                 does not say which of the ACTIVE InfiniBand ports ({}) to use: pass --ib-dev",
                ports.join(", ")
            ),
        }
    }
}

impl std::error::Error for NoChoice {}

/// The GID a RoCE port holds for `addr`: `::ffff:a.b.c.d` for IPv4 (and for an IPv4-mapped
/// IPv6 address, as a dual-stack socket reports IPv4 peers), the address itself for IPv6.
#[must_use]
pub fn gid_of(addr: IpAddr) -> Gid {
    match addr {
        IpAddr::V4(v4) => Gid::from(v4.to_ipv6_mapped()),
        IpAddr::V6(v6) => Gid::from(v6),
    }
}

fn name(c: &Candidate) -> String {
    format!("{} port {}", c.device, c.port.num)
}

/// Picks the port and GID for local address `addr` among `candidates`, restricted to `device`
/// when one is named (a named device that does not carry the address is an error naming the
/// one that does). See the module docs for the rule.
///
/// # Errors
/// [`NoChoice`], each saying what to do.
pub fn choose(
    candidates: &[Candidate],
    addr: IpAddr,
    device: Option<&str>,
) -> Result<Choice, NoChoice> {
    // A dual-stack socket's IPv4-mapped address is the IPv4 address it stands for.
    let addr = addr.to_canonical();
    let want = gid_of(addr);
    let active = |c: &Candidate| c.port.state == PortState::Active;
    let in_device = |c: &Candidate| device.is_none_or(|d| c.device == d);
    // The first ACTIVE port (among those `keep` lets through) that holds the address, RoCE v2
    // before v1.
    let holder = |keep: &dyn Fn(&Candidate) -> bool| {
        [GidKind::RoceV2, GidKind::RoceV1]
            .into_iter()
            .find_map(|kind| {
                candidates
                    .iter()
                    .enumerate()
                    .filter(|(_, c)| active(c) && keep(c))
                    .find_map(|(i, c)| {
                        let e = c.table.iter().find(|e| e.gid == want && e.kind == kind)?;
                        Some((i, *e))
                    })
            })
    };
    if let Some((i, gid)) = holder(&in_device) {
        return Ok(Choice {
            candidate: i,
            gid,
            why: format!(
                "holds {} ({}) at GID index {}",
                gid.gid, gid.kind, gid.index
            ),
        });
    }
    // Held, but only by a port that is down: that is what the user must hear.
    let down = candidates.iter().find(|c| {
        c.port.state != PortState::Active
            && in_device(c)
            && c.table
                .iter()
                .any(|e| e.gid == want && matches!(e.kind, GidKind::RoceV2 | GidKind::RoceV1))
    });
    if let Some(c) = down {
        return Err(NoChoice::HolderNotActive {
            addr,
            holder: name(c),
            state: c.port.state,
        });
    }
    if let (Some(wanted), Some((i, _))) = (device, holder(&|_| true)) {
        return Err(NoChoice::DeviceMismatch {
            wanted: wanted.to_owned(),
            addr,
            carrier: name(&candidates[i]),
        });
    }
    // No RoCE GID for it: InfiniBand, where IP addresses are not in the GID table.
    let ib: Vec<usize> = candidates
        .iter()
        .enumerate()
        .filter(|(_, c)| active(c) && c.port.link_layer == LinkLayer::InfiniBand && in_device(c))
        .map(|(i, _)| i)
        .collect();
    let any_roce = candidates
        .iter()
        .any(|c| active(c) && c.port.link_layer == LinkLayer::Ethernet);
    match ib.as_slice() {
        [i] if !any_roce || device.is_some() => {
            let c = &candidates[*i];
            let gid = c
                .table
                .iter()
                .find(|e| e.index == 0)
                .copied()
                .ok_or_else(|| no_gid(candidates, addr))?;
            Ok(Choice {
                candidate: *i,
                gid,
                why: if device.is_some() {
                    "the named InfiniBand device (IP addresses are not in IB GID tables)".to_owned()
                } else {
                    "the only ACTIVE InfiniBand port (IP addresses are not in IB GID tables)"
                        .to_owned()
                },
            })
        }
        [_, _, ..] if !any_roce => Err(NoChoice::AmbiguousInfiniBand {
            addr,
            ports: ib.iter().map(|i| name(&candidates[*i])).collect(),
        }),
        _ => Err(no_gid(candidates, addr)),
    }
}

/// One rail of a multi-rail host: an ACTIVE RoCE port and the IP addresses its GID table holds
/// (what traffic to that rail's peers leaves from).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rail {
    /// The device's name (`rxe1`, `mlx5_3`).
    pub device: String,
    /// Its port.
    pub port: u8,
    /// The addresses of its RoCE GIDs (IPv4 for `::ffff:a.b.c.d`; IPv6 link-local ones left
    /// out: no route leaves from them), each once, in table order.
    pub addrs: Vec<IpAddr>,
}

/// The rails among `candidates`: every ACTIVE port whose GID table holds an IP address (a RoCE
/// GID that is not link-local), ordered by device name and port, so every host of one kind
/// numbers its rails alike. InfiniBand ports hold no IP address and are not rails here.
#[must_use]
pub fn rails(candidates: &[Candidate]) -> Vec<Rail> {
    let mut out: Vec<Rail> = candidates
        .iter()
        .filter(|c| c.port.state == PortState::Active)
        .filter_map(|c| {
            let mut addrs: Vec<IpAddr> = Vec::new();
            for e in &c.table {
                if !matches!(e.kind, GidKind::RoceV2 | GidKind::RoceV1)
                    || e.gid.is_zero()
                    || e.gid.is_link_local()
                {
                    continue;
                }
                let ip = IpAddr::V6(e.gid.into()).to_canonical();
                if !addrs.contains(&ip) {
                    addrs.push(ip);
                }
            }
            (!addrs.is_empty()).then(|| Rail {
                device: c.device.clone(),
                port: c.port.num,
                addrs,
            })
        })
        .collect();
    out.sort_by(|a, b| (&a.device, a.port).cmp(&(&b.device, b.port)));
    out
}

fn no_gid(candidates: &[Candidate], addr: IpAddr) -> NoChoice {
    let seen = if candidates.is_empty() {
        "  (no ports)".to_owned()
    } else {
        candidates
            .iter()
            .map(|c| {
                format!(
                    "  {} ({}, {}):\n{}",
                    name(c),
                    c.port.state,
                    c.port.link_layer,
                    describe_gid_table(&c.table).replace("\n", "\n  ")
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    NoChoice::NoGidFor { addr, seen }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Mtu;

    fn port(num: u8, state: PortState, link_layer: LinkLayer) -> PortInfo {
        PortInfo {
            num,
            state,
            link_layer,
            active_mtu: Mtu::M1024,
            max_mtu: Mtu::M4096,
            lid: if link_layer == LinkLayer::InfiniBand {
                7
            } else {
                0
            },
            gid_tbl_len: 16,
        }
    }

    fn e(index: u32, gid: &str, kind: GidKind) -> GidEntry {
        GidEntry {
            index,
            gid: gid.parse().unwrap(),
            kind,
        }
    }

    fn roce(device: &str, state: PortState, gids: &[(u32, &str, GidKind)]) -> Candidate {
        Candidate {
            device: device.to_owned(),
            port: port(1, state, LinkLayer::Ethernet),
            table: gids.iter().map(|(i, g, k)| e(*i, g, *k)).collect(),
        }
    }

    /// Two rails as in the guests: rxe0 on eth0 (10.0.0.2), rxe1 on eth1 (10.0.1.2, fd00:1::2).
    fn two_rails() -> Vec<Candidate> {
        use GidKind::RoceV2;
        vec![
            roce(
                "rxe0",
                PortState::Active,
                &[
                    (0, "fe80::5054:ff:fe12:3402", RoceV2),
                    (1, "::ffff:10.0.0.2", RoceV2),
                ],
            ),
            roce(
                "rxe1",
                PortState::Active,
                &[
                    (0, "fe80::5054:ff:fe12:3502", RoceV2),
                    (1, "::ffff:10.0.1.2", RoceV2),
                    (2, "fd00:1::2", RoceV2),
                ],
            ),
        ]
    }

    #[test]
    fn rails_are_the_active_ports_with_an_address_in_device_order() {
        use GidKind::RoceV2;
        let mut c = two_rails();
        // Listed out of order, with a port that is down and one with only a link-local GID.
        c.reverse();
        c.push(roce(
            "rxe2",
            PortState::Down,
            &[(1, "::ffff:10.0.2.2", RoceV2)],
        ));
        c.push(roce(
            "rxe3",
            PortState::Active,
            &[(0, "fe80::5054:ff:fe12:3702", RoceV2)],
        ));
        let r = rails(&c);
        let names: Vec<&str> = r.iter().map(|r| r.device.as_str()).collect();
        assert_eq!(names, ["rxe0", "rxe1"]);
        assert_eq!(r[0].addrs, ["10.0.0.2".parse::<IpAddr>().unwrap()]);
        assert_eq!(
            r[1].addrs,
            [
                "10.0.1.2".parse::<IpAddr>().unwrap(),
                "fd00:1::2".parse().unwrap()
            ]
        );
        assert_eq!(r[1].port, 1);
        assert!(rails(&[]).is_empty());
    }

    #[test]
    fn the_port_that_holds_the_address_is_chosen_not_the_first_device() {
        let c = two_rails();
        let got = choose(&c, "10.0.1.2".parse().unwrap(), None).unwrap();
        assert_eq!((got.candidate, got.gid.index), (1, 1));
        assert_eq!(got.why, "holds ::ffff:10.0.1.2 (RoCE v2) at GID index 1");
        let got = choose(&c, "10.0.0.2".parse().unwrap(), None).unwrap();
        assert_eq!((got.candidate, got.gid.index), (0, 1));
    }

    #[test]
    fn ipv6_uses_the_address_itself_and_mapped_addresses_are_ipv4() {
        let c = two_rails();
        let got = choose(&c, "fd00:1::2".parse().unwrap(), None).unwrap();
        assert_eq!((got.candidate, got.gid.index), (1, 2));
        // A dual-stack socket reports an IPv4 peer as ::ffff:a.b.c.d.
        let got = choose(&c, "::ffff:10.0.1.2".parse().unwrap(), None).unwrap();
        assert_eq!((got.candidate, got.gid.index), (1, 1));
        // And the choice names it as the IPv4 address it is.
        assert!(got.why.contains("::ffff:10.0.1.2 (RoCE v2)"), "{}", got.why);
    }

    #[test]
    fn roce_v2_comes_before_v1_and_down_ports_are_skipped() {
        use GidKind::{RoceV1, RoceV2};
        let c = vec![
            roce(
                "mlx5_0",
                PortState::Active,
                &[(0, "::ffff:10.0.0.2", RoceV1)],
            ),
            roce("mlx5_1", PortState::Down, &[(1, "::ffff:10.0.0.2", RoceV2)]),
            roce(
                "mlx5_2",
                PortState::Active,
                &[(3, "::ffff:10.0.0.2", RoceV2)],
            ),
        ];
        let got = choose(&c, "10.0.0.2".parse().unwrap(), None).unwrap();
        assert_eq!((got.candidate, got.gid.index), (2, 3));
        // Only v1 left active: v1 it is.
        let got = choose(&c[..2], "10.0.0.2".parse().unwrap(), None).unwrap();
        assert_eq!((got.candidate, got.gid.kind), (0, RoceV1));
    }

    #[test]
    fn a_named_device_that_does_not_carry_the_address_is_refused_naming_both() {
        let c = two_rails();
        let err = choose(&c, "10.0.1.2".parse().unwrap(), Some("rxe0")).unwrap_err();
        assert_eq!(
            err,
            NoChoice::DeviceMismatch {
                wanted: "rxe0".into(),
                addr: "10.0.1.2".parse().unwrap(),
                carrier: "rxe1 port 1".into()
            }
        );
        assert!(
            err.to_string()
                .starts_with("--ib-dev rxe0 does not carry 10.0.1.2")
        );
        let got = choose(&c, "10.0.1.2".parse().unwrap(), Some("rxe1")).unwrap();
        assert_eq!(got.candidate, 1);
    }

    #[test]
    fn an_address_held_only_by_a_down_port_says_the_port_is_down() {
        let mut c = two_rails();
        c[1].port.state = PortState::Down;
        let err = choose(&c, "10.0.1.2".parse().unwrap(), None).unwrap_err();
        assert!(
            matches!(err, NoChoice::HolderNotActive { ref holder, .. } if holder == "rxe1 port 1")
        );
        assert!(
            err.to_string().contains("is not ACTIVE (state DOWN)"),
            "{err}"
        );
        // An ACTIVE holder elsewhere is still chosen first.
        c[0].table.push(e(2, "::ffff:10.0.1.2", GidKind::RoceV2));
        assert_eq!(
            choose(&c, "10.0.1.2".parse().unwrap(), None)
                .unwrap()
                .candidate,
            0
        );
    }

    #[test]
    fn an_address_no_port_holds_lists_what_was_seen() {
        let mut c = two_rails();
        c[1].port.state = PortState::Down;
        let err = choose(&c, "10.0.9.2".parse().unwrap(), None).unwrap_err();
        let text = err.to_string();
        assert!(
            text.starts_with("no ACTIVE RDMA port has a GID for 10.0.9.2"),
            "{text}"
        );
        assert!(text.contains("rxe1 port 1 (DOWN, Ethernet)"), "{text}");
        assert!(text.contains("::ffff:10.0.1.2"), "{text}");
        assert!(matches!(
            choose(&[], "10.0.0.1".parse().unwrap(), None),
            Err(NoChoice::NoGidFor { .. })
        ));
    }

    #[test]
    fn infiniband_is_chosen_only_when_it_is_unambiguous() {
        let ib = |device: &str| Candidate {
            device: device.to_owned(),
            port: port(1, PortState::Active, LinkLayer::InfiniBand),
            table: vec![e(0, "fe80::248a:703:49:d4f0", GidKind::Ib)],
        };
        let addr: IpAddr = "192.168.50.2".parse().unwrap();
        let got = choose(&[ib("mlx5_0")], addr, None).unwrap();
        assert_eq!((got.candidate, got.gid.index), (0, 0));
        assert!(got.why.starts_with("the only ACTIVE InfiniBand port"));
        let two = [ib("mlx5_0"), ib("mlx5_1")];
        let err = choose(&two, addr, None).unwrap_err();
        assert!(matches!(err, NoChoice::AmbiguousInfiniBand { ref ports, .. } if ports.len() == 2));
        let got = choose(&two, addr, Some("mlx5_1")).unwrap();
        assert_eq!(got.candidate, 1);
        // Next to RoCE ports, an address none of them holds is not silently sent over IB.
        let mixed = [ib("mlx5_0"), two_rails().remove(0)];
        assert!(matches!(
            choose(&mixed, addr, None),
            Err(NoChoice::NoGidFor { .. })
        ));
    }
}
