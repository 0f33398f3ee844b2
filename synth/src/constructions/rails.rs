//! The rail-ring allgather of a cluster of identical nodes: every GPU passes its pieces
//! around the ring of the GPUs with its local index on the other nodes (its rail: (a, i) →
//! (a + 1, i)), one node further per ring step, and forwards each piece it receives (and its
//! own) to every GPU of its node. A NIC then talks to one peer only, so the pieces it carries
//! arrive one after another and are relayed while the next ones cross: the last piece's
//! relay is all that is left at the end. Tree packing sends each GPU's pieces to every
//! remote node at once; the runtime shares a NIC among those connections, they all finish
//! at the end together, and their relays drain after the NICs are done (dgx-a100x8: 93.2% of
//! the optimum at 1 GB).
//!
//! Each NIC carries M − 1 chunks per rank of its node, the least any allgather needs where
//! the NICs bind (dgx-a100x4, x8); an NVSwitch port forwards 7 of them per piece. The fabric
//! must have M ≥ 2 nodes of G ≥ 2 ranks each and the rail links; ranks keep their order
//! within a node (local index i is the i-th rank of the node). Where every pair within a
//! node is linked, a GPU forwards each piece straight to the others; in identical nodes
//! that are not (DGX-1's cube-mesh, MI250's packages), along shortest-path broadcast trees
//! spread over the node's links ([`relay_trees`]), scheduled message by message so that
//! every link forwards what arrived the step before ([`message_by_message`]; for the
//! reversal, [`position_major`]). Tree packing leaves those clusters' last slices relayed
//! after the NICs are done (8 x DGX-1: 91.3% of the optimum at 1 GB, the rail ring 99.7%).
//!
//! Each ring step is two k-synchronous steps: the in-node forwarding of the pieces, then
//! their ring send. As an allgather this lowers to the same program as one step holding
//! both (no send waits for another send). It matters for the reduce-scatter that
//! [`crate::synthesize`] derives by reversal: there a GPU first takes the partial sum
//! arriving over its NIC and then adds its node's contributions, so a NIC message is
//! taken as soon as it arrives. With both in one step the lowering orders the reductions
//! into a piece by sender rank, usually the node's GPUs first: the NIC message then waited
//! for the node's contributions, which in the first ring steps trail the NIC (each piece
//! needs 7 through one NVSwitch port), the connection's two-message FIFO filled and the
//! sending NIC stalled (dgx-a100x8: 94.5% of the optimum at 1 GB, 98.9% split).

use super::{Construction, Context};
use crate::algorithm::{Algorithm, Send, Step};
use crate::collective::Kind;
use crate::load::{busiest, plain_step};
use crate::origin::{Family, RailForm};
use crate::topology::Capacities;
use crate::topology::{shape, Topology, TopologyIndex};
use crate::trees::schedule::finish;
use anyhow::Result;

/// The shape the rail ring runs on: the ranks of every node in rank order, and how a piece
/// a GPU holds reaches the other GPUs of its node.
#[derive(Debug, Clone, PartialEq)]
pub struct Rails {
    /// The ranks of every node, in rank order.
    pub nodes: Vec<Vec<usize>>,
    /// Per local index, its in-node broadcast trees, each taking an equal block of the
    /// pieces in order: one tree of direct sends where the node is linked all to all.
    pub relay: Vec<Vec<RelayTree>>,
}

impl Rails {
    /// Whether the relay sends straight from the GPU holding a piece to every other GPU of
    /// its node (linked all to all).
    fn direct(&self) -> bool {
        self.depth() <= 1
    }

    /// Levels of the deepest relay tree.
    fn depth(&self) -> usize {
        self.relay.iter().flatten().map(Vec::len).max().unwrap_or(0)
    }

    /// Which of `trees` relays piece `piece` of `chunks` (each tree an equal block of the
    /// pieces in order).
    fn tree_of(piece: usize, chunks: usize, trees: usize) -> usize {
        piece * trees / chunks
    }
}

/// An in-node broadcast tree: its levels of (from, to) local indices.
pub type RelayTree = Vec<Vec<(usize, usize)>>;

/// The rail-ring shape of `topology` (see the module docs): nodes linked all to all relay
/// directly; identical nodes without switch constraints inside relay along the
/// shortest-path trees of [`relay_trees`] where those relay a piece faster than the NIC
/// takes the next. `None` where the fabric has no such shape.
pub fn rails(topology: &Topology, index: &TopologyIndex) -> Option<Rails> {
    let nodes = shape::equal_nodes(topology)?;
    let g = nodes[0].len();
    if g < 2 || !shape::rails_join(index, &nodes) {
        return None;
    }
    if shape::nodes_all_to_all(index, &nodes) {
        let star = |i: usize| vec![vec![(0..g).filter(|&j| j != i).map(|j| (i, j)).collect()]];
        let relay = (0..g).map(star).collect();
        return Some(Rails { nodes, relay });
    }
    let relay = relay_trees(&shape::identical_node_fabric(topology, index, &nodes)?)?;
    let rails = Rails { nodes, relay };
    // Relayed along trees, a piece must reach the node's GPUs faster than the next crosses
    // the NIC, or the relays bind (two mi250-16 nodes: 1.6 times the NIC's time).
    let (relay, ring) = relay_ratio(index, index.capacities.as_ref()?, &rails);
    (relay < ring).then_some(rails)
}

/// Trees per rank of [`relay_trees`] (each takes an equal block of the pieces).
pub const RELAY_TREES: usize = 4;

/// Passes of [`relay_trees`]' rebuilding.
const RELAY_PASSES: usize = 4;

/// Per rank of the node fabric `node`, [`RELAY_TREES`] shortest-path broadcast trees over
/// its links, spread over the links: each rank's parent is, among the ranks one level up
/// linked to it, the one whose link then carries the least load for its bandwidth (a tree
/// weighing a [`RELAY_TREES`]-th; roots in rank order, ties to the lower rank); each tree is
/// then rebuilt against the others' loads, [`RELAY_PASSES`] times. `None` where the node is
/// not connected.
fn relay_trees(node: &Topology) -> Option<Vec<Vec<RelayTree>>> {
    let g = node.ranks;
    let index = node.index();
    let mut load = vec![0u64; node.links.len()];
    let mut trees: Vec<Vec<RelayTree>> = vec![Vec::new(); g];
    let links_of = |tree: &RelayTree| -> Vec<usize> {
        tree.iter()
            .flatten()
            .map(|&(u, v)| index.link_of[&(u, v)])
            .collect()
    };
    for pass in 0..=RELAY_PASSES {
        for k in 0..RELAY_TREES {
            for (root, own) in trees.iter_mut().enumerate() {
                if pass > 0 {
                    for l in links_of(&own[k]) {
                        load[l] -= 1;
                    }
                }
                let tree = shortest_path_tree(node, &index, root, &load)?;
                for l in links_of(&tree) {
                    load[l] += 1;
                }
                if pass == 0 {
                    own.push(tree);
                } else {
                    own[k] = tree;
                }
            }
        }
    }
    Some(trees)
}

