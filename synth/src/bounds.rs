//! Sound lower bounds for a collective on a topology: steps from hop distances, rounds per
//! chunk from a multicast flow LP with source conservation plus per-rank cut bounds
//! (DESIGN §3, §6).

use crate::collective::{Chunk, Collective};
use crate::symmetry::Group;
use crate::topology::{Capacities, Topology};
use anyhow::{bail, Result};
use good_lp::{
    constraint, highs, variable, Expression, ProblemVariables, Solution, SolutionStatus,
    SolverModel, Variable,
};
use num_rational::Ratio;
use serde::Serialize;
use std::time::Instant;

/// Above this many flow variables the LP is skipped and only the cut bounds are used.
const MAX_LP_VARIABLES: usize = 400_000;

/// Lower bounds for one non-combining collective (chunks split C = 1).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Bounds {
    /// No algorithm has fewer steps.
    pub steps: usize,
    /// No algorithm has fewer rounds per chunk (R/C), in capacity units.
    pub rounds_per_chunk: Ratio<u64>,
    /// Whether the flow LP was solved (false: only per-rank cuts, for very large instances).
    pub from_lp: bool,
}

/// The step lower bound: the largest hop distance from a chunk's nearest source to a rank
/// that needs it. Fails, naming the chunk and rank, when some rank cannot be reached.
pub fn steps_lower_bound(topology: &Topology, coll: &Collective) -> Result<usize> {
    let dist = topology.distances();
    let mut bound = 0;
    for chunk in &coll.chunks {
        for &r in chunk.post.iter() {
            let nearest = chunk.pre.iter().filter_map(|&p| dist[p][r]).min();
            match nearest {
                Some(d) => bound = bound.max(d),
                None => bail!(
                    "the collective is impossible on `{}`: chunk {} (starting on rank {}) cannot reach rank {r}",
                    topology.name,
                    chunk.address,
                    chunk.pre[0]
                ),
            }
        }
    }
    Ok(bound)
}

/// Lower bounds for a combining collective `coll` (C = 1) whose addresses may end on
/// several ranks ([`Collective::phases`]): steps, the farthest (contributor, destination)
/// pair of an address (each destination needs every contribution); rounds per chunk, per
/// rank, the chunks it must receive through its in-capacity (one per address it must end
/// with and lacks something of: another rank's contribution, or the data) and send through
/// its out-capacity (one per address where it holds something alone that another rank
/// needs: its contribution, or the only copy). Fails, naming the address and ranks, where
/// a destination cannot be reached.
pub fn reduction_bounds(topology: &Topology, coll: &Collective) -> Result<Bounds> {
    let dist = topology.distances();
    let n = topology.ranks;
    let (mut receive, mut send) = (vec![0u64; n], vec![0u64; n]);
    let mut steps = 0;
    for (address, members) in coll.by_address() {
        let combining = members.len() > 1;
        let mut pre: Vec<usize> = members
            .iter()
            .flat_map(|&m| coll.chunks[m].pre.iter().copied())
            .collect();
        pre.sort_unstable();
        pre.dedup();
        let mut post = coll.chunks[members[0]].post.to_vec();
        post.sort_unstable();
        post.dedup();
        for &d in &post {
            let far = if combining {
                (pre.iter().map(|&p| dist[p][d].ok_or(p)))
                    .try_fold(0, |most, hops| hops.map(|h| most.max(h)))
            } else {
                pre.iter().filter_map(|&p| dist[p][d]).min().ok_or(pre[0])
            };
            match far {
                Ok(hops) => steps = steps.max(hops),
                Err(p) => bail!(
                    "the collective is impossible on `{}`: address {address} (a chunk starting on rank {p}) cannot reach rank {d}",
                    topology.name
                ),
            }
            let lacks = if combining {
                pre.iter().any(|&p| p != d)
            } else {
                !pre.contains(&d)
            };
            receive[d] += u64::from(lacks);
        }
        for &p in &pre {
            let alone = combining || pre.len() == 1;
            send[p] += u64::from(alone && post.iter().any(|&d| d != p));
        }
    }
    let caps = topology.bound_capacities()?;
    let mut rounds_per_chunk = Ratio::from_integer(0u64);
    for r in 0..n {
        for (count, incoming) in [(receive[r], true), (send[r], false)] {
            let cap = rank_capacity(topology, &caps, r, incoming);
            if cap > 0 {
                rounds_per_chunk = rounds_per_chunk.max(Ratio::new(count, cap));
            }
        }
    }
    Ok(Bounds {
        steps,
        rounds_per_chunk,
        from_lp: false,
    })
}

