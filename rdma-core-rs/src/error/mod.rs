//! The crate's error type: every variant says what failed and what to do about it.
//!
//! Verb failures carry the errno and an advice string chosen per verb and errno
//! ([`advice_for`]); failed work completions carry the status and an advice chosen per status
//! ([`completion_advice`]). [`Error::kind`] groups errors so binaries can pick exit codes.

mod advice;
mod kind;
mod verb;

pub use kind::ErrorKind;
pub use verb::VerbOp;

use std::time::Duration;

use crate::types::{PortState, WcOpcode, WcStatus};

pub use advice::{advice_for, completion_advice, errno_label, errno_name};

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Advice when the kernel has no RDMA stack at all.
pub const NO_RDMA_ADVICE: &str = "this kernel has no RDMA support: load rdma_rxe \
     (`modprobe rdma_rxe; rdma link add rxe0 type rxe netdev IF`) or run `cargo xtask e2e`, \
     which boots guests";

/// Advice when RDMA exists but no device is registered.
pub const NO_DEVICES_ADVICE: &str = "no RDMA device is registered: create a Soft-RoCE device \
     (`rdma link add rxe0 type rxe netdev IF`, needs rdma_rxe and crc32_generic), or check that the \
     HCA driver and ib_uverbs are loaded (`rdma link`, `ibv_devices`)";

