//! NCCL's own performance model, its tuner (`src/graph/tuning.cc` of NCCL 2.8/2.9, NVLS as
//! in 2.18): the time it predicts for every algorithm × protocol, and the pair it runs
//! ([`Tuner::choose`]). Every figure is a field of [`NcclTuning`] (`--model FILE`).
//!
//! NCCL predicts `time = latency + size / (1000 · algbw)` (µs, bytes, GB/s):
//!
//! * **Bandwidth.** `busBw = channels × per-channel bandwidth` of the rings / trees its
//!   topology search found. Here it is the total rate of our rings / trees (one flow per
//!   channel over all of its links, shared max-min fairly under the link and switch
//!   constraints; trees counted in one direction). Ring LL: `min(llMaxBw, busBw / 4)`
//!   across nodes or for allreduce / reduce, else `busBw / 3`; ring LL128: `busBw × 0.92`
//!   (0.7 with one rank per node) capped at the per-channel LL128 cap × channels. Tree:
//!   `min(0.9 · busBw, 110)` GB/s on up to two nodes, 80 beyond; LL `min(busBw / 3.8,
//!   llMaxBw)`, LL128 `× 7/9` on one node, `× 0.915` across, capped at 7/9 of the LL128 cap.
//!   Algorithm bandwidth = busBw × n / nsteps for rings (nsteps = 2(n−1) for allreduce, n−1
//!   for allgather and reduce-scatter, n for broadcast and reduce), busBw / 2 for the tree
//!   times its correction factor by `log2(size / 64)`. NCCL's extra cap of 235 GB/s on sm_80
//!   GPUs is not applied: a topology does not say which GPU it has.
//! * **Latency.** A base latency per algorithm and protocol plus per-hop latencies per
//!   link kind (NVLink inside a node, network between nodes). Ring allgather /
//!   reduce-scatter / allreduce pay the intra-node latency on each of their `nsteps −
//!   nInterSteps` steps and the network latency on `nInterSteps` (allreduce 2(nodes−1),
//!   allgather and reduce-scatter nodes−1); ring broadcast / reduce pay one hop latency
//!   (NCCL's case of identical channels). The tree pays `2 · ((n/nodes − 1) · intra +
//!   log2(nodes) · net)`. With several nodes the intra-node LL latency is ×1.8, and
//!   multi-node ring/Simple allreduce latency ×1.9 from `size ≥ n/16 · 64 KiB` on.
//! * **NVLS** (NVLink SHARP, NCCL ≥ 2.17, allreduce, Simple only) on one node whose switches
//!   can reduce ([`NcclTuning::nvls_min_port_bw`]): each rank sends its whole buffer into
//!   the switch (reduced there) and receives its reduced 1/n, then sends that 1/n and
//!   receives the whole result (multicast), so each rank's switch port carries
//!   `size · (n+1)/n` each way: `time = nvls latency + size · (n+1)/n / (1000 · port bw)`.
//!   MSCCL XML cannot express NVLS, so this model is also its baseline figure
//!   ([`Tuner::nvls_time_us`]), not an event simulation.

use super::orders::{ring_orders, tree_parents};
use super::relay;
use crate::simulate::max_min_rates;
use crate::simulate::NcclTuning;
use crate::topology::Topology;
use anyhow::{anyhow, bail, Result};
use runtime::ir::{Collective, Protocol};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// An NCCL algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Algo {
    /// Rings (one per channel).
    Ring,
    /// Chains in a node, double binary tree across nodes (allreduce only).
    Tree,
    /// NVLink SHARP: the reduction done by the NVSwitches (allreduce on one node).
    Nvls,
    /// Grouped point-to-point sends (alltoall, gather, scatter).
    P2p,
}

impl Algo {
    /// The lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Algo::Ring => "ring",
            Algo::Tree => "tree",
            Algo::Nvls => "nvls",
            Algo::P2p => "p2p",
        }
    }
}

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

