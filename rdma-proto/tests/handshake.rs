//! The sans-IO state machines: every wrong order and every refusal, both sides, in memory.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may unwrap (clippy.toml covers only #[test] fns)

mod common;

use common::{ep, policy};
use rdma_proto::*;

const PAYLOAD: &[u8] = b"Hello RDMA Write!";

fn hello(notify: Notify, length: u64, token: Option<&str>) -> ClientMessage {
    ClientMessage::Hello(Hello {
        endpoint: ep(7),
        length,
        notify,
        crc32c: Some(crc32c(PAYLOAD)),
        token: token.map(str::to_owned),
        bench: None,
        cm: false,
        rounds: false,
    })
}

fn written(length: u64) -> ClientMessage {
    ClientMessage::Written(Written {
        length,
        crc32c: crc32c(PAYLOAD),
    })
}

/// A server that has sent its banner.
fn server(token: Option<&str>) -> ServerHandshake {
    let mut s = ServerHandshake::new(policy(token));
    assert_eq!(s.state(), ServerState::Start);
    let b = s.banner().unwrap();
    assert_eq!(s.state(), ServerState::AwaitHello);
    let ServerMessage::Banner(b) = b else {
        panic!()
    };
    assert_eq!(
        b.auth,
        if token.is_some() {
            Auth::Token
        } else {
            Auth::None
        }
    );
    s
}

/// The binding of a connection from 10.0.0.1 (whose GID `ep` announces), on RoCE.
fn peer_binding() -> GidBinding {
    GidBinding::Peer {
        peer: "10.0.0.1".parse().unwrap(),
        local: vec![],
    }
}

/// Feeds `msg` (a hello) and binds it to its connection from 10.0.0.1, as a server does once
/// it has picked the port: `AwaitHello -> AwaitBinding -> AwaitAccept`.
fn admit(s: &mut ServerHandshake, msg: ClientMessage) -> ServerEvent {
    let event = s.on_message(msg).unwrap();
    assert_eq!(s.state(), ServerState::AwaitBinding);
    s.bind(peer_binding()).unwrap();
    event
}

/// A server in AwaitWrite.
fn accepted_server(notify: Notify) -> ServerHandshake {
    let mut s = server(None);
    admit(&mut s, hello(notify, 17, None));
    assert_eq!(s.state(), ServerState::AwaitAccept);
    s.accept(ep(9), 0x1_0000_0000, 5, 64).unwrap();
    assert_eq!(s.state(), ServerState::AwaitWrite { notify });
    s
}

fn assert_code<T: std::fmt::Debug>(r: Result<T, ProtoError>, code: ErrorCode) -> ProtoError {
    let e = r.expect_err("expected an error");
    assert_eq!(e.code(), code, "{e}");
    e
}

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

// ---------------------------------------------------------------- client

fn client(notify: Notify, token: Option<&str>) -> ClientHandshake {
    ClientHandshake::new(ClientRequest::for_payload(
        PAYLOAD,
        notify,
        token.map(str::to_owned),
    ))
}

fn banner(versions: Vec<u32>, auth: Auth) -> ServerMessage {
    ServerMessage::Banner(Banner {
        program: "rdma-server".into(),
        program_version: "9.9.9".into(),
        versions,
        features: vec!["notify-imm".into(), "something-new".into()],
        auth,
    })
}

fn accept_msg(buf_len: u64) -> ServerMessage {
    ServerMessage::Accept(Accept {
        endpoint: ep(9),
        addr: 0xffff_ffff_ffff_f000,
        rkey: 0xdead_beef,
        buf_len,
        cm: None,
        keep_alive_ms: None,
    })
}

fn outcome(verified: bool, length: u64, crc: u32) -> ServerMessage {
    ServerMessage::Result(Outcome {
        verified,
        length,
        crc32c: crc,
        text: "Hello RDMA Write!".into(),
        truncated: false,
        reason: (!verified).then(|| "crc32c of the buffer is 0x00000000".to_owned()),
    })
}

/// A client in AwaitResult.
fn written_client(notify: Notify) -> ClientHandshake {
    let mut c = client(notify, None);
    c.on_banner(banner(vec![1], Auth::None)).unwrap();
    assert_eq!(c.state(), ClientState::NeedHello);
    c.hello(ep(7)).unwrap();
    assert_eq!(c.state(), ClientState::AwaitAccept);
    let a = c.on_accept(accept_msg(64)).unwrap();
    assert_eq!(a.addr, 0xffff_ffff_ffff_f000);
    assert_eq!(c.state(), ClientState::Writing);
    let w = c.written().unwrap();
    assert_eq!(w.is_some(), notify == Notify::Tcp);
    assert_eq!(c.state(), ClientState::AwaitResult);
    c
}

