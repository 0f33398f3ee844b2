//! A canonical numbering of a fabric's ranks, so that a search sees the same fabric whatever
//! numbering the user gave it (label invariance).
//!
//! Colour refinement with individualisation: every rank, switch constraint and node is a
//! vertex; links (by bandwidth and alpha, in each direction), switch memberships (as source
//! or destination) and node memberships are labelled edges. Colours are refined until stable,
//! each new colour named by the rank of its signature (its colour and the sorted multiset of
//! its labelled neighbours' colours) among all signatures, so colour names never depend on the
//! numbering. While two ranks share a colour, the first shared colour's lowest-numbered rank
//! is individualised and the colours refined again. The numbering is canonical wherever each
//! individualised class is an orbit of the fabric's automorphisms (tori, meshes, hypercubes,
//! clusters of identical boxes, and fabrics whose refinement separates every rank); elsewhere
//! it is still a valid renumbering. Small fabrics are numbered exhaustively (every branch of
//! the individualisation, the least renumbered fabric winning), square tori row-major
//! ([`super::shape::square_torus_numbering`]). Bounded: past [`WORK_LIMIT`] refinement work the ranks
//! keep their numbering.

use super::model::{SwitchConstraint, Topology};

/// Labelled incidences processed, summed over refinement rounds, before the numbering gives
/// up (a fully connected 1024-rank fabric would need a million per round and one round per
/// rank; such a fabric looks the same under any numbering anyway).
pub const WORK_LIMIT: usize = 40_000_000;

/// Refinement work (labelled incidences) within which every branch of the individualisation
/// tree is explored and the branch whose renumbered fabric is least wins: canonical on every
/// fabric, where the tree is small (a DGX-1: its refinement classes are not all orbits). The
/// tree's total work does not depend on the numbering, so neither does the choice.
pub const EXHAUSTIVE_WORK: usize = 3_000_000;

/// The canonical numbering of `topology`'s ranks: rank `r` becomes `to[r]`. `fixed`, if any,
/// is a rank (a collective's root) that keeps a colour of its own. `None` when the work limit
/// was reached before every rank had a colour of its own.
pub fn canonical_numbering(topology: &Topology, fixed: Option<usize>) -> Option<Vec<usize>> {
    if topology.nodes() > 1 {
        return node_major_numbering(topology, fixed);
    }
    // A square torus is numbered row-major, the layout its schedules are written for.
    if let Some(to) = super::shape::square_torus_numbering(topology, fixed.unwrap_or(0)) {
        return Some(to);
    }
    let graph = Graph::of(topology);
    let mut work = 0usize;
    let start = graph.refine(graph.initial_colours(fixed), &mut work)?;
    let mut exhaustive = Exhaustive {
        graph: &graph,
        topology,
        work: 0,
        best: None,
    };
    if exhaustive.explore(start.clone()).is_some() {
        if let Some((_, to)) = exhaustive.best {
            return Some(to);
        }
    }
    let mut colours = start;
    loop {
        let Some(colour) = shared_rank_colour(&colours[..topology.ranks]) else {
            return Some(numbering(&colours[..topology.ranks]));
        };
        colours = individualised(&colours, colour, first_of(&colours, colour));
        colours = graph.refine(colours, &mut work)?;
    }
}

