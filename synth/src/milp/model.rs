//! One MILP instance (DESIGN §4): chunks split in C pieces, S steps, a target size M.
//!
//! Variables: binary `x[c,l,s]` (chunk c crosses link l in step s), one per orbit of the
//! sketch's symmetry group and only where the chunk can be at the link's source by step s and
//! can still reach a rank that needs it afterwards; continuous `w[l,s]` (time link l is busy
//! in step s) and `d[s]` (duration of step s). Holdings are not variables: a rank holds a
//! chunk after step s if it started with it or received it in an earlier step.
//!
//! Constraints: every rank that needs a chunk receives it exactly once (any other rank at most
//! once); a rank sends a chunk only once it holds it; `w[l,s] = beta_l * bytes * load(l,s)`;
//! `d[s] >= alpha_l * x[c,l,s] + w[l,s]` for every variable on l (the latency counts once a
//! link is used); `d[s] >= beta_k * bytes * load(k,s)` for every switch constraint k.
//! Objective: minimize the sum of the d[s].

use crate::algorithm::{Algorithm, Send, Step};
use crate::collective::Collective;
use crate::engine::check_deadline;
use crate::sketch::Routing;
use crate::symmetry::Group;
use crate::topology::Topology;
use good_lp::{constraint, highs, variable, Expression, ProblemVariables, SolverModel, Variable};
use highs::{HighsModelStatus, HighsSolutionStatus};
use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

/// A (chunk, link, step) triple.
type Key = (usize, usize, usize);

/// A HiGHS option value.
enum OptionValue {
    Float(f64),
    Int(i32),
}

/// Static part of an instance: shared by the solves at different target sizes.
pub struct Encoding<'a> {
    topology: &'a Topology,
    coll: &'a Collective,
    group: Group,
    steps: usize,
    /// Every usable (chunk, link, step), with its variable's representative key.
    uses: Vec<(Key, Key)>,
    /// Representative keys, in variable order.
    reps: Vec<(usize, usize, usize)>,
    /// Extra memory M: per rank, received chunks ≤ postcondition chunks + M.
    extra_memory: Option<usize>,
}

/// The answer of one solve.
pub struct Solved {
    /// The algorithm (steps without sends removed, rounds from integer capacities); `None`
    /// when the model is infeasible or a limit stopped the solver before any solution.
    pub algorithm: Option<Algorithm>,
    /// The solver's objective (predicted time in µs at the target size), with an algorithm.
    pub objective: Option<f64>,
    /// Whether HiGHS proved the answer (optimal within the gap, or infeasible).
    pub proven: bool,
    /// The limit that stopped the solver before it proved its answer, if one did.
    pub stopped: Option<Stop>,
}

/// A limit that stopped one solve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// The deterministic work limit (branch-and-bound nodes).
    Work,
    /// The wall-clock time limit.
    Time,
}

impl Stop {
    /// `"work"` or `"time"`.
    pub fn name(self) -> &'static str {
        match self {
            Stop::Work => "work",
            Stop::Time => "time",
        }
    }
}

/// What bounds one solve.
#[derive(Debug, Clone, Copy)]
pub struct SolveLimits {
    /// Wall-clock seconds for the solver.
    pub seconds: f64,
    /// Relative MIP gap.
    pub gap: f64,
    /// Branch-and-bound nodes (`None`: no work limit). With a work limit HiGHS runs on one
    /// thread with a fixed seed, so the answer depends only on the model.
    pub nodes: Option<u64>,
    /// When building the model must stop ([`crate::engine::TimeLimitReached`]).
    pub deadline: Instant,
}

