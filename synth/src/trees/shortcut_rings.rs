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

use super::schedule::{finish, fit_groups, plain_step, rounds_needed, with_groups};
use crate::algorithm::{Algorithm, Send, Step};
use crate::collective::Kind;
use crate::engine::Limits;
use crate::topology::{Capacities, Topology, TopologyIndex};
use anyhow::Result;
use good_lp::solvers::highs::HighsProblem;
use good_lp::{constraint, highs, variable, Constraint, Expression, ProblemVariables};
use std::time::Instant;

/// Largest fabric tried (ranks).
pub const MAX_RANKS: usize = 32;

/// Most Hamiltonian cycles collected.
const MAX_CYCLES: usize = 512;

/// Most search-tree nodes the cycle enumeration visits.
const MAX_EXPANSIONS: usize = 1 << 20;

/// Branch-and-bound nodes per selection.
const MAX_NODES: i32 = 2_000;

/// A directed Hamiltonian cycle, whether the root at each position takes its shortcut, and
/// the pieces the ring puts on each link (by link id) for one piece per root.
#[derive(Debug, Clone)]
struct Ring {
    order: Vec<usize>,
    shortcut: Vec<bool>,
    load: Vec<u32>,
}

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
        "srings",
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
/// ([`super::retime`]): `mi250-16` at 1 GB, 10 waves (60 pieces), 99.4% of the optimum
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
    if waves == 0 || super::reference_slices(topology, Kind::AllGather, chunks) > 1.0 {
        return Ok(None);
    }
    let piece_bytes = super::reference_piece_bytes(topology, Kind::AllGather, chunks);
    let a = schedule(
        topology,
        index,
        &[node.to_vec()],
        rings,
        waves,
        &[],
        "srings",
    )?;
    let retimed = super::retime::retimed(&a, topology, index, piece_bytes, "srings-lst")?;
    Ok(retimed.map(|(a, _)| a))
}

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
fn for_reversal(
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
        .map(|sends| plain_step(topology, index, caps, sends))
        .collect();
    // Reversed: the first half of the ring's steps in group 0, the second half in group 1,
    // the final hops in group 2.
    let rest = steps.len() - 1;
    let wanted: Vec<usize> = std::iter::once(2)
        .chain(std::iter::repeat_n(1, rest.div_ceil(2)))
        .chain(std::iter::repeat_n(0, rest / 2))
        .collect();
    let laid_out = finish(topology, 0, Kind::AllGather, chunks, "srings", steps)?;
    let groups = fit_groups(&laid_out, wanted);
    Ok(Some(with_groups(laid_out, groups)))
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
    let m = topology.nodes();
    // Rounds are counted in the fabric's integer capacities.
    if m < 2 || index.capacities.is_none() {
        return None;
    }
    let mut nodes: Vec<Vec<usize>> = vec![Vec::new(); m];
    for (r, &a) in topology.node_of.iter().enumerate() {
        nodes[a].push(r);
    }
    let g = nodes[0].len();
    if nodes.iter().any(|n| n.len() != g) {
        return None;
    }
    let mut local = vec![0; topology.ranks];
    for node in &nodes {
        for (i, &r) in node.iter().enumerate() {
            local[r] = i;
        }
    }
    let within = |l: &crate::topology::Link| topology.node_of[l.src] == topology.node_of[l.dst];
    // Node 0's links; every node must have the same ones, ungoverned by switch constraints.
    let links: Vec<crate::topology::Link> = topology
        .links
        .iter()
        .filter(|l| within(l) && topology.node_of[l.src] == 0)
        .map(|l| crate::topology::Link {
            src: local[l.src],
            dst: local[l.dst],
            ..l.clone()
        })
        .collect();
    let same = topology
        .links
        .iter()
        .enumerate()
        .filter(|(_, l)| within(l))
        .all(|(id, l)| {
            index.governing[id].is_empty()
                && links.iter().any(|k| {
                    (k.src, k.dst) == (local[l.src], local[l.dst]) && k.bandwidth == l.bandwidth
                })
        });
    let count = topology.links.iter().filter(|l| within(l)).count();
    let rails = (0..m).all(|a| {
        (0..g).all(|i| {
            index
                .link_of
                .contains_key(&(nodes[a][i], nodes[(a + 1) % m][i]))
        })
    });
    if !same || count != links.len() * m || !rails {
        return None;
    }
    let node = Topology {
        name: format!("{}-node", topology.name),
        ranks: g,
        node_of: vec![0; g],
        links,
        switches: Vec::new(),
    };
    let node_index = node.index();
    applies(&node, &node_index).then_some((nodes, node))
}

