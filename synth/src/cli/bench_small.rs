//! `synth bench --cases small`: small and medium messages (1 KB to 64 MB by ×4) on the
//! benchmark fabrics. Each fabric and collective is catalogued ([`crate::catalog::build`]:
//! every candidate under Simple, LL and LL128, NCCL's choice of algorithm × protocol by its
//! tuner, both simulated), and each size reports synth's fastest candidate and protocol,
//! NCCL's choice, and what the catalog serves there (a range's file, or NCCL).

use super::bench_cmd::BenchArgs;
use crate::catalog::{self, bytes_label, CollectiveCatalog, Options};
use crate::collective::Kind;
use crate::progress::Progress;
use crate::topology;
use anyhow::{Context, Result};
use runtime::ir::Flavor;
use serde::Serialize;
use std::io::Write;

/// The fabrics of the small-message benchmark.
pub const SMALL_FABRICS: &str =
    "dgx1,dgx-a100,dgx-h100,dgx-a100x2,dgx-a100x4,mi250-16,torus-2d:8x8";

/// Its collectives.
const SMALL_COLLECTIVES: &str = "allreduce,allgather,reducescatter,alltoall";

/// Its sizes: 1 KB to 64 MB by ×4.
pub const SMALL_SIZES: &str = "1K:64M:4";

/// Replication counts each candidate is lowered with (the catalog's 4 is left out to keep
/// the benchmark's time down).
const SMALL_INSTANCES: [usize; 2] = [1, 2];

/// One size of one fabric and collective.
#[derive(Debug, Clone, Serialize)]
pub struct SmallRow {
    /// Fabric.
    pub fabric: String,
    /// Collective.
    pub collective: String,
    /// nccl-tests size, bytes.
    pub size: u64,
    /// synth's fastest candidate at this size and its protocol.
    pub synth: Option<(String, String)>,
    /// Its simulated time (µs) and busbw (GB/s).
    pub synth_time_us: Option<f64>,
    /// Its busbw.
    pub synth_busbw: Option<f64>,
    /// NCCL's choice (`algo/protocol`).
    pub nccl: Option<String>,
    /// Its simulated time (µs).
    pub nccl_time_us: Option<f64>,
    /// Its busbw.
    pub nccl_busbw: Option<f64>,
    /// What the catalog serves: `ALGORITHM (PROTOCOL)`, or `NCCL`.
    pub catalog: String,
    /// The error of this fabric and collective, if the catalog failed.
    pub error: Option<String>,
}

/// The rows of one collective's catalog, one per grid size.
fn rows_of(fabric: &str, c: &CollectiveCatalog) -> Vec<SmallRow> {
    (c.baselines.iter().enumerate())
        .map(|(i, b)| {
            let best = (c.candidates.iter())
                .filter_map(|cand| cand.points.get(i).map(|p| (cand, p)))
                .min_by(|x, y| x.1.time_us.total_cmp(&y.1.time_us));
            let served = (c.ranges.iter())
                .find(|r| r.points.iter().any(|p| p.size == b.size))
                .map_or("NCCL".to_string(), |r| {
                    format!("{} ({})", r.algorithm, r.protocol.name())
                });
            SmallRow {
                fabric: fabric.to_string(),
                collective: c.collective.clone(),
                size: b.size,
                synth: best.map(|(c, p)| (c.label.clone(), p.protocol.name().to_string())),
                synth_time_us: best.map(|(_, p)| p.time_us),
                synth_busbw: best.map(|(_, p)| p.busbw),
                nccl: b.nccl.clone(),
                nccl_time_us: b.best_time_us,
                nccl_busbw: b.nccl_busbw,
                catalog: served,
                error: None,
            }
        })
        .collect()
}

