//! Rounds (feature `rounds`, PROTOCOL.md §3.9): more than one verified write over one session's
//! queue pairs, so that a client that writes to the same server again and again (the mesh's
//! probes) pays for a TCP connection, a handshake and two queue pairs once, not every time.
//!
//! The client asks with `hello.rounds = true`, only to a server whose banner lists `"rounds"`,
//! never with `cm`, and for a bench session only where the banner lists `"bench-rounds"` too
//! ([`FEATURE_BENCH`]). A server that grants it says for how long
//! it keeps the session idle in `accept.keep_alive_ms`; one that does not (it keeps as many
//! idle sessions as it will already) leaves the field out, and the session ends at its verdict
//! as any other.
//!
//! After each `result` of a granted session the server waits up to `keep_alive_ms` for a
//! `next {length, crc32c}`. It answers with a `region {addr, rkey, buf_len}`: a buffer
//! registered anew, so the last round's rkey is dead before this one's is sent, and the
//! write, its notice and its verdict follow as in the first round. Either side ends the
//! session by closing the connection instead: a client that is done, a server whose keep-alive
//! ran out (without a line: nothing went wrong). Between rounds no rkey of the session is live:
//! the server deregisters each round's buffer before it reads a byte of it, and registers the
//! next one only when asked.
//!
//! **Bench sessions** ([`crate::bench`]) repeat their sweep each round: `next.length` is the
//! hello's, the counters start at 1 again, and a `lat` session's `next` names a fresh buffer of
//! the client's for the server's answers (`next.pong`), so that neither side's rkey outlives
//! its round.
//!
//! Pure; no I/O.

use std::ops::RangeInclusive;

/// The banner feature that offers rounds.
pub const FEATURE: &str = "rounds";

/// The banner feature that offers rounds to bench sessions as well (with [`FEATURE`]).
pub const FEATURE_BENCH: &str = "bench-rounds";

/// The keep-alives `accept.keep_alive_ms` may name: a millisecond to an hour.
pub const KEEP_ALIVE_MS: RangeInclusive<u64> = 1..=3_600_000;
