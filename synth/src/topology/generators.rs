//! Parametric fabric families: ring, line, fully-connected, star, hub-and-spoke (SCCL's
//! `HubAndSpoke`), shared-hub, 2-D and 3-D tori, 2-D meshes, hypercubes and seeded random
//! irregular fabrics.
//!
//! Every generator builds bidirectional links of one bandwidth and alpha (a random fabric's
//! links carry 1 to 3 times that bandwidth). A generator is named in a TOML file with
//! `generator = "ring"` and `size = 8` (`size = "4x4"` for a 2-D torus or mesh, `"4x4x4"` for
//! a 3-D torus, `"24:7"` for 24 random ranks from seed 7), or on the command line as `ring:8`,
//! `torus-2d:4x4`, `torus-3d:4x4x4`, `mesh-2d:8x8`, `hypercube:64`, `random:24:7`.

use super::model::{Link, SwitchConstraint, Topology};
use anyhow::{bail, Result};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
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
    (
        "torus-3d",
        "4x4x4",
        "AxBxC grid with wrap-around links in all three dimensions (size \"AxBxC\")",
    ),
    (
        "mesh-2d",
        "4x4",
        "RxC grid without wrap-around links (size \"RxC\")",
    ),
    (
        "hypercube",
        "16",
        "2^d ranks, each linked to the d ranks whose id differs in one bit (size: the rank count)",
    ),
    (
        "random",
        "16:1",
        "a seeded random connected fabric, about 4 links per rank of 1 to 3 times the bandwidth (size \"RANKS:SEED\")",
    ),
];

/// The size of a generated fabric.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GenSize {
    /// `n` ranks.
    Ranks(usize),
    /// A grid of these extents (`4x4`, `4x4x4`).
    Grid(Vec<usize>),
    /// `ranks` ranks drawn from `seed` (`16:7`).
    Seeded {
        /// Rank count.
        ranks: usize,
        /// Seed of the random draw.
        seed: u64,
    },
}

impl std::fmt::Display for GenSize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GenSize::Ranks(n) => write!(f, "{n}"),
            GenSize::Grid(dims) => {
                let text: Vec<String> = dims.iter().map(|d| d.to_string()).collect();
                write!(f, "{}", text.join("x"))
            }
            GenSize::Seeded { ranks, seed } => write!(f, "{ranks}:{seed}"),
        }
    }
}

