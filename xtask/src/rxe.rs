//! Soft-RoCE (and Soft-iWARP) links: `rdma link add NAME type rxe|siw netdev IF`, wait until
//! ACTIVE, and a guard that removes only the link it created.

use std::time::{Duration, Instant};

use color_eyre::eyre::{Result, bail, eyre};
use xshell::{Shell, cmd};

use crate::exec;
use crate::plan::LinkKind;

/// One line of `rdma link show`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkInfo {
    /// Device name (`rxe0`).
    pub device: String,
    /// Port number.
    pub port: u32,
    /// `ACTIVE`, `DOWN`, ...
    pub state: String,
    /// `LINK_UP`, ...
    pub physical_state: String,
    /// The netdev the link sits on, if any.
    pub netdev: Option<String>,
}

/// Parses `rdma link show` output, e.g.
/// `link rxe0/1 state ACTIVE physical_state LINK_UP netdev eth0`.
pub fn parse_rdma_link(out: &str) -> Vec<LinkInfo> {
    out.lines()
        .filter_map(|line| {
            let mut it = line.split_whitespace();
            if it.next()? != "link" {
                return None;
            }
            let (device, port) = it.next()?.split_once('/')?;
            let mut info = LinkInfo {
                device: device.to_owned(),
                port: port.parse().ok()?,
                state: String::new(),
                physical_state: String::new(),
                netdev: None,
            };
            while let Some(key) = it.next() {
                match key {
                    "state" => info.state = it.next()?.to_owned(),
                    "physical_state" => info.physical_state = it.next()?.to_owned(),
                    "netdev" => info.netdev = Some(it.next()?.to_owned()),
                    _ => {}
                }
            }
            Some(info)
        })
        .collect()
}

/// The current RDMA links (`rdma link show`).
pub fn links() -> Result<Vec<LinkInfo>> {
    let sh = Shell::new()?;
    Ok(parse_rdma_link(&exec::run(cmd!(sh, "rdma link show"))?))
}

/// Loads rdma_rxe (and crc32_generic, which 6.1's rxe needs but does not depend on) with
/// modprobe unless it is already loaded or built in. A no-op where modules cannot be loaded
/// (then `rdma link add` explains what is missing).
pub fn load_module() -> Result<()> {
    if std::path::Path::new("/sys/module/rdma_rxe").exists()
        || !std::path::Path::new("/proc/modules").exists()
    {
        return Ok(());
    }
    let sh = Shell::new()?;
    // crc32_generic may be built in or absent on newer kernels: best effort.
    let _ = exec::output(cmd!(sh, "modprobe -q crc32_generic"));
    exec::run(cmd!(sh, "modprobe rdma_rxe"))
        .map(|_| ())
        .map_err(|e| {
            e.wrap_err("loading rdma_rxe failed; is the kernel built with CONFIG_RDMA_RXE?")
        })
}

/// Turns the stderr of a failed `rdma link add` into advice.
pub fn explain_add_failure(kind: LinkKind, netdev: &str, stderr: &str) -> String {
    let mut msg = format!(
        "`rdma link add ... netdev {netdev}` failed: {}",
        stderr.trim()
    );
    if stderr.contains("No such file or directory") {
        msg.push_str(
            "\nhint: on Linux 6.1 rdma_rxe allocates a crc32 shash when the device is created; \
             if the crc32_generic module is not loaded (and cannot be auto-loaded) this fails \
             with a bare ENOENT: load crc32_generic first",
        );
    }
    if kind == LinkKind::Siw {
        msg.push_str(
            "\nhint: for `type siw` the siw module must be loaded first (Debian's kernels do \
             not ship it: cargo xtask vm-smoke --transport siw builds it for the guests)",
        );
    }
    if netdev == "lo" || stderr.contains("failed to add lo") {
        msg.push_str("\nhint: rxe refuses the loopback device `lo`; use a real netdev (virtio-net, veth, dummy)");
    }
    if stderr.contains("Operation not permitted") {
        msg.push_str("\nhint: creating rxe links needs root (CAP_NET_ADMIN)");
    }
    if kind == LinkKind::Rxe
        && (stderr.contains("NETLINK_RDMA") || stderr.contains("Unknown device type"))
    {
        msg.push_str("\nhint: this kernel has no RDMA netlink / rdma_rxe; load the rdma_rxe module or use --backend vm");
    }
    msg
}

/// An rxe link; deleted on drop only if this guard created it.
#[derive(Debug)]
pub struct RxeLink {
    name: String,
    netdev: String,
    created: bool,
}

