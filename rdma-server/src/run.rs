//! The server's lifecycle: open the device once, listen, admit clients, run each session on its
//! own thread, stop on the first verified write (one-shot) or on SIGINT/SIGTERM (`--serve`).

use crate::access;
use crate::admission::{Log, LogLimit, PerSource};
use crate::budget;
use crate::cli::Args;
use crate::exit::ServerError;
use crate::grant::Grant;
use crate::i18n::Lang;
use crate::output::{AuthMode, Event, Output, ServeMode, StopReason};
use crate::ports::Ports;
use crate::session::{self, SessionCtx};
use crate::workers::Workers;
use color_eyre::eyre::{Result, WrapErr as _};
use rdma_app::wake::{Ringer, Stop};
use rdma_proto::{ErrorCode, ErrorMsg, ServerMessage, ServerPolicy};
use std::collections::HashMap;
use std::io::Write as _;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How often [`stop_sessions`] looks whether the sessions' threads have ended.
const TICK: Duration = Duration::from_millis(20);
/// How long the accept loop waits after a failed accept (e.g. EMFILE) before it tries again.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);

/// The accept loop's state, shared with the session threads, which see only `session`.
#[derive(Debug)]
struct Shared {
    session: SessionCtx,
    args: Args,
    active: AtomicUsize,
    /// Clones of the live sessions' sockets, to unblock their reads on shutdown.
    sockets: Mutex<HashMap<u64, TcpStream>>,
    /// Live connections per source address (`--max-per-ip`).
    per_source: Mutex<PerSource>,
    /// How many refusals are logged (the accept loop's only).
    refusal_log: Mutex<LogLimit>,
}

/// The banner's features: the protocol's, and `cm` where RDMA CM works here (rdma_ucm loaded).
fn features() -> Vec<String> {
    let mut f = ServerPolicy::default_features();
    if rdma_core_rs::cm::available() {
        f.push(rdma_proto::cm::FEATURE.to_owned());
    }
    f
}

/// The accept loop's state around `session`, with `args`' admission rules; a verified write
/// rings `stop`'s bell (a one-shot server stops on it).
fn shared(args: Args, mut session: SessionCtx, stop: &Stop) -> Arc<Shared> {
    session.wake = stop.bell().ringer();
    Arc::new(Shared {
        session,
        active: AtomicUsize::new(0),
        sockets: Mutex::new(HashMap::new()),
        per_source: Mutex::new(PerSource::default()),
        refusal_log: Mutex::new(LogLimit::new(Instant::now())),
        args,
    })
}

/// Admits clients from `listener` (non-blocking) and serves them until a stop: `stop`
/// requested (a signal), the first verified write (one-shot), or the lifetime (an error).
/// Between clients it sleeps on `stop`'s bell ([`rdma_app::wake`]): an idle server does not wake.
/// Every live session is stopped before it returns; `Ok` says why it stopped and how many
/// connections came.
fn accept_loop(s: &Arc<Shared>, listener: &TcpListener, stop: &Stop) -> Result<(StopReason, u64)> {
    let started = Instant::now();
    let mut next_id = 0u64;
    let mut workers = Workers::new();
    let reason = loop {
        if stop.requested() {
            break StopReason::Signal;
        }
        if !s.args.serve && s.session.verified.load(Ordering::Acquire) > 0 {
            break StopReason::Verified;
        }
        if let Some(lifetime) = s.args.lifetime
            && started.elapsed() >= lifetime
        {
            stop_sessions(s, workers);
            return Err(ServerError::Lifetime(lifetime).into());
        }
        match listener.accept() {
            Ok((stream, peer)) => {
                let peer = canonical_peer(peer);
                next_id += 1;
                admit(s, &mut workers, stream, peer, next_id);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                let left = s.args.lifetime.map(|l| l.saturating_sub(started.elapsed()));
                if let Err(e) = stop.bell().wait(listener, left) {
                    tracing::warn!("waiting for clients failed: {e}");
                    std::thread::sleep(ACCEPT_RETRY);
                }
            }
            Err(e) => {
                // E.g. EMFILE: keep serving the sessions we have, try again shortly.
                tracing::warn!("accept failed: {e}");
                std::thread::sleep(ACCEPT_RETRY);
            }
        }
    };
    stop_sessions(s, workers);
    Ok((reason, next_id))
}