/// The node-major canonical numbering of a fabric of M ≥ 2 nodes of G ranks each: node `i`'s
/// ranks become `i*G .. i*G+G-1`, in one local order shared by every node, as the built-in
/// clusters are numbered. Nodes are placed one at a time: the unplaced node of least colour
/// (the lowest-numbered among equals) is individualised, then its ranks (the least shared
/// colour's lowest-numbered rank first) until they all differ, refining after each, and the
/// node's ranks are numbered in colour order. The first node placed sets the local order.
/// Where its refinement classes are not orbits (a DGX-1), every branch of its
/// individualisation is tried, within [`EXHAUSTIVE_WORK`], and the least renumbered fabric
/// wins; a later node whose first choices give it other links or switch constraints by local
/// index takes the first of its other choices that matches. Canonical where each
/// individualised class of a later node is an orbit; a fabric numbered so already keeps its
/// numbering where its classes fall in rank order (a cluster of identical NVSwitch boxes).
/// `None` for nodes of different sizes, past [`WORK_LIMIT`], or where no choice gives a node
/// the first one's local links and switch constraints.
pub fn node_major_numbering(topology: &Topology, fixed: Option<usize>) -> Option<Vec<usize>> {
    let nodes = super::shape::equal_nodes(topology)?;
    let placing = NodePlacing {
        graph: &Graph::of(topology),
        topology,
        nodes: &nodes,
    };
    let mut work = 0usize;
    let colours = (placing.graph).refine(placing.graph.initial_colours(fixed), &mut work)?;
    let (first, colours) = placing.next_node(colours, &[], &mut work)?;
    // Every local order of the first node, where they are few; else its first.
    let mut orders = Vec::new();
    let mut explored = 0usize;
    let every = (placing.leaves(
        &nodes[first],
        colours.clone(),
        &mut explored,
        EXHAUSTIVE_WORK,
    ))
    .visit(&mut |colours, local| {
        orders.push((colours, local));
        false
    });
    work += explored;
    if every.is_none() {
        orders.clear();
        (placing.leaves(&nodes[first], colours, &mut work, WORK_LIMIT)).visit(
            &mut |colours, local| {
                orders.push((colours, local));
                true
            },
        )?;
    }
    let mut best: Option<(Certificate, Vec<usize>)> = None;
    let mut placing_work = 0usize;
    for (colours, local) in orders {
        if placing_work > EXHAUSTIVE_WORK && best.is_some() {
            break;
        }
        let before = work;
        if let Some(to) = placing.rest(first, colours, local, &mut work)? {
            let cert = certificate(topology, &to);
            if best.as_ref().is_none_or(|(least, _)| cert < *least) {
                best = Some((cert, to));
            }
        }
        placing_work += work - before;
    }
    let (_, to) = best?;
    nodes_alike(&renumbered(topology, &to), nodes[0].len()).then_some(to)
}

/// One node's links and switch constraints within it, by local index.
type Within = (
    Vec<(usize, usize, i64, i64)>,
    Vec<(Vec<usize>, Vec<usize>, i64)>,
);

/// The links and switch constraints within the node whose ranks, in local order, are `local`.
fn within_node(topology: &Topology, local: &[usize]) -> Within {
    let index = |r: usize| local.iter().position(|&x| x == r);
    let mut links: Vec<_> = (topology.links.iter())
        .filter_map(|l| Some((index(l.src)?, index(l.dst)?, key(l.bandwidth), key(l.alpha))))
        .collect();
    let mut switches: Vec<_> = (topology.switches.iter())
        .filter(|s| s.srcs.iter().chain(&s.dsts).next().is_some())
        .filter_map(|s| {
            let mut srcs: Vec<usize> = s.srcs.iter().map(|&r| index(r)).collect::<Option<_>>()?;
            let mut dsts: Vec<usize> = s.dsts.iter().map(|&r| index(r)).collect::<Option<_>>()?;
            srcs.sort_unstable();
            dsts.sort_unstable();
            Some((srcs, dsts, key(s.bandwidth)))
        })
        .collect();
    links.sort_unstable();
    switches.sort_unstable();
    (links, switches)
}

/// The placement of a fabric's nodes in a node-major numbering ([`node_major_numbering`]).
struct NodePlacing<'a> {
    graph: &'a Graph,
    topology: &'a Topology,
    nodes: &'a [Vec<usize>],
}

