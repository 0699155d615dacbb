//! One budget for all the memory the server's sessions pin (`--max-pinned`): every session
//! reserves what it will register before it registers it, and gives it back when it ends.
//! A write session pins its `--buffer-size` buffer; a bench session the buffer it asked for
//! (at most `--bench-max-bytes`), and a lat session as much again for its pongs' source. A
//! session whose reservation does not fit is refused with `busy`, so the sum of the live
//! sessions' pinned memory never exceeds the budget, whatever clients ask for.
//!
//! At start the budget is held to `RLIMIT_MEMLOCK` (unless the process has `CAP_IPC_LOCK`):
//! a budget the limit cannot cover is cut to what it can, with a warning, and one write
//! session that could never fit stops the server (exit 2).

use rdma_core_rs::memlock::MemlockBudget;
use std::sync::Mutex;

/// Page size registrations pin in; each registration is counted as whole pages plus one.
const PAGE: u64 = 4096;
/// Locked memory kept free of the budget for the queues (CQ/QP rings) of the live sessions.
pub const QUEUE_SLACK: u64 = 4 << 20;

/// Bytes one registration of `len` bytes pins at most (whole pages, one more for an unaligned
/// start), as `rdma_core_rs::memlock` counts them.
#[must_use]
pub fn pinned(len: u64) -> u64 {
    len.div_ceil(PAGE).saturating_add(1).saturating_mul(PAGE)
}

/// What a session pins, by kind.
#[must_use]
pub fn write_session(buffer_size: u64) -> u64 {
    pinned(buffer_size)
}

/// A bench session of `len` bytes: its buffer, and for `lat` the pongs' source as well.
#[must_use]
pub fn bench_session(len: u64, lat: bool) -> u64 {
    let one = pinned(len);
    if lat { one.saturating_mul(2) } else { one }
}

/// The budget the server runs with, from `--max-pinned` and the process's locked-memory limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sized {
    /// The budget in bytes.
    pub total: u64,
    /// Why it is less than `--max-pinned`, if it is.
    pub cut: Option<String>,
}

/// A budget that cannot serve even one write session.
#[derive(Debug, thiserror::Error)]
#[error(
    "one session pins {need} bytes (--buffer-size {buffer_size}) but the pinned-memory budget is {total} bytes{why}: raise --max-pinned (and the locked-memory limit: `ulimit -l`, LimitMEMLOCK=) or lower --buffer-size"
)]
pub struct TooSmall {
    need: u64,
    buffer_size: u64,
    total: u64,
    why: String,
}

/// Sizes the budget: `max_pinned`, cut to what `limit` lets this process pin (less
/// [`QUEUE_SLACK`]).
///
/// # Errors
/// [`TooSmall`] when one write session of `buffer_size` bytes does not fit.
pub fn size(max_pinned: u64, buffer_size: u64, limit: MemlockBudget) -> Result<Sized, TooSmall> {
    let room = match limit.limit {
        Some(l) if !limit.exempt => {
            Some(l.saturating_sub(limit.pinned).saturating_sub(QUEUE_SLACK))
        }
        _ => None,
    };
    let sized = match room {
        Some(room) if room < max_pinned => Sized {
            total: room,
            cut: Some(format!(
                "the locked-memory limit (RLIMIT_MEMLOCK {} bytes) leaves room for {room} of --max-pinned {max_pinned} bytes",
                limit.limit.unwrap_or(0)
            )),
        },
        _ => Sized {
            total: max_pinned,
            cut: None,
        },
    };
    let need = write_session(buffer_size);
    if need > sized.total {
        return Err(TooSmall {
            need,
            buffer_size,
            total: sized.total,
            why: sized
                .cut
                .as_ref()
                .map(|c| format!(" ({c})"))
                .unwrap_or_default(),
        });
    }
    Ok(sized)
}

/// The warning when a bench lat session at `--bench-max-bytes` can never fit the budget.
#[must_use]
pub fn bench_warning(bench_max_bytes: u64, total: u64) -> Option<String> {
    let need = bench_session(bench_max_bytes, true);
    (bench_max_bytes > 0 && need > total).then(|| {
        format!(
            "a bench lat session of --bench-max-bytes {bench_max_bytes} pins {need} bytes, more than the pinned-memory budget of {total} bytes: such sessions will be refused; lower --bench-max-bytes or raise --max-pinned"
        )
    })
}

/// The live sessions' share of the budget.
#[derive(Debug)]
pub struct PinBudget {
    total: u64,
    used: Mutex<u64>,
}

