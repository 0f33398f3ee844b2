//! The steps of the chosen rings: waves, rounds over the nodes, last hops, shortcuts
//! ([`schedule`]), and the single-node layout for the reversal into a reduce-scatter
//! ([`for_reversal`]).

use super::cycles::Ring;
use crate::algorithm::{Algorithm, Send, Step};
use crate::collective::Kind;
use crate::layout::groups::{fit_groups, with_groups};
use crate::load::{plain_step, rounds_needed};
use crate::origin::Family;
use crate::topology::{Capacities, Topology, TopologyIndex};
use crate::trees::schedule::finish;
use anyhow::Result;

/// `algorithm`, the single-node schedule of `rings` ([`schedule`]), laid out for its reversal
/// into a reduce-scatter: the first step split in two, the first hops of the pieces without
/// a shortcut (root to ring successor; reversed, the final hop into the root over the wide
/// link, which feeds nothing) in a step of their own, and the channel groups set so that,
/// reversed, the first half of the ring's steps is group 0, the second half group 1 and the
/// final hops group 2. At a slice boundary a one-group reversal's package link threadblock
/// finishes the slice's last relays and final hops before the next slice's first hops, which
/// the bottleneck links wait for; in stages, group 0 sends them while group 1 finishes the
/// slice and group 2 drains the final hops. On `mi250-16` at 1 GB: 318.1 GB/s (the links
/// out of a package that start last busy without a gap to the end) against 315.4 for the plain
/// reversal in one group, 308.9 in two, and 318.0 with the final hops apart but the ring in
/// one group; allreduce 318.9 against 316.8. It cannot reach 99% there (98.98%): a GCD
/// with three single links out of its package needs three of its partner's 2 MiB slices
/// before its third link can start (32.2 µs), and every such link carries the optimum's
/// full load (3131.7 µs), so the last arrival is at 3164.6 µs where 99% needs 3164.1.
/// `None` when every piece takes a shortcut (no final hops to set apart).
pub(super) fn for_reversal(
    topology: &Topology,
    index: &TopologyIndex,
    algorithm: &Algorithm,
    rings: &[Ring],
) -> Result<Option<Algorithm>> {
    let caps = index.capacities.as_ref().expect("checked by applies");
    let chunks = rings.len();
    let shortcut = |chunk: usize| {
        let (root, ring) = (chunk / chunks, &rings[chunk % chunks]);
        let k = ring.order.iter().position(|&r| r == root);
        ring.shortcut[k.expect("a ring visits every rank")]
    };
    let mut sends: Vec<Vec<Send>> = algorithm.steps.iter().map(|s| s.sends.clone()).collect();
    let (apart, rest): (Vec<Send>, Vec<Send>) = sends[0].iter().partition(|s| !shortcut(s.chunk));
    if apart.is_empty() {
        return Ok(None);
    }
    sends.splice(0..1, [apart, rest]);
    let steps: Vec<Step> = sends
        .into_iter()
        .map(|sends| plain_step(index, caps, sends))
        .collect();
    // Reversed: the first half of the ring's steps in group 0, the second half in group 1,
    // the final hops in group 2.
    let rest = steps.len() - 1;
    let wanted: Vec<usize> = std::iter::once(2)
        .chain(std::iter::repeat_n(1, rest.div_ceil(2)))
        .chain(std::iter::repeat_n(0, rest / 2))
        .collect();
    let laid_out = finish(
        topology,
        0,
        Kind::AllGather,
        chunks,
        Family::ShortcutRings { retimed: false },
        steps,
    )?;
    let groups = fit_groups(&laid_out, wanted);
    Ok(Some(with_groups(laid_out, groups)))
}

