//! What a bench run measured: raw samples, per-size summaries (median over repetitions),
//! the targets and whether they were met; written as `results.json` and `results.csv`.

use std::fmt::Write as _;
use std::path::Path;

use color_eyre::eyre::{Result, WrapErr};
use serde::{Deserialize, Serialize};

use super::mesh::figures::Mesh;
use super::parse::Tcp;
use rdma_proto::events::bench::{BwRow, LatRow};

/// Version of `results.json`'s layout; bump on any incompatible change. 2: a sample's `lat` and
/// `bw` are the contract's rows (`schema`, and for bw the Gb/s columns, added).
pub const SCHEMA: u32 = 2;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Tool {
    /// `rdma-client bench` against a plain `rdma-server`.
    Ours,
    /// `ib_write_lat` / `ib_write_bw`.
    Perftest,
}

impl Tool {
    pub fn name(self) -> &'static str {
        match self {
            Tool::Ours => "rdma-client",
            Tool::Perftest => "perftest",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Lat,
    Bw,
}

/// One run of one tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    pub tool: Tool,
    pub mode: Mode,
    pub bytes: u64,
    pub rep: u32,
    /// Wall time of the client process (start, device, connection, the run, exit), seconds.
    pub wall_s: f64,
    pub lat: Option<LatRow>,
    pub bw: Option<BwRow>,
    /// Why there is no result, when there is none.
    pub error: Option<String>,
}

impl Sample {
    /// The figure the summary compares: typical (median) latency, or average bandwidth.
    pub fn figure(&self) -> Option<f64> {
        match self.mode {
            Mode::Lat => self.lat.map(|l| l.t_typical_us),
            Mode::Bw => self.bw.map(|b| b.bw_avg_mbs),
        }
    }
}

/// One size of one mode, both tools.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub mode: Mode,
    pub bytes: u64,
    /// Median over the repetitions that produced a result (µs for lat, MB/s for bw).
    pub ours: Option<f64>,
    pub perftest: Option<f64>,
    /// Repetitions with a result / run.
    pub ours_ok: usize,
    pub perftest_ok: usize,
    pub runs: usize,
    /// ours / perftest (of the medians).
    pub ratio: Option<f64>,
    /// The median over repetitions of ours / perftest within each repetition: the two tools of
    /// one repetition run back to back, so this cancels the host's load swings between
    /// repetitions. The targets are judged on it.
    #[serde(default)]
    pub paired_ratio: Option<f64>,
    /// Bandwidth as a fraction of the TCP stream (bw only).
    pub ours_link_fraction: Option<f64>,
    pub perftest_link_fraction: Option<f64>,
}

/// One target and how it went.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Target {
    pub what: String,
    pub met: bool,
    pub detail: String,
}

/// Everything `results.json` holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Results {
    pub schema: u32,
    /// Unix time the run finished.
    pub finished_unix_s: u64,
    /// Where this was measured (and so how much absolute numbers mean).
    pub environment: String,
    pub sizes: Vec<u64>,
    pub reps: u32,
    pub tx_depth: u32,
    /// The TCP stream between the guests: the link's ceiling.
    pub link: Option<Tcp>,
    pub link_mbs: Option<f64>,
    /// Warm `cargo xtask e2e` (seed scenario, two guests), seconds.
    pub e2e_wall_s: Option<f64>,
    /// Setup probes: latency runs of 5 exchanges (process start to exit).
    pub setup: Vec<Sample>,
    pub samples: Vec<Sample>,
    pub summary: Vec<Summary>,
    pub targets: Vec<Target>,
    /// Seconds of the stranger flood (0: none ran).
    #[serde(default)]
    pub flood_secs: f64,
    /// What the flood measured (`bench::flood`).
    #[serde(default)]
    pub flood: Option<Flood>,
    /// Cycles of the mesh (0: none ran).
    #[serde(default)]
    pub mesh_cycles: u32,
    /// What the mesh measured (`bench::mesh`); also in `mesh.csv`.
    #[serde(default)]
    pub mesh: Option<Mesh>,
    /// Why a mesh that ran has no figures.
    #[serde(default)]
    pub mesh_error: Option<String>,
}

/// What a stranger flood (`bench::flood`) counted.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Count {
    pub connections: u64,
    pub failed: u64,
    pub secs: f64,
}

/// The measurement, as `results.json` keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Flood {
    pub count: Count,
    /// Server CPU over the flood, milliseconds.
    pub cpu_ms: f64,
    pub cpu_per_connection_ms: f64,
    /// The real client's write after the flood verified.
    pub verified: bool,
    /// The floor under the same emulation: the same flood against a bare loop that accepts,
    /// writes a line, reads to the end and closes.
    #[serde(default)]
    pub bare: Option<Floor>,
}

