//! Where the verbs layer meets the contract: which exit ([`Exit`]) each verbs error ends in, and
//! the handshake's endpoint ([`QpEndpoint`]) to and from the verbs layer's ([`Endpoint`]).
//! rdma-core-rs knows neither the contract nor its exit codes; this is the one place they meet.

use rdma_core_rs::{Endpoint, Error, ErrorKind, Gid, LocalPort, VerbOp};
use rdma_proto::{Exit, QpEndpoint};
use std::error::Error as StdError;

/// The exit for a verbs error. A named device that does not exist, a port that does not
/// exist and a GID index outside the table are the user's mistakes; a kernel without RDMA
/// or a port that is down is the machine's; an invalid argument the program itself built
/// is a bug.
#[must_use]
pub fn exit_of_verbs(error: &Error) -> Exit {
    match error {
        Error::DeviceNotFound { .. } | Error::GidIndexInvalid { .. } => Exit::Usage,
        // The user named a device the address does not use, or must name one.
        Error::NoRoute(
            rdma_core_rs::route::NoChoice::DeviceMismatch { .. }
            | rdma_core_rs::route::NoChoice::AmbiguousInfiniBand { .. },
        ) => Exit::Usage,
        Error::Verb {
            op: VerbOp::QueryPort,
            errno: libc::EINVAL,
            ..
        } => Exit::Usage,
        _ => match error.kind() {
            ErrorKind::NoDevice | ErrorKind::Port | ErrorKind::Setup => Exit::Rdma,
            ErrorKind::Timeout => Exit::Timeout,
            ErrorKind::Transfer => Exit::Transfer,
            ErrorKind::Usage => Exit::Internal,
        },
    }
}

/// [`exit_of_verbs`] of `cause`, if it is a verbs error: for a binary's error classifier.
#[must_use]
pub fn verbs_exit(cause: &(dyn StdError + 'static)) -> Option<Exit> {
    cause.downcast_ref::<Error>().map(exit_of_verbs)
}

/// The peer's endpoint as the handshake carried it (a hello's or an accept's).
#[must_use]
pub fn from_wire(e: &QpEndpoint) -> Endpoint {
    Endpoint::new(e.qpn, e.psn, Gid(e.gid.0), e.lid, e.mtu)
}

/// Our endpoint as the handshake carries it.
#[must_use]
pub fn to_wire(e: Endpoint) -> QpEndpoint {
    QpEndpoint::new(e.qpn, e.psn, rdma_proto::Gid(e.gid.0), e.lid, e.mtu)
}

/// The device, port and GID a session's queue pairs live on, as the binaries' events name them
/// (`connected`, `port_chosen`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortName {
    pub device: String,
    pub port: u8,
    pub gid_index: u32,
    pub gid: String,
}

impl From<&LocalPort> for PortName {
    fn from(local: &LocalPort) -> Self {
        PortName {
            device: local.ctx.name().to_owned(),
            port: local.port.num,
            gid_index: local.gid.index,
            gid: local.gid.gid.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdma_core_rs::{PortState, WcOpcode, WcStatus};
    use std::time::Duration;

    #[test]
    fn the_users_mistakes_are_usage_errors_and_the_machines_are_rdma_errors() {
        let table = "  [0] fe80::1 (RoCE v2)".to_owned();
        let cases = [
            (
                Error::DeviceNotFound {
                    wanted: "nosuch".into(),
                    available: vec!["rxe0".into()],
                },
                Exit::Usage,
            ),
            (
                Error::GidIndexInvalid {
                    port: 1,
                    index: 99,
                    table: table.clone(),
                },
                Exit::Usage,
            ),
            (
                Error::verb(VerbOp::QueryPort, "port 9", libc::EINVAL),
                Exit::Usage,
            ),
            (
                Error::verb(VerbOp::QueryPort, "port 1", libc::EIO),
                Exit::Rdma,
            ),
            (
                Error::NoRdmaInKernel {
                    errno: libc::ENOSYS,
                },
                Exit::Rdma,
            ),
            (Error::NoDevices, Exit::Rdma),
            (
                Error::PortNotActive {
                    port: 1,
                    state: PortState::Down,
                },
                Exit::Rdma,
            ),
            (Error::NoUsableGid { port: 1, table }, Exit::Rdma),
            (
                Error::NoRoute(rdma_core_rs::route::NoChoice::DeviceMismatch {
                    wanted: "rxe0".into(),
                    addr: "10.0.1.2".parse().unwrap(),
                    carrier: "rxe1 port 1".into(),
                }),
                Exit::Usage,
            ),
            (
                Error::NoRoute(rdma_core_rs::route::NoChoice::AmbiguousInfiniBand {
                    addr: "10.0.1.2".parse().unwrap(),
                    ports: vec!["mlx5_0 port 1".into(), "mlx5_1 port 1".into()],
                }),
                Exit::Usage,
            ),
            (
                Error::NoRoute(rdma_core_rs::route::NoChoice::NoGidFor {
                    addr: "10.0.1.2".parse().unwrap(),
                    seen: String::new(),
                }),
                Exit::Rdma,
            ),
            (Error::verb(VerbOp::RegMr, "", libc::ENOMEM), Exit::Rdma),
            (
                Error::Timeout {
                    what: "for a completion",
                    waited: Duration::from_secs(1),
                },
                Exit::Timeout,
            ),
            (
                Error::Completion {
                    status: WcStatus::RemAccessErr,
                    status_str: "remote access error".into(),
                    vendor_err: 0,
                    wr_id: 1,
                    opcode: WcOpcode::RdmaWrite,
                    advice: String::new(),
                },
                Exit::Transfer,
            ),
            (
                Error::InvalidRange {
                    what: "0..99".into(),
                },
                Exit::Internal,
            ),
        ];
        for (error, want) in cases {
            assert_eq!(exit_of_verbs(&error), want, "{error}");
        }
    }

    #[test]
    fn only_verbs_errors_are_classified_here() {
        let io = std::io::Error::other("x");
        assert_eq!(verbs_exit(&io), None);
        assert_eq!(verbs_exit(&Error::NoDevices), Some(Exit::Rdma));
    }

    #[test]
    fn the_handshakes_endpoint_converts_both_ways_unchanged() {
        let ours = Endpoint::new(0x00ab_cdef, 0x0012_3456, Gid([7; 16]), 3, 1024);
        let wire = to_wire(ours);
        assert_eq!(
            (wire.qpn, wire.psn, wire.gid.0, wire.lid, wire.mtu),
            (0x00ab_cdef, 0x0012_3456, [7; 16], 3, 1024)
        );
        assert_eq!(from_wire(&wire), ours);
    }
}
