//! A protocol-only peer (NO RDMA) for trying the handshake by hand, e.g. with `nc`.
//!
//! ```text
//! cargo run -p rdma-proto --example demo_peer -- server [PORT]        # then: nc 127.0.0.1 PORT
//! cargo run -p rdma-proto --example demo_peer -- client HOST:PORT [imm|tcp]   # against: nc -l PORT
//! ```
//!
//! The server side advertises a real 64-bit buffer address but no memory region (rkey 0), so no
//! write ever lands: in notify=imm it times out, in notify=tcp it reports `verified:false`.
//! The client side sends made-up QP numbers and never writes. Both print every line they send
//! (`>`) and receive (`<`) on stderr.

use std::error::Error;
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use rdma_proto::{
    ClientHandshake, ClientRequest, DEFAULT_MAX_LINE, DEFAULT_PORT, FrameError, GidBinding,
    LineConn, Notify, ProtoError, QpEndpoint, ServerEvent, ServerHandshake, ServerMessage,
    ServerPolicy,
};

const STEP: Duration = Duration::from_secs(60);

fn endpoint(qpn: u32) -> QpEndpoint {
    QpEndpoint {
        qpn,
        psn: 0x5678,
        gid: rdma_proto::Gid::from(std::net::Ipv4Addr::LOCALHOST.to_ipv6_mapped()),
        lid: 0,
        mtu: 1024,
    }
}

fn send(conn: &mut LineConn<TcpStream>, line: &str) -> Result<(), FrameError> {
    eprint!("> {line}");
    conn.send_line(line, Instant::now() + STEP)
}

fn recv(conn: &mut LineConn<TcpStream>, wait: Duration) -> Result<Vec<u8>, FrameError> {
    let line = conn.read_line(Instant::now() + wait)?;
    eprintln!("< {}", String::from_utf8_lossy(&line));
    Ok(line)
}

fn serve(port: u16) -> Result<(), Box<dyn Error>> {
    let listener = TcpListener::bind(("127.0.0.1", port))?;
    eprintln!("demo server (no RDMA) on 127.0.0.1:{port}, one connection");
    let (stream, peer) = listener.accept()?;
    eprintln!("connection from {peer}");
    let mut conn = LineConn::new(stream, DEFAULT_MAX_LINE);
    let buffer = [0u8; 64];
    let mut hs = ServerHandshake::new(ServerPolicy {
        buffer_size: buffer.len() as u64,
        token: None,
        program_version: env!("CARGO_PKG_VERSION").to_owned(),
        features: ServerPolicy::default_features(),
        bench_max_len: 0,
        keep_alive_ms: 0,
    });
    send(&mut conn, &hs.banner()?.to_line())?;
    let io = |e: FrameError| ProtoError::new(e.code(), e.to_string());
    let r = (|| -> Result<Option<ServerMessage>, ProtoError> {
        let line = recv(&mut conn, STEP).map_err(io)?;
        let hello = match hs.on_line(&line)? {
            ServerEvent::Hello(h) => h,
            _ => return Ok(None), // the client sent an error: just close
        };
        // With no RDMA there is no port whose GIDs bind the hello: a real server binds it to
        // its TCP peer (`GidBinding::Peer`), by the rules of the port that serves it.
        hs.bind(GidBinding::Unbound)?;
        let accept = hs.accept(
            endpoint(0x12),
            buffer.as_ptr() as u64,
            0,
            buffer.len() as u64,
        )?;
        send(&mut conn, &accept.to_line()).map_err(io)?;
        let wait = match hello.notify {
            Notify::Imm => Duration::from_secs(5),
            Notify::Tcp => STEP,
        };
        let line = recv(&mut conn, wait).map_err(|e| match e {
            FrameError::Timeout { .. } => ProtoError::new(
                rdma_proto::ErrorCode::Timeout,
                format!("no RDMA Write arrived within {wait:?} (this demo server has no RDMA)"),
            ),
            e => io(e),
        })?;
        match hs.on_line(&line)? {
            ServerEvent::Written(_) => {
                let len = usize::try_from(hello.length)
                    .unwrap_or(usize::MAX)
                    .min(buffer.len());
                let outcome = hs.verify(&buffer[..len], None, None);
                hs.result(outcome).map(Some)
            }
            _ => Ok(None),
        }
    })();
    let last = r.unwrap_or_else(|e| Some(hs.fail(&e)));
    if let Some(last) = last {
        send(&mut conn, &last.to_line())?;
    }
    Ok(())
}

fn client(addr: &str, notify: Notify) -> Result<(), Box<dyn Error>> {
    let stream = TcpStream::connect(addr)?;
    let mut conn = LineConn::new(stream, DEFAULT_MAX_LINE);
    let mut hs = ClientHandshake::new(ClientRequest::for_payload(
        b"Hello RDMA Write!",
        notify,
        None,
    ));
    // The accept's GID must be the server's TCP address (RoCE), or, over loopback, one of this
    // host's own GIDs: the demo's one fake GID.
    let server = conn.get_ref().peer_addr()?.ip();
    hs.bind(GidBinding::on_port(Some(&[endpoint(0).gid]), server))?;
    hs.on_banner(ServerMessage::parse(&recv(&mut conn, STEP)?)?)?;
    send(&mut conn, &hs.hello(endpoint(0x11))?.to_line())?;
    let accept = hs.on_accept(ServerMessage::parse(&recv(&mut conn, STEP)?)?)?;
    eprintln!(
        "(would RDMA Write 17 bytes to addr {:#x} rkey {:#x} now)",
        accept.addr, accept.rkey
    );
    if let Some(w) = hs.written()? {
        send(&mut conn, &w.to_line())?;
    }
    let outcome = hs.on_result(ServerMessage::parse(&recv(&mut conn, STEP)?)?)?;
    eprintln!("verified by the server: {:?}", outcome.text);
    Ok(())
}

fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["server"] => serve(DEFAULT_PORT),
        ["server", port] => serve(port.parse()?),
        ["client", addr] => client(addr, Notify::Imm),
        ["client", addr, mode] => client(addr, mode.parse()?),
        _ => Err("usage: demo_peer server [PORT] | demo_peer client HOST:PORT [imm|tcp]".into()),
    }
}
