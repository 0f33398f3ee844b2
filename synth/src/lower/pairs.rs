//! Pairing a sending and a receiving threadblock of one channel into one threadblock, so
//! that a rank with more threadblocks than its flavour runs (RCCL's 64) fits: an MSCCL
//! threadblock may have one send peer and one receive peer on its channel (msccl-tools' ring
//! programs receive from the previous rank and send to the next in one threadblock).
//!
//! A paired threadblock runs its steps in one sequence, so a bad order makes ranks wait on
//! each other; [`PairOrder`] says how the steps are ordered, and the caller verifies the
//! program (the verifier reports a deadlock) and tries the next order where one is refused.
//! Only as many pairs as the rank needs are made, those with the most data received by the
//! one and then sent by the other first (such a flow is sequential already, so merging it
//! costs least), ties broken in the lowering's rank order so that a renumbered twin pairs
//! the same threadblocks.

use super::{RankCode, TbKey, LOCAL_STEPS};
use runtime::ir::Slot;
use rustc_hash::FxHashMap;

/// How the steps of a rank are ordered once some of its threadblocks are paired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PairOrder {
    /// By the algorithm's step, and within a step every send (and the local copies that
    /// stage them) before every receive: a ring's ranks each send before they wait.
    SendsFirst,
    /// The lowering's own order (algorithm order, the links of a step in rank order).
    Lowered,
}

/// Pairing of one lowering: the flavour's threadblocks per rank and steps per threadblock,
/// and the order of the paired steps.
#[derive(Debug, Clone, Copy)]
pub(super) struct Pairing {
    /// Threadblocks per rank the flavour runs.
    pub max_tbs: usize,
    /// Steps per threadblock the flavour runs.
    pub max_steps: usize,
    /// How a paired rank's steps are ordered.
    pub order: PairOrder,
}

/// Pairs send and receive threadblocks of one channel on a rank of `rc` until it has at most
/// `pairing.max_tbs` threadblocks (or no further pair fits in `pairing.max_steps` steps;
/// the writer then names the limit), and reorders the rank's steps by `pairing.order`. A
/// rank within the limit is left alone.
pub(super) fn pair_threadblocks(
    rc: &mut RankCode,
    pairing: Pairing,
    (rank, ranks): (usize, usize),
    place: impl Fn(usize) -> usize,
) {
    let mut steps: FxHashMap<TbKey, usize> = FxHashMap::default();
    let mut locals: usize = 0;
    for (key, _) in &rc.ops {
        match key {
            TbKey::Local { .. } => locals += 1,
            _ => *steps.entry(*key).or_insert(0) += 1,
        }
    }
    let count = steps.len() + locals.div_ceil(LOCAL_STEPS);
    if count <= pairing.max_tbs {
        return;
    }
    let mut excess = count - pairing.max_tbs;
    let flow = flows(rc);
    // Every (receive, send) pair of one channel, most flow first.
    let receives: Vec<(usize, usize)> = keys(&steps, false);
    let sends: Vec<(usize, usize)> = keys(&steps, true);
    let mut candidates: Vec<(usize, TbKey, TbKey)> = Vec::new();
    for &(q, c) in &receives {
        for &(p, d) in &sends {
            if c != d {
                continue;
            }
            let (recv, send) = (
                TbKey::Recv {
                    peer: q,
                    channel: c,
                },
                TbKey::Send {
                    peer: p,
                    channel: c,
                },
            );
            if steps[&recv] + steps[&send] <= pairing.max_steps {
                let f = flow.get(&(recv, send)).copied().unwrap_or(0);
                candidates.push((f, recv, send));
            }
        }
    }
    // Ties: ring-like, a receive from the nearest rank before this one in `place` with a
    // send to the nearest after it, so that the ranks' pairs join the same connections at
    // both ends (a connection paired at one end only cannot move to another channel where
    // a channel has more than 32 peers) and a renumbered twin pairs the same.
    let me = place(rank);
    let after = |peer: usize| (place(peer) + ranks - me) % ranks;
    let before = |peer: usize| (me + ranks - place(peer)) % ranks;
    let peer_of = |k: &TbKey| match *k {
        TbKey::Recv { peer, .. } | TbKey::Send { peer, .. } => peer,
        _ => 0,
    };
    candidates.sort_by_key(|(f, recv, send)| {
        (
            std::cmp::Reverse(*f),
            steps[recv] + steps[send],
            after(peer_of(send)),
            before(peer_of(recv)),
            rank_channel(recv),
        )
    });
    let mut paired: FxHashMap<TbKey, TbKey> = FxHashMap::default();
    for (_, recv, send) in candidates {
        if excess == 0 {
            break;
        }
        if paired.contains_key(&recv) || paired.contains_key(&send) {
            continue;
        }
        let (TbKey::Recv { peer: q, channel }, TbKey::Send { peer: p, .. }) = (recv, send) else {
            continue;
        };
        let both = TbKey::Pair {
            send: p,
            recv: q,
            channel,
        };
        paired.insert(recv, both);
        paired.insert(send, both);
        excess -= 1;
    }
    if paired.is_empty() {
        return;
    }
    for (key, _) in rc.ops.iter_mut() {
        if let Some(&both) = paired.get(key) {
            *key = both;
        }
    }
    let renamed = |k: TbKey| paired.get(&k).copied().unwrap_or(k);
    rc.after = std::mem::take(&mut rc.after)
        .into_iter()
        .map(|(k, before)| (renamed(k), renamed(before)))
        .collect();
    if pairing.order == PairOrder::SendsFirst {
        sends_first(rc);
    }
}

