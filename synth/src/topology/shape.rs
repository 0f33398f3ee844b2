//! Shape recognisers: the structures of a fabric that constructions and baselines build
//! on (its nodes, rails between identical nodes, a square 2-D torus), found once here.

use super::{Link, SwitchConstraint, Topology, TopologyIndex};

/// The ranks of each node in rank order (every node of `topology.nodes()`, empty ones
/// included).
pub fn nodes(topology: &Topology) -> Vec<Vec<usize>> {
    let mut nodes: Vec<Vec<usize>> = vec![Vec::new(); topology.nodes()];
    for (r, &a) in topology.node_of.iter().enumerate() {
        nodes[a].push(r);
    }
    nodes
}

/// The ranks of each of M ≥ 2 nodes of equal size, in rank order; `None` for one node or
/// nodes of different sizes.
pub fn equal_nodes(topology: &Topology) -> Option<Vec<Vec<usize>>> {
    let nodes = nodes(topology);
    let g = nodes.first()?.len();
    (nodes.len() >= 2 && nodes.iter().all(|n| n.len() == g)).then_some(nodes)
}

/// Whether rail links join rank i of each node to rank i of the next (the last node's to
/// the first's).
pub fn rails_join(index: &TopologyIndex, nodes: &[Vec<usize>]) -> bool {
    let m = nodes.len();
    (0..m).all(|a| {
        (nodes[a].iter().zip(&nodes[(a + 1) % m]))
            .all(|(&u, &v)| index.link_of.contains_key(&(u, v)))
    })
}

/// The fabric's rail view: its links between nodes kept only between ranks of one local
/// index (rank i of a node to rank i of another), the rest as they are. `None` unless its
/// M ≥ 2 nodes are equal, every rank has a rail link to its peer in every other node, and
/// some link between nodes is not a rail (a fat tree, where every GPU reaches every GPU of
/// the other nodes through its NIC). A schedule of the view runs on the fabric; there each
/// NIC carries one connection per other node instead of one per remote GPU, so a message's
/// slices cross it at the NIC's bandwidth, not a share of it. Meaningful in the node-major
/// numbering the search runs in, where every node's ranks share one local order
/// ([`super::canonical::node_major_numbering`]).
pub fn rail_view(topology: &Topology, index: &TopologyIndex) -> Option<Topology> {
    let nodes = equal_nodes(topology)?;
    let mut local = vec![0; topology.ranks];
    for node in &nodes {
        for (i, &r) in node.iter().enumerate() {
            local[r] = i;
        }
    }
    let all_rails = (nodes.iter().enumerate()).all(|(a, from)| {
        (nodes.iter().enumerate()).all(|(b, to)| {
            a == b || (from.iter().zip(to)).all(|(&u, &v)| index.link_of.contains_key(&(u, v)))
        })
    });
    let across = |l: &Link| topology.node_of[l.src] != topology.node_of[l.dst];
    let rail = |l: &Link| !across(l) || local[l.src] == local[l.dst];
    if !all_rails || topology.links.iter().all(rail) {
        return None;
    }
    Some(Topology {
        name: topology.name.clone(),
        ranks: topology.ranks,
        node_of: topology.node_of.clone(),
        links: topology.links.iter().filter(|l| rail(l)).cloned().collect(),
        switches: topology.switches.clone(),
        runtime: topology.runtime,
    })
}

/// The fabric's split view: every switch constraint with several ranks on both sides (a NIC
/// that two GPUs share, a node's uplink) split into equal shares, one per rank of its
/// smaller side (its senders where the sides are alike); the rest as it is. `None` where no
/// constraint is shared so. A schedule of the view runs on the fabric, where the ranks that
/// share a constraint send side by side, each at its share, as the view's steps assume (on
/// the fabric itself a step gives the whole NIC to one of its GPUs, which the runtime does
/// not keep to once the slices drift).
pub fn split_view(topology: &Topology) -> Option<Topology> {
    let shared = |s: &SwitchConstraint| s.srcs.len() > 1 && s.dsts.len() > 1;
    if !topology.switches.iter().any(shared) {
        return None;
    }
    let mut switches = Vec::new();
    for s in &topology.switches {
        if !shared(s) {
            switches.push(s.clone());
            continue;
        }
        let by_senders = s.srcs.len() <= s.dsts.len();
        let mut side = if by_senders {
            s.srcs.clone()
        } else {
            s.dsts.clone()
        };
        side.sort_unstable();
        side.dedup();
        let share = s.bandwidth / side.len() as f64;
        for &r in &side {
            let (srcs, dsts) = if by_senders {
                (vec![r], s.dsts.clone())
            } else {
                (s.srcs.clone(), vec![r])
            };
            switches.push(SwitchConstraint {
                name: format!("{}-share-{r}", s.name),
                srcs,
                dsts,
                bandwidth: share,
            });
        }
    }
    Some(Topology {
        switches,
        ..topology.clone()
    })
}

