//! Drawings: a schedule (which chunk crosses which link in which step) as Graphviz DOT or
//! SVG (`synth draw ALGO.json`), and the Pareto frontier of a search as an SVG plot (`synth
//! --plot FILE`). Both are plain text written by hand, with no drawing library.

use crate::algorithm::{Algorithm, Step};
use anyhow::{bail, Result};
use num_rational::Ratio;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Reads one of synth's algorithm JSON files (what the main command writes) and checks that
/// every send names a rank and an address of its collective, so that a drawing never
/// indexes out of range. Errors are one line naming the file and the field.
pub fn read_algorithm(path: &str) -> Result<Algorithm> {
    let a = Algorithm::read(path)?;
    let ranks = a.collective.ranks;
    let addresses = a.collective.addresses();
    if ranks == 0 {
        bail!("{path}: collective.ranks: an algorithm needs at least 1 rank");
    }
    for (s, step) in a.steps.iter().enumerate() {
        for (i, x) in step.sends.iter().enumerate() {
            if x.src >= ranks || x.dst >= ranks {
                bail!(
                    "{path}: steps[{s}].sends[{i}]: rank {} out of range (the collective has {ranks} ranks)",
                    x.src.max(x.dst)
                );
            }
            if x.chunk >= addresses {
                bail!(
                    "{path}: steps[{s}].sends[{i}].chunk: {} is not an address of the collective (it has {addresses})",
                    x.chunk
                );
            }
        }
    }
    Ok(a)
}

/// A chunk's label: the address, or `ORIGINAL.PIECE` when chunks are split (C > 1).
fn chunk_label(a: &Algorithm, address: usize) -> String {
    let c = a.chunks().max(1);
    if c == 1 {
        address.to_string()
    } else {
        format!("{}.{}", address / c, address % c)
    }
}

/// The sends of each step grouped by link: `(src, dst) -> chunk labels`.
fn links_per_step(a: &Algorithm) -> Vec<BTreeMap<(usize, usize), Vec<String>>> {
    a.steps
        .iter()
        .map(|step| {
            let mut links: BTreeMap<(usize, usize), Vec<String>> = BTreeMap::new();
            for x in &step.sends {
                links
                    .entry((x.src, x.dst))
                    .or_default()
                    .push(chunk_label(a, x.chunk));
            }
            links
        })
        .collect()
}

/// Escapes text for XML (SVG) and for a double-quoted DOT string.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// One line of text summarising an algorithm.
fn title(a: &Algorithm) -> String {
    format!(
        "{}: {} on {} ({} ranks), {} steps, {} rounds, {} chunks",
        a.name,
        a.collective.kind,
        a.topology,
        a.collective.ranks,
        a.num_steps(),
        a.rounds(),
        a.chunks()
    )
}

/// A step's rounds and whether it reduces: `2 rounds, reduce`.
fn rounds_text(step: &Step) -> String {
    format!(
        "{} round{}{}",
        step.rounds,
        if step.rounds == 1 { "" } else { "s" },
        if step.reduce { ", reduce" } else { "" }
    )
}

/// The schedule as a time-expanded Graphviz graph: one column of ranks per point in time
/// (start, after step 1, ...), one edge per link used in a step, labelled with the chunks
/// that cross it (`3` or, with C > 1, `original.piece`); reducing steps are drawn in red.
pub fn schedule_dot(a: &Algorithm) -> String {
    let n = a.collective.ranks;
    let mut s = String::new();
    let _ = writeln!(s, "digraph \"{}\" {{", escape(&a.name));
    let _ = writeln!(s, "  label=\"{}\";\n  labelloc=t;", escape(&title(a)));
    let _ = writeln!(s, "  rankdir=LR;\n  newrank=true;\n  node [shape=circle];");
    for t in 0..=a.num_steps() {
        let label = match t {
            0 => "start".to_string(),
            _ => format!("step {t}: {}", rounds_text(&a.steps[t - 1])),
        };
        let _ = writeln!(s, "  subgraph cluster_t{t} {{\n    label=\"{label}\";");
        for r in 0..n {
            let _ = writeln!(s, "    t{t}_r{r} [label=\"{r}\"];");
        }
        let _ = writeln!(s, "  }}");
    }
    // Invisible edges keep every rank on its row.
    for t in 0..a.num_steps() {
        for r in 0..n {
            let _ = writeln!(s, "  t{t}_r{r} -> t{}_r{r} [style=invis];", t + 1);
        }
    }
    for (i, links) in links_per_step(a).iter().enumerate() {
        let color = if a.steps[i].reduce { "red" } else { "blue" };
        for ((src, dst), chunks) in links {
            let _ = writeln!(
                s,
                "  t{i}_r{src} -> t{}_r{dst} [label=\"{}\", color={color}, fontcolor={color}];",
                i + 1,
                chunks.join(",")
            );
        }
    }
    s.push_str("}\n");
    s
}

