//! The local end of a connection: a device, one ACTIVE port on it, and the GID to use. Both
//! rdma-write binaries need exactly this before any queue pair exists.

use std::net::IpAddr;

use crate::route::{self, Candidate};
use crate::{Context, GidEntry, PathClass, PortInfo, PortState, Result, Transport, devices};

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
    /// The local ACK timeout code of this end's queue pairs (`--qp-timeout`): a packet not
    /// acknowledged within 4.096 µs × 2^code is sent again ([`RtsParams::ack_timeout`]).
    ///
    /// [`RtsParams::ack_timeout`]: crate::RtsParams::ack_timeout
    pub qp_timeout: u8,
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
            qp_timeout: crate::RtsParams::default().timeout,
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
                qp_timeout: crate::RtsParams::default().timeout,
            },
            why,
        ))
    }

    /// The iWARP port that carries `local`, where no GID table holds it (iWARP's GIDs are not
    /// addresses): the port RDMA CM binds the address to, if it is one of the snapshot's (so of
    /// `--ib-dev`, when named), on an iWARP device, and ACTIVE.
    fn iwarp_for(
        local: IpAddr,
        mut opened: Vec<Context>,
        candidates: &[Candidate],
    ) -> Option<(Self, String)> {
        let (name, num) = crate::cm::bind::device_for(local).ok()?;
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
                qp_timeout: crate::RtsParams::default().timeout,
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
