//! Connecting a session's queue pair to its client and sending the accept: by the hello's
//! endpoint, or through RDMA CM ([`super::cm`]).

use rdma_core_rs::{ExposedRegion, Init, LocalPort, QueuePair, Rts};
use rdma_proto::framing::LineConn;
use rdma_proto::{Hello, ServerHandshake};
use std::net::TcpStream;
use std::time::Instant;

use super::ctx::SessionCtx;
use crate::failure::Failure;
use crate::verbs::Exposure;

/// [`connect_and_accept`] for a write session's [`Exposure`]: its queue pair connected to the
/// client's (by the hello's endpoint, or through RDMA CM where the fabric has it), the accept
/// sent.
pub(crate) fn accept_exposed(
    s: &SessionCtx,
    conn: &mut LineConn<TcpStream>,
    hs: &mut ServerHandshake,
    hello: &Hello,
    x: &mut dyn Exposure,
    id: u64,
    rdma: impl Fn(rdma_core_rs::Error) -> Failure,
) -> Result<(), Failure> {
    let psn = rdma_core_rs::random_psn().map_err(&rdma)?;
    if hello.cm {
        let mut how = |local: &LocalPort, qp, mr: &ExposedRegion| {
            super::cm::accept(s, local, conn, hs, qp, mr, psn, id, &rdma)
        };
        return x.connect_cm(&mut how).unwrap_or_else(|| {
            Err(Failure::new(
                rdma_proto::ErrorCode::RdmaSetup,
                "this server's fabric has no RDMA CM",
            ))
        });
    }
    let ours = x.connect(&hello.endpoint, psn).map_err(&rdma)?;
    let r = x.region().ok_or_else(|| {
        Failure::new(
            rdma_proto::ErrorCode::Internal,
            "the session's buffer is revoked already",
        )
    })?;
    let accept = hs.accept(ours, r.addr, r.rkey, r.len)?;
    conn.send_line(&accept.to_line(), Instant::now() + s.timeout)?;
    Ok(())
}

/// Connects `qp` to the client's endpoint from its `hello` (with a fresh send PSN) and sends
/// the accept: our endpoint and `mr`, the buffer the client may write. `rdma` words a failed
/// verb.
#[allow(clippy::too_many_arguments)]
pub(crate) fn connect_and_accept(
    s: &SessionCtx,
    local: &LocalPort,
    conn: &mut LineConn<TcpStream>,
    hs: &mut ServerHandshake,
    hello: &Hello,
    qp: QueuePair<Init>,
    mr: &ExposedRegion,
    id: u64,
    rdma: impl Fn(rdma_core_rs::Error) -> Failure,
) -> Result<QueuePair<Rts>, Failure> {
    let psn = rdma_core_rs::random_psn().map_err(&rdma)?;
    if hello.cm {
        return super::cm::accept(s, local, conn, hs, qp, mr, psn, id, rdma);
    }
    let client = rdma_app::verbs::from_wire(&hello.endpoint);
    let qp = qp.connect_to(local, &client, psn).map_err(&rdma)?;
    let ours = rdma_app::verbs::to_wire(local.endpoint(&qp, psn));
    let accept = hs.accept(ours, mr.addr(), mr.rkey(), mr.len() as u64)?;
    conn.send_line(&accept.to_line(), Instant::now() + s.timeout)?;
    Ok(qp)
}
