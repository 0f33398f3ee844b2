//! Per-link latency (alpha) as whole epochs of the time-expanded fabric, and the
//! delay-weighted distances the greedy run routes and prioritises by.
//!
//! An epoch is one round: a unit chunk crossing a capacity-1 link. How long that takes
//! depends on the message size, so no one epoch fits every size; the delay model takes a
//! quarter of the smallest positive link alpha ([`EPOCHS_PER_ALPHA`]): with NVLink's 0.7
//! µs, 0.175 µs, which a 25 GB/s link needs for a 4.4 KB chunk (the chunk of a 64-256 KB
//! allgather on 16-64 ranks, the middle of the sizes the greedy engine serves). A send on
//! link `l` in epoch `t` may be forwarded by its receiver from epoch `t + delay[l]`,
//! `delay[l] = alpha_l / epoch` rounded (at least 1, at most [`MAX_DELAY`]): NVLink or xGMI
//! (0.7 µs) 4, a NIC (2.6 µs) 15. `results/greedy.md` measures 1, 2, 3, 4 and 8 epochs per
//! smallest alpha: finer epochs win at 1 KB and 64 KB, coarser ones at 1 MB. Where every link
//! has the same alpha every delay is the same and the hop model (every delay 1) says it all.

use super::demand::{Distances, UNREACHABLE};
use rayon::prelude::*;

/// Epochs in the smallest positive link alpha.
pub const EPOCHS_PER_ALPHA: f64 = 4.0;

/// The largest delay of a link, in epochs (16 times the smallest alpha): keeps distances
/// within `u16` on 1024 ranks (1023 hops × 64) and the ring of pending arrivals short.
pub const MAX_DELAY: u16 = 64;

/// Each link's delay in epochs and the epoch's length.
#[derive(Debug, Clone, PartialEq)]
pub struct Delays {
    /// Length of one epoch in µs (the smallest positive alpha over [`EPOCHS_PER_ALPHA`]; 0
    /// when no link has an alpha).
    pub epoch_us: f64,
    /// Epochs from a send on each link until its receiver may forward the chunk (>= 1).
    pub link: Vec<u16>,
}

impl Delays {
    /// The delays of links with latencies `alphas` (µs, non-negative as the topology
    /// checks guarantee).
    pub fn from_alphas(alphas: &[f64]) -> Delays {
        let smallest = alphas
            .iter()
            .copied()
            .filter(|&a| a > 0.0 && a.is_finite())
            .fold(f64::INFINITY, f64::min);
        let epoch_us = smallest / EPOCHS_PER_ALPHA;
        if !epoch_us.is_finite() {
            return Delays {
                epoch_us: 0.0,
                link: vec![1; alphas.len()],
            };
        }
        let link = alphas
            .iter()
            .map(|&a| {
                let epochs = if a.is_finite() { a / epoch_us } else { 1.0 };
                epochs.round().clamp(1.0, MAX_DELAY as f64) as u16
            })
            .collect();
        Delays { epoch_us, link }
    }

    /// Whether every link has the same delay (then the hop model says it all).
    pub fn is_uniform(&self) -> bool {
        self.link.windows(2).all(|w| w[0] == w[1])
    }

    /// The largest delay (1 on an empty fabric).
    pub fn max(&self) -> u16 {
        self.link.iter().copied().max().unwrap_or(1)
    }

    /// Shortest-path distances in epochs between all ranks over links `src[l] -> dst[l]`
    /// weighted by these delays: Dial's algorithm (a bucket queue, as delays are small
    /// integers) from every source, in parallel; linear in the links per source, as the
    /// breadth-first search of hop distances.
    pub fn distances(&self, ranks: usize, src: &[usize], dst: &[usize]) -> Distances {
        let mut out: Vec<Vec<(usize, u16)>> = vec![Vec::new(); ranks];
        for (l, (&u, &v)) in src.iter().zip(dst).enumerate() {
            out[u].push((v, self.link[l]));
        }
        let buckets = self.max() as usize + 1;
        let mut d = vec![UNREACHABLE; ranks * ranks];
        d.par_chunks_mut(ranks.max(1))
            .enumerate()
            .for_each(|(s, row)| dial(&out, s, buckets, row));
        Distances::from_matrix(ranks, d)
    }
}

