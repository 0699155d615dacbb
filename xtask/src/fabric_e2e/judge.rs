//! What each phase of `fabric-e2e` must show, judged from `rdma-client fabric report
//! --json` (the merged matrix), the exit code of the `srun` of the clients and of the report.

use std::path::Path;

use super::rails::status;
use crate::scenario::exit::{ExitKind, Speaks};
use crate::scenario::transcript::Role;
use color_eyre::eyre::{Result, WrapErr as _, bail, eyre};
use rdma_proto::events::client::Event;
use rdma_proto::events::fabric::{Cell, Report};

/// Outlier thresholds for three TCG guests on two host cores: a healthy pair's latency
/// varied up to eightfold within one run (vCPUs wait for host cores), while the delayed
/// link adds tens of milliseconds to a ~1 ms exchange (seen: 22 ms against 0.26-0.73 ms). The defaults (2, 0.5) suit hardware.
pub const THRESHOLDS: &[&str] = &["--lat-factor", "20", "--bw-fraction", "0.1"];

/// The phases, in the order node1 runs them.
pub const PHASES: [Phase; 4] = [Phase::Healthy, Phase::Rails, Phase::Slow, Phase::Down];

/// One run of the fabric check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Nothing wrong: every pair verified, nothing flagged, exit 0.
    Healthy,
    /// `--rails auto` on the two-NIC guests, no device flags: one complete matrix per rail,
    /// rail `k`'s pairs from every writer's `rxe{k}`, exit 0.
    Rails,
    /// The last node's link delayed: exactly its pairs flagged slow, each still slow when
    /// re-tested alone (the delay still on), none left to re-test; it is the suspect.
    Slow,
    /// The last node's rxe device gone: its pairs fail with a reason, the others pass, non-zero exit.
    Down,
}

impl Phase {
    pub fn name(self) -> &'static str {
        match self {
            Phase::Healthy => "healthy",
            Phase::Rails => "rails",
            Phase::Slow => "slow",
            Phase::Down => "down",
        }
    }
}

/// Merges and judges every phase in `out` (left there by the guests); writes each phase's
/// human report (`PHASE.txt`), heat maps (`PHASE.png`, `PHASE.svg`) and JSON report next to
/// it. Returns one verdict line per phase, or fails naming every phase that is wrong.
pub fn all(client: &str, out: &Path, n: usize) -> Result<Vec<String>> {
    let mut verdicts = Vec::new();
    let mut wrong = Vec::new();
    for phase in PHASES {
        let name = phase.name();
        let input = out.join(format!("{name}.jsonl"));
        // srun's own status (the script wrote it): not one of ours, read as a number.
        let srun_rc: Option<i32> = std::fs::read_to_string(out.join(format!("{name}.rc")))
            .ok()
            .and_then(|s| s.trim().parse().ok());
        let srun = ExitKind::of(srun_rc, false, Speaks::Other);
        let png = out.join(format!("{name}.png"));
        let svg = out.join(format!("{name}.svg"));
        let (png, svg) = (super::utf8(&png)?, super::utf8(&svg)?);
        let report = super::report(
            client,
            &input,
            &[
                THRESHOLDS,
                &["--json", "--heatmap", &png, "--heatmap", &svg],
            ]
            .concat(),
        )?;
        let human = super::report(client, &input, THRESHOLDS)?.stdout;
        std::fs::write(out.join(format!("{name}.txt")), &human)?;
        std::fs::write(out.join(format!("{name}.report.json")), &report.stdout)?;
        let reports =
            parse(&report).wrap_err_with(|| format!("{name}: report stderr: {}", report.stderr))?;
        let verdict = if phase == Phase::Rails {
            let lines = std::fs::read_to_string(&input)
                .wrap_err_with(|| format!("reading {}", input.display()))?;
            super::rails::check(&reports, srun, report.exit, n)
                .and_then(|v| Ok(format!("{v}; {}", super::rails::check_lines(&lines, n)?)))
        } else {
            match reports.as_slice() {
                [r] => check(phase, r, srun, report.exit, n),
                _ => Err(format!(
                    "{} `fabric_report` events, expected one (no --rails)",
                    reports.len()
                )),
            }
        };
        // What the servers and clients of the phase printed on stderr (through srun): a
        // panic there fails the phase, whatever its reports say.
        let verdict = verdict.and_then(|v| {
            for log in [format!("{name}.err"), format!("{name}.server.log")] {
                let text = std::fs::read_to_string(out.join(&log)).unwrap_or_default();
                if let Some(line) = crate::plan::panic_line(&text) {
                    return Err(format!("{log}: panicked: {line}"));
                }
            }
            Ok(v)
        });
        match verdict {
            Ok(v) => {
                verdicts.push(format!("fabric-e2e: {name}: {v}"));
                if matches!(phase, Phase::Healthy | Phase::Rails) {
                    verdicts.push(human);
                }
            }
            Err(why) => wrong.push(format!("{name}: {why}\n{human}")),
        }
    }
    if !wrong.is_empty() {
        bail!("fabric-e2e: wrong results:\n{}", wrong.join("\n"));
    }
    Ok(verdicts)
}

