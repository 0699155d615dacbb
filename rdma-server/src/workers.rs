//! The session threads, reused (issue 23, item 3). Under emulation a thread made for each
//! connection and gone after it (its stack mapped and unmapped, a guard page, the kernel's
//! task) was most of what a stranger's connection cost; a worker that ends a session waits
//! for the next instead, and goes after [`IDLE`] without one. There are never more workers
//! than sessions at once (`--max-clients`): one is started only when none is idle.
//!
//! A job queue with a condition variable rather than a pool crate: the pool must grow on
//! demand up to the live sessions, shrink when idle, and be joined with a deadline at stop,
//! which the fixed-size pools do not do.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a worker with nothing to do waits before it ends: long enough to carry a burst of
/// connections, short enough that an idle server is back to its accept loop alone soon (the
/// load test holds it to that 20 s after its clients are done).
pub(crate) const IDLE: Duration = Duration::from_secs(5);

type Job = Box<dyn FnOnce() + Send>;

#[derive(Default)]
struct Queue {
    jobs: VecDeque<Job>,
    /// Workers waiting for a job: each worker adds itself before it waits and takes itself off
    /// when it wakes, under the lock. `run` starts a thread when more jobs are queued than
    /// workers wait.
    idle: usize,
    /// Set at stop: workers end once the queue is empty.
    closed: bool,
}

#[derive(Default)]
struct Shared {
    queue: Mutex<Queue>,
    ready: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Threads that run sessions, started as needed and reused.
pub(crate) struct Workers {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
    idle_for: Duration,
}

impl std::fmt::Debug for Workers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workers")
            .field("threads", &self.threads.len())
            .finish_non_exhaustive()
    }
}

impl Workers {
    pub(crate) fn new() -> Self {
        Self::with_idle(IDLE)
    }

    fn with_idle(idle_for: Duration) -> Self {
        Workers {
            shared: Arc::default(),
            threads: Vec::new(),
            idle_for,
        }
    }

    /// Runs `job` on an idle worker, or on a new one when none is idle.
    ///
    /// # Errors
    /// No thread could be started (the job is dropped, and with it what it owns).
    pub(crate) fn run(&mut self, job: impl FnOnce() + Send + 'static) -> std::io::Result<()> {
        self.threads.retain(|t| !t.is_finished());
        let mut q = self.shared.lock();
        q.jobs.push_back(Box::new(job));
        if q.jobs.len() <= q.idle {
            // A waiting worker will take it (or one finishing its own job first, and then the
            // waiting one goes on waiting: either way the job is taken).
            drop(q);
            self.shared.ready.notify_one();
            return Ok(());
        }
        drop(q);
        let shared = Arc::clone(&self.shared);
        let idle_for = self.idle_for;
        match std::thread::Builder::new()
            .name("session".to_owned())
            .spawn(move || work(&shared, idle_for))
        {
            Ok(t) => {
                self.threads.push(t);
                Ok(())
            }
            Err(e) => {
                // Nobody will take it: drop it here (its guard gives its slot back).
                self.shared.lock().jobs.pop_back();
                Err(e)
            }
        }
    }

    /// The workers alive; fails the test when one that ended had panicked.
    #[cfg(test)]
    fn threads(&mut self) -> usize {
        let (ended, alive) = std::mem::take(&mut self.threads)
            .into_iter()
            .partition(|t: &JoinHandle<()>| t.is_finished());
        self.threads = alive;
        for t in ended {
            assert!(t.join().is_ok(), "a worker panicked");
        }
        self.threads.len()
    }

    /// Lets the workers finish what they run and what is queued, and waits for them until
    /// `deadline`; those still busy then are left (the process is ending).
    pub(crate) fn stop(self, deadline: Instant, tick: Duration) {
        self.shared.lock().closed = true;
        self.shared.ready.notify_all();
        for t in self.threads {
            while !t.is_finished() && Instant::now() < deadline {
                std::thread::sleep(tick);
            }
            if t.is_finished() {
                let _ = t.join();
            }
        }
    }
}

