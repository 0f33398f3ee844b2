//! Piece counts chosen root by root. Counts shared by an orbit ([`PieceCounts::Orbit`]) send
//! every root's pieces along the same trees, moved by the group: with few pieces per root
//! (a 32x32 torus allgather fits the runtime's XML parser at one piece per root), every root
//! then loads the same directions and the busiest link carries far more than its share. Here
//! each root of an orbit chooses its own pieces' trees among the images of its
//! representative's pool, so that together they load every link and switch constraint
//! evenly: a greedy pass, then moves of one piece at a time while a steep exponential penalty
//! of the loads falls, steeper each pass (bounded passes, deterministic).

use super::packing::Packing;
use super::rounding::PieceCounts;
use crate::topology::{Topology, TopologyIndex};

/// How much busier than the greedy start the shared counts may begin and still be searched
/// from.
const SHARED_START_SLACK: f64 = 1.25;

/// Most improving passes over every root's pieces.
const MAX_PASSES: usize = 32;

/// How steeply the penalty of a load grows: e-fold per 1/STEEPNESS of the target load.
const STEEPNESS: f64 = 20.0;

/// Growth of the steepness per pass, so later passes look only at the top loads.
const STEEPENING: f64 = 1.25;

/// The steepest penalty.
const MAX_STEEPNESS: f64 = 2000.0;

/// Most resource uses the improving passes evaluate (a pool tree's links and constraints,
/// once per tree tried), over all the piece counts a caller tries: a count, not a time, so
/// the result does not depend on the machine. A 1024-rank torus at one piece per root takes
/// about 1.3 billion over its 32 passes; on a 256-rank hypercube at seven pieces a pass
/// alone takes more; three nodes of mi250-16 (3,408 trees) took 400 million, 3.5 s, at
/// each of eight piece counts.
pub(crate) const MAX_WORK: u64 = 400_000_000;

/// Piece counts per representative, group element and tree at `chunks` pieces per root,
/// with the time they give (per unit of data per root, s/GB: the busiest link's or switch
/// constraint's load over its bandwidth), or `None` where a tree's image is not over the
/// fabric's links (the group does not map the fabric to itself). The search starts from a
/// greedy choice root by root and, where they begin near it, from `shared` (counts every
/// root of an orbit takes), and keeps the better end; its improving passes stop past
/// `budget` resource uses, which it takes what it used from.
pub(crate) fn per_root_counts(
    topology: &Topology,
    index: &TopologyIndex,
    packing: &Packing,
    chunks: usize,
    shared: &[Vec<usize>],
    budget: &mut u64,
) -> Option<(PieceCounts, f64)> {
    let search = Search::new(topology, index, packing, chunks, *budget)?;
    let found = per_root_search(&search, packing, chunks, shared);
    *budget = budget.saturating_sub(search.work.get());
    found
}

/// [`per_root_counts`] in `search`.
fn per_root_search(
    search: &Search,
    packing: &Packing,
    chunks: usize,
    shared: &[Vec<usize>],
) -> Option<(PieceCounts, f64)> {
    let greedy = search.greedy();
    let start = |counts: &Counts| search.load_of(counts).into_iter().fold(0.0, f64::max);
    let shared: Counts = shared
        .iter()
        .map(|c| vec![c.clone(); packing.group.order()])
        .collect();
    // Both starts where the shared counts begin near the greedy (on a 1024-rank torus they
    // begin with almost twice its busiest load, and the second search would only cost time).
    let both = start(&shared) <= start(&greedy) * SHARED_START_SLACK;
    let greedy = search.improved(greedy);
    let (counts, busiest) = match both.then(|| search.improved(shared)) {
        Some(from_shared) if from_shared.1 < greedy.1 => from_shared,
        _ => greedy,
    };
    Some((PieceCounts::Root(counts), busiest / chunks as f64))
}

/// Per representative, group element and tree: pieces.
type Counts = Vec<Vec<Vec<usize>>>;

/// The fabric's resources as the trees' images use them.
struct Search<'a> {
    packing: &'a Packing,
    index: &'a TopologyIndex,
    chunks: usize,
    links: usize,
    /// `image[e * links + l]`: link `l` under element `e`.
    image: Vec<usize>,
    /// What one piece puts on a resource (links, then switch constraints): 1 / bandwidth.
    weight: Vec<f64>,
    /// The links of every tree of every representative's pool, at the identity.
    tree_links: Vec<Vec<Vec<usize>>>,
    /// The busiest load the packing's weights give at `chunks` pieces per root.
    scale: f64,
    /// Resource uses evaluated so far, and the most the passes may evaluate.
    work: std::cell::Cell<u64>,
    max_work: u64,
}

