//! The stamped exchange of `lat` bench sessions (feature `stamped`, `hello.bench.stamped`,
//! `result.stamps`) in memory, both state machines talking in lines: who may ask, that the
//! server's stamps reach the client as they were sent, and every line that gets it wrong.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may unwrap (clippy.toml covers only #[test] fns)

mod common;

use common::{ep, server_binding};
use rdma_proto::bench::{BenchKind, BenchParams, PongBuffer, Turnaround, final_content};
use rdma_proto::*;

const LEN: u64 = 4096;

const STAMPS: Turnaround = Turnaround {
    recv: 0x1234_0000,
    send: 0x1234_8000,
    clock_khz: 156_250,
    mask: 0xffff_ffff_ffff,
};

fn policy() -> ServerPolicy {
    ServerPolicy {
        buffer_size: 64,
        token: None,
        program_version: "0.1.0".to_owned(),
        features: ServerPolicy::default_features(),
        bench_max_len: LEN,
        keep_alive_ms: 0,
    }
}

fn lat() -> BenchKind {
    BenchKind::Lat(PongBuffer {
        addr: 0x7000_0000,
        rkey: 11,
    })
}

fn params(kind: BenchKind) -> BenchParams {
    BenchParams {
        kind,
        sizes: vec![2, LEN],
        iters: 5,
        stamped: false,
    }
}

fn client(kind: BenchKind) -> ClientHandshake {
    let p = params(kind);
    let fin = final_content(&p, p.iters);
    ClientHandshake::with_bench(ClientRequest::for_payload(&fin, Notify::Tcp, None), p)
        .asking_stamps()
}

fn to_server(msg: &ClientMessage) -> ClientMessage {
    ClientMessage::parse(msg.to_line().as_bytes()).unwrap()
}
fn to_client(msg: &ServerMessage) -> ServerMessage {
    ServerMessage::parse(msg.to_line().as_bytes()).unwrap()
}

/// `c` and a server through banner, hello and accept; the hello line as sent.
fn accepted(c: &mut ClientHandshake, banner: ServerMessage) -> (ServerHandshake, String) {
    let mut s = ServerHandshake::new(policy());
    s.banner().unwrap();
    c.bind(server_binding()).unwrap();
    c.on_banner(to_client(&banner)).unwrap();
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
    let w = c
        .written()
        .unwrap()
        .expect("a bench session ends with written");
    let ServerEvent::Written(_) = s.on_message(to_server(&w)).unwrap() else {
        panic!()
    };
    (s, hello.to_line())
}

fn our_banner() -> ServerMessage {
    ServerHandshake::new(policy()).banner().unwrap()
}

/// A banner of a server from before the stamped exchange: bench sessions, no `stamped`.
fn older_banner() -> ServerMessage {
    ServerMessage::Banner(Banner {
        program: "rdma-server".to_owned(),
        program_version: "0.9".to_owned(),
        versions: vec![1],
        features: vec!["bench".to_owned()],
        auth: Auth::None,
    })
}

fn code<T: std::fmt::Debug>(r: Result<T, ProtoError>) -> (ErrorCode, String) {
    let e = r.expect_err("expected an error");
    (e.code(), e.to_string())
}

#[test]
fn a_server_with_bench_sessions_lists_stamped_and_one_without_does_not() {
    let ServerMessage::Banner(b) = our_banner() else {
        panic!()
    };
    assert!(
        b.features.iter().any(|f| f == "stamped"),
        "{:?}",
        b.features
    );
    let none = ServerPolicy {
        bench_max_len: 0,
        ..policy()
    };
    let ServerMessage::Banner(b) = ServerHandshake::new(none).banner().unwrap() else {
        panic!()
    };
    assert!(
        !b.features.iter().any(|f| f == "stamped"),
        "{:?}",
        b.features
    );
}

