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
//!
//! An allreduce's addresses are all alike (every rank contributes to each and receives each),
//! so the pair of halves may number them freely: [`in_messages`] numbers them piece-major,
//! each second-phase block k consecutive addresses, and sends every block as one message.
//! That takes a link's transfers from 2(k² − 1) to 4(k − 1), which the runtimes can hold at
//! 32x32 (2046 transfers on a link do not fit their 32 channels of 64 steps).

use super::{Construction, Context};
use crate::algorithm::{Algorithm, Send, Step};
use crate::collective::Kind;
use crate::origin::Family;
use crate::topology::shape::{self, torus_step, Direction};
use crate::topology::Topology;
use crate::trees::schedule::finish;
use anyhow::{bail, Result};
use runtime::limits::MAX_COUNT as MAX_MESSAGE_CHUNKS;

/// Pieces per rank: one per direction of the torus.
pub const PIECES: usize = 4;

/// Per piece: the direction of its first phase and of its second.
const STREAMS: [(Direction, Direction); PIECES] = [
    ((0, 1), (1, 0)),
    ((0, -1), (-1, 0)),
    ((1, 0), (0, 1)),
    ((-1, 0), (0, -1)),
];

/// The bucket allgather of a square 2-D torus, where it replaces NCCL's rings: a ring-like
/// schedule on every link, with 2k − 2 steps against the rings' N − 1 and the optimum
/// rounds per chunk.
pub struct Bucket;

impl Bucket {
    /// The torus side k where the bucket applies to `cx`.
    fn side(cx: &Context) -> Option<usize> {
        let fits = cx.kind == Kind::AllGather && cx.limits.max_chunks >= PIECES;
        fits.then(|| shape::square_torus_side(cx.topology, cx.index))
            .flatten()
    }
}

impl Construction for Bucket {
    fn name(&self) -> &'static str {
        "the torus bucket schedule"
    }

    fn fits(&self, cx: &Context) -> bool {
        Bucket::side(cx).is_some()
    }

    fn build(&self, cx: &Context) -> Result<Vec<Algorithm>> {
        match Bucket::side(cx) {
            Some(k) => Ok(vec![bucket_allgather(cx.topology, k)?]),
            None => Ok(Vec::new()),
        }
    }

    fn makes(&self, family: &Family) -> bool {
        matches!(family, Family::Bucket)
    }

    fn allreduce_pair(&self) -> Option<super::PairLayout> {
        Some(in_messages)
    }
}

/// The bucket allgather of a k×k torus (see the module docs), four pieces per rank.
pub fn bucket_allgather(topology: &Topology, k: usize) -> Result<Algorithm> {
    let n = k * k;
    let back = |d: Direction| (-d.0, -d.1);
    let send = |root: usize, piece: usize, src: usize, d: Direction| Send {
        chunk: root * PIECES + piece,
        src,
        dst: torus_step(k, src, d, 1),
    };
    let mut steps = Vec::with_capacity(2 * (k - 1));
    // Phase 1: step t forwards the piece of the rank t hops back.
    for t in 0..k - 1 {
        let mut sends = Vec::with_capacity(n * PIECES);
        for x in 0..n {
            for (piece, &(first, _)) in STREAMS.iter().enumerate() {
                sends.push(send(torus_step(k, x, back(first), t), piece, x, first));
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
                let owner = torus_step(k, x, back(second), t);
                for i in 0..k {
                    sends.push(send(torus_step(k, owner, back(first), i), piece, x, second));
                }
            }
        }
        steps.push(Step {
            rounds: k as u32,
            reduce: false,
            sends,
        });
    }
    finish(topology, 0, Kind::AllGather, PIECES, Family::Bucket, steps)
}

