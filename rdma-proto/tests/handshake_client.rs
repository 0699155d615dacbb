//! The client's sans-IO state machine, and both over lines: every wrong order and every
//! refusal, in memory.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may unwrap (clippy.toml covers only #[test] fns)

mod common;

use common::*;
use rdma_proto::*;

// ---------------------------------------------------------------- client

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
    // The client's side of the same rule: a server at 10.0.0.2, whose cm accept below names
    // another GID (ep's, 10.0.0.1), which connects nothing.
    c.bind(bound.clone()).unwrap();
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
    c2.bind(bound.clone()).unwrap();
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

// ------------------------------------------- the accept's GID, bound to the server's address

/// A client that sent its hello to a server at `server` (RoCE, no local GIDs but `local`),
/// before the accept.
fn hello_sent_to(server: &str, local: Vec<Gid>) -> ClientHandshake {
    let mut c = ClientHandshake::new(ClientRequest::for_payload(PAYLOAD, Notify::Tcp, None));
    c.bind(GidBinding::Peer {
        peer: server.parse().unwrap(),
        local,
    })
    .unwrap();
    c.on_banner(banner(vec![1], Auth::None)).unwrap();
    c.hello(ep(7)).unwrap();
    c
}

/// An accept whose queue pair is at `gid` (a plain one: no RDMA CM).
fn accept_at(gid: &str) -> ServerMessage {
    let ServerMessage::Accept(a) = accept_msg(64) else {
        panic!()
    };
    ServerMessage::Accept(Accept {
        endpoint: QpEndpoint {
            gid: gid.parse().unwrap(),
            ..a.endpoint
        },
        ..a
    })
}

/// An accept naming a third host's GID is refused, naming `gid`, the address it should have
/// been and what to do, and the handshake fails (before the caller connects anything); the
/// server's own GID is taken. For an IPv4 server (its GID IPv4-mapped, whether the socket
/// reports it mapped or not) and an IPv6 one.
#[test]
fn an_accept_for_a_third_hosts_gid_is_refused() {
    for (server, own, third) in [
        ("192.0.2.10", "::ffff:192.0.2.10", "::ffff:198.51.100.7"),
        (
            "::ffff:192.0.2.10",
            "::ffff:192.0.2.10",
            "::ffff:192.0.2.11",
        ),
        ("2001:db8::10", "2001:db8::10", "2001:db8::666"),
        (
            "fe80::5054:ff:fe12:3401",
            "fe80::5054:ff:fe12:3401",
            "fe80::5054:ff:fe12:3402",
        ),
    ] {
        let mut c = hello_sent_to(server, vec![]);
        let e = assert_code(c.on_accept(accept_at(third)), ErrorCode::InvalidField);
        assert!(
            matches!(
                &e,
                ProtoError::InvalidField {
                    msg: "accept",
                    field: "gid",
                    ..
                }
            ),
            "{e:?}"
        );
        let shown = e.to_string();
        assert!(shown.contains(third), "{shown}");
        assert!(
            shown.contains(&format!("{own}, the address this connection goes to")),
            "{shown}"
        );
        assert!(
            shown.contains("Connect to the server at the address"),
            "{shown}"
        );
        assert_eq!(c.state(), ClientState::Failed);
        assert!(c.accept().is_none(), "a refused accept is not kept");
        // Nothing more goes on: no `written` for the refused accept.
        assert_code(c.written(), ErrorCode::Internal);

        let mut c = hello_sent_to(server, vec![]);
        let a = c.on_accept(accept_at(own)).unwrap();
        assert_eq!(a.endpoint.gid, own.parse().unwrap());
        assert_eq!(c.state(), ClientState::Writing);
    }
}

/// A server reached over loopback is on this host: its GID must be one of this host's own
/// (the client's port's), not its loopback address's, and no other host's.
#[test]
fn a_server_over_loopback_must_name_one_of_this_hosts_gids() {
    let ours = vec![
        "::ffff:10.0.0.1".parse().unwrap(),
        "fe80::1".parse().unwrap(),
    ];
    for server in ["127.0.0.1", "::1", "::ffff:127.0.0.1"] {
        for gid in ["::ffff:10.0.0.1", "fe80::1"] {
            let mut c = hello_sent_to(server, ours.clone());
            assert!(c.on_accept(accept_at(gid)).is_ok(), "{server} {gid}");
        }
        let mut c = hello_sent_to(server, ours.clone());
        let e = assert_code(
            c.on_accept(accept_at("::ffff:10.0.0.2")),
            ErrorCode::InvalidField,
        );
        let shown = e.to_string();
        assert!(
            shown.contains("one of this host's own GIDs (the server is reached over loopback)"),
            "{shown}"
        );
        assert_eq!(c.state(), ClientState::Failed);
    }
}

