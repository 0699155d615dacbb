//! Sans-IO handshake state machines for both sides: [`ServerHandshake`] (in `server`) and
//! [`ClientHandshake`] (in `client`).
//!
//! They do no I/O: the caller reads a line, feeds it in, and sends what comes back. Any error
//! moves the machine to `Failed`; the caller then sends [`ServerHandshake::fail`]'s line (server)
//! or just closes (client) and drops the connection.
//!
//! The server's machine takes every line a client sends, in every state (a line while it waits
//! for the write is an `error` from the client or a refusal), and every failed read
//! ([`ServerHandshake::on_read_error`]): a server feeds it whatever the client did and sends
//! what it answers.
//!
//! Server: `Start -banner()-> AwaitHello -hello-> AwaitAccept -accept()-> AwaitWrite{notify}
//! -result()-> Done`.
//! Client: `AwaitBanner -banner-> NeedHello -hello()-> AwaitAccept -accept-> Writing
//! -written()-> AwaitResult -result-> Done`.
//!
//! Each side holds its peer's GID to the TCP connection ([`GidBinding`]): the server's
//! `bind()` takes the hello's binding before its accept, and the client's `bind()` the
//! accept's, before the accept arrives (its `on_accept` refuses as a misuse without one).

mod binding;
mod client;
mod server;

pub use binding::{GidBinding, gid_of};
pub use client::{ClientHandshake, ClientRequest, ClientState};
pub use server::{ServerEvent, ServerHandshake, ServerPolicy, ServerState};
