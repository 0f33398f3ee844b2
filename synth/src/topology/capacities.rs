//! Integer capacities for the SMT encoding: every link and switch bandwidth as a small integer
//! multiple of one common unit (DGX-1: single NVLink = 1, double NVLink = 2).
//!
//! Bandwidths with no such unit (irrational ratios, measured figures) get approximate
//! capacities in units of 1/[`MAX_CAPACITY`] of the largest bandwidth, rounded down for
//! schedules (an algorithm that fits them fits the real links) and up for lower bounds (a
//! bound computed with them holds on the real links).

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
    /// Whether every bandwidth is exactly its capacity times the unit (else the capacities
    /// are rounded, see the module's documentation).
    #[serde(default = "exact_by_default")]
    pub exact: bool,
}

fn exact_by_default() -> bool {
    true
}

/// Which way approximate capacities are rounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rounding {
    /// Down, for schedules: what fits the capacities fits the links.
    Down,
    /// Up, for lower bounds: a bound under the capacities holds on the links.
    Up,
}

impl Topology {
    /// The capacities schedules are built and checked with: exact where the bandwidths
    /// have a common unit ([`Topology::exact_capacities`]), else rounded down.
    pub fn capacities(&self) -> Result<Capacities> {
        self.capacities_rounded(Rounding::Down)
    }

    /// The capacities lower bounds are computed with: exact where the bandwidths have a
    /// common unit, else rounded up.
    pub fn bound_capacities(&self) -> Result<Capacities> {
        self.capacities_rounded(Rounding::Up)
    }

    /// Exact capacities, else capacities in units of 1/[`MAX_CAPACITY`] of the largest
    /// bandwidth rounded the `rounding` way; an error where the bandwidths span so wide a
    /// range that a capacity would round to 0.
    pub fn capacities_rounded(&self, rounding: Rounding) -> Result<Capacities> {
        let exact = match self.exact_capacities() {
            Ok(c) => return Ok(c),
            Err(e) => e,
        };
        let all = self.links.iter().map(|l| l.bandwidth);
        let all = all.chain(self.switches.iter().map(|s| s.bandwidth));
        let max = all.clone().fold(0.0, f64::max);
        let unit = max / MAX_CAPACITY as f64;
        let units = |b: f64| {
            let q = b / unit;
            match rounding {
                Rounding::Down => (q + TOLERANCE).floor(),
                Rounding::Up => (q - TOLERANCE).ceil(),
            }
        };
        if all.clone().any(|b| units(b) < 1.0) {
            return Err(anyhow::anyhow!(
                "{exact}, and some are below 1/{MAX_CAPACITY} of the largest ({max} GB/s), so \
                 no approximate unit serves either"
            ));
        }
        let units = |b: f64| units(b) as u32;
        Ok(Capacities {
            unit_gbps: unit,
            links: self.links.iter().map(|l| units(l.bandwidth)).collect(),
            switches: self.switches.iter().map(|s| units(s.bandwidth)).collect(),
            exact: false,
        })
    }

    /// The largest unit (the smallest bandwidth divided by 1, 2, 3, ...) of which every link
    /// and switch bandwidth is an integer multiple (within 1e-6 of a unit), with every multiple
    /// at most [`MAX_CAPACITY`]. Errors when there is none, naming the bandwidths.
    pub fn exact_capacities(&self) -> Result<Capacities> {
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
                exact: true,
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
                exact: true,
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
        assert!(c.exact);
        let pi = std::f64::consts::PI;
        assert!(two(1.0, pi).exact_capacities().is_err());
        assert!(two(1.0, 5000.0).exact_capacities().is_err());
    }

    #[test]
    fn irrational_bandwidths_get_capacities_rounded_the_safe_way() {
        let (e, pi) = (std::f64::consts::E, std::f64::consts::PI);
        let t = two(e, pi);
        let down = t.capacities().unwrap();
        let up = t.bound_capacities().unwrap();
        assert!(!down.exact && !up.exact);
        assert_eq!(down.unit_gbps, up.unit_gbps);
        assert_eq!(down.links[1], 1000);
        for (i, b) in [e, pi].into_iter().enumerate() {
            assert!(f64::from(down.links[i]) * down.unit_gbps <= b + 1e-9);
            assert!(f64::from(up.links[i]) * up.unit_gbps >= b - 1e-9);
        }
        assert_eq!(up.links[0], down.links[0] + 1);
        // A bandwidth under 1/1000 of the largest has no approximate unit either.
        let err = two(0.001 * pi, 5.0).capacities().unwrap_err();
        assert!(
            format!("{err:#}").contains("no approximate unit"),
            "{err:#}"
        );
    }
}
