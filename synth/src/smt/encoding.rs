//! The k-synchronous SMT encoding of DESIGN §3 for one instance (steps S, rounds R, chunks C).
//!
//! DESIGN §3 states it with integer arrival times `t[c,r]`; here `t` is order-encoded
//! (`at[c,r,s]` ⇔ `t[c,r] ≤ s`) and the send of chunk c over u→v that arrives in step s is
//! one Boolean `x[c,u,v,s]` (⇔ `snd[c,u,v] ∧ t[c,v] = s`). The constraints are §3's:
//! 1. pre ⇒ `t = 0`; post ⇒ `t ≤ S`;
//! 2. a rank outside pre that gets the chunk gets it from exactly one sender, once;
//! 3. a send leaves a rank that held the chunk before the step;
//! 4. per step and per link or switch constraint of capacity b: sends ≤ b · r_s, with
//!    `r_s ≥ 1` rounds per step (order-encoded) and Σ r_s ≤ R;
//! 5. with extra memory M (SCCL's `--extra-memory`), per rank r: the chunks r holds that it
//!    did not start with number at most |post(r)| + M after every step (a received chunk
//!    stays where it landed: the lowering never reuses a slot; holdings only grow, so the
//!    last step's state is the one constrained).
//!
//! Everything is Boolean plus pseudo-Boolean, so z3's SAT core (logic QF_FD) solves it
//! with native cardinality reasoning. Only provably sound reductions are applied: a chunk
//! cannot be at a rank before its hop distance allows, a send whose receiver is too far
//! from every rank that still needs the chunk is useless (removing it and everything it
//! feeds keeps a solution valid), and interchangeable pieces of one chunk are ordered by
//! their arrival at one rank (any solution can be permuted into that order).

use super::race::Race;
use super::symmetry::ordered_classes;
use crate::algorithm::{Algorithm, Send, Step};
use crate::collective::Collective;
use crate::symmetry::Group;
use crate::topology::{Capacities, Topology, TopologyIndex};
use std::collections::BTreeMap;
use std::time::Instant;
use z3::ast::Bool;
use z3::{Config, Params, SatResult, Solver};

/// The result of solving one instance.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// An algorithm with at most the instance's steps and rounds (not yet checked).
    Sat(Box<Algorithm>),
    /// Proven impossible.
    Unsat,
    /// The deadline passed (or the solver gave up) before an answer.
    Unknown,
}

/// One instance: a non-combining collective (already split into C pieces) with S steps
/// and R rounds on a topology.
pub struct Instance<'a> {
    /// The fabric.
    pub topology: &'a Topology,
    /// Its integer capacities.
    pub capacities: &'a Capacities,
    /// Its index (links by endpoints, switch constraints per link, hop distances).
    pub index: &'a TopologyIndex,
    /// The collective (must be non-combining).
    pub collective: &'a Collective,
    /// Steps S.
    pub steps: usize,
    /// Total rounds R (≥ S).
    pub rounds: usize,
    /// A group the schedule must be invariant under (`None`: the full instance). A
    /// restriction: SAT gives a valid schedule, UNSAT proves nothing.
    pub symmetry: Option<&'a Group>,
    /// The most rounds each step may take (empty: up to what R allows), from a sound bound.
    pub round_caps: &'a [usize],
    /// Extra memory M: per rank, received chunks ≤ postcondition chunks + M (`None`: no limit).
    pub extra_memory: Option<usize>,
}

/// How one solve is run.
#[derive(Clone, Copy, Default)]
pub struct SolveOptions<'r> {
    /// Cut the check after [`RESTART_CONFLICTS`] × luby(k) conflicts and resume it with a
    /// new seed (z3 keeps its learned clauses), instead of one uninterrupted check: for
    /// formulas whose time to a model is heavy-tailed over seeds. Counted in conflicts, not
    /// time, so the sequence of attempts is the same on a busy machine as on an idle one.
    pub restarts: bool,
    /// The race this solve runs in, which may interrupt it.
    pub race: Option<&'r Race>,
}

