//! From what a provider reports of one work completion to a [`Completion`] or an
//! [`Error::Completion`] with advice: one rule for both ways of polling (an `ibv_wc` from
//! `ibv_poll_cq`, or the `ibv_wc_read_*` calls of an extended CQ).

use ibverbs_sys as ffi;

use super::Completion;
use crate::error::{Error, Result, completion_advice};
use crate::types::{WcOpcode, WcStatus};

/// One work completion as the provider reports it, before it is judged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct RawWc {
    pub(super) wr_id: u64,
    /// `enum ibv_wc_status`.
    pub(super) status: u32,
    /// `enum ibv_wc_opcode`.
    pub(super) opcode: u32,
    pub(super) vendor_err: u32,
    pub(super) byte_len: u32,
    /// The immediate in network byte order, if the completion is flagged `IBV_WC_WITH_IMM`.
    pub(super) imm_be: Option<u32>,
    /// The device's clock when the completion was made, if the CQ stamps completions.
    pub(super) timestamp: Option<u64>,
}

impl RawWc {
    /// What `ibv_poll_cq` filled in.
    pub(super) fn from_wc(wc: &ffi::ibv_wc) -> Self {
        let (status, vendor_err) = wc
            .error()
            .unwrap_or((ffi::ibv_wc_status::IBV_WC_SUCCESS, 0));
        RawWc {
            wr_id: wc.wr_id(),
            status,
            opcode: wc.opcode(),
            vendor_err,
            byte_len: u32::try_from(wc.len()).unwrap_or(u32::MAX),
            imm_be: wc.imm_data(),
            timestamp: None,
        }
    }

    /// The completion, or the error its status means (with advice for that status).
    pub(super) fn judge(self) -> Result<Completion> {
        let opcode = WcOpcode::from_ibv(self.opcode);
        if self.status != ffi::ibv_wc_status::IBV_WC_SUCCESS {
            let status = WcStatus::from_ibv(self.status);
            return Err(Error::Completion {
                status,
                status_str: status_str(self.status),
                vendor_err: self.vendor_err,
                wr_id: self.wr_id,
                opcode,
                advice: completion_advice(status),
            });
        }
        Ok(Completion {
            wr_id: self.wr_id,
            opcode,
            byte_len: self.byte_len,
            // imm_data is in network byte order on the wire and in the wc. Only receive
            // completions carry one (some providers also flag the sender's completion; ignore
            // that).
            imm: if is_receive(self.opcode) {
                self.imm_be.map(u32::from_be)
            } else {
                None
            },
            timestamp: self.timestamp,
        })
    }
}

/// Receive-side opcodes have bit `IBV_WC_RECV` (128) set.
fn is_receive(opcode: u32) -> bool {
    opcode & ffi::ibv_wc_opcode::IBV_WC_RECV != 0
}

