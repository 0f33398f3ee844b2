//! Time and bus-bandwidth lower bounds of a collective on a fabric (DESIGN §6).
//!
//! For allgather, reduce-scatter, broadcast, reduce and allreduce the bandwidth term is the
//! exact optimum from maximum flow ([`crate::flow`]): allgather and broadcast (and their
//! reversed duals) reach it with packed trees; for allreduce it is the smallest cut between
//! two ranks, which every set of ranks must cross with the whole buffer in both directions.
//! Where a switch constraint serves several senders and several receivers (a NIC shared by
//! GPUs), cuts can be out of reach: allgather and reduce-scatter then ask the tree-packing
//! LP ([`crate::trees::packing`]), whose packing either reaches the term (which makes it the
//! exact optimum) or stops below it, where the LP's prices bound every schedule at what the
//! packing reaches (3 x mesh-2d:2x4 with a NIC per four GPUs: 68.75 GB/s of busbw by the
//! cuts, 62.5 by the packing: two corner GPUs of a NIC must each take most of their data
//! through it). The other collectives use the cut table below.
//!
//! For a set X of ranks, some bytes must enter X and some must leave it whatever the
//! algorithm (as a fraction of the nccl-tests size S, k = |X|, n ranks, ρ the root):
//!
//! | collective | must enter X | must leave X |
//! | --- | --- | --- |
//! | allgather | (n−k)/n | k/n |
//! | reduce-scatter | k/n | (n−k)/n |
//! | allreduce | 1 | 1 |
//! | alltoall | k(n−k)/n | k(n−k)/n |
//! | broadcast | 1 if ρ ∉ X | 1 if ρ ∈ X |
//! | reduce | 1 if ρ ∈ X | 1 if ρ ∉ X |
//! | gather | (n−k)/n if ρ ∈ X | k/n if ρ ∉ X |
//! | scatter | k/n if ρ ∉ X | (n−k)/n if ρ ∈ X |
//!
//! (nothing when X is empty or everything). The capacity of a cut is the most the links
//! crossing it can carry together under every link bandwidth and every switch constraint (an
//! NVSwitch port, a NIC): a small LP (HiGHS), exact for any mix of constraints. The cuts tried
//! are every single rank and, on multi-node fabrics, every node.
//!
//! The bound on time at size S is `max(D·α, α + S·β)` where β (µs per byte) is the worst
//! cut's need / capacity, α the smallest link latency and D the hop distance the collective
//! must cover (diameter; root eccentricity for rooted collectives): data needs at least one
//! latency before it flows, and D store-and-forward hops before it reaches the farthest rank.
//!
//! Worked example, 2× DGX-A100 allgather (16 ranks; a GPU has a 300 GB/s NVSwitch port and a
//! 25 GB/s NIC per direction): a rank must receive 15/16·S through at most 300 + 25 = 325 GB/s,
//! so busbw = (15/16)·S/t ≤ 325 GB/s. The node cut is weaker: each node must receive the
//! other node's 8 inputs, S/2 bytes, through its 8 × 25 = 200 GB/s of NICs, which allows
//! busbw up to (15/16)·400 = 375 GB/s.

use crate::topology::Topology;
use good_lp::{highs, variable, Expression, ProblemVariables, Solution, SolverModel};
use runtime::ir::Collective;
use serde::{Deserialize, Serialize};

/// A lower bound for one collective on one fabric, valid at every size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CutBound {
    /// µs per byte of nccl-tests size that the worst cut forces (0 if nothing must move).
    pub us_per_byte: f64,
    /// The smallest link latency (µs).
    pub alpha_us: f64,
    /// Hops the farthest needed data must travel.
    pub hops: usize,
    /// Which cut binds, e.g. `rank 3 ingress` or `node 0 egress`.
    pub binding: String,
    /// nccl-tests' busbw factor of the collective on this many ranks.
    pub busbw_factor: f64,
    /// Whether the bandwidth term is the exact optimum (reachable by trees), not only a bound.
    pub exact: bool,
}

