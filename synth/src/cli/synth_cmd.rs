//! The main command: `synth --topo T --coll C [search options]`.

use super::limits;
use crate::algorithm::Algorithm;
use crate::bounds::{cut_bounds, lower_bounds};
use crate::collective::{Collective, Kind};
use crate::cutbound::CutBound;
use crate::progress::Progress;
use crate::select::{simulation_order, Point, ProgramBounds, Race, Row, Rule, Runs, Simulation};
use crate::simulate::SimOptions;
use crate::smt::Limits;
use crate::synthesize::{synthesize_with, Method, Request, Search, Synthesis};
use crate::topology::Topology;
use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use serde_json::json;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Message sizes (bytes; binary like every size of the command line, 1 KB = 1024) at which
/// the table estimates the time of each algorithm and `synth bounds` bounds it.
const TABLE_SIZES: [(f64, &str); 3] = [(1024.0, "1KB"), (1048576.0, "1MB"), (1073741824.0, "1GB")];

/// Where the main command and `synth compile` write their files unless `--out` says
/// otherwise: a folder the repository's `.gitignore` ignores, so a first run leaves
/// `git status` clean (`results/` holds only what is committed on purpose).
pub const DEFAULT_OUT: &str = "out";

/// Arguments of the main synthesis command.
#[derive(Debug, Args)]
pub struct SynthArgs {
    /// Topology: a built-in name (`dgx1`, `ring:8`, `dgx-a100x2`, ...) or a TOML / nvidia-smi file.
    #[arg(long)]
    topo: Option<String>,
    #[command(flatten)]
    nodes: super::nodes_args::NodesArgs,
    /// Collective (allgather, reducescatter, allreduce, alltoall, broadcast, reduce, gather,
    /// scatter) or a custom collective file (.toml/.json).
    #[arg(long)]
    coll: Option<String>,
    /// Root rank of broadcast, reduce, gather and scatter (default 0).
    #[arg(long)]
    root: Option<usize>,
    /// Solve one instance with this many steps (needs --rounds and --chunks).
    #[arg(long, requires_all = ["rounds"], value_parser = limits::steps)]
    steps: Option<usize>,
    /// Total rounds R (with --steps: one instance; with --least-steps: at most R).
    #[arg(long, value_parser = limits::rounds)]
    rounds: Option<usize>,
    /// Chunks C each original chunk is split into.
    #[arg(long, value_parser = limits::chunks)]
    chunks: Option<usize>,
    /// Find the least number of steps (then the least rounds for it).
    #[arg(long, conflicts_with_all = ["steps", "pareto"])]
    least_steps: bool,
    /// Find the Pareto frontier over (steps, rounds per chunk) (the default).
    #[arg(long)]
    pareto: bool,
    /// Cap on the number of steps a search tries (per phase for allreduce).
    #[arg(long, default_value_t = 16, value_parser = limits::max_steps)]
    max_steps: usize,
    /// Cap on the number of chunks a search tries [default: 8; without it the rail ring,
    /// which is no search, also tries up to 64 pieces per rank within two channels, and its
    /// coalesced twin 4·64/nodes].
    #[arg(long, value_parser = limits::chunks)]
    max_chunks: Option<usize>,
    /// Wall-clock limit for the whole search, in seconds; the frontier found so far is
    /// printed and marked partial when it is reached.
    #[arg(long, default_value_t = 300.0, allow_negative_numbers = true, value_parser = limits::seconds)]
    time_limit: f64,
    /// Deterministic work limit for the MILP: branch-and-bound nodes per model (overrides
    /// the sketch's `work_limit`). The solver then runs on one thread with a fixed seed, so
    /// the same input gives the same algorithms whatever the machine's load.
    #[arg(long, value_parser = limits::work)]
    work_limit: Option<u64>,
    #[command(flatten)]
    encoding: super::method_args::MethodArgs,
    /// Folder the algorithms are written to (default `out/`, which git ignores).
    #[arg(long, default_value = DEFAULT_OUT)]
    out: PathBuf,
    #[command(flatten)]
    lowering: super::lower_args::LowerArgs,
    #[command(flatten)]
    model: super::model_args::ModelArgs,
    /// Also draw the algorithms found as a Pareto plot (SVG): steps across, rounds per chunk
    /// up, with the lower bounds.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
    /// Also write each algorithm as an MSCCLang program (`DIR/NAME.py`) to hand-tune and
    /// compile with `synth compile`.
    #[arg(long)]
    emit_dsl: bool,
}

/// What the main command says on stderr when it writes a custom collective's XML.
pub const CUSTOM_XML_NOTE: &str = "note: custom collectives are written with coll=\"custom\" and their conditions in a leading <!-- synth-custom --> comment: synth verify/run/simulate read them; of the MSCCL runtimes only the legacy microsoft/msccl loads coll=\"custom\" (msccl-executor-nccl and RCCL refuse the file: keep it out of MSCCL_ALGO_DIR)";

/// Loads the collective named `coll` (or read from a file) for `topo` with C = 1.
/// `root` is `--root`, checked by [`limits::root`].
pub fn load_collective(coll: &str, topo: &Topology, root: Option<usize>) -> Result<Collective> {
    let collective = if coll.ends_with(".toml") || coll.ends_with(".json") {
        limits::root(None, root, topo.ranks)?;
        let custom = Collective::from_file(coll, 1)?;
        check_ranks(coll, &custom, topo)?;
        match custom.builtin() {
            Some(builtin) => {
                let root = if builtin.kind.is_rooted() {
                    format!(" with root {}", builtin.root)
                } else {
                    String::new()
                };
                eprintln!(
                    "note: {coll} is the built-in {}{root}: solved, bounded and lowered as it",
                    builtin.kind
                );
                builtin
            }
            None => custom,
        }
    } else {
        let kind = coll.parse::<Kind>()?;
        let root = limits::root(Some(kind), root, topo.ranks)?;
        Collective::new(kind, topo.ranks, root, 1)?
    };
    check_ranks(coll, &collective, topo)?;
    Ok(collective)
}

/// An error when `collective` (named `coll`) and `topo` differ in ranks.
fn check_ranks(coll: &str, collective: &Collective, topo: &Topology) -> Result<()> {
    if collective.ranks != topo.ranks {
        bail!(
            "{coll}: the collective has {} ranks but topology `{}` has {}",
            collective.ranks,
            topo.name,
            topo.ranks
        );
    }
    Ok(())
}

/// A [`crate::engine::TimeLimitReached`] error as "time limit of N s reached while
/// <phase>"; other errors unchanged.
fn time_limit_error(e: anyhow::Error, seconds: f64) -> anyhow::Error {
    match crate::engine::time_limit_phase(&e) {
        Some(phase) => anyhow::anyhow!("time limit of {seconds} s reached while {phase}"),
        None => e,
    }
}

fn required<'a>(value: &'a Option<String>, flag: &str) -> Result<&'a str> {
    value
        .as_deref()
        .with_context(|| format!("missing {flag} (see `synth --help`)"))
}

