//! Import circles between the files of a crate: file A imports file B when A names something B
//! defines. Every path A writes (in a `use`, in its code, or among a macro's tokens) that starts
//! at `crate`, `super`, `self`, one of A's child modules, or a name A imports is followed to the
//! file that *defines* the name it ends on: down through child modules, and through imports and
//! re-exports (`pub use x::Name`, `pub(crate) use x::*`, `use x as y`), so a type re-exported by
//! a `mod.rs` still ties its users to the file that holds it, not to the `mod.rs`. A strongly
//! connected set of two or more files is a circle: those files are one job spread over several,
//! or two jobs tangled.
//!
//! A file naming what one of its ancestor modules defines (`super::Thing` from `b/inner.rs`,
//! `Thing` being `b/mod.rs`'s) is no edge: that is the module's interface, which its children
//! implement, not a tangle.
//!
//! Test code is left out: files under `tests/`, files named `tests.rs`, and every item under
//! `#[cfg(test)]`. A file's module path comes from its place under `src/` (`mod.rs`, `lib.rs`
//! and `main.rs` name their folder); imports of the crate root itself never count (the root
//! declares the modules, so every file "imports" it).

use color_eyre::eyre::{Result, WrapErr as _};
use petgraph::algo::tarjan_scc;
use petgraph::graph::{DiGraph, NodeIndex};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use syn::buffer::{Cursor, TokenBuffer};
use syn::visit::Visit;

/// A module path: the segments after `crate`.
type ModPath = Vec<String>;

/// One circle: its files (relative to the crate's folder, sorted), and what ties it, one line
/// per edge (`src/a.rs -> src/b.rs (Name)`: a.rs names `Name`, which b.rs defines).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Circle {
    pub files: Vec<PathBuf>,
    pub ties: Vec<String>,
}

/// The circles of the crate at `crate_dir`, each as its files (relative to `crate_dir`,
/// sorted); empty when there is none.
///
/// # Errors
/// A file that cannot be read or parsed.
#[cfg(test)]
pub fn circles(crate_dir: &Path) -> Result<Vec<Vec<PathBuf>>> {
    Ok(find(crate_dir)?.into_iter().map(|c| c.files).collect())
}

/// The circles of the crate at `crate_dir`, with the names that tie each.
///
/// # Errors
/// A file that cannot be read or parsed.
pub fn find(crate_dir: &Path) -> Result<Vec<Circle>> {
    let src = crate_dir.join("src");
    let mut files: BTreeMap<ModPath, PathBuf> = BTreeMap::new();
    for file in rust_files(&src)? {
        let under_tests = file
            .strip_prefix(&src)
            .unwrap_or(&file)
            .parent()
            .is_some_and(|d| d.components().any(|c| c.as_os_str() == "tests"));
        if under_tests || file.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        files.insert(mod_path(&src, &file), file);
    }
    let mut modules: BTreeMap<ModPath, Module> = BTreeMap::new();
    let mut asts = Vec::new();
    for (module, file) in &files {
        let text = std::fs::read_to_string(file)
            .wrap_err_with(|| format!("reading {}", file.display()))?;
        let ast = syn::parse_file(&text).wrap_err_with(|| format!("parsing {}", file.display()))?;
        modules.insert(module.clone(), Module::of(&ast));
        asts.push((module, ast));
    }
    let krate = Crate { modules };
    let mut graph = DiGraph::<&ModPath, ()>::new();
    let nodes: BTreeMap<&ModPath, NodeIndex> =
        files.keys().map(|m| (m, graph.add_node(m))).collect();
    // Per edge, the first name that makes it (for the report).
    let mut ties: BTreeMap<(&ModPath, &ModPath), String> = BTreeMap::new();
    for (module, ast) in &asts {
        for path in paths(ast) {
            if path.len() < 2 {
                continue;
            }
            let Some(to) = krate.resolve(module, &path, 0).map(|t| t.module) else {
                continue;
            };
            let Some((to, _)) = files.get_key_value(&to) else {
                continue;
            };
            // A child naming what its own ancestor module (its `mod.rs`) defines uses that
            // module's interface: no edge (the root is every file's ancestor).
            if !module.starts_with(to) {
                graph.update_edge(nodes[module], nodes[to], ());
                let name = path.last().cloned().unwrap_or_default();
                ties.entry((module, to)).or_insert(name);
            }
        }
    }
    let rel = |m: &ModPath| {
        let f = &files[m];
        f.strip_prefix(crate_dir).unwrap_or(f).to_path_buf()
    };
    let mut out: Vec<Circle> = tarjan_scc(&graph)
        .into_iter()
        .filter(|scc| scc.len() > 1)
        .map(|scc| {
            let members: BTreeSet<&ModPath> = scc.iter().map(|&n| graph[n]).collect();
            let mut files: Vec<PathBuf> = members.iter().map(|m| rel(m)).collect();
            files.sort();
            let mut lines: Vec<String> = ties
                .iter()
                .filter(|((a, b), _)| members.contains(a) && members.contains(b))
                .map(|((a, b), name)| {
                    format!("{} -> {} ({name})", rel(a).display(), rel(b).display())
                })
                .collect();
            lines.sort();
            Circle { files, ties: lines }
        })
        .collect();
    out.sort_by(|a, b| a.files.cmp(&b.files));
    Ok(out)
}

