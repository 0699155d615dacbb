//! The two hot loops, over a [`Link`] (the real one is verbs, see `verbs.rs`; the tests use a
//! fake). They allocate nothing: samples go into buffers sized before the loop starts, and the
//! test in this file proves it with a counting global allocator.

use std::time::{Duration, Instant};

use rdma_proto::bench::counter;

/// What the loops need from the connection.
pub trait Link {
    type Error;
    /// Posts an RDMA Write of the first `size` bytes of the source buffer (whose last byte
    /// was set to `last` first, for lat), to the start of the peer's buffer.
    fn post(
        &mut self,
        size: usize,
        last: Option<u8>,
        signaled: bool,
        wr_id: u64,
    ) -> Result<(), Self::Error>;
    /// A completion if one is there (never sleeps): its work request id.
    fn try_poll(&mut self) -> Result<Option<u64>, Self::Error>;
    /// Waits for a completion until `deadline` (spinning or sleeping on an event, as the
    /// link was set up): its work request id.
    fn poll(&mut self, deadline: Instant) -> Result<u64, Self::Error>;
    /// Byte `index` of our exposed buffer, as the peer last wrote it.
    fn byte(&self, index: usize) -> u8;
    /// Posts the stamped exchange's ping: byte `at` of the source buffer, to byte `at` of the
    /// peer's, as an RDMA Write with immediate [`STAMP_IMM`], signalled.
    fn post_stamp(&mut self, at: usize, wr_id: u64) -> Result<(), Self::Error>;
    /// Waits for a completion until `deadline`, send or receive, with its stamp where the
    /// link's completion queue stamps them. A receive reaped by `try_poll`/`poll` (a peer
    /// that answered early) comes first.
    fn poll_done(&mut self, deadline: Instant) -> Result<Done, Self::Error>;
    /// The error for a wait that ran out.
    fn timeout(&self, what: &'static str, waited: Duration) -> Self::Error;
}

/// A completion as the stamped exchange needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Done {
    /// The id of the work request (a receive's: what it was posted with).
    pub wr_id: u64,
    /// A receive completion (the peer's write with immediate), not a send's.
    pub received: bool,
    /// The device's clock at the completion, where the completion queue stamps them.
    pub timestamp: Option<u64>,
}

/// The stamped exchange as the client saw it ([`stamped`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamped {
    /// From posting the ping to seeing the answer's receive completion, on our monotonic
    /// clock.
    pub wall: Duration,
    /// The stamp of the ping's send completion (the server's ACK came back).
    pub ping: Option<u64>,
    /// The stamp of the answer's receive completion.
    pub answer: Option<u64>,
}

/// The work request id of the stamped exchange's ping.
pub const STAMP_WR: u64 = u64::MAX - 2;
/// The work request id of the receive posted for the stamped exchange's answer.
pub const RECV_WR: u64 = u64::MAX - 1;

/// The stamped exchange that ends a `lat` sweep where the hello asked for it
/// ([`rdma_proto::bench::Turnaround`]): posts the ping (byte `at`, the last byte of the largest
/// size, which holds the last exchange's counter already, so the peer's final bytes do not
/// change) and waits for both its send completion and the answer's receive completion, each
/// wait ending at `timeout` from the post.
pub fn stamped<L: Link>(link: &mut L, at: usize, timeout: Duration) -> Result<Stamped, L::Error> {
    let start = Instant::now();
    let deadline = start + timeout;
    link.post_stamp(at, STAMP_WR)?;
    let (mut ping, mut answer) = (None, None);
    while ping.is_none() || answer.is_none() {
        let done = link.poll_done(deadline)?;
        if done.received {
            answer = Some((start.elapsed(), done.timestamp));
        } else if done.wr_id == STAMP_WR {
            ping = Some(done.timestamp);
        }
    }
    let (wall, answer) = answer.unwrap_or_default();
    Ok(Stamped {
        wall,
        ping: ping.flatten(),
        answer,
    })
}

pub use rdma_proto::bench::STAMP_IMM;

/// Most bytes between two signalled writes of a bandwidth run: a path so lossy that RoCE's
/// retransmissions bring it down to 0.37 MB/s (perftest's 64 KiB writes under 5% loss each
/// way in our guests) still completes one every 3 s, well inside the default `--timeout` of
/// 10 s, where 4 MiB took 11 s and the bench gave up.
const SIGNAL_BYTES: u64 = 1 << 20;

/// The shortest window the bandwidth peak is measured over.
const PEAK_WINDOW: Duration = Duration::from_millis(5);

