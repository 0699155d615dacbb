//! Device self-test: two RC queue pairs on ONE device (rxe loops back to its own GID) play
//! server and client, and the client RDMA-Writes (with immediate) into the server's buffer.
//!
//! Needs a real RDMA device (e.g. in a guest: `rdma link add rxe0 type rxe netdev eth0` with an
//! IP on eth0). Exits 0 only if every check passed:
//!
//! 1. write-with-imm in poll mode: sender completion, receiver completion with the imm in host
//!    order and the write's length, bytes identical in the server buffer;
//! 2. the same in event mode (completion channel);
//!    then a 64 KiB plain write at offsets, checked byte for byte;
//! 3. a wrong rkey gives a `REM_ACCESS_ERR` completion error, and the QP goes to the error state;
//! 4. a write-with-imm without a posted receive and `rnr_retry = 0` gives `RNR_RETRY_EXC_ERR`;
//! 5. polling an idle CQ times out at the deadline;
//! 6. after `ExposedRegion::deregister` the old rkey is dead: a write with it gets
//!    `REM_ACCESS_ERR`, and the buffer handed back holds only what landed before;
//! 7. `LocalPort::open_for` picks this port from the address in its GID, across all devices;
//! 8. `Context::completion_clock` answers (through the provider's `query_device_ex`), and a
//!    software device (Soft-RoCE `rxe*`, Soft-iWARP `siw*`) has no completion clock;
//! 9. extended CQs (`Context::create_cq_ex`) carry check 1's write-with-imm in both modes, with
//!    no timestamps, report check 3's wrong rkey as `REM_ACCESS_ERR` and time out as check 5;
//!    asked for timestamps, a device without a completion clock refuses with
//!    `EOPNOTSUPP`, and one with a clock stamps every completion (within its timestamp mask).
//!
//! Usage: `loopback [DEVICE] [PORT] [GID_INDEX]`. `cargo xtask e2e --selftest` runs it on the
//! server node (and `cargo xtask test` does, in a guest).

use std::process::ExitCode;
use std::time::{Duration, Instant};

use rdma_core_rs::{
    Access, Completion, CompletionClock, CompletionQueue, CqMode, Error, ExposedRegion, LocalPort,
    ProtectionDomain, QpCaps, QpState, QueuePair, RemoteBuffer, RemoteQp, RtrParams, Rts,
    RtsParams, VerbOp, WcOpcode, WcStatus, describe_gid_table, random_psn,
};

type R<T> = Result<T, Box<dyn std::error::Error>>;

struct Pair {
    server: QueuePair<Rts>,
    client: QueuePair<Rts>,
    server_cq: CompletionQueue,
    client_cq: CompletionQueue,
    server_mr: ExposedRegion,
    pd: ProtectionDomain,
}

/// Which completion queues a pair uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cqs {
    /// `Context::create_cq`.
    Plain,
    /// `Context::create_cq_ex`, stamping completions or not.
    Extended { timestamps: bool },
}

impl Cqs {
    fn create(self, env: &LocalPort, mode: CqMode) -> Result<CompletionQueue, Error> {
        match self {
            Cqs::Plain => env.ctx.create_cq(16, mode),
            Cqs::Extended { timestamps } => env.ctx.create_cq_ex(16, mode, timestamps),
        }
    }
}

/// The server side comes up through `connect_to` (as the binaries do); the client side step by
/// step with its own RTS attributes.
fn connect(env: &LocalPort, mode: CqMode, client_rts: RtsParams, recvs: u64) -> R<Pair> {
    connect_with(env, mode, Cqs::Plain, client_rts, recvs)
}

