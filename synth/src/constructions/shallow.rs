//! Shallow broadcast trees by integer programming: C pieces, one spanning out-tree each, at
//! the exact optimum rate, with every tree at most D hops deep.
//!
//! The runtime replays a program per slice of each piece, so a broadcast pays about one
//! slice per hop of its deepest tree to fill its pipeline. Packed trees (and NCCL's rings)
//! reach the optimum rate through deep paths (dgx1: rings of 7 hops, 93.4% of the optimum
//! at 1 GB); here the trees reach it within D hops. A tree carries R/C of the optimum rate
//! R, so a link or switch constraint of bandwidth b carries at most ⌊b·C/R⌋ trees.
//!
//! Variables: binary `x[t, l, d]`, tree t uses link l = (u → v) into depth d (u is the root
//! iff d = 1; only where both ends can be that deep). Constraints: every non-root rank
//! enters every tree once; `x[t, u → v, d] ≤ Σ x[t, · → u, d − 1]`; the capacities above.
//! (C, D) pairs are tried by the fill they predict at the reference size, best first; the
//! first feasible one wins. Every solve is bounded (one thread, fixed seed, a node limit)
//! and a solve the limit cuts short counts as infeasible.

use super::small_ip::{self, Effort};
use super::{Construction, Context};
use crate::algorithm::Algorithm;
use crate::collective::Kind;
use crate::layout::reference;
use crate::origin::Family;
use crate::topology::{Topology, TopologyIndex, Translations};
use crate::trees::packing::{Packing, RootTrees, Tree};
use crate::trees::rounding::PieceCounts;
use crate::trees::schedule;
use anyhow::Result;
use good_lp::{constraint, highs, variable, Constraint, Expression, ProblemVariables, Variable};
use std::collections::HashMap;
use std::time::Instant;

/// A broadcast's shallow trees as two candidates: every piece at once down its tree with
/// all pieces on one channel, and with each piece on a channel of its own; which runs
/// faster depends on how the trees share links (dgx1: one channel, 146.5 against 144.9 GB/s
/// at 1 GB; dgx-a100x2: own channels, 193.7 against 179.3). None when no shallow trees are
/// found within the limits.
pub struct ShallowTrees;

impl Construction for ShallowTrees {
    fn name(&self) -> &'static str {
        "shallow broadcast trees"
    }

    fn fits(&self, cx: &Context) -> bool {
        cx.kind == Kind::Broadcast
    }

    fn build(&self, cx: &Context) -> Result<Vec<Algorithm>> {
        let (topology, root) = (cx.topology, cx.root);
        let slices = |c: usize| reference::slices(topology, Kind::Broadcast, c);
        let Some(found) = shallow_broadcast(
            topology,
            cx.index,
            root,
            cx.optimum_gbps,
            cx.limits.max_chunks,
            slices,
            cx.limits.deadline,
        )?
        .found
        else {
            return Ok(Vec::new());
        };
        let chunks = found.trees.len();
        let packing = Packing {
            roots: vec![RootTrees {
                root,
                trees: found
                    .trees
                    .into_iter()
                    .map(|t| (t, 1.0 / chunks as f64))
                    .collect(),
            }],
            rate_gbps: cx.optimum_gbps,
            group: Translations::trivial(topology.ranks),
            bound_gbps: f64::INFINITY,
            rounds: 0,
        };
        let counts = vec![vec![1; chunks]];
        let kind = Kind::Broadcast;
        let one = schedule::algorithm(
            topology,
            cx.index,
            &packing,
            kind,
            chunks,
            &PieceCounts::Orbit(counts),
            true,
        )?
        .of_family(Family::Shallow {
            own_channels: false,
        });
        let mut own = one
            .clone()
            .of_family(Family::Shallow { own_channels: true });
        own.piece_channels = Some(chunks);
        Ok(vec![one, own])
    }

    fn makes(&self, family: &Family) -> bool {
        matches!(family, Family::Shallow { .. })
    }
}

/// Largest fabric tried (ranks).
pub const MAX_RANKS: usize = 32;

/// Most binary variables of one model.
const MAX_VARIABLES: usize = 20_000;

/// Branch-and-bound nodes per solve.
const MAX_NODES: i32 = 2_000;

/// Simplex iterations of all the solves of one search together (HiGHS's count, so the
/// answer does not depend on the machine): a tight packing's program can take 100,000 of
/// them and most of a minute to prove infeasible (a 3×10 torus, 4 pieces, depth 7).
const MAX_LP_ITERATIONS: i64 = 30_000;

/// Hops beyond the root's eccentricity tried.
const EXTRA_DEPTH: usize = 3;

/// Shallow trees found: `trees[k]` carries piece k.
#[derive(Debug, Clone)]
pub struct Shallow {
    /// One tree per piece.
    pub trees: Vec<Tree>,
    /// The deepest tree's depth.
    pub depth: usize,
}

