//! The dependency rules between the workspace's crates that ARCHITECTURE.md states, read off
//! `cargo metadata`.

use cargo_metadata::{DependencyKind, Metadata, Package};

/// What a rule forbids a package to depend on.
#[derive(Debug, Clone, Copy)]
pub enum Forbid {
    /// Any crate of this workspace (a `path` dependency), of any kind.
    OurCrates,
    /// These crates, as normal or build dependencies (tests may use anything).
    Crates(&'static [&'static str]),
}

/// One rule: `package` must not depend on what `forbid` names; `says` is the invariant as
/// ARCHITECTURE.md states it.
#[derive(Debug, Clone, Copy)]
pub struct Rule {
    pub package: &'static str,
    pub forbid: Forbid,
    pub says: &'static str,
}

/// The command-line and terminal crates.
const CLI: &[&str] = &[
    "clap",
    "clap_mangen",
    "clap_complete",
    "color-eyre",
    "tracing-subscriber",
    "indicatif",
    "humantime",
];

/// The rules.
pub const RULES: &[Rule] = &[
    Rule {
        package: "rdma-core-rs",
        forbid: Forbid::OurCrates,
        says: "rdma-core-rs depends on no crate of ours",
    },
    Rule {
        package: "rdma-core-rs",
        forbid: Forbid::Crates(&["serde", "serde_json"]),
        says: "rdma-core-rs never parses JSON",
    },
    Rule {
        package: "rdma-core-rs",
        forbid: Forbid::Crates(CLI),
        says: "rdma-core-rs has no command line",
    },
    Rule {
        package: "rdma-core-rs",
        forbid: Forbid::Crates(&["rdma-sys", "ibverbs"]),
        says: "one set of verbs types: RDMA CM is bound over ibverbs-sys's own (build.rs)",
    },
    Rule {
        package: "rdma-proto",
        forbid: Forbid::Crates(&["ibverbs", "ibverbs-sys", "rdma-sys", "rdma-core-rs"]),
        says: "rdma-proto never touches ibverbs",
    },
    Rule {
        package: "rdma-proto",
        forbid: Forbid::Crates(CLI),
        says: "rdma-proto has no command-line or terminal dependency",
    },
    Rule {
        package: "rdma-app",
        forbid: Forbid::Crates(&["ibverbs", "ibverbs-sys", "rdma-sys"]),
        says: "rdma-app calls no verb (it goes through rdma-core-rs)",
    },
    Rule {
        package: "rdma-server",
        forbid: Forbid::Crates(&["rdma-client", "rdma-misbehave", "rdma-hostile", "xtask"]),
        says: "each binary is deployable alone, and holds no test peer",
    },
    Rule {
        package: "rdma-client",
        forbid: Forbid::Crates(&["rdma-server", "rdma-misbehave", "rdma-hostile", "xtask"]),
        says: "each binary is deployable alone, and holds no test peer",
    },
    Rule {
        package: "rdma-hostile",
        forbid: Forbid::Crates(&[
            "ibverbs",
            "ibverbs-sys",
            "rdma-sys",
            "rdma-core-rs",
            "rdma-app",
            "rdma-server",
            "rdma-client",
        ]),
        says: "the hostile matrix needs no RDMA and links no binary of ours: it speaks the wire as PROTOCOL.md writes it",
    },
];

/// The test-only crates: never published.
pub const TEST_ONLY: &[&str] = &["rdma-misbehave", "rdma-hostile", "xtask"];

/// Every rule `metadata` breaks, as a line naming the rule, the package and the dependency.
/// A rule about a package the workspace does not have is broken too (the rule went stale).
#[must_use]
pub fn broken(metadata: &Metadata, rules: &[Rule]) -> Vec<String> {
    let mut out = Vec::new();
    for rule in rules {
        let Some(pkg) = metadata
            .workspace_packages()
            .into_iter()
            .find(|p| p.name.as_str() == rule.package)
        else {
            out.push(format!("{}: no such workspace package", rule.package));
            continue;
        };
        for dep in offending(pkg, rule.forbid) {
            out.push(format!(
                "\"{}\" is broken: {} depends on {dep}",
                rule.says, rule.package
            ));
        }
    }
    out
}

/// The test peers' place: the binaries and libraries have no feature that switches test code
/// on (the misbehaving peers are a crate of their own), and the test-only crates
/// ([`TEST_ONLY`]) are never published.
#[must_use]
pub fn hooks(metadata: &Metadata) -> Vec<String> {
    let mut out = Vec::new();
    for pkg in metadata.workspace_packages() {
        for feature in pkg.features.keys() {
            let words = feature.split(['-', '_']);
            if words
                .into_iter()
                .any(|w| matches!(w, "fault" | "faults" | "hook" | "hooks"))
            {
                out.push(format!(
                    "{} has a feature `{feature}`: test misbehaviour belongs in the rdma-misbehave peers, not behind a feature",
                    pkg.name
                ));
            }
        }
        if TEST_ONLY.contains(&pkg.name.as_str())
            && pkg.publish.as_ref().is_none_or(|to| !to.is_empty())
        {
            out.push(format!(
                "{} is test-only: it must say `publish = false`",
                pkg.name
            ));
        }
    }
    out
}

