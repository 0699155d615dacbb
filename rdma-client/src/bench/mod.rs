//! `rdma-client bench SERVER --mode lat|bw`: measure the link as perftest does, against a plain
//! `rdma-server` (it needs no bench flag: the hello carries every parameter).
//!
//! One session covers every size: the hello asks for a buffer of the largest, the loops run
//! size after size (`hot`), and the session ends like a tcp-mode write: `written` names the
//! final bytes, and exit 0 only when the server checked them. `stats` turns samples into
//! perftest's figures and columns; `verbs` is the real link under the loops.

pub mod hot;
mod measure;
mod multi;
mod stats;
pub mod verbs;

pub use measure::{Bench, Measure, Rows, Stamped};
pub use stats::{BwRow, LatRow};

use std::time::{Duration, Instant};

use clap::Args as ClapArgs;
use color_eyre::eyre::{Result, bail};
use rdma_app as app;
use rdma_proto::bench::{BenchMode, MAX_ITERS};

use crate::output::Output;
use crate::session::{SessionOptions, Target};

/// The bench flags of `rdma-client bench`.
#[derive(Debug, Clone, ClapArgs)]
#[command(next_help_heading = "Measurement")]
pub struct BenchArgs {
    /// lat: ib_write_lat's ping-pong (half round trips); bw: ib_write_bw's stream
    #[arg(long, value_name = "lat|bw", default_value = "lat")]
    pub mode: BenchMode,