impl NodePlacing<'_> {
    /// The unplaced node of least colour (the lowest-numbered among equals), and `colours`
    /// with it individualised and refined; `None` past the work limit.
    fn next_node(
        &self,
        colours: Vec<usize>,
        placed: &[usize],
        work: &mut usize,
    ) -> Option<(usize, Vec<usize>)> {
        let vertex = |k: usize| self.topology.ranks + self.topology.switches.len() + k;
        let k = (0..self.nodes.len())
            .filter(|k| !placed.contains(k))
            .min_by_key(|&k| (colours[vertex(k)], k))?;
        let v = vertex(k);
        if colours.iter().filter(|&&c| c == colours[v]).count() == 1 {
            return Some((k, colours));
        }
        let refined = self
            .graph
            .refine(individualised(&colours, colours[v], v), work)?;
        Some((k, refined))
    }

    /// The nodes after the first (`first`, whose ranks in local order are `local`) placed
    /// below `colours`: the numbering, `Some(None)` where a node has no choice that gives it
    /// the first node's structure, `None` past the work limit.
    fn rest(
        &self,
        first: usize,
        mut colours: Vec<usize>,
        local: Vec<usize>,
        work: &mut usize,
    ) -> Option<Option<Vec<usize>>> {
        let g = local.len();
        let like = within_node(self.topology, &local);
        let mut to = vec![0; self.topology.ranks];
        let mut placed = vec![first];
        let mut order = local;
        for position in 0.. {
            for (i, &r) in order.iter().enumerate() {
                to[r] = position * g + i;
            }
            if placed.len() == self.nodes.len() {
                break;
            }
            let (k, next) = self.next_node(colours, &placed, work)?;
            placed.push(k);
            let mut found = None;
            (self.leaves(&self.nodes[k], next, work, WORK_LIMIT)).visit(
                &mut |colours, local| {
                    let fits = within_node(self.topology, &local) == like;
                    if fits {
                        found = Some((colours, local));
                    }
                    fits
                },
            )?;
            let Some((refined, local)) = found else {
                return Some(None);
            };
            colours = refined;
            order = local;
        }
        Some(Some(to))
    }

    /// The individualisation of `node`'s ranks below `colours`, its refinement work added
    /// to `work` and bounded by `limit`.
    fn leaves<'b>(
        &'b self,
        node: &'b [usize],
        colours: Vec<usize>,
        work: &'b mut usize,
        limit: usize,
    ) -> Leaves<'b> {
        Leaves {
            graph: self.graph,
            node,
            colours,
            work,
            limit,
        }
    }
}

/// The leaves of one node's individualisation ([`NodePlacing::leaves`]).
struct Leaves<'a> {
    graph: &'a Graph,
    node: &'a [usize],
    colours: Vec<usize>,
    work: &'a mut usize,
    limit: usize,
}

impl Leaves<'_> {
    /// Calls `visit` with the refined colours and the node's ranks in colour order at each
    /// leaf (the least shared colour's ranks in rank order at each level), until it returns
    /// true; whether it did, `None` past the work limit.
    fn visit(mut self, visit: &mut dyn FnMut(Vec<usize>, Vec<usize>) -> bool) -> Option<bool> {
        let colours = std::mem::take(&mut self.colours);
        self.below(colours, visit)
    }

    fn below(
        &mut self,
        colours: Vec<usize>,
        visit: &mut dyn FnMut(Vec<usize>, Vec<usize>) -> bool,
    ) -> Option<bool> {
        let mine: Vec<usize> = self.node.iter().map(|&r| colours[r]).collect();
        let Some(colour) = shared_rank_colour(&mine) else {
            let mut local = self.node.to_vec();
            local.sort_by_key(|&r| colours[r]);
            return Some(visit(colours, local));
        };
        let choices: Vec<usize> = (self.node.iter().copied())
            .filter(|&r| colours[r] == colour)
            .collect();
        for r in choices {
            let next = individualised(&colours, colour, r);
            let refined = self.graph.refine_within(next, self.work, self.limit)?;
            if self.below(refined, visit)? {
                return Some(true);
            }
        }
        Some(false)
    }
}

