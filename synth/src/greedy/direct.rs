//! The direct greedy schedule of a collective whose reductions may end on many ranks (an
//! allreduce, a custom collective reducing onto several ranks), on the same state as the
//! direct SMT encoding ([`crate::smt::direct`]): each rank's partial sum of each address.
//!
//! Per address a root among its destinations (least eccentricity to its contributors and
//! destinations; ties taken in turn by address, so the pieces of a buffer spread over the
//! ranks), a shortest-path tree into it and one out of it (each hop on the least used link
//! among the shortest ones). A rank sends its partial sum up once its subtree's have all
//! arrived (a reducing step: the sums are disjoint); the complete value is copied down from
//! the ranks that hold it (a copying step: it includes whatever the receiver held). Each
//! step reduces or copies, whichever packs more sends under the links' and switches'
//! capacities in one round (ties: reduce), longest remaining path first. Every step moves
//! at least one send, so it always ends (it cannot get stuck as a merge of overlapping sums
//! can). Deterministic; ties go by rank numbering, so callers run it in the
//! canonical numbering ([`crate::topology::canonical`]).

use crate::algorithm::{Algorithm, Send, Step};
use crate::collective::Collective;
use crate::origin::Family;
use crate::topology::{Capacities, Topology, TopologyIndex};
use anyhow::{bail, Result};

/// One address's trees and progress.
struct Address {
    address: usize,
    /// Where the reduction ends (`None`: the address is not combining).
    root: Option<usize>,
    /// Per rank: the rank it sends its partial sum to (in the reduce tree).
    up: Vec<Option<usize>>,
    /// Per rank: children of the reduce tree not yet delivered.
    pending: Vec<usize>,
    /// Per rank: whether it sent its partial sum up.
    sent_up: Vec<bool>,
    /// Per rank: the rank it receives the complete value from (in the copy tree).
    down: Vec<Option<usize>>,
    /// Per rank: hops of the copy tree below it.
    below: Vec<usize>,
    /// Per rank: whether it holds the complete value.
    complete: Vec<bool>,
    /// Ranks that must end with the complete value.
    destinations: Vec<usize>,
}

impl Address {
    fn done(&self) -> bool {
        self.destinations.iter().all(|&d| self.complete[d])
    }
}

/// The direct greedy schedule of `collective` (split into its pieces) on `topology`.
pub fn schedule(topology: &Topology, collective: &Collective) -> Result<Algorithm> {
    let index = topology.index();
    let caps = topology.capacities()?;
    let mut link_use = vec![0usize; topology.links.len()];
    let mut addresses = Vec::new();
    for (turn, (address, members)) in collective.by_address().into_iter().enumerate() {
        let sources: Vec<usize> = members
            .iter()
            .flat_map(|&m| collective.chunks[m].pre.iter().copied())
            .collect();
        let mut destinations = collective.chunks[members[0]].post.to_vec();
        destinations.sort_unstable();
        destinations.dedup();
        addresses.push(trees(
            &index,
            &mut link_use,
            address,
            members.len() > 1,
            &sources,
            destinations,
            turn,
        )?);
    }
    let mut steps = Vec::new();
    let limit: usize = 2 * topology.ranks * addresses.len() + 1;
    while !addresses.iter().all(Address::done) {
        if steps.len() > limit {
            bail!("internal error: the direct greedy schedule made no progress");
        }
        let reducing = packed(&index, &caps, candidates(&addresses, true));
        let copying = packed(&index, &caps, candidates(&addresses, false));
        let (reduce, chosen) = if reducing.len() >= copying.len() {
            (true, reducing)
        } else {
            (false, copying)
        };
        if chosen.is_empty() {
            bail!("internal error: the direct greedy schedule has nothing to send");
        }
        let mut sends = Vec::with_capacity(chosen.len());
        for (a, src, dst) in chosen {
            let address = &mut addresses[a];
            if reduce {
                address.sent_up[src] = true;
                address.pending[dst] -= 1;
                if address.root == Some(dst) && address.pending[dst] == 0 {
                    address.complete[dst] = true;
                }
            } else {
                address.complete[dst] = true;
            }
            sends.push(Send {
                chunk: address.address,
                src,
                dst,
            });
        }
        steps.push(Step {
            rounds: crate::load::rounds_needed(&index, &caps, &sends),
            reduce,
            sends,
        });
    }
    Ok(Algorithm::made(
        Family::DirectGreedy,
        topology.name.clone(),
        collective.clone(),
        steps,
    ))
}

