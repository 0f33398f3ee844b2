//! Slicing chunks for a producer ([`Slicing::Producer`](super::Slicing::Producer)): the
//! simulator runs a few principled slicings, each gated on tile arrival, and keeps the
//! fastest; [`producer_bound`] is what no slicing beats.
//!
//! The candidates, as cuts of a chunk (every piece at most the runtime's slice):
//! * the runtime's own slices (so the result is never slower than the runtime gated on
//!   tile arrival);
//! * one tile per slice;
//! * paced: slice `j` ends at the last tile out by the time the collective, run alone at the
//!   runtime's slices and delayed by the waits so far, reaches its first byte (at least one
//!   tile);
//! * planned: the ends over tile boundaries that minimise the end of a two-parameter model
//!   of the collective (µs per element and per slice, fitted to it run alone at the
//!   runtime's slice and at half of it), by dynamic programming;
//! * the fastest of the last three with the last tile cut into 2 and into 4 (a shorter
//!   drain after the last tile).
//!
//! Work is bounded (two runs alone, at most six with the producer, a k² plan for k tiles),
//! deterministic (the first of equal times wins) and depends on simulated times only, so a
//! renumbered fabric gets the same choice.

use super::engine::{self, Run};
use super::{Producer, ELEMENT_BYTES};
use anyhow::Result;

/// Pieces each further candidate cuts the last tile into.
const LAST_TILE_CUTS: [u64; 2] = [2, 4];

/// The fastest candidate slicing (bytes of each slice of a chunk of `chunk_elems` elements)
/// with its run; `runtime` is the runtime's slicing, whose first slice is the largest.
pub(super) fn fastest(
    layout: &engine::Layout,
    chunk_elems: u64,
    producer: &Producer,
    runtime: Vec<f64>,
) -> Result<(Vec<f64>, Run)> {
    let cap = (runtime[0] as u64 / ELEMENT_BYTES).max(1);
    let tiles = Tiles::new(chunk_elems, producer);
    let alone = engine::run(layout, &runtime, None)?;
    // The collective's cost per slice: alone again at half the runtime's slice.
    let halves = pieces(&[chunk_elems], (cap / 2).max(1));
    let pace = match halves.len().checked_sub(runtime.len()) {
        Some(more) if more > 0 => {
            let finer = engine::run(layout, &halves, None)?.time_us;
            let per_slice = ((finer - alone.time_us) / more as f64).max(0.0);
            let per_elem =
                (alone.time_us - per_slice * runtime.len() as f64).max(0.0) / chunk_elems as f64;
            Some((per_elem, per_slice))
        }
        _ => None,
    };
    let gated = engine::run(layout, &runtime, Some(producer))?;
    let mut runs = Runs {
        tried: vec![(runtime.clone(), gated.time_us)],
        best: (runtime, gated),
    };
    let one = tiles.one_per_slice();
    let t_one = runs.time(layout, producer, pieces(&one, cap))?;
    let mut base = (one, t_one);
    let planned = pace.map(|(per_elem, per_slice)| tiles.planned(per_elem, per_slice, cap));
    for ends in [tiles.paced(&alone.reads, cap), planned]
        .into_iter()
        .flatten()
    {
        let time = runs.time(layout, producer, pieces(&ends, cap))?;
        if time < base.1 {
            base = (ends, time);
        }
    }
    let base = base.0;
    for cuts in LAST_TILE_CUTS {
        runs.time(layout, producer, pieces(&tiles.last_cut(&base, cuts), cap))?;
    }
    Ok(runs.best)
}

/// The candidates run so far and the fastest (the first of equals).
struct Runs {
    tried: Vec<(Vec<f64>, f64)>,
    best: (Vec<f64>, Run),
}

impl Runs {
    /// The time of a run at `slices` with `producer` (run once per distinct slicing).
    fn time(
        &mut self,
        layout: &engine::Layout,
        producer: &Producer,
        slices: Vec<f64>,
    ) -> Result<f64> {
        if let Some((_, time)) = self.tried.iter().find(|(t, _)| *t == slices) {
            return Ok(*time);
        }
        let run = engine::run(layout, &slices, Some(producer))?;
        let time = run.time_us;
        self.tried.push((slices.clone(), time));
        if time < self.best.1.time_us {
            self.best = (slices, run);
        }
        Ok(time)
    }
}

/// A chunk's tile boundaries.
struct Tiles {
    chunk_elems: u64,
    k: usize,
    /// One tile's time (µs).
    tile_us: f64,
}

impl Tiles {
    fn new(chunk_elems: u64, producer: &Producer) -> Tiles {
        let k = producer.tiles.max(1);
        Tiles {
            chunk_elems,
            k,
            tile_us: producer.time_us / k as f64,
        }
    }

    /// The element where tile `t` starts (`k`: the chunk's end).
    fn boundary(&self, t: usize) -> u64 {
        (u128::from(self.chunk_elems) * t as u128 / self.k as u128) as u64
    }

    /// A slice per tile (slice ends, elements).
    fn one_per_slice(&self) -> Vec<u64> {
        (1..=self.k).map(|t| self.boundary(t)).collect()
    }

