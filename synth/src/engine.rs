//! The engine boundary: every synthesis engine (SMT, MILP, tree packing) takes the same
//! [`Problem`] (a non-combining collective on a fabric, a search and its limits) and returns
//! the same [`Found`] (algorithms for that problem and whether the search finished), plus
//! its [`Bounds`]. [`crate::synthesize`] turns user requests into problems (duals of
//! combining collectives on the reversed fabric, allreduce as two phases) and checks every
//! algorithm; engines never see combining collectives.

use crate::algorithm::Algorithm;
use crate::bounds::Bounds;
use crate::collective::Collective;
use crate::progress::Progress;
use crate::topology::{Topology, TopologyIndex};
use anyhow::Result;
use std::time::Instant;

/// Builds the (non-combining) collective split into C pieces.
pub type MakeCollective<'a> = dyn Fn(usize) -> Result<Collective> + Sync + 'a;

/// Limits of a search.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Largest step count tried.
    pub max_steps: usize,
    /// Largest chunk count C tried.
    pub max_chunks: usize,
    /// Wall-clock deadline for the whole search.
    pub deadline: Instant,
    /// SCCL's `--extra-memory M`: every rank may hold at most its postcondition's chunk
    /// count plus M chunks that it did not start with (`None`: no limit). Counted in the
    /// instance's chunks (pieces); only the SMT and MILP engines honour it.
    pub extra_memory: Option<usize>,
}

/// The answer of a search: the algorithms found and whether the search finished.
#[derive(Debug, Clone)]
pub struct Found {
    /// Checked algorithms (for Pareto: the frontier, by increasing steps).
    pub algorithms: Vec<Algorithm>,
    /// False when a cap or the deadline stopped the search early, or a solve was undecided.
    pub complete: bool,
}

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

/// One problem as an engine sees it.
pub struct Problem<'a> {
    /// The fabric to solve on (already reversed for the dual of a combining collective).
    pub topology: &'a Topology,
    /// Link ids, distances and capacities of `topology`, computed once.
    pub index: &'a TopologyIndex,
    /// The non-combining collective at C pieces.
    pub make: &'a MakeCollective<'a>,
    /// Progress display.
    pub progress: &'a Progress,
    /// When bounds and searches must stop.
    pub deadline: Instant,
}

/// A synthesis engine.
pub trait Engine: Sync {
    /// Short name used in reports and file names (`smt`, `milp`, `trees`).
    fn name(&self) -> &'static str;

    /// Lower bounds (steps, rounds per chunk) for the problem, valid for every algorithm.
    fn bounds(&self, problem: &Problem) -> Result<Bounds>;

    /// Runs `search` within `limits`; the algorithms are for `problem.make`'s collective on
    /// `problem.topology` (the caller checks them again after undoing any dual).
    fn search(&self, problem: &Problem, search: Search, limits: &Limits) -> Result<Found>;
}
