//! The guest plan: what `guest-agent` does inside a guest, and what it reports back.
//!
//! A [`Plan`] is written as `plan.json` into a guest's share; the agent configures the node
//! (IP, rxe), runs the [`Step`]s and writes a [`PlanResult`] as `result.json` next to it.
//! Steps in different guests synchronize through marker files in the shared sync directory
//! (`wait_for_file`, `create_file_when_started`, `create_file_when_done`).

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Where the per-guest share is mounted inside the guest.
pub const GUEST_SHARE: &str = "/xtask-share";
/// Where the sync directory (one host dir shared by all guests of a run) is mounted.
pub const GUEST_SYNC: &str = "/xtask-sync";
/// Plan file name inside the share.
pub const PLAN_FILE: &str = "plan.json";
/// Result file name inside the share.
pub const RESULT_FILE: &str = "result.json";

/// Everything a guest does.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    /// Network + RDMA setup of this node.
    pub node: Node,
    /// Steps, run in order.
    #[serde(default)]
    pub steps: Vec<Step>,
    /// Directory holding markers shared across guests.
    #[serde(default = "default_sync_dir")]
    pub sync_dir: String,
}

/// Network + RDMA setup: the NICs (eth0 first), and kernel modules to load before them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Node {
    /// Each NIC: addresses, up or left down, the RDMA device on it.
    pub nics: Vec<Nic>,
    /// Modules beyond the initramfs's (siw and RDMA CM), loaded before the NICs are set up.
    #[serde(default)]
    pub modules: Option<Modules>,
}

/// One network interface of a guest.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Nic {
    /// Interface name (`eth0`).
    pub iface: String,
    /// The MAC it must have (the agent checks: it proves which QEMU NIC became which
    /// interface); `None` to skip the check.
    #[serde(default)]
    pub mac: Option<String>,
    /// IPv4 address with prefix, e.g. `10.0.0.1/24`; `None` for an IPv6-only NIC.
    #[serde(default)]
    pub ipv4: Option<String>,
    /// IPv6 address with prefix, e.g. `fd00::1/64`; the agent waits until its duplicate
    /// address detection is over (no longer `tentative`).
    #[serde(default)]
    pub ipv6: Option<String>,
    /// Bring it up (and wait for carrier); `false` leaves it administratively down, with its
    /// addresses and RDMA device (whose port then stays DOWN).
    #[serde(default = "yes")]
    pub up: bool,
    /// The RDMA device to create on it; `None` for none.
    #[serde(default)]
    pub rdma: Option<RdmaDev>,
}

/// A software RDMA device on a NIC (`rdma link add NAME type KIND netdev IFACE`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RdmaDev {
    pub name: String,
    pub kind: LinkKind,
}

/// Soft-RoCE or Soft-iWARP.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LinkKind {
    /// Soft-RoCE (RoCE v2 over UDP 4791).
    Rxe,
    /// Soft-iWARP (iWARP over TCP; needs RDMA CM).
    Siw,
}

impl LinkKind {
    /// The `type` of `rdma link add`.
    pub fn as_str(self) -> &'static str {
        match self {
            LinkKind::Rxe => "rxe",
            LinkKind::Siw => "siw",
        }
    }
}

/// Kernel modules the agent loads: `modprobe -d ROOT` for the guest kernel's own (its
/// unpacked package, visible in the guest through the host root), then `insmod` for
/// out-of-tree ones (siw.ko).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Modules {
    /// The directory holding `lib/modules/RELEASE` (with its modules.dep).
    pub root: String,
    /// Module names, loaded in order with their dependencies.
    #[serde(default)]
    pub modprobe: Vec<String>,
    /// Paths of `.ko` files, loaded in order after those.
    #[serde(default)]
    pub insmod: Vec<String>,
}

/// `host:port`, an IPv6 address in brackets (`[fd00::1]:7471`), as our clients take a server.
pub fn host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

impl Node {
    /// A guest of the project's virtual link: `ip`/24 on eth0, with Soft-RoCE `rxe0` on it
    /// when `rxe` (the agent then creates it).
    pub fn guest(ip: &str, rxe: bool) -> Self {
        Self {
            nics: vec![Nic::v4("eth0", ip, rxe.then(|| RdmaDev::rxe("rxe0")))],
            modules: None,
        }
    }
}

