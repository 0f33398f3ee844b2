//! Symmetric schedules: a topology automorphism σ that maps the collective onto itself acts
//! on schedules (send chunk c over u→v in step s ↦ send σ(c) over σ(u)→σ(v) in step s).
//! Asking the solver for a schedule that every σ of a group leaves unchanged shrinks the
//! search to one orbit representative per variable.
//!
//! This is a restriction, not a reduction: a SAT answer of the restricted formula is a valid
//! schedule of the full instance, but UNSAT proves nothing, so the search only uses it to
//! find schedules and still proves impossibility on the full encoding.

use crate::collective::Collective;
use crate::topology::Topology;
use std::collections::BTreeMap;

/// One automorphism as it acts on an instance: ranks and chunk indices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Symmetry {
    /// Rank `r` maps to `ranks[r]`.
    pub ranks: Vec<usize>,
    /// Chunk index `c` maps to `chunks[c]`.
    pub chunks: Vec<usize>,
}

impl Symmetry {
    /// Whether this is the identity.
    pub fn is_identity(&self) -> bool {
        self.ranks.iter().enumerate().all(|(i, &r)| i == r)
    }
}

/// The symmetry groups to restrict a solve to, strongest first: the whole group, then the
/// cyclic subgroup of its element of largest order that fixes no rank (or of largest order,
/// if every element fixes one) when that is a smaller non-trivial group. The whole group
/// often admits no schedule at all: a reflection of a ring fixing a rank would have that
/// rank receive the opposite chunk from both sides. A rotation never forces that.
pub fn symmetry_ladder(group: &[Symmetry]) -> Vec<Vec<Symmetry>> {
    let mut ladder = Vec::new();
    if group.len() > 1 {
        ladder.push(group.to_vec());
    }
    let fixes_a_rank = |g: &Symmetry| g.ranks.iter().enumerate().any(|(r, &i)| r == i);
    let best = group
        .iter()
        .map(|g| (g, cyclic_group(g)))
        .max_by_key(|(g, cycle)| (!fixes_a_rank(g), cycle.len()));
    if let Some((_, cycle)) = best {
        if cycle.len() > 1 && cycle.len() < group.len() {
            ladder.push(cycle);
        }
    }
    ladder
}

/// The powers of `g`, from the identity.
fn cyclic_group(g: &Symmetry) -> Vec<Symmetry> {
    let mut powers = vec![Symmetry {
        ranks: (0..g.ranks.len()).collect(),
        chunks: (0..g.chunks.len()).collect(),
    }];
    loop {
        let last = powers.last().expect("starts with the identity");
        let next = Symmetry {
            ranks: last.ranks.iter().map(|&r| g.ranks[r]).collect(),
            chunks: last.chunks.iter().map(|&c| g.chunks[c]).collect(),
        };
        if next.is_identity() || powers.len() > g.ranks.len().pow(2) {
            return powers;
        }
        powers.push(next);
    }
}

/// A class of interchangeable pieces: their (pre, post) ranks.
type ClassKey = (Vec<usize>, Vec<usize>);

/// The chunks grouped by (pre, post), each group in index order: pieces in one group are
/// interchangeable.
pub fn piece_classes(collective: &Collective) -> BTreeMap<ClassKey, Vec<usize>> {
    let mut classes: BTreeMap<ClassKey, Vec<usize>> = BTreeMap::new();
    for (c, chunk) in collective.chunks.iter().enumerate() {
        classes
            .entry((chunk.pre.clone(), chunk.post.clone()))
            .or_default()
            .push(c);
    }
    classes
}

/// The rank permutations in `automorphisms` that map the collective onto itself, with the
/// chunk map each induces: the k-th piece with (pre, post) goes to the k-th piece with
/// (σ(pre), σ(post)). Those that map some piece to nothing are dropped; the rest form a
/// group, since the maps keep the index k and so compose.
pub fn collective_symmetries(
    collective: &Collective,
    automorphisms: &[Vec<usize>],
) -> Vec<Symmetry> {
    let classes = piece_classes(collective);
    let image = |perm: &[usize], set: &[usize]| -> Vec<usize> {
        let mut out: Vec<usize> = set.iter().map(|&r| perm[r]).collect();
        out.sort_unstable();
        out
    };
    automorphisms
        .iter()
        .filter(|perm| perm.len() == collective.ranks)
        .filter_map(|perm| {
            let mut chunks = vec![usize::MAX; collective.chunks.len()];
            for ((pre, post), members) in &classes {
                let target = classes.get(&(image(perm, pre), image(perm, post)))?;
                if target.len() != members.len() {
                    return None;
                }
                for (&from, &to) in members.iter().zip(target) {
                    chunks[from] = to;
                }
            }
            Some(Symmetry {
                ranks: perm.clone(),
                chunks,
            })
        })
        .collect()
}

