//! Allgather trees grown one step at a time in the time-expanded fabric, the same for every
//! root up to the symmetry group: each representative root's pieces spread by adding, in
//! every step, as many edges as the links and switch constraints hold, and every root of its
//! orbit sends its own pieces along the images of those edges in the same step.
//!
//! Under a group acting freely on the ranks (translations), a link carries, in a step, one
//! piece for every edge of its orbit that the representatives' trees take in that step (a
//! link and the image of an edge meet under exactly one element). So a step fits its links
//! and switch constraints when the edges taken fit each *orbit*'s capacity, whatever the
//! number of roots: a 1024-rank torus schedules as one tree of 1023 edges, four per step,
//! and every link is busy in every step but the last. A packing rounded to one piece per
//! root cannot balance its links that finely ([`super::per_root`]).
//!
//! The most constrained orbit takes its edge first. The edge enters the rank that the fewest
//! of its in-links could still reach (ties: the one with the most neighbours still to
//! reach), so that no rank is left reachable through one direction only at the end, and
//! comes from the rank that has held the piece longest, so that its send need not wait for
//! the last step's arrival. Pieces are served in order (they pipeline) or fewest-reached
//! first (they advance together); each such priority and each rotation of the orbits'
//! order is tried until one takes the fewest steps the optimum allows.

use super::packing::Orbits;
use super::schedule::{capacities, finish};
use crate::algorithm::{Algorithm, Send, Step};
use crate::collective::Kind;
use crate::origin::Family;
use crate::remembered::Remembered;
use crate::topology::{Topology, TopologyIndex, Translations};
use anyhow::{bail, Result};
use std::time::Instant;

/// A piece's arrival step at a rank it has not reached.
const NOT_YET: u32 = u32::MAX;

/// Most pieces per root tried (also the first cap of the finer list schedules,
/// `FINER_CHUNKS` in [`super`]).
pub(crate) const MAX_CHUNKS: usize = 16;

/// Most pieces grown together (representatives × pieces per root).
const MAX_PIECES: usize = 64;

/// Most candidate edges weighed over all tries (a count, not a time, so the result does not
/// depend on the machine): a 1024-rank torus weighs about 4 million per try; a fabric of
/// many link orbits and pieces stops trying further priorities, rotations and piece counts
/// past it.
pub(crate) const MAX_WORK: u64 = 200_000_000;

/// What decides [`grown`]'s schedule: the links and switch constraints as sets (sorted, so
/// that a fabric and its reversal with the same links both ways are one input), the group,
/// the roots, the piece cap and the optimum.
#[derive(PartialEq, Clone)]
struct Input {
    ranks: usize,
    links: Vec<(usize, usize, u64)>,
    switches: Vec<(Vec<usize>, Vec<usize>, u64)>,
    group: Translations,
    roots: Vec<usize>,
    max_chunks: usize,
    work: u64,
    optimum: u64,
}

/// The last inputs of [`grown`] and what it found for them: an allreduce's reduce-scatter
/// half, the allgather of the reversed fabric, grows no trees again where the reversal has
/// the same links and constraints (2 x DGX-2: 3.4 s per growth).
static GROWN: Remembered<Input, Option<Grown>> = Remembered::new(4);

/// The grown schedule at the pieces per root (up to `max_chunks`) with the best rate, that
/// rate (GB/s per root), and the same at finer pieces ([`Grown`]); `None` where the group
/// does not map the fabric to itself, where the pieces would be too many to grow, or where
/// no edge fits an empty step. Errors at `deadline`. Grown on the fabric in sorted order
/// ([`Topology::in_sorted_order`]), so that the schedule is a function of the input (kept
/// or not) and not of the order the fabric lists its links in; at most `work` candidate
/// edges weighed ([`MAX_WORK`] at most).
pub(crate) fn grown(
    topology: &Topology,
    group: &Translations,
    roots: &[usize],
    (max_chunks, work): (usize, u64),
    optimum_gbps: f64,
    deadline: Instant,
) -> Result<Option<Grown>> {
    let canonical = topology.in_sorted_order();
    let input = Input {
        ranks: topology.ranks,
        links: (canonical.links.iter())
            .map(|l| (l.src, l.dst, l.bandwidth.to_bits()))
            .collect(),
        switches: (canonical.switches.iter())
            .map(|s| (s.srcs.clone(), s.dsts.clone(), s.bandwidth.to_bits()))
            .collect(),
        group: group.clone(),
        roots: roots.to_vec(),
        max_chunks,
        work,
        optimum: optimum_gbps.to_bits(),
    };
    if let Some(found) = GROWN.find(|i| *i == input) {
        return Ok(found);
    }
    let index = canonical.index();
    let found = grow_schedule(
        &canonical,
        &index,
        group,
        roots,
        (max_chunks, work),
        optimum_gbps,
        deadline,
    )?;
    GROWN.keep(input.clone(), found.clone(), |i| *i == input);
    Ok(found)
}

