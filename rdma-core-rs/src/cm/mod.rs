//! RDMA CM connection mode (librdmacm, through the bindings `build.rs` generates over
//! ibverbs-sys's types, module `sys`): connects a [`QueuePair`] through
//! the RDMA connection manager instead of by exchanged QP numbers, PSNs and GIDs. iWARP needs
//! it (siw refuses a hand-made RTS: the connection is a TCP socket the CM owns); InfiniBand and
//! RoCE may use it.
//!
//! This crate's own verbs objects stay as they are: the queue pair is created on our
//! [`Context`](crate::Context) (the same device the CM id is bound to, checked), and only its
//! number goes to the CM. On iWARP the kernel moves it to RTS when the connection is up; on
//! InfiniBand/RoCE this module takes it INIT -> RTR -> RTS with the attributes the CM
//! resolved (`rdma_init_qp_attr`), through the same typestate transitions as ever. The CM
//! connection then belongs to the queue pair: dropping the queue pair disconnects it.
//!
//! Both ends wait with a deadline, checked before every event; the passive end ([`Listener`])
//! takes only a connection request its [`Gate`] allows (the binaries: the nonce in the private
//! data and the TCP peer's address), rejects others and goes on waiting (until the gate gives
//! up), then lets the gate judge the path the request set up, and stops listening.

pub(crate) mod bind;
mod link;
mod path;
mod qp;
mod raw;
mod sys;

use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

use self::sys as cm;

use crate::error::{Error, Result, VerbOp};
use crate::local::LocalPort;
use crate::types::Gid;
use crate::{Init, QueuePair, Rts};

use bind::bind;
pub use bind::device_for;
pub(crate) use link::Link;
pub use path::PathRecord;
use raw::{Channel, Event, Id};

/// Whether RDMA CM can be used here: its event channel opens (the rdma_ucm module is loaded).
#[must_use]
pub fn available() -> bool {
    Channel::new().is_ok()
}

/// The connection parameters of both ends: our QP number, one RDMA Read/atomic each way (we
/// issue none), the maximum retries, and `private_data` (at most 56 bytes, InfiniBand's limit
/// for a connection request).
fn conn_param(qpn: u32, private_data: &[u8]) -> cm::rdma_conn_param {
    cm::rdma_conn_param {
        private_data: if private_data.is_empty() {
            std::ptr::null()
        } else {
            private_data.as_ptr().cast()
        },
        private_data_len: u8::try_from(private_data.len()).unwrap_or(u8::MAX),
        responder_resources: 1,
        initiator_depth: 1,
        flow_control: 1,
        retry_count: 7,
        rnr_retry_count: 7,
        srq: 0,
        qp_num: qpn,
    }
}

/// Longest private data this module sends (InfiniBand's connection request: 56 bytes).
pub const MAX_PRIVATE_DATA: usize = 56;

/// Waits for the event that lets `step` go on; any other event, or a failed status, is
/// [`Error::CmFailed`] with advice for what it means.
fn expect(
    ch: &Channel,
    step: &'static str,
    want: cm::rdma_cm_event_type::Type,
    deadline: Instant,
    cancel: &dyn Fn() -> bool,
) -> Result<Event> {
    let ev = ch.next(step, deadline, cancel)?;
    if ev.kind == want && ev.status == 0 {
        return Ok(ev);
    }
    Err(failed(step, &ev))
}

fn failed(step: &'static str, ev: &Event) -> Error {
    use cm::rdma_cm_event_type as T;
    let advice = match ev.kind {
        T::RDMA_CM_EVENT_REJECTED => {
            "the peer refused the connection: it takes only the connection its handshake offered \
             (right port, nonce and address), within its timeout; see its log"
        }
        T::RDMA_CM_EVENT_UNREACHABLE | T::RDMA_CM_EVENT_CONNECT_ERROR => {
            "the peer's RDMA CM did not answer: check that its address is reachable through the \
             RDMA netdev and that nothing filters the port"
        }
        T::RDMA_CM_EVENT_ADDR_ERROR | T::RDMA_CM_EVENT_ROUTE_ERROR => {
            "no RDMA path to the peer's address: check `rdma link`, `ip route` and `ip neigh`"
        }
        T::RDMA_CM_EVENT_DEVICE_REMOVAL => "the RDMA device went away (see `dmesg`)",
        _ => "an RDMA CM event out of order; check both sides' logs",
    };
    Error::CmFailed {
        step,
        event: ev.name(),
        status: ev.status,
        advice: advice.to_owned(),
    }
}

