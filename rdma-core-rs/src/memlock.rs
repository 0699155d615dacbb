//! The locked-memory limit (`RLIMIT_MEMLOCK`) that memory registration counts against.
//!
//! Registering memory pins its pages, and the kernel counts pinned pages against the process's
//! `RLIMIT_MEMLOCK` unless it holds `CAP_IPC_LOCK`. When the limit is too low, `ibv_reg_mr`
//! fails with a bare ENOMEM. [`MemlockBudget::check`] is asked first, so that the error says
//! how much is needed, how much is allowed, and how to raise it.
//!
//! ```
//! use rdma_core_rs::memlock::MemlockBudget;
//!
//! // 64 KiB allowed, 8 KiB already pinned, no CAP_IPC_LOCK.
//! let budget = MemlockBudget { limit: Some(64 << 10), pinned: 8 << 10, exempt: false };
//! assert!(budget.check(16 << 10).is_ok());
//! let err = budget.check(1 << 20).unwrap_err();
//! assert!(err.to_string().contains("ulimit -l"), "{err}");
//! // Root with CAP_IPC_LOCK, or an unlimited limit, always fits.
//! assert!(MemlockBudget { limit: None, pinned: 0, exempt: false }.check(1 << 40).is_ok());
//! ```

use crate::{Error, Result};

/// Page size the kernel pins in (registration rounds to whole pages).
const PAGE: u64 = 4096;

/// How much memory this process may still pin.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemlockBudget {
    /// The soft `RLIMIT_MEMLOCK` in bytes; `None` when unlimited.
    pub limit: Option<u64>,
    /// Bytes already pinned by this process (`VmPin` in `/proc/self/status`).
    pub pinned: u64,
    /// The process holds `CAP_IPC_LOCK`, so the limit does not apply.
    pub exempt: bool,
}

impl MemlockBudget {
    /// This process's budget now.
    #[must_use]
    pub fn current() -> Self {
        let mut rl = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes one `rlimit` through a pointer to a live local of that type.
        let ok = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &raw mut rl) } == 0;
        let limit = if !ok || rl.rlim_cur == libc::RLIM_INFINITY {
            None
        } else {
            Some(rl.rlim_cur)
        };
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        Self {
            limit,
            pinned: pinned_bytes(&status).unwrap_or(0),
            exempt: has_cap_ipc_lock(&status),
        }
    }

    /// Whether `bytes` more (rounded up to whole pages, plus one for an unaligned start) can
    /// be pinned.
    ///
    /// # Errors
    /// [`Error::MemlockLimit`], saying what is needed and how to raise the limit.
    pub fn check(&self, bytes: u64) -> Result<()> {
        let Some(limit) = self.limit else {
            return Ok(());
        };
        if self.exempt {
            return Ok(());
        }
        let need = bytes.div_ceil(PAGE).saturating_add(1).saturating_mul(PAGE);
        if self.pinned.saturating_add(need) <= limit {
            return Ok(());
        }
        Err(Error::MemlockLimit {
            need,
            pinned: self.pinned,
            limit,
        })
    }
}

/// [`MemlockBudget::current`]`.check(bytes)`: can this process register `bytes` more?
///
/// # Errors
/// [`Error::MemlockLimit`] with advice when the locked-memory limit is too low.
pub fn check(bytes: u64) -> Result<()> {
    MemlockBudget::current().check(bytes)
}

/// `VmPin` of `/proc/self/status`, in bytes.
#[must_use]
pub fn pinned_bytes(status: &str) -> Option<u64> {
    status.lines().find_map(|l| {
        let kb = l.strip_prefix("VmPin:")?.trim().strip_suffix("kB")?.trim();
        kb.parse::<u64>().ok().map(|k| k * 1024)
    })
}

/// Whether `CapEff` of `/proc/self/status` includes `CAP_IPC_LOCK` (capability 14).
#[must_use]
pub fn has_cap_ipc_lock(status: &str) -> bool {
    const CAP_IPC_LOCK: u32 = 14;
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << CAP_IPC_LOCK) != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATUS: &str = "Name:\trdma-server\nVmLck:\t       0 kB\nVmPin:\t     132 kB\n\
CapInh:\t0000000000000000\nCapEff:\t0000000000000000\n";

    #[test]
    fn status_fields_are_read() {
        assert_eq!(pinned_bytes(STATUS), Some(132 * 1024));
        assert!(!has_cap_ipc_lock(STATUS));
        // Root's full set includes CAP_IPC_LOCK; 0x4000 is it alone.
        assert!(has_cap_ipc_lock("CapEff:\t000001ffffffffff\n"));
        assert!(has_cap_ipc_lock("CapEff:\t0000000000004000\n"));
        assert!(!has_cap_ipc_lock("CapEff:\t0000000000002000\n"));
        assert_eq!(pinned_bytes("Name: x\n"), None);
    }

    #[test]
    fn the_budget_counts_pages_already_pinned_and_the_limit() {
        let b = MemlockBudget {
            limit: Some(64 * 1024),
            pinned: 0,
            exempt: false,
        };
        // 15 pages + 1 for alignment = 64 KiB: fits exactly.
        assert!(b.check(15 * 4096).is_ok());
        assert!(b.check(15 * 4096 + 1).is_err());
        let half_used = MemlockBudget {
            pinned: 32 * 1024,
            ..b
        };
        assert!(half_used.check(16 * 4096).is_err());
        assert!(half_used.check(7 * 4096).is_ok());
        let err = half_used.check(1 << 20).unwrap_err();
        match &err {
            Error::MemlockLimit {
                need,
                pinned,
                limit,
            } => {
                assert_eq!(
                    (*need, *pinned, *limit),
                    ((256 + 1) * 4096, 32 * 1024, 64 * 1024)
                );
            }
            other => panic!("{other}"),
        }
        let shown = err.to_string();
        assert!(
            shown.contains("LimitMEMLOCK") && shown.contains("ulimit -l 1060"),
            "{shown}"
        );
        assert_eq!(err.kind(), crate::ErrorKind::Setup);
    }

    #[test]
    fn unlimited_or_privileged_processes_always_fit() {
        let unlimited = MemlockBudget {
            limit: None,
            pinned: u64::MAX,
            exempt: false,
        };
        assert!(unlimited.check(u64::MAX).is_ok());
        let root = MemlockBudget {
            limit: Some(0),
            pinned: 0,
            exempt: true,
        };
        assert!(root.check(1 << 30).is_ok());
    }

    #[test]
    fn this_process_has_a_budget() {
        let b = MemlockBudget::current();
        // A test process pins nothing; whatever its limit, zero bytes fit unless it is zero.
        assert_eq!(b.pinned, 0);
        if b.limit.is_none_or(|l| l >= 2 * PAGE) || b.exempt {
            assert!(b.check(0).is_ok());
        }
    }
}