#[test]
fn client_happy_both_modes() {
    for notify in [Notify::Imm, Notify::Tcp] {
        let mut c = written_client(notify);
        let o = c.on_result(outcome(true, 17, crc32c(PAYLOAD))).unwrap();
        assert!(o.verified);
        assert_eq!(c.state(), ClientState::Done);
    }
}

#[test]
fn client_written_message_contents() {
    let mut c = client(Notify::Tcp, None);
    c.on_banner(banner(vec![1], Auth::None)).unwrap();
    c.hello(ep(7)).unwrap();
    c.on_accept(accept_msg(17)).unwrap();
    assert_eq!(
        c.written().unwrap(),
        Some(ClientMessage::Written(Written {
            length: 17,
            crc32c: crc32c(PAYLOAD)
        }))
    );
}

#[test]
fn client_accept_before_banner() {
    let mut c = client(Notify::Imm, None);
    assert_code(c.on_banner(accept_msg(64)), ErrorCode::UnexpectedMessage);
    assert_eq!(c.state(), ClientState::Failed);
    let mut c = client(Notify::Imm, None);
    assert_code(c.on_accept(accept_msg(64)), ErrorCode::UnexpectedMessage);
    assert_eq!(c.state(), ClientState::Failed);
}

#[test]
fn client_version_mismatch_names_both_sides() {
    let mut c = client(Notify::Imm, None);
    let e = assert_code(
        c.on_banner(banner(vec![2, 3], Auth::None)),
        ErrorCode::UnsupportedVersion,
    );
    let s = e.to_string();
    assert!(s.contains("[2, 3]") && s.contains("[1]"), "{s}");
    assert_eq!(c.state(), ClientState::Failed);
    // A server speaking 1 and newer is fine.
    let mut c = client(Notify::Imm, None);
    assert!(c.on_banner(banner(vec![1, 2], Auth::None)).is_ok());
}

#[test]
fn client_server_error_is_remote() {
    let err = ServerMessage::Error(ErrorMsg::new(ErrorCode::Busy, "at client cap; retry later"));
    let mut c = client(Notify::Imm, None);
    let e = assert_code(c.on_banner(err.clone()), ErrorCode::Busy);
    assert!(matches!(e, ProtoError::Remote(_)));
    assert_eq!(
        e.to_string(),
        "server said: busy: at client cap; retry later"
    );
    assert_eq!(c.state(), ClientState::Failed);

    let mut c = client(Notify::Imm, None);
    c.on_banner(banner(vec![1], Auth::None)).unwrap();
    c.hello(ep(7)).unwrap();
    assert!(matches!(
        c.on_accept(err.clone()),
        Err(ProtoError::Remote(_))
    ));

    let mut c = written_client(Notify::Imm);
    assert!(matches!(c.on_result(err), Err(ProtoError::Remote(_))));
    assert_eq!(c.state(), ClientState::Failed);
}

#[test]
fn client_token_only_sent_when_asked() {
    let mut c = client(Notify::Imm, Some("s3cret"));
    c.on_banner(banner(vec![1], Auth::None)).unwrap();
    let ClientMessage::Hello(h) = c.hello(ep(7)).unwrap() else {
        panic!()
    };
    assert_eq!(h.token, None);

    let mut c = client(Notify::Imm, Some("s3cret"));
    c.on_banner(banner(vec![1], Auth::Token)).unwrap();
    let ClientMessage::Hello(h) = c.hello(ep(7)).unwrap() else {
        panic!()
    };
    assert_eq!(h.token.as_deref(), Some("s3cret"));
    assert_eq!(h.crc32c, Some(crc32c(PAYLOAD)));
    assert_eq!(h.length, 17);

    let mut c = client(Notify::Imm, None);
    assert_code(
        c.on_banner(banner(vec![1], Auth::Token)),
        ErrorCode::Unauthorized,
    );
    assert!(
        !format!(
            "{:?}",
            ClientRequest::for_payload(b"x", Notify::Imm, Some("s3cret".into()))
        )
        .contains("s3cret")
    );
}

