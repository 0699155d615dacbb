//! What the guest install test needs from a systemd service unit: its `ExecStart` command,
//! its `User`/`Group`, and its `LimitMEMLOCK`, read from the installed unit file.
//!
//! The guests' init is busybox, not systemd, so the test starts the service the way the unit
//! says: the exact command line, as the unit's user, with its locked-memory limit and no new
//! privileges. The rest of the sandbox (ProtectSystem=, DeviceAllow=, ...) needs systemd itself;
//! `systemd-analyze` checks those directives.

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
