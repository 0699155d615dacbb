//! Rounds on the server's side ([`crate::rounds`]): what the accept grants, a `next` and its
//! `region`, and the round the checks are made against.

use super::{ServerEvent, ServerHandshake, ServerPolicy, ServerState};
use crate::bench::{BenchKind, PongBuffer};
use crate::error::ProtoError;
use crate::wire::{Hello, Next, Notify, Region, ServerMessage};

impl ServerHandshake {
    /// The bytes this round writes: the hello's, or the last `next`'s. 0 before a hello.
    pub fn length(&self) -> u64 {
        self.round
            .map(|n| n.length)
            .or(self.hello.as_ref().map(|h| h.length))
            .unwrap_or(0)
    }

    /// A `lat` bench session's buffer for this round's answers: the hello's, or the last
    /// `next`'s. `None` in any other session.
    pub fn pong(&self) -> Option<PongBuffer> {
        match self.hello.as_ref()?.bench.as_ref()?.kind {
            BenchKind::Lat(first) => Some(self.round.and_then(|n| n.pong).unwrap_or(first)),
            BenchKind::Bw => None,
        }
    }

    /// Which message announced this round: `hello` for the first, `next` after.
    pub(super) fn announced_by(&self) -> &'static str {
        if self.round.is_some() {
            "next"
        } else {
            "hello"
        }
    }

    /// This round's announced CRC32C: the hello's, or the last `next`'s.
    pub(super) fn announced_crc(&self) -> Option<u32> {
        match self.round {
            Some(n) => n.crc32c,
            None => self.hello.as_ref().and_then(|h| h.crc32c),
        }
    }

    /// How long the session is kept after each verdict, once the accept granted rounds.
    pub fn keep_alive(&self) -> Option<std::time::Duration> {
        self.granted
            .then(|| std::time::Duration::from_millis(self.policy.keep_alive_ms))
    }

    /// Grants no rounds to this session, though its hello asked (the server keeps as many idle
    /// sessions as it will already): its accept leaves `keep_alive_ms` out. Before the accept.
    pub fn decline_rounds(&mut self) {
        self.declined = true;
    }

    /// The `region` line that answers a `next`, once the caller registered this round's buffer.
    /// `AwaitRegion -> AwaitWrite`.
    ///
    /// Fails (and moves to `Failed`) if `buf_len` is smaller than the round's length.
    pub fn region(
        &mut self,
        addr: u64,
        rkey: u32,
        buf_len: u64,
    ) -> Result<ServerMessage, ProtoError> {
        if self.state != ServerState::AwaitRegion {
            return Err(self.misuse("region()"));
        }
        let Some(notify) = self.notify() else {
            return Err(self.misuse("region()"));
        };
        let length = self.length();
        if buf_len < length {
            self.state = ServerState::Failed;
            return Err(ProtoError::TooLong {
                length,
                max: buf_len,
            });
        }
        self.state = ServerState::AwaitWrite { notify };
        Ok(ServerMessage::Region(Region {
            addr,
            rkey,
            buf_len,
        }))
    }

    /// A `next` in state `Kept`: within the buffer (and the immediate); in a bench session,
    /// the hello's length again, and a fresh `pong` exactly where the session is `lat`.
    /// `Kept -> AwaitRegion`.
    pub(super) fn on_next(&mut self, n: Next) -> Result<ServerEvent, ProtoError> {
        let bench = self
            .hello
            .as_ref()
            .and_then(|h| h.bench.as_ref().map(|b| (h.length, b.kind)));
        if let Some((length, kind)) = bench {
            check_bench_next(&n, length, kind)?;
        } else if n.pong.is_some() {
            return Err(ProtoError::invalid(
                "next",
                "pong",
                "is for a lat bench session's rounds; this is a write session: leave it out",
            ));
        }
        if n.length > self.policy.buffer_size && bench.is_none() {
            return Err(ProtoError::TooLong {
                length: n.length,
                max: self.policy.buffer_size,
            });
        }
        if self.notify() == Some(Notify::Imm) && n.length > u64::from(u32::MAX) {
            return Err(ProtoError::invalid(
                "next",
                "length",
                format!(
                    "{} does not fit the 32-bit immediate of this session's notify imm",
                    n.length
                ),
            ));
        }
        self.round = Some(n);
        self.written = None;
        self.state = ServerState::AwaitRegion;
        Ok(ServerEvent::Next(n))
    }
}

/// A bench session's `next`: its sweep again (the hello's length), and a fresh buffer for the
/// answers exactly where it is `lat`.
fn check_bench_next(n: &Next, length: u64, kind: BenchKind) -> Result<(), ProtoError> {
    if n.length != length {
        return Err(ProtoError::invalid(
            "next",
            "length",
            format!(
                "{} is not the hello's {length}: a bench session's rounds repeat its sweep",
                n.length
            ),
        ));
    }
    match (kind, n.pong) {
        (BenchKind::Lat(_), None) => Err(ProtoError::invalid(
            "next",
            "pong",
            "is missing: each round of a lat session names a buffer registered anew for the server's answers",
        )),
        (BenchKind::Bw, Some(_)) => Err(ProtoError::invalid(
            "next",
            "pong",
            "is for lat sessions; a bw session's server does not answer: leave it out",
        )),
        _ => Ok(()),
    }
}

/// A hello's `rounds`: only to a server that offers them (to a bench session only where it
/// offers `bench-rounds` too), never with RDMA CM.
pub(super) fn check_rounds(policy: &ServerPolicy, h: &Hello) -> Result<(), ProtoError> {
    let why = if policy.keep_alive_ms == 0 {
        "this server keeps no session after its verdict (its banner has no `rounds` feature); leave `rounds` out"
    } else if h.bench.is_some() && policy.bench_max_len == 0 {
        "this server runs no bench sessions, so it keeps none (its banner has no `bench-rounds` feature); leave `rounds` out"
    } else if h.cm {
        "a session connected through RDMA CM has no rounds; leave `rounds` out"
    } else {
        return Ok(());
    };
    Err(ProtoError::invalid("hello", "rounds", why))
}
