//! Pure checks of what the server sent: one line parsed strictly, secrets before a valid
//! hello, banners, accepts, and whether an answer is the one a case expects.

use serde_json::{Value, json};

/// Secret fields that must not appear before a valid hello.
const SECRET_FIELDS: [&str; 3] = ["rkey", "addr", "qpn"];

/// What the server should answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Answer {
    /// An `error` line with this code (and text in `message`), then a close.
    Error {
        code: &'static str,
        mentions: Option<&'static str>,
    },
    /// A close without any line.
    Close,
}

/// What came from the server.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Got {
    /// One line, parsed as a JSON object with `type` and `v: 1`.
    Line(Value),
    /// The server closed the connection (FIN).
    Eof,
    /// The server reset the connection (RST: it closed with our bytes unread).
    Reset,
    /// Nothing within the deadline.
    Timeout,
    /// Something that breaks the protocol, or a secret leaked.
    Bad(String),
}

impl Got {
    pub(crate) fn describe(&self) -> String {
        match self {
            Got::Line(v) => format!("line {}", shorten(&v.to_string(), 300)),
            Got::Eof => "a close".to_owned(),
            Got::Reset => "a connection reset".to_owned(),
            Got::Timeout => "nothing before the deadline".to_owned(),
            Got::Bad(s) => s.clone(),
        }
    }
}

/// Matches what came against the answer the case expects; `Ok` describes it.
pub(crate) fn check_answer(want: &Answer, got: &Got) -> Result<String, String> {
    match (want, got) {
        (Answer::Error { code, mentions }, Got::Line(v)) => {
            let ty = v.get("type").and_then(Value::as_str);
            let got_code = v.get("code").and_then(Value::as_str);
            let message = v.get("message").and_then(Value::as_str);
            match (ty, got_code, message) {
                (Some("error"), Some(c), Some(m)) if c == *code && !m.is_empty() => {
                    if let Some(word) = mentions
                        && !m.contains(word)
                    {
                        return Err(format!(
                            "error `{c}` as expected, but its message does not name `{word}`: {m:?}"
                        ));
                    }
                    Ok(format!("error {c}: {:?}", shorten(m, 120)))
                }
                (Some("error"), Some(c), _) if c == *code => Err(format!(
                    "error `{c}` without a `message` text: {}",
                    got.describe()
                )),
                _ => Err(format!("expected error `{code}`, got {}", got.describe())),
            }
        }
        (Answer::Error { code, .. }, other) => {
            Err(format!("expected error `{code}`, got {}", other.describe()))
        }
        (Answer::Close, Got::Eof | Got::Reset) => {
            Ok(format!("closed without a reply ({})", got.describe()))
        }
        (Answer::Close, other) => Err(format!(
            "expected a close without a reply, got {}",
            other.describe()
        )),
    }
}

/// Checks a banner: right type and version, speaks v1, says whether a token is needed.
pub(crate) fn check_banner(v: &Value, token_required: bool) -> Result<(), String> {
    if v.get("type") != Some(&json!("banner")) {
        return Err(format!(
            "expected a banner, got {}",
            shorten(&v.to_string(), 300)
        ));
    }
    let speaks_v1 = v
        .get("versions")
        .and_then(Value::as_array)
        .is_some_and(|vs| vs.contains(&json!(1)));
    if !speaks_v1 {
        return Err(format!("banner without version 1 in `versions`: {v}"));
    }
    let want = if token_required { "token" } else { "none" };
    if v.get("auth").and_then(Value::as_str) != Some(want) {
        return Err(format!(
            "banner says auth {:?} but the harness says {want:?} (--token given: {token_required})",
            v.get("auth")
        ));
    }
    Ok(())
}

/// Checks an accept for a hello of `length` bytes; returns its rkey.
pub(crate) fn check_accept(got: &Got, length: u64, buffer_size: u64) -> Result<u32, String> {
    let v = match got {
        Got::Line(v) if v.get("type") == Some(&json!("accept")) => v,
        other => {
            return Err(format!(
                "expected an accept for a valid hello, got {}",
                other.describe()
            ));
        }
    };
    let num = |k: &str| v.get(k).and_then(Value::as_u64);
    let (Some(qpn), Some(psn), Some(addr), Some(rkey), Some(buf_len)) = (
        num("qpn"),
        num("psn"),
        num("addr"),
        num("rkey"),
        num("buf_len"),
    ) else {
        return Err(format!("accept with a missing or non-integer field: {v}"));
    };
    let rkey = u32::try_from(rkey).map_err(|_| format!("accept rkey {rkey} is not a u32"))?;
    if qpn > 0xFF_FFFF || psn > 0xFF_FFFF {
        return Err(format!("accept qpn/psn out of 24-bit range: {v}"));
    }
    if addr == 0 {
        return Err(format!("accept offers address 0: {v}"));
    }
    // The server registers at a random IOVA at or above 2^48: below that, `addr` could be (and
    // used to be) a pointer into its heap.
    if addr < MIN_IOVA {
        return Err(format!(
            "accept offers addr {addr:#x}, below 2^48: a user-space address, disclosing the server's heap layout (it must register at a random IOVA)"
        ));
    }
    if buf_len != buffer_size {
        return Err(format!(
            "accept offers buf_len {buf_len}, but the harness says --buffer-size {buffer_size}"
        ));
    }
    if buf_len < length {
        return Err(format!(
            "accept offers {buf_len} bytes for a {length}-byte hello"
        ));
    }
    Ok(rkey)
}

