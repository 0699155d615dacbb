//! The server's half of a `lat` bench session's ping-pong ([`Pong`]), and how its waits are
//! bounded ([`SessionClock`]) and paced ([`Pace`], [`nap`]).

use std::net::TcpStream;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use std::cell::Cell;

use rdma_core_rs::{
    Completion, CompletionQueue, ExposedRegion, MemoryRegion, QueuePair, RemoteBuffer, Rts,
    WcOpcode, WriteFlags,
};
use rdma_proto::bench::{self, BenchParams, SIGNAL_EVERY};
use rdma_proto::framing::LineConn;
use rdma_proto::{ErrorCode, ServerHandshake};

use super::SQ_DEPTH;
use crate::failure::Failure;
use crate::session::ctx::SessionCtx;
use crate::session::steps::{next_event, out_of_order};

/// How long the lat loop spins flat out for a ping before it starts to sleep between looks,
/// until the session has measured its own round trip, and at least while its pings come fast
/// ([`Pace`]).
const SPIN_FOR: Duration = Duration::from_millis(1);
/// The longest spin of a slow pinger's wait, however slow: past it a client is stalled.
const MAX_SPIN: Duration = Duration::from_millis(50);
/// The longest sleep between two looks for a ping once the spin is over.
const MAX_NAP: Duration = Duration::from_millis(1);

/// The deadlines of one bench session: `--bench-max-time` bounds the whole session from its
/// accept (every ping, pong and the final `written`), `--timeout` each wait for a ping within
/// it. A client pinging just under `--timeout` apart is cut off at the session's end.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SessionClock {
    /// When the session must be over.
    pub end: Instant,
    /// `--timeout`: the longest wait for one ping.
    pub per_wait: Duration,
    /// `--bench-max-time`, for messages.
    pub max_time: Duration,
}

/// Which deadline a wait runs into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Limit {
    /// `--timeout` for this wait.
    Wait,
    /// `--bench-max-time` for the whole session.
    Session,
}

impl SessionClock {
    pub fn new(start: Instant, per_wait: Duration, max_time: Duration) -> Self {
        SessionClock {
            end: start + max_time,
            per_wait,
            max_time,
        }
    }

    /// The deadline of a wait that starts at `start`, and which limit it is.
    pub fn wait_deadline(&self, start: Instant) -> (Instant, Limit) {
        let wait = start + self.per_wait;
        if wait < self.end {
            (wait, Limit::Wait)
        } else {
            (self.end, Limit::Session)
        }
    }

    /// The failure of a wait that ran into `limit`.
    pub fn expired(&self, limit: Limit) -> Failure {
        let message = match limit {
            Limit::Wait => format!(
                "bench lat: no ping arrived within {:?}; the client stopped",
                self.per_wait
            ),
            Limit::Session => format!(
                "bench: the session reached the server's --bench-max-time of {:?}; ask for fewer iterations or sizes",
                self.max_time
            ),
        };
        Failure::new(ErrorCode::Timeout, message)
    }
}

/// How long the lat loop spins for a ping: relative to the session's own round trip (issue
/// 23, item 12), and never most of a slow pinger's time. A fixed spin shorter than the round
/// trip (a slow or congested link, every run under emulation) made the loop nap through live
/// exchanges, each ping found only at the next look; a spin of twice the wait from its start
/// kept a core busy for the whole session of a client pinging every 45 ms. Now a session whose
/// pings come within [`FAST`] spins from the start of each wait (at most twice the longest
/// recent wait, at least [`SPIN_FOR`]): a live exchange is always met spinning. A slower one
/// spins only in a window around where its ping is due (from 7/8 to 9/8 of the longest recent
/// wait, at most [`MAX_SPIN`]) and naps before and after it: its waits spin at most an eighth
/// of their time when the pings come steadily, a quarter when they stall.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Pace {
    /// The longest recent wait for a ping (decaying by 1/8 a ping); `None` before the first.
    recent: Option<Duration>,
}

/// Pings that come within this of the wait's start are a live exchange: the wait spins from
/// its start.
const FAST: Duration = Duration::from_millis(2);

impl Pace {
    /// A ping came `waited` after the wait for it began.
    pub(crate) fn saw(&mut self, waited: Duration) {
        let decayed = self.recent.map_or(Duration::ZERO, |r| r - r / 8);
        self.recent = Some(decayed.max(waited));
    }

