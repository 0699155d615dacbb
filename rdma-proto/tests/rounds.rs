//! Rounds ([`rdma_proto::rounds`]) in memory, both state machines: who may ask, what the accept
//! grants, and every wrong order or size of a `next` and its `region`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may unwrap (clippy.toml covers only #[test] fns)

mod common;

use common::{ep, server_binding};
use rdma_proto::*;
use std::time::Duration;

const FIRST: &[u8] = b"Hello RDMA Write!";
const SECOND: &[u8] = b"second round";

fn policy(keep_alive_ms: u64) -> ServerPolicy {
    ServerPolicy {
        buffer_size: 64,
        token: None,
        program_version: "0.1.0".to_owned(),
        features: ServerPolicy::default_features(),
        bench_max_len: 1 << 20,
        keep_alive_ms,
    }
}

fn hello(notify: Notify, rounds: bool) -> Hello {
    Hello {
        endpoint: ep(7),
        length: FIRST.len() as u64,
        notify,
        crc32c: Some(crc32c(FIRST)),
        token: None,
        bench: None,
        cm: false,
        rounds,
    }
}

fn banner_features(s: &mut ServerHandshake) -> Vec<String> {
    match s.banner().unwrap() {
        ServerMessage::Banner(b) => b.features,
        other => panic!("{other:?}"),
    }
}

/// A server that took `h` and bound it.
fn admitted(keep_alive_ms: u64, h: Hello) -> Result<ServerHandshake, ProtoError> {
    let mut s = ServerHandshake::new(policy(keep_alive_ms));
    banner_features(&mut s);
    s.on_message(ClientMessage::Hello(h))?;
    s.bind(GidBinding::Peer {
        peer: "10.0.0.1".parse().unwrap(),
        local: vec![],
    })?;
    Ok(s)
}

/// A server whose first round (notify `notify`, rounds granted) is verified: state `Kept`.
fn kept(notify: Notify) -> ServerHandshake {
    let mut s = admitted(400, hello(notify, true)).unwrap();
    let ServerMessage::Accept(a) = s.accept(ep(9), 0x1_0000_0000, 5, 64).unwrap() else {
        panic!()
    };
    assert_eq!(a.keep_alive_ms, Some(400));
    assert_eq!(s.keep_alive(), Some(Duration::from_millis(400)));
    let (imm, written) = match notify {
        Notify::Imm => (Some(FIRST.len() as u32), None),
        Notify::Tcp => (
            None,
            Some(Written {
                length: FIRST.len() as u64,
                crc32c: crc32c(FIRST),
            }),
        ),
    };
    let o = s.verify(FIRST, imm, written.as_ref());
    assert!(o.verified, "{o:?}");
    s.result(o).unwrap();
    assert_eq!(s.state(), ServerState::Kept);
    s
}

fn next(length: u64, crc: u32) -> ClientMessage {
    ClientMessage::Next(Next {
        length,
        crc32c: Some(crc),
        pong: None,
    })
}

fn code<T: std::fmt::Debug>(r: Result<T, ProtoError>) -> (ErrorCode, String) {
    let e = r.expect_err("expected an error");
    (e.code(), e.to_string())
}

#[test]
fn the_banner_offers_rounds_only_with_a_keep_alive() {
    let offered =
        |ms| banner_features(&mut ServerHandshake::new(policy(ms))).contains(&"rounds".to_owned());
    assert!(offered(30_000));
    assert!(!offered(0));
}

#[test]
fn only_a_server_that_offers_them_grants_rounds_and_never_through_rdma_cm() {
    let (c, why) = code(admitted(0, hello(Notify::Imm, true)));
    assert_eq!(c, ErrorCode::InvalidField);
    assert!(
        why.contains("rounds") && why.contains("no `rounds` feature"),
        "{why}"
    );
    let mut cm = hello(Notify::Tcp, true);
    cm.cm = true;
    let mut p = policy(400);
    p.features.push(cm::FEATURE.to_owned());
    let mut s = ServerHandshake::new(p);
    banner_features(&mut s);
    let (c, why) = code(s.on_message(ClientMessage::Hello(cm)));
    assert_eq!(c, ErrorCode::InvalidField);
    assert!(why.contains("RDMA CM has no rounds"), "{why}");
}

#[test]
fn a_declined_session_ends_at_its_verdict_and_refuses_next() {
    let mut s = admitted(400, hello(Notify::Imm, true)).unwrap();
    s.decline_rounds();
    let ServerMessage::Accept(a) = s.accept(ep(9), 0x1_0000_0000, 5, 64).unwrap() else {
        panic!()
    };
    assert_eq!(a.keep_alive_ms, None, "declined: no keep-alive offered");
    assert_eq!(s.keep_alive(), None);
    let o = s.verify(FIRST, Some(FIRST.len() as u32), None);
    s.result(o).unwrap();
    assert_eq!(s.state(), ServerState::Done);
    let (c, why) = code(s.on_message(next(4, 0)));
    assert_eq!(c, ErrorCode::UnexpectedMessage);
    assert!(why.contains("this session has no rounds"), "{why}");
    // A session that never asked gets none either.
    let mut s = admitted(400, hello(Notify::Imm, false)).unwrap();
    let ServerMessage::Accept(a) = s.accept(ep(9), 0x1_0000_0000, 5, 64).unwrap() else {
        panic!()
    };
    assert_eq!(a.keep_alive_ms, None);
}

