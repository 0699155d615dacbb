//! `xtask pkg-guest …` (hidden): the guest side of the install test. Each subcommand checks one
//! thing about an installed package, prints what it found, and fails with the reason.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use color_eyre::eyre::{Result, WrapErr as _, bail, eyre};
use xshell::{Shell, cmd};

use super::unit;
use crate::dist::PACKAGES;
use crate::exec;

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
    /// (Under systemd.) `systemctl start` the installed unit, its sandbox as packaged; check
    /// its main process runs as the unit's `User` with its `LimitMEMLOCK`, no new privileges,
    /// a seccomp filter and no capability; keep it active until `until` exists (a restart or a
    /// stop before fails), then `systemctl stop` it (it must end `success`, exit 0) and print
    /// its journal.
    Service {
        /// The unit's name (`rdma-server.service`).
        #[arg(long)]
        unit: String,
        #[arg(long)]
        until: PathBuf,
        /// Seconds until the wait for `until` gives up (the step then fails).
        #[arg(long)]
        timeout: u64,
    },
    /// (Under systemd.) `systemd-analyze security UNIT` of the loaded unit, as systemd applies
    /// it: its overall exposure must not exceed `max` (what `cargo xtask dist` rated).
    Security {
        #[arg(long)]
        unit: String,
        #[arg(long)]
        max: f64,
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
        What::Service {
            unit,
            until,
            timeout,
        } => service(unit, until, Duration::from_secs(*timeout)),
        What::Security { unit, max } => security(unit, *max),
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

/// Where the package installs its units.
const UNIT_DIR: &str = "/usr/lib/systemd/system";

/// `systemctl ARGS`' output, within `by`; fails naming the command when it cannot run in time.
fn systemctl(args: &[&str], by: Instant) -> Result<std::process::Output> {
    let sh = Shell::new()?;
    exec::output_with(
        cmd!(sh, "systemctl {args...}"),
        None,
        by.saturating_duration_since(Instant::now()),
    )
}

/// `systemctl show UNIT -p NAME`'s value.
fn show(unit: &str, name: &str, by: Instant) -> Result<String> {
    let p = format!("--property={name}");
    let out = systemctl(&["show", unit, &p, "--value"], by)?;
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// The unit's journal (`journalctl -u UNIT -o cat`), or why there is none.
fn journal(unit: &str, by: Instant) -> String {
    let sh = match Shell::new() {
        Ok(sh) => sh,
        Err(e) => return format!("(no journal: {e})"),
    };
    let wait = by.saturating_duration_since(Instant::now());
    match exec::output_with(
        cmd!(sh, "journalctl --no-pager -o cat -u {unit}"),
        None,
        wait,
    ) {
        Ok(o) => String::from_utf8_lossy(&o.stdout).into_owned(),
        Err(e) => format!("(no journal: {e:#})"),
    }
}

fn service(unit: &str, until: &Path, timeout: Duration) -> Result<()> {
    // The wait for `until` has the step's deadline; once it is over, the stop and the report
    // have half the grace the agent gives the step after it (crate::deadline::GRACE).
    let deadline = Instant::now() + timeout;
    let wrap_up = || Instant::now() + crate::deadline::GRACE / 2;
    let start = systemctl(&["start", unit], deadline)?;
    if !start.status.success() {
        let by = wrap_up();
        bail!(
            "systemctl start {unit} failed: {}\nits journal:\n{}",
            String::from_utf8_lossy(&start.stderr).trim(),
            journal(unit, by)
        );
    }
    println!(
        "service: systemctl start {unit}: {}",
        show(unit, "ActiveState", deadline)?
    );
    let sandbox = main_process(unit, deadline);
    let mut state = String::new();
    let stopped_by_us = loop {
        if until.exists() {
            break true;
        }
        state = show(unit, "ActiveState", deadline)?;
        if state != "active" || Instant::now() >= deadline {
            break false;
        }
        exec::sleep(Duration::from_millis(200))?;
    };
    let by = wrap_up();
    let restarts = show(unit, "NRestarts", by)?;
    if stopped_by_us {
        let stop = systemctl(&["stop", unit], by)?;
        if !stop.status.success() {
            bail!(
                "systemctl stop {unit} failed: {}",
                String::from_utf8_lossy(&stop.stderr).trim()
            );
        }
    }
    let result = show(unit, "Result", by)?;
    let code = show(unit, "ExecMainCode", by)?;
    let status = show(unit, "ExecMainStatus", by)?;
    // Its journal is what the service printed (the verdicts), as the service's stdout.
    print!("{}", journal(unit, by));
    println!(
        "service: Result={result} ExecMainCode={code} ExecMainStatus={status} NRestarts={restarts}"
    );
    sandbox?;
    if !stopped_by_us {
        if Instant::now() >= deadline {
            bail!(
                "{} never appeared within {timeout:?}; {unit} is left {state}",
                until.display()
            );
        }
        bail!(
            "{unit} went {state} before it was asked to stop (Result={result}, exit status {status})"
        );
    }
    // ExecMainStatus is the exit status, or the signal that killed it (15 for SIGTERM
    // unhandled, which systemd still counts a success).
    if result != "success" || status != "0" || restarts != "0" {
        bail!(
            "{unit} did not run and stop cleanly: Result={result} ExecMainCode={code} \
             ExecMainStatus={status} NRestarts={restarts} (want success, exited 0, no restart)"
        );
    }
    println!("service: {unit} ran until told to stop, exit 0 on SIGTERM");
    Ok(())
}

/// The service's main process carries the unit's sandbox: its `User`, its `LimitMEMLOCK`, no
/// new privileges, a seccomp filter, no capability.
fn main_process(unit: &str, by: Instant) -> Result<()> {
    let file = Path::new(UNIT_DIR).join(unit);
    let text =
        std::fs::read_to_string(&file).wrap_err_with(|| format!("reading {}", file.display()))?;
    let want = unit::parse(&text).wrap_err_with(|| format!("in {}", file.display()))?;
    let pid = show(unit, "MainPID", by)?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .wrap_err_with(|| format!("reading /proc/{pid}/status (MainPID of {unit})"))?;
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits"))
        .wrap_err_with(|| format!("reading /proc/{pid}/limits"))?;
    let sh = Shell::new()?;
    let user = &want.user;
    let passwd = exec::run(cmd!(sh, "getent passwd {user}"))?;
    let problems = unit::sandbox_problems(&want, passwd.trim(), &status, &limits);
    if !problems.is_empty() {
        bail!("{unit}'s main process {pid}: {}", problems.join("; "));
    }
    println!(
        "service: main process {pid} runs as {user}, no new privileges, seccomp, no capability, LimitMEMLOCK as the unit says"
    );
    Ok(())
}

fn security(unit: &str, max: f64) -> Result<()> {
    let sh = Shell::new()?;
    let out = exec::run(cmd!(sh, "systemd-analyze security --no-pager {unit}"))?;
    let exposure = crate::dist::parse_exposure(&out)
        .ok_or_else(|| eyre!("no overall exposure level in:\n{out}"))?;
    print!("{out}");
    if exposure > max {
        bail!(
            "{unit} as systemd loaded it rates {exposure:.1} in `systemd-analyze security`, above the {max:.1} `cargo xtask dist` rated the unit file at"
        );
    }
    println!("security: {unit} exposure {exposure:.1} (dist rated the file {max:.1})");
    Ok(())
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
