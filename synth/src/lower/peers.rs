//! Spreading connections over channels so that no rank has more threadblocks with a send
//! peer, or with a receive peer, on one channel than the runtimes take
//! ([`limits::MAX_PEER_TBS_PER_CHANNEL`]: "too many recvs per channel"). A rank that talks
//! to many peers on one channel (a greedy allreduce on 64 ranks) gets some of those
//! connections moved to other channels: a connection's sending and receiving threadblock
//! move together, to a channel where the pair has no connection yet, so each connection
//! keeps its own FIFO and the program means the same.

use runtime::ir::Gpu;
use runtime::limits::{self, Limits};
use rustc_hash::{FxHashMap, FxHashSet};

/// Channels a connection may move to.
const CHANNELS: usize = Limits::PORTABLE.max_channels;

/// One connection: the sending threadblock (rank, tb) and the receiving one.
struct Connection {
    from: (usize, usize),
    to: (usize, usize),
}

/// Moves connections of `gpus` off channels where a rank has more than the runtimes'
/// threadblocks with a send (or receive) peer, each to the lowest channel with room at
/// both ends, taking connections by channel and then by their ranks' places in `place`
/// (the lowering's [`crate::algorithm::Algorithm::rank_order`]), so a renumbered twin moves
/// the same connections. Best effort: what cannot move stays, and the writer names the
/// limit.
pub fn spread_peer_channels(gpus: &mut [Gpu], place: impl Fn(usize) -> usize) {
    let per = limits::MAX_PEER_TBS_PER_CHANNEL;
    // Threadblocks with a peer per (rank, channel, sends).
    let mut load: FxHashMap<(usize, usize, bool), usize> = FxHashMap::default();
    for g in gpus.iter() {
        for tb in &g.threadblocks {
            for (peer, send) in [(tb.send, true), (tb.recv, false)] {
                if peer.is_some() {
                    *load.entry((g.rank, tb.channel, send)).or_insert(0) += 1;
                }
            }
        }
    }
    if load.values().all(|&n| n <= per) {
        return;
    }
    let connections = connections(gpus, place);
    let mut used: FxHashSet<(usize, usize, usize)> = connections
        .iter()
        .map(|c| {
            (
                c.from.0,
                c.to.0,
                gpus[c.from.0].threadblocks[c.from.1].channel,
            )
        })
        .collect();
    for c in &connections {
        let (u, v) = (c.from.0, c.to.0);
        let channel = gpus[u].threadblocks[c.from.1].channel;
        let over = |load: &FxHashMap<_, usize>| {
            load[&(u, channel, true)] > per || load[&(v, channel, false)] > per
        };
        if !over(&load) {
            continue;
        }
        let room = |ch: usize| {
            load.get(&(u, ch, true)).is_none_or(|&n| n < per)
                && load.get(&(v, ch, false)).is_none_or(|&n| n < per)
                && !used.contains(&(u, v, ch))
        };
        let Some(to) = (0..CHANNELS).find(|&ch| ch != channel && room(ch)) else {
            continue;
        };
        for (key, delta) in [((u, channel, true), -1), ((v, channel, false), -1)]
            .into_iter()
            .chain([((u, to, true), 1), ((v, to, false), 1)])
        {
            let n = load.entry(key).or_insert(0);
            *n = n.saturating_add_signed(delta);
        }
        used.remove(&(u, v, channel));
        used.insert((u, v, to));
        gpus[u].threadblocks[c.from.1].channel = to;
        gpus[v].threadblocks[c.to.1].channel = to;
    }
}

/// The connections whose threadblocks carry only that connection (a threadblock with both
/// a send and a receive peer stays where it is), by channel, then the sender's and the
/// receiver's places in `place`.
fn connections(gpus: &[Gpu], place: impl Fn(usize) -> usize) -> Vec<Connection> {
    let mut receivers: FxHashMap<(usize, usize, usize), usize> = FxHashMap::default();
    for g in gpus {
        for (tbi, tb) in g.threadblocks.iter().enumerate() {
            if let (Some(peer), None) = (tb.recv, tb.send) {
                receivers.insert((peer, g.rank, tb.channel), tbi);
            }
        }
    }
    let mut found: Vec<(usize, Connection)> = Vec::new();
    for g in gpus {
        for (tbi, tb) in g.threadblocks.iter().enumerate() {
            let (Some(peer), None) = (tb.send, tb.recv) else {
                continue;
            };
            if let Some(&r) = receivers.get(&(g.rank, peer, tb.channel)) {
                let c = Connection {
                    from: (g.rank, tbi),
                    to: (peer, r),
                };
                found.push((tb.channel, c));
            }
        }
    }
    found.sort_by_key(|(ch, c)| (*ch, place(c.from.0), place(c.to.0)));
    found.into_iter().map(|(_, c)| c).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use runtime::ir::{Buffer, Op, Slot, Step, Threadblock};

    /// Rank 0 receives one chunk from each of `n` ranks, all on channel 0.
    fn fan_in(n: usize) -> Vec<Gpu> {
        let slot = |k| Slot::new(Buffer::Input, k);
        let tb = |send, recv, op, k| Threadblock {
            send,
            recv,
            channel: 0,
            steps: vec![Step::new(op, slot(k), slot(k), 1)],
        };
        (0..=n)
            .map(|rank| Gpu {
                rank,
                input_chunks: n + 1,
                output_chunks: 0,
                scratch_chunks: 0,
                threadblocks: if rank == 0 {
                    (1..=n).map(|p| tb(None, Some(p), Op::Recv, p)).collect()
                } else {
                    vec![tb(Some(0), None, Op::Send, rank)]
                },
            })
            .collect()
    }

    #[test]
    fn a_rank_receiving_from_more_peers_than_a_channel_takes_gets_a_second_channel() {
        let mut gpus = fan_in(40);
        spread_peer_channels(&mut gpus, |r| r);
        let on = |ch: usize| {
            gpus[0]
                .threadblocks
                .iter()
                .filter(|t| t.channel == ch)
                .count()
        };
        assert_eq!((on(0), on(1)), (32, 8));
        // Each sender moved with its receiver.
        for (i, tb) in gpus[0].threadblocks.iter().enumerate() {
            assert_eq!(gpus[i + 1].threadblocks[0].channel, tb.channel);
        }
    }

    #[test]
    fn programs_within_the_limit_are_left_alone() {
        let mut gpus = fan_in(32);
        spread_peer_channels(&mut gpus, |r| r);
        assert!(gpus
            .iter()
            .flat_map(|g| &g.threadblocks)
            .all(|t| t.channel == 0));
    }
}
