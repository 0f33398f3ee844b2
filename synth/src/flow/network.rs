//! A topology as a flow network: ranks are vertices, and every switch constraint (NVSwitch
//! port, NIC, PCIe switch) becomes a pair of vertices joined by one edge of its bandwidth,
//! which every link it governs passes through. Bandwidths become exact integers (GB/s times a
//! common denominator), so flows and cuts are computed without rounding.
//!
//! A link `u -> v` governed by constraints `k1, ..., km` (those whose sources outnumber their
//! destinations last) becomes the path `u -> k1 -> ... -> km -> v`; parallel pieces of paths
//! are merged by adding their capacities. Every schedule on the fabric is a flow here, so cuts
//! of this network bound every algorithm. The network is *exact* (every flow is also a
//! schedule) when each switch vertex joins only ranks that have links between them, no
//! link is slower than the constraints it passes, and no constraint is shared by several
//! senders and several receivers (where a flow would fan out from the switch itself).

use crate::topology::Topology;
use anyhow::{bail, Result};
use num_integer::Integer;
use num_rational::Ratio;
use std::collections::{BTreeMap, HashSet};

/// The largest common denominator accepted for bandwidths (GB/s).
const MAX_DENOMINATOR: i128 = 1 << 40;

/// A topology as an integer-capacity flow network.
#[derive(Debug, Clone)]
pub struct FlowNetwork {
    /// Ranks are vertices `0..ranks`; switch vertices follow.
    pub ranks: usize,
    /// Total number of vertices.
    pub vertices: usize,
    /// Merged edges `(from, to, capacity)`; capacity in GB/s × `denominator`.
    pub edges: Vec<(usize, usize, i128)>,
    /// The common denominator of every bandwidth: capacity / denominator = GB/s.
    pub denominator: i128,
    /// Whether every flow is also realizable on the fabric (see the module documentation).
    pub exact: bool,
}

/// Bandwidth `gbps` as an exact fraction (the simplest within 1e-9 relative).
fn exact(gbps: f64) -> Result<Ratio<i128>> {
    let r = Ratio::<i64>::approximate_float(gbps).filter(|r| {
        *r.denom() > 0
            && ((*r.numer() as f64 / *r.denom() as f64) - gbps).abs() <= 1e-9 * gbps.abs().max(1.0)
    });
    match r {
        Some(r) if *r.numer() > 0 => Ok(Ratio::new(*r.numer() as i128, *r.denom() as i128)),
        _ => bail!("bandwidth {gbps} GB/s cannot be used as an exact capacity"),
    }
}

impl FlowNetwork {
    /// Builds the network of `topology` with its real bandwidths.
    pub fn new(topology: &Topology) -> Result<FlowNetwork> {
        let links: Vec<f64> = topology.links.iter().map(|l| l.bandwidth).collect();
        let switches: Vec<f64> = topology.switches.iter().map(|s| s.bandwidth).collect();
        let all: Vec<Ratio<i128>> = links
            .iter()
            .chain(&switches)
            .map(|&b| exact(b))
            .collect::<Result<_>>()?;
        let mut denominator = 1i128;
        for r in &all {
            denominator = denominator.lcm(r.denom());
            if denominator > MAX_DENOMINATOR {
                bail!(
                    "the bandwidths of `{}` have no common denominator below 2^40",
                    topology.name
                );
            }
        }
        let ints: Vec<i128> = all.iter().map(|r| (r * denominator).to_integer()).collect();
        let (link_caps, switch_caps) = ints.split_at(links.len());
        Ok(Self::build(topology, link_caps, switch_caps, denominator))
    }

    /// Builds the network with the given integer capacities (links, then switch constraints,
    /// in the topology's order), e.g. the SMT encoding's capacity units.
    pub fn with_capacities(topology: &Topology, links: &[u32], switches: &[u32]) -> FlowNetwork {
        let l: Vec<i128> = links.iter().map(|&c| c as i128).collect();
        let s: Vec<i128> = switches.iter().map(|&c| c as i128).collect();
        Self::build(topology, &l, &s, 1)
    }

