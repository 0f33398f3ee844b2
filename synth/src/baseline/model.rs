//! NCCL's own performance model (its tuning model, `src/graph/tuning.cc` in NCCL 2.8/2.9)
//! for the Simple protocol, as a second opinion next to the simulated baselines.
//!
//! NCCL predicts `time = latency + size / (1000 · bw)` (µs, bytes, GB/s) per algorithm:
//!
//! * **Bandwidth.** `busBw = channels × per-channel bandwidth` of the rings / trees its
//!   topology search found. Here it is the total rate of our rings / trees (one flow per
//!   channel over all of its links, shared max-min fairly under the link and switch
//!   constraints; trees counted in one direction). Tree: `busBw = min(0.9 · busBw, 110)`
//!   GB/s on up to two nodes, `min(0.9 · busBw, 80)` beyond. Algorithm bandwidth = busBw ×
//!   n / nsteps for rings (nsteps = 2(n−1) for allreduce, n−1 for allgather and
//!   reduce-scatter, n for broadcast and reduce), busBw / 2 for the tree. NCCL's extra cap
//!   of 235 GB/s on sm_80 GPUs is not applied: a topology does not say which GPU it has.
//! * **Latency.** A base latency (ring 8.4 µs, tree 0) plus per-hop latencies: NVLink ring
//!   3.4 µs, tree 28 µs; network ring 9.6 µs, tree 50 µs. Ring allgather / reduce-scatter /
//!   allreduce pay the intra-node latency on each of their `nsteps − nInterSteps` steps and
//!   the network latency on `nInterSteps` (allreduce 2(nodes−1), allgather and
//!   reduce-scatter nodes−1); ring broadcast / reduce pay one hop latency (NCCL's case of
//!   identical channels). The tree pays `2 · ((n/nodes − 1) · intra + log2(nodes) · net)`.
//!   Multi-node ring allreduce latency is multiplied by 1.9 from `size ≥ n/16 · 64 KiB` on
//!   (NCCL's "plateau" correction).
//! * **Tree correction.** The tree's bandwidth is scaled by NCCL's Simple-protocol factor for
//!   `log2(size / 64)` below 22: 0.9 up to 2^6, then .8, .7, .6, .6, .5 (×6), .6, .6, .7, .8,
//!   .9.

use super::orders::{ring_orders, tree_parents};
use super::relay;
use crate::simulate::max_min_rates;
use crate::topology::Topology;
use anyhow::{bail, Result};
use runtime::ir::Collective;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// An NCCL algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Algo {
    /// Rings (one per channel).
    Ring,
    /// Chains in a node, double binary tree across nodes (allreduce only).
    Tree,
}

/// Base latency of the Simple protocol, µs.
const BASE_LAT_RING: f64 = 8.4;
const BASE_LAT_TREE: f64 = 0.0;
/// Per-hop latency of the Simple protocol over NVLink, µs.
const NVLINK_LAT_RING: f64 = 3.4;
const NVLINK_LAT_TREE: f64 = 28.0;
/// Per-hop latency of the Simple protocol over the network, µs.
const NET_LAT_RING: f64 = 9.6;
const NET_LAT_TREE: f64 = 50.0;
/// Tree bandwidth caps (GB/s) for up to two nodes and beyond.
const MAX_TREE_BW_2NODES: f64 = 110.0;
const MAX_TREE_BW: f64 = 80.0;
/// Simple-protocol tree correction by log2(size / 64), for 0..22.
const TREE_CORRECTION: [f64; 22] = [
    0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.8, 0.7, 0.6, 0.6, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.6, 0.6,
    0.7, 0.8, 0.9,
];

/// Resources (link index, then switch indices offset by the link count) of link `l`.
fn link_resources(topo: &Topology, l: usize) -> impl Iterator<Item = usize> + '_ {
    let (a, b) = (topo.links[l].src, topo.links[l].dst);
    std::iter::once(l).chain(
        (0..topo.switches.len())
            .filter(move |&k| topo.switches[k].covers(a, b))
            .map(|k| topo.links.len() + k),
    )
}

/// The links of every hop: the direct link, or where any hop has none, the relayed paths of
/// [`relay::paths`] (as the baseline programs relay them).
fn hop_links(topo: &Topology, hops: &[(usize, usize)]) -> Result<Vec<Vec<usize>>> {
    let ids: HashMap<(usize, usize), usize> = (topo.links.iter().enumerate())
        .map(|(i, l)| ((l.src, l.dst), i))
        .collect();
    let direct: Option<Vec<Vec<usize>>> =
        hops.iter().map(|h| ids.get(h).map(|&l| vec![l])).collect();
    match direct {
        Some(links) => Ok(links),
        None => relay::paths(topo, hops),
    }
}

fn capacities(topo: &Topology) -> Vec<f64> {
    topo.links
        .iter()
        .map(|l| l.bandwidth)
        .chain(topo.switches.iter().map(|s| s.bandwidth))
        .collect()
}

