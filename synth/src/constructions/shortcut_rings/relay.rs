//! Relayed rail shortcut rings: some remote rounds end a package early and the rank they
//! would have entered gets the piece from its rail peer over its own NIC.

use super::cycles::Ring;
use super::layout::{schedule, NO_SHORTCUT, SHORTCUT};
use crate::algorithm::Algorithm;
use crate::collective::Kind;
use crate::origin::Family;
use crate::topology::{Capacities, Topology, TopologyIndex};
use anyhow::Result;

/// The rail shortcut rings with remote pieces relayed over several NICs: some remote rounds
/// end a package early ([`relayed_drops`]), and the GCD that package's ring hop led to gets
/// the piece over its own NIC from its rail peer, which holds it by then (its node ran the
/// same hop a round before). Each package then takes fewer pieces over its xGMI links and
/// more over its NICs, as the exact optimum does (`mi250-16x2`: the rings alone carry 28
/// ranks' data into a package over xGMI, rate 332.1 GB/s busbw; the optimum, 343.1, brings
/// 1.45 ranks' data in over each NIC). For each wave count in `waves`, the drop count of the
/// highest rate on the busiest link (NICs included); candidates: the fewest waves (an
/// allreduce pairs it with the reduce-scatter of as many pieces), and the fewest whose rate
/// reaches 99.5% of `optimum_gbps` (per root), else the best rate of all. None where no
/// drop raises the rate. For allgathers only: reversed into a reduce-scatter it simulated at
/// 240 GB/s at 1 GB on `mi250-16x2` against the plain waves' 317.
pub(super) fn relayed(
    topology: &Topology,
    index: &TopologyIndex,
    nodes: &[Vec<usize>],
    rings: &[Ring],
    waves: std::ops::RangeInclusive<usize>,
    optimum_gbps: f64,
) -> Result<Vec<Algorithm>> {
    let fewest = *waves.start();
    // The fewest waves' candidate, and the best of more waves.
    let mut first: Option<(f64, Algorithm)> = None;
    let mut more: Option<(f64, Algorithm)> = None;
    for w in waves {
        let Some((rate, a)) = best_drops(topology, index, nodes, rings, w, RELAYED)? else {
            continue;
        };
        let slot = if w == fewest { &mut first } else { &mut more };
        if slot.as_ref().is_none_or(|(r, _)| rate > *r) {
            *slot = Some((rate, a));
        }
        if rate >= 0.995 * optimum_gbps {
            break;
        }
    }
    let floor = first.as_ref().map_or(0.0, |(r, _)| *r);
    let more = more.filter(|(r, _)| *r > floor);
    Ok(first.into_iter().chain(more).map(|(_, a)| a).collect())
}

/// The relayed schedule of `waves` waves with the drop count ([`relayed_drops`]) of the
/// highest per-root rate on the busiest link (NICs included), and that rate; `None` where
/// no drop raises the rate.
pub(super) fn best_drops(
    topology: &Topology,
    index: &TopologyIndex,
    nodes: &[Vec<usize>],
    rings: &[Ring],
    waves: usize,
    family: Family,
) -> Result<Option<(f64, Algorithm)>> {
    let caps = index.capacities.as_ref().expect("checked by rail_nodes");
    let plain = schedule(topology, index, nodes, rings, waves, &[], family.clone())?;
    let mut best = (rate_gbps(&plain, index, caps), None);
    for s in 1..=2 * waves {
        let drops = relayed_drops(waves, s);
        let a = schedule(topology, index, nodes, rings, waves, &drops, family.clone())?;
        let rate = rate_gbps(&a, index, caps);
        if rate <= best.0 * (1.0 + 1e-9) {
            break;
        }
        best = (rate, Some(a));
    }
    Ok(match best {
        (rate, Some(a)) => Some((rate, a)),
        _ => None,
    })
}

/// The relayed rail shortcut rings ([`relayed`]) in `waves` waves, each link's sends
/// reordered by list scheduling at the reference size ([`crate::layout::retime`]): the waves'
/// step order makes links idle at their seams (3 waves: 10–47 µs, 5 waves up to 78 µs on
/// `mi250-16x2`), while the list schedule keeps the links busy and, with finer pieces,
/// shortens the drain. `None` where no drop raises the rate or the schedule does not
/// qualify.
pub(super) fn relayed_retimed(
    topology: &Topology,
    index: &TopologyIndex,
    nodes: &[Vec<usize>],
    rings: &[Ring],
    waves: usize,
) -> Result<Option<Algorithm>> {
    let Some((_, a)) = best_drops(topology, index, nodes, rings, waves, RELAYED)? else {
        return Ok(None);
    };
    let family = Family::RailShortcutRelay { retimed: true };
    let piece_bytes = crate::layout::reference::piece_bytes(topology, Kind::AllGather, a.chunks());
    let retimed = crate::layout::retime::retimed(&a, topology, index, piece_bytes, family)?;
    Ok(retimed.map(|(a, _)| a))
}

/// The family of [`relayed`]'s candidates.
pub(super) const RELAYED: Family = Family::RailShortcutRelay { retimed: false };

/// The `drops` of [`schedule`] that end `s` pieces early per link into a package and per
/// wave count `waves`: both kinds in the last wave first (its hops are the drain), then the
/// pieces of shortcut roots in the waves before it, latest first, then the others.
pub(super) fn relayed_drops(waves: usize, s: usize) -> Vec<u8> {
    let mut drops = vec![0u8; waves];
    let order = std::iter::once((waves - 1, SHORTCUT))
        .chain(std::iter::once((waves - 1, NO_SHORTCUT)))
        .chain((0..waves - 1).rev().map(|w| (w, SHORTCUT)))
        .chain((0..waves - 1).rev().map(|w| (w, NO_SHORTCUT)));
    for (w, kind) in order.take(s) {
        drops[w] |= kind;
    }
    drops
}

/// Per-root rate (GB/s) of `algorithm` on its busiest link: pieces per root times the
/// capacity unit over the busiest link's pieces per capacity unit.
pub(super) fn rate_gbps(algorithm: &Algorithm, index: &TopologyIndex, caps: &Capacities) -> f64 {
    let sends = algorithm.steps.iter().flat_map(|s| &s.sends);
    let load = crate::load::Loads::of(index, caps.switches.len(), sends).links;
    let busiest = load
        .iter()
        .zip(&caps.links)
        .map(|(&l, &c)| l as f64 / f64::from(c))
        .fold(0.0, f64::max);
    algorithm.chunks() as f64 * caps.unit_gbps / busiest
}
