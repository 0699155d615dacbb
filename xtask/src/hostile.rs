//! `cargo xtask hostile`: a protocol-level hostile client for a live `rdma-server`.
//!
//! No RDMA and no `rdma-proto`: it speaks raw TCP and builds its lines with `serde_json`, so it
//! tests the wire as `PROTOCOL.md` writes it, not as our own library happens to implement it.
//! Each case connects, misbehaves, and checks what the server answers (an `error` line with the
//! expected `code`, then a close; or a silent close) before a deadline. After every case a fresh
//! connection must still get a banner: nothing a client does may take the server down.
//!
//! Every line the server sends before a valid `hello` is checked for secrets (`rkey`, `addr`,
//! `qpn`): finding one fails the case.
//!
//! Output: one line per case (`PASS`/`FAIL`, the case, what was seen), or one JSON object per
//! case with `--json`, then a summary; the exit status is non-zero if any case failed.

use clap::{Args, ValueEnum};
use color_eyre::eyre::{Result, WrapErr as _, bail};
use serde_json::{Value, json};
use std::io::{self, Read as _, Write as _};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Lines from the server longer than this are a failure (no v1 message comes close).
const MAX_SERVER_LINE: usize = 64 * 1024;
/// Size of the unterminated line in `line_too_long`.
const HUGE_LINE: usize = 10 * 1024 * 1024;
/// How long after its deadline the server may take to send `timeout` and close.
const TIMEOUT_MARGIN: Duration = Duration::from_secs(3);
/// How much earlier than its deadline we accept the server's `timeout` (our clock starts after
/// the server's: we start counting when the banner arrives).
const TIMEOUT_EARLY: Duration = Duration::from_millis(500);
/// How long a freshly closed session may keep its `--max-clients` slot.
const SETTLE: Duration = Duration::from_secs(3);
/// Secret fields that must not appear before a valid hello.
const SECRET_FIELDS: [&str; 3] = ["rkey", "addr", "qpn"];

/// Misbehave against a live rdma-server and check every answer (hidden; used by the e2e tests).
#[derive(Debug, Clone, Args)]
pub struct HostileArgs {
    /// The server's handshake address, ADDR:PORT.
    #[arg(long)]
    pub server: SocketAddr,

    /// Case to run (repeatable). Default: every case that fits the server's configuration.
    #[arg(long = "case", value_name = "NAME")]
    pub cases: Vec<Case>,

    /// One JSON object per case, then a summary object.
    #[arg(long)]
    pub json: bool,

    /// The server's --buffer-size: `too_long` asks for one byte more, accepts must offer this.
    #[arg(long, default_value_t = 64)]
    pub buffer_size: u64,

    /// The server's --timeout (e.g. 3s): `slow_loris` and `slow_drip` expect `timeout` after it.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub server_timeout: Duration,

    /// The token the server requires (its --token-file content). Valid hellos carry it, and
    /// `wrong_token` and `missing_token` run.
    #[arg(long, conflicts_with = "token_file")]
    pub token: Option<String>,

    /// Like --token, read from a file (trailing newline trimmed, as the server does).
    #[arg(long)]
    pub token_file: Option<PathBuf>,

    /// The server's --max-clients: enables `busy` (opens that many idle connections, expects
    /// the next one to be refused).
    #[arg(long)]
    pub max_clients: Option<u32>,

    /// The server's --allow list excludes this client: only `forbidden` runs, and every
    /// connection must be refused before any banner.
    #[arg(long)]
    pub expect_forbidden: bool,

    /// GID announced in valid hellos (default: `::ffff:` + our local IPv4 address of the TCP
    /// connection, so the server's RDMA stack can resolve it).
    #[arg(long)]
    pub gid: Option<String>,

    /// How long to wait for each reply.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub reply_timeout: Duration,

    /// Keep trying to connect this long before the first case (the server may still be starting).
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub wait_for_server: Duration,

    /// Seed for the random QPNs and PSNs (printed, to replay a run).
    #[arg(long)]
    pub seed: Option<u64>,

    /// After every case, a real `rdma-client` (this binary) must still get its write verified.
    #[arg(long, value_name = "PATH")]
    pub probe_client: Option<PathBuf>,
}

/// One hostile behaviour.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "snake_case")]
pub enum Case {
    /// Garbage text instead of JSON: `bad_json`.
    BadJson,
    /// A JSON object cut off mid-way: `bad_json`.
    TruncatedJson,
    /// Valid JSON that is not an object (`[1]`): `bad_json`.
    NotObject,
    /// Bytes that are not UTF-8: `bad_utf8`.
    BadUtf8,
    /// 10 MiB without a newline: `line_too_long`; the server stops reading at its cap.
    LineTooLong,
    /// Hellos with one wrong field each (wrong JSON type, float, negative, bad GID/MTU/notify,
    /// zero length, missing field): `invalid_field` for every one.
    InvalidFields,
    /// `qpn` = 2^24: `invalid_field` naming `qpn`.
    QpnOutOfRange,
    /// `v: 2`: `unsupported_version` with `supported: [1]`.
    BadVersion,
    /// An unknown `type`: `unknown_type`.
    UnknownType,
    /// A server message (`banner`) sent to the server: `unexpected_message`.
    BannerToServer,
    /// `written` before `hello`: `unexpected_message`.
    WrittenBeforeHello,
    /// A valid hello (gets a real accept), then a second hello: `unexpected_message`
    /// (both notify modes).
    DuplicateHello,
    /// A hello asking for one byte more than the buffer: `too_long`.
    TooLong,
    /// Two sessions at once and one after: three different rkeys.
    FreshRkey,
    /// The client sends `error` first: the server closes without answering.
    ClientError,
    /// Banner read, then silence: `timeout` after the server's --timeout, then close.
    SlowLoris,
    /// A hello dribbled one byte at a time: the deadline covers the whole line, `timeout`.
    SlowDrip,
    /// Banner read, then the client vanishes.
    VanishAfterBanner,
    /// A valid hello, then the client vanishes without reading the accept.
    VanishAfterHello,
    /// A valid hello, the accept read (server QP in RTS), then the client vanishes (both modes).
    VanishAfterAccept,
    /// A wrong token: `unauthorized`, and the reply does not echo the real token.
    WrongToken,
    /// No token where one is required: `unauthorized`.
    MissingToken,
    /// A client outside --allow: `forbidden` as the very first line, no banner.
    Forbidden,
    /// --max-clients idle connections, then one more: `busy` as its first line.
    Busy,
}