/// Whether every node of a node-major fabric (node `i` holds ranks `i*g ..`) has the same
/// links and switch constraints within it, by local index.
fn nodes_alike(topology: &Topology, g: usize) -> bool {
    let m = topology.ranks / g;
    let mut within: Vec<Within> = vec![Default::default(); m];
    for l in &topology.links {
        if l.src / g == l.dst / g {
            let k = l.src / g;
            within[k]
                .0
                .push((l.src % g, l.dst % g, key(l.bandwidth), key(l.alpha)));
        }
    }
    for s in &topology.switches {
        let Some(&first) = s.srcs.first().or(s.dsts.first()) else {
            continue;
        };
        let k = first / g;
        if s.srcs.iter().chain(&s.dsts).all(|&r| r / g == k) {
            let local = |set: &[usize]| set.iter().map(|&r| r % g).collect::<Vec<_>>();
            within[k]
                .1
                .push((local(&s.srcs), local(&s.dsts), key(s.bandwidth)));
        }
    }
    for w in &mut within {
        w.0.sort_unstable();
        w.1.sort_unstable();
    }
    within.windows(2).all(|w| w[0] == w[1])
}

/// The numbering that sorts ranks by their (all distinct) colours.
fn numbering(colours: &[usize]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..colours.len()).collect();
    order.sort_by_key(|&r| colours[r]);
    let mut to = vec![0; colours.len()];
    for (position, &r) in order.iter().enumerate() {
        to[r] = position;
    }
    to
}

/// The lowest-numbered vertex of `colour`.
pub(super) fn first_of(colours: &[usize], colour: usize) -> usize {
    colours.iter().position(|&c| c == colour).unwrap_or(0)
}

/// `colours` with `vertex` split off its class, sorting before the rest of it.
pub(super) fn individualised(colours: &[usize], colour: usize, vertex: usize) -> Vec<usize> {
    let keys: Vec<(usize, bool)> = colours
        .iter()
        .enumerate()
        .map(|(v, &c)| (c, c == colour && v != vertex))
        .collect();
    rank_keys(&keys)
}

/// A renumbered fabric in comparable form: links, switch constraints, nodes.
type Certificate = (
    Vec<(usize, usize, i64, i64)>,
    Vec<(Vec<usize>, Vec<usize>, i64)>,
    Vec<usize>,
);

fn certificate(topology: &Topology, to: &[usize]) -> Certificate {
    let t = renumbered(topology, to);
    let links = t
        .links
        .iter()
        .map(|l| (l.src, l.dst, key(l.bandwidth), key(l.alpha)))
        .collect();
    let switches = t
        .switches
        .iter()
        .map(|s| (s.srcs.clone(), s.dsts.clone(), key(s.bandwidth)))
        .collect();
    (links, switches, t.node_of)
}

/// The search over every branch of the individualisation tree, within [`EXHAUSTIVE_WORK`].
struct Exhaustive<'a> {
    graph: &'a Graph,
    topology: &'a Topology,
    work: usize,
    best: Option<(Certificate, Vec<usize>)>,
}

impl Exhaustive<'_> {
    /// Explores the subtree below `colours` (refined); `None` once past the work budget.
    fn explore(&mut self, colours: Vec<usize>) -> Option<()> {
        let n = self.topology.ranks;
        let Some(colour) = shared_rank_colour(&colours[..n]) else {
            let to = numbering(&colours[..n]);
            let cert = certificate(self.topology, &to);
            if self.best.as_ref().is_none_or(|(best, _)| cert < *best) {
                self.best = Some((cert, to));
            }
            return Some(());
        };
        for v in (0..n).filter(|&v| colours[v] == colour) {
            let next = individualised(&colours, colour, v);
            let refined = self.graph.refine(next, &mut self.work)?;
            if self.work > EXHAUSTIVE_WORK {
                return None;
            }
            self.explore(refined)?;
        }
        Some(())
    }
}

/// The least colour that two ranks share.
pub(super) fn shared_rank_colour(colours: &[usize]) -> Option<usize> {
    let mut sorted = colours.to_vec();
    sorted.sort_unstable();
    sorted.windows(2).find(|w| w[0] == w[1]).map(|w| w[0])
}

/// The fabric as a labelled graph: ranks, then switch constraints, then nodes.
pub(super) struct Graph {
    /// Every vertex's labelled neighbours: (edge label, neighbour).
    adjacency: Vec<Vec<(Label, usize)>>,
    /// Initial colour keys of the non-rank vertices (a switch's bandwidth; nodes alike).
    kinds: Vec<Kind>,
}

