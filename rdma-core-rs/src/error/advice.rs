//! The advice table: what to do about a failed verbs call (by call and errno) or a failed work
//! completion (by status), and the errno names the messages show.

use super::{NO_DEVICES_ADVICE, NO_RDMA_ADVICE, VerbOp};
use crate::types::WcStatus;

/// Symbolic errno name plus the OS description, e.g. `EINVAL, Invalid argument`.
#[must_use]
pub fn errno_label(errno: i32) -> String {
    let desc = std::io::Error::from_raw_os_error(errno).to_string();
    // std appends " (os error N)"; keep the text only.
    let desc = desc.split(" (os error").next().unwrap_or(&desc).to_owned();
    match errno_name(errno) {
        Some(name) => format!("{name}, {desc}"),
        None => format!("errno {errno}, {desc}"),
    }
}

/// Symbolic name of the errnos verbs calls return.
#[must_use]
pub fn errno_name(errno: i32) -> Option<&'static str> {
    Some(match errno {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::EINTR => "EINTR",
        libc::EIO => "EIO",
        libc::ENXIO => "ENXIO",
        libc::EAGAIN => "EAGAIN",
        libc::ENOMEM => "ENOMEM",
        libc::EACCES => "EACCES",
        libc::EFAULT => "EFAULT",
        libc::EBUSY => "EBUSY",
        libc::EEXIST => "EEXIST",
        libc::ENODEV => "ENODEV",
        libc::EINVAL => "EINVAL",
        libc::EMFILE => "EMFILE",
        libc::ENOSPC => "ENOSPC",
        libc::ERANGE => "ERANGE",
        libc::ENOSYS => "ENOSYS",
        libc::ENODATA => "ENODATA",
        libc::EPROTONOSUPPORT => "EPROTONOSUPPORT",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::EADDRNOTAVAIL => "EADDRNOTAVAIL",
        libc::ENETUNREACH => "ENETUNREACH",
        libc::ETIMEDOUT => "ETIMEDOUT",
        libc::EHOSTUNREACH => "EHOSTUNREACH",
        _ => return None,
    })
}

