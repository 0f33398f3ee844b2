//! Algorithm files: synth's own algorithm JSON (what the main command writes next to the
//! XML) and the SCCL / msccl-tools algorithm JSON (objects tagged `msccl_type`), read into an
//! [`Algorithm`] with its topology so that an algorithm is re-lowered, verified or simulated
//! without solving again. Every error is one line naming the file, the field and the reason.
//!
//! The msccl-tools format: `{"msccl_type": "algorithm", "name", "instance": {"steps",
//! "extra_rounds", "chunks", "pipeline", "extra_memory", "allow_exchange"}, "input_map",
//! "output_map", "steps": [{"msccl_type": "step", "rounds", "sends": [[addr, src, dst]]}],
//! "collective": {"name", "nodes", "chunks": [{"pre", "post", "addr"}], "triggers",
//! "runtime_name"}, "topology": {"name", "links", "switches": [[srcs, dsts, bw, name]]}}`.
//! Its collective is the unsplit one; `instance.chunks` = C splits every chunk's address `a`
//! into `a·C + k`, which is synth's layout. `links[dst][src]` counts links of one unit of
//! bandwidth (taken as 25 GB/s, one NVLink2, with synth's default alpha of 0.7 µs).

use crate::algorithm::{Algorithm, Send, Step};
use crate::collective::{Chunk, Collective, Kind};
use crate::topology::{self, Link, SwitchConstraint, Topology};
use anyhow::{anyhow, bail, Result};
use serde_json::{Map, Value};

mod collective_json;

/// GB/s of one unit of bandwidth in an msccl-tools topology (one NVLink2).
pub const MSCCL_LINK_GBPS: f64 = 25.0;
/// Latency (µs) given to the links of an msccl-tools topology.
pub const MSCCL_LINK_ALPHA: f64 = 0.7;
/// Most pieces per chunk (`instance.chunks`, `chunks_per_rank`) an algorithm file may have.
pub const MAX_FILE_CHUNKS: usize = 4096;
/// Most chunks (pieces) of one algorithm file's collective.
pub const MAX_FILE_PIECES: usize = 1 << 24;

/// What a file holds, detected from its content.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// MSCCL XML.
    Xml,
    /// synth's JSON form of a lowered program (`runtime::ir::Program`).
    Program,
    /// synth's algorithm JSON.
    Algorithm,
    /// SCCL / msccl-tools algorithm JSON (`msccl_type`).
    Msccl,
}

impl Format {
    /// Short name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            Format::Xml => "msccl-xml",
            Format::Program => "program-json",
            Format::Algorithm => "algorithm-json",
            Format::Msccl => "msccl-algorithm-json",
        }
    }
}

/// Detects the format of `path` from its first non-blank character and, for JSON, its keys.
pub fn detect(path: &str) -> Result<Format> {
    let text = std::fs::read_to_string(path).map_err(|e| anyhow!("{path}: cannot read: {e}"))?;
    if !text.trim_start().starts_with('{') {
        return Ok(Format::Xml);
    }
    let value: Value =
        serde_json::from_str(&text).map_err(|e| crate::util::json_error(path, &e))?;
    Ok(json_format(&value))
}

fn json_format(value: &Value) -> Format {
    let Some(obj) = value.as_object() else {
        return Format::Program;
    };
    if obj.contains_key("msccl_type") {
        Format::Msccl
    } else if obj.contains_key("steps") && obj.get("topology").is_some_and(Value::is_string) {
        Format::Algorithm
    } else {
        Format::Program
    }
}

/// An algorithm read from a file, with the topology it runs on.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The algorithm (checked by [`check::check`](crate::check::check) on `topology`).
    pub algorithm: Algorithm,
    /// Its topology: `--topo` when given, else the one embedded (msccl-tools) or named
    /// (synth) in the file.
    pub topology: Topology,
    /// The file's format.
    pub format: Format,
}

