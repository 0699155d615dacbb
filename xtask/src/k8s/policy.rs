//! What `cargo xtask k8s-validate` requires of the manifests beyond the API's schemas: every
//! pod hardened (non-root, no privilege escalation, read-only root filesystem, no capability
//! but `IPC_LOCK`, the runtime's default seccomp profile, no service-account token), and every
//! container that runs `rdma-server` given a memory limit its pinned-memory budget fits with
//! room for the process itself.
//!
//! The manifests are read as JSON by the validator venv's own YAML reader (PyYAML, which
//! kubernetes-validate depends on): [`load_dir`].

use crate::exec;
use color_eyre::eyre::{Result, WrapErr as _, bail};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::Duration;
use xshell::{Shell, cmd};

/// rdma-server's `--max-pinned` when none is given (`DEFAULT_MAX_PINNED` in
/// rdma-server/src/cli.rs; a test below holds the two together).
pub const SERVER_DEFAULT_MAX_PINNED: u64 = 256 << 20;
/// What rdma-server needs beyond its pinned buffers: the queues (4 MiB of slack in its own
/// budget), a thread and its stack per session (at most 16), the verbs provider's mappings,
/// the allocator's arenas. A memory limit below `--max-pinned` plus this gets the server
/// OOM-killed when its sessions fill the budget.
pub const SERVER_HEADROOM: u64 = 128 << 20;
/// The only capability a container may add back (registered memory is locked memory).
pub const ALLOWED_CAP: &str = "IPC_LOCK";

/// Every document of every manifest in `files`, each with its file's name, read with the
/// venv's Python (PyYAML) and handed over as JSON. Empty documents are left out.
///
/// # Errors
/// When Python fails on a file (not YAML), naming the file.
pub fn load(venv: &Path, files: &[PathBuf]) -> Result<Vec<(String, Value)>> {
    const SCRIPT: &str = "import json, sys, yaml\n\
with open(sys.argv[1]) as f:\n    docs = [d for d in yaml.safe_load_all(f) if d is not None]\n\
print(json.dumps(docs))\n";
    let python = venv.join("bin/python");
    let sh = Shell::new()?;
    let mut all = Vec::new();
    for file in files {
        let out = exec::output_with(
            cmd!(sh, "{python} -c {SCRIPT} {file}"),
            None,
            Duration::from_secs(60),
        )?;
        let shown = format!("reading {} as YAML", file.display());
        exec::check_output(&shown, &out)?;
        let docs: Vec<Value> = serde_json::from_slice(&out.stdout)
            .wrap_err_with(|| format!("{shown}: the reader's JSON"))?;
        let name = file.file_name().map_or_else(
            || file.display().to_string(),
            |n| n.to_string_lossy().into(),
        );
        all.extend(docs.into_iter().map(|d| (name.clone(), d)));
    }
    Ok(all)
}

/// Fails listing every finding of [`findings`] over `docs`.
///
/// # Errors
/// When any document breaks a rule.
pub fn check(docs: &[(String, Value)]) -> Result<()> {
    let found: Vec<String> = docs
        .iter()
        .flat_map(|(file, doc)| findings(file, doc))
        .collect();
    if found.is_empty() {
        return Ok(());
    }
    bail!(
        "{} finding(s) in the manifests:\n  {}",
        found.len(),
        found.join("\n  ")
    )
}

/// What is wrong with one document (nothing for a kind that makes no pod).
#[must_use]
pub fn findings(file: &str, doc: &Value) -> Vec<String> {
    let kind = doc["kind"].as_str().unwrap_or("?");
    let name = doc["metadata"]["name"].as_str().unwrap_or("?");
    let Some(pod) = pod_spec(doc) else {
        return Vec::new();
    };
    let at = format!("{file}: {kind} {name}");
    let mut out = Vec::new();
    let pod_sc = &pod["securityContext"];
    if pod_sc["seccompProfile"]["type"] != "RuntimeDefault" {
        out.push(format!(
            "{at}: the pod has no `securityContext.seccompProfile: {{type: RuntimeDefault}}`"
        ));
    }
    if pod["automountServiceAccountToken"] != false {
        out.push(format!(
            "{at}: the pod does not set `automountServiceAccountToken: false` (it never calls the API)"
        ));
    }
    let containers = ["initContainers", "containers"]
        .iter()
        .filter_map(|k| pod[*k].as_array())
        .flatten();
    for c in containers {
        let at = format!("{at}, container {}", c["name"].as_str().unwrap_or("?"));
        out.extend(container_findings(&at, pod_sc, c));
        if runs_server(c) {
            out.extend(memory_finding(&at, c));
        }
    }
    out
}

