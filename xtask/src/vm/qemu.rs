//! One QEMU: its command line (a pure function of what the guest needs) and the process,
//! which dies with xtask.

use super::Init;
use crate::backend::Accel;
use color_eyre::eyre::{Result, WrapErr};
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use xshell::{Shell, cmd};

/// The guest's side of a virtual link (`-netdev socket` over 127.0.0.1, or a hub on a unix
/// socket; see `wire`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Link {
    /// A guest alone: it listens on this TCP port, and nobody joins.
    Listen(u16),
    /// Exactly two guests: one UDP datagram per frame, from our port to the peer's. Preferred
    /// over the TCP stream: there, Nagle holds a frame sent right behind another (rxe's ACK
    /// then the next RDMA Write) until the peer QEMU's delayed ACK, ~20 ms per exchange.
    Udp { local: u16, peer: u16 },
    /// Three or more guests: hub `k` of the run ([`super::hub`]: a `vde_switch` on a unix
    /// socket, no IP address; the point-to-point links do not reach a third node).
    Hub(usize),
}

/// What one QEMU command line is made of.
#[derive(Debug, Clone)]
pub(super) struct Qemu<'a> {
    pub name: &'a str,
    pub accel: Accel,
    /// vCPUs ([`super::vcpus`]).
    pub cpus: usize,
    pub mem_mb: u32,
    pub vmlinuz: &'a Path,
    pub initrd: &'a Path,
    /// The kernel command line ([`kernel_cmdline`]).
    pub cmdline: String,
    /// Each NIC (eth0 first): its side of its link and its MAC.
    pub nics: Vec<(Link, &'a str)>,
    /// The guest's own writable share (plan, results, exit code).
    pub share: &'a Path,
    /// The share every guest of the run sees (markers).
    pub sync: &'a Path,
    /// The run's hubs' socket directories ([`Link::Hub`] `k` is `hubs[k]`).
    pub hubs: &'a [PathBuf],
}

/// The kernel command line: serial console, panic = power off, and the guest's name and
/// command for the initramfs's /init (`argv` joined by commas: see `check_argv`), and
/// `xtask.init=systemd` for a guest whose PID 1 is systemd.
pub(super) fn kernel_cmdline(name: &str, argv: &[String], verbose: bool, init: Init) -> String {
    let loglevel = if verbose { 6 } else { 4 };
    let init = match init {
        Init::Busybox => String::new(),
        Init::Systemd => format!(" xtask.init={}", init.as_str()),
    };
    format!(
        "console=ttyS0 panic=-1 oops=panic loglevel={loglevel} xtask.name={name} xtask.argv={}{init}",
        argv.join(",")
    )
}

/// `-netdev` of NIC `k` on `link`.
fn netdev(k: usize, link: Link, hubs: &[PathBuf]) -> String {
    match link {
        Link::Listen(port) => format!("socket,id=n{k},listen=127.0.0.1:{port}"),
        Link::Udp { local, peer } => {
            format!("socket,id=n{k},udp=127.0.0.1:{peer},localaddr=127.0.0.1:{local}")
        }
        Link::Hub(h) => {
            let sock = hubs.get(h).map(|p| p.display().to_string());
            format!("vde,id=n{k},sock={}", sock.unwrap_or_default())
        }
    }
}

/// The arguments of `qemu-system-x86_64`: `cpus` vCPUs, no devices but the serial console, the
/// kernel and initramfs, a virtio NIC on each link (in order: the first is eth0), the host
/// root read-only over 9p, the guest's share and the run's sync share writable.
pub(super) fn argv(q: &Qemu<'_>) -> Vec<OsString> {
    let mut v: Vec<OsString> = vec!["-name".into(), q.name.into()];
    v.extend(q.accel.qemu_args().map(OsString::from));
    v.extend(
        [
            "-smp",
            &q.cpus.to_string(),
            "-m",
            &q.mem_mb.to_string(),
            "-nodefaults",
            "-no-user-config",
            "-display",
            "none",
            "-serial",
            "stdio",
            "-no-reboot",
        ]
        .map(OsString::from),
    );
    v.extend([
        "-kernel".into(),
        q.vmlinuz.into(),
        "-initrd".into(),
        q.initrd.into(),
        "-append".into(),
        q.cmdline.clone().into(),
    ]);
    for (k, (link, mac)) in q.nics.iter().enumerate() {
        v.extend([
            "-netdev".into(),
            netdev(k, *link, q.hubs).into(),
            "-device".into(),
            format!("virtio-net-pci,netdev=n{k},mac={mac}").into(),
        ]);
    }
    v.extend([
        "-virtfs".into(),
        "local,path=/,mount_tag=hostroot,readonly=on,security_model=none,multidevs=remap".into(),
        "-virtfs".into(),
        virtfs(q.share, "xshare"),
        "-virtfs".into(),
        virtfs(q.sync, "xsync"),
    ]);
    v
}

