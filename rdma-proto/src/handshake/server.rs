//! The server's side of the handshake: [`ServerHandshake`] and what it allows ([`ServerPolicy`]).

use std::fmt;

use subtle::{Choice, ConstantTimeEq};

use super::binding::GidBinding;
use crate::SUPPORTED_VERSIONS;
use crate::bench::{self, BenchKind, PongBuffer};
use crate::error::{ErrorCode, ProtoError};
use crate::framing::FrameError;
use crate::wire::{
    Accept, Auth, Banner, ClientMessage, ErrorMsg, Hello, Next, Notify, Outcome, QpEndpoint,
    Region, ServerMessage, Written,
};
use crate::{crc32c, preview_text};

/// What the server allows and announces.
#[derive(Clone, PartialEq, Eq)]
pub struct ServerPolicy {
    /// Largest `hello.length` accepted: the buffer each session registers (`--buffer-size`;
    /// the accept offers it as `buf_len`).
    pub buffer_size: u64,
    /// Token the client must present; `None` = no auth.
    pub token: Option<String>,
    /// `banner.program_version`.
    pub program_version: String,
    /// `banner.features`.
    pub features: Vec<String>,
    /// Largest buffer a bench session may ask for (`hello.bench`; see [`crate::bench`]);
    /// 0 = no bench sessions. When not 0 the banner lists the `bench` feature.
    pub bench_max_len: u64,
    /// How long a session that asked for [`rounds`](crate::rounds) is kept after each verdict,
    /// in milliseconds (in [`crate::rounds::KEEP_ALIVE_MS`]); 0 = no rounds. When not 0 the
    /// banner lists the `rounds` feature, and with bench sessions `bench-rounds` too.
    pub keep_alive_ms: u64,
}

impl fmt::Debug for ServerPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerPolicy")
            .field("buffer_size", &self.buffer_size)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("program_version", &self.program_version)
            .field("features", &self.features)
            .field("bench_max_len", &self.bench_max_len)
            .field("keep_alive_ms", &self.keep_alive_ms)
            .finish()
    }
}

impl ServerPolicy {
    /// The features this crate's server side supports.
    pub fn default_features() -> Vec<String> {
        vec!["notify-imm".to_owned(), "notify-tcp".to_owned()]
    }
}

/// What a client line meant to the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerEvent {
    /// A valid `hello` passed the checks (version, token, length): pick the port that serves
    /// it, [`ServerHandshake::bind`] it, set up the QP and call [`ServerHandshake::accept`].
    /// Its `token` is always `None` (removed once checked, so it cannot leak into logs).
    Hello(Hello),
    /// The client says the write is done (notify=tcp): check the buffer, call `result`.
    Written(Written),
    /// The client asks for one more round (rounds granted, after a verdict): register a fresh
    /// buffer of at least its length and call [`ServerHandshake::region`].
    Next(Next),
    /// The client sent an `error`; the handshake is `Failed`, close the connection.
    PeerError(ErrorMsg),
}

/// Server side states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerState {
    /// Nothing sent yet.
    Start,
    /// Banner sent, waiting for `hello`.
    AwaitHello,
    /// `hello` admitted (version, token, length); the caller picks the port that serves it
    /// and calls [`ServerHandshake::bind`] with that port's binding.
    AwaitBinding,
    /// `hello` accepted and bound, the caller has to set up RDMA and call `accept`.
    AwaitAccept,
    /// `accept` sent; waiting for the write (immediate, or `written` in tcp mode).
    AwaitWrite {
        /// How the client will signal completion.
        notify: Notify,
    },
    /// `result` sent, rounds granted: waiting up to the keep-alive for `next` (or the close
    /// that ends the session).
    Kept,
    /// `next` received; the caller registers a fresh buffer and calls `region`.
    AwaitRegion,
    /// `result` sent.
    Done,
    /// Something went wrong; nothing more is accepted.
    Failed,
}

impl fmt::Display for ServerState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServerState::Start => f.write_str("before the banner"),
            ServerState::AwaitHello => f.write_str("awaiting hello"),
            ServerState::AwaitBinding => f.write_str("binding the hello to its connection"),
            ServerState::AwaitAccept => f.write_str("preparing accept"),
            ServerState::AwaitWrite { notify } => write!(f, "awaiting the write (notify={notify})"),
            ServerState::Kept => f.write_str("keeping the session for its next round"),
            ServerState::AwaitRegion => f.write_str("preparing the next round's buffer"),
            ServerState::Done => f.write_str("done"),
            ServerState::Failed => f.write_str("failed"),
        }
    }
}

