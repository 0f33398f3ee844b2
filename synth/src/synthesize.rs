//! The one boundary between problems and encodings: a request (topology, collective,
//! search) in, checked algorithms out. Combining collectives are solved as their
//! non-combining dual on the reversed topology; allreduce is reduce-scatter followed by
//! allgather on explicit buffers (n·C addresses per rank), composed here.

use crate::algorithm::Algorithm;
use crate::bounds::Bounds;
use crate::check::{check_before, check_memory, CheckError};
use crate::collective::{Collective, Kind};
use crate::direct::DirectEngine;
use crate::engine::{Engine, Found, Limits, Problem};
use crate::greedy::GreedyEngine;
use crate::milp::{self, MilpEngine};
use crate::origin::Family;
use crate::progress::Progress;
use crate::sketch::Sketch;
use crate::smt::SmtEngine;
use crate::topology::{Topology, TopologyIndex};
use crate::trees::TreeEngine;
use anyhow::{bail, Context, Result};
use num_rational::Ratio;
use serde::Serialize;
use std::time::{Duration, Instant};

pub use crate::engine::Search;

/// Which encoding solves a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// The exact SMT encoding (integer capacities, small single nodes).
    Smt,
    /// The MILP encoding with per-link alpha/beta costs and an optional sketch.
    Milp,
    /// Throughput-optimal tree packing (allgather, reduce-scatter, allreduce, broadcast,
    /// reduce).
    Trees,
    /// The greedy link-chunk matching over the time-expanded fabric (every collective, any
    /// scale; deterministic for a seed).
    Greedy {
        /// Seeds the tie-breaks of the randomized restarts.
        seed: u64,
    },
    /// With a sketch: MILP. Without: SMT for one node of at most [`AUTO_SMT_MAX_RANKS`] ranks
    /// with integer capacities, with tree packing beside it for the collectives tree packing
    /// builds; otherwise, with integer capacities, tree packing (for those collectives) and
    /// the greedy engine together ([`Method::portfolio`]); MILP when the capacities are not
    /// integral.
    Auto,
}

/// The largest single node `Method::Auto` gives to the SMT encoding.
pub const AUTO_SMT_MAX_RANKS: usize = 8;

/// The seed `Method::Auto` gives the greedy engine (`--seed` applies to `--method greedy`).
pub const AUTO_GREEDY_SEED: u64 = 0;

/// The largest fabric on which `Method::Auto` runs the greedy engine beside tree packing:
/// past it, lowering and simulating a second schedule of a 1024-rank fabric costs minutes
/// (a 32x32 torus allgather's greedy schedule took 30 minutes end to end), for the latency
/// side only.
pub const AUTO_GREEDY_MAX_RANKS: usize = 256;

/// The share of the time left that `Method::Auto` gives the greedy engine when it runs
/// beside tree packing (the greedy run stops at its deadline with what it found).
const AUTO_GREEDY_SHARE: f64 = 0.25;

impl Method {
    /// Resolves `Auto` for `topology`, the collective's kind and whether a sketch was given.
    pub fn resolve(self, topology: &Topology, kind: Kind, sketched: bool) -> Method {
        if self != Method::Auto {
            return self;
        }
        let integral = topology.exact_capacities().is_ok();
        if sketched {
            Method::Milp
        } else if topology.nodes() <= 1 && topology.ranks <= AUTO_SMT_MAX_RANKS && integral {
            Method::Smt
        } else if integral && trees_build(kind) {
            Method::Trees
        } else if integral {
            Method::Greedy {
                seed: AUTO_GREEDY_SEED,
            }
        } else {
            Method::Milp
        }
    }

    /// The engines a request runs, in order: `Auto` past one small box (no sketch, integer
    /// capacities, at most [`AUTO_GREEDY_MAX_RANKS`] ranks) runs tree packing (bandwidth
    /// side, where it applies) and the greedy engine (latency side) and keeps both engines'
    /// algorithms, so the simulator can choose per message size; on one small box, the
    /// collectives tree packing builds run SMT and tree packing; every other method is one
    /// engine ([`Method::resolve`]).
    pub fn portfolio(self, topology: &Topology, kind: Kind, sketched: bool) -> Vec<Method> {
        match self.resolve(topology, kind, sketched) {
            Method::Trees if self == Method::Auto && topology.ranks <= AUTO_GREEDY_MAX_RANKS => {
                vec![
                    Method::Trees,
                    Method::Greedy {
                        seed: AUTO_GREEDY_SEED,
                    },
                ]
            }
            // SMT caps pieces at `--max-chunks` and steps at `--max-steps`: too few to
            // pipeline or to reach the optimum on every box (dgx1 broadcast: 58.3 GB/s at
            // 1 GB against NCCL ring's 140.1, tree packing's shallow trees 146.5; mi250
            // allgather: 310.0 GB/s, 88.6% of the optimum, tree packing 344.6).
            Method::Smt if self == Method::Auto && trees_build(kind) => {
                vec![Method::Smt, Method::Trees]
            }
            m => vec![m],
        }
    }

    /// Lower-case name (`smt`, `milp`, `trees`, `greedy`, `auto`).
    pub fn name(self) -> &'static str {
        match self {
            Method::Smt => "smt",
            Method::Milp => "milp",
            Method::Trees => "trees",
            Method::Greedy { .. } => "greedy",
            Method::Auto => "auto",
        }
    }
}

/// What to synthesize.
pub struct Request<'a> {
    /// The fabric.
    pub topology: &'a Topology,
    /// The collective with C = 1 (named or custom); it is re-split per instance.
    pub collective: Collective,
    /// The search.
    pub search: Search,
    /// Caps and deadline.
    pub limits: Limits,
    /// Progress display.
    pub progress: &'a Progress,
}

/// Lower bounds in the form reported to users (`"7/6"`).
#[derive(Debug, Clone, Serialize)]
pub struct BoundsReport {
    /// Steps lower bound.
    pub steps: usize,
    /// Rounds-per-chunk lower bound as a fraction string.
    pub rounds_per_chunk: String,
}

/// The result of a synthesis.
pub struct Synthesis {
    /// Lower bounds for the whole collective.
    pub bounds: BoundsReport,
    /// Checked algorithms (the frontier for Pareto searches).
    pub algorithms: Vec<Algorithm>,
    /// False when a cap, the deadline or an undecided solve cut the search short.
    pub complete: bool,
    /// The engine that produced them (never `Auto`; the first of [`Synthesis::engines`]).
    pub method: Method,
    /// Every engine whose algorithms are listed (more than one for `auto` past one box, see
    /// [`Method::portfolio`]), in the order they ran.
    pub engines: Vec<Method>,
    /// Engines of the portfolio that failed while another one succeeded (one line each).
    pub notes: Vec<String>,
    /// The solves a work or time limit cut short (MILP).
    pub cuts: Vec<crate::engine::Cut>,
}

/// Whether tree packing builds `kind` (directly or as a dual or composition).
pub fn trees_build(kind: Kind) -> bool {
    matches!(
        kind,
        Kind::AllGather | Kind::ReduceScatter | Kind::AllReduce | Kind::Broadcast | Kind::Reduce
    )
}

/// How a collective is solved: directly, or as the dual on the reversed topology.
struct Plan<'a> {
    topology: Topology,
    index: TopologyIndex,
    make: Box<dyn Fn(usize) -> Result<Collective> + Sync + 'a>,
    original: Box<dyn Fn(usize) -> Result<Collective> + Sync + 'a>,
    dual: bool,
    engine: Box<dyn Engine + 'a>,
}

