//! The direct encoding of a collective whose reductions may end on many ranks (an allreduce,
//! a custom collective reducing onto several ranks): SCCL's k-synchronous model over partial
//! sums instead of held chunks, so no address is reduced onto one rank and spread after.
//!
//! `has[a][r][s][j]` ⇔ rank r's value of address a after step s includes contributor j's
//! input (true where the contributor starts, false before its hop distance allows). A send
//! `x[a,u,v,s]` over link u→v in step s reads u's value before the step; every step is
//! reducing or copying (`reduce[s]`, chosen by the solver: one flag per step, as
//! [`crate::algorithm::Step::reduce`]):
//! * reducing: v's value becomes the union of its own and every incoming one, which must be
//!   pairwise disjoint (nothing counted twice);
//! * copying: at most one incoming send, v's value becomes u's, and only where v's value is
//!   a subset of u's (nothing lost); a rank that receives an address in a copying step does
//!   not send it in that step (the lowering overwrites the slot it would read);
//! * without an incoming send the value stays; a send needs a non-empty value;
//! * at the end every destination of an address holds every contributor;
//! * bandwidth per link and switch constraint as the plain encoding
//!   ([`super::encoding::Builder::bandwidth`]).

use super::encoding::{checked, Builder, Checked, Instance, Outcome, Sends, SolveOptions};
use crate::algorithm::{Algorithm, Send, Step};
use crate::bounds::Bounds;
use crate::collective::Collective;
use crate::engine::{Found, Limits, MakeCollective, TimeLimitReached};
use crate::origin::Family;
use crate::progress::Progress;
use crate::topology::{Capacities, Topology, TopologyIndex};
use anyhow::Result;
use num_rational::Ratio;
use std::collections::BTreeMap;
use std::time::Instant;
use thiserror::Error;
use z3::ast::Bool;
use z3::{Config, Solver};

/// The most steps past the steps lower bound the direct search tries.
pub const DIRECT_EXTRA_STEPS: usize = 4;

/// The most chunks per address the direct search tries.
pub const DIRECT_MAX_CHUNKS: usize = 4;

/// Why a direct instance has no algorithm.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DirectError {
    /// Proven impossible.
    #[error("no direct schedule with {steps} steps, {rounds} rounds and {chunks} chunks per address exists (UNSAT)")]
    Unsat {
        /// Steps S.
        steps: usize,
        /// Rounds R.
        rounds: usize,
        /// Chunks C.
        chunks: usize,
    },
    /// z3 stopped without an answer before the deadline.
    #[error("z3 gave up on the direct instance (steps={steps}, rounds={rounds}, chunks={chunks}) without an answer")]
    Undecided {
        /// Steps S.
        steps: usize,
        /// Rounds R.
        rounds: usize,
        /// Chunks C.
        chunks: usize,
    },
}

/// One direct instance: a collective (split into C pieces) with S steps and R rounds.
pub struct DirectInstance<'a> {
    /// The fabric.
    pub topology: &'a Topology,
    /// Its integer capacities.
    pub capacities: &'a Capacities,
    /// Its index.
    pub index: &'a TopologyIndex,
    /// The collective (combining or not).
    pub collective: &'a Collective,
    /// Steps S.
    pub steps: usize,
    /// Total rounds R (≥ S).
    pub rounds: usize,
}

/// One address of the encoding: its chunks (contributors) and destinations.
struct Address {
    address: usize,
    /// The ranks each contributor starts on.
    contributors: Vec<Vec<usize>>,
    destinations: Vec<usize>,
}