/// What the bare loop's connections cost.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Floor {
    pub count: Count,
    pub cpu_ms: f64,
    pub cpu_per_connection_ms: f64,
}

/// Median of the values (NaN-free input), `None` when empty.
pub fn median(mut xs: Vec<f64>) -> Option<f64> {
    if xs.is_empty() {
        return None;
    }
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    Some(if n % 2 == 1 {
        xs[n / 2]
    } else {
        f64::midpoint(xs[n / 2 - 1], xs[n / 2])
    })
}

/// Per (mode, size) summaries, in the order of `sizes`, lat first.
pub fn summarize(samples: &[Sample], sizes: &[u64], link_mbs: Option<f64>) -> Vec<Summary> {
    let mut out = Vec::new();
    for mode in [Mode::Lat, Mode::Bw] {
        for &bytes in sizes {
            let of = |tool: Tool| -> Vec<f64> {
                samples
                    .iter()
                    .filter(|s| s.mode == mode && s.bytes == bytes && s.tool == tool)
                    .filter_map(Sample::figure)
                    .collect()
            };
            let runs = samples
                .iter()
                .filter(|s| s.mode == mode && s.bytes == bytes && s.tool == Tool::Ours)
                .count();
            if runs == 0 {
                continue;
            }
            let rep_of = |tool: Tool, rep: u32| {
                samples
                    .iter()
                    .find(|s| s.mode == mode && s.bytes == bytes && s.tool == tool && s.rep == rep)
                    .and_then(Sample::figure)
            };
            let reps: Vec<u32> = samples
                .iter()
                .filter(|s| s.mode == mode && s.bytes == bytes && s.tool == Tool::Ours)
                .map(|s| s.rep)
                .collect();
            let paired_ratio = median(
                reps.iter()
                    .filter_map(
                        |&r| match (rep_of(Tool::Ours, r), rep_of(Tool::Perftest, r)) {
                            (Some(o), Some(p)) if p > 0.0 => Some(o / p),
                            _ => None,
                        },
                    )
                    .collect(),
            );
            let (o, p) = (of(Tool::Ours), of(Tool::Perftest));
            let (ours_ok, perftest_ok) = (o.len(), p.len());
            let (ours, perftest) = (median(o), median(p));
            let frac = |x: Option<f64>| match (mode, x, link_mbs) {
                (Mode::Bw, Some(x), Some(l)) if l > 0.0 => Some(x / l),
                _ => None,
            };
            out.push(Summary {
                mode,
                bytes,
                ours,
                perftest,
                ours_ok,
                perftest_ok,
                runs,
                ratio: match (ours, perftest) {
                    (Some(o), Some(p)) if p > 0.0 => Some(o / p),
                    _ => None,
                },
                paired_ratio,
                ours_link_fraction: frac(ours),
                perftest_link_fraction: frac(perftest),
            });
        }
    }
    out
}

/// The targets: bandwidth ours/perftest >= 1.00 at every size >= 4 KiB; typical
/// latency ours/perftest <= 1.00 at every size; setup no slower than perftest's; the warm
/// e2e within `e2e_target_s`. A size without both numbers counts as missed.
pub fn judge(
    summary: &[Summary],
    setup: &[Sample],
    e2e_wall_s: Option<f64>,
    e2e_target_s: f64,
) -> Vec<Target> {
    let mut t = Vec::new();
    for s in summary {
        let judged = s.paired_ratio.or(s.ratio);
        let (what, applies, met) = match s.mode {
            Mode::Lat => (
                format!("lat {} B: typical latency ours/perftest <= 1.00", s.bytes),
                true,
                judged.is_some_and(|r| r <= 1.0),
            ),
            Mode::Bw => (
                format!("bw {} B: average bandwidth ours/perftest >= 1.00", s.bytes),
                s.bytes >= 4096,
                judged.is_some_and(|r| r >= 1.0),
            ),
        };
        if !applies {
            continue;
        }
        let detail = match judged {
            Some(r) => format!(
                "paired ratio {r:.2}, {} (ratio of medians {}: ours {} vs perftest {})",
                if met { "met" } else { "missed" },
                fmt_opt(s.ratio),
                fmt_opt(s.ours),
                fmt_opt(s.perftest)
            ),
            None => format!(
                "no ratio: ours {}/{} runs gave a result, perftest {}/{}",
                s.ours_ok, s.runs, s.perftest_ok, s.runs
            ),
        };
        t.push(Target { what, met, detail });
    }
    let wall = |tool: Tool| {
        median(
            setup
                .iter()
                .filter(|s| s.tool == tool && s.error.is_none())
                .map(|s| s.wall_s)
                .collect(),
        )
    };
    let (o, p) = (wall(Tool::Ours), wall(Tool::Perftest));
    t.push(Target {
        what: "setup: client process (5-exchange latency run) no slower than perftest's".into(),
        met: matches!((o, p), (Some(o), Some(p)) if o <= p),
        detail: format!(
            "median wall ours {} s, perftest {} s",
            fmt_opt(o),
            fmt_opt(p)
        ),
    });
    if let Some(e) = e2e_wall_s {
        t.push(Target {
            what: format!("warm `cargo xtask e2e` (seed, two guests) <= {e2e_target_s:.0} s"),
            met: e <= e2e_target_s,
            detail: format!("{e:.1} s"),
        });
    }
    t
}

