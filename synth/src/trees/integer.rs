//! An integer tree packing at the exact optimum, built edge by edge (Lovász's constructive
//! proof of Edmonds' arborescence-packing theorem), reduced by symmetry.
//!
//! At the allgather optimum `x*` (GB/s per root), give every root `k` trees of `x*/k` GB/s
//! each, `k` the smallest count that makes every link's capacity a whole number of trees
//! (`units(e) = bandwidth(e)·k / x*`). Edmonds' theorem says such trees exist exactly when
//! every vertex set X is entered by at least `k` units per root outside X, which is the
//! optimum's own condition; so no rounding is lost: `k` pieces per root, one per tree, reach
//! the optimum exactly.
//!
//! Lovász's proof builds them: grow the trees one edge at a time, and accept an edge only if
//! the partial trees `R_i` and the remaining units still satisfy, for every nonempty vertex
//! set X, `units entering X ≥ #{i : R_i ∩ X = ∅}`; an acceptable edge always exists. The
//! condition is one maximum flow per sink: a source feeds one unit to each tree, each tree
//! feeds its vertices, and every rank must receive one unit per tree; after an edge is
//! added, only the sets that contain its head can break it, so one flow decides.
//!
//! Trees of the roots in one orbit of a [`Translations`] group are images of their
//! representative's, so an edge added to a representative's tree is added to all its images
//! at once, taking one unit from every link of its orbit (the group acts freely, so each
//! link of the orbit gets exactly one of the images). With images added together the proof's guarantee no
//! longer holds in general; where no edge is acceptable the construction gives up and the
//! fractional packing is rounded instead.
//!
//! Fabrics with switch constraints (NVSwitch ports, NICs) are left to the fractional
//! packing: their trees would need Steiner vertices.

use super::packing::{Orbits, Packing, RootTrees, Tree};
use crate::flow::maxflow::MaxFlow;
use crate::remembered::Remembered;
use crate::topology::{Topology, TopologyIndex, Translations};
use num_rational::Ratio;
use std::cell::Cell;

/// Most trees per root tried for whole-number link capacities.
const MAX_TREES_PER_ROOT: i128 = 8;

/// Most trees (over all roots) whose partial vertex sets the flow checks carry.
const MAX_TREES: usize = 512;

/// Most arc visits, over all flow checks, before the construction gives up (a bound on its
/// work, independent of the machine's speed).
const MAX_WORK: u64 = 40_000_000;

/// The integer packing at the exact optimum `optimum` (GB/s per root) for the roots
/// `roots` (representatives of `group`'s orbits), or `None` where no small tree count makes
/// every capacity whole, the fabric has switch constraints, the construction finds no
/// acceptable edge or runs out of work. The answers for the last inputs are
/// kept: a fabric and its reversal with the same links (both ways alike) get one packing.
pub fn pack_integer(
    topology: &Topology,
    group: &Translations,
    roots: &[usize],
    optimum: Ratio<i128>,
) -> Option<Packing> {
    if !topology.switches.is_empty() || roots.is_empty() {
        return None;
    }
    // Built on the fabric in sorted order, so that the packing is a function of the input
    // (whether it was kept or not) and not of the order the fabric lists its links in.
    let canonical = topology.in_sorted_order();
    let input = Input {
        ranks: topology.ranks,
        links: (canonical.links.iter())
            .map(|l| (l.src, l.dst, l.bandwidth.to_bits()))
            .collect(),
        group: group.clone(),
        roots: roots.to_vec(),
        optimum,
    };
    if let Some(found) = PACKINGS.find(|i| *i == input) {
        return found;
    }
    let found = construct(&canonical, &canonical.index(), group, roots, optimum);
    PACKINGS.keep(input.clone(), found.clone(), |i| *i == input);
    found
}

/// What decides [`pack_integer`]'s packing: the links as a set (a packing valid for one
/// order of them is valid for any), the group, the roots and the optimum.
#[derive(PartialEq, Clone)]
struct Input {
    ranks: usize,
    links: Vec<(usize, usize, u64)>,
    group: Translations,
    roots: Vec<usize>,
    optimum: Ratio<i128>,
}