impl DirectInstance<'_> {
    /// Builds the encoding, solves it with z3 until `deadline`, and decodes the model (not
    /// yet checked). Runs in a fresh z3 context of its own.
    pub fn solve(&self, deadline: Instant) -> Outcome {
        if self.rounds < self.steps {
            return Outcome::Unsat;
        }
        z3::with_z3_config(&Config::new(), || {
            let solver = Solver::new_for_logic("QF_FD").unwrap_or_default();
            let stop = || Instant::now() >= deadline;
            let Some((sends, modes)) = self.build(&solver, &stop) else {
                return Outcome::Unknown;
            };
            match checked(&solver, deadline, SolveOptions::default()) {
                Checked::Sat(model) => Outcome::Sat(Box::new(self.decode(&sends, &modes, &model))),
                Checked::Unsat => Outcome::Unsat,
                Checked::Unknown => Outcome::Unknown,
            }
        })
    }

    fn addresses(&self) -> Vec<Address> {
        let coll = self.collective;
        coll.by_address()
            .into_iter()
            .map(|(address, members)| {
                let mut destinations = coll.chunks[members[0]].post.to_vec();
                destinations.sort_unstable();
                destinations.dedup();
                Address {
                    address,
                    contributors: members
                        .iter()
                        .map(|&m| coll.chunks[m].pre.clone())
                        .collect(),
                    destinations,
                }
            })
            .collect()
    }

    /// Asserts the formula; the sends (address in place of the chunk index) and the step
    /// modes, or `None` once `stop` says so.
    fn build(&self, solver: &Solver, stop: &dyn Fn() -> bool) -> Option<(Sends, Vec<Bool>)> {
        let (n, steps) = (self.topology.ranks, self.steps);
        let distances = &self.index.distances;
        let near = |from: &[usize], r: usize| from.iter().filter_map(|&p| distances[p][r]).min();
        let modes: Vec<Bool> = (1..=steps)
            .map(|s| Bool::new_const(format!("reduce_{s}")))
            .collect();
        let mut sends = Sends {
            sends: Vec::new(),
            var_of: Vec::new(),
            incoming: BTreeMap::new(),
        };
        for (ai, a) in self.addresses().iter().enumerate() {
            if stop() {
                return None;
            }
            // has[r][s][j]
            let has: Vec<Vec<Vec<Bool>>> = (0..n)
                .map(|r| {
                    (0..=steps)
                        .map(|s| {
                            (a.contributors.iter().enumerate())
                                .map(|(j, pre)| match near(pre, r) {
                                    Some(0) => Bool::from_bool(true),
                                    Some(d) if d <= s && s > 0 => {
                                        Bool::new_const(format!("has_{ai}_{r}_{s}_{j}"))
                                    }
                                    _ => Bool::from_bool(false),
                                })
                                .collect()
                        })
                        .collect()
                })
                .collect();
            // Contributors start with their input and nothing else.
            for (r, row) in has.iter().enumerate() {
                for (j, pre) in a.contributors.iter().enumerate() {
                    if !pre.contains(&r) {
                        solver.assert(row[0][j].not());
                    }
                }
            }
            let sources: Vec<usize> = a.contributors.iter().flatten().copied().collect();
            // sends into and out of each (rank, step)
            let mut into: BTreeMap<(usize, usize), Vec<(usize, Bool)>> = BTreeMap::new();
            let mut out_of: BTreeMap<(usize, usize), Vec<Bool>> = BTreeMap::new();
            for (l, link) in self.topology.links.iter().enumerate() {
                let (u, v) = (link.src, link.dst);
                for s in 1..=steps {
                    let sender_can = near(&sources, u).is_some_and(|d| d < s);
                    let useful = (a.destinations.iter())
                        .any(|&w| distances[v][w].is_some_and(|d| d <= steps - s));
                    if !(sender_can && useful) {
                        continue;
                    }
                    let x = Bool::new_const(format!("x_{ai}_{u}_{v}_{s}"));
                    // A send carries something.
                    let held: Vec<&Bool> = has[u][s - 1].iter().collect();
                    solver.assert(x.implies(Bool::or(&held)));
                    into.entry((v, s)).or_default().push((u, x.clone()));
                    out_of.entry((u, s)).or_default().push(x.clone());
                    sends.var_of.push(sends.sends.len());
                    sends.sends.push((a.address, l, s, x));
                }
            }
            for v in 0..n {
                for s in 1..=steps {
                    let m = &modes[s - 1];
                    let incoming = into.get(&(v, s)).map_or(&[][..], Vec::as_slice);
                    self.transition(solver, m, &has, v, s, incoming);
                    // No copy onto a slot read in the same step.
                    for out in out_of.get(&(v, s)).into_iter().flatten() {
                        for (_, x) in incoming {
                            solver.assert(Bool::and(&[&m.not(), x, out]).not());
                        }
                    }
                }
            }
            for &d in &a.destinations {
                for held in &has[d][steps] {
                    solver.assert(held);
                }
            }
        }
        let instance = Instance {
            topology: self.topology,
            capacities: self.capacities,
            index: self.index,
            collective: self.collective,
            steps,
            rounds: self.rounds,
            symmetry: None,
            round_caps: &[],
            extra_memory: None,
        };
        let builder = Builder {
            inst: &instance,
            solver,
            stop,
        };
        let (_, unit_copies) = builder.round_vars();
        builder.bandwidth(&sends, &unit_copies)?;
        Some((sends, modes))
    }

    /// Rank v's value in step s from its value before and the `incoming` sends (sender,
    /// variable), under the step's mode `m` (true: reducing).
    fn transition(
        &self,
        solver: &Solver,
        m: &Bool,
        has: &[Vec<Vec<Bool>>],
        v: usize,
        s: usize,
        incoming: &[(usize, Bool)],
    ) {
        let copying = m.not();
        let xs: Vec<&Bool> = incoming.iter().map(|(_, x)| x).collect();
        let any = Bool::or(&xs);
        for i in 0..incoming.len() {
            for k in i + 1..incoming.len() {
                solver.assert(Bool::and(&[&copying, xs[i], xs[k]]).not());
            }
        }
        for (j, new) in has[v][s].iter().enumerate() {
            let old = &has[v][s - 1][j];
            if incoming.is_empty() {
                solver.assert(new.iff(old));
                continue;
            }
            solver.assert(any.not().implies(new.iff(old)));
            let parts: Vec<Bool> = incoming
                .iter()
                .map(|(u, x)| Bool::and(&[x, &has[*u][s - 1][j]]))
                .collect();
            let mut union: Vec<&Bool> = parts.iter().collect();
            union.push(old);
            solver.assert(m.implies(new.iff(Bool::or(&union))));
            for (i, part) in parts.iter().enumerate() {
                solver.assert(Bool::and(&[m, old, part]).not());
                for other in &parts[i + 1..] {
                    solver.assert(Bool::and(&[part, other]).not());
                }
            }
            for (u, x) in incoming {
                let theirs = &has[*u][s - 1][j];
                let copied = Bool::and(&[&copying, x]);
                solver.assert(copied.implies(new.iff(theirs)));
                solver.assert(copied.implies(old.implies(theirs)));
            }
        }
    }

    fn decode(&self, sends: &Sends, modes: &[Bool], model: &z3::Model) -> Algorithm {
        let truth = |b: &Bool| {
            model
                .eval(b, true)
                .and_then(|v| v.as_bool())
                .unwrap_or(false)
        };
        let mut steps: Vec<Step> = modes
            .iter()
            .map(|m| Step {
                rounds: 1,
                reduce: truth(m),
                sends: Vec::new(),
            })
            .collect();
        for (address, l, s, x) in &sends.sends {
            if truth(x) {
                let link = &self.topology.links[*l];
                steps[s - 1].sends.push(Send {
                    chunk: *address,
                    src: link.src,
                    dst: link.dst,
                });
            }
        }
        steps.retain(|step| !step.sends.is_empty());
        for step in &mut steps {
            step.sends.sort();
            step.rounds = crate::load::rounds_needed(self.index, self.capacities, &step.sends);
        }
        Algorithm::made(
            Family::DirectSmt,
            self.topology.name.clone(),
            self.collective.clone(),
            steps,
        )
    }
}

