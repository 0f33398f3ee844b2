//! NCCL's point-to-point collectives as IR programs: alltoall as NCCL runs it (`ncclAllToAll`
//! is a group of `ncclSend`/`ncclRecv`: every rank sends its block for every peer, all peers
//! at once) and gather / scatter as users write them with NCCL (a group of sends to the root /
//! receives from it).
//!
//! # Routing
//!
//! A block goes over the direct link where the fabric has one. Where it has none (a 2-D
//! torus, DGX-1's GPUs that share no NVLink, GPUs on different rails of a rail network),
//! NCCL's p2p goes through intermediaries (on rail networks PXN relays through the GPU on
//! the destination's rail); here every block follows a shortest path in hops, and each rank
//! on the way receives it into scratch and forwards it. Pairs are routed in NCCL's p2p
//! order (peer `rank + 1` first, then `rank + 2`, ...). A link's cost is the blocks per GB/s
//! its busiest resource (the link itself or a switch constraint covering it: an NVSwitch
//! port, a NIC) would carry with one block more; among the shortest paths, a pair takes the
//! one whose costliest link is cheapest, then the one whose costs sum least (then the
//! lowest link ids). Two more passes reroute every relayed pair against the others' loads.
//! On a 4x4 torus this puts at most 9 blocks on a link (8 on every link is the optimum).
//!
//! # Program
//!
//! A block crosses the h-th link of its path on channel h (so direct sends use channel 0
//! only). Per rank and channel: one threadblock per incoming link that carries blocks on
//! that channel (receiving them in routing order into the output, or into scratch on a
//! relay), one per outgoing link (sending them), and one threadblock for the local copy
//! (alltoall's own block; the root's own block of gather and scatter). A relayed send
//! depends on the receive that brought its block, which is on the channel below: channels
//! run independently (as NCCL's concurrent sends do) and the program cannot deadlock.

use super::programs::{i, o, Build};
use crate::topology::Topology;
use anyhow::{bail, Result};
use runtime::ir::{Buffer, Collective, Dep, Op, Program, Slot};
use std::collections::BTreeMap;

/// Most transfers (block hops, per slice) a point-to-point baseline may have: beyond it the
/// program is refused rather than built (a 32x32 torus alltoall would need 16 million).
pub const MAX_TRANSFERS: usize = 4_000_000;

/// One block to deliver: its slot on the source and on the destination, and the links it
/// crosses in order.
struct Route {
    from: Slot,
    to: Slot,
    links: Vec<usize>,
}

/// The (source, destination, source slot, destination slot) of every block `coll` moves
/// between ranks, in NCCL's p2p order (each rank's peer `+1` first, then `+2`, ...).
fn blocks(coll: Collective, n: usize, root: usize) -> Result<Vec<(usize, usize, Slot, Slot)>> {
    let mut out = Vec::new();
    for delta in 1..n {
        for s in 0..n {
            let d = (s + delta) % n;
            match coll {
                Collective::AllToAll => out.push((s, d, i(d), o(s))),
                Collective::Gather if d == root => out.push((s, d, i(0), o(s))),
                Collective::Scatter if s == root => out.push((s, d, i(d), o(0))),
                Collective::Gather | Collective::Scatter => {}
                _ => bail!(
                    "the point-to-point baseline covers alltoall, gather and scatter; NCCL runs {coll} with its ring or tree"
                ),
            }
        }
    }
    Ok(out)
}

/// Times every pair is routed again against the loads of all the others (rip-up and
/// reroute) after the first pass.
pub(super) const REROUTE_PASSES: usize = 2;

/// Link loads while routing: blocks per resource (links, then switch constraints) and what
/// a block more costs on each link.
struct Loads<'a> {
    topo: &'a Topology,
    governing: Vec<Vec<usize>>,
    caps: Vec<f64>,
    load: Vec<f64>,
}

