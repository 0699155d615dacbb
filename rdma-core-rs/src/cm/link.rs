//! [`Link`], the CM connection a connected queue pair owns: a leaf of `cm`, so the queue pair
//! holds it without depending on the connection code that makes it.

use super::raw::{Channel, Id};
use super::sys as cm;

/// The CM connection of a connected queue pair: its id and the channel it reports on (and, on
/// the passive side, the listener it came from). Owned by the queue pair; dropped before the
/// queue pair is destroyed, it disconnects.
pub(crate) struct Link {
    // Field order is drop order: the connection's id, then its channel.
    pub(super) id: Id,
    pub(super) _ch: Channel,
}

impl Drop for Link {
    fn drop(&mut self) {
        // SAFETY: valid, connected id. A failure (the peer went first) changes nothing here.
        unsafe { cm::rdma_disconnect(self.id.raw()) };
    }
}
