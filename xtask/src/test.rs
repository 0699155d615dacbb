//! `cargo xtask test`: the whole suite, exactly what CI runs (`.ci/run`).
//!
//! fmt check, clippy with `-D warnings`, every workspace test, a short fuzz run of the protocol
//! parser, then the guests' infrastructure (`vm-smoke`: two NICs with a link cut, IPv6-only,
//! siw, a capture; and rdma-write itself with no device flags on those, `--tclass` captured),
//! the end-to-end scenarios in the guests: all of them across two guests, the
//! README's first command on a new machine of this kind (`xtask fresh-root`: a debootstrap
//! root in which `cargo xtask e2e` installs, builds and runs the seed write), the fabric
//! check through Slurm in three guests (`xtask fabric-e2e`), then all
//! of them again in one guest through the
//! host-rxe backend (`xtask e2e --backend rxe` runs inside it), with the verbs self-test and the
//! load test; last, the Debian packages (`xtask pkg-test`: built, installed apart in the guests,
//! run as packaged, removed).

use crate::deps::{self, Group};
use crate::e2e::{self, E2eArgs};
use crate::exec;
use clap::Args;
use color_eyre::eyre::{Result, WrapErr as _};
use std::time::{Duration, Instant};
use xshell::{Shell, cmd};

/// Arguments of `cargo xtask test`.
#[derive(Debug, Args)]
pub struct TestArgs {
    /// Skip the end-to-end runs (static checks and unit tests only).
    #[arg(long)]
    pub no_e2e: bool,
    /// Stream the guest consoles.
    #[arg(long, short)]
    pub verbose: bool,
}

/// Entry point.
pub fn cmd(args: &TestArgs) -> Result<()> {
    // Every group the phases below use, K8s included: a unit test validates the manifests.
    deps::ensure(&[
        Group::Build,
        Group::Run,
        Group::Vm,
        Group::K8s,
        Group::FreshRoot,
        Group::Transports,
    ])?;
    let sh = Shell::new()?;
    let mut phases: Vec<(&str, Duration)> = Vec::new();
    let mut phase = |name: &'static str, f: &mut dyn FnMut() -> Result<()>| -> Result<()> {
        println!("==> {name}");
        let t = Instant::now();
        let r = f().wrap_err_with(|| format!("`cargo xtask test` failed at: {name}"));
        phases.push((name, t.elapsed()));
        r
    };
    phase("fmt", &mut || {
        exec::run_loud(
            cmd!(sh, "cargo fmt --all -- --check"),
            Duration::from_secs(120),
        )
        .wrap_err("run `cargo fmt --all` to fix")
    })?;
    phase("clippy", &mut || {
        exec::run_loud(
            cmd!(
                sh,
                "cargo clippy --workspace --all-targets --quiet -- -D warnings"
            ),
            Duration::from_secs(1500),
        )
    })?;
    phase("clippy, with the e2e test hooks", &mut || {
        let features = e2e::FEATURES;
        exec::run_loud(
            cmd!(
                sh,
                "cargo clippy --package rdma-server --package rdma-client --all-targets --features {features} --quiet -- -D warnings"
            ),
            Duration::from_secs(1500),
        )
    })?;
    phase("unit and integration tests", &mut || {
        exec::run_loud(
            cmd!(sh, "cargo test --workspace --quiet"),
            Duration::from_secs(1500),
        )
    })?;
    phase(
        "crates: docs without warnings, cargo publish --dry-run",
        &mut || crate::dist::check_crates(),
    )?;
    phase(
        "kubernetes manifests (deploy/k8s), strict schema check",
        &mut || crate::k8s::cmd(&crate::k8s::K8sArgs { dir: None }),
    )?;
    phase("fuzz the protocol parser (20 s)", &mut || {
        crate::fuzz::cmd(&crate::fuzz::FuzzArgs { seconds: 20 })
    })?;
    if !args.no_e2e {
        let base = E2eArgs {
            backend: crate::backend::BackendChoice::Auto,
            nodes: 2,
            all: true,
            only: Vec::new(),
            list: false,
            vm: crate::vm::VmOptions {
                verbose: args.verbose,
                keep: false,
            },
            no_build: false,
            selftest: false,
            load: false,
        };
        phase(
            "guests: two NICs with a link cut, IPv6-only NICs, siw + rping, a RoCE v2 capture; rdma-write with no device flags on two NICs (each link cut) and IPv6-only, through RDMA CM on siw and on rxe (--cm, a wrong nonce rejected), --bench on each, --tclass in the IP header (vm-smoke)",
            &mut || crate::smoke::suite(&base.vm),
        )?;
        phase("e2e: every scenario, two nodes", &mut || e2e::cmd(&base))?;
        phase(
            "fresh root: the README's first command, `cargo xtask e2e`, on a new machine of this kind (debootstrap minbase + its image's packages)",
            &mut || {
                crate::fresh_root::cmd(&crate::fresh_root::FreshRootArgs {
                    keep: false,
                    refresh: false,
                })
            },
        )?;
        phase(
            "fabric: three guests, Slurm, srun rdma-client --fabric (healthy, two rails with --rails auto, a slow node, a node's RDMA down)",
            &mut || {
                crate::fabric_e2e::cmd(&crate::fabric_e2e::FabricE2eArgs {
                    vm: base.vm.clone(),
                    no_build: true,
                    save_figure: None,
                })
            },
        )?;
        let one = E2eArgs {
            nodes: 1,
            all: true,
            selftest: true,
            load: true,
            no_build: false,
            ..base.clone()
        };
        phase(
            "e2e: one node (host-rxe backend inside the guest): verbs self-test, every scenario, load",
            &mut || e2e::cmd(&one),
        )?;
        phase(
            "packages: both .deb built, each installed alone in a guest, the service serves the installed client, both removed",
            &mut || {
                crate::pkgtest::cmd(&crate::pkgtest::PkgTestArgs {
                    vm: base.vm.clone(),
                    no_build: false,
                })
            },
        )?;
    }
    let summary: Vec<String> = phases
        .iter()
        .map(|(n, d)| format!("{n}: {:.0} s", d.as_secs_f64()))
        .collect();
    println!("test: all green ({})", summary.join("; "));
    // The plain closing line CI and people read: every phase above passed (a failure returns early).
    println!("test: {} passed, 0 failed", phases.len());
    Ok(())
}
