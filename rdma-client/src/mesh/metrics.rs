//! The mesh's Prometheus metrics: every family registered once, in [`MeshMetrics::new`], and
//! fed only through [`MeshMetrics::record`] with a typed [`ProbeReport`].
//!
//! Label cardinality is bounded by construction: a series exists only for a path
//! (`peer`, `device`, `rail`) given to [`MeshMetrics::new`] (the configured node names and this
//! node's devices and rails, checked there), and `result`, `state` and `to` come from closed
//! enums.
//! A report naming any other path is refused ([`MetricsError::UnknownPath`]): no string from
//! the network ever becomes a label.
//!
//! **No path is down before its first verdict.** Until the state machine has judged a path
//! (its state is no longer `unknown`), the path has no `rdma_mesh_path_up` series at all and
//! `rdma_mesh_path_state{state="unknown"}` is 1 (the other states 0): the alerting rules read
//! `rdma_mesh_path_up == 0` and `state="degraded"`, so a mesh that has just started (every path
//! unknown for its first probes) alerts on nothing, while the dashboard still shows which
//! paths have no verdict yet.
//!
//! The exposition is the same for the HTTP endpoint (`http`) and the textfile (`textfile`):
//! [`MeshMetrics::encode`] in OpenMetrics or in Prometheus's text format 0.0.4.

// The contract's types, not `super::cause`'s and `super::state`'s re-exports: the metrics
// stay below the judging (which reads the client's errors).
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};
use rdma_proto::events::mesh::{Cause, PairState};
use std::collections::HashSet;
use std::str::FromStr;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Every series name the exposition holds (what Prometheus stores, suffixes included): the
/// dashboard and the alerting rules may use these and nothing else (`cargo xtask`'s
/// `prometheus` tests read this list from this file; a test here checks it against
/// [`MeshMetrics::encode`]).
pub const SERIES: &[&str] = &[
    "rdma_mesh_probes_total",
    "rdma_mesh_rtt_seconds_bucket",
    "rdma_mesh_rtt_seconds_sum",
    "rdma_mesh_rtt_seconds_count",
    "rdma_mesh_network_rtt_seconds_bucket",
    "rdma_mesh_network_rtt_seconds_sum",
    "rdma_mesh_network_rtt_seconds_count",
    "rdma_mesh_host_delay_seconds_bucket",
    "rdma_mesh_host_delay_seconds_sum",
    "rdma_mesh_host_delay_seconds_count",
    "rdma_mesh_path_up",
    "rdma_mesh_path_state",
    "rdma_mesh_path_state_changes_total",
    "rdma_mesh_bandwidth_bytes_per_second",
    "rdma_mesh_last_probe_timestamp_seconds",
    "rdma_mesh_timestamps_supported",
    "rdma_mesh_build_info",
];

/// The histograms' upper bounds, in seconds: 1-2-5 from 1 µs (a write on a real NIC) to 1 s
/// (Soft-RoCE under emulation reaches tens of ms; a probe slower than 1 s lands in `+Inf`).
pub const RTT_BUCKETS: [f64; 19] = [
    1e-6, 2e-6, 5e-6, 1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3, 1e-2, 2e-2, 5e-2, 0.1,
    0.2, 0.5, 1.0,
];

/// At most this many paths per node (peers × this node's devices and rails).
pub const MAX_PATHS: usize = 16_384;
/// A label value (a node, device or rail name) is at most this long.
pub const MAX_LABEL_LEN: usize = 253;

/// A probe's result: `ok` or its failure's cause, a closed set (the `result` label).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ResultLabel {
    /// The verified write (and the lat/bw sample, if any) succeeded in time.
    Ok,
    /// The peer's host did not answer (no route, no TCP connection, timed out).
    Host,
    /// The peer's server answered and refused the session.
    Refused,
    /// The RDMA path failed (queue pair, completion error) while TCP worked.
    Rdma,
    /// It worked, slower than the threshold.
    Slow,
    /// The bytes arrived wrong (the server's checksum disagreed).
    Corrupt,
}

impl ResultLabel {
    /// Every result, in the order of the exposition.
    pub const ALL: [Self; 6] = [
        Self::Ok,
        Self::Host,
        Self::Refused,
        Self::Rdma,
        Self::Slow,
        Self::Corrupt,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Host => "host",
            Self::Refused => "refused",
            Self::Rdma => "rdma",
            Self::Slow => "slow",
            Self::Corrupt => "corrupt",
        }
    }
}

/// The one place a probe's cause becomes its `result` label: `None` (no cause) is `ok`.
impl From<Option<Cause>> for ResultLabel {
    fn from(cause: Option<Cause>) -> Self {
        match cause {
            None => Self::Ok,
            Some(Cause::Host) => Self::Host,
            Some(Cause::Refused) => Self::Refused,
            Some(Cause::Rdma) => Self::Rdma,
            Some(Cause::Slow) => Self::Slow,
            Some(Cause::Corrupt) => Self::Corrupt,
        }
    }
}

