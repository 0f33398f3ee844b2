//! Rings with shortcut last hops (allgather on fabrics of point-to-point links whose ranks
//! have in-links of unequal bandwidth, such as `mi250-16`).
//!
//! In a ring allgather every link carries the pieces of all ranks but its receiver, N − 1 of
//! them. A root's piece goes around the ring until the rank just before the root has it;
//! when that rank (p) is linked to from the root by a wider link than the ring's link into p,
//! the root hands p its piece directly (the shortcut) and the piece stops one hop earlier,
//! so the narrow link into p carries N − 2 pieces. On `mi250-16` every GCD has a 4-link
//! in-package partner and three single or double links to other packages, and every package
//! is a binding cut (6 links in, 14 ranks' data to take in): a ring that enters each package
//! once, from one GCD to its partner, and lets the partner's piece take the shortcut carries
//! only useful data into each package. Six such rings reach the exact optimum (321.4 GB/s
//! busbw), where plain rings are capped at 300 (one piece in 15 entering a package is
//! already there).
//!
//! The rings are directed Hamiltonian cycles of the fabric (a bounded enumeration), each
//! with its shortcuts (a root takes one where the link from it into its ring predecessor is
//! wider than the ring's last hop), one piece per ring and root: a small integer program
//! (HiGHS: one thread, fixed seed, a node limit) picks, with repetition, the fewest rings
//! (at most `--max-chunks`) whose busiest link is at the exact optimum's load. Where no ring
//! count reaches the optimum there is no candidate (the least loaded rings of `mi250` and
//! `amd8` simulated at 67% and 16% of those fabrics' best candidates at 1 GB).
//!
//! Schedule: step h carries the h-th hop of every piece (a ring forwards in step h what it
//! received in step h − 1, as NCCL's ring does), all rings on one channel. The last step holds
//! only the last hops of the pieces without a shortcut, each to a rank that forwards nothing:
//! it gets a channel group of its own, so that the ring's threadblocks go on with the next
//! slice while it drains (in one group the simulated busbw at 1 GB drops from 319.0 to 315.3
//! GB/s on `mi250-16`). A shortcut carries data its sender holds from the start, so it goes
//! in the step whose busiest link it loads least, but not in the first two steps (the last
//! step's sends of the previous slice share links then) nor the last ring step (which feeds
//! the last step): 317.8 GB/s when they go in the earliest steps.
//!
//! Across M identical nodes joined by rails ([`rail_nodes`], `mi250-16x2`), every node runs
//! its rings M times: over its own ranks' pieces, then over those of each node before it,
//! which rank i passes on to rank i of the next node ([`rail_shortcut_rings`]): 311.3 GB/s
//! at 1 GB on `mi250-16x2` (90.7% of the optimum; the staged trees reached 265.6). The
//! runtime replays the whole program once per slice (2 MiB), so with 2.67 slices per piece
//! the first slice's remote round waits for its pieces to cross the NICs; in waves (the
//! rings' pieces cut in W sub-rounds, W the fewest that make a piece one slice at 1 GB) the
//! program runs once, the remote waves start one after another as their pieces arrive and
//! the NICs run ahead: 325.4 GB/s (94.9%), against a rate of 332.1 (each package takes 28
//! ranks' data over its xGMI links; the optimum brings some in over several NICs). So for
//! allgathers some remote pieces' rings end a package early and the GCD they would have
//! entered gets them from its rail peer over its own NIC ([`relayed`]): rate 341.9,
//! simulated 331.7 GB/s (96.7%).
//!
//! Reduce-scatter and allreduce get the reversed schedule through [`crate::synthesize`]'s
//! duality. Reversed, the last hops become first hops (a GCD's own contribution handed to its
//! partner) that the first ring sends of each slice wait for, and the first hops of the
//! pieces without a shortcut become final hops over the package link that feed nothing. So
//! for a dual, beside that schedule, [`shortcut_rings`] offers one laid out for its reverse
//! ([`for_reversal`]): those final hops in a step and channel group of their own and the
//! ring's steps in two stages, so that the reduce-scatter's package links send the next
//! slice's first hops while the slice finishes (315.4 → 318.1 GB/s at 1 GB on `mi250-16`,
//! allreduce 316.8 → 318.9).

