//! Rounds on the server's side ([`crate::rounds`]): what the accept grants, a `next` and its
//! `region`, and the round the checks are made against.

use super::{ServerEvent, ServerHandshake, ServerPolicy, ServerState};
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

    /// A `next` in state `Kept`: within the buffer (and the immediate). `Kept -> AwaitRegion`.
    pub(super) fn on_next(&mut self, n: Next) -> Result<ServerEvent, ProtoError> {
        if n.length > self.policy.buffer_size {
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

/// A hello's `rounds`: only to a server that offers them, and only for a write session.
pub(super) fn check_rounds(policy: &ServerPolicy, h: &Hello) -> Result<(), ProtoError> {
    let why = if policy.keep_alive_ms == 0 {
        "this server keeps no session after its verdict (its banner has no `rounds` feature); leave `rounds` out"
    } else if h.bench.is_some() {
        "a bench session has no rounds; leave `rounds` out"
    } else if h.cm {
        "a session connected through RDMA CM has no rounds; leave `rounds` out"
    } else {
        return Ok(());
    };
    Err(ProtoError::invalid("hello", "rounds", why))
}
