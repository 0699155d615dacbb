//! The node a plan runs on: extra kernel modules, then each NIC (its MAC checked, IPv4 and/or
//! IPv6 addresses, up or left down), duplicate address detection, and the RDMA device on each
//! NIC (rxe or siw), whose IPv6 GID is checked.

use std::path::Path;
use std::time::{Duration, Instant};

use color_eyre::eyre::{Result, eyre};

use super::{gid, run_once, setup_step};
use crate::exec;
use crate::plan::{LinkKind, Modules, Nic, Plan, PlanResult, StepResult};
use crate::rxe::RxeLink;

/// How long duplicate address detection may take (the kernel's default is one probe after
/// up to a second; TCG guests are slow).
const DAD_TIMEOUT: Duration = Duration::from_secs(20);
/// How long an RDMA device may take to list a NIC's address in its GID table.
const GID_TIMEOUT: Duration = Duration::from_secs(10);

/// Sets the node up; the RDMA devices it created live as long as the returned guards.
pub(super) fn setup_node(plan: &Plan, result: &mut PlanResult) -> Result<Vec<RxeLink>> {
    if let Some(m) = &plan.node.modules {
        load_modules(m, result)?;
    }
    for nic in &plan.node.nics {
        configure(nic, result)?;
    }
    for nic in plan.node.nics.iter().filter(|n| n.up) {
        wait_link_up(&nic.iface, Instant::now() + Duration::from_secs(10))?;
    }
    for nic in plan.node.nics.iter().filter(|n| n.up && n.ipv6.is_some()) {
        timed(result, &format!("dad {}", nic.iface), || {
            wait_dad(&nic.iface, Instant::now() + DAD_TIMEOUT)
        })?;
    }
    let mut links = Vec::new();
    for nic in &plan.node.nics {
        let Some(dev) = &nic.rdma else { continue };
        let wait = nic.up.then_some(Duration::from_secs(20));
        let link = timed(
            result,
            &format!("{} {}", dev.kind.as_str(), dev.name),
            || {
                let l = RxeLink::create_of(dev.kind, &dev.name, &nic.iface, wait)?;
                // As `rdma link` reports it (a NIC left down must leave its port DOWN).
                let state = crate::rxe::links()?
                    .into_iter()
                    .find(|i| i.device == dev.name)
                    .map_or_else(|| "not listed".to_owned(), |i| i.state);
                if !nic.up && state == "ACTIVE" {
                    return Err(eyre!(
                        "{} is ACTIVE although {} was left down",
                        dev.name,
                        nic.iface
                    ));
                }
                Ok((format!("{} on {} {state}", l.name(), l.netdev()), l))
            },
        )?;
        println!(
            "guest-agent: {} on {} is set up",
            link.name(),
            link.netdev()
        );
        links.push(link);
        if let (Some(v6), true, LinkKind::Rxe) = (&nic.ipv6, nic.up, dev.kind) {
            let addr = gid::address_of(v6)?;
            timed(result, &format!("gid {}", dev.name), || {
                let deadline = Instant::now() + GID_TIMEOUT;
                loop {
                    if let Some(g) = gid::find(&gid::table(&dev.name), addr) {
                        return Ok((format!("{addr} is GID index {} ({})", g.index, g.kind), ()));
                    }
                    if Instant::now() >= deadline {
                        return Err(eyre!(
                            "{}'s GID table has no RoCE v2 GID {addr} within {GID_TIMEOUT:?} of {} \
                             finishing DAD: {}",
                            dev.name,
                            nic.iface,
                            gid::describe(&gid::table(&dev.name))
                        ));
                    }
                    exec::sleep(Duration::from_millis(50))?;
                }
            })?;
        }
    }
    Ok(links)
}

/// Runs `f` as a setup step called `name`: its message (or error) and time are recorded.
fn timed<T>(
    result: &mut PlanResult,
    name: &str,
    f: impl FnOnce() -> Result<(String, T)>,
) -> Result<T> {
    let t = Instant::now();
    let out = f();
    result.setup.push(StepResult {
        name: name.to_owned(),
        ok: out.is_ok(),
        exit_code: Some(i32::from(out.is_err())),
        attempts: 1,
        elapsed_s: t.elapsed().as_secs_f64(),
        stdout: out.as_ref().map(|(m, _)| m.clone()).unwrap_or_default(),
        error: out.as_ref().err().map(|e| format!("{e:#}")),
        ..Default::default()
    });
    out.map(|(_, v)| v)
}

/// `modprobe -d ROOT` each module (with its dependencies), then `insmod` each out-of-tree one
/// that is not loaded yet.
fn load_modules(m: &Modules, result: &mut PlanResult) -> Result<()> {
    for name in &m.modprobe {
        setup_step(
            result,
            &format!("modprobe {name}"),
            &["modprobe", "-d", &m.root, name],
        )?;
    }
    for ko in &m.insmod {
        let name = crate::vm::initramfs::module_name(ko);
        if Path::new("/sys/module").join(&name).exists() {
            continue;
        }
        setup_step(result, &format!("insmod {name}"), &["insmod", ko])?;
    }
    Ok(())
}

