//! `cargo xtask dist`: release binaries and one Debian package per binary under `target/dist/`:
//! `rdma-server_VERSION-REV_ARCH.deb` and `rdma-client_VERSION-REV_ARCH.deb`.
//!
//! The packages are made by cargo-deb from `[package.metadata.deb]` in each binary's
//! Cargo.toml. Their man pages and bash/zsh/fish completions are generated first from the
//! binaries' own clap definitions (`BIN --generate KIND`), so they cannot drift from `--help`.
//! The systemd units (the server's, and the client's mesh, [`MESH_UNIT`]) are rated with
//! `systemd-analyze security --offline=yes` and the build fails above [`MAX_EXPOSURE`]; each package's file list and dependencies are checked.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use color_eyre::eyre::{Result, WrapErr as _, bail, eyre};
use xshell::{Shell, cmd};

use crate::deps::{self, Group};
use crate::exec;

/// Highest `systemd-analyze security` exposure the unit may have ("OK" is 2.0 and below).
pub const MAX_EXPOSURE: f64 = 2.0;
/// The unit, as shipped (cargo-deb installs it from here).
pub const UNIT: &str = "rdma-server/pkg/debian/rdma-server.service";
/// The client package's unit, the mesh (`rdma-client mesh`; cargo-deb installs it from here).
pub const MESH_UNIT: &str = "rdma-client/pkg/rdma-mesh.service";

/// One binary's package.
#[derive(Clone, Copy, Debug)]
pub struct Package {
    /// Package and binary name.
    pub name: &'static str,
    /// What must be in it (paths as `dpkg-deb -c` shows them, without the leading `.`).
    pub files: &'static [&'static str],
    /// The other binary: this package must not depend on it.
    pub not_depending_on: &'static str,
}

/// Files both packages carry, `{}` standing for the package name.
const COMMON: &[&str] = &[
    "/usr/bin/{}",
    "/usr/share/man/man1/{}.1.gz",
    "/usr/share/bash-completion/completions/{}",
    "/usr/share/zsh/vendor-completions/_{}",
    "/usr/share/fish/vendor_completions.d/{}.fish",
    "/usr/share/doc/{}/README.md",
    "/usr/share/doc/{}/LICENSE-MIT",
    "/usr/share/doc/{}/LICENSE-APACHE",
    "/usr/share/doc/{}/copyright",
];

/// The two packages.
pub const PACKAGES: [Package; 2] = [
    Package {
        name: "rdma-server",
        files: &[
            "/etc/rdma-server/rdma-server.toml",
            "/usr/lib/systemd/system/rdma-server.service",
            "/usr/lib/sysusers.d/rdma-server.conf",
        ],
        not_depending_on: "rdma-client",
    },
    Package {
        name: "rdma-client",
        files: &[
            "/usr/lib/systemd/system/rdma-mesh.service",
            "/etc/default/rdma-mesh",
            "/usr/share/doc/rdma-client/rdma-mesh.rules.yml",
            "/usr/share/doc/rdma-client/rdma-mesh.dashboard.json",
            "/usr/share/doc/rdma-client/rdma-mesh.alertmanager.yml",
        ],
        not_depending_on: "rdma-server",
    },
];

impl Package {
    /// Every path the package must contain.
    pub fn expected(&self) -> Vec<String> {
        COMMON
            .iter()
            .map(|f| f.replace("{}", self.name))
            .chain(self.files.iter().map(|f| (*f).to_owned()))
            .collect()
    }
}

/// Arguments of `cargo xtask dist`.
#[derive(Debug, Args)]
pub struct DistArgs {
    /// Use the release binaries already built instead of running `cargo build --release`.
    #[arg(long)]
    pub no_build: bool,
}

/// What `dist` made.
#[derive(Debug, Clone)]
pub struct Dist {
    /// `target/dist/rdma-server_…deb`.
    pub server: PathBuf,
    /// `target/dist/rdma-client_…deb`.
    pub client: PathBuf,
    /// The unit's `systemd-analyze security` exposure.
    pub exposure: f64,
}

/// Entry point.
pub fn cmd(args: &DistArgs) -> Result<()> {
    let d = build(args.no_build)?;
    println!(
        "dist: {}\ndist: {}\ndist: rdma-server.service exposure {:.1} (systemd-analyze security; OK is <= {MAX_EXPOSURE:.1})",
        d.server.display(),
        d.client.display(),
        d.exposure
    );
    Ok(())
}

