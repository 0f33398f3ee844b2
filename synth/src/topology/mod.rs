//! GPU fabrics (DESIGN §2): the model, where topologies come from (built-ins, hand-written
//! TOML, `nvidia-smi topo -m` output) and their analysis (distances, symmetry, bandwidth,
//! integer capacities, Graphviz).
//!
//! [`load`] is the one entry point: `load("dgx1")`, `load("ring:12")`, `load("dgx-a100x4")`,
//! `load("my-fabric.toml")`, `load("nvsmi:topo.txt")`, `load("system.xml")` (NCCL's
//! topology dump); [`load_nodes`] joins copies of a node with NIC facts.

pub mod analysis;
pub mod automorphism;
pub mod builtin;
pub mod canonical;
pub mod capacities;
pub mod dot;
pub mod fit;
pub mod generators;
pub mod index;
pub mod model;
pub mod multinode;
pub mod nccl_tests;
pub mod nccl_xml;
pub mod nic_affinity;
pub mod nvsmi;
pub mod shape;
pub mod summary;
pub mod toml_format;
pub mod translations;

pub use capacities::Capacities;
pub use index::TopologyIndex;
pub use model::{Link, SwitchConstraint, Topology};
pub use multinode::{Network, NicFacts, NicPlacement};
pub use nvsmi::{parse_nvsmi, NvsmiOptions};
pub use summary::Summary;
pub use translations::Translations;

use anyhow::{anyhow, bail, Result};
use std::path::{Path, PathBuf};

/// How deep multi-node files may include other files (guards against cycles).
const MAX_DEPTH: usize = 8;

/// Most ranks a fabric may have (README "Limits"); checked before anything is allocated.
pub const MAX_RANKS: usize = 4096;
/// Most directed links a fabric may have (a fat-tree of 128 DGX-A100 nodes has about 1.05
/// million); checked before the links are built.
pub const MAX_LINKS: usize = 1 << 21;

/// Smallest and largest bandwidth of a link, switch constraint or NIC in a topology file, in
/// GB/s (1 MB/s to 1 PB/s): beyond them times and percentages lose their meaning.
pub const BANDWIDTH_RANGE: (f64, f64) = (1e-3, 1e6);
/// Largest latency (alpha) of a link or NIC in a topology file, in µs (one second).
pub const MAX_ALPHA: f64 = 1e6;

/// The reason a bandwidth (GB/s) is refused: not a number within [`BANDWIDTH_RANGE`].
pub fn check_bandwidth(bandwidth: f64) -> std::result::Result<f64, String> {
    let (lo, hi) = BANDWIDTH_RANGE;
    if (lo..=hi).contains(&bandwidth) {
        Ok(bandwidth)
    } else {
        Err(format!(
            "bandwidth {} GB/s is not between {lo} and {hi}",
            short(bandwidth)
        ))
    }
}

/// The reason a latency (µs) is refused: not a number from 0 to [`MAX_ALPHA`].
pub fn check_alpha(alpha: f64) -> std::result::Result<f64, String> {
    if (0.0..=MAX_ALPHA).contains(&alpha) {
        Ok(alpha)
    } else {
        Err(format!(
            "alpha {} µs is not between 0 and {MAX_ALPHA}",
            short(alpha)
        ))
    }
}

/// `x` in a few characters: plain, or in exponent notation when far from 1.
fn short(x: f64) -> String {
    if x == 0.0 || (1e-6..1e12).contains(&x.abs()) {
        format!("{x}")
    } else {
        format!("{x:e}")
    }
}

/// Checks a fabric's size against [`MAX_RANKS`] and [`MAX_LINKS`] before it is built
/// (callers compute sizes with saturating arithmetic, so overflow reads as too large).
pub fn check_size(ranks: usize, links: usize) -> Result<()> {
    if ranks > MAX_RANKS {
        bail!("{ranks} ranks exceed the limit of {MAX_RANKS}");
    }
    if links > MAX_LINKS {
        bail!("{links} links exceed the limit of {MAX_LINKS}");
    }
    Ok(())
}

/// A loaded topology with the NIC facts of its file (used when it becomes a node).
pub(crate) struct Loaded {
    /// The topology.
    pub topology: Topology,
    /// The file's `[nic]` facts, if it has them.
    pub nic: Option<NicFacts>,
    /// Why a file that lists NICs gives no NIC facts (irregular affinity, mixed speeds).
    pub nic_problem: Option<String>,
}

