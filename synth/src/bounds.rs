//! Sound lower bounds for a collective on a topology: steps from hop distances, rounds per
//! chunk from a multicast flow LP with source conservation plus per-rank cut bounds
//! (DESIGN §3, §6).

use crate::collective::Collective;
use crate::topology::{Capacities, Topology};
use anyhow::{bail, Result};
use good_lp::{
    constraint, highs, variable, Expression, ProblemVariables, Solution, SolverModel, Variable,
};
use num_rational::Ratio;
use serde::Serialize;

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
        for &r in &chunk.post {
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

/// Both lower bounds for a non-combining collective `coll` (with C = 1).
pub fn lower_bounds(topology: &Topology, coll: &Collective) -> Result<Bounds> {
    let cuts = cut_bounds(topology, coll)?;
    let caps = topology.capacities()?;
    let demands: usize = coll
        .chunks
        .iter()
        .map(|c| c.post.iter().filter(|r| !c.pre.contains(r)).count())
        .sum();
    if demands * topology.links.len() > MAX_LP_VARIABLES {
        return Ok(cuts);
    }
    let lp = to_ratio_floor(flow_lp_bound(topology, &caps, coll)?);
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
    let caps = topology.capacities()?;
    let mut bound = Ratio::from_integer(0u64);
    for r in 0..topology.ranks {
        let needed = coll
            .chunks
            .iter()
            .filter(|c| c.post.contains(&r) && !c.pre.contains(&r))
            .count() as u64;
        let unique = coll
            .chunks
            .iter()
            .filter(|c| c.pre == [r] && c.post.iter().any(|&p| p != r))
            .count() as u64;
        for (count, cap) in [
            (needed, rank_capacity(topology, &caps, r, true)),
            (unique, rank_capacity(topology, &caps, r, false)),
        ] {
            if cap > 0 {
                bound = bound.max(Ratio::new(count, cap));
            }
        }
    }
    Ok(Bounds {
        steps,
        rounds_per_chunk: bound,
        from_lp: false,
    })
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
fn flow_lp_bound(topology: &Topology, caps: &Capacities, coll: &Collective) -> Result<f64> {
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
    let mut model = vars.minimise(rho).using(highs);
    model.set_verbose(false);
    for c in constraints {
        model = model.with(c);
    }
    let solution = model
        .solve()
        .map_err(|e| anyhow::anyhow!("bandwidth lower-bound LP failed: {e}"))?;
    Ok(solution.value(rho))
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
