//! Who gets a session slot before any check of what they send: at most `--max-per-ip`
//! connections at once from one address (one /64 for IPv6: a single host usually has a whole
//! /64), under the global `--max-clients`; and refusals logged at a bounded rate, so a flood
//! of connections cannot flood the operator's log.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// The key a peer's connections are counted under: IPv4 (mapped ones too) by address, IPv6 by
/// its /64.
#[must_use]
pub fn source_key(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => {
            let bits = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(bits.into())
        }
    }
}

/// Live connections per source.
#[derive(Debug, Default)]
pub struct PerSource {
    live: HashMap<IpAddr, u32>,
}

impl PerSource {
    /// Takes a slot for `ip` if it holds fewer than `cap`; `false` when it is at its cap.
    pub fn take(&mut self, ip: IpAddr, cap: u32) -> bool {
        let n = self.live.entry(source_key(ip)).or_insert(0);
        if *n >= cap {
            return false;
        }
        *n += 1;
        true
    }

    /// Gives back a slot `take` gave `ip`.
    pub fn give_back(&mut self, ip: IpAddr) {
        let key = source_key(ip);
        if let Some(n) = self.live.get_mut(&key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.live.remove(&key);
            }
        }
    }

    /// Sources with a live connection (the map never outgrows the live connections).
    #[cfg(test)]
    fn sources(&self) -> usize {
        self.live.len()
    }
}

/// Refusal lines logged per window.
pub const LOG_BURST: u32 = 10;
/// The window of [`LOG_BURST`].
pub const LOG_WINDOW: Duration = Duration::from_secs(1);

/// At most [`LOG_BURST`] refusals logged per [`LOG_WINDOW`]; the rest are counted, and the
/// count is reported with the next line logged.
#[derive(Debug)]
pub struct LogLimit {
    window: Instant,
    logged: u32,
    dropped: u64,
}

/// What to do with one refusal's log line.
#[derive(Debug, PartialEq, Eq)]
pub enum Log {
    /// Log it; `dropped` lines were left out since the last one logged.
    Line { dropped: u64 },
    /// Leave it out (counted).
    Drop,
}

impl LogLimit {
    #[must_use]
    pub fn new(now: Instant) -> Self {
        LogLimit {
            window: now,
            logged: 0,
            dropped: 0,
        }
    }

    /// Whether the refusal at `now` is logged.
    pub fn refusal(&mut self, now: Instant) -> Log {
        if now.duration_since(self.window) >= LOG_WINDOW {
            self.window = now;
            self.logged = 0;
        }
        if self.logged >= LOG_BURST {
            self.dropped += 1;
            return Log::Drop;
        }
        self.logged += 1;
        Log::Line {
            dropped: std::mem::take(&mut self.dropped),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 16, item 9: one host cannot take more than its share of the slots; its slots come
    /// back when its connections end; another host is not affected.
    #[test]
    fn one_source_holds_at_most_its_cap() {
        let mut p = PerSource::default();
        let a: IpAddr = "10.0.0.2".parse().unwrap();
        let b: IpAddr = "10.0.0.3".parse().unwrap();
        assert!(p.take(a, 2) && p.take(a, 2));
        assert!(!p.take(a, 2), "a third from the same address");
        assert!(
            !p.take("::ffff:10.0.0.2".parse().unwrap(), 2),
            "mapped is the same"
        );
        assert!(p.take(b, 2));
        p.give_back(a);
        assert!(p.take(a, 2));
        for ip in [a, a, b] {
            p.give_back(ip);
        }
        assert_eq!(p.sources(), 0);
    }

    #[test]
    fn an_ipv6_host_counts_as_its_slash_64() {
        let mut p = PerSource::default();
        assert!(p.take("fd00::1".parse().unwrap(), 1));
        assert!(!p.take("fd00::ffff:2".parse().unwrap(), 1));
        assert!(p.take("fd00:0:0:1::1".parse().unwrap(), 1));
        assert_eq!(
            source_key("fd00::abcd".parse().unwrap()),
            "fd00::".parse::<IpAddr>().unwrap()
        );
    }

    #[test]
    fn refusals_are_logged_at_a_bounded_rate() {
        let t0 = Instant::now();
        let mut l = LogLimit::new(t0);
        for _ in 0..LOG_BURST {
            assert_eq!(l.refusal(t0), Log::Line { dropped: 0 });
        }
        for _ in 0..1000 {
            assert_eq!(l.refusal(t0 + Duration::from_millis(500)), Log::Drop);
        }
        assert_eq!(l.refusal(t0 + LOG_WINDOW), Log::Line { dropped: 1000 });
        assert_eq!(l.refusal(t0 + LOG_WINDOW), Log::Line { dropped: 0 });
    }
}
