//! The greedy engine (`--method greedy`): an event-driven, utilization-maximizing matching
//! of chunks to links over the time-expanded fabric, for every non-combining collective at
//! any scale (combining ones by duality in [`crate::synthesize`], allreduce as reduce-scatter
//! then allgather).
//!
//! * [`delays`]: each link's alpha as a delay in epochs, and distances weighted by them.
//! * [`demand`]: which ranks still need each chunk, and how far the nearest holder is.
//! * [`schedule`]: one greedy run: one round per epoch, each link and switch constraint at
//!   most its capacity per epoch, a send on link l forwarded `delay[l]` epochs later, sends
//!   chosen by priority (farthest needing rank first) along shortest paths, ties broken by a
//!   hash seeded with `--seed`.
//! * [`layout`]: the run as an [`Algorithm`] (one round per step) and levelled (a send in the
//!   step after its chunk reached the sender: fewest steps, more rounds).
//! * [`latency`]: a laid-out run's latency under per-link alpha (a replay of its sends).
//!
//! Every chunk count runs in two models of time. [`Model::Hops`]: every delay 1 (hop
//! distances), as if every link had the same alpha. [`Model::Delays`], on fabrics whose
//! links differ in alpha (a NIC beside NVLink): per-link delays, and each link with at most
//! the runtime's FIFO depth of messages in flight, as small messages see it. The hop model's
//! algorithms are kept as its Pareto frontier over (steps, rounds per chunk); the delay
//! model's where no kept algorithm is at least as good in both rounds per chunk and
//! [`latency::latency_us`]: the simulator then picks per size among all of them.
//!
//! Randomized restarts run in parallel (rayon); the best run of a model is the one that
//! finishes in the fewest epochs, then with the fewest steps, then the lowest restart index,
//! so a seed gives the same algorithm whatever the thread timing. Nothing is proven optimal:
//! the bounds come from [`cut_bounds`].

pub mod delays;
pub mod demand;
pub mod direct;
pub mod latency;
pub mod layout;
pub mod schedule;

use crate::algorithm::Algorithm;
use crate::bounds::{cut_bounds, Bounds};
use crate::collective::Collective;
use crate::engine::{Engine, Found, Limits, Problem, Search};
use crate::origin::{Family, GreedyModel};
use crate::topology::{Capacities, Topology, TopologyIndex};
use anyhow::{bail, Result};
use delays::Delays;
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

/// How a greedy run sees time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Model {
    /// Every link forwards after one epoch: hop distances, as if all alphas were equal.
    Hops,
    /// Each link forwards after its alpha in epochs ([`Delays`]) and holds at most the
    /// runtime's FIFO depth of messages in flight.
    Delays,
}

/// An algorithm with the model that made it and its latency under per-link alpha (`None`
/// where every link has the same delay, so only the hop model runs and nothing compares).
struct Candidate {
    model: Model,
    latency_us: Option<f64>,
    algorithm: Algorithm,
}

/// What one chunk count gave: the candidates and whether every restart finished.
struct Solved {
    candidates: Vec<Candidate>,
    complete: bool,
}

/// The best run of one model, and whether a restart hit the deadline or stalled.
struct Runs {
    best: Option<Schedule>,
    stopped: bool,
    stalled: bool,
}

impl GreedyEngine {
    /// Restarts for a problem whose demand covers `distance` hops in all.
    fn restarts(distance: u64) -> u64 {
        (RESTART_WORK / distance.max(1)).clamp(1, MAX_RESTARTS)
    }

    /// Runs `restarts` seeded restarts on `fabric`; the best finishes in the fewest epochs,
    /// then with the fewest steps, then has the lowest restart index.
    fn runs(
        &self,
        fabric: &Fabric,
        coll: &Collective,
        demand: &Demand,
        restarts: u64,
        max_steps: usize,
        deadline: Instant,
    ) -> Runs {
        type Best = Option<((usize, usize, u64), Schedule)>;
        let seed = self.seed;
        let (best, stopped, stalled): (Best, bool, bool) = (0..restarts)
            .into_par_iter()
            .map(|r| {
                let salt = mix(seed ^ mix(r.wrapping_add(1)));
                let run = schedule::run(
                    fabric,
                    demand.clone(),
                    coll,
                    Some(salt),
                    max_steps,
                    deadline,
                );
                let stopped = matches!(run, Err(Stop::Deadline));
                let stalled = matches!(run, Err(Stop::Stalled));
                (
                    run.ok().map(|s| ((s.makespan, s.busy_epochs(), r), s)),
                    stopped,
                    stalled,
                )
            })
            // Independent of thread timing: the key ends with the restart index.
            .reduce(
                || (None, false, false),
                |a, b| {
                    let best = match (a.0, b.0) {
                        (Some(x), Some(y)) => Some(if y.0 < x.0 { y } else { x }),
                        (x, y) => x.or(y),
                    };
                    (best, a.1 || b.1, a.2 || b.2)
                },
            );
        Runs {
            best: best.map(|(_, s)| s),
            stopped,
            stalled,
        }
    }

