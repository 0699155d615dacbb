//! Test support (feature `test-support`, for the binaries' integration tests): run a binary as a
//! user would, and hold a failure to what its `--help` promises.
//!
//! [`Mistake`] is the one list of user mistakes; each binary's tests say how to make each one
//! on its command line (an exhaustive `match`, so a new mistake must be covered by both), and
//! [`Binary::check_mistakes`] runs them all, with and without `--json`, with backtraces
//! requested in the environment.

use crate::Exit;
use std::collections::BTreeMap;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Longest a binary may run in a test before it is killed (and the test fails).
const RUN_LIMIT: Duration = Duration::from_secs(30);

/// A file that does not exist, for the "unreadable file" mistake.
pub const MISSING_FILE: &str = "/nonexistent/rdma-write-test-input";
/// A file that reads as empty, for the "empty file" mistake.
pub const EMPTY_FILE: &str = "/dev/null";

/// A mistake a user can make on either command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mistake {
    /// A flag that does not exist.
    UnknownFlag,
    /// A flag without its value.
    MissingValue,
    /// A required argument left out.
    MissingArgument,
    /// Two flags that exclude each other.
    ConflictingFlags,
    /// A number that does not parse or is out of range.
    BadNumber,
    /// A value that is not one of the choices.
    BadChoice,
    /// A duration that does not parse.
    BadDuration,
    /// A duration of zero.
    ZeroDuration,
    /// An address or network that does not parse.
    BadAddress,
    /// A file that cannot be read.
    UnreadableFile,
    /// A file with nothing in it.
    EmptyFile,
    /// An empty value where text is needed.
    EmptyValue,
    /// `--ib-dev` names a device that does not exist.
    NoSuchDevice,
    /// `--ib-port` names a port the device does not have.
    NoSuchPort,
    /// `--gid-idx` is not an entry of the GID table.
    GidIndexOutOfRange,
}

impl Mistake {
    /// Every mistake.
    pub const ALL: [Mistake; 15] = [
        Mistake::UnknownFlag,
        Mistake::MissingValue,
        Mistake::MissingArgument,
        Mistake::ConflictingFlags,
        Mistake::BadNumber,
        Mistake::BadChoice,
        Mistake::BadDuration,
        Mistake::ZeroDuration,
        Mistake::BadAddress,
        Mistake::UnreadableFile,
        Mistake::EmptyFile,
        Mistake::EmptyValue,
        Mistake::NoSuchDevice,
        Mistake::NoSuchPort,
        Mistake::GidIndexOutOfRange,
    ];

    /// Words the `--help` line of the usage exit code must contain for this mistake.
    #[must_use]
    pub fn documented_as(self) -> &'static str {
        match self {
            Mistake::UnknownFlag
            | Mistake::MissingValue
            | Mistake::MissingArgument
            | Mistake::ConflictingFlags
            | Mistake::BadNumber
            | Mistake::BadChoice
            | Mistake::BadDuration
            | Mistake::ZeroDuration
            | Mistake::BadAddress => "flag",
            Mistake::UnreadableFile => "unreadable",
            Mistake::EmptyFile | Mistake::EmptyValue => "empty",
            Mistake::NoSuchDevice => "--ib-dev",
            Mistake::NoSuchPort => "--ib-port",
            Mistake::GidIndexOutOfRange => "--gid-idx",
        }
    }

    /// Whether the binary only finds this mistake once it has opened the device, which a host
    /// without RDMA cannot do (it fails with exit 3 first).
    fn needs_a_device(self) -> bool {
        matches!(
            self,
            Mistake::NoSuchDevice | Mistake::NoSuchPort | Mistake::GidIndexOutOfRange
        )
    }
}

/// How one binary makes a [`Mistake`].
#[derive(Clone, Debug, Default)]
pub struct Case {
    /// The command line (without the program name).
    pub args: Vec<String>,
    /// Extra environment.
    pub env: Vec<(&'static str, &'static str)>,
    /// What the error message must name (the flag, the value, the file).
    pub names: &'static str,
}

impl Case {
    /// `args`, and the message must name `names`.
    #[must_use]
    pub fn new(args: &[&str], names: &'static str) -> Self {
        Self {
            args: args.iter().map(|&a| a.to_owned()).collect(),
            env: Vec::new(),
            names,
        }
    }

