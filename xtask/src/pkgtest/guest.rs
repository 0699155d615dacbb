//! `xtask pkg-guest …` (hidden): the guest side of the install test. Each subcommand checks one
//! thing about an installed package, prints what it found, and fails with the reason.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use color_eyre::eyre::{Result, WrapErr as _, bail, eyre};
use xshell::{Shell, cmd};

use super::unit;
use crate::dist::PACKAGES;
use crate::exec::{self, Captured};

/// Arguments of `pkg-guest`.
#[derive(Debug, Args)]
pub struct PkgGuestArgs {
    #[command(subcommand)]
    pub what: What,
}

/// One check.
#[derive(Debug, Subcommand)]
pub enum What {
    /// The package is installed with every file it should carry (and, for the server, its
    /// system user and a private token).
    Installed {
        #[arg(long)]
        package: String,
    },
    /// The package is not installed (another package's install must not pull it).
    Absent {
        #[arg(long)]
        package: String,
    },
    /// Start a service as its unit says (ExecStart, User, Group, LimitMEMLOCK, no new
    /// privileges), stop it with SIGTERM once `until` exists, and exit with its status.
    RunUnit {
        #[arg(long)]
        unit: PathBuf,
        #[arg(long)]
        until: PathBuf,
        /// Seconds until it is stopped anyway (the step then fails).
        #[arg(long, default_value_t = 150)]
        timeout: u64,
    },
    /// `dpkg -r` the package and check its files are gone (its conffiles stay); with
    /// `--purge`, then `dpkg -P` and check the conffiles and what the package made are gone.
    Remove {
        #[arg(long)]
        package: String,
        #[arg(long)]
        purge: bool,
    },
}

/// Entry point.
pub fn cmd(args: &PkgGuestArgs) -> Result<()> {
    match &args.what {
        What::Installed { package } => installed(package),
        What::Absent { package } => {
            if is_installed(package)? {
                bail!("{package} is installed, but nothing here asked for it");
            }
            println!("{package}: not installed");
            Ok(())
        }
        What::RunUnit {
            unit,
            until,
            timeout,
        } => run_unit(unit, until, Duration::from_secs(*timeout)),
        What::Remove { package, purge } => remove(package, *purge),
    }
}

fn is_installed(package: &str) -> Result<bool> {
    let sh = Shell::new()?;
    let fmt = "${db:Status-Status}";
    let out = exec::output(cmd!(sh, "dpkg-query -W --showformat={fmt} {package}"))?;
    Ok(out.status.success() && String::from_utf8_lossy(&out.stdout).trim() == "installed")
}

fn installed(package: &str) -> Result<()> {
    if !is_installed(package)? {
        bail!("{package} is not installed");
    }
    let p = PACKAGES
        .iter()
        .find(|p| p.name == package)
        .ok_or_else(|| eyre!("no such package in dist::PACKAGES: {package}"))?;
    let missing: Vec<String> = p
        .expected()
        .into_iter()
        .filter(|f| !Path::new(f).exists())
        .collect();
    if !missing.is_empty() {
        bail!("{package} is installed but lacks {}", missing.join(", "));
    }
    println!("{package}: {} expected files present", p.expected().len());
    if package == "rdma-server" {
        let sh = Shell::new()?;
        let user = exec::run(cmd!(sh, "getent passwd rdma-server"))
            .wrap_err("the package did not create the rdma-server system user")?;
        println!("user: {}", user.trim());
        let token = Path::new("/etc/rdma-server/token");
        check_private(token, &user)?;
    }
    Ok(())
}

/// The token exists, belongs to the service's user, and nobody else may read it.
fn check_private(path: &Path, passwd_line: &str) -> Result<()> {
    use std::os::unix::fs::MetadataExt as _;
    let meta = std::fs::metadata(path)
        .wrap_err_with(|| format!("the package did not create {}", path.display()))?;
    let uid: u32 = passwd_line
        .split(':')
        .nth(2)
        .and_then(|u| u.parse().ok())
        .ok_or_else(|| eyre!("odd passwd line {passwd_line:?}"))?;
    let mode = meta.mode() & 0o7777;
    if meta.uid() != uid || mode & 0o077 != 0 || meta.len() < 16 {
        bail!(
            "{}: uid {} mode {mode:04o}, {} bytes; want uid {uid}, no access for group or others, a real token",
            path.display(),
            meta.uid(),
            meta.len()
        );
    }
    println!("{}: owner rdma-server, mode {mode:04o}", path.display());
    Ok(())
}