/// Whether every node's ranks are linked all to all.
pub fn nodes_all_to_all(index: &TopologyIndex, nodes: &[Vec<usize>]) -> bool {
    let linked = |u: usize, v: usize| index.link_of.contains_key(&(u, v));
    nodes
        .iter()
        .all(|n| n.iter().all(|&u| n.iter().all(|&v| u == v || linked(u, v))))
}

/// Node 0's own fabric (its ranks renumbered 0..G, the links among them, named
/// `TOPOLOGY-node`) when every node of `nodes` has the same links within it, none governed
/// by a switch constraint; `None` otherwise.
pub fn identical_node_fabric(
    topology: &Topology,
    index: &TopologyIndex,
    nodes: &[Vec<usize>],
) -> Option<Topology> {
    let mut local = vec![0; topology.ranks];
    for node in nodes {
        for (i, &r) in node.iter().enumerate() {
            local[r] = i;
        }
    }
    let within = |l: &Link| topology.node_of[l.src] == topology.node_of[l.dst];
    let links: Vec<Link> = topology
        .links
        .iter()
        .filter(|l| within(l) && topology.node_of[l.src] == 0)
        .map(|l| Link {
            src: local[l.src],
            dst: local[l.dst],
            ..l.clone()
        })
        .collect();
    let same = topology
        .links
        .iter()
        .enumerate()
        .filter(|(_, l)| within(l))
        .all(|(id, l)| {
            index.governing[id].is_empty()
                && links.iter().any(|k| {
                    (k.src, k.dst) == (local[l.src], local[l.dst]) && k.bandwidth == l.bandwidth
                })
        });
    let count = topology.links.iter().filter(|l| within(l)).count();
    if !same || count != links.len() * nodes.len() {
        return None;
    }
    let g = nodes[0].len();
    Some(Topology {
        name: format!("{}-node", topology.name),
        ranks: g,
        node_of: vec![0; g],
        links,
        switches: Vec::new(),
        runtime: topology.runtime,
    })
}

/// A direction on a 2-D torus: (rows, columns) moved per hop.
pub type Direction = (isize, isize);

/// The four directions of a 2-D torus: right, left, down, up.
pub const DIRECTIONS: [Direction; 4] = [(0, 1), (0, -1), (1, 0), (-1, 0)];

/// The rank `hops` hops from `x` in direction `d` on a k×k torus numbered row-major.
pub fn torus_step(k: usize, x: usize, d: Direction, hops: usize) -> usize {
    let (r, c) = ((x / k) as isize, (x % k) as isize);
    let (k, h) = (k as isize, hops as isize);
    let r2 = (r + d.0 * h).rem_euclid(k);
    let c2 = (c + d.1 * h).rem_euclid(k);
    (r2 * k + c2) as usize
}

/// The side k when `topology` is a square k×k torus in row-major order with k ≥ 3: each
/// rank linked to its four neighbours and nothing else, equal links, no switch constraints;
/// `None` otherwise.
pub fn square_torus_side(topology: &Topology, index: &TopologyIndex) -> Option<usize> {
    let n = topology.ranks;
    let k = (n as f64).sqrt().round() as usize;
    if k < 3 || k * k != n || !topology.switches.is_empty() || topology.links.len() != 4 * n {
        return None;
    }
    let first = topology.links.first()?;
    if topology
        .links
        .iter()
        .any(|l| l.bandwidth != first.bandwidth || l.alpha != first.alpha)
    {
        return None;
    }
    let all_linked = (0..n).all(|x| {
        DIRECTIONS
            .iter()
            .all(|&d| index.link_of.contains_key(&(x, torus_step(k, x, d, 1))))
    });
    all_linked.then_some(k)
}

