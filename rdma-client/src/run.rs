//! The client's one flow: connect, handshake, bring the QP to RTS, RDMA Write, wait for the verdict.

use crate::cli::{Args, Fault};
use crate::exit::ClientError;
use crate::output::{Event, Output};
use crate::rewrite::{self, Rewriter};
use color_eyre::eyre::{Result, WrapErr as _, bail};
use rdma_core_rs::{Access, Endpoint, LinkLayer, LocalPort, QpCaps, RemoteBuffer};
use rdma_proto::framing::LineConn;
use rdma_proto::{
    Banner, ClientHandshake, ClientRequest, DEFAULT_MAX_LINE, DEFAULT_PORT, Notify, Outcome,
    ServerMessage,
};
use std::net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs as _};
use std::time::{Duration, Instant};

/// Work request id of our single write.
const WRITE_WR_ID: u64 = 0x5752_4954; // "WRIT"

/// Runs the whole client flow; `Ok` only when the server verified the bytes.
pub fn run(args: &Args, out: &Output) -> Result<()> {
    let payload = load_payload(args)?;
    let token = load_token(args)?;
    // Local RDMA first: a machine without RDMA should hear about that, not about the network.
    let local = args.local.open()?;
    write(args, &local, &args.server, &payload, token, Some(out)).map(|_| ())
}

/// What one verified write took.
#[derive(Debug)]
pub struct Delivered {
    /// The server's verdict (verified: the bytes and their CRC32C checked).
    pub outcome: Outcome,
    /// From posting the RDMA Write to its completion on our side.
    pub write_micros: u128,
}

/// The token `--token-file`, `--token` or `RDMA_WRITE_TOKEN` gives.
pub fn load_token(args: &Args) -> Result<Option<String>> {
    Ok(match &args.token_file {
        Some(path) => Some(rdma_proto::app::token::read_file(path)?),
        None => args.token.clone(),
    })
}