/// Advice for a failed verbs call, by call and errno.
#[must_use]
pub fn advice_for(op: VerbOp, errno: i32) -> String {
    use VerbOp as V;
    let perm = "no permission on /dev/infiniband/uverbs*: run as root or as a member of the \
                group owning it (often `rdma`)";
    let s: &str = match (op, errno) {
        (_, libc::EPERM | libc::EACCES) if op != V::RegMr => perm,
        (V::ListDevices, libc::ENOSYS | libc::ENOENT) => NO_RDMA_ADVICE,
        (V::ListDevices, _) => NO_DEVICES_ADVICE,
        (V::OpenDevice, _) => {
            "the device could not be opened: check `ibv_devices`, that ib_uverbs is loaded and \
             /dev/infiniband/uverbs* exists, and that the provider library (ibverbs-providers, \
             librxe for Soft-RoCE) is installed"
        }
        (V::QueryPort | V::QueryGid, libc::EINVAL) => {
            "no such port or GID index: ports are numbered from 1; see `ibv_devinfo -v`"
        }
        (V::QueryDevice | V::QueryDeviceEx | V::QueryPort | V::QueryGid, _) => {
            "check the device with `ibv_devinfo -v` and `rdma link`"
        }
        (V::RegMr, libc::ENOMEM | libc::EAGAIN | libc::EPERM | libc::EACCES) => {
            "the buffer could not be pinned: raise `ulimit -l` (locked memory), e.g. \
             `ulimit -l unlimited` or memlock in /etc/security/limits.conf"
        }
        (V::RegMr, libc::EINVAL) => {
            "invalid access flags or length: REMOTE_WRITE needs LOCAL_WRITE, and the device may \
             limit the region size (max_mr_size in `ibv_devinfo -v`)"
        }
        (V::RegMr, _) => "memory registration failed; check `ibv_devinfo -v` limits",
        (V::CmChannel, _) => {
            "RDMA CM is not available: load its kernel modules (`modprobe rdma_ucm`, which \
             brings rdma_cm, iw_cm and ib_cm) and check that /dev/infiniband/rdma_cm exists"
        }
        (V::CmBindAddr, libc::EADDRNOTAVAIL | libc::ENODEV) => {
            "no RDMA device carries this address: check `rdma link` and `ip addr`"
        }
        (V::CmResolveAddr | V::CmResolveRoute, _) => {
            "RDMA CM found no RDMA path to the peer: its address must be reachable through an \
             RDMA netdev (check `rdma link`, `ip route`, `ip neigh`)"
        }
        (
            V::CmCreateId
            | V::CmBindAddr
            | V::CmListen
            | V::CmConnect
            | V::CmAccept
            | V::CmInitQpAttr
            | V::CmEvent,
            _,
        ) => "the RDMA CM step failed; check `rdma link`, `rdma resource` and `dmesg`",
        (V::DeregMr, _) => {
            "the memory region could not be deregistered (see `dmesg`); its buffer is kept \
             allocated (leaked), so that the device can never write freed memory"
        }
        (V::CreateCqEx, libc::EOPNOTSUPP | libc::ENOSYS) => {
            "the device cannot make this extended CQ: completion timestamps need a device with \
             a completion clock (`Context::completion_clock`; Soft-RoCE has none), and \
             Soft-iWARP makes no extended CQs at all; use a plain CQ and wall-clock times"
        }
        (
            V::AllocPd | V::CreateCompChannel | V::CreateCq | V::CreateCqEx | V::CreateQp,
            libc::ENOMEM,
        ) => "the device is out of resources: close other RDMA users or use smaller queues",
        (V::CreateCompChannel, libc::EMFILE) => "too many open files: raise `ulimit -n`",
        (V::CreateCq | V::CreateCqEx, libc::EINVAL) => {
            "CQ size out of range: it must not exceed max_cqe (see `ibv_devinfo -v`)"
        }
        (V::CreateQp, libc::EINVAL) => {
            "QP capabilities exceed the device limits: reduce max_send_wr/max_recv_wr/SGEs/inline \
             (see max_qp_wr, max_sge in `ibv_devinfo -v`)"
        }
        (V::CreateQp, libc::EOPNOTSUPP | libc::ENOSYS) => {
            "the device does not support RC queue pairs"
        }
        (V::ModifyQpInit, libc::EINVAL) => {
            "bad port number, pkey index or access flags: check the port with `ibv_devinfo`"
        }
        (V::ModifyQpRtr, libc::EINVAL) => {
            "bad address vector — no RoCE v2 GID on port 1? pass --gid-idx or check `rdma link` \
             / `ibv_devinfo -v`; also check that the path MTU is not above the port's active MTU"
        }
        (
            V::ModifyQpRtr,
            libc::ETIMEDOUT
            | libc::EHOSTUNREACH
            | libc::ENETUNREACH
            | libc::ENODATA
            | libc::EADDRNOTAVAIL
            | libc::ENOENT,
        ) => {
            "could not resolve the peer's Ethernet address from its GID: the peer's IP must be \
             reachable through the RDMA netdev (check `ip addr`, `ip route`, `ip neigh`, and \
             that the peer GID index matches an address it really has)"
        }
        (V::ModifyQpRts, libc::EINVAL) => {
            "bad RTS attributes (timeout, retry counts, PSN, rd_atomic) or the QP is not in RTR"
        }
        (V::ModifyQpInit | V::ModifyQpRtr | V::ModifyQpRts | V::QueryQp, _) => {
            "the queue pair could not change state; check `ibv_devinfo -v` and the kernel log \
             (`dmesg`)"
        }
        (V::PostSend, libc::ENOMEM) => {
            "the send queue is full: wait for completions before posting more, or raise \
             max_send_wr"
        }
        (V::PostSend, libc::EINVAL) => {
            "invalid work request: the QP must be in RTS, and length/lkey must fit the memory \
             region"
        }
        (V::PostRecv, libc::ENOMEM) => {
            "the receive queue is full: raise max_recv_wr or post fewer receives"
        }
        (V::PostRecv, libc::EINVAL) => "invalid receive request: the QP must be at least in INIT",
        (V::PostSend | V::PostRecv, _) => {
            "posting failed; the QP may be in the error state after an earlier failure"
        }
        (V::PollCq, _) => {
            "the completion queue failed (overrun or device error) and cannot be used; set up \
             the connection again"
        }
        (V::ReqNotifyCq | V::WaitCqEvent, _) => {
            "completion events failed; retry with polling mode (CqMode::Poll)"
        }
        (V::AllocPd | V::CreateCompChannel | V::CreateCq | V::CreateCqEx | V::CreateQp, _) => {
            "check the device with `ibv_devinfo -v` and the kernel log (`dmesg`)"
        }
    };
    s.to_owned()
}

