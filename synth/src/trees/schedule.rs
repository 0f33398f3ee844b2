//! From a fractional tree packing to a k-synchronous [`Algorithm`]: tree weights become
//! integer numbers of pieces (chunks) per root, the representative roots' trees are mapped
//! to every root of their orbit, and a piece crosses the edge into a rank at depth d in step
//! d (plus its index among a lone root's pieces, so a broadcast pipelines). Each step takes
//! the rounds its busiest link or switch constraint needs.

use super::packing::{Packing, Tree};
use crate::algorithm::{Algorithm, Send, Step};
use crate::collective::{Collective, Kind};
use crate::topology::{Topology, TopologyIndex};
use anyhow::{bail, Result};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Piece counts per representative root's trees at `chunks` pieces, by largest remainder.
fn piece_counts(packing: &Packing, chunks: usize) -> Vec<Vec<usize>> {
    packing
        .roots
        .iter()
        .map(|r| {
            let exact: Vec<f64> = r.trees.iter().map(|(_, w)| w * chunks as f64).collect();
            let mut counts: Vec<usize> = exact.iter().map(|x| x.floor() as usize).collect();
            let mut left = chunks.saturating_sub(counts.iter().sum());
            let mut order: Vec<usize> = (0..exact.len()).collect();
            order.sort_by(|&a, &b| {
                let fa = exact[a] - exact[a].floor();
                let fb = exact[b] - exact[b].floor();
                fb.total_cmp(&fa).then(a.cmp(&b))
            });
            for &i in order.iter().cycle().take(exact.len() * chunks) {
                if left == 0 {
                    break;
                }
                counts[i] += 1;
                left -= 1;
            }
            counts
        })
        .collect()
}

/// The time (per unit of data per root, in s/GB) that piece counts give: the busiest resource
/// orbit's load over its bandwidth.
fn realized_time(
    packing: &Packing,
    usages: &[Vec<Vec<f64>>],
    bandwidth: &[f64],
    counts: &[Vec<usize>],
    chunks: usize,
) -> f64 {
    let mut load = vec![0.0; bandwidth.len()];
    for (r, root) in packing.roots.iter().enumerate() {
        for (t, _) in root.trees.iter().enumerate() {
            let share = counts[r][t] as f64 / chunks as f64;
            for (o, u) in usages[r][t].iter().enumerate() {
                load[o] += share * u;
            }
        }
    }
    load.iter()
        .zip(bandwidth)
        .map(|(l, b)| l / b)
        .fold(0.0, f64::max)
}

/// Most single-piece moves of the rounding's local search.
const MAX_MOVES: usize = 400;

/// Improves integer piece counts by moving one piece at a time from one tree of a root to
/// another tree of the same root's pool while the busiest resource orbit gets less loaded
/// (ties: a smaller sum of squared loads). Deterministic: the first best move wins.
fn improve_counts(
    packing: &Packing,
    usages: &[Vec<Vec<f64>>],
    bandwidth: &[f64],
    counts: &mut [Vec<usize>],
) {
    let orbits = bandwidth.len();
    let mut load = vec![0.0; orbits];
    for (r, root) in packing.roots.iter().enumerate() {
        for t in 0..root.trees.len() {
            for o in 0..orbits {
                load[o] += counts[r][t] as f64 * usages[r][t][o] / bandwidth[o];
            }
        }
    }
    let score = |load: &[f64]| {
        let max = load.iter().copied().fold(0.0, f64::max);
        (max, load.iter().map(|x| x * x).sum::<f64>())
    };
    for _ in 0..MAX_MOVES {
        let current = score(&load);
        // Only moves that unload the busiest orbit can lower the maximum.
        let hot = (0..orbits)
            .max_by(|&x, &y| load[x].total_cmp(&load[y]))
            .unwrap_or(0);
        let mut best: Option<((f64, f64), usize, usize, usize)> = None;
        for (r, root) in packing.roots.iter().enumerate() {
            for a in (0..root.trees.len()).filter(|&a| counts[r][a] > 0) {
                for b in (0..root.trees.len())
                    .filter(|&b| b != a && usages[r][b][hot] <= usages[r][a][hot])
                {
                    let moved: Vec<f64> = (0..orbits)
                        .map(|o| load[o] + (usages[r][b][o] - usages[r][a][o]) / bandwidth[o])
                        .collect();
                    let s = score(&moved);
                    let better = |x: (f64, f64), y: (f64, f64)| {
                        x.0 < y.0 * (1.0 - 1e-12)
                            || (x.0 <= y.0 * (1.0 + 1e-12) && x.1 < y.1 * (1.0 - 1e-12))
                    };
                    if better(s, current) && best.is_none_or(|(bs, ..)| better(s, bs)) {
                        best = Some((s, r, a, b));
                    }
                }
            }
        }
        let Some((_, r, a, b)) = best else { break };
        counts[r][a] -= 1;
        counts[r][b] += 1;
        for o in 0..orbits {
            load[o] += (usages[r][b][o] - usages[r][a][o]) / bandwidth[o];
        }
    }
}

