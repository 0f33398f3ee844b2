//! The last two cycles of a pair walk at once, by switches on alternating 4-cycles (see
//! [`switch_pair`]).

use super::walk::{Mode, Walk};
use super::SWITCH_VERTICES_PER_NODE;
use rand::seq::SliceRandom;
use rand::SeedableRng;

/// Whether [`switch_pair`] applies to a pair walk under `left`: every vertex has exactly
/// four links of one unit each left (so the last two cycles use every one of them).
pub(super) fn switchable(walk: &Walk, left: &[i64]) -> bool {
    walk.mode == Mode::Pairs
        && walk.vertices >= 5
        && (0..walk.vertices).all(|v| {
            let m: Vec<i64> = walk.out[v].iter().map(|&l| walk.mult(left, l)).collect();
            m.iter().all(|&x| x <= 1) && m.iter().sum::<i64>() == 4
        })
}

/// The two cycles of one side (`true`: the first) of a split of a 4-regular graph into two
/// 2-factors: per vertex its cycle, its position on it, and each cycle's length.
struct Sides {
    comp: Vec<usize>,
    pos: Vec<usize>,
    len: Vec<usize>,
}

/// The cycles of the links with `in_a[l] == side` among `links[v]` (two per vertex).
fn side_cycles(walk: &Walk, links: &[Vec<usize>], in_a: &[bool], side: bool) -> Sides {
    let n = walk.vertices;
    let mut s = Sides {
        comp: vec![usize::MAX; n],
        pos: vec![0; n],
        len: Vec::new(),
    };
    for v0 in 0..n {
        if s.comp[v0] != usize::MAX {
            continue;
        }
        let c = s.len.len();
        let (mut prev, mut v, mut k) = (usize::MAX, v0, 0);
        while s.comp[v] == usize::MAX {
            s.comp[v] = c;
            s.pos[v] = k;
            k += 1;
            let next = (links[v].iter())
                .filter(|&&l| in_a[l] == side)
                .map(|&l| walk.other(l, v))
                .find(|&x| x != prev || k == 1);
            let Some(x) = next else { break };
            (prev, v) = (v, x);
        }
        s.len.push(k);
    }
    s
}

/// The vertices of one cycle of `sides` in order, from the vertex at position 0.
fn side_order(sides: &Sides, c: usize) -> Vec<usize> {
    let mut order = vec![0; sides.len[c]];
    for (v, (&comp, &p)) in sides.comp.iter().zip(&sides.pos).enumerate() {
        if comp == c {
            order[p] = v;
        }
    }
    order
}

/// Whether a cycle (positions `pos`, length `len`) stays one cycle when its links
/// `{x1, y1}` and `{x2, y2}` give way to `{y1, x2}` and `{y2, x1}`.
fn stays_one(
    pos: &[usize],
    len: usize,
    (x1, y1): (usize, usize),
    (x2, y2): (usize, usize),
) -> bool {
    let forward = |a: usize, b: usize| {
        if (pos[a] + 1) % len == pos[b] {
            (a, b)
        } else {
            (b, a)
        }
    };
    let ((p1, q1), (p2, q2)) = (forward(x1, y1), forward(x2, y2));
    // Removing both leaves the paths q1 .. p2 and q2 .. p1; a new link joining the two ends
    // of one path closes it on its own.
    let ends_of_one =
        |a: usize, b: usize| [(q1, p2), (p2, q1), (q2, p1), (p1, q2)].contains(&(a, b));
    !ends_of_one(y1, x2)
}

/// How a switch changes the number of cycles of one side whose links `{x1, y1}` and
/// `{x2, y2}` give way to `{y1, x2}` and `{y2, x1}`: -1 where they were on two cycles
/// (merged), 0 where their cycle stays one, +1 where it splits.
fn cycle_change(side: &Sides, (x1, y1): (usize, usize), (x2, y2): (usize, usize)) -> i32 {
    let c = side.comp[x1];
    if c != side.comp[x2] {
        -1
    } else if stays_one(&side.pos, side.len[c], (x1, y1), (x2, y2)) {
        0
    } else {
        1
    }
}

