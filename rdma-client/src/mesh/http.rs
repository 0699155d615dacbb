//! `--metrics-listen ADDR`: the `/metrics` endpoint Prometheus scrapes, a small blocking HTTP/1.1
//! server over std's `TcpListener` that cannot be used to tire the node, nor to starve its
//! scrapers.
//!
//! - `GET` (or `HEAD`) `/metrics` answers the exposition: OpenMetrics when the `Accept` header
//!   asks for it (Prometheus does), else the text format 0.0.4; any other path is `404`, any
//!   other method on `/metrics` is `405`. One request per connection (`Connection: close`).
//! - A connection's request head must arrive within [`Limits::head_timeout`] of its accept (a
//!   scraper sends it at once); the answer then has [`Limits::io_timeout`] to be written. A
//!   client that sends nothing is dropped at the first, one that reads slowly at the second;
//!   each holds one worker until then, never the acceptor.
//! - A request head is at most [`Limits::max_request`] bytes (`431` past it).
//! - At most [`Limits::max_connections`] are served at once, at most
//!   [`Limits::max_per_source`] of them from one address. A connection past either bound
//!   takes the place of the oldest one still waiting for its request (of its own address when
//!   that address is at its bound; else of the address holding the most), which is closed;
//!   where none is waiting (all are being answered) it gets `503` at once. So idle sockets,
//!   from one address or a few, cannot keep Prometheus or a liveness probe out.
//! - [`MetricsServer::stop`] (or drop) ends the acceptor within [`POLL`], closes the
//!   connections being served and waits for their workers.

use super::metrics::{Format, MeshMetrics};
use rdma_app::wake::Stop;
use std::io::{Read as _, Write as _};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often the acceptor looks for a stop while no connection comes.
pub const POLL: Duration = Duration::from_millis(50);

/// The endpoint's bounds.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Connections served at once (each one a thread while it lasts).
    pub max_connections: usize,
    /// Connections served at once from one address.
    pub max_per_source: usize,
    /// How long after its accept a connection's request head must have arrived.
    pub head_timeout: Duration,
    /// How long writing the answer may take, once the request is read.
    pub io_timeout: Duration,
    /// The request head's size cap, bytes.
    pub max_request: usize,
}

impl Default for Limits {
    /// 8 at once, 2 from one address; the request within 2 s, the answer written within 10 s
    /// (Prometheus's default scrape timeout); an 8 KiB head.
    fn default() -> Self {
        Self {
            max_connections: 8,
            max_per_source: 2,
            head_timeout: Duration::from_secs(2),
            io_timeout: Duration::from_secs(10),
            max_request: 8 * 1024,
        }
    }
}

/// Why the endpoint could not start.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// The address could not be bound.
    #[error(
        "--metrics-listen {addr}: cannot listen there: {source} (is another exporter on that port? 9478 is this one's)"
    )]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The error.
        source: std::io::Error,
    },
    /// The listener could not be set up or its thread started.
    #[error("--metrics-listen {addr}: {what}: {source}")]
    Setup {
        /// The address.
        addr: SocketAddr,
        /// What failed.
        what: &'static str,
        /// The error.
        source: std::io::Error,
    },
}

/// The running endpoint; stops on [`Self::stop`] or drop.
#[derive(Debug)]
pub struct MetricsServer {
    addr: SocketAddr,
    stop: Arc<Stop>,
    conns: Arc<Conns>,
    acceptor: Option<JoinHandle<()>>,
    limits: Limits,
}

