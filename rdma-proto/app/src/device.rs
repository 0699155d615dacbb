//! The command-line flags that choose the local end (`--device`, `--port`, `--gid-index`,
//! `--tclass`, `--hop-limit`, `--sl`, `--cq-mode`), shared by both binaries, and how they open it.

use rdma_core_rs::{CqMode, LocalPort, PathClass};

/// `--device`, `--port`, `--gid-index`, `--cq-mode`.
#[derive(Debug, Clone, clap::Args)]
pub struct DeviceArgs {
    /// RDMA device to use (default: the one whose GID table holds the connection's local
    /// address, across all devices; see `ibv_devices`).
    #[arg(long, short)]
    pub device: Option<String>,

    /// Port number on the device.
    #[arg(long, default_value_t = 1)]
    pub port: u8,

    /// GID table index (default: the GID of the connection's local address, RoCE v2 before
    /// v1; see `ibv_devinfo -v`). Given, it pins --device (default the first) and --port.
    #[arg(long)]
    pub gid_index: Option<u32>,

    /// RoCE traffic class of this end's packets: the IP header's TOS byte (DSCP << 2 | ECN;
    /// e.g. 106 = DSCP 26, ECN capable), what lossless RoCE fabrics classify on. 0-255.
    /// Decimal or hex, as `ip` and `tc` take it (`106`, `0x6a`).
    #[arg(long, default_value_t = 0, value_name = "TOS", value_parser = parse_byte)]
    pub tclass: u8,

    /// RoCE hop limit of this end's packets (the IP TTL / hop limit). 1-255.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u8).range(1..))]
    pub hop_limit: u8,

    /// InfiniBand service level of this end's packets. 0-15.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=15))]
    pub sl: u8,

    /// Local ACK timeout of this end's queue pairs, as perftest's --qp-timeout: a packet not
    /// acknowledged within 4.096 us x 2^N is sent again (14: 67 ms). Raise it where hosts
    /// stall longer than that (emulated CPUs), so a resend means a lost packet. 1-31.
    #[arg(long, default_value_t = 14, value_name = "N", value_parser = clap::value_parser!(u8).range(1..=31))]
    pub qp_timeout: u8,

    /// Wait for completions by busy polling (lowest latency) or on a completion channel.
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
    /// `--gid-index`, exactly the flags (the user chose); else the device, port and GID
    /// that carry that address ([`LocalPort::open_for`], within `--device` when
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

    /// Whether [`open_for`](Self::open_for) chooses by `local` (no `--gid-index`, an
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