/// What [`grown`] found: the schedule at the fewest pieces per root with the best rate and
/// that rate (GB/s per root), and, where those pieces span two or more runtime slices at the
/// reference size ([`crate::layout::reference::slices`]), the same rate at the most pieces
/// that are a multiple of them within the caps: its finer pieces pipeline better at large
/// sizes (2 x DGX-H100 on rails: 2 pieces per root 494.6 GB/s at 1 GB, 16 pieces 497.3),
/// and the simulation weighs both.
#[derive(Clone)]
pub(crate) struct Grown {
    pub(crate) algorithm: Algorithm,
    pub(crate) rate: f64,
    pub(crate) finer: Option<Algorithm>,
}

/// [`grown`] without the memory, on `topology` as it lists its links.
fn grow_schedule(
    topology: &Topology,
    index: &TopologyIndex,
    group: &Translations,
    roots: &[usize],
    (max_chunks, work): (usize, u64),
    optimum_gbps: f64,
    deadline: Instant,
) -> Result<Option<Grown>> {
    let caps = capacities(topology, index)?;
    // Where more elements fix a switch constraint than it holds edges in a step (two GPUs
    // behind one NIC), the trees grow under a subgroup, from its representatives.
    let narrowed = group.within_switch_limits(topology, &caps.switches);
    let (group, roots) = if narrowed.order() < group.order() {
        (&narrowed, narrowed.representatives())
    } else {
        (group, roots.to_vec())
    };
    let roots = roots.as_slice();
    let Some(orbits) = Orbits::new(topology, index, group) else {
        return Ok(None);
    };
    let fabric = Fabric {
        limit: work.min(MAX_WORK),
        ..Fabric::new(topology, index, &orbits, caps)
    };
    let most = max_chunks
        .min(MAX_CHUNKS)
        .min(MAX_PIECES / roots.len().max(1));
    let mut best: Option<(usize, Vec<Vec<Edge>>, f64)> = None;
    for chunks in 1..=most {
        let at_most = at_most(chunks, caps.unit_gbps, optimum_gbps);
        if best.as_ref().is_some_and(|b| at_most <= b.2 * (1.0 + 1e-9)) {
            continue;
        }
        if let Some((steps, rate)) =
            fabric.fewest_steps(roots, chunks, (caps.unit_gbps, at_most), deadline)?
        {
            if best.as_ref().is_none_or(|b| rate > b.2 * (1.0 + 1e-9)) {
                best = Some((chunks, steps, rate));
            }
        }
        if best
            .as_ref()
            .is_some_and(|b| b.2 >= optimum_gbps * (1.0 - 1e-9))
        {
            break;
        }
    }
    let Some((chunks, edges, rate)) = best else {
        return Ok(None);
    };
    let algorithm = schedule_of(topology, (index, caps), group, roots, chunks, &edges)?;
    // The same rate at finer pieces, where the fewest span several slices; none where the
    // growth there falls short of it, runs out of work or reaches the deadline.
    let fine = most / chunks * chunks;
    let slices = crate::layout::reference::slices(topology, Kind::AllGather, chunks);
    let finer = if fine > chunks && slices >= 2.0 {
        let at_most = at_most(fine, caps.unit_gbps, optimum_gbps);
        match fabric.fewest_steps(roots, fine, (caps.unit_gbps, at_most), deadline) {
            Ok(Some((edges, r))) if r >= rate * (1.0 - 1e-9) => Some(schedule_of(
                topology,
                (index, caps),
                group,
                roots,
                fine,
                &edges,
            )?),
            _ => None,
        }
    } else {
        None
    };
    Ok(Some(Grown {
        algorithm,
        rate,
        finer,
    }))
}

