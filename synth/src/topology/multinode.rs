//! Multi-node composition: K copies of a node joined by NICs through a fat-tree or rail network.
//!
//! Every inter-node GPU pair the network connects becomes a direct link (bandwidth: what one
//! NIC gives one GPU, alpha: the NIC alpha), and every NIC becomes two switch constraints
//! (`n<k>-nic<j>-out`: the sends of the GPUs it serves to other nodes; `n<k>-nic<j>-in`: their
//! receives from other nodes) of the NIC's bandwidth, so the GPUs sharing a NIC share it.

use super::model::{Link, SwitchConstraint, Topology};
use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

/// The InfiniBand latency used when none is given (µs).
pub const DEFAULT_NIC_ALPHA: f64 = 2.6;

/// How NICs are attached to the GPUs of one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum NicPlacement {
    /// `k` NICs per GPU (each GPU gets `k` times the NIC bandwidth to itself).
    PerGpu(usize),
    /// `k` NICs per node, each shared by a contiguous block of `gpus / k` GPUs.
    PerNode(usize),
}

/// The NIC facts of a node type (the `[nic]` table of a node TOML).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NicFacts {
    /// Bandwidth of one NIC in GB/s per direction.
    pub bandwidth: f64,
    /// Latency of a transfer through the network in µs.
    pub alpha: f64,
    /// How the NICs are attached.
    pub placement: NicPlacement,
}

/// Which GPU pairs of different nodes the network connects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Network {
    /// Full bisection: every GPU reaches every GPU of every other node.
    FatTree,
    /// Rail-optimized: a GPU reaches only the GPUs with the same local index in other nodes.
    Rail,
}

impl Network {
    /// Parses `fat-tree` or `rail`.
    pub fn parse(text: &str) -> Result<Network> {
        match text {
            "fat-tree" | "fattree" => Ok(Network::FatTree),
            "rail" => Ok(Network::Rail),
            _ => bail!("unknown network '{text}' (expected \"fat-tree\" or \"rail\")"),
        }
    }

    /// The name as written in TOML.
    pub fn as_str(&self) -> &'static str {
        match self {
            Network::FatTree => "fat-tree",
            Network::Rail => "rail",
        }
    }
}

/// Builds `nodes` copies of `node` (rank `k * node.ranks + i` is local rank `i` of copy `k`)
/// joined by `nic` through `network`, named `name`.
pub fn compose(
    node: &Topology,
    nodes: usize,
    nic: &NicFacts,
    network: Network,
    name: &str,
) -> Result<Topology> {
    check_composition(node, nodes, nic, network)?;
    let (serves, nic_bw) = nic_service(node, nic)?;
    let g = node.ranks;
    let mut topo = node_copies(node, nodes, name);
    for a in 0..g * nodes {
        for b in 0..g * nodes {
            if a / g != b / g && network.connects(a, b, g) {
                topo.links.push(Link {
                    src: a,
                    dst: b,
                    bandwidth: nic_bw,
                    alpha: nic.alpha,
                });
            }
        }
    }
    for k in 0..nodes {
        for (j, local) in serves.iter().enumerate() {
            let mine: Vec<usize> = local.iter().map(|i| k * g + i).collect();
            add_nic_constraints(&mut topo, (k, j), mine, g, network, nic_bw);
        }
    }
    Ok(topo)
}

/// Makes the network of `topo` (copies of `node`, composed with `nic` by [`compose`])
/// oversubscribed `factor`:1: each node's switch uplink carries 1/`factor` of
/// the node's NIC bandwidth, as two constraints per node (`n<k>-uplink-out`: its ranks'
/// sends to other nodes; `n<k>-uplink-in`: their receives). A factor of 1 adds nothing.
pub fn oversubscribe(
    topo: &mut Topology,
    node: &Topology,
    nic: &NicFacts,
    factor: f64,
) -> Result<()> {
    if !(factor.is_finite() && factor >= 1.0) {
        bail!("oversubscription must be at least 1 (full bisection), got {factor}");
    }
    let g = node.ranks;
    if factor == 1.0 || g == 0 {
        return Ok(());
    }
    let nodes = topo.ranks / g;
    let (serves, nic_bw) = nic_service(node, nic)?;
    let uplink = serves.len() as f64 * nic_bw / factor;
    for k in 0..nodes {
        let mine: Vec<usize> = (k * g..(k + 1) * g).collect();
        let others: Vec<usize> = (0..topo.ranks).filter(|r| r / g != k).collect();
        push_out_and_in(topo, &format!("n{k}-uplink"), mine, others, uplink);
    }
    Ok(())
}

/// Adds the constraints `NAME-out` (the sends of `mine` to `remote`) and `NAME-in` (their
/// receives from `remote`), each of `bandwidth`.
fn push_out_and_in(
    topo: &mut Topology,
    name: &str,
    mine: Vec<usize>,
    remote: Vec<usize>,
    bandwidth: f64,
) {
    topo.switches.push(SwitchConstraint {
        name: format!("{name}-out"),
        srcs: mine.clone(),
        dsts: remote.clone(),
        bandwidth,
    });
    topo.switches.push(SwitchConstraint {
        name: format!("{name}-in"),
        srcs: remote,
        dsts: mine,
        bandwidth,
    });
}

impl Network {
    /// Whether the network joins ranks `a` and `b` (of different nodes of `g` GPUs each).
    fn connects(self, a: usize, b: usize, g: usize) -> bool {
        match self {
            Network::FatTree => true,
            Network::Rail => a % g == b % g,
        }
    }
}