/// Runs the main synthesis command.
pub fn run(args: &SynthArgs, json: bool, out: &mut dyn Write) -> Result<()> {
    let started = Instant::now();
    super::lower_args::check_out(&args.out)?;
    if let Some(plot) = &args.plot {
        if plot.is_dir() {
            bail!("--plot {}: is a folder, not a file", plot.display());
        }
        if let Some(dir) = plot.parent() {
            super::lower_args::check_out(dir).map_err(|_| {
                anyhow::anyhow!("--plot {}: a folder above it is a file", plot.display())
            })?;
        }
    }
    args.lowering.check()?;
    let sim = args.model.sim_options()?;
    let progress = Progress::new(true);
    progress.message("loading the topology and the collective");
    let topo = args.nodes.load(required(&args.topo, "--topo")?)?;
    let collective = load_collective(required(&args.coll, "--coll")?, &topo, args.root)?;
    let lowering = args.lowering.for_problem(&topo, collective.kind)?;
    let (search, limits) = search_and_limits(args, started)?;
    let mut synthesis = search_algorithms(
        args, &topo, collective, search, limits, &lowering, &progress,
    )?;
    if synthesis.algorithms.is_empty() {
        return Err(nothing_found(args, &topo, &synthesis, search, started));
    }
    // Lowering, verifying and simulating large fabrics takes a while too: the line stays.
    progress.message(&format!(
        "lowering and verifying {} algorithm(s)",
        synthesis.algorithms.len()
    ));
    progress.message("writing the algorithms");
    let files = write_algorithms(&synthesis.algorithms, &args.out)?;
    // Each algorithm is lowered, verified, written and (when the run compares with NCCL)
    // simulated before the next, so one program is held at a time.
    let simulated = compares(synthesis.algorithms[0].collective.kind, topo.ranks);
    let mut unexpressed: Option<String> = None;
    let mut dropped: Vec<String> = Vec::new();
    // Each program is held with its bound (its key) until HOLD_STEPS steps are held, then
    // the held ones are simulated best bound first (see `select::Race`), so that the later ones are
    // mostly skipped by their bounds whatever the ranks' numbering; the winners do not depend
    // on the order.
    let mut race = Race::new(synthesis.algorithms.len(), COMPARE_SIZES.len());
    let mut held: Vec<Held> = Vec::new();
    let mut held_steps = 0usize;
    let mut lowered: Vec<(Vec<String>, Option<Simulated>)> = Vec::new();
    let mut stalls = Stalls {
        joined: (synthesis.algorithms.iter())
            .map(|a| !a.origin.two_step_receives && crate::lower::joins_messages(a))
            .collect(),
        unstalled: vec![None; synthesis.algorithms.len()],
        own: vec![None; synthesis.algorithms.len()],
        turns: vec![false; synthesis.algorithms.len()],
    };
    // What the algorithm before says of its two-step twin, kept while the twin is lowered.
    let mut before = TwinOf::Nothing;
    for (index, a) in synthesis.algorithms.iter().enumerate() {
        let original = if a.origin.two_step_receives {
            std::mem::replace(&mut before, TwinOf::Nothing)
        } else {
            TwinOf::Nothing
        };
        let twin_follows = !a.origin.two_step_receives
            && (synthesis.algorithms.get(index + 1)).is_some_and(|t| t.origin.two_step_receives);
        let mut kept = TwinOf::Nothing;
        let bound = |v: &crate::lower::Verified| -> Result<Option<Held>> {
            let p = &v.program;
            if matches!(&original, TwinOf::Program(o) if crate::lower::same_but_name(o, p)) {
                return Err(SameProgram.into());
            }
            if twin_follows {
                kept = if v.fit_pass {
                    TwinOf::FitPass
                } else {
                    TwinOf::Program(Box::new(p.clone()))
                };
            }
            if !simulated {
                return Ok(None);
            }
            let bounds = compared(&topo, &sim).bounds(p)?;
            Ok(Some(Held {
                index,
                key: bounds.busbw().last().copied().unwrap_or(f64::INFINITY),
                bounds,
                program: p.clone(),
            }))
        };
        // A two-step twin follows its algorithm; where that could not be expressed, its
        // lowering already tried the two-step receives (the fit pass): said, not lowered again.
        let after_unexpressed = index > 0 && lowered.last().is_some_and(|(p, _)| p.is_empty());
        if a.origin.two_step_receives && after_unexpressed {
            dropped.push(format!(
                "{}: no XML written: its two-step receives were tried in the lowering of {}",
                a.name,
                synthesis.algorithms[index - 1].name
            ));
            lowered.push((Vec::new(), None));
            continue;
        }
        if matches!(original, TwinOf::FitPass) {
            dropped.push(same_program(a, &synthesis.algorithms[index - 1]));
            lowered.push((Vec::new(), None));
            continue;
        }
        match super::lower_args::write_xml(a, &args.out, &lowering, &progress, bound) {
            Ok((paths, h)) => {
                if let Some(h) = h {
                    held_steps += h.program.steps().count();
                    held.push(h);
                }
                lowered.push((paths, None));
            }
            Err(e) if e.downcast_ref::<SameProgram>().is_some() => {
                dropped.push(same_program(a, &synthesis.algorithms[index - 1]));
                lowered.push((Vec::new(), None));
            }
            // An algorithm the runtimes cannot express (too many steps or channels for
            // one link, e.g. a 1024-rank alltoall) is still a checked algorithm: its
            // JSON is kept and the reason printed.
            Err(e) if unexpressible(&e) => {
                dropped.push(format!(
                    "{}: no XML written, so it is not rated (the {} runtime cannot load it): {e:#}",
                    a.name,
                    lowering.flavor().name()
                ));
                unexpressed.get_or_insert_with(|| format!("{e:#}"));
                lowered.push((Vec::new(), None));
            }
            Err(e) => return Err(e),
        }
        before = kept;
        if held_steps > HOLD_STEPS {
            simulate_held(
                &mut race,
                std::mem::take(&mut held),
                (&topo, &sim),
                &progress,
                &mut lowered,
                &mut stalls,
            )?;
            held_steps = 0;
        }
    }
    let sims = (&topo, &sim);
    simulate_held(&mut race, held, sims, &progress, &mut lowered, &mut stalls)?;
    let mut files = files;
    let bar = race.bar().last().copied();
    let options = lowering.options(false)?;
    let twins = late_twins(&synthesis.algorithms, &stalls, bar, &topo, &options);
    for (twin, original) in twins {
        let index = synthesis.algorithms.len();
        files.extend(write_algorithms(std::slice::from_ref(&twin), &args.out)?);
        let bound = |v: &crate::lower::Verified| -> Result<Held> {
            let p = &v.program;
            Ok(Held {
                index,
                key: 0.0,
                bounds: compared(&topo, &sim).bounds(p)?,
                program: p.clone(),
            })
        };
        match super::lower_args::write_xml(&twin, &args.out, &lowering, &progress, bound) {
            Ok((paths, h)) => {
                lowered.push((paths, None));
                let sims = (&topo, &sim);
                simulate_held(
                    &mut race,
                    vec![h],
                    sims,
                    &progress,
                    &mut lowered,
                    &mut stalls,
                )?;
            }
            Err(e) if unexpressible(&e) => {
                dropped.push(format!(
                    "{}: no XML written (the {} runtime cannot load this lowering; {original} is rated): {e:#}",
                    twin.name,
                    lowering.flavor().name(),
                ));
                lowered.push((Vec::new(), None));
            }
            Err(e) => return Err(e),
        }
        synthesis.algorithms.push(twin);
    }
    // Said on stderr with the other notes and carried by `--json`'s `notes`.
    synthesis.notes.extend(dropped);
    // Checked algorithms that no runtime can load are not a result.
    if let Some(reason) = unexpressed.filter(|_| lowered.iter().all(|(p, _)| p.is_empty())) {
        bail!(
            "none of the {} algorithms can be expressed for the runtimes (their JSON is in {}): {reason}",
            synthesis.algorithms.len(),
            args.out.display()
        );
    }
    if synthesis.algorithms[0].collective.kind == Kind::Custom {
        eprintln!("{CUSTOM_XML_NOTE}");
    }
    let xml_files: Vec<Vec<String>> = lowered.iter().map(|(p, _)| p.clone()).collect();
    let mut written = files.len() + xml_files.iter().map(Vec::len).sum::<usize>();
    if args.emit_dsl && synthesis.algorithms[0].collective.kind != Kind::Custom {
        let spec = required(&args.topo, "--topo")?;
        if args.nodes.nodes.is_some() {
            bail!("--emit-dsl names the topology by its spec and does not take --nodes: write a TOML with [multinode]");
        }
        written += crate::dsl::emit::write_programs(&synthesis.algorithms, spec, &args.out)?.len();
    }
    eprintln!("wrote {written} files to {}", args.out.display());
    let outcome = Outcome {
        args,
        topo: &topo,
        synthesis: &synthesis,
        files: &files,
        xml_files: &xml_files,
        started,
    };
    report(&outcome, &lowered, &progress, json, out)
}

