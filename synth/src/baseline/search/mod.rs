//! Packing directed Hamiltonian cycles into link capacities: the search behind NCCL's rings
//! ([`super::orders`]).
//!
//! NCCL's topology search builds as many rings (channels) as the links' bandwidth carries,
//! each ring taking one share of every link it crosses. Here the links among a set of
//! vertices are arcs with a number of units (rings an arc carries at most) that may also draw
//! on shared pools (NVSwitch ports, NICs), and [`pack`] looks for as many directed
//! Hamiltonian cycles as fit, up to a bound:
//!
//! * **Pairs first.** Where arcs come in both directions, a cycle and its reverse use
//!   disjoint arcs, so the search finds undirected Hamiltonian cycles (each taking one unit
//!   of both arcs of its edges) and keeps each with its reverse; then directed cycles fill
//!   what capacity is left. Where that stops short of the bound (an odd number of units per
//!   rank, as on a fully connected 8-GPU node), a second strategy looks for directed cycles
//!   only, and the better packing is kept.
//! * **One cycle.** Depth-first search from the vertex of fewest links, extending the path
//!   to the vertex of fewest onward exits (Warnsdorff's rule; ties by spare units, then by a
//!   seeded priority per vertex). It prunes a vertex that can no longer be placed (fewer
//!   than two usable links into what is left), moves that a vertex with no other way in
//!   forces, and moves that cut what is left of the fabric in two (an interleaved search from
//!   the cut vertex's neighbours, costing about the smaller side).
//! * **Lookahead.** A cycle is kept only if what it leaves can still hold the cycles still
//!   to be found (room at every vertex, a 2-connected rest). Before the last cycle, a vertex
//!   left with exactly the units the last cycle needs has its remaining links forced into
//!   it; forced links must form paths, and a forced cycle that misses a vertex prunes the
//!   branch.
//! * **The last two at once.** Where the last two undirected cycles must use every link
//!   left, one unit each, at every vertex (a torus after its other cycles: four links per
//!   vertex), they are found together by switching (`switch.rs`): the links of an
//!   Euler circuit alternately give two 2-factors, and switches on alternating 4-cycles
//!   merge their cycles until both are Hamiltonian. This is what finds the two
//!   edge-disjoint Hamiltonian cycles of a 2-D torus (four rings) and the last two of a 3-D
//!   torus or a 6-D hypercube at any labelling.
//! * **Cycles of cycles.** Within an attempt the cycles themselves are searched depth first:
//!   a cycle after which the next ones cannot be found is replaced by the search's next one.
//! * **Restarts.** Each attempt runs with its own seed (seed 0 orders by index) and a budget
//!   of DFS nodes; a strategy first probes the most cycles it may find, then goes up from
//!   one, until the bound is reached or [`PACK_BUDGET`] nodes are spent. The budget counts
//!   nodes (a switch counts as a number of nodes by the vertices it looks at), never
//!   seconds, so the result does not depend on the machine. A search that exhausts every
//!   branch proves its target out of reach.
//! * **No search where none can succeed**: a fabric that is disconnected, has a cut vertex
//!   or a vertex of fewer than two neighbours, or is bipartite with unequal sides has no
//!   Hamiltonian cycle ([`hamiltonian_impossible`]).
//!
//! The module knows nothing of topologies: [`Capacities`] is built by the caller.

mod cycle;
mod switch;
mod walk;

use cycle::{CycleSearch, Outcome};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use std::collections::VecDeque;
use switch::{switch_pair, switchable};
use walk::{Mode, Walk};

