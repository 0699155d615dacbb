//! An expected xtask failure prints its message and what to do, never a backtrace, even with
//! `RUST_BACKTRACE=1` in the environment.

use std::process::Command;

#[test]
fn an_expected_failure_prints_its_message_without_a_backtrace() {
    for backtrace in ["1", "full"] {
        // Fails in argument checking, before anything is installed, built or booted.
        let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
            .args(["e2e", "--scenario", "no-such-scenario"])
            .env("RUST_BACKTRACE", backtrace)
            .env("RUST_LIB_BACKTRACE", backtrace)
            .output()
            .expect("xtask runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(
            stderr.starts_with("error: no scenario `no-such-scenario`; known: seed"),
            "{stderr}"
        );
        for noise in [
            "BACKTRACE",
            "Location:",
            "stack backtrace",
            "xtask::",
            ".rs:",
        ] {
            assert!(!stderr.contains(noise), "{noise:?} in:\n{stderr}");
        }
        assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    }
}