/// The conflicts of the first restart; later ones follow the Luby sequence times this.
/// On the DGX-1 allgather (3,7,6) instance a lucky seed needs a few hundred conflicts and an
/// unlucky one over 60,000; short restarts with fresh seeds (learned clauses kept) cut the
/// heavy tail (see `results/smt.md`). Restarts cut by wall-clock time (50 ms) instead did
/// less work per attempt on a loaded machine, so the README's first command, 1-20 s there,
/// sometimes stalled for minutes.
pub const RESTART_CONFLICTS: u32 = 2000;

impl Instance<'_> {
    /// Builds the encoding, solves it with z3 until `deadline`, and decodes the model. Runs
    /// in a fresh z3 context of its own.
    pub fn solve(&self, deadline: Instant, options: SolveOptions) -> Outcome {
        if self.rounds < self.steps {
            return Outcome::Unsat;
        }
        z3::with_z3_config(&Config::new(), || self.solve_in_context(deadline, options))
    }

    fn solve_in_context(&self, deadline: Instant, options: SolveOptions) -> Outcome {
        let solver = Solver::new_for_logic("QF_FD").unwrap_or_default();
        let cancelled = || options.race.is_some_and(Race::is_finished);
        // Building a large formula takes a while too: the deadline stops it.
        let stop = || Instant::now() >= deadline || cancelled();
        let Some(model) = Encoding::build(self, &solver, &stop) else {
            return Outcome::Unknown;
        };
        match checked(&solver, deadline, options) {
            Checked::Sat(m) => Outcome::Sat(Box::new(model.decode(self, &m))),
            Checked::Unsat => Outcome::Unsat,
            Checked::Unknown => Outcome::Unknown,
        }
    }
}

/// What one [`checked`] run of a solver says.
pub(super) enum Checked {
    /// A model.
    Sat(z3::Model),
    /// Proven impossible.
    Unsat,
    /// The deadline passed, the race was lost or z3 gave up.
    Unknown,
}

/// Checks `solver`'s formula until `deadline` under `options` (restarts, the race), with
/// the parameters every encoding of this module is solved with.
pub(super) fn checked(solver: &Solver, deadline: Instant, options: SolveOptions) -> Checked {
    let cancelled = || options.race.is_some_and(Race::is_finished);
    for attempt in 1u32.. {
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() || cancelled() {
            break;
        }
        let mut params = Params::new();
        // Every pseudo-Boolean constraint of the encoding has unit weights, which z3
        // encodes with sorting networks here: the UNSAT instances of the DGX-1 allgather
        // search ran 2-5x faster than with the native PB solver. Weighted constraints
        // must not be added: z3 4.8.12's sorting encoding of them returned models that
        // violate them.
        params.set_symbol("sat.pb.solver", "sorting");
        params.set_u32(
            "timeout",
            remaining.as_millis().clamp(1, u32::MAX as u128) as u32,
        );
        if options.restarts {
            params.set_u32("sat.random_seed", attempt);
            params.set_u32("random_seed", attempt);
            let budget = RESTART_CONFLICTS.saturating_mul(luby(attempt));
            params.set_u32("sat.max_conflicts", budget);
            params.set_u32("max_conflicts", budget);
        }
        solver.set_params(&params);
        // Only the check itself may be interrupted: decoding a model from an interrupted
        // context would read missing values as false.
        let result = match options.race {
            Some(race) => race.guarded(|| solver.check()),
            None => Some(solver.check()),
        };
        match result {
            Some(SatResult::Sat) => {
                return solver.get_model().map_or(Checked::Unknown, Checked::Sat)
            }
            Some(SatResult::Unsat) => return Checked::Unsat,
            // Resume only where the conflict budget ran out, not after the deadline, a
            // give-up or an interrupt.
            Some(SatResult::Unknown)
                if options.restarts
                    && solver
                        .get_reason_unknown()
                        .is_some_and(|r| r.contains("conflicts")) => {}
            _ => break,
        }
    }
    Checked::Unknown
}

