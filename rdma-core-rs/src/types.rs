//! Plain value types: GIDs, MTUs, port attributes, access flags, completion codes.
//!
//! Nothing in this module touches a device, so all of it is unit-tested on any host.

use std::fmt;
use std::net::Ipv6Addr;
use std::str::FromStr;

use ibverbs_sys as ffi;

/// A 128-bit RDMA Global Identifier, stored in network byte order (as the wire and verbs hold it).
///
/// On RoCE a GID is an IPv6 address; an IPv4 address `a.b.c.d` appears as the IPv4-mapped
/// address `::ffff:a.b.c.d`. [`Display`](fmt::Display) prints the IPv6 text form and
/// [`FromStr`] parses it back.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// The all-zero GID, which verbs uses for "empty table entry".
    pub const ZERO: Gid = Gid([0; 16]);

    /// True for `::ffff:a.b.c.d` (the RoCE v2 GID derived from an IPv4 address).
    #[must_use]
    pub fn is_ipv4_mapped(&self) -> bool {
        self.0[..10].iter().all(|b| *b == 0) && self.0[10] == 0xff && self.0[11] == 0xff
    }

    /// True for the all-zero GID.
    #[must_use]
    pub fn is_zero(&self) -> bool {
        self.0.iter().all(|b| *b == 0)
    }

    /// True for an IPv6 link-local GID (`fe80::/10`).
    #[must_use]
    pub fn is_link_local(&self) -> bool {
        self.0[0] == 0xfe && (self.0[1] & 0xc0) == 0x80
    }

    pub(crate) fn to_ffi(self) -> ffi::ibv_gid {
        ffi::ibv_gid { raw: self.0 }
    }

    pub(crate) fn from_ffi(gid: &ffi::ibv_gid) -> Gid {
        // SAFETY: every bit pattern of the 16-byte union is a valid `[u8; 16]`, and `raw` covers
        // the whole union.
        Gid(unsafe { gid.raw })
    }
}

impl From<Ipv6Addr> for Gid {
    fn from(addr: Ipv6Addr) -> Gid {
        Gid(addr.octets())
    }
}

impl From<Gid> for Ipv6Addr {
    fn from(gid: Gid) -> Ipv6Addr {
        Ipv6Addr::from(gid.0)
    }
}

impl fmt::Display for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&Ipv6Addr::from(self.0), f)
    }
}

impl fmt::Debug for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Gid({self})")
    }
}

impl FromStr for Gid {
    type Err = std::net::AddrParseError;
    fn from_str(s: &str) -> Result<Gid, Self::Err> {
        s.parse::<Ipv6Addr>().map(Gid::from)
    }
}

/// The type of a GID table entry (`enum ibv_gid_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GidKind {
    /// InfiniBand GID.
    Ib,
    /// RoCE v1 (Ethernet, GRH directly in an Ethernet frame, not routable).
    RoceV1,
    /// RoCE v2 (UDP/IP, port 4791, routable). Soft-RoCE (rxe) only does this one.
    RoceV2,
}

impl GidKind {
    /// Converts `IBV_GID_TYPE_*`; unknown values give `None`.
    #[must_use]
    pub fn from_ibv(raw: u32) -> Option<GidKind> {
        match raw {
            ffi::IBV_GID_TYPE_IB => Some(GidKind::Ib),
            ffi::IBV_GID_TYPE_ROCE_V1 => Some(GidKind::RoceV1),
            ffi::IBV_GID_TYPE_ROCE_V2 => Some(GidKind::RoceV2),
            _ => None,
        }
    }

    /// Short name as `ibv_devinfo -v` / sysfs print it.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            GidKind::Ib => "IB",
            GidKind::RoceV1 => "RoCE v1",
            GidKind::RoceV2 => "RoCE v2",
        }
    }
}

impl fmt::Display for GidKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One valid (non-zero) entry of a port's GID table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GidEntry {
    /// Index in the port's table: this is the `sgid_index` used in the address vector.
    pub index: u32,
    /// The GID itself.
    pub gid: Gid,
    /// IB, RoCE v1 or RoCE v2.
    pub kind: GidKind,
}

