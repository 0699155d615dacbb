//! The guest kernel: Debian's `linux-image-amd64` dependency, downloaded with apt, unpacked
//! with `dpkg -x`, `depmod`ed, and cached under `~/.cache/rdma-write/vm/kernel/RELEASE/`
//! ([`super::cache_dir`]).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use color_eyre::eyre::{Result, WrapErr, bail, eyre};
use indicatif::{ProgressBar, ProgressStyle};
use xshell::{Shell, cmd};

use crate::exec;

/// The meta package whose dependency names the current kernel.
pub const META_PACKAGE: &str = "linux-image-amd64";

/// An unpacked kernel.
#[derive(Clone, Debug)]
pub struct Kernel {
    /// `uname -r` of the guest, e.g. `6.1.0-56-amd64`.
    pub release: String,
    /// The unpacked package root (holds `boot/` and `lib/modules/RELEASE/`).
    pub root: PathBuf,
    /// `boot/vmlinuz-RELEASE`.
    pub vmlinuz: PathBuf,
    /// True when this call downloaded and unpacked it (false: cache hit).
    pub fresh: bool,
}

impl Kernel {
    /// `lib/modules/RELEASE`.
    pub fn modules_dir(&self) -> PathBuf {
        self.root.join("lib/modules").join(&self.release)
    }
}

/// From `apt-cache depends linux-image-amd64`: the first real dependency package.
/// ```text
/// linux-image-amd64
///   Depends: linux-image-6.1.0-56-amd64
/// ```
pub fn parse_depends(out: &str) -> Option<String> {
    out.lines()
        .filter_map(|l| l.trim().strip_prefix("Depends:"))
        .map(|d| {
            d.trim()
                .trim_start_matches('<')
                .trim_end_matches('>')
                .to_owned()
        })
        .find(|d| d.starts_with("linux-image-"))
}

/// `linux-image-6.1.0-56-amd64` -> `6.1.0-56-amd64`.
pub fn release_from_package(pkg: &str) -> Option<String> {
    let rel = pkg.strip_prefix("linux-image-")?;
    (rel.chars().next()?.is_ascii_digit() && !rel.contains(char::is_whitespace))
        .then(|| rel.to_owned())
}

/// From `apt-cache show --no-all-versions PKG`: the `Size:` field in bytes.
pub fn parse_size(out: &str) -> Option<u64> {
    out.lines()
        .find_map(|l| l.strip_prefix("Size:"))
        .and_then(|s| s.trim().parse().ok())
}

/// Resolves, downloads and unpacks the kernel (cached). With no apt (or apt failing), falls
/// back to the newest kernel already in the cache. When the download fails as root (apt's lists
/// can name a kernel the mirror no longer has), refreshes the lists once and tries again.
pub fn ensure_kernel(cache: &Path) -> Result<Kernel> {
    match try_kernel(cache) {
        Ok(k) => Ok(k),
        // SAFETY: geteuid(2) has no preconditions and cannot fail.
        Err(e) if exec::which("apt-get").is_some() && unsafe { libc::geteuid() } == 0 => {
            eprintln!(
                "vm: {e:#}\nvm: refreshing apt's package lists (`apt-get update`) and trying again"
            );
            let sh = Shell::new()?;
            exec::run_loud(
                cmd!(sh, "apt-get update -q"),
                std::time::Duration::from_secs(600),
            )
            .wrap_err("apt-get update")?;
            try_kernel(cache).wrap_err("still no kernel after `apt-get update`")
        }
        Err(e) => Err(e),
    }
}