/// The best rate (GB/s per root) whole pieces can reach at `chunks` per root: no schedule
/// takes fewer steps than the optimum allows.
fn at_most(chunks: usize, unit_gbps: f64, optimum_gbps: f64) -> f64 {
    let fewest = (chunks as f64 * unit_gbps / optimum_gbps * (1.0 - 1e-9)).ceil();
    chunks as f64 * unit_gbps / fewest.max(1.0)
}

/// The algorithm of the representatives' grown `edges` at `chunks` pieces per root: every
/// root sends along the edges' images under `group`, one round per step.
fn schedule_of(
    topology: &Topology,
    (index, caps): (&TopologyIndex, &crate::topology::Capacities),
    group: &Translations,
    roots: &[usize],
    chunks: usize,
    edges: &[Vec<Edge>],
) -> Result<Algorithm> {
    let steps = edges
        .iter()
        .map(|taken| {
            let mut sends = Vec::with_capacity(taken.len() * group.order());
            for e in taken {
                for g in &group.elements {
                    sends.push(Send {
                        chunk: g[roots[e.root]] as usize * chunks + e.piece,
                        src: g[e.src] as usize,
                        dst: g[e.dst] as usize,
                    });
                }
            }
            crate::load::plain_step(index, caps, sends)
        })
        .collect::<Vec<Step>>();
    if let Some(i) = steps.iter().position(|s| s.rounds != 1) {
        bail!(
            "internal error: grown step {i} on `{}` needs {} rounds",
            topology.name,
            steps[i].rounds
        );
    }
    let mut algorithm = finish(
        topology,
        roots[0],
        Kind::AllGather,
        chunks,
        Family::Grown,
        steps,
    )?;
    // One round per step, like a list schedule: a link's sends go one after another.
    algorithm.serial_links = true;
    Ok(algorithm)
}

/// Which piece an orbit serves first in a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Priority {
    /// In the pieces' order (the first piece of every root, then the second, ...): pieces
    /// pipeline one behind another.
    Order,
    /// The piece that has reached the fewest ranks: pieces advance together, which a
    /// scarce link needs (two DGX-A100s' NICs at 13 pieces per root).
    Fewest,
}

/// An edge a representative's piece crosses in a step.
#[derive(Debug, Clone, Copy)]
struct Edge {
    /// Index of the representative root.
    root: usize,
    /// The piece among the root's.
    piece: usize,
    src: usize,
    dst: usize,
}

/// The fabric as the grown trees see it: links by orbit, what a link's edge puts on each
/// orbit's members, each orbit's capacity per step.
struct Fabric {
    ranks: usize,
    /// Per rank, its in-links as (link orbit, source, link).
    in_links: Vec<Vec<(usize, usize, usize)>>,
    /// Per rank, the ranks its out-links reach.
    out_ranks: Vec<Vec<usize>>,
    /// The link orbits, in order of their first link.
    link_orbits: Vec<usize>,
    /// Per link: (orbit of a link or switch constraint, pieces it puts on each member).
    load_of: Vec<Vec<(usize, u32)>>,
    /// Capacity per step of each orbit's members, in pieces.
    capacity: Vec<u32>,
    /// Candidate edges weighed so far (past `limit`, no further try starts).
    work: std::cell::Cell<u64>,
    /// Most candidate edges weighed over all tries ([`MAX_WORK`] or less).
    limit: u64,
}

impl Fabric {
    /// The grown steps at `chunks` pieces per root with the fewest steps over the priorities
    /// and rotations of the orbits' order (the order breaks ties), stopping at the first that
    /// reaches `at_most` (GB/s per root at `unit_gbps` per capacity unit) or past
    /// its work limit; and their rate.
    fn fewest_steps(
        &self,
        roots: &[usize],
        chunks: usize,
        (unit_gbps, at_most): (f64, f64),
        deadline: Instant,
    ) -> Result<Option<(Vec<Vec<Edge>>, f64)>> {
        let mut best: Option<(Vec<Vec<Edge>>, f64)> = None;
        let tries = [Priority::Order, Priority::Fewest]
            .into_iter()
            .flat_map(|p| (0..self.link_orbits.len()).map(move |r| (p, r)));
        for (priority, rotation) in tries {
            if self.work.get() > self.limit {
                break;
            }
            let Some(steps) = self.grow(roots, chunks, priority, rotation, deadline)? else {
                continue;
            };
            let rate = chunks as f64 * unit_gbps / steps.len() as f64;
            let reached = rate >= at_most * (1.0 - 1e-9);
            if best.as_ref().is_none_or(|b| rate > b.1 * (1.0 + 1e-9)) {
                best = Some((steps, rate));
            }
            if reached {
                break;
            }
        }
        Ok(best)
    }