/// Searches direct instances of the collective `make` builds on `topology`: one instance,
/// least steps or the frontier, every answer checked.
pub struct DirectSearcher<'a> {
    topology: &'a Topology,
    capacities: Capacities,
    index: TopologyIndex,
    make: &'a MakeCollective<'a>,
    progress: &'a Progress,
}

/// What one solve says, once checked.
enum Verdict {
    Found(Box<Algorithm>),
    Impossible,
    Undecided,
}

impl<'a> DirectSearcher<'a> {
    /// A searcher for the collective built by `make` on `topology`.
    pub fn new(
        topology: &'a Topology,
        make: &'a MakeCollective<'a>,
        progress: &'a Progress,
    ) -> Result<Self> {
        Ok(DirectSearcher {
            topology,
            capacities: topology.capacities()?,
            index: topology.index(),
            make,
            progress,
        })
    }

    fn solve(
        &self,
        steps: usize,
        rounds: usize,
        chunks: usize,
        deadline: Instant,
    ) -> Result<Verdict> {
        self.progress.message(&format!(
            "direct: solving steps={steps} rounds={rounds} chunks={chunks}"
        ));
        let collective = (self.make)(chunks)?;
        let instance = DirectInstance {
            topology: self.topology,
            capacities: &self.capacities,
            index: &self.index,
            collective: &collective,
            steps,
            rounds,
        };
        let started = Instant::now();
        let outcome = instance.solve(deadline);
        if std::env::var_os("SYNTH_TRACE").is_some() {
            let verdict = match &outcome {
                Outcome::Sat(_) => "sat",
                Outcome::Unsat => "unsat",
                Outcome::Unknown => "unknown",
            };
            eprintln!(
                "trace: direct S={steps} R={rounds} C={chunks}: {verdict} in {:.3} s",
                started.elapsed().as_secs_f64()
            );
        }
        Ok(match outcome {
            Outcome::Sat(a) => {
                if let Err(e) = crate::check::check(&a, self.topology) {
                    anyhow::bail!("internal error: the direct encoding's algorithm for (S={steps}, R={rounds}, C={chunks}) fails the checker: {e}");
                }
                Verdict::Found(a)
            }
            Outcome::Unsat => Verdict::Impossible,
            Outcome::Unknown => Verdict::Undecided,
        })
    }

