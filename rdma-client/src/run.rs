//! The client's one write: connect, handshake, bring the QP to RTS, RDMA Write, wait for the
//! verdict (the session itself is [`crate::session`]'s).

use crate::exit::ClientError;
use crate::output::{Detail, Event, Output};
use crate::session::{Session, SessionOptions, Target};
use color_eyre::eyre::{Result, WrapErr as _, bail};
use rdma_core_rs::{
    Access, CompletionQueue, Init, LocalPort, MemoryRegion, ProtectionDomain, QpCaps, QueuePair,
    RemoteBuffer, Rts, WcStatus,
};
use rdma_proto::{Accept, ClientHandshake, ClientRequest, Notify, Outcome};
use std::path::PathBuf;
use std::time::Instant;

/// How often a write waiting for its completion looks whether the server has answered.
const ANSWER_SLICE: std::time::Duration = std::time::Duration::from_millis(20);

/// Whether `e` is a completion that says our requests went unacknowledged (the transport's
/// retries ran out): the bytes may still have landed, and the server knows.
fn acks_lost(e: &rdma_core_rs::Error) -> bool {
    matches!(
        e,
        rdma_core_rs::Error::Completion {
            status: WcStatus::RetryExcErr,
            ..
        }
    )
}

/// Work request id of our single write.
const WRITE_WR_ID: u64 = 0x5752_4954; // "WRIT"

/// What to write: `--file`, else `--message`.
#[derive(Debug, Clone)]
pub enum PayloadSource {
    File(PathBuf),
    Message(String),
}

/// `rdma-client SERVER`: one write, from the command line.
#[derive(Debug)]
pub struct WriteTask {
    pub server: String,
    pub payload: PayloadSource,
    /// `--notify`; `None`: what the device has (see [`crate::session::notify_for`]).
    pub notify: Option<Notify>,
    pub session: SessionOptions,
    pub device: rdma_app::device::DeviceArgs,
}

/// Runs the whole client flow; `Ok` only when the server verified the bytes.
pub fn run(task: &WriteTask, out: &Output) -> Result<()> {
    let r = task.resolve()?;
    if let Some(why) = &r.notify_why {
        out.emit(&Event::NotifyChosen {
            notify: r.notify,
            why: why.as_str().into(),
        });
    }
    r.write()
        .run(&r.local, &task.session, Some(out))
        .map(|_| ())
}

/// What a write task resolves to before it connects: the payload and token read, the server
/// resolved with the local end that reaches it, and the notify mode.
#[derive(Debug)]
pub struct Resolved {
    pub payload: Vec<u8>,
    pub token: Option<String>,
    pub target: Target,
    pub local: LocalPort,
    /// Why the local end is what it is, when the route chose it.
    pub chosen: Option<String>,
    pub notify: Notify,
    /// Why the notify mode is what it is, when the device chose it (see
    /// [`crate::session::notify_for`]).
    pub notify_why: Option<String>,
}

impl WriteTask {
    /// Reads the payload and the token, resolves the server and opens the local end that
    /// reaches it, and settles the notify mode.
    ///
    /// # Errors
    /// An unreadable or empty payload or token file, a server that does not resolve, no local
    /// end for it, `--notify imm` where the device has no write-with-immediate.
    pub fn resolve(&self) -> Result<Resolved> {
        let payload = self.payload.load()?;
        let token = self.session.token.load()?;
        let (target, local, chosen) = Target::with_local_end(&self.server, &self.device)?;
        let (notify, notify_why) = crate::session::notify_for(self.notify, &local)?;
        Ok(Resolved {
            payload,
            token,
            target,
            local,
            chosen,
            notify,
            notify_why,
        })
    }
}

impl Resolved {
    /// The write it resolved to.
    #[must_use]
    pub fn write(&self) -> Write<'_> {
        Write {
            target: self.target.clone(),
            payload: &self.payload,
            notify: self.notify,
            token: self.token.clone(),
            chosen: self.chosen.as_deref(),
            rounds: false,
        }
    }
}

