//! The exact bandwidth optimum of a collective on a fabric, by maximum flow.
//!
//! * **Allgather** (every rank broadcasts M/N bytes to every other): the best rate `x` at which
//!   every rank can stream its data to all others is the largest `x` with
//!   `B+(S) ≥ x·|S ∩ ranks|` for every vertex set S that leaves some rank out (B+ is the
//!   capacity leaving S). This is Edmonds' arborescence-packing condition, so trees reach it.
//!   It is found exactly with Dinkelbach's iteration: take `x` from the best cut seen, add a
//!   source joined to every rank by an edge of capacity `x`, and check with one maximum flow
//!   per rank that every rank can receive `N·x`; a smaller flow exposes a cut S whose ratio
//!   `B+(S) / |S ∩ ranks|` is the next, smaller `x`. Allgather takes `(M/N) / x`.
//! * **Reduce-scatter**: allgather on the reversed fabric (its dual).
//! * **Broadcast** from a root: the root's smallest maximum flow to another rank (Edmonds).
//!   **Reduce**: broadcast on the reversed fabric.
//! * **Allreduce**: every set of ranks must receive M bytes and send M bytes (its result
//!   depends on every input outside it), so `M / λ` bounds the time, λ being the smallest cut
//!   between two ranks in either direction. The reduce-scatter + allgather optimum is reported
//!   beside it as what a two-phase algorithm can reach.
//!
//! All arithmetic is on integers (bandwidths scaled by a common denominator); the results are
//! exact fractions of GB/s.

use super::maxflow::MaxFlow;
use super::network::FlowNetwork;
use anyhow::{bail, Result};
use num_rational::Ratio;
use rayon::prelude::*;

/// The best rate and the cut that limits it.
#[derive(Debug, Clone, PartialEq)]
pub struct Rate {
    /// GB/s (exact) per root for allgather-type problems, total for single-root ones.
    pub gbps: Ratio<i128>,
    /// Ranks on the sending side of the binding cut.
    pub cut: Vec<usize>,
}

impl Rate {
    /// The rate as a float (GB/s).
    pub fn as_f64(&self) -> f64 {
        *self.gbps.numer() as f64 / *self.gbps.denom() as f64
    }

    /// A short description of the binding cut, e.g. `ranks {14, 15}` or `32 ranks`.
    pub fn describe_cut(&self) -> String {
        if self.cut.len() <= 8 {
            let list: Vec<String> = self.cut.iter().map(|r| r.to_string()).collect();
            format!("ranks {{{}}}", list.join(", "))
        } else {
            format!("a set of {} ranks", self.cut.len())
        }
    }
}

/// The flow network with a super source `s` joined to every rank, reusable across rates.
struct Broadcasters {
    flow: MaxFlow,
    source: usize,
    /// Ids of the edges `source -> rank`.
    source_edges: Vec<usize>,
    /// Ids of the network's edges, in `net.edges` order.
    net_edges: Vec<usize>,
}

impl Broadcasters {
    fn new(net: &FlowNetwork) -> Broadcasters {
        let source = net.vertices;
        let mut flow = MaxFlow::new(net.vertices + 1);
        let net_edges = net
            .edges
            .iter()
            .map(|&(a, b, c)| flow.add_edge(a, b, c))
            .collect();
        let source_edges = (0..net.ranks)
            .map(|r| flow.add_edge(source, r, 0))
            .collect();
        Broadcasters {
            flow,
            source,
            source_edges,
            net_edges,
        }
    }

    /// Sets the rate to `num / den` (network capacities scaled by `den`).
    fn set_rate(&mut self, net: &FlowNetwork, num: i128, den: i128) {
        for (&id, &(_, _, c)) in self.net_edges.iter().zip(&net.edges) {
            self.flow.set_capacity(id, c * den);
        }
        for &id in &self.source_edges {
            self.flow.set_capacity(id, num);
        }
    }
}

