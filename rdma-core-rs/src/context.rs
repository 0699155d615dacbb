//! Device discovery, the device [`Context`], port queries and GID selection.

use std::ffi::CStr;
use std::path::Path;
use std::ptr;
use std::sync::Arc;

use ibverbs_sys as ffi;

use crate::error::{Error, Result, VerbOp};
use crate::transport::Transport;
use crate::types::{
    Gid, GidEntry, GidKind, LinkLayer, Mtu, PortInfo, PortState, describe_gid_table,
};

/// Where the kernel lists RDMA devices; missing means the kernel has no RDMA core loaded.
const SYSFS_INFINIBAND: &str = "/sys/class/infiniband";

/// Name and node GUID of an RDMA device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Device name, e.g. `rxe0`, `mlx5_0`.
    pub name: String,
    /// Node GUID in host byte order.
    pub guid: u64,
}

/// The device list from `ibv_get_device_list`, freed on drop.
struct DeviceList {
    list: *mut *mut ffi::ibv_device,
    len: usize,
}

impl DeviceList {
    fn get() -> Result<DeviceList> {
        let mut n: libc::c_int = 0;
        // SAFETY: `n` is a valid out-pointer; the returned list is freed in Drop.
        let list = unsafe { ffi::ibv_get_device_list(&mut n) };
        if list.is_null() {
            let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
            return Err(classify_list_failure(
                errno,
                Path::new(SYSFS_INFINIBAND).exists(),
            ));
        }
        Ok(DeviceList {
            list,
            len: usize::try_from(n).unwrap_or(0),
        })
    }

    fn devices(&self) -> impl Iterator<Item = (*mut ffi::ibv_device, DeviceInfo)> + '_ {
        (0..self.len).filter_map(move |i| {
            // SAFETY: `i < len`, the list holds `len` valid entries (plus a NULL terminator).
            let dev = unsafe { *self.list.add(i) };
            if dev.is_null() {
                return None;
            }
            // SAFETY: `dev` is a valid device from the list; the name is a NUL-terminated string
            // owned by the device.
            let name_ptr = unsafe { ffi::ibv_get_device_name(dev) };
            let name = if name_ptr.is_null() {
                format!("device{i}")
            } else {
                // SAFETY: non-null, NUL-terminated, lives as long as the list.
                unsafe { CStr::from_ptr(name_ptr) }
                    .to_string_lossy()
                    .into_owned()
            };
            // SAFETY: `dev` is valid; the GUID comes back big-endian.
            let guid = u64::from_be(unsafe { ffi::ibv_get_device_guid(dev) });
            Some((dev, DeviceInfo { name, guid }))
        })
    }
}

impl Drop for DeviceList {
    fn drop(&mut self) {
        // SAFETY: `list` came from ibv_get_device_list and is freed exactly once. Contexts opened
        // from it stay valid (libibverbs reference-counts devices).
        unsafe { ffi::ibv_free_device_list(self.list) };
    }
}

/// Decides which error a failed `ibv_get_device_list` means. ENOSYS (no uverbs ABI in sysfs), or
/// any failure while `/sys/class/infiniband` is missing, means the kernel has no RDMA.
pub(crate) fn classify_list_failure(errno: i32, sysfs_exists: bool) -> Error {
    if errno == libc::ENOSYS || !sysfs_exists {
        Error::NoRdmaInKernel {
            errno: if errno == 0 { libc::ENOSYS } else { errno },
        }
    } else {
        Error::verb(
            VerbOp::ListDevices,
            "",
            if errno == 0 { libc::EIO } else { errno },
        )
    }
}

/// Lists the RDMA devices. An empty list is `Ok(vec![])`; a kernel without RDMA gives
/// [`Error::NoRdmaInKernel`].
pub fn devices() -> Result<Vec<DeviceInfo>> {
    let list = DeviceList::get()?;
    Ok(list.devices().map(|(_, info)| info).collect())
}

pub(crate) struct ContextInner {
    pub(crate) ctx: *mut ffi::ibv_context,
    name: String,
    guid: u64,
}

// SAFETY: an ibv_context is usable from any thread; libibverbs and the providers serialise
// internally where needed (verbs are documented thread-safe). We only hand out the pointer to
// verbs calls and close it once, in Drop, when no clone or child remains.
unsafe impl Send for ContextInner {}
// SAFETY: see `Send`: all shared use goes through thread-safe verbs calls.
unsafe impl Sync for ContextInner {}