/// The rail shortcut-ring allgathers of a cluster from [`rail_nodes`]: every node runs the
/// shortcut rings of its own fabric (at most `--max-chunks` rings, at the node's exact
/// optimum), first over its own ranks' pieces, then over each other node's, which come in
/// over the rails (rank i of node a passes the pieces it has to rank i of node a + 1, one
/// node per ring round, as in [`super::rails`]). One candidate per wave count of
/// [`wave_counts`] (`slices(c)`: runtime slices per piece at the reference size with `c`
/// pieces per rank; at most `--max-chunks` pieces where given, else
/// [`super::rails::DEFAULT_PIECES`]). Empty when the node's rings do not reach its optimum.
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
        super::rails::DEFAULT_PIECES
    };
    let counts = wave_counts(rings.len(), max_pieces, &slices);
    let mut found = counts
        .iter()
        .map(|&waves| schedule(topology, index, nodes, &rings, waves, &[], "rail-srings"))
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

/// The rail shortcut rings with remote pieces relayed over several NICs: some remote rounds
/// end a package early ([`relayed_drops`]), and the GCD that package's ring hop led to gets
/// the piece over its own NIC from its rail peer, which holds it by then (its node ran the
/// same hop a round before). Each package then takes fewer pieces over its xGMI links and
/// more over its NICs, as the exact optimum does (`mi250-16x2`: the rings alone carry 28
/// ranks' data into a package over xGMI, rate 332.1 GB/s busbw; the optimum, 343.1, brings
/// 1.45 ranks' data in over each NIC). For each wave count in `waves`, the drop count of the
/// highest rate on the busiest link (NICs included); candidates: the fewest waves (an
/// allreduce pairs it with the reduce-scatter of as many pieces), and the fewest whose rate
/// reaches 99.5% of `optimum_gbps` (per root), else the best rate of all. None where no
/// drop raises the rate. For allgathers only: reversed into a reduce-scatter it simulated at
/// 240 GB/s at 1 GB on `mi250-16x2` against the plain waves' 317.
fn relayed(
    topology: &Topology,
    index: &TopologyIndex,
    nodes: &[Vec<usize>],
    rings: &[Ring],
    waves: std::ops::RangeInclusive<usize>,
    optimum_gbps: f64,
) -> Result<Vec<Algorithm>> {
    let fewest = *waves.start();
    // The fewest waves' candidate, and the best of more waves.
    let mut first: Option<(f64, Algorithm)> = None;
    let mut more: Option<(f64, Algorithm)> = None;
    for w in waves {
        let Some((rate, a)) = best_drops(topology, index, nodes, rings, w, RELAYED)? else {
            continue;
        };
        let slot = if w == fewest { &mut first } else { &mut more };
        if slot.as_ref().is_none_or(|(r, _)| rate > *r) {
            *slot = Some((rate, a));
        }
        if rate >= 0.995 * optimum_gbps {
            break;
        }
    }
    let floor = first.as_ref().map_or(0.0, |(r, _)| *r);
    let more = more.filter(|(r, _)| *r > floor);
    Ok(first.into_iter().chain(more).map(|(_, a)| a).collect())
}

