//! The fabric model of DESIGN §2: ranks, directed links and shared-bandwidth constraints.

use serde::{Deserialize, Serialize};

/// One directed link `src -> dst` with its bandwidth (GB/s, per direction) and latency (µs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Link {
    /// Sending rank.
    pub src: usize,
    /// Receiving rank.
    pub dst: usize,
    /// Bandwidth in GB/s (1e9 bytes per second).
    pub bandwidth: f64,
    /// Latency (alpha) in microseconds.
    pub alpha: f64,
}

/// A bandwidth shared by every link from a source in `srcs` to a destination in `dsts`
/// (an NVSwitch port, a NIC): the traffic of all those links together is at most `bandwidth`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SwitchConstraint {
    /// Human-readable name, e.g. `nvswitch-out-3` or `nic-in-12`.
    pub name: String,
    /// Ranks whose sends count against this constraint.
    pub srcs: Vec<usize>,
    /// Ranks whose receives count against this constraint.
    pub dsts: Vec<usize>,
    /// Shared bandwidth in GB/s.
    pub bandwidth: f64,
}

impl SwitchConstraint {
    /// Whether the link `src -> dst` is governed by this constraint.
    pub fn covers(&self, src: usize, dst: usize) -> bool {
        self.srcs.contains(&src) && self.dsts.contains(&dst)
    }
}

/// A GPU fabric: ranks (each on a node), directed links and switch constraints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Topology {
    /// Name used in file names and reports (e.g. `dgx1`, `ring:8`).
    pub name: String,
    /// Number of ranks (GPUs).
    pub ranks: usize,
    /// Node index of each rank (all 0 for a single box).
    pub node_of: Vec<usize>,
    /// Directed links; at most one per ordered pair (multiplicity is folded into bandwidth).
    pub links: Vec<Link>,
    /// Shared-bandwidth constraints (switch ports, NICs).
    pub switches: Vec<SwitchConstraint>,
    /// The runtime that runs this fabric's programs, where the fabric says (`runtime =
    /// "rccl"` on AMD fabrics): its XML flavour is then the default for this fabric.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<runtime::ir::Flavor>,
}

impl Topology {
    /// The link `src -> dst`, if any.
    pub fn link(&self, src: usize, dst: usize) -> Option<&Link> {
        self.links.iter().find(|l| l.src == src && l.dst == dst)
    }

    /// Number of nodes (boxes) in the fabric.
    pub fn nodes(&self) -> usize {
        self.node_of.iter().copied().max().map_or(0, |m| m + 1)
    }

    /// The ranks `r` can send to directly.
    pub fn out_neighbors(&self, r: usize) -> Vec<usize> {
        self.links
            .iter()
            .filter(|l| l.src == r)
            .map(|l| l.dst)
            .collect()
    }

    /// The ranks that can send to `r` directly.
    pub fn in_neighbors(&self, r: usize) -> Vec<usize> {
        self.links
            .iter()
            .filter(|l| l.dst == r)
            .map(|l| l.src)
            .collect()
    }

    /// The same fabric with every link and constraint reversed (used to solve combining
    /// collectives as the dual of non-combining ones).
    pub fn reversed(&self) -> Topology {
        Topology {
            name: self.name.clone(),
            ranks: self.ranks,
            node_of: self.node_of.clone(),
            links: self
                .links
                .iter()
                .map(|l| Link {
                    src: l.dst,
                    dst: l.src,
                    ..l.clone()
                })
                .collect(),
            switches: self
                .switches
                .iter()
                .map(|s| SwitchConstraint {
                    name: s.name.clone(),
                    srcs: s.dsts.clone(),
                    dsts: s.srcs.clone(),
                    bandwidth: s.bandwidth,
                })
                .collect(),
            runtime: self.runtime,
        }
    }

    /// The same fabric with its links, each constraint's ranks and the constraints in sorted
    /// order: what is computed on it depends on the fabric, not on the order it lists them
    /// in (and a fabric equal to its reversal gives its reversal's, [`Topology::reversed`]).
    pub fn in_sorted_order(&self) -> Topology {
        let mut sorted = self.clone();
        sorted
            .links
            .sort_by_key(|l| (l.src, l.dst, l.bandwidth.to_bits(), l.alpha.to_bits()));
        for s in &mut sorted.switches {
            s.srcs.sort_unstable();
            s.dsts.sort_unstable();
        }
        sorted.switches.sort_by(|a, b| {
            (&a.srcs, &a.dsts, a.bandwidth.to_bits()).cmp(&(
                &b.srcs,
                &b.dsts,
                b.bandwidth.to_bits(),
            ))
        });
        sorted
    }

    /// Whether [`Topology::reversed`] has the same links and switch constraints (in any
    /// order): a fabric whose every link has its twin the other way round, alike.
    pub fn equals_its_reversal(&self) -> bool {
        let links = |reversed: bool| {
            let mut all: Vec<_> = (self.links.iter())
                .map(|l| {
                    let (a, b) = if reversed {
                        (l.dst, l.src)
                    } else {
                        (l.src, l.dst)
                    };
                    (a, b, l.bandwidth.to_bits(), l.alpha.to_bits())
                })
                .collect();
            all.sort_unstable();
            all
        };
        let switches = |reversed: bool| {
            let mut all: Vec<_> = (self.switches.iter())
                .map(|s| {
                    let (mut a, mut b) = (s.srcs.clone(), s.dsts.clone());
                    a.sort_unstable();
                    b.sort_unstable();
                    let (a, b) = if reversed { (b, a) } else { (a, b) };
                    (a, b, s.bandwidth.to_bits())
                })
                .collect();
            all.sort_unstable();
            all
        };
        links(false) == links(true) && switches(false) == switches(true)
    }

    /// The same fabric with rank `r` renamed `to[r]` (`to` a permutation of the ranks): links,
    /// nodes and constraints follow their ranks, listed in the new ids' order so that the
    /// result does not remember the old numbering.
    pub fn relabeled(&self, to: &[usize]) -> Topology {
        let mut node_of = vec![0; self.ranks];
        for (r, &n) in self.node_of.iter().enumerate() {
            node_of[to[r]] = n;
        }
        let mut links: Vec<Link> = self
            .links
            .iter()
            .map(|l| Link {
                src: to[l.src],
                dst: to[l.dst],
                ..l.clone()
            })
            .collect();
        links.sort_by_key(|l| (l.src, l.dst));
        let rename = |set: &[usize]| {
            let mut v: Vec<usize> = set.iter().map(|&r| to[r]).collect();
            v.sort_unstable();
            v
        };
        let switches = self
            .switches
            .iter()
            .map(|s| SwitchConstraint {
                name: s.name.clone(),
                srcs: rename(&s.srcs),
                dsts: rename(&s.dsts),
                bandwidth: s.bandwidth,
            })
            .collect();
        Topology {
            name: self.name.clone(),
            ranks: self.ranks,
            node_of,
            links,
            switches,
            runtime: self.runtime,
        }
    }
}
