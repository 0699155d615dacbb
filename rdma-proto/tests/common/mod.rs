//! What the state machines' tests share (each test crate uses some of it).

#![allow(dead_code)]

use rdma_proto::{QpEndpoint, ServerPolicy};

/// A server's policy: a 64-byte buffer, `token`, nothing optional.
pub fn policy(token: Option<&str>) -> ServerPolicy {
    ServerPolicy {
        buffer_size: 64,
        token: token.map(str::to_owned),
        program_version: "0.1.0".to_owned(),
        features: ServerPolicy::default_features(),
        bench_max_len: 0,
        keep_alive_ms: 0,
    }
}

/// A client's queue pair `qpn` at 10.0.0.1 (RoCE, IPv4-mapped GID), MTU 1024.
pub fn ep(qpn: u32) -> QpEndpoint {
    QpEndpoint {
        qpn,
        psn: 0x10,
        gid: std::net::Ipv4Addr::new(10, 0, 0, 1).to_ipv6_mapped().into(),
        lid: 0,
        mtu: 1024,
    }
}