impl Drop for ContextInner {
    fn drop(&mut self) {
        // SAFETY: `ctx` came from ibv_open_device; every child (PD, CQ, ...) holds an Arc of this
        // inner, so all of them are already destroyed.
        let rc = unsafe { ffi::ibv_close_device(self.ctx) };
        if rc != 0 {
            tracing::warn!(device = %self.name, rc, "ibv_close_device failed");
        }
    }
}

impl std::fmt::Debug for ContextInner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("name", &self.name)
            .field("guid", &self.guid)
            .finish()
    }
}

/// An open RDMA device. Cheap to clone; the device is closed when the last clone and the last
/// object created from it (PD, CQ, QP, MR) are dropped.
#[derive(Clone, Debug)]
#[must_use]
pub struct Context(pub(crate) Arc<ContextInner>);

impl Context {
    /// Opens `name`, or the first device if `None`.
    ///
    /// # Errors
    /// [`Error::NoRdmaInKernel`] on a kernel without RDMA, [`Error::NoDevices`] when the list is
    /// empty, [`Error::DeviceNotFound`] for an unknown name, [`Error::Verb`] if opening fails.
    pub fn open(name: Option<&str>) -> Result<Context> {
        let list = DeviceList::get()?;
        let all: Vec<_> = list.devices().collect();
        let chosen = match name {
            None => all.first(),
            Some(wanted) => all.iter().find(|(_, info)| info.name == wanted),
        };
        let Some((dev, info)) = chosen else {
            return Err(match name {
                _ if all.is_empty() => Error::NoDevices,
                Some(wanted) => Error::DeviceNotFound {
                    wanted: wanted.to_owned(),
                    available: all.iter().map(|(_, i)| i.name.clone()).collect(),
                },
                None => Error::NoDevices,
            });
        };
        // SAFETY: `dev` is a valid device of the live list.
        let ctx = unsafe { ffi::ibv_open_device(*dev) };
        if ctx.is_null() {
            return Err(Error::last_os(VerbOp::OpenDevice, info.name.clone()));
        }
        tracing::debug!(device = %info.name, guid = format_args!("{:#018x}", info.guid), "opened RDMA device");
        Ok(Context(Arc::new(ContextInner {
            ctx,
            name: info.name.clone(),
            guid: info.guid,
        })))
    }

