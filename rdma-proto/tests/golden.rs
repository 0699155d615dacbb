//! Golden vectors: the exact bytes of full handshakes, and bad lines with their error codes.
//!
//! `tests/golden/handshake-{imm,tcp}.jsonl`: one wire line per file line, prefixed `S: ` (sent by
//! the server) or `C: ` (sent by the client), in the order they are sent. They are produced by
//! driving the real state machines; the test fails if one byte of the encoding changes.
//! To regenerate after an intended change: `UPDATE_GOLDEN=1 cargo test -p rdma-proto --test golden`
//! (and review the diff: changing these bytes may break deployed peers).
//!
//! `tests/golden/bad-lines.jsonl`: one JSON object per line: `to` ("server": parsed with
//! `ClientMessage::parse`; "client": with `ServerMessage::parse`), `code` (the error code it must
//! produce), `line` (the raw line as a JSON string) or `hex` (raw bytes, for non-UTF-8), optional
//! `mentions` (text the error message must contain) and `why`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may unwrap (clippy.toml covers only #[test] fns)

use std::path::PathBuf;

use rdma_proto::*;

mod common;

use common::policy;

const PAYLOAD: &[u8] = b"Hello RDMA Write!";

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

fn client_ep() -> QpEndpoint {
    QpEndpoint {
        qpn: 0x11,
        psn: 0x1234,
        gid: "::ffff:10.0.0.2".parse().unwrap(),
        lid: 0,
        mtu: 1024,
    }
}

fn server_ep() -> QpEndpoint {
    QpEndpoint {
        qpn: 0x12,
        psn: 0x5678,
        gid: "fe80::5054:ff:fe12:3401".parse().unwrap(),
        lid: 0,
        mtu: 1024,
    }
}

/// The banner and the client's hello, through `to_line`/`parse`, onto the transcript `out`;
/// returns the hello as the server took it.
fn banner_and_hello(
    server: &mut ServerHandshake,
    client: &mut ClientHandshake,
    out: &mut String,
) -> Hello {
    banner_and_hello_cm(server, client, out, client_ep(), false)
}

/// [`banner_and_hello`] with the client's endpoint `ep`, asking for RDMA CM when `cm`.
fn banner_and_hello_cm(
    server: &mut ServerHandshake,
    client: &mut ClientHandshake,
    out: &mut String,
    ep: QpEndpoint,
    cm: bool,
) -> Hello {
    // As a real client does: bound to the server's TCP address (server_ep's GID), on RoCE.
    client
        .bind(GidBinding::Peer {
            peer: "fe80::5054:ff:fe12:3401".parse().unwrap(),
            local: vec![],
        })
        .unwrap();
    let banner = server.banner().unwrap().to_line();
    out.push_str(&format!("S: {banner}"));
    client
        .on_banner(ServerMessage::parse(banner.as_bytes()).unwrap())
        .unwrap();
    let hello = client.hello_cm(ep, cm).unwrap().to_line();
    out.push_str(&format!("C: {hello}"));
    let ServerEvent::Hello(h) = server.on_line(hello.as_bytes()).unwrap() else {
        panic!("expected hello event")
    };
    // As a real server does: bound to the client's TCP address (10.0.0.2), on RoCE.
    server
        .bind(GidBinding::Peer {
            peer: "10.0.0.2".parse().unwrap(),
            local: vec![],
        })
        .unwrap();
    h
}

