//! One bench session: [`Measure::connect`] sets it up (verbs objects and the session,
//! [`Measure::open`]; the hello, the accept and the queue pair in RTS, [`Opened::connect`]),
//! [`Run::measure`] runs the loops over a [`Link`] (the real one is [`Bench::link`]'s),
//! [`Bench::finish`] takes the server's verdict on the final bytes. With rounds
//! ([`rdma_proto::rounds`], `bench-rounds`, [`Measure::rounds`]) [`Bench::verdict`] keeps the
//! session and [`Bench::again`] runs the sweep once more on the same queue pairs.

use std::time::Instant;

use color_eyre::eyre::Result;
use rdma_core_rs::{
    Access, CompletionClock, CompletionQueue, ExposedRegion, Init, LocalPort, MemoryRegion,
    ProtectionDomain, QpCaps, QueuePair, RemoteBuffer, Rts,
};
use rdma_proto::bench::{self, BenchKind, BenchMode, BenchParams, PongBuffer, Turnaround};
use rdma_proto::{Accept, ClientHandshake, ClientRequest, Notify};

use super::hot::{self, Link};
use super::stats::{self, BwRow, LatRow};
use super::verbs::Verbs;
use super::{Knobs, Sweep};
use crate::output::{Detail, Event, Output, human};
use crate::session::{Session, SessionOptions, Target};

/// A session's figures: a row per size, of its mode.
#[derive(Debug, Default)]
pub struct Rows {
    pub lat: Vec<LatRow>,
    pub bw: Vec<BwRow>,
    /// The stamped exchange that ended the sweep, where the hello asked for it.
    pub stamped: Option<Stamped>,
}

/// The stamped exchange of a `lat` sweep, both sides' stamps ([`hot::stamped`],
/// [`rdma_proto::bench::Turnaround`]): what the mesh splits a round trip with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamped {
    /// What we saw: the wall time, and our completions' stamps.
    pub ours: hot::Stamped,
    /// Our device's clock, where our completions are stamped.
    pub clock: Option<CompletionClock>,
    /// The server's stamps and clock, where its device gives them (its `result`).
    pub theirs: Option<Turnaround>,
}

/// One bench session of `params` against `target`.
#[derive(Debug, Clone)]
pub struct Measure<'a> {
    pub target: &'a Target,
    pub params: Sweep,
    pub token: Option<String>,
    pub knobs: Knobs,
    /// Why the local end is what it is, when the route chose it (for the `connected` event).
    pub chosen: Option<&'a str>,
    /// Ask to keep the session for more rounds, where the server offers `bench-rounds`.
    pub rounds: bool,
    /// `lat`: end each sweep with the stamped exchange, where the server offers `stamped` and
    /// the device has RDMA Write with immediate ([`hot::stamped`]); its completions stamped
    /// where the device has a completion clock.
    pub stamps: bool,
}