mod cycles;
mod layout;
mod relay;

use super::{Construction, Context};
use crate::algorithm::Algorithm;
use crate::collective::Kind;
use crate::engine::Limits;
use crate::origin::Family;
use crate::topology::{shape, Topology, TopologyIndex};
use anyhow::Result;
use cycles::{choose_rings, Ring};
use layout::{for_reversal, schedule};
use relay::{relayed, relayed_retimed};
use std::time::Instant;

/// Largest fabric tried (ranks).
pub const MAX_RANKS: usize = 32;

/// Whether shortcut rings can help on `topology`: 4 to [`MAX_RANKS`] ranks, no switch
/// constraints, integer capacities, and a rank whose in-links differ in bandwidth (with equal
/// links a shortcut is never wider than the ring's hop).
pub fn applies(topology: &Topology, index: &TopologyIndex) -> bool {
    let n = topology.ranks;
    if !(4..=MAX_RANKS).contains(&n) || !topology.switches.is_empty() || index.capacities.is_none()
    {
        return false;
    }
    let mut into: Vec<Vec<f64>> = vec![Vec::new(); n];
    for l in &topology.links {
        into[l.dst].push(l.bandwidth);
    }
    into.iter()
        .any(|b| b.iter().any(|&x| (x - b[0]).abs() > 1e-9 * b[0].abs()))
}

/// The shortcut-ring allgather of `topology` with at most `max_chunks` rings (one piece per
/// ring and root); for a dual (`for_dual`: the schedule is reversed into a reduce-scatter)
/// also the same rings laid out for the reversal ([`for_reversal`]). Empty when the fabric
/// does not qualify ([`applies`]), has no Hamiltonian cycle within the enumeration's bounds,
/// no ring count up to `max_chunks` reaches `optimum_gbps` (GB/s per root), or no chosen ring
/// takes a shortcut (NCCL's rings are then as good).
pub fn shortcut_rings(
    topology: &Topology,
    index: &TopologyIndex,
    (max_chunks, retimed_pieces): (usize, usize),
    optimum_gbps: f64,
    for_dual: bool,
    deadline: Instant,
) -> Result<Vec<Algorithm>> {
    if !applies(topology, index) {
        return Ok(Vec::new());
    }
    let Some(rings) = choose_rings(topology, index, max_chunks, optimum_gbps, deadline)? else {
        return Ok(Vec::new());
    };
    let node: Vec<usize> = (0..topology.ranks).collect();
    let algorithm = schedule(
        topology,
        index,
        std::slice::from_ref(&node),
        &rings,
        1,
        &[],
        Family::ShortcutRings { retimed: false },
    )?;
    let retimed = retimed_rings(topology, index, &node, &rings, retimed_pieces)?;
    if !for_dual {
        return Ok(std::iter::once(algorithm).chain(retimed).collect());
    }
    let reversal = for_reversal(topology, index, &algorithm, &rings)?;
    Ok(std::iter::once(algorithm)
        .chain(reversal)
        .chain(retimed)
        .collect())
}

/// The single-node shortcut rings in as many waves as `pieces` per rank allow (0: none),
/// each link's sends reordered by list scheduling at the reference size
/// ([`crate::layout::retime`]): `mi250-16` at 1 GB, 10 waves (60 pieces), 99.4% of the optimum
/// predicted (and simulated; the waves' step order alone gives 98.2% at 18 pieces), where
/// the one-wave schedule runs several runtime slices per piece. `None` where a piece would
/// span more than one runtime slice at the reference size.
fn retimed_rings(
    topology: &Topology,
    index: &TopologyIndex,
    node: &[usize],
    rings: &[Ring],
    pieces: usize,
) -> Result<Option<Algorithm>> {
    let waves = pieces / rings.len();
    let chunks = rings.len() * waves;
    if waves == 0 || crate::layout::reference::slices(topology, Kind::AllGather, chunks) > 1.0 {
        return Ok(None);
    }
    let piece_bytes = crate::layout::reference::piece_bytes(topology, Kind::AllGather, chunks);
    let a = schedule(
        topology,
        index,
        &[node.to_vec()],
        rings,
        waves,
        &[],
        Family::ShortcutRings { retimed: false },
    )?;
    let family = Family::ShortcutRings { retimed: true };
    let retimed = crate::layout::retime::retimed(&a, topology, index, piece_bytes, family)?;
    Ok(retimed.map(|(a, _)| a))
}