fn connect_with(
    env: &LocalPort,
    mode: CqMode,
    cqs: Cqs,
    client_rts: RtsParams,
    recvs: u64,
) -> R<Pair> {
    let pd = env.ctx.alloc_pd()?;
    let server_cq = cqs.create(env, mode)?;
    let client_cq = cqs.create(env, mode)?;
    let server_mr = pd.register_exposed(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let s = pd
        .create_rc_qp(&server_cq, QpCaps::default())?
        .to_init(env.port.num, Access::REMOTE_WRITE)?;
    for i in 0..recvs {
        s.post_recv(100 + i)?;
    }
    let c = pd
        .create_rc_qp(&client_cq, QpCaps::default())?
        .to_init(env.port.num, Access::NONE)?;
    let (s_psn, c_psn) = (random_psn()?, client_rts.sq_psn);
    let s_end = env.endpoint(&s, s_psn);
    let s = s.connect_to(env, &env.endpoint(&c, c_psn), s_psn)?;
    if s.path_mtu() != env.port.active_mtu {
        return Err(format!("path MTU {} on one port", s.path_mtu()).into());
    }
    let remote = RemoteQp {
        qpn: s_end.qpn,
        psn: s_end.psn,
        gid: s_end.gid,
        lid: s_end.lid,
    };
    let rtr = RtrParams::new(
        remote,
        env.port.active_mtu,
        env.port.num,
        env.gid.index,
        env.port.link_layer,
    );
    let c = c.to_rtr(&rtr)?.to_rts(&client_rts)?;
    if s.query_state()? != QpState::Rts || c.query_state()? != QpState::Rts {
        return Err("QPs are not in RTS after the transitions".into());
    }
    Ok(Pair {
        server: s,
        client: c,
        server_cq,
        client_cq,
        server_mr,
        pd,
    })
}

fn remote_of(mr: &ExposedRegion) -> RemoteBuffer {
    RemoteBuffer {
        addr: mr.addr(),
        rkey: mr.rkey(),
        len: mr.len() as u64,
    }
}

/// 1, 2 and 9: a write-with-imm, both completions, and the bytes in the server's buffer.
/// Returns the two completions (sender's, receiver's).
fn write_roundtrip(env: &LocalPort, mode: CqMode, cqs: Cqs) -> R<(Completion, Completion)> {
    let p = connect_with(env, mode, cqs, RtsParams::new(random_psn()?), 1)?;
    let msg = b"Hello RDMA Write!";
    let src = p.pd.register_bytes(msg, Access::NONE)?;
    let deadline = Instant::now() + Duration::from_secs(10);
    p.client.post_write(
        &src,
        0..msg.len(),
        remote_of(&p.server_mr),
        Some(0xC0FF_EE01),
        7,
    )?;
    let sent = p.client_cq.poll(deadline)?;
    if sent.wr_id != 7 || sent.opcode != WcOpcode::RdmaWrite {
        return Err(format!("unexpected sender completion {sent:?}").into());
    }
    let got = p.server_cq.poll(deadline)?;
    if got.wr_id != 100 || got.opcode != WcOpcode::RecvRdmaWithImm || got.imm != Some(0xC0FF_EE01) {
        return Err(format!("unexpected receiver completion {got:?}").into());
    }
    if got.byte_len as usize != msg.len() {
        return Err(format!("receiver byte_len {} != {}", got.byte_len, msg.len()).into());
    }
    // The peer's QP goes first, then the registration: only then may the CPU read.
    drop(p.server);
    let buf = p.server_mr.deregister()?;
    let landed = &buf[..msg.len()];
    if landed != msg || buf[msg.len()..].iter().any(|b| *b != 0) {
        return Err(format!("server buffer holds {:?}", String::from_utf8_lossy(landed)).into());
    }
    if sent.imm.is_some() {
        return Err(format!("the sender's completion reports an immediate: {sent:?}").into());
    }
    println!("ok: {mode:?} write-with-imm through {cqs:?} CQs: {sent:?} / {got:?}");
    Ok((sent, got))
}

/// A multi-packet write (64 KiB at MTU <= 4096) into the middle of a larger buffer, from an
/// offset in the source; the server buffer must be exactly the pattern there and zero elsewhere.
fn big_write(env: &LocalPort) -> R<()> {
    let p = connect(env, CqMode::Event, RtsParams::new(random_psn()?), 0)?;
    let pattern: Vec<u8> = (0..65536u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    let mut src_data = vec![0xEEu8; 100];
    src_data.extend_from_slice(&pattern);
    let src = p.pd.register_bytes(&src_data, Access::NONE)?;
    let big =
        p.pd.register_exposed(3 * 65536, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let remote = RemoteBuffer {
        addr: big.addr() + 65536,
        rkey: big.rkey(),
        len: 65536,
    };
    println!(
        "server buffer at {:#x} (above 4 GiB: {})",
        big.addr(),
        big.addr() > u64::from(u32::MAX)
    );
    p.client
        .post_write(&src, 100..100 + 65536, remote, None, 21)?;
    let c = p.client_cq.poll(Instant::now() + Duration::from_secs(20))?;
    if c.wr_id != 21 || c.opcode != WcOpcode::RdmaWrite {
        return Err(format!("unexpected completion {c:?}").into());
    }
    // Writing more than the advertised remote length is refused before posting.
    match p.client.post_write(&src, 0..65536 + 1, remote, None, 22) {
        Err(Error::WriteTooLong { .. }) => {}
        other => {
            return Err(format!("over-long write: expected WriteTooLong, got {other:?}").into());
        }
    }
    // The sender's completion means the responder acknowledged all data: it is in place.
    drop(p.server);
    let s = big.deregister()?;
    if s[65536..131072] != pattern[..] || s[..65536].iter().chain(&s[131072..]).any(|b| *b != 0) {
        return Err("64 KiB write: server buffer differs from the pattern".into());
    }
    println!("ok: 64 KiB plain RDMA Write at an offset, checked byte for byte");
    Ok(())
}

fn wrong_rkey(env: &LocalPort, cqs: Cqs) -> R<()> {
    let p = connect_with(env, CqMode::Poll, cqs, RtsParams::new(random_psn()?), 1)?;
    let src = p.pd.register_bytes(b"x", Access::NONE)?;
    let mut remote = remote_of(&p.server_mr);
    remote.rkey ^= 0x5a5a_0000;
    p.client.post_write(&src, 0..1, remote, None, 9)?;
    match p.client_cq.poll(Instant::now() + Duration::from_secs(20)) {
        Err(
            e @ Error::Completion {
                status: WcStatus::RemAccessErr,
                wr_id: 9,
                ..
            },
        ) => {
            println!("ok: wrong rkey through {cqs:?} CQs -> {e}");
        }
        other => return Err(format!("wrong rkey: expected REM_ACCESS_ERR, got {other:?}").into()),
    }
    let st = p.client.query_state()?;
    if st != QpState::Err {
        return Err(format!("client QP should be in the error state, is {st:?}").into());
    }
    drop(p.server);
    Ok(())
}

fn no_receive(env: &LocalPort) -> R<()> {
    let rts = RtsParams {
        rnr_retry: 0,
        ..RtsParams::new(random_psn()?)
    };
    let p = connect(env, CqMode::Poll, rts, 0)?;
    let src = p.pd.register_bytes(b"y", Access::NONE)?;
    p.client
        .post_write(&src, 0..1, remote_of(&p.server_mr), Some(1), 11)?;
    match p.client_cq.poll(Instant::now() + Duration::from_secs(20)) {
        Err(
            e @ Error::Completion {
                status: WcStatus::RnrRetryExcErr,
                ..
            },
        ) => {
            println!("ok: no receive -> {e}");
            Ok(())
        }
        other => Err(format!("no receive: expected RNR_RETRY_EXC_ERR, got {other:?}").into()),
    }
}

/// The guarantee the server's verdict rests on: once deregistered, a region's rkey is dead even
/// while the peer's QP is still connected, and the buffer handed back keeps what landed before.
fn deregistered_rkey(env: &LocalPort) -> R<()> {
    let p = connect(env, CqMode::Poll, RtsParams::new(random_psn()?), 0)?;
    let src = p.pd.register_bytes(b"first", Access::NONE)?;
    let again = p.pd.register_bytes(b"later", Access::NONE)?;
    let remote = remote_of(&p.server_mr);
    let deadline = || Instant::now() + Duration::from_secs(20);
    p.client.post_write(&src, 0..5, remote, None, 31)?;
    p.client_cq.poll(deadline())?;
    let buf = p.server_mr.deregister()?;
    p.client.post_write(&again, 0..5, remote, None, 32)?;
    match p.client_cq.poll(deadline()) {
        Err(Error::Completion {
            status: WcStatus::RemAccessErr,
            wr_id: 32,
            ..
        }) => {}
        other => {
            return Err(
                format!("write after deregister: expected REM_ACCESS_ERR, got {other:?}").into(),
            );
        }
    }
    if &buf[..5] != b"first" {
        return Err(format!("deregistered buffer holds {:?}", &buf[..5]).into());
    }
    println!("ok: a deregistered region's rkey is refused; its buffer keeps what landed before");
    Ok(())
}

fn timeout(env: &LocalPort, cqs: Cqs) -> R<()> {
    for mode in [CqMode::Poll, CqMode::Event] {
        let cq = cqs.create(env, mode)?;
        let start = Instant::now();
        match cq.poll(start + Duration::from_millis(300)) {
            Err(Error::Timeout { .. }) if start.elapsed() >= Duration::from_millis(300) => {}
            other => {
                return Err(
                    format!("{mode:?}: expected a timeout after 300 ms, got {other:?}").into(),
                );
            }
        }
        if start.elapsed() > Duration::from_secs(3) {
            return Err(format!("{mode:?}: timeout overshot: {:?}", start.elapsed()).into());
        }
    }
    println!("ok: idle {cqs:?} CQs time out at the deadline");
    Ok(())
}

fn run() -> R<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let dev = args.first().map(String::as_str);
    let port_num: u8 = args.get(1).map(|s| s.parse()).transpose()?.unwrap_or(1);
    let gid_index: Option<u32> = args.get(2).map(|s| s.parse()).transpose()?;
    println!("devices: {:?}", rdma_core_rs::devices()?);
    let env = LocalPort::open(dev, port_num, gid_index)?;
    println!("{} port {port_num}: {:?}", env.ctx.name(), env.port);
    println!(
        "GID table:\n{}",
        describe_gid_table(&env.ctx.gid_table(port_num)?)
    );
    println!("selected GID: {:?}", env.gid);
    route_by_address(&env)?;
    completion_clock(&env)?;
    for mode in [CqMode::Poll, CqMode::Event] {
        let (sent, got) = write_roundtrip(&env, mode, Cqs::Plain)?;
        if sent.timestamp.is_some() || got.timestamp.is_some() {
            return Err(format!("a plain CQ stamped a completion: {sent:?} / {got:?}").into());
        }
    }
    big_write(&env)?;
    wrong_rkey(&env, Cqs::Plain)?;
    no_receive(&env)?;
    timeout(&env, Cqs::Plain)?;
    deregistered_rkey(&env)?;
    extended_cqs(&env)?;
    Ok(())
}

/// 7. `LocalPort::open_for` finds this very port from the address its GID carries, across
///    every device, and an address that no port holds is refused, listing what was seen.
fn route_by_address(env: &LocalPort) -> R<()> {
    let addr = std::net::Ipv6Addr::from(env.gid.gid.0);
    let addr = addr
        .to_ipv4_mapped()
        .map_or(std::net::IpAddr::V6(addr), std::net::IpAddr::V4);
    let (found, why) = LocalPort::open_for(addr, None)?;
    println!("open_for({addr}): {why}");
    if (found.ctx.name(), found.port.num, found.gid.index)
        != (env.ctx.name(), env.port.num, env.gid.index)
    {
        return Err(format!("open_for({addr}) chose {why}, not the port that holds it").into());
    }
    // TEST-NET-1: no port of ours holds it (nothing is sent; only the tables are read).
    match LocalPort::open_for("192.0.2.1".parse()?, None) {
        Err(Error::NoRoute(rdma_core_rs::route::NoChoice::NoGidFor { seen, .. }))
            if seen.contains(env.ctx.name()) => {}
        Err(e) => return Err(format!("open_for(192.0.2.1): unexpected error {e}").into()),
        Ok((_, why)) => return Err(format!("open_for(192.0.2.1) chose {why}").into()),
    }
    Ok(())
}

/// 8. The device answers whether it stamps completions; a software one has no clock.
fn completion_clock(env: &LocalPort) -> R<()> {
    let name = env.ctx.name();
    let clock = env.ctx.completion_clock()?;
    println!("completion clock of {name}: {clock:?}");
    if (name.starts_with("rxe") || name.starts_with("siw")) && clock.has_clock() {
        return Err(format!("{name} is a software device and claims a completion clock").into());
    }
    Ok(())
}

/// 9. Extended CQs carry a write-with-imm as plain ones do; timestamps only with a clock.
fn extended_cqs(env: &LocalPort) -> R<()> {
    let name = env.ctx.name();
    // Soft-iWARP makes no extended CQs at all: it must say so, as the advice tells.
    if name.starts_with("siw") {
        return match env.ctx.create_cq_ex(4, CqMode::Poll, false) {
            Err(e) if refused(&e) => {
                println!("timestamps: ok: {name} makes no extended CQs: {e}");
                Ok(())
            }
            other => Err(format!("{name}: expected EOPNOTSUPP, got {other:?}").into()),
        };
    }
    for mode in [CqMode::Poll, CqMode::Event] {
        let (sent, got) = write_roundtrip(env, mode, Cqs::Extended { timestamps: false })?;
        if sent.timestamp.is_some() || got.timestamp.is_some() {
            return Err(format!("an unstamped CQ stamped a completion: {sent:?} / {got:?}").into());
        }
    }
    // A failed completion reads as one (status, wr_id) through `ibv_start_poll` too, and an
    // empty one (ENOENT) waits until the deadline.
    wrong_rkey(env, Cqs::Extended { timestamps: false })?;
    timeout(env, Cqs::Extended { timestamps: false })?;
    match (
        env.ctx.completion_clock()?,
        env.ctx.create_cq_ex(4, CqMode::Poll, true),
    ) {
        (CompletionClock::Clock { timestamp_mask, .. }, Ok(_)) => {
            for mode in [CqMode::Poll, CqMode::Event] {
                let (sent, got) = write_roundtrip(env, mode, Cqs::Extended { timestamps: true })?;
                for c in [sent, got] {
                    match c.timestamp {
                        Some(t) if t & !timestamp_mask == 0 => {}
                        _ => {
                            return Err(format!(
                                "a stamped CQ gave {c:?} (mask {timestamp_mask:#x})"
                            )
                            .into());
                        }
                    }
                }
            }
            println!("timestamps: ok: {name} stamps completions (extended CQs, both modes)");
            Ok(())
        }
        (CompletionClock::Clock { .. }, Err(e)) => {
            Err(format!("{name} has a completion clock but refuses to stamp: {e}").into())
        }
        (clock, Err(e)) if refused(&e) => {
            println!(
                "timestamps: ok: {name} has no clock ({clock:?}); extended CQs carry writes \
                 in both modes, a stamped one is refused: {e}"
            );
            Ok(())
        }
        (clock, other) => Err(format!(
            "{name} has no clock ({clock:?}): a stamped CQ must be refused with EOPNOTSUPP, got \
             {other:?}"
        )
        .into()),
    }
}

/// `ibv_create_cq_ex` refused for want of support.
fn refused(e: &Error) -> bool {
    matches!(
        e,
        Error::Verb {
            op: VerbOp::CreateCqEx,
            errno: libc::EOPNOTSUPP,
            ..
        }
    )
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => {
            println!("LOOPBACK PASSED");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("LOOPBACK FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}
