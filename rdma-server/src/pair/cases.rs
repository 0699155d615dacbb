//! The cases that need no RDMA, on the in-memory [`Pair`]: real server and client sessions,
//! a fake fabric. Each also holds the session to its use of the verbs: nothing exposed for a
//! hello that is refused, nothing left exposed when a session ends, however it ended.

use super::{Client, Pair, TOKEN, Write};
use rdma_core_rs::WcStatus;
use rdma_proto::{ErrorCode, Notify};

/// The session ended with nothing of the client's left exposed.
fn nothing_left(pair: &Pair) {
    assert_eq!(
        pair.fabric.live_regions(),
        0,
        "a region outlived its session"
    );
}

#[test]
fn a_write_with_immediate_lands_in_place_and_is_verified() {
    let pair = Pair::new(64);
    let ended = pair.run(&Client::new(b"hello, pair"));
    let outcome = ended.result.expect("verified");
    assert!(outcome.verified);
    assert_eq!(outcome.text, "hello, pair");
    assert_eq!(outcome.length, 11);
    assert_eq!(outcome.crc32c, rdma_proto::crc32c(b"hello, pair"));
    assert_eq!(pair.verified(), 1);
    assert_eq!(pair.fabric.exposed().len(), 1);
    nothing_left(&pair);
}

#[test]
fn a_write_told_over_tcp_is_verified() {
    let pair = Pair::new(64);
    let ended = pair.run(&Client {
        notify: Notify::Tcp,
        ..Client::new(b"over tcp")
    });
    assert!(ended.result.expect("verified").verified);
    assert_eq!(pair.verified(), 1);
    nothing_left(&pair);
}

/// Issue 23, item 3: a connection without the token costs no device work.
#[test]
fn a_hello_without_the_token_exposes_nothing() {
    let pair = Pair::new(64);
    for token in ["wrong", &format!("{TOKEN}!"), ""] {
        let ended = pair.run(&Client {
            token: Some(token.to_owned()),
            ..Client::new(b"x")
        });
        assert_eq!(
            ended.server_error(),
            Some(ErrorCode::Unauthorized),
            "{ended:?}"
        );
    }
    // Without one, our client does not even send its hello (the banner asks for a token).
    let ended = pair.run(&Client {
        token: None,
        ..Client::new(b"x")
    });
    let err = ended.result.expect_err("no token").to_string();
    assert!(err.contains("requires a token"), "{err}");
    assert!(
        pair.fabric.exposed().is_empty(),
        "device work for a stranger"
    );
    assert_eq!(pair.verified(), 0);
}

#[test]
fn a_payload_larger_than_the_buffer_is_refused_before_anything_is_exposed() {
    let pair = Pair::new(8);
    let ended = pair.run(&Client::new(b"123456789"));
    assert_eq!(ended.server_error(), Some(ErrorCode::TooLong), "{ended:?}");
    assert!(pair.fabric.exposed().is_empty());
    // The buffer's own size is fine.
    assert!(pair.run(&Client::new(b"12345678")).result.is_ok());
}

/// iWARP has no write-with-immediate: `notify imm` is refused before anything is registered,
/// and `notify tcp` works on the same port.
#[test]
fn notify_imm_on_a_port_without_it_is_refused_before_exposing() {
    let pair = Pair::on(64, false);
    let ended = pair.run(&Client::new(b"imm"));
    assert_eq!(
        ended.server_error(),
        Some(ErrorCode::InvalidField),
        "{ended:?}"
    );
    assert!(pair.fabric.exposed().is_empty());
    let ended = pair.run(&Client {
        notify: Notify::Tcp,
        ..Client::new(b"tcp")
    });
    assert!(ended.result.expect("verified over tcp").verified);
}