    /// The device name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.0.name
    }

    /// The device's node GUID (host byte order).
    #[must_use]
    pub fn guid(&self) -> u64 {
        self.0.guid
    }

    /// How the device carries RDMA (InfiniBand/RoCE or iWARP).
    #[must_use]
    pub fn transport(&self) -> Transport {
        // SAFETY: an open context points at its device, which outlives it.
        let raw = unsafe { (*(*self.0.ctx).device).transport_type };
        Transport::from_ibv(raw)
    }

    pub(crate) fn raw(&self) -> *mut ffi::ibv_context {
        self.0.ctx
    }

    /// How many physical ports the device has (`ibv_query_device`'s `phys_port_cnt`).
    ///
    /// # Errors
    /// [`Error::Verb`] ([`VerbOp::QueryDevice`]).
    pub fn port_count(&self) -> Result<u8> {
        Ok(self.query_device()?.phys_port_cnt)
    }

    fn query_device(&self) -> Result<ffi::ibv_device_attr> {
        // SAFETY: ibv_device_attr is a plain C struct of integers and arrays of integers, for
        // which all-zero bytes are a valid value.
        let mut attr: ffi::ibv_device_attr = unsafe { std::mem::zeroed() };
        // SAFETY: valid context; `attr` is a writable ibv_device_attr.
        let rc = unsafe { ffi::ibv_query_device(self.raw(), &mut attr) };
        if rc != 0 {
            return Err(Error::verb(VerbOp::QueryDevice, self.name().to_owned(), rc));
        }
        Ok(attr)
    }

    /// Whether memory registered here is addressed by the IOVA it was registered at
    /// (`ibv_reg_mr_iova2`). Soft-iWARP (siw, vendor 0x626d74) ignores the IOVA and addresses
    /// a region by its virtual address, so it must be registered at that address.
    #[must_use]
    pub fn honors_iova(&self) -> bool {
        /// siw's vendor id ("bmt").
        const SIW_VENDOR: u32 = 0x0062_6d74;
        !(self.transport() == Transport::Iwarp
            && self.query_device().is_ok_and(|a| a.vendor_id == SIW_VENDOR))
    }

    /// Queries a port (numbered from 1).
    ///
    /// # Errors
    /// [`Error::Verb`] ([`VerbOp::QueryPort`]); EINVAL means no such port.
    pub fn query_port(&self, port: u8) -> Result<PortInfo> {
        let on = format!("port {port} of {}", self.name());
        if port == 0 {
            return Err(Error::verb(VerbOp::QueryPort, on, libc::EINVAL));
        }
        // The full (current) struct, zeroed: the exported ibv_query_port fills only the
        // older, shorter compat layout, which is a prefix of it.
        let mut attr = ffi::ibv_port_attr {
            state: 0,
            max_mtu: 0,
            active_mtu: 0,
            gid_tbl_len: 0,
            port_cap_flags: 0,
            max_msg_sz: 0,
            bad_pkey_cntr: 0,
            qkey_viol_cntr: 0,
            pkey_tbl_len: 0,
            lid: 0,
            sm_lid: 0,
            lmc: 0,
            max_vl_num: 0,
            sm_sl: 0,
            subnet_timeout: 0,
            init_type_reply: 0,
            active_width: 0,
            active_speed: 0,
            phys_state: 0,
            link_layer: 0,
            flags: 0,
            port_cap_flags2: 0,
            active_speed_ex: 0,
        };
        // SAFETY: valid context; `attr` is a writable struct at least as large as the compat
        // struct the library writes.
        let rc = unsafe { ffi::ibv_query_port(self.raw(), port, ptr::from_mut(&mut attr).cast()) };
        if rc != 0 {
            return Err(Error::verb(VerbOp::QueryPort, on, rc));
        }
        port_info_from_attr(port, &attr).ok_or_else(|| {
            Error::verb(
                VerbOp::QueryPort,
                format!("{on} (reported an invalid MTU)"),
                libc::EIO,
            )
        })
    }

    /// Like [`query_port`](Self::query_port), but fails with [`Error::PortNotActive`] unless the
    /// port is ACTIVE.
    ///
    /// # Errors
    /// As `query_port`, plus [`Error::PortNotActive`].
    pub fn require_active_port(&self, port: u8) -> Result<PortInfo> {
        let info = self.query_port(port)?;
        if info.state != PortState::Active {
            return Err(Error::PortNotActive {
                port,
                state: info.state,
            });
        }
        Ok(info)
    }

    /// The GID in slot `index` of `port`'s table (all zeros where the slot is empty): one
    /// query, where [`gid_table`](Self::gid_table) reads every slot.
    ///
    /// # Errors
    /// [`Error::Verb`] ([`VerbOp::QueryGid`]).
    pub fn query_gid(&self, port: u8, index: u32) -> Result<Gid> {
        match self.gid_entry(port, index) {
            Ok(entry) => Ok(Gid::from_ffi(&entry.gid)),
            Err(libc::ENODATA | libc::EINVAL) => Ok(Gid([0; 16])),
            Err(errno) => Err(Error::verb(
                VerbOp::QueryGid,
                format!("port {port} index {index}"),
                errno,
            )),
        }
    }

    /// `ibv_query_gid_ex` for one slot; `Err` is its errno (`ENODATA`, or `EINVAL` from the
    /// sysfs fallback, for an empty slot).
    fn gid_entry(&self, port: u8, index: u32) -> std::result::Result<ffi::ibv_gid_entry, i32> {
        let mut entry = zeroed_gid_entry();
        // SAFETY: valid context; `entry` is a writable ibv_gid_entry and we pass its size.
        let rc = unsafe {
            ffi::_ibv_query_gid_ex(
                self.raw(),
                u32::from(port),
                index,
                &mut entry,
                0,
                size_of::<ffi::ibv_gid_entry>(),
            )
        };
        if rc == 0 { Ok(entry) } else { Err(rc) }
    }

    /// The valid (non-zero) entries of a port's GID table, sorted by index.
    ///
    /// # Errors
    /// [`Error::Verb`] ([`VerbOp::QueryGid`]).
    pub fn gid_table(&self, port: u8) -> Result<Vec<GidEntry>> {
        let info = self.query_port(port)?;
        let len = info.gid_tbl_len;
        let mut out = Vec::new();
        let mut last_err = None;
        for index in 0..len {
            match self.gid_entry(port, index) {
                Ok(entry) => {
                    let gid = Gid::from_ffi(&entry.gid);
                    if gid.is_zero() {
                        continue;
                    }
                    let kind = GidKind::from_ibv(entry.gid_type).unwrap_or(
                        if info.link_layer == LinkLayer::Ethernet {
                            GidKind::RoceV1
                        } else {
                            GidKind::Ib
                        },
                    );
                    out.push(GidEntry { index, gid, kind });
                }
                // Empty entry (ENODATA from the kernel; the sysfs fallback gives EINVAL).
                Err(libc::ENODATA | libc::EINVAL) => {}
                Err(other) => last_err = Some(other),
            }
        }
        if let (true, Some(errno)) = (out.is_empty(), last_err) {
            return Err(Error::verb(VerbOp::QueryGid, format!("port {port}"), errno));
        }
        Ok(out)
    }

    /// Picks the GID to use on `port`: the explicit `index`, or automatically
    /// (see [`select_gid_in`]).
    ///
    /// # Errors
    /// [`Error::GidIndexInvalid`], [`Error::NoUsableGid`], or a GID query failure.
    pub fn select_gid(&self, port: &PortInfo, index: Option<u32>) -> Result<GidEntry> {
        let table = self.gid_table(port.num)?;
        if index.is_none() && self.transport() == Transport::Iwarp {
            // iWARP addresses by IP through RDMA CM; its GID (the MAC, not an address) is only
            // an identity, and the first one is as good as any.
            return table.first().copied().ok_or_else(|| Error::NoUsableGid {
                port: port.num,
                table: describe_gid_table(&table),
            });
        }
        select_gid_in(&table, port.link_layer, port.num, index)
    }
}

