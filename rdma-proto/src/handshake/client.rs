//! The client's side of the handshake: [`ClientHandshake`] over what it wants to write
//! ([`ClientRequest`]).

use std::fmt;

use super::binding::GidBinding;
use crate::bench::{self, BenchParams, PongBuffer};
use crate::error::{ErrorCode, ProtoError};
use crate::wire::{
    Accept, Auth, Banner, ClientMessage, Hello, Next, Notify, Outcome, QpEndpoint, Region,
    ServerMessage, Written,
};
use crate::{SUPPORTED_VERSIONS, crc32c};

/// What the client wants to write.
#[derive(Clone, PartialEq, Eq)]
pub struct ClientRequest {
    /// Payload length in bytes.
    pub length: u64,
    /// How the server learns the write is done.
    pub notify: Notify,
    /// CRC32C of the payload.
    pub crc32c: u32,
    /// Token to present if the server asks for one.
    pub token: Option<String>,
}

impl fmt::Debug for ClientRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientRequest")
            .field("length", &self.length)
            .field("notify", &self.notify)
            .field("crc32c", &self.crc32c)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl ClientRequest {
    /// A request for `payload`: length and CRC32C computed from it.
    pub fn for_payload(payload: &[u8], notify: Notify, token: Option<String>) -> Self {
        ClientRequest {
            length: payload.len() as u64,
            notify,
            crc32c: crc32c(payload),
            token,
        }
    }
}

/// Client side states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientState {
    /// Waiting for the server's banner.
    AwaitBanner,
    /// Banner ok; call `hello`.
    NeedHello,
    /// `hello` sent, waiting for `accept`.
    AwaitAccept,
    /// `accept` received; do the RDMA Write, then call `written`.
    Writing,
    /// Waiting for `result`.
    AwaitResult,
    /// `next` sent (rounds), waiting for `region`.
    AwaitRegion,
    /// Verified by the server.
    Done,
    /// Something went wrong.
    Failed,
}

impl fmt::Display for ClientState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ClientState::AwaitBanner => "awaiting banner",
            ClientState::NeedHello => "about to send hello",
            ClientState::AwaitAccept => "awaiting accept",
            ClientState::Writing => "writing",
            ClientState::AwaitResult => "awaiting result",
            ClientState::AwaitRegion => "awaiting the next round's region",
            ClientState::Done => "done",
            ClientState::Failed => "failed",
        })
    }
}

/// The client's side of one connection.
///
/// Before the accept arrives the caller must [`bind`](Self::bind) the connection (what the
/// accept's GID may be: the server's TCP address on RoCE); [`on_accept`](Self::on_accept)
/// refuses as a misuse without it. A clone made before the banner is a fresh handshake with
/// the same request, for a caller that starts over on a new connection.
#[derive(Debug, Clone)]
pub struct ClientHandshake {
    req: ClientRequest,
    /// What the accept's GID may be ([`bind`](Self::bind)); `None`: not bound yet.
    binding: Option<GidBinding>,
    bench: Option<BenchParams>,
    /// Whether the hello asked for RDMA CM.
    cm: bool,
    /// Whether to ask for rounds (where the banner offers them).
    want_rounds: bool,
    /// Whether the hello asked for rounds.
    asked_rounds: bool,
    /// Whether to end a `lat` sweep with the stamped exchange (where the banner offers it).
    want_stamped: bool,
    /// Whether the hello asked for the stamped exchange.
    asked_stamped: bool,
    state: ClientState,
    banner: Option<Banner>,
    accept: Option<Accept>,
    outcome: Option<Outcome>,
}

impl ClientHandshake {
    /// A fresh handshake in state `AwaitBanner`.
    pub fn new(req: ClientRequest) -> Self {
        ClientHandshake {
            req,
            binding: None,
            bench: None,
            cm: false,
            want_rounds: false,
            asked_rounds: false,
            want_stamped: false,
            asked_stamped: false,
            state: ClientState::AwaitBanner,
            banner: None,
            accept: None,
            outcome: None,
        }
    }

    /// A handshake that asks for a bench session (`hello.bench`). `req` describes the bytes
    /// the server will hold at the end ([`bench::final_content`]). The hello fails locally,
    /// sending nothing, if the server's banner does not list the `bench` feature.
    pub fn with_bench(req: ClientRequest, bench: BenchParams) -> Self {
        ClientHandshake {
            bench: Some(bench),
            ..ClientHandshake::new(req)
        }
    }

