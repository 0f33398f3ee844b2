//! `synth verify FILE.xml` and `synth run FILE.xml`: check any MSCCL XML file, and execute it
//! on the CPU executor with real data, nccl-tests style.

use super::file_notes::FileNotes;
use anyhow::{bail, Context, Result};
use clap::Args;
use runtime::cpu::{
    format_table, parse_dtype, parse_op, parse_sizes, sweep, RunOptions, SweepOptions, SweepRow,
};
use runtime::ir::Program;
use std::io::Write;

/// Arguments of `synth verify`.
#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// MSCCL XML file (ours or anyone's), a program JSON file, or an algorithm JSON file
    /// (synth's, or msccl-tools' with `msccl_type`), detected from the content.
    file: String,
    /// Topology of an algorithm JSON file (default: the one it embeds or names).
    #[arg(long)]
    topo: Option<String>,
}

/// Arguments of `synth run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// MSCCL XML file, a program JSON file, or an algorithm JSON file (synth's or
    /// msccl-tools'), lowered out of place with the default options.
    file: String,
    /// One message size in bytes (e.g. 64M, 1K, 4096; binary: 1K = 1KB = 1024).
    #[arg(long, conflicts_with = "sizes")]
    size: Option<String>,
    /// A size sweep MIN:MAX[:FACTOR] (doubling by default), e.g. 1K:256M.
    #[arg(long)]
    sizes: Option<String>,
    /// Element type: f32 or f64.
    #[arg(long, default_value = "f32")]
    dtype: String,
    /// Reduction: sum, min or max.
    #[arg(long, default_value = "sum")]
    op: String,
    /// Timed iterations per size.
    #[arg(long, default_value_t = 5, value_parser = super::limits::iterations)]
    iters: usize,
    /// Untimed warm-up iterations per size.
    #[arg(long, default_value_t = 1, value_parser = super::limits::warmup)]
    warmup: usize,
    /// Executor backend: cpu (cuda needs a build with `--features cuda`).
    #[arg(long, default_value = "cpu")]
    backend: String,
}

impl RunArgs {
    /// `--sizes`, else `--size`, else the default sweep.
    fn size_spec(&self) -> &str {
        self.sizes
            .as_deref()
            .or(self.size.as_deref())
            .unwrap_or("1K:64M")
    }
}

/// Reads a program from MSCCL XML (any runtime's dialect) or our JSON form, with its notes.
pub fn read_program(path: &str) -> Result<(Program, FileNotes)> {
    if path.ends_with(".json") {
        let text = std::fs::read_to_string(path).with_context(|| format!("{path}: cannot read"))?;
        let program: Program =
            serde_json::from_str(&text).map_err(|e| crate::util::json_error(path, &e))?;
        let notes = FileNotes::new(&program, None);
        return Ok((program, notes));
    }
    let (program, dialect) =
        runtime::xml::read_file_dialect(path).map_err(|e| anyhow::anyhow!("{path}: {e}"))?;
    let notes = FileNotes::new(&program, Some(dialect));
    Ok((program, notes))
}

/// Reads `synth verify`'s file in whichever format it is: a program as it is, an algorithm
/// file lowered with the default options (with the algorithm, for the report).
fn read_verify_input(
    args: &VerifyArgs,
) -> Result<(Program, Option<crate::algo_file::Loaded>, FileNotes)> {
    super::lower_cmd::read_any_noted(&args.file, args.topo.as_deref())
}

/// Runs `synth verify`.
pub fn verify(args: &VerifyArgs, json: bool, out: &mut dyn Write) -> Result<()> {
    let (program, loaded, notes) = match read_verify_input(args) {
        Ok(read) => read,
        Err(e) if json => {
            // `--json` always prints a document, also when the file cannot be read.
            let doc = serde_json::json!({
                "file": args.file,
                "ok": false,
                "error": format!("{e:#}").replace('\n', " "),
            });
            writeln!(out, "{}", serde_json::to_string_pretty(&doc)?)?;
            return Err(e);
        }
        Err(e) => return Err(e),
    };
    let result = runtime::verify::verify(&program);
    if json {
        let doc = serde_json::json!({
            "file": args.file,
            "format": loaded.as_ref().map_or("msccl-xml-or-program", |l| l.format.name()),
            "algorithm": loaded.as_ref().map(|l| &l.algorithm.name),
            "topology": loaded.as_ref().map(|l| &l.topology.name),
            "ok": result.is_ok(),
            "error": result.as_ref().err().map(|e| e.to_string()),
            "detail": result.as_ref().err().map_or(&[][..], |e| e.detail()),
            "ngpus": program.ngpus,
            "collective": format!("{:?}", program.collective),
            "steps": program.step_count(),
            "notes": notes.lines(),
            "runtimes": notes.json()["runtimes"],
            "defaulted": notes.json()["defaulted"],
            "postcondition_known": notes.postcondition_known,
        });
        writeln!(out, "{}", serde_json::to_string_pretty(&doc)?)?;
        if result.is_err() {
            bail!("{}: does not verify", args.file);
        }
        return Ok(());
    }
    result.map_err(|e| anyhow::Error::new(e).context(args.file.clone()))?;
    if let Some(l) = &loaded {
        let a = &l.algorithm;
        writeln!(
            out,
            "{}: OK ({}: {} on {} ranks of `{}`, {} steps, {} rounds, {} chunks; the checker accepts it and its lowered program verifies, {} threadblocks)",
            args.file,
            l.format.name(),
            a.collective.kind,
            a.collective.ranks,
            l.topology.name,
            a.num_steps(),
            a.rounds(),
            a.chunks(),
            program.threadblocks().count()
        )?;
        return Ok(());
    }
    writeln!(
        out,
        "{}: OK ({:?} on {} ranks, {} threadblocks, {} steps; in place: {}, out of place: {})",
        args.file,
        program.collective,
        program.ngpus,
        program.threadblocks().count(),
        program.step_count(),
        program.inplace,
        program.outofplace
    )?;
    for line in notes.lines() {
        writeln!(out, "  {line}")?;
    }
    Ok(())
}

