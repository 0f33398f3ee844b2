//! Rank orders for the NCCL-style baselines: rings (one per channel) and chains/trees, chosen
//! from the topology as NCCL's search does in spirit.
//!
//! * One node: as many directed Hamiltonian cycles of the link graph as the link and switch
//!   capacities carry (in units of the slowest link), at most [`MAX_RINGS`], found by
//!   [`super::search::pack`] (NCCL builds as many rings as the NVLinks allow): four on a 2-D
//!   torus, six on a 3-D torus or a 6-D hypercube, two on a mesh, a cycle and its reverse
//!   wherever links go both ways. A single ring (NVSwitch systems) is used on two channels,
//!   as NCCL duplicates channels on NVLink.
//! * No Hamiltonian cycle (a star- or tree-like part, an odd mesh): a relayed ring and its
//!   reverse over a spanning tree's preorder, each hop between ranks without a link relayed
//!   along a shortest path ([`super::relay`]), as NCCL routes such hops through other GPUs.
//!   Only a disconnected fabric has no ring ([`super::relay::RelayError::Disconnected`]).
//! * Several nodes: one ring per NIC (GPUs sharing a NIC form one group). Ring `c` enters
//!   every node at a GPU of NIC group `c` and leaves it from the other GPU of that group, or
//!   from a GPU of group `c + 1` when NICs are per GPU, visiting the node's other GPUs on a
//!   Hamiltonian path in between: ranks grouped by node with one inter-node hop per node
//!   boundary, and every NIC used by one ring per direction. Where that fails (a node
//!   without such a path, nodes that cannot be chained), the relayed ring.
//! * Trees: a chain along each ring on one node (along a Hamiltonian path, else along the
//!   relayed order); across nodes NCCL's double binary tree over the nodes with a chain in
//!   each (relayed where a node has no Hamiltonian path).

use super::relay;
use super::search;
use crate::remembered::Remembered;
use crate::topology::Topology;
use anyhow::{bail, Result};
use std::cell::Cell;
use std::collections::{HashMap, HashSet};

/// Most rings searched for on one node.
pub const MAX_RINGS: usize = 16;

/// DFS nodes a Hamiltonian path search (one node of a multi-node fabric) may visit before
/// it gives up.
const SEARCH_BUDGET: usize = 100_000;

/// Residual capacities of a set of ranks' links and switch constraints, in units.
struct Residual {
    /// The slowest link's bandwidth: one unit.
    unit: f64,
    link: HashMap<(usize, usize), i64>,
    switch: Vec<i64>,
    covers: HashMap<(usize, usize), Vec<usize>>,
    /// Out-neighbours of each rank (inside the set), best first.
    adj: HashMap<usize, Vec<usize>>,
}