impl Measure<'_> {
    /// From connect to the server's verdict on the final bytes; `Ok` only when it verified
    /// them. Each step is an event on `out`; with `None` (the fabric check measuring a pair)
    /// nothing is printed and the rows are only returned.
    pub fn run(
        self,
        local: &LocalPort,
        opts: &SessionOptions,
        t_start: Instant,
        out: Option<&Output>,
    ) -> Result<Rows> {
        let mut bench = self.connect(local, opts, t_start, out)?;
        let rows = {
            let (session, mut link, run) = bench.link();
            run.measure(session, &mut link)?
        };
        bench.finish()?;
        Ok(rows)
    }

    /// Registers the buffers, connects to the server with the bench hello and brings the queue
    /// pair to RTS: everything up to the first post (`bench_setup`, timed from `t_start`):
    /// [`open`](Self::open), then [`Opened::connect`].
    pub fn connect<'a>(
        self,
        local: &LocalPort,
        opts: &SessionOptions,
        t_start: Instant,
        out: Option<&'a Output>,
    ) -> Result<Bench<'a>> {
        self.open(local, opts, out)?.connect(t_start)
    }

    /// Registers the buffers, creates the queue pair (INIT) and opens the session (the
    /// banner read); the hello is not sent yet.
    pub fn open<'a, 'l>(
        self,
        local: &'l LocalPort,
        opts: &SessionOptions,
        out: Option<&'a Output>,
    ) -> Result<Opened<'a, 'l>> {
        let Measure {
            target,
            params: sweep,
            token,
            knobs: b,
            chosen,
            rounds,
            stamps,
        } = self;
        let mode = sweep.mode;
        let max = sweep.sizes.last().copied().unwrap_or(1);
        let buffer_size = usize::try_from(max)?;
        let (ctx, port) = (&local.ctx, &local.port);

        // Verbs objects first: the hello names our pong buffer.
        let pd = ctx.alloc_pd()?;
        let mut src = pd.register(buffer_size, Access::NONE)?;
        bench::fill_pattern(src.as_mut_slice());
        let (kind, pongs) = match mode {
            BenchMode::Lat => {
                let r =
                    pd.register_exposed(buffer_size, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
                let to = PongBuffer {
                    addr: r.addr(),
                    rkey: r.rkey(),
                };
                (BenchKind::Lat(to), Some(r))
            }
            BenchMode::Bw => (BenchKind::Bw, None),
        };
        let p = BenchParams {
            kind,
            sizes: sweep.sizes,
            iters: sweep.iters,
            stamped: false,
        };
        let depth = match mode {
            BenchMode::Lat => 4 * hot::SIGNAL_EVERY as u32 + 2,
            BenchMode::Bw => b.tx_depth,
        };
        // The stamped exchange: a write with immediate each way (not on iWARP), stamped where
        // the device has a completion clock (an extended CQ then).
        let stamps = stamps && mode == BenchMode::Lat && ctx.transport().has_write_with_imm();
        let clock = if stamps {
            ctx.completion_clock().ok().filter(|c| c.has_clock())
        } else {
            None
        };
        let cq = match clock {
            Some(_) => ctx.create_cq_ex(depth + 8, opts.cq_mode, true)?,
            None => ctx.create_cq(depth + 8, opts.cq_mode)?,
        };
        let caps = |inline| QpCaps {
            max_send_wr: depth,
            max_inline_data: inline,
            ..QpCaps::default()
        };
        let (qp, inline) = match pd.create_rc_qp(&cq, caps(b.inline)) {
            Ok(qp) => (qp, b.inline),
            Err(_) if b.inline > 0 => (pd.create_rc_qp(&cq, caps(0))?, 0),
            Err(e) => return Err(e.into()),
        };
        let access = match mode {
            BenchMode::Lat => Access::REMOTE_WRITE,
            BenchMode::Bw => Access::NONE,
        };
        let qp = qp.to_init(port.num, access)?;
        if stamps {
            // The answer's receive, before the hello lets the server connect.
            qp.post_recv(hot::RECV_WR)?;
        }

        let fin = bench::final_content(&p, p.iters);
        let hs = ClientHandshake::with_bench(
            ClientRequest::for_payload(&fin, Notify::Tcp, token),
            p.clone(),
        );
        let hs = if rounds { hs.asking_rounds() } else { hs };
        let hs = if stamps { hs.asking_stamps() } else { hs };
        let detail = Detail::Bench {
            mode,
            sizes: &p.sizes,
            duration: b.duration,
            iters: p.iters,
        };
        let session = Session::open(target, hs, &local.into(), chosen, opts, out, &detail)?;
        Ok(Opened {
            qp,
            cq,
            src,
            pongs,
            pd,
            session,
            local,
            run: Run {
                params: p,
                knobs: b,
                timeout: opts.timeout,
                crc32c: rdma_proto::crc32c(&fin),
                clock,
            },
            inline,
            cq_mode: opts.cq_mode,
        })
    }
}

/// A bench session opened ([`Measure::open`]): its banner read, its queue pair in INIT; what
/// [`connect`](Self::connect) takes to RTS, or a caller step by step
/// ([`session`](Self::session), then [`connect_accepted`](Self::connect_accepted)).
#[derive(Debug)]
pub struct Opened<'a, 'l> {
    // Field order is drop order, as in [`Bench`].
    qp: QueuePair<Init>,
    cq: CompletionQueue,
    src: MemoryRegion,
    pongs: Option<ExposedRegion>,
    pd: ProtectionDomain,
    session: Session<'a>,
    local: &'l LocalPort,
    run: Run,
    inline: u32,
    cq_mode: rdma_core_rs::CqMode,
}

