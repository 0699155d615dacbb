//! What the server tells its operator: its `--json` events (human lines by default). The events
//! are the contract's ([`rdma_proto::events::server`]), the writer the one both binaries share
//! ([`app::Output`]); it writes each event as one whole line, so the sessions' threads never
//! interleave lines. Every human line is rendered in [`human`], in the operator's language
//! ([`Lang`], the output's style).

pub mod human;

pub use crate::i18n::Lang;
use rdma_app as app;
use rdma_proto::Exit;
pub use rdma_proto::events::server::{AuthMode, Event, ServeMode, SessionNotify, StopReason};

/// Rejected RDMA CM requests logged per session (the rest are counted in the next line, and in
/// the session's failure); the line of the last one logged says so.
pub const LOGGED_REJECTS: u32 = 3;

/// The server's events, for [`app::Output`].
#[derive(Debug, Clone, Copy)]
pub enum ServerEvents {}

/// What a human line of the server needs that its event does not carry.
#[derive(Debug, Default, Clone, Copy)]
pub enum Detail<'a> {
    /// Nothing: the event says it all.
    #[default]
    None,
    /// A write session's `qp_ready`: the bytes its buffer offers.
    Offered(u64),
    /// A bench session's `qp_ready` and `verified`: what it measures.
    Bench {
        mode: SessionNotify,
        sizes: &'a [u64],
        iters: u64,
    },
}

impl app::Events for ServerEvents {
    type Event<'a> = Event<'a>;
    type Style = Lang;
    type Detail<'a> = Detail<'a>;

    fn human(event: &Event<'_>, lang: Lang, detail: &Detail<'_>) -> String {
        human::line(event, lang, detail)
    }

    fn fatal(exit: Exit, message: String) -> Event<'static> {
        Event::Error {
            session: None,
            peer: None,
            code: exit.name().into(),
            message: message.into(),
            fatal: true,
            exit_code: Some(exit.code()),
        }
    }
}

/// Where the server's events go.
pub type Output = app::Output<ServerEvents>;