/// Moves pieces to shallower trees of the same root while the busiest resource orbit gets
/// no busier: at equal load, shallow trees fill and drain their pipelines sooner.
fn shorten(
    packing: &Packing,
    usages: &[Vec<Vec<f64>>],
    bandwidth: &[f64],
    counts: &mut [Vec<usize>],
) {
    let orbits = bandwidth.len();
    let depth_of: Vec<Vec<usize>> = packing
        .roots
        .iter()
        .map(|r| {
            r.trees
                .iter()
                .map(|(t, _)| depths(t).into_iter().max().unwrap_or(0))
                .collect()
        })
        .collect();
    let mut load = vec![0.0; orbits];
    for (r, root) in packing.roots.iter().enumerate() {
        for t in 0..root.trees.len() {
            for o in 0..orbits {
                load[o] += counts[r][t] as f64 * usages[r][t][o] / bandwidth[o];
            }
        }
    }
    let max = load.iter().copied().fold(0.0, f64::max);
    for _ in 0..MAX_MOVES {
        let mut moved = false;
        'search: for (r, root) in packing.roots.iter().enumerate() {
            for a in (0..root.trees.len()).filter(|&a| counts[r][a] > 0) {
                let mut shallower: Vec<usize> = (0..root.trees.len())
                    .filter(|&b| depth_of[r][b] < depth_of[r][a])
                    .collect();
                shallower.sort_by_key(|&b| (depth_of[r][b], b));
                for b in shallower {
                    let fits = (0..orbits).all(|o| {
                        load[o] + (usages[r][b][o] - usages[r][a][o]) / bandwidth[o]
                            <= max * (1.0 + 1e-9)
                    });
                    if fits {
                        counts[r][a] -= 1;
                        counts[r][b] += 1;
                        for o in 0..orbits {
                            load[o] += (usages[r][b][o] - usages[r][a][o]) / bandwidth[o];
                        }
                        moved = true;
                        break 'search;
                    }
                }
            }
        }
        if !moved {
            break;
        }
    }
}

/// Integer piece counts for one number of pieces per root.
#[derive(Debug, Clone)]
pub struct ChunkOption {
    /// Pieces (chunks) per root.
    pub chunks: usize,
    /// Pieces per representative root's tree.
    pub counts: Vec<Vec<usize>>,
    /// The rate these counts reach (GB/s per root).
    pub rate: f64,
}

/// The rounded piece counts for every number of pieces from 1 to `max_chunks`, in order.
pub fn chunk_options(
    packing: &Packing,
    usages: &[Vec<Vec<f64>>],
    bandwidth: &[f64],
    max_chunks: usize,
) -> Vec<ChunkOption> {
    (1..=max_chunks.max(1))
        .map(|c| {
            let mut counts = piece_counts(packing, c);
            improve_counts(packing, usages, bandwidth, &mut counts);
            shorten(packing, usages, bandwidth, &mut counts);
            let t = realized_time(packing, usages, bandwidth, &counts, c);
            ChunkOption {
                chunks: c,
                counts,
                rate: 1.0 / t,
            }
        })
        .collect()
}

/// The fewest pieces whose rate is within 0.1% of the best option's (more pieces of the
/// same trees simulate slower: more threadblocks, fewer slices).
pub fn fewest_pieces(options: &[ChunkOption]) -> &ChunkOption {
    let best = options.iter().map(|o| o.rate).fold(0.0, f64::max);
    options
        .iter()
        .find(|o| o.rate >= best * (1.0 - 1e-3))
        .expect("at least one chunk count")
}

