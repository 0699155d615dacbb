//! How a run's guests are cabled: each guest has the same NICs (eth0, eth1, ...), and NIC `k`
//! of every guest sits on link `k`, its own virtual wire (two guests: a UDP pair on 127.0.0.1;
//! three or more: a hub on a unix socket, [`super::hub`]; one guest: a listening socket nobody
//! joins). A dead link is a cut
//! wire: the NICs keep carrier and their addresses, but every frame goes to a port nobody
//! reads, as when a switch port or cable fails.

use color_eyre::eyre::{Result, WrapErr, bail};

use super::qemu::Link;

/// The guests' network.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Net {
    /// NICs per guest (1 = today's topology, eth0 only).
    pub nics: usize,
    /// Links (NIC indexes) whose wire is cut.
    pub dead: Vec<usize>,
}

impl Default for Net {
    fn default() -> Self {
        Self {
            nics: 1,
            dead: Vec::new(),
        }
    }
}

impl Net {
    /// `nics` NICs with the links in `dead` cut; fails naming a dead link that does not exist.
    pub fn new(nics: usize, dead: &[usize]) -> Result<Self> {
        if nics == 0 || nics > 8 {
            bail!("a guest has 1 to 8 NICs, not {nics}");
        }
        if let Some(d) = dead.iter().find(|d| **d >= nics) {
            bail!(
                "link {d} cannot be dead: the guests have NICs 0..{} only",
                nics - 1
            );
        }
        let mut dead = dead.to_vec();
        dead.sort_unstable();
        dead.dedup();
        Ok(Self { nics, dead })
    }
}

/// The MAC of NIC `nic` of guest `guest` (1-based): NIC 0 keeps today's `52:54:00:12:34:GG`.
pub fn mac(guest: u8, nic: usize) -> String {
    format!("52:54:00:12:{:02x}:{guest:02x}", 0x34 + nic)
}

/// How many ports [`wire`] takes: TCP ports for one guest, UDP ports otherwise.
pub fn ports_needed(guests: usize, net: &Net) -> usize {
    (0..net.nics)
        .map(|k| {
            let dead = net.dead.contains(&k);
            match guests {
                0 => 0,
                1 => 1,
                2 if dead => 4,
                2 => 2,
                // Each guest sends from its own port to one nobody binds.
                n if dead => 2 * n,
                _ => 0,
            }
        })
        .sum()
}

/// Each guest's side of each link (`[guest][nic]`), from `ports` (distinct, free, at least
/// [`ports_needed`]).
pub fn wire(guests: usize, net: &Net, ports: &[u16]) -> Result<Vec<Vec<Link>>> {
    if ports.len() < ports_needed(guests, net) {
        bail!(
            "wiring {guests} guests with {} NICs needs {} ports, got {}",
            net.nics,
            ports_needed(guests, net),
            ports.len()
        );
    }
    let mut it = ports.iter().copied();
    let mut next = || it.next().unwrap_or_default();
    let mut out = vec![Vec::with_capacity(net.nics); guests];
    for k in 0..net.nics {
        let dead = net.dead.contains(&k);
        match guests {
            0 => {}
            1 => out[0].push(Link::Listen(next())),
            2 => {
                let (a, b) = (next(), next());
                // A cut wire: each side sends to a port nobody binds.
                let (to_a, to_b) = if dead { (next(), next()) } else { (a, b) };
                out[0].push(Link::Udp {
                    local: a,
                    peer: to_b,
                });
                out[1].push(Link::Udp {
                    local: b,
                    peer: to_a,
                });
            }
            _ if dead => {
                for g in &mut out {
                    let (local, peer) = (next(), next());
                    g.push(Link::Udp { local, peer });
                }
            }
            _ => {
                for g in &mut out {
                    g.push(Link::Hub(k));
                }
            }
        }
    }
    Ok(out)
}

/// The hubs a run needs: link `k` of three or more guests, unless it is cut.
pub fn hubs_needed(guests: usize, net: &Net) -> Vec<usize> {
    if guests < 3 {
        return Vec::new();
    }
    (0..net.nics).filter(|k| !net.dead.contains(k)).collect()
}

