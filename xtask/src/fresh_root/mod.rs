//! `cargo xtask fresh-root`: the README's first command, `cargo xtask e2e`, on a new machine of
//! our kind, as a new user runs it. A green CI on a developer's machine (where QEMU and the
//! build tools are already installed) proves nothing about a new one; this does.
//!
//! The new machine is a Debian 12 debootstrap minbase root ([`image`]): what this kind's image
//! holds when it is new (gcc, libc6-dev, git, ca-certificates, python3, and qemu-utils from
//! bookworm-backports, whose source it then drops), this host's Rust toolchain bound in
//! read-only, and a copy of the working tree (tracked and untracked files, nothing ignored: no
//! target/). Chrooted there, `cargo xtask e2e` must install everything it needs, build, boot
//! the guests (whose root is then that new machine) and verify the write.
//!
//! Cached in xtask's download cache ([`crate::vm::user_cache_dir`]`/fresh/`), so the warm run
//! stays short: the debootstrap tarball (the minbase packages) and apt's downloaded packages
//! (`apt-archives/`, bound at `/var/cache/apt/archives`). Every package is still installed
//! from scratch in every run; only the downloads are kept. The root itself is made anew each time and deleted after a
//! pass (kept after a failure, for a look; deleted at the next start, never while anything is
//! mounted under it).

mod image;
mod mounts;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Args;
use color_eyre::eyre::{Result, WrapErr as _, bail};
use xshell::Shell;

use crate::deps::{self, Group};
use crate::exec;
use mounts::Mount;

/// Arguments of `cargo xtask fresh-root`.
#[derive(Debug, Clone, Args)]
pub struct FreshRootArgs {
    /// Keep the root after a pass (under target/xtask/fresh/root).
    #[arg(long)]
    pub keep: bool,
    /// Download the debootstrap tarball and apt's packages again.
    #[arg(long)]
    pub refresh: bool,
}

/// Where the new machine's workspace copy lives inside it.
const WORKSPACE: &str = "/root/rdma-write";

/// A deadline for each step in the root (apt installs, the build, the guests).
const STEP_TIMEOUT: Duration = Duration::from_secs(40 * 60);

/// The longest `cargo xtask fresh-root` can take, each of its waits at its whole deadline: the
/// debootstrap tarball made and unpacked ([`exec::INSTALL_TIMEOUT`] each), the commands that
/// make it a new machine (as many as [`image::new_machine`] lists) and `cargo xtask e2e`
/// ([`STEP_TIMEOUT`] each).
pub fn worst_case() -> Duration {
    let commands = u32::try_from(image::commands()).unwrap_or(u32::MAX);
    2 * exec::INSTALL_TIMEOUT + (commands + 1) * STEP_TIMEOUT
}

/// Entry point of `cargo xtask fresh-root`.
pub fn cmd(args: &FreshRootArgs) -> Result<()> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        bail!("fresh-root debootstraps, mounts and chroots: run it as root");
    }
    let t0 = Instant::now();
    deps::ensure(&[Group::FreshRoot])?;
    let dir = crate::vm::xtask_dir().join("fresh");
    let downloads = crate::vm::user_cache_dir().join("fresh");
    let tarball = downloads.join(format!("debootstrap-{}-minbase.tgz", image::SUITE));
    let archives = downloads.join("apt-archives");
    let root = dir.join("root");
    if args.refresh {
        let _ = std::fs::remove_file(&tarball);
        let _ = std::fs::remove_dir_all(&archives);
    }
    for d in [&dir, &archives.join("partial")] {
        std::fs::create_dir_all(d).wrap_err_with(|| format!("creating {}", d.display()))?;
    }
    phase("clear the last run's root", || mounts::remove_root(&root))?;
    phase(
        "debootstrap minbase tarball (downloaded once, cached)",
        || {
            let made = image::ensure_tarball(&tarball, &dir.join("scratch"))?;
            println!(
                "fresh-root:     {} {}",
                if made { "made" } else { "cached:" },
                tarball.display()
            );
            Ok(())
        },
    )?;
    phase("unpack the minbase root", || image::unpack(&tarball, &root))?;
    let ch = Chroot::enter(&root, &archives)?;
    phase(
        "a new machine of this kind: gcc libc6-dev git ca-certificates python3, qemu-utils from bookworm-backports",
        || {
            let held = image::make_new_machine(&ch)?;
            println!("fresh-root:     holds {held}, no backports source");
            Ok(())
        },
    )?;
    phase("copy the working tree (no target/)", || {
        copy_tree(&exec::workspace_root(), &ch.path(WORKSPACE))
    })?;
    phase(
        "`cargo xtask e2e` (the README's first command) in the new machine",
        || {
            let out = ch.streamed(WORKSPACE, &["cargo", "xtask", "e2e"])?;
            if !out.lines().any(|l| l.starts_with("e2e PASS")) {
                bail!("`cargo xtask e2e` exited 0 without its `e2e PASS` verdict");
            }
            Ok(())
        },
    )?;
    drop(ch);
    if args.keep {
        println!("fresh-root: kept {}", root.display());
    } else {
        phase("delete the root", || mounts::remove_root(&root))?;
    }
    println!(
        "fresh-root: PASS: `cargo xtask e2e` passed on a new machine of this kind ({:.0} s)",
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}