/// The markdown line of a row.
fn line(r: &SmallRow) -> String {
    let f = |v: Option<f64>| v.map_or("-".to_string(), |x| format!("{x:.2}"));
    if let Some(e) = &r.error {
        return format!("| {} | {} | | | | | | | | {e} |", r.fabric, r.collective);
    }
    let speedup = match (r.synth_time_us, r.nccl_time_us) {
        (Some(s), Some(n)) if s > 0.0 => format!("{:.2}", n / s),
        _ => "-".into(),
    };
    let (algorithm, protocol) = r.synth.clone().unwrap_or(("-".into(), "-".into()));
    format!(
        "| {} | {} | {} | {algorithm} | {protocol} | {} | {} | {} | {speedup} | {} |",
        r.fabric,
        r.collective,
        bytes_label(r.size),
        f(r.synth_busbw),
        r.nccl.as_deref().unwrap_or("-"),
        f(r.nccl_busbw),
        r.catalog
    )
}

/// Runs the small-message benchmark and prints a markdown table (or `--json`).
pub fn small(args: &BenchArgs, json: bool, out: &mut dyn Write) -> Result<()> {
    let fabrics: Vec<&str> = (args.fabrics.as_deref().unwrap_or(SMALL_FABRICS).split(','))
        .map(str::trim)
        .filter(|f| !f.is_empty())
        .collect();
    let kinds: Vec<Kind> = (args.coll.as_deref().unwrap_or(SMALL_COLLECTIVES).split(','))
        .map(|c| c.trim().parse::<Kind>())
        .collect::<Result<_>>()?;
    let topologies: Vec<_> = (fabrics.iter())
        .map(|f| topology::load(f).with_context(|| format!("--fabrics {f}")))
        .collect::<Result<_>>()?;
    let sim = args.model.sim_options()?;
    let sizes = runtime::cpu::parse_sizes(SMALL_SIZES).map_err(|e| anyhow::anyhow!("{e}"))?;
    let scratch = super::bench_cmd::scratch_dir("small")?;
    let dir = scratch.path();
    if !json {
        writeln!(out, "| fabric | collective | size | synth's best | protocol | busbw | NCCL's choice | busbw | NCCL time / synth time | catalog serves |")?;
        writeln!(out, "|---|---|---|---|---|---|---|---|---|---|")?;
    }
    let mut rows = Vec::new();
    let total = topologies.len() * kinds.len();
    let mut done = 0;
    for (fabric, topology) in fabrics.iter().zip(&topologies) {
        for &kind in &kinds {
            done += 1;
            eprintln!("[{done}/{total}] {fabric} {kind}");
            let options = Options {
                time_limit: args.time_limit,
                instances: SMALL_INSTANCES.to_vec(),
                sizes: sizes.clone(),
                flavor: topology.runtime.unwrap_or(Flavor::Nccl),
                sim,
                ..Options::default()
            };
            let out_dir = dir.join(format!("{}-{kind}", fabric.replace(':', "_")));
            let progress = Progress::new(true);
            let built = catalog::build(topology, &[kind], &out_dir, &options, &progress);
            progress.finish();
            let new: Vec<SmallRow> = match built {
                Ok(m) => m
                    .collectives
                    .iter()
                    .flat_map(|c| rows_of(fabric, c))
                    .collect(),
                Err(e) => vec![SmallRow {
                    fabric: fabric.to_string(),
                    collective: kind.to_string(),
                    size: 0,
                    synth: None,
                    synth_time_us: None,
                    synth_busbw: None,
                    nccl: None,
                    nccl_time_us: None,
                    nccl_busbw: None,
                    catalog: String::new(),
                    error: Some(format!("{e:#}").replace('\n', " ")),
                }],
            };
            if !json {
                for r in &new {
                    writeln!(out, "{}", line(r))?;
                }
                out.flush()?;
            }
            rows.extend(new);
        }
    }
    drop(scratch);
    if json {
        writeln!(out, "{}", serde_json::to_string_pretty(&rows)?)?;
    }
    Ok(())
}