/// The search `args` ask for and its limits (the deadline counted from `started`); errors
/// for a time limit, chunk cap or `--chunks`/`--rounds` that cannot be used.
fn search_and_limits(args: &SynthArgs, started: Instant) -> Result<(Search, Limits)> {
    if !(args.time_limit > 0.0 && args.time_limit.is_finite()) {
        bail!("--time-limit must be a positive number of seconds");
    }
    let max_chunks = args.max_chunks.unwrap_or(crate::engine::DEFAULT_MAX_CHUNKS);
    if max_chunks == 0 {
        bail!("--max-chunks must be at least 1");
    }
    if args.steps.is_none() && !args.least_steps {
        for (flag, given) in [
            ("--chunks", args.chunks.is_some()),
            ("--rounds", args.rounds.is_some()),
        ] {
            if given {
                bail!("{flag} needs --steps (one instance) or --least-steps; the Pareto search tries every R and 1 to --max-chunks chunks");
            }
        }
    }
    let search = match (args.steps, args.least_steps) {
        (Some(steps), _) => Search::Instance {
            steps,
            rounds: args.rounds.context("--steps needs --rounds")?,
            chunks: args.chunks.unwrap_or(1),
        },
        (None, true) => Search::LeastSteps {
            chunks: args.chunks.unwrap_or(1),
            rounds: args.rounds,
        },
        (None, false) => Search::Pareto,
    };
    let limits = Limits {
        max_steps: args.max_steps,
        max_chunks,
        max_chunks_given: args.max_chunks.is_some(),
        deadline: started + Duration::from_secs_f64(args.time_limit),
        extra_memory: args.encoding.extra_memory,
        work_limit: args.work_limit,
    };
    Ok((search, limits))
}

/// Runs the search with the engines `args` choose and names its algorithms uniquely.
fn search_algorithms(
    args: &SynthArgs,
    topo: &Topology,
    collective: Collective,
    search: Search,
    limits: Limits,
    lowering: &super::lower_args::LowerArgs,
    progress: &Progress,
) -> Result<Synthesis> {
    let (method, sketch) = args.encoding.resolve()?;
    progress.deadline(limits.deadline);
    let request = Request {
        topology: topo,
        collective,
        search,
        limits,
        progress,
    };
    let result = synthesize_with(&request, method, sketch.as_ref());
    progress.finish();
    let mut synthesis = result.map_err(|e| time_limit_error(e, args.time_limit))?;
    synthesis.algorithms = with_early_twins(std::mem::take(&mut synthesis.algorithms), lowering)?;
    let custom_file = (synthesis.algorithms.first()).and_then(|a| {
        (a.collective.kind == Kind::Custom).then(|| Path::new(args.coll.as_deref().unwrap_or("")))
    });
    crate::algorithm::name_uniquely(&mut synthesis.algorithms, custom_file);
    Ok(synthesis)
}

/// The twins worth lowering and simulating after `algorithms`, each with its algorithm's
/// name: with local reductions ([`crate::lower::local_reduction_twin`]), those of algorithms
/// that, with connections that never fill (`unstalled`), come within [`TWIN_REACH`] of what
/// the simulation reached at the largest compared size (`bar`): freed receives may take them
/// past it; with paced sends ([`crate::lower::paced_twins`]), those of algorithms whose
/// schedule (its steps and rounds on `topology`) comes within [`TWIN_REACH`] of the bar: the
/// pacing keeps the run to that schedule; with overlapping slices
/// ([`crate::lower::overlapping_slices_twin`]), and that twin's paced twins, those of
/// algorithms whose program keeps a connection's turn across slices ([`several_slices`]) and
/// whose schedule comes within [`TWIN_REACH`] of the bar or own figure within
/// [`OVERLAP_REACH`]. Named `NAME-lr`,
/// `NAME-ps`, `NAME-pa`, `NAME-os`, `NAME-os-ps` or `NAME-os-pa` where the rendered name is
/// taken.
fn late_twins(
    algorithms: &[Algorithm],
    stalls: &Stalls,
    bar: Option<f64>,
    topology: &Topology,
    options: &crate::lower::LowerOptions,
) -> Vec<(Algorithm, String)> {
    let Some(bar) = bar else {
        return Vec::new();
    };
    let mut names: std::collections::HashSet<String> =
        algorithms.iter().map(|a| a.name.clone()).collect();
    let mut twins = Vec::new();
    let reaches = |figure: &Option<f64>| figure.is_some_and(|f| f > bar * (1.0 - TWIN_REACH));
    let figures = (stalls.unstalled.iter())
        .zip(&stalls.own)
        .zip(&stalls.turns);
    for (a, ((unstalled, own), &turns)) in algorithms.iter().zip(figures) {
        let local = reaches(unstalled)
            .then(|| crate::lower::local_reduction_twin(a))
            .flatten()
            .map(|t| (t, "-lr"));
        let near = scheduled_busbw(a, topology) > bar * (1.0 - TWIN_REACH);
        let paced_twins = if near {
            crate::lower::paced_twins(a)
        } else {
            Vec::new()
        };
        let overlaps = turns && (near || own.is_some_and(|f| f > bar * (1.0 - OVERLAP_REACH)));
        let overlapping = overlaps
            .then(|| crate::lower::overlapping_slices_twin(a, options))
            .flatten();
        let overlapping_paced = overlapping.iter().flat_map(crate::lower::paced_twins);
        let paced = (paced_twins.into_iter())
            .chain(overlapping.clone())
            .chain(overlapping_paced)
            .map(|t| {
                let overlapping = if t.origin.overlapping_slices {
                    "-os"
                } else {
                    ""
                };
                let suffix = format!("{overlapping}{}", t.origin.pacing.suffix());
                (t, suffix)
            });
        let local = local.map(|(t, suffix)| (t, suffix.to_string()));
        for (mut twin, suffix) in local.into_iter().chain(paced) {
            if names.contains(&twin.name) {
                let most = crate::origin::MAX_NAME - suffix.len();
                twin.name = format!("{}{suffix}", crate::origin::shortened(&a.name, most));
            }
            if names.insert(twin.name.clone()) {
                twins.push((twin, a.name.clone()));
            }
        }
    }
    twins
}

