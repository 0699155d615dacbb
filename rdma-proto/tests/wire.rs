//! Wire encoding details that the golden files do not pin: tolerance rules, types, helpers.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may unwrap (clippy.toml covers only #[test] fns)

use std::net::Ipv6Addr;

use rdma_proto::*;

#[test]
fn unknown_fields_are_ignored_and_null_is_absent() {
    let line = br#"{"type":"hello","v":1,"qpn":1,"psn":2,"gid":"fe80::1","lid":0,"mtu":4096,"length":5,"notify":"tcp","crc32c":null,"future":{"x":[1,2]},"token":null}"#;
    let ClientMessage::Hello(h) = ClientMessage::parse(line).unwrap() else {
        panic!()
    };
    assert_eq!(h.crc32c, None);
    assert_eq!(h.token, None);
    assert_eq!(h.notify, Notify::Tcp);
    assert_eq!(h.endpoint.gid.to_string(), "fe80::1");
    // Field order does not matter either.
    let line = br#"{"crc32c":7,"length":5,"notify":"imm","mtu":256,"lid":65535,"gid":"::","psn":16777215,"qpn":0,"v":1,"type":"hello"}"#;
    let ClientMessage::Hello(h) = ClientMessage::parse(line).unwrap() else {
        panic!()
    };
    assert_eq!(
        (h.endpoint.lid, h.endpoint.psn, h.crc32c),
        (65535, 0xFF_FFFF, Some(7))
    );
}

#[test]
fn line_endings_and_whitespace_tolerated() {
    let base = r#"{"type":"written","v":1,"length":3,"crc32c":9}"#;
    for line in [
        format!("{base}\n"),
        format!("{base}\r\n"),
        format!("  {base}  "),
        base.replace(',', " , "),
    ] {
        assert_eq!(
            ClientMessage::parse(line.as_bytes()).unwrap(),
            ClientMessage::Written(Written {
                length: 3,
                crc32c: 9
            }),
            "{line:?}"
        );
    }
}

#[test]
fn full_64_bit_addr_survives() {
    let a = Accept {
        endpoint: QpEndpoint {
            qpn: 1,
            psn: 2,
            gid: Gid::from(Ipv6Addr::LOCALHOST),
            lid: 3,
            mtu: 2048,
        },
        addr: u64::MAX,
        rkey: u32::MAX,
        buf_len: u64::MAX,
        cm: None,
        keep_alive_ms: None,
    };
    let line = ServerMessage::Accept(a).to_line();
    assert!(line.contains("\"addr\":18446744073709551615"), "{line}");
    assert_eq!(
        ServerMessage::parse(line.as_bytes()).unwrap(),
        ServerMessage::Accept(a)
    );
}

#[test]
fn error_message_with_unknown_code_is_kept() {
    let line = br#"{"type":"error","v":1,"code":"quota_exceeded","message":"try tomorrow"}"#;
    let ServerMessage::Error(e) = ServerMessage::parse(line).unwrap() else {
        panic!()
    };
    assert_eq!(e.code, ErrorCode::Internal);
    assert_eq!(e.message, "[quota_exceeded] try tomorrow");
    let line =
        br#"{"type":"error","v":1,"code":"unsupported_version","message":"m","supported":[1,2]}"#;
    let ServerMessage::Error(e) = ServerMessage::parse(line).unwrap() else {
        panic!()
    };
    assert_eq!(
        (e.code, e.supported),
        (ErrorCode::UnsupportedVersion, Some(vec![1, 2]))
    );
}

#[test]
fn error_codes_roundtrip_as_snake_case() {
    for code in ErrorCode::ALL {
        assert_eq!(code.as_str().parse::<ErrorCode>().unwrap(), code);
        assert_eq!(
            serde_json::to_string(&code).unwrap(),
            format!("\"{}\"", code.as_str())
        );
        assert_eq!(code.to_string(), code.as_str());
        let m = ClientMessage::Error(ErrorMsg::new(code, "x"));
        assert_eq!(ClientMessage::parse(m.to_line().as_bytes()).unwrap(), m);
    }
    assert_eq!(
        ErrorCode::UnsupportedVersion.as_str(),
        "unsupported_version"
    );
    assert!("nope".parse::<ErrorCode>().is_err());
}

#[test]
fn kinds() {
    assert_eq!(
        ClientMessage::Written(Written {
            length: 1,
            crc32c: 0
        })
        .kind(),
        "written"
    );
    assert_eq!(
        ServerMessage::Error(ErrorMsg::new(ErrorCode::Busy, "")).kind(),
        "error"
    );
}