/// The trees of one address (see the module's description); `turn` picks among tied roots.
fn trees(
    index: &TopologyIndex,
    link_use: &mut [usize],
    address: usize,
    combining: bool,
    sources: &[usize],
    destinations: Vec<usize>,
    turn: usize,
) -> Result<Address> {
    let dist = &index.distances;
    let n = dist.len();
    let hops = |a: usize, b: usize| dist[a][b].unwrap_or(usize::MAX / 4);
    let root = if combining {
        let score = |r: usize| {
            let far_in = sources.iter().map(|&c| hops(c, r)).max().unwrap_or(0);
            let far_out = destinations.iter().map(|&d| hops(r, d)).max().unwrap_or(0);
            far_in + far_out
        };
        let best = destinations.iter().map(|&r| score(r)).min().unwrap_or(0);
        let tied: Vec<usize> = (destinations.iter().copied())
            .filter(|&r| score(r) == best)
            .collect();
        Some(tied[turn % tied.len()])
    } else {
        None
    };
    let mut up = vec![None; n];
    let mut pending = vec![0usize; n];
    let mut complete = vec![false; n];
    let holders: Vec<usize> = match root {
        Some(root) => {
            let mut in_tree = vec![false; n];
            in_tree[root] = true;
            let mut order = sources.to_vec();
            order.sort_by_key(|&c| (std::cmp::Reverse(hops(c, root)), c));
            for c in order {
                let mut r = c;
                while !in_tree[r] {
                    if dist[r][root].is_none() {
                        bail!("address {address}: rank {r} cannot reach rank {root}");
                    }
                    let p = tree_hop(
                        index,
                        link_use,
                        r,
                        Hop::Out,
                        |p| hops(p, root) + 1 == hops(r, root),
                        &in_tree,
                    );
                    in_tree[r] = true;
                    up[r] = Some(p);
                    pending[p] += 1;
                    r = p;
                }
            }
            complete[root] = pending[root] == 0;
            vec![root]
        }
        None => {
            for &s in sources {
                complete[s] = true;
            }
            sources.to_vec()
        }
    };
    // The copy tree: from the holders, by shortest paths, to every destination lacking it.
    let from = |r: usize| {
        holders
            .iter()
            .map(|&h| hops(h, r))
            .min()
            .unwrap_or(usize::MAX / 4)
    };
    let mut down = vec![None; n];
    let mut in_tree = vec![false; n];
    holders.iter().for_each(|&h| in_tree[h] = true);
    let mut order: Vec<usize> = destinations.clone();
    order.sort_by_key(|&d| (std::cmp::Reverse(from(d)), d));
    for d in order {
        let mut r = d;
        while !in_tree[r] {
            if from(r) >= usize::MAX / 4 {
                bail!("address {address}: no rank holding it reaches rank {r}");
            }
            let p = tree_hop(
                index,
                link_use,
                r,
                Hop::In,
                |p| from(p) + 1 == from(r),
                &in_tree,
            );
            in_tree[r] = true;
            down[r] = Some(p);
            r = p;
        }
    }
    let mut below = vec![0usize; n];
    let mut by_depth: Vec<usize> = (0..n).filter(|&r| down[r].is_some()).collect();
    by_depth.sort_by_key(|&r| std::cmp::Reverse(from(r)));
    for r in by_depth {
        let p = down[r].expect("in the copy tree");
        below[p] = below[p].max(below[r] + 1);
    }
    Ok(Address {
        address,
        root,
        up,
        pending,
        sent_up: vec![false; n],
        down,
        below,
        complete,
        destinations,
    })
}

/// Which way a hop crosses its link, seen from the rank it starts at.
#[derive(Clone, Copy)]
enum Hop {
    /// Out of the rank: the rank it sends to.
    Out,
    /// Into the rank: the rank it receives from.
    In,
}

