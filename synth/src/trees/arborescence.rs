//! Minimum-cost spanning arborescence (Chu–Liu/Edmonds): the cheapest set of edges that
//! reaches every vertex from a root, one edge entering each other vertex. The pricing step of
//! tree packing: with link prices from the packing LP, the cheapest tree is the one to add.

/// One directed edge with its cost.
#[derive(Debug, Clone, Copy)]
pub struct Edge {
    /// Tail vertex.
    pub from: usize,
    /// Head vertex.
    pub to: usize,
    /// Cost of using the edge.
    pub cost: f64,
}

/// The indices (into `edges`) of a minimum-cost arborescence rooted at `root` spanning all
/// `n` vertices, or `None` when some vertex cannot be reached from the root.
pub fn min_arborescence(n: usize, root: usize, edges: &[Edge]) -> Option<Vec<usize>> {
    let level: Vec<(usize, usize, f64)> = edges.iter().map(|e| (e.from, e.to, e.cost)).collect();
    solve(n, root, &level)
}

/// One contraction level: edges `(from, to, cost)`; returns indices into `edges`.
fn solve(n: usize, root: usize, edges: &[(usize, usize, f64)]) -> Option<Vec<usize>> {
    let best = cheapest_entering(n, root, edges)?;
    let parent = |v: usize| edges[best[v].expect("checked")].0;
    let (cycle_of, cycles) = cycles_of_chosen(n, root, parent);
    if cycles.is_empty() {
        return Some(
            (0..n)
                .filter(|&v| v != root)
                .map(|v| best[v].expect("checked"))
                .collect(),
        );
    }
    // Contract every cycle into one vertex, solve, and expand.
    let (component, count) = components(&cycle_of, cycles.len());
    let mut contracted = Vec::new();
    let mut origin = Vec::new();
    for (i, &(u, v, c)) in edges.iter().enumerate() {
        let (cu, cv) = (component[u], component[v]);
        if cu == cv {
            continue;
        }
        let cost = if cycle_of[v].is_some() {
            c - edges[best[v].expect("checked")].2
        } else {
            c
        };
        contracted.push((cu, cv, cost));
        origin.push(i);
    }
    let chosen = solve(count, component[root], &contracted)?;
    let mut result: Vec<usize> = chosen.iter().map(|&i| origin[i]).collect();
    // Each cycle keeps all its edges but the one into the vertex the chosen edge enters.
    for (id, members) in cycles.iter().enumerate() {
        let entered = result
            .iter()
            .map(|&i| edges[i].1)
            .find(|&v| cycle_of[v] == Some(id))
            .expect("every contracted vertex is entered");
        for &m in members {
            if m != entered {
                result.push(best[m].expect("checked"));
            }
        }
    }
    Some(result)
}

/// The cheapest edge entering each vertex but the root; `None` when a vertex has none.
fn cheapest_entering(
    n: usize,
    root: usize,
    edges: &[(usize, usize, f64)],
) -> Option<Vec<Option<usize>>> {
    let mut best: Vec<Option<usize>> = vec![None; n];
    for (i, &(u, v, c)) in edges.iter().enumerate() {
        if u != v && v != root && best[v].is_none_or(|b| c < edges[b].2) {
            best[v] = Some(i);
        }
    }
    (0..n)
        .all(|v| v == root || best[v].is_some())
        .then_some(best)
}

