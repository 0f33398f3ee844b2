//! What a catalog writes for people: the README (per collective, the ranges and the
//! per-size comparison with NCCL) and the busbw plots.

use super::{bytes_label, Baseline, Candidate, CollectiveCatalog, Manifest, Options, Point, TIE};
use anyhow::{anyhow, Result};
use runtime::ir::Flavor;
use std::fmt::Write as _;
use std::path::Path;

/// One line of a plot: label, (log2 size, busbw) points, style.
type Series = (String, Vec<(f64, f64)>, plotters::style::ShapeStyle);

/// A baseline line: label, which value of a [`Baseline`], colour.
type BaselineLine = (
    &'static str,
    fn(&Baseline) -> Option<f64>,
    plotters::style::RGBColor,
);

/// Draws the busbw plot of one collective as SVG: one line per candidate, NCCL's baselines
/// and the cut bound, against log2 of the size.
pub(super) fn plot(
    path: &Path,
    title: &str,
    sizes: &[u64],
    candidates: &[Candidate],
    baselines: &[Baseline],
) -> Result<()> {
    use plotters::prelude::*;
    let fail = |e: &dyn std::fmt::Display| anyhow!("{}: cannot draw: {e}", path.display());
    let x = |s: u64| (s as f64).log2();
    let (x0, x1) = (
        x(sizes[0]),
        x(*sizes.last().expect("sizes")).max(x(sizes[0]) + 1.0),
    );
    let mut series: Vec<Series> = Vec::new();
    for (i, c) in candidates.iter().enumerate() {
        series.push((
            c.label.clone(),
            c.points.iter().map(|p| (x(p.size), p.busbw)).collect(),
            Palette99::pick(i).stroke_width(2),
        ));
    }
    let baseline_series: [BaselineLine; 5] = [
        ("NCCL ring (simulated)", |b| b.ring, RGBColor(0, 0, 0)),
        ("NCCL tree (simulated)", |b| b.tree, RGBColor(120, 120, 120)),
        ("NCCL p2p (simulated)", |b| b.p2p, RGBColor(0, 90, 160)),
        (
            "NCCL's choice (simulated)",
            |b| b.nccl_busbw,
            RGBColor(200, 0, 0),
        ),
        ("cut bound", |b| Some(b.bound), RGBColor(220, 0, 0)),
    ];
    for (label, get, color) in baseline_series {
        let pts: Vec<(f64, f64)> = baselines
            .iter()
            .filter_map(|b| get(b).filter(|v| v.is_finite()).map(|v| (x(b.size), v)))
            .collect();
        if !pts.is_empty() {
            series.push((label.to_string(), pts, color.stroke_width(3)));
        }
    }
    let ymax = series
        .iter()
        .flat_map(|s| s.1.iter().map(|p| p.1))
        .filter(|v| v.is_finite())
        .fold(1.0f64, f64::max)
        * 1.08;
    let root = SVGBackend::new(path, (960, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(64)
        .build_cartesian_2d(x0..x1, 0f64..ymax)
        .map_err(|e| fail(&e))?;
    chart
        .configure_mesh()
        .x_desc("message size (nccl-tests bytes, log2 scale)")
        .y_desc("busbw (GB/s)")
        .x_labels(((x1 - x0) / 2.0) as usize + 1)
        .x_label_formatter(&|v| bytes_label(2f64.powf(v.round()) as u64))
        .draw()
        .map_err(|e| fail(&e))?;
    for (label, pts, style) in series {
        chart
            .draw_series(LineSeries::new(pts, style))
            .map_err(|e| fail(&e))?
            .label(label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], style));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| fail(&e))?;
    root.present().map_err(|e| fail(&e))?;
    Ok(())
}

/// A busbw cell of the README's tables: `-` where undefined.
fn cell(v: Option<f64>) -> String {
    v.filter(|x| x.is_finite())
        .map_or_else(|| "-".to_string(), |x| format!("{x:.2}"))
}

/// The README of a catalog: per collective, the ranges and the per-size comparison.
pub fn readme(manifest: &Manifest, options: &Options) -> String {
    let mut s = String::new();
    readme_intro(&mut s, manifest, options);
    for c in &manifest.collectives {
        readme_collective(&mut s, c);
    }
    s
}

