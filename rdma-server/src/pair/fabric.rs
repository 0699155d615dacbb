//! A fake RDMA fabric, in memory: the server's sessions run on its ports
//! ([`crate::verbs::WriteVerbs`]) and the test's clients write through it, with the rules of an
//! RC queue pair that matter to a session:
//! - a write lands only through a queue pair connected to the one the region was exposed with
//!   (the same protection domain), with that region's live rkey, inside its bounds;
//! - a write with immediate data needs the receive posted, and completes it;
//! - after `revoke` the region and its queue pair are gone: a write then finds neither;
//! - after `end_round` the region is gone and the queue pair stays; `rearm` registers a new
//!   region (a new rkey) in the same protection domain.
//!
//! It keeps count of what the sessions did to it (exposures made, left live) and of the writes
//! it refused, which the cases assert on.

use crate::failure::Failure;
use crate::grant::Grant;
use crate::verbs::{CmConnect, Exposure, PortName, Region, WriteVerbs};
use rdma_core_rs::{Completion, CqMode, WcOpcode, WcStatus};
use rdma_proto::{Gid, QpEndpoint};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

/// Where every region of the fabric lives in its (fake) address space: region `n` at
/// `IOVA + BASE * n`, so that addresses of different regions never overlap, all of them at or
/// above 2^48 as a device's registrations are (`rdma_core_rs`'s `IOVA_MIN`: below it an
/// address could be a pointer into the server's heap, which the hostile matrix refuses).
const BASE: u64 = 1 << 32;
/// The lowest address of the fabric's regions.
const IOVA: u64 = 1 << 48;

/// The path MTU of every fake connection.
pub const MTU: u32 = 1024;

/// The fabric: queue pairs and regions, both sides'.
#[derive(Debug, Default)]
pub struct Fabric {
    state: Mutex<State>,
    completed: Condvar,
}

#[derive(Debug, Default)]
struct State {
    /// The last queue pair number or rkey handed out.
    last: u32,
    qps: HashMap<u32, Qp>,
    /// By rkey.
    regions: HashMap<u32, FakeRegion>,
    /// The rkey of each exposure sessions made (device work done for them).
    exposed: Vec<u32>,
    /// The rkey of each round's region registered anew on an exposure's queue pair.
    rearmed: Vec<u32>,
    /// Writes the fabric refused, and why.
    refused: Vec<(WcStatus, String)>,
    /// Writes posted by clients, landed or not.
    posted: usize,
}

#[derive(Debug, Default)]
struct Qp {
    /// Whether it is a client's ([`Fabric::client_qp`]).
    client: bool,
    /// The queue pair it is connected to.
    peer: Option<u32>,
    /// A receive waits for a write with immediate data.
    recv_posted: bool,
    completions: VecDeque<Completion>,
}

#[derive(Debug)]
struct FakeRegion {
    addr: u64,
    bytes: Vec<u8>,
    /// The queue pair it was exposed with (its protection domain's).
    qp: u32,
}