    /// When the next wait for a ping spins.
    pub(crate) fn plan(&self) -> Plan {
        match self.recent {
            Some(r) if r > FAST => {
                let spin_from = r - r / 8;
                Plan {
                    spin_from,
                    spin_until: spin_from + (r / 4).min(MAX_SPIN),
                }
            }
            recent => Plan {
                spin_from: Duration::ZERO,
                spin_until: recent
                    .map_or(SPIN_FOR, |r| r.saturating_mul(2))
                    .clamp(SPIN_FOR, FAST * 2),
            },
        }
    }
}

/// How one wait for a ping looks: flat out between `spin_from` and `spin_until` into the
/// wait, napping between looks before and after ([`Pace::plan`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Plan {
    pub spin_from: Duration,
    pub spin_until: Duration,
}

impl Plan {
    /// How long to sleep before the next look, `waited` into the wait (`None`: spin). Before
    /// the spin the naps grow as after it ([`nap`]), never past the spin's start.
    pub(crate) fn nap(&self, waited: Duration) -> Option<Duration> {
        if waited < self.spin_from {
            let d = nap(waited, Duration::ZERO).unwrap_or(MAX_NAP);
            return Some(d.min(self.spin_from - waited));
        }
        nap(waited, self.spin_until)
    }

    /// How long the wait spins when its ping comes `after` it began.
    #[cfg(test)]
    fn spun(&self, after: Duration) -> Duration {
        after.min(self.spin_until).saturating_sub(self.spin_from)
    }
}

/// How long to sleep before the next look for a ping, `waited` into the wait: nothing while
/// the spin lasts (`spin_for`, from [`Plan`]: a ping-pong in progress answers within its round
/// trip), then naps that double up to [`MAX_NAP`], so a client that pings rarely costs a core
/// nothing.
pub(crate) fn nap(waited: Duration, spin_for: Duration) -> Option<Duration> {
    let over = waited.checked_sub(spin_for)?;
    let micros = 10u64.saturating_mul(1 << (over.as_micros() / 100).min(10));
    Some(Duration::from_micros(micros).min(MAX_NAP))
}

/// Bytes of a ping's extent that the server clears after each ping it answers: the next ping
/// must write them again. A pong is as long as the sweep's current size, which the client
/// says; a client that wrote only the last byte of an 8 MiB ping would get 8 MiB back for it.
const CANARIES: usize = 8;

/// Bytes at random places in the extent of the next ping but its last byte, cleared after a
/// ping is answered (in a freshly zeroed buffer they are zero already): a ping whose last byte
/// landed but which left one of them at 0 did not write its whole size ([`ping`]). The places
/// come from a generator seeded from the OS per round, so a client cannot know which bytes to
/// write short of the whole extent.
#[derive(Debug)]
pub(crate) struct Canaries {
    at: [usize; CANARIES],
    /// How many of `at` are live (none for a one-byte ping, which is its last byte).
    live: usize,
    rng: u64,
}

impl Canaries {
    pub(crate) fn new(seed: u64) -> Self {
        Canaries {
            at: [0; CANARIES],
            live: 0,
            rng: seed,
        }
    }

    /// New places inside the first `size - 1` bytes (a ping of `size` bytes writes them with
    /// the pattern): returned for the caller to clear, where they are not zero already.
    pub(crate) fn pick(&mut self, size: usize) -> &[usize] {
        self.live = 0;
        if size < 2 {
            return &[];
        }
        for at in &mut self.at {
            // SplitMix64.
            self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.rng;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^= z >> 31;
            *at = usize::try_from(z % (size as u64 - 1)).unwrap_or(0);
        }
        self.live = CANARIES;
        &self.at
    }

    /// The first place a ping left at 0, read through `read`.
    fn missed(&self, read: &impl Fn(usize) -> Option<u8>) -> Option<usize> {
        self.at[..self.live]
            .iter()
            .copied()
            .find(|&i| read(i).is_none_or(|b| b == 0))
    }
}

/// What the ping buffer says of the ping the loop waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ping {
    /// Its last byte is not there yet.
    NotYet,
    /// It landed, all of it that the canaries look at.
    Landed,
    /// Its last byte landed, but byte `at` of its extent was not written.
    Short { at: usize },
}

