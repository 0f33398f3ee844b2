//! Catalogs: the best synthesized algorithm per message-size range, as a folder that
//! `MSCCL_ALGO_DIR` can point at (DESIGN §1, last box).
//!
//! # What a catalog is
//!
//! For each collective:
//!
//! 1. **Candidates.** The algorithms of a search ([`Options::search`], the Pareto frontier by
//!    default) with [`synthesize_with`], plus any extra instances ([`Options::extra`]); if
//!    both give nothing, the least-steps algorithm at C = 1; with the default method, tree
//!    packing (bandwidth side) and the greedy engine (latency side, up to
//!    [`crate::synthesize::AUTO_GREEDY_MAX_RANKS`] ranks) are candidates too wherever they
//!    apply, so SMT, trees, greedy and NCCL's ring and tree compete per size. Each is lowered with every
//!    replication count of [`Options::instances`] (1, 2, 4 by default: the algorithm runs on N
//!    channels, each carrying 1/N of every chunk), in place and out of place; a variant that
//!    fails to lower, to verify ([`runtime::verify::verify`]) or to serialize is dropped with a
//!    note.
//! 2. **Simulation.** Every candidate is simulated ([`crate::simulate`]) at every grid size
//!    (nccl-tests sizes; 1 B to 16 GiB by ×4 by default). The runtime only runs a program on
//!    whole chunks, so, as in the runtime, the element count of a size is rounded down to a
//!    multiple of the program's `nchunksperloop` (at least one element per chunk): each
//!    candidate is simulated at its own rounded size ([`Point::simulated_bytes`]).
//! 3. **Choice.** At each grid size the candidate with the least simulated time wins (within
//!    [`TIE`] of the fastest, the one with the fewest chunks per loop, then the fewest
//!    channels, wins: it is valid at more sizes). Adjacent grid sizes with the same winner
//!    form one range. Between two ranges the switch point is found by bisection on the
//!    byte count with the same rule, so a range starts where its algorithm starts to win.
//!    The simulations and this rule are [`crate::select`]'s ([`Rule::LeastTime`]).
//!    Grid sizes where one of NCCL's own algorithms (ring, tree, point-to-point: those
//!    [`crate::baseline`] defines for the collective, simulated the same way) is faster than
//!    every candidate are left to NCCL: no file covers them, so MSCCL falls back to NCCL
//!    there.
//! 4. **Ranges.** Inclusive `[minBytes, maxBytes]` with the executor's semantics
//!    (msccl-ir.md §2.1: selected when `minBytes ≤ nBytes` and (`maxBytes == 0` or
//!    `nBytes ≤ maxBytes`), `nBytes` = nccl-tests size). The ranges (ours and NCCL's) start
//!    at 1 B, each next one at the previous `maxBytes + 1`, and the last has `maxBytes = 0`
//!    (no upper limit): they are disjoint and cover every size from 1 B. A
//!    file is still skipped by the runtime at sizes whose element count is not a multiple of
//!    its `nchunksperloop` (NCCL then runs its own algorithm).
//!
//! # Files
//!
//! * `OUT/algos/COLL-KK-LABEL.xml` and `OUT/algos/COLL-KK-LABEL.inplace.xml`: one XML per
//!   range and buffer mode (the runtime matches `inplace`/`outofplace` to the call), `KK`
//!   the range's index from the smallest sizes, so sorted order is priority order (and
//!   ranges are disjoint anyway). The runtime parses *every* file of `MSCCL_ALGO_DIR` as an
//!   algorithm, so the XML files have a folder of their own: `MSCCL_ALGO_DIR=OUT/algos`.
//! * `OUT/manifest.json`: the [`Manifest`].
//! * `OUT/README.md`: per collective, the ranges table and the per-size table next to NCCL's
//!   ring, tree and point-to-point baselines (simulated the same way) and the cut bound
//!   ([`crate::cutbound`]).
//! * `OUT/COLL-busbw.svg`: busbw against log2(size), one line per candidate plus NCCL's
//!   baselines and the bound.

use crate::algorithm::Algorithm;
use crate::collective::{Collective, Kind};
use crate::cutbound::CutBound;
use crate::lower::{lower_to_xml, LowerOptions};
use crate::progress::Progress;
use crate::select::{preferred, Preference, Rule, Runs, Simulation, Table};
use crate::simulate::{elements_for, SimOptions, ELEMENT_BYTES};
use crate::sketch::Sketch;
use crate::smt::Limits;
use crate::synthesize::{synthesize_with, BoundsReport, Method, Request, Search, Synthesis};
use crate::topology::Topology;
use anyhow::{anyhow, bail, Context, Result};
use runtime::ir::{Flavor, Program, Protocol};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The default size grid: 1 B to 16 GiB by factors of 4 (`runtime::cpu::parse_sizes`).
pub const DEFAULT_SIZES: &str = "1:16G:4";

