//! Topology automorphisms: permutations of the ranks that map every link to a link of equal
//! bandwidth and alpha (and every non-link to a non-link) and every switch constraint to a
//! switch constraint of equal bandwidth. Used for symmetry breaking in the solvers.
//!
//! Found by backtracking over ranks in breadth-first order; a rank's candidate images must
//! share its signature (its in/out link bandwidths and its switch memberships), every new
//! pair is checked against the ranks already placed, and a switch constraint is checked as
//! soon as all its ranks are placed.

use super::model::Topology;
use std::collections::{HashMap, HashSet, VecDeque};

/// Search steps after which the enumeration gives up (the count is then not exact).
const STEP_BUDGET: u64 = 20_000_000;

/// A bandwidth or latency compared up to 1e-9 relative precision.
fn key(x: f64) -> i64 {
    (x * 1e6).round() as i64
}

struct Search {
    n: usize,
    link: HashMap<(usize, usize), (i64, i64)>,
    order: Vec<usize>,
    candidates: Vec<Vec<usize>>,
    /// Switch constraints to check once the rank at position `i` of `order` is placed.
    due: Vec<Vec<usize>>,
    switch_sets: Vec<(Vec<usize>, Vec<usize>, i64)>,
    targets: HashSet<(Vec<usize>, Vec<usize>, i64)>,
    perm: Vec<usize>,
    used: Vec<bool>,
    found: Vec<Vec<usize>>,
    limit: usize,
    steps: u64,
    gave_up: bool,
}

impl Search {
    fn consistent(&self, pos: usize, v: usize, img: usize) -> bool {
        for &u in &self.order[..pos] {
            let pu = self.perm[u];
            if self.link.get(&(u, v)) != self.link.get(&(pu, img))
                || self.link.get(&(v, u)) != self.link.get(&(img, pu))
            {
                return false;
            }
        }
        true
    }

    fn switches_ok(&self, pos: usize) -> bool {
        self.due[pos].iter().all(|&s| {
            let (srcs, dsts, bw) = &self.switch_sets[s];
            let mut a: Vec<usize> = srcs.iter().map(|&r| self.perm[r]).collect();
            let mut b: Vec<usize> = dsts.iter().map(|&r| self.perm[r]).collect();
            a.sort_unstable();
            b.sort_unstable();
            self.targets.contains(&(a, b, *bw))
        })
    }

    fn run(&mut self, pos: usize) {
        if self.found.len() >= self.limit || self.gave_up {
            return;
        }
        if pos == self.n {
            self.found.push(self.perm.clone());
            return;
        }
        let v = self.order[pos];
        for ci in 0..self.candidates[v].len() {
            let img = self.candidates[v][ci];
            self.steps += 1;
            if self.steps > STEP_BUDGET {
                self.gave_up = true;
                return;
            }
            if self.used[img] || !self.consistent(pos, v, img) {
                continue;
            }
            self.perm[v] = img;
            self.used[img] = true;
            if self.switches_ok(pos) {
                self.run(pos + 1);
            }
            self.used[img] = false;
            if self.found.len() >= self.limit || self.gave_up {
                return;
            }
        }
    }
}

impl Topology {
    /// Up to `limit` automorphisms, each as `perm` with rank `r` mapped to `perm[r]`; the
    /// identity comes first.
    pub fn automorphisms(&self, limit: usize) -> Vec<Vec<usize>> {
        self.search_automorphisms(limit).0
    }

    /// The number of automorphisms, capped at `limit`, and whether the count is exact (false
    /// when the cap or the search budget was hit).
    pub fn automorphism_count(&self, limit: usize) -> (usize, bool) {
        let (found, complete) = self.search_automorphisms(limit.saturating_add(1));
        if found.len() > limit {
            (limit, false)
        } else {
            (found.len(), complete)
        }
    }