/// Reads an algorithm file (synth's algorithm JSON or msccl-tools JSON) and checks it with
/// the independent checker on `topo` (a topology spec; default: the file's own topology).
pub fn read_algorithm(path: &str, topo: Option<&str>) -> Result<Loaded> {
    let text = std::fs::read_to_string(path).map_err(|e| anyhow!("{path}: cannot read: {e}"))?;
    let value: Value =
        serde_json::from_str(&text).map_err(|e| crate::util::json_error(path, &e))?;
    let format = json_format(&value);
    let (algorithm, topology) = match format {
        Format::Msccl => {
            let (mut algorithm, embedded) = from_msccl(path, &value)?;
            let topology = match topo {
                Some(spec) => {
                    let t = topology::load(spec)?;
                    algorithm.name = algorithm.name.replacen(
                        &format!("-{}-", sanitize(&algorithm.topology)),
                        &format!("-{}-", sanitize(&t.name)),
                        1,
                    );
                    algorithm.topology = t.name.clone();
                    t
                }
                None => embedded.ok_or_else(|| {
                    anyhow!("{path}: topology: missing; give one with --topo")
                })?,
            };
            (algorithm, topology)
        }
        Format::Algorithm => {
            let algorithm: Algorithm =
                serde_json::from_value(value).map_err(|e| anyhow!("{path}: {e}"))?;
            validate_synth(path, &algorithm)?;
            let topology = match topo {
                Some(spec) => topology::load(spec)?,
                None => topology::load(&algorithm.topology).map_err(|e| {
                    anyhow!(
                        "{path}: topology: cannot load `{}` ({e:#}); give it with --topo",
                        algorithm.topology
                    )
                })?,
            };
            (algorithm, topology)
        }
        _ => bail!(
            "{path}: not an algorithm file (neither synth's algorithm JSON nor msccl-tools JSON with `msccl_type`)"
        ),
    };
    crate::check::check(&algorithm, &topology).map_err(|e| {
        anyhow!(
            "{path}: the algorithm fails the checker on `{}`: {e}",
            topology.name
        )
    })?;
    Ok(Loaded {
        algorithm,
        topology,
        format,
    })
}

/// Sizes and consistency of synth's algorithm JSON, before anything is allocated from it.
fn validate_synth(path: &str, a: &Algorithm) -> Result<()> {
    let c = &a.collective;
    if c.chunks_per_rank == 0 || c.chunks_per_rank > MAX_FILE_CHUNKS {
        bail!(
            "{path}: collective.chunks_per_rank: {} is not in 1..={MAX_FILE_CHUNKS}",
            c.chunks_per_rank
        );
    }
    topology::check_size(c.ranks, 0).map_err(|e| anyhow!("{path}: collective.ranks: {e}"))?;
    if c.chunks.len() > MAX_FILE_PIECES {
        bail!("{path}: collective.chunks: more than {MAX_FILE_PIECES} chunks");
    }
    for (i, chunk) in c.chunks.iter().enumerate() {
        if let Some(r) = chunk
            .pre
            .iter()
            .chain(chunk.post.iter())
            .find(|&&r| r >= c.ranks)
        {
            bail!(
                "{path}: collective.chunks[{i}]: rank {r} out of range (ranks = {})",
                c.ranks
            );
        }
    }
    if c.kind != Kind::Custom {
        let expected = Collective::new(c.kind, c.ranks, c.root, c.chunks_per_rank)
            .map_err(|e| anyhow!("{path}: collective: {e:#}"))?;
        if expected.chunks != c.chunks {
            bail!(
                "{path}: collective.chunks: not the chunks of {} on {} ranks with {} chunks",
                c.kind,
                c.ranks,
                c.chunks_per_rank
            );
        }
    }
    Ok(())
}

/// One msccl-tools JSON object being read: its value and where it is (for error messages).
struct Obj<'a> {
    path: &'a str,
    at: String,
    map: &'a Map<String, Value>,
}

impl<'a> Obj<'a> {
    fn new(path: &'a str, at: String, value: &'a Value, tag: &str) -> Result<Obj<'a>> {
        let map = value
            .as_object()
            .ok_or_else(|| anyhow!("{path}: {at}: expected an object"))?;
        match map.get("msccl_type").and_then(Value::as_str) {
            Some(t) if t == tag => {}
            Some(t) => bail!("{path}: {at}.msccl_type: expected `{tag}`, found {t:?}"),
            None if at.is_empty() => {
                bail!("{path}: msccl_type: missing")
            }
            None => {}
        }
        Ok(Obj { path, at, map })
    }

    fn name(&self, key: &str) -> String {
        if self.at.is_empty() {
            key.to_string()
        } else {
            format!("{}.{key}", self.at)
        }
    }

    fn get(&self, key: &str) -> Result<&'a Value> {
        self.map
            .get(key)
            .ok_or_else(|| anyhow!("{}: {}: missing", self.path, self.name(key)))
    }

    fn usize(&self, key: &str) -> Result<usize> {
        let v = self.get(key)?;
        number(self.path, &self.name(key), v)
    }

    fn array(&self, key: &str) -> Result<&'a Vec<Value>> {
        self.get(key)?
            .as_array()
            .ok_or_else(|| anyhow!("{}: {}: expected a list", self.path, self.name(key)))
    }

    fn string(&self, key: &str) -> Result<&'a str> {
        self.get(key)?
            .as_str()
            .ok_or_else(|| anyhow!("{}: {}: expected a string", self.path, self.name(key)))
    }
}