/// Send-queue room the loops keep: a signalled write at least this often.
pub use rdma_proto::bench::SIGNAL_EVERY;

/// `lat`: `iters` ping-pongs of `size` bytes. Each ping's last byte is the exchange counter;
/// we spin on the last byte of our buffer until the pong with the same counter lands (once it
/// is overdue, 8 last round trips and at least 1 ms, we look between naps instead: see
/// `pong_wait`; a peer whose answers are lost costs no core until the timeout), and
/// record half the round trip (µs) into `samples` (cleared first; it must have room for
/// `iters`, so that nothing is allocated here). `wr_base` makes work request ids unique across
/// sizes. Returns when the pong of the last exchange has landed.
pub fn ping_pong<L: Link>(
    link: &mut L,
    size: usize,
    iters: u64,
    wr_base: u64,
    timeout: Duration,
    samples: &mut Vec<f64>,
) -> Result<(), L::Error> {
    samples.clear();
    let last = size - 1;
    let mut completed = wr_base;
    let mut record = |from: Instant, to: Instant| {
        if samples.len() < samples.capacity() {
            samples.push(to.duration_since(from).as_secs_f64() * 1e6 / 2.0);
        }
    };
    // As perftest: one clock read per exchange, at each post; a round trip is the time from
    // one post to the next (the pong landed in between). Under emulation a clock read is
    // costly, so the spin below reads it only every 1024 turns, and never pauses the CPU
    // while the pong is not overdue.
    let mut prev = Instant::now();
    // The last round trip: the spin budget of the next (see `pong_wait`).
    let mut last_rtt = Duration::ZERO;
    for n in 1..=iters {
        let c = counter(n);
        let wr = wr_base + n - 1;
        // Keep the send queue from filling with unreaped writes.
        while wr - completed >= 4 * SIGNAL_EVERY {
            completed = link.poll(Instant::now() + timeout)? + 1;
        }
        if n > 1 {
            let now = Instant::now();
            record(prev, now);
            last_rtt = now.duration_since(prev);
            prev = now;
        }
        link.post(size, Some(c), n % SIGNAL_EVERY == 0 || n == iters, wr)?;
        let budget = spin_budget(last_rtt);
        let mut spins: u32 = 0;
        while link.byte(last) != c {
            spins = spins.wrapping_add(1);
            if spins % 1024 == 0 {
                if let Some(id) = link.try_poll()? {
                    completed = id + 1;
                }
                let waited = prev.elapsed();
                if waited > timeout {
                    return Err(link.timeout("waiting for the server's pong", waited));
                }
                if let PongWait::Nap(nap) = pong_wait(waited, budget) {
                    // Overdue: look again after a nap, then nap again (one look per nap).
                    std::thread::sleep(nap.min(timeout - waited));
                    spins = 1023;
                }
            }
        }
    }
    record(prev, Instant::now());
    // The last pong landed, so every ping did; reap what is left.
    let end = wr_base + iters;
    while completed < end {
        completed = link.poll(Instant::now() + timeout)? + 1;
    }
    Ok(())
}

/// The lat loop spins at least this long for a pong (the first of a sweep has no round trip
/// to go by; a pong this late is overdue on any healthy path but an emulated one's).
const SPIN_FLOOR: Duration = Duration::from_millis(1);
/// ... and at most this long, however slow the last round trip was.
const SPIN_CEIL: Duration = Duration::from_millis(10);
/// The longest nap between two looks at an overdue pong.
const NAP_MAX: Duration = Duration::from_millis(5);
/// The shortest.
const NAP_MIN: Duration = Duration::from_micros(20);

/// How long the lat loop spins for a pong before it naps: 8 times the last round trip, within
/// [`SPIN_FLOOR`] and [`SPIN_CEIL`].
fn spin_budget(last_rtt: Duration) -> Duration {
    last_rtt.saturating_mul(8).clamp(SPIN_FLOOR, SPIN_CEIL)
}

/// What the lat loop does while a pong has not come, `waited` after its ping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PongWait {
    /// Spin (the pong is not overdue: the round trip stays exact).
    Spin,
    /// Sleep this long before looking again: a sixteenth of the wait so far, within
    /// [`NAP_MIN`] and [`NAP_MAX`], so a late pong is measured at most 1/16 (or 5 ms) late, and
    /// a silent peer is looked at some 200 times a second instead of spun on.
    Nap(Duration),
}