#[test]
fn gid_text_forms() {
    let g: Gid = "::ffff:10.0.0.2".parse().unwrap();
    assert_eq!(g.0[10..], [0xff, 0xff, 10, 0, 0, 2]);
    assert_eq!(g.to_string(), "::ffff:10.0.0.2");
    let g: Gid = "fe80::5054:ff:fe12:3401".parse().unwrap();
    assert_eq!(g.0[0..2], [0xfe, 0x80]);
    assert_eq!(g.to_string(), "fe80::5054:ff:fe12:3401");
    assert_eq!(
        Ipv6Addr::from(g),
        "fe80::5054:ff:fe12:3401".parse::<Ipv6Addr>().unwrap()
    );
    assert_eq!(
        serde_json::to_string(&g).unwrap(),
        "\"fe80::5054:ff:fe12:3401\""
    );
    assert_eq!(
        serde_json::from_str::<Gid>("\"fe80::5054:ff:fe12:3401\"").unwrap(),
        g
    );
    let e = "10.0.0.2".parse::<Gid>().unwrap_err();
    assert!(e.to_string().contains("IPv6"), "{e}");
    assert!(serde_json::from_str::<Gid>("\"nope\"").is_err());
}

#[test]
fn notify_and_auth_text() {
    assert_eq!(Notify::default(), Notify::Imm);
    assert_eq!("tcp".parse::<Notify>().unwrap(), Notify::Tcp);
    assert_eq!(Notify::Imm.to_string(), "imm");
    let e = "TCP".parse::<Notify>().unwrap_err();
    assert!(e.to_string().contains("`imm`"), "{e}");
    assert_eq!(serde_json::to_string(&Notify::Tcp).unwrap(), "\"tcp\"");
    assert_eq!("token".parse::<Auth>().unwrap(), Auth::Token);
    assert_eq!(serde_json::to_string(&Auth::None).unwrap(), "\"none\"");
}

