//! The one boundary between problems and encodings: a request (topology, collective,
//! search) in, checked algorithms out. Combining collectives are solved as their
//! non-combining dual on the reversed topology; allreduce is reduce-scatter followed by
//! allgather on explicit buffers (n·C addresses per rank), composed here.

use crate::algorithm::Algorithm;
use crate::bounds::{lower_bounds, Bounds};
use crate::check::check;
use crate::collective::{Collective, Kind};
use crate::milp;
use crate::progress::Progress;
use crate::sketch::Sketch;
use crate::smt::{Found, Limits, Searcher};
use crate::topology::Topology;
use anyhow::{bail, Context, Result};
use num_rational::Ratio;
use serde::Serialize;

/// Which search to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Search {
    /// One instance (steps S, rounds R, chunks C).
    Instance {
        steps: usize,
        rounds: usize,
        chunks: usize,
    },
    /// The least steps at C chunks (and at most R rounds if given).
    LeastSteps {
        chunks: usize,
        rounds: Option<usize>,
    },
    /// The Pareto frontier over (steps, rounds per chunk).
    Pareto,
}

/// Which encoding solves a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// The exact SMT encoding (integer capacities, small single nodes).
    Smt,
    /// The MILP encoding with per-link alpha/beta costs and an optional sketch.
    Milp,
    /// SMT for one node of at most [`AUTO_SMT_MAX_RANKS`] ranks with integer capacities and no
    /// sketch; MILP otherwise.
    Auto,
}

/// The largest single node `Method::Auto` gives to the SMT encoding.
pub const AUTO_SMT_MAX_RANKS: usize = 8;

