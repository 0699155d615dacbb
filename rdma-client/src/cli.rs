//! Command-line interface of `rdma-client`: four uses, each with only its own options.
//!
//! - `rdma-client [OPTIONS] SERVER`: the seed's verified write (the classic demo's usage);
//! - `rdma-client bench [OPTIONS] SERVER`: measure the link as perftest does;
//! - `rdma-client fabric [OPTIONS]`: this node's part of a fabric check, and
//!   `rdma-client fabric report [FILE]...` to merge what the nodes printed;
//! - `rdma-client mesh [OPTIONS] NODES`: probe the peers until stopped.
//!
//! SERVER and the subcommands share the first word: a subcommand's name there is the
//! subcommand, anything else is SERVER, and once an option or SERVER is given no subcommand
//! is looked for (`args_conflicts_with_subcommands`). A server literally named like a
//! subcommand is reached as `rdma-client -- bench`, `./bench` or `bench:7471`.

use crate::bench::{BenchArgs, BenchTask};
use crate::exit;
use crate::fabric::{FabricArgs, FabricTask, ReportArgs};
use crate::mesh::task::{MeshArgs, MeshTask};
use crate::run::{PayloadSource, WriteTask};
use crate::session::{SessionOptions, TokenSource};
use clap::{ArgAction, Parser, Subcommand};
use rdma_app as app;
use rdma_app::device::DeviceArgs;
use rdma_proto::Notify;
use std::path::PathBuf;
use std::time::Duration;

/// The four uses, as `--help`'s usage lists them.
const USAGE: &str = "\
rdma-client [OPTIONS] <SERVER>            write one message; the server verifies it
       rdma-client bench [OPTIONS] <SERVER>      measure the link as perftest does
       rdma-client fabric [OPTIONS]              check every pair of N nodes (fabric report FILE...)
       rdma-client mesh [OPTIONS] <NODES>        probe peers until stopped, with metrics";

/// `--help`: the description, the uses, then the options (without clap's own list of the
/// subcommands, which the usage already gives).
const TEMPLATE: &str = "{about-with-newline}\n{usage-heading} {usage}\n\n{all-args}{after-help}";

/// RDMA-Write a message straight into an rdma-server's registered memory, then wait for the
/// server's verdict.
#[derive(Debug, Parser)]
#[command(
    name = "rdma-client",
    version,
    about = "RDMA-Write into an rdma-server's memory, verified; or measure, check or watch the links.",
    long_about = None,
    override_usage = USAGE,
    help_template = TEMPLATE,
    after_help = "Exit codes: 0 verified; 2 usage error; 3 local RDMA problem; 4 network; ... \
                  (all: rdma-client help)",
    after_long_help = app::exit_codes_help(exit::SUCCESS, exit::EXITS),
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true,
    disable_help_flag = true,
    disable_version_flag = true,
)]
pub struct Args {
    /// `bench`, `fabric` or `mesh`; none: the write.
    #[command(subcommand)]
    pub command: Option<Use>,

    /// The write's options.
    #[command(flatten)]
    pub write: WriteArgs,

    /// `--json`, `--help` and `--version`, for every use.
    #[command(flatten)]
    pub common: Common,
}

/// The flags every use has (global: given before or after a subcommand's name).
#[derive(Debug, Clone, clap::Args)]
pub struct Common {
    /// Print JSON Lines events (each with a `type` tag) instead of human text
    #[arg(long, global = true, help_heading = "Options")]
    pub json: bool,

    /// Print help (all options: `rdma-client help [COMMAND]`, man rdma-client)
    #[arg(short = 'h', long, action = ArgAction::HelpShort, global = true, help_heading = "Options")]
    help: Option<bool>,

    /// Print version
    #[arg(short = 'V', long, action = ArgAction::Version, help_heading = "Options")]
    version: Option<bool>,
}

