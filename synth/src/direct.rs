//! Direct schedules of a collective whose reductions may end on many ranks (an allreduce, a
//! custom collective reducing onto several ranks): one schedule over partial sums, by the
//! direct SMT encoding ([`crate::smt::direct`]) or the direct greedy
//! ([`crate::greedy::direct`]), beside the phased ones (reduce-scatter + allgather, reduce +
//! spread) of [`crate::synthesize`]. Every algorithm is checked here.

use crate::algorithm::Algorithm;
use crate::bounds::Bounds;
use crate::engine::{Found, Limits, MakeCollective, Search};
use crate::progress::Progress;
use crate::smt::direct::{DirectSearcher, DIRECT_MAX_CHUNKS};
use crate::topology::Topology;
use anyhow::Result;
use num_rational::Ratio;

/// The largest fabric the direct SMT encoding is run on (its formula grows with ranks³ per
/// address and step).
pub const DIRECT_SMT_MAX_RANKS: usize = 8;

/// Which direct engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirectEngine {
    /// The direct SMT encoding (exact for its bounds: steps, rounds, chunks, time).
    Smt,
    /// The direct greedy schedule (any scale).
    Greedy,
}

impl DirectEngine {
    /// Its name in notes.
    pub fn name(self) -> &'static str {
        match self {
            DirectEngine::Smt => "direct SMT",
            DirectEngine::Greedy => "direct greedy",
        }
    }
}

/// Runs `engine` on the collective `make` builds (bounded below by `bounds`, valid for
/// every algorithm of it) on `topology`: one instance, least steps or a frontier (whose
/// search stops at R/C `target`).
#[allow(clippy::too_many_arguments)]
pub fn search(
    engine: DirectEngine,
    topology: &Topology,
    make: &MakeCollective,
    bounds: &Bounds,
    target: Ratio<u64>,
    search: Search,
    limits: &Limits,
    progress: &Progress,
) -> Result<Found> {
    let found = match engine {
        DirectEngine::Smt => {
            let searcher = DirectSearcher::new(topology, make, progress)?;
            match search {
                Search::Instance {
                    steps,
                    rounds,
                    chunks,
                } => Found {
                    algorithms: vec![searcher.instance(steps, rounds, chunks, limits.deadline)?],
                    complete: true,
                    cuts: Vec::new(),
                    notes: Vec::new(),
                },
                Search::LeastSteps { chunks, rounds } => {
                    searcher.least_steps(bounds, chunks, rounds, limits)?
                }
                Search::Pareto => searcher.pareto(bounds, target, limits)?,
            }
        }
        DirectEngine::Greedy => greedy(topology, make, search, limits)?,
    };
    for a in &found.algorithms {
        crate::check::check(a, topology)
            .map_err(|e| anyhow::anyhow!("internal error: {} fails the checker: {e}", a.name))?;
    }
    Ok(found)
}

/// The direct greedy schedule at the chunk counts `search` asks for (a frontier: 1, 2 and
/// 4 up to `limits.max_chunks`), kept where it fits the instance's steps and rounds.
fn greedy(
    topology: &Topology,
    make: &MakeCollective,
    search: Search,
    limits: &Limits,
) -> Result<Found> {
    // The chunk counts tried, and the most steps and rounds an answer may have.
    let (chunk_counts, most_steps, most_rounds) = match search {
        Search::Instance {
            steps,
            rounds,
            chunks,
        } => (vec![chunks], Some(steps), Some(rounds)),
        Search::LeastSteps { chunks, rounds } => (vec![chunks], None, rounds),
        Search::Pareto => (
            (0..)
                .map(|k| 1 << k)
                .take_while(|&c| c <= limits.max_chunks.clamp(1, DIRECT_MAX_CHUNKS))
                .collect(),
            None,
            None,
        ),
    };
    let fits = |a: &Algorithm| {
        most_steps.is_none_or(|s| a.num_steps() <= s)
            && most_rounds.is_none_or(|r| a.rounds() as usize <= r)
    };
    let mut algorithms = Vec::new();
    for c in chunk_counts {
        crate::engine::check_deadline(limits.deadline, || {
            format!("building the direct greedy schedule at {c} chunks")
        })?;
        let a = crate::greedy::direct::schedule(topology, &make(c)?)?;
        if fits(&a) {
            algorithms.push(a);
        }
    }
    let complete = !algorithms.is_empty();
    Ok(Found {
        algorithms: crate::frontier::frontier_with_twins(algorithms),
        complete,
        cuts: Vec::new(),
        notes: Vec::new(),
    })
}
