//! `--metrics-listen ADDR`: the `/metrics` endpoint Prometheus scrapes, a small blocking HTTP/1.1
//! server over std's `TcpListener` that cannot be used to tire the node.
//!
//! - `GET` (or `HEAD`) `/metrics` answers the exposition: OpenMetrics when the `Accept` header
//!   asks for it (Prometheus does), else the text format 0.0.4; any other path is `404`, any
//!   other method on `/metrics` is `405`. One request per connection (`Connection: close`).
//! - Each connection has one deadline for reading its request and writing the answer
//!   ([`Limits::io_timeout`]): a client that sends nothing, or reads slowly, is dropped when it
//!   passes, and holds one worker until then, never the acceptor.
//! - A request head is at most [`Limits::max_request`] bytes (`431` past it); at most
//!   [`Limits::max_connections`] are served at once, the next ones get `503` at once.
//! - [`MetricsServer::stop`] (or drop) ends the acceptor within [`POLL`] and waits for the
//!   workers, each of which ends by its deadline.

use super::metrics::{Format, MeshMetrics};
use rdma_app::wake::Stop;
use std::io::{Read as _, Write as _};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often the acceptor looks for a stop while no connection comes.
pub const POLL: Duration = Duration::from_millis(50);

/// The endpoint's bounds.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Connections served at once (each one a thread while it lasts).
    pub max_connections: usize,
    /// One connection's whole time: its request read and the answer written.
    pub io_timeout: Duration,
    /// The request head's size cap, bytes.
    pub max_request: usize,
}

impl Default for Limits {
    /// 4 at once, 10 s each (Prometheus's default scrape timeout), an 8 KiB head.
    fn default() -> Self {
        Self {
            max_connections: 4,
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
    active: Arc<AtomicUsize>,
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
        let active = Arc::new(AtomicUsize::new(0));
        let acceptor = {
            let (stop, active) = (stop.clone(), active.clone());
            std::thread::Builder::new()
                .name("metrics-accept".into())
                .spawn(move || accept_loop(&listener, &metrics, limits, &stop, &active))
                .map_err(setup("starting its thread"))?
        };
        Ok(Self {
            addr: bound,
            stop,
            active,
            acceptor: Some(acceptor),
            limits,
        })
    }

    /// The address it listens on (the port the system chose for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting, then waits for the connections being served (each ends by its
    /// deadline; this waits at most one [`Limits::io_timeout`] more).
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stop.request();
        if let Some(a) = self.acceptor.take() {
            // A panic in the acceptor is a bug of ours; it served nothing more either way.
            let _ = a.join();
        }
        let deadline = Instant::now() + self.limits.io_timeout + POLL;
        while self.active.load(Ordering::SeqCst) > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Decrements the count of connections being served when the worker ends, however it ends.
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

fn accept_loop(
    listener: &TcpListener,
    metrics: &Arc<MeshMetrics>,
    limits: Limits,
    stop: &Stop,
    active: &Arc<AtomicUsize>,
) {
    while !stop.requested() {
        let stream = match listener.accept() {
            Ok((s, _)) => s,
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
        let taken = active.fetch_add(1, Ordering::SeqCst);
        let slot = Slot(active.clone());
        if taken >= limits.max_connections {
            busy(stream);
            continue;
        }
        let metrics = metrics.clone();
        let spawned = std::thread::Builder::new()
            .name("metrics-http".into())
            .spawn(move || {
                let _slot = slot;
                serve(stream, &metrics, limits);
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

fn serve(stream: TcpStream, metrics: &MeshMetrics, limits: Limits) {
    let deadline = Instant::now() + limits.io_timeout;
    let mut stream = Deadlined { stream, deadline };
    if stream.stream.set_nonblocking(false).is_err() {
        return;
    }
    let ask = match stream.read_head(limits.max_request) {
        Ok(Some(h)) => parse(&h),
        Ok(None) => Ask::TooLarge,
        // Timed out or the client went: nothing to answer.
        Err(_) => return,
    };
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

/// A stream whose every read and write ends by one deadline.
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