/// What a search for shallow trees found, and the simplex iterations it spent.
#[derive(Debug, Clone)]
pub struct ShallowSearch {
    /// The trees, or `None` when the fabric is too large, no pair (C, D) is found within the
    /// limits, or the deadline passes first.
    pub found: Option<Shallow>,
    /// Simplex iterations of all its solves ([`MAX_LP_ITERATIONS`] and the last solve's
    /// overshoot at most).
    pub lp_iterations: i64,
}

/// The shallowest trees (by the fill they predict, `slices(c)` slices per piece at c
/// pieces) for a broadcast from `root` at `rate_gbps` with at most `max_chunks` pieces.
pub fn shallow_broadcast(
    topology: &Topology,
    index: &TopologyIndex,
    root: usize,
    rate_gbps: f64,
    max_chunks: usize,
    slices: impl Fn(usize) -> f64,
    deadline: Instant,
) -> Result<ShallowSearch> {
    let mut search = ShallowSearch {
        found: None,
        lp_iterations: 0,
    };
    if topology.ranks > MAX_RANKS || topology.ranks < 2 || rate_gbps <= 0.0 {
        return Ok(search);
    }
    let dist: Vec<usize> = index.distances[root]
        .iter()
        .map(|d| d.unwrap_or(usize::MAX))
        .collect();
    let Some(eccentricity) = dist.iter().copied().filter(|&d| d != usize::MAX).max() else {
        return Ok(search);
    };
    if dist.contains(&usize::MAX) {
        return Ok(search);
    }
    let mut pairs: Vec<(usize, usize)> = (1..=max_chunks.max(1))
        .flat_map(|c| (eccentricity..=eccentricity + EXTRA_DEPTH).map(move |d| (c, d)))
        .collect();
    // Best predicted first: fill costs about (D − 1) slices besides the piece's own slices.
    let value = |&(c, d): &(usize, usize)| {
        let n = slices(c);
        n / (n + d as f64 - 1.0)
    };
    pairs.sort_by(|a, b| value(b).total_cmp(&value(a)).then(a.cmp(b)));
    for (chunks, depth) in pairs {
        // An extra candidate: past the deadline the search just stops.
        if search.lp_iterations >= MAX_LP_ITERATIONS || Instant::now() >= deadline {
            break;
        }
        let effort = Effort {
            nodes: MAX_NODES,
            lp_iterations: MAX_LP_ITERATIONS - search.lp_iterations,
        };
        let (trees, used) = solve(
            topology, index, root, rate_gbps, chunks, depth, &dist, effort,
        )?;
        search.lp_iterations += used;
        if let Some(trees) = trees {
            let depth = trees.iter().map(tree_depth).max().unwrap_or(0);
            search.found = Some(Shallow { trees, depth });
            break;
        }
    }
    Ok(search)
}

/// A binary variable of the shallow-tree program: (tree, link, depth at which the link
/// enters its head, the variable).
type EdgeVar = (usize, usize, usize, Variable);

/// `chunks` trees from `root` of depth at most `depth` within the capacities at
/// `rate_gbps`, or `None` when infeasible or not found within `effort`; with the simplex
/// iterations spent.
#[allow(clippy::too_many_arguments)]
fn solve(
    topology: &Topology,
    index: &TopologyIndex,
    root: usize,
    rate_gbps: f64,
    chunks: usize,
    depth: usize,
    dist: &[usize],
    effort: Effort,
) -> Result<(Option<Vec<Tree>>, i64)> {
    let capacity = |bandwidth: f64| (bandwidth * chunks as f64 / rate_gbps + 1e-9).floor();
    // A rank's first tree edge leaves the root: without capacity there, nothing fits.
    let out: f64 = index.out_links[root]
        .iter()
        .map(|&l| capacity(topology.links[l].bandwidth))
        .sum();
    if out < chunks as f64 {
        return Ok((None, 0));
    }
    let mut vars = ProblemVariables::new();
    let x = edge_variables(topology, &mut vars, root, chunks, depth, dist, &capacity);
    if x.len() > MAX_VARIABLES {
        return Ok((None, 0));
    }
    let Some(mut constraints) = tree_constraints(topology, root, chunks, &x) else {
        return Ok((None, 0));
    };
    constraints.extend(capacity_constraints(topology, index, &x, &capacity));
    // One thread, a fixed seed and counted effort: the answer is a function of the model.
    let model = vars.minimise(Expression::from(0.0)).using(highs);
    let solved = small_ip::solve(model, constraints, effort)?;
    let Some(values) = solved.columns else {
        return Ok((None, solved.lp_iterations));
    };
    let mut trees: Vec<Tree> = vec![vec![None; topology.ranks]; chunks];
    for (column, &(t, l, _, _)) in x.iter().enumerate() {
        if values[column] > 0.5 {
            let link = &topology.links[l];
            trees[t][link.dst] = Some(link.src);
        }
    }
    Ok((Some(trees), solved.lp_iterations))
}