fn pong_wait(waited: Duration, budget: Duration) -> PongWait {
    if waited < budget {
        PongWait::Spin
    } else {
        PongWait::Nap((waited / 16).clamp(NAP_MIN, NAP_MAX))
    }
}

/// What a bandwidth run did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stream {
    /// Writes completed.
    pub writes: u64,
    /// From the first post to the last completion.
    pub secs: f64,
    /// The best rate between two consecutive completions, bytes per second.
    pub peak_bytes_per_s: f64,
}

/// `bw`: up to `tx_depth` writes of `size` bytes in flight, one signalled every `cq_mod`, until
/// `iters` writes completed or `duration` passed (then it stops at the next signalled write).
pub fn stream<L: Link>(
    link: &mut L,
    size: usize,
    iters: u64,
    duration: Option<Duration>,
    tx_depth: u64,
    wr_base: u64,
    timeout: Duration,
) -> Result<Stream, L::Error> {
    // A signalled write at least every half depth, 64 writes and 1 MiB: the wait for one
    // completion must stay well inside the timeout even for big messages on a slow link.
    let cq_mod = (tx_depth / 2)
        .clamp(1, 64)
        .min((SIGNAL_BYTES / size.max(1) as u64).max(1));
    let mut end = iters;
    let mut posted: u64 = 0;
    let mut done: u64 = 0;
    let start = Instant::now();
    let mut last_t = start;
    let mut last_done = 0u64;
    let mut peak: f64 = 0.0;
    while done < end {
        while posted < end && posted - done < tx_depth {
            let signaled = (posted + 1) % cq_mod == 0 || posted + 1 == end;
            link.post(size, None, signaled, wr_base + posted)?;
            posted += 1;
        }
        let id = link.poll(Instant::now() + timeout)?;
        done = id + 1 - wr_base;
        let now = Instant::now();
        let dt = now.duration_since(last_t).as_secs_f64();
        // The peak over windows of at least PEAK_WINDOW: completions that were queued come
        // out back to back and would make any shorter window meaningless.
        if dt >= PEAK_WINDOW.as_secs_f64() || done == end {
            if dt > 0.0 {
                peak = peak.max((done - last_done) as f64 * size as f64 / dt);
            }
            (last_t, last_done) = (now, done);
        }
        if let Some(d) = duration {
            if end == iters && now.duration_since(start) >= d {
                // Time is up: post nothing new past the next signalled write (the last write
                // posted must be a signalled one, or its completion would never show).
                end = posted.next_multiple_of(cq_mod).min(iters);
            }
        }
    }
    Ok(Stream {
        writes: done,
        secs: last_t.duration_since(start).as_secs_f64(),
        peak_bytes_per_s: peak,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::Cell;
    use std::collections::VecDeque;

    /// Counts allocations made by the current thread while `COUNTING` is set on it.
    struct Counting;
    thread_local! {
        static COUNTING: Cell<bool> = const { Cell::new(false) };
        static ALLOCS: Cell<u64> = const { Cell::new(0) };
    }
    // SAFETY: forwards every call to the system allocator unchanged; the thread-local
    // bookkeeping allocates nothing (const-initialised Cells).
    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, l: Layout) -> *mut u8 {
            if COUNTING.with(Cell::get) {
                ALLOCS.with(|a| a.set(a.get() + 1));
            }
            // SAFETY: same contract as ours.
            unsafe { System.alloc(l) }
        }
        unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
            // SAFETY: same contract as ours.
            unsafe { System.dealloc(p, l) }
        }
        unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
            if COUNTING.with(Cell::get) {
                ALLOCS.with(|a| a.set(a.get() + 1));
            }
            // SAFETY: same contract as ours.
            unsafe { System.realloc(p, l, n) }
        }
    }
    #[global_allocator]
    static GLOBAL: Counting = Counting;

    fn allocations_in(f: impl FnOnce()) -> u64 {
        ALLOCS.with(|a| a.set(0));
        COUNTING.with(|c| c.set(true));
        f();
        COUNTING.with(|c| c.set(false));
        ALLOCS.with(Cell::get)
    }

    /// A loopback "peer": every write is answered at once (lat: the pong lands in our buffer)
    /// and completes in order. The queues are allocated up front.
    struct Fake {
        buf: Vec<u8>,
        pending: VecDeque<u64>,
        posts: u64,
        signaled: u64,
        /// The stamped exchange's completions, in the order they come.
        stamped: VecDeque<Done>,
        /// `post_stamp` adds no completions: the test put them there.
        poll_only: bool,
    }

    impl Fake {
        fn new(size: usize) -> Self {
            Fake {
                buf: vec![0; size],
                pending: VecDeque::with_capacity(4096),
                posts: 0,
                signaled: 0,
                stamped: VecDeque::new(),
                poll_only: false,
            }
        }
    }

    impl Link for Fake {
        type Error = String;
        fn post(
            &mut self,
            size: usize,
            last: Option<u8>,
            signaled: bool,
            wr: u64,
        ) -> Result<(), String> {
            if let Some(c) = last {
                self.buf[size - 1] = c;
            }
            self.posts += 1;
            if signaled {
                self.signaled += 1;
                self.pending.push_back(wr);
            }
            Ok(())
        }
        fn try_poll(&mut self) -> Result<Option<u64>, String> {
            Ok(self.pending.pop_front())
        }
        fn poll(&mut self, _: Instant) -> Result<u64, String> {
            self.pending
                .pop_front()
                .ok_or_else(|| "nothing to poll".to_owned())
        }
        fn byte(&self, i: usize) -> u8 {
            self.buf[i]
        }
        fn post_stamp(&mut self, at: usize, wr: u64) -> Result<(), String> {
            assert!(at < self.buf.len());
            if self.poll_only {
                return Ok(());
            }
            // The ping lands (its ACK: a send completion stamped 100), then the peer answers
            // after its turnaround (a receive completion stamped 130).
            self.stamped.push_back(Done {
                wr_id: wr,
                received: false,
                timestamp: Some(100),
            });
            self.stamped.push_back(Done {
                wr_id: RECV_WR,
                received: true,
                timestamp: Some(130),
            });
            Ok(())
        }
        fn poll_done(&mut self, _: Instant) -> Result<Done, String> {
            self.stamped
                .pop_front()
                .ok_or_else(|| "no stamped completion".to_owned())
        }
        fn timeout(&self, what: &'static str, _: Duration) -> String {
            what.to_owned()
        }
    }

    #[test]
    fn the_stamped_exchange_takes_both_completions_in_either_order() {
        let mut link = Fake::new(8);
        let s = stamped(&mut link, 7, Duration::from_secs(1)).unwrap();
        assert_eq!((s.ping, s.answer), (Some(100), Some(130)));
        assert!(link.stamped.is_empty());
        // The answer's receive first (the ACK's completion came later), and unstamped
        // completions (Soft-RoCE): the exchange still ends, without stamps.
        let mut link = Fake::new(8);
        link.stamped.extend([
            Done {
                wr_id: RECV_WR,
                received: true,
                timestamp: None,
            },
            Done {
                wr_id: 3,
                received: false,
                timestamp: None,
            },
            Done {
                wr_id: STAMP_WR,
                received: false,
                timestamp: None,
            },
        ]);
        link.poll_only = true;
        let s = stamped(&mut link, 7, Duration::from_secs(1)).unwrap();
        assert_eq!((s.ping, s.answer), (None, None));
        assert!(
            link.stamped.is_empty(),
            "a stray send completion is passed over"
        );
        // A peer that never answers: the wait's error.
        let mut link = Fake::new(8);
        link.poll_only = true;
        assert!(stamped(&mut link, 7, Duration::from_millis(5)).is_err());
    }

    #[test]
    fn the_hot_loops_allocate_nothing() {
        let mut link = Fake::new(64);
        let mut samples = Vec::with_capacity(1000);
        let n = allocations_in(|| {
            ping_pong(&mut link, 64, 1000, 0, Duration::from_secs(5), &mut samples).unwrap();
        });
        assert_eq!(n, 0, "ping_pong allocated {n} times");
        assert_eq!(samples.len(), 1000);
        assert_eq!(link.posts, 1000);
        let mut link = Fake::new(64);
        let mut s = None;
        let n = allocations_in(|| {
            s = Some(stream(&mut link, 64, 5000, None, 128, 0, Duration::from_secs(5)).unwrap());
        });
        assert_eq!(n, 0, "stream allocated {n} times");
        assert_eq!(s.unwrap().writes, 5000);
        assert_eq!(link.posts, 5000);
        // The counter itself works: an allocation inside the window is seen.
        assert_eq!(allocations_in(|| drop(vec![1u8; 16])), 1);
    }

    #[test]
    fn stream_signals_every_cq_mod_and_the_last() {
        let mut link = Fake::new(8);
        let s = stream(&mut link, 8, 100, None, 16, 1000, Duration::from_secs(1)).unwrap();
        assert_eq!(s.writes, 100);
        // cq_mod = 8: 12 full groups + the 100th.
        assert_eq!(link.signaled, 13);
        // Big messages: a signalled write every 1 MiB (here every write of 1 MiB), and for
        // perftest's 64 KiB every 16th (a lossy path's completions must come inside the
        // timeout: see SIGNAL_BYTES).
        let mut link = Fake::new(8);
        let s = stream(&mut link, 1 << 20, 10, None, 128, 0, Duration::from_secs(1)).unwrap();
        assert_eq!((s.writes, link.signaled), (10, 10));
        let mut link = Fake::new(8);
        let s = stream(
            &mut link,
            64 << 10,
            64,
            None,
            128,
            0,
            Duration::from_secs(1),
        )
        .unwrap();
        assert_eq!((s.writes, link.signaled), (64, 4));
    }

    #[test]
    fn an_overdue_pong_is_napped_on_with_naps_that_keep_its_round_trip_close() {
        // The budget follows the last round trip, within its bounds.
        assert_eq!(spin_budget(Duration::ZERO), SPIN_FLOOR);
        assert_eq!(
            spin_budget(Duration::from_micros(500)),
            Duration::from_millis(4)
        );
        assert_eq!(spin_budget(Duration::from_secs(1)), SPIN_CEIL);
        let budget = Duration::from_millis(1);
        assert_eq!(
            pong_wait(Duration::from_micros(999), budget),
            PongWait::Spin
        );
        let mut naps = 0u32;
        let mut waited = budget;
        let timeout = Duration::from_secs(60);
        while waited < timeout {
            let PongWait::Nap(nap) = pong_wait(waited, budget) else {
                panic!("spins at {waited:?}");
            };
            assert!(nap <= NAP_MAX && nap >= NAP_MIN, "{nap:?}");
            // A pong landing just after a look is seen at most a sixteenth of its time late.
            assert!(nap <= (waited / 16).max(NAP_MIN), "{nap:?} at {waited:?}");
            waited += nap;
            naps += 1;
        }
        // A silent peer over a minute: some 12 000 wake-ups, not a spinning core.
        assert!(naps < 13_000, "{naps}");
    }

    /// A peer that never answers (its return path drops everything): the lat loop looks for
    /// the pong a bounded number of times over the whole timeout, napping once the answer is
    /// overdue, instead of spinning a core until the timeout.
    #[test]
    fn a_silent_peer_is_not_spun_on_for_the_whole_timeout() {
        /// Counts every look at the pong's byte and at the completion queue.
        struct Silent {
            looks: u64,
        }
        impl Link for Silent {
            type Error = String;
            fn post(&mut self, _: usize, _: Option<u8>, _: bool, _: u64) -> Result<(), String> {
                Ok(())
            }
            fn try_poll(&mut self) -> Result<Option<u64>, String> {
                self.looks += 1;
                Ok(None)
            }
            fn poll(&mut self, _: Instant) -> Result<u64, String> {
                Err("no completion".into())
            }
            fn byte(&self, _: usize) -> u8 {
                // `byte` takes `&self`: counted in a thread-local.
                LOOKS.with(|l| l.set(l.get() + 1));
                0
            }
            fn post_stamp(&mut self, _: usize, _: u64) -> Result<(), String> {
                Ok(())
            }
            fn poll_done(&mut self, _: Instant) -> Result<Done, String> {
                Err("no completion".into())
            }
            fn timeout(&self, what: &'static str, _: Duration) -> String {
                what.to_owned()
            }
        }
        thread_local! {
            static LOOKS: Cell<u64> = const { Cell::new(0) };
        }
        let timeout = Duration::from_millis(500);
        let mut link = Silent { looks: 0 };
        let mut v = Vec::with_capacity(1);
        LOOKS.with(|l| l.set(0));
        let t = Instant::now();
        let e = ping_pong(&mut link, 2, 1, 0, timeout, &mut v).unwrap_err();
        let took = t.elapsed();
        assert!(e.contains("pong"), "{e}");
        assert!(took >= timeout && took < timeout * 2, "{took:?}");
        let looks = LOOKS.with(Cell::get) + link.looks;
        // Spinning the whole 500 ms is tens of millions of looks; spinning only the first
        // millisecond, then napping, is at most a few hundred thousand.
        assert!(
            looks < 1_000_000,
            "{looks} looks at a silent peer in {took:?}"
        );
    }
}
