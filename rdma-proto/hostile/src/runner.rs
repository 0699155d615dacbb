//! Runs one case on its own thread under a wall-clock budget, then checks that the server
//! still serves: a fresh connection gets its first line, and whatever the caller adds (a real
//! client's verified write in the guests, nothing left exposed on the Pair).

use crate::answer::Got;
use crate::case::Case;
use crate::config::Config;
use crate::conn::Conn;
use crate::misbehave::{Cx, SETTLE};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The outcome of one case.
#[derive(Debug)]
pub struct Verdict {
    pub case: Case,
    /// The case and the health probes after it passed.
    pub pass: bool,
    /// What was seen, or what went wrong.
    pub seen: String,
    /// From the case's start to the end of its probes.
    pub elapsed: Duration,
}

impl Verdict {
    /// Each failed verdict as `case: what was seen`, in order (empty when all passed).
    #[must_use]
    pub fn failures(verdicts: &[Verdict]) -> Vec<String> {
        verdicts
            .iter()
            .filter(|v| !v.pass)
            .map(|v| format!("{}: {}", v.case.name(), v.seen))
            .collect()
    }
}

/// The longest a case may take before it is declared hung.
fn case_budget(cfg: &Config) -> Duration {
    cfg.server_timeout * 2 + cfg.reply * 4 + SETTLE * 2 + Duration::from_secs(10)
}

/// Runs one case (the `index`th of the run: it seeds the case's random numbers) on its own
/// thread under a wall-clock budget, then the health probe.
#[must_use]
pub fn run_case(cfg: &Arc<Config>, case: Case, index: u64) -> Verdict {
    run_case_then(cfg, case, index, &|| Ok(()))
}

/// [`run_case`], with `then` after the health probe: what else must hold once a case is over
/// (`Err` says what does not, and fails the case).
pub fn run_case_then(
    cfg: &Arc<Config>,
    case: Case,
    index: u64,
    then: &dyn Fn() -> Result<(), String>,
) -> Verdict {
    let started = Instant::now();
    let (tx, rx) = std::sync::mpsc::channel();
    let thread_cfg = Arc::clone(cfg);
    let spawned = std::thread::Builder::new()
        .name(case.name())
        .spawn(move || {
            let mut rng =
                fastrand::Rng::with_seed(thread_cfg.rng_seed ^ index.wrapping_mul(0x9E37_79B9));
            let cx = Cx {
                cfg: &thread_cfg,
                rng: &mut rng,
            };
            let _ = tx.send(cx.run(case));
        });
    let budget = case_budget(cfg);
    let outcome = match spawned {
        Err(e) => Err(format!("cannot start the case thread: {e}")),
        Ok(_) => match rx.recv_timeout(budget) {
            Ok(r) => r,
            Err(_) => Err(format!("the case did not finish within {budget:?}")),
        },
    };
    let outcome = outcome.and_then(|seen| match probe(cfg).and_then(|()| then()) {
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

/// Checks a fresh connection still gets its first line (a banner, or `forbidden`).
fn probe(cfg: &Config) -> Result<(), String> {
    let settle_until = Instant::now() + SETTLE;
    loop {
        let mut c = Conn::open(cfg.server, Instant::now() + cfg.reply)?;
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
