//! A shared Ethernet segment for three or more guests: a `vde_switch` in hub mode (`-x`), whose
//! only address is a unix socket directory in the run's directory. No host IP address at all,
//! so no multicast group: every frame stays on this machine, between our QEMUs.
//!
//! The switch runs in the foreground with its stdin a pipe we hold: it exits by itself at EOF,
//! so dropping the [`Hub`] (or xtask dying) takes it down, and it is also killed by
//! PR_SET_PDEATHSIG like the QEMUs.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use color_eyre::eyre::{Result, WrapErr, bail};
use xshell::{Shell, cmd};

use crate::exec;

/// How long `vde_switch` may take to create its control socket (measured: a few ms).
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// The hub's scheduling priority (`nice`): ahead of the QEMUs, whose frames it forwards.
const HUB_NICE: libc::c_int = -10;

/// A running hub.
#[derive(Debug)]
pub struct Hub {
    child: Child,
    shown: String,
}

impl Hub {
    /// Starts a hub whose socket directory is `sock` (which must not exist yet; QEMU's
    /// `-netdev vde,sock=` takes it); waits until it accepts connections.
    pub fn start(sock: &Path) -> Result<Self> {
        let sh = Shell::new()?;
        let log = sock.with_extension("log");
        let c = cmd!(sh, "vde_switch --hub --sock {sock}");
        let shown = c.to_string();
        let mut command = Command::from(c);
        let stderr =
            std::fs::File::create(&log).wrap_err_with(|| format!("creating {}", log.display()))?;
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(stderr)
            .process_group(0);
        // SAFETY: the hook runs in the forked child before exec and only calls prctl and
        // setpriority, which are async-signal-safe system calls taking plain integers.
        unsafe {
            command.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // Every frame between the guests passes through the hub: ahead of the QEMUs
                // (which take every core under TCG) it forwards at once instead of waiting
                // for a time slice, as the kernel's loopback did. Best effort: unprivileged,
                // it keeps the default priority.
                let _ = libc::setpriority(libc::PRIO_PROCESS, 0, HUB_NICE);
                Ok(())
            })
        };
        let child = command.spawn().wrap_err_with(|| {
            format!("starting `{shown}` (package vde2: run `cargo xtask deps`)")
        })?;
        let mut hub = Self { child, shown };
        let ctl = sock.join("ctl");
        let deadline = Instant::now() + START_TIMEOUT;
        while !ctl.exists() {
            let status = hub.child.try_wait()?;
            if status.is_some() || Instant::now() >= deadline {
                let why = status.map_or_else(
                    || format!("no {} within {START_TIMEOUT:?}", ctl.display()),
                    |s| format!("it exited ({s})"),
                );
                let err = std::fs::read_to_string(&log).unwrap_or_default();
                bail!(
                    "`{}` did not start: {why}; stderr: {}",
                    hub.shown,
                    err.trim()
                );
            }
            exec::sleep(Duration::from_millis(10))?;
        }
        Ok(hub)
    }
}

impl Drop for Hub {
    fn drop(&mut self) {
        // EOF on its stdin makes it clean up and exit; kill it if it does not at once.
        drop(self.child.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_)) | Err(_)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hub_listens_on_its_socket_directory_and_goes_away_when_dropped() {
        assert!(
            exec::which("vde_switch").is_some(),
            "vde_switch is not installed: run `cargo xtask deps` (cargo xtask test does)"
        );
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("hub0");
        let hub = Hub::start(&sock).unwrap();
        assert!(sock.join("ctl").exists());
        let pid = hub.child.id();
        drop(hub);
        assert!(
            !Path::new(&format!("/proc/{pid}/status")).exists()
                || std::fs::read_to_string(format!("/proc/{pid}/status"))
                    .unwrap()
                    .contains("zombie"),
            "vde_switch {pid} outlived its Hub"
        );
        // A socket path that is a file: the switch cannot make its directory, and says so.
        let file = dir.path().join("not-a-dir");
        std::fs::write(&file, b"").unwrap();
        let e = Hub::start(&file).unwrap_err();
        assert!(format!("{e:#}").contains("vde_switch"), "{e:#}");
    }
}