    fn new(
        topology: &Topology,
        index: &TopologyIndex,
        orbits: &Orbits,
        caps: &crate::topology::Capacities,
    ) -> Fabric {
        let resources = orbits.bandwidth.len();
        let mut capacity = vec![u32::MAX; resources];
        for (l, &o) in orbits.link.iter().enumerate() {
            capacity[o] = caps.links[l];
        }
        for (j, &o) in orbits.switch.iter().enumerate() {
            capacity[o] = caps.switches[j];
        }
        let mut link_orbits: Vec<usize> = Vec::new();
        let mut in_links = vec![Vec::new(); topology.ranks];
        let mut out_ranks = vec![Vec::new(); topology.ranks];
        let mut load_of = Vec::with_capacity(topology.links.len());
        for (l, link) in topology.links.iter().enumerate() {
            let o = orbits.link[l];
            if !link_orbits.contains(&o) {
                link_orbits.push(o);
            }
            in_links[link.dst].push((o, link.src, l));
            out_ranks[link.src].push(link.dst);
            let factor = |o: usize| orbits.factor[o].round() as u32;
            let mut load = vec![(o, factor(o))];
            load.extend(index.governing[l].iter().map(|&j| {
                let o = orbits.switch[j];
                (o, factor(o))
            }));
            load_of.push(load);
        }
        Fabric {
            ranks: topology.ranks,
            in_links,
            out_ranks,
            link_orbits,
            load_of,
            capacity,
            work: std::cell::Cell::new(0),
            limit: MAX_WORK,
        }
    }

    /// The edges of every step until each of `roots`' `chunks` pieces has reached every rank.
    /// Pieces come first in their order (`Priority::Order`) or the one that has reached the
    /// fewest ranks first (`Priority::Fewest`); the orbits in `rotation` of their order.
    fn grow(
        &self,
        roots: &[usize],
        chunks: usize,
        priority: Priority,
        rotation: usize,
        deadline: Instant,
    ) -> Result<Option<Vec<Vec<Edge>>>> {
        let n = self.ranks;
        // Pieces in order: the first piece of every root, then the second, ...
        let pieces: Vec<(usize, usize)> = (0..chunks)
            .flat_map(|k| (0..roots.len()).map(move |r| (r, k)))
            .collect();
        // The step each piece reached each rank in (`NOT_YET` before).
        let mut arrived = vec![NOT_YET; pieces.len() * n];
        for (p, &(r, _)) in pieces.iter().enumerate() {
            arrived[p * n + roots[r]] = 0;
        }
        let mut reached = vec![1usize; pieces.len()];
        let mut left = pieces.len() * (n - 1);
        let mut steps: Vec<Vec<Edge>> = Vec::new();
        let mut load = vec![0u32; self.capacity.len()];
        // The most steps: every piece alone, one hop per step over a path through all ranks.
        let max_steps = pieces.len() * n;
        let k = self.link_orbits.len();
        let orbits: Vec<usize> = (0..k)
            .map(|i| self.link_orbits[(i + rotation) % k])
            .collect();
        while left > 0 {
            if Instant::now() >= deadline {
                bail!(super::listed::OutOfTime);
            }
            if steps.len() >= max_steps {
                bail!("internal error: grown trees stalled");
            }
            load.iter_mut().for_each(|x| *x = 0);
            let mut order: Vec<usize> = (0..pieces.len()).collect();
            if priority == Priority::Fewest {
                order.sort_by_key(|&p| (reached[p], p));
            }
            let mut taken: Vec<(usize, usize, usize)> = Vec::new();
            // The most constrained orbit first: the one whose best edge carries the first piece
            // in `order`, then the one with the fewest edges to choose from, then in order.
            loop {
                let pick = orbits
                    .iter()
                    .enumerate()
                    .filter_map(|(i, &o)| {
                        let (rank, choices, v, l) =
                            self.best_edge(o, &arrived, &taken, &load, &order)?;
                        Some(((rank, choices, i), (order[rank], v, l)))
                    })
                    .min_by_key(|(key, _)| *key);
                let Some((_, (p, v, l))) = pick else {
                    break;
                };
                for &(x, f) in &self.load_of[l] {
                    load[x] += f;
                }
                taken.push((p, v, l));
            }
            if self.work.get() > 2 * self.limit {
                // Past the work bound within one try: not a candidate.
                return Ok(None);
            }
            if taken.is_empty() {
                // No edge fits even an empty step: a switch constraint holds less than one
                // edge's images (an oversubscribed uplink), which the grown trees cannot use.
                return Ok(None);
            }
            let mut step = Vec::with_capacity(taken.len());
            for &(p, v, l) in &taken {
                arrived[p * n + v] = steps.len() as u32 + 1;
                reached[p] += 1;
                let (root, piece) = pieces[p];
                let src = self.in_links[v]
                    .iter()
                    .find(|x| x.2 == l)
                    .expect("an in-link")
                    .1;
                step.push(Edge {
                    root,
                    piece,
                    src,
                    dst: v,
                });
            }
            left -= taken.len();
            steps.push(step);
        }
        Ok(Some(steps))
    }