/// The server's side of one connection.
#[derive(Debug)]
pub struct ServerHandshake {
    policy: ServerPolicy,
    binding: GidBinding,
    state: ServerState,
    hello: Option<Hello>,
    written: Option<Written>,
    /// This round's `next`, after the first round.
    round: Option<Next>,
    /// Whether the caller declined rounds (before the accept).
    declined: bool,
    /// Whether the accept granted rounds.
    granted: bool,
}

impl ServerHandshake {
    /// A fresh handshake in state `Start`.
    pub fn new(policy: ServerPolicy) -> Self {
        ServerHandshake {
            policy,
            binding: GidBinding::Unbound,
            state: ServerState::Start,
            hello: None,
            written: None,
            round: None,
            declined: false,
            granted: false,
        }
    }

    /// Binds the admitted hello to its connection, by the rules of the port that serves it
    /// (see [`GidBinding`]). `AwaitBinding -> AwaitAccept`.
    ///
    /// The hello's GID must satisfy `binding` (a `cm` hello's GID is not used: its RDMA CM
    /// path is checked against the same binding, [`GidBinding::check_path`], once the request
    /// arrives); on a port with nothing to bind ([`GidBinding::Unbound`], InfiniBand) a bench
    /// session needs the token, so a server without one refuses it. This is a separate step so
    /// that the server does no device work (choosing the port) before the hello is admitted.
    ///
    /// # Errors
    /// [`ProtoError::InvalidField`] naming `gid` or `bench`; the handshake is then `Failed`.
    pub fn bind(&mut self, binding: GidBinding) -> Result<(), ProtoError> {
        if self.state != ServerState::AwaitBinding {
            return Err(self.misuse("bind()"));
        }
        let Some(hello) = self.hello.as_ref() else {
            return Err(self.misuse("bind()"));
        };
        let checked = if !hello.cm {
            binding.check(hello.endpoint.gid)
        } else {
            Ok(())
        }
        .and_then(|()| {
            if binding == GidBinding::Unbound
                && hello.bench.is_some()
                && self.policy.token.is_none()
            {
                Err(ProtoError::invalid(
                    "hello",
                    "bench",
                    "this server's port for your address is InfiniBand, where a hello's LID \
                     cannot be bound to its TCP address, so it runs bench sessions only for \
                     clients with a token, and it has none (see SECURITY.md); run a write \
                     session, or ask for a server started with --token-file",
                ))
            } else {
                Ok(())
            }
        });
        if let Err(e) = checked {
            self.state = ServerState::Failed;
            return Err(e);
        }
        self.binding = binding;
        self.state = ServerState::AwaitAccept;
        Ok(())
    }

    /// The binding of this connection, once [`bind`](Self::bind) took it (before: nothing is
    /// bound, [`GidBinding::Unbound`]).
    pub fn binding(&self) -> &GidBinding {
        &self.binding
    }

    /// The current state.
    pub fn state(&self) -> ServerState {
        self.state
    }

    /// The accepted `hello`, once there is one.
    pub fn hello(&self) -> Option<&Hello> {
        self.hello.as_ref()
    }

    /// Whether the accepted hello asked for the stamped exchange (a `lat` bench session): its
    /// sweep ends with it, and its `result` may carry the stamps.
    pub fn stamped(&self) -> bool {
        self.hello
            .as_ref()
            .and_then(|h| h.bench.as_ref())
            .is_some_and(|b| b.stamped)
    }

    /// The client's notify mode, once `hello` was accepted.
    pub fn notify(&self) -> Option<Notify> {
        self.hello.as_ref().map(|h| h.notify)
    }

    /// The `written` message received (notify=tcp), if any.
    pub fn written(&self) -> Option<&Written> {
        self.written.as_ref()
    }