/// Both lower bounds for a non-combining collective `coll` (with C = 1). The flow LP stops
/// at `deadline`; the cut and max-flow bounds are used alone when it does not finish.
pub fn lower_bounds(topology: &Topology, coll: &Collective, deadline: Instant) -> Result<Bounds> {
    let cuts = cut_bounds(topology, coll)?;
    let caps = topology.bound_capacities()?;
    let demands: usize = coll
        .chunks
        .iter()
        .map(|c| c.post.iter().filter(|r| !c.pre.contains(r)).count())
        .sum();
    if demands * topology.links.len() > MAX_LP_VARIABLES {
        return Ok(cuts);
    }
    let Some(lp) = flow_lp_bound(topology, &caps, coll, deadline)? else {
        return Ok(cuts);
    };
    let lp = to_ratio_floor(lp);
    Ok(Bounds {
        rounds_per_chunk: lp.max(cuts.rounds_per_chunk),
        from_lp: true,
        ..cuts
    })
}

/// Cheap lower bounds for any fabric size: steps from hop distances, and rounds per chunk
/// from per-rank cuts: a rank must receive every chunk it needs and lacks through its
/// in-capacity, and must send every chunk only it holds (and someone else needs) through its
/// out-capacity.
pub fn cut_bounds(topology: &Topology, coll: &Collective) -> Result<Bounds> {
    let steps = steps_lower_bound(topology, coll)?;
    let caps = topology.bound_capacities()?;
    let mut bound = Ratio::from_integer(0u64);
    // One pass over the chunks (a 1024-rank alltoall has a million).
    let n = topology.ranks;
    let (mut needed, mut unique) = (vec![0u64; n], vec![0u64; n]);
    let mut seen = vec![usize::MAX; n];
    for (i, c) in coll.chunks.iter().enumerate() {
        for &r in c.post.iter().filter(|&&r| r < n) {
            if seen[r] != i && !c.pre.contains(&r) {
                needed[r] += 1;
            }
            seen[r] = i;
        }
        if let [r] = c.pre[..] {
            if r < n && c.post.iter().any(|&p| p != r) {
                unique[r] += 1;
            }
        }
    }
    for r in 0..n {
        let (needed, unique) = (needed[r], unique[r]);
        for (count, cap) in [
            (needed, rank_capacity(topology, &caps, r, true)),
            (unique, rank_capacity(topology, &caps, r, false)),
        ] {
            if cap > 0 {
                bound = bound.max(Ratio::new(count, cap));
            }
        }
    }
    if let Some(exact) = flow_rounds_bound(topology, &caps, coll) {
        bound = bound.max(exact);
    }
    Ok(Bounds {
        steps,
        rounds_per_chunk: bound,
        from_lp: false,
    })
}

/// The exact bandwidth optimum in rounds per chunk for allgather and broadcast (maximum
/// flow over the integer capacities, see [`crate::flow`]): every root streams one chunk at
/// the optimum rate x (chunks per round), so R/C ≥ 1/x. `None` for other collectives.
fn flow_rounds_bound(
    topology: &Topology,
    caps: &Capacities,
    coll: &Collective,
) -> Option<Ratio<u64>> {
    use crate::collective::Kind;
    use crate::flow::{allgather_rate, broadcast_rate, FlowNetwork};
    let net = FlowNetwork::with_capacities(topology, &caps.links, &caps.switches);
    let rate = match coll.kind {
        Kind::AllGather => {
            allgather_rate(&net, &crate::cutbound::allgather_targets(topology)).ok()?
        }
        Kind::Broadcast => broadcast_rate(&net, coll.root).ok()?,
        _ => return None,
    };
    let (num, den) = (*rate.gbps.numer(), *rate.gbps.denom());
    if num <= 0 {
        return None;
    }
    Some(Ratio::new(
        u64::try_from(den).ok()?,
        u64::try_from(num).ok()?,
    ))
}