#[test]
fn each_round_is_verified_against_its_own_next() {
    for notify in [Notify::Imm, Notify::Tcp] {
        let mut s = kept(notify);
        assert!(matches!(
            s.on_message(next(SECOND.len() as u64, crc32c(SECOND)))
                .unwrap(),
            ServerEvent::Next(_)
        ));
        assert_eq!(s.length(), SECOND.len() as u64);
        let ServerMessage::Region(r) = s.region(0x2_0000_0000, 6, 64).unwrap() else {
            panic!()
        };
        assert_eq!((r.addr, r.rkey, r.buf_len), (0x2_0000_0000, 6, 64));
        assert_eq!(s.state(), ServerState::AwaitWrite { notify });
        let imm = (notify == Notify::Imm).then_some(SECOND.len() as u32);
        if notify == Notify::Tcp {
            // The first round's `written` is not this round's.
            let mut again = s.on_message(ClientMessage::Written(Written {
                length: FIRST.len() as u64,
                crc32c: crc32c(FIRST),
            }));
            let (c, why) = code(again.clone());
            assert_eq!(c, ErrorCode::InvalidField);
            assert!(why.contains("announced in next"), "{why}");
            s = kept(notify);
            s.on_message(next(SECOND.len() as u64, crc32c(SECOND)))
                .unwrap();
            s.region(0x2_0000_0000, 6, 64).unwrap();
            again = s.on_message(ClientMessage::Written(Written {
                length: SECOND.len() as u64,
                crc32c: crc32c(SECOND),
            }));
            assert!(again.is_ok());
        }
        // The first round's bytes left in the buffer do not pass for the second's.
        let o = s.verify(FIRST, imm, None);
        assert!(!o.verified);
        assert!(
            o.reason.as_deref().unwrap().contains("next announced"),
            "{o:?}"
        );
        let o = s.verify(SECOND, imm, None);
        assert!(o.verified, "{notify}: {o:?}");
        s.result(o).unwrap();
        assert_eq!(s.state(), ServerState::Kept, "and kept again");
    }
}

#[test]
fn a_next_too_long_for_the_buffer_or_the_immediate_is_refused() {
    let mut s = kept(Notify::Imm);
    let (c, _) = code(s.on_message(next(65, 0)));
    assert_eq!(c, ErrorCode::TooLong);
    assert_eq!(s.state(), ServerState::Failed);
    // A region smaller than the round is the server's own mistake, refused too.
    let mut s = kept(Notify::Tcp);
    s.on_message(next(40, 0)).unwrap();
    let (c, _) = code(s.region(0x2_0000_0000, 6, 39));
    assert_eq!(c, ErrorCode::TooLong);
}

#[test]
fn out_of_order_rounds_are_refused() {
    // `next` while the first write is awaited.
    let mut s = admitted(400, hello(Notify::Tcp, true)).unwrap();
    s.accept(ep(9), 0x1_0000_0000, 5, 64).unwrap();
    let (c, _) = code(s.on_message(next(4, 0)));
    assert_eq!(c, ErrorCode::UnexpectedMessage);
    // A second hello in a kept session.
    let mut s = kept(Notify::Imm);
    let (c, why) = code(s.on_message(ClientMessage::Hello(hello(Notify::Imm, true))));
    assert_eq!(c, ErrorCode::UnexpectedMessage);
    assert!(why.contains("duplicate hello"), "{why}");
    // `region` before any `next`: a server bug, refused.
    let mut s = kept(Notify::Imm);
    let (c, _) = code(s.region(1, 2, 64));
    assert_eq!(c, ErrorCode::Internal);
}

/// A client handshake that has read `features`' banner and sent its hello.
fn client_after_hello(features: &[&str], rounds: bool) -> (ClientHandshake, Hello) {
    let req = ClientRequest::for_payload(FIRST, Notify::Imm, None);
    let mut c = ClientHandshake::new(req);
    if rounds {
        c = c.asking_rounds();
    }
    c.bind(server_binding()).unwrap();
    c.on_banner(ServerMessage::Banner(Banner {
        program: "rdma-server".to_owned(),
        program_version: "0".to_owned(),
        versions: vec![1],
        features: features.iter().map(|&f| f.to_owned()).collect(),
        auth: Auth::None,
    }))
    .unwrap();
    let ClientMessage::Hello(h) = c.hello(ep(7)).unwrap() else {
        panic!()
    };
    (c, h)
}

