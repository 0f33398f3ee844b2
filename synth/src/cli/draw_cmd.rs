//! `synth draw ALGO.json [--format dot|svg] [--out FILE]`: draws a synthesized schedule, which
//! chunk crosses which link in which step (see [`crate::draw`]).

use anyhow::{Context, Result};
use clap::Args;
use std::io::Write;
use std::path::PathBuf;

/// Arguments of `synth draw`.
#[derive(Debug, Args)]
pub struct DrawArgs {
    /// An algorithm JSON file, as the main command writes them (`out/NAME.json`).
    file: String,
    /// Drawing format: dot (Graphviz text) or svg (default: from --out's extension, else dot).
    #[arg(long, value_parser = ["dot", "svg"])]
    format: Option<String>,
    /// File to write the drawing to (default: stdout).
    #[arg(long)]
    out: Option<PathBuf>,
}

/// Runs `synth draw`.
pub fn run(args: &DrawArgs, json: bool, out: &mut dyn Write) -> Result<()> {
    let algorithm = crate::draw::read_algorithm(&args.file)?;
    let format = match (&args.format, &args.out) {
        (Some(f), _) => f.clone(),
        (None, Some(path)) if path.extension().is_some_and(|e| e == "svg") => "svg".into(),
        _ => "dot".into(),
    };
    let drawing = if format == "svg" {
        crate::draw::schedule_svg(&algorithm)
    } else {
        crate::draw::schedule_dot(&algorithm)
    };
    if let Some(path) = &args.out {
        std::fs::write(path, &drawing)
            .with_context(|| format!("{}: cannot write", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    if json {
        let doc = serde_json::json!({
            "file": args.file,
            "algorithm": algorithm.name,
            "format": format,
            "out": args.out.as_ref().map(|p| p.display().to_string()),
            "drawing": if args.out.is_none() { Some(&drawing) } else { None },
        });
        writeln!(out, "{}", serde_json::to_string_pretty(&doc)?)?;
    } else if args.out.is_none() {
        write!(out, "{drawing}")?;
    }
    Ok(())
}
