//! Runs one case on its own thread under a wall-clock budget, then checks that the server
//! still serves: a fresh connection gets its first line, and (with `--probe-client`) a real
//! client still gets its write verified.

use super::answer::Got;
use super::case::Case;
use super::config::Config;
use super::conn::Conn;
use super::misbehave::{Cx, SETTLE};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The outcome of one case.
#[derive(Debug)]
pub(super) struct Verdict {
    pub case: Case,
    pub pass: bool,
    pub seen: String,
    pub elapsed: Duration,
}

/// The longest a case may take before it is declared hung.
fn case_budget(cfg: &Config) -> Duration {
    cfg.server_timeout * 2 + cfg.reply * 4 + SETTLE * 2 + Duration::from_secs(10)
}

/// Runs one case on its own thread under a wall-clock budget, then the health probe.
pub(super) fn run_case(cfg: &Arc<Config>, case: Case, index: u64) -> Verdict {
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
    let verified = rdma_proto::events::client::verified_in(&finished.stdout)
        .map_err(|e| format!("probe client: {e}"))?;
    if finished.code == Some(0) && verified {
        Ok(())
    } else {
        Err(format!(
            "a real client was not verified (exit {:?}): {}",
            finished.code,
            crate::text::tail(&finished.stderr, 400)
        ))
    }
}
