//! Error codes sent on the wire ([`ErrorCode`]) and the local error type ([`ProtoError`]).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::SUPPORTED_VERSIONS;

/// Stable, machine-readable error codes carried in `error` messages (`"code":"too_long"`).
///
/// The wire form is the snake_case name ([`ErrorCode::as_str`]). A peer may send a code this
/// version does not know; [`crate::ClientMessage::parse`] / [`crate::ServerMessage::parse`] map it to
/// [`ErrorCode::Internal`] and keep the original code in the message text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The line is not valid JSON, or not a JSON object.
    BadJson,
    /// The line is not valid UTF-8.
    BadUtf8,
    /// The line is longer than the receiver's cap ([`crate::DEFAULT_MAX_LINE`] by default).
    LineTooLong,
    /// `type` names no message this side knows.
    UnknownType,
    /// `v` is a protocol major version this side does not speak.
    UnsupportedVersion,
    /// A field is missing, has the wrong JSON type or is out of range.
    InvalidField,
    /// A known message arrived in the wrong order or direction (e.g. a second `hello`).
    UnexpectedMessage,
    /// `hello.length` is larger than the server's buffer.
    TooLong,
    /// The server requires a token and it was missing or wrong.
    Unauthorized,
    /// The client's address is not allowed by the server.
    Forbidden,
    /// The server is at its client cap.
    Busy,
    /// A step of the handshake took too long.
    Timeout,
    /// The server could not set up verbs resources for this client.
    RdmaSetup,
    /// The RDMA Write did not complete.
    WriteFailed,
    /// The bytes the server saw do not match what the client announced.
    VerifyFailed,
    /// The server is shutting down.
    ShuttingDown,
    /// Anything else (a bug, or a code from a newer peer).
    Internal,
}

impl ErrorCode {
    /// Every code, in declaration order.
    pub const ALL: [ErrorCode; 17] = [
        ErrorCode::BadJson,
        ErrorCode::BadUtf8,
        ErrorCode::LineTooLong,
        ErrorCode::UnknownType,
        ErrorCode::UnsupportedVersion,
        ErrorCode::InvalidField,
        ErrorCode::UnexpectedMessage,
        ErrorCode::TooLong,
        ErrorCode::Unauthorized,
        ErrorCode::Forbidden,
        ErrorCode::Busy,
        ErrorCode::Timeout,
        ErrorCode::RdmaSetup,
        ErrorCode::WriteFailed,
        ErrorCode::VerifyFailed,
        ErrorCode::ShuttingDown,
        ErrorCode::Internal,
    ];

    /// The wire form, e.g. `"too_long"`.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::BadJson => "bad_json",
            ErrorCode::BadUtf8 => "bad_utf8",
            ErrorCode::LineTooLong => "line_too_long",
            ErrorCode::UnknownType => "unknown_type",
            ErrorCode::UnsupportedVersion => "unsupported_version",
            ErrorCode::InvalidField => "invalid_field",
            ErrorCode::UnexpectedMessage => "unexpected_message",
            ErrorCode::TooLong => "too_long",
            ErrorCode::Unauthorized => "unauthorized",
            ErrorCode::Forbidden => "forbidden",
            ErrorCode::Busy => "busy",
            ErrorCode::Timeout => "timeout",
            ErrorCode::RdmaSetup => "rdma_setup",
            ErrorCode::WriteFailed => "write_failed",
            ErrorCode::VerifyFailed => "verify_failed",
            ErrorCode::ShuttingDown => "shutting_down",
            ErrorCode::Internal => "internal",
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A string that is not one of the [`ErrorCode`] wire names.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown error code `{0}`")]
pub struct UnknownErrorCode(pub String);

impl FromStr for ErrorCode {
    type Err = UnknownErrorCode;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ErrorCode::ALL
            .iter()
            .copied()
            .find(|c| c.as_str() == s)
            .ok_or_else(|| UnknownErrorCode(s.to_owned()))
    }
}

