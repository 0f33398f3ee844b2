//! Searches over SMT instances: one instance, least steps, and the Pareto frontier in
//! (steps, rounds per chunk). Every loop is capped (`max_steps`, `max_chunks`) and bounded by
//! a wall-clock deadline; every SAT answer goes through the independent checker.

use super::encoding::{Instance, Outcome, SolveOptions};
use super::race::Race;
use super::symmetry::symmetry_ladder;
use crate::algorithm::Algorithm;
use crate::bounds::{step_bound, step_round_caps, to_ratio_floor, Bounds, LP_SLACK};
use crate::check::{check, check_memory};
use crate::collective::Collective;
use crate::progress::Progress;
use crate::symmetry::Group;
use crate::topology::{Capacities, Topology, TopologyIndex};
use anyhow::{bail, Result};
use num_rational::Ratio;
use rayon::prelude::*;
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

/// The most topology automorphisms used to restrict a solve to symmetric schedules.
const MAX_SYMMETRIES: usize = 64;

pub use crate::engine::{Found, Limits, MakeCollective};

/// The shared, read-only context of every solve in one search.
pub struct Searcher<'a> {
    topology: &'a Topology,
    capacities: Capacities,
    index: TopologyIndex,
    automorphisms: Vec<Vec<usize>>,
    make: &'a MakeCollective<'a>,
    progress: &'a Progress,
    extra_memory: Option<usize>,
    /// The C = 1 collective the step-limited LPs bound, and the symmetry group that shrinks
    /// them (built on first use).
    lp_collective: OnceLock<(Collective, Option<Group>)>,
}

/// What a solve says about (S, R, C), once checked.
enum Verdict {
    Found(Box<Algorithm>),
    Impossible,
    Undecided,
}

impl<'a> Searcher<'a> {
    /// A searcher for the collective built by `make` on `topology`.
    pub fn new(
        topology: &'a Topology,
        make: &'a MakeCollective<'a>,
        progress: &'a Progress,
    ) -> Result<Self> {
        Ok(Searcher {
            topology,
            capacities: topology.capacities()?,
            index: topology.index(),
            automorphisms: topology.automorphisms(MAX_SYMMETRIES),
            make,
            progress,
            extra_memory: None,
            lp_collective: OnceLock::new(),
        })
    }

    /// The same searcher with SCCL's extra-memory limit on every instance (see
    /// [`Instance::extra_memory`]).
    pub fn with_extra_memory(mut self, extra_memory: Option<usize>) -> Self {
        self.extra_memory = extra_memory;
        self
    }

    fn solve(
        &self,
        steps: usize,
        rounds: usize,
        chunks: usize,
        deadline: Instant,
    ) -> Result<Verdict> {
        self.progress.message(&format!(
            "solving steps={steps} rounds={rounds} chunks={chunks}"
        ));
        let collective = (self.make)(chunks)?;
        let round_caps = if rounds > steps {
            let (one, symmetry) = self.lp_collective(deadline)?;
            step_round_caps(
                self.topology,
                one,
                symmetry.as_ref(),
                steps,
                rounds,
                chunks,
                deadline,
            )?
            .unwrap_or_default()
        } else {
            Vec::new()
        };
        let full = Instance {
            topology: self.topology,
            capacities: &self.capacities,
            index: &self.index,
            collective: &collective,
            steps,
            rounds,
            symmetry: None,
            round_caps: &round_caps,
            extra_memory: self.extra_memory,
        };
        let ladder = symmetry_ladder(
            self.topology,
            &self.index,
            &collective,
            &self.automorphisms,
            Some(deadline),
        );
        let mut outcome = if ladder.is_empty() {
            traced(&full, deadline, SolveOptions::default(), "full")
        } else {
            race(&full, &ladder, deadline)
        };
        // A model from the raced, restarted solves has (rarely, under heavy load) violated the
        // round budget; such a model is discarded and the full formula solved once more
        // without restarts. A second bad model is an error: nothing unchecked gets out.
        let invalid = |a: &Algorithm| {
            a.rounds() as usize > rounds
                || check(a, self.topology).is_err()
                || self
                    .extra_memory
                    .is_some_and(|m| check_memory(a, m).is_err())
        };
        if matches!(&outcome, Outcome::Sat(a) if invalid(a)) {
            outcome = traced(&full, deadline, SolveOptions::default(), "full (re-solve)");
        }
        Ok(match outcome {
            Outcome::Sat(algorithm) => {
                if algorithm.rounds() as usize > rounds {
                    bail!(
                        "internal error: z3 returned {} rounds for an instance with R={rounds}",
                        algorithm.rounds()
                    );
                }
                if let Err(e) = check(&algorithm, self.topology) {
                    bail!("internal error: the solver's algorithm for (S={steps}, R={rounds}, C={chunks}) fails the checker: {e}");
                }
                if let Some(Err(e)) = self.extra_memory.map(|m| check_memory(&algorithm, m)) {
                    bail!("internal error: the solver's algorithm for (S={steps}, R={rounds}, C={chunks}) fails the checker: {e}");
                }
                Verdict::Found(algorithm)
            }
            Outcome::Unsat => Verdict::Impossible,
            Outcome::Unknown => Verdict::Undecided,
        })
    }