/// Colours of the SVG drawings (one per source rank in the schedule, one per point).
const COLORS: [&str; 10] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf",
];

/// Where the schedule SVG puts things: ranks are rows, points in time are columns.
struct ScheduleGrid {
    /// Ranks.
    ranks: usize,
    /// Column width, row height, left and top margins.
    col: f64,
    row: f64,
    left: f64,
    top: f64,
}

impl ScheduleGrid {
    /// The grid of `a`: columns widen with the ranks so that the labels of crossing arrows
    /// separate.
    fn of(a: &Algorithm) -> ScheduleGrid {
        let n = a.collective.ranks;
        ScheduleGrid {
            ranks: n,
            col: (120.0 + 30.0 * n as f64).min(600.0),
            row: 44.0,
            left: 70.0,
            top: 80.0,
        }
    }

    /// The x of point in time `t` (0: the start).
    fn x(&self, t: usize) -> f64 {
        self.left + self.col * t as f64
    }

    /// The y of rank `r`.
    fn y(&self, r: usize) -> f64 {
        self.top + self.row * r as f64
    }
}

/// The schedule as SVG: ranks are rows, points in time are columns (start, after step 1,
/// ...); an arrow from rank u at time s-1 to rank v at time s for every link used in step s,
/// labelled with the chunks that cross it and coloured by the sending rank; dashed arrows
/// reduce.
pub fn schedule_svg(a: &Algorithm) -> String {
    let g = ScheduleGrid::of(a);
    let (n, steps) = (g.ranks, a.num_steps());
    let width = (g.left + g.col * steps as f64 + 80.0).max(20.0 + 7.5 * title(a).len() as f64);
    let height = g.top + g.row * n.saturating_sub(1) as f64 + 50.0;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width:.0}\" height=\"{height:.0}\" viewBox=\"0 0 {width:.0} {height:.0}\" font-family=\"sans-serif\" font-size=\"12\">"
    );
    let _ = writeln!(
        s,
        "<defs><marker id=\"arrow\" viewBox=\"0 0 10 10\" refX=\"10\" refY=\"5\" markerWidth=\"6\" markerHeight=\"6\" orient=\"auto-start-reverse\"><path d=\"M 0 0 L 10 5 L 0 10 z\" fill=\"context-stroke\"/></marker></defs>"
    );
    let _ = writeln!(s, "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>");
    let _ = writeln!(
        s,
        "<text x=\"10\" y=\"22\" font-size=\"15\">{}</text>",
        escape(&title(a))
    );
    svg_columns(&mut s, a, &g);
    for r in 0..n {
        let _ = writeln!(
            s,
            "<text x=\"12\" y=\"{:.1}\">rank {r}</text>",
            g.y(r) + 4.0
        );
    }
    svg_arrows(&mut s, a, &g);
    for t in 0..=steps {
        for r in 0..n {
            let _ = writeln!(
                s,
                "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"8\" fill=\"white\" stroke=\"black\"/><text x=\"{:.1}\" y=\"{:.1}\" font-size=\"9\" text-anchor=\"middle\">{r}</text>",
                g.x(t),
                g.y(r),
                g.x(t),
                g.y(r) + 3.0
            );
        }
    }
    s.push_str("</svg>\n");
    s
}

/// Each point in time's heading (the start, then each step with its rounds) and its
/// vertical grid line.
fn svg_columns(s: &mut String, a: &Algorithm, g: &ScheduleGrid) {
    for t in 0..=a.num_steps() {
        let label = match t {
            0 => "start".to_string(),
            _ => format!("step {t} ({})", rounds_text(&a.steps[t - 1])),
        };
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-weight=\"bold\">{label}</text>",
            g.x(t),
            g.top - 30.0
        );
        let _ = writeln!(
            s,
            "<line x1=\"{0:.1}\" y1=\"{1:.1}\" x2=\"{0:.1}\" y2=\"{2:.1}\" stroke=\"#dddddd\"/>",
            g.x(t),
            g.top - 18.0,
            g.y(g.ranks.saturating_sub(1)) + 18.0
        );
    }
}