fn try_kernel(cache: &Path) -> Result<Kernel> {
    let kernels = cache.join("kernel");
    let pkg = resolve_package();
    let pkg = match pkg {
        Ok(p) => p,
        Err(e) => {
            if let Some(k) = newest_cached(&kernels) {
                eprintln!(
                    "vm: could not resolve {META_PACKAGE} ({e:#}); using cached kernel {}",
                    k.release
                );
                return Ok(k);
            }
            return Err(e.wrap_err(format!(
                "cannot find a kernel: no {META_PACKAGE} from apt and none cached in {}",
                kernels.display()
            )));
        }
    };
    let release = release_from_package(&pkg)
        .ok_or_else(|| eyre!("unexpected kernel package name {pkg:?}"))?;
    if let Some(k) = cached(&kernels, &release) {
        return Ok(k);
    }
    std::fs::create_dir_all(&kernels)
        .wrap_err_with(|| format!("creating {}", kernels.display()))?;
    let downloads = cache.join("downloads");
    let deb = download(&pkg, None, &downloads)?;
    let tmp = tempfile::Builder::new()
        .prefix(&format!(".unpack-{release}-"))
        .tempdir_in(&kernels)
        .wrap_err("creating an unpack directory")?;
    let pb = spinner(format!("unpacking {pkg}"));
    let sh = Shell::new()?;
    let root = tmp.path();
    exec::run(cmd!(sh, "dpkg -x {deb} {root}"))?;
    if !root
        .join("boot")
        .join(format!("vmlinuz-{release}"))
        .is_file()
    {
        bail!(
            "{} has no boot/vmlinuz-{release}; is {pkg} really a kernel image?",
            deb.display()
        );
    }
    pb.set_message(format!("depmod {release}"));
    exec::run(cmd!(sh, "depmod -b {root} {release}"))?;
    std::fs::write(root.join(".complete"), &pkg)?;
    let dest = kernels.join(&release);
    let tmp_path = tmp.keep();
    std::fs::rename(&tmp_path, &dest)
        .wrap_err_with(|| format!("moving {} to {}", tmp_path.display(), dest.display()))?;
    let _ = std::fs::remove_file(&deb);
    pb.finish_and_clear();
    let mut k = cached(&kernels, &release)
        .ok_or_else(|| eyre!("kernel {release} vanished from {}", kernels.display()))?;
    k.fresh = true;
    Ok(k)
}

fn resolve_package() -> Result<String> {
    if exec::which("apt-cache").is_none() {
        bail!("no apt-cache here");
    }
    let sh = Shell::new()?;
    let out = exec::run(cmd!(sh, "apt-cache depends {META_PACKAGE}"))?;
    parse_depends(&out).ok_or_else(|| {
        eyre!("`apt-cache depends {META_PACKAGE}` names no linux-image-* package; run `apt-get update`")
    })
}

fn cached(kernels: &Path, release: &str) -> Option<Kernel> {
    let root = kernels.join(release);
    let vmlinuz = root.join("boot").join(format!("vmlinuz-{release}"));
    (root.join(".complete").is_file() && vmlinuz.is_file()).then(|| Kernel {
        release: release.to_owned(),
        root,
        vmlinuz,
        fresh: false,
    })
}

fn newest_cached(kernels: &Path) -> Option<Kernel> {
    let mut found: Vec<Kernel> = std::fs::read_dir(kernels)
        .ok()?
        .flatten()
        .filter_map(|e| cached(kernels, &e.file_name().to_string_lossy()))
        .collect();
    found.sort_by_key(|k| k.root.metadata().and_then(|m| m.modified()).ok());
    found.pop()
}

fn spinner(msg: String) -> ProgressBar {
    let pb = ProgressBar::new_spinner().with_message(msg);
    if let Ok(style) = ProgressStyle::with_template("{spinner} {msg} [{elapsed}]") {
        pb.set_style(style);
    }
    pb.enable_steady_tick(Duration::from_millis(100));
    pb
}

/// The `Version:` of `pkg` that apt would install (`apt-cache show --no-all-versions`).
pub fn candidate_version(pkg: &str) -> Result<String> {
    let sh = Shell::new()?;
    let out = exec::run(cmd!(sh, "apt-cache show --no-all-versions {pkg}"))?;
    parse_version(&out).ok_or_else(|| eyre!("`apt-cache show {pkg}` names no Version"))
}

/// From `apt-cache show`: the first `Version:` field.
pub fn parse_version(out: &str) -> Option<String> {
    out.lines()
        .find_map(|l| l.strip_prefix("Version:"))
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
}