/// The channel of a threadblock.
fn rank_channel(k: &TbKey) -> usize {
    match *k {
        TbKey::Recv { channel, .. } | TbKey::Send { channel, .. } | TbKey::Pair { channel, .. } => {
            channel
        }
        TbKey::Local { .. } => 0,
    }
}

/// The (peer, channel) of every send (or receive) threadblock among `steps`' keys.
fn keys(steps: &FxHashMap<TbKey, usize>, send: bool) -> Vec<(usize, usize)> {
    let mut found: Vec<(usize, usize)> = steps
        .keys()
        .filter_map(|k| match *k {
            TbKey::Send { peer, channel } if send => Some((peer, channel)),
            TbKey::Recv { peer, channel } if !send => Some((peer, channel)),
            _ => None,
        })
        .collect();
    found.sort_unstable();
    found
}

/// Chunks each receive threadblock writes that a send threadblock of the same channel then
/// sends, per (receive, send) pair.
fn flows(rc: &RankCode) -> FxHashMap<(TbKey, TbKey), usize> {
    let mut writer: FxHashMap<Slot, TbKey> = FxHashMap::default();
    let mut flow: FxHashMap<(TbKey, TbKey), usize> = FxHashMap::default();
    for (key, step) in &rc.ops {
        let (_, _, written) = super::operands(step);
        let chunks =
            |slot: Slot| (0..step.count).map(move |k| Slot::new(slot.buffer, slot.offset + k));
        if let TbKey::Send { channel, .. } = *key {
            if step.op == runtime::ir::Op::Send {
                for slot in chunks(step.src) {
                    if let Some(&w @ TbKey::Recv { channel: c, .. }) = writer.get(&slot) {
                        if c == channel {
                            *flow.entry((w, *key)).or_insert(0) += 1;
                        }
                    }
                }
            }
        }
        if let Some(slot) = written {
            for s in chunks(slot) {
                writer.insert(s, *key);
            }
        }
    }
    flow
}

/// Reorders a rank's steps by the algorithm's step, and within one the local copies and
/// sends before the receives (a stable sort: each class keeps the lowering's order). Every
/// send of a step reads the state before the step, so the program means the same.
fn sends_first(rc: &mut RankCode) {
    let starts = std::mem::take(&mut rc.step_starts);
    let ops = std::mem::take(&mut rc.ops);
    let mut keyed: Vec<((usize, bool), (TbKey, runtime::ir::Step))> = ops
        .into_iter()
        .enumerate()
        .map(|(i, (key, step))| {
            let stage = starts.partition_point(|&s| s <= i);
            let receives = step.op != runtime::ir::Op::Send && !matches!(key, TbKey::Local { .. });
            ((stage, receives), (key, step))
        })
        .collect();
    keyed.sort_by_key(|(k, _)| *k);
    // Each algorithm step starts where its first op now is (the sort keeps the steps in
    // order).
    rc.step_starts = (1..=starts.len())
        .map(|stage| keyed.partition_point(|((s, _), _)| *s < stage))
        .collect();
    rc.ops = keyed.into_iter().map(|(_, op)| op).collect();
}
