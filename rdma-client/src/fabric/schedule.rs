//! Who writes to whom in which round: the circle method (round-robin tournament), both
//! directions of every pair in the same round.
//!
//! For `n` nodes, let `m = n` when `n` is even and `m = n + 1` when it is odd (one extra seat,
//! the *bye*). Seat `m - 1` stays fixed and the other `m - 1` seats turn one step per round;
//! round `r` pairs seat `r` with the fixed seat and seats `r + k` with `r - k` (mod `m - 1`)
//! for `k = 1 .. m/2 - 1`. That gives `m - 1` rounds of `m / 2` disjoint unordered pairs, and
//! every unordered pair meets in exactly one round (a 1-factorization of the complete graph).
//!
//! Each pair `{a, b}` runs **both ways in its round**: `a` writes to `b` and `b` writes to `a`.
//! So in a round every node writes to exactly one partner and is written by that same partner,
//! nobody is twice a writer or twice a target, and every ordered pair `(writer, target)` runs
//! exactly once over the whole schedule. The number of rounds is therefore
//! **`n - 1` for even `n` and `n` for odd `n`** (each node sits out one round on the bye).

/// One directed write: `writer` RDMA-Writes into `target`'s server. Ranks, `0..n`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Step {
    /// Round number, `0..rounds(n)`.
    pub round: usize,
    /// The rank that writes.
    pub writer: usize,
    /// The rank written to.
    pub target: usize,
}

/// How many rounds the schedule for `n` nodes has: `n - 1` for even `n`, `n` for odd `n`
/// (`0` for fewer than two nodes: nothing to pair).
#[must_use]
pub fn rounds(n: usize) -> usize {
    match n {
        0 | 1 => 0,
        _ if n % 2 == 0 => n - 1,
        _ => n,
    }
}

/// The unordered pairs of round `round` (each as `(low, high)`, bye left out), for `n` nodes.
/// Empty when `round >= rounds(n)`.
#[must_use]
pub fn pairs(n: usize, round: usize) -> Vec<(usize, usize)> {
    if round >= rounds(n) {
        return Vec::new();
    }
    let m = n + n % 2; // seats, with the bye when n is odd
    let turning = m - 1; // seats 0..m-1 turn; seat m-1 is fixed
    let mut out = Vec::with_capacity(m / 2);
    let mut push = |a: usize, b: usize| {
        // Seat n (only exists when n is odd) is the bye.
        if a < n && b < n {
            out.push((a.min(b), a.max(b)));
        }
    };
    push(round, m - 1);
    for k in 1..m / 2 {
        push((round + k) % turning, (round + turning - k) % turning);
    }
    out
}

/// This rank's partner in `round`: `None` on its bye (or past the last round).
#[must_use]
pub fn partner(n: usize, round: usize, rank: usize) -> Option<usize> {
    pairs(n, round).into_iter().find_map(|(a, b)| {
        if a == rank {
            Some(b)
        } else if b == rank {
            Some(a)
        } else {
            None
        }
    })
}

/// The whole schedule, round by round, each pair both ways (low rank's write first).
#[must_use]
pub fn plan(n: usize) -> Vec<Step> {
    (0..rounds(n))
        .flat_map(|round| {
            pairs(n, round).into_iter().flat_map(move |(a, b)| {
                [
                    Step {
                        round,
                        writer: a,
                        target: b,
                    },
                    Step {
                        round,
                        writer: b,
                        target: a,
                    },
                ]
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashSet;

    /// Every property the doc promises, for one `n` (bitmaps, not hash sets: n = 1024 has a
    /// million steps, and this runs for every n up to it).
    fn check(n: usize) {
        let steps = plan(n);
        assert_eq!(rounds(n), if n % 2 == 0 { n - 1 } else { n }, "n = {n}");
        // Every ordered pair of distinct ranks exactly once.
        assert_eq!(steps.len(), n * (n - 1), "n = {n}");
        let mut seen = vec![false; n * n];
        for s in &steps {
            assert!(
                s.writer != s.target && s.writer < n && s.target < n,
                "{s:?}"
            );
            assert!(s.round < rounds(n), "{s:?}");
            assert!(!seen[s.writer * n + s.target], "{s:?} twice, n = {n}");
            seen[s.writer * n + s.target] = true;
        }
        // Round by round (plan() lists them in order).
        let mut by_round = vec![Vec::new(); rounds(n)];
        for s in &steps {
            by_round[s.round].push(*s);
        }
        for (round, here) in by_round.iter().enumerate() {
            let mut target_of = vec![None; n];
            let mut targeted = vec![false; n];
            for s in here {
                assert!(
                    target_of[s.writer].is_none(),
                    "writer twice: {s:?}, n = {n}"
                );
                assert!(!targeted[s.target], "target twice: {s:?}, n = {n}");
                target_of[s.writer] = Some(s.target);
                targeted[s.target] = true;
            }
            // Everyone plays, except exactly one bye when n is odd.
            assert_eq!(here.len(), n - n % 2, "round {round}, n = {n}");
            // Both directions of a pair share the round: a node's target is its writer.
            for s in here {
                assert_eq!(target_of[s.target], Some(s.writer), "{s:?}, n = {n}");
            }
        }
        assert!(pairs(n, rounds(n)).is_empty());
    }

    /// Every n up to 128, and the largest two; the rest of 2..=1024 by the property below
    /// (all of them take about a minute in a debug build).
    #[test]
    fn every_small_n_and_the_largest() {
        for n in (2..=128).chain([1023, 1024]) {
            check(n);
        }
    }

    #[test]
    fn small_schedules_are_as_written_in_the_doc() {
        assert_eq!(rounds(0), 0);
        assert_eq!(rounds(1), 0);
        assert!(plan(1).is_empty());
        assert_eq!(pairs(2, 0), vec![(0, 1)]);
        assert_eq!(rounds(3), 3);
        // Three nodes: one pair and one bye per round.
        let byes: Vec<usize> = (0..3)
            .map(|r| (0..3).find(|&k| partner(3, r, k).is_none()).unwrap())
            .collect();
        let mut sorted = byes.clone();
        sorted.sort_unstable();
        assert_eq!(
            sorted,
            vec![0, 1, 2],
            "each node sits out exactly one round"
        );
        assert_eq!(pairs(4, 0), vec![(0, 3), (1, 2)]);
    }

    proptest! {
        // A schedule of 1024 nodes has a million steps: fewer cases than the default 256.
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// The whole check for any n in 2..=1024.
        #[test]
        fn any_n_up_to_1024(n in 2usize..=1024) {
            check(n);
        }
    }

    proptest! {
        /// Any rank's partners over the rounds are every other rank once (odd n: one bye).
        #[test]
        fn each_rank_meets_everyone_once(n in 2usize..=1024, pick in any::<usize>()) {
            let rank = pick % n;
            let partners: Vec<usize> =
                (0..rounds(n)).filter_map(|r| partner(n, r, rank)).collect();
            let unique: HashSet<usize> = partners.iter().copied().collect();
            prop_assert_eq!(partners.len(), n - 1);
            prop_assert_eq!(unique.len(), n - 1);
            prop_assert!(!unique.contains(&rank));
            let byes = (0..rounds(n)).filter(|&r| partner(n, r, rank).is_none()).count();
            prop_assert_eq!(byes, n % 2);
        }
    }
}