/// The relayed schedule of `waves` waves with the drop count ([`relayed_drops`]) of the
/// highest per-root rate on the busiest link (NICs included), and that rate; `None` where
/// no drop raises the rate.
fn best_drops(
    topology: &Topology,
    index: &TopologyIndex,
    nodes: &[Vec<usize>],
    rings: &[Ring],
    waves: usize,
    label: &str,
) -> Result<Option<(f64, Algorithm)>> {
    let caps = index.capacities.as_ref().expect("checked by rail_nodes");
    let plain = schedule(topology, index, nodes, rings, waves, &[], label)?;
    let mut best = (rate_gbps(&plain, index, caps), None);
    for s in 1..=2 * waves {
        let drops = relayed_drops(waves, s);
        let a = schedule(topology, index, nodes, rings, waves, &drops, label)?;
        let rate = rate_gbps(&a, index, caps);
        if rate <= best.0 * (1.0 + 1e-9) {
            break;
        }
        best = (rate, Some(a));
    }
    Ok(match best {
        (rate, Some(a)) => Some((rate, a)),
        _ => None,
    })
}

/// The relayed rail shortcut rings ([`relayed`]) in `waves` waves, each link's sends
/// reordered by list scheduling at the reference size ([`super::retime`]): the waves'
/// step order makes links idle at their seams (3 waves: 10–47 µs, 5 waves up to 78 µs on
/// `mi250-16x2`), while the list schedule keeps the links busy and, with finer pieces,
/// shortens the drain. `None` where no drop raises the rate or the schedule does not
/// qualify.
fn relayed_retimed(
    topology: &Topology,
    index: &TopologyIndex,
    nodes: &[Vec<usize>],
    rings: &[Ring],
    waves: usize,
) -> Result<Option<Algorithm>> {
    let Some((_, a)) = best_drops(topology, index, nodes, rings, waves, RELAYED)? else {
        return Ok(None);
    };
    let label = format!("{RELAYED}-lst");
    let piece_bytes = super::reference_piece_bytes(topology, Kind::AllGather, a.chunks());
    let retimed = super::retime::retimed(&a, topology, index, piece_bytes, &label)?;
    Ok(retimed.map(|(a, _)| a))
}

/// Label of [`relayed`]'s candidates.
pub const RELAYED: &str = "rail-srelay";

/// In [`schedule`]'s `drops`: the pieces of roots that take their shortcut.
const SHORTCUT: u8 = 1;
/// In [`schedule`]'s `drops`: the pieces of roots that do not take their shortcut.
const NO_SHORTCUT: u8 = 2;