impl MetricsServer {
    /// Binds `addr` and serves `metrics` from a thread of its own.
    pub fn bind(
        addr: SocketAddr,
        metrics: Arc<MeshMetrics>,
        limits: Limits,
    ) -> Result<Self, HttpError> {
        let listener =
            TcpListener::bind(addr).map_err(|source| HttpError::Bind { addr, source })?;
        let setup = |what| move |source| HttpError::Setup { addr, what, source };
        listener
            .set_nonblocking(true)
            .map_err(setup("making the listener non-blocking"))?;
        let bound = listener
            .local_addr()
            .map_err(setup("reading the bound address"))?;
        let stop = Arc::new(Stop::new().map_err(setup("making its wake-up socket"))?);
        let conns = Arc::new(Conns::default());
        let acceptor = {
            let (stop, conns) = (stop.clone(), conns.clone());
            std::thread::Builder::new()
                .name("metrics-accept".into())
                .spawn(move || accept_loop(&listener, &metrics, limits, &stop, &conns))
                .map_err(setup("starting its thread"))?
        };
        Ok(Self {
            addr: bound,
            stop,
            conns,
            acceptor: Some(acceptor),
            limits,
        })
    }

    /// The address it listens on (the port the system chose for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting, closes the connections being served and waits for their workers
    /// (at most one [`Limits::io_timeout`] more, as each ends by its deadline anyway).
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stop.request();
        if let Some(a) = self.acceptor.take() {
            // A panic in the acceptor is a bug of ours; it served nothing more either way.
            let _ = a.join();
        }
        self.conns.close_all();
        let deadline = Instant::now() + self.limits.io_timeout + POLL;
        while self.conns.workers() > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// One connection being served, as the acceptor sees it.
#[derive(Debug)]
struct Conn {
    id: u64,
    from: IpAddr,
    accepted: Instant,
    /// Still waiting for its request head (it may be closed for a newcomer).
    waiting: bool,
    /// Its socket, to close it from the acceptor (the worker holds another handle).
    stream: TcpStream,
}

/// The connections being served, and the workers still running (a closed connection's worker
/// ends at once, but is counted until it has).
#[derive(Debug, Default)]
struct Conns {
    list: Mutex<Vec<Conn>>,
    workers: AtomicU64,
    next_id: AtomicU64,
}

/// What to do with a new connection.
#[derive(Debug, PartialEq, Eq)]
enum Admit {
    /// Serve it.
    Serve,
    /// Close connection `id` (waiting for its request), then serve it.
    Replace(u64),
    /// `503`: every place is taken by a connection being answered.
    Busy,
}

/// Where a connection from `from` goes, among `conns` (see the module docs).
fn admit(conns: &[Conn], from: IpAddr, limits: Limits) -> Admit {
    let count = |ip: IpAddr| conns.iter().filter(|c| c.from == ip).count();
    let oldest_waiting = |of: &dyn Fn(&Conn) -> bool| {
        conns
            .iter()
            .filter(|c| c.waiting && of(c))
            .min_by_key(|c| c.accepted)
            .map_or(Admit::Busy, |c| Admit::Replace(c.id))
    };
    if count(from) >= limits.max_per_source {
        return oldest_waiting(&|c| c.from == from);
    }
    if conns.len() < limits.max_connections {
        return Admit::Serve;
    }
    // Full: the address holding the most connections gives way first, its oldest waiting one.
    let most = conns
        .iter()
        .filter(|c| c.waiting)
        .map(|c| count(c.from))
        .max()
        .unwrap_or(0);
    oldest_waiting(&|c| count(c.from) == most)
}

impl Conns {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Conn>> {
        // A worker that panicked left the list consistent (each change is one push or remove).
        self.list.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes `stream` from `from` in, closing the connection it replaces: its id, or `None`
    /// when it must get `503`.
    fn enter(&self, stream: &TcpStream, from: IpAddr, limits: Limits) -> Option<u64> {
        let mut list = self.lock();
        match admit(&list, from, limits) {
            Admit::Busy => return None,
            Admit::Replace(id) => {
                if let Some(i) = list.iter().position(|c| c.id == id) {
                    let gone = list.swap_remove(i);
                    let _ = gone.stream.shutdown(Shutdown::Both);
                }
            }
            Admit::Serve => {}
        }
        // Without a handle of its own it could not be closed: refuse it rather than serve it
        // beyond the bounds.
        let handle = stream.try_clone().ok()?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        list.push(Conn {
            id,
            from,
            accepted: Instant::now(),
            waiting: true,
            stream: handle,
        });
        Some(id)
    }

