//! What the rails phase of `fabric-e2e` must show: one complete matrix per rail, each rail's
//! pairs from its own device and addresses (see [`super::judge`] for the other phases).

use rdma_proto::events::client::Event;
use rdma_proto::events::fabric::{Cell, Report};

use crate::scenario::exit::{ExitKind, Speaks};
use crate::scenario::transcript::Role;

/// Rails of every guest in the rails phase (`rxe0` on eth0, `rxe1` on eth1).
pub const RAILS: usize = 2;

/// The status of the cell (writer row, target column): pass, slow, fail, missing. Every
/// phase's judge reads it.
pub fn status(report: &Report, w: usize, t: usize) -> &'static str {
    match report.matrix.get(w).and_then(|row| row.get(t)) {
        Some(Some(Cell::Pass { .. })) => "pass",
        Some(Some(Cell::Slow { .. })) => "slow",
        Some(Some(Cell::Fail { .. })) => "fail",
        _ => "missing",
    }
}

/// Judges the rails phase: one report per rail, in rail order, each of [`RAILS`]; every pair
/// of each verified (pass, or slow by the guests' noise: still a result over that rail);
/// every writer on rail `k` wrote from `rxe{k}`, the device of eth`k`, which it found itself;
/// the clients' and the report's exit 0.
pub fn check(
    reports: &[Report],
    srun: ExitKind,
    report: ExitKind,
    n: usize,
) -> std::result::Result<String, String> {
    let mut wrong = Vec::new();
    if reports.len() != RAILS {
        wrong.push(format!(
            "{} rail report(s), expected {RAILS}",
            reports.len()
        ));
    }
    let mut shown = Vec::new();
    for (k, r) in reports.iter().enumerate() {
        let Some(rail) = &r.rail else {
            wrong.push(format!("report {k} is not a rail's"));
            continue;
        };
        if (rail.index, rail.rails) != (k, RAILS) {
            wrong.push(format!(
                "report {k} is of rail {} of {}, expected {k} of {RAILS}",
                rail.index, rail.rails
            ));
        }
        let want = format!("rxe{k}");
        for w in 0..n {
            let got = rail.devices.get(w).cloned().flatten();
            if got.as_deref() != Some(want.as_str()) {
                wrong.push(format!(
                    "rail {k}: rank {w} wrote from {got:?}, expected {want}"
                ));
            }
            for t in (0..n).filter(|&t| t != w) {
                let got = status(r, w, t);
                if !matches!(got, "pass" | "slow") {
                    wrong.push(format!("rail {k}: pair {w}->{t}: {got}, expected verified"));
                }
            }
        }
        shown.push(format!(
            "rail {k} ({want}): {} pass, {} slow",
            r.passed, r.slow
        ));
    }
    if report != ExitKind::Success || srun != ExitKind::Success {
        wrong.push(format!(
            "srun {srun}, report {report}, expected exit 0 and 0"
        ));
    }
    if wrong.is_empty() {
        Ok(format!("{}; srun exit 0, report exit 0", shown.join("; ")))
    } else {
        Err(wrong.join("; "))
    }
}

/// The rails phase's own lines (`srun --label`'s `N: ` before each): every pair once on each
/// rail, rail `k`'s from the writer's `rxe{k}` and its address on eth`k` (`10.0.k.W`) to the
/// target's (`10.0.k.T`): the connection, and so the server's device, was on that rail too.
pub fn check_lines(jsonl: &str, n: usize) -> std::result::Result<String, String> {
    // srun's labels off, the lines are read as every step's output is.
    let unlabelled: Vec<&str> = jsonl
        .lines()
        .map(|line| match line.split_once(": ") {
            Some((label, rest)) if label.trim().bytes().all(|b| b.is_ascii_digit()) => rest,
            _ => line,
        })
        .collect();
    let role = Role::of_stdout("rails", &unlabelled.join("\n"), Speaks::Client);
    crate::scenario::judge::only_events(&role)?;
    let mut seen = std::collections::BTreeSet::new();
    for event in &role.client {
        let p = match event {
            Event::FabricPair(p) => p,
            other => return Err(format!("not a fabric_pair: {other:?}")),
        };
        let Some(r) = &p.rail else {
            return Err(format!("pair {}->{} has no rail", p.writer, p.target));
        };
        let k = r.index;
        let want = (
            Some(format!("rxe{k}")),
            Some(format!("10.0.{k}.{}", p.writer + 1)),
            Some(format!("10.0.{k}.{}", p.target + 1)),
        );
        let got = (
            r.device.clone(),
            r.addr.map(|a| a.to_string()),
            r.target_addr.map(|a| a.to_string()),
        );
        if got != want {
            return Err(format!(
                "rail {k} pair {}->{}: device, address, target address {got:?}, expected {want:?}",
                p.writer, p.target
            ));
        }
        seen.insert((k, p.writer, p.target));
    }
    let want = RAILS * n * (n - 1);
    if seen.len() != want {
        return Err(format!(
            "{} rail pairs in the lines, expected {want}",
            seen.len()
        ));
    }
    Ok(format!(
        "all {want} rail pairs from rxe<k> at 10.0.<k>.W to 10.0.<k>.T"
    ))
}
#[cfg(test)]
mod tests {
    use super::super::judge::tests::{pass, report};
    use super::*;
    use rdma_proto::events::fabric::Cell;

