//! Communication sketches (TACCL-style): a small TOML file that restricts what the MILP
//! encoding ([`crate::milp`]) may do, so that it scales to multi-node fabrics.
//!
//! A sketch says which links may carry data inside a node and across nodes, which ranks may
//! forward a chunk, which rotations of the fabric the algorithm must be invariant under, how
//! finely chunks are split and the solver's hyperparameters. Every field is optional; an
//! empty sketch allows every link and has no symmetry.
//!
//! ```toml
//! description = "DGX-A100 nodes: NVSwitch inside, each GPU relays over its own NIC"
//!
//! # Links that may carry data inside a node:
//! #   "switch" every link inside a node (NVSwitch); implies forward = "entry"
//! #   "all"    every link inside a node
//! #   "ring"   local GPU i to i+1 and i-1 (mod GPUs per node); the links must exist
//! #   "none"   no intra-node link
//! #   [[0, 1], [1, 0], ...] explicit pairs of local GPU indices, in every node
//! intranode = "switch"
//!
//! # Links that may carry data across nodes: "all" (default), "none", or a table:
//! #   strategy = "relay": GPU i of one node talks only to GPU i of other nodes
//! #              (map = "same-local-index", the only map), restricted to the local GPU
//! #              indices in `gpus` (default: every GPU with an inter-node link)
//! #   pairs = [[0, 8], [8, 0]]: explicit (src, dst) rank pairs instead of a strategy
//! internode = { strategy = "relay", map = "same-local-index" }
//!
//! # Which ranks may forward a chunk: "any" (default unless intranode = "switch") or
//! # "entry": only the chunk's source and the ranks that received it across nodes send it
//! # on (no multi-hop forwarding inside a node).
//! forward = "entry"
//!
//! # Rotational symmetry: rank r maps to (r / group) * group + (r % group + offset) % group
//! # (group defaults to every rank). The algorithm sends rot(c) over rot(u)->rot(v) in step s
//! # whenever it sends c over u->v in step s. Each rotation must map the fabric (links,
//! # bandwidths, latencies, switch constraints, nodes) and the sketch's links to themselves.
//! symmetry = [{ offset = 8 }, { offset = 1, group = 8 }]
//!
//! # Hyperparameters: pieces each chunk is split into (one model per value), the range of
//! # step counts (a model for C pieces has min(max, max(min, hops + C - 1)) steps, where hops
//! # is the least number of hops under the sketch; unused steps cost nothing), the target
//! # sizes in bytes (numbers or "1KB", "1MB", "1GB"; binary nccl-tests sizes, 1 KB = 1024), the solver's time
//! # limit per model in seconds and its relative MIP gap. Chunk counts go up to 64 and step
//! # counts up to 256 (the command line's `--chunks` and `--steps` limits).
//! chunks = [1, 6]
//! steps = [2, 8]
//! sizes = ["1KB", "1MB", "1GB"]
//! time_limit = 20.0
//! gap = 0.01
//! # Optional deterministic work limit: branch-and-bound nodes per model. With it the solver
//! # runs single-threaded with a fixed seed, so the same sketch gives the same algorithms
//! # whatever the machine's load (time_limit then only guards against runaway solves).
//! work_limit = 2000
//! ```
//!
//! Errors are one line: the file, the field and the reason; those that need the fabric
//! (unknown ranks, relays without an inter-node link, symmetries that do not map the fabric to
//! itself, sketches that make the collective impossible) come from [`Sketch::routing`] and
//! [`Routing::check_collective`].

use crate::collective::Collective;
use crate::request_limits::{MAX_CHUNKS, MAX_STEPS};
use crate::topology::{Topology, TopologyIndex};
use anyhow::{bail, Result};
use std::collections::{HashMap, VecDeque};
use toml::Value;

/// Which intra-node links may carry data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Intranode {
    /// Every intra-node link, forwarding only from entry ranks by default.
    Switch,
    /// Every intra-node link.
    All,
    /// Local GPU i to i±1 (mod GPUs per node).
    Ring,
    /// No intra-node link.
    None,
    /// Explicit (src, dst) pairs of local GPU indices, applied in every node.
    Pairs(Vec<(usize, usize)>),
}

