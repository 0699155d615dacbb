//! The human report of a bench run: one table with both tools, the ratio and the fraction
//! of the link, then the setup probes, the e2e turnaround and every target, met or missed.

use std::fmt::Write as _;

use super::results::{Mode, Results, Tool, fmt_opt, median};

fn size(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} B"),
    }
}

/// Four significant digits at most, two decimals at least for numbers >= 1.
fn sig(v: f64) -> String {
    if v == 0.0 || v.abs() >= 1.0 {
        format!("{v:.2}")
    } else {
        let decimals = (3 - v.abs().log10().floor() as i32).clamp(2, 9) as usize;
        format!("{v:.decimals$}")
    }
}

fn pct(x: Option<f64>) -> String {
    x.map_or_else(|| "-".to_owned(), |v| format!("{:.0}%", v * 100.0))
}

/// The whole report as text.
pub fn render(r: &Results) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "bench: {}", r.environment);
    let _ = writeln!(
        s,
        "  {} repetition(s) per size and tool, alternating which tool goes first; medians shown",
        r.reps
    );
    match (r.link, r.link_mbs) {
        (Some(l), Some(m)) => {
            let _ = writeln!(
                s,
                "  link ceiling: TCP stream between the guests {m:.2} MB/s ({} bytes in {:.1} s)",
                l.bytes, l.secs
            );
        }
        _ => {
            let _ = writeln!(s, "  link ceiling: the TCP stream gave no result");
        }
    }
    let _ = writeln!(
        s,
        "\n  {:<4} {:>8}  {:>14} {:>14} {:>13} {:>7}  {:>9} {:>9}  {:>7}",
        "test",
        "#bytes",
        "perftest",
        "rdma-client",
        "ours/perftest",
        "paired",
        "link pt",
        "link ours",
        "ok o/p"
    );
    for x in &r.summary {
        let unit = match x.mode {
            Mode::Lat => "us",
            Mode::Bw => "MB/s",
        };
        let v = |o: Option<f64>| o.map_or_else(|| "-".to_owned(), |v| format!("{} {unit}", sig(v)));
        let _ = writeln!(
            s,
            "  {:<4} {:>8}  {:>14} {:>14} {:>13} {:>7}  {:>9} {:>9}  {:>3}/{:<3}",
            match x.mode {
                Mode::Lat => "lat",
                Mode::Bw => "bw",
            },
            size(x.bytes),
            v(x.perftest),
            v(x.ours),
            x.ratio
                .map_or_else(|| "-".to_owned(), |r| format!("{r:.2}")),
            x.paired_ratio
                .map_or_else(|| "-".to_owned(), |r| format!("{r:.2}")),
            pct(x.perftest_link_fraction),
            pct(x.ours_link_fraction),
            x.ours_ok,
            x.perftest_ok,
        );
    }
    let _ = writeln!(
        s,
        "  (lat: t_typical = median of half round trips; bw: BW average, MB = 2^20 bytes;\n   \
         paired = median over repetitions of ours/perftest within each one, back to back: \
         the targets use it)"
    );
    let setup = |tool: Tool| {
        median(
            r.setup
                .iter()
                .filter(|x| x.tool == tool && x.error.is_none())
                .map(|x| x.wall_s)
                .collect(),
        )
    };
    let _ = writeln!(
        s,
        "\n  setup (client process, 5-exchange latency run): perftest {} s, rdma-client {} s",
        fmt_opt(setup(Tool::Perftest)),
        fmt_opt(setup(Tool::Ours))
    );
    if let Some(e) = r.e2e_wall_s {
        let _ = writeln!(
            s,
            "  e2e turnaround (warm, seed scenario, two guests): {e:.1} s"
        );
    }
    let failed: Vec<String> = r
        .samples
        .iter()
        .chain(&r.setup)
        .filter_map(|x| {
            x.error
                .as_ref()
                .map(|e| format!("{} {:?} {} r{}: {e}", x.tool.name(), x.mode, x.bytes, x.rep))
        })
        .collect();
    if !failed.is_empty() {
        let _ = writeln!(s, "\n  runs without a result ({}):", failed.len());
        for f in failed.iter().take(20) {
            let _ = writeln!(s, "    {}", crate::text::shorten(f, 300));
        }
    }
    if r.mesh_cycles > 0 {
        let _ = writeln!(
            s,
            "\n  mesh ({} cycles; probes per second = ok probes / seconds from mesh_started to mesh_stopped):",
            r.mesh_cycles
        );
        match (&r.mesh, &r.mesh_error) {
            (Some(m), _) => s.push_str(&super::mesh::figures::render(m)),
            (None, e) => {
                let _ = writeln!(
                    s,
                    "    NO FIGURES: {}",
                    e.as_deref().unwrap_or("none recorded")
                );
            }
        }
    }
    let missed = r.targets.iter().filter(|t| !t.met).count();
    let _ = writeln!(
        s,
        "\n  targets: {} met, {missed} missed",
        r.targets.len() - missed
    );
    for t in &r.targets {
        let _ = writeln!(
            s,
            "    [{}] {}: {}",
            if t.met { "met" } else { "MISSED" },
            t.what,
            t.detail
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::super::results::tests::{bw_sample, lat_sample};
    use super::super::results::{SCHEMA, judge, summarize};
    use super::*;

    #[test]
    fn every_size_and_every_target_is_shown() {
        let samples = vec![
            lat_sample(Tool::Ours, 2, 0, 100.0),
            lat_sample(Tool::Perftest, 2, 0, 200.0),
            bw_sample(Tool::Ours, 4096, 0, 10.0),
            bw_sample(Tool::Perftest, 4096, 0, 20.0),
        ];
        let summary = summarize(&samples, &[2, 4096], Some(40.0));
        let targets = judge(&summary, &[], None, 30.0);
        let r = Results {
            schema: SCHEMA,
            finished_unix_s: 0,
            environment: "test guests".into(),
            sizes: vec![2, 4096],
            reps: 1,
            tx_depth: 128,
            link: None,
            link_mbs: Some(40.0),
            e2e_wall_s: None,
            setup: vec![],
            samples,
            summary,
            targets,
            flood_secs: 0.0,
            flood: None,
            mesh_cycles: 0,
            mesh: None,
            mesh_error: None,
        };
        let out = render(&r);
        assert!(out.contains("2 B"), "{out}");
        assert!(out.contains("4 KiB"), "{out}");
        assert!(out.contains("0.50"), "{out}");
        assert!(out.contains("[MISSED] bw 4096 B"), "{out}");
        assert!(out.contains("[met] lat 2 B"), "{out}");
        assert!(out.contains("25%"), "{out}");
    }
}
