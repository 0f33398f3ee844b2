//! `synth compile PROGRAM.py --out DIR`: compiles a hand-written MSCCLang program (or a trace
//! of one) to verified MSCCL XML, or to synth's IR JSON where it applies a compute.

use crate::dsl::frontend;
use crate::dsl::trace::{self, Overrides, Replayed};
use anyhow::{Context, Result};
use clap::Args;
use runtime::ir::{Program, Protocol};
use runtime::xml::WriteProblem;
use serde_json::json;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Arguments of `synth compile`.
#[derive(Debug, Args)]
pub struct CompileArgs {
    /// An MSCCLang program (`.py`, run with synth's `msccl` package) or its trace (`.json`).
    file: String,
    /// Folder the XML files are written to (default `out/`, which git ignores).
    #[arg(long, default_value = super::synth_cmd::DEFAULT_OUT)]
    out: PathBuf,
    /// Print the XML to stdout instead of writing files (what `XML()` in a program does).
    #[arg(long, conflicts_with = "check")]
    stdout: bool,
    /// Only check the collective's postcondition (what `Check()` in a program does).
    #[arg(long)]
    check: bool,
    /// XML dialect: nccl, rccl (no fused instructions) or legacy. Default: nccl, and legacy
    /// for a custom collective (the only runtime that loads `coll="custom"`).
    #[arg(long, value_parser = ["nccl", "rccl", "legacy"])]
    flavor: Option<String>,
    /// Instances (at most 32), instead of the program's own.
    #[arg(long, value_parser = super::limits::instances)]
    instances: Option<usize>,
    /// Protocol (Simple, LL, LL128), instead of the program's own.
    #[arg(long, value_parser = ["Simple", "LL", "LL128"])]
    proto: Option<String>,
    /// Wall-clock limit for running a `.py` program, in seconds: past it the program and
    /// every process it started are killed and the command fails.
    #[arg(long, default_value_t = frontend::DEFAULT_TIME_LIMIT)]
    time_limit: f64,
    /// Arguments passed to the program (after `--`), e.g. `-- 8 1 --protocol LL`.
    #[arg(last = true)]
    args: Vec<String>,
}

/// Runs `synth compile`; with `--json`, a failure is a document too (`ok: false`, the
/// one-line `error` and its `detail`).
pub fn run(args: &CompileArgs, json: bool, out: &mut dyn Write) -> Result<()> {
    let result = compile(args, json, out);
    if let (Err(e), true) = (&result, json) {
        let doc = json!({
            "file": args.file,
            "ok": false,
            "error": format!("{e:#}").replace('\n', " "),
            "detail": super::error_detail(e),
        });
        writeln!(out, "{}", serde_json::to_string_pretty(&doc)?)?;
    }
    result
}

/// Compiles every program of `args.file`.
fn compile(args: &CompileArgs, json: bool, out: &mut dyn Write) -> Result<()> {
    if !args.stdout && !args.check {
        super::lower_args::check_out(&args.out)?;
    }
    let programs = if args.file.ends_with(".json") {
        trace::read(&args.file)?
    } else {
        frontend::run_script(&args.file, &args.args, args.time_limit)?
    };
    let mut docs = Vec::new();
    let mut stems = std::collections::HashSet::new();
    for t in &programs {
        let custom = t.collective.kind.starts_with("custom");
        let flavor = super::lower_args::resolve_flavor(args.flavor.as_deref(), None, custom)?;
        let overrides = Overrides {
            instances: args.instances,
            protocol: args.proto.as_deref().and_then(Protocol::from_name),
            flavor: Some(flavor),
        };
        let replayed = trace::replay(t, &overrides)?;
        for c in &replayed.checks {
            c.clone()?;
        }
        if args.check {
            if replayed.checks.is_empty() {
                replayed.program.check_end().map_err(anyhow::Error::from)?;
            }
            writeln!(out, "Check passed: {}", t.name)?;
            continue;
        }
        let program = replayed.program.compile()?;
        let mut stem = || unique_stem(&mut stems, &program.name);
        let (path, no_xml) = match runtime::xml::write(&program, flavor) {
            Ok(xml) if args.stdout => {
                out.write_all(xml.as_bytes())?;
                continue;
            }
            Ok(xml) => (write_file(&args.out, &stem(), "xml", &xml)?, None),
            // A program with a compute (synth's extension) has no MSCCL XML: its IR JSON
            // is what synth's executors run.
            Err(e) if matches!(e.problem, WriteProblem::Compute { .. }) && !args.stdout => {
                let text = program.to_json();
                (
                    write_file(&args.out, &stem(), "json", &text)?,
                    Some(e.to_string()),
                )
            }
            Err(e) => return Err(anyhow::anyhow!("{}:{}: {e}", t.file, t.line)),
        };
        let compiled = Compiled {
            program: &program,
            replayed: &replayed,
            path,
            no_xml,
        };
        if json {
            docs.push(compiled.doc());
        } else {
            compiled.print(out)?;
        }
    }
    if json && !args.stdout && !args.check {
        writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&json!({ "programs": docs }))?
        )?;
    }
    Ok(())
}

