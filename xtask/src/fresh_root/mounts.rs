//! The mounts a chrooted new machine needs, undone when dropped, and the check that nothing is
//! mounted under a root before it is deleted.

use std::path::{Path, PathBuf};

use color_eyre::eyre::{Result, bail};
use xshell::{Shell, cmd};

use crate::exec;

/// A mount that is undone when dropped.
#[derive(Debug)]
pub struct Mount {
    target: PathBuf,
}

impl Mount {
    /// `source` bound (recursively) at `target`; changes under `target` never propagate back
    /// to the host's own mounts.
    pub fn bind(source: &Path, target: &Path, read_only: bool) -> Result<Self> {
        std::fs::create_dir_all(target)?;
        let sh = Shell::new()?;
        exec::run(cmd!(sh, "mount --rbind {source} {target}"))?;
        let m = Self {
            target: target.to_owned(),
        };
        exec::run(cmd!(sh, "mount --make-rslave {target}"))?;
        if read_only {
            exec::run(cmd!(sh, "mount -o remount,bind,ro {target}"))?;
        }
        Ok(m)
    }

    /// A fresh procfs at `target`.
    pub fn proc(target: &Path) -> Result<Self> {
        std::fs::create_dir_all(target)?;
        let sh = Shell::new()?;
        exec::run(cmd!(sh, "mount -t proc proc {target}"))?;
        Ok(Self {
            target: target.to_owned(),
        })
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if let Ok(sh) = Shell::new() {
            let t = &self.target;
            if exec::run(cmd!(sh, "umount --recursive {t}")).is_err() {
                let _ = exec::run(cmd!(sh, "umount --recursive --lazy {t}"));
            }
        }
    }
}

/// The mount points of `/proc/self/mountinfo` (its fifth field, octal escapes undone).
pub fn mount_points(mountinfo: &str) -> Vec<PathBuf> {
    mountinfo
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|p| PathBuf::from(unescape(p)))
        .collect()
}

/// `\040` (space), `\011` (tab), `\012` (newline), `\134` (backslash) as the kernel writes them.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes.get(i + 1..i + 4).and_then(|d| {
            let s = std::str::from_utf8(d).ok()?;
            u8::from_str_radix(s, 8).ok()
        });
        match (bytes[i], octal) {
            (b'\\', Some(b)) => {
                out.push(b);
                i += 4;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The mount points at or under `root`, as text, from a `/proc/self/mountinfo`.
pub fn mounted_under(root: &Path, mountinfo: &str) -> Vec<String> {
    mount_points(mountinfo)
        .into_iter()
        .filter(|p| p.starts_with(root))
        .map(|p| p.display().to_string())
        .collect()
}

/// Deletes `root` (a chroot this module made) after making sure nothing is mounted at or under
/// it: a bind mount left there would make the delete reach the host's own files.
pub fn remove_root(root: &Path) -> Result<()> {
    if !root.exists() {
        return Ok(());
    }
    let root = root.canonicalize()?;
    let left = mounted_under(&root, &std::fs::read_to_string("/proc/self/mountinfo")?);
    if !left.is_empty() {
        bail!(
            "not deleting {}: still mounted there: {}; run `umount --recursive` on them, then \
             delete it",
            root.display(),
            left.join(", ")
        );
    }
    std::fs::remove_dir_all(&root)
        .map_err(|e| color_eyre::eyre::eyre!("deleting {}: {e}", root.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_points_come_from_the_fifth_field_unescaped() {
        let info = "22 1 0:21 / /proc rw,nosuid - proc proc rw\n\
                    90 29 254:1 /root/.rustup /x/fresh\\040root/opt/rustup ro - ext4 /dev/vda rw\n";
        assert_eq!(
            mount_points(info),
            [
                PathBuf::from("/proc"),
                PathBuf::from("/x/fresh root/opt/rustup")
            ]
        );
        assert_eq!(unescape("a\\134b\\011c"), "a\\b\tc");
        assert_eq!(unescape("trailing\\04"), "trailing\\04");
    }

    #[test]
    fn what_is_mounted_under_a_root_is_found_and_nothing_else() {
        let info = "22 1 0:21 / /proc rw - proc proc rw\n\
                    91 29 0:5 / /t/fresh/root/dev rw - devtmpfs udev rw\n\
                    92 29 0:6 / /t/fresh/rootless rw - tmpfs tmpfs rw\n\
                    93 29 0:7 / /t/fresh/root rw - tmpfs tmpfs rw\n";
        assert_eq!(
            mounted_under(Path::new("/t/fresh/root"), info),
            ["/t/fresh/root/dev", "/t/fresh/root"]
        );
        assert!(mounted_under(Path::new("/t/other"), info).is_empty());
    }

    #[test]
    fn a_root_with_nothing_mounted_under_it_is_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir_all(root.join("etc")).unwrap();
        remove_root(&root).unwrap();
        assert!(!root.exists());
    }
}