    /// Solves one instance (S, R, C). `Ok(None)` means UNSAT; an error means undecided.
    pub fn instance(
        &self,
        steps: usize,
        rounds: usize,
        chunks: usize,
        deadline: Instant,
    ) -> Result<Option<Algorithm>> {
        match self.solve(steps, rounds, chunks, deadline)? {
            Verdict::Found(a) => Ok(Some(*a)),
            Verdict::Impossible => Ok(None),
            Verdict::Undecided if Instant::now() >= deadline => {
                Err(crate::engine::TimeLimitReached {
                    phase: format!(
                        "deciding the instance (steps={steps}, rounds={rounds}, chunks={chunks})"
                    ),
                }
                .into())
            }
            Verdict::Undecided => bail!(
                "z3 gave up on (steps={steps}, rounds={rounds}, chunks={chunks}) without an answer"
            ),
        }
    }

    /// The least R in `lo..=hi` for which (S, R, C) is SAT, by binary search (SAT is
    /// monotone in R: a spare round never hurts). `hi = None` searches upward by doubling
    /// up to `cap`. Returns the algorithm and whether every solve was decided.
    fn least_rounds(
        &self,
        steps: usize,
        chunks: usize,
        lo: usize,
        hi: Option<usize>,
        cap: usize,
        deadline: Instant,
    ) -> Result<(Option<Algorithm>, bool)> {
        let mut lo = lo.max(steps);
        let (mut hi, mut best) = match hi {
            Some(hi) if hi < lo => return Ok((None, true)),
            Some(hi) => match self.solve(steps, hi, chunks, deadline)? {
                Verdict::Found(a) => (hi, *a),
                Verdict::Impossible => return Ok((None, true)),
                Verdict::Undecided => return Ok((None, false)),
            },
            None => {
                let mut r = lo;
                loop {
                    match self.solve(steps, r, chunks, deadline)? {
                        Verdict::Found(a) => break (r, *a),
                        Verdict::Impossible if r >= cap => return Ok((None, true)),
                        Verdict::Impossible => {
                            lo = r + 1;
                            r = (r * 2).min(cap);
                        }
                        Verdict::Undecided => return Ok((None, false)),
                    }
                }
            }
        };
        hi = hi.min(best.rounds() as usize);
        while lo < hi {
            let mid = (lo + hi) / 2;
            match self.solve(steps, mid, chunks, deadline)? {
                Verdict::Found(a) => {
                    hi = mid.min(a.rounds() as usize);
                    self.progress.found(&a);
                    best = *a;
                }
                Verdict::Impossible => lo = mid + 1,
                Verdict::Undecided => return Ok((Some(best), false)),
            }
        }
        Ok((Some(best), true))
    }

    /// The algorithm with the least steps (from the hop-distance bound up), and for that
    /// step count the least rounds, at C = `chunks`; with `rounds` given, only R ≤ rounds.
    pub fn least_steps(
        &self,
        bounds: &Bounds,
        chunks: usize,
        rounds: Option<usize>,
        limits: &Limits,
    ) -> Result<Found> {
        let cap = self.round_cap(chunks)?;
        for steps in bounds.steps.max(1)..=limits.max_steps {
            let Some(lo) = self.rounds_lower_bound(bounds, steps, chunks, limits.deadline)? else {
                continue;
            };
            let (found, decided) =
                self.least_rounds(steps, chunks, lo, rounds, cap.max(steps), limits.deadline)?;
            if let Some(a) = found {
                return Ok(Found {
                    algorithms: vec![a],
                    complete: decided,
                    cuts: Vec::new(),
                    notes: Vec::new(),
                });
            }
            if !decided {
                return Ok(Found {
                    algorithms: vec![],
                    complete: false,
                    cuts: Vec::new(),
                    notes: Vec::new(),
                });
            }
        }
        Ok(Found {
            algorithms: vec![],
            complete: false,
            cuts: Vec::new(),
            notes: Vec::new(),
        })
    }

