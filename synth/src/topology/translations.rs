//! A semiregular symmetry group of a topology: automorphisms no one of which (but the
//! identity) fixes a rank. On a torus these are the translations, on a multi-node fabric the
//! node rotations combined with rotations inside a node. Engines solve for one representative
//! rank per orbit and map the answer to the others, which loses nothing for convex problems
//! (averaging an optimum over the group gives a symmetric optimum).

use super::Topology;

/// Automorphisms with a given image of one rank that are tried per candidate.
const CANDIDATES_PER_IMAGE: usize = 16;

/// The largest group built (bounded by the number of ranks anyway).
const MAX_ORDER: usize = 1 << 16;

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

    /// The closure of `self` and `extra`, if it still acts freely (else `None`).
    fn extended(&self, extra: &[u32]) -> Option<Translations> {
        let n = extra.len();
        let identity: Vec<u32> = (0..n as u32).collect();
        let mut elements = vec![identity.clone()];
        let mut known: std::collections::HashSet<Vec<u32>> = [identity].into_iter().collect();
        let mut generators: Vec<&[u32]> =
            self.elements.iter().skip(1).map(|g| g.as_slice()).collect();
        generators.push(extra);
        let mut i = 0;
        while i < elements.len() {
            for g in &generators {
                let product: Vec<u32> = elements[i].iter().map(|&x| g[x as usize]).collect();
                if known.contains(&product) {
                    continue;
                }
                if product.iter().enumerate().any(|(r, &x)| x as usize == r)
                    || elements.len() >= n.min(MAX_ORDER)
                {
                    return None;
                }
                known.insert(product.clone());
                elements.push(product);
            }
            i += 1;
        }
        Some(Translations { elements })
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
    /// numbering first, then ones found by search) are tried, and the first whose closure
    /// with the group so far still fixes no rank is kept.
    pub fn translations(&self) -> Translations {
        let mut group = Translations::trivial(self.ranks);
        if self.ranks < 2 {
            return group;
        }
        let shifts: Vec<Vec<usize>> = numbering_shifts(self.ranks)
            .into_iter()
            .filter(|p| self.is_automorphism(p))
            .collect();
        let mut reached = vec![false; self.ranks];
        reached[0] = true;
        let mut finder = None;
        for k in 1..self.ranks {
            if reached[k] {
                continue;
            }
            let shifted = shifts.iter().filter(|p| p[0] == k).cloned();
            // The search runs only when no shift of the numbering fits (on a 1024-rank torus
            // each search costs seconds; the shifts are enough there).
            let searched = std::iter::once_with(|| {
                finder
                    .get_or_insert_with(|| self.derangement_finder(CANDIDATES_PER_IMAGE))
                    .mapping(0, k)
            })
            .flatten();
            for candidate in shifted.chain(searched) {
                let candidate: Vec<u32> = candidate.iter().map(|&x| x as u32).collect();
                if let Some(bigger) = group.extended(&candidate) {
                    group = bigger;
                    for g in &group.elements {
                        reached[g[0] as usize] = true;
                    }
                    break;
                }
            }
            if group.order() == self.ranks {
                break;
            }
        }
        group
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