/// Loads a topology: a built-in name (`dgx1`, `ring:12`, `torus-2d:4x4`, `dgx-a100x4`,
/// `dgx-a100x4:rail`), `nvsmi:PATH` or `nvsmi:GBPS:PATH` (nvidia-smi `topo -m` text, with
/// the per-NVLink bandwidth, default 25 GB/s), or a file path (TOML, or nvidia-smi text,
/// recognised by its `GPU0` header row). Errors are one line naming the file, line, field and
/// reason.
pub fn load(spec: &str) -> Result<Topology> {
    let topology = resolve(spec, None, 0)?.topology;
    // The name goes into every algorithm's name, and so into the XML's `name` attribute.
    check_name(spec, &topology)?;
    Ok(topology)
}

/// Loads `spec` as [`load`] does; with `nodes`, `nodes` copies of it (a node with NIC facts:
/// a built-in, a TOML with `[nic]`, an NCCL dump with NICs) joined by `network` (default
/// fat-tree), named `<name>x<nodes>` (`:rail` added for a rail network).
pub fn load_nodes(spec: &str, nodes: Option<usize>, network: Option<Network>) -> Result<Topology> {
    let Some(k) = nodes else {
        if network.is_some() {
            bail!("--network needs --nodes");
        }
        return load(spec);
    };
    let loaded = resolve(spec, None, 0)?;
    let node = loaded.topology;
    if node.nodes() > 1 {
        bail!(
            "{spec}: already has {} nodes; --nodes joins copies of one node",
            node.nodes()
        );
    }
    if let Some(problem) = loaded.nic_problem {
        bail!("{problem}");
    }
    let Some(nic) = loaded.nic else {
        bail!("{spec}: no NIC facts (a [nic] table, or NICs in the NCCL dump), so --nodes cannot join copies of it");
    };
    let network = network.unwrap_or(Network::FatTree);
    let name = match network {
        Network::FatTree => format!("{}x{k}", node.name),
        Network::Rail => format!("{}x{k}:rail", node.name),
    };
    let topology = multinode::compose(&node, k, &nic, network, &name)
        .map_err(|e| anyhow!("{spec} x {k} nodes: {e}"))?;
    check_name(spec, &topology)?;
    Ok(topology)
}

/// Checks that the topology's name can go into MSCCL XML names.
fn check_name(spec: &str, topology: &Topology) -> Result<()> {
    if let Some(c) = topology
        .name
        .chars()
        .find(|&c| !runtime::limits::name_char(c))
    {
        let shown: String = topology.name.chars().take(40).collect();
        bail!("{spec}: name: {shown:?} holds {c:?}, which MSCCL XML names cannot carry");
    }
    Ok(())
}

/// Every built-in name with a one-line description (single nodes, then multi-node examples;
/// any `<node>x<K>` of a node with NIC facts works).
pub fn builtin_names() -> Vec<(&'static str, &'static str)> {
    builtin::names()
}

fn stem(path: &Path) -> String {
    path.file_stem().map_or_else(
        || path.display().to_string(),
        |s| s.to_string_lossy().into_owned(),
    )
}

