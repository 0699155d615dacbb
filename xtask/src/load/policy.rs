//! What counts as a leak or a wrong stop: pure functions of what was observed.

use super::sample::Sample;
use rdma_proto::events::server::{Event, StopReason};

/// What the phases observed of the server.
#[derive(Debug, Clone)]
pub(super) struct Observed {
    /// After the warm-up sessions (the reference for growth).
    pub warm: Sample,
    pub after_sequential: Sample,
    pub end: Sample,
    /// Session `error` events counted at the end of each phase (they only grow).
    pub errors_before_concurrent: u64,
    pub errors_before_kills: u64,
    /// Before the busy phase (after the kills), whose idle connections may each cost one.
    pub errors_before_busy: u64,
    /// After the busy phase, before the soak's strangers (each of whose junk lines costs one).
    pub errors_total: u64,
    /// `verified` events with `verified: false`.
    pub unverified: u64,
    /// A few of the server's `error` events, for the report.
    pub error_examples: String,
}

/// How much growth is tolerated between the warm-up and the end.
#[derive(Debug, Clone, Copy)]
pub(super) struct Limits {
    pub rss_slack_mib: u64,
    pub fd_slack: u64,
}

/// Leaks and unexpected session errors. `sessions` is how many clients ran after the warm-up
/// sample, `kills` how many killed themselves on purpose and `held` how many idle connections
/// held the slots in the busy phase (each may cost one server error).
pub(super) fn leak_failures(
    o: &Observed,
    limits: Limits,
    sessions: u64,
    kills: u64,
    held: u64,
) -> Vec<String> {
    let mut failures = Vec::new();
    let rss_growth = o.end.rss_kib.saturating_sub(o.warm.rss_kib);
    if rss_growth > limits.rss_slack_mib * 1024 {
        failures.push(format!(
            "server RSS grew by {rss_growth} KiB (from {} to {} KiB) over {sessions} sessions: more than --rss-slack-mib {}",
            o.warm.rss_kib, o.end.rss_kib, limits.rss_slack_mib
        ));
    }
    if o.end.fds > o.warm.fds + limits.fd_slack {
        failures.push(format!(
            "server open fds grew from {} to {} (allowed slack {}): a descriptor leaks per session",
            o.warm.fds, o.end.fds, limits.fd_slack
        ));
    }
    if o.errors_before_concurrent > 0 || o.errors_before_kills > o.errors_before_concurrent {
        failures.push(format!(
            "the server logged {} session error(s) while only well-behaved clients ran: {}",
            o.errors_before_kills, o.error_examples
        ));
    }
    let kill_errors = o.errors_before_busy.saturating_sub(o.errors_before_kills);
    if kill_errors > kills {
        failures.push(format!(
            "the server logged {kill_errors} session errors for {kills} killed clients"
        ));
    }
    // The busy phase's idle connections close without a hello: at most one error each.
    let busy_errors = o.errors_total.saturating_sub(o.errors_before_busy);
    if busy_errors > held {
        failures.push(format!(
            "the server logged {busy_errors} session errors for the busy phase's {held} idle connections"
        ));
    }
    if o.unverified > 0 {
        failures.push(format!(
            "the server reported {} session(s) with verified=false",
            o.unverified
        ));
    }
    failures
}