impl FromStr for ResultLabel {
    type Err = MetricsError;
    /// One of the closed set's names (`ok`, `host`, … as [`Self::as_str`] writes them).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| MetricsError::UnknownResult(s.to_owned()))
    }
}

/// A path's state once judged (the `state` label of `rdma_mesh_path_state`; before its first
/// verdict the label is [`UNKNOWN_STATE`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PathState {
    /// Probes succeed in time.
    Up,
    /// Probes succeed, some slow or failing: reachable, not healthy.
    Degraded,
    /// Probes fail.
    Down,
}

impl PathState {
    /// Every state.
    pub const ALL: [Self; 3] = [Self::Up, Self::Degraded, Self::Down];

    /// The gauge's state for a pair's: `None` while it is `unknown` (no verdict yet: the
    /// gauges keep what they said, `state="unknown"` and no `rdma_mesh_path_up` before the
    /// first verdict).
    pub fn of(state: PairState) -> Option<Self> {
        match state {
            PairState::Unknown => None,
            PairState::Up => Some(Self::Up),
            PairState::Degraded => Some(Self::Degraded),
            PairState::Down => Some(Self::Down),
        }
    }

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Up => "up",
            Self::Degraded => "degraded",
            Self::Down => "down",
        }
    }
}

/// The `state` label of a path not judged yet (`rdma_mesh_path_state` only: such a path has no
/// `rdma_mesh_path_up`).
pub const UNKNOWN_STATE: &str = "unknown";

/// One path of the mesh: this node's `device` on `rail` to `peer`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Path {
    /// The peer, as configured (`mesh NODES`).
    pub peer: String,
    /// This node's RDMA device (`mlx5_0`, `rxe0`).
    pub device: String,
    /// The rail (`0`, `1`, … or its name).
    pub rail: String,
}

/// What one probe of one path found, as the pure core reports it.
#[derive(Clone, Debug)]
pub struct ProbeReport<'a> {
    /// The configured peer.
    pub peer: &'a str,
    /// This node's device.
    pub device: &'a str,
    /// The rail.
    pub rail: &'a str,
    /// `ok` or the cause of the failure.
    pub result: ResultLabel,
    /// The path's state after this probe (`None`: no verdict yet, the gauges unchanged).
    pub state: Option<PathState>,
    /// This probe changed the path's state (to `state`: the state machine reported a
    /// transition, a `mesh_state` event), counted in `rdma_mesh_path_state_changes_total`.
    pub changed: bool,
    /// The wall-clock round trip (the lat exchange), when the probe got that far.
    pub wall_rtt: Option<Duration>,
    /// The network's share of it, where the device gives completion timestamps.
    pub network_rtt: Option<Duration>,
    /// The hosts' share (wall minus network), where the device gives completion timestamps.
    pub host_delay: Option<Duration>,
    /// A bandwidth sample, bytes per second, when this probe took one.
    pub bandwidth: Option<f64>,
    /// When the probe ended.
    pub at: SystemTime,
}

/// Why a path or a report was refused.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// A report for a path not configured: refused, so that labels stay bounded.
    #[error(
        "no configured mesh path peer={peer:?} device={device:?} rail={rail:?}: metrics are kept only for the paths given at start"
    )]
    UnknownPath {
        /// The peer named.
        peer: String,
        /// The device named.
        device: String,
        /// The rail named.
        rail: String,
    },
    /// A result name outside the closed set.
    #[error("unknown probe result {0:?} (one of ok, host, refused, rdma, slow, corrupt)")]
    UnknownResult(String),
    /// A label value that is empty, too long, or not printable ASCII.
    #[error(
        "{what} {value:?} cannot be a metric label: 1 to {MAX_LABEL_LEN} printable ASCII characters, no quote or backslash"
    )]
    BadLabel {
        /// Which label.
        what: &'static str,
        /// The value.
        value: String,
    },
    /// More paths than [`MAX_PATHS`].
    #[error("{0} mesh paths: at most {MAX_PATHS} per node (fewer peers, devices or rails)")]
    TooManyPaths(usize),
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PathLabels {
    peer: String,
    device: String,
    rail: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    peer: String,
    device: String,
    rail: String,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    peer: String,
    device: String,
    rail: String,
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ChangeLabels {
    peer: String,
    device: String,
    rail: String,
    to: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DeviceLabels {
    device: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
}

type Hist = Family<PathLabels, Histogram, fn() -> Histogram>;
type F64Gauge = Gauge<f64, AtomicU64>;

fn rtt_histogram() -> Histogram {
    Histogram::new(RTT_BUCKETS)
}

/// The mesh's metric families, registered once; cheap to share (`Arc`) between the prober
/// and the endpoints.
pub struct MeshMetrics {
    registry: Registry,
    paths: HashSet<PathLabels>,
    probes: Family<ResultLabels, Counter>,
    rtt: Hist,
    network_rtt: Hist,
    host_delay: Hist,
    up: Family<PathLabels, Gauge>,
    state: Family<StateLabels, Gauge>,
    changes: Family<ChangeLabels, Counter>,
    bandwidth: Family<PathLabels, F64Gauge>,
    last_probe: Family<PathLabels, F64Gauge>,
    timestamps: Family<DeviceLabels, Gauge>,
}

impl std::fmt::Debug for MeshMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MeshMetrics")
            .field("paths", &self.paths.len())
            .finish_non_exhaustive()
    }
}

