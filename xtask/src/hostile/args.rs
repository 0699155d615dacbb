//! The hostile client's command line, and the [`Config`] the cases read.

use clap::Args;
use color_eyre::eyre::{Result, WrapErr as _};
use rdma_hostile::{Case, Config};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Misbehave against a live rdma-server and check every answer (hidden; used by the e2e tests).
#[derive(Debug, Clone, Args)]
pub struct HostileArgs {
    /// The server's handshake address, ADDR:PORT.
    #[arg(long)]
    pub server: SocketAddr,

    /// Case to run (repeatable). Default: every case that fits the server's configuration.
    #[arg(long = "case", value_name = "NAME")]
    pub cases: Vec<Case>,

    /// One JSON object per case, then a summary object.
    #[arg(long)]
    pub json: bool,

    /// The server's --buffer-size: `too_long` asks for one byte more, accepts must offer this.
    #[arg(long, default_value_t = 64)]
    pub buffer_size: u64,

    /// The server's --timeout (e.g. 3s): `slow_loris` and `slow_drip` expect `timeout` after it.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub server_timeout: Duration,

    /// The token the server requires (its --token-file content). Valid hellos carry it, and
    /// `wrong_token` and `missing_token` run.
    #[arg(long, conflicts_with = "token_file")]
    pub token: Option<String>,

    /// Like --token, read from a file (trailing newline trimmed, as the server does).
    #[arg(long)]
    pub token_file: Option<PathBuf>,

    /// The server's --max-clients: enables `busy` (opens that many idle connections, expects
    /// the next one to be refused).
    #[arg(long)]
    pub max_clients: Option<u32>,

    /// The server's --max-per-ip: enables `per_ip` (that many idle connections, then one more).
    #[arg(long)]
    pub max_per_ip: Option<u32>,

    /// The server's --max-pinned: enables `pinned_budget` (two bench lat sessions that
    /// together pin more; the server's --bench-max-bytes must allow a third of it).
    #[arg(long)]
    pub max_pinned: Option<u64>,

    /// The server's --allow list excludes this client: only `forbidden` runs, and every
    /// connection must be refused before any banner.
    #[arg(long)]
    pub expect_forbidden: bool,

    /// GID announced in valid hellos (default: `::ffff:` + our local IPv4 address of the TCP
    /// connection, so the server's RDMA stack can resolve it).
    #[arg(long)]
    pub gid: Option<String>,

    /// How long to wait for each reply.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub reply_timeout: Duration,

    /// Keep trying to connect this long before the first case (the server may still be starting).
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub wait_for_server: Duration,

    /// Seed of the random number generator for QPNs, PSNs and wrong tokens (printed, to replay
    /// a run).
    #[arg(long)]
    pub rng_seed: Option<u64>,

    /// After every case, a real `rdma-client` (this binary) must still get its write verified.
    #[arg(long, value_name = "PATH")]
    pub probe_client: Option<PathBuf>,
}

impl HostileArgs {
    /// Reads the token file and finds our GID (connecting to the server, which may still be
    /// starting).
    pub(super) fn config(&self) -> Result<Config> {
        let token = match (&self.token, &self.token_file) {
            (Some(t), _) => Some(t.clone()),
            (None, Some(path)) => {
                let text = std::fs::read_to_string(path)
                    .wrap_err_with(|| format!("reading the token file {}", path.display()))?;
                Some(text.trim_end_matches(['\r', '\n']).to_owned())
            }
            (None, None) => None,
        };
        Ok(Config {
            server: self.server,
            buffer_size: self.buffer_size,
            server_timeout: self.server_timeout,
            token,
            max_clients: self.max_clients,
            max_per_ip: self.max_per_ip,
            max_pinned: self.max_pinned,
            expect_forbidden: self.expect_forbidden,
            gid: match &self.gid {
                Some(g) => g.clone(),
                None => local_gid(self.server, self.reply_timeout, self.wait_for_server)?,
            },
            reply: self.reply_timeout,
            rng_seed: self.rng_seed.unwrap_or_else(|| fastrand::u64(..)),
        })
    }
}

/// The GID for our hellos: our local address towards the server, IPv4-mapped (so the server's
/// RDMA stack can resolve it; the QP never sends anything anyway).
fn local_gid(server: SocketAddr, wait: Duration, retry_for: Duration) -> Result<String> {
    let until = Instant::now() + retry_for;
    let s = loop {
        match TcpStream::connect_timeout(&server, wait) {
            Ok(s) => break s,
            Err(_) if Instant::now() < until => std::thread::sleep(Duration::from_millis(200)),
            Err(e) => {
                return Err(e).wrap_err_with(|| {
                    format!("cannot connect to the server at {server} (tried for {retry_for:?}): is it running?")
                });
            }
        }
    };
    let local = s.local_addr().wrap_err("reading our local address")?.ip();
    Ok(gid_for(local))
}

/// An IPv4-mapped GID for an IPv4 address, the address itself for IPv6; a typical guest
/// address for loopback (which has no usable RoCE GID).
fn gid_for(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) if !v4.is_loopback() && !v4.is_unspecified() => format!("::ffff:{v4}"),
        IpAddr::V6(v6) if !v6.is_loopback() && !v6.is_unspecified() => v6.to_string(),
        _ => "::ffff:10.0.0.2".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hello_gid_follows_our_address() {
        assert_eq!(gid_for("10.0.0.2".parse().unwrap()), "::ffff:10.0.0.2");
        assert_eq!(
            gid_for("192.168.1.7".parse().unwrap()),
            "::ffff:192.168.1.7"
        );
        assert_eq!(gid_for("127.0.0.1".parse().unwrap()), "::ffff:10.0.0.2");
        assert_eq!(gid_for("fe80::1".parse().unwrap()), "fe80::1");
        assert_eq!(gid_for("::1".parse().unwrap()), "::ffff:10.0.0.2");
    }
}
