//! The packed trees' pieces laid out by list scheduling in the time-expanded fabric: one
//! round per step, capacities per step, the longest remaining path first.

use super::packing::Packing;
use super::schedule::{capacities, copies, depths, finish, heights};
use crate::algorithm::{Algorithm, Send, Step};
use crate::collective::Kind;
use crate::origin::Family;
use crate::topology::{Topology, TopologyIndex};
use anyhow::{bail, Result};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// A tree's children lists and the height of every vertex.
pub(crate) type Shape = (Vec<Vec<usize>>, Vec<usize>);

/// A send waiting for its link: copy `copy` crosses the edge into the representative tree's
/// vertex `vertex`; it has waited since step `since`.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Pending {
    copy: usize,
    vertex: usize,
    since: usize,
    /// Creation order (ties).
    seq: usize,
    /// The link it crosses.
    link: usize,
}

/// The algorithm of `packing` (as [`algorithm`]) scheduled by list scheduling in the
/// time-expanded fabric instead of by depth: every step is one round, each link and switch
/// constraint carries at most its capacity per step, and a send leaves as soon as its piece
/// has arrived and its link has room (longest remaining path first, then oldest). This
/// balances the steps' loads, so rounds per chunk approach the packing's rate, and each
/// link's sends come in the order the runtime can pipeline. Errors past `max_steps` steps.
pub fn list_scheduled(
    topology: &Topology,
    index: &TopologyIndex,
    packing: &Packing,
    kind: Kind,
    chunks: usize,
    counts: &[Vec<usize>],
    max_steps: usize,
) -> Result<Algorithm> {
    let caps = capacities(topology, index)?;
    // Children and heights of every representative tree.
    let shapes: Vec<Vec<Shape>> = packing
        .roots
        .iter()
        .map(|r| {
            r.trees
                .iter()
                .map(|(tree, _)| {
                    let mut children = vec![Vec::new(); tree.len()];
                    for (v, p) in tree.iter().enumerate() {
                        if let Some(p) = p {
                            children[*p].push(v);
                        }
                    }
                    let height = heights(tree, &depths(tree));
                    (children, height)
                })
                .collect()
        })
        .collect();
    let copies = copies(packing, kind, chunks, counts, false);
    // The link a pending send crosses, and its priority: longest remaining path first, then
    // oldest, then chunk, then creation order (what a stable sort of all pending sends by
    // the first three gives).
    let link = |copy: usize, vertex: usize| {
        let c = &copies[copy];
        let g = &packing.group.elements[c.element];
        let tree = &packing.roots[c.root].trees[c.tree].0;
        let parent = tree[vertex].expect("a pending send enters a non-root vertex");
        index.link_of[&(g[parent] as usize, g[vertex] as usize)]
    };
    let priority = |p: &Pending| {
        let c = &copies[p.copy];
        (
            Reverse(shapes[c.root][c.tree].1[p.vertex]),
            p.since,
            c.chunk,
            p.seq,
        )
    };
    // Pending sends per link, the first in priority on top. A step takes from each link
    // what it and its switch constraints have room for, in the order one sorted list of all
    // pending sends would be scanned, at the cost of the sends taken rather than of every
    // send pending: without switch constraints links do not interact, so each link gives
    // its first sends and the step's sends are sorted; with them, links give one send at a
    // time in the order of their first sends.
    type Queue<K> = BinaryHeap<Reverse<(K, Pending)>>;
    let mut queues: Vec<Queue<_>> = (0..topology.links.len())
        .map(|_| BinaryHeap::new())
        .collect();
    let mut active: Vec<usize> = Vec::new();
    let mut left = 0usize;
    let enqueue = |p: Pending, queues: &mut Vec<Queue<_>>, active: &mut Vec<usize>| {
        if queues[p.link].is_empty() {
            active.push(p.link);
        }
        queues[p.link].push(Reverse((priority(&p), p)));
    };
    let mut seq = 0;
    for (i, c) in copies.iter().enumerate() {
        let root = packing.roots[c.root].root;
        for &v in &shapes[c.root][c.tree].0[root] {
            let p = Pending {
                copy: i,
                vertex: v,
                since: 0,
                seq,
                link: link(i, v),
            };
            seq += 1;
            enqueue(p, &mut queues, &mut active);
            left += 1;
        }
    }
    let mut link_load = vec![0u32; topology.links.len()];
    let mut switch_load = vec![0u32; topology.switches.len()];
    let mut steps: Vec<Step> = Vec::new();
    let mut taken = Vec::new();
    while left > 0 {
        if steps.len() >= max_steps {
            bail!(
                "list scheduling of the trees on `{}` needs more than {max_steps} steps",
                topology.name
            );
        }
        let now = steps.len();
        // A link whose queue emptied in the last step and refilled with its arrivals was
        // listed again: once each.
        active.retain(|&l| !queues[l].is_empty());
        active.sort_unstable();
        active.dedup();
        taken.clear();
        if topology.switches.is_empty() {
            for &l in &active {
                while link_load[l] < caps.links[l] {
                    let Some(Reverse(entry)) = queues[l].pop() else {
                        break;
                    };
                    link_load[l] += 1;
                    taken.push(entry);
                }
            }
            taken.sort_unstable_by_key(|(key, _)| *key);
        } else {
            let mut links: BinaryHeap<Reverse<(_, usize)>> = active
                .iter()
                .map(|&l| Reverse((queues[l].peek().expect("active").0 .0, l)))
                .collect();
            while let Some(Reverse((_, l))) = links.pop() {
                let fits = link_load[l] < caps.links[l]
                    && index.governing[l]
                        .iter()
                        .all(|&j| switch_load[j] < caps.switches[j]);
                if !fits {
                    // Nothing more crosses this link in this step: its load and its switch
                    // constraints' only grow.
                    continue;
                }
                let Reverse(entry) = queues[l].pop().expect("a link in the heap has sends");
                link_load[l] += 1;
                for &j in &index.governing[l] {
                    switch_load[j] += 1;
                }
                taken.push(entry);
                if let Some(next) = queues[l].peek() {
                    links.push(Reverse((next.0 .0, l)));
                }
            }
        }
        if taken.is_empty() {
            bail!(
                "list scheduling of the trees on `{}` is stuck: a link or switch has no capacity",
                topology.name
            );
        }
        let mut sends = Vec::with_capacity(taken.len());
        let mut arrived = Vec::new();
        for &(_, p) in &taken {
            let c = &copies[p.copy];
            let l = &topology.links[p.link];
            sends.push(Send {
                chunk: c.chunk,
                src: l.src,
                dst: l.dst,
            });
            let (children, _) = &shapes[c.root][c.tree];
            for &v in &children[p.vertex] {
                arrived.push(Pending {
                    copy: p.copy,
                    vertex: v,
                    since: now + 1,
                    seq,
                    link: link(p.copy, v),
                });
                seq += 1;
            }
        }
        left -= taken.len();
        // Every link and switch constraint carried at most its capacity: one round.
        for &(_, p) in &taken {
            link_load[p.link] = 0;
            for &j in &index.governing[p.link] {
                switch_load[j] = 0;
            }
        }
        steps.push(Step {
            rounds: 1,
            reduce: false,
            sends,
        });
        left += arrived.len();
        for p in arrived {
            enqueue(p, &mut queues, &mut active);
        }
    }
    finish(
        topology,
        packing.roots[0].root,
        kind,
        chunks,
        Family::Listed,
        steps,
    )
}