fn run_unit(unit_file: &Path, until: &Path, timeout: Duration) -> Result<()> {
    let text = std::fs::read_to_string(unit_file)
        .wrap_err_with(|| format!("reading {}", unit_file.display()))?;
    let s = unit::parse(&text).wrap_err_with(|| format!("in {}", unit_file.display()))?;
    if let Some(limit) = s.limit_memlock {
        let v = limit.unwrap_or(libc::RLIM_INFINITY);
        let rl = libc::rlimit {
            rlim_cur: v,
            rlim_max: v,
        };
        // SAFETY: setrlimit reads one `rlimit` through a pointer to a live local of that type;
        // children inherit the limit, as systemd's LimitMEMLOCK= gives it to the service.
        if unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &raw const rl) } != 0 {
            bail!(
                "setrlimit(RLIMIT_MEMLOCK, {v}): {}",
                std::io::Error::last_os_error()
            );
        }
    }
    let mut argv: Vec<String> = [
        "setpriv",
        &format!("--reuid={}", s.user),
        &format!("--regid={}", s.group),
        "--init-groups",
        "--no-new-privs",
        "--bounding-set=-all",
        "--inh-caps=-all",
        "--",
    ]
    .iter()
    .map(|a| (*a).to_owned())
    .collect();
    argv.extend(s.exec_start.iter().cloned());
    println!("run-unit: {}", argv.join(" "));
    let mut child = Captured::spawn(&argv)?;
    let deadline = Instant::now() + timeout;
    let stopped_by_us = loop {
        if until.exists() {
            child.terminate();
            break true;
        }
        if child.exited()? || Instant::now() >= deadline {
            break false;
        }
        exec::sleep(Duration::from_millis(100))?;
    };
    let f = child.finish(Instant::now() + Duration::from_secs(10))?;
    print!("{}", f.stdout);
    eprint!("{}", f.stderr);
    match (stopped_by_us, f.code) {
        (true, Some(0)) => {
            println!("run-unit: stopped by SIGTERM, exit 0");
            Ok(())
        }
        (true, code) => bail!("the service exited {code:?} on SIGTERM (want 0)"),
        (false, code) if f.timed_out || Instant::now() >= deadline => bail!(
            "{} never appeared within {timeout:?}; the service was killed (exit {code:?})",
            until.display()
        ),
        (false, code) => {
            bail!("the service stopped by itself (exit {code:?}) before it was asked to")
        }
    }
}

fn remove(package: &str, purge: bool) -> Result<()> {
    let sh = Shell::new()?;
    let files: Vec<PathBuf> = exec::run(cmd!(sh, "dpkg-query -L {package}"))?
        .lines()
        .map(PathBuf::from)
        .filter(|p| p.is_file() || p.is_symlink())
        .collect();
    let fmt = "${Conffiles}";
    let conffiles: Vec<PathBuf> =
        exec::run(cmd!(sh, "dpkg-query -W --showformat={fmt} {package}"))?
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .map(PathBuf::from)
            .collect();
    let _env = sh.push_env("DEBIAN_FRONTEND", "noninteractive");
    exec::run(cmd!(sh, "dpkg --remove {package}"))?;
    let left: Vec<String> = files
        .iter()
        .filter(|f| !conffiles.contains(f) && (f.exists() || f.is_symlink()))
        .map(|f| f.display().to_string())
        .collect();
    if !left.is_empty() {
        bail!(
            "after `dpkg -r {package}` these are still there: {}",
            left.join(", ")
        );
    }
    println!(
        "{package}: removed; {} files gone, {} conffile(s) kept until purge",
        files.len() - conffiles.len().min(files.len()),
        conffiles.len()
    );
    if !purge {
        return Ok(());
    }
    exec::run(cmd!(sh, "dpkg --purge {package}"))?;
    let mut left: Vec<String> = conffiles
        .iter()
        .filter(|f| f.exists())
        .map(|f| f.display().to_string())
        .collect();
    // What the package made at install (the token, its directory) goes with the purge too.
    if package == "rdma-server" && Path::new("/etc/rdma-server").exists() {
        left.push("/etc/rdma-server".into());
    }
    if !left.is_empty() {
        bail!(
            "after `dpkg -P {package}` these are still there: {}",
            left.join(", ")
        );
    }
    if is_installed(package)? {
        bail!("{package} is still installed after the purge");
    }
    println!("{package}: purged; conffiles and /etc/{package} gone");
    Ok(())
}
