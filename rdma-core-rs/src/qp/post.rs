//! Posting work requests: receives without buffers (for a write-with-immediate to consume) and
//! RDMA Writes, with the checks that keep a write inside both buffers.

use std::ops::Range;
use std::ptr;

use ibverbs_sys as ffi;

use super::{Init, MAX_WRITE_LEN, QueuePair, Rtr, Rts};
use crate::error::{Error, Result, VerbOp};
use crate::pd::MemoryRegion;

/// The peer's registered buffer, as it advertised it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemoteBuffer {
    /// Virtual address (64 bits).
    pub addr: u64,
    /// Remote key.
    pub rkey: u32,
    /// Length in bytes.
    pub len: u64,
}

impl RemoteBuffer {
    /// The `len` bytes at `offset` of this buffer, as a buffer of their own (same key): what a
    /// write into the middle of a peer's buffer names. `None` when they do not lie inside it.
    #[must_use]
    pub fn range(&self, offset: u64, len: u64) -> Option<RemoteBuffer> {
        if offset.checked_add(len)? > self.len {
            return None;
        }
        Some(RemoteBuffer {
            addr: self.addr.checked_add(offset)?,
            rkey: self.rkey,
            len,
        })
    }
}

impl<S> QueuePair<S> {
    fn post_recv_inner(&self, wr_id: u64) -> Result<()> {
        // No scatter list: a write-with-immediate consumes the receive without placing data in
        // it (the payload goes to the address the writer named).
        // A valid (unused) SGE pointer rather than NULL: some providers memcpy `num_sge` entries.
        let mut unused = ffi::ibv_sge {
            addr: 0,
            length: 0,
            lkey: 0,
        };
        let mut wr = ffi::ibv_recv_wr {
            wr_id,
            next: ptr::null_mut(),
            sg_list: &mut unused,
            num_sge: 0,
        };
        let mut bad: *mut ffi::ibv_recv_wr = ptr::null_mut();
        // SAFETY: valid QP; its context is the open context.
        let f = unsafe { (*(*self.h.qp).context).ops.post_recv };
        let Some(f) = f else {
            return Err(Error::verb(
                VerbOp::PostRecv,
                "(provider has no post_recv)",
                libc::ENOSYS,
            ));
        };
        // SAFETY: valid QP, one well-formed WR that lives across the call.
        let rc = unsafe { f(self.h.qp, &mut wr, &mut bad) };
        if rc != 0 {
            return Err(Error::verb(
                VerbOp::PostRecv,
                format!("QP {}", self.h.qpn),
                rc,
            ));
        }
        Ok(())
    }
}

impl QueuePair<Init> {
    /// Posts a receive without buffers (for a write-with-immediate to consume).
    ///
    /// # Errors
    /// [`Error::Verb`] ([`VerbOp::PostRecv`]).
    pub fn post_recv(&self, wr_id: u64) -> Result<()> {
        self.post_recv_inner(wr_id)
    }
}

impl QueuePair<Rtr> {
    /// Posts a receive without buffers.
    ///
    /// # Errors
    /// [`Error::Verb`] ([`VerbOp::PostRecv`]).
    pub fn post_recv(&self, wr_id: u64) -> Result<()> {
        self.post_recv_inner(wr_id)
    }
}

/// Validates a write of `mr[local]` to `remote`; returns its length.
fn check_write(mr_len: usize, local: &Range<usize>, remote: &RemoteBuffer) -> Result<u32> {
    if local.start > local.end || local.end > mr_len {
        return Err(Error::InvalidRange {
            what: format!("local range {local:?} is not inside the {mr_len}-byte memory region"),
        });
    }
    let len = (local.end - local.start) as u64;
    if len == 0 {
        return Err(Error::InvalidRange {
            what: "an RDMA Write of 0 bytes".to_owned(),
        });
    }
    if len > MAX_WRITE_LEN {
        return Err(Error::WriteTooLong {
            len,
            limit: MAX_WRITE_LEN,
            reason: "above the 2^31-1 byte verbs limit",
        });
    }
    if len > remote.len {
        return Err(Error::WriteTooLong {
            len,
            limit: remote.len,
            reason: "longer than the remote buffer",
        });
    }
    if remote.addr.checked_add(len).is_none() {
        return Err(Error::InvalidRange {
            what: format!(
                "remote address {:#x} + {len} bytes overflows 64 bits",
                remote.addr
            ),
        });
    }
    u32::try_from(len).map_err(|_| Error::WriteTooLong {
        len,
        limit: MAX_WRITE_LEN,
        reason: "above the verbs limit",
    })
}