impl<'a> Plan<'a> {
    /// `half`: the collective is one phase of a composed one (an allreduce's reduce-scatter
    /// or allgather, a reduce, a broadcast), whose candidates are composed afterwards.
    fn new(
        topology: &Topology,
        base: &'a Collective,
        method: Method,
        sketch: Option<&Sketch>,
        half: bool,
    ) -> Result<Plan<'a>> {
        let original = move |c: usize| resplit(base, c);
        let dual = base.dual()?.is_some();
        let sketch = sketch.cloned().unwrap_or_default();
        let sketch = if dual { sketch.reversed() } else { sketch };
        let engine: Box<dyn Engine> = match method {
            Method::Smt => Box::new(SmtEngine),
            Method::Trees => Box::new(TreeEngine {
                for_dual: dual,
                half,
            }),
            Method::Greedy { seed } => Box::new(GreedyEngine { seed }),
            Method::Milp | Method::Auto => Box::new(MilpEngine { sketch }),
        };
        let (topology, make): (Topology, Box<dyn Fn(usize) -> Result<Collective> + Sync>) = if dual
        {
            (
                topology.reversed(),
                Box::new(move |c| Ok(resplit(base, c)?.dual()?.expect("combining"))),
            )
        } else {
            (topology.clone(), Box::new(original))
        };
        Ok(Plan {
            index: topology.index(),
            topology,
            make,
            original: Box::new(original),
            dual,
            engine,
        })
    }

    fn problem<'p>(&'p self, progress: &'p Progress, deadline: Instant) -> Problem<'p> {
        Problem {
            topology: &self.topology,
            index: &self.index,
            make: self.make.as_ref(),
            progress,
            deadline,
        }
    }

    fn bounds(&self, progress: &Progress, deadline: Instant) -> Result<Bounds> {
        self.engine.bounds(&self.problem(progress, deadline))
    }

    /// Turns an algorithm of the solved problem into one for the requested collective and
    /// checks it (until `deadline`).
    fn finish(
        &self,
        found: Algorithm,
        topology: &Topology,
        extra_memory: Option<usize>,
        deadline: Instant,
    ) -> Result<Algorithm> {
        let algorithm = if self.dual {
            let c = found.chunks();
            found
                .without_dead_sends()
                .reversed((self.original)(c)?, true)
        } else {
            found
        };
        check_in_time(&algorithm, topology, deadline, "")?;
        if let Some(m) = extra_memory {
            check_memory(&algorithm, m)
                .with_context(|| format!("internal error: {} fails the checker", algorithm.name))?;
        }
        Ok(algorithm)
    }

    /// When no chunk has to move (every rank that must end with an address, or with a
    /// reduction's contributions, already holds it), the one optimal algorithm: zero steps.
    fn nothing_to_deliver(&self, topology: &Topology) -> Result<Option<Algorithm>> {
        let solved = (self.make)(1)?;
        if !solved
            .chunks
            .iter()
            .all(|c| c.post.iter().all(|r| c.pre.contains(r)))
        {
            return Ok(None);
        }
        let collective = (self.original)(1)?;
        let algorithm =
            Algorithm::made(Family::Empty, topology.name.clone(), collective, Vec::new());
        crate::check::check(&algorithm, topology)
            .with_context(|| format!("internal error: {} fails the checker", algorithm.name))?;
        Ok(Some(algorithm))
    }

    fn run(
        &self,
        search: Search,
        limits: &Limits,
        progress: &Progress,
        topology: &Topology,
    ) -> Result<(Bounds, Found)> {
        let problem = self.problem(progress, limits.deadline);
        let bounds = self.engine.bounds(&problem)?;
        progress.bound(&format!(
            "{} steps, R/C >= {}",
            bounds.steps, bounds.rounds_per_chunk
        ));
        let found = self.engine.search(&problem, search, limits)?;
        Ok((bounds, self.finished(found, limits, topology)?))
    }

    /// `found` (algorithms of the solved problem) as algorithms of the requested collective,
    /// checked; for a dual, with the one-group twins of staged schedules.
    fn finished(&self, mut found: Found, limits: &Limits, topology: &Topology) -> Result<Found> {
        if self.dual {
            // A combining schedule in stages competes with its one-group twin: where the
            // stages that feed the bottleneck share links with later ones, the twin, whose
            // threadblocks take each slice's steps in order, simulates faster (dgx-a100x2
            // reduce-scatter 317.5 against 312.7 GB/s at 1 GB), elsewhere the stages win.
            // (A schedule declared in one group is its own twin.)
            let twins: Vec<Algorithm> = found
                .algorithms
                .iter()
                .filter(|a| {
                    a.step_groups
                        .as_ref()
                        .is_some_and(|g| g.iter().any(|&x| x > 0))
                })
                .map(crate::layout::groups::ungrouped)
                .collect();
            found.algorithms.extend(twins);
        }
        // An algorithm the checker rejects is an internal error of the engine or
        // construction that made it: it is left out with a note, and the others go on.
        let mut kept = Vec::with_capacity(found.algorithms.len());
        for a in std::mem::take(&mut found.algorithms) {
            match self.finish(a, topology, limits.extra_memory, limits.deadline) {
                Ok(a) => kept.push(a),
                Err(e) if e.is::<crate::engine::TimeLimitReached>() => return Err(e),
                Err(e) => found.notes.push(format!("{e:#}; left out")),
            }
        }
        found.algorithms = kept;
        Ok(found)
    }
}

/// How long the checker may run past the deadline: a search stopped by its deadline still
/// gets what it found checked and printed; only a check that takes longer than this is cut.
pub const CHECK_GRACE: Duration = Duration::from_secs(5);

/// The deadline of one check: the search's, or [`CHECK_GRACE`] from now if that is later.
fn checking_deadline(deadline: Instant) -> Instant {
    deadline.max(Instant::now() + CHECK_GRACE)
}

/// Checks `algorithm` with the independent checker until `deadline` (plus the checker's
/// grace): a timeout names the phase, a rejection is an internal error naming the
/// (`what`, e.g. "composed ") algorithm.
fn check_in_time(
    algorithm: &Algorithm,
    topology: &Topology,
    deadline: Instant,
    what: &str,
) -> Result<()> {
    match check_before(algorithm, topology, Some(checking_deadline(deadline))) {
        Ok(()) => Ok(()),
        Err(CheckError::TimeLimit) => Err(crate::engine::TimeLimitReached {
            phase: format!("checking {}", algorithm.name),
        }
        .into()),
        Err(e) => Err(e)
            .with_context(|| format!("internal error: {what}{} fails the checker", algorithm.name)),
    }
}

/// Re-splits a C = 1 collective into C pieces.
pub fn resplit(base: &Collective, c: usize) -> Result<Collective> {
    if base.kind == Kind::Custom {
        let mut chunks = Vec::new();
        for chunk in &base.chunks {
            for k in 0..c {
                chunks.push(crate::collective::Chunk {
                    address: chunk.address * c + k,
                    ..chunk.clone()
                });
            }
        }
        Ok(Collective {
            chunks_per_rank: c,
            chunks,
            ..base.clone()
        })
    } else {
        Collective::new(base.kind, base.ranks, base.root, c)
    }
}

/// Runs the request with the SMT encoding.
pub fn synthesize(req: &Request) -> Result<Synthesis> {
    synthesize_with(req, Method::Smt, None)
}

