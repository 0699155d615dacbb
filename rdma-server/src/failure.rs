//! How a session ends without a verdict ([`Failure`]): a leaf every layer of a session returns
//! (the ports, the verbs, the steps and rounds), so none of them needs the session's context to
//! fail.

use rdma_proto::framing::FrameError;
use rdma_proto::{ErrorCode, ProtoError};

/// Why a session ended without a verdict.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) code: ErrorCode,
    pub(crate) message: String,
    /// Whether an error line should (still) be sent to the client.
    pub(crate) tell_peer: bool,
    /// The client went away (closed or reset the connection): logged as `client_gone`, which
    /// is the client's doing, not a server fault.
    pub(crate) gone: bool,
    /// A read or send on the connection failed: what a server stopping causes (it shuts the
    /// sessions' sockets for reading), unlike a failure with a cause of its own (a write that
    /// did not land, a device error), which stays what it is when the stop comes after it.
    pub(crate) on_connection: bool,
}

impl Failure {
    pub(crate) fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            tell_peer: true,
            gone: false,
            on_connection: false,
        }
    }

    /// What went wrong, as logged and told.
    #[cfg(test)]
    pub(crate) fn message(&self) -> &str {
        &self.message
    }

    /// The code in the server's own log line.
    pub(crate) fn log_code(&self) -> &'static str {
        if self.gone {
            "client_gone"
        } else {
            self.code.as_str()
        }
    }

    pub(crate) fn silent(mut self) -> Self {
        self.tell_peer = false;
        self
    }

    /// What the session's end is told and logged as, once the server may be stopping: a
    /// failure the stop could have caused (its connection failed, or its wait was cancelled) is
    /// `shutting_down`, naming what it saw; one with a cause of its own keeps it, so a write
    /// that failed just before the stop is still logged as `write_failed`.
    pub(crate) fn told(self, stopping: bool) -> Self {
        if !stopping || !self.on_connection || self.code == ErrorCode::ShuttingDown {
            return self;
        }
        Failure::new(
            ErrorCode::ShuttingDown,
            format!("the server is shutting down ({})", self.message),
        )
    }
}

/// A failed read or send on the connection. Whatever could still be said to the client was
/// said by then (see `session::steps::read_failed`), so this is only logged.
impl From<FrameError> for Failure {
    fn from(e: FrameError) -> Self {
        Failure {
            code: e.code(),
            message: format!("connection: {e}"),
            tell_peer: false,
            gone: e.peer_gone(),
            on_connection: true,
        }
    }
}

impl From<ProtoError> for Failure {
    fn from(e: ProtoError) -> Self {
        let tell_peer = !matches!(e, ProtoError::Remote(_));
        Failure {
            code: e.code(),
            message: e.to_string(),
            tell_peer,
            gone: false,
            on_connection: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The stop shuts the sessions' sockets for reading: a session whose connection failed then
    /// ends by the stop, and says so.
    #[test]
    fn a_connection_failure_while_stopping_is_the_stop() {
        let f = Failure::from(FrameError::Closed).told(true);
        assert_eq!(f.code, ErrorCode::ShuttingDown);
        assert!(
            f.message().starts_with("the server is shutting down ("),
            "{}",
            f.message()
        );
        let f = Failure::from(FrameError::Closed).told(false);
        assert_eq!(f.log_code(), "client_gone");
    }

    /// A write that failed on its own (the e2e `broken-server`: the client's write met a buffer
    /// without remote write) stays a `write_failed` however soon the stop follows it: the
    /// stop's flag was set while the flushed completion was on its way (seen in CI).
    #[test]
    fn a_failure_with_its_own_cause_keeps_it_while_stopping() {
        for code in [
            ErrorCode::WriteFailed,
            ErrorCode::RdmaSetup,
            ErrorCode::Timeout,
        ] {
            let f = Failure::new(code, "the client's write did not land").told(true);
            assert_eq!(f.code, code);
            assert_eq!(f.message(), "the client's write did not land");
        }
    }
}
