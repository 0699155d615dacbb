//! The real client's session against a scripted server on loopback, its writes through the
//! Pair's fake fabric: answers a real server never gives (an accept naming a third host's GID)
//! and one it gives when its pinned memory is full (`busy` after the hello), after which the
//! real server session takes over.

use super::fabric::MTU;
use super::{Client, Pair};
use crate::grant::Grant;
use crate::session::serve;
use crate::verbs::WriteVerbs as _;
use rdma_proto::framing::LineConn;
use rdma_proto::{
    Accept, ClientMessage, DEFAULT_MAX_LINE, ErrorCode, ErrorMsg, Gid, ProtoError, QpEndpoint,
    ServerHandshake, ServerMessage,
};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How long a scripted answer waits for the client's next line.
const STEP: Duration = Duration::from_secs(2);

/// Runs `client` against a loopback listener whose connections `answer` takes in turn (the
/// n-th, from 0, with its peer), on a thread of its own; returns what `client` did and how
/// many connections came.
fn scripted<T>(
    answer: impl Fn(usize, TcpStream, SocketAddr) + Sync,
    client: impl FnOnce(SocketAddr) -> T,
) -> (T, usize) {
    let l = TcpListener::bind("127.0.0.1:0").expect("a loopback listener");
    let addr = l.local_addr().expect("its address");
    l.set_nonblocking(true).expect("a non-blocking listener");
    let (done, conns) = (AtomicBool::new(false), AtomicUsize::new(0));
    let ran = std::thread::scope(|scope| {
        scope.spawn(|| {
            while !done.load(Ordering::Acquire) {
                match l.accept() {
                    Ok((stream, peer)) => {
                        stream.set_nonblocking(false).expect("a blocking stream");
                        answer(conns.fetch_add(1, Ordering::AcqRel), stream, peer);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        let ran = client(addr);
        done.store(true, Ordering::Release);
        ran
    });
    (ran, conns.load(Ordering::Acquire))
}

/// The Pair's server's banner on `conn`, and the client's hello read.
fn banner_and_hello(pair: &Pair, conn: &mut LineConn<TcpStream>) -> Option<ClientMessage> {
    let banner = ServerHandshake::new(pair.server.policy.clone())
        .banner()
        .ok()?;
    conn.send_line(&banner.to_line(), Instant::now() + STEP)
        .ok()?;
    let line = conn.read_line(Instant::now() + STEP).ok()?;
    ClientMessage::parse(&line).ok()
}

/// The accept's GID is bound to the server's TCP address: a server (or anything answering on
/// its address) that names a third host's queue pair and buffer, ready to take a write on the
/// fabric, makes the client fail naming `gid` before its queue pair is connected or any write
/// is posted.
#[test]
fn an_accept_for_a_third_hosts_gid_fails_before_any_rdma() {
    let pair = Pair::new(64);
    // The third host: a queue pair and a buffer on the fabric, which a write would reach.
    let third = pair.fabric.port(true);
    let victim = third
        .expose(64, &Grant::remote_write(), rdma_core_rs::CqMode::Poll, true)
        .expect("the third host's buffer");
    let region = victim.region().expect("its region");
    let stranger: Gid = "::ffff:192.0.2.66".parse().expect("a GID");
    let accept = ServerMessage::Accept(Accept {
        endpoint: QpEndpoint {
            qpn: victim.qp().0,
            psn: 1,
            gid: stranger,
            lid: 0,
            mtu: MTU,
        },
        addr: region.addr,
        rkey: region.rkey,
        buf_len: region.len,
        cm: None,
        keep_alive_ms: None,
    });
    let (ended, conns) = scripted(
        |_, stream, _| {
            let mut conn = LineConn::new(stream, DEFAULT_MAX_LINE);
            if banner_and_hello(&pair, &mut conn).is_some() {
                let _ = conn.send_line(&accept.to_line(), Instant::now() + STEP);
                // Whatever the client does next (it should only close).
                let _ = conn.read_line(Instant::now() + STEP);
            }
        },
        |addr| pair.client(addr, &Client::new(b"for a third host")),
    );
    assert_eq!(conns, 1);
    let err = ended.result.expect_err("an accept for a third host");
    let proto = err
        .chain()
        .find_map(|c| c.downcast_ref::<ProtoError>())
        .unwrap_or_else(|| panic!("no protocol error in {err:?}"));
    assert!(
        matches!(
            proto,
            ProtoError::InvalidField {
                msg: "accept",
                field: "gid",
                ..
            }
        ),
        "{proto:?}"
    );
    let shown = proto.to_string();
    assert!(shown.contains("::ffff:192.0.2.66 is not"), "{shown}");
    assert!(
        shown.contains("the server is reached over loopback"),
        "{shown}"
    );
    assert!(
        pair.fabric.connected().is_empty(),
        "the client's queue pair moved towards {:?}",
        pair.fabric.connected()
    );
    assert_eq!(pair.fabric.posted(), 0, "a write was posted");
    assert_eq!(pair.fabric.refused(), vec![]);
}

/// A server whose pinned memory is full answers the hello with `busy`. Under
/// `--wait-for-server` the client tries again (a new connection, a new banner, the same hello
/// for the same queue pair) and its write is verified; without it, the `busy` is the answer.
#[test]
fn busy_after_the_hello_is_tried_again_under_wait_for_server() {
    for wait in [Some(Duration::from_secs(5)), None] {
        let pair = Pair::new(64);
        let busy_once = |n, stream: TcpStream, peer| {
            if n > 0 {
                return serve(&pair.server, stream, peer, n as u64);
            }
            let mut conn = LineConn::new(stream, DEFAULT_MAX_LINE);
            if banner_and_hello(&pair, &mut conn).is_some() {
                let busy = ServerMessage::Error(ErrorMsg::new(
                    ErrorCode::Busy,
                    "pinned memory is at --max-pinned; try again later",
                ));
                let _ = conn.send_line(&busy.to_line(), Instant::now() + STEP);
            }
        };
        let (ended, conns) = scripted(busy_once, |addr| {
            pair.client_waiting(addr, &Client::new(b"after a busy"), wait)
        });
        if wait.is_some() {
            let outcome = ended.result.expect("verified after the busy");
            assert!(outcome.verified);
            assert_eq!(outcome.text, "after a busy");
            assert_eq!(conns, 2);
            assert_eq!(pair.verified(), 1);
            // One queue pair of ours, announced on both connections, connected once.
            assert_eq!(pair.fabric.connected().len(), 1);
        } else {
            assert_eq!(ended.server_error(), Some(ErrorCode::Busy), "{ended:?}");
            assert_eq!(conns, 1);
            assert_eq!(pair.fabric.posted(), 0);
        }
    }
}