/// Which inter-node links may carry data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Internode {
    /// Every inter-node link.
    All,
    /// No inter-node link.
    None,
    /// GPU i talks only to GPU i of other nodes; `gpus` restricts the local indices.
    Relay {
        /// The local GPU indices that relay (all with an inter-node link when `None`).
        gpus: Option<Vec<usize>>,
    },
    /// Explicit (src, dst) rank pairs.
    Pairs(Vec<(usize, usize)>),
}

/// Which ranks may forward a chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forward {
    /// Any rank holding it.
    Any,
    /// Only its source and the ranks that received it across nodes.
    Entry,
}

/// One rotation: `r -> (r / group) * group + (r % group + offset) % group`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rotation {
    /// How far ranks move within their group.
    pub offset: usize,
    /// Size of the blocks of ranks that rotate (`None`: all ranks).
    pub group: Option<usize>,
}

impl Rotation {
    /// The rank permutation on `ranks` ranks.
    pub fn permutation(&self, ranks: usize) -> Vec<usize> {
        let g = self.group.unwrap_or(ranks);
        (0..ranks)
            .map(|r| (r / g) * g + (r % g + self.offset) % g)
            .collect()
    }
}

/// A parsed sketch.
#[derive(Debug, Clone, PartialEq)]
pub struct Sketch {
    /// Where it came from (file name), used in every error.
    pub label: String,
    /// Intra-node links allowed.
    pub intranode: Intranode,
    /// Inter-node links allowed.
    pub internode: Internode,
    /// Forwarding rule (`None`: the default for `intranode`).
    pub forward: Option<Forward>,
    /// Rotational symmetries.
    pub symmetry: Vec<Rotation>,
    /// Piece counts C to try.
    pub chunks: Vec<usize>,
    /// Range of step counts (`None`: no bound).
    pub steps: (usize, Option<usize>),
    /// Target sizes in bytes (nccl-tests sizes).
    pub sizes: Vec<f64>,
    /// Time limit per model in seconds.
    pub time_limit: f64,
    /// Relative MIP gap.
    pub gap: f64,
    /// Deterministic work limit: branch-and-bound nodes per model (`None`: only the time
    /// limit). See [`crate::engine::Limits::work_limit`].
    pub work_limit: Option<u64>,
}

/// Largest `work_limit` (HiGHS counts nodes in a 32-bit integer).
pub const MAX_WORK_LIMIT: u64 = i32::MAX as u64;

/// Default target sizes: 1 KB, 1 MB, 1 GB (binary, like every size of the command line).
pub const DEFAULT_SIZES: [f64; 3] = [1024.0, 1048576.0, 1073741824.0];

impl Default for Sketch {
    fn default() -> Sketch {
        Sketch {
            label: "(no sketch)".into(),
            intranode: Intranode::All,
            internode: Internode::All,
            forward: None,
            symmetry: Vec::new(),
            chunks: vec![1, 2, 3],
            steps: (1, None),
            sizes: DEFAULT_SIZES.to_vec(),
            time_limit: 20.0,
            gap: 0.01,
            work_limit: None,
        }
    }
}

const FIELDS: [&str; 11] = [
    "description",
    "intranode",
    "internode",
    "forward",
    "symmetry",
    "chunks",
    "steps",
    "sizes",
    "time_limit",
    "gap",
    "work_limit",
];