/// The uses other than the write. Hidden from clap's list of commands only: the usage lists
/// them, each with what it does (completions, `help COMMAND` and the man page have them).
#[derive(Debug, Subcommand)]
pub enum Use {
    /// Measure the link as perftest does (ib_write_lat, ib_write_bw) against a plain rdma-server
    #[command(disable_help_flag = true, hide = true)]
    Bench(BenchCmd),
    /// Check every pair of N nodes, one task per node (srun); `fabric report` merges the results
    #[command(
        disable_help_flag = true,
        hide = true,
        args_conflicts_with_subcommands = true,
        subcommand_negates_reqs = true,
        override_usage = "rdma-client fabric [OPTIONS]\n       rdma-client fabric report [OPTIONS] [FILE]..."
    )]
    Fabric(FabricCmd),
    /// Probe peers until stopped: up, degraded or down per pair, with Prometheus metrics
    #[command(disable_help_flag = true, hide = true, long_about = crate::mesh::task::ABOUT)]
    Mesh(MeshCmd),
}

/// `rdma-client [OPTIONS] SERVER`: the write.
#[derive(Debug, Clone, clap::Args)]
pub struct WriteArgs {
    /// Server to write to: HOST or HOST:PORT (default port 7471)
    #[arg(required = true)]
    pub server: Option<String>,

    /// What to write, and how the server learns it is done.
    #[command(flatten)]
    pub payload: PayloadArgs,

    /// How to reach the server.
    #[command(flatten)]
    pub connection: ConnectionArgs,

    /// The local RDMA device.
    #[command(flatten)]
    pub local: DeviceArgs,
}

/// The verified write's payload and notification (the write's, and each pair's of the fabric
/// check).
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Options")]
pub struct PayloadArgs {
    /// Text to write into the server's buffer
    #[arg(
        long,
        short,
        default_value = "Hello RDMA Write!",
        conflicts_with = "file"
    )]
    pub message: String,

    /// Write the contents of this file instead of --message
    #[arg(long, short)]
    pub file: Option<PathBuf>,

    /// How the server learns the write is done: imm (write with immediate) or tcp (a notice)
    #[arg(long, value_name = "imm|tcp")]
    pub notify: Option<Notify>,
}

impl PayloadArgs {
    fn source(self) -> PayloadSource {
        match self.file {
            Some(path) => PayloadSource::File(path),
            None => PayloadSource::Message(self.message),
        }
    }
}

/// How a session reaches its server: RDMA CM, the token, the deadlines.
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Connection")]
pub struct ConnectionArgs {
    /// Connect the queue pairs through RDMA CM (always on iWARP)
    #[arg(long)]
    pub cm: bool,

    /// Shared access token (shows in `ps`: prefer --token-file or RDMA_WRITE_TOKEN)
    #[arg(long, env = "RDMA_WRITE_TOKEN", hide_env_values = true)]
    pub token: Option<String>,

    /// File holding the access token, readable by its owner only (chmod 600)
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,

    /// Deadline of each phase: connect, handshake, completion, verdict
    #[arg(long, default_value = "10s", value_name = "DURATION", value_parser = app::parse_duration)]
    pub timeout: Duration,

    /// Keep retrying a refused connection this long while the server starts
    #[arg(long, value_parser = app::parse_duration, value_name = "DURATION")]
    pub wait_for_server: Option<Duration>,
}

impl ConnectionArgs {
    /// The session's options, with the completion mode of `device`.
    fn session(self, device: &DeviceArgs) -> SessionOptions {
        SessionOptions {
            timeout: self.timeout,
            wait_for_server: self.wait_for_server,
            cq_mode: device.cq_mode,
            token: TokenSource {
                file: self.token_file,
                // clap read $RDMA_WRITE_TOKEN already (into `token` when --token is absent);
                // take it out of the environment too, while the process has one thread, so
                // that /proc/PID/environ no longer shows it.
                value: {
                    let env = rdma_app::token::read_env().and_then(|v| v.into_string().ok());
                    self.token.or(env)
                },
            },
            cm: self.cm,
        }
    }
}