    /// Solves one instance (S, R, C): [`DirectError::Unsat`] where none exists,
    /// [`TimeLimitReached`] or [`DirectError::Undecided`] where z3 did not answer.
    pub fn instance(
        &self,
        steps: usize,
        rounds: usize,
        chunks: usize,
        deadline: Instant,
    ) -> Result<Algorithm> {
        match self.solve(steps, rounds, chunks, deadline)? {
            Verdict::Found(a) => Ok(*a),
            Verdict::Impossible => Err(DirectError::Unsat {
                steps,
                rounds,
                chunks,
            }
            .into()),
            Verdict::Undecided if Instant::now() >= deadline => Err(TimeLimitReached {
                phase: format!(
                    "deciding the direct instance (steps={steps}, rounds={rounds}, chunks={chunks})"
                ),
            }
            .into()),
            Verdict::Undecided => Err(DirectError::Undecided {
                steps,
                rounds,
                chunks,
            }
            .into()),
        }
    }

    /// The least R in `lo..=hi` for which (S, R, C) is SAT (doubling, then bisection: a
    /// spare round never hurts), and whether every solve was decided.
    fn least_rounds(
        &self,
        steps: usize,
        chunks: usize,
        lo: usize,
        hi: usize,
        deadline: Instant,
    ) -> Result<(Option<Algorithm>, bool)> {
        let mut lo = lo.max(steps);
        let mut r = lo;
        let mut best = loop {
            if r > hi {
                return Ok((None, true));
            }
            match self.solve(steps, r, chunks, deadline)? {
                Verdict::Found(a) => break *a,
                Verdict::Impossible if r == hi => return Ok((None, true)),
                Verdict::Impossible => {
                    lo = r + 1;
                    r = (r * 2).min(hi);
                }
                Verdict::Undecided => return Ok((None, false)),
            }
        };
        let mut top = best.rounds() as usize;
        while lo < top {
            let mid = (lo + top) / 2;
            match self.solve(steps, mid, chunks, deadline)? {
                Verdict::Found(a) => {
                    top = a.rounds() as usize;
                    best = *a;
                }
                Verdict::Impossible => lo = mid + 1,
                Verdict::Undecided => return Ok((Some(best), false)),
            }
        }
        Ok((Some(best), true))
    }

    /// Rounds beyond which bandwidth cannot bind at (S, C): every address over one link in
    /// every step.
    fn round_cap(&self, steps: usize, chunks: usize) -> Result<usize> {
        Ok(steps * (self.make)(chunks)?.addresses().max(1))
    }

    /// The least steps from `bounds.steps` up (at most [`DIRECT_EXTRA_STEPS`] more), and
    /// for them the least rounds, at C = `chunks` (and R ≤ `rounds` where given).
    pub fn least_steps(
        &self,
        bounds: &Bounds,
        chunks: usize,
        rounds: Option<usize>,
        limits: &Limits,
    ) -> Result<Found> {
        let first = bounds.steps.max(1);
        for steps in first..=limits.max_steps.min(first + DIRECT_EXTRA_STEPS) {
            let lo = rounds_floor(bounds.rounds_per_chunk, chunks);
            let hi = rounds.unwrap_or(self.round_cap(steps, chunks)?);
            let (found, decided) = self.least_rounds(steps, chunks, lo, hi, limits.deadline)?;
            if found.is_some() || !decided {
                return Ok(found_of(found.into_iter().collect(), decided));
            }
        }
        Ok(found_of(Vec::new(), false))
    }