/// Runs the request with `method`; `sketch` restricts the MILP encoding (no sketch: every
/// link, no symmetry, the default hyperparameters of [`Sketch::default`]).
pub fn synthesize_with(
    req: &Request,
    method: Method,
    sketch: Option<&Sketch>,
) -> Result<Synthesis> {
    solve(req, method, sketch, method)
}

/// [`synthesize_with`], the direct schedules (allreduce and the collectives that end on
/// many ranks) those of `direct_for` ([`direct_engines`]): a portfolio's engines take the
/// ones `auto` would.
fn solve(
    req: &Request,
    method: Method,
    sketch: Option<&Sketch>,
    direct_for: Method,
) -> Result<Synthesis> {
    match canonically(req, method, sketch, direct_for) {
        Some(result) => result,
        None => synthesize_as_numbered(req, method, sketch, direct_for),
    }
}

/// Runs a request of tree packing and the greedy engine (no sketch, no memory limit, a named
/// collective) on the fabric renumbered canonically ([`crate::topology::canonical`]) and
/// numbers the algorithms back, so that the result does not depend on how the user numbered
/// the ranks; `None` for other requests, and where the fabric is already canonical or the
/// numbering gave up. Fabrics of several nodes are numbered node-major
/// ([`crate::topology::canonical::node_major_numbering`]), as the built-in clusters are, so
/// that their schedules (rail rings, staged trees) are laid out as on those; nodes that
/// differ keep the user's numbering. A built-in cluster is renumbered too where its
/// canonical local order differs from its own (3 x mi250: allgather 96.62% of the optimum
/// as built, 98.97% renumbered, which it now gets either way).
fn canonically(
    req: &Request,
    method: Method,
    sketch: Option<&Sketch>,
    direct_for: Method,
) -> Option<Result<Synthesis>> {
    let kind = req.collective.kind;
    let engines = method.portfolio(req.topology, kind, sketch.is_some());
    let tree_or_greedy = |m: &Method| matches!(m, Method::Trees | Method::Greedy { .. });
    if kind == Kind::Custom
        || sketch.is_some()
        || req.limits.extra_memory.is_some()
        || req.collective.ranks != req.topology.ranks
        || !engines.iter().all(tree_or_greedy)
    {
        return None;
    }
    let root = req.collective.root;
    let rooted = matches!(
        kind,
        Kind::Broadcast | Kind::Reduce | Kind::Gather | Kind::Scatter
    );
    let (topology, to) =
        crate::topology::canonical::canonical(req.topology, rooted.then_some(root))?;
    if to.iter().enumerate().all(|(r, &t)| r == t) {
        return None;
    }
    let mut back = vec![0; to.len()];
    for (r, &t) in to.iter().enumerate() {
        back[t] = r;
    }
    let canonical_root = if rooted { to[root] } else { 0 };
    let collective = match Collective::new(kind, req.collective.ranks, canonical_root, 1) {
        Ok(collective) => collective,
        Err(e) => return Some(Err(e)),
    };
    let canonical = Request {
        topology: &topology,
        collective,
        search: req.search,
        limits: req.limits.clone(),
        progress: req.progress,
    };
    Some(
        synthesize_as_numbered(&canonical, method, sketch, direct_for).and_then(|mut synthesis| {
            let algorithms = std::mem::take(&mut synthesis.algorithms);
            synthesis.algorithms = algorithms
                .iter()
                .map(|a| {
                    let numbered = a.renumbered(&back, root).unwrap_or_else(|| {
                        Err(anyhow::anyhow!("a custom collective is not renumbered"))
                    })?;
                    crate::check::check(&numbered, req.topology)?;
                    Ok(numbered)
                })
                .collect::<Result<_>>()?;
            Ok(synthesis)
        }),
    )
}

/// [`solve`] on the fabric as numbered.
fn synthesize_as_numbered(
    req: &Request,
    method: Method,
    sketch: Option<&Sketch>,
    direct_for: Method,
) -> Result<Synthesis> {
    // A custom collective equal to a built-in one is solved as that built-in (its symmetry,
    // bounds, engines and lowering).
    let builtin = req.collective.builtin();
    let collective = builtin.as_ref().unwrap_or(&req.collective);
    let portfolio = method.portfolio(req.topology, collective.kind, sketch.is_some());
    if portfolio.len() > 1 && req.limits.extra_memory.is_none() {
        return run_portfolio(req, &portfolio, sketch);
    }
    let resolved = method.resolve(req.topology, collective.kind, sketch.is_some());
    let direct = direct_engines(direct_for, resolved, req.topology);
    // Tree packing and the greedy engine have no memory model: `auto` takes the MILP instead
    // under a memory limit.
    let method = match (method, resolved) {
        (Method::Auto, Method::Trees | Method::Greedy { .. })
            if req.limits.extra_memory.is_some() =>
        {
            Method::Milp
        }
        _ => resolved,
    };
    if req.collective.ranks != req.topology.ranks {
        bail!(
            "the collective has {} ranks but topology `{}` has {}",
            req.collective.ranks,
            req.topology.name,
            req.topology.ranks
        );
    }
    if req.limits.extra_memory.is_some() {
        if req.collective.kind == Kind::AllReduce || req.collective.is_combining() {
            bail!(
                "--extra-memory applies to non-combining collectives (allgather, alltoall, broadcast, gather, scatter, custom without reduction), not {}",
                req.collective.kind
            );
        }
        if !matches!(method, Method::Smt | Method::Milp) {
            bail!("--extra-memory needs --method smt or milp (tree packing and the greedy engine have no memory model)");
        }
    }
    if collective.kind == Kind::AllReduce {
        return allreduce(req, method, sketch).map(|s| with_direct(s, req, collective, &direct));
    }
    if collective.ends_on_many() {
        return reduce_and_spread(req, collective, method, sketch)
            .map(|s| with_direct(s, req, collective, &direct));
    }
    let plan = Plan::new(req.topology, collective, method, sketch, false)?;
    if let Some(algorithm) = plan.nothing_to_deliver(req.topology)? {
        return Ok(Synthesis {
            bounds: BoundsReport {
                steps: 0,
                rounds_per_chunk: "0".into(),
            },
            algorithms: vec![algorithm],
            complete: true,
            method,
            engines: vec![method],
            notes: Vec::new(),
            cuts: Vec::new(),
        });
    }
    let (bounds, found) = plan.run(req.search, &req.limits, req.progress, req.topology)?;
    Ok(Synthesis {
        bounds: BoundsReport {
            steps: bounds.steps,
            rounds_per_chunk: bounds.rounds_per_chunk.to_string(),
        },
        algorithms: found.algorithms,
        complete: found.complete,
        method,
        engines: vec![method],
        notes: found.notes,
        cuts: found.cuts,
    })
}

