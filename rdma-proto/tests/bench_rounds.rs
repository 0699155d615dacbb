//! Rounds of bench sessions ([`rdma_proto::rounds`], feature `bench-rounds`) in memory, both
//! state machines talking in lines: who may ask, that a round repeats the sweep, and that a
//! `lat` round names a fresh buffer for the answers, exactly where it must.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may unwrap (clippy.toml covers only #[test] fns)

mod common;

use common::{ep, server_binding};
use rdma_proto::bench::{BenchKind, BenchParams, PongBuffer, final_content};
use rdma_proto::*;

const LEN: u64 = 4096;
const ITERS: u64 = 5;
const FIRST_PONG: PongBuffer = PongBuffer {
    addr: 0x7000_0000,
    rkey: 11,
};

fn policy(keep_alive_ms: u64, bench_max_len: u64) -> ServerPolicy {
    ServerPolicy {
        buffer_size: 64,
        token: None,
        program_version: "0.1.0".to_owned(),
        features: ServerPolicy::default_features(),
        bench_max_len,
        keep_alive_ms,
    }
}

fn params(kind: BenchKind) -> BenchParams {
    BenchParams {
        kind,
        sizes: vec![2, LEN],
        iters: ITERS,
        stamped: false,
    }
}

/// The bytes a round leaves in the server's buffer, and its request.
fn request(p: &BenchParams) -> (Vec<u8>, ClientRequest) {
    let fin = final_content(p, p.iters);
    let req = ClientRequest::for_payload(&fin, Notify::Tcp, None);
    (fin, req)
}

/// Parses `msg`'s line as the other side would.
fn to_server(msg: &ClientMessage) -> ClientMessage {
    ClientMessage::parse(msg.to_line().as_bytes()).unwrap()
}
fn to_client(msg: &ServerMessage) -> ServerMessage {
    ServerMessage::parse(msg.to_line().as_bytes()).unwrap()
}

/// A client and a server of `kind` through hello and accept, over lines; the server's banner
/// from `policy`.
fn accepted(kind: BenchKind, policy: ServerPolicy) -> (ClientHandshake, ServerHandshake) {
    let p = params(kind);
    let (_, req) = request(&p);
    let mut c = ClientHandshake::with_bench(req, p).asking_rounds();
    c.bind(server_binding()).unwrap();
    let mut s = ServerHandshake::new(policy);
    c.on_banner(to_client(&s.banner().unwrap())).unwrap();
    let hello = c.hello(ep(7)).unwrap();
    let ServerEvent::Hello(_) = s.on_message(to_server(&hello)).unwrap() else {
        panic!()
    };
    s.bind(GidBinding::Peer {
        peer: "10.0.0.1".parse().unwrap(),
        local: vec![],
    })
    .unwrap();
    let accept = s.accept(ep(9), 0x1_0000_0000, 5, LEN).unwrap();
    c.on_accept(to_client(&accept)).unwrap();
    (c, s)
}

/// One round's end on both sides: `written`, the server's check of `fin`, its verdict.
fn verdict(c: &mut ClientHandshake, s: &mut ServerHandshake, fin: &[u8]) -> Outcome {
    let w = c
        .written()
        .unwrap()
        .expect("a bench session ends with written");
    let ServerEvent::Written(_) = s.on_message(to_server(&w)).unwrap() else {
        panic!()
    };
    let o = s.verify(fin, None, None);
    let r = s.result(o).unwrap();
    c.on_result(to_client(&r)).unwrap()
}

fn code<T: std::fmt::Debug>(r: Result<T, ProtoError>) -> (ErrorCode, String) {
    let e = r.expect_err("expected an error");
    (e.code(), e.to_string())
}

#[test]
fn the_banner_offers_bench_rounds_only_with_a_keep_alive_and_bench_sessions() {
    let features = |ka, bench| match ServerHandshake::new(policy(ka, bench)).banner().unwrap() {
        ServerMessage::Banner(b) => b.features,
        other => panic!("{other:?}"),
    };
    assert!(features(400, LEN).contains(&"bench-rounds".to_owned()));
    assert!(!features(0, LEN).contains(&"bench-rounds".to_owned()));
    assert!(!features(400, 0).contains(&"bench-rounds".to_owned()));
    assert!(features(400, 0).contains(&"rounds".to_owned()));
}

#[test]
fn a_client_asks_only_a_server_that_lists_bench_rounds() {
    let p = params(BenchKind::Lat(FIRST_PONG));
    let (_, req) = request(&p);
    let mut c = ClientHandshake::with_bench(req, p).asking_rounds();
    c.bind(server_binding()).unwrap();
    let banner = ServerMessage::Banner(Banner {
        program: "rdma-server".to_owned(),
        program_version: "0.9".to_owned(),
        versions: vec![1],
        features: vec!["bench".to_owned(), "rounds".to_owned()],
        auth: Auth::None,
    });
    c.on_banner(banner).unwrap();
    let ClientMessage::Hello(h) = c.hello(ep(7)).unwrap() else {
        panic!()
    };
    assert!(
        !h.rounds,
        "a server with write rounds only would refuse a bench hello that asks"
    );
    let (c, _) = accepted(BenchKind::Lat(FIRST_PONG), policy(400, LEN));
    assert!(c.keep_alive().is_some(), "granted where listed");
}

