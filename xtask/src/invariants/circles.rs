//! Import circles between the files of a crate: file A imports file B when A names a path
//! `crate::...` or `super::...` (in a `use` or anywhere in its code) that resolves into B, the
//! deepest file whose module path is a prefix of it. A strongly connected set of two or more
//! files is a circle: those files are one job spread over several, or two jobs tangled.
//!
//! Test code is left out: files under `tests/`, files named `tests.rs`, and every item under
//! `#[cfg(test)]`. A file's module path comes from its place under `src/` (`mod.rs`, `lib.rs`
//! and `main.rs` name their folder); imports of the crate root itself never count (the root
//! declares the modules, so every file "imports" it).

use color_eyre::eyre::{Result, WrapErr as _};
use petgraph::algo::tarjan_scc;
use petgraph::graph::{DiGraph, NodeIndex};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use syn::visit::Visit;

/// A module path: the segments after `crate`.
type ModPath = Vec<String>;

/// The circles of the crate at `crate_dir`, each as its files (relative to `crate_dir`,
/// sorted); empty when there is none.
///
/// # Errors
/// A file that cannot be read or parsed.
pub fn circles(crate_dir: &Path) -> Result<Vec<Vec<PathBuf>>> {
    let src = crate_dir.join("src");
    let mut files: BTreeMap<ModPath, PathBuf> = BTreeMap::new();
    for file in rust_files(&src)? {
        if file.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        files.insert(mod_path(&src, &file), file);
    }
    let mut graph = DiGraph::<&ModPath, ()>::new();
    let nodes: BTreeMap<&ModPath, NodeIndex> =
        files.keys().map(|m| (m, graph.add_node(m))).collect();
    for (module, file) in &files {
        let text = std::fs::read_to_string(file)
            .wrap_err_with(|| format!("reading {}", file.display()))?;
        let ast = syn::parse_file(&text).wrap_err_with(|| format!("parsing {}", file.display()))?;
        for target in imports(module, &ast) {
            if let Some(to) = deepest(&files, &target)
                && to != module
                && !to.is_empty()
            {
                graph.update_edge(nodes[module], nodes[to], ());
            }
        }
    }
    let mut out: Vec<Vec<PathBuf>> = tarjan_scc(&graph)
        .into_iter()
        .filter(|scc| scc.len() > 1)
        .map(|scc| {
            let mut set: Vec<PathBuf> = scc
                .iter()
                .map(|&n| {
                    let f = &files[graph[n]];
                    f.strip_prefix(crate_dir).unwrap_or(f).to_path_buf()
                })
                .collect();
            set.sort();
            set
        })
        .collect();
    out.sort();
    Ok(out)
}

/// Every `.rs` file under `dir`, recursively.
pub(super) fn rust_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).wrap_err_with(|| format!("listing {}", d.display()))? {
            let path = entry?.path();
            if path.is_dir() {
                todo.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    Ok(out)
}

fn mod_path(src: &Path, file: &Path) -> ModPath {
    let rel = file.strip_prefix(src).unwrap_or(file).with_extension("");
    let mut segs: ModPath = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if segs
        .last()
        .is_some_and(|l| l == "mod" || l == "lib" || l == "main")
    {
        segs.pop();
    }
    segs
}

/// The file whose module path is the longest prefix of `target`.
fn deepest<'a>(files: &'a BTreeMap<ModPath, PathBuf>, target: &[String]) -> Option<&'a ModPath> {
    (0..=target.len())
        .rev()
        .find_map(|k| files.get_key_value(&target[..k]).map(|(m, _)| m))
}

/// The module paths `ast` (the file of `module`) names through `crate::` and `super::`,
/// outside test code.
fn imports(module: &[String], ast: &syn::File) -> Vec<ModPath> {
    let mut v = Imports {
        module,
        found: Vec::new(),
    };
    for item in &ast.items {
        if !is_test_only(item_attrs(item)) {
            v.visit_item(item);
        }
    }
    v.found
}

struct Imports<'a> {
    module: &'a [String],
    found: Vec<ModPath>,
}

impl Imports<'_> {
    /// `segs` (a path as written) as a module path, if it starts at `crate` or `super`.
    fn resolve(&mut self, segs: &[String]) {
        let Some(first) = segs.first() else { return };
        let path = if first == "crate" {
            segs[1..].to_vec()
        } else if first == "super" {
            let ups = segs.iter().take_while(|s| *s == "super").count();
            let mut base = self.module[..self.module.len().saturating_sub(ups)].to_vec();
            base.extend(segs[ups..].iter().cloned());
            base
        } else {
            return;
        };
        self.found.push(path);
    }
}