/// Each channel's hops of `algo` on `topology`: a ring's consecutive ranks, a tree's
/// child-to-parent links.
fn channel_hops(algo: Algo, topology: &Topology) -> Result<Vec<Vec<(usize, usize)>>> {
    Ok(match algo {
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
        Algo::Nvls | Algo::P2p => bail!("NCCL's model has no channels for {algo:?}"),
    })
}

/// The total max-min fair rate (GB/s) of `channels` (one flow each over its hops' links).
fn bus_of(topology: &Topology, channels: &[Vec<(usize, usize)>]) -> Result<f64> {
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

/// The bus bandwidth (GB/s) NCCL's model assigns to an algorithm (ring or tree) on
/// `topology` before its refinements: the total max-min fair rate of the channels (a
/// relayed hop crossing every link of its path).
pub fn channel_bus_bandwidth(algo: Algo, topology: &Topology) -> Result<f64> {
    bus_of(topology, &channel_hops(algo, topology)?)
}

/// The algorithm and protocol NCCL's tuner runs at one size.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Choice {
    /// The algorithm.
    pub algo: Algo,
    /// The protocol.
    pub protocol: Protocol,
    /// NCCL's predicted time, µs (`None` for point-to-point, which NCCL does not tune).
    pub predicted_us: Option<f64>,
}

impl Choice {
    /// `algo/protocol`, e.g. `ring/LL`.
    pub fn label(&self) -> String {
        format!("{}/{}", self.algo.name(), self.protocol.name())
    }
}

/// One algorithm's channels as NCCL's model sees them.
#[derive(Debug, Clone, Copy)]
struct Channels {
    /// Total bus bandwidth, GB/s.
    bus: f64,
    /// Number of channels.
    count: usize,
}

/// NCCL's tuner for one collective on one fabric: the channels' bandwidths are computed
/// once, then [`Tuner::time_us`] predicts any algorithm × protocol at any size.
#[derive(Debug, Clone)]
pub struct Tuner {
    coll: Collective,
    ranks: usize,
    nodes: usize,
    params: NcclTuning,
    ring: Option<Channels>,
    tree: Option<Channels>,
    /// The per-rank switch port bandwidth where NVLS applies.
    nvls_port_bw: Option<f64>,
}

impl Tuner {
    /// The tuner of `coll` on `topology`. Errors where NCCL has no ring for a collective it
    /// runs on rings (a disconnected fabric).
    pub fn new(coll: Collective, topology: &Topology, params: &NcclTuning) -> Result<Tuner> {
        let channels = |algo| -> Result<Channels> {
            let hops = channel_hops(algo, topology)?;
            Ok(Channels {
                bus: bus_of(topology, &hops)?,
                count: hops.len().max(1),
            })
        };
        let rings = !matches!(
            coll,
            Collective::AllToAll | Collective::Gather | Collective::Scatter
        );
        let ring = if rings && topology.ranks > 1 {
            Some(channels(Algo::Ring)?)
        } else {
            None
        };
        let tree = if coll == Collective::AllReduce && topology.ranks > 1 {
            channels(Algo::Tree).ok()
        } else {
            None
        };
        let nvls_port_bw = (coll == Collective::AllReduce)
            .then(|| nvls_port_bandwidth(topology, params.nvls_min_port_bw))
            .flatten();
        Ok(Tuner {
            coll,
            ranks: topology.ranks,
            nodes: topology.nodes().max(1),
            params: *params,
            ring,
            tree,
            nvls_port_bw,
        })
    }