    /// Runs both models' restarts at `chunks` pieces per original chunk, at most
    /// `max_steps` steps (the delay model only where the links' delays differ).
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
        let alpha: Vec<f64> = topology.links.iter().map(|l| l.alpha).collect();
        let delays = Delays::from_alphas(&alpha);
        let hops = fabric(topology, index, caps, Model::Hops, &delays);
        let demand = Demand::new(&coll, &hops.dist, &topology.name)?;
        let restarts = Self::restarts(demand.total_distance());
        let timed = !delays.is_uniform();
        problem.progress.message(&format!(
            "greedy: {} chunks, {restarts} restart(s) at C={chunks}{}",
            coll.chunks.len(),
            if timed {
                format!(
                    ", hop and delay models (epoch {} us, delays up to {})",
                    delays.epoch_us,
                    delays.max()
                )
            } else {
                String::new()
            }
        ));
        let mut models = vec![(Model::Hops, hops, demand)];
        if timed {
            let fabric = fabric(topology, index, caps, Model::Delays, &delays);
            let demand = Demand::new(&coll, &fabric.dist, &topology.name)?;
            models.push((Model::Delays, fabric, demand));
        }
        let mut candidates = Vec::new();
        let mut complete = true;
        for (model, fabric, demand) in &models {
            let runs = self.runs(fabric, &coll, demand, restarts, max_steps, deadline);
            if runs.stalled {
                bail!(
                    "internal error: the greedy engine stalled on `{}` with demand left",
                    topology.name
                );
            }
            complete &= !runs.stopped;
            let Some(schedule) = runs.best else { continue };
            let layouts = Layouts {
                fabric,
                coll: &coll,
                alpha: &alpha,
                timed,
                topology: &topology.name,
            };
            candidates.extend(layouts.candidates(*model, &schedule));
        }
        Ok(Solved {
            candidates,
            complete,
        })
    }
}

/// What turning a greedy schedule into candidates needs.
struct Layouts<'l, 'a> {
    fabric: &'l Fabric<'a>,
    coll: &'l Collective,
    /// Each link's latency (µs).
    alpha: &'l [f64],
    /// Whether the links' delays differ (then each candidate gets its latency).
    timed: bool,
    /// The topology's name.
    topology: &'l str,
}

impl Layouts<'_, '_> {
    /// The schedule of `model` as it ran and levelled.
    fn candidates(&self, model: Model, schedule: &Schedule) -> Vec<Candidate> {
        let fabric = self.fabric;
        let listed = layout::listed(schedule);
        let levelled = layout::levelled(fabric, schedule);
        let family = |levelled| Family::Greedy {
            model: match model {
                Model::Hops => GreedyModel::Hops,
                Model::Delays => GreedyModel::Delays,
            },
            levelled,
        };
        let topology = self.topology;
        let layouts = [
            (
                layout::algorithm(fabric, self.coll, listed.clone(), family(false), topology),
                (self.timed).then(|| latency::latency_us(fabric, self.alpha, listed)),
            ),
            (
                layout::algorithm(fabric, self.coll, &levelled, family(true), topology),
                (self.timed).then(|| latency::latency_us(fabric, self.alpha, &levelled)),
            ),
        ];
        layouts
            .into_iter()
            .map(|(algorithm, latency_us)| Candidate {
                model,
                latency_us,
                algorithm,
            })
            .collect()
    }
}