/// A breadth-first broadcast tree of `node` from `root` whose parents take the link with
/// the least `load` (then the lower rank) per bandwidth; `None` where `node` is not
/// connected.
fn shortest_path_tree(
    node: &Topology,
    index: &TopologyIndex,
    root: usize,
    load: &[u64],
) -> Option<RelayTree> {
    let g = node.ranks;
    let mut reached = vec![false; g];
    reached[root] = true;
    let mut frontier = vec![root];
    let mut levels: RelayTree = Vec::new();
    loop {
        let next: Vec<usize> = (0..g)
            .filter(|&v| !reached[v])
            .filter(|&v| {
                frontier
                    .iter()
                    .any(|&u| index.link_of.contains_key(&(u, v)))
            })
            .collect();
        if next.is_empty() {
            break;
        }
        let share = |l: usize| (load[l] + 1) as f64 / node.links[l].bandwidth;
        let level = next
            .iter()
            .map(|&v| {
                let (u, _) = (frontier.iter())
                    .filter_map(|&u| index.link_of.get(&(u, v)).map(|&l| (u, l)))
                    .min_by(|&(u, a), &(w, b)| share(a).total_cmp(&share(b)).then(u.cmp(&w)))
                    .expect("reached from the frontier");
                (u, v)
            })
            .collect();
        for &v in &next {
            reached[v] = true;
        }
        levels.push(level);
        frontier = next;
    }
    reached.iter().all(|&r| r).then_some(levels)
}

/// The rail ring across identical nodes (allgather): NICs each talking to one peer, in
/// every piece count of [`piece_counts`], with its shortcut and coalesced forms.
pub struct RailRings;

impl Construction for RailRings {
    fn name(&self) -> &'static str {
        "the rail-ring schedule"
    }

    fn fits(&self, cx: &Context) -> bool {
        cx.kind == Kind::AllGather && rails(cx.topology, cx.index).is_some()
    }

    fn build(&self, cx: &Context) -> Result<Vec<Algorithm>> {
        let Some(rails) = rails(cx.topology, cx.index) else {
            return Ok(Vec::new());
        };
        let (topology, index, dual) = (cx.topology, cx.index, cx.for_dual);
        // An allreduce's halves relayed along trees: one channel's count only, no coalesced
        // form (on 8 x DGX-1 their local-reduction twins pass the runtime's limits, and no
        // such allreduce won on DGX-1, NDv2 or MI250 clusters).
        let relayed_half = cx.half && !rails.direct();
        let mut algorithms = Vec::new();
        let one_channel = (cx.for_dual && cx.half) || relayed_half;
        for chunks in piece_counts(rails.nodes.len(), cx.limits, one_channel) {
            algorithms.extend(rail_allgather(topology, index, &rails, chunks, 0, dual)?);
            let shortcuts = best_shortcuts(index, &rails, chunks);
            if shortcuts > 0 {
                algorithms.extend(rail_allgather(
                    topology, index, &rails, chunks, shortcuts, dual,
                )?);
            }
        }
        if relayed_half {
            return Ok(algorithms);
        }
        // Its pieces a quarter of its messages, small messages at the tail.
        let coalesced = rail_allgather_coalesced(topology, index, &rails, dual)?;
        let limits = cx.limits;
        algorithms.extend(
            coalesced.filter(|a| !limits.max_chunks_given || a.chunks() <= limits.max_chunks),
        );
        Ok(algorithms)
    }

    fn makes(&self, family: &Family) -> bool {
        matches!(family, Family::Rails { .. })
    }
}

/// Pieces per rank the rail ring tries without `--max-chunks`: its tail is the relay of
/// the last piece (or runtime slice, 2 MiB, if smaller), so more pieces shorten it until a
/// connection's transfers spill over channels. Reversed into a reduce-scatter its head is
/// the first in-node reduction, which finer pieces shorten too: on two DGX-1s, 64 pieces
/// per rank (1 MiB at 1 GB, two channels of the NIC connection) reach 99.1% of the
/// optimum, 32 pieces 98.4% (the NIC waited 127 µs for its first message).
pub const DEFAULT_PIECES: usize = 64;

/// NIC transfers one channel carries (the runtimes' 64 steps per threadblock).
const CHANNEL_TRANSFERS: usize = runtime::limits::Limits::PORTABLE.max_steps;

/// The piece counts the rail ring tries on `nodes` nodes: the search cap (`max_chunks`),
/// and up to [`DEFAULT_PIECES`] (or `--max-chunks` where given) as many as fit one
/// channel's transfers per connection and as many as fit two. Pieces spilled over two
/// channels share the NIC again; measured at 1 GB that pays on dgx-a100x8 (16 pieces:
/// 99.4% of the optimum against 98.9% at 8, the last relay being half as long) and loses
/// on dgx-a100x4 (32 pieces: 96.4% against 98.7%), and fewer pieces cost fewer transfers
/// at middle sizes, so each is a candidate and the simulator chooses per size. Reversed
/// into a reduce-scatter, a spilled count loses on dgx-a100x8 (16 pieces: 222.2 against
/// 222.5 GB/s at 8) and dgx-a100x4 (32 pieces: 251.6 against 255.0 at 16) but wins on three
/// DGX-H100s (32 pieces: 495.1 against 490.7 at 8, 99.05% of the optimum), so it is a
/// candidate there too; only a reduce-scatter composed into an allreduce (`dual_half`)
/// leaves it out, where no spilled pair won (dgx-h100x3, dgx-a100x4) and each cost seconds
/// of composing and simulating.
pub fn piece_counts(nodes: usize, limits: &crate::engine::Limits, dual_half: bool) -> Vec<usize> {
    let cap = if limits.max_chunks_given {
        limits.max_chunks
    } else {
        DEFAULT_PIECES
    };
    let fit = |cap: usize, channels: usize| {
        cap.clamp(1, (channels * CHANNEL_TRANSFERS / nodes.max(1)).max(1))
    };
    let mut counts = vec![fit(limits.max_chunks, 1), fit(cap, 1)];
    if !dual_half {
        counts.push(fit(cap, 2));
    }
    counts.sort_unstable();
    counts.dedup();
    counts
}

