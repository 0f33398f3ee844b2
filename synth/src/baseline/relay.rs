//! Relayed rings and chains: NCCL's baselines on fabrics without a Hamiltonian cycle (or
//! path) of links.
//!
//! Where no ring of links covers every rank (a star- or tree-like part, an odd mesh), NCCL
//! still builds rings: a hop between GPUs that share no link goes through intermediate GPUs
//! (its PXB/SYS paths). Here a ring is a rank order over every rank whose consecutive ranks
//! need not be adjacent ([`relayed_order`]), and a program over such rings or chains is
//! turned into one the fabric can run by [`relay`]: every connection between ranks without a
//! link follows a shortest path, routed with the point-to-point baseline's router
//! ([`p2p`](mod@super::p2p): balanced by the load on every link), and every rank on the way
//! receives each message into scratch and forwards it, as the point-to-point baseline relays
//! its blocks.
//!
//! # Order
//!
//! A depth-first preorder of a spanning tree visits the ranks so that the hops between
//! consecutive ranks, closed into a ring, walk every tree link once in each direction (an
//! Euler tour of the tree): no link carries more than two of the ring's hops, one each way.
//! [`relayed_order`] tries the preorders of the depth-first and the breadth-first spanning
//! trees from the [`ROOTS`] best-connected ranks, routes each ring with its reverse (the two
//! channels of the baseline) along shortest paths, and keeps the order whose busiest link
//! (messages per GB/s) is least loaded, then the one with the fewest link crossings.
//!
//! # Program
//!
//! [`relay`] keeps every threadblock of the program and every connection that has a link.
//! A connection `a → b` without one becomes the path `a → m1 → … → b`: `a`'s threadblock
//! sends to `m1`, `b`'s receives from the last relay, and each relay gets a receiving
//! threadblock (every message into a scratch slot of its own) and a sending one (each message
//! once it arrived). Channels are renumbered where needed so that no two connections share
//! a link on one channel: a threadblock's send and receive share its channel, and the
//! connections tied that way keep their channel where it is free, else take the lowest free
//! one; where two connections tied to one channel would cross the same link, one of them
//! takes the shortest path that avoids it.

use super::p2p;
use crate::topology::Topology;
use anyhow::Result;
use runtime::ir::{Buffer, Dep, Op, Program, Slot, Step, Threadblock};
use std::collections::{HashMap, HashSet};

/// Ranks whose spanning trees [`relayed_order`] tries as roots.
pub const ROOTS: usize = 4;

/// Why a fabric or program cannot be relayed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RelayError {
    /// Some rank cannot reach another over the links.
    #[error("topology '{topology}' is disconnected: rank {from} cannot reach rank {to}, so NCCL's rings and trees have no path")]
    Disconnected {
        /// The fabric.
        topology: String,
        /// A rank that cannot reach `to`.
        from: usize,
        /// A rank that `from` cannot reach.
        to: usize,
    },
    /// A connection's receiving threadblock is missing.
    #[error("rank {rank} sends to rank {peer} on channel {channel}, which has no threadblock receiving it")]
    Unpaired {
        /// The sending rank.
        rank: usize,
        /// The receiving rank.
        peer: usize,
        /// The channel.
        channel: usize,
    },
    /// Two connections tied to one channel (by the threadblocks they share) cross one link.
    #[error("connections tied to one channel would both cross link {src}->{dst}")]
    SharedLink {
        /// The link's sending rank.
        src: usize,
        /// The link's receiving rank.
        dst: usize,
    },
}

/// The first pair of ranks `(from, to)` where `from` cannot reach `to`, if any.
fn unreachable_pair(topo: &Topology) -> Option<(usize, usize)> {
    let n = topo.ranks;
    let (mut out, mut inn) = (vec![Vec::new(); n], vec![Vec::new(); n]);
    for l in &topo.links {
        out[l.src].push(l.dst);
        inn[l.dst].push(l.src);
    }
    let reach = |forward: bool| {
        let next = if forward { &out } else { &inn };
        let mut seen = vec![false; n];
        let mut stack = vec![0];
        seen[0] = true;
        while let Some(u) = stack.pop() {
            for &b in &next[u] {
                if !seen[b] {
                    seen[b] = true;
                    stack.push(b);
                }
            }
        }
        seen
    };
    let (from0, to0) = (reach(true), reach(false));
    let r = (0..n).find(|&r| !from0[r]);
    if let Some(r) = r {
        return Some((0, r));
    }
    (0..n).find(|&r| !to0[r]).map(|r| (r, 0))
}

