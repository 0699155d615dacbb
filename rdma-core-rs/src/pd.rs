//! Protection domains and the memory they register, in buffers this crate owns. Two kinds of
//! region, so that the type says who may write a buffer:
//!
//! * [`MemoryRegion`]: only this process writes it, the device only reads it (the source of an
//!   RDMA Write). The CPU reads and writes it as a slice at any time.
//! * [`ExposedRegion`]: peers holding its rkey may RDMA-Write into it at any time. The CPU never
//!   sees it as a slice while it is registered: [`ExposedRegion::deregister`] revokes every key
//!   first, then hands over an [`OwnedBuffer`].

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

    /// Allocates a zeroed, page-aligned buffer of `len` bytes and registers it with `access`,
    /// for this process to fill and the device to read (the source of an RDMA Write:
    /// [`Access::NONE`] is enough).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for `len == 0` or for [`Access::REMOTE_WRITE`] (a buffer peers
    /// may write is an [`ExposedRegion`]: use [`register_exposed`](Self::register_exposed)),
    /// [`Error::Alloc`], [`Error::Verb`] ([`VerbOp::RegMr`]; ENOMEM advises `ulimit -l`); [`Error::MemlockLimit`] when the locked-memory limit is already too low.
    pub fn register(&self, len: usize, access: Access) -> Result<MemoryRegion> {
        check_local_access(access)?;
        Region::new(self, len, access).map(MemoryRegion)
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

    /// Allocates a zeroed, page-aligned buffer of `len` bytes and registers it with `access`,
    /// for peers to write: give them its [`addr`](ExposedRegion::addr) and
    /// [`rkey`](ExposedRegion::rkey). Verbs requires [`Access::LOCAL_WRITE`] whenever
    /// [`Access::REMOTE_WRITE`] is set, so such a buffer is `LOCAL_WRITE | REMOTE_WRITE`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for `len == 0` or REMOTE_WRITE without LOCAL_WRITE,
    /// [`Error::Alloc`], [`Error::Verb`] ([`VerbOp::RegMr`]; ENOMEM advises `ulimit -l`); [`Error::MemlockLimit`] when the locked-memory limit is already too low.
    pub fn register_exposed(&self, len: usize, access: Access) -> Result<ExposedRegion> {
        check_access(access)?;
        Region::new(self, len, access).map(ExposedRegion)
    }
}

/// A [`MemoryRegion`] is never written by a device, so no peer may write it.
fn check_local_access(access: Access) -> Result<()> {
    if access.contains(Access::REMOTE_WRITE) {
        return Err(Error::invalid(
            format!("a MemoryRegion with {access:?}"),
            "a buffer peers may write is an ExposedRegion: use ProtectionDomain::register_exposed, \
             and read it after ExposedRegion::deregister",
        ));
    }
    Ok(())
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

/// A zeroed, page-aligned heap buffer that no device can access: what
/// [`ExposedRegion::deregister`] hands back. Reads and writes as a `[u8]`.
pub struct OwnedBuffer {
    ptr: NonNull<u8>,
    layout: Layout,
}

// SAFETY: plain heap memory owned by this value; no device holds a key to it.
unsafe impl Send for OwnedBuffer {}
// SAFETY: see `Send`; `&self` hands out only `&[u8]`.
unsafe impl Sync for OwnedBuffer {}

impl OwnedBuffer {
    fn zeroed(len: usize) -> Result<OwnedBuffer> {
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
        Ok(OwnedBuffer { ptr, layout })
    }
}

impl std::ops::Deref for OwnedBuffer {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: a live allocation of `layout.size()` initialised (zeroed, then written) bytes
        // owned by self. Only the CPU accesses it: an OwnedBuffer is either not yet registered
        // or already deregistered (every key to it revoked).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.layout.size()) }
    }
}

