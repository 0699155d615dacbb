//! Thin blocking line framing with deadlines and a line cap.
//!
//! [`LineConn`] reads `\n`-terminated lines (a trailing `\r` is stripped, blank lines are
//! skipped) and writes whole lines. Every read and write runs under a deadline: before each
//! socket call the remaining time is set as the socket timeout, so a peer trickling one byte per
//! second is still cut off at the deadline. A line longer than the cap is refused as soon as the
//! cap is crossed, without buffering the rest.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::error::ErrorCode;
use crate::wire::ErrorMsg;

/// A byte stream whose blocking calls can be bounded in time.
pub trait Deadlined: Read + Write {
    /// Sets the read and write timeouts for the next calls (`None` = block forever; never
    /// passed by [`LineConn`], which always has a deadline). `remaining` is never zero.
    fn set_timeouts(&self, remaining: Option<Duration>) -> io::Result<()>;

    /// Sets the timeout of the next reads only ([`set_timeouts`](Self::set_timeouts) unless a
    /// stream can set one alone: a socket then makes one system call, not two).
    fn set_read_timeouts(&self, remaining: Option<Duration>) -> io::Result<()> {
        self.set_timeouts(remaining)
    }

    /// Sets the timeout of the next writes only (see [`set_read_timeouts`](Self::set_read_timeouts)).
    fn set_write_timeouts(&self, remaining: Option<Duration>) -> io::Result<()> {
        self.set_timeouts(remaining)
    }
}

impl Deadlined for TcpStream {
    fn set_timeouts(&self, remaining: Option<Duration>) -> io::Result<()> {
        self.set_read_timeout(remaining)?;
        self.set_write_timeout(remaining)
    }

    fn set_read_timeouts(&self, remaining: Option<Duration>) -> io::Result<()> {
        self.set_read_timeout(remaining)
    }

    fn set_write_timeouts(&self, remaining: Option<Duration>) -> io::Result<()> {
        self.set_write_timeout(remaining)
    }
}

/// Which way a deadline applies.
#[derive(Debug, Clone, Copy)]
enum Way {
    Read,
    Write,
}

/// What can go wrong reading or writing a line.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// The deadline passed before the whole line arrived / was sent.
    #[error(
        "timed out after {after:?} waiting for the peer; check the peer is running and reachable, or raise the timeout"
    )]
    Timeout {
        /// How long this call waited.
        after: Duration,
    },
    /// More than `max` bytes arrived without a newline.
    #[error(
        "the peer sent more than {max} bytes without a newline; every message must be one line of at most {max} bytes"
    )]
    LineTooLong {
        /// The cap in bytes.
        max: usize,
    },
    /// The peer closed the connection between lines.
    #[error("the peer closed the connection")]
    Closed,
    /// The peer closed the connection in the middle of a line.
    #[error("the peer closed the connection in the middle of a line (no final newline)")]
    Truncated,
    /// Any other I/O error.
    #[error("connection I/O error: {0}")]
    Io(#[from] io::Error),
}

impl FrameError {
    /// The protocol error code that describes this failure.
    pub fn code(&self) -> ErrorCode {
        match self {
            FrameError::Timeout { .. } => ErrorCode::Timeout,
            FrameError::LineTooLong { .. } => ErrorCode::LineTooLong,
            FrameError::Closed | FrameError::Truncated | FrameError::Io(_) => ErrorCode::Internal,
        }
    }

    /// The `error` message to send the peer (worth sending unless [`peer_gone`](Self::peer_gone):
    /// after `Closed`/`Truncated` there is nobody to send it to).
    pub fn to_error_msg(&self) -> ErrorMsg {
        ErrorMsg::new(self.code(), self.to_string())
    }

    /// The peer closed or reset the connection (or it broke): nobody is left to answer.
    pub fn peer_gone(&self) -> bool {
        matches!(
            self,
            FrameError::Closed | FrameError::Truncated | FrameError::Io(_)
        )
    }
}

/// A line-oriented connection over a [`Deadlined`] stream.
#[derive(Debug)]
pub struct LineConn<S> {
    inner: BufReader<S>,
    max_line: usize,
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

impl LineConn<TcpStream> {
    /// Whether the peer sent something (a line, or it closed or reset the connection) that
    /// waits to be read, looked at without blocking and without consuming it: what a side
    /// waiting on something else (a completion) checks now and then.
    pub fn peer_spoke(&self) -> bool {
        if self.has_buffered() {
            // A line that arrived together with an earlier one is already in our buffer.
            return true;
        }
        let sock = self.get_ref();
        if sock.set_nonblocking(true).is_err() {
            return false;
        }
        let mut byte = [0u8; 1];
        let peeked = sock.peek(&mut byte);
        let _ = sock.set_nonblocking(false);
        // Ok(0): closed; Ok(_): bytes to read; an error other than WouldBlock: reset. The read
        // that follows tells which.
        !matches!(peeked, Err(ref e) if e.kind() == io::ErrorKind::WouldBlock)
    }
}

impl<S: Deadlined> LineConn<S> {
    /// Wraps `stream`; lines longer than `max_line` bytes (without the line ending) are refused.
    pub fn new(stream: S, max_line: usize) -> Self {
        LineConn {
            inner: BufReader::new(stream),
            max_line,
        }
    }