/// A numbering that lays `topology` out as a k×k torus in row-major order with `origin` at
/// rank 0 (`to[r]` is rank r's place), found from the links alone, whatever the fabric's own
/// numbering: every rank linked both ways to exactly four others, equal links, no switch
/// constraints, k ≥ 3. Two such numberings differ by a symmetry of the torus, so the
/// renumbered fabric is the same. `None` for any other fabric.
pub fn square_torus_numbering(topology: &Topology, origin: usize) -> Option<Vec<usize>> {
    let n = topology.ranks;
    let k = (n as f64).sqrt().round() as usize;
    if k < 3 || k * k != n || !topology.switches.is_empty() || topology.links.len() != 4 * n {
        return None;
    }
    let first = topology.links.first()?;
    if origin >= n
        || topology
            .links
            .iter()
            .any(|l| l.bandwidth != first.bandwidth || l.alpha != first.alpha)
    {
        return None;
    }
    let mut adjacent = vec![Vec::new(); n];
    for l in &topology.links {
        adjacent[l.src].push(l.dst);
    }
    if adjacent.iter().any(|a| a.len() != 4) {
        return None;
    }
    let linked = |a: usize, b: usize| adjacent[a].contains(&b);
    if topology.links.iter().any(|l| !linked(l.dst, l.src)) {
        return None;
    }
    let common = |a: usize, b: usize| -> Vec<usize> {
        adjacent[a]
            .iter()
            .copied()
            .filter(|&c| linked(b, c))
            .collect()
    };
    // Every way of continuing a line from `prev` through `cur`: on a torus of side 3 the
    // straight step is linked to `prev`; of side 5 or more it shares only `cur` with it; of
    // side 4 (a 4-cube) every other neighbour is tried.
    let straight = |prev: usize, cur: usize| -> Vec<usize> {
        adjacent[cur]
            .iter()
            .copied()
            .filter(|&c| c != prev)
            .filter(|&c| match k {
                3 => linked(prev, c),
                4 => true,
                _ => common(prev, c).len() == 1,
            })
            .collect()
    };
    // Lines from `origin` through `next`, k ranks long, closing back on `origin`.
    let lines = |next: usize| -> Vec<Vec<usize>> {
        let mut done = Vec::new();
        let mut stack = vec![vec![origin, next]];
        while let Some(line) = stack.pop() {
            if line.len() == k {
                if linked(line[k - 1], origin) {
                    done.push(line);
                }
                continue;
            }
            let (prev, cur) = (line[line.len() - 2], line[line.len() - 1]);
            for c in straight(prev, cur) {
                if !line.contains(&c) {
                    let mut longer = line.clone();
                    longer.push(c);
                    stack.push(longer);
                }
            }
        }
        done
    };
    for &east in &adjacent[origin] {
        for &south in &adjacent[origin] {
            if south == east || common(east, south).len() < 2 {
                continue;
            }
            for row in lines(east) {
                for column in lines(south) {
                    if let Some(to) = fill_torus(k, &row, &column, &adjacent) {
                        return Some(to);
                    }
                }
            }
        }
    }
    None
}

