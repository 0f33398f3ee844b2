//! Fractional packing of spanning trees by column generation, reduced by symmetry.
//!
//! Every root must stream one unit of data to every rank along weighted spanning out-trees
//! (weights summing to 1 per root); the packing minimizes the time T in which every link and
//! switch constraint carries its load: `Σ_t w_t · uses_t(e) ≤ bandwidth(e) · T`. Trees of the
//! roots in one orbit of a [`Translations`] group are images of the representative root's
//! trees, so one row per *orbit* of resources suffices (a resource orbit O carries
//! `|G|/|O|` times the representative's use of O on each member), and one set of columns per
//! representative root. The master LP (HiGHS) starts from breadth-first trees; its prices
//! make the cheapest tree of each root (a minimum-cost arborescence) the column to add, until
//! no tree is cheaper than its root's current ones, the target rate is reached, or the
//! iteration cap or deadline stops it. Every tree is over real links, so the packing is
//! always feasible; its rate is reported as found. The last LP's prices also bound the rate
//! of every packing from above ([`Packing::bound_gbps`], by weak duality), which certifies
//! the packing's optimum where the fabric's cuts are not reachable.

use super::arborescence::{min_arborescence, Edge};
use crate::topology::{SwitchConstraint, Topology, TopologyIndex, Translations};
use anyhow::{bail, Result};
use good_lp::{
    highs, variable, DualValues, Expression, ProblemVariables, Solution, SolutionWithDual,
    SolverModel, Variable,
};
use std::collections::{HashMap, VecDeque};
use std::time::Instant;

/// Most column-generation rounds.
const MAX_ROUNDS: usize = 400;

/// Relative improvement below which a new tree is not added.
const PRICE_TOLERANCE: f64 = 1e-7;

/// A spanning out-tree as the parent of each rank (`None` for the root).
pub type Tree = Vec<Option<usize>>;

/// The trees of one representative root with their weights (summing to 1; trees of weight
/// 0 are candidates for integer rounding).
#[derive(Debug, Clone)]
pub struct RootTrees {
    /// The representative root.
    pub root: usize,
    /// Trees and weights.
    pub trees: Vec<(Tree, f64)>,
}

/// A fractional tree packing.
#[derive(Debug, Clone)]
pub struct Packing {
    /// Per representative root, its weighted trees.
    pub roots: Vec<RootTrees>,
    /// The rate (GB/s of data per root) the weights reach.
    pub rate_gbps: f64,
    /// The group that maps representatives' trees to the other roots.
    pub group: Translations,
    /// LP rounds run (column generation, then [`shallower`]'s).
    pub rounds: usize,
    /// An upper bound on the rate of every packing of these roots' trees (so of every
    /// allgather on the fabric), from the last LP's prices ([`dual_bound`]); infinite where
    /// none was computed.
    pub bound_gbps: f64,
}

/// Resource orbits: every link and switch constraint mapped to its orbit under the group.
pub(crate) struct Orbits {
    /// Orbit of link `i`.
    pub link: Vec<usize>,
    /// Orbit of switch constraint `j`.
    pub switch: Vec<usize>,
    /// Bandwidth (GB/s) of each orbit's members.
    pub bandwidth: Vec<f64>,
    /// |G| / |O| for each orbit.
    pub factor: Vec<f64>,
}