impl<'a> Encoding<'a> {
    /// Builds the variable layout; `None` if some needed chunk cannot arrive in `steps` steps.
    /// Fails with [`crate::engine::TimeLimitReached`] once `deadline` passes.
    pub fn new(
        topology: &'a Topology,
        coll: &'a Collective,
        routing: &Routing,
        steps: usize,
        deadline: Instant,
    ) -> anyhow::Result<Option<Encoding<'a>>> {
        let phase = || {
            format!(
                "building the MILP model for C={} pieces and {steps} steps",
                coll.chunks_per_rank
            )
        };
        let group = Group::new_before(topology, coll, &routing.generators, Some(deadline))
            .map_err(|e| match crate::engine::time_limit_phase(&e) {
                Some(_) => crate::engine::TimeLimitReached { phase: phase() }.into(),
                None => e,
            })?;
        let mut uses = Vec::new();
        let mut reps: Vec<(usize, usize, usize)> = Vec::new();
        let mut seen: HashMap<(usize, usize, usize), ()> = HashMap::new();
        for c in 0..coll.chunks.len() {
            check_deadline(deadline, phase)?;
            let links = routing.chunk_links(topology, coll, c);
            let early = Routing::hops(topology, coll, c, &links);
            let chunk = &coll.chunks[c];
            if chunk
                .post
                .iter()
                .any(|&r| early[r].is_none_or(|e| e > steps))
            {
                return Ok(None);
            }
            let late = hops_to_need(topology, coll, c, &links);
            for &l in &links {
                let link = &topology.links[l];
                if chunk.pre.contains(&link.dst) {
                    continue;
                }
                let (Some(e), Some(f)) = (early[link.src], late[link.dst]) else {
                    continue;
                };
                let (rc, rl) = group.chunk_link_rep(c, l);
                for s in e..steps {
                    if s + 1 + f > steps {
                        break;
                    }
                    let key = (rc, rl, s);
                    uses.push(((c, l, s), key));
                    if seen.insert(key, ()).is_none() {
                        reps.push(key);
                    }
                }
            }
        }
        Ok(Some(Encoding {
            topology,
            coll,
            group,
            steps,
            uses,
            reps,
            extra_memory: None,
        }))
    }

    /// The same model with SCCL's extra-memory limit: every rank receives at most as many
    /// chunks it did not start with as its postcondition has, plus `extra_memory` (a rank
    /// receives a chunk at most once and keeps it, so the total bounds every step).
    pub fn with_extra_memory(mut self, extra_memory: Option<usize>) -> Self {
        self.extra_memory = extra_memory;
        self
    }

    /// Number of binary variables (after symmetry and pruning).
    pub fn variables(&self) -> usize {
        self.reps.len()
    }

    /// Order of the symmetry group in use.
    pub fn symmetry_order(&self) -> usize {
        self.group.order()
    }

    /// Solves at nccl-tests size `size` bytes within `limits`.
    /// `start`, an algorithm for the same collective at the same C whose sends are all
    /// variables of this model, is passed to HiGHS as the first incumbent.
    pub fn solve(
        &self,
        size: f64,
        limits: &SolveLimits,
        start: Option<&Algorithm>,
    ) -> anyhow::Result<Solved> {
        let phase = || {
            format!(
                "building the MILP constraints for C={} pieces and {} steps",
                self.coll.chunks_per_rank, self.steps
            )
        };
        let deadline = limits.deadline;
        check_deadline(deadline, phase)?;
        // Checks the deadline every 4096 calls (the loops below run millions of times on
        // large models).
        let ticks = std::cell::Cell::new(0u32);
        let tick = || {
            ticks.set(ticks.get().wrapping_add(1));
            if ticks.get().is_multiple_of(4096) {
                check_deadline(deadline, phase)
            } else {
                Ok(())
            }
        };
        let topo = self.topology;
        let coll = self.coll;
        let bytes = size / (coll.kind.units_per_buffer(coll.ranks) * coll.chunks_per_rank) as f64;
        let initial = start.and_then(|a| self.start_values(a));
        let mut vars = ProblemVariables::new();
        // Columns are numbered in the order variables are added: x in `reps` order, then d.
        let x: HashMap<(usize, usize, usize), Variable> = self
            .reps
            .iter()
            .map(|&k| (k, vars.add(variable().binary())))
            .collect();
        let x_column: HashMap<(usize, usize, usize), usize> =
            self.reps.iter().enumerate().map(|(i, &k)| (k, i)).collect();
        let d: Vec<Variable> = (0..self.steps)
            .map(|_| vars.add(variable().min(0.0)))
            .collect();
        let d_column = |s: usize| self.reps.len() + s;
        let var = |key: &(usize, usize, usize)| x[key];
        // Per (chunk, rank): incoming variables by step; per (link, step): load. Maps whose
        // order makes constraints are ordered, so the same input gives the same model.
        let mut incoming: HashMap<(usize, usize), Vec<(usize, Variable)>> = HashMap::new();
        let mut load: BTreeMap<(usize, usize), Expression> = BTreeMap::new();
        for &((c, l, s), key) in &self.uses {
            tick()?;
            let v = var(&key);
            incoming
                .entry((c, topo.links[l].dst))
                .or_default()
                .push((s, v));
            *load.entry((l, s)).or_insert_with(|| Expression::from(0.0)) += v;
        }
        let mut constraints = Vec::new();
        // Receive exactly once where needed, at most once elsewhere (orbit representatives).
        for (c, chunk) in coll.chunks.iter().enumerate() {
            tick()?;
            for r in 0..topo.ranks {
                if chunk.pre.contains(&r) || self.group.chunk_rank_rep(c, r) != (c, r) {
                    continue;
                }
                let total: Expression = incoming
                    .get(&(c, r))
                    .map_or(Expression::from(0.0), |v| v.iter().map(|&(_, x)| x).sum());
                if chunk.post.contains(&r) {
                    constraints.push(constraint!(total == 1.0));
                } else if incoming.contains_key(&(c, r)) {
                    constraints.push(constraint!(total <= 1.0));
                }
            }
        }
        // Extra memory: chunks received by a rank ≤ its postcondition's chunks + M.
        if let Some(extra) = self.extra_memory {
            for r in 0..topo.ranks {
                let limit = coll.chunks.iter().filter(|c| c.post.contains(&r)).count() + extra;
                let total: Expression = (0..coll.chunks.len())
                    .filter_map(|c| incoming.get(&(c, r)))
                    .flat_map(|list| list.iter().map(|&(_, x)| x))
                    .sum();
                constraints.push(constraint!(total <= limit as f64));
            }
        }
        check_deadline(deadline, phase)?;
        // Send only what is held; latency and busy time per link.
        let mut busy: BTreeMap<(usize, usize), Variable> = BTreeMap::new();
        for &((c, l, s), key) in &self.uses {
            tick()?;
            if key != (c, l, s) {
                continue;
            }
            let link = &topo.links[l];
            let v = var(&key);
            if !coll.chunks[c].pre.contains(&link.src) {
                let held: Expression = incoming
                    .get(&(c, link.src))
                    .map_or(Expression::from(0.0), |list| {
                        list.iter().filter(|&&(t, _)| t < s).map(|&(_, x)| x).sum()
                    });
                constraints.push(constraint!(v <= held));
            }
            let lr = self.group.link_rep(l);
            let w = *busy
                .entry((lr, s))
                .or_insert_with(|| vars.add(variable().min(0.0)));
            constraints.push(constraint!(d[s] >= link.alpha * v + w));
        }
        for (&(lr, s), &w) in &busy {
            tick()?;
            let beta = bytes / (topo.links[lr].bandwidth * 1e3);
            let expr = load
                .get(&(lr, s))
                .cloned()
                .unwrap_or_else(|| Expression::from(0.0));
            constraints.push(constraint!(w == beta * expr));
        }
        check_deadline(deadline, phase)?;
        for (k, sw) in topo.switches.iter().enumerate() {
            if self.group.switch_rep(k) != k {
                continue;
            }
            check_deadline(deadline, phase)?;
            let beta = bytes / (sw.bandwidth * 1e3);
            for (s, &ds) in d.iter().enumerate() {
                let mut total = Expression::from(0.0);
                let mut any = false;
                for (l, link) in topo.links.iter().enumerate() {
                    if sw.covers(link.src, link.dst) {
                        if let Some(e) = load.get(&(l, s)) {
                            total += e.clone();
                            any = true;
                        }
                    }
                }
                if any {
                    constraints.push(constraint!(ds >= beta * total));
                }
            }
        }
        // A step lasts at least a rank's incoming (outgoing) bytes over the sum of its links'
        // bandwidths (the slowest link is never faster than their average): this gives the
        // LP relaxation the per-rank cut bound.
        let mut into: BTreeMap<(usize, usize), Expression> = BTreeMap::new();
        let mut out_of: BTreeMap<(usize, usize), Expression> = BTreeMap::new();
        for (&(l, s), e) in &load {
            tick()?;
            let link = &topo.links[l];
            *into
                .entry((link.dst, s))
                .or_insert_with(|| Expression::from(0.0)) += e.clone();
            *out_of
                .entry((link.src, s))
                .or_insert_with(|| Expression::from(0.0)) += e.clone();
        }
        let rank_rep = |r: usize| {
            (0..self.group.order())
                .map(|g| self.group.ranks[g][r])
                .min()
                .unwrap_or(r)
        };
        for (incoming, sums) in [(true, &into), (false, &out_of)] {
            for (&(r, s), e) in sums {
                tick()?;
                if rank_rep(r) != r {
                    continue;
                }
                let bw: f64 = topo
                    .links
                    .iter()
                    .filter(|l| if incoming { l.dst == r } else { l.src == r })
                    .map(|l| l.bandwidth)
                    .sum();
                constraints.push(constraint!(d[s] >= bytes / (bw * 1e3) * e.clone()));
            }
        }
        // Pieces of one original chunk are interchangeable: order them by how early their
        // sources send them (one original chunk per orbit of the symmetry group).
        check_deadline(deadline, phase)?;
        let mut first_sends: HashMap<usize, Vec<(usize, Key)>> = HashMap::new();
        for &((c, l, s), key) in &self.uses {
            tick()?;
            if coll.chunks[c].pre.contains(&topo.links[l].src) {
                first_sends.entry(c).or_default().push((s, key));
            }
        }
        for pieces in self.piece_groups() {
            check_deadline(deadline, phase)?;
            let score = |c: usize| -> Expression {
                let mut e = Expression::from(0.0);
                for &(s, key) in first_sends.get(&c).into_iter().flatten() {
                    e += ((self.steps - s) as f64) * var(&key);
                }
                e
            };
            for w in pieces.windows(2) {
                constraints.push(constraint!(score(w[0]) >= score(w[1])));
            }
        }
        let objective: Expression = d.iter().copied().sum();
        let columns = vars.len();
        let mut model = vars.minimise(objective).using(highs);
        for c in constraints {
            model.add_constraint(c);
        }
        check_deadline(deadline, phase)?;
        // good_lp builds the HiGHS model (columns in variable order); it is solved here so
        // that a node limit can be told from a time limit.
        let mut model = model
            .try_into_inner()
            .map_err(|e| anyhow::anyhow!("HiGHS could not build the model: {e}"))?;
        let option = |model: &mut highs::Model, name: &str, value: OptionValue| {
            let result = match value {
                OptionValue::Float(v) => model.try_set_option(name, v),
                OptionValue::Int(v) => model.try_set_option(name, v),
            };
            result.map_err(|e| anyhow::anyhow!("HiGHS option {name}: {e:?}"))
        };
        option(
            &mut model,
            "time_limit",
            OptionValue::Float(limits.seconds.max(0.01)),
        )?;
        option(&mut model, "mip_rel_gap", OptionValue::Float(limits.gap))?;
        // One thread and a fixed seed: with a work limit the answer is a function of the
        // model alone.
        option(&mut model, "threads", OptionValue::Int(1))?;
        option(&mut model, "random_seed", OptionValue::Int(0))?;
        option(&mut model, "mip_heuristic_effort", OptionValue::Float(0.3))?;
        if let Some(nodes) = limits.nodes {
            let nodes = nodes.clamp(1, i32::MAX as u64) as i32;
            option(&mut model, "mip_max_nodes", OptionValue::Int(nodes))?;
        }
        if let Some(on) = initial {
            let mut values = vec![0.0; columns];
            for k in &on {
                values[x_column[k]] = 1.0;
            }
            // A start HiGHS rejects only costs the warm start.
            let _ = model.try_set_solution(Some(&values), None, None, None);
        }
        let solved = model
            .try_solve()
            .map_err(|e| anyhow::anyhow!("HiGHS failed: {e:?}"))?;
        let stopped = match solved.status() {
            HighsModelStatus::ReachedSolutionLimit | HighsModelStatus::ReachedIterationLimit => {
                Some(Stop::Work)
            }
            HighsModelStatus::ReachedTimeLimit | HighsModelStatus::ReachedInterrupt => {
                Some(Stop::Time)
            }
            HighsModelStatus::Optimal
            | HighsModelStatus::ObjectiveBound
            | HighsModelStatus::ObjectiveTarget
            | HighsModelStatus::Infeasible
            | HighsModelStatus::UnboundedOrInfeasible => None,
            other => anyhow::bail!("HiGHS failed: model status {other:?}"),
        };
        let infeasible = matches!(
            solved.status(),
            HighsModelStatus::Infeasible | HighsModelStatus::UnboundedOrInfeasible
        );
        if infeasible || solved.primal_solution_status() != HighsSolutionStatus::Feasible {
            return Ok(Solved {
                algorithm: None,
                objective: None,
                proven: infeasible,
                stopped,
            });
        }
        let solution = solved.get_solution();
        let values = solution.columns();
        let objective: f64 = (0..self.steps).map(|s| values[d_column(s)]).sum();
        let mut sends: Vec<Vec<Send>> = vec![Vec::new(); self.steps];
        for &((c, l, s), key) in &self.uses {
            if values[x_column[&key]] > 0.5 {
                let link = &topo.links[l];
                sends[s].push(Send {
                    chunk: coll.chunks[c].address,
                    src: link.src,
                    dst: link.dst,
                });
            }
        }
        prune_useless(coll, &mut sends);
        let algorithm = build_algorithm(topo, coll, sends)?;
        Ok(Solved {
            algorithm: Some(algorithm),
            objective: Some(objective),
            proven: stopped.is_none(),
            stopped,
        })
    }
}

