//! Rings as a tree packing: NCCL's rings (one per channel, [`crate::baseline::ring_orders`])
//! seen as paths, one per ring and root. Packed trees reach the exact optimum in the rate
//! model, but a deep tree pipelines worse than a ring in the runtime's slice-by-slice replay,
//! so the tree engine offers both and the caller keeps what simulates faster.

use super::{Construction, Context};
use crate::algorithm::Algorithm;
use crate::baseline::ring_orders;
use crate::collective::Kind;
use crate::origin::Family;
use crate::topology::{Topology, TopologyIndex, Translations};
use crate::trees::packing::{Packing, RootTrees, Tree};
use crate::trees::rounding::PieceCounts;
use anyhow::Result;

/// NCCL's rings as paths, always a candidate but where the torus bucket takes their place:
/// the cost model can rank them below the trees while the runtime runs them faster (shallow
/// pipelines, one channel per ring), and they are the floor the default result must not
/// fall below; the caller simulates every candidate.
pub struct NcclRings;

impl Construction for NcclRings {
    fn name(&self) -> &'static str {
        "NCCL's rings as paths"
    }

    fn fits(&self, cx: &Context) -> bool {
        !super::bucket::Bucket.fits(cx)
    }

    fn build(&self, cx: &Context) -> Result<Vec<Algorithm>> {
        let max_rings = cx.limits.max_chunks.max(1);
        let found = ring_algorithm(cx.topology, cx.index, cx.kind, cx.root, max_rings)?;
        Ok(found.into_iter().collect())
    }

    fn makes(&self, family: &Family) -> bool {
        matches!(family, Family::Rings)
    }

    fn is_floor(&self) -> bool {
        true
    }
}

/// The path along `ring` that starts at `root`, as a tree (parent of each rank).
fn path_from(ring: &[usize], root: usize) -> Option<Tree> {
    let start = ring.iter().position(|&r| r == root)?;
    let n = ring.len();
    let mut tree: Tree = vec![None; n];
    for i in 1..n {
        tree[ring[(start + i) % n]] = Some(ring[(start + i - 1) % n]);
    }
    Some(tree)
}

/// The rings of `topology` as a packing for `kind` (allgather: every rank a root; broadcast:
/// `root`), or `None` when the fabric has no rings of links (the ring baseline's own search
/// decides) or a ring does not visit every rank.
pub fn ring_packing(
    topology: &Topology,
    kind: Kind,
    root: usize,
    max_rings: usize,
) -> Option<Packing> {
    let mut rings = ring_orders(topology, None).ok()?;
    rings.truncate(max_rings.max(1));
    if rings.is_empty()
        || rings.iter().any(|r| {
            r.len() != topology.ranks || r.windows(2).any(|w| topology.link(w[0], w[1]).is_none())
        })
    {
        return None;
    }
    let roots: Vec<usize> = match kind {
        Kind::AllGather => (0..topology.ranks).collect(),
        Kind::Broadcast => vec![root],
        _ => return None,
    };
    let weight = 1.0 / rings.len() as f64;
    let roots = roots
        .into_iter()
        .map(|root| {
            let trees = rings
                .iter()
                .map(|ring| path_from(ring, root).map(|t| (t, weight)))
                .collect::<Option<Vec<_>>>()?;
            Some(RootTrees { root, trees })
        })
        .collect::<Option<Vec<_>>>()?;
    Some(Packing {
        roots,
        rate_gbps: 0.0,
        group: Translations::trivial(topology.ranks),
        bound_gbps: f64::INFINITY,
        rounds: 0,
    })
}

/// The ring algorithm for allgather or broadcast with at most `max_chunks` pieces per root:
/// one piece per ring and root (allgather, the first `max_chunks` rings), or as many pieces
/// per ring as fit, pipelined down each path (broadcast); `None` when the fabric has no
/// usable rings.
pub fn ring_algorithm(
    topology: &Topology,
    index: &TopologyIndex,
    kind: Kind,
    root: usize,
    max_chunks: usize,
) -> Result<Option<Algorithm>> {
    let Some(packing) = ring_packing(topology, kind, root, max_chunks) else {
        return Ok(None);
    };
    let per_tree = if kind == Kind::Broadcast {
        (max_chunks / packing.roots[0].trees.len()).max(1)
    } else {
        1
    };
    let chunks = per_tree * packing.roots[0].trees.len();
    let counts: Vec<Vec<usize>> = packing
        .roots
        .iter()
        .map(|r| vec![per_tree; r.trees.len()])
        .collect();
    let mut algorithm = crate::trees::schedule::algorithm(
        topology,
        index,
        &packing,
        kind,
        chunks,
        &PieceCounts::Orbit(counts),
        true,
    )?
    .of_family(crate::origin::Family::Rings);
    // NCCL runs each ring on its own channel; so must the lowering, or a relay's pieces of
    // different rings wait behind each other in one threadblock.
    algorithm.piece_channels = Some(packing.roots[0].trees.len());
    Ok(Some(algorithm))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::check;
    use crate::topology::load;

    #[test]
    fn a_path_starts_at_its_root_and_follows_the_ring() {
        let tree = path_from(&[2, 0, 3, 1], 3).unwrap();
        assert_eq!(tree, vec![Some(2), Some(3), Some(1), None]);
    }

    #[test]
    fn ring_allgather_and_broadcast_pass_the_checker() {
        for name in ["ring:6", "dgx1", "mi250-16", "dgx-a100x2"] {
            let topo = load(name).unwrap();
            let index = topo.index();
            for kind in [Kind::AllGather, Kind::Broadcast] {
                let a = ring_algorithm(&topo, &index, kind, 1, 6)
                    .unwrap()
                    .unwrap_or_else(|| panic!("{name} has rings"));
                check(&a, &topo).unwrap_or_else(|e| panic!("{name} {kind}: {e:#}"));
                assert!(a.chunks() <= 6, "{name} {kind}");
                if kind == Kind::AllGather {
                    assert_eq!(a.num_steps(), topo.ranks - 1, "{name}");
                }
            }
        }
    }
}