/// The option that is fastest once the runtime pipelines it slice by slice, with
/// `slices(c)` slices per piece at c pieces per root: a schedule in stages on channels of
/// their own ([`step_groups`]) costs about one slice period of fill and drain besides its
/// slices, so fewer, larger pieces can beat a better rounding (the first best wins).
pub fn best_pipelined(options: &[ChunkOption], slices: impl Fn(usize) -> f64) -> &ChunkOption {
    let value = |o: &ChunkOption| {
        let n = slices(o.chunks);
        o.rate * n / (n + 1.0)
    };
    options
        .iter()
        .fold(None::<&ChunkOption>, |best, o| match best {
            Some(b) if value(b) >= value(o) => Some(b),
            _ => Some(o),
        })
        .expect("at least one chunk count")
}

/// Depth of every rank in a tree (the root has depth 0).
fn depths(tree: &Tree) -> Vec<usize> {
    let n = tree.len();
    let mut depth = vec![usize::MAX; n];
    for v in 0..n {
        let mut chain = Vec::new();
        let mut x = v;
        while depth[x] == usize::MAX {
            match tree[x] {
                Some(p) => {
                    chain.push(x);
                    x = p;
                }
                None => {
                    depth[x] = 0;
                }
            }
        }
        let mut d = depth[x];
        for &y in chain.iter().rev() {
            d += 1;
            depth[y] = d;
        }
    }
    depth
}

/// Height of every rank in a tree: the most hops from it down to a leaf.
fn heights(tree: &Tree, depth: &[usize]) -> Vec<usize> {
    let mut height = vec![0usize; tree.len()];
    let mut order: Vec<usize> = (0..tree.len()).collect();
    order.sort_by_key(|&v| std::cmp::Reverse(depth[v]));
    for v in order {
        if let Some(p) = tree[v] {
            height[p] = height[p].max(height[v] + 1);
        }
    }
    height
}

/// The algorithm of `packing` at `chunks` pieces per root with the given piece counts, for
/// `kind` (allgather: every root; broadcast: the packing's one root). A broadcast's pieces
/// enter their trees one step apart: numbered across all trees, or with `per_tree`, within
/// each tree (for trees that share no links, such as rings, so they pipeline side by side).
pub fn algorithm(
    topology: &Topology,
    index: &TopologyIndex,
    packing: &Packing,
    kind: Kind,
    chunks: usize,
    counts: &[Vec<usize>],
    per_tree: bool,
) -> Result<Algorithm> {
    let caps = capacities(topology, index)?;
    let pipelined = kind == Kind::Broadcast;
    // Sends with the height of the subtree they feed, so each step can put the sends on the
    // longest remaining paths first.
    let mut steps: Vec<Vec<(usize, Send)>> = Vec::new();
    // Depths and heights of the tree in use (copies come grouped by tree).
    let (mut at, mut depth, mut height) = (None, Vec::new(), Vec::new());
    for copy in copies(packing, kind, chunks, counts, per_tree) {
        let tree = &packing.roots[copy.root].trees[copy.tree].0;
        if at != Some((copy.root, copy.tree)) {
            depth = depths(tree);
            height = heights(tree, &depth);
            at = Some((copy.root, copy.tree));
        }
        let g = &packing.group.elements[copy.element];
        for (v, p) in tree.iter().enumerate() {
            let Some(p) = *p else { continue };
            let step = depth[v] - 1 + if pipelined { copy.offset } else { 0 };
            if steps.len() <= step {
                steps.resize_with(step + 1, Vec::new);
            }
            steps[step].push((
                height[v],
                Send {
                    chunk: copy.chunk,
                    src: g[p] as usize,
                    dst: g[v] as usize,
                },
            ));
        }
    }
    let steps: Vec<Step> = steps
        .into_iter()
        .map(|mut tagged| {
            tagged.sort_by_key(|&(h, s)| (std::cmp::Reverse(h), s.chunk));
            tagged.into_iter().map(|(_, s)| s).collect::<Vec<Send>>()
        })
        .map(|sends| plain_step(topology, index, caps, sends))
        .collect();
    finish(
        topology,
        packing.roots[0].root,
        kind,
        chunks,
        "trees",
        steps,
    )
}