/// Capacity into (`incoming`) or out of rank `r`: the sum of its links' capacities, or a
/// switch constraint that covers all those links if that is tighter.
fn rank_capacity(topology: &Topology, caps: &Capacities, r: usize, incoming: bool) -> u64 {
    let links: Vec<usize> = (0..topology.links.len())
        .filter(|&i| {
            if incoming {
                topology.links[i].dst == r
            } else {
                topology.links[i].src == r
            }
        })
        .collect();
    let sum: u64 = links.iter().map(|&i| caps.links[i] as u64).sum();
    let switch_min = topology
        .switches
        .iter()
        .zip(&caps.switches)
        .filter(|(sw, _)| {
            links
                .iter()
                .all(|&i| sw.covers(topology.links[i].src, topology.links[i].dst))
        })
        .map(|(_, &c)| c as u64)
        .min();
    switch_min.map_or(sum, |m| m.min(sum))
}

/// The multicast flow LP: for every chunk and every rank that needs it, one unit of flow
/// from the chunk's sources (conserved at every other rank, so no circulation can justify
/// itself); a link's use of a chunk is the largest flow of that chunk over it; every link
/// and switch constraint carries at most capacity × rho. Minimizes rho.
fn flow_lp_bound(
    topology: &Topology,
    caps: &Capacities,
    coll: &Collective,
    deadline: Instant,
) -> Result<Option<f64>> {
    let left = deadline
        .saturating_duration_since(Instant::now())
        .as_secs_f64();
    if left <= 0.0 {
        return Ok(None);
    }
    let mut vars = ProblemVariables::new();
    let rho = vars.add(variable().min(0.0));
    let nlinks = topology.links.len();
    let mut constraints = Vec::new();
    let mut link_use: Vec<Expression> = vec![Expression::from(0.0); nlinks];
    for chunk in &coll.chunks {
        let uses: Vec<Variable> = (0..nlinks)
            .map(|_| vars.add(variable().min(0.0).max(1.0)))
            .collect();
        for (l, u) in uses.iter().enumerate() {
            link_use[l] += *u;
        }
        for &d in chunk.post.iter().filter(|r| !chunk.pre.contains(r)) {
            let flow: Vec<Variable> = (0..nlinks).map(|_| vars.add(variable().min(0.0))).collect();
            for l in 0..nlinks {
                constraints.push(constraint!(flow[l] <= uses[l]));
            }
            for v in (0..topology.ranks).filter(|v| !chunk.pre.contains(v)) {
                let mut net = Expression::from(0.0);
                for (l, link) in topology.links.iter().enumerate() {
                    if link.dst == v {
                        net += flow[l];
                    }
                    if link.src == v {
                        net -= flow[l];
                    }
                }
                let demand = if v == d { 1.0 } else { 0.0 };
                constraints.push(constraint!(net == demand));
            }
        }
    }
    for (l, usage) in link_use.iter().enumerate() {
        constraints.push(constraint!(usage.clone() <= caps.links[l] as f64 * rho));
    }
    for (k, sw) in topology.switches.iter().enumerate() {
        let mut total = Expression::from(0.0);
        for (l, link) in topology.links.iter().enumerate() {
            if sw.covers(link.src, link.dst) {
                total += link_use[l].clone();
            }
        }
        constraints.push(constraint!(total <= caps.switches[k] as f64 * rho));
    }
    let mut model = vars.minimise(rho).using(highs).set_time_limit(left);
    model.set_verbose(false);
    for c in constraints {
        model = model.with(c);
    }
    // Only an optimum is a lower bound; a time-out or any other stop gives none.
    match model.solve() {
        Ok(solution) if matches!(solution.status(), SolutionStatus::Optimal) => {
            Ok(Some(solution.value(rho)))
        }
        _ => Ok(None),
    }
}

