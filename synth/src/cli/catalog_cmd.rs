//! `synth catalog --topo T --colls allgather,allreduce --out DIR`: the best synthesized
//! algorithm per message-size range, as MSCCL XML files with disjoint `[minBytes, maxBytes]`
//! ranges, a manifest, a README and busbw plots (see [`crate::catalog`]).

use super::limits;
use crate::catalog::{self, bytes_label, Options};
use crate::collective::Kind;
use crate::progress::Progress;
use crate::synthesize::Search;
use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use runtime::ir::Flavor;
use std::io::Write;
use std::path::PathBuf;

/// Arguments of `synth catalog`.
#[derive(Debug, Args)]
pub struct CatalogArgs {
    /// Topology: a built-in name (e.g. `dgx1`, `dgx-a100`) or a TOML / nvidia-smi file.
    #[arg(long)]
    topo: String,
    #[command(flatten)]
    nodes: super::nodes_args::NodesArgs,
    /// Collectives, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "allgather,reducescatter,allreduce,alltoall"
    )]
    colls: Vec<String>,
    /// Output folder (default `results/catalog/TOPO`); the XML files go to its `algos/`.
    #[arg(long)]
    out: Option<PathBuf>,
    #[command(flatten)]
    encoding: super::method_args::MethodArgs,
    /// Main search per collective: the Pareto frontier or the least steps at C = 1.
    #[arg(long, default_value = "pareto", value_parser = ["pareto", "least-steps"])]
    search: String,
    /// Extra instance to solve, `COLL:STEPS,ROUNDS,CHUNKS` (repeatable), e.g.
    /// `allgather:3,7,6`.
    #[arg(long = "add", value_name = "COLL:S,R,C")]
    add: Vec<String>,
    /// Wall-clock limit of each search in seconds (a cut-short Pareto search keeps what it
    /// found).
    #[arg(long, default_value_t = 120.0, allow_negative_numbers = true, value_parser = limits::seconds)]
    time_limit: f64,
    /// Cap on the steps a search tries.
    #[arg(long, default_value_t = 16, value_parser = limits::max_steps)]
    max_steps: usize,
    /// Cap on the chunks a search tries.
    #[arg(long, default_value_t = 8, value_parser = limits::chunks)]
    max_chunks: usize,
    /// Replication counts (channels, at most 32) each algorithm is lowered with,
    /// comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4", value_parser = limits::instances)]
    instances: Vec<usize>,
    /// Size grid in bytes: `MIN:MAX[:FACTOR]` with K/M/G suffixes (binary: 1K = 1024).
    #[arg(long, default_value = catalog::DEFAULT_SIZES)]
    sizes: String,
    /// XML dialect: nccl (msccl-executor-nccl), rccl (no fused instructions) or legacy
    /// (microsoft/msccl: `reduce_scatter`, explicit maxBytes). Default: the fabric's runtime
    /// (`runtime` in its TOML; rccl on the AMD built-ins), else nccl.
    #[arg(long, value_parser = ["nccl", "rccl", "legacy"])]
    flavor: Option<String>,
    /// Also write a deployable folder: the XML files in DIR/algos, `env.sh` with the exact
    /// settings the runtime of the flavour needs, `deploy.json` with the lint of every file
    /// and setting and the sizes that fall back to NCCL.
    #[arg(long, value_name = "DIR")]
    deploy: Option<PathBuf>,
    #[command(flatten)]
    model: super::model_args::ModelArgs,
}

fn parse_add(spec: &str) -> Result<(Kind, usize, usize, usize)> {
    let bad = || anyhow!("--add {spec}: expected COLL:STEPS,ROUNDS,CHUNKS");
    let (coll, nums) = spec.split_once(':').ok_or_else(bad)?;
    let kind: Kind = coll.parse()?;
    let nums: Vec<usize> = nums
        .split(',')
        .map(|n| n.trim().parse::<usize>())
        .collect::<std::result::Result<_, _>>()
        .map_err(|_| bad())?;
    match nums.as_slice() {
        &[s, r, c] => {
            limits::instance(s, r, c).map_err(|e| anyhow!("--add {spec}: {e}"))?;
            Ok((kind, s, r, c))
        }
        _ => Err(bad()),
    }
}

/// The collectives of `--colls`: at least one, each with an MSCCL collective.
fn kinds(args: &CatalogArgs) -> Result<Vec<Kind>> {
    let kinds: Vec<Kind> = args
        .colls
        .iter()
        .filter(|c| !c.trim().is_empty())
        .map(|c| c.trim().parse::<Kind>())
        .collect::<Result<_>>()?;
    if kinds.is_empty() {
        bail!("--colls is empty");
    }
    if let Some(k) = kinds.iter().find(|k| k.to_ir().is_none()) {
        bail!("--colls: {k} cannot be catalogued (no MSCCL collective)");
    }
    Ok(kinds)
}

