//! The one client session, as every run of the client drives it: TCP connect, the server's
//! banner, our hello, its accept, our QP to RTS, and at the end the `written` notice and the
//! server's verdict. `run::Write` (one message), `bench::Measure` (a measurement) and the
//! fabric check (both, per pair) differ only in what they register and post in between.
//!
//! Two rules hold for every one of them, here:
//! - The accept's GID is bound to the server's TCP address ([`rdma_proto::GidBinding`]): the
//!   hello binds the handshake, and an accept that names a third host fails
//!   [`await_accept`](Session::await_accept), before the queue pair leaves INIT.
//! - Under `--wait-for-server`, a server that answers `busy` (instead of its banner, or of its
//!   accept: its pinned memory is full) is tried again with back-off until the wait ends: a new
//!   connection, a new banner, the same hello (the queue pair is still in INIT).

use crate::exit::ClientError;
use crate::output::{Detail, Event, Output};
use color_eyre::eyre::{Result, WrapErr as _, bail};
use rdma_app::device::DeviceArgs;
use rdma_app::verbs::PortName;
use rdma_core_rs::{CqMode, Init, LinkLayer, LocalPort, QueuePair, Rts, Transport};
use rdma_proto::events::QpVia;
use rdma_proto::framing::LineConn;
use rdma_proto::{
    Accept, ClientHandshake, DEFAULT_MAX_LINE, DEFAULT_PORT, ErrorCode, Gid, GidBinding, Notify,
    Outcome, QpEndpoint, Region, ServerMessage,
};
use std::net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs as _};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How every session of this run talks to its server (from the command line).
#[derive(Debug, Clone)]
pub struct SessionOptions {
    /// The deadline of each phase: connect, handshake, completion, verdict.
    pub timeout: Duration,
    /// Keep retrying a refused connection this long.
    pub wait_for_server: Option<Duration>,
    /// How our completion queues are waited on.
    pub cq_mode: CqMode,
    /// Where the access token comes from.
    pub token: TokenSource,
    /// `--cm`: connect the queue pairs through RDMA CM (always on iWARP).
    pub cm: bool,
}

/// The notify mode for `local`'s device: `asked` (`--notify`), else `imm` where the device has
/// RDMA Write with immediate and `tcp` where it has not (iWARP), with why (for the
/// `notify_chosen` event) when that is not the default.
///
/// # Errors
/// `--notify imm` on a device without write-with-immediate.
pub fn notify_for(asked: Option<Notify>, local: &LocalPort) -> Result<(Notify, Option<String>)> {
    Ok(notify_rule(asked, local.ctx.transport(), local.ctx.name())?)
}

/// [`notify_for`]'s rule, for device `name` of `transport`.
fn notify_rule(
    asked: Option<Notify>,
    transport: Transport,
    name: &str,
) -> Result<(Notify, Option<String>), ClientError> {
    match asked {
        Some(Notify::Imm) if !transport.has_write_with_imm() => {
            Err(ClientError::NoWriteWithImm(name.to_owned()))
        }
        Some(n) => Ok((n, None)),
        None if transport.has_write_with_imm() => Ok((Notify::Imm, None)),
        None => Ok((
            Notify::Tcp,
            Some(format!(
                "notify tcp: {name} is {transport}, which has no RDMA Write with immediate"
            )),
        )),
    }
}

/// `--token-file`, else `--token` / `RDMA_WRITE_TOKEN`.
#[derive(Debug, Clone, Default)]
pub struct TokenSource {
    pub file: Option<PathBuf>,
    pub value: Option<String>,
}

impl TokenSource {
    /// The token, read from its file if one was named.
    pub fn load(&self) -> Result<Option<String>> {
        Ok(match &self.file {
            Some(path) => Some(rdma_app::token::read_file(path)?),
            None => self.value.clone(),
        })
    }
}

/// A server: the name the user gave (what events show) and the address it resolved to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub name: String,
    pub addr: SocketAddr,
}

impl Target {
    /// `HOST`, `HOST:PORT`, an IP literal, or `[IPv6]:PORT` (default port 7471).
    pub fn parse(server: &str) -> Result<Target> {
        let addr = if let Ok(addr) = server.parse::<SocketAddr>() {
            Some(addr)
        } else if let Ok(ip) = server.parse::<IpAddr>() {
            Some(SocketAddr::new(ip, DEFAULT_PORT))
        } else if server.contains(':') {
            first_addr((server, None))
        } else {
            first_addr((server, Some(DEFAULT_PORT)))
        };
        let addr = addr.ok_or_else(|| ClientError::BadAddress(server.to_owned()))?;
        Ok(Target {
            name: server.to_owned(),
            addr,
        })
    }