/// The hop of a ring path (root at position `p` of `order`, `hops` hops, node ranks `node`)
/// that enters the path's last package: its last hop over a link narrower than the widest
/// link it takes. `None` when all its links are equally wide.
fn last_narrow_hop(
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

/// The `drops` of [`schedule`] that end `s` pieces early per link into a package and per
/// wave count `waves`: both kinds in the last wave first (its hops are the drain), then the
/// pieces of shortcut roots in the waves before it, latest first, then the others.
fn relayed_drops(waves: usize, s: usize) -> Vec<u8> {
    let mut drops = vec![0u8; waves];
    let order = std::iter::once((waves - 1, SHORTCUT))
        .chain(std::iter::once((waves - 1, NO_SHORTCUT)))
        .chain((0..waves - 1).rev().map(|w| (w, SHORTCUT)))
        .chain((0..waves - 1).rev().map(|w| (w, NO_SHORTCUT)));
    for (w, kind) in order.take(s) {
        drops[w] |= kind;
    }
    drops
}

/// Per-root rate (GB/s) of `algorithm` on its busiest link: pieces per root times the
/// capacity unit over the busiest link's pieces per capacity unit.
fn rate_gbps(algorithm: &Algorithm, index: &TopologyIndex, caps: &Capacities) -> f64 {
    let sends = algorithm.steps.iter().flat_map(|s| &s.sends);
    let load = crate::load::Loads::of(index, caps.switches.len(), sends).links;
    let busiest = load
        .iter()
        .zip(&caps.links)
        .map(|(&l, &c)| l as f64 / f64::from(c))
        .fold(0.0, f64::max);
    algorithm.chunks() as f64 * caps.unit_gbps / busiest
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

/// The fewest shortcut rings of `topology` (with repetition, at most `max_chunks`) that
/// reach `optimum_gbps`, when one of them takes a shortcut (see [`shortcut_rings`]).
fn choose_rings(
    topology: &Topology,
    index: &TopologyIndex,
    max_chunks: usize,
    optimum_gbps: f64,
    deadline: Instant,
) -> Result<Option<Vec<Ring>>> {
    let caps = index.capacities.as_ref().expect("checked by applies");
    let rings: Vec<Ring> = hamiltonian_cycles(topology, index, deadline)
        .into_iter()
        .map(|order| ring(order, topology, index, caps))
        .collect();
    if !rings.iter().any(|r| r.shortcut.contains(&true)) {
        return Ok(None);
    }
    // The fewest rings at the exact optimum; none short of it (see the module docs).
    let per_unit = caps.unit_gbps / optimum_gbps;
    let Some(counts) = fewest_at(&rings, &caps.links, per_unit, max_chunks.max(1))? else {
        return Ok(None);
    };
    let chosen: Vec<Ring> = counts
        .iter()
        .enumerate()
        .flat_map(|(k, &c)| std::iter::repeat_n(rings[k].clone(), c))
        .collect();
    Ok(chosen
        .iter()
        .any(|r| r.shortcut.contains(&true))
        .then_some(chosen))
}

/// Directed Hamiltonian cycles starting at rank 0 (each directed cycle once), depth-first
/// over the links in id order, at most [`MAX_CYCLES`] of them and [`MAX_EXPANSIONS`] search
/// nodes, stopping at the deadline.
fn hamiltonian_cycles(
    topology: &Topology,
    index: &TopologyIndex,
    deadline: Instant,
) -> Vec<Vec<usize>> {
    struct Search<'a> {
        topology: &'a Topology,
        index: &'a TopologyIndex,
        deadline: Instant,
        path: Vec<usize>,
        used: Vec<bool>,
        cycles: Vec<Vec<usize>>,
        expansions: usize,
    }
    impl Search<'_> {
        /// False once a bound stops the search.
        fn extend(&mut self) -> bool {
            self.expansions += 1;
            if self.cycles.len() >= MAX_CYCLES
                || self.expansions > MAX_EXPANSIONS
                || (self.expansions.is_multiple_of(4096) && Instant::now() >= self.deadline)
            {
                return false;
            }
            let n = self.topology.ranks;
            let last = *self.path.last().expect("the path starts at rank 0");
            if self.path.len() == n {
                if self.index.link_of.contains_key(&(last, self.path[0])) {
                    self.cycles.push(self.path.clone());
                }
                return true;
            }
            for &l in &self.index.out_links[last] {
                let next = self.topology.links[l].dst;
                if self.used[next] {
                    continue;
                }
                self.used[next] = true;
                self.path.push(next);
                let go_on = self.extend();
                self.path.pop();
                self.used[next] = false;
                if !go_on {
                    return false;
                }
            }
            true
        }
    }
    let mut used = vec![false; topology.ranks];
    used[0] = true;
    let mut search = Search {
        topology,
        index,
        deadline,
        path: vec![0],
        used,
        cycles: Vec::new(),
        expansions: 0,
    };
    search.extend();
    search.cycles
}

/// The ring of `order` with its shortcuts and per-link load (see [`Ring`]).
fn ring(order: Vec<usize>, topology: &Topology, index: &TopologyIndex, caps: &Capacities) -> Ring {
    let n = order.len();
    let link = |u: usize, v: usize| index.link_of[&(u, v)];
    let mut load = vec![0u32; topology.links.len()];
    let mut shortcut = vec![false; n];
    for k in 0..n {
        let (before, prev) = (order[(k + n - 2) % n], order[(k + n - 1) % n]);
        let back = index.link_of.get(&(order[k], prev)).copied();
        let take = back.is_some_and(|b| caps.links[b] > caps.links[link(before, prev)]);
        shortcut[k] = take;
        let hops = if take { n - 2 } else { n - 1 };
        for h in 0..hops {
            load[link(order[(k + h) % n], order[(k + h + 1) % n])] += 1;
        }
        if let Some(b) = back.filter(|_| take) {
            load[b] += 1;
        }
    }
    Ring {
        order,
        shortcut,
        load,
    }
}