/// The lowest `accept.addr` the server may offer (see `rdma_core_rs`'s `IOVA_MIN`).
pub(crate) const MIN_IOVA: u64 = 1 << 48;

/// The fields that must not appear in a line sent before a valid hello.
pub(crate) fn secrets_in(v: &Value) -> Vec<&'static str> {
    SECRET_FIELDS
        .iter()
        .copied()
        .filter(|k| v.get(*k).is_some())
        .collect()
}

/// Parses one line from the server: UTF-8, a JSON object, `type` a string, `v` = 1.
pub(crate) fn parse_server_line(bytes: &[u8]) -> Result<Value, String> {
    let text = std::str::from_utf8(bytes)
        .map_err(|e| format!("server sent a line that is not UTF-8 ({e})"))?;
    let v: Value = serde_json::from_str(text).map_err(|e| {
        format!(
            "server sent a line that is not JSON ({e}): {}",
            shorten(text, 200)
        )
    })?;
    if !v.is_object() || !v.get("type").is_some_and(Value::is_string) {
        return Err(format!(
            "server sent a line that is not a typed object: {}",
            shorten(text, 200)
        ));
    }
    if v.get("v") != Some(&json!(1)) {
        return Err(format!(
            "server line without `v: 1`: {}",
            shorten(text, 200)
        ));
    }
    Ok(v)
}

/// `s`, cut to at most `max` bytes (on a character boundary) with an ellipsis.
pub(crate) fn shorten(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", s.get(..end).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_matched_by_code_message_and_close() {
        let err = |code: &str, msg: &str| {
            Got::Line(json!({"type": "error", "v": 1, "code": code, "message": msg}))
        };
        let e = |code| Answer::Error {
            code,
            mentions: None,
        };
        assert!(check_answer(&e("bad_json"), &err("bad_json", "bad JSON")).is_ok());
        assert!(check_answer(&e("bad_json"), &err("bad_utf8", "x")).is_err());
        assert!(check_answer(&e("bad_json"), &err("bad_json", "")).is_err());
        assert!(check_answer(&e("bad_json"), &Got::Eof).is_err());
        assert!(check_answer(&e("bad_json"), &Got::Timeout).is_err());
        let banner = Got::Line(json!({"type": "banner", "v": 1}));
        assert!(check_answer(&e("bad_json"), &banner).is_err());
        let m = Answer::Error {
            code: "invalid_field",
            mentions: Some("qpn"),
        };
        assert!(check_answer(&m, &err("invalid_field", "field `qpn` of `hello`")).is_ok());
        assert!(check_answer(&m, &err("invalid_field", "field `psn`")).is_err());
        assert!(check_answer(&Answer::Close, &Got::Eof).is_ok());
        assert!(check_answer(&Answer::Close, &Got::Reset).is_ok());
        assert!(check_answer(&Answer::Close, &err("internal", "x")).is_err());
        assert!(check_answer(&Answer::Close, &Got::Timeout).is_err());
    }

    #[test]
    fn server_lines_are_parsed_strictly_and_checked_for_secrets() {
        assert!(parse_server_line(b"{\"type\":\"banner\",\"v\":1}").is_ok());
        assert!(parse_server_line(b"{\"type\":\"banner\",\"v\":2}").is_err());
        assert!(parse_server_line(b"[1]").is_err());
        assert!(parse_server_line(b"{\"v\":1}").is_err());
        assert!(parse_server_line(b"\xff").is_err());
        let v = json!({"type": "error", "v": 1, "rkey": 1, "qpn": 2});
        assert_eq!(secrets_in(&v), vec!["rkey", "qpn"]);
        assert!(secrets_in(&json!({"type": "banner", "message": "rkey addr qpn"})).is_empty());
    }

    #[test]
    fn shorten_cuts_on_a_char_boundary() {
        assert_eq!(shorten("abc", 3), "abc");
        assert_eq!(shorten("abcdef", 3), "abc…");
        assert_eq!(shorten("héllo", 2), "h…");
    }

    #[test]
    fn banners_and_accepts_are_checked() {
        let b = json!({"type": "banner", "v": 1, "versions": [1], "features": [], "auth": "none"});
        assert!(check_banner(&b, false).is_ok());
        assert!(check_banner(&b, true).is_err());
        let b2 = json!({"type": "banner", "v": 1, "versions": [2], "auth": "none"});
        assert!(check_banner(&b2, false).is_err());
        let acc = |addr: u64, buf: u64| {
            Got::Line(
                json!({"type": "accept", "v": 1, "qpn": 18, "psn": 5, "gid": "::1",
                "lid": 0, "mtu": 1024, "addr": addr, "rkey": 77, "buf_len": buf}),
            )
        };
        assert_eq!(
            check_accept(&acc(0x4a5e_0000_0000_1000, 64), 17, 64),
            Ok(77)
        );
        assert!(check_accept(&acc(0, 64), 17, 64).is_err());
        assert!(check_accept(&acc(MIN_IOVA, 32), 17, 64).is_err());
        let heap = check_accept(&acc(0x7f00_0000_1000, 64), 17, 64).unwrap_err();
        assert!(heap.contains("heap"), "{heap}");
        assert!(check_accept(&Got::Eof, 17, 64).is_err());
    }
}
