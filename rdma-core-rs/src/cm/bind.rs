//! Which device and port RDMA CM binds a local address to, and binding an id to it: what both
//! the connection code and the choice of the local port ([`LocalPort`](crate::LocalPort), on
//! iWARP) need.

use std::net::{IpAddr, SocketAddr};

use super::sys as cm;

use super::raw::{self, Channel, Id};
use crate::error::{Error, Result, VerbOp};

/// The device and port RDMA CM binds `local` to: the RDMA device whose netdev holds the
/// address, on every transport (on iWARP the only way to know it: its GIDs are not
/// addresses).
///
/// # Errors
/// RDMA CM unavailable ([`VerbOp::CmChannel`]), or no RDMA device carries the address
/// ([`VerbOp::CmBindAddr`]).
pub fn device_for(local: IpAddr) -> Result<(String, u8)> {
    let ch = Channel::new()?;
    let id = Id::new(&ch)?;
    bind(&id, local)?;
    id.device()
        .ok_or_else(|| Error::verb(VerbOp::CmBindAddr, local.to_string(), libc::ENODEV))
}

pub(super) fn bind(id: &Id, local: IpAddr) -> Result<()> {
    let addr = raw::std_to_sockaddr(SocketAddr::new(local, 0));
    // SAFETY: valid id; `addr` is a valid sockaddr of its length, which librdmacm only reads.
    let rc = unsafe { cm::rdma_bind_addr(id.raw(), addr.as_ptr().cast_mut().cast()) };
    if rc != 0 {
        return Err(Error::last_os(VerbOp::CmBindAddr, local.to_string()));
    }
    Ok(())
}