    /// The Pareto frontier over (steps, rounds per chunk): for each step count from the
    /// lower bound up, the least R/C over C ≤ max_chunks that beats every frontier point with
    /// fewer steps; stops when R/C reaches the bandwidth lower bound.
    pub fn pareto(&self, bounds: &Bounds, limits: &Limits) -> Result<Found> {
        let mut frontier: Vec<Algorithm> = Vec::new();
        let mut complete = true;
        let mut reached_bound = false;
        for steps in bounds.steps.max(1)..=limits.max_steps {
            if Instant::now() >= limits.deadline {
                complete = false;
                break;
            }
            let previous = frontier.last().map(|a| a.rounds_per_chunk());
            // Every step takes a round, so with S or more steps R/C ≥ S / max_chunks: past
            // that, only more chunks than the cap could beat the frontier.
            let fewest = Ratio::new(steps as u64, limits.max_chunks.max(1) as u64);
            if previous.is_some_and(|p| fewest >= p) {
                break;
            }
            let (best, decided) = self.best_ratio_at(steps, previous, bounds, limits)?;
            complete &= decided;
            if let Some(a) = best {
                let ratio = a.rounds_per_chunk();
                self.progress.found(&a);
                frontier.push(a);
                if ratio <= bounds.rounds_per_chunk {
                    reached_bound = true;
                    break;
                }
            }
        }
        Ok(Found {
            algorithms: frontier,
            complete: complete && reached_bound,
            cuts: Vec::new(),
            notes: Vec::new(),
        })
    }

    /// The least R/C at `steps` strictly below `previous`, over C = 1..=max_chunks.
    ///
    /// The step-limited LP bound decides most of it without a solve: if it is not below
    /// `previous`, nothing at this step count can join the frontier; if its smallest (R, C)
    /// is SAT, nothing at this step count can beat it.
    fn best_ratio_at(
        &self,
        steps: usize,
        previous: Option<Ratio<u64>>,
        bounds: &Bounds,
        limits: &Limits,
    ) -> Result<(Option<Algorithm>, bool)> {
        let Some(bound) = self.ratio_lower_bound(bounds, steps, limits.deadline)? else {
            return Ok((None, true));
        };
        if previous.is_some_and(|p| bound >= p) {
            return Ok((None, true));
        }
        let best: Mutex<Option<Algorithm>> = Mutex::new(None);
        let decided = Mutex::new(true);
        let search_chunks = |chunks: usize| -> Result<()> {
            let ceiling = {
                let guard = best.lock().unwrap();
                guard.as_ref().map(|a| a.rounds_per_chunk()).or(previous)
            };
            // Largest R with R/C strictly below the ceiling.
            let hi = ceiling.map(|r| {
                let scaled = r * Ratio::from_integer(chunks as u64);
                (scaled.ceil().to_integer() as usize).saturating_sub(1)
            });
            if hi.is_some_and(|h| h < rounds_floor(bound, chunks)) {
                return Ok(());
            }
            let Some(lo) = self.rounds_lower_bound(bounds, steps, chunks, limits.deadline)? else {
                return Ok(());
            };
            if hi.is_some_and(|h| h < lo) {
                return Ok(());
            }
            let cap = self.round_cap(chunks)?.max(steps);
            let (found, ok) = self.least_rounds(steps, chunks, lo, hi, cap, limits.deadline)?;
            if !ok {
                *decided.lock().unwrap() = false;
            }
            if let Some(a) = found {
                let mut guard = best.lock().unwrap();
                let better = match guard.as_ref() {
                    None => true,
                    Some(b) => {
                        let (ra, rb) = (a.rounds_per_chunk(), b.rounds_per_chunk());
                        ra < rb || (ra == rb && a.chunks() < b.chunks())
                    }
                };
                if better {
                    *guard = Some(a);
                }
            }
            Ok(())
        };
        // If the bound itself is reachable at this step count, nothing can beat it: try its
        // smallest (R, C) first.
        let bound_chunks = *bound.denom() as usize;
        let bound_rounds = *bound.numer() as usize;
        if bound_chunks <= limits.max_chunks && bound_rounds >= steps {
            match self.solve(steps, bound_rounds, bound_chunks, limits.deadline)? {
                Verdict::Found(a) => return Ok((Some(*a), true)),
                Verdict::Impossible => {}
                Verdict::Undecided => *decided.lock().unwrap() = false,
            }
        }
        // C = 1 first, sequentially: it sets the ceiling that prunes the others.
        search_chunks(1)?;
        (2..=limits.max_chunks)
            .into_par_iter()
            .try_for_each(search_chunks)?;
        let best = best.into_inner().unwrap();
        Ok((best, decided.into_inner().unwrap()))
    }

