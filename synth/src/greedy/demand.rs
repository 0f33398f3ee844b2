//! What is still missing: for every chunk, the ranks that need it and, per such rank, the
//! distance (in hops, or in epochs over delay-weighted links, see [`super::delays`]) from
//! the nearest rank that holds (or is already receiving) the chunk, and the epoch by which
//! that copy can get there. A compact CSR layout (4 + 2 + 4 bytes per needing rank), so a
//! 1024-rank alltoall (about a million chunks with one needing rank each) takes about 10 MB.

use crate::collective::Collective;
use anyhow::{bail, Result};

/// Distances (hops or epochs) as a dense matrix of `u16` (`UNREACHABLE` where there is no
/// path): 2 MB on 1024 ranks.
pub struct Distances {
    n: usize,
    d: Vec<u16>,
}

/// Marks a pair of ranks with no path.
pub const UNREACHABLE: u16 = u16::MAX;

/// A send being weighed: from `u` to `v` over a link of `delay` epochs, leaving in `epoch`.
#[derive(Debug, Clone, Copy)]
pub struct Hop {
    /// Sending rank.
    pub u: usize,
    /// Receiving rank.
    pub v: usize,
    /// The link's delay in epochs (>= 1).
    pub delay: u16,
    /// The epoch the send would leave in.
    pub epoch: u32,
}

impl Distances {
    /// Packs `index.distances`.
    pub fn new(distances: &[Vec<Option<usize>>]) -> Distances {
        let n = distances.len();
        let mut d = vec![UNREACHABLE; n * n];
        for (u, row) in distances.iter().enumerate() {
            for (v, x) in row.iter().enumerate() {
                if let Some(x) = x {
                    d[u * n + v] = (*x).min(UNREACHABLE as usize - 1) as u16;
                }
            }
        }
        Distances { n, d }
    }

    /// The `n` x `n` matrix `d`, row by row (source major).
    pub fn from_matrix(n: usize, d: Vec<u16>) -> Distances {
        debug_assert_eq!(d.len(), n * n);
        Distances { n, d }
    }

    /// Distance from `u` to `v`.
    #[inline]
    pub fn get(&self, u: usize, v: usize) -> u16 {
        self.d[u * self.n + v]
    }
}

/// The needing ranks of every chunk with their current distances (see the module docs).
#[derive(Clone)]
pub struct Demand {
    /// `start[c]..start[c + 1]` are chunk c's entries; the unsatisfied ones come first,
    /// `start[c]..open[c]` (an entry is moved behind them when it is satisfied, so the
    /// priority of a send looks at the ranks that still need the chunk only).
    start: Vec<u32>,
    open: Vec<u32>,
    /// The needing rank of each entry.
    rank: Vec<u32>,
    /// Distance from the nearest holder or receiver (0: satisfied).
    best: Vec<u16>,
    /// The epoch by which the chunk reaches the needing rank from the first of the ranks at
    /// distance `best` that can forward it (a starting holder from epoch 0), along a
    /// shortest path without waiting.
    eta: Vec<u32>,
    /// Entries with `best > 0`.
    pub unsatisfied: usize,
}

impl Demand {
    /// The demand of `coll` at the start; errors when a needing rank cannot be reached.
    pub fn new(coll: &Collective, dist: &Distances, topology: &str) -> Result<Demand> {
        let mut start = Vec::with_capacity(coll.chunks.len() + 1);
        let mut rank = Vec::new();
        let mut best = Vec::new();
        let mut unsatisfied = 0;
        start.push(0u32);
        for chunk in &coll.chunks {
            let mut post = chunk.post.to_vec();
            post.sort_unstable();
            post.dedup();
            for &w in &post {
                let d = chunk
                    .pre
                    .iter()
                    .map(|&h| dist.get(h, w))
                    .min()
                    .unwrap_or(UNREACHABLE);
                if d == UNREACHABLE {
                    bail!(
                        "the collective is impossible on `{topology}`: chunk {} cannot reach rank {w}",
                        chunk.address
                    );
                }
                if d > 0 {
                    rank.push(w as u32);
                    best.push(d);
                    unsatisfied += 1;
                }
            }
            if rank.len() > u32::MAX as usize {
                bail!("the collective is too large for the greedy engine (over 2^32 demands)");
            }
            start.push(rank.len() as u32);
        }
        Ok(Demand {
            open: start[1..].to_vec(),
            start,
            eta: best.iter().map(|&d| d as u32).collect(),
            rank,
            best,
            unsatisfied,
        })
    }

    /// Total distance still to cover (in hops: a lower bound on the sends left).
    pub fn total_distance(&self) -> u64 {
        self.best.iter().map(|&b| b as u64).sum()
    }

    fn range(&self, c: usize) -> std::ops::Range<usize> {
        self.start[c] as usize..self.open[c] as usize
    }

    /// The priority of sending chunk `c` over `hop`, or `None` when the send helps nobody.
    ///
    /// The send helps a needing rank `w` when the receiver is strictly closer to `w` than
    /// every rank that holds or is receiving the chunk, and the chunk gets to `w` through it
    /// sooner than through the closest of those (so a slow link does not duplicate what a
    /// nearer copy brings as soon): strictly before that copy while it is in flight, no
    /// later than it could from now once it has landed. A closest holder's own send along a
    /// shortest path always helps, so a run never stalls. The priority is the largest
    /// over the helped ranks of `d(u, w)` less the detour `delay + d(v, w) - d(u, w)`: the
    /// farthest rank first, on shortest paths before detours. With every delay 1 a send
    /// that helps is always on a shortest path and nothing in flight outlives the epoch, so
    /// this is the hop model's farthest-first rule.
    #[inline]
    pub fn priority(&self, c: usize, hop: Hop, dist: &Distances) -> Option<u16> {
        let mut p = None;
        for e in self.range(c) {
            let w = self.rank[e] as usize;
            let dv = dist.get(hop.v, w);
            let best = self.best[e] as u32;
            let arrival = hop.epoch + hop.delay as u32 + dv as u32;
            // Sooner than the closest copy in flight, or (once it landed) no later than it
            // can still get there from now.
            let soon = arrival < self.eta[e] || arrival <= hop.epoch + best;
            if (dv as u32) < best && soon {
                let du = dist.get(hop.u, w) as u32;
                let detour = (hop.delay as u32 + dv as u32).saturating_sub(du);
                let q = du.saturating_sub(detour) as u16;
                if p.is_none_or(|p| q > p) {
                    p = Some(q);
                }
            }
        }
        p
    }

    /// Records that `v` receives chunk `c` and may forward it from epoch `at`.
    #[inline]
    pub fn arrive(&mut self, c: usize, v: usize, at: u32, dist: &Distances) {
        let mut e = self.start[c] as usize;
        while e < self.open[c] as usize {
            let w = self.rank[e] as usize;
            let d = dist.get(v, w);
            if d < self.best[e] {
                self.best[e] = d;
                self.eta[e] = at.saturating_add(d as u32);
                if d == 0 {
                    self.unsatisfied -= 1;
                    // Behind the open entries; the one swapped in is looked at next.
                    let last = self.open[c] as usize - 1;
                    self.rank.swap(e, last);
                    self.best.swap(e, last);
                    self.eta.swap(e, last);
                    self.open[c] -= 1;
                    continue;
                }
            } else if d == self.best[e] && d > 0 {
                self.eta[e] = self.eta[e].min(at.saturating_add(d as u32));
            }
            e += 1;
        }
    }
}