impl Nic {
    /// `iface` up with `ip`/24, and `rdma` on it.
    pub fn v4(iface: &str, ip: &str, rdma: Option<RdmaDev>) -> Self {
        Self {
            iface: iface.to_owned(),
            mac: None,
            ipv4: Some(format!("{ip}/24")),
            ipv6: None,
            up: true,
            rdma,
        }
    }

    /// `iface` up with only `ip`/64 (IPv6), and `rdma` on it.
    pub fn v6(iface: &str, ip: &str, rdma: Option<RdmaDev>) -> Self {
        Self {
            iface: iface.to_owned(),
            mac: None,
            ipv4: None,
            ipv6: Some(format!("{ip}/64")),
            up: true,
            rdma,
        }
    }
}

impl RdmaDev {
    /// Soft-RoCE device `name`.
    pub fn rxe(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            kind: LinkKind::Rxe,
        }
    }

    /// Soft-iWARP device `name`.
    pub fn siw(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            kind: LinkKind::Siw,
        }
    }
}

/// In a step's argv: replaced by the agent with the step's deadline less
/// [`crate::deadline::GRACE`], in whole seconds, for a command that waits for a marker itself.
pub const DEADLINE_ARG: &str = "{deadline_s}";

/// One command.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Step {
    /// Short label for reports.
    pub name: String,
    /// Program and arguments (no shell).
    pub argv: Vec<String>,
    /// Deadline of one attempt, seconds (for a background step: from its start until it is
    /// collected; [`crate::deadline`] derives it for a step that lives until a marker).
    #[serde(default = "default_timeout")]
    pub timeout_s: f64,
    /// Deadline of the wait for `wait_for_file`, seconds (`None`: `timeout_s`);
    /// [`crate::deadline`] derives it from the steps that create the marker.
    #[serde(default)]
    pub wait_s: Option<f64>,
    /// Start it and move on; it is waited for (until its deadline) when the plan ends.
    #[serde(default)]
    pub background: bool,
    /// Wait (up to `timeout_s`) until this file exists in the sync dir before starting.
    #[serde(default)]
    pub wait_for_file: Option<String>,
    /// Create this file in the sync dir right after starting the command.
    #[serde(default)]
    pub create_file_when_started: Option<String>,
    /// Create this file in the sync dir when the command has finished successfully
    /// (for background steps: when the plan collects it).
    #[serde(default)]
    pub create_file_when_done: Option<String>,
    /// Background steps: once this marker exists in the sync dir (waited for until the
    /// step's deadline, when the plan collects the step), send SIGTERM and give it
    /// [`crate::deadline::GRACE`] to exit. For services that run until told to stop
    /// (`rdma-server --serve`). A foreground step with it waits for the marker itself (it is
    /// told its derived deadline through [`DEADLINE_ARG`] in its argv).
    #[serde(default)]
    pub stop_when_file: Option<String>,
    /// Background steps only: once this marker exists (waited for until the step's deadline),
    /// the step has [`crate::deadline::GRACE`] to exit by itself, then it is killed. For
    /// one-shot processes whose job ends with the work the marker closes (a one-shot server
    /// and its scenario's clients).
    #[serde(default)]
    pub exit_after_file: Option<String>,
    /// Create this file in the sync dir when the command has ended, whatever its outcome
    /// (the marker another guest's step lives until).
    #[serde(default)]
    pub create_file_when_ended: Option<String>,
    /// Names of the steps (in any guest of the run) this one waits on: when it runs out of
    /// time, its error says which of them had started and when.
    #[serde(default)]
    pub waits_on: Vec<String>,
    /// Extra attempts after a failure (foreground steps only), e.g. a client whose server
    /// is not listening yet.
    #[serde(default)]
    pub retries: u32,
    /// Pause between attempts, seconds.
    #[serde(default = "default_retry_delay")]
    pub retry_delay_s: f64,
    /// Exit code that counts as success.
    #[serde(default)]
    pub expect_exit: i32,
    /// Keep going with later steps when this one fails.
    #[serde(default)]
    pub allow_failure: bool,
}

impl Step {
    /// A foreground step with defaults.
    pub fn new(name: impl Into<String>, argv: &[&str]) -> Self {
        Self {
            name: name.into(),
            argv: argv.iter().map(|s| (*s).to_owned()).collect(),
            timeout_s: default_timeout(),
            wait_s: None,
            background: false,
            wait_for_file: None,
            create_file_when_started: None,
            create_file_when_done: None,
            stop_when_file: None,
            exit_after_file: None,
            create_file_when_ended: None,
            waits_on: Vec::new(),
            retries: 0,
            retry_delay_s: default_retry_delay(),
            expect_exit: 0,
            allow_failure: false,
        }
    }

