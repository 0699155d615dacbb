//! Which ToR switch each node hangs off: read from what a fleet already has, Slurm's
//! `topology.conf` (the tree plugin's leaf lines, `SwitchName=s0 Nodes=node[01-40]`; lines with
//! only `Switches=` are the levels above and name no node), or a plain file of `NODE SWITCH`
//! lines. `#` starts a comment in both; the format is told by the first line: a Slurm one has
//! `KEY=VALUE` words.
//!
//! [`Tors::place`] gives every node of the mesh its ToR: a node in two leaves, or in none, is an
//! error naming it (a file may list more nodes than the mesh runs on: the others are left out).

use crate::fabric::ranks;

/// A topology file that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopologyError {
    #[error(
        "topology line {line}: {why} (write `SwitchName=NAME Nodes=HOSTLIST` as in Slurm's \
         topology.conf, or `NODE SWITCH`)"
    )]
    Line { line: usize, why: String },
    #[error("the topology names no switch with nodes: give one leaf switch per ToR")]
    Empty,
    #[error(
        "node {node:?} is under two switches, {first:?} and {second:?}: a node hangs off one ToR"
    )]
    TwoSwitches {
        node: String,
        first: String,
        second: String,
    },
    #[error(
        "{} of the mesh's nodes are in no switch of the topology ({}): add them to their ToR's line",
        .0.len(), .0.join(", ")
    )]
    Unplaced(Vec<String>),
}

/// Reads a topology: each leaf switch with its nodes, in the file's order.
///
/// # Errors
/// A line that is neither format, a bad hostlist, no leaf switch at all.
pub fn parse(text: &str) -> Result<Vec<(String, Vec<String>)>, TopologyError> {
    let lines: Vec<(usize, &str)> = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.split('#').next().unwrap_or("").trim()))
        .filter(|(_, l)| !l.is_empty())
        .collect();
    let slurm = lines.first().is_some_and(|(_, l)| l.contains('='));
    let mut leaves: Vec<(String, Vec<String>)> = Vec::new();
    for (line, text) in lines {
        let bad = |why: String| TopologyError::Line { line, why };
        if slurm {
            let (mut switch, mut nodes) = (None, None);
            for word in text.split_whitespace() {
                let (key, value) = word
                    .split_once('=')
                    .ok_or_else(|| bad(format!("{word:?} is not KEY=VALUE")))?;
                // Slurm's keys are case-insensitive.
                match key.to_ascii_lowercase().as_str() {
                    "switchname" => switch = Some(value),
                    "nodes" => nodes = Some(value),
                    _ => {}
                }
            }
            let switch = switch.ok_or_else(|| bad("no SwitchName=".into()))?;
            if let Some(nodes) = nodes {
                let hosts = ranks::expand(nodes).map_err(|e| bad(e.to_string()))?;
                leaves.push((switch.to_owned(), hosts));
            }
        } else {
            let words: Vec<&str> = text.split_whitespace().collect();
            let [node, switch] = words[..] else {
                return Err(bad(format!("{text:?} is not two words")));
            };
            match leaves.iter_mut().find(|(s, _)| s == switch) {
                Some((_, nodes)) => nodes.push(node.to_owned()),
                None => leaves.push((switch.to_owned(), vec![node.to_owned()])),
            }
        }
    }
    if leaves.is_empty() {
        return Err(TopologyError::Empty);
    }
    Ok(leaves)
}

/// The ToR of every node of a mesh run without a topology (the metrics' `tor` and `peer_tor`).
pub const ONE_TOR: &str = "all";

/// The mesh's nodes grouped by ToR.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tors {
    /// Each ToR's name, in the topology's order (those with a node of the mesh).
    pub names: Vec<String>,
    /// Each node's ToR (an index into `names`), by rank.
    pub of: Vec<usize>,
}