/// Parses a size as written after `name:` (`8`, `4x4`, `4x4x4`, `16:7`).
pub fn parse_size(text: &str) -> Result<GenSize> {
    let t = text.trim();
    let number = |s: &str, what: &str| -> Result<u64> {
        s.trim()
            .parse()
            .map_err(|_| anyhow::anyhow!("size '{t}' is not {what}"))
    };
    if let Some((ranks, seed)) = t.split_once(':') {
        return Ok(GenSize::Seeded {
            ranks: number(ranks, "RANKS:SEED")? as usize,
            seed: number(seed, "RANKS:SEED")?,
        });
    }
    if t.contains(['x', 'X']) {
        let dims = t
            .split(['x', 'X'])
            .map(|d| number(d, "ROWSxCOLS or AxBxC").map(|d| d as usize))
            .collect::<Result<Vec<usize>>>()?;
        if dims.len() > 3 {
            bail!("size '{t}' has {} dimensions; at most 3", dims.len());
        }
        return Ok(GenSize::Grid(dims));
    }
    number(t, "a number of ranks").map(|n| GenSize::Ranks(n as usize))
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

/// A linked rank pair (links go both ways) and its multiplicity (parallel links).
type RankPairs = Vec<(usize, usize, u32)>;

/// Builds generator `name` at `size` with every link of `bandwidth` GB/s (times its
/// multiplicity) and `alpha` µs. The topology is named `name:size`. Errors name the reason
/// (unknown family, bad size).
pub fn generate(name: &str, size: GenSize, bandwidth: f64, alpha: f64) -> Result<Topology> {
    if !is_generator(name) {
        bail!("unknown generator '{name}'");
    }
    let (n, pairs, switches) = match (name, &size) {
        ("torus-2d" | "mesh-2d", GenSize::Grid(d)) if d.len() == 2 => {
            let (n, pairs) = grid_pairs(d, name == "torus-2d")?;
            (n, pairs, Vec::new())
        }
        ("torus-3d", GenSize::Grid(d)) if d.len() == 3 => {
            let (n, pairs) = grid_pairs(d, true)?;
            (n, pairs, Vec::new())
        }
        ("torus-2d" | "mesh-2d", _) => bail!("{name} takes a size ROWSxCOLS, e.g. 4x4"),
        ("torus-3d", _) => bail!("torus-3d takes a size AxBxC, e.g. 4x4x4"),
        ("random", GenSize::Seeded { ranks, seed }) => {
            (*ranks, random_pairs(*ranks, *seed)?, Vec::new())
        }
        ("random", GenSize::Ranks(ranks)) => (*ranks, random_pairs(*ranks, 0)?, Vec::new()),
        ("random", GenSize::Grid(_)) => bail!("random takes a size RANKS:SEED, e.g. 16:7"),
        (_, GenSize::Ranks(n)) => {
            let (pairs, switches) = family_pairs(name, *n, bandwidth)?;
            (*n, pairs, switches)
        }
        (_, _) => bail!("{name} takes a number of ranks"),
    };
    let mut links: Vec<Link> = Vec::new();
    let mut seen = HashSet::new();
    for (a, b, multiplicity) in pairs {
        for (src, dst) in [(a, b), (b, a)] {
            if src != dst && seen.insert((src, dst)) {
                links.push(Link {
                    src,
                    dst,
                    bandwidth: bandwidth * f64::from(multiplicity),
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
        runtime: None,
    })
}

/// The ranks and the linked pairs (each once) of a grid of extents `dims` (row-major ids),
/// with wrap-around links in every dimension when `wrap`.
fn grid_pairs(dims: &[usize], wrap: bool) -> Result<(usize, RankPairs)> {
    let n = dims.iter().fold(1usize, |a, &d| a.saturating_mul(d));
    let text: Vec<String> = dims.iter().map(|d| d.to_string()).collect();
    if dims.contains(&0) || n < 2 {
        bail!("a grid needs at least 2 ranks, got {}", text.join("x"));
    }
    super::check_size(n, n.saturating_mul(2 * dims.len()))?;
    let mut pairs = Vec::new();
    for me in 0..n {
        let mut stride = 1;
        for &extent in dims.iter().rev() {
            let coordinate = (me / stride) % extent;
            if extent > 1 && (wrap || coordinate + 1 < extent) {
                let next = me - coordinate * stride + ((coordinate + 1) % extent) * stride;
                pairs.push((me, next, 1));
            }
            stride *= extent;
        }
    }
    Ok((n, pairs))
}

/// A connected fabric of `n` ranks drawn from `seed`: a random spanning tree, a second
/// neighbour for every leaf, then random extra pairs up to 2n pairs in all (about 4 links per
/// rank), each of multiplicity 1 to 3.
fn random_pairs(n: usize, seed: u64) -> Result<RankPairs> {
    if n < 2 {
        bail!("random needs at least 2 ranks, got {n}");
    }
    super::check_size(n, n.saturating_mul(4))?;
    let target = (2 * n).min(n * (n - 1) / 2);
    let mut rng = StdRng::seed_from_u64(seed);
    let mut order: Vec<usize> = (0..n).collect();
    order.shuffle(&mut rng);
    let mut linked = HashSet::new();
    let mut pairs = Vec::new();
    let mut add = |a: usize, b: usize, rng: &mut StdRng, pairs: &mut RankPairs| {
        if a != b && linked.insert((a.min(b), a.max(b))) {
            pairs.push((a, b, rng.gen_range(1..=3)));
        }
    };
    for i in 1..n {
        let parent = order[rng.gen_range(0..i)];
        add(order[i], parent, &mut rng, &mut pairs);
    }
    // Every rank gets a second neighbour where it can (a leaf would bound every collective).
    for r in 0..n {
        let degree = |pairs: &RankPairs| pairs.iter().filter(|p| p.0 == r || p.1 == r).count();
        while degree(&pairs) < 2.min(n - 1) && pairs.len() < target {
            add(r, rng.gen_range(0..n), &mut rng, &mut pairs);
        }
    }
    while pairs.len() < target {
        let (a, b) = (rng.gen_range(0..n), rng.gen_range(0..n));
        add(a, b, &mut rng, &mut pairs);
    }
    Ok(pairs)
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
        "hypercube" => n.saturating_mul(n.trailing_zeros() as usize),
        _ => n.saturating_mul(2),
    };
    super::check_size(n, links)?;
    let mut pairs: RankPairs = Vec::new();
    let mut switches = Vec::new();
    match name {
        "ring" => pairs.extend((0..n).map(|i| (i, (i + 1) % n, 1))),
        "line" => pairs.extend((0..n - 1).map(|i| (i, i + 1, 1))),
        "hypercube" => {
            if !n.is_power_of_two() {
                bail!("hypercube needs a power-of-two rank count, got {n}");
            }
            for i in 0..n {
                let mut bit = 1;
                while bit < n {
                    if i & bit == 0 {
                        pairs.push((i, i | bit, 1));
                    }
                    bit <<= 1;
                }
            }
        }
        "fully-connected" | "hub-and-spoke" | "shared-hub" => {
            for i in 0..n {
                pairs.extend((i + 1..n).map(|j| (i, j, 1)));
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
        "star" => pairs.extend((1..n).map(|i| (0, i, 1))),
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
        let torus = generate("torus-2d", GenSize::Grid(vec![4, 4]), 1.0, 0.0).unwrap();
        assert_eq!(torus.ranks, 16);
        assert_eq!(torus.links.len(), 64);
        let t2 = generate("torus-2d", GenSize::Grid(vec![2, 3]), 1.0, 0.0).unwrap();
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
        assert_eq!(parse_size("4x4").unwrap(), GenSize::Grid(vec![4, 4]));
        assert!(generate("ring", GenSize::Ranks(1), 1.0, 0.0).is_err());
        assert!(generate("torus-2d", GenSize::Ranks(4), 1.0, 0.0).is_err());
    }

    /// Out-degree of every rank.
    fn degrees(t: &Topology) -> Vec<usize> {
        (0..t.ranks).map(|r| t.out_neighbors(r).len()).collect()
    }

    #[test]
    fn tori_meshes_and_hypercubes_have_the_expected_links() {
        let t3 = generate("torus-3d", parse_size("4x4x4").unwrap(), 1.0, 0.0).unwrap();
        assert_eq!((t3.ranks, t3.links.len()), (64, 384));
        assert!(degrees(&t3).iter().all(|&d| d == 6));
        assert_eq!(t3.name, "torus-3d:4x4x4");
        let mesh = generate("mesh-2d", parse_size("3x4").unwrap(), 1.0, 0.0).unwrap();
        // 3 rows of 3 horizontal pairs, 4 columns of 2 vertical pairs, both directions.
        assert_eq!(mesh.links.len(), 2 * (3 * 3 + 4 * 2));
        assert_eq!(mesh.out_neighbors(0).len(), 2);
        let cube = generate("hypercube", GenSize::Ranks(64), 1.0, 0.0).unwrap();
        assert!(degrees(&cube).iter().all(|&d| d == 6));
        assert!(cube.link(5, 5 ^ 16).is_some() && cube.link(5, 6).is_none());
        assert!(generate("hypercube", GenSize::Ranks(12), 1.0, 0.0).is_err());
        assert!(generate("torus-3d", parse_size("4x4").unwrap(), 1.0, 0.0).is_err());
        assert!(parse_size("2x2x2x2").is_err());
    }

    #[test]
    fn a_random_fabric_is_connected_reproducible_and_seed_dependent() {
        let size = parse_size("24:7").unwrap();
        assert_eq!(size, GenSize::Seeded { ranks: 24, seed: 7 });
        let bad = parse_size("24:x").unwrap_err().to_string();
        assert!(bad.contains("RANKS:SEED"), "{bad}");
        let a = generate("random", size.clone(), 25.0, 0.7).unwrap();
        let b = generate("random", size, 25.0, 0.7).unwrap();
        assert_eq!(a.links, b.links);
        assert_eq!(a.links.len(), 2 * 48);
        assert!(a.unreachable_pairs().is_empty());
        let multiples: HashSet<u64> = a
            .links
            .iter()
            .map(|l| (l.bandwidth / 25.0) as u64)
            .collect();
        assert_eq!(multiples, HashSet::from([1, 2, 3]));
        let other = generate("random", parse_size("24:8").unwrap(), 25.0, 0.7).unwrap();
        assert_ne!(a.links, other.links);
    }

    #[test]
    fn huge_sizes_are_errors_not_overflows() {
        let huge = usize::MAX.to_string();
        for (name, ..) in GENERATORS {
            for size in [
                huge.clone(),
                format!("{huge}:3"),
                format!("{huge}x{huge}"),
                format!("{huge}x2x{huge}"),
            ] {
                let parsed = parse_size(&size).unwrap();
                assert!(generate(name, parsed, 1.0, 0.0).is_err(), "{name}:{size}");
            }
        }
    }
}
