//! RDMA GID tables as sysfs shows them (`/sys/class/infiniband/DEV/ports/1/gids/N` and
//! `gid_attrs/types/N`), and the step argv placeholder `@gid-index:DEV:ADDR`, replaced by the
//! index of ADDR's RoCE v2 GID on DEV when the step starts (perftest's `-x` needs it, and
//! the index depends on the order the kernel added the addresses).

use std::net::{IpAddr, Ipv6Addr};
use std::path::Path;

use color_eyre::eyre::{Result, WrapErr, eyre};

use crate::plan::Step;

/// The argv placeholder's prefix.
pub const GID_INDEX: &str = "@gid-index:";

/// One populated GID table entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gid {
    pub index: u32,
    pub gid: Ipv6Addr,
    /// `RoCE v2`, `IB/RoCE v1`, or empty where sysfs has no type (iWARP, IB).
    pub kind: String,
}

/// The populated entries of `dev`'s port 1 (the all-zero ones skipped), by index.
pub fn table(dev: &str) -> Vec<Gid> {
    table_in(&Path::new("/sys/class/infiniband").join(dev).join("ports/1"))
}

/// [`table`] under a port directory (`.../ports/1`).
pub fn table_in(port: &Path) -> Vec<Gid> {
    let Ok(entries) = std::fs::read_dir(port.join("gids")) else {
        return Vec::new();
    };
    let mut out: Vec<Gid> = entries
        .flatten()
        .filter_map(|e| {
            let index: u32 = e.file_name().to_str()?.parse().ok()?;
            let gid = parse_gid(&std::fs::read_to_string(e.path()).ok()?)?;
            // Reading the type of an empty entry fails (EINVAL): such entries are skipped.
            let kind =
                std::fs::read_to_string(port.join("gid_attrs/types").join(index.to_string()))
                    .unwrap_or_default()
                    .trim()
                    .to_owned();
            (!gid.is_unspecified()).then_some(Gid { index, gid, kind })
        })
        .collect();
    out.sort_by_key(|g| g.index);
    out
}

/// A GID as sysfs writes it: eight groups of four hex digits (`fe80:0000:...:3401`).
pub fn parse_gid(s: &str) -> Option<Ipv6Addr> {
    s.trim().parse().ok()
}

/// The entry for `addr` (an IPv4 address as its IPv4-mapped GID), RoCE v2 before any other.
pub fn find(table: &[Gid], addr: IpAddr) -> Option<&Gid> {
    let want = match addr {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    };
    let hits: Vec<&Gid> = table.iter().filter(|g| g.gid == want).collect();
    hits.iter()
        .find(|g| g.kind == "RoCE v2")
        .or(hits.first())
        .copied()
}

