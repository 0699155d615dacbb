//! Rounds ([`rdma_proto::rounds`]) on the in-memory [`Pair`]: the real server session keeps a
//! session whose client asked, and the real client `Session` writes round after round on the
//! same fake queue pairs, each round a region registered anew.

use super::{KEEP_ALIVE, Pair, TOKEN};
use crate::session::KeptSlots;
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
