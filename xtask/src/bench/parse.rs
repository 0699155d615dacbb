//! Reading what the tools print: perftest's result rows and `rdma-client bench --json`
//! lines, into one shape: the contract's rows ([`LatRow`], [`BwRow`], which `rdma-client`
//! prints), perftest's figures filled into them.

use crate::scenario::transcript::Role;
use rdma_proto::events::bench::{self as rows, BwRow, LatRow};
use rdma_proto::events::client::Event;
use serde::{Deserialize, Serialize};

/// The numbers of the first data row after the header line containing `header`.
fn row_after(stdout: &str, header: &str, min_fields: usize) -> Option<Vec<f64>> {
    let mut lines = stdout.lines().skip_while(|l| !l.contains(header));
    lines.next()?;
    lines.find_map(|l| {
        let f: Vec<f64> = l.split_whitespace().map_while(|x| x.parse().ok()).collect();
        (f.len() >= min_fields).then_some(f)
    })
}

/// `ib_write_lat`'s row: `#bytes #iterations t_min t_max t_typical t_avg t_stdev p99 p99.9`.
pub fn perftest_lat(stdout: &str) -> Option<LatRow> {
    let f = row_after(stdout, "t_typical", 9)?;
    Some(LatRow {
        schema: rows::SCHEMA,
        bytes: f[0] as u64,
        iterations: f[1] as u64,
        t_min_us: f[2],
        t_max_us: f[3],
        t_typical_us: f[4],
        t_avg_us: f[5],
        t_stdev_us: f[6],
        p99_us: f[7],
        p999_us: f[8],
    })
}

/// `ib_write_bw`'s row: `#bytes #iterations BW_peak BW_average MsgRate`. perftest prints
/// MB/s with two decimals, so small messages read 0.00; their average is then taken from
/// MsgRate (six decimals), which is the same figure divided by the size.
pub fn perftest_bw(stdout: &str) -> Option<BwRow> {
    let f = row_after(stdout, "BW average", 5)?;
    let (bytes, rate) = (f[0], f[4]);
    let avg = if f[3] < 1.0 {
        rate * 1e6 * bytes / 1_048_576.0
    } else {
        f[3]
    };
    let peak = f[2].max(avg);
    Some(BwRow {
        schema: rows::SCHEMA,
        bytes: bytes as u64,
        iterations: f[1] as u64,
        bw_peak_mbs: peak,
        bw_avg_mbs: avg,
        bw_peak_gbps: rows::gbps(peak),
        bw_avg_gbps: rows::gbps(avg),
        msg_rate_mpps: rate,
    })
}

/// The events of `rdma-client bench … --json`, from the run's transcript: every line must be
/// one (a line that is not is an error naming it, never dropped).
fn ours(role: &Role) -> Result<&[Event<'static>], String> {
    crate::scenario::judge::only_events(role)?;
    Ok(&role.client)
}

/// `rdma-client bench --mode lat --json`: its first `bench_lat` row (one per size).
///
/// # Errors
/// A line that is not a client event.
pub fn ours_lat(role: &Role) -> Result<Option<LatRow>, String> {
    Ok(ours(role)?.iter().find_map(|e| match e {
        Event::BenchLat(r) => Some(*r),
        _ => None,
    }))
}

/// `rdma-client bench --mode bw --json`: its first `bench_bw` row (one per size; with `--qps` the
/// sum of the queue pairs).
///
/// # Errors
/// A line that is not a client event.
pub fn ours_bw(role: &Role) -> Result<Option<BwRow>, String> {
    Ok(ours(role)?.iter().find_map(|e| match e {
        Event::BenchBw(r) => Some(*r),
        _ => None,
    }))
}

/// The JSON line of the hidden `xtask bench-tcp --connect`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Tcp {
    pub bytes: u64,
    pub secs: f64,
}

impl Tcp {
    /// MB/s (2^20 bytes per second, perftest's unit).
    pub fn mbs(&self) -> f64 {
        self.bytes as f64 / self.secs.max(1e-9) / 1_048_576.0
    }
}

