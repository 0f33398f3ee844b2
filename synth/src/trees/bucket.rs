//! The dimension-rotated bucket allgather of a square 2-D torus: every rank's data in four
//! pieces, one per direction. Piece 0 goes around its row in the + direction, then every
//! rank forwards the row's pieces 0 around its column in the + direction; piece 1 does the
//! same in the − directions; pieces 2 and 3 take the column first, then the row. In the first
//! phase (k − 1 steps) each directed link carries one piece per step, in the second (k − 1
//! steps) one row or column block of k pieces per step, so every link is busy with the same
//! load in every step of a phase: (k² − 1)/4 rounds per piece, the exact optimum (a rank
//! receives N − 1 chunks over 4 links).
//!
//! The tree packing reaches the same rate as fractional trees, but its schedules have steps of
//! unequal load, which the runtime's slice-by-slice replay turns into pipeline fill (97–98% of
//! the optimum on 8x8 to 32x32). Here each link forwards in step t what it received in step
//! t − 1, piece by piece in arrival order, like NCCL's ring, so the links never wait but for
//! one link latency per step (2k − 2 latencies in all, against N − 1 for a ring).
//!
//! The fabric must be a k×k torus of row-major ranks (rank r·k + c linked to its four
//! neighbours and nothing else), k ≥ 3, with equal links and no switch constraints, as
//! `torus-2d:KxK` builds it. Reduce-scatter and allreduce get the reversed schedule through
//! [`crate::synthesize`]'s duality, as for the other tree algorithms.

use super::schedule::finish;
use crate::algorithm::{Algorithm, Send, Step};
use crate::collective::Kind;
use crate::topology::{Topology, TopologyIndex};
use anyhow::Result;

/// Pieces per rank: one per direction of the torus.
pub const PIECES: usize = 4;

/// A direction on the torus: (rows, columns) moved per hop.
type Direction = (isize, isize);

/// Per piece: the direction of its first phase and of its second.
const STREAMS: [(Direction, Direction); PIECES] = [
    ((0, 1), (1, 0)),
    ((0, -1), (-1, 0)),
    ((1, 0), (0, 1)),
    ((-1, 0), (0, -1)),
];

/// The side k when `topology` is a square k×k torus in row-major order with k ≥ 3, equal
/// links and no switch constraints (see the module docs); `None` otherwise.
pub fn torus_side(topology: &Topology, index: &TopologyIndex) -> Option<usize> {
    let n = topology.ranks;
    let k = (n as f64).sqrt().round() as usize;
    if k < 3 || k * k != n || !topology.switches.is_empty() || topology.links.len() != 4 * n {
        return None;
    }
    let first = topology.links.first()?;
    if topology
        .links
        .iter()
        .any(|l| l.bandwidth != first.bandwidth || l.alpha != first.alpha)
    {
        return None;
    }
    let all_linked = (0..n).all(|x| {
        STREAMS.iter().all(|&(d, _)| {
            [d, (-d.0, -d.1)]
                .iter()
                .all(|&d| index.link_of.contains_key(&(x, step(k, x, d, 1))))
        })
    });
    all_linked.then_some(k)
}

/// The rank `hops` hops from `x` in direction `d` on a k×k torus.
fn step(k: usize, x: usize, d: Direction, hops: usize) -> usize {
    let (r, c) = ((x / k) as isize, (x % k) as isize);
    let (k, h) = (k as isize, hops as isize);
    let r = (r + d.0 * h).rem_euclid(k);
    let c = (c + d.1 * h).rem_euclid(k);
    (r * k + c) as usize
}

/// The bucket allgather of a k×k torus (see the module docs), four pieces per rank.
pub fn bucket_allgather(topology: &Topology, k: usize) -> Result<Algorithm> {
    let n = k * k;
    let back = |d: Direction| (-d.0, -d.1);
    let send = |root: usize, piece: usize, src: usize, d: Direction| Send {
        chunk: root * PIECES + piece,
        src,
        dst: step(k, src, d, 1),
    };
    let mut steps = Vec::with_capacity(2 * (k - 1));
    // Phase 1: step t forwards the piece of the rank t hops back.
    for t in 0..k - 1 {
        let mut sends = Vec::with_capacity(n * PIECES);
        for x in 0..n {
            for (piece, &(first, _)) in STREAMS.iter().enumerate() {
                sends.push(send(step(k, x, back(first), t), piece, x, first));
            }
        }
        steps.push(Step {
            rounds: 1,
            reduce: false,
            sends,
        });
    }
    // Phase 2: step t forwards the first-phase block of the rank t hops back, its pieces in
    // the order they arrived (the block's own rank first, then 1, 2, ... hops back).
    for t in 0..k - 1 {
        let mut sends = Vec::with_capacity(n * PIECES * k);
        for x in 0..n {
            for (piece, &(first, second)) in STREAMS.iter().enumerate() {
                let owner = step(k, x, back(second), t);
                for i in 0..k {
                    sends.push(send(step(k, owner, back(first), i), piece, x, second));
                }
            }
        }
        steps.push(Step {
            rounds: k as u32,
            reduce: false,
            sends,
        });
    }
    finish(topology, 0, Kind::AllGather, PIECES, "bucket", steps)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::check;
    use crate::topology::load;

    #[test]
    fn square_tori_are_recognised_and_nothing_else() {
        for (spec, side) in [
            ("torus-2d:3x3", Some(3)),
            ("torus-2d:8x8", Some(8)),
            ("torus-2d:4x8", None),
            ("torus-2d:2x2", None),
            ("ring:9", None),
            ("fully-connected:16", None),
            ("dgx-a100x2", None),
            ("mi250-16", None),
        ] {
            let t = load(spec).unwrap();
            assert_eq!(torus_side(&t, &t.index()), side, "{spec}");
        }
    }

    #[test]
    fn bucket_passes_the_checker_at_the_optimum_rounds() {
        for k in [3, 4, 5, 8] {
            let t = load(&format!("torus-2d:{k}x{k}")).unwrap();
            let a = bucket_allgather(&t, k).unwrap();
            check(&a, &t).unwrap_or_else(|e| panic!("{k}x{k}: {e:#}"));
            assert_eq!(a.num_steps(), 2 * (k - 1));
            // (k² − 1) rounds for 4 pieces per rank: (N − 1)/4 rounds per chunk, the ingress
            // bound of 4 links per rank.
            assert_eq!(a.rounds() as usize, k * k - 1);
            // Every directed link carries the same load in every step.
            for s in &a.steps {
                let mut load = std::collections::HashMap::new();
                for send in &s.sends {
                    *load.entry((send.src, send.dst)).or_insert(0u32) += 1;
                }
                assert_eq!(load.len(), 4 * k * k);
                assert!(load.values().all(|&l| l == s.rounds));
            }
        }
    }
}
