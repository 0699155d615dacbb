//! `fabric report` trusts no line: each `fabric_pair` event is checked field by field, and
//! against every line before it (one world, the same name for a rank everywhere), before the
//! report allocates anything by its numbers. A line that fails is named (input and line number)
//! and the report is a usage error (exit 2).

use super::pair::{MAX_WORLD, PairResult};
use super::schedule;
use std::collections::HashMap;

/// Longest node name accepted (a DNS name is at most 253 characters).
pub const MAX_HOST: usize = 255;
/// Most rails a line may claim (`--rails N` takes at most this).
pub const MAX_RAILS: usize = 64;
/// Longest `error` / `error_kind` text accepted, in bytes.
pub const MAX_ERROR: usize = 16 * 1024;

/// Where a line came from.
#[derive(Clone, Debug)]
struct Origin {
    name: String,
    line: usize,
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} line {}", self.name, self.line)
    }
}

/// What the lines read so far agree on.
#[derive(Debug, Default)]
pub struct Consistency {
    world: Option<(usize, Origin)>,
    hosts: HashMap<usize, (String, Origin)>,
    ranks: HashMap<String, (usize, Origin)>,
}

impl Consistency {
    /// Checks `p`, read from line `line` of `name`; `Err` is the reason, for the caller to put
    /// after the line's name.
    ///
    /// # Errors
    /// A field out of range, or a world or host name other lines contradict.
    pub fn check(&mut self, p: &PairResult, name: &str, line: usize) -> Result<(), String> {
        let here = Origin {
            name: name.to_owned(),
            line,
        };
        fields(p)?;
        match &self.world {
            Some((n, first)) if *n != p.world => {
                return Err(format!(
                    "`world` is {} but {first} says {n}: give the lines of one fabric check only",
                    p.world
                ));
            }
            Some(_) => {}
            None => self.world = Some((p.world, here.clone())),
        }
        for (rank, host) in [(p.writer, &p.writer_host), (p.target, &p.target_host)] {
            match self.hosts.get(&rank) {
                Some((known, first)) if known != host => {
                    return Err(format!(
                        "rank {rank} is named {:?} but {first} names it {:?}: give the lines of one fabric check only",
                        rdma_proto::printable(host),
                        rdma_proto::printable(known)
                    ));
                }
                Some(_) => {}
                None => {
                    self.hosts.insert(rank, (host.clone(), here.clone()));
                }
            }
            match self.ranks.get(host) {
                Some((known, first)) if *known != rank => {
                    return Err(format!(
                        "{:?} is rank {rank} but {first} makes it rank {known}: give the lines of one fabric check only",
                        rdma_proto::printable(host)
                    ));
                }
                Some(_) => {}
                None => {
                    self.ranks.insert(host.clone(), (rank, here.clone()));
                }
            }
        }
        Ok(())
    }
}