    /// The banner to send first. `Start -> AwaitHello`.
    pub fn banner(&mut self) -> Result<ServerMessage, ProtoError> {
        if self.state != ServerState::Start {
            return Err(self.misuse("banner()"));
        }
        self.state = ServerState::AwaitHello;
        let mut features = self.policy.features.clone();
        if self.policy.bench_max_len > 0 {
            for feature in [bench::FEATURE, bench::FEATURE_STAMPED] {
                if !features.iter().any(|f| f == feature) {
                    features.push(feature.to_owned());
                }
            }
        }
        if self.policy.keep_alive_ms > 0 && !features.iter().any(|f| f == crate::rounds::FEATURE) {
            features.push(crate::rounds::FEATURE.to_owned());
        }
        if self.policy.keep_alive_ms > 0
            && self.policy.bench_max_len > 0
            && !features.iter().any(|f| f == crate::rounds::FEATURE_BENCH)
        {
            features.push(crate::rounds::FEATURE_BENCH.to_owned());
        }
        Ok(ServerMessage::Banner(Banner {
            program: "rdma-server".to_owned(),
            program_version: self.policy.program_version.clone(),
            versions: SUPPORTED_VERSIONS.to_vec(),
            features,
            auth: if self.policy.token.is_some() {
                Auth::Token
            } else {
                Auth::None
            },
        }))
    }

    /// Parses a line from the client and feeds it to [`ServerHandshake::on_message`].
    /// A line that does not parse fails the handshake.
    pub fn on_line(&mut self, line: &[u8]) -> Result<ServerEvent, ProtoError> {
        match ClientMessage::parse(line) {
            Ok(msg) => self.on_message(msg),
            Err(e) => {
                self.state = ServerState::Failed;
                Err(e)
            }
        }
    }

    /// Feeds one client message. Errors move the handshake to `Failed`.
    pub fn on_message(&mut self, msg: ClientMessage) -> Result<ServerEvent, ProtoError> {
        let r = self.step(msg);
        if r.is_err() {
            self.state = ServerState::Failed;
        }
        r
    }

    fn step(&mut self, msg: ClientMessage) -> Result<ServerEvent, ProtoError> {
        match (self.state, msg) {
            (_, ClientMessage::Error(e)) => {
                self.state = ServerState::Failed;
                Ok(ServerEvent::PeerError(e))
            }
            (ServerState::AwaitHello, ClientMessage::Hello(mut h)) => {
                self.check_token(h.token.as_deref())?;
                // The secret has done its job; keep it out of events, logs and `hello()`.
                h.token = None;
                if h.cm && !self.policy.features.iter().any(|f| f == crate::cm::FEATURE) {
                    return Err(ProtoError::invalid(
                        "hello",
                        "cm",
                        "this server does not connect queue pairs through RDMA CM (its banner has no `cm` feature); leave `cm` out",
                    ));
                }
                if h.rounds {
                    check_rounds(&self.policy, &h)?;
                }
                let max = if h.bench.is_some() {
                    if self.policy.bench_max_len == 0 {
                        return Err(ProtoError::invalid(
                            "hello",
                            "bench",
                            "this server does not run bench sessions (its banner has no `bench` feature)",
                        ));
                    }
                    self.policy.bench_max_len
                } else {
                    self.policy.buffer_size
                };
                if h.length > max {
                    return Err(ProtoError::TooLong {
                        length: h.length,
                        max,
                    });
                }
                // Its endpoint is checked by `bind`, against the port that serves it.
                self.state = ServerState::AwaitBinding;
                self.hello = Some(h.clone());
                Ok(ServerEvent::Hello(h))
            }
            (
                ServerState::AwaitWrite {
                    notify: Notify::Tcp,
                },
                ClientMessage::Written(w),
            ) if self.written.is_none() => {
                let announced = self.length();
                if w.length != announced {
                    return Err(ProtoError::invalid(
                        "written",
                        "length",
                        format!(
                            "{} differs from the {announced} bytes announced in {}",
                            w.length,
                            self.announced_by()
                        ),
                    ));
                }
                self.written = Some(w);
                Ok(ServerEvent::Written(w))
            }
            (ServerState::Kept, ClientMessage::Next(n)) => self.on_next(n),
            (state, msg) => Err(ProtoError::Unexpected {
                got: msg.kind().to_owned(),
                context: unexpected_context(state, &msg),
            }),
        }
    }

    fn check_token(&self, got: Option<&str>) -> Result<(), ProtoError> {
        let Some(want) = self.policy.token.as_deref() else {
            return Ok(());
        };
        let Some(got) = got else {
            return Err(ProtoError::Unauthorized {
                reason: "this server requires a token and the hello has none; pass the server's token (field `token`)"
                    .to_owned(),
            });
        };
        if bool::from(ct_str_eq(want.as_bytes(), got.as_bytes())) {
            Ok(())
        } else {
            Err(ProtoError::Unauthorized {
                reason: "the token is wrong; use the token the server was started with".to_owned(),
            })
        }
    }