/// Runs every engine of `engines` on the request (the greedy engine first, on
/// [`AUTO_GREEDY_SHARE`] of the time and for its fewest-steps algorithm when the request is
/// a frontier, then tree packing, then SMT on what is left) and keeps all their
/// algorithms: the engines' cost models differ, so choosing among them is left to the
/// simulator. An engine that fails is a note while another one succeeds; if all fail, the
/// first error is returned.
fn run_portfolio(req: &Request, engines: &[Method], sketch: Option<&Sketch>) -> Result<Synthesis> {
    // The engines with a bounded cost first (greedy, then tree packing), so that an exact
    // engine that runs to the deadline leaves them their share.
    let mut order: Vec<Method> = engines.to_vec();
    order.sort_by_key(|m| match m {
        Method::Greedy { .. } => 0,
        Method::Trees => 1,
        _ => 2,
    });
    let mut results: Vec<(usize, Synthesis)> = Vec::new();
    let mut first_error = None;
    let mut notes = Vec::new();
    for &engine in &order {
        let deadline = match engine {
            Method::Greedy { .. } => {
                let left = req
                    .limits
                    .deadline
                    .saturating_duration_since(Instant::now());
                Instant::now() + left.mul_f64(AUTO_GREEDY_SHARE)
            }
            _ => req.limits.deadline,
        };
        // Beside a bandwidth engine, the greedy engine is there for the latency side: its
        // fewest-steps algorithm at one chunk, not a frontier to lower and simulate.
        let search = match (engine, req.search) {
            (Method::Greedy { .. }, Search::Pareto) => Search::LeastSteps {
                chunks: 1,
                rounds: None,
            },
            (_, search) => search,
        };
        let sub = Request {
            topology: req.topology,
            collective: req.collective.clone(),
            search,
            limits: Limits {
                deadline,
                ..req.limits.clone()
            },
            progress: req.progress,
        };
        // Beside tree packing on a small box, SMT's direct schedules are the greedy engine's,
        // as for `auto` alone: the direct SMT encoding can take the whole time limit (mi250
        // allreduce: 300 s against 34).
        let direct_for = match engine {
            Method::Smt => Method::Auto,
            other => other,
        };
        match solve(&sub, engine, sketch, direct_for) {
            Ok(s) => results.push((engines.iter().position(|&m| m == engine).unwrap_or(0), s)),
            Err(e) => {
                notes.push(format!("{} engine: {e:#}", engine.name()));
                first_error.get_or_insert(e);
            }
        }
    }
    // Merged in the portfolio's order, so a schedule two engines share keeps the first's name.
    results.sort_by_key(|(i, _)| *i);
    let merged = results.into_iter().map(|(_, s)| s).reduce(merge);
    match (merged, first_error) {
        (Some(mut s), _) => {
            s.notes.extend(notes);
            Ok(s)
        }
        (None, Some(e)) => Err(e),
        (None, None) => bail!("internal error: an empty portfolio of engines"),
    }
}

/// Two engines' results on one request: the algorithms of both (by increasing steps), the
/// larger of each lower bound (both hold), complete only if both are.
fn merge(a: Synthesis, b: Synthesis) -> Synthesis {
    let ratio = |r: &str| r.parse::<Ratio<u64>>().ok();
    let rounds_per_chunk = match (
        ratio(&a.bounds.rounds_per_chunk),
        ratio(&b.bounds.rounds_per_chunk),
    ) {
        (Some(x), Some(y)) if y > x => b.bounds.rounds_per_chunk.clone(),
        _ => a.bounds.rounds_per_chunk.clone(),
    };
    // Two engines may find the very same schedule (e.g. a one-hop allgather): keep one.
    let mut algorithms = a.algorithms;
    for x in b.algorithms {
        if !algorithms.iter().any(|y| same_schedule(&x, y)) {
            algorithms.push(x);
        }
    }
    algorithms.sort_by_key(crate::frontier::cost);
    Synthesis {
        bounds: BoundsReport {
            steps: a.bounds.steps.max(b.bounds.steps),
            rounds_per_chunk,
        },
        algorithms,
        complete: a.complete && b.complete,
        method: a.method,
        engines: a.engines.into_iter().chain(b.engines).collect(),
        notes: a.notes.into_iter().chain(b.notes).collect(),
        cuts: a.cuts.into_iter().chain(b.cuts).collect(),
    }
}

/// Whether two algorithms make the same sends in the same steps (in any order within a step).
fn same_schedule(x: &Algorithm, y: &Algorithm) -> bool {
    let sorted = |a: &Algorithm| -> Vec<(u32, bool, Vec<crate::algorithm::Send>)> {
        a.steps
            .iter()
            .map(|s| {
                let mut sends = s.sends.clone();
                sends.sort_unstable();
                (s.rounds, s.reduce, sends)
            })
            .collect()
    };
    x.collective == y.collective && x.steps.len() == y.steps.len() && sorted(x) == sorted(y)
}

/// Allreduce = reduce-scatter then allgather over n·C addresses.
fn allreduce(req: &Request, method: Method, sketch: Option<&Sketch>) -> Result<Synthesis> {
    let n = req.topology.ranks;
    let rs_base = Collective::new(Kind::ReduceScatter, n, 0, 1)?;
    let ag_base = Collective::new(Kind::AllGather, n, 0, 1)?;
    let rs = Plan::new(req.topology, &rs_base, method, sketch, true)?;
    let ag = Plan::new(req.topology, &ag_base, method, sketch, true)?;
    let bounds = two_phase_bounds(&rs, &ag, req)?;
    let mut cuts = Vec::new();
    let mut notes = Vec::new();
    let (algorithms, complete) = match req.search {
        Search::Instance {
            steps,
            rounds,
            chunks,
        } => {
            let join =
                |x: &Algorithm, y: &Algorithm| compose(x, y, req.topology, req.limits.deadline);
            let found =
                two_phase_instance(req, &rs, &ag, (steps, rounds, chunks), &join, &mut cuts)?;
            // A greedy phase that misses proves nothing: no answer is not UNSAT.
            let complete =
                cuts.is_empty() && (found.is_some() || !matches!(method, Method::Greedy { .. }));
            (found.into_iter().collect(), complete)
        }
        Search::LeastSteps { chunks, rounds } => {
            let half = Search::LeastSteps {
                chunks,
                rounds: None,
            };
            let (a, b) = (
                rs.run(half, &req.limits, req.progress, req.topology)?.1,
                ag.run(half, &req.limits, req.progress, req.topology)?.1,
            );
            cuts.extend(a.cuts.iter().chain(&b.cuts).cloned());
            notes.extend(a.notes.iter().chain(&b.notes).cloned());
            let composed: Vec<Algorithm> = a
                .algorithms
                .iter()
                .zip(&b.algorithms)
                .map(|(x, y)| compose(x, y, req.topology, req.limits.deadline))
                .collect::<Result<_>>()?;
            let mut composed = with_shapes(composed, shapes_at(req.topology, chunks, &mut notes));
            composed.retain(|c| rounds.is_none_or(|r| c.rounds() as usize <= r));
            composed.sort_by_key(|c| c.num_steps());
            (composed, a.complete && b.complete)
        }
        Search::Pareto => {
            let (a, b) = (
                rs.run(Search::Pareto, &req.limits, req.progress, req.topology)?
                    .1,
                ag.run(Search::Pareto, &req.limits, req.progress, req.topology)?
                    .1,
            );
            cuts.extend(a.cuts.iter().chain(&b.cuts).cloned());
            notes.extend(a.notes.iter().chain(&b.notes).cloned());
            let (all, alike) = compose_pairs(&a.algorithms, &b.algorithms, req)?;
            let kept = match method {
                Method::Milp => {
                    let sizes = sketch.map_or_else(|| Sketch::default().sizes, |s| s.sizes.clone());
                    milp::pareto_by_time(all, req.topology, &sizes).0
                }
                _ => frontier_and_structures(all, alike),
            };
            // One node only: across nodes every pair is "linked" through the NICs, where
            // the one-shot sends the whole buffer n - 1 times and the tree pairs repeat what
            // the rail and staged pairs do, for minutes of CPU (dgx-h100x8: 15 -> 113 s).
            let one_node = req.topology.nodes() <= 1;
            let mut shapes = if one_node {
                shapes_at(req.topology, 1, &mut notes)
            } else {
                Vec::new()
            };
            if one_node && req.topology.ranks <= TREE_ALLREDUCE_RANKS && method != Method::Milp {
                match reduce_broadcast(req, &mut cuts) {
                    Ok(trees) => shapes.extend(trees),
                    Err(e) => notes.push(format!("reduce + broadcast trees: {e:#}")),
                }
            }
            if req.topology.ranks <= TREE_ALLREDUCE_RANKS && method != Method::Milp {
                match nccl_trees(req.topology, req.limits.deadline) {
                    Ok(trees) => shapes.extend(trees),
                    Err(e) => notes.push(format!("NCCL's trees: {e:#}")),
                }
            }
            (with_shapes(kept, shapes), a.complete && b.complete)
        }
    };
    Ok(Synthesis {
        bounds,
        algorithms,
        complete,
        method,
        engines: vec![method],
        notes,
        cuts,
    })
}

