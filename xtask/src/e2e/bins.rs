//! The binaries the guests run: the release build users get (the very files the packages
//! hold), built once by [`build`] with everything else the guests run beside them.

use crate::exec;
use color_eyre::eyre::{Result, WrapErr as _, bail, eyre};
use std::path::PathBuf;
use std::time::Duration;
use xshell::{Shell, cmd};

/// The packages the scenarios run: our two binaries, as the package ships them, and the
/// test-only peers that misbehave on purpose (`rdma-misbehave`).
pub const PACKAGES: [&str; 3] = ["rdma-server", "rdma-client", "rdma-misbehave"];

/// The profile every guest, the packages and the bench run: what users get, so that what
/// the suite proves is what ships (a release build wraps on integer overflow where a debug
/// build panics; only the release build's behaviour counts).
pub const PROFILE: &str = "release";

/// Builds, in one cargo invocation of the release profile, everything the guests run:
/// [`PACKAGES`] and rdma-core-rs's examples (the self-test, the RDMA CM example). One
/// invocation, so that the features of shared dependencies are the same for all of them and
/// the binaries the packages hold are these, not a second build.
pub fn build() -> Result<()> {
    let sh = Shell::new()?;
    println!(
        "build: {} and rdma-core-rs's examples ({PROFILE})",
        PACKAGES.join(", ")
    );
    let packages: Vec<String> = PACKAGES.iter().map(|p| format!("--package={p}")).collect();
    // Naming a target (`--example`) makes cargo build only the named targets: ask for the
    // binaries too.
    exec::run_loud(
        cmd!(
            sh,
            "cargo build --profile {PROFILE} {packages...} --bins --package rdma-core-rs --example loopback --example cm_connect"
        ),
        Duration::from_secs(1800),
    )
    .wrap_err("building the release binaries")
}

/// Where [`build`] puts the binaries (honours `CARGO_TARGET_DIR`).
pub fn dir() -> PathBuf {
    crate::vm::target_dir().join(PROFILE)
}

/// Absolute paths of the binaries (valid in the guests too: they see the host's root).
#[derive(Debug, Clone)]
pub struct Bins {
    pub server: String,
    pub client: String,
    /// The test-only peers (`rdma-misbehave`): `rdma-client` and `rdma-server` with one step
    /// done wrong (`--fault KIND`).
    pub misbehave_client: String,
    pub misbehave_server: String,
    pub xtask: String,
    /// rdma-core-rs's device self-test, when asked for.
    pub selftest: Option<String>,
    /// rdma-core-rs's RDMA CM example, built with the self-test.
    pub cm_example: Option<String>,
}

impl Bins {
    pub fn locate(selftest: bool) -> Result<Self> {
        let dir = dir();
        let path = |name: &str| -> Result<String> {
            let p = dir.join(name);
            if !p.exists() {
                bail!(
                    "{} is missing: run `cargo build --profile {PROFILE} {}` (or drop --no-build)",
                    p.display(),
                    PACKAGES.map(|p| format!("-p {p}")).join(" ")
                );
            }
            p.to_str()
                .map(str::to_owned)
                .ok_or_else(|| eyre!("{} is not UTF-8", p.display()))
        };
        Ok(Self {
            server: path("rdma-server")?,
            client: path("rdma-client")?,
            misbehave_client: path("rdma-misbehave-client")?,
            misbehave_server: path("rdma-misbehave-server")?,
            xtask: exec::self_exe()?,
            selftest: if selftest {
                Some(path("examples/loopback")?)
            } else {
                None
            },
            cm_example: if selftest {
                Some(path("examples/cm_connect")?)
            } else {
                None
            },
        })
    }
}

#[cfg(test)]
impl Bins {
    /// Binaries under /bin, no self-test.
    pub fn for_tests() -> Self {
        Self {
            server: "/bin/rdma-server".into(),
            client: "/bin/rdma-client".into(),
            misbehave_client: "/bin/rdma-misbehave-client".into(),
            misbehave_server: "/bin/rdma-misbehave-server".into(),
            xtask: "/bin/xtask".into(),
            selftest: None,
            cm_example: None,
        }
    }
}