/// One arrow per link and step, labelled with its chunks and coloured by the sender;
/// dashed where the step reduces.
fn svg_arrows(s: &mut String, a: &Algorithm, g: &ScheduleGrid) {
    let n = g.ranks;
    for (i, links) in links_per_step(a).iter().enumerate() {
        let dash = if a.steps[i].reduce {
            " stroke-dasharray=\"6 3\""
        } else {
            ""
        };
        for ((src, dst), chunks) in links {
            let color = COLORS[src % COLORS.len()];
            let (x1, y1, x2, y2) = (g.x(i) + 8.0, g.y(*src), g.x(i + 1) - 9.0, g.y(*dst));
            let _ = writeln!(
                s,
                "<line x1=\"{x1:.1}\" y1=\"{y1:.1}\" x2=\"{x2:.1}\" y2=\"{y2:.1}\" stroke=\"{color}\" stroke-width=\"1.5\"{dash} marker-end=\"url(#arrow)\"><title>step {}: {src} -> {dst}: {}</title></line>",
                i + 1,
                chunks.join(", ")
            );
            // Labels sit further along the arrow the higher the receiving rank, so that the
            // labels of arrows that leave one rank do not overlap.
            let f = 0.15 + 0.7 * *dst as f64 / n.saturating_sub(1).max(1) as f64;
            let (lx, ly) = (x1 + (x2 - x1) * f, y1 + (y2 - y1) * f - 3.0);
            let _ = writeln!(
                s,
                "<text x=\"{lx:.1}\" y=\"{ly:.1}\" fill=\"{color}\" font-size=\"10\" text-anchor=\"middle\">{}</text>",
                escape(&chunks.join(","))
            );
        }
    }
}

/// One point of a Pareto plot: steps (latency), rounds, chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParetoPoint {
    /// Steps S.
    pub steps: usize,
    /// Total rounds R.
    pub rounds: u64,
    /// Chunks C.
    pub chunks: usize,
}

impl ParetoPoint {
    /// The point of an algorithm.
    pub fn of(a: &Algorithm) -> ParetoPoint {
        ParetoPoint {
            steps: a.num_steps(),
            rounds: u64::from(a.rounds()),
            chunks: a.chunks(),
        }
    }

    fn rounds_per_chunk(&self) -> f64 {
        self.rounds as f64 / self.chunks.max(1) as f64
    }
}

/// Where the Pareto plot puts things: the canvas, its margins and the ranges of its axes.
struct ParetoFrame {
    /// Width and height of the canvas.
    w: f64,
    h: f64,
    /// Margins.
    left: f64,
    right: f64,
    top: f64,
    bottom: f64,
    /// The steps at the ends of the x axis.
    smin: usize,
    smax: usize,
    /// The R/C at the top of the y axis.
    ymax: f64,
    /// The rounds-per-chunk bound as a number.
    rpc_bound: f64,
}

impl ParetoFrame {
    /// A frame that holds every point and both bounds, with a step of room on either side
    /// and 15% above.
    fn of(points: &[ParetoPoint], steps_bound: usize, rpc_bound: Ratio<u64>) -> ParetoFrame {
        let rpc_bound = *rpc_bound.numer() as f64 / (*rpc_bound.denom()).max(1) as f64;
        let steps = || points.iter().map(|p| p.steps).chain([steps_bound]);
        ParetoFrame {
            w: 720.0,
            h: 480.0,
            left: 80.0,
            right: 30.0,
            top: 50.0,
            bottom: 60.0,
            smin: steps().min().unwrap_or(0).saturating_sub(1),
            smax: steps().max().unwrap_or(1) + 1,
            ymax: points
                .iter()
                .map(ParetoPoint::rounds_per_chunk)
                .chain([rpc_bound])
                .fold(0.0f64, f64::max)
                .max(1e-9)
                * 1.15,
            rpc_bound,
        }
    }

    /// The x of `s` steps.
    fn px(&self, s: f64) -> f64 {
        self.left
            + (s - self.smin as f64) / (self.smax - self.smin).max(1) as f64
                * (self.w - self.left - self.right)
    }