/// The checks one line passes on its own.
fn fields(p: &PairResult) -> Result<(), String> {
    if !(2..=MAX_WORLD).contains(&p.world) {
        return Err(format!(
            "`world` {} is out of range 2..={MAX_WORLD} (the largest fabric check the report merges)",
            p.world
        ));
    }
    for (field, rank) in [("writer", p.writer), ("target", p.target)] {
        if rank >= p.world {
            return Err(format!(
                "`{field}` {rank} is not a rank of a world of {} (0..={})",
                p.world,
                p.world - 1
            ));
        }
    }
    if p.writer == p.target {
        return Err(format!(
            "`writer` and `target` are both {}: a node does not test itself",
            p.writer
        ));
    }
    let rounds = schedule::rounds(p.world);
    if p.round >= rounds {
        return Err(format!(
            "`round` {} is out of range 0..={} for a world of {}",
            p.round,
            rounds - 1,
            p.world
        ));
    }
    for (field, host) in [
        ("writer_host", &p.writer_host),
        ("target_host", &p.target_host),
    ] {
        if host.is_empty() || host.len() > MAX_HOST || host.chars().any(char::is_control) {
            return Err(format!(
                "`{field}` {:?} is not a node name (1..={MAX_HOST} bytes, no control characters)",
                rdma_proto::printable(&host.chars().take(40).collect::<String>())
            ));
        }
    }
    if let Some(r) = &p.rail {
        if r.rails > MAX_RAILS || (r.rails > 0 && r.index >= r.rails) {
            return Err(format!(
                "`rail` {} of {} is out of range (at most {MAX_RAILS} rails, index below the count)",
                r.index, r.rails
            ));
        }
        if r.device
            .as_ref()
            .is_some_and(|d| d.is_empty() || d.len() > MAX_HOST || d.chars().any(char::is_control))
        {
            return Err(
                "`rail.device` is not a device name (1..=255 bytes, no control characters)".into(),
            );
        }
    }
    // `error_kind` is typed (an exit kind): only the free text has a length to bound.
    if p.error.as_ref().is_some_and(|t| t.len() > MAX_ERROR) {
        return Err(format!("`error` is longer than {MAX_ERROR} bytes"));
    }
    if p.verified && (p.error_kind.is_some() || p.error.is_some()) {
        return Err(
            "a verified pair carries an `error`: the line was not written by the runner".into(),
        );
    }
    for (field, value) in [
        ("write_us", p.write_us),
        ("lat_us", p.lat_us),
        ("bw_mbs", p.bw_mbs),
    ] {
        if let Some(v) = value
            && !(v.is_finite() && v >= 0.0)
        {
            return Err(format!(
                "`{field}` {v} is not a time or rate (a finite number >= 0)"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::report::tests::ok;
    use super::*;

    fn check(lines: &[PairResult]) -> Result<(), String> {
        let mut c = Consistency::default();
        for (i, p) in lines.iter().enumerate() {
            c.check(p, "in", i + 1)?;
        }
        Ok(())
    }

    fn rail(index: usize, rails: usize, device: &str) -> rdma_proto::events::fabric::RailOf {
        rdma_proto::events::fabric::RailOf {
            index,
            rails,
            device: Some(device.into()),
            addr: None,
            target_addr: None,
        }
    }

    #[test]
    fn a_runners_lines_pass() {
        let lines: Vec<PairResult> = (0..3)
            .flat_map(|w| {
                (0..3)
                    .filter(move |&t| t != w)
                    .map(move |t| ok(w, t, 10.0, None))
            })
            .collect();
        check(&lines).unwrap();
    }

    #[test]
    fn every_bad_field_is_named() {
        type Spoil = fn(&mut PairResult);
        let bad: [(&str, Spoil); 15] = [
            ("`world` 200000", |p| p.world = 200_000),
            ("`world` 1", |p| p.world = 1),
            ("`writer` 3", |p| p.writer = 3),
            ("`target` 7", |p| p.target = 7),
            ("both 0", |p| p.target = 0),
            ("`round` 3", |p| p.round = 3),
            ("`writer_host`", |p| p.writer_host = String::new()),
            ("`target_host`", |p| p.target_host = "a\nb".into()),
            ("`target_host`", |p| {
                p.target_host = "x".repeat(MAX_HOST + 1)
            }),
            ("`error`", |p| p.error = Some("x".into())),
            ("`lat_us` -1", |p| p.lat_us = Some(-1.0)),
            ("`bw_mbs` inf", |p| p.bw_mbs = Some(f64::INFINITY)),
            ("`rail` 2 of 2", |p| p.rail = Some(rail(2, 2, "rxe1"))),
            ("`rail` 0 of 65", |p| p.rail = Some(rail(0, 65, "rxe1"))),
            ("`rail.device`", |p| p.rail = Some(rail(0, 2, "rxe\u{1b}"))),
        ];
        for (want, spoil) in bad {
            let mut p = ok(0, 1, 10.0, None);
            spoil(&mut p);
            let err = check(&[p]).unwrap_err();
            assert!(err.contains(want), "{want}: {err}");
        }
    }

    #[test]
    fn lines_that_disagree_are_named_with_the_first_they_contradict() {
        let mut other_world = ok(1, 0, 10.0, None);
        other_world.world = 4;
        let err = check(&[ok(0, 1, 10.0, None), other_world]).unwrap_err();
        assert!(err.contains("`world` is 4 but in line 1 says 3"), "{err}");
        let mut renamed = ok(2, 0, 10.0, None);
        renamed.target_host = "impostor".into();
        let err = check(&[ok(0, 1, 10.0, None), ok(1, 2, 10.0, None), renamed]).unwrap_err();
        assert!(
            err.contains("rank 0 is named \"impostor\" but in line 1 names it \"node1\""),
            "{err}"
        );
        let mut twice = ok(2, 0, 10.0, None);
        twice.writer_host = "node1".into();
        twice.target_host = "node3".into();
        let err = check(&[ok(0, 1, 10.0, None), twice]).unwrap_err();
        assert!(
            err.contains("\"node1\" is rank 2 but in line 1 makes it rank 0"),
            "{err}"
        );
    }
}