/// The busbw (GB/s) that `algorithm`'s steps and rounds promise on `topology` at the largest
/// compared size ([`Algorithm::estimated_time_us`]).
fn scheduled_busbw(algorithm: &Algorithm, topology: &Topology) -> f64 {
    let size = COMPARE_BYTES as f64;
    let time_us = algorithm.estimated_time_us(topology, size);
    let factor = (algorithm.collective.kind.to_ir())
        .map_or(1.0, |c| c.busbw_factor(algorithm.collective.ranks));
    size / (time_us * 1e3) * factor
}

/// How far below the best figure at 1 GB an algorithm's own figure may be for its twin with
/// overlapping slices to be tried (with that twin's paced twins), where its schedule does
/// not already come within [`TWIN_REACH`]: what the twin wins back is small (3 x mi250's
/// rail rings: 0.1-0.4%).
const OVERLAP_REACH: f64 = 0.01;

/// How much faster a program must simulate at 1 GB with connections that never fill than
/// with the runtime's for its twin with local reductions to be tried.
const STALL_MARGIN: f64 = 0.005;

/// How far below the best figure at 1 GB an algorithm's unstalled figure may be for its twin
/// with local reductions to be tried: the twin's receives wait on nothing, not even on each
/// other's reductions, so it may pass the unstalled figure (dgx-h100x2's 8-piece rail
/// shortcut allreduce: 476.7 GB/s unstalled, 494.3 as the twin, past the best plain 488.6).
const TWIN_REACH: f64 = 0.05;

/// The note on two-step twin `twin` that lowers to the same program as `algorithm`.
fn same_program(twin: &Algorithm, algorithm: &Algorithm) -> String {
    format!(
        "{}: no XML written: it lowers to the same program as {}",
        twin.name, algorithm.name
    )
}

/// What the main command knows, when it comes to a two-step twin, of the algorithm before.
enum TwinOf {
    /// Nothing: no twin follows, or the algorithm was not written.
    Nothing,
    /// The algorithm's out-of-place program: a twin that lowers to it (but for its name) is
    /// neither written nor simulated.
    Program(Box<runtime::ir::Program>),
    /// The algorithm's own lowering took the fit pass, which receives in two steps: the twin
    /// is that program, so it is not lowered at all.
    FitPass,
}

/// A two-step twin that lowered to its algorithm's program but for its name: it is neither
/// written nor simulated again.
#[derive(Debug, thiserror::Error)]
#[error("the two-step twin lowers to the same program as its algorithm")]
struct SameProgram;

/// `algorithms`, each followed by its twin on address channels where one is made
/// ([`crate::lower::address_channel_twin`]), each of those by its two-step twin where the
/// flavour has no fused instructions and the twin lowers to another program
/// ([`crate::lower::two_step_twin`]): all are lowered, verified and simulated, and the
/// simulation picks per size (an equal figure keeps the earlier, the algorithm as found).
/// Twins with local reductions come later, where they may win ([`late_twins`]).
fn with_early_twins(
    algorithms: Vec<Algorithm>,
    lowering: &super::lower_args::LowerArgs,
) -> Result<Vec<Algorithm>> {
    let options = lowering.options(false)?;
    let mut all = Vec::with_capacity(algorithms.len());
    for a in algorithms {
        let spread = crate::lower::address_channel_twin(&a, &options);
        for a in std::iter::once(a).chain(spread) {
            let twin = crate::lower::two_step_twin(&a, &options);
            all.push(a);
            all.extend(twin);
        }
    }
    Ok(all)
}

/// Why a search that returned no algorithm found none: unsatisfiable, the caps, the greedy
/// engine's instance, the time limit, or an undecided solve.
fn nothing_found(
    args: &SynthArgs,
    topo: &Topology,
    synthesis: &Synthesis,
    search: Search,
    started: Instant,
) -> anyhow::Error {
    let max_chunks = args.max_chunks.unwrap_or(crate::engine::DEFAULT_MAX_CHUNKS);
    match search {
        Search::Instance {
            steps,
            rounds,
            chunks,
        } if synthesis.complete => {
            anyhow!("UNSAT: no {} algorithm on `{}` with steps={steps} rounds={rounds} chunks={chunks}", args.coll.as_deref().unwrap_or(""), topo.name)
        }
        _ if synthesis.complete => {
            anyhow!("no algorithm found within the caps (--max-steps, --max-chunks)")
        }
        Search::Instance { steps, rounds, .. }
            if matches!(synthesis.method, Method::Greedy { .. }) =>
        {
            anyhow!("the greedy engine found no algorithm within {steps} steps and {rounds} rounds (a greedy run proves nothing; drop --steps for its own answer)")
        }
        _ if started.elapsed().as_secs_f64() >= args.time_limit => anyhow!(
            "time limit of {} s reached while searching ({}), before any algorithm was found",
            args.time_limit,
            synthesis.method.name()
        ),
        _ => anyhow!(
            "no algorithm found after {:.1} s: the caps (--max-steps {}, --max-chunks {}) or a solve the solver could not decide stopped the search",
            started.elapsed().as_secs_f64(),
            args.max_steps,
            max_chunks
        ),
    }
}

/// What the main command reports once its algorithms are written.
struct Outcome<'a> {
    args: &'a SynthArgs,
    topo: &'a Topology,
    synthesis: &'a Synthesis,
    /// The algorithms' JSON files, one per algorithm.
    files: &'a [String],
    /// The algorithms' XML files (none for one the runtimes cannot express).
    xml_files: &'a [Vec<String>],
    started: Instant,
}

/// Draws the plot, compares with NCCL, prints the notes and warnings on stderr and the
/// result (JSON or the text table) on `out`.
fn report(
    outcome: &Outcome,
    lowered: &[(Vec<String>, Option<Simulated>)],
    progress: &Progress,
    json: bool,
    out: &mut dyn Write,
) -> Result<()> {
    if let Some(path) = &outcome.args.plot {
        write_plot(path, outcome.synthesis, outcome.topo)?;
    }
    progress.message("simulating NCCL's baselines");
    let sim = outcome.args.model.sim_options()?;
    let versus = compare_with_nccl(lowered, outcome.topo, outcome.synthesis, &sim)?;
    progress.finish();
    for note in &outcome.synthesis.notes {
        eprintln!("note: {note}");
    }
    if let Some(v) = &versus {
        warn_where_nccl_wins(v, outcome.topo);
    }
    let seconds = outcome.started.elapsed().as_secs_f64();
    if json {
        return print_json(outcome, versus.as_ref(), seconds, out);
    }
    print_text(outcome, versus.as_ref(), seconds, out)
}

/// Writes the Pareto plot of the algorithms found (`--plot`).
fn write_plot(path: &Path, synthesis: &Synthesis, topo: &Topology) -> Result<()> {
    let points: Vec<_> = synthesis
        .algorithms
        .iter()
        .map(crate::draw::ParetoPoint::of)
        .collect();
    let rpc: num_rational::Ratio<u64> = synthesis
        .bounds
        .rounds_per_chunk
        .parse()
        .unwrap_or_else(|_| num_rational::Ratio::from_integer(0));
    let title = format!(
        "{} on {}: {} (steps, rounds, chunks){}",
        synthesis.algorithms[0].collective.kind,
        topo.name,
        if synthesis.complete {
            "Pareto frontier"
        } else {
            "partial frontier"
        },
        if points.len() == 1 {
            "; one algorithm"
        } else {
            ""
        }
    );
    let svg = crate::draw::pareto_svg(&title, &points, synthesis.bounds.steps, rpc);
    std::fs::write(path, svg).with_context(|| format!("{}: cannot write", path.display()))?;
    eprintln!("wrote {}", path.display());
    Ok(())
}