    /// The least R worth trying at (S, C): the step-free bound, S itself (a round per step)
    /// and the step-limited LP bound. `None` when no (S, R, C) can be SAT.
    fn rounds_lower_bound(
        &self,
        bounds: &Bounds,
        steps: usize,
        chunks: usize,
        deadline: Instant,
    ) -> Result<Option<usize>> {
        let lo = rounds_floor(bounds.rounds_per_chunk, chunks).max(steps);
        let (one, symmetry) = self.lp_collective(deadline)?;
        match step_bound(
            self.topology,
            one,
            symmetry.as_ref(),
            steps,
            Some(chunks),
            deadline,
        )? {
            Some(v) if v.is_infinite() => Ok(None),
            Some(v) => Ok(Some(lo.max((v * chunks as f64 - LP_SLACK).ceil() as usize))),
            None => Ok(Some(lo)),
        }
    }

    /// The least R/C any algorithm with S steps can have (step-limited LP, or the step-free
    /// bound when the LP is too large); `None` when S steps cannot do the collective.
    fn ratio_lower_bound(
        &self,
        bounds: &Bounds,
        steps: usize,
        deadline: Instant,
    ) -> Result<Option<Ratio<u64>>> {
        let (one, symmetry) = self.lp_collective(deadline)?;
        match step_bound(self.topology, one, symmetry.as_ref(), steps, None, deadline)? {
            Some(v) if v.is_infinite() => Ok(None),
            Some(v) => Ok(Some(to_ratio_floor(v).max(bounds.rounds_per_chunk))),
            None => Ok(Some(bounds.rounds_per_chunk)),
        }
    }

    /// The C = 1 collective of the step-limited LPs and the group of automorphisms that map
    /// it to itself (`None` where only the identity does, or the group is too large to
    /// close by `deadline`).
    fn lp_collective(&self, deadline: Instant) -> Result<&(Collective, Option<Group>)> {
        if let Some(built) = self.lp_collective.get() {
            return Ok(built);
        }
        let one = (self.make)(1)?;
        let group = Group::new_before(
            self.topology,
            &self.index,
            &one,
            &self.automorphisms,
            Some(deadline),
        )
        .ok()
        .filter(|g| g.order() > 1);
        Ok(self.lp_collective.get_or_init(|| (one, group)))
    }

    /// Rounds beyond which bandwidth cannot bind: every address over every link in every step.
    fn round_cap(&self, chunks: usize) -> Result<usize> {
        let addresses = (self.make)(chunks)?.chunks.len();
        Ok(addresses.max(1) * 2)
    }
}

/// Solves the full instance on one thread while the other solves its restrictions to the
/// symmetry groups of `ladder` in turn, with restarts; the first SAT of either, or the full
/// instance's UNSAT, wins and interrupts the other. A symmetric formula is a fraction of the
/// full one and, when it is SAT, usually far faster to satisfy, but its time to a model is
/// heavy-tailed over seeds, which restarts cut off; its UNSAT proves nothing (the next
/// group is tried), so only the full solve can answer UNSAT.
fn race(full: &Instance, ladder: &[Group], deadline: Instant) -> Outcome {
    let race = Race::new();
    std::thread::scope(|scope| {
        let full_run = scope.spawn(|| {
            let options = SolveOptions {
                restarts: false,
                race: Some(&race),
            };
            let outcome = traced(full, deadline, options, "full");
            if !matches!(outcome, Outcome::Unknown) {
                race.finish();
            }
            outcome
        });
        let mut found = None;
        for group in ladder {
            let symmetric = Instance {
                symmetry: Some(group),
                ..*full
            };
            let options = SolveOptions {
                restarts: true,
                race: Some(&race),
            };
            let label = format!("symmetric({})", group.order());
            match traced(&symmetric, deadline, options, &label) {
                Outcome::Sat(a) => {
                    race.finish();
                    found = Some(a);
                    break;
                }
                Outcome::Unsat => continue,
                Outcome::Unknown => break,
            }
        }
        let full_outcome = full_run
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        match found {
            Some(a) => Outcome::Sat(a),
            None => full_outcome,
        }
    })
}

/// Solves, printing the verdict and time when `SYNTH_TRACE` is set.
fn traced(instance: &Instance, deadline: Instant, options: SolveOptions, label: &str) -> Outcome {
    let started = Instant::now();
    let outcome = instance.solve(deadline, options);
    if std::env::var_os("SYNTH_TRACE").is_some() {
        let verdict = match &outcome {
            Outcome::Sat(_) => "sat",
            Outcome::Unsat => "unsat",
            Outcome::Unknown => "unknown",
        };
        eprintln!(
            "trace: S={} R={} C={}: {label} {verdict} in {:.3} s",
            instance.steps,
            instance.rounds,
            instance.collective.chunks_per_rank,
            started.elapsed().as_secs_f64()
        );
    }
    outcome
}

/// The least integer R with R/C ≥ the bound.
fn rounds_floor(bound: Ratio<u64>, chunks: usize) -> usize {
    (bound * Ratio::from_integer(chunks as u64))
        .ceil()
        .to_integer() as usize
}