/// What is not checked: an accept offering RDMA CM (its GID connects nothing: the client
/// connects through RDMA CM to the server's TCP address), and a port with nothing to bind
/// (InfiniBand).
#[test]
fn a_cm_accept_and_an_unbound_port_are_not_held_to_the_gid() {
    let mut features = ServerPolicy::default_features();
    features.push(rdma_proto::cm::FEATURE.to_owned());
    let mut c = ClientHandshake::new(ClientRequest::for_payload(PAYLOAD, Notify::Tcp, None));
    c.bind(GidBinding::Peer {
        peer: "192.0.2.10".parse().unwrap(),
        local: vec![],
    })
    .unwrap();
    c.on_banner(ServerMessage::Banner(Banner {
        features,
        ..match banner(vec![1], Auth::None) {
            ServerMessage::Banner(b) => b,
            _ => unreachable!(),
        }
    }))
    .unwrap();
    c.hello_cm(ep(7), true).unwrap();
    let ServerMessage::Accept(a) = accept_at("::ffff:198.51.100.7") else {
        panic!()
    };
    let offer = CmOffer {
        port: 9,
        nonce: [1; rdma_proto::cm::NONCE_LEN],
    };
    let cm = ServerMessage::Accept(Accept {
        cm: Some(offer),
        ..a
    });
    assert_eq!(c.on_accept(cm).unwrap().cm, Some(offer));

    let mut c = ClientHandshake::new(ClientRequest::for_payload(PAYLOAD, Notify::Tcp, None));
    c.bind(GidBinding::on_port(None, "192.0.2.10".parse().unwrap()))
        .unwrap();
    assert_eq!(c.binding(), Some(&GidBinding::Unbound));
    c.on_banner(banner(vec![1], Auth::None)).unwrap();
    c.hello(ep(7)).unwrap();
    assert!(c.on_accept(accept_at("fe80::99")).is_ok());
}

/// The binding cannot be forgotten: an accept without one is refused as a misuse, before its
/// GID is trusted; and it binds only before the accept.
#[test]
fn an_accept_without_a_binding_is_a_misuse() {
    let mut c = ClientHandshake::new(ClientRequest::for_payload(PAYLOAD, Notify::Tcp, None));
    c.on_banner(banner(vec![1], Auth::None)).unwrap();
    c.hello(ep(7)).unwrap();
    let e = assert_code(c.on_accept(accept_msg(64)), ErrorCode::Internal);
    assert!(e.to_string().contains("without bind()"), "{e}");
    assert_eq!(c.state(), ClientState::Failed);

    // Bound after the hello (as a client that learns its peer late): fine.
    let mut c = ClientHandshake::new(ClientRequest::for_payload(PAYLOAD, Notify::Tcp, None));
    c.on_banner(banner(vec![1], Auth::None)).unwrap();
    c.hello(ep(7)).unwrap();
    c.bind(server_binding()).unwrap();
    c.on_accept(accept_msg(64)).unwrap();
    // Not after the accept.
    assert_code(c.bind(GidBinding::Unbound), ErrorCode::Internal);
    assert_eq!(c.state(), ClientState::Failed);
}

/// A clone made before the banner is a fresh handshake (a client starting over on a new
/// connection after `busy`): the same request, bound anew.
#[test]
fn a_clone_before_the_banner_starts_over() {
    let fresh = client(Notify::Tcp, None);
    let mut c = fresh.clone();
    c.on_banner(banner(vec![1], Auth::None)).unwrap();
    c.hello(ep(7)).unwrap();
    let busy = ServerMessage::Error(ErrorMsg::new(ErrorCode::Busy, "pinned memory full"));
    assert_code(c.on_accept(busy), ErrorCode::Busy);
    let mut again = fresh.clone();
    assert_eq!(again.state(), ClientState::AwaitBanner);
    again.on_banner(banner(vec![1], Auth::None)).unwrap();
    again.hello(ep(7)).unwrap();
    again.on_accept(accept_msg(64)).unwrap();
    assert_eq!(again.state(), ClientState::Writing);
}

/// A server's error message is shown escaped and cut at MAX_TEXT bytes, whatever it sent.
#[test]
fn a_servers_long_error_message_is_shown_cut() {
    let long = format!("{}\u{202e}", "x".repeat(60_000));
    let err = ServerMessage::Error(ErrorMsg::new(ErrorCode::Busy, long));
    let mut c = client(Notify::Imm, None);
    let shown = c.on_banner(err).unwrap_err().to_string();
    assert!(
        shown.len() < rdma_proto::MAX_TEXT + 200,
        "{} bytes",
        shown.len()
    );
    assert!(shown.contains("more bytes not shown"), "{shown}");
    assert!(!shown.contains('\u{202e}'));
}