impl Sketch {
    /// Reads a sketch file.
    pub fn load(path: &str) -> Result<Sketch> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("{path}: cannot read: {e}"))?;
        Sketch::parse(path, &text)
    }

    /// Parses sketch TOML `text`; `label` names it in errors.
    pub fn parse(label: &str, text: &str) -> Result<Sketch> {
        let table: toml::Table =
            toml::from_str(text).map_err(|e| crate::util::toml_error(label, text, &e))?;
        // A quoted value (a TOML multi-line string) may hold line breaks: the error stays
        // one line.
        let err = |field: &str, reason: String| {
            let reason = crate::util::escape_line_breaks(&reason);
            anyhow::anyhow!("{label}: {field}: {reason}")
        };
        let mut sketch = Sketch {
            label: label.to_string(),
            ..Sketch::default()
        };
        for (key, value) in &table {
            let field = |r: String| err(key, r);
            match key.as_str() {
                "description" => {
                    if !value.is_str() {
                        return Err(err(key, "expected a string".into()));
                    }
                }
                "intranode" => sketch.intranode = parse_intranode(value).map_err(field)?,
                "internode" => sketch.internode = parse_internode(value).map_err(field)?,
                "forward" => sketch.forward = Some(parse_forward(value).map_err(field)?),
                "symmetry" => sketch.symmetry = parse_symmetry(value).map_err(field)?,
                "chunks" => sketch.chunks = parse_chunks(value).map_err(field)?,
                "steps" => sketch.steps = parse_steps(value).map_err(field)?,
                "sizes" => sketch.sizes = parse_sizes(value).map_err(field)?,
                "time_limit" => sketch.time_limit = parse_limit(value, false).map_err(field)?,
                "gap" => sketch.gap = parse_limit(value, true).map_err(field)?,
                "work_limit" => sketch.work_limit = Some(parse_work_limit(value).map_err(field)?),
                other => {
                    return Err(err(
                        other,
                        format!("unknown field (known: {})", FIELDS.join(", ")),
                    ))
                }
            }
        }
        Ok(sketch)
    }

    /// The forwarding rule in force.
    pub fn forward_rule(&self) -> Forward {
        self.forward
            .unwrap_or(if self.intranode == Intranode::Switch {
                Forward::Entry
            } else {
                Forward::Any
            })
    }

    /// The same sketch for the reversed fabric (combining collectives are solved as their
    /// dual there): explicit link pairs are flipped.
    pub fn reversed(&self) -> Sketch {
        let flip = |v: &Vec<(usize, usize)>| v.iter().map(|&(a, b)| (b, a)).collect();
        let mut s = self.clone();
        if let Intranode::Pairs(p) = &self.intranode {
            s.intranode = Intranode::Pairs(flip(p));
        }
        if let Internode::Pairs(p) = &self.internode {
            s.internode = Internode::Pairs(flip(p));
        }
        s
    }

    /// Resolves the sketch on `topology`: which links may carry data, and the rank
    /// permutations of its symmetries. Fails, naming the field, on unknown ranks, relays
    /// without an inter-node link and symmetries that do not map the fabric to itself.
    pub fn routing(&self, topology: &Topology) -> Result<Routing> {
        let fabric = Fabric::new(topology);
        let mut allowed = vec![false; topology.links.len()];
        self.allow_intranode(&fabric, &mut allowed)?;
        self.allow_internode(&fabric, &mut allowed)?;
        let generators = self.symmetry_generators(&fabric, &allowed)?;
        Ok(Routing {
            allowed,
            forward: self.forward_rule(),
            generators,
            label: self.label.clone(),
        })
    }

    /// Allows the intra-node links the sketch names.
    fn allow_intranode(&self, fabric: &Fabric, allowed: &mut [bool]) -> Result<()> {
        let (label, topology) = (&self.label, fabric.topology);
        match &self.intranode {
            Intranode::Switch | Intranode::All => {
                for (i, l) in topology.links.iter().enumerate() {
                    allowed[i] |= topology.node_of[l.src] == topology.node_of[l.dst];
                }
            }
            Intranode::None => {}
            Intranode::Ring | Intranode::Pairs(_) => {
                let mut pairs = Vec::new();
                if let Intranode::Pairs(p) = &self.intranode {
                    for (k, &(a, b)) in p.iter().enumerate() {
                        if a.max(b) >= fabric.max_local {
                            bail!("{label}: intranode[{k}]: unknown rank: local GPU {} (nodes have {} GPUs)", a.max(b), fabric.max_local);
                        }
                        pairs.push((a, b));
                    }
                }
                for node in 0..topology.nodes() {
                    self.allow_node_pairs(fabric, node, &pairs, allowed)?;
                }
            }
        }
        Ok(())
    }

    /// Allows, in `node`, the links of a ring over its GPUs or of `pairs` (local GPUs).
    fn allow_node_pairs(
        &self,
        fabric: &Fabric,
        node: usize,
        pairs: &[(usize, usize)],
        allowed: &mut [bool],
    ) -> Result<()> {
        let (label, topology, n) = (&self.label, fabric.topology, fabric.topology.ranks);
        let g = (0..n).filter(|&r| topology.node_of[r] == node).count();
        let node_pairs: Vec<(usize, usize)> = if self.intranode == Intranode::Ring {
            if g < 2 {
                return Ok(());
            }
            (0..g)
                .flat_map(|i| [(i, (i + 1) % g), ((i + 1) % g, i)])
                .collect()
        } else {
            pairs.to_vec()
        };
        let rank_of =
            |i: usize| (0..n).find(|&r| topology.node_of[r] == node && fabric.local[r] == i);
        for (a, b) in node_pairs {
            let (Some(u), Some(v)) = (rank_of(a), rank_of(b)) else {
                bail!(
                    "{label}: intranode: node {node} has no local GPU {}",
                    a.max(b)
                );
            };
            match fabric.index.link_of.get(&(u, v)) {
                Some(&i) => allowed[i] = true,
                None => bail!(
                    "{label}: intranode: node {node} has no link {u}->{v} (local GPUs {a}->{b})"
                ),
            }
        }
        Ok(())
    }

    /// Allows the inter-node links the sketch names.
    fn allow_internode(&self, fabric: &Fabric, allowed: &mut [bool]) -> Result<()> {
        let (label, topology, n) = (&self.label, fabric.topology, fabric.topology.ranks);
        let crosses = |i: usize| {
            let l = &topology.links[i];
            topology.node_of[l.src] != topology.node_of[l.dst]
        };
        match &self.internode {
            Internode::All => (0..allowed.len())
                .filter(|&i| crosses(i))
                .for_each(|i| allowed[i] = true),
            Internode::None => {}
            Internode::Pairs(pairs) => {
                for (k, &(u, v)) in pairs.iter().enumerate() {
                    if u.max(v) >= n {
                        bail!("{label}: internode.pairs[{k}]: unknown rank {} (topology `{}` has ranks 0..{})", u.max(v), topology.name, n - 1);
                    }
                    if topology.node_of[u] == topology.node_of[v] {
                        bail!(
                            "{label}: internode.pairs[{k}]: ranks {u} and {v} are on the same node"
                        );
                    }
                    match fabric.index.link_of.get(&(u, v)) {
                        Some(&i) => allowed[i] = true,
                        None => bail!("{label}: internode.pairs[{k}]: rank {u} has no inter-node link to rank {v} (no NIC path)"),
                    }
                }
            }
            Internode::Relay { gpus } => self.allow_relays(fabric, gpus.as_deref(), allowed)?,
        }
        Ok(())
    }

    /// Allows the inter-node links of the relay ranks (those with local GPU in `gpus`, or
    /// every rank with a NIC) to their peers of the same local GPU on other nodes.
    fn allow_relays(
        &self,
        fabric: &Fabric,
        gpus: Option<&[usize]>,
        allowed: &mut [bool],
    ) -> Result<()> {
        let (label, topology, n) = (&self.label, fabric.topology, fabric.topology.ranks);
        let (local, link_of) = (&fabric.local, &fabric.index.link_of);
        if let Some(list) = gpus {
            if let Some(&i) = list.iter().find(|&&i| i >= fabric.max_local) {
                bail!(
                    "{label}: internode.gpus: unknown rank: local GPU {i} (nodes have {} GPUs)",
                    fabric.max_local
                );
            }
        }
        let relays = |r: usize| gpus.is_none_or(|list| list.contains(&local[r]));
        for u in (0..n).filter(|&u| relays(u)) {
            let peers: Vec<usize> = (0..n)
                .filter(|&v| topology.node_of[v] != topology.node_of[u] && local[v] == local[u])
                .collect();
            let has_nic = peers.iter().any(|&v| link_of.contains_key(&(u, v)));
            if gpus.is_some() {
                if let Some(&v) = peers.iter().find(|&&v| !link_of.contains_key(&(u, v))) {
                    bail!(
                        "{label}: internode.gpus: relay rank {u} (node {}, GPU {}) has no inter-node link to rank {v}: no NIC there",
                        topology.node_of[u],
                        local[u]
                    );
                }
            }
            if has_nic {
                for v in peers {
                    if let Some(&i) = link_of.get(&(u, v)) {
                        allowed[i] = true;
                    }
                }
            }
        }
        Ok(())
    }

    /// The rank permutation of each symmetry of the sketch, checked to map the fabric (and
    /// its `allowed` links) to itself.
    fn symmetry_generators(&self, fabric: &Fabric, allowed: &[bool]) -> Result<Vec<Vec<usize>>> {
        let (label, topology, n) = (&self.label, fabric.topology, fabric.topology.ranks);
        let mut generators = Vec::new();
        for (k, rot) in self.symmetry.iter().enumerate() {
            let what = format!(
                "{label}: symmetry[{k}] (offset {}, group {})",
                rot.offset,
                rot.group.unwrap_or(n)
            );
            let g = rot.group.unwrap_or(n);
            if g == 0 || !n.is_multiple_of(g) {
                bail!("{what}: the group size must divide the {n} ranks");
            }
            if rot.offset >= g {
                bail!("{what}: unknown rank: offset must be below the group size");
            }
            let p = rot.permutation(n);
            check_automorphism(topology, &p, allowed, &fabric.index).map_err(|reason| {
                anyhow::anyhow!(
                    "{what} does not map topology `{}` to itself: {reason}",
                    topology.name
                )
            })?;
            generators.push(p);
        }
        Ok(generators)
    }
}

