//! The server's sans-IO state machine: every wrong order and every refusal, in memory.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may unwrap (clippy.toml covers only #[test] fns)

mod common;

use common::*;
use rdma_proto::*;

// ---------------------------------------------------------------- server

#[test]
fn server_happy_imm_in_memory() {
    let mut s = accepted_server(Notify::Imm);
    assert_eq!(s.notify(), Some(Notify::Imm));
    let o = s.verify(PAYLOAD, Some(17), None);
    assert!(o.verified, "{o:?}");
    assert_eq!(o.reason, None);
    assert_eq!(
        (o.length, o.crc32c, o.text.as_str(), o.truncated),
        (17, crc32c(PAYLOAD), "Hello RDMA Write!", false)
    );
    s.result(o).unwrap();
    assert_eq!(s.state(), ServerState::Done);
}

#[test]
fn server_happy_tcp_in_memory() {
    let mut s = accepted_server(Notify::Tcp);
    let ev = s.on_message(written(17)).unwrap();
    assert_eq!(
        ev,
        ServerEvent::Written(Written {
            length: 17,
            crc32c: crc32c(PAYLOAD)
        })
    );
    assert_eq!(
        s.state(),
        ServerState::AwaitWrite {
            notify: Notify::Tcp
        }
    );
    let o = s.verify(PAYLOAD, None, None);
    assert!(o.verified, "{o:?}");
    s.result(o).unwrap();
    assert_eq!(s.state(), ServerState::Done);
}

#[test]
fn server_token_required_checked() {
    let mut s = server(Some("s3cret"));
    let e = assert_code(
        s.on_message(hello(Notify::Imm, 17, None)),
        ErrorCode::Unauthorized,
    );
    assert!(e.to_string().contains("requires a token"), "{e}");
    assert_eq!(s.state(), ServerState::Failed);

    let mut s = server(Some("s3cret"));
    let e = assert_code(
        s.on_message(hello(Notify::Imm, 17, Some("s3cres"))),
        ErrorCode::Unauthorized,
    );
    assert!(e.to_string().contains("wrong"), "{e}");
    // The error line sent back does not echo the token.
    let line = s.fail(&e).to_line();
    assert!(!line.contains("s3cre"), "{line}");

    for wrong in ["", "s3cret ", "s3cre", "S3CRET", "s3cret\0"] {
        let mut s = server(Some("s3cret"));
        assert_code(
            s.on_message(hello(Notify::Imm, 17, Some(wrong))),
            ErrorCode::Unauthorized,
        );
    }

    let mut s = server(Some("s3cret"));
    let ev = s
        .on_message(hello(Notify::Imm, 17, Some("s3cret")))
        .unwrap();
    // Accepted, and the token is dropped so it cannot end up in logs.
    assert!(
        matches!(ev, ServerEvent::Hello(Hello { token: None, .. })),
        "{ev:?}"
    );
    assert_eq!(s.hello().unwrap().token, None);
    assert!(!format!("{s:?}").contains("s3cret"), "{s:?}");
    // The policy's Debug output never shows the token.
    assert!(!format!("{:?}", policy(Some("s3cret"))).contains("s3cret"));
}

/// Issue 16, item 1: a server bound to its TCP peer refuses a hello that names another GID
/// (a victim's) before any accept, and takes one that names the peer's own; the token is
/// checked first, so a stranger learns nothing from the binding.
#[test]
fn a_bound_server_refuses_a_hello_for_another_gid() {
    let bound = |peer: &str, token: Option<&str>| {
        let mut s = ServerHandshake::new(policy(token));
        s.banner().unwrap();
        let binding = GidBinding::Peer {
            peer: peer.parse().unwrap(),
            local: vec![],
        };
        s.on_message(hello(Notify::Imm, 17, token))
            .and_then(|_| s.bind(binding))
            .map(|()| s)
    };
    // ep() announces ::ffff:10.0.0.1.
    let e = assert_code(bound("10.0.0.9", None), ErrorCode::InvalidField);
    assert!(e.to_string().contains("field `gid`"), "{e}");
    let s = bound("10.0.0.1", None).unwrap();
    assert_eq!(s.state(), ServerState::AwaitAccept);
    // The token is checked first, before any binding: a wrong one is refused as such.
    let mut s = ServerHandshake::new(policy(Some("s3cret")));
    s.banner().unwrap();
    assert_code(
        s.on_message(hello(Notify::Imm, 17, Some("wrong"))),
        ErrorCode::Unauthorized,
    );
    // A failed binding leaves the handshake failed; nothing can be accepted after it.
    let mut s = ServerHandshake::new(policy(None));
    s.banner().unwrap();
    s.on_message(hello(Notify::Imm, 17, None)).unwrap();
    assert!(
        s.bind(GidBinding::Peer {
            peer: "10.0.0.9".parse().unwrap(),
            local: vec![]
        })
        .is_err()
    );
    assert_eq!(s.state(), ServerState::Failed);
    assert_code(s.accept(ep(9), 1, 1, 64), ErrorCode::Internal);
}

