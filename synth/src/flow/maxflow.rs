//! Exact integer maximum flow (Dinic's algorithm) with the minimum cut's source side.
//!
//! Capacities are `i128`, so the bandwidth optimum can be computed with exact rational
//! arithmetic: every capacity is scaled to an integer before a flow is pushed.

use std::collections::VecDeque;

/// A directed flow network with integer capacities; each edge has a paired residual edge.
#[derive(Debug, Clone)]
pub struct MaxFlow {
    /// Target vertex of edge `e` (edge `e ^ 1` is its residual twin).
    to: Vec<usize>,
    /// Remaining capacity of edge `e`.
    residual: Vec<i128>,
    /// Original capacity of edge `e` (0 for residual twins).
    capacity: Vec<i128>,
    /// Edges leaving each vertex.
    adjacency: Vec<Vec<usize>>,
}

impl MaxFlow {
    /// An empty network on `vertices` vertices.
    pub fn new(vertices: usize) -> MaxFlow {
        MaxFlow {
            to: Vec::new(),
            residual: Vec::new(),
            capacity: Vec::new(),
            adjacency: vec![Vec::new(); vertices],
        }
    }

    /// Number of vertices.
    pub fn vertices(&self) -> usize {
        self.adjacency.len()
    }

    /// Adds the edge `from -> to` with `capacity` (≥ 0); returns its id.
    pub fn add_edge(&mut self, from: usize, to: usize, capacity: i128) -> usize {
        let id = self.to.len();
        self.to.extend([to, from]);
        self.residual.extend([capacity, 0]);
        self.capacity.extend([capacity, 0]);
        self.adjacency[from].push(id);
        self.adjacency[to].push(id + 1);
        id
    }

    /// Sets the capacity of edge `id` (and forgets any flow on the whole network).
    pub fn set_capacity(&mut self, id: usize, capacity: i128) {
        self.capacity[id] = capacity;
    }

    /// Forgets every flow: residual capacities become the capacities again.
    pub fn reset(&mut self) {
        self.residual.copy_from_slice(&self.capacity);
    }

    /// Pushes flow from `s` to `t` until the maximum or `limit` is reached (the network is
    /// reset first); returns the flow value, at most `limit`.
    pub fn max_flow(&mut self, s: usize, t: usize, limit: i128) -> i128 {
        self.reset();
        let n = self.vertices();
        let mut total = 0i128;
        let mut level = vec![usize::MAX; n];
        let mut next = vec![0usize; n];
        while total < limit {
            level.fill(usize::MAX);
            level[s] = 0;
            let mut queue = VecDeque::from([s]);
            while let Some(u) = queue.pop_front() {
                for &e in &self.adjacency[u] {
                    let v = self.to[e];
                    if self.residual[e] > 0 && level[v] == usize::MAX {
                        level[v] = level[u] + 1;
                        queue.push_back(v);
                    }
                }
            }
            if level[t] == usize::MAX {
                break;
            }
            next.fill(0);
            loop {
                let pushed = self.augment(s, t, limit - total, &level, &mut next);
                if pushed == 0 {
                    break;
                }
                total += pushed;
                if total >= limit {
                    break;
                }
            }
        }
        total
    }

    /// One blocking-flow augmentation along level-increasing edges (iterative DFS).
    fn augment(
        &mut self,
        s: usize,
        t: usize,
        want: i128,
        level: &[usize],
        next: &mut [usize],
    ) -> i128 {
        let mut path: Vec<usize> = Vec::new();
        let mut u = s;
        loop {
            if u == t {
                let pushed = path
                    .iter()
                    .map(|&e| self.residual[e])
                    .min()
                    .unwrap_or(0)
                    .min(want);
                for &e in &path {
                    self.residual[e] -= pushed;
                    self.residual[e ^ 1] += pushed;
                }
                return pushed;
            }
            let mut advanced = false;
            while next[u] < self.adjacency[u].len() {
                let e = self.adjacency[u][next[u]];
                let v = self.to[e];
                if self.residual[e] > 0 && level[v] == level[u] + 1 {
                    path.push(e);
                    u = v;
                    advanced = true;
                    break;
                }
                next[u] += 1;
            }
            if !advanced {
                // Dead end: retreat and never try this vertex's exhausted edge again.
                let Some(e) = path.pop() else {
                    return 0;
                };
                u = self.to[e ^ 1];
                next[u] += 1;
            }
        }
    }

    /// After [`MaxFlow::max_flow`]: the vertices reachable from `s` in the residual network
    /// (the source side of a minimum cut when the flow was not cut short by its limit).
    pub fn source_side(&self, s: usize) -> Vec<bool> {
        let mut seen = vec![false; self.vertices()];
        seen[s] = true;
        let mut queue = VecDeque::from([s]);
        while let Some(u) = queue.pop_front() {
            for &e in &self.adjacency[u] {
                let v = self.to[e];
                if self.residual[e] > 0 && !seen[v] {
                    seen[v] = true;
                    queue.push_back(v);
                }
            }
        }
        seen
    }

    /// The edges `(from, to, capacity)` of the network (residual twins excluded).
    pub fn edges(&self) -> impl Iterator<Item = (usize, usize, i128)> + '_ {
        (0..self.to.len())
            .step_by(2)
            .map(|e| (self.to[e ^ 1], self.to[e], self.capacity[e]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classic_network() {
        // CLRS figure 26.1: maximum flow 23.
        let mut f = MaxFlow::new(6);
        for (a, b, c) in [
            (0, 1, 16),
            (0, 2, 13),
            (2, 1, 4),
            (1, 3, 12),
            (3, 2, 9),
            (2, 4, 14),
            (4, 3, 7),
            (3, 5, 20),
            (4, 5, 4),
        ] {
            f.add_edge(a, b, c);
        }
        assert_eq!(f.max_flow(0, 5, i128::MAX), 23);
        let side = f.source_side(0);
        let cut: i128 = f
            .edges()
            .filter(|&(a, b, _)| side[a] && !side[b])
            .map(|e| e.2)
            .sum();
        assert_eq!(cut, 23);
        assert_eq!(f.max_flow(0, 5, 10), 10);
    }

    #[test]
    fn unreachable_sink() {
        let mut f = MaxFlow::new(3);
        f.add_edge(0, 1, 5);
        assert_eq!(f.max_flow(0, 2, i128::MAX), 0);
    }
}
