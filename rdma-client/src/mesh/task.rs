//! `rdma-client mesh NODES`: its flags ([`MeshArgs`]), the typed task
//! ([`MeshTask`]) and [`run`], which sets up what the runner needs (the node list and rank by
//! the fabric check's rules, the local device, the metrics and their endpoints, the signals)
//! and runs it with the real prober.

use super::MeshConfig;
use super::clock::Answer;
use super::error::MeshError;
use super::http::{Limits, MetricsServer};
use super::metrics::{MeshMetrics, Path};
use super::probe::{Ends, VerbsProber};
use super::runner::{self, Plan, Sinks};
use super::state::StateConfig;
use super::textfile::Textfile;
use super::topology::{self, Tors};
use crate::fabric::ranks::{self, RankError, World};
use crate::output::Output;
use color_eyre::eyre::{Report, Result, WrapErr as _};
use rdma_app as app;
use rdma_core_rs::{Context, LocalPort};
use rdma_proto::DEFAULT_PORT;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What `rdma-client help mesh` and the man page say of the mesh, above its flags.
pub const ABOUT: &str = "\
Probe peers until stopped: every node runs `rdma-server --serve` and `rdma-client mesh NODES`, \
which probes its peers until SIGINT or SIGTERM (or --mesh-cycles). Schedule: every --every (with \
up to --jitter of it at random, and a phase per node) each node probes --fan-out peers, a \
rotation that covers every ordered pair within ceil((N-1)/fan-out) intervals (a cycle) and gives \
each server --fan-out probers per interval, whatever N. A probe is the fabric check's steps: a \
verified write of --probe-bytes, --lat-iters 2-byte ping-pongs (its round trip), a bandwidth \
sample (--bw-iters 64 KiB writes) every --bw-every probes of a pair (with --rails, on each rail: \
a path each), within min(--every, 30s). The write and the lat exchange keep their sessions for \
the path's next probe where the server keeps them that long (rdma-server --serve --keep-alive, \
rounds: fresh rkeys, no new connection or queue pairs; --no-reuse: new sessions each time); a bw \
sample is a session of its own. A peer whose previous probe still runs is skipped, not queued. \
Causes: host (no TCP, no banner), refused (the server said no), rdma (TCP works, the RDMA path \
does not), corrupt (the verdict failed), slow (--slow-factor x the pair's median round trip). \
States: up, degraded (slow or lossy), down, changed only after --down-after, --degrade-after or \
--up-after probes in a row. Output: a mesh_probe event per probe, mesh_state on each change; \
Prometheus metrics (rdma_mesh_*) on --metrics-listen /metrics and in --metrics-textfile. Round \
trips are split into network time and host delay where both devices stamp completions (each lat \
exchange ends with a stamped exchange), else wall time; mesh_started says once whether the \
device has a completion clock.";

/// The mesh's flags (`rdma-client mesh`).
#[derive(Debug, clap::Args)]
#[command(next_help_heading = "Mesh")]
pub struct MeshArgs {
    /// The nodes: a hostlist (node[01-03], or a,b,c) or @FILE (one name a line, # comments)
    #[arg(value_name = "NODES", help_heading = None::<&str>)]
    pub nodes: String,

    /// This node's rank among NODES (sorted); default: its place by host name
    #[arg(long, value_name = "N")]
    pub rank: Option<usize>,

    /// TCP port of every peer's rdma-server
    #[arg(long, value_name = "PORT", default_value_t = DEFAULT_PORT)]
    pub mesh_port: u16,

    /// One probe round every this long
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = app::parse_duration)]
    pub every: Duration,

    /// Peers probed per interval (and probers per server per interval); at most N-1
    #[arg(long, value_name = "N", default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub fan_out: u64,

    /// Random delay of each round, as a fraction of --every (0 to 1)
    #[arg(long, value_name = "FRACTION", default_value_t = 0.1, value_parser = fraction)]
    pub jitter: f64,

    /// A pair goes down after this many failed probes in a row
    #[arg(long, value_name = "N", default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub down_after: u32,

    /// A pair goes degraded after this many slow (or lossy) probes in a row
    #[arg(long, value_name = "N", default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub degrade_after: u32,

    /// A pair comes back up after this many good probes in a row
    #[arg(long, value_name = "N", default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub up_after: u32,

    /// A round trip is slow above this many times the pair's median (and above 200 us)
    #[arg(long, value_name = "FACTOR", default_value_t = 3.0, value_parser = above_one)]
    pub slow_factor: f64,

    /// Bytes of each probe's verified write
    #[arg(long, value_name = "N", default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=1_048_576))]
    pub probe_bytes: u64,

    /// 2-byte ping-pongs of each probe (its round trip; 0: none)
    #[arg(long, value_name = "N", default_value_t = LAT_ITERS, value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    pub lat_iters: u64,

    /// A bandwidth sample every N-th probe of a pair; 0: never
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub bw_every: u64,

    /// 64 KiB writes of each bandwidth sample
    #[arg(long, value_name = "N", default_value_t = 200, value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    pub bw_iters: u64,

    /// Probe every rail (auto: each ACTIVE RoCE port) or the first N, each a path of its own
    #[arg(
        long,
        value_name = "auto|N",
        value_parser = crate::fabric::rails::parse,
        conflicts_with_all = ["device", "gid_index"]
    )]
    pub rails: Option<crate::fabric::rails::Rails>,

    /// Serve Prometheus metrics on ADDR (/metrics), e.g. `[::]:9478`
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<SocketAddr>,

    /// Write the metrics for node_exporter's textfile collector to PATH (*.prom)
    #[arg(long, value_name = "PATH")]
    pub metrics_textfile: Option<PathBuf>,

    /// Stop after N cycles (every ordered pair probed N times); default: at SIGINT or SIGTERM
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub mesh_cycles: Option<u64>,

    /// Open new sessions for every probe, never keeping one for the path's next probe
    #[arg(long)]
    pub no_reuse: bool,

    /// Each node's ToR switch: Slurm's topology.conf (SwitchName=S Nodes=HOSTLIST) or NODE SWITCH
    /// lines; probes then go within each ToR in full and across ToRs by a rotating sample
    #[arg(long, value_name = "FILE")]
    pub topology: Option<PathBuf>,
}