/// Issue 23, items 2 and 3: the hello is admitted (token) before the server knows its port,
/// and no accept comes before the binding of that port: `accept` in `AwaitBinding` is misuse.
/// On a port with nothing to bind (InfiniBand), a bench hello needs the token; with the token
/// configured, or on RoCE, it passes.
#[test]
fn the_binding_comes_from_the_sessions_port_after_the_hello() {
    let bench_policy = |token: Option<&str>| ServerPolicy {
        bench_max_len: 1 << 20,
        ..policy(token)
    };
    let bench_hello = |token: Option<&str>| {
        ClientMessage::Hello(Hello {
            endpoint: ep(7),
            length: 4096,
            notify: Notify::Tcp,
            crc32c: None,
            token: token.map(str::to_owned),
            bench: Some(bench_params(BenchMode::Lat, vec![4096])),
            cm: false,
            rounds: false,
        })
    };
    let admitted = |token: Option<&str>| {
        let mut s = ServerHandshake::new(bench_policy(token));
        s.banner().unwrap();
        assert!(matches!(
            s.on_message(bench_hello(token)),
            Ok(ServerEvent::Hello(_))
        ));
        assert_eq!(s.state(), ServerState::AwaitBinding);
        s
    };
    let mut s = admitted(None);
    assert_code(s.accept(ep(9), 1, 1, 1 << 20), ErrorCode::Internal);
    let mut s = admitted(None);
    let e = assert_code(s.bind(GidBinding::Unbound), ErrorCode::InvalidField);
    assert!(e.to_string().contains("InfiniBand"), "{e}");
    assert!(e.to_string().contains("token"), "{e}");
    let mut s = admitted(Some("t"));
    s.bind(GidBinding::Unbound).unwrap();
    let mut s = admitted(None);
    s.bind(peer_binding()).unwrap();
    assert_eq!(s.state(), ServerState::AwaitAccept);
    assert_eq!(s.binding(), &peer_binding());
}

#[test]
fn server_without_token_ignores_a_token() {
    let mut s = server(None);
    assert!(
        s.on_message(hello(Notify::Imm, 17, Some("whatever")))
            .is_ok()
    );
}

#[test]
fn server_too_long() {
    let mut s = server(None);
    let e = assert_code(
        s.on_message(hello(Notify::Imm, 65, None)),
        ErrorCode::TooLong,
    );
    assert!(
        e.to_string().contains("65") && e.to_string().contains("64"),
        "{e}"
    );
    assert_eq!(s.state(), ServerState::Failed);
    // Exactly the buffer size is fine.
    let mut s = server(None);
    assert!(s.on_message(hello(Notify::Imm, 64, None)).is_ok());
}

#[test]
fn server_duplicate_hello() {
    let mut s = server(None);
    s.on_message(hello(Notify::Imm, 17, None)).unwrap();
    let e = assert_code(
        s.on_message(hello(Notify::Imm, 17, None)),
        ErrorCode::UnexpectedMessage,
    );
    assert!(e.to_string().contains("duplicate hello"), "{e}");
    assert_eq!(s.state(), ServerState::Failed);

    let mut s = accepted_server(Notify::Tcp);
    let e = assert_code(
        s.on_message(hello(Notify::Imm, 17, None)),
        ErrorCode::UnexpectedMessage,
    );
    assert!(e.to_string().contains("duplicate hello"), "{e}");
}

