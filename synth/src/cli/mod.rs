//! The `synth` command line: argument definitions and dispatch. Every command takes
//! `--json` and writes one JSON document to stdout instead of its table.

mod bench_cmd;
mod bench_zoo;
mod catalog_cmd;
mod compile_cmd;
mod draw_cmd;
mod file_notes;
pub mod limits;
mod lower_args;
mod lower_cmd;
mod method_args;
mod run_cmd;
mod simulate_cmd;
mod synth_cmd;
mod topo_cmd;

use clap::{Args, Parser, Subcommand};
use std::io::Write;

/// Synthesize, verify, lower, simulate and run collective-communication algorithms.
#[derive(Debug, Parser)]
#[command(name = "synth", version, about, args_conflicts_with_subcommands = true)]
pub struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    synth: synth_cmd::SynthArgs,
    /// Print one JSON document to stdout instead of a table.
    #[arg(long, global = true)]
    json: bool,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// List or show topologies, or print one as Graphviz text (`topo dot`).
    Topo(topo_cmd::TopoArgs),
    /// Print the lower bounds (steps, rounds per chunk) of a collective on a topology.
    Bounds(BoundsArgs),
    /// Time the fixed synthesis benchmarks (the SMT speed targets).
    Bench(bench_cmd::BenchArgs),
    /// Check an MSCCL XML file (ours or anyone's), a program JSON or an algorithm JSON
    /// (synth's or msccl-tools') and explain the first problem found.
    Verify(run_cmd::VerifyArgs),
    /// Lower an algorithm JSON (synth's or msccl-tools' `msccl_type`) to verified MSCCL XML
    /// without solving again (SCCL's `ncclize`).
    Lower(lower_cmd::LowerCmdArgs),
    /// Execute an MSCCL XML file (or program or algorithm JSON) on the CPU executor with real
    /// data (nccl-tests table).
    Run(run_cmd::RunArgs),
    /// Simulate an MSCCL XML file or algorithm JSON on a topology next to NCCL baselines and
    /// the cut bound.
    Simulate(simulate_cmd::SimulateArgs),
    /// Build a catalog: the best synthesized algorithm per size range as MSCCL XML files.
    Catalog(catalog_cmd::CatalogArgs),
    /// Compile a hand-written MSCCLang program (.py) to verified MSCCL XML.
    Compile(compile_cmd::CompileArgs),
    /// Draw a synthesized algorithm (JSON): which chunk crosses which link in which step,
    /// as Graphviz DOT or SVG.
    Draw(draw_cmd::DrawArgs),
}

/// Arguments of `synth bounds`.
#[derive(Debug, Args)]
struct BoundsArgs {
    /// Topology: a built-in name (e.g. `dgx1`, `ring:8`) or a TOML / nvidia-smi file.
    #[arg(long)]
    topo: String,
    /// Collective name, or a custom collective file (.toml/.json).
    #[arg(long)]
    coll: String,
    /// Root rank of broadcast, reduce, gather and scatter (default 0).
    #[arg(long)]
    root: Option<usize>,
}

/// Parses `args` (including the program name) and runs the command, writing results to
/// `out` (progress and errors go to stderr / the returned error).
pub fn run<I, T>(args: I, out: &mut dyn Write) -> anyhow::Result<()>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let cli = Cli::try_parse_from(args).map_err(clap_error)?;
    match cli.command {
        None => synth_cmd::run(&cli.synth, cli.json, out),
        Some(Command::Topo(args)) => topo_cmd::run(&args, cli.json, out),
        Some(Command::Bounds(args)) => {
            synth_cmd::bounds(&args.topo, &args.coll, args.root, cli.json, out)
        }
        Some(Command::Bench(args)) => bench_cmd::run(&args, cli.json, out),
        Some(Command::Verify(args)) => run_cmd::verify(&args, cli.json, out),
        Some(Command::Run(args)) => run_cmd::run(&args, cli.json, out),
        Some(Command::Lower(args)) => lower_cmd::run(&args, cli.json, out),
        Some(Command::Simulate(args)) => simulate_cmd::run(&args, cli.json, out),
        Some(Command::Catalog(args)) => catalog_cmd::run(&args, cli.json, out),
        Some(Command::Compile(args)) => compile_cmd::run(&args, cli.json, out),
        Some(Command::Draw(args)) => draw_cmd::run(&args, cli.json, out),
    }
}

/// Clap's help and version are not errors: print them; anything else becomes one line.
fn clap_error(e: clap::Error) -> anyhow::Error {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            std::process::exit(0);
        }
        ErrorKind::MissingRequiredArgument => {
            use clap::error::{ContextKind, ContextValue};
            let names = match e.get(ContextKind::InvalidArg) {
                Some(ContextValue::Strings(names)) => names.join(", "),
                Some(ContextValue::String(name)) => name.clone(),
                _ => "an argument".to_string(),
            };
            anyhow::anyhow!("missing required argument {names} (see `synth --help`)")
        }
        _ => {
            let text = e.to_string();
            let first = text
                .lines()
                .next()
                .unwrap_or("invalid arguments")
                .trim_start_matches("error: ");
            anyhow::anyhow!("{first} (see `synth --help`)")
        }
    }
}