    /// The `accept` line, after the caller set up its QP and buffer. `AwaitAccept -> AwaitWrite`.
    ///
    /// Fails (and moves to `Failed`) if the endpoint is out of range or `buf_len` is smaller than
    /// the announced length.
    pub fn accept(
        &mut self,
        local: QpEndpoint,
        addr: u64,
        rkey: u32,
        buf_len: u64,
    ) -> Result<ServerMessage, ProtoError> {
        self.accept_cm(local, addr, rkey, buf_len, None)
    }

    /// [`accept`](Self::accept), with the RDMA CM listener the client connects to when its
    /// hello asked for RDMA CM (`cm` must be `Some` exactly then).
    pub fn accept_cm(
        &mut self,
        local: QpEndpoint,
        addr: u64,
        rkey: u32,
        buf_len: u64,
        cm: Option<crate::cm::CmOffer>,
    ) -> Result<ServerMessage, ProtoError> {
        if self.state != ServerState::AwaitAccept {
            return Err(self.misuse("accept()"));
        }
        let Some(hello) = self.hello.as_ref() else {
            return Err(self.misuse("accept()"));
        };
        if hello.cm != cm.is_some() {
            return Err(self.misuse("accept() with an RDMA CM offer that the hello did not match"));
        }
        let notify = hello.notify;
        let length = hello.length;
        let checked = match local.validate("accept") {
            Err(e) => Err(e),
            Ok(()) if buf_len < length => Err(ProtoError::TooLong {
                length,
                max: buf_len,
            }),
            Ok(()) => Ok(()),
        };
        if let Err(e) = checked {
            self.state = ServerState::Failed;
            return Err(e);
        }
        self.granted = hello.rounds && !self.declined && self.policy.keep_alive_ms > 0;
        self.state = ServerState::AwaitWrite { notify };
        Ok(ServerMessage::Accept(Accept {
            endpoint: local,
            addr,
            rkey,
            buf_len,
            cm,
            keep_alive_ms: self.granted.then_some(self.policy.keep_alive_ms),
        }))
    }

    /// The `result` line. `AwaitWrite -> Done`, or `-> Kept` where the accept granted rounds.
    pub fn result(&mut self, outcome: Outcome) -> Result<ServerMessage, ProtoError> {
        if !matches!(self.state, ServerState::AwaitWrite { .. }) {
            return Err(self.misuse("result()"));
        }
        if outcome.stamps.is_some() && !self.stamped() {
            return Err(self.misuse("result() with stamps for a hello that asked none"));
        }
        self.state = if self.granted {
            ServerState::Kept
        } else {
            ServerState::Done
        };
        Ok(ServerMessage::Result(outcome))
    }

    /// Reading the client's next line failed (deadline, line too long, connection closed). Moves
    /// to `Failed` and returns the `error` line to send, or `None` when the client is gone and
    /// nobody is left to tell ([`FrameError::peer_gone`]). The code is [`FrameError::code`].
    pub fn on_read_error(&mut self, err: &FrameError) -> Option<ServerMessage> {
        self.state = ServerState::Failed;
        (!err.peer_gone()).then(|| ServerMessage::Error(err.to_error_msg()))
    }

    /// Moves to `Failed` and returns the `error` line to send for `err`.
    pub fn fail(&mut self, err: &ProtoError) -> ServerMessage {
        self.state = ServerState::Failed;
        ServerMessage::Error(err.to_error_msg())
    }