/// The rail-ring allgather of `rails` (from [`rails`]) with `chunks` pieces per rank:
/// 2M − 1 steps (per ring step the in-node forwarding, then the ring send but after the
/// last), in one declared step group (one group per step where a connection's transfers
/// pass one channel's). With `shortcuts` = k > 0, each ring send also takes its last k
/// pieces straight to k other GPUs of the next node (the q-th to local index i + 1 + q),
/// which the rail receiver then does not forward to them: where the NVSwitch ports bind
/// rather than the NICs (dgx-a100x2), the NICs' spare capacity carries part of the relay
/// ([`best_shortcuts`]). Relayed along trees, piece by piece instead
/// ([`message_by_message`]; laid out for a reversal, `dual`: [`position_major`]), without
/// shortcuts. `None` when the fabric's bandwidths have no integer capacities (rounds
/// cannot be counted).
pub fn rail_allgather(
    topology: &Topology,
    index: &TopologyIndex,
    rails: &Rails,
    chunks: usize,
    shortcuts: usize,
    dual: bool,
) -> Result<Option<Algorithm>> {
    let Some(caps) = index.capacities.as_ref() else {
        return Ok(None);
    };
    let m = rails.nodes.len();
    let step = |sends: Vec<Send>| plain_step(index, caps, sends);
    let mut steps = Vec::with_capacity(2 * m - 1);
    let mut groups = None;
    if rails.direct() {
        for (local, ring) in rail_sends(rails, chunks, shortcuts) {
            steps.extend(local.into_iter().filter(|l| !l.is_empty()).map(step));
            if !ring.is_empty() {
                steps.push(step(ring));
            }
        }
    } else {
        let relayed = if dual {
            position_major(rails, chunks, &vec![1; chunks])
        } else {
            message_by_message(rails, chunks, &vec![vec![1; chunks]; m])
        };
        steps.extend(relayed.sends.into_iter().map(step));
        groups = Some(relayed.groups);
    }
    let form = if shortcuts > 0 {
        RailForm::Shortcut
    } else {
        RailForm::Plain
    };
    let family = Family::Rails { form };
    let mut algorithm = finish(topology, 0, Kind::AllGather, chunks, family, steps)?;
    // One stage, declared: an allreduce composed of two rail rings then gives each phase
    // channels of its own, and the allgather of a slice overlaps the reduce-scatter of the
    // next (dgx-a100x4: 254.9 GB/s at 1 GB against 251.8 with both phases in one group).
    // Past one channel's transfers per connection, each step gets channels of its own
    // instead of spilling the later transfers onto a second channel that shares the NIC
    // with the first (dgx-a100x4, 32 pieces: 256.2 GB/s at 1 GB against 249.0).
    let spills = m * chunks > CHANNEL_TRANSFERS;
    algorithm.step_groups = Some(groups.unwrap_or_else(|| {
        if spills {
            (0..algorithm.steps.len()).collect()
        } else {
            vec![0; algorithm.steps.len()]
        }
    }));
    Ok(Some(algorithm))
}

/// Pieces per message of [`rail_allgather_coalesced`] away from its tail: with 64/M
/// messages per rank on each connection, a piece is then 512 KiB at 1 GiB on 8-GPU nodes
/// and a message the runtime's 2 MiB slice.
pub const PIECES_PER_MESSAGE: usize = 4;

/// The rail ring (see [`rail_allgather`]) in pieces a quarter of its messages: every
/// message carries [`PIECES_PER_MESSAGE`] consecutive pieces
/// ([`Algorithm::message_chunks`]) but those of the last ring step and of its in-node
/// relay, which go in the sizes of [`tail_messages`]; the own pieces' in-node forwarding of
/// the first ring step goes in messages of twice that where a connection would otherwise
/// carry more than one channel's 64 transfers. The rail ring's tail is the relay of its
/// last messages (7/12 of their NIC time on DGX-A100 nodes, 7/9 on DGX-H100): shrinking
/// messages keep each relay done before the next message is in, and the last one's is
/// short; reversed (reduce-scatter) the same holds for its head, the first messages'
/// in-node reduction. 64/M messages per rank, as many as fit one channel; `None` where none
/// fit or the fabric's bandwidths have no integer capacities. Relayed along trees:
/// [`relayed_coalesced`].
pub fn rail_allgather_coalesced(
    topology: &Topology,
    index: &TopologyIndex,
    rails: &Rails,
    dual: bool,
) -> Result<Option<Algorithm>> {
    let Some(caps) = index.capacities.as_ref() else {
        return Ok(None);
    };
    let m = rails.nodes.len();
    let per_rank = CHANNEL_TRANSFERS / m;
    if per_rank < 2 {
        return Ok(None);
    }
    let chunks = per_rank * PIECES_PER_MESSAGE;
    if !rails.direct() {
        return relayed_coalesced(topology, (index, caps), rails, per_rank, dual).map(Some);
    }
    // In-node transfers per connection: `per_rank` messages per ring step but the last, its
    // tail's, less those saved by doubling the first step's (where needed).
    let before_tail = (m - 1) * per_rank;
    let most = (CHANNEL_TRANSFERS + per_rank / 2).saturating_sub(before_tail);
    if most < per_rank {
        return Ok(None);
    }
    let tail = tail_messages(
        chunks,
        PIECES_PER_MESSAGE,
        most,
        relay_ratio(index, caps, rails),
    );
    let coarse_first = before_tail + tail.len() > CHANNEL_TRANSFERS;
    let mut steps = Vec::new();
    let mut counts = Vec::new();
    let mut push = |sends: Vec<Send>, count: usize| {
        if !sends.is_empty() {
            steps.push(plain_step(index, caps, sends));
            counts.push(count);
        }
    };
    let split = |sends: Vec<Send>, push: &mut dyn FnMut(Vec<Send>, usize)| {
        push_in_messages(sends, chunks, &tail, push)
    };
    for (s, (local, ring)) in rail_sends(rails, chunks, 0).into_iter().enumerate() {
        for level in local {
            if s + 1 == m {
                split(level, &mut push);
            } else if s == 0 && coarse_first {
                push(level, 2 * PIECES_PER_MESSAGE);
            } else {
                push(level, PIECES_PER_MESSAGE);
            }
        }
        if s + 2 == m {
            split(ring, &mut push);
        } else {
            push(ring, PIECES_PER_MESSAGE);
        }
    }
    // One declared stage, as the rail ring (see there).
    let groups = vec![0; steps.len()];
    coalesced(topology, chunks, steps, groups, counts).map(Some)
}

/// The coalesced rail ring of `chunks` pieces per rank in `steps`, with their channel
/// `groups` and most pieces per message (`counts`).
fn coalesced(
    topology: &Topology,
    chunks: usize,
    steps: Vec<Step>,
    groups: Vec<usize>,
    counts: Vec<usize>,
) -> Result<Algorithm> {
    let family = Family::Rails {
        form: RailForm::Coalesced,
    };
    let mut algorithm = finish(topology, 0, Kind::AllGather, chunks, family, steps)?;
    algorithm.step_groups = Some(groups);
    algorithm.message_chunks = Some(counts);
    Ok(algorithm)
}

