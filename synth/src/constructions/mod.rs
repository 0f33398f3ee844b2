//! Structured schedules beside the tree packing: each a [`Construction`] that says which
//! problems it fits and builds its candidates, listed once in [`REGISTRY`].
//!
//! The tree engine ([`crate::trees::TreeEngine`]) packs trees and then runs every
//! construction of the registry that fits, with one failure policy: a construction that
//! fails adds a note and no candidate, the others go on. Every candidate is checked like any
//! other algorithm, and the simulation picks among them per message size. Adding a
//! construction is adding its file and its line in [`REGISTRY`].

pub mod bucket;
pub mod rails;
pub mod rings;
pub mod shallow;
pub mod shortcut_rings;
pub mod small_ip;

use crate::algorithm::Algorithm;
use crate::collective::Kind;
use crate::engine::Limits;
use crate::origin::Family;
use crate::progress::Progress;
use crate::topology::{Topology, TopologyIndex};
use anyhow::Result;

/// What a construction is built for: the non-combining problem the tree engine solves.
pub struct Context<'a> {
    /// The fabric (reversed for a dual).
    pub topology: &'a Topology,
    /// Its index.
    pub index: &'a TopologyIndex,
    /// The collective solved (allgather or broadcast).
    pub kind: Kind,
    /// Its root (broadcast).
    pub root: usize,
    /// The search's caps and deadline.
    pub limits: &'a Limits,
    /// The exact optimum rate (GB/s per root for allgather, of the root for broadcast).
    pub optimum_gbps: f64,
    /// The candidates are reversed into a combining collective afterwards: schedules known
    /// to lose only there are left out.
    pub for_dual: bool,
    /// The candidates are one phase of a composed collective (an allreduce's reduce-scatter
    /// or allgather): schedules that win only standing alone are left out.
    pub half: bool,
    /// Progress display.
    pub progress: &'a Progress,
}

/// A structured schedule: which problems it fits and its candidates there.
pub trait Construction: Sync {
    /// What it builds, as progress shows it and a note names it when it fails.
    fn name(&self) -> &'static str;
    /// Whether it applies to the collective and the fabric's shape (a cheap test).
    fn fits(&self, cx: &Context) -> bool;
    /// Its candidates on a problem it fits (none where it finds nothing within its bounds).
    fn build(&self, cx: &Context) -> Result<Vec<Algorithm>>;
    /// Whether it makes algorithms of `family`.
    fn makes(&self, family: &Family) -> bool;
    /// Whether its candidates are a floor the result must not fall below (NCCL's own
    /// schedule), built even once the search's time is up.
    fn is_floor(&self) -> bool {
        false
    }
    /// How it lays out an allreduce composed of its own reduce-scatter and allgather
    /// (renumbered, in messages, ...); `None` keeps the composition as it is.
    fn allreduce_pair(&self) -> Option<PairLayout> {
        None
    }
}

/// A construction's layout of an allreduce composed of two of its halves.
pub type PairLayout = fn(&Algorithm) -> Result<Algorithm>;

/// The layout the construction that makes `family` gives an allreduce of two such halves.
pub fn allreduce_pair(family: &Family) -> Option<PairLayout> {
    REGISTRY
        .iter()
        .find(|c| c.makes(family))
        .and_then(|c| c.allreduce_pair())
}

/// Every construction, in the order their candidates are listed.
pub const REGISTRY: &[&dyn Construction] = &[
    &bucket::Bucket,
    &rings::NcclRings,
    &rails::RailRings,
    &shortcut_rings::ShortcutRings,
    &shortcut_rings::RailShortcutRings,
    &shallow::ShallowTrees,
];

/// The candidates of every construction of [`REGISTRY`] that fits `cx` (with `floors_only`,
/// of those that are a floor: the search is out of time), and a note for each that failed.
pub fn candidates(cx: &Context, floors_only: bool) -> (Vec<Algorithm>, Vec<String>) {
    let mut algorithms = Vec::new();
    let mut notes = Vec::new();
    for construction in REGISTRY {
        if !construction.fits(cx) || (floors_only && !construction.is_floor()) {
            continue;
        }
        cx.progress.message(construction.name());
        match construction.build(cx) {
            Ok(found) => algorithms.extend(found),
            Err(e) => {
                let note = format!("no {} candidate: {e:#}", construction.name());
                cx.progress.message(&note);
                notes.push(note);
            }
        }
    }
    (algorithms, notes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::load;
    use std::time::{Duration, Instant};

    fn limits() -> Limits {
        Limits::new(16, 8, Instant::now() + Duration::from_secs(60))
    }

    /// The candidates of the registry for an allgather on `spec`, by family.
    fn families(spec: &str) -> Vec<Family> {
        let topology = load(spec).unwrap();
        let index = topology.index();
        let limits = limits();
        let progress = Progress::hidden();
        let cx = Context {
            topology: &topology,
            index: &index,
            kind: Kind::AllGather,
            root: 0,
            limits: &limits,
            optimum_gbps: 1.0,
            for_dual: false,
            half: false,
            progress: &progress,
        };
        let (found, notes) = candidates(&cx, false);
        assert!(notes.is_empty(), "{notes:?}");
        for a in &found {
            crate::check::check(a, &topology).unwrap();
        }
        found.into_iter().map(|a| a.origin.family).collect()
    }

    #[test]
    fn only_the_bucket_lays_out_its_allreduce_pairs() {
        assert!(allreduce_pair(&Family::Bucket).is_some());
        for family in [Family::Rings, Family::Trees, Family::RailShortcutRings] {
            assert!(allreduce_pair(&family).is_none(), "{family:?}");
        }
    }

    #[test]
    fn every_construction_has_its_own_name() {
        let mut names: Vec<&str> = REGISTRY.iter().map(|c| c.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), REGISTRY.len());
    }

    #[test]
    fn the_registry_builds_what_fits_the_fabric() {
        // A square torus: the bucket takes the rings' place.
        assert_eq!(families("torus-2d:4x4"), vec![Family::Bucket]);
        // A rectangular one: NCCL's rings.
        assert_eq!(families("torus-2d:3x4"), vec![Family::Rings]);
        // Identical nodes joined by rails: rings and rail rings.
        let cluster = families("dgx-a100x2");
        assert_eq!(cluster[0], Family::Rings);
        assert!(cluster[1..]
            .iter()
            .all(|f| matches!(f, Family::Rails { .. })));
    }
}
