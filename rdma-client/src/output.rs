//! What the client tells its user: its `--json` events (human lines by default), written by the
//! writer both binaries share ([`app::Output`]). Every JSON event is one object with a `type`
//! tag, so scripts can dispatch on it.

use rdma_proto::app::{self, Exit};
use serde::Serialize;

/// One `--json` event.
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event<'a> {
    /// TCP connected and the server's banner accepted.
    Connected {
        server: &'a str,
        program: &'a str,
        program_version: &'a str,
        device: &'a str,
        port: u8,
        gid_index: u32,
        gid: String,
    },
    /// Our queue pair is in RTS, connected to the server's.
    QpReady {
        local_qpn: u32,
        remote_qpn: u32,
        path_mtu: u32,
        remote_addr: u64,
        rkey: u32,
        buf_len: u64,
    },
    /// Our RDMA Write completed successfully on our side.
    Written {
        length: u64,
        notify: &'a str,
        crc32c: u32,
        micros: u128,
    },
    /// The server's verdict.
    Verified {
        verified: bool,
        length: u64,
        crc32c: u32,
        text: &'a str,
        truncated: bool,
    },
    /// `--bench`: connected and ready to post, `ready_us` after the run started.
    BenchSetup { ready_us: f64 },
    /// `--bench lat`: one size's figures (perftest's columns).
    BenchLat(crate::bench::LatRow),
    /// `--bench bw`: one size's figures (perftest's columns).
    BenchBw(crate::bench::BwRow),
    /// `--fabric --plan`: one directed write of the schedule.
    FabricPlan {
        round: usize,
        rounds: usize,
        writer: usize,
        writer_host: &'a str,
        target: usize,
        target_host: &'a str,
    },
    /// `--fabric`: one pair's result (read back by `--fabric-report`).
    FabricPair(&'a crate::fabric::pair::PairResult),
    /// `--fabric-report`: the merged matrix, bad pairs and suspect nodes.
    FabricReport(&'a crate::fabric::report::Report),
    /// The run failed; `exit_code` is the process exit status.
    Error {
        kind: &'a str,
        exit_code: u8,
        message: String,
    },
}

/// The client's events, for the shared writer.
#[derive(Debug, Clone, Copy)]
pub enum ClientEvents {}

impl app::Events for ClientEvents {
    type Event<'a> = Event<'a>;

    fn fatal(exit: Exit, message: String) -> Event<'static> {
        Event::Error {
            kind: exit.name(),
            exit_code: exit.code(),
            message,
        }
    }
}

/// Where the client's events go.
pub type Output = app::Output<ClientEvents>;