fn number(path: &str, at: &str, v: &Value) -> Result<usize> {
    v.as_u64()
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| anyhow!("{path}: {at}: expected a non-negative integer, found {v}"))
}

fn ranks_list(path: &str, at: &str, v: &Value, n: usize) -> Result<Vec<usize>> {
    let list = v
        .as_array()
        .ok_or_else(|| anyhow!("{path}: {at}: expected a list of ranks"))?;
    let mut ranks = Vec::with_capacity(list.len());
    for (i, r) in list.iter().enumerate() {
        let r = number(path, &format!("{at}[{i}]"), r)?;
        if r >= n {
            bail!("{path}: {at}[{i}]: rank {r} out of range (ranks = {n})");
        }
        if !ranks.contains(&r) {
            ranks.push(r);
        }
    }
    ranks.sort_unstable();
    Ok(ranks)
}

/// Converts msccl-tools algorithm JSON into an algorithm and its embedded topology (if any).
fn from_msccl(path: &str, value: &Value) -> Result<(Algorithm, Option<Topology>)> {
    let root = Obj::new(path, String::new(), value, "algorithm")?;
    let instance = Obj::new(path, "instance".into(), root.get("instance")?, "instance")?;
    let c = instance.usize("chunks")?;
    if c == 0 || c > MAX_FILE_CHUNKS {
        bail!("{path}: instance.chunks: {c} is not in 1..={MAX_FILE_CHUNKS}");
    }
    let (collective, reduce) = msccl_collective(path, &root, c)?;
    let n = collective.ranks;
    let mut steps = Vec::new();
    for (s, v) in root.array("steps")?.iter().enumerate() {
        steps.push(msccl_step(path, &format!("steps[{s}]"), v, n, reduce)?);
    }
    let topology = match root.map.get("topology") {
        None | Some(Value::Null) => None,
        Some(v) => Some(msccl_topology(path, v, n)?),
    };
    let topo_name = topology
        .as_ref()
        .map_or_else(|| "unknown".to_string(), |t| t.name.clone());
    let rounds: u32 = steps.iter().map(|s| s.rounds).sum();
    let name = format!(
        "{}-{}-s{}-r{rounds}-c{c}",
        collective.kind,
        sanitize(&topo_name),
        steps.len()
    );
    let algorithm = Algorithm::plain(name, topo_name, collective, steps);
    Ok((algorithm, topology))
}

/// Reads the `collective` of msccl-tools JSON with `c` pieces per chunk: the named
/// collective it matches (else a custom one), and whether its steps reduce (reduce-scatter
/// and reduce, the only combining layouts read).
fn msccl_collective(path: &str, root: &Obj, c: usize) -> Result<(Collective, bool)> {
    let coll = Obj::new(
        path,
        "collective".into(),
        root.get("collective")?,
        "collective",
    )?;
    let n = coll.usize("nodes")?;
    topology::check_size(n, 0).map_err(|e| anyhow!("{path}: collective.nodes: {e}"))?;
    if n < 2 {
        bail!("{path}: collective.nodes: a collective needs at least 2 ranks (got {n})");
    }
    if coll
        .map
        .get("triggers")
        .and_then(Value::as_object)
        .is_some_and(|t| !t.is_empty())
    {
        bail!("{path}: collective.triggers: triggered (subproblem) collectives are not supported");
    }
    let pieces = msccl_pieces(path, &coll, n, c)?;
    let name = coll.string("name").unwrap_or("collective");
    let collective = match_named(n, c, &pieces).unwrap_or(Collective {
        kind: Kind::Custom,
        ranks: n,
        root: 0,
        chunks_per_rank: c,
        chunks: pieces,
    });
    let reduce = match collective.dual() {
        Ok(None) => false,
        Ok(Some(_)) if matches!(collective.kind, Kind::ReduceScatter | Kind::Reduce) => true,
        _ => bail!(
            "{path}: collective: `{name}` reduces chunks in a layout synth does not know (only reduce-scatter and reduce are read)"
        ),
    };
    Ok((collective, reduce))
}

