//! Which sessions are kept for rounds ([`KeptSlots`]): at most so many at once, so kept
//! sessions never take every slot under `--max-clients`, and at most so many from one source;
//! and how long each may be kept and how fast its rounds may go. The server holds one for all its
//! sessions (in their context); each session's rounds (`session::rounds`) take a slot from it.

use crate::admission::PerSource;
use std::net::IpAddr;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

/// How long a kept session may last from its accept (`--keep-max-time`'s default): after it
/// the session ends at its verdict, as one whose keep-alive ran out.
pub const DEFAULT_LIFETIME: Duration = Duration::from_secs(600);

/// Bytes a second of round buffers one kept session may have registered, zeroed and read
/// (its rounds begin no more often than that allows).
pub const ROUND_RATE: u64 = 64 << 20;

/// How many sessions may have rounds at once (each holds its slot under `--max-clients`, idle
/// between rounds), and from one source (an IPv4 address, an IPv6 /64, as `--max-per-ip`
/// counts them): a session whose hello asks for rounds gets them only while one of these is
/// free for it, and holds it to its end. Also how long each is kept and how its rounds are
/// paced (`session::rounds::Kept` keeps to both).
#[derive(Debug)]
pub(crate) struct KeptSlots {
    cap: usize,
    per_source: u32,
    /// How many are held, and by which sources.
    held: Mutex<(usize, PerSource)>,
    /// How long a kept session may last from its accept.
    pub lifetime: Duration,
    /// [`ROUND_RATE`].
    pub rate: u64,
}

/// One of [`KeptSlots`], given back when dropped.
#[derive(Debug)]
#[must_use]
pub(crate) struct KeptSlot<'a> {
    slots: &'a KeptSlots,
    source: IpAddr,
}

impl KeptSlots {
    /// `cap` sessions with rounds at once (0: none), any number of them from one source, kept
    /// [`DEFAULT_LIFETIME`] at most, paced at [`ROUND_RATE`].
    pub(crate) fn new(cap: usize) -> Self {
        KeptSlots {
            cap,
            per_source: u32::MAX,
            held: Mutex::new((0, PerSource::default())),
            lifetime: DEFAULT_LIFETIME,
            rate: ROUND_RATE,
        }
    }

    /// For a server with `max_clients` slots, `max_per_ip` from one source: half of each (at
    /// least one from a source, where any are kept at all).
    pub(crate) fn for_server(max_clients: u32, max_per_ip: u32) -> Self {
        Self::new(usize::try_from(max_clients / 2).unwrap_or(usize::MAX))
            .per_source((max_per_ip / 2).max(1))
    }

    /// At most `n` from one source.
    pub(crate) fn per_source(mut self, n: u32) -> Self {
        self.per_source = n;
        self
    }

    /// Each kept at most `d` from its accept.
    pub(crate) fn lifetime(mut self, d: Duration) -> Self {
        self.lifetime = d;
        self
    }

    /// Rounds paced at `bytes_per_sec` of round buffers.
    #[cfg(test)]
    pub(crate) fn paced(mut self, bytes_per_sec: u64) -> Self {
        self.rate = bytes_per_sec;
        self
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (usize, PerSource)> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A slot for a session from `peer`, if one is free, and its source holds fewer than its
    /// share.
    pub(crate) fn take(&self, peer: IpAddr) -> Option<KeptSlot<'_>> {
        let mut held = self.lock();
        if held.0 >= self.cap || !held.1.take(peer, self.per_source) {
            return None;
        }
        held.0 += 1;
        Some(KeptSlot {
            slots: self,
            source: peer,
        })
    }

    /// How many are held now.
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.lock().0
    }
}

impl Drop for KeptSlot<'_> {
    fn drop(&mut self) {
        let mut held = self.slots.lock();
        held.0 = held.0.saturating_sub(1);
        held.1.give_back(self.source);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_slots_are_capped_and_given_back() {
        let k = KeptSlots::for_server(5, 8);
        let ip = |i: u8| IpAddr::from([10, 0, 0, i]);
        let a = k.take(ip(1));
        let b = k.take(ip(2));
        assert!(a.is_some() && b.is_some());
        assert!(k.take(ip(3)).is_none(), "a third of 2");
        assert_eq!(k.held(), 2);
        drop(a);
        assert_eq!(k.held(), 1);
        assert!(k.take(ip(3)).is_some());
        assert!(
            KeptSlots::for_server(1, 8).take(ip(1)).is_none(),
            "one slot keeps nothing"
        );
    }

    /// One address cannot keep every kept slot: at most half its --max-per-ip (an IPv6 /64 as
    /// one source, a mapped IPv4 as its IPv4), given back when its sessions end; another
    /// source still gets the rest.
    #[test]
    fn one_source_keeps_at_most_its_share() {
        let k = KeptSlots::for_server(16, 4);
        let a: IpAddr = "10.0.0.2".parse().unwrap();
        let first = [k.take(a), k.take(a)];
        assert!(first.iter().all(Option::is_some));
        assert!(k.take(a).is_none(), "a third kept from one address");
        assert!(
            k.take("::ffff:10.0.0.2".parse().unwrap()).is_none(),
            "mapped"
        );
        let v6 = k.take("fd00::1".parse().unwrap());
        let v6b = k.take("fd00::2:1".parse().unwrap());
        assert!(v6.is_some() && v6b.is_some());
        assert!(
            k.take("fd00::ffff:3".parse().unwrap()).is_none(),
            "same /64"
        );
        assert!(
            k.take("10.0.0.3".parse().unwrap()).is_some(),
            "another source"
        );
        drop(first);
        assert!(k.take(a).is_some(), "given back");
        assert!(
            KeptSlots::for_server(16, 1).take(a).is_some(),
            "--max-per-ip 1 still keeps one"
        );
    }
}
