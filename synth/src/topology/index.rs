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
    /// Ids of the links entering each rank.
    pub in_links: Vec<Vec<usize>>,
    /// Ids of the switch constraints governing each link.
    pub governing: Vec<Vec<usize>>,
    /// Hop distances (`None`: unreachable).
    pub distances: Vec<Vec<Option<usize>>>,
    /// Integer capacities, when the bandwidths have a common unit.
    pub capacities: Option<Capacities>,
}

impl Topology {
    /// Builds the [`TopologyIndex`] of this topology.
    pub fn index(&self) -> TopologyIndex {
        let n = self.ranks;
        let mut link_of = HashMap::with_capacity(self.links.len());
        let mut out_links = vec![Vec::new(); n];
        let mut in_links = vec![Vec::new(); n];
        for (i, l) in self.links.iter().enumerate() {
            link_of.insert((l.src, l.dst), i);
            out_links[l.src].push(i);
            in_links[l.dst].push(i);
        }
        // Constraints by source rank, then filtered by destination: linear in what they cover.
        let mut governing = vec![Vec::new(); self.links.len()];
        for (j, sw) in self.switches.iter().enumerate() {
            let mut is_dst = vec![false; n];
            for &d in &sw.dsts {
                if d < n {
                    is_dst[d] = true;
                }
            }
            for &s in &sw.srcs {
                for &i in out_links.get(s).map_or(&[][..], |v| v.as_slice()) {
                    if is_dst[self.links[i].dst] && !governing[i].contains(&j) {
                        governing[i].push(j);
                    }
                }
            }
        }
        TopologyIndex {
            link_of,
            out_links,
            in_links,
            governing,
            distances: self.distances(),
            capacities: self.capacities().ok(),
        }
    }
}