/// Drives client and server through a full handshake over `to_line`/`parse` and returns the
/// transcript.
fn transcript(notify: Notify, token: Option<&str>) -> String {
    let mut out = String::new();
    let mut server = ServerHandshake::new(policy(token));
    let mut client = ClientHandshake::new(ClientRequest::for_payload(
        PAYLOAD,
        notify,
        token.map(str::to_owned),
    ));

    let h = banner_and_hello(&mut server, &mut client, &mut out);
    assert_eq!(h.notify, notify);

    // A real 64-bit address above 4 GiB: the seed's 32-bit truncation would lose it.
    let accept = server
        .accept(server_ep(), 0x7f8a_1234_5000, 0x0002_1f3c, 64)
        .unwrap()
        .to_line();
    out.push_str(&format!("S: {accept}"));
    let a = client
        .on_accept(ServerMessage::parse(accept.as_bytes()).unwrap())
        .unwrap();
    assert_eq!(a.addr, 0x7f8a_1234_5000);

    // (the RDMA Write happens here)
    let imm = match client.written().unwrap() {
        Some(w) => {
            let w = w.to_line();
            out.push_str(&format!("C: {w}"));
            assert!(matches!(
                server.on_line(w.as_bytes()).unwrap(),
                ServerEvent::Written(_)
            ));
            None
        }
        None => Some(PAYLOAD.len() as u32),
    };
    let outcome = server.verify(PAYLOAD, imm, None);
    assert!(outcome.verified, "{outcome:?}");
    let result = server.result(outcome).unwrap().to_line();
    out.push_str(&format!("S: {result}"));
    let o = client
        .on_result(ServerMessage::parse(result.as_bytes()).unwrap())
        .unwrap();
    assert_eq!(o.text, "Hello RDMA Write!");
    assert_eq!(server.state(), ServerState::Done);
    assert_eq!(client.state(), ClientState::Done);
    out
}

fn check_golden(name: &str, actual: &str) {
    let path = golden_dir().join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, actual).unwrap();
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; run with UPDATE_GOLDEN=1 to create it",
            path.display()
        )
    });
    assert_eq!(
        actual, expected,
        "encoding of {name} changed; if intended, rerun with UPDATE_GOLDEN=1 and review the diff"
    );
}

#[test]
fn golden_handshake_imm() {
    check_golden("handshake-imm.jsonl", &transcript(Notify::Imm, None));
}

#[test]
fn golden_handshake_tcp_with_token() {
    check_golden(
        "handshake-tcp.jsonl",
        &transcript(Notify::Tcp, Some("s3cret")),
    );
}

/// A bench session (`hello.bench`, lat): the banner lists `bench`, the client's hello carries
/// its parameters and its own buffer, the session ends like a tcp write with the final bytes.
fn bench_transcript() -> String {
    let mut out = String::new();
    let mut server = ServerHandshake::new(ServerPolicy {
        bench_max_len: 8 << 20,
        ..policy(None)
    });
    let (bench, fin) = lat_bench();
    let mut client =
        ClientHandshake::with_bench(ClientRequest::for_payload(&fin, Notify::Tcp, None), bench);
    let h = banner_and_hello(&mut server, &mut client, &mut out);
    assert_eq!(h.bench.as_ref().map(|b| b.iters), Some(1000));
    accept_onto(&mut server, &mut client, 4096, &mut out);
    // (the ping-pong happens here)
    finish_tcp(&mut server, &mut client, &fin, &mut out);
    out
}

/// The server's accept (its endpoint, a buffer of `buf_len` bytes) onto `out`, which the client
/// takes.
fn accept_onto(
    server: &mut ServerHandshake,
    client: &mut ClientHandshake,
    buf_len: u64,
    out: &mut String,
) -> Accept {
    let accept = server
        .accept(server_ep(), 0x7f8a_1234_5000, 0x0002_1f3c, buf_len)
        .unwrap()
        .to_line();
    out.push_str(&format!("S: {accept}"));
    client
        .on_accept(ServerMessage::parse(accept.as_bytes()).unwrap())
        .unwrap()
}

/// The end of a notify-tcp session onto `out`: the client's `written`, the server's check of
/// `payload` and its `result`, which the client takes.
fn finish_tcp(
    server: &mut ServerHandshake,
    client: &mut ClientHandshake,
    payload: &[u8],
    out: &mut String,
) {
    finish_stamped(server, client, payload, None, out);
}

