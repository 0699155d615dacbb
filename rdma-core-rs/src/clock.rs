//! The device's completion clock: whether it can stamp completions (a CQ made by
//! `ibv_create_cq_ex` with `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP`) and how fast that clock runs,
//! from `ibv_query_device_ex`'s `hca_core_clock` (kHz) and `completion_timestamp_mask` (the
//! bits a stamp holds). Soft-RoCE (rxe) and Soft-iWARP report 0 for both.
//!
//! `ibv_query_device_ex` is a `static inline` function of `verbs.h`, so ibverbs-sys (bindgen)
//! does not bind it: [`Context::completion_clock`] calls the provider's `query_device_ex` op
//! as the header does, found with the header's checks (`verbs_ctx`). The pure rule, from the
//! two figures to the answer, is [`CompletionClock::from_attr`].

use std::ffi::c_int;
use std::mem::size_of;
use std::ptr;

use ibverbs_sys as ffi;

use crate::context::Context;
use crate::error::{Error, Result, VerbOp};

/// What the device says of its completion clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompletionClock {
    /// It stamps completions: its clock runs at `hca_core_clock_khz`, and a stamp holds the
    /// bits of `timestamp_mask` (both non-zero).
    Clock {
        hca_core_clock_khz: u64,
        timestamp_mask: u64,
    },
    /// It answered, with no clock: `hca_core_clock` or the timestamp mask is 0 (Soft-RoCE
    /// reports 0 for both).
    NoClock {
        hca_core_clock_khz: u64,
        timestamp_mask: u64,
    },
    /// It cannot be asked: its provider has no `query_device_ex`, or says it does not
    /// support it (`EOPNOTSUPP`, `ENOSYS`).
    NotSupported,
}

impl CompletionClock {
    /// The answer of a device that reported `hca_core_clock_khz` and `timestamp_mask`: a clock
    /// only when both are non-zero.
    #[must_use]
    pub fn from_attr(hca_core_clock_khz: u64, timestamp_mask: u64) -> Self {
        if hca_core_clock_khz != 0 && timestamp_mask != 0 {
            Self::Clock {
                hca_core_clock_khz,
                timestamp_mask,
            }
        } else {
            Self::NoClock {
                hca_core_clock_khz,
                timestamp_mask,
            }
        }
    }

    /// Whether the device stamps completions.
    #[must_use]
    pub fn has_clock(self) -> bool {
        matches!(self, Self::Clock { .. })
    }
}

/// Whether `query_device_ex`'s answer says the provider cannot answer (verbs.h then falls back
/// to `ibv_query_device`, which has no clock).
fn unsupported(rc: c_int) -> bool {
    rc == libc::EOPNOTSUPP || rc == libc::ENOSYS
}

impl Context {
    /// Asks the device for its completion clock (`ibv_query_device_ex`'s `hca_core_clock` and
    /// `completion_timestamp_mask`): see [`CompletionClock`].
    ///
    /// # Errors
    /// [`Error::Verb`] ([`VerbOp::QueryDeviceEx`]) when the provider has the op and it fails
    /// other than by not supporting it.
    pub fn completion_clock(&self) -> Result<CompletionClock> {
        let Some(op) = self.query_device_ex_op() else {
            return Ok(CompletionClock::NotSupported);
        };
        let ctx = self.raw();
        let mut attr = ffi::ibv_device_attr_ex::default();
        // SAFETY: `op` is the provider's `query_device_ex`, present (`sz` reaches it, non-null)
        // as `verbs_get_ctx_op` requires; it is called as verbs.h's `ibv_query_device_ex`
        // calls it: this context, no input (allowed: NULL), a writable attribute struct and
        // its size, which tells the provider how much of it to fill.
        let rc = unsafe {
            op(
                ctx,
                ptr::null(),
                &mut attr,
                size_of::<ffi::ibv_device_attr_ex>(),
            )
        };
        match rc {
            0 => Ok(CompletionClock::from_attr(
                attr.hca_core_clock,
                attr.completion_timestamp_mask,
            )),
            rc if unsupported(rc) => Ok(CompletionClock::NotSupported),
            rc => Err(Error::verb(
                VerbOp::QueryDeviceEx,
                self.name().to_owned(),
                rc,
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clock_needs_a_frequency_and_a_mask() {
        assert_eq!(
            CompletionClock::from_attr(156_250, 0x7fff_ffff_ffff_ffff),
            CompletionClock::Clock {
                hca_core_clock_khz: 156_250,
                timestamp_mask: 0x7fff_ffff_ffff_ffff,
            }
        );
        // Soft-RoCE: both 0.
        assert_eq!(
            CompletionClock::from_attr(0, 0),
            CompletionClock::NoClock {
                hca_core_clock_khz: 0,
                timestamp_mask: 0,
            }
        );
        for (khz, mask) in [(0, 0xffff), (1_000_000, 0)] {
            let c = CompletionClock::from_attr(khz, mask);
            assert!(!c.has_clock(), "{c:?}");
            assert!(matches!(c, CompletionClock::NoClock { .. }), "{c:?}");
        }
        assert!(CompletionClock::from_attr(1, 1).has_clock());
        assert!(!CompletionClock::NotSupported.has_clock());
    }

    #[test]
    fn not_supported_is_what_verbs_h_falls_back_on() {
        assert!(unsupported(libc::EOPNOTSUPP));
        assert!(unsupported(libc::ENOSYS));
        assert!(!unsupported(libc::EINVAL));
        assert!(!unsupported(0));
    }
}
