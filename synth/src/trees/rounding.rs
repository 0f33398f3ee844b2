//! From a fractional tree packing to integer pieces: the trees' weights become numbers of
//! pieces per root (largest remainder, then a deterministic local search over the column
//! pool), and the piece count per root is chosen for the rate or for a pipelined run.

use super::packing::Packing;
use super::schedule::depths;

/// Piece counts per representative root's trees at `chunks` pieces, by largest remainder.
pub(crate) fn piece_counts(packing: &Packing, chunks: usize) -> Vec<Vec<usize>> {
    packing
        .roots
        .iter()
        .map(|r| {
            let exact: Vec<f64> = r.trees.iter().map(|(_, w)| w * chunks as f64).collect();
            let mut counts: Vec<usize> = exact.iter().map(|x| x.floor() as usize).collect();
            let mut left = chunks.saturating_sub(counts.iter().sum());
            let mut order: Vec<usize> = (0..exact.len()).collect();
            order.sort_by(|&a, &b| {
                let fa = exact[a] - exact[a].floor();
                let fb = exact[b] - exact[b].floor();
                fb.total_cmp(&fa).then(a.cmp(&b))
            });
            for &i in order.iter().cycle().take(exact.len() * chunks) {
                if left == 0 {
                    break;
                }
                counts[i] += 1;
                left -= 1;
            }
            counts
        })
        .collect()
}

/// The time (per unit of data per root, in s/GB) that piece counts give: the busiest resource
/// orbit's load over its bandwidth.
pub(crate) fn realized_time(
    packing: &Packing,
    usages: &[Vec<Vec<f64>>],
    bandwidth: &[f64],
    counts: &[Vec<usize>],
    chunks: usize,
) -> f64 {
    let mut load = vec![0.0; bandwidth.len()];
    for (r, root) in packing.roots.iter().enumerate() {
        for (t, _) in root.trees.iter().enumerate() {
            let share = counts[r][t] as f64 / chunks as f64;
            for (o, u) in usages[r][t].iter().enumerate() {
                load[o] += share * u;
            }
        }
    }
    load.iter()
        .zip(bandwidth)
        .map(|(l, b)| l / b)
        .fold(0.0, f64::max)
}

/// Most single-piece moves of the rounding's local search.
pub(crate) const MAX_MOVES: usize = 400;

/// Work of one local search ([`improve_counts`], [`shorten`]), in resource orbits looked at
/// over the moves tried: the search stops there with the counts it has (a fabric of 64 ranks
/// without symmetry has 64 roots and thousands of trees in their pools).
pub(crate) const MOVE_WORK: usize = 400_000_000;

/// Per representative root and tree of its pool, what one unit of it puts on each resource
/// orbit, and the orbits it uses ([`supports`]).
pub type PoolUse<'a> = (&'a [Vec<Vec<f64>>], &'a [Vec<Vec<usize>>]);

/// Per representative root and tree of its pool, the resource orbits it uses (what
/// [`chunk_option`]'s local searches look at).
pub(crate) fn supports(usages: &[Vec<Vec<f64>>]) -> Vec<Vec<Vec<usize>>> {
    (usages.iter())
        .map(|root| {
            (root.iter())
                .map(|u| (0..u.len()).filter(|&o| u[o] != 0.0).collect())
                .collect()
        })
        .collect()
}

/// The orbits that moving a piece from tree `a` to tree `b` of one root changes (the union
/// of their supports, sorted), into `out`.
fn changed(a: &[usize], b: &[usize], out: &mut Vec<usize>) {
    out.clear();
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        let next = match (a.get(i), b.get(j)) {
            (Some(&x), Some(&y)) if x == y => {
                i += 1;
                j += 1;
                x
            }
            (Some(&x), Some(&y)) if x < y => {
                i += 1;
                x
            }
            (Some(&x), None) => {
                i += 1;
                x
            }
            (_, Some(&y)) => {
                j += 1;
                y
            }
            (None, None) => unreachable!(),
        };
        out.push(next);
    }
}

