//! The mesh's Prometheus metrics: every family registered once, in [`MeshMetrics::new`], and
//! fed only through [`MeshMetrics::record`] with a typed [`ProbeReport`].
//!
//! # Series bounded by the topology, not the fleet
//!
//! A prober of a mesh of N nodes in T ToRs exports:
//!
//! - **always**, per destination ToR (`peer_tor`, with `scope` `tor` for its own ToR and
//!   `across` for the others) and rail: its probes that succeeded and that failed
//!   (`rdma_mesh_tor_probes_total{outcome="ok"|"failed"}`; a slow probe succeeded), and the sum
//!   of the round trips of those that succeeded (`rdma_mesh_tor_rtt_seconds_total`: divided by
//!   the `ok` probes, the ToR's mean round trip): 3 series a ToR. The cause of a failure is a
//!   path's (below): a ToR's failures count alike;
//! - per `scope` and rail, its probes by result (`rdma_mesh_probe_results_total`: ok or the
//!   failure's cause), the round-trip histograms, the last bandwidth sample, and the
//!   prober's own: its paths by state (`rdma_mesh_paths`), its ToR and the number of its peers
//!   there (`rdma_mesh_tor_peers`), its last probe, its devices' clocks, its version;
//! - **per path only while the path is not healthy**: from its first probe that failed or was
//!   slow, or its first verdict other than `up` (the first failure shows before the path goes
//!   down, so that `increase()` sees the failures that take it down), until it has been `up`
//!   with every probe `ok` for [`KEEP_RECOVERED`], the path's `rdma_mesh_path_up`,
//!   `rdma_mesh_path_state` (one-hot over up, degraded, down), `rdma_mesh_probes_total` by result
//!   and `rdma_mesh_path_state_changes_total`: [`SERIES_PER_PATH`] series. Their counters count
//!   from the prober's start (kept in memory while the series are not exposed), so a path that
//!   breaks again continues where it was and `increase()` never sees a reset.
//!
//! So a healthy prober of 10,000 nodes in 250 ToRs exports about 900 series (the
//! `healthy_fleet` test counts them), and each broken path adds [`SERIES_PER_PATH`].
//!
//! Label values are bounded by construction: `peer`, `peer_tor`, `tor`, `device` and `rail` come
//! only from the paths given to [`MeshMetrics::new`] (checked there), `link` from the node's
//! name and its peer's; `result`, `state` and
//! `scope` from closed sets. A report naming any other path is refused
//! ([`MetricsError::UnknownPath`]): no string from the network ever becomes a label.
//!
//! **No path is down before its first verdict.** A path without a verdict (`unknown`) has no
//! series of its own; `rdma_mesh_paths{state="unknown"}` counts it. The alerting rules read
//! `rdma_mesh_path_up == 0`, so a mesh that has just started alerts on nothing.
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
use std::collections::{BTreeSet, HashMap, HashSet};
use std::str::FromStr;
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Every series name the exposition holds (what Prometheus stores, suffixes included): the
/// dashboard and the alerting rules may use these and nothing else (`cargo xtask`'s
/// `prometheus` tests read this list from this file; a test here checks it against
/// [`MeshMetrics::encode`]).
pub const SERIES: &[&str] = &[
    "rdma_mesh_tor_probes_total",
    "rdma_mesh_tor_rtt_seconds_total",
    "rdma_mesh_probe_results_total",
    "rdma_mesh_rtt_seconds_bucket",
    "rdma_mesh_rtt_seconds_sum",
    "rdma_mesh_rtt_seconds_count",
    "rdma_mesh_network_rtt_seconds_bucket",
    "rdma_mesh_network_rtt_seconds_sum",
    "rdma_mesh_network_rtt_seconds_count",
    "rdma_mesh_host_delay_seconds_bucket",
    "rdma_mesh_host_delay_seconds_sum",
    "rdma_mesh_host_delay_seconds_count",
    "rdma_mesh_bandwidth_bytes_per_second",
    "rdma_mesh_paths",
    "rdma_mesh_tor_peers",
    "rdma_mesh_last_probe_timestamp_seconds",
    "rdma_mesh_timestamps_supported",
    "rdma_mesh_build_info",
    "rdma_mesh_probes_total",
    "rdma_mesh_path_up",
    "rdma_mesh_path_state",
    "rdma_mesh_path_state_changes_total",
];