impl Orbits {
    /// The orbits of `topology`'s links and switch constraints under `group`, or `None` when
    /// an element does not map them to themselves.
    pub(crate) fn new(
        topology: &Topology,
        index: &TopologyIndex,
        group: &Translations,
    ) -> Option<Orbits> {
        // A switch constraint's ranks under `g`, with its bandwidth: constraints over the same
        // sets (a two-node fabric's uplinks) are told apart by their place among equals.
        let key = |s: &SwitchConstraint, g: &[u32]| {
            let mut a: Vec<u32> = s.srcs.iter().map(|&r| g[r]).collect();
            let mut b: Vec<u32> = s.dsts.iter().map(|&r| g[r]).collect();
            a.sort_unstable();
            a.dedup();
            b.sort_unstable();
            b.dedup();
            (a, b, s.bandwidth.to_bits())
        };
        let identity = &group.elements[0];
        let mut switches_of: HashMap<(Vec<u32>, Vec<u32>, u64), Vec<usize>> = HashMap::new();
        let mut place_among_equals = vec![0; topology.switches.len()];
        for (j, s) in topology.switches.iter().enumerate() {
            let equals = switches_of.entry(key(s, identity)).or_default();
            place_among_equals[j] = equals.len();
            equals.push(j);
        }
        let (nl, ns) = (topology.links.len(), topology.switches.len());
        let mut orbit = vec![usize::MAX; nl + ns];
        let mut bandwidth = Vec::new();
        let mut factor = Vec::new();
        for res in 0..nl + ns {
            if orbit[res] != usize::MAX {
                continue;
            }
            let id = bandwidth.len();
            let mut size = 0usize;
            for g in &group.elements {
                let image = if res < nl {
                    let l = &topology.links[res];
                    *index.link_of.get(&(g[l.src] as usize, g[l.dst] as usize))?
                } else {
                    let j = res - nl;
                    let equals = switches_of.get(&key(&topology.switches[j], g))?;
                    nl + *equals.get(place_among_equals[j])?
                };
                if orbit[image] == usize::MAX {
                    orbit[image] = id;
                    size += 1;
                } else if orbit[image] != id {
                    return None;
                }
            }
            bandwidth.push(if res < nl {
                topology.links[res].bandwidth
            } else {
                topology.switches[res - nl].bandwidth
            });
            factor.push(group.order() as f64 / size as f64);
        }
        Some(Orbits {
            link: orbit[..nl].to_vec(),
            switch: orbit[nl..].to_vec(),
            bandwidth,
            factor,
        })
    }

    /// [`Orbits::usage_of`] every tree of every representative's pool, in pool order.
    pub(crate) fn usages_of(&self, packing: &Packing, index: &TopologyIndex) -> Vec<Vec<Vec<f64>>> {
        packing
            .roots
            .iter()
            .map(|r| {
                r.trees
                    .iter()
                    .map(|(t, _)| self.usage_of(t, index))
                    .collect()
            })
            .collect()
    }

    /// Per orbit, what one unit of a representative's tree puts on each member.
    pub(crate) fn usage_of(&self, tree: &Tree, index: &TopologyIndex) -> Vec<f64> {
        let mut u = vec![0.0; self.bandwidth.len()];
        for (v, p) in tree.iter().enumerate() {
            if let Some(p) = *p {
                let l = index.link_of[&(p, v)];
                u[self.link[l]] += self.factor[self.link[l]];
                for &j in &index.governing[l] {
                    u[self.switch[j]] += self.factor[self.switch[j]];
                }
            }
        }
        u
    }
}

/// The group to pack `topology`'s trees under: its translations where they map every link
/// and switch constraint to one ([`Orbits::new`]), else the identity alone.
pub(crate) fn packing_group(topology: &Topology, index: &TopologyIndex) -> Translations {
    let group = topology.translations();
    if Orbits::new(topology, index, &group).is_some() {
        group
    } else {
        Translations::trivial(topology.ranks)
    }
}

/// A breadth-first (shortest-path) spanning tree of `root`, or `None` if a rank is unreachable.
fn bfs_tree(topology: &Topology, index: &TopologyIndex, root: usize) -> Option<Tree> {
    let mut parent: Tree = vec![None; topology.ranks];
    let mut seen = vec![false; topology.ranks];
    seen[root] = true;
    let mut queue = VecDeque::from([root]);
    while let Some(u) = queue.pop_front() {
        for &l in &index.out_links[u] {
            let v = topology.links[l].dst;
            if !seen[v] {
                seen[v] = true;
                parent[v] = Some(u);
                queue.push_back(v);
            }
        }
    }
    seen.iter().all(|&s| s).then_some(parent)
}