/// The bucket allreduce `algorithm` (the reversed bucket then the bucket, composed at
/// [`PIECES`] chunks per rank, so address root·PIECES + piece) with its addresses numbered
/// piece-major: piece·n + the root's place in the line its piece takes first (row-major for
/// the pieces that go along rows first, column-major for the others). Every second-phase
/// step then sends over each link one block of k consecutive addresses, aligned on k, which
/// goes as messages of the largest divisor of k the runtimes allow
/// ([`Algorithm::message_chunks`]); the sends of a link are put in address order.
pub fn in_messages(algorithm: &Algorithm) -> Result<Algorithm> {
    let coll = &algorithm.collective;
    let n = coll.ranks;
    let k = (n as f64).sqrt().round() as usize;
    if coll.kind != Kind::AllReduce || coll.chunks_per_rank != PIECES || k * k != n {
        bail!(
            "internal error: {} is not a bucket allreduce of a square torus at {PIECES} pieces per rank",
            algorithm.name
        );
    }
    let address = |a: usize| {
        let (root, piece) = (a / PIECES, a % PIECES);
        let (row, column) = (root / k, root % k);
        let along_rows = STREAMS[piece].0 .0 == 0;
        piece * n
            + if along_rows {
                row * k + column
            } else {
                column * k + row
            }
    };
    let largest_divisor = |m: usize| {
        (1..=m.min(MAX_MESSAGE_CHUNKS))
            .rev()
            .find(|d| m.is_multiple_of(*d))
            .unwrap_or(1)
    };
    let mut renumbered = algorithm.clone();
    let mut counts = Vec::with_capacity(renumbered.steps.len());
    for step in &mut renumbered.steps {
        for send in &mut step.sends {
            send.chunk = address(send.chunk);
        }
        let per_link = step.rounds as usize;
        if per_link > 1 {
            step.sends.sort_by_key(|s| (s.src, s.dst, s.chunk));
        }
        counts.push(largest_divisor(per_link));
    }
    renumbered.message_chunks = Some(counts);
    Ok(renumbered)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::check;
    use crate::collective::Collective;
    use crate::lower::{lower, LowerOptions};
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
            assert_eq!(shape::square_torus_side(&t, &t.index()), side, "{spec}");
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

    #[test]
    fn the_bucket_allreduce_sends_each_block_as_one_message() {
        for k in [3, 4, 6] {
            let n = k * k;
            let t = load(&format!("torus-2d:{k}x{k}")).unwrap();
            let ag = bucket_allgather(&t, k).unwrap();
            let rs_coll = Collective::new(Kind::ReduceScatter, n, 0, PIECES).unwrap();
            let rs = ag.reversed(rs_coll, true);
            let steps = rs.steps.iter().chain(&ag.steps).cloned().collect();
            let coll = Collective::new(Kind::AllReduce, n, 0, PIECES).unwrap();
            let pair = Algorithm::plain("pair", &t.name, coll, steps);
            let a = in_messages(&pair).unwrap();
            check(&a, &t).unwrap_or_else(|e| panic!("{k}x{k}: {e:#}"));
            let phase = |c| vec![1; k - 1].into_iter().chain(vec![c; k - 1]);
            let expected: Vec<usize> = phase(k).rev().chain(phase(k)).collect();
            assert_eq!(a.message_chunks.as_ref().unwrap(), &expected, "{k}x{k}");
            // One transfer per link and step: 4(k − 1) per link, against 2(k² − 1) sends.
            let program = lower(&a, &LowerOptions::default()).unwrap();
            let mut per_link = std::collections::HashMap::new();
            for gpu in &program.gpus {
                for tb in &gpu.threadblocks {
                    let sent = tb.steps.iter().filter(|s| s.op.sends()).count();
                    if let Some(peer) = tb.send {
                        *per_link.entry((gpu.rank, peer)).or_insert(0) += sent;
                    }
                }
            }
            assert_eq!(per_link.len(), 4 * n, "{k}x{k}");
            assert!(
                per_link.values().all(|&m| m == 4 * (k - 1)),
                "{k}x{k}: {per_link:?}"
            );
        }
    }

    #[test]
    fn only_a_bucket_allreduce_is_renumbered() {
        let t = load("torus-2d:4x4").unwrap();
        let ag = bucket_allgather(&t, 4).unwrap();
        let err = in_messages(&ag).unwrap_err().to_string();
        assert!(err.contains("not a bucket allreduce"), "{err}");
    }
}