/// Where the SGE of a write from a region registered at `iova` whose buffer is at `va` starts:
/// the device reads a gathered SGE through the MR, in its registered (IOVA) space; inline data
/// is copied by the CPU at post time from the SGE's address as a pointer (the lkey is not used),
/// so it must be the buffer's own address. Regions are registered at a random IOVA, so the two
/// differ.
fn source_addr(inline: bool, iova: u64, va: u64) -> u64 {
    if inline { va } else { iova }
}

/// How [`QueuePair::post_write_with`] posts a write.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteFlags {
    /// RDMA Write with immediate (big-endian on the wire), consuming a receive at the peer.
    pub imm: Option<u32>,
    /// Produce a send completion. An unsignalled write's send-queue slot is only freed when a
    /// later signalled write on the QP completes: signal at least every `max_send_wr` writes,
    /// or posting fails with ENOMEM.
    pub signaled: bool,
    /// Copy the data into the work request at post time (it must fit the QP's
    /// `max_inline_data`); the buffer may change right after the post.
    pub inline: bool,
}

impl WriteFlags {
    /// A signalled RDMA Write with immediate `imm`, not inline: one that completes on both
    /// sides (the peer's receive, our send).
    #[must_use]
    pub fn with_imm(imm: u32) -> Self {
        WriteFlags {
            imm: Some(imm),
            signaled: true,
            inline: false,
        }
    }
}

/// Builds the RDMA Write (with immediate, if any) work request.
fn write_wr(
    sge: *mut ffi::ibv_sge,
    remote: &RemoteBuffer,
    flags: WriteFlags,
    wr_id: u64,
) -> ffi::ibv_send_wr {
    let imm = flags.imm;
    let mut send_flags = 0;
    if flags.signaled {
        send_flags |= ffi::ibv_send_flags::IBV_SEND_SIGNALED.0;
    }
    if flags.inline {
        send_flags |= ffi::ibv_send_flags::IBV_SEND_INLINE.0;
    }
    let (opcode, imm_be) = match imm {
        Some(v) => (ffi::ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM, v.to_be()),
        None => (ffi::ibv_wr_opcode::IBV_WR_RDMA_WRITE, 0),
    };
    ffi::ibv_send_wr {
        wr_id,
        next: ptr::null_mut(),
        sg_list: sge,
        num_sge: 1,
        opcode,
        send_flags,
        __bindgen_anon_1: ffi::ibv_send_wr__bindgen_ty_1 { imm_data: imm_be },
        wr: ffi::ibv_send_wr__bindgen_ty_2 {
            rdma: ffi::ibv_send_wr__bindgen_ty_2__bindgen_ty_1 {
                remote_addr: remote.addr,
                rkey: remote.rkey,
            },
        },
        ..Default::default()
    }
}

impl QueuePair<Rts> {
    /// Posts a receive without buffers.
    ///
    /// # Errors
    /// [`Error::Verb`] ([`VerbOp::PostRecv`]).
    pub fn post_recv(&self, wr_id: u64) -> Result<()> {
        self.post_recv_inner(wr_id)
    }