/// `n` distinct free ports on 127.0.0.1 (all bound at once, then released; QEMU binds them
/// right after): TCP when `tcp`, else UDP.
pub fn free_ports(n: usize, tcp: bool) -> Result<Vec<u16>> {
    let what = if tcp { "TCP" } else { "UDP" };
    let mut held_tcp = Vec::new();
    let mut held_udp = Vec::new();
    let mut ports = Vec::with_capacity(n);
    for _ in 0..n {
        let port = if tcp {
            let l = std::net::TcpListener::bind("127.0.0.1:0");
            let l =
                l.wrap_err_with(|| format!("binding {what} 127.0.0.1:0 to find a free port"))?;
            let p = l.local_addr()?.port();
            held_tcp.push(l);
            p
        } else {
            let s = std::net::UdpSocket::bind("127.0.0.1:0");
            let s =
                s.wrap_err_with(|| format!("binding {what} 127.0.0.1:0 to find a free port"))?;
            let p = s.local_addr()?.port();
            held_udp.push(s);
            p
        };
        ports.push(port);
    }
    Ok(ports)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_is_todays_one_link() {
        let net = Net::default();
        assert_eq!(wire(1, &net, &[4000]).unwrap(), [[Link::Listen(4000)]]);
        assert_eq!(
            wire(2, &net, &[4001, 4002]).unwrap(),
            [
                [Link::Udp {
                    local: 4001,
                    peer: 4002
                }],
                [Link::Udp {
                    local: 4002,
                    peer: 4001
                }]
            ]
        );
        assert_eq!(ports_needed(3, &net), 0);
        assert_eq!(
            wire(3, &net, &[]).unwrap(),
            [[Link::Hub(0)], [Link::Hub(0)], [Link::Hub(0)]]
        );
        assert_eq!(hubs_needed(3, &net), [0]);
        assert!(hubs_needed(2, &net).is_empty());
        assert_eq!(mac(1, 0), "52:54:00:12:34:01");
        assert_eq!(mac(2, 1), "52:54:00:12:35:02");
    }

    #[test]
    fn two_nics_get_two_wires_and_a_dead_one_leads_nowhere() {
        let net = Net::new(2, &[0]).unwrap();
        assert_eq!(ports_needed(2, &net), 6);
        let w = wire(2, &net, &[1, 2, 3, 4, 5, 6]).unwrap();
        // Link 0 is cut: A and B each send to a port the other does not bind.
        assert_eq!(w[0][0], Link::Udp { local: 1, peer: 4 });
        assert_eq!(w[1][0], Link::Udp { local: 2, peer: 3 });
        // Link 1 is live: each sends to the other's port.
        assert_eq!(w[0][1], Link::Udp { local: 5, peer: 6 });
        assert_eq!(w[1][1], Link::Udp { local: 6, peer: 5 });
        let bound: Vec<u16> = w
            .iter()
            .flatten()
            .filter_map(|l| match l {
                Link::Udp { local, .. } => Some(*local),
                _ => None,
            })
            .collect();
        for l in &w[0][0..1] {
            let Link::Udp { peer, .. } = l else { panic!() };
            assert!(!bound.contains(peer), "a dead link's peer port is bound");
        }
        // Three guests on a cut segment: each sends to a port nobody binds; the live one is
        // hub 0, and only it needs a hub.
        let net3 = Net::new(2, &[1]).unwrap();
        assert_eq!(ports_needed(3, &net3), 6);
        let w = wire(3, &net3, &[7, 8, 9, 10, 11, 12]).unwrap();
        assert!(w.iter().all(|g| g[0] == Link::Hub(0)));
        assert_eq!(
            [&w[0][1], &w[1][1], &w[2][1]],
            [
                &Link::Udp { local: 7, peer: 8 },
                &Link::Udp { local: 9, peer: 10 },
                &Link::Udp {
                    local: 11,
                    peer: 12
                }
            ]
        );
        assert_eq!(hubs_needed(3, &net3), [0]);
        assert!(wire(2, &net, &[1, 2]).is_err());
    }

    #[test]
    fn nets_are_checked_and_ports_are_distinct() {
        assert!(Net::new(0, &[]).is_err());
        let e = Net::new(2, &[2]).unwrap_err().to_string();
        assert!(e.contains("link 2"), "{e}");
        assert_eq!(Net::new(2, &[1, 1]).unwrap().dead, [1]);
        for tcp in [true, false] {
            let mut p = free_ports(6, tcp).unwrap();
            p.sort_unstable();
            p.dedup();
            assert_eq!(p.len(), 6);
        }
    }
}
