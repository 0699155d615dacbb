//! RAII owners of librdmacm's objects (through `super::sys`): the event channel, CM ids, and one
//! event at a time, waited for with a deadline.

use std::ffi::CStr;
use std::net::{IpAddr, SocketAddr};
use std::ptr;
use std::time::{Duration, Instant};

use super::sys as cm;

use crate::error::{Error, Result, VerbOp};

/// How often a wait for an event checks its `cancel` condition.
const SLICE: Duration = Duration::from_millis(100);

/// `rdma_create_event_channel`, destroyed on drop. Every id on it must be gone first: its
/// owners ([`super::Link`], [`super::Listener`]) declare their ids before their channel.
pub(crate) struct Channel(*mut cm::rdma_event_channel);

// SAFETY: librdmacm's calls on a channel are thread-safe; the pointer is only passed to them
// and destroyed once.
unsafe impl Send for Channel {}
// SAFETY: see `Send`.
unsafe impl Sync for Channel {}

impl Channel {
    /// A new channel whose fd is non-blocking (events are waited for with `poll(2)`).
    pub(crate) fn new() -> Result<Channel> {
        // SAFETY: no arguments; a NULL return sets errno.
        let ch = unsafe { cm::rdma_create_event_channel() };
        if ch.is_null() {
            return Err(Error::last_os(VerbOp::CmChannel, ""));
        }
        let channel = Channel(ch);
        crate::fd::set_nonblocking(channel.fd())
            .map_err(|errno| Error::verb(VerbOp::CmChannel, "O_NONBLOCK", errno))?;
        Ok(channel)
    }

    /// The next event, waiting until `deadline` (checking `cancel` every 100 ms, and both
    /// before every event). A cancel still takes an event already queued (one look, no wait):
    /// what made the caller cancel may have raced it (a client's TCP notification of its
    /// write overtook the ESTABLISHED event of the same connection), so the wait ends at the
    /// first look that finds the queue empty, at the latest at `deadline`. The event is copied
    /// out and acknowledged at once, so that destroying its id never waits on it.
    pub(crate) fn next(
        &self,
        what: &'static str,
        deadline: Instant,
        cancel: &dyn Fn() -> bool,
    ) -> Result<Event> {
        let started = Instant::now();
        loop {
            // Before every event, queued or not: a peer that floods the channel cannot hold
            // the wait past its deadline (issue 23, item 4).
            let now = Instant::now();
            if now >= deadline {
                return Err(Error::Timeout {
                    what,
                    waited: now - started,
                });
            }
            let cancelled = cancel();
            let mut ev: *mut cm::rdma_cm_event = ptr::null_mut();
            // SAFETY: valid channel (non-blocking); `ev` is a writable out-pointer.
            let rc = unsafe { cm::rdma_get_cm_event(self.0, &mut ev) };
            if rc == 0 && !ev.is_null() {
                // SAFETY: librdmacm handed us a valid event, acknowledged right after this.
                let copied = unsafe { Event::copy(&*ev) };
                // SAFETY: `ev` came from rdma_get_cm_event and is acknowledged once; nothing of
                // it is used afterwards (private data was copied).
                unsafe { cm::rdma_ack_cm_event(ev) };
                return Ok(copied);
            }
            let errno = std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO);
            if errno != libc::EAGAIN && errno != libc::EWOULDBLOCK && errno != libc::EINTR {
                return Err(Error::verb(VerbOp::CmEvent, what, errno));
            }
            if cancelled {
                return Err(Error::Timeout {
                    what,
                    waited: now - started,
                });
            }
            let left = deadline.saturating_duration_since(Instant::now());
            crate::fd::wait_readable(self.fd(), left.min(SLICE))
                .map_err(|errno| Error::verb(VerbOp::CmEvent, "poll(2)", errno))?;
        }
    }

    fn fd(&self) -> libc::c_int {
        // SAFETY: valid channel; its fd is open while `self` lives.
        unsafe { (*self.0).fd }
    }

    pub(crate) fn raw(&self) -> *mut cm::rdma_event_channel {
        self.0
    }
}

impl Drop for Channel {
    fn drop(&mut self) {
        // SAFETY: created by rdma_create_event_channel, destroyed once; every id on it is gone
        // (ids are dropped before their channel, see the owners' field order).
        unsafe { cm::rdma_destroy_event_channel(self.0) };
    }
}

/// An `rdma_cm_id`, destroyed on drop. Its owner keeps the channel it reports on alive longer
/// (declared after it).
pub(crate) struct Id(*mut cm::rdma_cm_id);

// SAFETY: librdmacm's calls on an id are thread-safe; the pointer is destroyed once.
unsafe impl Send for Id {}
// SAFETY: see `Send`.
unsafe impl Sync for Id {}

impl Id {
    /// A TCP-port-space (reliable connected) id on `ch`.
    pub(crate) fn new(ch: &Channel) -> Result<Id> {
        let mut id: *mut cm::rdma_cm_id = ptr::null_mut();
        // SAFETY: valid channel; `id` is a writable out-pointer; no context pointer.
        let rc = unsafe {
            cm::rdma_create_id(
                ch.raw(),
                &mut id,
                ptr::null_mut(),
                cm::rdma_port_space::RDMA_PS_TCP,
            )
        };
        if rc != 0 || id.is_null() {
            return Err(Error::last_os(VerbOp::CmCreateId, ""));
        }
        Ok(Id(id))
    }

    /// Takes ownership of an id librdmacm created (a connection request's).
    ///
    /// # Safety
    /// `id` must be a valid id that nothing else destroys.
    pub(crate) unsafe fn adopt(id: *mut cm::rdma_cm_id) -> Id {
        Id(id)
    }