impl Encoding<'_> {
    /// For one original chunk per orbit of the group: its pieces (chunk indices), in order.
    fn piece_groups(&self) -> Vec<Vec<usize>> {
        let c = self.coll.chunks_per_rank;
        if c < 2 {
            return Vec::new();
        }
        let mut by_original: std::collections::BTreeMap<usize, Vec<usize>> =
            std::collections::BTreeMap::new();
        for (i, ch) in self.coll.chunks.iter().enumerate() {
            by_original.entry(ch.address / c).or_default().push(i);
        }
        let mut groups = Vec::new();
        for (_, mut pieces) in by_original {
            pieces.sort_by_key(|&i| self.coll.chunks[i].address);
            let first = &self.coll.chunks[pieces[0]];
            let same = pieces.len() == c
                && pieces.iter().enumerate().all(|(k, &i)| {
                    let ch = &self.coll.chunks[i];
                    ch.address % c == k && ch.pre == first.pre && ch.post == first.post
                });
            // Orbit representative: no group element maps it to a smaller original chunk.
            let rep = (0..self.group.order()).all(|g| self.group.chunks[g][pieces[0]] >= pieces[0]);
            if same && rep {
                groups.push(pieces);
            }
        }
        groups
    }

    /// The variables (representative keys) `start` sets, if every send of `start` is a
    /// variable of this model and its sends are invariant under the group.
    fn start_values(
        &self,
        start: &Algorithm,
    ) -> Option<std::collections::HashSet<(usize, usize, usize)>> {
        if start.collective != *self.coll || start.steps.len() > self.steps {
            return None;
        }
        let index: HashMap<(usize, usize, usize), (usize, usize, usize)> = self
            .uses
            .iter()
            .map(|&((c, l, s), key)| ((self.coll.chunks[c].address, l, s), key))
            .collect();
        let link_index: HashMap<(usize, usize), usize> = self
            .topology
            .links
            .iter()
            .enumerate()
            .map(|(i, l)| ((l.src, l.dst), i))
            .collect();
        let mut on = std::collections::HashSet::new();
        let mut count = 0;
        for (s, step) in start.steps.iter().enumerate() {
            for x in &step.sends {
                let l = *link_index.get(&(x.src, x.dst))?;
                on.insert(*index.get(&(x.chunk, l, s))?);
                count += 1;
            }
        }
        // Every use of a chosen representative must be a send of `start` (symmetric start).
        let uses_on = self.uses.iter().filter(|(_, key)| on.contains(key)).count();
        (uses_on == count).then_some(on)
    }
}

