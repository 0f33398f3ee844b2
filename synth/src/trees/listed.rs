//! The packed trees' pieces laid out by list scheduling in the time-expanded fabric: one
//! round per step, capacities per step, the longest remaining path first.

use super::packing::{Packing, Tree};
use super::rounding::PieceCounts;
use super::schedule::{capacities, copies, depths, finish, heights, Copy};
use crate::algorithm::{Algorithm, Send, Step};
use crate::collective::Kind;
use crate::origin::Family;
use crate::topology::{Capacities, Topology, TopologyIndex};
use anyhow::{bail, Result};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Instant;

/// A tree's children lists and the height of every vertex.
type Shape = (Vec<Vec<usize>>, Vec<usize>);

/// A send waiting for its link: copy `copy` crosses the edge into the representative tree's
/// vertex `vertex`; it has waited since step `since`.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Pending {
    copy: usize,
    vertex: usize,
    since: usize,
    /// Creation order (ties).
    seq: usize,
    /// The link it crosses.
    link: usize,
}

/// A pending send's priority: longest remaining path first, then oldest, then chunk, then
/// creation order (what a stable sort of all pending sends by the first three gives).
type Key = (Reverse<usize>, usize, usize, usize);

/// Pending sends of one link, the first in priority on top.
type Queue = BinaryHeap<Reverse<(Key, Pending)>>;

/// The algorithm of `packing` (as [`super::schedule::algorithm`]) scheduled by list
/// scheduling in the time-expanded fabric instead of by depth: every step is one round,
/// each link and switch constraint carries at most its capacity per step, and a send leaves
/// as soon as its piece has arrived and its link has room (longest remaining path first,
/// then oldest). This balances the steps' loads, so rounds per chunk approach the packing's
/// rate, and each link's sends come in the order the runtime can pipeline, one after
/// another ([`Algorithm::serial_links`]). Errors past `max_steps` steps, and with
/// [`OutOfTime`] once `deadline` has passed.
#[allow(clippy::too_many_arguments)]
pub fn list_scheduled(
    topology: &Topology,
    index: &TopologyIndex,
    packing: &Packing,
    kind: Kind,
    chunks: usize,
    counts: &PieceCounts,
    max_steps: usize,
    deadline: Instant,
) -> Result<Algorithm> {
    let caps = capacities(topology, index)?;
    let mut lister = Lister::new(
        topology,
        index,
        packing,
        copies(packing, kind, chunks, counts, false),
    );
    lister.seed();
    let mut steps: Vec<Step> = Vec::new();
    while lister.left > 0 {
        if Instant::now() >= deadline {
            return Err(OutOfTime.into());
        }
        if steps.len() >= max_steps {
            bail!(
                "list scheduling of the trees on `{}` needs more than {max_steps} steps",
                topology.name
            );
        }
        let taken = lister.take(caps);
        if taken.is_empty() {
            bail!(
                "list scheduling of the trees on `{}` is stuck: a link or switch has no capacity",
                topology.name
            );
        }
        steps.push(lister.advance(&taken, steps.len()));
    }
    let root = packing.roots[0].root;
    let mut algorithm = finish(topology, root, kind, chunks, Family::Listed, steps)?;
    // Timed for links that carry their sends one after another: where a link's sends need
    // more than one threadblock, the further ones wait (else they share the link and delay
    // every piece on it).
    algorithm.serial_links = true;
    Ok(algorithm)
}

/// List scheduling stopped at the search's deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("list scheduling of the trees stopped at the time limit")]
pub struct OutOfTime;

/// The state of a list schedule: pending sends per link, in priority order. A step takes
/// from each link what it and its switch constraints have room for, in the order one sorted
/// list of all pending sends would be scanned, at the cost of the sends taken rather than
/// of every send pending.
struct Lister<'a> {
    topology: &'a Topology,
    index: &'a TopologyIndex,
    packing: &'a Packing,
    copies: Vec<Copy>,
    /// Children and heights of every representative tree.
    shapes: Vec<Vec<Shape>>,
    queues: Vec<Queue>,
    /// Links with pending sends (possibly listed twice, and emptied ones).
    active: Vec<usize>,
    /// Sends not yet taken.
    left: usize,
    /// Pending sends created so far.
    seq: usize,
    link_load: Vec<u32>,
    switch_load: Vec<u32>,
}

