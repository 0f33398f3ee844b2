//! A semiregular symmetry group of a topology: automorphisms no one of which (but the
//! identity) fixes a rank. On a torus these are the translations, on a multi-node fabric the
//! node rotations combined with rotations inside a node. Engines solve for one representative
//! rank per orbit and map the answer to the others, which loses nothing for convex problems
//! (averaging an optimum over the group gives a symmetric optimum).
//!
//! Automorphisms mapping rank 0 to a rank `k` are found by individualisation and refinement
//! (the fabric as the labelled graph of [`super::canonical`]): one fixed path individualises
//! rank 0 and then, while two ranks share a colour, the lowest-numbered rank of the least
//! shared colour; a depth-first search individualises `k` and then, level by level, a rank of
//! the same colour, refining after each step and pruning where the colour classes' sizes
//! differ or a rank is forced into its own orbit under the group found so far (which the new
//! element's coset must avoid to act freely). A leaf is a permutation, checked against every
//! link and switch constraint. The search is bounded by counts of refinement work, so the
//! group found never depends on the machine's speed.

use super::canonical::{first_of, individualised, shared_rank_colour, Graph};
use super::Topology;

/// Automorphisms with a given image of rank 0 that are tried per image.
const CANDIDATES_PER_IMAGE: usize = 16;

/// Fabrics of up to this many ranks are searched by the backtracking derangement search of
/// `automorphism.rs` first (by refinement only where it leaves more than one orbit).
const OLD_SEARCH_RANKS: usize = 256;

/// The largest group built (bounded by the number of ranks anyway).
const MAX_ORDER: usize = 1 << 16;

/// Refinement work (labelled incidences processed, see [`Graph::refine_within`]) that the
/// search for automorphisms mapping rank 0 to one image may take.
const WORK_PER_IMAGE: usize = 10_000_000;

/// Refinement work of the whole group search on the fabric renumbered canonically; past it
/// the group found so far is kept.
const WORK_LIMIT: usize = 100_000_000;

/// Refinement work of the search in the fabric's own numbering, where a canonical numbering
/// can be tried next (a hypercube of 1024 ranks takes 18 million).
const OWN_WORK_LIMIT: usize = 30_000_000;

/// A group of rank permutations acting freely on the ranks.
#[derive(Debug, Clone, PartialEq)]
pub struct Translations {
    /// Every element, the identity first; `elements[g][r]` is the image of rank `r`.
    pub elements: Vec<Vec<u32>>,
}

impl Translations {
    /// The group with only the identity.
    pub fn trivial(ranks: usize) -> Translations {
        Translations {
            elements: vec![(0..ranks as u32).collect()],
        }
    }

    /// The group's order.
    pub fn order(&self) -> usize {
        self.elements.len()
    }

    /// One representative rank per orbit (the smallest rank of each).
    pub fn representatives(&self) -> Vec<usize> {
        let n = self.elements[0].len();
        let mut seen = vec![false; n];
        let mut reps = Vec::new();
        for r in 0..n {
            if !seen[r] {
                reps.push(r);
                for g in &self.elements {
                    seen[g[r] as usize] = true;
                }
            }
        }
        reps
    }