/// Threadblocks per rank that [`step_groups`] may lead the lowering to: all threadblocks
/// of a program spin on each other's flags, so they must be resident at once (msccl-ir.md
/// §1.9); 104 is the smallest compute-unit count among the fabrics' GPUs (an MI250 GCD; an
/// A100 has 108 SMs, an H100 132).
pub const RESIDENT_THREADBLOCKS: usize = 104;

/// How much slower than its busiest resource a run of consecutive steps may be when the
/// runtime takes each slice through them in turn before they share a channel group: the
/// run's summed per-step bottlenecks may exceed the bottleneck of its summed loads by this
/// fraction.
const BALANCE_SLACK: f64 = 0.05;

/// Channel groups for the steps of `algorithm` on `topology` ([`Algorithm::step_groups`]):
/// consecutive steps share a group while their loads stay balanced (within
/// [`BALANCE_SLACK`]), as a ring's steps are, since the runtime's slice-by-slice replay of
/// one group then keeps every link busy and has no pipeline to fill; an unbalanced step
/// (a tree's relays after its roots' sends) starts a new group, so that a threadblock holds
/// one stage of the pipeline and the runtime overlaps the stages of consecutive slices.
/// Groups are then merged as [`fit_groups`] needs; `None` when one group remains.
pub fn step_groups(
    topology: &Topology,
    index: &TopologyIndex,
    algorithm: &Algorithm,
) -> Option<Vec<usize>> {
    let links = topology.links.len();
    let bandwidth = |r: usize| {
        if r < links {
            topology.links[r].bandwidth
        } else {
            topology.switches[r - links].bandwidth
        }
    };
    let mut wanted = Vec::with_capacity(algorithm.steps.len());
    let mut group = 0;
    // The current run's summed loads (per unit of bandwidth), their peak, and the sum of its
    // steps' own peaks.
    let mut pooled: std::collections::HashMap<usize, f64> = std::collections::HashMap::new();
    let (mut pooled_peak, mut stepwise) = (0.0f64, 0.0f64);
    for step in &algorithm.steps {
        let mut load: std::collections::HashMap<usize, f64> = std::collections::HashMap::new();
        for s in &step.sends {
            let Some(&l) = index.link_of.get(&(s.src, s.dst)) else {
                continue;
            };
            for r in std::iter::once(l).chain(index.governing[l].iter().map(|&j| links + j)) {
                *load.entry(r).or_insert(0.0) += 1.0 / bandwidth(r);
            }
        }
        let peak = load.values().copied().fold(0.0, f64::max);
        let joined = load
            .iter()
            .map(|(r, x)| pooled.get(r).copied().unwrap_or(0.0) + x)
            .fold(pooled_peak, f64::max);
        if !wanted.is_empty() && stepwise + peak > (1.0 + BALANCE_SLACK) * joined {
            group += 1;
            pooled.clear();
            pooled_peak = peak;
            stepwise = 0.0;
        } else {
            pooled_peak = joined;
        }
        for (r, x) in load {
            *pooled.entry(r).or_insert(0.0) += x;
        }
        stepwise += peak;
        wanted.push(group);
    }
    fit_groups(algorithm, wanted)
}

/// `algorithm` with the channel groups `groups` (see [`step_groups`]), its name marked
/// `-g<groups>` so that it and its one-group twin can be told apart.
pub fn with_groups(mut algorithm: Algorithm, groups: Option<Vec<usize>>) -> Algorithm {
    if let Some(g) = &groups {
        let count = g.iter().max().map_or(1, |x| x + 1);
        algorithm.name = format!("{}-g{count}", algorithm.name);
    }
    algorithm.step_groups = groups;
    algorithm
}

/// `algorithm` in one channel group, as the runtime's replay then takes every slice through
/// all its steps in turn (the `-g<groups>` mark of [`with_groups`] removed).
pub fn ungrouped(algorithm: &Algorithm) -> Algorithm {
    let mut plain = algorithm.clone();
    if let Some(g) = plain.step_groups.take() {
        let count = g.iter().max().map_or(1, |x| x + 1);
        if let Some(name) = plain.name.strip_suffix(&format!("-g{count}")) {
            plain.name = name.to_string();
        }
    }
    plain
}