/// The bandwidth term (µs per byte of nccl-tests size) from maximum flow, with the binding
/// cut and whether it is the exact optimum; `None` for collectives without a flow model or
/// fabrics whose bandwidths have no exact common denominator.
fn flow_term(coll: Collective, topology: &Topology, root: usize) -> Option<(f64, String, bool)> {
    use crate::flow::{allgather_rate, broadcast_rate, min_rank_cut, FlowNetwork};
    let net = FlowNetwork::new(topology).ok()?;
    let n = topology.ranks as f64;
    let gbps = |r: &crate::flow::Rate| r.as_f64() * 1e3; // bytes per µs
    let (rate, per_byte, exact) = match coll {
        Collective::AllGather | Collective::ReduceScatter => {
            let net = if coll == Collective::ReduceScatter {
                net.reversed()
            } else {
                net
            };
            let targets = allgather_targets(topology);
            let r = allgather_rate(&net, &targets).ok()?;
            let v = 1.0 / (n * gbps(&r));
            (r, v, net.exact)
        }
        Collective::Broadcast | Collective::Reduce => {
            let net = if coll == Collective::Reduce {
                net.reversed()
            } else {
                net
            };
            let r = broadcast_rate(&net, root).ok()?;
            let v = 1.0 / gbps(&r);
            (r, v, net.exact)
        }
        Collective::AllReduce => {
            let r = min_rank_cut(&net).ok()?;
            (r.clone(), 1.0 / gbps(&r), false)
        }
        _ => return None,
    };
    if !(per_byte.is_finite() && per_byte > 0.0) {
        return None;
    }
    Some((
        per_byte,
        format!("max-flow; binding cut: {}", rate.describe_cut()),
        exact,
    ))
}

/// The transfer term (µs per byte of nccl-tests size) of `coll`: the bytes that must be
/// received in all ([`transfers_needed`]) over what all links together carry at most, their
/// joint capacity. It binds where one constraint covers many links: on `shared-hub:8` the
/// cuts and flows allow 25 GB/s of allgather busbw (a switch vertex of the flow network
/// passes one copy on to every rank), this term 3.125, which a schedule reaches. `None`
/// without links or for a collective without a count.
fn transfers_term(coll: Collective, topology: &Topology) -> Option<f64> {
    let need = transfers_needed(coll, topology.ranks)?;
    let total = joint_capacity(topology);
    (total > 0.0 && need > 0.0).then(|| need / (total * 1e3))
}

/// Seconds the tree-packing LP of [`packing_term`] may run; stopped early, its prices still
/// give a bound, only a looser one.
const PACKING_SECONDS: u64 = 20;

/// The tree-packing term (µs per byte of nccl-tests size) of allgather, and of reduce-scatter
/// on the reversed fabric, where the cuts alone may not be reachable (a NIC shared by GPUs
/// whose other links are few): the fractional packing of spanning trees at the rate of
/// `per_byte` (the cuts' term), else the upper bound its LP's prices give
/// ([`crate::trees::packing::Packing::bound_gbps`]). With it, whether the term is the exact
/// optimum: the packing reaches it. `None` for other collectives or where the LP fails.
fn packing_term(coll: Collective, topology: &Topology, per_byte: f64) -> Option<(f64, bool)> {
    use crate::trees::packing::{pack, packing_group};
    let topology = match coll {
        Collective::AllGather => topology.clone(),
        Collective::ReduceScatter => topology.reversed(),
        _ => return None,
    };
    let n = topology.ranks as f64;
    if !(per_byte.is_finite() && per_byte > 0.0) {
        return None;
    }
    let rate_at = |per_byte: f64| 1.0 / (n * per_byte * 1e3);
    let index = topology.index();
    let group = packing_group(&topology, &index);
    let roots = group.representatives();
    let target = rate_at(per_byte);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(PACKING_SECONDS);
    let packing = pack(&topology, &index, &group, &roots, Some(target), deadline).ok()?;
    if packing.rate_gbps >= target * (1.0 - 1e-9) {
        return Some((per_byte, true));
    }
    let bound = packing.bound_gbps.min(target);
    Some((rate_at(bound), packing.rate_gbps >= bound * (1.0 - 1e-6)))
}

