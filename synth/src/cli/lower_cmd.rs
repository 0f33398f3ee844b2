//! `synth lower ALGO.json`: lowers an algorithm file (synth's algorithm JSON or SCCL /
//! msccl-tools JSON with `msccl_type`) to verified MSCCL XML without solving again (SCCL's
//! `ncclize`), and the reading of algorithm files shared by `verify` and `simulate`.

use super::file_notes::FileNotes;
use super::lower_args::{check_out, write_xml, LowerArgs};
use crate::algo_file::{self, Format, Loaded};
use crate::lower::{lower_verified, LowerOptions};
use anyhow::{Context, Result};
use clap::Args;
use runtime::ir::Program;
use std::io::Write;
use std::path::PathBuf;

/// Arguments of `synth lower`.
#[derive(Debug, Args)]
pub struct LowerCmdArgs {
    /// Algorithm file: synth's algorithm JSON (written next to the XML) or SCCL /
    /// msccl-tools algorithm JSON (`msccl_type`).
    file: String,
    /// Topology (default: the one embedded in an msccl-tools file, or named in synth's).
    #[arg(long)]
    topo: Option<String>,
    /// Folder the XML files are written to (default `out/`, which git ignores).
    #[arg(long, default_value = super::synth_cmd::DEFAULT_OUT)]
    out: PathBuf,
    #[command(flatten)]
    lowering: LowerArgs,
}

/// Runs `synth lower`: reads and checks the algorithm, then lowers, verifies and writes
/// `OUT/NAME.xml` and `OUT/NAME.inplace.xml`.
pub fn run(args: &LowerCmdArgs, json: bool, out: &mut dyn Write) -> Result<()> {
    check_out(&args.out)?;
    args.lowering.check()?;
    let loaded = algo_file::read_algorithm(&args.file, args.topo.as_deref())?;
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("{}: cannot create folder", args.out.display()))?;
    let progress = crate::progress::Progress::new(true);
    let lowering = args
        .lowering
        .for_problem(&loaded.topology, loaded.algorithm.collective.kind)?;
    let (paths, threadblocks) =
        write_xml(&loaded.algorithm, &args.out, &lowering, &progress, |v| {
            Ok(v.program.threadblocks().count())
        })
        .map_err(|e| anyhow::anyhow!("{}: {e:#}", args.file))?;
    progress.finish();
    let a = &loaded.algorithm;
    if json {
        let doc = serde_json::json!({
            "file": args.file,
            "format": loaded.format.name(),
            "algorithm": a.name,
            "collective": a.collective.kind.name(),
            "topology": loaded.topology.name,
            "ranks": a.collective.ranks,
            "steps": a.num_steps(),
            "rounds": a.rounds(),
            "chunks": a.chunks(),
            "flavor": lowering.flavor().name(),
            "instances": args.lowering.instances,
            "threadblocks": threadblocks,
            "xml": paths,
        });
        writeln!(out, "{}", serde_json::to_string_pretty(&doc)?)?;
        return Ok(());
    }
    writeln!(
        out,
        "{}: {} ({}) on {}: {} steps, {} rounds, {} chunks; checked, lowered and verified",
        args.file,
        a.name,
        loaded.format.name(),
        loaded.topology.name,
        a.num_steps(),
        a.rounds(),
        a.chunks()
    )?;
    for p in paths {
        writeln!(out, "wrote {p}")?;
    }
    Ok(())
}

/// Reads a program from any file `verify`, `run` and `simulate` take (MSCCL XML, program
/// JSON, algorithm JSON lowered with the default options), with the file's notes (which
/// runtimes load an XML file, defaults, whether the postcondition is known).
pub fn read_any_noted(
    path: &str,
    topo: Option<&str>,
) -> Result<(Program, Option<Loaded>, FileNotes)> {
    match algo_file::detect(path)? {
        Format::Xml | Format::Program => {
            let (program, notes) = super::run_cmd::read_program(path)?;
            Ok((program, None, notes))
        }
        Format::Algorithm | Format::Msccl => {
            let loaded = algo_file::read_algorithm(path, topo)?;
            let program = lower_default(path, &loaded)?;
            let notes = FileNotes::new(&program, None);
            Ok((program, Some(loaded), notes))
        }
    }
}

/// Lowers a loaded algorithm out of place with the default options (verified), in the
/// flavour of its fabric's runtime (legacy for a custom collective).
pub fn lower_default(path: &str, loaded: &Loaded) -> Result<Program> {
    let custom = loaded.algorithm.collective.kind == crate::collective::Kind::Custom;
    let options = LowerOptions {
        flavor: super::lower_args::resolve_flavor(None, loaded.topology.runtime, custom)?,
        ..LowerOptions::default()
    };
    lower_verified(&loaded.algorithm, &options).map_err(|e| anyhow::anyhow!("{path}: {e:#}"))
}