/// The rail ring relayed along trees ([`message_by_message`]) in pieces a quarter of its
/// messages, `per_rank` (64/M) messages per rank and ring step, but the last ring step's,
/// which go in the shrinking sizes of [`tail_messages`] within what is left of one
/// channel's transfers on the NIC connection; laid out for a reversal (`dual`,
/// [`position_major`]), every ring step in those sizes.
fn relayed_coalesced(
    topology: &Topology,
    (index, caps): (&TopologyIndex, &Capacities),
    rails: &Rails,
    per_rank: usize,
    dual: bool,
) -> Result<Algorithm> {
    let m = rails.nodes.len();
    let chunks = per_rank * PIECES_PER_MESSAGE;
    let most = CHANNEL_TRANSFERS - (m - 2) * per_rank;
    let tail = tail_messages(
        chunks,
        PIECES_PER_MESSAGE,
        most,
        relay_ratio(index, caps, rails),
    );
    let relayed = if dual {
        position_major(rails, chunks, &tail)
    } else {
        let mut sizes = vec![vec![PIECES_PER_MESSAGE; per_rank]; m - 1];
        sizes.push(tail);
        message_by_message(rails, chunks, &sizes)
    };
    let steps = (relayed.sends.into_iter())
        .map(|sends| plain_step(index, caps, sends))
        .collect();
    coalesced(topology, chunks, steps, relayed.groups, relayed.counts)
}

/// How long the in-node relay of a piece takes against its ring send over the NIC, as a
/// fraction (numerator, denominator): the busiest resource's load over capacity when every
/// GPU forwards one piece per relay tree to its node, over the same when every GPU sends
/// as many over its rail.
fn relay_ratio(index: &TopologyIndex, caps: &Capacities, rails: &Rails) -> (u64, u64) {
    let trees = rails.relay.iter().map(Vec::len).max().unwrap_or(1);
    let (levels, ring) = rail_sends(rails, trees, 0).swap_remove(0);
    let local = levels.concat();
    let (relay_load, relay_cap) = busiest(index, caps, &local);
    let (ring_load, ring_cap) = busiest(index, caps, &ring);
    (relay_load * ring_cap, (relay_cap * ring_load).max(1))
}

/// The sizes, in pieces and in order, of the at most `most` messages that carry `chunks`
/// pieces through the last ring step, each a divisor of `per_message` starting at a
/// multiple of itself (so that messages of the steps before and after nest in them: the
/// reversed reduce-scatter otherwise splits its reductions into more transfers than a
/// channel holds), where
/// relaying a piece takes `relay` = (a, b), a/b of its NIC time. A relay waits for its
/// message and for the relay before it, so with the NIC busy throughout, the relay's
/// backlog after a message of m pieces is max(backlog, m) + m·a/b − m (NIC time of a piece
/// as the unit), and what is left of it after the last message is the tail past the NIC.
/// Chosen by dynamic programming over (pieces, messages) (a smaller backlog never hurts
/// later), starting from the backlog a full message leaves: the least final backlog, then
/// the fewest messages, then the larger messages first.
pub fn tail_messages(
    chunks: usize,
    per_message: usize,
    most: usize,
    relay: (u64, u64),
) -> Vec<usize> {
    let (a, b) = relay;
    // Backlog in units of 1/b piece of NIC time.
    let after = |backlog: u64, m: usize| {
        let m = m as u64;
        backlog.max(m * b) + m * a - m * b
    };
    // best[p][k]: the least backlog after p pieces in k messages, and those messages.
    let mut best: Vec<Vec<Option<Backlog>>> = vec![vec![None; most + 1]; chunks + 1];
    best[0][0] = Some((per_message as u64 * a, Vec::new()));
    for p in 0..chunks {
        for k in 0..most {
            let Some((backlog, sizes)) = best[p][k].clone() else {
                continue;
            };
            let fits = |m: &usize| per_message.is_multiple_of(*m) && p.is_multiple_of(*m);
            for m in (1..=per_message.min(chunks - p)).filter(fits) {
                let next = (after(backlog, m), [sizes.as_slice(), &[m]].concat());
                let slot = &mut best[p + m][k + 1];
                let better = match slot {
                    None => true,
                    Some((kept, kept_sizes)) => {
                        next.0 < *kept || (next.0 == *kept && next.1 > *kept_sizes)
                    }
                };
                if better {
                    *slot = Some(next);
                }
            }
        }
    }
    best[chunks]
        .iter()
        .flatten()
        .min_by_key(|(backlog, _)| *backlog)
        .map(|(_, sizes)| sizes.clone())
        .unwrap_or_else(|| vec![per_message; chunks.div_ceil(per_message)])
}

/// A backlog (in 1/b of a piece's NIC time) and the message sizes that leave it.
type Backlog = (u64, Vec<usize>);

/// Pushes `sends` of the rail ring in pieces of `chunks` per rank as messages of `sizes`
/// pieces (in order; consecutive messages of one size share a step and a count).
fn push_in_messages(
    sends: Vec<Send>,
    chunks: usize,
    sizes: &[usize],
    push: &mut dyn FnMut(Vec<Send>, usize),
) {
    let piece = |s: &Send| s.chunk % chunks;
    let within = |range: std::ops::Range<usize>| -> Vec<Send> {
        sends
            .iter()
            .filter(|s| range.contains(&piece(s)))
            .copied()
            .collect()
    };
    let (mut start, mut k) = (0, 0);
    while k < sizes.len() {
        let size = sizes[k];
        let mut end = start;
        while k < sizes.len() && sizes[k] == size {
            end += size;
            k += 1;
        }
        push(within(start..end), size);
        start = end;
    }
}

/// The sends of every ring step of the rail ring (see [`rail_allgather`]): the in-node
/// forwarding by levels of the relay trees, then the ring sends (none after the last ring
/// step).
fn rail_sends(rails: &Rails, chunks: usize, shortcuts: usize) -> Vec<RingStep> {
    let nodes = &rails.nodes;
    let (m, g) = (nodes.len(), nodes[0].len());
    let depth = rails.depth();
    let pieces = |rank: usize| (0..chunks).map(move |p| rank * chunks + p);
    // The shortcut piece of `from` that the GPU of local index j got straight from the
    // previous node while the GPU of local index i is the rail receiver.
    let shortcut = |i: usize, j: usize| {
        let q = (j + g - i - 1) % g;
        (q < shortcuts).then(|| chunks - 1 - q)
    };
    let mut steps = Vec::with_capacity(m);
    for s in 0..m {
        let mut local: Vec<Vec<Send>> = vec![Vec::new(); depth];
        let mut ring = Vec::new();
        for a in 0..m {
            for i in 0..g {
                // The rank whose pieces this GPU holds since ring step s − 1 (its own at 0).
                let from = nodes[(a + m - s) % m][i];
                let trees = &rails.relay[i];
                for (t, tree) in trees.iter().enumerate() {
                    let relays = |p: usize| Rails::tree_of(p, chunks, trees.len()) == t;
                    for (level, edges) in tree.iter().enumerate() {
                        for &(u, j) in edges {
                            let skip = if s > 0 { shortcut(i, j) } else { None };
                            local[level].extend(
                                pieces(from)
                                    .filter(|&chunk| relays(chunk - from * chunks))
                                    .filter(|&chunk| Some(chunk - from * chunks) != skip)
                                    .map(|chunk| Send {
                                        chunk,
                                        src: nodes[a][u],
                                        dst: nodes[a][j],
                                    }),
                            );
                        }
                    }
                }
                if s + 1 < m {
                    let (me, next) = (nodes[a][i], (a + 1) % m);
                    ring.extend(pieces(from).map(|chunk| Send {
                        chunk,
                        src: me,
                        dst: nodes[next][i],
                    }));
                    for q in 0..shortcuts {
                        ring.push(Send {
                            chunk: from * chunks + chunks - 1 - q,
                            src: me,
                            dst: nodes[next][(i + 1 + q) % g],
                        });
                    }
                }
            }
        }
        steps.push((local, ring));
    }
    steps
}