/// A writable 9p share of `dir` under `tag`.
fn virtfs(dir: &Path, tag: &str) -> OsString {
    let mut s = OsString::from("local,path=");
    s.push(dir);
    s.push(format!(",mount_tag={tag},security_model=none"));
    s
}

/// Starts QEMU with `args` ([`argv`]) with piped stdout/stderr, in its own process group,
/// killed by the kernel if xtask dies. Returns the child and the command as shown in errors.
pub(super) fn spawn(args: &[OsString]) -> Result<(Child, String)> {
    let sh = Shell::new()?;
    let c = cmd!(sh, "qemu-system-x86_64 {args...}");
    let shown = c.to_string();
    let mut command = Command::from(c);
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let parent = std::process::id();
    let cpus = super::pinned_cpus()?;
    let hook = move || -> std::io::Result<()> {
        // SAFETY: prctl(PR_SET_PDEATHSIG) takes plain integers and touches no memory.
        if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if let Some(set) = &cpus {
            // SAFETY: `set` is a valid cpu_set_t owned by the closure, and its size is passed;
            // sched_setaffinity is async-signal-safe (a plain system call).
            if unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), set) }
                != 0
            {
                return Err(std::io::Error::last_os_error());
            }
        }
        // SAFETY: getppid has no preconditions.
        if unsafe { libc::getppid() } as u32 != parent {
            return Err(std::io::Error::other("xtask exited before QEMU started"));
        }
        Ok(())
    };
    // SAFETY: the hook runs in the forked child before exec and only calls
    // async-signal-safe functions (prctl, getppid). QEMU is spawned from the main thread,
    // which lives as long as the run (PDEATHSIG fires when the spawning thread exits).
    unsafe { command.pre_exec(hook) };
    let child = command
        .spawn()
        .wrap_err_with(|| format!("starting `{shown}`"))?;
    Ok((child, shown))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn qemu(link: Link) -> Qemu<'static> {
        Qemu {
            name: "A",
            accel: Accel::Tcg,
            cpus: 1,
            mem_mb: 1024,
            vmlinuz: Path::new("/k/vmlinuz"),
            initrd: Path::new("/k/initrd.cpio"),
            cmdline: kernel_cmdline(
                "A",
                &["/bin/xtask".into(), "guest-agent".into()],
                false,
                Init::Busybox,
            ),
            nics: vec![(link, "52:54:00:12:34:01")],
            share: Path::new("/run/A"),
            sync: Path::new("/run/sync"),
            hubs: &[],
        }
    }

    fn strings(argv: &[OsString]) -> Vec<String> {
        argv.iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    /// The value after `flag` (the first one).
    fn after<'a>(argv: &'a [String], flag: &str) -> Option<&'a str> {
        argv.iter()
            .position(|a| a == flag)
            .and_then(|i| argv.get(i + 1))
            .map(String::as_str)
    }

    #[test]
    fn the_command_line_carries_the_guest() {
        let v = strings(&argv(&qemu(Link::Listen(4000))));
        assert_eq!(&v[..2], ["-name", "A"]);
        assert_eq!(after(&v, "-accel"), Some("tcg,thread=multi"));
        assert_eq!(after(&v, "-cpu"), Some("max"));
        assert_eq!(after(&v, "-smp"), Some("1"));
        assert_eq!(after(&v, "-m"), Some("1024"));
        assert_eq!(after(&v, "-kernel"), Some("/k/vmlinuz"));
        assert_eq!(after(&v, "-initrd"), Some("/k/initrd.cpio"));
        assert_eq!(
            after(&v, "-append"),
            Some(
                "console=ttyS0 panic=-1 oops=panic loglevel=4 xtask.name=A xtask.argv=/bin/xtask,guest-agent"
            )
        );
        assert_eq!(
            after(&v, "-netdev"),
            Some("socket,id=n0,listen=127.0.0.1:4000")
        );
        assert_eq!(
            after(&v, "-device"),
            Some("virtio-net-pci,netdev=n0,mac=52:54:00:12:34:01")
        );
        let shares: Vec<&String> = v
            .windows(2)
            .filter(|w| w[0] == "-virtfs")
            .map(|w| &w[1])
            .collect();
        assert_eq!(
            shares,
            [
                "local,path=/,mount_tag=hostroot,readonly=on,security_model=none,multidevs=remap",
                "local,path=/run/A,mount_tag=xshare,security_model=none",
                "local,path=/run/sync,mount_tag=xsync,security_model=none",
            ]
        );
        for quiet in ["-nodefaults", "-no-user-config", "-no-reboot"] {
            assert!(v.iter().any(|a| a == quiet), "{quiet}");
        }
        assert_eq!(after(&v, "-serial"), Some("stdio"));
    }

    #[test]
    fn two_guests_use_a_udp_link() {
        let v = strings(&argv(&qemu(Link::Udp {
            local: 4001,
            peer: 4002,
        })));
        assert_eq!(
            after(&v, "-netdev"),
            Some("socket,id=n0,udp=127.0.0.1:4002,localaddr=127.0.0.1:4001")
        );
    }

    #[test]
    fn three_guests_share_a_hub_on_a_unix_socket() {
        let hubs = [PathBuf::from("/run/hub0"), PathBuf::from("/run/hub1")];
        let q = Qemu {
            hubs: &hubs,
            ..qemu(Link::Hub(1))
        };
        let v = strings(&argv(&q));
        assert_eq!(after(&v, "-netdev"), Some("vde,id=n0,sock=/run/hub1"));
        // No host IP but loopback anywhere on the command line (no multicast group).
        assert!(!v.iter().any(|a| a.contains("mcast") || a.contains("230.")));
    }

    #[test]
    fn each_nic_gets_its_own_netdev_and_device_in_order() {
        let mut q = qemu(Link::Udp { local: 1, peer: 2 });
        q.nics
            .push((Link::Udp { local: 3, peer: 4 }, "52:54:00:12:35:01"));
        let v = strings(&argv(&q));
        let pairs = |flag: &str| -> Vec<String> {
            v.windows(2)
                .filter(|w| w[0] == flag)
                .map(|w| w[1].clone())
                .collect()
        };
        assert_eq!(
            pairs("-netdev"),
            [
                "socket,id=n0,udp=127.0.0.1:2,localaddr=127.0.0.1:1",
                "socket,id=n1,udp=127.0.0.1:4,localaddr=127.0.0.1:3"
            ]
        );
        assert_eq!(
            pairs("-device"),
            [
                "virtio-net-pci,netdev=n0,mac=52:54:00:12:34:01",
                "virtio-net-pci,netdev=n1,mac=52:54:00:12:35:01"
            ]
        );
        // eth0's pair comes before eth1's: the guest names them in PCI order.
        let first = |s: &str| v.iter().position(|a| a == s).unwrap();
        assert!(
            first("virtio-net-pci,netdev=n0,mac=52:54:00:12:34:01")
                < first("socket,id=n1,udp=127.0.0.1:4,localaddr=127.0.0.1:3")
        );
    }

    #[test]
    fn kvm_and_verbose_raise_the_loglevel() {
        let kvm = Qemu {
            accel: Accel::Kvm,
            ..qemu(Link::Listen(1))
        };
        let v = strings(&argv(&kvm));
        assert_eq!(after(&v, "-accel"), Some("kvm"));
        assert_eq!(after(&v, "-cpu"), Some("host"));
        assert!(kernel_cmdline("B", &["/x".into()], true, Init::Busybox).contains(" loglevel=6 "));
    }

    #[test]
    fn a_systemd_guest_says_so_on_the_command_line() {
        let c = kernel_cmdline("A", &["/x".into()], false, Init::Systemd);
        assert!(c.ends_with(" xtask.argv=/x xtask.init=systemd"), "{c}");
        assert!(!kernel_cmdline("A", &["/x".into()], false, Init::Busybox).contains("xtask.init"));
    }
}