/// What resolving a sketch needs of a topology, computed once.
struct Fabric<'t> {
    topology: &'t Topology,
    index: TopologyIndex,
    /// Each rank's GPU index within its node.
    local: Vec<usize>,
    /// The most GPUs of one node.
    max_local: usize,
}

impl<'t> Fabric<'t> {
    fn new(topology: &'t Topology) -> Fabric<'t> {
        let node_size = |r: usize| {
            (topology.node_of.iter())
                .filter(|&&k| k == topology.node_of[r])
                .count()
        };
        Fabric {
            topology,
            index: topology.index(),
            local: local_indices(topology),
            max_local: (0..topology.ranks).map(node_size).max().unwrap_or(0),
        }
    }
}

/// The resolved sketch on one fabric.
#[derive(Debug, Clone)]
pub struct Routing {
    /// Whether each topology link (by index) may carry data.
    pub allowed: Vec<bool>,
    /// The forwarding rule.
    pub forward: Forward,
    /// Rank permutations generating the symmetry group.
    pub generators: Vec<Vec<usize>>,
    label: String,
}

impl Routing {
    /// Allows every link, no symmetry (for unsketched problems).
    pub fn everything(topology: &Topology) -> Routing {
        Routing {
            allowed: vec![true; topology.links.len()],
            forward: Forward::Any,
            generators: Vec::new(),
            label: "(no sketch)".into(),
        }
    }

