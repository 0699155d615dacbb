//! The server's resource use, read from `/proc`: RSS, open descriptors, threads; and the wait
//! until it is quiescent (every session thread has ended).

use crate::exec;
use color_eyre::eyre::{Result, WrapErr as _, bail, eyre};
use std::time::{Duration, Instant};

/// Resource use of the server at one moment.
#[derive(Debug, Clone, Copy)]
pub(super) struct Sample {
    pub rss_kib: u64,
    pub fds: u64,
    pub threads: u64,
}

impl Sample {
    pub fn take(pid: u32) -> Result<Self> {
        let status = proc_status(pid)?;
        Ok(Self {
            rss_kib: status_field(&status, "VmRSS")
                .ok_or_else(|| eyre!("no VmRSS in /proc/{pid}/status"))?,
            fds: std::fs::read_dir(format!("/proc/{pid}/fd"))
                .wrap_err_with(|| format!("listing /proc/{pid}/fd"))?
                .count() as u64,
            threads: status_field(&status, "Threads")
                .ok_or_else(|| eyre!("no Threads in /proc/{pid}/status"))?,
        })
    }
}

fn proc_status(pid: u32) -> Result<String> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .wrap_err_with(|| format!("reading /proc/{pid}/status (is /proc mounted?)"))
}

pub(super) fn proc_threads(pid: u32) -> Result<u64> {
    status_field(&proc_status(pid)?, "Threads")
        .ok_or_else(|| eyre!("no Threads in /proc/{pid}/status"))
}

/// The number in a `/proc/PID/status` line such as `VmRSS:\t  1234 kB`.
fn status_field(status: &str, name: &str) -> Option<u64> {
    status.lines().find_map(|l| {
        let (key, rest) = l.split_once(':')?;
        if key != name {
            return None;
        }
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// Waits until the server's thread count is back to `baseline` (every session thread ended).
pub(super) fn quiesce(pid: u32, baseline: u64, within: Duration) -> Result<()> {
    let deadline = Instant::now() + within;
    loop {
        let n = proc_threads(pid)?;
        if n <= baseline {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!(
                "the server still runs {n} threads ({baseline} when idle) {within:?} after its clients finished: sessions do not end"
            );
        }
        exec::sleep(Duration::from_millis(20))?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_status_fields_are_read() {
        let s = "Name:\tx\nVmRSS:\t  1234 kB\nThreads:\t7\n";
        assert_eq!(status_field(s, "VmRSS"), Some(1234));
        assert_eq!(status_field(s, "Threads"), Some(7));
        assert_eq!(status_field(s, "VmHWM"), None);
        let me = Sample::take(std::process::id()).unwrap();
        assert!(me.rss_kib > 0 && me.fds >= 3 && me.threads >= 1, "{me:?}");
    }
}
