//! RDMA CM, both ends in one process: a listener on ADDR takes the one connection request that
//! carries our private data, a client connects its queue pair to it through RDMA CM, and RDMA-
//! Writes (with immediate) into the listener's buffer; the listener checks the bytes after
//! revoking the client's access. No queue pair numbers, PSNs or GIDs are exchanged by hand:
//! the CM resolves them.
//!
//! Needs a real RDMA device whose netdev holds ADDR, and RDMA CM (the `rdma_ucm` module), e.g.
//! in a guest: `modprobe rdma_ucm; rdma link add rxe0 type rxe netdev eth0` with 10.0.0.1 on
//! eth0. Usage: `cm_connect ADDR`. Exits 0 only if the bytes landed and were checked.
//! `cargo xtask vm-smoke --rdma-cm --rdma-write --cm-bad-nonce` (in `cargo xtask test`) runs it
//! in a guest.

use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use rdma_core_rs::cm::{Gate, Listener, Request, Verdict};
use rdma_core_rs::{Access, Gid, LocalPort, QpCaps, RemoteBuffer, WcOpcode, WriteFlags};

type R<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

const MESSAGE: &[u8] = b"Hello RDMA Write!";
/// What the client's connection request carries, and the only thing the listener takes.
const PRIVATE: &[u8] = b"cm_connect example";

/// Takes the request that carries [`PRIVATE`]; any path (both ends are this host).
struct Ours;

impl Gate for Ours {
    fn request(&mut self, req: &Request<'_>) -> Verdict {
        if req.private_data.starts_with(PRIVATE) {
            Verdict::Take
        } else {
            Verdict::Reject
        }
    }

    fn path(&mut self, _dgid: Gid) -> Result<(), String> {
        Ok(())
    }
}

fn run(addr: IpAddr) -> R<()> {
    let deadline = Instant::now() + Duration::from_secs(20);
    let (local, why) = LocalPort::open_for(addr, None)?;
    println!("cm_connect: {why}");
    let pd = local.ctx.alloc_pd()?;

    // The listener's side: a buffer the client may write, a queue pair waiting for it.
    let buffer = pd.register_exposed(64, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let server_cq = local.ctx.create_cq(4, rdma_core_rs::CqMode::Poll)?;
    let server = pd
        .create_rc_qp(&server_cq, QpCaps::default())?
        .to_init(local.port.num, Access::REMOTE_WRITE)?;
    server.post_recv(1)?;
    let listener = Listener::bind(addr)?;
    let to = SocketAddr::new(addr, listener.port());
    let remote = RemoteBuffer {
        addr: buffer.addr(),
        rkey: buffer.rkey(),
        len: buffer.len() as u64,
    };

    // The client's side, on a thread of its own: connect through RDMA CM, write, wait.
    let client = std::thread::scope(|scope| -> R<()> {
        let writer = scope.spawn(|| -> R<()> {
            let cq = local.ctx.create_cq(4, rdma_core_rs::CqMode::Poll)?;
            let mut src = pd.register(MESSAGE.len(), Access::NONE)?;
            src.as_mut_slice().copy_from_slice(MESSAGE);
            let qp = pd
                .create_rc_qp(&cq, QpCaps::default())?
                .to_init(local.port.num, Access::NONE)?
                .connect_cm(&local, Some(addr), to, PRIVATE, deadline)?;
            let imm = u32::try_from(MESSAGE.len())?;
            let flags = WriteFlags {
                imm: Some(imm),
                signaled: true,
                inline: false,
            };
            qp.post_write_with(&src, 0..MESSAGE.len(), remote, flags, 7)?;
            let done = cq.poll(deadline)?;
            println!(
                "cm_connect: client's write completed (wr_id {})",
                done.wr_id
            );
            Ok(())
        });
        let server = listener.accept(server, &local, &mut Ours, deadline, &|| false)?;
        println!(
            "cm_connect: connected through RDMA CM, QP {:#x}",
            server.qpn()
        );
        let c = server_cq.poll(deadline)?;
        if c.opcode != WcOpcode::RecvRdmaWithImm || c.imm != u32::try_from(MESSAGE.len()).ok() {
            return Err(format!("unexpected completion {c:?}").into());
        }
        let written = writer.join().map_err(|_| "the client's thread panicked")?;
        // Take the client's access away before reading a byte.
        drop(server);
        let bytes = buffer.deregister()?;
        if &bytes[..MESSAGE.len()] != MESSAGE {
            return Err(format!("the buffer holds {:?}", &bytes[..MESSAGE.len()]).into());
        }
        written
    });
    client?;
    println!(
        "cm_connect: ok: {:?} landed through a queue pair RDMA CM connected",
        String::from_utf8_lossy(MESSAGE)
    );
    Ok(())
}

fn main() -> ExitCode {
    let Some(addr) = std::env::args().nth(1) else {
        eprintln!("usage: cm_connect ADDR   (an IP address of an RDMA device's netdev)");
        return ExitCode::from(2);
    };
    let addr: IpAddr = match addr.parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!(
                "cm_connect: {addr:?} is not an IP address ({e}); give one of an RDMA netdev"
            );
            return ExitCode::from(2);
        }
    };
    match run(addr) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cm_connect: FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}