/// The accept loop alone, for tests: `session` (its ports a fake fabric's) behind `args`'
/// admission rules (`--allow`, `--max-clients`, `--max-per-ip`), on `listener`, until `stop`.
///
/// # Errors
/// As [`accept_loop`]'s: the lifetime ran out.
#[cfg(test)]
pub(crate) fn accept_with(
    args: Args,
    session: SessionCtx,
    listener: &TcpListener,
    stop: &Stop,
) -> Result<(StopReason, u64)> {
    listener
        .set_nonblocking(true)
        .wrap_err("making the listener non-blocking")?;
    accept_loop(&shared(args, session, stop), listener, stop)
}

/// Runs the server until it is done; see the module docs.
pub fn run(args: Args, out: Output) -> Result<()> {
    run_granting(args, out, Grant::remote_write())
}

/// [`run`], with each write session granting its client `grant` instead of remote write.
pub fn run_granting(args: Args, out: Output, grant: Grant) -> Result<()> {
    let args = crate::config::apply(args)?;
    let pinned = budget::size(
        args.max_pinned,
        args.buffer_size,
        rdma_core_rs::memlock::MemlockBudget::current(),
    )?;
    if let Some(cut) = &pinned.cut {
        tracing::warn!("pinned-memory budget cut to {} bytes: {cut}", pinned.total);
    }
    if let Some(warning) = budget::bench_warning(args.bench_max_bytes, pinned.total) {
        tracing::warn!("{warning}");
    }
    let token = access::load_token(args.token_file.as_deref())?;
    // Before the device is opened: a misconfiguration is named even where RDMA is missing.
    if let Some(warning) = access::exposure_warning(
        args.listen,
        token.is_some(),
        &args.allow,
        args.bench_max_bytes,
    ) {
        eprintln!("{warning}");
    }
    let ports = Ports::new(args.local.clone(), args.local.open()?);
    let start = Arc::clone(ports.start());
    warn_bench_on_infiniband(&start, token.is_some(), args.bench_max_bytes);

    let listener = listen(args.listen).map_err(|source| ServerError::Listen {
        addr: args.listen,
        source,
    })?;
    listener
        .set_nonblocking(true)
        .wrap_err("making the listener non-blocking")?;
    let local_addr = listener.local_addr().unwrap_or(args.listen);

    let stop = Stop::new().map_err(ServerError::Signals)?;
    stop.on_signals(&[signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM])
        .map_err(ServerError::Signals)?;

    let session = SessionCtx {
        ports: Box::new(ports),
        policy: ServerPolicy {
            buffer_size: args.buffer_size,
            token,
            program_version: env!("CARGO_PKG_VERSION").to_owned(),
            features: features(),
            bench_max_len: args.bench_max_bytes,
            // Rounds only for a server that keeps serving (a one-shot one ends at its verdict).
            keep_alive_ms: if args.serve {
                u64::try_from(args.keep_alive.as_millis()).unwrap_or(u64::MAX)
            } else {
                0
            },
        },
        timeout: args.timeout,
        cq_mode: args.local.cq_mode,
        grant,
        out: out.with_style(Lang::from_env()),
        stopping: AtomicBool::new(false),
        verified: AtomicU64::new(0),
        bench_max_time: args.bench_max_time,
        pinned: budget::PinBudget::new(pinned.total),
        stranger_log: Mutex::new(LogLimit::new(Instant::now())),
        // `shared` gives it the accept loop's bell.
        wake: Ringer::none(),
        kept: crate::kept::KeptSlots::for_server(args.max_clients, args.max_per_ip)
            .lifetime(args.keep_max_time),
    };
    let shared = shared(args, session, &stop);
    let s = &shared;
    let out = &s.session.out;
    let local = &*start;
    let mode = if s.args.serve {
        ServeMode::Serve
    } else {
        ServeMode::Oneshot
    };
    let auth = if s.session.policy.token.is_some() {
        AuthMode::Token
    } else {
        AuthMode::None
    };
    let cm = s
        .session
        .policy
        .features
        .iter()
        .any(|f| f == rdma_proto::cm::FEATURE);
    out.emit(&Event::Listening {
        addr: local_addr.to_string().into(),
        device: local.ctx.name().into(),
        port: local.port.num,
        gid_index: local.gid.index,
        gid: local.gid.gid.to_string().into(),
        mtu: local.port.active_mtu.bytes(),
        buffer_size: s.args.buffer_size,
        mode,
        max_clients: s.args.max_clients,
        auth,
        timeout_ms: u64::try_from(s.args.timeout.as_millis()).unwrap_or(u64::MAX),
        cm,
    });

    let (reason, next_id) = accept_loop(s, &listener, &stop)?;
    let cpu_ms = cpu_used().map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    out.emit(&Event::Stopped {
        reason,
        sessions: next_id,
        verified: s.session.verified.load(Ordering::Acquire),
        cpu_ms,
    });
    Ok(())
}

