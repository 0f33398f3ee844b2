//! Facts about a topology that every engine needs, computed once: link ids by endpoint pair,
//! each rank's outgoing and incoming links, the switch constraints governing each link, hop
//! distances and (when they exist) integer capacities.

use super::{Capacities, Topology};
use std::collections::HashMap;

/// An index over one topology (see the module documentation).
#[derive(Debug, Clone)]
pub struct TopologyIndex {
    /// Link id of each ordered pair `(src, dst)` that has a link.
    pub link_of: HashMap<(usize, usize), usize>,
    /// Ids of the links leaving each rank.
    pub out_links: Vec<Vec<usize>>,
    /// Ids of the switch constraints governing each link.
    pub governing: Vec<Vec<usize>>,
    /// Hop distances (`None`: unreachable).
    pub distances: Vec<Vec<Option<usize>>>,
    /// Integer capacities, when the bandwidths have a common unit.
    pub capacities: Option<Capacities>,
}

impl Topology {
    /// Ids of the links leaving each rank.
    pub(crate) fn out_link_ids(&self) -> Vec<Vec<usize>> {
        let mut out = vec![Vec::new(); self.ranks];
        for (i, l) in self.links.iter().enumerate() {
            out[l.src].push(i);
        }
        out
    }

    /// Ids of the switch constraints governing each link: each constraint's sources' links,
    /// filtered by destination (linear in what the constraints cover, not links × constraints).
    pub(crate) fn governing_constraints(&self, out_links: &[Vec<usize>]) -> Vec<Vec<usize>> {
        let n = self.ranks;
        let mut governing = vec![Vec::new(); self.links.len()];
        let mut is_dst = vec![false; n];
        for (j, sw) in self.switches.iter().enumerate() {
            sw.dsts
                .iter()
                .filter(|&&d| d < n)
                .for_each(|&d| is_dst[d] = true);
            for &s in &sw.srcs {
                for &i in out_links.get(s).map_or(&[][..], |v| v.as_slice()) {
                    if is_dst[self.links[i].dst] && governing[i].last() != Some(&j) {
                        governing[i].push(j);
                    }
                }
            }
            sw.dsts
                .iter()
                .filter(|&&d| d < n)
                .for_each(|&d| is_dst[d] = false);
        }
        governing
    }

    /// Builds the [`TopologyIndex`] of this topology.
    pub fn index(&self) -> TopologyIndex {
        let mut link_of = HashMap::with_capacity(self.links.len());
        for (i, l) in self.links.iter().enumerate() {
            link_of.insert((l.src, l.dst), i);
        }
        let out_links = self.out_link_ids();
        TopologyIndex {
            link_of,
            governing: self.governing_constraints(&out_links),
            out_links,
            distances: self.distances(),
            capacities: self.capacities().ok(),
        }
    }
}
