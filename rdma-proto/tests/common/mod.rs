//! What the state machines' tests share (each test crate uses some of it).

#![allow(dead_code)]

use rdma_proto::*;

/// A server's policy: a 64-byte buffer, `token`, nothing optional.
pub fn policy(token: Option<&str>) -> ServerPolicy {
    ServerPolicy {
        buffer_size: 64,
        token: token.map(str::to_owned),
        program_version: "0.1.0".to_owned(),
        features: ServerPolicy::default_features(),
        bench_max_len: 0,
        keep_alive_ms: 0,
    }
}

/// A client's queue pair `qpn` at 10.0.0.1 (RoCE, IPv4-mapped GID), MTU 1024.
pub fn ep(qpn: u32) -> QpEndpoint {
    QpEndpoint {
        qpn,
        psn: 0x10,
        gid: std::net::Ipv4Addr::new(10, 0, 0, 1).to_ipv6_mapped().into(),
        lid: 0,
        mtu: 1024,
    }
}

pub const PAYLOAD: &[u8] = b"Hello RDMA Write!";

pub fn hello(notify: Notify, length: u64, token: Option<&str>) -> ClientMessage {
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

pub fn written(length: u64) -> ClientMessage {
    ClientMessage::Written(Written {
        length,
        crc32c: crc32c(PAYLOAD),
    })
}

/// A server that has sent its banner.
pub fn server(token: Option<&str>) -> ServerHandshake {
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
pub fn peer_binding() -> GidBinding {
    GidBinding::Peer {
        peer: "10.0.0.1".parse().unwrap(),
        local: vec![],
    }
}

/// Feeds `msg` (a hello) and binds it to its connection from 10.0.0.1, as a server does once
/// it has picked the port: `AwaitHello -> AwaitBinding -> AwaitAccept`.
pub fn admit(s: &mut ServerHandshake, msg: ClientMessage) -> ServerEvent {
    let event = s.on_message(msg).unwrap();
    assert_eq!(s.state(), ServerState::AwaitBinding);
    s.bind(peer_binding()).unwrap();
    event
}

/// A server in AwaitWrite.
pub fn accepted_server(notify: Notify) -> ServerHandshake {
    let mut s = server(None);
    admit(&mut s, hello(notify, 17, None));
    assert_eq!(s.state(), ServerState::AwaitAccept);
    s.accept(ep(9), 0x1_0000_0000, 5, 64).unwrap();
    assert_eq!(s.state(), ServerState::AwaitWrite { notify });
    s
}

pub fn assert_code<T: std::fmt::Debug>(r: Result<T, ProtoError>, code: ErrorCode) -> ProtoError {
    let e = r.expect_err("expected an error");
    assert_eq!(e.code(), code, "{e}");
    e
}

/// A client of a server at 10.0.0.1 (whose GID `ep` announces, as [`accept_msg`] does), on
/// RoCE: bound to it.
pub fn client(notify: Notify, token: Option<&str>) -> ClientHandshake {
    let mut c = ClientHandshake::new(ClientRequest::for_payload(
        PAYLOAD,
        notify,
        token.map(str::to_owned),
    ));
    c.bind(server_binding()).unwrap();
    c
}

/// The binding of a client's connection to a server at 10.0.0.1 (whose GID `ep` announces),
/// on RoCE: the accept's GID must be `::ffff:10.0.0.1`.
pub fn server_binding() -> GidBinding {
    GidBinding::Peer {
        peer: "10.0.0.1".parse().unwrap(),
        local: vec![],
    }
}

pub fn banner(versions: Vec<u32>, auth: Auth) -> ServerMessage {
    ServerMessage::Banner(Banner {
        program: "rdma-server".into(),
        program_version: "9.9.9".into(),
        versions,
        features: vec!["notify-imm".into(), "something-new".into()],
        auth,
    })
}

pub fn accept_msg(buf_len: u64) -> ServerMessage {
    ServerMessage::Accept(Accept {
        endpoint: ep(9),
        addr: 0xffff_ffff_ffff_f000,
        rkey: 0xdead_beef,
        buf_len,
        cm: None,
        keep_alive_ms: None,
    })
}

pub fn outcome(verified: bool, length: u64, crc: u32) -> ServerMessage {
    ServerMessage::Result(Outcome {
        verified,
        length,
        crc32c: crc,
        text: "Hello RDMA Write!".into(),
        truncated: false,
        reason: (!verified).then(|| "crc32c of the buffer is 0x00000000".to_owned()),
        stamps: None,
    })
}

/// A client in AwaitResult.
pub fn written_client(notify: Notify) -> ClientHandshake {
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
pub fn bench_params(mode: BenchMode, sizes: Vec<u64>) -> BenchParams {
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
        stamped: false,
    }
}

pub fn bench_hello(length: u64) -> ClientMessage {
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