impl<'ast> Visit<'ast> for Imports<'_> {
    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        let mut paths = Vec::new();
        flatten(&u.tree, &mut Vec::new(), &mut paths);
        for p in paths {
            self.resolve(&p);
        }
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        let segs: Vec<String> = p.segments.iter().map(|s| s.ident.to_string()).collect();
        self.resolve(&segs);
        syn::visit::visit_path(self, p);
    }

    /// `pub(super)`, `pub(crate)`, `pub(in crate::x)` say who may see an item, not what it uses.
    fn visit_visibility(&mut self, _: &'ast syn::Visibility) {}

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

/// The paths of a `use` tree, each from its root (a glob or a rename ends its path).
fn flatten(tree: &syn::UseTree, prefix: &mut Vec<String>, out: &mut Vec<ModPath>) {
    match tree {
        syn::UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            flatten(&p.tree, prefix, out);
            prefix.pop();
        }
        syn::UseTree::Name(n) => {
            let mut p = prefix.clone();
            if n.ident != "self" {
                p.push(n.ident.to_string());
            }
            out.push(p);
        }
        syn::UseTree::Rename(r) => {
            let mut p = prefix.clone();
            if r.ident != "self" {
                p.push(r.ident.to_string());
            }
            out.push(p);
        }
        syn::UseTree::Glob(_) => out.push(prefix.clone()),
        syn::UseTree::Group(g) => {
            for t in &g.items {
                flatten(t, prefix, out);
            }
        }
    }
}

/// The attributes of an item of an `impl` block (a method, a constant, a type).
pub(super) fn impl_item_attrs(item: &syn::ImplItem) -> &[syn::Attribute] {
    match item {
        syn::ImplItem::Fn(f) => &f.attrs,
        syn::ImplItem::Const(c) => &c.attrs,
        syn::ImplItem::Type(t) => &t.attrs,
        _ => &[],
    }
}

/// The attributes of an item, whatever its kind.
pub(super) fn item_attrs(item: &syn::Item) -> &[syn::Attribute] {
    use syn::Item as I;
    match item {
        I::Const(i) => &i.attrs,
        I::Enum(i) => &i.attrs,
        I::ExternCrate(i) => &i.attrs,
        I::Fn(i) => &i.attrs,
        I::ForeignMod(i) => &i.attrs,
        I::Impl(i) => &i.attrs,
        I::Macro(i) => &i.attrs,
        I::Mod(i) => &i.attrs,
        I::Static(i) => &i.attrs,
        I::Struct(i) => &i.attrs,
        I::Trait(i) => &i.attrs,
        I::TraitAlias(i) => &i.attrs,
        I::Type(i) => &i.attrs,
        I::Union(i) => &i.attrs,
        I::Use(i) => &i.attrs,
        _ => &[],
    }
}

/// `#[cfg(test)]` (alone, not inside `not(...)` or `any(...)`).
pub(super) fn is_test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg")
            && a.parse_args::<syn::Ident>()
                .is_ok_and(|ident| ident == "test")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::super::tests::write_src as write;

    #[test]
    fn a_circle_through_crate_and_super_paths_is_found_and_test_code_is_not() {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            &[
                ("lib.rs", "mod a; mod b; mod c;"),
                ("a.rs", "pub fn f() { crate::lib_level(); }"),
                // b -> b/inner -> a; `pub(super)` is no import of b.
                (
                    "b/mod.rs",
                    "mod inner; pub struct Thing; fn h() { crate::b::inner::g(); }",
                ),
                ("b/inner.rs", "pub(super) fn g() { super::super::a::f(); }"),
                // c -> a only in test code: no edge.
                (
                    "c.rs",
                    "#[cfg(test)] mod tests { use crate::a::f; }\n#[cfg(test)] fn t() { crate::a::f(); }",
                ),
            ],
        );
        assert!(circles(dir.path()).unwrap().is_empty());
        // Now a names b back (in a `use` group): a circle of all three.
        write(
            dir.path(),
            &[("a.rs", "use crate::{b::Thing, x}; pub fn f() {}")],
        );
        assert_eq!(
            circles(dir.path()).unwrap(),
            vec![vec![
                PathBuf::from("src/a.rs"),
                PathBuf::from("src/b/inner.rs"),
                PathBuf::from("src/b/mod.rs")
            ]]
        );
        // And through `super::` in a path expression, from the inner file to its parent.
        write(
            dir.path(),
            &[
                (
                    "b/mod.rs",
                    "mod inner; pub struct Thing; fn h() { crate::b::inner::g(); }",
                ),
                ("b/inner.rs", "pub fn g() { let _ = super::Thing; }"),
            ],
        );
        assert_eq!(
            circles(dir.path()).unwrap(),
            vec![vec![
                PathBuf::from("src/b/inner.rs"),
                PathBuf::from("src/b/mod.rs")
            ]]
        );
    }

    #[test]
    fn a_file_that_does_not_parse_is_named() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), &[("lib.rs", "fn (")]);
        let e = format!("{:#}", circles(dir.path()).unwrap_err());
        assert!(e.contains("lib.rs"), "{e}");
    }
}