/// The ranks of every node in rank order and node 0's own fabric (its ranks renumbered
/// 0..G, the links among them), when `topology` is M ≥ 2 identical nodes whose node fabric
/// qualifies for shortcut rings ([`applies`]: no switch constraint on a link within a node)
/// and rail links join rank i of each node to rank i of the next, with integer capacities;
/// `None` otherwise.
pub fn rail_nodes(
    topology: &Topology,
    index: &TopologyIndex,
) -> Option<(Vec<Vec<usize>>, Topology)> {
    // Rounds are counted in the fabric's integer capacities.
    index.capacities.as_ref()?;
    let nodes = shape::equal_nodes(topology)?;
    let node = shape::identical_node_fabric(topology, index, &nodes)?;
    if !shape::rails_join(index, &nodes) {
        return None;
    }
    let node_index = node.index();
    applies(&node, &node_index).then_some((nodes, node))
}

/// Rings whose last hop takes the wider in-link, where ranks have in-links of unequal
/// bandwidth (`mi250-16`: the exact optimum, where NCCL's rings are capped at 93%).
pub struct ShortcutRings;

impl Construction for ShortcutRings {
    fn name(&self) -> &'static str {
        "rings with shortcut last hops"
    }

    fn fits(&self, cx: &Context) -> bool {
        cx.kind == Kind::AllGather && applies(cx.topology, cx.index)
    }

    fn build(&self, cx: &Context) -> Result<Vec<Algorithm>> {
        let limits = cx.limits;
        shortcut_rings(
            cx.topology,
            cx.index,
            (limits.max_chunks, retimed_pieces(limits)),
            cx.optimum_gbps,
            cx.for_dual,
            limits.deadline,
        )
    }

    fn makes(&self, family: &Family) -> bool {
        matches!(family, Family::ShortcutRings { .. })
    }
}

/// Across identical nodes of such fabrics, the same rings on every node, the other nodes'
/// pieces brought in over rails (`mi250-16x2`).
pub struct RailShortcutRings;

impl Construction for RailShortcutRings {
    fn name(&self) -> &'static str {
        "rail rings with shortcut last hops"
    }

    fn fits(&self, cx: &Context) -> bool {
        cx.kind == Kind::AllGather && rail_nodes(cx.topology, cx.index).is_some()
    }

    fn build(&self, cx: &Context) -> Result<Vec<Algorithm>> {
        let Some((nodes, node)) = rail_nodes(cx.topology, cx.index) else {
            return Ok(Vec::new());
        };
        let slices = |c: usize| crate::layout::reference::slices(cx.topology, Kind::AllGather, c);
        rail_shortcut_rings(
            cx.topology,
            cx.index,
            (&nodes, &node),
            cx.limits,
            (cx.optimum_gbps, cx.for_dual),
            slices,
        )
    }

    fn makes(&self, family: &Family) -> bool {
        matches!(
            family,
            Family::RailShortcutRings | Family::RailShortcutRelay { .. }
        )
    }
}