    /// The line cap in bytes.
    pub fn max_line(&self) -> usize {
        self.max_line
    }

    /// The underlying stream.
    pub fn get_ref(&self) -> &S {
        self.inner.get_ref()
    }

    /// The underlying stream, mutably (bytes already buffered for reading stay buffered).
    pub fn get_mut(&mut self) -> &mut S {
        self.inner.get_mut()
    }

    /// Whether bytes already read from the stream wait in the buffer: a caller that peeks at
    /// the socket to see if the peer said something must look here first.
    pub fn has_buffered(&self) -> bool {
        !self.inner.buffer().is_empty()
    }

    /// Sets the stream's timeout `way` to the time left until `deadline`; `Timeout` (counted
    /// from `start`) if it has passed.
    fn apply_deadline(
        &self,
        way: Way,
        start: Instant,
        deadline: Instant,
    ) -> Result<(), FrameError> {
        let now = Instant::now();
        let remaining = deadline.saturating_duration_since(now);
        if remaining.is_zero() {
            return Err(FrameError::Timeout {
                after: now.duration_since(start),
            });
        }
        let stream = self.inner.get_ref();
        match way {
            Way::Read => stream.set_read_timeouts(Some(remaining))?,
            Way::Write => stream.set_write_timeouts(Some(remaining))?,
        }
        Ok(())
    }

    /// Reads the next non-blank line, without its `\n` / `\r\n`.
    ///
    /// The whole line must arrive before `deadline`. After an error other than `Timeout` the
    /// connection is mid-line and should be closed.
    pub fn read_line(&mut self, deadline: Instant) -> Result<Vec<u8>, FrameError> {
        let start = Instant::now();
        // One byte more than the cap is allowed before the newline, for a `\r`.
        let hard_cap = self.max_line.saturating_add(1);
        let mut line = Vec::new();
        loop {
            self.apply_deadline(Way::Read, start, deadline)?;
            let chunk = match self.inner.fill_buf() {
                Ok(c) => c,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if is_timeout(&e) => continue, // `apply_deadline` reports it
                Err(e) => return Err(FrameError::Io(e)),
            };
            if chunk.is_empty() {
                return Err(if line.is_empty() {
                    FrameError::Closed
                } else {
                    FrameError::Truncated
                });
            }
            let (take, done) = match chunk.iter().position(|&b| b == b'\n') {
                Some(i) => (i, true),
                None => (chunk.len(), false),
            };
            if line.len() + take > hard_cap {
                return Err(FrameError::LineTooLong { max: self.max_line });
            }
            line.extend_from_slice(&chunk[..take]);
            self.inner.consume(if done { take + 1 } else { take });
            if done {
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                if line.len() > self.max_line {
                    return Err(FrameError::LineTooLong { max: self.max_line });
                }
                if line.iter().all(u8::is_ascii_whitespace) {
                    line.clear();
                    continue;
                }
                return Ok(line);
            }
        }
    }

    /// Writes `line` (add the `\n` yourself; `to_line()` does) completely before `deadline`.
    pub fn send_line(&mut self, line: &str, deadline: Instant) -> Result<(), FrameError> {
        let start = Instant::now();
        let mut rest = line.as_bytes();
        while !rest.is_empty() {
            self.apply_deadline(Way::Write, start, deadline)?;
            match self.inner.get_mut().write(rest) {
                Ok(0) => {
                    return Err(FrameError::Io(io::Error::new(
                        io::ErrorKind::WriteZero,
                        "the connection accepted no more bytes",
                    )));
                }
                Ok(n) => rest = &rest[n..],
                Err(e) if e.kind() == io::ErrorKind::Interrupted || is_timeout(&e) => {}
                Err(e) => return Err(FrameError::Io(e)),
            }
        }
        // The write timeout the last write set still bounds a flush right after it (a
        // socket's flush does nothing); it is set again only for a flush tried again.
        let mut again = line.is_empty();
        loop {
            if again {
                self.apply_deadline(Way::Write, start, deadline)?;
            }
            match self.inner.get_mut().flush() {
                Ok(()) => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted || is_timeout(&e) => again = true,
                Err(e) => return Err(FrameError::Io(e)),
            }
        }
    }
}

impl<S> LineConn<S> {
    /// Gives the stream back (bytes buffered for reading are lost).
    pub fn into_inner(self) -> S {
        self.inner.into_inner()
    }
}