/// `apt-get download PKG` (or `PKG=VERSION`) into `dir`, with a byte progress bar; returns the
/// .deb.
pub(super) fn download(pkg: &str, version: Option<&str>, dir: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(dir).wrap_err_with(|| format!("creating {}", dir.display()))?;
    let sh = Shell::new()?;
    let spec = match version {
        Some(v) => format!("{pkg}={v}"),
        None => pkg.to_owned(),
    };
    let size = exec::run(cmd!(sh, "apt-cache show --no-all-versions {spec}"))
        .ok()
        .and_then(|o| parse_size(&o));
    let pb = match size {
        Some(n) => {
            let pb = ProgressBar::new(n).with_message(format!("downloading {pkg}"));
            if let Ok(style) = ProgressStyle::with_template(
                "{msg} {wide_bar} {bytes}/{total_bytes} ({bytes_per_sec})",
            ) {
                pb.set_style(style);
            }
            pb
        }
        None => spinner(format!("downloading {pkg}")),
    };
    let prefix = format!("{pkg}_");
    let debs = |d: &Path| -> Vec<PathBuf> {
        std::fs::read_dir(d)
            .map(|it| {
                it.flatten()
                    .map(|e| e.path())
                    .filter(|p| {
                        p.file_name()
                            .is_some_and(|n| n.to_string_lossy().starts_with(&prefix))
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    for stale in debs(dir) {
        let _ = std::fs::remove_file(stale);
    }
    let mut command = std::process::Command::from(cmd!(sh, "apt-get download -q {spec}"));
    command.current_dir(dir);
    let child = exec::Captured::spawn_command(command, format!("apt-get download {spec}"), None)?;
    let started = Instant::now();
    let deadline = started + Duration::from_secs(15 * 60);
    let mut child = Some(child);
    let finished = loop {
        let bytes: u64 = debs(dir)
            .iter()
            .filter_map(|p| p.metadata().ok())
            .map(|m| m.len())
            .sum();
        pb.set_position(bytes);
        if let Some(c) = child.as_mut() {
            if c.exited()? || Instant::now() >= deadline || exec::interrupted() {
                break child.take().map(|c| c.finish(deadline)).transpose()?;
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    pb.finish_and_clear();
    let f = finished.ok_or_else(|| eyre!("apt-get download vanished"))?;
    if f.timed_out {
        bail!(
            "`apt-get download {spec}` did not finish within 15 minutes; check the network / apt sources"
        );
    }
    if f.code != Some(0) {
        bail!(
            "`apt-get download {spec}` failed ({:?}): {}",
            f.code,
            crate::text::tail(f.stderr.trim(), 2000)
        );
    }
    // As root into a directory `_apt` cannot read, apt warns "Download is performed
    // unsandboxed as root"; that is harmless here.
    let found = debs(dir);
    match found.as_slice() {
        [deb] if deb.extension().is_some_and(|e| e == "deb") => Ok(deb.clone()),
        _ => bail!(
            "`apt-get download {spec}` succeeded but left {found:?} in {}",
            dir.display()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_dependency() {
        let out = "linux-image-amd64\n  Depends: linux-image-6.1.0-56-amd64\n";
        let pkg = parse_depends(out).unwrap();
        assert_eq!(pkg, "linux-image-6.1.0-56-amd64");
        assert_eq!(release_from_package(&pkg).unwrap(), "6.1.0-56-amd64");
        let virt =
            "linux-image-amd64\n  Depends: <linux-image-6.12.9-amd64>\n  Recommends: firmware\n";
        assert_eq!(parse_depends(virt).unwrap(), "linux-image-6.12.9-amd64");
        assert_eq!(parse_depends("linux-image-amd64\n"), None);
        assert_eq!(parse_depends("x\n  Depends: initramfs-tools\n"), None);
        assert_eq!(release_from_package("linux-image-amd64"), None);
        assert_eq!(release_from_package("firmware"), None);
    }

    #[test]
    fn size_field() {
        let out = "Package: linux-image-6.1.0-56-amd64\nVersion: 6.1.192-2\nInstalled-Size: 400000\nSize: 70550672\n";
        assert_eq!(parse_size(out), Some(70_550_672));
        assert_eq!(parse_size("Package: x\n"), None);
        assert_eq!(parse_version(out).as_deref(), Some("6.1.192-2"));
        assert_eq!(parse_version("Package: x\nVersion: \n"), None);
    }
}
