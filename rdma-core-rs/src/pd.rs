//! Protection domains and registered memory regions with buffers this crate owns.

use std::alloc::{self, Layout};
use std::mem::ManuallyDrop;
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{Ordering, fence};

use ibverbs_sys as ffi;

use crate::context::Context;
use crate::error::{Error, Result, VerbOp};
use crate::types::Access;

pub(crate) struct PdInner {
    pub(crate) pd: *mut ffi::ibv_pd,
    pub(crate) ctx: Context,
}

// SAFETY: an ibv_pd may be used from any thread (verbs are thread-safe); it is deallocated once,
// in Drop, after every MR and QP holding an Arc of it is gone.
unsafe impl Send for PdInner {}
// SAFETY: see `Send`.
unsafe impl Sync for PdInner {}

impl Drop for PdInner {
    fn drop(&mut self) {
        // SAFETY: `pd` came from ibv_alloc_pd; MRs and QPs hold Arcs of this inner, so none is
        // left. The context (field `ctx`) is dropped after this, as fields drop after `drop`.
        let rc = unsafe { ffi::ibv_dealloc_pd(self.pd) };
        if rc != 0 {
            tracing::warn!(rc, "ibv_dealloc_pd failed");
        }
    }
}

impl std::fmt::Debug for PdInner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProtectionDomain")
            .field("device", &self.ctx.name())
            .finish()
    }
}

/// A protection domain. Cheap to clone; keeps its [`Context`] alive.
#[derive(Clone, Debug)]
#[must_use]
pub struct ProtectionDomain(pub(crate) Arc<PdInner>);

impl Context {
    /// Allocates a protection domain.
    ///
    /// # Errors
    /// [`Error::Verb`] ([`VerbOp::AllocPd`]).
    pub fn alloc_pd(&self) -> Result<ProtectionDomain> {
        // SAFETY: valid, open context.
        let pd = unsafe { ffi::ibv_alloc_pd(self.raw()) };
        if pd.is_null() {
            return Err(Error::last_os(VerbOp::AllocPd, self.name().to_owned()));
        }
        Ok(ProtectionDomain(Arc::new(PdInner {
            pd,
            ctx: self.clone(),
        })))
    }
}

impl ProtectionDomain {
    /// The device this PD belongs to.
    pub fn context(&self) -> &Context {
        &self.0.ctx
    }

    pub(crate) fn same_as(&self, other: &ProtectionDomain) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// Allocates a zeroed, page-aligned buffer of `len` bytes and registers it with `access`.
    ///
    /// Verbs requires [`Access::LOCAL_WRITE`] whenever [`Access::REMOTE_WRITE`] is set, so a server
    /// buffer is `LOCAL_WRITE | REMOTE_WRITE`; a client source buffer needs only
    /// [`Access::NONE`].
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for `len == 0` or REMOTE_WRITE without LOCAL_WRITE,
    /// [`Error::Alloc`], [`Error::Verb`] ([`VerbOp::RegMr`]; ENOMEM advises `ulimit -l`).
    pub fn register(&self, len: usize, access: Access) -> Result<MemoryRegion> {
        check_access(access)?;
        let buf = Buffer::zeroed(len)?;
        // SAFETY: `buf` is a live allocation of `len` bytes, owned by the MemoryRegion built below,
        // which deregisters before freeing it; the PD is valid.
        let mr = unsafe {
            ffi::ibv_reg_mr(
                self.0.pd,
                buf.ptr.as_ptr().cast(),
                len,
                access.bits() as libc::c_int,
            )
        };
        if mr.is_null() {
            return Err(Error::last_os(
                VerbOp::RegMr,
                format!("{len} bytes, {access:?}"),
            ));
        }
        // SAFETY: `mr` is non-null and valid until ibv_dereg_mr.
        let (lkey, rkey) = unsafe { ((*mr).lkey, (*mr).rkey) };
        Ok(MemoryRegion {
            mr,
            buf: ManuallyDrop::new(buf),
            lkey,
            rkey,
            access,
            pd: self.clone(),
        })
    }

    /// Copies `data` into a new owned buffer and registers it (see [`register`](Self::register)).
    ///
    /// # Errors
    /// As `register`; empty `data` is [`Error::InvalidArgument`].
    pub fn register_bytes(&self, data: &[u8], access: Access) -> Result<MemoryRegion> {
        let mut mr = self.register(data.len(), access)?;
        mr.as_mut_slice().copy_from_slice(data);
        Ok(mr)
    }
}

fn check_access(access: Access) -> Result<()> {
    if access.contains(Access::REMOTE_WRITE) && !access.contains(Access::LOCAL_WRITE) {
        return Err(Error::invalid(
            format!("memory access {access:?} has REMOTE_WRITE without LOCAL_WRITE"),
            "verbs requires LOCAL_WRITE with REMOTE_WRITE: use Access::LOCAL_WRITE | Access::REMOTE_WRITE",
        ));
    }
    Ok(())
}

/// A zeroed, page-aligned heap buffer.
struct Buffer {
    ptr: NonNull<u8>,
    layout: Layout,
}