    /// With `name=value` in the environment.
    #[must_use]
    pub fn env(mut self, name: &'static str, value: &'static str) -> Self {
        self.env.push((name, value));
        self
    }
}

/// What a run printed and how it ended.
#[derive(Debug)]
pub struct Run {
    /// What ran, for failure messages.
    pub what: String,
    /// The exit status (`None`: killed by a signal).
    pub code: Option<i32>,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl Run {
    /// The `error` events on stdout, as (exit name, exit status), whichever binary printed
    /// them (the client's `kind` or the server's `code`); panics on a line that is no event of
    /// either binary.
    #[must_use]
    pub fn errors(&self) -> Vec<(String, u8)> {
        use rdma_proto::events::{client, parse, server};
        let mut errors = Vec::new();
        for l in self.stdout.lines().filter(|l| !l.trim().is_empty()) {
            match parse::<client::Event<'static>>(l) {
                Ok(client::Event::Error {
                    kind, exit_code, ..
                }) => errors.push((kind.name().to_owned(), exit_code)),
                Ok(_) => {}
                Err(as_client) => match parse::<server::Event<'static>>(l) {
                    Ok(server::Event::Error {
                        code,
                        exit_code: Some(exit_code),
                        ..
                    }) => errors.push((code.into_owned(), exit_code)),
                    Ok(_) => {}
                    Err(as_server) => panic!(
                        "{}: stdout line is no event of either binary: {as_client}; {as_server}",
                        self.what
                    ),
                },
            }
        }
        errors
    }

    /// Panics unless stderr is free of backtraces.
    pub fn assert_no_backtrace(&self) {
        for mark in ["BACKTRACE", "frames hidden", "stack backtrace", "Location:"] {
            assert!(
                !self.stderr.contains(mark),
                "{}: an expected failure printed a backtrace:\n{}",
                self.what,
                self.stderr
            );
        }
    }
}

/// Whether this machine has RDMA devices (this project's CI host has none: ENOSYS).
#[must_use]
pub fn host_has_rdma() -> bool {
    std::fs::read_dir("/sys/class/infiniband").is_ok_and(|mut d| d.next().is_some())
}

/// A binary under test, with its `--help` exit-code table.
#[derive(Debug)]
pub struct Binary {
    path: PathBuf,
    exit_codes: BTreeMap<i32, String>,
}

impl Binary {
    /// The binary at `path` (in tests, `env!("CARGO_BIN_EXE_…")`); reads its `--help`.
    #[must_use]
    pub fn new(path: impl AsRef<Path>) -> Self {
        let mut bin = Self {
            path: path.as_ref().to_owned(),
            exit_codes: BTreeMap::new(),
        };
        let mut help = bin.run(&["--help".to_owned()], &[]);
        assert_eq!(help.code, Some(0), "{help:?}");
        bin.exit_codes = exit_code_table(&help.stdout);
        if !bin.exit_codes.contains_key(&1) {
            // A short `--help` (a binary with subcommands) leaves the table to its long help,
            // `PROGRAM help`.
            help = bin.run(&["help".to_owned()], &[]);
            assert_eq!(help.code, Some(0), "{help:?}");
            bin.exit_codes = exit_code_table(&help.stdout);
        }
        assert!(
            bin.exit_codes.contains_key(&0) && bin.exit_codes.contains_key(&1),
            "{}: --help has no exit-code table:\n{}",
            help.what,
            help.stdout
        );
        bin
    }

    /// The exit codes `--help` documents, in order.
    #[must_use]
    pub fn documented_codes(&self) -> Vec<i32> {
        self.exit_codes.keys().copied().collect()
    }

    /// The `--help` line for exit code `code`.
    #[must_use]
    pub fn documented(&self, code: i32) -> Option<&str> {
        self.exit_codes.get(&code).map(String::as_str)
    }

    /// Panics unless the binary refuses `args`, which use `flag`, as an unknown argument: a
    /// usage error (2) naming the flag. For flags a binary must not have (test hooks, which
    /// live in the test-only peers).
    pub fn assert_no_flag(&self, args: &[&str], flag: &str) {
        let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        let run = self.run(&args, &[]);
        assert_eq!(
            run.code,
            Some(i32::from(Exit::Usage.code())),
            "{}: {}",
            run.what,
            run.stderr
        );
        assert!(
            run.stderr
                .contains(&format!("unexpected argument '{flag}'")),
            "{}: {}",
            run.what,
            run.stderr
        );
    }