    /// The local address this host's routing table sends traffic to the server from: a UDP
    /// socket `connect`ed to it (which sends nothing) reports it. `None` where there is no
    /// route; the TCP connect then says so.
    #[must_use]
    pub fn route_source(&self) -> Option<IpAddr> {
        let any: SocketAddr = if self.addr.is_ipv4() {
            (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
        } else {
            (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
        };
        let probe = std::net::UdpSocket::bind(any).ok()?;
        probe.connect(self.addr).ok()?;
        probe.local_addr().ok().map(|a| a.ip())
    }

    /// The local end for sessions with this server: the device, port and GID that carry
    /// [`route_source`](Self::route_source) (see `DeviceArgs::open_for`), and why they were
    /// chosen (`None` when the flags chose them).
    pub fn local_end(&self, device: &DeviceArgs) -> Result<(LocalPort, Option<String>)> {
        Ok(match self.route_source() {
            Some(ip) => device.open_for(ip)?,
            None => (device.open()?, None),
        })
    }

    /// The server and our end for a task's sessions, in the order a user wants to hear about
    /// problems: RDMA on this machine first (no RDMA is not a network problem), then the
    /// server's address, then the local end that reaches it ([`local_end`](Self::local_end)).
    pub fn with_local_end(
        server: &str,
        device: &DeviceArgs,
    ) -> Result<(Target, LocalPort, Option<String>)> {
        rdma_core_rs::devices()?;
        let target = Target::parse(server)?;
        let (local, chosen) = target.local_end(device)?;
        Ok((target, local, chosen))
    }

    /// `host` (a name or an IP literal, never with a port) at `port`: a fabric node's server.
    pub fn at(host: &str, port: u16) -> Result<Target> {
        let addr = match host.parse::<IpAddr>() {
            Ok(ip) => Some(SocketAddr::new(ip, port)),
            Err(_) => first_addr((host, Some(port))),
        };
        let addr = addr.ok_or_else(|| ClientError::BadAddress(host.to_owned()))?;
        Ok(Target {
            name: addr.to_string(),
            addr,
        })
    }
}

/// The first address a name resolves to: `(HOST:PORT, None)` or `(HOST, Some(port))`.
fn first_addr((name, port): (&str, Option<u16>)) -> Option<SocketAddr> {
    let found = match port {
        Some(port) => (name, port).to_socket_addrs(),
        None => name.to_socket_addrs(),
    };
    found.ok().and_then(|mut addrs| addrs.next())
}

/// A session with one server, from its banner to its verdict: the protocol half of every
/// client run (the verbs are the caller's, passed to the steps that need them).
#[derive(Debug)]
pub struct Session<'a> {
    conn: LineConn<TcpStream>,
    hs: ClientHandshake,
    opts: SessionOptions,
    out: Option<&'a Output>,
    /// The server, to connect to again after a `busy` that answers our hello.
    to: Target,
    /// The handshake as [`open`](Self::open) got it, to start over with.
    fresh: ClientHandshake,
    /// `--wait-for-server`'s deadline and back-off, for the whole set-up.
    patience: Patience,
    /// Our hello, once sent: to send again on a new connection.
    said: Option<Said>,
}

/// A hello as [`Session::hello_endpoint`] sent it.
#[derive(Debug, Clone)]
struct Said {
    endpoint: QpEndpoint,
    cm: bool,
    /// Our port's GIDs on RoCE, `None` on InfiniBand (see [`Session::hello_endpoint`]).
    gids: Option<Vec<Gid>>,
}

/// `--wait-for-server`'s one deadline and back-off, for everything a session's set-up tries
/// again: a refused connection, and `busy` instead of the banner or of the accept.
#[derive(Debug, Clone, Copy)]
struct Patience {
    /// When to stop trying; `None`: no `--wait-for-server`, nothing is tried again.
    give_up: Option<Instant>,
    /// The next pause after `busy`: 20 ms, doubled each time, up to 500 ms.
    pause: Duration,
    /// How many times the server answered `busy` so far.
    attempt: u32,
}

impl Patience {
    fn new(wait: Option<Duration>) -> Self {
        Patience {
            give_up: wait.map(|w| Instant::now() + w),
            pause: Duration::from_millis(20),
            attempt: 0,
        }
    }