/// The exact allgather rate: the largest `x` (GB/s per rank) at which every rank can stream
/// its data to every other. `targets` are the ranks whose inflow is checked (every rank, or
/// one per orbit of a symmetry group that maps the fabric to itself).
pub fn allgather_rate(net: &FlowNetwork, targets: &[usize]) -> Result<Rate> {
    let n = net.ranks as i128;
    if net.ranks < 2 {
        bail!("a collective needs at least 2 ranks");
    }
    // Start from the best single-rank cut (every edge leaving a rank, in one pass).
    let mut leaving = vec![0i128; net.ranks];
    for &(a, _, c) in &net.edges {
        if a < net.ranks {
            leaving[a] += c;
        }
    }
    let best = (0..net.ranks)
        .min_by_key(|&r| leaving[r])
        .map(|r| (leaving[r], 1i128, vec![r]));
    let (mut num, mut den, mut cut) = best.expect("at least two ranks");
    let mut state = Broadcasters::new(net);
    // Dinkelbach: each round either proves the rate or finds a cut with a smaller ratio.
    for _round in 0..=4 * net.ranks + 64 {
        if num == 0 {
            return Ok(Rate {
                gbps: Ratio::from_integer(0),
                cut,
            });
        }
        state.set_rate(net, num, den);
        let need = n * num;
        let violated = targets
            .par_iter()
            .map_init(
                || state.flow.clone(),
                |flow, &t| {
                    let f = flow.max_flow(state.source, t, need);
                    (f < need).then(|| flow.source_side(state.source))
                },
            )
            .find_any(|v| v.is_some())
            .flatten();
        let Some(side) = violated else {
            return Ok(Rate {
                gbps: Ratio::new(num, den * net.denominator),
                cut,
            });
        };
        let mut inside = side;
        inside.truncate(net.vertices);
        let k = inside[..net.ranks].iter().filter(|&&b| b).count() as i128;
        let cap = net.out_capacity(&inside);
        // cap / k < num / den, strictly, since the flow fell short.
        if k == 0 || cap * den >= num * k {
            bail!("internal error: the maximum-flow cut does not improve the rate");
        }
        (num, den) = (cap, k);
        cut = (0..net.ranks).filter(|&r| inside[r]).collect();
    }
    bail!("internal error: the bandwidth optimum did not converge")
}

/// The exact broadcast rate from `root`: its smallest maximum flow to another rank (GB/s).
pub fn broadcast_rate(net: &FlowNetwork, root: usize) -> Result<Rate> {
    let mut flow = MaxFlow::new(net.vertices);
    for &(a, b, c) in &net.edges {
        flow.add_edge(a, b, c);
    }
    let best = (0..net.ranks)
        .filter(|&t| t != root)
        .collect::<Vec<_>>()
        .par_iter()
        .map_init(
            || flow.clone(),
            |flow, &t| {
                let f = flow.max_flow(root, t, i128::MAX);
                (f, flow.source_side(root))
            },
        )
        .min_by_key(|(f, _)| *f);
    let Some((value, side)) = best else {
        bail!("a broadcast needs at least 2 ranks");
    };
    Ok(Rate {
        gbps: Ratio::new(value, net.denominator),
        cut: (0..net.ranks).filter(|&r| side[r]).collect(),
    })
}

/// The smallest cut between two ranks in either direction (GB/s): every set of ranks must
/// receive and send the whole buffer in an allreduce.
pub fn min_rank_cut(net: &FlowNetwork) -> Result<Rate> {
    let forward = broadcast_rate(net, 0)?;
    let backward = broadcast_rate(&net.reversed(), 0)?;
    Ok(if backward.gbps < forward.gbps {
        backward
    } else {
        forward
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::load;

    fn rate(spec: &str) -> f64 {
        let t = load(spec).unwrap();
        let net = FlowNetwork::new(&t).unwrap();
        let all: Vec<usize> = (0..t.ranks).collect();
        allgather_rate(&net, &all).unwrap().as_f64() * (t.ranks as f64 - 1.0)
    }

    #[test]
    fn allgather_busbw_optima() {
        // A ring of 25 GB/s links: every rank receives through two links.
        assert!((rate("ring:8") - 50.0).abs() < 1e-9);
        // DGX-A100 pairs: a GPU's 300 GB/s NVSwitch port plus its 25 GB/s NIC.
        assert!((rate("dgx-a100x2") - 325.0).abs() < 1e-9);
        // Four nodes: each node's eight NICs bind, 31/32 * 4/3 * 200.
        assert!((rate("dgx-a100x4") - 31.0 / 32.0 * 4.0 / 3.0 * 200.0).abs() < 1e-6);
    }

    #[test]
    fn broadcast_and_cut() {
        let t = load("line:4").unwrap();
        let net = FlowNetwork::new(&t).unwrap();
        assert_eq!(broadcast_rate(&net, 0).unwrap().as_f64(), 25.0);
        assert_eq!(min_rank_cut(&net).unwrap().as_f64(), 25.0);
        assert!(net.exact);
    }
}
