//! What each hostile case does on the wire, and what it expects back.

use crate::answer::{Answer, Got, check_accept, check_answer, check_banner};
use crate::case::Case;
use crate::config::Config;
use crate::conn::{CaseResult, Conn, is_timeout};
use serde_json::{Value, json};

mod weapon;
use std::io::{self, Write as _};
use std::net::{Shutdown, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Size of the unterminated line in `line_too_long`.
const HUGE_LINE: usize = 10 * 1024 * 1024;
/// How long after its deadline the server may take to send `timeout` and close.
const TIMEOUT_MARGIN: Duration = Duration::from_secs(3);
/// How much earlier than its deadline we accept the server's `timeout` (our clock starts after
/// the server's: we start counting when the banner arrives).
const TIMEOUT_EARLY: Duration = Duration::from_millis(500);
/// How long a freshly closed session may keep its `--max-clients` slot.
pub(crate) const SETTLE: Duration = Duration::from_secs(3);

/// A case's view of the configuration and its random numbers.
pub(crate) struct Cx<'a> {
    pub cfg: &'a Config,
    pub rng: &'a mut fastrand::Rng,
}

/// Which token a hello carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tok {
    /// The right one, if the server wants one; none otherwise.
    Right,
    /// A wrong one.
    Wrong,
    /// None.
    Missing,
}