/// The i-th term (from 1) of the Luby restart sequence: 1, 1, 2, 1, 1, 2, 4, 1, ...
fn luby(i: u32) -> u32 {
    let mut i = i;
    loop {
        // The smallest k with 2^k - 1 ≥ i.
        let k = 32 - i.leading_zeros();
        if i == (1 << k) - 1 {
            return 1 << (k - 1);
        }
        i -= (1 << (k - 1)) - 1;
    }
}

/// The variables of one encoding, kept for decoding.
struct Encoding {
    /// Sends: (chunk index, link index, step 1..=S) → variable.
    sends: Vec<(usize, usize, usize, Bool)>,
    /// `extra[s][k]` ⇔ step s has at least k+2 rounds.
    extra: Vec<Vec<Bool>>,
}

impl Encoding {
    /// Asserts the formula of `inst` into `solver`; `None` once `stop` says so (checked after
    /// every chunk and every step, so the deadline also bounds building huge formulas).
    fn build(inst: &Instance, solver: &Solver, stop: &dyn Fn() -> bool) -> Option<Encoding> {
        let builder = Builder { inst, solver, stop };
        let at = builder.holdings()?;
        let sends = builder.send_vars()?;
        builder.sends_move_chunks(&sends, &at);
        builder.arrive_once(&sends, &at)?;
        let (extra, unit_copies) = builder.round_vars();
        builder.bandwidth(&sends, &unit_copies)?;
        if let Some(extra) = inst.extra_memory {
            builder.memory(&at, extra);
        }
        // Symmetry: interchangeable pieces (same pre and post) arrive in order at one rank.
        for (members, pivot) in ordered_classes(inst.collective, inst.symmetry) {
            for pair in members.windows(2) {
                for (later, earlier) in at[pair[1]][pivot].iter().zip(&at[pair[0]][pivot]).skip(1) {
                    solver.assert(later.implies(earlier));
                }
            }
        }
        Some(Encoding {
            sends: sends.sends,
            extra,
        })
    }

    fn decode(&self, inst: &Instance, model: &z3::Model) -> Algorithm {
        let truth = |b: &Bool| {
            model
                .eval(b, true)
                .and_then(|v| v.as_bool())
                .unwrap_or(false)
        };
        let mut steps: Vec<Step> = self
            .extra
            .iter()
            .map(|_| Step {
                rounds: 1,
                reduce: false,
                sends: Vec::new(),
            })
            .collect();
        for (c, l, s, x) in &self.sends {
            if truth(x) {
                let link = &inst.topology.links[*l];
                steps[s - 1].sends.push(Send {
                    chunk: inst.collective.chunks[*c].address,
                    src: link.src,
                    dst: link.dst,
                });
            }
        }
        // Rounds are derived from the sends themselves (the least each step needs), not read
        // from the round variables, which z3 may eliminate during preprocessing.
        for step in &mut steps {
            step.rounds = crate::load::rounds_needed(inst.index, inst.capacities, &step.sends);
        }
        for step in &mut steps {
            step.sends.sort();
        }
        let coll = inst.collective;
        Algorithm::made(
            crate::origin::Family::Smt,
            inst.topology.name.clone(),
            coll.clone(),
            steps,
        )
    }
}

/// The send variables of one encoding.
pub(super) struct Sends {
    /// (chunk index, link index, step 1..=S) → variable.
    pub(super) sends: Vec<(usize, usize, usize, Bool)>,
    /// `var_of[i]`: the send whose variable send i shares (i itself for a representative).
    pub(super) var_of: Vec<usize>,
    /// The sends into each (chunk, rank, step).
    pub(super) incoming: BTreeMap<(usize, usize, usize), Vec<usize>>,
}

/// Asserts the parts of one formula (see [`Encoding::build`]). Symmetric schedules share
/// one variable per orbit; constraints are stated for representatives only (a member's
/// would be the same constraint).
pub(super) struct Builder<'b, 'i> {
    pub(super) inst: &'b Instance<'i>,
    pub(super) solver: &'b Solver,
    pub(super) stop: &'b dyn Fn() -> bool,
}

