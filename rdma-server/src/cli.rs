//! Command-line interface of `rdma-server`.

use crate::exit;
use clap::Parser;
use ipnet::IpNet;
use rdma_app as app;
use rdma_app::device::DeviceArgs;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// The default of `--max-pinned`: 256 MiB.
pub const DEFAULT_MAX_PINNED: u64 = 256 << 20;

/// Register a buffer, let clients RDMA-Write into it, and verify what landed — with no CPU copy.
///
/// One-shot by default (the classic demo): the server exits 0 after the first verified write;
/// failed or aborted clients are logged and the server keeps waiting. `--serve` keeps serving.
#[derive(Debug, Parser)]
#[command(version, about, after_help = app::exit_codes_help(exit::SUCCESS, exit::EXITS))]
pub struct Args {
    /// TCP address for the connection-info handshake. The default, `[::]:7471`, listens on
    /// IPv6 and IPv4 at once (dual-stack; IPv4 only where the kernel has no IPv6).
    #[arg(long, short, default_value = "[::]:7471")]
    pub listen: SocketAddr,

    /// `--json`.
    #[command(flatten)]
    pub output: app::JsonFlag,

    /// Size in bytes of the buffer registered for each client.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=1 << 30))]
    pub buffer_size: u64,

    /// Largest buffer a bench session (`rdma-client bench`) may ask for, in bytes; each bench
    /// session gets a fresh buffer of the size it asks for. 0 turns bench sessions off (the
    /// banner then does not offer them).
    #[arg(long, default_value_t = 8 << 20, value_parser = clap::value_parser!(u64).range(0..=1 << 30))]
    pub bench_max_bytes: u64,

    /// Most bytes all live sessions together may pin (registered memory): each write session
    /// pins its --buffer-size, a bench session its buffer, a bench lat session twice that. A
    /// session that would go over is answered `busy`. Cut at start to what the locked-memory
    /// limit (RLIMIT_MEMLOCK) allows, with a warning.
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_MAX_PINNED, value_parser = clap::value_parser!(u64).range(4096..=1 << 40))]
    pub max_pinned: u64,

    /// How long one bench session may last (e.g. 2m).
    #[arg(long, default_value = "2m", value_parser = app::parse_duration)]
    pub bench_max_time: Duration,

    /// Deadline (e.g. 10s, 500ms, 1m) for each phase of a session: hello after the banner, the rest of the
    /// handshake, and the write itself.
    #[arg(long, default_value = "10s", value_parser = app::parse_duration)]
    pub timeout: Duration,

    /// One-shot mode: give up after this long (e.g. 5m) without a verified write (exit code 5).
    #[arg(long, value_parser = app::parse_duration)]
    pub lifetime: Option<Duration>,

    /// Keep serving clients until SIGINT/SIGTERM instead of exiting after the first verified write.
    #[arg(long)]
    pub serve: bool,

    /// With --serve: how long a session whose client asked for rounds (the mesh's probes) is
    /// kept after each verdict for its next write on the same queue pairs; `0` grants none.
    /// At most half of --max-clients sessions are kept idle at once, and half of --max-per-ip
    /// (at least one) from one address; the rest end at their verdict as usual.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = keep_alive)]
    pub keep_alive: Duration,

    /// With --keep-alive: how long a session kept for rounds may last from its accept (e.g.
    /// 10m), however often its client comes back; past it the session ends at its verdict
    /// (a bench session's --bench-max-time bounds it too). Rounds of one session are also paced
    /// at 64 MiB/s of their buffers, and one address (an IPv6 /64) keeps at most half its
    /// --max-per-ip.
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = keep_max_time)]
    pub keep_max_time: Duration,

    /// Most clients served at once; one more gets a `busy` error.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub max_clients: u32,

    /// Most connections at once from one address (one /64 for IPv6), under --max-clients: one
    /// address cannot take every slot before sending a single line. One more gets `busy`. It
    /// counts addresses, not hosts: a host with several addresses or /64s gets this many for
    /// each, and only --max-clients bounds them all.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub max_per_ip: u32,

    /// File holding the shared access token clients must present (or set RDMA_WRITE_TOKEN).
    /// Only its owner may read it (`chmod 600 FILE`), as ssh requires of a private key.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,

    /// Only accept clients from this network (repeatable), e.g. 10.0.0.0/24.
    #[arg(long = "allow", value_name = "CIDR")]
    pub allow: Vec<IpNet>,

    /// Read settings from this TOML file (the package's is /etc/rdma-server/rdma-server.toml);
    /// flags given here override it. Unknown keys and bad values are refused.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// The local RDMA device, port, GID and completion mode (last: its help heading, "Device",
    /// holds what follows it).
    #[command(flatten)]
    pub local: DeviceArgs,
}