    /// The subgroup in which at most `limits[j]` (at least one) elements map switch
    /// constraint `j` of `topology` to itself: the group itself where it already is one, else
    /// grown from the identity by taking each element in turn whose addition keeps it one.
    /// Trees grown under a group put, in one step, an edge's image through a constraint for
    /// every element fixing it (two GPUs behind one NIC, a node's oversubscribed uplink).
    pub fn within_switch_limits(&self, topology: &Topology, limits: &[u32]) -> Translations {
        let n = self.elements[0].len();
        // Per constraint held to fewer elements than fix it: which elements fix it.
        let crowded: Vec<(Vec<bool>, usize)> = (topology.switches.iter().zip(limits))
            .filter_map(|(s, &limit)| {
                let fixes = self.fixing(s, n);
                let limit = limit.max(1) as usize;
                (fixes.iter().filter(|&&f| f).count() > limit).then_some((fixes, limit))
            })
            .collect();
        if crowded.is_empty() {
            return self.clone();
        }
        // An element of a group acting freely is known by its image of rank 0, so a subgroup
        // is closed over element indices (`generated` composes whole permutations, n times
        // the work per product, for every element tried).
        let mut by_image = vec![usize::MAX; n];
        for (i, g) in self.elements.iter().enumerate() {
            by_image[g[0] as usize] = i;
        }
        let product =
            |a: usize, b: usize| by_image[self.elements[a][self.elements[b][0] as usize] as usize];
        let mut members = vec![true];
        members.resize(self.order(), false);
        let mut generators: Vec<usize> = Vec::new();
        for g in 1..self.order() {
            if members[g] {
                continue;
            }
            generators.push(g);
            let mut grown = vec![false; self.order()];
            grown[0] = true;
            let mut queue = vec![0];
            while let Some(a) = queue.pop() {
                for &x in &generators {
                    let p = product(x, a);
                    if !grown[p] {
                        grown[p] = true;
                        queue.push(p);
                    }
                }
            }
            let fits = crowded.iter().all(|(fixes, limit)| {
                (grown.iter().zip(fixes)).filter(|(&m, &f)| m && f).count() <= *limit
            });
            if fits {
                members = grown;
            } else {
                generators.pop();
            }
        }
        Translations {
            elements: (self.elements.iter().zip(&members))
                .filter(|(_, &m)| m)
                .map(|(g, _)| g.clone())
                .collect(),
        }
    }

    /// Per element, whether it maps the constraint's senders and receivers to themselves.
    fn fixing(&self, s: &super::SwitchConstraint, n: usize) -> Vec<bool> {
        let (mut src, mut dst) = (vec![false; n], vec![false; n]);
        s.srcs.iter().for_each(|&r| src[r] = true);
        s.dsts.iter().for_each(|&r| dst[r] = true);
        (self.elements.iter())
            .map(|g| {
                s.srcs.iter().all(|&r| src[g[r] as usize])
                    && s.dsts.iter().all(|&r| dst[g[r] as usize])
            })
            .collect()
    }

    /// Each rank's orbit, named by its smallest rank.
    fn orbit_names(&self) -> Vec<usize> {
        let n = self.elements[0].len();
        let mut name = vec![usize::MAX; n];
        for r in 0..n {
            if name[r] == usize::MAX {
                for g in &self.elements {
                    name[g[r] as usize] = r;
                }
            }
        }
        name
    }
}

/// The group generated by `generators`, if it acts freely (else `None`). An element of a
/// group acting freely is known by its image of rank 0, so products are told apart by that
/// image and a second product with the same image is a non-identity element fixing rank 0.
fn generated(generators: &[Vec<u32>], n: usize) -> Option<Translations> {
    let identity: Vec<u32> = (0..n as u32).collect();
    let mut by_image = vec![usize::MAX; n];
    by_image[0] = 0;
    let mut elements = vec![identity];
    let mut i = 0;
    while i < elements.len() {
        for g in generators {
            let product: Vec<u32> = elements[i].iter().map(|&x| g[x as usize]).collect();
            let at = product[0] as usize;
            if by_image[at] != usize::MAX {
                if elements[by_image[at]] != product {
                    return None;
                }
                continue;
            }
            if product.iter().enumerate().any(|(r, &x)| x as usize == r)
                || elements.len() >= n.min(MAX_ORDER)
            {
                return None;
            }
            by_image[at] = elements.len();
            elements.push(product);
        }
        i += 1;
    }
    Some(Translations { elements })
}

/// The search for automorphisms mapping rank 0 to another rank (see the module doc).
struct Matcher<'a> {
    topology: &'a Topology,
    graph: Graph,
    /// The path from rank 0 alone individualised; `None` where it passed the work limit.
    plain: Option<Path>,
    /// Refinement work done so far.
    work: usize,
    /// Refinement work past which the search stops.
    limit: usize,
}

