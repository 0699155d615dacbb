//! Wire messages of protocol v1 and their JSON Lines encoding.
//!
//! Encoding ([`ClientMessage::to_line`], [`ServerMessage::to_line`]) writes `type` and `v` first,
//! then the fields in a fixed order, then `\n`. Decoding ([`ClientMessage::parse`],
//! [`ServerMessage::parse`]) checks, in this order: UTF-8, JSON object, `v`, `type`, then every
//! field (type and range). Unknown fields are ignored.

use std::fmt;
use std::net::Ipv6Addr;
use std::ops::RangeInclusive;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use crate::bench::BenchParams;
use crate::error::{ErrorCode, ProtoError};
use crate::{MAX_TEXT, PROTOCOL_VERSION, SUPPORTED_VERSIONS};

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
    /// The payload as lossy UTF-8, at most [`MAX_TEXT`] bytes.
    pub text: String,
    /// Whether `text` was cut.
    pub truncated: bool,
    /// Which check failed, when `verified` is false.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `error`: either direction. The sender closes the connection after it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ErrorMsg {
    /// Stable code.
    pub code: ErrorCode,
    /// Human text with what to do.
    pub message: String,
    /// The versions the sender speaks (for `unsupported_version`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub supported: Option<Vec<u32>>,
}

impl ErrorMsg {
    /// An error message without `supported`.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ErrorMsg {
            code,
            message: message.into(),
            supported: None,
        }
    }
}

/// Everything a client sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientMessage {
    /// `hello`.
    Hello(Hello),
    /// `written`.
    Written(Written),
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

const CLIENT_TYPES: &str = "`hello`, `written`, `error`";
const SERVER_TYPES: &str = "`banner`, `accept`, `result`, `error`";

impl ClientMessage {
    /// Parses one line (with or without its `\r\n`/`\n`) sent by a client.
    pub fn parse(line: &[u8]) -> Result<Self, ProtoError> {
        let (ty, obj) = envelope(line)?;
        let f = Fields { obj: &obj, msg: "" };
        match ty.as_str() {
            "hello" => parse_hello(Fields { msg: "hello", ..f }).map(ClientMessage::Hello),
            "written" => parse_written(Fields {
                msg: "written",
                ..f
            })
            .map(ClientMessage::Written),
            "error" => parse_error(Fields { msg: "error", ..f }).map(ClientMessage::Error),
            "banner" | "accept" | "result" => Err(ProtoError::Unexpected {
                got: ty,
                context: format!(
                    "from a client: that is a server message; a client sends {CLIENT_TYPES}"
                ),
            }),
            _ => Err(ProtoError::UnknownType {
                ty: shorten(&ty),
                expected: CLIENT_TYPES,
            }),
        }
    }

    /// The JSON line for this message, ending in `\n`.
    pub fn to_line(&self) -> String {
        match self {
            ClientMessage::Hello(m) => encode("hello", m),
            ClientMessage::Written(m) => encode("written", m),
            ClientMessage::Error(m) => encode("error", m),
        }
    }

    /// The `type` string of this message.
    pub fn kind(&self) -> &'static str {
        match self {
            ClientMessage::Hello(_) => "hello",
            ClientMessage::Written(_) => "written",
            ClientMessage::Error(_) => "error",
        }
    }
}

impl ServerMessage {
    /// Parses one line (with or without its `\r\n`/`\n`) sent by a server.
    pub fn parse(line: &[u8]) -> Result<Self, ProtoError> {
        let (ty, obj) = envelope(line)?;
        let f = Fields { obj: &obj, msg: "" };
        match ty.as_str() {
            "banner" => parse_banner(Fields { msg: "banner", ..f }).map(ServerMessage::Banner),
            "accept" => parse_accept(Fields { msg: "accept", ..f }).map(ServerMessage::Accept),
            "result" => parse_result(Fields { msg: "result", ..f }).map(ServerMessage::Result),
            "error" => parse_error(Fields { msg: "error", ..f }).map(ServerMessage::Error),
            "hello" | "written" => Err(ProtoError::Unexpected {
                got: ty,
                context: format!(
                    "from a server: that is a client message; a server sends {SERVER_TYPES}"
                ),
            }),
            _ => Err(ProtoError::UnknownType {
                ty: shorten(&ty),
                expected: SERVER_TYPES,
            }),
        }
    }