/// The README's title and how the catalog was made.
fn readme_intro(s: &mut String, manifest: &Manifest, options: &Options) {
    let _ = writeln!(
        s,
        "# Algorithm catalog: {} ({} ranks)\n",
        manifest.topology, manifest.ranks
    );
    let _ = writeln!(
        s,
        "Written by `synth catalog`. Point `MSCCL_ALGO_DIR` at `{}/` (the runtime parses every \
         file of that folder as an algorithm, so nothing else lives there). Flavor `{}`, \
         protocol Simple.\n",
        manifest.algo_dir, manifest.flavor
    );
    if options.flavor == Flavor::Legacy {
        let _ = writeln!(
            s,
            "The legacy runtime reads `maxBytes` as exclusive and 0 as never: each XML file's \
             `maxBytes` is the range's last size + 1, and the last range's is 2^62, or, for a \
             file that uses scratch, the larger of 2^30 + 1 and the size whose scratch is 1 GiB \
             (the runtime allocates `maxBytes × s_chunks / nchunksperloop` bytes of scratch at \
             start-up); larger calls run NCCL's own algorithm.\n"
        );
    }
    let _ = writeln!(
        s,
        "How it was made: per collective, the candidates are the algorithms found by the \
         search, each lowered with {:?} instance(s) (channels) and verified; every candidate \
         is simulated (`synth simulate`'s alpha-beta model, local copies at {} GB/s) at the \
         grid sizes; the fastest wins (within {:.1}% one with an in-place file, then the fewest chunks per loop), \
         and the switch between two ranges is bisected. Sizes are nccl-tests sizes (`nBytes` \
         of the runtime); a program runs only on whole chunks, so each size is simulated \
         rounded down to a multiple of the program's `nchunksperloop` elements (4-byte \
         floats; at least one element per chunk), and the runtime skips a file (NCCL's own \
         algorithm runs) at sizes whose element count is not such a multiple. Ranges are \
         inclusive `[minBytes, maxBytes]` (executor semantics), disjoint, start at 1 B, and \
         the last has `maxBytes = 0` (no upper limit), so every size is covered. Busbw in GB/s \
         (1e9 B/s); every candidate is simulated under Simple, LL and LL128 (LL up to the model's \
         `ll_max_bytes`) and runs its fastest; NCCL's choice is the algorithm and protocol its \
         tuner picks, simulated the same way (NVLS: its model); NCCL's ring, tree and \
         point-to-point algorithms are also shown with Simple; the bound is the cut bound \
         at that size.\n",
        options.instances,
        options.sim.model.local_bandwidth,
        TIE * 100.0
    );
}

/// One collective's section of the README: the search, the ranges, the per-size table and
/// the notes.
fn readme_collective(s: &mut String, c: &CollectiveCatalog) {
    let _ = writeln!(s, "## {}\n", c.collective);
    let bounds = c.bounds.as_ref().map_or(String::new(), |b| {
        format!(
            "; lower bounds {} steps, {} rounds per chunk",
            b.steps, b.rounds_per_chunk
        )
    });
    let _ = writeln!(
        s,
        "Search: {} ({}), {:.1} s{bounds}; {} candidate(s); cut bound {:.1} GB/s at large \
         sizes. Plot: [{}]({}).\n",
        c.method,
        if c.complete { "complete" } else { "partial" },
        c.synthesis_seconds,
        c.candidates.len(),
        c.bound_busbw,
        c.svg,
        c.svg
    );
    readme_ranges(s, c);
    readme_sizes(s, c);
    if !c.notes.is_empty() {
        let _ = writeln!(s, "\nNotes:\n");
        for n in &c.notes {
            let _ = writeln!(s, "- {n}");
        }
    }
    let _ = writeln!(s);
}

/// The README's table of one collective's ranges.
fn readme_ranges(s: &mut String, c: &CollectiveCatalog) {
    let _ = writeln!(
        s,
        "| range (bytes) | algorithm | protocol | steps | rounds | chunks | instances | chunks/loop | busbw (first … last grid size) | file |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|");
    for r in &c.ranges {
        let at = |p: &Point| format!("{:.2} @ {}", p.busbw, bytes_label(p.size));
        let bw: Vec<String> = match (r.points.first(), r.points.last()) {
            (Some(a), Some(b)) if r.points.len() > 1 => vec![at(a), at(b)],
            (Some(a), _) => vec![at(a)],
            _ => Vec::new(),
        };
        let _ = writeln!(
            s,
            "| {} – {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.min_bytes,
            if r.max_bytes == 0 {
                "unlimited".to_string()
            } else {
                r.max_bytes.to_string()
            },
            r.algorithm,
            r.protocol.name(),
            r.steps,
            r.rounds,
            r.chunks,
            r.instances,
            r.nchunksperloop,
            bw.join(" … "),
            match &r.file_inplace {
                Some(_) => format!("`{}` (+ `.inplace.xml`)", r.file),
                None => format!("`{}` (no in-place file)", r.file),
            }
        );
    }
}

/// The README's per-size table of one collective: the chosen algorithm next to NCCL's
/// baselines and the bound, at each grid size a range covers.
fn readme_sizes(s: &mut String, c: &CollectiveCatalog) {
    let _ = writeln!(
        s,
        "\n| size | chosen | protocol | simulated size | time (us) | busbw | NCCL's choice | its busbw | NCCL ring (Simple) | NCCL tree (Simple) | NCCL p2p | bound |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|---|---|");
    for b in &c.baselines {
        let Some((r, p)) = c
            .ranges
            .iter()
            .find_map(|r| r.points.iter().find(|p| p.size == b.size).map(|p| (r, p)))
        else {
            continue;
        };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {:.2} | {:.2} | {} | {} | {} | {} | {} | {:.2} |",
            bytes_label(b.size),
            r.algorithm,
            p.protocol.name(),
            p.simulated_bytes,
            p.time_us,
            p.busbw,
            b.nccl.as_deref().unwrap_or("-"),
            cell(b.nccl_busbw),
            cell(b.ring),
            cell(b.tree),
            cell(b.p2p),
            b.bound
        );
    }
}
