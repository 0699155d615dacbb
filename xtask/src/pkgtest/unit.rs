//! What the guest install test needs from a systemd service unit: its `ExecStart` command,
//! its `User`/`Group`, and its `LimitMEMLOCK`, read from the installed unit file.
//!
//! The server's guest boots with systemd as PID 1, which starts the installed unit with its
//! whole sandbox; [`sandbox_problems`] checks, from `/proc`, that the running main process
//! carries the parts of it this reader knows: the unit's user, its locked-memory limit, no new
//! privileges, a seccomp filter and no capability.

use color_eyre::eyre::{Result, bail, eyre};

/// The parts of a `[Service]` section the test applies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Service {
    /// `ExecStart=`, split into words.
    pub exec_start: Vec<String>,
    pub user: String,
    pub group: String,
    /// `LimitMEMLOCK=` in bytes; `Some(None)` is `infinity`.
    pub limit_memlock: Option<Option<u64>>,
}

/// Reads the `[Service]` section of a unit file.
///
/// # Errors
/// When `ExecStart`, `User` or `Group` is missing, or `ExecStart` uses what this reader does
/// not expand (`%` specifiers, `$` variables, prefixes like `-` or `+`, more than one command).
pub fn parse(text: &str) -> Result<Service> {
    let mut section = "";
    let (mut exec, mut user, mut group, mut memlock) = (None, None, None, None);
    for raw in text.lines() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if line.starts_with('[') {
            section = line;
            continue;
        }
        if section != "[Service]" {
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let value = value.trim();
        match key.trim() {
            "ExecStart" => {
                if exec.is_some() {
                    bail!("more than one ExecStart=: this test runs one command");
                }
                exec = Some(split_command(value)?);
            }
            "User" => user = Some(value.to_owned()),
            "Group" => group = Some(value.to_owned()),
            "LimitMEMLOCK" => memlock = Some(parse_limit(value)?),
            _ => {}
        }
    }
    Ok(Service {
        exec_start: exec.ok_or_else(|| eyre!("no ExecStart= in [Service]"))?,
        user: user.ok_or_else(|| eyre!("no User= in [Service]"))?,
        group: group.ok_or_else(|| eyre!("no Group= in [Service]"))?,
        limit_memlock: memlock,
    })
}

#[cfg(test)]
/// The device sandbox of a `[Service]` section: `DevicePolicy=` and each `DeviceAllow=` as
/// (device, access).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Devices {
    pub policy: Option<String>,
    pub allow: Vec<(String, String)>,
}

#[cfg(test)]
/// A device node a binary opens: its path, and its major's group in `/proc/devices` (what a
/// `char-GROUP` rule names).
pub type Node<'a> = (&'a str, &'a str);

#[cfg(test)]
/// The nodes the verbs layer opens: a uverbs device (major `infiniband_verbs`) for every verb,
/// and RDMA CM's `rdma_cm` (a misc device, major 10) for CM connections and every iWARP device.
pub const RDMA_NODES: [Node<'static>; 2] = [
    ("/dev/infiniband/uverbs0", "infiniband_verbs"),
    ("/dev/infiniband/rdma_cm", "misc"),
];