/// `wanted` (a channel group per step of `algorithm`, in increasing order) merged into as
/// few consecutive groups as needed for the lowering to keep every rank within
/// [`RESIDENT_THREADBLOCKS`] (one threadblock per peer, direction and channel, plus one for
/// local copies) and the runtime's channels; `None` when only one group fits.
pub fn fit_groups(algorithm: &Algorithm, wanted: Vec<usize>) -> Option<Vec<usize>> {
    let per_group = algorithm.piece_channels.unwrap_or(1).max(1);
    let count = wanted.iter().max().map_or(1, |g| g + 1);
    // Per (rank, peer, direction): the wanted groups with a transfer on it, ascending.
    let mut used: std::collections::HashMap<(usize, usize, bool), Vec<usize>> =
        std::collections::HashMap::new();
    for (step, &group) in algorithm.steps.iter().zip(&wanted) {
        for s in &step.sends {
            for key in [(s.src, s.dst, true), (s.dst, s.src, false)] {
                let list = used.entry(key).or_default();
                if list.last() != Some(&group) {
                    list.push(group);
                }
            }
        }
    }
    let merged = |g: usize, most: usize| g * most / count;
    let fits = |most: usize| {
        let mut per_rank = vec![0usize; algorithm.collective.ranks];
        for (&(rank, _, _), list) in &used {
            let mut distinct = 0;
            let mut last = None;
            for &g in list {
                if last != Some(merged(g, most)) {
                    distinct += 1;
                    last = Some(merged(g, most));
                }
            }
            per_rank[rank] += distinct * per_group;
        }
        per_rank.into_iter().max().unwrap_or(0) < RESIDENT_THREADBLOCKS
    };
    let most = count.min(runtime::limits::Limits::PORTABLE.max_channels / per_group);
    (2..=most)
        .rev()
        .find(|&m| fits(m))
        .map(|m| wanted.iter().map(|&g| merged(g, m)).collect())
}

/// The capacities of `topology` in one common unit, which a k-synchronous schedule needs.
fn capacities<'i>(
    topology: &Topology,
    index: &'i TopologyIndex,
) -> Result<&'i crate::topology::Capacities> {
    match index.capacities.as_ref() {
        Some(caps) => Ok(caps),
        None => bail!(
            "the bandwidths of `{}` have no common unit, so a k-synchronous schedule cannot be checked",
            topology.name
        ),
    }
}

/// Every piece's copy of its tree, in order of representative root, tree, piece and group
/// element, with its chunk id: pieces are numbered across a root's trees, or with
/// `per_tree` round-robin over them (piece k follows tree k mod trees, and runs on that
/// channel when lowered with as many).
fn copies(
    packing: &Packing,
    kind: Kind,
    chunks: usize,
    counts: &[Vec<usize>],
    per_tree: bool,
) -> Vec<Copy> {
    let mut copies = Vec::new();
    for (r, rep) in packing.roots.iter().enumerate() {
        let mut piece = 0;
        for (t, &count) in counts[r].iter().enumerate() {
            for in_tree in 0..count {
                let (id, offset) = if per_tree {
                    (in_tree * rep.trees.len() + t, in_tree)
                } else {
                    (piece, piece)
                };
                for (e, g) in packing.group.elements.iter().enumerate() {
                    let chunk = if kind == Kind::Broadcast {
                        id
                    } else {
                        g[rep.root] as usize * chunks + id
                    };
                    copies.push(Copy {
                        chunk,
                        root: r,
                        tree: t,
                        element: e,
                        offset,
                    });
                }
                piece += 1;
            }
        }
    }
    copies
}