/// Which text format to encode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// OpenMetrics 1.0 (ends with `# EOF`).
    OpenMetrics,
    /// Prometheus's text format 0.0.4 (what node_exporter's textfile collector reads).
    Text,
}

impl Format {
    /// The HTTP `Content-Type` of the format.
    pub fn content_type(self) -> &'static str {
        match self {
            Self::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Self::Text => prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
        }
    }
}

fn check_label(what: &'static str, value: &str) -> Result<(), MetricsError> {
    let ok = !value.is_empty()
        && value.len() <= MAX_LABEL_LEN
        && value
            .bytes()
            .all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\');
    if ok {
        Ok(())
    } else {
        Err(MetricsError::BadLabel {
            what,
            value: value.to_owned(),
        })
    }
}

impl MeshMetrics {
    /// Registers every family for exactly these paths; every path's counters start at 0 for
    /// each result, its state at `unknown` (and no `rdma_mesh_path_up`) until its first
    /// verdict. Fails on a bad label value or more than [`MAX_PATHS`] paths.
    pub fn new(paths: &[Path]) -> Result<Self, MetricsError> {
        if paths.len() > MAX_PATHS {
            return Err(MetricsError::TooManyPaths(paths.len()));
        }
        let mut set = HashSet::new();
        for p in paths {
            check_label("peer", &p.peer)?;
            check_label("device", &p.device)?;
            check_label("rail", &p.rail)?;
            set.insert(PathLabels {
                peer: p.peer.clone(),
                device: p.device.clone(),
                rail: p.rail.clone(),
            });
        }
        let mut registry = Registry::default();
        let m = Self {
            paths: set,
            probes: Family::default(),
            rtt: Family::new_with_constructor(rtt_histogram),
            network_rtt: Family::new_with_constructor(rtt_histogram),
            host_delay: Family::new_with_constructor(rtt_histogram),
            up: Family::default(),
            state: Family::default(),
            changes: Family::default(),
            bandwidth: Family::default(),
            last_probe: Family::default(),
            timestamps: Family::default(),
            registry: Registry::default(),
        };
        registry.register(
            "rdma_mesh_probes",
            "Mesh probes by peer, local device, rail and result (ok or the failure's cause)",
            m.probes.clone(),
        );
        registry.register_with_unit(
            "rdma_mesh_rtt",
            "Wall-clock round trip of a probe's latency exchange",
            Unit::Seconds,
            m.rtt.clone(),
        );
        registry.register_with_unit(
            "rdma_mesh_network_rtt",
            "Network share of the round trip, from the devices' completion timestamps",
            Unit::Seconds,
            m.network_rtt.clone(),
        );
        registry.register_with_unit(
            "rdma_mesh_host_delay",
            "Host share of the round trip (wall minus network), from completion timestamps",
            Unit::Seconds,
            m.host_delay.clone(),
        );
        registry.register(
            "rdma_mesh_path_up",
            "1 while the path is up or degraded, 0 while it is down; absent before its first verdict",
            m.up.clone(),
        );
        registry.register(
            "rdma_mesh_path_state",
            "The path's state, one-hot: 1 for its current state (unknown before its first verdict)",
            m.state.clone(),
        );
        registry.register(
            "rdma_mesh_path_state_changes",
            "Changes of the path's state (each a mesh_state event, the first verdict included), by the state it went to",
            m.changes.clone(),
        );
        registry.register_with_unit(
            "rdma_mesh_bandwidth",
            "The path's last bandwidth sample",
            Unit::Other("bytes_per_second".to_owned()),
            m.bandwidth.clone(),
        );
        registry.register_with_unit(
            "rdma_mesh_last_probe_timestamp",
            "When the path's last probe ended, Unix time",
            Unit::Seconds,
            m.last_probe.clone(),
        );
        registry.register(
            "rdma_mesh_timestamps_supported",
            "1 when the device has a completion clock (ibv_query_device_ex): its round trips are split into network RTT and host delay where the peer's device stamps too",
            m.timestamps.clone(),
        );
        let build: Family<BuildLabels, Gauge> = Family::default();
        build
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION"),
            })
            .set(1);
        registry.register("rdma_mesh_build_info", "The prober's version", build);
        for p in &m.paths {
            for r in ResultLabel::ALL {
                m.probes.get_or_create(&result_labels(p, r)).inc_by(0);
            }
            for to in PathState::ALL {
                m.changes.get_or_create(&change_labels(p, to)).inc_by(0);
            }
            m.set_state(p, None);
        }
        Ok(Self { registry, ..m })
    }

    /// Records one probe. Refuses (and records nothing for) a path not given to [`Self::new`].
    /// The RTTs are observed when present; the network RTT and host delay only where the
    /// device gives completion timestamps, so their counts may be lower than the wall RTT's.
    pub fn record(&self, report: &ProbeReport<'_>) -> Result<(), MetricsError> {
        let key = PathLabels {
            peer: report.peer.to_owned(),
            device: report.device.to_owned(),
            rail: report.rail.to_owned(),
        };
        if !self.paths.contains(&key) {
            return Err(MetricsError::UnknownPath {
                peer: key.peer,
                device: key.device,
                rail: key.rail,
            });
        }
        self.probes
            .get_or_create(&result_labels(&key, report.result))
            .inc();
        for (family, value) in [
            (&self.rtt, report.wall_rtt),
            (&self.network_rtt, report.network_rtt),
            (&self.host_delay, report.host_delay),
        ] {
            if let Some(d) = value {
                family.get_or_create(&key).observe(d.as_secs_f64());
            }
        }
        if let Some(bw) = report.bandwidth.filter(|b| b.is_finite() && *b >= 0.0) {
            self.bandwidth.get_or_create(&key).set(bw);
        }
        let at = report
            .at
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO);
        self.last_probe.get_or_create(&key).set(at.as_secs_f64());
        if let Some(state) = report.state {
            self.set_state(&key, Some(state));
            if report.changed {
                self.changes
                    .get_or_create(&change_labels(&key, state))
                    .inc();
            }
        }
        Ok(())
    }

    /// Says whether `device` has a completion clock (`rdma_mesh_timestamps_supported`: what
    /// the device said, not whether this build reads its stamps, which it does not yet).
    pub fn set_timestamps_supported(&self, device: &str, yes: bool) -> Result<(), MetricsError> {
        check_label("device", device)?;
        if !self.paths.iter().any(|p| p.device == device) {
            return Err(MetricsError::BadLabel {
                what: "device (not one of the configured paths')",
                value: device.to_owned(),
            });
        }
        self.timestamps
            .get_or_create(&DeviceLabels {
                device: device.to_owned(),
            })
            .set(i64::from(yes));
        Ok(())
    }

    /// Sets a path's state gauges: `None` is `unknown` (no verdict yet), which leaves
    /// `rdma_mesh_path_up` unset, hence absent until the first verdict.
    fn set_state(&self, key: &PathLabels, now: Option<PathState>) {
        if let Some(now) = now {
            self.up
                .get_or_create(key)
                .set(i64::from(now != PathState::Down));
        }
        let states = std::iter::once((UNKNOWN_STATE, now.is_none()))
            .chain(PathState::ALL.map(|s| (s.as_str(), now == Some(s))));
        for (state, is) in states {
            self.state
                .get_or_create(&StateLabels {
                    peer: key.peer.clone(),
                    device: key.device.clone(),
                    rail: key.rail.clone(),
                    state,
                })
                .set(i64::from(is));
        }
    }

    /// The whole exposition in `format`.
    pub fn encode(&self, format: Format) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail; an encoder error would be a bug of ours (a label
        // value the registry cannot write), and the values are checked in `new`.
        let r = match format {
            Format::OpenMetrics => {
                prometheus_client::encoding::text::encode(&mut out, &self.registry)
            }
            Format::Text => {
                prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry)
            }
        };
        debug_assert!(r.is_ok(), "encoding the mesh metrics: {r:?}");
        out
    }
}

fn result_labels(p: &PathLabels, r: ResultLabel) -> ResultLabels {
    ResultLabels {
        peer: p.peer.clone(),
        device: p.device.clone(),
        rail: p.rail.clone(),
        result: r.as_str(),
    }
}

fn change_labels(p: &PathLabels, to: PathState) -> ChangeLabels {
    ChangeLabels {
        peer: p.peer.clone(),
        device: p.device.clone(),
        rail: p.rail.clone(),
        to: to.as_str(),
    }
}

#[cfg(test)]
pub(crate) mod tests;