/// The rail shortcut-ring allgathers of a cluster from [`rail_nodes`]: every node runs the
/// shortcut rings of its own fabric (at most `--max-chunks` rings, at the node's exact
/// optimum), first over its own ranks' pieces, then over each other node's, which come in
/// over the rails (rank i of node a passes the pieces it has to rank i of node a + 1, one
/// node per ring round, as in [`crate::constructions::rails`]). One candidate per wave count of
/// [`wave_counts`] (`slices(c)`: runtime slices per piece at the reference size with `c`
/// pieces per rank; at most `--max-chunks` pieces where given, else
/// [`crate::constructions::rails::DEFAULT_PIECES`]). Empty when the node's rings do not reach its optimum.
pub fn rail_shortcut_rings(
    topology: &Topology,
    index: &TopologyIndex,
    (nodes, node): (&[Vec<usize>], &Topology),
    limits: &Limits,
    (optimum_gbps, for_dual): (f64, bool),
    slices: impl Fn(usize) -> f64,
) -> Result<Vec<Algorithm>> {
    let node_index = node.index();
    let net = crate::flow::FlowNetwork::new(node)?;
    let roots: Vec<usize> = (0..node.ranks).collect();
    let optimum = crate::flow::allgather_rate(&net, &roots)?.as_f64();
    let found = choose_rings(
        node,
        &node_index,
        limits.max_chunks,
        optimum,
        limits.deadline,
    )?;
    let Some(rings) = found else {
        return Ok(Vec::new());
    };
    let max_pieces = if limits.max_chunks_given {
        limits.max_chunks
    } else {
        crate::constructions::rails::DEFAULT_PIECES
    };
    let counts = wave_counts(rings.len(), max_pieces, &slices);
    let mut found = counts
        .iter()
        .map(|&waves| {
            schedule(
                topology,
                index,
                nodes,
                &rings,
                waves,
                &[],
                Family::RailShortcutRings,
            )
        })
        .collect::<Result<Vec<_>>>()?;
    if !for_dual {
        let fewest = *counts.last().expect("one wave at least");
        let most = max_pieces / rings.len();
        found.extend(relayed(
            topology,
            index,
            nodes,
            &rings,
            fewest..=most,
            optimum_gbps,
        )?);
    }
    // Retimed, in as many waves as the retimed pieces allow (finer pieces, a shorter
    // drain), and in half as many: an allreduce composes its halves at one piece count, and
    // its program must fit the runtime's threadblocks (2 × 60 pieces on `mi250-16x2` do
    // not: the reduce-scatter's receives carry dependencies, each a nop step; 2 × 30 do).
    // Only where a piece fits one runtime slice at the reference size.
    let most = retimed_pieces(limits) / rings.len();
    let mut tried = Vec::new();
    for waves in [most, most / 2] {
        if waves == 0 || tried.contains(&waves) || slices(rings.len() * waves) > 1.0 {
            continue;
        }
        tried.push(waves);
        found.extend(relayed_retimed(topology, index, nodes, &rings, waves)?);
    }
    Ok(found)
}

/// Most pieces per rank of the retimed candidates without `--max-chunks`: their links carry
/// one transfer at a time, so finer pieces cost no bandwidth and shorten the drain
/// (`mi250-16x2` at 1 GB, the plain list schedule: 30 pieces 98.2%, 48 98.9%, 60 99.1% of
/// the optimum); 60 pieces put up to 960 transfers on a 4-link connection, 15 chained
/// threadblocks.
pub const RETIMED_PIECES: usize = 64;

/// Most pieces per rank of the retimed candidates: `--max-chunks` where given, else
/// [`RETIMED_PIECES`].
pub fn retimed_pieces(limits: &Limits) -> usize {
    if limits.max_chunks_given {
        limits.max_chunks
    } else {
        RETIMED_PIECES
    }
}

/// The wave counts tried for `rings` rings: one, and the fewest waves whose pieces fit one
/// runtime slice at the reference size (`slices(c)` ≤ 1 with c = rings × waves ≤
/// `max_pieces`). The runtime replays the whole program once per slice, so with several
/// slices per piece the first slice's remote rounds wait for the NICs to deliver every
/// ring's piece of that slice (6 × 2 MiB at 16 GB/s on `mi250-16x2`: 786 µs) while the own
/// round has work for only 587 µs; in one slice the remote waves start one after another as
/// their pieces arrive, and the NICs run ahead of them. (One wave more, 24 pieces, simulated
/// within 0.3% of 18 at 1 GB, and each candidate costs an allreduce composition.)
fn wave_counts(rings: usize, max_pieces: usize, slices: impl Fn(usize) -> f64) -> Vec<usize> {
    let fit = (1..=max_pieces / rings.max(1)).find(|&w| slices(rings * w) <= 1.0);
    std::iter::once(1).chain(fit.filter(|&w| w > 1)).collect()
}

#[cfg(test)]
mod tests {
    use super::cycles::ring;
    use super::relay::{rate_gbps, relayed_drops, RELAYED};
    use super::*;
    use crate::algorithm::Send;
    use crate::check::check;
    use crate::topology::load;
    use std::time::Duration;

    fn far() -> Instant {
        Instant::now() + Duration::from_secs(3600)
    }

