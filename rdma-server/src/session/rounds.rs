//! Rounds of a write or bench session ([`rdma_proto::rounds`]): after a verdict, a session
//! whose accept granted them waits up to its keep-alive for the client's `next`, exposes a
//! fresh buffer on the same queue pair and answers with its `region`. Which sessions get rounds
//! at all is [`KeptSlots`](crate::kept::KeptSlots)' to say: at most so many at once, so kept
//! sessions never take every slot under `--max-clients`, and at most so many from one source
//! (a seam below the session, which its context holds). How long one is kept and
//! how often its rounds may begin is [`Kept`]'s: a lifetime from its accept, and its rounds
//! paced by the bytes each registers, zeroes and reads.

use rdma_proto::framing::{FrameError, LineConn};
use rdma_proto::{ErrorCode, ServerEvent, ServerHandshake};
use std::net::TcpStream;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::ctx::SessionCtx;
use super::steps::{feed, out_of_order, read_failed};
use crate::failure::Failure;
use crate::output::Event;
use crate::verbs::Region;

/// What one round costs beyond its buffer's bytes (a registration, a verdict), in bytes of
/// [`ROUND_RATE`](crate::kept::ROUND_RATE): about a millisecond, so even a session of tiny rounds has at most about a
/// thousand a second.
pub const ROUND_OVERHEAD: u64 = 64 << 10;

/// The least time between the starts of two rounds that each cost `cost` bytes, at `rate`
/// bytes a second ([`ROUND_OVERHEAD`] more for each).
pub(crate) fn gap(cost: u64, rate: u64) -> Duration {
    let bytes = cost.saturating_add(ROUND_OVERHEAD);
    let nanos = u128::from(bytes) * 1_000_000_000 / u128::from(rate.max(1));
    Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
}

/// One kept session's rounds: how many so far, when it must be over (its lifetime from its
/// accept), the last moment a round may begin (one round's own bound before that: a round
/// begun later would be cut off by the end, and its client see a failure where the session
/// should simply have ended at its last verdict) and when its next round may begin (each
/// costs `cost` bytes of the pace).
#[derive(Debug, Clone)]
pub(crate) struct Kept {
    round: u64,
    accepted: Instant,
    end: Instant,
    last_start: Instant,
    gap: Duration,
    next_at: Instant,
}

impl Kept {
    /// A session accepted at `accepted`, kept at most `lifetime`, whose rounds cost `cost`
    /// bytes each at `rate` bytes a second and may each take up to `round` (the session's
    /// `--timeout`); its first round began at the accept.
    pub(crate) fn new(
        accepted: Instant,
        lifetime: Duration,
        round: Duration,
        cost: u64,
        rate: u64,
    ) -> Self {
        let gap = gap(cost, rate);
        let end = accepted + lifetime;
        Kept {
            round: 1,
            accepted,
            end,
            last_start: end.checked_sub(round).unwrap_or(accepted).max(accepted),
            gap,
            next_at: accepted + gap,
        }
    }

    /// When the session must be over.
    #[cfg(test)]
    pub(crate) fn end(&self) -> Instant {
        self.end
    }

    /// The deadline of the wait for a `next` that begins at `now`, with keep-alive `keep`:
    /// `None` once no round can begin any more (the session ends at its verdict).
    pub(crate) fn idle_until(&self, now: Instant, keep: Duration) -> Option<Instant> {
        (now < self.last_start).then(|| (now + keep).min(self.last_start))
    }

    /// When the round asked for at `now` may begin: `None` when not in time to be over
    /// before the session's end.
    pub(crate) fn start_at(&self, now: Instant) -> Option<Instant> {
        let at = now.max(self.next_at);
        (at < self.last_start).then_some(at)
    }

    /// A round began at `at`.
    pub(crate) fn began(&mut self, at: Instant) {
        self.round += 1;
        self.next_at = at + self.gap;
    }

    /// The failure of a `next` that came too late for the session's lifetime.
    fn over(&self) -> Failure {
        Failure::new(
            ErrorCode::Timeout,
            format!(
                "this kept session reached the server's limit of {:?} from its accept (--keep-max-time, --bench-max-time for a bench session) before this round could begin; open a new session",
                self.end - self.accepted
            ),
        )
    }
}