    /// How long a refused connection is still tried again (`None`: not at all).
    fn left(&self) -> Option<Duration> {
        self.give_up
            .map(|g| g.saturating_duration_since(Instant::now()))
    }

    /// After `busy` from `to`: where the wait leaves time for one more pause, emits `busy` on
    /// `out`, sleeps the pause and returns `true` (try again); else `false` (give up).
    fn after_busy(&mut self, to: &Target, out: Option<&Output>) -> bool {
        match self.give_up {
            Some(give_up) if Instant::now() + self.pause < give_up => {}
            _ => return false,
        }
        self.attempt += 1;
        if let Some(out) = out {
            out.emit(&Event::Busy {
                server: to.name.as_str().into(),
                attempt: self.attempt,
                retry_in_ms: u64::try_from(self.pause.as_millis()).unwrap_or(u64::MAX),
            });
        }
        std::thread::sleep(self.pause);
        self.pause = (self.pause * 2).min(Duration::from_millis(500));
        true
    }
}

/// Whether `msg` is the server's `busy`.
fn is_busy(msg: &ServerMessage) -> bool {
    matches!(msg, ServerMessage::Error(e) if e.code == ErrorCode::Busy)
}

/// Connects to `to` and reads its first line; a `busy` there is tried again while `patience`
/// lasts (see [`Patience::after_busy`]).
fn dial(
    to: &Target,
    opts: &SessionOptions,
    patience: &mut Patience,
    out: Option<&Output>,
) -> Result<(LineConn<TcpStream>, ServerMessage)> {
    loop {
        let stream = connect(to.addr, opts.timeout, patience.left())?;
        let _ = stream.set_nodelay(true);
        let mut conn = LineConn::new(stream, DEFAULT_MAX_LINE);
        let msg = read_message(&mut conn, opts.timeout)?;
        if !(is_busy(&msg) && patience.after_busy(to, out)) {
            return Ok((conn, msg));
        }
    }
}

/// What the accept's GID is bound by, for a hello from `local` to a server at `server`: on
/// RoCE the server's address, or, over loopback, this port's GIDs (read only then, the one
/// case they are looked at: a GID table may have a thousand slots); on InfiniBand nothing.
fn port_gids(local: &LocalPort, server: IpAddr) -> Option<Vec<Gid>> {
    if local.port.link_layer != LinkLayer::Ethernet {
        return None;
    }
    if !server.to_canonical().is_loopback() {
        return Some(Vec::new());
    }
    // Unreadable: a server over loopback is then refused, its accept's GID named.
    let table = local.ctx.gid_table(local.port.num).unwrap_or_default();
    Some(table.iter().map(|e| Gid(e.gid.0)).collect())
}

impl<'a> Session<'a> {
    /// Connects to `to`, reads the server's banner and emits `connected` (`detail`: what its
    /// human line says besides). With `out` `None` (the fabric check) nothing is printed.
    pub fn open(
        to: &Target,
        hs: ClientHandshake,
        end: &PortName,
        chosen: Option<&str>,
        opts: &SessionOptions,
        out: Option<&'a Output>,
        detail: &Detail<'_>,
    ) -> Result<Self> {
        // `--wait-for-server` covers a server that is not listening yet and one that answers
        // `busy` (transient by definition): both are tried again, with back-off, until then.
        let mut patience = Patience::new(opts.wait_for_server);
        let (conn, msg) = dial(to, opts, &mut patience, out)?;
        let mut s = Session {
            conn,
            hs: hs.clone(),
            opts: opts.clone(),
            out,
            to: to.clone(),
            fresh: hs,
            patience,
            said: None,
        };
        let banner = s.hs.on_banner(msg)?;
        s.emit_with(
            &Event::Connected {
                server: to.name.as_str().into(),
                program: banner.program.as_str().into(),
                program_version: banner.program_version.as_str().into(),
                device: end.device.as_str().into(),
                port: end.port,
                gid_index: end.gid_index,
                gid: end.gid.as_str().into(),
                chosen: chosen.map(Into::into),
            },
            detail,
        );
        Ok(s)
    }