/// What one file declares at its top level (outside test code): the names it defines, and what
/// it imports.
#[derive(Default)]
struct Module {
    defs: BTreeSet<String>,
    uses: Vec<Use>,
}

/// One path a `use` brings in: `path` as written (without a glob's `*`), and the name it binds
/// there (`None` for a glob).
struct Use {
    path: ModPath,
    name: Option<String>,
}

impl Module {
    fn of(ast: &syn::File) -> Self {
        let mut m = Self::default();
        for item in ast.items.iter().filter(|i| !is_test_only(item_attrs(i))) {
            if let syn::Item::Use(u) = item {
                if u.leading_colon.is_none() {
                    let mut out = Vec::new();
                    flatten(&u.tree, &mut Vec::new(), &mut out);
                    m.uses.extend(out);
                }
            } else if let syn::Item::ForeignMod(f) = item {
                for fi in &f.items {
                    match fi {
                        syn::ForeignItem::Fn(x) => m.defs.insert(x.sig.ident.to_string()),
                        syn::ForeignItem::Static(x) => m.defs.insert(x.ident.to_string()),
                        syn::ForeignItem::Type(x) => m.defs.insert(x.ident.to_string()),
                        _ => false,
                    };
                }
            } else if let Some(name) = item_name(item) {
                m.defs.insert(name);
            }
        }
        m
    }
}

/// The name an item defines in its module, if any.
fn item_name(item: &syn::Item) -> Option<String> {
    use syn::Item as I;
    let ident = match item {
        I::Const(i) => &i.ident,
        I::Enum(i) => &i.ident,
        I::ExternCrate(i) => i.rename.as_ref().map_or(&i.ident, |(_, r)| r),
        I::Fn(i) => &i.sig.ident,
        I::Macro(i) => i.ident.as_ref()?,
        I::Mod(i) => &i.ident,
        I::Static(i) => &i.ident,
        I::Struct(i) => &i.ident,
        I::Trait(i) => &i.ident,
        I::TraitAlias(i) => &i.ident,
        I::Type(i) => &i.ident,
        I::Union(i) => &i.ident,
        _ => return None,
    };
    Some(ident.to_string())
}

/// Where a path leads: the file (by module path) that defines the name it ends on, and whether
/// that file was seen to define it (`false`: the path stops at a file that neither defines nor
/// imports the name, e.g. a macro's item).
struct Target {
    module: ModPath,
    defined: bool,
}

/// How deep a chain of imports and re-exports is followed (a guard against `use a as b; use b
/// as a;`, which does not compile anyway).
const MAX_HOPS: usize = 32;

