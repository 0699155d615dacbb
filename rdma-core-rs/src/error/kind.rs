//! The coarse classes an error falls in ([`super::Error::kind`], [`super::VerbOp`]'s).

/// Coarse error classes, for choosing exit codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// No RDMA in the kernel, no device, or the named device does not exist / cannot be opened.
    NoDevice,
    /// The port is unusable: not active, no usable GID, cannot be queried.
    Port,
    /// Creating or configuring a verbs object failed.
    Setup,
    /// Posting or completing work failed.
    Transfer,
    /// A wait ran past its deadline.
    Timeout,
    /// The caller passed something invalid (bad GID index, range, length).
    Usage,
}