/// Fewest hops from each rank to a rank that needs chunk `c` and lacks it (`Some(0)` for
/// those ranks), over `links`.
fn hops_to_need(
    topology: &Topology,
    coll: &Collective,
    c: usize,
    links: &[usize],
) -> Vec<Option<usize>> {
    let chunk = &coll.chunks[c];
    let needers: Vec<usize> = chunk
        .post
        .iter()
        .copied()
        .filter(|r| !chunk.pre.contains(r))
        .collect();
    crate::sketch::link_distances(topology, links, &needers, false)
}

/// Removes sends to ranks that neither need the chunk nor forward it later.
fn prune_useless(coll: &Collective, sends: &mut [Vec<Send>]) {
    let need: HashMap<usize, &[usize]> = coll
        .chunks
        .iter()
        .map(|c| (c.address, &c.post[..]))
        .collect();
    loop {
        let mut removed = false;
        for s in 0..sends.len() {
            let keep: Vec<Send> = sends[s]
                .iter()
                .filter(|x| {
                    need[&x.chunk].contains(&x.dst)
                        || sends[s + 1..]
                            .iter()
                            .flatten()
                            .any(|y| y.chunk == x.chunk && y.src == x.dst)
                })
                .copied()
                .collect();
            removed |= keep.len() != sends[s].len();
            sends[s] = keep;
        }
        if !removed {
            break;
        }
    }
}