/// Checks the NIC's MAC, adds its addresses and brings it up (or leaves it down).
fn configure(nic: &Nic, result: &mut PlanResult) -> Result<()> {
    let iface = nic.iface.as_str();
    if let Some(want) = &nic.mac {
        let path = Path::new("/sys/class/net").join(iface).join("address");
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        if !have.trim().eq_ignore_ascii_case(want) {
            return Err(eyre!(
                "{iface} has MAC {:?}, the plan expects {want}: the guest's NICs are not in the \
                 order QEMU was given them ({} unreadable or different)",
                have.trim(),
                path.display()
            ));
        }
    }
    if nic.up {
        setup_step(
            result,
            &format!("ip link up {iface}"),
            &["ip", "link", "set", iface, "up"],
        )?;
    }
    if let Some(ip) = &nic.ipv4 {
        setup_step(
            result,
            &format!("ip addr add {iface}"),
            &["ip", "addr", "add", ip, "dev", iface],
        )?;
    }
    if let Some(ip) = &nic.ipv6 {
        setup_step(
            result,
            &format!("ip -6 addr add {iface}"),
            &["ip", "-6", "addr", "add", ip, "dev", iface],
        )?;
    }
    Ok(())
}

/// Waits until the kernel reports `iface` as up with carrier: `ip link set up` returns before
/// linkwatch sets the operstate, and whatever runs next (rxe, or `e2e --backend rxe` picking
/// a netdev that is up) must not race it.
pub(super) fn wait_link_up(iface: &str, deadline: Instant) -> Result<()> {
    let dir = Path::new("/sys/class/net").join(iface);
    loop {
        let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap_or_default();
        let (oper, carrier) = (read("operstate"), read("carrier"));
        if link_is_up(oper.trim(), carrier.trim()) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(eyre!(
                "{iface} is not up after `ip link set {iface} up` (operstate {:?}, carrier {:?}): \
                 check the guest's virtio-net link",
                oper.trim(),
                carrier.trim()
            ));
        }
        exec::sleep(Duration::from_millis(20))?;
    }
}

/// `operstate` / `carrier` as sysfs reports them: up, or unknown (drivers without operstate
/// reporting) with carrier.
fn link_is_up(operstate: &str, carrier: &str) -> bool {
    operstate == "up" || (operstate == "unknown" && carrier == "1")
}

/// Where duplicate address detection stands for an interface's IPv6 addresses.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Dad {
    /// No address is tentative any more.
    Done,
    /// These addresses are still tentative.
    Tentative(Vec<String>),
    /// These addresses failed DAD (another node has them).
    Failed(Vec<String>),
}

/// Reads `ip -6 addr show dev IF`: each `inet6 ADDR/LEN scope ... [tentative] [dadfailed]`.
pub(super) fn dad_state(ip_addr: &str) -> Dad {
    let (mut tentative, mut failed) = (Vec::new(), Vec::new());
    for l in ip_addr.lines().map(str::trim) {
        let mut words = l.split_whitespace();
        if words.next() != Some("inet6") {
            continue;
        }
        let addr = words.next().unwrap_or_default().to_owned();
        let flags: Vec<&str> = words.collect();
        if flags.contains(&"dadfailed") {
            failed.push(addr);
        } else if flags.contains(&"tentative") {
            tentative.push(addr);
        }
    }
    if !failed.is_empty() {
        Dad::Failed(failed)
    } else if !tentative.is_empty() {
        Dad::Tentative(tentative)
    } else {
        Dad::Done
    }
}

/// Waits until no IPv6 address of `iface` is tentative; fails at once on `dadfailed`.
fn wait_dad(iface: &str, deadline: Instant) -> Result<(String, ())> {
    let t = Instant::now();
    loop {
        let r = run_once(
            "ip -6 addr",
            &["ip", "-6", "addr", "show", "dev", iface],
            GID_TIMEOUT,
        );
        match dad_state(&r.stdout) {
            Dad::Done if r.ok => {
                let took = t.elapsed().as_secs_f64();
                return Ok((format!("{iface}: DAD done after {took:.2} s"), ()));
            }
            Dad::Failed(a) => {
                return Err(eyre!(
                    "duplicate address detection failed on {iface} for {}: another node on the \
                     link has the same address",
                    a.join(", ")
                ));
            }
            still => {
                if Instant::now() >= deadline {
                    return Err(eyre!(
                        "{iface}'s IPv6 addresses are still tentative after {:?} ({still:?}; \
                         `ip -6 addr` said: {} {})",
                        deadline - t,
                        r.stdout.trim(),
                        r.stderr.trim()
                    ));
                }
            }
        }
        exec::sleep(Duration::from_millis(100))?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_is_up_with_operstate_up_or_unknown_with_carrier() {
        assert!(link_is_up("up", "1"));
        assert!(link_is_up("unknown", "1"));
        assert!(!link_is_up("unknown", "0"));
        assert!(!link_is_up("down", "0"));
        assert!(!link_is_up("dormant", "1"));
        // Unreadable sysfs files read as empty: not up.
        assert!(!link_is_up("", ""));
        // An interface that does not exist times out with its name in the error.
        let e = wait_link_up("nosuch0", Instant::now()).unwrap_err();
        assert!(format!("{e}").contains("nosuch0 is not up"), "{e}");
    }

    #[test]
    fn dad_reads_tentative_and_failed() {
        let busy = "2: eth0: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 state UP qlen 1000\n    \
            inet6 fd00::1/64 scope global tentative \n       valid_lft forever preferred_lft forever\n    \
            inet6 fe80::5054:ff:fe12:3401/64 scope link tentative \n";
        assert_eq!(
            dad_state(busy),
            Dad::Tentative(vec![
                "fd00::1/64".into(),
                "fe80::5054:ff:fe12:3401/64".into()
            ])
        );
        let done = busy.replace("tentative", "");
        assert_eq!(dad_state(&done), Dad::Done);
        let clash = busy.replacen("tentative", "tentative dadfailed", 1);
        assert_eq!(dad_state(&clash), Dad::Failed(vec!["fd00::1/64".into()]));
        // No IPv6 address at all is nothing to wait for.
        assert_eq!(dad_state(""), Dad::Done);
    }
}