    /// The y of `v` rounds per chunk.
    fn py(&self, v: f64) -> f64 {
        self.h - self.bottom - v / self.ymax * (self.h - self.top - self.bottom)
    }
}

/// The Pareto frontier as an SVG plot: steps (the latency cost) across, rounds per chunk R/C
/// (the bandwidth cost) up, one labelled point `(S, R, C)` per algorithm joined by the
/// frontier's staircase, and the two lower bounds as dashed red lines.
pub fn pareto_svg(
    title: &str,
    points: &[ParetoPoint],
    steps_bound: usize,
    rounds_per_chunk_bound: Ratio<u64>,
) -> String {
    let f = ParetoFrame::of(points, steps_bound, rounds_per_chunk_bound);
    let (w, h) = (f.w, f.h);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" font-family=\"sans-serif\" font-size=\"12\">"
    );
    let _ = writeln!(s, "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>");
    let _ = writeln!(
        s,
        "<text x=\"{}\" y=\"28\" font-size=\"16\" text-anchor=\"middle\">{}</text>",
        w / 2.0,
        escape(title)
    );
    pareto_axes(&mut s, &f);
    pareto_bounds(&mut s, &f, steps_bound, rounds_per_chunk_bound);
    pareto_frontier(&mut s, &f, points);
    s.push_str("</svg>\n");
    s
}

/// The axes, their ticks and labels.
fn pareto_axes(s: &mut String, f: &ParetoFrame) {
    let (w, h, left, right, top, bottom) = (f.w, f.h, f.left, f.right, f.top, f.bottom);
    let (x0, y0) = (f.px(f.smin as f64), f.py(0.0));
    let _ = writeln!(
        s,
        "<path d=\"M {x0:.1} {:.1} L {x0:.1} {y0:.1} L {:.1} {y0:.1}\" fill=\"none\" stroke=\"black\"/>",
        top - 10.0,
        w - right + 10.0
    );
    for st in f.smin..=f.smax {
        let _ = writeln!(
            s,
            "<line x1=\"{0:.1}\" y1=\"{y0:.1}\" x2=\"{0:.1}\" y2=\"{1:.1}\" stroke=\"black\"/><text x=\"{0:.1}\" y=\"{2:.1}\" text-anchor=\"middle\">{st}</text>",
            f.px(st as f64),
            y0 + 5.0,
            y0 + 20.0
        );
    }
    for k in 0..=5 {
        let v = f.ymax / 1.15 * k as f64 / 5.0;
        let _ = writeln!(
            s,
            "<line x1=\"{0:.1}\" y1=\"{1:.1}\" x2=\"{2:.1}\" y2=\"{1:.1}\" stroke=\"black\"/><text x=\"{3:.1}\" y=\"{4:.1}\" text-anchor=\"end\">{v:.3}</text>",
            x0 - 5.0,
            f.py(v),
            x0,
            x0 - 8.0,
            f.py(v) + 4.0
        );
    }
    let _ = writeln!(
        s,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">steps S (latency cost)</text>",
        (left + w - right) / 2.0,
        h - 18.0
    );
    let _ = writeln!(
        s,
        "<text transform=\"translate(20 {:.1}) rotate(-90)\" text-anchor=\"middle\">rounds per chunk R/C (bandwidth cost)</text>",
        (top + h - bottom) / 2.0
    );
}

/// The two lower bounds as dashed red lines.
fn pareto_bounds(
    s: &mut String,
    f: &ParetoFrame,
    steps_bound: usize,
    rounds_per_chunk_bound: Ratio<u64>,
) {
    let (x0, y0) = (f.px(f.smin as f64), f.py(0.0));
    let _ = writeln!(
        s,
        "<line x1=\"{0:.1}\" y1=\"{1:.1}\" x2=\"{0:.1}\" y2=\"{y0:.1}\" stroke=\"#d62728\" stroke-dasharray=\"6 4\"/><text x=\"{2:.1}\" y=\"{3:.1}\" fill=\"#d62728\">steps bound {steps_bound}</text>",
        f.px(steps_bound as f64),
        f.top,
        f.px(steps_bound as f64) + 4.0,
        f.top + 10.0
    );
    let _ = writeln!(
        s,
        "<line x1=\"{x0:.1}\" y1=\"{0:.1}\" x2=\"{1:.1}\" y2=\"{0:.1}\" stroke=\"#d62728\" stroke-dasharray=\"6 4\"/><text x=\"{2:.1}\" y=\"{3:.1}\" fill=\"#d62728\" text-anchor=\"end\">R/C bound {rounds_per_chunk_bound}</text>",
        f.py(f.rpc_bound),
        f.w - f.right,
        f.w - f.right,
        f.py(f.rpc_bound) - 5.0
    );
}

