//! A report on a topology: size, per-rank bandwidth, diameter, symmetry and integer
//! capacities, as a serde-serializable struct and as text.

use super::capacities::Capacities;
use super::model::Topology;
use serde::{Deserialize, Serialize};
use std::fmt;

/// The automorphism cap [`Topology::summary`] uses when the group order is out of reach.
pub const SUMMARY_AUTOMORPHISM_LIMIT: usize = 100_000;

/// Bandwidth of one rank.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankBandwidth {
    /// The rank.
    pub rank: usize,
    /// Its node.
    pub node: usize,
    /// Most it can receive, GB/s (see [`Topology::rank_bandwidth`]).
    pub in_gbps: f64,
    /// Most it can send, GB/s.
    pub out_gbps: f64,
}

/// The automorphism count of a topology.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AutomorphismCount {
    /// Number of automorphisms (a lower bound when not exact).
    pub count: u128,
    /// Whether `count` is the exact group order (false: only enumerated up to the cap).
    pub exact: bool,
}

/// What `synth topo` reports about a topology.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Topology name.
    pub name: String,
    /// Number of ranks.
    pub ranks: usize,
    /// Number of nodes.
    pub nodes: usize,
    /// Number of directed links.
    pub links: usize,
    /// Number of switch constraints.
    pub switches: usize,
    /// Per-rank in/out bandwidth.
    pub rank_bandwidth: Vec<RankBandwidth>,
    /// Hop diameter (`None` when some rank cannot reach another).
    pub diameter: Option<usize>,
    /// Number of ordered rank pairs with no path.
    pub unreachable_pairs: usize,
    /// Automorphisms: the exact group order, else enumerated up to
    /// [`SUMMARY_AUTOMORPHISM_LIMIT`].
    pub automorphisms: AutomorphismCount,
    /// Integer capacities, when the bandwidths have a common unit.
    pub capacities: Option<Capacities>,
    /// Why there are no integer capacities, when there are none.
    pub capacities_error: Option<String>,
}

impl Topology {
    /// Computes the [`Summary`].
    pub fn summary(&self) -> Summary {
        let (count, exact) = match self.automorphism_group_order() {
            Some(o) => (o, true),
            None => {
                let (c, exact) = self.enumerated_count(SUMMARY_AUTOMORPHISM_LIMIT);
                (c as u128, exact)
            }
        };
        let (capacities, capacities_error) = match self.capacities() {
            Ok(c) => (Some(c), None),
            Err(e) => (None, Some(e.to_string())),
        };
        Summary {
            name: self.name.clone(),
            ranks: self.ranks,
            nodes: self.nodes(),
            links: self.links.len(),
            switches: self.switches.len(),
            rank_bandwidth: (0..self.ranks)
                .map(|r| {
                    let (in_gbps, out_gbps) = self.rank_bandwidth(r);
                    RankBandwidth {
                        rank: r,
                        node: self.node_of[r],
                        in_gbps,
                        out_gbps,
                    }
                })
                .collect(),
            diameter: self.diameter(),
            unreachable_pairs: self.unreachable_pairs().len(),
            automorphisms: AutomorphismCount { count, exact },
            capacities,
            capacities_error,
        }
    }
}

fn gbps(x: f64) -> String {
    let s = format!("{x:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

impl fmt::Display for Summary {
    /// The human-readable rendering: one fact per line, ranks with equal bandwidth grouped.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "topology {}", self.name)?;
        writeln!(
            f,
            "  ranks {} on {} node(s), {} directed links, {} switch constraints",
            self.ranks, self.nodes, self.links, self.switches
        )?;
        match self.diameter {
            Some(d) => writeln!(f, "  diameter {d} hops")?,
            None => writeln!(
                f,
                "  diameter: infinite ({} ordered pairs unreachable)",
                self.unreachable_pairs
            )?,
        }
        let a = self.automorphisms;
        writeln!(
            f,
            "  automorphisms {}{}",
            if a.exact { "" } else { ">= " },
            a.count
        )?;
        // Group ranks by (in, out) bandwidth.
        let mut groups: Vec<((String, String), Vec<usize>)> = Vec::new();
        for rb in &self.rank_bandwidth {
            let k = (gbps(rb.in_gbps), gbps(rb.out_gbps));
            match groups.iter_mut().find(|g| g.0 == k) {
                Some(g) => g.1.push(rb.rank),
                None => groups.push((k, vec![rb.rank])),
            }
        }
        for ((i, o), ranks) in &groups {
            let list = if ranks.len() == self.ranks {
                "every rank".to_string()
            } else {
                format!("ranks {}", compact(ranks))
            };
            writeln!(f, "  {list}: in {i} GB/s, out {o} GB/s")?;
        }
        match (&self.capacities, &self.capacities_error) {
            (Some(c), _) => {
                let mut l: Vec<u32> = c.links.clone();
                l.sort_unstable();
                l.dedup();
                let mut s: Vec<u32> = c.switches.clone();
                s.sort_unstable();
                s.dedup();
                write!(
                    f,
                    "  integer capacities: 1 unit = {} GB/s; links {:?}",
                    gbps(c.unit_gbps),
                    l
                )?;
                if !s.is_empty() {
                    write!(f, ", switches {s:?}")?;
                }
                writeln!(f)
            }
            (None, Some(e)) => writeln!(f, "  integer capacities: none ({e})"),
            (None, None) => Ok(()),
        }
    }
}

/// `0-3,5,7-8` style list of sorted ranks.
fn compact(ranks: &[usize]) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < ranks.len() {
        let mut j = i;
        while j + 1 < ranks.len() && ranks[j + 1] == ranks[j] + 1 {
            j += 1;
        }
        parts.push(if j == i {
            ranks[i].to_string()
        } else {
            format!("{}-{}", ranks[i], ranks[j])
        });
        i = j + 1;
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::compact;
    use crate::topology::generators::{generate, GenSize};

    #[test]
    fn text() {
        assert_eq!(compact(&[0, 1, 2, 5, 7, 8]), "0-2,5,7-8");
        let s = generate("ring", GenSize::Ranks(4), 25.0, 0.7)
            .unwrap()
            .summary();
        let text = s.to_string();
        assert!(
            text.contains("every rank: in 50 GB/s, out 50 GB/s"),
            "{text}"
        );
        assert!(text.contains("automorphisms 8"), "{text}");
        assert!(serde_json::to_string(&s)
            .unwrap()
            .contains("\"diameter\":2"));
    }
}
