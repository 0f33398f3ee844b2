//! `synth fuse WORKLOAD.toml --topo T`: the schedules of an allreduce followed by an
//! elementwise computation (plain, reduce-scatter / compute on the slice / allgather, fused;
//! each with and without a producer's overlap), simulated against max(T_compute, T_comm)
//! and T_compute + T_comm; the best is written as synth's IR JSON (MSCCL XML cannot hold a
//! compute).

use crate::baseline::{self, BaselineOptions};
use crate::fuse::workload::{compare, Workload};
use crate::topology;
use anyhow::{anyhow, Context, Result};
use clap::Args;
use runtime::ir::{Collective, Flavor, Program};
use std::io::Write;
use std::path::PathBuf;

/// Arguments of `synth fuse`.
#[derive(Debug, Args)]
pub struct FuseArgs {
    /// The workload (TOML: collective, size, dtype, epilogue, memory_bandwidth, optional
    /// launch_us, seed, [scalars], [producer] with tiles and time_us).
    workload: PathBuf,
    /// Topology: a built-in name (e.g. `dgx-a100x2`) or a TOML / nvidia-smi file.
    #[arg(long)]
    topo: String,
    /// The reduce-scatter to build on (MSCCL XML, program or algorithm JSON); NCCL's ring
    /// on the fabric by default.
    #[arg(long, requires = "ag")]
    rs: Option<String>,
    /// The allgather to build on (as `--rs`).
    #[arg(long, requires = "rs")]
    ag: Option<String>,
    /// Where the best schedule's program JSON goes.
    #[arg(long, default_value = "fused.json")]
    out: PathBuf,
}

/// Runs `synth fuse`.
pub fn run(args: &FuseArgs, json: bool, out: &mut dyn Write) -> Result<()> {
    let path = args.workload.display().to_string();
    let text =
        std::fs::read_to_string(&args.workload).map_err(|e| anyhow!("{path}: cannot read: {e}"))?;
    let w = Workload::parse(&text).map_err(|e| anyhow!("{path}: {e}"))?;
    let topo = topology::load(&args.topo)?;
    let (rs, ag) = match (&args.rs, &args.ag) {
        (Some(rs), Some(ag)) => (read(rs, &args.topo)?, read(ag, &args.topo)?),
        _ => {
            let ring = |c: Collective| {
                baseline::ring(c, &topo, &BaselineOptions::default())
                    .with_context(|| format!("NCCL's ring {c} on {}", topo.name))
            };
            (
                ring(Collective::ReduceScatter)?,
                ring(Collective::AllGather)?,
            )
        }
    };
    let cmp = compare(&w, &rs, &ag, &topo)?;
    std::fs::write(&args.out, cmp.best_program.to_json())
        .map_err(|e| anyhow!("{}: cannot write: {e}", args.out.display()))?;
    let no_xml = runtime::xml::write(&cmp.best_program, Flavor::Nccl)
        .err()
        .map(|e| e.to_string());
    if json {
        let doc = serde_json::json!({
            "workload": path,
            "topology": topo.name,
            "ranks": topo.ranks,
            "size": w.size,
            "reduce_scatter": rs.name,
            "allgather": ag.name,
            "compute": w.compute,
            "comm_us": cmp.comm_us,
            "producer_us": cmp.producer_us,
            "rows": cmp.rows,
            "best": cmp.rows[cmp.best],
            "out": args.out.display().to_string(),
            "xml": no_xml,
        });
        writeln!(out, "{}", serde_json::to_string_pretty(&doc)?)?;
        return Ok(());
    }
    writeln!(
        out,
        "# {} on {} ({} ranks), {} bytes; pair {} + {}; T_comm {:.1} us, T_producer {:.1} us",
        path, topo.name, topo.ranks, w.size, rs.name, ag.name, cmp.comm_us, cmp.producer_us
    )?;
    writeln!(
        out,
        "{:<24} {:>7} {:>12} {:>12} {:>12} {:>12}",
        "schedule", "overlap", "time_us", "compute_us", "max_us", "sum_us"
    )?;
    for (i, r) in cmp.rows.iter().enumerate() {
        writeln!(
            out,
            "{:<24} {:>7} {:>12.1} {:>12.1} {:>12.1} {:>12.1}{}",
            r.schedule,
            if r.overlap { "yes" } else { "no" },
            r.time_us,
            r.compute_us,
            r.max_us,
            r.sum_us,
            if i == cmp.best { "  <- best" } else { "" }
        )?;
    }
    writeln!(
        out,
        "wrote {} ({})",
        args.out.display(),
        cmp.best_program.name
    )?;
    if let Some(why) = no_xml {
        writeln!(out, "no MSCCL XML: {why}")?;
    }
    Ok(())
}

/// A program from a file, verified.
fn read(path: &str, topo: &str) -> Result<Program> {
    let (p, _, _) = super::lower_cmd::read_any_noted(path, Some(topo))?;
    runtime::verify::verify(&p).with_context(|| format!("{path} does not verify"))?;
    Ok(p)
}