    /// Slices that end at the last tile out when the collective would reach them: `reads`
    /// are the times the collective alone, at the runtime's slices of `cap` elements,
    /// starts reading each slice's input. `None` where some slice reads no input.
    fn paced(&self, reads: &[f64], cap: u64) -> Option<Vec<u64>> {
        if reads.is_empty() || reads.iter().any(|r| !r.is_finite()) {
            return None;
        }
        // When the collective alone reaches element `x` (linear within a slice).
        let reach = |x: u64| -> f64 {
            let j = (x / cap) as usize;
            if j + 1 >= reads.len() {
                return reads[reads.len() - 1];
            }
            let within = (x - j as u64 * cap) as f64 / cap as f64;
            reads[j] + within * (reads[j + 1] - reads[j])
        };
        let (mut tile, mut at, mut ends) = (0, reads[0], Vec::new());
        while tile < self.k {
            let out = (at / self.tile_us + 1e-9).floor() as usize;
            let next = out.clamp(tile + 1, self.k);
            // It starts once its last tile is out, and then goes at the collective's pace.
            let start = at.max(next as f64 * self.tile_us);
            at = start + reach(self.boundary(next)) - reach(self.boundary(tile));
            ends.push(self.boundary(next));
            tile = next;
        }
        Some(ends)
    }

    /// The slice ends that minimise the end of a collective that, once a slice's last tile
    /// is out, spends `per_elem` µs per element and `per_slice` µs per slice (pieces of at
    /// most `cap` elements), over tile boundaries (dynamic programming; first of equals).
    fn planned(&self, per_elem: f64, per_slice: f64, cap: u64) -> Vec<u64> {
        // Earliest end of the collective over the first `e` tiles, and the slice's start.
        let mut best = vec![(f64::INFINITY, 0usize); self.k + 1];
        best[0].0 = 0.0;
        for e in 1..=self.k {
            let out = e as f64 * self.tile_us;
            for b in 0..e {
                let elems = self.boundary(e) - self.boundary(b);
                let cost = elems as f64 * per_elem + elems.div_ceil(cap) as f64 * per_slice;
                let end = best[b].0.max(out) + cost;
                if end < best[e].0 {
                    best[e] = (end, b);
                }
            }
        }
        let mut ends = vec![self.boundary(self.k)];
        let mut e = self.k;
        while best[e].1 > 0 {
            e = best[e].1;
            ends.push(self.boundary(e));
        }
        ends.reverse();
        ends
    }

    /// `ends` with the last tile cut into `cuts` equal slices (all released with it).
    fn last_cut(&self, ends: &[u64], cuts: u64) -> Vec<u64> {
        let last = self.boundary(self.k - 1);
        let mut cut: Vec<u64> = ends.iter().copied().filter(|&e| e < last).collect();
        cut.push(last);
        let rest = self.chunk_elems - last;
        cut.extend((1..=cuts).map(|i| last + rest * i / cuts));
        cut
    }
}

/// Bytes of each slice for slice `ends` (elements), pieces of at most `cap` elements; empty
/// slices dropped.
fn pieces(ends: &[u64], cap: u64) -> Vec<f64> {
    let mut slices = Vec::new();
    let mut from = 0;
    for &to in ends {
        while from < to {
            let piece = (to - from).min(cap);
            slices.push((piece * ELEMENT_BYTES) as f64);
            from += piece;
        }
    }
    slices
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiles(chunk_elems: u64, k: usize, time_us: f64) -> Tiles {
        Tiles::new(chunk_elems, &Producer { tiles: k, time_us })
    }

    #[test]
    fn pieces_are_capped_and_cover_the_chunk() {
        assert_eq!(pieces(&[3, 3, 10], 4), vec![12.0, 16.0, 12.0]);
    }

    #[test]
    fn a_slow_producer_gets_one_tile_per_slice_and_a_fast_one_growing_slices() {
        // The collective alone reads 4 runtime slices of 4 elements at 0, 10, 20, 30 µs.
        let reads = [0.0, 10.0, 20.0, 30.0];
        let slow = tiles(16, 8, 400.0);
        assert_eq!(slow.paced(&reads, 4), Some(slow.one_per_slice()));
        // Tiles of 2 elements every 1 µs: the first slice is one tile, out at 1 µs; the
        // collective reaches the next (element 2) at 6 µs, when six tiles are out.
        let fast = tiles(16, 8, 8.0);
        assert_eq!(fast.paced(&reads, 4), Some(vec![2, 12, 16]));
        assert_eq!(fast.paced(&[0.0, f64::INFINITY], 4), None);
    }

    #[test]
    fn the_plan_follows_a_slow_producer_and_takes_few_slices_of_a_fast_one() {
        // A slow producer (a tile every 50 µs, the collective 2 µs per tile): a tile per slice.
        let slow = tiles(16, 8, 400.0);
        assert_eq!(slow.planned(1.0, 1.0, 4), slow.one_per_slice());
        // A fast one (a tile every µs) and 10 µs per slice: the fewest slices of 8 elements.
        assert_eq!(tiles(16, 8, 8.0).planned(1.0, 10.0, 8), vec![8, 16]);
    }

    #[test]
    fn the_last_tile_is_cut_finer() {
        let t = tiles(16, 4, 4.0);
        assert_eq!(t.last_cut(&[8, 16], 2), vec![8, 12, 14, 16]);
        assert_eq!(
            t.last_cut(&t.one_per_slice(), 4),
            vec![4, 8, 12, 13, 14, 15, 16]
        );
    }
}