/// The pin budget (`--max-pinned`) is taken before the region is registered.
#[test]
fn a_full_pin_budget_is_busy_before_exposing() {
    let mut pair = Pair::new(64);
    pair.server.pinned = crate::budget::PinBudget::new(0);
    let ended = pair.run(&Client::new(b"x"));
    assert_eq!(ended.server_error(), Some(ErrorCode::Busy), "{ended:?}");
    assert!(pair.fabric.exposed().is_empty());
}

/// The old `--fault wrong-rkey` and `out-of-bounds`: the fabric refuses the write, no byte
/// lands, and the server's session ends with the client's connection, its region gone.
#[test]
fn a_write_with_a_wrong_rkey_or_past_the_buffer_lands_nothing() {
    for write in [Write::WrongRkey, Write::PastTheEnd] {
        let pair = Pair::new(64);
        let ended = pair.run(&Client {
            write,
            ..Client::new(b"nope")
        });
        let err = ended.result.expect_err("refused").to_string();
        assert!(err.contains("RemAccessErr"), "{write:?}: {err}");
        assert!(
            matches!(&pair.fabric.refused()[..], [(WcStatus::RemAccessErr, _)]),
            "{write:?}: {:?}",
            pair.fabric.refused()
        );
        assert_eq!(pair.verified(), 0);
        nothing_left(&pair);
    }
}

/// A write shorter than the hello said, or a CRC32C that is not the payload's: the server
/// checks its own memory and says which, the client hears `verified: false`.
#[test]
fn what_did_not_land_as_announced_is_not_verified() {
    for client in [
        Client {
            write: Write::Half,
            ..Client::new(b"a whole message")
        },
        Client {
            crc: Some(0xdead_beef),
            ..Client::new(b"a whole message")
        },
    ] {
        let pair = Pair::new(64);
        let ended = pair.run(&client);
        assert!(ended.result.is_err(), "{client:?}");
        let verdict = ended.verdict.expect("the server's verdict");
        assert!(!verdict.verified, "{verdict:?}");
        assert!(verdict.reason.is_some());
        assert_eq!(pair.verified(), 0);
        nothing_left(&pair);
    }
}

/// The old `--fault rewrite-race`: the client's access is revoked before the server reads, so
/// a write after the verdict finds no queue pair and no rkey, and the verdict stands.
#[test]
fn the_clients_access_is_gone_before_the_verdict() {
    let pair = Pair::new(64);
    let ended = pair.run(&Client {
        write: Write::AgainAfterVerdict,
        ..Client::new(b"once")
    });
    let err = ended.result.expect_err("the rewrite").to_string();
    assert!(err.contains("after the verdict did not land"), "{err}");
    assert!(ended.verdict.expect("verdict").verified);
    assert!(
        matches!(&pair.fabric.refused()[..], [(WcStatus::RetryExcErr, _)]),
        "{:?}",
        pair.fabric.refused()
    );
    nothing_left(&pair);
}

/// The old `--fault kill-after-accept`: a client gone after the accept ends its session, and
/// nothing stays exposed.
#[test]
fn a_client_that_vanishes_after_the_accept_leaves_nothing_exposed() {
    let pair = Pair::new(64);
    let ended = pair.run(&Client {
        write: Write::Vanish,
        ..Client::new(b"bye")
    });
    assert!(ended.result.is_err());
    assert_eq!(pair.fabric.exposed().len(), 1);
    assert_eq!(pair.verified(), 0);
    nothing_left(&pair);
}

/// Each client gets a region of its own: a fresh rkey every session.
#[test]
fn every_session_has_a_fresh_rkey() {
    let pair = Pair::new(64);
    for i in 0..5 {
        let msg = format!("write {i}");
        assert!(pair.run(&Client::new(msg.as_bytes())).result.is_ok());
    }
    let mut rkeys = pair.fabric.exposed();
    assert_eq!(rkeys.len(), 5);
    rkeys.dedup();
    assert_eq!(rkeys.len(), 5, "an rkey served twice");
    assert_eq!(pair.verified(), 5);
    nothing_left(&pair);
}