impl<'a, 'l> Opened<'a, 'l> {
    /// The session, and the queue pair its hello announces: for [`Session::hello`] and
    /// [`Session::await_accept`] when a caller takes the steps itself.
    pub fn session(&mut self) -> (&mut Session<'a>, &'l LocalPort, &QueuePair<Init>) {
        (&mut self.session, self.local, &self.qp)
    }

    /// The hello, the accept, the queue pair to RTS and `bench_setup` (timed from `t_start`).
    pub fn connect(mut self, t_start: Instant) -> Result<Bench<'a>> {
        let psn = self.session.hello(self.local, &self.qp)?;
        let accept = self.session.await_accept()?;
        self.connect_accepted(psn, &accept, t_start)
    }

    /// After the hello (which announced `psn`) and the server's `accept`: the queue pair to
    /// RTS, `qp_ready` and `bench_setup` (timed from `t_start`).
    pub fn connect_accepted(
        self,
        psn: u32,
        accept: &Accept,
        t_start: Instant,
    ) -> Result<Bench<'a>> {
        let Opened {
            qp,
            cq,
            src,
            pongs,
            pd,
            mut session,
            local,
            run,
            inline,
            cq_mode,
        } = self;
        let nonce = accept.cm.map(|offer| offer.nonce);
        let qp = session.connect_qp(
            local,
            qp,
            psn,
            accept,
            nonce.as_ref(),
            &Detail::BenchQp { inline, cq_mode },
        )?;
        let ready_us = t_start.elapsed().as_secs_f64() * 1e6;
        session.emit(&Event::BenchSetup { ready_us });
        Ok(Bench {
            run,
            remote: RemoteBuffer {
                addr: accept.addr,
                rkey: accept.rkey,
                len: accept.buf_len,
            },
            inline: inline as usize,
            qp,
            cq,
            src,
            pongs,
            pd,
            session,
        })
    }
}

/// A bench session set up by [`Measure::connect`]: its queue pair in RTS towards the
/// server's, the buffers registered.
#[derive(Debug)]
pub struct Bench<'a> {
    run: Run,
    remote: RemoteBuffer,
    inline: usize,
    // Field order is drop order: the queue pair before its completion queue, the regions
    // before their protection domain, and the connection to the server last.
    qp: QueuePair<Rts>,
    cq: CompletionQueue,
    src: MemoryRegion,
    /// `lat`: where the server's answers land; with rounds, registered anew each round and
    /// deregistered at its verdict.
    pongs: Option<ExposedRegion>,
    pd: ProtectionDomain,
    session: Session<'a>,
}

/// What the loops run: the sizes and iterations, how they post, and the deadline of a wait.
#[derive(Debug)]
pub struct Run {
    params: BenchParams,
    knobs: Knobs,
    timeout: std::time::Duration,
    /// The CRC32C of the final bytes (each round's).
    crc32c: u32,
    /// Our device's clock, where the stamped exchange's completions are stamped.
    clock: Option<CompletionClock>,
}

impl<'a> Bench<'a> {
    /// The session, the real link (our queue pair, its completion queue, our buffers) and what
    /// to run over it ([`Run::measure`]).
    pub fn link(&mut self) -> (&mut Session<'a>, Verbs<'_>, &Run) {
        let link = Verbs {
            qp: &self.qp,
            cq: &self.cq,
            src: &mut self.src,
            pongs: self.pongs.as_ref(),
            remote: self.remote,
            inline: self.inline,
            counter_at: None,
            early: None,
        };
        (&mut self.session, link, &self.run)
    }

    /// Says the loops are done (`written`, naming the final bytes) and takes the server's
    /// verdict on them: `Ok` only when it verified them.
    pub fn finish(mut self) -> Result<()> {
        self.verdict().map(drop)
    }