/// The orbits' loads (load over bandwidth) of piece counts.
fn loads(
    packing: &Packing,
    usages: &[Vec<Vec<f64>>],
    bandwidth: &[f64],
    counts: &[Vec<usize>],
) -> Vec<f64> {
    let orbits = bandwidth.len();
    let mut load = vec![0.0; orbits];
    for (r, root) in packing.roots.iter().enumerate() {
        for t in (0..root.trees.len()).filter(|&t| counts[r][t] > 0) {
            for o in 0..orbits {
                load[o] += counts[r][t] as f64 * usages[r][t][o] / bandwidth[o];
            }
        }
    }
    load
}

/// The busiest orbit's load and the sum of squared loads: what [`improve_counts`] lowers.
fn score(load: &[f64]) -> (f64, f64) {
    let max = load.iter().copied().fold(0.0, f64::max);
    (max, load.iter().map(|x| x * x).sum::<f64>())
}

/// Whether score `x` is better than `y`: a lower maximum, else a lower sum of squares.
fn better(x: (f64, f64), y: (f64, f64)) -> bool {
    x.0 < y.0 * (1.0 - 1e-12) || (x.0 <= y.0 * (1.0 + 1e-12) && x.1 < y.1 * (1.0 - 1e-12))
}

/// Improves integer piece counts by moving one piece at a time from one tree of a root to
/// another tree of the same root's pool while the busiest resource orbit gets less loaded
/// (ties: a smaller sum of squared loads). Deterministic: the first best move wins. A move
/// is looked at on the orbits it changes; within [`MOVE_WORK`].
pub(crate) fn improve_counts(
    packing: &Packing,
    (usages, supports): PoolUse,
    bandwidth: &[f64],
    counts: &mut [Vec<usize>],
) {
    let orbits = bandwidth.len();
    let mut load = loads(packing, usages, bandwidth, counts);
    // `better` with room for the rounding of a sum of squares updated on the changed orbits
    // only; the exact score decides where this passes.
    let maybe_better = |x: (f64, f64), y: (f64, f64)| {
        x.0 < y.0 * (1.0 - 1e-12) || (x.0 <= y.0 * (1.0 + 1e-12) && x.1 < y.1 * (1.0 + 1e-10))
    };
    let mut work = 0usize;
    let mut union = Vec::new();
    let mut mark = vec![usize::MAX; orbits];
    let mut stamp = 0usize;
    for _ in 0..MAX_MOVES {
        let current = score(&load);
        // Only moves that unload the busiest orbit can lower the maximum.
        let hot = (0..orbits)
            .max_by(|&x, &y| load[x].total_cmp(&load[y]))
            .unwrap_or(0);
        // The orbits by load, busiest first: a move's maximum over the orbits it leaves
        // alone is the first of them it does not change.
        let mut by_load: Vec<usize> = (0..orbits).collect();
        by_load.sort_by(|&x, &y| load[y].total_cmp(&load[x]));
        let mut best: Option<((f64, f64), usize, usize, usize)> = None;
        'roots: for (r, root) in packing.roots.iter().enumerate() {
            for a in (0..root.trees.len()).filter(|&a| counts[r][a] > 0) {
                for b in (0..root.trees.len())
                    .filter(|&b| b != a && usages[r][b][hot] <= usages[r][a][hot])
                {
                    changed(&supports[r][a], &supports[r][b], &mut union);
                    work += union.len() + 1;
                    stamp += 1;
                    let (mut max, mut squares) = (0.0f64, current.1);
                    for &o in &union {
                        mark[o] = stamp;
                        let moved = load[o] + (usages[r][b][o] - usages[r][a][o]) / bandwidth[o];
                        max = max.max(moved);
                        squares += moved * moved - load[o] * load[o];
                    }
                    if let Some(&o) = by_load.iter().find(|&&o| mark[o] != stamp) {
                        max = max.max(load[o]);
                    }
                    let estimate = (max, squares);
                    if !(maybe_better(estimate, current)
                        && best.is_none_or(|(bs, ..)| maybe_better(estimate, bs)))
                    {
                        continue;
                    }
                    work += orbits;
                    let moved: Vec<f64> = (0..orbits)
                        .map(|o| load[o] + (usages[r][b][o] - usages[r][a][o]) / bandwidth[o])
                        .collect();
                    let s = score(&moved);
                    if better(s, current) && best.is_none_or(|(bs, ..)| better(s, bs)) {
                        best = Some((s, r, a, b));
                    }
                }
                if work > MOVE_WORK {
                    break 'roots;
                }
            }
        }
        let Some((_, r, a, b)) = best else { break };
        counts[r][a] -= 1;
        counts[r][b] += 1;
        changed(&supports[r][a], &supports[r][b], &mut union);
        for &o in &union {
            load[o] += (usages[r][b][o] - usages[r][a][o]) / bandwidth[o];
        }
        if work > MOVE_WORK {
            break;
        }
    }
}