/// The pieces of `collective.chunks` on `n` ranks: each file chunk split into `c` pieces
/// at consecutive addresses.
fn msccl_pieces(path: &str, coll: &Obj, n: usize, c: usize) -> Result<Vec<Chunk>> {
    let file_chunks = coll.array("chunks")?;
    if file_chunks.len().saturating_mul(c) > MAX_FILE_PIECES {
        bail!("{path}: collective.chunks: more than {MAX_FILE_PIECES} chunks at {c} pieces each");
    }
    let mut pieces = Vec::with_capacity(file_chunks.len() * c);
    for (i, v) in file_chunks.iter().enumerate() {
        let at = format!("collective.chunks[{i}]");
        let chunk = Obj::new(path, at.clone(), v, "chunk")?;
        let pre = ranks_list(path, &format!("{at}.pre"), chunk.get("pre")?, n)?;
        let post = ranks_list(path, &format!("{at}.post"), chunk.get("post")?, n)?;
        let addr = chunk.usize("addr")?;
        if addr >= MAX_FILE_PIECES {
            bail!("{path}: {at}.addr: {addr} is too large");
        }
        if pre.is_empty() {
            bail!("{path}: {at}.pre: a chunk must start on at least one rank");
        }
        for k in 0..c {
            pieces.push(Chunk {
                pre: pre.clone(),
                post: post.clone().into(),
                address: addr * c + k,
            });
        }
    }
    if pieces.is_empty() {
        bail!("{path}: collective.chunks: no chunks");
    }
    Ok(pieces)
}

/// Reads the step at `at` (`{rounds, sends: [[addr, src, dst], ...]}`) on `n` ranks; its
/// sends come out sorted.
fn msccl_step(path: &str, at: &str, v: &Value, n: usize, reduce: bool) -> Result<Step> {
    let step = Obj::new(path, at.to_string(), v, "step")?;
    let rounds = step.usize("rounds")?;
    let rounds = u32::try_from(rounds)
        .ok()
        .filter(|&r| r >= 1)
        .ok_or_else(|| anyhow!("{path}: {at}.rounds: {rounds} is not a positive round count"))?;
    let mut sends = Vec::new();
    for (i, send) in step.array("sends")?.iter().enumerate() {
        sends.push(msccl_send(path, &format!("{at}.sends[{i}]"), send, n)?);
    }
    sends.sort();
    Ok(Step {
        rounds,
        reduce,
        sends,
    })
}

/// Reads the send `[addr, src, dst]` at `here`, its ranks below `n`.
fn msccl_send(path: &str, here: &str, send: &Value, n: usize) -> Result<Send> {
    let triple = send
        .as_array()
        .filter(|t| t.len() == 3)
        .ok_or_else(|| anyhow!("{path}: {here}: expected [addr, src, dst]"))?;
    let chunk = number(path, &format!("{here}[0]"), &triple[0])?;
    let src = number(path, &format!("{here}[1]"), &triple[1])?;
    let dst = number(path, &format!("{here}[2]"), &triple[2])?;
    for (what, r) in [("src", src), ("dst", dst)] {
        if r >= n {
            bail!("{path}: {here}: {what} rank {r} out of range (ranks = {n})");
        }
    }
    Ok(Send { chunk, src, dst })
}

/// The named collective (in synth's chunk order) whose pieces are exactly `pieces`.
fn match_named(n: usize, c: usize, pieces: &[Chunk]) -> Option<Collective> {
    let key = |chunks: &[Chunk]| {
        let mut k: Vec<(usize, Vec<usize>, Vec<usize>)> = chunks
            .iter()
            .map(|ch| {
                let (mut pre, mut post) = (ch.pre.clone(), ch.post.to_vec());
                pre.sort_unstable();
                post.sort_unstable();
                (ch.address, pre, post)
            })
            .collect();
        k.sort();
        k
    };
    let wanted = key(pieces);
    let first = &pieces[0];
    let mut roots: Vec<usize> = first.pre.iter().chain(first.post.iter()).copied().collect();
    roots.sort_unstable();
    roots.dedup();
    for (kind, _) in Kind::NAMED {
        let candidates: &[usize] = if kind.is_rooted() { &roots } else { &[0] };
        for &root in candidates {
            let expected_len = match kind {
                Kind::AllToAll | Kind::ReduceScatter | Kind::AllReduce => n * n * c,
                Kind::Broadcast => c,
                _ => n * c,
            };
            if expected_len != pieces.len() {
                continue;
            }
            if let Ok(coll) = Collective::new(kind, n, root, c) {
                if key(&coll.chunks) == wanted {
                    return Some(coll);
                }
            }
        }
    }
    None
}

