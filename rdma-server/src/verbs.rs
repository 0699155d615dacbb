//! The verbs half of a write session, behind a seam: what the session asks of its port is
//! [`WriteVerbs`] (expose a buffer, [`Exposure`]: connect to the client, wait for the write,
//! revoke; with rounds, end a round and expose a fresh buffer on the same queue pair). The server's ports are devices ([`LocalPort`], below); `cargo test` runs the same
//! sessions on a fake fabric (`crate::pair`, test-only code). Bench sessions and RDMA CM need
//! the device itself ([`WriteVerbs::device`]).

use crate::failure::Failure;
use crate::grant::Grant;
pub(crate) use rdma_app::verbs::PortName;
use rdma_core_rs::{
    Completion, CqMode, ExposedRegion, Init, LocalPort, OwnedBuffer, PortState, QpCaps, QueuePair,
    Rts,
};
use rdma_proto::{ErrorCode, QpEndpoint};
use std::time::Instant;

/// Work request id of the receive that catches the write-with-immediate.
const RECV_WR_ID: u64 = 0x5245_4356; // "RECV"

/// The buffer a client may write: what the accept names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Region {
    pub addr: u64,
    pub rkey: u32,
    pub len: u64,
}

/// What a write session asks of the port it runs on.
pub(crate) trait WriteVerbs: Send + Sync + std::fmt::Debug {
    /// The device, port and GID, for the events.
    fn name(&self) -> PortName;
    /// Whether the transport has RDMA Write with immediate (iWARP has not).
    fn has_write_with_imm(&self) -> bool;
    /// Whether the port is still as it was chosen (for a cached port; cheap queries only).
    fn still_fresh(&self) -> bool;
    /// A fresh protection domain, `len` bytes the client may write as `grant` says, a
    /// completion queue and a queue pair in INIT, all for one client; with `imm`, the receive
    /// that catches a write-with-immediate is posted before the client can know the queue pair.
    fn expose(
        &self,
        len: usize,
        grant: &Grant,
        cq_mode: CqMode,
        imm: bool,
    ) -> Result<Box<dyn Exposure + '_>, rdma_core_rs::Error>;
    /// The device itself, where there is one: bench sessions and RDMA CM run on it.
    fn device(&self) -> Option<&LocalPort>;
}

/// How [`Exposure::connect_cm`] connects on the device's own objects: the session's RDMA CM
/// exchange, given the port, our queue pair in INIT and the exposed region.
pub(crate) type CmConnect<'f> =
    dyn FnMut(&LocalPort, QueuePair<Init>, &ExposedRegion) -> Result<QueuePair<Rts>, Failure> + 'f;

/// The buffer a revoked exposure gives back: the CPU's alone.
pub(crate) type Revoked = Box<dyn std::ops::Deref<Target = [u8]>>;

/// One client's buffer and queue pair, from [`WriteVerbs::expose`] to [`Exposure::revoke`].
pub(crate) trait Exposure {
    /// The buffer the client may write (`None` once revoked or between rounds).
    fn region(&self) -> Option<Region>;
    /// Brings our queue pair to RTS towards the client's `peer` (from its hello), with send
    /// PSN `psn`; returns our endpoint, for the accept.
    fn connect(&mut self, peer: &QpEndpoint, psn: u32) -> Result<QpEndpoint, rdma_core_rs::Error>;
    /// Connects through RDMA CM instead (`how`); `None` where the fabric has none.
    fn connect_cm(&mut self, how: &mut CmConnect<'_>) -> Option<Result<(), Failure>>;
    /// Our queue pair's number and path MTU (once connected).
    fn qp(&self) -> (u32, u32);
    /// The next completion (the write-with-immediate's receive), until `deadline`
    /// ([`rdma_core_rs::ErrorKind::Timeout`] then).
    fn poll(&self, deadline: Instant) -> Result<Completion, rdma_core_rs::Error>;
    /// Takes the client's access away before a byte is read: no more packets from its queue
    /// pair are taken, its rkey dies; returns the buffer, now ours alone. Nothing is left to
    /// the client after it.
    fn revoke(&mut self) -> Result<Revoked, Failure>;
    /// Ends a round ([`rdma_proto::rounds`]): the buffer's rkey dies (its region is
    /// deregistered) before a byte is read, the queue pair stays connected; returns the buffer,
    /// now ours alone. With no region registered, the client's packets find nothing to write.
    fn end_round(&mut self) -> Result<Revoked, Failure>;
    /// The next round's buffer: `len` fresh bytes registered anew in the same protection
    /// domain as `grant` says (a new rkey), and with `imm` the receive for its
    /// write-with-immediate posted, all before the client can know it.
    fn rearm(&mut self, len: usize, grant: &Grant, imm: bool) -> Result<(), rdma_core_rs::Error>;
}

impl WriteVerbs for LocalPort {
    fn name(&self) -> PortName {
        self.into()
    }

    fn has_write_with_imm(&self) -> bool {
        self.ctx.transport().has_write_with_imm()
    }

    /// ACTIVE, with its GID in its slot: two queries.
    fn still_fresh(&self) -> bool {
        let (ctx, port) = (&self.ctx, self.port.num);
        let active = ctx
            .query_port(port)
            .is_ok_and(|p| p.state == PortState::Active);
        active
            && ctx
                .query_gid(port, self.gid.index)
                .is_ok_and(|g| g == self.gid.gid)
    }