    /// Connection `id` has its request: it is no longer replaced by a newcomer. `false` if it
    /// was closed meanwhile.
    fn answering(&self, id: u64) -> bool {
        let mut list = self.lock();
        list.iter_mut()
            .find(|c| c.id == id)
            .map(|c| c.waiting = false)
            .is_some()
    }

    fn leave(&self, id: u64) {
        let mut list = self.lock();
        if let Some(i) = list.iter().position(|c| c.id == id) {
            list.swap_remove(i);
        }
    }

    fn close_all(&self) {
        for c in self.lock().drain(..) {
            let _ = c.stream.shutdown(Shutdown::Both);
        }
    }

    fn workers(&self) -> u64 {
        self.workers.load(Ordering::SeqCst)
    }
}

/// A worker's connection: leaves the list, and the count of workers, when the worker ends,
/// however it ends.
struct Slot {
    conns: Arc<Conns>,
    id: u64,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.conns.leave(self.id);
        self.conns.workers.fetch_sub(1, Ordering::SeqCst);
    }
}

fn accept_loop(
    listener: &TcpListener,
    metrics: &Arc<MeshMetrics>,
    limits: Limits,
    stop: &Stop,
    conns: &Arc<Conns>,
) {
    while !stop.requested() {
        let (stream, from) = match listener.accept() {
            Ok((s, from)) => (s, from.ip().to_canonical()),
            // Nothing waiting: sleep until a scraper comes or the stop does.
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if stop.bell().wait(listener, None).is_err() {
                    std::thread::sleep(POLL);
                }
                continue;
            }
            // A transient failure (EMFILE, an aborted connection): look again after a pause
            // rather than spin.
            Err(_) => {
                std::thread::sleep(POLL);
                continue;
            }
        };
        let Some(id) = conns.enter(&stream, from, limits) else {
            busy(stream);
            continue;
        };
        conns.workers.fetch_add(1, Ordering::SeqCst);
        let slot = Slot {
            conns: conns.clone(),
            id,
        };
        let metrics = metrics.clone();
        let spawned = std::thread::Builder::new()
            .name("metrics-http".into())
            .spawn(move || {
                serve(stream, &metrics, limits, &slot);
            });
        // On failure the closure (its stream and slot) is dropped: the client sees a close.
        drop(spawned);
    }
}

/// `503` without waiting for the client: into the socket's buffer, or not at all. What the
/// client already sent is read first (without waiting), so that the close is not a reset that
/// could overtake the answer.
fn busy(mut stream: TcpStream) {
    if stream.set_nonblocking(true).is_ok() {
        let mut sink = [0u8; 4096];
        let _ = stream.read(&mut sink);
        let _ = stream.write_all(&head(503, "Service Unavailable", "text/plain", 0, &[]));
        let _ = stream.shutdown(Shutdown::Write);
    }
}

fn head(code: u16, reason: &str, ctype: &str, len: usize, extra: &[&str]) -> Vec<u8> {
    let mut h = format!(
        "HTTP/1.1 {code} {reason}\r\nContent-Type: {ctype}\r\nContent-Length: {len}\r\nConnection: close\r\n"
    );
    for e in extra {
        h.push_str(e);
        h.push_str("\r\n");
    }
    h.push_str("\r\n");
    h.into_bytes()
}

/// What a request asked, as far as this endpoint cares.
#[derive(Debug, PartialEq, Eq)]
enum Ask {
    Metrics { head_only: bool, format: Format },
    WrongMethod,
    NotFound,
    Bad,
    TooLarge,
}

