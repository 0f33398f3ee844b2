//! NCCL baselines on a topology: its ring and tree algorithms and its point-to-point
//! alltoall, gather and scatter as IR programs (run in the same simulator as synthesized
//! ones, [`crate::simulate`]), and its published tuning model as a second opinion
//! ([`nccl_model_time_us`]). Each collective has at least one: [`ring`] (allgather,
//! reduce-scatter, allreduce, broadcast, reduce), [`tree`] (allreduce), [`p2p()`]
//! (alltoall, gather, scatter), on every connected fabric.
//!
//! Rings and trees come from [`orders`]: as many edge-disjoint Hamiltonian rings as the
//! link capacities carry ([`search`]), or, where the fabric has none, a ring over every rank
//! whose hops between ranks without a link are relayed through the ranks on a shortest path
//! ([`relay`], routed as the point-to-point baseline routes its blocks).

pub mod model;
pub mod orders;
pub mod p2p;
pub mod programs;
pub mod relay;
pub mod search;

pub use model::{nccl_model_busbw, nccl_model_time_us, Algo, Choice, Tuner};
pub use orders::{ring_orders, tree_parents};
pub use p2p::p2p_program;
pub use programs::{ring_program, tree_allreduce_program};
pub use relay::RelayError;

use crate::topology::Topology;
use anyhow::{bail, Result};
use runtime::ir::{Collective, Program};
use serde::{Deserialize, Serialize};

/// Options of the baseline builders.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BaselineOptions {
    /// Number of channels; `None` picks it from the topology as NCCL does (see
    /// [`orders`]).
    pub channels: Option<usize>,
    /// Root rank of broadcast and reduce.
    pub root: usize,
}

/// NCCL's ring algorithm for `coll` (allgather, reduce-scatter, allreduce, broadcast,
/// reduce) on `topology`, with rings chosen as in [`orders::ring_orders`] (hops between
/// ranks without a link relayed, [`relay::relay`]). Every connected fabric has one; a
/// disconnected one is a [`RelayError::Disconnected`].
pub fn ring(coll: Collective, topology: &Topology, options: &BaselineOptions) -> Result<Program> {
    let rings = ring_orders(topology, options.channels)?;
    let p = ring_program(coll, topology.ranks, &rings, options.root)?;
    let mut p = relay::relay(p, topology)?;
    p.name = format!("nccl-ring-{coll}-{}", topology.name);
    Ok(p)
}

/// NCCL's tree algorithm, defined (as in NCCL) for allreduce only: a chain on one node; a
/// double binary tree across nodes with a chain inside each node (see
/// [`orders::tree_parents`]; hops between ranks without a link relayed, [`relay::relay`]).
/// The executor's per-slice replay pipelines it as NCCL pipelines its chunks.
pub fn tree(coll: Collective, topology: &Topology, options: &BaselineOptions) -> Result<Program> {
    if coll != Collective::AllReduce {
        bail!("NCCL's tree algorithm is defined for allreduce only, not {coll}");
    }
    let trees = tree_parents(topology, options.channels)?;
    let p = tree_allreduce_program(topology.ranks, &trees)?;
    let mut p = relay::relay(p, topology)?;
    p.name = format!("nccl-tree-allreduce-{}", topology.name);
    Ok(p)
}

/// NCCL's point-to-point algorithm for alltoall, gather and scatter (grouped
/// `ncclSend`/`ncclRecv`, every block sent at once, relayed along a shortest path where no
/// link joins its ranks; see the [`p2p` module](mod@p2p)). `options.channels` does not
/// apply: a block crosses its h-th link on channel h.
pub fn p2p(coll: Collective, topology: &Topology, options: &BaselineOptions) -> Result<Program> {
    let mut p = p2p_program(coll, topology, options.root)?;
    p.name = format!("nccl-p2p-{coll}-{}", topology.name);
    Ok(p)
}