impl Loads<'_> {
    /// The resources of link `l`: the link and the switch constraints covering it.
    fn resources(&self, l: usize) -> impl Iterator<Item = usize> + '_ {
        let nl = self.topo.links.len();
        std::iter::once(l).chain(self.governing[l].iter().map(move |&k| nl + k))
    }

    /// Blocks per GB/s on the busiest resource of link `l` with one block more.
    fn cost(&self, l: usize) -> f64 {
        self.resources(l)
            .map(|r| (self.load[r] + 1.0) / self.caps[r])
            .fold(0.0, f64::max)
    }

    fn add(&mut self, links: &[usize], by: f64) {
        for &l in links {
            let res: Vec<usize> = self.resources(l).collect();
            for r in res {
                self.load[r] += by;
            }
        }
    }
}

/// The shortest path from `s` to `d` (`dist[u][d]` hops from every `u`) whose busiest link
/// costs least, then whose costs sum least (then the lowest link ids): a pass over the
/// layers of the shortest-path DAG. `best` is scratch space of one entry per rank.
fn best_path(
    s: usize,
    d: usize,
    dist: &[Vec<Option<usize>>],
    out_links: &[Vec<usize>],
    loads: &Loads,
    best: &mut [Option<(f64, f64, usize)>],
) -> Vec<usize> {
    let topo = loads.topo;
    let mut layer = vec![s];
    best[s] = Some((0.0, 0.0, usize::MAX));
    let mut touched = vec![s];
    while layer[0] != d {
        let mut next = Vec::new();
        for &u in &layer {
            let (worst, sum, _) = best[u].expect("reached");
            let left = dist[u][d].expect("on a shortest path");
            for &l in &out_links[u] {
                let v = topo.links[l].dst;
                if dist[v][d] != Some(left - 1) {
                    continue;
                }
                let c = loads.cost(l);
                let cand = (worst.max(c), sum + c, l);
                match best[v] {
                    None => {
                        best[v] = Some(cand);
                        touched.push(v);
                        next.push(v);
                    }
                    Some(old) => {
                        let better = cand
                            .0
                            .total_cmp(&old.0)
                            .then(cand.1.total_cmp(&old.1))
                            .then(cand.2.cmp(&old.2))
                            .is_lt();
                        if better {
                            best[v] = Some(cand);
                        }
                    }
                }
            }
        }
        layer = next;
    }
    let mut links = Vec::with_capacity(dist[s][d].unwrap_or(0));
    let mut v = d;
    while v != s {
        let l = best[v].expect("reached").2;
        links.push(l);
        v = topo.links[l].src;
    }
    links.reverse();
    for v in touched {
        best[v] = None;
    }
    links
}

/// Routes every `(source, destination)` pair along a shortest path (see the module docs);
/// the links crossed, per pair. The relayed rings and chains ([`super::relay`]) route their
/// hops with it too.
pub(super) fn route(
    topo: &Topology,
    pairs: &[(usize, usize)],
    passes: usize,
) -> Result<Vec<Vec<usize>>> {
    let dist = topo.distances();
    let mut hops = 0usize;
    for &(s, d) in pairs {
        let Some(h) = dist[s][d] else {
            bail!(
                "topology '{}': rank {s} cannot reach rank {d}, so NCCL's point-to-point baseline has no path",
                topo.name
            );
        };
        hops = hops.saturating_add(h);
    }
    if hops > MAX_TRANSFERS {
        bail!(
            "NCCL's point-to-point baseline on '{}' would cross {hops} links per slice (limit {MAX_TRANSFERS})",
            topo.name
        );
    }
    let out_links = topo.out_link_ids();
    let caps: Vec<f64> = topo
        .links
        .iter()
        .map(|l| l.bandwidth)
        .chain(topo.switches.iter().map(|s| s.bandwidth))
        .collect();
    let mut loads = Loads {
        topo,
        governing: topo.governing_constraints(&out_links),
        load: vec![0.0; caps.len()],
        caps,
    };
    let mut best = vec![None; topo.ranks];
    let mut routes: Vec<Vec<usize>> = Vec::with_capacity(pairs.len());
    for &(s, d) in pairs {
        let links = best_path(s, d, &dist, &out_links, &loads, &mut best);
        loads.add(&links, 1.0);
        routes.push(links);
    }
    // A direct pair (one hop) has one shortest path: only relayed pairs may move.
    for _ in 0..passes {
        for (k, &(s, d)) in pairs.iter().enumerate() {
            if routes[k].len() < 2 {
                continue;
            }
            loads.add(&routes[k], -1.0);
            routes[k] = best_path(s, d, &dist, &out_links, &loads, &mut best);
            loads.add(&routes[k], 1.0);
        }
    }
    Ok(routes)
}

