//! Command-line interface of `rdma-client`.

use crate::bench::BenchTask;
use crate::exit;
use crate::fabric::FabricTask;
use crate::mesh::task::{MeshArgs, MeshTask};
use crate::run::{PayloadSource, WriteTask};
use crate::session::{SessionOptions, TokenSource};
use clap::Parser;
use rdma_app as app;
use rdma_app::device::DeviceArgs;
use rdma_proto::Notify;
use std::path::PathBuf;
use std::time::Duration;

/// RDMA-Write a message straight into an rdma-server's registered memory, then wait for the
/// server's verdict.
#[derive(Debug, Parser)]
#[command(
    version,
    about,
    long_about = long_about(),
    after_help = app::exit_codes_help(exit::SUCCESS, exit::EXITS),
    group(clap::ArgGroup::new("node_list").args(["hosts", "mesh"]).multiple(false)),
    group(clap::ArgGroup::new("rail_check").args(["fabric", "mesh"]).multiple(false))
)]
pub struct Args {
    /// Server to connect to: HOST or HOST:PORT (default port 7471). Required, except with
    /// --fabric, --fabric-report or --mesh.
    #[arg(
        required_unless_present_any = ["fabric", "fabric_report", "mesh"],
        conflicts_with_all = ["fabric", "fabric_report", "mesh"]
    )]
    pub server: Option<String>,

    /// Text to write into the server's buffer.
    #[arg(
        long,
        short,
        default_value = "Hello RDMA Write!",
        conflicts_with = "file"
    )]
    pub message: String,

    /// Write the contents of this file instead of --message.
    #[arg(long, short)]
    pub file: Option<PathBuf>,

    /// The local RDMA device, port, GID and completion mode.
    #[command(flatten)]
    pub local: DeviceArgs,

    /// `--json`.
    #[command(flatten)]
    pub output: app::JsonFlag,

    /// How the server learns that the write is complete: `imm` = RDMA Write with immediate (the
    /// server gets a completion), `tcp` = plain RDMA Write, then a `written` notice over TCP.
    /// Default: imm, or tcp on a device without write-with-immediate (iWARP), which is said.
    #[arg(long, value_name = "imm|tcp")]
    pub notify: Option<Notify>,

    /// Connect the queue pairs through RDMA CM (librdmacm) instead of by the QP numbers and
    /// GIDs the handshake exchanges; needs a server that offers it (banner feature `cm`).
    /// Always on for iWARP devices, which have no other way.
    #[arg(long)]
    pub cm: bool,

    /// Shared access token, if the server requires one. Prefer --token-file or the
    /// RDMA_WRITE_TOKEN environment variable: a token given here shows in `ps` to every user.
    #[arg(long, env = "RDMA_WRITE_TOKEN", hide_env_values = true)]
    pub token: Option<String>,

    /// File holding the shared access token (wins over --token and RDMA_WRITE_TOKEN). Only its
    /// owner may read it (`chmod 600 FILE`), as ssh requires of a private key.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,

    /// Deadline (e.g. 10s, 500ms, 1m) for each phase: connect, handshake, write completion, verdict.
    #[arg(long, default_value = "10s", value_parser = app::parse_duration)]
    pub timeout: Duration,

    /// Keep retrying a refused connection this long (e.g. 10s) while the server starts up.
    #[arg(long, value_parser = app::parse_duration, value_name = "DURATION")]
    pub wait_for_server: Option<Duration>,

    /// Measure the link like perftest (--bench lat|bw and its flags).
    #[command(flatten)]
    pub bench: crate::bench::BenchArgs,

    /// The fabric check (--fabric, --fabric-report and their flags).
    #[command(flatten)]
    pub fabric: crate::fabric::FabricArgs,

    /// The mesh (--mesh and its flags).
    #[command(flatten)]
    pub mesh: MeshArgs,
}

/// `--help`'s description (the man page's DESCRIPTION): what the client does, then the mesh's
/// paragraph.
fn long_about() -> String {
    format!(
        "RDMA-Write a message straight into an rdma-server's registered memory, then wait for \
         the server's verdict.\n\n{}",
        crate::mesh::task::ABOUT
    )
}

/// What the command line asks for, in typed parts; nothing below `main` sees [`Args`].
#[derive(Debug)]
pub enum Task {
    /// `rdma-client SERVER`: one verified write.
    Write(WriteTask),
    /// `rdma-client SERVER --bench MODE`.
    Bench(BenchTask),
    /// `--fabric` or `--fabric-report`.
    Fabric(FabricTask),
    /// `--mesh NODES`.
    Mesh(MeshTask),
}

/// The command line parsed, but clap let no SERVER through where one is needed.
#[derive(Debug, thiserror::Error)]
#[error("no SERVER given (it is required without --fabric, --fabric-report or --mesh)")]
pub struct NoServer;