/// The crates that need RDMA headers or libraries to build.
const RDMA_BUILD: &[&str] = &["ibverbs-sys", "rdma-sys", "rdma-core-rs"];

/// xtask builds on a machine without RDMA headers (it is what installs them): its own
/// dependency tree, with the features it asks for, holds none of [`RDMA_BUILD`]. `tree` is
/// `cargo tree -p xtask -e normal,build --prefix none --format {p}`.
#[must_use]
pub fn rdma_in_xtask_tree(tree: &str) -> Vec<String> {
    let mut found: Vec<String> = tree
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| RDMA_BUILD.contains(name))
        .map(|name| {
            format!(
                "\"xtask never links ibverbs\" is broken: its tree holds {name} (a dependency of ours that needs it must stay behind a feature xtask leaves off)"
            )
        })
        .collect();
    found.dedup();
    found
}

/// `cargo tree` of xtask alone, as [`rdma_in_xtask_tree`] reads it.
///
/// # Errors
/// cargo failing (what ran and its stderr).
pub fn xtask_tree() -> color_eyre::Result<String> {
    let sh = xshell::Shell::new()?;
    sh.change_dir(crate::exec::workspace_root());
    let format = "{p}";
    crate::exec::run(xshell::cmd!(
        sh,
        "cargo tree -p xtask -e normal,build --prefix none --format {format}"
    ))
}

fn offending(pkg: &Package, forbid: Forbid) -> Vec<String> {
    pkg.dependencies
        .iter()
        .filter(|d| match forbid {
            Forbid::OurCrates => d.path.is_some(),
            Forbid::Crates(names) => {
                d.kind != DependencyKind::Development && names.contains(&d.name.as_str())
            }
        })
        .map(|d| d.name.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metadata() -> Metadata {
        cargo_metadata::MetadataCommand::new()
            .manifest_path(crate::exec::workspace_root().join("Cargo.toml"))
            .no_deps()
            .exec()
            .unwrap()
    }

    #[test]
    fn the_workspace_keeps_its_dependency_rules() {
        let md = metadata();
        let broken = broken(&md, RULES);
        assert!(broken.is_empty(), "{broken:#?}");
        let hooks = hooks(&md);
        assert!(hooks.is_empty(), "{hooks:#?}");
    }

    #[test]
    fn xtask_builds_without_rdma_headers() {
        let tree = xtask_tree().unwrap();
        assert!(tree.contains("rdma-proto"), "{tree}");
        let found = rdma_in_xtask_tree(&tree);
        assert!(found.is_empty(), "{found:#?}");
        // The reader against a broken fake: a tree that pulls the verbs layer in.
        let bad = "xtask v0.1.0\nrdma-app v0.1.0\nrdma-core-rs v0.1.0\nibverbs-sys v0.3.2\n";
        let found = rdma_in_xtask_tree(bad);
        assert_eq!(found.len(), 2, "{found:#?}");
        assert!(found[1].contains("ibverbs-sys"), "{found:#?}");
    }

    /// The hook check against a broken fake: the workspace with a fault feature put back and
    /// the peer made publishable.
    #[test]
    fn a_fault_feature_or_a_publishable_peer_is_named() {
        let mut md = metadata();
        for pkg in &mut md.packages {
            if pkg.name.as_str() == "rdma-client" {
                pkg.features.insert("fault-injection".into(), vec![]);
            }
            if matches!(pkg.name.as_str(), "rdma-misbehave" | "rdma-hostile") {
                pkg.publish = None;
            }
        }
        let got = hooks(&md);
        assert!(
            got.iter()
                .any(|l| l.contains("rdma-client has a feature `fault-injection`")),
            "{got:#?}"
        );
        assert!(
            got.iter()
                .any(|l| l.contains("rdma-misbehave is test-only: it must say `publish = false`")),
            "{got:#?}"
        );
        assert!(
            got.iter()
                .any(|l| l.contains("rdma-hostile is test-only: it must say `publish = false`")),
            "{got:#?}"
        );
    }

    /// The checker against broken fakes: rules the real workspace breaks on purpose.
    #[test]
    fn a_broken_rule_is_named_with_its_package_and_dependency() {
        let md = metadata();
        let fake = [
            Rule {
                package: "rdma-server",
                forbid: Forbid::OurCrates,
                says: "the server depends on no crate of ours",
            },
            Rule {
                package: "rdma-app",
                forbid: Forbid::Crates(&["clap"]),
                says: "rdma-app has no clap",
            },
            // Dev-dependencies do not count for `Crates`.
            Rule {
                package: "rdma-proto",
                forbid: Forbid::Crates(&["proptest"]),
                says: "no proptest",
            },
            Rule {
                package: "rdma-nosuch",
                forbid: Forbid::OurCrates,
                says: "x",
            },
        ];
        let got = broken(&md, &fake);
        assert!(
            got.iter()
                .any(|l| l.contains("rdma-server depends on rdma-proto")),
            "{got:#?}"
        );
        assert!(
            got.iter()
                .any(|l| l.contains("\"rdma-app has no clap\" is broken: rdma-app depends on clap")),
            "{got:#?}"
        );
        assert!(!got.iter().any(|l| l.contains("proptest")), "{got:#?}");
        assert!(
            got.iter()
                .any(|l| l.contains("rdma-nosuch: no such workspace package")),
            "{got:#?}"
        );
    }
}