/// Checks a composition before anything is built: at least one node of at least one rank,
/// ranks and links within the limits, a positive NIC bandwidth and a non-negative alpha.
fn check_composition(
    node: &Topology,
    nodes: usize,
    nic: &NicFacts,
    network: Network,
) -> Result<()> {
    let g = node.ranks;
    if nodes < 1 {
        bail!("nodes must be at least 1");
    }
    if g == 0 {
        bail!("node '{}' has no ranks", node.name);
    }
    let ranks = g.saturating_mul(nodes);
    let remote = match network {
        Network::FatTree => ranks - g,
        Network::Rail => nodes - 1,
    };
    let links =
        (node.links.len().saturating_mul(nodes)).saturating_add(ranks.saturating_mul(remote));
    super::check_size(ranks, links)
        .map_err(|e| anyhow::anyhow!("{nodes} nodes of {g} GPUs: {e}"))?;
    if !(nic.bandwidth.is_finite() && nic.bandwidth > 0.0) {
        bail!("NIC bandwidth must be positive, got {}", nic.bandwidth);
    }
    if !(nic.alpha.is_finite() && nic.alpha >= 0.0) {
        bail!("NIC alpha must be non-negative, got {}", nic.alpha);
    }
    Ok(())
}

/// The local GPUs each NIC of `node` serves (NIC j serves `serves[j]`) and the bandwidth
/// one NIC link gives one GPU.
fn nic_service(node: &Topology, nic: &NicFacts) -> Result<(Vec<Vec<usize>>, f64)> {
    let g = node.ranks;
    Ok(match nic.placement {
        NicPlacement::PerGpu(k) => {
            if k == 0 {
                bail!("nics_per_gpu must be at least 1");
            }
            ((0..g).map(|i| vec![i]).collect(), nic.bandwidth * k as f64)
        }
        NicPlacement::PerNode(k) => {
            if k == 0 || !g.is_multiple_of(k) {
                bail!(
                    "nics_per_node = {k} must divide the {g} GPUs of node '{}'",
                    node.name
                );
            }
            let block = g / k;
            (
                (0..k)
                    .map(|j| (j * block..(j + 1) * block).collect())
                    .collect(),
                nic.bandwidth,
            )
        }
    })
}

/// `nodes` copies of `node` side by side, named `name`: ranks, node numbers, links and
/// switch constraints (`n<k>-` before each name) renumbered, nothing between the copies.
fn node_copies(node: &Topology, nodes: usize, name: &str) -> Topology {
    let g = node.ranks;
    let node_count = node.nodes().max(1);
    let mut topo = Topology {
        name: name.to_string(),
        ranks: g * nodes,
        node_of: Vec::with_capacity(g * nodes),
        links: Vec::new(),
        switches: Vec::new(),
        runtime: node.runtime,
    };
    for k in 0..nodes {
        let off = k * g;
        topo.node_of
            .extend(node.node_of.iter().map(|&n| k * node_count + n));
        topo.links.extend(node.links.iter().map(|l| Link {
            src: l.src + off,
            dst: l.dst + off,
            ..l.clone()
        }));
        topo.switches
            .extend(node.switches.iter().map(|s| SwitchConstraint {
                name: format!("n{k}-{}", s.name),
                srcs: s.srcs.iter().map(|r| r + off).collect(),
                dsts: s.dsts.iter().map(|r| r + off).collect(),
                bandwidth: s.bandwidth,
            }));
    }
    topo
}

/// Adds the "out" and "in" constraints of NIC j of node k (`(k, j)`), which serves the
/// ranks `mine`: their sends to and receives from the ranks of other nodes the network
/// joins them to (none: no constraint).
fn add_nic_constraints(
    topo: &mut Topology,
    (k, j): (usize, usize),
    mine: Vec<usize>,
    g: usize,
    network: Network,
    nic_bw: f64,
) {
    let ranks = topo.ranks;
    let peers = |r: usize| (0..ranks).filter(move |&b| b / g != k && network.connects(r, b, g));
    let mut remote: Vec<usize> = mine.iter().flat_map(|&r| peers(r)).collect();
    remote.sort_unstable();
    remote.dedup();
    if remote.is_empty() {
        return;
    }
    push_out_and_in(topo, &format!("n{k}-nic{j}"), mine, remote, nic_bw);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::generators::{generate, GenSize};

    #[test]
    fn rail_and_fat_tree() {
        let ring = generate("ring", GenSize::Ranks(4), 25.0, 0.7).unwrap();
        let nic = NicFacts {
            bandwidth: 25.0,
            alpha: 2.6,
            placement: NicPlacement::PerGpu(1),
        };
        let ft = compose(&ring, 2, &nic, Network::FatTree, "x").unwrap();
        assert_eq!(ft.ranks, 8);
        assert_eq!(ft.links.len(), 16 + 32);
        assert_eq!(ft.switches.len(), 16);
        let rail = compose(&ring, 3, &nic, Network::Rail, "x").unwrap();
        assert_eq!(rail.links.len(), 24 + 3 * 4 * 2);
        assert_eq!(rail.nodes(), 3);
        let shared = NicFacts {
            placement: NicPlacement::PerNode(3),
            ..nic
        };
        assert!(compose(&ring, 2, &shared, Network::FatTree, "x").is_err());
    }
}