/// Warns on stderr at each compared size where one of NCCL's baselines simulates faster
/// than the best algorithm.
fn warn_where_nccl_wins(versus: &Versus, topo: &Topology) {
    for at in versus.sizes.iter().filter(|at| at.loses_to_nccl()) {
        eprintln!(
            "warning: the best algorithm simulates at {:.2} GB/s busbw at {}, slower than NCCL's {} ({:.2} GB/s) on {}",
            at.busbw,
            size_label(at.bytes),
            at.nccl_name(),
            at.nccl_best(),
            topo.name
        );
    }
}

/// Prints the result as one JSON document.
fn print_json(
    outcome: &Outcome,
    versus: Option<&Versus>,
    seconds: f64,
    out: &mut dyn Write,
) -> Result<()> {
    let (args, synthesis) = (outcome.args, outcome.synthesis);
    let algorithms: Vec<_> = synthesis
        .algorithms
        .iter()
        .zip(outcome.files.iter().zip(outcome.xml_files))
        .map(|(a, (f, x))| json!({"steps": a.num_steps(), "rounds": a.rounds(), "chunks": a.chunks(), "file": f, "xml": x}))
        .collect();
    let doc = json!({
        "topology": outcome.topo.name,
        "collective": synthesis.algorithms[0].collective.kind.name(),
        "bounds": synthesis.bounds,
        "algorithms": algorithms,
        "complete": synthesis.complete,
        "method": synthesis.method.name(),
        "engines": synthesis.engines.iter().map(|m| m.name()).collect::<Vec<_>>(),
        "notes": synthesis.notes,
        "extra_memory": args.encoding.extra_memory,
        "plot": args.plot.as_ref().map(|p| p.display().to_string()),
        "work_limit": args.work_limit,
        "cuts": synthesis.cuts,
        "at_1gb": versus,
        "seconds": seconds,
        "resources": crate::util::resources(),
    });
    writeln!(out, "{}", serde_json::to_string_pretty(&doc)?)?;
    Ok(())
}

/// Prints the bounds and one line per algorithm with its estimated times at
/// [`TABLE_SIZES`] and its file.
fn print_algorithm_table(outcome: &Outcome, out: &mut dyn Write) -> Result<()> {
    let (topo, synthesis) = (outcome.topo, outcome.synthesis);
    let caps = topo.capacities()?;
    let approximate = if caps.exact {
        ""
    } else {
        ", rounded down (the bandwidths have no common unit)"
    };
    writeln!(
        out,
        "topology {} ({} ranks; capacities in units of {} GB/s{approximate}), collective {}",
        topo.name, topo.ranks, caps.unit_gbps, synthesis.algorithms[0].collective.kind
    )?;
    writeln!(
        out,
        "lower bounds: {} steps, {} rounds per chunk",
        synthesis.bounds.steps, synthesis.bounds.rounds_per_chunk
    )?;
    let sizes: Vec<String> = TABLE_SIZES
        .iter()
        .map(|(_, l)| format!("{:>12}", format!("t@{l} (us)")))
        .collect();
    writeln!(
        out,
        "{:>5} {:>6} {:>6} {:>9} {} file",
        "steps",
        "rounds",
        "chunks",
        "R/C",
        sizes.join(" ")
    )?;
    for (a, file) in synthesis.algorithms.iter().zip(outcome.files) {
        let time = |s: f64| match synthesis.method {
            Method::Milp => crate::milp::predict_us(a, topo, s),
            _ => a.estimated_time_us(topo, s),
        };
        let times: Vec<String> = TABLE_SIZES
            .iter()
            .map(|(s, _)| format!("{:>12.2}", time(*s)))
            .collect();
        writeln!(
            out,
            "{:>5} {:>6} {:>6} {:>9} {} {}",
            a.num_steps(),
            a.rounds(),
            a.chunks(),
            a.rounds_per_chunk().to_string(),
            times.join(" "),
            file
        )?;
    }
    Ok(())
}

/// Prints the simulated comparison with NCCL: one line per compared size below 1 GB, then
/// the 1 GB line against the bound.
fn print_versus(v: &Versus, out: &mut dyn Write) -> Result<()> {
    for at in v.sizes.iter().filter(|at| at.bytes != COMPARE_BYTES) {
        writeln!(
            out,
            "simulated at {}: best {:.2} GB/s busbw ({}, {}); NCCL's choice {}; NCCL Simple ring {}, tree {}, p2p {}",
            size_label(at.bytes),
            at.busbw,
            at.algorithm,
            at.protocol.map_or("-", |p| p.name()),
            at.nccl_choice_text(),
            at.ring.map_or("-".into(), |x| format!("{x:.2}")),
            at.tree.map_or("-".into(), |x| format!("{x:.2}")),
            at.p2p.map_or("-".into(), |x| format!("{x:.2}")),
        )?;
    }
    let two_phase = v.two_phase.map_or(String::new(), |b| {
        format!(
            " ({:.1}% of the reduce-scatter + allgather optimum {b:.1})",
            100.0 * v.busbw / b
        )
    });
    writeln!(
        out,
        "simulated at 1 GB: best {:.1} GB/s busbw ({}) = {:.1}% of the {} {:.1}{two_phase}; NCCL's choice {}; NCCL Simple ring {}, tree {}, p2p {}",
        v.busbw,
        v.sizes.last().and_then(|at| at.protocol).map_or("-", |p| p.name()),
        100.0 * v.busbw / v.bound,
        if v.exact { "exact optimum" } else { "bound" },
        v.bound,
        v.sizes.last().map_or("-".into(), |at| at.nccl_choice_text()),
        v.ring.map_or("-".into(), |x| format!("{x:.1}")),
        v.tree.map_or("-".into(), |x| format!("{x:.1}")),
        v.p2p.map_or("-".into(), |x| format!("{x:.1}")),
    )?;
    Ok(())
}

/// Prints the result as text: the algorithms, the comparison with NCCL, the cuts and how
/// the search ended.
fn print_text(
    outcome: &Outcome,
    versus: Option<&Versus>,
    seconds: f64,
    out: &mut dyn Write,
) -> Result<()> {
    let synthesis = outcome.synthesis;
    print_algorithm_table(outcome, out)?;
    let status = if synthesis.complete {
        "complete"
    } else if synthesis.cuts.iter().any(|c| c.limit == "work") {
        "PARTIAL (the work limit cut a solve short; see the cuts above)"
    } else {
        "PARTIAL (a cap or the time limit stopped the search)"
    };
    let how = synthesis
        .engines
        .iter()
        .map(|m| match m {
            Method::Milp => "MILP; times predicted with per-link alpha-beta costs",
            Method::Trees => "tree packing",
            Method::Greedy { .. } => "greedy matching",
            _ => "SMT",
        })
        .collect::<Vec<_>>()
        .join(" + ");
    if let Some(v) = versus {
        print_versus(v, out)?;
    }
    for cut in &synthesis.cuts {
        writeln!(out, "cut ({} limit): {}", cut.limit, cut.what)?;
    }
    writeln!(out, "search {status} ({how}); {seconds:.2} s")?;
    Ok(())
}

/// Whether a lowering error says that the runtimes cannot express the program (as opposed
/// to an internal error).
fn unexpressible(e: &anyhow::Error) -> bool {
    e.downcast_ref::<crate::lower::LowerError>().is_some()
}

/// Largest fabric on which the main command simulates its result against NCCL (the
/// baselines' programs grow with ranks × steps).
const COMPARE_MAX_RANKS: usize = 1024;