/// The switches of the split `in_a` that lower the number of cycles of both sides
/// together, and those that keep it:
/// alternating 4-cycles `a-b-c-d` (links `ab`, `cd` on the first side, `bc`, `da` on the
/// second), as their four links.
fn switches(
    walk: &Walk,
    links: &[Vec<usize>],
    in_a: &[bool],
    (a_side, b_side): (&Sides, &Sides),
) -> (Vec<[usize; 4]>, Vec<[usize; 4]>) {
    let (mut better, mut same) = (Vec::new(), Vec::new());
    let on = |v: usize, side: bool| links[v].iter().copied().filter(move |&l| in_a[l] == side);
    for a in 0..walk.vertices {
        for ab in on(a, true) {
            let b = walk.other(ab, a);
            for bc in on(b, false) {
                let c = walk.other(bc, b);
                for cd in on(c, true).filter(|&cd| ![a, b].contains(&walk.other(cd, c))) {
                    let d = walk.other(cd, c);
                    let Some(da) = on(d, false).find(|&l| walk.other(l, d) == a) else {
                        continue;
                    };
                    let change =
                        cycle_change(a_side, (a, b), (c, d)) + cycle_change(b_side, (b, c), (d, a));
                    match change {
                        ..0 => better.push([ab, bc, cd, da]),
                        0 => same.push([ab, bc, cd, da]),
                        _ => {}
                    }
                }
            }
        }
    }
    (better, same)
}

/// A split of the links `links` (every vertex has four) into two 2-factors: the links of an
/// Euler circuit (Hierholzer's algorithm), alternately; `None` where the links are not
/// connected.
fn euler_split(walk: &Walk, links: &[Vec<usize>]) -> Option<Vec<bool>> {
    let mut used = vec![false; walk.ends.len()];
    let mut next = vec![0usize; walk.vertices];
    let mut circuit = Vec::new();
    let mut stack: Vec<(usize, Option<usize>)> = vec![(0, None)];
    while let Some(&(v, via)) = stack.last() {
        while next[v] < links[v].len() && used[links[v][next[v]]] {
            next[v] += 1;
        }
        match links[v].get(next[v]) {
            Some(&l) => {
                used[l] = true;
                stack.push((walk.other(l, v), Some(l)));
            }
            None => {
                stack.pop();
                circuit.extend(via);
            }
        }
    }
    if circuit.len() != 2 * walk.vertices {
        return None;
    }
    let mut in_a = vec![false; walk.ends.len()];
    for (i, &l) in circuit.iter().enumerate() {
        in_a[l] = i % 2 == 0;
    }
    Some(in_a)
}

/// The last two cycles of a pair walk at once, where every vertex has four links of one
/// unit left ([`switchable`]): a split of those links into two 2-factors A and B
/// ([`euler_split`]), then switches on alternating 4-cycles (A's links of the 4-cycle go to
/// B and B's to A), each a seeded random one among those that lower the number of cycles
/// of A and B together (or, where none does, among those that keep it), until both are one
/// cycle. A switch looks at every vertex and counts as `vertices / 32` nodes of `budget`
/// ([`SWITCH_VERTICES_PER_NODE`]). Both cycles and the residual they leave.
pub(super) fn switch_pair(
    walk: &Walk,
    left: &[i64],
    seed: u64,
    budget: &mut usize,
) -> Option<(Vec<Vec<usize>>, Vec<i64>)> {
    let n = walk.vertices;
    let links: Vec<Vec<usize>> = (0..n)
        .map(|v| {
            (walk.out[v].iter().copied())
                .filter(|&l| walk.mult(left, l) >= 1)
                .collect()
        })
        .collect();
    let mut in_a = euler_split(walk, &links)?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    loop {
        let (a_side, b_side) = (
            side_cycles(walk, &links, &in_a, true),
            side_cycles(walk, &links, &in_a, false),
        );
        if a_side.len.len() == 1 && b_side.len.len() == 1 {
            let pair = vec![side_order(&a_side, 0), side_order(&b_side, 0)];
            let mut rest = left.to_vec();
            for (v, ls) in links.iter().enumerate() {
                for &l in ls.iter().filter(|&&l| walk.ends[l].0 == v) {
                    walk.take(&mut rest, l, 1);
                }
            }
            return Some((pair, rest));
        }
        let cost = (n / SWITCH_VERTICES_PER_NODE).max(1);
        if *budget < cost {
            return None;
        }
        *budget -= cost;
        let (better, same) = switches(walk, &links, &in_a, (&a_side, &b_side));
        let moves = if better.is_empty() { same } else { better };
        let &[ab, bc, cd, da] = moves.choose(&mut rng)?;
        (in_a[ab], in_a[cd], in_a[bc], in_a[da]) = (false, false, true, true);
    }
}