/// `rdma-client bench [OPTIONS] SERVER`.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchCmd {
    /// Server to measure against: HOST or HOST:PORT (default port 7471)
    pub server: String,

    /// The measurement.
    #[command(flatten)]
    pub bench: BenchArgs,

    /// How to reach the server.
    #[command(flatten)]
    pub connection: ConnectionArgs,

    /// The local RDMA device.
    #[command(flatten)]
    pub local: DeviceArgs,
}

/// `rdma-client fabric [OPTIONS]` and `rdma-client fabric report [FILE]...`.
#[derive(Debug, clap::Args)]
pub struct FabricCmd {
    /// `report`: merge the nodes' results.
    #[command(subcommand)]
    pub report: Option<FabricUse>,

    /// This node's part of the check.
    #[command(flatten)]
    pub fabric: FabricArgs,

    /// What each pair writes.
    #[command(flatten)]
    pub payload: PayloadArgs,

    /// How to reach each server.
    #[command(flatten)]
    pub connection: ConnectionArgs,

    /// The local RDMA device.
    #[command(flatten)]
    pub local: DeviceArgs,
}

/// `rdma-client fabric report`.
#[derive(Debug, Subcommand)]
pub enum FabricUse {
    /// Merge the fabric_pair lines of a check into the matrix, the bad pairs, the suspect nodes
    #[command(disable_help_flag = true)]
    Report(ReportArgs),
}

/// `rdma-client mesh [OPTIONS] NODES`.
#[derive(Debug, clap::Args)]
pub struct MeshCmd {
    /// The mesh's own flags.
    #[command(flatten)]
    pub mesh: MeshArgs,

    /// How the server learns each probe's write is done: imm or tcp
    #[arg(long, value_name = "imm|tcp", help_heading = "Options")]
    pub notify: Option<Notify>,

    /// How to reach each peer.
    #[command(flatten)]
    pub connection: ConnectionArgs,

    /// The local RDMA device.
    #[command(flatten)]
    pub local: DeviceArgs,
}

/// What the command line asks for, in typed parts; nothing below `main` sees [`Args`].
#[derive(Debug)]
pub enum Task {
    /// `rdma-client SERVER`: one verified write.
    Write(WriteTask),
    /// `rdma-client bench SERVER`.
    Bench(BenchTask),
    /// `rdma-client fabric`.
    Fabric(FabricTask),
    /// `rdma-client fabric report`.
    FabricReport(ReportArgs),
    /// `rdma-client mesh NODES`.
    Mesh(MeshTask),
}

/// The command line parsed, but clap let no SERVER through where one is needed.
#[derive(Debug, thiserror::Error)]
#[error("no SERVER given (give one, or a use: bench, fabric or mesh)")]
pub struct NoServer;

impl Args {
    /// Whether `--json` was given.
    #[must_use]
    pub fn json(&self) -> bool {
        self.common.json
    }

