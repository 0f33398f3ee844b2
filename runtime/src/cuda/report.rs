//! Benchmark reports: markdown tables and a dependency-free SVG plot of bandwidth against
//! message size. Pure logic.

use crate::cpu::SweepRow;
use std::fmt::Write as _;

/// A size label such as `1K`, `64M`, `1G`.
pub fn size_label(bytes: u64) -> String {
    const UNITS: [(u64, &str); 3] = [(1 << 30, "G"), (1 << 20, "M"), (1 << 10, "K")];
    for (u, s) in UNITS {
        if bytes >= u && bytes.is_multiple_of(u) {
            return format!("{}{s}", bytes / u);
        }
    }
    format!("{bytes}")
}

/// nccl-tests' columns as a markdown table (out-of-place and in-place side by side).
pub fn markdown_table(rows: &[SweepRow]) -> String {
    let mut out = String::new();
    out.push_str(
        "| size | count | type | oop time (µs) | oop algbw (GB/s) | oop busbw (GB/s) | oop #wrong \
         | ip time (µs) | ip algbw (GB/s) | ip busbw (GB/s) | ip #wrong |\n",
    );
    out.push_str("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for group in crate::cpu::rows_by_size(rows) {
        let first = group[0];
        let cell = |inplace: bool| match group.iter().find(|r| r.inplace == inplace) {
            Some(r) => format!(
                "{:.2} | {:.2} | {:.2} | {}",
                r.time_us, r.algbw, r.busbw, r.wrong
            ),
            None => "N/A | N/A | N/A | N/A".to_string(),
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} |",
            size_label(first.size),
            first.count,
            first.dtype,
            cell(false),
            cell(true)
        );
    }
    out
}

/// One line of a plot.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Legend text.
    pub name: String,
    /// (message bytes, value) points.
    pub points: Vec<(u64, f64)>,
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// An SVG line plot with a log₂ x axis (message size) and a linear y axis from 0.
pub fn svg_plot(title: &str, y_label: &str, series: &[Series]) -> String {
    let frame = Frame::of(series);
    let mut s = String::new();
    frame.write_header(&mut s, title);
    frame.write_grid(&mut s);
    frame.write_axes(&mut s, y_label);
    for (i, ser) in series.iter().enumerate() {
        frame.write_series(&mut s, i, ser);
    }
    s.push_str("</svg>\n");
    s
}

/// Colours of the plotted series, in turn.
const PALETTE: [&str; 10] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf",
];

/// The geometry of a plot: the picture, the plotting area inside its margins, and the
/// ranges of its axes (x in log₂ bytes).
struct Frame {
    w: f64,
    h: f64,
    left: f64,
    top: f64,
    /// Width and height of the plotting area.
    pw: f64,
    ph: f64,
    xmin: f64,
    xmax: f64,
    ymax: f64,
    /// Distance between the y grid lines.
    ystep: f64,
}

impl Frame {
    /// The frame that holds every point of `series`.
    fn of(series: &[Series]) -> Frame {
        let (w, h) = (900.0f64, 520.0f64);
        let (left, right, top, bottom) = (70.0, 250.0, 40.0, 60.0);
        let (pw, ph) = (w - left - right, h - top - bottom);
        let pts = series.iter().flat_map(|s| s.points.iter());
        let xs: Vec<f64> = pts.clone().map(|p| (p.0.max(1) as f64).log2()).collect();
        let (xmin, xmax) = if xs.is_empty() {
            (0.0, 1.0)
        } else {
            let lo = xs.iter().cloned().fold(f64::INFINITY, f64::min).floor();
            let hi = xs.iter().cloned().fold(f64::NEG_INFINITY, f64::max).ceil();
            (lo, if hi > lo { hi } else { lo + 1.0 })
        };
        let ymax_raw = pts
            .map(|p| p.1)
            .filter(|v| v.is_finite())
            .fold(0.0f64, f64::max);
        let ystep = nice_step(ymax_raw / 5.0);
        let ymax = ((ymax_raw / ystep).ceil() * ystep).max(ystep);
        Frame {
            w,
            h,
            left,
            top,
            pw,
            ph,
            xmin,
            xmax,
            ymax,
            ystep,
        }
    }

    /// The picture's x coordinate of log₂ size `x`.
    fn px(&self, x: f64) -> f64 {
        self.left + (x - self.xmin) / (self.xmax - self.xmin) * self.pw
    }

    /// The picture's y coordinate of value `y`.
    fn py(&self, y: f64) -> f64 {
        self.top + self.ph - y / self.ymax * self.ph
    }

    /// The `<svg>` element, a white background and the title.
    fn write_header(&self, s: &mut String, title: &str) {
        let (w, h) = (self.w, self.h);
        let _ = writeln!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#
        );
        let _ = writeln!(s, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
        let _ = writeln!(
            s,
            r#"<text x="{}" y="22" font-size="15" text-anchor="middle">{}</text>"#,
            self.left + self.pw / 2.0,
            escape(title)
        );
    }