/// Everything that can go wrong in parsing a line or driving a handshake.
///
/// [`ProtoError::code`] gives the wire code, [`ProtoError::to_error_msg`] the `error` message to
/// send to the peer. `Display` is a human sentence naming what was wrong and what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProtoError {
    /// The line is not UTF-8.
    #[error(
        "the line is not valid UTF-8 (first bad byte at offset {valid_up_to}); send UTF-8 JSON text, one object per line"
    )]
    BadUtf8 {
        /// Length of the valid UTF-8 prefix.
        valid_up_to: usize,
    },
    /// The line is not JSON (or not an object).
    #[error(
        "bad JSON: {detail}; each line must be one JSON object, e.g. {{\"type\":\"hello\",\"v\":1,...}}"
    )]
    BadJson {
        /// What serde_json said, with the column where it broke.
        detail: String,
    },
    /// The line exceeded the receiver's cap.
    #[error(
        "line longer than {max} bytes without a newline; each message must be one line of at most {max} bytes"
    )]
    LineTooLong {
        /// The cap in bytes.
        max: usize,
    },
    /// `type` is not a message this side knows.
    #[error("unknown message type `{ty}`; expected one of: {expected}")]
    UnknownType {
        /// The type that was received (possibly shortened).
        ty: String,
        /// The types this side accepts.
        expected: &'static str,
    },
    /// `v` is not a version this side speaks, or the peer's banner lists none we speak.
    #[error(
        "unsupported protocol version: the peer speaks {peer:?}, this side speaks {ours:?}; upgrade the older side",
        ours = SUPPORTED_VERSIONS
    )]
    UnsupportedVersion {
        /// The version(s) the peer speaks.
        peer: Vec<u64>,
    },
    /// A field is missing, of the wrong type, or out of range.
    #[error("field `{field}` of `{msg}`: {problem}")]
    InvalidField {
        /// The message type (`hello`, `accept`, ...).
        msg: &'static str,
        /// The field name.
        field: &'static str,
        /// What is wrong and what is allowed.
        problem: String,
    },
    /// A known message arrived at the wrong time or in the wrong direction.
    #[error("unexpected `{got}` message {context}")]
    Unexpected {
        /// The message type received.
        got: String,
        /// When it arrived and what was expected instead.
        context: String,
    },
    /// `hello.length` exceeds the buffer.
    #[error(
        "payload of {length} bytes does not fit the server buffer of {max} bytes; send at most {max} bytes"
    )]
    TooLong {
        /// Announced payload length.
        length: u64,
        /// The largest length allowed.
        max: u64,
    },
    /// Token missing or wrong.
    #[error("unauthorized: {reason}")]
    Unauthorized {
        /// Which (missing / wrong), and what to do.
        reason: String,
    },
    /// Verification of the written bytes failed.
    #[error("verification failed: {reason}")]
    VerifyFailed {
        /// Which check failed.
        reason: String,
    },
    /// An error the PEER sent us (its message escaped, and cut at [`crate::MAX_TEXT`] bytes).
    #[error("server said: {}: {}", .0.code, crate::printable_capped(&.0.message, crate::MAX_TEXT))]
    Remote(ErrorMsg),
    /// Any other coded error the local program wants to report (e.g. `busy`, `rdma_setup`).
    #[error("{code}: {message}")]
    Other {
        /// The wire code.
        code: ErrorCode,
        /// Human text with what to do.
        message: String,
    },
}

impl ProtoError {
    /// A coded error with a message (for `busy`, `forbidden`, `rdma_setup`, `timeout`, ...).
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ProtoError::Other {
            code,
            message: message.into(),
        }
    }

    /// The wire code for this error (for [`ProtoError::Remote`], the peer's code).
    pub fn code(&self) -> ErrorCode {
        match self {
            ProtoError::BadUtf8 { .. } => ErrorCode::BadUtf8,
            ProtoError::BadJson { .. } => ErrorCode::BadJson,
            ProtoError::LineTooLong { .. } => ErrorCode::LineTooLong,
            ProtoError::UnknownType { .. } => ErrorCode::UnknownType,
            ProtoError::UnsupportedVersion { .. } => ErrorCode::UnsupportedVersion,
            ProtoError::InvalidField { .. } => ErrorCode::InvalidField,
            ProtoError::Unexpected { .. } => ErrorCode::UnexpectedMessage,
            ProtoError::TooLong { .. } => ErrorCode::TooLong,
            ProtoError::Unauthorized { .. } => ErrorCode::Unauthorized,
            ProtoError::VerifyFailed { .. } => ErrorCode::VerifyFailed,
            ProtoError::Remote(m) => m.code,
            ProtoError::Other { code, .. } => *code,
        }
    }

    /// The `error` message to send to the peer for this error.
    ///
    /// `supported` is set for `unsupported_version`. For [`ProtoError::Remote`] this is the
    /// peer's own message.
    pub fn to_error_msg(&self) -> ErrorMsg {
        match self {
            ProtoError::Remote(m) => m.clone(),
            ProtoError::Other { code, message } => ErrorMsg {
                code: *code,
                message: message.clone(),
                supported: None,
            },
            other => ErrorMsg {
                code: other.code(),
                message: other.to_string(),
                supported: matches!(other, ProtoError::UnsupportedVersion { .. })
                    .then(|| SUPPORTED_VERSIONS.to_vec()),
            },
        }
    }

    pub(crate) fn invalid(
        msg: &'static str,
        field: &'static str,
        problem: impl Into<String>,
    ) -> Self {
        ProtoError::InvalidField {
            msg,
            field,
            problem: problem.into(),
        }
    }
}

/// `error`: either direction. The sender closes the connection after it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ErrorMsg {
    /// Stable code.
    pub code: ErrorCode,
    /// Human text with what to do.
    pub message: String,
    /// The versions the sender speaks (for `unsupported_version`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub supported: Option<Vec<u32>>,
}

impl ErrorMsg {
    /// An error message without `supported`.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ErrorMsg {
            code,
            message: message.into(),
            supported: None,
        }
    }
}