/// Whether the ping whose last byte is `last` and whose counter is `want` landed, read through
/// `read` (the buffer's bytes as they are now).
pub(crate) fn ping(
    read: &impl Fn(usize) -> Option<u8>,
    last: usize,
    want: u8,
    canaries: &Canaries,
) -> Ping {
    if read(last) != Some(want) {
        return Ping::NotYet;
    }
    match canaries.missed(read) {
        Some(at) => Ping::Short { at },
        None => Ping::Landed,
    }
}

/// How long a ping may show its last byte without the rest of its extent before the session
/// ends: a ping's bytes land in order, so an honest one shows them at once.
const SHORT_GRACE: Duration = Duration::from_millis(10);

/// The server's half of the ping-pong.
pub(super) struct Pong<'a> {
    pub qp: &'a QueuePair<Rts>,
    pub cq: &'a CompletionQueue,
    /// Where the client's pings land.
    pub mr: &'a ExposedRegion,
    /// The client's buffer, where pongs go.
    pub remote: RemoteBuffer,
    pub inline: u32,
    /// The receive completion of the stamped exchange's ping (`stamp`), should the loop reap
    /// it before the exchange begins.
    pub early: Cell<Option<Completion>>,
}

impl Pong<'_> {
    pub(super) fn run(
        &self,
        s: &SessionCtx,
        conn: &mut LineConn<TcpStream>,
        hs: &mut ServerHandshake,
        b: &BenchParams,
        src: &mut MemoryRegion,
        clock: &SessionClock,
    ) -> Result<(), Failure> {
        let failed = pong_failed;
        let mut posted: u64 = 0;
        let mut completed: u64 = 0;
        let mut restore: Option<usize> = None;
        let mut pace = Pace::default();
        let seed = getrandom::u64().map_err(|e| {
            Failure::new(
                ErrorCode::Internal,
                format!("bench lat: the OS random source failed: {e}"),
            )
        })?;
        // The round's ping buffer is freshly zeroed: the first ping's canaries are 0 already.
        let mut canaries = Canaries::new(seed);
        if let Some(&first) = b.sizes.first() {
            canaries.pick(usize::try_from(first).unwrap_or(usize::MAX).min(src.len()));
        }
        let sizes = b.sizes.len();
        for (k, &size) in b.sizes.iter().enumerate() {
            let size = usize::try_from(size).unwrap_or(usize::MAX).min(src.len());
            let last = size - 1;
            let flags = |n: u64| WriteFlags {
                imm: None,
                signaled: n % SIGNAL_EVERY == 0 || n == b.iters,
                inline: size <= self.inline as usize,
            };
            for n in 1..=b.iters {
                let want = bench::counter(n);
                let wait = Wait {
                    last,
                    want,
                    size,
                    n,
                };
                self.wait_ping(
                    s,
                    conn,
                    hs,
                    wait,
                    &canaries,
                    &mut completed,
                    clock,
                    &mut pace,
                )?;
                // The next ping (of this size or a larger one) must write these again; after
                // the sweep's last none is cleared, so the final bytes are all the client's.
                if k + 1 < sizes || n < b.iters {
                    for &i in canaries.pick(size) {
                        let _ = self.mr.set_volatile_byte(i, 0);
                    }
                }
                // A ping of the next size means the client read our last pong of the previous
                // one: the byte that carried its counter goes back to the pattern.
                if let Some(i) = restore.take() {
                    src.as_mut_slice()[i] = bench::pattern_byte(i);
                }
                src.as_mut_slice()[last] = want;
                if n == b.iters {
                    // Once this pong is read the next size's pongs carry the pattern here.
                    restore = Some(last);
                }
                // Keep the send queue from filling: reap until a slot is free.
                while posted.saturating_sub(completed) >= u64::from(SQ_DEPTH) - 1 {
                    let (deadline, _) = clock.wait_deadline(Instant::now());
                    let c = self.cq.poll(deadline).map_err(failed)?;
                    self.reaped(c, &mut completed);
                }
                self.qp
                    .post_write_with(src, 0..size, self.remote, flags(n), posted)
                    .map_err(failed)?;
                posted += 1;
            }
        }
        // Reap up to the last pong (signalled), so that no completion of this round is left
        // in the queue for the next one's counting (rounds) to take for its own.
        while completed < posted {
            let (deadline, _) = clock.wait_deadline(Instant::now());
            let c = self.cq.poll(deadline).map_err(failed)?;
            self.reaped(c, &mut completed);
        }
        Ok(())
    }

    /// A completion the loop reaped: a pong's frees the send queue up to it (`completed`); the
    /// receive of a stamped ping is kept for the exchange (a client may send it as soon as it
    /// read the last pong, before that pong's own completion is reaped).
    fn reaped(&self, c: Completion, completed: &mut u64) {
        if c.opcode == WcOpcode::RecvRdmaWithImm {
            self.early.set(Some(c));
        } else {
            *completed = c.wr_id.saturating_add(1);
        }
    }

    /// Spins on the last byte of the ping until it is `want` (and the canaries say the rest
    /// landed too, [`ping`]), reaping completions meanwhile;
    /// a client that stops answering, the session's end, or a server stopping, ends the wait.
    /// After a spin as long as `pace` says the loop naps between looks (see [`nap`]).
    #[allow(clippy::too_many_arguments)]
    fn wait_ping(
        &self,
        s: &SessionCtx,
        conn: &mut LineConn<TcpStream>,
        hs: &mut ServerHandshake,
        wait: Wait,
        canaries: &Canaries,
        completed: &mut u64,
        clock: &SessionClock,
        pace: &mut Pace,
    ) -> Result<(), Failure> {
        let Wait {
            last,
            want,
            size,
            n,
        } = wait;
        let read = |i: usize| self.mr.volatile_byte(i);
        // When the ping's last byte was first seen without the rest of it.
        let mut short_since: Option<Instant> = None;
        // Two clock reads a ping (here and when it lands); in between the clock is read only
        // every 1,024 looks (a read is costly under emulation).
        let begun = Instant::now();
        let (deadline, limit) = clock.wait_deadline(begun);
        let plan = pace.plan();
        let mut spins: u32 = 0;
        let mut napping = false;
        loop {
            match ping(&read, last, want, canaries) {
                Ping::NotYet => {}
                Ping::Landed => {
                    pace.saw(begun.elapsed());
                    return Ok(());
                }
                Ping::Short { at } => {
                    let since = *short_since.get_or_insert_with(Instant::now);
                    if since.elapsed() > SHORT_GRACE {
                        return Err(Failure::new(
                            ErrorCode::VerifyFailed,
                            format!(
                                "bench lat: ping {n} of {size} bytes wrote its last byte but not byte {at}: each ping writes its whole size (the server answers it with as many bytes), so the server answers none that did not"
                            ),
                        ));
                    }
                }
            }
            spins = spins.wrapping_add(1);
            if napping || spins % 1024 == 0 {
                if let Some(c) = self.cq.try_poll().map_err(pong_failed)? {
                    self.reaped(c, completed);
                }
                let now = Instant::now();
                if now >= deadline {
                    return Err(clock.expired(limit));
                }
                // A client that closed or spoke mid-exchange ends the session now, not at the
                // deadline (a syscall every ~64 Ki spins, or every nap).
                if (napping || spins % (64 * 1024) == 0) && conn.peer_spoke() {
                    let event = next_event(conn, hs, clock.wait_deadline(now).0)?;
                    return Err(out_of_order(&event));
                }
                if s.stopping.load(Ordering::Acquire) {
                    return Err(Failure::new(
                        ErrorCode::ShuttingDown,
                        "the server is shutting down",
                    ));
                }
                // Napping, every look checks; spinning, every 1,024th.
                napping = match plan.nap(now - begun) {
                    Some(d) => {
                        std::thread::sleep(d.min(deadline - now));
                        true
                    }
                    None => false,
                };
            }
        }
    }
}