    fn search_automorphisms(&self, limit: usize) -> (Vec<Vec<usize>>, bool) {
        let n = self.ranks;
        if limit == 0 || n == 0 {
            return (Vec::new(), limit != 0);
        }
        let link: HashMap<(usize, usize), (i64, i64)> = self
            .links
            .iter()
            .map(|l| ((l.src, l.dst), (key(l.bandwidth), key(l.alpha))))
            .collect();
        let switch_sets: Vec<(Vec<usize>, Vec<usize>, i64)> = self
            .switches
            .iter()
            .map(|s| {
                let mut a = s.srcs.clone();
                let mut b = s.dsts.clone();
                a.sort_unstable();
                a.dedup();
                b.sort_unstable();
                b.dedup();
                (a, b, key(s.bandwidth))
            })
            .collect();
        // Signature: sorted out-links, sorted in-links, sorted switch memberships.
        type Sig = (Vec<(i64, i64)>, Vec<(i64, i64)>, Vec<(i64, bool, bool, usize, usize)>);
        let mut sig: Vec<Sig> = vec![Default::default(); n];
        for l in &self.links {
            sig[l.src].0.push(link[&(l.src, l.dst)]);
            sig[l.dst].1.push(link[&(l.src, l.dst)]);
        }
        for (a, b, bw) in &switch_sets {
            for r in 0..n {
                let (is_s, is_d) = (a.binary_search(&r).is_ok(), b.binary_search(&r).is_ok());
                if is_s || is_d {
                    sig[r].2.push((*bw, is_s, is_d, a.len(), b.len()));
                }
            }
        }
        for s in &mut sig {
            s.0.sort_unstable();
            s.1.sort_unstable();
            s.2.sort_unstable();
        }
        // Identity first: candidates start with the rank itself.
        let candidates: Vec<Vec<usize>> = (0..n)
            .map(|v| {
                std::iter::once(v)
                    .chain((0..n).filter(|&w| w != v && sig[w] == sig[v]))
                    .collect()
            })
            .collect();
        // Breadth-first placement order over the undirected link graph.
        let mut adj = vec![Vec::new(); n];
        for l in &self.links {
            adj[l.src].push(l.dst);
            adj[l.dst].push(l.src);
        }
        let mut order = Vec::with_capacity(n);
        let mut seen = vec![false; n];
        for start in 0..n {
            if seen[start] {
                continue;
            }
            seen[start] = true;
            let mut q = VecDeque::from([start]);
            while let Some(u) = q.pop_front() {
                order.push(u);
                for &v in &adj[u] {
                    if !seen[v] {
                        seen[v] = true;
                        q.push_back(v);
                    }
                }
            }
        }
        let mut position = vec![0; n];
        for (i, &r) in order.iter().enumerate() {
            position[r] = i;
        }
        let mut due = vec![Vec::new(); n];
        for (s, (a, b, _)) in switch_sets.iter().enumerate() {
            let last = a.iter().chain(b).map(|&r| position[r]).max().unwrap_or(0);
            due[last].push(s);
        }
        let targets = switch_sets.iter().cloned().collect();
        let mut search = Search {
            n,
            link,
            order,
            candidates,
            due,
            switch_sets,
            targets,
            perm: vec![usize::MAX; n],
            used: vec![false; n],
            found: Vec::new(),
            limit,
            steps: 0,
            gave_up: false,
        };
        search.run(0);
        let complete = !search.gave_up && search.found.len() < limit;
        (search.found, complete)
    }
}

#[cfg(test)]
mod tests {
    use crate::topology::generators::{generate, GenSize};

    #[test]
    fn small_families() {
        let ring = generate("ring", GenSize::Ranks(8), 1.0, 0.0).unwrap();
        assert_eq!(ring.automorphism_count(1000), (16, true));
        assert_eq!(ring.automorphisms(3).len(), 3);
        assert_eq!(ring.automorphisms(1)[0], (0..8).collect::<Vec<_>>());
        let line = generate("line", GenSize::Ranks(5), 1.0, 0.0).unwrap();
        assert_eq!(line.automorphism_count(100), (2, true));
        let star = generate("star", GenSize::Ranks(5), 1.0, 0.0).unwrap();
        assert_eq!(star.automorphism_count(100), (24, true));
        let torus = generate("torus-2d", GenSize::Grid(4, 4), 1.0, 0.0).unwrap();
        assert_eq!(torus.automorphism_count(10_000), (384, true));
        assert_eq!(ring.automorphism_count(10), (10, false));
    }
}