/// Bytes reserved by one session; given back when dropped.
#[derive(Debug)]
#[must_use = "the reservation is given back when dropped"]
pub struct Reservation<'a> {
    budget: &'a PinBudget,
    bytes: u64,
}

impl PinBudget {
    #[must_use]
    pub fn new(total: u64) -> Self {
        PinBudget {
            total,
            used: Mutex::new(0),
        }
    }

    /// The budget in bytes.
    #[cfg(test)]
    #[must_use]
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Reserves `bytes` if they fit next to the live sessions' reservations; `Err` is the
    /// refusal's text (the client hears it with `busy`).
    ///
    /// # Errors
    /// The reservation does not fit (now, or ever: then the text says so).
    pub fn reserve(&self, bytes: u64) -> Result<Reservation<'_>, String> {
        if bytes > self.total {
            return Err(format!(
                "this session would pin {bytes} bytes, more than the server's whole pinned-memory budget of {} bytes (--max-pinned); ask for less",
                self.total
            ));
        }
        let mut used = self
            .used
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if used.saturating_add(bytes) > self.total {
            return Err(format!(
                "the server's pinned-memory budget is in use ({} of {} bytes pinned by live sessions, this one needs {bytes}); try again shortly",
                *used, self.total
            ));
        }
        *used += bytes;
        Ok(Reservation {
            budget: self,
            bytes,
        })
    }

    /// Bytes reserved now.
    #[cfg(test)]
    #[must_use]
    pub fn used(&self) -> u64 {
        *self
            .used
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        let mut used = self
            .budget
            .used
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *used = used.saturating_sub(self.bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 16, item 4: the live sessions together never pin more than the budget; a session
    /// that would is refused, and its bytes come back when a session ends.
    #[test]
    fn reservations_stay_within_the_budget() {
        let cap = 8 << 20;
        let b = PinBudget::new(2 * bench_session(cap, true));
        let one = b.reserve(bench_session(cap, true)).unwrap();
        let two = b.reserve(bench_session(cap, true)).unwrap();
        let refused = b.reserve(write_session(64)).unwrap_err();
        assert!(
            refused.contains("in use") && refused.contains("try again"),
            "{refused}"
        );
        assert_eq!(b.used(), b.total());
        drop(one);
        let three = b.reserve(bench_session(cap, false)).unwrap();
        assert!(b.reserve(bench_session(cap, true)).is_err());
        drop((two, three));
        assert_eq!(b.used(), 0);
        let never = b.reserve(b.total() + 1).unwrap_err();
        assert!(never.contains("more than the server's whole"), "{never}");
    }

    #[test]
    fn a_bench_cap_that_cannot_fit_is_warned_about() {
        assert_eq!(bench_warning(8 << 20, 256 << 20), None);
        assert_eq!(bench_warning(0, 4096), None);
        let w = bench_warning(8 << 20, 8 << 20).unwrap();
        assert!(w.contains("will be refused"), "{w}");
    }

    #[test]
    fn a_lat_session_pins_twice_its_buffer() {
        assert_eq!(pinned(1), 2 * PAGE);
        assert_eq!(pinned(PAGE), 2 * PAGE);
        assert_eq!(bench_session(8 << 20, true), 2 * ((8 << 20) + PAGE));
        assert_eq!(bench_session(8 << 20, false), (8 << 20) + PAGE);
        assert_eq!(write_session(64), 2 * PAGE);
    }

    #[test]
    fn the_budget_is_held_to_the_locked_memory_limit() {
        let unlimited = MemlockBudget {
            limit: None,
            pinned: 0,
            exempt: false,
        };
        assert_eq!(
            size(1 << 30, 64, unlimited).unwrap(),
            Sized {
                total: 1 << 30,
                cut: None
            }
        );
        let root = MemlockBudget {
            limit: Some(64 << 10),
            pinned: 0,
            exempt: true,
        };
        assert_eq!(size(1 << 30, 64, root).unwrap().total, 1 << 30);
        let user = MemlockBudget {
            limit: Some(64 << 20),
            pinned: 1 << 20,
            exempt: false,
        };
        let s = size(1 << 30, 64, user).unwrap();
        assert_eq!(s.total, (63 << 20) - QUEUE_SLACK);
        assert!(s.cut.unwrap().contains("RLIMIT_MEMLOCK 67108864"));
        let e = size(1 << 30, 1 << 30, user).unwrap_err().to_string();
        assert!(
            e.contains("--buffer-size 1073741824") && e.contains("ulimit -l"),
            "{e}"
        );
        let tiny = size(4096, 1 << 20, unlimited).unwrap_err().to_string();
        assert!(tiny.contains("budget is 4096 bytes:"), "{tiny}");
    }
}
