//! The latency of a laid-out schedule under per-link alpha: what its small messages cost
//! when every transfer takes no time beside its link's alpha (the latency end the greedy
//! engine serves). It replays the sends in step order as the lowered program runs them:
//! each link carries its sends in that order, a send leaves once its chunk is on the sender
//! and its link holds fewer than the FIFO depth messages the receiver has not yet taken
//! (received in order), and it arrives its link's alpha later. On the fabrics measured in
//! `results/greedy.md` it agrees with the simulator at 1 KB for one chunk per rank.

use super::schedule::Fabric;
use runtime::verify::DEFAULT_FIFO_DEPTH;
use rustc_hash::FxHashMap;

/// The time in µs until the last of `steps` (sends as (chunk index, link), in the order the
/// lowering gives them) arrives, with link `l` costing `alpha[l]` µs. A sender that did not
/// receive the chunk in an earlier step held it from the start.
pub fn latency_us<'s>(
    fabric: &Fabric,
    alpha: &[f64],
    steps: impl IntoIterator<Item = &'s Vec<(u32, u32)>>,
) -> f64 {
    let links = fabric.src.len();
    let depth = DEFAULT_FIFO_DEPTH.max(1);
    // When chunk c is usable on rank v (absent: a starting holder, from time 0).
    let mut ready: FxHashMap<u64, f64> = FxHashMap::default();
    let at = |c: u32, v: usize| ((c as u64) << 32) | v as u64;
    // Per link: when its last send left, and when the receiver took its last `depth`
    // messages (a ring; a send waits for the oldest of them once `depth` are out).
    let mut left = vec![0.0f64; links];
    let mut taken = vec![0.0f64; links * depth];
    let mut sent = vec![0usize; links];
    let mut end = 0.0f64;
    for sends in steps {
        for &(c, l) in sends {
            let l = l as usize;
            let (u, v) = (fabric.src[l], fabric.dst[l]);
            let mut start = ready.get(&at(c, u)).copied().unwrap_or(0.0).max(left[l]);
            let k = sent[l];
            if k >= depth {
                start = start.max(taken[l * depth + k % depth]);
            }
            left[l] = start;
            let arrival = start + alpha[l];
            let last = if k > 0 {
                taken[l * depth + (k - 1) % depth]
            } else {
                0.0
            };
            let take = arrival.max(last);
            taken[l * depth + k % depth] = take;
            sent[l] = k + 1;
            ready
                .entry(at(c, v))
                .and_modify(|t| *t = t.min(take))
                .or_insert(take);
            end = end.max(arrival);
        }
    }
    end
}
