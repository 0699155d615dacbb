//! [`Transport`]: how a device carries RDMA, and what that allows.

use ibverbs_sys as ffi;

/// How a device carries RDMA: the InfiniBand transport (InfiniBand and RoCE, including
/// Soft-RoCE) or iWARP (RDMA over TCP, e.g. Soft-iWARP `siw`), whose queue pairs connect only
/// through RDMA CM and which has no RDMA Write with immediate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Transport {
    /// InfiniBand transport: InfiniBand and RoCE.
    InfiniBand,
    /// iWARP.
    Iwarp,
    /// Anything else the device reports (usNIC, unknown).
    Other,
}

impl Transport {
    /// From `IBV_TRANSPORT_*`.
    #[must_use]
    pub fn from_ibv(raw: i32) -> Transport {
        match raw {
            ffi::IBV_TRANSPORT_IB => Transport::InfiniBand,
            ffi::IBV_TRANSPORT_IWARP => Transport::Iwarp,
            _ => Transport::Other,
        }
    }

    /// Whether the device has RDMA Write with immediate (iWARP has not).
    #[must_use]
    pub fn has_write_with_imm(self) -> bool {
        self != Transport::Iwarp
    }

    /// Whether queue pairs must be connected through RDMA CM (iWARP: a hand-made RTS is
    /// refused, the connection is a TCP socket the CM owns).
    #[must_use]
    pub fn needs_cm(self) -> bool {
        self == Transport::Iwarp
    }
}

impl std::fmt::Display for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Transport::InfiniBand => "InfiniBand/RoCE",
            Transport::Iwarp => "iWARP",
            Transport::Other => "other",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iwarp_needs_cm_and_has_no_write_with_imm() {
        assert_eq!(
            Transport::from_ibv(ffi::IBV_TRANSPORT_IB),
            Transport::InfiniBand
        );
        assert_eq!(
            Transport::from_ibv(ffi::IBV_TRANSPORT_IWARP),
            Transport::Iwarp
        );
        assert_eq!(Transport::from_ibv(-1), Transport::Other);
        let iwarp = Transport::Iwarp;
        assert!(iwarp.needs_cm() && !iwarp.has_write_with_imm());
        let ib = Transport::InfiniBand;
        assert!(!ib.needs_cm() && ib.has_write_with_imm());
        assert_eq!(iwarp.to_string(), "iWARP");
    }
}
