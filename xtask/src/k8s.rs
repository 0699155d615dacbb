//! `cargo xtask k8s-validate`: the Kubernetes manifests under `deploy/k8s/` checked offline
//! against the API's JSON schemas, strictly (an unknown field is an error), with the
//! `kubernetes-validate` Python package (it bundles the schemas of every Kubernetes version).
//!
//! The package lives in its own venv, `target/xtask/k8s-venv`, made once (python3 and
//! python3-venv come from the deps group `k8s`); its version and the Kubernetes version
//! validated against are pinned here. Beyond the schemas, [`policy`] holds every pod to the
//! project's hardening and every rdma-server container's budget to its memory limit.

pub mod policy;

use crate::deps::{self, Group};
use crate::exec;
use clap::Args;
use color_eyre::eyre::{Result, WrapErr as _, bail};
use std::path::{Path, PathBuf};
use std::time::Duration;
use xshell::{Shell, cmd};

/// The validator, pinned: its schemas and its messages are what the test relies on.
pub const VALIDATOR: &str = "kubernetes-validate==1.37.0";
/// The Kubernetes version the manifests are checked against: the oldest they support (the
/// server sidecar, an init container with `restartPolicy: Always`, needs 1.29 or later).
pub const KUBERNETES: &str = "1.30.0";