/// The algorithm of `steps` for `kind` at `root` with `chunks` pieces per rank, named after
/// the schedule (`label`): `KIND-TOPOLOGY-LABEL-sS-rR-cC`.
pub(crate) fn finish(
    topology: &Topology,
    root: usize,
    kind: Kind,
    chunks: usize,
    label: &str,
    steps: Vec<Step>,
) -> Result<Algorithm> {
    let collective = Collective::new(kind, topology.ranks, root, chunks)?;
    let rounds: u32 = steps.iter().map(|s| s.rounds).sum();
    let name = format!(
        "{}-{}-{label}-s{}-r{}-c{}",
        kind,
        topology.name.replace([':', '/'], "_"),
        steps.len(),
        rounds,
        chunks
    );
    Ok(Algorithm::plain(
        name,
        topology.name.clone(),
        collective,
        steps,
    ))
}

/// A step of `sends` that moves data without reducing it, with the rounds it needs
/// ([`rounds_needed`]): how the tree schedules turn their send lists into steps.
pub(crate) fn plain_step(
    topology: &Topology,
    index: &TopologyIndex,
    caps: &crate::topology::Capacities,
    sends: Vec<Send>,
) -> Step {
    Step {
        rounds: rounds_needed(topology, index, caps, &sends),
        reduce: false,
        sends,
    }
}

/// The rounds a step needs: its busiest link or switch constraint's load over its capacity.
pub(crate) fn rounds_needed(
    topology: &Topology,
    index: &TopologyIndex,
    caps: &crate::topology::Capacities,
    sends: &[Send],
) -> u32 {
    let (load, cap) = busiest(topology, index, caps, sends);
    load.div_ceil(cap).max(1) as u32
}

/// The busiest link or switch constraint of `sends` as (load, capacity), the largest
/// load / capacity ((0, 1) for no sends). Over a whole schedule it is what a pipelined
/// run's bottleneck carries.
pub(crate) fn busiest(
    topology: &Topology,
    index: &TopologyIndex,
    caps: &crate::topology::Capacities,
    sends: &[Send],
) -> (u64, u64) {
    let mut link_load = vec![0u64; topology.links.len()];
    let mut switch_load = vec![0u64; topology.switches.len()];
    for s in sends {
        let l = index.link_of[&(s.src, s.dst)];
        link_load[l] += 1;
        for &j in &index.governing[l] {
            switch_load[j] += 1;
        }
    }
    let links = link_load.iter().zip(&caps.links);
    let switches = switch_load.iter().zip(&caps.switches);
    links
        .chain(switches)
        .map(|(&load, &cap)| (load, cap.max(1) as u64))
        .fold((0, 1), |(l, c), (load, cap)| {
            if load * c > l * cap {
                (load, cap)
            } else {
                (l, c)
            }
        })
}

/// A tree's children lists and the height of every vertex.
type Shape = (Vec<Vec<usize>>, Vec<usize>);

/// One copy of a representative's tree that a piece travels: the piece's chunk, the
/// representative root and tree it follows, the group element that maps it, and (for a
/// pipelined broadcast) the step at which it enters its tree.
struct Copy {
    chunk: usize,
    root: usize,
    tree: usize,
    element: usize,
    offset: usize,
}

/// A send waiting for its link: copy `copy` crosses the edge into the representative tree's
/// vertex `vertex`; it has waited since step `since`.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Pending {
    copy: usize,
    vertex: usize,
    since: usize,
    /// Creation order (ties).
    seq: usize,
    /// The link it crosses.
    link: usize,
}