/// Formats a GID table, one entry per line (`  [1] ::ffff:10.0.0.1 (RoCE v2)`), for error
/// messages and `--verbose` output. An empty table gives `  (no valid GID entries)`.
#[must_use]
pub fn describe_gid_table(table: &[GidEntry]) -> String {
    if table.is_empty() {
        return "  (no valid GID entries)".to_owned();
    }
    table
        .iter()
        .map(|e| format!("  [{}] {} ({})", e.index, e.gid, e.kind))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Path MTU (`enum ibv_mtu`). Ordered by size, so `a.min(b)` is the usable path MTU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Mtu {
    /// 256 bytes.
    M256,
    /// 512 bytes.
    M512,
    /// 1024 bytes.
    M1024,
    /// 2048 bytes.
    M2048,
    /// 4096 bytes.
    M4096,
}

impl Mtu {
    /// Every MTU, smallest first.
    pub const ALL: [Mtu; 5] = [Mtu::M256, Mtu::M512, Mtu::M1024, Mtu::M2048, Mtu::M4096];

    /// Size in bytes.
    #[must_use]
    pub fn bytes(self) -> u32 {
        match self {
            Mtu::M256 => 256,
            Mtu::M512 => 512,
            Mtu::M1024 => 1024,
            Mtu::M2048 => 2048,
            Mtu::M4096 => 4096,
        }
    }

    /// Exact size in bytes to MTU; anything else gives `None`.
    #[must_use]
    pub fn from_bytes(bytes: u32) -> Option<Mtu> {
        Mtu::ALL.into_iter().find(|m| m.bytes() == bytes)
    }

    /// The smaller of two MTUs (the MTU both ends of a path support).
    #[must_use]
    pub fn min(self, other: Mtu) -> Mtu {
        if self <= other { self } else { other }
    }

    /// The `IBV_MTU_*` value (1..=5).
    #[must_use]
    pub fn to_ibv(self) -> u32 {
        match self {
            Mtu::M256 => ffi::IBV_MTU_256,
            Mtu::M512 => ffi::IBV_MTU_512,
            Mtu::M1024 => ffi::IBV_MTU_1024,
            Mtu::M2048 => ffi::IBV_MTU_2048,
            Mtu::M4096 => ffi::IBV_MTU_4096,
        }
    }

    /// From an `IBV_MTU_*` value; out-of-range values give `None`.
    #[must_use]
    pub fn from_ibv(raw: u32) -> Option<Mtu> {
        Mtu::ALL.into_iter().find(|m| m.to_ibv() == raw)
    }
}

impl fmt::Display for Mtu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.bytes())
    }
}

/// Link layer of a port.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LinkLayer {
    /// Native InfiniBand: LID routing.
    InfiniBand,
    /// Ethernet (RoCE, including Soft-RoCE): GID routing, the address vector needs a GRH.
    Ethernet,
    /// Old kernels/providers report this for InfiniBand.
    Unspecified,
}

impl LinkLayer {
    /// From `IBV_LINK_LAYER_*`; unknown values are [`LinkLayer::Unspecified`].
    #[must_use]
    pub fn from_ibv(raw: u8) -> LinkLayer {
        match u32::from(raw) {
            ffi::IBV_LINK_LAYER_INFINIBAND => LinkLayer::InfiniBand,
            ffi::IBV_LINK_LAYER_ETHERNET => LinkLayer::Ethernet,
            _ => LinkLayer::Unspecified,
        }
    }
}

impl fmt::Display for LinkLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LinkLayer::InfiniBand => "InfiniBand",
            LinkLayer::Ethernet => "Ethernet",
            LinkLayer::Unspecified => "unspecified",
        })
    }
}

/// Logical port state (`enum ibv_port_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PortState {
    /// Link is down (for rxe: the netdev is down).
    Down,
    /// Link up, waiting for the subnet manager.
    Init,
    /// Configured by the SM, not yet active.
    Armed,
    /// Ready for traffic.
    Active,
    /// Active, but deferring (rare).
    ActiveDefer,
    /// Any other value (including `IBV_PORT_NOP`).
    Other(u32),
}

impl PortState {
    /// From `IBV_PORT_*`.
    #[must_use]
    pub fn from_ibv(raw: u32) -> PortState {
        use ffi::ibv_port_state as s;
        match raw {
            s::IBV_PORT_DOWN => PortState::Down,
            s::IBV_PORT_INIT => PortState::Init,
            s::IBV_PORT_ARMED => PortState::Armed,
            s::IBV_PORT_ACTIVE => PortState::Active,
            s::IBV_PORT_ACTIVE_DEFER => PortState::ActiveDefer,
            other => PortState::Other(other),
        }
    }
}

impl fmt::Display for PortState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PortState::Down => f.write_str("DOWN"),
            PortState::Init => f.write_str("INIT"),
            PortState::Armed => f.write_str("ARMED"),
            PortState::Active => f.write_str("ACTIVE"),
            PortState::ActiveDefer => f.write_str("ACTIVE_DEFER"),
            PortState::Other(v) => write!(f, "unknown ({v})"),
        }
    }
}

