//! Who is who in a fabric check: the node list, this node's rank and the world size, from
//! Slurm's environment or from `--hosts LIST --rank N`.
//!
//! **Rank order.** The node list is expanded (`node[01-04,07]`, Slurm/pdsh hostlist syntax, by
//! the `hostlist-parser` crate), duplicates are dropped, and the names are sorted in *natural*
//! order (runs of digits compare as numbers: `node2` before `node10`; then plain text order).
//! Rank `r` is the `r`-th name of that sorted list, so every task derives the same order from
//! whatever spelling of the list it was given, and a report names the same node for a rank.
//!
//! Under Slurm a task finds its own rank by its node's name (`SLURMD_NODENAME`, which Slurm
//! sets for every task) in that list, so the rank never depends on how Slurm numbered its
//! tasks; only when `SLURMD_NODENAME` is absent is `SLURM_PROCID` taken as the rank. Either
//! way `SLURM_NTASKS` must equal the number of nodes: one task per node
//! (`srun -N N --ntasks-per-node=1`).

use std::cmp::Ordering;

/// The node list and this node's place in it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct World {
    /// Every node, in rank order (see the module doc).
    pub hosts: Vec<String>,
    /// This node's rank: an index into `hosts`.
    pub rank: usize,
}

impl World {
    /// The world size.
    #[must_use]
    pub fn size(&self) -> usize {
        self.hosts.len()
    }
}

/// What was wrong with the node list or the rank; all of them are usage errors.
#[derive(Debug, thiserror::Error)]
pub enum RankError {
    #[error(
        "{0} is not set: run under Slurm (`srun -N N --ntasks-per-node=1 rdma-client fabric`) \
         or give --hosts LIST --rank N"
    )]
    MissingEnv(&'static str),
    #[error(
        "neither SLURM_STEP_NODELIST nor SLURM_JOB_NODELIST is set: run under Slurm or give --hosts LIST"
    )]
    NoNodeList,
    #[error("{var}={value:?} is not a number")]
    NotANumber { var: &'static str, value: String },
    #[error("cannot read the host list {list:?}: {reason} (write e.g. node[01-04,07],login1)")]
    BadHostList { list: String, reason: String },
    #[error("the host list {list:?} names {n} node(s); a fabric check needs at least two")]
    TooFew { list: String, n: usize },
    #[error(
        "the host list {list:?} names {n} nodes; a fabric check takes at most {max}",
        max = super::pair::MAX_WORLD
    )]
    TooMany { list: String, n: usize },
    #[error("rank {rank} is out of range: the host list has {n} nodes (ranks 0..={last})", last = n - 1)]
    RankOutOfRange { rank: usize, n: usize },
    #[error(
        "world size mismatch: SLURM_NTASKS={ntasks} but the node list {list:?} has {nodes} nodes; \
         run exactly one task per node (srun -N {nodes} --ntasks-per-node=1)"
    )]
    WorldMismatch {
        ntasks: usize,
        nodes: usize,
        list: String,
    },
    #[error(
        "this host, {host:?}, is not in --hosts {list:?}: give --rank N (its place in the sorted \
         list, from 0)"
    )]
    HostNotListed { host: String, list: String },
    #[error("--retest {0:?} is not in the node list, or is this node itself")]
    NotAPartner(String),
    #[error("this node, {node:?} (SLURMD_NODENAME), is not in the node list {list:?}")]
    NotInList { node: String, list: String },
}