#[test]
fn error_messages_name_field_and_range() {
    let line = br#"{"type":"hello","v":1,"qpn":16777216,"psn":0,"gid":"::1","lid":0,"mtu":1024,"length":1,"notify":"imm"}"#;
    let e = ClientMessage::parse(line).unwrap_err();
    assert_eq!(
        e.to_string(),
        "field `qpn` of `hello`: 16777216 is out of range 0..=16777215"
    );
    let e = ClientMessage::parse(b"{\"type\":\"hello\",").unwrap_err();
    assert!(e.to_string().contains("line 1 column"), "{e}");
    let e = ClientMessage::parse(br#"{"type":"hello","v":7}"#).unwrap_err();
    assert_eq!(e.to_error_msg().supported, Some(vec![1]));
    assert!(
        e.to_string().contains("[7]") && e.to_string().contains("[1]"),
        "{e}"
    );
}

#[test]
fn hostile_values_are_not_echoed_in_full() {
    let ty = "x".repeat(10_000);
    let line = format!(r#"{{"type":"{ty}","v":1}}"#);
    let e = ClientMessage::parse(line.as_bytes()).unwrap_err();
    assert_eq!(e.code(), ErrorCode::UnknownType);
    assert!(e.to_string().len() < 300, "{}", e.to_string().len());
}

#[test]
fn deep_nesting_is_a_clean_error() {
    let line = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    assert_eq!(
        ClientMessage::parse(line.as_bytes()).unwrap_err().code(),
        ErrorCode::BadJson
    );
    let line = format!(
        r#"{{"type":"hello","v":1,"x":{}1{}}}"#,
        "[".repeat(5000),
        "]".repeat(5000)
    );
    assert_eq!(
        ClientMessage::parse(line.as_bytes()).unwrap_err().code(),
        ErrorCode::BadJson
    );
}

#[test]
fn proto_error_new_and_remote_display() {
    let e = ProtoError::new(
        ErrorCode::RdmaSetup,
        "ibv_create_qp failed: ENOMEM; lower --max-clients",
    );
    assert_eq!(e.code(), ErrorCode::RdmaSetup);
    assert_eq!(
        e.to_error_msg(),
        ErrorMsg::new(
            ErrorCode::RdmaSetup,
            "ibv_create_qp failed: ENOMEM; lower --max-clients"
        )
    );
    let r = ProtoError::Remote(ErrorMsg::new(
        ErrorCode::Forbidden,
        "10.0.0.9 is not in --allow",
    ));
    assert_eq!(
        r.to_string(),
        "server said: forbidden: 10.0.0.9 is not in --allow"
    );
    assert_eq!(r.code(), ErrorCode::Forbidden);
}

#[test]
fn constants() {
    assert_eq!(PROTOCOL_VERSION, 1);
    assert_eq!(SUPPORTED_VERSIONS, &[1]);
    assert_eq!(DEFAULT_PORT, 7471);
    assert_eq!(DEFAULT_MAX_LINE, 65536);
    assert_eq!(MAX_TEXT, 1024);
}

#[test]
fn peer_text_is_made_safe_to_print() {
    assert_eq!(
        rdma_proto::printable("ok\u{1b}[31mred\u{0}"),
        "ok\\u{1b}[31mred\\0"
    );
    // Issue 23, item 9: what reorders or hides text is escaped too, visibly.
    let deceptive =
        "admin\u{202e}txt.exe\u{2066}\u{2069}a\u{2028}b\u{2029}c\u{200b}d\u{200d}e\u{feff}";
    let shown = rdma_proto::printable(deceptive);
    assert_eq!(
        shown,
        "admin\\u{202e}txt.exe\\u{2066}\\u{2069}a\\u{2028}b\\u{2029}c\\u{200b}d\\u{200d}e\\u{feff}"
    );
    assert!(!shown.chars().any(rdma_proto::is_deceptive));
    // Letters of every script stay as they are.
    assert_eq!(rdma_proto::printable("héllo 世界 שלום"), "héllo 世界 שלום");
    assert_eq!(
        rdma_proto::printable("Hello RDMA Write! 你好"),
        "Hello RDMA Write! 你好"
    );
    let line = br#"{"type":"error","v":1,"code":"busy","message":"try later\u001b]0;pwned\u0007"}"#;
    let msg = rdma_proto::ServerMessage::parse(line).unwrap();
    let rdma_proto::ServerMessage::Error(e) = msg else {
        panic!("not an error: {msg:?}")
    };
    let shown = rdma_proto::ProtoError::Remote(e).to_string();
    assert!(!shown.chars().any(char::is_control), "{shown:?}");
    assert!(shown.contains("try later"), "{shown}");
}

/// Every string a peer sends that an error message quotes (type, notify, mode, GID text, auth,
/// an unknown error code, a result's reason) arrives escaped: a forged "\n[9] verified" line or
/// an ANSI escape never reaches a log as such (issue 16, item 6).
#[test]
fn peer_strings_quoted_in_errors_are_escaped() {
    let forged = r#"x\n[9] verified\u001b[31m"#;
    let hello = |field: &str| {
        let mut h = serde_json::json!({"type":"hello","v":1,"qpn":17,"psn":1,
            "gid":"::ffff:10.0.0.2","lid":0,"mtu":1024,"length":5,"crc32c":1,"notify":"tcp"});
        h[field] = serde_json::Value::String(String::new());
        h.to_string().replace(r#""""#, &format!(r#""{forged}""#))
    };
    let mut bench = serde_json::json!({"type":"hello","v":1,"qpn":17,"psn":1,
        "gid":"::ffff:10.0.0.2","lid":0,"mtu":1024,"length":8,"crc32c":1,"notify":"tcp",
        "bench":{"mode":"","sizes":[8],"iters":1}})
    .to_string();
    bench = bench.replace(r#""mode":"""#, &format!(r#""mode":"{forged}""#));
    let lines = [
        format!(r#"{{"type":"{forged}","v":1}}"#),
        hello("notify"),
        hello("gid"),
        bench,
    ];
    for line in &lines {
        let err = ClientMessage::parse(line.as_bytes())
            .unwrap_err()
            .to_string();
        assert!(!err.chars().any(char::is_control), "{line} -> {err:?}");
        assert!(err.contains(r"\n[9] verified"), "{line} -> {err}");
        assert!(err.contains(r"\u{1b}[31m"), "{line} -> {err}");
    }
    let server = [
        format!(r#"{{"type":"{forged}","v":1}}"#),
        format!(
            r#"{{"type":"banner","v":1,"versions":[1],"program":"s","program_version":"1","features":[],"auth":"{forged}"}}"#
        ),
    ];
    for line in &server {
        let err = ServerMessage::parse(line.as_bytes())
            .unwrap_err()
            .to_string();
        assert!(!err.chars().any(char::is_control), "{line} -> {err:?}");
        assert!(err.contains(r"\n[9] verified"), "{line} -> {err}");
    }
    // An unknown error code is kept in the message, escaped.
    let line = format!(r#"{{"type":"error","v":1,"code":"{forged}","message":"m"}}"#);
    let ServerMessage::Error(e) = ServerMessage::parse(line.as_bytes()).unwrap() else {
        panic!("not an error")
    };
    let shown = ProtoError::Remote(e).to_string();
    assert!(!shown.chars().any(char::is_control), "{shown:?}");
}