/// The steps of `rings` (node-local ranks) on each node of `nodes` (global ranks,
/// node-local order) in `waves` waves, named `KIND-TOPOLOGY-LABEL-...`: piece w·R + k of
/// every root (R rings) goes around ring k in wave w. With one node and one wave as in the
/// module docs; with M nodes, the node's ring steps run M times, for the pieces of the ranks
/// 0, 1, ..., M − 1 nodes back, each round in `waves` sub-rounds of one piece per ring and
/// root, and rank i passes the pieces of the rank s nodes back on to rank i of the next node
/// in the first step of round s, wave by wave. The last step (the last hops) takes them in
/// the order of their rounds and waves, so that a threadblock never waits on a late wave
/// before an early one. `drops[w]` ([`SHORTCUT`], [`NO_SHORTCUT`] or both) picks the pieces of
/// wave w whose remote rounds end early ([`relayed_drops`]): their last hop over a link
/// narrower than the path's widest is dropped, and the rank it led to gets the piece from its
/// rail peer instead, which had it at the same hop of the round before.
pub(super) fn schedule(
    topology: &Topology,
    index: &TopologyIndex,
    nodes: &[Vec<usize>],
    rings: &[Ring],
    waves: usize,
    drops: &[u8],
    family: Family,
) -> Result<Algorithm> {
    let caps = index.capacities.as_ref().expect("checked by applies");
    let (m, n) = (nodes.len(), nodes[0].len());
    // Sub-round u = round · waves + wave: steps u·d .. u·d + d − 1 carry the hops 0..d − 1
    // of that wave's pieces of the ranks `round` nodes back; the last step (index
    // m·waves·d) the last hops of every sub-round.
    let d = n - 2;
    let subs = m * waves;
    let mut w = Waves {
        index,
        caps,
        nodes,
        rings,
        waves,
        drops,
        d,
        chunks: rings.len() * waves,
        steps: vec![Vec::new(); subs * d + 1],
        last: Vec::new(),
        shortcuts: Vec::new(),
        relays: Vec::new(),
    };
    for a in 0..m {
        for round in 0..m {
            for wave in 0..waves {
                w.ring_sends(a, round, wave);
            }
            if round + 1 < m {
                w.rail_sends(a, round);
            }
        }
    }
    for (at, send) in std::mem::take(&mut w.relays) {
        w.steps[at].push(send);
    }
    // Stable: within a sub-round the last hops keep their order.
    let mut last = std::mem::take(&mut w.last);
    last.sort_by_key(|&(sub, _)| sub);
    w.steps[subs * d].extend(last.into_iter().map(|(_, send)| send));
    w.place_shortcuts();
    let (chunks, mut steps) = (w.chunks, w.steps);
    let trailing = !steps[subs * d].is_empty();
    if !trailing {
        steps.pop();
    }
    let steps: Vec<Step> = steps
        .into_iter()
        .map(|sends| plain_step(index, caps, sends))
        .collect();
    let algorithm = finish(topology, 0, Kind::AllGather, chunks, family, steps)?;
    if !trailing {
        return Ok(algorithm);
    }
    let mut wanted = vec![0; subs * d];
    wanted.push(1);
    let groups = fit_groups(&algorithm, wanted);
    Ok(with_groups(algorithm, groups))
}

/// The sends of [`schedule`] as they are laid out: the ring steps of every sub-round, the
/// last hops, the shortcuts and the relays, each with the sub-round or step it belongs to.
struct Waves<'a> {
    index: &'a TopologyIndex,
    caps: &'a Capacities,
    nodes: &'a [Vec<usize>],
    rings: &'a [Ring],
    waves: usize,
    drops: &'a [u8],
    /// Ring steps per sub-round.
    d: usize,
    /// Pieces per rank.
    chunks: usize,
    steps: Vec<Vec<Send>>,
    last: Vec<(usize, Send)>,
    shortcuts: Vec<(usize, Send)>,
    relays: Vec<(usize, Send)>,
}

