//! Command-line interface of `rdma-client`.

use crate::bench::BenchTask;
use crate::exit;
use crate::fabric::FabricTask;
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
#[command(version, about, after_help = app::exit_codes_help(exit::SUCCESS, exit::EXITS))]
pub struct Args {
    /// Server to connect to: HOST or HOST:PORT (default port 7471). Required, except with
    /// --fabric or --fabric-report.
    #[arg(
        required_unless_present_any = ["fabric", "fabric_report"],
        conflicts_with_all = ["fabric", "fabric_report"]
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
}

/// The command line parsed, but clap let no SERVER through where one is needed.
#[derive(Debug, thiserror::Error)]
#[error("no SERVER given (it is required without --fabric or --fabric-report)")]
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
                value: self.token,
            },
            cm: self.cm,
        };
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
}