/// Packs trees for the roots in `roots` (representatives of `group`'s orbits), stopping at
/// `target_gbps` per root (the exact optimum, if known), the round cap or `deadline`.
pub fn pack(
    topology: &Topology,
    index: &TopologyIndex,
    group: &Translations,
    roots: &[usize],
    target_gbps: Option<f64>,
    deadline: Instant,
) -> Result<Packing> {
    let Some(orbits) = Orbits::new(topology, index, group) else {
        bail!(
            "internal error: the symmetry group does not map `{}` to itself",
            topology.name
        );
    };
    let mut columns: Vec<(usize, Tree, Vec<f64>)> = Vec::new();
    for (k, &r) in roots.iter().enumerate() {
        let Some(tree) = bfs_tree(topology, index, r) else {
            bail!(
                "`{}` is not connected: rank {r} cannot reach every rank",
                topology.name
            );
        };
        let u = orbits.usage_of(&tree, index);
        columns.push((k, tree, u));
    }
    let mut rounds = 0;
    loop {
        let (time, weights, prices) = solve_master(&orbits, roots.len(), &columns)?;
        rounds += 1;
        let rate = 1.0 / time;
        let done = target_gbps.is_some_and(|t| rate >= t * (1.0 - 1e-9))
            || rounds >= MAX_ROUNDS
            || Instant::now() >= deadline;
        let mut added = false;
        if !done {
            for (k, &root) in roots.iter().enumerate() {
                let current = columns
                    .iter()
                    .zip(&weights)
                    .filter(|((c, _, _), &w)| *c == k && w > 1e-12)
                    .map(|((_, _, u), _)| dot(u, &prices))
                    .fold(f64::INFINITY, f64::min);
                if let Some(tree) = cheapest_tree(topology, index, &orbits, &prices, root) {
                    let u = orbits.usage_of(&tree, index);
                    if dot(&u, &prices) < current * (1.0 - PRICE_TOLERANCE)
                        && !columns.iter().any(|(c, t, _)| *c == k && *t == tree)
                    {
                        columns.push((k, tree, u));
                        added = true;
                    }
                }
            }
        }
        if done || !added {
            let mut per_root: Vec<RootTrees> = roots
                .iter()
                .map(|&root| RootTrees {
                    root,
                    trees: Vec::new(),
                })
                .collect();
            // Every column stays in the pool (weight 0 if unused): integer rounding may
            // prefer trees the fractional optimum did not need.
            for ((k, tree, _), w) in columns.into_iter().zip(weights) {
                per_root[k].trees.push((tree, w.max(0.0)));
            }
            for r in &mut per_root {
                let total: f64 = r.trees.iter().map(|t| t.1).sum();
                r.trees.iter_mut().for_each(|t| t.1 /= total);
            }
            let bound_gbps = dual_bound(topology, index, &orbits, &prices, group, roots)
                .unwrap_or(f64::INFINITY);
            return Ok(Packing {
                roots: per_root,
                rate_gbps: rate,
                group: group.clone(),
                rounds,
                bound_gbps,
            });
        }
    }
}

/// The packing at `packing`'s rate whose trees put ranks fewest hops from their root in all,
/// over its pool and the trees [`shallow_tree`] prices; `None` where its LP fails. Column
/// generation stops at the first packing at the optimum, whose trees can be as deep as the
/// fabric has ranks to relay through (eight DGX-1s: depth 6 on a fabric of diameter 2); a
/// staged schedule pays for every level in pipeline fill.
pub fn shallower(
    topology: &Topology,
    index: &TopologyIndex,
    packing: &Packing,
    deadline: Instant,
) -> Option<Packing> {
    let orbits = Orbits::new(topology, index, &packing.group)?;
    let roots: Vec<usize> = packing.roots.iter().map(|r| r.root).collect();
    let mut columns: Vec<(usize, Tree, Vec<f64>)> = (packing.roots.iter().enumerate())
        .flat_map(|(k, r)| r.trees.iter().map(move |(t, _)| (k, t.clone())))
        .map(|(k, t)| {
            let u = orbits.usage_of(&t, index);
            (k, t, u)
        })
        .collect();
    let time = 1.0 / packing.rate_gbps;
    let (weights, rounds) = shallowest(
        topology,
        index,
        &orbits,
        &roots,
        &mut columns,
        time,
        deadline,
    )
    .ok()?;
    let mut per_root: Vec<RootTrees> = (roots.iter())
        .map(|&root| RootTrees {
            root,
            trees: Vec::new(),
        })
        .collect();
    // Only the trees it weighs: the rounding would otherwise go back to deeper ones of the
    // pool that balance its pieces as well.
    for ((k, tree, _), w) in columns.into_iter().zip(weights) {
        if w > 1e-9 {
            per_root[k].trees.push((tree, w));
        }
    }
    for r in &mut per_root {
        let total: f64 = r.trees.iter().map(|t| t.1).sum();
        r.trees.iter_mut().for_each(|t| t.1 /= total);
    }
    Some(Packing {
        roots: per_root,
        rate_gbps: packing.rate_gbps,
        group: packing.group.clone(),
        rounds: packing.rounds + rounds,
        bound_gbps: packing.bound_gbps,
    })
}