fn accept(keep_alive_ms: Option<u64>) -> ServerMessage {
    ServerMessage::Accept(Accept {
        endpoint: ep(9),
        addr: 0x1_0000_0000,
        rkey: 5,
        buf_len: 64,
        cm: None,
        keep_alive_ms,
    })
}

fn verdict(payload: &[u8]) -> ServerMessage {
    ServerMessage::Result(Outcome {
        verified: true,
        length: payload.len() as u64,
        crc32c: crc32c(payload),
        text: String::new(),
        truncated: false,
        reason: None,
        stamps: None,
    })
}

#[test]
fn the_client_asks_only_a_server_that_offers_rounds() {
    let (_, h) = client_after_hello(&["notify-imm", "rounds"], true);
    assert!(h.rounds);
    let (_, h) = client_after_hello(&["notify-imm"], true);
    assert!(!h.rounds, "an older server is not asked");
    let (_, h) = client_after_hello(&["notify-imm", "rounds"], false);
    assert!(!h.rounds);
    // A keep-alive nobody asked for is the server's mistake.
    let (mut c, _) = client_after_hello(&["notify-imm", "rounds"], false);
    let (code_, why) = code(c.on_accept(accept(Some(400))));
    assert_eq!(code_, ErrorCode::InvalidField);
    assert!(why.contains("keep_alive_ms"), "{why}");
}

#[test]
fn the_client_goes_round_after_round_only_where_granted() {
    let (mut c, _) = client_after_hello(&["rounds"], true);
    c.on_accept(accept(Some(400))).unwrap();
    assert_eq!(c.keep_alive(), Some(Duration::from_millis(400)));
    // Not before the verdict.
    let (code_, _) = code(c.next(1, 0, None));
    assert_eq!(code_, ErrorCode::Internal);

    let (mut c, _) = client_after_hello(&["rounds"], true);
    c.on_accept(accept(Some(400))).unwrap();
    assert!(c.written().unwrap().is_none());
    c.on_result(verdict(FIRST)).unwrap();
    let ClientMessage::Next(n) = c.next(SECOND.len() as u64, crc32c(SECOND), None).unwrap() else {
        panic!()
    };
    assert_eq!(n.length, SECOND.len() as u64);
    // A region too small for the round.
    let small = ServerMessage::Region(Region {
        addr: 1,
        rkey: 2,
        buf_len: 3,
    });
    let (code_, _) = code(c.on_region(small));
    assert_eq!(code_, ErrorCode::TooLong);

    let (mut c, _) = client_after_hello(&["rounds"], true);
    c.on_accept(accept(Some(400))).unwrap();
    c.written().unwrap();
    c.on_result(verdict(FIRST)).unwrap();
    c.next(SECOND.len() as u64, crc32c(SECOND), None).unwrap();
    let r = c
        .on_region(ServerMessage::Region(Region {
            addr: 0x2_0000_0000,
            rkey: 6,
            buf_len: 64,
        }))
        .unwrap();
    assert_eq!(r.rkey, 6);
    assert_eq!(c.state(), ClientState::Writing);
    c.written().unwrap();
    // The verdict is checked against this round's bytes, not the first's.
    let (code_, _) = code(c.on_result(verdict(FIRST)));
    assert_eq!(code_, ErrorCode::VerifyFailed);

    // Without a grant, no round after the verdict.
    let (mut c, _) = client_after_hello(&["rounds"], true);
    c.on_accept(accept(None)).unwrap();
    c.written().unwrap();
    c.on_result(verdict(FIRST)).unwrap();
    let (code_, why) = code(c.next(1, 0, None));
    assert_eq!(code_, ErrorCode::Internal);
    assert!(why.contains("without rounds"), "{why}");
}

#[test]
fn next_and_region_lines_parse_and_check_their_fields() {
    let line = next(12, 7).to_line();
    assert_eq!(
        line,
        "{\"type\":\"next\",\"v\":1,\"length\":12,\"crc32c\":7}\n"
    );
    assert_eq!(ClientMessage::parse(line.as_bytes()).unwrap(), next(12, 7));
    let bad = ClientMessage::parse(br#"{"type":"next","v":1,"length":0}"#);
    assert_eq!(code(bad).0, ErrorCode::InvalidField);
    let region = br#"{"type":"region","v":1,"addr":4096,"rkey":5,"buf_len":64}"#;
    assert!(matches!(
        ServerMessage::parse(region).unwrap(),
        ServerMessage::Region(Region { rkey: 5, .. })
    ));
    // Each side's message is refused from the other.
    assert_eq!(
        code(ClientMessage::parse(region)).0,
        ErrorCode::UnexpectedMessage
    );
    assert_eq!(
        code(ServerMessage::parse(line.as_bytes())).0,
        ErrorCode::UnexpectedMessage
    );
    // A keep-alive of more than an hour is no keep-alive.
    let long = accept(Some(3_600_001)).to_line();
    let (c, why) = code(ServerMessage::parse(long.as_bytes()));
    assert_eq!(c, ErrorCode::InvalidField);
    assert!(why.contains("keep_alive_ms"), "{why}");
}