impl Method {
    /// Resolves `Auto` for `topology` (and whether a sketch was given).
    pub fn resolve(self, topology: &Topology, sketched: bool) -> Method {
        match self {
            Method::Auto
                if !sketched
                    && topology.nodes() <= 1
                    && topology.ranks <= AUTO_SMT_MAX_RANKS
                    && topology.capacities().is_ok() =>
            {
                Method::Smt
            }
            Method::Auto => Method::Milp,
            m => m,
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
    /// The encoding that produced them (`Smt` or `Milp`).
    pub method: Method,
}

/// How a collective is solved: directly, or as the dual on the reversed topology.
struct Plan<'a> {
    topology: Topology,
    make: Box<dyn Fn(usize) -> Result<Collective> + Sync + 'a>,
    original: Box<dyn Fn(usize) -> Result<Collective> + Sync + 'a>,
    dual: bool,
    /// `Some` for the MILP encoding: the sketch, already reversed for duals.
    milp: Option<Sketch>,
}

impl<'a> Plan<'a> {
    fn new(topology: &Topology, base: &'a Collective, milp: Option<&Sketch>) -> Result<Plan<'a>> {
        let original = move |c: usize| resplit(base, c);
        if base.dual()?.is_some() {
            Ok(Plan {
                topology: topology.reversed(),
                make: Box::new(move |c| Ok(resplit(base, c)?.dual()?.expect("combining"))),
                original: Box::new(original),
                dual: true,
                milp: milp.map(Sketch::reversed),
            })
        } else {
            Ok(Plan {
                topology: topology.clone(),
                make: Box::new(original),
                original: Box::new(original),
                dual: false,
                milp: milp.cloned(),
            })
        }
    }

    fn bounds(&self) -> Result<Bounds> {
        if self.milp.is_some() {
            return crate::bounds::cut_bounds(&self.topology, &(self.make)(1)?);
        }
        lower_bounds(&self.topology, &(self.make)(1)?)
    }

    /// Turns an algorithm of the solved problem into one for the requested collective.
    fn finish(&self, found: Algorithm, topology: &Topology) -> Result<Algorithm> {
        let algorithm = if self.dual {
            let c = found.chunks();
            let mut a = found.reversed((self.original)(c)?, true);
            a.name = a.name.replacen(
                &found.collective.kind.to_string(),
                &a.collective.kind.to_string(),
                1,
            );
            a
        } else {
            found
        };
        check(&algorithm, topology)
            .with_context(|| format!("internal error: {} fails the checker", algorithm.name))?;
        Ok(algorithm)
    }

    fn run(
        &self,
        search: Search,
        limits: &Limits,
        progress: &Progress,
        topology: &Topology,
    ) -> Result<(Bounds, Found)> {
        if let Some(sketch) = &self.milp {
            let bounds = self.bounds()?;
            let sketch = milp_sketch(sketch, search);
            let found = milp::search(
                &self.topology,
                self.make.as_ref(),
                &sketch,
                limits.deadline,
                progress,
            )?;
            let algorithms = found
                .algorithms
                .into_iter()
                .map(|a| self.finish(a, topology))
                .collect::<Result<_>>()?;
            return Ok((
                bounds,
                Found {
                    algorithms,
                    complete: found.complete,
                },
            ));
        }
        let bounds = self.bounds()?;
        let searcher = Searcher::new(&self.topology, self.make.as_ref(), progress)?;
        let mut found = match search {
            Search::Instance {
                steps,
                rounds,
                chunks,
            } => Found {
                algorithms: searcher
                    .instance(steps, rounds, chunks, limits.deadline)?
                    .into_iter()
                    .collect(),
                complete: true,
            },
            Search::LeastSteps { chunks, rounds } => {
                searcher.least_steps(&bounds, chunks, rounds, limits)?
            }
            Search::Pareto => searcher.pareto(&bounds, limits)?,
        };
        found.algorithms = found
            .algorithms
            .into_iter()
            .map(|a| self.finish(a, topology))
            .collect::<Result<_>>()?;
        Ok((bounds, found))
    }
}

/// The sketch a MILP search runs under: explicit `--chunks`/`--steps` override its own.
fn milp_sketch(sketch: &Sketch, search: Search) -> Sketch {
    let mut sketch = sketch.clone();
    match search {
        Search::Instance { steps, chunks, .. } => {
            sketch.chunks = vec![chunks];
            sketch.steps = (steps, Some(steps));
        }
        Search::LeastSteps { chunks, .. } => sketch.chunks = vec![chunks],
        Search::Pareto => {}
    }
    sketch
}

/// Re-splits a C = 1 collective into C pieces.
fn resplit(base: &Collective, c: usize) -> Result<Collective> {
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
    let method = method.resolve(req.topology, sketch.is_some());
    let default = Sketch::default();
    let milp = (method == Method::Milp).then(|| sketch.unwrap_or(&default));
    if req.collective.ranks != req.topology.ranks {
        bail!(
            "the collective has {} ranks but topology `{}` has {}",
            req.collective.ranks,
            req.topology.name,
            req.topology.ranks
        );
    }
    if req.collective.kind == Kind::AllReduce {
        return allreduce(req, milp);
    }
    let plan = Plan::new(req.topology, &req.collective, milp)?;
    let (bounds, found) = plan.run(req.search, &req.limits, req.progress, req.topology)?;
    Ok(Synthesis {
        bounds: BoundsReport {
            steps: bounds.steps,
            rounds_per_chunk: bounds.rounds_per_chunk.to_string(),
        },
        algorithms: found.algorithms,
        complete: found.complete,
        method,
    })
}

/// Allreduce = reduce-scatter then allgather over n·C addresses.
fn allreduce(req: &Request, milp: Option<&Sketch>) -> Result<Synthesis> {
    let n = req.topology.ranks;
    let rs_base = Collective::new(Kind::ReduceScatter, n, 0, 1)?;
    let ag_base = Collective::new(Kind::AllGather, n, 0, 1)?;
    let rs = Plan::new(req.topology, &rs_base, milp)?;
    let ag = Plan::new(req.topology, &ag_base, milp)?;
    let (rs_bounds, ag_bounds) = (rs.bounds()?, ag.bounds()?);
    let bounds = BoundsReport {
        steps: rs_bounds.steps + ag_bounds.steps,
        rounds_per_chunk: (rs_bounds.rounds_per_chunk + ag_bounds.rounds_per_chunk).to_string(),
    };
    let (algorithms, complete) = match req.search {
        Search::Instance {
            steps,
            rounds,
            chunks,
        } => (
            allreduce_instance(req, &rs, &ag, steps, rounds, chunks)?
                .into_iter()
                .collect(),
            true,
        ),
        Search::LeastSteps { chunks, rounds } => {
            let half = Search::LeastSteps {
                chunks,
                rounds: None,
            };
            let (_, a) = rs.run(half, &req.limits, req.progress, req.topology)?;
            let (_, b) = ag.run(half, &req.limits, req.progress, req.topology)?;
            let composed: Vec<Algorithm> = a
                .algorithms
                .iter()
                .zip(&b.algorithms)
                .map(|(x, y)| compose(x, y, req.topology))
                .collect::<Result<_>>()?;
            let composed = composed
                .into_iter()
                .filter(|c| rounds.is_none_or(|r| c.rounds() as usize <= r))
                .collect();
            (composed, a.complete && b.complete)
        }
        Search::Pareto => {
            let (_, a) = rs.run(Search::Pareto, &req.limits, req.progress, req.topology)?;
            let (_, b) = ag.run(Search::Pareto, &req.limits, req.progress, req.topology)?;
            let mut all = Vec::new();
            for x in &a.algorithms {
                for y in &b.algorithms {
                    all.push(compose(x, y, req.topology)?);
                }
            }
            let kept = match milp {
                Some(sketch) => milp::pareto_by_time(all, req.topology, &sketch.sizes).0,
                None => pareto_filter(all),
            };
            (kept, a.complete && b.complete)
        }
    };
    let method = if milp.is_some() {
        Method::Milp
    } else {
        Method::Smt
    };
    Ok(Synthesis {
        bounds,
        algorithms,
        complete,
        method,
    })
}

/// Allreduce with exactly S steps and at most R rounds at C chunks: tries every split of
/// the steps; the reduce-scatter phase takes the least rounds it can, leaving the most to
/// the allgather phase (which makes the split search complete).
fn allreduce_instance(
    req: &Request,
    rs: &Plan,
    ag: &Plan,
    steps: usize,
    rounds: usize,
    chunks: usize,
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
        if let Some(y) = b.algorithms.first() {
            return Ok(Some(compose(&x, y, req.topology)?));
        }
    }
    Ok(None)
}

/// Reduce-scatter `rs` followed by allgather `ag` as one allreduce on n·C addresses, at the
/// least common chunk count (an algorithm at C chunks runs at k·C chunks with k× the rounds).
fn compose(rs: &Algorithm, ag: &Algorithm, topology: &Topology) -> Result<Algorithm> {
    let c = num_integer_lcm(rs.chunks(), ag.chunks());
    let (x, y) = (rs.refined(c), ag.refined(c));
    let collective = Collective::new(Kind::AllReduce, topology.ranks, 0, c)?;
    let steps = x.steps.into_iter().chain(y.steps).collect::<Vec<_>>();
    let rounds: u32 = steps.iter().map(|s| s.rounds).sum();
    let algorithm = Algorithm {
        name: format!(
            "allreduce-{}-s{}-r{}-c{}",
            topology.name.replace([':', '/'], "_"),
            steps.len(),
            rounds,
            c
        ),
        topology: topology.name.clone(),
        collective,
        steps,
    };
    check(&algorithm, topology).with_context(|| {
        format!(
            "internal error: composed {} fails the checker",
            algorithm.name
        )
    })?;
    Ok(algorithm)
}

fn num_integer_lcm(a: usize, b: usize) -> usize {
    let gcd = |mut a: usize, mut b: usize| {
        while b != 0 {
            (a, b) = (b, a % b);
        }
        a
    };
    a / gcd(a, b) * b
}

/// Keeps the algorithms not dominated in (steps, rounds per chunk), by increasing steps.
pub fn pareto_filter(mut all: Vec<Algorithm>) -> Vec<Algorithm> {
    all.sort_by_key(|a| (a.num_steps(), a.rounds_per_chunk(), a.chunks()));
    let mut kept: Vec<Algorithm> = Vec::new();
    let mut best: Option<Ratio<u64>> = None;
    for a in all {
        if best.is_none_or(|b| a.rounds_per_chunk() < b) {
            best = Some(a.rounds_per_chunk());
            kept.push(a);
        }
    }
    kept
}