/// Errors from this crate. `Display` names what failed and gives advice.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The kernel has no RDMA stack (`ibv_get_device_list`: ENOSYS, or `/sys/class/infiniband`
    /// missing).
    #[error("RDMA is unavailable (ibv_get_device_list: {}): {NO_RDMA_ADVICE}", errno_label(*.errno))]
    NoRdmaInKernel {
        /// The errno `ibv_get_device_list` set.
        errno: i32,
    },
    /// RDMA works but no device exists.
    #[error("no RDMA devices found: {NO_DEVICES_ADVICE}")]
    NoDevices,
    /// Registering would pin more memory than `RLIMIT_MEMLOCK` allows ([`crate::memlock`]).
    #[error(
        "registering {} KiB would exceed the locked-memory limit (RLIMIT_MEMLOCK {} KiB, {} KiB already pinned): {}",
        .need / 1024, .limit / 1024, .pinned / 1024, advice::memlock_advice(.need + .pinned)
    )]
    MemlockLimit {
        /// Bytes the registration pins (whole pages).
        need: u64,
        /// Bytes this process has pinned already.
        pinned: u64,
        /// The soft limit, bytes.
        limit: u64,
    },
    /// The requested device is not in the list.
    #[error("RDMA device `{wanted}` not found; available: {}; pick one of those (see `ibv_devices` / `rdma link`)",
        .available.join(", "))]
    DeviceNotFound {
        /// The name asked for.
        wanted: String,
        /// Names that exist.
        available: Vec<String>,
    },
    /// A verbs call failed; `advice` is specific to the call and errno.
    #[error("{} failed ({}{}: {}): {advice}", .op.step(), .op.verb(), fmt_on(.on), errno_label(*.errno))]
    Verb {
        /// Which call.
        op: VerbOp,
        /// What it was called on (e.g. "port 1"), may be empty.
        on: String,
        /// errno (positive).
        errno: i32,
        /// What to do.
        advice: String,
    },
    /// The port exists but is not ACTIVE.
    #[error(
        "port {port} is not active (state {state}): check `rdma link` / `ibv_devinfo`; the netdev must be up"
    )]
    PortNotActive {
        /// Port number.
        port: u8,
        /// Its state.
        state: PortState,
    },
    /// An explicitly requested GID index is empty or out of range.
    #[error(
        "GID index {index} is not a valid entry on port {port}; pass one of these with --gid-idx:\n{table}"
    )]
    GidIndexInvalid {
        /// Port number.
        port: u8,
        /// The index asked for.
        index: u32,
        /// [`describe_gid_table`](crate::describe_gid_table) of the port.
        table: String,
    },
    /// Automatic GID selection found nothing usable.
    #[error(
        "no usable GID on port {port}:\n{table}\npass --gid-idx, check `rdma link` / `ibv_devinfo -v`, \
             and assign an IP address to the netdev (RoCE v2 GIDs come from its addresses)"
    )]
    NoUsableGid {
        /// Port number.
        port: u8,
        /// [`describe_gid_table`](crate::describe_gid_table) of the port.
        table: String,
    },
    /// No port could be chosen for the connection's local address ([`crate::route`]).
    #[error("{0}")]
    NoRoute(#[from] crate::route::NoChoice),
    /// A parameter is outside what verbs accepts.
    #[error("invalid argument: {what}; {advice}")]
    InvalidArgument {
        /// What was wrong.
        what: String,
        /// What to do.
        advice: String,
    },
    /// A byte range does not fit the buffer it refers to.
    #[error("invalid range: {what}")]
    InvalidRange {
        /// What was wrong.
        what: String,
    },
    /// An RDMA Write longer than the remote buffer or the 2^31-1 byte verbs limit.
    #[error(
        "write of {len} bytes is too long: {reason} (limit {limit} bytes); send less or ask the server for a larger buffer"
    )]
    WriteTooLong {
        /// Requested length.
        len: u64,
        /// The limit it exceeds.
        limit: u64,
        /// Which limit.
        reason: &'static str,
    },
    /// Allocating the buffer for a memory region failed.
    #[error("could not allocate {len} bytes for a memory region; use a smaller buffer")]
    Alloc {
        /// Requested length.
        len: usize,
    },
    /// A wait ran past its deadline.
    #[error(
        "timed out after {waited:?} {what}; the peer may be gone, or the path broken or dropping packets (check both sides' logs and the link's drop counters)"
    )]
    Timeout {
        /// What was waited for.
        what: &'static str,
        /// How long.
        waited: Duration,
    },
    /// A work completion came back with an error status.
    #[error(
        "work request {wr_id} completed with {status_str} ({status:?}, vendor error {vendor_err:#x}): {advice}"
    )]
    Completion {
        /// Status.
        status: WcStatus,
        /// `ibv_wc_status_str` text.
        status_str: String,
        /// Vendor syndrome.
        vendor_err: u32,
        /// The work request id.
        wr_id: u64,
        /// Opcode as reported. Verbs leaves it undefined for failed completions, so it is not
        /// shown in the message; treat it as a hint only.
        opcode: WcOpcode,
        /// What to do.
        advice: String,
    },
    /// RDMA CM answered a step with an event other than the one that lets it go on (a reject,
    /// an unreachable peer, an address or route error), or with a failed status.
    #[error("RDMA CM {step}: got {event} (status {status}): {advice}")]
    CmFailed {
        /// What was waited for, e.g. "connect".
        step: &'static str,
        /// The event's name (`rdma_event_str`).
        event: String,
        /// The event's status (a negative errno, or a reject reason).
        status: i32,
        /// What to do.
        advice: String,
    },
    /// The path RDMA CM set up for a connection request leads somewhere its judge does not
    /// allow (the passive side's [`crate::cm::Gate::path`]); the request was rejected.
    #[error("RDMA CM connection request rejected: {why}")]
    CmPath {
        /// Why, from the judge.
        why: String,
    },
    /// More connection requests than a [`crate::cm::Listener`] takes were rejected.
    #[error(
        "RDMA CM: {rejected} connection requests rejected without one the session admits; gave up"
    )]
    CmFlood {
        /// How many were rejected.
        rejected: u32,
    },
    /// The OS random number generator failed.
    #[error(
        "the OS random number generator failed ({0}); check that getrandom(2) / /dev/urandom works"
    )]
    Random(getrandom::Error),
}

fn fmt_on(on: &str) -> String {
    if on.is_empty() {
        String::new()
    } else {
        format!(" on {on}")
    }
}

impl Error {
    /// Builds [`Error::Verb`] with advice chosen for `op` and `errno`.
    #[must_use]
    pub fn verb(op: VerbOp, on: impl Into<String>, errno: i32) -> Error {
        let errno = errno.abs();
        Error::Verb {
            op,
            on: on.into(),
            errno,
            advice: advice_for(op, errno),
        }
    }

