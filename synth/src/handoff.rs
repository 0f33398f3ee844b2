//! The hand-off between the two phases of a composed collective (an allreduce's
//! reduce-scatter and allgather, a reduce and a broadcast): the second phase takes up the
//! pieces in the order the first phase delivers them.
//!
//! A rank's pieces are interchangeable for the second phase (an allgather moves every piece
//! of a root the same way, whichever address it holds), so the second phase's addresses are
//! relabelled within each rank's own: the piece it sends first gets the address the first
//! phase completes first there. Without it, a reduce-scatter laid out as the reversal of an
//! allgather completes its pieces in the reverse of the order the allgather sends them, and
//! the allgather's first transfer waits for the reduce-scatter's last (dgx-a100x2, the rail
//! shortcut pair: 311.1 GB/s at 1 GB; matched, 323.8).

use crate::algorithm::Algorithm;
use rustc_hash::FxHashMap;

/// Whether the pieces of halves `first` and `second` may be matched: not where either sends
/// messages of several pieces (relabelled, consecutive pieces would no longer be).
pub fn applies(first: &Algorithm, second: &Algorithm) -> bool {
    first.message_chunks.is_none() && second.message_chunks.is_none()
}

/// Position of a transfer: its step, then its place among the step's transfers over the
/// same link (the order a threadblock runs them in; transfers over different links run side
/// by side, so they have no order between them).
type Position = (usize, usize);

/// The position of every transfer of `algorithm`, step by step, in list order.
fn positions(algorithm: &Algorithm) -> impl Iterator<Item = (Position, &crate::algorithm::Send)> {
    algorithm.steps.iter().enumerate().flat_map(|(s, step)| {
        let mut on_link = FxHashMap::<(usize, usize), usize>::default();
        step.sends.iter().map(move |x| {
            let place = on_link.entry((x.src, x.dst)).or_insert(0);
            *place += 1;
            ((s, *place - 1), x)
        })
    })
}

/// The addresses of `second` relabelled so that, on every rank that starts with pieces of
/// its own, `second` takes them up in the order `first` completes them there, each piece
/// keeping its channel (`piece_channels`); `None` where that is the order already, or where
/// `second` does not start each address on one rank.
pub fn matched_order(first: &Algorithm, second: &Algorithm) -> Option<Algorithm> {
    let addresses = second.collective.chunks.len();
    let c = second.chunks().max(1);
    let channels = second.piece_channels.unwrap_or(1).max(1);
    let mut holder = vec![usize::MAX; addresses];
    for chunk in &second.collective.chunks {
        let [rank] = chunk.pre[..] else { return None };
        if chunk.address >= addresses || holder[chunk.address] != usize::MAX {
            return None;
        }
        holder[chunk.address] = rank;
    }
    // When the first phase last delivers each address to its holder, and when the second
    // first sends it from there.
    let mut completed: Vec<Position> = vec![(0, 0); addresses];
    for (at, x) in positions(first) {
        if x.chunk < addresses && holder[x.chunk] == x.dst {
            completed[x.chunk] = completed[x.chunk].max(at);
        }
    }
    let mut taken: Vec<Position> = vec![(usize::MAX, usize::MAX); addresses];
    for (at, x) in positions(second) {
        if x.chunk < addresses && holder[x.chunk] == x.src {
            taken[x.chunk] = taken[x.chunk].min(at);
        }
    }
    // Pieces are matched within a class: one holder, one channel.
    let mut classes = std::collections::BTreeMap::<(usize, usize), Vec<usize>>::new();
    for (a, &rank) in holder.iter().enumerate() {
        classes
            .entry((rank, (a % c) % channels))
            .or_default()
            .push(a);
    }
    let mut relabel: Vec<usize> = (0..addresses).collect();
    for members in classes.values() {
        let mut by_completion = members.clone();
        by_completion.sort_by_key(|&a| (completed[a], a));
        let mut by_use = members.clone();
        by_use.sort_by_key(|&a| (taken[a], a));
        for (&old, &new) in by_use.iter().zip(&by_completion) {
            relabel[old] = new;
        }
    }
    if relabel.iter().enumerate().all(|(a, &b)| a == b) {
        return None;
    }
    let mut matched = second.clone();
    for step in &mut matched.steps {
        for x in &mut step.sends {
            x.chunk = relabel[x.chunk];
        }
    }
    Some(matched)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collective::{Collective, Kind};
    use crate::origin::Family;

    fn ring_allgather(n: usize, c: usize) -> Algorithm {
        let collective = Collective::new(Kind::AllGather, n, 0, c).unwrap();
        let steps = (0..n - 1)
            .map(|s| crate::algorithm::Step {
                rounds: c as u32,
                reduce: false,
                sends: (0..n)
                    .flat_map(|r| {
                        let root = (r + n - s) % n;
                        (0..c).map(move |j| crate::algorithm::Send {
                            chunk: root * c + j,
                            src: r,
                            dst: (r + 1) % n,
                        })
                    })
                    .collect(),
            })
            .collect();
        Algorithm::made(Family::Rings, "ring".to_string(), collective, steps)
    }

    #[test]
    fn an_allgather_takes_up_pieces_in_the_order_the_first_phase_completes_them() {
        let (n, c) = (4, 3);
        // The reduce-scatter dual of a ring allgather completes rank 1's pieces in the
        // order 2, 1, 0; the allgather sends them 0, 1, 2.
        let rs = Collective::new(Kind::ReduceScatter, n, 0, c).unwrap();
        let first = ring_allgather(n, c).reversed(rs, true);
        let second = ring_allgather(n, c);
        let matched = matched_order(&first, &second).expect("orders differ");
        let sent_first: Vec<usize> = matched.steps[0]
            .sends
            .iter()
            .filter(|x| x.src == 1)
            .map(|x| x.chunk)
            .collect();
        assert_eq!(sent_first, vec![c + 2, c + 1, c]);
        // Only the addresses changed: the first step still sends each address once.
        let mut sorted: Vec<usize> = matched.steps[0].sends.iter().map(|x| x.chunk).collect();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..n * c).collect::<Vec<_>>());
        // In that order already: nothing to relabel.
        assert!(matched_order(&first, &matched).is_none());
    }
}