/// Fills `row` with the distances from `s` (`UNREACHABLE` where there is no path; a
/// distance that would reach it saturates one below).
fn dial(out: &[Vec<(usize, u16)>], s: usize, buckets: usize, row: &mut [u16]) {
    // Bucket `k % buckets` holds the ranks tentatively at distance k; every distance in the
    // queue lies within `buckets - 1` of the smallest, so the ring never mixes two of them.
    let mut ring: Vec<Vec<usize>> = vec![Vec::new(); buckets];
    row[s] = 0;
    ring[0].push(s);
    let mut queued = 1usize;
    let mut k = 0usize;
    while queued > 0 {
        let slot = k % buckets;
        while let Some(u) = ring[slot].pop() {
            queued -= 1;
            if row[u] as usize != k {
                continue; // a stale entry: u was reached sooner
            }
            for &(v, w) in &out[u] {
                let dv = (k + w as usize).min(UNREACHABLE as usize - 1);
                if dv < row[v] as usize {
                    row[v] = dv as u16;
                    ring[dv % buckets].push(v);
                    queued += 1;
                }
            }
        }
        k += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_round_alpha_over_a_quarter_of_the_smallest() {
        let d = Delays::from_alphas(&[0.7, 2.6, 0.7, 1.0]);
        assert_eq!(d.epoch_us, 0.175);
        assert_eq!(d.link, vec![4, 15, 4, 6]);
        assert!(!d.is_uniform());
        // No latency at all, or the same everywhere: nothing beyond the hop model.
        assert!(Delays::from_alphas(&[0.0, 0.0]).is_uniform());
        assert!(Delays::from_alphas(&[2.6, 2.6, 2.6]).is_uniform());
        assert!(Delays::from_alphas(&[0.7, 0.71]).is_uniform());
        // Zero-alpha links count one epoch; huge ones are capped.
        assert_eq!(
            Delays::from_alphas(&[0.0, 1.0, 1e9]).link,
            vec![1, 4, MAX_DELAY]
        );
    }

    #[test]
    fn weighted_distances_take_the_cheaper_path() {
        // 0 -> 1 direct with delay 4; 0 -> 2 -> 1 with delay 1 + 1; 1 -> 0 delay 1.
        let delays = Delays {
            epoch_us: 1.0,
            link: vec![4, 1, 1, 1],
        };
        let (src, dst) = (vec![0, 0, 2, 1], vec![1, 2, 1, 0]);
        let d = delays.distances(3, &src, &dst);
        assert_eq!(d.get(0, 1), 2);
        assert_eq!(d.get(0, 2), 1);
        assert_eq!(d.get(1, 0), 1);
        assert_eq!(d.get(1, 2), 2);
        assert_eq!(d.get(2, 0), 2);
        // A one-way link: the way back is unreachable.
        let d = Delays {
            epoch_us: 1.0,
            link: vec![3],
        }
        .distances(2, &[0], &[1]);
        assert_eq!((d.get(0, 1), d.get(1, 0)), (3, UNREACHABLE));
    }

    #[test]
    fn unit_delays_give_hop_distances() {
        let t = crate::topology::load("mi250-16x2").unwrap();
        let src: Vec<usize> = t.links.iter().map(|l| l.src).collect();
        let dst: Vec<usize> = t.links.iter().map(|l| l.dst).collect();
        let unit = Delays {
            epoch_us: 1.0,
            link: vec![1; src.len()],
        };
        let hops = Distances::new(&t.distances());
        let d = unit.distances(t.ranks, &src, &dst);
        for u in 0..t.ranks {
            for v in 0..t.ranks {
                assert_eq!(d.get(u, v), hops.get(u, v), "{u} -> {v}");
            }
        }
    }
}
