//! Decoding: [`ClientMessage::parse`] and [`ServerMessage::parse`], and the field-by-field
//! checks (type and range) behind them.

use crate::text::shorten;
use std::ops::RangeInclusive;
use std::str::FromStr;

use serde_json::{Map, Value};

use super::{
    Accept, Banner, ClientMessage, ErrorMsg, Gid, Hello, MAX_24BIT, Next, Notify, Outcome,
    QpEndpoint, Region, ServerMessage, VALID_MTUS, Written,
};
use crate::bench::{BenchKind, BenchMode, BenchParams, PongBuffer, Turnaround};
use crate::cm::CmOffer;
use crate::error::{ErrorCode, ProtoError};
use crate::{MAX_TEXT, PROTOCOL_VERSION, SUPPORTED_VERSIONS};

const CLIENT_TYPES: &str = "`hello`, `written`, `next`, `error`";
const SERVER_TYPES: &str = "`banner`, `accept`, `result`, `region`, `error`";

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
            "next" => parse_next(Fields { msg: "next", ..f }).map(ClientMessage::Next),
            "error" => parse_error(Fields { msg: "error", ..f }).map(ClientMessage::Error),
            "banner" | "accept" | "result" | "region" => Err(ProtoError::Unexpected {
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
            "region" => parse_region(Fields { msg: "region", ..f }).map(ServerMessage::Region),
            "error" => parse_error(Fields { msg: "error", ..f }).map(ServerMessage::Error),
            "hello" | "written" | "next" => Err(ProtoError::Unexpected {
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
    /// Field `name`'s value `v` as an object, whose own fields are read as message `msg`'s
    /// (`accept.cm`, `hello.bench`, `next.pong`).
    fn nested<'v>(
        &self,
        name: &'static str,
        v: &'v Value,
        msg: &'static str,
    ) -> Result<Fields<'v>, ProtoError> {
        let Value::Object(obj) = v else {
            return Err(ProtoError::invalid(
                self.msg,
                name,
                format!("{} is not an object", summary(v)),
            ));
        };
        Ok(Fields { obj, msg })
    }

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
        self.bool_value(name, self.req(name)?)
    }

    fn bool_value(&self, name: &'static str, v: &Value) -> Result<bool, ProtoError> {
        match v {
            Value::Bool(b) => Ok(*b),
            other => Err(ProtoError::invalid(
                self.msg,
                name,
                format!("{} is not true or false", summary(other)),
            )),
        }
    }

    fn opt_bool(&self, name: &'static str) -> Result<Option<bool>, ProtoError> {
        self.get(name).map(|v| self.bool_value(name, v)).transpose()
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

pub(super) fn check_range(
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

pub(super) fn check_mtu(msg: &'static str, mtu: u64) -> Result<(), ProtoError> {
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
    let cm = f.opt_bool("cm")?.unwrap_or(false);
    let rounds = f.opt_bool("rounds")?.unwrap_or(false);
    Ok(Hello {
        endpoint,
        length,
        notify,
        crc32c,
        token,
        bench,
        cm,
        rounds,
    })
}

/// `accept.cm`: the RDMA CM port and nonce.
fn parse_cm_offer(f: Fields<'_>, v: &Value) -> Result<CmOffer, ProtoError> {
    let c = f.nested("cm", v, "accept.cm")?;
    let port = u16::try_from(c.uint("port", 1..=u64::from(u16::MAX))?).unwrap_or(u16::MAX);
    let text = c.string("nonce")?;
    let nonce = CmOffer::parse_nonce(&text).ok_or_else(|| {
        ProtoError::invalid(
            "accept.cm",
            "nonce",
            format!(
                "\"{}\" is not {} hex digits",
                shorten(&text),
                2 * crate::cm::NONCE_LEN
            ),
        )
    })?;
    Ok(CmOffer { port, nonce })
}

/// `hello.bench`: an object whose fields are checked like any message's, then together.
fn parse_bench(
    f: Fields<'_>,
    v: &Value,
    length: u64,
    notify: Notify,
) -> Result<BenchParams, ProtoError> {
    let b = f.nested("bench", v, "hello.bench")?;
    let full = 1..=u64::MAX;
    let sizes = b
        .array("sizes")?
        .iter()
        .map(|x| b.uint_value("sizes", x, full.clone()))
        .collect::<Result<Vec<u64>, _>>()?;
    let mode: BenchMode = b.parsed("mode", "\"lat\", \"bw\"")?;
    let iters = b.uint("iters", 1..=crate::bench::MAX_ITERS)?;
    let addr = b.opt_uint("addr", 0..=u64::MAX)?;
    let rkey = b.opt_uint("rkey", 0..=u64::from(u32::MAX))?.map(narrow);
    let stamped = b.opt_bool("stamped")?.unwrap_or(false);
    if notify != Notify::Tcp {
        return Err(ProtoError::invalid(
            "hello",
            "notify",
            "a bench session ends with `written` carrying the final crc32c: use notify \"tcp\"",
        ));
    }
    let invalid =
        |(field, why): (&'static str, String)| ProtoError::invalid("hello.bench", field, why);
    crate::bench::check_sweep(&sizes, iters, length).map_err(invalid)?;
    let kind = match (mode, addr, rkey) {
        (BenchMode::Lat, Some(addr), Some(rkey)) => BenchKind::Lat(PongBuffer { addr, rkey }),
        (BenchMode::Lat, _, _) => {
            let (field, why) = crate::bench::LAT_NEEDS_PONGS;
            return Err(invalid((field, why.to_owned())));
        }
        (BenchMode::Bw, _, _) => BenchKind::Bw,
    };
    if stamped && mode != BenchMode::Lat {
        let (field, why) = crate::bench::STAMPED_NEEDS_LAT;
        return Err(invalid((field, why.to_owned())));
    }
    Ok(BenchParams {
        kind,
        sizes,
        iters,
        stamped,
    })
}

fn parse_accept(f: Fields<'_>) -> Result<Accept, ProtoError> {
    Ok(Accept {
        endpoint: f.endpoint()?,
        addr: f.uint("addr", 0..=u64::MAX)?,
        rkey: f.u32("rkey", 0..=u32::MAX)?,
        buf_len: f.uint("buf_len", 1..=u64::MAX)?,
        cm: f.get("cm").map(|v| parse_cm_offer(f, v)).transpose()?,
        keep_alive_ms: f.opt_uint("keep_alive_ms", crate::rounds::KEEP_ALIVE_MS)?,
    })
}

fn parse_next(f: Fields<'_>) -> Result<Next, ProtoError> {
    Ok(Next {
        length: f.uint("length", 1..=u64::MAX)?,
        crc32c: f.opt_uint("crc32c", 0..=u64::from(u32::MAX))?.map(narrow),
        pong: f.get("pong").map(|v| parse_pong(f, v)).transpose()?,
    })
}

/// `next.pong`: a `lat` round's buffer of the client's.
fn parse_pong(f: Fields<'_>, v: &Value) -> Result<PongBuffer, ProtoError> {
    let p = f.nested("pong", v, "next.pong")?;
    Ok(PongBuffer {
        addr: p.uint("addr", 0..=u64::MAX)?,
        rkey: p.u32("rkey", 0..=u32::MAX)?,
    })
}

fn parse_region(f: Fields<'_>) -> Result<Region, ProtoError> {
    Ok(Region {
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
        stamps: f.get("stamps").map(|v| parse_stamps(f, v)).transpose()?,
    })
}

/// `result.stamps`: the server's stamps of the stamped exchange, and its clock.
fn parse_stamps(f: Fields<'_>, v: &Value) -> Result<Turnaround, ProtoError> {
    let t = f.nested("stamps", v, "result.stamps")?;
    Ok(Turnaround {
        recv: t.uint("recv", 0..=u64::MAX)?,
        send: t.uint("send", 0..=u64::MAX)?,
        clock_khz: t.uint("clock_khz", 1..=u64::MAX)?,
        mask: t.uint("mask", 1..=u64::MAX)?,
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
