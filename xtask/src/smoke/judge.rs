//! The verdicts on our own pair in a `vm-smoke` run (`--rdma-write`): what both ends chose and
//! said, read from their `--json` events in the run's transcript.

use super::plans::Shape;
use crate::plan::LinkKind;
use crate::scenario::exit::ExitKind;
use crate::scenario::judge;
use crate::scenario::transcript::Role;
use rdma_proto::Exit;

/// Our pair's verdict: the client's write verified, and both ends on the traffic link's device
/// by their own choice (the client's `connected.chosen`, the server's `port_chosen`). Through
/// RDMA CM (siw, or `--rdma-cm`) both queue pairs must say `via: cm`; on siw the client must
/// also have said it took notify tcp (iWARP has no write-with-immediate).
pub(super) fn our_choice(shape: &Shape, client: &Role, server: &Role) -> Result<(), String> {
    use rdma_proto::events::{QpVia, client::Event as C, server::Event as S};
    let dev = shape.dev(shape.traffic_link());
    if let Some(e) = client.strangers.first() {
        return Err(format!("a client line that is no client event ({e})"));
    }
    if let Some(e) = server.strangers.first() {
        return Err(format!("a server line that is no server event ({e})"));
    }
    let mut chosen = None;
    let mut verified = false;
    let mut client_via = None;
    let mut notify = None;
    let mut rows = 0;
    let mut last_row = String::new();
    for e in &client.client {
        match e {
            C::Connected {
                device, chosen: c, ..
            } => chosen = Some((device.clone(), c.clone())),
            C::QpReady { via, .. } => client_via = Some(*via),
            C::NotifyChosen { notify: n, why } => notify = Some((*n, why.clone())),
            C::BenchLat(_) | C::BenchBw(_) => {
                rows += 1;
                last_row = serde_json::to_string(e).unwrap_or_default();
            }
            C::Verified { verified: v, .. } => verified = *v,
            _ => {}
        }
    }
    let mut on = None;
    let mut server_via = None;
    let mut offered = None;
    for e in &server.server {
        match e {
            S::PortChosen { device, why, .. } => on = Some((device.clone(), why.clone())),
            S::QpReady { via, .. } => server_via = Some(*via),
            S::Listening { cm, .. } => offered = Some(*cm),
            _ => {}
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
            return Err(format!("bench --mode {mode} printed no measurement row"));
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
    step: &dyn Fn(&str) -> Option<&'a Role>,
    server: &Role,
) -> Result<(), String> {
    use rdma_proto::events::client::Event as C;
    use rdma_proto::events::server::Event as S;
    if !shape.cm_bad_nonce {
        return Ok(());
    }
    let Some(bad) = step(super::cm::BAD_NONCE) else {
        return Err(format!("no {} step ran", super::cm::BAD_NONCE));
    };
    // Its error event: an RDMA error naming the CM's REJECTED event.
    let refused = judge::has_client(bad, |e| {
        matches!(e, C::Error { kind: Exit::Rdma, message, .. }
            if message.contains("RDMA_CM_EVENT_REJECTED"))
    });
    let told = judge::has_server(
        server,
        |e| matches!(e, S::Error { message, .. } if message.contains("did not connect through RDMA CM")),
    );
    if !(refused && told && bad.ok && bad.exit.is(Some(Exit::Rdma))) {
        return Err(format!(
            "a wrong RDMA CM nonce should be rejected (client {} naming RDMA_CM_EVENT_REJECTED: {refused}, {}; server failing that session: {told}); client said {}",
            super::cm::BAD_NONCE_EXIT,
            bad.exit,
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
            Some(s) if s.ok && s.exit == ExitKind::Success => {
                let said = s.stdout.lines().last().unwrap_or_default();
                println!("  {name}  {said}");
            }
            Some(s) => {
                return Err(format!(
                    "{name} should exit 0 (the server behaved); it ended {}: {}",
                    s.exit,
                    crate::text::tail(&format!("{}{}", s.stdout, s.stderr), 1200)
                ));
            }
            None => return Err(format!("no {name} step ran")),
        }
    }
    let rejects = judge::count_server(server, |e| matches!(e, S::CmRejected { .. }));
    // The bad nonce's one, and at most 3 + the last of the flood's 16: logged, not 24.
    if !(3..=6).contains(&rejects) {
        return Err(format!(
            "the server should log a few `cm_rejected` events (the bad nonce's and the flood's \
             first), not {rejects}"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::StepResult;
    use crate::scenario::exit::Speaks;
    use rdma_proto::events::client::Event as C;
    use rdma_proto::events::server::Event as S;

    fn role(name: &str, speaks: Speaks, exit: i32, events: &[String]) -> Role {
        let step = StepResult {
            name: name.into(),
            exit_code: Some(exit),
            ok: true,
            stdout: events.concat(),
            ..StepResult::default()
        };
        Role::of(&step, "B", speaks)
    }

    fn line(e: &impl serde::Serialize) -> String {
        serde_json::to_string(e).unwrap() + "\n"
    }

    fn listening() -> String {
        line(&S::Listening {
            addr: "[::]:7471".into(),
            device: "rxe0".into(),
            port: 1,
            gid_index: 1,
            gid: "::ffff:10.0.0.1".into(),
            mtu: 1024,
            buffer_size: 64,
            mode: rdma_proto::events::server::ServeMode::Oneshot,
            max_clients: 1,
            auth: rdma_proto::events::server::AuthMode::None,
            timeout_ms: 30_000,
            cm: false,
        })
    }

    fn pair() -> (Vec<String>, Vec<String>) {
        let client = vec![
            line(&C::Connected {
                server: "10.0.0.1:7471".into(),
                program: "rdma-server".into(),
                program_version: "0".into(),
                device: "rxe0".into(),
                port: 1,
                gid_index: 1,
                gid: "::ffff:10.0.0.2".into(),
                chosen: Some("rxe0 holds 10.0.0.2".into()),
            }),
            line(&C::QpReady {
                local_qpn: 1,
                remote_qpn: 2,
                path_mtu: 1024,
                remote_addr: 0,
                rkey: 1,
                buf_len: 64,
                via: rdma_proto::events::QpVia::Handshake,
            }),
            line(&C::Verified {
                verified: true,
                length: 17,
                crc32c: 1,
                text: "Hello RDMA Write!".into(),
                truncated: false,
            }),
        ];
        let server = vec![
            listening(),
            line(&S::PortChosen {
                session: 1,
                device: "rxe0".into(),
                port: 1,
                gid_index: 1,
                gid: "::ffff:10.0.0.1".into(),
                why: "rxe0 holds 10.0.0.1".into(),
            }),
            line(&S::QpReady {
                session: 1,
                local_qpn: 2,
                remote_qpn: 1,
                path_mtu: 1024,
                notify: rdma_proto::events::server::SessionNotify::Imm,
                length: 17,
                via: rdma_proto::events::QpVia::Handshake,
            }),
        ];
        (client, server)
    }

    fn shape() -> Shape {
        crate::smoke::plans::tests::shape()
    }

    #[test]
    fn our_choice_holds_for_the_pair_and_fails_a_transcript_that_lacks_an_event() {
        let (c, s) = pair();
        let judge = |c: &[String], s: &[String]| {
            our_choice(
                &shape(),
                &role("client", Speaks::Client, 0, c),
                &role("server", Speaks::Server, 0, s),
            )
        };
        assert_eq!(judge(&c, &s), Ok(()));
        // No verdict, no port_chosen, no listening, a stranger line: each fails.
        assert!(judge(&c[..2], &s).is_err());
        assert!(judge(&c, &[s[0].clone(), s[2].clone()]).is_err());
        assert!(judge(&c, &s[1..]).unwrap_err().contains("listening"));
        let mut odd = c.clone();
        odd.push("{\"type\":\"verifed\"}\n".into());
        assert!(judge(&odd, &s).unwrap_err().contains("verifed"));
    }

    #[test]
    fn a_bad_nonce_must_be_an_rdma_error_naming_the_rejection() {
        let shape = Shape {
            cm_bad_nonce: true,
            ..shape()
        };
        let error = |kind: Exit, message: &str| {
            line(&C::Error {
                kind,
                exit_code: kind.code(),
                message: message.into(),
            })
        };
        let told = line(&S::Error {
            session: Some(1),
            peer: None,
            code: "rdma_setup".into(),
            message: "the client's queue pair did not connect through RDMA CM: x".into(),
            fatal: false,
            exit_code: None,
        });
        let server = role("server", Speaks::Server, 0, &[told]);
        let rejected = error(Exit::Rdma, "connect: RDMA_CM_EVENT_REJECTED (status 28)");
        let bad = role(
            crate::smoke::cm::BAD_NONCE,
            Speaks::Client,
            3,
            std::slice::from_ref(&rejected),
        );
        // The bad nonce passes; the first of the steps after it is missing.
        let only_bad = |name: &str| (name == crate::smoke::cm::BAD_NONCE).then_some(&bad);
        let e = rejected_err(&shape, &only_bad, &server);
        assert!(
            e.contains(&format!("no {} step ran", super::super::cm::CM_EXAMPLE)),
            "{e}"
        );
        // Another kind of error, or no rejection named: the bad nonce's judge fails.
        let usage = role(
            crate::smoke::cm::BAD_NONCE,
            Speaks::Client,
            3,
            &[error(Exit::Usage, "RDMA_CM_EVENT_REJECTED")],
        );
        let e = rejected_err(&shape, &|_| Some(&usage), &server);
        assert!(e.contains("a wrong RDMA CM nonce"), "{e}");
        let silent = role("server", Speaks::Server, 0, &[]);
        let e = rejected_err(&shape, &|_| Some(&bad), &silent);
        assert!(e.contains("server failing that session: false"), "{e}");
    }

    fn rejected_err<'a>(
        shape: &Shape,
        step: &dyn Fn(&str) -> Option<&'a Role>,
        server: &Role,
    ) -> String {
        rejected(shape, step, server).unwrap_err()
    }
}
