//! The cases that keep the server from being used as a weapon or held (issue 16): a hello that
//! names a victim's GID, one host holding every slot, the pinned-memory budget.

use super::{Answer, Cx, Got, Tok, check_accept, check_answer, check_banner, to_line};
use crate::conn::{CaseResult, Conn};
use serde_json::json;
use std::time::{Duration, Instant};

/// A GID of TEST-NET-1 (RFC 5737): never anyone's, never ours.
const VICTIM_GID: &str = "::ffff:192.0.2.1";

impl Cx<'_> {
    /// A write hello and a bench lat hello (the amplifier: 8 MiB pongs at whoever the hello
    /// names) announcing a GID that is not our address: `invalid_field` naming `gid`, no
    /// accept.
    pub(super) fn victim_gid(&mut self) -> CaseResult {
        let mut write = self.hello(self.small_len(), "imm", Tok::Right);
        write["gid"] = json!(VICTIM_GID);
        let mut lat = self.bench_hello(
            64,
            json!({"mode": "lat", "sizes": [64], "iters": 1000, "addr": 4096, "rkey": 1}),
        );
        lat["gid"] = json!(VICTIM_GID);
        let mut seen = Vec::new();
        for (what, h) in [("write hello", write), ("bench lat hello", lat)] {
            let s = self
                .line_case(
                    &to_line(&h),
                    &Answer::Error {
                        code: "invalid_field",
                        mentions: Some("gid"),
                    },
                )
                .map_err(|e| format!("{what} for the victim GID {VICTIM_GID}: {e}"))?;
            seen.push(format!("{what}: {s}"));
        }
        Ok(seen.join("; "))
    }

    /// Opens connections until the server stops giving banners (`n` of them expected), then
    /// checks that the next gets `busy` naming `mentions`.
    pub(super) fn hold_then_one_more(
        &self,
        n: usize,
        flag: &str,
        mentions: &'static str,
    ) -> CaseResult {
        let mut held = Vec::with_capacity(n);
        let settle_until = Instant::now() + super::SETTLE;
        while held.len() < n {
            let mut c = self.connect()?;
            match c.recv(self.deadline()) {
                Got::Line(v) if v["type"] == "banner" => {
                    check_banner(&v, self.cfg.token.is_some())?;
                    held.push(c);
                }
                Got::Line(v) if v["code"] == "busy" && Instant::now() < settle_until => {
                    // An earlier case's session may still be closing: give it a moment.
                    std::thread::sleep(Duration::from_millis(100));
                }
                other => {
                    return Err(format!(
                        "connection {} of {n} (the server's {flag}) got {} instead of a banner{}",
                        held.len() + 1,
                        other.describe(),
                        if matches!(other, Got::Line(_)) {
                            format!(": sessions leaked, or {flag} is not the server's value")
                        } else {
                            String::new()
                        }
                    ));
                }
            }
        }
        let mut extra = self.connect()?;
        let got = extra.recv(self.deadline());
        let seen = check_answer(
            &Answer::Error {
                code: "busy",
                mentions: Some(mentions),
            },
            &got,
        )
        .map_err(|e| format!("with {n} idle connections open, one more: {e}"))?;
        extra.expect_closed(self.deadline())?;
        drop(held);
        Ok(format!("{n} idle connections held; the next got {seen}"))
    }

    /// Two bench lat sessions that together pin more than `--max-pinned` (each about 2/3 of
    /// it): the first is accepted and held, the second is answered `busy` naming the budget;
    /// once the first is gone, the next is accepted again.
    pub(super) fn pinned_budget(&mut self) -> CaseResult {
        let budget = self.cfg.max_pinned.unwrap_or(0);
        // A lat session pins twice its buffer (plus a page each): a third of the budget each.
        let len = (budget / 3).max(64);
        let lat = json!({"mode": "lat", "sizes": [len], "iters": 1000, "addr": 4096, "rkey": 1});
        let (first, got) = self.lat_session(len, &lat)?;
        check_accept(&got, len, len)
            .map_err(|e| format!("the first {len}-byte lat session: {e}"))?;
        let line = to_line(&self.bench_hello(len, lat.clone()));
        let second = self
            .line_case(
                &line,
                &Answer::Error {
                    code: "busy",
                    mentions: Some("pinned-memory budget"),
                },
            )
            .map_err(|e| format!("a second {len}-byte lat session next to the first: {e}"))?;
        drop(first);
        // The first session's reservation comes back when the server notices we left.
        let until = Instant::now() + super::SETTLE + self.cfg.server_timeout;
        loop {
            let (_again, got) = self.lat_session(len, &lat)?;
            if check_accept(&got, len, len).is_ok() {
                break;
            }
            if Instant::now() > until {
                return Err(format!(
                    "after the first session closed, a lat session still got {}",
                    got.describe()
                ));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Ok(format!(
            "{len}-byte lat session held; a second got {second}; accepted again after the first left"
        ))
    }

    /// A bench lat hello of `len` bytes with `lat` as its parameters, on a fresh connection;
    /// returns it (an accept may come: secrets allowed) and the answer.
    fn lat_session(&mut self, len: u64, lat: &serde_json::Value) -> Result<(Conn, Got), String> {
        let mut c = self.connect_banner()?;
        c.send(
            &to_line(&self.bench_hello(len, lat.clone())),
            self.deadline(),
        )?;
        c.secrets_allowed = true;
        let got = c.recv(self.deadline());
        Ok((c, got))
    }
}
