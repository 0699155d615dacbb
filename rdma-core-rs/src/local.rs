//! The local end of a connection: a device, one ACTIVE port on it, and the GID to use. Both
//! rdma-write binaries need exactly this before any queue pair exists.

use std::net::IpAddr;

use crate::route::{self, Candidate};
use crate::{
    Context, Endpoint, GidEntry, PathClass, PortInfo, PortState, QueuePair, Result, Transport,
    devices,
};

/// An open device with a checked port and a selected GID.
#[derive(Clone, Debug)]
#[must_use]
pub struct LocalPort {
    /// The device, opened once.
    pub ctx: Context,
    /// The port, known to be ACTIVE.
    pub port: PortInfo,
    /// The GID that goes into the address vector (and to the peer).
    pub gid: GidEntry,
    /// How this end's queue pairs mark their packets (`--tclass`, `--hop-limit`, `--sl`).
    pub class: PathClass,
}

impl LocalPort {
    /// Opens `device` (`None`: the first one), requires `port` to be ACTIVE, and selects the GID:
    /// `gid_index` if given, else the port's RoCE v2 IPv4-mapped GID (index 0 on InfiniBand).
    ///
    /// # Errors
    /// No RDMA in the kernel, no such device, port not ACTIVE, no usable GID: each with advice.
    pub fn open(device: Option<&str>, port: u8, gid_index: Option<u32>) -> Result<Self> {
        let ctx = Context::open(device)?;
        let port = ctx.require_active_port(port)?;
        let gid = ctx.select_gid(&port, gid_index)?;
        Ok(Self {
            ctx,
            port,
            gid,
            class: PathClass::default(),
        })
    }

    /// Opens the device and port that carry `local`, the local IP address of the connection
    /// this end serves (from `getsockname`), looking at every ACTIVE port of every device
    /// (or only of `device`, when named); the rule is [`route::choose`]. Returns the port and
    /// why it was chosen, for the user.
    ///
    /// # Errors
    /// No RDMA, no devices, a named device that does not exist or does not carry the address,
    /// no port with a GID for it ([`crate::Error::NoRoute`]), or a verbs query failure.
    pub fn open_for(local: IpAddr, device: Option<&str>) -> Result<(Self, String)> {
        let (mut opened, candidates) = snapshot(device)?;
        let choice = match route::choose(&candidates, local, device) {
            Ok(choice) => choice,
            Err(no) => return Self::iwarp_for(local, opened, &candidates).ok_or(no.into()),
        };
        let c = &candidates[choice.candidate];
        let why = format!(
            "{} port {} for {}: {}",
            c.device,
            c.port.num,
            local.to_canonical(),
            choice.why
        );
        Ok((
            Self {
                ctx: opened.swap_remove(choice.candidate),
                port: c.port,
                gid: choice.gid,
                class: PathClass::default(),
            },
            why,
        ))
    }

    /// The iWARP port that carries `local`, where no GID table holds it (iWARP's GIDs are not
    /// addresses): the port RDMA CM binds the address to, if it is one of the snapshot's (so of
    /// `--device`, when named), on an iWARP device, and ACTIVE.
    fn iwarp_for(
        local: IpAddr,
        mut opened: Vec<Context>,
        candidates: &[Candidate],
    ) -> Option<(Self, String)> {
        let (name, num) = crate::cm::device_for(local).ok()?;
        let at = candidates
            .iter()
            .position(|c| c.device == name && c.port.num == num)?;
        let port = candidates[at].port;
        let ctx = opened.swap_remove(at);
        if ctx.transport() != Transport::Iwarp || port.state != PortState::Active {
            return None;
        }
        let gid = ctx.select_gid(&port, None).ok()?;
        let why = format!(
            "{name} port {num} for {}: the iWARP device RDMA CM binds the address to (iWARP \
             GIDs are not addresses)",
            local.to_canonical()
        );
        Some((
            Self {
                ctx,
                port,
                gid,
                class: PathClass::default(),
            },
            why,
        ))
    }