/// The fewest rings (counts per ring of `rings`, with repetition, at most `max_chunks` in
/// all) whose busiest link carries at most `per_unit` pieces per capacity unit and ring: the
/// exact optimum's load when `per_unit` is the capacity unit over the optimum rate per root.
/// `None` when there are none or the solver finds none within its node limit.
fn fewest_at(
    rings: &[Ring],
    caps: &[u32],
    per_unit: f64,
    max_chunks: usize,
) -> Result<Option<Vec<usize>>> {
    let mut vars = ProblemVariables::new();
    let counts: Vec<_> = rings
        .iter()
        .map(|_| vars.add(variable().integer().min(0).max(max_chunks as f64)))
        .collect();
    let total: Expression = counts.iter().sum();
    let mut constraints = vec![
        constraint!(total.clone() >= 1.0),
        constraint!(total.clone() <= max_chunks as f64),
    ];
    for (l, &cap) in caps.iter().enumerate() {
        if rings.iter().all(|r| r.load[l] == 0) {
            continue;
        }
        // Σ rings' load ≤ cap · per_unit · Σ rings, with a hair of slack for rounding.
        let allowed = cap as f64 * per_unit * (1.0 + 1e-9);
        let excess: Expression = rings
            .iter()
            .zip(&counts)
            .map(|(r, &c)| (r.load[l] as f64 - allowed) * c)
            .sum();
        constraints.push(constraint!(excess <= 0.0));
    }
    let model = vars.minimise(total).using(highs);
    Ok(solve(model, constraints, rings.len())?.filter(|c| c.iter().sum::<usize>() >= 1))
}