/// What an incidence is, from the vertex that lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Label {
    /// A link to the neighbour: bandwidth and alpha keys.
    LinkOut(i64, i64),
    /// A link from the neighbour.
    LinkIn(i64, i64),
    /// The rank is a source of the switch constraint (listed at the rank).
    SourceOf,
    /// The rank is a destination of the switch constraint (listed at the rank).
    DestinationOf,
    /// The switch constraint has the rank as a source (listed at the switch).
    HasSource,
    /// The switch constraint has the rank as a destination (listed at the switch).
    HasDestination,
    /// Rank and node membership.
    Member,
}

/// The initial class of a vertex.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Rank,
    Switch(i64),
    Node,
}

/// A number's key at the precision fabrics are written in.
fn key(x: f64) -> i64 {
    (x * 1e6).round() as i64
}

impl Graph {
    pub(super) fn of(topology: &Topology) -> Graph {
        let n = topology.ranks;
        let switches = &topology.switches;
        let nodes = topology.nodes();
        let mut adjacency = vec![Vec::new(); n + switches.len() + nodes];
        let mut kinds = vec![Kind::Rank; n];
        for l in &topology.links {
            let (b, a) = (key(l.bandwidth), key(l.alpha));
            adjacency[l.src].push((Label::LinkOut(b, a), l.dst));
            adjacency[l.dst].push((Label::LinkIn(b, a), l.src));
        }
        for (
            i,
            SwitchConstraint {
                srcs,
                dsts,
                bandwidth,
                ..
            },
        ) in switches.iter().enumerate()
        {
            let s = n + i;
            kinds.push(Kind::Switch(key(*bandwidth)));
            for &r in srcs {
                adjacency[r].push((Label::SourceOf, s));
                adjacency[s].push((Label::HasSource, r));
            }
            for &r in dsts {
                adjacency[r].push((Label::DestinationOf, s));
                adjacency[s].push((Label::HasDestination, r));
            }
        }
        kinds.extend(std::iter::repeat_n(Kind::Node, nodes));
        if nodes > 1 {
            for (r, &node) in topology.node_of.iter().enumerate() {
                let v = n + switches.len() + node;
                adjacency[r].push((Label::Member, v));
                adjacency[v].push((Label::Member, r));
            }
        }
        Graph { adjacency, kinds }
    }

    /// Colours from the vertices' kinds, `fixed` in a colour of its own.
    pub(super) fn initial_colours(&self, fixed: Option<usize>) -> Vec<usize> {
        let keys: Vec<(Kind, bool)> = self
            .kinds
            .iter()
            .enumerate()
            .map(|(v, &k)| (k, Some(v) != fixed))
            .collect();
        rank_keys(&keys)
    }

    /// Colours from the vertices' kinds, each `(vertex, label)` of `labelled` in a colour of
    /// its own ordered by label, before the unlabelled vertices of its kind.
    pub(super) fn labelled_colours(&self, labelled: &[(usize, usize)]) -> Vec<usize> {
        let mut keys: Vec<(Kind, usize)> = self.kinds.iter().map(|&k| (k, usize::MAX)).collect();
        for &(v, label) in labelled {
            keys[v].1 = label;
        }
        rank_keys(&keys)
    }

    /// Refines `colours` until stable; `None` past the work limit.
    fn refine(&self, colours: Vec<usize>, work: &mut usize) -> Option<Vec<usize>> {
        self.refine_within(colours, work, WORK_LIMIT)
    }

    /// Refines `colours` until stable, adding the labelled incidences processed to `work`;
    /// `None` once `work` passes `limit`.
    pub(super) fn refine_within(
        &self,
        mut colours: Vec<usize>,
        work: &mut usize,
        limit: usize,
    ) -> Option<Vec<usize>> {
        let mut classes = distinct(&colours);
        loop {
            let signatures: Vec<(usize, Vec<(Label, usize)>)> = self
                .adjacency
                .iter()
                .enumerate()
                .map(|(v, neighbours)| {
                    let mut seen: Vec<(Label, usize)> =
                        neighbours.iter().map(|&(l, u)| (l, colours[u])).collect();
                    seen.sort_unstable();
                    (colours[v], seen)
                })
                .collect();
            *work += self.adjacency.iter().map(Vec::len).sum::<usize>() + colours.len();
            if *work > limit {
                return None;
            }
            let next = rank_keys(&signatures);
            let count = distinct(&next);
            colours = next;
            if count == classes {
                return Some(colours);
            }
            classes = count;
        }
    }
}