/// A fixed path of individualisations: per level its refined colouring, the colour split
/// there and the rank individualised in it, then the last colouring, every rank in a colour
/// of its own.
struct Path {
    levels: Vec<(Vec<usize>, usize, usize)>,
    last: Vec<usize>,
}

/// Per colour, the number of vertices of that colour.
fn histogram(colours: &[usize]) -> Vec<usize> {
    let mut h = vec![0; colours.len() + 1];
    for &c in colours {
        h[c] += 1;
    }
    h
}

/// Where a search stands.
struct Hunt<'p> {
    path: &'p Path,
    orbit: &'p [usize],
    limit: usize,
    refused: usize,
}

impl<'a> Matcher<'a> {
    fn new(topology: &'a Topology, limit: usize) -> Matcher<'a> {
        let mut m = Matcher {
            topology,
            graph: Graph::of(topology),
            plain: None,
            work: 0,
            limit,
        };
        let start = m.graph.labelled_colours(&[(0, 0)]);
        m.plain = m.path(start, limit);
        m
    }

    /// The path from `colours` (before refinement); `None` past `limit`.
    fn path(&mut self, colours: Vec<usize>, limit: usize) -> Option<Path> {
        let n = self.topology.ranks;
        let mut colours = self.graph.refine_within(colours, &mut self.work, limit)?;
        let mut levels = Vec::new();
        while let Some(colour) = shared_rank_colour(&colours[..n]) {
            let a = first_of(&colours, colour);
            let next = individualised(&colours, colour, a);
            let next = self.graph.refine_within(next, &mut self.work, limit)?;
            levels.push((colours, colour, a));
            colours = next;
        }
        Some(Path {
            levels,
            last: colours,
        })
    }

    /// Whether the search may go on.
    fn spent(&self) -> bool {
        self.work > self.limit
    }

    /// Offers `accept` automorphisms mapping rank 0 to `k` that move every rank out of its
    /// orbit under `group`, until `accept` takes one, [`CANDIDATES_PER_IMAGE`] are refused
    /// or the work for this image is spent: first those commuting with `group` on rank 0's
    /// orbit (`h(0)` to `h(k)` for every element `h`, so that the group stays a product
    /// where it can), then any.
    fn offer(&mut self, k: usize, group: &Translations, accept: &mut dyn FnMut(&[usize]) -> bool) {
        let limit = (self.work + WORK_PER_IMAGE).min(self.limit);
        let orbit = group.orbit_names();
        let labels = |at: usize| -> Vec<(usize, usize)> {
            group
                .elements
                .iter()
                .enumerate()
                .map(|(i, h)| (h[at] as usize, i))
                .collect()
        };
        if group.order() > 1 {
            let from = self.graph.labelled_colours(&labels(0));
            let Some(path) = self.path(from, limit) else {
                return;
            };
            let to = self.graph.labelled_colours(&labels(k));
            if self.hunt(&path, to, &orbit, limit, accept) {
                return;
            }
        }
        if let Some(path) = self.plain.take() {
            let to = self.graph.labelled_colours(&[(k, 0)]);
            self.hunt(&path, to, &orbit, limit, accept);
            self.plain = Some(path);
        }
    }

    /// Searches the images of `path` from `colours` (before refinement); true once it is
    /// over (accepted, or out of work).
    fn hunt(
        &mut self,
        path: &Path,
        colours: Vec<usize>,
        orbit: &[usize],
        limit: usize,
        accept: &mut dyn FnMut(&[usize]) -> bool,
    ) -> bool {
        let Some(start) = self.graph.refine_within(colours, &mut self.work, limit) else {
            return true;
        };
        let mut hunt = Hunt {
            path,
            orbit,
            limit,
            refused: 0,
        };
        self.descend(0, start, &mut hunt, accept) && hunt.refused < CANDIDATES_PER_IMAGE
    }

    /// The search below `colours` at `level` of the path; true once it is over (accepted,
    /// enough refused or out of work).
    fn descend(
        &mut self,
        level: usize,
        colours: Vec<usize>,
        hunt: &mut Hunt,
        accept: &mut dyn FnMut(&[usize]) -> bool,
    ) -> bool {
        let n = self.topology.ranks;
        let target = match hunt.path.levels.get(level) {
            Some((a, _, _)) => a,
            None => &hunt.path.last,
        };
        let h = histogram(&colours);
        if histogram(target) != h {
            return false;
        }
        // Ranks alone in their colour are mapped already: none may stay in its orbit.
        let mut image = vec![usize::MAX; colours.len() + 1];
        for r in 0..n {
            if h[colours[r]] == 1 {
                image[colours[r]] = r;
            }
        }
        for r in 0..n {
            let to = image[target[r]];
            if h[target[r]] == 1 && hunt.orbit[to] == hunt.orbit[r] {
                return false;
            }
        }
        let Some(&(_, colour, a)) = hunt.path.levels.get(level) else {
            let perm: Vec<usize> = (0..n).map(|r| image[hunt.path.last[r]]).collect();
            if self.topology.is_automorphism(&perm) {
                if accept(&perm) {
                    return true;
                }
                hunt.refused += 1;
            }
            return hunt.refused >= CANDIDATES_PER_IMAGE;
        };
        for b in (0..n).filter(|&b| colours[b] == colour) {
            if hunt.orbit[b] == hunt.orbit[a] {
                continue;
            }
            let next = individualised(&colours, colour, b);
            let Some(next) = self.graph.refine_within(next, &mut self.work, hunt.limit) else {
                return true;
            };
            if self.descend(level + 1, next, hunt, accept) {
                return true;
            }
        }
        false
    }
}

/// Cyclic shifts of the rank numbering and rotations inside equal blocks of ranks (the GPUs
/// of one node, the ranks of one row), the usual translations of generated fabrics; long
/// cycles first, so that few generators reach the whole group.
fn numbering_shifts(n: usize) -> Vec<Vec<usize>> {
    let mut out = Vec::new();
    for block in (2..=n).rev().filter(|b| n.is_multiple_of(*b)) {
        out.push(
            (0..n)
                .map(|r| (r / block) * block + (r % block + 1) % block)
                .collect(),
        );
        if block < n {
            out.push((0..n).map(|r| (r + block) % n).collect());
        }
    }
    out
}

impl Topology {
    /// Whether `perm` maps every link to a link of equal bandwidth and alpha and every switch
    /// constraint to one of equal bandwidth.
    pub fn is_automorphism(&self, perm: &[usize]) -> bool {
        if perm.len() != self.ranks {
            return false;
        }
        let key = |x: f64| (x * 1e6).round() as i64;
        let links: std::collections::HashMap<(usize, usize), (i64, i64)> = self
            .links
            .iter()
            .map(|l| ((l.src, l.dst), (key(l.bandwidth), key(l.alpha))))
            .collect();
        let set = |v: &[usize], p: &dyn Fn(usize) -> usize| {
            let mut s: Vec<usize> = v.iter().map(|&r| p(r)).collect();
            s.sort_unstable();
            s.dedup();
            s
        };
        let switches: std::collections::HashSet<(Vec<usize>, Vec<usize>, i64)> = self
            .switches
            .iter()
            .map(|s| (set(&s.srcs, &|r| r), set(&s.dsts, &|r| r), key(s.bandwidth)))
            .collect();
        self.links.iter().all(|l| {
            links.get(&(perm[l.src], perm[l.dst])) == Some(&(key(l.bandwidth), key(l.alpha)))
        }) && self.switches.iter().all(|s| {
            switches.contains(&(
                set(&s.srcs, &|r| perm[r]),
                set(&s.dsts, &|r| perm[r]),
                key(s.bandwidth),
            ))
        })
    }