/// The file stem of a program: its name's, or with `-2`, `-3`, ... where an earlier program
/// of the same script took it (a note on stderr says so).
fn unique_stem(taken: &mut std::collections::HashSet<String>, name: &str) -> String {
    let base = file_stem(name);
    let mut stem = base.clone();
    let mut k = 1;
    while !taken.insert(stem.clone()) {
        k += 1;
        stem = format!("{base}-{k}");
    }
    if k > 1 {
        eprintln!("note: another program of this script is named `{name}`: this one is written as {stem}.xml");
    }
    stem
}

/// Writes a compiled program as `DIR/STEM.EXT` (its XML, or its IR JSON); returns the path.
fn write_file(dir: &Path, stem: &str, ext: &str, text: &str) -> Result<String> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("{}: cannot create folder", dir.display()))?;
    let path = dir.join(format!("{stem}.{ext}"));
    std::fs::write(&path, text).with_context(|| format!("{}: cannot write", path.display()))?;
    Ok(path.display().to_string())
}

/// A compiled, verified program and the file it was written to.
struct Compiled<'a> {
    program: &'a Program,
    replayed: &'a Replayed,
    path: String,
    /// Why no XML was written (a program with a compute), if so.
    no_xml: Option<String>,
}

impl Compiled<'_> {
    /// Threadblocks over every rank.
    fn threadblocks(&self) -> usize {
        self.program.gpus.iter().map(|g| g.threadblocks.len()).sum()
    }

    /// Copies the compiler made (fewer than asked where the copies' channels would exceed
    /// the runtimes' or where copies would cut transfers).
    fn instances(&self) -> usize {
        let per_copy = (self.replayed.program).with_tracer(|t| t.collective.nchunks());
        self.program.nchunksperloop / per_copy.max(1)
    }

    /// The buffer mode.
    fn mode(&self) -> &'static str {
        if self.program.inplace {
            "in-place"
        } else {
            "out-of-place"
        }
    }

    /// The `synth simulate` command line for it, where its topology is known.
    fn simulate(&self) -> Option<String> {
        (self.replayed.spec.as_ref())
            .map(|s| format!("synth simulate {} --topo {s} --sizes 1K:1G", self.path))
    }

    /// Its entry of the JSON document.
    fn doc(&self) -> serde_json::Value {
        let (program, path) = (self.program, &self.path);
        json!({
            "name": program.name,
            "file": path,
            "collective": program.collective.to_string(),
            "ngpus": program.ngpus,
            "instances": self.instances(),
            "instances_asked": self.replayed.program.instances(),
            "threadblocks": self.threadblocks(),
            "steps": program.step_count(),
            "channels": program.nchannels(),
            "mode": self.mode(),
            "verified": true,
            "no_xml": self.no_xml,
            "run": format!("synth run {path} --size 1M"),
            "simulate": self.simulate(),
        })
    }

    /// Prints what was compiled and how to run and simulate it.
    fn print(&self, out: &mut dyn Write) -> Result<()> {
        let (program, path) = (self.program, &self.path);
        writeln!(
            out,
            "{}: {} on {} ranks, {} threadblocks, {} steps, {} channels; verified ({})",
            program.name,
            program.collective,
            program.ngpus,
            self.threadblocks(),
            program.step_count(),
            program.nchannels(),
            self.mode()
        )?;
        let (made, asked) = (self.instances(), self.replayed.program.instances());
        if made < asked {
            writeln!(
                out,
                "note: {made} of the {asked} instances asked: more copies would need more channels than the runtimes' {}, or cut transfers into one message per chunk (slower)",
                runtime::limits::Limits::PORTABLE.max_channels
            )?;
        }
        writeln!(out, "wrote {path}")?;
        if let Some(why) = &self.no_xml {
            writeln!(out, "no MSCCL XML: {why}")?;
        }
        writeln!(out, "run:      synth run {path} --size 1M")?;
        if let Some(s) = self.simulate() {
            writeln!(out, "simulate: {s}")?;
        }
        Ok(())
    }
}

/// A file name for a program name (path separators and odd characters become `_`).
fn file_stem(name: &str) -> String {
    let stem: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    if stem.is_empty() {
        "program".into()
    } else {
        stem
    }
}
