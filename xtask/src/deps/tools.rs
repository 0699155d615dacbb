//! Every program the project runs (on the host, in the guests, while packaging), and the
//! Debian package it comes from. A test reads xtask's sources and fails when a program appears
//! that is not in this table, or whose package `cargo xtask deps` would not install.

/// `(program, Debian package)`.
pub const TOOLS: &[(&str, &str)] = &[
    // Building: cargo (rustup) runs cc; ibverbs-sys runs cmake (which runs make) and bindgen.
    ("cc", "gcc"),
    ("make", "make"),
    ("cmake", "cmake"),
    ("clang", "clang"),
    ("pkg-config", "pkg-config"),
    // Running against RDMA and setting up the guests' node.
    ("ip", "iproute2"),
    ("rdma", "iproute2"),
    ("ibv_devinfo", "ibverbs-utils"),
    ("ib_write_bw", "perftest"),
    ("ib_write_lat", "perftest"),
    ("valgrind", "valgrind"),
    ("modprobe", "kmod"),
    ("dmesg", "util-linux"),
    ("tc", "iproute2"),
    // fabric-e2e: munge and a minimal Slurm in three guests.
    ("munged", "munge"),
    ("slurmctld", "slurm-wlm"),
    ("slurmd", "slurm-wlm"),
    ("srun", "slurm-wlm"),
    ("salloc", "slurm-wlm"),
    ("sinfo", "slurm-wlm"),
    // Its mesh phase stops one node's server (pkill) and runs Prometheus on node1.
    ("pkill", "procps"),
    ("prometheus", "prometheus"),
    // k8s-validate: a venv for the pinned kubernetes-validate.
    ("python3", "python3"),
    // prometheus-check: the mesh's alerting rules checked and unit-tested.
    ("promtool", "prometheus"),
    // ... and the inhibit rules, by amtool and a real Alertmanager on loopback.
    ("amtool", "prometheus-alertmanager"),
    ("prometheus-alertmanager", "prometheus-alertmanager"),
    // The guests: QEMU, the busybox initramfs, the Debian kernel's modules.
    ("qemu-system-x86_64", "qemu-system-x86"),
    // Three or more guests share a hub on a unix socket.
    ("vde_switch", "vde2"),
    ("busybox", "busybox-static"),
    ("depmod", "kmod"),
    ("cpio", "cpio"),
    ("xz", "xz-utils"),
    ("zstd", "zstd"),
    ("gzip", "gzip"),
    // Guests beyond RoCE: siw.ko built out of tree (tar pulls its folder from the source
    // package; make runs the kernel's kbuild), loaded with insmod; rping; captures.
    ("tar", "tar"),
    ("insmod", "kmod"),
    ("rping", "rdmacm-utils"),
    ("tcpdump", "tcpdump"),
    // Packages: cargo-deb needs dpkg-shlibdeps; the unit is checked with systemd-analyze.
    ("dpkg-shlibdeps", "dpkg-dev"),
    ("systemd-analyze", "systemd"),
    // pkg-test's systemd guest starts the installed unit and reads its journal.
    ("systemctl", "systemd"),
    ("journalctl", "systemd"),
    // `systemd-analyze verify` runs `man` for the unit's `Documentation=man:` pages.
    ("man", "man-db"),
    ("dpkg-deb", "dpkg"),
    ("dpkg", "dpkg"),
    ("dpkg-query", "dpkg"),
    ("apt-get", "apt"),
    ("apt-cache", "apt"),
    ("debootstrap", "debootstrap"),
    ("git", "git"),
    ("chroot", "coreutils"),
    ("mount", "mount"),
    ("umount", "mount"),
    // Plain utilities.
    ("env", "coreutils"),
    ("nice", "coreutils"),
    ("true", "coreutils"),
    ("test", "coreutils"),
    ("sleep", "coreutils"),
    ("cat", "coreutils"),
    ("ls", "coreutils"),
    ("install", "coreutils"),
    ("cp", "coreutils"),
    ("rm", "coreutils"),
    ("sh", "dash"),
    ("getent", "libc-bin"),
];

#[cfg(test)]
/// Packages every Debian system has (Essential or Priority: required, so also in a debootstrap
/// minbase root), which `cargo xtask deps` therefore does not list.
pub const BASE: &[&str] = &[
    "coreutils",
    "libc-bin",
    "dash",
    "util-linux",
    "mount",
    "dpkg",
    "apt",
    "gzip",
    "tar",
];

/// Programs that are not Debian packages: the Rust toolchain (rustup) and the cargo tools
/// `cargo xtask deps` installs itself.
#[cfg(test)]
pub const NOT_APT: &[&str] = &["cargo", "cargo-fuzz", "cargo-deb"];

#[cfg(test)]
/// The package that provides `program`, if the table knows it.
pub fn package_of(program: &str) -> Option<&'static str> {
    TOOLS.iter().find(|(t, _)| *t == program).map(|(_, p)| *p)
}