    /// The per-attempt deadline.
    pub fn timeout(&self) -> Duration {
        secs(self.timeout_s)
    }

    /// The deadline of the wait for `wait_for_file`.
    pub fn wait_timeout(&self) -> Duration {
        secs(self.wait_s.unwrap_or(self.timeout_s))
    }

    /// The marker whose appearance ends a background step's job, if any.
    pub fn until_file(&self) -> Option<&str> {
        self.stop_when_file
            .as_deref()
            .or(self.exit_after_file.as_deref())
    }
}

/// `s` seconds as a duration, clamped to a day (a plan file's number is never trusted).
pub fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(if s.is_finite() {
        s.clamp(0.0, 24.0 * 3600.0)
    } else {
        0.0
    })
}

fn default_sync_dir() -> String {
    GUEST_SYNC.to_owned()
}
fn yes() -> bool {
    true
}
fn default_timeout() -> f64 {
    60.0
}
fn default_retry_delay() -> f64 {
    1.0
}

/// What the agent reports (`result.json`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PlanResult {
    /// True when setup and every step succeeded.
    pub ok: bool,
    /// Why the plan failed (first error), if it did.
    pub error: Option<String>,
    /// Node setup commands (ip, rdma).
    pub setup: Vec<StepResult>,
    /// The plan's steps, in plan order (steps not reached are absent).
    pub steps: Vec<StepResult>,
    /// Collected when something failed.
    pub diagnostics: Option<Diagnostics>,
    /// Wall time of the whole plan inside the guest, seconds.
    pub elapsed_s: f64,
}

#[cfg(test)]
impl PlanResult {
    /// The result of the step called `name` (the harnesses read the run's
    /// `scenario::Transcript` instead).
    pub fn step(&self, name: &str) -> Option<&StepResult> {
        self.steps.iter().find(|s| s.name == name)
    }
}

/// What one step did.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StepResult {
    pub name: String,
    pub argv: Vec<String>,
    /// Exit code of the last attempt; `None` if killed or never started.
    pub exit_code: Option<i32>,
    /// Whether it counts as success.
    pub ok: bool,
    /// The last attempt hit its deadline.
    pub timed_out: bool,
    /// How many times it ran.
    pub attempts: u32,
    pub stdout: String,
    pub stderr: String,
    /// Run time of the last attempt, seconds.
    pub elapsed_s: f64,
    /// Time spent waiting for `wait_for_file`, seconds.
    pub waited_s: f64,
    /// Why it failed, when it did not simply exit non-zero (spawn error, marker timeout).
    pub error: Option<String>,
}

impl StepResult {
    /// The first line of its stderr that shows a panic or a backtrace, if any: a panic
    /// anywhere fails the case, whatever the step was allowed or expected to do.
    pub fn panic_line(&self) -> Option<&str> {
        panic_line(&self.stderr)
    }
}

/// The first line of `stderr` that a panic or a backtrace prints: the standard hook's
/// `thread '…' panicked at`, color-eyre's `The application panicked`, a `stack backtrace:`,
/// or either's hint about `RUST_BACKTRACE` (no expected failure of ours prints it).
pub fn panic_line(stderr: &str) -> Option<&str> {
    const SIGNS: [&str; 4] = [
        "panicked at ",
        "The application panicked",
        "stack backtrace:",
        "RUST_BACKTRACE",
    ];
    stderr
        .lines()
        .find(|l| SIGNS.iter().any(|s| l.contains(s)))
        .map(str::trim)
}