    fn expose(
        &self,
        len: usize,
        grant: &Grant,
        cq_mode: CqMode,
        imm: bool,
    ) -> Result<Box<dyn Exposure + '_>, rdma_core_rs::Error> {
        let pd = self.ctx.alloc_pd()?;
        let mr = pd.register_exposed(len, grant.region)?;
        let cq = self.ctx.create_cq(4, cq_mode)?;
        let qp = pd.create_rc_qp(&cq, QpCaps::default())?;
        let qp = qp.to_init(self.port.num, grant.qp)?;
        if imm {
            qp.post_recv(RECV_WR_ID)?;
        }
        Ok(Box::new(OnDevice {
            local: self,
            qp: Qp::Init(qp),
            mr: Some(mr),
            cq,
            pd,
        }))
    }

    fn device(&self) -> Option<&LocalPort> {
        Some(self)
    }
}

/// Our queue pair, through its states.
enum Qp {
    Init(QueuePair<Init>),
    Rts(QueuePair<Rts>),
    /// Taken for a connection that failed.
    Gone,
}

/// An exposure on a device. Field order is drop order: the queue pair, the region, the
/// completion queue, then their protection domain.
struct OnDevice<'a> {
    local: &'a LocalPort,
    qp: Qp,
    /// `None` once revoked, and between rounds.
    mr: Option<ExposedRegion>,
    cq: rdma_core_rs::CompletionQueue,
    pd: rdma_core_rs::ProtectionDomain,
}

impl OnDevice<'_> {
    fn take_init(&mut self) -> Result<QueuePair<Init>, rdma_core_rs::Error> {
        match std::mem::replace(&mut self.qp, Qp::Gone) {
            Qp::Init(qp) => Ok(qp),
            other => {
                self.qp = other;
                Err(rdma_core_rs::Error::InvalidArgument {
                    what: "the session's queue pair is connected already".to_owned(),
                    advice: "connect it once".to_owned(),
                })
            }
        }
    }
}

impl Exposure for OnDevice<'_> {
    fn region(&self) -> Option<Region> {
        self.mr.as_ref().map(|mr| Region {
            addr: mr.addr(),
            rkey: mr.rkey(),
            len: mr.len() as u64,
        })
    }

    fn connect(&mut self, peer: &QpEndpoint, psn: u32) -> Result<QpEndpoint, rdma_core_rs::Error> {
        let qp = self.take_init()?;
        let qp = qp.connect_to(self.local, &rdma_app::verbs::from_wire(peer), psn)?;
        let ours = rdma_app::verbs::to_wire(self.local.endpoint(&qp, psn));
        self.qp = Qp::Rts(qp);
        Ok(ours)
    }

    fn connect_cm(&mut self, how: &mut CmConnect<'_>) -> Option<Result<(), Failure>> {
        let qp = match self.take_init() {
            Ok(qp) => qp,
            Err(e) => {
                return Some(Err(Failure::new(ErrorCode::Internal, e.to_string())));
            }
        };
        let Some(mr) = self.mr.as_ref() else {
            return Some(Err(Failure::new(
                ErrorCode::Internal,
                "the session's buffer is revoked already",
            )));
        };
        Some(how(self.local, qp, mr).map(|qp| self.qp = Qp::Rts(qp)))
    }

    fn qp(&self) -> (u32, u32) {
        match &self.qp {
            Qp::Rts(qp) => (qp.qpn(), qp.path_mtu().bytes()),
            Qp::Init(qp) => (qp.qpn(), 0),
            Qp::Gone => (0, 0),
        }
    }

    fn poll(&self, deadline: Instant) -> Result<Completion, rdma_core_rs::Error> {
        self.cq.poll(deadline)
    }

    fn revoke(&mut self) -> Result<Revoked, Failure> {
        // Our queue pair first (no more packets from it are taken), then the region (the rkey
        // dies).
        self.qp = Qp::Gone;
        self.end_round()
    }

    fn end_round(&mut self) -> Result<Revoked, Failure> {
        let mr = self.mr.take().ok_or_else(|| {
            Failure::new(
                ErrorCode::Internal,
                "the session's buffer is revoked already",
            )
        })?;
        Ok(Box::new(revoke_region(mr)?))
    }

    fn rearm(&mut self, len: usize, grant: &Grant, imm: bool) -> Result<(), rdma_core_rs::Error> {
        let Qp::Rts(qp) = &self.qp else {
            return Err(rdma_core_rs::Error::InvalidArgument {
                what: "a round on a queue pair that is not connected".to_owned(),
                advice: "connect it first".to_owned(),
            });
        };
        if self.mr.is_some() {
            return Err(rdma_core_rs::Error::InvalidArgument {
                what: "a round while the last round's buffer is still registered".to_owned(),
                advice: "end the round first".to_owned(),
            });
        }
        let mr = self.pd.register_exposed(len, grant.region)?;
        if imm {
            qp.post_recv(RECV_WR_ID)?;
        }
        self.mr = Some(mr);
        Ok(())
    }
}

/// The second half of revoking a client's access, once its queue pair is gone: deregisters
/// the MR (the rkey dies) and returns the buffer.
pub(crate) fn revoke_region(mr: ExposedRegion) -> Result<OwnedBuffer, Failure> {
    mr.deregister().map_err(|e| {
        Failure::new(
            ErrorCode::Internal,
            format!("could not revoke the client's access to the buffer: {e}"),
        )
    })
}
