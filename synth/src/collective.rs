//! Collectives as lists of chunks with pre/postconditions and addresses (DESIGN §2).
//!
//! A chunk starts on the ranks of its precondition and must end on the ranks of its
//! postcondition. Chunks that share an address are reduced together (combining
//! collectives); such collectives are solved as the non-combining dual on the reversed
//! topology ([`Collective::dual`]).

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

/// The collectives synth knows by name, plus user-defined ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// Every rank's chunk ends on every rank.
    AllGather,
    /// Every rank ends with the sum of its slice of every rank's input.
    ReduceScatter,
    /// Every rank ends with the sum of every rank's input.
    AllReduce,
    /// Rank r's block for rank d ends on rank d.
    AllToAll,
    /// The root's buffer ends on every rank.
    Broadcast,
    /// The root ends with the sum of every rank's input.
    Reduce,
    /// Every rank's chunk ends on the root.
    Gather,
    /// The root's slice for rank r ends on rank r.
    Scatter,
    /// Chunks read from a file.
    Custom,
}

impl Kind {
    /// Every named kind with the spelling the CLI accepts.
    pub const NAMED: [(Kind, &'static str); 8] = [
        (Kind::AllGather, "allgather"),
        (Kind::ReduceScatter, "reducescatter"),
        (Kind::AllReduce, "allreduce"),
        (Kind::AllToAll, "alltoall"),
        (Kind::Broadcast, "broadcast"),
        (Kind::Reduce, "reduce"),
        (Kind::Gather, "gather"),
        (Kind::Scatter, "scatter"),
    ];

    /// The canonical lower-case name (`allgather`, `reducescatter`, ...).
    pub fn name(self) -> &'static str {
        Kind::NAMED
            .iter()
            .find(|(k, _)| *k == self)
            .map_or("custom", |(_, n)| n)
    }

    /// Whether the collective has a root rank.
    pub fn is_rooted(self) -> bool {
        matches!(
            self,
            Kind::Broadcast | Kind::Reduce | Kind::Gather | Kind::Scatter
        )
    }

    /// How many of the collective's original (unsplit) chunks make up one user buffer, so
    /// that a chunk of an algorithm with C chunks per original chunk has `size / (units × C)`
    /// bytes, where `size` is the nccl-tests message size.
    pub fn units_per_buffer(self, ranks: usize) -> usize {
        match self {
            Kind::Broadcast | Kind::Reduce | Kind::Custom => 1,
            _ => ranks,
        }
    }

    /// The runtime-IR collective this kind lowers to.
    pub fn to_ir(self) -> Option<runtime::ir::Collective> {
        use runtime::ir::Collective as C;
        Some(match self {
            Kind::AllGather => C::AllGather,
            Kind::ReduceScatter => C::ReduceScatter,
            Kind::AllReduce => C::AllReduce,
            Kind::AllToAll => C::AllToAll,
            Kind::Broadcast => C::Broadcast,
            Kind::Reduce => C::Reduce,
            Kind::Gather => C::Gather,
            Kind::Scatter => C::Scatter,
            Kind::Custom => return None,
        })
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Kind {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Kind> {
        let norm: String = s
            .chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .collect::<String>()
            .to_ascii_lowercase();
        Kind::NAMED
            .iter()
            .find(|(_, n)| *n == norm)
            .map(|(k, _)| *k)
            .with_context(|| {
                let names: Vec<_> = Kind::NAMED.iter().map(|(_, n)| *n).collect();
                format!(
                    "unknown collective `{s}` (known: {}; or a custom collective file .toml/.json)",
                    names.join(", ")
                )
            })
    }
}

/// The most pieces [`Collective::phases`] splits an address into to give each of its
/// destinations an equal share (the least common multiple of the destination counts);
/// past it, as many as the most destinations, some destinations reducing more pieces.
pub const MAX_PHASE_PIECES: usize = 16;

/// A collective that reduces onto several ranks as a reduce phase and a spread phase
/// ([`Collective::phases`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Phases {
    /// Pieces each address of the collective is split into.
    pub pieces: usize,
    /// The reduce phase: per piece of a combining address, its contributions reduced onto
    /// one of its destinations (a custom collective at one chunk per address).
    pub reduce: Collective,
    /// Per address of `reduce`, the piece it is (`address × pieces + j`).
    pub reduce_of: Vec<usize>,
    /// The spread phase: every piece copied from the rank that holds it to the rest of its
    /// destinations (pieces already where they must end left out).
    pub spread: Collective,
    /// Per address of `spread`, the piece it is.
    pub spread_of: Vec<usize>,
}

/// One chunk of a collective.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Chunk {
    /// Ranks holding the chunk at the start.
    pub pre: Vec<usize>,
    /// Ranks that must hold it (fully reduced, for combining chunks) at the end; shared
    /// (an allreduce on 1024 ranks has four million chunks, each to end on every rank).
    pub post: Arc<[usize]>,
    /// Buffer address; chunks sharing one are reduced together.
    pub address: usize,
}

