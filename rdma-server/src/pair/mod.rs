//! The in-memory `Pair` (after quinn's): a real server session ([`crate::session::serve`]) and a
//! real client session (`rdma_client::session::Session`) over loopback TCP, their verbs on a
//! fake fabric ([`fabric::Fabric`]). What needs no RDMA runs here in milliseconds: the
//! protocol, the security rules and the session's use of its verbs (expose, connect, wait,
//! revoke); the guests keep what needs real verbs. [`hostile`] runs the hostile matrix
//! (`rdma-hostile`) against the real session here.
//!
//! Test-only code: compiled for `cargo test` alone.

mod cases;
pub mod fabric;
mod hostile;
mod rounds;
mod scripted;

use crate::session::{SessionCtx, serve};
use fabric::Fabric;
use rdma_app::verbs::PortName;
use rdma_client::session::{Session, SessionOptions, Target, TokenSource};
use rdma_proto::{ClientHandshake, ClientRequest, ErrorCode, Notify, Outcome, ProtoError};
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// The server's token in every pair.
pub const TOKEN: &str = "s3cret";

/// Each phase's deadline, both sides: short, for the cases that wait one out.
pub const TIMEOUT: Duration = Duration::from_millis(300);

/// How long the server keeps a session with rounds after each verdict.
pub const KEEP_ALIVE: Duration = Duration::from_millis(400);

/// A server context on one port of its own fabric.
pub struct Pair {
    pub fabric: Arc<Fabric>,
    pub server: SessionCtx,
}

/// What a session came to: the client's verdict or error, and the server's failure code if it
/// sent one.
#[derive(Debug)]
pub struct Ended {
    /// `Ok` only when the server verified the bytes.
    pub result: color_eyre::Result<Outcome>,
    /// The verdict the server sent, whatever it said.
    pub verdict: Option<Outcome>,
}

impl Ended {
    /// The error code the server answered with, if it answered with an error.
    #[must_use]
    pub fn server_error(&self) -> Option<ErrorCode> {
        let e = self.result.as_ref().err()?;
        e.chain()
            .find_map(|c| match c.downcast_ref::<ProtoError>() {
                Some(ProtoError::Remote(m)) => Some(m.code),
                _ => None,
            })
    }
}

/// A client's request, and the step it takes in its own way (`None`: every step as
/// `rdma-client` takes it).
#[derive(Debug, Clone)]
pub struct Client {
    pub payload: Vec<u8>,
    pub notify: Notify,
    pub token: Option<String>,
    /// The CRC32C the hello announces (`None`: the payload's).
    pub crc: Option<u32>,
    /// How the write goes.
    pub write: Write,
}

/// How a client writes, once accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Write {
    /// The whole payload, to the accept's buffer and rkey.
    Right,
    /// With the accept's rkey changed.
    WrongRkey,
    /// Starting at the buffer's end (out of bounds).
    PastTheEnd,
    /// Only the first half of the payload.
    Half,
    /// None at all: the client gives up after the accept (sends nothing more, closes).
    Vanish,
    /// The whole payload, then once more after the verdict (the rkey must be dead by then).
    AgainAfterVerdict,
}

impl Client {
    /// `payload`, notify `imm`, with the server's token, written right.
    #[must_use]
    pub fn new(payload: &[u8]) -> Self {
        Client {
            payload: payload.to_vec(),
            notify: Notify::Imm,
            token: Some(TOKEN.to_owned()),
            crc: None,
            write: Write::Right,
        }
    }
}

impl Pair {
    /// A server whose buffers are `buffer_size` bytes, on a port with write-with-immediate.
    #[must_use]
    pub fn new(buffer_size: u64) -> Self {
        Self::on(buffer_size, true)
    }

    /// As [`new`](Self::new), on a port with (`imm`) or without write-with-immediate.
    #[must_use]
    pub fn on(buffer_size: u64, imm: bool) -> Self {
        let fabric = Fabric::new();
        let port = crate::ports::Served::with(Arc::new(fabric.port(imm)), None);
        let server = context(Box::new(OnePort(Arc::new(port))), buffer_size);
        Pair { fabric, server }
    }

    /// How many writes the server verified.
    #[must_use]
    pub fn verified(&self) -> u64 {
        self.server.verified.load(Ordering::Acquire)
    }

    /// Serves one connection with the server's real session, while `client` runs its real
    /// session against it; returns when both ended.
    pub fn run(&self, client: &Client) -> Ended {
        self.serving(|addr| self.client(addr, client))
    }

    /// Serves one connection with the server's real session, while `client` runs against its
    /// address; returns what `client` did, when both ended.
    fn serving<T>(&self, client: impl FnOnce(SocketAddr) -> T) -> T {
        let l = TcpListener::bind("127.0.0.1:0").expect("a loopback listener");
        let addr = l.local_addr().expect("its address");
        std::thread::scope(|scope| {
            scope.spawn(|| {
                if let Ok((stream, peer)) = l.accept() {
                    serve(&self.server, stream, peer, 1);
                }
            });
            client(addr)
        })
    }

    fn client(&self, addr: SocketAddr, c: &Client) -> Ended {
        self.client_waiting(addr, c, None)
    }