impl Fabric {
    /// A new fabric, shared by the server's port and the test.
    #[must_use]
    pub fn new() -> Arc<Self> {
        Arc::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A port of this fabric; `imm`: whether its transport has write-with-immediate.
    #[must_use]
    pub fn port(self: &Arc<Self>, imm: bool) -> FakePort {
        FakePort {
            fabric: Arc::clone(self),
            imm,
        }
    }

    /// A client's queue pair, and its endpoint for the hello.
    pub fn client_qp(&self) -> QpEndpoint {
        let mut st = self.lock();
        st.last += 1;
        let qpn = st.last;
        st.qps.insert(
            qpn,
            Qp {
                client: true,
                ..Qp::default()
            },
        );
        endpoint(qpn, 1)
    }

    /// Connects the client's queue pair `ours` to `theirs` (the accept's).
    pub fn connect(&self, ours: u32, theirs: u32) {
        if let Some(qp) = self.lock().qps.get_mut(&ours) {
            qp.peer = Some(theirs);
        }
    }

    /// An RDMA Write of `bytes` from queue pair `from` to `addr` under `rkey`, with immediate
    /// `imm`: what the client's send completion would say (`Ok`: it landed).
    ///
    /// # Errors
    /// The status of the failed completion: the responder gone (retries exceeded), a wrong
    /// rkey or bounds (remote access), no receive for the immediate (RNR retries exceeded).
    pub fn write(
        &self,
        from: u32,
        addr: u64,
        rkey: u32,
        bytes: &[u8],
        imm: Option<u32>,
    ) -> Result<(), WcStatus> {
        let mut st = self.lock();
        st.posted += 1;
        let verdict = st.land(from, addr, rkey, bytes, imm);
        if let Err((status, why)) = &verdict {
            st.refused.push((*status, why.clone()));
        }
        drop(st);
        self.completed.notify_all();
        verdict.map_err(|(status, _)| status)
    }

    /// The rkey of each exposure the sessions made, in order.
    #[must_use]
    pub fn exposed(&self) -> Vec<u32> {
        self.lock().exposed.clone()
    }

    /// The rkey of each region registered for a round after the first, in order.
    #[must_use]
    pub fn rearmed(&self) -> Vec<u32> {
        self.lock().rearmed.clone()
    }

    /// How many regions are still exposed (a session that ended must leave none).
    #[must_use]
    pub fn live_regions(&self) -> usize {
        self.lock().regions.len()
    }

    /// The writes refused so far, and why.
    #[must_use]
    pub fn refused(&self) -> Vec<(WcStatus, String)> {
        self.lock().refused.clone()
    }

    /// How many writes clients posted, landed or not.
    #[must_use]
    pub fn posted(&self) -> usize {
        self.lock().posted
    }

    /// The client queue pairs ([`client_qp`](Self::client_qp)) connected so far
    /// ([`connect`](Self::connect)), each with the queue pair it was connected to.
    #[must_use]
    pub fn connected(&self) -> Vec<(u32, u32)> {
        let st = self.lock();
        let mut v: Vec<_> = st
            .qps
            .iter()
            .filter(|(_, qp)| qp.client)
            .filter_map(|(&n, qp)| Some((n, qp.peer?)))
            .collect();
        v.sort_unstable();
        v
    }
}

impl State {
    /// A zeroed region of `len` bytes under `rkey`, exposed with queue pair `qp`; its address.
    fn register(&mut self, rkey: u32, len: usize, qp: u32) -> u64 {
        let addr = IOVA + BASE * u64::from(rkey);
        self.regions.insert(
            rkey,
            FakeRegion {
                addr,
                bytes: vec![0; len],
                qp,
            },
        );
        addr
    }

    fn land(
        &mut self,
        from: u32,
        addr: u64,
        rkey: u32,
        bytes: &[u8],
        imm: Option<u32>,
    ) -> Result<(), (WcStatus, String)> {
        let peer = self.qps.get(&from).and_then(|qp| qp.peer).ok_or((
            WcStatus::RetryExcErr,
            "our queue pair is not connected".to_owned(),
        ))?;
        if !self.qps.contains_key(&peer) {
            return Err((
                WcStatus::RetryExcErr,
                format!("no queue pair {peer:#x} answers"),
            ));
        }
        let region = self
            .regions
            .get_mut(&rkey)
            .filter(|r| r.qp == peer)
            .ok_or((
                WcStatus::RemAccessErr,
                format!("rkey {rkey:#x} is no region of the peer's protection domain"),
            ))?;
        let start = addr
            .checked_sub(region.addr)
            .and_then(|o| usize::try_from(o).ok());
        let range = start
            .and_then(|s| Some(s..s.checked_add(bytes.len())?))
            .filter(|r| r.end <= region.bytes.len())
            .ok_or((
                WcStatus::RemAccessErr,
                format!("{} bytes at {addr:#x} are outside the region", bytes.len()),
            ))?;
        if let Some(imm) = imm {
            let qp = self.qps.get_mut(&peer).filter(|qp| qp.recv_posted).ok_or((
                WcStatus::RnrRetryExcErr,
                "no receive posted for the immediate".to_owned(),
            ))?;
            qp.recv_posted = false;
            qp.completions.push_back(Completion {
                wr_id: 0,
                opcode: WcOpcode::RecvRdmaWithImm,
                byte_len: u32::try_from(bytes.len()).unwrap_or(u32::MAX),
                imm: Some(imm),
                timestamp: None,
            });
        }
        // Only now that it is admitted: a refused write lands no byte.
        let region = self
            .regions
            .get_mut(&rkey)
            .ok_or((WcStatus::RemAccessErr, "gone".to_owned()))?;
        region.bytes[range].copy_from_slice(bytes);
        Ok(())
    }
}

fn endpoint(qpn: u32, psn: u32) -> QpEndpoint {
    QpEndpoint {
        qpn,
        psn,
        gid: Gid(std::net::Ipv6Addr::from([0, 0, 0, 0, 0, 0xffff, 0x7f00, 1]).octets()),
        lid: 0,
        mtu: MTU,
    }
}

/// A port of a [`Fabric`], for the server's sessions.
#[derive(Debug)]
pub struct FakePort {
    fabric: Arc<Fabric>,
    imm: bool,
}

impl WriteVerbs for FakePort {
    fn name(&self) -> PortName {
        PortName {
            device: "fake0".to_owned(),
            port: 1,
            gid_index: 1,
            gid: "::ffff:127.0.0.1".to_owned(),
        }
    }

