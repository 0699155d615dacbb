//! The load test's command line.

use clap::Args;
use std::path::PathBuf;
use std::time::Duration;

/// Run many clients against one server and check it neither fails nor leaks (hidden; e2e).
#[derive(Debug, Clone, Args)]
pub struct LoadArgs {
    /// The rdma-server binary.
    #[arg(long)]
    pub server_bin: PathBuf,

    /// The rdma-client binary.
    #[arg(long)]
    pub client_bin: PathBuf,

    /// The test-only misbehaving client (`rdma-misbehave-client`), for the clients that kill
    /// themselves (`--kill-stages`).
    #[arg(long)]
    pub misbehave_bin: Option<PathBuf>,

    /// TCP port for the server on 127.0.0.1.
    #[arg(long, default_value_t = 7472)]
    pub port: u16,

    /// Clients run one after another (the first --warmup of them are the warm-up).
    #[arg(long, default_value_t = 200)]
    pub sequential: u32,

    /// Clients run at once after that; also the server's --max-clients.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub concurrent: u32,

    /// Sessions before the first memory / fd measurement.
    #[arg(long, default_value_t = 10)]
    pub warmup: u32,

    /// The server's --buffer-size; payloads are 1..=this many bytes.
    #[arg(long, default_value_t = 65536, value_parser = clap::value_parser!(u64).range(1..=1 << 30))]
    pub buffer_size: u64,

    /// Most RSS growth (MiB) allowed between the warm-up and the end.
    #[arg(long, default_value_t = 8)]
    pub rss_slack_mib: u64,

    /// Most open-fd growth allowed between the warm-up and the end.
    #[arg(long, default_value_t = 0)]
    pub fd_slack: u64,

    /// Also run clients that SIGKILL themselves after hello, after accept and after the write
    /// (both notify modes), each followed by a normal client.
    #[arg(long)]
    pub kill_stages: bool,

    /// Rounds of strangers after the other phases: each a burst of short connections (connect,
    /// one junk line, close) from `--soak-threads` threads for `--soak-burst`, a quiet gap
    /// until the server is back to its idle threads, its RSS and open files measured against
    /// the warm-up's, then a real client that must verify.
    #[arg(long, default_value_t = 0)]
    pub soak_rounds: u32,

    /// How long each burst of strangers lasts.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub soak_burst: Duration,

    /// Threads connecting at once in a burst of strangers.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub soak_threads: u32,

    /// Extra server argument (repeatable), e.g. --server-arg=--cq-mode=poll.
    #[arg(long = "server-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub server_args: Vec<String>,

    /// Extra client argument (repeatable), e.g. --client-arg=--ib-dev=rxe0.
    #[arg(long = "client-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub client_args: Vec<String>,

    /// Deadline for each client process.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    pub client_deadline: Duration,

    /// Deadline for the server to listen, to become quiescent, and to stop on SIGTERM.
    #[arg(long, default_value = "20s", value_parser = humantime::parse_duration)]
    pub server_deadline: Duration,

    /// Directory for the payload files (default: the system temp dir).
    #[arg(long)]
    pub tmp_dir: Option<PathBuf>,

    /// Print a final JSON line with the numbers.
    #[arg(long)]
    pub json: bool,

    /// Seed of the random number generator for payload lengths and bytes (printed, to replay
    /// a run).
    #[arg(long)]
    pub rng_seed: Option<u64>,
}

/// The subcommand that runs the load test: `xtask load` (main.rs's `Load`).
const SUBCOMMAND: &str = "load";

impl LoadArgs {
    /// The load test of `server_bin` and `client_bin` with every other option at its default
    /// (clap's, written once above), for a plan to set what it wants in typed fields.
    pub fn new(server_bin: &str, client_bin: &str) -> color_eyre::Result<LoadArgs> {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: LoadArgs,
        }
        use clap::Parser as _;
        let cli = Cli::try_parse_from([
            SUBCOMMAND,
            "--server-bin",
            server_bin,
            "--client-bin",
            client_bin,
        ])?;
        Ok(cli.args)
    }

    /// The command line (from `load` on) that runs exactly these arguments.
    pub fn argv(&self) -> Vec<String> {
        let path = |p: &PathBuf| p.display().to_string();
        let time = |d: Duration| humantime::format_duration(d).to_string();
        let mut v: Vec<String> = vec![SUBCOMMAND.to_owned()];
        let mut opt = |name: &str, value: String| v.extend([format!("--{name}"), value]);
        opt("server-bin", path(&self.server_bin));
        opt("client-bin", path(&self.client_bin));
        if let Some(m) = &self.misbehave_bin {
            opt("misbehave-bin", path(m));
        }
        opt("port", self.port.to_string());
        opt("sequential", self.sequential.to_string());
        opt("concurrent", self.concurrent.to_string());
        opt("warmup", self.warmup.to_string());
        opt("buffer-size", self.buffer_size.to_string());
        opt("rss-slack-mib", self.rss_slack_mib.to_string());
        opt("fd-slack", self.fd_slack.to_string());
        opt("soak-rounds", self.soak_rounds.to_string());
        opt("soak-burst", time(self.soak_burst));
        opt("soak-threads", self.soak_threads.to_string());
        opt("client-deadline", time(self.client_deadline));
        opt("server-deadline", time(self.server_deadline));
        if let Some(d) = &self.tmp_dir {
            opt("tmp-dir", path(d));
        }
        if let Some(seed) = self.rng_seed {
            opt("rng-seed", seed.to_string());
        }
        v.extend(self.server_args.iter().map(|a| format!("--server-arg={a}")));
        v.extend(self.client_args.iter().map(|a| format!("--client-arg={a}")));
        v.extend(self.kill_stages.then(|| "--kill-stages".to_owned()));
        v.extend(self.json.then(|| "--json".to_owned()));
        v
    }
}
