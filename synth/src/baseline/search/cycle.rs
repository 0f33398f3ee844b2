//! One depth-first search for a Hamiltonian cycle under a residual (see the [module
//! docs](super)).

use super::root;
use super::walk::{Mode, Walk};
use std::collections::VecDeque;

/// One change to [`Forced`], for undoing it.
enum Undo {
    End(usize, usize),
    Size(usize, usize),
    Degree(usize),
    Count(usize),
    Closed,
}

/// The links forced into the last cycle, as paths (each endpoint knows the other end and
/// the path's size), with an undo log.
struct Forced {
    end: Vec<usize>,
    size: Vec<usize>,
    degree: Vec<u8>,
    /// Per link, the vertices that forced it.
    count: Vec<u8>,
    closed: bool,
    log: Vec<Undo>,
}

impl Forced {
    fn new(vertices: usize, links: usize) -> Forced {
        Forced {
            end: (0..vertices).collect(),
            size: vec![1; vertices],
            degree: vec![0; vertices],
            count: vec![0; links],
            closed: false,
            log: Vec::new(),
        }
    }

    fn undo_to(&mut self, mark: usize) {
        while self.log.len() > mark {
            match self.log.pop() {
                Some(Undo::End(i, old)) => self.end[i] = old,
                Some(Undo::Size(i, old)) => self.size[i] = old,
                Some(Undo::Degree(i)) => self.degree[i] -= 1,
                Some(Undo::Count(l)) => self.count[l] -= 1,
                Some(Undo::Closed) => self.closed = false,
                None => {}
            }
        }
    }

    /// Forces link `l` between `a` and `b`; false where the forced links then cannot be
    /// part of one Hamiltonian cycle over `n` vertices.
    fn add(&mut self, l: usize, a: usize, b: usize, n: usize) -> bool {
        self.count[l] += 1;
        self.log.push(Undo::Count(l));
        if self.count[l] > 1 {
            return true;
        }
        if self.closed || self.degree[a] >= 2 || self.degree[b] >= 2 {
            return false;
        }
        let (ea, eb) = (self.end[a], self.end[b]);
        for v in [a, b] {
            self.degree[v] += 1;
            self.log.push(Undo::Degree(v));
        }
        if ea == b {
            let whole = self.size[a] == n;
            if whole {
                self.closed = true;
                self.log.push(Undo::Closed);
            }
            return whole;
        }
        let size = self.size[a] + self.size[b];
        for (i, v) in [(ea, eb), (eb, ea)] {
            self.log.push(Undo::End(i, self.end[i]));
            self.end[i] = v;
            self.log.push(Undo::Size(i, self.size[i]));
            self.size[i] = size;
        }
        true
    }
}

/// Scratch space of the interleaved connectivity search ([`CycleSearch::splits`]).
struct SplitScratch {
    stamp: Vec<u32>,
    group: Vec<usize>,
    now: u32,
}

/// How one cycle search ended.
pub(super) enum Outcome {
    Found(Vec<usize>),
    /// Every branch was searched: no cycle fits what the search requires.
    Exhausted,
    /// The node budget ran out first.
    OutOfBudget,
}

/// One depth-first search for a Hamiltonian cycle of a [`Walk`] under a residual.
pub(super) struct CycleSearch<'a> {
    walk: &'a Walk,
    /// The residual units of every resource (arcs, then pools).
    pub(super) left: Vec<i64>,
    prio: &'a [u64],
    /// Cycles that must still fit after this one.
    need_after: usize,
    /// Per vertex: whether its links left after this cycle are forced into the last one
    /// (out-links and in-links separately; the same for undirected edges).
    tight: Vec<(bool, bool)>,
    all_tight: bool,
    visited: Vec<bool>,
    unvisited: usize,
    pub(super) path: Vec<usize>,
    /// `links[i]` joins `path[i]` and `path[i + 1]`.
    links: Vec<usize>,
    forced: Forced,
    scratch: SplitScratch,
    /// The DFS stack: per path vertex its candidate links, the next one to try and the
    /// [`Forced`] log mark to undo to when leaving it.
    stack: Vec<(Vec<usize>, usize, usize)>,
    /// Where the search stands.
    state: State,
}

/// Where a [`CycleSearch`] stands between calls of [`CycleSearch::resume`].
enum State {
    Fresh,
    Searching,
    /// A cycle was found: its closing link and the log marks before closing it and before
    /// the last move.
    Found {
        closing: usize,
        close_mark: usize,
        move_mark: usize,
    },
    Done,
}