/// Most DFS nodes one [`pack`] visits, over all its attempts.
pub const PACK_BUDGET: usize = 1_000_000;
/// Fewest DFS nodes one attempt may visit; larger vertex sets get [`ATTEMPT_NODES_PER_VERTEX`]
/// per vertex.
const ATTEMPT_BUDGET: usize = 10_000;
/// DFS nodes per vertex one attempt may visit.
const ATTEMPT_NODES_PER_VERTEX: usize = 16;
/// Most attempts per strategy.
const MAX_ATTEMPTS: u64 = 256;
/// Vertices per DFS node one switch of [`switch_pair`] counts as (a switch looks at every
/// vertex).
const SWITCH_VERTICES_PER_NODE: usize = 32;
/// Attempts a strategy makes at one number of cycles before it moves on.
const STALL_ATTEMPTS: u64 = 32;
/// Attempts a strategy first makes at the most cycles it may find.
const PROBE_ATTEMPTS: u64 = 4;

/// The links among a set of vertices, in capacity units (rings).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Capacities {
    /// Number of vertices (`0..vertices`).
    pub vertices: usize,
    /// Directed arcs, at most one per ordered pair.
    pub arcs: Vec<Arc>,
    /// Units of each shared pool (a switch port, a NIC) that arcs draw on.
    pub pools: Vec<i64>,
}

/// One directed arc of [`Capacities`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arc {
    /// Sending vertex.
    pub src: usize,
    /// Receiving vertex.
    pub dst: usize,
    /// Rings the arc carries at most.
    pub units: i64,
    /// Pools (indices into [`Capacities::pools`]) that every ring crossing the arc draws one
    /// unit of.
    pub pools: Vec<usize>,
}

/// Whether cycles are searched as undirected cycles kept with their reverse, or as directed
/// cycles.
/// The root of `x` in a union-find forest.
fn root(parent: &mut [usize], mut x: usize) -> usize {
    while parent[x] != x {
        parent[x] = parent[parent[x]];
        x = parent[x];
    }
    x
}

/// Seeded priorities of the vertices: the index order for seed 0, a shuffle otherwise.
fn priorities(n: usize, seed: u64) -> Vec<u64> {
    let mut prio: Vec<u64> = (0..n as u64).collect();
    if seed > 0 {
        prio.shuffle(&mut rand::rngs::StdRng::seed_from_u64(seed));
    }
    prio
}

/// The rings of one cycle: the cycle and, for an undirected one, its reverse.
fn rings_of(walk: &Walk, cycle: Vec<usize>) -> Vec<Vec<usize>> {
    if walk.mode == Mode::Directed {
        return vec![cycle];
    }
    let mut back = cycle.clone();
    back[1..].reverse();
    vec![cycle, back]
}

/// The units of every resource (arcs, then pools) of `caps`.
fn full_units(caps: &Capacities) -> Vec<i64> {
    (caps.arcs.iter().map(|a| a.units))
        .chain(caps.pools.iter().copied())
        .collect()
}

/// One seeded attempt: `target` cycles of `first` by depth-first search over the cycles
/// themselves (each level a [`CycleSearch`] under what the levels before it left; a level
/// that runs dry resumes the one before; the last two cycles of a pair walk at once by
/// [`switch_pair`] where it applies), then directed cycles of `fill` one after the other up
/// to `bound` rings in all. The rings of the deepest levels reached, how many cycles of
/// `first` they hold, and whether the search proved that `target` cycles of `first` do not
/// fit.
fn attempt(
    (first, target): (&Walk, usize),
    fill: Option<&Walk>,
    (bound, full): (usize, &[i64]),
    (prio, seed): (&[u64], u64),
    budget: &mut usize,
) -> (Vec<Vec<usize>>, usize, bool) {
    let mut best: Vec<Vec<usize>> = Vec::new();
    let mut best_left = full.to_vec();
    let mut levels: Vec<CycleSearch> = Vec::new();
    // The residual for the next level to open; `None`: resume the deepest one.
    let mut next = Some(full.to_vec());
    let (mut proof, mut unreachable) = (true, false);
    while best.len() < target && *budget > 0 {
        if let Some(left) = next.take() {
            let need_after = target - levels.len() - 1;
            if need_after != 1 || !switchable(first, &left) {
                levels.push(CycleSearch::new(first, left, prio, need_after));
            } else if let Some((pair, rest)) = switch_pair(first, &left, seed, budget) {
                best = levels.iter().map(|l| l.path.clone()).chain(pair).collect();
                best_left = rest;
                break;
            } else {
                // A heuristic failed: running dry no longer proves anything.
                proof = false;
            }
        }
        let Some(top) = levels.last_mut() else {
            break;
        };
        match top.resume(budget) {
            Outcome::Found(_) => {
                let depth = levels.len();
                if depth > best.len() {
                    best = levels.iter().map(|l| l.path.clone()).collect();
                    best_left = levels[depth - 1].left.clone();
                }
                next = Some(levels[depth - 1].left.clone());
            }
            Outcome::Exhausted => {
                levels.pop();
                unreachable = levels.is_empty() && proof;
            }
            Outcome::OutOfBudget => break,
        }
    }
    let cycles = best.len();
    let mut rings: Vec<Vec<usize>> = best.into_iter().flat_map(|c| rings_of(first, c)).collect();
    if let Some(fill) = fill {
        while rings.len() < bound {
            let need_after = bound - rings.len() - 1;
            let mut search = CycleSearch::new(fill, best_left, prio, need_after);
            let Outcome::Found(cycle) = search.resume(budget) else {
                break;
            };
            rings.push(cycle);
            best_left = search.left;
        }
    }
    rings.truncate(bound);
    (rings, cycles, unreachable)
}