impl<'a> Search<'a> {
    fn new(
        topology: &Topology,
        index: &'a TopologyIndex,
        packing: &'a Packing,
        chunks: usize,
        max_work: u64,
    ) -> Option<Search<'a>> {
        let links = topology.links.len();
        let mut image = Vec::with_capacity(packing.group.order() * links);
        for g in &packing.group.elements {
            for l in &topology.links {
                image.push(*index.link_of.get(&(g[l.src] as usize, g[l.dst] as usize))?);
            }
        }
        let weight = topology
            .links
            .iter()
            .map(|l| 1.0 / l.bandwidth)
            .chain(topology.switches.iter().map(|s| 1.0 / s.bandwidth))
            .collect();
        let tree_links = packing
            .roots
            .iter()
            .map(|root| {
                root.trees
                    .iter()
                    .map(|(tree, _)| {
                        tree.iter()
                            .enumerate()
                            .filter_map(|(v, p)| p.map(|p| index.link_of[&(p, v)]))
                            .collect()
                    })
                    .collect()
            })
            .collect();
        Some(Search {
            packing,
            index,
            chunks,
            links,
            image,
            weight,
            tree_links,
            scale: chunks as f64 / packing.rate_gbps,
            work: std::cell::Cell::new(0),
            max_work,
        })
    }

    /// Calls `f` with every resource tree `t` of representative `r` uses under element `e`,
    /// once per use.
    fn each_use(&self, r: usize, t: usize, e: usize, f: &mut dyn FnMut(usize)) {
        self.work
            .set(self.work.get() + self.tree_links[r][t].len() as u64);
        for &l in &self.tree_links[r][t] {
            let l = self.image[e * self.links + l];
            f(l);
            for &j in &self.index.governing[l] {
                f(self.links + j);
            }
        }
    }

    /// The growth of the penalty if one more piece took tree `t`'s image under `e`: a steep
    /// exponential of the load over the packing's busiest, so that the links and
    /// constraints near the top decide.
    fn cost(&self, load: &[f64], r: usize, t: usize, e: usize, steepness: f64) -> f64 {
        let mut c = 0.0;
        self.each_use(r, t, e, &mut |x| c += self.growth(load, x, steepness));
        c
    }

    /// The growth of resource `x`'s penalty if one more piece used it.
    fn growth(&self, load: &[f64], x: usize, steepness: f64) -> f64 {
        let penalty = |v: f64| (steepness * (v / self.scale - 1.0)).exp();
        penalty(load[x] + self.weight[x]) - penalty(load[x])
    }

    /// The tree whose image under `e` adds the least penalty (the first of equals). Each
    /// resource's growth is computed once per call (the trees share their links), the same
    /// to the bit as [`Search::cost`]'s; summed here, in the hot loop, without a second
    /// dynamic closure per use.
    fn cheapest(&self, load: &[f64], r: usize, e: usize, steepness: f64) -> usize {
        let mut growth = vec![f64::NAN; load.len()];
        (0..self.tree_links[r].len())
            .map(|t| {
                let mut c = 0.0;
                self.each_use(r, t, e, &mut |x| {
                    if growth[x].is_nan() {
                        growth[x] = self.growth(load, x, steepness);
                    }
                    c += growth[x];
                });
                (c, t)
            })
            .min_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)))
            .map_or(0, |(_, t)| t)
    }

    fn load_of(&self, counts: &Counts) -> Vec<f64> {
        let mut load = vec![0.0; self.weight.len()];
        for (r, per_element) in counts.iter().enumerate() {
            for (e, per_tree) in per_element.iter().enumerate() {
                for (t, &k) in per_tree.iter().enumerate() {
                    self.each_use(r, t, e, &mut |x| load[x] += k as f64 * self.weight[x]);
                }
            }
        }
        load
    }

    /// Every root's pieces placed one at a time on the cheapest tree.
    fn greedy(&self) -> Counts {
        let elements = self.packing.group.order();
        let mut counts: Counts = self
            .packing
            .roots
            .iter()
            .map(|root| vec![vec![0; root.trees.len()]; elements])
            .collect();
        let mut load = vec![0.0; self.weight.len()];
        for _ in 0..self.chunks {
            for (r, per_element) in counts.iter_mut().enumerate() {
                for (e, per_tree) in per_element.iter_mut().enumerate() {
                    let t = self.cheapest(&load, r, e, STEEPNESS);
                    per_tree[t] += 1;
                    self.each_use(r, t, e, &mut |x| load[x] += self.weight[x]);
                }
            }
        }
        counts
    }

    /// `counts` improved one piece at a time while the penalty falls, the penalty steeper
    /// each pass, with their busiest load; the passes stop early past its most work.
    fn improved(&self, mut counts: Counts) -> (Counts, f64) {
        let mut load = self.load_of(&counts);
        let mut steepness = STEEPNESS;
        'passes: for _ in 0..MAX_PASSES {
            let mut moved = false;
            for (r, per_element) in counts.iter_mut().enumerate() {
                for (e, per_tree) in per_element.iter_mut().enumerate() {
                    if self.work.get() > self.max_work {
                        break 'passes;
                    }
                    for t in 0..per_tree.len() {
                        if per_tree[t] == 0 {
                            continue;
                        }
                        self.each_use(r, t, e, &mut |x| load[x] -= self.weight[x]);
                        let best = self.cheapest(&load, r, e, steepness);
                        // Only a strictly smaller penalty moves, so the passes end.
                        let better = best != t
                            && self.cost(&load, r, best, e, steepness)
                                < self.cost(&load, r, t, e, steepness) * (1.0 - 1e-12);
                        let to = if better { best } else { t };
                        self.each_use(r, to, e, &mut |x| load[x] += self.weight[x]);
                        if better {
                            per_tree[t] -= 1;
                            per_tree[to] += 1;
                            moved = true;
                        }
                    }
                }
            }
            // A pass that moves nothing ends the search once the penalty is at its steepest.
            if !moved && steepness >= MAX_STEEPNESS {
                break;
            }
            steepness = (steepness * STEEPENING).min(MAX_STEEPNESS);
        }
        // Recounted, so that rounding in the running sums does not decide.
        let busiest = self.load_of(&counts).into_iter().fold(0.0, f64::max);
        (counts, busiest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::{allgather_rate, FlowNetwork};
    use crate::topology::generators::{generate, parse_size};
    use crate::trees::integer::pack_integer;
    use crate::trees::packing::Orbits;
    use crate::trees::rounding;

    /// The busiest load at one piece per root over the packing's: per root, and shared by
    /// the orbit (the best single tree of the pool).
    fn at_one_piece(name: &str, size: &str) -> (f64, f64) {
        let (per_root, shared, _) = at_one_piece_within(name, size, MAX_WORK);
        (per_root, shared)
    }

    /// [`at_one_piece`] with the search's work within `budget`, and the budget left.
    fn at_one_piece_within(name: &str, size: &str, mut budget: u64) -> (f64, f64, u64) {
        let topo = generate(name, parse_size(size).unwrap(), 25.0, 0.7).unwrap();
        let index = topo.index();
        let group = topo.translations();
        let roots = group.representatives();
        let rate = allgather_rate(&FlowNetwork::new(&topo).unwrap(), &roots).unwrap();
        let mut packing = pack_integer(&topo, &group, &roots, rate.gbps).expect("packs");
        crate::trees::add_symmetric_images(&topo, &index, &mut packing);
        let orbits = Orbits::new(&topo, &index, &group).unwrap();
        let usages = orbits.usages_of(&packing, &index);
        let uses = (&usages[..], &rounding::supports(&usages)[..]);
        let shared = &rounding::chunk_option(&packing, uses, &orbits.bandwidth, 1);
        let rounding::PieceCounts::Orbit(start) = &shared.counts else {
            panic!("orbit counts")
        };
        let found = per_root_counts(&topo, &index, &packing, 1, start, &mut budget);
        let (counts, time) = found.unwrap();
        // Every root sends its one piece along one tree.
        let PieceCounts::Root(counts) = counts else {
            panic!("per-root counts")
        };
        assert!(counts
            .iter()
            .flatten()
            .all(|c| c.iter().sum::<usize>() == 1));
        let shared = packing.rate_gbps / shared.rate;
        (time * packing.rate_gbps, shared, budget)
    }

    #[test]
    fn one_piece_per_root_loads_links_more_evenly_than_one_tree_per_orbit() {
        // 8x8 torus: 63 pieces over 4 links per rank, 15.75 per link at best (16 in whole
        // pieces); one tree for every root loads some link with 20, per root 17.
        let (per_root, shared) = at_one_piece("torus-2d", "8x8");
        assert!(per_root <= 17.0 / 15.75 + 1e-9, "{per_root}");
        assert!(shared >= 20.0 / 15.75 - 1e-9, "{shared}");
        // Never worse than the shared counts it also starts from.
        for (name, size) in [("hypercube", "64"), ("torus-3d", "4x4x4")] {
            let (per_root, shared) = at_one_piece(name, size);
            assert!(
                per_root <= shared + 1e-9,
                "{name}:{size}: {per_root} > {shared}"
            );
        }
    }

    #[test]
    fn the_search_takes_its_work_from_the_budget_it_is_given() {
        let (full, _, left) = at_one_piece_within("torus-2d", "8x8", MAX_WORK);
        assert!(left < MAX_WORK, "the work done is taken from the budget");
        // With nothing to spend, the search stops at once and is no better.
        let (starved, _, none) = at_one_piece_within("torus-2d", "8x8", 0);
        assert_eq!(none, 0);
        assert!(starved >= full - 1e-9, "{starved} < {full}");
    }
}