fn fraction(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if (0.0..=1.0).contains(&v) => Ok(v),
        _ => Err(format!("{text:?} is not a fraction from 0 to 1 (e.g. 0.1)")),
    }
}

fn above_one(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 1.0 => Ok(v),
        _ => Err(format!("{text:?} is not a factor above 1 (e.g. 3)")),
    }
}

/// `rdma-client mesh`, from the command line.
#[derive(Debug)]
pub struct MeshTask {
    pub mesh: MeshArgs,
    /// `--rank`.
    pub rank: Option<usize>,
    /// `--rails`: probe every rail, each a path of its own.
    pub rails: Option<crate::fabric::rails::Rails>,
    /// `--lat-iters` (default [`LAT_ITERS`]).
    pub lat_iters: u64,
    /// `--bw-iters`.
    pub bw_iters: u64,
    pub notify: Option<rdma_proto::Notify>,
    pub knobs: crate::bench::Knobs,
    pub session: crate::session::SessionOptions,
    pub device: rdma_app::device::DeviceArgs,
}

/// The mesh's default `--lat-iters`.
pub const LAT_ITERS: u64 = 20;

impl MeshArgs {
    /// The node list as a hostlist: NODES, or `@FILE`'s names joined.
    ///
    /// # Errors
    /// An unreadable or empty file.
    pub fn node_list(&self, list: &str) -> Result<String, MeshError> {
        let Some(path) = list.strip_prefix('@') else {
            return Ok(list.to_owned());
        };
        let text = std::fs::read_to_string(path).map_err(|source| MeshError::ReadList {
            path: path.to_owned(),
            source,
        })?;
        let names: Vec<&str> = text
            .lines()
            .map(|l| l.split('#').next().unwrap_or("").trim())
            .filter(|l| !l.is_empty())
            .collect();
        if names.is_empty() {
            return Err(MeshError::EmptyList(path.to_owned()));
        }
        Ok(names.join(","))
    }

    /// Each node of `world` under its ToR, from `--topology` (`None` without one).
    ///
    /// # Errors
    /// An unreadable or bad file, a node of the mesh it does not place.
    pub fn tors(&self, world: &World) -> Result<Option<Tors>, MeshError> {
        let Some(path) = &self.topology else {
            return Ok(None);
        };
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| MeshError::ReadTopology {
            path: shown.clone(),
            source,
        })?;
        topology::parse(&text)
            .and_then(|leaves| Tors::place(&world.hosts, &leaves))
            .map(Some)
            .map_err(|source| MeshError::Topology {
                path: shown,
                source,
            })
    }

    /// The knobs, checked.
    ///
    /// # Errors
    /// A knob that cannot work (clap refuses most first).
    pub fn config(&self) -> Result<MeshConfig, MeshError> {
        let d = MeshConfig::default();
        let c = MeshConfig {
            every: self.every,
            fan_out: usize::try_from(self.fan_out).unwrap_or(usize::MAX),
            jitter: self.jitter,
            seed: 0,
            state: StateConfig {
                down_after: self.down_after,
                degrade_after: self.degrade_after,
                up_after: self.up_after,
                slow_factor: self.slow_factor,
                ..d.state
            },
        };
        c.validate().map_err(|e| MeshError::Config(e.to_string()))?;
        Ok(c)
    }
}

/// How long until a path is probed again, at most: a cycle of intervals and a jitter window.
fn revisit(config: &MeshConfig, nodes: usize, tors: Option<&Tors>) -> Duration {
    let cycle = config.schedule(nodes, tors).map_or(1, |s| s.cycle());
    config
        .every
        .saturating_mul(u32::try_from(cycle).unwrap_or(u32::MAX))
        .saturating_add(config.every.mul_f64(config.jitter))
}