/// A lower bound on R/C for algorithms with exactly `steps` steps, from the time-expanded
/// multicast flow LP (see [`StepLp`]): with `chunks` given, every step takes at least one
/// round, so rho_s ≥ 1/C. `None` when the LP would exceed the variable cap or was not
/// solved to optimality by `deadline`; infinity when no algorithm has that many steps.
pub fn step_bound(
    topology: &Topology,
    coll: &Collective,
    symmetry: Option<&Group>,
    steps: usize,
    chunks: Option<usize>,
    deadline: Instant,
) -> Result<Option<f64>> {
    let min_rho = chunks.map_or(0.0, |c| 1.0 / c as f64);
    let Some(lp) = StepLp::new(topology, coll, symmetry, steps, min_rho)? else {
        return Ok(None);
    };
    let objective: Expression = lp.rho.iter().sum();
    lp.optimum(objective, None, deadline)
}

/// For an instance (S, R, C), the most rounds each step can have in any algorithm: the
/// largest rho_s of the step-limited LP with Σ rho ≤ R/C, times C. Sound, since every
/// algorithm's rounds per step divided by C is a feasible point. `None` when the LP would
/// exceed the variable cap or is infeasible (the instance is UNSAT; the solver will say so).
pub fn step_round_caps(
    topology: &Topology,
    coll: &Collective,
    symmetry: Option<&Group>,
    steps: usize,
    rounds: usize,
    chunks: usize,
    deadline: Instant,
) -> Result<Option<Vec<usize>>> {
    if lp_variables(coll, topology, steps) > MAX_CAPS_LP_VARIABLES {
        return Ok(None);
    }
    let total = rounds as f64 / chunks as f64 + LP_SLACK;
    let mut caps = Vec::with_capacity(steps);
    for s in 0..steps {
        let Some(lp) = StepLp::new(topology, coll, symmetry, steps, 1.0 / chunks as f64)? else {
            return Ok(None);
        };
        let objective = -Expression::from(lp.rho[s]);
        let Some(least) = lp.optimum(objective, Some(total), deadline)? else {
            return Ok(None);
        };
        let most = -least;
        if !most.is_finite() {
            return Ok(None);
        }
        caps.push(((most * chunks as f64 + LP_SLACK).floor() as usize).clamp(1, rounds));
    }
    Ok(Some(caps))
}

/// Above this many flow variables the per-step round caps (an optional speed-up, S LPs per
/// solve) are not computed.
const MAX_CAPS_LP_VARIABLES: usize = 50_000;

/// The flow variables of the step-limited LP, at most: one per demand, link and step.
fn lp_variables(coll: &Collective, topology: &Topology, steps: usize) -> usize {
    let demands: usize = coll
        .chunks
        .iter()
        .map(|c| c.post.iter().filter(|r| !c.pre.contains(r)).count())
        .sum();
    demands * topology.links.len() * steps
}

/// The (link, step) pairs, steps from 1 to `steps`, that a piece of `chunk` can usefully
/// cross: into a rank outside pre, from a rank a source reaches in fewer steps, towards a
/// rank of `needers` reachable in the steps left.
fn useful_arcs(
    topology: &Topology,
    dist: &[Vec<Option<usize>>],
    steps: usize,
    chunk: &Chunk,
    needers: &[usize],
) -> Vec<(usize, usize)> {
    let nlinks = topology.links.len();
    let nearest = |sources: &[usize], r: usize| sources.iter().filter_map(|&p| dist[p][r]).min();
    (1..=steps)
        .flat_map(|s| (0..nlinks).map(move |l| (l, s)))
        .filter(|&(l, s)| {
            let link = &topology.links[l];
            !chunk.pre.contains(&link.dst)
                && nearest(&chunk.pre, link.src).is_some_and(|d| d < s)
                && needers
                    .iter()
                    .any(|&w| dist[link.dst][w].is_some_and(|d| d <= steps - s))
        })
        .collect()
}

/// Slack for the LP solver's floating-point optimum when it becomes an integer bound.
pub const LP_SLACK: f64 = 1e-6;