#[cfg(test)]
/// Reads `DevicePolicy=` and the `DeviceAllow=` lines of the `[Service]` section (an empty
/// `DeviceAllow=` resets the list, as in systemd).
#[must_use]
pub fn devices(text: &str) -> Devices {
    let mut section = "";
    let mut out = Devices::default();
    for raw in text.lines() {
        let line = raw.trim();
        if line.starts_with('[') {
            section = line;
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        if section != "[Service]" || line.starts_with(['#', ';']) {
            continue;
        }
        let value = value.trim();
        match key.trim() {
            "DevicePolicy" => out.policy = Some(value.to_owned()),
            "DeviceAllow" if value.is_empty() => out.allow.clear(),
            "DeviceAllow" => {
                let (dev, access) = value.split_once(char::is_whitespace).unwrap_or((value, ""));
                let access = if access.trim().is_empty() {
                    "rwm"
                } else {
                    access.trim()
                };
                out.allow.push((dev.to_owned(), access.to_owned()));
            }
            _ => {}
        }
    }
    out
}

#[cfg(test)]
impl Devices {
    /// Whether the unit lets its processes read and write `node`: no `closed`/`strict` policy
    /// and no allow list (no device control), or a rule naming its path or its `char-` group
    /// with `r` and `w`.
    #[must_use]
    pub fn allows_rw(&self, (path, group): Node<'_>) -> bool {
        let controlled =
            matches!(self.policy.as_deref(), Some("closed" | "strict")) || !self.allow.is_empty();
        if !controlled {
            return true;
        }
        self.allow.iter().any(|(dev, access)| {
            let names = dev == path || dev.strip_prefix("char-") == Some(group);
            names && access.contains('r') && access.contains('w')
        })
    }
}

/// What is wrong with a service's main process, from its `/proc/PID/status` and
/// `/proc/PID/limits`, for unit `want` whose `User` has `passwd_line` (`getent passwd`): not
/// that user, new privileges allowed, no seccomp filter, a capability, or another locked-memory
/// limit than `LimitMEMLOCK`.
pub fn sandbox_problems(
    want: &Service,
    passwd_line: &str,
    status: &str,
    limits: &str,
) -> Vec<String> {
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .map(str::trim)
    };
    let mut problems = Vec::new();
    let uid = passwd_line.split(':').nth(2);
    // Real, effective, saved and filesystem uid: all the unit's user.
    let uids: Vec<&str> = field("Uid").map_or_else(Vec::new, |u| u.split_whitespace().collect());
    if uid.is_none() || uids.len() != 4 || uids.iter().any(|u| Some(*u) != uid) {
        problems.push(format!(
            "runs as uids {uids:?}, not {}'s ({passwd_line:?})",
            want.user
        ));
    }
    if field("NoNewPrivs") != Some("1") {
        problems.push(format!("NoNewPrivs is {:?}, want 1", field("NoNewPrivs")));
    }
    if field("Seccomp") != Some("2") {
        problems.push(format!(
            "Seccomp is {:?}, want 2 (a filter)",
            field("Seccomp")
        ));
    }
    for cap in ["CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        let set = field(cap);
        if set.is_none_or(|v| v.chars().any(|c| c != '0')) {
            problems.push(format!("{cap} is {set:?}, want none"));
        }
    }
    if let Some(limit) = want.limit_memlock {
        let want_text = limit.map_or_else(|| "unlimited".to_owned(), |b| b.to_string());
        let got: Option<Vec<&str>> = limits.lines().find_map(|l| {
            l.strip_prefix("Max locked memory")
                .map(|r| r.split_whitespace().take(2).collect())
        });
        match got {
            Some(v) if v.len() == 2 && v.iter().all(|x| *x == want_text) => {}
            other => problems.push(format!(
                "locked-memory limit (soft, hard) {other:?}, want {want_text} as LimitMEMLOCK says"
            )),
        }
    }
    problems
}

/// Splits an `ExecStart=` value into words (double quotes group), refusing what systemd would
/// rewrite.
fn split_command(value: &str) -> Result<Vec<String>> {
    if value.contains('%') || value.contains('$') || value.contains('\\') {
        bail!("ExecStart={value}: specifiers, variables and escapes are not expanded here");
    }
    if value.starts_with(['-', '@', '+', '!', ':']) {
        bail!("ExecStart={value}: prefixes are not applied here");
    }
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quoted = false;
    let mut any = false;
    for c in value.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                any = true;
            }
            c if c.is_whitespace() && !quoted => {
                if any {
                    words.push(std::mem::take(&mut word));
                    any = false;
                }
            }
            c => {
                word.push(c);
                any = true;
            }
        }
    }
    if quoted {
        bail!("ExecStart={value}: unbalanced quote");
    }
    if any {
        words.push(word);
    }
    if words.first().is_none_or(|p| !p.starts_with('/')) {
        bail!("ExecStart={value}: the program must be an absolute path");
    }
    Ok(words)
}