/// The last `Tcp` line of `stdout`.
pub fn tcp(stdout: &str) -> Option<Tcp> {
    stdout
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str::<Tcp>(l).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perftest_rows() {
        let lat = "\
---------------------------------------------------------------------------------------
 #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] 
 2       200          134.87         3205.07      187.11   	       302.14      	363.20 		2145.25 		3205.07
---------------------------------------------------------------------------------------
";
        let l = perftest_lat(lat).unwrap();
        assert_eq!((l.bytes, l.iterations), (2, 200));
        assert_eq!(l.t_typical_us, 187.11);
        assert_eq!(l.p999_us, 3205.07);
        let bw = " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n \
65536      200              16.28              12.58  \t\t   0.000201\n";
        let b = perftest_bw(bw).unwrap();
        assert_eq!(
            (b.bytes, b.bw_avg_mbs, b.msg_rate_mpps),
            (65536, 12.58, 0.000201)
        );
        let tiny = " #bytes #iterations BW peak[MB/sec] BW average[MB/sec] MsgRate[Mpps]\n 2 1000 0.01 0.00 0.004000\n";
        let t = perftest_bw(tiny).unwrap();
        assert!(
            (t.bw_avg_mbs - 0.004 * 2.0 / 1.048_576).abs() < 1e-9,
            "{t:?}"
        );
        assert!(perftest_lat("Couldn't connect to 10.0.0.1:18515").is_none());
        assert!(perftest_bw(lat).is_none());
    }

    /// Our client's step that printed `stdout`, read as the transcript reads it.
    fn client(stdout: &str) -> Role {
        let step = crate::plan::StepResult {
            stdout: stdout.into(),
            ..Default::default()
        };
        Role::of(&step, "B", crate::scenario::exit::Speaks::Client)
    }

    #[test]
    fn our_json_lines() {
        let out = r#"{"type":"bench_setup","ready_us":1234.0}
{"type":"bench_lat","schema":1,"bytes":64,"iterations":100,"t_min_us":1.0,"t_max_us":9.0,"t_typical_us":2.0,"t_avg_us":2.5,"t_stdev_us":0.5,"p99_us":8.0,"p999_us":9.0}
"#;
        let l = ours_lat(&client(out)).unwrap().unwrap();
        assert_eq!((l.bytes, l.t_typical_us), (64, 2.0));
        assert!(ours_bw(&client(out)).unwrap().is_none());
        let bw = r#"{"type":"bench_bw","schema":1,"bytes":4096,"iterations":10,"bw_peak_mbs":3.0,"bw_avg_mbs":2.0,"bw_peak_gbps":0.1,"bw_avg_gbps":0.1,"msg_rate_mpps":0.0005}"#;
        assert_eq!(ours_bw(&client(bw)).unwrap().unwrap().bw_avg_mbs, 2.0);
    }

    #[test]
    fn a_line_that_is_no_event_is_an_error_naming_it() {
        // A renamed field (what a reader with its own copy of the row would miss).
        let renamed = r#"{"type":"bench_bw","schema":1,"bytes":4096,"iterations":10,"bw_peak":3.0,"bw_avg_mbs":2.0,"bw_peak_gbps":0.1,"bw_avg_gbps":0.1,"msg_rate_mpps":0.0005}"#;
        let err = ours_bw(&client(renamed)).unwrap_err();
        assert!(err.contains(r#""bw_peak":3.0"#), "{err}");
        assert!(err.contains("bw_peak_mbs"), "{err}");
        let err = ours_lat(&client("not json at all\n")).unwrap_err();
        assert!(err.contains("not json at all"), "{err}");
    }

    #[test]
    fn tcp_line() {
        let t = tcp("noise\n{\"bytes\":104857600,\"secs\":2.5}\n").unwrap();
        assert!((t.mbs() - 40.0).abs() < 1e-9);
        assert!(tcp("nothing").is_none());
    }
}