/// The sub-folder of the output folder that holds the XML files (`MSCCL_ALGO_DIR`).
pub const ALGO_DIR: &str = "algos";

pub use crate::select::{Point, TIE};
pub use report::readme;

pub mod deploy;
mod report;

/// How a catalog is built.
#[derive(Debug, Clone)]
pub struct Options {
    /// Encoding (`Auto`: SMT for one small node, MILP otherwise).
    pub method: Method,
    /// Sketch for the MILP encoding.
    pub sketch: Option<Sketch>,
    /// The main search per collective.
    pub search: Search,
    /// Extra instances (steps, rounds, chunks) solved for one collective each.
    pub extra: Vec<(Kind, usize, usize, usize)>,
    /// Wall-clock limit in seconds of each search (the main one, each extra instance).
    pub time_limit: f64,
    /// Cap on steps of the searches.
    pub max_steps: usize,
    /// Cap on chunks of the searches.
    pub max_chunks: usize,
    /// Replication counts (channels) each algorithm is lowered with.
    pub instances: Vec<usize>,
    /// Grid of nccl-tests sizes in bytes, increasing.
    pub sizes: Vec<u64>,
    /// XML dialect (`Nccl` or `Rccl`: both read `maxBytes` as inclusive, 0 = no limit).
    pub flavor: Flavor,
    /// Simulator options.
    pub sim: SimOptions,
    /// SCCL's extra-memory limit for the non-combining collectives (see
    /// [`crate::engine::Limits::extra_memory`]); when set, tree packing is not tried.
    pub extra_memory: Option<usize>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            method: Method::Auto,
            sketch: None,
            search: Search::Pareto,
            extra: Vec::new(),
            time_limit: 120.0,
            max_steps: 16,
            max_chunks: 8,
            instances: vec![1, 2, 4],
            sizes: runtime::cpu::parse_sizes(DEFAULT_SIZES).expect("valid default sizes"),
            flavor: Flavor::Nccl,
            sim: SimOptions::default(),
            extra_memory: None,
        }
    }
}

/// One lowered candidate and its simulated curve.
#[derive(Debug, Clone, Serialize)]
pub struct Candidate {
    /// `NAME-iN`: the algorithm's name and the replication count.
    pub label: String,
    /// Steps S.
    pub steps: usize,
    /// Rounds R.
    pub rounds: u32,
    /// Chunks C of the algorithm (before replication).
    pub chunks: usize,
    /// Replication count (channels per chunk).
    pub instances: usize,
    /// `nchunksperloop` of the program: sizes must be a multiple of it in elements.
    pub nchunksperloop: usize,
    /// Channels of the program.
    pub nchannels: usize,
    /// The curve over the grid.
    pub points: Vec<Point>,
    /// Whether an in-place variant lowered and verified (otherwise in-place calls of its
    /// ranges fall back to NCCL).
    pub has_inplace: bool,
    #[serde(skip)]
    outofplace: Program,
    #[serde(skip)]
    inplace: Option<Program>,
}

impl Candidate {
    /// What decides for it among equally fast candidates.
    fn preference(&self) -> Preference {
        Preference {
            has_inplace: self.has_inplace,
            nchunksperloop: self.nchunksperloop,
            nchannels: self.nchannels,
        }
    }
}

/// The baselines at one grid size (busbw in GB/s; `None` where undefined).
#[derive(Debug, Clone, Serialize)]
pub struct Baseline {
    /// Grid size.
    pub size: u64,
    /// NCCL ring, simulated.
    pub ring: Option<f64>,
    /// NCCL tree, simulated (allreduce only).
    pub tree: Option<f64>,
    /// NCCL's point-to-point algorithm, simulated (alltoall, gather, scatter).
    pub p2p: Option<f64>,
    /// NCCL's own choice of algorithm and protocol (`ring/LL`, ...).
    pub nccl: Option<String>,
    /// NCCL's choice, simulated.
    pub nccl_busbw: Option<f64>,
    /// The cut bound at this size.
    pub bound: f64,
    /// The simulated time of NCCL's choice (µs; the least of its Simple baselines where it
    /// has none).
    pub best_time_us: Option<f64>,
}