/// Expands a hostlist expression into the sorted, deduplicated node list (see the module doc).
///
/// # Errors
/// [`RankError::BadHostList`] for anything that is not a whole hostlist expression.
pub fn expand(list: &str) -> Result<Vec<String>, RankError> {
    let bad = |reason: String| RankError::BadHostList {
        list: list.to_owned(),
        reason,
    };
    let trimmed = list.trim();
    if trimmed.is_empty() {
        return Err(bad("it is empty".into()));
    }
    // The parser stops quietly at the first thing it does not understand; insist on the
    // whole text: balanced brackets and only characters of host names and ranges.
    let mut depth = 0i32;
    for c in trimmed.chars() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            c if c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | ',' | ' ') => {}
            c => return Err(bad(format!("unexpected character {c:?}"))),
        }
        if !(0..=1).contains(&depth) {
            return Err(bad("unbalanced or nested brackets".into()));
        }
    }
    if depth != 0 {
        return Err(bad("a `[` is never closed".into()));
    }
    let mut hosts = hostlist_parser::parse(trimmed).map_err(|e| bad(one_line(&e.to_string())))?;
    hosts.retain(|h| !h.is_empty());
    hosts.sort_by(|a, b| natural_cmp(a, b));
    hosts.dedup();
    if hosts.is_empty() {
        return Err(bad("no host in it".into()));
    }
    Ok(hosts)
}

/// The world from explicit `--hosts LIST --rank N`.
///
/// # Errors
/// A bad list, fewer than two nodes, or a rank out of range.
pub fn explicit(list: &str, rank: usize) -> Result<World, RankError> {
    let hosts = at_least_two(list)?;
    if rank >= hosts.len() {
        return Err(RankError::RankOutOfRange {
            rank,
            n: hosts.len(),
        });
    }
    Ok(World { hosts, rank })
}

/// The world from `--hosts LIST` alone: this host's rank is its name's place in the list.
/// `hostname` is this machine's name; its short form (up to the first dot) counts too.
///
/// # Errors
/// A bad list, fewer than two nodes, or this host not in it.
pub fn by_hostname(list: &str, hostname: &str) -> Result<World, RankError> {
    let hosts = at_least_two(list)?;
    let short = hostname.split('.').next().unwrap_or(hostname);
    let rank = hosts
        .iter()
        .position(|h| h == hostname)
        .or_else(|| hosts.iter().position(|h| h == short))
        .ok_or_else(|| RankError::HostNotListed {
            host: hostname.to_owned(),
            list: list.to_owned(),
        })?;
    Ok(World { hosts, rank })
}

/// The node list alone (for `--plan`): `--hosts LIST`.
///
/// # Errors
/// A bad list or fewer than two nodes.
pub fn at_least_two(list: &str) -> Result<Vec<String>, RankError> {
    let hosts = expand(list)?;
    if hosts.len() < 2 {
        return Err(RankError::TooFew {
            list: list.to_owned(),
            n: hosts.len(),
        });
    }
    if hosts.len() > super::pair::MAX_WORLD {
        return Err(RankError::TooMany {
            list: list.to_owned(),
            n: hosts.len(),
        });
    }
    Ok(hosts)
}

/// The node list Slurm gives the step (falling back to the job's).
///
/// # Errors
/// Neither variable set.
pub fn slurm_node_list(env: &dyn Fn(&str) -> Option<String>) -> Result<String, RankError> {
    env("SLURM_STEP_NODELIST")
        .or_else(|| env("SLURM_JOB_NODELIST"))
        .ok_or(RankError::NoNodeList)
}

/// The world from Slurm's environment, read through `env` (`std::env::var` in the binary).
///
/// # Errors
/// A missing or bad variable, a world size that is not one task per node, a node not in the
/// list, or a rank out of range; each says which.
pub fn from_slurm(env: &dyn Fn(&str) -> Option<String>) -> Result<World, RankError> {
    let list = slurm_node_list(env)?;
    let number = |var: &'static str| -> Result<usize, RankError> {
        let value = env(var).ok_or(RankError::MissingEnv(var))?;
        value
            .trim()
            .parse()
            .map_err(|_| RankError::NotANumber { var, value })
    };
    let ntasks = number("SLURM_NTASKS")?;
    let procid = number("SLURM_PROCID")?;
    let hosts = at_least_two(&list)?;
    if ntasks != hosts.len() {
        return Err(RankError::WorldMismatch {
            ntasks,
            nodes: hosts.len(),
            list,
        });
    }
    let rank = match env("SLURMD_NODENAME") {
        Some(node) => hosts
            .iter()
            .position(|h| *h == node)
            .ok_or(RankError::NotInList { node, list })?,
        None => procid,
    };
    if rank >= hosts.len() || procid >= ntasks {
        return Err(RankError::RankOutOfRange {
            rank: rank.max(procid),
            n: hosts.len(),
        });
    }
    Ok(World { hosts, rank })
}