/// The bytes, as a multiple of the nccl-tests size, that the ranks must receive in all:
/// allgather, reduce-scatter and alltoall (n−1): each rank's (n−1)/n of the buffer from the
/// others; broadcast and reduce (n−1): the whole buffer into, or out of, every other rank;
/// gather and scatter (n−1)/n; allreduce 2(n−1): every rank's result holds every input, so
/// each byte position needs 2(n−1) transfers (one-way gossip among n ranks takes 2n−2 calls;
/// reduced or copied, a transfer carries one value per position; ring:5: 80 GB/s busbw by
/// the cuts, 50 by this term, which reduce-scatter + allgather reach).
fn transfers_needed(coll: Collective, ranks: usize) -> Option<f64> {
    let n = ranks as f64;
    match coll {
        Collective::AllReduce => Some(2.0 * (n - 1.0)),
        Collective::AllGather
        | Collective::ReduceScatter
        | Collective::AllToAll
        | Collective::Broadcast
        | Collective::Reduce => Some(n - 1.0),
        Collective::Gather | Collective::Scatter => Some((n - 1.0) / n),
        _ => None,
    }
}

/// Links up to which [`joint_capacity`] solves its LP (past them, the linear-time bound).
const JOINT_LP_LINKS: usize = 20_000;

/// What all links can carry together (GB/s) under their bandwidths and every switch
/// constraint: an LP (HiGHS) up to [`JOINT_LP_LINKS`] links; past them, or if the solver
/// fails, a bound in linear time: each link governed by switch constraints counted under one
/// of them (its first, or its last: the smaller total), a constraint's links at most its
/// bandwidth.
fn joint_capacity(topology: &Topology) -> f64 {
    let governing = topology.governing_constraints(&topology.out_link_ids());
    let total = |pick: fn(&[usize]) -> Option<&usize>| {
        let mut free = 0.0;
        let mut under = vec![0.0; topology.switches.len()];
        for (link, constraints) in topology.links.iter().zip(&governing) {
            match pick(constraints) {
                Some(&j) => under[j] += link.bandwidth,
                None => free += link.bandwidth,
            }
        }
        let switched: f64 = under
            .iter()
            .zip(&topology.switches)
            .map(|(load, sw)| load.min(sw.bandwidth))
            .sum();
        free + switched
    };
    let linear = total(<[usize]>::first).min(total(<[usize]>::last));
    if topology.links.len() > JOINT_LP_LINKS {
        return linear;
    }
    let mut vars = ProblemVariables::new();
    let xs: Vec<_> = (topology.links.iter())
        .map(|l| vars.add(variable().min(0.0).max(l.bandwidth)))
        .collect();
    let mut per_switch: Vec<Expression> = vec![Expression::from(0.0); topology.switches.len()];
    for (&x, constraints) in xs.iter().zip(&governing) {
        for &j in constraints {
            per_switch[j] += x;
        }
    }
    let sum: Expression = xs.iter().map(|&x| Expression::from(x)).sum();
    let mut model = vars.maximise(sum.clone()).using(highs);
    model.set_verbose(false);
    for (expr, sw) in per_switch.into_iter().zip(&topology.switches) {
        model = model.with(expr.leq(sw.bandwidth));
    }
    match model.solve() {
        Ok(solution) => solution.eval(&sum).min(linear),
        Err(_) => linear,
    }
}

/// The ranks whose inflow the allgather flow check needs: one per orbit of the fabric's
/// translations on large fabrics (every rank on small ones, where that is cheaper).
pub fn allgather_targets(topology: &Topology) -> Vec<usize> {
    if topology.ranks <= 64 {
        (0..topology.ranks).collect()
    } else {
        topology.translations().representatives()
    }
}

