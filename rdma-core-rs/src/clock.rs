//! The device's completion clock: whether it can stamp completions (a CQ made by
//! `ibv_create_cq_ex` with `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP`) and how fast that clock runs,
//! from `ibv_query_device_ex`'s `hca_core_clock` (kHz) and `completion_timestamp_mask` (the
//! bits a stamp holds). Soft-RoCE (rxe) and Soft-iWARP report 0 for both.
//!
//! `ibv_query_device_ex` is a `static inline` function of `verbs.h`, so ibverbs-sys (bindgen)
//! does not bind it. It calls the provider's `query_device_ex` op through `struct
//! verbs_context`, which ends just before the `struct ibv_context` a device handle points at
//! (`verbs_get_ctx`). [`Context::completion_clock`] does what the header does, with the same
//! checks: the context is an extended one (`abi_compat`), its `sz` covers the op, the op is
//! set. The part of `verbs_context` read here (from `query_device_ex` to `sz`) is ABI: new
//! ops are added at the struct's start ("grows up"), and every program built against
//! rdma-core since the op exists has these offsets inlined in it. The pure rule, from the two
//! figures to the answer, is [`CompletionClock::from_attr`].

use std::ffi::{c_int, c_void};
use std::mem::{align_of, size_of};
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

/// The provider's `query_device_ex` op, as `struct verbs_context` holds it.
type QueryDeviceEx = unsafe extern "C" fn(
    *mut ffi::ibv_context,
    *const ffi::ibv_query_device_ex_input,
    *mut ffi::ibv_device_attr_ex,
    usize,
) -> c_int;

/// The end of rdma-core's `struct verbs_context`, from `query_device_ex` to `sz`, in its
/// order: the fields just before the `struct ibv_context` (its last field). Only
/// `query_device_ex` and `sz` are read; the others are there for their size.
#[repr(C)]
struct VerbsContextTail {
    query_device_ex: Option<QueryDeviceEx>,
    ibv_destroy_flow: *const c_void,
    abi_placeholder2: *const c_void,
    ibv_create_flow: *const c_void,
    abi_placeholder1: *const c_void,
    open_qp: *const c_void,
    create_qp_ex: *const c_void,
    get_srq_num: *const c_void,
    create_srq_ex: *const c_void,
    open_xrcd: *const c_void,
    close_xrcd: *const c_void,
    abi_placeholder3: u64,
    /// The size of the provider's `verbs_context` from its first op to its end (the
    /// `ibv_context` included): an op lies inside it when `sz` reaches back to the op.
    sz: usize,
}

// The tail ends where `struct ibv_context` starts: no padding between them (as in C, where
// `context` follows `sz` directly); on 64-bit targets it is 13 words, as verbs.h lays it out.
const _: () = assert!(size_of::<VerbsContextTail>() % align_of::<ffi::ibv_context>() == 0);
#[cfg(target_pointer_width = "64")]
const _: () = assert!(size_of::<VerbsContextTail>() == 13 * 8);

/// `sizeof(struct verbs_context) - offsetof(struct verbs_context, query_device_ex)`: the
/// least `sz` of a context whose `verbs_context` holds the op (`verbs_get_ctx_op`'s check).
const QUERY_DEVICE_EX_REACH: usize = size_of::<VerbsContextTail>() + size_of::<ffi::ibv_context>();

/// `__VERBS_ABI_IS_EXTENDED`: the `abi_compat` of a context that has a `verbs_context`.
const VERBS_ABI_IS_EXTENDED: usize = usize::MAX;

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
        let ctx = self.raw();
        // SAFETY: `ctx` is this open context's `ibv_context`, valid while `self` lives;
        // `abi_compat` is a plain pointer field of it.
        let abi_compat = unsafe { (*ctx).abi_compat };
        if abi_compat.addr() != VERBS_ABI_IS_EXTENDED {
            return Ok(CompletionClock::NotSupported);
        }
        // SAFETY: an extended context (`abi_compat` checked above) is the last field of the
        // provider's `struct verbs_context` (libibverbs allocates them together), so the
        // `VerbsContextTail` just before it is in the same live allocation, aligned (its size
        // is a multiple of `ibv_context`'s alignment, asserted above), and laid out as verbs.h
        // lays it (see the module docs); `verbs_get_ctx` computes the same address. We only
        // read it.
        let tail = unsafe {
            ptr::read(
                ctx.cast::<u8>()
                    .sub(size_of::<VerbsContextTail>())
                    .cast::<VerbsContextTail>(),
            )
        };
        let op = match tail.query_device_ex {
            Some(op) if tail.sz >= QUERY_DEVICE_EX_REACH => op,
            _ => return Ok(CompletionClock::NotSupported),
        };
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

    /// The offsets verbs.h inlines on x86-64, as gcc computes them from rdma-core 44's
    /// `struct verbs_context` (Debian 12): `query_device_ex` 104 bytes before the
    /// `ibv_context`, `sz` 8 bytes before it, and `sizeof(struct verbs_context) -
    /// offsetof(struct verbs_context, query_device_ex)` 432 (the context is 328 bytes).
    #[cfg(target_pointer_width = "64")]
    #[test]
    fn the_tail_is_laid_out_as_verbs_h() {
        assert_eq!(std::mem::offset_of!(VerbsContextTail, query_device_ex), 0);
        assert_eq!(size_of::<VerbsContextTail>(), 104);
        assert_eq!(
            size_of::<VerbsContextTail>() - std::mem::offset_of!(VerbsContextTail, sz),
            8
        );
        assert_eq!(size_of::<ffi::ibv_context>(), 328);
        assert_eq!(QUERY_DEVICE_EX_REACH, 432);
    }
}