/// Natural order: runs of ASCII digits compare by value (then by length, so `01` and `1` stay
/// distinct and ordered), everything else character by character.
#[must_use]
pub fn natural_cmp(a: &str, b: &str) -> Ordering {
    let (mut x, mut y) = (a.as_bytes(), b.as_bytes());
    loop {
        match (x.first(), y.first()) {
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some(c), Some(d)) if c.is_ascii_digit() && d.is_ascii_digit() => {
                let (dx, rx) = split_digits(x);
                let (dy, ry) = split_digits(y);
                let (vx, vy) = (dx.trim_start_matches('0'), dy.trim_start_matches('0'));
                let by_value = vx.len().cmp(&vy.len()).then_with(|| vx.cmp(vy));
                match by_value.then_with(|| dx.len().cmp(&dy.len())) {
                    Ordering::Equal => (x, y) = (rx, ry),
                    other => return other,
                }
            }
            (Some(c), Some(d)) => match c.cmp(d) {
                Ordering::Equal => (x, y) = (&x[1..], &y[1..]),
                other => return other,
            },
        }
    }
}

/// The leading digits of `s` (as text) and the rest.
fn split_digits(s: &[u8]) -> (&str, &[u8]) {
    let end = s
        .iter()
        .position(|c| !c.is_ascii_digit())
        .unwrap_or(s.len());
    // Only ASCII digits: always valid UTF-8.
    (
        std::str::from_utf8(&s[..end]).unwrap_or_default(),
        &s[end..],
    )
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn slurm_lists_expand_into_one_sorted_order() {
        let want = ["node01", "node02", "node03", "node04", "node07"];
        assert_eq!(expand("node[01-04,07]").unwrap(), want);
        // Any spelling of the same set gives the same ranks.
        assert_eq!(expand("node07,node[03-04],node[01-02]").unwrap(), want);
        assert_eq!(expand("node[07,04-01],node03").unwrap(), want);
        // Natural order, not text order: node2 before node10.
        assert_eq!(
            expand("node[9-11],node2").unwrap(),
            ["node2", "node9", "node10", "node11"]
        );
        assert_eq!(
            expand("gpu[1-2]-ib,cpu1").unwrap(),
            ["cpu1", "gpu1-ib", "gpu2-ib"]
        );
        assert_eq!(
            expand("10.0.0.2,10.0.0.10,10.0.0.1").unwrap(),
            ["10.0.0.1", "10.0.0.2", "10.0.0.10"]
        );
    }

    #[test]
    fn bad_lists_say_what_is_wrong() {
        for (list, why) in [
            ("", "empty"),
            ("node[01-04", "never closed"),
            ("node01-04]", "unbalanced"),
            ("node[[1-2]]", "nested"),
            ("node_1;rm", "unexpected character"),
        ] {
            let e = expand(list).unwrap_err().to_string();
            assert!(e.contains(why), "{list}: {e}");
            assert!(e.contains(list), "{list}: {e}");
        }
        let e = at_least_two("n[1-1025]").unwrap_err().to_string();
        assert!(
            e.contains("1025 nodes") && e.contains("at most 1024"),
            "{e}"
        );
        assert_eq!(at_least_two("n[1-1024]").unwrap().len(), 1024);
        let e = at_least_two("node1").unwrap_err().to_string();
        assert!(e.contains("at least two"), "{e}");
    }

    #[test]
    fn natural_order() {
        let mut v = vec!["n10", "n9", "n010", "n1a", "n1", "m2"];
        v.sort_by(|a, b| natural_cmp(a, b));
        assert_eq!(v, ["m2", "n1", "n1a", "n9", "n10", "n010"]);
        assert_eq!(natural_cmp("a", "a"), Ordering::Equal);
    }

    #[test]
    fn explicit_ranks_are_checked() {
        let w = explicit("b,a,c", 1).unwrap();
        assert_eq!(w.hosts, ["a", "b", "c"]);
        assert_eq!(w.hosts[w.rank], "b");
        assert_eq!(w.size(), 3);
        let e = explicit("a,b,c", 3).unwrap_err().to_string();
        assert!(
            e.contains("rank 3 is out of range") && e.contains("0..=2"),
            "{e}"
        );
    }

    #[test]
    fn without_rank_the_hostname_finds_it() {
        assert_eq!(by_hostname("n[1-3]", "n2").unwrap().rank, 1);
        assert_eq!(by_hostname("n[1-3]", "n3.cluster.example").unwrap().rank, 2);
        assert_eq!(
            by_hostname("n3.cluster.example,n1", "n3.cluster.example")
                .unwrap()
                .rank,
            1
        );
        let e = by_hostname("n[1-3]", "login1").unwrap_err().to_string();
        assert!(
            e.contains("\"login1\", is not in --hosts") && e.contains("--rank"),
            "{e}"
        );
    }

    #[test]
    fn slurm_rank_is_the_nodes_place_in_the_sorted_list() {
        // Slurm numbered this task 0, but node03 is the third node in rank order.
        let e = env(&[
            ("SLURM_STEP_NODELIST", "node[03,01-02]"),
            ("SLURM_JOB_NODELIST", "node[01-09]"),
            ("SLURM_NTASKS", "3"),
            ("SLURM_PROCID", "0"),
            ("SLURMD_NODENAME", "node03"),
        ]);
        let w = from_slurm(&e).unwrap();
        assert_eq!(w.hosts, ["node01", "node02", "node03"]);
        assert_eq!(w.rank, 2);
        // Without the node's name, the task number is the rank.
        let e = env(&[
            ("SLURM_JOB_NODELIST", "node[1-2]"),
            ("SLURM_NTASKS", "2"),
            ("SLURM_PROCID", "1"),
        ]);
        assert_eq!(from_slurm(&e).unwrap().rank, 1);
    }

    #[test]
    fn slurm_errors_name_what_was_wrong() {
        let cases: &[(&[(&str, &str)], &str)] = &[
            (
                &[("SLURM_NTASKS", "2"), ("SLURM_PROCID", "0")],
                "SLURM_STEP_NODELIST nor SLURM_JOB_NODELIST",
            ),
            (
                &[("SLURM_JOB_NODELIST", "n[1-2]"), ("SLURM_PROCID", "0")],
                "SLURM_NTASKS is not set",
            ),
            (
                &[("SLURM_JOB_NODELIST", "n[1-2]"), ("SLURM_NTASKS", "2")],
                "SLURM_PROCID is not set",
            ),
            (
                &[
                    ("SLURM_JOB_NODELIST", "n[1-2]"),
                    ("SLURM_NTASKS", "two"),
                    ("SLURM_PROCID", "0"),
                ],
                "SLURM_NTASKS=\"two\" is not a number",
            ),
            (
                &[
                    ("SLURM_JOB_NODELIST", "n[1-2]"),
                    ("SLURM_NTASKS", "4"),
                    ("SLURM_PROCID", "0"),
                ],
                "world size mismatch: SLURM_NTASKS=4",
            ),
            (
                &[
                    ("SLURM_JOB_NODELIST", "n[1-2]"),
                    ("SLURM_NTASKS", "2"),
                    ("SLURM_PROCID", "2"),
                ],
                "rank 2 is out of range",
            ),
            (
                &[
                    ("SLURM_JOB_NODELIST", "n[1-2]"),
                    ("SLURM_NTASKS", "2"),
                    ("SLURM_PROCID", "0"),
                    ("SLURMD_NODENAME", "n7"),
                ],
                "\"n7\" (SLURMD_NODENAME), is not in the node list",
            ),
        ];
        for (vars, want) in cases {
            let e = from_slurm(&env(vars)).unwrap_err().to_string();
            assert!(e.contains(want), "{vars:?}: {e}");
        }
    }
}