impl Case {
    /// The name used on the command line and in reports.
    pub fn name(self) -> String {
        self.to_possible_value()
            .map(|v| v.get_name().to_owned())
            .unwrap_or_else(|| format!("{self:?}"))
    }

    /// Why this case does not fit the server's configuration, if it does not.
    fn unfit(self, cfg: &Config) -> Option<&'static str> {
        match self {
            Case::Forbidden if !cfg.expect_forbidden => {
                Some("needs --expect-forbidden (a server whose --allow excludes us)")
            }
            Case::Forbidden => None,
            _ if cfg.expect_forbidden => {
                Some("the server refuses us (--expect-forbidden): only `forbidden` applies")
            }
            Case::WrongToken | Case::MissingToken if cfg.token.is_none() => {
                Some("needs --token (a server that requires one)")
            }
            Case::Busy if cfg.max_clients.is_none() => {
                Some("needs --max-clients (the server's value)")
            }
            _ => None,
        }
    }
}

/// What a case needs to know about the server, shared with the case threads.
#[derive(Debug)]
struct Config {
    server: SocketAddr,
    buffer_size: u64,
    server_timeout: Duration,
    token: Option<String>,
    max_clients: Option<u32>,
    expect_forbidden: bool,
    /// The GID announced in valid hellos.
    gid: String,
    reply: Duration,
    seed: u64,
    probe_client: Option<PathBuf>,
}

/// The outcome of one case.
#[derive(Debug)]
struct Verdict {
    case: Case,
    pass: bool,
    seen: String,
    elapsed: Duration,
}

/// Runs the selected cases and reports; `Err` if any failed.
pub fn cmd(args: &HostileArgs) -> Result<()> {
    let token = match (&args.token, &args.token_file) {
        (Some(t), _) => Some(t.clone()),
        (None, Some(path)) => {
            let text = std::fs::read_to_string(path)
                .wrap_err_with(|| format!("reading the token file {}", path.display()))?;
            Some(text.trim_end_matches(['\r', '\n']).to_owned())
        }
        (None, None) => None,
    };
    let cfg = Arc::new(Config {
        server: args.server,
        buffer_size: args.buffer_size,
        server_timeout: args.server_timeout,
        token,
        max_clients: args.max_clients,
        expect_forbidden: args.expect_forbidden,
        gid: match &args.gid {
            Some(g) => g.clone(),
            None => local_gid(args.server, args.reply_timeout, args.wait_for_server)?,
        },
        reply: args.reply_timeout,
        seed: args.seed.unwrap_or_else(random_seed),
        probe_client: args.probe_client.clone(),
    });
    let cases = select_cases(&args.cases, &cfg)?;
    if !args.json {
        println!(
            "hostile: {} case(s) against {} (seed {}, hello gid {})",
            cases.len(),
            cfg.server,
            cfg.seed,
            cfg.gid
        );
    }
    let mut verdicts = Vec::new();
    for (i, &case) in cases.iter().enumerate() {
        let v = run_case(&cfg, case, i as u64);
        print_verdict(&v, args.json);
        verdicts.push(v);
    }
    let failed: Vec<String> = verdicts
        .iter()
        .filter(|v| !v.pass)
        .map(|v| v.case.name())
        .collect();
    if args.json {
        println!(
            "{}",
            json!({
                "type": "summary",
                "cases": verdicts.len(),
                "passed": verdicts.len() - failed.len(),
                "failed": failed,
                "seed": cfg.seed,
            })
        );
    } else {
        println!(
            "hostile: {}/{} passed",
            verdicts.len() - failed.len(),
            verdicts.len()
        );
    }
    if !failed.is_empty() {
        bail!(
            "{} hostile case(s) failed: {}",
            failed.len(),
            failed.join(", ")
        );
    }
    Ok(())
}

/// The cases to run: the requested ones (all must fit), or every one that fits.
fn select_cases(requested: &[Case], cfg: &Config) -> Result<Vec<Case>> {
    if requested.is_empty() {
        return Ok(Case::value_variants()
            .iter()
            .copied()
            .filter(|c| c.unfit(cfg).is_none())
            .collect());
    }
    for c in requested {
        if let Some(why) = c.unfit(cfg) {
            bail!("case `{}` does not fit this server: it {why}", c.name());
        }
    }
    Ok(requested.to_vec())
}

fn print_verdict(v: &Verdict, json: bool) {
    // One line per case, whatever the server sent.
    let seen = v.seen.replace(['\n', '\r'], " ");
    if json {
        println!(
            "{}",
            json!({
                "type": "case",
                "case": v.case.name(),
                "pass": v.pass,
                "seen": seen,
                "ms": v.elapsed.as_millis() as u64,
            })
        );
    } else {
        println!(
            "{} {:<22} {:>6} ms  {}",
            if v.pass { "PASS" } else { "FAIL" },
            v.case.name(),
            v.elapsed.as_millis(),
            seen
        );
    }
}

/// The longest a case may take before it is declared hung.
fn case_budget(cfg: &Config) -> Duration {
    cfg.server_timeout * 2 + cfg.reply * 4 + SETTLE * 2 + Duration::from_secs(10)
}