impl Cx<'_> {
    pub fn run(mut self, case: Case) -> CaseResult {
        let e = |code| Answer::Error {
            code,
            mentions: None,
        };
        match case {
            Case::BadJson => self.line_case(b"hello server\n", &e("bad_json")),
            Case::TruncatedJson => self.line_case(
                b"{\"type\":\"hello\",\"v\":1,\"qpn\":17,\n",
                &e("bad_json"),
            ),
            Case::NotObject => self.line_case(b"[1]\n", &e("bad_json")),
            Case::BadUtf8 => self.line_case(
                b"{\"type\":\"hello\",\"v\":1,\"gid\":\"\xff\xfe\xc3\x28\"}\n",
                &e("bad_utf8"),
            ),
            Case::LineTooLong => self.line_too_long(),
            Case::InvalidFields => self.invalid_fields(),
            Case::QpnOutOfRange => {
                let mut h = self.hello(17, "imm", Tok::Right);
                h["qpn"] = json!(1u64 << 24);
                self.line_case(
                    &to_line(&h),
                    &Answer::Error {
                        code: "invalid_field",
                        mentions: Some("qpn"),
                    },
                )
            }
            Case::BadVersion => self.bad_version(),
            Case::UnknownType => self.line_case(
                b"{\"type\":\"goodbye\",\"v\":1}\n",
                &e("unknown_type"),
            ),
            Case::BannerToServer => self.line_case(
                &to_line(&json!({
                    "type": "banner", "v": 1, "program": "hostile", "program_version": "0",
                    "versions": [1], "features": [], "auth": "none",
                })),
                &e("unexpected_message"),
            ),
            Case::WrittenBeforeHello => self.line_case(
                b"{\"type\":\"written\",\"v\":1,\"length\":17,\"crc32c\":617249076}\n",
                &e("unexpected_message"),
            ),
            Case::DuplicateHello => self.duplicate_hello(),
            Case::NextOutOfTurn => self.next_out_of_turn(),
            Case::TooLong => {
                let h = self.hello(self.cfg.buffer_size.saturating_add(1), "imm", Tok::Right);
                self.line_case(&to_line(&h), &e("too_long"))
            }
            Case::FreshRkey => self.fresh_rkey(),
            Case::ClientError => self.line_case(
                b"{\"type\":\"error\",\"v\":1,\"code\":\"internal\",\"message\":\"hostile client gives up\"}\n",
                &Answer::Close,
            ),
            Case::SlowLoris => self.slow(false),
            Case::SlowDrip => self.slow(true),
            Case::VanishAfterBanner => {
                let c = self.connect_banner()?;
                drop(c);
                Ok("read the banner and closed".to_owned())
            }
            Case::VanishAfterHello => {
                let mut c = self.connect_banner()?;
                let h = self.hello(self.small_len(), "imm", Tok::Right);
                c.send(&to_line(&h), self.deadline())?;
                drop(c);
                Ok("sent a valid hello and closed without reading".to_owned())
            }
            Case::VanishAfterAccept => {
                let mut seen = Vec::new();
                for notify in ["imm", "tcp"] {
                    let (_c, rkey) = self.open_session(notify)?;
                    seen.push(format!("{notify}: accept (rkey {rkey:#x}) read, closed"));
                }
                Ok(seen.join("; "))
            }
            Case::WrongToken => self.token_case(Tok::Wrong),
            Case::MissingToken => self.token_case(Tok::Missing),
            Case::Forbidden => self.forbidden(),
            Case::Busy => self.busy(),
            Case::BenchInvalid => self.bench_invalid(),
            Case::BenchTooLong => {
                let h = self.bench_hello(1 << 40, json!({"mode": "bw", "sizes": [1u64 << 40], "iters": 10}));
                self.line_case(&to_line(&h), &e("too_long"))
            }
            Case::VictimGid => self.victim_gid(),
            Case::PerIp => self.hold_then_one_more(
                self.cfg.max_per_ip.unwrap_or(0) as usize,
                "--max-per-ip",
                "--max-per-ip",
            ),
            Case::PinnedBudget => self.pinned_budget(),
            Case::BenchVanish => {
                let mut c = self.connect_banner()?;
                let h = self.bench_hello(
                    64,
                    json!({"mode": "lat", "sizes": [64], "iters": 1000, "addr": 4096, "rkey": 1}),
                );
                c.send(&to_line(&h), self.deadline())?;
                c.secrets_allowed = true;
                let got = c.recv(self.deadline());
                let rkey = check_accept(&got, 64, 64)?;
                drop(c);
                Ok(format!("bench lat accept (rkey {rkey:#x}) read, closed without a ping"))
            }
        }
    }

    /// A hello asking for a bench session of `length` bytes with `bench` as its parameters.
    fn bench_hello(&mut self, length: u64, bench: Value) -> Value {
        let mut h = self.hello(length, "tcp", Tok::Right);
        h["bench"] = bench;
        h
    }

    fn bench_invalid(&mut self) -> CaseResult {
        let bad: [(&str, &str, Value); 7] = [
            (
                "notify imm",
                "imm",
                json!({"mode": "bw", "sizes": [64], "iters": 10}),
            ),
            ("bench not an object", "tcp", json!([64])),
            (
                "sizes out of order",
                "tcp",
                json!({"mode": "bw", "sizes": [64, 2], "iters": 10}),
            ),
            (
                "largest size not the length",
                "tcp",
                json!({"mode": "bw", "sizes": [32], "iters": 10}),
            ),
            (
                "lat without its buffer",
                "tcp",
                json!({"mode": "lat", "sizes": [64], "iters": 10}),
            ),
            (
                "zero iterations",
                "tcp",
                json!({"mode": "bw", "sizes": [64], "iters": 0}),
            ),
            (
                "unknown mode",
                "tcp",
                json!({"mode": "ping", "sizes": [64], "iters": 10}),
            ),
        ];
        let hellos = bad
            .into_iter()
            .map(|(what, notify, bench)| {
                let mut h = self.hello(64, notify, Tok::Right);
                h["bench"] = bench;
                (what, h)
            })
            .collect();
        self.all_invalid(hellos, "bad bench hellos")
    }

    fn deadline(&self) -> Instant {
        Instant::now() + self.cfg.reply
    }

    /// A payload length that fits any buffer.
    fn small_len(&self) -> u64 {
        self.cfg.buffer_size.min(17)
    }

    /// A valid hello (keys in serde_json's sorted order: receivers must not rely on order).
    fn hello(&mut self, length: u64, notify: &str, tok: Tok) -> Value {
        // Avoid QPNs 0 and 1 (the special QPs); any other 24-bit value is valid on the wire.
        let qpn = self.rng.u64(0x100..0xFF_FFFF);
        let psn = self.rng.u64(..1 << 24);
        let mut h = json!({
            "type": "hello", "v": 1, "qpn": qpn, "psn": psn, "gid": self.cfg.gid, "lid": 0,
            "mtu": 1024, "length": length, "notify": notify,
        });
        match (tok, &self.cfg.token) {
            (Tok::Right, Some(t)) => h["token"] = json!(t),
            (Tok::Wrong, _) => h["token"] = json!(format!("wrong-{:016x}", self.rng.u64(..))),
            _ => {}
        }
        h
    }

    fn connect(&self) -> Result<Conn, String> {
        Conn::open(self.cfg.server, self.deadline())
    }

    /// Connects and reads a banner that must be right and secret-free.
    fn connect_banner(&self) -> Result<Conn, String> {
        let mut c = self.connect()?;
        let got = c.recv(self.deadline());
        let v = match got {
            Got::Line(v) => v,
            other => return Err(format!("expected a banner, got {}", other.describe())),
        };
        check_banner(&v, self.cfg.token.is_some())?;
        Ok(c)
    }

    /// Banner, one line, then the expected answer (and a close after an error).
    fn line_case(&self, line: &[u8], want: &Answer) -> CaseResult {
        let mut c = self.connect_banner()?;
        c.send(line, self.deadline())?;
        c.expect(want, self.deadline(), self.cfg.reply)
    }

    fn bad_version(&self) -> CaseResult {
        let mut c = self.connect_banner()?;
        c.send(b"{\"type\":\"hello\",\"v\":2}\n", self.deadline())?;
        let got = c.recv(self.deadline());
        let seen = check_answer(
            &Answer::Error {
                code: "unsupported_version",
                mentions: None,
            },
            &got,
        )?;
        if let Got::Line(v) = &got
            && v.get("supported") != Some(&json!([1]))
        {
            return Err(format!(
                "{seen}, but `supported` is {:?}, not [1]",
                v.get("supported")
            ));
        }
        c.expect_closed(self.deadline())?;
        Ok(format!("{seen} (supported [1]), then close"))
    }

    fn invalid_fields(&mut self) -> CaseResult {
        type Mutate = fn(&mut Value);
        let variants: [(&str, Mutate); 11] = [
            ("qpn as a string", |h| h["qpn"] = json!("17")),
            ("psn as a float", |h| h["psn"] = json!(1.5)),
            ("lid negative", |h| h["lid"] = json!(-1)),
            ("lid above u16", |h| h["lid"] = json!(65536)),
            ("mtu 1500", |h| h["mtu"] = json!(1500)),
            ("gid as IPv4 text", |h| h["gid"] = json!("10.0.0.2")),
            ("gid a number", |h| h["gid"] = json!(5)),
            ("length 0", |h| h["length"] = json!(0)),
            ("notify udp", |h| h["notify"] = json!("udp")),
            ("notify missing", |h| {
                if let Some(m) = h.as_object_mut() {
                    m.remove("notify");
                }
            }),
            ("crc32c above u32", |h| h["crc32c"] = json!(1u64 << 32)),
        ];
        let hellos = variants
            .into_iter()
            .map(|(what, mutate)| {
                let mut h = self.hello(self.small_len(), "imm", Tok::Right);
                mutate(&mut h);
                (what, h)
            })
            .collect();
        self.all_invalid(hellos, "malformed hellos")
    }

    /// Sends each hello on a connection of its own and expects `invalid_field`, then a close;
    /// a failure names the hello (`what`) and what came instead.
    fn all_invalid(&self, hellos: Vec<(&str, Value)>, plural: &str) -> CaseResult {
        let n = hellos.len();
        let mut failures = Vec::new();
        for (what, h) in hellos {
            let r = self.line_case(
                &to_line(&h),
                &Answer::Error {
                    code: "invalid_field",
                    mentions: None,
                },
            );
            if let Err(e) = r {
                failures.push(format!("{what}: {e}"));
            }
        }
        if failures.is_empty() {
            Ok(format!(
                "{n}/{n} {plural} refused with invalid_field, then close"
            ))
        } else {
            Err(failures.join("; "))
        }
    }

    /// A valid hello and its accept; returns the open connection and the rkey.
    fn open_session(&mut self, notify: &str) -> Result<(Conn, u32), String> {
        let mut c = self.connect_banner()?;
        let h = self.hello(self.small_len(), notify, Tok::Right);
        c.send(&to_line(&h), self.deadline())?;
        c.secrets_allowed = true;
        let got = c.recv(self.deadline());
        let rkey = check_accept(&got, self.small_len(), self.cfg.buffer_size)?;
        Ok((c, rkey))
    }

    fn duplicate_hello(&mut self) -> CaseResult {
        let mut seen = Vec::new();
        for notify in ["tcp", "imm"] {
            let (mut c, _) = self.open_session(notify)?;
            let h = self.hello(self.small_len(), notify, Tok::Right);
            c.send(&to_line(&h), self.deadline())?;
            let s = c
                .expect(
                    &Answer::Error {
                        code: "unexpected_message",
                        mentions: None,
                    },
                    self.deadline(),
                    self.cfg.reply,
                )
                .map_err(|e| format!("{notify}: {e}"))?;
            seen.push(format!("{notify}: accept, then {s}"));
        }
        Ok(seen.join("; "))
    }

    fn next_out_of_turn(&mut self) -> CaseResult {
        let next = b"{\"type\":\"next\",\"v\":1,\"length\":4,\"crc32c\":0}\n";
        let unexpected = Answer::Error {
            code: "unexpected_message",
            mentions: Some("next"),
        };
        let before = self.line_case(next, &unexpected)?;
        let (mut c, _) = self.open_session("tcp")?;
        c.send(next, self.deadline())?;
        let after = c
            .expect(&unexpected, self.deadline(), self.cfg.reply)
            .map_err(|e| format!("after the accept: {e}"))?;
        Ok(format!(
            "before the hello: {before}; after the accept: {after}"
        ))
    }

    fn fresh_rkey(&mut self) -> CaseResult {
        let (a, ka) = self.open_session("tcp")?;
        let (b, kb) = self.open_session("tcp")?;
        drop(a);
        drop(b);
        let (_c, kc) = self.open_session("tcp")?;
        let keys = [ka, kb, kc].map(|k| format!("{k:#x}")).join(", ");
        if ka == kb || ka == kc || kb == kc {
            return Err(format!(
                "an rkey was handed out twice: [{keys}] (two live sessions, then one after they closed)"
            ));
        }
        Ok(format!("three sessions, three rkeys [{keys}]"))
    }

    fn token_case(&mut self, tok: Tok) -> CaseResult {
        let mut c = self.connect_banner()?;
        let h = self.hello(self.small_len(), "imm", tok);
        c.send(&to_line(&h), self.deadline())?;
        let got = c.recv(self.deadline());
        let seen = check_answer(
            &Answer::Error {
                code: "unauthorized",
                mentions: None,
            },
            &got,
        )?;
        if let (Got::Line(v), Some(token)) = (&got, &self.cfg.token)
            && v.to_string().contains(token.as_str())
        {
            return Err(format!("{seen}, but the reply echoes the server's token"));
        }
        c.expect_closed(self.deadline())?;
        Ok(format!("{seen}, then close"))
    }

    /// `slow_loris` (silence) or `slow_drip` (a hello one byte at a time, never finished).
    fn slow(&mut self, drip: bool) -> CaseResult {
        let mut c = self.connect_banner()?;
        let since = Instant::now();
        let t = self.cfg.server_timeout;
        let deadline = since + t + TIMEOUT_MARGIN;
        let got = if drip {
            let h = self.hello(self.small_len(), "imm", Tok::Right);
            let line = to_line(&h);
            // Never the final newline.
            let body = line.get(..line.len().saturating_sub(1)).unwrap_or(&[]);
            let mut i = 0usize;
            if c.stream()
                .set_write_timeout(Some(Duration::from_secs(1)))
                .is_err()
            {
                return Err("cannot set a write timeout".to_owned());
            }
            loop {
                if let Some(&b) = body.get(i % body.len().max(1)) {
                    // A failed write means the server closed: read what it said.
                    let _ = c.stream().write_all(&[b]);
                }
                i += 1;
                let slice = (Instant::now() + Duration::from_millis(250)).min(deadline);
                if c.readable(slice) {
                    break c.recv(deadline);
                }
                if Instant::now() >= deadline {
                    break Got::Timeout;
                }
            }
        } else {
            c.recv(deadline)
        };
        let took = since.elapsed();
        let seen = check_answer(
            &Answer::Error {
                code: "timeout",
                mentions: None,
            },
            &got,
        )
        .map_err(|e| format!("{e} (after {took:?}; server --timeout {t:?})"))?;
        if took + TIMEOUT_EARLY < t {
            return Err(format!(
                "{seen} after only {took:?}, before the server's --timeout {t:?}: is --server-timeout right?"
            ));
        }
        c.expect_closed(self.deadline())?;
        Ok(format!("{seen} after {took:.1?}, then close"))
    }

    fn line_too_long(&self) -> CaseResult {
        let mut c = self.connect_banner()?;
        let writer_stream = c
            .stream()
            .try_clone()
            .map_err(|e| format!("cannot clone the socket: {e}"))?;
        let stop = Arc::new(AtomicBool::new(false));
        let writer_stop = Arc::clone(&stop);
        let write_deadline = Instant::now() + self.cfg.reply * 2;
        let writer = std::thread::spawn(move || {
            write_huge_line(writer_stream, &writer_stop, write_deadline)
        });
        let got = c.recv(Instant::now() + self.cfg.reply * 2);
        let r = check_answer(
            &Answer::Error {
                code: "line_too_long",
                mentions: None,
            },
            &got,
        );
        let closed = if r.is_ok() {
            c.expect_closed(self.deadline())
        } else {
            Ok(())
        };
        stop.store(true, Ordering::Release);
        let _ = c.stream().shutdown(Shutdown::Both);
        let written = writer.join().unwrap_or(0);
        let seen = r?;
        closed?;
        Ok(format!(
            "{seen} after {written} of {HUGE_LINE} bytes were accepted, then close"
        ))
    }

    fn forbidden(&self) -> CaseResult {
        let mut c = self.connect()?;
        let got = c.recv(self.deadline());
        let seen = check_answer(
            &Answer::Error {
                code: "forbidden",
                mentions: None,
            },
            &got,
        )
        .map_err(|e| format!("{e} (the very first line must be the refusal, no banner)"))?;
        c.expect_closed(self.deadline())?;
        Ok(format!("first line: {seen}, then close"))
    }

    fn busy(&self) -> CaseResult {
        self.hold_then_one_more(
            self.cfg.max_clients.unwrap_or(0) as usize,
            "--max-clients",
            "",
        )
    }
}