impl Builder<'_, '_> {
    fn chunk_rank_rep(&self, c: usize, r: usize) -> (usize, usize) {
        self.inst
            .symmetry
            .map_or((c, r), |g| g.chunk_rank_rep(c, r))
    }

    fn chunk_link_rep(&self, c: usize, l: usize) -> (usize, usize) {
        self.inst
            .symmetry
            .map_or((c, l), |g| g.chunk_link_rep(c, l))
    }

    /// `at[c][r][s]` ⇔ chunk c is on rank r after step s: true where it starts, false
    /// before it can arrive, monotone, true at the end where needed.
    fn holdings(&self) -> Option<Vec<Vec<Vec<Bool>>>> {
        let (inst, solver) = (self.inst, self.solver);
        let coll = inst.collective;
        let (n, steps) = (inst.topology.ranks, inst.steps);
        let ff = Bool::from_bool(false);
        let tt = Bool::from_bool(true);
        let mut at: Vec<Vec<Vec<Bool>>> = Vec::with_capacity(coll.chunks.len());
        for (c, chunk) in coll.chunks.iter().enumerate() {
            if (self.stop)() {
                return None;
            }
            let mut per_rank: Vec<Vec<Bool>> = Vec::with_capacity(n);
            for r in 0..n {
                let (rc, rr) = self.chunk_rank_rep(c, r);
                if (rc, rr) != (c, r) {
                    let shared = if rc == c { &per_rank[rr] } else { &at[rc][rr] };
                    per_rank.push(shared.clone());
                    continue;
                }
                let first = nearest(&inst.index.distances, &chunk.pre, r);
                let row: Vec<Bool> = (0..=steps)
                    .map(|s| {
                        if chunk.pre.contains(&r) {
                            tt.clone()
                        } else if first.is_none_or(|d| s < d) || s == 0 {
                            ff.clone()
                        } else {
                            Bool::new_const(format!("at_{c}_{r}_{s}"))
                        }
                    })
                    .collect();
                for s in 1..=steps {
                    solver.assert(row[s - 1].implies(&row[s]));
                }
                if chunk.post.contains(&r) {
                    solver.assert(&row[steps]);
                }
                per_rank.push(row);
            }
            at.push(per_rank);
        }
        Some(at)
    }

    /// The send variables, with the sound reachability pruning: a chunk crosses a link in
    /// step s only if its sender can hold it by then and a rank needing it is still close
    /// enough.
    fn send_vars(&self) -> Option<Sends> {
        let inst = self.inst;
        let steps = inst.steps;
        let distances = &inst.index.distances;
        let mut out = Sends {
            sends: Vec::new(),
            var_of: Vec::new(),
            incoming: BTreeMap::new(),
        };
        let mut send_index: BTreeMap<(usize, usize, usize), usize> = BTreeMap::new();
        for (c, chunk) in inst.collective.chunks.iter().enumerate() {
            if (self.stop)() {
                return None;
            }
            let needers: Vec<usize> = (chunk.post.iter().copied())
                .filter(|r| !chunk.pre.contains(r))
                .collect();
            for (l, link) in inst.topology.links.iter().enumerate() {
                let (u, v) = (link.src, link.dst);
                if chunk.pre.contains(&v) {
                    continue;
                }
                let (rc, rl) = self.chunk_link_rep(c, l);
                for s in 1..=steps {
                    let sender_can = nearest(distances, &chunk.pre, u).is_some_and(|d| d < s);
                    let useful = needers
                        .iter()
                        .any(|&w| distances[v][w].is_some_and(|d| d <= steps - s));
                    if sender_can && useful {
                        let shared = send_index.get(&(rc, rl, s)).copied();
                        out.var_of.push(shared.unwrap_or(out.sends.len()));
                        let x = match shared {
                            Some(i) => out.sends[i].3.clone(),
                            None => Bool::new_const(format!("x_{c}_{u}_{v}_{s}")),
                        };
                        send_index.insert((c, l, s), out.sends.len());
                        out.incoming
                            .entry((c, v, s))
                            .or_default()
                            .push(out.sends.len());
                        out.sends.push((c, l, s, x));
                    }
                }
            }
        }
        Some(out)
    }