/// One size range and the files that serve it.
#[derive(Debug, Clone, Serialize)]
pub struct Range {
    /// Smallest size (bytes, inclusive).
    pub min_bytes: u64,
    /// Largest size (bytes, inclusive); 0 = no upper limit.
    pub max_bytes: u64,
    /// The winning candidate's label.
    pub algorithm: String,
    /// The protocol its files run (`proto`).
    pub protocol: Protocol,
    /// Steps, rounds, chunks, instances and chunks per loop of the winner.
    pub steps: usize,
    /// Rounds R.
    pub rounds: u32,
    /// Chunks C.
    pub chunks: usize,
    /// Replication count.
    pub instances: usize,
    /// `nchunksperloop`.
    pub nchunksperloop: usize,
    /// Out-of-place XML, relative to the output folder.
    pub file: String,
    /// In-place XML, relative to the output folder (`None` when the in-place lowering does
    /// not verify: in-place calls then run NCCL's own algorithm).
    pub file_inplace: Option<String>,
    /// The winner's simulated points at the grid sizes inside the range.
    pub points: Vec<Point>,
}

/// The catalog of one collective.
#[derive(Debug, Clone, Serialize)]
pub struct CollectiveCatalog {
    /// Collective name (`allgather`, ...).
    pub collective: String,
    /// Encoding used (`smt` or `milp`).
    pub method: String,
    /// False when a search was cut short (time limit or caps).
    pub complete: bool,
    /// Seconds spent synthesizing.
    pub synthesis_seconds: f64,
    /// Lower bounds reported by the search.
    pub bounds: Option<BoundsReport>,
    /// The cut bound on busbw at large sizes (GB/s).
    pub bound_busbw: f64,
    /// Every candidate with its curve.
    pub candidates: Vec<Candidate>,
    /// NCCL baselines and bound per grid size.
    pub baselines: Vec<Baseline>,
    /// The ranges, increasing and disjoint.
    pub ranges: Vec<Range>,
    /// `[minBytes, maxBytes]` (0 = unlimited) of the sizes left to NCCL's own algorithms
    /// (faster there in the simulator): no file covers them. With `ranges` they cover every
    /// size from 1 B.
    #[serde(default)]
    pub left_to_nccl: Vec<[u64; 2]>,
    /// The busbw plot, relative to the output folder.
    pub svg: String,
    /// Things dropped or worked around.
    pub notes: Vec<String>,
}

/// Everything a catalog run wrote (`manifest.json`).
#[derive(Debug, Clone, Serialize)]
pub struct Manifest {
    /// Topology name.
    pub topology: String,
    /// Ranks.
    pub ranks: usize,
    /// XML dialect.
    pub flavor: String,
    /// The folder to point `MSCCL_ALGO_DIR` at, relative to the output folder.
    pub algo_dir: String,
    /// The grid sizes (bytes).
    pub sizes: Vec<u64>,
    /// One entry per collective.
    pub collectives: Vec<CollectiveCatalog>,
}

/// Builds the catalog of `kinds` on `topology` into `out` (see the module docs) and returns
/// the manifest it wrote.
pub fn build(
    topology: &Topology,
    kinds: &[Kind],
    out: &Path,
    options: &Options,
    progress: &Progress,
) -> Result<Manifest> {
    check_options(options)?;
    if kinds.is_empty() {
        bail!("no collective given");
    }
    let algos = out.join(ALGO_DIR);
    std::fs::create_dir_all(&algos)
        .with_context(|| format!("{}: cannot create folder", algos.display()))?;
    clear_catalog_files(&algos, kinds)?;
    let mut collectives = Vec::new();
    for &kind in kinds {
        let catalog = build_one(topology, kind, out, options, progress)
            .with_context(|| format!("{kind} on {}", topology.name))?;
        collectives.push(catalog);
    }
    let manifest = Manifest {
        topology: topology.name.clone(),
        ranks: topology.ranks,
        flavor: format!("{:?}", options.flavor).to_lowercase(),
        algo_dir: ALGO_DIR.to_string(),
        sizes: options.sizes.clone(),
        collectives,
    };
    write_file(
        &out.join("manifest.json"),
        &serde_json::to_string_pretty(&manifest)?,
    )?;
    write_file(&out.join("README.md"), &readme(&manifest, options))?;
    Ok(manifest)
}

fn check_options(options: &Options) -> Result<()> {
    if !(options.time_limit > 0.0 && options.time_limit.is_finite()) {
        bail!("the time limit must be a positive number of seconds");
    }
    if options.instances.is_empty() || options.instances.contains(&0) {
        bail!("instances must be a non-empty list of counts of at least 1");
    }
    if options.sizes.is_empty() || options.sizes.contains(&0) {
        bail!("sizes must be a non-empty list of positive byte counts");
    }
    if options.sizes.windows(2).any(|w| w[0] >= w[1]) {
        bail!("sizes must increase");
    }
    Ok(())
}

