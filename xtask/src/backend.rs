//! Backend selection: real RDMA hardware, Soft-RoCE (rxe) on this host, or QEMU guests.
//!
//! `detect` explains its choice in words, including what it tried when it fell through,
//! e.g. "no /sys/class/infiniband (kernel has no RDMA), cannot load rdma_rxe
//! (CONFIG_MODULES not set) -> vm (TCG: /dev/kvm exists but the CPU has no vmx/svm)".

use std::fmt;
use std::path::Path;

use clap::{Args, ValueEnum};
use color_eyre::eyre::{Result, bail};
use serde::Deserialize;
use xshell::{Shell, cmd};

use crate::exec;

/// What the user asked for (`--backend`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum BackendChoice {
    /// Hardware if present, else rxe on this host if possible, else QEMU guests.
    #[default]
    Auto,
    /// An RDMA device with an ACTIVE port in /sys/class/infiniband.
    Hardware,
    /// Soft-RoCE (rdma_rxe) on a netdev of this host.
    Rxe,
    /// Two QEMU guests running a Debian kernel with rdma_rxe.
    Vm,
}

/// The resolved backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Backend {
    /// Use this RDMA device (name as in /sys/class/infiniband).
    Hardware { device: String },
    /// Create an rxe device on this netdev (which has this IPv4 address).
    Rxe { netdev: String, ipv4: String },
    /// QEMU guests with this accelerator.
    Vm { accel: Accel },
}

/// QEMU accelerator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Accel {
    Kvm,
    Tcg,
}

impl Accel {
    /// QEMU arguments selecting this accelerator and a matching CPU model.
    pub fn qemu_args(self) -> [&'static str; 4] {
        match self {
            Accel::Kvm => ["-accel", "kvm", "-cpu", "host"],
            Accel::Tcg => ["-accel", "tcg,thread=multi", "-cpu", "max"],
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Backend::Hardware { device } => write!(f, "hardware ({device})"),
            Backend::Rxe { netdev, ipv4 } => write!(f, "rxe (on {netdev}, {ipv4})"),
            Backend::Vm { accel } => write!(f, "vm ({accel:?})"),
        }
    }
}

/// A backend plus the human explanation of why.
#[derive(Clone, Debug)]
pub struct Detection {
    pub backend: Backend,
    /// What was tried and found, in order.
    pub reasons: Vec<String>,
}

impl fmt::Display for Detection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let short = match &self.backend {
            Backend::Hardware { .. } => "hardware",
            Backend::Rxe { .. } => "rxe",
            Backend::Vm { .. } => "vm",
        };
        let (before, after): (Vec<_>, Vec<_>) =
            self.reasons.iter().partition(|r| !r.starts_with("vm:"));
        let before: Vec<&str> = before.iter().map(|s| s.as_str()).collect();
        write!(f, "{} -> {short}", before.join(", "))?;
        for a in after {
            write!(f, " ({})", a.trim_start_matches("vm:").trim())?;
        }
        Ok(())
    }
}

/// Arguments of `cargo xtask backend`.
#[derive(Debug, Args)]
pub struct BackendArgs {
    /// Which backend to require (auto picks the first that works).
    #[arg(long, value_enum, default_value_t)]
    pub backend: BackendChoice,
}

/// Entry point of `cargo xtask backend`: prints the choice and why.
pub fn cmd(args: &BackendArgs) -> Result<()> {
    let d = detect(args.backend)?;
    println!("backend: {}\n  because: {d}", d.backend);
    Ok(())
}

/// Resolves `choice` on this machine. A forced choice that is not available is an error
/// that says why.
pub fn detect(choice: BackendChoice) -> Result<Detection> {
    let mut reasons = Vec::new();
    if matches!(choice, BackendChoice::Auto | BackendChoice::Hardware) {
        match probe_hardware(Path::new("/sys/class/infiniband")) {
            Ok((device, why)) => {
                reasons.push(why);
                return Ok(Detection {
                    backend: Backend::Hardware { device },
                    reasons,
                });
            }
            Err(why) if choice == BackendChoice::Hardware => bail!("--backend hardware: {why}"),
            Err(why) => reasons.push(why),
        }
    }
    if matches!(choice, BackendChoice::Auto | BackendChoice::Rxe) {
        match probe_rxe() {
            Ok((netdev, ipv4)) => {
                reasons.push(format!("can use rdma_rxe on {netdev} ({ipv4})"));
                return Ok(Detection {
                    backend: Backend::Rxe { netdev, ipv4 },
                    reasons,
                });
            }
            Err(why) if choice == BackendChoice::Rxe => bail!("--backend rxe: {why}"),
            Err(why) => reasons.push(why),
        }
    }
    if choice == BackendChoice::Vm {
        reasons.push("--backend vm requested".to_owned());
    }
    let (accel, why) = detect_accel();
    reasons.push(format!("vm: {why}"));
    Ok(Detection {
        backend: Backend::Vm { accel },
        reasons,
    })
}