#[test]
fn a_lat_session_goes_round_after_round_each_with_fresh_buffers_on_both_sides() {
    let kind = BenchKind::Lat(FIRST_PONG);
    let (fin, _) = request(&params(kind));
    let (mut c, mut s) = accepted(kind, policy(400, LEN));
    assert_eq!(s.pong(), Some(FIRST_PONG));
    verdict(&mut c, &mut s, &fin);
    assert_eq!(s.state(), ServerState::Kept);
    for round in 2..=3u32 {
        let pong = PongBuffer {
            addr: 0x7100_0000 + u64::from(round),
            rkey: 20 + round,
        };
        let next = c.next(LEN, crc32c(&fin), Some(pong)).unwrap();
        assert!(next.to_line().contains("\"pong\":{\"addr\":"), "{next:?}");
        let ServerEvent::Next(n) = s.on_message(to_server(&next)).unwrap() else {
            panic!()
        };
        assert_eq!(n.pong, Some(pong));
        assert_eq!(
            s.pong(),
            Some(pong),
            "the server answers into this round's buffer"
        );
        let region = s.region(0x2_0000_0000, 30 + round, LEN).unwrap();
        let r = c.on_region(to_client(&region)).unwrap();
        assert_eq!(r.rkey, 30 + round);
        let o = verdict(&mut c, &mut s, &fin);
        assert!(o.verified, "{o:?}");
        assert_eq!(s.state(), ServerState::Kept);
    }
}

#[test]
fn a_bench_round_that_changes_the_sweep_or_its_pongs_is_refused() {
    let lat = BenchKind::Lat(FIRST_PONG);
    let (fin, _) = request(&params(lat));
    let next = |length, pong| {
        ClientMessage::Next(Next {
            length,
            crc32c: Some(crc32c(&fin)),
            pong,
        })
    };
    let fresh = Some(PongBuffer { addr: 1, rkey: 2 });
    let cases = [
        (lat, next(LEN, None), "pong", "is missing"),
        (lat, next(LEN / 2, fresh), "length", "repeat its sweep"),
        (
            BenchKind::Bw,
            next(LEN, fresh),
            "pong",
            "is for lat sessions",
        ),
    ];
    for (kind, msg, field, why) in cases {
        let (mut c, mut s) = accepted(kind, policy(400, LEN));
        verdict(&mut c, &mut s, &fin_of(kind));
        let (code_, text) = code(s.on_message(to_server(&msg)));
        assert_eq!(code_, ErrorCode::InvalidField, "{text}");
        assert!(
            text.contains(field) && text.contains(why),
            "{kind:?}: {text}"
        );
        assert_eq!(s.state(), ServerState::Failed);
    }
    // The client will not send either.
    let (mut c, mut s) = accepted(lat, policy(400, LEN));
    verdict(&mut c, &mut s, &fin);
    assert_eq!(code(c.next(LEN, 0, None)).0, ErrorCode::Internal);
    let (mut c, mut s) = accepted(lat, policy(400, LEN));
    verdict(&mut c, &mut s, &fin);
    assert_eq!(code(c.next(LEN - 1, 0, fresh)).0, ErrorCode::Internal);
    let (mut c, mut s) = accepted(BenchKind::Bw, policy(400, LEN));
    verdict(&mut c, &mut s, &fin_of(BenchKind::Bw));
    assert_eq!(code(c.next(LEN, 0, fresh)).0, ErrorCode::Internal);
}

#[test]
fn a_write_sessions_next_names_no_pong() {
    let mut s = ServerHandshake::new(policy(400, LEN));
    s.banner().unwrap();
    let payload = b"x";
    s.on_message(ClientMessage::Hello(Hello {
        endpoint: ep(7),
        length: 1,
        notify: Notify::Tcp,
        crc32c: Some(crc32c(payload)),
        token: None,
        bench: None,
        cm: false,
        rounds: true,
    }))
    .unwrap();
    s.bind(GidBinding::Peer {
        peer: "10.0.0.1".parse().unwrap(),
        local: vec![],
    })
    .unwrap();
    s.accept(ep(9), 1, 2, 64).unwrap();
    s.on_message(ClientMessage::Written(Written {
        length: 1,
        crc32c: crc32c(payload),
    }))
    .unwrap();
    let o = s.verify(payload, None, None);
    s.result(o).unwrap();
    assert_eq!(s.pong(), None);
    let (code_, text) = code(s.on_message(ClientMessage::Next(Next {
        length: 1,
        crc32c: None,
        pong: Some(FIRST_PONG),
    })));
    assert_eq!(code_, ErrorCode::InvalidField);
    assert!(
        text.contains("pong") && text.contains("write session"),
        "{text}"
    );
}

#[test]
fn a_pong_that_is_not_an_object_of_addr_and_rkey_does_not_parse() {
    for bad in [
        r#"{"type":"next","v":1,"length":2,"pong":7}"#,
        r#"{"type":"next","v":1,"length":2,"pong":{"addr":1}}"#,
        r#"{"type":"next","v":1,"length":2,"pong":{"addr":1,"rkey":4294967296}}"#,
    ] {
        let e = ClientMessage::parse(bad.as_bytes()).expect_err(bad);
        assert!(e.to_string().contains("pong"), "{bad}: {e}");
    }
    let ok = r#"{"type":"next","v":1,"length":2,"pong":{"addr":1,"rkey":2}}"#;
    let ClientMessage::Next(n) = ClientMessage::parse(ok.as_bytes()).unwrap() else {
        panic!()
    };
    assert_eq!(n.pong, Some(PongBuffer { addr: 1, rkey: 2 }));
}

fn fin_of(kind: BenchKind) -> Vec<u8> {
    request(&params(kind)).0
}