/// Resolves `spec` as in [`load`]; relative paths are taken from `base` when given.
pub(crate) fn resolve(spec: &str, base: Option<&Path>, depth: usize) -> Result<Loaded> {
    if depth > MAX_DEPTH {
        bail!(
            "'{spec}': files nested deeper than {MAX_DEPTH} levels (does a file include itself?)"
        );
    }
    let spec = spec.trim();
    let join = |p: &str| base.map_or_else(|| PathBuf::from(p), |b| b.join(p));
    if let Some(rest) = spec.strip_prefix("nvsmi:") {
        let mut opts = NvsmiOptions::default();
        let mut path = rest;
        if let Some((bw, p)) = rest.split_once(':') {
            if let Ok(bw) = bw.parse::<f64>() {
                opts.link_bandwidth = bw;
                path = p;
            }
        }
        let path = join(path);
        let text = read(&path)?;
        return load_nvsmi(&path, &text, &opts);
    }
    if let Some(l) = builtin::lookup(spec, depth)? {
        return Ok(l);
    }
    let path = join(spec);
    if path.is_file() {
        let text = read(&path)?;
        if nccl_xml::looks_like_nccl_xml(&text) {
            return load_nccl_xml(&path, &text, &nccl_xml::fabric::Options::default());
        }
        if nvsmi::looks_like_nvsmi(&text) {
            return load_nvsmi(&path, &text, &NvsmiOptions::default());
        }
        let src = toml_format::Source {
            label: path.display().to_string(),
            text: &text,
            dir: path.parent().map(Path::to_path_buf),
            stem: stem(&path),
        };
        return toml_format::parse(&src, None, depth);
    }
    let names: Vec<&str> = builtin::names().iter().map(|n| n.0).collect();
    if spec.contains('/')
        || spec.contains('\\')
        || spec.ends_with(".toml")
        || spec.ends_with(".txt")
        || spec.ends_with(".xml")
    {
        bail!("{}: no such file", path.display());
    }
    bail!(
        "unknown topology '{spec}': not a built-in and no such file (built-ins: {}, \
         <node>x<K>; or a .toml file, or nvsmi:PATH)",
        names.join(", ")
    )
}

fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|e| anyhow!("{}: cannot read: {e}", path.display()))
}

/// Reads an NCCL topology dump at `path` into a node with its NIC facts; errors are one
/// line `PATH:LINE: NCCL topology: <element>: reason`.
pub(crate) fn load_nccl_xml(
    path: &Path,
    text: &str,
    opts: &nccl_xml::fabric::Options,
) -> Result<Loaded> {
    let parts = nccl_xml_parts(path, text, opts)?;
    let topology = parts.topology(&stem(path));
    topology
        .validate()
        .map_err(|e| anyhow!("{}: NCCL topology: {e}", path.display()))?;
    Ok(Loaded {
        topology,
        nic: parts.nic,
        nic_problem: parts
            .nic_problem
            .map(|e| format!("{}: {e}", path.display())),
    })
}

/// The fabric parts of the NCCL topology dump `text` read from `path`.
pub fn nccl_xml_parts(
    path: &Path,
    text: &str,
    opts: &nccl_xml::fabric::Options,
) -> Result<nccl_xml::fabric::Parts> {
    use nccl_xml::XmlError;
    let located = |e: XmlError| match e {
        XmlError::Syntax { line, reason } => {
            anyhow!(
                "{}:{line}: NCCL topology: malformed XML: {reason}",
                path.display()
            )
        }
        XmlError::Element {
            line,
            element,
            reason,
        } => anyhow!(
            "{}:{line}: NCCL topology: <{element}>: {reason}",
            path.display()
        ),
        XmlError::Machine(reason) => anyhow!("{}: NCCL topology: {reason}", path.display()),
    };
    let machine = nccl_xml::read(text).map_err(located)?;
    nccl_xml::fabric::parts(&machine, opts).map_err(located)
}

/// Reads `nvidia-smi topo -m` text at `path`: the NVLink fabric and, from the NIC columns,
/// its NIC facts.
pub(crate) fn load_nvsmi(path: &Path, text: &str, opts: &NvsmiOptions) -> Result<Loaded> {
    let topology = nvsmi_error(path, parse_nvsmi(text, &stem(path), opts))?;
    let (nic, nic_problem) = match nvsmi_error(path, nvsmi::parse_nvsmi_nics(text, opts)) {
        Ok(a) => (a.map(|a| a.facts), None),
        Err(e) => (None, Some(e.to_string())),
    };
    Ok(Loaded {
        topology,
        nic,
        nic_problem,
    })
}

/// An nvidia-smi parse error as one line `PATH:LINE: nvidia-smi topo -m: reason`.
fn nvsmi_error<T>(path: &Path, r: Result<T>) -> Result<T> {
    r.map_err(|e| {
        let msg = e.to_string();
        let located = msg.strip_prefix("line ").and_then(|rest| {
            let (no, reason) = rest.split_once(": ")?;
            no.parse::<usize>().ok().map(|no| (no, reason.to_string()))
        });
        match located {
            Some((no, reason)) => anyhow!("{}:{no}: nvidia-smi topo -m: {reason}", path.display()),
            None => anyhow!("{}: nvidia-smi topo -m: {msg}", path.display()),
        }
    })
}