    /// A semiregular group of automorphisms, as transitive as a greedy search finds: for each
    /// rank not yet in the orbit of rank 0, automorphisms mapping 0 there (shifts of the
    /// numbering first, then ones found by search, see the module doc) are tried, and the
    /// first whose closure with the group so far still fixes no rank is kept. On a fabric of
    /// up to [`OLD_SEARCH_RANKS`] ranks where the backtracking search leaves more than one
    /// orbit, the refinement search's group is taken if it has one. Where the search
    /// leaves more than one orbit, the same search on the fabric renumbered canonically
    /// ([`super::canonical::canonical`]) is tried too, and its group (numbered back) kept if
    /// it is larger: the search's order of candidates follows the numbering, and a scrambled
    /// numbering can lead its greedy choice into a small group.
    pub fn translations(&self) -> Translations {
        let small = self.ranks <= OLD_SEARCH_RANKS;
        let (own, cut) = self.translations_as_numbered(OWN_WORK_LIMIT, small);
        if own.order() == self.ranks {
            return own;
        }
        // The backtracking search of a small fabric keeps the first of a few derangements
        // per image, and can close into a group that no further one extends (a 7-D
        // hypercube: 32 of its 128 translations); the refinement search may reach one
        // orbit. A larger group of several orbits is not taken: the packing under it is as
        // good, but its trees scheduled worse on 4 x ndv2 (16 of 32 instead of 8: 16.09 ->
        // 15.79 GB/s).
        if small {
            let (refined, _) = self.translations_as_numbered(OWN_WORK_LIMIT, false);
            if refined.order() == self.ranks {
                return refined;
            }
        }
        let canonical = super::canonical::canonical(self, None)
            .filter(|(_, to)| to.iter().enumerate().any(|(r, &t)| r != t));
        let Some((canonical, to)) = canonical else {
            return if cut {
                self.translations_as_numbered(WORK_LIMIT, small).0
            } else {
                own
            };
        };
        let (other, _) = canonical.translations_as_numbered(WORK_LIMIT, small);
        if other.order() <= own.order() {
            return own;
        }
        let mut back = vec![0u32; to.len()];
        for (r, &t) in to.iter().enumerate() {
            back[t] = r as u32;
        }
        Translations {
            elements: other
                .elements
                .iter()
                .map(|g| to.iter().map(|&t| back[g[t] as usize]).collect())
                .collect(),
        }
    }

