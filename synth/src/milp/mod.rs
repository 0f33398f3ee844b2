//! Synthesis with the MILP encoding (DESIGN §4): the k-synchronous step model with per-link
//! alpha/beta costs, solved by HiGHS through good_lp, restricted by a communication sketch
//! ([`crate::sketch`]) so that it scales to multi-node fabrics.
//!
//! [`search`] solves one model per chunk count C of the sketch at each of its target sizes,
//! checks every algorithm with [`crate::check::check`] and keeps those not dominated in
//! predicted time over the target sizes ([`predict_us`]). Combining collectives are solved by
//! the caller as their dual on the reversed fabric (see [`crate::synthesize`]).

pub mod model;

use crate::algorithm::Algorithm;
use crate::check::{check, check_memory};
use crate::engine::{Cut, TimeLimitReached};
use crate::load::Loads;
use crate::progress::Progress;
use crate::sketch::Sketch;
use crate::smt::search::MakeCollective;
use crate::topology::{Topology, TopologyIndex};
use anyhow::{bail, Result};
use std::ops::ControlFlow;
use std::time::Instant;

pub use model::{Encoding, SolveLimits, Solved, Stop};

/// One solved model, for reports.
#[derive(Debug, Clone)]
pub struct Attempt {
    /// Pieces per chunk C.
    pub chunks: usize,
    /// Step budget S of the model.
    pub steps: usize,
    /// Target size (bytes).
    pub size: f64,
    /// Binary variables after symmetry and pruning.
    pub variables: usize,
    /// Order of the symmetry group used.
    pub symmetry: usize,
    /// Solver objective in µs (`None`: no solution).
    pub objective: Option<f64>,
    /// Proven optimal within the gap (or proven infeasible).
    pub proven: bool,
    /// The limit that stopped the solver before it proved its answer, if one did.
    pub stopped: Option<Stop>,
    /// Wall-clock seconds of the solve.
    pub seconds: f64,
}

impl Attempt {
    /// What a limit cut in this solve, for reports: `None` when it was proven.
    pub fn cut(&self) -> Option<Cut> {
        let stop = self.stopped?;
        let limit = match stop {
            Stop::Work => "work limit (branch-and-bound nodes)",
            Stop::Time => "time limit",
        };
        let result = match self.objective {
            Some(o) => format!("an algorithm of {o:.2} us, not proven optimal"),
            None => "no algorithm".to_string(),
        };
        Some(Cut {
            limit: stop.name(),
            what: format!(
                "the {limit} stopped the MILP model chunks={} steps={} at {:e} bytes with {result}",
                self.chunks, self.steps, self.size
            ),
        })
    }
}

/// What [`search`] found.
#[derive(Debug, Clone)]
pub struct MilpFound {
    /// Checked algorithms not dominated in predicted time over `sizes`, fastest at the
    /// smallest size first.
    pub algorithms: Vec<Algorithm>,
    /// Predicted time in µs of each algorithm at each size.
    pub predicted_us: Vec<Vec<f64>>,
    /// The target sizes (bytes).
    pub sizes: Vec<f64>,
    /// False when a solve hit its work or time limit or the deadline stopped the search.
    pub complete: bool,
    /// Every model solved.
    pub attempts: Vec<Attempt>,
    /// What the work limit, the time limit per model or the deadline cut (empty when every
    /// model was solved to proven optimality).
    pub cuts: Vec<Cut>,
}

/// Predicted time in µs of `algorithm` on `topology` at nccl-tests size `size` bytes: the sum
/// over steps of the slowest link or switch constraint, a link costing
/// `alpha + bytes·load/bandwidth` and a switch constraint `bytes·load/bandwidth`
/// ([`Predictor::us`], for one algorithm).
pub fn predict_us(algorithm: &Algorithm, topology: &Topology, size: f64) -> f64 {
    Predictor::new(topology).us(algorithm, size)
}

/// Predicts times on one topology, its index built once (see [`predict_us`]).
pub struct Predictor<'a> {
    topology: &'a Topology,
    index: TopologyIndex,
}