/// Solves `model` with `constraints` ([`super::small_ip`], [`MAX_NODES`]) and reads the
/// first `rings` columns as ring counts.
fn solve(
    model: HighsProblem,
    constraints: Vec<Constraint>,
    rings: usize,
) -> Result<Option<Vec<usize>>> {
    let columns = super::small_ip::solve(model, constraints, MAX_NODES)?;
    Ok(columns.map(|c| {
        c[..rings]
            .iter()
            .map(|v| v.round().max(0.0) as usize)
            .collect()
    }))
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
fn schedule(
    topology: &Topology,
    index: &TopologyIndex,
    nodes: &[Vec<usize>],
    rings: &[Ring],
    waves: usize,
    drops: &[u8],
    label: &str,
) -> Result<Algorithm> {
    let caps = index.capacities.as_ref().expect("checked by applies");
    let (m, n) = (nodes.len(), nodes[0].len());
    let chunks = rings.len() * waves;
    // Sub-round u = round · waves + wave: steps u·d .. u·d + d − 1 carry the hops 0..d − 1
    // of that wave's pieces of the ranks `round` nodes back; the last step (index
    // m·waves·d) the last hops of every sub-round.
    let d = n - 2;
    let subs = m * waves;
    let mut steps: Vec<Vec<Send>> = vec![Vec::new(); subs * d + 1];
    let mut last: Vec<(usize, Send)> = Vec::new();
    let mut shortcuts = Vec::new();
    let mut relays = Vec::new();
    for (a, node) in nodes.iter().enumerate() {
        for round in 0..m {
            let from = &nodes[(a + m - round) % m];
            for wave in 0..waves {
                let sub = round * waves + wave;
                for (k, ring) in rings.iter().enumerate() {
                    let piece = wave * rings.len() + k;
                    let order = &ring.order;
                    for p in 0..n {
                        let chunk = from[order[p]] * chunks + piece;
                        let hops = if ring.shortcut[p] { n - 2 } else { n - 1 };
                        let kind = if ring.shortcut[p] {
                            SHORTCUT
                        } else {
                            NO_SHORTCUT
                        };
                        let ends_early =
                            round >= 1 && drops.get(wave).is_some_and(|&bits| bits & kind != 0);
                        let dropped = ends_early
                            .then(|| last_narrow_hop(index, caps, node, order, p, hops))
                            .flatten();
                        if let Some(h) = dropped {
                            // Rank w of the node before had the piece at the same hop of
                            // the round before; it hands it on over its rail.
                            let w = order[(p + h + 1) % n];
                            let prev = &nodes[(a + m - 1) % m];
                            let received = ((round - 1) * waves + wave) * d + h;
                            let send = Send {
                                chunk,
                                src: prev[w],
                                dst: node[w],
                            };
                            relays.push((received + 1, send));
                        }
                        for h in (0..hops).filter(|&h| Some(h) != dropped) {
                            let send = Send {
                                chunk,
                                src: node[order[(p + h) % n]],
                                dst: node[order[(p + h + 1) % n]],
                            };
                            if h < d {
                                steps[sub * d + h].push(send);
                            } else {
                                last.push((sub, send));
                            }
                        }
                        if ring.shortcut[p] {
                            let send = Send {
                                chunk,
                                src: node[order[p]],
                                dst: node[order[(p + n - 1) % n]],
                            };
                            shortcuts.push((sub, send));
                        }
                    }
                }
            }
            // The rail: the pieces of the rank `round` nodes back go on to the next node.
            // In waves, each wave's in the last step of its sub-round, after the ring's and
            // the shortcut's sends of the same pieces: the NIC's threadblock sends them as
            // soon as it can whatever the step, and reversed into a reduce-scatter the NIC's
            // partial sum is then the first reduction into its slot (the lowering chains
            // them in step order), so the receiver takes the NIC's messages as they arrive
            // instead of after its rings' reductions, which come last in the dual (18
            // pieces on `mi250-16x2` at 1 GB: 317.1 against 256.9 GB/s in the first step).
            // In one wave, several slices per piece, the first step (the dual at 6 pieces:
            // 292.7 against 265.7).
            if round + 1 < m {
                let next = &nodes[(a + 1) % m];
                for wave in 0..waves {
                    let sub = round * waves + wave;
                    let at = if waves == 1 { sub * d } else { sub * d + d - 1 };
                    for i in 0..n {
                        for k in 0..rings.len() {
                            steps[at].push(Send {
                                chunk: from[i] * chunks + wave * rings.len() + k,
                                src: node[i],
                                dst: next[i],
                            });
                        }
                    }
                }
            }
        }
    }
    for (at, send) in relays {
        steps[at].push(send);
    }
    // Stable: within a sub-round the last hops keep their order.
    last.sort_by_key(|&(sub, _)| sub);
    steps[subs * d].extend(last.into_iter().map(|(_, send)| send));
    for (sub, send) in shortcuts {
        let window = if d >= 4 { 2..d - 1 } else { 0..d };
        let cost = |step: &Vec<Send>| {
            let before = rounds_needed(topology, index, caps, step);
            let mut with = step.clone();
            with.push(send);
            let after = rounds_needed(topology, index, caps, &with);
            let on_link = step
                .iter()
                .filter(|s| (s.src, s.dst) == (send.src, send.dst))
                .count();
            (after - before, on_link)
        };
        let at = window
            .map(|i| sub * d + i)
            .min_by_key(|&i| (cost(&steps[i]), i))
            .expect("the window is not empty");
        steps[at].push(send);
    }
    let trailing = !steps[subs * d].is_empty();
    if !trailing {
        steps.pop();
    }
    let steps: Vec<Step> = steps
        .into_iter()
        .map(|sends| plain_step(topology, index, caps, sends))
        .collect();
    let algorithm = finish(topology, 0, Kind::AllGather, chunks, label, steps)?;
    if !trailing {
        return Ok(algorithm);
    }
    let mut wanted = vec![0; subs * d];
    wanted.push(1);
    let groups = fit_groups(&algorithm, wanted);
    Ok(with_groups(algorithm, groups))
}

#[cfg(test)]
mod tests {
    use super::*;
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
                .filter(|a| a.name.contains(RELAYED))
                .partition::<Vec<_>, _>(|a| !a.name.contains("-lst-"))
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