    /// The JSON line for this message, ending in `\n`.
    pub fn to_line(&self) -> String {
        match self {
            ServerMessage::Banner(m) => encode("banner", m),
            ServerMessage::Accept(m) => encode("accept", m),
            ServerMessage::Result(m) => encode("result", m),
            ServerMessage::Error(m) => encode("error", m),
        }
    }

    /// The `type` string of this message.
    pub fn kind(&self) -> &'static str {
        match self {
            ServerMessage::Banner(_) => "banner",
            ServerMessage::Accept(_) => "accept",
            ServerMessage::Result(_) => "result",
            ServerMessage::Error(_) => "error",
        }
    }
}

/// UTF-8, JSON object, `v`, `type` — in that order.
fn envelope(line: &[u8]) -> Result<(String, Map<String, Value>), ProtoError> {
    let text = std::str::from_utf8(line).map_err(|e| ProtoError::BadUtf8 {
        valid_up_to: e.valid_up_to(),
    })?;
    let value: Value = serde_json::from_str(text).map_err(|e| ProtoError::BadJson {
        detail: format!("{e}"),
    })?;
    let Value::Object(obj) = value else {
        return Err(ProtoError::BadJson {
            detail: format!("got {}, not an object", json_kind(&value)),
        });
    };
    match obj.get("v") {
        None | Some(Value::Null) => {
            return Err(ProtoError::invalid(
                "message",
                "v",
                format!(
                    "is missing; every message carries the protocol major version, e.g. \"v\":{PROTOCOL_VERSION}"
                ),
            ));
        }
        Some(v) => match v.as_u64() {
            Some(n) if SUPPORTED_VERSIONS.iter().any(|&s| u64::from(s) == n) => {}
            Some(n) => return Err(ProtoError::UnsupportedVersion { peer: vec![n] }),
            None => {
                return Err(ProtoError::invalid(
                    "message",
                    "v",
                    format!(
                        "{} is not a non-negative integer; use \"v\":{PROTOCOL_VERSION}",
                        summary(v)
                    ),
                ));
            }
        },
    }
    let ty = match obj.get("type") {
        Some(Value::String(s)) => s.clone(),
        None | Some(Value::Null) => {
            return Err(ProtoError::invalid(
                "message",
                "type",
                "is missing; every message names its type, e.g. \"type\":\"hello\"",
            ));
        }
        Some(other) => {
            return Err(ProtoError::invalid(
                "message",
                "type",
                format!("{} is not a string", summary(other)),
            ));
        }
    };
    Ok((ty, obj))
}

/// Typed, range-checked access to the fields of one message.
#[derive(Clone, Copy)]
struct Fields<'a> {
    obj: &'a Map<String, Value>,
    msg: &'static str,
}

