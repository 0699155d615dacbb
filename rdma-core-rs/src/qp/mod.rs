//! Reliable-connected queue pairs with a typestate: `Reset -> Init -> Rtr -> Rts`.
//!
//! Each transition consumes the queue pair and returns it in the next state, so transitions
//! cannot be called out of order and only an `Rts` queue pair can post an RDMA Write. If a
//! transition fails the queue pair is destroyed (it is dropped with the error).

mod post;

use std::fmt;
use std::marker::PhantomData;
use std::ptr;

use ffi::ibv_qp_attr_mask as M;
use ibverbs_sys as ffi;

pub use post::{RemoteBuffer, WriteFlags};

use crate::cq::CompletionQueue;
use crate::error::{Error, Result, VerbOp};
use crate::pd::ProtectionDomain;
use crate::types::{Access, Gid, LinkLayer, Mtu, QpState};

/// Typestate: freshly created.
#[derive(Debug)]
pub struct Reset;
/// Typestate: initialised; receives may be posted.
#[derive(Debug)]
pub struct Init;
/// Typestate: ready to receive.
#[derive(Debug)]
pub struct Rtr;
/// Typestate: ready to send.
#[derive(Debug)]
pub struct Rts;

/// Largest single RDMA Write this crate posts (the SGE length is 32 bits; 2^31 is the usual
/// port max_msg_sz).
pub const MAX_WRITE_LEN: u64 = (1 << 31) - 1;

/// Highest packet sequence number (PSNs are 24 bits).
pub const MAX_PSN: u32 = (1 << 24) - 1;

/// Queue sizes for [`ProtectionDomain::create_rc_qp`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpCaps {
    /// Outstanding send work requests.
    pub max_send_wr: u32,
    /// Outstanding receive work requests.
    pub max_recv_wr: u32,
    /// Scatter/gather entries per send request.
    pub max_send_sge: u32,
    /// Scatter/gather entries per receive request.
    pub max_recv_sge: u32,
    /// Bytes of inline data (0: none).
    pub max_inline_data: u32,
}

impl Default for QpCaps {
    fn default() -> QpCaps {
        QpCaps {
            max_send_wr: 16,
            max_recv_wr: 16,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        }
    }
}

/// The peer's queue pair, as it advertised it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemoteQp {
    /// QP number (24 bits).
    pub qpn: u32,
    /// The peer's initial send PSN = our receive PSN (24 bits).
    pub psn: u32,
    /// The peer's GID (RoCE: required).
    pub gid: Gid,
    /// The peer's LID (InfiniBand: required; RoCE: 0).
    pub lid: u16,
}

/// Attributes for INIT -> RTR.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RtrParams {
    /// The peer.
    pub remote: RemoteQp,
    /// Path MTU: the smaller of both ports' active MTUs.
    pub path_mtu: Mtu,
    /// Local port number.
    pub port: u8,
    /// Local GID index (`sgid_index`, from [`Context::select_gid`](crate::Context::select_gid)).
    pub sgid_index: u32,
    /// Ethernet: the address vector carries a GRH (dgid, sgid_index, hop limit 64).
    /// InfiniBand: LID routing.
    pub link_layer: LinkLayer,
    /// Incoming RDMA Reads/atomics in flight (default 1).
    pub max_dest_rd_atomic: u8,
    /// RNR NAK timer code (default 12 = 0.64 ms).
    pub min_rnr_timer: u8,
    /// How the path's packets are marked: traffic class and hop limit (RoCE's GRH, the IP
    /// header's DSCP/ECN and TTL) and service level (InfiniBand).
    pub class: PathClass,
}

/// How a queue pair's packets are marked on the path (default: traffic class 0, hop limit 64,
/// SL 0, what verbs users get without asking).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PathClass {
    /// RoCE: the GRH traffic class, i.e. the IP header's TOS byte (DSCP << 2 | ECN). Lossless
    /// RoCE fabrics classify on it (PFC/ETS).
    pub traffic_class: u8,
    /// RoCE: the GRH hop limit, the IP header's TTL / hop limit (1..=255).
    pub hop_limit: u8,
    /// InfiniBand: the service level (0..=15), which the subnet maps to a virtual lane.
    pub sl: u8,
}

