//! Rounds of a write or bench session ([`rdma_proto::rounds`]): after a verdict, a session
//! whose accept granted them waits up to its keep-alive for the client's `next`, exposes a
//! fresh buffer on the same queue pair and answers with its `region`. Which sessions get rounds at all is
//! [`KeptSlots`]' to say: at most so many at once, so kept sessions never take every slot
//! under `--max-clients`.

use rdma_proto::framing::{FrameError, LineConn};
use rdma_proto::{ServerEvent, ServerHandshake};
use std::net::TcpStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use super::ctx::{Failure, SessionCtx};
use super::steps::{feed, out_of_order, read_failed};
use crate::output::Event;
use crate::verbs::Region;

/// How many sessions may have rounds at once (each holds its slot under `--max-clients`, idle
/// between rounds): a session whose hello asks for rounds gets them only while one of these
/// is free, and holds it to its end.
#[derive(Debug)]
pub(crate) struct KeptSlots {
    cap: usize,
    held: AtomicUsize,
}

/// One of [`KeptSlots`], given back when dropped.
#[derive(Debug)]
#[must_use]
pub(crate) struct KeptSlot<'a>(&'a KeptSlots);

impl KeptSlots {
    /// `cap` sessions with rounds at once (0: none).
    pub(crate) fn new(cap: usize) -> Self {
        KeptSlots {
            cap,
            held: AtomicUsize::new(0),
        }
    }

    /// For a server with `max_clients` slots: half of them.
    pub(crate) fn half_of(max_clients: u32) -> Self {
        Self::new(usize::try_from(max_clients / 2).unwrap_or(usize::MAX))
    }

    /// A slot, if one is free.
    pub(crate) fn take(&self) -> Option<KeptSlot<'_>> {
        self.held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.cap).then_some(n + 1)
            })
            .ok()
            .map(|_| KeptSlot(self))
    }

    /// How many are held now.
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.held.load(Ordering::Acquire)
    }
}

impl Drop for KeptSlot<'_> {
    fn drop(&mut self) {
        self.0.held.fetch_sub(1, Ordering::AcqRel);
    }
}

/// After a verdict: where the accept granted rounds, waits up to the keep-alive for the
/// client's `next`, has `rearm` register the round's buffer and sends its `region`; `round`
/// counts it. `Ok(false)`: the session is over, as it ends normally (no rounds, the client
/// closed the connection, the keep-alive ran out, the server is stopping).
pub(super) fn next(
    s: &SessionCtx,
    conn: &mut LineConn<TcpStream>,
    hs: &mut ServerHandshake,
    id: u64,
    round: &mut u64,
    rearm: &mut dyn FnMut(&ServerHandshake) -> Result<Region, Failure>,
) -> Result<bool, Failure> {
    let Some(keep) = hs.keep_alive() else {
        return Ok(false);
    };
    if s.stopping.load(Ordering::Acquire) {
        return Ok(false);
    }
    // A stop shuts the socket for reading: the wait ends as the client's close does.
    let line = match conn.read_line(Instant::now() + keep) {
        Ok(line) => line,
        Err(e) if e.peer_gone() || matches!(e, FrameError::Timeout { .. }) => return Ok(false),
        Err(e) => return Err(read_failed(conn, hs, e)),
    };
    match feed(conn, hs, &line)? {
        ServerEvent::Next(_) => {}
        other => return Err(out_of_order(&other)),
    }
    let r = rearm(hs)?;
    let region = hs.region(r.addr, r.rkey, r.len)?;
    *round += 1;
    s.out.emit(&Event::Round {
        session: id,
        round: *round,
        length: hs.length(),
    });
    conn.send_line(&region.to_line(), Instant::now() + s.timeout)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_slots_are_capped_and_given_back() {
        let k = KeptSlots::half_of(5);
        let a = k.take();
        let b = k.take();
        assert!(a.is_some() && b.is_some());
        assert!(k.take().is_none(), "a third of 2");
        assert_eq!(k.held(), 2);
        drop(a);
        assert_eq!(k.held(), 1);
        assert!(k.take().is_some());
        assert!(
            KeptSlots::half_of(1).take().is_none(),
            "one slot keeps nothing"
        );
    }
}