struct Crate {
    modules: BTreeMap<ModPath, Module>,
}

impl Crate {
    fn is_file(&self, m: &[String]) -> bool {
        self.modules.contains_key(m)
    }

    /// The file that defines what `segs` (a path as written in the file of `here`) names, or
    /// `None` when the path leaves the crate (`std::...`, another crate) or names something of
    /// `here`'s own.
    fn resolve(&self, here: &[String], segs: &[String], hops: usize) -> Option<Target> {
        if hops > MAX_HOPS {
            return None;
        }
        let (first, rest) = segs.split_first()?;
        let module = self.modules.get(here)?;
        let mut cur: ModPath = match first.as_str() {
            "crate" => Vec::new(),
            "self" => here.to_vec(),
            "super" => here.split_last()?.1.to_vec(),
            name => {
                let child = [here, std::slice::from_ref(first)].concat();
                if self.is_file(&child) {
                    child
                } else if module.defs.contains(name) {
                    // An item of here's own (an enum's variant, an inline module's item).
                    return Some(Target {
                        module: here.to_vec(),
                        defined: true,
                    });
                } else {
                    // A name here imports: the path it stands for, then the rest.
                    let u = module
                        .uses
                        .iter()
                        .find(|u| u.name.as_deref() == Some(name))?;
                    let full = [u.path.as_slice(), rest].concat();
                    return self.resolve(here, &full, hops + 1);
                }
            }
        };
        let mut rest = rest;
        while let Some((s, r)) = rest.split_first()
            && s == "super"
        {
            cur.pop()?;
            rest = r;
        }
        while let Some((s, r)) = rest.split_first()
            && self.is_file(&[cur.as_slice(), std::slice::from_ref(s)].concat())
        {
            cur.push(s.clone());
            rest = r;
        }
        let found = |module: ModPath| {
            Some(Target {
                module,
                defined: true,
            })
        };
        let Some(name) = rest.first().filter(|n| *n != "*") else {
            return found(cur);
        };
        let module = self.modules.get(&cur)?;
        if module.defs.contains(name) {
            return found(cur);
        }
        // Not defined there: it comes in through one of its imports (a re-export, when it is
        // named from outside), so follow that to where it is defined.
        for u in module.uses.iter().filter(|u| u.name.as_ref() == Some(name)) {
            let full = [u.path.as_slice(), &rest[1..]].concat();
            if let Some(t) = self.resolve(&cur, &full, hops + 1) {
                return Some(t);
            }
        }
        for u in module.uses.iter().filter(|u| u.name.is_none()) {
            let full = [u.path.as_slice(), rest].concat();
            if let Some(t) = self.resolve(&cur, &full, hops + 1)
                && t.defined
            {
                return Some(t);
            }
        }
        Some(Target {
            module: cur,
            defined: false,
        })
    }
}

/// Every path `ast` writes outside test code, as written: each path of its `use`s (a glob's
/// ending in `*`), every path of two or more segments in its code, and every run `a::b...` among
/// a macro's tokens.
fn paths(ast: &syn::File) -> Vec<ModPath> {
    let mut v = Paths { found: Vec::new() };
    for item in &ast.items {
        if !is_test_only(item_attrs(item)) {
            v.visit_item(item);
        }
    }
    v.found
}

struct Paths {
    found: Vec<ModPath>,
}