/// [`finish_tcp`], the server's `result` carrying `stamps`.
fn finish_stamped(
    server: &mut ServerHandshake,
    client: &mut ClientHandshake,
    payload: &[u8],
    stamps: Option<rdma_proto::bench::Turnaround>,
    out: &mut String,
) {
    let w = client.written().unwrap().unwrap().to_line();
    out.push_str(&format!("C: {w}"));
    server.on_line(w.as_bytes()).unwrap();
    let mut outcome = server.verify(payload, None, None);
    assert!(outcome.verified, "{outcome:?}");
    outcome.stamps = stamps;
    let result = server.result(outcome).unwrap().to_line();
    out.push_str(&format!("S: {result}"));
    client
        .on_result(ServerMessage::parse(result.as_bytes()).unwrap())
        .unwrap();
    assert_eq!(client.state(), ClientState::Done);
}

#[test]
fn golden_handshake_bench() {
    check_golden("handshake-bench.jsonl", &bench_transcript());
}

/// A lat bench session with the stamped exchange (feature `stamped`): the hello asks for it
/// (`bench.stamped`), and the server's `result` carries what its device stamped: the receive
/// completion of the client's ping, the send completion of its answer, and its clock.
fn stamped_transcript() -> String {
    let mut out = String::new();
    let mut server = ServerHandshake::new(ServerPolicy {
        bench_max_len: 8 << 20,
        ..policy(None)
    });
    let (bench, fin) = lat_bench();
    let mut client =
        ClientHandshake::with_bench(ClientRequest::for_payload(&fin, Notify::Tcp, None), bench)
            .asking_stamps();
    let h = banner_and_hello(&mut server, &mut client, &mut out);
    assert!(h.bench.as_ref().is_some_and(|b| b.stamped));
    accept_onto(&mut server, &mut client, 4096, &mut out);
    // (the ping-pong, then the stamped exchange, happen here)
    let stamps = rdma_proto::bench::Turnaround {
        recv: 0x0000_1a2b_3c4d_5e00,
        send: 0x0000_1a2b_3c4d_9f00,
        clock_khz: 156_250,
        mask: 0x0000_ffff_ffff_ffff,
    };
    finish_stamped(&mut server, &mut client, &fin, Some(stamps), &mut out);
    assert_eq!(client.outcome().and_then(|o| o.stamps), Some(stamps));
    out
}

#[test]
fn golden_handshake_bench_stamped() {
    check_golden("handshake-bench-stamped.jsonl", &stamped_transcript());
}

