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

/// Network + RDMA setup.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Node {
    /// IPv4 address with prefix, e.g. `10.0.0.1/24`.
    pub ip: String,
    /// Network interface to configure and put rxe on.
    #[serde(default = "default_iface")]
    pub iface: String,
    /// Name of the rxe device to create; `None` to skip RDMA setup.
    #[serde(default = "default_rxe")]
    pub rxe: Option<String>,
}

impl Node {
    /// A guest of the project's virtual link: `ip`/24 on eth0, with Soft-RoCE `rxe0` on it
    /// when `rxe` (the agent then creates it).
    pub fn guest(ip: &str, rxe: bool) -> Self {
        Self {
            ip: format!("{ip}/24"),
            iface: default_iface(),
            rxe: rxe.then(|| "rxe0".to_owned()),
        }
    }
}

/// One command.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Step {
    /// Short label for reports.
    pub name: String,
    /// Program and arguments (no shell).
    pub argv: Vec<String>,
    /// Deadline of one attempt (and of the wait for `wait_for_file`), seconds.
    #[serde(default = "default_timeout")]
    pub timeout_s: f64,
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
    /// Background steps only: once this marker exists in the sync dir (waited for until the
    /// step's deadline, when the plan collects the step), send SIGTERM and give it 10 s to exit.
    /// For services that run until told to stop (`rdma-server --serve`).
    #[serde(default)]
    pub stop_when_file: Option<String>,
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
            background: false,
            wait_for_file: None,
            create_file_when_started: None,
            create_file_when_done: None,
            stop_when_file: None,
            retries: 0,
            retry_delay_s: default_retry_delay(),
            expect_exit: 0,
            allow_failure: false,
        }
    }

    /// The per-attempt deadline.
    pub fn timeout(&self) -> Duration {
        Duration::from_secs_f64(self.timeout_s.clamp(0.0, 24.0 * 3600.0))
    }
}

fn default_sync_dir() -> String {
    GUEST_SYNC.to_owned()
}
fn default_iface() -> String {
    "eth0".to_owned()
}
#[allow(clippy::unnecessary_wraps)]
fn default_rxe() -> Option<String> {
    Some("rxe0".to_owned())
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

impl PlanResult {
    /// The result of the step called `name`.
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
    fn minimal_plan_gets_defaults() {
        let p: Plan = serde_json::from_str(
            r#"{"node":{"ip":"10.0.0.1/24"},"steps":[{"name":"info","argv":["ibv_devinfo"]}]}"#,
        )
        .unwrap();
        assert_eq!(p.node.iface, "eth0");
        assert_eq!(p.node.rxe.as_deref(), Some("rxe0"));
        assert_eq!(p.sync_dir, GUEST_SYNC);
        assert_eq!(p.steps[0].timeout(), Duration::from_secs(60));
        assert!(!p.steps[0].background);
        assert_eq!(p.steps[0], Step::new("info", &["ibv_devinfo"]));
        assert_eq!(p.node, Node::guest("10.0.0.1", true));
        assert_eq!(Node::guest("10.0.0.2", false).rxe, None);
    }

    #[test]
    fn plan_round_trips_and_rejects_typos() {
        let mut s = Step::new("server", &["ib_write_bw", "-x", "1"]);
        s.background = true;
        s.create_file_when_started = Some("server-started".into());
        let p = Plan {
            node: Node {
                ip: "10.0.0.1/24".into(),
                iface: "eth0".into(),
                rxe: None,
            },
            steps: vec![s],
            sync_dir: "/x".into(),
        };
        let json = serde_json::to_string(&p).unwrap();
        assert_eq!(serde_json::from_str::<Plan>(&json).unwrap(), p);
        let bad =
            r#"{"node":{"ip":"10.0.0.1/24"},"steps":[{"name":"a","argv":["x"],"backgrund":true}]}"#;
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