    /// Rail `k`'s report, every writer on `rxe{k}` unless `device` says otherwise.
    fn rail(k: usize, device: impl Fn(usize) -> &'static str) -> Report {
        Report {
            rail: Some(rdma_proto::events::fabric::RailMatrix {
                index: k,
                rails: RAILS,
                devices: (0..3).map(|w| Some(device(w).to_owned())).collect(),
            }),
            ..report(|_, _| pass(), &[])
        }
    }

    #[test]
    fn rails_need_both_matrices_complete_and_each_rail_on_its_own_device() {
        let good = [rail(0, |_| "rxe0"), rail(1, |_| "rxe1")];
        check(&good, ExitKind::Success, ExitKind::Success, 3).unwrap();
        // Rail 1 of node2 ran over the first device: named.
        let wrong = [
            rail(0, |_| "rxe0"),
            rail(1, |w| if w == 1 { "rxe0" } else { "rxe1" }),
        ];
        let e = check(&wrong, ExitKind::Success, ExitKind::Success, 3).unwrap_err();
        assert_eq!(e, "rail 1: rank 1 wrote from Some(\"rxe0\"), expected rxe1");
        // One rail only, or a pair missing on rail 1, or a one-rail report.
        assert!(check(&good[..1], ExitKind::Success, ExitKind::Success, 3).is_err());
        let mut holed = good.clone();
        holed[1].matrix[2][0] = Some(Cell::Missing);
        let e = check(&holed, ExitKind::Success, ExitKind::Success, 3).unwrap_err();
        assert_eq!(e, "rail 1: pair 2->0: missing, expected verified");
        let plain = [report(|_, _| pass(), &[]), rail(1, |_| "rxe1")];
        assert!(
            check(&plain, ExitKind::Success, ExitKind::Success, 3)
                .unwrap_err()
                .contains("not a rail's")
        );
        assert!(check(&good, ExitKind::Status(8), ExitKind::Success, 3).is_err());
    }

    #[test]
    fn each_rail_line_must_be_on_its_rail_s_device_and_addresses() {
        // A runner's line (its absent options are `None`), on rail `k` from `dev`.
        let line = |w: usize, t: usize, k: usize, dev: &str| {
            let json = serde_json::json!({
                "type": "fabric_pair", "round": 0, "world": 3, "verified": true,
                "writer": w, "writer_host": format!("node{}", w + 1),
                "target": t, "target_host": format!("node{}", t + 1), "waited_ms": 0,
                "rail": {
                    "index": k, "rails": RAILS, "device": dev,
                    "addr": format!("10.0.{k}.{}", w + 1),
                    "target_addr": format!("10.0.{k}.{}", t + 1),
                },
            });
            format!("{w}: {json}\n")
        };
        let mut all = String::new();
        for w in 0..3 {
            for t in (0..3).filter(|&t| t != w) {
                for k in 0..RAILS {
                    all.push_str(&line(w, t, k, &format!("rxe{k}")));
                }
            }
        }
        check_lines(&all, 3).unwrap();
        // One pair short; one rail-1 pair from rxe0.
        let short: String = all.lines().skip(1).map(|l| format!("{l}\n")).collect();
        assert!(
            check_lines(&short, 3)
                .unwrap_err()
                .contains("11 rail pairs")
        );
        let wrong = all.replacen(&line(0, 1, 1, "rxe1"), &line(0, 1, 1, "rxe0"), 1);
        let e = check_lines(&wrong, 3).unwrap_err();
        assert!(e.starts_with("rail 1 pair 0->1: device"), "{e}");
    }
}