/// The algorithm of `packing` (as [`algorithm`]) scheduled by list scheduling in the
/// time-expanded fabric instead of by depth: every step is one round, each link and switch
/// constraint carries at most its capacity per step, and a send leaves as soon as its piece
/// has arrived and its link has room (longest remaining path first, then oldest). This
/// balances the steps' loads, so rounds per chunk approach the packing's rate, and each
/// link's sends come in the order the runtime can pipeline. Errors past `max_steps` steps.
pub fn list_scheduled(
    topology: &Topology,
    index: &TopologyIndex,
    packing: &Packing,
    kind: Kind,
    chunks: usize,
    counts: &[Vec<usize>],
    max_steps: usize,
) -> Result<Algorithm> {
    let caps = capacities(topology, index)?;
    // Children and heights of every representative tree.
    let shapes: Vec<Vec<Shape>> = packing
        .roots
        .iter()
        .map(|r| {
            r.trees
                .iter()
                .map(|(tree, _)| {
                    let mut children = vec![Vec::new(); tree.len()];
                    for (v, p) in tree.iter().enumerate() {
                        if let Some(p) = p {
                            children[*p].push(v);
                        }
                    }
                    let height = heights(tree, &depths(tree));
                    (children, height)
                })
                .collect()
        })
        .collect();
    let copies = copies(packing, kind, chunks, counts, false);
    // The link a pending send crosses, and its priority: longest remaining path first, then
    // oldest, then chunk, then creation order (what a stable sort of all pending sends by
    // the first three gives).
    let link = |copy: usize, vertex: usize| {
        let c = &copies[copy];
        let g = &packing.group.elements[c.element];
        let tree = &packing.roots[c.root].trees[c.tree].0;
        let parent = tree[vertex].expect("a pending send enters a non-root vertex");
        index.link_of[&(g[parent] as usize, g[vertex] as usize)]
    };
    let priority = |p: &Pending| {
        let c = &copies[p.copy];
        (
            Reverse(shapes[c.root][c.tree].1[p.vertex]),
            p.since,
            c.chunk,
            p.seq,
        )
    };
    // Pending sends per link, the first in priority on top. A step takes from each link
    // what it and its switch constraints have room for, in the order one sorted list of all
    // pending sends would be scanned, at the cost of the sends taken rather than of every
    // send pending: without switch constraints links do not interact, so each link gives
    // its first sends and the step's sends are sorted; with them, links give one send at a
    // time in the order of their first sends.
    type Queue<K> = BinaryHeap<Reverse<(K, Pending)>>;
    let mut queues: Vec<Queue<_>> = (0..topology.links.len())
        .map(|_| BinaryHeap::new())
        .collect();
    let mut active: Vec<usize> = Vec::new();
    let mut left = 0usize;
    let enqueue = |p: Pending, queues: &mut Vec<Queue<_>>, active: &mut Vec<usize>| {
        if queues[p.link].is_empty() {
            active.push(p.link);
        }
        queues[p.link].push(Reverse((priority(&p), p)));
    };
    let mut seq = 0;
    for (i, c) in copies.iter().enumerate() {
        let root = packing.roots[c.root].root;
        for &v in &shapes[c.root][c.tree].0[root] {
            let p = Pending {
                copy: i,
                vertex: v,
                since: 0,
                seq,
                link: link(i, v),
            };
            seq += 1;
            enqueue(p, &mut queues, &mut active);
            left += 1;
        }
    }
    let mut link_load = vec![0u32; topology.links.len()];
    let mut switch_load = vec![0u32; topology.switches.len()];
    let mut steps: Vec<Step> = Vec::new();
    let mut taken = Vec::new();
    while left > 0 {
        if steps.len() >= max_steps {
            bail!(
                "list scheduling of the trees on `{}` needs more than {max_steps} steps",
                topology.name
            );
        }
        let now = steps.len();
        // A link whose queue emptied in the last step and refilled with its arrivals was
        // listed again: once each.
        active.retain(|&l| !queues[l].is_empty());
        active.sort_unstable();
        active.dedup();
        taken.clear();
        if topology.switches.is_empty() {
            for &l in &active {
                while link_load[l] < caps.links[l] {
                    let Some(Reverse(entry)) = queues[l].pop() else {
                        break;
                    };
                    link_load[l] += 1;
                    taken.push(entry);
                }
            }
            taken.sort_unstable_by_key(|(key, _)| *key);
        } else {
            let mut links: BinaryHeap<Reverse<(_, usize)>> = active
                .iter()
                .map(|&l| Reverse((queues[l].peek().expect("active").0 .0, l)))
                .collect();
            while let Some(Reverse((_, l))) = links.pop() {
                let fits = link_load[l] < caps.links[l]
                    && index.governing[l]
                        .iter()
                        .all(|&j| switch_load[j] < caps.switches[j]);
                if !fits {
                    // Nothing more crosses this link in this step: its load and its switch
                    // constraints' only grow.
                    continue;
                }
                let Reverse(entry) = queues[l].pop().expect("a link in the heap has sends");
                link_load[l] += 1;
                for &j in &index.governing[l] {
                    switch_load[j] += 1;
                }
                taken.push(entry);
                if let Some(next) = queues[l].peek() {
                    links.push(Reverse((next.0 .0, l)));
                }
            }
        }
        if taken.is_empty() {
            bail!(
                "list scheduling of the trees on `{}` is stuck: a link or switch has no capacity",
                topology.name
            );
        }
        let mut sends = Vec::with_capacity(taken.len());
        let mut arrived = Vec::new();
        for &(_, p) in &taken {
            let c = &copies[p.copy];
            let l = &topology.links[p.link];
            sends.push(Send {
                chunk: c.chunk,
                src: l.src,
                dst: l.dst,
            });
            let (children, _) = &shapes[c.root][c.tree];
            for &v in &children[p.vertex] {
                arrived.push(Pending {
                    copy: p.copy,
                    vertex: v,
                    since: now + 1,
                    seq,
                    link: link(p.copy, v),
                });
                seq += 1;
            }
        }
        left -= taken.len();
        // Every link and switch constraint carried at most its capacity: one round.
        for &(_, p) in &taken {
            link_load[p.link] = 0;
            for &j in &index.governing[p.link] {
                switch_load[j] = 0;
            }
        }
        steps.push(Step {
            rounds: 1,
            reduce: false,
            sends,
        });
        left += arrived.len();
        for p in arrived {
            enqueue(p, &mut queues, &mut active);
        }
    }
    finish(
        topology,
        packing.roots[0].root,
        kind,
        chunks,
        "listed",
        steps,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::load;

    #[test]
    fn balanced_steps_share_a_group_and_tree_stages_do_not() {
        // A ring's steps load every link alike: one group.
        let topo = load("ring:6").unwrap();
        let index = topo.index();
        let ring = super::super::rings::ring_algorithm(&topo, &index, Kind::AllGather, 0, 1)
            .unwrap()
            .unwrap();
        assert_eq!(step_groups(&topo, &index, &ring), None);
        // dgx-a100x2's trees send over the NICs, then relay over NVSwitch: two stages.
        let topo = load("dgx-a100x2").unwrap();
        let index = topo.index();
        let coll = Collective::new(Kind::AllGather, topo.ranks, 0, 1).unwrap();
        let limits = crate::engine::Limits {
            max_steps: 16,
            max_chunks: 8,
            max_chunks_given: false,
            deadline: std::time::Instant::now() + std::time::Duration::from_secs(3600),
            extra_memory: None,
            work_limit: None,
        };
        let progress = crate::progress::Progress::hidden();
        let r = super::super::synthesize_trees(&topo, &index, &coll, &limits, &progress).unwrap();
        assert_eq!(r.algorithm.step_groups, Some(vec![0, 1]));
        assert!(r.algorithm.name.ends_with("-g2"), "{}", r.algorithm.name);
        assert_eq!(ungrouped(&r.algorithm).step_groups, None);
        assert!(!ungrouped(&r.algorithm).name.ends_with("-g2"));
    }

    #[test]
    fn groups_keep_threadblocks_resident() {
        // Every rank of a 32-rank fabric talks to all 31 others in both of two steps: one
        // group holds 62 threadblocks per rank, two would hold 124.
        let topo = load("dgx-a100x4").unwrap();
        let n = topo.ranks;
        let all: Vec<Send> = (0..n)
            .flat_map(|s| {
                (0..n).filter(move |&d| d != s).map(move |d| Send {
                    chunk: s,
                    src: s,
                    dst: d,
                })
            })
            .collect();
        let step = Step {
            rounds: 1,
            reduce: false,
            sends: all,
        };
        let a = Algorithm {
            name: "allgather-dgx-a100x4".into(),
            topology: topo.name.clone(),
            collective: Collective::new(Kind::AllGather, n, 0, 1).unwrap(),
            steps: vec![step.clone(), step],
            piece_channels: None,
            step_groups: None,
            message_chunks: None,
            serial_links: false,
        };
        assert_eq!(fit_groups(&a, vec![0, 1]), None);
        // With the second step inside each 8-GPU node, 62 + 14 threadblocks fit.
        let mut within = a.clone();
        within.steps[1].sends.retain(|s| s.src / 8 == s.dst / 8);
        assert_eq!(fit_groups(&within, vec![0, 1]), Some(vec![0, 1]));
    }
}