impl<'a> Lister<'a> {
    fn new(
        topology: &'a Topology,
        index: &'a TopologyIndex,
        packing: &'a Packing,
        copies: Vec<Copy>,
    ) -> Lister<'a> {
        let shapes = packing
            .roots
            .iter()
            .map(|r| r.trees.iter().map(|(tree, _)| shape(tree)).collect())
            .collect();
        Lister {
            topology,
            index,
            packing,
            copies,
            shapes,
            queues: (0..topology.links.len())
                .map(|_| BinaryHeap::new())
                .collect(),
            active: Vec::new(),
            left: 0,
            seq: 0,
            link_load: vec![0; topology.links.len()],
            switch_load: vec![0; topology.switches.len()],
        }
    }

    /// The link the send of `copy` into `vertex` crosses.
    fn link(&self, copy: usize, vertex: usize) -> usize {
        let c = &self.copies[copy];
        let g = &self.packing.group.elements[c.element];
        let tree = &self.packing.roots[c.root].trees[c.tree].0;
        let parent = tree[vertex].expect("a pending send enters a non-root vertex");
        self.index.link_of[&(g[parent] as usize, g[vertex] as usize)]
    }

    fn priority(&self, p: &Pending) -> Key {
        let c = &self.copies[p.copy];
        (
            Reverse(self.shapes[c.root][c.tree].1[p.vertex]),
            p.since,
            c.chunk,
            p.seq,
        )
    }

    /// A new pending send of `copy` into `vertex`, waiting since step `since`.
    fn pending(&mut self, copy: usize, vertex: usize, since: usize) -> Pending {
        let p = Pending {
            copy,
            vertex,
            since,
            seq: self.seq,
            link: self.link(copy, vertex),
        };
        self.seq += 1;
        p
    }

    fn enqueue(&mut self, p: Pending) {
        if self.queues[p.link].is_empty() {
            self.active.push(p.link);
        }
        let key = self.priority(&p);
        self.queues[p.link].push(Reverse((key, p)));
        self.left += 1;
    }

    /// The first hop of every copy, out of its root.
    fn seed(&mut self) {
        for i in 0..self.copies.len() {
            let c = &self.copies[i];
            let root = self.packing.roots[c.root].root;
            let children = self.shapes[c.root][c.tree].0[root].clone();
            for v in children {
                let p = self.pending(i, v, 0);
                self.enqueue(p);
            }
        }
    }

    /// The sends of the next step, in priority order.
    fn take(&mut self, caps: &Capacities) -> Vec<(Key, Pending)> {
        // A link whose queue emptied in the last step and refilled with its arrivals was
        // listed again: once each.
        let queues = &self.queues;
        self.active.retain(|&l| !queues[l].is_empty());
        self.active.sort_unstable();
        self.active.dedup();
        let mut taken = Vec::new();
        if self.topology.switches.is_empty() {
            // Links do not interact: each gives its first sends, and the step is sorted.
            for &l in &self.active {
                while self.link_load[l] < caps.links[l] {
                    let Some(Reverse(entry)) = self.queues[l].pop() else {
                        break;
                    };
                    self.link_load[l] += 1;
                    taken.push(entry);
                }
            }
            taken.sort_unstable_by_key(|(key, _)| *key);
        } else {
            self.take_under_switches(caps, &mut taken);
        }
        self.left -= taken.len();
        taken
    }

    /// [`Lister::take`] with switch constraints: links give one send at a time in the order
    /// of their first sends.
    fn take_under_switches(&mut self, caps: &Capacities, taken: &mut Vec<(Key, Pending)>) {
        let governing = &self.index.governing;
        let mut links: BinaryHeap<Reverse<(Key, usize)>> = self
            .active
            .iter()
            .map(|&l| Reverse((self.queues[l].peek().expect("active").0 .0, l)))
            .collect();
        while let Some(Reverse((_, l))) = links.pop() {
            let fits = self.link_load[l] < caps.links[l]
                && governing[l]
                    .iter()
                    .all(|&j| self.switch_load[j] < caps.switches[j]);
            if !fits {
                // Nothing more crosses this link in this step: its load and its switch
                // constraints' only grow.
                continue;
            }
            let Reverse(entry) = self.queues[l].pop().expect("a link in the heap has sends");
            self.link_load[l] += 1;
            for &j in &governing[l] {
                self.switch_load[j] += 1;
            }
            taken.push(entry);
            if let Some(next) = self.queues[l].peek() {
                links.push(Reverse((next.0 .0, l)));
            }
        }
    }

    /// The step of the sends `taken` in step `now`: their pieces arrive, and the hops out of
    /// the vertices they enter wait from step `now + 1`.
    fn advance(&mut self, taken: &[(Key, Pending)], now: usize) -> Step {
        let mut sends = Vec::with_capacity(taken.len());
        let mut arrived = Vec::new();
        for &(_, p) in taken {
            let c = &self.copies[p.copy];
            let l = &self.topology.links[p.link];
            sends.push(Send {
                chunk: c.chunk,
                src: l.src,
                dst: l.dst,
            });
            let children = self.shapes[c.root][c.tree].0[p.vertex].clone();
            for v in children {
                arrived.push(self.pending(p.copy, v, now + 1));
            }
        }
        // Every link and switch constraint carried at most its capacity: one round.
        for &(_, p) in taken {
            self.link_load[p.link] = 0;
            for &j in &self.index.governing[p.link] {
                self.switch_load[j] = 0;
            }
        }
        for p in arrived {
            self.enqueue(p);
        }
        Step {
            rounds: 1,
            reduce: false,
            sends,
        }
    }
}

/// The children lists and heights of `tree`.
fn shape(tree: &Tree) -> Shape {
    let mut children = vec![Vec::new(); tree.len()];
    for (v, p) in tree.iter().enumerate() {
        if let Some(p) = p {
            children[*p].push(v);
        }
    }
    (children, heights(tree, &depths(tree)))
}
