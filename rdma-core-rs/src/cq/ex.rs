//! Extended completion queues: made by `ibv_create_cq_ex` (through `verbs_context`, see
//! `verbs_ctx`), polled with `ibv_start_poll` / `ibv_end_poll` and the `ibv_wc_read_*` calls,
//! and, where the device has a completion clock, stamping each completion with it
//! (`IBV_WC_EX_WITH_COMPLETION_TIMESTAMP`).
//!
//! Soft-RoCE (rxe) makes extended CQs but has no clock, so it refuses the timestamp flag with
//! `EOPNOTSUPP`; Soft-iWARP (siw) makes no extended CQs at all (`EOPNOTSUPP` again).

use std::ptr;
use std::sync::{Mutex, PoisonError};

use ibverbs_sys as ffi;

use super::wc::RawWc;
use super::{Completion, CompletionQueue, CqMode, cq_entries};
use crate::context::Context;
use crate::error::{Error, Result, VerbOp};

/// What a plain CQ has not: how an extended one is polled.
#[derive(Debug)]
pub(super) struct Extended {
    /// Whether its completions carry the device's timestamp.
    stamps: bool,
    /// Between `start_poll` and `end_poll` the shared `ibv_cq_ex` (its `status` and `wr_id`
    /// fields, its current completion) belongs to one poller: held for that span, whatever
    /// the provider locks.
    polling: Mutex<()>,
}

/// The completion fields asked of every extended CQ: the length of a write, its immediate.
const WC_FLAGS: u32 = ffi::IBV_WC_EX_WITH_BYTE_LEN | ffi::IBV_WC_EX_WITH_IMM;

/// The `wc_flags` of an extended CQ, with or without completion timestamps.
fn wc_flags(timestamps: bool) -> u64 {
    let stamp = if timestamps {
        ffi::IBV_WC_EX_WITH_COMPLETION_TIMESTAMP
    } else {
        0
    };
    u64::from(WC_FLAGS | stamp)
}

impl Context {
    /// Creates an extended completion queue (`ibv_create_cq_ex`) with room for at least
    /// `entries` completions. With `timestamps`, each of its completions carries the device's
    /// clock ([`Completion::timestamp`](super::Completion::timestamp)); only a device with a
    /// completion clock ([`Context::completion_clock`]) makes such a CQ. Otherwise it works as
    /// [`Context::create_cq`]'s, in either [`CqMode`].
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for 0 or more than `i32::MAX` entries; [`Error::Verb`]
    /// ([`VerbOp::CreateCompChannel`], [`VerbOp::CreateCqEx`]): `EOPNOTSUPP` when the device
    /// makes no extended CQs or, asked for timestamps, has no completion clock.
    pub fn create_cq_ex(
        &self,
        entries: u32,
        mode: CqMode,
        timestamps: bool,
    ) -> Result<CompletionQueue> {
        let cqe = cq_entries(entries)?;
        let what = || format!("{entries} entries, timestamps {timestamps}");
        let Some(create) = self.create_cq_ex_op() else {
            return Err(Error::verb(VerbOp::CreateCqEx, what(), libc::EOPNOTSUPP));
        };
        let channel = self.comp_channel(mode)?;
        let mut attr = ffi::ibv_cq_init_attr_ex {
            // `cq_entries` keeps it in 1..=i32::MAX.
            cqe: cqe.unsigned_abs(),
            cq_context: ptr::null_mut(),
            channel: channel.0,
            comp_vector: 0,
            wc_flags: wc_flags(timestamps),
            comp_mask: 0,
            flags: 0,
            parent_domain: ptr::null_mut(),
        };
        // SAFETY: `create` is libibverbs' `create_cq_ex` of this open context (found with
        // `verbs_get_ctx_op`'s checks), called as verbs.h's `ibv_create_cq_ex` calls it: the
        // context and an initialised attribute struct, no comp_mask extensions. The channel is
        // null or valid and outlives the CQ (both are destroyed by CqInner, CQ first).
        let cq = unsafe { create(self.raw(), &mut attr) };
        if cq.is_null() {
            return Err(Error::last_os(VerbOp::CreateCqEx, what()));
        }
        let ex = Extended {
            stamps: timestamps,
            polling: Mutex::new(()),
        };
        // `ibv_cq_ex_to_cq` is this cast: an `ibv_cq_ex` starts with the fields of an `ibv_cq`.
        Ok(channel.into_cq(cq.cast::<ffi::ibv_cq>(), mode, Some(ex), self))
    }
}

