//! `cargo xtask test`: the whole suite, exactly what CI runs (`.ci/run`).
//!
//! fmt check, clippy with `-D warnings`, every workspace test, the Kubernetes manifests, the
//! mesh's Prometheus rules (`promtool check` and `test rules`) and Grafana dashboard, a short
//! fuzz run of the protocol parser (beside vm-smoke and e2e, as the fresh root), then the
//! guests' infrastructure (`vm-smoke`: two NICs with a link cut, IPv6-only,
//! siw, a capture; and rdma-write itself with no device flags on those, `--tclass` captured),
//! the end-to-end scenarios in the guests: all of them across two guests, the
//! README's first command on a new machine of this kind (`xtask fresh-root`: a debootstrap
//! root in which `cargo xtask e2e` installs, builds and runs the seed write; a process of its
//! own beside vm-smoke and e2e, joined after them: see [`Beside`]), the fabric
//! check through Slurm in three guests (`xtask fabric-e2e`), then in one guest the
//! host-rxe backend (`xtask e2e --backend rxe` runs inside it) with the verbs self-test, the
//! load test and the scenarios about the node ([`ONE_NODE`]); last, the Debian packages
//! (`xtask pkg-test`: built, installed apart in the guests, run as packaged, removed).
//!
//! Each phase's time is reported against its deadline (the sum of what its waits were granted,
//! [`deadline::grant`]); `--keep-going` runs every phase whatever failed; `--slow-guests` pins
//! every QEMU to one host core, to prove that no deadline is a fixed total.

use crate::deadline;
use crate::deps::{self, Group};
use crate::e2e::{self, E2eArgs};
use crate::exec::{self, Captured};
use crate::fresh_root;
use clap::Args;
use color_eyre::eyre::{Result, WrapErr as _, bail};
use std::time::{Duration, Instant};
use xshell::{Shell, cmd};

/// How long the suite's libFuzzer run of the protocol parser lasts, seconds.
const FUZZ_SECONDS: u32 = 20;

/// The scenarios the one-node (host-rxe) run repeats: those about the node, not the protocol.
const ONE_NODE: [&str; 4] = ["seed", "notify-tcp", "cq-poll", "port-down"];

/// Arguments of `cargo xtask test`.
#[derive(Debug, Args)]
pub struct TestArgs {
    /// Skip the end-to-end runs (static checks and unit tests only).
    #[arg(long)]
    pub no_e2e: bool,
    /// Stream the guest consoles.
    #[arg(long, short)]
    pub verbose: bool,
    /// Run every phase even after one failed, and report them all at the end (CI stops at the
    /// first, as without this flag).
    #[arg(long)]
    pub keep_going: bool,
    /// Run every guest's QEMU pinned to host CPU 0, all guests sharing it (at half their speed
    /// or less): proves that no deadline of the suite is a fixed total that a slower machine
    /// exceeds. Sets XTASK_GUEST_CPUS=0 for everything the suite runs.
    #[arg(long)]
    pub slow_guests: bool,
}

/// The phases run so far: their times against their deadlines, and which failed.
#[derive(Debug)]
struct Phases {
    done: Vec<(&'static str, Duration, Duration, bool)>,
    keep_going: bool,
    started: Instant,
}

impl Default for Phases {
    fn default() -> Self {
        Self {
            done: Vec::new(),
            keep_going: false,
            started: Instant::now(),
        }
    }
}

impl Phases {
    /// Runs phase `name`; its deadline is the sum of the deadlines its waits were granted
    /// ([`deadline::grant`]). Fails at once unless `--keep-going`.
    fn run(&mut self, name: &'static str, f: &mut dyn FnMut() -> Result<()>) -> Result<()> {
        println!(
            "==> {name} (at {:.0} s)",
            self.started.elapsed().as_secs_f64()
        );
        let _ = deadline::take_granted();
        let t = Instant::now();
        let r = f().wrap_err_with(|| format!("`cargo xtask test` failed at: {name}"));
        self.done
            .push((name, t.elapsed(), deadline::take_granted(), r.is_ok()));
        match r {
            Err(e) if self.keep_going => {
                eprintln!("{e:?}");
                eprintln!("(--keep-going: the next phases run all the same)");
                Ok(())
            }
            Err(e) => {
                // The times so far, for whoever finds the time or deadline that ran out.
                println!("test: phases ({})", self.summary());
                Err(e)
            }
            Ok(()) => Ok(()),
        }
    }

