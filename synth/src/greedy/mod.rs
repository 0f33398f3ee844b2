//! The greedy engine (`--method greedy`): an event-driven, utilization-maximizing matching
//! of chunks to links over the time-expanded fabric, for every non-combining collective at
//! any scale (combining ones by duality in [`crate::synthesize`], allreduce as reduce-scatter
//! then allgather).
//!
//! * [`demand`]: which ranks still need each chunk, and how far the nearest holder is.
//! * [`schedule`]: one greedy run: one round per step, each link and switch constraint at
//!   most its capacity per step, sends chosen by priority (farthest needing rank first) along
//!   shortest paths, ties broken by a hash seeded with `--seed`.
//! * [`layout`]: the run as an [`Algorithm`] (one round per step) and levelled (a send in the
//!   step after its chunk reached the sender: fewest steps, more rounds).
//!
//! Randomized restarts run in parallel (rayon); the best run is the one with the fewest
//! steps, then the lowest restart index, so a seed gives the same algorithm whatever the
//! thread timing. Nothing is proven optimal: the bounds come from [`cut_bounds`].

pub mod demand;
pub mod layout;
pub mod schedule;

use crate::algorithm::Algorithm;
use crate::bounds::{cut_bounds, Bounds};
use crate::engine::{Engine, Found, Limits, Problem, Search};
use anyhow::{bail, Result};
use demand::{Demand, Distances};
use rayon::prelude::*;
use schedule::{mix, Fabric, Schedule, Stop};
use std::time::Instant;

/// The greedy engine with its seed.
pub struct GreedyEngine {
    /// Seeds the tie-breaks of every restart.
    pub seed: u64,
}

/// Sends (hop distances to cover) that all restarts together may spend: small problems get
/// up to [`MAX_RESTARTS`] restarts, a 1024-rank alltoall one.
const RESTART_WORK: u64 = 4_000_000;

/// Most restarts of one problem.
const MAX_RESTARTS: u64 = 8;

/// A Pareto search tries more than one chunk per original chunk only while the demand
/// (needing ranks over all chunks) stays within this.
const PARETO_DEMAND: usize = 1 << 14;

/// Most steps of a run when the search gives no step limit.
const MAX_GREEDY_STEPS: usize = 1 << 20;

/// What one chunk count gave: the algorithms and whether every restart finished.
struct Solved {
    algorithms: Vec<Algorithm>,
    complete: bool,
}

impl GreedyEngine {
    /// Restarts for a problem whose demand covers `distance` hops in all.
    fn restarts(distance: u64) -> u64 {
        (RESTART_WORK / distance.max(1)).clamp(1, MAX_RESTARTS)
    }

    /// Runs the restarts at `chunks` pieces per original chunk, at most `max_steps` steps.
    fn solve(
        &self,
        problem: &Problem,
        chunks: usize,
        max_steps: usize,
        deadline: Instant,
    ) -> Result<Solved> {
        let topology = problem.topology;
        let index = problem.index;
        let Some(caps) = index.capacities.as_ref() else {
            bail!(
                "the bandwidths of `{}` have no common unit, so the greedy engine cannot count rounds",
                topology.name
            );
        };
        let coll = (problem.make)(chunks)?;
        let fabric = Fabric {
            ranks: topology.ranks,
            src: topology.links.iter().map(|l| l.src).collect(),
            dst: topology.links.iter().map(|l| l.dst).collect(),
            out_links: &index.out_links,
            governing: &index.governing,
            link_cap: &caps.links,
            switch_cap: &caps.switches,
            dist: Distances::new(&index.distances),
        };
        let demand = Demand::new(&coll, &fabric.dist, &topology.name)?;
        let restarts = Self::restarts(demand.total_distance());
        problem.progress.message(&format!(
            "greedy: {} chunks, {restarts} restart(s) at C={chunks}",
            coll.chunks.len()
        ));
        let seed = self.seed;
        type Best = Option<(usize, u64, Schedule)>;
        let (best, stopped, stalled): (Best, bool, bool) = (0..restarts)
            .into_par_iter()
            .map(|r| {
                let salt = mix(seed ^ mix(r.wrapping_add(1)));
                let run = schedule::run(
                    &fabric,
                    demand.clone(),
                    &coll,
                    Some(salt),
                    max_steps,
                    deadline,
                );
                let stopped = matches!(run, Err(Stop::Deadline));
                let stalled = matches!(run, Err(Stop::Stalled));
                (run.ok().map(|s| (s.steps.len(), r, s)), stopped, stalled)
            })
            // The fewest steps, then the lowest restart index: independent of thread timing.
            .reduce(
                || (None, false, false),
                |a, b| {
                    let best = match (a.0, b.0) {
                        (Some(x), Some(y)) => Some(if (y.0, y.1) < (x.0, x.1) { y } else { x }),
                        (x, y) => x.or(y),
                    };
                    (best, a.1 || b.1, a.2 || b.2)
                },
            );
        if stalled {
            bail!(
                "internal error: the greedy engine stalled on `{}` with demand left",
                topology.name
            );
        }
        let complete = !stopped;
        let Some((_, _, schedule)) = best else {
            return Ok(Solved {
                algorithms: Vec::new(),
                complete,
            });
        };
        let name = format!("{}-{}", coll.kind, topology.name.replace([':', '/'], "_"));
        let mut algorithms = vec![
            layout::listed(&fabric, &coll, &schedule, &name),
            layout::levelled(&fabric, &coll, &schedule, &name),
        ];
        for a in &mut algorithms {
            a.topology = topology.name.clone();
        }
        Ok(Solved {
            algorithms,
            complete,
        })
    }
}

