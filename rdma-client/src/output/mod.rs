//! What the client tells its user: its `--json` events (human lines by default). The events are
//! the contract's ([`rdma_proto::events::client`]), written by the writer both binaries share
//! ([`app::Output`]). Every JSON event is one object with a `type` tag, so scripts can dispatch
//! on it. Every human line is rendered in [`human`], with the tables a person reads around the
//! bench rows.

pub mod human;

use rdma_app as app;
use rdma_core_rs::{CqMode, LocalPort};
use rdma_proto::Exit;
use rdma_proto::bench::BenchMode;
pub use rdma_proto::events::client::Event;
use std::time::Duration;

/// The client's events, for [`app::Output`].
#[derive(Debug, Clone, Copy)]
pub enum ClientEvents {}

/// What a human line of the client needs that its event does not carry.
#[derive(Debug, Default, Clone, Copy)]
pub enum Detail<'a> {
    /// Nothing: the event says it all.
    #[default]
    None,
    /// A write's `qp_ready`: the local end, whose transport and link layer the line names.
    Link(&'a LocalPort),
    /// A bench run's `connected`: what it measures (`duration` per size, else `iters`).
    Bench {
        mode: BenchMode,
        sizes: &'a [u64],
        duration: Option<Duration>,
        iters: u64,
    },
    /// A bench run's `qp_ready`: how it posts and polls.
    BenchQp { inline: u32, cq_mode: CqMode },
    /// A bench run's `verified`: the server checked the final bytes of the last size.
    BenchFinal,
    /// A write's `written`: the server answered before our completion came (a lost ACK).
    AnsweredFirst,
}

impl app::Events for ClientEvents {
    type Event<'a> = Event<'a>;
    type Style = ();
    type Detail<'a> = Detail<'a>;

    fn human(event: &Event<'_>, (): (), detail: &Detail<'_>) -> String {
        human::line(event, detail)
    }

    fn fatal(exit: Exit, message: String) -> Event<'static> {
        Event::Error {
            kind: exit,
            exit_code: exit.code(),
            message: message.into(),
        }
    }
}

/// Where the client's events go.
pub type Output = app::Output<ClientEvents>;