#[test]
fn client_hello_checks() {
    let mut c = client(Notify::Imm, None);
    assert_code(c.hello(ep(7)), ErrorCode::Internal); // before banner
    let mut c = client(Notify::Imm, None);
    c.on_banner(banner(vec![1], Auth::None)).unwrap();
    assert_code(c.hello(ep(1 << 24)), ErrorCode::InvalidField);
    let mut c = ClientHandshake::new(ClientRequest::for_payload(b"", Notify::Imm, None));
    c.on_banner(banner(vec![1], Auth::None)).unwrap();
    assert_code(c.hello(ep(7)), ErrorCode::InvalidField);
    let mut c = client(Notify::Imm, None);
    c.on_banner(banner(vec![1], Auth::None)).unwrap();
    c.hello(ep(7)).unwrap();
    assert_code(c.hello(ep(7)), ErrorCode::Internal); // twice
}

#[test]
fn client_duplicate_banner_and_early_result() {
    let mut c = client(Notify::Imm, None);
    c.on_banner(banner(vec![1], Auth::None)).unwrap();
    assert_code(
        c.on_banner(banner(vec![1], Auth::None)),
        ErrorCode::UnexpectedMessage,
    );

    let mut c = client(Notify::Imm, None);
    c.on_banner(banner(vec![1], Auth::None)).unwrap();
    c.hello(ep(7)).unwrap();
    assert_code(
        c.on_accept(outcome(true, 17, crc32c(PAYLOAD))),
        ErrorCode::UnexpectedMessage,
    );

    // A result before written() was called.
    let mut c = client(Notify::Imm, None);
    c.on_banner(banner(vec![1], Auth::None)).unwrap();
    c.hello(ep(7)).unwrap();
    c.on_accept(accept_msg(64)).unwrap();
    assert_code(
        c.on_result(outcome(true, 17, crc32c(PAYLOAD))),
        ErrorCode::UnexpectedMessage,
    );

    // written() in the wrong state.
    let mut c = client(Notify::Tcp, None);
    assert_code(c.written(), ErrorCode::Internal);
    assert_eq!(c.state(), ClientState::Failed);
}

#[test]
fn client_small_buffer_is_too_long() {
    let mut c = client(Notify::Imm, None);
    c.on_banner(banner(vec![1], Auth::None)).unwrap();
    c.hello(ep(7)).unwrap();
    let e = assert_code(c.on_accept(accept_msg(16)), ErrorCode::TooLong);
    assert!(e.to_string().contains("16"), "{e}");
    assert_eq!(c.state(), ClientState::Failed);
}

#[test]
fn client_result_mismatches_are_verify_failed() {
    let mut c = written_client(Notify::Imm);
    let e = assert_code(c.on_result(outcome(false, 17, 0)), ErrorCode::VerifyFailed);
    assert!(e.to_string().contains("crc32c of the buffer"), "{e}");
    assert_eq!(c.state(), ClientState::Failed);

    let mut c = written_client(Notify::Imm);
    let e = assert_code(
        c.on_result(outcome(true, 16, crc32c(PAYLOAD))),
        ErrorCode::VerifyFailed,
    );
    assert!(e.to_string().contains("16 bytes"), "{e}");

    let mut c = written_client(Notify::Tcp);
    let e = assert_code(c.on_result(outcome(true, 17, 1)), ErrorCode::VerifyFailed);
    assert!(e.to_string().contains("0x00000001"), "{e}");
}

// ------------------------------------------------------ both, over lines

/// Client and server talking only through `to_line` / `parse`, with the lines crossing a fake
/// wire, for both notify modes and with/without a token.
#[test]
fn full_handshake_over_lines() {
    for notify in [Notify::Imm, Notify::Tcp] {
        for token in [None, Some("t0k")] {
            let mut s = ServerHandshake::new(policy(token));
            let mut c = client(notify, token);
            let wire = s.banner().unwrap().to_line();
            c.on_banner(ServerMessage::parse(wire.as_bytes()).unwrap())
                .unwrap();
            let wire = c.hello(ep(0xFF_FFFF)).unwrap().to_line();
            let ServerEvent::Hello(h) = s.on_line(wire.as_bytes()).unwrap() else {
                panic!()
            };
            assert_eq!(h.endpoint.qpn, 0xFF_FFFF);
            s.bind(peer_binding()).unwrap();
            let wire = s.accept(ep(3), u64::MAX, u32::MAX, 64).unwrap().to_line();
            let a = c
                .on_accept(ServerMessage::parse(wire.as_bytes()).unwrap())
                .unwrap();
            assert_eq!((a.addr, a.rkey), (u64::MAX, u32::MAX));
            let imm = if let Some(w) = c.written().unwrap() {
                s.on_line(w.to_line().as_bytes()).unwrap();
                None
            } else {
                Some(17)
            };
            let wire = s.result(s.verify(PAYLOAD, imm, None)).unwrap().to_line();
            c.on_result(ServerMessage::parse(wire.as_bytes()).unwrap())
                .unwrap();
            assert_eq!(
                (s.state(), c.state()),
                (ServerState::Done, ClientState::Done)
            );
        }
    }
}

