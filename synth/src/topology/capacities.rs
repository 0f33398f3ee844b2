//! Integer capacities for the SMT encoding: every link and switch bandwidth as a small integer
//! multiple of one common unit (DGX-1: single NVLink = 1, double NVLink = 2).

use super::model::Topology;
use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

/// The largest integer capacity (and the largest divisor of the smallest bandwidth) tried.
pub const MAX_CAPACITY: u32 = 1000;

/// How far (in units) a bandwidth may be from an integer multiple of the unit.
const TOLERANCE: f64 = 1e-6;

/// Bandwidths normalized to integers: `links[i] * unit_gbps` is the bandwidth of link `i` and
/// `switches[j] * unit_gbps` that of switch constraint `j`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Capacities {
    /// GB/s of one capacity unit.
    pub unit_gbps: f64,
    /// Capacity of each link, in units, by link index.
    pub links: Vec<u32>,
    /// Capacity of each switch constraint, in units, by constraint index.
    pub switches: Vec<u32>,
}

impl Topology {
    /// The largest unit (the smallest bandwidth divided by 1, 2, 3, ...) of which every link
    /// and switch bandwidth is an integer multiple (within 1e-6 of a unit), with every multiple
    /// at most [`MAX_CAPACITY`]. Errors when there is none, naming the bandwidths.
    pub fn capacities(&self) -> Result<Capacities> {
        let all: Vec<f64> = self
            .links
            .iter()
            .map(|l| l.bandwidth)
            .chain(self.switches.iter().map(|s| s.bandwidth))
            .collect();
        let Some(min) = all.iter().copied().reduce(f64::min) else {
            return Ok(Capacities {
                unit_gbps: 1.0,
                links: Vec::new(),
                switches: Vec::new(),
            });
        };
        if !(min.is_finite() && min > 0.0) {
            bail!("non-positive bandwidth {min}: cannot normalize capacities");
        }
        let max = all.iter().copied().fold(min, f64::max);
        'divisor: for d in 1..=MAX_CAPACITY {
            let unit = min / d as f64;
            if max / unit > MAX_CAPACITY as f64 + 0.5 {
                break;
            }
            for &b in &all {
                let q = b / unit;
                if (q - q.round()).abs() > TOLERANCE {
                    continue 'divisor;
                }
            }
            let units = |b: f64| (b / unit).round() as u32;
            return Ok(Capacities {
                unit_gbps: unit,
                links: self.links.iter().map(|l| units(l.bandwidth)).collect(),
                switches: self.switches.iter().map(|s| units(s.bandwidth)).collect(),
            });
        }
        let mut distinct: Vec<f64> = all.clone();
        distinct.sort_by(f64::total_cmp);
        distinct.dedup();
        let list: Vec<String> = distinct.iter().take(8).map(|b| format!("{b}")).collect();
        bail!(
            "bandwidths {} GB/s have no common unit giving integer capacities <= {MAX_CAPACITY}",
            list.join(", ")
        )
    }
}

#[cfg(test)]
mod tests {
    use crate::topology::model::{Link, Topology};

    fn two(b1: f64, b2: f64) -> Topology {
        Topology {
            name: "t".into(),
            ranks: 2,
            node_of: vec![0, 0],
            links: vec![
                Link {
                    src: 0,
                    dst: 1,
                    bandwidth: b1,
                    alpha: 0.0,
                },
                Link {
                    src: 1,
                    dst: 0,
                    bandwidth: b2,
                    alpha: 0.0,
                },
            ],
            switches: vec![],
            runtime: None,
        }
    }

    #[test]
    fn units() {
        let c = two(25.0, 50.0).capacities().unwrap();
        assert_eq!((c.unit_gbps, c.links.clone()), (25.0, vec![1, 2]));
        let c = two(50.0, 75.0).capacities().unwrap();
        assert_eq!((c.unit_gbps, c.links.clone()), (25.0, vec![2, 3]));
        assert!(two(1.0, std::f64::consts::PI).capacities().is_err());
        assert!(two(1.0, 5000.0).capacities().is_err());
    }
}