/// An error unless every rank of `topo` reaches every other.
pub fn check_connected(topo: &Topology) -> Result<(), RelayError> {
    match unreachable_pair(topo) {
        Some((from, to)) => Err(RelayError::Disconnected {
            topology: topo.name.clone(),
            from,
            to,
        }),
        None => Ok(()),
    }
}

/// Every rank's neighbours over links in either direction, in rank order.
pub(super) fn neighbours(topo: &Topology) -> Vec<Vec<usize>> {
    let mut adj = vec![Vec::new(); topo.ranks];
    for l in &topo.links {
        adj[l.src].push(l.dst);
        adj[l.dst].push(l.src);
    }
    for a in &mut adj {
        a.sort_unstable();
        a.dedup();
    }
    adj
}

/// The depth-first preorder from `root` over `adj` restricted to `inside` (children in
/// `adj`'s order), or over the breadth-first spanning tree from `root` (`bfs`).
pub fn preorder(adj: &[Vec<usize>], inside: &[bool], root: usize, bfs: bool) -> Vec<usize> {
    let n = adj.len();
    // Children of each rank: every unseen neighbour (depth-first: decided while walking).
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); n];
    if bfs {
        let mut seen = vec![false; n];
        seen[root] = true;
        let mut queue = std::collections::VecDeque::from([root]);
        while let Some(u) = queue.pop_front() {
            for &v in &adj[u] {
                if inside[v] && !seen[v] {
                    seen[v] = true;
                    children[u].push(v);
                    queue.push_back(v);
                }
            }
        }
    } else {
        children = adj.to_vec();
    }
    let mut seen = vec![false; n];
    let mut order = Vec::new();
    let mut stack = vec![root];
    while let Some(u) = stack.pop() {
        if seen[u] || !inside[u] {
            continue;
        }
        seen[u] = true;
        order.push(u);
        stack.extend(children[u].iter().rev().filter(|&&v| !seen[v]));
    }
    order
}

/// The links each `(from, to)` pair crosses: the direct link where there is one, else a
/// shortest path, routed as the point-to-point baseline routes its blocks (balanced against
/// every other pair's load).
pub fn paths(topo: &Topology, pairs: &[(usize, usize)]) -> Result<Vec<Vec<usize>>> {
    if let Some((from, to)) = pairs.iter().copied().find(|&(a, b)| a == b) {
        anyhow::bail!("a hop from rank {from} to itself ({to})");
    }
    p2p::route(topo, pairs, p2p::REROUTE_PASSES)
}

/// How well `order` relays as a ring with its reverse: the most messages per GB/s on any
/// link, then the links crossed in all.
fn load_of(topo: &Topology, order: &[usize]) -> Result<(f64, usize)> {
    let n = order.len();
    let hops: Vec<(usize, usize)> = (0..n)
        .flat_map(|i| {
            let (a, b) = (order[i], order[(i + 1) % n]);
            [(a, b), (b, a)]
        })
        .collect();
    let mut load = vec![0.0; topo.links.len()];
    let mut crossed = 0;
    for path in paths(topo, &hops)? {
        crossed += path.len();
        for l in path {
            load[l] += 1.0 / topo.links[l].bandwidth;
        }
    }
    Ok((load.into_iter().fold(0.0, f64::max), crossed))
}

/// A ring over every rank for a fabric without a Hamiltonian cycle of links (see the module
/// docs): the preorder whose relayed ring and reverse load the busiest link least.
pub fn relayed_order(topo: &Topology) -> Result<Vec<usize>> {
    check_connected(topo)?;
    let n = topo.ranks;
    if n <= 2 {
        return Ok((0..n).collect());
    }
    let adj = neighbours(topo);
    let mut roots: Vec<usize> = (0..n).collect();
    roots.sort_by_key(|&r| (std::cmp::Reverse(adj[r].len()), r));
    let inside = vec![true; n];
    let mut best: Option<((f64, usize), Vec<usize>)> = None;
    for &root in roots.iter().take(ROOTS) {
        for bfs in [false, true] {
            let order = preorder(&adj, &inside, root, bfs);
            let score = load_of(topo, &order)?;
            let better = best
                .as_ref()
                .is_none_or(|(b, _)| score.0.total_cmp(&b.0).then(score.1.cmp(&b.1)).is_lt());
            if better {
                best = Some((score, order));
            }
        }
    }
    Ok(best.map(|b| b.1).unwrap_or_default())
}