/// The rail ring of `chunks` pieces per rank relayed along trees, message by message: the
/// pieces of ring step s go in messages of `sizes[s]` pieces (in order), each numbered by
/// the tick it arrives in (increasing). The messages of ring step s + 1 whose last piece
/// came in a message of ring step s cross the NIC one per tick right after it arrived,
/// and its relay goes one level further per tick after those. A threadblock then sends in
/// the order its pieces arrive: by levels (every first hop of a ring step, then every
/// second), a second hop waits behind first hops of pieces still crossing the NIC. Each
/// tick is up to three steps: the ring sends, the relays of the GPUs' own pieces and those
/// of pieces that crossed a NIC, the last in a channel group of their own, so that a link
/// relays the own pieces, ready from the start, beside the NIC's pieces rather than in one
/// threadblock with them, each waiting behind the other (2 x DGX-1, 128 pieces: 99.5% of
/// the optimum at 1 GB against 94.5%). Not for a reversal: there the own pieces' relays
/// become the reductions of a GPU's own result, which would then take half of each link
/// from the start, where the reductions feeding the NIC need it ([`position_major`]).
fn message_by_message(rails: &Rails, chunks: usize, sizes: &[Vec<usize>]) -> RelayedSteps {
    let nodes = &rails.nodes;
    let (m, g) = (nodes.len(), nodes[0].len());
    // Per tick, its ring sends, own relays and relays of what crossed a NIC, each with
    // its largest message.
    let mut ticks: Vec<[(Vec<Send>, usize); 3]> = Vec::new();
    fn at_tick(
        ticks: &mut Vec<[(Vec<Send>, usize); 3]>,
        tick: usize,
        kind: usize,
    ) -> &mut (Vec<Send>, usize) {
        if ticks.len() <= tick {
            ticks.resize_with(tick + 1, Default::default);
        }
        &mut ticks[tick][kind]
    }
    // The first piece of each message.
    let starts = |sizes: &[usize]| -> Vec<usize> {
        sizes
            .iter()
            .scan(0, |at, &n| {
                *at += n;
                Some(*at - n)
            })
            .collect()
    };
    // The NIC tick of each message of the ring step (none for the first); the tick after
    // the last message's arrival and its NIC sends.
    let mut sent: Vec<usize> = Vec::new();
    let mut free = 0;
    for (s, messages) in sizes.iter().enumerate() {
        let kind = if s == 0 { 1 } else { 2 };
        let next: &[usize] = if s + 1 < m { &sizes[s + 1] } else { &[] };
        let ends = starts(messages);
        // Per message, the messages of the next ring step whose last piece it brings.
        let mut children: Vec<Vec<usize>> = vec![Vec::new(); messages.len()];
        for (j, (start, size)) in starts(next).into_iter().zip(next).enumerate() {
            let last = start + size - 1;
            children[ends.partition_point(|&e| e <= last) - 1].push(j);
        }
        let mut next_sent = vec![0; next.len()];
        for (k, (&size, &start)) in messages.iter().zip(&ends).enumerate() {
            let at = sent.get(k).map_or(free, |&t| t.max(free));
            for (c, &j) in children[k].iter().enumerate() {
                next_sent[j] = at + 1 + c;
            }
            let relayed = at + children[k].len() + 1;
            free = relayed;
            for p in start..start + size {
                for a in 0..m {
                    for i in 0..g {
                        let from = nodes[(a + m - s) % m][i];
                        let chunk = from * chunks + p;
                        if s > 0 {
                            let (ring, count) = at_tick(&mut ticks, sent[k], 0);
                            *count = (*count).max(size);
                            ring.push(Send {
                                chunk,
                                src: nodes[(a + m - 1) % m][i],
                                dst: nodes[a][i],
                            });
                        }
                        let trees = &rails.relay[i];
                        let tree = &trees[Rails::tree_of(p, chunks, trees.len())];
                        for (level, edges) in tree.iter().enumerate() {
                            let (relay, count) = at_tick(&mut ticks, relayed + level, kind);
                            *count = (*count).max(size);
                            relay.extend(edges.iter().map(|&(u, j)| Send {
                                chunk,
                                src: nodes[a][u],
                                dst: nodes[a][j],
                            }));
                        }
                    }
                }
            }
        }
        sent = next_sent;
    }
    let mut steps = RelayedSteps::default();
    for tick in ticks {
        for (kind, (sends, count)) in tick.into_iter().enumerate() {
            steps.push(sends, count, usize::from(kind == 2));
        }
    }
    steps
}

/// The rail ring relayed along trees for its reversal into a reduce-scatter, in messages of
/// `sizes` pieces in every ring step, message by message through the ring: for each
/// message in turn, each ring step's NIC send (into ring step s + 1) and then the relay of
/// the message as it arrived in ring step s, level by level, a step each. Reversed, every
/// threadblock alternates between the reductions that feed a NIC and those of a GPU's own
/// result, message by message, so a GPU's own contributions are in before the NIC's
/// partial sum they join (taken first, it held up the GPUs sending those contributions,
/// which then held up the reductions feeding the NIC: 2 x DGX-1 at 1 GB, a NIC idle for
/// 6 ms). One channel group.
fn position_major(rails: &Rails, chunks: usize, sizes: &[usize]) -> RelayedSteps {
    let nodes = &rails.nodes;
    let m = nodes.len();
    let depth = rails.depth();
    let mut steps = RelayedSteps::default();
    let mut start = 0;
    for &size in sizes {
        let pieces = start..start + size;
        for s in 0..m {
            // The GPU of local index i on node a holds node a − s's pieces since step s.
            let from = |a: usize, i: usize| nodes[(a + m - s) % m][i];
            if s + 1 < m {
                let mut ring = Vec::new();
                for (a, node) in nodes.iter().enumerate() {
                    let next = &nodes[(a + 1) % m];
                    for (i, (&me, &peer)) in node.iter().zip(next).enumerate() {
                        ring.extend(pieces.clone().map(|p| Send {
                            chunk: from(a, i) * chunks + p,
                            src: me,
                            dst: peer,
                        }));
                    }
                }
                steps.push(ring, size, 0);
            }
            for level in 0..depth {
                let mut relay = Vec::new();
                for (a, node) in nodes.iter().enumerate() {
                    for (i, trees) in rails.relay.iter().enumerate() {
                        for p in pieces.clone() {
                            let tree = &trees[Rails::tree_of(p, chunks, trees.len())];
                            let edges = tree.get(level).map_or(&[][..], Vec::as_slice);
                            relay.extend(edges.iter().map(|&(u, j)| Send {
                                chunk: from(a, i) * chunks + p,
                                src: node[u],
                                dst: node[j],
                            }));
                        }
                    }
                }
                steps.push(relay, size, 0);
            }
        }
        start += size;
    }
    steps
}