/// Looks for a device with an ACTIVE port under `class_dir` (/sys/class/infiniband).
/// Ok: (device, explanation). Err: why not.
pub fn probe_hardware(class_dir: &Path) -> Result<(String, String), String> {
    let Ok(entries) = std::fs::read_dir(class_dir) else {
        return Err(format!("no {} (kernel has no RDMA)", class_dir.display()));
    };
    let mut seen = Vec::new();
    let mut names: Vec<_> = entries
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    for dev in names {
        let ports = class_dir.join(&dev).join("ports");
        let mut port_names: Vec<_> = std::fs::read_dir(&ports)
            .map(|it| {
                it.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        port_names.sort();
        for port in port_names {
            let state =
                std::fs::read_to_string(ports.join(&port).join("state")).unwrap_or_default();
            let state = parse_port_state(&state);
            if state == "ACTIVE" {
                let kind = if class_dir.join(&dev).join("device").exists() {
                    "hardware"
                } else {
                    "software"
                };
                return Ok((
                    dev.clone(),
                    format!("{dev} port {port} is ACTIVE ({kind} device)"),
                ));
            }
            seen.push(format!("{dev} port {port}: {state}"));
        }
    }
    if seen.is_empty() {
        Err(format!("{} is empty (no RDMA device)", class_dir.display()))
    } else {
        Err(format!("no RDMA port is ACTIVE ({})", seen.join(", ")))
    }
}

/// "4: ACTIVE\n" -> "ACTIVE".
pub fn parse_port_state(s: &str) -> &str {
    let s = s.trim();
    s.split_once(':').map_or(s, |(_, st)| st.trim())
}

fn probe_rxe() -> Result<(String, String), String> {
    let loaded = Path::new("/sys/module/rdma_rxe").exists();
    if !loaded {
        if !Path::new("/proc/modules").exists() {
            return Err("cannot load rdma_rxe (CONFIG_MODULES not set)".to_owned());
        }
        if exec::which("modprobe").is_none() {
            return Err("cannot load rdma_rxe (no modprobe; install kmod)".to_owned());
        }
        let sh = Shell::new().map_err(|e| e.to_string())?;
        // -n: dry run, resolves the module without loading it (works as non-root).
        if let Err(e) = exec::run(cmd!(sh, "modprobe -n -q rdma_rxe")) {
            return Err(format!("cannot load rdma_rxe ({e})"));
        }
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Err(
            "rdma_rxe is available but not root (creating an rxe link needs CAP_NET_ADMIN)"
                .to_owned(),
        );
    }
    if exec::which("rdma").is_none() {
        return Err("no `rdma` tool (install iproute2)".to_owned());
    }
    let sh = Shell::new().map_err(|e| e.to_string())?;
    let json = exec::run(cmd!(sh, "ip -j -4 addr show up")).map_err(|e| e.to_string())?;
    pick_netdev(&json).ok_or_else(|| {
        "no non-loopback netdev that is up with an IPv4 address (rxe refuses lo)".to_owned()
    })
}

#[derive(Debug, Deserialize)]
struct IpAddrEntry {
    ifname: String,
    #[serde(default)]
    operstate: String,
    #[serde(default)]
    flags: Vec<String>,
    #[serde(default)]
    addr_info: Vec<IpAddrInfo>,
}

#[derive(Debug, Deserialize)]
struct IpAddrInfo {
    #[serde(default)]
    family: String,
    #[serde(default)]
    local: String,
    #[serde(default)]
    prefixlen: u8,
}

/// From `ip -j -4 addr show up`: the first netdev that is not loopback, is up, and has an
/// IPv4 address. Returns (ifname, "a.b.c.d/len").
pub fn pick_netdev(ip_json: &str) -> Option<(String, String)> {
    let entries: Vec<IpAddrEntry> = serde_json::from_str(ip_json).ok()?;
    entries.into_iter().find_map(|e| {
        let up = e.operstate == "UP"
            || (e.operstate == "UNKNOWN" && e.flags.iter().any(|f| f == "LOWER_UP"));
        if e.ifname == "lo" || e.flags.iter().any(|f| f == "LOOPBACK") || !up {
            return None;
        }
        let a = e
            .addr_info
            .iter()
            .find(|a| a.family == "inet" && !a.local.is_empty())?;
        Some((e.ifname.clone(), format!("{}/{}", a.local, a.prefixlen)))
    })
}

/// KVM or TCG, with the reason.
pub fn detect_accel() -> (Accel, String) {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let dev = Path::new("/dev/kvm");
    let rw = dev.exists()
        && std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(dev)
            .is_ok();
    accel_from(&cpuinfo, dev.exists(), rw)
}

/// Pure part of [`detect_accel`]: KVM only with /dev/kvm usable *and* vmx/svm in the CPU
/// flags (a /dev/kvm without them hangs guests at "Probing EDD").
pub fn accel_from(cpuinfo: &str, kvm_exists: bool, kvm_rw: bool) -> (Accel, String) {
    let virt = cpu_has_virt(cpuinfo);
    match (kvm_exists, kvm_rw, virt) {
        (true, true, true) => (Accel::Kvm, "KVM".to_owned()),
        (true, _, false) => (
            Accel::Tcg,
            "TCG: /dev/kvm exists but the CPU has no vmx/svm".to_owned(),
        ),
        (true, false, true) => (
            Accel::Tcg,
            "TCG: /dev/kvm is not accessible (join group kvm)".to_owned(),
        ),
        (false, _, _) => (Accel::Tcg, "TCG: no /dev/kvm".to_owned()),
    }
}

/// True when a `flags` line of /proc/cpuinfo has `vmx` or `svm`.
pub fn cpu_has_virt(cpuinfo: &str) -> bool {
    cpuinfo
        .lines()
        .filter(|l| l.starts_with("flags"))
        .filter_map(|l| l.split_once(':'))
        .any(|(_, flags)| flags.split_whitespace().any(|f| f == "vmx" || f == "svm"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const NO_VIRT: &str = "processor\t: 0\nvendor_id\t: GenuineIntel\nflags\t\t: fpu vme de pse tsc msr pae hypervisor lahf_lm\nbugs\t\t: spectre_v1\n";
    const VMX: &str = "processor\t: 0\nflags\t\t: fpu vme vmx ept\n";

    #[test]
    fn kvm_needs_cpu_flags() {
        assert!(!cpu_has_virt(NO_VIRT));
        assert!(cpu_has_virt(VMX));
        assert!(cpu_has_virt("flags : svm npt\n"));
        assert!(!cpu_has_virt("model name : vmx-like cpu\nflags : fpu\n"));
        assert_eq!(accel_from(NO_VIRT, true, true).0, Accel::Tcg);
        assert!(accel_from(NO_VIRT, true, true).1.contains("no vmx/svm"));
        assert_eq!(accel_from(VMX, true, true).0, Accel::Kvm);
        assert_eq!(accel_from(VMX, false, false).0, Accel::Tcg);
        assert_eq!(accel_from(VMX, true, false).0, Accel::Tcg);
    }

    #[test]
    fn port_state() {
        assert_eq!(parse_port_state("4: ACTIVE\n"), "ACTIVE");
        assert_eq!(parse_port_state("1: DOWN"), "DOWN");
    }

    #[test]
    fn hardware_probe_over_fake_sysfs() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope");
        assert!(
            probe_hardware(&missing)
                .unwrap_err()
                .contains("kernel has no RDMA")
        );
        let port = dir.path().join("mlx5_0/ports/1");
        std::fs::create_dir_all(&port).unwrap();
        std::fs::write(port.join("state"), "1: DOWN\n").unwrap();
        let err = probe_hardware(dir.path()).unwrap_err();
        assert!(err.contains("mlx5_0 port 1: DOWN"), "{err}");
        std::fs::write(port.join("state"), "4: ACTIVE\n").unwrap();
        let (dev, why) = probe_hardware(dir.path()).unwrap();
        assert_eq!(dev, "mlx5_0");
        assert!(why.contains("software"), "{why}");
    }

    #[test]
    fn netdev_pick() {
        let json = r#"[{"ifindex":1,"ifname":"lo","flags":["LOOPBACK","UP","LOWER_UP"],"operstate":"UNKNOWN","addr_info":[{"family":"inet","local":"127.0.0.1","prefixlen":8}]},
            {"ifindex":2,"ifname":"eth1","flags":["BROADCAST","UP"],"operstate":"DOWN","addr_info":[{"family":"inet","local":"10.1.0.2","prefixlen":24}]},
            {"ifindex":3,"ifname":"eth0","flags":["BROADCAST","MULTICAST","UP","LOWER_UP"],"operstate":"UP","addr_info":[{"family":"inet","local":"192.168.1.5","prefixlen":24}]}]"#;
        assert_eq!(
            pick_netdev(json),
            Some(("eth0".to_owned(), "192.168.1.5/24".to_owned()))
        );
        assert_eq!(pick_netdev("[]"), None);
        assert_eq!(pick_netdev("garbage"), None);
    }

    #[test]
    fn detection_wording() {
        let d = Detection {
            backend: Backend::Vm { accel: Accel::Tcg },
            reasons: vec![
                "no /sys/class/infiniband (kernel has no RDMA)".into(),
                "cannot load rdma_rxe (CONFIG_MODULES not set)".into(),
                "vm: TCG: /dev/kvm exists but the CPU has no vmx/svm".into(),
            ],
        };
        assert_eq!(
            d.to_string(),
            "no /sys/class/infiniband (kernel has no RDMA), cannot load rdma_rxe (CONFIG_MODULES not set) -> vm (TCG: /dev/kvm exists but the CPU has no vmx/svm)"
        );
    }
}
