//! Write sessions kept between probes ([`rdma_proto::rounds`]): a path's next probe writes on
//! the queue pairs of its last one, when its server keeps the session long enough, instead of
//! a new TCP connection, handshake and two queue pairs. Pure bookkeeping over any session
//! type, so that its rules are tested without a device:
//! - a session is kept only where the server's keep-alive outlasts the path's next probe
//!   (`revisit`): one kept longer than it is used only holds a slot of its server's;
//! - it is used only until shortly before the server's keep-alive ends ([`usable_for`]), so a
//!   probe never races the server's close;
//! - one past that is dropped (its connection closed, its server's slot freed) whenever the
//!   cache is looked at.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// A path: the peer's name and this node's rail.
pub type Key = (String, usize);

/// The sessions kept, one per path at most.
#[derive(Debug)]
pub struct Kept<T> {
    enabled: bool,
    sessions: Mutex<HashMap<Key, (T, Instant)>>,
}

/// How long after a verdict a session its server keeps for `keep_alive` is still used: the
/// keep-alive less a margin (a quarter of it, at most a second) for the verdict's way here and
/// the next probe's way there.
#[must_use]
pub fn usable_for(keep_alive: Duration) -> Duration {
    keep_alive.saturating_sub((keep_alive / 4).min(Duration::from_secs(1)))
}

impl<T> Kept<T> {
    /// A cache that keeps sessions (`enabled`), or one that never does (`--no-reuse`).
    #[must_use]
    pub fn new(enabled: bool) -> Self {
        Kept {
            enabled,
            sessions: Mutex::new(HashMap::new()),
        }
    }

    /// Whether sessions are kept at all (whether a hello asks for rounds).
    #[must_use]
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// The session kept for `key`, taken out, if it is still usable at `now`. Every session
    /// past its time is dropped (outside the lock: closing one is a syscall or two).
    pub fn take(&self, key: &Key, now: Instant) -> Option<T> {
        let (found, expired) = {
            let mut map = self.sessions.lock().unwrap_or_else(PoisonError::into_inner);
            let found = map.remove(key).filter(|(_, until)| now < *until);
            let stale: Vec<Key> = map
                .iter()
                .filter(|(_, (_, until))| now >= *until)
                .map(|(k, _)| k.clone())
                .collect();
            let expired: Vec<(T, Instant)> = stale.iter().filter_map(|k| map.remove(k)).collect();
            (found, expired)
        };
        drop(expired);
        found.map(|(session, _)| session)
    }

    /// Keeps `session` for `key` after a verdict at `now`, its server keeping it for
    /// `keep_alive`, where the path's next probe comes within `revisit`; otherwise drops it
    /// (closing it ends the server's session at once). Returns whether it was kept.
    pub fn put(
        &self,
        key: Key,
        session: T,
        now: Instant,
        keep_alive: Duration,
        revisit: Duration,
    ) -> bool {
        let usable = usable_for(keep_alive);
        if !self.enabled || usable <= revisit {
            return false;
        }
        let old = self
            .sessions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key, (session, now + usable));
        drop(old);
        true
    }

    /// Whether no session is kept now.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many sessions are kept now.
    #[must_use]
    pub fn len(&self) -> usize {
        self.sessions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A session that counts its closes.
    struct Counted(Arc<AtomicUsize>);
    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::AcqRel);
        }
    }

    fn key(peer: &str) -> Key {
        (peer.to_owned(), 0)
    }

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn a_session_is_used_again_within_the_keep_alive_and_never_after() {
        let closed = Arc::new(AtomicUsize::new(0));
        let k = Kept::new(true);
        let t0 = Instant::now();
        assert!(k.put(key("b"), Counted(closed.clone()), t0, S(30), S(10)));
        assert_eq!(k.len(), 1);
        // Taken within its time: the same session, once.
        assert!(k.take(&key("b"), t0 + S(10)).is_some());
        assert!(k.take(&key("b"), t0 + S(10)).is_none());
        assert_eq!(
            closed.load(Ordering::Acquire),
            1,
            "the taken one was dropped here"
        );
        // Kept again, looked for past 29 s (30 s less the 1 s margin): closed, not used.
        assert!(k.put(key("b"), Counted(closed.clone()), t0, S(30), S(10)));
        assert!(k.take(&key("b"), t0 + S(29)).is_none());
        assert_eq!(closed.load(Ordering::Acquire), 2);
        assert!(k.is_empty());
    }

    #[test]
    fn a_session_whose_path_comes_back_after_the_keep_alive_is_not_kept() {
        let closed = Arc::new(AtomicUsize::new(0));
        let k = Kept::new(true);
        let t0 = Instant::now();
        // The next probe in 40 s, the server keeps it 30 s: closed at once.
        assert!(!k.put(key("b"), Counted(closed.clone()), t0, S(30), S(40)));
        assert_eq!(closed.load(Ordering::Acquire), 1);
        assert_eq!(k.len(), 0);
        // So with --no-reuse, whatever the keep-alive.
        let off = Kept::new(false);
        assert!(!off.enabled());
        assert!(!off.put(key("b"), Counted(closed.clone()), t0, S(3600), S(1)));
        assert_eq!(closed.load(Ordering::Acquire), 2);
    }

    #[test]
    fn expired_sessions_of_other_paths_are_closed_when_any_is_looked_for() {
        let closed = Arc::new(AtomicUsize::new(0));
        let k = Kept::new(true);
        let t0 = Instant::now();
        for (peer, keep) in [("b", 10), ("c", 20), ("d", 40)] {
            assert!(k.put(key(peer), Counted(closed.clone()), t0, S(keep), S(1)));
        }
        // At 19.5 s: b (usable 9 s) is gone, c (19 s) too, d (39 s) stays.
        assert!(
            k.take(&key("x"), t0 + Duration::from_millis(19_500))
                .is_none()
        );
        assert_eq!(closed.load(Ordering::Acquire), 2);
        assert_eq!(k.len(), 1);
        assert!(k.take(&key("d"), t0 + S(38)).is_some());
        // Rails are paths of their own.
        assert!(k.put(
            ("d".to_owned(), 1),
            Counted(closed.clone()),
            t0,
            S(40),
            S(1)
        ));
        assert!(k.take(&key("d"), t0).is_none());
        assert!(k.take(&("d".to_owned(), 1), t0).is_some());
    }

    #[test]
    fn the_margin_is_a_quarter_of_the_keep_alive_at_most_a_second() {
        assert_eq!(usable_for(S(30)), S(29));
        assert_eq!(
            usable_for(Duration::from_millis(400)),
            Duration::from_millis(300)
        );
        assert_eq!(usable_for(Duration::ZERO), Duration::ZERO);
    }
}