/// Runs `synth run`.
pub fn run(args: &RunArgs, json: bool, out: &mut dyn Write) -> Result<()> {
    match args.backend.as_str() {
        "cpu" => {}
        #[cfg(feature = "cuda")]
        "cuda" => return run_cuda(args, json, out),
        #[cfg(not(feature = "cuda"))]
        "cuda" => {
            bail!("this synth was built without CUDA support (rebuild with `--features cuda`)")
        }
        other => bail!("unknown --backend `{other}` (cpu or cuda)"),
    }
    let (program, _, notes) = super::lower_cmd::read_any_noted(&args.file, None)?;
    let sizes = parse_sizes(args.size_spec())?;
    let dtype = parse_dtype(&args.dtype)
        .with_context(|| format!("unknown --dtype `{}` (f32, f64, f16 or bf16)", args.dtype))?;
    let op = parse_op(&args.op)
        .with_context(|| format!("unknown --op `{}` (sum, min or max)", args.op))?;
    let options = SweepOptions {
        sizes,
        outofplace: program.outofplace,
        inplace: program.inplace,
        run: RunOptions {
            dtype,
            op,
            iters: args.iters,
            warmup: args.warmup,
            ..RunOptions::default()
        },
    };
    let rounded = rounded(&program, &options.sizes, dtype.size());
    let rows = sweep(&program, &options).map_err(|e| anyhow::anyhow!("{}: {e:#}", args.file))?;
    report(&args.file, &rows, &rounded, &notes, json, out)
}

/// A size asked for that runs as another: the buffer holds whole elements in each of the
/// program's `nchunksperloop` chunks, at least one (nccl-tests' size column shows the size run).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Rounded {
    /// Bytes asked for.
    pub requested: u64,
    /// Bytes run.
    pub size: u64,
    /// Chunks of the buffer (the program's `nchunksperloop`).
    pub chunks: usize,
}

/// The sizes of `sizes` that run as another size with elements of `element_size` bytes.
fn rounded(program: &Program, sizes: &[u64], element_size: usize) -> Vec<Rounded> {
    sizes
        .iter()
        .map(|&requested| Rounded {
            requested,
            size: (runtime::cpu::elements_for(program, requested, element_size) * element_size)
                as u64,
            chunks: program.nchunksperloop,
        })
        .filter(|r| r.size != r.requested)
        .collect()
}

/// Runs `synth run --backend cuda`: the CUDA executor (one GPU per rank, or all ranks on one
/// GPU), every result checked, nccl-tests' table.
#[cfg(feature = "cuda")]
fn run_cuda(args: &RunArgs, json: bool, out: &mut dyn Write) -> Result<()> {
    use runtime::cuda::{CudaOptions, Dtype};
    // One line and a non-zero exit without a usable GPU.
    runtime::cuda::available().map_err(|e| anyhow::anyhow!("--backend cuda: {e}"))?;
    let (program, _, notes) = super::lower_cmd::read_any_noted(&args.file, None)?;
    let sizes = parse_sizes(args.size_spec())?;
    let dtype = Dtype::parse(&args.dtype)
        .with_context(|| format!("unknown --dtype `{}` (f32, f16 or bf16)", args.dtype))?;
    if args.op != "sum" {
        bail!("--backend cuda supports only --op sum");
    }
    let options = CudaOptions {
        dtype,
        sizes,
        iters: args.iters,
        warmup: args.warmup,
        ..CudaOptions::default()
    };
    let rounded = rounded(&program, &options.sizes, dtype.size());
    let rows = runtime::cuda::sweep(&program, &options)
        .map_err(|e| anyhow::anyhow!("{}: {e:#}", args.file))?;
    report(&args.file, &rows, &rounded, &notes, json, out)
}

/// Says on stderr which sizes ran as another, prints the rows (nccl-tests' table, or JSON
/// with the `rounded` sizes) and fails when any element was wrong.
fn report(
    file: &str,
    rows: &[SweepRow],
    rounded: &[Rounded],
    notes: &FileNotes,
    json: bool,
    out: &mut dyn Write,
) -> Result<()> {
    for r in rounded {
        let how = if r.size > r.requested { "up" } else { "down" };
        eprintln!(
            "note: size {} B runs as {} B (rounded {how}: the buffer's {} chunks hold whole elements, at least one each)",
            r.requested, r.size, r.chunks
        );
    }
    if json {
        let doc = serde_json::json!({
            "file": file, "rows": rows, "rounded": rounded, "notes": notes.lines(),
            "runtimes": notes.json()["runtimes"],
            "postcondition_known": notes.postcondition_known,
        });
        writeln!(out, "{}", serde_json::to_string_pretty(&doc)?)?;
    } else {
        write!(out, "{}", format_table(rows))?;
    }
    let wrong: usize = rows.iter().map(|r| r.wrong).sum();
    if wrong > 0 {
        bail!("{file}: {wrong} wrong elements");
    }
    if !json {
        notes.print_stderr();
    }
    Ok(())
}
