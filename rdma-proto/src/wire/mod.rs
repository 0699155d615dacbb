//! Wire messages of protocol v1 and their JSON Lines encoding.
//!
//! Encoding ([`ClientMessage::to_line`], [`ServerMessage::to_line`]) writes `type` and `v` first,
//! then the fields in a fixed order, then `\n`. Decoding ([`ClientMessage::parse`],
//! [`ServerMessage::parse`]) checks, in this order: UTF-8, JSON object, `v`, `type`, then every
//! field (type and range). Unknown fields are ignored.

mod decode;

use std::fmt;
use std::net::Ipv6Addr;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::PROTOCOL_VERSION;
use crate::bench::BenchParams;
pub use crate::error::ErrorMsg;
use crate::error::ProtoError;
use crate::text::shorten;

use decode::{check_mtu, check_range};

/// Largest queue pair number / packet sequence number (both are 24-bit).
pub const MAX_24BIT: u32 = 0x00FF_FFFF;
/// The path MTUs (bytes) a `hello`/`accept` may name.
pub const VALID_MTUS: [u32; 5] = [256, 512, 1024, 2048, 4096];

/// A 128-bit RDMA GID. On the wire it is IPv6 text (`fe80::5054:ff:fe12:3401`,
/// `::ffff:10.0.0.2`). Bytes are in network order, as in `ibv_gid.raw`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// The GID as an IPv6 address.
    pub fn to_ipv6(self) -> Ipv6Addr {
        Ipv6Addr::from(self.0)
    }
}

impl From<Ipv6Addr> for Gid {
    fn from(a: Ipv6Addr) -> Self {
        Gid(a.octets())
    }
}

impl From<Gid> for Ipv6Addr {
    fn from(g: Gid) -> Self {
        g.to_ipv6()
    }
}

impl From<[u8; 16]> for Gid {
    fn from(raw: [u8; 16]) -> Self {
        Gid(raw)
    }
}

impl fmt::Display for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.to_ipv6(), f)
    }
}

impl fmt::Debug for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Gid({})", self.to_ipv6())
    }
}

/// Text that is not an IPv6 address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{0}` is not a GID: write it as IPv6 text, e.g. `fe80::5054:ff:fe12:3401` or `::ffff:10.0.0.2`"
)]
pub struct ParseGidError(pub String);

impl FromStr for Gid {
    type Err = ParseGidError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.parse::<Ipv6Addr>()
            .map(Gid::from)
            .map_err(|_| ParseGidError(shorten(s)))
    }
}

impl Serialize for Gid {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Gid {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// How the server learns that the write is done.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Notify {
    /// RDMA Write with immediate; the immediate data is the payload length.
    #[default]
    Imm,
    /// Plain RDMA Write, then a `written` message over TCP.
    Tcp,
}

impl Notify {
    /// The wire form: `"imm"` or `"tcp"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Notify::Imm => "imm",
            Notify::Tcp => "tcp",
        }
    }
}

impl fmt::Display for Notify {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A string that is neither `imm` nor `tcp`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{0}` is not a notify mode: use `imm` (write with immediate) or `tcp` (write, then a TCP message)"
)]
pub struct ParseNotifyError(pub String);

impl FromStr for Notify {
    type Err = ParseNotifyError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "imm" => Ok(Notify::Imm),
            "tcp" => Ok(Notify::Tcp),
            other => Err(ParseNotifyError(shorten(other))),
        }
    }
}

/// Whether the server wants a token in `hello`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Auth {
    /// No token needed.
    #[default]
    None,
    /// `hello.token` must match the server's token.
    Token,
}

impl Auth {
    /// The wire form: `"none"` or `"token"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Auth::None => "none",
            Auth::Token => "token",
        }
    }
}

impl fmt::Display for Auth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A string that is neither `none` nor `token`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not an auth mode: use `none` or `token`")]
pub struct ParseAuthError(pub String);

impl FromStr for Auth {
    type Err = ParseAuthError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "none" => Ok(Auth::None),
            "token" => Ok(Auth::Token),
            other => Err(ParseAuthError(shorten(other))),
        }
    }
}