/// The catalog options `args` ask for on `topology` (whose runtime gives the default flavour).
fn options(args: &CatalogArgs, topology: &crate::topology::Topology) -> Result<Options> {
    let (method, sketch) = args.encoding.resolve()?;
    let sizes = runtime::cpu::parse_sizes(&args.sizes).map_err(|e| anyhow!("--sizes: {e:#}"))?;
    Ok(Options {
        method,
        sketch,
        search: match args.search.as_str() {
            "least-steps" => Search::LeastSteps {
                chunks: 1,
                rounds: None,
            },
            _ => Search::Pareto,
        },
        extra: args
            .add
            .iter()
            .map(|s| parse_add(s))
            .collect::<Result<_>>()?,
        time_limit: args.time_limit,
        max_steps: args.max_steps,
        max_chunks: args.max_chunks,
        instances: args.instances.clone(),
        sizes,
        flavor: args
            .flavor
            .as_deref()
            .and_then(Flavor::from_name)
            .or(topology.runtime)
            .unwrap_or(Flavor::Nccl),
        sim: args.model.sim_options()?,
        extra_memory: args.encoding.extra_memory,
    })
}

/// Runs `synth catalog`.
pub fn run(args: &CatalogArgs, json: bool, out: &mut dyn Write) -> Result<()> {
    let topo = args.nodes.load(&args.topo)?;
    let kinds = kinds(args)?;
    let options = options(args, &topo)?;
    let dir = args
        .out
        .clone()
        .unwrap_or_else(|| catalog::default_out(&topo));
    super::lower_args::check_out(&dir)?;
    let progress = Progress::new(true);
    let result = catalog::build(&topo, &kinds, &dir, &options, &progress);
    progress.finish();
    let manifest = result?;
    let deployment = match &args.deploy {
        Some(d) => {
            let d = catalog::deploy::check_dir(d, &dir)?;
            Some((catalog::deploy::deploy(&manifest, &dir, &d)?, d))
        }
        None => None,
    };
    if json {
        match &deployment {
            Some((d, _)) => writeln!(
                out,
                "{}",
                serde_json::to_string_pretty(
                    &serde_json::json!({"manifest": manifest, "deploy": d})
                )?
            )?,
            None => writeln!(out, "{}", serde_json::to_string_pretty(&manifest)?)?,
        }
    } else {
        print_catalog(&manifest, &dir, out)?;
        if let Some((d, path)) = &deployment {
            print_deployment(d, path, out)?;
        }
    }
    if let Some((d, path)) = &deployment {
        if let Some(first) = d.findings.first() {
            bail!(
                "--deploy: {} lint finding(s) (see {}), first: {}: {}",
                d.findings.len(),
                path.join("deploy.json").display(),
                first.subject,
                crate::util::escape_line_breaks(&first.problem)
            );
        }
    }
    Ok(())
}

/// The deployment: settings, fallbacks, lint.
fn print_deployment(
    d: &catalog::deploy::Deployment,
    dir: &std::path::Path,
    out: &mut dyn Write,
) -> Result<()> {
    writeln!(
        out,
        "deployed {} files to {} ({} runtime); source {}:",
        d.files.len(),
        d.algo_dir,
        d.flavor,
        dir.join("env.sh").display()
    )?;
    for s in &d.settings {
        if s.minimum {
            writeln!(out, "  {} at least {} where set", s.var, s.value)?;
        } else {
            writeln!(out, "  export {}={}", s.var, s.value)?;
        }
    }
    for f in &d.falls_back_to_nccl {
        writeln!(out, "  {}", f.describe())?;
    }
    writeln!(
        out,
        "  lint: {}",
        if d.findings.is_empty() {
            "every file and setting passes".to_string()
        } else {
            format!("{} finding(s)", d.findings.len())
        }
    )?;
    for f in &d.findings {
        writeln!(out, "    {}: {}", f.subject, f.problem)?;
    }
    Ok(())
}

/// The catalog's ranges as a table.
fn print_catalog(
    manifest: &catalog::Manifest,
    dir: &std::path::Path,
    out: &mut dyn Write,
) -> Result<()> {
    writeln!(
        out,
        "catalog of {} ({} ranks) in {}; MSCCL_ALGO_DIR={}",
        manifest.topology,
        manifest.ranks,
        dir.display(),
        dir.join(&manifest.algo_dir).display()
    )?;
    for c in &manifest.collectives {
        writeln!(
            out,
            "{}: {} candidates, search {} ({}, {:.1} s), bound {:.1} GB/s",
            c.collective,
            c.candidates.len(),
            c.method,
            if c.complete { "complete" } else { "partial" },
            c.synthesis_seconds,
            c.bound_busbw
        )?;
        for r in &c.ranges {
            let last = r.points.last().context("a range has points")?;
            writeln!(
                out,
                "  [{:>11}, {:>11}] {:<40} busbw {:>8.2} GB/s at {}",
                r.min_bytes,
                bytes_label(r.max_bytes),
                r.algorithm,
                last.busbw,
                bytes_label(last.size)
            )?;
        }
    }
    Ok(())
}