/// The series a path has of its own while it is not healthy: `rdma_mesh_path_up`, three of
/// `rdma_mesh_path_state`, six of `rdma_mesh_probes_total`, `rdma_mesh_path_state_changes_total`.
pub const SERIES_PER_PATH: usize = 1 + 3 + 6 + 1;

/// How long a path that came back `up` keeps its own series: the `RdmaMeshPathFlapping` rule's
/// window, so that a path that keeps coming and going is watched without a gap.
pub const KEEP_RECOVERED: Duration = Duration::from_secs(30 * 60);

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

/// One path of the mesh: this node's `device` on `rail` to `peer`, which sits under the ToR
/// `peer_tor`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Path {
    /// The peer, as configured (`mesh NODES`).
    pub peer: String,
    /// The peer's ToR (the topology's leaf switch; `all` without a topology).
    pub peer_tor: String,
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

/// The `link` label of the path between `a` and `b`, whichever probes it: `a~b` in name order.
fn link(a: &str, b: &str) -> String {
    let (first, second) = if a <= b { (a, b) } else { (b, a) };
    format!("{first}~{second}")
}

/// Within this node's own ToR, or across to another (the `scope` label).
fn scope(own: bool) -> &'static str {
    if own { "tor" } else { "across" }
}

/// A path's own series (exposed while it is not healthy).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PathLabels {
    tor: String,
    peer: String,
    /// The two ends, in name order (`a~b`): the same for both probers of a link, so that a
    /// rule can make one alert of both directions.
    link: String,
    peer_tor: String,
    scope: &'static str,
    device: String,
    rail: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PathResult {
    #[prometheus(flatten)]
    path: PathLabels,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PathStateLabels {
    #[prometheus(flatten)]
    path: PathLabels,
    state: &'static str,
}

/// A destination ToR's aggregates, as this node sees it over one device and rail.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TorLabels {
    tor: String,
    peer_tor: String,
    scope: &'static str,
    device: String,
    rail: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TorResult {
    #[prometheus(flatten)]
    tor: TorLabels,
    outcome: &'static str,
}

/// The `outcome` of a probe in a ToR's aggregates.
fn outcome(result: ResultLabel) -> &'static str {
    match result {
        ResultLabel::Ok | ResultLabel::Slow => "ok",
        _ => "failed",
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ScopeLabels {
    scope: &'static str,
    device: String,
    rail: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ScopeResult {
    #[prometheus(flatten)]
    scope: ScopeLabels,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RailLabels {
    device: String,
    rail: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateCount {
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OwnTor {
    tor: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DeviceLabels {
    device: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
}

type Hist = Family<ScopeLabels, Histogram, fn() -> Histogram>;
type F64Gauge = Gauge<f64, AtomicU64>;
type F64Counter = Counter<f64, AtomicU64>;

fn rtt_histogram() -> Histogram {
    Histogram::new(RTT_BUCKETS)
}

/// What the metrics keep of one path, exposed or not.
#[derive(Debug)]
struct Entry {
    labels: PathLabels,
    /// Its probes by result, in [`ResultLabel::ALL`]'s order, since the start.
    counts: [u64; ResultLabel::ALL.len()],
    /// Its changes of state since the start.
    changes: u64,
    /// Its state (`None`: no verdict yet).
    state: Option<PathState>,
    /// Since when it is `up` with every probe `ok` (while it is).
    healthy_since: Option<SystemTime>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Key {
    peer: String,
    device: String,
    rail: String,
}

#[derive(Debug, Default)]
struct Paths {
    by_key: HashMap<Key, Entry>,
    /// The paths whose own series are exposed (few in a healthy fleet).
    exposed: BTreeSet<Key>,
}

/// The mesh's metric families, registered once; cheap to share (`Arc`) between the prober
/// and the endpoints.
pub struct MeshMetrics {
    registry: Registry,
    paths: Mutex<Paths>,
    tor_probes: Family<TorResult, Counter>,
    tor_rtt: Family<TorLabels, F64Counter>,
    results: Family<ScopeResult, Counter>,
    rtt: Hist,
    network_rtt: Hist,
    host_delay: Hist,
    bandwidth: Family<ScopeLabels, F64Gauge>,
    states: Family<StateCount, Gauge>,
    last_probe: Family<RailLabels, F64Gauge>,
    timestamps: Family<DeviceLabels, Gauge>,
    path_probes: Family<PathResult, Counter>,
    up: Family<PathLabels, Gauge>,
    state: Family<PathStateLabels, Gauge>,
    changes: Family<PathLabels, Counter>,
}

impl std::fmt::Debug for MeshMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MeshMetrics").finish_non_exhaustive()
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

fn state_label(state: Option<PathState>) -> &'static str {
    state.map_or(UNKNOWN_STATE, PathState::as_str)
}

/// Raises a counter to `want` (a counter exposed anew continues from the path's own count).
fn raise_to(counter: &Counter, want: u64) {
    let have = counter.get();
    if want > have {
        counter.inc_by(want - have);
    }
}

impl MeshMetrics {
    /// Registers every family for exactly these paths, this node (`node`, as the mesh's node
    /// list names it) sitting under the ToR `tor`;
    /// every destination ToR's probes and round trips start at 0, every path is `unknown`
    /// (with no series of its own) until its first verdict. Fails on a bad label value or more
    /// than [`MAX_PATHS`] paths.
    pub fn new(node: &str, tor: &str, paths: &[Path]) -> Result<Self, MetricsError> {
        if paths.len() > MAX_PATHS {
            return Err(MetricsError::TooManyPaths(paths.len()));
        }
        check_label("node", node)?;
        check_label("tor", tor)?;
        let mut by_key = HashMap::new();
        let mut mates = BTreeSet::new();
        for p in paths {
            check_label("peer", &p.peer)?;
            check_label("peer's ToR", &p.peer_tor)?;
            check_label("device", &p.device)?;
            check_label("rail", &p.rail)?;
            let own = p.peer_tor == tor;
            if own {
                mates.insert(p.peer.as_str());
            }
            let labels = PathLabels {
                tor: tor.to_owned(),
                peer: p.peer.clone(),
                link: link(node, &p.peer),
                peer_tor: p.peer_tor.clone(),
                scope: scope(own),
                device: p.device.clone(),
                rail: p.rail.clone(),
            };
            let key = Key {
                peer: p.peer.clone(),
                device: p.device.clone(),
                rail: p.rail.clone(),
            };
            let entry = Entry {
                labels,
                counts: [0; ResultLabel::ALL.len()],
                changes: 0,
                state: None,
                healthy_since: None,
            };
            by_key.insert(key, entry);
        }
        let mut registry = Registry::default();
        let m = Self {
            paths: Mutex::new(Paths::default()),
            tor_probes: Family::default(),
            tor_rtt: Family::default(),
            results: Family::default(),
            rtt: Family::new_with_constructor(rtt_histogram),
            network_rtt: Family::new_with_constructor(rtt_histogram),
            host_delay: Family::new_with_constructor(rtt_histogram),
            bandwidth: Family::default(),
            states: Family::default(),
            last_probe: Family::default(),
            timestamps: Family::default(),
            path_probes: Family::default(),
            up: Family::default(),
            state: Family::default(),
            changes: Family::default(),
            registry: Registry::default(),
        };
        registry.register(
            "rdma_mesh_tor_probes",
            "Probes to a destination ToR (peer_tor) by local device, rail and outcome (ok, slow ones included, or failed)",
            m.tor_probes.clone(),
        );
        registry.register_with_unit(
            "rdma_mesh_tor_rtt",
            "Sum of the wall-clock round trips of the probes to a destination ToR that succeeded (divide by its outcome=\"ok\" probes for the mean)",
            Unit::Seconds,
            m.tor_rtt.clone(),
        );
        registry.register(
            "rdma_mesh_probe_results",
            "This node's probes within its ToR (scope tor) or across, by local device, rail and result (ok or the failure's cause)",
            m.results.clone(),
        );
        registry.register_with_unit(
            "rdma_mesh_rtt",
            "Wall-clock round trip of a probe's latency exchange, within this node's ToR (scope tor) or across",
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
        registry.register_with_unit(
            "rdma_mesh_bandwidth",
            "The last bandwidth sample within this node's ToR (scope tor) or across",
            Unit::Other("bytes_per_second".to_owned()),
            m.bandwidth.clone(),
        );
        registry.register(
            "rdma_mesh_paths",
            "This node's paths by state (unknown before their first verdict)",
            m.states.clone(),
        );
        let own: Family<OwnTor, Gauge> = Family::default();
        own.get_or_create(&OwnTor {
            tor: tor.to_owned(),
        })
        .set(i64::try_from(mates.len()).unwrap_or(i64::MAX));
        registry.register(
            "rdma_mesh_tor_peers",
            "This node's ToR (tor) and how many of its peers sit under it",
            own,
        );
        registry.register_with_unit(
            "rdma_mesh_last_probe_timestamp",
            "When this node's last probe over the device and rail ended, Unix time",
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
        registry.register(
            "rdma_mesh_probes",
            "A path's probes by result, since the prober's start; exposed while the path is not healthy",
            m.path_probes.clone(),
        );
        registry.register(
            "rdma_mesh_path_up",
            "1 while the path is up or degraded, 0 while it is down; exposed while the path is not healthy",
            m.up.clone(),
        );
        registry.register(
            "rdma_mesh_path_state",
            "The path's state, one-hot; exposed while the path is not healthy",
            m.state.clone(),
        );
        registry.register(
            "rdma_mesh_path_state_changes",
            "Changes of the path's state (each a mesh_state event, the first verdict included), since the prober's start; exposed while the path is not healthy",
            m.changes.clone(),
        );
        // Each destination ToR's and each scope's counters, once each (many paths share them).
        let tors: HashSet<TorLabels> = by_key.values().map(|e| tor_labels(&e.labels)).collect();
        for tor in tors {
            for outcome in ["ok", "failed"] {
                m.tor_probes
                    .get_or_create(&TorResult {
                        tor: tor.clone(),
                        outcome,
                    })
                    .inc_by(0);
            }
            m.tor_rtt.get_or_create(&tor).inc_by(0.0);
        }
        let scopes: HashSet<ScopeLabels> =
            by_key.values().map(|e| scope_labels(&e.labels)).collect();
        for scope in scopes {
            for r in ResultLabel::ALL {
                m.results
                    .get_or_create(&ScopeResult {
                        scope: scope.clone(),
                        result: r.as_str(),
                    })
                    .inc_by(0);
            }
        }
        m.states
            .get_or_create(&StateCount {
                state: UNKNOWN_STATE,
            })
            .set(i64::try_from(by_key.len()).unwrap_or(i64::MAX));
        for s in PathState::ALL {
            m.states
                .get_or_create(&StateCount { state: s.as_str() })
                .set(0);
        }
        let paths = Mutex::new(Paths {
            by_key,
            exposed: BTreeSet::new(),
        });
        Ok(Self {
            registry,
            paths,
            ..m
        })
    }

    /// Records one probe. Refuses (and records nothing for) a path not given to [`Self::new`].
    /// The RTTs are observed when present; the network RTT and host delay only where the
    /// device gives completion timestamps, so their counts may be lower than the wall RTT's.
    /// A path's own series appear with its first probe, once judged, that is not `ok` or whose
    /// verdict is not `up`, and go once it has been `up` with every probe `ok` for
    /// [`KEEP_RECOVERED`] (told at any path's report, by the reports' clock).
    pub fn record(&self, report: &ProbeReport<'_>) -> Result<(), MetricsError> {
        let key = Key {
            peer: report.peer.to_owned(),
            device: report.device.to_owned(),
            rail: report.rail.to_owned(),
        };
        let mut paths = self.paths.lock().unwrap_or_else(|p| p.into_inner());
        let Paths { by_key, exposed } = &mut *paths;
        let Some(e) = by_key.get_mut(&key) else {
            return Err(MetricsError::UnknownPath {
                peer: key.peer,
                device: key.device,
                rail: key.rail,
            });
        };
        let tor = tor_labels(&e.labels);
        let result = report.result;
        e.counts[result as usize] += 1;
        self.tor_probes
            .get_or_create(&TorResult {
                tor: tor.clone(),
                outcome: outcome(result),
            })
            .inc();
        let by_scope = scope_labels(&e.labels);
        self.results
            .get_or_create(&ScopeResult {
                scope: by_scope.clone(),
                result: result.as_str(),
            })
            .inc();
        if let Some(wall) = report.wall_rtt.filter(|_| outcome(result) == "ok") {
            self.tor_rtt.get_or_create(&tor).inc_by(wall.as_secs_f64());
        }
        for (family, value) in [
            (&self.rtt, report.wall_rtt),
            (&self.network_rtt, report.network_rtt),
            (&self.host_delay, report.host_delay),
        ] {
            if let Some(d) = value {
                family.get_or_create(&by_scope).observe(d.as_secs_f64());
            }
        }
        if let Some(bw) = report.bandwidth.filter(|b| b.is_finite() && *b >= 0.0) {
            self.bandwidth.get_or_create(&by_scope).set(bw);
        }
        let at = report
            .at
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO);
        self.last_probe
            .get_or_create(&RailLabels {
                device: key.device.clone(),
                rail: key.rail.clone(),
            })
            .set(at.as_secs_f64());
        if let Some(state) = report.state {
            if report.changed {
                e.changes += 1;
            }
            if e.state != Some(state) {
                self.states
                    .get_or_create(&StateCount {
                        state: state_label(e.state),
                    })
                    .dec();
                self.states
                    .get_or_create(&StateCount {
                        state: state.as_str(),
                    })
                    .inc();
                e.state = Some(state);
            }
            let healthy = state == PathState::Up && result == ResultLabel::Ok;
            if healthy {
                e.healthy_since.get_or_insert(report.at);
            } else {
                e.healthy_since = None;
            }
            if !healthy || exposed.contains(&key) {
                self.expose(e);
                exposed.insert(key);
            }
        }
        // Paths up for long enough lose their own series (few are exposed in a healthy fleet).
        let healed: Vec<Key> = exposed
            .iter()
            .filter(|k| {
                by_key
                    .get(k)
                    .and_then(|e| e.healthy_since)
                    .is_some_and(|since| {
                        report.at.duration_since(since).unwrap_or(Duration::ZERO) >= KEEP_RECOVERED
                    })
            })
            .cloned()
            .collect();
        for k in healed {
            if let Some(e) = by_key.get(&k) {
                self.hide(e);
            }
            exposed.remove(&k);
        }
        Ok(())
    }

    /// Says whether `device` has a completion clock (`rdma_mesh_timestamps_supported`: what
    /// the device said, not whether this build reads its stamps, which it does not yet).
    pub fn set_timestamps_supported(&self, device: &str, yes: bool) -> Result<(), MetricsError> {
        check_label("device", device)?;
        let paths = self.paths.lock().unwrap_or_else(|p| p.into_inner());
        if !paths.by_key.keys().any(|k| k.device == device) {
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

    /// Brings a path's own series to what it knows (creating them, the first time, with the
    /// path's counts since the start).
    fn expose(&self, e: &Entry) {
        let now = e.state;
        if let Some(now) = now {
            self.up
                .get_or_create(&e.labels)
                .set(i64::from(now != PathState::Down));
        }
        for s in PathState::ALL {
            self.state
                .get_or_create(&PathStateLabels {
                    path: e.labels.clone(),
                    state: s.as_str(),
                })
                .set(i64::from(now == Some(s)));
        }
        for (r, n) in ResultLabel::ALL.into_iter().zip(e.counts) {
            raise_to(
                &self.path_probes.get_or_create(&PathResult {
                    path: e.labels.clone(),
                    result: r.as_str(),
                }),
                n,
            );
        }
        raise_to(&self.changes.get_or_create(&e.labels), e.changes);
    }

    /// Takes a path's own series out of the exposition (its counts stay, for the next time).
    fn hide(&self, e: &Entry) {
        self.up.remove(&e.labels);
        for s in PathState::ALL {
            self.state.remove(&PathStateLabels {
                path: e.labels.clone(),
                state: s.as_str(),
            });
        }
        for r in ResultLabel::ALL {
            self.path_probes.remove(&PathResult {
                path: e.labels.clone(),
                result: r.as_str(),
            });
        }
        self.changes.remove(&e.labels);
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

fn scope_labels(p: &PathLabels) -> ScopeLabels {
    ScopeLabels {
        scope: p.scope,
        device: p.device.clone(),
        rail: p.rail.clone(),
    }
}

fn tor_labels(p: &PathLabels) -> TorLabels {
    TorLabels {
        tor: p.tor.clone(),
        peer_tor: p.peer_tor.clone(),
        scope: p.scope,
        device: p.device.clone(),
        rail: p.rail.clone(),
    }
}

#[cfg(test)]
pub(crate) mod tests;