/// What one verified write took.
#[derive(Debug)]
pub struct Delivered {
    /// The server's verdict (verified: the bytes and their CRC32C checked).
    pub outcome: Outcome,
    /// From posting the RDMA Write to its completion on our side.
    pub write_micros: u128,
}

/// One write of `payload` to `target`.
#[derive(Debug)]
pub struct Write<'a> {
    pub target: Target,
    pub payload: &'a [u8],
    pub notify: Notify,
    pub token: Option<String>,
    /// Why the local end is what it is, when the route chose it (for the `connected` event).
    pub chosen: Option<&'a str>,
    /// Ask the server to keep the session for more writes ([`Connected::again`]), where it
    /// offers rounds.
    pub rounds: bool,
}

impl<'a> Write<'a> {
    /// Connect, handshake, QP to RTS, RDMA Write, the server's verdict: `Ok` only when the
    /// server verified the bytes. Each step is an event on `out`; with `None` (the fabric
    /// check, which prints one event per pair) none is. The steps are [`connect`](Self::connect),
    /// [`Connected::post`], [`Connected::complete`] and [`Connected::finish`].
    pub fn run(
        self,
        local: &LocalPort,
        opts: &SessionOptions,
        out: Option<&'a Output>,
    ) -> Result<Delivered> {
        let mut w = self.connect(local, opts, out, 0)?;
        let started = w.post(w.remote)?;
        let micros = w.complete(started)?;
        w.finish(micros)
    }

    /// Connects to the server, registers the payload and brings a queue pair to RTS towards the
    /// server's: everything up to the write ([`open`](Self::open), then
    /// [`Opened::connect`]). The completion queue has room for our write's completion and
    /// `more_completions` others (work the caller posts besides).
    pub fn connect(
        self,
        local: &LocalPort,
        opts: &SessionOptions,
        out: Option<&'a Output>,
        more_completions: u32,
    ) -> Result<Connected<'a>> {
        self.open(local, opts, out, more_completions)?
            .connect(local)
    }

    /// Connects to the server (its banner read, `connected` emitted) and registers the payload;
    /// the queue pair is in INIT, no hello sent yet.
    pub fn open(
        self,
        local: &LocalPort,
        opts: &SessionOptions,
        out: Option<&'a Output>,
        more_completions: u32,
    ) -> Result<Opened<'a>> {
        let payload = self.payload;
        let crc = rdma_proto::crc32c(payload);
        let LocalPort { ctx, port, .. } = local;
        let hs = ClientHandshake::new(ClientRequest {
            length: payload.len() as u64,
            notify: self.notify,
            crc32c: crc,
            token: self.token,
        });
        let hs = if self.rounds { hs.asking_rounds() } else { hs };
        let session = Session::open(
            &self.target,
            hs,
            &local.into(),
            self.chosen,
            opts,
            out,
            &Detail::None,
        )?;

        // Verbs objects: the source buffer needs no remote access at all.
        let pd = ctx.alloc_pd()?;
        let mr = pd.register_bytes(payload, Access::NONE)?;
        let cq = ctx.create_cq(2 + more_completions, opts.cq_mode)?;
        let qp = pd.create_rc_qp(&cq, QpCaps::default())?;
        let qp = qp.to_init(port.num, Access::NONE)?;
        let imm = match self.notify {
            Notify::Imm => {
                Some(u32::try_from(payload.len()).wrap_err("payload too large for an immediate")?)
            }
            Notify::Tcp => None,
        };
        Ok(Opened {
            qp,
            resources: Resources {
                write: Written {
                    payload,
                    notify: self.notify,
                    crc,
                    imm,
                    timeout: opts.timeout,
                },
                cq,
                mr,
                pd,
            },
            session,
        })
    }
}

/// What a write writes: the payload and how the server learns of it.
#[derive(Debug, Clone, Copy)]
pub struct Written<'a> {
    pub payload: &'a [u8],
    pub notify: Notify,
    /// CRC32C of the payload.
    pub crc: u32,
    /// The immediate our write carries (`--notify imm`: the payload's length).
    pub imm: Option<u32>,
    /// `--timeout`.
    pub timeout: std::time::Duration,
}