impl Waves<'_> {
    /// The ring hops on node `a` of wave `wave`'s pieces of the ranks `round` nodes back.
    fn ring_sends(&mut self, a: usize, round: usize, wave: usize) {
        let (m, n, d) = (self.nodes.len(), self.nodes[0].len(), self.d);
        let node = &self.nodes[a];
        let from = &self.nodes[(a + m - round) % m];
        let sub = round * self.waves + wave;
        for (k, ring) in self.rings.iter().enumerate() {
            let piece = wave * self.rings.len() + k;
            let order = &ring.order;
            for p in 0..n {
                let chunk = from[order[p]] * self.chunks + piece;
                let hops = if ring.shortcut[p] { n - 2 } else { n - 1 };
                let kind = if ring.shortcut[p] {
                    SHORTCUT
                } else {
                    NO_SHORTCUT
                };
                let ends_early =
                    round >= 1 && self.drops.get(wave).is_some_and(|&bits| bits & kind != 0);
                let dropped = ends_early
                    .then(|| last_narrow_hop(self.index, self.caps, node, order, p, hops))
                    .flatten();
                if let Some(h) = dropped {
                    // Rank w of the node before had the piece at the same hop of the round
                    // before; it hands it on over its rail.
                    let w = order[(p + h + 1) % n];
                    let prev = &self.nodes[(a + m - 1) % m];
                    let received = ((round - 1) * self.waves + wave) * d + h;
                    let send = Send {
                        chunk,
                        src: prev[w],
                        dst: node[w],
                    };
                    self.relays.push((received + 1, send));
                }
                for h in (0..hops).filter(|&h| Some(h) != dropped) {
                    let send = Send {
                        chunk,
                        src: node[order[(p + h) % n]],
                        dst: node[order[(p + h + 1) % n]],
                    };
                    if h < d {
                        self.steps[sub * d + h].push(send);
                    } else {
                        self.last.push((sub, send));
                    }
                }
                if ring.shortcut[p] {
                    let send = Send {
                        chunk,
                        src: node[order[p]],
                        dst: node[order[(p + n - 1) % n]],
                    };
                    self.shortcuts.push((sub, send));
                }
            }
        }
    }

    /// The rail: the pieces of the rank `round` nodes back go on from node `a` to the next
    /// node. In waves, each wave's in the last step of its sub-round, after the ring's and
    /// the shortcut's sends of the same pieces: the NIC's threadblock sends them as soon as
    /// it can whatever the step, and reversed into a reduce-scatter the NIC's partial sum is
    /// then the first reduction into its slot (the lowering chains them in step order), so
    /// the receiver takes the NIC's messages as they arrive instead of after its rings'
    /// reductions, which come last in the dual (18 pieces on `mi250-16x2` at 1 GB: 317.1
    /// against 256.9 GB/s in the first step). In one wave, several slices per piece, the
    /// first step (the dual at 6 pieces: 292.7 against 265.7).
    fn rail_sends(&mut self, a: usize, round: usize) {
        let (m, n, d) = (self.nodes.len(), self.nodes[0].len(), self.d);
        let node = &self.nodes[a];
        let from = &self.nodes[(a + m - round) % m];
        let next = &self.nodes[(a + 1) % m];
        for wave in 0..self.waves {
            let sub = round * self.waves + wave;
            let at = if self.waves == 1 {
                sub * d
            } else {
                sub * d + d - 1
            };
            for i in 0..n {
                for k in 0..self.rings.len() {
                    self.steps[at].push(Send {
                        chunk: from[i] * self.chunks + wave * self.rings.len() + k,
                        src: node[i],
                        dst: next[i],
                    });
                }
            }
        }
    }

    /// Each shortcut in the ring step of its sub-round whose busiest link it loads least,
    /// away from the first two and the last ring step (see the module docs).
    fn place_shortcuts(&mut self) {
        let (index, caps, d) = (self.index, self.caps, self.d);
        for (sub, send) in std::mem::take(&mut self.shortcuts) {
            let window = if d >= 4 { 2..d - 1 } else { 0..d };
            let cost = |step: &Vec<Send>| {
                let before = rounds_needed(index, caps, step);
                let mut with = step.clone();
                with.push(send);
                let after = rounds_needed(index, caps, &with);
                let on_link = step
                    .iter()
                    .filter(|s| (s.src, s.dst) == (send.src, send.dst))
                    .count();
                (after - before, on_link)
            };
            let at = window
                .map(|i| sub * d + i)
                .min_by_key(|&i| (cost(&self.steps[i]), i))
                .expect("the window is not empty");
            self.steps[at].push(send);
        }
    }
}

/// In [`schedule`]'s `drops`: the pieces of roots that take their shortcut.
pub(super) const SHORTCUT: u8 = 1;

/// In [`schedule`]'s `drops`: the pieces of roots that do not take their shortcut.
pub(super) const NO_SHORTCUT: u8 = 2;

/// The hop of a ring path (root at position `p` of `order`, `hops` hops, node ranks `node`)
/// that enters the path's last package: its last hop over a link narrower than the widest
/// link it takes. `None` when all its links are equally wide.
pub(super) fn last_narrow_hop(
    index: &TopologyIndex,
    caps: &Capacities,
    node: &[usize],
    order: &[usize],
    p: usize,
    hops: usize,
) -> Option<usize> {
    let n = order.len();
    let cap = |h: usize| {
        let link = (node[order[(p + h) % n]], node[order[(p + h + 1) % n]]);
        caps.links[index.link_of[&link]]
    };
    let widest = (0..hops).map(cap).max()?;
    (0..hops).rev().find(|&h| cap(h) < widest)
}