/// A collective over `ranks` ranks, already split into `chunks_per_rank` pieces (C).
/// Written to JSON without its chunks unless it is custom (a named collective's follow from
/// its kind, ranks, root and C; a 1024-rank allreduce's lists would take gigabytes); read
/// back, a named collective without chunks is rebuilt, one with chunks kept as written
/// (that JSON form belongs to the algorithm files: `algo_file`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Collective {
    /// Which collective this is.
    pub kind: Kind,
    /// Number of ranks.
    pub ranks: usize,
    /// Root rank for rooted collectives (0 otherwise).
    pub root: usize,
    /// C: how many pieces every original chunk was split into.
    pub chunks_per_rank: usize,
    /// The chunks; for non-combining collectives address `i` belongs to chunk `i`.
    pub chunks: Vec<Chunk>,
}

impl Collective {
    /// The named collective `kind` on `ranks` ranks, each original chunk split in `c` pieces.
    pub fn new(kind: Kind, ranks: usize, root: usize, c: usize) -> Result<Collective> {
        if ranks < 2 {
            bail!("a collective needs at least 2 ranks (got {ranks})");
        }
        crate::topology::check_size(ranks, 0)?;
        if c == 0 {
            bail!("chunks must be at least 1");
        }
        if root >= ranks {
            bail!(
                "--root {root} is out of range: the topology has ranks 0..{}",
                ranks - 1
            );
        }
        let all: Arc<[usize]> = (0..ranks).collect();
        let one = |r: usize| -> Arc<[usize]> { Arc::from([r]) };
        let mut chunks = Vec::new();
        let mut push = |pre: Vec<usize>, post: Arc<[usize]>, address: usize| {
            chunks.push(Chunk { pre, post, address })
        };
        match kind {
            Kind::AllGather | Kind::Gather => {
                for r in 0..ranks {
                    for k in 0..c {
                        let post = if kind == Kind::Gather {
                            one(root)
                        } else {
                            all.clone()
                        };
                        push(vec![r], post, r * c + k);
                    }
                }
            }
            Kind::Broadcast => (0..c).for_each(|k| push(vec![root], all.clone(), k)),
            Kind::Scatter => {
                for r in 0..ranks {
                    (0..c).for_each(|k| push(vec![root], one(r), r * c + k));
                }
            }
            Kind::AllToAll => {
                for dst in 0..ranks {
                    for src in 0..ranks {
                        (0..c).for_each(|k| push(vec![src], one(dst), (dst * ranks + src) * c + k));
                    }
                }
            }
            Kind::ReduceScatter | Kind::AllReduce => {
                for owner in 0..ranks {
                    for k in 0..c {
                        let post = if kind == Kind::AllReduce {
                            all.clone()
                        } else {
                            one(owner)
                        };
                        for contributor in 0..ranks {
                            push(vec![contributor], post.clone(), owner * c + k);
                        }
                    }
                }
            }
            Kind::Reduce => {
                for k in 0..c {
                    for contributor in 0..ranks {
                        push(vec![contributor], one(root), k);
                    }
                }
            }
            Kind::Custom => bail!("custom collectives are read with Collective::from_file"),
        }
        Ok(Collective {
            kind,
            ranks,
            root,
            chunks_per_rank: c,
            chunks,
        })
    }