#[test]
fn server_message_before_banner() {
    let mut s = ServerHandshake::new(policy(None));
    assert_code(
        s.on_message(hello(Notify::Imm, 17, None)),
        ErrorCode::UnexpectedMessage,
    );
    assert_eq!(s.state(), ServerState::Failed);
}

#[test]
fn server_written_in_imm_mode() {
    let mut s = accepted_server(Notify::Imm);
    let e = assert_code(s.on_message(written(17)), ErrorCode::UnexpectedMessage);
    assert!(e.to_string().contains("notify=imm"), "{e}");
    assert_eq!(s.state(), ServerState::Failed);
}

#[test]
fn server_written_before_accept_and_before_hello() {
    let mut s = server(None);
    assert_code(s.on_message(written(17)), ErrorCode::UnexpectedMessage);
    let mut s = server(None);
    s.on_message(hello(Notify::Tcp, 17, None)).unwrap();
    assert_code(s.on_message(written(17)), ErrorCode::UnexpectedMessage);
}

#[test]
fn server_written_wrong_length_and_duplicate() {
    let mut s = accepted_server(Notify::Tcp);
    let e = assert_code(s.on_message(written(18)), ErrorCode::InvalidField);
    assert!(
        e.to_string().contains("18") && e.to_string().contains("17"),
        "{e}"
    );
    assert_eq!(s.state(), ServerState::Failed);

    let mut s = accepted_server(Notify::Tcp);
    s.on_message(written(17)).unwrap();
    assert_code(s.on_message(written(17)), ErrorCode::UnexpectedMessage);
}

#[test]
fn server_anything_after_done() {
    let mut s = accepted_server(Notify::Imm);
    let o = s.verify(PAYLOAD, Some(17), None);
    s.result(o).unwrap();
    assert_code(s.on_message(written(17)), ErrorCode::UnexpectedMessage);
    assert_code(
        s.result(s.verify(PAYLOAD, Some(17), None)),
        ErrorCode::Internal,
    );
}

#[test]
fn server_peer_error_fails() {
    for mut s in [server(None), accepted_server(Notify::Tcp)] {
        let ev = s
            .on_message(ClientMessage::Error(ErrorMsg::new(
                ErrorCode::WriteFailed,
                "boom",
            )))
            .unwrap();
        assert!(matches!(ev, ServerEvent::PeerError(ref m) if m.code == ErrorCode::WriteFailed));
        assert_eq!(s.state(), ServerState::Failed);
        assert_code(
            s.on_message(hello(Notify::Imm, 17, None)),
            ErrorCode::UnexpectedMessage,
        );
    }
}

#[test]
fn server_on_line_parse_error_fails() {
    let mut s = server(None);
    assert_code(s.on_line(b"{not json"), ErrorCode::BadJson);
    assert_eq!(s.state(), ServerState::Failed);
    let mut s = server(None);
    assert_code(
        s.on_line(b"{\"type\":\"hello\",\"v\":3}"),
        ErrorCode::UnsupportedVersion,
    );
    let msg = s.fail(&ProtoError::UnsupportedVersion { peer: vec![3] });
    let ServerMessage::Error(m) = msg else {
        panic!()
    };
    assert_eq!(m.supported, Some(vec![1]));
}

/// Every state the server reads a line in, fresh.
fn reading_servers() -> Vec<(&'static str, ServerHandshake)> {
    let mut tcp_written = accepted_server(Notify::Tcp);
    tcp_written.on_message(written(17)).unwrap();
    vec![
        ("awaiting hello", server(None)),
        ("awaiting the write (imm)", accepted_server(Notify::Imm)),
        ("awaiting the write (tcp)", accepted_server(Notify::Tcp)),
        ("after `written`", tcp_written),
    ]
}