impl<'a> CycleSearch<'a> {
    /// A search for a cycle of `walk` under the residual `left` that leaves room for
    /// `need_after` more.
    pub(super) fn new(walk: &'a Walk, left: Vec<i64>, prio: &'a [u64], need_after: usize) -> Self {
        let n = walk.vertices;
        let tight: Vec<(bool, bool)> = (0..n)
            .map(|v| match walk.mode {
                _ if need_after != 1 => (false, false),
                Mode::Pairs => {
                    let t = walk.units(&left, v, true) == 4;
                    (t, t)
                }
                Mode::Directed => (
                    walk.units(&left, v, true) == 2,
                    walk.units(&left, v, false) == 2,
                ),
            })
            .collect();
        let all_tight = need_after == 1 && tight.iter().all(|t| t.0 && t.1);
        CycleSearch {
            walk,
            left,
            prio,
            need_after,
            tight,
            all_tight,
            visited: vec![false; n],
            unvisited: n,
            path: Vec::with_capacity(n),
            links: Vec::with_capacity(n),
            forced: Forced::new(n, walk.ends.len()),
            scratch: SplitScratch {
                stamp: vec![0; n],
                group: vec![0; n],
                now: 0,
            },
            stack: Vec::new(),
            state: State::Fresh,
        }
    }

    fn usable(&self, l: usize) -> bool {
        let m = self.walk.mult(&self.left, l);
        m >= 2 || (m == 1 && self.forced.count[l] == 0)
    }

    /// Whether `x` is in what the rest of the path must cover: unvisited, the path's end or
    /// its start.
    fn open(&self, x: usize) -> bool {
        !self.visited[x] || Some(&x) == self.path.last() || x == self.path[0]
    }

    /// Whether unvisited `u` can no longer be placed on the cycle.
    fn stuck(&self, u: usize) -> bool {
        let walk = self.walk;
        let (end, start) = (*self.path.last().expect("a path"), self.path[0]);
        let count = |links: &[usize], ok: &dyn Fn(usize) -> bool| {
            (links.iter())
                .filter(|&&l| ok(walk.other(l, u)) && self.usable(l))
                .take(2)
                .count()
        };
        match walk.mode {
            Mode::Pairs => count(&walk.out[u], &|x| self.open(x)) < 2,
            Mode::Directed => {
                count(&walk.inn[u], &|x| !self.visited[x] || x == end) == 0
                    || count(&walk.out[u], &|x| !self.visited[x] || x == start) == 0
            }
        }
    }

    /// Whether unvisited `w` can only be reached from the path's end `v`.
    fn must_follow(&self, w: usize, v: usize) -> bool {
        let walk = self.walk;
        let pairs = walk.mode == Mode::Pairs;
        let ways = (walk.inn[w].iter())
            .filter(|&&l| {
                let x = walk.other(l, w);
                self.usable(l) && (x == v || !self.visited[x] || (pairs && self.open(x)))
            })
            .count();
        match walk.mode {
            Mode::Pairs => ways <= 2,
            Mode::Directed => ways <= 1,
        }
    }

    /// The links to try from the path's end `v`, best first (see the module docs); none
    /// where two unvisited vertices must both follow `v`.
    fn candidates(&self, v: usize) -> Vec<usize> {
        let walk = self.walk;
        let mut c: Vec<(usize, i64, u64, bool, usize)> = Vec::new();
        for &l in &walk.out[v] {
            let w = walk.other(l, v);
            if self.visited[w] || !self.usable(l) {
                continue;
            }
            let exits = (walk.out[w].iter())
                .filter(|&&g| {
                    let x = walk.other(g, w);
                    !self.visited[x] && x != w && self.usable(g)
                })
                .count();
            let spare = -walk.mult(&self.left, l);
            c.push((exits, spare, self.prio[w], !self.must_follow(w, v), l));
        }
        c.sort_unstable_by_key(|x| (x.3, x.0, x.1, x.2));
        let forced = c.iter().filter(|x| !x.3).count();
        let slots = if walk.mode == Mode::Pairs && self.path.len() == 1 {
            2
        } else {
            1
        };
        if forced > slots && self.unvisited > 1 {
            return Vec::new();
        }
        if forced > 0 {
            c.truncate(1);
        }
        c.into_iter().map(|x| x.4).collect()
    }