impl Default for PathClass {
    fn default() -> PathClass {
        PathClass {
            traffic_class: 0,
            hop_limit: 64,
            sl: 0,
        }
    }
}

impl RtrParams {
    /// With the defaults `max_dest_rd_atomic = 1`, `min_rnr_timer = 12`.
    #[must_use]
    pub fn new(
        remote: RemoteQp,
        path_mtu: Mtu,
        port: u8,
        sgid_index: u32,
        link_layer: LinkLayer,
    ) -> RtrParams {
        RtrParams {
            remote,
            path_mtu,
            port,
            sgid_index,
            link_layer,
            max_dest_rd_atomic: 1,
            min_rnr_timer: 12,
            class: PathClass::default(),
        }
    }
}

/// Defaults for struct-update syntax: `max_dest_rd_atomic = 1`, `min_rnr_timer = 12`, port 1,
/// MTU 1024, Ethernet, GID index 0 and an all-zero remote. Always set `remote` (and the other
/// connection fields): [`QueuePair::to_rtr`] rejects a zero GID on Ethernet and LID 0 on
/// InfiniBand.
impl Default for RtrParams {
    fn default() -> RtrParams {
        RtrParams::new(
            RemoteQp {
                qpn: 0,
                psn: 0,
                gid: Gid::ZERO,
                lid: 0,
            },
            Mtu::M1024,
            1,
            0,
            LinkLayer::Ethernet,
        )
    }
}

/// Attributes for RTR -> RTS.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RtsParams {
    /// Our initial send PSN (24 bits; the peer uses it as its receive PSN).
    pub sq_psn: u32,
    /// Local ACK timeout code: 4.096 µs * 2^timeout (default 14 ≈ 67 ms).
    pub timeout: u8,
    /// Transport retries (default 7, the maximum).
    pub retry_cnt: u8,
    /// RNR retries (default 7 = infinite).
    pub rnr_retry: u8,
    /// Outgoing RDMA Reads/atomics in flight (default 1).
    pub max_rd_atomic: u8,
}

impl RtsParams {
    /// The local ACK timeout `timeout` codes: 4.096 µs × 2^timeout (`0` means infinite in
    /// the spec, `None` here). A packet lost on an RC path costs its sender at least this
    /// long before the retransmission.
    #[must_use]
    pub fn ack_timeout(&self) -> Option<std::time::Duration> {
        (self.timeout != 0)
            .then(|| std::time::Duration::from_nanos(4096u64 << self.timeout.min(31)))
    }

    /// Defaults with the given send PSN.
    #[must_use]
    pub fn new(sq_psn: u32) -> RtsParams {
        RtsParams {
            sq_psn,
            ..RtsParams::default()
        }
    }
}

impl Default for RtsParams {
    fn default() -> RtsParams {
        RtsParams {
            sq_psn: 0,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            max_rd_atomic: 1,
        }
    }
}

/// Owns the `ibv_qp`; destroyed in Drop *before* its CQ and PD (fields drop after `drop`).
struct QpHandle {
    qp: *mut ffi::ibv_qp,
    qpn: u32,
    /// Set by INIT -> RTR (read only in `Rtr` and `Rts`).
    path_mtu: Mtu,
    cq: CompletionQueue,
    pd: ProtectionDomain,
    /// The RDMA CM connection, when the CM connected it: disconnected before the QP goes.
    cm: Option<crate::cm::Link>,
}

// SAFETY: ibv_qp handles may be used from any thread; ibv_post_send / ibv_post_recv /
// ibv_modify_qp are thread-safe in libibverbs (providers lock their queues). Destroyed once.
unsafe impl Send for QpHandle {}
// SAFETY: see `Send`.
unsafe impl Sync for QpHandle {}

impl Drop for QpHandle {
    fn drop(&mut self) {
        drop(self.cm.take());
        // SAFETY: `qp` came from ibv_create_qp and is destroyed once; CQ and PD are still alive
        // (they are fields, dropped after this).
        let rc = unsafe { ffi::ibv_destroy_qp(self.qp) };
        if rc != 0 {
            tracing::warn!(qpn = self.qpn, rc, "ibv_destroy_qp failed");
        }
    }
}

