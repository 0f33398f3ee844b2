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

/// The chunk cap of a search when the user gives none (`--max-chunks`).
pub const DEFAULT_MAX_CHUNKS: usize = 8;

/// Limits of a search.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Largest step count tried.
    pub max_steps: usize,
    /// Largest chunk count C tried.
    pub max_chunks: usize,
    /// Whether the user set `max_chunks` (`--max-chunks`). Schedules with their own
    /// default piece count (the rail ring) use it only then.
    pub max_chunks_given: bool,
    /// Wall-clock deadline for the whole search.
    pub deadline: Instant,
    /// SCCL's `--extra-memory M`: every rank may hold at most its postcondition's chunk
    /// count plus M chunks that it did not start with (`None`: no limit). Counted in the
    /// instance's chunks (pieces); only the SMT and MILP engines honour it.
    pub extra_memory: Option<usize>,
    /// Deterministic work budget per solver model (`None`: none): the MILP engine's
    /// branch-and-bound nodes per model (single-threaded and seeded, so the same input
    /// gives the same algorithm whatever the machine's load). Overrides a sketch's
    /// `work_limit`.
    pub work_limit: Option<u64>,
}

impl Limits {
    /// Caps `max_steps` and `max_chunks`, a deadline, and no work limit.
    pub fn new(max_steps: usize, max_chunks: usize, deadline: Instant) -> Limits {
        Limits {
            max_steps,
            max_chunks,
            max_chunks_given: false,
            deadline,
            work_limit: None,
            extra_memory: None,
        }
    }
}

/// The error of work that the deadline stopped: it names the phase, and the command line
/// turns it into "time limit of N s reached while <phase>".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimeLimitReached {
    /// What was running, e.g. "building the MILP model for C=64".
    pub phase: String,
}

impl std::fmt::Display for TimeLimitReached {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "time limit reached while {}", self.phase)
    }
}

impl std::error::Error for TimeLimitReached {}

/// Fails with [`TimeLimitReached`] (naming `phase()`) once `deadline` has passed.
pub fn check_deadline(deadline: Instant, phase: impl FnOnce() -> String) -> Result<()> {
    if Instant::now() >= deadline {
        return Err(TimeLimitReached { phase: phase() }.into());
    }
    Ok(())
}

/// The phase named by the [`TimeLimitReached`] in `error`'s chain, if the deadline stopped it.
pub fn time_limit_phase(error: &anyhow::Error) -> Option<&str> {
    error
        .chain()
        .find_map(|e| e.downcast_ref::<TimeLimitReached>())
        .map(|t| t.phase.as_str())
}

/// A limit that cut part of a search short (its result is valid but not proven best).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Cut {
    /// Which limit: `"work"` (the deterministic work limit) or `"time"` (wall clock).
    pub limit: &'static str,
    /// What it cut, e.g. "MILP model chunks=6 steps=3 at 1e9 bytes (an algorithm, not
    /// proven optimal)".
    pub what: String,
}

/// The answer of a search: the algorithms found and whether the search finished.
#[derive(Debug, Clone)]
pub struct Found {
    /// Checked algorithms (for Pareto: the frontier, by increasing steps).
    pub algorithms: Vec<Algorithm>,
    /// False when a cap or the deadline stopped the search early, or a solve was undecided.
    pub complete: bool,
    /// The solves a work or time limit cut short.
    pub cuts: Vec<Cut>,
    /// What was left out and why (a construction that failed), for the summary.
    pub notes: Vec<String>,
}

/// Which search to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Search {
    /// One instance (steps S, rounds R, chunks C).
    Instance {
        /// Steps S.
        steps: usize,
        /// Rounds R.
        rounds: usize,
        /// Chunks per rank C.
        chunks: usize,
    },
    /// The least steps at C chunks (and at most R rounds if given).
    LeastSteps {
        /// Chunks per rank C.
        chunks: usize,
        /// At most R rounds, where given.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_expired_deadline_names_its_phase() {
        let e = check_deadline(Instant::now(), || "building X".into()).unwrap_err();
        assert_eq!(time_limit_phase(&e), Some("building X"));
        assert_eq!(e.to_string(), "time limit reached while building X");
        let later = Instant::now() + std::time::Duration::from_secs(3600);
        assert!(check_deadline(later, || unreachable!()).is_ok());
        let other = anyhow::anyhow!("something else");
        assert_eq!(time_limit_phase(&other), None);
    }
}