    /// [`Topology::translations`] in the fabric's own numbering alone, the search within
    /// `limit` refinement work, and whether that limit cut the search short. `backtracking`: the
    /// backtracking derangement search and element-wise closure that fabrics of up to
    /// [`OLD_SEARCH_RANKS`] ranks use first, instead of the refinement search.
    fn translations_as_numbered(&self, limit: usize, backtracking: bool) -> (Translations, bool) {
        let n = self.ranks;
        let mut group = Translations::trivial(n);
        if n < 2 {
            return (group, false);
        }
        let shifts: Vec<Vec<usize>> = numbering_shifts(n)
            .into_iter()
            .filter(|p| self.is_automorphism(p))
            .collect();
        let mut generators: Vec<Vec<u32>> = Vec::new();
        let mut reached = vec![false; n];
        reached[0] = true;
        let mut matcher: Option<Matcher> = None;
        let mut old = None;
        for k in 1..n {
            if reached[k] {
                continue;
            }
            let mut bigger = None;
            let mut try_one = |candidate: &[usize]| {
                let mut with = generators.clone();
                with.push(candidate.iter().map(|&x| x as u32).collect());
                // Small fabrics list the elements as before (every element a generator):
                // schedules there follow the group's element order.
                let closure = if backtracking {
                    let mut all: Vec<Vec<u32>> = group.elements[1..].to_vec();
                    all.push(with[with.len() - 1].clone());
                    generated(&all, n)
                } else {
                    generated(&with, n)
                };
                match closure {
                    Some(g) => {
                        bigger = Some((g, with));
                        true
                    }
                    None => false,
                }
            };
            if shifts.iter().filter(|p| p[0] == k).any(|p| try_one(p)) {
            } else if backtracking {
                // Small fabrics keep the backtracking derangement search (whose groups the
                // tree schedules there were tuned on: mi250-16x2's staged trees).
                let finder =
                    old.get_or_insert_with(|| self.derangement_finder(CANDIDATES_PER_IMAGE));
                let _ = finder.mapping(0, k).iter().any(|p| try_one(p));
            } else {
                // The search runs only when no shift of the numbering fits.
                let m = matcher.get_or_insert_with(|| Matcher::new(self, limit));
                if m.spent() {
                    break;
                }
                m.offer(k, &group, &mut try_one);
            }
            if let Some((g, with)) = bigger {
                group = g;
                generators = with;
                for g in &group.elements {
                    reached[g[0] as usize] = true;
                }
            }
            if group.order() == n {
                break;
            }
        }
        let cut = matcher.is_some_and(|m| m.spent());
        (group, cut)
    }
}

#[cfg(test)]
mod shift_tests {
    use crate::topology::load;

