//! The RDMA CM misbehaviours (issue 23, items 4 and 5): a flood of wrong-nonce connection
//! requests at the session's listener, and a second request after the session's own. Each
//! exits 0 only when the server behaved: it gave the flooded session up, naming the rejects,
//! within its `--timeout`; it left nothing listening once it had taken the session's request.

use color_eyre::eyre::{Result, bail, eyre};
use rdma_client::output::Detail;
use rdma_client::run::{Opened, Resources};
use rdma_client::session::Session;
use rdma_core_rs::{Access, ErrorKind, Init, LocalPort, QpCaps, QueuePair};
use rdma_proto::{Accept, CmOffer};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// How long `slow-ping` and `cm-late-bench` wait before each ping: just often enough for a
/// server's `--timeout` of 2 s.
pub const SLOW_PING: Duration = Duration::from_secs(1);

/// Wrong-nonce requests the flood sends: more than the server's cap on rejects (16).
pub const FLOOD: u32 = 24;
/// How long one stray request may wait for its answer: a reject (or an unreachable port)
/// comes in milliseconds; a request that meets a listener nobody reads waits until this.
const ANSWER: Duration = Duration::from_secs(5);

/// A fresh queue pair for one more connection request, on the write's own PD and CQ.
fn fresh_qp(local: &LocalPort, r: &Resources<'_>) -> Result<QueuePair<Init>> {
    let qp = r.pd.create_rc_qp(&r.cq, QpCaps::default())?;
    Ok(qp.to_init(local.port.num, Access::NONE)?)
}

/// Where the session's RDMA CM listener is, and where we come from.
fn listener(session: &Session<'_>, accept: &Accept) -> Result<(CmOffer, SocketAddr, SocketAddr)> {
    let offer = accept
        .cm
        .ok_or_else(|| eyre!("the server offered no RDMA CM listener: run with --cm"))?;
    let (from, to) = session.tcp_addrs()?;
    Ok((offer, from, SocketAddr::new(to.ip(), offer.port)))
}

/// One connection request to `to` presenting `nonce`; `Ok(why)` when it was refused in time,
/// as it should be.
fn stray(
    local: &LocalPort,
    r: &Resources<'_>,
    from: SocketAddr,
    to: SocketAddr,
    nonce: &[u8],
) -> Result<String> {
    let started = Instant::now();
    match fresh_qp(local, r)?.connect_cm(local, Some(from.ip()), to, nonce, started + ANSWER) {
        Ok(_) => bail!("a connection request that is not the session's was taken"),
        Err(e) if e.kind() == ErrorKind::Timeout => bail!(
            "a connection request to {to} waited {:?} unanswered: something still listens there \
             and nobody takes or rejects its requests",
            started.elapsed()
        ),
        Err(e) => Ok(format!("refused in {:?}: {e}", started.elapsed())),
    }
}

/// `--fault cm-flood`: after the accept, wrong-nonce requests at the session's listener until
/// the server gives the session up; the server's error must come within `timeout` and name
/// the rejects.
pub fn flood(opened: Opened<'_>, local: &LocalPort, timeout: Duration) -> Result<()> {
    let (mut session, qp, r) = opened.into_parts();
    session.hello(local, &qp)?;
    let accept = session.await_accept()?;
    let (offer, from, to) = listener(&session, &accept)?;
    let mut wrong = offer.nonce;
    wrong[0] ^= 1;
    let started = Instant::now();
    for n in 1..=FLOOD {
        let why = stray(local, &r, from, to, &wrong)?;
        eprintln!("misbehave: stray request {n}: {why}");
    }
    let answer = session.result();
    let elapsed = started.elapsed();
    match answer {
        Err(e) if format!("{e:#}").contains("rejected without one the session admits") => {
            if elapsed > timeout {
                bail!("the server gave up only after {elapsed:?}, past its --timeout {timeout:?}");
            }
            println!(
                "cm-flood: {FLOOD} wrong-nonce requests rejected; the server gave the session up \
                 in {elapsed:?}: {e:#}"
            );
            Ok(())
        }
        Err(e) => bail!("the server ended the flooded session otherwise: {e:#}"),
        Ok(o) => bail!("the flooded session got a verdict: {o:?}"),
    }
}

/// `--fault cm-twice`: the session's own RDMA CM connection, then a second request with the
/// right nonce, which must be refused at once (the listener is gone); then it leaves, without
/// the write (a one-shot server would stop at a verified write, before the clients after us).
pub fn twice(opened: Opened<'_>, local: &LocalPort) -> Result<()> {
    let (mut session, qp, r) = opened.into_parts();
    let psn = session.hello(local, &qp)?;
    let accept = session.await_accept()?;
    let (offer, from, to) = listener(&session, &accept)?;
    let link = Detail::Link(local);
    let _qp = session.connect_qp(local, qp, psn, &accept, Some(&offer.nonce), &link)?;
    let why = stray(local, &r, from, to, &offer.nonce)?;
    println!("cm-twice: a second request to the session's listener was {why}");
    Ok(())
}

/// How long `cm-late-bench` waits between the accept and its RDMA CM connection: under the
/// server's `--timeout` (2 s in the guests), so the connection is taken.
pub const LATE_CM: Duration = Duration::from_millis(1500);