/// The neighbour of `r` over a link in `direction`, among the ranks `closer` accepts: one
/// already in the tree first, then the least used link, then the lowest rank; its use is
/// counted.
fn tree_hop(
    index: &TopologyIndex,
    link_use: &mut [usize],
    r: usize,
    direction: Hop,
    closer: impl Fn(usize) -> bool,
    in_tree: &[bool],
) -> usize {
    let n = in_tree.len();
    let link = |p: usize| match direction {
        Hop::Out => index.link_of.get(&(r, p)),
        Hop::In => index.link_of.get(&(p, r)),
    };
    let (p, l) = (0..n)
        .filter(|&p| closer(p))
        .filter_map(|p| link(p).map(|&l| (p, l)))
        .min_by_key(|&(p, l)| (!in_tree[p], link_use[l], p))
        .expect("a shortest path continues over a link");
    link_use[l] += 1;
    p
}

/// The sends a step could make (address index, from, to), longest remaining path first:
/// partial sums ready to go up (`reduce`), or complete values to copy down.
fn candidates(addresses: &[Address], reduce: bool) -> Vec<(usize, usize, usize)> {
    let mut out: Vec<(usize, usize, usize, usize)> = Vec::new();
    for (a, address) in addresses.iter().enumerate() {
        let n = address.up.len();
        if reduce {
            let root_below = address.root.map_or(0, |r| address.below[r]);
            for r in 0..n {
                if let Some(p) = address.up[r] {
                    if !address.sent_up[r] && address.pending[r] == 0 {
                        let path = height(address, r) + root_below;
                        out.push((path, a, r, p));
                    }
                }
            }
        } else {
            for r in 0..n {
                if let Some(p) = address.down[r] {
                    if address.complete[p] && !address.complete[r] {
                        out.push((address.below[r] + 1, a, p, r));
                    }
                }
            }
        }
    }
    out.sort_by_key(|&(path, a, src, dst)| (std::cmp::Reverse(path), a, src, dst));
    out.into_iter().map(|(_, a, s, d)| (a, s, d)).collect()
}

/// Hops from `r` up its reduce tree to the root.
fn height(address: &Address, r: usize) -> usize {
    let (mut r, mut h) = (r, 0);
    while let Some(p) = address.up[r] {
        r = p;
        h += 1;
    }
    h
}

/// The candidates that fit one round of every link and switch constraint, in order.
fn packed(
    index: &TopologyIndex,
    caps: &Capacities,
    candidates: Vec<(usize, usize, usize)>,
) -> Vec<(usize, usize, usize)> {
    let mut links = vec![0u32; caps.links.len()];
    let mut switches = vec![0u32; caps.switches.len()];
    let mut out = Vec::new();
    for (a, src, dst) in candidates {
        let Some(&l) = index.link_of.get(&(src, dst)) else {
            continue;
        };
        let fits = links[l] < caps.links[l].max(1)
            && (index.governing[l].iter()).all(|&k| switches[k] < caps.switches[k].max(1));
        if fits {
            links[l] += 1;
            index.governing[l].iter().for_each(|&k| switches[k] += 1);
            out.push((a, src, dst));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collective::Kind;

    #[test]
    fn allreduce_is_scheduled_and_checks_on_generated_fabrics() {
        let fabrics = [
            "ring:4",
            "line:4",
            "torus-2d:3x3",
            "hypercube:8",
            "random:6:3",
            "dgx1",
            "dgx-a100",
            "dgx-h100",
            "dgx-a100x2",
            "mi250-16",
        ];
        for topo in fabrics {
            let topology = crate::topology::load(topo).unwrap();
            for c in [1, 2] {
                let collective = Collective::new(Kind::AllReduce, topology.ranks, 0, c).unwrap();
                let a = schedule(&topology, &collective).unwrap();
                crate::check::check(&a, &topology).unwrap_or_else(|e| panic!("{topo}: {e}"));
                assert_eq!(a.origin.family, Family::DirectGreedy);
            }
        }
    }
}