    #[test]
    fn node_rotations_are_automorphisms() {
        let t = load("dgx-a100x2").unwrap();
        let rot: Vec<usize> = (0..16).map(|r| (r / 8) * 8 + (r % 8 + 1) % 8).collect();
        let shift: Vec<usize> = (0..16).map(|r| (r + 8) % 16).collect();
        assert!(t.is_automorphism(&shift));
        assert!(t.is_automorphism(&rot));
    }
}

#[cfg(test)]
pub(crate) mod subgroup_tests {
    use crate::topology::toml_format::{parse, Source};
    use crate::topology::Topology;

    /// Four 2x2x2 tori on rails, each NIC (25 GB/s, one capacity unit) shared by two GPUs.
    pub(crate) fn tori_sharing_nics() -> Topology {
        let src = Source {
            label: "shared.toml".into(),
            text: "[multinode]\nnode = \"torus-3d:2x2x2\"\nnodes = 4\nnetwork = \"rail\"\n\
                   nic_bandwidth = 25\nnics_per_node = 4\n",
            dir: None,
            stem: "shared".into(),
        };
        parse(&src, None, 0).unwrap().topology
    }

    #[test]
    fn a_nic_shared_by_two_gpus_narrows_the_group_to_elements_that_move_it() {
        let t = tori_sharing_nics();
        let group = t.translations();
        assert_eq!(group.order(), 32);
        let caps = t.index().capacities.clone().unwrap();
        assert!(caps.switches.iter().all(|&c| c == 1));
        // The element swapping the two GPUs of every NIC fixes each NIC's constraints.
        let n = t.ranks;
        let fixes_some = |g: &Vec<u32>| {
            let s = super::Translations {
                elements: vec![g.clone()],
            };
            t.switches.iter().any(|sw| s.fixing(sw, n)[0])
        };
        assert!(group.elements[1..].iter().any(fixes_some));
        let narrowed = group.within_switch_limits(&t, &caps.switches);
        assert_eq!(narrowed.order(), 16);
        assert!(narrowed.elements[1..].iter().all(|g| !fixes_some(g)));
        assert_eq!(narrowed.representatives().len(), 2);
        // Closed under products and acting freely: a group.
        for a in &narrowed.elements {
            for b in &narrowed.elements {
                let ab: Vec<u32> = b.iter().map(|&x| a[x as usize]).collect();
                assert!(narrowed.elements.contains(&ab));
            }
        }
        // Where every constraint holds two edges, the group stays whole.
        let two = vec![2; t.switches.len()];
        assert_eq!(group.within_switch_limits(&t, &two), group);
    }
}
