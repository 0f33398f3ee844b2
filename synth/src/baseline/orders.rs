//! Rank orders for the NCCL-style baselines: rings (one per channel) and chains/trees, chosen
//! from the topology as NCCL's search does in spirit.
//!
//! * One node: directed Hamiltonian cycles of the link graph packed into the link and switch
//!   capacities (in units of the smallest link bandwidth), most-capable links first, as many
//!   as fit (NCCL builds as many rings as the NVLinks allow). A single ring (NVSwitch
//!   systems) is used on two channels, as NCCL duplicates channels on NVLink.
//! * Several nodes: one ring per NIC (GPUs sharing a NIC form one group). Ring `c` enters
//!   every node at a GPU of NIC group `c` and leaves it from the other GPU of that group, or
//!   from a GPU of group `c + 1` when NICs are per GPU, visiting the node's other GPUs on a
//!   Hamiltonian path in between: ranks grouped by node with one inter-node hop per node
//!   boundary, and every NIC used by one ring per direction.

use crate::topology::Topology;
use anyhow::{bail, Result};
use std::collections::HashMap;

/// Most rings searched for on one node.
pub const MAX_RINGS: usize = 16;

/// DFS nodes a search may visit before it settles for what it has.
const SEARCH_BUDGET: usize = 100_000;

/// Residual capacities of a set of ranks' links and switch constraints, in units.
struct Residual<'a> {
    topo: &'a Topology,
    link: HashMap<(usize, usize), i64>,
    switch: Vec<i64>,
    covers: HashMap<(usize, usize), Vec<usize>>,
    /// Out-neighbours of each rank (inside the set), best first.
    adj: HashMap<usize, Vec<usize>>,
}