/// The CPU time this process used so far, user and system (`getrusage(RUSAGE_SELF)`).
fn cpu_used() -> Option<Duration> {
    // SAFETY: rusage is plain data; all zeros is a valid value for getrusage to overwrite.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_SELF with a valid, writable rusage.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return None;
    }
    let tv = |t: libc::timeval| {
        Duration::from_secs(u64::try_from(t.tv_sec).ok()?)
            .checked_add(Duration::from_micros(u64::try_from(t.tv_usec).ok()?))
    };
    tv(usage.ru_utime)?.checked_add(tv(usage.ru_stime)?)
}

/// A listener on `addr`. `[::]` listens dual-stack (IPv4 clients arrive as `::ffff:a.b.c.d`,
/// which [`canonical_peer`] turns back), whatever `net.ipv6.bindv6only` says; where the kernel
/// has no IPv6 it falls back to `0.0.0.0` on the same port, with a warning.
fn listen(addr: SocketAddr) -> std::io::Result<TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let bind = |addr: SocketAddr| -> std::io::Result<TcpListener> {
        let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
        if addr.is_ipv6() && addr.ip().is_unspecified() {
            socket.set_only_v6(false)?;
        }
        socket.set_reuse_address(true)?;
        socket.bind(&addr.into())?;
        socket.listen(128)?;
        Ok(socket.into())
    };
    match bind(addr) {
        Err(e) if addr.is_ipv6() && addr.ip().is_unspecified() && no_ipv6(&e) => {
            let v4 = SocketAddr::from((std::net::Ipv4Addr::UNSPECIFIED, addr.port()));
            tracing::warn!(
                "cannot listen on {addr} ({e}): this kernel has no IPv6; listening on {v4}"
            );
            bind(v4)
        }
        other => other,
    }
}

/// An error that means IPv6 is off in this kernel.
fn no_ipv6(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EAFNOSUPPORT | libc::EADDRNOTAVAIL)
    )
}

/// A client's address as people and allow-lists know it: an IPv4 client of a dual-stack
/// listener (`::ffff:10.0.0.2`) is `10.0.0.2`.
pub(crate) fn canonical_peer(peer: SocketAddr) -> SocketAddr {
    SocketAddr::new(peer.ip().to_canonical(), peer.port())
}

/// On InfiniBand a hello's LID cannot be bound to its TCP address (see
/// `rdma_proto::GidBinding`), so bench sessions (whose lat pongs the server RDMA-Writes
/// wherever the hello says) are served there only to clients with the token: each session's
/// port decides (`ServerHandshake::bind`). Said at start when the port opened then is one.
fn warn_bench_on_infiniband(local: &rdma_core_rs::LocalPort, token: bool, bench_max_bytes: u64) {
    if local.port.link_layer != rdma_core_rs::LinkLayer::Ethernet && bench_max_bytes > 0 && !token {
        tracing::warn!(
            "bench sessions on InfiniBand are refused: there a hello's LID cannot be bound to \
             its TCP address, so bench sessions need a token (--token-file); see SECURITY.md"
        );
    }
}

/// Checks a new connection against `--allow` and `--max-clients`, then starts its session.
fn admit(s: &Arc<Shared>, workers: &mut Workers, stream: TcpStream, peer: SocketAddr, id: u64) {
    let refusal = if !access::allowed(&s.args.allow, peer.ip()) {
        Some((
            ErrorCode::Forbidden,
            format!(
                "client address {} is not in the server's --allow list",
                peer.ip()
            ),
        ))
    } else if s.active.load(Ordering::Acquire) >= s.args.max_clients as usize {
        Some((
            ErrorCode::Busy,
            format!(
                "the server is serving its maximum of {} clients; try again shortly",
                s.args.max_clients
            ),
        ))
    } else if !lock(&s.per_source).take(peer.ip(), s.args.max_per_ip) {
        Some((
            ErrorCode::Busy,
            format!(
                "the server already serves {} connections from your address (--max-per-ip); close one or try again shortly",
                s.args.max_per_ip
            ),
        ))
    } else {
        None
    };
    if let Some((code, message)) = refusal {
        if let Log::Line { dropped } = lock(&s.refusal_log).refusal(Instant::now()) {
            if dropped > 0 {
                tracing::warn!(
                    "{dropped} more refusal(s) not logged (at most {} a second)",
                    crate::admission::LOG_BURST
                );
            }
            s.session.out.emit(&Event::Refused {
                peer: peer.to_string().into(),
                code: code.as_str().into(),
                message: message.as_str().into(),
            });
        }
        refuse(stream, code, message);
        return;
    }
    // From here on the source's slot is held: the session's ActiveGuard gives it back, and
    // every early return below.

    // Sessions block with deadlines. Elsewhere an accepted socket may inherit the listener's
    // non-blocking mode; on Linux it never does (accept(2)), and the call is saved.
    #[cfg(not(target_os = "linux"))]
    if let Err(e) = stream.set_nonblocking(false) {
        tracing::warn!("session {id}: {e}");
        lock(&s.per_source).give_back(peer.ip());
        return;
    }
    // The guard exists before the job does and moves into it: if no thread can run it, the
    // job (guard and socket with it) is dropped at once, and the guard hands back the slot,
    // the active count and the socket clone registered for shutdown, as any session end.
    s.active.fetch_add(1, Ordering::AcqRel);
    let guard = ActiveGuard {
        shared: Arc::clone(s),
        id,
        ip: peer.ip(),
    };
    if let Ok(clone) = stream.try_clone()
        && let Ok(mut map) = s.sockets.lock()
    {
        map.insert(id, clone);
    }
    let started = workers.run(move || {
        let guard = guard;
        session::serve(&guard.shared.session, stream, peer, id);
    });
    if let Err(e) = started {
        tracing::error!("cannot start a thread for session {id}: {e}");
    }
}