#[cfg(test)]
/// The programs a piece of xtask source runs: the first word of `cmd!(sh, "…")`, the argument
/// of `which("…")`, and the first element of an argv array literal (`&["prog", …]` given to a
/// plan step, a spawn, a setup step or a scenario command, or `["prog", "-flag", …]`).
/// Test modules are not read.
pub fn programs_run_by(src: &str) -> std::collections::BTreeSet<String> {
    let code = src.split("#[cfg(test)]").next().unwrap_or(src);
    let code = squeeze(code);
    let mut found = std::collections::BTreeSet::new();
    let word_at = |s: &str| -> Option<String> {
        let w: String = s
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || "_.+-".contains(*c))
            .collect();
        (!w.is_empty() && !w.starts_with('-')).then_some(w)
    };
    // `cmd!(sh,"prog …` (the shell variable may have any name).
    for (i, _) in code.match_indices("cmd!(") {
        let rest = &code[i + 5..];
        if let Some(q) = rest.find(",\"")
            && rest[..q].chars().all(|c| c.is_alphanumeric() || c == '_')
        {
            found.extend(word_at(&rest[q + 2..]));
        }
    }
    for (i, _) in code.match_indices("which(\"") {
        found.extend(word_at(&code[i + 7..]));
    }
    // Calls whose argv literal is the program and its arguments.
    for call in [
        "Step::new(",
        "spawn(&[",
        "grab(&[",
        "setup_step(",
        "run_once(",
        "command(\"",
    ] {
        for (i, _) in code.match_indices(call) {
            // The first array literal among the call's own arguments.
            let open = i + call.find('(').unwrap_or(0);
            let args = call_args(&code[open..]);
            if let Some(a) = args.find("&[\"") {
                found.extend(word_at(&args[a + 3..]));
            }
        }
    }
    // `["prog","-x",…]`: an argv built for a plan step.
    for (i, _) in code.match_indices("[\"") {
        let rest = &code[i + 2..];
        if let Some(w) = word_at(rest)
            && rest[w.len()..].starts_with("\",\"-")
        {
            found.insert(w);
        }
    }
    found
}

/// The text of a call's arguments: from its `(` (at the start of `from`) to the matching `)`,
/// string literals skipped over.
#[cfg(test)]
fn call_args(from: &str) -> &str {
    let mut depth = 0usize;
    let mut in_str = false;
    let mut escaped = false;
    for (i, c) in from.char_indices() {
        if in_str {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_str = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_str = true,
            '(' => depth += 1,
            ')' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return &from[..=i];
                }
            }
            _ => {}
        }
    }
    from
}

/// Source with the whitespace that rustfmt moves around removed (after `(`, `,`, `[`, `&`, `{`
/// and before `)`, `]`, `}`), so that a call reads the same on one line or on several; words
/// inside a string keep their single space.
#[cfg(test)]
fn squeeze(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    let mut pending_space = false;
    for c in src.chars() {
        if c.is_whitespace() {
            pending_space = true;
            continue;
        }
        if pending_space && !out.ends_with(['(', ',', '[', '&', '{']) && !")]}".contains(c) {
            out.push(' ');
        }
        pending_space = false;
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deps::Group;
    use std::path::Path;

    fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                rust_files(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }

    #[test]
    fn the_scanner_finds_programs_in_each_form() {
        let src = r#"
            exec::run(cmd!(sh, "modprobe rdma_rxe"));
            exec::run(cmd!(
                sh_in,
                "cpio --quiet -o"
            ));
            if exec::which("apt-get").is_none() {}
            let s = Step::new("info", &["ibv_devinfo", "-v"]);
            let s = Step::new(format!("x{}", 1), &[]);
            let s = Step { argv: sub(&["not-a-program", "x"]), ..Step::new("y", &[]) };
            let c = Captured::spawn(&["ip", "link"]);
            let v = ["ib_write_lat", "-F", "-x"];
            let j = ["--json", "--serve"];
            let t = vec!["type", "verified"];
            #[cfg(test)]
            mod tests { fn f() { cmd!(sh, "never-seen"); } }
        "#;
        let found: Vec<String> = programs_run_by(src).into_iter().collect();
        assert_eq!(
            found,
            [
                "apt-get",
                "cpio",
                "ib_write_lat",
                "ibv_devinfo",
                "ip",
                "modprobe"
            ]
        );
    }

    /// Every program xtask or the guests run maps to a package `cargo xtask deps` installs (or
    /// one every Debian has): a new tool without a package here makes this fail.
    #[test]
    fn every_program_the_project_runs_has_a_package_that_deps_installs() {
        let mut files = Vec::new();
        rust_files(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
            &mut files,
        );
        assert!(files.len() > 10, "found only {files:?}");
        let installed: Vec<&str> = Group::ALL
            .iter()
            .flat_map(|g| g.packages().iter().copied())
            .collect();
        let mut programs = std::collections::BTreeSet::new();
        for f in &files {
            programs.extend(programs_run_by(&std::fs::read_to_string(f).unwrap()));
        }
        for must in ["qemu-system-x86_64", "ip", "modprobe", "apt-get", "cargo"] {
            assert!(
                programs.contains(must),
                "scanner missed {must}: {programs:?}"
            );
        }
        let mut problems = Vec::new();
        for p in &programs {
            if NOT_APT.contains(&p.as_str()) {
                continue;
            }
            match package_of(p) {
                None => problems.push(format!("{p}: not in deps::tools::TOOLS")),
                Some(pkg) if !installed.contains(&pkg) && !BASE.contains(&pkg) => {
                    problems.push(format!("{p}: its package {pkg} is in no deps group"));
                }
                Some(_) => {}
            }
        }
        assert!(problems.is_empty(), "{problems:#?}");
    }

    #[test]
    fn every_package_of_the_table_is_installed_by_some_group_or_always_there() {
        let installed: Vec<&str> = Group::ALL
            .iter()
            .flat_map(|g| g.packages().iter().copied())
            .collect();
        for (tool, pkg) in TOOLS {
            assert!(
                installed.contains(pkg) || BASE.contains(pkg),
                "{tool} ({pkg})"
            );
        }
    }
}