impl Residual {
    fn new(topo: &Topology, ranks: &[usize]) -> Residual {
        let set: HashSet<usize> = ranks.iter().copied().collect();
        let inside = |r: usize| set.contains(&r);
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
            unit,
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

/// The capacities of the links among `ranks` in units of their slowest link (as
/// [`super::search::Capacities`], vertex `i` being `ranks[i]`) and the most rings they can
/// carry: every rank's in- and out-units, its switch ports, [`MAX_RINGS`].
fn capacities(topo: &Topology, ranks: &[usize]) -> (search::Capacities, usize) {
    let res = Residual::new(topo, ranks);
    let local: HashMap<usize, usize> = ranks.iter().enumerate().map(|(i, &r)| (r, i)).collect();
    let mut arcs: Vec<search::Arc> = res
        .link
        .iter()
        .map(|(&(a, b), &units)| search::Arc {
            src: local[&a],
            dst: local[&b],
            units,
            pools: res.covers[&(a, b)].clone(),
        })
        .collect();
    arcs.sort_by_key(|a| (a.src, a.dst));
    let caps = search::Capacities {
        vertices: ranks.len(),
        arcs,
        pools: res.switch.clone(),
    };
    let by_links = (0..ranks.len())
        .map(|v| {
            let sum = |out: bool| -> i64 {
                (caps.arcs.iter())
                    .filter(|a| if out { a.src == v } else { a.dst == v })
                    .map(|a| a.units)
                    .sum()
            };
            sum(true).min(sum(false))
        })
        .min()
        .unwrap_or(0)
        .clamp(0, MAX_RINGS as i64) as usize;
    // Switch constraints (NVSwitch ports) may allow fewer rings than the links.
    let by_ports = ranks
        .iter()
        .map(|&r| {
            let (i, o) = topo.rank_bandwidth(r);
            ((i.min(o) / res.unit) + 1e-9).floor().max(1.0) as usize
        })
        .min()
        .unwrap_or(1);
    (caps, by_links.min(by_ports))
}

/// As many directed Hamiltonian cycles over `ranks` as fit the capacities (see the module
/// docs); none where there is no such cycle or the search found none.
fn pack_cycles(topo: &Topology, ranks: &[usize]) -> Vec<Vec<usize>> {
    if ranks.len() == 1 {
        return vec![ranks.to_vec()];
    }
    let (caps, bound) = capacities(topo, ranks);
    packed(caps, bound)
        .into_iter()
        .map(|cycle| cycle.into_iter().map(|v| ranks[v]).collect())
        .collect()
}

/// The ring of every channel NCCL-style (see the module docs); `channels` overrides the
/// number of channels (rings are reused in turn). A ring's consecutive ranks share a link
/// unless no Hamiltonian cycle was found: then they may be joined by a relayed path (see
/// [`super::relay`]). An error only for a fabric without ranks or a disconnected one.
///
/// The search is a function of the fabric alone (its name aside), and one run asks for the
/// same fabric's rings several times (the allgather's and the broadcast's rings-as-paths
/// construction, NCCL's baselines, its tuner): the rings of the last [`REMEMBERED`] fabrics
/// are kept and handed out again.
pub fn ring_orders(topo: &Topology, channels: Option<usize>) -> Result<Vec<Vec<usize>>> {
    if topo.ranks == 0 {
        bail!("topology '{}' has no ranks", topo.name);
    }
    let rings = match remembered(topo) {
        Some(rings) => rings,
        None => {
            let rings = search_rings(topo)?;
            remember(topo, &rings);
            rings
        }
    };
    Ok(match channels {
        Some(c) if c > 0 => (0..c).map(|i| rings[i % rings.len()].clone()).collect(),
        _ => rings,
    })
}

/// [`search::pack`] of `caps` and `bound`, a pure function of them: the packings of the
/// last [`REMEMBERED`] inputs are kept. A fabric and its reversal often give the same input
/// (links both ways with equal capacities and no switch constraints: a torus, a mesh, a
/// random fabric), so an allreduce's reduce-scatter, searched on the reversed fabric, does
/// not search again for the allgather's rings (random:24:1, about 1.5 s).
fn packed(caps: search::Capacities, bound: usize) -> Vec<Vec<usize>> {
    let same = |(c, b): &(search::Capacities, usize)| *b == bound && *c == caps;
    if let Some(cycles) = PACKED.find(same) {
        return cycles;
    }
    PACKS.with(|n| n.set(n.get() + 1));
    let cycles = search::pack(&caps, bound);
    PACKED.keep((caps.clone(), bound), cycles.clone(), same);
    cycles
}

/// The inputs (capacities, bound) and results of [`packed`]'s last searches.
static PACKED: Remembered<(search::Capacities, usize), Vec<Vec<usize>>> =
    Remembered::new(REMEMBERED);

thread_local! {
    /// Cycle packings run on this thread (a test's count of work).
    static PACKS: Cell<usize> = const { Cell::new(0) };
}

/// Cycle packings ([`search::pack`]) run on this thread, rather than handed out again.
pub fn cycle_packings() -> usize {
    PACKS.with(Cell::get)
}

/// Fabrics whose rings [`ring_orders`] keeps.
pub const REMEMBERED: usize = 16;

/// The fabrics (named "") and rings [`ring_orders`] found last.
static RINGS: Remembered<Topology, Vec<Vec<usize>>> = Remembered::new(REMEMBERED);

thread_local! {
    /// Ring searches run on this thread (a test's count of work, not shared with other tests).
    static SEARCHES: Cell<usize> = const { Cell::new(0) };
}

/// Ring searches [`ring_orders`] ran on this thread, rather than hand out remembered rings.
pub fn ring_searches() -> usize {
    SEARCHES.with(Cell::get)
}

fn remembered(topo: &Topology) -> Option<Vec<Vec<usize>>> {
    RINGS.find(|t| same_fabric(t, topo))
}

fn remember(topo: &Topology, rings: &[Vec<usize>]) {
    let mut key = topo.clone();
    key.name.clear();
    RINGS.keep(key, rings.to_vec(), |t| same_fabric(t, topo));
}

/// Equal but for the name: the same ranks, nodes, links and switch constraints, in order.
fn same_fabric(a: &Topology, b: &Topology) -> bool {
    a.ranks == b.ranks
        && a.node_of == b.node_of
        && a.links == b.links
        && a.switches == b.switches
        && a.runtime == b.runtime
}

/// The rings of [`ring_orders`], searched for.
fn search_rings(topo: &Topology) -> Result<Vec<Vec<usize>>> {
    SEARCHES.with(|n| n.set(n.get() + 1));
    Ok(if topo.nodes() <= 1 {
        let all: Vec<usize> = (0..topo.ranks).collect();
        let mut rings = pack_cycles(topo, &all);
        if rings.is_empty() {
            rings = relayed_rings(topo)?;
        }
        if rings.len() == 1 {
            rings.push(rings[0].clone());
        }
        rings
    } else {
        let (numbered, back) = node_major(topo);
        let rings = match multi_node_rings(&numbered) {
            Ok(rings) => rings,
            Err(_) => relayed_rings(&numbered)?,
        };
        (rings.into_iter())
            .map(|ring| ring.into_iter().map(|r| back[r]).collect())
            .collect()
    })
}

/// A fabric of several nodes in its node-major canonical numbering
/// ([`crate::topology::canonical::canonical`]) and, per rank of it, the rank it is in `topo`:
/// NCCL builds its rings and trees from GPUs, NICs and links, whatever ids the ranks have,
/// so its baselines are searched where a renumbered cluster looks as built (4 x DGX-H100 on
/// rails, renumbered: one ring at 50.0 GB/s at 1 GB before, the built-in's 398.3 now). As
/// numbered where there is no such numbering.
///
/// The numberings of the last [`REMEMBERED`] fabrics are kept: the tuner asks for the trees
/// of every size.
fn node_major(topo: &Topology) -> (Topology, Vec<usize>) {
    if let Some(found) = NODE_MAJOR.find(|t| same_fabric(t, topo)) {
        return found;
    }
    let found = match crate::topology::canonical::canonical(topo, None) {
        Some((numbered, to)) => {
            let mut back = vec![0; to.len()];
            for (r, &t) in to.iter().enumerate() {
                back[t] = r;
            }
            (numbered, back)
        }
        None => (topo.clone(), (0..topo.ranks).collect()),
    };
    let mut key = topo.clone();
    key.name.clear();
    NODE_MAJOR.keep(key, found.clone(), |t| same_fabric(t, topo));
    found
}

/// The fabrics (named "") and numberings [`node_major`] found last.
static NODE_MAJOR: Remembered<Topology, (Topology, Vec<usize>)> = Remembered::new(REMEMBERED);

/// A relayed ring over every rank and its reverse ([`relay::relayed_order`]).
fn relayed_rings(topo: &Topology) -> Result<Vec<Vec<usize>>> {
    let ring = relay::relayed_order(topo)?;
    let mut back = ring.clone();
    if back.len() > 1 {
        back[1..].reverse();
    }
    Ok(vec![ring, back])
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
            if k % 2 == 0 && linked(&alt) {
                alt
            } else {
                // An odd number of nodes: node i is entered on rail c + i and left on the
                // next node's rail (the last node on the first's), every NIC once per ring
                // set and direction.
                match rail_shifted_ends(&groups, &nodes, c, count) {
                    Some(shifted) if linked(&shifted) => shifted,
                    _ => bail!(
                        "topology '{}': cannot chain the nodes into a ring through their NICs (ring {c})",
                        topo.name
                    ),
                }
            }
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

/// Entry and exit GPU of ring `c` in every node when the ring crosses each node boundary on
/// one rail: node i is entered at NIC group c + i and left from the group the next node is
/// entered at (the last node from group c); `None` where a node with several GPUs would be
/// entered and left at the same GPU.
fn rail_shifted_ends(
    groups: &[Vec<RankSet>],
    nodes: &[RankSet],
    c: usize,
    count: usize,
) -> Option<Vec<(usize, usize)>> {
    let k = nodes.len();
    let gpu = |node: usize, group: usize| groups[node][group % count][0];
    let ends: Vec<(usize, usize)> = (0..k)
        .map(|i| {
            let exit_group = if i + 1 < k { c + i + 1 } else { c };
            (gpu(i, c + i), gpu(i, exit_group))
        })
        .collect();
    let distinct = (0..k).all(|i| nodes[i].len() < 2 || ends[i].0 != ends[i].1);
    distinct.then_some(ends)
}

/// The tree of every channel for the NCCL tree baseline, as a parent per rank (`None` for
/// the root). One node: a chain along the channel's ring, rotated per channel (along a
/// Hamiltonian path where there is no ring, else along the relayed order of
/// [`relay::relayed_order`], whose hops the program relays). Several nodes: NCCL's double
/// binary tree over the nodes (channels alternate between a heap-ordered binary tree and the
/// same over the reversed node order, so leaves of one are inner nodes of the other), whose
/// node heads are the GPUs of NIC group `c`, and a chain inside each node starting at its
/// head (relayed where the node has no Hamiltonian path); where the nodes have no NICs to
/// head them, the one-node chains over the whole fabric. `channels` overrides the channel
/// count.
pub fn tree_parents(topo: &Topology, channels: Option<usize>) -> Result<Vec<Vec<Option<usize>>>> {
    if topo.ranks == 0 {
        bail!("topology '{}' has no ranks", topo.name);
    }
    if topo.nodes() > 1 {
        let (numbered, back) = node_major(topo);
        if let Ok(trees) = double_binary_trees(&numbered, channels) {
            let renumbered = |tree: Vec<Option<usize>>| {
                let mut parent = vec![None; tree.len()];
                for (v, p) in tree.into_iter().enumerate() {
                    parent[back[v]] = p.map(|p| back[p]);
                }
                parent
            };
            return Ok(trees.into_iter().map(renumbered).collect());
        }
    }
    chains(topo, channels)
}

/// The one-node trees of [`tree_parents`]: chains along the rings, a Hamiltonian path or the
/// relayed order.
fn chains(topo: &Topology, channels: Option<usize>) -> Result<Vec<Vec<Option<usize>>>> {
    let n = topo.ranks;
    let all: Vec<usize> = (0..n).collect();
    let rings = if topo.nodes() <= 1 {
        pack_cycles(topo, &all)
    } else {
        Vec::new()
    };
    // Cycles may be rotated freely; a bare path may not.
    let (base, closed): (Vec<Vec<usize>>, bool) = if !rings.is_empty() {
        (rings, true)
    } else if let Some(p) = hamiltonian_path(topo, &all, 0, None) {
        (vec![p], false)
    } else {
        (vec![relay::relayed_order(topo)?], false)
    };
    let nch = channels.unwrap_or(base.len().max(2)).max(1);
    let copies = nch.div_ceil(base.len());
    Ok((0..nch)
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
        .collect())
}

/// A chain through `node` from `head`: a Hamiltonian path of links, else the depth-first
/// preorder of the node's links (its hops relayed); `None` where the node's links do not
/// join its ranks.
fn node_chain(topo: &Topology, node: &[usize], head: usize) -> Option<Vec<usize>> {
    if let Some(chain) = hamiltonian_path(topo, node, head, None) {
        return Some(chain);
    }
    let adj = relay::neighbours(topo);
    let mut inside = vec![false; topo.ranks];
    for &r in node {
        inside[r] = true;
    }
    let order = relay::preorder(&adj, &inside, head, false);
    (order.len() == node.len()).then_some(order)
}

/// The multi-node trees of [`tree_parents`].
fn double_binary_trees(
    topo: &Topology,
    channels: Option<usize>,
) -> Result<Vec<Vec<Option<usize>>>> {
    let n = topo.ranks;
    let (nodes, groups, count) = nic_groups_per_node(topo)?;
    let k = nodes.len();
    let nch = channels.unwrap_or(count.max(2)).max(1);
    let mut out = Vec::with_capacity(nch);
    for c in 0..nch {
        let mut parent = vec![None; n];
        let heads: Vec<usize> = (0..k).map(|i| groups[i][c % groups[i].len()][0]).collect();
        for i in 0..k {
            let Some(chain) = node_chain(topo, &nodes[i], heads[i]) else {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::baseline::{self, BaselineOptions, RelayError};
    use crate::simulate::{simulate, SimOptions};
    use crate::topology::{self, Link};
    use runtime::ir::Collective;

    /// A one-node fabric of 25 GB/s links both ways between the `pairs` (a pair listed `m`
    /// times is one link of `m` × 25 GB/s).
    fn fabric(name: &str, n: usize, pairs: &[(usize, usize)]) -> Topology {
        let mut mult: HashMap<(usize, usize), f64> = HashMap::new();
        for &(a, b) in pairs.iter().filter(|p| p.0 != p.1) {
            *mult.entry((a.min(b), a.max(b))).or_insert(0.0) += 1.0;
        }
        let mut keys: Vec<_> = mult.keys().copied().collect();
        keys.sort_unstable();
        let links = keys
            .iter()
            .flat_map(|&(a, b)| [(a, b), (b, a)])
            .map(|(src, dst)| Link {
                src,
                dst,
                bandwidth: 25.0 * mult[&(src.min(dst), src.max(dst))],
                alpha: 0.7,
            })
            .collect();
        Topology {
            name: name.into(),
            ranks: n,
            node_of: vec![0; n],
            links,
            switches: Vec::new(),
            runtime: None,
        }
    }

    /// The rank count and neighbour pairs of a torus (wrap-around in every dimension).
    fn torus(dims: &[usize]) -> (usize, Vec<(usize, usize)>) {
        let n: usize = dims.iter().product();
        let mut pairs = Vec::new();
        for v in 0..n {
            let mut stride = 1;
            for &d in dims.iter().rev() {
                let coord = (v / stride) % d;
                pairs.push((v, v - coord * stride + ((coord + 1) % d) * stride));
                stride *= d;
            }
        }
        pairs.sort_unstable_by_key(|&(a, b)| (a.min(b), a.max(b)));
        pairs.dedup_by_key(|p| (p.0.min(p.1), p.0.max(p.1)));
        (n, pairs)
    }

    /// An `r` × `c` mesh (no wrap-around).
    fn mesh(r: usize, c: usize) -> (usize, Vec<(usize, usize)>) {
        let mut pairs = Vec::new();
        for v in 0..r * c {
            if v % c + 1 < c {
                pairs.push((v, v + 1));
            }
            if v / c + 1 < r {
                pairs.push((v, v + c));
            }
        }
        (r * c, pairs)
    }

    /// The `d`-dimensional hypercube.
    fn hypercube(d: usize) -> (usize, Vec<(usize, usize)>) {
        let n = 1 << d;
        let pairs = (0..n)
            .flat_map(|v| (0..d).map(move |k| (v, v ^ (1 << k))))
            .filter(|&(a, b)| a < b)
            .collect();
        (n, pairs)
    }

    /// The same fabric with rank `v` renamed `(37 v + 11) mod n` (37 is prime to every
    /// size used here).
    fn permuted((n, pairs): &(usize, Vec<(usize, usize)>)) -> (usize, Vec<(usize, usize)>) {
        let p = |v: usize| (37 * v + 11) % n;
        (*n, pairs.iter().map(|&(a, b)| (p(a), p(b))).collect())
    }

    /// Checks that every ring visits every rank once over links and that the rings use no
    /// link more often than its 25 GB/s units.
    fn check_rings(topo: &Topology, rings: &[Vec<usize>]) {
        let mut used: HashMap<(usize, usize), f64> = HashMap::new();
        for ring in rings {
            let mut seen: Vec<usize> = ring.clone();
            seen.sort_unstable();
            assert_eq!(seen, (0..topo.ranks).collect::<Vec<_>>(), "{}", topo.name);
            for (i, &a) in ring.iter().enumerate() {
                let b = ring[(i + 1) % ring.len()];
                *used.entry((a, b)).or_insert(0.0) += 25.0;
            }
        }
        for (&(a, b), &bw) in &used {
            let link = topo.link(a, b);
            assert!(
                link.is_some_and(|l| l.bandwidth >= bw),
                "{}: {a}->{b}",
                topo.name
            );
        }
    }

    /// The named fabrics of the ring-count tests, with the rings expected.
    fn regular_fabrics() -> Vec<(Topology, usize)> {
        let mut out: Vec<(Topology, usize)> = ["torus-2d:4x4", "torus-2d:4x8", "torus-2d:8x8"]
            .iter()
            .map(|name| (topology::load(name).unwrap(), 4))
            .collect();
        let built = [
            ("torus-3d:4x4x4", torus(&[4, 4, 4]), 6),
            ("hypercube:6", hypercube(6), 6),
            ("mesh:8x8", mesh(8, 8), 2),
            ("torus-2d:8x8", torus(&[8, 8]), 4),
        ];
        for (name, (n, pairs), rings) in built {
            out.push((fabric(name, n, &pairs), rings));
            let (n, pairs) = permuted(&(n, pairs));
            out.push((fabric(&format!("{name}-permuted"), n, &pairs), rings));
        }
        out
    }

    #[test]
    fn a_renumbered_cluster_gets_the_rings_and_trees_of_the_built_one() {
        use crate::topology::multinode::Network;
        for (node, network) in [("dgx-h100", Network::Rail), ("dgx1", Network::Rail)] {
            let built = topology::load_nodes(node, Some(4), Some(network)).unwrap();
            let perm = crate::topology::toml_format::random_permutation(built.ranks, 7);
            let twin = built.relabeled(&perm);
            let (a, b) = (
                ring_orders(&built, None).unwrap(),
                ring_orders(&twin, None).unwrap(),
            );
            assert_eq!(a.len(), b.len(), "{node}");
            // Every hop a link: no relayed ring.
            for (t, rings) in [(&built, &a), (&twin, &b)] {
                for ring in rings {
                    for (i, &x) in ring.iter().enumerate() {
                        let y = ring[(i + 1) % ring.len()];
                        assert!(t.link(x, y).is_some(), "{node}: {x}->{y}");
                    }
                }
            }
            // The trees' node heads: the same count of inter-node tree edges.
            let crossing = |t: &Topology| -> Vec<usize> {
                (tree_parents(t, None).unwrap().iter())
                    .map(|tree| {
                        (tree.iter().enumerate())
                            .filter(|(v, p)| p.is_some_and(|p| t.node_of[p] != t.node_of[*v]))
                            .count()
                    })
                    .collect()
            };
            assert_eq!(crossing(&built), crossing(&twin), "{node}");
        }
    }

    #[test]
    fn a_fabric_asked_again_gets_its_rings_without_a_search() {
        // A fabric no other test builds (a 3×7 torus), under two names.
        let (n, pairs) = torus(&[3, 7]);
        let first = fabric("torus-3x7-a", n, &pairs);
        let second = fabric("torus-3x7-b", n, &pairs);
        let before = ring_searches();
        let rings = ring_orders(&first, None).unwrap();
        let searched = ring_searches();
        assert!(searched <= before + 1);
        assert_eq!(ring_orders(&second, None).unwrap(), rings);
        assert_eq!(ring_orders(&first, Some(3)).unwrap().len(), 3);
        assert_eq!(
            ring_searches(),
            searched,
            "the rings were searched for again"
        );
        // Another fabric is searched for.
        let mut faster = first.clone();
        faster.links[0].bandwidth *= 2.0;
        ring_orders(&faster, None).unwrap();
        assert_eq!(ring_searches(), searched + 1);
    }

    #[test]
    fn a_reversed_fabric_with_the_same_capacities_packs_no_cycles_again() {
        // A fabric no other test builds (a 3×5 torus): its reversal has the same arcs.
        let (n, pairs) = torus(&[3, 5]);
        let topo = fabric("torus-3x5", n, &pairs);
        assert!(topo.equals_its_reversal());
        let rings = ring_orders(&topo, None).unwrap();
        let packed = cycle_packings();
        assert_eq!(ring_orders(&topo.reversed(), None).unwrap(), rings);
        assert_eq!(cycle_packings(), packed, "the cycles were packed again");
    }

    #[test]
    fn rings_use_every_link_of_tori_hypercubes_and_meshes_at_any_labelling() {
        for (topo, expect) in regular_fabrics() {
            let rings = ring_orders(&topo, None).unwrap();
            assert_eq!(rings.len(), expect, "{}", topo.name);
            check_rings(&topo, &rings);
            // Deterministic.
            assert_eq!(ring_orders(&topo, None).unwrap(), rings, "{}", topo.name);
        }
    }

    #[test]
    fn fabrics_of_earlier_searches_keep_their_rings() {
        for (name, expect) in [
            ("dgx1", 6),
            ("fully-connected:8", 7),
            ("amd8", 7),
            ("mi250", 4),
            ("dgx-a100", 2),
            ("ring:8", 2),
            ("ring:2", 2),
        ] {
            let topo = topology::load(name).unwrap();
            let rings = ring_orders(&topo, None).unwrap();
            assert_eq!(rings.len(), expect, "{name}");
            assert!(rings
                .iter()
                .all(|r| (0..r.len()).all(|i| topo.link(r[i], r[(i + 1) % r.len()]).is_some())));
        }
    }

    #[test]
    fn ring_and_tree_programs_of_regular_fabrics_verify_and_simulate() {
        let opts = BaselineOptions::default();
        for (topo, rings) in regular_fabrics() {
            for coll in [Collective::AllGather, Collective::AllReduce] {
                let p = baseline::ring(coll, &topo, &opts).unwrap();
                runtime::verify::verify(&p).unwrap_or_else(|e| panic!("{}: {e}", topo.name));
            }
            let p = baseline::tree(Collective::AllReduce, &topo, &opts).unwrap();
            runtime::verify::verify(&p).unwrap_or_else(|e| panic!("{}: {e}", topo.name));
            // Every ring runs at about one link's 25 GB/s.
            let p = baseline::ring(Collective::AllGather, &topo, &opts).unwrap();
            let r = simulate(&p, &topo, 1 << 30, &SimOptions::default()).unwrap();
            let full = 25.0 * rings as f64;
            assert!(
                r.busbw > 0.95 * full && r.busbw <= full,
                "{}: {}",
                topo.name,
                r.busbw
            );
        }
    }

    /// A seeded random spanning tree on `n` ranks plus `extra` random links, each of 1 to 3
    /// units (no Hamiltonian cycle where the tree part has a cut vertex).
    fn irregular(seed: u64, n: usize, extra: usize) -> Topology {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut pairs = Vec::new();
        for v in 1..n {
            let (u, m) = (rng.gen_range(0..v), rng.gen_range(1..=3));
            pairs.extend(std::iter::repeat_n((u, v), m));
        }
        for _ in 0..extra {
            let (a, b, m) = (
                rng.gen_range(0..n),
                rng.gen_range(0..n),
                rng.gen_range(1..=3),
            );
            pairs.extend(std::iter::repeat_n((a, b), m));
        }
        fabric(&format!("irregular-{seed}"), n, &pairs)
    }

    #[test]
    fn fabrics_without_a_hamiltonian_cycle_get_relayed_rings_and_chains_that_verify() {
        let opts = BaselineOptions {
            channels: None,
            root: 1,
        };
        let mut relayed = 0;
        for seed in 0..12 {
            let topo = irregular(seed, 12, 6);
            let rings = ring_orders(&topo, None).unwrap();
            let direct = |r: &Vec<usize>| {
                (0..r.len()).all(|i| topo.link(r[i], r[(i + 1) % r.len()]).is_some())
            };
            if rings.iter().all(direct) {
                check_rings(&topo, &rings);
                continue;
            }
            relayed += 1;
            assert_eq!(rings.len(), 2, "{}", topo.name);
            for coll in [
                Collective::AllGather,
                Collective::ReduceScatter,
                Collective::AllReduce,
                Collective::Broadcast,
                Collective::Reduce,
            ] {
                let p = baseline::ring(coll, &topo, &opts).unwrap();
                runtime::verify::verify(&p).unwrap_or_else(|e| panic!("{} {coll}: {e}", topo.name));
                let r = simulate(&p, &topo, 1 << 26, &SimOptions::default()).unwrap();
                assert!(r.busbw > 1.0, "{} {coll}: {}", topo.name, r.busbw);
            }
            let p = baseline::tree(Collective::AllReduce, &topo, &opts).unwrap();
            runtime::verify::verify(&p).unwrap_or_else(|e| panic!("{} tree: {e}", topo.name));
            let ring = baseline::model::channel_bus_bandwidth(baseline::Algo::Ring, &topo);
            assert!(ring.unwrap() > 0.0, "{}", topo.name);
        }
        assert!(relayed >= 8, "only {relayed} of 12 fabrics needed relays");
    }

    #[test]
    fn an_odd_number_of_nodes_on_a_rail_network_gets_a_ring_per_nic() {
        // Three DGX-A100s whose GPU i reaches only GPU i of the other nodes: the rings cross
        // each node boundary on one rail, shifted by one rail per node.
        let topo = crate::topology::toml_format::parsed_text(
            "[multinode]\nnode = \"dgx-a100\"\nnodes = 3\nnetwork = \"rail\"\n",
        );
        let rings = ring_orders(&topo, None).unwrap();
        assert_eq!(rings.len(), 8);
        check_rings(&topo, &rings);
        let p = baseline::ring(Collective::AllGather, &topo, &BaselineOptions::default()).unwrap();
        runtime::verify::verify(&p).unwrap();
        // Each NIC (25 GB/s) carries one ring per direction: about 8 × 25 GB/s of busbw.
        let r = simulate(&p, &topo, 1 << 30, &SimOptions::default()).unwrap();
        assert!(r.busbw > 150.0, "{}", r.busbw);
    }

    #[test]
    fn a_star_relays_its_ring_through_the_hub_and_a_disconnected_fabric_is_an_error() {
        let star = topology::load("star:5").unwrap();
        let rings = ring_orders(&star, None).unwrap();
        assert_eq!((rings.len(), rings[0].len()), (2, 5));
        let opts = BaselineOptions::default();
        let p = baseline::ring(Collective::AllGather, &star, &opts).unwrap();
        runtime::verify::verify(&p).unwrap();
        // Every leaf-to-leaf hop goes through the hub: scratch only there.
        assert!(p
            .gpus
            .iter()
            .all(|g| (g.rank == 0) == (g.scratch_chunks > 0)));
        let p = baseline::tree(Collective::AllReduce, &star, &opts).unwrap();
        runtime::verify::verify(&p).unwrap();
        let apart = fabric("apart", 4, &[(0, 1), (2, 3)]);
        let e = baseline::ring(Collective::AllGather, &apart, &opts).unwrap_err();
        assert!(
            matches!(
                e.downcast_ref::<RelayError>(),
                Some(RelayError::Disconnected { from: 0, to: 2, .. })
            ),
            "{e}"
        );
        assert!(baseline::tree(Collective::AllReduce, &apart, &opts).is_err());
    }
}
