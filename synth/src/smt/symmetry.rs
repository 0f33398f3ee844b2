//! Symmetric schedules: an automorphism σ of the topology that maps the collective onto
//! itself acts on schedules (send chunk c over u→v in step s ↦ send σ(c) over σ(u)→σ(v) in
//! step s). Asking the solver for a schedule that every σ of a [`Group`] leaves unchanged
//! shrinks the search to one orbit representative per variable.
//!
//! This is a restriction, not a reduction: a SAT answer of the restricted formula is a valid
//! schedule of the full instance, but UNSAT proves nothing, so the search only uses it to
//! find schedules and still proves impossibility on the full encoding.

use crate::collective::Collective;
use crate::symmetry::Group;
use crate::topology::{Topology, TopologyIndex};
use std::collections::BTreeMap;
use std::time::Instant;

/// The symmetry groups to restrict a solve to, strongest first: the group the automorphisms
/// generate (restricted to those mapping the collective onto itself), then the cyclic group
/// of its element that fixes no rank with the largest such group (or of any element, if
/// every one fixes a rank) when that is a smaller non-trivial group. The whole group often
/// admits no schedule at all: a reflection of a ring fixing a rank would have that rank
/// receive the opposite chunk from both sides. A rotation never forces that. Empty when no
/// symmetry applies. Groups not built by `deadline` are left out.
pub fn symmetry_ladder(
    topology: &Topology,
    index: &TopologyIndex,
    collective: &Collective,
    automorphisms: &[Vec<usize>],
    deadline: Option<Instant>,
) -> Vec<Group> {
    let mut ladder = Vec::with_capacity(2);
    // A group too large to close is left out; its elements still give cyclic subgroups.
    let whole = Group::new_before(topology, index, collective, automorphisms, deadline)
        .ok()
        .filter(|g| g.order() > 1);
    let elements = whole.as_ref().map_or(automorphisms, |g| &g.ranks[..]);
    let fixes_a_rank = |p: &[usize]| p.iter().enumerate().any(|(r, &i)| r == i);
    let cycle = elements
        .iter()
        .filter_map(|p| {
            Some((
                p,
                Group::new_before(
                    topology,
                    index,
                    collective,
                    std::slice::from_ref(p),
                    deadline,
                )
                .ok()?,
            ))
        })
        .max_by_key(|(p, cycle)| (!fixes_a_rank(p), cycle.order()))
        .map(|(_, cycle)| cycle);
    let whole_order = whole.as_ref().map_or(usize::MAX, Group::order);
    ladder.extend(whole);
    ladder.extend(cycle.filter(|c| c.order() > 1 && c.order() < whole_order));
    ladder
}

/// The chunks grouped by (pre, post), each group in index order: pieces in one group are
/// interchangeable.
fn piece_classes(collective: &Collective) -> Vec<Vec<usize>> {
    let mut classes: BTreeMap<(&[usize], &[usize]), Vec<usize>> = BTreeMap::new();
    for (c, chunk) in collective.chunks.iter().enumerate() {
        classes
            .entry((&chunk.pre, &chunk.post))
            .or_default()
            .push(c);
    }
    classes.into_values().collect()
}

/// The classes of interchangeable pieces whose pieces may be ordered by arrival time at a
/// rank (the class's pieces and that rank) without excluding every symmetric schedule.
///
/// Without a group that is every class, at its first rank that needs the pieces. With one,
/// only one class per orbit: a symmetric schedule stays symmetric when the pieces of every
/// class in an orbit are relabelled alike (the group's chunk maps keep a piece's label), so
/// one class of each orbit can be put in order, but not two.
pub fn ordered_classes(collective: &Collective, group: Option<&Group>) -> Vec<(Vec<usize>, usize)> {
    let classes = piece_classes(collective);
    let mut class_of = vec![0; collective.chunks.len()];
    for (k, members) in classes.iter().enumerate() {
        for &c in members {
            class_of[c] = k;
        }
    }
    let represents_its_orbit = |k: usize, first: usize| {
        group.is_none_or(|g| g.chunks.iter().all(|map| class_of[map[first]] >= k))
    };
    classes
        .iter()
        .enumerate()
        .filter(|&(k, members)| represents_its_orbit(k, members[0]))
        .filter_map(|(_, members)| {
            let chunk = &collective.chunks[members[0]];
            let pivot = chunk
                .post
                .iter()
                .copied()
                .find(|r| !chunk.pre.contains(r))?;
            Some((members.clone(), pivot))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collective::Kind;

    fn setup(topo: &str, kind: Kind, root: usize, chunks: usize) -> (Topology, Collective) {
        let topology = crate::topology::load(topo).unwrap();
        let collective = Collective::new(kind, topology.ranks, root, chunks).unwrap();
        (topology, collective)
    }

    #[test]
    fn the_ladder_of_a_ring_ends_with_its_rotations() {
        let (topo, coll) = setup("ring:6", Kind::AllGather, 0, 1);
        let ladder = symmetry_ladder(&topo, &topo.index(), &coll, &topo.automorphisms(64), None);
        assert_eq!(ladder.len(), 2);
        assert_eq!(ladder[0].order(), 12, "dihedral group of the hexagon");
        assert_eq!(ladder[1].order(), 6, "the rotations");
        assert!(ladder[1].ranks[1..]
            .iter()
            .all(|p| p.iter().enumerate().all(|(r, &i)| r != i)));
    }

    #[test]
    fn a_rooted_collective_keeps_only_the_symmetries_fixing_its_root() {
        let (topo, coll) = setup("ring:4", Kind::Broadcast, 1, 1);
        let ladder = symmetry_ladder(&topo, &topo.index(), &coll, &topo.automorphisms(64), None);
        assert_eq!(ladder.len(), 1);
        assert_eq!(
            ladder[0].order(),
            2,
            "the identity and the reflection through rank 1"
        );
        assert!(ladder[0].ranks.iter().all(|p| p[1] == 1));
    }

    #[test]
    fn one_class_per_orbit_is_ordered() {
        let (topo, coll) = setup("ring:4", Kind::AllGather, 0, 2);
        assert_eq!(ordered_classes(&coll, None).len(), 4);
        let rotation = vec![vec![1, 2, 3, 0]];
        let rotations = Group::new(&topo, &coll, &rotation).unwrap();
        assert_eq!(rotations.order(), 4);
        assert_eq!(ordered_classes(&coll, Some(&rotations)).len(), 1);
    }
}