/// Removes the XML files an earlier catalog wrote for these collectives, so that a stale
/// range cannot overlap the new ones.
fn clear_catalog_files(algos: &Path, kinds: &[Kind]) -> Result<()> {
    let entries = std::fs::read_dir(algos)
        .with_context(|| format!("{}: cannot read folder", algos.display()))?;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        let ours = kinds.iter().any(|k| {
            name.strip_prefix(&format!("{}-", k.name()))
                .is_some_and(|rest| rest.len() > 3 && rest.as_bytes()[2] == b'-')
        });
        if ours && name.ends_with(".xml") {
            std::fs::remove_file(entry.path())
                .with_context(|| format!("{}: cannot remove", entry.path().display()))?;
        }
    }
    Ok(())
}

fn write_file(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).with_context(|| format!("{}: cannot write", path.display()))
}

/// What the searches of one collective found.
struct Found {
    algorithms: Vec<Algorithm>,
    bounds: Option<BoundsReport>,
    method: Option<Method>,
    /// Every engine the searches ran.
    engines: Vec<Method>,
    complete: bool,
    notes: Vec<String>,
}

fn run_search(
    topology: &Topology,
    kind: Kind,
    search: Search,
    method: Method,
    options: &Options,
    progress: &Progress,
) -> Result<Synthesis> {
    let request = Request {
        topology,
        collective: Collective::new(kind, topology.ranks, 0, 1)?,
        search,
        limits: Limits {
            max_steps: options.max_steps,
            max_chunks: options.max_chunks,
            max_chunks_given: false,
            deadline: Instant::now() + Duration::from_secs_f64(options.time_limit),
            extra_memory: options
                .extra_memory
                .filter(|_| !matches!(kind, Kind::AllReduce | Kind::ReduceScatter | Kind::Reduce)),
            work_limit: None,
        },
        progress,
    };
    progress.deadline(request.limits.deadline);
    synthesize_with(&request, method, options.sketch.as_ref())
}

fn search_label(search: Search) -> String {
    match search {
        Search::Instance {
            steps,
            rounds,
            chunks,
        } => format!("instance ({steps},{rounds},{chunks})"),
        Search::LeastSteps { chunks, .. } => format!("least-steps at C={chunks}"),
        Search::Pareto => "pareto".to_string(),
    }
}

impl Found {
    /// Adds the algorithms not already found.
    fn add(&mut self, algorithms: Vec<Algorithm>) {
        for a in algorithms {
            if !self.algorithms.contains(&a) {
                self.algorithms.push(a);
            }
        }
    }

    /// Takes in what `search` gave: its algorithms, bounds, engines and notes, or its failure
    /// as a note.
    fn record(&mut self, search: Search, result: Result<Synthesis>) {
        let s = match result {
            Ok(s) => s,
            Err(e) => {
                self.complete = false;
                self.notes
                    .push(format!("{} failed: {e:#}", search_label(search)));
                return;
            }
        };
        self.bounds.get_or_insert(s.bounds);
        self.method.get_or_insert(s.method);
        for engine in s.engines {
            if !self.engines.contains(&engine) {
                self.engines.push(engine);
            }
        }
        self.notes.extend(s.notes);
        if !s.complete {
            self.complete = false;
            self.notes.push(format!(
                "{} stopped early (time limit or caps): its result is partial",
                search_label(search)
            ));
        }
        if s.algorithms.is_empty() {
            self.notes
                .push(format!("{} found no algorithm", search_label(search)));
        }
        self.add(s.algorithms);
    }
}

/// Runs the main search, the extra instances and, if nothing was found, the least-steps
/// fallback; a failing search becomes a note.
fn find(topology: &Topology, kind: Kind, options: &Options, progress: &Progress) -> Found {
    let mut found = Found {
        algorithms: Vec::new(),
        bounds: None,
        method: None,
        engines: Vec::new(),
        complete: true,
        notes: Vec::new(),
    };
    let mut searches = vec![options.search];
    searches.extend(options.extra.iter().filter(|e| e.0 == kind).map(
        |&(_, steps, rounds, chunks)| Search::Instance {
            steps,
            rounds,
            chunks,
        },
    ));
    let fallback = Search::LeastSteps {
        chunks: 1,
        rounds: None,
    };
    let mut i = 0;
    while i < searches.len() {
        let search = searches[i];
        i += 1;
        progress.message(&format!("{kind}: {}", search_label(search)));
        let result = run_search(topology, kind, search, options.method, options, progress);
        found.record(search, result);
        if i == searches.len() && found.algorithms.is_empty() && !searches.contains(&fallback) {
            searches.push(fallback);
        }
    }
    add_engine_candidates(&mut found, topology, kind, options, progress);
    found
}

