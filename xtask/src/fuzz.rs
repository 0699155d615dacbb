//! `cargo xtask fuzz`: a short libFuzzer run of rdma-proto's line parser (cargo-fuzz), its
//! corpus started from the golden vectors so that it starts from real handshakes. ("Seed" in
//! this project means the original C demo, or a random number generator's seed; libFuzzer's
//! seed inputs are called the starting corpus here.)

use crate::exec;
use clap::Args;
use color_eyre::eyre::{Result, WrapErr as _};
use std::path::Path;
use std::time::Duration;
use xshell::{Shell, cmd};

/// Arguments of `cargo xtask fuzz`.
#[derive(Debug, Args)]
pub struct FuzzArgs {
    /// How long libFuzzer runs, seconds.
    #[arg(long, default_value_t = 20)]
    pub seconds: u32,
}

/// Entry point.
pub fn cmd(args: &FuzzArgs) -> Result<()> {
    let sh = Shell::new()?;
    crate::deps::ensure_cargo_tool(&crate::deps::CARGO_FUZZ, false)?;
    let root = crate::exec::workspace_root();
    let fuzz_dir = root.join("rdma-proto/fuzz");
    let corpus = fuzz_dir.join("corpus/parse_line");
    let inputs = corpus_from_golden(&root.join("rdma-proto/tests/golden"), &corpus)?;
    println!(
        "fuzz: {inputs} starting inputs from the golden vectors; running {} s",
        args.seconds
    );
    let time = format!("-max_total_time={}", args.seconds);
    let _bootstrap = sh.push_env("RUSTC_BOOTSTRAP", "1");
    sh.change_dir(&fuzz_dir);
    exec::run_loud(
        cmd!(sh, "cargo fuzz run parse_line {corpus} -- {time}"),
        worst_case(args.seconds),
    )
    .wrap_err("the parser fuzz run found a crash (see the artifact path above) or could not run")
}

/// The longest a run of `seconds` may take: its build (15 minutes, from nothing) and the run.
pub fn worst_case(seconds: u32) -> Duration {
    Duration::from_secs(u64::from(seconds) + 900)
}

/// Writes each golden handshake whole, each of its lines alone, and each bad line alone into
/// `corpus`; returns how many inputs it wrote.
fn corpus_from_golden(golden: &Path, corpus: &Path) -> Result<usize> {
    std::fs::create_dir_all(corpus).wrap_err_with(|| format!("creating {}", corpus.display()))?;
    let mut n = 0;
    let mut entries: Vec<_> = std::fs::read_dir(golden)
        .wrap_err_with(|| format!("reading {}", golden.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    entries.sort();
    for path in entries {
        let text = std::fs::read_to_string(&path)
            .wrap_err_with(|| format!("reading {}", path.display()))?;
        let stem = path
            .file_stem()
            .map_or_else(String::new, |s| s.to_string_lossy().into_owned());
        let lines = golden_lines(&text);
        std::fs::write(
            corpus.join(format!("golden-{stem}")),
            lines.join("\n") + "\n",
        )?;
        n += 1;
        for (i, line) in lines.iter().enumerate() {
            std::fs::write(
                corpus.join(format!("golden-{stem}-{i}")),
                format!("{line}\n"),
            )?;
            n += 1;
        }
    }
    Ok(n)
}

/// The protocol lines of a golden file: transcript prefixes (`C: `, `S: `) stripped, and for
/// the bad-lines file (one JSON record per line) the `line` under test.
fn golden_lines(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            if let Some(rest) = l.strip_prefix("C: ").or_else(|| l.strip_prefix("S: ")) {
                return rest.to_owned();
            }
            serde_json::from_str::<serde_json::Value>(l)
                .ok()
                .and_then(|v| v.get("line").and_then(|x| x.as_str()).map(str::to_owned))
                .unwrap_or_else(|| l.to_owned())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn golden_lines_are_protocol_lines() {
        let transcript = "S: {\"type\":\"banner\"}\nC: {\"type\":\"hello\"}\n";
        assert_eq!(
            golden_lines(transcript),
            ["{\"type\":\"banner\"}", "{\"type\":\"hello\"}"]
        );
        let bad = "{\"to\":\"server\",\"code\":\"bad_json\",\"line\":\"hello\"}\n";
        assert_eq!(golden_lines(bad), ["hello"]);
    }

    #[test]
    fn the_golden_vectors_start_the_corpus() {
        let dir = tempfile::tempdir().unwrap();
        let n = corpus_from_golden(
            &crate::exec::workspace_root().join("rdma-proto/tests/golden"),
            dir.path(),
        )
        .unwrap();
        assert!(n >= 10, "only {n} inputs");
        let imm = std::fs::read_to_string(dir.path().join("golden-handshake-imm")).unwrap();
        assert!(imm.starts_with("{\"type\":\"banner\""), "{imm}");
    }
}
