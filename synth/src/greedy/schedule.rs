//! One greedy run over the time-expanded fabric: step by step (one round each), every link
//! carries at most its capacity and every switch constraint at most its capacity. Each link
//! keeps a heap of the chunks its source holds that would bring some needing rank closer;
//! within a step the sends are chosen globally by priority (the farthest needing rank
//! first, ties broken by a seeded hash), so the busiest paths start first. Candidates are
//! added when a chunk arrives (event-driven) and re-evaluated lazily when they reach the top
//! of their heap, so no step scans all chunks × links.

use super::demand::{Demand, Distances};
use crate::collective::Collective;
use std::collections::BinaryHeap;
use std::time::Instant;

/// The fabric as the greedy run sees it (shared by all restarts).
pub struct Fabric<'a> {
    /// Number of ranks.
    pub ranks: usize,
    /// Source rank of each link.
    pub src: Vec<usize>,
    /// Destination rank of each link.
    pub dst: Vec<usize>,
    /// Links leaving each rank.
    pub out_links: &'a [Vec<usize>],
    /// Switch constraints governing each link.
    pub governing: &'a [Vec<usize>],
    /// Chunks per step of each link.
    pub link_cap: &'a [u32],
    /// Chunks per step of each switch constraint.
    pub switch_cap: &'a [u32],
    /// Hop distances.
    pub dist: Distances,
}

/// A finished run: per step, the sends as (chunk index, link id) in the order chosen.
pub struct Schedule {
    /// The steps (each one round).
    pub steps: Vec<Vec<(u32, u32)>>,
}

/// Why a run stopped without finishing.
#[derive(Debug, PartialEq, Eq)]
pub enum Stop {
    /// More steps than allowed.
    StepCap,
    /// The deadline passed.
    Deadline,
    /// A step made no send although demand is left (cannot happen on a connected fabric).
    Stalled,
}

/// SplitMix64: the seeded tie-break of (seed, restart, chunk, link).
#[inline]
pub fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// A heap entry: priority (16 bits), tie-break (16 bits), chunk (32 bits).
#[inline]
fn key(priority: u16, tie: u16, chunk: u32) -> u64 {
    ((priority as u64) << 48) | ((tie as u64) << 32) | chunk as u64
}

#[inline]
fn priority_of(key: u64) -> u16 {
    (key >> 48) as u16
}

/// Runs one greedy schedule. `salt` seeds the tie-breaks (0: none, so ties go to the higher
/// chunk index); chunk c starts on the ranks of `coll.chunks[c].pre`.
pub fn run(
    fabric: &Fabric,
    mut demand: Demand,
    coll: &Collective,
    salt: Option<u64>,
    max_steps: usize,
    deadline: Instant,
) -> Result<Schedule, Stop> {
    let links = fabric.src.len();
    let tie = |c: u32, l: usize| -> u16 {
        salt.map_or(0, |s| {
            (mix(s ^ mix(((c as u64) << 32) | l as u64)) >> 48) as u16
        })
    };
    let mut heaps: Vec<BinaryHeap<u64>> = vec![BinaryHeap::new(); links];
    let offer = |heaps: &mut Vec<BinaryHeap<u64>>, demand: &Demand, c: u32, u: usize| {
        for &l in &fabric.out_links[u] {
            if let Some(p) = demand.priority(c as usize, u, fabric.dst[l], &fabric.dist) {
                heaps[l].push(key(p, tie(c, l), c));
            }
        }
    };
    for (c, chunk) in coll.chunks.iter().enumerate() {
        for &u in &chunk.pre {
            offer(&mut heaps, &demand, c as u32, u);
        }
    }
    let mut steps: Vec<Vec<(u32, u32)>> = Vec::new();
    let mut link_left = vec![0u32; links];
    let mut switch_left = fabric.switch_cap.to_vec();
    let mut touched_switches: Vec<usize> = Vec::new();
    let mut arrivals: Vec<(u32, usize)> = Vec::new();
    while demand.unsatisfied > 0 {
        if steps.len() >= max_steps {
            return Err(Stop::StepCap);
        }
        if Instant::now() >= deadline {
            return Err(Stop::Deadline);
        }
        // The links with candidates, by their best candidate (then link id, for determinism).
        let mut order: BinaryHeap<(u64, std::cmp::Reverse<usize>)> = BinaryHeap::new();
        for l in 0..links {
            link_left[l] = fabric.link_cap[l];
            if let Some(&top) = heaps[l].peek() {
                order.push((top, std::cmp::Reverse(l)));
            }
        }
        let mut sends: Vec<(u32, u32)> = Vec::new();
        while let Some((_, std::cmp::Reverse(l))) = order.pop() {
            let Some(top) = heaps[l].pop() else { continue };
            let c = top as u32;
            let (u, v) = (fabric.src[l], fabric.dst[l]);
            match demand.priority(c as usize, u, v, &fabric.dist) {
                None => {}
                Some(p) if p < priority_of(top) => heaps[l].push(key(p, tie(c, l), c)),
                Some(_) => {
                    if fabric.governing[l].iter().any(|&j| switch_left[j] == 0) {
                        // Every send of this link needs the exhausted constraint: the link
                        // waits for the next step.
                        heaps[l].push(top);
                        continue;
                    }
                    for &j in &fabric.governing[l] {
                        if switch_left[j] == fabric.switch_cap[j] {
                            touched_switches.push(j);
                        }
                        switch_left[j] -= 1;
                    }
                    link_left[l] -= 1;
                    demand.arrive(c as usize, v, &fabric.dist);
                    sends.push((c, l as u32));
                    arrivals.push((c, v));
                }
            }
            if link_left[l] > 0 {
                if let Some(&next) = heaps[l].peek() {
                    order.push((next, std::cmp::Reverse(l)));
                }
            }
        }
        if sends.is_empty() {
            return Err(Stop::Stalled);
        }
        for j in touched_switches.drain(..) {
            switch_left[j] = fabric.switch_cap[j];
        }
        // Chunks received in this step can be forwarded from the next one.
        for (c, v) in arrivals.drain(..) {
            offer(&mut heaps, &demand, c, v);
        }
        steps.push(sends);
    }
    Ok(Schedule { steps })
}