/// NCCL's point-to-point program for `coll` (alltoall, gather or scatter; `root` for the
/// last two) on `topology`: every block sent directly, or relayed along a shortest path
/// where no link joins its two ranks (see the module docs). Out of place; a block crosses
/// its h-th link on channel h.
pub fn p2p_program(coll: Collective, topology: &Topology, root: usize) -> Result<Program> {
    let n = topology.ranks;
    if n == 0 {
        bail!("topology '{}' has no ranks", topology.name);
    }
    if root >= n {
        bail!("root {root} is not a rank (ngpus {n})");
    }
    let routes = routes(coll, topology, root)?;
    let (in_chunks, out_chunks) = match coll {
        Collective::Gather => (1, n),
        Collective::Scatter => (n, 1),
        _ => (n, n),
    };
    let mut b = Build::new(
        format!("nccl-p2p-{coll}-{n}"),
        coll,
        if coll.is_rooted() { root } else { 0 },
        n,
        n,
        in_chunks,
        out_chunks,
    );
    let (slots, scratch) = hop_slots(topology, &routes);
    add_transfers(&mut b, topology, &routes, &slots);
    let local: Vec<(usize, Slot, Slot)> = match coll {
        Collective::Gather => vec![(root, i(0), o(root))],
        Collective::Scatter => vec![(root, i(root), o(0))],
        _ => (0..n).map(|r| (r, i(r), o(r))).collect(),
    };
    for (rank, from, to) in local {
        let t = b.tb(rank, None, None, 0);
        b.step(rank, t, Op::Copy, from, to, vec![]);
    }
    for (g, &s) in b.p.gpus.iter_mut().zip(&scratch) {
        g.scratch_chunks = s;
    }
    Ok(b.finish())
}

/// Every block `coll` moves between ranks, with the links it crosses (see [`route`]).
fn routes(coll: Collective, topology: &Topology, root: usize) -> Result<Vec<Route>> {
    let blocks = blocks(coll, topology.ranks, root)?;
    let pairs: Vec<(usize, usize)> = blocks.iter().map(|b| (b.0, b.1)).collect();
    Ok(route(topology, &pairs, REROUTE_PASSES)?
        .into_iter()
        .zip(&blocks)
        .map(|(links, b)| Route {
            from: b.2,
            to: b.3,
            links,
        })
        .collect())
}

/// Where each block lies after each hop: its source slot, scratch on relays, its
/// destination slot; and the scratch chunks each rank needs for that.
fn hop_slots(topology: &Topology, routes: &[Route]) -> (Vec<Vec<Slot>>, Vec<usize>) {
    let mut scratch = vec![0usize; topology.ranks];
    let slots: Vec<Vec<Slot>> = routes
        .iter()
        .map(|r| {
            let k = r.links.len();
            (0..=k)
                .map(|h| match h {
                    0 => r.from,
                    _ if h == k => r.to,
                    _ => {
                        let at = topology.links[r.links[h - 1]].dst;
                        scratch[at] += 1;
                        Slot::new(Buffer::Scratch, scratch[at] - 1)
                    }
                })
                .collect()
        })
        .collect();
    (slots, scratch)
}

