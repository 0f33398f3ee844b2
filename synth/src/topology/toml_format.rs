//! The hand-written TOML topology format.
//!
//! A topology file describes ranks (GPUs), directed links and shared-bandwidth constraints.
//! Units: bandwidth in GB/s (1e9 bytes/s) per direction, from 0.001 to 1e6 (also a link's
//! `k x bandwidth`), latency (alpha) in µs, from 0 to 1e6. Every part below is optional and the parts combine: a generator or a multi-node composition gives the
//! starting fabric, then `matrix`, `nvswitch`, `[[link]]` and `[[switch]]` add to it. Defining
//! the same directed link twice is an error, and so are two switch constraints of one name and
//! any field not listed here.
//!
//! ```toml
//! name = "my-box"          # default: the file name (generators: "ring:8")
//! description = "free text, ignored"
//! ranks = 8                # needed unless a generator, matrix or [multinode] implies it
//! bandwidth = 25.0         # default GB/s of one link (default 25 = one NVLink2)
//! alpha = 0.7              # default latency of a link in µs (default 0.7)
//! node_of = [0, 0, 0, 0, 1, 1, 1, 1]   # node of each rank (default: all on node 0)
//! runtime = "nccl"         # the MSCCL runtime that runs it: "nccl" (msccl-executor-nccl),
//!                          # "rccl" (AMD) or "legacy"; its XML flavour becomes the default
//!
//! # A generator: "ring", "line", "fully-connected", "star", "hub-and-spoke", "shared-hub",
//! # "hypercube" (size = ranks), "torus-2d" or "mesh-2d" (size = "ROWSxCOLS"), "torus-3d"
//! # (size = "AxBxC") or "random" (size = "RANKS:SEED"). Links use `bandwidth` and `alpha`.
//! # generator = "ring"
//! # size = 8
//!
//! # Link multiplicity (DGX-1 style): entry k in row i, column j means k links of
//! # `bandwidth` from i to j, folded into one link of k x bandwidth. Write it symmetric for
//! # bidirectional cables.
//! matrix = [
//!   [0, 2, 1, 1, 2, 0, 0, 0],
//!   [2, 0, 1, 2, 0, 1, 0, 0],
//!   [1, 1, 0, 2, 0, 0, 2, 0],
//!   [1, 2, 2, 0, 0, 0, 0, 1],
//!   [2, 0, 0, 0, 0, 2, 1, 1],
//!   [0, 1, 0, 0, 2, 0, 1, 2],
//!   [0, 0, 2, 0, 1, 1, 0, 2],
//!   [0, 0, 0, 1, 1, 2, 2, 0],
//! ]
//!
//! # An NVSwitch: a link between every pair of `ranks` (default: all) of `bandwidth`, plus
//! # per GPU one "out" constraint (its sends together <= bandwidth) and one "in" constraint.
//! # nvswitch = { bandwidth = 300, alpha = 0.7, ranks = [0, 1, 2, 3] }
//!
//! # Explicit links; bandwidth and alpha default to the top-level values,
//! # bidirectional (default true) also adds dst -> src.
//! [[link]]
//! src = 0
//! dst = 7
//! bandwidth = 12.5
//! alpha = 1.0
//! bidirectional = false
//!
//! # A shared-bandwidth constraint: all links from a rank in srcs to a rank in dsts
//! # together carry at most `bandwidth` (a PCIe switch, a NIC, a switch port).
//! [[switch]]
//! name = "pcie-0"
//! srcs = [0, 1]
//! dsts = [2, 3]
//! bandwidth = 16
//!
//! # NIC facts of this box, used when it is a node of a multi-node fabric:
//! # `per_gpu = k` (k NICs per GPU) or `per_node = k` (k NICs, each shared by gpus/k GPUs).
//! [nic]
//! bandwidth = 25           # GB/s per NIC per direction
//! alpha = 2.6              # µs (default 2.6, InfiniBand)
//! per_gpu = 1
//! ```
//!
//! Multi-node composition (`ranks`, `matrix`, ... may still add links and constraints on
//! top, numbered globally: rank `k * gpus_per_node + i` is GPU `i` of node `k`):
//!
//! ```toml
//! name = "two-a100s"
//! [multinode]
//! node = "dgx-a100"        # a built-in name, or a TOML path relative to this file
//! nodes = 2
//! nic_bandwidth = 25       # GB/s per NIC (default: the node's [nic] facts)
//! nic_alpha = 2.6          # µs (default: the node's, else 2.6)
//! nics_per_gpu = 1         # or nics_per_node = 1 (one NIC shared by the node, NDv2 style)
//! network = "fat-tree"     # every GPU to every GPU of other nodes; "rail": same local index
//! oversubscription = 4     # the network gives each node 1/4 of its NICs' bandwidth (default 1)
//! ```
//!
//! `relabel = SEED` (top level) renumbers the finished fabric's ranks by a permutation drawn
//! from SEED: the same fabric under other rank ids, to check that results do not depend on
//! them.
//!
//! Inter-node GPU pairs become links of one NIC's bandwidth per GPU and alpha `nic_alpha`;
//! every NIC adds an "out" and an "in" constraint of its bandwidth over the GPUs it serves.

