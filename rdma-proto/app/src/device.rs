//! The command-line flags that choose the local end, shared by both binaries under the help
//! heading "Device" and named as rdma-core's tools name them (`-d/--ib-dev`, `-i/--ib-port`,
//! `-g/--gid-idx`; then `--tclass`, `--hop-limit`, `--sl`, `--qp-timeout`, `--cq-mode`), and how
//! they open it.

use rdma_core_rs::{CqMode, LocalPort, PathClass};

/// `-d/--ib-dev`, `-i/--ib-port`, `-g/--gid-idx`, the path class, `--qp-timeout`, `--cq-mode`.
///
/// The path class and `--qp-timeout` are left out of the short help (`-h`; a binary whose
/// `--help` is short says where the rest is), not of the long help or the man page.
///
/// `--device` and `--gid-index` (the earlier names; perftest's for the GID index) are hidden
/// aliases. The earlier `--port` is gone: it read as the TCP port, which perftest's `-p` is.
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Device")]
pub struct DeviceArgs {
    /// RDMA device (`ibv_devices`); default: the one that carries the connection's address
    #[arg(short = 'd', long = "ib-dev", alias = "device", value_name = "DEV")]
    pub device: Option<String>,

    /// Port number on the device
    #[arg(
        short = 'i',
        long = "ib-port",
        value_name = "PORT",
        default_value_t = 1
    )]
    pub port: u8,

    /// GID table index (`ibv_devinfo -v`); pins --ib-dev (default the first) and --ib-port
    #[arg(
        short = 'g',
        long = "gid-idx",
        alias = "gid-index",
        value_name = "INDEX"
    )]
    pub gid_index: Option<u32>,

    /// RoCE traffic class (IP TOS byte: DSCP << 2 | ECN), decimal or hex (0x6a)
    #[arg(long, hide_short_help = true, default_value_t = 0, value_name = "TOS", value_parser = parse_byte)]
    pub tclass: u8,

    /// RoCE hop limit (IP TTL) of this end's packets, 1-255
    #[arg(long, hide_short_help = true, default_value_t = 64, value_name = "N", value_parser = clap::value_parser!(u8).range(1..))]
    pub hop_limit: u8,

    /// InfiniBand service level of this end's packets, 0-15
    #[arg(long, hide_short_help = true, default_value_t = 0, value_name = "N", value_parser = clap::value_parser!(u8).range(0..=15))]
    pub sl: u8,

    /// Local ACK timeout, 4.096 us x 2^N (as perftest's; 14: 67 ms), 1-31
    #[arg(long, hide_short_help = true, default_value_t = 14, value_name = "N", value_parser = clap::value_parser!(u8).range(1..=31))]
    pub qp_timeout: u8,

    /// Wait for completions by busy polling or on a completion channel
    #[arg(long, default_value = "event", value_name = "poll|event")]
    pub cq_mode: CqMode,
}

/// A byte in decimal (`106`) or hex (`0x6a`, `0X6A`), as `ip` and `tc` read a TOS.
///
/// # Errors
/// Names the text and the forms it takes.
pub fn parse_byte(text: &str) -> Result<u8, String> {
    let t = text.trim();
    let parsed = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(hex) => u8::from_str_radix(hex, 16),
        None => t.parse(),
    };
    parsed.map_err(|_| format!("{text:?} is not a byte: give 0-255 in decimal (106) or hex (0x6a)"))
}

impl DeviceArgs {
    /// [`LocalPort::open`] with these flags.
    ///
    /// # Errors
    /// As [`LocalPort::open`].
    pub fn open(&self) -> rdma_core_rs::Result<LocalPort> {
        let mut local = LocalPort::open(self.device.as_deref(), self.port, self.gid_index)?;
        local.class = self.class();
        local.qp_timeout = self.qp_timeout;
        Ok(local)
    }

    /// How this end marks its packets, from `--tclass`, `--hop-limit` and `--sl`.
    #[must_use]
    pub fn class(&self) -> PathClass {
        PathClass {
            traffic_class: self.tclass,
            hop_limit: self.hop_limit,
            sl: self.sl,
        }
    }

    /// The local end for a connection whose local IP address is `local` (the client's
    /// route to the server, the address a server's client came in on): with
    /// `--gid-idx`, exactly the flags (the user chose); else the device, port and GID
    /// that carry that address ([`LocalPort::open_for`], within `--ib-dev` when
    /// named); for a loopback or unspecified address, which no NIC carries, as
    /// [`open`](Self::open). Returns why, when chosen by address.
    ///
    /// # Errors
    /// As [`LocalPort::open`] and [`LocalPort::open_for`].
    pub fn open_for(
        &self,
        local: std::net::IpAddr,
    ) -> rdma_core_rs::Result<(LocalPort, Option<String>)> {
        if !self.chooses_by(local) {
            return Ok((self.open()?, None));
        }
        let ip = local.to_canonical();
        let (mut port, why) = LocalPort::open_for(ip, self.device.as_deref())?;
        port.class = self.class();
        port.qp_timeout = self.qp_timeout;
        Ok((port, Some(why)))
    }

    /// Whether [`open_for`](Self::open_for) chooses by `local` (no `--gid-idx`, an
    /// address a NIC can carry) rather than by the flags alone.
    #[must_use]
    pub fn chooses_by(&self, local: std::net::IpAddr) -> bool {
        let ip = local.to_canonical();
        self.gid_index.is_none() && !ip.is_loopback() && !ip.is_unspecified()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    #[derive(Debug, clap::Parser)]
    struct Cli {
        #[command(flatten)]
        dev: DeviceArgs,
    }

    /// Issue 23, item 13: `--tclass 0x68` as `ip` and `tc` take it, and decimal.
    #[test]
    fn tclass_takes_hex_and_decimal_and_names_a_bad_value() {
        for (arg, want) in [("0x68", 0x68), ("0X6A", 0x6a), ("106", 106), ("0", 0)] {
            let cli = Cli::try_parse_from(["t", "--tclass", arg]).unwrap();
            assert_eq!(cli.dev.tclass, want, "{arg}");
        }
        for bad in ["0x100", "256", "0xg1", "x1", ""] {
            let e = Cli::try_parse_from(["t", "--tclass", bad])
                .unwrap_err()
                .to_string();
            assert!(e.contains("decimal (106) or hex (0x6a)"), "{bad}: {e}");
        }
    }

    /// `--qp-timeout` as perftest's: 14 (67 ms) unless given, 1-31, and what it gives the
    /// queue pairs is the ACK timeout it codes.
    #[test]
    fn qp_timeout_defaults_to_perftests_and_is_bounded() {
        let cli = Cli::try_parse_from(["t"]).unwrap();
        assert_eq!(
            cli.dev.qp_timeout,
            rdma_core_rs::RtsParams::default().timeout
        );
        let cli = Cli::try_parse_from(["t", "--qp-timeout", "18"]).unwrap();
        assert_eq!(cli.dev.qp_timeout, 18);
        for bad in ["0", "32", "x"] {
            assert!(
                Cli::try_parse_from(["t", "--qp-timeout", bad]).is_err(),
                "{bad}"
            );
        }
    }
}