/// Seeded attempts of one strategy (see [`attempt`]) for `targets.1` cycles of `first`
/// ([`PROBE_ATTEMPTS`] attempts: where the last two cycles can be switched into shape, the
/// most is often easier than fewer), then for ever more cycles from `targets.0` on
/// ([`STALL_ATTEMPTS`] attempts each), skipping targets already reached or proved out of
/// reach, until the bound is reached or the budget is spent. The most rings any attempt
/// found.
fn strategy(
    caps: &Capacities,
    (first, targets): (&Walk, (usize, usize)),
    fill: Option<&Walk>,
    bound: usize,
    budget: &mut usize,
) -> Vec<Vec<usize>> {
    let n = caps.vertices;
    let per_attempt = ATTEMPT_BUDGET.max(ATTEMPT_NODES_PER_VERTEX * n);
    let full = full_units(caps);
    let mut best: Vec<Vec<usize>> = Vec::new();
    let (mut seed, mut reached, mut limit) = (0, 0, targets.1);
    let plan = std::iter::once((targets.1, PROBE_ATTEMPTS))
        .chain((targets.0..=targets.1).map(|t| (t, STALL_ATTEMPTS)));
    for (target, tries) in plan {
        for _ in 0..tries {
            if target <= reached || target > limit || seed >= MAX_ATTEMPTS || *budget == 0 {
                break;
            }
            let mut local = per_attempt.min(*budget);
            let before = local;
            let prio = priorities(n, seed);
            let (rings, cycles, unreachable) = attempt(
                (first, target),
                fill,
                (bound, &full),
                (&prio, seed),
                &mut local,
            );
            *budget = budget.saturating_sub((before - local).max(n));
            seed += 1;
            if rings.len() > best.len() {
                best = rings;
            }
            if best.len() >= bound {
                return best;
            }
            reached = reached.max(cycles);
            if unreachable {
                limit = target - 1;
            }
        }
    }
    best
}

