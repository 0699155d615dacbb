//! RoCE v2 packets in a capture (`tcpdump -w`, classic pcap, Ethernet): each UDP datagram to
//! port 4791 with its IP traffic class (the DSCP/ECN byte a `--tclass` must set) and the
//! InfiniBand base transport header (opcode, destination QP) that follows the UDP header.

use color_eyre::eyre::{Result, bail};

/// The RoCE v2 UDP port.
pub const ROCE_V2_PORT: u16 = 4791;

/// One RoCE v2 packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RocePacket {
    /// 4 or 6.
    pub ip_version: u8,
    /// IPv4 TOS / IPv6 traffic class (DSCP << 2 | ECN).
    pub traffic_class: u8,
    /// BTH opcode (e.g. 0x0a RC RDMA WRITE Only, 0x11 RC Acknowledge).
    pub opcode: u8,
    /// BTH destination QP (24 bits).
    pub dest_qp: u32,
}

/// Every RoCE v2 packet in `pcap` (other frames are skipped). Fails on a file that is not a
/// classic Ethernet pcap.
pub fn roce_packets(pcap: &[u8]) -> Result<Vec<RocePacket>> {
    if pcap.len() < 24 {
        bail!("capture is {} bytes: no pcap header", pcap.len());
    }
    let magic = [pcap[0], pcap[1], pcap[2], pcap[3]];
    let le = match magic {
        [0xd4, 0xc3, 0xb2, 0xa1] | [0x4d, 0x3c, 0xb2, 0xa1] => true,
        [0xa1, 0xb2, 0xc3, 0xd4] | [0xa1, 0xb2, 0x3c, 0x4d] => false,
        _ => bail!("not a pcap file (magic {magic:02x?}; pcapng is not read)"),
    };
    let u32_at = |b: &[u8], at: usize| -> Option<u32> {
        let w: [u8; 4] = b.get(at..at + 4)?.try_into().ok()?;
        Some(if le {
            u32::from_le_bytes(w)
        } else {
            u32::from_be_bytes(w)
        })
    };
    let linktype = u32_at(pcap, 20).unwrap_or_default();
    if linktype != 1 {
        bail!("capture link type {linktype}, not Ethernet (1)");
    }
    let mut out = Vec::new();
    let mut at = 24;
    while let Some(incl) = u32_at(pcap, at + 8) {
        let start = at + 16;
        let Some(frame) = usize::try_from(incl)
            .ok()
            .and_then(|n| pcap.get(start..start.checked_add(n)?))
        else {
            break;
        };
        out.extend(parse_frame(frame));
        at = start + frame.len();
    }
    Ok(out)
}

/// An Ethernet frame -> its RoCE v2 packet, if it is one.
pub fn parse_frame(f: &[u8]) -> Option<RocePacket> {
    let be16 = |b: &[u8], at: usize| -> Option<u16> {
        Some(u16::from_be_bytes(b.get(at..at + 2)?.try_into().ok()?))
    };
    let mut ether = be16(f, 12)?;
    let mut l3 = 14;
    if ether == 0x8100 {
        ether = be16(f, 16)?;
        l3 = 18;
    }
    let ip = f.get(l3..)?;
    let (version, tc, udp) = match ether {
        0x0800 => {
            let ihl = usize::from(ip.first()? & 0x0f) * 4;
            if ip.get(9)? != &17 || ihl < 20 {
                return None;
            }
            (4, *ip.get(1)?, ip.get(ihl..)?)
        }
        0x86dd => {
            if ip.get(6)? != &17 {
                return None;
            }
            let tc = ((ip.first()? & 0x0f) << 4) | (ip.get(1)? >> 4);
            (6, tc, ip.get(40..)?)
        }
        _ => return None,
    };
    if be16(udp, 2)? != ROCE_V2_PORT {
        return None;
    }
    let bth = udp.get(8..20)?;
    Some(RocePacket {
        ip_version: version,
        traffic_class: tc,
        opcode: bth[0],
        dest_qp: u32::from_be_bytes([0, bth[5], bth[6], bth[7]]),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame_v4(tos: u8, dport: u16, opcode: u8) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        f.extend([0x08, 0x00]);
        let mut ip = vec![
            0x45, tos, 0, 0, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 2, 10, 0, 0, 1,
        ];
        ip.extend(0xc000u16.to_be_bytes());
        ip.extend(dport.to_be_bytes());
        ip.extend([0, 0, 0, 0]);
        ip.extend([opcode, 0, 0xff, 0xff, 0, 0x00, 0x00, 0x11, 0x80, 0, 0, 1]);
        f.extend(ip);
        f
    }

    fn frame_v6(tc: u8) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        f.extend([0x86, 0xdd]);
        let mut ip = vec![0x60 | (tc >> 4), (tc & 0x0f) << 4, 0, 0, 0, 32, 17, 64];
        ip.extend([0u8; 32]);
        ip.extend(0xc000u16.to_be_bytes());
        ip.extend(ROCE_V2_PORT.to_be_bytes());
        ip.extend([0, 0, 0, 0]);
        ip.extend([0x11, 0, 0xff, 0xff, 0, 0x01, 0x02, 0x03, 0, 0, 0, 1]);
        f.extend(ip);
        f
    }

    fn pcap(frames: &[Vec<u8>]) -> Vec<u8> {
        let mut p = vec![0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0];
        p.extend([0u8; 8]);
        p.extend(65535u32.to_le_bytes());
        p.extend(1u32.to_le_bytes());
        for f in frames {
            p.extend([0u8; 8]);
            let n = u32::try_from(f.len()).unwrap();
            p.extend(n.to_le_bytes());
            p.extend(n.to_le_bytes());
            p.extend(f);
        }
        p
    }

    #[test]
    fn finds_roce_v2_over_ipv4_and_ipv6_with_their_traffic_class() {
        let p = pcap(&[
            frame_v4(0x68, ROCE_V2_PORT, 0x0a),
            frame_v4(0, 53, 0x0a),
            frame_v6(0xb8),
        ]);
        let got = roce_packets(&p).unwrap();
        assert_eq!(
            got,
            [
                RocePacket {
                    ip_version: 4,
                    traffic_class: 0x68,
                    opcode: 0x0a,
                    dest_qp: 0x11
                },
                RocePacket {
                    ip_version: 6,
                    traffic_class: 0xb8,
                    opcode: 0x11,
                    dest_qp: 0x010203
                }
            ]
        );
    }

    #[test]
    fn refuses_what_is_no_pcap_and_stops_at_a_truncated_record() {
        assert!(roce_packets(b"short").is_err());
        assert!(roce_packets(&[0u8; 24]).is_err());
        let mut p = pcap(&[frame_v4(0, ROCE_V2_PORT, 0x06)]);
        let whole = p.len();
        p.extend([0u8; 8]);
        p.extend(1000u32.to_le_bytes());
        assert_eq!(roce_packets(&p).unwrap().len(), 1);
        p.truncate(whole - 3);
        assert!(roce_packets(&p).unwrap().is_empty());
        assert_eq!(parse_frame(&[0u8; 10]), None);
    }
}
