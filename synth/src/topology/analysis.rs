//! Structural checks and graph analysis: validation, the petgraph view, hop distances,
//! diameter, reachability and per-rank bandwidth.

use super::model::{Link, Topology};
use anyhow::{bail, Result};
use petgraph::graph::{DiGraph, NodeIndex};
use std::collections::{HashMap, HashSet, VecDeque};

impl Topology {
    /// Checks the model's invariants: at least one rank, `node_of` of length `ranks`, links
    /// between distinct in-range ranks with positive finite bandwidth and non-negative alpha,
    /// at most one link per ordered pair, and switch constraints with non-empty in-range rank
    /// lists, positive bandwidth and at least one link they govern.
    pub fn validate(&self) -> Result<()> {
        if self.ranks == 0 {
            bail!("topology '{}' has no ranks", self.name);
        }
        if self.node_of.len() != self.ranks {
            bail!(
                "node_of has {} entries but ranks = {}",
                self.node_of.len(),
                self.ranks
            );
        }
        let mut seen = HashSet::new();
        for (i, l) in self.links.iter().enumerate() {
            if l.src >= self.ranks || l.dst >= self.ranks {
                bail!(
                    "link {i} ({} -> {}): rank out of range (ranks = {})",
                    l.src,
                    l.dst,
                    self.ranks
                );
            }
            if l.src == l.dst {
                bail!("link {i}: self link {} -> {}", l.src, l.dst);
            }
            if !(l.bandwidth.is_finite() && l.bandwidth > 0.0) {
                bail!(
                    "link {i} ({} -> {}): non-positive bandwidth {}",
                    l.src,
                    l.dst,
                    l.bandwidth
                );
            }
            if !(l.alpha.is_finite() && l.alpha >= 0.0) {
                bail!(
                    "link {i} ({} -> {}): negative alpha {}",
                    l.src,
                    l.dst,
                    l.alpha
                );
            }
            if !seen.insert((l.src, l.dst)) {
                bail!("link {i}: duplicate link {} -> {}", l.src, l.dst);
            }
        }
        for s in &self.switches {
            if s.srcs.is_empty() || s.dsts.is_empty() {
                bail!("switch '{}': empty srcs or dsts", s.name);
            }
            if let Some(r) = s.srcs.iter().chain(&s.dsts).find(|&&r| r >= self.ranks) {
                bail!(
                    "switch '{}': rank {r} out of range (ranks = {})",
                    s.name,
                    self.ranks
                );
            }
            if !(s.bandwidth.is_finite() && s.bandwidth > 0.0) {
                bail!(
                    "switch '{}': non-positive bandwidth {}",
                    s.name,
                    s.bandwidth
                );
            }
            // Pair lookups, not a scan of every link: big fabrics have many switches.
            let covers_one = |&a: &usize| s.dsts.iter().any(|&b| seen.contains(&(a, b)));
            if !s.srcs.iter().any(covers_one) {
                bail!("switch '{}': covers no link", s.name);
            }
        }
        Ok(())
    }

    /// The links as a petgraph graph: node `i` (index `i`) is rank `i` and carries `i`; every
    /// edge carries its [`Link`].
    pub fn graph(&self) -> DiGraph<usize, Link> {
        let mut g = DiGraph::with_capacity(self.ranks, self.links.len());
        for r in 0..self.ranks {
            g.add_node(r);
        }
        for l in &self.links {
            g.add_edge(NodeIndex::new(l.src), NodeIndex::new(l.dst), l.clone());
        }
        g
    }

    /// Hop distances along directed links: `d[a][b]` is the fewest links from `a` to `b`
    /// (`Some(0)` on the diagonal), `None` when `b` is unreachable from `a`.
    pub fn distances(&self) -> Vec<Vec<Option<usize>>> {
        let mut adj = vec![Vec::new(); self.ranks];
        for l in &self.links {
            adj[l.src].push(l.dst);
        }
        (0..self.ranks)
            .map(|s| {
                let mut d = vec![None; self.ranks];
                d[s] = Some(0);
                let mut q = VecDeque::from([s]);
                while let Some(u) = q.pop_front() {
                    let du = d[u].expect("queued ranks have a distance");
                    for &v in &adj[u] {
                        if d[v].is_none() {
                            d[v] = Some(du + 1);
                            q.push_back(v);
                        }
                    }
                }
                d
            })
            .collect()
    }

    /// The largest hop distance between two ranks, or `None` if some rank cannot reach another.
    pub fn diameter(&self) -> Option<usize> {
        let d = self.distances();
        d.iter().flatten().try_fold(0, |m, x| x.map(|x| m.max(x)))
    }