    /// [`client`](Self::client), with `--wait-for-server` `wait`.
    fn client_waiting(&self, addr: SocketAddr, c: &Client, wait: Option<Duration>) -> Ended {
        let req = ClientRequest {
            length: c.payload.len() as u64,
            notify: c.notify,
            crc32c: c.crc.unwrap_or_else(|| rdma_proto::crc32c(&c.payload)),
            token: c.token.clone(),
        };
        let mut session = None;
        let result = (|| {
            let s = session.insert(open_waiting(addr, ClientHandshake::new(req), wait)?);
            self.session(s, c)
        })();
        Ended {
            result,
            verdict: session.and_then(|s| s.verdict().cloned()),
        }
    }

    /// The client's steps after the banner: the hello, the accept, the write through the
    /// fabric, `written`, the verdict.
    fn session(&self, s: &mut Session<'_>, c: &Client) -> color_eyre::Result<Outcome> {
        let qp = self.fabric.client_qp();
        s.hello_endpoint(qp, false, client_gids())?;
        let accept = s.await_accept()?;
        self.fabric.connect(qp.qpn, accept.endpoint.qpn);
        let imm = (c.notify == Notify::Imm).then_some(c.payload.len() as u32);
        let (mut addr, mut rkey, mut bytes) = (accept.addr, accept.rkey, &c.payload[..]);
        match c.write {
            Write::Right | Write::AgainAfterVerdict => {}
            Write::WrongRkey => rkey ^= 0x80,
            Write::PastTheEnd => addr += accept.buf_len,
            Write::Half => bytes = &bytes[..bytes.len() / 2],
            Write::Vanish => color_eyre::eyre::bail!("the client vanished after the accept"),
        }
        if let Err(status) = self.fabric.write(qp.qpn, addr, rkey, bytes, imm) {
            color_eyre::eyre::bail!("the write did not land: {status:?}");
        }
        s.written()?;
        let verdict = s.result();
        if c.write == Write::AgainAfterVerdict {
            if let Err(status) = self
                .fabric
                .write(qp.qpn, accept.addr, accept.rkey, bytes, imm)
            {
                color_eyre::eyre::bail!("the write after the verdict did not land: {status:?}");
            }
            color_eyre::eyre::bail!("a write after the verdict landed");
        }
        verdict
    }
}

/// The GIDs of the client's (fake) port: RoCE, its one GID `::ffff:127.0.0.1` (the fabric's
/// queue pairs', the server's port's): what a server reached over loopback may announce.
pub(crate) fn client_gids() -> Option<Vec<rdma_proto::Gid>> {
    Some(vec![rdma_proto::Gid::from(
        std::net::Ipv4Addr::LOCALHOST.to_ipv6_mapped(),
    )])
}

/// The real client's session with the server at `addr` (banner read), as `rdma-client` opens
/// it: each phase's deadline [`TIMEOUT`] four times over, nothing printed.
pub(crate) fn open(addr: SocketAddr, hs: ClientHandshake) -> color_eyre::Result<Session<'static>> {
    open_waiting(addr, hs, None)
}

/// [`open`], with `--wait-for-server` `wait`.
pub(crate) fn open_waiting(
    addr: SocketAddr,
    hs: ClientHandshake,
    wait: Option<Duration>,
) -> color_eyre::Result<Session<'static>> {
    let opts = SessionOptions {
        timeout: TIMEOUT * 4,
        wait_for_server: wait,
        cq_mode: rdma_core_rs::CqMode::Poll,
        token: TokenSource::default(),
        cm: false,
    };
    let target = Target {
        name: addr.to_string(),
        addr,
    };
    let end = PortName {
        device: "fake1".to_owned(),
        port: 1,
        gid_index: 1,
        gid: "::ffff:127.0.0.1".to_owned(),
    };
    Session::open(
        &target,
        hs,
        &end,
        None,
        &opts,
        None,
        &rdma_client::output::Detail::None,
    )
}

/// A server context for tests: sessions get their ports from `ports`, buffers of
/// `buffer_size` bytes, [`TOKEN`], each phase [`TIMEOUT`], JSON events.
pub(crate) fn context(ports: Box<dyn crate::ports::PortSource>, buffer_size: u64) -> SessionCtx {
    SessionCtx {
        ports,
        policy: rdma_proto::ServerPolicy {
            buffer_size,
            token: Some(TOKEN.to_owned()),
            program_version: "0".to_owned(),
            features: rdma_proto::ServerPolicy::default_features(),
            bench_max_len: 0,
            keep_alive_ms: KEEP_ALIVE.as_millis() as u64,
        },
        timeout: TIMEOUT,
        cq_mode: rdma_core_rs::CqMode::Poll,
        grant: crate::grant::Grant::remote_write(),
        out: crate::output::Output::new(true),
        stopping: std::sync::atomic::AtomicBool::new(false),
        verified: std::sync::atomic::AtomicU64::new(0),
        bench_max_time: TIMEOUT,
        pinned: crate::budget::PinBudget::new(1 << 30),
        stranger_log: std::sync::Mutex::new(crate::admission::LogLimit::new(Instant::now())),
        wake: rdma_app::wake::Ringer::none(),
        kept: crate::kept::KeptSlots::new(2),
    }
}

/// A port source with one port, the fabric's.
#[derive(Debug)]
struct OnePort(Arc<crate::ports::Served>);

impl crate::ports::PortSource for OnePort {
    fn serve(
        &self,
        _: Option<std::net::IpAddr>,
    ) -> Result<(Arc<crate::ports::Served>, Option<String>), crate::failure::Failure> {
        Ok((Arc::clone(&self.0), None))
    }
}