impl RxeLink {
    /// Creates rxe device `name` on `netdev` (or adopts an existing one on the same netdev,
    /// which it will then leave alone), and waits until its port is ACTIVE.
    pub fn create(name: &str, netdev: &str, timeout: Duration) -> Result<Self> {
        Self::create_of(LinkKind::Rxe, name, netdev, Some(timeout))
    }

    /// [`create`](Self::create) for either kind (siw's module must already be loaded);
    /// `wait: None` does not wait for ACTIVE (the netdev was left down on purpose).
    pub fn create_of(
        kind: LinkKind,
        name: &str,
        netdev: &str,
        wait: Option<Duration>,
    ) -> Result<Self> {
        let deadline = Instant::now() + wait.unwrap_or(Duration::from_secs(20));
        if let Some(existing) = links()?.into_iter().find(|l| l.device == name) {
            if existing.netdev.as_deref() != Some(netdev) {
                bail!(
                    "an RDMA device named {name} already exists on {:?}, not on {netdev}; pick another name or remove it with `rdma link delete {name}`",
                    existing.netdev
                );
            }
            let link = Self {
                name: name.to_owned(),
                netdev: netdev.to_owned(),
                created: false,
            };
            if wait.is_some() {
                link.wait_active(deadline)?;
            }
            return Ok(link);
        }
        if kind == LinkKind::Rxe {
            load_module()?;
        }
        let sh = Shell::new()?;
        let ty = kind.as_str();
        let out = exec::output(cmd!(sh, "rdma link add {name} type {ty} netdev {netdev}"))?;
        if !out.status.success() {
            bail!(explain_add_failure(
                kind,
                netdev,
                &String::from_utf8_lossy(&out.stderr)
            ));
        }
        let link = Self {
            name: name.to_owned(),
            netdev: netdev.to_owned(),
            created: true,
        };
        if wait.is_some() {
            link.wait_active(deadline)?;
        }
        Ok(link)
    }

    /// Device name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Netdev under the link.
    pub fn netdev(&self) -> &str {
        &self.netdev
    }

    fn wait_active(&self, deadline: Instant) -> Result<()> {
        let mut last = Vec::new();
        loop {
            last = links().unwrap_or(last);
            if last
                .iter()
                .any(|l| l.device == self.name && l.state == "ACTIVE")
            {
                return Ok(());
            }
            if Instant::now() >= deadline {
                let seen = last.iter().find(|l| l.device == self.name).map_or_else(
                    || "it is not listed by `rdma link`".to_owned(),
                    |l| format!("state {} physical_state {}", l.state, l.physical_state),
                );
                return Err(eyre!(
                    "RDMA device {} on {} did not become ACTIVE in time ({seen}); is {} up with carrier?",
                    self.name,
                    self.netdev,
                    self.netdev
                ));
            }
            exec::sleep(Duration::from_millis(100))?;
        }
    }
}

impl Drop for RxeLink {
    fn drop(&mut self) {
        if !self.created {
            return;
        }
        let name = &self.name;
        match Shell::new()
            .map_err(Into::into)
            .and_then(|sh| exec::run(cmd!(sh, "rdma link delete {name}")))
        {
            Ok(_) => {}
            Err(e) => eprintln!("warning: could not remove rxe device {name}: {e:#}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_rdma_link() {
        let out = "link rxe0/1 state ACTIVE physical_state LINK_UP netdev eth0 \n\
                   link mlx5_0/1 subnet_prefix fe80:0000:0000:0000 lid 3 sm_lid 1 lmc 0 state DOWN physical_state DISABLED \n\
                   garbage line\n";
        let links = parse_rdma_link(out);
        assert_eq!(links.len(), 2);
        assert_eq!(
            links[0],
            LinkInfo {
                device: "rxe0".into(),
                port: 1,
                state: "ACTIVE".into(),
                physical_state: "LINK_UP".into(),
                netdev: Some("eth0".into())
            }
        );
        assert_eq!(links[1].device, "mlx5_0");
        assert_eq!(links[1].state, "DOWN");
        assert_eq!(links[1].netdev, None);
        assert!(parse_rdma_link("").is_empty());
    }

    #[test]
    fn explains_crc32_and_lo() {
        let m = explain_add_failure(LinkKind::Rxe, "eth0", "error: No such file or directory\n");
        assert!(m.contains("crc32_generic"), "{m}");
        let m = explain_add_failure(LinkKind::Rxe, "lo", "error: Invalid argument");
        assert!(m.contains("refuses the loopback"), "{m}");
        assert!(!m.contains("crc32"), "{m}");
        let m = explain_add_failure(LinkKind::Siw, "eth0", "error: Unknown device type");
        assert!(m.contains("siw module must be loaded"), "{m}");
        assert!(!m.contains("rdma_rxe"), "{m}");
    }
}
