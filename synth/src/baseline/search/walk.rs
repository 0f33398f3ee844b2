//! The links one cycle search walks, and the residual units they draw on.

use super::{biconnected, Capacities};
use std::collections::HashMap;

/// Whether cycles are searched as undirected cycles kept with their reverse, or as directed
/// cycles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    Pairs,
    Directed,
}

/// The links one search walks: undirected edges (one use takes a unit of both arcs, for a
/// cycle and its reverse) or arcs.
pub(super) struct Walk {
    pub(super) mode: Mode,
    pub(super) vertices: usize,
    /// Endpoints of each link (`a → b` for an arc).
    pub(super) ends: Vec<(usize, usize)>,
    /// Resources (arcs, then pools) each use of a link takes, with the units it takes.
    pub(super) uses: Vec<Vec<(usize, i64)>>,
    /// Links leaving each vertex (undirected: every incident edge).
    pub(super) out: Vec<Vec<usize>>,
    /// Links entering each vertex (undirected: every incident edge).
    pub(super) inn: Vec<Vec<usize>>,
    /// Links touching each vertex in either direction.
    pub(super) touch: Vec<Vec<usize>>,
}

impl Walk {
    pub(super) fn new(caps: &Capacities, mode: Mode) -> Walk {
        let n = caps.vertices;
        let mut walk = Walk {
            mode,
            vertices: n,
            ends: Vec::new(),
            uses: Vec::new(),
            out: vec![Vec::new(); n],
            inn: vec![Vec::new(); n],
            touch: vec![Vec::new(); n],
        };
        let na = caps.arcs.len();
        let resources =
            |a: usize| std::iter::once(a).chain(caps.arcs[a].pools.iter().map(move |&p| na + p));
        match mode {
            Mode::Directed => {
                for (a, arc) in caps.arcs.iter().enumerate() {
                    let uses = merged(resources(a));
                    walk.push(arc.src, arc.dst, uses);
                }
            }
            Mode::Pairs => {
                let index: HashMap<(usize, usize), usize> = (caps.arcs.iter().enumerate())
                    .map(|(a, arc)| ((arc.src, arc.dst), a))
                    .collect();
                for (a, arc) in caps.arcs.iter().enumerate() {
                    if arc.src >= arc.dst {
                        continue;
                    }
                    if let Some(&b) = index.get(&(arc.dst, arc.src)) {
                        let uses = merged(resources(a).chain(resources(b)));
                        walk.push(arc.src, arc.dst, uses);
                    }
                }
            }
        }
        walk
    }

    pub(super) fn push(&mut self, a: usize, b: usize, uses: Vec<(usize, i64)>) {
        let l = self.ends.len();
        self.ends.push((a, b));
        self.uses.push(uses);
        self.out[a].push(l);
        self.inn[b].push(l);
        self.touch[a].push(l);
        self.touch[b].push(l);
        if self.mode == Mode::Pairs {
            self.out[b].push(l);
            self.inn[a].push(l);
        }
    }

    /// The end of link `l` that is not `v`.
    pub(super) fn other(&self, l: usize, v: usize) -> usize {
        let (a, b) = self.ends[l];
        if a == v {
            b
        } else {
            a
        }
    }

    /// Uses of link `l` the residual `left` still holds.
    pub(super) fn mult(&self, left: &[i64], l: usize) -> i64 {
        (self.uses[l].iter())
            .map(|&(r, k)| left[r] / k)
            .min()
            .unwrap_or(0)
            .max(0)
    }

    pub(super) fn take(&self, left: &mut [i64], l: usize, d: i64) {
        for &(r, k) in &self.uses[l] {
            left[r] -= k * d;
        }
    }

    /// Units of the links leaving (`out`) or entering `v` under `left`.
    pub(super) fn units(&self, left: &[i64], v: usize, out: bool) -> i64 {
        let links = if out { &self.out[v] } else { &self.inn[v] };
        links.iter().map(|&l| self.mult(left, l)).sum()
    }

    /// Cycles of this walk a vertex `v` can still be on (undirected: its degree over two).
    pub(super) fn room(&self, left: &[i64], v: usize) -> i64 {
        match self.mode {
            Mode::Pairs => self.units(left, v, true) / 2,
            Mode::Directed => self.units(left, v, true).min(self.units(left, v, false)),
        }
    }

    /// Whether the links with units left form a 2-connected graph (more than two vertices)
    /// or join both vertices (two).
    pub(super) fn biconnected(&self, left: &[i64]) -> bool {
        let n = self.vertices;
        let mut adj: Vec<Vec<usize>> = vec![Vec::new(); n];
        for (l, &(a, b)) in self.ends.iter().enumerate() {
            if self.mult(left, l) >= 1 && !adj[a].contains(&b) {
                adj[a].push(b);
                adj[b].push(a);
            }
        }
        if n <= 2 {
            return self.connected(left);
        }
        biconnected(&adj)
    }

    /// Whether every vertex is reached from vertex 0 over links with units left.
    pub(super) fn connected(&self, left: &[i64]) -> bool {
        let mut seen = vec![false; self.vertices];
        let mut stack = vec![0];
        seen[0] = true;
        let mut count = 1;
        while let Some(u) = stack.pop() {
            for &l in &self.touch[u] {
                let x = self.other(l, u);
                if !seen[x] && self.mult(left, l) >= 1 {
                    seen[x] = true;
                    count += 1;
                    stack.push(x);
                }
            }
        }
        count == self.vertices
    }
}

/// Resources with their multiplicity.
fn merged(resources: impl Iterator<Item = usize>) -> Vec<(usize, i64)> {
    let mut out: Vec<(usize, i64)> = Vec::new();
    for r in resources {
        match out.iter_mut().find(|x| x.0 == r) {
            Some(x) => x.1 += 1,
            None => out.push((r, 1)),
        }
    }
    out
}