/// Most rounds of [`shallowest`].
const MAX_SHALLOW_ROUNDS: usize = 100;

/// The weights, at time `time`, of the trees whose ranks are fewest hops from their root in
/// all (columns priced by [`shallow_tree`] and added to `columns`), and the LP rounds run.
fn shallowest(
    topology: &Topology,
    index: &TopologyIndex,
    orbits: &Orbits,
    roots: &[usize],
    columns: &mut Vec<(usize, Tree, Vec<f64>)>,
    time: f64,
    deadline: Instant,
) -> Result<(Vec<f64>, usize)> {
    let time = time * (1.0 + 1e-7);
    let mut rounds = 0;
    loop {
        let depths: Vec<f64> = columns.iter().map(|(_, t, _)| total_depth(t)).collect();
        let (weights, prices, per_root) =
            solve_shallow(orbits, roots.len(), columns, &depths, time)?;
        rounds += 1;
        if rounds >= MAX_SHALLOW_ROUNDS || Instant::now() >= deadline {
            return Ok((weights, rounds));
        }
        let mut added = false;
        for (k, &root) in roots.iter().enumerate() {
            let Some(tree) = shallow_tree(topology, index, orbits, &prices, root) else {
                continue;
            };
            let u = orbits.usage_of(&tree, index);
            let reduced = total_depth(&tree) + dot(&u, &prices) - per_root[k];
            if reduced < -1e-9 * (1.0 + per_root[k].abs())
                && !columns.iter().any(|(c, t, _)| *c == k && *t == tree)
            {
                columns.push((k, tree, u));
                added = true;
            }
        }
        if !added {
            return Ok((weights, rounds));
        }
    }
}

/// Hops from the root summed over the ranks of `tree`.
fn total_depth(tree: &Tree) -> f64 {
    (0..tree.len()).map(|v| f64::from(hops(tree, v))).sum()
}

/// Hops from the root of `tree` to `v`.
fn hops(tree: &Tree, mut v: usize) -> u32 {
    let mut hops = 0;
    while let Some(p) = tree[v] {
        v = p;
        hops += 1;
    }
    hops
}

/// The least total depth plus priced load over trees at fixed loads: the weights, the price of
/// each resource orbit and of each root's row.
fn solve_shallow(
    orbits: &Orbits,
    roots: usize,
    columns: &[(usize, Tree, Vec<f64>)],
    depths: &[f64],
    time: f64,
) -> Result<(Vec<f64>, Vec<f64>, Vec<f64>)> {
    let mut vars = ProblemVariables::new();
    let w: Vec<Variable> = columns
        .iter()
        .map(|_| vars.add(variable().min(0.0)))
        .collect();
    let objective: Expression = w.iter().zip(depths).map(|(&x, &d)| d * x).sum();
    let mut model = vars.minimise(objective).using(highs);
    model.set_verbose(false);
    let mut rows = Vec::new();
    for o in 0..orbits.bandwidth.len() {
        let load: Expression = columns
            .iter()
            .zip(&w)
            .filter(|((_, _, u), _)| u[o] > 0.0)
            .map(|((_, _, u), &x)| u[o] * x)
            .sum();
        rows.push(model.add_constraint(load.leq(orbits.bandwidth[o] * time)));
    }
    let mut root_rows = Vec::new();
    for k in 0..roots {
        let total: Expression = columns
            .iter()
            .zip(&w)
            .filter(|((c, _, _), _)| *c == k)
            .map(|(_, &x)| Expression::from(x))
            .sum();
        root_rows.push(model.add_constraint(total.geq(1.0)));
    }
    let mut solution = match model.solve() {
        Ok(s) => s,
        Err(e) => bail!("shallow tree packing LP failed: {e}"),
    };
    let weights: Vec<f64> = w.iter().map(|&x| solution.value(x)).collect();
    let duals = solution.compute_dual();
    let prices: Vec<f64> = rows.iter().map(|r| duals.dual(r.clone()).abs()).collect();
    let per_root: Vec<f64> = root_rows
        .iter()
        .map(|r| duals.dual(r.clone()).abs())
        .collect();
    Ok((weights, prices, per_root))
}

