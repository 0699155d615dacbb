//! How long each file of the workspace is, outside its tests: the figures `cargo xtask
//! invariants` prints. No length is a rule: a file does one job, whatever its length.

use color_eyre::eyre::{Result, WrapErr as _};
use std::path::{Path, PathBuf};

/// Lines of `text` before its first `#[cfg(test)]` module.
#[must_use]
pub fn code_lines(text: &str) -> usize {
    let lines: Vec<&str> = text.lines().collect();
    let test_mod = lines.windows(2).position(|w| {
        w[0].trim() == "#[cfg(test)]" && {
            let next = w[1].trim_start();
            let next = next
                .strip_prefix("pub(crate) ")
                .or_else(|| next.strip_prefix("pub(super) "))
                .or_else(|| next.strip_prefix("pub "))
                .unwrap_or(next);
            next.starts_with("mod ")
        }
    });
    test_mod.unwrap_or(lines.len())
}

/// Every source file under `crate_dir/src` (test files left out) with its code lines, longest
/// first.
///
/// # Errors
/// A file that cannot be read.
pub fn lengths(crate_dir: &Path) -> Result<Vec<(PathBuf, usize)>> {
    let mut out = Vec::new();
    for f in super::circles::rust_files(&crate_dir.join("src"))? {
        if f.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        let text =
            std::fs::read_to_string(&f).wrap_err_with(|| format!("reading {}", f.display()))?;
        out.push((f, code_lines(&text)));
    }
    out.sort_by_key(|f| std::cmp::Reverse(f.1));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_stop_at_the_test_module() {
        assert_eq!(code_lines("a\nb\n#[cfg(test)]\nmod tests {\n}\n"), 2);
        assert_eq!(code_lines("a\n#[cfg(test)]\nfn only_in_tests() {}\nb\n"), 4);
        assert_eq!(code_lines("a\n#[cfg(test)]\npub(crate) mod testing;\n"), 1);
        assert_eq!(code_lines(""), 0);
    }
}
