//! The load test's output: a table of the server's resources per phase, one line per failure,
//! and with `--json` a final `load_summary` object.

use super::policy::Observed;
use serde_json::json;
use std::time::Duration;

/// Everything the report shows.
#[derive(Debug)]
pub(super) struct Summary<'a> {
    pub observed: &'a Observed,
    pub baseline_threads: u64,
    pub sessions: u64,
    pub verified: u64,
    pub kills: u64,
    pub failures: &'a [String],
    /// The server's exit code after SIGTERM (`None`: it did not exit 0 in time).
    pub exit: Option<i32>,
    pub wall: Duration,
    pub rng_seed: u64,
}

/// Prints the table, the failures and (with `json`) the summary object.
pub(super) fn print(s: &Summary<'_>, json: bool) {
    print_table(s);
    for f in s.failures {
        println!("FAIL {f}");
    }
    if json {
        let (warm, after_seq, end) = (
            &s.observed.warm,
            &s.observed.after_sequential,
            &s.observed.end,
        );
        println!(
            "{}",
            json!({
                "type": "load_summary",
                "pass": s.failures.is_empty(),
                "sessions": s.sessions,
                "verified": s.verified,
                "kills": s.kills,
                "failures": s.failures,
                "rss_kib": {"warm": warm.rss_kib, "after_sequential": after_seq.rss_kib, "end": end.rss_kib},
                "fds": {"warm": warm.fds, "after_sequential": after_seq.fds, "end": end.fds},
                "threads": {"baseline": s.baseline_threads, "end": end.threads},
                "server_exit": s.exit,
                "wall_ms": s.wall.as_millis() as u64,
                "rng_seed": s.rng_seed,
            })
        );
    }
}

fn print_table(s: &Summary<'_>) {
    let (warm, after_seq, end) = (
        &s.observed.warm,
        &s.observed.after_sequential,
        &s.observed.end,
    );
    let exit = s.exit.map_or_else(|| "-".to_owned(), |c| c.to_string());
    println!(
        "{:<28} {:>12} {:>16} {:>12}",
        "", "warm-up", "after sequential", "end"
    );
    println!(
        "{:<28} {:>12} {:>16} {:>12}",
        "server RSS (KiB)", warm.rss_kib, after_seq.rss_kib, end.rss_kib
    );
    println!(
        "{:<28} {:>12} {:>16} {:>12}",
        "server open fds", warm.fds, after_seq.fds, end.fds
    );
    println!(
        "{:<28} {:>12} {:>16} {:>12}",
        "server threads", warm.threads, after_seq.threads, end.threads
    );
    println!("{:<28} {:>12}", "sessions (client processes)", s.sessions);
    println!("{:<28} {:>12}", "verified clients", s.verified);
    println!("{:<28} {:>12}", "killed on purpose", s.kills);
    println!("{:<28} {:>12}", "failures", s.failures.len());
    println!("{:<28} {:>12}", "server exit after SIGTERM", exit);
    println!("{:<28} {:>12.1}", "wall time (s)", s.wall.as_secs_f64());
}