/// A spanning tree of `root` grown one rank at a time (Prim's order), each rank joined by the
/// link whose price plus the depth it reaches is least: a heuristic for the least total
/// depth plus priced load.
fn shallow_tree(
    topology: &Topology,
    index: &TopologyIndex,
    orbits: &Orbits,
    prices: &[f64],
    root: usize,
) -> Option<Tree> {
    let price = link_prices(topology, index, orbits, prices);
    let n = topology.ranks;
    let mut tree: Tree = vec![None; n];
    let mut depth = vec![u32::MAX; n];
    let mut best: Vec<(f64, usize)> = vec![(f64::INFINITY, usize::MAX); n];
    depth[root] = 0;
    let mut last = root;
    for _ in 1..n {
        for &l in &index.out_links[last] {
            let v = topology.links[l].dst;
            if depth[v] == u32::MAX {
                let c = price[l] + f64::from(depth[last] + 1);
                if c < best[v].0 {
                    best[v] = (c, last);
                }
            }
        }
        let v = (0..n)
            .filter(|&v| depth[v] == u32::MAX && best[v].1 != usize::MAX)
            .min_by(|&a, &b| best[a].0.total_cmp(&best[b].0))?;
        let u = best[v].1;
        tree[v] = Some(u);
        depth[v] = depth[u] + 1;
        last = v;
    }
    Some(tree)
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// The master LP: the least time T, the column weights and the price of each resource orbit.
fn solve_master(
    orbits: &Orbits,
    roots: usize,
    columns: &[(usize, Tree, Vec<f64>)],
) -> Result<(f64, Vec<f64>, Vec<f64>)> {
    let mut vars = ProblemVariables::new();
    let time = vars.add(variable().min(0.0));
    let w: Vec<Variable> = columns
        .iter()
        .map(|_| vars.add(variable().min(0.0)))
        .collect();
    let mut model = vars.minimise(time).using(highs);
    model.set_verbose(false);
    let mut rows = Vec::new();
    for o in 0..orbits.bandwidth.len() {
        let load: Expression = columns
            .iter()
            .zip(&w)
            .filter(|((_, _, u), _)| u[o] > 0.0)
            .map(|((_, _, u), &x)| u[o] * x)
            .sum();
        rows.push(model.add_constraint(load.leq(orbits.bandwidth[o] * time)));
    }
    for k in 0..roots {
        let total: Expression = columns
            .iter()
            .zip(&w)
            .filter(|((c, _, _), _)| *c == k)
            .map(|(_, &x)| Expression::from(x))
            .sum();
        model.add_constraint(total.geq(1.0));
    }
    let mut solution = match model.solve() {
        Ok(s) => s,
        Err(e) => bail!("tree packing LP failed: {e}"),
    };
    let t = solution.value(time);
    let weights: Vec<f64> = w.iter().map(|&x| solution.value(x)).collect();
    let duals = solution.compute_dual();
    let prices: Vec<f64> = rows.iter().map(|r| duals.dual(r.clone()).abs()).collect();
    if !(t.is_finite() && t > 0.0) {
        bail!("tree packing LP gave no positive time");
    }
    Ok((t, weights, prices))
}

/// The price of each link under orbit `prices`: its own orbit's and those of the switch
/// constraints governing it, each times the orbit's factor (what [`Orbits::usage_of`] puts
/// on the orbit's row per use).
fn link_prices(
    topology: &Topology,
    index: &TopologyIndex,
    orbits: &Orbits,
    prices: &[f64],
) -> Vec<f64> {
    (0..topology.links.len())
        .map(|i| {
            let mut cost = prices[orbits.link[i]] * orbits.factor[orbits.link[i]];
            for &j in &index.governing[i] {
                cost += prices[orbits.switch[j]] * orbits.factor[orbits.switch[j]];
            }
            cost
        })
        .collect()
}

/// The cheapest spanning tree of `root` under orbit prices, shallow trees first among equals.
fn cheapest_tree(
    topology: &Topology,
    index: &TopologyIndex,
    orbits: &Orbits,
    prices: &[f64],
    root: usize,
) -> Option<Tree> {
    let scale = prices.iter().copied().fold(0.0, f64::max).max(1e-12);
    let dist = &index.distances[root];
    let costs = link_prices(topology, index, orbits, prices);
    let edges: Vec<Edge> = (topology.links.iter().zip(costs))
        .map(|(l, cost)| {
            // Tie-break towards shallow trees: among equally priced edges, prefer tails near
            // the root (on symmetric fabrics which rank relays does not change any load).
            let tail = dist[l.src].unwrap_or(topology.ranks) as f64;
            let forward = matches!((dist[l.src], dist[l.dst]), (Some(a), Some(b)) if b == a + 1);
            Edge {
                from: l.src,
                to: l.dst,
                cost: cost + scale * 1e-7 * (tail + if forward { 0.0 } else { 1.0 }),
            }
        })
        .collect();
    let chosen = min_arborescence(topology.ranks, root, &edges)?;
    let mut tree: Tree = vec![None; topology.ranks];
    for i in chosen {
        tree[edges[i].to] = Some(edges[i].from);
    }
    Some(tree)
}

/// An upper bound (GB/s per root) on the rate of every fractional packing of spanning trees
/// for all ranks as roots, by weak duality: give every link and switch constraint the price
/// of its orbit in `prices` (times the orbit's factor; any prices y ≥ 0 do), and any packing
/// takes at least the time `Σ_r cheapest tree of r / Σ_e y_e·bandwidth_e`. Every allgather
/// streams each root's data along such trees (a rank's first copy of each byte names its
/// parent), so the bound holds for every schedule. The cheapest trees are exact minimum
/// arborescences and a root's orbit under `group` shares its cost, so the bound does not
/// depend on the LP solver's tolerances. `None` where it cannot be formed.
fn dual_bound(
    topology: &Topology,
    index: &TopologyIndex,
    orbits: &Orbits,
    prices: &[f64],
    group: &Translations,
    roots: &[usize],
) -> Option<f64> {
    let costs = link_prices(topology, index, orbits, prices);
    if costs.iter().any(|c| !(c.is_finite() && *c >= 0.0)) {
        return None;
    }
    let edges: Vec<Edge> = (topology.links.iter().zip(&costs))
        .map(|(l, &cost)| Edge {
            from: l.src,
            to: l.dst,
            cost,
        })
        .collect();
    let mut covered = vec![false; topology.ranks];
    let mut cheapest_total = 0.0;
    for &root in roots {
        let mut orbit_size = 0.0;
        for g in &group.elements {
            let image = g[root] as usize;
            if !std::mem::replace(&mut covered[image], true) {
                orbit_size += 1.0;
            }
        }
        let chosen = min_arborescence(topology.ranks, root, &edges)?;
        let cost: f64 = chosen.iter().map(|&i| edges[i].cost).sum();
        cheapest_total += orbit_size * cost;
    }
    if covered.iter().any(|&c| !c) {
        return None;
    }
    let link_part = (topology.links.iter().enumerate())
        .map(|(i, l)| prices[orbits.link[i]] * orbits.factor[orbits.link[i]] * l.bandwidth);
    let switch_part = (topology.switches.iter().enumerate())
        .map(|(j, s)| prices[orbits.switch[j]] * orbits.factor[orbits.switch[j]] * s.bandwidth);
    let priced_capacity: f64 = link_part.chain(switch_part).sum();
    (cheapest_total > 0.0 && priced_capacity.is_finite()).then(|| priced_capacity / cheapest_total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::{allgather_rate, FlowNetwork};

    /// The weighted mean over roots of the hops from the root summed over ranks.
    fn mean_depth(p: &Packing) -> f64 {
        let total: f64 = (p.roots.iter())
            .flat_map(|r| r.trees.iter().map(|(t, w)| total_depth(t) * w))
            .sum();
        total / p.roots.len() as f64
    }

    #[test]
    fn at_the_optimum_the_packing_takes_the_shallowest_trees() {
        // Two DGX-1s: column generation stops at trees four levels deep (eight DGX-1s: six)
        // on a fabric of diameter 2.
        let t = crate::topology::load_nodes("dgx1", Some(2), None).unwrap();
        let index = t.index();
        let group = t.translations();
        let roots = group.representatives();
        let optimum = allgather_rate(&FlowNetwork::new(&t).unwrap(), &roots)
            .unwrap()
            .as_f64();
        let deadline = Instant::now() + std::time::Duration::from_secs(3600);
        let first = pack(&t, &index, &group, &roots, Some(optimum), deadline).unwrap();
        let shallow = shallower(&t, &index, &first, deadline).unwrap();
        let orbits = Orbits::new(&t, &index, &group).unwrap();
        for p in [&first, &shallow] {
            assert!(p.rate_gbps >= optimum * (1.0 - 1e-9), "{}", p.rate_gbps);
            // The weights keep every resource within the optimum's time.
            let mut load = vec![0.0; orbits.bandwidth.len()];
            for r in &p.roots {
                for (tree, w) in &r.trees {
                    for (o, u) in orbits.usage_of(tree, &index).iter().enumerate() {
                        load[o] += w * u;
                    }
                }
            }
            for (l, b) in load.iter().zip(&orbits.bandwidth) {
                assert!(*l <= b / optimum * (1.0 + 1e-6), "{l} over {b}");
            }
        }
        let (deep, shallow_depth) = (mean_depth(&first), mean_depth(&shallow));
        let deepest = |p: &Packing| {
            (p.roots.iter().flat_map(|r| &r.trees))
                .filter(|(_, w)| *w > 1e-9)
                .map(|(t, _)| (0..t.len()).map(|v| hops(t, v)).max().unwrap_or(0))
                .max()
        };
        // 30 -> 28 hops in all per root, at most 4 -> 3 levels (one NIC hop, two NVLink).
        assert!(shallow_depth < deep - 1.0, "{shallow_depth} against {deep}");
        assert!(deepest(&shallow) < deepest(&first));
        assert_eq!(deepest(&shallow), Some(3));
    }

    #[test]
    fn the_lp_prices_bound_every_packing_even_when_stopped_early() {
        // Two nodes of three GPUs in a line, one NIC per node. An end GPU has one 25 GB/s
        // link, so of the 5x GB/s it receives (x per root) 5x - 25 come through the NIC, which
        // the node's two ends share: 2(5x - 25) <= 25, x <= 7.5. The cuts allow 25/3 GB/s.
        let t = crate::topology::toml_format::parsed_text(
            "[multinode]\nnode = \"line:3\"\nnodes = 2\nnic_bandwidth = 25\nnics_per_node = 1\n",
        );
        let index = t.index();
        let group = t.translations();
        let roots = group.representatives();
        let far = Instant::now() + std::time::Duration::from_secs(3600);
        let full = pack(&t, &index, &group, &roots, None, far).unwrap();
        assert!((full.rate_gbps - 7.5).abs() < 1e-6, "{}", full.rate_gbps);
        assert!((full.bound_gbps - 7.5).abs() < 1e-6, "{}", full.bound_gbps);
        // Out of time after the first LP (breadth-first trees only): a lower rate, and a
        // bound that still holds.
        let early = pack(&t, &index, &group, &roots, None, Instant::now()).unwrap();
        assert_eq!(early.rounds, 1);
        assert!(early.rate_gbps <= 7.5 + 1e-9, "{}", early.rate_gbps);
        assert!(early.bound_gbps >= 7.5 - 1e-9, "{}", early.bound_gbps);
    }
}