impl<'a> Residual<'a> {
    fn new(topo: &'a Topology, ranks: &[usize]) -> Residual<'a> {
        let inside = |r: usize| ranks.contains(&r);
        let local: Vec<_> = topo
            .links
            .iter()
            .filter(|l| inside(l.src) && inside(l.dst))
            .collect();
        let unit = local
            .iter()
            .map(|l| l.bandwidth)
            .fold(f64::INFINITY, f64::min);
        let units = |b: f64| ((b / unit) + 1e-9).floor().max(0.0) as i64;
        let mut link = HashMap::new();
        let mut covers = HashMap::new();
        for l in &local {
            link.insert((l.src, l.dst), units(l.bandwidth).max(1));
            let c: Vec<usize> = (0..topo.switches.len())
                .filter(|&k| topo.switches[k].covers(l.src, l.dst))
                .collect();
            covers.insert((l.src, l.dst), c);
        }
        let switch = topo.switches.iter().map(|s| units(s.bandwidth)).collect();
        let mut adj: HashMap<usize, Vec<usize>> = HashMap::new();
        for &r in ranks {
            let mut out: Vec<&&crate::topology::Link> =
                local.iter().filter(|l| l.src == r).collect();
            out.sort_by(|a, b| b.bandwidth.total_cmp(&a.bandwidth).then(a.dst.cmp(&b.dst)));
            adj.insert(r, out.iter().map(|l| l.dst).collect());
        }
        Residual {
            topo,
            link,
            switch,
            covers,
            adj,
        }
    }

    fn usable(&self, a: usize, b: usize) -> bool {
        self.link.get(&(a, b)).is_some_and(|&c| c >= 1)
            && self.covers[&(a, b)].iter().all(|&k| self.switch[k] >= 1)
    }

    fn take(&mut self, a: usize, b: usize, d: i64) {
        *self.link.get_mut(&(a, b)).expect("usable link") -= d;
        for &k in &self.covers[&(a, b)] {
            self.switch[k] -= d;
        }
    }

    fn take_cycle(&mut self, cycle: &[usize], d: i64) {
        for i in 0..cycle.len() {
            self.take(cycle[i], cycle[(i + 1) % cycle.len()], d);
        }
    }

    /// Neighbours of `a` ordered by residual capacity (then bandwidth, then index).
    fn next_of(&self, a: usize) -> Vec<usize> {
        let mut v: Vec<usize> = self.adj.get(&a).cloned().unwrap_or_default();
        v.sort_by_key(|&b| std::cmp::Reverse(self.link.get(&(a, b)).copied().unwrap_or(0)));
        v
    }
}

/// Extends `path` to a Hamiltonian path over `count` ranks; with `end`, the path must end
/// there; with `close`, the last rank must also link back to the first. Respects residual
/// capacities (taking them along the way and giving them back on backtrack).
fn extend(
    res: &mut Residual,
    path: &mut Vec<usize>,
    count: usize,
    end: Option<usize>,
    close: bool,
    budget: &mut usize,
) -> bool {
    if *budget == 0 {
        return false;
    }
    *budget -= 1;
    let last = *path.last().expect("non-empty path");
    if path.len() == count {
        if end.is_some_and(|e| e != last) {
            return false;
        }
        if close {
            let first = path[0];
            if count > 1 && !res.usable(last, first) {
                return false;
            }
        }
        return true;
    }
    for b in res.next_of(last) {
        if path.contains(&b) || !res.usable(last, b) {
            continue;
        }
        if end == Some(b) && path.len() + 1 != count {
            continue;
        }
        res.take(last, b, 1);
        path.push(b);
        if extend(res, path, count, end, close, budget) {
            res.take(last, b, -1);
            return true;
        }
        path.pop();
        res.take(last, b, -1);
    }
    false
}

/// A Hamiltonian path over `ranks` from `from` (to `to` when given), preferring
/// high-bandwidth links; `None` if the search finds none.
pub fn hamiltonian_path(
    topo: &Topology,
    ranks: &[usize],
    from: usize,
    to: Option<usize>,
) -> Option<Vec<usize>> {
    if ranks.len() == 1 {
        return (ranks[0] == from && to.is_none_or(|t| t == from)).then(|| vec![from]);
    }
    let mut res = Residual::new(topo, ranks);
    let mut path = vec![from];
    let mut budget = SEARCH_BUDGET;
    extend(&mut res, &mut path, ranks.len(), to, false, &mut budget).then_some(path)
}

/// Packs as many directed Hamiltonian cycles over `ranks` as fit the capacities.
fn pack_cycles(topo: &Topology, ranks: &[usize]) -> Vec<Vec<usize>> {
    if ranks.len() == 1 {
        return vec![ranks.to_vec()];
    }
    let mut res = Residual::new(topo, ranks);
    let upper = ranks
        .iter()
        .map(|&r| {
            let out: i64 = res
                .link
                .iter()
                .filter(|(k, _)| k.0 == r)
                .map(|(_, &c)| c)
                .sum();
            let inn: i64 = res
                .link
                .iter()
                .filter(|(k, _)| k.1 == r)
                .map(|(_, &c)| c)
                .sum();
            out.min(inn)
        })
        .min()
        .unwrap_or(0)
        .clamp(0, MAX_RINGS as i64) as usize;
    // Switch constraints (NVSwitch ports) may allow fewer rings than the links.
    let unit = topo
        .links
        .iter()
        .filter(|l| ranks.contains(&l.src) && ranks.contains(&l.dst))
        .map(|l| l.bandwidth)
        .fold(f64::INFINITY, f64::min);
    let by_ports = ranks
        .iter()
        .map(|&r| {
            let (i, o) = topo.rank_bandwidth(r);
            ((i.min(o) / unit) + 1e-9).floor().max(1.0) as usize
        })
        .min()
        .unwrap_or(1);
    let upper = upper.min(by_ports);
    let mut best = Vec::new();
    let mut current = Vec::new();
    let mut budget = SEARCH_BUDGET;
    pack(&mut res, ranks, upper, &mut current, &mut best, &mut budget);
    best
}

fn pack(
    res: &mut Residual,
    ranks: &[usize],
    upper: usize,
    current: &mut Vec<Vec<usize>>,
    best: &mut Vec<Vec<usize>>,
    budget: &mut usize,
) {
    if current.len() > best.len() {
        *best = current.clone();
    }
    if best.len() >= upper || *budget == 0 {
        return;
    }
    // Enumerate cycles from the first rank by DFS; try each as the next ring.
    let mut stack: Vec<(Vec<usize>, usize)> = vec![(vec![ranks[0]], 0)];
    // Iterative DFS over partial paths so that every complete cycle can be tried in turn.
    while let Some((path, _)) = stack.pop() {
        if *budget == 0 || best.len() >= upper {
            return;
        }
        *budget -= 1;
        let last = *path.last().expect("non-empty");
        if path.len() == ranks.len() {
            let cycle = path.clone();
            if !cycle_fits(res, &cycle) {
                continue;
            }
            res.take_cycle(&cycle, 1);
            current.push(cycle.clone());
            pack(res, ranks, upper, current, best, budget);
            current.pop();
            res.take_cycle(&cycle, -1);
            continue;
        }
        let mut nexts = res.next_of(last);
        nexts.reverse();
        for b in nexts {
            if !path.contains(&b) && res.usable(last, b) {
                let mut p = path.clone();
                p.push(b);
                stack.push((p, 0));
            }
        }
    }
}

/// Whether the residual capacities hold one more copy of `cycle` (switches counted with
/// their multiplicity along the cycle).
fn cycle_fits(res: &Residual, cycle: &[usize]) -> bool {
    let mut links: HashMap<(usize, usize), i64> = HashMap::new();
    let mut sw: HashMap<usize, i64> = HashMap::new();
    for i in 0..cycle.len() {
        let e = (cycle[i], cycle[(i + 1) % cycle.len()]);
        let Some(&c) = res.link.get(&e) else {
            return false;
        };
        let used = links.entry(e).or_insert(0);
        *used += 1;
        if *used > c {
            return false;
        }
        for &k in &res.covers[&e] {
            let u = sw.entry(k).or_insert(0);
            *u += 1;
            if *u > res.switch[k] {
                return false;
            }
        }
    }
    let _ = res.topo;
    true
}

/// The ring of every channel NCCL-style (see the module docs); `channels` overrides the
/// number of channels (rings are reused in turn).
pub fn ring_orders(topo: &Topology, channels: Option<usize>) -> Result<Vec<Vec<usize>>> {
    if topo.ranks == 0 {
        bail!("topology '{}' has no ranks", topo.name);
    }
    let rings = if topo.nodes() <= 1 {
        let all: Vec<usize> = (0..topo.ranks).collect();
        let mut rings = pack_cycles(topo, &all);
        if rings.is_empty() {
            bail!(
                "topology '{}' has no Hamiltonian cycle of links (found none within the search budget); the ring baseline needs one",
                topo.name
            );
        }
        if rings.len() == 1 {
            rings.push(rings[0].clone());
        }
        rings
    } else {
        multi_node_rings(topo)?
    };
    Ok(match channels {
        Some(c) if c > 0 => (0..c).map(|i| rings[i % rings.len()].clone()).collect(),
        _ => rings,
    })
}

/// The ranks of each node that has any, in rank order.
pub fn node_ranks(topo: &Topology) -> Vec<Vec<usize>> {
    let mut nodes = crate::topology::shape::nodes(topo);
    nodes.retain(|v| !v.is_empty());
    nodes
}

/// The GPUs of one node grouped by the NIC they share (ordered by their first GPU); GPUs
/// without inter-node links are left out.
pub fn nic_groups(topo: &Topology, node: &[usize]) -> Vec<Vec<usize>> {
    let mut groups: Vec<(Vec<usize>, Vec<usize>)> = Vec::new();
    for &r in node {
        let remote: Vec<usize> = topo
            .links
            .iter()
            .filter(|l| l.src == r && topo.node_of[l.dst] != topo.node_of[r])
            .map(|l| l.dst)
            .collect();
        if remote.is_empty() {
            continue;
        }
        let mut key: Vec<usize> = (0..topo.switches.len())
            .filter(|&k| {
                let s = &topo.switches[k];
                s.srcs.iter().all(|x| node.contains(x)) && remote.iter().any(|&d| s.covers(r, d))
            })
            .collect();
        if key.is_empty() {
            key = vec![usize::MAX - r];
        }
        match groups.iter_mut().find(|g| g.0 == key) {
            Some(g) => g.1.push(r),
            None => groups.push((key, vec![r])),
        }
    }
    groups.into_iter().map(|g| g.1).collect()
}

/// Entry and exit GPU of ring/tree channel `c` in a node with NIC groups `groups`.
fn entry_exit(groups: &[Vec<usize>], node: &[usize], c: usize) -> (usize, usize) {
    let g = &groups[c % groups.len()];
    let e = g[0];
    let x = if g.len() >= 2 {
        g[1]
    } else if groups.len() >= 2 {
        groups[(c + 1) % groups.len()][0]
    } else {
        node.iter().copied().find(|&r| r != e).unwrap_or(e)
    };
    (e, x)
}

/// A list of ranks.
type RankSet = Vec<usize>;

/// Every node's ranks, its GPUs grouped by NIC, and the fewest NIC groups of any node; an
/// error when some node has no GPU with an inter-node link.
fn nic_groups_per_node(topo: &Topology) -> Result<(Vec<RankSet>, Vec<Vec<RankSet>>, usize)> {
    let nodes = node_ranks(topo);
    let groups: Vec<Vec<RankSet>> = nodes.iter().map(|n| nic_groups(topo, n)).collect();
    let count = groups.iter().map(Vec::len).min().unwrap_or(0);
    if count == 0 {
        bail!(
            "topology '{}': some node has no GPU with an inter-node link",
            topo.name
        );
    }
    Ok((nodes, groups, count))
}

fn multi_node_rings(topo: &Topology) -> Result<Vec<Vec<usize>>> {
    let (nodes, groups, count) = nic_groups_per_node(topo)?;
    let k = nodes.len();
    let mut rings = Vec::new();
    for c in 0..count {
        let ends: Vec<(usize, usize)> = (0..k)
            .map(|i| entry_exit(&groups[i], &nodes[i], c))
            .collect();
        let linked = |ends: &[(usize, usize)]| {
            (0..k).all(|i| topo.link(ends[i].1, ends[(i + 1) % k].0).is_some())
        };
        let ends = if linked(&ends) {
            ends
        } else {
            // Rail networks: a GPU reaches only its peers; alternate entry and exit.
            let alt: Vec<(usize, usize)> = (0..k)
                .map(|i| {
                    if i % 2 == 1 {
                        (ends[i].1, ends[i].0)
                    } else {
                        ends[i]
                    }
                })
                .collect();
            if k % 2 == 1 || !linked(&alt) {
                bail!(
                    "topology '{}': cannot chain the nodes into a ring through their NICs (ring {c})",
                    topo.name
                );
            }
            alt
        };
        let mut ring = Vec::with_capacity(topo.ranks);
        for i in 0..k {
            let (e, x) = ends[i];
            let to = if nodes[i].len() > 1 { Some(x) } else { None };
            let Some(path) = hamiltonian_path(topo, &nodes[i], e, to) else {
                bail!(
                    "topology '{}': no path through node {i} from rank {e} to rank {x}",
                    topo.name
                );
            };
            ring.extend(path);
        }
        rings.push(ring);
    }
    Ok(rings)
}

/// The tree of every channel for the NCCL tree baseline, as a parent per rank (`None` for
/// the root). One node: a chain along the channel's ring, rotated per channel. Several
/// nodes: NCCL's double binary tree over the nodes (channels alternate between a heap-ordered
/// binary tree and the same over the reversed node order, so leaves of one are inner nodes of
/// the other), whose node heads are the GPUs of NIC group `c`, and a chain inside each node
/// starting at its head. `channels` overrides the channel count.
pub fn tree_parents(topo: &Topology, channels: Option<usize>) -> Result<Vec<Vec<Option<usize>>>> {
    let n = topo.ranks;
    if n == 0 {
        bail!("topology '{}' has no ranks", topo.name);
    }
    if topo.nodes() <= 1 {
        let all: Vec<usize> = (0..n).collect();
        let rings = pack_cycles(topo, &all);
        // Cycles may be rotated freely; a bare Hamiltonian path may not.
        let (base, closed): (Vec<Vec<usize>>, bool) = if rings.is_empty() {
            match hamiltonian_path(topo, &all, 0, None) {
                Some(p) => (vec![p], false),
                None => bail!(
                    "topology '{}' has no Hamiltonian path of links for the chain baseline",
                    topo.name
                ),
            }
        } else {
            (rings, true)
        };
        let nch = channels.unwrap_or(base.len().max(2)).max(1);
        let copies = nch.div_ceil(base.len());
        return Ok((0..nch)
            .map(|c| {
                let ring = &base[c % base.len()];
                let shift = if closed {
                    (c / base.len()) * (n / copies) % n
                } else {
                    0
                };
                let chain: Vec<usize> = (0..n).map(|j| ring[(j + shift) % n]).collect();
                let mut parent = vec![None; n];
                for j in 1..n {
                    parent[chain[j]] = Some(chain[j - 1]);
                }
                parent
            })
            .collect());
    }
    let (nodes, groups, count) = nic_groups_per_node(topo)?;
    let k = nodes.len();
    let nch = channels.unwrap_or(count.max(2)).max(1);
    let mut out = Vec::with_capacity(nch);
    for c in 0..nch {
        let mut parent = vec![None; n];
        let heads: Vec<usize> = (0..k).map(|i| groups[i][c % groups[i].len()][0]).collect();
        for i in 0..k {
            let Some(chain) = hamiltonian_path(topo, &nodes[i], heads[i], None) else {
                bail!(
                    "topology '{}': no chain through node {i} from rank {}",
                    topo.name,
                    heads[i]
                );
            };
            for j in 1..chain.len() {
                parent[chain[j]] = Some(chain[j - 1]);
            }
        }
        // Binary heap over the node order (reversed on odd channels).
        let order: Vec<usize> = if c % 2 == 0 {
            (0..k).collect()
        } else {
            (0..k).rev().collect()
        };
        for pos in 1..k {
            let (child, up) = (order[pos], order[(pos - 1) / 2]);
            parent[heads[child]] = Some(heads[up]);
        }
        out.push(parent);
    }
    Ok(out)
}