    /// A write session that asks to be kept for more [`rounds`](crate::rounds), where the
    /// server's banner offers them (elsewhere, and with RDMA CM, the hello does not ask, and
    /// the session ends at its verdict).
    #[must_use]
    pub fn asking_rounds(mut self) -> Self {
        self.want_rounds = true;
        self
    }

    /// A `lat` bench session whose sweep ends with the stamped exchange
    /// ([`Turnaround`](bench::Turnaround)), where the server's banner offers it (feature
    /// `stamped`); elsewhere the hello does not ask, and no exchange follows the sweep.
    #[must_use]
    pub fn asking_stamps(mut self) -> Self {
        self.want_stamped = true;
        self
    }

    /// Whether the hello asked for the stamped exchange: the sweep ends with it, and the
    /// server posted a receive for it.
    pub fn stamped(&self) -> bool {
        self.asked_stamped
    }

    /// How long the server keeps the session after each verdict, once its accept granted
    /// rounds.
    pub fn keep_alive(&self) -> Option<std::time::Duration> {
        self.accept
            .and_then(|a| a.keep_alive_ms)
            .map(std::time::Duration::from_millis)
    }

    /// Binds the accept to this connection (see [`GidBinding`]): on RoCE the server's GID
    /// must be its TCP address (`GidBinding::Peer` with the server's address, and, for a
    /// server reached over loopback, this host's GIDs); on InfiniBand nothing can be bound
    /// (`GidBinding::Unbound`). An accept that offers RDMA CM is not held to it: its GID
    /// connects nothing (the client connects through RDMA CM to the TCP peer's own address).
    ///
    /// Call it before the accept arrives, in any state up to `AwaitAccept` (again on a new
    /// connection); [`on_accept`](Self::on_accept) refuses as a misuse without it, so that no
    /// caller connects to a GID it never checked.
    ///
    /// # Errors
    /// `internal`, when the accept was handled already; the handshake is then `Failed`.
    pub fn bind(&mut self, binding: GidBinding) -> Result<(), ProtoError> {
        let r = match self.state {
            ClientState::AwaitBanner | ClientState::NeedHello | ClientState::AwaitAccept => {
                self.binding = Some(binding);
                Ok(())
            }
            state => Err(ProtoError::new(
                ErrorCode::Internal,
                format!("client bug: bind() called while the client is {state}"),
            )),
        };
        self.guard(r)
    }

    /// The binding the accept is held to, once [`bind`](Self::bind) took it.
    pub fn binding(&self) -> Option<&GidBinding> {
        self.binding.as_ref()
    }

    /// The current state.
    pub fn state(&self) -> ClientState {
        self.state
    }

    /// The server's banner, once received.
    pub fn banner(&self) -> Option<&Banner> {
        self.banner.as_ref()
    }

    /// The server's accept, once received.
    pub fn accept(&self) -> Option<&Accept> {
        self.accept.as_ref()
    }

    /// The server's `result` as it was received, once there is one, whether or not it passed
    /// [`on_result`](Self::on_result)'s checks.
    pub fn outcome(&self) -> Option<&Outcome> {
        self.outcome.as_ref()
    }

    fn guard<T>(&mut self, r: Result<T, ProtoError>) -> Result<T, ProtoError> {
        if r.is_err() {
            self.state = ClientState::Failed;
        }
        r
    }

    fn unexpected(&self, msg: &ServerMessage, expected: &str) -> ProtoError {
        ProtoError::Unexpected {
            got: msg.kind().to_owned(),
            context: format!("while the client is {}; expected {expected}", self.state),
        }
    }

    /// Handles the first server line. `AwaitBanner -> NeedHello`.
    ///
    /// The banner must list protocol version 1, else `unsupported_version`. If the server asks
    /// for a token and the request has none, `unauthorized` (nothing is sent). A server `error`
    /// becomes [`ProtoError::Remote`].
    pub fn on_banner(&mut self, msg: ServerMessage) -> Result<Banner, ProtoError> {
        let r = self.banner_step(msg);
        self.guard(r)
    }