/// Tree packing (bandwidth side) and the greedy engine (latency side) are candidates
/// wherever they apply, beside what `auto` ran: the simulator chooses per size.
fn add_engine_candidates(
    found: &mut Found,
    topology: &Topology,
    kind: Kind,
    options: &Options,
    progress: &Progress,
) {
    let extra_engines_apply = options.method == Method::Auto
        && options.sketch.is_none()
        && options.extra_memory.is_none()
        && topology.exact_capacities().is_ok();
    let engines = [
        (Method::Trees, crate::synthesize::trees_build(kind)),
        (
            Method::Greedy {
                seed: crate::synthesize::AUTO_GREEDY_SEED,
            },
            topology.ranks <= crate::synthesize::AUTO_GREEDY_MAX_RANKS,
        ),
    ];
    for (engine, applies) in engines {
        if !(extra_engines_apply && applies) || found.engines.contains(&engine) {
            continue;
        }
        progress.message(&format!("{kind}: {} engine", engine.name()));
        match run_search(topology, kind, Search::Pareto, engine, options, progress) {
            Ok(s) => found.add(s.algorithms),
            Err(e) => found
                .notes
                .push(format!("{} engine failed: {e:#}", engine.name())),
        }
    }
}

/// Lowers, verifies and test-writes one buffer mode.
fn lower_mode(
    algorithm: &Algorithm,
    instances: usize,
    flavor: Flavor,
    inplace: bool,
) -> Result<Program> {
    let options = LowerOptions {
        flavor,
        inplace,
        instances,
        protocol: Protocol::Simple,
        ..LowerOptions::default()
    };
    let mode = if inplace { "in place" } else { "out of place" };
    let (program, _) = lower_to_xml(algorithm, &options).map_err(|e| anyhow!("{mode}: {e:#}"))?;
    Ok(program)
}

/// How a catalog simulates: at its grid sizes with its simulator options, one size at a
/// time.
fn grid<'a>(topology: &'a Topology, options: &'a Options) -> Simulation<'a> {
    Simulation {
        topology,
        sizes: &options.sizes,
        options: options.sim,
        runs: Runs::OneByOne,
        protocols: &crate::select::ALL_PROTOCOLS,
    }
}

/// A candidate under one protocol.
type Winner = (usize, Protocol);

/// Whether `b` is preferred over `a` at `size` bytes (each under its protocol).
fn prefers_second(
    (a, pa): (&Candidate, Protocol),
    (b, pb): (&Candidate, Protocol),
    simulation: &Simulation,
    size: u64,
) -> Result<bool> {
    let ta = simulation.point_with(&a.outofplace, size, pa)?.time_us;
    let tb = simulation.point_with(&b.outofplace, size, pb)?.time_us;
    Ok(preferred(&[a.preference(), b.preference()], &[ta, tb]) == Some(1))
}

