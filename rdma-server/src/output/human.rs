//! The server's human lines, each event's in one place: what the operator reads without
//! `--json`. Text that came from a client (its message, a failure that quotes it) reaches the
//! terminal only through [`rdma_proto::printable`].

use super::{Detail, Event, LOGGED_REJECTS, Lang, SessionNotify};

/// The line (or lines) that `event` shows the operator, in `lang`, with `detail`.
#[must_use]
pub fn line(event: &Event<'_>, lang: Lang, detail: &Detail<'_>) -> String {
    match event {
        Event::Listening {
            addr,
            device,
            port,
            gid_index,
            gid,
            mtu,
            buffer_size,
            mode,
            cm,
            ..
        } => format!(
            "listening on {addr} ({mode}); device {device} port {port} gid[{gid_index}] {gid}, MTU {mtu}, {buffer_size} byte buffer per client{}",
            if *cm {
                "; RDMA CM offered (iWARP, --cm)"
            } else {
                ""
            }
        ),
        Event::Connected { session, peer } => format!("[{session}] client {peer} connected"),
        Event::PortChosen { session, why, .. } => format!("[{session}] RDMA on {why}"),
        Event::Refused { peer, message, .. } => format!("refused {peer}: {message}"),
        Event::CmRejected {
            session,
            peer,
            why,
            rejected,
        } => format!(
            "[{session}] RDMA CM connection request from {} rejected: {}{}",
            peer.as_deref().unwrap_or("an unknown address"),
            rdma_proto::printable(why),
            if *rejected == LOGGED_REJECTS {
                " (more are counted, not logged)"
            } else {
                ""
            }
        ),
        Event::QpReady {
            session,
            local_qpn,
            remote_qpn,
            path_mtu,
            notify,
            length,
            ..
        } => {
            let head = format!(
                "[{session}] QP {local_qpn:#08x} <- client QP {remote_qpn:#08x}, path MTU {path_mtu}"
            );
            match detail {
                Detail::Bench { sizes, iters, .. } => {
                    format!("{head}, {notify}: sizes {sizes:?}, {iters} iterations each")
                }
                Detail::Offered(offered) => {
                    format!("{head}, offering {offered} bytes (notify {notify})")
                }
                Detail::None => format!("{head}, offering {length} bytes (notify {notify})"),
            }
        }
        Event::Written {
            session,
            length,
            notify,
        } => match notify {
            SessionNotify::BenchLat | SessionNotify::BenchBw => {
                format!("[{session}] {notify} done ({length} bytes checked next)")
            }
            SessionNotify::Imm | SessionNotify::Tcp => {
                format!("[{session}] write complete ({length} bytes, notify {notify})")
            }
        },
        Event::Verified {
            session,
            verified,
            length,
            crc32c,
            text,
            reason,
            ..
        } => match (detail, reason) {
            (Detail::Bench { mode, .. }, None) => format!(
                "[{session}] {mode} verified: the final {length} bytes match (crc32c {crc32c:#010x})"
            ),
            (Detail::Bench { mode, .. }, Some(r)) => {
                format!("[{session}] {mode} verification FAILED: {r}")
            }
            _ if *verified => format!(
                "{}\n{}",
                lang.received(text),
                lang.verified(*length, *crc32c)
            ),
            _ => format!(
                "[{session}] {}\n[{session}] verification FAILED: {}",
                lang.received(text),
                reason.as_deref().unwrap_or("unknown reason")
            ),
        },
        Event::Round {
            session,
            round,
            length,
        } => format!(
            "[{session}] round {round}: a fresh buffer (new rkey) for {length} bytes, same queue pairs"
        ),
        Event::Error {
            session: Some(id),
            code,
            message,
            ..
        } => failed_line(*id, code, message),
        Event::Error {
            session: None,
            code,
            message,
            ..
        } => format!("error ({code}): {}", rdma_proto::printable(message)),
        Event::Stopped {
            reason,
            sessions,
            cpu_ms,
            ..
        } => format!(
            "stopped ({reason}) after {sessions} connection(s){}",
            cpu_ms.map_or_else(String::new, |ms| format!(", {ms} ms of CPU"))
        ),
    }
}