/// The last inputs of [`pack_integer`] and what it found for them.
static PACKINGS: Remembered<Input, Option<Packing>> = Remembered::new(8);

thread_local! {
    /// Integer packings constructed on this thread, rather than handed out again.
    static CONSTRUCTED: Cell<usize> = const { Cell::new(0) };
}

/// Integer packings [`pack_integer`] constructed on this thread (a test's count of work).
pub fn constructed() -> usize {
    CONSTRUCTED.with(Cell::get)
}

/// [`pack_integer`] without the memory: Lovász's construction.
fn construct(
    topology: &Topology,
    index: &TopologyIndex,
    group: &Translations,
    roots: &[usize],
    optimum: Ratio<i128>,
) -> Option<Packing> {
    CONSTRUCTED.with(|n| n.set(n.get() + 1));
    let orbits = Orbits::new(topology, index, group)?;
    let (k, units) = whole_units(&orbits.bandwidth, optimum)?;
    if topology.ranks * k > MAX_TREES {
        return None;
    }
    let mut state = Construction::new(topology, index, group, roots, &orbits, k, units);
    let grown = state.grow();
    if std::env::var_os("SYNTH_TRACE").is_some() {
        eprintln!(
            "integer packing: k {k}, work {}, {}",
            state.work,
            if grown.is_some() { "done" } else { "gave up" }
        );
    }
    grown?;
    let weight = 1.0 / k as f64;
    Some(Packing {
        roots: roots
            .iter()
            .enumerate()
            .map(|(ri, &root)| RootTrees {
                root,
                trees: (0..k)
                    .map(|i| (state.trees[ri * k + i].parent.clone(), weight))
                    .collect(),
            })
            .collect(),
        rate_gbps: *optimum.numer() as f64 / *optimum.denom() as f64,
        group: group.clone(),
        bound_gbps: f64::INFINITY,
        rounds: 0,
    })
}

/// The smallest tree count `k` per root at which every orbit's bandwidth carries a whole
/// number of trees of `optimum / k` GB/s, and those numbers.
fn whole_units(bandwidth: &[f64], optimum: Ratio<i128>) -> Option<(usize, Vec<i128>)> {
    if *optimum.numer() <= 0 {
        return None;
    }
    let exact: Vec<Ratio<i128>> = bandwidth
        .iter()
        .map(|&b| {
            let r = Ratio::<i64>::approximate_float(b)?;
            Some(Ratio::new(*r.numer() as i128, *r.denom() as i128))
        })
        .collect::<Option<_>>()?;
    (1..=MAX_TREES_PER_ROOT).find_map(|k| {
        let units: Vec<Ratio<i128>> = exact.iter().map(|b| b * k / optimum).collect();
        units
            .iter()
            .all(|u| u.is_integer())
            .then(|| (k as usize, units.iter().map(|u| u.to_integer()).collect()))
    })
}

/// One partial tree of a representative root.
struct PartialTree {
    parent: Tree,
    depth: Vec<usize>,
    members: Vec<usize>,
}

/// The state of the construction: the representatives' partial trees and the units left on
/// each link orbit.
struct Construction<'a> {
    topology: &'a Topology,
    index: &'a TopologyIndex,
    group: &'a Translations,
    link_orbit: &'a [usize],
    /// Units left per link orbit (every member of an orbit has the same).
    left: Vec<i128>,
    /// Units of each orbit at the start.
    units: Vec<i128>,
    /// Edges of the representatives' trees entering depth `d` on each orbit:
    /// `at_depth[d][orbit]`.
    at_depth: Vec<Vec<i128>>,
    /// Representative `ri`'s tree `i` is `trees[ri * k + i]`.
    trees: Vec<PartialTree>,
    work: u64,
}