/// The least size in `(lo, hi]` at which `b` is preferred over `a`, knowing `a` is at `lo`
/// and `b` at `hi` (bisection; assumes one switch in between).
fn switch_point(
    a: (&Candidate, Protocol),
    b: (&Candidate, Protocol),
    simulation: &Simulation,
    (mut lo, mut hi): (u64, u64),
) -> Result<u64> {
    while hi - lo > 1 {
        // Geometric midpoint keeps the number of steps logarithmic in the ratio too.
        let mid = ((lo as f64 * hi as f64).sqrt() as u64).clamp(lo + 1, hi - 1);
        if prefers_second(a, b, simulation, mid)? {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    Ok(hi)
}

/// Lowers `algorithm` with `instances` channels in both buffer modes and simulates it at
/// every grid size; `None`, with a note, when the out-of-place program does not lower or
/// simulate (a failing in-place lowering only loses the in-place file, with a note).
fn lower_candidate(
    algorithm: &Algorithm,
    instances: usize,
    flavor: Flavor,
    simulation: &Simulation,
    notes: &mut Vec<String>,
) -> Option<Candidate> {
    let label = format!("{}-i{instances}", algorithm.name);
    let outofplace = match lower_mode(algorithm, instances, flavor, false) {
        Ok(p) => p,
        Err(e) => {
            notes.push(format!("{label} dropped: {e:#}"));
            return None;
        }
    };
    let inplace = match lower_mode(algorithm, instances, flavor, true) {
        Ok(p) => Some(p),
        Err(e) => {
            notes.push(format!(
                "{label}: no in-place file (in-place calls fall back to NCCL): {e:#}"
            ));
            None
        }
    };
    let points = match simulation.curve(&outofplace) {
        Ok(p) => p,
        Err(e) => {
            notes.push(format!("{label} dropped: simulation failed: {e:#}"));
            return None;
        }
    };
    Some(Candidate {
        label,
        steps: algorithm.num_steps(),
        rounds: algorithm.rounds(),
        chunks: algorithm.chunks(),
        instances,
        nchunksperloop: outofplace.nchunksperloop,
        nchannels: outofplace.nchannels(),
        points,
        has_inplace: inplace.is_some(),
        outofplace,
        inplace,
    })
}

/// Every algorithm and its twins ([`crate::lower::twins`]) with every replication count of
/// the options, lowered and simulated (see [`lower_candidate`]), algorithm by algorithm.
fn lower_candidates(
    algorithms: &[Algorithm],
    options: &Options,
    simulation: &Simulation,
    notes: &mut Vec<String>,
) -> Vec<Candidate> {
    let mut candidates = Vec::new();
    let lowering = crate::lower::LowerOptions {
        flavor: options.flavor,
        ..crate::lower::LowerOptions::default()
    };
    let with_twins = algorithms
        .iter()
        .flat_map(|a| std::iter::once(a.clone()).chain(crate::lower::twins(a, &lowering)));
    for algorithm in with_twins {
        let algorithm = &algorithm;
        for &instances in &options.instances {
            candidates.extend(lower_candidate(
                algorithm,
                instances,
                options.flavor,
                simulation,
                notes,
            ));
        }
    }
    candidates
}

/// The baselines and the bound at each grid size of `table`, as the manifest lists them.
fn baselines(table: &Table, bound: &CutBound) -> Vec<Baseline> {
    let busbw = |p: &Option<Point>| p.as_ref().map(|p| p.busbw);
    table
        .rows
        .iter()
        .map(|row| Baseline {
            size: row.size,
            ring: busbw(&row.ring),
            tree: busbw(&row.tree),
            p2p: busbw(&row.p2p),
            nccl: row.nccl.as_ref().map(|n| n.choice.label()),
            nccl_busbw: row.nccl.as_ref().map(|n| n.point.busbw),
            bound: bound.busbw_at(row.size),
            best_time_us: row.nccl_least_time_us(),
        })
        .collect()
}

/// A run of adjacent grid sizes with the same winner and protocol (`None`: left to NCCL):
/// the winner, the first and the last grid index.
type Span = (Option<Winner>, usize, usize);

/// Adjacent grid sizes with the same winner, as spans.
fn spans(winners: &[Option<Winner>]) -> Vec<Span> {
    let mut spans: Vec<Span> = Vec::new();
    for (i, &w) in winners.iter().enumerate() {
        match spans.last_mut() {
            Some(last) if last.0 == w => last.2 = i,
            _ => spans.push((w, i, i)),
        }
    }
    spans
}

/// The first size of each span's range: 1 B, then the switch point between two candidates
/// (bisected), or the size after the last grid size a candidate won next to NCCL.
fn range_starts(
    spans: &[Span],
    candidates: &[Candidate],
    simulation: &Simulation,
) -> Result<Vec<u64>> {
    let sizes = simulation.sizes;
    let mut starts = vec![1u64];
    for pair in spans.windows(2) {
        let start = match (pair[0].0, pair[1].0) {
            (Some((a, pa)), Some((b, pb))) => {
                let bounds = (sizes[pair[0].2], sizes[pair[1].1]);
                let (a, b) = ((&candidates[a], pa), (&candidates[b], pb));
                switch_point(a, b, simulation, bounds)?
            }
            // Next to NCCL, a range ends at the last grid size its winner won.
            _ => sizes[pair[0].2] + 1,
        };
        starts.push(start);
    }
    Ok(starts)
}

/// `MIN..MAX` of sizes left to NCCL (`MIN..` without an upper limit).
fn uncovered_label(min_bytes: u64, max_bytes: u64) -> String {
    format!(
        "{}..{}",
        bytes_label(min_bytes),
        if max_bytes == 0 {
            "".to_string()
        } else {
            bytes_label(max_bytes)
        }
    )
}

/// Where and for which sizes the files of one range are written.
struct RangeFiles<'a> {
    /// The output folder.
    out: &'a Path,
    /// The XML dialect.
    flavor: Flavor,
    /// `COLL-KK-LABEL-PROTO`: the file name without the mode suffix and extension.
    stem: String,
    /// The protocol the files name (`proto`).
    protocol: Protocol,
    /// Smallest size (inclusive).
    min_bytes: u64,
    /// Largest size (inclusive); 0 = no upper limit.
    max_bytes: u64,
}

impl RangeFiles<'_> {
    /// The XML of `program` for this range in the mode of `suffix` (`""` or `.inplace`)
    /// with its path relative to the output folder; `None`, with a note, where the legacy
    /// runtime's scratch limit ends below this open-ended range (NCCL serves these calls).
    fn xml(
        &self,
        c: &Candidate,
        program: &Program,
        suffix: &str,
        notes: &mut Vec<String>,
    ) -> Result<Option<(String, String)>> {
        let stem = &self.stem;
        let mut p = program.clone();
        p.min_bytes = self.min_bytes;
        p.max_bytes = self.max_bytes;
        p.protocol = self.protocol;
        // The XML name: at most 63 plain characters (msccl-ir.md §1.13).
        p.name = format!("{stem}{suffix}").chars().take(63).collect();
        match runtime::xml::write(&p, self.flavor) {
            Ok(xml) => Ok(Some((format!("{ALGO_DIR}/{stem}{suffix}.xml"), xml))),
            Err(e)
                if self.flavor == Flavor::Legacy
                    && self.max_bytes == 0
                    && runtime::xml::legacy_max_bytes(&p).is_err() =>
            {
                notes.push(format!("{}{suffix}: no legacy file: {e}", c.label));
                Ok(None)
            }
            Err(e) => bail!("{}: cannot be written: {e}", c.label),
        }
    }

    /// Writes `c`'s out-of-place and in-place files for this range; returns their paths
    /// (relative to the output folder), or `None` when no out-of-place file can be written
    /// (nothing is written then).
    fn write(
        &self,
        c: &Candidate,
        notes: &mut Vec<String>,
    ) -> Result<Option<(String, Option<String>)>> {
        let outofplace = self.xml(c, &c.outofplace, "", notes)?;
        let inplace = match &c.inplace {
            Some(program) => self.xml(c, program, ".inplace", notes)?,
            None => None,
        };
        let Some((file, xml)) = outofplace else {
            return Ok(None);
        };
        write_file(&self.out.join(&file), &xml)?;
        let file_inplace = match inplace {
            Some((rel, xml)) => {
                write_file(&self.out.join(&rel), &xml)?;
                Some(rel)
            }
            None => None,
        };
        Ok(Some((file, file_inplace)))
    }
}