/// What [`Context::query_port`](crate::Context::query_port) reports about a port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortInfo {
    /// Port number (from 1).
    pub num: u8,
    /// Logical state; only [`PortState::Active`] carries traffic.
    pub state: PortState,
    /// InfiniBand or Ethernet (RoCE).
    pub link_layer: LinkLayer,
    /// MTU currently in effect on the port (on RoCE: derived from the netdev MTU).
    pub active_mtu: Mtu,
    /// Largest MTU the port supports.
    pub max_mtu: Mtu,
    /// Base LID (InfiniBand only; 0 on RoCE).
    pub lid: u16,
    /// Size of the GID table (including empty entries).
    pub gid_tbl_len: u32,
}

/// Memory-region / queue-pair access flags (`enum ibv_access_flags`), combined with `|`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Access(u32);

impl Access {
    /// Local read only: enough for the source buffer of an RDMA Write.
    pub const NONE: Access = Access(0);
    /// The local HCA may write the buffer. Required whenever `REMOTE_WRITE` is set.
    pub const LOCAL_WRITE: Access = Access(ffi::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0);
    /// Peers may RDMA-Write into the buffer / the QP accepts RDMA Writes.
    pub const REMOTE_WRITE: Access = Access(ffi::ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0);
    /// Peers may RDMA-Read from the buffer / the QP accepts RDMA Reads.
    pub const REMOTE_READ: Access = Access(ffi::ibv_access_flags::IBV_ACCESS_REMOTE_READ.0);

    const NAMES: [(Access, &'static str); 3] = [
        (Access::LOCAL_WRITE, "LOCAL_WRITE"),
        (Access::REMOTE_WRITE, "REMOTE_WRITE"),
        (Access::REMOTE_READ, "REMOTE_READ"),
    ];

    /// The raw `IBV_ACCESS_*` bits.
    #[must_use]
    pub fn bits(self) -> u32 {
        self.0
    }

    /// True if every flag in `other` is set in `self`.
    #[must_use]
    pub fn contains(self, other: Access) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for Access {
    type Output = Access;
    fn bitor(self, rhs: Access) -> Access {
        Access(self.0 | rhs.0)
    }
}

impl std::ops::BitOrAssign for Access {
    fn bitor_assign(&mut self, rhs: Access) {
        self.0 |= rhs.0;
    }
}

impl fmt::Debug for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut names: Vec<String> = Access::NAMES
            .iter()
            .filter(|(a, _)| self.contains(*a))
            .map(|(_, n)| (*n).to_owned())
            .collect();
        let known = Access::NAMES.iter().fold(0, |acc, (a, _)| acc | a.0);
        if self.0 & !known != 0 {
            names.push(format!("{:#x}", self.0 & !known));
        }
        if names.is_empty() {
            names.push("NONE".to_owned());
        }
        write!(f, "Access({})", names.join(" | "))
    }
}

/// Opcode of a work completion (`enum ibv_wc_opcode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WcOpcode {
    /// A Send finished (sender side).
    Send,
    /// An RDMA Write (with or without immediate) finished (sender side).
    RdmaWrite,
    /// An RDMA Read finished.
    RdmaRead,
    /// A Send arrived (receiver side).
    Recv,
    /// An RDMA Write with immediate arrived and consumed a posted receive (receiver side).
    RecvRdmaWithImm,
    /// Anything else.
    Other(u32),
}

impl WcOpcode {
    /// From `IBV_WC_*` opcode values.
    #[must_use]
    pub fn from_ibv(raw: u32) -> WcOpcode {
        use ffi::ibv_wc_opcode as o;
        match raw {
            o::IBV_WC_SEND => WcOpcode::Send,
            o::IBV_WC_RDMA_WRITE => WcOpcode::RdmaWrite,
            o::IBV_WC_RDMA_READ => WcOpcode::RdmaRead,
            o::IBV_WC_RECV => WcOpcode::Recv,
            o::IBV_WC_RECV_RDMA_WITH_IMM => WcOpcode::RecvRdmaWithImm,
            other => WcOpcode::Other(other),
        }
    }
}