/// The time-expanded multicast flow LP for algorithms with exactly S steps.
///
/// The same relaxation as the step-free LP, but a chunk crosses a link from step s-1 to step
/// s, waits at a rank between steps, and must reach every rank that needs it by step S; step
/// s has rho_s rounds per chunk, and link and switch loads in step s are at most capacity ×
/// rho_s. It relaxes the SMT instance (fractional pieces, multicast as shared flow), so any
/// (S, R, C) with R/C below its least Σ rho_s is UNSAT. It is much stronger than the
/// step-free bound when S is small, which lets the Pareto search skip whole step counts.
struct StepLp {
    vars: ProblemVariables,
    rho: Vec<Variable>,
    constraints: Vec<good_lp::Constraint>,
}

impl StepLp {
    /// Builds the LP for the C = 1 collective `coll`, with every rho_s ≥ `min_rho`; `None`
    /// above the variable cap.
    ///
    /// With `symmetry` (a group mapping the fabric and `coll` to themselves), only one chunk
    /// per orbit gets flow variables, and its use of each link counts on every image of that
    /// link, weighted by orbit size / group order. The optimum is the same: the LP is convex
    /// and the group maps feasible points to feasible points, so averaging a solution over
    /// the group gives a symmetric one of equal value, and a symmetric solution is one
    /// chunk's flows per orbit (each image's flows averaged over the ways to reach it).
    fn new(
        topology: &Topology,
        coll: &Collective,
        symmetry: Option<&Group>,
        steps: usize,
        min_rho: f64,
    ) -> Result<Option<StepLp>> {
        let caps = topology.bound_capacities()?;
        let dist = topology.distances();
        if lp_variables(coll, topology, steps) > MAX_LP_VARIABLES {
            return Ok(None);
        }
        let mut vars = ProblemVariables::new();
        let rho: Vec<Variable> = (0..steps)
            .map(|_| vars.add(variable().min(min_rho)))
            .collect();
        let mut lp = StepLp {
            vars,
            rho,
            constraints: Vec::new(),
        };
        // load[s][l]: Σ over chunks of the chunk's use of link l in step s+1.
        let nlinks = topology.links.len();
        let mut load: Vec<Vec<Expression>> = vec![vec![Expression::from(0.0); nlinks]; steps];
        let identity: Vec<usize> = (0..nlinks).collect();
        for (c, chunk) in coll.chunks.iter().enumerate() {
            let (images, weight) = match symmetry {
                Some(group) => match chunk_orbit_images(group, c) {
                    Some(images) => images,
                    None => continue,
                },
                None => (std::slice::from_ref(&identity), 1.0),
            };
            lp.add_chunk(topology, &dist, steps, chunk, (images, weight), &mut load);
        }
        lp.add_capacities(topology, &caps, &load);
        Ok(Some(lp))
    }

    /// Adds one chunk: its use (0 to 1) of every (link, step) it can usefully cross, added
    /// to `load` on the link's image under each of `images`' link permutations, times its
    /// weight (without symmetry: the identity, weight 1), and a unit flow to every rank that
    /// needs it within that use.
    fn add_chunk(
        &mut self,
        topology: &Topology,
        dist: &[Vec<Option<usize>>],
        steps: usize,
        chunk: &Chunk,
        (images, weight): (&[Vec<usize>], f64),
        load: &mut [Vec<Expression>],
    ) {
        let needers: Vec<usize> = chunk
            .post
            .iter()
            .copied()
            .filter(|r| !chunk.pre.contains(r))
            .collect();
        let arcs = useful_arcs(topology, dist, steps, chunk, &needers);
        let uses: Vec<Variable> = arcs
            .iter()
            .map(|_| self.vars.add(variable().min(0.0).max(1.0)))
            .collect();
        for (&(l, s), u) in arcs.iter().zip(&uses) {
            for image in images {
                load[s - 1][image[l]] += weight * *u;
            }
        }
        for &d in &needers {
            self.add_demand(topology, steps, chunk, &arcs, &uses, d);
        }
    }