/// The world of `mesh LIST [--rank N]`: by rank, else by this host's name.
///
/// # Errors
/// A bad list, fewer than two nodes, a rank out of range, this host not in it.
pub fn world(list: &str, rank: Option<usize>) -> Result<World, RankError> {
    match rank {
        Some(r) => ranks::explicit(list, r),
        None => ranks::by_hostname(list, &crate::fabric::this_host()),
    }
}

/// What each of `devices` (the probes' local devices, in rail order) answers when asked, once,
/// for its completion clock: the open device without `--rails`; with it, each rail's device,
/// opened for the question (the probes open theirs later, per local address).
fn clocks(ends: &Ends<'_>, devices: &[String]) -> Vec<Answer> {
    devices
        .iter()
        .map(|name| {
            let asked = match ends {
                Ends::One(local) => local.ctx.completion_clock(),
                Ends::Rails { .. } => {
                    Context::open(Some(name)).and_then(|ctx| ctx.completion_clock())
                }
            };
            asked.map_err(|e| e.to_string())
        })
        .collect()
}

/// Runs `mesh` until SIGINT/SIGTERM or `--mesh-cycles`.
pub fn run(task: &MeshTask, out: &Output) -> Result<()> {
    let m = &task.mesh;
    let list = m.node_list(&m.nodes)?;
    let world = world(&list, task.rank)?;
    let config = m.config()?;
    let tors = m.tors(&world)?;
    let token = task.session.token.load()?;
    // The user's mistakes before the device: they are the same on a host without RDMA.
    let textfile = m.metrics_textfile.clone().map(Textfile::new).transpose()?;
    let me = &world.hosts[world.rank];
    let (ends, devices) = match task.rails {
        None => {
            let local = task.device.open().map_err(Report::new)?;
            let device = local.ctx.name().to_owned();
            (Ends::One(Arc::new(local)), vec![device])
        }
        Some(want) => {
            let found = LocalPort::rails().map_err(Report::new)?;
            let rails = crate::fabric::rails::select(me, found, want)?;
            let devices = rails.iter().map(|r| r.device.clone()).collect();
            let ends = Ends::Rails {
                me: me.clone(),
                rails,
                device: &task.device,
                opened: Mutex::new(HashMap::new()),
            };
            (ends, devices)
        }
    };
    // Each node's ToR by rank: the topology's leaf switch, or `all` without one.
    let tor_of = |rank: usize| {
        tors.as_ref()
            .and_then(|t| t.of.get(rank).and_then(|&i| t.names.get(i)))
            .map_or(super::topology::ONE_TOR, String::as_str)
    };
    let paths: Vec<Path> = (0..world.size())
        .filter(|&p| p != world.rank)
        .flat_map(|p| {
            devices
                .iter()
                .enumerate()
                .map(move |(rail, device)| (p, rail, device))
        })
        .map(|(p, rail, device)| Path {
            peer: world.hosts[p].clone(),
            peer_tor: tor_of(p).to_owned(),
            device: device.clone(),
            rail: rail.to_string(),
        })
        .collect();
    let metrics = Arc::new(MeshMetrics::new(me, tor_of(world.rank), &paths)?);
    let clocks = clocks(&ends, &devices);
    let server = match m.metrics_listen {
        Some(addr) => Some(MetricsServer::bind(
            addr,
            metrics.clone(),
            Limits::default(),
        )?),
        None => None,
    };
    let stop = rdma_app::wake::Stop::new().wrap_err("making the mesh's wake-up socket")?;
    stop.on_signals(&[signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM])
        .wrap_err("installing the SIGINT/SIGTERM handler")?;
    let payload: Vec<u8> = (0..m.probe_bytes).map(|i| b'a' + (i % 26) as u8).collect();
    let prober = VerbsProber {
        ends,
        port: m.mesh_port,
        payload: &payload,
        notify: task.notify,
        token,
        session: task.session.clone(),
        knobs: task.knobs,
        lat_iters: task.lat_iters,
        bw_iters: task.bw_iters,
        // The probes' queue pairs get `--qp-timeout` (LocalPort::qp_timeout, from the flags).
        ack_timeout: rdma_core_rs::RtsParams {
            timeout: task.device.qp_timeout,
            ..rdma_core_rs::RtsParams::default()
        }
        .ack_timeout(),
        kept: super::kept::Kept::new(!m.no_reuse),
        kept_lat: super::kept::Kept::new(!m.no_reuse),
        revisit: revisit(&config, world.size(), tors.as_ref()),
        stamps: true,
        wait_busy: false,
    };
    let plan = Plan {
        world: &world,
        tors: tors.as_ref(),
        config,
        bw_every: m.bw_every,
        cycles: m.mesh_cycles,
        devices: &devices,
        clocks: &clocks,
    };
    let sinks = Sinks {
        metrics: Some(&metrics),
        textfile: textfile.as_ref(),
    };
    runner::run(&plan, &prober, &sinks, &stop, &mut |e| out.emit(e))?;
    if let Some(s) = server {
        s.stop();
    }
    Ok(())
}