/// The ranges a catalog wrote files for, and the sizes it leaves to NCCL.
struct Ranges {
    ranges: Vec<Range>,
    /// `[minBytes, maxBytes]` of the sizes no file covers.
    left_to_nccl: Vec<[u64; 2]>,
}

/// Writes the files of every span's range (see [`RangeFiles`]) for the collective `name`;
/// notes the ranges left to NCCL because its own algorithms simulate faster.
fn write_ranges(
    name: &str,
    spans: &[Span],
    starts: &[u64],
    candidates: &[Candidate],
    (out, flavor): (&Path, Flavor),
    notes: &mut Vec<String>,
) -> Result<Ranges> {
    let mut written = Ranges {
        ranges: Vec::new(),
        left_to_nccl: Vec::new(),
    };
    let mut uncovered = Vec::new();
    for (k, &(w, first, last)) in spans.iter().enumerate() {
        let min_bytes = starts[k];
        let max_bytes = starts.get(k + 1).map_or(0, |next| next - 1);
        let Some((w, protocol)) = w else {
            written.left_to_nccl.push([min_bytes, max_bytes]);
            uncovered.push(uncovered_label(min_bytes, max_bytes));
            continue;
        };
        let c = &candidates[w];
        let short = c
            .label
            .strip_prefix(&format!("{name}-"))
            .unwrap_or(&c.label);
        let files = RangeFiles {
            out,
            flavor,
            stem: format!(
                "{name}-{k:02}-{}-{}",
                short.replace([':', '/', ' '], "_"),
                protocol.name().to_lowercase()
            ),
            protocol,
            min_bytes,
            max_bytes,
        };
        let Some((file, file_inplace)) = files.write(c, notes)? else {
            written.left_to_nccl.push([min_bytes, max_bytes]);
            continue;
        };
        written.ranges.push(Range {
            min_bytes,
            max_bytes,
            algorithm: c.label.clone(),
            protocol,
            steps: c.steps,
            rounds: c.rounds,
            chunks: c.chunks,
            instances: c.instances,
            nchunksperloop: c.nchunksperloop,
            file,
            file_inplace,
            points: c.points[first..=last].to_vec(),
        });
    }
    if !uncovered.is_empty() {
        notes.push(format!(
            "left to NCCL (its own algorithms simulate faster; no file covers these sizes): {}",
            uncovered.join(", ")
        ));
    }
    Ok(written)
}

/// The note on the grid sizes where NCCL's choice beats the catalog's in the same
/// simulator, if any (none: such sizes are left to NCCL).
fn beaten_note(baselines: &[Baseline], ranges: &[Range]) -> Option<String> {
    let chosen = |size: u64| {
        ranges
            .iter()
            .find_map(|r| r.points.iter().find(|p| p.size == size))
            .map(|p| p.time_us)
    };
    let beaten: Vec<String> = baselines
        .iter()
        .filter_map(|b| {
            let (best, ours) = (b.best_time_us?, chosen(b.size)?);
            (best * (1.0 + TIE) < ours)
                .then(|| format!("{} ({ours:.2} vs {best:.2} us)", bytes_label(b.size)))
        })
        .collect();
    (!beaten.is_empty()).then(|| {
        format!(
            "NCCL's choice (simulated) is faster than the chosen algorithm at: {}",
            beaten.join(", ")
        )
    })
}