    fn has_write_with_imm(&self) -> bool {
        self.imm
    }

    fn still_fresh(&self) -> bool {
        true
    }

    fn expose(
        &self,
        len: usize,
        _: &Grant,
        _: CqMode,
        imm: bool,
    ) -> Result<Box<dyn Exposure + '_>, rdma_core_rs::Error> {
        let mut st = self.fabric.lock();
        st.last += 2;
        let (qpn, rkey) = (st.last - 1, st.last);
        st.exposed.push(rkey);
        st.qps.insert(
            qpn,
            Qp {
                recv_posted: imm,
                ..Qp::default()
            },
        );
        let addr = st.register(rkey, len, qpn);
        Ok(Box::new(FakeExposure {
            fabric: &self.fabric,
            qpn,
            region: Some(Region {
                addr,
                rkey,
                len: len as u64,
            }),
        }))
    }

    fn device(&self) -> Option<&rdma_core_rs::LocalPort> {
        None
    }
}

/// One session's exposure on a [`Fabric`]; dropped without `revoke` (a failed session), it
/// takes the region and the queue pair away as a device's drop does.
struct FakeExposure<'a> {
    fabric: &'a Fabric,
    qpn: u32,
    /// `None` once revoked, and between rounds.
    region: Option<Region>,
}

impl Exposure for FakeExposure<'_> {
    fn region(&self) -> Option<Region> {
        self.region
    }

    fn connect(&mut self, peer: &QpEndpoint, psn: u32) -> Result<QpEndpoint, rdma_core_rs::Error> {
        if let Some(qp) = self.fabric.lock().qps.get_mut(&self.qpn) {
            qp.peer = Some(peer.qpn);
        }
        Ok(endpoint(self.qpn, psn))
    }

    fn connect_cm(&mut self, _: &mut CmConnect<'_>) -> Option<Result<(), Failure>> {
        None
    }

    fn qp(&self) -> (u32, u32) {
        (self.qpn, MTU)
    }

    fn poll(&self, deadline: Instant) -> Result<Completion, rdma_core_rs::Error> {
        let started = Instant::now();
        let mut st = self.fabric.lock();
        loop {
            if let Some(c) = st
                .qps
                .get_mut(&self.qpn)
                .and_then(|qp| qp.completions.pop_front())
            {
                return Ok(c);
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(rdma_core_rs::Error::Timeout {
                    what: "for a completion on the fake fabric",
                    waited: now - started,
                });
            }
            st = self
                .fabric
                .completed
                .wait_timeout(st, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    fn revoke(&mut self) -> Result<crate::verbs::Revoked, Failure> {
        self.fabric.lock().qps.remove(&self.qpn);
        self.end_round()
    }

    fn end_round(&mut self) -> Result<crate::verbs::Revoked, Failure> {
        let r = self
            .region
            .take()
            .ok_or_else(|| Failure::new(rdma_proto::ErrorCode::Internal, "revoked already"))?;
        let bytes = self
            .fabric
            .lock()
            .regions
            .remove(&r.rkey)
            .map(|r| r.bytes)
            .unwrap_or_default();
        Ok(Box::new(bytes))
    }

    fn rearm(&mut self, len: usize, _: &Grant, imm: bool) -> Result<(), rdma_core_rs::Error> {
        let mut st = self.fabric.lock();
        let connected = st.qps.get(&self.qpn).is_some_and(|qp| qp.peer.is_some());
        if !connected || self.region.is_some() {
            return Err(rdma_core_rs::Error::InvalidArgument {
                what: "a round without a connected queue pair, or with the last one's region live"
                    .to_owned(),
                advice: "connect, and end the round first".to_owned(),
            });
        }
        st.last += 1;
        let rkey = st.last;
        st.rearmed.push(rkey);
        let addr = st.register(rkey, len, self.qpn);
        if imm {
            if let Some(qp) = st.qps.get_mut(&self.qpn) {
                qp.recv_posted = true;
            }
        }
        self.region = Some(Region {
            addr,
            rkey,
            len: len as u64,
        });
        Ok(())
    }
}

impl Drop for FakeExposure<'_> {
    fn drop(&mut self) {
        let mut st = self.fabric.lock();
        st.qps.remove(&self.qpn);
        if let Some(r) = self.region {
            st.regions.remove(&r.rkey);
        }
    }
}
