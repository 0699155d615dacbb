//! The client's one write: connect, handshake, bring the QP to RTS, RDMA Write, wait for the
//! verdict (the session itself is [`crate::session`]'s).

use crate::exit::ClientError;
use crate::fault::{self, Stage};
use crate::output::{Event, Output};
use crate::session::{Session, SessionOptions, Target};
use color_eyre::eyre::{Result, WrapErr as _, bail};
use rdma_core_rs::{Access, LinkLayer, LocalPort, QpCaps, RemoteBuffer};
use rdma_proto::{ClientHandshake, ClientRequest, Notify, Outcome};
use std::path::PathBuf;
use std::time::Instant;

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
    let payload = task.payload.load()?;
    let token = task.session.token.load()?;
    let (target, local, chosen) = Target::with_local_end(&task.server, &task.device)?;
    let (notify, why) = crate::session::notify_for(task.notify, &local)?;
    if let Some(why) = why {
        out.emit(
            &Event::NotifyChosen {
                notify,
                why: why.as_str().into(),
            },
            || why.clone(),
        );
    }
    let w = Write {
        target: &target,
        payload: &payload,
        notify,
        token,
        chosen: chosen.as_deref(),
    };
    w.run(&local, &task.session, Some(out)).map(|_| ())
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
    pub target: &'a Target,
    pub payload: &'a [u8],
    pub notify: Notify,
    pub token: Option<String>,
    /// Why the local end is what it is, when the route chose it (for the `connected` event).
    pub chosen: Option<&'a str>,
}

impl Write<'_> {
    /// Connect, handshake, QP to RTS, RDMA Write, the server's verdict: `Ok` only when the
    /// server verified the bytes. Each step is an event on `out`; with `None` (the fabric
    /// check, which prints one event per pair) none is.
    pub fn run(
        self,
        local: &LocalPort,
        opts: &SessionOptions,
        out: Option<&Output>,
    ) -> Result<Delivered> {
        let payload = self.payload;
        let crc = rdma_proto::crc32c(payload);
        let timeout = opts.timeout;
        let LocalPort { ctx, port, gid, .. } = local;
        let hs = ClientHandshake::new(ClientRequest {
            length: payload.len() as u64,
            notify: self.notify,
            crc32c: crc,
            token: self.token,
        });
        let server = &self.target.name;
        let mut session =
            Session::open(self.target, hs, local, self.chosen, opts, out, |banner| {
                format!(
                    "connected to {} ({} {}); local {} port {} gid[{}] {}",
                    server,
                    rdma_proto::printable(&banner.program),
                    rdma_proto::printable(&banner.program_version),
                    ctx.name(),
                    port.num,
                    gid.index,
                    gid.gid
                )
            })?;

        // Verbs objects: the source buffer needs no remote access at all.
        let pd = ctx.alloc_pd()?;
        let mr = pd.register_bytes(payload, Access::NONE)?;
        // Room for our write's completion and those of the test hooks.
        let cq = ctx.create_cq(2 + fault::EXTRA_COMPLETIONS, opts.cq_mode)?;
        let qp = pd.create_rc_qp(&cq, QpCaps::default())?;
        let qp = qp.to_init(port.num, Access::NONE)?;
        let (qp, accept) = session.connect(qp, |qp, accept| {
            format!(
                "QP {:#08x} ready (RTS) -> server QP {:#08x}, path MTU {}, remote buffer {:#x} ({} bytes, rkey {:#x}){}",
                qp.qpn(),
                accept.endpoint.qpn,
                qp.path_mtu().bytes(),
                accept.addr,
                accept.buf_len,
                accept.rkey,
                match (accept.cm.is_some(), ctx.transport(), port.link_layer) {
                    (true, t, _) => format!(", {t} via RDMA CM"),
                    (false, _, LinkLayer::Ethernet) => ", RoCE".to_owned(),
                    (false, _, _) => String::new(),
                }
            )
        })?;

        let remote = opts.faults.aim(RemoteBuffer {
            addr: accept.addr,
            rkey: accept.rkey,
            len: accept.buf_len,
        });
        let imm = match self.notify {
            Notify::Imm => {
                Some(u32::try_from(payload.len()).wrap_err("payload too large for an immediate")?)
            }
            Notify::Tcp => None,
        };
        let started = Instant::now();
        qp.post_write(&mr, 0..payload.len(), remote, imm, WRITE_WR_ID)?;
        let rewrites = opts.faults.rewrites(&pd, &qp, payload.len(), remote)?;
        let completion = cq
            .poll(Instant::now() + timeout)
            .wrap_err("waiting for the RDMA Write to complete")?;
        if completion.wr_id != WRITE_WR_ID {
            bail!(
                "unexpected completion for work request {:#x}",
                completion.wr_id
            );
        }
        let micros = started.elapsed().as_micros();
        session.emit(
            &Event::Written {
                length: payload.len() as u64,
                notify: self.notify,
                crc32c: crc,
                micros: u64::try_from(micros).unwrap_or(u64::MAX),
            },
            || {
                format!(
                    "wrote {} bytes with RDMA Write{} in {micros} us (crc32c {crc:#010x})",
                    payload.len(),
                    if imm.is_some() { " with immediate" } else { "" }
                )
            },
        );
        opts.faults.kill_at(Stage::Write);

        session.written()?;
        let judged = session.result();
        let outcome = match (rewrites, session.verdict()) {
            (Some(rewrites), Some(verdict)) => {
                rewrites.check(&qp, &cq, timeout, payload, verdict)?;
                verdict.clone()
            }
            _ => judged?,
        };
        session.emit_verified(&outcome, || {
            format!(
                "server verified {} bytes (crc32c {:#010x}): {:?}{}",
                outcome.length,
                outcome.crc32c,
                outcome.text,
                if outcome.truncated {
                    " (truncated)"
                } else {
                    ""
                }
            )
        });
        Ok(Delivered {
            outcome,
            write_micros: micros,
        })
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