/// A collective that reduces onto several ranks ([`Collective::ends_on_many`]): its reduce
/// phase (solved as a dual) then its spread phase ([`Collective::phases`]), each by
/// `method`, joined per pair of phase algorithms (the frontier of the pairs for a Pareto
/// search). A phase at C chunks per piece makes an algorithm at `pieces × C` chunks per
/// address. Bounds are [`crate::bounds::reduction_bounds`]: they hold for every algorithm,
/// not only for two phases, so a search that finds nothing is not reported complete.
fn reduce_and_spread(
    req: &Request,
    collective: &Collective,
    method: Method,
    sketch: Option<&Sketch>,
) -> Result<Synthesis> {
    let phases = collective.phases()?;
    let lower = crate::bounds::reduction_bounds(req.topology, collective)?;
    let bounds = BoundsReport {
        steps: lower.steps,
        rounds_per_chunk: lower.rounds_per_chunk.to_string(),
    };
    req.progress.bound(&format!(
        "{} steps, R/C >= {}",
        bounds.steps, bounds.rounds_per_chunk
    ));
    let reduce = Plan::new(req.topology, &phases.reduce, method, sketch, true)?;
    let spread = (!phases.spread.chunks.is_empty())
        .then(|| Plan::new(req.topology, &phases.spread, method, sketch, true))
        .transpose()?;
    let deadline = req.limits.deadline;
    let join = |x: &Algorithm, y: Option<&Algorithm>| {
        joined_phases(x, y, &phases, collective, req.topology, deadline)
    };
    let run = |plan: &Plan, search: Search| {
        plan.run(search, &req.limits, req.progress, req.topology)
            .map(|(_, found)| found)
    };
    let mut cuts = Vec::new();
    let mut notes = Vec::new();
    let mut keep = |f: Found, cuts: &mut Vec<crate::engine::Cut>| {
        cuts.extend(f.cuts);
        notes.extend(f.notes);
        (f.algorithms, f.complete)
    };
    let (algorithms, complete) = match (req.search, &spread) {
        (search, None) => {
            let (xs, complete) = keep(run(&reduce, search)?, &mut cuts);
            let joined = xs.iter().map(|x| join(x, None)).collect::<Result<_>>()?;
            (joined, complete)
        }
        (
            Search::Instance {
                steps,
                rounds,
                chunks,
            },
            Some(spread),
        ) => {
            let join = |x: &Algorithm, y: &Algorithm| join(x, Some(y));
            let x = two_phase_instance(
                req,
                &reduce,
                spread,
                (steps, rounds, chunks),
                &join,
                &mut cuts,
            )?;
            let complete = x.is_some() && cuts.is_empty();
            (x.into_iter().collect(), complete)
        }
        (Search::LeastSteps { chunks, rounds }, Some(spread)) => {
            let half = Search::LeastSteps {
                chunks,
                rounds: None,
            };
            let (xs, a) = keep(run(&reduce, half)?, &mut cuts);
            let (ys, b) = keep(run(spread, half)?, &mut cuts);
            let mut joined = (xs.iter().zip(&ys))
                .map(|(x, y)| join(x, Some(y)))
                .collect::<Result<Vec<_>>>()?;
            joined.retain(|j| rounds.is_none_or(|r| j.rounds() as usize <= r));
            (joined, a && b)
        }
        (Search::Pareto, Some(spread)) => {
            let (xs, a) = keep(run(&reduce, Search::Pareto)?, &mut cuts);
            let (ys, b) = keep(run(spread, Search::Pareto)?, &mut cuts);
            let mut all = Vec::new();
            for x in &xs {
                for y in &ys {
                    all.push(join(x, Some(y))?);
                }
            }
            (crate::frontier::frontier_with_twins(all), a && b)
        }
    };
    Ok(Synthesis {
        bounds,
        algorithms,
        complete,
        method,
        engines: vec![method],
        notes,
        cuts,
    })
}

/// The direct engines ([`crate::direct`]) a request for a collective whose reductions end
/// on many ranks also runs: `--method smt` the SMT encoding (only on one node of at most
/// [`crate::direct::DIRECT_SMT_MAX_RANKS`] ranks), `--method greedy` and `auto` the greedy.
/// `auto` leaves the SMT encoding out: its frontier runs to the time limit on most fabrics
/// (about 10 s on dgx1, line:4, dgx-a100), and what a time limit cuts depends on the machine.
fn direct_engines(requested: Method, resolved: Method, topology: &Topology) -> Vec<DirectEngine> {
    let small = topology.ranks <= crate::direct::DIRECT_SMT_MAX_RANKS && topology.nodes() <= 1;
    match (requested, resolved) {
        (Method::Smt, _) if small => vec![DirectEngine::Smt],
        (Method::Auto, Method::Smt) | (Method::Greedy { .. }, _) => vec![DirectEngine::Greedy],
        _ => Vec::new(),
    }
}

/// `synthesis` with the direct schedules of `collective` by `engines` added (for the same
/// search; an instance search only where the phased one found nothing). A direct engine that fails (UNSAT,
/// time) is a note; completeness stays the phased search's.
fn with_direct(
    mut synthesis: Synthesis,
    req: &Request,
    collective: &Collective,
    engines: &[DirectEngine],
) -> Synthesis {
    if matches!(req.search, Search::Instance { .. }) && !synthesis.algorithms.is_empty() {
        return synthesis;
    }
    let make = |c: usize| resplit(collective, c);
    let bounds = match crate::bounds::reduction_bounds(req.topology, collective) {
        Ok(bounds) => bounds,
        Err(e) => {
            synthesis.notes.push(format!("direct schedules: {e:#}"));
            return synthesis;
        }
    };
    // The direct SMT frontier stops where the phased search's bound is reached.
    let target = (synthesis.bounds.rounds_per_chunk.parse::<Ratio<u64>>())
        .unwrap_or(bounds.rounds_per_chunk);
    for &engine in engines {
        let found = crate::direct::search(
            engine,
            req.topology,
            &make,
            &bounds,
            target,
            req.search,
            &req.limits,
            req.progress,
        );
        match found {
            Ok(found) => {
                for a in found.algorithms {
                    if !synthesis.algorithms.iter().any(|x| same_schedule(x, &a)) {
                        synthesis.algorithms.push(a);
                    }
                }
            }
            Err(e) => synthesis.notes.push(format!("{}: {e:#}", engine.name())),
        }
    }
    if matches!(req.search, Search::LeastSteps { .. }) {
        synthesis.algorithms.sort_by_key(|a| a.num_steps());
    }
    synthesis
}