/// Sleeps until `at`, in slices short enough to see the server stopping.
fn pause(s: &SessionCtx, at: Instant) -> Result<(), Failure> {
    loop {
        if s.stopping.load(Ordering::Acquire) {
            return Err(Failure::new(
                ErrorCode::ShuttingDown,
                "the server is shutting down",
            ));
        }
        let now = Instant::now();
        if now >= at {
            return Ok(());
        }
        std::thread::sleep((at - now).min(Duration::from_millis(50)));
    }
}

/// After a verdict: where the accept granted rounds, waits up to the keep-alive (never past
/// the session's lifetime) for the client's `next`, waits for the pace to allow the round, has
/// `rearm` register the round's buffer and sends its `region`; `kept` counts it. `Ok(false)`:
/// the session is over, as it ends normally (no rounds, the client closed the connection, the
/// keep-alive or the lifetime ran out, the server is stopping).
pub(super) fn next(
    s: &SessionCtx,
    conn: &mut LineConn<TcpStream>,
    hs: &mut ServerHandshake,
    id: u64,
    kept: &mut Kept,
    rearm: &mut dyn FnMut(&ServerHandshake) -> Result<Region, Failure>,
) -> Result<bool, Failure> {
    let Some(keep) = hs.keep_alive() else {
        return Ok(false);
    };
    if s.stopping.load(Ordering::Acquire) {
        return Ok(false);
    }
    let Some(until) = kept.idle_until(Instant::now(), keep) else {
        return Ok(false);
    };
    // A stop shuts the socket for reading: the wait ends as the client's close does.
    let line = match conn.read_line(until) {
        Ok(line) => line,
        Err(e) if e.peer_gone() || matches!(e, FrameError::Timeout { .. }) => return Ok(false),
        Err(e) => return Err(read_failed(conn, hs, e)),
    };
    match feed(conn, hs, &line)? {
        ServerEvent::Next(_) => {}
        other => return Err(out_of_order(&other)),
    }
    // No faster than the pace: a client asking again and again waits for its rounds.
    let at = kept.start_at(Instant::now()).ok_or_else(|| kept.over())?;
    pause(s, at)?;
    let r = rearm(hs)?;
    let region = hs.region(r.addr, r.rkey, r.len)?;
    kept.began(Instant::now());
    s.out.emit(&Event::Round {
        session: id,
        round: kept.round,
        length: hs.length(),
    });
    conn.send_line(&region.to_line(), Instant::now() + s.timeout)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kept::{DEFAULT_LIFETIME, ROUND_RATE};

    /// A session kept round after round, its client asking just inside the keep-alive each
    /// time, is not waited for past its lifetime from its accept.
    #[test]
    fn a_kept_session_is_never_waited_for_past_its_lifetime() {
        let t0 = Instant::now();
        let keep = Duration::from_secs(30);
        let kept = Kept::new(t0, DEFAULT_LIFETIME, Duration::ZERO, 64, ROUND_RATE);
        let mut now = t0;
        let mut rounds = 0;
        while let Some(until) = kept.idle_until(now, keep) {
            assert!(until <= t0 + DEFAULT_LIFETIME);
            now += keep - Duration::from_millis(1);
            rounds += 1;
        }
        assert_eq!(
            rounds, 21,
            "asked every 29.999 s: 21 waits fit in 10 minutes"
        );
        assert!(kept.start_at(t0 + DEFAULT_LIFETIME).is_none());
        let msg = kept.over().message().to_owned();
        assert!(
            msg.contains("600s") && msg.contains("open a new session"),
            "{msg}"
        );
    }

    /// Rounds of 8 MiB begin at most every 8 MiB of the pace (an eighth of a second at
    /// 64 MiB/s), however fast their `next`s come.
    #[test]
    fn rounds_begin_no_faster_than_the_pace() {
        let t0 = Instant::now();
        let cost = 8 << 20;
        let mut kept = Kept::new(t0, DEFAULT_LIFETIME, Duration::ZERO, cost, ROUND_RATE);
        let mut now = t0;
        for _ in 0..100 {
            let at = kept.start_at(now).expect("within the lifetime");
            assert!(at >= now);
            kept.began(at);
            now = at; // the client asks again at once
        }
        let took = now - t0;
        // Each round's bytes at 64 MiB/s (to the nanosecond).
        let bytes = 100 * (cost + ROUND_OVERHEAD);
        assert!(
            took + Duration::from_nanos(100)
                >= Duration::from_secs_f64(bytes as f64 / ROUND_RATE as f64),
            "100 rounds of 8 MiB in {took:?}"
        );
        assert_eq!(gap(0, ROUND_RATE), Duration::from_nanos(976_562));
    }
}