/// The classes of interchangeable pieces whose pieces may be ordered by arrival time at a
/// rank (the class's pieces and that rank) without excluding every symmetric schedule.
///
/// Without symmetries that is every class, at its first rank that needs the pieces. With
/// them, only one class per orbit: a symmetric schedule stays symmetric when the piece
/// indices of every class in an orbit are permuted alike (the chunk maps keep the index),
/// so one class of each orbit can be put in order, but not two.
pub fn ordered_classes(
    collective: &Collective,
    symmetries: &[Symmetry],
) -> Vec<(Vec<usize>, usize)> {
    let classes: Vec<(ClassKey, Vec<usize>)> = piece_classes(collective).into_iter().collect();
    // Orbits of classes under the group the symmetries generate, through the class of each
    // class's first piece's image (the chunk maps keep the index).
    let mut class_of = vec![usize::MAX; collective.chunks.len()];
    for (k, (_, members)) in classes.iter().enumerate() {
        class_of[members[0]] = k;
    }
    let mut orbits = UnionFind::new(classes.len());
    for (k, (_, members)) in classes.iter().enumerate() {
        for g in symmetries {
            orbits.join(k, class_of[g.chunks[members[0]]]);
        }
    }
    let roots = orbits.roots();
    classes
        .iter()
        .enumerate()
        .filter(|&(k, _)| roots[k] == k)
        .filter_map(|(_, ((pre, post), members))| {
            let pivot = post.iter().copied().find(|r| !pre.contains(r))?;
            Some((members.clone(), pivot))
        })
        .collect()
}

/// The orbits of an instance's variables under a group of symmetries (generated by the ones
/// given): one representative, the smallest index, per orbit of (chunk, rank) pairs (arrival
/// variables), of (chunk, link) pairs (send variables) and of links (bandwidth constraints).
/// A symmetric schedule is one where every variable equals its representative, so the
/// encoding creates variables and constraints for representatives only.
pub struct Orbits {
    ranks: usize,
    links: usize,
    chunk_rank: Vec<usize>,
    chunk_link: Vec<usize>,
    link: Vec<usize>,
}

impl Orbits {
    /// The orbits under `symmetries`; a symmetry that does not map every link to a link is
    /// ignored.
    pub fn new(topology: &Topology, collective: &Collective, symmetries: &[Symmetry]) -> Orbits {
        let (n, nl, nc) = (
            topology.ranks,
            topology.links.len(),
            collective.chunks.len(),
        );
        let index: BTreeMap<(usize, usize), usize> = topology
            .links
            .iter()
            .enumerate()
            .map(|(l, link)| ((link.src, link.dst), l))
            .collect();
        let mut chunk_rank = UnionFind::new(nc * n);
        let mut chunk_link = UnionFind::new(nc * nl);
        let mut link = UnionFind::new(nl);
        for g in symmetries {
            let link_map: Option<Vec<usize>> = topology
                .links
                .iter()
                .map(|l| index.get(&(g.ranks[l.src], g.ranks[l.dst])).copied())
                .collect();
            let Some(link_map) = link_map else {
                continue;
            };
            for c in 0..nc {
                for r in 0..n {
                    chunk_rank.join(c * n + r, g.chunks[c] * n + g.ranks[r]);
                }
                for (l, &image) in link_map.iter().enumerate() {
                    chunk_link.join(c * nl + l, g.chunks[c] * nl + image);
                }
            }
            for (l, &image) in link_map.iter().enumerate() {
                link.join(l, image);
            }
        }
        Orbits {
            ranks: n,
            links: nl,
            chunk_rank: chunk_rank.roots(),
            chunk_link: chunk_link.roots(),
            link: link.roots(),
        }
    }

    /// The representative of (chunk, rank).
    pub fn chunk_rank(&self, c: usize, r: usize) -> (usize, usize) {
        let k = self.chunk_rank[c * self.ranks + r];
        (k / self.ranks, k % self.ranks)
    }