    /// The frontier over (steps, rounds per chunk) for steps from `bounds.steps` up (at
    /// most [`DIRECT_EXTRA_STEPS`] more) and C ≤ [`DIRECT_MAX_CHUNKS`]: every step count at
    /// C = 1 first, then at C = 2, ..., each solve only for an R/C below what fewer or as
    /// many steps already reach, so that the cheap instances shape the frontier before the
    /// deadline. A step count past one that reaches `target` (at least the
    /// rounds-per-chunk bound) is not tried; complete only where every solve was decided
    /// and the true bound was reached.
    pub fn pareto(&self, bounds: &Bounds, target: Ratio<u64>, limits: &Limits) -> Result<Found> {
        let target = target.max(bounds.rounds_per_chunk);
        let first = bounds.steps.max(1);
        let last = limits.max_steps.min(first + DIRECT_EXTRA_STEPS);
        let max_chunks = limits.max_chunks.clamp(1, DIRECT_MAX_CHUNKS);
        let mut best: BTreeMap<usize, Algorithm> = BTreeMap::new();
        let mut decided = true;
        'chunks: for chunks in 1..=max_chunks {
            for steps in first..=last {
                if Instant::now() >= limits.deadline {
                    decided = false;
                    break 'chunks;
                }
                let ceiling = (best.range(..=steps).map(|(_, a)| a.rounds_per_chunk())).min();
                if ceiling.is_some_and(|c| c <= target) {
                    break;
                }
                let hi = match ceiling {
                    Some(r) => ((r * Ratio::from_integer(chunks as u64)).ceil().to_integer()
                        as usize)
                        .saturating_sub(1),
                    None => self.round_cap(steps, chunks)?,
                };
                let lo = rounds_floor(bounds.rounds_per_chunk, chunks);
                let (found, ok) = self.least_rounds(steps, chunks, lo, hi, limits.deadline)?;
                decided &= ok;
                if let Some(a) = found {
                    self.progress.found(&a);
                    best.insert(steps, a);
                }
            }
        }
        let frontier = crate::frontier::pareto_filter(best.into_values().collect());
        let reached = (frontier.iter()).any(|a| a.rounds_per_chunk() <= bounds.rounds_per_chunk);
        Ok(found_of(frontier, decided && reached))
    }
}

fn found_of(algorithms: Vec<Algorithm>, complete: bool) -> Found {
    Found {
        algorithms,
        complete,
        cuts: Vec::new(),
        notes: Vec::new(),
    }
}

/// The least integer R with R/C ≥ the bound.
fn rounds_floor(bound: Ratio<u64>, chunks: usize) -> usize {
    (bound * Ratio::from_integer(chunks as u64))
        .ceil()
        .to_integer() as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collective::Kind;
    use std::time::Duration;

    fn solve(topo: &str, steps: usize, rounds: usize) -> Outcome {
        let topology = crate::topology::load(topo).unwrap();
        let collective = Collective::new(Kind::AllReduce, topology.ranks, 0, 1).unwrap();
        DirectInstance {
            topology: &topology,
            capacities: &topology.capacities().unwrap(),
            index: &topology.index(),
            collective: &collective,
            steps,
            rounds,
        }
        .solve(Instant::now() + Duration::from_secs(120))
    }

    #[test]
    fn ring4_allreduce_in_two_steps_exchanges_and_checks() {
        let topology = crate::topology::load("ring:4").unwrap();
        // Two steps: pairs exchange, then the pairs of pairs (every link both ways).
        let Outcome::Sat(a) = solve("ring:4", 2, 8) else {
            panic!("ring:4 allreduce in 2 steps and 8 rounds is SAT");
        };
        crate::check::check(&a, &topology).unwrap();
        assert_eq!(a.origin.family, Family::DirectSmt);
        assert!(a.num_steps() <= 2 && a.rounds() <= 8);
        // One step cannot reach the ranks two hops away.
        assert!(matches!(solve("ring:4", 1, 8), Outcome::Unsat));
    }
}