/// The pod template of a workload, or the spec of a bare Pod.
fn pod_spec(doc: &Value) -> Option<&Value> {
    match doc["kind"].as_str()? {
        "Pod" => Some(&doc["spec"]),
        "Job" | "DaemonSet" | "Deployment" | "StatefulSet" | "ReplicaSet" => {
            Some(&doc["spec"]["template"]["spec"])
        }
        "CronJob" => Some(&doc["spec"]["jobTemplate"]["spec"]["template"]["spec"]),
        _ => None,
    }
}

/// The hardening rules for one container; `runAsNonRoot`, `runAsUser` and `seccompProfile`
/// may come from the pod (a container's own setting wins).
fn container_findings(at: &str, pod_sc: &Value, c: &Value) -> Vec<String> {
    let sc = &c["securityContext"];
    let inherited = |key: &str| {
        if sc[key].is_null() {
            &pod_sc[key]
        } else {
            &sc[key]
        }
    };
    let mut out = Vec::new();
    let mut need = |ok: bool, what: &str| {
        if !ok {
            out.push(format!("{at}: {what}"));
        }
    };
    need(
        inherited("runAsNonRoot") == true,
        "not `runAsNonRoot: true` (in its securityContext or the pod's)",
    );
    need(
        inherited("runAsUser").as_u64().is_some_and(|u| u > 0),
        "no non-zero `runAsUser` (in its securityContext or the pod's)",
    );
    let seccomp = inherited("seccompProfile");
    need(
        seccomp.is_null() || seccomp["type"] == "RuntimeDefault",
        "its own seccompProfile is not RuntimeDefault",
    );
    need(
        sc["allowPrivilegeEscalation"] == false,
        "no `allowPrivilegeEscalation: false` in its securityContext",
    );
    need(
        sc["readOnlyRootFilesystem"] == true,
        "no `readOnlyRootFilesystem: true` in its securityContext (mount an emptyDir where it writes)",
    );
    need(sc["privileged"] != true, "`privileged: true`");
    let caps = &sc["capabilities"];
    need(
        caps["drop"]
            .as_array()
            .is_some_and(|d| d.iter().any(|x| x == "ALL")),
        "its capabilities do not `drop: [\"ALL\"]`",
    );
    for cap in caps["add"].as_array().into_iter().flatten() {
        need(
            cap == ALLOWED_CAP,
            &format!("adds capability {cap}: only {ALLOWED_CAP} may be added back"),
        );
    }
    out
}