fn status_str(status: u32) -> String {
    // SAFETY: ibv_wc_status_str accepts any value and returns a static string (or NULL).
    let p = unsafe { ffi::ibv_wc_status_str(status) };
    if p.is_null() {
        return format!("status {status}");
    }
    // SAFETY: non-null, static, NUL-terminated.
    unsafe { std::ffi::CStr::from_ptr(p) }
        .to_string_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests {
    use std::ptr;

    use super::*;

    /// Builds an ibv_wc the way a provider would (fields are private in ibverbs-sys, so go
    /// through the C layout: wr_id u64, status u32, opcode u32, vendor_err u32, byte_len u32,
    /// imm_data u32, qp_num, src_qp, wc_flags, ...).
    fn wc(
        wr_id: u64,
        status: u32,
        opcode: u32,
        byte_len: u32,
        imm_be: u32,
        flags: u32,
    ) -> ffi::ibv_wc {
        let mut w = ffi::ibv_wc::default();
        let p = ptr::from_mut(&mut w).cast::<u8>();
        // SAFETY: (test) ibv_wc is repr(C), 48 bytes, with the offsets written here.
        unsafe {
            p.cast::<u64>().write(wr_id);
            p.add(8).cast::<u32>().write(status);
            p.add(12).cast::<u32>().write(opcode);
            p.add(16).cast::<u32>().write(0x42);
            p.add(20).cast::<u32>().write(byte_len);
        }
        w.imm_data = imm_be;
        w.wc_flags = ffi::ibv_wc_flags(flags);
        w
    }

    fn judge(w: &ffi::ibv_wc) -> Result<Completion> {
        RawWc::from_wc(w).judge()
    }

    #[test]
    fn wc_layout_is_what_the_test_assumes() {
        let w = wc(7, 0, 129, 4096, 0, 0);
        assert_eq!(w.wr_id(), 7);
        assert_eq!(w.opcode(), 129);
        assert_eq!(w.len(), 4096);
        assert!(w.is_valid());
    }

    #[test]
    fn write_with_imm_receive_converts_imm_to_host_order() {
        let w = wc(
            9,
            0,
            ffi::ibv_wc_opcode::IBV_WC_RECV_RDMA_WITH_IMM,
            17,
            0x1234_5678u32.to_be(),
            2,
        );
        assert_eq!(
            judge(&w).unwrap(),
            Completion {
                wr_id: 9,
                opcode: WcOpcode::RecvRdmaWithImm,
                byte_len: 17,
                imm: Some(0x1234_5678),
                timestamp: None,
            }
        );
        // The sender's completion never reports an immediate, even if the provider flags it.
        let w = wc(9, 0, ffi::ibv_wc_opcode::IBV_WC_RDMA_WRITE, 17, 5, 2);
        assert_eq!(judge(&w).unwrap().imm, None);
        // Without the WITH_IMM flag there is no immediate.
        let w = wc(9, 0, ffi::ibv_wc_opcode::IBV_WC_RDMA_WRITE, 0, 5, 0);
        assert_eq!(judge(&w).unwrap().imm, None);
    }

    #[test]
    fn error_completion_becomes_error_with_advice() {
        let w = wc(3, ffi::ibv_wc_status::IBV_WC_RETRY_EXC_ERR, 1, 0, 0, 0);
        let e = judge(&w).unwrap_err();
        match &e {
            Error::Completion {
                status,
                vendor_err,
                wr_id,
                advice,
                status_str,
                ..
            } => {
                assert_eq!(*status, WcStatus::RetryExcErr);
                assert_eq!(*vendor_err, 0x42);
                assert_eq!(*wr_id, 3);
                assert!(advice.contains("UDP 4791"));
                assert!(status_str.to_lowercase().contains("retry"), "{status_str}");
            }
            other => panic!("unexpected {other}"),
        }
    }

    /// What an extended CQ reads: the same rule, and its timestamp carried as it came.
    #[test]
    fn an_extended_read_is_judged_by_the_same_rule() {
        let raw = RawWc {
            wr_id: 100,
            status: ffi::ibv_wc_status::IBV_WC_SUCCESS,
            opcode: ffi::ibv_wc_opcode::IBV_WC_RECV_RDMA_WITH_IMM,
            vendor_err: 0,
            byte_len: 17,
            imm_be: Some(0xC0FF_EE01u32.to_be()),
            timestamp: Some(0x1234_5678_9abc),
        };
        assert_eq!(
            raw.judge().unwrap(),
            Completion {
                wr_id: 100,
                opcode: WcOpcode::RecvRdmaWithImm,
                byte_len: 17,
                imm: Some(0xC0FF_EE01),
                timestamp: Some(0x1234_5678_9abc),
            }
        );
        let sent = RawWc {
            opcode: ffi::ibv_wc_opcode::IBV_WC_RDMA_WRITE,
            ..raw
        };
        assert_eq!(sent.judge().unwrap().imm, None);
        let failed = RawWc {
            status: ffi::ibv_wc_status::IBV_WC_REM_ACCESS_ERR,
            vendor_err: 7,
            ..raw
        };
        match failed.judge() {
            Err(Error::Completion {
                status: WcStatus::RemAccessErr,
                vendor_err: 7,
                wr_id: 100,
                ..
            }) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
}