    /// Sends our hello for `qp`, reads the server's accept, brings `qp` to RTS towards the
    /// server's and emits `qp_ready` (`detail`: what its human line says besides): [`hello`],
    /// [`await_accept`] and [`connect_qp`] in turn, presenting the nonce the accept offers.
    /// An accept whose GID is not the server's address fails in [`await_accept`], with `qp`
    /// still in INIT.
    ///
    /// [`hello`]: Self::hello
    /// [`await_accept`]: Self::await_accept
    /// [`connect_qp`]: Self::connect_qp
    pub fn connect(
        &mut self,
        local: &LocalPort,
        qp: QueuePair<Init>,
        detail: &Detail<'_>,
    ) -> Result<(QueuePair<Rts>, Accept)> {
        let psn = self.hello(local, &qp)?;
        let accept = self.await_accept()?;
        let nonce = accept.cm.map(|offer| offer.nonce);
        let qp = self.connect_qp(local, qp, psn, &accept, nonce.as_ref(), detail)?;
        Ok((qp, accept))
    }

    /// Sends our hello for `qp` on `local` (through RDMA CM with `--cm`, or where the
    /// transport needs it); returns the send PSN it announced. The handshake is bound to the
    /// server's address by `local`'s link layer (see [`hello_endpoint`](Self::hello_endpoint)).
    pub fn hello(&mut self, local: &LocalPort, qp: &QueuePair<Init>) -> Result<u32> {
        let psn = rdma_core_rs::random_psn()?;
        let cm = self.opts.cm || local.ctx.transport().needs_cm();
        let (_, server) = self.tcp_addrs()?;
        let gids = port_gids(local, server.ip());
        self.hello_endpoint(rdma_app::verbs::to_wire(local.endpoint(qp, psn)), cm, gids)?;
        Ok(psn)
    }

    /// Sends our hello for the queue pair at `endpoint` ([`hello`](Self::hello)'s protocol
    /// half: any fabric's queue pair, a fake one in tests), through RDMA CM with `cm`, and
    /// binds the handshake to this connection: the accept's GID must be the server's TCP
    /// address, or, where the server is reached over loopback, one of `gids` (our port's GIDs,
    /// on RoCE); with `gids` `None` (InfiniBand) nothing can be bound
    /// ([`GidBinding::Unbound`]). A CM accept is not held to it (its GID connects nothing).
    pub fn hello_endpoint(
        &mut self,
        endpoint: QpEndpoint,
        cm: bool,
        gids: Option<Vec<Gid>>,
    ) -> Result<()> {
        self.said = Some(Said { endpoint, cm, gids });
        self.say_hello()
    }

    /// Binds the handshake to this connection's server and sends the hello [`Self::said`].
    fn say_hello(&mut self) -> Result<()> {
        let Some(said) = self.said.as_ref() else {
            bail!("client bug: no hello to send");
        };
        let (_, server) = self.tcp_addrs()?;
        self.hs
            .bind(GidBinding::on_port(said.gids.as_deref(), server.ip()))?;
        let hello = self.hs.hello_cm(said.endpoint, said.cm)?;
        self.send(&hello.to_line())
    }

    /// The TCP connection's local and peer addresses (IPv4-mapped as IPv4): where an RDMA CM
    /// connection of this session comes from and goes to.
    ///
    /// # Errors
    /// The socket has no address (it was closed).
    pub fn tcp_addrs(&self) -> Result<(SocketAddr, SocketAddr)> {
        let sock = self.conn.get_ref();
        let canonical = |a: SocketAddr| SocketAddr::new(a.ip().to_canonical(), a.port());
        Ok((canonical(sock.local_addr()?), canonical(sock.peer_addr()?)))
    }

    /// Reads the server's accept of our hello: an `invalid_field` error naming `gid` when it
    /// names another host than the server (see [`hello_endpoint`](Self::hello_endpoint)).
    ///
    /// Under `--wait-for-server` a `busy` instead of the accept (the server's pinned memory is
    /// full) is tried again, as a `busy` instead of the banner is, under the same deadline and
    /// back-off: a new connection, its banner, and the same hello (our queue pair, still in
    /// INIT, and the same PSN), on a fresh handshake.
    pub fn await_accept(&mut self) -> Result<Accept> {
        loop {
            let msg = self.recv()?;
            if !(is_busy(&msg)
                && self.said.is_some()
                && self.patience.after_busy(&self.to, self.out))
            {
                return Ok(self.hs.on_accept(msg)?);
            }
            let (conn, msg) = dial(&self.to, &self.opts, &mut self.patience, self.out)?;
            self.conn = conn;
            self.hs = self.fresh.clone();
            self.hs.on_banner(msg)?;
            self.say_hello()?;
        }
    }