/// The row-major numbering of a k×k torus whose first row and column are `row` and
/// `column`, each further rank the common neighbour of its left and upper neighbours other
/// than their own upper-left one; `None` unless every rank is placed once and every place's
/// four torus neighbours are its links.
fn fill_torus(
    k: usize,
    row: &[usize],
    column: &[usize],
    adjacent: &[Vec<usize>],
) -> Option<Vec<usize>> {
    let n = k * k;
    let mut at = vec![usize::MAX; n];
    at[..k].copy_from_slice(row);
    for i in 1..k {
        at[i * k] = column[i];
    }
    for i in 1..k {
        for j in 1..k {
            let (left, up, corner) = (
                at[i * k + j - 1],
                at[(i - 1) * k + j],
                at[(i - 1) * k + j - 1],
            );
            let mut found = adjacent[left]
                .iter()
                .copied()
                .filter(|&c| c != corner && adjacent[up].contains(&c));
            let c = found.next()?;
            if found.next().is_some() {
                return None;
            }
            at[i * k + j] = c;
        }
    }
    let mut to = vec![usize::MAX; n];
    for (place, &r) in at.iter().enumerate() {
        if to[r] != usize::MAX {
            return None;
        }
        to[r] = place;
    }
    let torus_linked = (0..n).all(|x| {
        DIRECTIONS
            .iter()
            .all(|&d| adjacent[at[x]].contains(&at[torus_step(k, x, d, 1)]))
    });
    torus_linked.then_some(to)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::load;

    #[test]
    fn shapes_are_recognised() {
        let torus = load("torus-2d:4x4").unwrap();
        assert_eq!(square_torus_side(&torus, &torus.index()), Some(4));
        let ring = load("ring:9").unwrap();
        assert_eq!(square_torus_side(&ring, &ring.index()), None);
        let cluster = load("dgx-a100x2").unwrap();
        let nodes = equal_nodes(&cluster).unwrap();
        assert_eq!(nodes.len(), 2);
        assert!(equal_nodes(&torus).is_none());
    }

    #[test]
    fn the_rail_view_keeps_one_peer_per_node_for_each_rank() {
        // Three DGX-A100s on a fat tree: every GPU to the 16 GPUs of the other nodes; the
        // view keeps GPU i to GPU i, with every link within a node and every constraint.
        let t = load("dgx-a100x3").unwrap();
        let view = rail_view(&t, &t.index()).expect("a fat tree has a rail view");
        let across = |t: &Topology| {
            (t.links.iter())
                .filter(|l| t.node_of[l.src] != t.node_of[l.dst])
                .map(|l| (l.src, l.dst))
                .collect::<Vec<_>>()
        };
        assert_eq!(across(&t).len(), 24 * 16);
        let mut rails = across(&view);
        rails.sort();
        let expected: Vec<(usize, usize)> = (0..24)
            .flat_map(|u| (0..24).map(move |v| (u, v)))
            .filter(|&(u, v)| u / 8 != v / 8 && u % 8 == v % 8)
            .collect();
        assert_eq!(rails, expected);
        let within = |t: &Topology| t.links.len() - across(t).len();
        assert_eq!(within(&view), within(&t));
        assert_eq!((&view.name, &view.switches), (&t.name, &t.switches));
        // A rail network is its own view; one node and nodes of other sizes have none.
        let rail = crate::topology::load("dgx-a100x3:rail").unwrap();
        assert!(rail_view(&rail, &rail.index()).is_none());
        let box_ = load("dgx-a100").unwrap();
        assert!(rail_view(&box_, &box_.index()).is_none());
    }

    #[test]
    fn the_split_view_gives_each_gpu_its_share_of_a_shared_nic() {
        // Four 2x2x2 tori on rails, a 25 GB/s NIC per two GPUs: each NIC's out constraint
        // (two senders, six receivers) becomes one per sender, its in constraint one per
        // receiver, 12.5 GB/s each; the links stay.
        let t = crate::topology::translations::subgroup_tests::tori_sharing_nics();
        let view = split_view(&t).expect("shared NICs");
        assert_eq!(view.links, t.links);
        assert_eq!(view.switches.len(), 2 * t.switches.len());
        for s in &view.switches {
            assert!(s.srcs.len() == 1 || s.dsts.len() == 1, "{s:?}");
            assert_eq!(s.bandwidth, 12.5);
        }
        let out: Vec<_> = (view.switches.iter())
            .filter(|s| s.name.starts_with("n0-nic0-out"))
            .map(|s| (s.srcs.clone(), s.dsts.clone()))
            .collect();
        let remote = vec![8, 9, 16, 17, 24, 25];
        assert_eq!(out, [(vec![0], remote.clone()), (vec![1], remote)]);
        // A NIC per GPU: nothing to split.
        let own = load("dgx-a100x2").unwrap();
        assert!(split_view(&own).is_none());
    }

    #[test]
    fn renumbered_square_tori_are_laid_out_row_major_again() {
        use crate::topology::toml_format::random_permutation;
        for k in [3, 4, 5, 8] {
            let torus = load(&format!("torus-2d:{k}x{k}")).unwrap();
            for seed in [1, 2, 3] {
                let twin = torus.relabeled(&random_permutation(k * k, seed));
                let to = square_torus_numbering(&twin, 5).expect("a square torus");
                assert_eq!(to[5], 0, "the origin comes first");
                let again = twin.relabeled(&to);
                let mut links = torus.links.clone();
                links.sort_by_key(|l| (l.src, l.dst));
                assert_eq!(again.links, links, "{k}x{k} seed {seed}");
            }
        }
        for spec in ["torus-2d:4x8", "ring:9", "mesh-2d:4x4", "hypercube:16"] {
            let t = load(spec).unwrap();
            let square = square_torus_numbering(&t, 0).is_some();
            // The 4-cube is the 4x4 torus.
            assert_eq!(square, spec == "hypercube:16", "{spec}");
        }
    }
}