impl std::ops::DerefMut for OwnedBuffer {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`; `&mut self` makes this the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.layout.size()) }
    }
}

impl Drop for OwnedBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated with exactly this layout in `zeroed`, freed once.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), self.layout) };
    }
}

impl std::fmt::Debug for OwnedBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnedBuffer")
            .field("len", &self.layout.size())
            .finish()
    }
}

/// The lowest registration address [`random_iova`] picks: 2^48, above every user-space address
/// of x86-64 (47-bit) and AArch64 (48-bit) Linux, so an `addr` handed out is never a pointer.
pub const IOVA_MIN: u64 = 1 << 48;
/// The end of the range [`random_iova`] picks from: any buffer (at most 2^40 bytes here)
/// registered below it ends before 2^63.
pub const IOVA_END: u64 = 1 << 62;

/// A registration address from the random `r`: page-aligned (as our buffers are: the provider
/// keeps the page offset of the address and of the buffer equal), in
/// [`IOVA_MIN`]`..`[`IOVA_END`].
#[must_use]
pub fn random_iova(r: u64, page: u64) -> u64 {
    let page = if page.is_power_of_two() { page } else { 4096 };
    let span = IOVA_END - IOVA_MIN;
    (IOVA_MIN + r % span) & !(page - 1)
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let ps = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(ps)
        .ok()
        .filter(|p| p.is_power_of_two())
        .unwrap_or(4096)
}

/// A registration and the buffer it covers. Keeps its PD alive; the buffer is freed only after
/// the registration is gone (on drop, or handed over by [`Region::deregister`]).
struct Region {
    /// Null once deregistered.
    mr: *mut ffi::ibv_mr,
    /// The address the region is registered at (what peers and work requests name): random,
    /// not the buffer's own address, so handing it out discloses nothing of our heap.
    iova: u64,
    // Taken (handed over or freed) only after `mr` is deregistered; leaked if that fails.
    buf: ManuallyDrop<OwnedBuffer>,
    lkey: u32,
    rkey: u32,
    access: Access,
    pd: ProtectionDomain,
}

// SAFETY: the MR handle is usable from any thread (verbs are thread-safe) and the buffer is
// plain heap memory owned by this value.
unsafe impl Send for Region {}
// SAFETY: see `Send`; `&self` methods only read fields.
unsafe impl Sync for Region {}

impl Region {
    fn new(pd: &ProtectionDomain, len: usize, access: Access) -> Result<Region> {
        // A low RLIMIT_MEMLOCK would fail ibv_reg_mr with a bare ENOMEM: say so first.
        crate::memlock::check(len as u64)?;
        let buf = OwnedBuffer::zeroed(len)?;
        let iova = if pd.context().honors_iova() {
            random_iova(getrandom::u64().map_err(Error::Random)?, page_size() as u64)
        } else {
            // The device addresses the region by its virtual address (siw): register it there.
            buf.ptr.as_ptr() as u64
        };
        // SAFETY: `buf` is a live allocation of `len` bytes, owned by the Region built below,
        // which deregisters before freeing it; the PD is valid. `iova` is page-aligned like the
        // buffer (or is its address) and `iova + len` does not overflow (see `random_iova`).
        let mr = unsafe {
            ffi::ibv_reg_mr_iova2(pd.0.pd, buf.ptr.as_ptr().cast(), len, iova, access.bits())
        };
        if mr.is_null() {
            return Err(Error::last_os(
                VerbOp::RegMr,
                format!("{len} bytes, {access:?}"),
            ));
        }
        // SAFETY: `mr` is non-null and valid until ibv_dereg_mr.
        let (lkey, rkey) = unsafe { ((*mr).lkey, (*mr).rkey) };
        Ok(Region {
            mr,
            iova,
            buf: ManuallyDrop::new(buf),
            lkey,
            rkey,
            access,
            pd: pd.clone(),
        })
    }

    fn addr(&self) -> u64 {
        self.iova
    }

    fn len(&self) -> usize {
        self.buf.layout.size()
    }

    /// Deregisters (revoking the lkey and rkey) and hands the buffer over. If deregistration
    /// fails the buffer is leaked: the registration may still let the device write it.
    fn deregister(&mut self) -> Result<OwnedBuffer> {
        let mr = std::mem::replace(&mut self.mr, std::ptr::null_mut());
        if mr.is_null() {
            return Err(Error::invalid(
                "the memory region was already deregistered",
                "deregister a region once",
            ));
        }
        // SAFETY: `mr` came from ibv_reg_mr; it was swapped out for null, so it is
        // deregistered exactly once.
        let rc = unsafe { ffi::ibv_dereg_mr(mr) };
        if rc != 0 {
            return Err(Error::verb(
                VerbOp::DeregMr,
                format!("{} bytes at {:#x}", self.len(), self.addr()),
                rc,
            ));
        }
        // Whatever the device wrote before the registration ended is read after this point.
        fence(Ordering::Acquire);
        // SAFETY: the registration is gone, so no device can access the buffer any more. `buf`
        // is taken exactly once: `mr` is null from now on, so neither this function nor Drop
        // gets here again.
        Ok(unsafe { ManuallyDrop::take(&mut self.buf) })
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        if self.mr.is_null() {
            return; // handed over by `deregister`
        }
        if let Err(e) = self.deregister() {
            // The registration may still pin the memory: the buffer stays leaked rather than
            // freed under a device that might access it.
            tracing::error!("{e}; leaking the buffer to stay safe");
        }
    }
}

impl std::fmt::Debug for Region {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Region")
            .field("addr", &format_args!("{:#x}", self.addr()))
            .field("len", &self.len())
            .field("lkey", &format_args!("{:#x}", self.lkey))
            .field("rkey", &format_args!("{:#x}", self.rkey))
            .field("access", &self.access)
            .finish()
    }
}

/// The accessors both kinds of region share.
macro_rules! region_accessors {
    () => {
        /// Address of the buffer, as a peer must use it in RDMA operations (64 bits: never
        /// truncate).
        #[must_use]
        pub fn addr(&self) -> u64 {
            self.0.addr()
        }

        /// Length in bytes (at least 1).
        #[must_use]
        pub fn len(&self) -> usize {
            self.0.len()
        }

        /// Always false (regions have at least one byte); present for API symmetry.
        #[must_use]
        pub fn is_empty(&self) -> bool {
            self.len() == 0
        }

        /// Local key, for work requests on this side.
        #[must_use]
        pub fn lkey(&self) -> u32 {
            self.0.lkey
        }

        /// Remote key, to give a peer so it may access the buffer.
        #[must_use]
        pub fn rkey(&self) -> u32 {
            self.0.rkey
        }

        /// The access flags it was registered with.
        #[must_use]
        pub fn access(&self) -> Access {
            self.0.access
        }

        /// The protection domain it belongs to.
        pub fn pd(&self) -> &ProtectionDomain {
            &self.0.pd
        }
    };
}

/// A registered buffer that only this process writes: the device only reads it (the source of
/// an RDMA Write). Keeps its PD alive; on drop it is deregistered *before* the buffer is freed.
///
/// Its access flags never include [`Access::REMOTE_WRITE`] ([`ProtectionDomain::register`]
/// refuses it), and this crate posts no work request that writes local memory (receives have no
/// scatter list, there is no RDMA Read), so the CPU may read and write it at any time.
/// Changing it while a posted write still reads it changes what is sent, nothing more.
///
/// Dropping it while a posted work request still uses it is safe: deregistration revokes its
/// keys before the memory is freed, and the work request completes with an error.
#[must_use]
#[derive(Debug)]
pub struct MemoryRegion(Region);

impl MemoryRegion {
    region_accessors!();

    /// The buffer contents.
    #[must_use]
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: a live allocation of `len` initialised bytes owned by self; no device writes
        // it (see the type docs), and `&self` rules out a `&mut` from this process.
        unsafe { std::slice::from_raw_parts(self.0.buf.ptr.as_ptr(), self.len()) }
    }

    /// The buffer, for filling before a write.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`; `&mut self` makes this the only reference. A device may be
        // reading it for a posted write (it never writes it), which is no Rust access.
        unsafe { std::slice::from_raw_parts_mut(self.0.buf.ptr.as_ptr(), self.len()) }
    }
}

