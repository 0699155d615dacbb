//! One booted guest: its share set up, its QEMU started and watched until it exits or hits
//! its deadline, then what it did.

use super::console::Console;
use super::qemu::{self, Link, Qemu};
use super::{GuestOutcome, GuestSpec};
use crate::backend::Accel;
use crate::exec;
use color_eyre::eyre::{Result, WrapErr, bail};
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What every guest of a run boots with.
pub(super) struct Boot<'a> {
    pub vmlinuz: &'a Path,
    pub initrd: &'a Path,
    pub accel: Accel,
    /// The link's port on 127.0.0.1 (the first guest listens on it).
    pub port: u16,
    /// With exactly two guests: their UDP ports on 127.0.0.1 (first, second) instead.
    pub udp: Option<[u16; 2]>,
    /// With three or more guests: the multicast group's port (one segment for all) instead.
    pub mcast: Option<u16>,
    /// The run directory: one share per guest in it, and the console logs.
    pub run_dir: &'a Path,
    pub sync_dir: &'a Path,
    pub progress: &'a MultiProgress,
    pub style: &'a ProgressStyle,
    pub verbose: bool,
}

/// A QEMU process, killed on drop.
#[derive(Debug)]
pub(super) struct Guest {
    spec: GuestSpec,
    child: Option<Child>,
    started: Instant,
    console: Console,
    reader: Option<JoinHandle<()>>,
    share: PathBuf,
    bar: ProgressBar,
    /// When it exited (time since start), and whether we killed it at its deadline.
    exited: Option<(Duration, bool)>,
}

impl Drop for Guest {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Guest {
    /// Writes the guest's files into its share and starts its QEMU (the first guest listens
    /// on the link, the others connect).
    pub fn start(spec: &GuestSpec, first: bool, boot: &Boot<'_>) -> Result<Self> {
        let share = boot.run_dir.join(&spec.name);
        std::fs::create_dir_all(&share)?;
        for (name, bytes) in &spec.files {
            std::fs::write(share.join(name), bytes)?;
        }
        let argv = qemu::argv(&Qemu {
            name: &spec.name,
            accel: boot.accel,
            mem_mb: spec.mem_mb,
            vmlinuz: boot.vmlinuz,
            initrd: boot.initrd,
            cmdline: qemu::kernel_cmdline(&spec.name, &spec.argv, boot.verbose),
            link: match (boot.mcast, boot.udp, first) {
                (Some(port), _, _) => Link::Mcast(port),
                (None, Some([a, b]), true) => Link::Udp { local: a, peer: b },
                (None, Some([a, b]), false) => Link::Udp { local: b, peer: a },
                (None, None, true) => Link::Listen(boot.port),
                (None, None, false) => Link::Connect(boot.port),
            },
            mac: &spec.mac,
            share: &share,
            sync: boot.sync_dir,
        });
        let bar = boot.progress.add(
            ProgressBar::new_spinner()
                .with_style(boot.style.clone())
                .with_message(format!("{}: booting", spec.name)),
        );
        bar.enable_steady_tick(Duration::from_millis(100));
        let (mut child, _) = qemu::spawn(&argv)?;
        let console = Console::default();
        let log = std::fs::File::create(boot.run_dir.join(format!("{}.console.log", spec.name)))?;
        let reader = child.stdout.take().map(|out| {
            console.follow_serial(
                out,
                log,
                boot.progress.clone(),
                spec.name.clone(),
                boot.verbose,
            )
        });
        if let Some(err) = child.stderr.take() {
            console.follow_stderr(err, boot.progress.clone(), spec.name.clone());
        }
        Ok(Self {
            spec: spec.clone(),
            child: Some(child),
            started: Instant::now(),
            console,
            reader,
            share,
            bar,
            exited: None,
        })
    }