fn serve(stream: TcpStream, metrics: &MeshMetrics, limits: Limits, slot: &Slot) {
    let deadline = Instant::now() + limits.head_timeout;
    let mut stream = Deadlined { stream, deadline };
    if stream.stream.set_nonblocking(false).is_err() {
        return;
    }
    let ask = match stream.read_head(limits.max_request) {
        Ok(Some(h)) => parse(&h),
        Ok(None) => Ask::TooLarge,
        // Timed out, closed for a newcomer, or the client went: nothing to answer.
        Err(_) => return,
    };
    if !slot.conns.answering(slot.id) {
        return;
    }
    stream.deadline = Instant::now() + limits.io_timeout;
    let answer = match ask {
        Ask::Metrics { head_only, format } => {
            let body = metrics.encode(format);
            let mut out = head(200, "OK", format.content_type(), body.len(), &[]);
            if !head_only {
                out.extend_from_slice(body.as_bytes());
            }
            out
        }
        Ask::WrongMethod => {
            let b = b"only GET and HEAD\n";
            let mut out = head(
                405,
                "Method Not Allowed",
                "text/plain",
                b.len(),
                &["Allow: GET, HEAD"],
            );
            out.extend_from_slice(b);
            out
        }
        Ask::NotFound => {
            let b = b"the metrics are at /metrics\n";
            let mut out = head(404, "Not Found", "text/plain", b.len(), &[]);
            out.extend_from_slice(b);
            out
        }
        Ask::Bad => head(400, "Bad Request", "text/plain", 0, &[]),
        Ask::TooLarge => head(431, "Request Header Fields Too Large", "text/plain", 0, &[]),
    };
    if stream.write(&answer).is_ok() {
        let _ = stream.stream.shutdown(Shutdown::Write);
    }
}

/// A stream whose every read and write ends by a deadline (the head's, then the answer's).
struct Deadlined {
    stream: TcpStream,
    deadline: Instant,
}

impl Deadlined {
    fn left(&self) -> std::io::Result<Duration> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            Err(std::io::ErrorKind::TimedOut.into())
        } else {
            Ok(left)
        }
    }

    /// The request head (up to the blank line), `None` past `cap` bytes.
    fn read_head(&mut self, cap: usize) -> std::io::Result<Option<Vec<u8>>> {
        let mut buf = Vec::with_capacity(1024);
        let mut chunk = [0u8; 1024];
        loop {
            self.stream.set_read_timeout(Some(self.left()?))?;
            let n = self.stream.read(&mut chunk)?;
            if n == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            buf.extend_from_slice(&chunk[..n]);
            if let Some(end) = find_end(&buf) {
                buf.truncate(end);
                return Ok((end <= cap).then_some(buf));
            }
            if buf.len() > cap {
                return Ok(None);
            }
        }
    }

    fn write(&mut self, mut bytes: &[u8]) -> std::io::Result<()> {
        while !bytes.is_empty() {
            self.stream.set_write_timeout(Some(self.left()?))?;
            let n = self.stream.write(bytes)?;
            if n == 0 {
                return Err(std::io::ErrorKind::WriteZero.into());
            }
            bytes = &bytes[n..];
        }
        Ok(())
    }
}

fn find_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4)
        .position(|w| w == b"\r\n\r\n")
        .or_else(|| buf.windows(2).position(|w| w == b"\n\n"))
}

fn parse(head: &[u8]) -> Ask {
    let Ok(text) = std::str::from_utf8(head) else {
        return Ask::Bad;
    };
    let mut lines = text.lines();
    let mut words = lines.next().unwrap_or("").split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (words.next(), words.next(), words.next(), words.next())
    else {
        return Ask::Bad;
    };
    if !version.starts_with("HTTP/1.") {
        return Ask::Bad;
    }
    let path = target.split('?').next().unwrap_or(target);
    if path != "/metrics" {
        return Ask::NotFound;
    }
    let head_only = match method {
        "GET" => false,
        "HEAD" => true,
        _ => return Ask::WrongMethod,
    };
    let openmetrics = lines.any(|l| {
        l.split_once(':').is_some_and(|(k, v)| {
            k.trim().eq_ignore_ascii_case("accept") && v.contains("application/openmetrics-text")
        })
    });
    let format = if openmetrics {
        Format::OpenMetrics
    } else {
        Format::Text
    };
    Ask::Metrics { head_only, format }
}

#[cfg(test)]
mod tests;