/// The fabric as `model` sees it: every delay 1 and hop distances, or `delays` with the
/// distances they weigh and at most the runtime's FIFO depth of messages in flight per link.
fn fabric<'a>(
    topology: &Topology,
    index: &'a TopologyIndex,
    caps: &'a Capacities,
    model: Model,
    delays: &Delays,
) -> Fabric<'a> {
    let src: Vec<usize> = topology.links.iter().map(|l| l.src).collect();
    let dst: Vec<usize> = topology.links.iter().map(|l| l.dst).collect();
    let (delay, dist, fifo) = match model {
        Model::Hops => (vec![1; src.len()], Distances::new(&index.distances), 0),
        Model::Delays => (
            delays.link.clone(),
            delays.distances(topology.ranks, &src, &dst),
            runtime::verify::DEFAULT_FIFO_DEPTH,
        ),
    };
    Fabric {
        ranks: topology.ranks,
        src,
        dst,
        out_links: &index.out_links,
        governing: &index.governing,
        link_cap: &caps.links,
        switch_cap: &caps.switches,
        delay,
        dist,
        fifo,
    }
}

/// The chunk counts to try, the most steps and the most rounds (if bounded) of `search`.
fn plan(
    problem: &Problem,
    search: Search,
    limits: &Limits,
) -> Result<(Vec<usize>, usize, Option<usize>)> {
    Ok(match search {
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
    })
}

/// The candidates `search` answers with, of the hop model's (`hops`) and the delay
/// model's (`timed`).
fn select(hops: Vec<Candidate>, timed: Vec<Candidate>, search: Search) -> Vec<Candidate> {
    // The hop model's frontier, by increasing steps (its latency proxy).
    let mut kept = pareto_candidates(hops);
    match search {
        Search::Pareto => kept = add_timed(kept, timed),
        // One algorithm: the fewest steps within the rounds asked for.
        Search::Instance { .. } => {
            kept.extend(pareto_candidates(timed));
            kept.sort_by_key(|c| {
                (
                    c.algorithm.num_steps(),
                    c.algorithm.rounds_per_chunk(),
                    c.model == Model::Delays,
                )
            });
            kept.truncate(1);
        }
        // The fewest steps, and the delay model's lowest latency where it is lower.
        Search::LeastSteps { .. } => {
            kept.truncate(1);
            let fastest = timed.into_iter().min_by(|a, b| {
                let t = |c: &Candidate| c.latency_us.unwrap_or(f64::INFINITY);
                t(a).total_cmp(&t(b))
            });
            if let Some(c) = fastest {
                let t = c.latency_us.unwrap_or(f64::INFINITY);
                if kept
                    .iter()
                    .all(|k| t < k.latency_us.unwrap_or(f64::INFINITY))
                {
                    kept.push(c);
                }
            }
        }
    }
    kept
}

/// Keeps the delay model's candidates that no kept candidate matches or beats in both
/// rounds per chunk and latency (nor makes the same sends), and puts them after `kept`.
fn add_timed(mut kept: Vec<Candidate>, timed: Vec<Candidate>) -> Vec<Candidate> {
    let key = |c: &Candidate| {
        (
            c.algorithm.rounds_per_chunk(),
            c.latency_us.unwrap_or(f64::INFINITY),
        )
    };
    let mut timed = timed;
    // Lowest latency first, so a kept one can only be beaten by one kept before it.
    timed.sort_by(|a, b| {
        key(a)
            .1
            .total_cmp(&key(b).1)
            .then(key(a).0.cmp(&key(b).0))
            .then(a.algorithm.num_steps().cmp(&b.algorithm.num_steps()))
    });
    crate::frontier::extend_undominated(&mut kept, timed, |k, c| {
        let ((kr, kt), (r, t)) = (key(k), key(c));
        (kr <= r && kt <= t) || k.algorithm.steps == c.algorithm.steps
    });
    kept
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
        let (tries, max_steps, rounds) = plan(problem, search, limits)?;
        let mut all = Vec::new();
        let mut complete = true;
        for chunks in tries {
            let solved = self.solve(problem, chunks, max_steps, deadline)?;
            complete &= solved.complete;
            all.extend(solved.candidates);
            if Instant::now() >= deadline {
                complete = false;
                break;
            }
        }
        let (hops, timed): (Vec<Candidate>, Vec<Candidate>) = all
            .into_iter()
            .filter(|c| rounds.is_none_or(|r| c.algorithm.rounds() as usize <= r))
            .filter(|c| c.algorithm.num_steps() <= max_steps)
            .partition(|c| c.model == Model::Hops);
        let kept = select(hops, timed, search);
        let algorithms: Vec<Algorithm> = kept.into_iter().map(|c| c.algorithm).collect();
        // A greedy run proves nothing: an empty answer to an instance is not UNSAT.
        if algorithms.is_empty() {
            complete = false;
        }
        Ok(Found {
            algorithms,
            complete,
            cuts: Vec::new(),
            notes: Vec::new(),
        })
    }
}