    /// The links (indices) chunk `chunk` of `coll` may use: the allowed ones, and under
    /// the `entry` rule only those leaving its source or a rank it can reach across nodes.
    pub fn chunk_links(&self, topology: &Topology, coll: &Collective, chunk: usize) -> Vec<usize> {
        let usable = (0..topology.links.len()).filter(|&i| self.allowed[i]);
        match self.forward {
            Forward::Any => usable.collect(),
            Forward::Entry => {
                let mut entry = vec![false; topology.ranks];
                let mut queue: VecDeque<usize> = coll.chunks[chunk].pre.iter().copied().collect();
                queue.iter().for_each(|&r| entry[r] = true);
                while let Some(u) = queue.pop_front() {
                    for (i, l) in topology.links.iter().enumerate() {
                        if l.src == u
                            && self.allowed[i]
                            && topology.node_of[l.dst] != topology.node_of[u]
                            && !entry[l.dst]
                        {
                            entry[l.dst] = true;
                            queue.push_back(l.dst);
                        }
                    }
                }
                usable.filter(|&i| entry[topology.links[i].src]).collect()
            }
        }
    }

    /// Fewest hops from chunk `chunk`'s sources to each rank over `links` (`None`: never).
    pub fn hops(
        topology: &Topology,
        coll: &Collective,
        chunk: usize,
        links: &[usize],
    ) -> Vec<Option<usize>> {
        link_distances(topology, links, &coll.chunks[chunk].pre, true)
    }

