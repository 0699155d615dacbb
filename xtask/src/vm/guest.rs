//! One booted guest: its share set up, its QEMU started and watched until it exits or hits
//! its deadline, then what it did.

use super::console::Console;
use super::qemu::{self, Link, Qemu};
use super::{GuestOutcome, GuestSpec};
use crate::backend::Accel;
use color_eyre::eyre::{Result, WrapErr};
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
    /// The run directory: one share per guest in it, and the console logs.
    pub run_dir: &'a Path,
    pub sync_dir: &'a Path,
    /// The run's hubs' socket directories (links of three or more guests).
    pub hubs: &'a [PathBuf],
    /// vCPUs of each guest.
    pub cpus: usize,
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
    /// When it is to be stopped, and why: a guest of the run failed ([`Guest::stop_by`]).
    stop: Option<(Instant, String)>,
    /// Why we killed it before its deadline, if we did.
    stopped: Option<String>,
    /// Why its run failed, when QEMU exited by itself other than with exit code 0, until
    /// [`Guest::take_ended_badly`] takes it.
    ended_badly: Option<String>,
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
    /// Writes the guest's files into its share and starts its QEMU, NIC `k` on `links[k]`.
    pub fn start(spec: &GuestSpec, links: &[Link], boot: &Boot<'_>) -> Result<Self> {
        let share = boot.run_dir.join(&spec.name);
        std::fs::create_dir_all(&share)?;
        for (name, bytes) in &spec.files {
            std::fs::write(share.join(name), bytes)?;
        }
        let argv = qemu::argv(&Qemu {
            name: &spec.name,
            accel: boot.accel,
            cpus: boot.cpus,
            mem_mb: spec.mem_mb,
            vmlinuz: boot.vmlinuz,
            initrd: boot.initrd,
            cmdline: qemu::kernel_cmdline(&spec.name, &spec.argv, boot.verbose, spec.init),
            nics: links
                .iter()
                .copied()
                .zip(spec.macs.iter().map(String::as_str))
                .collect(),
            share: &share,
            sync: boot.sync_dir,
            hubs: boot.hubs,
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
            stop: None,
            stopped: None,
            ended_badly: None,
        })
    }

    /// A guest of the run failed (`why`): unless it has ended by `at`, this one is killed then,
    /// before its own deadline. Its agent stops by itself well before that.
    pub fn stop_by(&mut self, at: Instant, why: &str) {
        if self.exited.is_none() && self.stop.is_none() {
            self.stop = Some((at, why.to_owned()));
        }
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
        let stop_due = self
            .stop
            .as_ref()
            .filter(|(at, _)| Instant::now() >= *at)
            .map(|(_, why)| why.clone());
        let timed_out = self.started.elapsed() >= self.spec.timeout || stop_due.is_some();
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
            self.stopped = stop_due;
        }
        let _ = child.wait();
        self.child = None;
        let elapsed = self.started.elapsed();
        self.exited = Some((elapsed, killed));
        let code = read_exit_code(&self.share);
        self.ended_badly = ended_badly(name, killed, code, elapsed);
        let msg = match (killed, code) {
            (true, _) if self.stopped.is_some() => format!(
                "{name}: STOPPED after {:.1} s: {}",
                elapsed.as_secs_f64(),
                self.stopped.as_deref().unwrap_or_default()
            ),
            (true, _) => format!(
                "{name}: KILLED at its {:.0} s deadline (boot + its plan's worst case)",
                self.spec.timeout.as_secs_f64()
            ),
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

    /// The guest's name.
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// Why its run failed, once, after [`poll`](Self::poll) found that QEMU exited by itself
    /// other than with exit code 0.
    pub fn take_ended_badly(&mut self) -> Option<String> {
        self.ended_badly.take()
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
            deadline: self.spec.timeout,
            console_tail: self.console.tail(),
            share_dir: self.share.clone(),
            boot: self.console.running_at().map(|t| t - self.started),
            elapsed,
            stopped: self.stopped.clone(),
        }
    }
}

/// Why a guest's run failed when QEMU exited by itself (not `killed`) other than with /init's
/// exit `code` 0: what its agent, had it run to its end, would have said in the sync dir. A
/// guest whose command could not start, or whose kernel died, says nothing there itself.
fn ended_badly(name: &str, killed: bool, code: Option<i32>, elapsed: Duration) -> Option<String> {
    let s = elapsed.as_secs_f64();
    match (killed, code) {
        (true, _) | (false, Some(0)) => None,
        (false, Some(c)) => Some(format!(
            "guest {name} exited {c} after {s:.1} s (its console log has why)"
        )),
        (false, None) => Some(format!(
            "guest {name}: QEMU exited after {s:.1} s without an exit code (its console log has why)"
        )),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A guest that ended by itself with an exit code other than 0, or with none, failed
    /// (named, with its code); one that exited 0, or that we killed (its stop already has a
    /// reason, or its deadline is the failure), is no new failure.
    #[test]
    fn a_guest_that_ends_by_itself_other_than_with_0_has_failed() {
        let t = Duration::from_millis(6_500);
        assert_eq!(ended_badly("A", false, Some(0), t), None);
        assert_eq!(ended_badly("A", true, Some(3), t), None);
        assert_eq!(ended_badly("A", true, None, t), None);
        let code = ended_badly("A", false, Some(127), t).unwrap();
        assert!(code.starts_with("guest A exited 127 after 6.5 s"), "{code}");
        let none = ended_badly("B", false, None, t).unwrap();
        assert!(
            none.contains("guest B: QEMU exited after 6.5 s without an exit code"),
            "{none}"
        );
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