/// Arguments of `cargo xtask k8s-validate`.
#[derive(Debug, Args)]
pub struct K8sArgs {
    /// Directory of manifests (default: deploy/k8s of the workspace).
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

/// Entry point.
pub fn cmd(args: &K8sArgs) -> Result<()> {
    deps::ensure(&[Group::K8s])?;
    let dir = args
        .dir
        .clone()
        .unwrap_or_else(|| exec::workspace_root().join("deploy/k8s"));
    let venv = exec::workspace_root().join("target/xtask/k8s-venv");
    let tool = ensure_validator(&venv)?;
    let files = validate_dir(&tool, &dir)?;
    policy::check(&policy::load(&venv, &files)?).wrap_err_with(|| {
        format!(
            "a manifest in {} breaks the project's policy",
            dir.display()
        )
    })?;
    println!(
        "k8s-validate: {} manifest(s) in {} valid for Kubernetes {KUBERNETES} (strict), hardened, server budgets within their memory limits",
        files.len(),
        dir.display()
    );
    Ok(())
}

/// Makes the venv and installs the pinned validator into it, once; returns the program.
pub fn ensure_validator(venv: &Path) -> Result<PathBuf> {
    // One install at a time: the tests that need it run in parallel threads.
    static INSTALL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _once = INSTALL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let tool = venv.join("bin/kubernetes-validate");
    let stamp = venv.join(".installed");
    if tool.is_file() && std::fs::read_to_string(&stamp).is_ok_and(|s| s.trim() == VALIDATOR) {
        return Ok(tool);
    }
    let sh = Shell::new()?;
    println!(
        "k8s-validate: installing {VALIDATOR} into {} (once)",
        venv.display()
    );
    exec::run(cmd!(sh, "python3 -m venv {venv}"))
        .wrap_err("making the venv (python3-venv: `cargo xtask deps --groups k8s`)")?;
    let pip = venv.join("bin/pip");
    let out = exec::output_with(
        cmd!(
            sh,
            "{pip} install --quiet --disable-pip-version-check {VALIDATOR}"
        ),
        None,
        exec::INSTALL_TIMEOUT,
    )?;
    exec::check_output(&format!("{} install {VALIDATOR}", pip.display()), &out)
        .wrap_err("installing the manifest validator from PyPI")?;
    if !tool.is_file() {
        bail!("{VALIDATOR} installed but {} is not there", tool.display());
    }
    std::fs::write(&stamp, VALIDATOR).wrap_err_with(|| format!("writing {}", stamp.display()))?;
    Ok(tool)
}

/// Validates every `.yaml`/`.yml` file of `dir` (strictly, against [`KUBERNETES`]); returns
/// them. Fails naming the validator's complaints, or when there is no manifest at all.
pub fn validate_dir(tool: &Path, dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .wrap_err_with(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
        .collect();
    files.sort();
    if files.is_empty() {
        bail!("no Kubernetes manifest (*.yaml) in {}", dir.display());
    }
    let sh = Shell::new()?;
    let list = &files;
    let out = exec::output_with(
        cmd!(
            sh,
            "{tool} --strict --quiet --kubernetes-version {KUBERNETES} {list...}"
        ),
        None,
        Duration::from_secs(120),
    )?;
    // It reports failures on stdout; check_output quotes stdout when stderr is empty.
    let shown = format!(
        "kubernetes-validate --strict -k {KUBERNETES} {}",
        dir.display()
    );
    exec::check_output(&shown, &out)
        .wrap_err_with(|| format!("a manifest in {} is not valid Kubernetes", dir.display()))?;
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shipped manifests pass, and a typo'd field under `--strict` fails with the field
    /// named: the validator can fail. Installs the pinned validator into the workspace's venv
    /// (network once). Never skipped: without python3 it fails, naming the deps group
    /// (`cargo xtask test` installs it before the unit tests).
    #[test]
    fn the_manifests_pass_and_a_typo_fails() {
        assert!(
            exec::which("python3").is_some(),
            "no python3: run `cargo xtask deps --groups k8s`"
        );
        let root = exec::workspace_root();
        let tool = ensure_validator(&root.join("target/xtask/k8s-venv")).unwrap();
        let shipped = root.join("deploy/k8s");
        let files = validate_dir(&tool, &shipped).unwrap();
        assert!(files.len() >= 5, "{files:?}");
        let job = std::fs::read_to_string(shipped.join("job.yaml")).unwrap();
        assert!(job.contains("completionMode: Indexed") && job.contains("subdomain: fabric"));
        // Issue 16, item 3: both containers take the token from the Secret, and a
        // NetworkPolicy admits only the check's pods to the handshake port.
        assert_eq!(job.matches("name: fabric-token").count(), 2, "{job}");
        let secret = std::fs::read_to_string(shipped.join("secret.yaml")).unwrap();
        assert!(secret.contains("kind: Secret") && secret.contains("name: fabric-token"));
        let policy = std::fs::read_to_string(shipped.join("networkpolicy.yaml")).unwrap();
        assert!(policy.contains("kind: NetworkPolicy") && policy.contains("port: 7471"));
        // Issue 24: the mesh as a DaemonSet, metrics on the mesh's port, with the flags the
        // packaged unit passes too.
        assert!(files.len() >= 6, "{files:?}");
        let mesh = std::fs::read_to_string(shipped.join("mesh-daemonset.yaml")).unwrap();
        assert!(mesh.contains("kind: DaemonSet") && mesh.contains("containerPort: 9478"));
        assert!(
            mesh.contains(
                r#"rdma-client mesh "$RDMA_MESH_NODES" --every 10s --metrics-listen '[::]:9478' --json"#
            ),
            "{mesh}"
        );
        assert_eq!(mesh.matches("name: fabric-token").count(), 2, "{mesh}");

        let broken = tempfile::tempdir().unwrap();
        // The field itself (the header comment names it too).
        let typo = job.replacen("\n      subdomain: ", "\n      subdomian: ", 1);
        assert_ne!(typo, job, "the pod template's subdomain moved");
        std::fs::write(broken.path().join("job.yaml"), typo).unwrap();
        let err = format!("{:#}", validate_dir(&tool, broken.path()).unwrap_err());
        assert!(err.contains("subdomian"), "{err}");

        // The DaemonSet is the second document of its file: it is validated too.
        let mesh_dir = tempfile::tempdir().unwrap();
        let typo = mesh.replacen("hostNetwork: true", "hostNetwrok: true", 1);
        assert_ne!(typo, mesh);
        std::fs::write(mesh_dir.path().join("mesh-daemonset.yaml"), typo).unwrap();
        let err = format!("{:#}", validate_dir(&tool, mesh_dir.path()).unwrap_err());
        assert!(err.contains("hostNetwrok"), "{err}");

        let empty = tempfile::tempdir().unwrap();
        assert!(validate_dir(&tool, empty.path()).is_err());
    }

    /// The security review's items on the manifests: every pod hardened (non-root, no
    /// escalation, read-only root, no capability but IPC_LOCK, RuntimeDefault seccomp), and
    /// every rdma-server container's `--max-pinned` plus the process's own headroom within its
    /// memory limit. Read by the same venv as the schema check (its PyYAML).
    #[test]
    fn the_shipped_manifests_are_hardened_and_fit_their_memory() {
        assert!(
            exec::which("python3").is_some(),
            "no python3: run `cargo xtask deps --groups k8s`"
        );
        let root = exec::workspace_root();
        let venv = root.join("target/xtask/k8s-venv");
        ensure_validator(&venv).unwrap();
        let dir = root.join("deploy/k8s");
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
            .collect();
        files.sort();
        let docs = policy::load(&venv, &files).unwrap();
        // Every workload is seen: the Job and the DaemonSet.
        let kinds: Vec<&str> = docs
            .iter()
            .filter_map(|(_, d)| d["kind"].as_str())
            .collect();
        assert!(
            kinds.contains(&"Job") && kinds.contains(&"DaemonSet"),
            "{kinds:?}"
        );
        if let Err(e) = policy::check(&docs) {
            panic!("{e}");
        }
    }
}