/// One verified write of `payload` to `server` over `local`: connect, handshake, QP to RTS,
/// RDMA Write, the server's verdict. `Ok` only when the server verified the bytes. Each step is
/// an event on `out`; with `None` (the fabric check, which prints one event per pair) none is.
pub fn write(
    args: &Args,
    local: &LocalPort,
    server: &str,
    payload: &[u8],
    token: Option<String>,
    out: Option<&Output>,
) -> Result<Delivered> {
    let crc = rdma_proto::crc32c(payload);
    let timeout = args.timeout;
    let LocalPort { ctx, port, gid } = local;

    let addr = resolve(server)?;
    let stream = connect(addr, timeout, args.wait_for_server)?;
    let _ = stream.set_nodelay(true);
    let mut conn = LineConn::new(stream, DEFAULT_MAX_LINE);
    let mut hs = ClientHandshake::new(ClientRequest {
        length: payload.len() as u64,
        notify: args.notify,
        crc32c: crc,
        token,
    });

    let banner = hs.on_banner(recv(&mut conn, Instant::now() + timeout)?)?;
    emit_connected(out, server, &banner, local, || {
        format!(
            "connected to {} ({} {}); local {} port {} gid[{}] {}",
            server,
            rdma_proto::printable(&banner.program),
            rdma_proto::printable(&banner.program_version),
            ctx.name(),
            port.num,
            gid.index,
            gid.gid
        )
    });

    // Verbs objects: the source buffer needs no remote access at all.
    let pd = ctx.alloc_pd()?;
    let mr = pd.register_bytes(payload, Access::NONE)?;
    // Room for our write's completion and those of the rewrite test hook.
    let cq = ctx.create_cq(2 * rewrite::DEPTH as u32, args.local.cq_mode)?;
    let qp = pd.create_rc_qp(&cq, QpCaps::default())?;
    let qp = qp.to_init(port.num, Access::NONE)?;
    let psn = rdma_core_rs::random_psn()?;
    let e = local.endpoint(&qp, psn);
    let hello = hs.hello(e.into())?;
    conn.send_line(&hello.to_line(), Instant::now() + timeout)?;
    fault_point(args, Fault::KillAfterHello);

    let accept = hs.on_accept(recv(&mut conn, Instant::now() + timeout)?)?;
    let qp = qp.connect_to(local, &Endpoint::from(&accept.endpoint), psn)?;
    let path_mtu = qp.path_mtu();
    emit(
        out,
        &Event::QpReady {
            local_qpn: qp.qpn(),
            remote_qpn: accept.endpoint.qpn,
            path_mtu: path_mtu.bytes(),
            remote_addr: accept.addr,
            rkey: accept.rkey,
            buf_len: accept.buf_len,
        },
        || {
            format!(
                "QP {:#08x} ready (RTS) -> server QP {:#08x}, path MTU {}, remote buffer {:#x} ({} bytes, rkey {:#x}){}",
                qp.qpn(),
                accept.endpoint.qpn,
                path_mtu.bytes(),
                accept.addr,
                accept.buf_len,
                accept.rkey,
                if port.link_layer == LinkLayer::Ethernet {
                    ", RoCE"
                } else {
                    ""
                }
            )
        },
    );
    fault_point(args, Fault::KillAfterAccept);

    let mut remote = RemoteBuffer {
        addr: accept.addr,
        rkey: accept.rkey,
        len: accept.buf_len,
    };
    match args.fault {
        Some(Fault::WrongRkey) => remote.rkey ^= 0x00ff_ff00,
        Some(Fault::OutOfBounds) => {
            // Aim past the end of the buffer while still claiming it fits.
            remote.addr = remote.addr.wrapping_add(accept.buf_len);
        }
        _ => {}
    }
    let imm = match args.notify {
        Notify::Imm => {
            Some(u32::try_from(payload.len()).wrap_err("payload too large for an immediate")?)
        }
        Notify::Tcp => None,
    };
    let started = Instant::now();
    qp.post_write(&mr, 0..payload.len(), remote, imm, WRITE_WR_ID)?;
    // Test hook: more writes right behind ours, still going when the server hears of ours.
    let rewriter = match args.fault {
        Some(Fault::RewriteAfterImm) => Some(Rewriter::start(&pd, &qp, payload.len(), remote)?),
        _ => None,
    };
    let completion = cq
        .poll(Instant::now() + timeout)
        .wrap_err("waiting for the RDMA Write to complete")?;
    if completion.wr_id != WRITE_WR_ID {
        bail!(
            "unexpected completion for work request {:#x}",
            completion.wr_id
        );
    }
    let micros = started.elapsed().as_micros();
    emit(
        out,
        &Event::Written {
            length: payload.len() as u64,
            notify: args.notify,
            crc32c: crc,
            micros: u64::try_from(micros).unwrap_or(u64::MAX),
        },
        || {
            format!(
                "wrote {} bytes with RDMA Write{} in {micros} us (crc32c {crc:#010x})",
                payload.len(),
                if imm.is_some() { " with immediate" } else { "" }
            )
        },
    );
    fault_point(args, Fault::KillAfterWrite);

    if let Some(notice) = hs.written()? {
        conn.send_line(&notice.to_line(), Instant::now() + timeout)?;
    }
    let rewrites = rewriter.map(|r| r.finish(&qp, &cq, timeout));
    let judged = hs.on_result(recv(&mut conn, Instant::now() + timeout)?);
    // Under the rewrite hook any verdict that describes bytes we wrote is right (see `rewrite`).
    let outcome = match (rewrites, hs.outcome()) {
        (Some(log), Some(verdict)) => {
            rewrite::check_verdict(payload, log, verdict)?;
            verdict.clone()
        }
        _ => judged?,
    };
    emit_verified(out, &outcome, || {
        format!(
            "server verified {} bytes (crc32c {:#010x}): {:?}{}",
            outcome.length,
            outcome.crc32c,
            outcome.text,
            if outcome.truncated {
                " (truncated)"
            } else {
                ""
            }
        )
    });
    Ok(Delivered {
        outcome,
        write_micros: micros,
    })
}

/// Emits [`Event::Connected`]: the server's banner and our end (`local`); `human` is its line
/// without `--json`.
pub(crate) fn emit_connected(
    out: Option<&Output>,
    server: &str,
    banner: &Banner,
    local: &LocalPort,
    human: impl FnOnce() -> String,
) {
    emit(
        out,
        &Event::Connected {
            server: server.into(),
            program: banner.program.as_str().into(),
            program_version: banner.program_version.as_str().into(),
            device: local.ctx.name().into(),
            port: local.port.num,
            gid_index: local.gid.index,
            gid: local.gid.gid.to_string().into(),
        },
        human,
    );
}