/// The reduce phase's algorithm `x` then the spread phase's `y` (if the spread phase has
/// anything to move) as one algorithm for `collective`: both refined to a common chunk
/// count C, each phase address's pieces renumbered to the pieces of the collective at
/// `phases.pieces × C` chunks per address they are; checked.
fn joined_phases(
    x: &Algorithm,
    y: Option<&Algorithm>,
    phases: &crate::collective::Phases,
    collective: &Collective,
    topology: &Topology,
    deadline: Instant,
) -> Result<Algorithm> {
    let c = y.map_or(x.chunks(), |y| num_integer::lcm(x.chunks(), y.chunks()));
    let renumbered = |a: &Algorithm, of: &[usize]| -> Vec<crate::algorithm::Step> {
        let a = a.refined(c);
        a.steps
            .into_iter()
            .map(|mut step| {
                for send in &mut step.sends {
                    send.chunk = of[send.chunk / c] * c + send.chunk % c;
                }
                step
            })
            .collect()
    };
    let mut steps = renumbered(x, &phases.reduce_of);
    if let Some(y) = y {
        steps.extend(renumbered(y, &phases.spread_of));
    }
    let family = Family::ReduceSpread {
        reduce: Box::new(x.origin.family.clone()),
        spread: Box::new(y.map_or(Family::Empty, |y| y.origin.family.clone())),
    };
    let collective = resplit(collective, phases.pieces * c)?;
    let algorithm = Algorithm::made(family, topology.name.clone(), collective, steps);
    check_in_time(&algorithm, topology, deadline, "reduce + spread ")?;
    Ok(algorithm)
}

/// The most ranks on which the allreduce also searches a reduce and a broadcast to pair
/// as trees (those searches would otherwise double the time of large fabrics' searches).
pub const TREE_ALLREDUCE_RANKS: usize = 64;

/// The one-shot and two-shot allreduce at `chunks` pieces per slice where the fabric
/// links every pair ([`crate::allreduce_shapes`]); a failure is a note.
fn shapes_at(topology: &Topology, chunks: usize, notes: &mut Vec<String>) -> Vec<Algorithm> {
    let made = [
        crate::allreduce_shapes::one_shot(topology, chunks),
        crate::allreduce_shapes::two_shot(topology, chunks),
    ];
    let mut shapes = Vec::new();
    for shape in made {
        match shape.and_then(|s| {
            s.map(|a| crate::check::check(&a, topology).map(|()| a))
                .transpose()
                .map_err(anyhow::Error::from)
        }) {
            Ok(a) => shapes.extend(a),
            Err(e) => notes.push(format!("allreduce shapes: {e:#}")),
        }
    }
    shapes
}

/// `algorithms` with every one of `shapes` added, each in place of an algorithm of the
/// same schedule (an engine's answer that is the two-shot goes by the shape's name).
fn with_shapes(mut algorithms: Vec<Algorithm>, shapes: Vec<Algorithm>) -> Vec<Algorithm> {
    for shape in shapes {
        algorithms.retain(|a| !same_schedule(a, &shape));
        algorithms.push(shape);
    }
    algorithms
}

/// Allreduce as a reduce to rank 0 then a broadcast from it, each by tree packing (packed
/// trees and the constructions that fit; the reduce up the trees of the reversed fabric),
/// pipelined by pieces through the lowering's per-slot dependencies: per family found for
/// both, its fewest-steps pair and its fewest-rounds-per-chunk pair.
fn reduce_broadcast(req: &Request, cuts: &mut Vec<crate::engine::Cut>) -> Result<Vec<Algorithm>> {
    let (method, sketch) = (Method::Trees, None);
    let n = req.topology.ranks;
    let (reduce_to_0, broadcast_from_0) = (
        Collective::new(Kind::Reduce, n, 0, 1)?,
        Collective::new(Kind::Broadcast, n, 0, 1)?,
    );
    let reduce_plan = Plan::new(req.topology, &reduce_to_0, method, sketch, true)?;
    let broadcast_plan = Plan::new(req.topology, &broadcast_from_0, method, sketch, true)?;
    let search = |plan: &Plan| -> Result<Found> {
        Ok(plan
            .run(Search::Pareto, &req.limits, req.progress, req.topology)?
            .1)
    };
    // The reduce is solved as the broadcast on the reversed fabric: where that is the
    // fabric itself, the broadcast's search is not run twice.
    let (reduce, broadcast) = if req.topology.equals_its_reversal() {
        let broadcast = search(&broadcast_plan)?;
        let reduce = reduce_plan.finished(broadcast.clone(), &req.limits, req.topology)?;
        (reduce, broadcast)
    } else {
        (search(&reduce_plan)?, search(&broadcast_plan)?)
    };
    cuts.extend(reduce.cuts.iter().chain(&broadcast.cuts).cloned());
    let rounds = |a: &&Algorithm| (a.rounds_per_chunk(), a.num_steps());
    let steps = |a: &&Algorithm| (a.num_steps(), a.rounds_per_chunk());
    let mut made: Vec<Algorithm> = Vec::new();
    for x in &reduce.algorithms {
        let family = &x.origin.family;
        if made.iter().any(|m| {
            matches!(&m.origin.family, Family::ReduceBroadcast { reduce, .. } if **reduce == *family)
        }) {
            continue;
        }
        let xs: Vec<&Algorithm> = (reduce.algorithms.iter())
            .filter(|a| a.origin.family == *family)
            .collect();
        let ys: Vec<&Algorithm> = (broadcast.algorithms.iter())
            .filter(|a| a.origin.family == *family)
            .collect();
        let pairs = [
            (
                xs.iter().copied().min_by_key(steps),
                ys.iter().copied().min_by_key(steps),
                false,
            ),
            (
                xs.iter().copied().min_by_key(rounds),
                ys.iter().copied().min_by_key(rounds),
                true,
            ),
        ];
        for (x, y, pipelined) in pairs {
            let (Some(x), Some(y)) = (x, y) else { continue };
            let composed = reduce_then_broadcast(x, y, req.topology, req.limits.deadline)?;
            let composed = if pipelined {
                pipelined_pieces(composed, req.topology, req.limits.deadline)?
            } else {
                composed
            };
            if !made.iter().any(|m| same_schedule(m, &composed)) {
                made.push(composed);
            }
        }
    }
    Ok(made)
}

/// NCCL's trees as an allreduce ([`crate::allreduce_shapes::nccl_trees`]), refined to
/// pipeline like the reduce + broadcast trees; `None` where a tree edge is not a link.
fn nccl_trees(topology: &Topology, deadline: Instant) -> Result<Option<Algorithm>> {
    let Some(trees) = crate::allreduce_shapes::nccl_trees(topology, 1)? else {
        return Ok(None);
    };
    check_in_time(&trees, topology, deadline, "")?;
    pipelined_pieces(trees, topology, deadline).map(Some)
}

/// Pieces in flight per step of a pipelined reduce + broadcast: the allreduce is refined
/// until it has at least this many pieces per step, so that the pipeline's fill and drain
/// (a piece per step) take a small part of the time.
const PIPELINE_PIECES_PER_STEP: usize = 4;