/// A reliable-connected queue pair in state `S`. Keeps its PD and CQ alive.
#[must_use]
pub struct QueuePair<S> {
    h: QpHandle,
    _state: PhantomData<S>,
}

impl<S> fmt::Debug for QueuePair<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueuePair")
            .field("qpn", &self.h.qpn)
            .field(
                "state",
                &std::any::type_name::<S>()
                    .rsplit("::")
                    .next()
                    .unwrap_or("?"),
            )
            .finish()
    }
}

impl ProtectionDomain {
    /// Creates an RC queue pair using `cq` for both send and receive completions. Send requests
    /// are signalled individually (`sq_sig_all = 0`; this crate always sets SIGNALED).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if `cq` belongs to another device, [`Error::Verb`]
    /// ([`VerbOp::CreateQp`]).
    pub fn create_rc_qp(&self, cq: &CompletionQueue, caps: QpCaps) -> Result<QueuePair<Reset>> {
        if !cq.same_context(self.context()) {
            return Err(Error::invalid(
                "the completion queue belongs to a different device context",
                "create the CQ and the PD from the same Context",
            ));
        }
        let mut init = ffi::ibv_qp_init_attr {
            qp_context: ptr::null_mut(),
            send_cq: cq.0.cq,
            recv_cq: cq.0.cq,
            srq: ptr::null_mut(),
            cap: ffi::ibv_qp_cap {
                max_send_wr: caps.max_send_wr,
                max_recv_wr: caps.max_recv_wr,
                max_send_sge: caps.max_send_sge,
                max_recv_sge: caps.max_recv_sge,
                max_inline_data: caps.max_inline_data,
            },
            qp_type: ffi::ibv_qp_type::IBV_QPT_RC,
            sq_sig_all: 0,
        };
        // SAFETY: valid PD and CQ (kept alive by the handle below); `init` is fully initialised.
        let qp = unsafe { ffi::ibv_create_qp(self.0.pd, &mut init) };
        if qp.is_null() {
            return Err(Error::last_os(VerbOp::CreateQp, format!("{caps:?}")));
        }
        // SAFETY: non-null, valid QP.
        let qpn = unsafe { (*qp).qp_num };
        tracing::debug!(qpn, "created RC QP");
        Ok(QueuePair {
            h: QpHandle {
                qp,
                qpn,
                path_mtu: Mtu::M256,
                cq: cq.clone(),
                pd: self.clone(),
                cm: None,
            },
            _state: PhantomData,
        })
    }
}

impl<S> QueuePair<S> {
    /// The QP number to give the peer.
    #[must_use]
    pub fn qpn(&self) -> u32 {
        self.h.qpn
    }

    /// The state the device reports (e.g. `Err` after a failed work request).
    ///
    /// # Errors
    /// [`Error::Verb`] ([`VerbOp::QueryQp`]).
    pub fn query_state(&self) -> Result<QpState> {
        let mut attr = ffi::ibv_qp_attr::default();
        let mut init = ffi::ibv_qp_init_attr::default();
        // SAFETY: valid QP; both out-structs are writable.
        let rc = unsafe {
            ffi::ibv_query_qp(
                self.h.qp,
                &mut attr,
                M::IBV_QP_STATE.0 as libc::c_int,
                &mut init,
            )
        };
        if rc != 0 {
            return Err(Error::verb(
                VerbOp::QueryQp,
                format!("QP {}", self.h.qpn),
                rc,
            ));
        }
        Ok(QpState::from_ibv(attr.qp_state))
    }

    /// The completion queue it uses.
    pub fn cq(&self) -> &CompletionQueue {
        &self.h.cq
    }

