//! # rdma-proto: the rdma-write connection-info protocol (v1)
//!
//! A client and a server exchange queue-pair addresses and the remote buffer over TCP as
//! JSON Lines (one JSON object per `\n`-terminated line), so that the client can RDMA Write into
//! the server's registered memory. The full specification is `PROTOCOL.md` at the repository
//! root.
//!
//! * [`wire`]: the messages ([`ClientMessage`], [`ServerMessage`]) with `parse` / `to_line`.
//! * [`ServerHandshake`], [`ClientHandshake`]: sans-IO state machines; feed them messages, they
//!   tell you what to send and refuse anything out of order.
//! * [`framing`]: a thin blocking line reader/writer with deadlines and a line cap.
//! * [`events`]: the binaries' `--json` events (bench rows and fabric records included), for
//!   the binaries that write them and everything that reads them.
//! * [`exit`]: the binaries' exit codes, one table for `--help`, the code and their readers.
//!
//! No ibverbs, no command line or terminal, and no sockets outside [`framing`]. What both binaries
//! share to start and end a run (the `--json` writer, the error reporter) is the `rdma-app` crate.
//!
//! ```
//! use rdma_proto::*;
//! let line = b"{\"type\":\"written\",\"v\":1,\"length\":17,\"crc32c\":1}\n";
//! let msg = ClientMessage::parse(line).unwrap();
//! assert_eq!(msg, ClientMessage::Written(Written { length: 17, crc32c: 1 }));
//! assert_eq!(msg.to_line().as_bytes(), line);
//! ```

pub mod bench;
pub mod cm;
pub mod error;
pub mod events;
pub mod exit;
pub mod framing;
pub mod handshake;
pub mod rounds;
mod text;
pub mod wire;

pub use bench::{BenchKind, BenchMode, BenchParams, PongBuffer};
pub use cm::CmOffer;
pub use error::{ErrorCode, ProtoError, UnknownErrorCode};
pub use exit::Exit;
pub use framing::{Deadlined, FrameError, LineConn};
pub use handshake::{
    ClientHandshake, ClientRequest, ClientState, GidBinding, ServerEvent, ServerHandshake,
    ServerPolicy, ServerState,
};
pub use text::{is_deceptive, printable, printable_capped};
pub use wire::{
    Accept, Auth, Banner, ClientMessage, ErrorMsg, Gid, Hello, MAX_24BIT, Next, Notify, Outcome,
    ParseAuthError, ParseGidError, ParseNotifyError, QpEndpoint, Region, ServerMessage, VALID_MTUS,
    Written,
};

/// The protocol major version this crate speaks (the `v` field).
pub const PROTOCOL_VERSION: u32 = 1;
/// All protocol majors this crate speaks.
pub const SUPPORTED_VERSIONS: &[u32] = &[1];
/// The TCP port servers listen on by default.
pub const DEFAULT_PORT: u16 = 7471;
/// Default cap on one line, in bytes (without the newline).
pub const DEFAULT_MAX_LINE: usize = 64 * 1024;
/// Longest `result.text`, in bytes.
pub const MAX_TEXT: usize = 1024;
/// How many payload bytes [`preview_text`] reads at most: [`MAX_TEXT`] plus one longest UTF-8
/// sequence.
pub const PREVIEW_INPUT: usize = MAX_TEXT + 4;

/// CRC32C (Castagnoli) of `data`, as carried in `hello.crc32c`, `written.crc32c`, `result.crc32c`.
pub fn crc32c(data: &[u8]) -> u32 {
    crc32c::crc32c(data)
}

/// The payload as text for `result.text`: lossy UTF-8, cut to at most [`MAX_TEXT`] bytes on a
/// char boundary. The bool says whether it was cut.
///
/// Only the first [`PREVIEW_INPUT`] bytes of `payload` are read, whatever its size: every input
/// byte yields at least one byte of text, so text byte [`MAX_TEXT`] never comes from later input,
/// and a char (or a replaced invalid sequence) is decided by at most 4 bytes from its start. The
/// result is the same as converting the whole payload and cutting, without the copy of it.
pub fn preview_text(payload: &[u8]) -> (String, bool) {
    let head = &payload[..payload.len().min(PREVIEW_INPUT)];
    let text = String::from_utf8_lossy(head);
    // Text no longer than MAX_TEXT came from at most MAX_TEXT < PREVIEW_INPUT bytes: all of it.
    if text.len() <= MAX_TEXT {
        return (text.into_owned(), false);
    }
    let mut end = MAX_TEXT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    (text[..end].to_owned(), true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_known_vector() {
        // RFC 3720 B.4 / the classic check value.
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(b""), 0);
    }

    #[test]
    fn preview_short_and_lossy() {
        assert_eq!(
            preview_text(b"Hello RDMA Write!"),
            ("Hello RDMA Write!".to_owned(), false)
        );
        assert_eq!(preview_text(b"a\xffb"), ("a\u{FFFD}b".to_owned(), false));
    }

    #[test]
    fn preview_cuts_on_char_boundary() {
        let exact = vec![b'x'; MAX_TEXT];
        assert_eq!(preview_text(&exact), ("x".repeat(MAX_TEXT), false));
        let long = vec![b'x'; MAX_TEXT + 1];
        assert_eq!(preview_text(&long), ("x".repeat(MAX_TEXT), true));
        // 'é' is 2 bytes: 1023 'x' then 'é' would end at 1025, so the cut drops 'é'.
        let mut s = "x".repeat(MAX_TEXT - 1).into_bytes();
        s.extend_from_slice("é".as_bytes());
        let (t, cut) = preview_text(&s);
        assert!(cut);
        assert_eq!(t.len(), MAX_TEXT - 1);
        // Invalid bytes expand to 3-byte U+FFFD; the limit is on the produced text.
        let bad = vec![0xffu8; 400];
        let (t, cut) = preview_text(&bad);
        assert!(cut);
        assert!(t.len() <= MAX_TEXT);
        assert_eq!(t.chars().count(), MAX_TEXT / 3);
    }
}