/// `algorithm` refined so that its pieces pipeline through its steps (each piece forwarded
/// as soon as it is reduced or received, by the lowering's per-slot dependencies):
/// [`PIPELINE_PIECES_PER_STEP`] pieces per step, or fewer where more would put more
/// transfers on a link than a program holds; checked.
fn pipelined_pieces(
    algorithm: Algorithm,
    topology: &Topology,
    deadline: Instant,
) -> Result<Algorithm> {
    let c = algorithm.chunks();
    let n = topology.ranks;
    let wanted = (PIPELINE_PIECES_PER_STEP * algorithm.num_steps()).div_ceil(n * c);
    let most = runtime::limits::Limits::PORTABLE.link_transfers();
    let busiest = crate::load::busiest_link_transfers(&[&algorithm]).max(1);
    let k = wanted.min(most / busiest).max(1);
    if k == 1 {
        return Ok(algorithm);
    }
    let refined = algorithm.refined(c * k).renamed();
    check_in_time(&refined, topology, deadline, "pipelined ")?;
    Ok(refined)
}

/// The allreduce's lower bounds: rounds per chunk, the reduce-scatter's and the
/// allgather's added (a bound for the composed halves); steps, the diameter (every rank
/// needs the farthest rank's input; the one-shot takes one step on a fabric that links
/// every pair), which the halves' steps added can only exceed.
fn two_phase_bounds(rs: &Plan, ag: &Plan, req: &Request) -> Result<BoundsReport> {
    let deadline = req.limits.deadline;
    let (rs_bounds, ag_bounds) = (
        rs.bounds(req.progress, deadline)?,
        ag.bounds(req.progress, deadline)?,
    );
    let bounds = BoundsReport {
        steps: (rs_bounds.steps + ag_bounds.steps).min(req.topology.diameter().unwrap_or(1).max(1)),
        rounds_per_chunk: (rs_bounds.rounds_per_chunk + ag_bounds.rounds_per_chunk).to_string(),
    };
    req.progress.bound(&format!(
        "{} steps, R/C >= {}",
        bounds.steps, bounds.rounds_per_chunk
    ));
    Ok(bounds)
}

/// Every reduce-scatter half of `rs` composed with every allgather half of `ag` that it can
/// pair with, and, of those, the pairs of halves of one structure (trees with trees, rails
/// with rails, ...), which the construction that made them may lay out anew
/// ([`crate::constructions::allreduce_pair`]).
fn compose_pairs(
    rs: &[Algorithm],
    ag: &[Algorithm],
    req: &Request,
) -> Result<(Vec<Algorithm>, Vec<Algorithm>)> {
    let mut all = Vec::new();
    let mut alike = Vec::new();
    for x in rs {
        for y in ag {
            // Halves packed on the fabric's rail view (or split view) pair with each other
            // only: the view is tried beside the fabric, not mixed into every pair (two
            // DGX-2s: 9 s more).
            if (x.origin.rail_view, x.origin.split_view)
                != (y.origin.rail_view, y.origin.split_view)
            {
                continue;
            }
            let same = x.origin.family.pairs_with(&y.origin.family);
            // A half in messages of several chunks has pieces finer than its messages:
            // composed with another structure, that one would be refined to as many pieces
            // for nothing (dgx-a100x8: 21 s more composing and checking), so it pairs with
            // its own structure only.
            if !same && (x.message_chunks.is_some() || y.message_chunks.is_some()) {
                continue;
            }
            // A construction that lays out its own pairs (the torus bucket: messages of whole
            // blocks, where 32x32 would put 2046 transfers on a link) fits them to the
            // runtimes itself.
            let layout = same
                .then(|| crate::constructions::allreduce_pair(&x.origin.family))
                .flatten();
            if layout.is_none()
                && (past_the_channels(x, y) || unfit_serial_pair(x, y) || refines_both(x, y))
            {
                continue;
            }
            let mut composed = compose(x, y, req.topology, req.limits.deadline)?;
            if let Some(layout) = layout {
                composed = layout(&composed)?;
            }
            if same {
                alike.push(composed.clone());
            }
            all.push(composed);
        }
    }
    Ok((all, alike))
}

/// Besides the frontier of `all` in (steps, rounds per chunk), every structure composed
/// with itself (`alike`): rounds do not see how a schedule pipelines, so a dominated pair
/// can simulate faster (dgx-a100x2: the trees pair 321.4 GB/s at 1 GB, the rail-ring pair
/// that dominates it 290.9).
fn frontier_and_structures(all: Vec<Algorithm>, alike: Vec<Algorithm>) -> Vec<Algorithm> {
    let mut kept = crate::frontier::frontier_with_twins(all);
    for c in alike {
        if !kept.iter().any(|k| k.same_schedule_as(&c)) {
            kept.push(c);
        }
    }
    kept
}

/// Two phases (an allreduce's reduce-scatter and allgather, a reduce and a spread) with
/// exactly S steps and at most R rounds at C chunks, `join`ed: tries every split of the
/// steps; the first phase takes the least rounds it can, leaving the most to the second
/// (which makes the split search complete).
fn two_phase_instance(
    req: &Request,
    rs: &Plan,
    ag: &Plan,
    (steps, rounds, chunks): (usize, usize, usize),
    join: &dyn Fn(&Algorithm, &Algorithm) -> Result<Algorithm>,
    cuts: &mut Vec<crate::engine::Cut>,
) -> Result<Option<Algorithm>> {
    for first in 1..steps {
        let second = steps - first;
        if rounds < steps {
            break;
        }
        let (_, a) = rs.run(
            Search::LeastSteps {
                chunks,
                rounds: Some(rounds - second),
            },
            &Limits {
                max_steps: first,
                ..req.limits.clone()
            },
            req.progress,
            req.topology,
        )?;
        cuts.extend(a.cuts);
        let Some(x) = a.algorithms.into_iter().find(|x| x.num_steps() == first) else {
            continue;
        };
        let left = rounds - x.rounds() as usize;
        let (_, b) = ag.run(
            Search::Instance {
                steps: second,
                rounds: left,
                chunks,
            },
            &req.limits,
            req.progress,
            req.topology,
        )?;
        cuts.extend(b.cuts);
        if let Some(y) = b.algorithms.first() {
            return Ok(Some(join(&x, y)?));
        }
    }
    Ok(None)
}

/// Reduce-scatter `rs` followed by allgather `ag` as one allreduce on n·C addresses, at the
/// least common chunk count (an algorithm at C chunks runs at k·C chunks with k× the rounds).
fn compose(
    rs: &Algorithm,
    ag: &Algorithm,
    topology: &Topology,
    deadline: Instant,
) -> Result<Algorithm> {
    let c = num_integer::lcm(rs.chunks(), ag.chunks());
    let family = Family::Composed {
        reduce_scatter: Box::new(rs.origin.family.clone()),
        allgather: Box::new(ag.origin.family.clone()),
    };
    joined(rs, ag, (c, c), family, topology, deadline)
}

