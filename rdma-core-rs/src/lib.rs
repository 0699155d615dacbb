//! Safe RAII wrappers over ibverbs (through `ibverbs-sys`) for one job: an RC queue pair that
//! performs an RDMA Write (optionally with immediate) into a peer's registered memory.
//!
//! The layer owns every verbs object itself:
//!
//! * [`Context`] — an open device ([`devices`], [`Context::open`]), port queries, the GID
//!   table and GID selection ([`select_gid_in`] is the pure rule), and whether it stamps
//!   completions ([`Context::completion_clock`], a [`CompletionClock`]).
//! * [`ProtectionDomain`], [`MemoryRegion`] and [`ExposedRegion`] — buffers this crate
//!   allocates (zeroed, page-aligned) and registers with [`Access`] flags. A `MemoryRegion` is
//!   only read by the device (the source of a write); an `ExposedRegion` may be written by peers
//!   at any time, so the CPU reads it only after [`ExposedRegion::deregister`] revoked its keys.
//! * [`CompletionQueue`] — waits for one completion with a deadline, busy-polling or sleeping
//!   on a completion channel ([`CqMode`]); plain ([`Context::create_cq`]) or extended
//!   ([`Context::create_cq_ex`]), which can stamp each [`Completion`] with the device's clock.
//! * [`QueuePair`] — an RC QP whose state is a type: [`Reset`] → [`Init`] → [`Rtr`] → [`Rts`];
//!   only `QueuePair<Rts>` can [`post_write`](QueuePair::post_write).
//!   [`connect_to`](QueuePair::connect_to) goes from INIT to RTS given the peer's [`Endpoint`].
//!
//! Lifetimes: children hold `Arc`s of their parents, so a QP is destroyed before its CQ and PD,
//! an MR before its PD, a CQ before its completion channel, and the device is closed last, on
//! every path including errors. All handles are `Send + Sync`: libibverbs documents its verbs
//! as thread-safe, and the handles are only used through those verbs.
//!
//! The rules that need no device are plain functions, so they run (and are tested) anywhere;
//! here, which GID a RoCE port's address vector uses when none is asked for:
//!
//! ```
//! use rdma_core_rs::{GidEntry, GidKind, LinkLayer, select_gid_in};
//! let entry = |index, gid: &str, kind| GidEntry { index, gid: gid.parse().unwrap(), kind };
//! let table = [
//!     entry(0, "fe80::5054:ff:fe12:3401", GidKind::RoceV2),
//!     entry(1, "::ffff:10.0.0.1", GidKind::RoceV2),
//! ];
//! // RoCE: the IPv4-mapped RoCE v2 GID, routable through the netdev's address.
//! let gid = select_gid_in(&table, LinkLayer::Ethernet, 1, None)?;
//! assert_eq!((gid.index, gid.gid.to_string().as_str()), (1, "::ffff:10.0.0.1"));
//! // An index that is not in the table is refused, and the error lists the table.
//! let err = select_gid_in(&table, LinkLayer::Ethernet, 1, Some(7)).unwrap_err();
//! assert!(err.to_string().contains("::ffff:10.0.0.1"), "{err}");
//! # Ok::<(), rdma_core_rs::Error>(())
//! ```
//!
//! Errors ([`Error`]) name the step that failed, the errno and what to do ([`Error::advice`]);
//! [`Error::kind`] groups them for exit codes. There is no JSON and no socket code here.
//!
//! A typical connection (both sides exchange their [`Endpoint`], and the server its buffer's
//! `addr`/`rkey`/`len`, out of band):
//!
//! ```no_run
//! use std::time::{Duration, Instant};
//! use rdma_core_rs::*;
//! # fn exchange(_: Endpoint) -> (Endpoint, RemoteBuffer) { unimplemented!() }
//! let local = LocalPort::open(None, 1, None)?;
//! let pd = local.ctx.alloc_pd()?;
//! let cq = local.ctx.create_cq(16, CqMode::Poll)?;
//! let mr = pd.register_bytes(b"Hello RDMA Write!", Access::NONE)?;
//! let qp = pd.create_rc_qp(&cq, QpCaps::default())?.to_init(local.port.num, Access::NONE)?;
//! let psn = random_psn()?;
//! // ... send ours, receive the peer's ...
//! let (peer, remote_buf) = exchange(local.endpoint(&qp, psn));
//! let qp = qp.connect_to(&local, &peer, psn)?;
//! qp.post_write(&mr, 0..mr.len(), remote_buf, Some(0xC0FFEE), 1)?;
//! let done = cq.poll(Instant::now() + Duration::from_secs(5))?;
//! assert_eq!(done.opcode, WcOpcode::RdmaWrite);
//! # Ok::<(), Error>(())
//! ```

mod clock;
pub mod cm;
mod context;
mod cq;
mod endpoint;
pub mod error;
mod fd;
mod local;
pub mod memlock;
mod pd;
mod qp;
pub mod route;
mod transport;
mod types;
mod verbs_ctx;

pub use clock::CompletionClock;
pub use context::{Context, DeviceInfo, devices, select_gid_in};
pub use cq::{Completion, CompletionQueue, CqMode, ParseCqModeError, Wait};
pub use endpoint::Endpoint;
pub use error::{Error, ErrorKind, Result, VerbOp};
pub use local::LocalPort;
pub use pd::{ExposedRegion, MemoryRegion, OwnedBuffer, ProtectionDomain};
pub use qp::{
    Init, MAX_PSN, MAX_WRITE_LEN, PathClass, QpCaps, QueuePair, RemoteBuffer, RemoteQp, Reset, Rtr,
    RtrParams, Rts, RtsParams, WriteFlags,
};
pub use transport::Transport;
pub use types::{
    Access, Gid, GidEntry, GidKind, LinkLayer, Mtu, PortInfo, PortState, QpState, WcOpcode,
    WcStatus, describe_gid_table,
};

/// A random 24-bit initial packet sequence number from the OS CSPRNG.
///
/// # Errors
/// [`Error::Random`] if the OS generator fails.
pub fn random_psn() -> Result<u32> {
    getrandom::u32().map(|v| v & MAX_PSN).map_err(Error::Random)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn psn_is_24_bit_and_varies() {
        let psns: Vec<u32> = (0..64).map(|_| random_psn().unwrap()).collect();
        assert!(psns.iter().all(|p| *p <= MAX_PSN));
        // 64 draws from 2^24 values: all equal would mean a broken source.
        assert!(psns.iter().any(|p| *p != psns[0]));
    }
}
