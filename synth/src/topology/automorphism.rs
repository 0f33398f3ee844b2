//! Topology automorphisms: permutations of the ranks that map every link to a link of equal
//! bandwidth and alpha (and every non-link to a non-link) and every switch constraint to a
//! switch constraint of equal bandwidth. Used for symmetry breaking in the solvers.
//!
//! Found by backtracking over ranks in breadth-first order; a rank's candidate images must
//! share its signature (its in/out link bandwidths and its switch memberships), every new
//! pair is checked against the ranks already placed, and a switch constraint is checked as
//! soon as all its ranks are placed. Every search stops after 20 million steps or 2 seconds;
//! counts from a search cut short are reported as not exact.

use super::model::Topology;
use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// Search steps after which the enumeration gives up (the count is then not exact).
const STEP_BUDGET: u64 = 20_000_000;

/// Wall-clock time after which one search gives up (the count is then not exact).
const TIME_BUDGET: Duration = Duration::from_secs(2);

/// A pseudo-random 64-bit value per rank (splitmix64), for order-free set fingerprints.
fn zobrist(r: usize, salt: u64) -> u64 {
    let mut z = (r as u64)
        .wrapping_add(salt)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A switch constraint's rank sets as fingerprints and bitsets, for fast image lookups.
#[derive(Clone)]
struct SwitchIndex {
    /// Sorted, deduplicated (srcs, dsts, bandwidth key) of every constraint.
    sets: Vec<(Vec<usize>, Vec<usize>, i64)>,
    /// Per-rank fingerprint values for sources and destinations.
    zs: Vec<u64>,
    zd: Vec<u64>,
    /// Constraints by (source fingerprint, destination fingerprint, bandwidth key).
    by_print: HashMap<(u64, u64, i64), Vec<usize>>,
    /// Membership bitsets of each constraint's srcs and dsts.
    src_bits: Vec<Vec<u64>>,
    dst_bits: Vec<Vec<u64>>,
}

impl SwitchIndex {
    fn new(n: usize, sets: Vec<(Vec<usize>, Vec<usize>, i64)>) -> SwitchIndex {
        let zs: Vec<u64> = (0..n).map(|r| zobrist(r, 1)).collect();
        let zd: Vec<u64> = (0..n).map(|r| zobrist(r, 0x5151_5151)).collect();
        let bits = |list: &[usize]| {
            let mut b = vec![0u64; n.div_ceil(64)];
            for &r in list {
                b[r / 64] |= 1 << (r % 64);
            }
            b
        };
        let mut by_print: HashMap<(u64, u64, i64), Vec<usize>> = HashMap::new();
        for (i, (a, b, bw)) in sets.iter().enumerate() {
            let fa = a.iter().fold(0u64, |h, &r| h.wrapping_add(zs[r]));
            let fb = b.iter().fold(0u64, |h, &r| h.wrapping_add(zd[r]));
            by_print.entry((fa, fb, *bw)).or_default().push(i);
        }
        SwitchIndex {
            src_bits: sets.iter().map(|s| bits(&s.0)).collect(),
            dst_bits: sets.iter().map(|s| bits(&s.1)).collect(),
            sets,
            zs,
            zd,
            by_print,
        }
    }

    /// Whether constraint `s` mapped by `perm` is a constraint of equal bandwidth.
    fn maps_to_switch(&self, s: usize, perm: &[usize]) -> bool {
        let (a, b, bw) = &self.sets[s];
        let fa = a
            .iter()
            .fold(0u64, |h, &r| h.wrapping_add(self.zs[perm[r]]));
        let fb = b
            .iter()
            .fold(0u64, |h, &r| h.wrapping_add(self.zd[perm[r]]));
        let has = |bits: &[u64], r: usize| bits[r / 64] >> (r % 64) & 1 == 1;
        self.by_print.get(&(fa, fb, *bw)).is_some_and(|cands| {
            cands.iter().any(|&t| {
                let (ta, tb, _) = &self.sets[t];
                ta.len() == a.len()
                    && tb.len() == b.len()
                    && a.iter().all(|&r| has(&self.src_bits[t], perm[r]))
                    && b.iter().all(|&r| has(&self.dst_bits[t], perm[r]))
            })
        })
    }
}

/// A bandwidth or latency compared up to 1e-9 relative precision.
fn key(x: f64) -> i64 {
    (x * 1e6).round() as i64
}

#[derive(Clone)]
struct Search {
    n: usize,
    /// `link[a * n + b]`: the (bandwidth, alpha) key of link a -> b.
    link: Vec<Option<(i64, i64)>>,
    /// `pair[a * n + b]`: an id of the switch constraints containing both a and b (with
    /// their roles), equal ids for equal sets; empty when not computed.
    pair: Vec<u32>,
    order: Vec<usize>,
    /// Position of each rank in `order`.
    position: Vec<usize>,
    /// Ranks linked to each rank (either direction).
    neighbours: Vec<Vec<usize>>,
    candidates: Vec<Vec<usize>>,
    /// Switch constraints to check once the rank at position `i` of `order` is placed.
    due: Vec<Vec<usize>>,
    switches: SwitchIndex,
    perm: Vec<usize>,
    used: Vec<bool>,
    /// The rank placed on each used image.
    inverse: Vec<usize>,
    found: Vec<Vec<usize>>,
    limit: usize,
    steps: u64,
    deadline: Instant,
    gave_up: bool,
}

impl Search {
    /// Whether placing `v` (at `pos` in the order) on `img` keeps the links and switch pairs
    /// among the ranks placed so far.
    fn consistent(&self, pos: usize, v: usize, img: usize) -> bool {
        let n = self.n;
        if self.pair.is_empty() {
            // Only links can differ: a placed rank linked to neither `v` nor (by its image)
            // to `img` matches trivially, so the ranks linked to either are enough, not all
            // placed ranks (a 1024-rank torus has four neighbours, not a thousand).
            let same = |u: usize, pu: usize| {
                self.link[u * n + v] == self.link[pu * n + img]
                    && self.link[v * n + u] == self.link[img * n + pu]
            };
            let from_v = self.neighbours[v]
                .iter()
                .filter(|&&u| self.position[u] < pos)
                .all(|&u| same(u, self.perm[u]));
            let from_img = self.neighbours[img]
                .iter()
                .filter(|&&w| self.used[w])
                .all(|&w| same(self.inverse[w], w));
            return from_v && from_img;
        }
        for &u in &self.order[..pos] {
            let pu = self.perm[u];
            if self.link[u * n + v] != self.link[pu * n + img]
                || self.link[v * n + u] != self.link[img * n + pu]
            {
                return false;
            }
            if !self.pair.is_empty()
                && (self.pair[u * n + v] != self.pair[pu * n + img]
                    || self.pair[v * n + u] != self.pair[img * n + pu])
            {
                return false;
            }
        }
        true
    }

    fn switches_ok(&self, pos: usize) -> bool {
        self.due[pos]
            .iter()
            .all(|&s| self.switches.maps_to_switch(s, &self.perm))
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
            if self.steps > STEP_BUDGET
                || (self.steps.is_multiple_of(1024) && Instant::now() > self.deadline)
            {
                self.gave_up = true;
                return;
            }
            if self.used[img] || !self.consistent(pos, v, img) {
                continue;
            }
            self.perm[v] = img;
            self.used[img] = true;
            self.inverse[img] = v;
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
    /// when the cap was hit, or the search budget when the group order is out of reach).
    pub fn automorphism_count(&self, limit: usize) -> (usize, bool) {
        if let Some(order) = self.automorphism_group_order() {
            return match usize::try_from(order) {
                Ok(o) if o <= limit => (o, true),
                _ => (limit, false),
            };
        }
        self.enumerated_count(limit)
    }

    /// [`Topology::automorphism_count`] by enumeration alone.
    pub(crate) fn enumerated_count(&self, limit: usize) -> (usize, bool) {
        let (found, complete) = self.search_automorphisms(limit.saturating_add(1));
        if found.len() > limit {
            (limit, false)
        } else {
            (found.len(), complete)
        }
    }

    /// The exact number of automorphisms (the order of the automorphism group), found as
    /// the product, along the placement order, of the orbit size of each rank under the
    /// automorphisms fixing the ranks before it. `None` when it overflows `u128` or the
    /// search budget runs out.
    pub fn automorphism_group_order(&self) -> Option<u128> {
        if self.ranks == 0 {
            return Some(1);
        }
        let mut s = self.searcher(1);
        let mut total: u128 = 1;
        for i in 0..s.n {
            let v = s.order[i];
            s.perm.iter_mut().for_each(|p| *p = usize::MAX);
            s.used.iter_mut().for_each(|u| *u = false);
            for k in 0..i {
                let u = s.order[k];
                s.perm[u] = u;
                s.used[u] = true;
                s.inverse[u] = u;
            }
            let mut orbit: u128 = 0;
            for ci in 0..s.candidates[v].len() {
                let c = s.candidates[v][ci];
                if s.used[c] || !s.consistent(i, v, c) {
                    continue;
                }
                s.perm[v] = c;
                s.used[c] = true;
                s.inverse[c] = v;
                if s.switches_ok(i) {
                    s.found.clear();
                    s.run(i + 1);
                    if s.gave_up {
                        return None;
                    }
                    orbit += u128::from(!s.found.is_empty());
                }
                s.used[c] = false;
            }
            total = total.checked_mul(orbit)?;
        }
        Some(total)
    }

    /// Up to `limit` automorphisms that map rank `from` to rank `to` and fix no rank (none
    /// if the two ranks differ in their links or switch memberships).
    pub fn derangements_mapping(&self, from: usize, to: usize, limit: usize) -> Vec<Vec<usize>> {
        if from == to {
            return Vec::new();
        }
        self.mapping(from, to, limit, true)
    }

    /// Up to `limit` automorphisms that map rank `from` to rank `to`.
    pub fn automorphisms_mapping(&self, from: usize, to: usize, limit: usize) -> Vec<Vec<usize>> {
        self.mapping(from, to, limit, false)
    }

    fn mapping(&self, from: usize, to: usize, limit: usize, derange: bool) -> Vec<Vec<usize>> {
        if limit == 0 || from >= self.ranks || to >= self.ranks {
            return Vec::new();
        }
        map_one(self.searcher(limit), from, to, derange)
    }

    /// A search for automorphisms that fix no rank, built once for many
    /// [`DerangementFinder::mapping`] calls (its tables cost more than one search on fabrics
    /// with many switch constraints).
    pub fn derangement_finder(&self, limit: usize) -> DerangementFinder {
        DerangementFinder {
            base: (limit > 0).then(|| self.searcher(limit)),
        }
    }

    fn search_automorphisms(&self, limit: usize) -> (Vec<Vec<usize>>, bool) {
        if limit == 0 || self.ranks == 0 {
            return (Vec::new(), limit != 0);
        }
        let mut search = self.searcher(limit);
        search.run(0);
        let complete = !search.gave_up && search.found.len() < limit;
        (search.found, complete)
    }

    /// The backtracking state for this topology, nothing placed yet.
    fn searcher(&self, limit: usize) -> Search {
        let n = self.ranks;
        let mut link = vec![None; n * n];
        for l in &self.links {
            link[l.src * n + l.dst] = Some((key(l.bandwidth), key(l.alpha)));
        }
        let switch_sets = self.switch_sets();
        let candidates = self.image_candidates(&switch_sets);
        let mut adj = vec![Vec::new(); n];
        for l in &self.links {
            adj[l.src].push(l.dst);
            adj[l.dst].push(l.src);
        }
        let order = breadth_first_order(&adj);
        let pair = pair_ids(n, &switch_sets);
        let mut position = vec![0; n];
        for (i, &r) in order.iter().enumerate() {
            position[r] = i;
        }
        let mut due = vec![Vec::new(); n];
        for (s, (a, b, _)) in switch_sets.iter().enumerate() {
            let last = a.iter().chain(b).map(|&r| position[r]).max().unwrap_or(0);
            due[last].push(s);
        }

        for list in &mut adj {
            list.sort_unstable();
            list.dedup();
        }
        Search {
            n,
            link,
            pair,
            order,
            position,
            neighbours: adj,
            candidates,
            due,
            switches: SwitchIndex::new(n, switch_sets),
            perm: vec![usize::MAX; n],
            used: vec![false; n],
            inverse: vec![usize::MAX; n],
            found: Vec::new(),
            limit,
            steps: 0,
            deadline: Instant::now() + TIME_BUDGET,
            gave_up: false,
        }
    }

    /// Every switch constraint as (sorted srcs, sorted dsts, bandwidth key), without repeats
    /// inside a list.
    fn switch_sets(&self) -> Vec<SwitchSet> {
        self.switches
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
            .collect()
    }

    /// The candidate images of every rank: the ranks of the same signature (sorted out-links,
    /// sorted in-links, sorted memberships of `switch_sets`), the rank itself first.
    fn image_candidates(&self, switch_sets: &[SwitchSet]) -> Vec<Vec<usize>> {
        let n = self.ranks;
        type Sig = (
            Vec<(i64, i64)>,
            Vec<(i64, i64)>,
            Vec<(i64, bool, bool, usize, usize)>,
        );
        let mut sig: Vec<Sig> = vec![Default::default(); n];
        for l in &self.links {
            let k = (key(l.bandwidth), key(l.alpha));
            sig[l.src].0.push(k);
            sig[l.dst].1.push(k);
        }
        for (a, b, bw) in switch_sets {
            for (r, s) in sig.iter_mut().enumerate() {
                let (is_s, is_d) = (a.binary_search(&r).is_ok(), b.binary_search(&r).is_ok());
                if is_s || is_d {
                    s.2.push((*bw, is_s, is_d, a.len(), b.len()));
                }
            }
        }
        for s in &mut sig {
            s.0.sort_unstable();
            s.1.sort_unstable();
            s.2.sort_unstable();
        }
        // Identity first: candidates start with the rank itself.
        (0..n)
            .map(|v| {
                std::iter::once(v)
                    .chain((0..n).filter(|&w| w != v && sig[w] == sig[v]))
                    .collect()
            })
            .collect()
    }
}

/// A switch constraint as (sorted srcs, sorted dsts, bandwidth key).
type SwitchSet = (Vec<usize>, Vec<usize>, i64);

/// The ranks in breadth-first order over the undirected link graph `adj` (neighbours in
/// their order in `adj`), component after component from the lowest unseen rank.
fn breadth_first_order(adj: &[Vec<usize>]) -> Vec<usize> {
    let n = adj.len();
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
    order
}

/// Runs `search` for automorphisms mapping `from` to `to` (fixing no rank if `derange`).
fn map_one(mut search: Search, from: usize, to: usize, derange: bool) -> Vec<Vec<usize>> {
    if from >= search.n || to >= search.n || !search.candidates[from].contains(&to) {
        return Vec::new();
    }
    if derange {
        for (v, c) in search.candidates.iter_mut().enumerate() {
            c.retain(|&img| img != v);
        }
    }
    search.candidates[from] = vec![to];
    search.deadline = Instant::now() + TIME_BUDGET;
    search.run(0);
    search.found
}

/// See [`Topology::derangement_finder`].
pub struct DerangementFinder {
    base: Option<Search>,
}

impl DerangementFinder {
    /// Up to the finder's limit of automorphisms that map `from` to `to` and fix no rank.
    pub fn mapping(&self, from: usize, to: usize) -> Vec<Vec<usize>> {
        match &self.base {
            Some(base) if from != to => map_one(base.clone(), from, to, true),
            _ => Vec::new(),
        }
    }
}

/// Work (member pairs over all switch constraints) above which `pair_ids` is skipped.
const PAIR_WORK_LIMIT: usize = 20_000_000;

/// For every ordered rank pair, an id of the switch constraints holding both (bandwidth,
/// both ranks' roles, list sizes), so that placing a rank can be checked against the ranks
/// already placed before whole constraints are. Empty when too costly.
fn pair_ids(n: usize, switches: &[(Vec<usize>, Vec<usize>, i64)]) -> Vec<u32> {
    let members: Vec<Vec<usize>> = switches
        .iter()
        .map(|(a, b, _)| {
            let mut m: Vec<usize> = a.iter().chain(b).copied().collect();
            m.sort_unstable();
            m.dedup();
            m
        })
        .collect();
    let work: usize = members.iter().map(|m| m.len() * m.len()).sum();
    if switches.is_empty() || work > PAIR_WORK_LIMIT || n > 4096 {
        return Vec::new();
    }
    type Entry = (i64, bool, bool, bool, bool, usize, usize);
    let mut sets: Vec<Vec<Entry>> = vec![Vec::new(); n * n];
    for ((a, b, bw), m) in switches.iter().zip(&members) {
        let role = |r: usize| (a.binary_search(&r).is_ok(), b.binary_search(&r).is_ok());
        for &u in m {
            for &v in m {
                let (us, ud) = role(u);
                let (vs, vd) = role(v);
                sets[u * n + v].push((*bw, us, ud, vs, vd, a.len(), b.len()));
            }
        }
    }
    let mut ids: HashMap<Vec<Entry>, u32> = HashMap::new();
    sets.into_iter()
        .map(|mut e| {
            e.sort_unstable();
            let next = ids.len() as u32;
            *ids.entry(e).or_insert(next)
        })
        .collect()
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
        let torus = generate("torus-2d", GenSize::Grid(vec![4, 4]), 1.0, 0.0).unwrap();
        assert_eq!(torus.automorphism_count(10_000), (384, true));
        assert_eq!(ring.automorphism_count(10), (10, false));
        let full = generate("fully-connected", GenSize::Ranks(16), 1.0, 0.0).unwrap();
        assert_eq!(
            full.automorphism_group_order(),
            Some((1..=16u128).product())
        );
        assert_eq!(torus.automorphism_group_order(), Some(384));
    }
}
