//! The two plots (latency and bandwidth against message size, both tools, log axes), each
//! as SVG and PNG, drawn with plotters. Text needs a TrueType font: plotters' `ab_glyph`
//! backend is pure Rust (no fontconfig/freetype), and the font is read at run time from the
//! usual system paths (DejaVu, Liberation, Noto...).

use std::path::{Path, PathBuf};

use color_eyre::eyre::{Result, eyre};
use plotters::coord::Shift;
use plotters::prelude::*;

use super::results::{Mode, Results, Sample, Tool, median};

/// Where fonts usually are; the first that exists is used.
const FONTS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/liberation-sans/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/noto/NotoSans-Regular.ttf",
    "/usr/share/fonts/noto/NotoSans-Regular.ttf",
    "/System/Library/Fonts/Supplemental/Arial.ttf",
];
const FAMILY: &str = "sans-serif";

/// Registers the first font found (once per process).
fn font() -> Result<()> {
    static DONE: std::sync::OnceLock<std::result::Result<PathBuf, String>> =
        std::sync::OnceLock::new();
    let r = DONE.get_or_init(|| {
        let path = FONTS
            .iter()
            .map(PathBuf::from)
            .find(|p| p.exists())
            .ok_or_else(|| {
                format!(
                    "no TrueType font found for the plots' text (looked for {}); install \
                     fonts-dejavu-core (Debian/Ubuntu) or dejavu-sans-fonts (Fedora)",
                    FONTS.join(", ")
                )
            })?;
        let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        // plotters keeps registered fonts for the life of the process.
        let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        plotters::style::register_font(FAMILY, FontStyle::Normal, bytes)
            .map_err(|_| format!("{} is not a usable font", path.display()))?;
        Ok(path)
    });
    r.as_ref().map(|_| ()).map_err(|e| eyre!("{e}"))
}

/// One line of a plot: (bytes, value) with the spread over repetitions.
struct Line {
    label: String,
    color: RGBColor,
    points: Vec<(u64, f64, f64, f64)>,
}

const OURS: RGBColor = RGBColor(0xd6, 0x27, 0x28);
const PERFTEST: RGBColor = RGBColor(0x1f, 0x77, 0xb4);
const LINK: RGBColor = RGBColor(0x55, 0x55, 0x55);

fn lines(samples: &[Sample], mode: Mode, sizes: &[u64]) -> Vec<Line> {
    [(Tool::Perftest, PERFTEST), (Tool::Ours, OURS)]
        .into_iter()
        .map(|(tool, color)| Line {
            label: match (tool, mode) {
                (Tool::Perftest, Mode::Lat) => "ib_write_lat".into(),
                (Tool::Perftest, Mode::Bw) => "ib_write_bw".into(),
                (Tool::Ours, Mode::Lat) => "rdma-client bench --mode lat".into(),
                (Tool::Ours, Mode::Bw) => "rdma-client bench --mode bw".into(),
            },
            color,
            points: sizes
                .iter()
                .filter_map(|&b| {
                    let v: Vec<f64> = samples
                        .iter()
                        .filter(|s| s.tool == tool && s.mode == mode && s.bytes == b)
                        .filter_map(Sample::figure)
                        .filter(|v| *v > 0.0)
                        .collect();
                    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
                    let hi = v.iter().copied().fold(0.0, f64::max);
                    median(v).map(|m| (b, m, lo, hi))
                })
                .collect(),
        })
        .collect()
}

fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    y_desc: &str,
    lines: &[Line],
    ceiling: Option<f64>,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| eyre!("drawing {title}: {e:?}");
    root.fill(&WHITE).map_err(e)?;
    let xs: Vec<u64> = lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.0))
        .collect();
    let ys: Vec<f64> = lines
        .iter()
        .flat_map(|l| l.points.iter().flat_map(|p| [p.2, p.3]))
        .chain(ceiling)
        .filter(|v| *v > 0.0 && v.is_finite())
        .collect();
    let (xmin, xmax) = (
        xs.iter().copied().min().unwrap_or(1).max(1),
        xs.iter().copied().max().unwrap_or(2).max(2),
    );
    let ymin = ys.iter().copied().fold(f64::INFINITY, f64::min);
    let ymax = ys.iter().copied().fold(0.0, f64::max);
    let (ymin, ymax) = if ymin.is_finite() && ymax > 0.0 {
        (ymin / 2.0, ymax * 2.0)
    } else {
        (0.1, 10.0)
    };
    let mut chart = ChartBuilder::on(root)
        .caption(title, (FAMILY, 22))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(
            ((xmin as f64 / 1.5)..(xmax as f64 * 1.5)).log_scale(),
            (ymin..ymax).log_scale(),
        )
        .map_err(e)?;
    chart
        .configure_mesh()
        .x_desc("message size (bytes)")
        .y_desc(y_desc)
        .x_label_formatter(&|x| {
            // The log axis puts its labels on powers of ten.
            let b = x.round();
            if b >= 1e6 {
                format!("{}M", b / 1e6)
            } else if b >= 1e3 {
                format!("{}k", b / 1e3)
            } else {
                format!("{b}")
            }
        })
        .label_style((FAMILY, 14))
        .draw()
        .map_err(e)?;
    if let Some(c) = ceiling {
        chart
            .draw_series(LineSeries::new(
                [(xmin as f64 / 1.5, c), (xmax as f64 * 1.5, c)],
                LINK.stroke_width(1),
            ))
            .map_err(e)?
            .label(format!("TCP stream between the guests ({c:.1} MB/s)"))
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], LINK));
    }
    for l in lines {
        let color = l.color;
        chart
            .draw_series(LineSeries::new(
                l.points.iter().map(|p| (p.0 as f64, p.1)),
                color.stroke_width(2),
            ))
            .map_err(e)?
            .label(l.label.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart
            .draw_series(
                l.points
                    .iter()
                    .map(|p| Circle::new((p.0 as f64, p.1), 4, color.filled())),
            )
            .map_err(e)?;
        // The spread over repetitions (min..max of the per-run figure).
        chart
            .draw_series(
                l.points
                    .iter()
                    .map(|p| PathElement::new(vec![(p.0 as f64, p.2), (p.0 as f64, p.3)], color)),
            )
            .map_err(e)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font((FAMILY, 14))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(e)?;
    root.present().map_err(e)?;
    Ok(())
}

/// Writes `latency.{svg,png}` and `bandwidth.{svg,png}` into `dir`; returns their paths.
pub fn write(dir: &Path, r: &Results, subtitle: &str) -> Result<Vec<PathBuf>> {
    font()?;
    let mut out = Vec::new();
    let charts = [
        (
            "latency",
            format!("RDMA Write latency, half round trip ({subtitle})"),
            "t_typical (usec, median)",
            Mode::Lat,
            None,
        ),
        (
            "bandwidth",
            format!("RDMA Write bandwidth ({subtitle})"),
            "BW average (MB/s, 2^20 bytes)",
            Mode::Bw,
            r.link_mbs,
        ),
    ];
    for (name, title, y, mode, ceiling) in charts {
        let l = lines(&r.samples, mode, &r.sizes);
        let svg = dir.join(format!("{name}.svg"));
        draw(
            &SVGBackend::new(&svg, (900, 560)).into_drawing_area(),
            &title,
            y,
            &l,
            ceiling,
        )?;
        let png = dir.join(format!("{name}.png"));
        draw(
            &BitMapBackend::new(&png, (900, 560)).into_drawing_area(),
            &title,
            y,
            &l,
            ceiling,
        )?;
        out.extend([svg, png]);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::super::results::tests::{bw_sample, lat_sample};
    use super::super::results::{Results, SCHEMA};
    use super::*;

    #[test]
    fn plots_are_written_as_svg_and_png() {
        if font().is_err() {
            // Without a system font the command says so; nothing more to check here.
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let mut samples = Vec::new();
        for (i, b) in [2u64, 4096, 1 << 20].into_iter().enumerate() {
            let f = (i + 1) as f64;
            samples.push(lat_sample(Tool::Ours, b, 0, 100.0 * f));
            samples.push(lat_sample(Tool::Perftest, b, 0, 120.0 * f));
            samples.push(bw_sample(Tool::Ours, b, 0, 5.0 * f));
            samples.push(bw_sample(Tool::Perftest, b, 0, 4.0 * f));
        }
        let r = Results {
            schema: SCHEMA,
            finished_unix_s: 0,
            environment: "test".into(),
            sizes: vec![2, 4096, 1 << 20],
            reps: 1,
            tx_depth: 128,
            link: None,
            link_mbs: Some(38.0),
            e2e_wall_s: None,
            setup: vec![],
            samples,
            summary: vec![],
            targets: vec![],
            flood_secs: 0.0,
            flood: None,
            mesh_cycles: 0,
            mesh: None,
            mesh_error: None,
        };
        let files = write(dir.path(), &r, "test").unwrap();
        assert_eq!(files.len(), 4);
        let svg = std::fs::read_to_string(dir.path().join("latency.svg")).unwrap();
        assert!(svg.contains("ib_write_lat") && svg.contains("rdma-client bench --mode lat"));
        let png = std::fs::read(dir.path().join("bandwidth.png")).unwrap();
        assert_eq!(&png[1..4], b"PNG");
    }
}