/// A tampered buffer travels as `verified:false` and the client reports verify_failed.
#[test]
fn tampered_payload_fails_end_to_end() {
    let mut s = ServerHandshake::new(policy(None));
    let mut c = client(Notify::Tcp, None);
    c.on_banner(ServerMessage::parse(s.banner().unwrap().to_line().as_bytes()).unwrap())
        .unwrap();
    s.on_line(c.hello(ep(1)).unwrap().to_line().as_bytes())
        .unwrap();
    s.bind(peer_binding()).unwrap();
    c.on_accept(
        ServerMessage::parse(s.accept(ep(2), 1, 1, 64).unwrap().to_line().as_bytes()).unwrap(),
    )
    .unwrap();
    s.on_line(c.written().unwrap().unwrap().to_line().as_bytes())
        .unwrap();
    let o = s.verify(b"Hello RDMA Wrate!", None, None);
    assert!(!o.verified);
    let e = c.on_result(ServerMessage::parse(s.result(o).unwrap().to_line().as_bytes()).unwrap());
    assert_code(e, ErrorCode::VerifyFailed);
}

#[test]
fn state_display() {
    assert_eq!(
        ServerState::AwaitWrite {
            notify: Notify::Tcp
        }
        .to_string(),
        "awaiting the write (notify=tcp)"
    );
    assert_eq!(ClientState::AwaitAccept.to_string(), "awaiting accept");
}

fn bench_params(mode: BenchMode, sizes: Vec<u64>) -> BenchParams {
    let kind = match mode {
        BenchMode::Lat => BenchKind::Lat(PongBuffer {
            addr: 0x1000,
            rkey: 9,
        }),
        BenchMode::Bw => BenchKind::Bw,
    };
    BenchParams {
        kind,
        sizes,
        iters: 100,
    }
}

fn bench_hello(length: u64) -> ClientMessage {
    ClientMessage::Hello(Hello {
        endpoint: ep(7),
        length,
        notify: Notify::Tcp,
        crc32c: None,
        token: None,
        bench: Some(bench_params(BenchMode::Bw, vec![length])),
        cm: false,
        rounds: false,
    })
}

#[test]
fn bench_needs_a_server_that_offers_it_and_has_its_own_cap() {
    // A server without bench sessions says so (and its banner does not offer them).
    let mut s = server(None);
    let e = s.on_message(bench_hello(8)).unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidField);
    assert!(e.to_string().contains("bench"), "{e}");
    // With a cap, the banner lists `bench` and bench hellos are held to that cap, not buffer_size.
    let mut p = policy(None);
    p.bench_max_len = 1 << 20;
    let mut s = ServerHandshake::new(p);
    let ServerMessage::Banner(b) = s.banner().unwrap() else {
        panic!()
    };
    assert!(b.features.iter().any(|f| f == "bench"));
    let ServerEvent::Hello(h) = s.on_message(bench_hello(1 << 20)).unwrap() else {
        panic!()
    };
    assert_eq!(h.bench.unwrap().sizes, vec![1 << 20]);
    let mut p = policy(None);
    p.bench_max_len = 1024;
    let mut s = ServerHandshake::new(p);
    s.banner().unwrap();
    assert_eq!(
        s.on_message(bench_hello(2048)).unwrap_err().code(),
        ErrorCode::TooLong
    );
}

#[test]
fn a_bench_client_sends_nothing_to_a_server_without_the_feature() {
    let fin = rdma_proto::bench::final_content(&bench_params(BenchMode::Lat, vec![2, 64]), 100);
    let mut c = ClientHandshake::with_bench(
        ClientRequest::for_payload(&fin, Notify::Tcp, None),
        bench_params(BenchMode::Lat, vec![2, 64]),
    );
    // A v1 server that predates bench: its banner has no `bench` feature.
    let mut old = ServerHandshake::new(policy(None));
    c.on_banner(old.banner().unwrap()).unwrap();
    let e = c.hello(ep(3)).unwrap_err();
    assert!(e.to_string().contains("does not run bench sessions"), "{e}");
    assert_eq!(c.state(), ClientState::Failed);
    // An old client (no bench) against a bench-capable server: the plain write still works.
    let mut p = policy(None);
    p.bench_max_len = 1 << 20;
    let mut s = ServerHandshake::new(p);
    let mut c = ClientHandshake::new(ClientRequest::for_payload(PAYLOAD, Notify::Tcp, None));
    c.on_banner(s.banner().unwrap()).unwrap();
    let ClientMessage::Hello(h) = c.hello(ep(3)).unwrap() else {
        panic!()
    };
    assert!(h.bench.is_none());
    assert!(matches!(
        s.on_message(ClientMessage::Hello(h)).unwrap(),
        ServerEvent::Hello(_)
    ));
}

