//! `cargo xtask invariants`: the invariants ARCHITECTURE.md states that a machine can check,
//! checked (and run as unit tests of xtask, so `cargo test` holds them too):
//!
//! - the dependency rules between our crates ([`deps::RULES`]: rdma-core-rs depends on no crate
//!   of ours and parses no JSON, rdma-proto has no CLI crate and no ibverbs, ...), and that
//!   xtask's own tree needs no RDMA header ([`deps::rdma_in_xtask_tree`]);
//! - no import circle between the files of any crate ([`circles`]);
//! - nothing prints around `Output`: no `println!`/`print!` in the binaries or rdma-app outside
//!   their output modules ([`prints`]);
//! - rdma-core-rs reaches `struct verbs_context` in `verbs_ctx` alone ([`reach`]).
//!
//! It also prints the figures the README's development section quotes (lines per crate).

pub mod circles;
pub mod deps;
pub mod prints;
pub mod reach;
pub mod size;

use crate::exec;
use color_eyre::eyre::{Result, WrapErr as _, bail};
use std::path::PathBuf;

/// Every crate of the workspace, by folder (the fuzz crate is its own workspace).
pub const CRATES: &[&str] = &[
    "rdma-proto",
    "rdma-proto/app",
    "rdma-core-rs",
    "rdma-server",
    "rdma-client",
    "rdma-client/misbehave",
    "rdma-proto/hostile",
    "xtask",
];

/// What [`check`] found broken, one line each.
///
/// # Errors
/// `cargo metadata` failing, or a source file that cannot be read or parsed.
pub fn check() -> Result<Vec<String>> {
    let root = exec::workspace_root();
    let metadata = cargo_metadata::MetadataCommand::new()
        .manifest_path(root.join("Cargo.toml"))
        .no_deps()
        .exec()
        .wrap_err("running `cargo metadata`")?;
    let mut broken = deps::broken(&metadata, deps::RULES);
    broken.extend(deps::hooks(&metadata));
    broken.extend(deps::rdma_in_xtask_tree(&deps::xtask_tree()?));
    for krate in CRATES {
        let dir = root.join(krate);
        for circle in circles::find(&dir)? {
            let files: Vec<String> = circle
                .files
                .iter()
                .map(|f| f.display().to_string())
                .collect();
            broken.push(format!(
                "{krate}: an import circle: {} (each file one job: move what they share into a file of its own); tied by: {}",
                files.join(" <-> "),
                circle.ties.join(", ")
            ));
        }
    }
    for (krate, output) in prints::OUTPUT_MODULES {
        for (file, calls) in prints::stray_prints(&root.join(krate), output)? {
            broken.push(format!(
                "{krate}/{}: {calls} println!/print! outside {output}: stdout is the events' (emit an event, or write through Output)",
                file.display()
            ));
        }
    }
    let (krate, allowed, field) = reach::VERBS_CONTEXT;
    for (file, reads) in reach::strays(&root.join(krate), allowed, field)? {
        broken.push(format!(
            "{krate}/{}: {reads} read(s) of `{field}` outside {allowed}: reach `struct verbs_context` through verbs_ctx, which checks its `sz` first",
            file.display()
        ));
    }
    Ok(broken)
}

fn rel(path: &std::path::Path) -> String {
    let root = exec::workspace_root();
    path.strip_prefix(&root)
        .map_or_else(|_| path.to_path_buf(), PathBuf::from)
        .display()
        .to_string()
}

/// `cargo xtask invariants`.
pub fn cmd() -> Result<()> {
    let root = exec::workspace_root();
    let mut total = 0;
    for krate in CRATES {
        let lengths = size::lengths(&root.join(krate))?;
        let mut all = 0;
        for f in circles::rust_files(&root.join(krate).join("src"))? {
            all += std::fs::read_to_string(&f)?.lines().count();
        }
        total += all;
        let longest = lengths
            .first()
            .map_or_else(String::new, |(f, n)| format!("; longest {} ({n})", rel(f)));
        println!("{krate}: {all} lines in src/ (tests included){longest}");
    }
    println!("workspace: {total} lines in src/");
    let broken = check()?;
    for b in &broken {
        println!("broken: {b}");
    }
    if !broken.is_empty() {
        bail!("{} invariant(s) broken (see above)", broken.len());
    }
    println!(
        "invariants: {} dependency rules hold; no import circle; nothing prints around Output",
        deps::RULES.len()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    /// Writes `files` (paths under `src/`, and their text) into a crate folder at `dir`: the
    /// planted crates of the checks' own tests.
    pub(super) fn write_src(dir: &std::path::Path, files: &[(&str, &str)]) {
        for (name, text) in files {
            let path = dir.join("src").join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
    }

    #[test]
    fn the_workspace_keeps_every_checked_invariant() {
        let broken = super::check().unwrap();
        assert!(broken.is_empty(), "{broken:#?}");
    }
}