/// A variable per tree, usable link and depth: a link out of the root only at depth 1, and
/// only where the hop distances allow the depth.
fn edge_variables(
    topology: &Topology,
    vars: &mut ProblemVariables,
    root: usize,
    chunks: usize,
    depth: usize,
    dist: &[usize],
    capacity: &dyn Fn(f64) -> f64,
) -> Vec<EdgeVar> {
    let mut x = Vec::new();
    for t in 0..chunks {
        for (l, link) in topology.links.iter().enumerate() {
            let (u, v) = (link.src, link.dst);
            if v == root || capacity(link.bandwidth) < 1.0 {
                continue;
            }
            for d in 1..=depth {
                if (d == 1) != (u == root) || dist[u] > d - 1 || dist[v] > d {
                    continue;
                }
                x.push((t, l, d, vars.add(variable().binary())));
            }
        }
    }
    x
}

/// Each tree enters every rank but the root once, and a link at depth d leaves a rank the
/// tree entered at depth d − 1; `None` where a rank cannot be entered at all.
fn tree_constraints(
    topology: &Topology,
    root: usize,
    chunks: usize,
    x: &[EdgeVar],
) -> Option<Vec<Constraint>> {
    // Variables entering each (tree, rank), with their depth.
    let mut into: HashMap<(usize, usize), Vec<(usize, Variable)>> = HashMap::new();
    for &(t, l, d, var) in x {
        into.entry((t, topology.links[l].dst))
            .or_default()
            .push((d, var));
    }
    let mut constraints = Vec::new();
    for t in 0..chunks {
        for v in (0..topology.ranks).filter(|&v| v != root) {
            let entering = into.get(&(t, v))?;
            let sum: Expression = entering.iter().map(|&(_, var)| var).sum();
            constraints.push(constraint!(sum == 1.0));
        }
    }
    for &(t, l, d, var) in x {
        let u = topology.links[l].src;
        if d > 1 {
            let reached: Expression = into
                .get(&(t, u))
                .into_iter()
                .flatten()
                .filter(|&&(du, _)| du == d - 1)
                .map(|&(_, v)| v)
                .sum();
            constraints.push(constraint!(var <= reached));
        }
    }
    Some(constraints)
}

/// Every link and switch constraint carries at most its capacity in trees.
fn capacity_constraints(
    topology: &Topology,
    index: &TopologyIndex,
    x: &[EdgeVar],
    capacity: &dyn Fn(f64) -> f64,
) -> Vec<Constraint> {
    let mut on_link: Vec<Expression> = vec![Expression::from(0.0); topology.links.len()];
    let mut on_switch: Vec<Expression> = vec![Expression::from(0.0); topology.switches.len()];
    for &(_, l, _, var) in x {
        on_link[l] += var;
        for &j in &index.governing[l] {
            on_switch[j] += var;
        }
    }
    let mut constraints = Vec::new();
    for (l, load) in on_link.into_iter().enumerate() {
        constraints.push(constraint!(load <= capacity(topology.links[l].bandwidth)));
    }
    for (j, load) in on_switch.into_iter().enumerate() {
        constraints.push(constraint!(
            load <= capacity(topology.switches[j].bandwidth)
        ));
    }
    constraints
}

/// The most hops from the root of `tree` to a rank.
fn tree_depth(tree: &Tree) -> usize {
    (0..tree.len())
        .map(|mut v| {
            let mut hops = 0;
            while let Some(p) = tree[v] {
                v = p;
                hops += 1;
            }
            hops
        })
        .max()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// The search on a 2-D torus (unit links): its broadcast optimum is the root's four
    /// out-links.
    fn torus_search(spec: &str) -> ShallowSearch {
        let topology = crate::topology::load(spec).unwrap();
        let index = topology.index();
        let rate = 4.0 * topology.links[0].bandwidth;
        let slices = |c: usize| reference::slices(&topology, Kind::Broadcast, c);
        let deadline = Instant::now() + Duration::from_secs(3600);
        shallow_broadcast(&topology, &index, 0, rate, 8, slices, deadline).unwrap()
    }

    #[test]
    fn a_tight_packing_stops_at_the_simplex_budget() {
        // Four edge-disjoint trees within 7 or 8 hops on a 3×10 torus: HiGHS spent 107,000
        // iterations (half a minute) on depth 7 alone, and the whole search minutes.
        let search = torus_search("torus-2d:3x10");
        assert!(search.found.is_none());
        assert!(
            search.lp_iterations < 2 * MAX_LP_ITERATIONS,
            "{} simplex iterations",
            search.lp_iterations
        );
    }

    #[test]
    fn the_budget_still_finds_the_4x8_torus_trees() {
        let search = torus_search("torus-2d:4x8");
        let found = search.found.expect("shallow trees on torus-2d:4x8");
        assert_eq!((found.trees.len(), found.depth), (4, 7));
        assert!(search.lp_iterations <= MAX_LP_ITERATIONS + 1);
    }
}
