//! The server binary's failure paths that need no RDMA link.

use std::process::{Command, Output};

fn server(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rdma-server"))
        .args(args)
        .env_remove("RDMA_WRITE_TOKEN")
        .output()
        .expect("run rdma-server")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn help_documents_every_exit_code() {
    let o = server(&["--help"]);
    assert!(o.status.success());
    let help = String::from_utf8_lossy(&o.stdout);
    for code in ["0", "1", "2", "3", "4", "5"] {
        assert!(
            help.contains(&format!("\n  {code}  ")),
            "exit code {code} missing from --help"
        );
    }
}

#[test]
fn bad_flags_exit_2() {
    assert_eq!(server(&["--buffer-size", "0"]).status.code(), Some(2));
    assert_eq!(server(&["--allow", "10.0.0.0/40"]).status.code(), Some(2));
    let o = server(&["--token-file", "/nonexistent/token"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("/nonexistent/token"), "{}", stderr(&o));
}

/// Without RDMA in the kernel the server says so and how to get it; with RDMA, a device that
/// does not exist is named.
#[test]
fn local_rdma_problems_exit_3_with_advice() {
    let o = server(&[
        "--device",
        "no-such-dev0",
        "--listen",
        "127.0.0.1:0",
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let err = stderr(&o);
    if std::path::Path::new("/sys/class/infiniband").exists() {
        assert!(err.contains("no-such-dev0"), "{err}");
    } else {
        assert!(err.contains("no RDMA support"), "{err}");
    }
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains(r#""fatal":true"#), "{stdout}");
}