    /// Limits with `--max-chunks` as given (8 rings by default either way).
    fn limits(max_chunks: Option<usize>) -> Limits {
        Limits {
            max_steps: 16,
            max_chunks: max_chunks.unwrap_or(crate::engine::DEFAULT_MAX_CHUNKS),
            max_chunks_given: max_chunks.is_some(),
            deadline: far(),
            extra_memory: None,
            work_limit: None,
        }
    }

    #[test]
    fn only_fabrics_with_unequal_in_links_qualify() {
        for (spec, expected) in [
            ("mi250-16", true),
            ("dgx1", true),
            ("torus-2d:4x4", false),
            ("ring:8", false),
            ("dgx-a100x2", false),
            ("mi250-16x2", false),
        ] {
            let t = load(spec).unwrap();
            assert_eq!(applies(&t, &t.index()), expected, "{spec}");
        }
    }

    #[test]
    fn a_shortcut_replaces_the_narrow_last_hop() {
        // mi250-16: 0 → 1 is the 4-link package link, 8 → 0 a single link.
        let t = load("mi250-16").unwrap();
        let index = t.index();
        let caps = index.capacities.clone().unwrap();
        let order = vec![0, 1, 5, 4, 6, 7, 3, 2, 10, 11, 15, 14, 12, 13, 9, 8];
        let r = ring(order.clone(), &t, &index, &caps);
        // Rank 1's predecessor is 0: 1 → 0 (4 links) is wider than 8 → 0 (1 link).
        assert!(r.shortcut[1]);
        // Rank 0's predecessor is 8: 0 → 8 is no wider than 9 → 8's 4 links.
        assert!(!r.shortcut[0]);
        let link = |u, v| index.link_of[&(u, v)];
        // Into each package once, with every piece but the package's two: 14.
        assert_eq!(r.load[link(8, 0)], 14);
        assert_eq!(r.load[link(1, 5)], 14);
        // Inside a package: every piece but the receiver's, and the shortcut back.
        assert_eq!(r.load[link(0, 1)], 15);
        assert_eq!(r.load[link(1, 0)], 1);
    }

    #[test]
    fn mi250_16_rings_reach_the_exact_optimum_and_pass_the_checker() {
        let t = load("mi250-16").unwrap();
        let index = t.index();
        let net = crate::flow::FlowNetwork::new(&t).unwrap();
        let roots: Vec<usize> = (0..t.ranks).collect();
        let optimum = crate::flow::allgather_rate(&net, &roots).unwrap().as_f64();
        let a = shortcut_rings(&t, &index, (8, 0), optimum, false, far())
            .unwrap()
            .pop()
            .expect("mi250-16 has shortcut rings");
        check(&a, &t).unwrap();
        assert_eq!(a.chunks(), 6, "{}", a.name);
        // Over the whole schedule the busiest link carries 14 pieces per capacity unit:
        // 6 pieces per root at 50 × 6 / 14 = 21.43 GB/s per root, the optimum.
        let caps = index.capacities.as_ref().unwrap();
        let mut load = vec![0u32; t.links.len()];
        for s in a.steps.iter().flat_map(|s| &s.sends) {
            load[index.link_of[&(s.src, s.dst)]] += 1;
        }
        let busiest = load
            .iter()
            .zip(&caps.links)
            .map(|(&l, &c)| l as f64 / c as f64)
            .fold(0.0, f64::max);
        assert_eq!(busiest, 14.0);
        assert!((6.0 * caps.unit_gbps / busiest - optimum).abs() < 1e-9);
        // One ring step per hop (15 hops at most), the last one in a group of its own.
        assert_eq!(a.num_steps(), t.ranks - 1);
        let groups = a
            .step_groups
            .as_ref()
            .expect("the last step is grouped apart");
        assert_eq!(groups[..t.ranks - 2], vec![0; t.ranks - 2]);
        assert_eq!(groups[t.ranks - 2], 1);
        assert!(a.steps.iter().all(|s| s.rounds == 1));
        // No shortcut (a send of the sender's own piece after the first step) in the first
        // two steps or the last ring step.
        for (i, s) in a.steps.iter().enumerate().skip(1) {
            let own = s.sends.iter().any(|x| x.chunk / 6 == x.src);
            assert!(!own || (2..t.ranks - 3).contains(&i), "step {i}");
        }
    }