/// One side's queue pair address, flattened into `hello` and `accept`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct QpEndpoint {
    /// Queue pair number, 24-bit.
    pub qpn: u32,
    /// Initial packet sequence number, 24-bit.
    pub psn: u32,
    /// The port GID to address (RoCE: IPv4-mapped or link-local).
    pub gid: Gid,
    /// The port LID (0 on RoCE).
    pub lid: u16,
    /// The port's active MTU in bytes (one of [`VALID_MTUS`]).
    pub mtu: u32,
}

impl QpEndpoint {
    /// An endpoint from its parts (for one-line conversions from a verbs layer's own type).
    pub fn new(qpn: u32, psn: u32, gid: Gid, lid: u16, mtu: u32) -> Self {
        QpEndpoint {
            qpn,
            psn,
            gid,
            lid,
            mtu,
        }
    }

    /// Checks the ranges the wire allows (24-bit qpn/psn, MTU in [`VALID_MTUS`]).
    pub fn validate(&self, msg: &'static str) -> Result<(), ProtoError> {
        check_range(msg, "qpn", u64::from(self.qpn), 0..=u64::from(MAX_24BIT))?;
        check_range(msg, "psn", u64::from(self.psn), 0..=u64::from(MAX_24BIT))?;
        check_mtu(msg, u64::from(self.mtu))?;
        Ok(())
    }
}

/// `banner`: server -> client, first line on connect. Holds no secrets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Banner {
    /// Program name, e.g. `rdma-server`.
    pub program: String,
    /// Program version, e.g. `0.1.0`.
    pub program_version: String,
    /// Protocol majors the server speaks.
    pub versions: Vec<u32>,
    /// Optional features, e.g. `notify-imm`, `notify-tcp`.
    pub features: Vec<String>,
    /// Whether a token is required.
    pub auth: Auth,
}

/// `hello`: client -> server, the client's QP and what it will write.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Hello {
    /// The client's queue pair.
    #[serde(flatten)]
    pub endpoint: QpEndpoint,
    /// Payload bytes, at least 1.
    pub length: u64,
    /// How the server learns the write is done.
    pub notify: Notify,
    /// CRC32C of the payload, if announced.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub crc32c: Option<u32>,
    /// Shared secret, if the server asks for one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// A benchmark session instead of one write (only to a server whose banner lists the
    /// `bench` feature; see [`crate::bench`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bench: Option<BenchParams>,
    /// Connect the queue pairs through RDMA CM (only to a server whose banner lists the `cm`
    /// feature; see [`crate::cm`]). `false` is not sent.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub cm: bool,
    /// Asks to keep the session for more rounds after the verdict (only to a server whose
    /// banner lists the `rounds` feature, and only for a write session; see
    /// [`crate::rounds`]). `false` is not sent.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub rounds: bool,
}

/// `accept`: server -> client, the server's QP and the remote buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Accept {
    /// The server's queue pair.
    #[serde(flatten)]
    pub endpoint: QpEndpoint,
    /// Full 64-bit virtual address of the registered buffer.
    pub addr: u64,
    /// Remote key of the buffer's memory region.
    pub rkey: u32,
    /// Buffer length in bytes (>= `hello.length`).
    pub buf_len: u64,
    /// Where the client connects through RDMA CM: present exactly when `hello.cm` asked for it
    /// (see [`crate::cm`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cm: Option<crate::cm::CmOffer>,
    /// How long, in milliseconds, the server waits after each verdict for a `next`: present
    /// exactly when the hello asked for `rounds` and the server grants them (see
    /// [`crate::rounds`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keep_alive_ms: Option<u64>,
}

/// `next`: client -> server, after a verdict in a session whose accept granted rounds: one more
/// write on the same queue pairs, of `length` bytes (see [`crate::rounds`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Next {
    /// Payload bytes of this round, at least 1, at most the accept's `buf_len`.
    pub length: u64,
    /// CRC32C of this round's payload, if announced.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub crc32c: Option<u32>,
    /// A `lat` bench session's buffer for this round's answers: registered anew by the client
    /// (present exactly in a `lat` session's `next`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pong: Option<crate::bench::PongBuffer>,
}