    /// The least number of steps any algorithm needs under the sketch; fails, naming the
    /// chunk and the rank, when the sketch makes the collective impossible.
    pub fn check_collective(&self, topology: &Topology, coll: &Collective) -> Result<usize> {
        let mut most = 0;
        for c in 0..coll.chunks.len() {
            let links = self.chunk_links(topology, coll, c);
            let dist = Routing::hops(topology, coll, c, &links);
            for &r in coll.chunks[c].post.iter() {
                match dist[r] {
                    Some(d) => most = most.max(d),
                    None => bail!(
                        "{}: the sketch makes {} impossible on `{}`: chunk {} (starting on rank {}) cannot reach rank {r}",
                        self.label,
                        coll.kind,
                        topology.name,
                        coll.chunks[c].address,
                        coll.chunks[c].pre[0]
                    ),
                }
            }
        }
        Ok(most)
    }
}

/// Position of each rank among the ranks of its node.
pub fn local_indices(topology: &Topology) -> Vec<usize> {
    let mut seen: HashMap<usize, usize> = HashMap::new();
    topology
        .node_of
        .iter()
        .map(|&k| {
            let e = seen.entry(k).or_insert(0);
            *e += 1;
            *e - 1
        })
        .collect()
}

fn check_automorphism(
    topology: &Topology,
    p: &[usize],
    allowed: &[bool],
    index: &TopologyIndex,
) -> std::result::Result<(), String> {
    let n = topology.ranks;
    for a in 0..n {
        for b in 0..n {
            let same = topology.node_of[a] == topology.node_of[b];
            if same != (topology.node_of[p[a]] == topology.node_of[p[b]]) {
                return Err(format!(
                    "ranks {a} and {b} become {} and {}, which splits or merges nodes",
                    p[a], p[b]
                ));
            }
        }
    }
    for (i, l) in topology.links.iter().enumerate() {
        let Some(&j) = index.link_of.get(&(p[l.src], p[l.dst])) else {
            return Err(format!(
                "link {}->{} becomes {}->{}, which does not exist",
                l.src, l.dst, p[l.src], p[l.dst]
            ));
        };
        let m = &topology.links[j];
        if (m.bandwidth - l.bandwidth).abs() > 1e-9 || (m.alpha - l.alpha).abs() > 1e-9 {
            return Err(format!(
                "link {}->{} ({} GB/s, {} us) becomes {}->{} ({} GB/s, {} us)",
                l.src, l.dst, l.bandwidth, l.alpha, m.src, m.dst, m.bandwidth, m.alpha
            ));
        }
        if allowed[i] != allowed[j] {
            return Err(format!(
                "the sketch allows link {}->{} but not its image {}->{} (or the reverse)",
                l.src, l.dst, m.src, m.dst
            ));
        }
    }
    let key = |srcs: &mut Vec<usize>, dsts: &mut Vec<usize>, bw: f64| {
        srcs.sort_unstable();
        dsts.sort_unstable();
        (srcs.clone(), dsts.clone(), (bw * 1e6).round() as i64)
    };
    let switches: std::collections::HashSet<_> = topology
        .switches
        .iter()
        .map(|s| key(&mut s.srcs.clone(), &mut s.dsts.clone(), s.bandwidth))
        .collect();
    for s in &topology.switches {
        let mut srcs: Vec<usize> = s.srcs.iter().map(|&r| p[r]).collect();
        let mut dsts: Vec<usize> = s.dsts.iter().map(|&r| p[r]).collect();
        if !switches.contains(&key(&mut srcs, &mut dsts, s.bandwidth)) {
            return Err(format!(
                "switch constraint `{}` has no image of the same bandwidth",
                s.name
            ));
        }
    }
    Ok(())
}

/// The `forward` field: `"any"` or `"entry"`.
fn parse_forward(value: &Value) -> std::result::Result<Forward, String> {
    match value.as_str() {
        Some("any") => Ok(Forward::Any),
        Some("entry") => Ok(Forward::Entry),
        _ => Err(format!("expected \"any\" or \"entry\", got {value}")),
    }
}

/// The `chunks` field: one chunk count or a list, each in 1..=MAX_CHUNKS.
fn parse_chunks(value: &Value) -> std::result::Result<Vec<usize>, String> {
    let list = match value {
        Value::Array(_) => uints(value),
        _ => uint(value).map(|c| vec![c]),
    }?;
    if list.is_empty() || list.contains(&0) {
        return Err("expected one or more chunk counts >= 1".into());
    }
    if let Some(c) = list.iter().find(|&&c| c > MAX_CHUNKS) {
        return Err(format!("{c} is not between 1 and {MAX_CHUNKS}"));
    }
    Ok(list)
}

/// The `steps` field: one step count or `[min, max]`, within 1..=MAX_STEPS.
fn parse_steps(value: &Value) -> std::result::Result<(usize, Option<usize>), String> {
    if let Value::Array(_) = value {
        return match uints(value)?.as_slice() {
            [lo, hi] if lo <= hi && *lo >= 1 && *hi <= MAX_STEPS => Ok((*lo, Some(*hi))),
            _ => Err(format!(
                "expected [min, max] with 1 <= min <= max <= {MAX_STEPS}"
            )),
        };
    }
    let s = uint(value)?;
    if s == 0 || s > MAX_STEPS {
        return Err(format!("{s} is not between 1 and {MAX_STEPS}"));
    }
    Ok((s, Some(s)))
}

/// The `sizes` field: a non-empty list of sizes.
fn parse_sizes(value: &Value) -> std::result::Result<Vec<f64>, String> {
    let Value::Array(items) = value else {
        return Err("expected a list of sizes".into());
    };
    let sizes = items
        .iter()
        .map(parse_size)
        .collect::<std::result::Result<Vec<_>, _>>()?;
    if sizes.is_empty() {
        return Err("expected at least one size".into());
    }
    Ok(sizes)
}

/// The `time_limit` or (`below_one`) `gap` field: a positive finite number, below 1 for
/// the gap.
fn parse_limit(value: &Value, below_one: bool) -> std::result::Result<f64, String> {
    let v = number(value)?;
    if !(v.is_finite() && v > 0.0) || (below_one && v >= 1.0) {
        return Err(format!("{v} is out of range"));
    }
    Ok(v)
}

/// The `work_limit` field: branch-and-bound nodes in 1..=MAX_WORK_LIMIT.
fn parse_work_limit(value: &Value) -> std::result::Result<u64, String> {
    let v = uint(value)? as u64;
    if v == 0 || v > MAX_WORK_LIMIT {
        return Err(format!("{v} is not between 1 and {MAX_WORK_LIMIT}"));
    }
    Ok(v)
}

fn uint(v: &Value) -> std::result::Result<usize, String> {
    match v.as_integer() {
        Some(i) if i >= 0 => Ok(i as usize),
        _ => Err(format!("expected a non-negative integer, got {v}")),
    }
}

fn uints(v: &Value) -> std::result::Result<Vec<usize>, String> {
    match v {
        Value::Array(items) => items.iter().map(uint).collect(),
        _ => Err(format!("expected a list of integers, got {v}")),
    }
}

fn number(v: &Value) -> std::result::Result<f64, String> {
    match v {
        Value::Integer(i) => Ok(*i as f64),
        Value::Float(f) => Ok(*f),
        _ => Err(format!("expected a number, got {v}")),
    }
}

fn pairs(v: &Value) -> std::result::Result<Vec<(usize, usize)>, String> {
    let Value::Array(items) = v else {
        return Err(format!("expected a list of [src, dst] pairs, got {v}"));
    };
    items
        .iter()
        .map(|p| match uints(p)?.as_slice() {
            [a, b] => Ok((*a, *b)),
            _ => Err(format!("expected a [src, dst] pair, got {p}")),
        })
        .collect()
}

fn parse_intranode(v: &Value) -> std::result::Result<Intranode, String> {
    match v {
        Value::String(s) => match s.as_str() {
            "switch" => Ok(Intranode::Switch),
            "all" => Ok(Intranode::All),
            "ring" => Ok(Intranode::Ring),
            "none" => Ok(Intranode::None),
            other => Err(format!("unknown pattern \"{other}\" (expected \"switch\", \"all\", \"ring\", \"none\" or a list of local [src, dst] pairs)")),
        },
        Value::Array(_) => pairs(v).map(Intranode::Pairs),
        _ => Err(format!("expected a string or a list of pairs, got {v}")),
    }
}

fn parse_internode(v: &Value) -> std::result::Result<Internode, String> {
    match v {
        Value::String(s) => match s.as_str() {
            "all" => Ok(Internode::All),
            "none" => Ok(Internode::None),
            "relay" => Ok(Internode::Relay { gpus: None }),
            other => Err(format!(
                "unknown strategy \"{other}\" (expected \"all\", \"none\", \"relay\" or a table)"
            )),
        },
        Value::Table(t) => {
            for key in t.keys() {
                if !["strategy", "map", "gpus", "pairs"].contains(&key.as_str()) {
                    return Err(format!(
                        "unknown key `{key}` (known: strategy, map, gpus, pairs)"
                    ));
                }
            }
            if let Some(p) = t.get("pairs") {
                if t.get("strategy")
                    .is_some_and(|s| s.as_str() != Some("relay"))
                    || t.contains_key("map")
                    || t.contains_key("gpus")
                {
                    return Err("`pairs` replaces strategy, map and gpus".into());
                }
                return pairs(p).map(Internode::Pairs);
            }
            let strategy = match t.get("strategy") {
                None => "relay",
                Some(Value::String(s)) => s.as_str(),
                Some(other) => return Err(format!("strategy: expected a string, got {other}")),
            };
            match strategy {
                "all" | "none" if t.len() > 1 => {
                    Err(format!("strategy \"{strategy}\" takes no other keys"))
                }
                "all" => Ok(Internode::All),
                "none" => Ok(Internode::None),
                "relay" => {
                    match t.get("map").map(|m| m.as_str()) {
                        None | Some(Some("same-local-index")) => {}
                        Some(_) => {
                            return Err(format!(
                                "map: unknown map {} (expected \"same-local-index\")",
                                t["map"]
                            ))
                        }
                    }
                    let gpus = t
                        .get("gpus")
                        .map(uints)
                        .transpose()
                        .map_err(|e| format!("gpus: {e}"))?;
                    Ok(Internode::Relay { gpus })
                }
                other => Err(format!(
                    "unknown strategy \"{other}\" (expected \"relay\", \"all\" or \"none\")"
                )),
            }
        }
        _ => Err(format!("expected a string or a table, got {v}")),
    }
}

fn parse_symmetry(v: &Value) -> std::result::Result<Vec<Rotation>, String> {
    let items: Vec<&Value> = match v {
        Value::Array(a) => a.iter().collect(),
        Value::Table(_) => vec![v],
        _ => return Err(format!("expected a table or a list of tables, got {v}")),
    };
    items
        .into_iter()
        .map(|item| {
            let Value::Table(t) = item else {
                return Err(format!("expected {{ offset = K, group = G }}, got {item}"));
            };
            if let Some(key) = t
                .keys()
                .find(|k| !["offset", "group"].contains(&k.as_str()))
            {
                return Err(format!("unknown key `{key}` (known: offset, group)"));
            }
            let offset = t
                .get("offset")
                .ok_or("missing `offset`")
                .map_err(str::to_string)
                .and_then(uint)?;
            let group = t.get("group").map(uint).transpose()?;
            Ok(Rotation { offset, group })
        })
        .collect()
}

/// Parses a size: a number of bytes or a string like `"64KB"`, `"1MB"`, `"1GB"` in the one
/// size syntax of every command ([`runtime::cpu::parse_size`]: binary, 1 KB = 1 KiB = 1024;
/// at most [`runtime::cpu::MAX_SIZE`]).
pub fn parse_size(v: &Value) -> std::result::Result<f64, String> {
    let bytes = match v {
        Value::String(s) => runtime::cpu::parse_size(s).map_err(|e| format!("{e:#}"))? as f64,
        other => number(other)?,
    };
    if !(bytes.is_finite() && bytes > 0.0) {
        Err(format!("size {v} must be positive"))
    } else if bytes > runtime::cpu::MAX_SIZE as f64 {
        Err(format!("size {v} is above the limit of 1024T (2^50 bytes)"))
    } else {
        Ok(bytes)
    }
}

/// Fewest hops over the links `links` of `topology` from any rank in `starts` to every rank
/// (`forward`), or from every rank to any rank in `starts` (`!forward`); `None`: never.
pub fn link_distances(
    topology: &Topology,
    links: &[usize],
    starts: &[usize],
    forward: bool,
) -> Vec<Option<usize>> {
    let mut dist = vec![None; topology.ranks];
    let mut queue = VecDeque::new();
    for &r in starts {
        dist[r] = Some(0);
        queue.push_back(r);
    }
    while let Some(u) = queue.pop_front() {
        let du = dist[u].unwrap_or(0);
        for &i in links {
            let l = &topology.links[i];
            let (from, to) = if forward {
                (l.src, l.dst)
            } else {
                (l.dst, l.src)
            };
            if from == u && dist[to].is_none() {
                dist[to] = Some(du + 1);
                queue.push_back(to);
            }
        }
    }
    dist
}