/// A registered buffer exposed to peers: whoever holds its rkey and a connected queue pair may
/// RDMA-Write into it (with [`Access::REMOTE_WRITE`]) at any moment, behind the CPU's back, even
/// after the write you were waiting for completed. So it is never seen as a slice while it is
/// registered: [`deregister`](Self::deregister) revokes every key first and then hands the
/// buffer over, and only then does the CPU read what landed.
///
/// Keeps its PD alive; on drop it is deregistered *before* the buffer is freed.
#[must_use]
#[derive(Debug)]
pub struct ExposedRegion(Region);

impl ExposedRegion {
    region_accessors!();

    /// Ends the registration, so that no peer (and no local work request) can access the buffer
    /// any more, and returns the buffer with what was written into it.
    ///
    /// Destroy the queue pairs the peer writes through first: a write that is still arriving
    /// then fails at the responder instead of racing the deregistration.
    ///
    /// # Errors
    /// [`Error::Verb`] ([`VerbOp::DeregMr`]); the buffer is then leaked, not freed, because the
    /// device may still be allowed to write it.
    pub fn deregister(mut self) -> Result<OwnedBuffer> {
        self.0.deregister()
    }

    /// Byte `index` as it is right now, read with a volatile load: for a side that spins until
    /// a peer's RDMA Write lands (the last byte of a ping-pong). `None` if `index` is outside
    /// the buffer. Only that byte is read; the rest of the buffer is still read after
    /// [`deregister`](Self::deregister).
    #[must_use]
    pub fn volatile_byte(&self, index: usize) -> Option<u8> {
        if index >= self.len() {
            return None;
        }
        // SAFETY: `index` is inside the live allocation of `len` bytes this region owns (it is
        // freed only after deregistration, which takes `self` by value). A device may write the
        // byte at any time; a single-byte volatile load cannot tear, every bit pattern is a
        // valid u8, and no Rust reference to the buffer exists while it is registered, so the
        // load aliases nothing the compiler reasons about.
        let b = unsafe { std::ptr::read_volatile(self.0.buf.ptr.as_ptr().add(index)) };
        // What the device wrote before this byte is seen by whatever the caller does next.
        fence(Ordering::Acquire);
        Some(b)
    }