/// `LimitMEMLOCK=` value: `infinity`, bytes, or with a K/M/G/T suffix (powers of 1024).
fn parse_limit(value: &str) -> Result<Option<u64>> {
    if value == "infinity" {
        return Ok(None);
    }
    let (digits, shift) = match value.chars().last() {
        Some('K') => (&value[..value.len() - 1], 10),
        Some('M') => (&value[..value.len() - 1], 20),
        Some('G') => (&value[..value.len() - 1], 30),
        Some('T') => (&value[..value.len() - 1], 40),
        _ => (value, 0),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| eyre!("LimitMEMLOCK={value}: not a size this test understands"))?;
    n.checked_mul(1 << shift)
        .map(Some)
        .ok_or_else(|| eyre!("LimitMEMLOCK={value}: too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_unit_is_understood() {
        let text = include_str!("../../../rdma-server/pkg/debian/rdma-server.service");
        let s = parse(text).unwrap();
        assert_eq!(
            s.exec_start,
            [
                "/usr/bin/rdma-server",
                "--serve",
                "--config",
                "/etc/rdma-server/rdma-server.toml"
            ]
        );
        assert_eq!(
            (s.user.as_str(), s.group.as_str()),
            ("rdma-server", "rdma-server")
        );
        // Bounded (issue 16): the packaged 64 MiB --max-pinned plus the queues.
        assert_eq!(s.limit_memlock, Some(Some(80 << 20)));
    }

    /// Security review: under `DevicePolicy=closed` both packaged units let the binaries open
    /// every node the verbs layer needs: uverbs for verbs, rdma_cm for RDMA CM (and iWARP).
    #[test]
    fn both_units_allow_every_rdma_device_node() {
        let units = [
            (
                "rdma-server.service",
                include_str!("../../../rdma-server/pkg/debian/rdma-server.service"),
            ),
            (
                "rdma-mesh.service",
                include_str!("../../../rdma-client/pkg/rdma-mesh.service"),
            ),
        ];
        for (name, text) in units {
            let d = devices(text);
            assert_eq!(d.policy.as_deref(), Some("closed"), "{name}");
            for node in RDMA_NODES {
                assert!(d.allows_rw(node), "{name} does not allow {node:?}: {d:?}");
            }
            // Nothing broader than the nodes: not every misc device.
            assert!(!d.allows_rw(("/dev/kvm", "misc")), "{name}: {d:?}");
        }
    }

    #[test]
    fn device_rules_are_read_as_systemd_does() {
        let d = devices(
            "[Service]\nDevicePolicy=closed\nDeviceAllow=char-infiniband_verbs rw\n\
DeviceAllow=/dev/infiniband/rdma_cm r\n[Install]\nDeviceAllow=/dev/x rw\n",
        );
        assert!(d.allows_rw(RDMA_NODES[0]));
        assert!(!d.allows_rw(RDMA_NODES[1]), "read-only is not enough");
        assert!(!d.allows_rw(("/dev/x", "misc")), "only [Service] counts");
        let reset =
            devices("[Service]\nDevicePolicy=closed\nDeviceAllow=/dev/x rw\nDeviceAllow=\n");
        assert!(reset.allow.is_empty());
        assert!(devices("[Service]\nDeviceAllow=/dev/x\n").allows_rw(("/dev/x", "misc")));
        assert!(devices("[Service]\n").allows_rw(RDMA_NODES[1]));
    }

    #[test]
    fn the_main_process_must_carry_the_units_sandbox() {
        let want = parse(include_str!(
            "../../../rdma-server/pkg/debian/rdma-server.service"
        ))
        .unwrap();
        let passwd = "rdma-server:x:998:998::/nonexistent:/usr/sbin/nologin";
        let status = "Name:\trdma-server\nUid:\t998\t998\t998\t998\nNoNewPrivs:\t1\n\
Seccomp:\t2\nCapPrm:\t0000000000000000\nCapEff:\t0000000000000000\n\
CapBnd:\t0000000000000000\nCapAmb:\t0000000000000000\n";
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
Max locked memory         83886080             83886080             bytes\n";
        assert_eq!(
            sandbox_problems(&want, passwd, status, limits),
            Vec::<String>::new()
        );
        let root = status.replace("998\t998\t998\t998", "0\t0\t0\t0");
        let caps = status.replace("CapEff:\t0000000000000000", "CapEff:\t0000000000000400");
        let loose = status
            .replace("NoNewPrivs:\t1", "NoNewPrivs:\t0")
            .replace("Seccomp:\t2", "Seccomp:\t0");
        for (bad, what) in [
            (root.as_str(), "uids"),
            (caps.as_str(), "CapEff"),
            (loose.as_str(), "NoNewPrivs"),
            (loose.as_str(), "Seccomp"),
        ] {
            let p = sandbox_problems(&want, passwd, bad, limits).join("; ");
            assert!(p.contains(what), "{what}: {p}");
        }
        let p = sandbox_problems(
            &want,
            passwd,
            status,
            &limits.replace("83886080", "unlimited"),
        )
        .join("; ");
        assert!(p.contains("locked-memory"), "{p}");
        assert!(!sandbox_problems(&want, passwd, "", limits).is_empty());
    }

    #[test]
    fn sections_quotes_and_limits() {
        let text = "[Unit]\nExecStart=/bin/no\n[Service]\n# c\nUser=u\nGroup=g\n\
ExecStart=/usr/bin/x --a \"b c\"  d\nLimitMEMLOCK=64M\n[Install]\nUser=other\n";
        let s = parse(text).unwrap();
        assert_eq!(s.exec_start, ["/usr/bin/x", "--a", "b c", "d"]);
        assert_eq!(s.user, "u");
        assert_eq!(s.limit_memlock, Some(Some(64 << 20)));
        assert_eq!(parse_limit("8192").unwrap(), Some(8192));
    }

    #[test]
    fn what_is_not_applied_is_refused() {
        for exec in [
            "-/usr/bin/x",
            "/usr/bin/x $OPTS",
            "/usr/bin/x %i",
            "x --relative",
            "/usr/bin/x \"open",
        ] {
            let text = format!("[Service]\nUser=u\nGroup=g\nExecStart={exec}\n");
            assert!(parse(&text).is_err(), "{exec}");
        }
        assert!(parse("[Service]\nExecStart=/x\nGroup=g\n").is_err());
        assert!(parse("[Service]\nUser=u\nGroup=g\nExecStart=/x\nExecStart=/y\n").is_err());
    }
}