#[test]
fn server_takes_every_line_while_it_waits_for_the_write() {
    // The client's `error` ends the session quietly, in any state.
    for (state, mut s) in reading_servers() {
        let line = ClientMessage::Error(ErrorMsg::new(ErrorCode::Timeout, "gave up")).to_line();
        let ev = s.on_line(line.as_bytes()).unwrap();
        assert!(
            matches!(ev, ServerEvent::PeerError(ref m) if m.code == ErrorCode::Timeout),
            "{state}: {ev:?}"
        );
        assert_eq!(s.state(), ServerState::Failed, "{state}");
    }
    // While the write is awaited, anything else is refused, with the code the client hears.
    let second_hello = hello(Notify::Imm, 17, None).to_line();
    let cases: [(&[u8], ErrorCode); 4] = [
        (b"{not json", ErrorCode::BadJson),
        (b"\xff\xfe", ErrorCode::BadUtf8),
        (second_hello.as_bytes(), ErrorCode::UnexpectedMessage),
        (
            b"{\"type\":\"accept\",\"v\":1}",
            ErrorCode::UnexpectedMessage,
        ),
    ];
    for (line, code) in cases {
        for notify in [Notify::Imm, Notify::Tcp] {
            let mut s = accepted_server(notify);
            let e = assert_code(s.on_line(line), code);
            assert_eq!(s.state(), ServerState::Failed, "{notify}: {e}");
            let ServerMessage::Error(m) = s.fail(&e) else {
                panic!()
            };
            assert_eq!(m.code, code);
        }
    }
    let mut s = accepted_server(Notify::Imm);
    let e = assert_code(
        s.on_line(hello(Notify::Imm, 17, None).to_line().as_bytes()),
        ErrorCode::UnexpectedMessage,
    );
    assert!(e.to_string().contains("duplicate hello"), "{e}");
}

#[test]
fn server_read_errors_are_answered_by_the_machine() {
    let timeout = || FrameError::Timeout {
        after: std::time::Duration::from_secs(3),
    };
    for (state, mut s) in reading_servers() {
        let Some(ServerMessage::Error(m)) = s.on_read_error(&timeout()) else {
            panic!("{state}: a timeout is answered")
        };
        assert_eq!(m.code, ErrorCode::Timeout, "{state}");
        assert!(m.message.contains("timed out"), "{state}: {}", m.message);
        assert_eq!(s.state(), ServerState::Failed, "{state}");
    }
    for (state, mut s) in reading_servers() {
        let Some(ServerMessage::Error(m)) =
            s.on_read_error(&FrameError::LineTooLong { max: 65536 })
        else {
            panic!("{state}: a line too long is answered")
        };
        assert_eq!(m.code, ErrorCode::LineTooLong, "{state}");
        assert_eq!(s.state(), ServerState::Failed, "{state}");
    }
    // A client that is gone hears nothing; the machine still fails.
    let gone = [
        FrameError::Closed,
        FrameError::Truncated,
        FrameError::Io(std::io::Error::from(std::io::ErrorKind::ConnectionReset)),
    ];
    for e in gone {
        for (state, mut s) in reading_servers() {
            assert!(s.on_read_error(&e).is_none(), "{state}: {e}");
            assert_eq!(s.state(), ServerState::Failed, "{state}");
            assert!(e.peer_gone());
        }
    }
    assert!(!timeout().peer_gone());
}

/// A server's `reason` is peer text: the client's error quotes it escaped (issue 16, item 6).
#[test]
fn client_escapes_the_servers_reason() {
    let mut c = written_client(Notify::Imm);
    let ServerMessage::Result(mut o) = outcome(false, 17, 0xdead) else {
        panic!()
    };
    o.reason = Some("bad\n[9] verified\u{1b}[31m".to_owned());
    let err = c
        .on_result(ServerMessage::Result(o))
        .unwrap_err()
        .to_string();
    assert!(!err.chars().any(char::is_control), "{err:?}");
    assert!(err.contains("\\n[9] verified\\u{1b}[31m"), "{err}");
}

#[test]
fn client_keeps_a_result_that_fails_its_checks() {
    let mut c = written_client(Notify::Imm);
    assert!(c.outcome().is_none());
    let other = outcome(false, 17, 0xdead);
    assert_code(c.on_result(other.clone()), ErrorCode::VerifyFailed);
    let ServerMessage::Result(o) = other else {
        panic!()
    };
    assert_eq!(c.outcome(), Some(&o));
}