pub fn fmt_opt(x: Option<f64>) -> String {
    x.map_or_else(|| "-".to_owned(), |v| format!("{v:.2}"))
}

/// One CSV row per sample (setup probes included, mode `setup`).
pub fn csv(r: &Results) -> String {
    let mut s = String::from(
        "kind,tool,mode,bytes,rep,iterations,wall_s,t_min_us,t_max_us,t_typical_us,t_avg_us,\
         t_stdev_us,p99_us,p999_us,bw_peak_mbs,bw_avg_mbs,msg_rate_mpps,error\n",
    );
    let num = |x: Option<f64>| x.map_or_else(String::new, |v| format!("{v}"));
    for (kind, list) in [("sample", &r.samples), ("setup", &r.setup)] {
        for x in list {
            let iters = x.lat.map(|l| l.iterations).or(x.bw.map(|b| b.iterations));
            let _ = writeln!(
                s,
                "{kind},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
                x.tool.name(),
                match x.mode {
                    Mode::Lat => "lat",
                    Mode::Bw => "bw",
                },
                x.bytes,
                x.rep,
                iters.map_or_else(String::new, |i| i.to_string()),
                x.wall_s,
                num(x.lat.map(|l| l.t_min_us)),
                num(x.lat.map(|l| l.t_max_us)),
                num(x.lat.map(|l| l.t_typical_us)),
                num(x.lat.map(|l| l.t_avg_us)),
                num(x.lat.map(|l| l.t_stdev_us)),
                num(x.lat.map(|l| l.p99_us)),
                num(x.lat.map(|l| l.p999_us)),
                num(x.bw.map(|b| b.bw_peak_mbs)),
                num(x.bw.map(|b| b.bw_avg_mbs)),
                num(x.bw.map(|b| b.msg_rate_mpps)),
                // Quoted, inner quotes doubled, no newlines: one row per sample.
                x.error.as_deref().map_or_else(String::new, |e| format!(
                    "\"{}\"",
                    e.replace('"', "\"\"").replace(['\n', '\r'], " ")
                )),
            );
        }
    }
    s
}

