//! What a case needs to know about the server ([`Config`]): from `cargo xtask hostile`'s
//! command line, or from the test that serves it.

use std::net::SocketAddr;
use std::time::Duration;

/// What a case needs to know about the server, shared with the case threads.
#[derive(Debug, Clone)]
pub struct Config {
    pub server: SocketAddr,
    pub buffer_size: u64,
    pub server_timeout: Duration,
    pub token: Option<String>,
    pub max_clients: Option<u32>,
    pub max_per_ip: Option<u32>,
    pub max_pinned: Option<u64>,
    pub expect_forbidden: bool,
    /// The GID announced in valid hellos.
    pub gid: String,
    /// How long to wait for each reply.
    pub reply: Duration,
    /// Seeds every case's random number generator.
    pub rng_seed: u64,
}

impl Config {
    /// A server without token, client limit or allow list, 64-byte buffer, 800 ms timeout,
    /// hellos from `::ffff:10.0.0.2`, replies within 3 s, rng seed 7: for tests, which change
    /// what differs.
    #[must_use]
    pub fn for_tests(server: SocketAddr) -> Self {
        Self {
            server,
            buffer_size: 64,
            server_timeout: Duration::from_millis(800),
            token: None,
            max_clients: None,
            max_per_ip: None,
            max_pinned: None,
            expect_forbidden: false,
            gid: "::ffff:10.0.0.2".to_owned(),
            reply: Duration::from_secs(3),
            rng_seed: 7,
        }
    }
}
