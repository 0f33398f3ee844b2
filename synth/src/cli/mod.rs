//! The `synth` command line: argument definitions and dispatch. Every command takes
//! `--json` and writes one JSON document to stdout instead of its table.

mod bench_cmd;
mod bench_small;
mod bench_zoo;
mod catalog_cmd;
mod compile_cmd;
mod draw_cmd;
mod file_notes;
mod fuse_cmd;
pub mod limits;
mod lower_args;
mod lower_cmd;
mod method_args;
mod model_args;
mod nodes_args;
mod run_cmd;
mod simulate_cmd;
mod synth_cmd;
mod topo_cmd;
mod topo_fit;
mod topo_import;

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
    /// On an error, print its full detail on stderr after the one-line message (every
    /// blocked threadblock of a deadlock).
    #[arg(long, global = true)]
    verbose: bool,
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
    /// Compare the schedules of an allreduce followed by an elementwise computation (plain,
    /// reduce-scatter / compute on the slice / allgather, fused; with a producer's overlap)
    /// and write the best as IR JSON.
    Fuse(fuse_cmd::FuseArgs),
    /// Simulate an MSCCL XML file or algorithm JSON on a topology next to NCCL baselines and
    /// the cut bound.
    Simulate(simulate_cmd::SimulateArgs),
    /// Build a catalog: the best synthesized algorithm per size range as MSCCL XML files.
    Catalog(Box<catalog_cmd::CatalogArgs>),
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
    #[command(flatten)]
    nodes: nodes_args::NodesArgs,
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
    dispatch(&cli, out).map_err(|e| {
        if cli.verbose {
            let detail = error_detail(&e).to_vec();
            if !detail.is_empty() {
                return e.context(Verbose(detail));
            }
        }
        e
    })
}

/// Under `--verbose`, the detail lines of an error, printed after its one-line message.
#[derive(Debug, Clone)]
pub struct Verbose(pub Vec<String>);

impl std::fmt::Display for Verbose {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} lines of detail", self.0.len())
    }
}

/// Prints an error as the binary does: `error: ` and one line on stderr, then under
/// `--verbose` its detail lines, indented.
pub fn print_error(e: &anyhow::Error) {
    let (text, detail) = match e.downcast_ref::<Verbose>() {
        // The marker is the outermost context: the message is the chain under it.
        Some(Verbose(lines)) => {
            let causes: Vec<String> = e.chain().skip(1).map(|c| c.to_string()).collect();
            (causes.join(": "), lines.as_slice())
        }
        None => (format!("{e:#}"), &[][..]),
    };
    eprintln!("error: {}", text.replace('\n', " "));
    for line in detail {
        eprintln!("  {line}");
    }
}

/// The lines beyond an error's one-line message (`--verbose`; in `--json` documents): every
/// blocked threadblock of a deadlock, from the verifier or from a compiled DSL program.
pub fn error_detail(e: &anyhow::Error) -> &[String] {
    for cause in e.chain() {
        if let Some(d) = cause.downcast_ref::<crate::dsl::DslError>() {
            return &d.detail;
        }
        if let Some(v) = cause.downcast_ref::<runtime::verify::VerifyError>() {
            return v.detail();
        }
    }
    &[]
}

/// Runs the command `cli` names.
fn dispatch(cli: &Cli, out: &mut dyn Write) -> anyhow::Result<()> {
    match &cli.command {
        None => synth_cmd::run(&cli.synth, cli.json, out),
        Some(Command::Topo(args)) => topo_cmd::run(args, cli.json, out),
        Some(Command::Bounds(args)) => {
            let topo = args.nodes.load(&args.topo)?;
            synth_cmd::bounds(topo, &args.coll, args.root, cli.json, out)
        }
        Some(Command::Bench(args)) => bench_cmd::run(args, cli.json, out),
        Some(Command::Verify(args)) => run_cmd::verify(args, cli.json, out),
        Some(Command::Run(args)) => run_cmd::run(args, cli.json, out),
        Some(Command::Lower(args)) => lower_cmd::run(args, cli.json, out),
        Some(Command::Simulate(args)) => simulate_cmd::run(args, cli.json, out),
        Some(Command::Fuse(args)) => fuse_cmd::run(args, cli.json, out),
        Some(Command::Catalog(args)) => catalog_cmd::run(args, cli.json, out),
        Some(Command::Compile(args)) => compile_cmd::run(args, cli.json, out),
        Some(Command::Draw(args)) => draw_cmd::run(args, cli.json, out),
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