/// The server's `stopped` event after SIGTERM must give the reason and count every client.
///
/// `strangers` connections were established by bursts of strangers besides the `clients`: the
/// server counts each it accepted, and may never see those the kernel dropped from a full
/// accept queue.
pub(super) fn stop_failures(
    stopped: Option<&Event<'_>>,
    clients: u64,
    strangers: u64,
    verified: u64,
) -> Vec<String> {
    let Some(&Event::Stopped {
        reason,
        sessions,
        verified: counted,
        ..
    }) = stopped
    else {
        return vec!["the server printed no `stopped` event".to_owned()];
    };
    let mut failures = Vec::new();
    if reason != StopReason::Signal {
        failures.push(format!("`stopped` says reason {reason}, not \"signal\""));
    }
    if strangers == 0 && sessions != clients {
        failures.push(format!(
            "`stopped` counts {sessions} connections, but {clients} clients connected"
        ));
    }
    if strangers > 0 && !(clients..=clients + strangers).contains(&sessions) {
        failures.push(format!(
            "`stopped` counts {sessions} connections, but {clients} clients and at most \
             {strangers} strangers connected"
        ));
    }
    if counted < verified {
        failures.push(format!(
            "`stopped` counts {counted} verified writes, but {verified} clients were verified"
        ));
    }
    failures
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(rss_kib: u64, fds: u64) -> Sample {
        Sample {
            rss_kib,
            fds,
            threads: 3,
        }
    }

    fn clean() -> Observed {
        Observed {
            warm: sample(10_000, 8),
            after_sequential: sample(10_100, 8),
            end: sample(10_200, 8),
            errors_before_concurrent: 0,
            errors_before_kills: 0,
            errors_before_busy: 6,
            errors_total: 6,
            unverified: 0,
            error_examples: String::new(),
        }
    }

    const LIMITS: Limits = Limits {
        rss_slack_mib: 8,
        fd_slack: 0,
    };

    #[test]
    fn a_clean_run_passes_and_each_leak_fails_it() {
        assert_eq!(
            leak_failures(&clean(), LIMITS, 220, 6, 16),
            Vec::<String>::new()
        );
        // RSS: 8 MiB of growth is allowed, one KiB more is not.
        let mut o = clean();
        o.end.rss_kib = o.warm.rss_kib + 8 * 1024;
        assert!(leak_failures(&o, LIMITS, 220, 6, 16).is_empty());
        o.end.rss_kib += 1;
        let f = leak_failures(&o, LIMITS, 220, 6, 16);
        assert!(f.len() == 1 && f[0].contains("RSS grew"), "{f:?}");
        // One descriptor more than the slack.
        let mut o = clean();
        o.end.fds = 9;
        let f = leak_failures(&o, LIMITS, 220, 6, 16);
        assert!(f.len() == 1 && f[0].contains("fds grew"), "{f:?}");
        assert!(
            leak_failures(
                &o,
                Limits {
                    fd_slack: 1,
                    ..LIMITS
                },
                220,
                6,
                16
            )
            .is_empty()
        );
        // RSS that shrank is no growth.
        let mut o = clean();
        o.end.rss_kib = 1;
        assert!(leak_failures(&o, LIMITS, 220, 6, 16).is_empty());
    }

    #[test]
    fn session_errors_are_allowed_only_for_killed_clients() {
        let mut o = clean();
        o.errors_before_concurrent = 1;
        o.errors_before_kills = 1;
        o.errors_before_busy = 7;
        o.errors_total = 7;
        let f = leak_failures(&o, LIMITS, 220, 6, 16);
        assert!(f.len() == 1 && f[0].contains("well-behaved"), "{f:?}");
        let mut o = clean();
        o.errors_before_kills = 2;
        o.errors_before_busy = 8;
        o.errors_total = 8;
        assert!(leak_failures(&o, LIMITS, 220, 6, 16)[0].contains("well-behaved"));
        let mut o = clean();
        o.errors_before_busy = 7;
        o.errors_total = 7;
        let f = leak_failures(&o, LIMITS, 220, 6, 16);
        assert!(
            f.len() == 1 && f[0].contains("7 session errors for 6 killed"),
            "{f:?}"
        );
        // The busy phase's idle connections: one error each at most.
        let mut o = clean();
        o.errors_total = 6 + 16;
        assert!(leak_failures(&o, LIMITS, 220, 6, 16).is_empty());
        o.errors_total += 1;
        let f = leak_failures(&o, LIMITS, 220, 6, 16);
        assert!(
            f.len() == 1 && f[0].contains("17 session errors for the busy phase's 16"),
            "{f:?}"
        );
        let mut o = clean();
        o.unverified = 1;
        assert!(leak_failures(&o, LIMITS, 220, 6, 16)[0].contains("verified=false"));
    }

    #[test]
    fn the_stopped_event_must_count_every_client() {
        let stopped = |reason| Event::Stopped {
            reason,
            sessions: 5,
            verified: 4,
            cpu_ms: Some(12),
        };
        let ev = stopped(StopReason::Signal);
        assert!(stop_failures(Some(&ev), 5, 0, 4).is_empty());
        assert!(stop_failures(Some(&ev), 5, 0, 3).is_empty());
        assert_eq!(stop_failures(Some(&ev), 6, 0, 4).len(), 1);
        assert_eq!(stop_failures(Some(&ev), 5, 0, 5).len(), 1);
        // Strangers: the server counts those it accepted, no more than connected.
        assert!(stop_failures(Some(&ev), 3, 2, 3).is_empty());
        assert!(stop_failures(Some(&ev), 5, 9, 3).is_empty());
        assert_eq!(stop_failures(Some(&ev), 2, 2, 2).len(), 1);
        assert_eq!(stop_failures(Some(&ev), 6, 9, 3).len(), 1);
        let other = stopped(StopReason::Verified);
        assert_eq!(stop_failures(Some(&other), 5, 0, 4).len(), 1);
        assert_eq!(stop_failures(None, 5, 0, 4).len(), 1);
    }
}