/// `--fault cm-late-bench` (issue 23, item 6): a bench lat session through RDMA CM that
/// connects [`LATE_CM`] after the accept, then pings [`SLOW_PING`] apart, just
/// often enough for the server's `--timeout`: the server must end it at `max_time` (its
/// `--bench-max-time`) counted from the accept, not from the CM connection. Exits 0 only when
/// the server's error came within `max_time` (and a slice) of the accept and names the limit.
pub fn late_bench(
    task: &rdma_client::bench::BenchTask,
    out: &rdma_client::output::Output,
    max_time: Duration,
) -> Result<()> {
    let t_start = Instant::now();
    let r = task.resolve()?;
    let mut opened = r.measure(task).open(&r.local, &task.session, Some(out))?;
    let (session, local, qp) = opened.session();
    let psn = session.hello(local, qp)?;
    let accept = session.await_accept()?;
    let accepted = Instant::now();
    if accept.cm.is_none() {
        bail!("the server offered no RDMA CM listener: run with --cm");
    }
    std::thread::sleep(LATE_CM);
    let mut bench = opened.connect_accepted(psn, &accept, t_start)?;
    let (session, mut link, _) = bench.link();
    // One size (`--size`): the server waits for the ping's last byte at the buffer's end.
    let size = usize::try_from(accept.buf_len)?;
    let spoke_at = pace_pings(session, &mut link, size, accepted + max_time * 3)?;
    let after = spoke_at.duration_since(accepted);
    let told = session.result();
    let said = match &told {
        Err(e) => format!("{e:#}"),
        Ok(o) => bail!("the server gave a verdict instead of ending the session: {o:?}"),
    };
    if !said.contains("--bench-max-time") {
        bail!("the server ended the session otherwise: {said}");
    }
    // A slice for the server's wait to notice and its line to come; the late connection
    // (LATE_CM) must not be added to the session's time.
    let slack = Duration::from_millis(900);
    if after > max_time + slack {
        bail!(
            "the server ended the session {after:?} after its accept: its --bench-max-time of \
             {max_time:?} was counted from the RDMA CM connection ({LATE_CM:?} later), not from \
             the accept"
        );
    }
    println!(
        "cm-late-bench: connected {LATE_CM:?} after the accept; the server ended the session \
         {after:?} after the accept (--bench-max-time {max_time:?}): {said}"
    );
    Ok(())
}

/// Pings of `size` bytes (counter 1, 2, …) [`SLOW_PING`] apart until the server
/// says something on the TCP connection (or `give_up`); returns when it did. Pongs are left to
/// land.
fn pace_pings<L: rdma_client::bench::hot::Link>(
    session: &Session<'_>,
    link: &mut L,
    size: usize,
    give_up: Instant,
) -> Result<Instant>
where
    color_eyre::Report: From<L::Error>,
{
    const LOOK: Duration = Duration::from_millis(20);
    for n in 1u64.. {
        let next = Instant::now() + SLOW_PING;
        while Instant::now() < next {
            if session.server_spoke() {
                return Ok(Instant::now());
            }
            if Instant::now() >= give_up {
                bail!("the server never ended the paced session");
            }
            std::thread::sleep(LOOK);
        }
        link.post(size, Some(rdma_proto::bench::counter(n)), true, n)?;
        link.poll(Instant::now() + Duration::from_secs(5))?;
    }
    unreachable!("pinged past u64::MAX")
}

/// `--fault cm-foreign-path` (issue 23, item 1): the session's RDMA CM connection request,
/// with the right nonce and from our own address, but along a path whose source GID is a
/// host's other than ours (`rdma_set_option(RDMA_OPTION_IB_PATH)`, as any unprivileged process
/// may): the server would point its queue pair there. The GID is the server's own address's,
/// a host that answers (no neighbour resolution to wait out) and surely not ours. The server
/// must reject the request and end the session naming the path. Exits 0 only then.
pub fn foreign_path(opened: Opened<'_>, local: &LocalPort, timeout: Duration) -> Result<()> {
    let (mut session, qp, _r) = opened.into_parts();
    session.hello(local, &qp)?;
    let accept = session.await_accept()?;
    let (offer, from, to) = listener(&session, &accept)?;
    let third = to.ip();
    let gid = rdma_core_rs::Gid(match third {
        std::net::IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        std::net::IpAddr::V6(v6) => v6.octets(),
    });
    let connected = qp.connect_cm_with_path(
        local,
        Some(from.ip()),
        to,
        &offer.nonce,
        Instant::now() + timeout,
        &mut |path| path.sgid = gid,
    );
    if connected.is_ok() {
        bail!(
            "the server connected its queue pair along a path to {third}, not to us, because \
             our connection request said so"
        );
    }
    let refused = connected
        .err()
        .map(|e| format!("{e:#}"))
        .unwrap_or_default();
    let said = match session.result() {
        Err(e) => format!("{e:#}"),
        Ok(o) => bail!("the session went on to a verdict: {o:?}"),
    };
    if !said.contains("path leads to GID") {
        bail!("the server ended the session otherwise: {said} (our request: {refused})");
    }
    println!(
        "cm-foreign-path: a request claiming {third}'s GID was refused ({refused}); the server \
         said: {said}"
    );
    Ok(())
}