impl CutBound {
    /// Computes the bound for `coll` (root `root` for rooted collectives) on `topology`.
    pub fn new(coll: Collective, topology: &Topology, root: usize) -> CutBound {
        let n = topology.ranks;
        let mut sets: Vec<(String, Vec<bool>)> = (0..n)
            .map(|r| (format!("rank {r}"), (0..n).map(|x| x == r).collect()))
            .collect();
        if topology.nodes() > 1 {
            for k in 0..topology.nodes() {
                let inside: Vec<bool> = topology.node_of.iter().map(|&m| m == k).collect();
                if inside.iter().any(|&b| b) {
                    sets.push((format!("node {k}"), inside));
                }
            }
        }
        let mut worst = 0.0f64;
        let mut binding = String::from("none");
        let mut exact = false;
        if let Some((v, how, is_exact)) = flow_term(coll, topology, root) {
            worst = v;
            binding = how;
            exact = is_exact;
            sets.clear();
        }
        for (name, inside) in &sets {
            let k = inside.iter().filter(|&&b| b).count();
            let has_root = inside.get(root).copied().unwrap_or(false);
            let (need_in, need_out) = needs(coll, n, k, has_root);
            for (need, incoming, dir) in [(need_in, true, "ingress"), (need_out, false, "egress")] {
                if need <= 0.0 {
                    continue;
                }
                let cap = cut_capacity(topology, inside, incoming);
                // GB/s = 1e3 bytes per µs.
                let v = if cap > 0.0 {
                    need / (cap * 1e3)
                } else {
                    f64::INFINITY
                };
                if v > worst {
                    worst = v;
                    binding = format!("{name} {dir}");
                }
            }
        }
        if let Some(v) = transfers_term(coll, topology).filter(|&v| v > worst * (1.0 + 1e-9)) {
            worst = v;
            binding = if coll == Collective::AllReduce {
                "every byte crosses 2(n-1) links in all (one-way gossip)".into()
            } else {
                "the bytes every rank must receive, over all links together".into()
            };
            exact = false;
        }
        if !exact {
            if let Some((v, reached)) = packing_term(coll, topology, worst) {
                if v > worst * (1.0 + 1e-9) {
                    worst = v;
                    binding = "tree packing: every schedule streams along spanning trees, and \
                               the packing LP's prices bound them all"
                        .into();
                }
                exact = reached;
            }
        }
        CutBound {
            us_per_byte: worst,
            alpha_us: topology
                .links
                .iter()
                .map(|l| l.alpha.max(0.0))
                .reduce(f64::min)
                .unwrap_or(0.0),
            hops: hops_needed(coll, topology, root),
            binding,
            busbw_factor: coll.busbw_factor(n),
            exact,
        }
    }

    /// The lower bound on time (µs) at nccl-tests size `size_bytes`.
    pub fn time_us(&self, size_bytes: u64) -> f64 {
        let alpha = if self.alpha_us.is_finite() {
            self.alpha_us
        } else {
            0.0
        };
        let latency = self.hops as f64 * alpha;
        if size_bytes == 0 || self.us_per_byte == 0.0 {
            return latency;
        }
        latency.max(alpha + self.us_per_byte * size_bytes as f64)
    }

    /// The bound on nccl-tests busbw (GB/s) as the size grows (latency vanishes):
    /// factor / (GB/s-normalised µs per byte). Infinite when nothing must move.
    pub fn busbw(&self) -> f64 {
        if self.us_per_byte == 0.0 {
            return f64::INFINITY;
        }
        self.busbw_factor / (self.us_per_byte * 1e3)
    }

    /// The bound on busbw (GB/s) at a given size, latency included.
    pub fn busbw_at(&self, size_bytes: u64) -> f64 {
        let t = self.time_us(size_bytes);
        if t <= 0.0 {
            return f64::INFINITY;
        }
        size_bytes as f64 / (t * 1e3) * self.busbw_factor
    }
}

/// The best busbw (GB/s) an allreduce made of a reduce-scatter then an allgather can reach
/// on `topology` at `size_bytes` (`None`: as the size grows), each phase at its own bound.
/// Issue-level targets for allreduce are stated against this figure; the allreduce cut
/// bound itself is looser.
pub fn two_phase_allreduce_busbw(topology: &Topology, size_bytes: Option<u64>) -> f64 {
    let rs = CutBound::new(Collective::ReduceScatter, topology, 0);
    let ag = CutBound::new(Collective::AllGather, topology, 0);
    let factor = Collective::AllReduce.busbw_factor(topology.ranks);
    match size_bytes {
        None => factor / ((rs.us_per_byte + ag.us_per_byte) * 1e3),
        Some(b) => b as f64 / ((rs.time_us(b) + ag.time_us(b)) * 1e3) * factor,
    }
}

/// Upper bound on nccl-tests busbw (GB/s) of `coll` on `topology` at large sizes (root 0 for
/// rooted collectives).
pub fn busbw_bound(coll: Collective, topology: &Topology) -> f64 {
    CutBound::new(coll, topology, 0).busbw()
}

/// Lower bound on the time (µs) of `coll` on `topology` at nccl-tests size `size_bytes`
/// (root 0 for rooted collectives).
pub fn time_bound_us(coll: Collective, topology: &Topology, size_bytes: u64) -> f64 {
    CutBound::new(coll, topology, 0).time_us(size_bytes)
}