impl<'a> Construction<'a> {
    fn new(
        topology: &'a Topology,
        index: &'a TopologyIndex,
        group: &'a Translations,
        roots: &[usize],
        orbits: &'a Orbits,
        k: usize,
        units: Vec<i128>,
    ) -> Construction<'a> {
        let n = topology.ranks;
        let trees = roots
            .iter()
            .flat_map(|&root| {
                (0..k).map(move |_| {
                    let mut depth = vec![usize::MAX; n];
                    depth[root] = 0;
                    PartialTree {
                        parent: vec![None; n],
                        depth,
                        members: vec![root],
                    }
                })
            })
            .collect();
        Construction {
            topology,
            index,
            group,
            link_orbit: &orbits.link,
            at_depth: vec![vec![0; units.len()]; n],
            left: units.clone(),
            units,
            trees,
            work: 0,
        }
    }

    /// Grows every tree to span all ranks, one edge per tree in turn; `None` where a tree
    /// has no acceptable edge or the work bound is reached.
    fn grow(&mut self) -> Option<()> {
        let n = self.topology.ranks;
        loop {
            let mut grew = false;
            for t in 0..self.trees.len() {
                if self.trees[t].members.len() == n {
                    continue;
                }
                let chosen = self
                    .candidates(t)
                    .into_iter()
                    .find(|&link| self.accepts(t, link));
                let link = chosen?;
                self.add(t, link);
                grew = true;
            }
            if !grew {
                return Some(());
            }
            if self.work > MAX_WORK {
                return None;
            }
        }
    }

    /// The links that could extend tree `t` (from a member to a non-member, with a unit
    /// left), shallowest tail first, then the orbit least used at the new edge's depth (so
    /// that every step of a depth schedule loads the links evenly), then the orbit with the
    /// most units left.
    fn candidates(&self, t: usize) -> Vec<usize> {
        let tree = &self.trees[t];
        let mut links: Vec<usize> = tree
            .members
            .iter()
            .flat_map(|&u| self.index.out_links[u].iter().copied())
            .filter(|&l| {
                let link = &self.topology.links[l];
                tree.depth[link.dst] == usize::MAX && self.left[self.link_orbit[l]] > 0
            })
            .collect();
        let key = |l: usize| {
            let (link, o) = (&self.topology.links[l], self.link_orbit[l]);
            let depth = tree.depth[link.src];
            (
                depth,
                self.at_depth[depth + 1][o],
                self.units[o],
                self.left[o],
            )
        };
        // At equal depth: a smaller share used at that depth, then a larger share left
        // (shares compared exactly, by cross-multiplying).
        links.sort_by(|&a, &b| {
            let (da, ua, ta, la) = key(a);
            let (db, ub, tb, lb) = key(b);
            da.cmp(&db)
                .then((ua * tb).cmp(&(ub * ta)))
                .then((lb * ta).cmp(&(la * tb)))
                .then(a.cmp(&b))
        });
        links
    }

    fn add(&mut self, t: usize, link: usize) {
        let (u, v) = (self.topology.links[link].src, self.topology.links[link].dst);
        let tree = &mut self.trees[t];
        tree.parent[v] = Some(u);
        tree.depth[v] = tree.depth[u] + 1;
        tree.members.push(v);
        self.left[self.link_orbit[link]] -= 1;
        self.at_depth[tree.depth[v]][self.link_orbit[link]] += 1;
    }

    fn remove(&mut self, t: usize, link: usize) {
        let v = self.topology.links[link].dst;
        let tree = &mut self.trees[t];
        self.at_depth[tree.depth[v]][self.link_orbit[link]] -= 1;
        tree.parent[v] = None;
        tree.depth[v] = usize::MAX;
        tree.members.pop();
        self.left[self.link_orbit[link]] += 1;
    }

    /// Whether adding `link` to tree `t` (and its images to the images) keeps Lovász's
    /// condition. It held before, and the addition only takes units from links into the
    /// link's head `w` and its images, so a set that breaks it contains an image of `w`,
    /// and by symmetry then one that contains `w` does: one maximum flow, into `w`, decides.
    fn accepts(&mut self, t: usize, link: usize) -> bool {
        self.add(t, link);
        let ok = self.condition_holds_into(self.topology.links[link].dst);
        self.remove(t, link);
        ok
    }

    /// Lovász's condition, for every tree of every root (the images of the representatives'
    /// partial trees) and the units left, on the vertex sets that contain `sink`.
    fn condition_holds_into(&mut self, sink: usize) -> bool {
        let n = self.topology.ranks;
        let images = self.group.elements.len();
        let tree_count = self.trees.len() * images;
        let source = n + tree_count;
        let mut flow = MaxFlow::new(source + 1);
        let big = tree_count as i128;
        for (l, link) in self.topology.links.iter().enumerate() {
            let units = self.left[self.link_orbit[l]];
            if units > 0 {
                flow.add_edge(link.src, link.dst, units);
            }
        }
        let mut node = n;
        for g in &self.group.elements {
            for tree in &self.trees {
                flow.add_edge(source, node, 1);
                for &m in &tree.members {
                    flow.add_edge(node, g[m] as usize, big);
                }
                node += 1;
            }
        }
        let arcs: u64 = (self.topology.links.len()
            + tree_count
            + self.trees.iter().map(|t| t.members.len()).sum::<usize>() * images)
            as u64;
        self.work += arcs;
        flow.max_flow(source, sink, big) == big
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::{allgather_rate, FlowNetwork};
    use crate::topology::generators::{generate, parse_size};

    /// The integer packing of `spec`'s allgather, checked: every tree spans all ranks from
    /// its root, and every link carries at most its units.
    fn packed(name: &str, size: &str) -> (Packing, usize) {
        let topo = generate(name, parse_size(size).unwrap(), 25.0, 0.7).unwrap();
        let index = topo.index();
        let group = topo.translations();
        let roots = group.representatives();
        let rate = allgather_rate(&FlowNetwork::new(&topo).unwrap(), &roots).unwrap();
        let packing = pack_integer(&topo, &group, &roots, rate.gbps).expect("packs");
        let k = packing.roots[0].trees.len();
        let mut load = vec![0usize; topo.links.len()];
        for root in &packing.roots {
            for (tree, w) in &root.trees {
                assert!((w - 1.0 / k as f64).abs() < 1e-12);
                assert_eq!(tree.iter().filter(|p| p.is_none()).count(), 1);
                for g in &group.elements {
                    for (v, p) in tree.iter().enumerate() {
                        match p {
                            Some(p) => load[index.link_of[&(g[*p] as usize, g[v] as usize)]] += 1,
                            None => assert_eq!(v, root.root),
                        }
                    }
                }
            }
        }
        let units = whole_units(&[25.0], rate.gbps).unwrap().1[0] as usize;
        assert!(load.iter().all(|&l| l <= units), "{load:?} over {units}");
        (packing, k)
    }

    #[test]
    fn tori_and_hypercubes_pack_whole_trees_at_the_optimum() {
        assert_eq!(packed("torus-2d", "4x8").1, 4);
        assert_eq!(packed("torus-2d", "4x4").1, 4);
        assert_eq!(packed("hypercube", "16").1, 4);
        assert_eq!(packed("torus-3d", "3x3x3").1, 3);
    }

    #[test]
    fn a_reversed_fabric_with_the_same_links_is_not_packed_again() {
        // An allreduce packs its allgather's trees and, on the reversed fabric, its
        // reduce-scatter's: a random fabric links every pair both ways alike, so the second
        // is the first (random:64:3: 2.6 s each).
        let topo = generate("random", parse_size("24:1").unwrap(), 25.0, 0.7).unwrap();
        let reversed = topo.reversed();
        assert_ne!(
            topo.links, reversed.links,
            "the test needs another link order"
        );
        let before = constructed();
        let mut found = Vec::new();
        for t in [&topo, &reversed] {
            let group = Translations::trivial(t.ranks);
            let roots = group.representatives();
            let rate = allgather_rate(&FlowNetwork::new(t).unwrap(), &roots).unwrap();
            let packing = pack_integer(t, &group, &roots, rate.gbps).expect("packs");
            found.push(format!("{:?}", packing.roots));
        }
        assert_eq!(constructed() - before, 1);
        assert_eq!(found[0], found[1]);
    }

    #[test]
    fn a_fabric_with_switch_constraints_is_left_to_rounding() {
        let topo = generate("shared-hub", parse_size("4").unwrap(), 25.0, 0.7).unwrap();
        let group = topo.translations();
        let roots = group.representatives();
        assert!(pack_integer(&topo, &group, &roots, Ratio::new(1, 1)).is_none());
    }
}