    /// The representative of (chunk, link).
    pub fn chunk_link(&self, c: usize, l: usize) -> (usize, usize) {
        let k = self.chunk_link[c * self.links + l];
        (k / self.links, k % self.links)
    }

    /// Whether link `l` represents its orbit.
    pub fn is_link_representative(&self, l: usize) -> bool {
        self.link[l] == l
    }
}

/// Union-find whose roots are the smallest member of each set.
struct UnionFind {
    parent: Vec<usize>,
}

impl UnionFind {
    fn new(n: usize) -> UnionFind {
        UnionFind {
            parent: (0..n).collect(),
        }
    }

    fn root(&mut self, mut k: usize) -> usize {
        while self.parent[k] != k {
            self.parent[k] = self.parent[self.parent[k]];
            k = self.parent[k];
        }
        k
    }

    fn join(&mut self, a: usize, b: usize) {
        let (a, b) = (self.root(a), self.root(b));
        self.parent[a.max(b)] = a.min(b);
    }

    /// Every element's root.
    fn roots(mut self) -> Vec<usize> {
        (0..self.parent.len()).map(|k| self.root(k)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collective::Kind;

    fn rotations(n: usize) -> Vec<Vec<usize>> {
        (0..n)
            .map(|k| (0..n).map(|r| (r + k) % n).collect())
            .collect()
    }

    #[test]
    fn rotations_of_a_ring_map_allgather_pieces_with_their_index() {
        let coll = Collective::new(Kind::AllGather, 4, 0, 2).unwrap();
        let syms = collective_symmetries(&coll, &rotations(4));
        assert_eq!(syms.len(), 4);
        for g in &syms {
            for (c, &img) in g.chunks.iter().enumerate() {
                let (from, to) = (&coll.chunks[c], &coll.chunks[img]);
                assert_eq!(to.pre, vec![g.ranks[from.pre[0]]]);
                assert_eq!(c % 2, img % 2, "piece index kept");
            }
        }
    }

    #[test]
    fn a_rooted_collective_keeps_only_the_symmetries_fixing_its_root() {
        let coll = Collective::new(Kind::Broadcast, 4, 1, 1).unwrap();
        let syms = collective_symmetries(&coll, &rotations(4));
        assert_eq!(syms.len(), 1);
        assert!(syms[0].is_identity());
    }

    #[test]
    fn the_ladder_of_a_ring_ends_with_its_rotations() {
        let topo = crate::topology::load("ring:6").unwrap();
        let coll = Collective::new(Kind::AllGather, 6, 0, 1).unwrap();
        let group = collective_symmetries(&coll, &topo.automorphisms(64));
        assert_eq!(group.len(), 12, "dihedral group of the hexagon");
        let ladder = symmetry_ladder(&group);
        assert_eq!(ladder.len(), 2);
        assert_eq!(ladder[1].len(), 6, "the rotations");
        assert!(ladder[1][1..]
            .iter()
            .all(|g| g.ranks.iter().enumerate().all(|(r, &i)| r != i)));
    }

    #[test]
    fn orbits_pick_the_smallest_member() {
        let topo = crate::topology::load("ring:4").unwrap();
        let coll = Collective::new(Kind::AllGather, 4, 0, 1).unwrap();
        let rotations: Vec<Symmetry> = collective_symmetries(&coll, &rotations(4));
        let orbits = Orbits::new(&topo, &coll, &rotations);
        // Chunk c on rank r is chunk 0 on rank r - c.
        for c in 0..4 {
            for r in 0..4 {
                assert_eq!(orbits.chunk_rank(c, r), (0, (r + 4 - c) % 4));
            }
        }
        let representatives = (0..topo.links.len())
            .filter(|&l| orbits.is_link_representative(l))
            .count();
        assert_eq!(representatives, 2, "clockwise and counter-clockwise links");
    }

    #[test]
    fn one_class_per_orbit_is_ordered() {
        let coll = Collective::new(Kind::AllGather, 4, 0, 2).unwrap();
        let plain = ordered_classes(&coll, &collective_symmetries(&coll, &rotations(1)));
        assert_eq!(plain.len(), 4);
        let sym = ordered_classes(&coll, &collective_symmetries(&coll, &rotations(4)));
        assert_eq!(sym.len(), 1);
    }
}