/// Largest fabric on which the main command simulates an alltoall against NCCL: its
/// programs (synthesized and NCCL's point-to-point baseline) move n² blocks, relayed over
/// several hops where the fabric is not fully connected, at 1 GB and 1 MB.
const COMPARE_ALLTOALL_MAX_RANKS: usize = 64;

/// Size at which results are compared with NCCL (nccl-tests' 1 GB).
const COMPARE_BYTES: u64 = 1 << 30;

/// Every size at which the main command simulates its algorithms against NCCL: the latency
/// side (1 KB, 64 KB), the middle (1 MB, 16 MB) and the bandwidth side (1 GB).
const COMPARE_SIZES: [u64; 5] = [1 << 10, 64 << 10, 1 << 20, 16 << 20, COMPARE_BYTES];

/// `1 KB`, `64 KB`, `1 MB`, `1 GB` (binary units, as everywhere in synth).
fn size_label(bytes: u64) -> String {
    let label = crate::catalog::bytes_label(bytes);
    match label.strip_suffix(['K', 'M', 'G']) {
        Some(number) => format!("{number} {}B", &label[number.len()..]),
        None => format!("{label} B"),
    }
}

/// The best algorithm at one size, simulated, beside NCCL's.
#[derive(Debug, Clone, serde::Serialize)]
struct AtSize {
    /// nccl-tests size in bytes.
    bytes: u64,
    /// Best busbw (GB/s) among the algorithms.
    busbw: f64,
    /// The algorithm that reached it.
    algorithm: String,
    /// The protocol it reached it with.
    protocol: Option<runtime::ir::Protocol>,
    /// NCCL's choice (`algo/protocol`, e.g. `tree/LL`), where it has one.
    nccl_choice: Option<String>,
    /// NCCL's choice's simulated busbw.
    nccl_busbw: Option<f64>,
    /// NCCL ring's busbw (Simple), where defined.
    ring: Option<f64>,
    /// NCCL tree's busbw, where defined.
    tree: Option<f64>,
    /// NCCL's point-to-point busbw (alltoall, gather, scatter), where defined.
    p2p: Option<f64>,
}

impl AtSize {
    /// A row of the selection table as the main command reports it: the best algorithm
    /// (by name; none, 0 GB/s, where no algorithm reached more) and NCCL's busbw.
    fn of(row: &Row, simulated: &[Option<&Simulated>]) -> AtSize {
        let best = row.best_point().map(|(i, p)| {
            let name = simulated.get(i).copied().flatten();
            (p.busbw, name.map_or(String::new(), |s| s.name.clone()))
        });
        let (busbw, algorithm) = best.unwrap_or((0.0, String::new()));
        let busbw_of = |p: &Option<Point>| p.as_ref().map(|p| p.busbw);
        AtSize {
            bytes: row.size,
            busbw,
            algorithm,
            protocol: row.best_point().map(|(_, p)| p.protocol),
            nccl_choice: row.nccl.as_ref().map(|n| n.choice.label()),
            nccl_busbw: row.nccl.as_ref().map(|n| n.point.busbw),
            ring: busbw_of(&row.ring),
            tree: busbw_of(&row.tree),
            p2p: busbw_of(&row.p2p),
        }
    }

    /// NCCL's baselines with their names.
    fn nccl(&self) -> [(&'static str, f64); 3] {
        [("ring", self.ring), ("tree", self.tree), ("p2p", self.p2p)]
            .map(|(name, v)| (name, v.unwrap_or(0.0)))
    }

    /// The busbw of what NCCL runs: its choice, else its fastest Simple baseline.
    fn nccl_best(&self) -> f64 {
        (self.nccl_busbw).unwrap_or_else(|| self.nccl().iter().map(|x| x.1).fold(0.0, f64::max))
    }

    /// What NCCL runs: its choice, else the fastest Simple baseline's name (the first of
    /// ring, tree, p2p on a tie).
    fn nccl_name(&self) -> String {
        if let Some(c) = &self.nccl_choice {
            return c.clone();
        }
        let best = self.nccl_best();
        (self.nccl().iter().find(|x| x.1 == best)).map_or("ring".into(), |x| x.0.to_string())
    }

    /// `ALGO/PROTO BUSBW`, or `-`.
    fn nccl_choice_text(&self) -> String {
        match (&self.nccl_choice, self.nccl_busbw) {
            (Some(c), Some(b)) => format!("{c} {b:.2}"),
            _ => "-".into(),
        }
    }

    fn loses_to_nccl(&self) -> bool {
        crate::select::loses(self.busbw, self.nccl_best())
    }
}

/// The best synthesized algorithm against NCCL's baselines, simulated at
/// [`COMPARE_SIZES`]; the top-level figures are those at 1 GB.
#[derive(Debug, Clone, serde::Serialize)]
struct Versus {
    /// Best busbw (GB/s) among the algorithms at 1 GB.
    busbw: f64,
    /// NCCL ring's busbw at 1 GB, where defined.
    ring: Option<f64>,
    /// NCCL tree's busbw at 1 GB, where defined.
    tree: Option<f64>,
    /// NCCL's point-to-point busbw at 1 GB (alltoall, gather, scatter), where defined.
    p2p: Option<f64>,
    /// NCCL's choice at 1 GB (`algo/protocol`) and its simulated busbw.
    nccl_choice: Option<String>,
    /// NCCL's choice's busbw at 1 GB.
    nccl_busbw: Option<f64>,
    /// The bandwidth bound (busbw at 1 GB).
    bound: f64,
    /// Whether the bound is the exact optimum.
    exact: bool,
    /// Allreduce: the busbw at 1 GB of reduce-scatter then allgather, each at its optimum.
    two_phase: Option<f64>,
    /// The best busbw at 1 MB, and NCCL ring's.
    at_1mb: (f64, Option<f64>),
    /// Every compared size, smallest first.
    sizes: Vec<AtSize>,
}

/// The most steps of lowered programs the main command holds before simulating them (about
/// 100 MB): below it every candidate is ordered by its bound before any is simulated.
const HOLD_STEPS: usize = 2_000_000;

/// A lowered out-of-place program waiting to be simulated.
struct Held {
    /// Its algorithm's place in the synthesis (the table's order).
    index: usize,
    /// Its [`Simulation::bound_busbw`] at the largest compared size.
    key: f64,
    /// Its bounds, which the simulation reads again.
    bounds: ProgramBounds,
    program: runtime::ir::Program,
}

/// Simulates `held` in [`simulation_order`] of their keys, each figure into `lowered` at its
/// place.
fn simulate_held(
    race: &mut Race,
    held: Vec<Held>,
    (topo, sim): (&Topology, &SimOptions),
    progress: &Progress,
    lowered: &mut [(Vec<String>, Option<Simulated>)],
    stalls: &mut Stalls,
) -> Result<()> {
    let keys: Vec<f64> = held.iter().map(|h| h.key).collect();
    let mut held: Vec<Option<Held>> = held.into_iter().map(Some).collect();
    for k in simulation_order(&keys) {
        let h = held[k].take().expect("each once");
        progress.message(&format!("simulating {} at 1 KB to 1 GB", h.program.name));
        let above_the_bar = race.bar().last().is_some_and(|&bar| h.key > bar);
        let entered =
            race.enter_bounded(&compared(topo, sim), h.index, &h.program, Some(&h.bounds))?;
        let own = entered.own.last().cloned().flatten().map(|p| p.busbw);
        if let Some(figure) = stalls.own.get_mut(h.index) {
            *figure = own;
        }
        if let Some(turns) = stalls.turns.get_mut(h.index) {
            *turns = several_slices(&h.program, sim)
                && crate::lower::keeps_turns_across_slices(&h.program);
        }
        if let Some(own) =
            own.filter(|_| stalls.joined.get(h.index) == Some(&true) && above_the_bar)
        {
            // A filter only: where this simulation fails, no twin is tried. Only a program
            // that its full connections slow down keeps the figure.
            let unstalled = unstalled_busbw(&h.program, topo, sim).ok();
            stalls.unstalled[h.index] = unstalled.filter(|&u| u > own * (1.0 + STALL_MARGIN));
        }
        let points = entered.points;
        lowered[h.index].1 = Some(Simulated {
            name: h.program.name.clone(),
            points,
        });
    }
    Ok(())
}

/// Whether `program`'s largest message takes more than one Simple slice at
/// [`COMPARE_BYTES`]: how a split connection takes its turns across the slices then counts
/// (a 128-rank torus allreduce at 4 pieces sends 2 MiB messages at 1 GB, one slice: its
/// twin with overlapping slices simulates the same; 3 x mi250's coalesced rail rings send
/// 8 chunks of 0.5 MiB as one message, and their twin differs).
fn several_slices(program: &runtime::ir::Program, sim: &SimOptions) -> bool {
    let chunks = program.nchunksperloop.max(1) as u64;
    let elements = crate::simulate::elements_for(COMPARE_BYTES, program.nchunksperloop);
    let chunk_bytes = elements / chunks * crate::simulate::ELEMENT_BYTES;
    let count = program.steps().map(|(_, s)| s.count).max().unwrap_or(1) as u64;
    chunk_bytes * count > sim.model.slice_bytes.get(runtime::ir::Protocol::Simple)
}

/// What the main command learns, while it simulates, that decides which late twins it tries
/// ([`late_twins`]): whether an algorithm's twin with local reductions may win, its own
/// figure, and whether its twin with overlapping slices may simulate otherwise.
struct Stalls {
    /// Per algorithm: whether a step of it joins messages in one accumulator (it has a
    /// twin with local reductions).
    joined: Vec<bool>,
    /// Per algorithm: its busbw at the largest compared size with connections that never
    /// fill ([`unstalled_busbw`]), where it was above the bar and that figure is more than
    /// [`STALL_MARGIN`] above its own.
    unstalled: Vec<Option<f64>>,
    /// Per algorithm: its own busbw at the largest compared size, where it was simulated
    /// that far.
    own: Vec<Option<f64>>,
    /// Per algorithm: whether a connection of its program keeps its turn across slices and
    /// its chunks take several slices at the largest compared size (its twin with
    /// overlapping slices may simulate otherwise).
    turns: Vec<bool>,
}

/// `program`'s busbw at [`COMPARE_BYTES`] (Simple) where no connection ever holds its
/// sender back (an unbounded FIFO): what it loses to full connections is what its twin with
/// local reductions, whose receives never wait for each other, can win back (at the cost of
/// a pass through memory per message).
fn unstalled_busbw(
    program: &runtime::ir::Program,
    topo: &Topology,
    sim: &SimOptions,
) -> Result<f64> {
    let mut options = *sim;
    options.model.fifo_depth = usize::MAX;
    options.protocol = Some(runtime::ir::Protocol::Simple);
    Ok(crate::simulate::simulate(program, topo, COMPARE_BYTES, &options)?.busbw)
}

/// An algorithm's name and simulated figures at each of [`COMPARE_SIZES`] (`None` where it
/// does not beat the algorithms simulated before it, or tie them from an earlier place: see
/// [`Simulation::curve_winning`]).
#[derive(Debug, Clone)]
struct Simulated {
    name: String,
    points: Vec<Option<Point>>,
}

/// How the main command simulates: at [`COMPARE_SIZES`] with the model's simulator
/// options, under every protocol, each program laid out once and its sizes run in parallel.
fn compared<'a>(topo: &'a Topology, sim: &SimOptions) -> Simulation<'a> {
    Simulation {
        topology: topo,
        sizes: &COMPARE_SIZES,
        options: *sim,
        runs: Runs::Together,
        protocols: &crate::select::ALL_PROTOCOLS,
    }
}