    /// Sets byte `index` to `value` with a volatile store: for a side that marks a byte its
    /// peer's next RDMA Write must overwrite (the bench server's check that a ping wrote its
    /// whole extent). `None` if `index` is outside the buffer. A peer's write may land on the
    /// byte at any time before or after; whichever comes last stays.
    pub fn set_volatile_byte(&self, index: usize, value: u8) -> Option<()> {
        if index >= self.len() {
            return None;
        }
        // SAFETY: as in `volatile_byte`: inside the live allocation, a single-byte volatile
        // store cannot tear, and no Rust reference to the buffer exists while it is registered.
        unsafe { std::ptr::write_volatile(self.0.buf.ptr.as_ptr().add(index), value) };
        // Stored before whatever the caller posts next (a work request the peer answers).
        fence(Ordering::Release);
        Some(())
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
    fn a_memory_region_is_never_remotely_writable() {
        let e = check_local_access(Access::LOCAL_WRITE | Access::REMOTE_WRITE).unwrap_err();
        assert!(e.to_string().contains("register_exposed"), "{e}");
        assert!(check_local_access(Access::NONE).is_ok());
        assert!(check_local_access(Access::LOCAL_WRITE | Access::REMOTE_READ).is_ok());
    }

    #[test]
    fn buffers_are_zeroed_and_page_aligned() {
        assert!(OwnedBuffer::zeroed(0).is_err());
        let b = OwnedBuffer::zeroed(10_000).unwrap();
        assert_eq!(b.ptr.as_ptr() as usize % page_size(), 0);
        assert_eq!(b.len(), 10_000);
        assert!(b.iter().all(|x| *x == 0));
    }

    /// Issue 16, item 9: the address a region is registered at is random, page-aligned, and
    /// never a user-space address (so never our heap's), with room for any buffer after it.
    #[test]
    fn registration_addresses_are_random_and_not_pointers() {
        for r in [0, 1, 4095, u64::MAX, u64::MAX / 3, 0x7fff_dead_beef] {
            let iova = random_iova(r, 4096);
            assert_eq!(iova % 4096, 0, "{r:#x}");
            assert!((IOVA_MIN..IOVA_END).contains(&iova), "{iova:#x}");
            assert!(iova.checked_add(1 << 40).is_some_and(|end| end < 1 << 63));
        }
        let heap = OwnedBuffer::zeroed(4096).unwrap();
        assert!(
            (heap.ptr.as_ptr() as u64) < IOVA_MIN,
            "a heap address is below the range"
        );
        let drawn: Vec<u64> = (0..32)
            .map(|_| random_iova(getrandom::u64().unwrap(), page_size() as u64))
            .collect();
        assert!(drawn.iter().any(|&a| a != drawn[0]), "{drawn:x?}");
        assert_eq!(
            random_iova(5 << 12, 3) % 4096,
            0,
            "a bad page size falls back to 4 KiB"
        );
    }
}