    #[test]
    fn the_layout_for_reversal_puts_the_unshortcut_first_hops_apart() {
        use crate::collective::Collective;
        let t = load("mi250-16").unwrap();
        let index = t.index();
        let net = crate::flow::FlowNetwork::new(&t).unwrap();
        let roots: Vec<usize> = (0..t.ranks).collect();
        let optimum = crate::flow::allgather_rate(&net, &roots).unwrap().as_f64();
        let found = shortcut_rings(&t, &index, (8, 0), optimum, true, far()).unwrap();
        assert_eq!(
            found.len(),
            2,
            "the plain schedule and the one for reversal"
        );
        let (plain, a) = (&found[0], &found[1]);
        check(a, &t).unwrap();
        // The same sends, the first step split in two.
        let mut x: Vec<_> = plain.steps.iter().flat_map(|s| &s.sends).collect();
        let mut y: Vec<_> = a.steps.iter().flat_map(|s| &s.sends).collect();
        x.sort_by_key(|s| (s.chunk, s.src, s.dst));
        y.sort_by_key(|s| (s.chunk, s.src, s.dst));
        assert_eq!(x, y);
        assert_eq!(a.num_steps(), plain.num_steps() + 1);
        assert_eq!(
            a.steps[0].sends.len() + a.steps[1].sends.len(),
            plain.steps[0].sends.len()
        );
        // Step 0: roots hand the pieces without a shortcut (sent by their root once) to their
        // package partner over the 4-link package link; step 1: the other roots' first hops.
        let sent_by_root = |c: usize| {
            a.steps
                .iter()
                .flat_map(|s| &s.sends)
                .filter(|s| s.chunk == c && s.src == c / 6)
                .count()
        };
        let caps = index.capacities.as_ref().unwrap();
        for s in &a.steps[0].sends {
            assert_eq!(s.src, s.chunk / 6);
            assert_eq!(sent_by_root(s.chunk), 1, "chunk {}", s.chunk);
            assert_eq!(caps.links[index.link_of[&(s.src, s.dst)]], 4);
        }
        for s in &a.steps[1].sends {
            assert_eq!(s.src, s.chunk / 6);
            assert_eq!(sent_by_root(s.chunk), 2, "chunk {}", s.chunk);
        }
        // Step 0 alone in group 2 (the reduce-scatter's final hops), the 15 steps after it in
        // two stages, the later ones (the reduce-scatter's first) in group 0.
        let mut groups = vec![2];
        groups.extend([1; 8]);
        groups.extend([0; 7]);
        assert_eq!(a.step_groups.as_ref(), Some(&groups));
        assert!(a.name.ends_with("-g3"), "{}", a.name);
        // Reversed, it is a reduce-scatter that passes the checker.
        let rs = Collective::new(Kind::ReduceScatter, t.ranks, 0, 6).unwrap();
        let reversed = a.without_dead_sends().reversed(rs, true);
        check(&reversed, &t.reversed()).unwrap();
        // Not for an allgather.
        assert_eq!(
            shortcut_rings(&t, &index, (8, 0), optimum, false, far())
                .unwrap()
                .len(),
            1
        );
    }

    #[test]
    fn rail_nodes_are_identical_switchless_nodes_joined_by_rails() {
        let t = load("mi250-16x2").unwrap();
        let (nodes, node) = rail_nodes(&t, &t.index()).expect("two mi250-16 nodes");
        assert_eq!(nodes.len(), 2);
        assert_eq!(nodes[1], (16..32).collect::<Vec<_>>());
        let single = load("mi250-16").unwrap();
        assert_eq!(node.links.len(), single.links.len());
        for l in &single.links {
            assert_eq!(
                node.link(l.src, l.dst).map(|k| k.bandwidth),
                Some(l.bandwidth)
            );
        }
        // NVSwitch nodes (switch constraints inside), one node, equal links: none.
        for spec in ["dgx-a100x2", "mi250-16", "torus-2d:4x4"] {
            let t = load(spec).unwrap();
            assert!(rail_nodes(&t, &t.index()).is_none(), "{spec}");
        }
    }

