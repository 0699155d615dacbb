//! `--probe-client`: after every case a real `rdma-client` must still get its write verified
//! (the server survived the case as a whole, not just its accept loop).

use crate::scenario::exit::{ExitKind, Speaks};
use crate::scenario::judge;
use crate::scenario::transcript::Role;
use rdma_hostile::Config;
use std::path::Path;
use std::time::{Duration, Instant};

/// Runs `client` against the server of `cfg` once; `Err` says why it was not verified.
pub(super) fn probe_write(client: &Path, cfg: &Config) -> Result<(), String> {
    if cfg.expect_forbidden {
        return Ok(());
    }
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
    let probe = Role::finished("probe client", &finished, Speaks::Client);
    judge::only_events(&probe).map_err(|e| format!("probe client: {e}"))?;
    if probe.exit == ExitKind::Success && judge::client_verified(&probe) {
        Ok(())
    } else {
        Err(format!(
            "a real client was not verified ({}): {}",
            probe.exit,
            crate::text::tail(&finished.stderr, 400)
        ))
    }
}
