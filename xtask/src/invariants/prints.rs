//! Nothing prints around `Output`: in the production code of the binaries and of rdma-app, no
//! `println!` or `print!` outside the one output module of each, so every line on stdout is an
//! event (one JSON line with `--json`) or a human line rendered in one place. A syn parse of
//! every file, test code left out as [`circles`](super::circles) leaves it out; a macro's
//! arguments are looked into where they parse as expressions (`vec![…]`, `format!(…)`).

use super::circles::{impl_item_attrs, is_test_only, item_attrs, rust_files};
use color_eyre::eyre::{Result, WrapErr as _};
use std::path::{Path, PathBuf};
use syn::punctuated::Punctuated;
use syn::visit::Visit;

/// The crates whose stdout is their events, each with its output module (relative to the crate:
/// a file, or a folder and everything under it), the only place that may print.
pub const OUTPUT_MODULES: &[(&str, &str)] = &[
    ("rdma-server", "src/output"),
    ("rdma-client", "src/output"),
    ("rdma-proto/app", "src/output.rs"),
];

/// The macros that write to stdout.
const PRINTS: &[&str] = &["println", "print"];

/// Every file of the crate at `crate_dir` outside `output` that prints to stdout, with how
/// many `println!`/`print!` calls it makes (relative to `crate_dir`).
///
/// # Errors
/// A file that cannot be read or parsed.
pub fn stray_prints(crate_dir: &Path, output: &str) -> Result<Vec<(PathBuf, usize)>> {
    let allowed = crate_dir.join(output);
    let files = rust_files(&crate_dir.join("src"))?
        .into_iter()
        .map(|file| {
            let text = std::fs::read_to_string(&file)
                .wrap_err_with(|| format!("reading {}", file.display()))?;
            let ast =
                syn::parse_file(&text).wrap_err_with(|| format!("parsing {}", file.display()))?;
            Ok((file, ast))
        })
        .collect::<Result<Vec<_>>>()?;
    let tests = test_modules(&files);
    let mut out = Vec::new();
    for (file, ast) in &files {
        if file.starts_with(&allowed)
            || file.file_name().is_some_and(|n| n == "tests.rs")
            || tests.iter().any(|t| file.starts_with(t))
        {
            continue;
        }
        let mut v = Prints(0);
        for item in &ast.items {
            if !is_test_only(item_attrs(item)) {
                v.visit_item(item);
            }
        }
        if v.0 > 0 {
            out.push((
                file.strip_prefix(crate_dir).unwrap_or(file).to_path_buf(),
                v.0,
            ));
        }
    }
    Ok(out)
}

/// The files and folders of the modules declared `#[cfg(test)] mod name;` (the Pair's
/// `pair/`, say): test code, every file of them.
fn test_modules(files: &[(PathBuf, syn::File)]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for (file, ast) in files {
        // `mod x;` in `lib.rs`, `main.rs` or `mod.rs` is beside it; in `a.rs` it is in `a/`.
        let dir = match file.file_stem().and_then(|s| s.to_str()) {
            Some("lib" | "main" | "mod") => file.parent().map(Path::to_path_buf),
            _ => Some(file.with_extension("")),
        };
        let Some(dir) = dir else { continue };
        for item in &ast.items {
            if let syn::Item::Mod(m) = item
                && m.content.is_none()
                && is_test_only(&m.attrs)
            {
                out.push(dir.join(format!("{}.rs", m.ident)));
                out.push(dir.join(m.ident.to_string()));
            }
        }
    }
    out
}

/// Counts the printing macros it visits.
struct Prints(usize);

impl<'ast> Visit<'ast> for Prints {
    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        if m.path
            .segments
            .last()
            .is_some_and(|s| PRINTS.iter().any(|p| s.ident == p))
        {
            self.0 += 1;
        }
        // A print inside another macro's arguments (`vec![…]`, `format!("{}", …)`).
        if let Ok(args) =
            m.parse_body_with(Punctuated::<syn::Expr, syn::Token![,]>::parse_terminated)
        {
            for arg in &args {
                self.visit_expr(arg);
            }
        }
    }

    fn visit_item(&mut self, i: &'ast syn::Item) {
        if !is_test_only(item_attrs(i)) {
            syn::visit::visit_item(self, i);
        }
    }

    fn visit_impl_item(&mut self, i: &'ast syn::ImplItem) {
        if !is_test_only(impl_item_attrs(i)) {
            syn::visit::visit_impl_item(self, i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::super::tests::write_src as write;

    #[test]
    fn a_print_outside_the_output_module_is_caught_and_test_code_is_not() {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            &[
                ("lib.rs", "mod output; mod run;"),
                (
                    "output/mod.rs",
                    "pub fn emit(line: &str) { println!(\"{line}\"); }",
                ),
                // stderr, a `writeln!` to a String, and prints in test code are all fine.
                // A module that is test code as a whole, in a folder and in a file.
                (
                    "run/pair/mod.rs",
                    "mod cases; fn case() { println!(\"case\"); }",
                ),
                ("run/pair/cases.rs", "fn more() { println!(\"more\"); }"),
                ("run/fake.rs", "fn f() { println!(\"fake\"); }"),
                (
                    "run.rs",
                    "#[cfg(test)] mod pair; #[cfg(test)] mod fake;\n\
                     fn run() { eprintln!(\"warning\"); let _ = writeln!(s, \"x\"); }\n\
                     #[cfg(test)] mod tests { fn t() { println!(\"debug\"); } }\n\
                     struct S; impl S { #[cfg(test)] fn t() { print!(\"x\"); } }",
                ),
            ],
        );
        assert!(stray_prints(dir.path(), "src/output").unwrap().is_empty());
        // Planted: a table printed straight to stdout, and a print hidden in a macro's arguments
        // inside a closure.
        write(
            dir.path(),
            &[(
                "run.rs",
                "mod fake; fn table() { for r in rows() { std::println!(\"{r}\"); } }\n\
                 fn hidden() { let f = || vec![print!(\"x\")]; }",
            )],
        );
        // ... and a module that is no longer test code (`fake`), while `pair` is gone from it.
        assert_eq!(
            stray_prints(dir.path(), "src/output").unwrap(),
            vec![
                (PathBuf::from("src/run/fake.rs"), 1),
                (PathBuf::from("src/run/pair/cases.rs"), 1),
                (PathBuf::from("src/run/pair/mod.rs"), 1),
                (PathBuf::from("src/run.rs"), 2),
            ]
        );
        // The output module of one crate is no licence for a file of the same name elsewhere.
        assert_eq!(
            stray_prints(dir.path(), "src/output.rs").unwrap(),
            vec![
                (PathBuf::from("src/output/mod.rs"), 1),
                (PathBuf::from("src/run/fake.rs"), 1),
                (PathBuf::from("src/run/pair/cases.rs"), 1),
                (PathBuf::from("src/run/pair/mod.rs"), 1),
                (PathBuf::from("src/run.rs"), 2),
            ]
        );
    }

    #[test]
    fn the_checked_crates_are_the_workspaces() {
        for (krate, _) in OUTPUT_MODULES {
            assert!(
                super::super::CRATES.contains(krate),
                "{krate} is no crate of the workspace"
            );
        }
    }
}
