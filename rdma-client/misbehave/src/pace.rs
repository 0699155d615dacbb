//! How far apart the slow peers ping: just often enough for a server's `--timeout` of 2 s.

use std::time::Duration;

/// How long `slow-ping` and `cm-late-bench` wait before each ping.
pub const SLOW_PING: Duration = Duration::from_secs(1);