/// The reports of `fabric report --json` (its `fabric_report` events in the transcript, one
/// per rail with `--rails`); every line must be a client event: a line that is not is an error
/// naming it.
fn parse(role: &Role) -> Result<Vec<Report>> {
    crate::scenario::judge::only_events(role).map_err(|e| eyre!(e))?;
    let found: Vec<Report> = role
        .client
        .iter()
        .filter_map(|e| match e {
            Event::FabricReport(r) => Some(r.clone().into_owned()),
            _ => None,
        })
        .collect();
    if found.is_empty() {
        bail!("no `fabric_report` event in: {}", role.stdout);
    }
    Ok(found)
}

/// Judges one phase. The faulted node is the last one (`n - 1`).
pub fn check(
    phase: Phase,
    report: &Report,
    srun: ExitKind,
    report_exit: ExitKind,
    n: usize,
) -> std::result::Result<String, String> {
    let last = n - 1;
    let mut wrong = Vec::new();
    let mut counts = [0usize; 3];
    for w in 0..n {
        for t in (0..n).filter(|&t| t != w) {
            let faulted = w == last || t == last;
            let want = match (phase, faulted) {
                (Phase::Healthy | Phase::Rails, _) | (_, false) => "pass",
                (Phase::Slow, true) => "slow",
                (Phase::Down, true) => "fail",
            };
            let got = status(report, w, t);
            match got {
                "pass" => counts[0] += 1,
                "slow" => counts[1] += 1,
                "fail" => counts[2] += 1,
                _ => {}
            }
            if got != want {
                wrong.push(format!("pair {w}->{t}: {got}, expected {want}"));
            }
            if matches!(&report.matrix[w][t], Some(Cell::Fail { error, .. }) if error.is_empty()) {
                wrong.push(format!("pair {w}->{t} failed without a reason"));
            }
        }
    }
    let mut retested = 0;
    if phase == Phase::Slow {
        let r: Vec<(usize, usize, bool)> = report
            .retests
            .iter()
            .map(|x| (x.pair.writer, x.pair.target, x.still_bad))
            .collect();
        retested = r.len();
        wrong.extend(check_retests(&r, last, n));
        let left = report.to_retest.len();
        if left > 0 {
            wrong.push(format!("{left} outlier(s) not re-tested alone"));
        }
    }
    let suspects: Vec<&str> = report.suspects.iter().map(|s| s.host.as_str()).collect();
    let last_host = report.hosts.get(last).map_or("?", String::as_str);
    let want_suspects: Vec<&str> = match phase {
        Phase::Healthy | Phase::Rails => vec![],
        Phase::Slow | Phase::Down => vec![last_host],
    };
    if suspects != want_suspects {
        wrong.push(format!("suspects {suspects:?}, expected {want_suspects:?}"));
    }
    let want_ok = phase != Phase::Down;
    if (report_exit == ExitKind::Success) != want_ok {
        wrong.push(format!(
            "report {report_exit}, expected {}",
            if want_ok { "0" } else { "non-zero" }
        ));
    }
    if phase != Phase::Slow && (srun == ExitKind::Success) != want_ok {
        wrong.push(format!(
            "srun {srun}, expected {}",
            if want_ok { "0" } else { "non-zero" }
        ));
    }
    if wrong.is_empty() {
        Ok(format!(
            "{} pass, {} slow, {} fail; {retested} re-tested alone; suspects {suspects:?}; srun {srun}, report {report_exit}",
            counts[0], counts[1], counts[2]
        ))
    } else {
        Err(wrong.join("; "))
    }
}

