//! Parametric fabric families: ring, line, fully-connected, star, hub-and-spoke (SCCL's
//! `HubAndSpoke`), shared-hub and 2-D torus.
//!
//! Every generator builds bidirectional links of one bandwidth and alpha. A generator is named
//! in a TOML file with `generator = "ring"` and `size = 8` (`size = "4x4"` for the torus), or on
//! the command line as `ring:8` / `torus-2d:4x4`.

use super::model::{Link, SwitchConstraint, Topology};
use anyhow::{bail, Result};
use std::collections::HashSet;

/// The families [`generate`] knows, with their default size and a one-line description.
pub const GENERATORS: &[(&str, &str, &str)] = &[
    ("ring", "8", "bidirectional ring 0-1-...-(n-1)-0"),
    ("line", "8", "bidirectional path 0-1-...-(n-1)"),
    (
        "fully-connected",
        "8",
        "a direct link between every pair of ranks",
    ),
    ("star", "8", "rank 0 linked to every other rank"),
    (
        "hub-and-spoke",
        "8",
        "SCCL's HubAndSpoke: every pair linked; each rank sends <= one link bandwidth in total and receives <= one",
    ),
    (
        "shared-hub",
        "8",
        "every pair linked through one shared hub: all traffic together <= one link bandwidth",
    ),
    (
        "torus-2d",
        "4x4",
        "RxC grid with wrap-around links in both dimensions (size \"RxC\")",
    ),
];

/// The size of a generated fabric: a rank count, or rows x columns for `torus-2d`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GenSize {
    /// `n` ranks.
    Ranks(usize),
    /// A `rows x cols` grid.
    Grid(usize, usize),
}

impl std::fmt::Display for GenSize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GenSize::Ranks(n) => write!(f, "{n}"),
            GenSize::Grid(r, c) => write!(f, "{r}x{c}"),
        }
    }
}

/// Parses a size as written after `name:` (`8`, `4x4`).
pub fn parse_size(text: &str) -> Result<GenSize> {
    let t = text.trim();
    if let Some((r, c)) = t.split_once(['x', 'X']) {
        let r: usize = r
            .trim()
            .parse()
            .map_err(|_| anyhow::anyhow!("size '{t}' is not ROWSxCOLS"))?;
        let c: usize = c
            .trim()
            .parse()
            .map_err(|_| anyhow::anyhow!("size '{t}' is not ROWSxCOLS"))?;
        return Ok(GenSize::Grid(r, c));
    }
    t.parse()
        .map(GenSize::Ranks)
        .map_err(|_| anyhow::anyhow!("size '{t}' is not a number of ranks"))
}

/// Whether `name` is a generator family.
pub fn is_generator(name: &str) -> bool {
    GENERATORS.iter().any(|g| g.0 == name)
}

/// The default size of generator `name`.
pub fn default_size(name: &str) -> Option<GenSize> {
    GENERATORS
        .iter()
        .find(|g| g.0 == name)
        .map(|g| parse_size(g.1).expect("built-in default sizes parse"))
}

/// Builds generator `name` at `size` with every link of `bandwidth` GB/s and `alpha` µs.
/// The topology is named `name:size`. Errors name the reason (unknown family, bad size).
pub fn generate(name: &str, size: GenSize, bandwidth: f64, alpha: f64) -> Result<Topology> {
    let (n, pairs, switches) = match (name, size) {
        ("torus-2d", GenSize::Grid(r, c)) => {
            let (n, pairs) = torus_pairs(r, c)?;
            (n, pairs, Vec::new())
        }
        ("torus-2d", GenSize::Ranks(_)) => bail!("torus-2d takes a size ROWSxCOLS, e.g. 4x4"),
        (_, GenSize::Grid(..)) if is_generator(name) => {
            bail!("{name} takes a number of ranks, not a grid size")
        }
        (_, GenSize::Ranks(n)) => {
            let (pairs, switches) = family_pairs(name, n, bandwidth)?;
            (n, pairs, switches)
        }
        _ => bail!("unknown generator '{name}'"),
    };
    let mut links: Vec<Link> = Vec::new();
    let mut seen = HashSet::new();
    for (a, b) in pairs {
        for (src, dst) in [(a, b), (b, a)] {
            if src != dst && seen.insert((src, dst)) {
                links.push(Link {
                    src,
                    dst,
                    bandwidth,
                    alpha,
                });
            }
        }
    }
    Ok(Topology {
        name: format!("{name}:{size}"),
        ranks: n,
        node_of: vec![0; n],
        links,
        switches,
    })
}

/// Linked rank pairs, each once (links go both ways).
type RankPairs = Vec<(usize, usize)>;

