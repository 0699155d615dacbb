//! A run directory (`target/xtask/run-*`: plans, results, shares, console logs), removed when
//! the run ends, and the stale ones left by killed runs.

use color_eyre::eyre::{Result, WrapErr};
use std::path::{Path, PathBuf};

/// A run's directory.
#[derive(Debug)]
pub(super) struct RunDir {
    pub path: PathBuf,
    keep: bool,
}

/// Marks a run directory as in use by a process (its pid inside); removed when the run ends.
const IN_PROGRESS: &str = ".in-progress";

impl RunDir {
    /// A fresh `run-*` directory under `base` (after removing the stale ones); removed on
    /// drop unless `keep`.
    pub fn create(base: &Path, keep: bool) -> Result<Self> {
        remove_stale_runs(base);
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let path = base.join(format!("run-{stamp}-{}", std::process::id()));
        std::fs::create_dir_all(&path).wrap_err_with(|| format!("creating {}", path.display()))?;
        std::fs::write(path.join(IN_PROGRESS), std::process::id().to_string())?;
        Ok(Self { path, keep })
    }
}

/// Removes run directories left by xtask processes that died without cleaning up
/// (SIGKILL): they still have the in-progress marker and their pid is gone.
fn remove_stale_runs(base: &Path) {
    let Ok(it) = std::fs::read_dir(base) else {
        return;
    };
    for e in it.flatten() {
        let p = e.path();
        if !e.file_name().to_string_lossy().starts_with("run-") {
            continue;
        }
        let Ok(pid) = std::fs::read_to_string(p.join(IN_PROGRESS)) else {
            continue;
        };
        let alive = pid
            .trim()
            .parse::<u32>()
            .is_ok_and(|pid| Path::new(&format!("/proc/{pid}")).exists());
        if !alive {
            let _ = std::fs::remove_dir_all(&p);
        }
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(self.path.join(IN_PROGRESS));
        if self.keep {
            eprintln!("vm: kept run directory {}", self.path.display());
        } else if let Err(e) = std::fs::remove_dir_all(&self.path) {
            eprintln!("warning: could not remove {}: {e}", self.path.display());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_dir_goes_away_and_stale_ones_are_swept() {
        let base = tempfile::tempdir().unwrap();
        let dir = RunDir::create(base.path(), false).unwrap();
        let path = dir.path.clone();
        assert!(path.join(IN_PROGRESS).exists());
        drop(dir);
        assert!(!path.exists());
        // A run whose process is gone (no such pid) is stale; a live one is not.
        let stale = base.path().join("run-1-1");
        std::fs::create_dir_all(&stale).unwrap();
        std::fs::write(stale.join(IN_PROGRESS), "4294967295").unwrap();
        let live = base.path().join("run-2-2");
        std::fs::create_dir_all(&live).unwrap();
        std::fs::write(live.join(IN_PROGRESS), std::process::id().to_string()).unwrap();
        let kept = RunDir::create(base.path(), true).unwrap();
        assert!(!stale.exists() && live.exists());
        let kept_path = kept.path.clone();
        drop(kept);
        assert!(kept_path.exists() && !kept_path.join(IN_PROGRESS).exists());
    }
}
