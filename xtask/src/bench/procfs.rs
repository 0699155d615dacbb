//! What a server process costs, read from `/proc` in its own guest: the CPU time (user +
//! system) and the memory (`VmRSS`, `VmHWM`) of the one process whose command line listens
//! on a port, once that port is listening. `xtask bench-flood --cpu-of PORT` prints it as
//! [`Usage`]; the stranger flood ([`super::flood`]) and the mesh ([`super::mesh`]) read it
//! before and after their load.

use color_eyre::eyre::{Result, WrapErr as _, bail, eyre};
use serde::{Deserialize, Serialize};

/// One reading of a process.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    pub pid: u32,
    /// utime + stime, milliseconds.
    pub cpu_ms: f64,
    /// `VmRSS`: resident memory now, KiB (absent in a reading that did not take it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rss_kb: Option<u64>,
    /// `VmHWM`: the most resident memory so far, KiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hwm_kb: Option<u64>,
}

/// The reading of the one process whose command line has `--listen ADDR:PORT`, once something
/// listens on `port` (it starts before it listens: the caller retries).
pub fn usage_of(port: u16) -> Result<Usage> {
    let pid = listener(port)?;
    let tcp: String = ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .collect();
    if !listens(&tcp, port) {
        bail!("process {pid} does not listen on port {port} yet");
    }
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .wrap_err_with(|| format!("reading /proc/{pid}/stat"))?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .wrap_err_with(|| format!("reading /proc/{pid}/status"))?;
    Ok(Usage {
        pid,
        cpu_ms: cpu_ms(&stat, clock_ticks())?,
        rss_kb: Some(status_kb(&status, "VmRSS")?),
        hwm_kb: Some(status_kb(&status, "VmHWM")?),
    })
}

/// The pid of the one process whose command line names `--listen …:PORT`.
fn listener(port: u16) -> Result<u32> {
    let needle = format!(":{port}");
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").wrap_err("reading /proc")? {
        let entry = entry?;
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        let listens = args
            .windows(2)
            .any(|w| w[0] == b"--listen" && String::from_utf8_lossy(w[1]).ends_with(&needle));
        if listens {
            found.push(pid);
        }
    }
    let [pid] = found[..] else {
        bail!("expected one process listening on port {port}, found {found:?}");
    };
    Ok(pid)
}

/// Whether `/proc/net/tcp{,6}` (`tcp`, both files' lines) has a socket in state LISTEN (`0A`)
/// on local port `port`.
pub fn listens(tcp: &str, port: u16) -> bool {
    let suffix = format!(":{port:04X}");
    tcp.lines().any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        matches!(f.get(1), Some(local) if local.ends_with(&suffix)) && f.get(3) == Some(&"0A")
    })
}

/// Clock ticks a second (`sysconf(_SC_CLK_TCK)`, 100 where unknown).
fn clock_ticks() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 { t as f64 } else { 100.0 }
}

/// utime + stime of a `/proc/PID/stat` line, in milliseconds (fields 14 and 15, counted after
/// the command name, which may hold spaces and parentheses).
pub fn cpu_ms(stat: &str, ticks_per_s: f64) -> Result<f64> {
    let after = stat
        .rfind(')')
        .map(|i| &stat[i + 1..])
        .ok_or_else(|| eyre!("a /proc stat line without its command: {stat:?}"))?;
    let fields: Vec<&str> = after.split_whitespace().collect();
    // After the command: state is field 3, so utime (14) and stime (15) are at 11 and 12.
    let tick = |i: usize| -> Result<f64> {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .ok_or_else(|| eyre!("no CPU field {} in {stat:?}", i + 3))
    };
    Ok((tick(11)? + tick(12)?) * 1000.0 / ticks_per_s)
}

/// A `kB` line of `/proc/PID/status` (`VmRSS:\t  1234 kB`), in KiB.
pub fn status_kb(status: &str, field: &str) -> Result<u64> {
    status
        .lines()
        .find_map(|l| {
            let (name, rest) = l.split_once(':')?;
            if name != field {
                return None;
            }
            let mut words = rest.split_whitespace();
            let n = words.next()?.parse::<u64>().ok()?;
            (words.next() == Some("kB")).then_some(n)
        })
        .ok_or_else(|| eyre!("no `{field}: N kB` line in /proc's status"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_comes_from_utime_and_stime() {
        let stat =
            "1234 (rdma (x) server) S 1 1234 1234 0 -1 4194560 500 0 0 0 250 50 0 0 20 0 3 0";
        assert_eq!(cpu_ms(stat, 100.0).unwrap(), 3000.0);
        assert!(cpu_ms("garbage", 100.0).is_err());
        assert!(cpu_ms("1 (x) S 1", 100.0).is_err());
        assert!(cpu_ms("1 (x) S 1 1 1 0 -1 0 0 0 0 0 x 50", 100.0).is_err());
    }

    #[test]
    fn memory_comes_from_the_status_lines_in_kib() {
        let status = "Name:\trdma-server\nVmPeak:\t  99999 kB\nVmHWM:\t    9876 kB\nVmRSS:\t    8765 kB\nThreads:\t3\n";
        assert_eq!(status_kb(status, "VmRSS").unwrap(), 8765);
        assert_eq!(status_kb(status, "VmHWM").unwrap(), 9876);
        // Absent (a kernel thread has none), not a number, another unit: an error, no zero.
        assert!(status_kb("Name:\tkthreadd\n", "VmRSS").is_err());
        assert!(status_kb("VmRSS:\t lots kB\n", "VmRSS").is_err());
        assert!(status_kb("VmRSS:\t 12 MB\n", "VmRSS").is_err());
        assert!(status_kb("VmRSSx:\t 12 kB\n", "VmRSS").is_err());
    }

    #[test]
    fn a_port_listens_only_in_state_0a() {
        let tcp = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   \
             0: 00000000:1D33 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1\n   \
             1: 0100000A:1D2F 0200000A:9C40 01 00000000:00000000 00:00000000 00000000     0        0 2 1\n";
        assert!(listens(tcp, 7475), "0x1D33 listening");
        assert!(!listens(tcp, 7471), "0x1D2F only connected");
        assert!(!listens(tcp, 1), "no such port");
        assert!(!listens("", 7475));
        let tcp6 = "   0: 00000000000000000000000000000000:1D33 00000000000000000000000000000000:0000 0A 0 0 0\n";
        assert!(listens(tcp6, 7475));
    }

    #[test]
    fn a_reading_without_memory_still_parses() {
        let u: Usage = serde_json::from_str(r#"{"pid":7,"cpu_ms":100.0}"#).unwrap();
        assert_eq!((u.rss_kb, u.hwm_kb), (None, None));
        let back = serde_json::to_string(&Usage {
            rss_kb: Some(1),
            hwm_kb: Some(2),
            ..u
        })
        .unwrap();
        assert_eq!(back, r#"{"pid":7,"cpu_ms":100.0,"rss_kb":1,"hwm_kb":2}"#);
    }
}
