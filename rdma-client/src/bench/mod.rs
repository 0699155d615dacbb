//! `rdma-client SERVER --bench lat|bw`: measure the link as perftest does, against a plain
//! `rdma-server` (it needs no bench flag: the hello carries every parameter).
//!
//! One session covers every size: the hello asks for a buffer of the largest, the loops run
//! size after size (`hot`), and the session ends like a tcp-mode write: `written` names the
//! final bytes, and exit 0 only when the server checked them. `stats` turns samples into
//! perftest's figures and columns; `verbs` is the real link under the loops.

pub(crate) mod hot;
mod multi;
mod stats;
mod verbs;

pub use stats::{BwRow, LatRow};

use std::time::{Duration, Instant};

use clap::Args as ClapArgs;
use color_eyre::eyre::{Result, bail};
use rdma_app as app;
use rdma_core_rs::{Access, LocalPort, QpCaps, RemoteBuffer};
use rdma_proto::bench::{self, BenchKind, BenchMode, BenchParams, MAX_ITERS, PongBuffer};
use rdma_proto::{ClientHandshake, ClientRequest, Notify};

use crate::output::{Event, Output};
use crate::session::{Session, SessionOptions, Target};

/// The bench flags of `rdma-client`.
#[derive(Debug, Clone, ClapArgs)]
pub struct BenchArgs {
    /// Measure the link instead of writing one message: `lat` is ib_write_lat's ping-pong of
    /// RDMA Writes (half round trips), `bw` is ib_write_bw's stream. The server needs no flag.
    #[arg(long, value_name = "lat|bw")]
    pub bench: Option<BenchMode>,

    /// Message size in bytes (default: 2 for lat, 65536 for bw, as perftest).
    #[arg(long, requires = "bench", conflicts_with = "all_sizes",
          value_parser = clap::value_parser!(u64).range(1..=1 << 30))]
    pub size: Option<u64>,

    /// Every power of two from 2 B to 8 MiB, like perftest's -a.
    #[arg(long, requires = "bench")]
    pub all_sizes: bool,

    /// Exchanges (lat) or writes (bw) per size (default 1000 for lat, 5000 for bw).
    #[arg(long, requires = "bench", conflicts_with = "duration",
          value_parser = clap::value_parser!(u64).range(5..=MAX_ITERS))]
    pub iters: Option<u64>,

    /// bw only: write for this long per size (e.g. 5s) instead of a number of writes.
    #[arg(long, requires = "bench", value_parser = app::parse_duration)]
    pub duration: Option<Duration>,

    /// bw: writes in flight (perftest's -t).
    #[arg(long, default_value_t = 128, requires = "bench",
          value_parser = clap::value_parser!(u32).range(1..=8192))]
    pub tx_depth: u32,

    /// Largest message sent inline (copied into the work request; perftest's -I). The device
    /// may offer less; 0 turns it off.
    #[arg(
        long = "inline",
        default_value_t = 256,
        requires = "bench",
        value_name = "BYTES"
    )]
    pub inline: u32,

    /// bw: this many queue pairs writing at once (perftest's -q); each is its own session with
    /// the server, and their figures add up.
    #[arg(long, default_value_t = 1, requires = "bench",
          value_parser = clap::value_parser!(u32).range(1..=16))]
    pub qps: u32,
}

/// Every power of two from 2 B to 8 MiB.
fn all_sizes() -> Vec<u64> {
    (1..=23).map(|i| 1u64 << i).collect()
}

/// What a session measures before its buffers exist: the mode, the sizes, the iterations
/// (the hello's [`BenchParams`] add the buffer only `lat` names).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sweep {
    pub mode: BenchMode,
    pub sizes: Vec<u64>,
    pub iters: u64,
}

/// The sweep, iterations and mode the flags ask for.
fn params(b: &BenchArgs, mode: BenchMode) -> Result<Sweep> {
    if mode == BenchMode::Lat && b.qps > 1 {
        bail!("--qps applies to --bench bw (perftest's latency tests use one QP too)");
    }
    if mode == BenchMode::Lat && b.duration.is_some() {
        bail!("--duration applies to --bench bw; give lat a number of exchanges with --iters");
    }
    let sizes = if b.all_sizes {
        all_sizes()
    } else {
        vec![b.size.unwrap_or(match mode {
            BenchMode::Lat => 2,
            BenchMode::Bw => 65536,
        })]
    };
    let iters = match (b.iters, b.duration) {
        (Some(n), _) => n,
        // The duration ends the run; the count is only a cap.
        (None, Some(_)) => MAX_ITERS,
        (None, None) => match mode {
            BenchMode::Lat => 1000,
            BenchMode::Bw => 5000,
        },
    };
    Ok(Sweep { mode, sizes, iters })
}