/// The ranks and the linked pairs (each once) of an `r` x `c` torus with wrap-around links
/// in both dimensions.
fn torus_pairs(r: usize, c: usize) -> Result<(usize, RankPairs)> {
    let n = r.saturating_mul(c);
    if r == 0 || c == 0 || n < 2 {
        bail!("torus-2d needs at least 2 ranks, got {r}x{c}");
    }
    super::check_size(n, n.saturating_mul(4))?;
    let mut pairs = Vec::new();
    for i in 0..r {
        for j in 0..c {
            let me = i * c + j;
            if c > 1 {
                pairs.push((me, i * c + (j + 1) % c));
            }
            if r > 1 {
                pairs.push((me, ((i + 1) % r) * c + j));
            }
        }
    }
    Ok((r * c, pairs))
}

/// The linked pairs (each once) and the switch constraints of the family `name` sized by a
/// rank count `n`; an error for fewer than 2 ranks, too large a fabric or an unknown family.
fn family_pairs(
    name: &str,
    n: usize,
    bandwidth: f64,
) -> Result<(RankPairs, Vec<SwitchConstraint>)> {
    if n < 2 {
        bail!("{name} needs at least 2 ranks, got {n}");
    }
    let links = match name {
        "fully-connected" | "hub-and-spoke" | "shared-hub" => n.saturating_mul(n - 1),
        _ => n.saturating_mul(2),
    };
    super::check_size(n, links)?;
    let mut pairs: RankPairs = Vec::new();
    let mut switches = Vec::new();
    match name {
        "ring" => pairs.extend((0..n).map(|i| (i, (i + 1) % n))),
        "line" => pairs.extend((0..n - 1).map(|i| (i, i + 1))),
        "fully-connected" | "hub-and-spoke" | "shared-hub" => {
            for i in 0..n {
                pairs.extend((i + 1..n).map(|j| (i, j)));
            }
            if name == "shared-hub" {
                switches.push(SwitchConstraint {
                    name: "hub".into(),
                    srcs: (0..n).collect(),
                    dsts: (0..n).collect(),
                    bandwidth,
                });
            }
            if name == "hub-and-spoke" {
                switches = hub_and_spoke_constraints(n, bandwidth);
            }
        }
        "star" => pairs.extend((1..n).map(|i| (0, i))),
        _ => bail!("unknown generator '{name}'"),
    }
    Ok((pairs, switches))
}

/// SCCL's HubAndSpoke(n): per rank one out-group (everything it sends) and one in-group
/// (everything it receives) of one link's `bandwidth`.
fn hub_and_spoke_constraints(n: usize, bandwidth: f64) -> Vec<SwitchConstraint> {
    let mut switches = Vec::new();
    for r in 0..n {
        let others: Vec<usize> = (0..n).filter(|&o| o != r).collect();
        switches.push(SwitchConstraint {
            name: format!("node-{r}-out"),
            srcs: vec![r],
            dsts: others.clone(),
            bandwidth,
        });
        switches.push(SwitchConstraint {
            name: format!("node-{r}-in"),
            srcs: others,
            dsts: vec![r],
            bandwidth,
        });
    }
    switches
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        let ring = generate("ring", GenSize::Ranks(8), 1.0, 0.0).unwrap();
        assert_eq!(ring.links.len(), 16);
        let two = generate("ring", GenSize::Ranks(2), 1.0, 0.0).unwrap();
        assert_eq!(two.links.len(), 2);
        let torus = generate("torus-2d", GenSize::Grid(4, 4), 1.0, 0.0).unwrap();
        assert_eq!(torus.ranks, 16);
        assert_eq!(torus.links.len(), 64);
        let t2 = generate("torus-2d", GenSize::Grid(2, 3), 1.0, 0.0).unwrap();
        assert_eq!(t2.out_neighbors(0).len(), 3);
        assert_eq!(
            generate("line", GenSize::Ranks(4), 1.0, 0.0)
                .unwrap()
                .links
                .len(),
            6
        );
        assert_eq!(
            generate("star", GenSize::Ranks(5), 1.0, 0.0)
                .unwrap()
                .links
                .len(),
            8
        );
        let hub = generate("shared-hub", GenSize::Ranks(4), 1.0, 0.0).unwrap();
        assert_eq!((hub.links.len(), hub.switches.len()), (12, 1));
        let spoke = generate("hub-and-spoke", GenSize::Ranks(4), 1.0, 0.0).unwrap();
        assert_eq!((spoke.links.len(), spoke.switches.len()), (12, 8));
        assert!(spoke.switches[0].covers(0, 3) && !spoke.switches[0].covers(1, 3));
        assert_eq!(parse_size("4x4").unwrap(), GenSize::Grid(4, 4));
        assert!(generate("ring", GenSize::Ranks(1), 1.0, 0.0).is_err());
        assert!(generate("torus-2d", GenSize::Ranks(4), 1.0, 0.0).is_err());
    }
}
