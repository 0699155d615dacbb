//! `cargo xtask deps --minbase-check DIR` (opt-in, root, several minutes): proves on a minimal
//! Debian what the lists promise. It debootstraps Debian 12 `--variant=minbase` into DIR, adds
//! what a new user brings (gcc, git, python3, ca-certificates; this host's Rust toolchain is
//! bind-mounted), then, chrooted there, runs `cargo xtask deps`, `cargo xtask deps --check`
//! (every package installed and every program of [`super::tools::TOOLS`] on PATH) and
//! `cargo build --workspace`; with `--e2e`, also the seed scenario in the guests, whose root is
//! then that minimal system (so `ip` and `rdma` must come from it). Wrap it in
//! `flock /tmp/rdma-guests.lock` when using `--e2e`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use color_eyre::eyre::{Result, WrapErr as _, bail};
use xshell::{Shell, cmd};

use crate::exec;

/// The suite the project's machines run.
const SUITE: &str = "bookworm";
const MIRROR: &str = "http://deb.debian.org/debian";

/// A mount that is undone when dropped.
#[derive(Debug)]
struct Mount {
    target: PathBuf,
}

impl Mount {
    fn bind(source: &Path, target: &Path, read_only: bool) -> Result<Self> {
        std::fs::create_dir_all(target)?;
        let sh = Shell::new()?;
        exec::run(cmd!(sh, "mount --rbind {source} {target}"))?;
        let m = Self {
            target: target.to_owned(),
        };
        // Unmounting the copy must not propagate back to the host's own mounts.
        exec::run(cmd!(sh, "mount --make-rslave {target}"))?;
        if read_only {
            exec::run(cmd!(sh, "mount -o remount,bind,ro {target}"))?;
        }
        Ok(m)
    }

    fn proc(target: &Path) -> Result<Self> {
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

/// Runs the check; see the module docs.
pub fn check(root: &Path, e2e: bool) -> Result<()> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        bail!("--minbase-check debootstraps and chroots: run it as root");
    }
    let t0 = Instant::now();
    if exec::which("debootstrap").is_none() {
        super::apt::install(&["debootstrap".to_owned()], false)?;
    }
    let sh = Shell::new()?;
    if root.exists() {
        bail!(
            "{} exists: give a new directory (the check starts from a fresh root)",
            root.display()
        );
    }
    step("debootstrap --variant=minbase", || {
        exec::output_with(
            cmd!(sh, "debootstrap --variant=minbase {SUITE} {root} {MIRROR}"),
            None,
            exec::INSTALL_TIMEOUT,
        )
        .and_then(|out| exec::check_output("debootstrap", &out))
    })?;
    let home = PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/root".into()));
    let workspace = exec::workspace_root();
    let in_root = |p: &str| root.join(p.trim_start_matches('/'));
    std::fs::copy("/etc/resolv.conf", in_root("/etc/resolv.conf"))
        .wrap_err("copying /etc/resolv.conf into the root")?;
    // Unmounted when dropped (none is nested in another, so the order does not matter).
    let _mounts = [
        Mount::proc(&in_root("/proc"))?,
        Mount::bind(Path::new("/sys"), &in_root("/sys"), false)?,
        Mount::bind(Path::new("/dev"), &in_root("/dev"), false)?,
        Mount::bind(&home.join(".rustup"), &in_root("/opt/rustup"), true)?,
        Mount::bind(&home.join(".cargo/bin"), &in_root("/opt/cargo-bin"), true)?,
        Mount::bind(
            &home.join(".cargo/registry"),
            &in_root("/root/.cargo/registry"),
            false,
        )?,
        Mount::bind(&workspace, &in_root("/work"), false)?,
    ];
    let chrooted = |what: &str, args: &[&str], timeout: Duration| -> Result<()> {
        let mut argv: Vec<String> = vec![
            "chroot".into(),
            root.display().to_string(),
            "env".into(),
            "-C".into(),
            "/work".into(),
            "PATH=/opt/cargo-bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
                .into(),
            "HOME=/root".into(),
            "RUSTUP_HOME=/opt/rustup".into(),
            "CARGO_HOME=/root/.cargo".into(),
            "CARGO_TARGET_DIR=/root/target".into(),
            "DEBIAN_FRONTEND=noninteractive".into(),
        ];
        argv.extend(args.iter().map(|a| (*a).to_owned()));
        step(what, || {
            let f = exec::Captured::spawn(&argv)?.finish(Instant::now() + timeout)?;
            if f.code == Some(0) {
                // The last words of a passing step (e2e's verdict, deps' summary) as evidence.
                for line in f
                    .stdout
                    .lines()
                    .rev()
                    .take(2)
                    .collect::<Vec<_>>()
                    .iter()
                    .rev()
                {
                    println!("minbase:     {line}");
                }
                return Ok(());
            }
            bail!(
                "`{}` failed ({:?}{}):\n{}\n{}",
                args.join(" "),
                f.code,
                if f.timed_out { ", timed out" } else { "" },
                crate::text::tail(f.stdout.trim(), 4000),
                crate::text::tail(f.stderr.trim(), 4000)
            )
        })
    };
    let long = Duration::from_secs(3600);
    // As a user would: `apt install gcc` brings libc6-dev (a recommend), which cargo needs to
    // link xtask before `cargo xtask deps` can install anything.
    chrooted(
        "what a new user brings: gcc git python3 ca-certificates",
        &[
            "apt-get",
            "install",
            "-y",
            "-q",
            "gcc",
            "git",
            "python3",
            "ca-certificates",
        ],
        long,
    )?;
    chrooted("cargo xtask deps", &["cargo", "xtask", "deps"], long)?;
    chrooted(
        "cargo xtask deps --check (packages and programs)",
        &["cargo", "xtask", "deps", "--check"],
        long,
    )?;
    chrooted(
        "cargo build --workspace",
        &["cargo", "build", "--workspace"],
        long,
    )?;
    if e2e {
        chrooted(
            "cargo xtask e2e --scenario seed (guests whose root is the minimal system)",
            &["cargo", "xtask", "e2e", "--scenario", "seed"],
            long,
        )?;
    }
    println!(
        "deps: minbase check passed in {:.0} s ({})",
        t0.elapsed().as_secs_f64(),
        root.display()
    );
    Ok(())
}

fn step(what: &str, f: impl FnOnce() -> Result<()>) -> Result<()> {
    let t = Instant::now();
    println!("minbase: {what} ...");
    f().wrap_err_with(|| format!("minbase: {what}"))?;
    println!("minbase: {what}: ok ({:.0} s)", t.elapsed().as_secs_f64());
    Ok(())
}