/// How the loops post, from the bench flags (the same for every session of a run).
#[derive(Debug, Clone, Copy)]
pub struct Knobs {
    /// bw: writes in flight.
    pub tx_depth: u32,
    /// bw: write for this long per size instead of a number of writes.
    pub duration: Option<Duration>,
    /// Largest message sent inline.
    pub inline: u32,
}

impl BenchArgs {
    /// The loops' settings these flags ask for.
    pub fn knobs(&self) -> Knobs {
        Knobs {
            tx_depth: self.tx_depth,
            duration: self.duration,
            inline: self.inline,
        }
    }
}

/// `rdma-client SERVER --bench MODE`, from the command line.
#[derive(Debug)]
pub struct BenchTask {
    pub server: String,
    pub mode: BenchMode,
    pub bench: BenchArgs,
    pub session: SessionOptions,
    pub device: rdma_app::device::DeviceArgs,
}

/// Runs a bench session; `Ok` only when the server verified the final bytes.
pub fn run(task: &BenchTask, out: &Output) -> Result<()> {
    let t_start = Instant::now();
    let p = params(&task.bench, task.mode)?;
    let token = task.session.token.load()?;
    let (target, local, chosen) = Target::with_local_end(&task.server, &task.device)?;
    let m = Measure {
        target: &target,
        params: p,
        token,
        knobs: task.bench.knobs(),
        chosen: chosen.as_deref(),
    };
    if task.bench.qps > 1 {
        return multi::run(&m, task.bench.qps as usize, &local, &task.session, out);
    }
    m.run(&local, &task.session, t_start, Some(out)).map(|_| ())
}