/// `--keep-alive`: a duration (at most an hour), or `0` for none.
fn keep_alive(text: &str) -> Result<Duration, String> {
    if text.trim() == "0" {
        return Ok(Duration::ZERO);
    }
    let d = app::parse_duration(text)?;
    let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    if rdma_proto::rounds::KEEP_ALIVE_MS.contains(&ms) {
        Ok(d)
    } else {
        Err("a keep-alive is 1ms to 1h, or 0 for none (e.g. 30s)".into())
    }
}

/// `--keep-max-time`: a duration of a second to a day.
fn keep_max_time(text: &str) -> Result<Duration, String> {
    let d = app::parse_duration(text)?;
    if (Duration::from_secs(1)..=Duration::from_secs(86_400)).contains(&d) {
        Ok(d)
    } else {
        Err("a kept session's lifetime is 1s to 24h (e.g. 10m)".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_the_seed() {
        let a = Args::try_parse_from(["rdma-server"]).unwrap();
        assert_eq!(a.listen.port(), 7471);
        assert_eq!(a.buffer_size, 64);
        assert!(!a.serve);
        assert_eq!(a.max_clients, 16);
        assert_eq!(a.keep_alive, Duration::from_secs(30));
        assert_eq!(a.keep_max_time, Duration::from_secs(600));
    }

    #[test]
    fn only_the_device_options_are_under_device() {
        use clap::CommandFactory as _;
        let cmd = Args::command();
        let under: Vec<&str> = cmd
            .get_arguments()
            .filter(|a| a.get_help_heading() == Some("Device"))
            .filter_map(|a| a.get_long())
            .collect();
        assert_eq!(
            under,
            [
                "ib-dev",
                "ib-port",
                "gid-idx",
                "tclass",
                "hop-limit",
                "sl",
                "qp-timeout",
                "cq-mode"
            ]
        );
    }

    #[test]
    fn bad_values_are_refused() {
        assert!(Args::try_parse_from(["rdma-server", "--buffer-size", "0"]).is_err());
        assert!(Args::try_parse_from(["rdma-server", "--allow", "10.0.0.0/33"]).is_err());
        assert!(Args::try_parse_from(["rdma-server", "--listen", "nowhere"]).is_err());
        assert!(Args::try_parse_from(["rdma-server", "--max-clients", "0"]).is_err());
        assert!(Args::try_parse_from(["rdma-server", "--lifetime", "0s"]).is_err());
        assert!(Args::try_parse_from(["rdma-server", "--keep-alive", "2h"]).is_err());
        assert!(Args::try_parse_from(["rdma-server", "--keep-alive", "soon"]).is_err());
        assert!(Args::try_parse_from(["rdma-server", "--keep-max-time", "0"]).is_err());
        assert!(Args::try_parse_from(["rdma-server", "--keep-max-time", "2d"]).is_err());
        let none = Args::try_parse_from(["rdma-server", "--keep-alive", "0"]).unwrap();
        assert_eq!(none.keep_alive, Duration::ZERO);
    }
}
