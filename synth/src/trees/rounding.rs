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

/// Improves integer piece counts by moving one piece at a time from one tree of a root to
/// another tree of the same root's pool while the busiest resource orbit gets less loaded
/// (ties: a smaller sum of squared loads). Deterministic: the first best move wins.
pub(crate) fn improve_counts(
    packing: &Packing,
    usages: &[Vec<Vec<f64>>],
    bandwidth: &[f64],
    counts: &mut [Vec<usize>],
) {
    let orbits = bandwidth.len();
    let mut load = vec![0.0; orbits];
    for (r, root) in packing.roots.iter().enumerate() {
        for t in 0..root.trees.len() {
            for o in 0..orbits {
                load[o] += counts[r][t] as f64 * usages[r][t][o] / bandwidth[o];
            }
        }
    }
    let score = |load: &[f64]| {
        let max = load.iter().copied().fold(0.0, f64::max);
        (max, load.iter().map(|x| x * x).sum::<f64>())
    };
    for _ in 0..MAX_MOVES {
        let current = score(&load);
        // Only moves that unload the busiest orbit can lower the maximum.
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
                    let better = |x: (f64, f64), y: (f64, f64)| {
                        x.0 < y.0 * (1.0 - 1e-12)
                            || (x.0 <= y.0 * (1.0 + 1e-12) && x.1 < y.1 * (1.0 - 1e-12))
                    };
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

/// Moves pieces to shallower trees of the same root while the busiest resource orbit gets
/// no busier: at equal load, shallow trees fill and drain their pipelines sooner.
pub(crate) fn shorten(
    packing: &Packing,
    usages: &[Vec<Vec<f64>>],
    bandwidth: &[f64],
    counts: &mut [Vec<usize>],
) {
    let orbits = bandwidth.len();
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
    let mut load = vec![0.0; orbits];
    for (r, root) in packing.roots.iter().enumerate() {
        for t in 0..root.trees.len() {
            for o in 0..orbits {
                load[o] += counts[r][t] as f64 * usages[r][t][o] / bandwidth[o];
            }
        }
    }
    let max = load.iter().copied().fold(0.0, f64::max);
    for _ in 0..MAX_MOVES {
        let mut moved = false;
        'search: for (r, root) in packing.roots.iter().enumerate() {
            for a in (0..root.trees.len()).filter(|&a| counts[r][a] > 0) {
                let mut shallower: Vec<usize> = (0..root.trees.len())
                    .filter(|&b| depth_of[r][b] < depth_of[r][a])
                    .collect();
                shallower.sort_by_key(|&b| (depth_of[r][b], b));
                for b in shallower {
                    let fits = (0..orbits).all(|o| {
                        load[o] + (usages[r][b][o] - usages[r][a][o]) / bandwidth[o]
                            <= max * (1.0 + 1e-9)
                    });
                    if fits {
                        counts[r][a] -= 1;
                        counts[r][b] += 1;
                        for o in 0..orbits {
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

/// The packing's weights rounded to piece counts at `chunks` pieces per root.
pub fn chunk_option(
    packing: &Packing,
    usages: &[Vec<Vec<f64>>],
    bandwidth: &[f64],
    chunks: usize,
) -> ChunkOption {
    let mut counts = piece_counts(packing, chunks);
    improve_counts(packing, usages, bandwidth, &mut counts);
    shorten(packing, usages, bandwidth, &mut counts);
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