/// A session's figures: a row per size, of its mode.
#[derive(Debug, Default)]
pub struct Rows {
    pub lat: Vec<LatRow>,
    pub bw: Vec<BwRow>,
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
        let Measure {
            target,
            params: sweep,
            token,
            knobs: b,
            chosen,
        } = self;
        let mode = sweep.mode;
        let max = sweep.sizes.last().copied().unwrap_or(1);
        let buffer_size = usize::try_from(max)?;
        let (ctx, port) = (&local.ctx, &local.port);
        let timeout = opts.timeout;

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
        };
        let depth = match mode {
            BenchMode::Lat => 4 * hot::SIGNAL_EVERY as u32 + 2,
            BenchMode::Bw => b.tx_depth,
        };
        let cq = ctx.create_cq(depth + 8, opts.cq_mode)?;
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

        let fin = bench::final_content(&p, p.iters);
        let hs = ClientHandshake::with_bench(
            ClientRequest::for_payload(&fin, Notify::Tcp, token),
            p.clone(),
        );
        let mut session = Session::open(target, hs, local, chosen, opts, out, |banner| {
            format!(
                "connected to {} ({} {}); local {} port {} gid[{}] {}; bench {mode}, sizes {:?}, {}",
                target.name,
                rdma_proto::printable(&banner.program),
                rdma_proto::printable(&banner.program_version),
                ctx.name(),
                port.num,
                local.gid.index,
                local.gid.gid,
                p.sizes,
                match b.duration {
                    Some(d) => format!("{d:?} per size"),
                    None => format!("{} iterations per size", p.iters),
                }
            )
        })?;
        let (qp, accept) = session.connect(qp, |qp, accept| {
            format!(
                "QP {:#08x} ready (RTS) -> server QP {:#08x}, path MTU {}, inline up to {inline} B, completions by {}",
                qp.qpn(),
                accept.endpoint.qpn,
                qp.path_mtu().bytes(),
                opts.cq_mode
            )
        })?;
        let mut link = verbs::Verbs {
            qp: &qp,
            cq: &cq,
            src: &mut src,
            pongs: pongs.as_ref(),
            remote: RemoteBuffer {
                addr: accept.addr,
                rkey: accept.rkey,
                len: accept.buf_len,
            },
            inline: inline as usize,
            counter_at: None,
        };
        let ready_us = t_start.elapsed().as_secs_f64() * 1e6;
        session.emit(&Event::BenchSetup { ready_us }, || {
            format!("ready to post after {:.0} us", ready_us)
        });
        if session.human() {
            println!("{}", stats::RULE);
            println!(
                "{}",
                match mode {
                    BenchMode::Lat => stats::LAT_HEADER,
                    BenchMode::Bw => stats::BW_HEADER,
                }
            );
        }
        let mut rows = Rows::default();
        let mut samples = Vec::with_capacity(usize::try_from(p.iters).unwrap_or(0).min(1 << 24));
        for (k, &size) in p.sizes.iter().enumerate() {
            let wr_base = k as u64 * (p.iters + 1);
            let size_us = usize::try_from(size)?;
            match mode {
                BenchMode::Lat => {
                    opts.faults.ping_pong(
                        &mut link,
                        size_us,
                        p.iters,
                        wr_base,
                        timeout,
                        &mut samples,
                    )?;
                    let row = stats::lat_row(size, &mut samples);
                    session.emit(&Event::BenchLat(row), || stats::lat_line(&row));
                    rows.lat.push(row);
                }
                BenchMode::Bw => {
                    let s = hot::stream(
                        &mut link,
                        size_us,
                        p.iters,
                        b.duration,
                        u64::from(b.tx_depth),
                        wr_base,
                        timeout,
                    )?;
                    let row = stats::bw_row(size, s.writes, s.secs, s.peak_bytes_per_s);
                    session.emit(&Event::BenchBw(row), || stats::bw_line(&row));
                    rows.bw.push(row);
                }
            }
        }
        if session.human() {
            println!("{}", stats::RULE);
        }
        session.written()?;
        let outcome = session.result()?;
        session.emit_verified(&outcome, || {
            format!(
                "server verified the final {} bytes (crc32c {:#010x})",
                outcome.length, outcome.crc32c
            )
        });
        Ok(rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::Args;
    use clap::Parser as _;

    fn parse(argv: &[&str]) -> std::result::Result<Args, clap::Error> {
        Args::try_parse_from(argv)
    }

    #[test]
    fn flags_and_defaults_like_perftest() {
        let a = parse(&["rdma-client", "h", "--bench", "lat"]).unwrap();
        let p = params(&a.bench, BenchMode::Lat).unwrap();
        assert_eq!((p.sizes.clone(), p.iters), (vec![2], 1000));
        let a = parse(&["rdma-client", "h", "--bench", "bw"]).unwrap();
        let p = params(&a.bench, BenchMode::Bw).unwrap();
        assert_eq!((p.sizes.clone(), p.iters), (vec![65536], 5000));
        assert_eq!(a.bench.tx_depth, 128);
        let a = parse(&[
            "rdma-client",
            "h",
            "--bench",
            "bw",
            "--all-sizes",
            "--duration",
            "2s",
        ])
        .unwrap();
        let p = params(&a.bench, BenchMode::Bw).unwrap();
        assert_eq!(p.sizes.len(), 23);
        assert_eq!(p.sizes[22], 8 << 20);
        let a = parse(&["rdma-client", "h", "--bench", "lat", "--qps", "2"]).unwrap();
        assert!(
            params(&a.bench, BenchMode::Lat).is_err(),
            "lat runs on one QP"
        );
        let a = parse(&["rdma-client", "h", "--bench", "bw", "--qps", "4"]).unwrap();
        assert_eq!(a.bench.qps, 4);
        assert!(parse(&["rdma-client", "h", "--bench", "bw", "--qps", "17"]).is_err());
        let a = parse(&["rdma-client", "h", "--bench", "lat", "--duration", "2s"]).unwrap();
        assert!(params(&a.bench, BenchMode::Lat).is_err());
        // Bench flags need --bench; sizes and counts are range-checked.
        assert!(parse(&["rdma-client", "h", "--size", "64"]).is_err());
        assert!(parse(&["rdma-client", "h", "--bench", "lat", "--size", "0"]).is_err());
        assert!(parse(&["rdma-client", "h", "--bench", "lat", "--iters", "2"]).is_err());
        assert!(parse(&["rdma-client", "h", "--bench", "ping"]).is_err());
        assert!(
            parse(&[
                "rdma-client",
                "h",
                "--bench",
                "bw",
                "--size",
                "8",
                "--all-sizes"
            ])
            .is_err()
        );
    }
}