    /// Adds a unit flow of `chunk` to rank `d` by step S over `arcs` (each at most the
    /// chunk's use `uses` of it): conservation at (v, s) for every rank v outside pre, with
    /// waiting arcs (v, s) → (v, s+1).
    fn add_demand(
        &mut self,
        topology: &Topology,
        steps: usize,
        chunk: &Chunk,
        arcs: &[(usize, usize)],
        uses: &[Variable],
        d: usize,
    ) {
        let flow: Vec<Variable> = arcs
            .iter()
            .map(|_| self.vars.add(variable().min(0.0)))
            .collect();
        for (f, u) in flow.iter().zip(uses) {
            self.constraints.push(constraint!(*f <= *u));
        }
        let mut net: Vec<Vec<Expression>> =
            vec![vec![Expression::from(0.0); steps + 1]; topology.ranks];
        for (&(l, t), f) in arcs.iter().zip(&flow) {
            let link = &topology.links[l];
            net[link.dst][t] += *f;
            net[link.src][t - 1] -= *f;
        }
        for (v, row) in net.iter_mut().enumerate() {
            if chunk.pre.contains(&v) {
                continue;
            }
            for s in 0..steps {
                let wait = self.vars.add(variable().min(0.0));
                row[s] -= wait;
                row[s + 1] += wait;
            }
            for (s, balance) in row.iter().enumerate() {
                let demand = if v == d && s == steps { 1.0 } else { 0.0 };
                self.constraints
                    .push(constraint!(balance.clone() == demand));
            }
        }
    }

    /// Adds the capacities: in step s, each link's and each switch constraint's `load` is at
    /// most its capacity × rho_s.
    fn add_capacities(&mut self, topology: &Topology, caps: &Capacities, load: &[Vec<Expression>]) {
        for (s, per_link) in load.iter().enumerate() {
            let rho = self.rho[s];
            for (l, usage) in per_link.iter().enumerate() {
                self.constraints
                    .push(constraint!(usage.clone() <= caps.links[l] as f64 * rho));
            }
            for (k, sw) in topology.switches.iter().enumerate() {
                let mut total = Expression::from(0.0);
                for (l, link) in topology.links.iter().enumerate() {
                    if sw.covers(link.src, link.dst) {
                        total += per_link[l].clone();
                    }
                }
                self.constraints
                    .push(constraint!(total <= caps.switches[k] as f64 * rho));
            }
        }
    }

    /// The least value of `objective`, with Σ rho ≤ `total` when given; infinity when
    /// infeasible; `None` when HiGHS did not reach the optimum by `deadline`.
    fn optimum(
        self,
        objective: Expression,
        total: Option<f64>,
        deadline: Instant,
    ) -> Result<Option<f64>> {
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return Ok(None);
        }
        let sum: Expression = self.rho.iter().sum();
        let mut model = self
            .vars
            .minimise(objective.clone())
            .using(highs)
            .set_time_limit(remaining.as_secs_f64());
        model.set_verbose(false);
        for c in self.constraints {
            model = model.with(c);
        }
        if let Some(total) = total {
            model = model.with(constraint!(sum <= total));
        }
        match model.solve() {
            // Only an optimum is a bound; any other feasible point is above it.
            Ok(solution) if matches!(solution.status(), SolutionStatus::Optimal) => {
                Ok(Some(solution.eval(&objective)))
            }
            Ok(_) => Ok(None),
            Err(good_lp::ResolutionError::Infeasible) => Ok(Some(f64::INFINITY)),
            Err(e) => bail!("step-limited bandwidth LP failed: {e}"),
        }
    }
}

/// For chunk `c` of a group's collective: `None` unless `c` is the first of its orbit, else
/// the link permutation of every group element and the weight of each image: orbit size /
/// group order (each chunk of the orbit is reached by group order / orbit size elements,
/// and takes the average of their images).
fn chunk_orbit_images(group: &Group, c: usize) -> Option<(&[Vec<usize>], f64)> {
    let orbit: std::collections::BTreeSet<usize> = group.chunks.iter().map(|g| g[c]).collect();
    if orbit.first() != Some(&c) {
        return None;
    }
    Some((&group.links, orbit.len() as f64 / group.order() as f64))
}