fn zeroed_gid_entry() -> ffi::ibv_gid_entry {
    ffi::ibv_gid_entry {
        gid: ffi::ibv_gid { raw: [0; 16] },
        gid_index: 0,
        port_num: 0,
        gid_type: 0,
        ndev_ifindex: 0,
    }
}

/// Converts port attributes. An out-of-range MTU on an ACTIVE port is an error (`None`); on a
/// port that is not active it is reported as 256 so callers still see the real problem, the
/// state.
fn port_info_from_attr(port: u8, attr: &ffi::ibv_port_attr) -> Option<PortInfo> {
    let state = PortState::from_ibv(attr.state);
    let mtu = |raw| match Mtu::from_ibv(raw) {
        Some(m) => Some(m),
        None if state != PortState::Active => Some(Mtu::M256),
        None => None,
    };
    Some(PortInfo {
        num: port,
        state,
        link_layer: LinkLayer::from_ibv(attr.link_layer),
        active_mtu: mtu(attr.active_mtu)?,
        max_mtu: mtu(attr.max_mtu)?,
        lid: attr.lid,
        gid_tbl_len: u32::try_from(attr.gid_tbl_len).unwrap_or(0),
    })
}

/// The GID selection rule, over a table (as from [`Context::gid_table`]):
///
/// * `Some(index)`: that entry, which must exist and be non-zero, else
///   [`Error::GidIndexInvalid`] listing the table.
/// * `None` on Ethernet (RoCE): the first RoCE v2 GID that is IPv4-mapped (`::ffff:a.b.c.d`),
///   else the first RoCE v2 GID, else the first RoCE v1 GID.
/// * `None` on InfiniBand (or unspecified): index 0.
///
/// Nothing usable gives [`Error::NoUsableGid`].
///
/// # Errors
/// As described above.
pub fn select_gid_in(
    table: &[GidEntry],
    link_layer: LinkLayer,
    port: u8,
    index: Option<u32>,
) -> Result<GidEntry> {
    let mut sorted: Vec<GidEntry> = table.iter().copied().filter(|e| !e.gid.is_zero()).collect();
    sorted.sort_by_key(|e| e.index);
    if let Some(index) = index {
        return sorted
            .iter()
            .find(|e| e.index == index)
            .copied()
            .ok_or_else(|| Error::GidIndexInvalid {
                port,
                index,
                table: describe_gid_table(&sorted),
            });
    }
    let found = match link_layer {
        LinkLayer::Ethernet => sorted
            .iter()
            .find(|e| e.kind == GidKind::RoceV2 && e.gid.is_ipv4_mapped())
            .or_else(|| sorted.iter().find(|e| e.kind == GidKind::RoceV2))
            .or_else(|| sorted.iter().find(|e| e.kind == GidKind::RoceV1)),
        LinkLayer::InfiniBand | LinkLayer::Unspecified => sorted.iter().find(|e| e.index == 0),
    };
    found.copied().ok_or_else(|| Error::NoUsableGid {
        port,
        table: describe_gid_table(&sorted),
    })
}

#[cfg(test)]
mod tests;