    fn modify<T>(self, mut attr: ffi::ibv_qp_attr, mask: M, op: VerbOp) -> Result<QueuePair<T>> {
        // SAFETY: valid QP; `attr` is initialised for every bit in `mask`.
        let rc = unsafe { ffi::ibv_modify_qp(self.h.qp, &mut attr, mask.0 as libc::c_int) };
        if rc != 0 {
            return Err(Error::verb(op, format!("QP {}", self.h.qpn), rc));
        }
        Ok(QueuePair {
            h: self.h,
            _state: PhantomData,
        })
    }
}

/// RESET -> INIT attributes: pkey index 0, `port`, access flags.
fn init_attr(port: u8, access: Access) -> (ffi::ibv_qp_attr, M) {
    let a = ffi::ibv_qp_attr {
        qp_state: ffi::ibv_qp_state::IBV_QPS_INIT,
        pkey_index: 0,
        port_num: port,
        qp_access_flags: access.bits(),
        ..Default::default()
    };
    (
        a,
        M::IBV_QP_STATE | M::IBV_QP_PKEY_INDEX | M::IBV_QP_PORT | M::IBV_QP_ACCESS_FLAGS,
    )
}

/// INIT -> RTR attributes, including the address vector.
fn rtr_attr(p: &RtrParams) -> Result<(ffi::ibv_qp_attr, M)> {
    check_psn("remote PSN", p.remote.psn)?;
    if p.remote.qpn > MAX_PSN {
        return Err(Error::invalid(
            format!("remote QP number {:#x} exceeds 24 bits", p.remote.qpn),
            "check the peer's handshake data",
        ));
    }
    if p.min_rnr_timer > 31 {
        return Err(Error::invalid(
            format!("min_rnr_timer {}", p.min_rnr_timer),
            "use 0..=31",
        ));
    }
    let sgid_index = u8::try_from(p.sgid_index).map_err(|_| {
        Error::invalid(
            format!("GID index {}", p.sgid_index),
            "the address vector takes 0..=255",
        )
    })?;
    let (is_global, grh) = match p.link_layer {
        LinkLayer::Ethernet => {
            if p.remote.gid.is_zero() {
                return Err(Error::invalid(
                    "the peer's GID is all zeros on a RoCE port",
                    "RoCE routes by GID: the peer must send the GID it selected",
                ));
            }
            let grh = ffi::ibv_global_route {
                dgid: p.remote.gid.to_ffi(),
                flow_label: 0,
                sgid_index,
                hop_limit: p.class.hop_limit,
                traffic_class: p.class.traffic_class,
            };
            (1, grh)
        }
        LinkLayer::InfiniBand | LinkLayer::Unspecified => {
            if p.remote.lid == 0 {
                return Err(Error::invalid(
                    "the peer's LID is 0 on an InfiniBand port",
                    "InfiniBand routes by LID: is the subnet manager running (`ibstat`)?",
                ));
            }
            (0, ffi::ibv_global_route::default())
        }
    };
    let a = ffi::ibv_qp_attr {
        qp_state: ffi::ibv_qp_state::IBV_QPS_RTR,
        path_mtu: p.path_mtu.to_ibv(),
        dest_qp_num: p.remote.qpn,
        rq_psn: p.remote.psn,
        max_dest_rd_atomic: p.max_dest_rd_atomic,
        min_rnr_timer: p.min_rnr_timer,
        ah_attr: ffi::ibv_ah_attr {
            grh,
            dlid: p.remote.lid,
            sl: p.class.sl,
            src_path_bits: 0,
            static_rate: 0,
            is_global,
            port_num: p.port,
        },
        ..Default::default()
    };
    let mask = M::IBV_QP_STATE
        | M::IBV_QP_AV
        | M::IBV_QP_PATH_MTU
        | M::IBV_QP_DEST_QPN
        | M::IBV_QP_RQ_PSN
        | M::IBV_QP_MAX_DEST_RD_ATOMIC
        | M::IBV_QP_MIN_RNR_TIMER;
    Ok((a, mask))
}