    /// Runs the binary with `args` and `env`, no access token in the environment, backtraces
    /// requested, and a time limit.
    #[must_use]
    pub fn run(&self, args: &[String], env: &[(&str, &str)]) -> Run {
        let what = format!("{} {}", self.path.display(), args.join(" "));
        let mut child = Command::new(&self.path)
            .args(args)
            .env_remove("RDMA_WRITE_TOKEN")
            .env_remove("RUST_LOG")
            .env("RUST_BACKTRACE", "1")
            .env("RUST_LIB_BACKTRACE", "1")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
        let drain = |pipe: Option<Box<dyn std::io::Read + Send>>| {
            std::thread::spawn(move || {
                let mut text = String::new();
                if let Some(mut p) = pipe {
                    let _ = p.read_to_string(&mut text);
                }
                text
            })
        };
        let out = drain(child.stdout.take().map(|p| Box::new(p) as _));
        let err = drain(child.stderr.take().map(|p| Box::new(p) as _));
        let deadline = Instant::now() + RUN_LIMIT;
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Ok(None) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!("{what} still ran after {RUN_LIMIT:?}");
                }
                Err(e) => panic!("waiting for {what}: {e}"),
            }
        };
        Run {
            what,
            code: status.code(),
            stdout: out.join().unwrap_or_default(),
            stderr: err.join().unwrap_or_default(),
        }
    }

    /// Runs `args` twice, as a person and with `--json`, and checks an expected failure: the
    /// exit code is documented and is not 1, stderr has no backtrace, and with `--json` stdout
    /// holds one `error` event with that code and stderr at most one line. Returns the exit and
    /// the run without `--json`.
    pub fn check_expected_failure(&self, args: &[String], env: &[(&str, &str)]) -> (Exit, Run) {
        let human = self.run(args, env);
        let exit = self.exit_of(&human);
        assert!(
            exit.is_expected(),
            "exit 1 (internal error) where the program should know what went wrong:\n{human:?}"
        );
        human.assert_no_backtrace();
        assert!(
            human.stderr.starts_with("Error: ") || human.stderr.starts_with("error: "),
            "stderr should start with the error:\n{human:?}"
        );

        let mut with_json = args.to_vec();
        with_json.push("--json".to_owned());
        let json = self.run(&with_json, env);
        assert_eq!(json.code, human.code, "{json:?}");
        json.assert_no_backtrace();
        let errors = json.errors();
        assert_eq!(
            errors,
            [(exit.name().to_owned(), exit.code())],
            "one error event, of the exit's kind: {json:?}"
        );
        assert!(json.stderr.lines().count() <= 1, "{json:?}");
        (exit, human)
    }

    /// Runs a command line with nothing wrong in it, which still fails on a test host: for want
    /// of RDMA on a host without it (exit 3, with the advice to load rdma_rxe or boot the
    /// guests), else as `with_rdma` says (the exit, and words of its message). Checks it as
    /// [`check_expected_failure`](Self::check_expected_failure) does.
    pub fn check_first_failure(&self, args: &[&str], with_rdma: (Exit, &str)) {
        let args: Vec<String> = args.iter().map(|&a| a.to_owned()).collect();
        let (exit, run) = self.check_expected_failure(&args, &[]);
        let (want, words) = if host_has_rdma() {
            (with_rdma.0, vec![with_rdma.1])
        } else {
            (Exit::Rdma, vec!["no RDMA support", "cargo xtask e2e"])
        };
        assert_eq!(exit, want, "{run:?}");
        for w in words {
            assert!(run.stderr.contains(w), "the message lacks {w:?}: {run:?}");
        }
    }

    /// Makes every [`Mistake`] as `case` says (`None`: this binary has no such input) and checks
    /// each: a usage error (2) whose `--help` line documents it and whose message names the
    /// input; or, for the mistakes only a device reveals, on a host without RDMA, the RDMA
    /// error (3) that comes first.
    pub fn check_mistakes(&self, case: impl Fn(Mistake) -> Option<Case>) {
        let cases: Vec<(Mistake, Case)> = Mistake::ALL
            .into_iter()
            .filter_map(|m| case(m).map(|c| (m, c)))
            .collect();
        // Each case starts the binary twice (with and without --json): run the cases side by side.
        std::thread::scope(|s| {
            let running: Vec<_> = cases
                .iter()
                .map(|(m, c)| s.spawn(move || self.check_mistake(*m, c)))
                .collect();
            for r in running {
                if let Err(panic) = r.join() {
                    std::panic::resume_unwind(panic);
                }
            }
        });
    }

    fn check_mistake(&self, mistake: Mistake, case: &Case) {
        let (exit, human) = self.check_expected_failure(&case.args, &case.env);
        let context = format!("{mistake:?}: {human:?}");
        let (line, needle) = match exit {
            Exit::Usage => (mistake.documented_as(), case.names),
            Exit::Rdma if mistake.needs_a_device() && !host_has_rdma() => {
                ("kernel without RDMA", "no RDMA support")
            }
            // A real device whose port 1 is down cannot check a GID index.
            Exit::Rdma if mistake == Mistake::GidIndexOutOfRange => ("not ACTIVE", "not active"),
            other => panic!("{context}\nexpected a usage error, got {other:?}"),
        };
        let documented = self.documented(exit.code().into()).unwrap_or_default();
        assert!(
            documented.contains(line),
            "{context}\n--help says `{}  {documented}`, which does not mention {line:?}",
            exit.code()
        );
        assert!(
            human.stderr.contains(needle),
            "{context}\nthe message does not name {needle:?}"
        );
    }

    fn exit_of(&self, run: &Run) -> Exit {
        let code = run
            .code
            .unwrap_or_else(|| panic!("killed by a signal: {run:?}"));
        assert!(
            self.documented(code).is_some(),
            "exit code {code} is not in --help: {run:?}"
        );
        Exit::ALL
            .into_iter()
            .find(|e| i32::from(e.code()) == code)
            .unwrap_or_else(|| panic!("exit code {code} is no Exit: {run:?}"))
    }
}

