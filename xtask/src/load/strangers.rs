//! Strangers: bursts of short connections to the server from many threads at once (connect,
//! one line that is no hello, close), as a scanner or a misconfigured peer makes them, and the
//! hostile matrix's cases a stranger can play before any hello is admitted. Bounded in time
//! and in count; on loopback or the project's own guests only.

use rdma_hostile::{Case, Config, Verdict};
use std::io::Write as _;
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// At most this many connections a burst, whatever its length.
const MAX_CONNECTIONS: u64 = 200_000;

/// What one burst did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Burst {
    /// Strangers whose connection (and what `each` does with it) succeeded.
    pub connected: u64,
    /// Strangers that failed (refused, timed out).
    pub failed: u64,
}

/// `threads` threads, each running `each` against `addr` (one stranger: connect, do something
/// short, close) again and again for `lasting`, at most [`MAX_CONNECTIONS`] in all. The one
/// stranger loop: the load's soak and the bench's flood.
pub(crate) fn burst(
    addr: SocketAddr,
    threads: u32,
    lasting: Duration,
    each: impl Fn(SocketAddr) -> std::io::Result<()> + Sync,
) -> Burst {
    let end = Instant::now() + lasting;
    let connected = AtomicU64::new(0);
    let failed = AtomicU64::new(0);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                while Instant::now() < end
                    && connected.load(Ordering::Relaxed) + failed.load(Ordering::Relaxed)
                        < MAX_CONNECTIONS
                {
                    let counter = if each(addr).is_ok() {
                        &connected
                    } else {
                        &failed
                    };
                    counter.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
    });
    Burst {
        connected: connected.into_inner(),
        failed: failed.into_inner(),
    }
}

/// A stranger who sends one junk line and closes at once, as a scanner does.
pub(crate) fn junk_line(addr: SocketAddr) -> std::io::Result<()> {
    let mut c = TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
    let _ = c.set_write_timeout(Some(Duration::from_secs(1)));
    // The connection counts once it is made, whatever the write does.
    let _ = c.write_all(b"GET / HTTP/1.0\r\n");
    Ok(())
}

/// The hostile matrix's cases that need no accept (a stranger's: garbage, wrong order,
/// vanishing), each checked against the server's answer and followed by its health probe.
const HOSTILE: [Case; 12] = [
    Case::BadJson,
    Case::TruncatedJson,
    Case::NotObject,
    Case::BadUtf8,
    Case::InvalidFields,
    Case::QpnOutOfRange,
    Case::BadVersion,
    Case::UnknownType,
    Case::BannerToServer,
    Case::WrittenBeforeHello,
    Case::ClientError,
    Case::VanishAfterBanner,
];

/// At most this many connections one hostile case opens, its health probe included (the
/// server's `stopped` counts each).
pub(super) const HOSTILE_CONNECTIONS: u64 = 16;

/// Runs [`HOSTILE`] against the server at `addr` (buffer `buffer_size`, `--timeout`
/// `server_timeout`); returns how many cases ran and each failed one, named.
pub(super) fn hostile(
    addr: SocketAddr,
    buffer_size: u64,
    server_timeout: Duration,
    rng_seed: u64,
) -> (u64, Vec<String>) {
    let cfg = Arc::new(Config {
        server: addr,
        buffer_size,
        server_timeout,
        token: None,
        max_clients: None,
        max_per_ip: None,
        max_pinned: None,
        expect_forbidden: false,
        // Only in the hellos of `invalid_fields`, refused for their bad field first.
        gid: "::ffff:127.0.0.1".to_owned(),
        reply: Duration::from_secs(5),
        rng_seed,
    });
    let verdicts: Vec<Verdict> = HOSTILE
        .iter()
        .enumerate()
        .map(|(i, &case)| rdma_hostile::run_case_then(&cfg, case, i as u64, &|| Ok(())))
        .collect();
    (HOSTILE.len() as u64, Verdict::failures(&verdicts))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A burst against a listener on loopback connects many times, ends on time, and every
    /// connection it counts reached the listener.
    #[test]
    fn a_burst_connects_until_its_end() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let accepted = std::thread::spawn(move || {
            l.set_nonblocking(true).unwrap();
            let until = Instant::now() + Duration::from_secs(3);
            let mut n = 0u64;
            while Instant::now() < until {
                match l.accept() {
                    Ok(_) => n += 1,
                    Err(_) => std::thread::sleep(Duration::from_millis(1)),
                }
            }
            n
        });
        let t = Instant::now();
        let b = burst(addr, 2, Duration::from_millis(300), junk_line);
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
        assert!(b.connected > 10, "{b:?}");
        assert!(accepted.join().unwrap() <= b.connected);
    }
}