/// Whether the main command simulates its algorithms against NCCL: built-in collectives on
/// fabrics up to [`COMPARE_MAX_RANKS`] ranks, alltoall up to [`COMPARE_ALLTOALL_MAX_RANKS`].
fn compares(kind: Kind, ranks: usize) -> bool {
    match kind.to_ir() {
        None => false,
        Some(runtime::ir::Collective::AllToAll) => ranks <= COMPARE_ALLTOALL_MAX_RANKS,
        Some(_) => ranks <= COMPARE_MAX_RANKS,
    }
}

/// Simulates NCCL's ring, tree and point-to-point baselines (those defined for the
/// collective) at [`COMPARE_SIZES`] beside the algorithms' own figures (`None` where
/// [`compares`] says no, and when no algorithm was simulated).
fn compare_with_nccl(
    lowered: &[(Vec<String>, Option<Simulated>)],
    topo: &Topology,
    synthesis: &Synthesis,
    sim: &SimOptions,
) -> Result<Option<Versus>> {
    let kind = synthesis.algorithms[0].collective.kind;
    let Some(ir) = kind.to_ir().filter(|_| compares(kind, topo.ranks)) else {
        return Ok(None);
    };
    if lowered.iter().all(|(_, s)| s.is_none()) {
        return Ok(None);
    }
    let root = synthesis.algorithms[0].collective.root;
    let simulated: Vec<Option<&Simulated>> = lowered.iter().map(|(_, s)| s.as_ref()).collect();
    let curves: Vec<Vec<Option<Point>>> = (simulated.iter())
        .map(|s| s.map_or_else(Vec::new, |s| s.points.clone()))
        .collect();
    let table = compared(topo, sim).table(ir, root, &curves, Rule::HighestBusbw);
    let sizes: Vec<AtSize> = (table.rows.iter())
        .map(|row| AtSize::of(row, &simulated))
        .collect();
    let at = |bytes: u64| sizes.iter().find(|s| s.bytes == bytes).expect("compared");
    let bound = CutBound::new(ir, topo, root);
    Ok(Some(Versus {
        busbw: at(COMPARE_BYTES).busbw,
        ring: at(COMPARE_BYTES).ring,
        tree: at(COMPARE_BYTES).tree,
        p2p: at(COMPARE_BYTES).p2p,
        nccl_choice: at(COMPARE_BYTES).nccl_choice.clone(),
        nccl_busbw: at(COMPARE_BYTES).nccl_busbw,
        at_1mb: (at(1 << 20).busbw, at(1 << 20).ring),
        bound: bound.busbw_at(COMPARE_BYTES),
        exact: bound.exact,
        two_phase: (ir == runtime::ir::Collective::AllReduce)
            .then(|| crate::cutbound::two_phase_allreduce_busbw(topo, Some(COMPARE_BYTES))),
        sizes,
    }))
}

/// Sends above which an algorithm's JSON is written without indentation.
const COMPACT_JSON_SENDS: usize = 100_000;

