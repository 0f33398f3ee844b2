//! Exact synthesis with the SCCL-style k-synchronous SMT encoding (z3).

pub mod direct;
pub mod encoding;
pub mod race;
pub mod search;
pub mod symmetry;

pub use search::{Found, Limits, Searcher};

use crate::bounds::{lower_bounds, Bounds};
use crate::engine::{Engine, Problem, Search};
use anyhow::Result;

/// The exact SMT engine: SCCL's k-synchronous encoding solved by z3.
pub struct SmtEngine;

impl Engine for SmtEngine {
    fn name(&self) -> &'static str {
        "smt"
    }

    fn bounds(&self, problem: &Problem) -> Result<Bounds> {
        lower_bounds(problem.topology, &(problem.make)(1)?, problem.deadline)
    }

    fn search(&self, problem: &Problem, search: Search, limits: &Limits) -> Result<Found> {
        let bounds = self.bounds(problem)?;
        let searcher = Searcher::new(problem.topology, problem.make, problem.progress)?
            .with_extra_memory(limits.extra_memory);
        match search {
            Search::Instance {
                steps,
                rounds,
                chunks,
            } => Ok(Found {
                algorithms: searcher
                    .instance(steps, rounds, chunks, limits.deadline)?
                    .into_iter()
                    .collect(),
                complete: true,
                cuts: Vec::new(),
                notes: Vec::new(),
            }),
            Search::LeastSteps { chunks, rounds } => {
                searcher.least_steps(&bounds, chunks, rounds, limits)
            }
            Search::Pareto => searcher.pareto(&bounds, limits),
        }
    }
}