    #[test]
    fn rail_rings_bring_each_remote_piece_in_once() {
        let t = load("mi250-16x2").unwrap();
        let index = t.index();
        let (nodes, node) = rail_nodes(&t, &index).unwrap();
        let found = rail_shortcut_rings(
            &t,
            &index,
            (&nodes, &node),
            &limits(Some(8)),
            (1e9, true),
            |_| 2.0,
        )
        .unwrap();
        assert_eq!(
            found.len(),
            1,
            "one wave: 6 pieces fit `max_pieces`, 12 do not"
        );
        let a = found.into_iter().next().unwrap();
        check(&a, &t).unwrap();
        assert_eq!(a.chunks(), 6, "{}", a.name);
        // Two rounds of the node's 14 ring steps, and the last hops in a group of their own.
        assert_eq!(a.num_steps(), 2 * 14 + 1);
        let mut load = vec![0u32; t.links.len()];
        for s in a.steps.iter().flat_map(|s| &s.sends) {
            load[index.link_of[&(s.src, s.dst)]] += 1;
        }
        // Across the nodes each rank sends its own 6 pieces to its rail peer, nothing else.
        for r in 0..t.ranks {
            let out: u32 = index.out_links[r]
                .iter()
                .filter(|&&l| t.node_of[t.links[l].dst] != t.node_of[r])
                .map(|&l| load[l])
                .sum();
            assert_eq!(out, 6, "rank {r}");
            assert_eq!(load[index.link_of[&(r, (r + 16) % 32)]], 6);
        }
        // Within a node, the node's rings twice: 28 pieces on each single link between
        // packages (8 → 0), every piece but the package's own four.
        assert_eq!(load[index.link_of[&(8, 0)]], 28);
        assert_eq!(load[index.link_of[&(24, 16)]], 28);
    }

    #[test]
    fn rail_rings_in_waves_fit_one_slice_and_reduce_the_nic_first() {
        let t = load("mi250-16x2").unwrap();
        let index = t.index();
        let (nodes, node) = rail_nodes(&t, &index).unwrap();
        // 1 GiB over 32 ranks and c pieces, in slices of 2 MiB: 16/c slices per piece.
        let slices = |c: usize| 16.0 / c as f64;
        assert_eq!(wave_counts(6, 32, slices), vec![1, 3]);
        assert_eq!(wave_counts(6, 17, slices), vec![1]);
        assert_eq!(wave_counts(6, 8, slices), vec![1]);
        // One slice per piece already: one wave.
        assert_eq!(wave_counts(6, 32, |_| 0.5), vec![1]);
        let found = rail_shortcut_rings(
            &t,
            &index,
            (&nodes, &node),
            &limits(None),
            (1e9, true),
            slices,
        )
        .unwrap();
        let a = found
            .iter()
            .find(|a| a.chunks() == 18)
            .expect("three waves");
        check(a, &t).unwrap();
        // Own round and remote round, each in three waves of 14 ring steps; the last hops.
        assert_eq!(a.num_steps(), 2 * 3 * 14 + 1);
        let mut load = vec![0u32; t.links.len()];
        for s in a.steps.iter().flat_map(|s| &s.sends) {
            load[index.link_of[&(s.src, s.dst)]] += 1;
        }
        // The same loads as one wave, three times: 18 pieces over each rail, 84 on a single
        // link between packages.
        assert_eq!(load[index.link_of[&(0, 16)]], 18);
        assert_eq!(load[index.link_of[&(8, 0)]], 84);
        for (i, step) in a.steps.iter().enumerate() {
            let rail: Vec<_> = step
                .sends
                .iter()
                .filter(|s| t.node_of[s.src] != t.node_of[s.dst])
                .collect();
            // Wave w's rail sends in the last step of its own sub-round, after every other
            // send of those pieces by their root (the ring's first hop, the shortcut).
            let expected = [13, 27, 41].contains(&i);
            assert_eq!(!rail.is_empty(), expected, "step {i}");
            for s in rail {
                let wave = s.chunk % 18 / 6;
                assert_eq!(i, 14 * wave + 13, "step {i}");
                let root_sends_later = a.steps[i + 1..]
                    .iter()
                    .flat_map(|x| &x.sends)
                    .any(|x| x.chunk == s.chunk && x.src == s.src);
                assert!(!root_sends_later, "step {i}: {s:?}");
            }
        }
        // The last hops by sub-round: every send of a wave-0 own piece before any later one.
        let last = &a.steps[a.num_steps() - 1].sends;
        let sub = |s: &Send| {
            let remote = t.node_of[s.chunk / 18] != t.node_of[s.src];
            usize::from(remote) * 3 + s.chunk % 18 / 6
        };
        assert!(last.windows(2).all(|w| sub(&w[0]) <= sub(&w[1])));
    }