    /// The ordered pairs `(a, b)` such that `b` cannot be reached from `a`.
    pub fn unreachable_pairs(&self) -> Vec<(usize, usize)> {
        let d = self.distances();
        let mut out = Vec::new();
        for (a, row) in d.iter().enumerate() {
            for (b, x) in row.iter().enumerate() {
                if x.is_none() {
                    out.push((a, b));
                }
            }
        }
        out
    }

    /// The most rank `r` can receive and send per second, `(in_gbps, out_gbps)`: the largest
    /// total over its links that respects every link bandwidth and every switch constraint
    /// on them (e.g. an NVSwitch port caps the sum over all its links). Exact when the
    /// constraints on a rank's links nest (all built-ins); otherwise constraints that cross
    /// others are dropped and the value is an upper bound.
    pub fn rank_bandwidth(&self, r: usize) -> (f64, f64) {
        (
            self.directional_bandwidth(r, false),
            self.directional_bandwidth(r, true),
        )
    }

    fn directional_bandwidth(&self, r: usize, out: bool) -> f64 {
        let mine: Vec<&Link> = self
            .links
            .iter()
            .filter(|l| if out { l.src == r } else { l.dst == r })
            .collect();
        // Candidate sets of link positions with their capacity: each link alone, and the
        // links each switch constraint governs.
        let mut caps: HashMap<Vec<usize>, f64> = HashMap::new();
        for (i, l) in mine.iter().enumerate() {
            caps.insert(vec![i], l.bandwidth);
        }
        for s in &self.switches {
            let set: Vec<usize> = (0..mine.len())
                .filter(|&i| s.covers(mine[i].src, mine[i].dst))
                .collect();
            if !set.is_empty() {
                let c = caps.entry(set).or_insert(f64::INFINITY);
                *c = c.min(s.bandwidth);
            }
        }
        let mut sets: Vec<(Vec<usize>, f64)> = caps.into_iter().collect();
        sets.sort_by(|a, b| a.0.len().cmp(&b.0.len()).then_with(|| a.0.cmp(&b.0)));
        // Bottom-up over the nesting forest: a set's value is min(its capacity, the sum of
        // the values of the maximal sets inside it).
        let mut root: Vec<usize> = vec![usize::MAX; mine.len()];
        let mut value: Vec<f64> = Vec::with_capacity(sets.len());
        let mut size: Vec<usize> = Vec::with_capacity(sets.len());
        for (id, (set, cap)) in sets.iter().enumerate() {
            let mut children: Vec<usize> = set.iter().map(|&e| root[e]).collect();
            children.sort_unstable();
            children.dedup();
            let nested = children
                .iter()
                .filter(|&&c| c != usize::MAX)
                .map(|&c| size[c])
                .sum::<usize>()
                + set.iter().filter(|&&e| root[e] == usize::MAX).count()
                == set.len();
            if !nested {
                value.push(0.0);
                size.push(0);
                continue;
            }
            let inner: f64 = children
                .iter()
                .filter(|&&c| c != usize::MAX)
                .map(|&c| value[c])
                .sum();
            value.push(if set.len() == 1 && root[set[0]] == usize::MAX {
                *cap
            } else {
                cap.min(inner)
            });
            size.push(set.len());
            for &e in set {
                root[e] = id;
            }
        }
        let mut tops: Vec<usize> = root.iter().copied().filter(|&c| c != usize::MAX).collect();
        tops.sort_unstable();
        tops.dedup();
        tops.iter().map(|&c| value[c]).sum()
    }
}

#[cfg(test)]
mod tests {
    use crate::topology::generators::{generate, GenSize};

    #[test]
    fn ring_distances() {
        let t = generate("ring", GenSize::Ranks(6), 1.0, 0.0).unwrap();
        assert_eq!(t.diameter(), Some(3));
        assert!(t.unreachable_pairs().is_empty());
        assert_eq!(t.graph().edge_count(), 12);
        assert_eq!(t.rank_bandwidth(0), (2.0, 2.0));
    }

    #[test]
    fn hub_caps_bandwidth() {
        let t = generate("shared-hub", GenSize::Ranks(4), 5.0, 0.0).unwrap();
        assert_eq!(t.rank_bandwidth(2), (5.0, 5.0));
        let t = generate("hub-and-spoke", GenSize::Ranks(4), 5.0, 0.0).unwrap();
        assert_eq!(t.rank_bandwidth(2), (5.0, 5.0));
        let line = generate("line", GenSize::Ranks(3), 1.0, 0.0).unwrap();
        assert_eq!(line.diameter(), Some(2));
    }
}
