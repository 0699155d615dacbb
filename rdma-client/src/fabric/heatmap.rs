//! The report's N x N heat map, PNG or SVG (by the file's extension), drawn with plotters.
//!
//! Row `w`, column `t` is the pair `w -> t` (by rank, as in the table). Colours: a verified pair
//! is green, shading toward yellow as its latency nears the outlier limit; an outlier (slow) is
//! orange, a failed pair red, a missing one dark grey, the diagonal light grey. The rank numbers
//! along the top and the left are drawn with a built-in 3x5 digit font from plain rectangles,
//! so the picture needs no system font (plotters' text would).

use super::report::{Cell, Report};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;

/// Why the picture was not written.
#[derive(Debug, thiserror::Error)]
pub enum HeatmapError {
    #[error("--heatmap {0}: give a file name ending in .png or .svg")]
    Format(String),
    #[error("cannot draw the heat map {path}: {reason}")]
    Draw { path: String, reason: String },
}

const PASS: RGBColor = RGBColor(0x2c, 0xa0, 0x2c);
const NEAR: RGBColor = RGBColor(0xe0, 0xd0, 0x30);
const SLOW: RGBColor = RGBColor(0xff, 0x8c, 0x00);
const FAIL: RGBColor = RGBColor(0xd6, 0x27, 0x28);
const MISSING: RGBColor = RGBColor(0x40, 0x40, 0x40);
const DIAGONAL: RGBColor = RGBColor(0xe8, 0xe8, 0xe8);
const INK: RGBColor = RGBColor(0x20, 0x20, 0x20);

/// One pixel of the digit font, in picture pixels.
const DOT: i32 = 2;
/// A digit's advance: 3 dots and one of space.
const ADVANCE: i32 = 4 * DOT;

/// Draws `report` into `path` (`.png` or `.svg`).
///
/// # Errors
/// Another extension, or the backend could not write the file.
pub fn draw(report: &Report, path: &Path) -> Result<(), HeatmapError> {
    let shown = path.display().to_string();
    let layout = Layout::new(report.hosts.len());
    let size = (layout.width(), layout.width());
    let fail = |reason: String| HeatmapError::Draw {
        path: shown.clone(),
        reason,
    };
    match path.extension().and_then(|e| e.to_str()) {
        Some("png") => {
            let root = BitMapBackend::new(path, size).into_drawing_area();
            paint(&root, report, &layout).map_err(|e| fail(e.to_string()))?;
            root.present().map_err(|e| fail(e.to_string()))
        }
        Some("svg") => {
            let root = SVGBackend::new(path, size).into_drawing_area();
            paint(&root, report, &layout).map_err(|e| fail(e.to_string()))?;
            root.present().map_err(|e| fail(e.to_string()))
        }
        _ => Err(HeatmapError::Format(shown)),
    }
}

/// Where rail `index`'s heat map of a `--rails` check goes, for `--heatmap path`:
/// `fabric.png` becomes `fabric.rail1.png`.
#[must_use]
pub fn for_rail(path: &Path, index: usize) -> std::path::PathBuf {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let name = match path.extension() {
        Some(ext) => format!("{stem}.rail{index}.{}", ext.to_string_lossy()),
        None => format!("{stem}.rail{index}"),
    };
    path.with_file_name(name)
}

/// Where things go, for `n` nodes.
struct Layout {
    n: usize,
    cell: i32,
    margin: i32,
    /// Label every `step`-th rank (labels wider than a cell would overlap).
    step: usize,
}

impl Layout {
    fn new(n: usize) -> Self {
        let cell = i32::try_from(720 / n.max(1)).unwrap_or(1).clamp(2, 40);
        let digits = i32::try_from(n.saturating_sub(1).to_string().len()).unwrap_or(4);
        let label = digits * ADVANCE;
        let step = usize::try_from((label + DOT) / cell + 1).unwrap_or(1);
        Self {
            n,
            cell,
            margin: label + 3 * DOT,
            step,
        }
    }

    fn width(&self) -> u32 {
        let n = i32::try_from(self.n).unwrap_or(i32::MAX / 64);
        u32::try_from(self.margin + n * self.cell + 2 * DOT).unwrap_or(1)
    }

    fn origin(&self, k: usize) -> i32 {
        self.margin + i32::try_from(k).unwrap_or(0) * self.cell
    }
}

