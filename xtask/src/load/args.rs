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