/// Moves pieces to shallower trees of the same root while the busiest resource orbit gets
/// no busier: at equal load, shallow trees fill and drain their pipelines sooner. A move is
/// looked at on the orbits it changes (the others stay within the maximum); within
/// [`MOVE_WORK`].
pub(crate) fn shorten(
    packing: &Packing,
    (usages, supports): PoolUse,
    bandwidth: &[f64],
    counts: &mut [Vec<usize>],
) {
    let depth_of: Vec<Vec<usize>> = packing
        .roots
        .iter()
        .map(|r| {
            r.trees
                .iter()
                .map(|(t, _)| depths(t).into_iter().max().unwrap_or(0))
                .collect()
        })
        .collect();
    let mut load = loads(packing, usages, bandwidth, counts);
    let max = load.iter().copied().fold(0.0, f64::max);
    let mut work = 0usize;
    let mut union = Vec::new();
    for _ in 0..MAX_MOVES {
        let mut moved = false;
        'search: for (r, root) in packing.roots.iter().enumerate() {
            for a in (0..root.trees.len()).filter(|&a| counts[r][a] > 0) {
                let mut shallower: Vec<usize> = (0..root.trees.len())
                    .filter(|&b| depth_of[r][b] < depth_of[r][a])
                    .collect();
                shallower.sort_by_key(|&b| (depth_of[r][b], b));
                for b in shallower {
                    changed(&supports[r][a], &supports[r][b], &mut union);
                    work += union.len() + 1;
                    if work > MOVE_WORK {
                        return;
                    }
                    let fits = union.iter().all(|&o| {
                        load[o] + (usages[r][b][o] - usages[r][a][o]) / bandwidth[o]
                            <= max * (1.0 + 1e-9)
                    });
                    if fits {
                        counts[r][a] -= 1;
                        counts[r][b] += 1;
                        for &o in &union {
                            load[o] += (usages[r][b][o] - usages[r][a][o]) / bandwidth[o];
                        }
                        moved = true;
                        break 'search;
                    }
                }
            }
        }
        if !moved {
            break;
        }
    }
}

/// How many pieces of each root travel each tree of its representative's pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PieceCounts {
    /// Per representative root, pieces per tree; every root of its orbit takes the same
    /// (the images of the trees under the group element that maps the representative to it).
    Orbit(Vec<Vec<usize>>),
    /// Per representative root and group element, pieces per tree of the representative's
    /// pool: the roots of one orbit choose their trees' images one by one
    /// ([`super::per_root`]).
    Root(Vec<Vec<Vec<usize>>>),
}

impl PieceCounts {
    /// Pieces per tree of representative `r`'s pool for the root that group element `e`
    /// maps it to.
    pub fn of(&self, r: usize, e: usize) -> &[usize] {
        match self {
            PieceCounts::Orbit(counts) => &counts[r],
            PieceCounts::Root(counts) => &counts[r][e],
        }
    }
}

/// Integer piece counts for one number of pieces per root.
#[derive(Debug, Clone)]
pub struct ChunkOption {
    /// Pieces (chunks) per root.
    pub chunks: usize,
    /// Pieces per tree.
    pub counts: PieceCounts,
    /// The rate these counts reach (GB/s per root).
    pub rate: f64,
}

/// The packing's weights rounded to piece counts at `chunks` pieces per root (`uses`: the
/// pool's usages and their [`supports`]).
pub fn chunk_option(
    packing: &Packing,
    uses: PoolUse,
    bandwidth: &[f64],
    chunks: usize,
) -> ChunkOption {
    let usages = uses.0;
    let mut counts = piece_counts(packing, chunks);
    improve_counts(packing, uses, bandwidth, &mut counts);
    shorten(packing, uses, bandwidth, &mut counts);
    let t = realized_time(packing, usages, bandwidth, &counts, chunks);
    ChunkOption {
        chunks,
        counts: PieceCounts::Orbit(counts),
        rate: 1.0 / t,
    }
}