/// As many directed Hamiltonian cycles over `caps`'s vertices as fit its capacities, at most
/// `bound` (see the module docs), each as a vertex order starting at its first vertex; none
/// where the fabric has no Hamiltonian cycle or the search found none within
/// [`PACK_BUDGET`]. One vertex is one trivial cycle. Deterministic.
pub fn pack(caps: &Capacities, bound: usize) -> Vec<Vec<usize>> {
    let n = caps.vertices;
    if n == 0 || bound == 0 {
        return Vec::new();
    }
    if n == 1 {
        return vec![vec![0]];
    }
    if hamiltonian_impossible(caps) {
        return Vec::new();
    }
    let mut budget = PACK_BUDGET;
    let directed = Walk::new(caps, Mode::Directed);
    let (mut best, mut most_pairs) = (Vec::new(), 0);
    if n >= 3 {
        let pairs = Walk::new(caps, Mode::Pairs);
        let full = full_units(caps);
        let room = (0..n).map(|v| pairs.room(&full, v)).min().unwrap_or(0);
        most_pairs = (bound / 2).min(room.max(0) as usize);
        let targets = (1, most_pairs);
        best = strategy(caps, (&pairs, targets), Some(&directed), bound, &mut budget);
    }
    // Directed cycles alone, where pairs cannot reach the bound (an odd number of units) or
    // found nothing.
    if best.len() < bound && (2 * most_pairs < bound || best.is_empty()) {
        let targets = (best.len() + 1, bound);
        let other = strategy(caps, (&directed, targets), None, bound, &mut budget);
        if other.len() > best.len() {
            best = other;
        }
    }
    best
}

/// Whether `caps` certainly has no directed Hamiltonian cycle: its arcs (those with a unit
/// left, as undirected edges) leave it disconnected, give a vertex fewer than two
/// neighbours, have a cut vertex, or form a bipartite graph with unequal sides (more than
/// two vertices); two vertices need arcs both ways.
pub fn hamiltonian_impossible(caps: &Capacities) -> bool {
    let n = caps.vertices;
    let usable = |a: &Arc| a.units >= 1 && a.pools.iter().all(|&p| caps.pools[p] >= 1);
    let mut adj: Vec<Vec<usize>> = vec![Vec::new(); n];
    for a in caps.arcs.iter().filter(|a| usable(a) && a.src != a.dst) {
        for (x, y) in [(a.src, a.dst), (a.dst, a.src)] {
            if !adj[x].contains(&y) {
                adj[x].push(y);
            }
        }
    }
    if n <= 2 {
        let both = |x: usize, y: usize| {
            caps.arcs
                .iter()
                .any(|a| a.src == x && a.dst == y && usable(a))
        };
        return n == 2 && !(both(0, 1) && both(1, 0));
    }
    adj.iter().any(|a| a.len() < 2) || !biconnected(&adj) || unbalanced_bipartite(&adj)
}

/// Whether the undirected graph `adj` is connected and has no cut vertex (Tarjan's
/// low-link, iterative).
fn biconnected(adj: &[Vec<usize>]) -> bool {
    let n = adj.len();
    let mut disc = vec![usize::MAX; n];
    let mut low = vec![0; n];
    let mut time = 0;
    let mut root_children = 0;
    disc[0] = 0;
    low[0] = 0;
    // (vertex, parent, next neighbour index)
    let mut stack = vec![(0usize, usize::MAX, 0usize)];
    while let Some(&mut (v, parent, ref mut i)) = stack.last_mut() {
        if let Some(&w) = adj[v].get(*i) {
            *i += 1;
            if disc[w] == usize::MAX {
                time += 1;
                disc[w] = time;
                low[w] = time;
                if v == 0 {
                    root_children += 1;
                }
                stack.push((w, v, 0));
            } else if w != parent {
                low[v] = low[v].min(disc[w]);
            }
            continue;
        }
        stack.pop();
        if parent != usize::MAX {
            low[parent] = low[parent].min(low[v]);
            if parent != 0 && low[v] >= disc[parent] {
                return false;
            }
        }
    }
    disc.iter().all(|&d| d != usize::MAX) && root_children <= 1
}

