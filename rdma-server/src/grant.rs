//! What a write session grants its client ([`Grant`]).

use rdma_core_rs::Access;

/// The access a write session's buffer and queue pair grant the client. The server grants
/// remote write ([`Grant::remote_write`]), as the protocol promises; a program built on this
/// library may grant less, for example to show how a client fails against a buffer registered
/// without remote write (the classic demo's bug): the test peer does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    /// The buffer's memory region.
    pub region: Access,
    /// The session's queue pair.
    pub qp: Access,
}

impl Grant {
    /// Remote write into the buffer: what `rdma-server` grants.
    #[must_use]
    pub fn remote_write() -> Grant {
        Grant {
            region: Access::LOCAL_WRITE | Access::REMOTE_WRITE,
            qp: Access::REMOTE_WRITE,
        }
    }

    /// No remote access at all: every write of the client fails with a remote access error.
    #[must_use]
    pub fn local_only() -> Grant {
        Grant {
            region: Access::LOCAL_WRITE,
            qp: Access::NONE,
        }
    }
}
