//! The rings themselves: directed Hamiltonian cycles of the fabric (a bounded enumeration),
//! each with its shortcuts and per-link load, and the integer program that picks the fewest
//! of them at the exact optimum's load.

use crate::topology::{Capacities, Topology, TopologyIndex};
use anyhow::Result;
use good_lp::solvers::highs::HighsProblem;
use good_lp::{constraint, highs, variable, Constraint, Expression, ProblemVariables};
use std::time::Instant;

/// Most Hamiltonian cycles collected.
pub(super) const MAX_CYCLES: usize = 512;

/// Most search-tree nodes the cycle enumeration visits.
pub(super) const MAX_EXPANSIONS: usize = 1 << 20;

/// Branch-and-bound nodes per selection.
pub(super) const MAX_NODES: i32 = 2_000;

/// A directed Hamiltonian cycle, whether the root at each position takes its shortcut, and
/// the pieces the ring puts on each link (by link id) for one piece per root.
#[derive(Debug, Clone)]
pub(super) struct Ring {
    pub(super) order: Vec<usize>,
    pub(super) shortcut: Vec<bool>,
    pub(super) load: Vec<u32>,
}

/// The fewest shortcut rings of `topology` (with repetition, at most `max_chunks`) that
/// reach `optimum_gbps`, when one of them takes a shortcut (see [`shortcut_rings`]).
pub(super) fn choose_rings(
    topology: &Topology,
    index: &TopologyIndex,
    max_chunks: usize,
    optimum_gbps: f64,
    deadline: Instant,
) -> Result<Option<Vec<Ring>>> {
    let caps = index.capacities.as_ref().expect("checked by applies");
    let rings: Vec<Ring> = hamiltonian_cycles(topology, index, deadline)
        .into_iter()
        .map(|order| ring(order, topology, index, caps))
        .collect();
    if !rings.iter().any(|r| r.shortcut.contains(&true)) {
        return Ok(None);
    }
    // The fewest rings at the exact optimum; none short of it (see the module docs).
    let per_unit = caps.unit_gbps / optimum_gbps;
    let Some(counts) = fewest_at(&rings, &caps.links, per_unit, max_chunks.max(1))? else {
        return Ok(None);
    };
    let chosen: Vec<Ring> = counts
        .iter()
        .enumerate()
        .flat_map(|(k, &c)| std::iter::repeat_n(rings[k].clone(), c))
        .collect();
    Ok(chosen
        .iter()
        .any(|r| r.shortcut.contains(&true))
        .then_some(chosen))
}

/// Directed Hamiltonian cycles starting at rank 0 (each directed cycle once), depth-first
/// over the links in id order, at most [`MAX_CYCLES`] of them and [`MAX_EXPANSIONS`] search
/// nodes, stopping at the deadline.
pub(super) fn hamiltonian_cycles(
    topology: &Topology,
    index: &TopologyIndex,
    deadline: Instant,
) -> Vec<Vec<usize>> {
    struct Search<'a> {
        topology: &'a Topology,
        index: &'a TopologyIndex,
        deadline: Instant,
        path: Vec<usize>,
        used: Vec<bool>,
        cycles: Vec<Vec<usize>>,
        expansions: usize,
    }
    impl Search<'_> {
        /// False once a bound stops the search.
        fn extend(&mut self) -> bool {
            self.expansions += 1;
            if self.cycles.len() >= MAX_CYCLES
                || self.expansions > MAX_EXPANSIONS
                || (self.expansions.is_multiple_of(4096) && Instant::now() >= self.deadline)
            {
                return false;
            }
            let n = self.topology.ranks;
            let last = *self.path.last().expect("the path starts at rank 0");
            if self.path.len() == n {
                if self.index.link_of.contains_key(&(last, self.path[0])) {
                    self.cycles.push(self.path.clone());
                }
                return true;
            }
            for &l in &self.index.out_links[last] {
                let next = self.topology.links[l].dst;
                if self.used[next] {
                    continue;
                }
                self.used[next] = true;
                self.path.push(next);
                let go_on = self.extend();
                self.path.pop();
                self.used[next] = false;
                if !go_on {
                    return false;
                }
            }
            true
        }
    }
    let mut used = vec![false; topology.ranks];
    used[0] = true;
    let mut search = Search {
        topology,
        index,
        deadline,
        path: vec![0],
        used,
        cycles: Vec::new(),
        expansions: 0,
    };
    search.extend();
    search.cycles
}