/// Each key replaced by the rank of its value among the distinct values.
fn rank_keys<K: Ord + Clone>(keys: &[K]) -> Vec<usize> {
    let mut sorted: Vec<&K> = keys.iter().collect();
    sorted.sort_unstable();
    sorted.dedup();
    keys.iter()
        .map(|k| sorted.binary_search(&k).unwrap_or(0))
        .collect()
}

fn distinct(colours: &[usize]) -> usize {
    let mut sorted = colours.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    sorted.len()
}

/// `topology` renumbered canonically (see [`canonical_numbering`]), with its switch
/// constraints and nodes listed in the new numbering's order, and the numbering; `None` where
/// the numbering gave up.
pub fn canonical(topology: &Topology, fixed: Option<usize>) -> Option<(Topology, Vec<usize>)> {
    let to = canonical_numbering(topology, fixed)?;
    let mut t = renumbered(topology, &to);
    if topology.nodes() > 1 {
        in_node_major_order(&mut t);
    }
    Some((t, to))
}

/// Lists a node-major fabric's links and switch constraints as the multi-node composition
/// does (`multinode::compose`), so that a renumbered cluster is the built-in one link for
/// link (engines break ties by link and constraint ids): links within a node before links
/// between nodes, each by (source, destination); constraints within a node before those
/// between nodes, each by the size of their smaller side (sources on a tie), that side, and
/// the direction (from it before into it).
fn in_node_major_order(t: &mut Topology) {
    let node = |r: usize| t.node_of[r];
    t.links
        .sort_by_key(|l| (node(l.src) != node(l.dst), l.src, l.dst));
    let within = |set: &[usize]| {
        set.iter()
            .all(|&r| Some(node(r)) == set.first().map(|&f| node(f)))
    };
    let mut keyed: Vec<_> = std::mem::take(&mut t.switches)
        .into_iter()
        .map(|s| {
            let crossing = !within(&[s.srcs.as_slice(), s.dsts.as_slice()].concat());
            let (side, into) = if s.srcs.len() <= s.dsts.len() {
                (s.srcs.clone(), false)
            } else {
                (s.dsts.clone(), true)
            };
            let k = (
                crossing,
                side.len(),
                side,
                into,
                s.srcs.clone(),
                s.dsts.clone(),
            );
            (k, key(s.bandwidth), s)
        })
        .collect();
    keyed.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
    t.switches = keyed.into_iter().map(|(_, _, s)| s).collect();
}