    /// A send needs the chunk at its sender before the step and brings it to its receiver,
    /// which did not hold it yet.
    fn sends_move_chunks(&self, sends: &Sends, at: &[Vec<Vec<Bool>>]) {
        let representatives =
            (sends.sends.iter().enumerate()).filter(|&(i, _)| sends.var_of[i] == i);
        for (_, &(c, l, s, ref x)) in representatives {
            let link = &self.inst.topology.links[l];
            self.solver.assert(x.implies(&at[c][link.src][s - 1]));
            self.solver.assert(x.implies(&at[c][link.dst][s]));
            self.solver.assert(x.implies(at[c][link.dst][s - 1].not()));
        }
    }

    /// Arrival needs exactly one sender in that step.
    fn arrive_once(&self, sends: &Sends, at: &[Vec<Vec<Bool>>]) -> Option<()> {
        let (inst, solver) = (self.inst, self.solver);
        for (c, chunk) in inst.collective.chunks.iter().enumerate() {
            if (self.stop)() {
                return None;
            }
            for v in (0..inst.topology.ranks).filter(|v| !chunk.pre.contains(v)) {
                if self.chunk_rank_rep(c, v) != (c, v) {
                    continue;
                }
                for s in 1..=inst.steps {
                    let arrives = Bool::and(&[&at[c][v][s], &at[c][v][s - 1].not()]);
                    let Some(ids) = sends.incoming.get(&(c, v, s)) else {
                        solver.assert(arrives.not());
                        continue;
                    };
                    let xs: Vec<&Bool> = ids.iter().map(|&i| &sends.sends[i].3).collect();
                    solver.assert(arrives.implies(Bool::or(&xs)));
                    if xs.len() > 1 {
                        let literals = distinct_literals(solver, &sends.sends, &sends.var_of, ids);
                        let weighted: Vec<(&Bool, i32)> = literals.iter().map(|x| (x, 1)).collect();
                        solver.assert(Bool::pb_le(&weighted, 1));
                    }
                }
            }
        }
        Some(())
    }

    /// Rounds per step, order-encoded: `extra[s][k]` ⇔ r_s ≥ k + 2 (none when fixed); and
    /// `unit_copies[s][k][j]`, the j-th capacity unit of step s's extra round k.
    pub(super) fn round_vars(&self) -> (Vec<Vec<Bool>>, Vec<Vec<Vec<Bool>>>) {
        let (inst, solver) = (self.inst, self.solver);
        let slack = inst.rounds - inst.steps;
        let extra: Vec<Vec<Bool>> = (0..inst.steps)
            .map(|s| {
                let step_slack = inst
                    .round_caps
                    .get(s)
                    .map_or(slack, |&cap| slack.min(cap.saturating_sub(1)));
                (0..step_slack)
                    .map(|k| Bool::new_const(format!("extra_{s}_{k}")))
                    .collect()
            })
            .collect();
        for row in &extra {
            for k in 1..row.len() {
                solver.assert(row[k].implies(&row[k - 1]));
            }
        }
        if slack > 0 {
            let all: Vec<(&Bool, i32)> = extra.iter().flatten().map(|b| (b, 1)).collect();
            solver.assert(Bool::pb_le(&all, slack as i32));
        }
        let caps = inst.capacities;
        let max_cap = (caps.links.iter().chain(&caps.switches))
            .copied()
            .max()
            .unwrap_or(1) as usize;
        let unit_copies = (extra.iter().enumerate())
            .map(|(s, row)| {
                (row.iter().enumerate())
                    .map(|(k, e)| {
                        (0..max_cap)
                            .map(|j| {
                                let z = Bool::new_const(format!("unit_{s}_{k}_{j}"));
                                solver.assert(z.implies(e));
                                z
                            })
                            .collect()
                    })
                    .collect()
            })
            .collect();
        (extra, unit_copies)
    }