    /// This host's rails ([`route::rails`]): every ACTIVE port of every device whose GID table
    /// holds an IP address, by device name, for a check that runs over each of them.
    ///
    /// # Errors
    /// No RDMA, no devices, or a verbs query failure.
    pub fn rails() -> Result<Vec<route::Rail>> {
        Ok(route::rails(&snapshot(None)?.1))
    }

    /// This side of a connection through `qp`, for the peer: the QPN, our send PSN `psn` (give
    /// the same to [`QueuePair::connect_to`]), and this port's GID, LID and active MTU.
    #[must_use]
    pub fn endpoint<S>(&self, qp: &QueuePair<S>, psn: u32) -> Endpoint {
        Endpoint {
            qpn: qp.qpn(),
            psn,
            gid: self.gid.gid,
            lid: self.port.lid,
            mtu: self.port.active_mtu.bytes(),
        }
    }
}

/// Every port of every device (or of `device`, when named), as [`route::choose`] sees them,
/// each with its device opened.
fn snapshot(device: Option<&str>) -> Result<(Vec<Context>, Vec<Candidate>)> {
    let mut opened = Vec::new();
    let mut candidates = Vec::new();
    let names: Vec<String> = match device {
        // Opened below: an unknown name fails there, listing the devices.
        Some(d) => vec![d.to_owned()],
        None => devices()?.into_iter().map(|d| d.name).collect(),
    };
    if names.is_empty() {
        return Err(crate::Error::NoDevices);
    }
    for name in &names {
        let ctx = Context::open(Some(name))?;
        for num in 1..=ctx.port_count()? {
            let port = ctx.query_port(num)?;
            // A port whose table cannot be read is seen as having none.
            let table = ctx.gid_table(num).unwrap_or_default();
            candidates.push(Candidate {
                device: name.clone(),
                port,
                table,
            });
            opened.push(ctx.clone());
        }
    }
    Ok((opened, candidates))
}

/// Command-line flags that choose the local end (feature `clap`), shared by the binaries.
#[cfg(feature = "clap")]
pub mod cli {
    use crate::CqMode;

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
        parsed.map_err(|_| {
            format!("{text:?} is not a byte: give 0-255 in decimal (106) or hex (0x6a)")
        })
    }

    impl DeviceArgs {
        /// [`super::LocalPort::open`] with these flags.
        ///
        /// # Errors
        /// As [`super::LocalPort::open`].
        pub fn open(&self) -> crate::Result<super::LocalPort> {
            let mut local =
                super::LocalPort::open(self.device.as_deref(), self.port, self.gid_index)?;
            local.class = self.class();
            Ok(local)
        }

        /// How this end marks its packets, from `--tclass`, `--hop-limit` and `--sl`.
        #[must_use]
        pub fn class(&self) -> crate::PathClass {
            crate::PathClass {
                traffic_class: self.tclass,
                hop_limit: self.hop_limit,
                sl: self.sl,
            }
        }

        /// The local end for a connection whose local IP address is `local` (the client's
        /// route to the server, the address a server's client came in on): with
        /// `--gid-index`, exactly the flags (the user chose); else the device, port and GID
        /// that carry that address ([`super::LocalPort::open_for`], within `--device` when
        /// named); for a loopback or unspecified address, which no NIC carries, as
        /// [`open`](Self::open). Returns why, when chosen by address.
        ///
        /// # Errors
        /// As [`super::LocalPort::open`] and [`super::LocalPort::open_for`].
        pub fn open_for(
            &self,
            local: std::net::IpAddr,
        ) -> crate::Result<(super::LocalPort, Option<String>)> {
            if !self.chooses_by(local) {
                return Ok((self.open()?, None));
            }
            let ip = local.to_canonical();
            let (mut port, why) = super::LocalPort::open_for(ip, self.device.as_deref())?;
            port.class = self.class();
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
    }
}