/// RDMA CM mode is asked for only where offered, answered only where asked, and a CM hello is
/// not held to the GID binding (its GID connects nothing) while a plain one still is.
#[test]
fn cm_mode_needs_the_feature_on_both_sides_and_skips_only_the_gid_binding() {
    let policy = |cm: bool| {
        let mut features = ServerPolicy::default_features();
        if cm {
            features.push(rdma_proto::cm::FEATURE.to_owned());
        }
        ServerPolicy {
            buffer_size: 64,
            token: None,
            program_version: "0.1.0".into(),
            features,
            bench_max_len: 0,
            keep_alive_ms: 0,
        }
    };
    let bound = GidBinding::Peer {
        peer: "10.0.0.2".parse().unwrap(),
        local: vec![],
    };
    let alien = QpEndpoint {
        gid: "5254:ff:fe12:3402::".parse().unwrap(),
        ..ep(17)
    };
    // The client refuses, sending nothing, when the banner has no `cm`.
    let mut s = ServerHandshake::new(policy(false));
    let mut c = ClientHandshake::new(ClientRequest::for_payload(b"hi", Notify::Tcp, None));
    c.on_banner(s.banner().unwrap()).unwrap();
    let e = c.hello_cm(alien, true).unwrap_err();
    assert!(e.to_string().contains("RDMA CM"), "{e}");
    assert_eq!(c.state(), ClientState::Failed);
    // A server without the feature refuses a cm hello that comes anyway.
    let line = br#"{"type":"hello","v":1,"qpn":17,"psn":1,"gid":"::ffff:10.0.0.2","lid":0,"mtu":1024,"length":2,"notify":"tcp","cm":true}"#;
    let e = s.on_line(line).unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidField);
    assert!(e.to_string().contains("`cm`"), "{e}");

    // With the feature: the cm hello passes the binding its GID would fail...
    let mut s = ServerHandshake::new(policy(true));
    let mut c = ClientHandshake::new(ClientRequest::for_payload(b"hi", Notify::Tcp, None));
    c.on_banner(s.banner().unwrap()).unwrap();
    let hello = c.hello_cm(alien, true).unwrap();
    assert!(matches!(s.on_message(hello).unwrap(), ServerEvent::Hello(h) if h.cm));
    s.bind(bound.clone()).unwrap();
    // ... the server must answer with an offer (not without one) ...
    assert!(s.accept(ep(18), 1, 2, 64).is_err());
    let mut s = ServerHandshake::new(policy(true));
    s.banner().unwrap();
    s.on_message(c_hello(alien, true)).unwrap();
    s.bind(bound.clone()).unwrap();
    let offer = CmOffer {
        port: 9,
        nonce: [1; rdma_proto::cm::NONCE_LEN],
    };
    let accept = s.accept_cm(ep(18), 1, 2, 64, Some(offer)).unwrap();
    // ... and the client takes an accept with its offer only.
    assert_eq!(c.on_accept(accept).unwrap().cm, Some(offer));
    let mut c2 = ClientHandshake::new(ClientRequest::for_payload(b"hi", Notify::Tcp, None));
    c2.on_banner(ServerHandshake::new(policy(true)).banner().unwrap())
        .unwrap();
    c2.hello_cm(alien, true).unwrap();
    let plain = ServerMessage::parse(br#"{"type":"accept","v":1,"qpn":18,"psn":1,"gid":"fe80::1","lid":0,"mtu":1024,"addr":1,"rkey":2,"buf_len":64}"#).unwrap();
    let e = c2.on_accept(plain).unwrap_err();
    assert!(e.to_string().contains("RDMA CM"), "{e}");

    // A plain hello from the same peer is still bound: its GID is refused.
    let mut s = ServerHandshake::new(policy(true));
    s.banner().unwrap();
    s.on_message(c_hello(alien, false)).unwrap();
    let e = s.bind(bound).unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidField);
}

fn c_hello(endpoint: QpEndpoint, cm: bool) -> ClientMessage {
    ClientMessage::Hello(Hello {
        endpoint,
        length: 2,
        notify: Notify::Tcp,
        crc32c: None,
        token: None,
        bench: None,
        cm,
        rounds: false,
    })
}