/// The table in one line, for errors.
pub fn describe(table: &[Gid]) -> String {
    if table.is_empty() {
        return "(empty or unreadable)".to_owned();
    }
    table
        .iter()
        .map(|g| format!("{}: {} ({})", g.index, g.gid, g.kind))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `fd00::1/64` or `10.0.0.1/24` (or a bare address) -> the address.
pub fn address_of(with_prefix: &str) -> Result<IpAddr> {
    let a = with_prefix.split('/').next().unwrap_or(with_prefix);
    a.parse().wrap_err_with(|| {
        format!("{with_prefix:?} is not an IP address (with an optional /prefix)")
    })
}

/// `@gid-index:DEV:ADDR` -> (DEV, ADDR).
pub fn parse_placeholder(arg: &str) -> Option<Result<(&str, IpAddr)>> {
    let rest = arg.strip_prefix(GID_INDEX)?;
    Some(
        rest.split_once(':')
            .ok_or_else(|| eyre!("{arg:?}: expected {GID_INDEX}DEV:ADDR"))
            .and_then(|(dev, addr)| Ok((dev, address_of(addr)?))),
    )
}

/// `step` with each placeholder replaced, reading the GID tables through `lookup`.
pub fn resolve_with(step: &Step, lookup: impl Fn(&str) -> Vec<Gid>) -> Result<Step> {
    let mut out = step.clone();
    for arg in &mut out.argv {
        let Some(p) = parse_placeholder(arg) else {
            continue;
        };
        let (dev, addr) = p?;
        let t = lookup(dev);
        let g = find(&t, addr).ok_or_else(|| {
            eyre!(
                "{arg}: {dev} has no GID for {addr} (its table: {})",
                describe(&t)
            )
        })?;
        *arg = g.index.to_string();
    }
    Ok(out)
}

/// [`resolve_with`] this guest's sysfs.
pub fn resolve_step(step: &Step) -> Result<Step> {
    resolve_with(step, table)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gid(index: u32, g: &str, kind: &str) -> Gid {
        Gid {
            index,
            gid: g.parse().unwrap(),
            kind: kind.into(),
        }
    }

    #[test]
    fn reads_sysfs_and_finds_v4_mapped_and_v6() {
        let dir = tempfile::tempdir().unwrap();
        let port = dir.path();
        std::fs::create_dir_all(port.join("gids")).unwrap();
        std::fs::create_dir_all(port.join("gid_attrs/types")).unwrap();
        let put = |i: u32, g: &str, t: Option<&str>| {
            std::fs::write(port.join("gids").join(i.to_string()), format!("{g}\n")).unwrap();
            if let Some(t) = t {
                std::fs::write(
                    port.join("gid_attrs/types").join(i.to_string()),
                    format!("{t}\n"),
                )
                .unwrap();
            }
        };
        put(
            0,
            "fe80:0000:0000:0000:5054:00ff:fe12:3401",
            Some("RoCE v2"),
        );
        put(
            1,
            "fd00:0000:0000:0000:0000:0000:0000:0001",
            Some("RoCE v2"),
        );
        put(
            2,
            "0000:0000:0000:0000:0000:ffff:0a00:0001",
            Some("RoCE v2"),
        );
        put(3, "0000:0000:0000:0000:0000:0000:0000:0000", None);
        let t = table_in(port);
        assert_eq!(t.len(), 3, "{t:?}");
        assert_eq!(find(&t, "fd00::1".parse().unwrap()).unwrap().index, 1);
        assert_eq!(find(&t, "10.0.0.1".parse().unwrap()).unwrap().index, 2);
        assert_eq!(find(&t, "10.0.0.2".parse().unwrap()), None);
        assert!(describe(&t).contains("1: fd00::1 (RoCE v2)"));
        assert!(table_in(&port.join("nope")).is_empty());
    }

    #[test]
    fn roce_v2_wins_over_v1() {
        let t = [
            gid(2, "fd00::1", "IB/RoCE v1"),
            gid(3, "fd00::1", "RoCE v2"),
        ];
        assert_eq!(find(&t, "fd00::1".parse().unwrap()).unwrap().index, 3);
        assert_eq!(find(&t[..1], "fd00::1".parse().unwrap()).unwrap().index, 2);
    }

    #[test]
    fn placeholders_are_replaced_or_explained() {
        let t = vec![gid(0, "fe80::1", "RoCE v2"), gid(1, "fd00::1", "RoCE v2")];
        let step = Step::new(
            "server",
            &["ib_write_bw", "-x", "@gid-index:rxe0:fd00::1", "-s", "4096"],
        );
        let got = resolve_with(&step, |dev| {
            assert_eq!(dev, "rxe0");
            t.clone()
        })
        .unwrap();
        assert_eq!(got.argv, ["ib_write_bw", "-x", "1", "-s", "4096"]);
        let v4 = Step::new("c", &["x", "@gid-index:rxe1:10.0.1.2/24"]);
        let e = resolve_with(&v4, |_| t.clone()).unwrap_err().to_string();
        assert!(e.contains("rxe1 has no GID for 10.0.1.2"), "{e}");
        let bad = Step::new("c", &["x", "@gid-index:rxe0"]);
        assert!(resolve_with(&bad, |_| t.clone()).is_err());
        let plain = Step::new("c", &["x", "-x", "1"]);
        assert_eq!(resolve_with(&plain, |_| unreachable!()).unwrap(), plain);
        assert_eq!(address_of("fd00::2/64").unwrap().to_string(), "fd00::2");
        assert!(address_of("eth0").is_err());
    }
}
