//! `--nodes K --network NAME`: K copies of a node topology joined by its NICs (shared by the
//! main command, `synth bounds` and `synth catalog`).

use crate::topology::{self, Network, Topology};
use anyhow::Result;
use clap::Args;

/// Arguments that join copies of a node.
#[derive(Debug, Clone, Default, Args)]
pub struct NodesArgs {
    /// Join this many copies of the topology through its NICs (a node with NIC facts: a
    /// built-in such as `dgx-a100`, a TOML with `[nic]`, an NCCL topology dump with NICs).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub nodes: Option<u64>,
    /// Network between the nodes of --nodes: `fat-tree` (every GPU reaches every GPU of other
    /// nodes, the default) or `rail` (only the GPUs of the same local index).
    #[arg(long, value_parser = ["fat-tree", "rail"])]
    pub network: Option<String>,
}

impl NodesArgs {
    /// Loads `spec`, joined into `--nodes` copies where given.
    pub fn load(&self, spec: &str) -> Result<Topology> {
        let network = self.network.as_deref().map(Network::parse).transpose()?;
        topology::load_nodes(spec, self.nodes.map(|k| k as usize), network)
    }
}