    /// Checks on the guest once: reaps it when QEMU exited, kills it past its deadline, and
    /// updates its spinner. Returns whether it is done.
    pub fn poll(&mut self) -> Result<bool> {
        if self.exited.is_some() {
            return Ok(true);
        }
        let Some(child) = self.child.as_mut() else {
            return Ok(true);
        };
        let name = &self.spec.name;
        let timed_out = self.started.elapsed() >= self.spec.timeout;
        let done = child
            .try_wait()
            .wrap_err_with(|| format!("waiting for QEMU of {name}"))?
            .is_some();
        if !done && !timed_out {
            if let Some(at) = self.console.running_at() {
                self.bar.set_message(format!(
                    "{name}: running (booted in {:.1} s)",
                    (at - self.started).as_secs_f64()
                ));
            }
            return Ok(false);
        }
        let killed = timed_out && !done;
        if killed {
            let _ = child.kill();
        }
        let _ = child.wait();
        self.child = None;
        let elapsed = self.started.elapsed();
        self.exited = Some((elapsed, killed));
        let msg = match (killed, read_exit_code(&self.share)) {
            (true, _) => format!("{name}: KILLED at its {:?} deadline", self.spec.timeout),
            (false, Some(c)) => {
                format!("{name}: done in {:.1} s (exit {c})", elapsed.as_secs_f64())
            }
            (false, None) => format!(
                "{name}: QEMU exited after {:.1} s without an exit code",
                elapsed.as_secs_f64()
            ),
        };
        if self.bar.is_hidden() {
            eprintln!("{msg}");
        }
        self.bar.finish_with_message(msg);
        Ok(true)
    }

    /// What it did (after [`poll`](Self::poll) said it is done).
    pub fn outcome(&mut self) -> GuestOutcome {
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        let (elapsed, timed_out) = self.exited.unwrap_or((self.started.elapsed(), true));
        GuestOutcome {
            name: self.spec.name.clone(),
            exit_code: read_exit_code(&self.share),
            timed_out,
            console_tail: self.console.tail(),
            share_dir: self.share.clone(),
            boot: self.console.running_at().map(|t| t - self.started),
            elapsed,
        }
    }

    /// Waits until QEMU listens on `port` (read from /proc/net/tcp: a probe connection would
    /// be taken as the peer by `-netdev socket,listen`).
    pub fn wait_listening(&mut self, port: u16, deadline: Instant) -> Result<()> {
        loop {
            let tcp = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
            if is_listening(&tcp, port) {
                return Ok(());
            }
            if let Some(c) = self.child.as_mut()
                && let Some(st) = c.try_wait()?
            {
                bail!(
                    "QEMU of {} exited ({st}) before listening on 127.0.0.1:{port}:\n{}",
                    self.spec.name,
                    self.console.tail()
                );
            }
            if Instant::now() >= deadline {
                bail!(
                    "QEMU of {} did not listen on 127.0.0.1:{port} in time",
                    self.spec.name
                );
            }
            exec::sleep(Duration::from_millis(20))?;
        }
    }
}

/// The exit code the guest's /init wrote into its share, if it got that far.
fn read_exit_code(share: &Path) -> Option<i32> {
    std::fs::read_to_string(share.join("exit_code"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Two different free UDP ports on 127.0.0.1 (bound together, released; QEMU binds them
/// right after).
pub(super) fn free_udp_ports() -> Result<[u16; 2]> {
    let bind = || {
        std::net::UdpSocket::bind("127.0.0.1:0")
            .wrap_err("binding UDP 127.0.0.1:0 to find a free port")
    };
    let (a, b) = (bind()?, bind()?);
    Ok([a.local_addr()?.port(), b.local_addr()?.port()])
}

/// A free TCP port on 127.0.0.1 (bound and released; QEMU binds it right after).
pub(super) fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")
        .wrap_err("binding 127.0.0.1:0 to find a free port")?;
    Ok(l.local_addr()?.port())
}

/// True when /proc/net/tcp has a LISTEN socket on 127.0.0.1:`port`.
pub(super) fn is_listening(proc_net_tcp: &str, port: u16) -> bool {
    let want = format!("0100007F:{port:04X}");
    proc_net_tcp.lines().skip(1).any(|l| {
        let mut f = l.split_whitespace();
        let (_, local, _, state) = (f.next(), f.next(), f.next(), f.next());
        local == Some(want.as_str()) && state == Some("0A")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_net_tcp_listen() {
        let tcp = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0000000000000000 100 0 0 10 0\n\
   1: 0100007F:1F91 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 2 1 0000000000000000 100 0 0 10 0\n";
        assert!(is_listening(tcp, 8080));
        assert!(!is_listening(tcp, 8081));
        assert!(!is_listening(tcp, 80));
    }

    #[test]
    fn the_exit_code_comes_from_the_share() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read_exit_code(dir.path()), None);
        std::fs::write(dir.path().join("exit_code"), "3\n").unwrap();
        assert_eq!(read_exit_code(dir.path()), Some(3));
        std::fs::write(dir.path().join("exit_code"), "x").unwrap();
        assert_eq!(read_exit_code(dir.path()), None);
    }
}
