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
//! must have M ≥ 2 nodes of G ≥ 2 ranks each, every pair within a node linked, and the
//! rail links; ranks keep their order within a node (local index i is the i-th rank of the
//! node).
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
use crate::algorithm::{Algorithm, Send};
use crate::collective::Kind;
use crate::load::{busiest, plain_step};
use crate::origin::{Family, RailForm};
use crate::topology::Capacities;
use crate::topology::{shape, Topology, TopologyIndex};
use crate::trees::schedule::finish;
use anyhow::Result;

/// The ranks of every node in rank order, when `topology` has the shape the rail ring needs
/// (see the module docs); `None` otherwise.
pub fn rails(topology: &Topology, index: &TopologyIndex) -> Option<Vec<Vec<usize>>> {
    let nodes = shape::equal_nodes(topology)?;
    let fits = nodes[0].len() >= 2
        && shape::nodes_all_to_all(index, &nodes)
        && shape::rails_join(index, &nodes);
    fits.then_some(nodes)
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
        let Some(nodes) = rails(cx.topology, cx.index) else {
            return Ok(Vec::new());
        };
        let (topology, index) = (cx.topology, cx.index);
        let mut algorithms = Vec::new();
        for chunks in piece_counts(nodes.len(), cx.limits, cx.for_dual && cx.half) {
            algorithms.extend(rail_allgather(topology, index, &nodes, chunks, 0)?);
            let shortcuts = best_shortcuts(index, &nodes, chunks);
            if shortcuts > 0 {
                algorithms.extend(rail_allgather(topology, index, &nodes, chunks, shortcuts)?);
            }
        }
        // Its pieces a quarter of its messages, small messages at the tail.
        let coalesced = rail_allgather_coalesced(topology, index, &nodes)?;
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
/// connection's transfers spill over channels.
pub const DEFAULT_PIECES: usize = 32;

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

/// The rail-ring allgather of `nodes` (from [`rails`]) with `chunks` pieces per rank:
/// 2M − 1 steps (per ring step the in-node forwarding, then the ring send but after the
/// last), in one declared step group (one group per step where a connection's transfers
/// pass one channel's). With `shortcuts` = k > 0, each ring send also takes its last k
/// pieces straight to k other GPUs of the next node (the q-th to local index i + 1 + q),
/// which the rail receiver then does not forward to them: where the NVSwitch ports bind
/// rather than the NICs (dgx-a100x2), the NICs' spare capacity carries part of the relay
/// ([`best_shortcuts`]). `None` when the fabric's bandwidths have no integer capacities
/// (rounds cannot be counted).
pub fn rail_allgather(
    topology: &Topology,
    index: &TopologyIndex,
    nodes: &[Vec<usize>],
    chunks: usize,
    shortcuts: usize,
) -> Result<Option<Algorithm>> {
    let Some(caps) = index.capacities.as_ref() else {
        return Ok(None);
    };
    let m = nodes.len();
    let step = |sends: Vec<Send>| plain_step(index, caps, sends);
    let mut steps = Vec::with_capacity(2 * m - 1);
    for (local, ring) in rail_sends(nodes, chunks, shortcuts) {
        steps.push(step(local));
        if !ring.is_empty() {
            steps.push(step(ring));
        }
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
    algorithm.step_groups = Some(if spills {
        (0..algorithm.steps.len()).collect()
    } else {
        vec![0; algorithm.steps.len()]
    });
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
/// fit or the fabric's bandwidths have no integer capacities.
pub fn rail_allgather_coalesced(
    topology: &Topology,
    index: &TopologyIndex,
    nodes: &[Vec<usize>],
) -> Result<Option<Algorithm>> {
    let Some(caps) = index.capacities.as_ref() else {
        return Ok(None);
    };
    let m = nodes.len();
    let per_rank = CHANNEL_TRANSFERS / m;
    if per_rank < 2 {
        return Ok(None);
    }
    let chunks = per_rank * PIECES_PER_MESSAGE;
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
        relay_ratio(index, caps, nodes),
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
    for (s, (local, ring)) in rail_sends(nodes, chunks, 0).into_iter().enumerate() {
        if s + 1 == m {
            split(local, &mut push);
        } else if s == 0 && coarse_first {
            push(local, 2 * PIECES_PER_MESSAGE);
        } else {
            push(local, PIECES_PER_MESSAGE);
        }
        if s + 2 == m {
            split(ring, &mut push);
        } else {
            push(ring, PIECES_PER_MESSAGE);
        }
    }
    let mut algorithm = finish(
        topology,
        0,
        Kind::AllGather,
        chunks,
        Family::Rails {
            form: RailForm::Coalesced,
        },
        steps,
    )?;
    // One declared stage, as the rail ring (see there).
    algorithm.step_groups = Some(vec![0; algorithm.steps.len()]);
    algorithm.message_chunks = Some(counts);
    Ok(Some(algorithm))
}

/// How long the in-node relay of a piece takes against its ring send over the NIC, as a
/// fraction (numerator, denominator): the busiest resource's load over capacity when every
/// GPU forwards one piece to its node, over the same when every GPU sends one over its rail.
fn relay_ratio(index: &TopologyIndex, caps: &Capacities, nodes: &[Vec<usize>]) -> (u64, u64) {
    let (local, ring) = rail_sends(nodes, 1, 0).swap_remove(0);
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
/// forwarding, then the ring sends (none after the last ring step).
fn rail_sends(
    nodes: &[Vec<usize>],
    chunks: usize,
    shortcuts: usize,
) -> Vec<(Vec<Send>, Vec<Send>)> {
    let (m, g) = (nodes.len(), nodes[0].len());
    let pieces = |rank: usize| (0..chunks).map(move |p| rank * chunks + p);
    // The shortcut piece of `from` that the GPU of local index j got straight from the
    // previous node while the GPU of local index i is the rail receiver.
    let shortcut = |i: usize, j: usize| {
        let q = (j + g - i - 1) % g;
        (q < shortcuts).then(|| chunks - 1 - q)
    };
    let mut steps = Vec::with_capacity(m);
    for s in 0..m {
        let (mut local, mut ring) = (Vec::new(), Vec::new());
        for a in 0..m {
            for i in 0..g {
                let me = nodes[a][i];
                // The rank whose pieces this GPU holds since ring step s − 1 (its own at 0).
                let from = nodes[(a + m - s) % m][i];
                for (j, &peer) in nodes[a].iter().enumerate().filter(|&(j, _)| j != i) {
                    let skip = if s > 0 { shortcut(i, j) } else { None };
                    local.extend(
                        pieces(from)
                            .filter(|&chunk| Some(chunk - from * chunks) != skip)
                            .map(|chunk| Send {
                                chunk,
                                src: me,
                                dst: peer,
                            }),
                    );
                }
                if s + 1 < m {
                    let next = (a + 1) % m;
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

/// The shortcut count k (see [`rail_allgather`]) whose whole schedule loads its busiest
/// link or switch constraint least, relative to capacity (the bottleneck of a pipelined
/// run); 0 where no shortcut helps, as where the NICs bind. At most one per other GPU of
/// a node and per piece.
pub fn best_shortcuts(index: &TopologyIndex, nodes: &[Vec<usize>], chunks: usize) -> usize {
    let Some(caps) = index.capacities.as_ref() else {
        return 0;
    };
    let most = (nodes[0].len() - 1).min(chunks);
    let mut best = (0, (u64::MAX, 1));
    for k in 0..=most {
        let sends: Vec<Send> = rail_sends(nodes, chunks, k)
            .into_iter()
            .flat_map(|(local, ring)| local.into_iter().chain(ring))
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
        // Default: the search cap, and up to 32 within one and two channels of 64 transfers
        // (one only for an allreduce's reduce-scatter).
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
            ("dgx-a100", None),
            ("torus-2d:4x4", None),
        ] {
            let t = load(spec).unwrap();
            let found = rails(&t, &t.index()).map(|n| (n.len(), n[0].len()));
            assert_eq!(found, shape, "{spec}");
        }
    }

    #[test]
    fn rail_allgather_passes_the_checker() {
        for (spec, chunks) in [("dgx-a100x2", 1), ("dgx-a100x4", 3), ("dgx-h100x4", 2)] {
            let t = load(spec).unwrap();
            let index = t.index();
            let nodes = rails(&t, &index).unwrap();
            let a = rail_allgather(&t, &index, &nodes, chunks, 0)
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
        let a = rail_allgather(&t, &index, &nodes, 8, k).unwrap().unwrap();
        check(&a, &t).unwrap_or_else(|e| panic!("{e:#}"));
        assert!(a.name.contains("-rails-shortcut-"), "{}", a.name);
        let caps = index.capacities.as_ref().unwrap();
        let busiest_per_capacity = |a: &Algorithm| {
            let sends: Vec<Send> = a.steps.iter().flat_map(|s| s.sends.clone()).collect();
            let (l, c) = busiest(&index, caps, &sends);
            l as f64 / c as f64
        };
        let plain = rail_allgather(&t, &index, &nodes, 8, 0).unwrap().unwrap();
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
            let a = rail_allgather_coalesced(&t, &index, &nodes)
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
            let a = rail_allgather_coalesced(&t, &index, &nodes)
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
            let a = rail_allgather(&t, &index, &nodes, 2, 0).unwrap().unwrap();
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
}