/// Sends one error line to a client that is not admitted, then closes.
fn refuse(mut stream: TcpStream, code: ErrorCode, message: String) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
    let line = ServerMessage::Error(ErrorMsg {
        code,
        message,
        supported: None,
    })
    .to_line();
    let _ = stream.write_all(line.as_bytes());
    let _ = stream.shutdown(Shutdown::Both);
}

/// Stops every live session (they answer `shutting_down`) and waits for their threads.
fn stop_sessions(s: &Arc<Shared>, workers: Workers) {
    s.session.stopping.store(true, Ordering::Release);
    if let Ok(map) = s.sockets.lock() {
        for sock in map.values() {
            // Unblocks a session waiting for the client's next line; the write half stays
            // open so it can still say why.
            let _ = sock.shutdown(Shutdown::Read);
        }
    }
    workers.stop(
        Instant::now() + s.args.timeout + Duration::from_secs(1),
        TICK,
    );
}

/// Keeps the active-session count, the per-source counts and socket registry right however a
/// session ends.
struct ActiveGuard {
    shared: Arc<Shared>,
    id: u64,
    ip: std::net::IpAddr,
}

/// A lock that a panicked holder does not poison for the others (the data are counters).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        self.shared.active.fetch_sub(1, Ordering::AcqRel);
        lock(&self.shared.per_source).give_back(self.ip);
        if let Ok(mut map) = self.shared.sockets.lock() {
            map.remove(&self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv6Addr, TcpStream};
    use std::time::Duration;

    #[test]
    fn the_default_listener_takes_ipv4_and_ipv6_clients() {
        let l = listen(SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0))).unwrap();
        let port = l.local_addr().unwrap().port();
        for to in [format!("127.0.0.1:{port}"), format!("[::1]:{port}")] {
            let to: SocketAddr = to.parse().unwrap();
            TcpStream::connect_timeout(&to, Duration::from_secs(5))
                .unwrap_or_else(|e| panic!("{to}: {e}"));
            let (_, peer) = l.accept().unwrap();
            // An IPv4 client is seen as the IPv4 address it is, not as ::ffff:127.0.0.1.
            assert_eq!(canonical_peer(peer).ip(), to.ip(), "{peer}");
        }
    }

    /// The `stopped` event's CPU time: known, and growing with work done.
    #[test]
    fn the_cpu_used_is_measured() {
        let before = cpu_used().unwrap();
        let t = std::time::Instant::now();
        let mut x = 0u64;
        while t.elapsed() < Duration::from_millis(30) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        assert!(cpu_used().unwrap() > before, "{x}");
    }

    #[test]
    fn mapped_peers_are_canonical_and_others_unchanged() {
        let mapped: SocketAddr = "[::ffff:10.0.0.2]:5000".parse().unwrap();
        assert_eq!(canonical_peer(mapped), "10.0.0.2:5000".parse().unwrap());
        let v6: SocketAddr = "[fd00::2]:5000".parse().unwrap();
        assert_eq!(canonical_peer(v6), v6);
        // So `--allow 10.0.0.0/24` admits the IPv4 client of a dual-stack listener.
        let allow = ["10.0.0.0/24".parse().unwrap()];
        assert!(crate::access::allowed(&allow, canonical_peer(mapped).ip()));
    }
}