impl Fields<'_> {
    fn get(&self, name: &str) -> Option<&Value> {
        self.obj.get(name).filter(|v| !v.is_null())
    }

    fn req(&self, name: &'static str) -> Result<&Value, ProtoError> {
        self.get(name)
            .ok_or_else(|| ProtoError::invalid(self.msg, name, "is missing"))
    }

    fn uint_value(
        &self,
        name: &'static str,
        v: &Value,
        range: RangeInclusive<u64>,
    ) -> Result<u64, ProtoError> {
        let n = v.as_u64().ok_or_else(|| {
            ProtoError::invalid(
                self.msg,
                name,
                format!(
                    "{} is not an integer in {}..={}",
                    summary(v),
                    range.start(),
                    range.end()
                ),
            )
        })?;
        check_range(self.msg, name, n, range)
    }

    fn uint(&self, name: &'static str, range: RangeInclusive<u64>) -> Result<u64, ProtoError> {
        let v = self.req(name)?;
        self.uint_value(name, v, range)
    }

    fn opt_uint(
        &self,
        name: &'static str,
        range: RangeInclusive<u64>,
    ) -> Result<Option<u64>, ProtoError> {
        self.get(name)
            .map(|v| self.uint_value(name, v, range))
            .transpose()
    }

    fn u32(&self, name: &'static str, range: RangeInclusive<u32>) -> Result<u32, ProtoError> {
        let r = u64::from(*range.start())..=u64::from(*range.end());
        self.uint(name, r).map(narrow)
    }

    fn string_value(&self, name: &'static str, v: &Value) -> Result<String, ProtoError> {
        match v {
            Value::String(s) => Ok(s.clone()),
            other => Err(ProtoError::invalid(
                self.msg,
                name,
                format!("{} is not a string", summary(other)),
            )),
        }
    }

    fn string(&self, name: &'static str) -> Result<String, ProtoError> {
        let v = self.req(name)?;
        self.string_value(name, v)
    }

    fn opt_string(&self, name: &'static str) -> Result<Option<String>, ProtoError> {
        self.get(name)
            .map(|v| self.string_value(name, v))
            .transpose()
    }

    fn boolean(&self, name: &'static str) -> Result<bool, ProtoError> {
        match self.req(name)? {
            Value::Bool(b) => Ok(*b),
            other => Err(ProtoError::invalid(
                self.msg,
                name,
                format!("{} is not true or false", summary(other)),
            )),
        }
    }

    fn array<'b>(&'b self, name: &'static str) -> Result<&'b Vec<Value>, ProtoError> {
        match self.req(name)? {
            Value::Array(a) => Ok(a),
            other => Err(ProtoError::invalid(
                self.msg,
                name,
                format!("{} is not an array", summary(other)),
            )),
        }
    }

    fn u32_list(&self, name: &'static str) -> Result<Vec<u32>, ProtoError> {
        let full = 0..=u64::from(u32::MAX);
        self.array(name)?
            .iter()
            .map(|v| self.uint_value(name, v, full.clone()).map(narrow))
            .collect()
    }

    fn string_list(&self, name: &'static str) -> Result<Vec<String>, ProtoError> {
        self.array(name)?
            .iter()
            .map(|v| self.string_value(name, v))
            .collect()
    }

    fn parsed<T: FromStr>(&self, name: &'static str, allowed: &str) -> Result<T, ProtoError> {
        let s = self.string(name)?;
        s.parse().map_err(|_| {
            ProtoError::invalid(
                self.msg,
                name,
                format!("\"{}\" is not one of {allowed}", shorten(&s)),
            )
        })
    }

    fn endpoint(&self) -> Result<QpEndpoint, ProtoError> {
        let qpn = self.u32("qpn", 0..=MAX_24BIT)?;
        let psn = self.u32("psn", 0..=MAX_24BIT)?;
        let gid = {
            let s = self.string("gid")?;
            s.parse::<Gid>()
                .map_err(|e| ProtoError::invalid(self.msg, "gid", e.to_string()))?
        };
        let lid = self.uint("lid", 0..=u64::from(u16::MAX))?;
        let lid = u16::try_from(lid).unwrap_or(u16::MAX);
        let mtu = self.req("mtu")?;
        let mtu = self.uint_value("mtu", mtu, 0..=u64::MAX)?;
        check_mtu(self.msg, mtu)?;
        Ok(QpEndpoint {
            qpn,
            psn,
            gid,
            lid,
            mtu: narrow(mtu),
        })
    }
}