/// A write's session, its banner read, and its verbs objects, the queue pair in INIT: what
/// [`Write::open`] leaves for the hello.
#[derive(Debug)]
pub struct Opened<'a> {
    // Field order is drop order (see [`Connected`]).
    pub qp: QueuePair<Init>,
    pub resources: Resources<'a>,
    pub session: Session<'a>,
}

impl<'a> Opened<'a> {
    /// Our hello, the server's accept, our queue pair (on `local`, the port it was opened on)
    /// to RTS towards its ([`Session::connect`]).
    pub fn connect(self, local: &LocalPort) -> Result<Connected<'a>> {
        let (mut session, qp, resources) = self.into_parts();
        let (qp, accept) = session.connect(local, qp, &Detail::Link(local))?;
        Ok(Connected::new(session, qp, &accept, resources))
    }

    /// The session and the queue pair apart, for a caller that connects them step by step
    /// ([`Session::hello`], [`Session::await_accept`], [`Session::connect_qp`]); then
    /// [`Connected::new`].
    pub fn into_parts(self) -> (Session<'a>, QueuePair<Init>, Resources<'a>) {
        (self.session, self.qp, self.resources)
    }
}

/// A write's verbs objects besides its queue pair (see [`Opened::into_parts`]); field order is
/// drop order: the completion queue, the region, then their protection domain.
#[derive(Debug)]
pub struct Resources<'a> {
    pub write: Written<'a>,
    pub cq: CompletionQueue,
    pub mr: MemoryRegion,
    pub pd: ProtectionDomain,
}

/// A write's session with its queue pair in RTS towards the server's, and the server's buffer
/// known: what [`Write::connect`] leaves for the write itself.
#[derive(Debug)]
pub struct Connected<'a> {
    /// The server's buffer, as its accept named it.
    pub remote: RemoteBuffer,
    // Field order is drop order: the queue pair before its completion queue and region, and
    // the connection to the server last.
    pub qp: QueuePair<Rts>,
    pub resources: Resources<'a>,
    pub session: Session<'a>,
}