/// Steps with their integer rounds under the topology's capacities; empty steps dropped.
pub fn build_algorithm(
    topology: &Topology,
    coll: &Collective,
    sends: Vec<Vec<Send>>,
) -> anyhow::Result<Algorithm> {
    let caps = topology.capacities()?;
    let link_index: HashMap<(usize, usize), usize> = topology
        .links
        .iter()
        .enumerate()
        .map(|(i, l)| ((l.src, l.dst), i))
        .collect();
    let mut steps = Vec::new();
    for mut list in sends.into_iter().filter(|s| !s.is_empty()) {
        list.sort();
        let mut link_load = vec![0u32; topology.links.len()];
        let mut switch_load = vec![0u32; topology.switches.len()];
        for x in &list {
            link_load[link_index[&(x.src, x.dst)]] += 1;
            for (k, sw) in topology.switches.iter().enumerate() {
                if sw.covers(x.src, x.dst) {
                    switch_load[k] += 1;
                }
            }
        }
        let need = |load: &[u32], cap: &[u32]| {
            load.iter()
                .zip(cap)
                .map(|(&l, &c)| l.div_ceil(c.max(1)))
                .max()
                .unwrap_or(0)
        };
        let rounds = need(&link_load, &caps.links)
            .max(need(&switch_load, &caps.switches))
            .max(1);
        steps.push(Step {
            rounds,
            reduce: false,
            sends: list,
        });
    }
    Ok(Algorithm::made(
        crate::origin::Family::Milp,
        topology.name.clone(),
        coll.clone(),
        steps,
    ))
}