/// Writes `results.json`, `results.csv` and, when the mesh has figures, `mesh.csv` into `dir`
/// (an older `mesh.csv` goes: it would not be this run's).
pub fn write(dir: &Path, r: &Results) -> Result<()> {
    std::fs::create_dir_all(dir).wrap_err_with(|| format!("creating {}", dir.display()))?;
    let json = dir.join("results.json");
    std::fs::write(&json, serde_json::to_vec_pretty(r)?)
        .wrap_err_with(|| format!("writing {}", json.display()))?;
    let c = dir.join("results.csv");
    std::fs::write(&c, csv(r)).wrap_err_with(|| format!("writing {}", c.display()))?;
    let m = dir.join("mesh.csv");
    match &r.mesh {
        Some(mesh) => std::fs::write(&m, super::mesh::figures::csv(mesh))
            .wrap_err_with(|| format!("writing {}", m.display())),
        None => match std::fs::remove_file(&m) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(e).wrap_err_with(|| format!("removing {}", m.display()))
            }
            _ => Ok(()),
        },
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub fn lat_sample(tool: Tool, bytes: u64, rep: u32, typical: f64) -> Sample {
        Sample {
            tool,
            mode: Mode::Lat,
            bytes,
            rep,
            wall_s: 1.0,
            lat: Some(LatRow {
                schema: 1,
                bytes,
                iterations: 100,
                t_min_us: typical / 2.0,
                t_max_us: typical * 2.0,
                t_typical_us: typical,
                t_avg_us: typical,
                t_stdev_us: 1.0,
                p99_us: typical * 1.5,
                p999_us: typical * 2.0,
            }),
            bw: None,
            error: None,
        }
    }

    pub fn bw_sample(tool: Tool, bytes: u64, rep: u32, avg: f64) -> Sample {
        Sample {
            tool,
            mode: Mode::Bw,
            bytes,
            rep,
            wall_s: 2.0,
            lat: None,
            bw: Some(BwRow {
                schema: 1,
                bytes,
                iterations: 100,
                bw_peak_mbs: avg * 1.2,
                bw_avg_mbs: avg,
                bw_peak_gbps: avg * 1.2 * 0.008,
                bw_avg_gbps: avg * 0.008,
                msg_rate_mpps: avg / bytes as f64,
            }),
            error: None,
        }
    }

    #[test]
    fn medians_ratios_and_targets() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(vec![]), None);
        let mut samples = vec![
            lat_sample(Tool::Ours, 2, 0, 100.0),
            lat_sample(Tool::Ours, 2, 1, 120.0),
            lat_sample(Tool::Perftest, 2, 0, 200.0),
            lat_sample(Tool::Perftest, 2, 1, 220.0),
            bw_sample(Tool::Ours, 4096, 0, 10.0),
            bw_sample(Tool::Perftest, 4096, 0, 20.0),
            bw_sample(Tool::Ours, 64, 0, 1.0),
            bw_sample(Tool::Perftest, 64, 0, 2.0),
        ];
        // A failed run: counted in `runs`, not in the median.
        let mut failed = lat_sample(Tool::Ours, 2, 2, 0.0);
        failed.lat = None;
        failed.error = Some("exit 1".into());
        samples.push(failed);
        let s = summarize(&samples, &[2, 64, 4096], Some(40.0));
        let lat2 = s
            .iter()
            .find(|x| x.mode == Mode::Lat && x.bytes == 2)
            .unwrap();
        assert_eq!((lat2.ours, lat2.perftest), (Some(110.0), Some(210.0)));
        assert_eq!((lat2.ours_ok, lat2.runs), (2, 3));
        let bw4k = s
            .iter()
            .find(|x| x.mode == Mode::Bw && x.bytes == 4096)
            .unwrap();
        assert_eq!(bw4k.ratio, Some(0.5));
        assert_eq!(bw4k.paired_ratio, Some(0.5));
        // Two repetitions: (100/200, 120/220) -> the median of the pairs.
        let pr = lat2.paired_ratio.unwrap();
        assert!(
            (pr - f64::midpoint(0.5, 120.0 / 220.0)).abs() < 1e-12,
            "{pr}"
        );
        assert_eq!(bw4k.ours_link_fraction, Some(0.25));
        let t = judge(&s, &[], Some(12.0), 30.0);
        let find = |w: &str| t.iter().find(|x| x.what.starts_with(w)).unwrap();
        assert!(find("lat 2 B").met);
        assert!(
            !find("bw 4096 B").met,
            "half of perftest's bandwidth is a miss"
        );
        assert!(
            !t.iter().any(|x| x.what.starts_with("bw 64 B")),
            "bw target starts at 4 KiB"
        );
        assert!(!find("setup").met, "no setup probes: not met");
        assert!(find("warm").met);
    }

    #[test]
    fn csv_has_a_row_per_sample_and_escapes_errors() {
        let mut bad = bw_sample(Tool::Perftest, 64, 0, 1.0);
        bad.bw = None;
        bad.error = Some("said \"no\"\nthen left".into());
        let r = Results {
            schema: SCHEMA,
            finished_unix_s: 0,
            environment: "test".into(),
            sizes: vec![64],
            reps: 1,
            tx_depth: 128,
            link: None,
            link_mbs: None,
            e2e_wall_s: None,
            setup: vec![lat_sample(Tool::Ours, 2, 0, 5.0)],
            samples: vec![bw_sample(Tool::Ours, 64, 0, 1.0), bad],
            summary: vec![],
            targets: vec![],
            flood_secs: 0.0,
            flood: None,
            mesh_cycles: 0,
            mesh: None,
            mesh_error: None,
        };
        let c = csv(&r);
        let lines: Vec<&str> = c.lines().collect();
        assert_eq!(lines.len(), 4);
        assert!(lines[1].starts_with("sample,rdma-client,bw,64,0,100,"));
        assert!(lines[2].ends_with("\"said \"\"no\"\" then left\""));
        assert!(lines[3].starts_with("setup,rdma-client,lat,2,"));
        let cols = lines[0].split(',').count();
        assert_eq!(lines[1].split(',').count(), cols);
    }
}