    /// Brings `qp` (whose hello announced `psn`) to RTS towards the server's queue pair in
    /// `accept`, and emits `qp_ready` (`detail`: what its human line says besides). Where the accept offers RDMA CM, the connection request
    /// presents `nonce` (the offer's own is the one the server admits).
    pub fn connect_qp(
        &mut self,
        local: &LocalPort,
        qp: QueuePair<Init>,
        psn: u32,
        accept: &Accept,
        nonce: Option<&[u8; rdma_proto::cm::NONCE_LEN]>,
        detail: &Detail<'_>,
    ) -> Result<QueuePair<Rts>> {
        let qp = match (&accept.cm, nonce) {
            (Some(offer), Some(nonce)) => {
                let (from, to) = self.tcp_addrs()?;
                qp.connect_cm(
                    local,
                    Some(from.ip()),
                    SocketAddr::new(to.ip(), offer.port),
                    nonce,
                    Instant::now() + self.opts.timeout,
                )
                .wrap_err("connecting the queue pair through RDMA CM")?
            }
            (Some(_), None) => {
                bail!("the server offers RDMA CM, but no nonce was given to present")
            }
            (None, _) => {
                qp.connect_to(local, &rdma_app::verbs::from_wire(&accept.endpoint), psn)?
            }
        };
        self.emit_with(
            &Event::QpReady {
                local_qpn: qp.qpn(),
                remote_qpn: accept.endpoint.qpn,
                path_mtu: qp.path_mtu().bytes(),
                remote_addr: accept.addr,
                rkey: accept.rkey,
                buf_len: accept.buf_len,
                via: QpVia::from_cm(accept.cm.is_some()),
            },
            detail,
        );
        Ok(qp)
    }

    /// Tells the server our writes are done, where the handshake has it told (`written`).
    pub fn written(&mut self) -> Result<()> {
        if let Some(notice) = self.hs.written()? {
            self.send(&notice.to_line())?;
        }
        Ok(())
    }

    /// The server's verdict (`Err` when it did not verify), not yet emitted.
    pub fn result(&mut self) -> Result<Outcome> {
        let msg = self.recv()?;
        Ok(self.hs.on_result(msg)?)
    }

    /// The verdict the server sent, whatever it said.
    pub fn verdict(&self) -> Option<&Outcome> {
        self.hs.outcome()
    }

    /// How long the server keeps this session after each verdict, where its accept granted
    /// rounds ([`rdma_proto::rounds`]).
    #[must_use]
    pub fn keep_alive(&self) -> Option<Duration> {
        self.hs.keep_alive()
    }

    /// Whether the hello asked for the stamped exchange (a `lat` bench session whose server
    /// offers it): each sweep ends with it ([`crate::bench::hot::stamped`]).
    #[must_use]
    pub fn stamped(&self) -> bool {
        self.hs.stamped()
    }

    /// The deadline of each phase from now on (`--timeout`, or a probe's share of its own).
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.opts.timeout = timeout;
    }

    /// Asks for one more round of `length` bytes whose CRC32C is `crc32c` (a `lat` bench
    /// session's with `pong`, its buffer for the answers registered anew), after a verified
    /// round of a session with rounds, and reads the server's answer: the round's buffer.
    pub fn next_round(
        &mut self,
        length: u64,
        crc32c: u32,
        pong: Option<rdma_proto::bench::PongBuffer>,
    ) -> Result<Region> {
        let next = self.hs.next(length, crc32c, pong)?;
        self.send(&next.to_line())?;
        let msg = self.recv()?;
        Ok(self.hs.on_region(msg)?)
    }

    /// Emits `outcome` as the `verified` event (`detail`: what its human line says besides).
    pub fn emit_verified(&self, outcome: &Outcome, detail: &Detail<'_>) {
        self.emit_with(
            &Event::Verified {
                verified: outcome.verified,
                length: outcome.length,
                crc32c: outcome.crc32c,
                text: outcome.text.as_str().into(),
                truncated: outcome.truncated,
            },
            detail,
        );
    }

    /// Whether the server sent something (its verdict, an error) or closed the connection,
    /// looked at without blocking and without reading it.
    #[must_use]
    pub fn server_spoke(&self) -> bool {
        self.conn.peer_spoke()
    }

