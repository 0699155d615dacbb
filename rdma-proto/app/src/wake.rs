//! How a loop that runs for days sleeps: in `poll(2)` on its listener and a [`Bell`], so that
//! it wakes for a client, a signal, or what else rings it (a verdict that ends a one-shot
//! server, a run that is over), and for nothing else. Both binaries' long-running loops use it:
//! the server's accept loop, the mesh's scheduler and its metrics endpoint.
//!
//! The bell is a Unix socket pair: [`Ringer::ring`] writes a byte to one end, the loop polls
//! the other. SIGINT and SIGTERM ring it from the signal handler (`signal_hook`'s pipe, which
//! does only the async-signal-safe write); the flag the loop reads is set beside it ([`Stop`]).

use rustix::event::{PollFd, PollFlags, Timespec};
use std::io::{self, Read as _, Write as _};
use std::net::TcpListener;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// A request to stop that a sleeping loop sees at once: the flag it reads, and the bell that
/// wakes it to read it.
#[derive(Debug)]
pub struct Stop {
    flag: Arc<AtomicBool>,
    bell: Bell,
}

impl Stop {
    /// A stop not requested yet.
    ///
    /// # Errors
    /// As [`Bell::new`].
    pub fn new() -> io::Result<Self> {
        Ok(Self {
            flag: Arc::new(AtomicBool::new(false)),
            bell: Bell::new()?,
        })
    }

    /// Requests the stop when any of `signals` comes: the handler sets the flag, then rings.
    ///
    /// # Errors
    /// A signal could not be registered.
    pub fn on_signals(&self, signals: &[std::ffi::c_int]) -> io::Result<()> {
        for &sig in signals {
            signal_hook::flag::register(sig, Arc::clone(&self.flag))?;
            self.bell.ring_on(sig)?;
        }
        Ok(())
    }

    /// Requests the stop.
    pub fn request(&self) {
        self.flag.store(true, Ordering::Release);
        self.bell.ringer().ring();
    }

    /// Whether the stop was requested.
    pub fn requested(&self) -> bool {
        self.flag.load(Ordering::Acquire)
    }

    /// The bell the loop sleeps on.
    pub fn bell(&self) -> &Bell {
        &self.bell
    }
}

/// What wakes a sleeping loop besides a client.
#[derive(Debug)]
pub struct Bell {
    /// The end the loop polls and drains.
    rx: UnixStream,
    /// The end its ringers write.
    tx: Arc<UnixStream>,
}

/// Wakes a [`Bell`]'s loop; cheap to clone, never blocks, safe from any thread.
#[derive(Clone, Debug)]
pub struct Ringer(Option<Arc<UnixStream>>);

impl Ringer {
    /// A ringer with no bell (a session context that no accept loop waits on).
    pub fn none() -> Self {
        Self(None)
    }

    /// Wakes the loop. A full socket buffer means it is rung already; nothing is lost.
    pub fn ring(&self) {
        if let Some(tx) = &self.0 {
            let _ = (&**tx).write(&[1]);
        }
    }
}

impl Bell {
    /// A new bell, both ends non-blocking.
    ///
    /// # Errors
    /// The socket pair could not be made (out of file descriptors).
    pub fn new() -> io::Result<Self> {
        let (rx, tx) = UnixStream::pair()?;
        rx.set_nonblocking(true)?;
        tx.set_nonblocking(true)?;
        Ok(Self {
            rx,
            tx: Arc::new(tx),
        })
    }

    /// A ringer for this bell.
    pub fn ringer(&self) -> Ringer {
        Ringer(Some(Arc::clone(&self.tx)))
    }

    /// Rings this bell whenever `signal` comes (from the handler: one non-blocking write).
    ///
    /// # Errors
    /// The signal could not be registered, or the socket not duplicated.
    pub fn ring_on(&self, signal: std::ffi::c_int) -> io::Result<()> {
        signal_hook::low_level::pipe::register(signal, self.tx.try_clone()?)?;
        Ok(())
    }

    /// Sleeps until `listener` has a connection to accept, the bell rings, or `timeout` (none:
    /// no limit) runs out, whichever is first; then empties the bell. A signal that interrupts
    /// the wait ends it too (the caller looks at its flags after every wait).
    ///
    /// # Errors
    /// `poll(2)` failed other than by an interruption.
    pub fn wait(&self, listener: &TcpListener, timeout: Option<Duration>) -> io::Result<()> {
        self.poll(Some(listener), timeout)
    }

    /// Sleeps until the bell rings (or a signal interrupts); then empties it.
    ///
    /// # Errors
    /// `poll(2)` failed other than by an interruption.
    pub fn sleep(&self) -> io::Result<()> {
        self.poll(None, None)
    }

    fn poll(&self, listener: Option<&TcpListener>, timeout: Option<Duration>) -> io::Result<()> {
        let timeout = timeout.map(|t| Timespec {
            tv_sec: i64::try_from(t.as_secs()).unwrap_or(i64::MAX),
            tv_nsec: i64::from(t.subsec_nanos()),
        });
        let mut fds = vec![PollFd::new(&self.rx, PollFlags::IN)];
        if let Some(l) = listener {
            fds.push(PollFd::new(l, PollFlags::IN));
        }
        match rustix::event::poll(&mut fds, timeout.as_ref()) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
        let mut drain = [0u8; 64];
        while matches!((&self.rx).read(&mut drain), Ok(n) if n > 0) {}
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    fn listener() -> TcpListener {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.set_nonblocking(true).unwrap();
        l
    }

    #[test]
    fn a_wait_ends_at_its_timeout_when_nothing_comes() {
        let (bell, l) = (Bell::new().unwrap(), listener());
        let t = Instant::now();
        bell.wait(&l, Some(Duration::from_millis(150))).unwrap();
        assert!(
            t.elapsed() >= Duration::from_millis(150),
            "{:?}",
            t.elapsed()
        );
    }

    #[test]
    fn a_ring_from_another_thread_ends_the_wait_and_is_used_up() {
        let (bell, l) = (Bell::new().unwrap(), listener());
        let ringer = bell.ringer();
        let t = Instant::now();
        let th = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            ringer.ring();
        });
        bell.wait(&l, Some(Duration::from_secs(30))).unwrap();
        assert!(t.elapsed() < Duration::from_secs(30));
        th.join().unwrap();
        // Rung many times (more than the socket holds): one wait ends, and drains them all.
        for _ in 0..100_000 {
            bell.ringer().ring();
        }
        bell.wait(&l, Some(Duration::from_secs(30))).unwrap();
        let t = Instant::now();
        bell.wait(&l, Some(Duration::from_millis(100))).unwrap();
        assert!(
            t.elapsed() >= Duration::from_millis(100),
            "{:?}",
            t.elapsed()
        );
    }

    #[test]
    fn a_client_ends_the_wait() {
        let (bell, l) = (Bell::new().unwrap(), listener());
        let addr = l.local_addr().unwrap();
        let th = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            std::net::TcpStream::connect(addr).unwrap()
        });
        let t = Instant::now();
        bell.wait(&l, Some(Duration::from_secs(30))).unwrap();
        assert!(t.elapsed() < Duration::from_secs(30));
        let _client = th.join().unwrap();
        assert!(l.accept().is_ok());
    }

    #[test]
    fn a_sleep_ends_at_a_ring_or_a_stop() {
        let stop = Stop::new().unwrap();
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(50));
                stop.request();
            });
            stop.bell().sleep().unwrap();
        });
        assert!(stop.requested());
    }

    #[test]
    fn a_ringer_without_a_bell_does_nothing() {
        Ringer::none().ring();
    }
}
