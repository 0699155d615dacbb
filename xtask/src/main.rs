//! `cargo xtask`: project automation for rdma-write.
//!
//! A thin clap dispatcher; each subcommand lives in its own module.

mod agent;
mod backend;
mod bench;
mod deadline;
mod deps;
mod dist;
mod e2e;
mod exec;
mod fabric_e2e;
mod failure;
mod fresh_root;
mod fuzz;
mod hostile;
mod invariants;
mod k8s;
mod load;
mod mesh_guest;
mod pcap;
mod pkgtest;
mod plan;
mod prometheus;
mod rxe;
mod scenario;
mod smoke;
mod test;
mod text;
mod vm;

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use color_eyre::eyre::Result;

#[derive(Debug, Parser)]
#[command(name = "cargo xtask", about = "rdma-write project automation", version)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Install what is missing, build, bring up Soft-RoCE and RDMA-Write "Hello RDMA Write!".
    E2e(e2e::E2eArgs),
    /// The whole test suite, as CI runs it: fmt, clippy, unit tests, e2e in the guests.
    Test(test::TestArgs),
    /// Speed targets: e2e turnaround, and write latency next to perftest in the same guests.
    Bench(bench::BenchArgs),
    /// A short libFuzzer run of the protocol parser, seeded from the golden vectors.
    Fuzz(fuzz::FuzzArgs),
    /// The README's first command on a new machine of this kind (a debootstrap root), as CI runs it.
    FreshRoot(fresh_root::FreshRootArgs),
    /// Check for / install the Debian packages the build, the run and the VM guests need.
    Deps(deps::DepsArgs),
    /// Release binaries and the two Debian packages (cargo-deb) under target/dist/.
    Dist(dist::DistArgs),
    /// Build the packages, install each alone in a guest, run the service, remove them.
    PkgTest(pkgtest::PkgTestArgs),
    /// Three guests, munge and Slurm: the fabric check through srun, healthy, over two rails (--rails auto), slow, down.
    FabricE2e(fabric_e2e::FabricE2eArgs),
    /// Validate the Kubernetes manifests (deploy/k8s/) offline, strictly, with kubernetes-validate.
    K8sValidate(k8s::K8sArgs),
    /// Check the mesh's Prometheus rules (promtool check and test rules) and that the rules and the Grafana dashboard read only the series the mesh exposes.
    PrometheusCheck(prometheus::PrometheusArgs),
    /// Print which RDMA backend this machine can use, and why.
    Backend(backend::BackendArgs),
    /// Boot guests, bring up rxe and run an ib_write_bw pair across them.
    VmSmoke(smoke::SmokeArgs),
    /// Run one command in a guest (host userland, Debian kernel with rdma_rxe).
    VmRun(vm::run_cmd::VmRunArgs),
    /// (inside a guest) Misbehave against a live rdma-server and check every answer.
    #[command(hide = true)]
    Hostile(hostile::HostileArgs),
    /// Check the invariants ARCHITECTURE.md states (dependency rules between our crates, no import
    /// circle, nothing printing around Output) and print the crates' sizes.
    Invariants,
    /// (inside a guest) Many clients against one server: all verified, no leaks, clean stop.
    #[command(hide = true)]
    Load(load::LoadArgs),
    /// (inside a guest) Run a plan: configure the node, run its steps, write result.json.
    #[command(hide = true)]
    GuestAgent(agent::AgentArgs),
    /// (inside a guest) A plain TCP stream between the guests: the link's ceiling for bench.
    #[command(hide = true)]
    BenchTcp(bench::tcp::TcpArgs),
    /// (inside a guest) A flood of connections that read the banner and close, or the CPU
    /// time of the process listening on a port: what a stranger costs the server.
    #[command(hide = true)]
    BenchFlood(bench::flood::FloodArgs),
    /// (inside a guest) Run a command, pass its stdout through and say on stderr when each
    /// line came (the mesh's events carry no time).
    #[command(hide = true)]
    BenchStamp(bench::stamp::StampArgs),
    /// (inside a guest) One check of an installed package (pkg-test).
    #[command(hide = true)]
    PkgGuest(pkgtest::PkgGuestArgs),
    /// (inside a guest) One stage of the fabric phase's mesh check, read from the guests'
    /// Prometheus.
    #[command(hide = true)]
    MeshGuest(mesh_guest::MeshGuestArgs),
}

/// Runs the subcommand; an error is printed by [`failure::render`] (message and causes, never
/// a backtrace) and exits 1.
fn main() -> ExitCode {
    // The panic hook: a bug still shows where it happened (with RUST_BACKTRACE=1, how).
    let hook = color_eyre::config::HookBuilder::default().display_env_section(false);
    let installed = if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        hook.install()
    } else {
        hook.theme(color_eyre::config::Theme::new()).install()
    };
    if let Err(e) = installed {
        eprintln!("warning: could not install the panic reporter: {e}");
    }
    match exec::install_signal_handlers().and_then(|()| run(&Cli::parse())) {
        Ok(()) => ExitCode::SUCCESS,
        Err(report) => {
            eprintln!("{}", failure::render(&report));
            ExitCode::FAILURE
        }
    }
}

fn run(cli: &Cli) -> Result<()> {
    match &cli.cmd {
        Cmd::E2e(a) => e2e::cmd(a),
        Cmd::Test(a) => test::cmd(a),
        Cmd::Bench(a) => bench::cmd(a),
        Cmd::Fuzz(a) => fuzz::cmd(a),
        Cmd::Hostile(a) => hostile::cmd(a),
        Cmd::Invariants => invariants::cmd(),
        Cmd::Load(a) => load::cmd(a),
        Cmd::Deps(a) => deps::cmd(a),
        Cmd::FreshRoot(a) => fresh_root::cmd(a),
        Cmd::Dist(a) => dist::cmd(a),
        Cmd::PkgTest(a) => pkgtest::cmd(a),
        Cmd::PkgGuest(a) => pkgtest::guest_cmd(a),
        Cmd::MeshGuest(a) => mesh_guest::cmd(a),
        Cmd::FabricE2e(a) => fabric_e2e::cmd(a),
        Cmd::K8sValidate(a) => k8s::cmd(a),
        Cmd::PrometheusCheck(a) => prometheus::cmd(a),
        Cmd::Backend(a) => backend::cmd(a),
        Cmd::VmSmoke(a) => smoke::cmd(a),
        Cmd::VmRun(a) => vm::run_cmd::cmd(a),
        Cmd::GuestAgent(a) => agent::cmd(a),
        Cmd::BenchTcp(a) => bench::tcp::cmd(a),
        Cmd::BenchFlood(a) => bench::flood::cmd(a),
        Cmd::BenchStamp(a) => bench::stamp::cmd(a),
    }
}