    /// Emits `event`, if this session prints.
    pub fn emit(&self, event: &Event<'_>) {
        self.emit_with(event, &Detail::None);
    }

    /// Emits `event`, its human line told with `detail`, if this session prints.
    pub fn emit_with(&self, event: &Event<'_>, detail: &Detail<'_>) {
        if let Some(out) = self.out {
            out.emit_with(event, detail);
        }
    }

    /// Lines for a person only (see `Output::human`), if this session prints.
    pub fn human(&self, lines: impl FnOnce() -> String) {
        if let Some(out) = self.out {
            out.human(lines);
        }
    }

    fn send(&mut self, line: &str) -> Result<()> {
        let deadline = Instant::now() + self.opts.timeout;
        Ok(self.conn.send_line(line, deadline)?)
    }

    fn recv(&mut self) -> Result<ServerMessage> {
        read_message(&mut self.conn, self.opts.timeout)
    }
}

/// The server's next message on `conn`, within `timeout`.
fn read_message(conn: &mut LineConn<TcpStream>, timeout: Duration) -> Result<ServerMessage> {
    let line = conn
        .read_line(Instant::now() + timeout)
        .wrap_err("waiting for the server")?;
    Ok(ServerMessage::parse(&line)?)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notify_is_imm_unless_the_device_has_no_write_with_imm_and_says_why() {
        let ib = Transport::InfiniBand;
        assert_eq!(notify_rule(None, ib, "rxe0").unwrap(), (Notify::Imm, None));
        assert_eq!(
            notify_rule(Some(Notify::Tcp), ib, "rxe0").unwrap(),
            (Notify::Tcp, None)
        );
        let (n, why) = notify_rule(None, Transport::Iwarp, "siw0").unwrap();
        assert_eq!(n, Notify::Tcp);
        assert!(why.unwrap().contains("siw0 is iWARP"));
        assert_eq!(
            notify_rule(Some(Notify::Tcp), Transport::Iwarp, "siw0").unwrap(),
            (Notify::Tcp, None)
        );
        let e = notify_rule(Some(Notify::Imm), Transport::Iwarp, "siw0").unwrap_err();
        assert!(e.to_string().contains("--notify tcp"), "{e}");
        assert_eq!(
            crate::classify::classify(&color_eyre::Report::new(e)),
            rdma_proto::Exit::Usage
        );
    }

    #[test]
    fn addresses_get_the_default_port() {
        let port = |s: &str| Target::parse(s).unwrap().addr.port();
        assert_eq!(port("127.0.0.1"), DEFAULT_PORT);
        assert_eq!(port("127.0.0.1:9000"), 9000);
        assert_eq!(port("::1"), DEFAULT_PORT);
        assert_eq!(port("[::1]:9001"), 9001);
        assert_eq!(port("localhost"), DEFAULT_PORT);
        assert!(Target::parse("no such host.invalid:x").is_err());
        assert_eq!(Target::parse("127.0.0.1").unwrap().name, "127.0.0.1");
    }

    #[test]
    fn a_fabric_node_is_a_host_and_a_port_never_a_string_to_reparse() {
        let v4 = Target::at("127.0.0.1", 9000).unwrap();
        assert_eq!(v4.addr, "127.0.0.1:9000".parse().unwrap());
        let v6 = Target::at("::1", 9000).unwrap();
        assert_eq!(v6.addr, "[::1]:9000".parse().unwrap());
        assert_eq!(v6.name, "[::1]:9000");
        assert!(Target::at("no such host.invalid", 9000).is_err());
    }

    /// `busy` (instead of the banner or of the accept) is tried again only under
    /// `--wait-for-server`, with the pause doubling from 20 ms up to 500 ms, and not once the
    /// next pause would end past the wait.
    #[test]
    fn busy_is_tried_again_only_while_the_wait_lasts() {
        let to = Target::at("127.0.0.1", 9).unwrap();
        assert!(!Patience::new(None).after_busy(&to, None));
        let mut p = Patience::new(Some(Duration::from_secs(5)));
        assert!(p.after_busy(&to, None));
        assert!(p.after_busy(&to, None));
        assert_eq!((p.attempt, p.pause), (2, Duration::from_millis(80)));
        let mut p = Patience::new(Some(Duration::from_millis(10)));
        assert!(
            !p.after_busy(&to, None),
            "a 20 ms pause ends past a 10 ms wait"
        );
        assert_eq!(p.attempt, 0);
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
}
