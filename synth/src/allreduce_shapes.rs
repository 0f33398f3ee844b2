//! Allreduce shapes beside reduce-scatter + allgather: the one-shot (every rank receives
//! every other rank's whole input and reduces it locally) and the two-shot over all pairs
//! (each rank reduces its slice from every rank, then sends it to every rank), offered where
//! every ordered pair of ranks has a link (NVSwitch boxes, fully connected fabrics). On
//! other fabrics an unreduced input cannot be relayed: an algorithm holds one value per
//! rank and address, so a rank between two others would forward its own partial sum
//! (which is what the tree and ring shapes do). Reduce + broadcast over trees is
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