/// Runs one case on its own thread under a wall-clock budget, then the health probe.
fn run_case(cfg: &Arc<Config>, case: Case, index: u64) -> Verdict {
    let started = Instant::now();
    let (tx, rx) = std::sync::mpsc::channel();
    let thread_cfg = Arc::clone(cfg);
    let spawned = std::thread::Builder::new()
        .name(case.name())
        .spawn(move || {
            let mut rng = SplitMix64::new(thread_cfg.seed ^ index.wrapping_mul(0x9E37_79B9));
            let r = run_one(&thread_cfg, case, &mut rng);
            let _ = tx.send(r);
        });
    let budget = case_budget(cfg);
    let outcome = match spawned {
        Err(e) => Err(format!("cannot start the case thread: {e}")),
        Ok(_) => match rx.recv_timeout(budget) {
            Ok(r) => r,
            Err(_) => Err(format!("the case did not finish within {budget:?}")),
        },
    };
    let outcome = outcome.and_then(|seen| match probe(cfg).and_then(|()| probe_write(cfg)) {
        Ok(()) => Ok(seen),
        Err(e) => Err(format!(
            "{seen}; but afterwards a fresh connection failed: {e}"
        )),
    });
    let (pass, seen) = match outcome {
        Ok(s) => (true, s),
        Err(s) => (false, s),
    };
    Verdict {
        case,
        pass,
        seen,
        elapsed: started.elapsed(),
    }
}

/// What a case saw, on success, or what went wrong.
type CaseResult = Result<String, String>;

fn run_one(cfg: &Config, case: Case, rng: &mut SplitMix64) -> CaseResult {
    let cx = Cx { cfg, rng };
    cx.run(case)
}