/// The largest fraction with denominator ≤ 1000 not above `value` (plus solver tolerance):
/// the LP optimum is a rational vertex, so this recovers it exactly (e.g. 7/6).
pub fn to_ratio_floor(value: f64) -> Ratio<u64> {
    let mut best = Ratio::new(0u64, 1u64);
    for q in 1..=1000u64 {
        let p = (value * q as f64 + 1e-6).floor().max(0.0) as u64;
        let r = Ratio::new(p, q);
        if r > best {
            best = r;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collective::{Collective, Kind};
    use std::time::Duration;

    fn far() -> Instant {
        Instant::now() + Duration::from_secs(600)
    }

    fn dgx1_allgather() -> (Topology, Collective) {
        let topo = crate::topology::load("dgx1").unwrap();
        let coll = Collective::new(Kind::AllGather, 8, 0, 1).unwrap();
        (topo, coll)
    }

    #[test]
    fn step_bound_on_dgx1_allgather_matches_the_frontier() {
        let (topo, coll) = dgx1_allgather();
        let at = |s, c| {
            step_bound(&topo, &coll, None, s, c, far())
                .unwrap()
                .unwrap()
        };
        // One step cannot reach the ranks two hops away.
        assert!(at(1, None).is_infinite());
        // Two steps need 3/2 rounds per chunk: (2,3,2) is optimal at two steps.
        assert!((at(2, None) - 1.5).abs() < 1e-6);
        // Three steps reach the step-free bound 7/6.
        assert!((at(3, None) - 7.0 / 6.0).abs() < 1e-6);
        // With C = 1 every step takes a whole round: R ≥ 3 at three steps.
        assert!((at(3, Some(1)) - 3.0).abs() < 1e-6);
    }

    #[test]
    fn round_caps_on_dgx1_allgather() {
        let (topo, coll) = dgx1_allgather();
        // (3,7,6): no step can take more than 3 rounds (the LP admits exactly the six round
        // splits with every step at most 3).
        let caps = step_round_caps(&topo, &coll, None, 3, 7, 6, far())
            .unwrap()
            .unwrap();
        assert_eq!(caps, vec![3, 3, 3]);
    }

    /// The LP with one chunk per orbit has the optimum of the whole LP: mi250's allgather
    /// and reduce-scatter (8 symmetries, uneven links) and a 2x3 torus's allgather, every
    /// step count from the least to two more, with and without a chunk count.
    #[test]
    fn step_bound_is_the_same_with_one_chunk_per_orbit() {
        for (name, kind) in [
            ("mi250", Kind::AllGather),
            ("mi250", Kind::ReduceScatter),
            ("torus-2d:2x3", Kind::AllGather),
        ] {
            let topo = crate::topology::load(name).unwrap();
            let coll = Collective::new(kind, topo.ranks, 0, 1).unwrap();
            let group = Group::new(&topo, &coll, &topo.automorphisms(64)).unwrap();
            assert!(group.order() >= 6, "{name}: {} symmetries", group.order());
            let least = steps_lower_bound(&topo, &coll).unwrap();
            for steps in least..=least + 2 {
                for chunks in [None, Some(1), Some(3)] {
                    let at = |g: Option<&Group>| {
                        step_bound(&topo, &coll, g, steps, chunks, far())
                            .unwrap()
                            .unwrap()
                    };
                    let (whole, reduced) = (at(None), at(Some(&group)));
                    assert!(
                        (whole - reduced).abs() < 1e-6 || (whole.is_infinite() && reduced.is_infinite()),
                        "{name} {kind:?} S={steps} C={chunks:?}: {whole} without symmetry, {reduced} with"
                    );
                }
            }
            let caps = |g: Option<&Group>| {
                step_round_caps(&topo, &coll, g, least + 1, 3 * least + 3, 3, far()).unwrap()
            };
            assert_eq!(caps(None), caps(Some(&group)), "{name} {kind:?}");
        }
    }
}