/// The cycles among the chosen edges (`parent` of each non-root vertex), found by walking
/// each vertex's chain of parents: each vertex's cycle id, and each cycle's members.
fn cycles_of_chosen(
    n: usize,
    root: usize,
    parent: impl Fn(usize) -> usize,
) -> (Vec<Option<usize>>, Vec<Vec<usize>>) {
    let mut cycle_of: Vec<Option<usize>> = vec![None; n];
    let mut mark: Vec<usize> = vec![usize::MAX; n];
    let mut cycles: Vec<Vec<usize>> = Vec::new();
    for start in 0..n {
        let mut v = start;
        while v != root && mark[v] == usize::MAX && cycle_of[v].is_none() {
            mark[v] = start;
            v = parent(v);
        }
        if v != root && mark[v] == start && cycle_of[v].is_none() {
            // Found a new cycle through v.
            let id = cycles.len();
            let mut members = vec![v];
            cycle_of[v] = Some(id);
            let mut u = parent(v);
            while u != v {
                cycle_of[u] = Some(id);
                members.push(u);
                u = parent(u);
            }
            cycles.push(members);
        }
    }
    (cycle_of, cycles)
}

/// The vertex of the contracted graph each vertex falls in (cycles first, by id, then every
/// other vertex on its own), and the contracted graph's vertex count.
fn components(cycle_of: &[Option<usize>], cycles: usize) -> (Vec<usize>, usize) {
    let mut count = cycles;
    let component = cycle_of
        .iter()
        .map(|c| match c {
            Some(c) => *c,
            None => {
                count += 1;
                count - 1
            }
        })
        .collect();
    (component, count)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(from: usize, to: usize, cost: f64) -> Edge {
        Edge { from, to, cost }
    }

    #[test]
    fn breaks_a_cycle_at_its_cheapest_entry() {
        // 1 and 2 prefer each other (cost 1); entering the pair costs 10 at 1, 5 at 2.
        let edges = [e(0, 1, 10.0), e(0, 2, 5.0), e(1, 2, 1.0), e(2, 1, 1.0)];
        let mut chosen = min_arborescence(3, 0, &edges).unwrap();
        chosen.sort();
        assert_eq!(chosen, vec![1, 3]);
    }

    #[test]
    fn unreachable_vertex() {
        assert!(min_arborescence(3, 0, &[e(0, 1, 1.0)]).is_none());
    }

    #[test]
    fn matches_brute_force_on_small_graphs() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for _ in 0..200 {
            let n = rng.gen_range(2..6);
            let mut edges = Vec::new();
            for u in 0..n {
                for v in 0..n {
                    if u != v && rng.gen_bool(0.7) {
                        edges.push(e(u, v, rng.gen_range(0..5) as f64));
                    }
                }
            }
            let fast = min_arborescence(n, 0, &edges);
            // Brute force: every choice of one entering edge per non-root vertex.
            let entering: Vec<Vec<usize>> = (1..n)
                .map(|v| (0..edges.len()).filter(|&i| edges[i].to == v).collect())
                .collect();
            let mut best: Option<f64> = None;
            let mut pick = vec![0usize; n - 1];
            'all: loop {
                if entering.iter().all(|c| !c.is_empty()) {
                    let parent = |v: usize| edges[entering[v - 1][pick[v - 1]]].from;
                    let reaches = (1..n).all(|v| {
                        let mut x = v;
                        for _ in 0..n {
                            if x == 0 {
                                return true;
                            }
                            x = parent(x);
                        }
                        x == 0
                    });
                    if reaches {
                        let cost: f64 = (1..n)
                            .map(|v| edges[entering[v - 1][pick[v - 1]]].cost)
                            .sum();
                        best = Some(best.map_or(cost, |b: f64| b.min(cost)));
                    }
                } else {
                    break;
                }
                for k in 0..n - 1 {
                    pick[k] += 1;
                    if pick[k] < entering[k].len() {
                        continue 'all;
                    }
                    pick[k] = 0;
                }
                break;
            }
            match (fast, best) {
                (Some(chosen), Some(b)) => {
                    let cost: f64 = chosen.iter().map(|&i| edges[i].cost).sum();
                    assert_eq!(chosen.len(), n - 1);
                    assert!((cost - b).abs() < 1e-9, "{cost} vs {b}");
                }
                (None, None) => {}
                (f, b) => panic!("disagree: {f:?} vs {b:?}"),
            }
        }
    }
}