    fn banner_step(&mut self, msg: ServerMessage) -> Result<Banner, ProtoError> {
        match (self.state, msg) {
            (_, ServerMessage::Error(e)) => Err(ProtoError::Remote(e)),
            (ClientState::AwaitBanner, ServerMessage::Banner(b)) => {
                if !b.versions.iter().any(|v| SUPPORTED_VERSIONS.contains(v)) {
                    return Err(ProtoError::UnsupportedVersion {
                        peer: b.versions.iter().map(|&v| u64::from(v)).collect(),
                    });
                }
                if b.auth == Auth::Token && self.req.token.is_none() {
                    return Err(ProtoError::Unauthorized {
                        reason: "the server requires a token; pass it (e.g. --token or its environment variable)"
                            .to_owned(),
                    });
                }
                self.state = ClientState::NeedHello;
                self.banner = Some(b.clone());
                Ok(b)
            }
            (_, msg) => Err(self.unexpected(&msg, "`banner` first")),
        }
    }

    /// The `hello` line for `local`. `NeedHello -> AwaitAccept`.
    ///
    /// The token is only sent if the banner said `auth: token` (a secret is never offered to a
    /// server that did not ask for it).
    pub fn hello(&mut self, local: QpEndpoint) -> Result<ClientMessage, ProtoError> {
        self.hello_cm(local, false)
    }

    /// [`hello`](Self::hello), asking to connect the queue pairs through RDMA CM when `cm`
    /// (see [`crate::cm`]): fails locally, sending nothing, if the server's banner does not
    /// list the `cm` feature. The accept must then carry the server's [`CmOffer`].
    ///
    /// [`CmOffer`]: crate::cm::CmOffer
    pub fn hello_cm(&mut self, local: QpEndpoint, cm: bool) -> Result<ClientMessage, ProtoError> {
        let r = self.hello_step(local, cm);
        self.guard(r)
    }

    fn hello_step(&mut self, local: QpEndpoint, cm: bool) -> Result<ClientMessage, ProtoError> {
        if self.state != ClientState::NeedHello {
            return Err(ProtoError::new(
                ErrorCode::Internal,
                format!(
                    "client bug: hello() called while the client is {}",
                    self.state
                ),
            ));
        }
        local.validate("hello")?;
        check_length(
            "hello",
            self.req.length,
            self.req.notify,
            "; use notify tcp",
        )?;
        let wants_token = self.banner.as_ref().is_some_and(|b| b.auth == Auth::Token);
        let banner = self.banner.as_ref();
        if cm && !banner.is_some_and(|x| x.features.iter().any(|f| f == crate::cm::FEATURE)) {
            return Err(ProtoError::new(
                ErrorCode::InvalidField,
                format!(
                    "the server ({} {}) does not connect queue pairs through RDMA CM: its banner lists features [{}], not `{}`; iWARP needs it: upgrade the server, or leave out --cm on RoCE/InfiniBand",
                    banner.map_or("?", |x| x.program.as_str()),
                    banner.map_or("?", |x| x.program_version.as_str()),
                    banner.map_or(String::new(), |x| x.features.join(", ")),
                    crate::cm::FEATURE
                ),
            ));
        }
        self.cm = cm;
        if let Some(b) = &self.bench {
            let banner = self.banner.as_ref();
            if !banner.is_some_and(|x| x.features.iter().any(|f| f == bench::FEATURE)) {
                return Err(ProtoError::new(
                    ErrorCode::InvalidField,
                    format!(
                        "the server ({} {}) does not run bench sessions: its banner lists features [{}], not `{}`; upgrade the server",
                        banner.map_or("?", |x| x.program.as_str()),
                        banner.map_or("?", |x| x.program_version.as_str()),
                        banner.map_or(String::new(), |x| x.features.join(", ")),
                        bench::FEATURE
                    ),
                ));
            }
            b.check(self.req.length)
                .map_err(|(field, why)| ProtoError::invalid("hello.bench", field, why))?;
            if self.req.notify != Notify::Tcp {
                return Err(ProtoError::invalid(
                    "hello",
                    "notify",
                    "a bench session ends with `written`: use notify tcp",
                ));
            }
        }
        let lists = |feature: &str| {
            self.banner
                .as_ref()
                .is_some_and(|x| x.features.iter().any(|f| f == feature))
        };
        let offered = lists(crate::rounds::FEATURE)
            && (self.bench.is_none() || lists(crate::rounds::FEATURE_BENCH));
        self.asked_rounds = self.want_rounds && offered && !cm;
        let mut bench = self.bench.clone();
        if let Some(b) = bench.as_mut() {
            b.stamped = self.want_stamped
                && b.mode() == bench::BenchMode::Lat
                && lists(bench::FEATURE_STAMPED);
            self.asked_stamped = b.stamped;
        }
        self.state = ClientState::AwaitAccept;
        Ok(ClientMessage::Hello(Hello {
            endpoint: local,
            length: self.req.length,
            notify: self.req.notify,
            crc32c: Some(self.req.crc32c),
            token: if wants_token {
                self.req.token.clone()
            } else {
                None
            },
            bench,
            cm,
            rounds: self.asked_rounds,
        }))
    }

