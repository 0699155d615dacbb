//! The provider ops that `verbs.h` reaches through `struct verbs_context` rather than through
//! exported symbols: `ibv_query_device_ex` and `ibv_create_cq_ex` are `static inline` functions
//! of the header, so ibverbs-sys (bindgen) binds neither. Each calls an op of the `struct
//! verbs_context` that ends just before the `struct ibv_context` a device handle points at
//! (`verbs_get_ctx`), after `verbs_get_ctx_op`'s checks: the context is an extended one
//! (`abi_compat`), its `sz` reaches back to the op, the op is set.
//!
//! This module is those checks, once. The part of `verbs_context` described here (from
//! `create_cq_ex` to `sz`) is ABI: new ops are added at the struct's start ("grows up"), and
//! every program built against rdma-core since these ops exist has their offsets inlined in it.
//! Nothing before `sz` is read until `sz` says it is there.

use std::ffi::{c_int, c_void};
use std::mem::{align_of, offset_of, size_of};

use ibverbs_sys as ffi;

use crate::context::Context;

/// The provider's `query_device_ex` op, as `struct verbs_context` holds it.
pub(crate) type QueryDeviceEx = unsafe extern "C" fn(
    *mut ffi::ibv_context,
    *const ffi::ibv_query_device_ex_input,
    *mut ffi::ibv_device_attr_ex,
    usize,
) -> c_int;

/// The `create_cq_ex` op, as `struct verbs_context` holds it (libibverbs sets it to its own
/// `__lib_ibv_create_cq_ex`, which checks the flags, calls the provider's op, or fails with
/// `EOPNOTSUPP` for a provider without one, and initialises the CQ's context and channel).
pub(crate) type CreateCqEx = unsafe extern "C" fn(
    *mut ffi::ibv_context,
    *mut ffi::ibv_cq_init_attr_ex,
) -> *mut ffi::ibv_cq_ex;

/// The end of rdma-core's `struct verbs_context`, from `create_cq_ex` to `sz`, in its order:
/// the fields just before the `struct ibv_context` (its last field). Never read as a whole:
/// only its layout is used, to know how far before the context each op lies.
#[repr(C)]
#[allow(dead_code)] // Fields only give the layout (see `distance`).
struct VerbsContextTail {
    create_cq_ex: Option<CreateCqEx>,
    priv_: *const c_void,
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
// `context` follows `sz` directly); on 64-bit targets it is 15 words, as verbs.h lays it out.
const _: () = assert!(size_of::<VerbsContextTail>() % align_of::<ffi::ibv_context>() == 0);
#[cfg(target_pointer_width = "64")]
const _: () = assert!(size_of::<VerbsContextTail>() == 15 * 8);

/// How many bytes before the `ibv_context` a field of the tail starts.
const fn distance(offset: usize) -> usize {
    size_of::<VerbsContextTail>() - offset
}

const SZ: usize = distance(offset_of!(VerbsContextTail, sz));
const QUERY_DEVICE_EX: usize = distance(offset_of!(VerbsContextTail, query_device_ex));
const CREATE_CQ_EX: usize = distance(offset_of!(VerbsContextTail, create_cq_ex));

/// `sizeof(struct verbs_context) - offsetof(struct verbs_context, op)` for an op `distance`
/// bytes before the context: the least `sz` of a context whose `verbs_context` holds the op
/// (`verbs_get_ctx_op`'s check).
const fn reach(distance: usize) -> usize {
    distance + size_of::<ffi::ibv_context>()
}

/// `__VERBS_ABI_IS_EXTENDED`: the `abi_compat` of a context that has a `verbs_context`.
const VERBS_ABI_IS_EXTENDED: usize = usize::MAX;

impl Context {
    /// The provider's `query_device_ex`, if this context has it (`verbs_get_ctx_op`).
    pub(crate) fn query_device_ex_op(&self) -> Option<QueryDeviceEx> {
        // SAFETY: `query_device_ex` lies QUERY_DEVICE_EX bytes before the context, and has the
        // type `Option<QueryDeviceEx>` (a nullable C function pointer), as the tail lays it.
        unsafe { self.verbs_op::<Option<QueryDeviceEx>>(QUERY_DEVICE_EX) }.flatten()
    }

    /// libibverbs' `create_cq_ex`, if this context has it (`verbs_get_ctx_op`).
    pub(crate) fn create_cq_ex_op(&self) -> Option<CreateCqEx> {
        // SAFETY: `create_cq_ex` lies CREATE_CQ_EX bytes before the context, and has the type
        // `Option<CreateCqEx>` (a nullable C function pointer), as the tail lays it.
        unsafe { self.verbs_op::<Option<CreateCqEx>>(CREATE_CQ_EX) }.flatten()
    }

    /// Reads the field `distance` bytes before this context's `ibv_context`, when the context
    /// is an extended one and its `sz` reaches that far back; `None` otherwise.
    ///
    /// # Safety
    /// `T` must be the type of the `verbs_context` field that lies `distance` bytes before the
    /// `ibv_context` (see `VerbsContextTail`), and `distance` at least `SZ`.
    unsafe fn verbs_op<T: Copy>(&self, distance: usize) -> Option<T> {
        let ctx = self.raw();
        // SAFETY: `ctx` is this open context's `ibv_context`, valid while `self` lives;
        // `abi_compat` is a plain pointer field of it.
        let abi_compat = unsafe { (*ctx).abi_compat };
        if abi_compat.addr() != VERBS_ABI_IS_EXTENDED {
            return None;
        }
        // SAFETY: an extended context (`abi_compat` checked above) is the last field of the
        // provider's `struct verbs_context` (libibverbs allocates them together), and `sz`
        // is the word just before it, in the same live allocation and aligned (the tail's size
        // is a multiple of the context's alignment, asserted above). We only read it.
        let sz = unsafe { ctx.cast::<u8>().sub(SZ).cast::<usize>().read() };
        if sz < reach(distance) {
            return None;
        }
        // SAFETY: `sz` covers the field (checked just above, as `verbs_get_ctx_op` checks), so
        // it lies in the same live allocation, aligned as the tail lays it, and has type `T`
        // (the caller's contract). We only read it.
        Some(unsafe { ctx.cast::<u8>().sub(distance).cast::<T>().read() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The offsets verbs.h inlines on x86-64, as gcc computes them from rdma-core 44's
    /// `struct verbs_context` (Debian 12): `sz` 8 bytes before the `ibv_context`,
    /// `query_device_ex` 104, `create_cq_ex` 120; and `sizeof(struct verbs_context) -
    /// offsetof(struct verbs_context, op)` 432 and 448 (the context is 328 bytes).
    #[cfg(target_pointer_width = "64")]
    #[test]
    fn the_tail_is_laid_out_as_verbs_h() {
        assert_eq!(SZ, 8);
        assert_eq!(QUERY_DEVICE_EX, 104);
        assert_eq!(CREATE_CQ_EX, 120);
        assert_eq!(size_of::<ffi::ibv_context>(), 328);
        assert_eq!(reach(QUERY_DEVICE_EX), 432);
        assert_eq!(reach(CREATE_CQ_EX), 448);
    }
}