    fn build(
        topology: &Topology,
        link_caps: &[i128],
        switch_caps: &[i128],
        denominator: i128,
    ) -> FlowNetwork {
        let n = topology.ranks;
        let inside = |j: usize| n + 2 * j;
        let outside = |j: usize| n + 2 * j + 1;
        let mut merged: BTreeMap<(usize, usize), i128> = BTreeMap::new();
        for (j, &cap) in switch_caps.iter().enumerate() {
            merged.insert((inside(j), outside(j)), cap);
        }
        // Constraints governing each link, those that look like a sender's port first.
        let mut governing = topology.governing_constraints(&topology.out_link_ids());
        let mut slowest_ok = true;
        for (i, l) in topology.links.iter().enumerate() {
            let chain = &mut governing[i];
            chain.sort_by_key(|&j| {
                let s = &topology.switches[j];
                (s.srcs.len() > s.dsts.len(), j)
            });
            let mut at = l.src;
            for &j in chain.iter() {
                *merged.entry((at, inside(j))).or_insert(0) += link_caps[i];
                at = outside(j);
            }
            *merged.entry((at, l.dst)).or_insert(0) += link_caps[i];
            if let Some(min) = chain.iter().map(|&j| switch_caps[j]).min() {
                slowest_ok &= link_caps[i] >= min;
            }
        }
        let vertices = n + 2 * switch_caps.len();
        let edges: Vec<(usize, usize, i128)> =
            merged.into_iter().map(|((a, b), c)| (a, b, c)).collect();
        let exact = slowest_ok
            && no_shared_crossbar(topology)
            && only_real_links(topology, vertices, &edges);
        FlowNetwork {
            ranks: n,
            vertices,
            edges,
            denominator,
            exact,
        }
    }

    /// Total capacity of the edges leaving the vertex set `inside` (ranks and switch
    /// vertices), as an exact number of GB/s × denominator.
    pub fn out_capacity(&self, inside: &[bool]) -> i128 {
        self.edges
            .iter()
            .filter(|&&(a, b, _)| inside[a] && !inside[b])
            .map(|e| e.2)
            .sum()
    }

    /// The same network with every edge reversed (for the duals of combining collectives).
    pub fn reversed(&self) -> FlowNetwork {
        FlowNetwork {
            edges: self.edges.iter().map(|&(a, b, c)| (b, a, c)).collect(),
            ..self.clone()
        }
    }
}

/// Whether no switch constraint is shared by several senders and several receivers (a
/// NIC of two GPUs, an oversubscribed spine, a shared hub). A flow passes such a vertex
/// once and may leave it for several ranks, a copy the fabric carries once per receiver:
/// `dgx2x2` allgather, 162.5 GB/s busbw by flow, 156.25 by the bytes all links carry
/// together (`cutbound`), which a schedule reaches.
fn no_shared_crossbar(topology: &Topology) -> bool {
    topology
        .switches
        .iter()
        .all(|s| s.srcs.len() <= 1 || s.dsts.len() <= 1)
}

/// Whether every rank-to-rank path through switch vertices joins two ranks with a link.
fn only_real_links(topology: &Topology, vertices: usize, edges: &[(usize, usize, i128)]) -> bool {
    let n = topology.ranks;
    let mut succ = vec![Vec::new(); vertices];
    for &(a, b, _) in edges {
        succ[a].push(b);
    }
    let linked: HashSet<(usize, usize)> = topology.links.iter().map(|l| (l.src, l.dst)).collect();
    for u in 0..n {
        // Ranks reachable from u through switch vertices only.
        let mut seen = vec![false; vertices];
        let mut stack: Vec<usize> = succ[u].iter().copied().filter(|&w| w >= n).collect();
        while let Some(w) = stack.pop() {
            if seen[w] {
                continue;
            }
            seen[w] = true;
            for &x in &succ[w] {
                if x >= n {
                    stack.push(x);
                } else if x != u && !linked.contains(&(u, x)) {
                    return false;
                }
            }
        }
    }
    true
}