    /// Handles the server's reply to `hello`. `AwaitAccept -> Writing`.
    ///
    /// Unless it offers RDMA CM, the accept's GID must satisfy the connection's binding
    /// ([`bind`](Self::bind), [`GidBinding::check_accept`]; else `invalid_field` naming `gid`,
    /// before the caller connects anything); without a binding the accept is refused as a
    /// misuse (`internal`). `buf_len` must be at least our length (else `too_long`); `error`
    /// -> [`ProtoError::Remote`].
    pub fn on_accept(&mut self, msg: ServerMessage) -> Result<Accept, ProtoError> {
        let r = match (self.state, msg) {
            (_, ServerMessage::Error(e)) => Err(ProtoError::Remote(e)),
            (ClientState::AwaitAccept, ServerMessage::Accept(a)) => {
                // A CM session connects to the TCP peer's own address: its GID is unused.
                let gid = match (&self.binding, a.cm) {
                    (Some(binding), None) => binding.check_accept(a.endpoint.gid),
                    _ => Ok(()),
                };
                if self.binding.is_none() {
                    Err(ProtoError::new(
                        ErrorCode::Internal,
                        "client bug: on_accept() without bind(): the accept's GID must be checked \
                         against the server's TCP address before anything connects to it"
                            .to_owned(),
                    ))
                } else if a.cm.is_some() != self.cm {
                    Err(ProtoError::invalid(
                        "accept",
                        "cm",
                        if self.cm {
                            "is missing, though the hello asked to connect through RDMA CM"
                        } else {
                            "is present, though the hello did not ask for RDMA CM"
                        },
                    ))
                } else if let Err(e) = gid {
                    Err(e)
                } else if a.keep_alive_ms.is_some() && !self.asked_rounds {
                    Err(ProtoError::invalid(
                        "accept",
                        "keep_alive_ms",
                        "is present, though the hello did not ask for rounds",
                    ))
                } else if a.buf_len < self.req.length {
                    Err(ProtoError::TooLong {
                        length: self.req.length,
                        max: a.buf_len,
                    })
                } else {
                    self.state = ClientState::Writing;
                    self.accept = Some(a);
                    Ok(a)
                }
            }
            (_, msg) => Err(self.unexpected(&msg, "`accept` after hello")),
        };
        self.guard(r)
    }

    /// Call after the write completed locally. `Writing -> AwaitResult`.
    /// Returns the `written` line for notify=tcp, `None` for notify=imm.
    pub fn written(&mut self) -> Result<Option<ClientMessage>, ProtoError> {
        if self.state != ClientState::Writing {
            let e = ProtoError::new(
                ErrorCode::Internal,
                format!(
                    "client bug: written() called while the client is {}",
                    self.state
                ),
            );
            return self.guard(Err(e));
        }
        self.state = ClientState::AwaitResult;
        Ok(match self.req.notify {
            Notify::Imm => None,
            Notify::Tcp => Some(ClientMessage::Written(Written {
                length: self.req.length,
                crc32c: self.req.crc32c,
            })),
        })
    }