/// The ping a wait is for: its last byte and counter, its size and number (for messages).
#[derive(Debug, Clone, Copy)]
struct Wait {
    last: usize,
    want: u8,
    size: usize,
    n: u64,
}

/// A pong that could not be posted, or whose completion failed.
fn pong_failed(e: rdma_core_rs::Error) -> Failure {
    Failure::new(
        ErrorCode::WriteFailed,
        format!("bench lat: a pong failed: {e}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 16, item 2: a ping just under `--timeout` apart no longer holds the session
    /// forever: every wait ends at the session's end at the latest.
    #[test]
    fn the_session_end_bounds_every_wait() {
        let t0 = Instant::now();
        let timeout = Duration::from_secs(10);
        let max = Duration::from_secs(120);
        let clock = SessionClock::new(t0, timeout, max);
        let mut now = t0;
        let mut pings = 0;
        loop {
            let (deadline, limit) = clock.wait_deadline(now);
            assert!(deadline <= t0 + max);
            if limit == Limit::Session {
                break;
            }
            assert_eq!(deadline, now + timeout);
            now += Duration::from_millis(9_900); // the ping lands just in time
            pings += 1;
        }
        assert_eq!(
            pings, 12,
            "12 slow pings fit in 2 minutes, the 13th wait ends with it"
        );
        assert_eq!(
            clock.wait_deadline(t0 + max * 2),
            (t0 + max, Limit::Session)
        );
        let msg = clock.expired(Limit::Session).message().to_owned();
        assert!(msg.contains("--bench-max-time of 120s"), "{msg}");
        assert!(
            clock
                .expired(Limit::Wait)
                .message()
                .contains("no ping arrived within 10s")
        );
    }

    /// The wait spins for as long as the pace says, then sleeps between looks, never longer
    /// than MAX_NAP.
    #[test]
    fn the_spin_turns_into_naps() {
        assert_eq!(nap(Duration::ZERO, SPIN_FOR), None);
        assert_eq!(nap(SPIN_FOR - Duration::from_micros(1), SPIN_FOR), None);
        let first = nap(SPIN_FOR, SPIN_FOR).unwrap();
        assert!(first > Duration::ZERO && first <= MAX_NAP);
        let later = nap(SPIN_FOR + Duration::from_secs(5), SPIN_FOR).unwrap();
        assert_eq!(later, MAX_NAP);
        let mut last = Duration::ZERO;
        for ms in 1..50 {
            let d = nap(Duration::from_millis(ms) + SPIN_FOR, SPIN_FOR).unwrap();
            assert!(d >= last && d <= MAX_NAP);
            last = d;
        }
    }

    /// What an honest client's ping of `size` bytes with counter `n` writes.
    fn honest(buf: &mut [u8], size: usize, n: u64) {
        bench::fill_pattern(&mut buf[..size]);
        buf[size - 1] = bench::counter(n);
    }

    /// A 1-byte write to the last byte of an 8 MiB ping (a client that wants 8 MiB pongs for
    /// one byte each) is not taken for the ping: the server answers no ping it cannot see was
    /// written whole.
    #[test]
    fn a_ping_that_writes_only_its_last_byte_gets_no_pong() {
        let size = 8 << 20;
        let mut buf = vec![0u8; size];
        let mut canaries = Canaries::new(0x1234_5678);
        assert_eq!(canaries.pick(size).len(), CANARIES);
        // The first ping into the fresh (zeroed) buffer: its last byte alone is not a ping.
        buf[size - 1] = bench::counter(1);
        let read = |b: &Vec<u8>| {
            let b = b.clone();
            move |i: usize| b.get(i).copied()
        };
        assert!(
            matches!(
                ping(&read(&buf), size - 1, bench::counter(1), &canaries),
                Ping::Short { .. }
            ),
            "a one-byte first ping"
        );
        honest(&mut buf, size, 1);
        assert_eq!(
            ping(&read(&buf), size - 1, bench::counter(1), &canaries),
            Ping::Landed
        );
        // Answered: the canaries are cleared; the next ping writes only its last byte.
        for &i in canaries.pick(size) {
            buf[i] = 0;
        }
        buf[size - 1] = bench::counter(2);
        assert!(matches!(
            ping(&read(&buf), size - 1, bench::counter(2), &canaries),
            Ping::Short { .. }
        ));
        assert_eq!(
            ping(&read(&buf), size - 1, bench::counter(3), &canaries),
            Ping::NotYet
        );
    }

    /// An honest sweep (ascending sizes, each ping the pattern and its counter) is never taken
    /// for a short one, and the canaries leave nothing of theirs in the final bytes.
    #[test]
    fn an_honest_sweep_is_never_short() {
        let sizes = [1usize, 2, 3, 64, 4096, 65_536];
        let iters = 40;
        let mut buf = vec![0u8; 65_536];
        let mut canaries = Canaries::new(7);
        canaries.pick(sizes[0]);
        for (k, &size) in sizes.iter().enumerate() {
            for n in 1..=iters {
                honest(&mut buf, size, n);
                let read = |i: usize| buf.get(i).copied();
                assert_eq!(
                    ping(&read, size - 1, bench::counter(n), &canaries),
                    Ping::Landed,
                    "size {size}, ping {n}"
                );
                if k + 1 < sizes.len() || n < iters {
                    for &i in canaries.pick(size) {
                        buf[i] = 0;
                    }
                }
            }
        }
        assert!(
            buf.iter().all(|&b| b != 0),
            "a canary left in the final bytes"
        );
    }

    /// Pings every 45 ms, for a whole session: the wait for each may spin for at most a
    /// quarter of it (the old policy spun through every wait: a core busy for the whole
    /// session); pings that come fast are still met spinning, every one.
    #[test]
    fn a_slow_pinger_keeps_no_core_spinning() {
        for period_ms in [3, 5, 10, 20, 45, 49, 60, 200, 5_000] {
            let period = Duration::from_millis(period_ms);
            let mut pace = Pace::default();
            let (mut spun, mut waited) = (Duration::ZERO, Duration::ZERO);
            for _ in 0..200 {
                spun += pace.plan().spun(period);
                waited += period;
                pace.saw(period);
            }
            assert!(
                spun * 4 <= waited,
                "pings every {period:?}: spun {spun:?} of {waited:?}"
            );
        }
        // Fast pings (a live exchange): every wait spins until its ping lands.
        for rtt_us in [5, 50, 500, 2_000] {
            let rtt = Duration::from_micros(rtt_us);
            let mut pace = Pace::default();
            for _ in 0..50 {
                pace.saw(rtt);
            }
            let plan = pace.plan();
            assert_eq!(plan.nap(Duration::ZERO), None, "{rtt:?}");
            assert_eq!(plan.nap(rtt), None, "napped through a ping at {rtt:?}");
            assert_eq!(plan.spun(rtt), rtt);
        }
    }

    /// A slow pinger's ping is met spinning where it is due (its recent wait), and an early one
    /// within a nap; a stall after it costs a bounded spin, then naps.
    #[test]
    fn a_slow_pingers_spin_is_a_window_around_its_ping() {
        let mut pace = Pace::default();
        let period = Duration::from_millis(45);
        for _ in 0..50 {
            pace.saw(period);
        }
        let plan = pace.plan();
        assert_eq!(plan.nap(period), None, "spins where the ping is due");
        let early = plan.nap(Duration::ZERO).expect("naps first");
        assert!(early <= MAX_NAP);
        assert!(plan.nap(period * 2).is_some_and(|d| d <= MAX_NAP));
        assert!(plan.spin_until - plan.spin_from <= MAX_SPIN);
    }

    /// Issue 23, item 12: where a round trip takes longer than the fixed spin (2 ms here, the
    /// 1 ms spin would nap through every ping), the loop spins through it; a stall later costs
    /// at most MAX_SPIN before the naps; the pace forgets an old slow round trip.
    #[test]
    fn the_spin_follows_the_sessions_round_trip() {
        let mut pace = Pace::default();
        assert_eq!(pace.plan().spin_until, SPIN_FOR);
        let rtt = Duration::from_millis(2);
        for _ in 0..100 {
            pace.saw(rtt);
            assert_eq!(pace.plan().nap(rtt), None, "napped through a live ping");
        }
        assert!(pace.plan().spin_until >= 2 * rtt);
        pace.saw(Duration::from_secs(9)); // a stall: its ping came late
        let stalled = pace.plan();
        assert_eq!(stalled.spin_until - stalled.spin_from, MAX_SPIN);
        assert!(stalled.nap(stalled.spin_until).is_some());
        // Early pings after the stall are looked for within tens of microseconds.
        assert_eq!(stalled.nap(Duration::ZERO), Some(Duration::from_micros(10)));
        for _ in 0..200 {
            pace.saw(Duration::from_micros(100));
        }
        assert_eq!(
            pace.plan(),
            Plan {
                spin_from: Duration::ZERO,
                spin_until: SPIN_FOR
            },
            "fast again: the short spin is back"
        );
    }
}