impl Tors {
    /// Places each of `hosts` (the mesh, by rank) under its leaf switch.
    ///
    /// # Errors
    /// A node under two switches, or under none.
    pub fn place(
        hosts: &[String],
        leaves: &[(String, Vec<String>)],
    ) -> Result<Self, TopologyError> {
        let mut under: std::collections::HashMap<&str, &str> = std::collections::HashMap::new();
        for (switch, nodes) in leaves {
            for node in nodes {
                if let Some(first) = under.insert(node, switch)
                    && first != switch
                {
                    return Err(TopologyError::TwoSwitches {
                        node: node.clone(),
                        first: first.to_owned(),
                        second: switch.clone(),
                    });
                }
            }
        }
        let unplaced: Vec<String> = hosts
            .iter()
            .filter(|h| !under.contains_key(h.as_str()))
            .cloned()
            .collect();
        if !unplaced.is_empty() {
            return Err(TopologyError::Unplaced(unplaced));
        }
        let names: Vec<String> = leaves
            .iter()
            .map(|(s, _)| s)
            .filter(|s| {
                hosts
                    .iter()
                    .any(|h| under.get(h.as_str()) == Some(&s.as_str()))
            })
            .cloned()
            .collect();
        let of = hosts
            .iter()
            .map(|h| {
                let s = under.get(h.as_str()).copied().unwrap_or_default();
                names.iter().position(|n| n == s).unwrap_or(0)
            })
            .collect();
        Ok(Tors { names, of })
    }

    /// All in one ToR: the mesh without a topology.
    #[must_use]
    pub fn one(n: usize) -> Self {
        Tors {
            names: vec![ONE_TOR.to_owned()],
            of: vec![0; n],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(list: &str) -> Vec<String> {
        ranks::expand(list).expect("a hostlist")
    }

    #[test]
    fn slurm_leaves_and_plain_lines_place_the_same_nodes() {
        let slurm = "# the tree plugin\nSwitchName=tor1 Nodes=n[1-2] LinkSpeed=100\n\
                     switchname=tor2 nodes=n[3-4]\nSwitchName=spine Switches=tor[1-2]\n";
        let plain = "n1 tor1\nn2 tor1 # rack 1\n\nn3 tor2\nn4 tor2\nn9 tor3\n";
        let mesh = hosts("n[1-4]");
        for text in [slurm, plain] {
            let tors = Tors::place(&mesh, &parse(text).expect("parses")).expect("placed");
            assert_eq!(tors.names, ["tor1", "tor2"]);
            assert_eq!(tors.of, [0, 0, 1, 1]);
        }
    }

    #[test]
    fn each_bad_topology_is_named() {
        let line = |text| match parse(text) {
            Err(TopologyError::Line { line, .. }) => line,
            other => panic!("{text:?}: {other:?}"),
        };
        assert_eq!(line("SwitchName=a Nodes=n1\nNodes=n2"), 2);
        assert_eq!(line("SwitchName=a Nodes=n[1-"), 1);
        assert_eq!(line("n1 a\nn2"), 2);
        assert_eq!(line("SwitchName=a nodes"), 1);
        assert_eq!(parse("# nothing\n"), Err(TopologyError::Empty));
        assert_eq!(
            parse("SwitchName=s Switches=a,b"),
            Err(TopologyError::Empty)
        );
        let twice = parse("SwitchName=a Nodes=n[1-2]\nSwitchName=b Nodes=n2").expect("parses");
        assert!(matches!(
            Tors::place(&hosts("n[1-2]"), &twice),
            Err(TopologyError::TwoSwitches { node, .. }) if node == "n2"
        ));
        let short = parse("n1 a").expect("parses");
        let e = Tors::place(&hosts("n[1-3]"), &short).expect_err("n2, n3 unplaced");
        assert_eq!(e, TopologyError::Unplaced(vec!["n2".into(), "n3".into()]));
        assert!(e.to_string().contains("n2, n3"), "{e}");
    }
}