/// `region`: server -> client, the answer to `next`: a freshly registered buffer (a new rkey;
/// the last round's is dead) for this round's write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Region {
    /// Full 64-bit virtual address of the registered buffer.
    pub addr: u64,
    /// Remote key of the buffer's memory region.
    pub rkey: u32,
    /// Buffer length in bytes (>= `next.length`).
    pub buf_len: u64,
}

/// `written`: client -> server in notify=tcp, after the client's write completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Written {
    /// Bytes written.
    pub length: u64,
    /// CRC32C of the bytes written.
    pub crc32c: u32,
}

/// `result`: server -> client, what the server saw in its buffer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Outcome {
    /// All checks passed.
    pub verified: bool,
    /// Bytes the server checked.
    pub length: u64,
    /// CRC32C of the bytes the server checked.
    pub crc32c: u32,
    /// The payload as lossy UTF-8, at most [`MAX_TEXT`](crate::MAX_TEXT) bytes.
    pub text: String,
    /// Whether `text` was cut.
    pub truncated: bool,
    /// Which check failed, when `verified` is false.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// A `lat` session's stamped exchange, as the server's device stamped it, where it stamps
    /// completions ([`Turnaround`](crate::bench::Turnaround)).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stamps: Option<crate::bench::Turnaround>,
}

/// Everything a client sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientMessage {
    /// `hello`.
    Hello(Hello),
    /// `written`.
    Written(Written),
    /// `next` (rounds).
    Next(Next),
    /// `error`.
    Error(ErrorMsg),
}

/// Everything a server sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerMessage {
    /// `banner`.
    Banner(Banner),
    /// `accept`.
    Accept(Accept),
    /// `result`.
    Result(Outcome),
    /// `region` (rounds).
    Region(Region),
    /// `error`.
    Error(ErrorMsg),
}

#[derive(Serialize)]
struct Envelope<'a, T: Serialize> {
    #[serde(rename = "type")]
    ty: &'static str,
    v: u32,
    #[serde(flatten)]
    body: &'a T,
}

fn encode<T: Serialize>(ty: &'static str, body: &T) -> String {
    let env = Envelope {
        ty,
        v: PROTOCOL_VERSION,
        body,
    };
    // Serializing these plain structs (strings, integers, bools, vectors) to JSON cannot fail:
    // no maps with non-string keys, no floats, no custom serializers that error.
    let mut line = match serde_json::to_string(&env) {
        Ok(s) => s,
        Err(e) => unreachable_encode(ty, &e),
    };
    line.push('\n');
    line
}

#[cold]
fn unreachable_encode(ty: &str, e: &serde_json::Error) -> String {
    // Kept as a valid `error` line rather than a panic, should it ever happen.
    format!(
        "{{\"type\":\"error\",\"v\":{PROTOCOL_VERSION},\"code\":\"internal\",\"message\":{}}}",
        Value::String(format!("could not encode `{ty}`: {e}"))
    )
}

impl ClientMessage {
    /// The JSON line for this message, ending in `\n`.
    pub fn to_line(&self) -> String {
        match self {
            ClientMessage::Hello(m) => encode("hello", m),
            ClientMessage::Written(m) => encode("written", m),
            ClientMessage::Next(m) => encode("next", m),
            ClientMessage::Error(m) => encode("error", m),
        }
    }

    /// The `type` string of this message.
    pub fn kind(&self) -> &'static str {
        match self {
            ClientMessage::Hello(_) => "hello",
            ClientMessage::Written(_) => "written",
            ClientMessage::Next(_) => "next",
            ClientMessage::Error(_) => "error",
        }
    }
}

impl ServerMessage {
    /// The JSON line for this message, ending in `\n`.
    pub fn to_line(&self) -> String {
        match self {
            ServerMessage::Banner(m) => encode("banner", m),
            ServerMessage::Accept(m) => encode("accept", m),
            ServerMessage::Result(m) => encode("result", m),
            ServerMessage::Region(m) => encode("region", m),
            ServerMessage::Error(m) => encode("error", m),
        }
    }

    /// The `type` string of this message.
    pub fn kind(&self) -> &'static str {
        match self {
            ServerMessage::Banner(_) => "banner",
            ServerMessage::Accept(_) => "accept",
            ServerMessage::Result(_) => "result",
            ServerMessage::Region(_) => "region",
            ServerMessage::Error(_) => "error",
        }
    }
}