impl Buffer {
    fn zeroed(len: usize) -> Result<Buffer> {
        if len == 0 {
            return Err(Error::invalid(
                "a memory region of 0 bytes",
                "register at least 1 byte",
            ));
        }
        let layout = Layout::from_size_align(len, page_size()).map_err(|_| Error::Alloc { len })?;
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(ptr).ok_or(Error::Alloc { len })?;
        Ok(Buffer { ptr, layout })
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        // SAFETY: allocated with exactly this layout in `zeroed`, freed once.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), self.layout) };
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let ps = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(ps)
        .ok()
        .filter(|p| p.is_power_of_two())
        .unwrap_or(4096)
}

/// A registered buffer owned by this crate. Keeps its PD alive; on drop it is deregistered
/// *before* the buffer is freed.
///
/// Reading what a peer wrote: the NIC writes the buffer behind the CPU's back. Only read it
/// after you know the write is finished — a receive completion for a write-with-immediate, or a
/// notice from the peer sent after its write completed. [`as_slice`](Self::as_slice) issues an
/// acquire fence before handing out the slice.
///
/// Do not drop a region while a posted work request still uses it: wait for its completion
/// first. (If you do, the hardware cannot touch the freed memory — deregistration revokes its
/// keys — but the work request fails.)
#[must_use]
pub struct MemoryRegion {
    mr: *mut ffi::ibv_mr,
    // Freed by Drop only after `mr` is deregistered.
    buf: ManuallyDrop<Buffer>,
    lkey: u32,
    rkey: u32,
    access: Access,
    pd: ProtectionDomain,
}

// SAFETY: the MR handle is usable from any thread (verbs are thread-safe) and the buffer is
// plain heap memory owned by this value; shared access hands out only `&[u8]`.
unsafe impl Send for MemoryRegion {}
// SAFETY: see `Send`; `&self` methods only read.
unsafe impl Sync for MemoryRegion {}

impl MemoryRegion {
    /// Address of the buffer, as the peer must use it in RDMA Writes (64 bits: never truncate).
    #[must_use]
    pub fn addr(&self) -> u64 {
        self.buf.ptr.as_ptr() as u64
    }

    /// Length in bytes (at least 1).
    #[must_use]
    pub fn len(&self) -> usize {
        self.buf.layout.size()
    }

    /// Always false (regions have at least one byte); present for API symmetry.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Local key, for work requests on this side.
    #[must_use]
    pub fn lkey(&self) -> u32 {
        self.lkey
    }

    /// Remote key, to give the peer so it may access the buffer.
    #[must_use]
    pub fn rkey(&self) -> u32 {
        self.rkey
    }

    /// The access flags it was registered with.
    #[must_use]
    pub fn access(&self) -> Access {
        self.access
    }

    /// The protection domain it belongs to.
    pub fn pd(&self) -> &ProtectionDomain {
        &self.pd
    }

    /// The buffer contents. Meaningful for remotely written data only after a completion or a
    /// peer notice says the write finished (see the type docs); an acquire fence orders this
    /// read after that observation. Copy out what you need right away.
    #[must_use]
    pub fn as_slice(&self) -> &[u8] {
        fence(Ordering::Acquire);
        // SAFETY: the buffer is a live allocation of `len` initialised (zeroed) bytes owned by
        // self. The NIC may write it concurrently only if the application let a peer write
        // while reading, which the docs rule out.
        unsafe { std::slice::from_raw_parts(self.buf.ptr.as_ptr(), self.len()) }
    }

    /// The buffer, for filling before a write. Do not change it while a posted work request
    /// reads it.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        fence(Ordering::Acquire);
        // SAFETY: as in `as_slice`; `&mut self` makes this the only Rust reference.
        unsafe { std::slice::from_raw_parts_mut(self.buf.ptr.as_ptr(), self.len()) }
    }
}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        // SAFETY: `mr` came from ibv_reg_mr and is deregistered exactly once, here.
        let rc = unsafe { ffi::ibv_dereg_mr(self.mr) };
        if rc == 0 {
            // SAFETY: the registration is gone, so the device no longer uses the buffer; `buf`
            // is dropped exactly once and never touched again.
            unsafe { ManuallyDrop::drop(&mut self.buf) };
        } else {
            // The registration may still pin the memory: leak the buffer rather than free
            // memory the device might access.
            tracing::error!(rc, "ibv_dereg_mr failed; leaking the buffer to stay safe");
        }
    }
}

impl std::fmt::Debug for MemoryRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryRegion")
            .field("addr", &format_args!("{:#x}", self.addr()))
            .field("len", &self.len())
            .field("lkey", &format_args!("{:#x}", self.lkey))
            .field("rkey", &format_args!("{:#x}", self.rkey))
            .field("access", &self.access)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_write_requires_local_write() {
        assert!(check_access(Access::REMOTE_WRITE).is_err());
        assert!(check_access(Access::LOCAL_WRITE | Access::REMOTE_WRITE).is_ok());
        assert!(check_access(Access::NONE).is_ok());
        assert!(check_access(Access::REMOTE_READ).is_ok());
        let e = check_access(Access::REMOTE_WRITE).unwrap_err();
        assert!(
            e.to_string().contains("LOCAL_WRITE | Access::REMOTE_WRITE"),
            "{e}"
        );
    }

    #[test]
    fn buffers_are_zeroed_and_page_aligned() {
        assert!(Buffer::zeroed(0).is_err());
        let b = Buffer::zeroed(10_000).unwrap();
        assert_eq!(b.ptr.as_ptr() as usize % page_size(), 0);
        // SAFETY: (test) freshly allocated, 10_000 bytes.
        let s = unsafe { std::slice::from_raw_parts(b.ptr.as_ptr(), 10_000) };
        assert!(s.iter().all(|x| *x == 0));
    }
}
