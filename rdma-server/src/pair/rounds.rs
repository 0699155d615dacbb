//! Rounds ([`rdma_proto::rounds`]) on the in-memory [`Pair`]: the real server session keeps a
//! session whose client asked, and the real client `Session` writes round after round on the
//! same fake queue pairs, each round a region registered anew.

use super::{KEEP_ALIVE, Pair, TOKEN};
use crate::kept::KeptSlots;
use rdma_core_rs::WcStatus;
use rdma_proto::{ClientHandshake, ClientRequest, Notify, Outcome};
use std::time::Duration;

/// What the client does between two rounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Between {
    /// Asks for the next round at once.
    Next,
    /// Waits this long first.
    Idle(Duration),
    /// Asks, then writes with the last round's rkey before this round's.
    StaleRkey,
}

/// What a session with rounds came to.
#[derive(Debug)]
struct Rounds {
    /// The keep-alive the accept granted.
    keep_alive: Option<Duration>,
    /// Each round's verdict, in order; the last may be the error that ended the session.
    verdicts: Vec<color_eyre::Result<Outcome>>,
    /// What the fabric said of each stale write.
    stale: Vec<Result<(), WcStatus>>,
}

impl Pair {
    /// One session that asks for rounds and writes `payloads`, one a round, doing `between`
    /// between rounds; the server's session is served to its end.
    fn rounds(&self, notify: Notify, payloads: &[&[u8]], between: Between) -> Rounds {
        self.serving(|addr| {
            let mut done = Rounds {
                keep_alive: None,
                verdicts: Vec::new(),
                stale: Vec::new(),
            };
            if let Err(e) = self.client_rounds(addr, notify, payloads, between, &mut done) {
                done.verdicts.push(Err(e));
            }
            done
        })
    }

    fn client_rounds(
        &self,
        addr: std::net::SocketAddr,
        notify: Notify,
        payloads: &[&[u8]],
        between: Between,
        done: &mut Rounds,
    ) -> color_eyre::Result<()> {
        let req = ClientRequest::for_payload(payloads[0], notify, Some(TOKEN.to_owned()));
        let mut s = super::open(addr, ClientHandshake::new(req).asking_rounds())?;
        let qp = self.fabric.client_qp();
        s.hello_endpoint(qp, false, super::client_gids())?;
        let accept = s.await_accept()?;
        done.keep_alive = s.keep_alive();
        self.fabric.connect(qp.qpn, accept.endpoint.qpn);
        let (mut addr, mut rkey) = (accept.addr, accept.rkey);
        for (i, payload) in payloads.iter().enumerate() {
            if i > 0 {
                if let Between::Idle(d) = between {
                    std::thread::sleep(d);
                }
                let crc = rdma_proto::crc32c(payload);
                let region = s.next_round(payload.len() as u64, crc, None)?;
                if between == Between::StaleRkey {
                    done.stale
                        .push(self.fabric.write(qp.qpn, region.addr, rkey, payload, None));
                }
                (addr, rkey) = (region.addr, region.rkey);
            }
            let imm = (notify == Notify::Imm).then_some(payload.len() as u32);
            if let Err(status) = self.fabric.write(qp.qpn, addr, rkey, payload, imm) {
                color_eyre::eyre::bail!("round {}: the write did not land: {status:?}", i + 1);
            }
            s.written()?;
            done.verdicts.push(s.result());
        }
        Ok(())
    }
}

const PAYLOADS: [&[u8]; 3] = [b"first", b"the second round", b"3rd"];

fn all_verified(r: &Rounds, n: usize) {
    assert_eq!(r.verdicts.len(), n, "{r:?}");
    for (i, v) in r.verdicts.iter().enumerate() {
        let v = v
            .as_ref()
            .unwrap_or_else(|e| panic!("round {}: {e:?}", i + 1));
        assert!(v.verified, "round {}: {v:?}", i + 1);
    }
}

#[test]
fn rounds_reuse_the_queue_pair_with_a_fresh_rkey_each() {
    for notify in [Notify::Imm, Notify::Tcp] {
        let pair = Pair::new(64);
        let r = pair.rounds(notify, &PAYLOADS, Between::Next);
        assert_eq!(r.keep_alive, Some(KEEP_ALIVE));
        all_verified(&r, 3);
        let texts: Vec<&str> = r
            .verdicts
            .iter()
            .map(|v| v.as_ref().map(|o| o.text.as_str()).unwrap_or(""))
            .collect();
        assert_eq!(texts, ["first", "the second round", "3rd"]);
        assert_eq!(pair.verified(), 3);
        // One queue pair and its first region; each later round a region of its own.
        let exposed = pair.fabric.exposed();
        let rearmed = pair.fabric.rearmed();
        assert_eq!(exposed.len(), 1, "{notify}: one session's device work");
        assert_eq!(rearmed.len(), 2, "{notify}");
        let mut rkeys = [exposed, rearmed].concat();
        rkeys.sort_unstable();
        rkeys.dedup();
        assert_eq!(rkeys.len(), 3, "an rkey was used twice: {rkeys:?}");
        // The client closed after its last verdict: nothing is left registered.
        assert_eq!(pair.fabric.live_regions(), 0);
    }
}

#[test]
fn the_last_rounds_rkey_is_dead_once_the_next_round_begins() {
    let pair = Pair::new(64);
    let r = pair.rounds(Notify::Imm, &PAYLOADS[..2], Between::StaleRkey);
    assert_eq!(r.stale, [Err(WcStatus::RemAccessErr)], "{r:?}");
    // The stale write landed nothing: the second round is verified as written.
    all_verified(&r, 2);
    assert_eq!(pair.fabric.live_regions(), 0);
}