use super::generators::{self, parse_size, GenSize};
use super::model::{Link, SwitchConstraint, Topology};
use super::multinode::{self, NicFacts, NicPlacement, DEFAULT_NIC_ALPHA};
use super::Loaded;
use anyhow::{anyhow, Result};
use serde::Deserialize;
use std::collections::HashMap;
use std::ops::Range;
use std::path::PathBuf;
use toml::Spanned;

/// Link bandwidth when a file gives none (GB/s: one NVLink2).
pub const DEFAULT_BANDWIDTH: f64 = 25.0;
/// Link latency when a file gives none (µs).
pub const DEFAULT_ALPHA: f64 = 0.7;

/// The text of a topology file and where it came from, for error messages.
pub(crate) struct Source<'a> {
    /// What errors call the file (its path, or `built-in dgx1`).
    pub label: String,
    /// The file's text.
    pub text: &'a str,
    /// The directory relative paths (a multi-node `node`) are resolved against.
    pub dir: Option<PathBuf>,
    /// The file stem, the default topology name.
    pub stem: String,
}

impl Source<'_> {
    fn line(&self, offset: usize) -> usize {
        self.text[..offset.min(self.text.len())]
            .matches('\n')
            .count()
            + 1
    }

    /// One-line error `FILE:LINE: FIELD: REASON`.
    fn err(
        &self,
        span: Option<Range<usize>>,
        field: &str,
        reason: impl std::fmt::Display,
    ) -> anyhow::Error {
        // A quoted value may hold line breaks (`"a\nb"` in TOML): the error stays one line.
        let reason = crate::util::escape_line_breaks(&reason.to_string());
        match span {
            Some(s) => anyhow!(
                "{}:{}: {}: {}",
                self.label,
                self.line(s.start),
                field,
                reason
            ),
            None => anyhow!("{}: {}: {}", self.label, field, reason),
        }
    }

    /// Turns a TOML syntax or schema error into one line, naming the key on the offending line.
    fn toml_err(&self, e: &toml::de::Error) -> anyhow::Error {
        let msg = e.message().split_whitespace().collect::<Vec<_>>().join(" ");
        let Some(span) = e.span() else {
            return anyhow!("{}: malformed TOML: {msg}", self.label);
        };
        let line_no = self.line(span.start);
        let line = self.text.lines().nth(line_no - 1).unwrap_or("").trim();
        let field = if let Some(f) = msg
            .strip_prefix("unknown field `")
            .and_then(|m| m.split('`').next())
        {
            f.to_string()
        } else if line.starts_with('[') {
            line.trim_matches(|c| c == '[' || c == ']')
                .trim()
                .to_string()
        } else if let Some((k, _)) = line.split_once('=') {
            k.trim().to_string()
        } else {
            String::new()
        };
        if field.is_empty() {
            anyhow!("{}:{}: malformed TOML: {msg}", self.label, line_no)
        } else {
            anyhow!("{}:{}: {}: {msg}", self.label, line_no, field)
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TopologyFile {
    name: Option<String>,
    #[allow(dead_code)]
    description: Option<String>,
    ranks: Option<Spanned<usize>>,
    bandwidth: Option<Spanned<f64>>,
    alpha: Option<Spanned<f64>>,
    node_of: Option<Spanned<Vec<usize>>>,
    generator: Option<Spanned<String>>,
    size: Option<Spanned<toml::Value>>,
    matrix: Option<Spanned<Vec<Spanned<Vec<u32>>>>>,
    nvswitch: Option<Spanned<NvSwitchToml>>,
    #[serde(default)]
    link: Vec<Spanned<LinkToml>>,
    #[serde(default)]
    switch: Vec<Spanned<SwitchToml>>,
    nic: Option<Spanned<NicToml>>,
    multinode: Option<Spanned<MultinodeToml>>,
    relabel: Option<Spanned<u64>>,
    runtime: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NvSwitchToml {
    bandwidth: Spanned<f64>,
    alpha: Option<Spanned<f64>>,
    ranks: Option<Spanned<Vec<usize>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LinkToml {
    src: Spanned<usize>,
    dst: Spanned<usize>,
    bandwidth: Option<Spanned<f64>>,
    alpha: Option<Spanned<f64>>,
    bidirectional: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SwitchToml {
    name: Option<String>,
    srcs: Spanned<Vec<usize>>,
    dsts: Spanned<Vec<usize>>,
    bandwidth: Spanned<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NicToml {
    bandwidth: Spanned<f64>,
    alpha: Option<Spanned<f64>>,
    per_gpu: Option<Spanned<usize>>,
    per_node: Option<Spanned<usize>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MultinodeToml {
    node: Spanned<String>,
    nodes: Spanned<usize>,
    nic_bandwidth: Option<Spanned<f64>>,
    nic_alpha: Option<Spanned<f64>>,
    nics_per_gpu: Option<Spanned<usize>>,
    nics_per_node: Option<Spanned<usize>>,
    network: Option<Spanned<String>>,
    oversubscription: Option<Spanned<f64>>,
}

fn sp<T>(s: &Spanned<T>) -> Option<Range<usize>> {
    Some(s.span())
}

/// Collects links, remembering where each came from to report duplicates.
struct Builder<'s, 'a> {
    src: &'s Source<'a>,
    ranks: usize,
    links: Vec<Link>,
    from: Vec<String>,
    index: HashMap<(usize, usize), usize>,
    switches: Vec<SwitchConstraint>,
}

impl Builder<'_, '_> {
    fn check_rank(&self, r: &Spanned<usize>, field: &str) -> Result<usize> {
        let v = *r.get_ref();
        if v >= self.ranks {
            return Err(self.src.err(
                sp(r),
                field,
                format!(
                    "rank {v} out of range (ranks = {}, valid 0..{})",
                    self.ranks, self.ranks
                ),
            ));
        }
        Ok(v)
    }

    fn add(&mut self, l: Link, span: Option<Range<usize>>, field: &str) -> Result<()> {
        if l.src == l.dst {
            return Err(self
                .src
                .err(span, field, format!("self link {} -> {}", l.src, l.dst)));
        }
        super::check_bandwidth(l.bandwidth).map_err(|e| self.src.err(span.clone(), field, e))?;
        if self.links.len() >= super::MAX_LINKS {
            return Err(self.src.err(
                span,
                field,
                format!("more than {} links (the limit)", super::MAX_LINKS),
            ));
        }
        if let Some(&i) = self.index.get(&(l.src, l.dst)) {
            return Err(self.src.err(
                span,
                field,
                format!(
                    "duplicate link {} -> {} (already defined by {})",
                    l.src, l.dst, self.from[i]
                ),
            ));
        }
        self.index.insert((l.src, l.dst), self.links.len());
        self.links.push(l);
        self.from.push(field.to_string());
        Ok(())
    }

    /// Adds the links of the multiplicity `matrix`: entry k at (i, j) is one link i -> j of
    /// k x the default bandwidth.
    fn add_matrix(&mut self, m: &Spanned<Vec<Spanned<Vec<u32>>>>, d: LinkDefaults) -> Result<()> {
        let rows = m.get_ref();
        let ranks = self.ranks;
        if rows.len() != ranks {
            return Err(self.src.err(
                sp(m),
                "matrix",
                format!("has {} rows but ranks = {ranks}", rows.len()),
            ));
        }
        for (i, row) in rows.iter().enumerate() {
            let field = format!("matrix[{i}]");
            if row.get_ref().len() != ranks {
                return Err(self.src.err(
                    sp(row),
                    &field,
                    format!("has {} entries but ranks = {ranks}", row.get_ref().len()),
                ));
            }
            for (j, &k) in row.get_ref().iter().enumerate() {
                if k == 0 {
                    continue;
                }
                if i == j {
                    return Err(self.src.err(
                        sp(row),
                        &field,
                        format!("self link {i} -> {i} (diagonal must be 0)"),
                    ));
                }
                let l = Link {
                    src: i,
                    dst: j,
                    bandwidth: d.bandwidth * k as f64,
                    alpha: d.alpha,
                };
                self.add(l, sp(row), &field)?;
            }
        }
        Ok(())
    }

    /// Adds an NVSwitch: a link between every pair of its members and, per member, an "out"
    /// and an "in" constraint of the port bandwidth. `alpha` is the file's default latency.
    fn add_nvswitch(&mut self, nv: &Spanned<NvSwitchToml>, alpha: f64) -> Result<()> {
        let nv_ref = nv.get_ref();
        let port = positive(self.src, &nv_ref.bandwidth, "nvswitch.bandwidth")?;
        let nv_alpha = match &nv_ref.alpha {
            Some(a) => non_negative(self.src, a, "nvswitch.alpha")?,
            None => alpha,
        };
        let members: Vec<usize> = match &nv_ref.ranks {
            Some(rs) => {
                let mut v = Vec::new();
                for &r in rs.get_ref() {
                    let s = Spanned::new(rs.span(), r);
                    v.push(self.check_rank(&s, "nvswitch.ranks")?);
                }
                v
            }
            None => (0..self.ranks).collect(),
        };
        for &g in &members {
            for &h in &members {
                if g != h {
                    let l = Link {
                        src: g,
                        dst: h,
                        bandwidth: port,
                        alpha: nv_alpha,
                    };
                    self.add(l, sp(nv), "nvswitch")?;
                }
            }
        }
        for &g in &members {
            let others: Vec<usize> = members.iter().copied().filter(|&h| h != g).collect();
            self.switches.push(SwitchConstraint {
                name: format!("nvswitch-out-{g}"),
                srcs: vec![g],
                dsts: others.clone(),
                bandwidth: port,
            });
            self.switches.push(SwitchConstraint {
                name: format!("nvswitch-in-{g}"),
                srcs: others,
                dsts: vec![g],
                bandwidth: port,
            });
        }
        Ok(())
    }

    /// Adds the `[[link]]` entry number `i` (and its reverse unless `bidirectional = false`).
    fn add_link_entry(
        &mut self,
        i: usize,
        entry: &Spanned<LinkToml>,
        d: LinkDefaults,
    ) -> Result<()> {
        let l = entry.get_ref();
        let field = format!("link[{i}]");
        let s = self.check_rank(&l.src, &format!("{field}.src"))?;
        let t = self.check_rank(&l.dst, &format!("{field}.dst"))?;
        if s == t {
            return Err(self.src.err(
                sp(&l.dst),
                &format!("{field}.dst"),
                format!("self link {s} -> {t}"),
            ));
        }
        let bandwidth = match &l.bandwidth {
            Some(x) => positive(self.src, x, &format!("{field}.bandwidth"))?,
            None => d.bandwidth,
        };
        let alpha = match &l.alpha {
            Some(x) => non_negative(self.src, x, &format!("{field}.alpha"))?,
            None => d.alpha,
        };
        let forward = Link {
            src: s,
            dst: t,
            bandwidth,
            alpha,
        };
        self.add(forward, sp(&l.src), &field)?;
        if l.bidirectional.unwrap_or(true) {
            let backward = Link {
                src: t,
                dst: s,
                bandwidth,
                alpha,
            };
            self.add(backward, sp(&l.src), &field)?;
        }
        Ok(())
    }

    /// Adds the `[[switch]]` entry number `i`, which must cover at least one link added so
    /// far.
    fn add_switch_entry(&mut self, i: usize, entry: &Spanned<SwitchToml>) -> Result<()> {
        let sw = entry.get_ref();
        let field = format!("switch[{i}]");
        let srcs = self.rank_set(&sw.srcs, &format!("{field}.srcs"))?;
        let dsts = self.rank_set(&sw.dsts, &format!("{field}.dsts"))?;
        let bandwidth = positive(self.src, &sw.bandwidth, &format!("{field}.bandwidth"))?;
        let c = SwitchConstraint {
            name: sw.name.clone().unwrap_or_else(|| format!("switch-{i}")),
            srcs,
            dsts,
            bandwidth,
        };
        if self.switches.iter().any(|s| s.name == c.name) {
            return Err(self.src.err(
                sp(entry),
                &format!("{field}.name"),
                format!("a switch constraint named '{}' is already defined", c.name),
            ));
        }
        if !self.links.iter().any(|l| c.covers(l.src, l.dst)) {
            return Err(self.src.err(
                sp(entry),
                &field,
                "covers no link (no link from srcs to dsts)",
            ));
        }
        self.switches.push(c);
        Ok(())
    }

    /// A non-empty list of ranks, each checked, sorted and without repeats.
    fn rank_set(&self, list: &Spanned<Vec<usize>>, field: &str) -> Result<Vec<usize>> {
        if list.get_ref().is_empty() {
            return Err(self.src.err(sp(list), field, "is empty"));
        }
        let mut v = Vec::new();
        for &r in list.get_ref() {
            v.push(self.check_rank(&Spanned::new(list.span(), r), field)?);
        }
        v.sort_unstable();
        v.dedup();
        Ok(v)
    }
}

/// Checks the ranks and the links the matrix and the NVSwitch will add (to `base` links)
/// against the limits before any is built.
fn check_size(src: &Source, file: &TopologyFile, ranks: usize, base: usize) -> Result<()> {
    let span = file.ranks.as_ref().map(Spanned::span);
    let span = span.or_else(|| file.matrix.as_ref().map(Spanned::span));
    super::check_size(ranks, 0).map_err(|e| src.err(span, "ranks", e))?;
    let mut links = base;
    if let Some(m) = &file.matrix {
        let rows = m.get_ref().iter();
        let nonzero: usize = rows
            .map(|r| r.get_ref().iter().filter(|&&k| k != 0).count())
            .sum();
        links = links.saturating_add(nonzero);
        super::check_size(ranks, links).map_err(|e| src.err(sp(m), "matrix", e))?;
    }
    if let Some(nv) = &file.nvswitch {
        let members = nv
            .get_ref()
            .ranks
            .as_ref()
            .map_or(ranks, |r| r.get_ref().len());
        links = links.saturating_add(members.saturating_mul(members));
        super::check_size(ranks, links).map_err(|e| src.err(sp(nv), "nvswitch", e))?;
    }
    Ok(())
}

/// A bandwidth field, checked against [`super::BANDWIDTH_RANGE`].
fn positive(src: &Source, v: &Spanned<f64>, field: &str) -> Result<f64> {
    super::check_bandwidth(*v.get_ref()).map_err(|e| src.err(sp(v), field, e))
}

/// A latency field, checked against [`super::MAX_ALPHA`].
fn non_negative(src: &Source, v: &Spanned<f64>, field: &str) -> Result<f64> {
    super::check_alpha(*v.get_ref()).map_err(|e| src.err(sp(v), field, e))
}

/// The link bandwidth and latency a file sets at the top level, used wherever a part gives
/// none.
#[derive(Clone, Copy)]
struct LinkDefaults {
    /// GB/s of one link.
    bandwidth: f64,
    /// Latency of one link in µs.
    alpha: f64,
}

/// The fabric a generator or a multi-node composition starts from, with which of the two
/// built it (for error messages).
type BaseFabric = (Topology, &'static str);

/// The topology of TOML `text` written inline by a test (it panics on a bad one).
#[cfg(test)]
pub(crate) fn parsed_text(text: &str) -> Topology {
    let src = Source {
        label: "test.toml".into(),
        text,
        dir: None,
        stem: "test".into(),
    };
    parse(&src, None, 0).unwrap().topology
}

/// Parses a topology TOML. `size` overrides the generator size (`ring:12`); `depth` bounds
/// multi-node nesting.
pub(crate) fn parse(src: &Source, size: Option<GenSize>, depth: usize) -> Result<Loaded> {
    let file: TopologyFile = toml::from_str(src.text).map_err(|e| src.toml_err(&e))?;
    let defaults = link_defaults(src, &file)?;
    let base = base_fabric(src, &file, size, depth, defaults)?;
    let ranks = rank_count(src, &file, base.as_ref())?;
    check_size(
        src,
        &file,
        ranks,
        base.as_ref().map_or(0, |(t, _)| t.links.len()),
    )?;

    let mut b = Builder {
        src,
        ranks,
        links: Vec::new(),
        from: Vec::new(),
        index: HashMap::new(),
        switches: Vec::new(),
    };
    let mut node_of = vec![0; ranks];
    let mut name = file.name.clone().unwrap_or_else(|| src.stem.clone());
    let mut runtime = runtime_of(src, &file)?;
    if let Some((t, what)) = base {
        runtime = runtime.or(t.runtime);
        for l in t.links {
            b.add(l, None, what)?;
        }
        b.switches = t.switches;
        node_of = t.node_of;
        if file.name.is_none() {
            name = t.name;
        }
    }
    if let Some(m) = &file.matrix {
        b.add_matrix(m, defaults)?;
    }
    if let Some(nv) = &file.nvswitch {
        b.add_nvswitch(nv, defaults.alpha)?;
    }
    for (i, entry) in file.link.iter().enumerate() {
        b.add_link_entry(i, entry, defaults)?;
    }
    for (i, entry) in file.switch.iter().enumerate() {
        b.add_switch_entry(i, entry)?;
    }
    if let Some(n) = &file.node_of {
        node_of = checked_node_of(src, n, ranks)?;
    }
    let nic = match &file.nic {
        Some(n) => Some(nic_facts(src, n.get_ref())?),
        None => None,
    };

    let topology = Topology {
        name,
        ranks,
        node_of,
        links: b.links,
        switches: b.switches,
        runtime,
    };
    topology
        .validate()
        .map_err(|e| anyhow!("{}: {e}", src.label))?;
    let topology = match &file.relabel {
        Some(seed) => topology.relabeled(&random_permutation(topology.ranks, *seed.get_ref())),
        None => topology,
    };
    Ok(Loaded {
        topology,
        nic,
        nic_problem: None,
    })
}

/// The file's `runtime` (`"nccl"`, `"rccl"` or `"legacy"`), checked.
fn runtime_of(src: &Source, file: &TopologyFile) -> Result<Option<runtime::ir::Flavor>> {
    let Some(name) = &file.runtime else {
        return Ok(None);
    };
    match runtime::ir::Flavor::from_name(name.get_ref()) {
        Some(f) => Ok(Some(f)),
        None => Err(src.err(
            sp(name),
            "runtime",
            format!(
                "unknown runtime '{}' (expected \"nccl\", \"rccl\" or \"legacy\")",
                name.get_ref()
            ),
        )),
    }
}

/// The permutation of `n` ranks that `relabel = seed` applies: rank `r` becomes `to[r]`.
pub fn random_permutation(n: usize, seed: u64) -> Vec<usize> {
    use rand::{seq::SliceRandom, SeedableRng};
    let mut to: Vec<usize> = (0..n).collect();
    to.shuffle(&mut rand::rngs::StdRng::seed_from_u64(seed));
    to
}

/// The top-level `bandwidth` and `alpha`, checked, or their defaults.
fn link_defaults(src: &Source, file: &TopologyFile) -> Result<LinkDefaults> {
    let bandwidth = match &file.bandwidth {
        Some(b) => positive(src, b, "bandwidth")?,
        None => DEFAULT_BANDWIDTH,
    };
    let alpha = match &file.alpha {
        Some(a) => non_negative(src, a, "alpha")?,
        None => DEFAULT_ALPHA,
    };
    Ok(LinkDefaults { bandwidth, alpha })
}

/// The starting fabric: a generator's or a multi-node composition's (never both), or none.
/// A `size` (from the spec or the file) without a generator is an error.
fn base_fabric(
    src: &Source,
    file: &TopologyFile,
    size: Option<GenSize>,
    depth: usize,
    defaults: LinkDefaults,
) -> Result<Option<BaseFabric>> {
    let mut base: Option<BaseFabric> = None;
    if let (Some(_), Some(m)) = (&file.generator, &file.multinode) {
        return Err(src.err(sp(m), "multinode", "cannot be combined with generator"));
    }
    if let Some(g) = &file.generator {
        base = Some((generated(src, file, g, size, defaults)?, "generator"));
    } else if let Some(s) = size {
        return Err(src.err(
            None,
            "size",
            format!("'{}' is not a generator and takes no size '{s}'", src.stem),
        ));
    } else if let Some(s) = &file.size {
        return Err(src.err(sp(s), "size", "size needs a generator"));
    }
    if let Some(m) = &file.multinode {
        base = Some((
            compose(src, m.get_ref(), file.name.as_deref(), depth)?,
            "multinode",
        ));
    }
    Ok(base)
}

/// The fabric of the file's generator `g` at `size` (else the file's `size`, else the
/// generator's default size).
fn generated(
    src: &Source,
    file: &TopologyFile,
    g: &Spanned<String>,
    size: Option<GenSize>,
    defaults: LinkDefaults,
) -> Result<Topology> {
    let name = g.get_ref().as_str();
    if !generators::is_generator(name) {
        let known: Vec<&str> = generators::GENERATORS.iter().map(|g| g.0).collect();
        return Err(src.err(
            sp(g),
            "generator",
            format!("unknown generator '{name}' (known: {})", known.join(", ")),
        ));
    }
    let (gsize, span) = match (size, &file.size) {
        (Some(s), _) => (s, None),
        (None, Some(s)) => (file_size(src, s)?, sp(s)),
        (None, None) => (
            generators::default_size(name).expect("known generator"),
            sp(g),
        ),
    };
    generators::generate(name, gsize, defaults.bandwidth, defaults.alpha)
        .map_err(|e| src.err(span, "size", e))
}

/// The file's `size`: a rank count or `"ROWSxCOLS"`.
fn file_size(src: &Source, s: &Spanned<toml::Value>) -> Result<GenSize> {
    let parsed = match s.get_ref() {
        toml::Value::Integer(n) if *n >= 0 => Ok(GenSize::Ranks(*n as usize)),
        toml::Value::String(t) => parse_size(t),
        other => Err(anyhow!(
            "expected a rank count or \"ROWSxCOLS\", got {other}"
        )),
    };
    parsed.map_err(|e| src.err(sp(s), "size", e))
}

/// The rank count, checked for agreement between everything that implies one (the base
/// fabric, `ranks`, the matrix) and to be at least 1.
fn rank_count(src: &Source, file: &TopologyFile, base: Option<&BaseFabric>) -> Result<usize> {
    let matrix_rows = file.matrix.as_ref().map(|m| m.get_ref().len());
    let ranks = match (base, &file.ranks, matrix_rows) {
        (Some((t, what)), Some(r), _) if t.ranks != *r.get_ref() => {
            return Err(src.err(
                sp(r),
                "ranks",
                format!(
                    "ranks = {} but the {what} has {} ranks",
                    r.get_ref(),
                    t.ranks
                ),
            ))
        }
        (Some((t, _)), _, _) => t.ranks,
        (None, Some(r), _) => *r.get_ref(),
        (None, None, Some(m)) => m,
        (None, None, None) => {
            return Err(src.err(
                None,
                "ranks",
                "missing: give ranks, a matrix, a generator or [multinode]",
            ))
        }
    };
    if ranks == 0 {
        let span = file.ranks.as_ref().and_then(sp);
        return Err(src.err(span, "ranks", "must be at least 1"));
    }
    Ok(ranks)
}

/// The file's `node_of`, checked to give one node below `ranks` for every rank.
fn checked_node_of(src: &Source, n: &Spanned<Vec<usize>>, ranks: usize) -> Result<Vec<usize>> {
    if n.get_ref().len() != ranks {
        return Err(src.err(
            sp(n),
            "node_of",
            format!("has {} entries but ranks = {ranks}", n.get_ref().len()),
        ));
    }
    if let Some(k) = n.get_ref().iter().find(|&&k| k >= ranks) {
        return Err(src.err(
            sp(n),
            "node_of",
            format!("node {k} is not below ranks = {ranks}"),
        ));
    }
    Ok(n.get_ref().clone())
}

fn placement(
    src: &Source,
    per_gpu: &Option<Spanned<usize>>,
    per_node: &Option<Spanned<usize>>,
    prefix: &str,
) -> Result<Option<NicPlacement>> {
    match (per_gpu, per_node) {
        (Some(_), Some(n)) => Err(src.err(
            sp(n),
            &format!("{prefix}per_node"),
            format!("give either {prefix}per_gpu or {prefix}per_node, not both"),
        )),
        (Some(g), None) if *g.get_ref() == 0 => {
            Err(src.err(sp(g), &format!("{prefix}per_gpu"), "must be at least 1"))
        }
        (None, Some(n)) if *n.get_ref() == 0 => {
            Err(src.err(sp(n), &format!("{prefix}per_node"), "must be at least 1"))
        }
        (Some(g), None) => Ok(Some(NicPlacement::PerGpu(*g.get_ref()))),
        (None, Some(n)) => Ok(Some(NicPlacement::PerNode(*n.get_ref()))),
        (None, None) => Ok(None),
    }
}

fn nic_facts(src: &Source, n: &NicToml) -> Result<NicFacts> {
    Ok(NicFacts {
        bandwidth: positive(src, &n.bandwidth, "nic.bandwidth")?,
        alpha: match &n.alpha {
            Some(a) => non_negative(src, a, "nic.alpha")?,
            None => DEFAULT_NIC_ALPHA,
        },
        placement: placement(src, &n.per_gpu, &n.per_node, "nic.")?
            .unwrap_or(NicPlacement::PerGpu(1)),
    })
}

fn compose(src: &Source, m: &MultinodeToml, name: Option<&str>, depth: usize) -> Result<Topology> {
    let node_spec = m.node.get_ref();
    let node = super::resolve(node_spec, src.dir.as_deref(), depth + 1)
        .map_err(|e| src.err(sp(&m.node), "multinode.node", e))?;
    let nodes = *m.nodes.get_ref();
    if nodes == 0 {
        return Err(src.err(sp(&m.nodes), "multinode.nodes", "must be at least 1"));
    }
    let facts = node.nic.as_ref();
    let bandwidth = match (&m.nic_bandwidth, facts) {
        (Some(b), _) => positive(src, b, "multinode.nic_bandwidth")?,
        (None, Some(f)) => f.bandwidth,
        (None, None) => {
            return Err(src.err(
                sp(&m.node),
                "multinode.nic_bandwidth",
                format!("missing: node '{node_spec}' has no [nic] facts"),
            ))
        }
    };
    let alpha = match (&m.nic_alpha, facts) {
        (Some(a), _) => non_negative(src, a, "multinode.nic_alpha")?,
        (None, Some(f)) => f.alpha,
        (None, None) => DEFAULT_NIC_ALPHA,
    };
    let placement = placement(src, &m.nics_per_gpu, &m.nics_per_node, "multinode.nics_")?
        .or(facts.map(|f| f.placement))
        .unwrap_or(NicPlacement::PerGpu(1));
    let network = match &m.network {
        Some(n) => multinode::Network::parse(n.get_ref())
            .map_err(|e| src.err(sp(n), "multinode.network", e))?,
        None => multinode::Network::FatTree,
    };
    let default_name = match network {
        multinode::Network::FatTree => format!("{}x{nodes}", node.topology.name),
        multinode::Network::Rail => format!("{}x{nodes}:rail", node.topology.name),
    };
    let nic = NicFacts {
        bandwidth,
        alpha,
        placement,
    };
    let mut topo = multinode::compose(
        &node.topology,
        nodes,
        &nic,
        network,
        name.unwrap_or(&default_name),
    )
    .map_err(|e| src.err(sp(&m.nodes), "multinode", e))?;
    if let Some(f) = &m.oversubscription {
        multinode::oversubscribe(&mut topo, &node.topology, &nic, *f.get_ref())
            .map_err(|e| src.err(sp(f), "multinode.oversubscription", e))?;
    }
    Ok(topo)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The TOML blocks of this module's documentation, which must stay loadable.
    fn doc_examples() -> Vec<String> {
        let mut blocks = Vec::new();
        let mut current: Option<String> = None;
        for line in include_str!("toml_format.rs").lines() {
            let Some(doc) = line.strip_prefix("//!") else {
                continue;
            };
            let doc = doc.strip_prefix(' ').unwrap_or(doc);
            match (&mut current, doc) {
                (None, "```toml") => current = Some(String::new()),
                (Some(b), "```") => {
                    blocks.push(std::mem::take(b));
                    current = None;
                }
                (Some(b), text) => {
                    b.push_str(text);
                    b.push('\n');
                }
                (None, _) => {}
            }
        }
        blocks
    }

    #[test]
    fn documented_examples_load() {
        let blocks = doc_examples();
        assert_eq!(blocks.len(), 2);
        for (i, text) in blocks.iter().enumerate() {
            let src = Source {
                label: format!("doc example {i}"),
                text,
                dir: None,
                stem: "doc".into(),
            };
            let loaded = parse(&src, None, 0).unwrap_or_else(|e| panic!("{e}"));
            assert!(loaded.topology.ranks >= 8);
        }
        let src = Source {
            label: "x".into(),
            text: &blocks[0],
            dir: None,
            stem: "x".into(),
        };
        let t = parse(&src, None, 0).unwrap().topology;
        assert_eq!(t.link(0, 7).map(|l| l.bandwidth), Some(12.5));
        assert!(t.link(7, 0).is_none());
        assert_eq!(t.nodes(), 2);
        let src = Source {
            label: "y".into(),
            text: &blocks[1],
            dir: None,
            stem: "y".into(),
        };
        assert_eq!(parse(&src, None, 0).unwrap().topology.ranks, 16);
    }

    /// Parses `text` as a topology file.
    fn load(text: &str) -> anyhow::Result<Topology> {
        let src = Source {
            label: "t.toml".into(),
            text,
            dir: None,
            stem: "t".into(),
        };
        parse(&src, None, 0).map(|l| l.topology)
    }

    #[test]
    fn relabel_renumbers_ranks_and_keeps_the_fabric() {
        let plain = load("[multinode]\nnode = \"dgx-a100\"\nnodes = 2\n").unwrap();
        let twin = load("relabel = 7\n[multinode]\nnode = \"dgx-a100\"\nnodes = 2\n").unwrap();
        let to = random_permutation(plain.ranks, 7);
        assert_ne!(to, (0..plain.ranks).collect::<Vec<_>>());
        assert_eq!(twin, plain.relabeled(&to));
        for l in &plain.links {
            let image = twin
                .link(to[l.src], to[l.dst])
                .expect("the link follows its ranks");
            assert_eq!((image.bandwidth, image.alpha), (l.bandwidth, l.alpha));
        }
        assert!((0..plain.ranks).all(|r| plain.node_of[r] == twin.node_of[to[r]]));
        assert_eq!(twin.switches.len(), plain.switches.len());
    }

    #[test]
    fn oversubscription_caps_each_node_uplink() {
        let text = "[multinode]\nnode = \"dgx-a100\"\nnodes = 4\noversubscription = 4\n";
        let t = load(text).unwrap();
        let uplinks: Vec<_> = t
            .switches
            .iter()
            .filter(|s| s.name.contains("uplink"))
            .collect();
        // Per node one constraint out and one in, each 8 NICs x 25 GB/s / 4.
        assert_eq!(uplinks.len(), 8);
        assert!(uplinks.iter().all(|s| s.bandwidth == 50.0));
        assert_eq!((uplinks[0].srcs.len(), uplinks[0].dsts.len()), (8, 24));
        let bad = load(&text.replace("oversubscription = 4", "oversubscription = 0.5"))
            .unwrap_err()
            .to_string();
        assert!(bad.contains("oversubscription must be at least 1"), "{bad}");
        assert!(bad.contains("t.toml:4"), "{bad}");
    }
}
