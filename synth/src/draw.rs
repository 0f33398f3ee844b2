//! Drawings: a schedule (which chunk crosses which link in which step) as Graphviz DOT or
//! SVG (`synth draw ALGO.json`), and the Pareto frontier of a search as an SVG plot (`synth
//! --plot FILE`). Both are plain text written by hand, with no drawing library.

use crate::algorithm::Algorithm;
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
            _ => {
                let step = &a.steps[t - 1];
                format!(
                    "step {t}: {} round{}{}",
                    step.rounds,
                    if step.rounds == 1 { "" } else { "s" },
                    if step.reduce { ", reduce" } else { "" }
                )
            }
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

/// The schedule as SVG: ranks are rows, points in time are columns (start, after step 1,
/// ...); an arrow from rank u at time s-1 to rank v at time s for every link used in step s,
/// labelled with the chunks that cross it and coloured by the sending rank; dashed arrows
/// reduce.
pub fn schedule_svg(a: &Algorithm) -> String {
    let n = a.collective.ranks;
    let steps = a.num_steps();
    // Columns widen with the ranks so that the labels of crossing arrows separate.
    let (col, row, left, top) = ((120.0 + 30.0 * n as f64).min(600.0), 44.0, 70.0, 80.0);
    let width = (left + col * steps as f64 + 80.0).max(20.0 + 7.5 * title(a).len() as f64);
    let height = top + row * n.saturating_sub(1) as f64 + 50.0;
    let x = |t: usize| left + col * t as f64;
    let y = |r: usize| top + row * r as f64;
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
    for t in 0..=steps {
        let label = match t {
            0 => "start".to_string(),
            _ => format!(
                "step {t} ({} round{}{})",
                a.steps[t - 1].rounds,
                if a.steps[t - 1].rounds == 1 { "" } else { "s" },
                if a.steps[t - 1].reduce {
                    ", reduce"
                } else {
                    ""
                }
            ),
        };
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-weight=\"bold\">{label}</text>",
            x(t),
            top - 30.0
        );
        let _ = writeln!(
            s,
            "<line x1=\"{0:.1}\" y1=\"{1:.1}\" x2=\"{0:.1}\" y2=\"{2:.1}\" stroke=\"#dddddd\"/>",
            x(t),
            top - 18.0,
            y(n.saturating_sub(1)) + 18.0
        );
    }
    for r in 0..n {
        let _ = writeln!(s, "<text x=\"12\" y=\"{:.1}\">rank {r}</text>", y(r) + 4.0);
    }
    for (i, links) in links_per_step(a).iter().enumerate() {
        let dash = if a.steps[i].reduce {
            " stroke-dasharray=\"6 3\""
        } else {
            ""
        };
        for ((src, dst), chunks) in links {
            let color = COLORS[src % COLORS.len()];
            let (x1, y1, x2, y2) = (x(i) + 8.0, y(*src), x(i + 1) - 9.0, y(*dst));
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
    for t in 0..=steps {
        for r in 0..n {
            let _ = writeln!(
                s,
                "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"8\" fill=\"white\" stroke=\"black\"/><text x=\"{:.1}\" y=\"{:.1}\" font-size=\"9\" text-anchor=\"middle\">{r}</text>",
                x(t),
                y(r),
                x(t),
                y(r) + 3.0
            );
        }
    }
    s.push_str("</svg>\n");
    s
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

/// The Pareto frontier as an SVG plot: steps (the latency cost) across, rounds per chunk R/C
/// (the bandwidth cost) up, one labelled point `(S, R, C)` per algorithm joined by the
/// frontier's staircase, and the two lower bounds as dashed red lines.
pub fn pareto_svg(
    title: &str,
    points: &[ParetoPoint],
    steps_bound: usize,
    rounds_per_chunk_bound: Ratio<u64>,
) -> String {
    let (w, h, left, right, top, bottom) = (720.0, 480.0, 80.0, 30.0, 50.0, 60.0);
    let rpc_bound =
        *rounds_per_chunk_bound.numer() as f64 / (*rounds_per_chunk_bound.denom()).max(1) as f64;
    let smin = points
        .iter()
        .map(|p| p.steps)
        .chain([steps_bound])
        .min()
        .unwrap_or(0)
        .saturating_sub(1);
    let smax = points
        .iter()
        .map(|p| p.steps)
        .chain([steps_bound])
        .max()
        .unwrap_or(1)
        + 1;
    let ymax = points
        .iter()
        .map(ParetoPoint::rounds_per_chunk)
        .chain([rpc_bound])
        .fold(0.0f64, f64::max)
        .max(1e-9)
        * 1.15;
    let px = |s: f64| left + (s - smin as f64) / (smax - smin).max(1) as f64 * (w - left - right);
    let py = |v: f64| h - bottom - v / ymax * (h - top - bottom);
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
    // Axes, ticks and their labels.
    let (x0, y0) = (px(smin as f64), py(0.0));
    let _ = writeln!(
        s,
        "<path d=\"M {x0:.1} {:.1} L {x0:.1} {y0:.1} L {:.1} {y0:.1}\" fill=\"none\" stroke=\"black\"/>",
        top - 10.0,
        w - right + 10.0
    );
    for st in smin..=smax {
        let _ = writeln!(
            s,
            "<line x1=\"{0:.1}\" y1=\"{y0:.1}\" x2=\"{0:.1}\" y2=\"{1:.1}\" stroke=\"black\"/><text x=\"{0:.1}\" y=\"{2:.1}\" text-anchor=\"middle\">{st}</text>",
            px(st as f64),
            y0 + 5.0,
            y0 + 20.0
        );
    }
    for k in 0..=5 {
        let v = ymax / 1.15 * k as f64 / 5.0;
        let _ = writeln!(
            s,
            "<line x1=\"{0:.1}\" y1=\"{1:.1}\" x2=\"{2:.1}\" y2=\"{1:.1}\" stroke=\"black\"/><text x=\"{3:.1}\" y=\"{4:.1}\" text-anchor=\"end\">{v:.3}</text>",
            x0 - 5.0,
            py(v),
            x0,
            x0 - 8.0,
            py(v) + 4.0
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
    // The lower bounds.
    let _ = writeln!(
        s,
        "<line x1=\"{0:.1}\" y1=\"{1:.1}\" x2=\"{0:.1}\" y2=\"{y0:.1}\" stroke=\"#d62728\" stroke-dasharray=\"6 4\"/><text x=\"{2:.1}\" y=\"{3:.1}\" fill=\"#d62728\">steps bound {steps_bound}</text>",
        px(steps_bound as f64),
        top,
        px(steps_bound as f64) + 4.0,
        top + 10.0
    );
    let _ = writeln!(
        s,
        "<line x1=\"{x0:.1}\" y1=\"{0:.1}\" x2=\"{1:.1}\" y2=\"{0:.1}\" stroke=\"#d62728\" stroke-dasharray=\"6 4\"/><text x=\"{2:.1}\" y=\"{3:.1}\" fill=\"#d62728\" text-anchor=\"end\">R/C bound {rounds_per_chunk_bound}</text>",
        py(rpc_bound),
        w - right,
        w - right,
        py(rpc_bound) - 5.0
    );
    // The frontier's staircase, then its points.
    let mut sorted = points.to_vec();
    sorted.sort_by(|a, b| {
        a.steps
            .cmp(&b.steps)
            .then(a.rounds_per_chunk().total_cmp(&b.rounds_per_chunk()))
    });
    if sorted.len() > 1 {
        let mut d = String::new();
        for (i, p) in sorted.iter().enumerate() {
            let (x, y) = (px(p.steps as f64), py(p.rounds_per_chunk()));
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
        let (x, y) = (px(p.steps as f64), py(p.rounds_per_chunk()));
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
    s.push_str("</svg>\n");
    s
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