/// The steps of [`message_by_message`] and [`position_major`]: sends, most pieces per
/// message and channel group.
#[derive(Default)]
struct RelayedSteps {
    sends: Vec<Vec<Send>>,
    counts: Vec<usize>,
    groups: Vec<usize>,
}

impl RelayedSteps {
    /// A step of `sends` (none where empty), messages of at most `count` pieces, in channel
    /// group `group`.
    fn push(&mut self, sends: Vec<Send>, count: usize, group: usize) {
        if !sends.is_empty() {
            self.sends.push(sends);
            self.counts.push(count.max(1));
            self.groups.push(group);
        }
    }
}

/// One ring step's sends: the in-node forwarding by relay level, then the ring sends.
type RingStep = (Vec<Vec<Send>>, Vec<Send>);

/// The shortcut count k (see [`rail_allgather`]) whose whole schedule loads its busiest
/// link or switch constraint least, relative to capacity (the bottleneck of a pipelined
/// run); 0 where no shortcut helps, as where the NICs bind, and where pieces are relayed
/// along trees (that schedule takes none). At most one per other GPU of a node and per
/// piece.
pub fn best_shortcuts(index: &TopologyIndex, rails: &Rails, chunks: usize) -> usize {
    let Some(caps) = index.capacities.as_ref().filter(|_| rails.direct()) else {
        return 0;
    };
    let most = (rails.nodes[0].len() - 1).min(chunks);
    let mut best = (0, (u64::MAX, 1));
    for k in 0..=most {
        let sends: Vec<Send> = rail_sends(rails, chunks, k)
            .into_iter()
            .flat_map(|(local, ring)| local.into_iter().flatten().chain(ring))
            .collect();
        // A shortcut needs a link to another GPU of the next node (a fat-tree network, not
        // rails alone).
        if !(sends.iter()).all(|s| index.link_of.contains_key(&(s.src, s.dst))) {
            break;
        }
        let (load, cap) = busiest(index, caps, &sends);
        // Strictly less load per capacity than the best so far.
        if (load as u128) * (best.1 .1 as u128) < (best.1 .0 as u128) * (cap as u128) {
            best = (k, (load, cap));
        }
    }
    best.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::check;
    use crate::topology::load;

    #[test]
    fn rails_alone_take_no_shortcuts() {
        // Four DGX-H100s on a rail network: no link from a GPU to another local index of the
        // next node, so the rail ring takes none (it took some, and failed the checker).
        let t = crate::topology::load_nodes(
            "dgx-h100",
            Some(4),
            Some(crate::topology::multinode::Network::Rail),
        )
        .unwrap();
        let index = t.index();
        let nodes = rails(&t, &index).expect("rail-ring shape");
        for chunks in [1, 8, 32] {
            assert_eq!(best_shortcuts(&index, &nodes, chunks), 0, "{chunks} pieces");
        }
        let fat = crate::topology::load_nodes("dgx-h100", Some(4), None).unwrap();
        let fat_index = fat.index();
        let fat_nodes = rails(&fat, &fat_index).unwrap();
        assert!((1..=32).any(|c| best_shortcuts(&fat_index, &fat_nodes, c) > 0));
    }

    #[test]
    fn piece_counts_fill_one_and_two_channels_within_the_cap() {
        let mut limits = crate::engine::Limits::new(16, 8, std::time::Instant::now());
        // Default: the search cap, and up to 64 within one and two channels of 64 transfers
        // (one only for an allreduce's reduce-scatter).
        assert_eq!(piece_counts(2, &limits, false), vec![8, 32, 64]);
        assert_eq!(piece_counts(2, &limits, true), vec![8, 32]);
        assert_eq!(piece_counts(3, &limits, false), vec![8, 21, 42]);
        assert_eq!(piece_counts(8, &limits, false), vec![8, 16]);
        assert_eq!(piece_counts(8, &limits, true), vec![8]);
        assert_eq!(piece_counts(4, &limits, false), vec![8, 16, 32]);
        assert_eq!(piece_counts(4, &limits, true), vec![8, 16]);
        assert_eq!(piece_counts(32, &limits, false), vec![2, 4]);
        // A cap the user gives holds for every count.
        limits.max_chunks_given = true;
        assert_eq!(piece_counts(8, &limits, false), vec![8]);
        limits.max_chunks = 32;
        assert_eq!(piece_counts(4, &limits, false), vec![16, 32]);
        limits.max_chunks = 1;
        assert_eq!(piece_counts(2, &limits, false), vec![1]);
    }

    #[test]
    fn clusters_have_rails_and_single_boxes_do_not() {
        for (spec, shape) in [
            ("dgx-a100x2", Some((2, 8))),
            ("dgx-a100x8", Some((8, 8))),
            ("dgx-h100x4", Some((4, 8))),
            ("mi250-16x2", None),
            ("dgx1x4", Some((4, 8))),
            ("dgx-a100", None),
            ("torus-2d:4x4", None),
        ] {
            let t = load(spec).unwrap();
            let found = rails(&t, &t.index()).map(|r| (r.nodes.len(), r.nodes[0].len()));
            assert_eq!(found, shape, "{spec}");
        }
    }

    #[test]
    fn rail_allgather_passes_the_checker() {
        for (spec, chunks) in [("dgx-a100x2", 1), ("dgx-a100x4", 3), ("dgx-h100x4", 2)] {
            let t = load(spec).unwrap();
            let index = t.index();
            let rails = rails(&t, &index).unwrap();
            let nodes = &rails.nodes;
            let a = rail_allgather(&t, &index, &rails, chunks, 0, false)
                .unwrap()
                .unwrap();
            check(&a, &t).unwrap_or_else(|e| panic!("{spec}: {e:#}"));
            // Each ring step is an in-node step and a NIC step; the last has no NIC step.
            assert_eq!(a.num_steps(), 2 * nodes.len() - 1);
            // Each rank sends its pieces of one rank per step over its NIC, M − 1 times.
            let nic: usize = a
                .steps
                .iter()
                .flat_map(|s| &s.sends)
                .filter(|s| s.src == 0 && t.node_of[s.dst] != t.node_of[0])
                .count();
            assert_eq!(nic, (nodes.len() - 1) * chunks, "{spec}");
        }
    }

    #[test]
    fn shortcuts_relieve_the_nvswitch_where_it_binds_and_pass_the_checker() {
        // dgx-a100x2: per GPU, 14 pieces of a rank's data through the NVSwitch port
        // (300 GB/s) against one through the NIC (25 GB/s); the NVSwitch binds, so some
        // pieces take the NIC's spare capacity straight to their GPU.
        let t = load("dgx-a100x2").unwrap();
        let index = t.index();
        let nodes = rails(&t, &index).unwrap();
        let k = best_shortcuts(&index, &nodes, 8);
        assert_eq!(k, 1);
        let a = rail_allgather(&t, &index, &nodes, 8, k, false)
            .unwrap()
            .unwrap();
        check(&a, &t).unwrap_or_else(|e| panic!("{e:#}"));
        assert!(a.name.contains("-rails-shortcut-"), "{}", a.name);
        let caps = index.capacities.as_ref().unwrap();
        let busiest_per_capacity = |a: &Algorithm| {
            let sends: Vec<Send> = a.steps.iter().flat_map(|s| s.sends.clone()).collect();
            let (l, c) = busiest(&index, caps, &sends);
            l as f64 / c as f64
        };
        let plain = rail_allgather(&t, &index, &nodes, 8, 0, false)
            .unwrap()
            .unwrap();
        // 112 / 12 pieces per capacity unit against 111 / 12 (the optimum: 120 / 13).
        let (short, long) = (busiest_per_capacity(&a), busiest_per_capacity(&plain));
        assert!(short < long, "{short} {long}");
        // Where the NICs bind (dgx-a100x8: seven of a rank's pieces per NIC), none.
        let t = load("dgx-a100x8").unwrap();
        let index = t.index();
        let nodes = rails(&t, &index).unwrap();
        assert_eq!(best_shortcuts(&index, &nodes, 8), 0);
    }

    #[test]
    fn coalesced_rail_ring_fits_one_channel_with_small_tail_messages() {
        use crate::lower::{lower_to_xml, LowerOptions};
        for (spec, chunks) in [("dgx-a100x4", 64), ("dgx-a100x8", 32), ("dgx-a100x2", 128)] {
            let t = load(spec).unwrap();
            let index = t.index();
            let nodes = rails(&t, &index).unwrap();
            let a = rail_allgather_coalesced(&t, &index, &nodes, false)
                .unwrap()
                .unwrap();
            check(&a, &t).unwrap_or_else(|e| panic!("{spec}: {e:#}"));
            assert_eq!(a.chunks(), chunks, "{spec}");
            assert!(a.name.contains("-rails-coalesced-"), "{}", a.name);
            let counts = a.message_chunks.clone().unwrap();
            assert_eq!(counts.len(), a.steps.len());
            // The last two steps relay the tail: its last message a single piece.
            assert_eq!(counts[counts.len() - 1], 1, "{spec}");
            // Every connection within one channel's 64 transfers, in both buffer modes.
            for inplace in [false, true] {
                let options = LowerOptions {
                    inplace,
                    ..LowerOptions::default()
                };
                let (program, _) = lower_to_xml(&a, &options).unwrap();
                assert_eq!(program.nchannels(), 1, "{spec}");
                let sizes: std::collections::BTreeSet<usize> = program.gpus[0]
                    .threadblocks
                    .iter()
                    .flat_map(|tb| tb.steps.iter().map(|s| s.count))
                    .collect();
                // The tail's shrinking messages down to 1, the ring's 4, and the first
                // in-node step's 8 where the tail's extra transfers need the room.
                let sizes: Vec<usize> = sizes.into_iter().collect();
                assert_eq!(sizes.first(), Some(&1), "{spec}");
                assert!(
                    sizes.iter().all(|c| [1, 2, 4, 8].contains(c)),
                    "{spec}: {sizes:?}"
                );
            }
        }
    }

    /// The final backlog of `sizes` under [`tail_messages`]' model.
    fn backlog(sizes: &[usize], per_message: usize, (a, b): (u64, u64)) -> u64 {
        sizes.iter().fold(per_message as u64 * a, |backlog, &m| {
            let m = m as u64;
            backlog.max(m * b) + m * a - m * b
        })
    }

    /// Every sequence of at most `most` sizes summing to `chunks` from piece `at` on, each
    /// a divisor of `per_message` starting at a multiple of itself.
    fn all_sequences(at: usize, chunks: usize, per_message: usize, most: usize) -> Vec<Vec<usize>> {
        if at == chunks {
            return vec![Vec::new()];
        }
        if most == 0 {
            return Vec::new();
        }
        (1..=per_message.min(chunks - at))
            .filter(|m| per_message.is_multiple_of(*m) && at.is_multiple_of(*m))
            .flat_map(|m| {
                all_sequences(at + m, chunks, per_message, most - 1)
                    .into_iter()
                    .map(move |rest| [vec![m], rest].concat())
            })
            .collect()
    }

    #[test]
    fn tail_messages_leave_the_least_backlog_of_all_sequences() {
        for (chunks, most, relay) in [
            (12, 5, (7, 9)),
            (12, 6, (7, 9)),
            (12, 8, (7, 12)),
            (10, 6, (2, 1)),
            (9, 9, (1, 3)),
        ] {
            let sizes = tail_messages(chunks, 4, most, relay);
            assert_eq!(sizes.iter().sum::<usize>(), chunks);
            assert!(sizes.len() <= most && sizes.iter().all(|&m| [1, 2, 4].contains(&m)));
            let least = all_sequences(0, chunks, 4, most)
                .iter()
                .map(|s| backlog(s, 4, relay))
                .min()
                .unwrap();
            assert_eq!(
                backlog(&sizes, 4, relay),
                least,
                "{chunks} {most} {relay:?}"
            );
        }
        // DGX-H100 nodes (relay 7/9 of the NIC time), 32 pieces in at most 12 messages:
        // the last relay's backlog 10/9 of a piece, against 20/9 for the former fixed tail
        // (4 × 7, 2, 1, 1).
        let h100 = tail_messages(32, 4, 12, (7, 9));
        assert_eq!(h100, vec![4, 4, 4, 4, 4, 2, 2, 2, 2, 2, 1, 1]);
        assert_eq!(backlog(&h100, 4, (7, 9)), 10);
        assert_eq!(backlog(&[4, 4, 4, 4, 4, 4, 4, 2, 1, 1], 4, (7, 9)), 20);
    }

    #[test]
    fn relay_ratio_is_the_node_forwarding_against_the_nic() {
        for (spec, ratio) in [("dgx-h100x8", (7, 9)), ("dgx-a100x4", (7, 12))] {
            let t = load(spec).unwrap();
            let index = t.index();
            let nodes = rails(&t, &index).unwrap();
            let caps = index.capacities.as_ref().unwrap();
            assert_eq!(relay_ratio(&index, caps, &nodes), ratio, "{spec}");
        }
    }

    #[test]
    fn coalesced_rail_ring_and_its_reversal_reach_99_percent_of_the_optimum_at_1_gib() {
        use crate::collective::Collective;
        use crate::cutbound::CutBound;
        use crate::lower::{lower_to_xml, LowerOptions};
        use crate::simulate::{simulate, SimOptions};
        // The NICs bind on both; the relay is 7/9 (H100) and 7/12 (A100) of the NIC time.
        for spec in ["dgx-h100x8", "dgx-a100x4"] {
            let t = load(spec).unwrap();
            let index = t.index();
            let nodes = rails(&t, &index).unwrap();
            let a = rail_allgather_coalesced(&t, &index, &nodes, false)
                .unwrap()
                .unwrap();
            // The reduce-scatter as `synthesize` derives it (these fabrics equal their
            // reversal).
            let rs = a.without_dead_sends().reversed(
                Collective::new(Kind::ReduceScatter, t.ranks, 0, a.chunks()).unwrap(),
                true,
            );
            for algorithm in [&a, &rs] {
                let (program, _) = lower_to_xml(algorithm, &LowerOptions::default()).unwrap();
                assert_eq!(program.nchannels(), 1, "{spec} {}", algorithm.name);
                let size = 1 << 30;
                let run = simulate(&program, &t, size, &SimOptions::default()).unwrap();
                let bound = CutBound::new(program.collective, &t, 0).busbw_at(size);
                let name = &algorithm.name;
                assert!(
                    run.busbw >= 0.99 * bound,
                    "{spec} {name}: {} of {bound}",
                    run.busbw
                );
            }
        }
    }

    #[test]
    fn reduce_scatter_takes_the_nic_sum_before_the_node_contributions() {
        use crate::collective::Collective;
        for spec in ["dgx-a100x2", "dgx-a100x4"] {
            let t = load(spec).unwrap();
            let index = t.index();
            let nodes = rails(&t, &index).unwrap();
            let a = rail_allgather(&t, &index, &nodes, 2, 0, false)
                .unwrap()
                .unwrap();
            // The dual as `synthesize` derives it (these fabrics equal their reversal).
            let rs = a.without_dead_sends().reversed(
                Collective::new(Kind::ReduceScatter, t.ranks, 0, 2).unwrap(),
                true,
            );
            check(&rs, &t).unwrap_or_else(|e| panic!("{spec}: {e:#}"));
            // Per (receiver, chunk): the step its NIC partial sum arrives in, and the steps
            // its node's contributions arrive in; the former must come first, so the
            // lowering reduces the NIC message into the piece before the local ones.
            let mut nic = std::collections::HashMap::new();
            let mut local: Vec<(usize, usize, usize)> = Vec::new();
            for (k, step) in rs.steps.iter().enumerate() {
                for s in &step.sends {
                    if t.node_of[s.src] == t.node_of[s.dst] {
                        local.push((s.dst, s.chunk, k));
                    } else {
                        assert!(nic.insert((s.dst, s.chunk), k).is_none(), "{spec}");
                    }
                }
            }
            assert!(!nic.is_empty(), "{spec}");
            for (dst, chunk, k) in local {
                if let Some(&first) = nic.get(&(dst, chunk)) {
                    assert!(first < k, "{spec}: rank {dst} chunk {chunk}");
                }
            }
        }
    }

    #[test]
    fn nodes_not_linked_all_to_all_relay_along_shortest_path_trees() {
        let t = load("dgx1x2").unwrap();
        let index = t.index();
        let shape = rails(&t, &index).expect("two DGX-1s");
        assert!(!shape.direct());
        let node = &shape.nodes[0];
        for (root, trees) in shape.relay.iter().enumerate() {
            assert_eq!(trees.len(), RELAY_TREES);
            for tree in trees {
                // Every other GPU once, from a GPU it is linked to that has the piece, in as
                // many levels as the node's diameter (2 on the hybrid cube-mesh).
                assert_eq!(tree.len(), 2, "root {root}");
                let mut has = vec![root];
                for level in tree {
                    for &(u, v) in level {
                        assert!(has.contains(&u) && !has.contains(&v), "root {root}");
                        assert!(index.link_of.contains_key(&(node[u], node[v])));
                    }
                    has.extend(level.iter().map(|&(_, v)| v));
                }
                assert_eq!(has.len(), node.len());
            }
        }
        // The trees spread over the links: the busiest carries at most 3/2 pieces per
        // unit of capacity where the average is 7/6 (7 hops per root and piece).
        let caps = index.capacities.as_ref().unwrap();
        let (levels, _) = rail_sends(&shape, RELAY_TREES, 0).swap_remove(0);
        let local = levels.concat();
        let (most, cap) = busiest(&index, caps, &local);
        let unit = caps.links[index.link_of[&(0, 2)]] as u64;
        assert!(
            most * 2 * unit <= 3 * cap * RELAY_TREES as u64,
            "{most} / {cap}"
        );
        // Nodes linked all to all relay directly.
        let t = load("dgx-a100x2").unwrap();
        assert!(rails(&t, &t.index()).unwrap().direct());
    }

    #[test]
    fn relayed_rail_rings_and_their_reversals_pass_the_checker() {
        use crate::collective::Collective;
        for spec in ["dgx1x2", "dgx1x4", "mi250x2"] {
            let t = load(spec).unwrap();
            let index = t.index();
            let rails = rails(&t, &index).unwrap();
            for dual in [false, true] {
                let plain = rail_allgather(&t, &index, &rails, 8, 0, dual).unwrap();
                let coalesced = rail_allgather_coalesced(&t, &index, &rails, dual).unwrap();
                for a in [plain.unwrap(), coalesced.unwrap()] {
                    check(&a, &t).unwrap_or_else(|e| panic!("{spec} {}: {e:#}", a.name));
                    let groups = a.step_groups.clone().unwrap();
                    // Relays of what crossed a NIC in a group of their own, but in a
                    // reversal.
                    assert_eq!(groups.contains(&1), !dual, "{spec} {}", a.name);
                    let collective =
                        Collective::new(Kind::ReduceScatter, t.ranks, 0, a.chunks()).unwrap();
                    let rs = a.without_dead_sends().reversed(collective, true);
                    check(&rs, &t).unwrap_or_else(|e| panic!("{spec} {}: {e:#}", rs.name));
                    // A rank's pieces cross its NIC once per ring step but the last.
                    let nic = (a.steps.iter().flat_map(|s| &s.sends))
                        .filter(|s| s.src == 0 && t.node_of[s.dst] != t.node_of[0])
                        .count();
                    assert_eq!(nic, (rails.nodes.len() - 1) * a.chunks(), "{spec}");
                }
            }
        }
    }

    #[test]
    fn relayed_rail_ring_keeps_the_nic_busy_and_its_relay_tail_short() {
        use crate::cutbound::CutBound;
        use crate::lower::{lower_to_xml, LowerOptions};
        use crate::simulate::{simulate, SimOptions};
        // Two DGX-1s: each pair of GPUs shares a NIC, and a piece crossing it is relayed
        // to the node's GPUs along trees of two levels. The tree packing's schedules reach
        // 97.1% at 1 GB (their pieces' last slices relayed after the NICs are done).
        let t = load("dgx1x2").unwrap();
        let index = t.index();
        let rails = rails(&t, &index).unwrap();
        let a = rail_allgather_coalesced(&t, &index, &rails, false)
            .unwrap()
            .unwrap();
        let (program, _) = lower_to_xml(&a, &LowerOptions::default()).unwrap();
        let size = 1 << 30;
        let run = simulate(&program, &t, size, &SimOptions::default()).unwrap();
        let bound = CutBound::new(program.collective, &t, 0).busbw_at(size);
        assert!(run.busbw >= 0.99 * bound, "{} of {bound}", run.busbw);
    }
}
