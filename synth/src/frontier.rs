//! Pareto filtering, once for every engine: which candidates no other candidate beats.
//!
//! Two generic rules carry every frontier synth draws:
//! - [`extend_undominated`]: candidates taken in order, each kept unless one already kept
//!   beats it (the frontier over (steps, rounds per chunk), sorted by [`cost`] first; the
//!   greedy engine's delay-model candidates over (rounds per chunk, latency));
//! - [`non_dominated`]: each candidate kept unless any other one beats it (the MILP's
//!   frontier over predicted times, where beating is not transitive).
//!
//! The specific frontiers ([`pareto_filter`], [`frontier_with_twins`],
//! [`pareto_filter_by`], [`pareto_by_time`]) are these rules under a named dominance.

use crate::algorithm::Algorithm;
use num_rational::Ratio;

/// The cost an algorithm is ranked by on a frontier: (steps, rounds per chunk, chunks).
pub fn cost(a: &Algorithm) -> (usize, Ratio<u64>, usize) {
    (a.num_steps(), a.rounds_per_chunk(), a.chunks())
}

/// Appends to `kept`, in order, each of `candidates` that no item of `kept` (those given
/// and those appended before it) beats; `beats(k, c)` says whether kept `k` beats `c`.
pub fn extend_undominated<T>(
    kept: &mut Vec<T>,
    candidates: impl IntoIterator<Item = T>,
    beats: impl Fn(&T, &T) -> bool,
) {
    for c in candidates {
        if !kept.iter().any(|k| beats(k, &c)) {
            kept.push(c);
        }
    }
}

/// The items of `items` that no other item beats, in their order; `beats((j, b), (i, a))`
/// says whether item `b` at index `j` beats item `a` at index `i` (indices break ties).
pub fn non_dominated<T>(items: Vec<T>, beats: impl Fn((usize, &T), (usize, &T)) -> bool) -> Vec<T> {
    let keep: Vec<bool> = (0..items.len())
        .map(|i| {
            !items
                .iter()
                .enumerate()
                .any(|(j, b)| j != i && beats((j, b), (i, &items[i])))
        })
        .collect();
    items
        .into_iter()
        .zip(keep)
        .filter_map(|(x, k)| k.then_some(x))
        .collect()
}

/// The items whose algorithm (`algorithm(item)`) is not dominated in (steps, rounds per
/// chunk), by increasing [`cost`]; of equal costs the first one given is kept.
pub fn pareto_filter_by<T>(mut all: Vec<T>, algorithm: impl Fn(&T) -> &Algorithm) -> Vec<T> {
    all.sort_by_key(|x| cost(algorithm(x)));
    let mut kept = Vec::new();
    extend_undominated(&mut kept, all, |k, c| {
        algorithm(k).rounds_per_chunk() <= algorithm(c).rounds_per_chunk()
    });
    kept
}

/// Keeps the algorithms not dominated in (steps, rounds per chunk), by increasing steps.
pub fn pareto_filter(all: Vec<Algorithm>) -> Vec<Algorithm> {
    pareto_filter_by(all, |a| a)
}

/// [`pareto_filter`], keeping beside each kept algorithm its twins: those with the same
/// steps, rounds and chunks lowered in other step groups (a composed reduce-scatter in
/// stages or in one group), which only a simulation tells apart.
pub fn frontier_with_twins(mut all: Vec<Algorithm>) -> Vec<Algorithm> {
    all.sort_by_key(cost);
    // A twin makes the same sends as the kept one of its cost, in step groups no kept
    // algorithm of that cost has.
    let twins = |k: &Algorithm, c: &Algorithm| {
        cost(k) == cost(c) && k.steps == c.steps && k.step_groups != c.step_groups
    };
    let mut kept = Vec::new();
    extend_undominated(&mut kept, all, |k, c| {
        k.rounds_per_chunk() <= c.rounds_per_chunk() && !twins(k, c)
    });
    kept
}

/// Relative tolerance under which two predicted times are equal.
const TIME_TOLERANCE: f64 = 1e-9;

/// Keeps the algorithms, each with its predicted times (`scored`, at the same sizes), not
/// dominated in time at every size (ties: fewer steps, then fewer chunks, then the one given
/// first), ordered by time at the first size.
pub fn pareto_by_time(scored: Vec<(Algorithm, Vec<f64>)>) -> Vec<(Algorithm, Vec<f64>)> {
    let mut kept = non_dominated(scored, |(j, (b, tb)), (i, (a, ta))| {
        let le = tb
            .iter()
            .zip(ta)
            .all(|(x, y)| *x <= y * (1.0 + TIME_TOLERANCE));
        let lt = tb
            .iter()
            .zip(ta)
            .any(|(x, y)| *x < y * (1.0 - TIME_TOLERANCE));
        le && (lt || (b.num_steps(), b.chunks(), j) < (a.num_steps(), a.chunks(), i))
    });
    kept.sort_by(|a, b| {
        a.1.first()
            .partial_cmp(&b.1.first())
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    kept
}