/// The container's command line (`command` then `args`), as one text.
fn command_text(c: &Value) -> String {
    ["command", "args"]
        .iter()
        .filter_map(|k| c[*k].as_array())
        .flatten()
        .filter_map(Value::as_str)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Whether the container runs rdma-server.
fn runs_server(c: &Value) -> bool {
    command_text(c)
        .split_whitespace()
        .any(|w| w == "rdma-server" || w.ends_with("/rdma-server"))
}

/// `--max-pinned` on a command line (`--max-pinned N` or `--max-pinned=N`), else the server's
/// default; `Err` names a value that is not a byte count.
pub fn max_pinned(command: &str) -> Result<u64, String> {
    let words: Vec<&str> = command.split_whitespace().collect();
    let value = words.iter().enumerate().find_map(|(i, w)| {
        if *w == "--max-pinned" {
            Some(words.get(i + 1).copied().unwrap_or(""))
        } else {
            w.strip_prefix("--max-pinned=")
        }
    });
    match value {
        None => Ok(SERVER_DEFAULT_MAX_PINNED),
        Some(v) => v
            .parse()
            .map_err(|_| format!("--max-pinned {v:?} is not a number of bytes")),
    }
}

/// A Kubernetes memory quantity in bytes: plain, or with a binary (Ki..Ei) or decimal (k..E)
/// suffix; `None` for what this reader does not take (fractions, exponents, milli).
#[must_use]
pub fn quantity(text: &str) -> Option<u64> {
    const SUFFIXES: [(&str, u64); 12] = [
        ("Ki", 1 << 10),
        ("Mi", 1 << 20),
        ("Gi", 1 << 30),
        ("Ti", 1 << 40),
        ("Pi", 1 << 50),
        ("Ei", 1 << 60),
        ("k", 1_000),
        ("M", 1_000_000),
        ("G", 1_000_000_000),
        ("T", 1_000_000_000_000),
        ("P", 1_000_000_000_000_000),
        ("E", 1_000_000_000_000_000_000),
    ];
    let (digits, unit) = SUFFIXES
        .iter()
        .find_map(|(s, m)| text.strip_suffix(s).map(|d| (d, *m)))
        .unwrap_or((text, 1));
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse::<u64>().ok()?.checked_mul(unit)
}

/// A container running rdma-server must have a memory limit that holds its `--max-pinned`
/// plus [`SERVER_HEADROOM`].
fn memory_finding(at: &str, c: &Value) -> Option<String> {
    let pinned = match max_pinned(&command_text(c)) {
        Ok(p) => p,
        Err(e) => return Some(format!("{at}: {e}")),
    };
    let limit = &c["resources"]["limits"]["memory"];
    let mib = |b: u64| b as f64 / f64::from(1 << 20);
    let Some(text) = limit.as_str() else {
        return Some(format!(
            "{at}: runs rdma-server without `resources.limits.memory`: give it at least \
             --max-pinned ({:.0} MiB) plus {:.0} MiB",
            mib(pinned),
            mib(SERVER_HEADROOM)
        ));
    };
    let Some(bytes) = quantity(text) else {
        return Some(format!(
            "{at}: memory limit {text:?} is not a quantity this check reads (use e.g. 256Mi)"
        ));
    };
    (pinned.saturating_add(SERVER_HEADROOM) > bytes).then(|| {
        format!(
            "{at}: --max-pinned {:.0} MiB plus {:.0} MiB for the process itself exceeds its \
             memory limit {text}: sessions filling the budget get it OOM-killed. Lower \
             --max-pinned or raise the limit",
            mib(pinned),
            mib(SERVER_HEADROOM)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn quantities_and_max_pinned_are_read() {
        assert_eq!(quantity("256Mi"), Some(256 << 20));
        assert_eq!(quantity("1Gi"), Some(1 << 30));
        assert_eq!(quantity("128M"), Some(128_000_000));
        assert_eq!(quantity("268435456"), Some(268_435_456));
        for bad in ["", "Mi", "1.5Gi", "1e9", "500m", "-1Mi"] {
            assert_eq!(quantity(bad), None, "{bad}");
        }
        assert_eq!(max_pinned("exec rdma-server --serve"), Ok(256 << 20));
        assert_eq!(max_pinned("rdma-server --max-pinned 4096 --json"), Ok(4096));
        assert_eq!(max_pinned("rdma-server --max-pinned=8192"), Ok(8192));
        assert!(max_pinned("rdma-server --max-pinned 64Mi").is_err());
    }

    /// The default here is the server's own.
    #[test]
    fn the_default_budget_is_the_servers() {
        let cli = include_str!("../../../rdma-server/src/cli.rs");
        assert!(
            cli.contains("pub const DEFAULT_MAX_PINNED: u64 = 256 << 20;"),
            "rdma-server's DEFAULT_MAX_PINNED changed: update SERVER_DEFAULT_MAX_PINNED"
        );
    }

    fn hardened_pod(command: &str, memory: Option<&str>) -> Value {
        let mut c = json!({
            "name": "server",
            "command": ["sh", "-c", command],
            "securityContext": {
                "allowPrivilegeEscalation": false,
                "readOnlyRootFilesystem": true,
                "capabilities": {"drop": ["ALL"]},
            },
        });
        if let Some(m) = memory {
            c["resources"] = json!({"limits": {"memory": m}});
        }
        json!({
            "kind": "DaemonSet",
            "metadata": {"name": "x"},
            "spec": {"template": {"spec": {
                "automountServiceAccountToken": false,
                "securityContext": {
                    "runAsNonRoot": true,
                    "runAsUser": 65532,
                    "seccompProfile": {"type": "RuntimeDefault"},
                },
                "containers": [c],
            }}},
        })
    }

    /// The review's case: the default 256 MiB budget under a 256Mi limit is refused, as is no
    /// limit at all; 64 MiB under 256Mi passes.
    #[test]
    fn a_server_budget_must_fit_its_memory_limit() {
        let ok = hardened_pod(
            "exec rdma-server --serve --max-pinned 67108864",
            Some("256Mi"),
        );
        assert_eq!(findings("f", &ok), Vec::<String>::new());
        let full = hardened_pod("exec rdma-server --serve --json", Some("256Mi"));
        let found = findings("f", &full);
        assert!(
            found.len() == 1 && found[0].contains("OOM-killed"),
            "{found:?}"
        );
        let unbounded = hardened_pod("exec rdma-server --serve --max-pinned 4096", None);
        let found = findings("f", &unbounded);
        assert!(
            found.len() == 1 && found[0].contains("resources.limits.memory"),
            "{found:?}"
        );
        // A client's container is not held to it.
        let client = hardened_pod("exec rdma-client mesh a,b", None);
        assert!(findings("f", &client).is_empty());
    }

    /// Each hardening rule, broken alone, is named.
    #[test]
    fn each_missing_hardening_is_named() {
        let base = hardened_pod("rdma-client mesh a", None);
        let cases: [(&str, Value, &str); 8] = [
            (
                "/spec/template/spec/securityContext/runAsNonRoot",
                json!(false),
                "runAsNonRoot",
            ),
            (
                "/spec/template/spec/securityContext/runAsUser",
                json!(0),
                "runAsUser",
            ),
            (
                "/spec/template/spec/securityContext/seccompProfile",
                json!({"type": "Unconfined"}),
                "seccompProfile",
            ),
            (
                "/spec/template/spec/automountServiceAccountToken",
                json!(true),
                "automountServiceAccountToken",
            ),
            (
                "/spec/template/spec/containers/0/securityContext/allowPrivilegeEscalation",
                json!(true),
                "allowPrivilegeEscalation",
            ),
            (
                "/spec/template/spec/containers/0/securityContext/readOnlyRootFilesystem",
                json!(false),
                "readOnlyRootFilesystem",
            ),
            (
                "/spec/template/spec/containers/0/securityContext/capabilities",
                json!({"add": ["IPC_LOCK"]}),
                "drop",
            ),
            (
                "/spec/template/spec/containers/0/securityContext/capabilities",
                json!({"drop": ["ALL"], "add": ["NET_ADMIN"]}),
                "NET_ADMIN",
            ),
        ];
        for (pointer, value, named) in cases {
            let mut doc = base.clone();
            *doc.pointer_mut(pointer).expect(pointer) = value;
            let found = findings("f", &doc);
            assert!(
                !found.is_empty() && found.iter().all(|f| f.contains(named)),
                "{pointer}: {found:?}"
            );
        }
        // A container's own non-root user stands in for the pod's.
        let mut doc = base;
        let sc = doc
            .pointer_mut("/spec/template/spec/securityContext")
            .expect("pod securityContext");
        *sc = json!({"seccompProfile": {"type": "RuntimeDefault"}});
        let c = doc
            .pointer_mut("/spec/template/spec/containers/0/securityContext")
            .expect("container securityContext");
        c["runAsNonRoot"] = json!(true);
        c["runAsUser"] = json!(1000);
        assert!(findings("f", &doc).is_empty(), "{:?}", findings("f", &doc));
    }
}