/// The ring of `order` with its shortcuts and per-link load (see [`Ring`]).
pub(super) fn ring(
    order: Vec<usize>,
    topology: &Topology,
    index: &TopologyIndex,
    caps: &Capacities,
) -> Ring {
    let n = order.len();
    let link = |u: usize, v: usize| index.link_of[&(u, v)];
    let mut load = vec![0u32; topology.links.len()];
    let mut shortcut = vec![false; n];
    for k in 0..n {
        let (before, prev) = (order[(k + n - 2) % n], order[(k + n - 1) % n]);
        let back = index.link_of.get(&(order[k], prev)).copied();
        let take = back.is_some_and(|b| caps.links[b] > caps.links[link(before, prev)]);
        shortcut[k] = take;
        let hops = if take { n - 2 } else { n - 1 };
        for h in 0..hops {
            load[link(order[(k + h) % n], order[(k + h + 1) % n])] += 1;
        }
        if let Some(b) = back.filter(|_| take) {
            load[b] += 1;
        }
    }
    Ring {
        order,
        shortcut,
        load,
    }
}

/// The fewest rings (counts per ring of `rings`, with repetition, at most `max_chunks` in
/// all) whose busiest link carries at most `per_unit` pieces per capacity unit and ring: the
/// exact optimum's load when `per_unit` is the capacity unit over the optimum rate per root.
/// `None` when there are none or the solver finds none within its node limit.
pub(super) fn fewest_at(
    rings: &[Ring],
    caps: &[u32],
    per_unit: f64,
    max_chunks: usize,
) -> Result<Option<Vec<usize>>> {
    let mut vars = ProblemVariables::new();
    let counts: Vec<_> = rings
        .iter()
        .map(|_| vars.add(variable().integer().min(0).max(max_chunks as f64)))
        .collect();
    let total: Expression = counts.iter().sum();
    let mut constraints = vec![
        constraint!(total.clone() >= 1.0),
        constraint!(total.clone() <= max_chunks as f64),
    ];
    for (l, &cap) in caps.iter().enumerate() {
        if rings.iter().all(|r| r.load[l] == 0) {
            continue;
        }
        // Σ rings' load ≤ cap · per_unit · Σ rings, with a hair of slack for rounding.
        let allowed = cap as f64 * per_unit * (1.0 + 1e-9);
        let excess: Expression = rings
            .iter()
            .zip(&counts)
            .map(|(r, &c)| (r.load[l] as f64 - allowed) * c)
            .sum();
        constraints.push(constraint!(excess <= 0.0));
    }
    let model = vars.minimise(total).using(highs);
    Ok(solve(model, constraints, rings.len())?.filter(|c| c.iter().sum::<usize>() >= 1))
}

/// Solves `model` with `constraints` ([`crate::constructions::small_ip`], [`MAX_NODES`]) and reads the
/// first `rings` columns as ring counts.
pub(super) fn solve(
    model: HighsProblem,
    constraints: Vec<Constraint>,
    rings: usize,
) -> Result<Option<Vec<usize>>> {
    let effort = crate::constructions::small_ip::Effort {
        nodes: MAX_NODES,
        lp_iterations: i64::MAX,
    };
    let columns = crate::constructions::small_ip::solve(model, constraints, effort)?.columns;
    Ok(columns.map(|c| {
        c[..rings]
            .iter()
            .map(|v| v.round().max(0.0) as usize)
            .collect()
    }))
}