/// Builds both packages; see the module docs.
pub fn build(no_build: bool) -> Result<Dist> {
    deps::ensure(&[Group::Build, Group::Dist])?;
    let root = exec::workspace_root();
    let sh = Shell::new()?;
    sh.change_dir(&root);
    if !no_build {
        // The guests' build: the packages hold the very binaries the suite ran.
        crate::e2e::build()?;
    }
    let release = crate::e2e::bins::dir();
    for p in PACKAGES {
        check_no_test_hooks(&sh, &release.join(p.name))?;
    }
    let generated = release.join("pkg-gen");
    std::fs::create_dir_all(&generated)
        .wrap_err_with(|| format!("creating {}", generated.display()))?;
    for p in PACKAGES {
        generate(&release.join(p.name), p.name, &generated)?;
    }
    let exposure = unit_exposure(&root.join(UNIT))?;
    let mesh = unit_exposure(&root.join(MESH_UNIT))?;
    println!(
        "dist: rdma-mesh.service exposure {mesh:.1} (systemd-analyze security; OK is <= {MAX_EXPOSURE:.1})"
    );
    let out = crate::vm::target_dir().join("dist");
    std::fs::create_dir_all(&out).wrap_err_with(|| format!("creating {}", out.display()))?;
    let arch = exec::run(cmd!(sh, "dpkg --print-architecture"))?
        .trim()
        .to_owned();
    let mut debs = Vec::new();
    for p in PACKAGES {
        let deb = package(&sh, &p, &out, &arch)?;
        check_package(&sh, &p, &deb)?;
        println!("dist: {} ok", deb.display());
        debs.push(deb);
    }
    let [server, client] = <[PathBuf; 2]>::try_from(debs).map_err(|_| eyre!("two packages"))?;
    Ok(Dist {
        server,
        client,
        exposure,
    })
}

/// The library crates other programs can use: their docs build without a warning (broken
/// intra-doc links included) and `cargo publish --dry-run` packages and builds them.
pub const CRATES: [&str; 3] = ["rdma-proto", "rdma-core-rs", "rdma-app"];

/// Checks that [`CRATES`] are publishable (docs, then a dry-run publish of all at once, so
/// that one may depend on the other's unpublished version).
pub fn check_crates() -> Result<()> {
    let sh = Shell::new()?;
    sh.change_dir(exec::workspace_root());
    let pkgs: Vec<String> = CRATES.iter().map(|c| format!("--package={c}")).collect();
    let pkgs = &pkgs;
    {
        let _docflags = sh.push_env("RUSTDOCFLAGS", "-D warnings");
        exec::run(cmd!(
            sh,
            "cargo doc --quiet --no-deps --all-features {pkgs...}"
        ))
        .wrap_err("the crates' docs have warnings")?;
    }
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")));
    if let Some(home) = cargo_home {
        for gone in forget_unpacked(&home.join("registry/src"), &CRATES)? {
            println!("dist: removed a stale unpacked copy, {}", gone.display());
        }
    }
    exec::run(cmd!(
        sh,
        "cargo publish --dry-run --allow-dirty --quiet {pkgs...}"
    ))
    .wrap_err("the crates are not publishable")?;
    println!(
        "dist: {} pass `cargo publish --dry-run`; docs warning-free",
        CRATES.join(", ")
    );
    Ok(())
}

/// The release binary `bin` (what the .deb ships) must not have a `--fault` test hook (those
/// live in the test-only `rdma-misbehave` peers): it refuses the flag as an unknown argument.
/// Removes what earlier dry-runs unpacked of `crates` under `src` (`$CARGO_HOME/registry/src`).
/// A multi-package `cargo publish --dry-run` builds each crate against the others packaged
/// into a local registry, which cargo unpacks under `registry/src/-HASH/NAME-VERSION`, the
/// hash from the workspace's path; a copy already there (`.cargo-ok`) is used as it is, so a
/// second run from the same path built against the first run's sources (found: a CI clone in
/// a path an earlier clone had used failed on a field the crate had gained since). Only the
/// local registries' folders (named `-HASH`) are touched, never a real index's. Returns what
/// it removed.
///
/// # Errors
/// A folder that cannot be read or removed.
pub fn forget_unpacked(src: &Path, crates: &[&str]) -> Result<Vec<PathBuf>> {
    let mut gone = Vec::new();
    let Ok(registries) = std::fs::read_dir(src) else {
        return Ok(gone);
    };
    for reg in registries.flatten() {
        if !reg.file_name().to_string_lossy().starts_with('-') {
            continue;
        }
        let unpacked = std::fs::read_dir(reg.path())
            .wrap_err_with(|| format!("reading {}", reg.path().display()))?;
        for dir in unpacked.flatten() {
            let name = dir.file_name().to_string_lossy().into_owned();
            let ours = crates.iter().any(|c| {
                name.strip_prefix(c)
                    .and_then(|rest| rest.strip_prefix('-'))
                    .is_some_and(|v| v.starts_with(|ch: char| ch.is_ascii_digit()))
            });
            if ours {
                std::fs::remove_dir_all(dir.path())
                    .wrap_err_with(|| format!("removing {}", dir.path().display()))?;
                gone.push(dir.path());
            }
        }
    }
    Ok(gone)
}

