//! Allreduce shapes beside reduce-scatter + allgather: the one-shot (every rank receives
//! every other rank's whole input and reduces it locally) and the two-shot over all pairs
//! (each rank reduces its slice from every rank, then sends it to every rank), offered where
//! every ordered pair of ranks has a link (NVSwitch boxes, fully connected fabrics). On
//! other fabrics an unreduced input cannot be relayed: an algorithm holds one value per
//! rank and address, so a rank between two others would forward its own partial sum
//! (which is what the tree and ring shapes do). NCCL's trees are reduced up and broadcast
//! down where every tree edge is a link ([`nccl_trees`]). Reduce + broadcast over trees is
//! [`crate::synthesize`]'s composition of a reduce and a broadcast.

use crate::algorithm::{Algorithm, Send, Step};
use crate::collective::{Collective, Kind};
use crate::load::rounds_needed;
use crate::origin::Family;
use crate::topology::Topology;
use anyhow::Result;

/// Whether every ordered pair of distinct ranks is joined by a link.
pub fn all_pairs_linked(topology: &Topology) -> bool {
    let index = topology.index();
    let n = topology.ranks;
    (0..n).all(|a| (0..n).all(|b| a == b || index.link_of.contains_key(&(a, b))))
}

/// The one-shot allreduce at `chunks` pieces per rank's slice: one reducing step in which
/// every rank sends its whole input to every other rank, each peer's as one message.
/// `None` where some pair of ranks has no link.
pub fn one_shot(topology: &Topology, chunks: usize) -> Result<Option<Algorithm>> {
    if !all_pairs_linked(topology) {
        return Ok(None);
    }
    let n = topology.ranks;
    let addresses = n * chunks;
    let sends = pairs(n)
        .flat_map(|(src, dst)| (0..addresses).map(move |chunk| Send { chunk, src, dst }))
        .collect();
    let steps = vec![reducing_step(topology, sends, true)?];
    let mut algorithm = made(Family::OneShot, topology, chunks, steps)?;
    algorithm.message_chunks = Some(vec![addresses.min(runtime::limits::MAX_COUNT)]);
    Ok(Some(algorithm))
}

/// The two-shot allreduce over all pairs at `chunks` pieces per rank's slice: every rank
/// sends each owner its slice to reduce, then each owner sends the sum to every rank (a
/// slice as one message). `None` where some pair of ranks has no link.
pub fn two_shot(topology: &Topology, chunks: usize) -> Result<Option<Algorithm>> {
    if !all_pairs_linked(topology) {
        return Ok(None);
    }
    let n = topology.ranks;
    let slice = |owner: usize| owner * chunks..(owner + 1) * chunks;
    let reduce = pairs(n)
        .flat_map(|(src, owner)| {
            slice(owner).map(move |chunk| Send {
                chunk,
                src,
                dst: owner,
            })
        })
        .collect();
    let gather = pairs(n)
        .flat_map(|(owner, dst)| {
            slice(owner).map(move |chunk| Send {
                chunk,
                src: owner,
                dst,
            })
        })
        .collect();
    let steps = vec![
        reducing_step(topology, reduce, true)?,
        reducing_step(topology, gather, false)?,
    ];
    let mut algorithm = made(Family::TwoShot, topology, chunks, steps)?;
    let count = chunks.min(runtime::limits::MAX_COUNT);
    algorithm.message_chunks = Some(vec![count, count]);
    Ok(Some(algorithm))
}