/// Every golden line parses on the receiving side and re-encodes to the same bytes.
#[test]
fn golden_lines_roundtrip() {
    for name in [
        "handshake-imm.jsonl",
        "handshake-tcp.jsonl",
        "handshake-bench.jsonl",
        "handshake-cm.jsonl",
        "handshake-rounds.jsonl",
        "handshake-bench-rounds.jsonl",
        "handshake-bench-stamped.jsonl",
    ] {
        let text = std::fs::read_to_string(golden_dir().join(name)).unwrap();
        let mut n = 0;
        for line in text.split_inclusive('\n') {
            let (dir, wire) = line.split_at(3);
            let again = match dir {
                "S: " => ServerMessage::parse(wire.as_bytes()).unwrap().to_line(),
                "C: " => ClientMessage::parse(wire.as_bytes()).unwrap().to_line(),
                other => panic!("{name}: bad prefix {other:?}"),
            };
            assert_eq!(again, wire, "{name}");
            n += 1;
        }
        assert!(n >= 4, "{name} has only {n} lines");
    }
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn bad_lines_give_their_codes() {
    let text = std::fs::read_to_string(golden_dir().join("bad-lines.jsonl")).unwrap();
    let mut n = 0;
    for (i, row) in text.lines().enumerate() {
        let row: serde_json::Value = serde_json::from_str(row).unwrap();
        let bytes = match (row.get("line"), row.get("hex")) {
            (Some(l), None) => l.as_str().unwrap().as_bytes().to_vec(),
            (None, Some(h)) => unhex(h.as_str().unwrap()),
            _ => panic!("row {i}: needs exactly one of line/hex"),
        };
        let want: ErrorCode = row["code"].as_str().unwrap().parse().unwrap();
        let err = match row["to"].as_str().unwrap() {
            "server" => ClientMessage::parse(&bytes).map(|m| m.to_line()),
            "client" => ServerMessage::parse(&bytes).map(|m| m.to_line()),
            other => panic!("row {i}: bad `to` {other}"),
        }
        .expect_err(&format!("row {i} parsed but must fail with {want}"));
        assert_eq!(err.code(), want, "row {i}: {err}");
        if let Some(m) = row.get("mentions") {
            let m = m.as_str().unwrap();
            assert!(
                err.to_string().contains(m),
                "row {i}: `{err}` does not mention `{m}`"
            );
        }
        // The error message to send back is itself a valid line.
        let back = ServerMessage::Error(err.to_error_msg()).to_line();
        assert!(matches!(
            ServerMessage::parse(back.as_bytes()),
            Ok(ServerMessage::Error(_))
        ));
        n += 1;
    }
    assert!(n >= 50, "only {n} bad lines");
}

/// RDMA CM connection mode (feature `cm`, iWARP's notify tcp): the hello asks with `cm`, whose
/// GID (iWARP's, not an address) the server does not bind; the accept carries the CM port and
/// the nonce the client's connection request must present.
fn cm_transcript() -> String {
    let mut out = String::new();
    let mut features = ServerPolicy::default_features();
    features.push(rdma_proto::cm::FEATURE.to_owned());
    let mut server = ServerHandshake::new(ServerPolicy {
        features,
        ..policy(None)
    });
    let mut client = ClientHandshake::new(ClientRequest::for_payload(PAYLOAD, Notify::Tcp, None));
    let iwarp = QpEndpoint {
        gid: "5254:ff:fe12:3402::".parse().unwrap(),
        ..client_ep()
    };
    let h = banner_and_hello_cm(&mut server, &mut client, &mut out, iwarp, true);
    assert!(h.cm);
    let offer = CmOffer {
        port: 40123,
        nonce: *b"\x8f\x01\x22\x33\x44\x55\x66\x77\x88\x99\xaa\xbb\xcc\xdd\xee\xff",
    };
    let accept = server
        .accept_cm(server_ep(), 0x7f8a_1234_5000, 0x0002_1f3c, 64, Some(offer))
        .unwrap()
        .to_line();
    out.push_str(&format!("S: {accept}"));
    let a = client
        .on_accept(ServerMessage::parse(accept.as_bytes()).unwrap())
        .unwrap();
    assert_eq!(a.cm, Some(offer));
    // (RDMA CM connects the queue pairs, then the write happens here)
    finish_tcp(&mut server, &mut client, PAYLOAD, &mut out);
    out
}

#[test]
fn golden_handshake_cm() {
    check_golden("handshake-cm.jsonl", &cm_transcript());
}

/// The lat bench session of the golden transcripts (its answers into the client's buffer at
/// `0x7f8a_5678_9000`), and the bytes the server holds at its end.
fn lat_bench() -> (BenchParams, Vec<u8>) {
    let bench = BenchParams {
        kind: BenchKind::Lat(PongBuffer {
            addr: 0x7f8a_5678_9000,
            rkey: 0x0003_1a2b,
        }),
        sizes: vec![2, 4096],
        iters: 1000,
        stamped: false,
    };
    let fin = rdma_proto::bench::final_content(&bench, bench.iters);
    (bench, fin)
}

/// The client's `next` and the server's `region` onto `out`: the buffer at `addr`, its `rkey`
/// and `buf_len`, which the client takes.
fn next_onto(
    server: &mut ServerHandshake,
    client: &mut ClientHandshake,
    next: ClientMessage,
    (addr, rkey, buf_len): (u64, u32, u64),
    out: &mut String,
) -> Region {
    let next = next.to_line();
    out.push_str(&format!("C: {next}"));
    assert!(matches!(
        server.on_line(next.as_bytes()).unwrap(),
        ServerEvent::Next(_)
    ));
    assert_eq!(server.state(), ServerState::AwaitRegion);
    let region = server.region(addr, rkey, buf_len).unwrap().to_line();
    out.push_str(&format!("S: {region}"));
    client
        .on_region(ServerMessage::parse(region.as_bytes()).unwrap())
        .unwrap()
}

/// Rounds (`hello.rounds`): the banner lists `rounds`, the accept grants a keep-alive, and
/// after the first verdict a `next` gets a fresh `region` (a new rkey) for a second write on
/// the same queue pairs, verified as the first (notify tcp: the second round's `written` and
/// CRC32C are those of the second payload).
fn rounds_transcript() -> String {
    let mut out = String::new();
    let mut server = ServerHandshake::new(ServerPolicy {
        keep_alive_ms: 30_000,
        ..policy(None)
    });
    let mut client = ClientHandshake::new(ClientRequest::for_payload(PAYLOAD, Notify::Tcp, None))
        .asking_rounds();
    let h = banner_and_hello(&mut server, &mut client, &mut out);
    assert!(h.rounds);
    let a = accept_onto(&mut server, &mut client, 64, &mut out);
    assert_eq!(a.keep_alive_ms, Some(30_000));
    assert_eq!(
        client.keep_alive(),
        Some(std::time::Duration::from_secs(30))
    );
    let second: &[u8] = b"and again, on the same QPs";
    for (round, payload) in [(1, PAYLOAD), (2, second)] {
        if round > 1 {
            let next = client.next(payload.len() as u64, crc32c(payload), None);
            let r = next_onto(
                &mut server,
                &mut client,
                next.unwrap(),
                (0x7f8a_1234_6000, 0x0002_1f4d, 64),
                &mut out,
            );
            assert_eq!(r.rkey, 0x0002_1f4d);
        }
        // (the RDMA Write happens here)
        finish_tcp(&mut server, &mut client, payload, &mut out);
        assert_eq!(server.state(), ServerState::Kept, "round {round}");
    }
    out
}

#[test]
fn golden_handshake_rounds() {
    check_golden("handshake-rounds.jsonl", &rounds_transcript());
}

/// Bench rounds (`hello.rounds` in a lat bench hello, feature `bench-rounds`): the second
/// round's `next` repeats the sweep's length and CRC32C and names a fresh buffer of the
/// client's for the answers (`pong`); the server's `region` is its fresh buffer for the pings.
fn bench_rounds_transcript() -> String {
    let mut out = String::new();
    let mut server = ServerHandshake::new(ServerPolicy {
        bench_max_len: 8 << 20,
        keep_alive_ms: 30_000,
        ..policy(None)
    });
    let (bench, fin) = lat_bench();
    let mut client =
        ClientHandshake::with_bench(ClientRequest::for_payload(&fin, Notify::Tcp, None), bench)
            .asking_rounds();
    let h = banner_and_hello(&mut server, &mut client, &mut out);
    assert!(h.rounds);
    let a = accept_onto(&mut server, &mut client, 4096, &mut out);
    assert_eq!(a.keep_alive_ms, Some(30_000));
    // (the first round's ping-pong happens here)
    finish_tcp(&mut server, &mut client, &fin, &mut out);
    let pong = PongBuffer {
        addr: 0x7f8a_5678_b000,
        rkey: 0x0003_1a4e,
    };
    let next = client.next(4096, crc32c(&fin), Some(pong)).unwrap();
    let r = next_onto(
        &mut server,
        &mut client,
        next,
        (0x7f8a_1234_7000, 0x0002_1f5e, 4096),
        &mut out,
    );
    assert_eq!(server.pong(), Some(pong));
    assert_eq!(r.rkey, 0x0002_1f5e);
    // (the second round's ping-pong happens here, its answers into `pong`)
    finish_tcp(&mut server, &mut client, &fin, &mut out);
    assert_eq!(server.state(), ServerState::Kept);
    out
}

#[test]
fn golden_handshake_bench_rounds() {
    check_golden("handshake-bench-rounds.jsonl", &bench_rounds_transcript());
}