/// One connection of a program: the sending rank and threadblock, the receiving ones, and
/// its channel.
#[derive(Debug, Clone, Copy)]
struct Connection {
    from: (usize, usize),
    to: (usize, usize),
    channel: usize,
}

/// Every connection of `p` (in rank and threadblock order of the sender).
fn connections(p: &Program) -> Result<Vec<Connection>, RelayError> {
    let mut receivers: HashMap<(usize, usize, usize), usize> = HashMap::new();
    for (rank, tbi, tb) in p.threadblocks() {
        if let Some(peer) = tb.recv {
            receivers.insert((peer, rank, tb.channel), tbi);
        }
    }
    let mut out = Vec::new();
    for (rank, tbi, tb) in p.threadblocks() {
        let Some(peer) = tb.send else { continue };
        let Some(&rtb) = receivers.get(&(rank, peer, tb.channel)) else {
            return Err(RelayError::Unpaired {
                rank,
                peer,
                channel: tb.channel,
            });
        };
        out.push(Connection {
            from: (rank, tbi),
            to: (peer, rtb),
            channel: tb.channel,
        });
    }
    Ok(out)
}

/// The root of `x` in a union-find forest.
fn root(parent: &mut [usize], mut x: usize) -> usize {
    while parent[x] != x {
        parent[x] = parent[parent[x]];
        x = parent[x];
    }
    x
}

/// Two connections tied to one channel that cross one link: `connection` should avoid
/// `link`.
#[derive(Debug, Clone, Copy)]
struct Clash {
    connection: usize,
    link: usize,
}

/// A shortest path from `from` to `to` over the links of `topo` but those in `avoid`.
fn path_avoiding(topo: &Topology, from: usize, to: usize, avoid: &[usize]) -> Option<Vec<usize>> {
    let mut out: Vec<Vec<usize>> = vec![Vec::new(); topo.ranks];
    for (l, link) in topo.links.iter().enumerate() {
        out[link.src].push(l);
    }
    let mut via: Vec<Option<usize>> = vec![None; topo.ranks];
    let mut seen = vec![false; topo.ranks];
    seen[from] = true;
    let mut queue = std::collections::VecDeque::from([from]);
    while let Some(u) = queue.pop_front() {
        if u == to {
            let mut path = Vec::new();
            let mut v = to;
            while let Some(l) = via[v] {
                path.push(l);
                v = topo.links[l].src;
            }
            path.reverse();
            return Some(path);
        }
        for &l in &out[u] {
            let v = topo.links[l].dst;
            if !seen[v] && !avoid.contains(&l) {
                seen[v] = true;
                via[v] = Some(l);
                queue.push_back(v);
            }
        }
    }
    None
}

/// The channel of every hop (segment) of every connection, `routes[k]` being connection
/// `k`'s links: segments tied by a threadblock (its receive's last hop and its send's first
/// hop) share a channel; each tied group keeps its connection's channel where no other group
/// uses it on any of its links, else takes the lowest free one.
fn hop_channels(conns: &[Connection], routes: &[Vec<usize>]) -> Result<Vec<Vec<usize>>, Clash> {
    let first: Vec<usize> = routes
        .iter()
        .scan(0, |next, r| {
            let at = *next;
            *next += r.len();
            Some(at)
        })
        .collect();
    let total = first
        .last()
        .map_or(0, |&f| f + routes.last().map_or(0, Vec::len));
    let mut parent: Vec<usize> = (0..total).collect();
    // The segment each threadblock sends its first hop on and receives its last hop on.
    let mut tied: HashMap<(usize, usize), usize> = HashMap::new();
    for (k, c) in conns.iter().enumerate() {
        for (tb, seg) in [(c.from, first[k]), (c.to, first[k] + routes[k].len() - 1)] {
            if let Some(&other) = tied.get(&tb) {
                let (a, b) = (root(&mut parent, other), root(&mut parent, seg));
                parent[a] = b;
            } else {
                tied.insert(tb, seg);
            }
        }
    }
    // Groups in the order of their first segment, each with its preferred channel.
    let mut groups: Vec<Vec<(usize, usize)>> = Vec::new();
    let mut group_of: HashMap<usize, usize> = HashMap::new();
    let mut prefer = Vec::new();
    for (k, route) in routes.iter().enumerate() {
        for (j, _) in route.iter().enumerate() {
            let g = root(&mut parent, first[k] + j);
            let idx = *group_of.entry(g).or_insert_with(|| {
                groups.push(Vec::new());
                prefer.push(conns[k].channel);
                groups.len() - 1
            });
            groups[idx].push((k, j));
        }
    }
    let mut taken: HashSet<(usize, usize)> = HashSet::new();
    let mut channel = vec![0usize; total];
    for (g, members) in groups.iter().enumerate() {
        let links: Vec<usize> = members.iter().map(|&(k, j)| routes[k][j]).collect();
        let mut seen = HashSet::new();
        if let Some(i) = links.iter().position(|&l| !seen.insert(l)) {
            // Reroute the relayed one of the two connections.
            let (k, _) = members[i];
            let first = links.iter().position(|&l| l == links[i]).expect("seen");
            let k = if routes[k].len() > 1 {
                k
            } else {
                members[first].0
            };
            return Err(Clash {
                connection: k,
                link: links[i],
            });
        }
        let free = |c: usize| links.iter().all(|&l| !taken.contains(&(l, c)));
        let c = std::iter::once(prefer[g])
            .chain(0..)
            .find(|&c| free(c))
            .expect("a free channel");
        for (&(k, j), &l) in members.iter().zip(&links) {
            taken.insert((l, c));
            channel[first[k] + j] = c;
        }
    }
    Ok(routes
        .iter()
        .enumerate()
        .map(|(k, r)| (0..r.len()).map(|j| channel[first[k] + j]).collect())
        .collect())
}