/// Narrows a value already range-checked to fit in `u32`.
fn narrow(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

fn check_range(
    msg: &'static str,
    field: &'static str,
    n: u64,
    range: RangeInclusive<u64>,
) -> Result<u64, ProtoError> {
    if range.contains(&n) {
        Ok(n)
    } else {
        Err(ProtoError::invalid(
            msg,
            field,
            format!("{n} is out of range {}..={}", range.start(), range.end()),
        ))
    }
}

fn check_mtu(msg: &'static str, mtu: u64) -> Result<(), ProtoError> {
    if VALID_MTUS.iter().any(|&m| u64::from(m) == mtu) {
        Ok(())
    } else {
        Err(ProtoError::invalid(
            msg,
            "mtu",
            format!(
                "{mtu} is not one of 256, 512, 1024, 2048, 4096 (the port's active MTU in bytes)"
            ),
        ))
    }
}

fn parse_banner(f: Fields<'_>) -> Result<Banner, ProtoError> {
    Ok(Banner {
        program: f.string("program")?,
        program_version: f.string("program_version")?,
        versions: f.u32_list("versions")?,
        features: f.string_list("features")?,
        auth: f.parsed("auth", "\"none\", \"token\"")?,
    })
}

fn parse_hello(f: Fields<'_>) -> Result<Hello, ProtoError> {
    let endpoint = f.endpoint()?;
    let length = f.uint("length", 1..=u64::MAX)?;
    let notify: Notify = f.parsed("notify", "\"imm\", \"tcp\"")?;
    if notify == Notify::Imm && length > u64::from(u32::MAX) {
        return Err(ProtoError::invalid(
            "hello",
            "length",
            format!(
                "{length} does not fit the 32-bit immediate; with notify \"imm\" the length must be in 1..={}, use notify \"tcp\" for more",
                u32::MAX
            ),
        ));
    }
    let crc32c = f.opt_uint("crc32c", 0..=u64::from(u32::MAX))?.map(narrow);
    let token = f.opt_string("token")?;
    let bench = f
        .get("bench")
        .map(|v| parse_bench(f, v, length, notify))
        .transpose()?;
    Ok(Hello {
        endpoint,
        length,
        notify,
        crc32c,
        token,
        bench,
    })
}

/// `hello.bench`: an object whose fields are checked like any message's, then together.
fn parse_bench(
    f: Fields<'_>,
    v: &Value,
    length: u64,
    notify: Notify,
) -> Result<BenchParams, ProtoError> {
    let Value::Object(obj) = v else {
        return Err(ProtoError::invalid(
            f.msg,
            "bench",
            format!("{} is not an object", summary(v)),
        ));
    };
    let b = Fields {
        obj,
        msg: "hello.bench",
    };
    let full = 1..=u64::MAX;
    let sizes = b
        .array("sizes")?
        .iter()
        .map(|x| b.uint_value("sizes", x, full.clone()))
        .collect::<Result<Vec<u64>, _>>()?;
    let p = BenchParams {
        mode: b.parsed("mode", "\"lat\", \"bw\"")?,
        sizes,
        iters: b.uint("iters", 1..=crate::bench::MAX_ITERS)?,
        addr: b.opt_uint("addr", 0..=u64::MAX)?,
        rkey: b.opt_uint("rkey", 0..=u64::from(u32::MAX))?.map(narrow),
    };
    if notify != Notify::Tcp {
        return Err(ProtoError::invalid(
            "hello",
            "notify",
            "a bench session ends with `written` carrying the final crc32c: use notify \"tcp\"",
        ));
    }
    p.check(length)
        .map_err(|(field, why)| ProtoError::invalid("hello.bench", field, why))?;
    Ok(p)
}

fn parse_accept(f: Fields<'_>) -> Result<Accept, ProtoError> {
    Ok(Accept {
        endpoint: f.endpoint()?,
        addr: f.uint("addr", 0..=u64::MAX)?,
        rkey: f.u32("rkey", 0..=u32::MAX)?,
        buf_len: f.uint("buf_len", 1..=u64::MAX)?,
    })
}

fn parse_written(f: Fields<'_>) -> Result<Written, ProtoError> {
    Ok(Written {
        length: f.uint("length", 1..=u64::MAX)?,
        crc32c: f.u32("crc32c", 0..=u32::MAX)?,
    })
}

fn parse_result(f: Fields<'_>) -> Result<Outcome, ProtoError> {
    let verified = f.boolean("verified")?;
    let length = f.uint("length", 0..=u64::MAX)?;
    let crc32c = f.u32("crc32c", 0..=u32::MAX)?;
    let text = f.string("text")?;
    if text.len() > MAX_TEXT {
        return Err(ProtoError::invalid(
            "result",
            "text",
            format!(
                "is {} bytes; at most {MAX_TEXT} bytes are allowed",
                text.len()
            ),
        ));
    }
    Ok(Outcome {
        verified,
        length,
        crc32c,
        text,
        truncated: f.boolean("truncated")?,
        reason: f.opt_string("reason")?,
    })
}

fn parse_error(f: Fields<'_>) -> Result<ErrorMsg, ProtoError> {
    let raw = f.string("code")?;
    let message = f.string("message")?;
    let (code, message) = match raw.parse::<ErrorCode>() {
        Ok(c) => (c, message),
        // A newer peer may use a code we do not know: keep it visible, do not reject the line.
        Err(_) => (
            ErrorCode::Internal,
            format!("[{}] {message}", shorten(&raw)),
        ),
    };
    let supported = match f.get("supported") {
        None => None,
        Some(_) => Some(f.u32_list("supported")?),
    };
    Ok(ErrorMsg {
        code,
        message,
        supported,
    })
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A short rendering of a JSON value for error messages.
fn summary(v: &Value) -> String {
    let s = v.to_string();
    shorten(&s)
}

/// Cuts text to 40 chars for error messages (so a hostile peer cannot make us echo megabytes).
pub(crate) fn shorten(s: &str) -> String {
    const MAX: usize = 40;
    if s.chars().count() <= MAX {
        s.to_owned()
    } else {
        let mut out: String = s.chars().take(MAX).collect();
        out.push('…');
        out
    }
}