impl<'a> Connected<'a> {
    /// The connected session and its resources, put back together (see [`Opened::into_parts`]).
    #[must_use]
    pub fn new(
        session: Session<'a>,
        qp: QueuePair<Rts>,
        accept: &Accept,
        resources: Resources<'a>,
    ) -> Connected<'a> {
        Connected {
            remote: RemoteBuffer {
                addr: accept.addr,
                rkey: accept.rkey,
                len: accept.buf_len,
            },
            qp,
            resources,
            session,
        }
    }

    /// Posts the RDMA Write of the whole payload to `remote` (normally [`Connected::remote`]);
    /// returns when it was posted.
    pub fn post(&self, remote: RemoteBuffer) -> Result<Instant> {
        let started = Instant::now();
        self.qp.post_write(
            &self.resources.mr,
            0..self.resources.write.payload.len(),
            remote,
            self.resources.write.imm,
            WRITE_WR_ID,
        )?;
        Ok(started)
    }

    /// Waits for our write's completion and emits `written`; returns how long it took from
    /// `started`, in microseconds.
    ///
    /// With immediate data the server may answer first: it hears of the write from its own
    /// receive completion, destroys its queue pair before it reads the buffer, and sends its
    /// verdict. Where the path lost the server's ACK, our completion then never comes, or comes
    /// as a retry-exceeded error (the retransmission finds no queue pair), though the bytes
    /// landed. So the wait ends as soon as the server has spoken, and a retry-exceeded
    /// completion waits for the server's answer within the deadline: its verdict, which
    /// [`finish`](Self::finish) reads, says what landed.
    pub fn complete(&mut self, started: Instant) -> Result<u128> {
        let w = self.resources.write;
        // One wait of `--timeout` in all, polled in slices where the server may answer first:
        // its timeout quotes the whole wait, not the last slice.
        let mut wait = rdma_core_rs::Wait::new(w.timeout);
        // Only with immediate data may the server answer first: without it, one slice.
        let slice = if w.imm.is_some() {
            ANSWER_SLICE
        } else {
            w.timeout
        };
        let answered_first = loop {
            match self.resources.cq.poll_slice(&mut wait, slice) {
                Ok(Some(c)) if c.wr_id == WRITE_WR_ID => break false,
                Ok(Some(c)) => bail!("unexpected completion for work request {:#x}", c.wr_id),
                Ok(None) => {
                    if w.imm.is_some() && self.session.server_spoke() {
                        break true;
                    }
                }
                Err(e)
                    if w.imm.is_some() && acks_lost(&e) && self.server_answers(wait.deadline()) =>
                {
                    break true;
                }
                Err(e) => return Err(e).wrap_err("waiting for the RDMA Write to complete"),
            }
        };
        let micros = started.elapsed().as_micros();
        self.session.emit_with(
            &Event::Written {
                length: w.payload.len() as u64,
                notify: w.notify,
                crc32c: w.crc,
                micros: u64::try_from(micros).unwrap_or(u64::MAX),
            },
            if answered_first {
                &Detail::AnsweredFirst
            } else {
                &Detail::None
            },
        );
        Ok(micros)
    }

    /// Whether the server says something before `deadline` (looked at every [`ANSWER_SLICE`]).
    fn server_answers(&self, deadline: Instant) -> bool {
        loop {
            if self.session.server_spoke() {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            std::thread::sleep(ANSWER_SLICE.min(deadline - now));
        }
    }

    /// Tells the server the write is done (where the handshake says so), takes its verdict and
    /// emits it: `Ok` only when it verified the bytes.
    pub fn finish(mut self, write_micros: u128) -> Result<Delivered> {
        self.verdict(write_micros)
    }

    /// [`finish`](Self::finish), keeping the session for another round ([`again`](Self::again)).
    pub fn verdict(&mut self, write_micros: u128) -> Result<Delivered> {
        self.session.written()?;
        let outcome = self.session.result()?;
        self.emit_verified(&outcome);
        Ok(Delivered {
            outcome,
            write_micros,
        })
    }

    /// One more round of the same payload on the same queue pairs, after a verified round of a
    /// session whose server granted rounds ([`rdma_proto::rounds`]): asks for it, and points
    /// [`remote`](Self::remote) at the fresh buffer the server answers with. Each wait from now
    /// on gets `timeout`. The write, its completion and the verdict follow as in the first
    /// round ([`post`](Self::post), [`complete`](Self::complete), [`verdict`](Self::verdict)).
    pub fn again(&mut self, timeout: std::time::Duration) -> Result<()> {
        self.session.set_timeout(timeout);
        self.resources.write.timeout = timeout;
        let w = self.resources.write;
        let region = self
            .session
            .next_round(w.payload.len() as u64, w.crc, None)?;
        self.remote = RemoteBuffer {
            addr: region.addr,
            rkey: region.rkey,
            len: region.buf_len,
        };
        Ok(())
    }

    /// Emits `outcome` as the `verified` event.
    pub fn emit_verified(&self, outcome: &Outcome) {
        self.session.emit_verified(outcome, &Detail::None);
    }
}

impl PayloadSource {
    /// The bytes to write; an unreadable file or an empty payload is the user's mistake.
    pub fn load(&self) -> Result<Vec<u8>> {
        let payload = match self {
            PayloadSource::File(path) => {
                std::fs::read(path).map_err(|source| ClientError::ReadFile {
                    path: path.display().to_string(),
                    source,
                })?
            }
            PayloadSource::Message(m) => m.as_bytes().to_vec(),
        };
        if payload.is_empty() {
            return Err(ClientError::EmptyPayload.into());
        }
        Ok(payload)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_payload_is_refused() {
        let err = PayloadSource::Message(String::new()).load().unwrap_err();
        assert!(err.to_string().contains("at least one byte"));
        let err = PayloadSource::File("/nonexistent/x".into())
            .load()
            .unwrap_err();
        assert!(err.to_string().contains("cannot read"), "{err}");
    }
}