/// A worker: takes jobs until the pool is closed and empty, or it was idle for `idle_for`.
fn work(shared: &Shared, idle_for: Duration) {
    let mut q = shared.lock();
    loop {
        if let Some(job) = q.jobs.pop_front() {
            drop(q);
            job();
            q = shared.lock();
            continue;
        }
        if q.closed {
            return;
        }
        // Only the worker itself counts itself idle and not: `run` reads the count, never
        // writes it, so a job taken by a worker that just finished its own (not the one `run`
        // notified) cannot make the count wrong.
        q.idle += 1;
        let (woken, timeout) = shared
            .ready
            .wait_timeout_while(q, idle_for, |q| q.jobs.is_empty() && !q.closed)
            .unwrap_or_else(PoisonError::into_inner);
        q = woken;
        q.idle -= 1;
        if q.jobs.is_empty() && (q.closed || timeout.timed_out()) {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc;

    /// Jobs one after the other reuse one thread; jobs at once get one each.
    #[test]
    fn a_thread_is_started_only_when_none_is_idle() {
        let mut w = Workers::new();
        let done = Arc::new(AtomicUsize::new(0));
        for _ in 0..50 {
            let (tx, rx) = mpsc::channel();
            let d = Arc::clone(&done);
            w.run(move || {
                d.fetch_add(1, Ordering::AcqRel);
                let _ = tx.send(());
            })
            .unwrap();
            rx.recv_timeout(Duration::from_secs(5)).unwrap();
            // Let the worker go back to waiting before the next job comes.
            let by = Instant::now() + Duration::from_secs(5);
            while w.shared.lock().idle == 0 && Instant::now() < by {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        assert_eq!(done.load(Ordering::Acquire), 50);
        assert_eq!(w.threads(), 1, "one thread for fifty sessions in turn");
        let release = Arc::new(std::sync::Barrier::new(5));
        for _ in 0..4 {
            let b = Arc::clone(&release);
            w.run(move || {
                b.wait();
            })
            .unwrap();
        }
        release.wait();
        assert_eq!(w.threads(), 4, "four at once: four threads");
        w.stop(
            Instant::now() + Duration::from_secs(5),
            Duration::from_millis(5),
        );
    }

    /// An idle worker ends after its idle time; a job after that starts a new one.
    #[test]
    fn idle_workers_end() {
        let mut w = Workers::with_idle(Duration::from_millis(20));
        let (tx, rx) = mpsc::channel();
        let tx2 = tx.clone();
        w.run(move || tx.send(()).unwrap()).unwrap();
        rx.recv_timeout(Duration::from_secs(5)).unwrap();
        let by = Instant::now() + Duration::from_secs(5);
        while w.threads() > 0 && Instant::now() < by {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(w.threads(), 0);
        assert_eq!(w.shared.lock().idle, 0);
        w.run(move || tx2.send(()).unwrap()).unwrap();
        rx.recv_timeout(Duration::from_secs(5)).unwrap();
        w.stop(
            Instant::now() + Duration::from_secs(5),
            Duration::from_millis(5),
        );
    }

    /// A job taken by a worker that just finished its own, not by the idle one `run` woke,
    /// leaves the count right: the woken worker goes on waiting, ends at its idle time, and
    /// the pool starts threads again. (When `run` took the idle count itself, the woken worker
    /// took it again at its timeout: the count wrapped in a release build and no thread was
    /// ever started again, every later job queued for good.)
    #[test]
    fn a_stolen_job_leaves_the_idle_count_right() {
        // A try that loses the race is over at once; the one that wins is the case (the old
        // count was wrong after the first steal), and it waits out the idle time.
        let mut w = Workers::with_idle(Duration::from_millis(150));
        let ran = Arc::new(AtomicUsize::new(0));
        let mut stolen = 0;
        for _ in 0..10_000 {
            // A worker, idle.
            let (tx, rx) = mpsc::channel();
            w.run(move || tx.send(()).unwrap()).unwrap();
            rx.recv_timeout(Duration::from_secs(5)).unwrap();
            let by = Instant::now() + Duration::from_secs(5);
            while w.shared.lock().idle == 0 && Instant::now() < by {
                std::thread::yield_now();
            }
            // `run` wakes it; this thread, playing a worker done with its own job, takes the
            // job first (when it wins the race).
            let r = Arc::clone(&ran);
            w.run(move || {
                r.fetch_add(1, Ordering::AcqRel);
            })
            .unwrap();
            let taken = w.shared.lock().jobs.pop_front();
            let Some(job) = taken else { continue };
            stolen += 1;
            assert_eq!(
                w.shared.lock().idle,
                1,
                "the woken worker found nothing and still waits: it is counted idle"
            );
            job();
            // Every worker ends at its idle time, with nothing counted idle behind it.
            let by = Instant::now() + Duration::from_secs(5);
            while w.threads() > 0 && Instant::now() < by {
                std::thread::sleep(Duration::from_millis(2));
            }
            assert_eq!(w.threads(), 0, "the workers end at their idle time");
            assert_eq!(w.shared.lock().idle, 0, "no worker left counted idle");
            break;
        }
        assert!(stolen > 0, "no job was ever taken before the woken worker");
        // And the pool still runs jobs on new threads.
        let (tx, rx) = mpsc::channel();
        w.run(move || tx.send(()).unwrap()).unwrap();
        rx.recv_timeout(Duration::from_secs(5))
            .expect("a job after the steals runs");
        w.threads();
        w.stop(
            Instant::now() + Duration::from_secs(5),
            Duration::from_millis(5),
        );
        assert!(ran.load(Ordering::Acquire) >= stolen);
    }

    /// Stop runs what is queued and waits for the workers.
    #[test]
    fn stop_finishes_the_queue() {
        let mut w = Workers::new();
        let done = Arc::new(AtomicUsize::new(0));
        for _ in 0..10 {
            let d = Arc::clone(&done);
            w.run(move || {
                std::thread::sleep(Duration::from_millis(5));
                d.fetch_add(1, Ordering::AcqRel);
            })
            .unwrap();
        }
        w.stop(
            Instant::now() + Duration::from_secs(10),
            Duration::from_millis(5),
        );
        assert_eq!(done.load(Ordering::Acquire), 10);
    }
}