/// A millisecond timeout for librdmacm's own resolution steps, within `deadline`.
fn ms_until(deadline: Instant) -> libc::c_int {
    let left = deadline.saturating_duration_since(Instant::now());
    libc::c_int::try_from(left.as_millis().clamp(100, 30_000)).unwrap_or(30_000)
}

/// Checks that the CM put the connection on the device our queue pair lives on.
fn same_device(id: &Id, local: &LocalPort) -> Result<()> {
    match id.device() {
        Some((name, _)) if name == local.ctx.name() => Ok(()),
        found => Err(Error::invalid(
            format!(
                "RDMA CM carries this connection over {}, but the queue pair is on {}",
                found.map_or_else(|| "no device".to_owned(), |(n, p)| format!("{n} port {p}")),
                local.ctx.name()
            ),
            "open the device that holds the connection's local address (leave out --ib-dev, \
             or name that one)",
        )),
    }
}

/// Resolves `to`'s address (from `from`, when given) for `id`, on `ch`, within `deadline`.
fn resolve_addr(
    ch: &Channel,
    id: &Id,
    from: Option<IpAddr>,
    to: SocketAddr,
    deadline: Instant,
) -> Result<()> {
    use cm::rdma_cm_event_type as T;
    let src = from.map(|ip| raw::std_to_sockaddr(SocketAddr::new(ip, 0)));
    let dst = raw::std_to_sockaddr(SocketAddr::new(raw::ip_of(to), to.port()));
    // SAFETY: valid id; both addresses are valid sockaddrs librdmacm only reads (src may
    // be NULL: the route chooses).
    let rc = unsafe {
        cm::rdma_resolve_addr(
            id.raw(),
            src.as_ref()
                .map_or(std::ptr::null_mut(), |s| s.as_ptr().cast_mut().cast()),
            dst.as_ptr().cast_mut().cast(),
            ms_until(deadline),
        )
    };
    if rc != 0 {
        return Err(Error::last_os(VerbOp::CmResolveAddr, to.to_string()));
    }
    expect(
        ch,
        "resolve address",
        T::RDMA_CM_EVENT_ADDR_RESOLVED,
        deadline,
        &|| false,
    )
    .map(|_| ())
}

/// Resolves `id`'s route (its address resolved), within `deadline`.
fn resolve_route(ch: &Channel, id: &Id, to: SocketAddr, deadline: Instant) -> Result<()> {
    use cm::rdma_cm_event_type as T;
    // SAFETY: valid id with a resolved address.
    if unsafe { cm::rdma_resolve_route(id.raw(), ms_until(deadline)) } != 0 {
        return Err(Error::last_os(VerbOp::CmResolveRoute, to.to_string()));
    }
    expect(
        ch,
        "resolve route",
        T::RDMA_CM_EVENT_ROUTE_RESOLVED,
        deadline,
        &|| false,
    )
    .map(|_| ())
}

/// The path RDMA CM resolves from `from` to `to`, on an id of its own.
fn resolved_path(from: Option<IpAddr>, to: SocketAddr, deadline: Instant) -> Result<PathRecord> {
    let ch = Channel::new()?;
    let id = Id::new(&ch)?;
    resolve_addr(&ch, &id, from, to, deadline)?;
    resolve_route(&ch, &id, to, deadline)?;
    // SAFETY: valid id whose route is resolved: `path_rec` is NULL or `num_paths` records
    // librdmacm owns while the id lives; the first is copied out here.
    let first = unsafe {
        let route = &(*id.raw()).route;
        (route.num_paths > 0 && !route.path_rec.is_null())
            .then(|| PathRecord::from_sa(&*route.path_rec))
    };
    first.ok_or_else(|| {
        Error::invalid(
            format!("RDMA CM resolved no path record to {to}"),
            "check `rdma link` and the route to the peer",
        )
    })
}