/// The frontier's staircase, then its points, each labelled `(S, R, C)`.
fn pareto_frontier(s: &mut String, f: &ParetoFrame, points: &[ParetoPoint]) {
    let mut sorted = points.to_vec();
    sorted.sort_by(|a, b| {
        a.steps
            .cmp(&b.steps)
            .then(a.rounds_per_chunk().total_cmp(&b.rounds_per_chunk()))
    });
    if sorted.len() > 1 {
        let mut d = String::new();
        for (i, p) in sorted.iter().enumerate() {
            let (x, y) = (f.px(p.steps as f64), f.py(p.rounds_per_chunk()));
            if i == 0 {
                let _ = write!(d, "M {x:.1} {y:.1}");
            } else {
                let _ = write!(d, " H {x:.1} V {y:.1}");
            }
        }
        let _ = writeln!(
            s,
            "<path d=\"{d}\" fill=\"none\" stroke=\"#999999\" stroke-width=\"1.5\"/>"
        );
    }
    for (i, p) in sorted.iter().enumerate() {
        let (x, y) = (f.px(p.steps as f64), f.py(p.rounds_per_chunk()));
        let color = COLORS[i % COLORS.len()];
        let _ = writeln!(
            s,
            "<circle cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"5\" fill=\"{color}\"><title>{} steps, {} rounds, {} chunks: R/C = {}</title></circle><text x=\"{:.1}\" y=\"{:.1}\" fill=\"{color}\">({}, {}, {})</text>",
            p.steps,
            p.rounds,
            p.chunks,
            Ratio::new(p.rounds, p.chunks.max(1) as u64),
            x + 8.0,
            y - 8.0,
            p.steps,
            p.rounds,
            p.chunks
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::{Send, Step};
    use crate::collective::{Collective, Kind};

    fn ring3() -> Algorithm {
        let step = |shift: usize| Step {
            rounds: 1,
            reduce: false,
            sends: (0..3)
                .map(|r| Send {
                    chunk: (r + 3 - shift) % 3,
                    src: r,
                    dst: (r + 1) % 3,
                })
                .collect(),
        };
        Algorithm {
            name: "allgather-ring_3-s2-r2-c1".into(),
            origin: Default::default(),
            topology: "ring:3".into(),
            collective: Collective::new(Kind::AllGather, 3, 0, 1).unwrap(),
            steps: vec![step(0), step(1)],
            piece_channels: None,
            step_groups: None,
            message_chunks: None,
            serial_links: false,
            rank_order: None,
        }
    }

    #[test]
    fn dot_has_one_edge_per_link_and_step() {
        let dot = schedule_dot(&ring3());
        assert!(dot.starts_with("digraph \"allgather-ring_3-s2-r2-c1\""));
        assert_eq!(dot.matches(", color=blue,").count(), 6);
        assert!(dot.contains("t0_r0 -> t1_r1 [label=\"0\""), "{dot}");
        assert!(dot.contains("t1_r0 -> t2_r1 [label=\"2\""), "{dot}");
    }

    #[test]
    fn svg_has_one_arrow_per_link_and_step() {
        let svg = schedule_svg(&ring3());
        assert_eq!(svg.matches("marker-end=").count(), 6);
        assert_eq!(svg.matches("<circle").count(), 9);
        assert!(svg.contains("<title>step 2: 0 -> 1: 2</title>"), "{svg}");
    }

    #[test]
    fn pareto_plot_labels_every_point_and_bound() {
        let points = [
            ParetoPoint {
                steps: 2,
                rounds: 3,
                chunks: 2,
            },
            ParetoPoint {
                steps: 3,
                rounds: 7,
                chunks: 6,
            },
        ];
        let svg = pareto_svg("dgx1 allgather", &points, 2, Ratio::new(7, 6));
        assert_eq!(svg.matches("<circle").count(), 2);
        assert!(svg.contains("(2, 3, 2)") && svg.contains("(3, 7, 6)"));
        assert!(svg.contains("R/C bound 7/6") && svg.contains("steps bound 2"));
    }
}