    /// A custom collective from a TOML or JSON file (`ranks = N` and `[[chunk]]` entries
    /// with `pre`, `post` and optional `address`), each chunk split in `c` pieces.
    pub fn from_file(path: &str, c: usize) -> Result<Collective> {
        let text = std::fs::read_to_string(path).with_context(|| format!("{path}: cannot read"))?;
        Collective::from_text(path, &text, c)
    }

    /// A custom collective from the text of a file named `path` (JSON if it ends in `.json`,
    /// else TOML), as [`Collective::from_file`] reads it.
    pub fn from_text(path: &str, text: &str, c: usize) -> Result<Collective> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct FileChunk {
            pre: Vec<usize>,
            post: Vec<usize>,
            address: Option<usize>,
        }
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct File {
            ranks: usize,
            #[serde(rename = "chunk")]
            chunks: Vec<FileChunk>,
        }
        let file: File = if path.ends_with(".json") {
            serde_json::from_str(text).map_err(|e| crate::util::json_error(path, &e))?
        } else {
            toml::from_str(text).map_err(|e| crate::util::toml_error(path, text, &e))?
        };
        if c == 0 {
            bail!("chunks must be at least 1");
        }
        if file.ranks < 2 {
            bail!(
                "{path}: ranks: a collective needs at least 2 ranks (got {})",
                file.ranks
            );
        }
        crate::topology::check_size(file.ranks, 0)
            .map_err(|e| anyhow::anyhow!("{path}: ranks: {e}"))?;
        let max_address = file.ranks * file.ranks;
        let mut chunks = Vec::new();
        for (i, fc) in file.chunks.iter().enumerate() {
            if let Some(a) = fc.address.filter(|&a| a >= max_address) {
                bail!("{path}: chunk[{i}].address: {a} is not below ranks x ranks = {max_address}");
            }
            for (field, list) in [("pre", &fc.pre), ("post", &fc.post)] {
                if let Some(r) = list.iter().find(|&&r| r >= file.ranks) {
                    bail!(
                        "{path}: chunk[{i}].{field}: rank {r} out of range (ranks = {})",
                        file.ranks
                    );
                }
            }
            if fc.pre.is_empty() {
                bail!("{path}: chunk[{i}].pre: a chunk must start on at least one rank");
            }
            let address = fc.address.unwrap_or(i);
            for k in 0..c {
                chunks.push(Chunk {
                    pre: fc.pre.clone(),
                    post: fc.post.clone().into(),
                    address: address * c + k,
                });
            }
        }
        if chunks.is_empty() {
            bail!("{path}: no [[chunk]] entries");
        }
        let collective = Collective {
            kind: Kind::Custom,
            ranks: file.ranks,
            root: 0,
            chunks_per_rank: c,
            chunks,
        };
        if collective.builtin().is_none() {
            let valid = if collective.ends_on_many() {
                collective.phases().map(drop)
            } else {
                collective.dual().map(drop)
            };
            valid.with_context(|| format!("{path}: unsupported combining chunks"))?;
        }
        Ok(collective)
    }

    /// For a custom collective whose conditions are those of a built-in one (allgather,
    /// reduce-scatter, allreduce, alltoall, broadcast, reduce, gather or scatter with some
    /// root), that built-in at the same C, to be solved with its symmetry, bounds and
    /// lowering. Addresses may be numbered differently, and a chunk's postcondition may list
    /// or leave out the ranks that start with it. `None` for other collectives.
    pub fn builtin(&self) -> Option<Collective> {
        if self.kind != Kind::Custom {
            return None;
        }
        let (n, c) = (self.ranks, self.chunks_per_rank);
        let shape = self.shape();
        // One candidate root per rooted kind, read off the collective itself.
        let source = self.chunks.first()?.pre.first().copied().unwrap_or(0);
        let sink = self
            .chunks
            .iter()
            .find_map(|c| c.post.first().copied())
            .unwrap_or(0);
        for (kind, _) in Kind::NAMED {
            let expected = match kind {
                Kind::AllGather | Kind::Gather | Kind::Scatter | Kind::Reduce => n * c,
                Kind::ReduceScatter | Kind::AllReduce | Kind::AllToAll => n * n * c,
                Kind::Broadcast => c,
                Kind::Custom => continue,
            };
            if self.chunks.len() != expected {
                continue;
            }
            let root = match kind {
                Kind::Broadcast | Kind::Scatter => source,
                Kind::Reduce | Kind::Gather => sink,
                _ => 0,
            };
            let Ok(candidate) = Collective::new(kind, n, root.min(n - 1), c) else {
                continue;
            };
            if candidate.shape() == shape {
                return Some(candidate);
            }
        }
        None
    }

    /// The conditions up to address numbering: per address its destinations (without the
    /// ranks that start with a non-combining chunk) and its chunks' sources, sorted.
    fn shape(&self) -> Vec<(Vec<usize>, Vec<Vec<usize>>)> {
        let mut shape: Vec<(Vec<usize>, Vec<Vec<usize>>)> = self
            .by_address()
            .values()
            .map(|members| {
                let mut pres: Vec<Vec<usize>> = members
                    .iter()
                    .map(|&m| {
                        let mut p = self.chunks[m].pre.clone();
                        p.sort_unstable();
                        p.dedup();
                        p
                    })
                    .collect();
                pres.sort();
                let mut post: Vec<usize> = members
                    .iter()
                    .flat_map(|&m| self.chunks[m].post.iter().copied())
                    .filter(|r| members.len() > 1 || !pres[0].contains(r))
                    .collect();
                post.sort_unstable();
                post.dedup();
                (post, pres)
            })
            .collect();
        shape.sort();
        shape
    }

    /// Number of distinct addresses.
    pub fn addresses(&self) -> usize {
        self.chunks.iter().map(|c| c.address + 1).max().unwrap_or(0)
    }

    /// Whether some address is shared by several chunks (so they must be reduced).
    pub fn is_combining(&self) -> bool {
        self.by_address().values().any(|v| v.len() > 1)
    }

    /// The distinct postconditions among `members` (chunks of one address): an allreduce's
    /// thousand chunks per address share one, so a pass over (address, rank) pairs goes
    /// over each pair once instead of once per chunk.
    pub fn distinct_posts(&self, members: &[usize]) -> Vec<&Arc<[usize]>> {
        let mut posts: Vec<&Arc<[usize]>> = Vec::new();
        for &m in members {
            let post = &self.chunks[m].post;
            if !posts.iter().any(|p| Arc::ptr_eq(p, post) || *p == post) {
                posts.push(post);
            }
        }
        posts
    }

    /// Chunk indices grouped by address.
    pub fn by_address(&self) -> BTreeMap<usize, Vec<usize>> {
        let mut map: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for (i, c) in self.chunks.iter().enumerate() {
            map.entry(c.address).or_default().push(i);
        }
        map
    }

    /// Whether the collective reduces (some address has several chunks) and some address
    /// ends on other than exactly one rank: solved by [`Collective::phases`], not as a dual.
    pub fn ends_on_many(&self) -> bool {
        self.is_combining()
            && self
                .by_address()
                .values()
                .any(|members| self.chunks[members[0]].post.len() != 1)
    }

    /// The destinations and contributors of a combining address (chunks `members`): every
    /// chunk ends on the same ranks, at least one, and starts on exactly one rank, a
    /// different one per chunk.
    fn reduction(&self, address: usize, members: &[usize]) -> Result<(Vec<usize>, Vec<usize>)> {
        let post = &self.chunks[members[0]].post;
        if members.iter().any(|&m| &self.chunks[m].post != post) {
            bail!("the chunks of address {address} have different postconditions; chunks reduced together must end on the same ranks");
        }
        if post.is_empty() {
            bail!("address {address} is reduced but ends on no rank; give its chunks a post");
        }
        if let Some(&m) = members.iter().find(|&&m| self.chunks[m].pre.len() != 1) {
            bail!("a chunk of address {address} starts on {} ranks; in a combining collective every chunk starts on exactly one rank (its contribution would be counted once per holder)", self.chunks[m].pre.len());
        }
        let mut contributors: Vec<usize> = members.iter().map(|&m| self.chunks[m].pre[0]).collect();
        contributors.sort_unstable();
        if let Some(w) = contributors.windows(2).find(|w| w[0] == w[1]) {
            bail!("address {address} has two chunks starting on rank {}; a rank contributes at most one chunk to a reduction", w[0]);
        }
        let mut destinations = post.to_vec();
        destinations.sort_unstable();
        destinations.dedup();
        Ok((destinations, contributors))
    }

    /// A collective that reduces onto several ranks ([`Collective::ends_on_many`]) as two
    /// phases, reduce-scatter + allgather generalised so the destinations share the
    /// bandwidth: every address split into [`Phases::pieces`] pieces, piece `j` of a
    /// combining address reduced onto its destination `j mod d` (of its `d`, in rank
    /// order), then every piece copied from where it is to the ranks that still need it.
    /// Both phases are custom collectives at one chunk per address, solved as any other
    /// (the first as a dual).
    pub fn phases(&self) -> Result<Phases> {
        let by_address = self.by_address();
        let mut reductions = BTreeMap::new();
        for (&address, members) in by_address.iter().filter(|(_, m)| m.len() > 1) {
            reductions.insert(address, self.reduction(address, members)?);
        }
        let counts = reductions.values().map(|(d, _)| d.len());
        let most = counts.clone().max().unwrap_or(1);
        let lcm = counts.fold(1, num_integer::lcm);
        let pieces = if lcm <= MAX_PHASE_PIECES { lcm } else { most };
        let (mut reduce, mut spread) = (Vec::new(), Vec::new());
        let (mut reduce_of, mut spread_of) = (Vec::new(), Vec::new());
        for (&address, members) in &by_address {
            for j in 0..pieces {
                let piece = address * pieces + j;
                let (holders, post): (Vec<usize>, Arc<[usize]>) = match reductions.get(&address) {
                    Some((destinations, contributors)) => {
                        let at = destinations[j % destinations.len()];
                        for &r in contributors {
                            reduce.push(Chunk {
                                pre: vec![r],
                                post: Arc::from([at]),
                                address: reduce_of.len(),
                            });
                        }
                        reduce_of.push(piece);
                        (vec![at], destinations.clone().into())
                    }
                    None => {
                        let chunk = &self.chunks[members[0]];
                        (chunk.pre.clone(), chunk.post.clone())
                    }
                };
                if post.iter().any(|r| !holders.contains(r)) {
                    spread.push(Chunk {
                        pre: holders,
                        post,
                        address: spread_of.len(),
                    });
                    spread_of.push(piece);
                }
            }
        }
        let custom = |chunks| Collective {
            kind: Kind::Custom,
            ranks: self.ranks,
            root: 0,
            chunks_per_rank: 1,
            chunks,
        };
        Ok(Phases {
            pieces,
            reduce: custom(reduce),
            reduce_of,
            spread: custom(spread),
            spread_of,
        })
    }

    /// For a combining collective whose addresses each end on one rank (reduce-scatter,
    /// reduce, gather-like custom ones): the non-combining dual, where each address
    /// starts on that rank and must reach every contributor. Solving the dual on the
    /// reversed topology and reversing the result gives the combining algorithm.
    /// Returns `Ok(None)` for non-combining collectives; fails where an address ends on
    /// several ranks ([`Collective::ends_on_many`]: see [`Collective::phases`]).
    pub fn dual(&self) -> Result<Option<Collective>> {
        if !self.is_combining() {
            return Ok(None);
        }
        let mut chunks = Vec::new();
        for (address, members) in self.by_address() {
            let (destinations, contributors) = if members.len() > 1 {
                self.reduction(address, &members)?
            } else {
                let chunk = &self.chunks[members[0]];
                if chunk.pre.len() != 1 {
                    bail!("a chunk of address {address} starts on {} ranks; in a combining collective every chunk starts on exactly one rank (its contribution would be counted once per holder)", chunk.pre.len());
                }
                (chunk.post.to_vec(), chunk.pre.clone())
            };
            let [destination] = destinations[..] else {
                bail!("address {address} ends on {} ranks, not one: a collective that reduces onto several ranks is solved in two phases (Collective::phases), not as a dual", destinations.len());
            };
            chunks.push(Chunk {
                pre: vec![destination],
                post: contributors.into(),
                address,
            });
        }
        let kind = match self.kind {
            Kind::ReduceScatter => Kind::AllGather,
            Kind::Reduce => Kind::Broadcast,
            other => other,
        };
        Ok(Some(Collective {
            kind,
            ranks: self.ranks,
            root: self.root,
            chunks_per_rank: self.chunks_per_rank,
            chunks,
        }))
    }
}