#[test]
fn the_servers_stamps_reach_the_client_as_sent() {
    let mut c = client(lat());
    let (mut s, hello) = accepted(&mut c, our_banner());
    assert!(hello.contains(r#""stamped":true"#), "{hello}");
    assert!(c.stamped() && s.stamped());
    let fin = final_content(&params(lat()), 5);
    let mut o = s.verify(&fin, None, None);
    o.stamps = Some(STAMPS);
    let line = s.result(o).unwrap().to_line();
    assert!(
        line.contains(r#""stamps":{"recv":305397760,"send":305430528,"clock_khz":156250,"mask":281474976710655}"#),
        "{line}"
    );
    let got = c
        .on_result(ServerMessage::parse(line.as_bytes()).unwrap())
        .unwrap();
    assert_eq!(got.stamps, Some(STAMPS));
    assert_eq!(c.state(), ClientState::Done);
}

/// The exchange runs whether or not the server's device stamps: a result without stamps is a
/// verdict like any other.
#[test]
fn a_result_without_stamps_is_fine_after_a_stamped_hello() {
    let mut c = client(lat());
    let (mut s, _) = accepted(&mut c, our_banner());
    let fin = final_content(&params(lat()), 5);
    let o = s.verify(&fin, None, None);
    let got = c.on_result(to_client(&s.result(o).unwrap())).unwrap();
    assert_eq!(got.stamps, None);
    assert!(got.verified);
}

#[test]
fn a_client_asks_only_a_server_that_lists_stamped_and_only_for_lat() {
    // An older server: no `stamped` in the hello, and stamps in its result are refused.
    let mut c = client(lat());
    let (s, hello) = accepted(&mut c, older_banner());
    assert!(!hello.contains("stamped"), "{hello}");
    assert!(!c.stamped() && !s.stamped());
    let fin = final_content(&params(lat()), 5);
    let mut o = s.verify(&fin, None, None);
    o.stamps = Some(STAMPS);
    let line = ServerMessage::Result(o).to_line();
    let (code_, msg) = code(c.on_result(ServerMessage::parse(line.as_bytes()).unwrap()));
    assert_eq!(code_, ErrorCode::InvalidField);
    assert!(
        msg.contains("stamps") && msg.contains("did not ask"),
        "{msg}"
    );
    // A bw session never asks.
    let mut c = client(BenchKind::Bw);
    let (_, hello) = accepted(&mut c, our_banner());
    assert!(!hello.contains("stamped"), "{hello}");
    assert!(!c.stamped());
}

#[test]
fn the_server_sends_no_stamps_for_a_hello_that_asked_none() {
    let p = params(lat());
    let fin = final_content(&p, p.iters);
    let mut c = ClientHandshake::with_bench(ClientRequest::for_payload(&fin, Notify::Tcp, None), p);
    let (mut s, hello) = accepted(&mut c, our_banner());
    assert!(!hello.contains("stamped"), "{hello}");
    let mut o = s.verify(&fin, None, None);
    o.stamps = Some(STAMPS);
    let (code_, msg) = code(s.result(o));
    assert_eq!(code_, ErrorCode::Internal);
    assert!(msg.contains("stamps"), "{msg}");
}

#[test]
fn wrong_stamped_fields_are_refused_naming_them() {
    let hello = |bench: &str| {
        format!(
            r#"{{"type":"hello","v":1,"qpn":17,"psn":4660,"gid":"::ffff:10.0.0.2","lid":0,"mtu":1024,"length":4096,"notify":"tcp","bench":{bench}}}"#
        )
    };
    let lat = r#"{"mode":"lat","sizes":[4096],"iters":10,"addr":4096,"rkey":1"#;
    for (bench, mentions) in [
        (
            r#"{"mode":"bw","sizes":[4096],"iters":10,"stamped":true}"#.to_owned(),
            "only a lat session",
        ),
        (format!(r#"{lat},"stamped":"yes"}}"#), "stamped"),
        (format!(r#"{lat},"stamped":1}}"#), "stamped"),
    ] {
        let e = ClientMessage::parse(hello(&bench).as_bytes()).unwrap_err();
        assert_eq!(e.code(), ErrorCode::InvalidField, "{bench}: {e}");
        assert!(e.to_string().contains(mentions), "{bench}: {e}");
    }
    // `false` is the same as leaving it out.
    let ClientMessage::Hello(h) =
        ClientMessage::parse(hello(&format!(r#"{lat},"stamped":false}}"#)).as_bytes()).unwrap()
    else {
        panic!()
    };
    assert!(!h.bench.unwrap().stamped);

    let result = |stamps: &str| {
        format!(
            r#"{{"type":"result","v":1,"verified":true,"length":4096,"crc32c":1,"text":"lat","truncated":false,"stamps":{stamps}}}"#
        )
    };
    for (stamps, field) in [
        (
            r#"{"recv":1,"send":2,"clock_khz":0,"mask":255}"#,
            "clock_khz",
        ),
        (r#"{"recv":1,"send":2,"clock_khz":1000,"mask":0}"#, "mask"),
        (r#"{"recv":1,"clock_khz":1000,"mask":255}"#, "send"),
        (
            r#"{"recv":-1,"send":2,"clock_khz":1000,"mask":255}"#,
            "recv",
        ),
        (r#"[1,2]"#, "stamps"),
    ] {
        let e = ServerMessage::parse(result(stamps).as_bytes()).unwrap_err();
        assert_eq!(e.code(), ErrorCode::InvalidField, "{stamps}: {e}");
        assert!(e.to_string().contains(field), "{stamps}: {e}");
    }
}