/// The catalog of one collective: its candidates found, lowered and simulated, the winner
/// per grid size against NCCL's baselines, the ranges' files and the plot.
fn build_one(
    topology: &Topology,
    kind: Kind,
    out: &Path,
    options: &Options,
    progress: &Progress,
) -> Result<CollectiveCatalog> {
    let coll = kind
        .to_ir()
        .context("custom collectives cannot be catalogued")?;
    let started = Instant::now();
    let mut found = find(topology, kind, options, progress);
    crate::algorithm::name_uniquely(&mut found.algorithms, None);
    let synthesis_seconds = started.elapsed().as_secs_f64();
    let mut notes = std::mem::take(&mut found.notes);
    if found.algorithms.is_empty() {
        bail!(
            "no algorithm found ({})",
            notes.last().map_or("no search ran", |s| s.as_str())
        );
    }
    progress.message(&format!("{kind}: lowering and simulating"));
    let simulation = grid(topology, options);
    let candidates = lower_candidates(&found.algorithms, options, &simulation, &mut notes);
    if candidates.is_empty() {
        bail!(
            "no candidate survived lowering and simulation ({})",
            notes.last().map_or("", |s| s.as_str())
        );
    }
    // NCCL's ring, tree and point-to-point algorithms, simulated the same way, and the
    // bound; the winner per grid size (`None`: NCCL's own algorithm is faster, so the size
    // is left to it: MSCCL falls back to NCCL where no file covers a size), then ranges.
    let bound = CutBound::new(coll, topology, 0);
    let preferences: Vec<Preference> = candidates.iter().map(Candidate::preference).collect();
    let curves: Vec<Vec<Option<Point>>> = (candidates.iter())
        .map(|c| c.points.iter().cloned().map(Some).collect())
        .collect();
    let table = simulation.table(coll, 0, &curves, Rule::LeastTime(&preferences));
    let name = kind.name();
    if !table.baselines_defined {
        notes.push(format!("no NCCL baseline for {name} on this fabric"));
    }
    let baselines = baselines(&table, &bound);
    let winners: Vec<Option<Winner>> = (table.rows.iter().enumerate())
        .map(|(i, row)| row.best.map(|w| (w, candidates[w].points[i].protocol)))
        .collect();
    let spans = spans(&winners);
    let starts = range_starts(&spans, &candidates, &simulation)?;
    let target = (out, options.flavor);
    let written = write_ranges(name, &spans, &starts, &candidates, target, &mut notes)?;
    notes.extend(beaten_note(&baselines, &written.ranges));
    let svg = format!("{name}-busbw.svg");
    let title = format!("{name} on {} ({} ranks)", topology.name, topology.ranks);
    report::plot(
        &out.join(&svg),
        &title,
        &options.sizes,
        &candidates,
        &baselines,
    )?;
    Ok(CollectiveCatalog {
        collective: name.to_string(),
        method: found
            .method
            .map_or("none".to_string(), |m| format!("{m:?}").to_lowercase()),
        complete: found.complete,
        synthesis_seconds,
        bounds: found.bounds,
        bound_busbw: bound.busbw(),
        candidates,
        baselines,
        ranges: written.ranges,
        left_to_nccl: written.left_to_nccl,
        svg,
        notes,
    })
}

/// `1K`, `16M`, `4G` for powers of two (and plain bytes otherwise); 0 = `unlimited`.
pub fn bytes_label(bytes: u64) -> String {
    if bytes == 0 {
        return "unlimited".to_string();
    }
    for (shift, suffix) in [(30, "G"), (20, "M"), (10, "K")] {
        if bytes >= 1 << shift && bytes.is_multiple_of(1 << shift) {
            return format!("{}{suffix}", bytes >> shift);
        }
    }
    format!("{bytes}")
}

/// The elements a size is simulated with for a program of `nchunks` chunks per loop (the
/// runtime's rounding; see [`elements_for`]).
pub fn simulated_bytes(size: u64, nchunks: usize) -> u64 {
    elements_for(size, nchunks) * ELEMENT_BYTES
}

/// Where a catalog of `topology` is written by default.
pub fn default_out(topology: &Topology) -> PathBuf {
    PathBuf::from("results/catalog").join(crate::origin::topology_label(&topology.name))
}