/// Writes each algorithm as `DIR/NAME.json` (compact past [`COMPACT_JSON_SENDS`] sends);
/// returns the paths. Two algorithms of one run never share a file: a repeated name is an
/// error before anything is written (see [`crate::algorithm::name_uniquely`]).
fn write_algorithms(algorithms: &[Algorithm], dir: &Path) -> Result<Vec<String>> {
    let mut names = std::collections::HashSet::new();
    if let Some(a) = algorithms.iter().find(|a| !names.insert(a.name.as_str())) {
        bail!(
            "internal error: two algorithms are named {}; nothing was written",
            a.name
        );
    }
    std::fs::create_dir_all(dir)
        .with_context(|| format!("{}: cannot create folder", dir.display()))?;
    algorithms
        .iter()
        .map(|a| {
            let path = dir.join(format!("{}.json", a.name));
            // Large algorithms (a 1024-rank alltoall has 16 million sends) are written
            // compact: pretty-printing would triple a file of gigabytes.
            let sends: usize = a.steps.iter().map(|s| s.sends.len()).sum();
            let text = if sends > COMPACT_JSON_SENDS {
                serde_json::to_string(a)?
            } else {
                serde_json::to_string_pretty(a)?
            };
            std::fs::write(&path, text)
                .with_context(|| format!("{}: cannot write", path.display()))?;
            Ok(path.display().to_string())
        })
        .collect()
}

/// How long `synth bounds` lets the multicast flow LP run before it reports the cut and
/// max-flow bounds alone.
const BOUNDS_LP_SECONDS: u64 = 60;

/// `synth bounds`: the lower bounds of a collective on a topology: steps and rounds per chunk
/// (what the main command reports for the engine `auto` picks), and the bandwidth optimum.
pub fn bounds(
    topo: Topology,
    coll: &str,
    root: Option<usize>,
    json: bool,
    out: &mut dyn Write,
) -> Result<()> {
    let progress = Progress::new(true);
    let collective = load_collective(coll, &topo, root)?;
    let deadline = Instant::now() + Duration::from_secs(BOUNDS_LP_SECONDS);
    progress.deadline(deadline);
    let (steps, rpc) = steps_and_rounds_per_chunk(&collective, &topo, deadline, &progress)?;
    progress.bound(&format!("{steps} steps, R/C >= {rpc}"));
    progress.message("bandwidth optimum: maximum flows");
    let cut = collective
        .kind
        .to_ir()
        .map(|ir| CutBound::new(ir, &topo, collective.root));
    // Allreduce: what reduce-scatter then allgather can reach, beside the cut bound.
    let two_phase = (collective.kind == Kind::AllReduce)
        .then(|| crate::cutbound::two_phase_allreduce_busbw(&topo, None));
    progress.finish();
    if json {
        let doc = json!({
            "topology": topo.name,
            "collective": collective.kind.name(),
            "bounds": {"steps": steps, "rounds_per_chunk": rpc.to_string()},
            "busbw_bound_gbps": cut.as_ref().map(|c| c.busbw()),
            "busbw_exact_optimum": cut.as_ref().map(|c| c.exact),
            "binding_cut": cut.as_ref().map(|c| c.binding.clone()),
            "two_phase_busbw_gbps": two_phase,
            "time_bound_us": cut.as_ref().map(|c| TABLE_SIZES.map(|(b, _)| (b, c.time_us(b as u64)))),
        });
        writeln!(out, "{}", serde_json::to_string_pretty(&doc)?)?;
        return Ok(());
    }
    writeln!(
        out,
        "{} on {}: at least {steps} steps and {rpc} rounds per chunk",
        collective.kind, topo.name
    )?;
    print_bandwidth_bounds(cut.as_ref(), two_phase, out)
}

/// The steps and rounds-per-chunk bounds of `collective` as the engine `auto` picks solves
/// it (the multicast flow LP where that is SMT, the cut bounds otherwise): over its
/// non-combining parts (an allreduce's two allgathers, a combining collective's dual).
fn steps_and_rounds_per_chunk(
    collective: &Collective,
    topo: &Topology,
    deadline: Instant,
    progress: &Progress,
) -> Result<(usize, num_rational::Ratio<u64>)> {
    if collective.ends_on_many() {
        let b = crate::bounds::reduction_bounds(topo, collective)?;
        return Ok((b.steps, b.rounds_per_chunk));
    }
    let with_lp = Method::Auto.resolve(topo, collective.kind, false) == Method::Smt;
    let parts: Vec<(Collective, Topology)> = if collective.kind == Kind::AllReduce {
        vec![
            (
                Collective::new(Kind::AllGather, topo.ranks, 0, 1)?,
                topo.reversed(),
            ),
            (
                Collective::new(Kind::AllGather, topo.ranks, 0, 1)?,
                topo.clone(),
            ),
        ]
    } else if let Some(dual) = collective.dual()? {
        vec![(dual, topo.reversed())]
    } else {
        vec![(collective.clone(), topo.clone())]
    };
    let mut steps = 0;
    let mut rpc = num_rational::Ratio::from_integer(0u64);
    for (c, t) in &parts {
        progress.message(if with_lp {
            "steps and rounds per chunk: multicast flow LP"
        } else {
            "steps and rounds per chunk: cut bounds"
        });
        let b = if with_lp {
            lower_bounds(t, c, deadline)?
        } else {
            cut_bounds(t, c)?
        };
        steps += b.steps;
        rpc += b.rounds_per_chunk;
    }
    if collective.kind == Kind::AllReduce {
        // Not two phases in general: the one-shot takes one step where every pair is
        // linked; every rank needs the farthest rank's input (the diameter).
        steps = steps.min(topo.diameter().unwrap_or(1).max(1));
    }
    Ok((steps, rpc))
}

/// Prints the bandwidth bound (or exact optimum) with the times it implies, and an
/// allreduce's two-phase optimum.
fn print_bandwidth_bounds(
    cut: Option<&CutBound>,
    two_phase: Option<f64>,
    out: &mut dyn Write,
) -> Result<()> {
    if let Some(c) = cut {
        let what = if c.exact {
            "bandwidth optimum (exact)"
        } else {
            "bandwidth bound"
        };
        writeln!(
            out,
            "{what}: busbw at most {:.1} GB/s ({}); time at least {:.2} us at 1 KB, {:.2} us at 1 MB, {:.1} us at 1 GB",
            c.busbw(),
            c.binding,
            c.time_us(1 << 10),
            c.time_us(1 << 20),
            c.time_us(1 << 30)
        )?;
    }
    if let Some(b) = two_phase {
        writeln!(
            out,
            "reduce-scatter + allgather optimum: busbw {b:.1} GB/s (what a two-phase allreduce reaches)"
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::{Send, Step};

    #[test]
    fn two_algorithms_of_one_run_never_share_a_file() {
        let coll = Collective::new(Kind::AllGather, 2, 0, 1).unwrap();
        let step = |rounds| Step {
            rounds,
            reduce: false,
            sends: vec![Send {
                chunk: 0,
                src: 0,
                dst: 1,
            }],
        };
        let a = |rounds| Algorithm {
            name: "allgather-x-s1-r1-c1".into(),
            origin: Default::default(),
            topology: "x".into(),
            collective: coll.clone(),
            steps: vec![step(rounds)],
            piece_channels: None,
            step_groups: None,
            message_chunks: None,
            serial_links: false,
            rank_order: None,
        };
        let tmp = tempfile::Builder::new()
            .prefix("synth-write-")
            .tempdir()
            .unwrap();
        let dir = tmp.path().join("out");
        let e = write_algorithms(&[a(1), a(2)], &dir).unwrap_err();
        assert!(e.to_string().contains("two algorithms are named"), "{e}");
        assert!(!dir.join("allgather-x-s1-r1-c1.json").exists());
    }
}