    /// [`finish`](Self::finish), keeping the session for another round where the server
    /// granted rounds ([`again`](Self::again)); the server's answers can no longer land here
    /// then (the `lat` buffer for them is deregistered).
    ///
    /// Returns the server's stamps of the sweep's stamped exchange, where its device gave
    /// them.
    pub fn verdict(&mut self) -> Result<Option<Turnaround>> {
        self.session.written()?;
        let outcome = self.session.result()?;
        self.session.emit_verified(&outcome, &Detail::BenchFinal);
        if self.keep_alive().is_some() {
            self.pongs = None;
            if self.session.stamped() {
                // The next round's answer.
                self.qp.post_recv(hot::RECV_WR)?;
            }
        }
        Ok(outcome.stamps)
    }

    /// How long the server keeps this session after each verdict, where it granted rounds.
    #[must_use]
    pub fn keep_alive(&self) -> Option<std::time::Duration> {
        self.session.keep_alive()
    }

    /// The sweep once more on the same queue pairs, after a verified round of a session whose
    /// server granted rounds: a `lat` buffer for the answers registered anew (zeroed, so no
    /// counter of the last round can pass for this one's), the pattern back in our source, a
    /// `next` naming both, and the server's fresh buffer its `region` names. Each wait from
    /// now on gets `timeout`. Then [`link`](Self::link) and [`Run::measure`] as in the first
    /// round, and [`verdict`](Self::verdict).
    pub fn again(&mut self, timeout: std::time::Duration) -> Result<()> {
        self.session.set_timeout(timeout);
        self.run.timeout = timeout;
        // The sweep's largest size: the hello's length, and each buffer's.
        let len = self.src.len();
        let pong = match self.run.params.kind {
            BenchKind::Lat(_) => {
                let r = self
                    .pd
                    .register_exposed(len, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
                let to = PongBuffer {
                    addr: r.addr(),
                    rkey: r.rkey(),
                };
                self.pongs = Some(r);
                Some(to)
            }
            BenchKind::Bw => None,
        };
        bench::fill_pattern(self.src.as_mut_slice());
        let region = self.session.next_round(len as u64, self.run.crc32c, pong)?;
        self.remote = RemoteBuffer {
            addr: region.addr,
            rkey: region.rkey,
            len: region.buf_len,
        };
        Ok(())
    }
}

impl Run {
    /// Every size's loop over `link`, a row each (emitted on `session`'s output).
    pub fn measure<L: Link>(&self, session: &mut Session<'_>, link: &mut L) -> Result<Rows>
    where
        color_eyre::Report: From<L::Error>,
    {
        let (p, b, timeout) = (&self.params, &self.knobs, self.timeout);
        let mode = match p.kind {
            BenchKind::Lat(_) => BenchMode::Lat,
            BenchKind::Bw => BenchMode::Bw,
        };
        session.human(|| human::bench_header(mode));
        let mut rows = Rows::default();
        let mut samples = Vec::with_capacity(usize::try_from(p.iters).unwrap_or(0).min(1 << 24));
        for (k, &size) in p.sizes.iter().enumerate() {
            let wr_base = k as u64 * (p.iters + 1);
            let size_us = usize::try_from(size)?;
            match mode {
                BenchMode::Lat => {
                    hot::ping_pong(link, size_us, p.iters, wr_base, timeout, &mut samples)?;
                    let row = stats::lat_row(size, &mut samples);
                    session.emit(&Event::BenchLat(row));
                    rows.lat.push(row);
                }
                BenchMode::Bw => {
                    let s = hot::stream(
                        link,
                        size_us,
                        p.iters,
                        b.duration,
                        u64::from(b.tx_depth),
                        wr_base,
                        timeout,
                    )?;
                    let row = stats::bw_row(size, s.writes, s.secs, s.peak_bytes_per_s);
                    session.emit(&Event::BenchBw(row));
                    rows.bw.push(row);
                }
            }
        }
        if mode == BenchMode::Lat && session.stamped() {
            // The largest size's last byte: it holds the last exchange's counter already.
            let at = p
                .sizes
                .last()
                .map_or(0, |&n| usize::try_from(n).unwrap_or(1) - 1);
            rows.stamped = Some(Stamped {
                ours: hot::stamped(link, at, timeout)?,
                clock: self.clock,
                theirs: None,
            });
        }
        session.human(|| human::RULE.to_owned());
        Ok(rows)
    }
}