/// Status of a work completion (`enum ibv_wc_status`); the common ones are named.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WcStatus {
    /// `IBV_WC_SUCCESS`.
    Success,
    /// `IBV_WC_LOC_LEN_ERR`: local length error.
    LocLenErr,
    /// `IBV_WC_LOC_QP_OP_ERR`: local QP operation error.
    LocQpOpErr,
    /// `IBV_WC_LOC_PROT_ERR`: local protection error (bad lkey / MR).
    LocProtErr,
    /// `IBV_WC_WR_FLUSH_ERR`: flushed because the QP is in the error state.
    WrFlushErr,
    /// `IBV_WC_BAD_RESP_ERR`: unexpected response from the responder.
    BadRespErr,
    /// `IBV_WC_LOC_ACCESS_ERR`: local access error.
    LocAccessErr,
    /// `IBV_WC_REM_INV_REQ_ERR`: the responder found the request invalid.
    RemInvReqErr,
    /// `IBV_WC_REM_ACCESS_ERR`: the responder refused access (rkey, bounds, permissions).
    RemAccessErr,
    /// `IBV_WC_REM_OP_ERR`: the responder could not complete the operation.
    RemOpErr,
    /// `IBV_WC_RETRY_EXC_ERR`: transport retries exhausted (no ACK).
    RetryExcErr,
    /// `IBV_WC_RNR_RETRY_EXC_ERR`: receiver-not-ready retries exhausted.
    RnrRetryExcErr,
    /// `IBV_WC_REM_ABORT_ERR`: the responder aborted.
    RemAbortErr,
    /// `IBV_WC_FATAL_ERR`.
    FatalErr,
    /// `IBV_WC_RESP_TIMEOUT_ERR`.
    RespTimeoutErr,
    /// `IBV_WC_GENERAL_ERR`.
    GeneralErr,
    /// Any other value.
    Other(u32),
}

impl WcStatus {
    /// From `IBV_WC_*` status values.
    #[must_use]
    pub fn from_ibv(raw: u32) -> WcStatus {
        use ffi::ibv_wc_status as s;
        match raw {
            s::IBV_WC_SUCCESS => WcStatus::Success,
            s::IBV_WC_LOC_LEN_ERR => WcStatus::LocLenErr,
            s::IBV_WC_LOC_QP_OP_ERR => WcStatus::LocQpOpErr,
            s::IBV_WC_LOC_PROT_ERR => WcStatus::LocProtErr,
            s::IBV_WC_WR_FLUSH_ERR => WcStatus::WrFlushErr,
            s::IBV_WC_BAD_RESP_ERR => WcStatus::BadRespErr,
            s::IBV_WC_LOC_ACCESS_ERR => WcStatus::LocAccessErr,
            s::IBV_WC_REM_INV_REQ_ERR => WcStatus::RemInvReqErr,
            s::IBV_WC_REM_ACCESS_ERR => WcStatus::RemAccessErr,
            s::IBV_WC_REM_OP_ERR => WcStatus::RemOpErr,
            s::IBV_WC_RETRY_EXC_ERR => WcStatus::RetryExcErr,
            s::IBV_WC_RNR_RETRY_EXC_ERR => WcStatus::RnrRetryExcErr,
            s::IBV_WC_REM_ABORT_ERR => WcStatus::RemAbortErr,
            s::IBV_WC_FATAL_ERR => WcStatus::FatalErr,
            s::IBV_WC_RESP_TIMEOUT_ERR => WcStatus::RespTimeoutErr,
            s::IBV_WC_GENERAL_ERR => WcStatus::GeneralErr,
            other => WcStatus::Other(other),
        }
    }
}

/// State of a queue pair as the device reports it (`enum ibv_qp_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QpState {
    /// Freshly created.
    Reset,
    /// Initialised: receives may be posted.
    Init,
    /// Ready to receive.
    Rtr,
    /// Ready to send.
    Rts,
    /// Send queue drained.
    Sqd,
    /// Send queue error.
    Sqe,
    /// Error: all outstanding work requests are flushed.
    Err,
    /// Any other value.
    Unknown(u32),
}

impl QpState {
    /// From `IBV_QPS_*`.
    #[must_use]
    pub fn from_ibv(raw: u32) -> QpState {
        use ffi::ibv_qp_state as s;
        match raw {
            s::IBV_QPS_RESET => QpState::Reset,
            s::IBV_QPS_INIT => QpState::Init,
            s::IBV_QPS_RTR => QpState::Rtr,
            s::IBV_QPS_RTS => QpState::Rts,
            s::IBV_QPS_SQD => QpState::Sqd,
            s::IBV_QPS_SQE => QpState::Sqe,
            s::IBV_QPS_ERR => QpState::Err,
            other => QpState::Unknown(other),
        }
    }
}

#[cfg(test)]
mod tests;
