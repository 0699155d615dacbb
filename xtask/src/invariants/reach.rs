//! rdma-core-rs reaches `struct verbs_context` in one file: the ops verbs.h calls through it
//! (`query_device_ex`, `create_cq_ex`) are found by `src/verbs_ctx.rs` alone, with verbs.h's
//! checks and reading nothing its `sz` does not cover. A context is recognised as an extended
//! one by its `abi_compat`, so no other file of the crate reads that field. A syn parse of
//! every file, test code left out as [`circles`](super::circles) leaves it out.

use super::circles::{impl_item_attrs, is_test_only, item_attrs, rust_files};
use color_eyre::eyre::{Result, WrapErr as _};
use std::path::{Path, PathBuf};
use syn::visit::Visit;

/// The crate, its one file that may read the field, and the field.
pub const VERBS_CONTEXT: (&str, &str, &str) = ("rdma-core-rs", "src/verbs_ctx.rs", "abi_compat");

/// Every file of the crate at `crate_dir` but `allowed` whose production code reads a field
/// named `field`, with how many times (relative to `crate_dir`).
///
/// # Errors
/// A file that cannot be read or parsed.
pub fn strays(crate_dir: &Path, allowed: &str, field: &str) -> Result<Vec<(PathBuf, usize)>> {
    let allowed = crate_dir.join(allowed);
    let mut out = Vec::new();
    for file in rust_files(&crate_dir.join("src"))? {
        if file == allowed || file.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&file)
            .wrap_err_with(|| format!("reading {}", file.display()))?;
        let ast = syn::parse_file(&text).wrap_err_with(|| format!("parsing {}", file.display()))?;
        let mut reads = Reads { field, n: 0 };
        for item in &ast.items {
            reads.visit_item(item);
        }
        if reads.n > 0 {
            out.push((
                file.strip_prefix(crate_dir).unwrap_or(&file).to_path_buf(),
                reads.n,
            ));
        }
    }
    out.sort();
    Ok(out)
}

/// Counts the reads of one field (`x.field`) it visits.
struct Reads<'a> {
    field: &'a str,
    n: usize,
}

impl<'ast> Visit<'ast> for Reads<'_> {
    fn visit_expr_field(&mut self, e: &'ast syn::ExprField) {
        if matches!(&e.member, syn::Member::Named(name) if name == self.field) {
            self.n += 1;
        }
        syn::visit::visit_expr_field(self, e);
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
    fn a_read_of_the_field_outside_its_file_is_caught_and_test_code_is_not() {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            &[
                ("lib.rs", "mod verbs_ctx; mod clock;"),
                (
                    "verbs_ctx.rs",
                    "fn ext(c: *mut C) -> bool { unsafe { (*c).abi_compat } == 1 }",
                ),
                (
                    "clock.rs",
                    "fn a(c: &C) -> usize { c.abi_compat + c.other }\n\
                     // c.abi_compat in a comment is no read\n\
                     #[cfg(test)] mod tests { fn t(c: &C) { let _ = c.abi_compat; } }",
                ),
                ("cq/tests.rs", "fn t(c: &C) { let _ = c.abi_compat; }"),
                (
                    "cq/mod.rs",
                    "fn m(c: &C) { let _ = (c.abi_compat, c.abi_compat); }",
                ),
            ],
        );
        let found = strays(dir.path(), "src/verbs_ctx.rs", "abi_compat").unwrap();
        assert_eq!(
            found,
            [
                (PathBuf::from("src/clock.rs"), 1),
                (PathBuf::from("src/cq/mod.rs"), 2)
            ]
        );
        assert!(
            strays(dir.path(), "src/verbs_ctx.rs", "other")
                .unwrap()
                .iter()
                .all(|(f, _)| f == Path::new("src/clock.rs"))
        );
    }
}
