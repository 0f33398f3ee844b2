//! The built-in topologies: the TOML files of `topologies/`, embedded in the binary, plus
//! multi-node names `<node>x<K>` (K copies of a built-in joined by its NICs).

use super::generators::{self, parse_size};
use super::multinode::{self, Network};
use super::toml_format::{self, Source};
use super::Loaded;
use anyhow::{anyhow, bail, Result};

/// One embedded built-in: name, description, TOML text.
struct Builtin {
    name: &'static str,
    description: &'static str,
    text: &'static str,
}

macro_rules! builtin {
    ($name:literal, $desc:literal) => {
        Builtin {
            name: $name,
            description: $desc,
            text: include_str!(concat!("../../../topologies/", $name, ".toml")),
        }
    };
}

const BUILTINS: &[Builtin] = &[
    builtin!(
        "ring",
        "bidirectional ring (ring:N, default 8), 25 GB/s links"
    ),
    builtin!(
        "line",
        "bidirectional path (line:N, default 8), 25 GB/s links"
    ),
    builtin!(
        "fully-connected",
        "all pairs linked (fully-connected:N, default 8), 25 GB/s links"
    ),
    builtin!(
        "star",
        "rank 0 linked to all others (star:N, default 8), 25 GB/s links"
    ),
    builtin!(
        "hub-and-spoke",
        "SCCL's HubAndSpoke: all pairs linked, 25 GB/s out and 25 GB/s in per rank (hub-and-spoke:N, default 8)"
    ),
    builtin!(
        "shared-hub",
        "all pairs through one shared 25 GB/s hub (shared-hub:N, default 8)"
    ),
    builtin!(
        "torus-2d",
        "2-D torus with wrap-around (torus-2d:RxC, default 4x4), 25 GB/s links"
    ),
    builtin!(
        "torus-3d",
        "3-D torus with wrap-around (torus-3d:AxBxC, default 4x4x4), 25 GB/s links"
    ),
    builtin!(
        "mesh-2d",
        "2-D mesh without wrap-around (mesh-2d:RxC, default 4x4), 25 GB/s links"
    ),
    builtin!(
        "hypercube",
        "hypercube of 2^d ranks (hypercube:N, default 16), 25 GB/s links"
    ),
    builtin!(
        "random",
        "seeded random connected fabric (random:N:SEED, default 16:1), 25-75 GB/s links"
    ),
    builtin!(
        "dgx1",
        "NVIDIA DGX-1: 8 V100 hybrid cube-mesh, 6 x 25 GB/s NVLinks per GPU"
    ),
    builtin!(
        "ndv2",
        "Azure NDv2: DGX-1 NVLink + one 12.5 GB/s NIC per node"
    ),
    builtin!(
        "dgx2",
        "NVIDIA DGX-2: 16 V100 on NVSwitch, 150 GB/s per GPU; 8 x 12.5 GB/s NICs"
    ),
    builtin!(
        "dgx-a100",
        "NVIDIA DGX-A100: 8 A100 on NVSwitch, 300 GB/s per GPU; 25 GB/s NIC per GPU"
    ),
    builtin!(
        "dgx-h100",
        "NVIDIA DGX-H100: 8 H100 on NVSwitch, 450 GB/s per GPU; 50 GB/s NIC per GPU"
    ),
    builtin!(
        "amd4",
        "4 AMD GPUs on an Infinity Fabric ring 0-1-3-2-0, 46 GB/s links"
    ),
    builtin!(
        "amd8",
        "8 AMD GPUs fully connected, 48 GB/s within {0,2,3,5} and {1,4,6,7}, 40 across"
    ),
    builtin!(
        "mi250",
        "AMD MI250X node: 8 GCDs, 200 GB/s in-package, 100/50 GB/s across; 4 NICs"
    ),
    builtin!(
        "mi250-16",
        "AMD MI250 node: 16 GCDs on xGMI (50 GB/s links, 350 GB/s per GCD); 16 GB/s NIC per GCD"
    ),
];

