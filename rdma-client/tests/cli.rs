//! The client binary's failure paths that need no RDMA link: usage errors, bad input, and the
//! machine's own RDMA state (this CI host's kernel has no RDMA at all).

use std::process::{Command, Output};

fn client(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rdma-client"))
        .args(args)
        .env_remove("RDMA_WRITE_TOKEN")
        .output()
        .expect("run rdma-client")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn help_documents_every_exit_code() {
    let o = client(&["--help"]);
    assert!(o.status.success());
    let help = String::from_utf8_lossy(&o.stdout);
    for code in ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9"] {
        assert!(
            help.contains(&format!("\n  {code}  ")),
            "exit code {code} missing from --help"
        );
    }
}

#[test]
fn usage_errors_exit_2() {
    assert_eq!(client(&[]).status.code(), Some(2));
    let o = client(&["10.0.0.1", "--notify", "carrier-pigeon"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("carrier-pigeon"), "{}", stderr(&o));
    assert_eq!(
        client(&["10.0.0.1", "--timeout", "soon"]).status.code(),
        Some(2)
    );
}

#[test]
fn an_empty_or_unreadable_payload_is_refused_before_any_rdma() {
    let o = client(&["10.0.0.1", "--message", "", "--json"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("at least one byte"), "{}", stderr(&o));
    let event: serde_json::Value =
        serde_json::from_slice(o.stdout.split(|b| *b == b'\n').next().unwrap()).unwrap();
    assert_eq!(event["type"], "error");
    assert_eq!(event["exit_code"], 1);

    let o = client(&["10.0.0.1", "--file", "/nonexistent/payload.bin"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("/nonexistent/payload.bin"),
        "{}",
        stderr(&o)
    );
}

/// On a kernel without RDMA (like CI's) the client must say so and how to get RDMA; on a
/// machine with RDMA, a device that does not exist must be named and the real ones listed.
#[test]
fn local_rdma_problems_exit_3_with_advice() {
    let o = client(&["127.0.0.1", "--device", "no-such-dev0", "--json"]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let err = stderr(&o);
    if std::path::Path::new("/sys/class/infiniband").exists() {
        assert!(err.contains("no-such-dev0"), "{err}");
    } else {
        assert!(err.contains("no RDMA support"), "{err}");
        assert!(err.contains("cargo xtask e2e"), "{err}");
    }
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains(r#""kind":"rdma""#), "{stdout}");
}
