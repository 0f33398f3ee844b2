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
use crate::topology::{Topology, TopologyIndex};
use good_lp::{
    constraint, highs, variable, Constraint, Expression, ProblemVariables, SolverModel, Variable,
};
use highs::{HighsModelStatus, HighsSolutionStatus};
use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

/// A (chunk, link, step) triple.
type Key = (usize, usize, usize);

/// A HiGHS option value.
enum OptionValue {
    Float(f64),
    Int(i32),
    Bool(bool),
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
    /// The column of each representative key (its position in `reps`).
    columns: HashMap<Key, usize>,
    /// The topology's index (links by endpoints).
    index: TopologyIndex,
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
        let index = topology.index();
        let group = Group::new_before(topology, &index, coll, &routing.generators, Some(deadline))
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
        let columns = reps.iter().enumerate().map(|(i, &k)| (k, i)).collect();
        Ok(Some(Encoding {
            topology,
            coll,
            group,
            steps,
            uses,
            reps,
            columns,
            index,
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
        let deadline = limits.deadline;
        check_deadline(deadline, || self.constraints_phase())?;
        let initial = start.and_then(|a| self.start_values(a));
        let mut builder = ModelBuilder::new(self, size, deadline);
        builder.count_uses()?;
        builder.receive_once()?;
        builder.extra_memory();
        builder.check_deadline()?;
        builder.send_held_and_busy()?;
        builder.check_deadline()?;
        builder.switch_time()?;
        builder.rank_cuts()?;
        builder.check_deadline()?;
        builder.piece_order()?;
        let (mut model, columns) = builder.into_highs()?;
        set_options(&mut model, limits)?;
        if let Some(on) = initial {
            let mut values = vec![0.0; columns];
            for k in &on {
                values[self.x_column(k)] = 1.0;
            }
            // A start HiGHS rejects only costs the warm start.
            let _ = model.try_set_solution(Some(&values), None, None, None);
        }
        let solved = model
            .try_solve()
            .map_err(|e| anyhow::anyhow!("HiGHS failed: {e:?}"))?;
        self.read_solution(&solved)
    }

    /// The phase a deadline stops while the constraints of a solve are built.
    fn constraints_phase(&self) -> String {
        format!(
            "building the MILP constraints for C={} pieces and {} steps",
            self.coll.chunks_per_rank, self.steps
        )
    }

    /// The column of representative key `key`: the x variables come first, in `reps` order.
    fn x_column(&self, key: &Key) -> usize {
        self.columns[key]
    }

    /// The answer HiGHS gave: the algorithm its solution sends, if it has one.
    fn read_solution(&self, solved: &highs::SolvedModel) -> anyhow::Result<Solved> {
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
        // The d variables follow the x variables.
        let objective: f64 = (0..self.steps).map(|s| values[self.reps.len() + s]).sum();
        let mut sends: Vec<Vec<Send>> = vec![Vec::new(); self.steps];
        for &((c, l, s), key) in &self.uses {
            if values[self.x_column(&key)] > 0.5 {
                let link = &self.topology.links[l];
                sends[s].push(Send {
                    chunk: self.coll.chunks[c].address,
                    src: link.src,
                    dst: link.dst,
                });
            }
        }
        prune_useless(self.coll, &mut sends);
        let algorithm = build_algorithm(self.topology, &self.index, self.coll, sends)?;
        Ok(Solved {
            algorithm: Some(algorithm),
            objective: Some(objective),
            proven: stopped.is_none(),
            stopped,
        })
    }
}

/// Sets the HiGHS options of one solve: its limits, one thread and a fixed seed (with a
/// work limit the answer is then a function of the model alone).
fn set_options(model: &mut highs::Model, limits: &SolveLimits) -> anyhow::Result<()> {
    let option = |model: &mut highs::Model, name: &str, value: OptionValue| {
        let result = match value {
            OptionValue::Float(v) => model.try_set_option(name, v),
            OptionValue::Int(v) => model.try_set_option(name, v),
            OptionValue::Bool(v) => model.try_set_option(name, v),
        };
        result.map_err(|e| anyhow::anyhow!("HiGHS option {name}: {e:?}"))
    };
    option(
        model,
        "time_limit",
        OptionValue::Float(limits.seconds.max(0.01)),
    )?;
    option(model, "mip_rel_gap", OptionValue::Float(limits.gap))?;
    option(model, "threads", OptionValue::Int(1))?;
    option(model, "random_seed", OptionValue::Int(0))?;
    option(model, "mip_heuristic_effort", OptionValue::Float(0.3))?;
    // HiGHS' own symmetry detection crashes (SIGSEGV in its partition refinement) on some
    // models whose sketch declares two symmetries; the sketch's symmetries are already in
    // the model, so it is off.
    option(model, "mip_detect_symmetry", OptionValue::Bool(false))?;
    if let Some(nodes) = limits.nodes {
        let nodes = nodes.clamp(1, i32::MAX as u64) as i32;
        option(model, "mip_max_nodes", OptionValue::Int(nodes))?;
    }
    Ok(())
}

/// The model of one solve under construction: its variables (columns in the order they are
/// added: x in `reps` order, then d, then the busy times) and its constraints, in the order
/// HiGHS gets them (ordered maps, so the same input gives the same model).
struct ModelBuilder<'e, 'a> {
    enc: &'e Encoding<'a>,
    /// Bytes of one piece at the target size.
    bytes: f64,
    deadline: Instant,
    /// Calls of [`ModelBuilder::tick`] so far.
    ticks: u32,
    vars: ProblemVariables,
    /// The x variable of each representative key.
    x: HashMap<Key, Variable>,
    /// The duration of each step.
    d: Vec<Variable>,
    /// Per (chunk, rank): incoming variables by step.
    incoming: HashMap<(usize, usize), Vec<(usize, Variable)>>,
    /// Per (link, step): its load.
    load: BTreeMap<(usize, usize), Expression>,
    constraints: Vec<Constraint>,
}

impl<'e, 'a> ModelBuilder<'e, 'a> {
    /// The variables of `enc` at nccl-tests size `size`, no constraint yet.
    fn new(enc: &'e Encoding<'a>, size: f64, deadline: Instant) -> Self {
        let coll = enc.coll;
        let bytes = size / (coll.kind.units_per_buffer(coll.ranks) * coll.chunks_per_rank) as f64;
        let mut vars = ProblemVariables::new();
        let x = enc
            .reps
            .iter()
            .map(|&k| (k, vars.add(variable().binary())))
            .collect();
        let d = (0..enc.steps)
            .map(|_| vars.add(variable().min(0.0)))
            .collect();
        ModelBuilder {
            enc,
            bytes,
            deadline,
            ticks: 0,
            vars,
            x,
            d,
            incoming: HashMap::new(),
            load: BTreeMap::new(),
            constraints: Vec::new(),
        }
    }

    /// Fails once the deadline has passed.
    fn check_deadline(&self) -> anyhow::Result<()> {
        check_deadline(self.deadline, || self.enc.constraints_phase())
    }

    /// [`ModelBuilder::check_deadline`] every 4096 calls (the loops building the model run
    /// millions of times on large models).
    fn tick(&mut self) -> anyhow::Result<()> {
        self.ticks = self.ticks.wrapping_add(1);
        if self.ticks.is_multiple_of(4096) {
            self.check_deadline()
        } else {
            Ok(())
        }
    }

    /// Fills the incoming variables per (chunk, rank) and the load per (link, step).
    fn count_uses(&mut self) -> anyhow::Result<()> {
        for &((c, l, s), key) in &self.enc.uses {
            self.tick()?;
            let v = self.x[&key];
            self.incoming
                .entry((c, self.enc.topology.links[l].dst))
                .or_default()
                .push((s, v));
            *self
                .load
                .entry((l, s))
                .or_insert_with(|| Expression::from(0.0)) += v;
        }
        Ok(())
    }

    /// Receive exactly once where needed, at most once elsewhere (orbit representatives).
    fn receive_once(&mut self) -> anyhow::Result<()> {
        let enc = self.enc;
        for (c, chunk) in enc.coll.chunks.iter().enumerate() {
            self.tick()?;
            for r in 0..enc.topology.ranks {
                if chunk.pre.contains(&r) || enc.group.chunk_rank_rep(c, r) != (c, r) {
                    continue;
                }
                let total: Expression = self
                    .incoming
                    .get(&(c, r))
                    .map_or(Expression::from(0.0), |v| v.iter().map(|&(_, x)| x).sum());
                if chunk.post.contains(&r) {
                    self.constraints.push(constraint!(total == 1.0));
                } else if self.incoming.contains_key(&(c, r)) {
                    self.constraints.push(constraint!(total <= 1.0));
                }
            }
        }
        Ok(())
    }

    /// Extra memory: chunks received by a rank ≤ its postcondition's chunks + M.
    fn extra_memory(&mut self) {
        let Some(extra) = self.enc.extra_memory else {
            return;
        };
        let coll = self.enc.coll;
        for r in 0..self.enc.topology.ranks {
            let limit = coll.chunks.iter().filter(|c| c.post.contains(&r)).count() + extra;
            let total: Expression = (0..coll.chunks.len())
                .filter_map(|c| self.incoming.get(&(c, r)))
                .flat_map(|list| list.iter().map(|&(_, x)| x))
                .sum();
            self.constraints.push(constraint!(total <= limit as f64));
        }
    }

    /// Send only what is held; latency and busy time per link.
    fn send_held_and_busy(&mut self) -> anyhow::Result<()> {
        let (enc, topo) = (self.enc, self.enc.topology);
        let mut busy: BTreeMap<(usize, usize), Variable> = BTreeMap::new();
        for &((c, l, s), key) in &enc.uses {
            self.tick()?;
            if key != (c, l, s) {
                continue;
            }
            let link = &topo.links[l];
            let v = self.x[&key];
            if !enc.coll.chunks[c].pre.contains(&link.src) {
                let held: Expression = self
                    .incoming
                    .get(&(c, link.src))
                    .map_or(Expression::from(0.0), |list| {
                        list.iter().filter(|&&(t, _)| t < s).map(|&(_, x)| x).sum()
                    });
                self.constraints.push(constraint!(v <= held));
            }
            let lr = enc.group.link_rep(l);
            let vars = &mut self.vars;
            let w = *busy
                .entry((lr, s))
                .or_insert_with(|| vars.add(variable().min(0.0)));
            self.constraints
                .push(constraint!(self.d[s] >= link.alpha * v + w));
        }
        for (&(lr, s), &w) in &busy {
            self.tick()?;
            let beta = self.bytes / (topo.links[lr].bandwidth * 1e3);
            let expr = self
                .load
                .get(&(lr, s))
                .cloned()
                .unwrap_or_else(|| Expression::from(0.0));
            self.constraints.push(constraint!(w == beta * expr));
        }
        Ok(())
    }

    /// A step lasts at least each switch constraint's load over its bandwidth.
    fn switch_time(&mut self) -> anyhow::Result<()> {
        let (enc, topo) = (self.enc, self.enc.topology);
        for (k, sw) in topo.switches.iter().enumerate() {
            if enc.group.switch_rep(k) != k {
                continue;
            }
            self.check_deadline()?;
            let beta = self.bytes / (sw.bandwidth * 1e3);
            for (s, &ds) in self.d.iter().enumerate() {
                let mut total = Expression::from(0.0);
                let mut any = false;
                for (l, link) in topo.links.iter().enumerate() {
                    if sw.covers(link.src, link.dst) {
                        if let Some(e) = self.load.get(&(l, s)) {
                            total += e.clone();
                            any = true;
                        }
                    }
                }
                if any {
                    self.constraints.push(constraint!(ds >= beta * total));
                }
            }
        }
        Ok(())
    }

    /// A step lasts at least a rank's incoming (outgoing) bytes over the sum of its links'
    /// bandwidths (the slowest link is never faster than their average): this gives the
    /// LP relaxation the per-rank cut bound.
    fn rank_cuts(&mut self) -> anyhow::Result<()> {
        let (enc, topo) = (self.enc, self.enc.topology);
        let mut into: BTreeMap<(usize, usize), Expression> = BTreeMap::new();
        let mut out_of: BTreeMap<(usize, usize), Expression> = BTreeMap::new();
        let load = std::mem::take(&mut self.load);
        for (&(l, s), e) in &load {
            self.tick()?;
            let link = &topo.links[l];
            *into
                .entry((link.dst, s))
                .or_insert_with(|| Expression::from(0.0)) += e.clone();
            *out_of
                .entry((link.src, s))
                .or_insert_with(|| Expression::from(0.0)) += e.clone();
        }
        self.load = load;
        let rank_rep = |r: usize| {
            (0..enc.group.order())
                .map(|g| enc.group.ranks[g][r])
                .min()
                .unwrap_or(r)
        };
        for (incoming, sums) in [(true, &into), (false, &out_of)] {
            for (&(r, s), e) in sums {
                self.tick()?;
                if rank_rep(r) != r {
                    continue;
                }
                let bw: f64 = topo
                    .links
                    .iter()
                    .filter(|l| if incoming { l.dst == r } else { l.src == r })
                    .map(|l| l.bandwidth)
                    .sum();
                let (ds, bytes) = (self.d[s], self.bytes);
                self.constraints
                    .push(constraint!(ds >= bytes / (bw * 1e3) * e.clone()));
            }
        }
        Ok(())
    }

    /// Pieces of one original chunk are interchangeable: order them by how early their
    /// sources send them (one original chunk per orbit of the symmetry group).
    fn piece_order(&mut self) -> anyhow::Result<()> {
        let enc = self.enc;
        let mut first_sends: HashMap<usize, Vec<(usize, Key)>> = HashMap::new();
        for &((c, l, s), key) in &enc.uses {
            self.tick()?;
            if enc.coll.chunks[c].pre.contains(&enc.topology.links[l].src) {
                first_sends.entry(c).or_default().push((s, key));
            }
        }
        for pieces in enc.piece_groups() {
            self.check_deadline()?;
            let score = |c: usize| -> Expression {
                let mut e = Expression::from(0.0);
                for &(s, key) in first_sends.get(&c).into_iter().flatten() {
                    e += ((enc.steps - s) as f64) * self.x[&key];
                }
                e
            };
            for w in pieces.windows(2) {
                let (first, second) = (score(w[0]), score(w[1]));
                self.constraints.push(constraint!(first >= second));
            }
        }
        Ok(())
    }

    /// The HiGHS model minimising the sum of the step durations, and its column count.
    fn into_highs(self) -> anyhow::Result<(highs::Model, usize)> {
        let objective: Expression = self.d.iter().copied().sum();
        let columns = self.vars.len();
        let mut model = self.vars.minimise(objective).using(highs);
        for c in self.constraints {
            model.add_constraint(c);
        }
        check_deadline(self.deadline, || self.enc.constraints_phase())?;
        // good_lp builds the HiGHS model (columns in variable order); it is solved by the
        // caller so that a node limit can be told from a time limit.
        let model = model
            .try_into_inner()
            .map_err(|e| anyhow::anyhow!("HiGHS could not build the model: {e}"))?;
        Ok((model, columns))
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
        let mut on = std::collections::HashSet::new();
        let mut count = 0;
        for (s, step) in start.steps.iter().enumerate() {
            for x in &step.sends {
                let l = *self.index.link_of.get(&(x.src, x.dst))?;
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
    index: &TopologyIndex,
    coll: &Collective,
    sends: Vec<Vec<Send>>,
) -> anyhow::Result<Algorithm> {
    let caps = topology.capacities()?;
    let mut steps = Vec::new();
    for mut list in sends.into_iter().filter(|s| !s.is_empty()) {
        list.sort();
        steps.push(Step {
            rounds: crate::load::rounds_needed(index, &caps, &list),
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