/// Multi-node examples listed by [`names`] (any `<node>x<K>` works).
const MULTINODE_EXAMPLES: &[(&str, &str)] = &[
    (
        "dgx-a100x2",
        "2 DGX-A100 nodes, fat-tree of 25 GB/s HDR NICs (one per GPU)",
    ),
    (
        "dgx-a100x4",
        "4 DGX-A100 nodes, fat-tree of 25 GB/s HDR NICs (one per GPU)",
    ),
    (
        "dgx-h100x2",
        "2 DGX-H100 nodes, fat-tree of 50 GB/s NDR NICs (one per GPU)",
    ),
    (
        "dgx-a100x8",
        "8 DGX-A100 nodes (64 GPUs), fat-tree of 25 GB/s HDR NICs (one per GPU)",
    ),
    (
        "mi250-16x2",
        "2 MI250 nodes of 16 GCDs, fat-tree of 16 GB/s NICs (one per GCD)",
    ),
    (
        "ndv2x2",
        "2 Azure NDv2 nodes, one shared 12.5 GB/s NIC per node",
    ),
    (
        "dgx2x2",
        "2 DGX-2 nodes, fat-tree of 12.5 GB/s NICs (one per 2 GPUs)",
    ),
];

/// Every built-in name with a one-line description, single nodes first.
pub fn names() -> Vec<(&'static str, &'static str)> {
    BUILTINS
        .iter()
        .map(|b| (b.name, b.description))
        .chain(MULTINODE_EXAMPLES.iter().copied())
        .collect()
}

/// The embedded TOML text of built-in `name` (without size), if there is one.
pub fn toml_text(name: &str) -> Option<&'static str> {
    BUILTINS.iter().find(|b| b.name == name).map(|b| b.text)
}

/// Splits `<node>x<K>` into a built-in node name and K.
fn split_multinode(name: &str) -> Option<(&str, usize)> {
    let (node, k) = name.rsplit_once('x')?;
    if k.is_empty() || !k.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let k = k.parse().ok()?;
    toml_text(node).map(|_| (node, k))
}

/// Whether `spec` names a built-in (`dgx1`, `ring:12`, `dgx-a100x4`, `dgx-a100x4:rail`).
pub fn is_builtin(spec: &str) -> bool {
    let name = spec.split_once(':').map_or(spec, |(n, _)| n);
    toml_text(name).is_some() || split_multinode(name).is_some()
}

/// Loads built-in `spec`, or `Ok(None)` when it names none.
pub(crate) fn lookup(spec: &str, depth: usize) -> Result<Option<Loaded>> {
    let (name, arg) = match spec.split_once(':') {
        Some((n, a)) => (n, Some(a)),
        None => (spec, None),
    };
    if let Some(text) = toml_text(name) {
        let size = match arg {
            Some(a) if generators::is_generator(name) => {
                Some(parse_size(a).map_err(|e| anyhow!("built-in '{name}': {e}"))?)
            }
            Some(a) => bail!("built-in '{name}' is not a generator and takes no size ':{a}'"),
            None => None,
        };
        let src = Source {
            label: format!("built-in {name} (topologies/{name}.toml)"),
            text,
            dir: None,
            stem: name.to_string(),
        };
        return toml_format::parse(&src, size, depth).map(Some);
    }
    let Some((node, k)) = split_multinode(name) else {
        return Ok(None);
    };
    let network = match arg {
        Some(a) => Network::parse(a).map_err(|e| anyhow!("built-in '{name}': {e}"))?,
        None => Network::FatTree,
    };
    let base = lookup(node, depth + 1)?.expect("split_multinode checked the node name");
    let Some(nic) = base.nic else {
        bail!("built-in '{node}' has no NIC facts, so '{name}' is undefined; write a TOML with [multinode] and nic_bandwidth");
    };
    let full = match network {
        Network::FatTree => name.to_string(),
        Network::Rail => format!("{name}:rail"),
    };
    let topology = multinode::compose(&base.topology, k, &nic, network, &full)
        .map_err(|e| anyhow!("built-in '{spec}': {e}"))?;
    Ok(Some(Loaded {
        topology,
        nic: None,
        nic_problem: None,
    }))
}