impl Args {
    /// Splits the command line into the task it asks for.
    ///
    /// # Errors
    /// No SERVER where one is needed (clap refuses that first).
    pub fn task(self) -> Result<Task, NoServer> {
        let payload = match self.file {
            Some(path) => PayloadSource::File(path),
            None => PayloadSource::Message(self.message),
        };
        let session = SessionOptions {
            timeout: self.timeout,
            wait_for_server: self.wait_for_server,
            cq_mode: self.local.cq_mode,
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
        };
        if self.mesh.mesh.is_some() {
            return Ok(Task::Mesh(MeshTask {
                rank: self.fabric.rank,
                rails: self.fabric.rails,
                lat_iters: self
                    .fabric
                    .lat_iters
                    .unwrap_or(crate::mesh::task::LAT_ITERS),
                bw_iters: self.fabric.bw_iters,
                mesh: self.mesh,
                notify: self.notify,
                knobs: self.bench.knobs(),
                session,
                device: self.local,
            }));
        }
        if self.fabric.asked() {
            return Ok(Task::Fabric(FabricTask {
                fabric: self.fabric,
                payload,
                notify: self.notify,
                knobs: self.bench.knobs(),
                session,
                device: self.local,
            }));
        }
        let server = self.server.ok_or(NoServer)?;
        Ok(match self.bench.bench {
            Some(mode) => Task::Bench(BenchTask {
                server,
                mode,
                bench: self.bench,
                session,
                device: self.local,
            }),
            None => Task::Write(WriteTask {
                server,
                payload,
                notify: self.notify,
                session,
                device: self.local,
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_the_seed() {
        let a = Args::try_parse_from(["rdma-client", "10.0.0.1"]).unwrap();
        assert_eq!(a.server.as_deref(), Some("10.0.0.1"));
        assert_eq!(a.message, "Hello RDMA Write!");
        assert_eq!(a.local.port, 1);
        assert_eq!(a.notify, None);
        assert!(!a.cm);
        assert_eq!(a.timeout, Duration::from_secs(10));
        assert!(Args::try_parse_from(["rdma-client", "h", "--timeout", "soon"]).is_err());
        assert!(Args::try_parse_from(["rdma-client", "h", "--timeout", "0s"]).is_err());
    }

    #[test]
    fn message_and_file_conflict() {
        let r = Args::try_parse_from(["rdma-client", "h", "--message", "x", "--file", "/dev/null"]);
        assert!(r.is_err());
    }
}

#[cfg(test)]
mod task_tests {
    use super::*;

    #[test]
    fn the_command_line_becomes_one_typed_task() {
        let task = |argv: &[&str]| Args::try_parse_from(argv).unwrap().task().unwrap();
        assert!(matches!(
            task(&["rdma-client", "h", "--notify", "tcp"]),
            Task::Write(WriteTask { ref server, notify: Some(Notify::Tcp), .. }) if server == "h"
        ));
        assert!(matches!(
            task(&["rdma-client", "h", "--bench", "bw"]),
            Task::Bench(BenchTask {
                mode: rdma_proto::BenchMode::Bw,
                ..
            })
        ));
        assert!(matches!(
            task(&["rdma-client", "--fabric-report"]),
            Task::Fabric(_)
        ));
        assert!(
            Args::try_parse_from(["rdma-client"]).is_err(),
            "SERVER is required"
        );
        let mut args = Args::try_parse_from(["rdma-client", "--fabric-report"]).unwrap();
        args.fabric.fabric_report = None;
        assert!(
            args.task().is_err(),
            "no server and no fabric: refused, not unwrapped"
        );
    }

    #[test]
    fn the_deployed_mesh_command_lines_parse() {
        // The systemd unit's and the DaemonSet's argv, as they run it.
        let unit = [
            "rdma-client",
            "--mesh",
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
        assert!(args.output.json);
        let Task::Mesh(t) = args.task().unwrap() else {
            panic!("not the mesh")
        };
        assert_eq!(t.mesh.mesh.as_deref(), Some("node[01-03]"));
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
            "--mesh",
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
            "--mesh",
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
        let Task::Fabric(f) = task(&["rdma-client", "--fabric", "--hosts", "n[1-2]"]) else {
            panic!("not the fabric")
        };
        assert_eq!(f.fabric.lat_iters(), 200);
    }

    fn task(argv: &[&str]) -> Task {
        Args::try_parse_from(argv).unwrap().task().unwrap()
    }

    #[test]
    fn bad_mesh_flags_are_named() {
        let refused = |extra: &[&str], names: &str| {
            let mut argv = vec!["rdma-client", "--mesh", "a,b"];
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
        refused(&["--fabric"], "--fabric");
        refused(&["--hosts", "a,b"], "--hosts");
        refused(&["h"], "SERVER");
        // A mesh flag without --mesh.
        let e = Args::try_parse_from(["rdma-client", "--every", "5s"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("--mesh"), "{e}");
        // --rails goes with --fabric or --mesh.
        let e = Args::try_parse_from(["rdma-client", "--rails", "auto"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("--fabric") && e.contains("--mesh"), "{e}");
        let Task::Mesh(t) = task(&["rdma-client", "--mesh", "a,b", "--rails", "2"]) else {
            panic!("not the mesh")
        };
        assert_eq!(t.rails, Some(crate::fabric::rails::Rails::Count(2)));
        // --rank needs a node list, --hosts or --mesh.
        let e = Args::try_parse_from(["rdma-client", "--rank", "1"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("--hosts") && e.contains("--mesh"), "{e}");
    }

    #[test]
    fn a_node_file_is_one_name_a_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nodes");
        std::fs::write(&path, "# the rack\nnode02\n\nnode01  # first\n").unwrap();
        let arg = format!("@{}", path.display());
        let Task::Mesh(t) = task(&["rdma-client", "--mesh", &arg]) else {
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
