//! What every session shares ([`SessionCtx`]) and how one ends without a verdict ([`Failure`]).

use crate::budget::PinBudget;
use crate::i18n::Lang;
use crate::output::Output;
use rdma_core_rs::{CqMode, LocalPort};
use rdma_proto::framing::FrameError;
use rdma_proto::{ErrorCode, GidBinding, ProtoError, ServerPolicy};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::Duration;

#[derive(Debug)]
pub struct SessionCtx {
    /// The device, its port and GID, opened once.
    pub local: LocalPort,
    /// What a hello may ask for (`buffer_size`: each session's buffer, `--buffer-size`) and what the banner says.
    pub policy: ServerPolicy,
    /// The deadline of each phase of a session.
    pub timeout: Duration,
    /// How the session's completion queue waits.
    pub cq_mode: CqMode,
    /// What a write session grants its client (remote write, in `rdma-server`).
    pub grant: crate::grant::Grant,
    pub out: Output,
    pub lang: Lang,
    /// Set when the server is stopping: sessions abort with `shutting_down`.
    pub stopping: AtomicBool,
    /// Writes verified so far.
    pub verified: AtomicU64,
    /// How long a bench session may hold its buffer (`--bench-max-time`).
    pub bench_max_time: Duration,
    /// What the live sessions may pin together (`--max-pinned`).
    pub pinned: PinBudget,
    /// The device flags: without `--gid-index`, each session uses the device, port and GID
    /// that carry the address its client came in on (`DeviceArgs::open_for`).
    pub device: rdma_app::device::DeviceArgs,
    /// On RoCE, this port's own GIDs: every hello's GID is bound to its TCP peer (a loopback
    /// peer to one of these). `None` on InfiniBand, where nothing can be bound.
    pub bind_gids: Option<Vec<rdma_proto::Gid>>,
}

impl SessionCtx {
    /// The local end of a session whose client came in on `local`: the port opened at start
    /// where the flags fix it or the address is loopback, else the one that carries `local`
    /// (and why).
    pub(crate) fn local_for(&self, local: IpAddr) -> Result<(LocalPort, Option<String>), Failure> {
        if !self.device.chooses_by(local) {
            return Ok((self.local.clone(), None));
        }
        self.device.open_for(local).map_err(|e| {
            Failure::new(
                ErrorCode::RdmaSetup,
                format!(
                    "the server has no RDMA port for the address this client reached it at: {e}"
                ),
            )
        })
    }

    /// What the hello of a connection from `peer` must announce (see [`GidBinding`]).
    pub fn binding(&self, peer: SocketAddr) -> GidBinding {
        match &self.bind_gids {
            Some(local) => GidBinding::Peer {
                peer: peer.ip(),
                local: local.clone(),
            },
            None => GidBinding::Unbound,
        }
    }
}

/// Why a session ended without a verdict.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) code: ErrorCode,
    pub(crate) message: String,
    /// Whether an error line should (still) be sent to the client.
    pub(crate) tell_peer: bool,
    /// The client went away (closed or reset the connection): logged as `client_gone`, which
    /// is the client's doing, not a server fault.
    pub(crate) gone: bool,
}

impl Failure {
    pub(crate) fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            tell_peer: true,
            gone: false,
        }
    }

    /// What went wrong, as logged and told.
    #[cfg(test)]
    pub(crate) fn message(&self) -> &str {
        &self.message
    }

    /// The code in the server's own log line.
    pub(crate) fn log_code(&self) -> &'static str {
        if self.gone {
            "client_gone"
        } else {
            self.code.as_str()
        }
    }

    pub(crate) fn silent(mut self) -> Self {
        self.tell_peer = false;
        self
    }
}

/// A failed read or send on the connection. Whatever could still be said to the client was
/// said by then (see [`read_failed`]), so this is only logged.
impl From<FrameError> for Failure {
    fn from(e: FrameError) -> Self {
        Failure {
            code: e.code(),
            message: format!("connection: {e}"),
            tell_peer: false,
            gone: e.peer_gone(),
        }
    }
}

impl From<ProtoError> for Failure {
    fn from(e: ProtoError) -> Self {
        let tell_peer = !matches!(e, ProtoError::Remote(_));
        Failure {
            code: e.code(),
            message: e.to_string(),
            tell_peer,
            gone: false,
        }
    }
}