/// Advice for a failed work completion, by status.
#[must_use]
pub fn completion_advice(status: WcStatus) -> String {
    let s = match status {
        WcStatus::RetryExcErr => {
            "no ACK from the peer: check path/GID index/MTU, and that UDP 4791 is not firewalled"
        }
        WcStatus::RemAccessErr => {
            "the server refused the write: wrong rkey, address outside its buffer, or its MR/QP \
             lacks remote write"
        }
        WcStatus::RnrRetryExcErr => "the peer posted no receive for write-with-immediate",
        WcStatus::WrFlushErr => "QP went to error state after an earlier failure",
        WcStatus::RemInvReqErr => {
            "the peer rejected the request as invalid: its QP may lack REMOTE_WRITE access, or \
             the message exceeds its limits"
        }
        WcStatus::LocProtErr => {
            "local protection error: the source buffer is not covered by a memory region of this \
             protection domain (wrong lkey)"
        }
        WcStatus::LocLenErr => {
            "local length error: a receive buffer was too small or the message exceeds the port's \
             max message size"
        }
        WcStatus::LocQpOpErr => "local QP error: the work request is inconsistent with the QP",
        WcStatus::RemOpErr => "the peer could not complete the operation (its QP failed)",
        WcStatus::BadRespErr => {
            "unexpected response from the peer (mismatched QP numbers or PSNs?)"
        }
        WcStatus::RespTimeoutErr => "response timeout: the peer stopped answering",
        WcStatus::Success => "no error",
        _ => "the work request failed; check both sides' logs and `dmesg`",
    };
    s.to_owned()
}

/// The advice of [`Error::MemlockLimit`](super::Error::MemlockLimit); `total` is what the limit must at least be.
pub(crate) fn memlock_advice(total: u64) -> String {
    let kib = total.div_ceil(1024);
    format!(
        "raise the locked-memory limit: `ulimit -l {kib}` (KiB) or `ulimit -l unlimited` in the \
         shell that starts it, `LimitMEMLOCK=` in its systemd unit (the rdma-server package's \
         unit sets 80M, for its 64 MiB --max-pinned), or a `memlock` line in /etc/security/limits.d/; or register less \
         (a smaller --buffer-size, fewer --max-clients)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{Error, ErrorKind};
    use crate::types::WcOpcode;

    #[test]
    fn reg_mr_enomem_advises_ulimit() {
        for errno in [libc::ENOMEM, libc::EAGAIN, libc::EPERM] {
            let a = advice_for(VerbOp::RegMr, errno);
            assert!(a.contains("ulimit -l"), "{errno}: {a}");
        }
        assert!(!advice_for(VerbOp::RegMr, libc::EINVAL).contains("ulimit"));
    }

    #[test]
    fn an_extended_cq_refused_points_at_the_clock_and_the_plain_cq() {
        for errno in [libc::EOPNOTSUPP, libc::ENOSYS] {
            let a = advice_for(VerbOp::CreateCqEx, errno);
            assert!(
                a.contains("completion_clock") && a.contains("plain CQ"),
                "{a}"
            );
        }
        // Other failures of it read as any CQ's.
        assert_eq!(
            advice_for(VerbOp::CreateCqEx, libc::EINVAL),
            advice_for(VerbOp::CreateCq, libc::EINVAL)
        );
        assert!(!advice_for(VerbOp::CreateCq, libc::EOPNOTSUPP).contains("clock"));
    }

    #[test]
    fn permission_errors_advise_root_except_for_reg_mr() {
        assert!(advice_for(VerbOp::OpenDevice, libc::EACCES).contains("root"));
        assert!(advice_for(VerbOp::CreateQp, libc::EPERM).contains("root"));
    }

    #[test]
    fn rtr_address_resolution_errors() {
        for errno in [libc::ETIMEDOUT, libc::EHOSTUNREACH, libc::ENODATA] {
            assert!(
                advice_for(VerbOp::ModifyQpRtr, errno).contains("resolve"),
                "{errno}"
            );
        }
    }

    #[test]
    fn completion_advice_per_status() {
        assert!(completion_advice(WcStatus::RetryExcErr).contains("UDP 4791"));
        assert!(completion_advice(WcStatus::RemAccessErr).contains("rkey"));
        assert!(completion_advice(WcStatus::RnrRetryExcErr).contains("no receive"));
        assert!(completion_advice(WcStatus::WrFlushErr).contains("error state"));
        let e = Error::Completion {
            status: WcStatus::RemAccessErr,
            status_str: "remote access error".into(),
            vendor_err: 0x88,
            wr_id: 7,
            opcode: WcOpcode::RdmaWrite,
            advice: completion_advice(WcStatus::RemAccessErr),
        };
        assert_eq!(e.kind(), ErrorKind::Transfer);
        let msg = e.to_string();
        assert!(msg.contains("work request 7"), "{msg}");
        assert!(msg.contains("0x88"), "{msg}");
        assert!(msg.contains("remote access error"), "{msg}");
    }

    #[test]
    fn errno_labels() {
        assert!(errno_label(libc::ENOSYS).starts_with("ENOSYS, "));
        assert!(!errno_label(libc::ENOSYS).contains("os error"));
        assert!(errno_label(4000).starts_with("errno 4000"));
    }
}