    /// NCCL's predicted time (µs) of `algo` with `protocol` at nccl-tests size `size_bytes`
    /// (see the module docs). Errors for combinations NCCL does not run (tree for anything
    /// but allreduce; rings for alltoall, gather, scatter; NVLS off NVSwitch-3 boxes or with
    /// LL / LL128; LL128 where disabled).
    pub fn time_us(&self, algo: Algo, protocol: Protocol, size_bytes: u64) -> Result<f64> {
        let (n, nodes, coll, t) = (self.ranks, self.nodes, self.coll, &self.params);
        if n <= 1 {
            return Ok(0.0);
        }
        if protocol == Protocol::LL128 && !t.ll128_enabled {
            bail!("LL128 is disabled in the model");
        }
        let (nsteps, ninter) = match coll {
            Collective::AllReduce => (2 * (n - 1), 2 * (nodes - 1)),
            Collective::AllGather | Collective::ReduceScatter => (n - 1, nodes - 1),
            Collective::Broadcast | Collective::Reduce => (n, nodes),
            _ => bail!("NCCL runs {coll} as point-to-point sends, not with a ring or tree model"),
        };
        let size = size_bytes as f64;
        let ppn = n / nodes;
        let ll_factor = |p: Protocol| {
            if nodes > 1 && p == Protocol::LL {
                t.ll_multinode_factor
            } else {
                1.0
            }
        };
        let ll128_cap = |channels: usize| {
            t.ll128_cap_per_channel(coll).unwrap_or(f64::INFINITY) * channels as f64
        };
        let (algbw, lat) = match algo {
            Algo::Ring => {
                let ring = self
                    .ring
                    .ok_or_else(|| anyhow!("no NCCL ring for {coll}"))?;
                let bus = match protocol {
                    Protocol::Simple => ring.bus,
                    Protocol::LL => {
                        let quarter =
                            nodes > 1 || matches!(coll, Collective::AllReduce | Collective::Reduce);
                        let f = if quarter { 0.25 } else { 1.0 / 3.0 };
                        (ring.bus * f).min(t.ll_max_bw)
                    }
                    Protocol::LL128 => {
                        let f = if ppn < 2 { 0.7 } else { 0.92 };
                        (ring.bus * f).min(ll128_cap(ring.count))
                    }
                };
                let intra = t.ring_hop_us.nvlink.get(protocol) * ll_factor(protocol);
                let net = t.ring_hop_us.network.get(protocol);
                let hops = match coll {
                    Collective::Broadcast | Collective::Reduce => {
                        if nodes > 1 {
                            net
                        } else {
                            intra
                        }
                    }
                    _ => (nsteps - ninter) as f64 * intra + ninter as f64 * net,
                };
                let mut lat = t.ring_base_us.get(protocol) + hops;
                let plateau = protocol == Protocol::Simple
                    && nodes > 1
                    && coll == Collective::AllReduce
                    && size >= n as f64 / 16.0 * 65536.0;
                if plateau {
                    lat *= t.plateau_factor;
                }
                (bus * n as f64 / nsteps as f64, lat)
            }
            Algo::Tree => {
                if coll != Collective::AllReduce {
                    bail!("NCCL's tree algorithm is defined for allreduce only, not {coll}");
                }
                let tree = self.tree.ok_or_else(|| anyhow!("no NCCL tree"))?;
                let cap = t.tree_max_bw[usize::from(nodes > 2)];
                let mut bus = (tree.bus * 0.9).min(cap);
                match protocol {
                    Protocol::Simple => {}
                    Protocol::LL => bus = (bus / 3.8).min(t.ll_max_bw),
                    Protocol::LL128 => {
                        let f = if nodes == 1 { 7.0 / 9.0 } else { 0.915 };
                        bus = (bus * f).min(ll128_cap(tree.count) * 7.0 / 9.0);
                    }
                }
                let mut bw = bus * 0.5;
                let log = (size_bytes >> 6).checked_ilog2().unwrap_or(0) as usize;
                if let Some(c) = t.tree_correction.get(protocol).get(log) {
                    bw *= c;
                }
                let intra = t.tree_hop_us.nvlink.get(protocol) * ll_factor(protocol);
                let net = t.tree_hop_us.network.get(protocol);
                let log_nodes = (nodes as u64).ilog2() as f64;
                let lat = t.tree_base_us.get(protocol)
                    + 2.0 * ((ppn - 1) as f64 * intra + log_nodes * net);
                (bw, lat)
            }
            Algo::Nvls => {
                if protocol != Protocol::Simple {
                    bail!("NVLS runs the Simple protocol only");
                }
                return self
                    .nvls_time_us(size_bytes)
                    .ok_or_else(|| anyhow!("NVLS does not apply to {coll} on this fabric"));
            }
            Algo::P2p => bail!("NCCL does not tune point-to-point sends"),
        };
        if algbw <= 0.0 {
            bail!("the {algo:?} channels have no bandwidth");
        }
        Ok(lat + size / (1000.0 * algbw))
    }