    fn misuse(&mut self, call: &str) -> ProtoError {
        let state = self.state;
        self.state = ServerState::Failed;
        ProtoError::new(
            ErrorCode::Internal,
            format!("server bug: {call} called in state `{state}`"),
        )
    }

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
    fn announced_by(&self) -> &'static str {
        if self.round.is_some() {
            "next"
        } else {
            "hello"
        }
    }

    /// This round's announced CRC32C: the hello's, or the last `next`'s.
    fn announced_crc(&self) -> Option<u32> {
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
    fn on_next(&mut self, n: Next) -> Result<ServerEvent, ProtoError> {
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

    /// Checks the bytes the server sees against what the client announced. Pure.
    ///
    /// `payload` is what the server reads from its buffer (normally the first `hello.length`
    /// bytes, or as many as the immediate says). `imm` is the immediate data of the completion
    /// (notify=imm), `written` the client's `written` message (notify=tcp; when `None`, the one
    /// received through `on_message` is used). Checks, all reported in `reason`:
    /// length == hello.length; imm == length (imm mode); written.length == length and
    /// written.crc32c == crc32c(payload) (tcp mode); hello.crc32c == crc32c(payload) if given.
    pub fn verify(&self, payload: &[u8], imm: Option<u32>, written: Option<&Written>) -> Outcome {
        let crc = crc32c(payload);
        let (text, truncated) = preview_text(payload);
        let length = payload.len() as u64;
        let mut problems = Vec::new();
        match &self.hello {
            None => problems
                .push("no hello was accepted, so there is nothing to check against".to_owned()),
            Some(h) => {
                let (want, by) = (self.length(), self.announced_by());
                if length != want {
                    problems.push(format!("saw {length} bytes but {by} announced {want}"));
                }
                match h.notify {
                    Notify::Imm => match imm {
                        None => {
                            problems.push("notify=imm but no immediate data arrived".to_owned())
                        }
                        Some(i) if u64::from(i) != want => {
                            problems.push(format!(
                                "immediate data {i} differs from the announced length {want}"
                            ));
                        }
                        Some(_) => {}
                    },
                    Notify::Tcp => match written.or(self.written.as_ref()) {
                        None => {
                            problems.push("notify=tcp but no `written` message arrived".to_owned())
                        }
                        Some(w) => {
                            if w.length != want {
                                problems.push(format!(
                                    "`written` says {} bytes but {by} announced {want}",
                                    w.length
                                ));
                            }
                            if w.crc32c != crc {
                                problems.push(format!(
                                    "crc32c of the buffer is {crc:#010x} but `written` says {:#010x}",
                                    w.crc32c
                                ));
                            }
                        }
                    },
                }
                if let Some(want) = self.announced_crc() {
                    if want != crc {
                        problems.push(format!(
                            "crc32c of the buffer is {crc:#010x} but {by} announced {want:#010x}"
                        ));
                    }
                }
            }
        }
        Outcome {
            verified: problems.is_empty(),
            length,
            crc32c: crc,
            text,
            truncated,
            reason: (!problems.is_empty()).then(|| problems.join("; ")),
            stamps: None,
        }
    }
}

/// Constant-time equality of a secret `want` and a candidate `got`.
///
/// The time depends only on `want.len()`, not on where `got` differs or on its length.
fn ct_str_eq(want: &[u8], got: &[u8]) -> Choice {
    let len_eq = (want.len() as u64).ct_eq(&(got.len() as u64));
    let mut acc = Choice::from(1u8);
    for (i, w) in want.iter().enumerate() {
        let g = got.get(i).copied().unwrap_or(!*w);
        acc &= w.ct_eq(&g);
    }
    len_eq & acc
}

fn unexpected_context(state: ServerState, msg: &ClientMessage) -> String {
    let expected = match state {
        ServerState::Start => "nothing yet (the server has not sent its banner)".to_owned(),
        ServerState::AwaitHello => "`hello`".to_owned(),
        ServerState::AwaitBinding | ServerState::AwaitAccept => {
            "nothing (the server is preparing its accept)".to_owned()
        }
        ServerState::AwaitWrite { notify: Notify::Imm } => {
            "nothing: in notify=imm the write's immediate data signals completion, do not send `written`".to_owned()
        }
        ServerState::AwaitWrite { notify: Notify::Tcp } => "nothing more (`written` was already received)".to_owned(),
        ServerState::Kept => "`next`, or the connection closed".to_owned(),
        ServerState::AwaitRegion => "nothing (the server is preparing the next round's buffer)".to_owned(),
        ServerState::Done | ServerState::Failed => "nothing (the handshake is over)".to_owned(),
    };
    let dup = match (state, msg) {
        (
            ServerState::AwaitBinding
            | ServerState::AwaitAccept
            | ServerState::AwaitWrite { .. }
            | ServerState::Kept
            | ServerState::AwaitRegion
            | ServerState::Done,
            ClientMessage::Hello(_),
        ) => " (duplicate hello: one hello per connection)",
        (ServerState::Done, ClientMessage::Next(_)) => {
            " (this session has no rounds: its hello did not ask for them, or the accept did not grant them)"
        }
        _ => "",
    };
    format!("while the server is {state}{dup}; expected {expected}")
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
fn check_rounds(policy: &ServerPolicy, h: &Hello) -> Result<(), ProtoError> {
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