    /// Forces the links vertex `v` has left after its cycle links into the last cycle
    /// where `v` is tight; false on a contradiction.
    fn force(&mut self, v: usize) -> bool {
        let walk = self.walk;
        let n = walk.vertices;
        let (out_tight, in_tight) = self.tight[v];
        let sides: [(bool, &Vec<usize>); 2] = match walk.mode {
            Mode::Pairs => [(out_tight, &walk.out[v]), (false, &walk.inn[v])],
            Mode::Directed => [(out_tight, &walk.out[v]), (in_tight, &walk.inn[v])],
        };
        for (tight, links) in sides {
            if !tight {
                continue;
            }
            for &l in links {
                let m = walk.mult(&self.left, l);
                let (a, b) = walk.ends[l];
                if m >= 2 || (m == 1 && !self.forced.add(l, a, b, n)) {
                    return false;
                }
            }
        }
        true
    }

    /// Moves the path's end to `w` over link `l`; false (with the move still applied)
    /// where the branch is dead.
    fn advance(&mut self, l: usize, w: usize) -> bool {
        let last = *self.path.last().expect("a path");
        self.walk.take(&mut self.left, l, 1);
        self.visited[w] = true;
        self.unvisited -= 1;
        self.path.push(w);
        self.links.push(l);
        if self.path.len() > 2 && !self.force(last) {
            return false;
        }
        if self.unvisited == 0 {
            return true;
        }
        let walk = self.walk;
        // An unvisited neighbour of `last` lost a way in or out; in a directed walk, one of
        // `w` lost `w` as a way out.
        let directed = walk.mode == Mode::Directed;
        let near = walk.touch[last].iter().map(|&g| walk.other(g, last));
        let near_w = (walk.touch[w].iter().filter(|_| directed)).map(|&g| walk.other(g, w));
        for u in near.chain(near_w) {
            if !self.visited[u] && self.stuck(u) {
                return false;
            }
        }
        !self.splits(last)
    }

    /// Undoes the last [`CycleSearch::advance`].
    fn retreat(&mut self, mark: usize) {
        let (Some(w), Some(l)) = (self.path.pop(), self.links.pop()) else {
            return;
        };
        self.walk.take(&mut self.left, l, -1);
        self.visited[w] = false;
        self.unvisited += 1;
        self.forced.undo_to(mark);
    }

    /// Closes the full path into a cycle if the link back to its start fits and what the
    /// cycle leaves can hold the cycles still to come; the closing link (which stays
    /// taken) and the log mark before it.
    fn close(&mut self) -> Option<(usize, usize)> {
        let walk = self.walk;
        let (w, start) = (*self.path.last().expect("a path"), self.path[0]);
        let g =
            (walk.out[w].iter().copied()).find(|&g| walk.other(g, w) == start && self.usable(g))?;
        let mark = self.forced.log.len();
        walk.take(&mut self.left, g, 1);
        let n = walk.vertices;
        // Two vertices: the cycle's two arcs are the only ones, nothing to force.
        let forced = n < 3
            || (self.force(w) && self.force(start) && (!self.all_tight || self.forced.closed));
        let ok = forced && self.leaves_room();
        if !ok {
            walk.take(&mut self.left, g, -1);
            self.forced.undo_to(mark);
            return None;
        }
        Some((g, mark))
    }

    /// Whether the residual can still hold `need_after` cycles: room at every vertex and a
    /// connected fabric.
    fn leaves_room(&self) -> bool {
        let walk = self.walk;
        let need = self.need_after as i64;
        need == 0
            || ((0..walk.vertices).all(|v| walk.room(&self.left, v) >= need)
                && walk.biconnected(&self.left))
    }