    /// Bandwidth: per step, each link and switch constraint carries at most its capacity
    /// times the step's rounds.
    pub(super) fn bandwidth(&self, sends: &Sends, unit_copies: &[Vec<Vec<Bool>>]) -> Option<()> {
        let inst = self.inst;
        // Capacity groups: the links, then the switch constraints.
        let mut caps: Vec<u32> = inst.capacities.links.clone();
        let switch_base = caps.len();
        caps.extend(&inst.capacities.switches);
        let link_groups: Vec<Vec<usize>> = (inst.index.governing.iter())
            .map(|g| g.iter().map(|&k| switch_base + k).collect())
            .collect();
        for s in 1..=inst.steps {
            if (self.stop)() {
                return None;
            }
            // Send indices per link and switch constraint.
            let mut per_group: Vec<Vec<usize>> = vec![Vec::new(); caps.len()];
            for (i, &(_, l, st, _)) in sends.sends.iter().enumerate() {
                if st != s {
                    continue;
                }
                per_group[l].push(i);
                for &g in &link_groups[l] {
                    per_group[g].push(i);
                }
            }
            for (g, ids) in per_group.iter().enumerate() {
                let cap = caps[g] as usize;
                // A constraint whose link or switch is not its orbit's representative is the
                // same constraint as the representative's.
                let represents = inst
                    .symmetry
                    .is_none_or(|grp| match g.checked_sub(switch_base) {
                        None => grp.link_rep(g) == g,
                        Some(k) => grp.switch_rep(k) == k,
                    });
                if ids.len() <= cap || !represents {
                    continue;
                }
                self.at_most_capacity(sends, ids, cap, &unit_copies[s - 1]);
            }
        }
        Some(())
    }

    /// Σ sends `ids` ≤ cap·r_s = cap + cap·Σ_k extra[s][k], with unit weights only: each
    /// extra round contributes `cap` unit literals z ⇒ extra (`units`; sound: Σ z ≤
    /// cap·Σ extra; complete: z = extra), so Σ sends + Σ ¬z ≤ cap + |z|.
    fn at_most_capacity(&self, sends: &Sends, ids: &[usize], cap: usize, units: &[Vec<Bool>]) {
        let xs = distinct_literals(self.solver, &sends.sends, &sends.var_of, ids);
        let mut terms: Vec<(&Bool, i32)> = xs.iter().map(|x| (x, 1)).collect();
        let units: Vec<&Bool> = units
            .iter()
            .flat_map(|row| &row[..cap.min(row.len())])
            .collect();
        let negated: Vec<Bool> = units.iter().map(|z| z.not()).collect();
        terms.extend(negated.iter().map(|z| (z, 1)));
        self.solver
            .assert(Bool::pb_le(&terms, (cap + units.len()) as i32));
    }

    /// Memory: per rank, chunks held but not started with ≤ |post(r)| + `extra`. Holdings
    /// only grow (`at` is monotone in s), so the state after the last step bounds every step.
    fn memory(&self, at: &[Vec<Vec<Bool>>], extra: usize) {
        let (coll, steps, solver) = (self.inst.collective, self.inst.steps, self.solver);
        for r in 0..self.inst.topology.ranks {
            let limit = coll.chunks.iter().filter(|c| c.post.contains(&r)).count() + extra;
            let received: Vec<&Bool> = (at.iter().zip(&coll.chunks))
                .filter(|(_, chunk)| !chunk.pre.contains(&r))
                .map(|(rows, _)| &rows[r][steps])
                .collect();
            if received.len() <= limit {
                continue;
            }
            // Symmetric rows share variables: repeats are counted through fresh literals
            // implied by the shared one (see `distinct_literals`).
            let mut seen: BTreeMap<(usize, usize), ()> = BTreeMap::new();
            let literals: Vec<Bool> = (0..coll.chunks.len())
                .filter(|&c| !coll.chunks[c].pre.contains(&r))
                .zip(received)
                .map(|(c, held)| {
                    if seen.insert(self.chunk_rank_rep(c, r), ()).is_none() {
                        held.clone()
                    } else {
                        let copy = Bool::fresh_const("held");
                        solver.assert(held.implies(&copy));
                        copy
                    }
                })
                .collect();
            let terms: Vec<(&Bool, i32)> = literals.iter().map(|x| (x, 1)).collect();
            solver.assert(Bool::pb_le(&terms, limit as i32));
        }
    }
}