/// Reads an msccl-tools topology: `links[dst][src]` unit-bandwidth links and switches
/// `[srcs, dsts, bw, name]`.
fn msccl_topology(path: &str, value: &Value, n: usize) -> Result<Topology> {
    let topo = Obj::new(path, "topology".into(), value, "topology")?;
    let name = topo.string("name")?.to_string();
    let rows = topo.array("links")?;
    if rows.len() != n {
        bail!(
            "{path}: topology.links: {} rows, but the collective has {n} ranks",
            rows.len()
        );
    }
    let bandwidth = |at: &str, v: &Value| -> Result<f64> {
        v.as_f64()
            .filter(|b| b.is_finite() && *b >= 0.0)
            .ok_or_else(|| anyhow!("{path}: {at}: expected a non-negative bandwidth, found {v}"))
    };
    let mut links = Vec::new();
    for (dst, row) in rows.iter().enumerate() {
        let at = format!("topology.links[{dst}]");
        let row = row
            .as_array()
            .filter(|r| r.len() == n)
            .ok_or_else(|| anyhow!("{path}: {at}: expected a list of {n} bandwidths"))?;
        for (src, v) in row.iter().enumerate() {
            let bw = bandwidth(&format!("{at}[{src}]"), v)?;
            if bw > 0.0 && src != dst {
                links.push(Link {
                    src,
                    dst,
                    bandwidth: bw * MSCCL_LINK_GBPS,
                    alpha: MSCCL_LINK_ALPHA,
                });
            }
        }
    }
    let mut switches = Vec::new();
    if let Some(list) = topo.map.get("switches").filter(|v| !v.is_null()) {
        let list = list
            .as_array()
            .ok_or_else(|| anyhow!("{path}: topology.switches: expected a list"))?;
        for (i, sw) in list.iter().enumerate() {
            let at = format!("topology.switches[{i}]");
            let parts = sw
                .as_array()
                .filter(|p| p.len() == 4)
                .ok_or_else(|| anyhow!("{path}: {at}: expected [srcs, dsts, bandwidth, name]"))?;
            let srcs = ranks_list(path, &format!("{at}[0]"), &parts[0], n)?;
            let dsts = ranks_list(path, &format!("{at}[1]"), &parts[1], n)?;
            let bw = bandwidth(&format!("{at}[2]"), &parts[2])?;
            if bw <= 0.0 {
                bail!("{path}: {at}[2]: switch bandwidth must be positive");
            }
            let name = parts[3]
                .as_str()
                .map_or_else(|| format!("switch-{i}"), str::to_string);
            switches.push(SwitchConstraint {
                name,
                srcs,
                dsts,
                bandwidth: bw * MSCCL_LINK_GBPS,
            });
        }
    }
    let topology = Topology {
        name,
        ranks: n,
        node_of: vec![0; n],
        links,
        switches,
        runtime: None,
    };
    topology
        .validate()
        .map_err(|e| anyhow!("{path}: topology: {e:#}"))?;
    topology
        .capacities()
        .map_err(|e| anyhow!("{path}: topology: {e:#}"))?;
    Ok(topology)
}

/// A name usable in file names: letters, digits, `-`, `_` and `.` kept, the rest `_`.
fn sanitize(name: &str) -> String {
    name.chars()
        .map(|ch| {
            if ch.is_ascii_alphanumeric() || matches!(ch, '-' | '_' | '.') {
                ch
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_collectives_are_recognised_in_sccl_layout() {
        // SCCL's alltoall: chunk c goes from rank c % n to rank c / n, address c.
        let n = 3;
        let pieces: Vec<Chunk> = (0..n * n)
            .map(|c| Chunk {
                pre: vec![c % n],
                post: vec![c / n].into(),
                address: c,
            })
            .collect();
        assert_eq!(match_named(n, 1, &pieces).unwrap().kind, Kind::AllToAll);
        let bcast = [Chunk {
            pre: vec![2],
            post: (0..4).collect(),
            address: 0,
        }];
        let coll = match_named(4, 1, &bcast).unwrap();
        assert_eq!((coll.kind, coll.root), (Kind::Broadcast, 2));
        assert_eq!(sanitize("HubAndSpoke(n=4)"), "HubAndSpoke_n_4_");
    }
}