fn check_no_test_hooks(sh: &Shell, bin: &Path) -> Result<()> {
    // A usage error is answered at once; the deadline is for a binary that hangs instead.
    let out = exec::output_with(
        cmd!(sh, "{bin} --fault x").ignore_status(),
        None,
        Duration::from_secs(30),
    )?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !has_no_fault_flag(out.status.code(), &stderr) {
        bail!(
            "{} accepts --fault: the release build has a test hook (misbehaviour belongs in \
             the test-only rdma-misbehave peers); it said: {}",
            bin.display(),
            stderr.trim()
        );
    }
    Ok(())
}

/// Whether a binary's answer to `--fault x` says it has no such flag (usage error, named).
pub fn has_no_fault_flag(code: Option<i32>, stderr: &str) -> bool {
    code == Some(i32::from(rdma_proto::Exit::Usage.code()))
        && stderr.contains("unexpected argument '--fault'")
}

/// Writes `BIN --generate KIND` for every kind into `dir` (the man page gzipped, as Debian
/// ships them).
fn generate(bin: &Path, name: &str, dir: &Path) -> Result<()> {
    let sh = Shell::new()?;
    for (kind, file) in [
        ("man", format!("{name}.1.gz")),
        ("complete-bash", format!("{name}.bash")),
        ("complete-zsh", format!("_{name}")),
        ("complete-fish", format!("{name}.fish")),
    ] {
        let text = exec::run_bytes(cmd!(sh, "{bin} --generate {kind}"), None)
            .wrap_err_with(|| format!("generating the {kind} output of {name}"))?;
        if text.is_empty() {
            bail!("`{} --generate {kind}` printed nothing", bin.display());
        }
        let bytes = if kind == "man" {
            exec::run_bytes(cmd!(sh, "gzip -9n -c"), Some(text))?
        } else {
            text
        };
        let path = dir.join(file);
        std::fs::write(&path, bytes).wrap_err_with(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// `systemd-analyze security --offline=yes` of the unit file: its overall exposure, failing
/// above [`MAX_EXPOSURE`].
pub fn unit_exposure(unit: &Path) -> Result<f64> {
    let sh = Shell::new()?;
    // systemd-analyze writes a temporary copy next to nothing: run it where the file is.
    let out = exec::run(cmd!(sh, "systemd-analyze security --offline=yes {unit}"))
        .wrap_err("rating the systemd unit")?;
    let exposure = parse_exposure(&out).ok_or_else(|| {
        eyre!(
            "no overall exposure level in:\n{}",
            crate::text::tail(&out, 2000)
        )
    })?;
    if exposure > MAX_EXPOSURE {
        let exposed: Vec<&str> = out.lines().filter(|l| l.contains('✗')).collect();
        bail!(
            "{} rates {exposure:.1} in `systemd-analyze security`, above {MAX_EXPOSURE:.1}; what it \
             counts against it:\n{}",
            unit.display(),
            exposed.join("\n")
        );
    }
    Ok(exposure)
}

/// The figure of `→ Overall exposure level for NAME.service: 1.3 OK 🙂`.
pub fn parse_exposure(out: &str) -> Option<f64> {
    out.lines()
        .find_map(|l| l.split_once("Overall exposure level for "))
        .and_then(|(_, rest)| rest.split_once(": "))
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

/// `cargo deb` for one binary; the `.deb` it wrote.
fn package(sh: &Shell, p: &Package, out: &Path, arch: &str) -> Result<PathBuf> {
    let name = p.name;
    let before = debs_in(out, name)?;
    for old in &before {
        std::fs::remove_file(old).wrap_err_with(|| format!("removing {}", old.display()))?;
    }
    exec::run(cmd!(
        sh,
        "cargo deb --package {name} --no-build --output {out}"
    ))
    .wrap_err_with(|| format!("cargo deb for {name}"))?;
    let made = debs_in(out, name)?;
    let [deb] = made.as_slice() else {
        bail!(
            "expected one {name}_*.deb in {}, found {made:?}",
            out.display()
        );
    };
    let file = deb
        .file_name()
        .and_then(|f| f.to_str())
        .ok_or_else(|| eyre!("odd file name {}", deb.display()))?;
    if !deb_name_matches(file, name, arch) {
        bail!("{file} is not named {name}_VERSION-REV_{arch}.deb");
    }
    Ok(deb.clone())
}

fn debs_in(dir: &Path, name: &str) -> Result<Vec<PathBuf>> {
    let prefix = format!("{name}_");
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .wrap_err_with(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|f| f.to_str())
                .is_some_and(|f| f.starts_with(&prefix) && f.ends_with(".deb"))
        })
        .collect();
    v.sort();
    Ok(v)
}

/// `NAME_VERSION-REV_ARCH.deb`, the Debian file name.
pub fn deb_name_matches(file: &str, name: &str, arch: &str) -> bool {
    let Some(rest) = file
        .strip_prefix(&format!("{name}_"))
        .and_then(|r| r.strip_suffix(&format!("_{arch}.deb")))
    else {
        return false;
    };
    rest.split_once('-')
        .is_some_and(|(v, rev)| !v.is_empty() && !rev.is_empty() && !rev.contains('_'))
}

/// The package has every expected file, depends on the verbs providers, and not on the other
/// binary's package.
fn check_package(sh: &Shell, p: &Package, deb: &Path) -> Result<()> {
    let listing = exec::run(cmd!(sh, "dpkg-deb --contents {deb}"))?;
    let missing = missing_files(&listing, &p.expected());
    if !missing.is_empty() {
        bail!(
            "{} lacks {}; it has:\n{listing}",
            deb.display(),
            missing.join(", ")
        );
    }
    let depends = exec::run(cmd!(sh, "dpkg-deb --field {deb} Depends"))?;
    let problems = dependency_problems(&depends, p.not_depending_on);
    if !problems.is_empty() {
        bail!("{}: {}", deb.display(), problems.join("; "));
    }
    Ok(())
}

/// Expected paths absent from a `dpkg-deb --contents` listing.
pub fn missing_files(listing: &str, expected: &[String]) -> Vec<String> {
    let have: Vec<&str> = listing
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .map(|p| p.trim_start_matches('.'))
        .collect();
    expected
        .iter()
        .filter(|e| !have.contains(&e.as_str()))
        .cloned()
        .collect()
}

/// What is wrong with a package's `Depends`: it must name the verbs providers and libibverbs
/// (from the binary's shared libraries), and must not name the other binary's package.
pub fn dependency_problems(depends: &str, other: &str) -> Vec<String> {
    let names: Vec<&str> = depends
        .split([',', '|'])
        .filter_map(|d| d.split_whitespace().next())
        .collect();
    let mut problems = Vec::new();
    for want in ["ibverbs-providers", "libibverbs1", "libc6"] {
        if !names.contains(&want) {
            problems.push(format!("Depends lacks {want} ({depends:?})"));
        }
    }
    if names.contains(&other) {
        problems.push(format!(
            "Depends names {other}: the packages must install apart"
        ));
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_our_crates_unpacked_from_local_registries_are_forgotten() {
        let home = tempfile::tempdir().unwrap();
        let src = home.path();
        for d in [
            "-22c3805da5a543b4/rdma-core-rs-0.1.0",
            "-22c3805da5a543b4/rdma-proto-0.1.0",
            "-22c3805da5a543b4/rdma-core-rs-extra-0.1.0",
            "index.crates.io-1949cf8c6b5b557f/rdma-core-rs-0.1.0",
            "index.crates.io-1949cf8c6b5b557f/serde-1.0.0",
        ] {
            std::fs::create_dir_all(src.join(d)).unwrap();
        }
        let mut gone = forget_unpacked(src, &CRATES).unwrap();
        gone.sort();
        assert_eq!(
            gone,
            [
                src.join("-22c3805da5a543b4/rdma-core-rs-0.1.0"),
                src.join("-22c3805da5a543b4/rdma-proto-0.1.0")
            ]
        );
        assert!(
            src.join("-22c3805da5a543b4/rdma-core-rs-extra-0.1.0")
                .exists()
        );
        assert!(
            src.join("index.crates.io-1949cf8c6b5b557f/rdma-core-rs-0.1.0")
                .exists()
        );
        assert!(
            src.join("index.crates.io-1949cf8c6b5b557f/serde-1.0.0")
                .exists()
        );
        // No registry at all: nothing to do.
        assert!(
            forget_unpacked(&src.join("none"), &CRATES)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn a_binary_with_the_test_hooks_is_told_apart() {
        let without = "error: unexpected argument '--fault' found\n\nUsage: rdma-client";
        assert!(has_no_fault_flag(Some(2), without));
        // With the hooks, `x` is a bad value of a known flag: still exit 2, but not unknown.
        let with = "error: invalid value 'x' for '--fault <FAULT>'";
        assert!(!has_no_fault_flag(Some(2), with));
        assert!(!has_no_fault_flag(Some(0), without));
    }

    #[test]
    fn exposure_figure_is_read() {
        let out = "✗ PrivateNetwork=  Service has access to the host's network  0.5\n\n\
→ Overall exposure level for rdma-server.service: 1.3 OK 🙂\n";
        assert_eq!(parse_exposure(out), Some(1.3));
        assert_eq!(parse_exposure("nothing"), None);
    }

    #[test]
    fn the_shipped_unit_rates_ok() {
        if exec::which("systemd-analyze").is_none() {
            return; // `cargo xtask deps` installs it; dist itself fails without it
        }
        let e = unit_exposure(&exec::workspace_root().join(UNIT)).unwrap();
        assert!(e <= MAX_EXPOSURE, "{e}");
    }

    /// The mesh's unit too (issue 24: hardened like the server's), and it passes the flags the
    /// DaemonSet passes, on the mesh's port.
    #[test]
    fn the_mesh_unit_rates_ok() {
        let unit = exec::workspace_root().join(MESH_UNIT);
        let text = std::fs::read_to_string(&unit).unwrap();
        assert!(
            text.contains("mesh ${RDMA_MESH_NODES} --every 10s --metrics-listen [::]:9478"),
            "{text}"
        );
        if exec::which("systemd-analyze").is_none() {
            return; // `cargo xtask deps` installs it; dist itself fails without it
        }
        let e = unit_exposure(&unit).unwrap();
        assert!(e <= MAX_EXPOSURE, "{e}");
    }

    #[test]
    fn deb_file_names_follow_debian() {
        assert!(deb_name_matches(
            "rdma-server_0.1.0-1_amd64.deb",
            "rdma-server",
            "amd64"
        ));
        assert!(!deb_name_matches(
            "rdma-server_0.1.0_amd64.deb",
            "rdma-server",
            "amd64"
        ));
        assert!(!deb_name_matches(
            "rdma-client_0.1.0-1_amd64.deb",
            "rdma-server",
            "amd64"
        ));
        assert!(!deb_name_matches(
            "rdma-server_0.1.0-1_arm64.deb",
            "rdma-server",
            "amd64"
        ));
    }

    #[test]
    fn listings_and_dependencies_are_checked() {
        let listing = "drwxr-xr-x 0/0 0 2025-01-01 00:00 ./usr/bin/\n\
-rwxr-xr-x 0/0 123 2025-01-01 00:00 ./usr/bin/rdma-client\n";
        let missing = missing_files(listing, &PACKAGES[1].expected());
        assert!(!missing.contains(&"/usr/bin/rdma-client".to_owned()));
        assert!(missing.contains(&"/usr/share/man/man1/rdma-client.1.gz".to_owned()));
        let good = "libc6 (>= 2.34), libibverbs1 (>= 43.0), ibverbs-providers";
        assert!(dependency_problems(good, "rdma-server").is_empty());
        assert_eq!(
            dependency_problems(
                "libc6, libibverbs1, ibverbs-providers, rdma-server",
                "rdma-server"
            )
            .len(),
            1
        );
        assert_eq!(dependency_problems("libc6", "rdma-server").len(), 2);
    }
}
