//! From a fractional tree packing to a k-synchronous [`Algorithm`]: tree weights become
//! integer numbers of pieces (chunks) per root, the representative roots' trees are mapped
//! to every root of their orbit, and a piece crosses the edge into a rank at depth d in step
//! d (plus its index among a lone root's pieces, so a broadcast pipelines). Each step takes
//! the rounds its busiest link or switch constraint needs.

use super::packing::{Packing, Tree};
use super::rounding::PieceCounts;
use crate::algorithm::{Algorithm, Send, Step};
use crate::collective::{Collective, Kind};
use crate::origin::Family;
use crate::topology::{Topology, TopologyIndex};
use anyhow::{bail, Result};

/// One copy of a representative's tree that a piece travels: the piece's chunk, the
/// representative root and tree it follows, the group element that maps it, and (for a
/// pipelined broadcast) the step at which it enters its tree.
pub(crate) struct Copy {
    pub(crate) chunk: usize,
    pub(crate) root: usize,
    pub(crate) tree: usize,
    pub(crate) element: usize,
    pub(crate) offset: usize,
}

/// Depth of every rank in a tree (the root has depth 0).
pub(crate) fn depths(tree: &Tree) -> Vec<usize> {
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
pub(crate) fn heights(tree: &Tree, depth: &[usize]) -> Vec<usize> {
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
    counts: &PieceCounts,
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
        .map(|sends| crate::load::plain_step(index, caps, sends))
        .collect();
    finish(
        topology,
        packing.roots[0].root,
        kind,
        chunks,
        Family::Trees,
        steps,
    )
}

/// The capacities of `topology` in one common unit, which a k-synchronous schedule needs.
pub(crate) fn capacities<'i>(
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
/// element, with its chunk id: a root's pieces are numbered across its trees, or with
/// `per_tree` round-robin over them (piece k follows tree k mod trees, and runs on that
/// channel when lowered with as many).
pub(crate) fn copies(
    packing: &Packing,
    kind: Kind,
    chunks: usize,
    counts: &PieceCounts,
    per_tree: bool,
) -> Vec<Copy> {
    let mut copies = Vec::new();
    let elements = &packing.group.elements;
    for (r, rep) in packing.roots.iter().enumerate() {
        let trees = rep.trees.len();
        let most = |t: usize| (0..elements.len()).map(|e| counts.of(r, e)[t]).max();
        for t in 0..trees {
            for in_tree in 0..most(t).unwrap_or(0) {
                for (e, g) in elements.iter().enumerate() {
                    let of_root = counts.of(r, e);
                    if in_tree >= of_root[t] {
                        continue;
                    }
                    let (id, offset) = if per_tree {
                        (in_tree * trees + t, in_tree)
                    } else {
                        let piece = of_root[..t].iter().sum::<usize>() + in_tree;
                        (piece, piece)
                    };
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
            }
        }
    }
    copies
}

/// The algorithm of `family` made of `steps` for `kind` at `root` with `chunks` pieces per
/// rank.
pub(crate) fn finish(
    topology: &Topology,
    root: usize,
    kind: Kind,
    chunks: usize,
    family: Family,
    steps: Vec<Step>,
) -> Result<Algorithm> {
    let collective = Collective::new(kind, topology.ranks, root, chunks)?;
    Ok(Algorithm::made(
        family,
        topology.name.clone(),
        collective,
        steps,
    ))
}