/// One step, with a line when it starts and when it ends.
fn phase<T>(what: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    let t = Instant::now();
    println!("fresh-root: {what} ...");
    let out = f().wrap_err_with(|| format!("fresh-root: {what}"))?;
    println!(
        "fresh-root: {what}: ok ({:.0} s)",
        t.elapsed().as_secs_f64()
    );
    Ok(out)
}

/// A root with what a chrooted build and guests need mounted; unmounted when dropped.
#[derive(Debug)]
pub struct Chroot {
    root: PathBuf,
    _mounts: Vec<Mount>,
}

impl Chroot {
    /// Mounts proc, sys, dev, the toolchain (read-only), cargo's registry (downloads shared)
    /// and the apt download cache into `root`.
    fn enter(root: &Path, archives: &Path) -> Result<Self> {
        let home = PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/root".into()));
        // Where this host's toolchain is: rustup's and cargo's own variables, else their defaults.
        let from_env = |key: &str, default: &str| {
            std::env::var_os(key).map_or_else(|| home.join(default), PathBuf::from)
        };
        let rustup = from_env("RUSTUP_HOME", ".rustup");
        let cargo = from_env("CARGO_HOME", ".cargo");
        let at = |p: &str| root.join(p.trim_start_matches('/'));
        std::fs::copy("/etc/resolv.conf", at("/etc/resolv.conf"))
            .wrap_err("copying /etc/resolv.conf into the root")?;
        // Built in order; if one fails, those before it are unmounted as they drop.
        let mounts = vec![
            Mount::proc(&at("/proc"))?,
            Mount::bind(Path::new("/sys"), &at("/sys"), false)?,
            Mount::bind(Path::new("/dev"), &at("/dev"), false)?,
            Mount::bind(&rustup, &at("/opt/rustup"), true)?,
            Mount::bind(&cargo.join("bin"), &at("/opt/cargo-bin"), true)?,
            Mount::bind(&cargo.join("registry"), &at("/root/.cargo/registry"), false)?,
            Mount::bind(archives, &at("/var/cache/apt/archives"), false)?,
        ];
        Ok(Self {
            root: root.to_owned(),
            _mounts: mounts,
        })
    }

    /// `path` of the new machine, seen from the host.
    fn path(&self, path: &str) -> PathBuf {
        self.root.join(path.trim_start_matches('/'))
    }

    /// `chroot ROOT env -i -C DIR …`: a clean environment, as a new user's login has.
    fn command<'a>(&self, sh: &'a Shell, dir: &str, argv: &[&str]) -> xshell::Cmd<'a> {
        let mut env = vec![
            "PATH=/opt/cargo-bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
                .to_owned(),
            "HOME=/root".to_owned(),
            "RUSTUP_HOME=/opt/rustup".to_owned(),
            "CARGO_HOME=/root/.cargo".to_owned(),
            "LANG=C.UTF-8".to_owned(),
            "DEBIAN_FRONTEND=noninteractive".to_owned(),
        ];
        // What the caller's environment says about reports stays as it is (CI, backtraces).
        // So does a slowed-guests run (`cargo xtask test --slow-guests`): its guests too.
        for key in [
            "CI",
            "RUST_BACKTRACE",
            "RUST_LIB_BACKTRACE",
            "TERM",
            crate::vm::GUEST_CPUS_ENV,
        ] {
            if let Some(v) = std::env::var_os(key) {
                env.push(format!("{key}={}", v.to_string_lossy()));
            }
        }
        sh.cmd("chroot")
            .arg(&self.root)
            .args(["env", "-i", "-C", dir])
            .args(env)
            .args(argv)
    }

    /// Runs `argv` in the root quietly; fails with its output's tail. Returns its stdout.
    fn quiet(&self, argv: &[&str]) -> Result<String> {
        let sh = Shell::new()?;
        let c = self.command(&sh, "/", argv);
        let shown = format!("(in the new machine) {}", argv.join(" "));
        let out = exec::output_with(c, None, STEP_TIMEOUT)?;
        exec::check_output(&shown, &out)?;
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    }

    /// Runs `argv` in the root's `dir`, its output streamed as progress.
    fn streamed(&self, dir: &str, argv: &[&str]) -> Result<String> {
        let sh = Shell::new()?;
        exec::run_streamed(self.command(&sh, dir, argv), "    | ", STEP_TIMEOUT)
    }
}

/// Copies the files git knows of or would add (tracked, and untracked but not ignored) from
/// `from` into `to`, as a clone with this checkout's changes.
fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    let sh = Shell::new()?;
    sh.change_dir(from);
    let list = exec::run_bytes(
        xshell::cmd!(sh, "git ls-files -z --cached --others --exclude-standard"),
        None,
    )?;
    let mut n = 0usize;
    for name in list.split(|b| *b == 0).filter(|n| !n.is_empty()) {
        let rel = Path::new(std::str::from_utf8(name).wrap_err("a file name that is not UTF-8")?);
        let src = from.join(rel);
        let Ok(meta) = src.symlink_metadata() else {
            continue; // deleted in the working tree, still in the index
        };
        let dst = to.join(rel);
        if let Some(parent) = dst.parent() {
            std::fs::create_dir_all(parent)?;
        }
        if meta.file_type().is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&src)?, &dst)?;
        } else {
            std::fs::copy(&src, &dst)
                .wrap_err_with(|| format!("copying {} to {}", src.display(), dst.display()))?;
        }
        n += 1;
    }
    if n < 50 {
        bail!(
            "only {n} files copied from {}: is it the workspace?",
            from.display()
        );
    }
    println!("fresh-root:     {n} files into {}", to.display());
    Ok(())
}