/// The fewest pieces whose rate is within 0.1% of the best option's (more pieces of the
/// same trees simulate slower: more threadblocks, fewer slices).
pub fn fewest_pieces(options: &[ChunkOption]) -> &ChunkOption {
    let best = options.iter().map(|o| o.rate).fold(0.0, f64::max);
    options
        .iter()
        .find(|o| o.rate >= best * (1.0 - 1e-3))
        .expect("at least one chunk count")
}

/// The option that is fastest once the runtime pipelines it slice by slice, with
/// `slices(c)` slices per piece at c pieces per root: a schedule in stages on channels of
/// their own ([`step_groups`]) costs about one slice period of fill and drain besides its
/// slices, so fewer, larger pieces can beat a better rounding (the first best wins).
pub fn best_pipelined(options: &[ChunkOption], slices: impl Fn(usize) -> f64) -> &ChunkOption {
    let value = |o: &ChunkOption| {
        let n = slices(o.chunks);
        o.rate * n / (n + 1.0)
    };
    options
        .iter()
        .fold(None::<&ChunkOption>, |best, o| match best {
            Some(b) if value(b) >= value(o) => Some(b),
            _ => Some(o),
        })
        .expect("at least one chunk count")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::load;
    use crate::trees::packing::{pack, Orbits};

    /// [`improve_counts`] as first written: every move scored on every orbit.
    fn improve_counts_densely(
        packing: &Packing,
        usages: &[Vec<Vec<f64>>],
        bandwidth: &[f64],
        counts: &mut [Vec<usize>],
    ) {
        let orbits = bandwidth.len();
        let mut load = loads(packing, usages, bandwidth, counts);
        for _ in 0..MAX_MOVES {
            let current = score(&load);
            let hot = (0..orbits)
                .max_by(|&x, &y| load[x].total_cmp(&load[y]))
                .unwrap_or(0);
            let mut best: Option<((f64, f64), usize, usize, usize)> = None;
            for (r, root) in packing.roots.iter().enumerate() {
                for a in (0..root.trees.len()).filter(|&a| counts[r][a] > 0) {
                    for b in (0..root.trees.len())
                        .filter(|&b| b != a && usages[r][b][hot] <= usages[r][a][hot])
                    {
                        let moved: Vec<f64> = (0..orbits)
                            .map(|o| load[o] + (usages[r][b][o] - usages[r][a][o]) / bandwidth[o])
                            .collect();
                        let s = score(&moved);
                        if better(s, current) && best.is_none_or(|(bs, ..)| better(s, bs)) {
                            best = Some((s, r, a, b));
                        }
                    }
                }
            }
            let Some((_, r, a, b)) = best else { break };
            counts[r][a] -= 1;
            counts[r][b] += 1;
            for o in 0..orbits {
                load[o] += (usages[r][b][o] - usages[r][a][o]) / bandwidth[o];
            }
        }
    }

    #[test]
    fn moves_scored_on_the_orbits_they_change_are_the_moves_scored_on_all() {
        for spec in ["amd8", "torus-2d:4x8", "random:24:1", "dgx1", "mesh-2d:4x4"] {
            let t = load(spec).unwrap();
            let index = t.index();
            let group = t.translations();
            let roots = group.representatives();
            let far = std::time::Instant::now() + std::time::Duration::from_secs(3600);
            let mut packing = pack(&t, &index, &group, &roots, None, far).unwrap();
            crate::trees::add_symmetric_images(&t, &index, &mut packing);
            let orbits = Orbits::new(&t, &index, &group).unwrap();
            let usages = orbits.usages_of(&packing, &index);
            let mut moved_somewhere = false;
            for chunks in 1..=8 {
                let start = piece_counts(&packing, chunks);
                let mut sparse = start.clone();
                let uses = (&usages[..], &supports(&usages)[..]);
                improve_counts(&packing, uses, &orbits.bandwidth, &mut sparse);
                let mut dense = start.clone();
                improve_counts_densely(&packing, &usages, &orbits.bandwidth, &mut dense);
                assert_eq!(sparse, dense, "{spec} at {chunks} pieces");
                moved_somewhere |= sparse != start;
            }
            assert!(
                moved_somewhere || spec != "amd8",
                "{spec}: no move to compare"
            );
        }
    }
}