impl Engine for GreedyEngine {
    fn name(&self) -> &'static str {
        "greedy"
    }

    fn bounds(&self, problem: &Problem) -> Result<Bounds> {
        cut_bounds(problem.topology, &(problem.make)(1)?)
    }

    fn search(&self, problem: &Problem, search: Search, limits: &Limits) -> Result<Found> {
        let deadline = limits.deadline.min(problem.deadline);
        let (tries, max_steps, rounds): (Vec<usize>, usize, Option<usize>) = match search {
            Search::Instance {
                steps,
                rounds,
                chunks,
            } => (vec![chunks], steps, Some(rounds)),
            Search::LeastSteps { chunks, rounds } => (vec![chunks], MAX_GREEDY_STEPS, rounds),
            Search::Pareto => {
                let demand = (problem.make)(1)?
                    .chunks
                    .iter()
                    .map(|c| c.post.len())
                    .sum::<usize>()
                    .max(1);
                let most = (PARETO_DEMAND / demand).clamp(1, limits.max_chunks.max(1));
                ((1..=most).collect(), MAX_GREEDY_STEPS, None)
            }
        };
        let mut all = Vec::new();
        let mut complete = true;
        for chunks in tries {
            let solved = self.solve(problem, chunks, max_steps, deadline)?;
            complete &= solved.complete;
            all.extend(solved.algorithms);
            if Instant::now() >= deadline {
                complete = false;
                break;
            }
        }
        let all: Vec<Algorithm> = all
            .into_iter()
            .filter(|a| rounds.is_none_or(|r| a.rounds() as usize <= r))
            .filter(|a| a.num_steps() <= max_steps)
            .collect();
        let mut algorithms = crate::synthesize::pareto_filter(all);
        match search {
            Search::Pareto => {}
            // One algorithm: the fewest steps within the rounds asked for.
            _ => algorithms.truncate(1),
        }
        // A greedy run proves nothing: an empty answer to an instance is not UNSAT.
        if algorithms.is_empty() {
            complete = false;
        }
        Ok(Found {
            algorithms,
            complete,
            cuts: Vec::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::check;
    use crate::collective::{Chunk, Collective, Kind};
    use crate::progress::Progress;
    use crate::synthesize::{synthesize_with, Method, Request};
    use crate::topology;
    use std::time::Duration;

    fn limits(max_chunks: usize) -> Limits {
        Limits {
            max_steps: 16,
            max_chunks,
            // Far beyond what these fabrics need: the outcome never depends on it.
            deadline: Instant::now() + Duration::from_secs(3600),
            extra_memory: None,
            work_limit: None,
        }
    }

    /// The engine's own answer (before any dual) on `spec`.
    fn search(spec: &str, coll: Collective, search: Search, seed: u64) -> Found {
        let topology = topology::load(spec).unwrap();
        let index = topology.index();
        let progress = Progress::hidden();
        let make = move |c: usize| crate::synthesize::resplit(&coll, c);
        let l = limits(4);
        let problem = Problem {
            topology: &topology,
            index: &index,
            make: &make,
            progress: &progress,
            deadline: l.deadline,
        };
        let found = GreedyEngine { seed }.search(&problem, search, &l).unwrap();
        for a in &found.algorithms {
            check(a, &topology).unwrap_or_else(|e| panic!("{}: {e}", a.name));
        }
        found
    }

    #[test]
    fn every_non_combining_collective_on_small_fabrics_passes_the_checker() {
        for spec in ["ring:4", "line:3", "dgx1", "torus-2d:4x4", "dgx-a100"] {
            let n = topology::load(spec).unwrap().ranks;
            for kind in [
                Kind::AllToAll,
                Kind::AllGather,
                Kind::Broadcast,
                Kind::Gather,
                Kind::Scatter,
            ] {
                let coll = Collective::new(kind, n, 1, 1).unwrap();
                let found = search(spec, coll, Search::Pareto, 0);
                assert!(found.complete, "{spec} {kind}");
                assert!(!found.algorithms.is_empty(), "{spec} {kind}");
                // One round per step, or levelled: never fewer steps than hops needed.
                for a in &found.algorithms {
                    assert!(a.num_steps() >= 1);
                    assert!(a.rounds() as usize >= a.num_steps());
                }
            }
        }
    }

    #[test]
    fn ring_allgather_is_optimal() {
        // Each rank forwards one chunk per step around both directions: ceil(3/2) = 2 steps.
        let found = search(
            "ring:4",
            Collective::new(Kind::AllGather, 4, 0, 1).unwrap(),
            Search::LeastSteps {
                chunks: 1,
                rounds: None,
            },
            0,
        );
        assert_eq!(found.algorithms.len(), 1);
        assert_eq!(found.algorithms[0].num_steps(), 2);
        assert_eq!(found.algorithms[0].rounds(), 2);
    }

    #[test]
    fn instance_respects_the_step_limit() {
        let coll = || Collective::new(Kind::AllToAll, 16, 0, 1).unwrap();
        let found = search(
            "torus-2d:4x4",
            coll(),
            Search::Instance {
                steps: 40,
                rounds: 100,
                chunks: 1,
            },
            0,
        );
        assert_eq!(found.algorithms.len(), 1);
        assert!(found.algorithms[0].num_steps() <= 40);
        // Too few steps: nothing, and not claimed impossible.
        let found = search(
            "torus-2d:4x4",
            coll(),
            Search::Instance {
                steps: 2,
                rounds: 100,
                chunks: 1,
            },
            0,
        );
        assert!(found.algorithms.is_empty());
        assert!(!found.complete);
    }

    #[test]
    fn same_seed_same_algorithm() {
        let run = |seed| {
            search(
                "torus-2d:4x4",
                Collective::new(Kind::AllToAll, 16, 0, 1).unwrap(),
                Search::Pareto,
                seed,
            )
            .algorithms
        };
        let a = run(7);
        assert_eq!(a, run(7));
        // The seed reaches the tie-breaks (compared on the full schedules).
        let differs = (0..4u64).any(|s| run(100 + s) != a);
        assert!(differs, "seeds never change the schedule");
    }

    #[test]
    fn custom_collective_with_several_sources() {
        // Chunk 0 starts on ranks 0 and 2 and must reach 1 and 3; chunk 1 goes 3 -> 0.
        let coll = Collective {
            kind: Kind::Custom,
            ranks: 4,
            root: 0,
            chunks_per_rank: 1,
            chunks: vec![
                Chunk {
                    pre: vec![0, 2],
                    post: vec![1, 3],
                    address: 0,
                },
                Chunk {
                    pre: vec![3],
                    post: vec![0],
                    address: 1,
                },
            ],
        };
        let found = search("ring:4", coll, Search::Pareto, 0);
        let best = &found.algorithms[0];
        assert_eq!(best.num_steps(), 1, "every demand is one hop from a source");
    }

    #[test]
    fn combining_collectives_and_allreduce_via_synthesize() {
        let topology = topology::load("torus-2d:4x4").unwrap();
        let progress = Progress::hidden();
        for kind in [Kind::ReduceScatter, Kind::Reduce, Kind::AllReduce] {
            let request = Request {
                topology: &topology,
                collective: Collective::new(kind, 16, 3, 1).unwrap(),
                search: Search::LeastSteps {
                    chunks: 1,
                    rounds: None,
                },
                limits: limits(1),
                progress: &progress,
            };
            let s = synthesize_with(&request, Method::Greedy { seed: 1 }, None).unwrap();
            assert!(!s.algorithms.is_empty(), "{kind}");
            assert_eq!(s.method, Method::Greedy { seed: 1 });
            for a in &s.algorithms {
                assert_eq!(a.collective.kind, kind);
                check(a, &topology).unwrap();
            }
        }
    }

    #[test]
    fn deadline_in_the_past_returns_incomplete() {
        let topology = topology::load("torus-2d:4x4").unwrap();
        let index = topology.index();
        let progress = Progress::hidden();
        let make = |c: usize| Collective::new(Kind::AllToAll, 16, 0, c);
        let mut l = limits(1);
        l.deadline = Instant::now();
        let problem = Problem {
            topology: &topology,
            index: &index,
            make: &make,
            progress: &progress,
            deadline: l.deadline,
        };
        let found = GreedyEngine { seed: 0 }
            .search(&problem, Search::Pareto, &l)
            .unwrap();
        assert!(!found.complete);
        assert!(found.algorithms.is_empty());
    }
}