#[test]
fn server_misuse_is_internal() {
    let mut s = server(None);
    assert_code(s.banner(), ErrorCode::Internal); // twice
    let mut s = server(None);
    assert_code(s.accept(ep(1), 1, 1, 64), ErrorCode::Internal); // before hello
    let mut s = server(None);
    assert_code(s.result(s.verify(PAYLOAD, None, None)), ErrorCode::Internal);
    let mut s = accepted_server(Notify::Imm);
    assert_code(s.accept(ep(1), 1, 1, 64), ErrorCode::Internal); // twice
}

#[test]
fn server_accept_checks() {
    let mut s = server(None);
    admit(&mut s, hello(Notify::Imm, 17, None));
    assert_code(s.accept(ep(9), 1, 1, 16), ErrorCode::TooLong);
    assert_eq!(s.state(), ServerState::Failed);

    let mut s = server(None);
    admit(&mut s, hello(Notify::Imm, 17, None));
    let e = assert_code(s.accept(ep(1 << 24), 1, 1, 64), ErrorCode::InvalidField);
    assert!(e.to_string().contains("qpn"), "{e}");

    let mut s = server(None);
    admit(&mut s, hello(Notify::Imm, 17, None));
    let mut bad = ep(1);
    bad.mtu = 1500;
    assert_code(s.accept(bad, 1, 1, 64), ErrorCode::InvalidField);
}

#[test]
fn server_fail_gives_error_line() {
    let mut s = server(None);
    let msg = s.fail(&ProtoError::new(
        ErrorCode::Busy,
        "server at its client cap (4); retry later",
    ));
    assert_eq!(s.state(), ServerState::Failed);
    assert_eq!(
        msg.to_line(),
        "{\"type\":\"error\",\"v\":1,\"code\":\"busy\",\"message\":\"server at its client cap (4); retry later\"}\n"
    );
}

#[test]
fn verify_reports_each_failed_check() {
    let mut s = accepted_server(Notify::Imm);
    // Wrong immediate.
    let o = s.verify(PAYLOAD, Some(16), None);
    assert!(!o.verified);
    assert!(
        o.reason.as_deref().unwrap().contains("immediate data 16"),
        "{o:?}"
    );
    // No immediate.
    let o = s.verify(PAYLOAD, None, None);
    assert!(
        o.reason.as_deref().unwrap().contains("no immediate"),
        "{o:?}"
    );
    // Wrong length and content.
    let o = s.verify(b"Hello RDMA Write", Some(17), None);
    let r = o.reason.clone().unwrap();
    assert!(
        r.contains("saw 16 bytes") && r.contains("hello announced"),
        "{r}"
    );
    assert_eq!(o.length, 16);
    // Same length, different content: crc mismatch against hello.
    let o = s.verify(b"Hello RDMA Wrote!", Some(17), None);
    assert!(!o.verified);
    assert!(o.reason.as_deref().unwrap().contains("crc32c"), "{o:?}");
    assert_eq!(o.text, "Hello RDMA Wrote!");
    s.result(o).unwrap();

    let s = accepted_server(Notify::Tcp);
    let o = s.verify(PAYLOAD, None, None);
    assert!(
        o.reason.as_deref().unwrap().contains("no `written`"),
        "{o:?}"
    );
    let bad = Written {
        length: 17,
        crc32c: 1,
    };
    let o = s.verify(PAYLOAD, None, Some(&bad));
    assert!(
        o.reason.as_deref().unwrap().contains("`written` says"),
        "{o:?}"
    );
    let good = Written {
        length: 17,
        crc32c: crc32c(PAYLOAD),
    };
    assert!(s.verify(PAYLOAD, None, Some(&good)).verified);

    // Without hello.crc32c, only length + immediate are checked.
    let mut s = server(None);
    s.on_message(ClientMessage::Hello(Hello {
        endpoint: ep(7),
        length: 3,
        notify: Notify::Imm,
        crc32c: None,
        token: None,
        bench: None,
        cm: false,
        rounds: false,
    }))
    .unwrap();
    assert!(s.verify(b"abc", Some(3), None).verified);
    // Before any hello, nothing verifies.
    assert!(!server(None).verify(b"abc", Some(3), None).verified);
}