    /// The edge of link orbit `o` to take next in this step, as (the piece's place in
    /// `order`, edges of `o` that piece could take, rank, link): over the first piece in
    /// `order` that has one,
    /// into the rank the fewest in-links could reach now, then with the most out-neighbours
    /// lacking the piece, then from the rank that has had the piece longest (its send need
    /// not wait for the last step's arrival), then the lowest rank; `None` when no edge of
    /// `o` fits the loads or reaches a rank lacking its piece.
    fn best_edge(
        &self,
        o: usize,
        arrived: &[u32],
        taken: &[(usize, usize, usize)],
        load: &[u32],
        order: &[usize],
    ) -> Option<(usize, usize, usize, usize)> {
        let n = self.ranks;
        let fits = |l: usize| {
            self.load_of[l]
                .iter()
                .all(|&(x, f)| load[x] + f <= self.capacity[x])
        };
        for (rank, &p) in order.iter().enumerate() {
            let at = &arrived[p * n..(p + 1) * n];
            let has = |v: usize| at[v] != NOT_YET;
            let mut best: Option<((usize, usize, u32, usize), usize)> = None;
            let mut choices = 0;
            self.work.set(self.work.get() + n as u64);
            for v in 0..n {
                if has(v) {
                    continue;
                }
                let Some(&(_, u, l)) = self.in_links[v].iter().find(|x| x.0 == o && has(x.1))
                else {
                    continue;
                };
                if taken.iter().any(|t| t.0 == p && t.1 == v) || !fits(l) {
                    continue;
                }
                choices += 1;
                let reach = self.in_links[v].iter().filter(|x| has(x.1)).count();
                let lacking = self.out_ranks[v].iter().filter(|&&w| !has(w)).count();
                let key = (reach, usize::MAX - lacking, at[u], v);
                if best.is_none_or(|b| key < b.0) {
                    best = Some((key, l));
                }
            }
            if let Some(((_, _, _, v), l)) = best {
                return Some((rank, choices, v, l));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::load;

    /// Fewest steps of the grown allgather at `chunks` pieces per root on `name` over the
    /// rotations of the orbits' order.
    fn grown_steps(name: &str, chunks: usize) -> usize {
        let t = load(name).unwrap();
        let index = t.index();
        let group = t.translations();
        let roots = group.representatives();
        let orbits = Orbits::new(&t, &index, &group).unwrap();
        let fabric = Fabric::new(&t, &index, &orbits, index.capacities.as_ref().unwrap());
        let far = Instant::now() + std::time::Duration::from_secs(3600);
        [Priority::Order, Priority::Fewest]
            .into_iter()
            .flat_map(|p| (0..fabric.link_orbits.len()).map(move |r| (p, r)))
            .map(|(p, r)| {
                fabric
                    .grow(&roots, chunks, p, r, far)
                    .unwrap()
                    .unwrap()
                    .len()
            })
            .min()
            .unwrap()
    }

    #[test]
    fn grown_trees_keep_every_link_busy_until_the_last_step() {
        // (N − 1)·C pieces into each rank over its in-links, one per link per step.
        assert_eq!(grown_steps("torus-2d:8x8", 1), 16);
        assert_eq!(grown_steps("torus-2d:4x8", 1), 8);
        assert_eq!(grown_steps("torus-2d:3x10", 4), 29);
        assert_eq!(grown_steps("torus-2d:16x16", 1), 64);
        assert_eq!(grown_steps("torus-3d:3x3x3", 3), 13);
        assert_eq!(grown_steps("hypercube:64", 4), 42);
        // Two DGX-A100s: 15 pieces into each GPU, 13 per step (12 through its NVSwitch port,
        // one through its NIC), so 13 pieces per root fill 15 steps exactly.
        assert_eq!(grown_steps("dgx-a100x2", 13), 15);
    }

    /// The trees grown on `t` under `group` within `max_chunks` pieces per root, at the
    /// exact optimum and the default work bound.
    fn grown_with(t: &Topology, group: &Translations, max_chunks: usize) -> Grown {
        let roots = group.representatives();
        let net = crate::flow::FlowNetwork::new(t).unwrap();
        let rate = crate::flow::allgather_rate(&net, &roots).unwrap().gbps;
        let optimum = *rate.numer() as f64 / *rate.denom() as f64;
        let far = Instant::now() + std::time::Duration::from_secs(3600);
        grown(t, group, &roots, (max_chunks, MAX_WORK), optimum, far)
            .unwrap()
            .unwrap()
    }

    #[test]
    fn trees_grow_under_a_subgroup_where_gpus_share_a_nic() {
        // Under the whole group a step would put an edge's two images through each NIC the
        // two GPUs share (one capacity unit): no edge fits, and nothing grew. Under the
        // subgroup that moves every NIC, from its two representatives, the trees reach
        // 2 x 25 / 18 GB/s per root (the rounded packing's rate), every step in one round.
        let t = crate::topology::translations::subgroup_tests::tori_sharing_nics();
        let g = grown_with(&t, &t.translations(), 8);
        assert_eq!((g.algorithm.chunks(), g.algorithm.steps.len()), (2, 18));
        assert!(g.algorithm.steps.iter().all(|s| s.rounds == 1));
        crate::check::check(&g.algorithm, &t).unwrap();
    }

    #[test]
    fn the_grown_schedule_is_a_function_of_the_links_not_of_their_order() {
        let t = load("dgx-a100x2").unwrap();
        let group = t.translations();
        let grown_on = |t: &Topology| {
            let g = grown_with(t, &group, 13);
            (g.algorithm.chunks(), g.algorithm.steps, g.rate)
        };
        let listed = grown_on(&t);
        assert_eq!(listed.0, 13);
        // The links and constraints listed backwards, each constraint's ranks too.
        let mut backwards = t.clone();
        backwards.links.reverse();
        backwards.switches.reverse();
        for s in &mut backwards.switches {
            s.srcs.reverse();
            s.dsts.reverse();
        }
        assert_eq!(grown_on(&backwards), listed);
        // Two DGX-A100s are their own reversal: an allreduce's reduce-scatter half grows
        // the same trees.
        assert!(t.equals_its_reversal());
        assert_eq!(grown_on(&t.reversed()), listed);
    }

    #[test]
    fn grown_trees_come_at_finer_pieces_where_the_fewest_span_several_slices() {
        let grown_on = |name: &str, max_chunks: usize| -> Grown {
            let t = load(name).unwrap();
            grown_with(&t, &t.translations(), max_chunks)
        };
        // Two DGX-H100s: 2 pieces per root in 3 steps reach the optimum, each piece 16 of
        // Simple's 2 MiB slices at 1 GB; 16 pieces reach it too, in 24 steps.
        let g = grown_on("dgx-h100x2", 16);
        assert_eq!((g.algorithm.chunks(), g.algorithm.steps.len()), (2, 3));
        let finer = g.finer.expect("a multiple of 2 pieces within 16");
        assert_eq!((finer.chunks(), finer.steps.len()), (16, 24));
        assert!(finer.serial_links && finer.steps.iter().all(|s| s.rounds == 1));
        // Within 3 pieces no multiple of 2 is left: none.
        assert!(grown_on("dgx-h100x2", 3).finer.is_none());
        // 13 pieces per root on two DGX-A100s: no multiple within 16.
        assert!(grown_on("dgx-a100x2", 16).finer.is_none());
    }
}