/// NCCL's trees as an allreduce at `chunks` pieces per rank's slice: the trees NCCL's tree
/// algorithm runs over the fabric ([`crate::baseline::tree_parents`]: one per channel, a
/// chain in a node and, across nodes, the double binary tree over the nodes, alternately
/// heap-ordered and reversed so that the leaves of one are inner nodes of the other), each
/// carrying an equal share of the addresses (address `a` on tree `a mod trees`): reduced up
/// its tree, one depth per step (the deepest ranks first), then broadcast down, so the
/// lowering's per-slot dependencies pipeline the pieces through both. `None` where a tree
/// edge is not a link: an algorithm holds one value per rank and address, so a relay would
/// add its own input to what it forwards.
pub fn nccl_trees(topology: &Topology, chunks: usize) -> Result<Option<Algorithm>> {
    let trees = crate::baseline::tree_parents(topology, None)?;
    let index = topology.index();
    let linked = |a: usize, b: usize| index.link_of.contains_key(&(a, b));
    let tree_linked = |t: &[Option<usize>]| {
        (t.iter().enumerate()).all(|(r, p)| p.is_none_or(|p| linked(r, p) && linked(p, r)))
    };
    if trees.is_empty() || !trees.iter().all(|t| tree_linked(t)) {
        return Ok(None);
    }
    let depths: Vec<Vec<usize>> = trees.iter().map(|t| depths(t)).collect();
    // (`tree_parents` gives trees: every rank's parents lead to a root.)
    let deepest = depths.iter().flatten().copied().max().unwrap_or(0);
    if deepest == 0 {
        return Ok(None);
    }
    let addresses = topology.ranks * chunks;
    let count = trees.len();
    let on = move |t: usize| (0..addresses).filter(move |a| a % count == t);
    let mut steps = Vec::new();
    // Up: at step k the ranks at depth `deepest - k` add their partial sums into their parents'.
    for k in 0..deepest {
        let mut sends = Vec::new();
        for (t, parent) in trees.iter().enumerate() {
            for (r, p) in parent.iter().enumerate() {
                if let (Some(p), true) = (p, depths[t][r] == deepest - k) {
                    sends.extend(on(t).map(|chunk| Send {
                        chunk,
                        src: r,
                        dst: *p,
                    }));
                }
            }
        }
        steps.push(reducing_step(topology, sends, true)?);
    }
    // Down: at step k the ranks at depth k send the sum to their children.
    for k in 0..deepest {
        let mut sends = Vec::new();
        for (t, parent) in trees.iter().enumerate() {
            for (r, p) in parent.iter().enumerate() {
                if let (Some(p), true) = (p, depths[t][r] == k + 1) {
                    sends.extend(on(t).map(|chunk| Send {
                        chunk,
                        src: *p,
                        dst: r,
                    }));
                }
            }
        }
        steps.push(reducing_step(topology, sends, false)?);
    }
    steps.retain(|s| !s.sends.is_empty());
    Ok(Some(made(Family::NcclTrees, topology, chunks, steps)?))
}

/// The depth of every rank in the tree `parent` (the root at 0).
fn depths(parent: &[Option<usize>]) -> Vec<usize> {
    (0..parent.len())
        .map(|mut r| {
            let mut d = 0;
            while let Some(p) = parent[r] {
                r = p;
                d += 1;
            }
            d
        })
        .collect()
}

/// Both shapes at one piece per slice where they apply, each checked.
pub fn candidates(topology: &Topology) -> Result<Vec<Algorithm>> {
    let mut found = Vec::new();
    for shape in [one_shot(topology, 1)?, two_shot(topology, 1)?]
        .into_iter()
        .flatten()
    {
        crate::check::check(&shape, topology)?;
        found.push(shape);
    }
    Ok(found)
}

/// Ordered pairs of distinct ranks.
fn pairs(n: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..n).flat_map(move |a| (0..n).filter(move |&b| b != a).map(move |b| (a, b)))
}

/// A step of `sends` with the rounds its busiest link or switch constraint needs.
fn reducing_step(topology: &Topology, sends: Vec<Send>, reduce: bool) -> Result<Step> {
    let caps = topology.capacities()?;
    Ok(Step {
        rounds: rounds_needed(&topology.index(), &caps, &sends),
        reduce,
        sends,
    })
}

/// The allreduce of `family` made of `steps` at `chunks` pieces per slice.
fn made(family: Family, topology: &Topology, chunks: usize, steps: Vec<Step>) -> Result<Algorithm> {
    let collective = Collective::new(Kind::AllReduce, topology.ranks, 0, chunks)?;
    Ok(Algorithm::made(
        family,
        topology.name.clone(),
        collective,
        steps,
    ))
}
