//! What is still missing: for every chunk, the ranks that need it and, per such rank, the
//! hop distance from the nearest rank that holds (or is already receiving) the chunk. A
//! compact CSR layout (4 + 2 bytes per needing rank), so a 1024-rank alltoall (about a
//! million chunks with one needing rank each) takes a few MB.

use crate::collective::Collective;
use anyhow::{bail, Result};

/// Hop distances as a dense matrix of `u16` (`UNREACHABLE` where there is no path).
pub struct Distances {
    n: usize,
    d: Vec<u16>,
}

/// Marks a pair of ranks with no path.
pub const UNREACHABLE: u16 = u16::MAX;

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

    /// Hops from `u` to `v`.
    #[inline]
    pub fn get(&self, u: usize, v: usize) -> u16 {
        self.d[u * self.n + v]
    }
}

/// The needing ranks of every chunk with their current distances (see the module docs).
#[derive(Clone)]
pub struct Demand {
    /// `start[c]..start[c + 1]` are chunk c's entries.
    start: Vec<u32>,
    /// The needing rank of each entry.
    rank: Vec<u32>,
    /// Hops from the nearest holder (0: satisfied).
    best: Vec<u16>,
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
            let mut post = chunk.post.clone();
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
            start,
            rank,
            best,
            unsatisfied,
        })
    }

    /// Total hop distance still to cover (a lower bound on the sends left).
    pub fn total_distance(&self) -> u64 {
        self.best.iter().map(|&b| b as u64).sum()
    }

    fn range(&self, c: usize) -> std::ops::Range<usize> {
        self.start[c] as usize..self.start[c + 1] as usize
    }

    /// The priority of sending chunk `c` from `u` to `v`: the farthest (from `u`) needing
    /// rank that `v` gets strictly closer to than every current holder, or `None` when `v`
    /// brings the chunk closer to nobody.
    #[inline]
    pub fn priority(&self, c: usize, u: usize, v: usize, dist: &Distances) -> Option<u16> {
        let mut p = None;
        for e in self.range(c) {
            let w = self.rank[e] as usize;
            if dist.get(v, w) < self.best[e] {
                let d = dist.get(u, w);
                if p.is_none_or(|q| d > q) {
                    p = Some(d);
                }
            }
        }
        p
    }

    /// Records that `v` receives chunk `c`.
    #[inline]
    pub fn arrive(&mut self, c: usize, v: usize, dist: &Distances) {
        for e in self.range(c) {
            let w = self.rank[e] as usize;
            let d = dist.get(v, w);
            if d < self.best[e] {
                if d == 0 {
                    self.unsatisfied -= 1;
                }
                self.best[e] = d;
            }
        }
    }
}
