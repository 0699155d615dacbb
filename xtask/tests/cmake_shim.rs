//! `.cargo/config.toml` points ibverbs-sys's build script at `.cargo/cmake-configure-only`,
//! which runs cmake's configure and skips its build of all of rdma-core (about 90 s on two
//! cores each time the build script reruns; ibverbs-sys reads nothing it builds).

use std::path::Path;
use std::process::Command;

/// The shim cargo gives build scripts (`[env] CMAKE`, relative to the workspace root).
const SHIM: &str = env!("CMAKE");

#[test]
fn cargo_gives_build_scripts_the_shim() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let want = root.join(".cargo/cmake-configure-only");
    assert_eq!(
        Path::new(SHIM).canonicalize().expect("the shim exists"),
        want.canonicalize().expect("the shim exists"),
    );
}

#[test]
fn the_shim_skips_the_build_and_says_so() {
    let dir = std::env::temp_dir().join(format!("cmake-shim-{}", std::process::id()));
    let out = Command::new(SHIM)
        .args(["--build", &dir.display().to_string(), "--config", "Debug"])
        .output()
        .expect("the shim runs");
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.starts_with("cmake-configure-only: skipped cmake --build "),
        "{stdout}"
    );
    assert!(!dir.exists(), "the skipped build made {}", dir.display());
}

#[test]
fn the_shim_passes_everything_else_to_cmake() {
    // cmake-rs asks for the version before it configures; a shim that swallowed it would fail
    // the build script.
    let out = Command::new(SHIM)
        .arg("--version")
        .output()
        .expect("the shim runs");
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.starts_with("cmake version "), "{stdout}");
}
