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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::greedy::demand::Distances;

    /// A line 0 -> 1 -> 2 of two links (no switch constraints, capacity 1).
    fn line<'a>(out_links: &'a [Vec<usize>], governing: &'a [Vec<usize>]) -> Fabric<'a> {
        Fabric {
            ranks: 3,
            src: vec![0, 1],
            dst: vec![1, 2],
            out_links,
            governing,
            link_cap: &[1, 1],
            switch_cap: &[],
            delay: vec![1, 1],
            dist: Distances::from_matrix(3, vec![0; 9]),
            fifo: 0,
        }
    }

    #[test]
    fn a_relay_adds_the_alphas_of_its_links() {
        let (out, gov) = (vec![vec![0], vec![1], vec![]], vec![vec![], vec![]]);
        let fabric = line(&out, &gov);
        // Chunk 0 goes 0 -> 1 -> 2; chunk 1 only 0 -> 1.
        let steps = vec![vec![(0, 0), (1, 0)], vec![(0, 1)]];
        let t = latency_us(&fabric, &[0.7, 2.6], &steps);
        assert!((t - 3.3).abs() < 1e-9, "{t}");
        // Sent in the same step it arrives: the forward still waits for the chunk.
        let t = latency_us(&fabric, &[0.7, 2.6], &[vec![(0, 0), (0, 1)]]);
        assert!((t - 3.3).abs() < 1e-9, "{t}");
    }

    #[test]
    fn a_link_holds_at_most_the_fifo_depth_in_flight() {
        let (out, gov) = (vec![vec![0], vec![1], vec![]], vec![vec![], vec![]]);
        let fabric = line(&out, &gov);
        // Three chunks over link 0 (alpha 1): the third leaves when the first is taken.
        let steps = vec![vec![(0, 0), (1, 0), (2, 0)]];
        let t = latency_us(&fabric, &[1.0, 1.0], &steps);
        assert_eq!(DEFAULT_FIFO_DEPTH, 2);
        assert!((t - 2.0).abs() < 1e-9, "{t}");
    }
}