impl QueuePair<Init> {
    /// Connects to the RDMA CM listener at `to` (from `from`, the local address, when given):
    /// resolves the address and route, sends `private_data` with the connection request and
    /// brings the queue pair to RTS. The queue pair must be on the device the CM picks for the
    /// route (`local`'s), which is checked.
    ///
    /// # Errors
    /// RDMA CM unavailable, no path, a reject or no answer before `deadline`, the device
    /// mismatch, a failed transition; the queue pair is destroyed.
    pub fn connect_cm(
        self,
        local: &LocalPort,
        from: Option<IpAddr>,
        to: SocketAddr,
        private_data: &[u8],
        deadline: Instant,
    ) -> Result<QueuePair<Rts>> {
        self.connect_cm_via(local, from, to, private_data, deadline, None)
    }

    /// [`connect_cm`](Self::connect_cm) along a path of the caller's: the one RDMA CM
    /// resolves, as `edit` changes it, set with `rdma_set_option(RDMA_OPTION_IB_PATH)` (as an
    /// InfiniBand application with its own path record does). The connection request carries
    /// the record's GIDs; a test peer uses this to name another source GID than its own.
    ///
    /// # Errors
    /// As [`connect_cm`](Self::connect_cm), and a path the kernel refuses.
    pub fn connect_cm_with_path(
        self,
        local: &LocalPort,
        from: Option<IpAddr>,
        to: SocketAddr,
        private_data: &[u8],
        deadline: Instant,
        edit: &mut dyn FnMut(&mut PathRecord),
    ) -> Result<QueuePair<Rts>> {
        self.connect_cm_via(local, from, to, private_data, deadline, Some(edit))
    }

    fn connect_cm_via(
        self,
        local: &LocalPort,
        from: Option<IpAddr>,
        to: SocketAddr,
        private_data: &[u8],
        deadline: Instant,
        edit: Option<&mut dyn FnMut(&mut PathRecord)>,
    ) -> Result<QueuePair<Rts>> {
        use cm::rdma_cm_event_type as T;
        if private_data.len() > MAX_PRIVATE_DATA {
            return Err(Error::invalid(
                format!("{} bytes of RDMA CM private data", private_data.len()),
                "send at most 56 bytes",
            ));
        }
        let path = match edit {
            Some(edit) => {
                let mut path = resolved_path(from, to, deadline)?;
                edit(&mut path);
                Some(path)
            }
            None => None,
        };
        let never = || false;
        let ch = Channel::new()?;
        let id = Id::new(&ch)?;
        resolve_addr(&ch, &id, from, to, deadline)?;
        same_device(&id, local)?;
        match path {
            None => resolve_route(&ch, &id, to, deadline)?,
            Some(path) => {
                let mut data = path.to_path_data();
                // SAFETY: valid id with a resolved address; `data` is one ibv_path_data that
                // lives through the call, which copies it, and its size is the length given.
                let rc = unsafe {
                    cm::rdma_set_option(
                        id.raw(),
                        cm::RDMA_OPTION_IB as libc::c_int,
                        cm::RDMA_OPTION_IB_PATH as libc::c_int,
                        (&raw mut data).cast(),
                        std::mem::size_of::<cm::ibv_path_data>(),
                    )
                };
                if rc != 0 {
                    return Err(Error::last_os(
                        VerbOp::CmResolveRoute,
                        "rdma_set_option(RDMA_OPTION_IB_PATH)",
                    ));
                }
                expect(
                    &ch,
                    "set the path",
                    T::RDMA_CM_EVENT_ROUTE_RESOLVED,
                    deadline,
                    &never,
                )?;
            }
        }
        let mut param = conn_param(self.qpn(), private_data);
        // SAFETY: valid id with a route; `param` (and the private data it points to) lives
        // through the call, which copies it.
        if unsafe { cm::rdma_connect(id.raw(), &mut param) } != 0 {
            return Err(Error::last_os(VerbOp::CmConnect, to.to_string()));
        }
        let ev = ch.next("connect", deadline, &never)?;
        let qp = match (ev.kind, ev.status) {
            // iWARP: the kernel moved the queue pair to RTS with the connection.
            (T::RDMA_CM_EVENT_ESTABLISHED, 0) => self.established_by_cm(local.port.active_mtu),
            // InfiniBand/RoCE: ours to move, then we tell the CM (RTU).
            (T::RDMA_CM_EVENT_CONNECT_RESPONSE, 0) => {
                // The path is the one we resolved ourselves, to the listener we chose.
                let qp = self.ready_by_cm(&id, local, &mut |_| Ok(()))?;
                // SAFETY: valid id that got its connect response.
                if unsafe { cm::rdma_establish(id.raw()) } != 0 {
                    return Err(Error::last_os(VerbOp::CmAccept, "rdma_establish"));
                }
                qp
            }
            _ => return Err(failed("connect", &ev)),
        };
        Ok(qp.with_link(Link { id, _ch: ch }))
    }
}

