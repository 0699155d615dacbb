//! The verdicts on our own pair in a `vm-smoke` run (`--rdma-write`): what both ends chose and
//! said, read from their `--json` events.

use super::plans::Shape;
use crate::plan::LinkKind;

/// Our pair's verdict: the client's write verified, and both ends on the traffic link's device
/// by their own choice (the client's `connected.chosen`, the server's `port_chosen`). Through
/// RDMA CM (siw, or `--rdma-cm`) both queue pairs must say `via: cm`; on siw the client must
/// also have said it took notify tcp (iWARP has no write-with-immediate).
pub(super) fn our_choice(shape: &Shape, client: &str, server: &str) -> Result<(), String> {
    use rdma_proto::events::{QpVia, client::Event as C, server::Event as S};
    let dev = shape.dev(shape.traffic_link());
    let mut chosen = None;
    let mut verified = false;
    let mut client_via = None;
    let mut notify = None;
    let mut rows = 0;
    let mut last_row = "";
    for l in client.lines().filter(|l| l.starts_with('{')) {
        match serde_json::from_str::<C<'static>>(l) {
            Ok(C::Connected {
                device, chosen: c, ..
            }) => chosen = Some((device, c)),
            Ok(C::QpReady { via, .. }) => client_via = Some(via),
            Ok(C::NotifyChosen { notify: n, why }) => notify = Some((n, why)),
            Ok(C::BenchLat(_) | C::BenchBw(_)) => {
                rows += 1;
                last_row = l;
            }
            Ok(C::Verified { verified: v, .. }) => verified = v,
            Ok(_) => {}
            Err(e) => return Err(format!("a client line that is no client event ({e}): {l}")),
        }
    }
    let mut on = None;
    let mut server_via = None;
    let mut offered = None;
    for l in server.lines().filter(|l| l.starts_with('{')) {
        match serde_json::from_str::<S<'static>>(l) {
            Ok(S::PortChosen { device, why, .. }) => on = Some((device, why)),
            Ok(S::QpReady { via, .. }) => server_via = Some(via),
            Ok(S::Listening { cm, .. }) => offered = Some(cm),
            Ok(_) => {}
            Err(e) => return Err(format!("a server line that is no server event ({e}): {l}")),
        }
    }
    let want_via = if shape.rping() {
        QpVia::Cm
    } else {
        QpVia::Handshake
    };
    // The server offers RDMA CM exactly where its modules are loaded (siw, --rdma-cm).
    if offered != Some(shape.rping()) {
        return Err(format!(
            "the server's `listening` should say cm: {} here; it said {offered:?}",
            shape.rping()
        ));
    }
    if client_via != Some(want_via) || server_via != Some(want_via) {
        return Err(format!(
            "the queue pairs should be connected via {want_via:?}: client said {client_via:?}, server {server_via:?}"
        ));
    }
    if let Some(mode) = &shape.bench {
        if rows == 0 {
            return Err(format!("--bench {mode} printed no measurement row"));
        }
        println!("  client     {rows} bench {mode} row(s), the last: {last_row}");
    }
    // A write on siw must have chosen notify tcp; a bench session is tcp by the protocol, so
    // there is nothing to choose.
    let chooses_tcp = shape.transport == LinkKind::Siw && shape.bench.is_none();
    match &notify {
        Some((rdma_proto::Notify::Tcp, why)) if chooses_tcp => println!("  client     {why}"),
        None if !chooses_tcp => {}
        other => {
            return Err(format!(
                "on {} the client should {}say it chose notify tcp; it said {other:?}",
                shape.transport.as_str(),
                if chooses_tcp { "" } else { "not " }
            ));
        }
    }
    match (chosen, on) {
        (Some((d, Some(why))), Some((sd, swhy))) if d == dev && sd == dev && verified => {
            println!("  client     chose {why}\n  server     chose {swhy}");
            Ok(())
        }
        (c, s) => Err(format!(
            "rdma-write with no device flags should run over {dev}, verified: client chose {c:?} \
             (verified {verified}), server chose {s:?}"
        )),
    }
}

/// With `--cm-bad-nonce`: the first client's connection request was refused for its nonce
/// (its error names the CM's REJECTED event) and the server said the session failed; a flood
/// of wrong-nonce requests made the server give that session up in time, with `cm_rejected`
/// events; a second request after a session's own was refused at once; a request along a
/// path to a third host was rejected for its path; a bench session that
/// connected late was ended at --bench-max-time from its accept (issue 23, items 4, 5 and 6);
/// then the server served the real client (judged by [`our_choice`]).
pub(super) fn rejected<'a>(
    shape: &Shape,
    step: &dyn Fn(&str) -> Option<&'a crate::plan::StepResult>,
    server: &str,
) -> Result<(), String> {
    use rdma_proto::events::server::Event as S;
    if !shape.cm_bad_nonce {
        return Ok(());
    }
    let Some(bad) = step(super::cm::BAD_NONCE) else {
        return Err(format!("no {} step ran", super::cm::BAD_NONCE));
    };
    let refused = bad.stdout.contains("RDMA_CM_EVENT_REJECTED");
    let told = server.contains("did not connect through RDMA CM");
    if !(refused && told && bad.ok) {
        return Err(format!(
            "a wrong RDMA CM nonce should be rejected (client exit 3 naming RDMA_CM_EVENT_REJECTED: {refused}, exit {:?}; server failing that session: {told}); client said {}",
            bad.exit_code,
            crate::text::tail(&bad.stdout, 600)
        ));
    }
    println!("  bad nonce  rejected by the server's RDMA CM listener, which went on serving");
    for name in [
        super::cm::CM_EXAMPLE,
        super::cm::CM_FLOOD,
        super::cm::CM_TWICE,
        super::cm::CM_FOREIGN,
        super::cm::CM_LATE,
    ] {
        match step(name) {
            Some(s) if s.ok && s.exit_code == Some(0) => {
                let said = s.stdout.lines().last().unwrap_or_default();
                println!("  {name}  {said}");
            }
            Some(s) => {
                return Err(format!(
                    "{name} should exit 0 (the server behaved); it exited {:?}: {}",
                    s.exit_code,
                    crate::text::tail(&format!("{}{}", s.stdout, s.stderr), 1200)
                ));
            }
            None => return Err(format!("no {name} step ran")),
        }
    }
    let rejects = server
        .lines()
        .filter_map(|l| serde_json::from_str::<S<'static>>(l).ok())
        .filter(|e| matches!(e, S::CmRejected { .. }))
        .count();
    // The bad nonce's one, and at most 3 + the last of the flood's 16: logged, not 24.
    if !(3..=6).contains(&rejects) {
        return Err(format!(
            "the server should log a few `cm_rejected` events (the bad nonce's and the flood's \
             first), not {rejects}"
        ));
    }
    Ok(())
}