/// A reduce to rank 0 then a broadcast from it as one allreduce: both refined to the least
/// common multiple of their piece counts and the ranks, each of the allreduce's addresses
/// one of their pieces (every address of an allreduce ends on every rank, like a
/// broadcast's).
fn reduce_then_broadcast(
    reduce: &Algorithm,
    broadcast: &Algorithm,
    topology: &Topology,
    deadline: Instant,
) -> Result<Algorithm> {
    let n = topology.ranks;
    let pieces = num_integer::lcm(num_integer::lcm(reduce.chunks(), broadcast.chunks()), n);
    let family = Family::ReduceBroadcast {
        reduce: Box::new(reduce.origin.family.clone()),
        broadcast: Box::new(broadcast.origin.family.clone()),
    };
    joined(
        reduce,
        broadcast,
        (pieces, pieces / n),
        family,
        topology,
        deadline,
    )
}

/// `rs` then `ag`, each refined to `pieces`, as one allreduce of `family` at `c` pieces
/// per slice (its addresses the halves' refined addresses), `ag` taking up the pieces in
/// the order `rs` delivers them where their messages allow ([`crate::handoff`]), checked.
fn joined(
    rs: &Algorithm,
    ag: &Algorithm,
    (pieces, c): (usize, usize),
    family: Family,
    topology: &Topology,
    deadline: Instant,
) -> Result<Algorithm> {
    // A channel hint survives only where neither half is re-split and both agree.
    let piece_channels = if rs.chunks() == pieces && ag.chunks() == pieces {
        rs.piece_channels.max(ag.piece_channels)
    } else {
        None
    };
    let (x, y) = (rs.refined(pieces), ag.refined(pieces));
    let y = if crate::handoff::applies(rs, ag) {
        crate::handoff::matched_order(&x, &y).unwrap_or(y)
    } else {
        y
    };
    // Each half keeps its message sizes (one chunk per message where it sets none).
    let message_chunks = (x.message_chunks.is_some() || y.message_chunks.is_some()).then(|| {
        let mut m = x.message_chunks_or_one();
        m.extend(y.message_chunks_or_one());
        m
    });
    let collective = Collective::new(Kind::AllReduce, topology.ranks, 0, c)?;
    let steps = x.steps.into_iter().chain(y.steps).collect::<Vec<_>>();
    let mut algorithm = Algorithm {
        piece_channels,
        message_chunks,
        serial_links: x.serial_links || y.serial_links,
        ..Algorithm::made(family, topology.name.clone(), collective, steps)
    };
    let rail_view = rs.origin.rail_view || ag.origin.rail_view;
    let split_view = rs.origin.split_view || ag.origin.split_view;
    if rail_view || split_view {
        algorithm.origin.rail_view = rail_view;
        algorithm.origin.split_view = split_view;
        algorithm = algorithm.renamed();
    }
    // Where a half is laid out in step groups, each half keeps its groups and the phases get
    // channels of their own, so the allgather of one slice overlaps the reduce-scatter of
    // the next (dgx-a100x2: 321.4 GB/s at 1 GB against 231.7 in one group).
    if rs.step_groups.is_some() || ag.step_groups.is_some() {
        let groups_of = |a: &Algorithm| {
            a.step_groups
                .clone()
                .unwrap_or_else(|| vec![0; a.steps.len()])
        };
        let first = groups_of(rs);
        let offset = first.iter().max().map_or(0, |g| g + 1);
        let wanted = first
            .into_iter()
            .chain(groups_of(ag).into_iter().map(|g| g + offset))
            .collect();
        let groups = crate::layout::groups::fit_groups(&algorithm, wanted);
        algorithm = crate::layout::groups::with_groups(algorithm, groups);
    }
    check_in_time(&algorithm, topology, deadline, "composed ")?;
    Ok(algorithm)
}

/// Whether the allreduce of halves `x` and `y`, refined to a common piece count, puts more
/// transfers on some link than a program holds ([`runtime::limits::Limits::link_transfers`]), so
/// that composing it would only be wasted work (`mi250-16x2`: 18 and 30 pieces, composed at
/// 90, 2880 transfers on a link). Halves in messages of several chunks are not judged.
fn past_the_channels(x: &Algorithm, y: &Algorithm) -> bool {
    if x.message_chunks.is_some() || y.message_chunks.is_some() {
        return false;
    }
    crate::load::busiest_link_transfers(&[x, y])
        > runtime::limits::Limits::PORTABLE.link_transfers()
}

/// Whether halves `x` and `y` compose only at a piece count neither has (their least common
/// multiple), so that both are cut into finer pieces than they were built with: many more,
/// smaller transfers for a schedule neither half was laid out for (dgx-h100 × 6: the rail
/// rings of 8 and 21 pieces composed at 168, 3.7 s of lowering and 1.4 s of simulation, the
/// fastest at no size but the smallest, where its 8,064 pieces per loop round the buffer up
/// to 32 KB). A pair where one count divides the other keeps that half as built
/// (dgx-h100x8: 8 and 16 pieces, the fastest at 16 MB).
fn refines_both(x: &Algorithm, y: &Algorithm) -> bool {
    let common = num_integer::lcm(x.chunks(), y.chunks());
    common > x.chunks().max(y.chunks())
}

/// Whether halves `x` and `y` pair badly as an allreduce because of a half timed for serial
/// links ([`Algorithm::serial_links`]): paired with a half that is not, or at another piece
/// count (refined, its timing is lost), or with more than half of
/// [`runtime::limits::Limits::link_transfers`] on a link together: a reduction's receive carries
/// dependencies that the runtime holds as nop steps, so the threadblocks fill before their
/// 64 steps hold 64 transfers (`mi250-16x2`: 1920 transfers on a 4-link connection, 60
/// pieces per half, did not lower; 960, 30 pieces, did).
fn unfit_serial_pair(x: &Algorithm, y: &Algorithm) -> bool {
    if !x.serial_links && !y.serial_links {
        return false;
    }
    x.serial_links != y.serial_links
        || x.chunks() != y.chunks()
        || crate::load::busiest_link_transfers(&[x, y])
            > runtime::limits::Limits::PORTABLE.link_transfers() / 2
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::{Send, Step};

    #[test]
    fn a_rejected_algorithm_is_left_out_with_a_note_and_the_others_go_on() {
        let topology = crate::topology::load("ring:4").unwrap();
        let base = Collective::new(Kind::AllGather, 4, 0, 1).unwrap();
        let plan = Plan::new(&topology, &base, Method::Trees, None, false).unwrap();
        // The ring allgather: in step t every rank passes on the piece it got t steps before.
        let step = |t: usize| Step {
            rounds: 1,
            reduce: false,
            sends: (0..4)
                .map(|r| Send {
                    chunk: (r + 4 - t) % 4,
                    src: r,
                    dst: (r + 1) % 4,
                })
                .collect(),
        };
        let ring = Algorithm::plain(
            "allgather-ring",
            "ring:4",
            base.clone(),
            vec![step(0), step(1), step(2)],
        );
        // Its last step missing: no rank ends with every piece.
        let short = Algorithm::plain(
            "allgather-short",
            "ring:4",
            base.clone(),
            vec![step(0), step(1)],
        );
        let found = Found {
            algorithms: vec![short, ring.clone()],
            complete: true,
            cuts: Vec::new(),
            notes: Vec::new(),
        };
        let limits = Limits::new(16, 8, Instant::now() + Duration::from_secs(3600));
        let finished = plan.finished(found, &limits, &topology).unwrap();
        assert_eq!(finished.algorithms.len(), 1);
        assert_eq!(finished.algorithms[0].steps, ring.steps);
        assert_eq!(finished.notes.len(), 1, "{:?}", finished.notes);
        assert!(
            finished.notes[0].ends_with("; left out"),
            "{}",
            finished.notes[0]
        );
    }
}