impl<'a> Predictor<'a> {
    /// A predictor for `topology`.
    pub fn new(topology: &'a Topology) -> Predictor<'a> {
        Predictor {
            topology,
            index: topology.index(),
        }
    }

    /// [`predict_us`] of `algorithm` at `size` bytes.
    pub fn us(&self, algorithm: &Algorithm, size: f64) -> f64 {
        let coll = &algorithm.collective;
        let bytes = size / (coll.kind.units_per_buffer(coll.ranks) * coll.chunks_per_rank) as f64;
        let mut total = 0.0;
        for step in &algorithm.steps {
            let loads = Loads::of(&self.index, self.topology.switches.len(), &step.sends);
            let links = (loads.links.iter())
                .zip(&self.topology.links)
                .filter(|(&n, _)| n > 0)
                .map(|(&n, l)| l.alpha + bytes * n as f64 / (l.bandwidth * 1e3));
            let switches = (loads.switches.iter())
                .zip(&self.topology.switches)
                .map(|(&n, s)| bytes * n as f64 / (s.bandwidth * 1e3));
            total += links.chain(switches).fold(0.0, f64::max);
        }
        total
    }
}

/// Keeps the algorithms not dominated in predicted time over `sizes` (ties: fewer steps),
/// ordered by time at the smallest size; identical algorithms appear once.
pub fn pareto_by_time(
    all: Vec<Algorithm>,
    topology: &Topology,
    sizes: &[f64],
) -> (Vec<Algorithm>, Vec<Vec<f64>>) {
    let predictor = Predictor::new(topology);
    let mut scored: Vec<(Algorithm, Vec<f64>)> = Vec::new();
    for a in all {
        if scored
            .iter()
            .any(|(b, _)| b.steps == a.steps && b.collective == a.collective)
        {
            continue;
        }
        let t = sizes.iter().map(|&s| predictor.us(&a, s)).collect();
        scored.push((a, t));
    }
    crate::frontier::pareto_by_time(scored).into_iter().unzip()
}

/// Solves the (non-combining) collective built by `make` on `topology` under `sketch`, one
/// model per chunk count at every target size, until `deadline`. Every algorithm passes the
/// checker. Fails with the sketch's one-line errors (see [`Sketch::routing`]), and with
/// [`TimeLimitReached`] when the deadline passes before any algorithm was found.
///
/// With `sketch.work_limit` every solve is bounded by that many branch-and-bound nodes on
/// one thread with a fixed seed: the answer then depends only on the input, not on the
/// machine's speed or load (the time limits stay as a safety net, and [`MilpFound::cuts`]
/// says when one decided).
pub fn search(
    topology: &Topology,
    make: &MakeCollective,
    sketch: &Sketch,
    deadline: Instant,
    progress: &Progress,
    extra_memory: Option<usize>,
) -> Result<MilpFound> {
    let routing = sketch.routing(topology)?;
    let base = make(1)?;
    if base.is_combining() {
        bail!(
            "the MILP encoding solves non-combining collectives; solve {} as its dual",
            base.kind
        );
    }
    let hops = routing.check_collective(topology, &base)?;
    let mut sizes = sketch.sizes.clone();
    sizes.sort_by(f64::total_cmp);
    let mut run = MilpSearch {
        topology,
        predictor: Predictor::new(topology),
        sketch,
        routing: &routing,
        base: &base,
        deadline,
        progress,
        extra_memory,
        found: Vec::new(),
        attempts: Vec::new(),
        complete: true,
        cuts: Vec::new(),
    };
    for &c in &sketch.chunks {
        let coll = make(c)?;
        let (lo, hi) = sketch.steps;
        let steps = (hops + c - 1).max(lo).min(hi.unwrap_or(usize::MAX));
        if steps < hops {
            continue;
        }
        if run.chunk_count(&coll, c, steps, &sizes)?.is_break() {
            break;
        }
    }
    let (algorithms, predicted_us) = pareto_by_time(run.found, topology, &sizes);
    Ok(MilpFound {
        algorithms,
        predicted_us,
        sizes,
        complete: run.complete,
        attempts: run.attempts,
        cuts: run.cuts,
    })
}

/// One [`search`] under way: what it searches with and what it has found.
struct MilpSearch<'s> {
    topology: &'s Topology,
    predictor: Predictor<'s>,
    sketch: &'s Sketch,
    routing: &'s crate::sketch::Routing,
    /// The collective at one piece per chunk.
    base: &'s crate::collective::Collective,
    deadline: Instant,
    progress: &'s Progress,
    extra_memory: Option<usize>,
    /// Checked algorithms so far.
    found: Vec<Algorithm>,
    attempts: Vec<Attempt>,
    complete: bool,
    cuts: Vec<Cut>,
}