    /// Builds [`Error::Verb`] from the thread's current `errno` (for calls that return NULL).
    pub(crate) fn last_os(op: VerbOp, on: impl Into<String>) -> Error {
        let errno = std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO);
        // Some providers return NULL without setting errno; do not report "success".
        Error::verb(op, on, if errno == 0 { libc::EIO } else { errno })
    }

    /// The error class, for exit codes.
    #[must_use]
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::NoRdmaInKernel { .. } | Error::NoDevices | Error::DeviceNotFound { .. } => {
                ErrorKind::NoDevice
            }
            Error::Verb { op, .. } => op.kind(),
            Error::PortNotActive { .. } | Error::NoUsableGid { .. } => ErrorKind::Port,
            Error::NoRoute(
                crate::route::NoChoice::NoGidFor { .. }
                | crate::route::NoChoice::HolderNotActive { .. },
            ) => ErrorKind::Port,
            Error::NoRoute(_) => ErrorKind::Usage,
            Error::GidIndexInvalid { .. }
            | Error::InvalidArgument { .. }
            | Error::InvalidRange { .. }
            | Error::WriteTooLong { .. } => ErrorKind::Usage,
            Error::Alloc { .. }
            | Error::Random(_)
            | Error::MemlockLimit { .. }
            | Error::CmFailed { .. }
            | Error::CmPath { .. }
            | Error::CmFlood { .. } => ErrorKind::Setup,
            Error::Timeout { .. } => ErrorKind::Timeout,
            Error::Completion { .. } => ErrorKind::Transfer,
        }
    }

    /// The errno behind the error, if one is.
    #[must_use]
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::NoRdmaInKernel { errno } | Error::Verb { errno, .. } => Some(*errno),
            Error::Random(e) => e.raw_os_error(),
            _ => None,
        }
    }

    /// Just the advice part of the message, if the variant has one.
    #[must_use]
    pub fn advice(&self) -> Option<String> {
        match self {
            Error::NoRdmaInKernel { .. } => Some(NO_RDMA_ADVICE.to_owned()),
            Error::NoDevices => Some(NO_DEVICES_ADVICE.to_owned()),
            Error::DeviceNotFound { available, .. } => {
                Some(format!("pick one of: {}", available.join(", ")))
            }
            Error::Verb { advice, .. }
            | Error::InvalidArgument { advice, .. }
            | Error::CmFailed { advice, .. }
            | Error::Completion { advice, .. } => Some(advice.clone()),
            Error::PortNotActive { .. } => {
                Some("check `rdma link` / `ibv_devinfo`; the netdev must be up".to_owned())
            }
            Error::GidIndexInvalid { table, .. } => {
                Some(format!("pass a valid --gid-idx; valid entries:\n{table}"))
            }
            Error::NoUsableGid { .. } => Some(
                "pass --gid-idx, check `rdma link` / `ibv_devinfo -v`, and assign an IP address \
                 to the netdev"
                    .to_owned(),
            ),
            Error::WriteTooLong { .. } => {
                Some("send less or ask the server for a larger buffer".to_owned())
            }
            Error::Alloc { .. } => Some("use a smaller buffer".to_owned()),
            Error::MemlockLimit { need, pinned, .. } => Some(advice::memlock_advice(need + pinned)),
            Error::Timeout { .. } => Some(
                "the peer may be gone, or the path drops packets (RoCE retransmits a lost \
                     packet only after the queue pair's timeout, so a lossy link can stall a \
                     transfer); check both sides' logs and the link's drop counters \
                     (`ethtool -S`, `rdma statistic`), or allow more with --timeout"
                    .to_owned(),
            ),
            Error::Random(_) => Some("check that getrandom(2) / /dev/urandom works".to_owned()),
            Error::CmFlood { .. } => Some(
                "somebody sends RDMA CM connection requests to this session's port that are not \
                 its client's; see the log for where from"
                    .to_owned(),
            ),
            Error::InvalidRange { .. } | Error::NoRoute(_) | Error::CmPath { .. } => None,
        }
    }

    pub(crate) fn invalid(what: impl Into<String>, advice: impl Into<String>) -> Error {
        Error::InvalidArgument {
            what: what.into(),
            advice: advice.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rtr_einval_message_matches_the_documented_form() {
        let e = Error::verb(VerbOp::ModifyQpRtr, "", libc::EINVAL);
        let msg = e.to_string();
        assert!(
            msg.starts_with("RTR failed (ibv_modify_qp INIT->RTR: EINVAL"),
            "unexpected message: {msg}"
        );
        assert!(msg.contains("bad address vector"), "{msg}");
        assert!(msg.contains("--gid-idx"), "{msg}");
        assert_eq!(e.errno(), Some(libc::EINVAL));
        assert_eq!(e.kind(), ErrorKind::Setup);
        assert!(e.advice().is_some_and(|a| a.contains("bad address vector")));
    }

    #[test]
    fn errno_is_normalised_to_positive() {
        let e = Error::verb(VerbOp::PostSend, "QP 7", -libc::ENOMEM);
        assert_eq!(e.errno(), Some(libc::ENOMEM));
        assert!(e.to_string().contains("on QP 7"), "{e}");
        assert!(e.to_string().contains("send queue is full"), "{e}");
        assert_eq!(e.kind(), ErrorKind::Transfer);
    }

    #[test]
    fn every_op_and_errno_gives_advice() {
        let ops = [
            VerbOp::ListDevices,
            VerbOp::OpenDevice,
            VerbOp::QueryDevice,
            VerbOp::QueryDeviceEx,
            VerbOp::QueryPort,
            VerbOp::QueryGid,
            VerbOp::AllocPd,
            VerbOp::RegMr,
            VerbOp::DeregMr,
            VerbOp::CreateCompChannel,
            VerbOp::CreateCq,
            VerbOp::CreateCqEx,
            VerbOp::CreateQp,
            VerbOp::ModifyQpInit,
            VerbOp::ModifyQpRtr,
            VerbOp::ModifyQpRts,
            VerbOp::QueryQp,
            VerbOp::PostSend,
            VerbOp::PostRecv,
            VerbOp::PollCq,
            VerbOp::ReqNotifyCq,
            VerbOp::WaitCqEvent,
        ];
        for op in ops {
            for errno in [libc::EINVAL, libc::ENOMEM, libc::EIO, 12345] {
                let e = Error::verb(op, "", errno);
                assert!(e.advice().is_some_and(|a| !a.is_empty()));
                let msg = e.to_string();
                assert!(msg.contains(op.verb()), "{msg}");
            }
        }
    }

    #[test]
    fn kinds_and_advice_of_simple_variants() {
        let e = Error::NoRdmaInKernel {
            errno: libc::ENOSYS,
        };
        assert_eq!(e.kind(), ErrorKind::NoDevice);
        assert!(e.to_string().contains("modprobe rdma_rxe"));
        assert!(e.to_string().contains("cargo xtask e2e"));
        assert_eq!(e.errno(), Some(libc::ENOSYS));
        let e = Error::NoDevices;
        assert!(e.to_string().contains("rdma link add"));
        let e = Error::DeviceNotFound {
            wanted: "mlx5_9".into(),
            available: vec!["rxe0".into()],
        };
        assert!(e.to_string().contains("mlx5_9") && e.to_string().contains("rxe0"));
        let e = Error::PortNotActive {
            port: 1,
            state: PortState::Down,
        };
        assert_eq!(e.kind(), ErrorKind::Port);
        assert!(e.to_string().contains("DOWN") && e.to_string().contains("rdma link"));
        let e = Error::Timeout {
            what: "waiting for a completion",
            waited: Duration::from_secs(2),
        };
        assert_eq!(e.kind(), ErrorKind::Timeout);
        let e = Error::WriteTooLong {
            len: 10,
            limit: 5,
            reason: "longer than the remote buffer",
        };
        assert_eq!(e.kind(), ErrorKind::Usage);
    }
}