fn paint<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    r: &Report,
    l: &Layout,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    root.fill(&WHITE)?;
    let limit = r.lat_reference_us.map(|v| v * r.thresholds.lat_factor);
    for (w, row) in r.matrix.iter().enumerate() {
        for (t, cell) in row.iter().enumerate() {
            let color = match cell {
                None => DIAGONAL,
                Some(Cell::Pass { lat_us, .. }) => match (lat_us, r.lat_reference_us, limit) {
                    (Some(v), Some(low), Some(high)) if high > low => {
                        blend(PASS, NEAR, ((v - low) / (high - low)).clamp(0.0, 1.0))
                    }
                    _ => PASS,
                },
                Some(Cell::Slow { .. }) => SLOW,
                Some(Cell::Fail { .. }) => FAIL,
                Some(Cell::Missing) => MISSING,
            };
            let (x, y) = (l.origin(t), l.origin(w));
            let gap = i32::from(l.cell >= 8);
            root.draw(&Rectangle::new(
                [(x, y), (x + l.cell - gap, y + l.cell - gap)],
                color.filled(),
            ))?;
        }
    }
    for k in (0..l.n).step_by(l.step) {
        let text = k.to_string();
        let wide = i32::try_from(text.len()).unwrap_or(0) * ADVANCE - DOT;
        // Column labels above, centred; row labels at the left, right-aligned.
        let centre = l.origin(k) + l.cell / 2;
        number(root, &text, (centre - wide / 2, l.margin - 6 * DOT))?;
        number(
            root,
            &text,
            (l.margin - DOT - wide - DOT, centre - 5 * DOT / 2),
        )?;
    }
    Ok(())
}

/// The 3x5 digits, one bit per dot, rows top to bottom, each row's bits left to right.
const DIGITS: [u16; 10] = [
    0b111_101_101_101_111,
    0b010_110_010_010_111,
    0b111_001_111_100_111,
    0b111_001_111_001_111,
    0b101_101_111_001_001,
    0b111_100_111_001_111,
    0b111_100_111_101_111,
    0b111_001_001_001_001,
    0b111_101_111_101_111,
    0b111_101_111_001_111,
];

fn number<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    text: &str,
    (x, y): (i32, i32),
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    for (i, d) in text.bytes().filter(u8::is_ascii_digit).enumerate() {
        let bits = DIGITS[usize::from(d - b'0')];
        let left = x + i32::try_from(i).unwrap_or(0) * ADVANCE;
        for dot in 0..15 {
            if bits & (1 << (14 - dot)) != 0 {
                let (cx, cy) = (left + (dot % 3) * DOT, y + (dot / 3) * DOT);
                root.draw(&Rectangle::new(
                    [(cx, cy), (cx + DOT - 1, cy + DOT - 1)],
                    INK.filled(),
                ))?;
            }
        }
    }
    Ok(())
}

fn blend(a: RGBColor, b: RGBColor, t: f64) -> RGBColor {
    let mix = |x: u8, y: u8| {
        let v = f64::from(x) + (f64::from(y) - f64::from(x)) * t;
        // Between two u8 values: always in range.
        v.round().clamp(0.0, 255.0) as u8
    };
    RGBColor(mix(a.0, b.0), mix(a.1, b.1), mix(a.2, b.2))
}

#[cfg(test)]
mod tests {
    use super::super::report::{analyze, tests};
    use super::*;

    #[test]
    fn each_rail_has_its_own_picture() {
        assert_eq!(
            for_rail(Path::new("/out/fabric.png"), 1),
            Path::new("/out/fabric.rail1.png")
        );
        assert_eq!(for_rail(Path::new("map"), 0), Path::new("map.rail0"));
    }

    #[test]
    fn pictures_are_valid_png_and_svg() {
        let dir = tempfile::tempdir().unwrap();
        let r = analyze(&tests::three(Some(2), 4.0), 0, tests::TH).unwrap();
        let png = dir.path().join("fabric.png");
        draw(&r, &png).unwrap();
        let bytes = std::fs::read(&png).unwrap();
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
        // IHDR: width and height as laid out.
        let side = Layout::new(3).width();
        assert_eq!(u32::from_be_bytes(bytes[16..20].try_into().unwrap()), side);
        assert_eq!(u32::from_be_bytes(bytes[20..24].try_into().unwrap()), side);

        let svg = dir.path().join("fabric.svg");
        draw(&r, &svg).unwrap();
        let text = std::fs::read_to_string(&svg).unwrap();
        assert!(text.trim_start().starts_with("<svg") && text.trim_end().ends_with("</svg>"));
        // The slow pairs are orange, the others green; no text element needs a font.
        let orange = format!("#{:02X}{:02X}{:02X}", SLOW.0, SLOW.1, SLOW.2);
        assert_eq!(text.matches(&orange).count(), 4, "{orange} in {text}");
        assert!(!text.contains("<text"));

        let e = draw(&r, &dir.path().join("fabric.jpg")).unwrap_err();
        assert!(e.to_string().contains(".png or .svg"), "{e}");
    }

    #[test]
    fn large_fabrics_fit_and_label_sparsely() {
        let l = Layout::new(1024);
        assert_eq!(l.cell, 2);
        assert!(l.step > 1 && l.width() < 2400);
        let l = Layout::new(3);
        assert_eq!((l.cell, l.step), (40, 1));
    }
}