/// Emits the server's verdict as [`Event::Verified`]; `human` is its line without `--json`.
pub(crate) fn emit_verified(
    out: Option<&Output>,
    outcome: &Outcome,
    human: impl FnOnce() -> String,
) {
    emit(
        out,
        &Event::Verified {
            verified: outcome.verified,
            length: outcome.length,
            crc32c: outcome.crc32c,
            text: outcome.text.as_str().into(),
            truncated: outcome.truncated,
        },
        human,
    );
}

/// Emits `event` on `out`, if there is one.
pub(crate) fn emit(out: Option<&Output>, event: &Event<'_>, human: impl FnOnce() -> String) {
    if let Some(out) = out {
        out.emit(event, human);
    }
}

/// Connects within `timeout`; a refused connection is retried until `wait` has passed.
pub(crate) fn connect(
    addr: SocketAddr,
    timeout: Duration,
    wait: Option<Duration>,
) -> Result<TcpStream> {
    let give_up = Instant::now() + wait.unwrap_or_default();
    loop {
        match TcpStream::connect_timeout(&addr, timeout) {
            Ok(stream) => return Ok(stream),
            Err(e)
                if e.kind() == std::io::ErrorKind::ConnectionRefused
                    && Instant::now() < give_up =>
            {
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(source) => {
                return Err(ClientError::Connect {
                    addr: addr.to_string(),
                    port: addr.port(),
                    source,
                }
                .into());
            }
        }
    }
}

pub(crate) fn recv(conn: &mut LineConn<TcpStream>, deadline: Instant) -> Result<ServerMessage> {
    let line = conn
        .read_line(deadline)
        .wrap_err("waiting for the server")?;
    Ok(ServerMessage::parse(&line)?)
}

pub fn load_payload(args: &Args) -> Result<Vec<u8>> {
    let payload = match &args.file {
        Some(path) => std::fs::read(path).map_err(|source| ClientError::ReadFile {
            path: path.display().to_string(),
            source,
        })?,
        None => args.message.as_bytes().to_vec(),
    };
    if payload.is_empty() {
        return Err(ClientError::EmptyPayload.into());
    }
    Ok(payload)
}

/// `HOST`, `HOST:PORT`, an IP literal, or `[IPv6]:PORT`.
pub(crate) fn resolve(server: &str) -> Result<SocketAddr> {
    if let Ok(addr) = server.parse::<SocketAddr>() {
        return Ok(addr);
    }
    if let Ok(ip) = server.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, DEFAULT_PORT));
    }
    let target = if server.contains(':') {
        server.to_owned()
    } else {
        format!("{server}:{DEFAULT_PORT}")
    };
    target
        .to_socket_addrs()
        .ok()
        .and_then(|mut addrs| addrs.next())
        .ok_or_else(|| ClientError::BadAddress(server.to_owned()).into())
}

/// Test hook: die like a crashed client would, at the named stage.
fn fault_point(args: &Args, at: Fault) {
    if args.fault == Some(at) {
        eprintln!("fault injection: SIGKILL at {at:?}");
        // SAFETY: kill(2) on our own pid with a valid signal number has no memory-safety
        // preconditions; SIGKILL ends the process here, as a crash would.
        unsafe {
            libc::kill(libc::getpid(), libc::SIGKILL);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_get_the_default_port() {
        assert_eq!(resolve("127.0.0.1").unwrap().port(), DEFAULT_PORT);
        assert_eq!(resolve("127.0.0.1:9000").unwrap().port(), 9000);
        assert_eq!(resolve("::1").unwrap().port(), DEFAULT_PORT);
        assert_eq!(resolve("[::1]:9001").unwrap().port(), 9001);
        assert!(resolve("no such host.invalid:x").is_err());
    }

    #[test]
    fn refused_connections_are_retried_until_the_wait_ends() {
        // Grab a free port, then close it: connections to it are refused.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let t = Instant::now();
        let err = connect(
            addr,
            Duration::from_secs(1),
            Some(Duration::from_millis(300)),
        )
        .unwrap_err();
        assert!(t.elapsed() >= Duration::from_millis(300));
        assert!(
            err.to_string().contains("could not reach the server"),
            "{err}"
        );

        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        assert!(connect(addr, Duration::from_secs(1), None).is_ok());
    }

    #[test]
    fn empty_payload_is_refused() {
        use clap::Parser as _;
        let args = Args::try_parse_from(["rdma-client", "h", "--message", ""]).unwrap();
        let err = load_payload(&args).unwrap_err();
        assert!(err.to_string().contains("at least one byte"));
    }
}