impl<'ast> Visit<'ast> for Paths {
    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        if u.leading_colon.is_some() {
            return;
        }
        let mut uses = Vec::new();
        flatten(&u.tree, &mut Vec::new(), &mut uses);
        for Use { mut path, name } in uses {
            if name.is_none() {
                path.push("*".to_owned());
            }
            self.found.push(path);
        }
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        if p.leading_colon.is_none() && p.segments.len() > 1 {
            self.found
                .push(p.segments.iter().map(|s| s.ident.to_string()).collect());
        }
        syn::visit::visit_path(self, p);
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        syn::visit::visit_macro(self, m);
        let buffer = TokenBuffer::new2(m.tokens.clone());
        token_paths(buffer.begin(), &mut self.found);
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

/// Every run `a::b::...` (two or more identifiers joined by `::`) among the tokens from `c` on,
/// into their groups: the paths a macro's arguments name, which syn leaves unparsed. A run that
/// starts with `::` (`::std::...`) leaves the crate and is skipped.
fn token_paths(mut c: Cursor<'_>, out: &mut Vec<ModPath>) {
    let mut run: ModPath = Vec::new();
    // The last token was `::`: an identifier now continues the run.
    let mut joined = false;
    // The run began with `::`.
    let mut outside = false;
    fn flush(run: &mut ModPath, out: &mut Vec<ModPath>) {
        if run.len() > 1 {
            out.push(std::mem::take(run));
        }
        run.clear();
    }
    while !c.eof() {
        if let Some((ident, next)) = c.ident() {
            if !joined {
                flush(&mut run, out);
                outside = false;
            }
            if !outside {
                run.push(ident.to_string());
            }
            joined = false;
            c = next;
            continue;
        }
        if let Some((p, next)) = c.punct()
            && p.as_char() == ':'
            && let Some((q, after)) = next.punct()
            && q.as_char() == ':'
        {
            if run.is_empty() && !joined {
                outside = true;
            }
            joined = true;
            c = after;
            continue;
        }
        flush(&mut run, out);
        outside = false;
        joined = false;
        if let Some((inner, _, _, next)) = c.any_group() {
            token_paths(inner, out);
            c = next;
        } else if let Some((_, next)) = c.token_tree() {
            c = next;
        } else {
            break;
        }
    }
    flush(&mut run, out);
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

/// The paths of a `use` tree, each from its root, with the name each binds (`a::b as c` binds
/// `c`, `a::{self}` binds `a`, a glob binds none).
fn flatten(tree: &syn::UseTree, prefix: &mut Vec<String>, out: &mut Vec<Use>) {
    match tree {
        syn::UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            flatten(&p.tree, prefix, out);
            prefix.pop();
        }
        syn::UseTree::Name(n) => {
            let mut path = prefix.clone();
            if n.ident != "self" {
                path.push(n.ident.to_string());
            }
            let name = path.last().cloned();
            out.push(Use { path, name });
        }
        syn::UseTree::Rename(r) => {
            let mut path = prefix.clone();
            if r.ident != "self" {
                path.push(r.ident.to_string());
            }
            out.push(Use {
                path,
                name: Some(r.rename.to_string()),
            });
        }
        syn::UseTree::Glob(_) => out.push(Use {
            path: prefix.clone(),
            name: None,
        }),
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
        // A child naming what its parent module defines (`super::Thing`, a path expression)
        // uses that module's interface: no circle with the parent that calls it.
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
        assert!(circles(dir.path()).unwrap().is_empty());
        // But through `super::super::` to a sibling of the parent, it is one.
        write(
            dir.path(),
            &[
                ("a.rs", "pub fn f() { crate::b::h(); }"),
                ("b/mod.rs", "mod inner; pub fn h() { inner::g(); }"),
                ("b/inner.rs", "pub fn g() { super::super::a::f(); }"),
            ],
        );
        assert_eq!(
            circles(dir.path()).unwrap(),
            vec![vec![
                PathBuf::from("src/a.rs"),
                PathBuf::from("src/b/inner.rs"),
                PathBuf::from("src/b/mod.rs")
            ]]
        );
    }

    #[test]
    fn a_circle_through_relative_paths_is_found() {
        let dir = tempfile::tempdir().unwrap();
        // rounds -> steps through a sibling imported by `super::`, then named relatively;
        // steps -> verbs; then verbs -> verbs/sys -> rounds closes it, each time another way.
        write(
            dir.path(),
            &[
                ("lib.rs", "mod session; mod verbs;"),
                ("session/mod.rs", "mod rounds; mod steps;"),
                (
                    "session/rounds.rs",
                    "use super::steps; pub struct Kept; fn r() { steps::feed(); }",
                ),
                (
                    "session/steps.rs",
                    "pub fn feed() { crate::verbs::post(); }",
                ),
                ("verbs.rs", "pub fn post() {}"),
            ],
        );
        assert!(circles(dir.path()).unwrap().is_empty());
        let closes = [
            // `self::` to a child; `{self as s, ...}` in a group.
            (
                "verbs.rs",
                "mod sys; pub fn post() { self::sys::x(); }",
                "verbs/sys.rs",
                "use crate::session::{self as s, rounds::Kept};\npub fn x() {}",
            ),
            // a child module named relatively, then a nested group.
            (
                "verbs.rs",
                "mod sys; pub fn post() { sys::x(); }",
                "verbs/sys.rs",
                "use crate::{session::{rounds::{Kept as K}}}; pub fn x() {}",
            ),
            // `use child::*`, then a `super::super::` path in a macro's arguments.
            (
                "verbs.rs",
                "mod sys; use sys::*; pub fn post() { x(); }",
                "verbs/sys.rs",
                "pub fn x() { let _ = matches!(1, super::super::session::rounds::Kept); }",
            ),
        ];
        for (verbs, verbs_text, sys, sys_text) in closes {
            write(dir.path(), &[(verbs, verbs_text), (sys, sys_text)]);
            assert_eq!(
                circles(dir.path()).unwrap(),
                vec![vec![
                    PathBuf::from("src/session/rounds.rs"),
                    PathBuf::from("src/session/steps.rs"),
                    PathBuf::from("src/verbs/sys.rs"),
                    PathBuf::from("src/verbs.rs"),
                ]],
                "{verbs_text} / {sys_text}"
            );
        }
    }

    #[test]
    fn a_circle_through_a_re_export_is_found_at_the_defining_file() {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            &[
                (
                    "lib.rs",
                    "mod ports; mod session; pub use session::Failure as F;",
                ),
                // The mod.rs only re-exports; ctx.rs defines.
                (
                    "session/mod.rs",
                    "mod ctx; mod more; pub use ctx::Failure; pub(crate) use more::*;",
                ),
                (
                    "session/ctx.rs",
                    "pub struct Failure; fn run() { crate::ports::open(); }",
                ),
                ("session/more.rs", "pub struct Slots;"),
                (
                    "ports.rs",
                    "pub fn open() -> Result<(), crate::session::Failure> { Ok(()) }",
                ),
            ],
        );
        let found = find(dir.path()).unwrap();
        assert_eq!(
            found,
            vec![Circle {
                files: vec![
                    PathBuf::from("src/ports.rs"),
                    PathBuf::from("src/session/ctx.rs")
                ],
                ties: vec![
                    "src/ports.rs -> src/session/ctx.rs (Failure)".to_owned(),
                    "src/session/ctx.rs -> src/ports.rs (open)".to_owned(),
                ],
            }]
        );
        // Through the root's renaming re-export, and through a glob re-export.
        for ports in [
            "use crate::F; pub fn open() {}",
            "pub fn open() { let _ = crate::session::Slots; }",
        ] {
            write(
                dir.path(),
                &[
                    ("ports.rs", ports),
                    (
                        "session/more.rs",
                        "pub struct Slots; fn f() { crate::session::ctx::Failure; }",
                    ),
                ],
            );
            let found = circles(dir.path()).unwrap();
            assert_eq!(found.len(), 1, "{ports}: {found:?}");
        }
        // Naming the mod.rs's own items only (a child's interface) is no circle.
        write(
            dir.path(),
            &[
                ("ports.rs", "pub fn open() {}"),
                ("session/more.rs", "pub struct Slots;"),
            ],
        );
        assert!(circles(dir.path()).unwrap().is_empty());
    }

    #[test]
    fn a_file_that_does_not_parse_is_named() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), &[("lib.rs", "fn (")]);
        let e = format!("{:#}", circles(dir.path()).unwrap_err());
        assert!(e.contains("lib.rs"), "{e}");
    }
}
