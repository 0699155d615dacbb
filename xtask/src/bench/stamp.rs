//! `xtask bench-stamp --timeout S -- PROGRAM ARGS…` (hidden, runs inside the guests): runs
//! PROGRAM, passes its stdout through unchanged line by line (so its events are read as they
//! are), and when it ends prints one last line to stderr, [`Stamps`]: when each stdout line
//! came, in milliseconds since PROGRAM started. It exits with PROGRAM's status (128 + the
//! signal that ended it; [`TIMED_OUT`] when it ran past `--timeout` and was killed).
//!
//! The mesh's events carry no time; the bench needs when each came (the run's wall time
//! between `mesh_started` and `mesh_stopped`, and how long after its fire time each probe's
//! result came): see [`super::mesh`].

use std::io::{BufRead as _, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use clap::Args;
use color_eyre::eyre::{Result, WrapErr as _, eyre};
use serde::{Deserialize, Serialize};

/// Arguments of `xtask bench-stamp`.
#[derive(Debug, Args)]
pub struct StampArgs {
    /// Kill PROGRAM after this many seconds.
    #[arg(long)]
    pub timeout: f64,
    /// PROGRAM and its arguments.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true, num_args = 1..)]
    pub command: Vec<String>,
}

/// The exit status when PROGRAM ran past `--timeout` (as `timeout(1)`'s).
pub const TIMED_OUT: i32 = 124;
/// How long, after PROGRAM ended, the stdout reader may still take (a process PROGRAM left
/// behind can hold the pipe open).
const READER_GRACE: Duration = Duration::from_secs(5);

/// The last line of stderr: when each line of stdout came.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stamps {
    /// Milliseconds since PROGRAM started, one per stdout line, in order.
    pub line_ms: Vec<f64>,
}

impl Stamps {
    /// The stamps of a step's stderr: its last line that is JSON (PROGRAM's own stderr comes
    /// before it).
    pub fn of(stderr: &str) -> Result<Self, String> {
        let line = stderr
            .lines()
            .rev()
            .find(|l| l.trim_start().starts_with('{'))
            .ok_or("no stamps line on stderr (bench-stamp did not finish)")?;
        let s: Stamps =
            serde_json::from_str(line).map_err(|e| format!("a bad stamps line {line:?}: {e}"))?;
        if s.line_ms.iter().any(|t| !t.is_finite() || *t < 0.0) {
            return Err(format!("a stamp that is no time: {line:?}"));
        }
        Ok(s)
    }
}

/// Entry point: never returns on success (exits with PROGRAM's status).
pub fn cmd(args: &StampArgs) -> Result<()> {
    let [program, rest @ ..] = &args.command[..] else {
        return Err(eyre!("bench-stamp needs a PROGRAM after --"));
    };
    let timeout = Duration::from_secs_f64(args.timeout.clamp(1.0, 24.0 * 3600.0));
    let (code, line_ms, _) = pass_through(program, rest, timeout, std::io::stdout())?;
    eprintln!("{}", serde_json::to_string(&Stamps { line_ms })?);
    std::process::exit(code)
}

/// Runs `program` with `args` until it ends or `timeout` passes (then kills it), copying its
/// stdout to `out` line by line; returns its status ([`TIMED_OUT`] when killed), when each line
/// came (ms since the start), and `out` (unless a process it left holds the pipe open).
fn pass_through<W: Write + Send + 'static>(
    program: &str,
    args: &[String],
    timeout: Duration,
    mut out: W,
) -> Result<(i32, Vec<f64>, Option<W>)> {
    let sh = xshell::Shell::new()?;
    let mut child = Command::from(xshell::cmd!(sh, "{program} {args...}"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .wrap_err_with(|| format!("could not start {program}"))?;
    let started = Instant::now();
    let pipe = child
        .stdout
        .take()
        .ok_or_else(|| eyre!("no stdout pipe of {program}"))?;
    let (tx, stamps) = mpsc::channel::<f64>();
    let reader = std::thread::spawn(move || -> W {
        for line in BufReader::new(pipe).split(b'\n') {
            let Ok(line) = line else { break };
            let at = started.elapsed().as_secs_f64() * 1000.0;
            let copied = out
                .write_all(&line)
                .and_then(|()| out.write_all(b"\n"))
                .and_then(|()| out.flush());
            if copied.is_err() || tx.send(at).is_err() {
                break;
            }
        }
        out
    });
    let deadline = started + timeout;
    let code = loop {
        if let Some(status) = child.try_wait().wrap_err("waiting for the command")? {
            use std::os::unix::process::ExitStatusExt as _;
            break status
                .code()
                .or_else(|| status.signal().map(|s| 128 + s))
                .unwrap_or(1);
        }
        if Instant::now() >= deadline || crate::exec::interrupted() {
            let _ = child.kill();
            let _ = child.wait();
            break TIMED_OUT;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let grace = Instant::now() + READER_GRACE;
    while !reader.is_finished() && Instant::now() < grace {
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = if reader.is_finished() {
        reader.join().ok()
    } else {
        None
    };
    Ok((code, stamps.try_iter().collect(), out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stamps_are_the_last_json_line_of_stderr() {
        let s = Stamps::of("warning: x\n{\"line_ms\":[1.5,20.0]}\n").unwrap();
        assert_eq!(s.line_ms, [1.5, 20.0]);
        let s = Stamps::of("{\"line_ms\":[9.0]}\n{\"line_ms\":[]}\n").unwrap();
        assert!(s.line_ms.is_empty());
        assert!(Stamps::of("").unwrap_err().contains("no stamps"));
        assert!(Stamps::of("killed\n").unwrap_err().contains("no stamps"));
        assert!(Stamps::of("{\"line_ms\":[1,\n").is_err());
        assert!(Stamps::of("{\"lines\":[1]}\n").is_err());
        assert!(
            Stamps::of("{\"line_ms\":[-3.0]}\n")
                .unwrap_err()
                .contains("no time")
        );
    }

    #[test]
    fn every_line_passes_through_with_its_stamp_and_the_status_too() {
        let args = ["a\\nbb\\n\\nlast".to_owned()];
        let (code, stamps, out) =
            pass_through("printf", &args, Duration::from_secs(30), Vec::new()).unwrap();
        assert_eq!(code, 0);
        // A last line without its newline is still a line.
        assert_eq!(String::from_utf8(out.unwrap()).unwrap(), "a\nbb\n\nlast\n");
        assert_eq!(stamps.len(), 4);
        assert!(stamps.windows(2).all(|w| w[0] <= w[1]), "{stamps:?}");
        let (code, stamps, _) =
            pass_through("false", &[], Duration::from_secs(30), Vec::new()).unwrap();
        assert_eq!((code, stamps.len()), (1, 0));
        assert!(
            pass_through(
                "/nonexistent/program",
                &[],
                Duration::from_secs(1),
                Vec::new()
            )
            .is_err()
        );
    }

    #[test]
    fn a_program_past_its_deadline_is_killed() {
        let t = Instant::now();
        let (code, _, _) = pass_through(
            "sleep",
            &["30".to_owned()],
            Duration::from_millis(200),
            Vec::new(),
        )
        .unwrap();
        assert_eq!(code, TIMED_OUT);
        assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
    }
}
