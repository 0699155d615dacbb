//! The two file-descriptor steps both event channels need (the completion channel and RDMA
//! CM's): make the descriptor non-blocking, and sleep until it is readable. Errors are errnos;
//! each caller names its own step.

use std::time::Duration;

fn last_errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// Sets `O_NONBLOCK` on `fd`.
pub(crate) fn set_nonblocking(fd: libc::c_int) -> Result<(), i32> {
    // SAFETY: fcntl on a file descriptor we own; F_GETFL/F_SETFL have no memory effects.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(last_errno());
    }
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(last_errno());
    }
    Ok(())
}

/// Sleeps in poll(2) until `fd` is readable (`true`) or `timeout` passes (`false`; rounded up
/// to whole milliseconds, so a caller never spins on a sub-millisecond remainder). An
/// interrupted sleep is `false` too: callers re-check their deadline and wait again.
pub(crate) fn wait_readable(fd: libc::c_int, timeout: Duration) -> Result<bool, i32> {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = libc::c_int::try_from(timeout.as_micros().div_ceil(1000)).unwrap_or(libc::c_int::MAX);
    // SAFETY: one valid pollfd.
    let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
    match rc {
        0 => Ok(false),
        r if r > 0 => Ok(true),
        _ => match last_errno() {
            libc::EINTR => Ok(false),
            errno => Err(errno),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pipe_is_readable_once_written_and_not_before() {
        let mut fds = [0; 2];
        // SAFETY: `fds` has room for the two descriptors pipe(2) returns.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        set_nonblocking(fds[0]).unwrap();
        assert_eq!(wait_readable(fds[0], Duration::from_millis(1)), Ok(false));
        // SAFETY: one byte from a valid buffer to the pipe's write end.
        assert_eq!(unsafe { libc::write(fds[1], b"x".as_ptr().cast(), 1) }, 1);
        assert_eq!(wait_readable(fds[0], Duration::from_secs(1)), Ok(true));
        assert!(set_nonblocking(-1).is_err());
        for fd in fds {
            // SAFETY: closing the descriptors this test opened, once.
            unsafe { libc::close(fd) };
        }
    }
}
