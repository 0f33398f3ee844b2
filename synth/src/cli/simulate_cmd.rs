//! `synth simulate FILE.xml --topo T --sizes 1K:1G`: simulates an MSCCL XML algorithm on a
//! topology and prints, per size, its time, algbw and busbw next to the busbw of the NCCL
//! ring, tree and point-to-point baselines (simulated the same way; see [`crate::baseline`]),
//! of NCCL's own model, and the cut bound.

use crate::baseline::{self, BaselineOptions};
use crate::cutbound::CutBound;
use crate::simulate::{simulate, SimOptions};
use crate::topology::{self, Topology};
use anyhow::{anyhow, bail, Result};
use clap::Args;
use runtime::ir::Program;
use serde::Serialize;
use std::io::Write;
use std::path::PathBuf;

/// Arguments of `synth simulate`.
#[derive(Debug, Args)]
pub struct SimulateArgs {
    /// MSCCL XML file of the algorithm, or an algorithm JSON (synth's or msccl-tools'),
    /// lowered out of place with the default options.
    file: PathBuf,
    /// Topology: a built-in name (e.g. `dgx-a100x2`) or a TOML / nvidia-smi file.
    #[arg(long)]
    topo: String,
    /// Sizes (nccl-tests' size: bytes of the larger buffer): `MIN:MAX[:FACTOR]` (doubling by
    /// default) or one size, with K/M/G suffixes.
    #[arg(long, default_value = "1K:1G")]
    sizes: String,
    #[command(flatten)]
    model: super::model_args::ModelArgs,
}

/// One row of the table (busbw columns in GB/s; `None` where a baseline is undefined).
#[derive(Debug, Serialize)]
struct Row {
    size: u64,
    time_us: f64,
    algbw: f64,
    busbw: f64,
    ring_busbw: Option<f64>,
    tree_busbw: Option<f64>,
    p2p_busbw: Option<f64>,
    nccl_model_busbw: Option<f64>,
    nccl_model_algo: Option<String>,
    nccl_model_protocol: Option<String>,
    bound_busbw: f64,
}

/// Runs `synth simulate`.
pub fn run(args: &SimulateArgs, json: bool, out: &mut dyn Write) -> Result<()> {
    let file = args.file.display().to_string();
    let (program, _, notes) = super::lower_cmd::read_any_noted(&file, Some(&args.topo))?;
    let topo = topology::load(&args.topo)?;
    if program.ngpus != topo.ranks {
        bail!(
            "{}: the algorithm has {} ranks but topology '{}' has {}",
            args.file.display(),
            program.ngpus,
            topo.name,
            topo.ranks
        );
    }
    let sizes = runtime::cpu::parse_sizes(&args.sizes).map_err(|e| anyhow!("--sizes: {e:#}"))?;
    let opts = args.model.sim_options()?;
    let bound = CutBound::new(program.collective, &topo, program.root);
    let rows = simulate_rows(&program, &topo, &sizes, &opts, &bound)?;
    if json {
        let doc = serde_json::json!({
            "file": args.file.display().to_string(),
            "algorithm": program.name,
            "collective": program.collective.to_string(),
            "topology": topo.name,
            "ranks": topo.ranks,
            "bound_busbw_large": bound.busbw(),
            "bound_binding_cut": bound.binding,
            "rows": rows,
            "notes": notes.lines(),
            "runtimes": notes.json()["runtimes"],
            "postcondition_known": notes.postcondition_known,
        });
        writeln!(out, "{}", serde_json::to_string_pretty(&doc)?)?;
        return Ok(());
    }
    print_rows(&program, &topo, &bound, &rows, out)?;
    notes.print_stderr();
    Ok(())
}

/// Simulates `program` at each of `sizes`, and NCCL's baselines (those defined for its
/// collective) at the size the program was simulated at, beside NCCL's own model and the
/// bound.
fn simulate_rows(
    program: &Program,
    topo: &Topology,
    sizes: &[u64],
    opts: &SimOptions,
    bound: &CutBound,
) -> Result<Vec<Row>> {
    let coll = program.collective;
    let base = BaselineOptions {
        channels: None,
        root: program.root,
    };
    let ring = baseline::ring(coll, topo, &base).ok();
    let tree = baseline::tree(coll, topo, &base).ok();
    let p2p = baseline::p2p(coll, topo, &base).ok();
    let sim_busbw = |p: &Option<Program>, size: u64| -> Result<Option<f64>> {
        match p {
            Some(p) => Ok(Some(simulate(p, topo, size, opts)?.busbw)),
            None => Ok(None),
        }
    };
    let mut rows = Vec::with_capacity(sizes.len());
    for &size in sizes {
        let r = simulate(program, topo, size, opts)?;
        let model = baseline::nccl_model_busbw(coll, topo, r.size_bytes, &opts.model.nccl).ok();
        rows.push(Row {
            size: r.size_bytes,
            time_us: r.time_us,
            algbw: r.algbw,
            busbw: r.busbw,
            ring_busbw: sim_busbw(&ring, r.size_bytes)?,
            tree_busbw: sim_busbw(&tree, r.size_bytes)?,
            p2p_busbw: sim_busbw(&p2p, r.size_bytes)?,
            nccl_model_busbw: model.map(|m| m.0),
            nccl_model_algo: model.map(|m| m.1.algo.name().to_string()),
            nccl_model_protocol: model.map(|m| m.1.protocol.name().to_string()),
            bound_busbw: bound.busbw_at(r.size_bytes),
        });
    }
    Ok(rows)
}

/// Prints the rows as a table under a heading naming the program, the fabric and the bound.
fn print_rows(
    program: &Program,
    topo: &Topology,
    bound: &CutBound,
    rows: &[Row],
    out: &mut dyn Write,
) -> Result<()> {
    writeln!(
        out,
        "# {} ({}, {} ranks) on {}; busbw in GB/s; bound at large sizes {:.1} GB/s ({})",
        program.name,
        program.collective,
        program.ngpus,
        topo.name,
        bound.busbw(),
        bound.binding
    )?;
    writeln!(
        out,
        "{:>12} {:>12} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>12} {:>9}",
        "size(B)",
        "time(us)",
        "algbw",
        "busbw",
        "ring",
        "tree",
        "p2p",
        "model",
        "model-pick",
        "bound"
    )?;
    let cell = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |x| format!("{x:.2}"));
    for r in rows {
        writeln!(
            out,
            "{:>12} {:>12.2} {:>9.2} {:>9.2} {:>9} {:>9} {:>9} {:>9} {:>12} {:>9.2}",
            r.size,
            r.time_us,
            r.algbw,
            r.busbw,
            cell(r.ring_busbw),
            cell(r.tree_busbw),
            cell(r.p2p_busbw),
            cell(r.nccl_model_busbw),
            match (&r.nccl_model_algo, &r.nccl_model_protocol) {
                (Some(a), Some(p)) => format!("{a}/{p}"),
                _ => "-".into(),
            },
            r.bound_busbw
        )?;
    }
    Ok(())
}