/// `code -> text` from the `Exit codes:` table of a `--help` text.
fn exit_code_table(help: &str) -> BTreeMap<i32, String> {
    help.lines()
        .skip_while(|l| !l.starts_with("Exit codes:"))
        .skip(1)
        .map_while(|l| {
            let (code, text) = l.trim_start().split_once("  ")?;
            Some((code.parse().ok()?, text.trim().to_owned()))
        })
        .collect()
}

/// How many times the thread named `name` of this process was switched out, on its own or
/// not: how often a loop that should sleep woke (`/proc/self/task/*/status`); `None` when no
/// thread has that name.
pub fn thread_switches(name: &str) -> Option<u64> {
    for task in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.trim_end() != name {
            continue;
        }
        let status = std::fs::read_to_string(task.path().join("status")).ok()?;
        return Some(
            status
                .lines()
                .filter(|l| l.contains("ctxt_switches:"))
                .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
                .sum(),
        );
    }
    None
}

/// Waits until `done` holds, looking every 10 ms; panics naming `what` after 10 s.
pub fn wait_for(what: &str, done: &dyn Fn() -> bool) {
    let t = Instant::now();
    while !done() {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "waited 10 s for {what}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_printing(stdout: &str) -> Run {
        Run {
            what: "test".into(),
            code: Some(2),
            stdout: stdout.into(),
            stderr: String::new(),
        }
    }

    #[test]
    fn error_events_of_either_binary_are_read_and_strangers_refused() {
        let client = r#"{"type":"error","kind":"usage","exit_code":2,"message":"bad"}"#;
        let server = r#"{"type":"error","session":null,"peer":null,"code":"network","message":"x","fatal":true,"exit_code":4}"#;
        let run = run_printing(&format!("{client}\n{server}\n"));
        assert_eq!(
            run.errors(),
            [("usage".to_owned(), 2), ("network".to_owned(), 4)]
        );
        let renamed = run_printing(&client.replace("exit_code", "code"));
        assert!(std::panic::catch_unwind(|| renamed.errors()).is_err());
    }

    #[test]
    fn the_exit_code_table_is_read_from_help() {
        let help =
            "Usage: x\n\nExit codes:\n  0  fine\n  2  usage error: a bad flag\n  10  later\n\nmore";
        let table = exit_code_table(help);
        assert_eq!(
            table.get(&2).map(String::as_str),
            Some("usage error: a bad flag")
        );
        assert_eq!(table.keys().copied().collect::<Vec<_>>(), [0, 2, 10]);
        assert!(exit_code_table("no table").is_empty());
    }
}