/// Diagnostics gathered on failure.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Diagnostics {
    pub rdma_link: String,
    pub ibv_devinfo: String,
    /// dmesg lines mentioning rdma, rxe or ib_.
    pub dmesg: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_or_a_backtrace_is_found_and_an_error_is_not() {
        let std_hook = "thread 'session' panicked at rdma-server/src/workers.rs:150:13:\n\
                        attempt to subtract with overflow\n\
                        note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n";
        assert_eq!(
            panic_line(std_hook),
            Some("thread 'session' panicked at rdma-server/src/workers.rs:150:13:")
        );
        let eyre_hook = "The application panicked (crashed).\nMessage:  boom\n";
        assert_eq!(
            panic_line(eyre_hook),
            Some("The application panicked (crashed).")
        );
        assert!(panic_line("stack backtrace:\n   0: main\n").is_some());
        let refused =
            "Error: the server refused the hello: unauthorized\n  caused by: wrong token\n";
        assert_eq!(panic_line(refused), None);
        assert_eq!(panic_line(""), None);
    }

    #[test]
    fn a_host_and_port_bracket_ipv6() {
        assert_eq!(host_port("10.0.0.1", 7471), "10.0.0.1:7471");
        assert_eq!(host_port("fd00::1", 7499), "[fd00::1]:7499");
    }

    #[test]
    fn minimal_plan_gets_defaults() {
        let p: Plan = serde_json::from_str(
            r#"{"node":{"nics":[{"iface":"eth0","ipv4":"10.0.0.1/24","rdma":{"name":"rxe0","kind":"rxe"}}]},
                "steps":[{"name":"info","argv":["ibv_devinfo"]}]}"#,
        )
        .unwrap();
        let nic = &p.node.nics[0];
        assert!(nic.up && nic.ipv6.is_none() && nic.mac.is_none());
        assert_eq!(p.node.modules, None);
        assert_eq!(p.sync_dir, GUEST_SYNC);
        assert_eq!(p.steps[0].timeout(), Duration::from_secs(60));
        assert!(!p.steps[0].background);
        assert_eq!(p.steps[0], Step::new("info", &["ibv_devinfo"]));
        assert_eq!(p.node, Node::guest("10.0.0.1", true));
        assert_eq!(Node::guest("10.0.0.2", false).nics[0].rdma, None);
        // Today's guests: one NIC, eth0, IPv4 /24, rxe0.
        let g = Node::guest("10.0.0.2", true);
        assert_eq!(g.nics.len(), 1);
        assert_eq!(g.nics[0].iface, "eth0");
        assert_eq!(g.nics[0].ipv4.as_deref(), Some("10.0.0.2/24"));
        assert_eq!(g.nics[0].rdma, Some(RdmaDev::rxe("rxe0")));
    }

    #[test]
    fn nics_ipv6_down_links_siw_and_modules_round_trip() {
        let mut down = Nic::v4("eth1", "10.0.1.1", Some(RdmaDev::rxe("rxe1")));
        down.up = false;
        let node = Node {
            nics: vec![Nic::v6("eth0", "fd00::1", Some(RdmaDev::siw("siw0"))), down],
            modules: Some(Modules {
                root: "/k".into(),
                modprobe: vec!["rdma_ucm".into()],
                insmod: vec!["/c/siw.ko".into()],
            }),
        };
        assert_eq!(node.nics[0].ipv4, None);
        assert_eq!(node.nics[0].ipv6.as_deref(), Some("fd00::1/64"));
        let json = serde_json::to_string(&node).unwrap();
        assert!(json.contains(r#""kind":"siw""#), "{json}");
        assert!(json.contains(r#""up":false"#), "{json}");
        assert_eq!(serde_json::from_str::<Node>(&json).unwrap(), node);
        assert_eq!(LinkKind::Siw.as_str(), "siw");
        // A typo'd kind or field is refused, not ignored.
        assert!(
            serde_json::from_str::<Nic>(r#"{"iface":"eth0","rdma":{"name":"x","kind":"roce"}}"#)
                .is_err()
        );
        assert!(serde_json::from_str::<Nic>(r#"{"iface":"eth0","ip":"10.0.0.1/24"}"#).is_err());
    }

    #[test]
    fn plan_round_trips_and_rejects_typos() {
        let mut s = Step::new("server", &["ib_write_bw", "-x", "1"]);
        s.background = true;
        s.create_file_when_started = Some("server-started".into());
        let p = Plan {
            node: Node::guest("10.0.0.1", false),
            steps: vec![s],
            sync_dir: "/x".into(),
        };
        let json = serde_json::to_string(&p).unwrap();
        assert_eq!(serde_json::from_str::<Plan>(&json).unwrap(), p);
        let bad = r#"{"node":{"nics":[]},"steps":[{"name":"a","argv":["x"],"backgrund":true}]}"#;
        assert!(serde_json::from_str::<Plan>(bad).is_err());
    }

    #[test]
    fn result_round_trips() {
        let r = PlanResult {
            ok: false,
            error: Some("step x failed".into()),
            steps: vec![StepResult {
                name: "x".into(),
                exit_code: Some(1),
                attempts: 2,
                ..Default::default()
            }],
            diagnostics: Some(Diagnostics {
                rdma_link: "link rxe0/1".into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let back: PlanResult = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(back, r);
        assert_eq!(back.step("x").unwrap().attempts, 2);
    }
}