/// A case's view of the configuration and its random numbers.
struct Cx<'a> {
    cfg: &'a Config,
    rng: &'a mut SplitMix64,
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
    fn run(mut self, case: Case) -> CaseResult {
        let e = |code| Expect::Error {
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
                    &Expect::Error {
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
            Case::TooLong => {
                let h = self.hello(self.cfg.buffer_size.saturating_add(1), "imm", Tok::Right);
                self.line_case(&to_line(&h), &e("too_long"))
            }
            Case::FreshRkey => self.fresh_rkey(),
            Case::ClientError => self.line_case(
                b"{\"type\":\"error\",\"v\":1,\"code\":\"internal\",\"message\":\"hostile client gives up\"}\n",
                &Expect::Close,
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
        }
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
        let qpn = 0x100 + self.rng.below(0xFF_FFFF - 0x100);
        let psn = self.rng.below(1 << 24);
        let mut h = json!({
            "type": "hello", "v": 1, "qpn": qpn, "psn": psn, "gid": self.cfg.gid, "lid": 0,
            "mtu": 1024, "length": length, "notify": notify,
        });
        match (tok, &self.cfg.token) {
            (Tok::Right, Some(t)) => h["token"] = json!(t),
            (Tok::Wrong, _) => h["token"] = json!(format!("wrong-{:016x}", self.rng.next())),
            _ => {}
        }
        h
    }

    fn connect(&self) -> Result<Conn, String> {
        Conn::open(self.cfg, self.deadline())
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
    fn line_case(&self, line: &[u8], expect: &Expect) -> CaseResult {
        let mut c = self.connect_banner()?;
        c.send(line, self.deadline())?;
        c.expect(expect, self.deadline(), self.cfg.reply)
    }

    fn bad_version(&self) -> CaseResult {
        let mut c = self.connect_banner()?;
        c.send(b"{\"type\":\"hello\",\"v\":2}\n", self.deadline())?;
        let got = c.recv(self.deadline());
        let seen = judge(
            &Expect::Error {
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
        let mut failures = Vec::new();
        for (what, mutate) in variants {
            let mut h = self.hello(self.small_len(), "imm", Tok::Right);
            mutate(&mut h);
            let r = self.line_case(
                &to_line(&h),
                &Expect::Error {
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
                "{n}/{n} malformed hellos refused with invalid_field, then close",
                n = variants.len()
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
                    &Expect::Error {
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
        let seen = judge(
            &Expect::Error {
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
            if c.stream
                .set_write_timeout(Some(Duration::from_secs(1)))
                .is_err()
            {
                return Err("cannot set a write timeout".to_owned());
            }
            loop {
                if let Some(&b) = body.get(i % body.len().max(1)) {
                    // A failed write means the server closed: read what it said.
                    let _ = c.stream.write_all(&[b]);
                }
                i += 1;
                let slice = (Instant::now() + Duration::from_millis(250)).min(deadline);
                match c.recv(slice) {
                    Got::Timeout if Instant::now() < deadline => continue,
                    other => break other,
                }
            }
        } else {
            c.recv(deadline)
        };
        let took = since.elapsed();
        let seen = judge(
            &Expect::Error {
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
            .stream
            .try_clone()
            .map_err(|e| format!("cannot clone the socket: {e}"))?;
        let stop = Arc::new(AtomicBool::new(false));
        let writer_stop = Arc::clone(&stop);
        let write_deadline = Instant::now() + self.cfg.reply * 2;
        let writer = std::thread::spawn(move || {
            write_huge_line(writer_stream, &writer_stop, write_deadline)
        });
        let got = c.recv(Instant::now() + self.cfg.reply * 2);
        let r = judge(
            &Expect::Error {
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
        let _ = c.stream.shutdown(Shutdown::Both);
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
        let seen = judge(
            &Expect::Error {
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
        let n = self.cfg.max_clients.unwrap_or(0) as usize;
        let mut held = Vec::with_capacity(n);
        let settle_until = Instant::now() + SETTLE;
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
                        "connection {} of {n} (the server's --max-clients) got {} instead of a banner{}",
                        held.len() + 1,
                        other.describe(),
                        if matches!(other, Got::Line(_)) {
                            ": sessions leaked, or --max-clients is not the server's value"
                        } else {
                            ""
                        }
                    ));
                }
            }
        }
        let mut extra = self.connect()?;
        let got = extra.recv(self.deadline());
        let seen = judge(
            &Expect::Error {
                code: "busy",
                mentions: None,
            },
            &got,
        )
        .map_err(|e| format!("with {n} idle connections open, one more: {e}"))?;
        extra.expect_closed(self.deadline())?;
        drop(held);
        Ok(format!("{n} idle connections held; the next got {seen}"))
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

/// Checks a fresh connection still gets its first line (a banner, or `forbidden`).
fn probe(cfg: &Config) -> Result<(), String> {
    let settle_until = Instant::now() + SETTLE;
    loop {
        let mut c = Conn::open(cfg, Instant::now() + cfg.reply)?;
        match c.recv(Instant::now() + cfg.reply) {
            Got::Line(v) if cfg.expect_forbidden && v["code"] == "forbidden" => return Ok(()),
            Got::Line(v) if !cfg.expect_forbidden && v["type"] == "banner" => return Ok(()),
            Got::Line(v) if v["code"] == "busy" && Instant::now() < settle_until => {
                std::thread::sleep(Duration::from_millis(100));
            }
            other => {
                return Err(format!(
                    "expected {}, got {}",
                    if cfg.expect_forbidden {
                        "`forbidden`"
                    } else {
                        "a banner"
                    },
                    other.describe()
                ));
            }
        }
    }
}

/// With `--probe-client`: a real client must still get a write verified (the server survived
/// the case as a whole, not just its accept loop).
fn probe_write(cfg: &Config) -> Result<(), String> {
    let Some(client) = cfg.probe_client.as_ref().filter(|_| !cfg.expect_forbidden) else {
        return Ok(());
    };
    let sh = xshell::Shell::new().map_err(|e| e.to_string())?;
    let server = cfg.server.to_string();
    let mut cmd = xshell::cmd!(
        sh,
        "{client} {server} --json --timeout 10s --wait-for-server 5s"
    );
    if let Some(token) = &cfg.token {
        cmd = cmd.env("RDMA_WRITE_TOKEN", token);
    }
    let shown = cmd.to_string();
    let finished = crate::exec::Captured::spawn_command(cmd.into(), shown, None)
        .and_then(|c| c.finish(Instant::now() + Duration::from_secs(40)))
        .map_err(|e| format!("probe client: {e:#}"))?;
    let verified = finished.stdout.lines().any(|l| {
        serde_json::from_str::<Value>(l)
            .is_ok_and(|v| v["type"] == "verified" && v["verified"] == true)
    });
    if finished.code == Some(0) && verified {
        Ok(())
    } else {
        Err(format!(
            "a real client was not verified (exit {:?}): {}",
            finished.code,
            crate::exec::tail(&finished.stderr, 400)
        ))
    }
}

/// What the server should answer.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Expect {
    /// An `error` line with this code (and text in `message`), then a close.
    Error {
        code: &'static str,
        mentions: Option<&'static str>,
    },
    /// A close without any line.
    Close,
}

/// What came from the server.
#[derive(Debug, Clone, PartialEq)]
enum Got {
    /// One line, parsed as a JSON object with `type` and `v: 1`.
    Line(Value),
    /// The server closed the connection (FIN).
    Eof,
    /// The server reset the connection (RST: it closed with our bytes unread).
    Reset,
    /// Nothing within the deadline.
    Timeout,
    /// Something that breaks the protocol, or a secret leaked.
    Bad(String),
}

impl Got {
    fn describe(&self) -> String {
        match self {
            Got::Line(v) => format!("line {}", shorten(&v.to_string(), 300)),
            Got::Eof => "a close".to_owned(),
            Got::Reset => "a connection reset".to_owned(),
            Got::Timeout => "nothing before the deadline".to_owned(),
            Got::Bad(s) => s.clone(),
        }
    }
}

/// Matches what came against what was expected; `Ok` describes it.
fn judge(expect: &Expect, got: &Got) -> Result<String, String> {
    match (expect, got) {
        (Expect::Error { code, mentions }, Got::Line(v)) => {
            let ty = v.get("type").and_then(Value::as_str);
            let got_code = v.get("code").and_then(Value::as_str);
            let message = v.get("message").and_then(Value::as_str);
            match (ty, got_code, message) {
                (Some("error"), Some(c), Some(m)) if c == *code && !m.is_empty() => {
                    if let Some(word) = mentions
                        && !m.contains(word)
                    {
                        return Err(format!(
                            "error `{c}` as expected, but its message does not name `{word}`: {m:?}"
                        ));
                    }
                    Ok(format!("error {c}: {:?}", shorten(m, 120)))
                }
                (Some("error"), Some(c), _) if c == *code => Err(format!(
                    "error `{c}` without a `message` text: {}",
                    got.describe()
                )),
                _ => Err(format!("expected error `{code}`, got {}", got.describe())),
            }
        }
        (Expect::Error { code, .. }, other) => {
            Err(format!("expected error `{code}`, got {}", other.describe()))
        }
        (Expect::Close, Got::Eof | Got::Reset) => {
            Ok(format!("closed without a reply ({})", got.describe()))
        }
        (Expect::Close, other) => Err(format!(
            "expected a close without a reply, got {}",
            other.describe()
        )),
    }
}

/// Checks a banner: right type and version, speaks v1, says whether a token is needed.
fn check_banner(v: &Value, token_required: bool) -> Result<(), String> {
    if v.get("type") != Some(&json!("banner")) {
        return Err(format!(
            "expected a banner, got {}",
            shorten(&v.to_string(), 300)
        ));
    }
    let speaks_v1 = v
        .get("versions")
        .and_then(Value::as_array)
        .is_some_and(|vs| vs.contains(&json!(1)));
    if !speaks_v1 {
        return Err(format!("banner without version 1 in `versions`: {v}"));
    }
    let want = if token_required { "token" } else { "none" };
    if v.get("auth").and_then(Value::as_str) != Some(want) {
        return Err(format!(
            "banner says auth {:?} but the harness says {want:?} (--token given: {token_required})",
            v.get("auth")
        ));
    }
    Ok(())
}

/// Checks an accept for a hello of `length` bytes; returns its rkey.
fn check_accept(got: &Got, length: u64, buffer_size: u64) -> Result<u32, String> {
    let v = match got {
        Got::Line(v) if v.get("type") == Some(&json!("accept")) => v,
        other => {
            return Err(format!(
                "expected an accept for a valid hello, got {}",
                other.describe()
            ));
        }
    };
    let num = |k: &str| v.get(k).and_then(Value::as_u64);
    let (Some(qpn), Some(psn), Some(addr), Some(rkey), Some(buf_len)) = (
        num("qpn"),
        num("psn"),
        num("addr"),
        num("rkey"),
        num("buf_len"),
    ) else {
        return Err(format!("accept with a missing or non-integer field: {v}"));
    };
    let rkey = u32::try_from(rkey).map_err(|_| format!("accept rkey {rkey} is not a u32"))?;
    if qpn > 0xFF_FFFF || psn > 0xFF_FFFF {
        return Err(format!("accept qpn/psn out of 24-bit range: {v}"));
    }
    if addr == 0 {
        return Err(format!("accept offers address 0: {v}"));
    }
    if buf_len != buffer_size {
        return Err(format!(
            "accept offers buf_len {buf_len}, but the harness says --buffer-size {buffer_size}"
        ));
    }
    if buf_len < length {
        return Err(format!(
            "accept offers {buf_len} bytes for a {length}-byte hello"
        ));
    }
    Ok(rkey)
}

/// The fields that must not appear in a line sent before a valid hello.
fn secrets_in(v: &Value) -> Vec<&'static str> {
    SECRET_FIELDS
        .iter()
        .copied()
        .filter(|k| v.get(*k).is_some())
        .collect()
}

/// Parses one line from the server: UTF-8, a JSON object, `type` a string, `v` = 1.
fn parse_server_line(bytes: &[u8]) -> Result<Value, String> {
    let text = std::str::from_utf8(bytes)
        .map_err(|e| format!("server sent a line that is not UTF-8 ({e})"))?;
    let v: Value = serde_json::from_str(text).map_err(|e| {
        format!(
            "server sent a line that is not JSON ({e}): {}",
            shorten(text, 200)
        )
    })?;
    if !v.is_object() || !v.get("type").is_some_and(Value::is_string) {
        return Err(format!(
            "server sent a line that is not a typed object: {}",
            shorten(text, 200)
        ));
    }
    if v.get("v") != Some(&json!(1)) {
        return Err(format!(
            "server line without `v: 1`: {}",
            shorten(text, 200)
        ));
    }
    Ok(v)
}

/// One JSON value as a wire line.
fn to_line(v: &Value) -> Vec<u8> {
    let mut s = v.to_string().into_bytes();
    s.push(b'\n');
    s
}

/// The GID for our hellos: our local address towards the server, IPv4-mapped (so the server's
/// RDMA stack can resolve it; the QP never sends anything anyway).
fn local_gid(server: SocketAddr, wait: Duration, retry_for: Duration) -> Result<String> {
    let until = Instant::now() + retry_for;
    let s = loop {
        match TcpStream::connect_timeout(&server, wait) {
            Ok(s) => break s,
            Err(_) if Instant::now() < until => std::thread::sleep(Duration::from_millis(200)),
            Err(e) => {
                return Err(e).wrap_err_with(|| {
                    format!("cannot connect to the server at {server} (tried for {retry_for:?}): is it running?")
                });
            }
        }
    };
    let local = s.local_addr().wrap_err("reading our local address")?.ip();
    Ok(gid_for(local))
}

/// An IPv4-mapped GID for an IPv4 address, the address itself for IPv6; a typical guest
/// address for loopback (which has no usable RoCE GID).
fn gid_for(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) if !v4.is_loopback() && !v4.is_unspecified() => format!("::ffff:{v4}"),
        IpAddr::V6(v6) if !v6.is_loopback() && !v6.is_unspecified() => v6.to_string(),
        _ => "::ffff:10.0.0.2".to_owned(),
    }
}

/// One TCP connection to the server with a line reader.
struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
    /// Set once a valid hello was sent: from then on the server may reveal its buffer.
    secrets_allowed: bool,
}

impl Conn {
    fn open(cfg: &Config, deadline: Instant) -> Result<Conn, String> {
        let wait = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1));
        let stream = TcpStream::connect_timeout(&cfg.server, wait)
            .map_err(|e| format!("cannot connect to {}: {e}", cfg.server))?;
        let _ = stream.set_nodelay(true);
        Ok(Conn {
            stream,
            buf: Vec::new(),
            secrets_allowed: false,
        })
    }

    fn send(&mut self, bytes: &[u8], deadline: Instant) -> Result<(), String> {
        let wait = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1));
        self.stream
            .set_write_timeout(Some(wait))
            .and_then(|()| self.stream.write_all(bytes))
            .map_err(|e| format!("sending {} bytes failed: {e}", bytes.len()))
    }

    /// Reads one line before `deadline`; checks it for secrets while no valid hello was sent.
    fn recv(&mut self, deadline: Instant) -> Got {
        let got = match self.read_line(deadline) {
            Ok(Some(bytes)) => match parse_server_line(&bytes) {
                Ok(v) => Got::Line(v),
                Err(e) => Got::Bad(e),
            },
            Ok(None) => Got::Eof,
            Err(g) => g,
        };
        if let Got::Line(v) = &got
            && !self.secrets_allowed
        {
            let leaked = secrets_in(v);
            if !leaked.is_empty() {
                return Got::Bad(format!(
                    "SECRET LEAK: a line sent before any valid hello carries {leaked:?}: {v}"
                ));
            }
        }
        got
    }

    /// Raw line reader: `Ok(None)` on a clean close between lines.
    fn read_line(&mut self, deadline: Instant) -> Result<Option<Vec<u8>>, Got> {
        let mut chunk = [0u8; 8192];
        loop {
            if let Some(i) = self.buf.iter().position(|&b| b == b'\n') {
                let mut line: Vec<u8> = self.buf.drain(..=i).collect();
                line.pop();
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                return Ok(Some(line));
            }
            if self.buf.len() > MAX_SERVER_LINE {
                return Err(Got::Bad(format!(
                    "the server sent more than {MAX_SERVER_LINE} bytes without a newline"
                )));
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(Got::Timeout);
            }
            if self.stream.set_read_timeout(Some(deadline - now)).is_err() {
                return Err(Got::Bad("cannot set a read timeout".to_owned()));
            }
            match self.stream.read(&mut chunk) {
                Ok(0) if self.buf.is_empty() => return Ok(None),
                Ok(0) => {
                    return Err(Got::Bad(format!(
                        "the server closed in the middle of a line: {:?}",
                        shorten(&String::from_utf8_lossy(&self.buf), 200)
                    )));
                }
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if is_timeout(&e) || e.kind() == io::ErrorKind::Interrupted => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::ConnectionReset | io::ErrorKind::ConnectionAborted
                    ) =>
                {
                    return Err(Got::Reset);
                }
                Err(e) => return Err(Got::Bad(format!("reading from the server: {e}"))),
            }
        }
    }

    /// The next thing must be a close (after an `error`, the sender closes).
    fn expect_closed(&mut self, deadline: Instant) -> Result<(), String> {
        match self.recv(deadline) {
            Got::Eof | Got::Reset => Ok(()),
            Got::Timeout => Err("the connection stayed open after the error line".to_owned()),
            other => Err(format!(
                "after the error line the server sent {}",
                other.describe()
            )),
        }
    }

    /// Reads the answer and checks it; after an expected error, also the close.
    fn expect(&mut self, expect: &Expect, deadline: Instant, reply: Duration) -> CaseResult {
        let got = self.recv(deadline);
        let seen = judge(expect, &got)?;
        if matches!(expect, Expect::Error { .. }) {
            self.expect_closed(Instant::now() + reply)?;
            return Ok(format!("{seen}, then close"));
        }
        Ok(seen)
    }
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

fn shorten(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// A seed from the OS (no extra crate: `/dev/urandom`), else from the clock and pid.
pub(crate) fn random_seed() -> u64 {
    let mut b = [0u8; 8];
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .is_ok()
    {
        return u64::from_le_bytes(b);
    }
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    t ^ u64::from(std::process::id()).rotate_left(32)
}

/// SplitMix64: small, seedable, good enough for test QPNs and payloads (not for secrets).
#[derive(Debug, Clone)]
pub(crate) struct SplitMix64(u64);

impl SplitMix64 {
    pub(crate) fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n > 0`; 0 when `n == 0`).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }

    pub(crate) fn fill(&mut self, out: &mut [u8]) {
        for chunk in out.chunks_mut(8) {
            let r = self.next().to_le_bytes();
            chunk.copy_from_slice(&r[..chunk.len()]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdma_proto::{
        DEFAULT_MAX_LINE, ErrorCode, ErrorMsg, FrameError, LineConn, QpEndpoint, ServerEvent,
        ServerHandshake, ServerMessage, ServerPolicy,
    };
    use std::net::{Ipv4Addr, TcpListener};
    use std::sync::atomic::{AtomicU32, AtomicUsize};

    /// How the fake server behaves: the reference state machine, no RDMA.
    #[derive(Debug, Clone, Copy)]
    struct Fake {
        timeout: Duration,
        max_clients: usize,
        forbid: bool,
        leak_in_banner: bool,
        same_rkey: bool,
        token: Option<&'static str>,
    }

    impl Default for Fake {
        fn default() -> Self {
            Self {
                timeout: Duration::from_millis(800),
                max_clients: 64,
                forbid: false,
                leak_in_banner: false,
                same_rkey: false,
                token: None,
            }
        }
    }

    fn refuse(mut s: TcpStream, code: ErrorCode) {
        let line = ServerMessage::Error(ErrorMsg {
            code,
            message: "refused by the fake".to_owned(),
            supported: None,
        })
        .to_line();
        let _ = s.write_all(line.as_bytes());
        let _ = s.shutdown(Shutdown::Both);
    }

    /// A multi-client fake of rdma-server's session flow on 127.0.0.1.
    fn fake_server(f: Fake) -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let active = Arc::new(AtomicUsize::new(0));
        let rkeys = Arc::new(AtomicU32::new(0x1000));
        std::thread::spawn(move || {
            for s in l.incoming() {
                let Ok(s) = s else { continue };
                if f.forbid {
                    refuse(s, ErrorCode::Forbidden);
                    continue;
                }
                if active.load(Ordering::Acquire) >= f.max_clients {
                    refuse(s, ErrorCode::Busy);
                    continue;
                }
                active.fetch_add(1, Ordering::AcqRel);
                let (active, rkeys) = (Arc::clone(&active), Arc::clone(&rkeys));
                std::thread::spawn(move || {
                    fake_session(s, f, &rkeys);
                    active.fetch_sub(1, Ordering::AcqRel);
                });
            }
        });
        addr
    }

    fn fake_session(s: TcpStream, f: Fake, rkeys: &AtomicU32) {
        let soon = || Instant::now() + Duration::from_secs(1);
        let mut conn = LineConn::new(s, DEFAULT_MAX_LINE);
        let mut hs = ServerHandshake::new(ServerPolicy {
            max_len: 64,
            token: f.token.map(str::to_owned),
            program_version: "0".to_owned(),
            features: ServerPolicy::default_features(),
        });
        let mut banner = hs.banner().unwrap().to_line();
        if f.leak_in_banner {
            banner = banner.replacen("\"v\":1", "\"v\":1,\"rkey\":4660", 1);
        }
        if conn.send_line(&banner, soon()).is_err() {
            return;
        }
        loop {
            let line = match conn.read_line(Instant::now() + f.timeout) {
                Ok(l) => l,
                Err(e @ (FrameError::Timeout { .. } | FrameError::LineTooLong { .. })) => {
                    let _ =
                        conn.send_line(&ServerMessage::Error(e.to_error_msg()).to_line(), soon());
                    return;
                }
                Err(_) => return,
            };
            let reply = match hs.on_line(&line) {
                Ok(ServerEvent::Hello(_)) => {
                    let rkey = if f.same_rkey {
                        0x1000
                    } else {
                        rkeys.fetch_add(1, Ordering::AcqRel)
                    };
                    let ep = QpEndpoint {
                        qpn: 0x12,
                        psn: 0x5678,
                        gid: rdma_proto::Gid::from(Ipv4Addr::LOCALHOST.to_ipv6_mapped()),
                        lid: 0,
                        mtu: 1024,
                    };
                    match hs.accept(ep, 0x7f00_dead_b000, rkey, 64) {
                        Ok(a) => a,
                        Err(e) => hs.fail(&e),
                    }
                }
                Ok(ServerEvent::PeerError(_)) => return,
                Ok(ServerEvent::Written(_)) => ServerMessage::Error(ErrorMsg {
                    code: ErrorCode::UnexpectedMessage,
                    message: "`written` before `hello`".to_owned(),
                    supported: None,
                }),
                Err(e) => hs.fail(&e),
            };
            let last = matches!(reply, ServerMessage::Error(_));
            if conn.send_line(&reply.to_line(), soon()).is_err() || last {
                return;
            }
        }
    }

    fn config(server: SocketAddr, f: &Fake) -> Arc<Config> {
        Arc::new(Config {
            server,
            buffer_size: 64,
            server_timeout: f.timeout,
            token: f.token.map(str::to_owned),
            max_clients: (f.max_clients < 64).then_some(f.max_clients as u32),
            expect_forbidden: f.forbid,
            gid: "::ffff:10.0.0.2".to_owned(),
            reply: Duration::from_secs(3),
            seed: 7,
            probe_client: None,
        })
    }

    fn run_all(f: Fake) -> Vec<Verdict> {
        let cfg = config(fake_server(f), &f);
        let cases = select_cases(&[], &cfg).unwrap();
        cases
            .iter()
            .enumerate()
            .map(|(i, &c)| run_case(&cfg, c, i as u64))
            .collect()
    }

    fn failed(vs: &[Verdict]) -> Vec<String> {
        vs.iter()
            .filter(|v| !v.pass)
            .map(|v| format!("{}: {}", v.case.name(), v.seen))
            .collect()
    }

    #[test]
    fn a_correct_server_passes_every_case() {
        let vs = run_all(Fake::default());
        for v in &vs {
            print_verdict(v, false);
        }
        assert!(vs.len() >= 20, "{} cases", vs.len());
        assert_eq!(failed(&vs), Vec::<String>::new());
    }

    #[test]
    fn token_and_busy_cases_pass_against_a_correct_server() {
        let f = Fake {
            token: Some("s3cret-token-0123"),
            max_clients: 3,
            ..Fake::default()
        };
        let cfg = config(fake_server(f), &f);
        for (i, case) in [
            Case::WrongToken,
            Case::MissingToken,
            Case::Busy,
            Case::DuplicateHello,
        ]
        .into_iter()
        .enumerate()
        {
            let v = run_case(&cfg, case, i as u64);
            assert!(v.pass, "{}: {}", case.name(), v.seen);
        }
    }

    #[test]
    fn forbidden_config_runs_only_forbidden_and_passes() {
        let f = Fake {
            forbid: true,
            ..Fake::default()
        };
        let vs = run_all(f);
        assert_eq!(vs.len(), 1);
        assert_eq!(vs[0].case, Case::Forbidden);
        assert!(vs[0].pass, "{}", vs[0].seen);
    }

    #[test]
    fn a_leaking_banner_fails() {
        let f = Fake {
            leak_in_banner: true,
            ..Fake::default()
        };
        let cfg = config(fake_server(f), &f);
        let v = run_case(&cfg, Case::BadJson, 0);
        assert!(!v.pass);
        assert!(v.seen.contains("SECRET LEAK"), "{}", v.seen);
    }

    #[test]
    fn a_reused_rkey_fails() {
        let f = Fake {
            same_rkey: true,
            ..Fake::default()
        };
        let cfg = config(fake_server(f), &f);
        let v = run_case(&cfg, Case::FreshRkey, 0);
        assert!(!v.pass);
        assert!(v.seen.contains("twice"), "{}", v.seen);
    }

    #[test]
    fn wrong_expectations_fail() {
        let f = Fake::default();
        let addr = fake_server(f);
        // The harness claims a longer timeout than the server has: `timeout` comes too early.
        let mut cfg = Config {
            server_timeout: Duration::from_secs(3),
            ..Arc::try_unwrap(config(addr, &f)).unwrap()
        };
        let v = run_case(&Arc::new(cfg), Case::SlowLoris, 0);
        assert!(
            !v.pass && v.seen.contains("before the server's --timeout"),
            "{}",
            v.seen
        );
        // The harness claims a token is required: the banner says otherwise.
        cfg = Config {
            token: Some("x".to_owned()),
            ..Arc::try_unwrap(config(addr, &f)).unwrap()
        };
        let v = run_case(&Arc::new(cfg), Case::BadJson, 0);
        assert!(!v.pass && v.seen.contains("auth"), "{}", v.seen);
        // Busy with a wrong --max-clients: the extra connection is admitted.
        cfg = Config {
            max_clients: Some(2),
            ..Arc::try_unwrap(config(addr, &f)).unwrap()
        };
        let v = run_case(&Arc::new(cfg), Case::Busy, 0);
        assert!(
            !v.pass && v.seen.contains("expected error `busy`"),
            "{}",
            v.seen
        );
    }

    #[test]
    fn nothing_listening_fails_the_case() {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let f = Fake::default();
        let v = run_case(&config(port, &f), Case::BadJson, 0);
        assert!(!v.pass && v.seen.contains("cannot connect"), "{}", v.seen);
    }

    #[test]
    fn judge_matches_codes_messages_and_closes() {
        let err = |code: &str, msg: &str| {
            Got::Line(json!({"type": "error", "v": 1, "code": code, "message": msg}))
        };
        let e = |code| Expect::Error {
            code,
            mentions: None,
        };
        assert!(judge(&e("bad_json"), &err("bad_json", "bad JSON")).is_ok());
        assert!(judge(&e("bad_json"), &err("bad_utf8", "x")).is_err());
        assert!(judge(&e("bad_json"), &err("bad_json", "")).is_err());
        assert!(judge(&e("bad_json"), &Got::Eof).is_err());
        assert!(judge(&e("bad_json"), &Got::Timeout).is_err());
        let banner = Got::Line(json!({"type": "banner", "v": 1}));
        assert!(judge(&e("bad_json"), &banner).is_err());
        let m = Expect::Error {
            code: "invalid_field",
            mentions: Some("qpn"),
        };
        assert!(judge(&m, &err("invalid_field", "field `qpn` of `hello`")).is_ok());
        assert!(judge(&m, &err("invalid_field", "field `psn`")).is_err());
        assert!(judge(&Expect::Close, &Got::Eof).is_ok());
        assert!(judge(&Expect::Close, &Got::Reset).is_ok());
        assert!(judge(&Expect::Close, &err("internal", "x")).is_err());
        assert!(judge(&Expect::Close, &Got::Timeout).is_err());
    }

    #[test]
    fn server_lines_are_parsed_strictly_and_checked_for_secrets() {
        assert!(parse_server_line(b"{\"type\":\"banner\",\"v\":1}").is_ok());
        assert!(parse_server_line(b"{\"type\":\"banner\",\"v\":2}").is_err());
        assert!(parse_server_line(b"[1]").is_err());
        assert!(parse_server_line(b"{\"v\":1}").is_err());
        assert!(parse_server_line(b"\xff").is_err());
        let v = json!({"type": "error", "v": 1, "rkey": 1, "qpn": 2});
        assert_eq!(secrets_in(&v), vec!["rkey", "qpn"]);
        assert!(secrets_in(&json!({"type": "banner", "message": "rkey addr qpn"})).is_empty());
    }

    #[test]
    fn banners_and_accepts_are_checked() {
        let b = json!({"type": "banner", "v": 1, "versions": [1], "features": [], "auth": "none"});
        assert!(check_banner(&b, false).is_ok());
        assert!(check_banner(&b, true).is_err());
        let b2 = json!({"type": "banner", "v": 1, "versions": [2], "auth": "none"});
        assert!(check_banner(&b2, false).is_err());
        let acc = |addr: u64, buf: u64| {
            Got::Line(
                json!({"type": "accept", "v": 1, "qpn": 18, "psn": 5, "gid": "::1",
                "lid": 0, "mtu": 1024, "addr": addr, "rkey": 77, "buf_len": buf}),
            )
        };
        assert_eq!(check_accept(&acc(0x7f00_0000_1000, 64), 17, 64), Ok(77));
        assert!(check_accept(&acc(0, 64), 17, 64).is_err());
        assert!(check_accept(&acc(1, 32), 17, 64).is_err());
        assert!(check_accept(&Got::Eof, 17, 64).is_err());
    }

    #[test]
    fn case_selection_follows_the_configuration() {
        let addr: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let plain = config(addr, &Fake::default());
        let all = select_cases(&[], &plain).unwrap();
        for c in [
            Case::Forbidden,
            Case::Busy,
            Case::WrongToken,
            Case::MissingToken,
        ] {
            assert!(!all.contains(&c), "{}", c.name());
        }
        assert!(select_cases(&[Case::Busy], &plain).is_err());
        assert_eq!(
            select_cases(&[Case::BadJson, Case::TooLong], &plain).unwrap(),
            vec![Case::BadJson, Case::TooLong]
        );
        assert_eq!(Case::LineTooLong.name(), "line_too_long");
    }

    #[test]
    fn helpers() {
        assert_eq!(gid_for("10.0.0.2".parse().unwrap()), "::ffff:10.0.0.2");
        assert_eq!(gid_for("127.0.0.1".parse().unwrap()), "::ffff:10.0.0.2");
        assert_eq!(gid_for("fe80::1".parse().unwrap()), "fe80::1");
        assert_eq!(shorten("héllo", 2), "h…");
        let mut r = SplitMix64::new(1);
        assert!((0..1000).all(|_| r.below(10) < 10));
        assert_eq!(r.below(0), 0);
        let mut b = [0u8; 13];
        r.fill(&mut b);
        assert!(b.iter().any(|&x| x != 0));
    }
}