/// Adds the sends and receives of every hop of every route, a block's slots after each hop
/// being `slots`: per link and hop (channel) one receiving threadblock and one sending
/// threadblock, the blocks in routing order; receives first (their threadblocks get the low
/// ids), and a relayed send waits for the receive that brought its block.
fn add_transfers(b: &mut Build, topology: &Topology, routes: &[Route], slots: &[Vec<Slot>]) {
    // The blocks each link carries at each hop (their channel), in routing order.
    let mut streams: BTreeMap<(usize, usize), Vec<usize>> = BTreeMap::new();
    for (r, route) in routes.iter().enumerate() {
        for (h, &l) in route.links.iter().enumerate() {
            streams.entry((l, h)).or_default().push(r);
        }
    }
    // `arrival[route][h]` is the receive of its hop h.
    let mut arrival: Vec<Vec<Dep>> = routes
        .iter()
        .map(|r| vec![Dep { tb: 0, step: 0 }; r.links.len()])
        .collect();
    for (&(l, h), blocks) in &streams {
        let (src, dst) = (topology.links[l].src, topology.links[l].dst);
        let t = b.tb(dst, None, Some(src), h);
        for &r in blocks {
            let step = b.step(dst, t, Op::Recv, slots[r][h], slots[r][h + 1], vec![]);
            arrival[r][h] = Dep { tb: t, step };
        }
    }
    for (&(l, h), blocks) in &streams {
        let (src, dst) = (topology.links[l].src, topology.links[l].dst);
        let t = b.tb(src, Some(dst), None, h);
        for &r in blocks {
            let deps = if h > 0 {
                vec![arrival[r][h - 1]]
            } else {
                vec![]
            };
            b.step(src, t, Op::Send, slots[r][h], slots[r][h + 1], deps);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology;

    #[test]
    fn torus_routes_are_shortest_and_balanced() {
        let topo = topology::load("torus-2d:4x4").unwrap();
        let pairs: Vec<(usize, usize)> = (0..16)
            .flat_map(|s| (0..16).filter(move |&d| d != s).map(move |d| (s, d)))
            .collect();
        let routes = route(&topo, &pairs, REROUTE_PASSES).unwrap();
        let dist = topo.distances();
        let mut load = vec![0usize; topo.links.len()];
        for ((s, d), links) in pairs.iter().zip(&routes) {
            assert_eq!(Some(links.len()), dist[*s][*d]);
            assert_eq!(topo.links[links[0]].src, *s);
            assert_eq!(topo.links[*links.last().unwrap()].dst, *d);
            for w in links.windows(2) {
                assert_eq!(topo.links[w[0]].dst, topo.links[w[1]].src);
            }
            for &l in links {
                load[l] += 1;
            }
        }
        // 512 block hops over 64 links: 8 per link at best; one pass of greedy routing
        // puts 10 on some link, rerouting at most 9.
        assert_eq!(load.iter().sum::<usize>(), 512);
        let most = *load.iter().max().unwrap();
        assert!(most <= 9, "a link carries {most} blocks");
        let mut first = vec![0usize; topo.links.len()];
        for &l in route(&topo, &pairs, 0).unwrap().iter().flatten() {
            first[l] += 1;
        }
        assert!(*first.iter().max().unwrap() >= most);
    }

    #[test]
    fn direct_links_need_no_relay() {
        let topo = topology::load("fully-connected:6").unwrap();
        let p = p2p_program(Collective::AllToAll, &topo, 0).unwrap();
        assert!(p.gpus.iter().all(|g| g.scratch_chunks == 0));
        // 5 receive, 5 send and 1 copy threadblock per rank.
        assert!(p.gpus.iter().all(|g| g.threadblocks.len() == 11));
    }

    #[test]
    fn refuses_other_collectives_and_bad_roots() {
        let topo = topology::load("ring:4").unwrap();
        let e = p2p_program(Collective::AllGather, &topo, 0).unwrap_err();
        assert!(
            format!("{e}").contains("alltoall, gather and scatter"),
            "{e}"
        );
        let e = p2p_program(Collective::Gather, &topo, 9).unwrap_err();
        assert!(format!("{e}").contains("root 9"), "{e}");
    }
}