    /// One phase's time against its deadline: `e2e: 182 s of 1450 s`.
    fn summary(&self) -> String {
        let parts: Vec<String> = self
            .done
            .iter()
            .map(|(n, took, deadline, ok)| {
                let mark = if *ok { "" } else { " FAILED" };
                if deadline.is_zero() {
                    format!("{n}: {:.0} s{mark}", took.as_secs_f64())
                } else {
                    format!(
                        "{n}: {:.0} s of {:.0} s{mark}",
                        took.as_secs_f64(),
                        deadline.as_secs_f64()
                    )
                }
            })
            .collect();
        parts.join("; ")
    }

    fn failed(&self) -> Vec<&'static str> {
        self.done.iter().filter(|p| !p.3).map(|p| p.0).collect()
    }
}

/// A phase that runs beside the others: `xtask SUBCOMMAND` as a child process at the lowest
/// CPU priority (`nice -n 19`: it uses what the phases beside it leave idle, and does not slow
/// their guests), its deadlines its own, not counted in the phase it runs beside; joined
/// later. Told to stop (SIGTERM, so that it unmounts what it mounted) and given
/// [`deadline::GRACE`] when the suite ends first.
#[derive(Debug)]
struct Beside {
    child: Option<Captured>,
    name: &'static str,
    worst_case: Duration,
}

impl Beside {
    /// Starts `xtask NAME ARGS...`.
    fn start(name: &'static str, args: &[&str], worst_case: Duration) -> Result<Self> {
        println!("test: {name} starts beside the next phases; its output comes when it is joined");
        let exe = exec::self_exe()?;
        // At the lowest priority: it takes what the guests leave idle, never their share.
        let argv: Vec<&str> = ["nice", "-n", "19", exe.as_str(), name]
            .into_iter()
            .chain(args.iter().copied())
            .collect();
        let child = Captured::spawn(&argv)?;
        Ok(Self {
            child: Some(child),
            name,
            worst_case,
        })
    }

    /// Waits for it (at most its worst case from its start), prints what it said, and fails
    /// unless it exited 0.
    fn join(mut self) -> Result<()> {
        deadline::grant(self.worst_case);
        let Some(child) = self.child.take() else {
            return Ok(());
        };
        let f = child.finish(Instant::now() + self.worst_case)?;
        print!("{}", f.stdout);
        eprint!("{}", f.stderr);
        println!(
            "test: {} joined {:.0} s after its start",
            self.name,
            f.elapsed.as_secs_f64()
        );
        match (f.timed_out, f.code) {
            (false, Some(0)) => Ok(()),
            (true, _) => bail!(
                "`xtask {}` was still running after {:.0} s, its worst case, and was killed",
                self.name,
                self.worst_case.as_secs_f64()
            ),
            (false, code) => bail!(
                "`xtask {}` failed (exit {code:?}): its output is above",
                self.name
            ),
        }
    }
}

impl Drop for Beside {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.terminate();
            let _ = child.finish(Instant::now() + deadline::GRACE);
        }
    }
}