/// Writes up to [`HUGE_LINE`] bytes without a newline until the peer stops taking them; returns
/// how many it took.
fn write_huge_line(mut s: TcpStream, stop: &AtomicBool, deadline: Instant) -> usize {
    let chunk = vec![b'x'; 64 * 1024];
    let mut written = 0usize;
    while written < HUGE_LINE && !stop.load(Ordering::Acquire) {
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        let wait = (deadline - now).min(Duration::from_millis(200));
        if s.set_write_timeout(Some(wait.max(Duration::from_millis(1))))
            .is_err()
        {
            break;
        }
        let n = chunk.len().min(HUGE_LINE - written);
        match s.write(&chunk[..n]) {
            Ok(0) => break,
            Ok(k) => written += k,
            Err(e) if is_timeout(&e) || e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    written
}

/// One JSON value as a wire line.
fn to_line(v: &Value) -> Vec<u8> {
    let mut s = v.to_string().into_bytes();
    s.push(b'\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hellos(rng_seed: u64) -> Vec<Value> {
        let cfg = Config::for_tests("127.0.0.1:1".parse().unwrap());
        let mut rng = fastrand::Rng::with_seed(rng_seed);
        let mut cx = Cx {
            cfg: &cfg,
            rng: &mut rng,
        };
        (0..200).map(|_| cx.hello(17, "imm", Tok::Wrong)).collect()
    }

    #[test]
    fn hellos_replay_from_the_rng_seed_and_use_valid_qpns() {
        let a = hellos(7);
        assert_eq!(a, hellos(7), "the same --rng-seed must replay the same run");
        assert_ne!(a, hellos(8));
        let qpns: std::collections::HashSet<u64> =
            a.iter().filter_map(|h| h["qpn"].as_u64()).collect();
        assert!(
            qpns.len() > 190,
            "QPNs should vary: {} distinct",
            qpns.len()
        );
        for h in &a {
            let (qpn, psn) = (h["qpn"].as_u64().unwrap(), h["psn"].as_u64().unwrap());
            assert!((0x100..1 << 24).contains(&qpn), "qpn {qpn:#x}");
            assert!(psn < 1 << 24, "psn {psn:#x}");
            assert!(h["token"].as_str().is_some_and(|t| t.starts_with("wrong-")));
        }
    }
}