/// Whether the connected graph `adj` is bipartite with sides of different sizes.
fn unbalanced_bipartite(adj: &[Vec<usize>]) -> bool {
    let n = adj.len();
    let mut side = vec![u8::MAX; n];
    side[0] = 0;
    let mut queue = VecDeque::from([0]);
    while let Some(v) = queue.pop_front() {
        for &w in &adj[v] {
            if side[w] == u8::MAX {
                side[w] = 1 - side[v];
                queue.push_back(w);
            } else if side[w] == side[v] {
                return false;
            }
        }
    }
    let ones = side.iter().filter(|&&s| s == 1).count();
    2 * ones != n
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Arcs both ways of `units` between the `pairs` over `n` vertices.
    fn caps(n: usize, pairs: &[(usize, usize)], units: i64) -> Capacities {
        let arcs = (pairs.iter())
            .flat_map(|&(a, b)| [(a, b), (b, a)])
            .map(|(src, dst)| Arc {
                src,
                dst,
                units,
                pools: Vec::new(),
            })
            .collect();
        Capacities {
            vertices: n,
            arcs,
            pools: Vec::new(),
        }
    }

    fn complete(n: usize) -> Vec<(usize, usize)> {
        (0..n)
            .flat_map(|a| (a + 1..n).map(move |b| (a, b)))
            .collect()
    }

    /// Checks that each cycle visits every vertex once over arcs, within their units.
    fn check(c: &Capacities, cycles: &[Vec<usize>]) {
        let mut used: HashMap<(usize, usize), i64> = HashMap::new();
        for cycle in cycles {
            let mut seen = cycle.clone();
            seen.sort_unstable();
            assert_eq!(seen, (0..c.vertices).collect::<Vec<_>>());
            for i in 0..cycle.len() {
                *used
                    .entry((cycle[i], cycle[(i + 1) % cycle.len()]))
                    .or_insert(0) += 1;
            }
        }
        for ((a, b), k) in used {
            let arc = c.arcs.iter().find(|x| x.src == a && x.dst == b);
            assert!(arc.is_some_and(|x| x.units >= k), "{a}->{b} used {k} times");
        }
    }

    #[test]
    fn fabrics_without_a_hamiltonian_cycle_are_recognised() {
        let star = caps(4, &[(0, 1), (0, 2), (0, 3)], 1);
        let bowtie = caps(5, &[(0, 1), (1, 2), (2, 0), (2, 3), (3, 4), (4, 2)], 1);
        let k23 = caps(5, &[(0, 2), (0, 3), (0, 4), (1, 2), (1, 3), (1, 4)], 1);
        let apart = caps(6, &[(0, 1), (1, 2), (2, 0), (3, 4), (4, 5), (5, 3)], 1);
        for c in [&star, &bowtie, &k23, &apart] {
            assert!(hamiltonian_impossible(c));
            assert!(pack(c, 2).is_empty());
        }
        let c5 = caps(5, &[(0, 1), (1, 2), (2, 3), (3, 4), (4, 0)], 1);
        assert!(!hamiltonian_impossible(&c5));
        assert_eq!(pack(&c5, 2).len(), 2);
    }

    #[test]
    fn an_odd_number_of_units_is_filled_with_directed_cycles() {
        // K8: 7 arc-disjoint directed Hamiltonian cycles (three undirected pairs leave a
        // perfect matching, so the directed strategy finds the seventh).
        let k8 = caps(8, &complete(8), 1);
        let cycles = pack(&k8, 7);
        assert_eq!(cycles.len(), 7);
        check(&k8, &cycles);
        assert_eq!(pack(&k8, 7), cycles, "deterministic");
        // Two vertices: one ring per unit.
        let two = caps(2, &[(0, 1)], 2);
        assert_eq!(pack(&two, 2), vec![vec![0, 1], vec![0, 1]]);
        assert_eq!(pack(&caps(1, &[], 1), 4), vec![vec![0]]);
    }

    #[test]
    fn a_pool_limits_the_rings() {
        // A ring of 4 whose every arc draws on one pool of 4 units: one directed cycle.
        let mut c = caps(4, &[(0, 1), (1, 2), (2, 3), (3, 0)], 1);
        for a in &mut c.arcs {
            a.pools = vec![0];
        }
        c.pools = vec![4];
        let cycles = pack(&c, 2);
        assert_eq!(cycles.len(), 1);
        check(&c, &cycles);
    }
}