    /// Posts a signalled RDMA Write of `mr[local]` to `remote.addr` (the start of the remote
    /// buffer). With `imm`, it is an RDMA Write with immediate (sent big-endian; the peer's
    /// receive completion shows it in host order), which consumes a receive the peer posted.
    ///
    /// `mr` is only read. Changing it before the completion for `wr_id` arrives changes what is
    /// sent; dropping it makes the write fail (its keys are revoked before its memory is freed).
    ///
    /// # Errors
    /// [`Error::InvalidRange`] / [`Error::WriteTooLong`] for bad lengths,
    /// [`Error::InvalidArgument`] if `mr` is from another PD, [`Error::Verb`]
    /// ([`VerbOp::PostSend`]).
    pub fn post_write(
        &self,
        mr: &MemoryRegion,
        local: Range<usize>,
        remote: RemoteBuffer,
        imm: Option<u32>,
        wr_id: u64,
    ) -> Result<()> {
        let flags = WriteFlags {
            imm,
            signaled: true,
            inline: false,
        };
        self.post_write_with(mr, local, remote, flags, wr_id)
    }

    /// [`post_write`](Self::post_write) with the choice of signalling and inline data (see
    /// [`WriteFlags`]): what a benchmark needs to keep many writes in flight cheaply.
    ///
    /// # Errors
    /// As `post_write`; [`Error::Verb`] ([`VerbOp::PostSend`]) with ENOMEM when the send queue
    /// is full (too few signalled writes) or EINVAL when inline data exceeds the QP's limit.
    pub fn post_write_with(
        &self,
        mr: &MemoryRegion,
        local: Range<usize>,
        remote: RemoteBuffer,
        flags: WriteFlags,
        wr_id: u64,
    ) -> Result<()> {
        if !mr.pd().same_as(&self.h.pd) {
            return Err(Error::invalid(
                "the memory region belongs to a different protection domain than the QP",
                "register the source buffer with the PD that created the QP",
            ));
        }
        let len = check_write(mr.len(), &local, &remote)?;
        let start = source_addr(flags.inline, mr.addr(), mr.as_slice().as_ptr() as u64);
        let mut sge = ffi::ibv_sge {
            addr: start + local.start as u64,
            length: len,
            lkey: mr.lkey(),
        };
        let mut wr = write_wr(&mut sge, &remote, flags, wr_id);
        let mut bad: *mut ffi::ibv_send_wr = ptr::null_mut();
        // SAFETY: valid QP; its context is the open context.
        let f = unsafe { (*(*self.h.qp).context).ops.post_send };
        let Some(f) = f else {
            return Err(Error::verb(
                VerbOp::PostSend,
                "(provider has no post_send)",
                libc::ENOSYS,
            ));
        };
        // SAFETY: valid QP; `wr` and `sge` live across the call (the provider copies them). The
        // SGE names `mr`'s lkey and a range checked to lie inside its buffer. Whatever the caller
        // does afterwards, the device never touches freed memory: dropping `mr` deregisters it
        // (revoking the lkey, so the work request fails) before its buffer is freed.
        let rc = unsafe { f(self.h.qp, &mut wr, &mut bad) };
        if rc != 0 {
            return Err(Error::verb(
                VerbOp::PostSend,
                format!("QP {}", self.h.qpn),
                rc,
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_range_of_a_remote_buffer_lies_inside_it() {
        let remote = RemoteBuffer {
            addr: 0x7f00_0000_1000,
            rkey: 5,
            len: 64,
        };
        assert_eq!(
            remote.range(63, 1),
            Some(RemoteBuffer {
                addr: 0x7f00_0000_103f,
                rkey: 5,
                len: 1
            })
        );
        assert_eq!(remote.range(0, 64), Some(remote));
        assert_eq!(remote.range(64, 1), None);
        assert_eq!(remote.range(1, 64), None);
        assert_eq!(remote.range(u64::MAX, 2), None, "no overflow");
        let top = RemoteBuffer {
            addr: u64::MAX - 1,
            rkey: 5,
            len: 64,
        };
        assert_eq!(top.range(8, 1), None, "no address past 2^64");
        assert_eq!(
            WriteFlags::with_imm(7),
            WriteFlags {
                imm: Some(7),
                signaled: true,
                inline: false
            }
        );
    }

    #[test]
    fn write_range_checks() {
        let remote = RemoteBuffer {
            addr: 0x7f00_0000_1000,
            rkey: 5,
            len: 64,
        };
        assert_eq!(check_write(64, &(0..17), &remote).unwrap(), 17);
        assert_eq!(check_write(128, &(64..128), &remote).unwrap(), 64);
        assert!(matches!(
            check_write(64, &(0..0), &remote),
            Err(Error::InvalidRange { .. })
        ));
        assert!(matches!(
            check_write(64, &(10..65), &remote),
            Err(Error::InvalidRange { .. })
        ));
        #[allow(clippy::reversed_empty_ranges)]
        let backwards = 10..5;
        assert!(matches!(
            check_write(64, &backwards, &remote),
            Err(Error::InvalidRange { .. })
        ));
        assert!(matches!(
            check_write(128, &(0..65), &remote),
            Err(Error::WriteTooLong {
                len: 65,
                limit: 64,
                ..
            })
        ));
        let huge = RemoteBuffer {
            addr: 0,
            rkey: 5,
            len: u64::MAX,
        };
        assert!(matches!(
            check_write(1 << 31, &(0..1 << 31), &huge),
            Err(Error::WriteTooLong {
                limit: MAX_WRITE_LEN,
                ..
            })
        ));
        let edge = RemoteBuffer {
            addr: u64::MAX - 3,
            rkey: 5,
            len: 100,
        };
        assert!(matches!(
            check_write(64, &(0..8), &edge),
            Err(Error::InvalidRange { .. })
        ));
    }

    /// Inline data is copied by the CPU from a pointer; a gathered SGE is read through the MR
    /// at its IOVA. Posting inline from the IOVA faulted in the guests (the random IOVA is no
    /// mapped address).
    #[test]
    fn inline_writes_read_from_the_buffer_gathered_ones_through_the_iova() {
        let (iova, va) = (0x4a5e_0000_0000_0000, 0x7f00_1234_5000);
        assert_eq!(source_addr(true, iova, va), va);
        assert_eq!(source_addr(false, iova, va), iova);
    }

    #[test]
    fn write_work_request_keeps_64_bit_address_and_big_endian_imm() {
        let mut sge = ffi::ibv_sge {
            addr: 0x1000,
            length: 17,
            lkey: 9,
        };
        let remote = RemoteBuffer {
            addr: 0x0000_7fff_dead_b000,
            rkey: 0x77,
            len: 64,
        };
        let signaled = WriteFlags {
            imm: Some(0x0102_0304),
            signaled: true,
            inline: false,
        };
        let wr = write_wr(&mut sge, &remote, signaled, 42);
        assert_eq!(wr.opcode, ffi::ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM);
        assert_eq!(
            wr.send_flags & ffi::ibv_send_flags::IBV_SEND_SIGNALED.0,
            ffi::ibv_send_flags::IBV_SEND_SIGNALED.0
        );
        assert_eq!(wr.wr_id, 42);
        assert_eq!(wr.num_sge, 1);
        // SAFETY: (test) the rdma member and imm_data were the ones written.
        unsafe {
            assert_eq!(wr.wr.rdma.remote_addr, 0x0000_7fff_dead_b000);
            assert_eq!(wr.wr.rdma.rkey, 0x77);
            assert_eq!(wr.__bindgen_anon_1.imm_data.to_ne_bytes(), [1, 2, 3, 4]);
        }
        let wr = write_wr(&mut sge, &remote, WriteFlags::default(), 1);
        assert_eq!(wr.opcode, ffi::ibv_wr_opcode::IBV_WR_RDMA_WRITE);
        assert_eq!(wr.send_flags, 0, "unsignalled, not inline");
        let inline = WriteFlags {
            inline: true,
            ..WriteFlags::default()
        };
        let wr = write_wr(&mut sge, &remote, inline, 2);
        assert_eq!(wr.send_flags, ffi::ibv_send_flags::IBV_SEND_INLINE.0);
    }
}