impl MilpSearch<'_> {
    /// The deadline stopped the search during `phase`: an error when nothing was found,
    /// else a cut (the search then breaks off).
    fn stopped(&mut self, phase: String) -> Result<()> {
        self.complete = false;
        if self.found.is_empty() {
            return Err(TimeLimitReached { phase }.into());
        }
        self.cuts.push(Cut {
            limit: "time",
            what: format!("the time limit was reached while {phase}"),
        });
        Ok(())
    }

    /// `result`, or the break of [`MilpSearch::stopped`] if the deadline stopped it.
    fn or_stopped<T>(&mut self, result: Result<T>) -> Result<ControlFlow<(), T>> {
        match result {
            Ok(x) => Ok(ControlFlow::Continue(x)),
            Err(e) => match crate::engine::time_limit_phase(&e) {
                Some(phase) => {
                    self.stopped(phase.to_string())?;
                    Ok(ControlFlow::Break(()))
                }
                None => Err(e),
            },
        }
    }

    /// Solves the model of `coll` (C = `c` pieces) in `steps` steps at every size, largest
    /// first; breaks when the deadline stopped the search.
    fn chunk_count(
        &mut self,
        coll: &crate::collective::Collective,
        c: usize,
        steps: usize,
        sizes: &[f64],
    ) -> Result<ControlFlow<()>> {
        let built = Encoding::new(self.topology, coll, self.routing, steps, self.deadline);
        let encoding = match self.or_stopped(built)? {
            ControlFlow::Continue(Some(e)) => e.with_extra_memory(self.extra_memory),
            ControlFlow::Continue(None) => return Ok(ControlFlow::Continue(())),
            ControlFlow::Break(()) => return Ok(ControlFlow::Break(())),
        };
        for &size in sizes.iter().rev() {
            if self.known_good_enough(size) {
                continue;
            }
            let left = self
                .deadline
                .saturating_duration_since(Instant::now())
                .as_secs_f64();
            if left <= 0.05 {
                self.stopped(format!(
                    "solving the MILP models (next: chunks={c} steps={steps} at {size:e} bytes)"
                ))?;
                return Ok(ControlFlow::Break(()));
            }
            if self.solve_at(&encoding, c, steps, size, left)?.is_break() {
                return Ok(ControlFlow::Break(()));
            }
        }
        Ok(ControlFlow::Continue(()))
    }

    /// Whether a model at `size` cannot beat what is known: the best time so far at this
    /// size is already within the gap of a lower bound.
    fn known_good_enough(&self, size: f64) -> bool {
        let best = (self.found.iter())
            .map(|a| self.predictor.us(a, size))
            .fold(f64::INFINITY, f64::min);
        best <= (1.0 + self.sketch.gap)
            * time_lower_bound(self.topology, self.routing, self.base, size)
    }

    /// Warm start: the best algorithm so far at `size`, refined to `c` pieces.
    fn warm_start(&self, c: usize, steps: usize, size: f64) -> Option<Algorithm> {
        (self.found.iter())
            .filter(|a: &&Algorithm| c.is_multiple_of(a.chunks()) && a.num_steps() <= steps)
            .min_by(|a, b| (self.predictor.us(a, size)).total_cmp(&self.predictor.us(b, size)))
            .map(|a| a.refined(c))
    }

    /// Solves `encoding` (C = `c` pieces, `steps` steps) at `size` within `left` seconds and
    /// keeps its algorithm, checked; breaks when the deadline stopped the search.
    fn solve_at(
        &mut self,
        encoding: &Encoding,
        c: usize,
        steps: usize,
        size: f64,
        left: f64,
    ) -> Result<ControlFlow<()>> {
        self.progress.message(&format!(
            "MILP chunks={c} steps={steps} size={size:e} ({} binaries, symmetry {})",
            encoding.variables(),
            encoding.symmetry_order()
        ));
        let started = Instant::now();
        let start = self.warm_start(c, steps, size);
        let limits = SolveLimits {
            seconds: self.sketch.time_limit.min(left),
            gap: self.sketch.gap,
            nodes: self.sketch.work_limit,
            deadline: self.deadline,
        };
        let solved = match self.or_stopped(encoding.solve(size, &limits, start.as_ref()))? {
            ControlFlow::Continue(s) => s,
            ControlFlow::Break(()) => return Ok(ControlFlow::Break(())),
        };
        let attempt = Attempt {
            chunks: c,
            steps,
            size,
            variables: encoding.variables(),
            symmetry: encoding.symmetry_order(),
            objective: solved.objective,
            proven: solved.proven,
            stopped: solved.stopped,
            seconds: started.elapsed().as_secs_f64(),
        };
        self.complete &= solved.proven;
        if let Some(algorithm) = solved.algorithm {
            self.keep(algorithm, size)?;
        }
        self.cuts.extend(attempt.cut());
        self.attempts.push(attempt);
        Ok(ControlFlow::Continue(()))
    }

    /// Checks `algorithm` (and its memory) and keeps it.
    fn keep(&mut self, algorithm: Algorithm, size: f64) -> Result<()> {
        let memory = (self.extra_memory).map_or(Ok(()), |m| check_memory(&algorithm, m));
        if let Err(e) = check(&algorithm, self.topology).and(memory) {
            bail!(
                "internal error: the MILP algorithm {} fails the checker: {e}",
                algorithm.name
            );
        }
        self.progress.best(&format!(
            "({}, {}, {}) {:.1} us at {size:e} B",
            algorithm.num_steps(),
            algorithm.rounds(),
            algorithm.chunks(),
            self.predictor.us(&algorithm, size)
        ));
        self.found.push(algorithm);
        Ok(())
    }
}