/// `p` with every connection between ranks that share no link relayed along a shortest
/// path (see the module docs); `p` itself where every connection has a link. An error for
/// a disconnected fabric or a malformed program.
pub fn relay(mut p: Program, topo: &Topology) -> Result<Program> {
    let linked: HashSet<(usize, usize)> = topo.links.iter().map(|l| (l.src, l.dst)).collect();
    let all_linked = (p.threadblocks())
        .all(|(rank, _, tb)| tb.send.is_none_or(|peer| linked.contains(&(rank, peer))));
    if all_linked {
        return Ok(p);
    }
    check_connected(topo)?;
    let conns = connections(&p)?;
    let pairs: Vec<(usize, usize)> = conns.iter().map(|c| (c.from.0, c.to.0)).collect();
    let mut routes = paths(topo, &pairs)?;
    let mut avoid: Vec<Vec<usize>> = vec![Vec::new(); conns.len()];
    let channels = loop {
        match hop_channels(&conns, &routes) {
            Ok(channels) => break channels,
            Err(Clash {
                connection: k,
                link,
            }) => {
                avoid[k].push(link);
                let (a, b) = pairs[k];
                let Some(path) = path_avoiding(topo, a, b, &avoid[k]) else {
                    let l = &topo.links[link];
                    return Err(RelayError::SharedLink {
                        src: l.src,
                        dst: l.dst,
                    }
                    .into());
                };
                routes[k] = path;
            }
        }
    };
    // Every original threadblock's channel, send and receive peers after relaying.
    for (k, c) in conns.iter().enumerate() {
        let route = &routes[k];
        let (first_hop, last_hop) = (&topo.links[route[0]], &topo.links[route[route.len() - 1]]);
        let sender = &mut p.gpus[c.from.0].threadblocks[c.from.1];
        sender.send = Some(first_hop.dst);
        sender.channel = channels[k][0];
        let receiver = &mut p.gpus[c.to.0].threadblocks[c.to.1];
        receiver.recv = Some(last_hop.src);
        receiver.channel = channels[k][route.len() - 1];
    }
    for (k, c) in conns.iter().enumerate() {
        if routes[k].len() < 2 {
            continue;
        }
        let counts: Vec<usize> = (p.gpus[c.from.0].threadblocks[c.from.1].steps.iter())
            .filter(|s| s.op.sends())
            .map(|s| s.count)
            .collect();
        for j in 1..routes[k].len() {
            let (into, out) = (&topo.links[routes[k][j - 1]], &topo.links[routes[k][j]]);
            let hop = Hop {
                rank: into.dst,
                from: into.src,
                to: out.dst,
                channels: (channels[k][j - 1], channels[k][j]),
            };
            add_relay(&mut p, &hop, &counts);
        }
    }
    p.normalize_transfer_fields();
    Ok(p)
}

/// One relay of a connection: the rank, the rank it receives from and the one it forwards
/// to, and the channels of the two hops.
struct Hop {
    rank: usize,
    from: usize,
    to: usize,
    channels: (usize, usize),
}