    /// The grid lines with their values: y every `ystep`, x every power of two (every
    /// second one past 12).
    fn write_grid(&self, s: &mut String) {
        let (left, top, pw, ph) = (self.left, self.top, self.pw, self.ph);
        let mut y = 0.0;
        while y <= self.ymax + self.ystep * 0.01 {
            let _ = writeln!(
                s,
                r##"<line x1="{left}" y1="{0:.1}" x2="{1:.1}" y2="{0:.1}" stroke="#ddd"/><text x="{2:.1}" y="{3:.1}" text-anchor="end">{4}</text>"##,
                self.py(y),
                left + pw,
                left - 6.0,
                self.py(y) + 4.0,
                trim_float(y)
            );
            y += self.ystep;
        }
        let xstep = if self.xmax - self.xmin > 12.0 {
            2.0
        } else {
            1.0
        };
        let mut x = self.xmin;
        while x <= self.xmax + 1e-9 {
            let _ = writeln!(
                s,
                r##"<line x1="{0:.1}" y1="{top}" x2="{0:.1}" y2="{1:.1}" stroke="#eee"/><text x="{0:.1}" y="{2:.1}" text-anchor="middle">{3}</text>"##,
                self.px(x),
                top + ph,
                top + ph + 18.0,
                size_label(2f64.powf(x).round() as u64)
            );
            x += xstep;
        }
    }

    /// The plotting area's border and the axes' labels.
    fn write_axes(&self, s: &mut String, y_label: &str) {
        let (left, top, pw, ph) = (self.left, self.top, self.pw, self.ph);
        let _ = writeln!(
            s,
            r#"<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="black"/>"#
        );
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="middle">message size (bytes)</text>"#,
            left + pw / 2.0,
            self.h - 15.0
        );
        let _ = writeln!(
            s,
            r#"<text x="18" y="{0}" text-anchor="middle" transform="rotate(-90 18 {0})">{1}</text>"#,
            top + ph / 2.0,
            escape(y_label)
        );
    }

    /// Series `i`: its line through its finite points in size order, and its legend entry.
    fn write_series(&self, s: &mut String, i: usize, ser: &Series) {
        let color = PALETTE[i % PALETTE.len()];
        let mut pts: Vec<(f64, f64)> = ser
            .points
            .iter()
            .filter(|p| p.1.is_finite())
            .map(|p| (self.px((p.0.max(1) as f64).log2()), self.py(p.1)))
            .collect();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        if !pts.is_empty() {
            let path: Vec<String> = pts.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
            let _ = writeln!(
                s,
                r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/>"#,
                path.join(" ")
            );
            for (x, y) in &pts {
                let _ = writeln!(
                    s,
                    r#"<circle cx="{x:.1}" cy="{y:.1}" r="2.5" fill="{color}"/>"#
                );
            }
        }
        let ly = self.top + 10.0 + 18.0 * i as f64;
        let lx = self.left + self.pw + 12.0;
        let _ = writeln!(
            s,
            r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{color}" stroke-width="3"/><text x="{}" y="{}">{}</text>"#,
            lx + 20.0,
            lx + 26.0,
            ly + 4.0,
            escape(&ser.name)
        );
    }
}

fn nice_step(raw: f64) -> f64 {
    if raw.is_nan() || raw <= 0.0 || !raw.is_finite() {
        return 1.0;
    }
    let mag = 10f64.powf(raw.log10().floor());
    let f = raw / mag;
    let nice = if f <= 1.0 {
        1.0
    } else if f <= 2.0 {
        2.0
    } else if f <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * mag
}

fn trim_float(v: f64) -> String {
    let s = format!("{v:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_and_steps() {
        assert_eq!(size_label(1024), "1K");
        assert_eq!(size_label(3 << 20), "3M");
        assert_eq!(size_label(1 << 30), "1G");
        assert_eq!(size_label(1000), "1000");
        assert_eq!(nice_step(0.0), 1.0);
        assert_eq!(nice_step(37.0), 50.0);
        assert_eq!(nice_step(0.15), 0.2);
    }

    #[test]
    fn plot_is_well_formed() {
        let s = svg_plot(
            "t <1>",
            "busbw (GB/s)",
            &[
                Series {
                    name: "a&b".into(),
                    points: vec![(1024, 1.0), (1 << 20, 20.0), (1 << 30, f64::NAN)],
                },
                Series {
                    name: "empty".into(),
                    points: vec![],
                },
            ],
        );
        assert!(s.starts_with("<svg") && s.trim_end().ends_with("</svg>"));
        assert!(s.contains("t &lt;1&gt;") && s.contains("a&amp;b"));
        assert_eq!(s.matches("<polyline").count(), 1);
        assert!(!s.contains("NaN"));
    }
}