    /// Whether removing `last` (now inside the path) disconnects what the path must still
    /// cover: a search from each of `last`'s neighbours there at once, merging where they
    /// meet, until one group runs out (split) or all have met.
    fn splits(&mut self, last: usize) -> bool {
        let walk = self.walk;
        let end = *self.path.last().expect("a path");
        if last == self.path[0] {
            return false;
        }
        let mut seeds = vec![end];
        for &l in &walk.touch[last] {
            let u = walk.other(l, last);
            if self.open(u) && !seeds.contains(&u) && self.usable(l) {
                seeds.push(u);
            }
        }
        if seeds.len() < 2 {
            return false;
        }
        self.scratch.now += 1;
        let now = self.scratch.now;
        let k = seeds.len();
        let mut parent: Vec<usize> = (0..k).collect();
        let mut queues: Vec<VecDeque<usize>> = Vec::with_capacity(k);
        for (g, &u) in seeds.iter().enumerate() {
            self.scratch.stamp[u] = now;
            self.scratch.group[u] = g;
            queues.push(VecDeque::from([u]));
        }
        let mut classes = k;
        loop {
            if exhausted_class(&mut parent, &queues) {
                return true;
            }
            for (g, queue) in queues.iter_mut().enumerate() {
                let Some(x) = queue.pop_front() else {
                    continue;
                };
                for &l in &walk.touch[x] {
                    let y = walk.other(l, x);
                    if y == last || !self.open(y) || !self.usable(l) {
                        continue;
                    }
                    if self.scratch.stamp[y] != now {
                        self.scratch.stamp[y] = now;
                        self.scratch.group[y] = g;
                        queue.push_back(y);
                        continue;
                    }
                    let (a, b) = (
                        root(&mut parent, g),
                        root(&mut parent, self.scratch.group[y]),
                    );
                    if a != b {
                        parent[a] = b;
                        classes -= 1;
                        if classes == 1 {
                            return false;
                        }
                    }
                }
            }
        }
    }

    /// The next cycle (after the one found last, if any), visiting at most `budget` DFS
    /// nodes (decremented). A found cycle's links stay taken in the residual until the next
    /// call.
    pub(super) fn resume(&mut self, budget: &mut usize) -> Outcome {
        match std::mem::replace(&mut self.state, State::Searching) {
            State::Fresh => {
                if let Some(found) = self.begin() {
                    return found;
                }
            }
            State::Found {
                closing,
                close_mark,
                move_mark,
            } => {
                self.walk.take(&mut self.left, closing, -1);
                self.forced.undo_to(close_mark);
                self.retreat(move_mark);
            }
            State::Searching => {}
            State::Done => {
                self.state = State::Done;
                return Outcome::Exhausted;
            }
        }
        let outcome = self.dfs(budget);
        if !matches!(outcome, Outcome::Found(_)) {
            self.state = State::Done;
        }
        outcome
    }

    /// Starts the search at the vertex of fewest units (then priority); an outcome where
    /// that settles it (no room, or a single vertex).
    fn begin(&mut self) -> Option<Outcome> {
        let walk = self.walk;
        let n = walk.vertices;
        let need = self.need_after as i64 + 1;
        if (0..n).any(|v| walk.room(&self.left, v) < need) {
            self.state = State::Done;
            return Some(Outcome::Exhausted);
        }
        let start = (0..n)
            .min_by_key(|&v| (walk.units(&self.left, v, true), self.prio[v]))
            .expect("vertices");
        self.visited[start] = true;
        self.unvisited -= 1;
        self.path.push(start);
        if self.unvisited == 0 {
            self.state = State::Done;
            return Some(Outcome::Found(self.path.clone()));
        }
        self.stack.push((self.candidates(start), 0, 0));
        None
    }

    /// The depth-first search proper (see [`CycleSearch::resume`]).
    fn dfs(&mut self, budget: &mut usize) -> Outcome {
        while let Some(top) = self.stack.last_mut() {
            if *budget == 0 {
                return Outcome::OutOfBudget;
            }
            if top.1 >= top.0.len() {
                let (_, _, mark) = self.stack.pop().expect("a frame");
                if !self.stack.is_empty() {
                    self.retreat(mark);
                }
                continue;
            }
            let l = top.0[top.1];
            top.1 += 1;
            let v = *self.path.last().expect("a path");
            let w = self.walk.other(l, v);
            if self.visited[w] || !self.usable(l) {
                continue;
            }
            *budget -= 1;
            let mark = self.forced.log.len();
            if !self.advance(l, w) {
                self.retreat(mark);
                continue;
            }
            if self.unvisited == 0 {
                if let Some((closing, close_mark)) = self.close() {
                    self.state = State::Found {
                        closing,
                        close_mark,
                        move_mark: mark,
                    };
                    return Outcome::Found(self.path.clone());
                }
                self.retreat(mark);
                continue;
            }
            let next = self.candidates(w);
            self.stack.push((next, 0, mark));
        }
        Outcome::Exhausted
    }
}

/// Whether some class of merged groups has nothing left to explore.
fn exhausted_class(parent: &mut [usize], queues: &[VecDeque<usize>]) -> bool {
    let k = queues.len();
    let mut live = vec![false; k];
    for (g, q) in queues.iter().enumerate() {
        if !q.is_empty() {
            let r = root(parent, g);
            live[r] = true;
        }
    }
    (0..k).any(|g| root(parent, g) == g && !live[g])
}