/// `topology` with rank `r` renamed `to[r]`, nodes numbered by their first rank and switch
/// constraints sorted by their members: nothing of the old numbering is left.
fn renumbered(topology: &Topology, to: &[usize]) -> Topology {
    let mut t = topology.relabeled(to);
    let mut node_ids = vec![usize::MAX; topology.nodes()];
    let mut next = 0;
    for r in 0..t.ranks {
        let node = t.node_of[r];
        if node_ids[node] == usize::MAX {
            node_ids[node] = next;
            next += 1;
        }
        t.node_of[r] = node_ids[node];
    }
    t.switches.sort_by(|a, b| {
        (&a.srcs, &a.dsts, key(a.bandwidth)).cmp(&(&b.srcs, &b.dsts, key(b.bandwidth)))
    });
    t
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::toml_format::random_permutation;

    fn load(spec: &str) -> Topology {
        crate::topology::load(spec).unwrap()
    }

    /// The fabric's structure without its names.
    fn form(topology: &Topology) -> Certificate {
        certificate(topology, &(0..topology.ranks).collect::<Vec<_>>())
    }

    /// The canonical fabric of every renumbering is the canonical fabric of the original.
    fn assert_invariant(topology: &Topology) {
        let (canonical, to) = super::canonical(topology, None).expect("numbered");
        let mut seen = to.clone();
        seen.sort_unstable();
        assert_eq!(
            seen,
            (0..topology.ranks).collect::<Vec<_>>(),
            "a permutation"
        );
        for seed in [1, 7, 42] {
            let twin = topology.relabeled(&random_permutation(topology.ranks, seed));
            assert_ne!(
                &twin, topology,
                "{}: the renumbering changes the ranks",
                topology.name
            );
            let (twin_canonical, _) = super::canonical(&twin, None).expect("numbered");
            assert!(
                form(&twin_canonical) == form(&canonical),
                "{} seed {seed}",
                topology.name
            );
        }
    }

    #[test]
    fn renumbered_fabrics_have_one_canonical_form() {
        for spec in [
            "torus-2d:4x8",
            "mesh-2d:6x6",
            "hypercube:32",
            "torus-3d:3x3x4",
            "random:24:1",
            "random:40:5",
            "dgx1",
            "dgx-a100x2",
            "ring:9",
        ] {
            assert_invariant(&load(spec));
        }
    }

    /// Multi-node fabrics as the zoo and the built-ins write them: fat-tree, oversubscribed,
    /// rail network.
    const CLUSTERS: [&str; 5] = [
        "dgx-h100x8",
        "dgx-a100x4",
        "[multinode]\nnode = \"dgx-a100\"\nnodes = 4\noversubscription = 4\n",
        "[multinode]\nnode = \"dgx-h100\"\nnodes = 2\noversubscription = 2\n",
        "[multinode]\nnode = \"dgx-h100\"\nnodes = 3\nnetwork = \"rail\"\n",
    ];

    fn cluster(spec: &str) -> Topology {
        if spec.contains('\n') {
            crate::topology::toml_format::parsed_text(spec)
        } else {
            load(spec)
        }
    }

    #[test]
    fn clusters_are_numbered_node_major_as_built() {
        for spec in CLUSTERS {
            let topology = cluster(spec);
            assert!(topology.nodes() > 1, "{spec}");
            let to = canonical_numbering(&topology, None).expect("numbered");
            assert_eq!(
                to,
                (0..topology.ranks).collect::<Vec<_>>(),
                "{spec}: the built-in numbering is node-major already"
            );
            assert_invariant(&topology);
            let (canonical, _) = super::canonical(&topology, None).unwrap();
            assert_eq!(canonical.links, topology.links, "{spec}: links in order");
            let sets = |t: &Topology| -> Vec<(Vec<usize>, Vec<usize>, i64)> {
                t.switches
                    .iter()
                    .map(|s| (s.srcs.clone(), s.dsts.clone(), key(s.bandwidth)))
                    .collect()
            };
            // Equal constraints (two nodes' uplinks: node 0's out is node 1's in) are one
            // content; their order among themselves is no structure.
            let (a, b) = (sets(&canonical), sets(&topology));
            assert_eq!(a.len(), b.len());
            for (i, (x, y)) in a.iter().zip(&b).enumerate() {
                let twice = b.iter().filter(|&z| z == y).count() > 1;
                assert!(x == y || twice, "{spec}: switch {i} in order");
            }
        }
    }

    #[test]
    fn a_renumbered_cluster_is_numbered_back_node_major() {
        for spec in CLUSTERS {
            let topology = cluster(spec);
            let g = topology.ranks / topology.nodes();
            for seed in [7, 11] {
                let perm = random_permutation(topology.ranks, seed);
                let twin = topology.relabeled(&perm);
                let to = canonical_numbering(&twin, None).expect("numbered");
                // Each node's ranks land on one block of G consecutive ranks.
                for node in super::super::shape::nodes(&twin) {
                    let block = to[node[0]] / g;
                    assert!(node.iter().all(|&r| to[r] / g == block), "{spec} {seed}");
                }
                let (canonical, _) = super::canonical(&twin, None).unwrap();
                assert!(form(&canonical) == form(&topology), "{spec} seed {seed}");
            }
        }
    }

    /// Clusters of boxes whose refinement classes are not orbits (a DGX-1 splits its ranks
    /// into classes that the first choice in one node and in another need not match).
    const UNEVEN_BOX_CLUSTERS: [&str; 3] = [
        "[multinode]\nnode = \"dgx1\"\nnodes = 8\n",
        "[multinode]\nnode = \"dgx1\"\nnodes = 3\nnetwork = \"rail\"\n",
        "[multinode]\nnode = \"ndv2\"\nnodes = 4\n",
    ];

    #[test]
    fn clusters_of_uneven_boxes_are_numbered_node_major_whatever_their_numbering() {
        for spec in UNEVEN_BOX_CLUSTERS {
            let topology = cluster(spec);
            let g = topology.ranks / topology.nodes();
            let (canonical, _) = super::canonical(&topology, None).expect("numbered");
            assert!(nodes_alike(&canonical, g), "{spec}");
            for seed in [7, 11] {
                let twin = topology.relabeled(&random_permutation(topology.ranks, seed));
                let (twin_canonical, _) = super::canonical(&twin, None).expect("numbered");
                assert!(
                    form(&twin_canonical) == form(&canonical),
                    "{spec} seed {seed}"
                );
            }
        }
    }

    #[test]
    fn a_cluster_root_is_numbered_node_major() {
        let topology = load("dgx-a100x4");
        let perm = random_permutation(topology.ranks, 3);
        let twin = topology.relabeled(&perm);
        let (a, to) = super::canonical(&topology, Some(13)).unwrap();
        let (b, twin_to) = super::canonical(&twin, Some(perm[13])).unwrap();
        assert!(form(&a) == form(&b));
        assert_eq!(to[13], twin_to[perm[13]]);
        assert!(nodes_alike(&a, 8));
    }

    #[test]
    fn nodes_that_differ_are_not_numbered_node_major() {
        // Two nodes of four ranks: a ring in one, a line in the other.
        let mut t = load("ring:8");
        t.node_of = vec![0, 0, 0, 0, 1, 1, 1, 1];
        t.links.clear();
        for (a, b) in [
            (0, 1),
            (1, 2),
            (2, 3),
            (3, 0),
            (4, 5),
            (5, 6),
            (6, 7),
            (3, 4),
        ] {
            for (s, d) in [(a, b), (b, a)] {
                t.links.push(crate::topology::Link {
                    src: s,
                    dst: d,
                    bandwidth: 10.0,
                    alpha: 1.0,
                });
            }
        }
        assert_eq!(node_major_numbering(&t, None), None);
    }

    #[test]
    fn a_torus_and_its_transpose_have_one_canonical_form() {
        let (a, _) = super::canonical(&load("torus-2d:4x8"), None).unwrap();
        let (b, _) = super::canonical(&load("torus-2d:8x4"), None).unwrap();
        assert_eq!(a.links, b.links);
    }

    #[test]
    fn a_fixed_rank_keeps_its_place_among_renumberings() {
        let ring = load("ring:8");
        let (canonical, to) = super::canonical(&ring, Some(3)).unwrap();
        let perm = random_permutation(8, 5);
        let twin = ring.relabeled(&perm);
        let (twin_canonical, twin_to) = super::canonical(&twin, Some(perm[3])).unwrap();
        assert!(form(&twin_canonical) == form(&canonical));
        assert_eq!(
            twin_to[perm[3]], to[3],
            "the root lands on the same canonical rank"
        );
    }

    #[test]
    fn different_fabrics_stay_different() {
        let (a, _) = super::canonical(&load("torus-2d:4x4"), None).unwrap();
        let (b, _) = super::canonical(&load("hypercube:16"), None).unwrap();
        // The 4x4 torus and the 4-cube are isomorphic; the ring and the line are not.
        assert_eq!(a.links, b.links);
        let (c, _) = super::canonical(&load("ring:8"), None).unwrap();
        let (d, _) = super::canonical(&load("line:8"), None).unwrap();
        assert_ne!(c.links, d.links);
    }
}