    /// The NVLS model's time (µs) at `size_bytes`, where NVLS applies (see the module docs).
    pub fn nvls_time_us(&self, size_bytes: u64) -> Option<f64> {
        let bw = self.nvls_port_bw?;
        let n = self.ranks as f64;
        Some(self.params.nvls_hop_us + size_bytes as f64 * (n + 1.0) / n / (1000.0 * bw))
    }

    /// What NCCL runs at `size_bytes`: the algorithm × protocol of least predicted time
    /// (point-to-point, Simple, for alltoall, gather and scatter). `None` where NCCL has
    /// nothing (one rank; a collective without rings on a fabric without rings).
    pub fn choose(&self, size_bytes: u64) -> Option<Choice> {
        if matches!(
            self.coll,
            Collective::AllToAll | Collective::Gather | Collective::Scatter
        ) {
            return Some(Choice {
                algo: Algo::P2p,
                protocol: Protocol::Simple,
                predicted_us: None,
            });
        }
        let mut best: Option<Choice> = None;
        for algo in [Algo::Tree, Algo::Ring, Algo::Nvls] {
            for protocol in [Protocol::LL, Protocol::LL128, Protocol::Simple] {
                let Ok(t) = self.time_us(algo, protocol, size_bytes) else {
                    continue;
                };
                if best.is_none_or(|b| b.predicted_us.is_none_or(|bt| t < bt)) {
                    best = Some(Choice {
                        algo,
                        protocol,
                        predicted_us: Some(t),
                    });
                }
            }
        }
        best
    }
}

/// The least per-rank switch port bandwidth (GB/s) of a one-node fabric whose every link is
/// governed by switch constraints of at least `min_port_bw` and whose every rank reaches
/// every other directly (an NVSwitch box that can reduce, NVLS); `None` otherwise.
fn nvls_port_bandwidth(topology: &Topology, min_port_bw: f64) -> Option<f64> {
    let n = topology.ranks;
    if n < 2 || topology.nodes() > 1 || topology.links.len() != n * (n - 1) {
        return None;
    }
    let mut least = f64::INFINITY;
    for l in &topology.links {
        let port = (topology.switches.iter())
            .filter(|s| s.covers(l.src, l.dst))
            .map(|s| s.bandwidth)
            .reduce(f64::min)?;
        least = least.min(port);
    }
    (least >= min_port_bw).then_some(least)
}

/// NCCL's predicted time (µs) of `coll` with `algo` and `protocol` on `topology` at
/// nccl-tests size `size_bytes` ([`Tuner::time_us`]).
pub fn nccl_model_time_us(
    coll: Collective,
    algo: Algo,
    protocol: Protocol,
    topology: &Topology,
    size_bytes: u64,
    params: &NcclTuning,
) -> Result<f64> {
    Tuner::new(coll, topology, params)?.time_us(algo, protocol, size_bytes)
}

/// NCCL's choice ([`Tuner::choose`]) at `size_bytes` with its predicted nccl-tests busbw
/// (GB/s). Errors where NCCL tunes nothing for `coll` (point-to-point collectives).
pub fn nccl_model_busbw(
    coll: Collective,
    topology: &Topology,
    size_bytes: u64,
    params: &NcclTuning,
) -> Result<(f64, Choice)> {
    let choice = Tuner::new(coll, topology, params)?
        .choose(size_bytes)
        .ok_or_else(|| anyhow!("NCCL has no algorithm for {coll} on '{}'", topology.name))?;
    let Some(t) = choice.predicted_us else {
        bail!("NCCL runs {coll} as point-to-point sends, not with a ring or tree model");
    };
    let algbw = if t > 0.0 {
        size_bytes as f64 / (t * 1e3)
    } else {
        f64::INFINITY
    };
    Ok((algbw * coll.busbw_factor(topology.ranks), choice))
}