/// Adds the two threadblocks of one relay: one receives each message (of `counts` chunks)
/// into scratch slots of its own, the other forwards it once it arrived.
fn add_relay(p: &mut Program, hop: &Hop, counts: &[usize]) {
    let gpu = &mut p.gpus[hop.rank];
    let base = gpu.scratch_chunks;
    gpu.scratch_chunks += counts.iter().sum::<usize>();
    let recv_tb = gpu.threadblocks.len();
    let mut recv = Threadblock {
        send: None,
        recv: Some(hop.from),
        channel: hop.channels.0,
        steps: Vec::with_capacity(counts.len()),
    };
    let mut send = Threadblock {
        send: Some(hop.to),
        recv: None,
        channel: hop.channels.1,
        steps: Vec::with_capacity(counts.len()),
    };
    let mut at = base;
    for (i, &count) in counts.iter().enumerate() {
        let slot = Slot::new(Buffer::Scratch, at);
        recv.steps.push(Step::new(Op::Recv, slot, slot, count));
        let mut s = Step::new(Op::Send, slot, slot, count);
        s.deps.push(Dep {
            tb: recv_tb,
            step: i,
        });
        send.steps.push(s);
        at += count;
    }
    gpu.threadblocks.push(recv);
    gpu.threadblocks.push(send);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::baseline::ring_program;
    use crate::simulate::{simulate, SimOptions};
    use crate::topology::{self, Link};
    use runtime::ir::Collective;

    /// A one-node fabric of 25 GB/s links both ways between the `pairs`.
    fn fabric(n: usize, pairs: &[(usize, usize)]) -> Topology {
        let links = (pairs.iter())
            .flat_map(|&(a, b)| [(a, b), (b, a)])
            .map(|(src, dst)| Link {
                src,
                dst,
                bandwidth: 25.0,
                alpha: 0.7,
            })
            .collect();
        Topology {
            name: "relay-test".into(),
            ranks: n,
            node_of: vec![0; n],
            links,
            switches: Vec::new(),
            runtime: None,
        }
    }

    #[test]
    fn programs_with_a_link_for_every_connection_are_left_alone() {
        let dgx1 = topology::load("dgx1").unwrap();
        let rings = crate::baseline::ring_orders(&dgx1, None).unwrap();
        let p = ring_program(Collective::AllReduce, 8, &rings, 0).unwrap();
        assert_eq!(relay(p.clone(), &dgx1).unwrap(), p);
    }

    #[test]
    fn a_hop_through_a_rank_of_a_tied_channel_takes_another_path() {
        // The 5-cycle 0-1-3-4-2-0 and the ring 0 1 2 4 3: the hops 1 -> 2 (via 0) and
        // 3 -> 0 (via 1) would both cross 1 -> 0, tied to one channel by rank 0's and rank
        // 1's threadblocks and the direct hop 0 -> 1 between them; one of them goes round.
        let topo = fabric(5, &[(0, 1), (0, 2), (1, 3), (3, 4), (4, 2)]);
        let rings = vec![vec![0, 1, 2, 4, 3]];
        let p = ring_program(Collective::AllGather, 5, &rings, 0).unwrap();
        let conns = connections(&p).unwrap();
        let pairs: Vec<(usize, usize)> = conns.iter().map(|c| (c.from.0, c.to.0)).collect();
        let routes = paths(&topo, &pairs).unwrap();
        assert!(hop_channels(&conns, &routes).is_err(), "{routes:?}");
        let relayed = relay(p, &topo).unwrap();
        runtime::verify::verify(&relayed).unwrap();
        // One of the two hops now goes round through rank 4.
        assert!(relayed.gpus[4].scratch_chunks > 0);
        let r = simulate(&relayed, &topo, 1 << 26, &SimOptions::default()).unwrap();
        assert!(r.busbw > 1.0);
    }

    #[test]
    fn a_preorder_of_a_tree_crosses_each_link_once_each_way() {
        // A tree: 0 - 1, 0 - 2, 1 - 3, 1 - 4, 2 - 5.
        let topo = fabric(6, &[(0, 1), (0, 2), (1, 3), (1, 4), (2, 5)]);
        let adj = neighbours(&topo);
        let order = preorder(&adj, &[true; 6], 0, false);
        assert_eq!(order, vec![0, 1, 3, 4, 2, 5]);
        let hops: Vec<(usize, usize)> = (0..6).map(|i| (order[i], order[(i + 1) % 6])).collect();
        let mut load = vec![0; topo.links.len()];
        for l in paths(&topo, &hops).unwrap().into_iter().flatten() {
            load[l] += 1;
        }
        assert!(load.iter().all(|&x| x == 1), "{load:?}");
        assert_eq!(relayed_order(&topo).unwrap().len(), 6);
    }
}