#[test]
fn an_idle_session_ends_when_its_keep_alive_runs_out() {
    let pair = Pair::new(64);
    let r = pair.rounds(Notify::Imm, &PAYLOADS[..2], Between::Idle(KEEP_ALIVE * 2));
    assert_eq!(r.verdicts.len(), 2, "{r:?}");
    assert!(r.verdicts[0].as_ref().is_ok_and(|o| o.verified));
    let e = r.verdicts[1].as_ref().expect_err("the server closed it");
    assert!(format!("{e:?}").contains("closed"), "{e:?}");
    assert_eq!(pair.verified(), 1);
    assert_eq!(pair.fabric.rearmed().len(), 0, "nothing registered for it");
    assert_eq!(pair.fabric.live_regions(), 0);
}

#[test]
fn no_rounds_where_the_kept_slots_are_taken() {
    let mut pair = Pair::new(64);
    pair.server.kept = KeptSlots::new(0);
    let r = pair.rounds(Notify::Imm, &PAYLOADS[..2], Between::Next);
    assert_eq!(r.keep_alive, None, "declined");
    assert!(r.verdicts[0].as_ref().is_ok_and(|o| o.verified));
    let e = r.verdicts[1].as_ref().expect_err("no second round");
    assert!(format!("{e:?}").contains("without rounds"), "{e:?}");
    assert_eq!(pair.verified(), 1);
    assert_eq!(pair.fabric.live_regions(), 0);
}

#[test]
fn a_round_longer_than_the_buffer_is_refused() {
    let pair = Pair::new(8);
    let r = pair.rounds(Notify::Imm, &[b"short", b"much too long"], Between::Next);
    assert!(r.verdicts[0].as_ref().is_ok_and(|o| o.verified));
    let e = r.verdicts[1].as_ref().expect_err("too long");
    assert!(
        format!("{e:?}").contains("too_long") || format!("{e:?}").contains("TooLong"),
        "{e:?}"
    );
    assert_eq!(pair.fabric.live_regions(), 0);
}

/// A client that comes back just inside the keep-alive, round after round, is not kept past
/// the session's lifetime from its accept: its session ends at the verdict (the server closes
/// it as when its keep-alive runs out), with nothing left registered.
#[test]
fn a_kept_session_ends_at_its_lifetime_however_often_it_comes_back() {
    let mut pair = Pair::new(64);
    // No round begins within one --timeout of the end: rounds may begin for 500 ms.
    pair.server.kept = KeptSlots::new(2).lifetime(super::TIMEOUT + Duration::from_millis(500));
    let idle = KEEP_ALIVE * 3 / 4;
    let r = pair.rounds(Notify::Imm, &PAYLOADS, Between::Idle(idle));
    assert_eq!(r.verdicts.len(), 3, "{r:?}");
    for v in &r.verdicts[..2] {
        assert!(v.as_ref().is_ok_and(|o| o.verified), "{r:?}");
    }
    let e = r.verdicts[2].as_ref().expect_err("past its lifetime");
    assert!(format!("{e:?}").contains("closed"), "{e:?}");
    assert_eq!(pair.verified(), 2);
    assert_eq!(pair.fabric.rearmed().len(), 1, "nothing registered past it");
    assert_eq!(pair.fabric.live_regions(), 0);
}

/// One address holds at most its share of the kept slots: with its share taken, its next
/// session is declined rounds (it ends at its verdict); another address's slot takes nothing
/// from it.
#[test]
fn one_address_cannot_keep_more_than_its_share() {
    let mut pair = Pair::new(64);
    pair.server.kept = KeptSlots::new(4).per_source(1);
    let elsewhere = pair
        .server
        .kept
        .take("10.0.0.9".parse().expect("an address"));
    assert!(elsewhere.is_some());
    let r = pair.rounds(Notify::Imm, &PAYLOADS[..2], Between::Next);
    assert_eq!(
        r.keep_alive,
        Some(KEEP_ALIVE),
        "another address's slot is not ours"
    );
    all_verified(&r, 2);
    let mine = pair
        .server
        .kept
        .take("127.0.0.1".parse().expect("an address"));
    assert!(mine.is_some());
    let r = pair.rounds(Notify::Imm, &PAYLOADS[..2], Between::Next);
    assert_eq!(
        r.keep_alive, None,
        "declined: its address keeps one already"
    );
    assert!(r.verdicts[0].as_ref().is_ok_and(|o| o.verified));
    assert!(r.verdicts[1].is_err());
    assert_eq!(pair.server.kept.held(), 2, "the declined session held none");
    assert_eq!(pair.fabric.live_regions(), 0);
}

/// A client that asks for its next round the moment it has a verdict gets its rounds no
/// faster than the pace: 5 rounds of a 64-byte buffer paced at one per 80 ms take at least
/// 320 ms, every one verified.
#[test]
fn a_client_hammering_next_is_paced() {
    let mut pair = Pair::new(64);
    let per_round = crate::budget::write_session(64) + crate::session::ROUND_OVERHEAD;
    // One round's bytes every 80 ms.
    pair.server.kept = KeptSlots::new(2).paced(per_round * 1000 / 80);
    let payloads: [&[u8]; 5] = [b"1", b"2", b"3", b"4", b"5"];
    let t0 = std::time::Instant::now();
    let r = pair.rounds(Notify::Imm, &payloads, Between::Next);
    let took = t0.elapsed();
    all_verified(&r, 5);
    assert!(
        took >= Duration::from_millis(4 * 79),
        "5 rounds in {took:?}"
    );
    assert_eq!(pair.fabric.rearmed().len(), 4);
}