/// The line of a session that failed (the server goes on); the message may quote the client.
#[must_use]
pub fn failed_line(id: u64, code: &str, message: &str) -> String {
    format!(
        "[{id}] session failed ({code}): {}; still serving",
        rdma_proto::printable(message)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verified(ok: bool, text: &str, reason: Option<&'static str>) -> Event<'static> {
        Event::Verified {
            session: 1,
            verified: ok,
            length: 17,
            crc32c: 0x1234_abcd,
            text: text.to_owned().into(),
            truncated: false,
            reason: reason.map(Into::into),
        }
    }

    /// The lines the end-to-end tests and the README look for, in both languages.
    #[test]
    fn the_verdict_lines_are_the_seeds_in_both_languages() {
        let ok = verified(true, "Hello RDMA Write!", None);
        assert_eq!(
            line(&ok, Lang::En, &Detail::None),
            "received message: Hello RDMA Write!\n\
             verified: RDMA Write data landed in server memory (17 bytes, crc32c 0x1234abcd)"
        );
        assert_eq!(
            line(&ok, Lang::Zh, &Detail::None),
            "服务端收到消息: Hello RDMA Write!\n验证通过：RDMA Write数据已写入服务端内存"
        );
        let bad = verified(false, "Hello", Some("crc32c mismatch"));
        assert_eq!(
            line(&bad, Lang::En, &Detail::None),
            "[1] received message: Hello\n[1] verification FAILED: crc32c mismatch"
        );
        assert_eq!(
            line(&bad, Lang::Zh, &Detail::None),
            "[1] 服务端收到消息: Hello\n[1] verification FAILED: crc32c mismatch"
        );
    }

    #[test]
    fn a_bench_session_says_what_it_measured() {
        let bench = Detail::Bench {
            mode: SessionNotify::BenchLat,
            sizes: &[2, 64],
            iters: 100,
        };
        assert_eq!(
            line(
                &verified(true, "bench-lat [2, 64] x 100", None),
                Lang::Zh,
                &bench
            ),
            "[1] bench-lat verified: the final 17 bytes match (crc32c 0x1234abcd)"
        );
        assert_eq!(
            line(&verified(false, "x", Some("short")), Lang::En, &bench),
            "[1] bench-lat verification FAILED: short"
        );
        let qp = Event::QpReady {
            session: 4,
            local_qpn: 0x11,
            remote_qpn: 0x22,
            path_mtu: 1024,
            notify: SessionNotify::BenchLat,
            length: 64,
            via: rdma_proto::events::QpVia::Handshake,
        };
        assert_eq!(
            line(&qp, Lang::En, &bench),
            "[4] QP 0x000011 <- client QP 0x000022, path MTU 1024, bench-lat: sizes [2, 64], 100 iterations each"
        );
        let write = Event::QpReady {
            session: 4,
            local_qpn: 0x11,
            remote_qpn: 0x22,
            path_mtu: 1024,
            notify: SessionNotify::Imm,
            length: 17,
            via: rdma_proto::events::QpVia::Handshake,
        };
        assert_eq!(
            line(&write, Lang::En, &Detail::Offered(4096)),
            "[4] QP 0x000011 <- client QP 0x000022, path MTU 1024, offering 4096 bytes (notify imm)"
        );
        assert_eq!(
            line(
                &Event::Round {
                    session: 4,
                    round: 2,
                    length: 17
                },
                Lang::En,
                &Detail::None
            ),
            "[4] round 2: a fresh buffer (new rkey) for 17 bytes, same queue pairs"
        );
        let done = |notify| Event::Written {
            session: 4,
            length: 17,
            notify,
        };
        assert_eq!(
            line(&done(SessionNotify::Tcp), Lang::En, &Detail::None),
            "[4] write complete (17 bytes, notify tcp)"
        );
        assert_eq!(
            line(&done(SessionNotify::BenchBw), Lang::En, &Detail::None),
            "[4] bench-bw done (17 bytes checked next)"
        );
    }

    /// A client cannot forge a line or drive the terminal through a failure it caused.
    #[test]
    fn a_session_failure_escapes_what_the_client_sent() {
        let failed = Event::Error {
            session: Some(3),
            peer: Some("10.0.0.2:5000".into()),
            code: "bad_json".into(),
            message: "x\n[9] verified\u{1b}[31m".into(),
            fatal: false,
            exit_code: None,
        };
        let shown = line(&failed, Lang::En, &Detail::None);
        assert_eq!(
            shown,
            r"[3] session failed (bad_json): x\n[9] verified\u{1b}[31m; still serving"
        );
        assert!(!shown.chars().any(char::is_control), "{shown:?}");
    }

    /// The README's session, line for line.
    #[test]
    fn the_servers_own_lines() {
        let listening = |cm| Event::Listening {
            addr: "[::]:7471".into(),
            device: "rxe0".into(),
            port: 1,
            gid_index: 1,
            gid: "::ffff:10.0.0.1".into(),
            mtu: 1024,
            buffer_size: 64,
            mode: super::super::ServeMode::Oneshot,
            max_clients: 8,
            auth: super::super::AuthMode::None,
            timeout_ms: 10_000,
            cm,
        };
        assert_eq!(
            line(&listening(false), Lang::Zh, &Detail::None),
            "listening on [::]:7471 (oneshot); device rxe0 port 1 gid[1] ::ffff:10.0.0.1, MTU 1024, 64 byte buffer per client"
        );
        assert!(
            line(&listening(true), Lang::En, &Detail::None)
                .ends_with("per client; RDMA CM offered (iWARP, --cm)")
        );
        let connected = Event::Connected {
            session: 1,
            peer: "10.0.0.2:56362".into(),
        };
        assert_eq!(
            line(&connected, Lang::En, &Detail::None),
            "[1] client 10.0.0.2:56362 connected"
        );
        let verified = Event::Verified {
            session: 1,
            verified: true,
            length: 17,
            crc32c: 0x24ca_7934,
            text: "Hello RDMA Write!".into(),
            truncated: false,
            reason: None,
        };
        assert_eq!(
            line(&verified, Lang::En, &Detail::None),
            "received message: Hello RDMA Write!\n\
             verified: RDMA Write data landed in server memory (17 bytes, crc32c 0x24ca7934)"
        );
        let rejected = |rejected| Event::CmRejected {
            session: 2,
            peer: None,
            why: "no nonce\u{7}".into(),
            rejected,
        };
        assert_eq!(
            line(&rejected(LOGGED_REJECTS), Lang::En, &Detail::None),
            r"[2] RDMA CM connection request from an unknown address rejected: no nonce\u{7} (more are counted, not logged)"
        );
        let stopped = Event::Stopped {
            reason: super::super::StopReason::Verified,
            sessions: 1,
            verified: 1,
            cpu_ms: Some(12),
        };
        assert_eq!(
            line(&stopped, Lang::En, &Detail::None),
            "stopped (verified) after 1 connection(s), 12 ms of CPU"
        );
        let stopped = Event::Stopped {
            reason: super::super::StopReason::Verified,
            sessions: 1,
            verified: 1,
            cpu_ms: None,
        };
        assert_eq!(
            line(&stopped, Lang::En, &Detail::None),
            "stopped (verified) after 1 connection(s)"
        );
    }
}
