//! GPU fabrics (DESIGN §2): the model, where topologies come from (built-ins, hand-written
//! TOML, `nvidia-smi topo -m` output) and their analysis (distances, symmetry, bandwidth,
//! integer capacities, Graphviz).
//!
//! [`load`] is the one entry point: `load("dgx1")`, `load("ring:12")`, `load("dgx-a100x4")`,
//! `load("my-fabric.toml")`, `load("nvsmi:topo.txt")`.

pub mod analysis;
pub mod automorphism;
pub mod builtin;
pub mod canonical;
pub mod capacities;
pub mod dot;
pub mod generators;
pub mod index;
pub mod model;
pub mod multinode;
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
}

/// Loads a topology: a built-in name (`dgx1`, `ring:12`, `torus-2d:4x4`, `dgx-a100x4`,
/// `dgx-a100x4:rail`), `nvsmi:PATH` or `nvsmi:GBPS:PATH` (nvidia-smi `topo -m` text, with
/// the per-NVLink bandwidth, default 25 GB/s), or a file path (TOML, or nvidia-smi text,
/// recognised by its `GPU0` header row). Errors are one line naming the file, line, field and
/// reason.
pub fn load(spec: &str) -> Result<Topology> {
    let topology = resolve(spec, None, 0)?.topology;
    // The name goes into every algorithm's name, and so into the XML's `name` attribute.
    if let Some(c) = topology
        .name
        .chars()
        .find(|&c| !runtime::limits::name_char(c))
    {
        let shown: String = topology.name.chars().take(40).collect();
        bail!("{spec}: name: {shown:?} holds {c:?}, which MSCCL XML names cannot carry");
    }
    Ok(topology)
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
        return load_nvsmi(&path, &text, &opts).map(|topology| Loaded {
            topology,
            nic: None,
        });
    }
    if let Some(l) = builtin::lookup(spec, depth)? {
        return Ok(l);
    }
    let path = join(spec);
    if path.is_file() {
        let text = read(&path)?;
        if nvsmi::looks_like_nvsmi(&text) {
            let topology = load_nvsmi(&path, &text, &NvsmiOptions::default())?;
            return Ok(Loaded {
                topology,
                nic: None,
            });
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

fn load_nvsmi(path: &Path, text: &str, opts: &NvsmiOptions) -> Result<Topology> {
    parse_nvsmi(text, &stem(path), opts).map_err(|e| {
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