/// The slow phase's re-tests: each of the last node's pairs re-tested and still bad; any other
/// pair re-tested (a healthy one the guests' noise flagged) cleared.
fn check_retests(retests: &[(usize, usize, bool)], last: usize, n: usize) -> Vec<String> {
    let mut wrong = Vec::new();
    for w in 0..n {
        for t in (0..n).filter(|&t| t != w && (w == last || t == last)) {
            match retests.iter().find(|r| (r.0, r.1) == (w, t)) {
                None => wrong.push(format!("pair {w}->{t} was not re-tested alone")),
                Some(&(_, _, false)) => {
                    wrong.push(format!(
                        "pair {w}->{t} cleared when re-tested, expected still slow"
                    ));
                }
                Some(_) => {}
            }
        }
    }
    for &(w, t, still_bad) in retests {
        if w != last && t != last && still_bad {
            wrong.push(format!("pair {w}->{t} still bad when re-tested alone"));
        }
    }
    wrong
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use rdma_proto::Exit;
    use rdma_proto::events::fabric::{LatencySource, PairRef, Retest, Suspect, Thresholds};

    pub fn report(cell: impl Fn(usize, usize) -> Option<Cell>, suspects: &[&str]) -> Report {
        let hosts: Vec<String> = (1..=3).map(|k| format!("node{k}")).collect();
        let matrix = (0..3)
            .map(|w| {
                (0..3)
                    .map(|t| if w == t { None } else { cell(w, t) })
                    .collect()
            })
            .collect();
        Report {
            suspects: suspects
                .iter()
                .map(|h| Suspect {
                    rank: hosts.iter().position(|x| x == h).unwrap_or(0),
                    host: (*h).to_owned(),
                    bad: 4,
                    of: 4,
                })
                .collect(),
            hosts,
            pairs: 6,
            passed: 0,
            slow: 0,
            failed: 0,
            missing: 0,
            latency_source: LatencySource::Measured,
            lat_reference_us: None,
            lat_median_us: None,
            bw_reference_mbs: None,
            bw_median_mbs: None,
            thresholds: Thresholds {
                lat_factor: 20.0,
                bw_fraction: 0.1,
            },
            matrix,
            bad_pairs: vec![],
            to_retest: vec![],
            retests: vec![],
            skipped_lines: 0,
            rail: None,
        }
    }

    fn pair(writer: usize, target: usize) -> PairRef {
        PairRef {
            writer,
            writer_host: format!("node{}", writer + 1),
            target,
            target_host: format!("node{}", target + 1),
        }
    }

    /// The report with these re-tests (writer, target, still bad) and nothing left to re-test.
    fn retested(mut r: Report, list: &[(usize, usize, bool)]) -> Report {
        r.retests = list
            .iter()
            .map(|&(w, t, still_bad)| Retest {
                pair: pair(w, t),
                still_bad,
            })
            .collect();
        r.to_retest = vec![];
        r
    }

    /// The status of a check with a failed pair.
    fn transfer() -> ExitKind {
        ExitKind::Ours(Exit::Transfer)
    }

    pub fn pass() -> Option<Cell> {
        Some(Cell::Pass {
            lat_us: Some(100.0),
            bw_mbs: None,
        })
    }

    fn slow_cell() -> Option<Cell> {
        Some(Cell::Slow {
            lat_us: Some(3000.0),
            bw_mbs: None,
            why: "lat".into(),
        })
    }

    #[test]
    fn healthy_needs_every_pair_and_exit_0() {
        let r = report(|_, _| pass(), &[]);
        assert!(check(Phase::Healthy, &r, ExitKind::Success, ExitKind::Success, 3).is_ok());
        assert!(check(Phase::Healthy, &r, transfer(), ExitKind::Success, 3).is_err());
        let one_missing = report(
            |w, t| {
                if (w, t) == (0, 2) { None } else { pass() }
            },
            &[],
        );
        assert!(
            check(
                Phase::Healthy,
                &one_missing,
                ExitKind::Success,
                ExitKind::Success,
                3
            )
            .is_err()
        );
    }

    #[test]
    fn slow_flags_exactly_the_last_nodes_pairs() {
        let slow = |w: usize, t: usize| {
            if w == 2 || t == 2 {
                slow_cell()
            } else {
                pass()
            }
        };
        let node3 = [(0, 2, true), (1, 2, true), (2, 0, true), (2, 1, true)];
        let good = retested(report(slow, &["node3"]), &node3);
        assert_eq!(
            check(Phase::Slow, &good, ExitKind::Success, ExitKind::Success, 3),
            Ok(
                "2 pass, 4 slow, 0 fail; 4 re-tested alone; suspects [\"node3\"]; srun exit 0, report exit 0".into()
            )
        );
        assert!(
            check(
                Phase::Slow,
                &retested(report(slow, &[]), &node3),
                ExitKind::Success,
                ExitKind::Success,
                3
            )
            .is_err()
        );
        // Not re-tested, or one pair left to re-test, or cleared: wrong.
        assert!(
            check(
                Phase::Slow,
                &report(slow, &["node3"]),
                ExitKind::Success,
                ExitKind::Success,
                3
            )
            .is_err()
        );
        let mut left = good.clone();
        left.to_retest = vec![pair(2, 0)];
        assert!(check(Phase::Slow, &left, ExitKind::Success, ExitKind::Success, 3).is_err());
        let cleared = [(0, 2, true), (1, 2, true), (2, 0, false), (2, 1, true)];
        let r = retested(report(slow, &["node3"]), &cleared);
        assert!(check(Phase::Slow, &r, ExitKind::Success, ExitKind::Success, 3).is_err());
        // A healthy pair flagged by noise and cleared alone is fine; one still bad is not.
        let noise = [
            (0, 1, false),
            (0, 2, true),
            (1, 2, true),
            (2, 0, true),
            (2, 1, true),
        ];
        let r = retested(report(slow, &["node3"]), &noise);
        assert!(check(Phase::Slow, &r, ExitKind::Success, ExitKind::Success, 3).is_ok());
        let noise = [
            (0, 1, true),
            (0, 2, true),
            (1, 2, true),
            (2, 0, true),
            (2, 1, true),
        ];
        let r = retested(report(slow, &["node3"]), &noise);
        assert!(check(Phase::Slow, &r, ExitKind::Success, ExitKind::Success, 3).is_err());
        let too_many = |w: usize, t: usize| {
            if w == 2 || t == 2 || w == 0 {
                slow_cell()
            } else {
                pass()
            }
        };
        assert!(
            check(
                Phase::Slow,
                &retested(report(too_many, &["node3"]), &node3),
                ExitKind::Success,
                ExitKind::Success,
                3
            )
            .is_err()
        );
    }

    #[test]
    fn down_fails_its_pairs_with_a_reason_and_exits_non_zero() {
        let down = |why: &'static str| {
            move |w: usize, t: usize| {
                if w == 2 || t == 2 {
                    Some(Cell::Fail {
                        kind: Exit::Rdma,
                        error: why.to_owned(),
                    })
                } else {
                    pass()
                }
            }
        };
        let r = report(down("no rxe0"), &["node3"]);
        assert!(check(Phase::Down, &r, transfer(), transfer(), 3).is_ok());
        assert!(check(Phase::Down, &r, ExitKind::Success, transfer(), 3).is_err());
        assert!(check(Phase::Down, &r, transfer(), ExitKind::Success, 3).is_err());
        assert!(
            check(
                Phase::Down,
                &report(down(""), &["node3"]),
                transfer(),
                transfer(),
                3
            )
            .is_err()
        );
    }

    #[test]
    fn the_report_is_read_from_its_event_and_other_lines_are_named() {
        let r = report(|_, _| pass(), &[]);
        let line =
            serde_json::to_string(&Event::FabricReport(std::borrow::Cow::Borrowed(&r))).unwrap();
        let error =
            r#"{"type":"error","kind":"transfer","exit_code":8,"message":"2 pairs failed"}"#;
        let role = |stdout: &str| {
            let step = crate::plan::StepResult {
                name: "report".into(),
                exit_code: Some(8),
                stdout: stdout.into(),
                ..Default::default()
            };
            Role::of(&step, crate::scenario::transcript::HOST, Speaks::Client)
        };
        assert_eq!(parse(&role(&format!("{line}\n{error}\n"))).unwrap(), [r]);
        assert!(parse(&role(error)).is_err(), "no report");
        let renamed = line.replace("\"suspects\"", "\"suspect\"");
        let err = parse(&role(&renamed)).unwrap_err();
        assert!(err.to_string().contains("not an event"), "{err}");
        let err = parse(&role(&format!("{line}\nno json\n"))).unwrap_err();
        assert!(err.to_string().contains("no json"), "{err}");
    }
}
