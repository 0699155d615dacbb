//! Soft-iWARP for the guests: Debian's kernels ship rdma_rxe but not siw (`CONFIG_RDMA_SIW` is
//! not set), so `siw.ko` is built out of tree, once, for the exact guest kernel, and cached as
//! `~/.cache/rdma-write/vm/siw/RELEASE/siw.ko` ([`super::cache_dir`]).
//!
//! The build: the kernel's `linux-headers-RELEASE` (installed with apt, as `cargo xtask deps`
//! installs: nothing removed or downgraded), `linux-source-X.Y` of the kernel's version
//! downloaded (not installed), only `drivers/infiniband/sw/siw` extracted from it, then
//! `make -C /lib/modules/RELEASE/build M=DIR CONFIG_RDMA_SIW=m modules`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use color_eyre::eyre::{Result, WrapErr, bail, eyre};
use xshell::{Shell, cmd};

use super::kernel::{self, Kernel};
use crate::deps::{self, Group};
use crate::exec;

/// siw's own dependency, loaded before `siw.ko` from the guest kernel's tree (`modprobe -d`):
/// libcrc32c, whose crc32c it needs at run time from crc32c_generic.
pub const SIW_DEPS: &[&str] = &["libcrc32c", "crc32c_generic"];

/// RDMA CM (librdmacm's kernel side), which iWARP cannot do without and RoCE may use (rping;
/// without rdma_ucm: "failed to create RDMA CM event channel").
pub const RDMA_CM: &[&str] = &["configfs", "ib_cm", "iw_cm", "rdma_cm", "rdma_ucm"];

/// Where the siw module for `release` is cached.
pub fn cached_path(cache: &Path, release: &str) -> PathBuf {
    cache.join("siw").join(release).join("siw.ko")
}

/// `6.1.0-57-amd64` -> `linux-source-6.1`; `linux-headers-6.1.0-57-amd64`.
pub fn packages_for(release: &str) -> Option<(String, String)> {
    let mut it = release.split(['.', '-']);
    let (major, minor) = (it.next()?, it.next()?);
    if major.is_empty()
        || minor.is_empty()
        || !major.chars().all(|c| c.is_ascii_digit())
        || !minor.chars().all(|c| c.is_ascii_digit())
    {
        return None;
    }
    Some((
        format!("linux-source-{major}.{minor}"),
        format!("linux-headers-{release}"),
    ))
}

/// Returns `siw.ko` for `kernel`, building it (about a minute, progress on stderr) when the
/// cache has none. `(path, built_now)`.
pub fn ensure_siw(kernel: &Kernel, cache: &Path) -> Result<(PathBuf, bool)> {
    let release = &kernel.release;
    let out = cached_path(cache, release);
    if out.is_file() {
        return Ok((out, false));
    }
    let t0 = Instant::now();
    let (source_pkg, headers_pkg) = packages_for(release)
        .ok_or_else(|| eyre!("cannot tell the kernel series of release {release:?}"))?;
    eprintln!(
        "siw: building siw.ko once for guest kernel {release} (cached in {})",
        out.display()
    );
    deps::ensure(&[Group::Transports])?;
    let build = PathBuf::from(format!("/lib/modules/{release}/build"));
    if !build.join("Makefile").is_file() {
        eprintln!("siw: installing {headers_pkg} (the guest kernel's build tree)");
        // SAFETY: geteuid has no preconditions and cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            bail!(
                "building siw.ko needs {headers_pkg}, which is not installed; as root run:\n    apt-get install {headers_pkg}"
            );
        }
        deps::apt::install(std::slice::from_ref(&headers_pkg), false)
            .wrap_err_with(|| format!("installing {headers_pkg}"))?;
        if !build.join("Makefile").is_file() {
            bail!(
                "{headers_pkg} is installed but {} has no Makefile",
                build.display()
            );
        }
    }
    // The source of the kernel's exact version where apt still has it.
    let image = format!("linux-image-{release}");
    let version = kernel::candidate_version(&image).ok();
    let downloads = cache.join("downloads");
    eprintln!(
        "siw: downloading {source_pkg}{} (~140 MB, only the siw driver is kept)",
        version
            .as_deref()
            .map(|v| format!(" {v}"))
            .unwrap_or_default()
    );
    let deb = match kernel::download(&source_pkg, version.as_deref(), &downloads) {
        Ok(d) => d,
        Err(e) if version.is_some() => {
            eprintln!("siw: {e:#}; trying apt's candidate version of {source_pkg}");
            kernel::download(&source_pkg, None, &downloads)?
        }
        Err(e) => return Err(e),
    };
    let dir = out
        .parent()
        .ok_or_else(|| eyre!("{} has no parent", out.display()))?;
    std::fs::create_dir_all(dir).wrap_err_with(|| format!("creating {}", dir.display()))?;
    let work = tempfile::Builder::new()
        .prefix(".siw-build-")
        .tempdir_in(dir)
        .wrap_err("creating the siw build directory")?;
    let w = work.path();
    let sh = Shell::new()?;
    eprintln!("siw: unpacking {}", deb.display());
    exec::run(cmd!(sh, "dpkg -x {deb} {w}/deb"))?;
    let series = source_pkg.trim_start_matches("linux-source-");
    let tarball = w.join(format!("deb/usr/src/linux-source-{series}.tar.xz"));
    if !tarball.is_file() {
        bail!("{} has no {}", deb.display(), tarball.display());
    }
    let member = format!("linux-source-{series}/drivers/infiniband/sw/siw");
    eprintln!("siw: extracting {member} (reads the whole tarball: about a minute)");
    exec::output_with(
        cmd!(sh, "tar -xJf {tarball} -C {w} {member}"),
        None,
        Duration::from_secs(15 * 60),
    )
    .and_then(|o| exec::check_output(&format!("tar -xJf {} {member}", tarball.display()), &o))?;
    let src = w.join(&member);
    eprintln!(
        "siw: make -C {} M={} modules",
        build.display(),
        src.display()
    );
    let m = format!("M={}", src.display());
    exec::output_with(
        cmd!(sh, "make -C {build} {m} CONFIG_RDMA_SIW=m modules"),
        None,
        Duration::from_secs(15 * 60),
    )
    .and_then(|o| exec::check_output(&format!("make -C {} {m} modules", build.display()), &o))
    .wrap_err("building siw.ko")?;
    let ko = src.join("siw.ko");
    if !ko.is_file() {
        bail!("make succeeded but left no {}", ko.display());
    }
    let tmp = out.with_extension("ko.tmp");
    std::fs::copy(&ko, &tmp).wrap_err_with(|| format!("copying {}", ko.display()))?;
    std::fs::rename(&tmp, &out)?;
    // The source package is only needed for this one build.
    let _ = std::fs::remove_file(&deb);
    eprintln!(
        "siw: built {} in {:.0} s",
        out.display(),
        t0.elapsed().as_secs_f64()
    );
    Ok((out, true))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packages_follow_the_release() {
        assert_eq!(
            packages_for("6.1.0-57-amd64"),
            Some((
                "linux-source-6.1".into(),
                "linux-headers-6.1.0-57-amd64".into()
            ))
        );
        assert_eq!(
            packages_for("6.12.9-amd64").map(|p| p.0),
            Some("linux-source-6.12".into())
        );
        assert_eq!(packages_for("amd64"), None);
        assert_eq!(packages_for(""), None);
        assert!(
            cached_path(Path::new("/c"), "6.1.0-57-amd64").ends_with("siw/6.1.0-57-amd64/siw.ko")
        );
    }
}