    pub(crate) fn raw(&self) -> *mut cm::rdma_cm_id {
        self.0
    }

    /// The name of the device the id is bound to (after a bind to an address, an address
    /// resolution or a connection request), and its port.
    pub(crate) fn device(&self) -> Option<(String, u8)> {
        // SAFETY: valid id; `verbs` is NULL or a context librdmacm keeps open while the id lives.
        let verbs = unsafe { (*self.0).verbs };
        if verbs.is_null() {
            return None;
        }
        // SAFETY: a valid context's device; the name is a NUL-terminated string it owns.
        let name = unsafe { ibverbs_sys::ibv_get_device_name((*verbs).device) };
        if name.is_null() {
            return None;
        }
        // SAFETY: non-null, NUL-terminated, valid while the id lives; copied here.
        let name = unsafe { CStr::from_ptr(name) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: valid id.
        Some((name, unsafe { (*self.0).port_num }))
    }

    /// The peer's address (of a connection request, or the resolved destination).
    pub(crate) fn peer(&self) -> Option<SocketAddr> {
        // SAFETY: valid id; the route's destination is plain data, copied out.
        let storage = unsafe { (*self.0).route.addr.__bindgen_anon_2.dst_storage };
        sockaddr_to_std(&storage)
    }

    /// The local port (host order) the id is bound to.
    pub(crate) fn local_port(&self) -> u16 {
        // SAFETY: valid id.
        u16::from_be(unsafe { cm::rdma_get_src_port(self.0) })
    }
}

impl Drop for Id {
    fn drop(&mut self) {
        // SAFETY: valid id, destroyed once. Every event we took was acknowledged at once (see
        // `Channel::next`), so this does not wait.
        let rc = unsafe { cm::rdma_destroy_id(self.0) };
        if rc != 0 {
            let errno = std::io::Error::last_os_error();
            // A failed destroy leaves the id as it was, so it can still say which it is.
            tracing::warn!(
                rc,
                %errno,
                port = self.local_port(),
                peer = ?self.peer(),
                "rdma_destroy_id failed"
            );
        }
    }
}

/// One CM event, copied out of librdmacm's before it is acknowledged.
pub(crate) struct Event {
    pub(crate) kind: cm::rdma_cm_event_type::Type,
    pub(crate) status: i32,
    /// The id the event is about (for a connection request: the new one, ours to own).
    pub(crate) id: *mut cm::rdma_cm_id,
    /// The connection's private data (a request's: what the client sent).
    pub(crate) private_data: Vec<u8>,
}

impl Event {
    /// # Safety
    /// `ev` must be a valid event from `rdma_get_cm_event`, not yet acknowledged.
    unsafe fn copy(ev: &cm::rdma_cm_event) -> Event {
        use cm::rdma_cm_event_type as T;
        let connection = matches!(
            ev.event,
            T::RDMA_CM_EVENT_CONNECT_REQUEST
                | T::RDMA_CM_EVENT_CONNECT_RESPONSE
                | T::RDMA_CM_EVENT_ESTABLISHED
                | T::RDMA_CM_EVENT_REJECTED
        );
        let private_data = if connection {
            // SAFETY: for these events `param.conn` is the active member; its private data is
            // NULL or `private_data_len` readable bytes valid until the acknowledgement.
            unsafe {
                let conn = ev.param.conn;
                if conn.private_data.is_null() {
                    Vec::new()
                } else {
                    std::slice::from_raw_parts(
                        conn.private_data.cast::<u8>(),
                        usize::from(conn.private_data_len),
                    )
                    .to_vec()
                }
            }
        } else {
            Vec::new()
        };
        Event {
            kind: ev.event,
            status: ev.status,
            id: ev.id,
            private_data,
        }
    }

    /// The event's name, e.g. `RDMA_CM_EVENT_REJECTED`.
    pub(crate) fn name(&self) -> String {
        event_name(self.kind)
    }
}

/// `rdma_event_str`.
pub(crate) fn event_name(kind: cm::rdma_cm_event_type::Type) -> String {
    // SAFETY: returns a static string for every value (an "unknown" one for unknown values).
    let s = unsafe { cm::rdma_event_str(kind) };
    if s.is_null() {
        return format!("event {kind}");
    }
    // SAFETY: non-null static NUL-terminated string.
    unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned()
}

/// `addr` for librdmacm (which takes a `sockaddr *` and only reads it).
pub(crate) fn std_to_sockaddr(addr: SocketAddr) -> socket2::SockAddr {
    socket2::SockAddr::from(addr)
}

/// A `sockaddr_storage` from librdmacm as a std address (IPv4 and IPv6 only).
fn sockaddr_to_std(storage: &libc::sockaddr_storage) -> Option<SocketAddr> {
    let mut s = socket2::SockAddrStorage::zeroed();
    // SAFETY: SockAddrStorage is exactly a sockaddr_storage; we copy a whole one in.
    unsafe { *s.view_as::<libc::sockaddr_storage>() = *storage };
    let len = libc::socklen_t::try_from(std::mem::size_of::<libc::sockaddr_storage>()).ok()?;
    // SAFETY: the storage holds a sockaddr of the family it says, within `len` bytes.
    let addr = unsafe { socket2::SockAddr::new(s, len) };
    addr.as_socket()
}

/// The address without its port, IPv4-mapped IPv6 as IPv4.
pub(crate) fn ip_of(addr: SocketAddr) -> IpAddr {
    addr.ip().to_canonical()
}