/// A queue pair the passive end is connecting: moved to RTS by us (InfiniBand/RoCE) or, on
/// iWARP, left for the kernel to move when the connection is established.
enum Pending {
    Ready(QueuePair<Rts>),
    Kernel(QueuePair<Init>),
}

/// A passive RDMA CM end for one connection: bound to a local address on a port of its own
/// (the kernel picks it), listening.
pub struct Listener {
    // Drop order: the id before its channel.
    id: Id,
    ch: Channel,
    port: u16,
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener")
            .field("port", &self.port)
            .finish()
    }
}

/// A connection request, for the [`Gate`] to judge.
#[derive(Debug)]
pub struct Request<'a> {
    /// Where it came from.
    pub peer: Option<SocketAddr>,
    /// Its private data.
    pub private_data: &'a [u8],
}

/// What [`Listener::accept`] does with a connection request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Connect the queue pair to it.
    Take,
    /// Reject it and go on waiting.
    Reject,
    /// Reject it and stop waiting: [`Error::CmFlood`].
    GiveUp,
}

/// The passive end's judge: of each connection request, and of the path of the one it takes.
pub trait Gate {
    /// Judges one connection request.
    fn request(&mut self, req: &Request<'_>) -> Verdict;
    /// Judges the destination GID of the path RDMA CM set up for the request taken
    /// (InfiniBand/RoCE; on iWARP the kernel connects and nothing is asked). The connection
    /// request says it, and the requester writes its request itself: `Err` rejects it.
    ///
    /// # Errors
    /// Why the path is refused (becomes [`Error::CmPath`]).
    fn path(&mut self, dgid: Gid) -> std::result::Result<(), String>;
}

/// Rejects a connection request we hold (no private data). A failure changes nothing: the
/// requester then times out.
fn reject(conn: &Id) {
    // SAFETY: valid request id; no private data.
    unsafe { cm::rdma_reject(conn.raw(), std::ptr::null(), 0) };
}

impl Listener {
    /// Listens on `local` (an address of an RDMA device; IPv4-mapped IPv6 counts as IPv4), on
    /// a port the kernel picks ([`port`](Self::port)).
    ///
    /// # Errors
    /// RDMA CM unavailable, no RDMA device holds the address, listen failed.
    pub fn bind(local: IpAddr) -> Result<Listener> {
        let local = local.to_canonical();
        let ch = Channel::new()?;
        let id = Id::new(&ch)?;
        bind(&id, local)?;
        // SAFETY: valid, bound id; a backlog of a few requests (others are judged in turn).
        if unsafe { cm::rdma_listen(id.raw(), 4) } != 0 {
            return Err(Error::last_os(VerbOp::CmListen, local.to_string()));
        }
        let port = id.local_port();
        Ok(Listener { id, ch, port })
    }