impl Extended {
    /// Non-blocking: takes at most one completion from `cq`, the `ibv_cq` of an extended CQ.
    pub(super) fn poll_once(&self, cq: *mut ffi::ibv_cq) -> Result<Option<Result<Completion>>> {
        let _one = self.polling.lock().unwrap_or_else(PoisonError::into_inner);
        let cq = cq.cast::<ffi::ibv_cq_ex>();
        // SAFETY: `cq` was made by `create_cq_ex` and lives as long as the CqInner that holds
        // it; its op pointers are plain fields the provider set when it made it.
        let (start, end) = unsafe { ((*cq).start_poll, (*cq).end_poll) };
        let (Some(start), Some(end)) = (start, end) else {
            return Err(Error::verb(
                VerbOp::PollCq,
                "(provider has no start_poll/end_poll)",
                libc::ENOSYS,
            ));
        };
        let mut attr = ffi::ibv_poll_cq_attr { comp_mask: 0 };
        // SAFETY: a live extended CQ, polled by us alone (`polling`), a valid attribute struct
        // with no extensions.
        let rc = unsafe { start(cq, &mut attr) };
        if rc == libc::ENOENT {
            // Empty: `ibv_end_poll` must not be called.
            return Ok(None);
        }
        if rc != 0 {
            return Err(Error::verb(VerbOp::PollCq, "(ibv_start_poll)", rc));
        }
        // SAFETY: `start_poll` succeeded, so until `end_poll` the CQ's fields and read calls
        // describe the current completion.
        let read = unsafe { self.read_current(cq) };
        // SAFETY: ends the poll `start_poll` began (exactly once), as the man page requires.
        unsafe { end(cq) };
        Ok(Some(read.and_then(RawWc::judge)))
    }

    /// Reads the current completion.
    ///
    /// # Safety
    /// `cq` is a live extended CQ between a successful `start_poll` and its `end_poll`.
    unsafe fn read_current(&self, cq: *mut ffi::ibv_cq_ex) -> Result<RawWc> {
        // SAFETY: the caller's contract; `status` and `wr_id` are plain fields `start_poll`
        // filled in, the read ops plain fields set when the CQ was made.
        let c = unsafe { &*cq };
        let missing = |what: &str| {
            Error::verb(
                VerbOp::PollCq,
                format!("(extended CQ without {what})"),
                libc::ENOSYS,
            )
        };
        let (Some(opcode), Some(vendor_err), Some(byte_len), Some(wc_flags), Some(imm)) = (
            c.read_opcode,
            c.read_vendor_err,
            c.read_byte_len,
            c.read_wc_flags,
            c.read_imm_data,
        ) else {
            return Err(missing("the ibv_wc_read_* ops it was made with"));
        };
        let stamp = match (self.stamps, c.read_completion_ts) {
            (false, _) => None,
            (true, Some(read)) => Some(read),
            (true, None) => return Err(missing("ibv_wc_read_completion_ts")),
        };
        // SAFETY: each op is called on the current completion (the caller's contract); byte
        // length, immediate and timestamp are among the flags the CQ was made with, and the
        // immediate is only read when the completion says it has one.
        unsafe {
            let flags = wc_flags(cq);
            let has_imm = flags & ffi::ibv_wc_flags::IBV_WC_WITH_IMM.0 != 0;
            Ok(RawWc {
                wr_id: c.wr_id,
                status: c.status,
                opcode: opcode(cq),
                vendor_err: vendor_err(cq),
                byte_len: byte_len(cq),
                imm_be: if has_imm { Some(imm(cq)) } else { None },
                timestamp: stamp.map(|read| read(cq)),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_add_one_flag_to_what_every_extended_cq_asks() {
        assert_eq!(wc_flags(false), 0b11);
        assert_eq!(wc_flags(true), 0b11 | 128);
        assert_eq!(
            wc_flags(true) & !wc_flags(false),
            u64::from(ffi::IBV_WC_EX_WITH_COMPLETION_TIMESTAMP)
        );
    }
}