/// Entry point.
pub fn cmd(args: &TestArgs) -> Result<()> {
    if args.slow_guests {
        // SAFETY: set before this process starts any thread of its own (the signal handlers
        // are flags, not threads), so no other thread reads the environment concurrently.
        unsafe { std::env::set_var(crate::vm::GUEST_CPUS_ENV, "0") };
        println!(
            "test: --slow-guests: every guest's QEMU pinned to host CPU 0 ({}=0)",
            crate::vm::GUEST_CPUS_ENV
        );
    }
    let t0 = Instant::now();
    // Every group the phases below use, K8s and Prometheus included: unit tests validate the
    // manifests and run promtool.
    deps::ensure(&[
        Group::Build,
        Group::Run,
        Group::Vm,
        Group::K8s,
        Group::Prometheus,
        Group::FreshRoot,
        Group::Transports,
    ])?;
    let sh = Shell::new()?;
    let mut phases = Phases {
        keep_going: args.keep_going,
        ..Phases::default()
    };
    let mut phase = |name: &'static str, f: &mut dyn FnMut() -> Result<()>| phases.run(name, f);
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
    phase(
        "prometheus rules (promtool check and test rules) and the Grafana dashboard's queries (deploy/prometheus, deploy/grafana)",
        &mut || crate::prometheus::cmd(&crate::prometheus::PrometheusArgs {}),
    )?;
    if args.no_e2e {
        phase("fuzz the protocol parser (20 s)", &mut || {
            crate::fuzz::cmd(&crate::fuzz::FuzzArgs {
                seconds: FUZZ_SECONDS,
            })
        })?;
    } else {
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
        // The fresh root is mostly a build (its own cargo, in its own root), the two phases
        // after it mostly guests, which leave about half of the host's CPU idle: it runs
        // beside them, as its own process, and is joined after them.
        let mut fresh = Some(Beside::start("fresh-root", &[], fresh_root::worst_case())?);
        // The fuzz run too: its own workspace and target directory, one core for its run.
        let seconds = FUZZ_SECONDS.to_string();
        let mut fuzz = Some(Beside::start(
            "fuzz",
            &["--seconds", &seconds],
            crate::fuzz::worst_case(FUZZ_SECONDS),
        )?);
        phase(
            "guests: two NICs with a link cut, IPv6-only NICs, siw + rping, a RoCE v2 capture; rdma-write with no device flags on two NICs (each link cut) and IPv6-only, through RDMA CM on siw and on rxe (--cm, a wrong nonce rejected), bench on each, --tclass in the IP header, a lossy link (vm-smoke)",
            &mut || crate::smoke::suite(&base.vm),
        )?;
        phase("e2e: every scenario, two nodes", &mut || e2e::cmd(&base))?;
        phase(
            "fresh root: the README's first command, `cargo xtask e2e`, on a new machine of this kind (debootstrap minbase + its image's packages), run beside vm-smoke and e2e",
            &mut || fresh.take().map_or(Ok(()), Beside::join),
        )?;
        phase(
            "fuzz the protocol parser (20 s), run beside vm-smoke and e2e",
            &mut || fuzz.take().map_or(Ok(()), Beside::join),
        )?;
        phase(
            "fabric: three guests, Slurm, srun rdma-client fabric (healthy, two rails with --rails auto, a slow node, a node's RDMA down), and rdma-client mesh on every node under two ToRs (a dead node and a broken NIC, one page each through Alertmanager; a lossy link)",
            &mut || {
                crate::fabric_e2e::cmd(&crate::fabric_e2e::FabricE2eArgs {
                    vm: base.vm.clone(),
                    no_build: true,
                    save_figure: None,
                })
            },
        )?;
        // The host-rxe backend (what a user with rdma_rxe runs): its own setup, the verbs
        // self-test on its device, the load test, and the scenarios that depend on the node
        // rather than on the protocol (both notify modes and completion modes on one device,
        // its port taken down and back). Every scenario ran across two nodes above.
        let one = E2eArgs {
            nodes: 1,
            all: false,
            only: ONE_NODE.iter().map(|s| (*s).to_owned()).collect(),
            selftest: true,
            load: true,
            no_build: false,
            ..base.clone()
        };
        phase(
            "e2e: one node (host-rxe backend inside the guest): verbs self-test, load, seed, notify tcp, cq poll, port down",
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
    let total = t0.elapsed().as_secs_f64();
    let failed = phases.failed();
    let passed = phases.done.len() - failed.len();
    // Time against deadline for each phase: the headroom the suite has, measured.
    println!("test: phases ({}); total {total:.0} s", phases.summary());
    // The plain closing line CI and people read.
    println!("test: {passed} passed, {} failed", failed.len());
    if !failed.is_empty() {
        bail!("`cargo xtask test`: {} failed", failed.join(", "));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_one_node_scenarios_exist() {
        let all = crate::e2e::scenarios::all();
        for s in ONE_NODE {
            assert!(all.iter().any(|a| a.name == s), "{s}");
        }
    }

    #[test]
    fn keep_going_runs_every_phase_and_the_summary_names_the_failed_one() {
        let mut p = Phases {
            keep_going: true,
            ..Phases::default()
        };
        p.run("first", &mut || {
            deadline::grant(Duration::from_secs(90));
            Ok(())
        })
        .unwrap();
        p.run("second", &mut || Err(color_eyre::eyre::eyre!("red")))
            .unwrap();
        p.run("third", &mut || Ok(())).unwrap();
        assert_eq!(p.failed(), ["second"]);
        let s = p.summary();
        // (Other tests may grant deadlines at the same time: "of" at least 90 s.)
        assert!(s.starts_with("first: 0 s of "), "{s}");
        assert!(s.contains("; second: 0 s FAILED; third: 0 s"), "{s}");
        // Without --keep-going the first failure stops the suite.
        let mut p = Phases::default();
        assert!(
            p.run("red", &mut || Err(color_eyre::eyre::eyre!("red")))
                .is_err()
        );
    }
}