    /// Splits the command line into the task it asks for.
    ///
    /// # Errors
    /// No SERVER where one is needed (clap refuses that first).
    pub fn task(self) -> Result<Task, NoServer> {
        match self.command {
            Some(Use::Bench(b)) => Ok(Task::Bench(BenchTask {
                server: b.server,
                mode: b.bench.mode,
                session: b.connection.session(&b.local),
                bench: b.bench,
                device: b.local,
            })),
            Some(Use::Fabric(f)) => Ok(match f.report {
                Some(FabricUse::Report(r)) => Task::FabricReport(r),
                None => Task::Fabric(FabricTask {
                    fabric: f.fabric,
                    notify: f.payload.notify,
                    payload: f.payload.source(),
                    knobs: crate::bench::Knobs::default(),
                    session: f.connection.session(&f.local),
                    device: f.local,
                }),
            }),
            Some(Use::Mesh(m)) => Ok(Task::Mesh(MeshTask {
                rank: m.mesh.rank,
                rails: m.mesh.rails,
                lat_iters: m.mesh.lat_iters,
                bw_iters: m.mesh.bw_iters,
                notify: m.notify,
                knobs: crate::bench::Knobs::default(),
                session: m.connection.session(&m.local),
                device: m.local,
                mesh: m.mesh,
            })),
            None => {
                let w = self.write;
                let server = w.server.ok_or(NoServer)?;
                Ok(Task::Write(WriteTask {
                    server,
                    notify: w.payload.notify,
                    payload: w.payload.source(),
                    session: w.connection.session(&w.local),
                    device: w.local,
                }))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory as _;

    fn task(argv: &[&str]) -> Task {
        Args::try_parse_from(argv).unwrap().task().unwrap()
    }

    fn refused(argv: &[&str]) -> String {
        Args::try_parse_from(argv).unwrap_err().to_string()
    }

    #[test]
    fn the_command_is_well_formed() {
        Args::command().debug_assert();
    }

    #[test]
    fn defaults_match_the_seed() {
        let a = Args::try_parse_from(["rdma-client", "10.0.0.1"]).unwrap();
        assert!(a.command.is_none());
        assert_eq!(a.write.server.as_deref(), Some("10.0.0.1"));
        assert_eq!(a.write.payload.message, "Hello RDMA Write!");
        assert_eq!(a.write.local.port, 1);
        assert_eq!(a.write.payload.notify, None);
        assert!(!a.write.connection.cm);
        assert_eq!(a.write.connection.timeout, Duration::from_secs(10));
        assert!(Args::try_parse_from(["rdma-client", "h", "--timeout", "soon"]).is_err());
        assert!(Args::try_parse_from(["rdma-client", "h", "--timeout", "0s"]).is_err());
    }

    #[test]
    fn message_and_file_conflict() {
        let r = Args::try_parse_from(["rdma-client", "h", "--message", "x", "--file", "/dev/null"]);
        assert!(r.is_err());
    }

    /// The classic demo's command lines, as they were.
    #[test]
    fn the_write_keeps_its_usage() {
        let Task::Write(w) = task(&[
            "rdma-client",
            "10.0.0.1:7471",
            "--message",
            "hi",
            "--notify",
            "tcp",
            "--json",
            "--cm",
            "--timeout",
            "5s",
        ]) else {
            panic!("not the write")
        };
        assert_eq!(w.server, "10.0.0.1:7471");
        assert!(matches!(w.payload, PayloadSource::Message(ref m) if m == "hi"));
        assert_eq!(w.notify, Some(Notify::Tcp));
        assert!(w.session.cm);
        let a =
            Args::try_parse_from(["rdma-client", "--json", "h", "-f", "/etc/hostname"]).unwrap();
        assert!(a.json());
        assert!(matches!(
            a.task().unwrap(),
            Task::Write(WriteTask {
                payload: PayloadSource::File(_),
                ..
            })
        ));
        assert!(
            refused(&["rdma-client"]).contains("<SERVER>"),
            "SERVER is required"
        );
    }

    /// `rdma-client HOST` and `rdma-client bench HOST` both work, and a server named like a
    /// subcommand is still reachable.
    #[test]
    fn server_and_subcommands_share_the_first_word() {
        let e = refused(&["rdma-client", "bench"]);
        assert!(
            e.contains("<SERVER>") && e.contains("rdma-client bench"),
            "the use, without its SERVER: {e}"
        );
        assert!(
            matches!(task(&["rdma-client", "bench", "h"]), Task::Bench(ref b) if b.server == "h")
        );
        for argv in [
            &["rdma-client", "--", "bench"][..],
            &["rdma-client", "./bench"],
            &["rdma-client", "bench:7471"],
            &["rdma-client", "--message", "x", "bench"],
            &["rdma-client", "--json", "--", "mesh"],
        ] {
            let Task::Write(w) = task(argv) else {
                panic!("{argv:?}: not the write")
            };
            assert!(w.server.contains("bench") || w.server == "mesh", "{argv:?}");
        }
        // After SERVER, no use: a second word is refused, not taken as a subcommand.
        assert!(Args::try_parse_from(["rdma-client", "h", "bench"]).is_err());
        assert!(Args::try_parse_from(["rdma-client", "h", "mesh", "a,b"]).is_err());
    }

    #[test]
    fn each_use_has_only_its_own_options() {
        // A bench option on the write, a mesh option on bench, a write option on mesh.
        assert!(refused(&["rdma-client", "h", "--size", "64"]).contains("--size"));
        assert!(refused(&["rdma-client", "h", "--mesh-cycles", "1"]).contains("--mesh-cycles"));
        assert!(refused(&["rdma-client", "bench", "h", "--every", "1s"]).contains("--every"));
        assert!(refused(&["rdma-client", "mesh", "a,b", "--message", "x"]).contains("--message"));
        assert!(refused(&["rdma-client", "fabric", "report", "--hosts", "a"]).contains("--hosts"));
        // The old mode flags are gone.
        assert!(refused(&["rdma-client", "h", "--bench", "lat"]).contains("--bench"));
        assert!(refused(&["rdma-client", "--mesh", "a,b"]).contains("--mesh"));
        assert!(refused(&["rdma-client", "--fabric-report"]).contains("--fabric-report"));
    }

    /// rdma-core's names (ibv_rc_pingpong's `-d/--ib-dev`, `-i/--ib-port`, `-g/--gid-idx`),
    /// in every use; `--device` and `--gid-index` still read, `--port` (the IB port) does not.
    #[test]
    fn device_options_are_named_as_rdma_cores_tools_name_them() {
        let Task::Bench(b) = task(&[
            "rdma-client",
            "bench",
            "h",
            "-d",
            "rxe0",
            "-i",
            "2",
            "-g",
            "1",
        ]) else {
            panic!("not bench")
        };
        assert_eq!(
            (
                b.device.device.as_deref(),
                b.device.port,
                b.device.gid_index
            ),
            (Some("rxe0"), 2, Some(1))
        );
        let Task::Write(w) = task(&[
            "rdma-client",
            "h",
            "--ib-dev",
            "mlx5_0",
            "--ib-port",
            "1",
            "--gid-idx",
            "3",
        ]) else {
            panic!("not the write")
        };
        assert_eq!(
            (w.device.device.as_deref(), w.device.gid_index),
            (Some("mlx5_0"), Some(3))
        );
        let Task::Mesh(m) = task(&[
            "rdma-client",
            "mesh",
            "a,b",
            "--device",
            "rxe1",
            "--gid-index",
            "2",
        ]) else {
            panic!("not the mesh")
        };
        assert_eq!(
            (m.device.device.as_deref(), m.device.gid_index),
            (Some("rxe1"), Some(2))
        );
        assert!(refused(&["rdma-client", "h", "--port", "1"]).contains("--port"));
        let help = Args::command().render_help().to_string();
        assert!(
            help.contains("Device:") && help.contains("--ib-dev") && !help.contains("--device"),
            "{help}"
        );
    }

    #[test]
    fn the_command_line_becomes_one_typed_task() {
        assert!(matches!(
            task(&["rdma-client", "h", "--notify", "tcp"]),
            Task::Write(WriteTask { ref server, notify: Some(Notify::Tcp), .. }) if server == "h"
        ));
        assert!(matches!(
            task(&["rdma-client", "bench", "h", "--mode", "bw"]),
            Task::Bench(BenchTask {
                mode: rdma_proto::BenchMode::Bw,
                ..
            })
        ));
        assert!(
            matches!(task(&["rdma-client", "fabric", "report"]), Task::FabricReport(ref r) if r.files.is_empty())
        );
        assert!(
            matches!(task(&["rdma-client", "fabric", "report", "a.jsonl", "-"]), Task::FabricReport(ref r) if r.files.len() == 2)
        );
        assert!(matches!(
            task(&["rdma-client", "fabric", "--hosts", "n[1-2]"]),
            Task::Fabric(_)
        ));
        // `report` after a fabric option is refused, not a report.
        assert!(Args::try_parse_from(["rdma-client", "fabric", "--plan", "report"]).is_err());
        // --json before or after the use's name.
        assert!(
            Args::try_parse_from(["rdma-client", "bench", "h", "--json"])
                .unwrap()
                .json()
        );
        assert!(
            Args::try_parse_from(["rdma-client", "fabric", "report", "--json"])
                .unwrap()
                .json()
        );
        let mut args = Args::try_parse_from(["rdma-client", "h"]).unwrap();
        args.write.server = None;
        assert!(
            args.task().is_err(),
            "no server and no use: refused, not unwrapped"
        );
    }

    #[test]
    fn each_help_is_one_screen() {
        let mut cmd = Args::command();
        cmd.build();
        let lines = |c: &mut clap::Command| c.render_help().to_string().lines().count();
        assert!(lines(&mut cmd) <= 40, "{}", cmd.render_help());
        for name in ["bench", "fabric", "mesh"] {
            let sub = cmd.find_subcommand_mut(name).unwrap();
            assert!(lines(sub) <= 45, "{name}: {}", sub.render_help());
        }
    }
}

#[cfg(test)]
mod task_tests {
    use super::*;

    fn task(argv: &[&str]) -> Task {
        Args::try_parse_from(argv).unwrap().task().unwrap()
    }

    #[test]
    fn the_deployed_mesh_command_lines_parse() {
        // The systemd unit's and the DaemonSet's argv, as they run it.
        let unit = [
            "rdma-client",
            "mesh",
            "node[01-03]",
            "--every",
            "10s",
            "--metrics-listen",
            "[::]:9478",
            "--token-file",
            "/run/credentials/rdma-mesh.service/token",
            "--json",
        ];
        let args = Args::try_parse_from(unit).unwrap();
        assert!(args.json());
        let Task::Mesh(t) = args.task().unwrap() else {
            panic!("not the mesh")
        };
        assert_eq!(t.mesh.nodes, "node[01-03]");
        assert_eq!(t.mesh.every, Duration::from_secs(10));
        assert_eq!(t.mesh.metrics_listen, Some("[::]:9478".parse().unwrap()));
        assert!(t.session.token.file.is_some());
        // The defaults.
        assert_eq!(t.mesh.mesh_port, rdma_proto::DEFAULT_PORT);
        assert_eq!((t.mesh.fan_out, t.mesh.jitter), (8, 0.1));
        assert_eq!(
            (t.mesh.down_after, t.mesh.degrade_after, t.mesh.up_after),
            (3, 3, 2)
        );
        assert_eq!(
            (t.mesh.slow_factor, t.mesh.probe_bytes, t.mesh.bw_every),
            (3.0, 64, 0)
        );
        assert_eq!((t.lat_iters, t.bw_iters, t.rank), (20, 200, None));
        assert_eq!(
            (t.mesh.mesh_cycles, t.mesh.metrics_textfile.as_ref()),
            (None, None)
        );
        let config = t.mesh.config().unwrap();
        assert_eq!(config, crate::mesh::MeshConfig::default());
        let daemonset = [
            "rdma-client",
            "mesh",
            "a,b,c",
            "--every",
            "10s",
            "--metrics-listen",
            "[::]:9478",
            "--json",
        ];
        assert!(matches!(task(&daemonset), Task::Mesh(_)));
        let all = [
            "rdma-client",
            "mesh",
            "n[1-4]",
            "--rank",
            "2",
            "--mesh-port",
            "7000",
            "--fan-out",
            "2",
            "--jitter",
            "0",
            "--down-after",
            "5",
            "--degrade-after",
            "4",
            "--up-after",
            "1",
            "--slow-factor",
            "2.5",
            "--probe-bytes",
            "4096",
            "--lat-iters",
            "0",
            "--bw-every",
            "10",
            "--bw-iters",
            "50",
            "--metrics-textfile",
            "/tmp/x.prom",
            "--mesh-cycles",
            "3",
        ];
        let Task::Mesh(t) = task(&all) else {
            panic!("not the mesh")
        };
        assert_eq!((t.rank, t.lat_iters, t.bw_iters), (Some(2), 0, 50));
        assert_eq!(
            (t.mesh.mesh_port, t.mesh.fan_out, t.mesh.mesh_cycles),
            (7000, 2, Some(3))
        );
        let c = t.mesh.config().unwrap();
        assert_eq!(
            (c.state.down_after, c.state.degrade_after, c.state.up_after),
            (5, 4, 1)
        );
        // The fabric's default stays its own.
        let Task::Fabric(f) = task(&["rdma-client", "fabric", "--hosts", "n[1-2]"]) else {
            panic!("not the fabric")
        };
        assert_eq!(f.fabric.lat_iters, 200);
    }

    #[test]
    fn bad_mesh_flags_are_named() {
        let refused = |extra: &[&str], names: &str| {
            let mut argv = vec!["rdma-client", "mesh", "a,b"];
            argv.extend_from_slice(extra);
            let e = Args::try_parse_from(&argv).unwrap_err().to_string();
            assert!(e.contains(names), "{argv:?}: {e}");
        };
        refused(&["--jitter", "2"], "--jitter");
        refused(&["--fan-out", "0"], "--fan-out");
        refused(&["--every", "0s"], "--every");
        refused(&["--slow-factor", "1"], "--slow-factor");
        refused(&["--down-after", "0"], "--down-after");
        refused(&["--probe-bytes", "0"], "--probe-bytes");
        refused(&["--mesh-cycles", "0"], "--mesh-cycles");
        refused(&["--hosts", "a,b"], "--hosts");
        refused(&["h"], "h");
        refused(&["--rails", "auto", "-d", "rxe0"], "--rails");
        let e = Args::try_parse_from(["rdma-client", "mesh"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("<NODES>"), "{e}");
        let Task::Mesh(t) = task(&["rdma-client", "mesh", "a,b", "--rails", "2"]) else {
            panic!("not the mesh")
        };
        assert_eq!(t.rails, Some(crate::fabric::rails::Rails::Count(2)));
        // --rank in the fabric check needs --hosts.
        let e = Args::try_parse_from(["rdma-client", "fabric", "--rank", "1"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("--hosts"), "{e}");
    }

    #[test]
    fn a_node_file_is_one_name_a_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nodes");
        std::fs::write(&path, "# the rack\nnode02\n\nnode01  # first\n").unwrap();
        let arg = format!("@{}", path.display());
        let Task::Mesh(t) = task(&["rdma-client", "mesh", &arg]) else {
            panic!("not the mesh")
        };
        assert_eq!(t.mesh.node_list(&arg).unwrap(), "node02,node01");
        let w = crate::mesh::task::world(&t.mesh.node_list(&arg).unwrap(), Some(0)).unwrap();
        assert_eq!(w.hosts, ["node01", "node02"]);
        std::fs::write(&path, "# nothing\n").unwrap();
        assert!(
            t.mesh
                .node_list(&arg)
                .unwrap_err()
                .to_string()
                .contains("no node name")
        );
        assert!(t.mesh.node_list("@/nonexistent/nodes").is_err());
        assert_eq!(t.mesh.node_list("n[1-3]").unwrap(), "n[1-3]");
    }
}