/// RTR -> RTS attributes.
fn rts_attr(p: &RtsParams) -> Result<(ffi::ibv_qp_attr, M)> {
    check_psn("send PSN", p.sq_psn)?;
    if p.timeout > 31 || p.retry_cnt > 7 || p.rnr_retry > 7 {
        return Err(Error::invalid(
            format!(
                "timeout {} / retry_cnt {} / rnr_retry {}",
                p.timeout, p.retry_cnt, p.rnr_retry
            ),
            "timeout is 0..=31, retry counts are 0..=7",
        ));
    }
    let a = ffi::ibv_qp_attr {
        qp_state: ffi::ibv_qp_state::IBV_QPS_RTS,
        sq_psn: p.sq_psn,
        timeout: p.timeout,
        retry_cnt: p.retry_cnt,
        rnr_retry: p.rnr_retry,
        max_rd_atomic: p.max_rd_atomic,
        ..Default::default()
    };
    let mask = M::IBV_QP_STATE
        | M::IBV_QP_TIMEOUT
        | M::IBV_QP_RETRY_CNT
        | M::IBV_QP_RNR_RETRY
        | M::IBV_QP_SQ_PSN
        | M::IBV_QP_MAX_QP_RD_ATOMIC;
    Ok((a, mask))
}

fn check_psn(what: &str, psn: u32) -> Result<()> {
    if psn > MAX_PSN {
        return Err(Error::invalid(
            format!("{what} {psn:#x} exceeds 24 bits"),
            "PSNs are 24-bit; use random_psn()",
        ));
    }
    Ok(())
}

impl QueuePair<Reset> {
    /// RESET -> INIT on `port` (pkey index 0). `access` is what the *peer* may do to our
    /// memory through this QP: [`Access::REMOTE_WRITE`] on the server, [`Access::NONE`] on the
    /// client.
    ///
    /// # Errors
    /// [`Error::Verb`] ([`VerbOp::ModifyQpInit`]); the QP is destroyed.
    pub fn to_init(self, port: u8, access: Access) -> Result<QueuePair<Init>> {
        let (attr, mask) = init_attr(port, access);
        self.modify(attr, mask, VerbOp::ModifyQpInit)
    }
}

impl QueuePair<Init> {
    /// iWARP: RDMA CM established the connection (its ESTABLISHED event), and with it the
    /// kernel moved the queue pair to RTS; the path MTU is `path_mtu`, the local port's active
    /// MTU. (Not queried: siw does not report a queue pair's state, `ibv_query_qp` says RESET.)
    pub(crate) fn established_by_cm(mut self, path_mtu: Mtu) -> QueuePair<Rts> {
        self.h.path_mtu = path_mtu;
        QueuePair {
            h: self.h,
            _state: PhantomData,
        }
    }

    /// INIT -> RTR with an address vector built for the link layer.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for out-of-range parameters, [`Error::Verb`]
    /// ([`VerbOp::ModifyQpRtr`]); the QP is destroyed.
    pub fn to_rtr(self, p: &RtrParams) -> Result<QueuePair<Rtr>> {
        let (attr, mask) = rtr_attr(p)?;
        let mut qp: QueuePair<Rtr> = self.modify(attr, mask, VerbOp::ModifyQpRtr)?;
        qp.h.path_mtu = p.path_mtu;
        Ok(qp)
    }
}

impl QueuePair<Rtr> {
    /// The path MTU set by INIT -> RTR.
    #[must_use]
    pub fn path_mtu(&self) -> Mtu {
        self.h.path_mtu
    }

    /// RTR -> RTS.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`], [`Error::Verb`] ([`VerbOp::ModifyQpRts`]); the QP is destroyed.
    pub fn to_rts(self, p: &RtsParams) -> Result<QueuePair<Rts>> {
        let (attr, mask) = rts_attr(p)?;
        self.modify(attr, mask, VerbOp::ModifyQpRts)
    }
}

impl QueuePair<Rts> {
    /// Hands the queue pair its RDMA CM connection, which it disconnects before it goes.
    pub(crate) fn with_link(mut self, link: crate::cm::Link) -> Self {
        self.h.cm = Some(link);
        self
    }

    /// The path MTU set by INIT -> RTR.
    #[must_use]
    pub fn path_mtu(&self) -> Mtu {
        self.h.path_mtu
    }
}

#[cfg(test)]
pub(crate) mod tests;