/// Unit-weight literals counting the sends `ids` in a cardinality constraint, where a send
/// sharing its variable with an earlier one in the list (symmetric sends) is counted through
/// a fresh literal implied by that variable. Repeating the variable itself would make z3
/// 4.8.12 merge the repeats into one weighted literal, and its sorting-network encoding of
/// weighted constraints returned models that violate them. The copy may be true alone,
/// which only over-counts, and any model can set it equal to the variable.
fn distinct_literals(
    solver: &Solver,
    sends: &[(usize, usize, usize, Bool)],
    var_of: &[usize],
    ids: &[usize],
) -> Vec<Bool> {
    let mut seen: BTreeMap<usize, usize> = BTreeMap::new();
    ids.iter()
        .map(|&i| {
            let x = &sends[var_of[i]].3;
            let count = seen.entry(var_of[i]).or_insert(0);
            *count += 1;
            if *count == 1 {
                x.clone()
            } else {
                let copy = Bool::fresh_const("copy");
                solver.assert(x.implies(&copy));
                copy
            }
        })
        .collect()
}

/// Hop distance from the nearest of `sources` to `r`.
fn nearest(distances: &[Vec<Option<usize>>], sources: &[usize], r: usize) -> Option<usize> {
    sources.iter().filter_map(|&p| distances[p][r]).min()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collective::Kind;
    use crate::smt::symmetry::symmetry_ladder;
    use std::time::Duration;

    /// Solves ring:4 allgather (2, 2, 1) under `symmetry`.
    fn ring4_allgather(symmetry: Option<&Group>) -> Outcome {
        let topology = crate::topology::load("ring:4").unwrap();
        let collective = Collective::new(Kind::AllGather, 4, 0, 1).unwrap();
        let instance = Instance {
            topology: &topology,
            capacities: &topology.capacities().unwrap(),
            index: &topology.index(),
            collective: &collective,
            steps: 2,
            rounds: 2,
            symmetry,
            round_caps: &[],
            extra_memory: None,
        };
        instance.solve(
            Instant::now() + Duration::from_secs(60),
            SolveOptions::default(),
        )
    }

    #[test]
    fn a_symmetric_restriction_can_be_unsat_when_the_instance_is_not() {
        let topology = crate::topology::load("ring:4").unwrap();
        let collective = Collective::new(Kind::AllGather, 4, 0, 1).unwrap();
        let ladder = symmetry_ladder(
            &topology,
            &topology.index(),
            &collective,
            &topology.automorphisms(64),
            None,
        );
        // A reflection fixing rank r would have r receive the opposite chunk from both sides.
        assert!(matches!(ring4_allgather(Some(&ladder[0])), Outcome::Unsat));
        // The rotations admit the schedule, and so does the full instance.
        assert!(matches!(ring4_allgather(Some(&ladder[1])), Outcome::Sat(_)));
        let Outcome::Sat(algorithm) = ring4_allgather(None) else {
            panic!("ring:4 allgather (2,2,1) is SAT");
        };
        crate::check::check(&algorithm, &topology).unwrap();
    }

    #[test]
    fn luby_sequence() {
        let terms: Vec<u32> = (1..=15).map(luby).collect();
        assert_eq!(terms, [1, 1, 2, 1, 1, 2, 4, 1, 1, 2, 1, 1, 2, 4, 8]);
    }
}