    /// Handles the final `result`. `AwaitResult -> Done`.
    ///
    /// `verified: false`, or a length / crc32c different from ours, gives `verify_failed`
    /// naming the difference; `error` -> [`ProtoError::Remote`].
    pub fn on_result(&mut self, msg: ServerMessage) -> Result<Outcome, ProtoError> {
        let r = match (self.state, msg) {
            (_, ServerMessage::Error(e)) => Err(ProtoError::Remote(e)),
            (ClientState::AwaitResult, ServerMessage::Result(o))
                if o.stamps.is_some() && !self.asked_stamped =>
            {
                self.outcome = Some(o);
                Err(ProtoError::invalid(
                    "result",
                    "stamps",
                    "is present, though the hello did not ask for the stamped exchange",
                ))
            }
            (ClientState::AwaitResult, ServerMessage::Result(o)) => {
                self.outcome = Some(o.clone());
                let mut problems = Vec::new();
                if !o.verified {
                    problems.push(format!(
                        "the server reports: {}",
                        o.reason.as_deref().map_or_else(
                            || "not verified (no reason given)".to_owned(),
                            crate::printable
                        )
                    ));
                }
                if o.length != self.req.length {
                    problems.push(format!(
                        "server saw {} bytes, we wrote {}",
                        o.length, self.req.length
                    ));
                }
                if o.crc32c != self.req.crc32c {
                    problems.push(format!(
                        "server's crc32c {:#010x} differs from ours {:#010x}",
                        o.crc32c, self.req.crc32c
                    ));
                }
                if problems.is_empty() {
                    self.state = ClientState::Done;
                    Ok(o)
                } else {
                    Err(ProtoError::VerifyFailed {
                        reason: problems.join("; "),
                    })
                }
            }
            (_, msg) => Err(self.unexpected(&msg, "`result` after the write")),
        };
        self.guard(r)
    }

    /// The `next` line that asks for one more round of `length` bytes whose CRC32C is `crc32c`,
    /// after a verified round of a session whose accept granted rounds. A bench session repeats
    /// its sweep (`length` is the hello's), and a `lat` one names `pong`, its buffer for the
    /// server's answers registered anew. `Done -> AwaitRegion`.
    pub fn next(
        &mut self,
        length: u64,
        crc32c: u32,
        pong: Option<PongBuffer>,
    ) -> Result<ClientMessage, ProtoError> {
        let lat = matches!(
            self.bench.as_ref().map(|b| b.kind),
            Some(bench::BenchKind::Lat(_))
        );
        let r = if self.state != ClientState::Done || self.keep_alive().is_none() {
            Err(ProtoError::new(
                ErrorCode::Internal,
                format!(
                    "client bug: next() called while the client is {}{}",
                    self.state,
                    if self.keep_alive().is_none() {
                        ", in a session without rounds"
                    } else {
                        ""
                    }
                ),
            ))
        } else if let Err(e) = check_length("next", length, self.req.notify, "") {
            Err(e)
        } else if self.bench.is_some() && length != self.req.length {
            Err(ProtoError::new(
                ErrorCode::Internal,
                format!(
                    "client bug: a bench session's next round repeats its sweep of {} bytes, not {length}",
                    self.req.length
                ),
            ))
        } else if lat != pong.is_some() {
            Err(ProtoError::new(
                ErrorCode::Internal,
                "client bug: a `next` names a buffer for the server's answers exactly in a lat session"
                    .to_owned(),
            ))
        } else {
            self.req.length = length;
            self.req.crc32c = crc32c;
            self.outcome = None;
            self.state = ClientState::AwaitRegion;
            Ok(ClientMessage::Next(Next {
                length,
                crc32c: Some(crc32c),
                pong,
            }))
        };
        self.guard(r)
    }

    /// Handles the server's answer to `next`. `AwaitRegion -> Writing`.
    /// `buf_len` must be at least the round's length (else `too_long`); `error` ->
    /// [`ProtoError::Remote`].
    pub fn on_region(&mut self, msg: ServerMessage) -> Result<Region, ProtoError> {
        let r = match (self.state, msg) {
            (_, ServerMessage::Error(e)) => Err(ProtoError::Remote(e)),
            (ClientState::AwaitRegion, ServerMessage::Region(g)) => {
                if g.buf_len < self.req.length {
                    Err(ProtoError::TooLong {
                        length: self.req.length,
                        max: g.buf_len,
                    })
                } else {
                    self.state = ClientState::Writing;
                    Ok(g)
                }
            }
            (_, msg) => Err(self.unexpected(&msg, "`region` after next")),
        };
        self.guard(r)
    }
}

/// A length `msg` may announce: at least a byte, and with notify imm one the 32-bit immediate
/// carries (`advice` follows that refusal).
fn check_length(
    msg: &'static str,
    length: u64,
    notify: Notify,
    advice: &str,
) -> Result<(), ProtoError> {
    if length == 0 {
        return Err(ProtoError::invalid(
            msg,
            "length",
            "0 is out of range; write at least 1 byte",
        ));
    }
    if notify == Notify::Imm && length > u64::from(u32::MAX) {
        return Err(ProtoError::invalid(
            msg,
            "length",
            format!("{length} does not fit the 32-bit immediate{advice}"),
        ));
    }
    Ok(())
}
