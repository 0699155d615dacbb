//! A connection's path record, as RDMA CM resolves it and as `rdma_set_option(RDMA_OPTION_IB,
//! RDMA_OPTION_IB_PATH)` takes it (an InfiniBand application with its own path record, from
//! an SA cache, sets it so). The passive side builds its queue pair's address from the
//! connection request, which carries this record's GIDs: which is why a server must judge the
//! path of a request it takes ([`super::Gate::path`]).

use super::sys as cm;
use crate::types::Gid;

/// The fields of a path record a caller may want to see or change (the rest are carried as
/// RDMA CM resolved them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathRecord {
    /// The source GID: the one the connection request names as the requester's.
    pub sgid: Gid,
    /// The destination GID.
    pub dgid: Gid,
    /// Everything else, as resolved.
    raw: RawPath,
}

/// The rest of the record, in `ibv_sa_path_rec`'s terms (network order where it is).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct RawPath {
    dlid: u16,
    slid: u16,
    raw_traffic: bool,
    flow_label: u32,
    hop_limit: u8,
    traffic_class: u8,
    reversible: bool,
    numb_path: u8,
    pkey: u16,
    sl: u8,
    mtu_selector: u8,
    mtu: u8,
    rate_selector: u8,
    rate: u8,
    packet_life_time_selector: u8,
    packet_life_time: u8,
    preference: u8,
}

impl PathRecord {
    /// From librdmacm's resolved record (`rdma_route.path_rec`).
    pub(super) fn from_sa(p: &cm::ibv_sa_path_rec) -> PathRecord {
        // SAFETY: the GID unions are 16 plain bytes in every member.
        let (sgid, dgid) = unsafe { (p.sgid.raw, p.dgid.raw) };
        PathRecord {
            sgid: Gid(sgid),
            dgid: Gid(dgid),
            raw: RawPath {
                dlid: u16::from_be(p.dlid),
                slid: u16::from_be(p.slid),
                raw_traffic: p.raw_traffic != 0,
                flow_label: u32::from_be(p.flow_label),
                hop_limit: p.hop_limit,
                traffic_class: p.traffic_class,
                reversible: p.reversible != 0,
                numb_path: p.numb_path,
                pkey: u16::from_be(p.pkey),
                sl: p.sl,
                mtu_selector: p.mtu_selector,
                mtu: p.mtu,
                rate_selector: p.rate_selector,
                rate: p.rate,
                packet_life_time_selector: p.packet_life_time_selector,
                packet_life_time: p.packet_life_time,
                preference: p.preference,
            },
        }
    }

    /// The record as `RDMA_OPTION_IB_PATH` takes it: the SA's wire layout (`ibv_path_record`,
    /// network order), the primary path both ways.
    pub(super) fn to_path_data(self) -> cm::ibv_path_data {
        let r = self.raw;
        let bits = |sel: u8, v: u8| (sel << 6) | (v & 0x3f);
        let mut data = cm::ibv_path_data {
            flags: cm::IBV_PATH_FLAG_GMP
                | cm::IBV_PATH_FLAG_PRIMARY
                | cm::IBV_PATH_FLAG_BIDIRECTIONAL,
            ..Default::default()
        };
        let p = &mut data.path;
        p.dgid.raw = self.dgid.0;
        p.sgid.raw = self.sgid.0;
        p.dlid = r.dlid.to_be();
        p.slid = r.slid.to_be();
        p.flowlabel_hoplimit = ((u32::from(r.raw_traffic) << 31)
            | ((r.flow_label & 0xf_ffff) << 8)
            | u32::from(r.hop_limit))
        .to_be();
        p.tclass = r.traffic_class;
        p.reversible_numpath = (u8::from(r.reversible) << 7) | (r.numb_path & 0x7f);
        p.pkey = r.pkey.to_be();
        p.qosclass_sl = u16::from(r.sl & 0xf).to_be();
        p.mtu = bits(r.mtu_selector, r.mtu);
        p.rate = bits(r.rate_selector, r.rate);
        p.packetlifetime = bits(r.packet_life_time_selector, r.packet_life_time);
        p.preference = r.preference;
        data
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The SA wire layout, field for field (IBTA PathRecord; infiniband/sa.h's
    /// `ibv_path_record`), from a resolved record; the GIDs are the caller's to change.
    #[test]
    fn a_resolved_path_packs_into_the_sa_layout() {
        let mut sa = cm::ibv_sa_path_rec::default();
        sa.dgid.raw = [1; 16];
        sa.sgid.raw = [2; 16];
        sa.dlid = 0x1234u16.to_be();
        sa.flow_label = 0xabcdeu32.to_be();
        sa.hop_limit = 64;
        sa.traffic_class = 106;
        sa.reversible = 1;
        sa.numb_path = 1;
        sa.pkey = 0xffffu16.to_be();
        sa.sl = 3;
        sa.mtu_selector = 2;
        sa.mtu = 3;
        sa.rate_selector = 2;
        sa.rate = 10;
        sa.packet_life_time_selector = 2;
        sa.packet_life_time = 18;
        let mut path = PathRecord::from_sa(&sa);
        assert_eq!((path.sgid, path.dgid), (Gid([2; 16]), Gid([1; 16])));
        path.sgid = Gid([9; 16]);
        let d = path.to_path_data();
        assert_eq!(d.flags, 1 | 2 | 8 | 32);
        let p = d.path;
        // SAFETY: plain bytes.
        let (dgid, sgid) = unsafe { (p.dgid.raw, p.sgid.raw) };
        assert_eq!((dgid, sgid), ([1; 16], [9; 16]));
        assert_eq!(u16::from_be(p.dlid), 0x1234);
        assert_eq!(u32::from_be(p.flowlabel_hoplimit), (0xabcde << 8) | 64);
        assert_eq!((p.tclass, p.reversible_numpath), (106, 0x81));
        assert_eq!(
            (u16::from_be(p.pkey), u16::from_be(p.qosclass_sl)),
            (0xffff, 3)
        );
        assert_eq!((p.mtu, p.rate, p.packetlifetime), (0x83, 0x8a, 0x92));
        assert_eq!(std::mem::size_of_val(&p), 64, "the SA's 64-byte record");
    }
}