    /// The port it listens on.
    #[must_use]
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Takes the first connection request that `gate` allows (each other one is rejected; the
    /// gate may give up), stops listening, lets the gate judge the request's path, connects
    /// `qp` to it and brings it to RTS; waits until `deadline` or until `cancel` says so,
    /// checked before every event, so a flood of requests cannot hold it longer.
    ///
    /// The listener is destroyed as soon as a request is taken: the kernel rejects later ones
    /// (no listener), and destroys with it those still queued; one that comes out of the
    /// channel anyway is rejected. Nothing is left listening, and no request id leaks.
    ///
    /// # Errors
    /// A timeout (or `cancel`), [`Error::CmFlood`], [`Error::CmPath`], the device mismatch, a
    /// failed transition or accept; the queue pair is destroyed.
    pub fn accept(
        self,
        qp: QueuePair<Init>,
        local: &LocalPort,
        gate: &mut dyn Gate,
        deadline: Instant,
        cancel: &dyn Fn() -> bool,
    ) -> Result<QueuePair<Rts>> {
        use cm::rdma_cm_event_type as T;
        let mut rejected = 0u32;
        // Until a request is taken `self` stays whole, so that an early return drops its id
        // before its channel (field order); a channel closed first fails the id's destroy.
        let conn = loop {
            let ev = self.ch.next("a connection request", deadline, cancel)?;
            if ev.kind != T::RDMA_CM_EVENT_CONNECT_REQUEST {
                // Nothing else is expected on a listener; a device removal ends it.
                if ev.kind == T::RDMA_CM_EVENT_DEVICE_REMOVAL {
                    return Err(failed("listen", &ev));
                }
                continue;
            }
            // SAFETY: a connection request's id is new and ours to destroy (Drop) or use.
            let conn = unsafe { Id::adopt(ev.id) };
            let req = Request {
                peer: conn.peer(),
                private_data: &ev.private_data,
            };
            match gate.request(&req) {
                Verdict::Take => break conn,
                verdict => {
                    reject(&conn);
                    rejected = rejected.saturating_add(1);
                    if verdict == Verdict::GiveUp {
                        return Err(Error::CmFlood { rejected });
                    }
                }
            }
        };
        let Listener {
            id: listening, ch, ..
        } = self;
        drop(listening);
        // Moved here, after `ch`: locals drop in reverse order, so on every return below the
        // connection's id goes before its channel.
        let conn = conn;
        let qpn = qp.qpn();
        let ready = same_device(&conn, local).and_then(|()| {
            Ok(if local.ctx.transport().needs_cm() {
                Pending::Kernel(qp)
            } else {
                Pending::Ready(qp.ready_by_cm(&conn, local, &mut |gid| gate.path(gid))?)
            })
        });
        let qp = match ready {
            Ok(qp) => qp,
            Err(e) => {
                reject(&conn);
                return Err(e);
            }
        };
        let mut param = conn_param(qpn, &[]);
        // SAFETY: valid request id; `param` lives through the call, which copies it.
        if unsafe { cm::rdma_accept(conn.raw(), &mut param) } != 0 {
            return Err(Error::last_os(VerbOp::CmAccept, format!("QP {qpn}")));
        }
        loop {
            let ev = ch.next("accept", deadline, cancel)?;
            match (ev.kind, ev.status) {
                (T::RDMA_CM_EVENT_ESTABLISHED, 0) => break,
                (T::RDMA_CM_EVENT_CONNECT_REQUEST, _) => {
                    // SAFETY: as above: a new request id, ours; rejected and destroyed here.
                    reject(&unsafe { Id::adopt(ev.id) });
                }
                _ => return Err(failed("accept", &ev)),
            }
        }
        let qp = match qp {
            Pending::Ready(rts) => rts,
            Pending::Kernel(init) => init.established_by_cm(local.port.active_mtu),
        };
        Ok(qp.with_link(Link { id: conn, _ch: ch }))
    }
}