/// Fractions of the size that must enter and leave a set of `k` of `n` ranks.
fn needs(coll: Collective, n: usize, k: usize, has_root: bool) -> (f64, f64) {
    if k == 0 || k >= n {
        return (0.0, 0.0);
    }
    let (nf, kf) = (n as f64, k as f64);
    let out_frac = kf / nf;
    let in_frac = (nf - kf) / nf;
    let flag = |b: bool| if b { 1.0 } else { 0.0 };
    match coll {
        Collective::AllGather => (in_frac, out_frac),
        Collective::ReduceScatter => (out_frac, in_frac),
        // Every rank's result depends on every input outside X (and X's inputs on the
        // outside's results), so the whole buffer crosses the cut both ways. The classical
        // 2(n−1)/n per rank holds only for reduce-scatter + allgather algorithms: a star
        // or line allreduce beats it.
        Collective::AllReduce => (1.0, 1.0),
        Collective::AllToAll => {
            let v = kf * (nf - kf) / nf;
            (v, v)
        }
        Collective::Broadcast => (flag(!has_root), flag(has_root)),
        Collective::Reduce => (flag(has_root), flag(!has_root)),
        Collective::Gather => (in_frac * flag(has_root), out_frac * flag(!has_root)),
        Collective::Scatter => (out_frac * flag(!has_root), in_frac * flag(has_root)),
        // Nothing is known about a custom collective's traffic here: no bandwidth term.
        Collective::Custom => (0.0, 0.0),
    }
}

/// Hops the farthest needed data must travel: the diameter, or the root's eccentricity (out
/// for broadcast/scatter, in for reduce/gather). Unreachable pairs are ignored here.
fn hops_needed(coll: Collective, topology: &Topology, root: usize) -> usize {
    let d = topology.distances();
    let n = topology.ranks;
    let get = |a: usize, b: usize| {
        d.get(a)
            .and_then(|row| row.get(b))
            .copied()
            .flatten()
            .unwrap_or(0)
    };
    match coll {
        // A custom collective may need no transfer at all.
        Collective::Custom => 0,
        Collective::Broadcast | Collective::Scatter => {
            (0..n).map(|r| get(root, r)).max().unwrap_or(0)
        }
        Collective::Reduce | Collective::Gather => (0..n).map(|r| get(r, root)).max().unwrap_or(0),
        _ => (0..n)
            .flat_map(|a| (0..n).map(move |b| (a, b)))
            .map(|(a, b)| get(a, b))
            .max()
            .unwrap_or(0),
    }
}

/// The most the links crossing into (`incoming`) or out of the set `inside` can carry
/// together, in GB/s, under link bandwidths and switch constraints (an LP; if the solver
/// fails, the sum of the crossing links' bandwidths, which is larger and so still sound).
pub fn cut_capacity(topology: &Topology, inside: &[bool], incoming: bool) -> f64 {
    let is_in = |r: usize| inside.get(r).copied().unwrap_or(false);
    let crossing: Vec<usize> = (0..topology.links.len())
        .filter(|&i| {
            let l = &topology.links[i];
            if incoming {
                !is_in(l.src) && is_in(l.dst)
            } else {
                is_in(l.src) && !is_in(l.dst)
            }
        })
        .collect();
    let sum: f64 = crossing.iter().map(|&i| topology.links[i].bandwidth).sum();
    if crossing.is_empty() {
        return 0.0;
    }
    let mut vars = ProblemVariables::new();
    let xs: Vec<_> = crossing
        .iter()
        .map(|&i| vars.add(variable().min(0.0).max(topology.links[i].bandwidth)))
        .collect();
    let total: Expression = xs.iter().map(|&x| Expression::from(x)).sum();
    let mut model = vars.maximise(total.clone()).using(highs);
    model.set_verbose(false);
    for sw in &topology.switches {
        let covered: Expression = crossing
            .iter()
            .zip(&xs)
            .filter(|(&i, _)| sw.covers(topology.links[i].src, topology.links[i].dst))
            .map(|(_, &x)| Expression::from(x))
            .sum();
        model = model.with(covered.leq(sw.bandwidth));
    }
    match model.solve() {
        Ok(sol) => sol.eval(&total).min(sum),
        Err(_) => sum,
    }
}