/// A lower bound in µs on any algorithm at `size` under the sketch: the largest, over
/// needed (chunk, rank) pairs, of the least total latency along an allowed path, and the
/// per-rank cut (bytes a rank lacks over the sum of its incoming bandwidths).
pub fn time_lower_bound(
    topology: &Topology,
    routing: &crate::sketch::Routing,
    coll: &crate::collective::Collective,
    size: f64,
) -> f64 {
    let bytes = size / coll.kind.units_per_buffer(coll.ranks) as f64;
    let mut latency: f64 = 0.0;
    for c in 0..coll.chunks.len() {
        let links = routing.chunk_links(topology, coll, c);
        // Bellman-Ford over the allowed links (few ranks, non-negative latencies).
        let mut dist = vec![f64::INFINITY; topology.ranks];
        coll.chunks[c].pre.iter().for_each(|&r| dist[r] = 0.0);
        for _ in 0..topology.ranks {
            let mut changed = false;
            for &i in &links {
                let l = &topology.links[i];
                if dist[l.src] + l.alpha < dist[l.dst] {
                    dist[l.dst] = dist[l.src] + l.alpha;
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        for &r in coll.chunks[c].post.iter() {
            if dist[r].is_finite() {
                latency = latency.max(dist[r]);
            }
        }
    }
    let mut cut: f64 = 0.0;
    for r in 0..topology.ranks {
        let needed = coll
            .chunks
            .iter()
            .filter(|c| c.post.contains(&r) && !c.pre.contains(&r))
            .count() as f64;
        let bw: f64 = topology
            .links
            .iter()
            .filter(|l| l.dst == r)
            .map(|l| l.bandwidth)
            .sum();
        if bw > 0.0 {
            cut = cut.max(needed * bytes / (bw * 1e3));
        }
    }
    latency.max(cut)
}

/// The MILP engine: the k-synchronous step model with alpha/beta costs, under a sketch.
pub struct MilpEngine {
    /// The sketch (already reversed for the dual of a combining collective).
    pub sketch: Sketch,
}

impl crate::engine::Engine for MilpEngine {
    fn name(&self) -> &'static str {
        "milp"
    }

    fn bounds(&self, problem: &crate::engine::Problem) -> Result<crate::bounds::Bounds> {
        crate::bounds::cut_bounds(problem.topology, &(problem.make)(1)?)
    }

    fn search(
        &self,
        problem: &crate::engine::Problem,
        request: crate::engine::Search,
        limits: &crate::engine::Limits,
    ) -> Result<crate::engine::Found> {
        use crate::engine::Search as S;
        let mut sketch = self.sketch.clone();
        if limits.work_limit.is_some() {
            sketch.work_limit = limits.work_limit;
        }
        match request {
            S::Instance { steps, chunks, .. } => {
                sketch.chunks = vec![chunks];
                sketch.steps = (steps, Some(steps));
            }
            S::LeastSteps { chunks, .. } => sketch.chunks = vec![chunks],
            S::Pareto => {}
        }
        let found = search(
            problem.topology,
            problem.make,
            &sketch,
            limits.deadline,
            problem.progress,
            limits.extra_memory,
        )?;
        Ok(crate::engine::Found {
            algorithms: found.algorithms,
            complete: found.complete,
            cuts: found.cuts,
            notes: Vec::new(),
        })
    }
}
