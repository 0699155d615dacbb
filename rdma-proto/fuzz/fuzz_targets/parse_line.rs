//! Fuzz target `parse_line`: arbitrary bytes through the line framing, both parsers and the
//! server state machine. Any panic is a bug; every parsed message must re-encode losslessly.
#![no_main]

use std::io::{self, Cursor, Read, Write};
use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use rdma_proto::{
    ClientMessage, Deadlined, GidBinding, LineConn, ServerEvent, ServerHandshake, ServerMessage,
    ServerPolicy,
};

struct Mem(Cursor<Vec<u8>>);

impl Read for Mem {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.read(buf)
    }
}

impl Write for Mem {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Deadlined for Mem {
    fn set_timeouts(&self, _remaining: Option<Duration>) -> io::Result<()> {
        Ok(())
    }
}

fn check_line(line: &[u8]) {
    if let Ok(m) = ClientMessage::parse(line) {
        let again = ClientMessage::parse(m.to_line().as_bytes())
            .expect("re-encoded client message must parse");
        assert_eq!(again, m);
    }
    if let Ok(m) = ServerMessage::parse(line) {
        let again = ServerMessage::parse(m.to_line().as_bytes())
            .expect("re-encoded server message must parse");
        assert_eq!(again, m);
    }
}

fuzz_target!(|data: &[u8]| {
    // The input as one line.
    check_line(data);

    // The input as a stream of lines, through the framing and a server handshake.
    let mut conn = LineConn::new(Mem(Cursor::new(data.to_vec())), 4096);
    let mut server = ServerHandshake::new(ServerPolicy {
        buffer_size: 64,
        token: Some("t".to_owned()),
        program_version: "0.1.0".to_owned(),
        features: ServerPolicy::default_features(),
        // Bench hellos reach the bench checks too (a cap above buffer_size, as a server's default is).
        bench_max_len: 1 << 20,
        // Rounds too: a verdict leads to `Kept`, where a `next` gets a `region`.
        keep_alive_ms: 30_000,
    });
    let _ = server.banner();
    let deadline = Instant::now() + Duration::from_secs(10);
    while let Ok(line) = conn.read_line(deadline) {
        check_line(&line);
        // Each event answered as a server would, so that the lines after it meet every state.
        match server.on_line(&line) {
            Ok(ServerEvent::Hello(_)) => {
                if server.bind(GidBinding::Unbound).is_ok() {
                    let _ = server.accept(
                        rdma_proto::QpEndpoint {
                            qpn: 1,
                            psn: 1,
                            gid: rdma_proto::Gid([0; 16]),
                            lid: 0,
                            mtu: 1024,
                        },
                        1,
                        1,
                        64,
                    );
                }
            }
            Ok(ServerEvent::Written(w)) => {
                let outcome = server.verify(data, None, Some(&w));
                let _ = server.result(outcome);
            }
            Ok(ServerEvent::Next(_)) => {
                // A bench round's answers go where its `next` says.
                let _ = server.pong();
                let _ = server.region(2, 2, 64);
            }
            Ok(ServerEvent::PeerError(_)) => {}
            Err(e) => {
                let _ = server.fail(&e).to_line();
            }
        }
    }
    let _ = server.verify(data, Some(data.len() as u32), None);
});