/// The candidates whose algorithms are not dominated in (steps, rounds per chunk), by
/// increasing steps ([`crate::frontier::pareto_filter_by`]).
fn pareto_candidates(all: Vec<Candidate>) -> Vec<Candidate> {
    crate::frontier::pareto_filter_by(all, |c| &c.algorithm)
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
            max_chunks_given: false,
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
        for spec in [
            "ring:4",
            "line:3",
            "dgx1",
            "torus-2d:4x4",
            "dgx-a100",
            "dgx-a100x2",
        ] {
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
                    post: vec![1, 3].into(),
                    address: 0,
                },
                Chunk {
                    pre: vec![3],
                    post: vec![0].into(),
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

    /// Writes `text` as a TOML topology file named after `name`; the file is removed when the
    /// returned guard drops.
    fn toml(name: &str, text: &str) -> tempfile::NamedTempFile {
        let file = tempfile::Builder::new()
            .prefix(&format!("synth-greedy-{name}-"))
            .suffix(".toml")
            .tempfile()
            .unwrap();
        std::fs::write(file.path(), text).unwrap();
        file
    }

    /// One greedy run of `model` on `spec` with restart salt `salt`.
    fn run_model(spec: &str, coll: &Collective, model: Model, salt: u64) -> Schedule {
        let topology = topology::load(spec).unwrap();
        let index = topology.index();
        let caps = index.capacities.clone().unwrap();
        let alpha: Vec<f64> = topology.links.iter().map(|l| l.alpha).collect();
        let delays = Delays::from_alphas(&alpha);
        let fabric = fabric(&topology, &index, &caps, model, &delays);
        let demand = Demand::new(coll, &fabric.dist, &topology.name).unwrap();
        let far = Instant::now() + Duration::from_secs(3600);
        schedule::run(&fabric, demand, coll, Some(salt), 1000, far).unwrap()
    }

    /// Ranks 0, 1, 2: NVLink-like links 0-1 and 1-2 (0.7 µs) and a direct 0-2 link of
    /// 5.6 µs (delays 4, 4 and 32 epochs).
    const TRIANGLE: &str = "name = \"triangle\"\nranks = 3\nbandwidth = 25\nalpha = 0.7\n\
        [[link]]\nsrc = 0\ndst = 1\n[[link]]\nsrc = 1\ndst = 2\n\
        [[link]]\nsrc = 0\ndst = 2\nalpha = 5.6\n";

    #[test]
    fn the_delay_model_takes_two_fast_hops_over_one_slow_link() {
        let file = toml("triangle", TRIANGLE);
        let spec = file.path().to_str().unwrap();
        let topology = topology::load(spec).unwrap();
        let slow = topology
            .links
            .iter()
            .position(|l| (l.src, l.dst) == (0, 2))
            .unwrap() as u32;
        let coll = Collective::new(Kind::Broadcast, 3, 0, 1).unwrap();
        for salt in 0..4 {
            // Hops: rank 2 is one hop away, over the slow link.
            let hops = run_model(spec, &coll, Model::Hops, salt);
            assert!(hops.steps.iter().flatten().any(|&(_, l)| l == slow));
            // Delays: 0 -> 1 -> 2 arrives after 8 epochs, the direct link after 32.
            let timed = run_model(spec, &coll, Model::Delays, salt);
            assert!(!timed.steps.iter().flatten().any(|&(_, l)| l == slow));
            assert_eq!(timed.makespan, 8);
            assert_eq!(timed.busy_epochs(), 2);
        }
        // The engine keeps the hop model's one-step broadcast and adds the faster relay.
        let found = search(
            spec,
            coll,
            Search::LeastSteps {
                chunks: 1,
                rounds: None,
            },
            0,
        );
        let names: Vec<&str> = found.algorithms.iter().map(|a| a.name.as_str()).collect();
        assert_eq!(found.algorithms.len(), 2, "{names:?}");
        assert_eq!(found.algorithms[0].num_steps(), 1);
        assert!(names[1].contains("-greedy-alpha"), "{names:?}");
        assert_eq!(found.algorithms[1].num_steps(), 2);
    }

    #[test]
    fn the_delay_model_starts_the_chunk_bound_for_the_slow_link_first() {
        // 0 - 1 - 2 at 0.7 µs and 1 - 3 at 2.8 µs: a scatter from 0 sends every chunk over
        // 0 -> 1, one per epoch. Rank 3 is 20 epochs away, rank 2 eight.
        let file = toml(
            "fork",
            "name = \"fork\"\nranks = 4\nbandwidth = 25\nalpha = 0.7\n\
             [[link]]\nsrc = 0\ndst = 1\n[[link]]\nsrc = 1\ndst = 2\n\
             [[link]]\nsrc = 1\ndst = 3\nalpha = 2.8\n",
        );
        let spec = file.path().to_str().unwrap();
        let coll = Collective::new(Kind::Scatter, 4, 0, 1).unwrap();
        let first = |s: &Schedule| coll.chunks[s.steps[0][0].0 as usize].post[0];
        let mut hop_firsts = Vec::new();
        for salt in 0..8 {
            let timed = run_model(spec, &coll, Model::Delays, salt);
            assert_eq!(first(&timed), 3, "salt {salt}");
            hop_firsts.push(first(&run_model(spec, &coll, Model::Hops, salt)));
        }
        // In hops ranks 2 and 3 are both two away: the tie-break decides.
        assert!(hop_firsts.contains(&2), "{hop_firsts:?}");
    }

    #[test]
    fn uniform_alpha_gives_exactly_the_hop_schedules() {
        // The built-in 4x4 torus (0.7 µs links) and the same torus at 2.6 µs.
        let file = toml(
            "torus",
            "name = \"torus-2d:4x4\"\ngenerator = \"torus-2d\"\nsize = \"4x4\"\n\
             bandwidth = 25\nalpha = 2.6\n",
        );
        let spec = file.path().to_str().unwrap();
        for kind in [Kind::AllGather, Kind::AllToAll] {
            let coll = || Collective::new(kind, 16, 0, 1).unwrap();
            let a = search("torus-2d:4x4", coll(), Search::Pareto, 5).algorithms;
            let b = search(spec, coll(), Search::Pareto, 5).algorithms;
            assert!(!a.is_empty());
            assert_eq!(a, b, "{kind}");
            assert!(a.iter().all(|x| !x.name.contains("-greedy-alpha")));
        }
    }

    #[test]
    fn on_two_nodes_the_delay_model_adds_lower_latency_algorithms() {
        // dgx-a100x4: 0.7 µs NVLink beside 2.6 µs NICs. Both models' algorithms pass the
        // checker (in `search`); the delay model's latency is the lowest.
        let topology = topology::load("dgx-a100x4").unwrap();
        let coll = Collective::new(Kind::AllGather, 32, 0, 1).unwrap();
        let found = search("dgx-a100x4", coll, Search::Pareto, 0);
        let index = topology.index();
        let caps = index.capacities.clone().unwrap();
        let alpha: Vec<f64> = topology.links.iter().map(|l| l.alpha).collect();
        let delays = Delays::from_alphas(&alpha);
        let hops = fabric(&topology, &index, &caps, Model::Hops, &delays);
        let sends = |a: &Algorithm| -> Vec<Vec<(u32, u32)>> {
            a.steps
                .iter()
                .map(|s| {
                    s.sends
                        .iter()
                        .map(|x| (x.chunk as u32, index.link_of[&(x.src, x.dst)] as u32))
                        .collect()
                })
                .collect()
        };
        let latency = |timed: bool| {
            found
                .algorithms
                .iter()
                .filter(|a| a.name.contains("-greedy-alpha") == timed)
                .map(|a| latency::latency_us(&hops, &alpha, &sends(a)))
                .fold(f64::INFINITY, f64::min)
        };
        let (hop, timed) = (latency(false), latency(true));
        assert!(timed < hop, "delay model {timed} us, hop model {hop} us");
    }
}