/// The bus bandwidth (GB/s) NCCL's model assigns to an algorithm on `topology` before its
/// refinements: the total max-min fair rate of the channels (a relayed hop crossing every
/// link of its path).
pub fn channel_bus_bandwidth(algo: Algo, topology: &Topology) -> Result<f64> {
    // Each channel's hops: a ring's consecutive ranks, a tree's child-to-parent links.
    let channels: Vec<Vec<(usize, usize)>> = match algo {
        Algo::Ring => (ring_orders(topology, None)?.iter())
            .map(|ring| {
                let n = ring.len();
                let hops = (0..n).map(|j| (ring[j], ring[(j + 1) % n]));
                hops.filter(|&(a, b)| a != b).collect()
            })
            .collect(),
        Algo::Tree => (tree_parents(topology, None)?.iter())
            .map(|parent| {
                (parent.iter().enumerate())
                    .filter_map(|(r, p)| p.map(|p| (r, p)))
                    .collect()
            })
            .collect(),
    };
    let all: Vec<(usize, usize)> = channels.iter().flatten().copied().collect();
    let mut paths = hop_links(topology, &all)?.into_iter();
    let flows: Vec<Vec<usize>> = channels
        .iter()
        .map(|hops| {
            (paths.by_ref().take(hops.len()).flatten())
                .flat_map(|l| link_resources(topology, l))
                .collect()
        })
        .collect();
    let rates = max_min_rates(&capacities(topology), &flows);
    Ok(rates.iter().filter(|r| r.is_finite()).sum())
}

/// NCCL's predicted time (µs) of `coll` with `algo` and the Simple protocol on `topology` at
/// nccl-tests size `size_bytes` (see the module docs). Errors for combinations NCCL does not
/// run (tree for anything but allreduce; rings for alltoall, gather, scatter).
pub fn nccl_model_time_us(
    coll: Collective,
    algo: Algo,
    topology: &Topology,
    size_bytes: u64,
) -> Result<f64> {
    let n = topology.ranks;
    let nodes = topology.nodes().max(1);
    if n <= 1 {
        return Ok(0.0);
    }
    let (nsteps, ninter) = match coll {
        Collective::AllReduce => (2 * (n - 1), 2 * (nodes - 1)),
        Collective::AllGather | Collective::ReduceScatter => (n - 1, nodes - 1),
        Collective::Broadcast | Collective::Reduce => (n, nodes),
        _ => bail!("NCCL runs {coll} as point-to-point sends, not with a ring or tree model"),
    };
    if algo == Algo::Tree && coll != Collective::AllReduce {
        bail!("NCCL's tree algorithm is defined for allreduce only, not {coll}");
    }
    let mut bus = channel_bus_bandwidth(algo, topology)?;
    let size = size_bytes as f64;
    let (bw, lat) = match algo {
        Algo::Ring => {
            let bw = bus * n as f64 / nsteps as f64;
            let hop = if nodes > 1 {
                NET_LAT_RING
            } else {
                NVLINK_LAT_RING
            };
            let mut lat = BASE_LAT_RING
                + match coll {
                    Collective::Broadcast | Collective::Reduce => hop,
                    _ => (nsteps - ninter) as f64 * NVLINK_LAT_RING + ninter as f64 * NET_LAT_RING,
                };
            if nodes > 1 && coll == Collective::AllReduce && size >= n as f64 / 16.0 * 65536.0 {
                lat *= 1.9;
            }
            (bw, lat)
        }
        Algo::Tree => {
            let cap = if nodes > 2 {
                MAX_TREE_BW
            } else {
                MAX_TREE_BW_2NODES
            };
            bus = (bus * 0.9).min(cap);
            let mut bw = bus * 0.5;
            let log = (size_bytes >> 6).checked_ilog2().unwrap_or(0) as usize;
            if log < TREE_CORRECTION.len() {
                bw *= TREE_CORRECTION[log];
            }
            let log_nodes = (nodes as u64).ilog2() as f64;
            let lat = BASE_LAT_TREE
                + 2.0 * ((n / nodes - 1) as f64 * NVLINK_LAT_TREE + log_nodes * NET_LAT_TREE);
            (bw, lat)
        }
    };
    if bw <= 0.0 {
        bail!(
            "the {algo:?} channels of '{}' have no bandwidth",
            topology.name
        );
    }
    Ok(lat + size / (1000.0 * bw))
}

/// NCCL's choice: the smallest predicted time over the algorithms it defines for `coll`,
/// as nccl-tests busbw (GB/s) at `size_bytes`, with the algorithm chosen.
pub fn nccl_model_busbw(
    coll: Collective,
    topology: &Topology,
    size_bytes: u64,
) -> Result<(f64, Algo)> {
    let mut best: Option<(f64, Algo)> = None;
    let mut first_err = None;
    for algo in [Algo::Ring, Algo::Tree] {
        match nccl_model_time_us(coll, algo, topology, size_bytes) {
            Ok(t) => {
                if best.is_none_or(|(b, _)| t < b) {
                    best = Some((t, algo));
                }
            }
            Err(e) => first_err = first_err.or(Some(e)),
        }
    }
    let Some((t, algo)) = best else {
        return Err(first_err.unwrap_or_else(|| anyhow::anyhow!("no NCCL algorithm for {coll}")));
    };
    let algbw = if t > 0.0 {
        size_bytes as f64 / (t * 1e3)
    } else {
        f64::INFINITY
    };
    Ok((algbw * coll.busbw_factor(topology.ranks), algo))
}