    #[test]
    fn relayed_rings_take_remote_pieces_in_over_several_nics() {
        assert_eq!(relayed_drops(5, 4), vec![0, 0, 1, 1, 3]);
        assert_eq!(relayed_drops(3, 1), vec![0, 0, 1]);
        assert_eq!(relayed_drops(2, 4), vec![3, 3]);
        let t = load("mi250-16x2").unwrap();
        let index = t.index();
        let (nodes, node) = rail_nodes(&t, &index).unwrap();
        let net = crate::flow::FlowNetwork::new(&t).unwrap();
        let roots: Vec<usize> = (0..t.ranks).collect();
        let optimum = crate::flow::allgather_rate(&net, &roots).unwrap().as_f64();
        let slices = |c: usize| 16.0 / c as f64;
        let with = |for_dual| {
            let found = rail_shortcut_rings(
                &t,
                &index,
                (&nodes, &node),
                &limits(None),
                (optimum, for_dual),
                slices,
            );
            let found = found.unwrap().into_iter();
            found
                .filter(|a| matches!(a.origin.family, Family::RailShortcutRelay { .. }))
                .partition::<Vec<_>, _>(|a| a.origin.family == RELAYED)
        };
        // A dual gets the retimed relays only (10 and 5 waves), an allgather both kinds.
        let (plain, retimed) = with(true);
        assert!(plain.is_empty(), "no plain relays in a dual");
        let chunks: Vec<usize> = retimed.iter().map(|a| a.chunks()).collect();
        assert_eq!(chunks, vec![60, 30]);
        let (relayed, retimed) = with(false);
        assert!(retimed.iter().all(|a| a.serial_links) && retimed.len() == 2);
        check(&retimed[0], &t).unwrap();
        // The fewest waves (3, an allreduce's pair for the reduce-scatter of 18 pieces) and
        // the fewest within 0.5% of the optimum: 5 (3 and 4 reach 99.15% and 99.45%).
        let chunks: Vec<usize> = relayed.iter().map(|a| a.chunks()).collect();
        assert_eq!(chunks, vec![18, 30]);
        let caps = index.capacities.as_ref().unwrap();
        let a = &relayed[1];
        check(a, &t).unwrap();
        let rate = rate_gbps(a, &index, caps);
        assert!(
            rate >= 0.995 * optimum && rate <= optimum,
            "{rate} of {optimum}"
        );
        let mut load = vec![0u32; t.links.len()];
        for s in a.steps.iter().flat_map(|s| &s.sends) {
            load[index.link_of[&(s.src, s.dst)]] += 1;
        }
        // 5 waves of the rings (28 pieces per wave on a link into a package), less 4 hops
        // each: the pieces of shortcut roots in waves 2 and 3, all of wave 4's.
        assert_eq!(load[index.link_of[&(8, 0)]], 5 * 28 - 4);
        assert_eq!(load[index.link_of[&(24, 16)]], 5 * 28 - 4);
        // GCD 0 is entered over 3 link units (a double link from 4, a single from 8): 4
        // relays per unit beside its rail peer's own 30 pieces.
        assert_eq!(load[index.link_of[&(16, 0)]], 30 + 3 * 4);
        // A relay is a piece of another rank, handed on by the rail peer.
        let relays = a
            .steps
            .iter()
            .flat_map(|s| &s.sends)
            .filter(|s| t.node_of[s.src] != t.node_of[s.dst] && s.chunk / 30 != s.src)
            .count();
        assert_eq!(relays, 2 * 8 * 6 * 4);
    }

    #[test]
    fn equal_links_give_no_candidate() {
        for spec in ["torus-2d:4x4", "ring:8", "fully-connected:6"] {
            let t = load(spec).unwrap();
            let index = t.index();
            assert!(
                shortcut_rings(&t, &index, (8, RETIMED_PIECES), 1e9, true, far())
                    .unwrap()
                    .is_empty(),
                "{spec}"
            );
        }
    }
}