    /// Message size in bytes (default: 2 for lat, 65536 for bw, as perftest)
    #[arg(long, conflicts_with = "all_sizes",
          value_parser = clap::value_parser!(u64).range(1..=1 << 30))]
    pub size: Option<u64>,

    /// Every power of two from 2 B to 8 MiB, like perftest's -a
    #[arg(long)]
    pub all_sizes: bool,

    /// Exchanges (lat) or writes (bw) per size (default 1000 for lat, 5000 for bw)
    #[arg(long, value_name = "N", conflicts_with = "duration",
          value_parser = clap::value_parser!(u64).range(5..=MAX_ITERS))]
    pub iters: Option<u64>,

    /// bw: write for this long per size (e.g. 5s) instead of a number of writes
    #[arg(long, value_name = "DURATION", value_parser = app::parse_duration)]
    pub duration: Option<Duration>,

    /// bw: writes in flight (perftest's -t)
    #[arg(long, value_name = "N", default_value_t = 128,
          value_parser = clap::value_parser!(u32).range(1..=8192))]
    pub tx_depth: u32,

    /// Largest message sent inline (perftest's -I; the device may offer less; 0: off)
    #[arg(long = "inline", default_value_t = 256, value_name = "BYTES")]
    pub inline: u32,

    /// bw: this many queue pairs writing at once, each its own session (perftest's -q)
    #[arg(long, value_name = "N", default_value_t = 1,
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
        bail!("--qps applies to --mode bw (perftest's latency tests use one QP too)");
    }
    if mode == BenchMode::Lat && b.duration.is_some() {
        bail!("--duration applies to --mode bw; give lat a number of exchanges with --iters");
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

/// How the loops post, from the bench flags (the same for every session of a run); the
/// default is the flags' (what the fabric check's and the mesh's measurements use).
#[derive(Debug, Clone, Copy)]
pub struct Knobs {
    /// bw: writes in flight.
    pub tx_depth: u32,
    /// bw: write for this long per size instead of a number of writes.
    pub duration: Option<Duration>,
    /// Largest message sent inline.
    pub inline: u32,
}

impl Default for Knobs {
    fn default() -> Self {
        Self {
            tx_depth: 128,
            duration: None,
            inline: 256,
        }
    }
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

/// `rdma-client bench SERVER --mode MODE`, from the command line.
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
    let r = task.resolve()?;
    let m = r.measure(task);
    if task.bench.qps > 1 {
        return multi::run(&m, task.bench.qps as usize, &r.local, &task.session, out);
    }
    m.run(&r.local, &task.session, t_start, Some(out))
        .map(|_| ())
}

/// What a bench task resolves to before it connects: its sizes and iterations, the token, the
/// server resolved with the local end that reaches it.
#[derive(Debug)]
pub struct Resolved {
    pub sweep: Sweep,
    pub token: Option<String>,
    pub target: Target,
    pub local: rdma_core_rs::LocalPort,
    /// Why the local end is what it is, when the route chose it.
    pub chosen: Option<String>,
}

impl BenchTask {
    /// Reads the flags and the token, resolves the server and opens the local end that
    /// reaches it.
    ///
    /// # Errors
    /// Flags that contradict each other, an unreadable token file, a server that does not
    /// resolve, no local end for it.
    pub fn resolve(&self) -> Result<Resolved> {
        let sweep = params(&self.bench, self.mode)?;
        let token = self.session.token.load()?;
        let (target, local, chosen) = Target::with_local_end(&self.server, &self.device)?;
        Ok(Resolved {
            sweep,
            token,
            target,
            local,
            chosen,
        })
    }
}

impl Resolved {
    /// The measurement session `task` asks for.
    #[must_use]
    pub fn measure(&self, task: &BenchTask) -> Measure<'_> {
        Measure {
            target: &self.target,
            params: self.sweep.clone(),
            token: self.token.clone(),
            knobs: task.bench.knobs(),
            chosen: self.chosen.as_deref(),
            rounds: false,
            stamps: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Args, Use};
    use clap::Parser as _;

    fn parse(argv: &[&str]) -> std::result::Result<BenchArgs, clap::Error> {
        let mut full = vec!["rdma-client", "bench", "h"];
        full.extend_from_slice(argv);
        match Args::try_parse_from(full)?.command {
            Some(Use::Bench(b)) => Ok(b.bench),
            other => panic!("not bench: {other:?}"),
        }
    }

    #[test]
    fn flags_and_defaults_like_perftest() {
        let a = parse(&[]).unwrap();
        assert_eq!(a.mode, BenchMode::Lat, "lat unless --mode says otherwise");
        let p = params(&a, BenchMode::Lat).unwrap();
        assert_eq!((p.sizes.clone(), p.iters), (vec![2], 1000));
        let a = parse(&["--mode", "bw"]).unwrap();
        let p = params(&a, BenchMode::Bw).unwrap();
        assert_eq!((p.sizes.clone(), p.iters), (vec![65536], 5000));
        assert_eq!(a.tx_depth, 128);
        let k = a.knobs();
        let d = Knobs::default();
        assert_eq!(
            (k.tx_depth, k.duration, k.inline),
            (d.tx_depth, d.duration, d.inline),
            "the flags' defaults are the knobs' default"
        );
        let a = parse(&["--mode", "bw", "--all-sizes", "--duration", "2s"]).unwrap();
        let p = params(&a, BenchMode::Bw).unwrap();
        assert_eq!(p.sizes.len(), 23);
        assert_eq!(p.sizes[22], 8 << 20);
        let a = parse(&["--mode", "lat", "--qps", "2"]).unwrap();
        assert!(params(&a, BenchMode::Lat).is_err(), "lat runs on one QP");
        let a = parse(&["--mode", "bw", "--qps", "4"]).unwrap();
        assert_eq!(a.qps, 4);
        assert!(parse(&["--mode", "bw", "--qps", "17"]).is_err());
        let a = parse(&["--duration", "2s"]).unwrap();
        assert!(params(&a, BenchMode::Lat).is_err());
        // Sizes and counts are range-checked; bench flags are bench's own.
        assert!(parse(&["--size", "0"]).is_err());
        assert!(parse(&["--iters", "2"]).is_err());
        assert!(parse(&["--mode", "ping"]).is_err());
        assert!(parse(&["--mode", "bw", "--size", "8", "--all-sizes"]).is_err());
        assert!(Args::try_parse_from(["rdma-client", "h", "--size", "64"]).is_err());
    }
}
