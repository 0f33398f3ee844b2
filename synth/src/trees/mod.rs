//! The tree-packing engine (`--method trees`): throughput-optimal allgather and broadcast by
//! packing spanning out-trees (ForestColl style), the other collectives by duality.
//!
//! 1. The exact optimum rate comes from maximum flow ([`crate::flow`]).
//! 2. Trees are packed fractionally by column generation ([`packing`]), one representative
//!    root per orbit of a semiregular symmetry group (translations), until the packing
//!    reaches the optimum or no cheaper tree exists.
//! 3. Weights become integer piece counts and the trees a k-synchronous schedule
//!    ([`schedule`]), checked like every other algorithm, its steps grouped in pipeline
//!    stages that the lowering puts on channels of their own ([`crate::layout::groups::step_groups`]).
//! 4. Beside them, every structured schedule of [`crate::constructions::REGISTRY`] that fits
//!    the problem (NCCL's rings as paths, the torus bucket, rail rings, shortcut rings,
//!    shallow broadcast trees).
//!
//! Switch constraints (NVSwitch ports, NICs) are resources of the packing, so trees use only
//! rank-to-rank links and need no Steiner vertices. Reduce-scatter and reduce are solved as
//! the allgather and broadcast of the reversed fabric by [`crate::synthesize`]; allreduce is
//! reduce-scatter followed by allgather.

pub mod arborescence;
mod grown;
pub mod integer;
pub mod listed;
pub mod packing;
mod per_root;
pub mod rounding;
pub mod schedule;

use crate::algorithm::Algorithm;
use crate::bounds::{cut_bounds, Bounds};
use crate::collective::{Collective, Kind};
use crate::constructions::{self, Context};
use crate::engine::{Engine, Found, Limits, Problem, Search};
use crate::flow::{allgather_rate, broadcast_rate, FlowNetwork};
use crate::topology::{Topology, TopologyIndex, Translations};
use anyhow::{bail, Result};
use packing::{pack, Orbits};

/// What tree packing found, with the rates that judge it (GB/s per root for allgather, of
/// the root for broadcast).
#[derive(Debug, Clone)]
pub struct TreeResult {
    /// The algorithm: the fewest pieces per root whose rounding is within 0.1% of the best
    /// piece count tried (more pieces of the same trees simulate slower: more threadblocks),
    /// or, when its steps are grouped in stages, the count best after a slice of pipeline
    /// fill at 1 GB.
    pub algorithm: Algorithm,
    /// The same layout at the fewest pieces whose rounding is the best tried, where the
    /// algorithm took fewer, larger pieces for pipelining (the simulation picks between them),
    /// with its list-scheduled twin.
    pub best_rate: Option<(Algorithm, Option<Algorithm>)>,
    /// The same pieces and trees list-scheduled one round per step (more steps, fewer
    /// rounds); `None` when that schedule passes its step cap.
    pub listed: Option<Algorithm>,
    /// The trees grown step by step under the symmetry group ([`grown`]), where they reach
    /// a better rate than the packing's piece counts (a 1024-rank torus at one piece per
    /// root).
    pub grown: Option<Algorithm>,
    /// The grown trees at finer pieces, where those pipeline better at large sizes
    /// ([`grown::Grown`]): the same rate in more steps, so kept beside the frontier.
    pub grown_finer: Option<Algorithm>,
    /// The list schedules at finer pieces (one per cap of [`FINER_CHUNKS`] that gives a
    /// count of its own), where no schedule of the trees takes the optimum's rounds: fewer
    /// rounds per piece in more steps, so kept beside the frontier.
    pub listed_finer: Vec<Algorithm>,
    /// With [`Depth::Both`], the schedules of the shallowest trees at the optimum
    /// ([`packing::shallower`]) that the first packing's do not have.
    pub shallow: Vec<Algorithm>,
    /// The exact optimum rate (maximum flow).
    pub optimum_gbps: f64,
    /// The rate of the fractional packing.
    pub packing_gbps: f64,
    /// The rate of the integer piece counts scheduled (the best-rate counts where they are
    /// scheduled beside the pipelined ones).
    pub scheduled_gbps: f64,
    /// Order of the symmetry group used.
    pub symmetry: usize,
    /// Column-generation rounds.
    pub rounds: usize,
    /// The search's deadline passed before every candidate was built (the list-scheduled
    /// ones are left out then).
    pub out_of_time: bool,
}

impl TreeResult {
    /// The schedules the engine offers: of the two tree schedules, those not dominated in
    /// (steps, rounds per chunk); the grown trees where those do not dominate them (never
    /// the reverse: a grown step puts an edge through a NIC from each of the GPUs sharing it,
    /// which the runtime runs side by side, so four 2x2x2 tori with a NIC per two GPUs
    /// simulate the list schedule's 44 steps faster at 1 GB than the grown trees' 36); the
    /// same at the best-rate piece count beside them (fewer rounds per chunk, so they would
    /// dominate the pipelined ones that simulate faster); the grown trees at finer pieces
    /// (dominated in steps, faster at large sizes); the shallowest trees' schedules (fewer
    /// steps and rounds, yet not always faster).
    fn candidates(self) -> Vec<Algorithm> {
        let mut algorithms = crate::frontier::pareto_filter(
            [self.algorithm].into_iter().chain(self.listed).collect(),
        );
        crate::frontier::extend_undominated(&mut algorithms, self.grown, |k, g| {
            let (s, r) = (k.num_steps(), k.rounds_per_chunk());
            (s, r) != (g.num_steps(), g.rounds_per_chunk())
                && s <= g.num_steps()
                && r <= g.rounds_per_chunk()
        });
        if let Some((depth, listed)) = self.best_rate {
            algorithms.extend(crate::frontier::pareto_filter(
                [depth].into_iter().chain(listed).collect(),
            ));
        }
        algorithms.extend(self.grown_finer);
        algorithms.extend(self.listed_finer);
        algorithms.extend(crate::frontier::pareto_filter(self.shallow));
        algorithms
    }

    /// Marks every schedule it holds as scheduled on a view of the fabric (`view` sets the
    /// origin's flag: `-rv`, `-sv`).
    fn on_a_view(&mut self, view: impl Fn(&mut crate::origin::Origin)) {
        let mark = |a: &mut Algorithm| {
            view(&mut a.origin);
            *a = a.clone().renamed();
        };
        mark(&mut self.algorithm);
        let best_rate = self
            .best_rate
            .iter_mut()
            .flat_map(|(a, l)| std::iter::once(a).chain(l));
        (self
            .listed
            .iter_mut()
            .chain(&mut self.grown)
            .chain(&mut self.grown_finer)
            .chain(&mut self.listed_finer))
        .chain(best_rate)
        .chain(&mut self.shallow)
        .for_each(mark);
    }

    /// Every schedule it holds.
    fn algorithms(&self) -> impl Iterator<Item = &Algorithm> {
        let best_rate = self
            .best_rate
            .iter()
            .flat_map(|(a, l)| std::iter::once(a).chain(l));
        std::iter::once(&self.algorithm)
            .chain(&self.listed)
            .chain(&self.grown)
            .chain(&self.grown_finer)
            .chain(&self.listed_finer)
            .chain(best_rate)
            .chain(&self.shallow)
    }
}

/// Which tree packings at the optimum the schedules come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Depth {
    /// The first that column generation finds.
    First,
    /// The one with the shallowest trees ([`packing::shallower`]).
    Shallow,
    /// The first, and the shallowest one's schedules beside its own
    /// ([`TreeResult::shallow`]).
    Both,
}

/// Packs trees for `coll` (allgather or broadcast, any C) on `topology`: with `depth`, from
/// which packings at the optimum (column generation's only; whole trees are kept as built);
/// `phases` of them make one program (2: an allreduce's halves), which the XML must hold.
#[allow(clippy::too_many_arguments)]
pub fn synthesize_trees(
    topology: &Topology,
    index: &TopologyIndex,
    coll: &Collective,
    limits: &Limits,
    progress: &crate::progress::Progress,
    depth: Depth,
    phases: usize,
) -> Result<TreeResult> {
    let (group, roots, optimum) = optimum(topology, index, coll, progress)?;
    let optimum_gbps = *optimum.numer() as f64 / *optimum.denom() as f64;
    progress.message(&format!("packing whole trees for {} root(s)", roots.len()));
    let (mut packing, generated) = match integer::pack_integer(topology, &group, &roots, optimum) {
        Some(p) => (p, false),
        None => {
            progress.message(&format!("packing trees for {} root(s)", roots.len()));
            let p = pack(
                topology,
                index,
                &group,
                &roots,
                Some(optimum_gbps),
                limits.deadline,
            )?;
            (p, true)
        }
    };
    // The shallowest trees at the optimum, where column generation reached it.
    let mut shallow =
        (depth != Depth::First && packing.rate_gbps >= optimum_gbps * (1.0 - 1e-9) && generated)
            .then(|| packing::shallower(topology, index, &packing, limits.deadline))
            .flatten();
    if depth == Depth::Shallow {
        if let Some(p) = shallow.take() {
            packing = p;
        }
    }
    let mut result = schedules_of(
        topology,
        index,
        coll,
        limits,
        progress,
        packing,
        (optimum_gbps, phases),
    )?;
    // Neither packing's trees win everywhere (eight DGX-1s: the shallow allgather is faster
    // at 1 GB, the reduce-scatter of the first packing): both go on, the simulation decides.
    if let Some(p) = shallow {
        progress.message("scheduling the shallowest trees");
        let other = schedules_of(
            topology,
            index,
            coll,
            limits,
            progress,
            p,
            (optimum_gbps, phases),
        )?;
        let new: Vec<Algorithm> = (other.algorithms())
            .filter(|a| {
                !(result.algorithms()).any(|k| k.steps == a.steps && k.step_groups == a.step_groups)
            })
            .cloned()
            .collect();
        result.out_of_time |= other.out_of_time;
        result.shallow = new;
    }
    Ok(result)
}

/// The schedules of `packing` (at the exact optimum `optimum_gbps` per root) for `coll`, in
/// programs of `phases` such layouts.
fn schedules_of(
    topology: &Topology,
    index: &TopologyIndex,
    coll: &Collective,
    limits: &Limits,
    progress: &crate::progress::Progress,
    mut packing: packing::Packing,
    (optimum_gbps, phases): (f64, usize),
) -> Result<TreeResult> {
    let group = packing.group.clone();
    let roots: Vec<usize> = packing.roots.iter().map(|r| r.root).collect();
    add_symmetric_images(topology, index, &mut packing);
    let mut out_of_time = false;
    let pool: usize = packing.roots.iter().map(|r| r.trees.len()).sum();
    progress.message(&format!("rounding the packing ({pool} trees) to pieces"));
    let round = shared_rounding(topology, index, &packing);
    let cap = expressible_chunks(topology).min(limits.max_chunks).max(1);
    // Only counts whose every rank's steps fit the XML parser, in a program of `phases` such
    // layouts (one piece per root always stays): a rank that relays for many roots sends far
    // more than the average that `expressible_chunks` assumes (random:96:13's allreduce
    // composed of 7 pieces per root did not load).
    let fits = |o: &rounding::ChunkOption| {
        o.chunks == 1 || fits_the_xml(topology, &packing, coll.kind, o, phases)
    };
    let mut options: Vec<rounding::ChunkOption> = (1..=cap).map(&round).filter(fits).collect();
    let best_shared = options.iter().map(|o| o.rate).fold(0.0, f64::max);
    // Grown under a group that maps the fabric to itself: first where the packing's pieces
    // shared by an orbit lose more than 0.1% (the rounding then weighs the grown rate), and
    // later, where they do not, if their schedules by depth and by list take more rounds
    // than the optimum (torus-2d 2x8: 7 and 6 rounds per piece where every link busy in
    // every step takes 5).
    let rounding_loses = best_shared < packing.rate_gbps * (1.0 - 1e-3);
    let grows = coll.kind == Kind::AllGather && group.order() > 1;
    // The grown trees, and whether the deadline stopped them.
    let grow = |work: u64| -> (Option<grown::Grown>, bool) {
        progress.message("growing trees step by step");
        // Like the structured schedules, past the default piece cap unless one was given:
        // whole pieces reach the optimum only at its denominator (13 on two DGX-A100s).
        let mut chunks = expressible_chunks(topology);
        if limits.max_chunks_given {
            chunks = chunks.min(limits.max_chunks);
        }
        let deadline = limits.deadline;
        let limits = (chunks.max(1), work);
        grown::grown(topology, &group, &roots, limits, optimum_gbps, deadline)
            .inspect(|g| {
                if let Some(g) = g {
                    progress.message(&format!(
                        "grown trees: {} piece(s) per root in {} steps, {:.3} GB/s per root",
                        g.algorithm.chunks(),
                        g.algorithm.steps.len(),
                        g.rate
                    ));
                }
            })
            .map(|g| (g, false))
            .unwrap_or_else(|e| {
                progress.message(&format!("no grown candidate: {e:#}"));
                (None, e.is::<listed::OutOfTime>())
            })
    };
    let (grown, late) = if grows && rounding_loses {
        grow(grown::MAX_WORK)
    } else {
        (None, false)
    };
    out_of_time |= late;
    // Where the grown trees come within 0.5% of the optimum, the depth schedule is kept for
    // its fewer steps only, and its piece counts are not balanced root by root (whole pieces
    // leave a balance no better than the grown trees' on a fabric they fit).
    let balance_roots = grown
        .as_ref()
        .is_none_or(|g| g.rate < optimum_gbps * (1.0 - 5e-3));
    // Where neither the counts within the cap nor the grown trees come within 0.1% of the
    // allgather packing, more pieces per root, up to the packing's exact denominator (amd8:
    // 38) or [`MAX_PIECES_PAST_CAP`].
    let capped = options.len();
    let grown_reaches = grown
        .as_ref()
        .is_some_and(|g| g.rate >= packing.rate_gbps * (1.0 - 1e-3));
    if coll.kind == Kind::AllGather && rounding_loses && !limits.max_chunks_given && !grown_reaches
    {
        progress.message("rounding the packing to more pieces");
        options.extend(
            counts_past_cap(topology, &packing, cap, &round)
                .into_iter()
                .filter(fits),
        );
    }
    let (algorithm, choice, best_rate) = depth_schedule(
        topology,
        index,
        &packing,
        coll.kind,
        (options, capped),
        balance_roots,
    )?;
    progress.message("list-scheduling the trees");
    // Whether the deadline stopped a list schedule.
    let listed_late = std::cell::Cell::new(false);
    let listed_at = |choice: &rounding::ChunkOption| {
        let listed = listed_candidate(topology, index, &packing, coll.kind, choice, limits);
        match listed {
            Ok(a) => Some(a),
            Err(e) => {
                listed_late.set(listed_late.get() | e.is::<listed::OutOfTime>());
                progress.message(&format!("no list-scheduled candidate: {e:#}"));
                None
            }
        }
    };
    let listed = listed_at(&choice);
    let scheduled_gbps = best_rate.as_ref().map_or(choice.rate, |(_, c)| c.rate);
    // The piece count of the best-rate layout, where it is not the pipelined one.
    let best_count = best_rate.as_ref().map(|(_, c)| c.chunks);
    let best_rate = best_rate.map(|(a, c)| (a, listed_at(&c)));
    // The rate the depth and list schedules reach in their rounds (below the rounding's
    // where a step cannot fill every link: 3 x 25/30 GB/s per root on four 2x2x2 tori with a
    // NIC per two GPUs, whose rounding gives 2.778).
    let unit = schedule::capacities(topology, index)?.unit_gbps;
    let rate = |a: &Algorithm| a.chunks() as f64 * unit / a.rounds().max(1) as f64;
    let stepped = (std::iter::once(&algorithm).chain(&listed))
        .map(rate)
        .fold(0.0, f64::max);
    let (grown, bar) = if rounding_loses {
        (grown, scheduled_gbps.min(stepped))
    } else {
        let loses = stepped < optimum_gbps * (1.0 - 1e-3);
        let (grown, late) = if grows && loses {
            grow(LATE_GROWTH_WORK)
        } else {
            (None, false)
        };
        out_of_time |= late;
        (grown, stepped)
    };
    let grown = grown.filter(|g| g.rate > bar * (1.0 + 1e-3));
    // Where no schedule reaches the optimum in its rounds (the grown trees included) and the
    // list schedule's pieces span two or more slices at 1 GB, the same trees at the most
    // pieces within each cap of [`FINER_CHUNKS`] that are a multiple of its count (of the
    // best-rate count where that one is laid out too), list-scheduled: the extra rounds
    // spread over more pieces (four 4-GPU cliques on a ring: one piece per root in 7 rounds
    // where the optimum takes 6, sixteen in 97), and finer pieces pipeline better at large
    // sizes, like the grown trees'.
    let grown_at_optimum = grown
        .as_ref()
        .is_some_and(|g| g.rate >= optimum_gbps * (1.0 - 1e-3));
    let best_listed = best_rate.as_ref().and_then(|(_, l)| l.as_ref());
    let reached = best_listed.map_or(stepped, |l| stepped.max(rate(l)));
    // Per piece cap, the most pieces that are a multiple of the list schedule's count (the
    // best-rate count's where a multiple of that fits), within the parser's limit in a
    // program of `phases` such layouts and a given `--max-chunks`.
    let mut listed_finer: Vec<Algorithm> = Vec::new();
    let slow = reached < optimum_gbps * (1.0 - 1e-3) && !grown_at_optimum;
    let best = best_count.zip(best_listed);
    for cap in FINER_CHUNKS.into_iter().filter(|_| slow) {
        let mut most = (expressible_chunks(topology) / phases).min(cap);
        if limits.max_chunks_given {
            most = most.min(limits.max_chunks);
        }
        let base = (best.into_iter())
            .chain(std::iter::once(choice.chunks).zip(listed.as_ref()))
            .find(|&(count, _)| most / count > 1);
        let Some((base, a)) = base else { continue };
        let fine = most / base * base;
        let slices = crate::layout::reference::slices(topology, Kind::AllGather, base);
        if slices < 2.0 || listed_finer.iter().any(|f| f.chunks() == fine) {
            continue;
        }
        let option = Some(round(fine)).filter(|o| o.rate >= choice.rate * (1.0 - 1e-9) && fits(o));
        listed_finer.extend(
            option
                .and_then(|o| listed_at(&o))
                .filter(|f| rate(f) > rate(a) * (1.0 + 1e-3)),
        );
    }
    out_of_time |= listed_late.get();
    let (grown, grown_finer) = match grown {
        Some(g) => (
            Some(staged(topology, index, g.algorithm)),
            g.finer.map(|a| staged(topology, index, a)),
        ),
        None => (None, None),
    };
    Ok(TreeResult {
        algorithm,
        best_rate,
        listed,
        grown,
        grown_finer,
        listed_finer,
        shallow: Vec::new(),
        optimum_gbps,
        packing_gbps: packing.rate_gbps,
        scheduled_gbps,
        symmetry: group.order(),
        rounds: packing.rounds,
        out_of_time,
    })
}

/// The packing's trees at the piece counts of `choice`, list-scheduled one round per step:
/// a candidate beside the depth schedule, which the caller leaves out (not fatal) past its
/// step cap or the deadline ([`listed::OutOfTime`]).
fn listed_candidate(
    topology: &Topology,
    index: &TopologyIndex,
    packing: &packing::Packing,
    kind: Kind,
    choice: &rounding::ChunkOption,
    limits: &Limits,
) -> Result<Algorithm> {
    let (chunks, counts) = (choice.chunks, &choice.counts);
    let a = listed::list_scheduled(
        topology,
        index,
        packing,
        kind,
        chunks,
        counts,
        MAX_LISTED_STEPS,
        limits.deadline,
    )?;
    Ok(staged(topology, index, a))
}

/// The symmetry group to pack under, its representative roots and the exact optimum rate
/// (GB/s per root) of `coll`; an error where the fabric is not connected.
fn optimum(
    topology: &Topology,
    index: &TopologyIndex,
    coll: &Collective,
    progress: &crate::progress::Progress,
) -> Result<(Translations, Vec<usize>, num_rational::Ratio<i128>)> {
    let net = FlowNetwork::new(topology)?;
    let (group, roots, optimum) = match coll.kind {
        Kind::AllGather => {
            progress.message("finding the fabric's translations");
            let group = packing::packing_group(topology, index);
            let roots = group.representatives();
            progress.message("computing the exact bandwidth optimum");
            let rate = allgather_rate(&net, &roots)?;
            (group, roots, rate)
        }
        Kind::Broadcast => {
            let rate = broadcast_rate(&net, coll.root)?;
            (Translations::trivial(topology.ranks), vec![coll.root], rate)
        }
        other => bail!("the tree-packing engine builds allgather and broadcast (and by duality reduce-scatter, reduce and allreduce), not {other}"),
    };
    if optimum.as_f64() <= 0.0 {
        bail!(
            "`{}` is not connected: {} cannot reach every rank",
            topology.name,
            optimum.describe_cut()
        );
    }
    Ok((group, roots, optimum.gbps))
}

/// A schedule and the piece counts it was laid out at.
type Scheduled = (Algorithm, rounding::ChunkOption);

/// The packing's trees laid out by depth in stages ([`TreeResult::algorithm`]) at the piece
/// count chosen for it, that choice, and the layout at the fewest pieces of the best rate
/// where the choice took fewer ([`TreeResult::best_rate`]). `options` are the rounded
/// counts, the first `capped` of them within the piece cap: the choice is among those, and
/// the best rate among all. With `balance_roots`, where counts shared by an orbit lose
/// within the cap, each root chooses its own trees' images there.
fn depth_schedule(
    topology: &Topology,
    index: &TopologyIndex,
    packing: &packing::Packing,
    kind: Kind,
    (mut options, capped): (Vec<rounding::ChunkOption>, usize),
    balance_roots: bool,
) -> Result<(Algorithm, rounding::ChunkOption, Option<Scheduled>)> {
    // Where counts shared by an orbit lose more than 0.1% of the packing's rate within the
    // pieces the runtimes can hold, each root chooses its own trees' images.
    let best_shared = options[..capped].iter().map(|o| o.rate).fold(0.0, f64::max);
    if balance_roots && packing.group.order() > 1 && best_shared < packing.rate_gbps * (1.0 - 1e-3)
    {
        // One budget of work for all the counts, shared out as it is left.
        let mut budget = per_root::MAX_WORK;
        for (k, option) in options[..capped].iter_mut().enumerate() {
            let chunks = option.chunks;
            let rounding::PieceCounts::Orbit(shared) = &option.counts else {
                continue;
            };
            let mut share = budget / (capped - k) as u64;
            budget -= share;
            let found =
                per_root::per_root_counts(topology, index, packing, chunks, shared, &mut share);
            budget += share;
            if let Some((counts, time)) = found {
                let balanced = rounding::ChunkOption {
                    chunks,
                    counts,
                    rate: 1.0 / time,
                };
                if balanced.rate > option.rate
                    && fits_the_xml(topology, packing, kind, &balanced, 1)
                {
                    *option = balanced;
                }
            }
        }
    }
    let build = |choice: &rounding::ChunkOption| -> Result<Algorithm> {
        let (chunks, counts) = (choice.chunks, &choice.counts);
        let a = schedule::algorithm(topology, index, packing, kind, chunks, counts, false)?;
        Ok(staged(topology, index, a))
    };
    let best = rounding::fewest_pieces(&options);
    let mut choice = rounding::fewest_pieces(&options[..capped]);
    let mut algorithm = build(choice)?;
    let mut best_rate = None;
    if best.chunks > capped {
        // The counts past the cap reach a better rate: both go on, the simulation decides
        // (the fewer pieces win at small sizes).
        best_rate = Some((build(best)?, best.clone()));
    }
    // A schedule in stages pays about a slice period of pipeline fill at the reference size;
    // where the pieces are cut in two or more slices there, fewer, larger pieces may win.
    // Both go on: the simulation decides.
    let slices = |c: usize| crate::layout::reference::slices(topology, kind, c);
    if algorithm.step_groups.is_some() && slices(choice.chunks) >= 2.0 {
        let pipelined = rounding::best_pipelined(&options[..choice.chunks], slices);
        if pipelined.chunks != choice.chunks {
            let exact = std::mem::replace(&mut algorithm, build(pipelined)?);
            best_rate.get_or_insert((exact, choice.clone()));
            choice = pipelined;
        }
    }
    Ok((algorithm, choice.clone(), best_rate))
}

/// The packing's weights rounded to piece counts shared by each orbit, at a given number of
/// pieces per root (the orbits' usages computed once).
fn shared_rounding<'a>(
    topology: &Topology,
    index: &TopologyIndex,
    packing: &'a packing::Packing,
) -> impl Fn(usize) -> rounding::ChunkOption + 'a {
    let orbits = Orbits::new(topology, index, &packing.group).expect("checked by optimum");
    let usages = orbits.usages_of(packing, index);
    let supports = rounding::supports(&usages);
    move |chunks| {
        let uses = (&usages[..], &supports[..]);
        rounding::chunk_option(packing, uses, &orbits.bandwidth, chunks)
    }
}

/// `algorithm` in the step groups chosen for it ([`crate::layout::groups::step_groups`]).
fn staged(topology: &Topology, index: &TopologyIndex, algorithm: Algorithm) -> Algorithm {
    let groups = crate::layout::groups::step_groups(topology, index, &algorithm);
    crate::layout::groups::with_groups(algorithm, groups)
}

/// Work of the trees grown where the packing's pieces round exactly but their schedules
/// take more rounds than the optimum ([`grown::MAX_WORK`]'s unit: candidate edges weighed):
/// a twentieth of it, since the packing's schedules are there already (torus-2d 2x8 grows in
/// far less; 8 x DGX-H100 weighed 3 CPU s at the full limit for no candidate).
const LATE_GROWTH_WORK: u64 = grown::MAX_WORK / 20;

/// Most pieces per root the rounding tries past the piece cap (each count costs a rounding;
/// a broadcast packing's rounding did not come within 0.1% by 287 on amd8).
const MAX_PIECES_PAST_CAP: usize = 64;

/// Work the rounding past the piece cap may take, in trees of the pool times pieces per
/// root summed over the counts tried (the local search's cost grows with both): amd8's 81
/// trees reach their denominator 38 at 57,105; mi250-16x2's 650 trees, which no count up
/// to 64 rounds within 0.1%, stop at 18 pieces instead of costing 17 s.
const PAST_CAP_WORK: usize = 100_000;

/// The rounded counts from `capped` + 1 pieces per root up to the first whose rate is within
/// 0.1% of the packing's, within [`expressible_chunks`], [`MAX_PIECES_PAST_CAP`] and
/// [`PAST_CAP_WORK`]; none where no count gets there (hypercube:128: 98.5% at 12 pieces,
/// whose layouts simulated below the grown trees').
fn counts_past_cap(
    topology: &Topology,
    packing: &packing::Packing,
    capped: usize,
    round: impl Fn(usize) -> rounding::ChunkOption,
) -> Vec<rounding::ChunkOption> {
    let pool: usize = packing.roots.iter().map(|r| r.trees.len()).sum();
    let mut options = Vec::new();
    let mut work = 0;
    for chunks in capped + 1..=expressible_chunks(topology).min(MAX_PIECES_PAST_CAP) {
        work += pool * chunks;
        if work > PAST_CAP_WORK {
            break;
        }
        let option = round(chunks);
        let exact = option.rate >= packing.rate_gbps * (1.0 - 1e-3);
        options.push(option);
        if exact {
            return options;
        }
    }
    Vec::new()
}

/// The most pieces per root whose lowered program still fits the runtimes: an allgather puts
/// about N(N−1)·C transfers on the fabric's links, and one link's connections hold at most
/// 32 channels of 64-step threadblocks (half of that leaves room for uneven links); and a
/// rank receives (N−1)·C pieces and sends as many on average, each one step of the XML,
/// whose parser holds [`runtime::limits::MAX_RANK_ELEMENTS`] elements with the `algo` and
/// every rank's `gpu` element (room is left for [`THREADBLOCK_ROOM`] threadblocks).
fn expressible_chunks(topology: &Topology) -> usize {
    let n = topology.ranks as f64;
    let per_link = runtime::limits::Limits::PORTABLE.link_transfers() as f64 / 2.0;
    let by_links = ((per_link * topology.links.len() as f64) / (n * (n - 1.0))).floor() as usize;
    let room =
        runtime::limits::MAX_RANK_ELEMENTS.saturating_sub(1 + topology.ranks + THREADBLOCK_ROOM);
    let by_elements = room / (2 * topology.ranks.saturating_sub(1)).max(1);
    by_links.min(by_elements)
}

/// Threadblocks per rank that [`expressible_chunks`] leaves room for in the XML parser's
/// budget: RCCL's most.
const THREADBLOCK_ROOM: usize = 64;

/// Whether the trees of `packing` at the piece counts of `option`, laid out `phases` times
/// (2: both halves of an allreduce composed of them), give every rank at most as many sends
/// and receives as the XML parser holds steps beside the `algo` element, the
/// ranks' `gpu` elements and [`THREADBLOCK_ROOM`] threadblocks (each send and each receive
/// is at most one step; a hub of random:90:4 relays for many roots: at 7 pieces per root its
/// list schedule needed 6446 elements of the parser's 4095, and was left out).
fn fits_the_xml(
    topology: &Topology,
    packing: &packing::Packing,
    kind: Kind,
    option: &rounding::ChunkOption,
    phases: usize,
) -> bool {
    let room =
        runtime::limits::MAX_RANK_ELEMENTS.saturating_sub(1 + topology.ranks + THREADBLOCK_ROOM);
    let mut steps = vec![0usize; topology.ranks];
    for copy in schedule::copies(packing, kind, option.chunks, &option.counts, false) {
        let tree = &packing.roots[copy.root].trees[copy.tree].0;
        let g = &packing.group.elements[copy.element];
        for (v, p) in tree.iter().enumerate() {
            if let Some(p) = *p {
                steps[g[p] as usize] += 1;
                steps[g[v] as usize] += 1;
            }
        }
    }
    steps.iter().all(|&s| s * phases <= room)
}

/// Most steps of a list-scheduled tree algorithm.
const MAX_LISTED_STEPS: usize = 1 << 14;

/// The piece caps of the finer list schedules ([`TreeResult::listed_finer`]): the grown
/// trees' cap, and twice it where the list schedule's count has no other multiple below
/// it (3 x DGX-1 with a NIC per two GPUs: 15 pieces per root list-scheduled in 63 rounds
/// where the optimum takes 60, 30 in 123) or more pieces spread its extra rounds further
/// (four 4-GPU cliques on a ring: 7 rounds per piece where the optimum takes 6, sixteen in
/// 97, 32 in 193). Neither count wins everywhere, so each is a candidate.
const FINER_CHUNKS: [usize; 2] = [grown::MAX_CHUNKS, 2 * grown::MAX_CHUNKS];

/// Automorphisms fixing a root tried per root to vary its trees.
const STABILIZER_IMAGES: usize = 48;

/// Trees of the pool times resource orbits that [`add_symmetric_images`] fills up to (the
/// rounding keeps each tree's use of each orbit: 128 MB).
const POOL_ENTRIES: usize = 1 << 24;

/// Adds to each root's pool (with weight 0) the images of its trees under automorphisms
/// that fix the root: on a torus, the rotations of a tree use the directions evenly, which
/// integer rounding can then combine. Each root's pool grows to at most its share of
/// [`POOL_ENTRIES`] (64 roots of a fabric without symmetry would otherwise hold a hundred
/// thousand trees).
pub(crate) fn add_symmetric_images(
    topology: &Topology,
    index: &TopologyIndex,
    packing: &mut packing::Packing,
) {
    add_symmetric_images_within(topology, index, packing, POOL_ENTRIES);
}

/// [`add_symmetric_images`] with each root's pool at most its share of `entries`.
fn add_symmetric_images_within(
    topology: &Topology,
    index: &TopologyIndex,
    packing: &mut packing::Packing,
    entries: usize,
) {
    let orbits = Orbits::new(topology, index, &packing.group).map_or(1, |o| o.bandwidth.len());
    let per_root = entries / orbits.max(1) / packing.roots.len().max(1);
    for root in &mut packing.roots {
        let room = per_root.saturating_sub(root.trees.len());
        if room == 0 {
            continue;
        }
        let stabilizer = topology.automorphisms_mapping(root.root, root.root, STABILIZER_IMAGES);
        let mut known: std::collections::HashSet<packing::Tree> =
            root.trees.iter().map(|(t, _)| t.clone()).collect();
        let mut extra = Vec::new();
        'trees: for (tree, _) in &root.trees {
            for sigma in &stabilizer {
                let mut image: packing::Tree = vec![None; tree.len()];
                for (v, p) in tree.iter().enumerate() {
                    image[sigma[v]] = p.map(|p| sigma[p]);
                }
                if known.insert(image.clone()) {
                    extra.push(image);
                    if extra.len() == room {
                        break 'trees;
                    }
                }
            }
        }
        root.trees.extend(extra.into_iter().map(|t| (t, 0.0)));
    }
}

/// The tree-packing engine.
pub struct TreeEngine {
    /// The algorithms are reversed into a combining collective (reduce-scatter, reduce,
    /// allreduce) afterwards: schedules known to lose only there are left out.
    pub for_dual: bool,
    /// The collective is one phase of a composed one (an allreduce's reduce-scatter or
    /// allgather): schedules that win only standing alone are left out.
    pub half: bool,
}

impl Engine for TreeEngine {
    fn name(&self) -> &'static str {
        "trees"
    }

    fn bounds(&self, problem: &Problem) -> Result<Bounds> {
        cut_bounds(problem.topology, &(problem.make)(1)?)
    }

    fn search(&self, problem: &Problem, search: Search, limits: &Limits) -> Result<Found> {
        if let Search::Instance { .. } = search {
            bail!("--method trees chooses its own steps, rounds and chunks; drop --steps/--rounds");
        }
        let coll = (problem.make)(1)?;
        // An allreduce's halves pipeline into each other: the shallowest trees (two DGX-1s:
        // 88.2 -> 90.9 GB/s at 1 GB; eight: 50.3 -> 52.2). Standing alone, both.
        let depth = if self.half {
            Depth::Shallow
        } else {
            Depth::Both
        };
        let phases = if self.half { 2 } else { 1 };
        let result = synthesize_trees(
            problem.topology,
            problem.index,
            &coll,
            limits,
            problem.progress,
            depth,
            phases,
        )?;
        let mut complete =
            result.packing_gbps >= result.optimum_gbps * (1.0 - 1e-6) && !result.out_of_time;
        let summary = format!(
            "trees: optimum {:.3} GB/s per root, packing {:.3}, scheduled {:.3} ({} symmetries, {} LP rounds)",
            result.optimum_gbps, result.packing_gbps, result.scheduled_gbps, result.symmetry, result.rounds
        );
        if std::env::var_os("SYNTH_TRACE").is_some() {
            eprintln!("{summary}");
        }
        problem.progress.message(&summary);
        problem.progress.found(&result.algorithm);
        let optimum_gbps = result.optimum_gbps;
        let packing_gbps = result.packing_gbps;
        let mut algorithms = result.candidates();
        // The views' trees while the search has time left; a failure there is a note.
        let mut view_notes = Vec::new();
        if std::time::Instant::now() < limits.deadline {
            let shape = (depth, phases);
            match rail_view_candidates(problem, &coll, limits, shape, optimum_gbps, &algorithms) {
                Ok(on_rails) => algorithms.extend(on_rails),
                Err(e) => view_notes.push(format!("no trees on the rail view: {e:#}")),
            }
        }
        if std::time::Instant::now() < limits.deadline {
            match split_view_candidates(problem, &coll, limits, (depth, phases), packing_gbps) {
                Ok(split) => algorithms.extend(split),
                Err(e) => view_notes.push(format!("no trees on the split view: {e:#}")),
            }
        }
        let cx = Context {
            topology: problem.topology,
            index: problem.index,
            kind: coll.kind,
            root: coll.root,
            limits,
            optimum_gbps,
            for_dual: self.for_dual,
            half: self.half,
            progress: problem.progress,
        };
        // The structured schedules are built while the search has time left; past it, only
        // the floor (NCCL's rings), so that a search cut short still does not fall below it.
        let out_of_time = std::time::Instant::now() >= limits.deadline;
        if out_of_time {
            complete = false;
            (problem.progress).message(
                "time limit reached: of the structured schedules only NCCL's rings are built",
            );
        }
        let (structured, mut notes) = constructions::candidates(&cx, out_of_time);
        algorithms.extend(structured);
        notes.extend(view_notes);
        Ok(Found {
            algorithms,
            complete,
            cuts: Vec::new(),
            notes,
        })
    }
}

/// Whether some of `algorithms` put more connections on a switch constraint that links
/// between nodes cross (a NIC's in or out side, a node's uplink) than the rail view has
/// under it: each connection crosses at its share of the constraint, so over rails a 2 MiB
/// slice would cross it faster. (Eight DGX-1s, four NDv2s, two DGX-A100s: the packing's
/// schedules already keep to as many, and the view would cost CPU for nothing.)
fn more_connections_than_rails(
    algorithms: &[Algorithm],
    topology: &Topology,
    index: &TopologyIndex,
    view: &TopologyIndex,
) -> bool {
    let across = |src: usize, dst: usize| topology.node_of[src] != topology.node_of[dst];
    let mut on_view = vec![0usize; topology.switches.len()];
    for (&(src, dst), &l) in &view.link_of {
        if across(src, dst) {
            view.governing[l].iter().for_each(|&j| on_view[j] += 1);
        }
    }
    algorithms.iter().any(|a| {
        let mut used = vec![std::collections::BTreeSet::new(); topology.switches.len()];
        for s in a.steps.iter().flat_map(|s| &s.sends) {
            let link = index.link_of.get(&(s.src, s.dst));
            if let Some(&l) = link.filter(|_| across(s.src, s.dst)) {
                index.governing[l].iter().for_each(|&j| {
                    used[j].insert(l);
                });
            }
        }
        (used.iter().zip(&on_view)).any(|(links, &rails)| rails > 0 && links.len() > rails)
    })
}

/// The tree schedules of the fabric's rail view ([`crate::topology::shape::rail_view`]),
/// named `-rv`: on a fat tree, where the first packing's schedules `whole` put more
/// connections on a NIC or uplink than the view ([`more_connections_than_rails`]) and the
/// view keeps the exact optimum `optimum_gbps` (per root). On a fat tree each GPU's NIC is
/// shared by connections to every GPU of the other nodes, and the runtime moves a message's
/// 2 MiB slices at that share of the NIC, so a piece relayed on in the node waits several
/// times longer at each NIC hop than over a rail (two nodes of random 8-GPU boxes:
/// allgather 92.6% of the optimum packed on the fat tree, 99.6% over rails). Neither wins
/// everywhere (there the fat tree's grown allreduce halves overlap at 121% of the two-phase
/// optimum, over rails 99.8%), so both go on and the simulation decides.
fn rail_view_candidates(
    problem: &Problem,
    coll: &Collective,
    limits: &Limits,
    (depth, phases): (Depth, usize),
    optimum_gbps: f64,
    whole: &[Algorithm],
) -> Result<Vec<Algorithm>> {
    let Some(view) = crate::topology::shape::rail_view(problem.topology, problem.index) else {
        return Ok(Vec::new());
    };
    let index = view.index();
    if !more_connections_than_rails(whole, problem.topology, problem.index, &index) {
        return Ok(Vec::new());
    }
    let progress = problem.progress;
    progress.message("computing the rail view's optimum");
    let (_, _, on_rails) = optimum(&view, &index, coll, progress)?;
    if (*on_rails.numer() as f64 / *on_rails.denom() as f64) < optimum_gbps * (1.0 - 1e-9) {
        return Ok(Vec::new());
    }
    progress.message("packing trees on the rail view");
    let mut result = synthesize_trees(&view, &index, coll, limits, progress, depth, phases)?;
    progress.message(&format!(
        "trees on the rail view: packing {:.3} GB/s per root, scheduled {:.3} ({} symmetries)",
        result.packing_gbps, result.scheduled_gbps, result.symmetry
    ));
    result.on_a_view(|o| o.rail_view = true);
    Ok(result.candidates())
}

/// The tree schedules of the fabric's split view ([`crate::topology::shape::split_view`]),
/// named `-sv`: where several ranks share a switch constraint on both sides (two GPUs behind
/// one NIC) and the view's exact optimum keeps the fabric's packing rate `packing_gbps` (per
/// root). The runtime runs the GPUs that share a NIC side by side, each at its share, while
/// a step of the fabric's own schedules gives the whole NIC to one of them: once the slices
/// drift apart, a transfer that the step timed at the NIC's bandwidth goes at half of it,
/// and the relays behind it wait (four 2x2x2 tori on rails with a NIC per two GPUs:
/// allgather 89.3% of the optimum at 1 GB from the fabric's schedules, 99.9% from the
/// view's grown trees).
fn split_view_candidates(
    problem: &Problem,
    coll: &Collective,
    limits: &Limits,
    (depth, phases): (Depth, usize),
    packing_gbps: f64,
) -> Result<Vec<Algorithm>> {
    let Some(split) = crate::topology::shape::split_view(problem.topology) else {
        return Ok(Vec::new());
    };
    // On a fat tree also the split view of its rail view: each GPU its share of the NIC and
    // one peer per other node (three 2x4 tori with a NIC per two GPUs).
    let on_rails = crate::topology::shape::rail_view(problem.topology, problem.index)
        .and_then(|rails| crate::topology::shape::split_view(&rails));
    let Some(caps) = problem.index.capacities.as_ref() else {
        bail!("`{}` has no capacities", problem.topology.name);
    };
    let progress = problem.progress;
    let mut algorithms = Vec::new();
    for (view, rails) in std::iter::once((split, false)).chain(on_rails.map(|v| (v, true))) {
        let index = view.index();
        let name = if rails {
            "split rail view"
        } else {
            "split view"
        };
        progress.message(&format!("computing the {name}'s optimum"));
        let (_, _, on_view) = optimum(&view, &index, coll, progress)?;
        let on_view = *on_view.numer() as f64 / *on_view.denom() as f64;
        if on_view < packing_gbps * (1.0 - 1e-6) {
            progress.message(&format!(
                "the {name}'s optimum {on_view:.3} GB/s per root is below the packing's {packing_gbps:.3}: not used"
            ));
            continue;
        }
        progress.message(&format!("packing trees on the {name}"));
        let mut result = synthesize_trees(&view, &index, coll, limits, progress, depth, phases)?;
        progress.message(&format!(
            "trees on the {name}: packing {:.3} GB/s per root, scheduled {:.3} ({} symmetries)",
            result.packing_gbps, result.scheduled_gbps, result.symmetry
        ));
        result.on_a_view(|o| {
            o.split_view = true;
            o.rail_view = rails;
        });
        // Each step's rounds in the fabric's own capacities (the view's unit is a share).
        algorithms.extend(result.candidates().into_iter().map(|mut a| {
            for step in &mut a.steps {
                step.rounds = crate::load::rounds_needed(problem.index, caps, &step.sends);
            }
            a.renamed()
        }));
    }
    Ok(algorithms)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::origin::Family;
    use crate::topology::load;

    fn limits(max_chunks_given: bool) -> Limits {
        Limits {
            max_steps: 16,
            max_chunks: 8,
            max_chunks_given,
            deadline: std::time::Instant::now() + std::time::Duration::from_secs(3600),
            extra_memory: None,
            work_limit: None,
        }
    }

    /// The tree engine's allgather on `t` (both packings' schedules), with or without a
    /// piece cap the user gave.
    fn allgather_trees(t: &Topology, max_chunks_given: bool) -> TreeResult {
        let coll = Collective::new(Kind::AllGather, t.ranks, 0, 1).unwrap();
        let progress = crate::progress::Progress::hidden();
        let limits = limits(max_chunks_given);
        synthesize_trees(t, &t.index(), &coll, &limits, &progress, Depth::Both, 1).unwrap()
    }

    #[test]
    fn grown_trees_do_not_push_the_list_schedules_out() {
        // Four 2x2x2 tori with a NIC per two GPUs: the grown trees (18 steps, 9 rounds per
        // piece) dominate the list schedules in steps and rounds, yet the lists simulate
        // faster at 1 GB (the NIC's two GPUs send side by side); both are offered.
        let t = crate::topology::translations::subgroup_tests::tori_sharing_nics();
        let candidates = allgather_trees(&t, false).candidates();
        let grown = (candidates.iter())
            .find(|a| a.origin.family == Family::Grown)
            .expect("grown trees");
        assert_eq!(grown.num_steps(), 18);
        assert!(candidates.iter().any(|a| a.origin.family == Family::Listed
            && a.num_steps() > grown.num_steps()
            && a.rounds_per_chunk() > grown.rounds_per_chunk()));
    }

    /// `groups` cliques of four ranks (25 GB/s links), each clique's last rank linked to the
    /// next clique's first: the inter-clique links are the bottleneck, and one piece per
    /// root list-schedules in 7 rounds where the optimum takes 6.
    fn ring_of_cliques(groups: usize) -> Topology {
        let mut text = format!("ranks = {}\n", 4 * groups);
        let mut link = |a: usize, b: usize| text += &format!("[[link]]\nsrc = {a}\ndst = {b}\n");
        for g in 0..groups {
            for (a, b) in [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)] {
                link(4 * g + a, 4 * g + b);
            }
            link(4 * g + 3, 4 * ((g + 1) % groups));
        }
        parsed(&text)
    }

    #[test]
    fn a_list_schedule_that_loses_rounds_gets_a_finer_twin() {
        // Four 4-GPU cliques on a ring: one piece per root reaches the optimum (6 rounds per
        // piece), but its list schedule takes 7; sixteen pieces per root spread the extra
        // round (97, 6.06 per piece).
        let t = ring_of_cliques(4);
        let trees = allgather_trees(&t, false);
        let listed = trees.listed.as_ref().expect("a list schedule");
        assert_eq!((listed.chunks(), listed.rounds()), (1, 7));
        let finer: Vec<(usize, u32)> = (trees.listed_finer.iter())
            .map(|f| (f.chunks(), f.rounds()))
            .collect();
        assert_eq!(finer, [(16, 97), (32, 193)]);
        for f in &trees.listed_finer {
            crate::check::check(f, &t).unwrap();
        }
        let candidates = trees.candidates();
        assert!([16, 32]
            .iter()
            .all(|&c| candidates.iter().any(|a| a.chunks() == c)));
        // A given piece cap bounds them: 8 pieces in 49 rounds.
        let capped = allgather_trees(&t, true).listed_finer;
        let capped: Vec<(usize, u32)> = capped.iter().map(|f| (f.chunks(), f.rounds())).collect();
        assert_eq!(capped, [(8, 49)]);
    }

    #[test]
    fn the_finer_list_schedule_keeps_the_best_rate_count() {
        // Two 8-GPU cliques, four of their ranks paired across: the optimum takes 15 rounds
        // per 7 pieces; 4 pieces per root are laid out for pipelining, 7 at the best rate
        // (16 rounds listed), and the finer list schedule takes a multiple of 7 (14 pieces in
        // 31 rounds), which keeps the rate, where 16 pieces could not.
        let mut text = String::from("ranks = 16\n");
        for a in 0..8 {
            for b in a + 1..8 {
                text += &format!("[[link]]\nsrc = {a}\ndst = {b}\n");
                text += &format!("[[link]]\nsrc = {}\ndst = {}\n", a + 8, b + 8);
            }
        }
        for a in 0..4 {
            text += &format!("[[link]]\nsrc = {a}\ndst = {}\n", a + 8);
        }
        let t = parsed(&text);
        let trees = allgather_trees(&t, false);
        let (_, best) = trees.best_rate.as_ref().expect("a best-rate layout");
        let best = best.as_ref().expect("listed");
        assert_eq!(
            (trees.algorithm.chunks(), best.chunks(), best.rounds()),
            (4, 7, 16)
        );
        let finer = trees.listed_finer.first().expect("a finer list schedule");
        assert_eq!((finer.chunks(), finer.rounds()), (14, 31));
        crate::check::check(finer, &t).unwrap();
    }

    use crate::topology::toml_format::parsed_text as parsed;

    #[test]
    fn gpus_sharing_a_nic_get_trees_grown_on_the_split_view() {
        // Four 2x2x2 tori with a NIC per two GPUs: on the split view (12.5 GB/s of each NIC
        // per GPU) the trees grow at the packing's rate, 7 pieces per root in 31 steps, and
        // in the fabric's own capacities (25 GB/s) each step takes two rounds, which the
        // checker accepts on the fabric.
        let t = crate::topology::translations::subgroup_tests::tori_sharing_nics();
        let found = search_allgather(&t, &limits(false));
        let on_view: Vec<&Algorithm> = (found.algorithms.iter())
            .filter(|a| a.origin.split_view)
            .collect();
        let grown = (on_view.iter())
            .find(|a| a.origin.family == Family::Grown && a.chunks() == 7)
            .expect("grown trees on the split view");
        assert_eq!((grown.num_steps(), grown.rounds()), (31, 62));
        assert!(grown.name.contains("-sv"), "{}", grown.name);
        for a in on_view {
            crate::check::check(a, &t).unwrap();
        }
    }

    /// The tree engine's allgather search on `t` (as the main command runs it, standing
    /// alone) under `limits`.
    fn search_allgather(t: &Topology, limits: &Limits) -> Found {
        let index = t.index();
        let coll = Collective::new(Kind::AllGather, t.ranks, 0, 1).unwrap();
        let make = move |c: usize| crate::synthesize::resplit(&coll, c);
        let progress = crate::progress::Progress::hidden();
        let problem = Problem {
            topology: t,
            index: &index,
            make: &make,
            progress: &progress,
            deadline: limits.deadline,
        };
        let engine = TreeEngine {
            for_dual: false,
            half: false,
        };
        engine.search(&problem, Search::Pareto, limits).unwrap()
    }

    #[test]
    fn the_rounding_goes_past_the_default_piece_cap_to_the_packings_denominator() {
        // amd8: every pair linked by 40 or 48 GB/s; the optimum relays 3 of every 38 pieces
        // to a rank's slower neighbours over faster links. Within 8 pieces per root the
        // rounding keeps the one-hop schedule at 40 GB/s per root.
        let t = load("amd8").unwrap();
        let r = allgather_trees(&t, false);
        assert!(r.scheduled_gbps >= r.optimum_gbps * (1.0 - 1e-3), "{r:?}");
        let (exact, _) = r
            .best_rate
            .as_ref()
            .expect("the denominator's layout beside");
        assert_eq!(exact.chunks(), 38);
        // The layout within the cap stays, for small sizes.
        assert!(r.algorithm.chunks() <= 8);
        // A cap the user gives holds.
        let r = allgather_trees(&t, true);
        assert!(r.scheduled_gbps < r.optimum_gbps * 0.95);
        assert!(r.best_rate.is_none_or(|(a, _)| a.chunks() <= 8));
    }

    #[test]
    fn trees_are_grown_where_exact_pieces_are_scheduled_in_more_rounds_than_the_optimum() {
        // torus-2d 2x8 in the canonical numbering the main command searches in: one piece
        // per root rounds the packing exactly, but by depth it takes 7 rounds and by list 6,
        // where 15 pieces into each rank over its 3 in-links fit 5.
        let (t, _) = crate::topology::canonical::canonical(&load("torus-2d:2x8").unwrap(), None)
            .expect("a canonical numbering");
        let r = allgather_trees(&t, false);
        assert!(r.scheduled_gbps >= r.optimum_gbps * (1.0 - 1e-9), "{r:?}");
        let stepped = |a: &Algorithm| a.rounds() as usize / a.chunks();
        assert!(stepped(&r.algorithm) > 5, "{r:?}");
        assert!(r.listed.as_ref().is_some_and(|a| stepped(a) > 5), "{r:?}");
        let grown = r.grown.expect("grown trees beside");
        assert_eq!(
            (grown.chunks(), grown.steps.len(), grown.rounds()),
            (1, 5, 5)
        );
    }

    #[test]
    fn the_shallowest_trees_at_the_optimum_are_scheduled_beside_the_first_packings() {
        // Two DGX-1s: the first packing's depth schedule takes 4 steps; the shallowest trees
        // (one NIC hop, then two NVLink hops at most) take 3.
        let t = crate::topology::load_nodes("dgx1", Some(2), None).unwrap();
        let coll = Collective::new(Kind::AllGather, t.ranks, 0, 1).unwrap();
        let progress = crate::progress::Progress::hidden();
        let at =
            |depth| synthesize_trees(&t, &t.index(), &coll, &limits(false), &progress, depth, 1);
        let first = at(Depth::First).unwrap();
        assert!(first.shallow.is_empty());
        let both = at(Depth::Both).unwrap();
        assert_eq!(both.algorithm.steps, first.algorithm.steps);
        let fewest = both.shallow.iter().map(Algorithm::num_steps).min();
        assert_eq!(first.algorithm.num_steps(), 4);
        assert_eq!(
            fewest,
            Some(3),
            "{:?}",
            both.shallow.iter().map(|a| &a.name).collect::<Vec<_>>()
        );
        // In an allreduce's halves the shallowest trees replace the first packing's.
        let shallow = at(Depth::Shallow).unwrap();
        assert!(shallow.shallow.is_empty());
        assert!(shallow.algorithm.num_steps() < first.algorithm.num_steps());
        for a in both.shallow.iter().chain([&shallow.algorithm]) {
            crate::check::check(a, &t).unwrap();
        }
    }

    /// A packing of one BFS tree per rank of `t` under the trivial group.
    fn one_tree_per_root(t: &Topology) -> packing::Packing {
        let group = Translations::trivial(t.ranks);
        let roots: Vec<usize> = (0..t.ranks).collect();
        let far = std::time::Instant::now() + std::time::Duration::from_secs(3600);
        let mut p = packing::pack(t, &t.index(), &group, &roots, Some(1e-9), far).unwrap();
        for r in &mut p.roots {
            r.trees.truncate(1);
            r.trees[0].1 = 1.0;
        }
        p
    }

    #[test]
    fn symmetric_images_fill_each_roots_pool_to_its_share_only() {
        // A 4x4 torus under the trivial group: 16 roots, 64 link orbits; every root's
        // stabilizer has 8 automorphisms, so its one tree has up to 7 new images.
        let t = load("torus-2d:4x4").unwrap();
        let mut all = one_tree_per_root(&t);
        add_symmetric_images(&t, &t.index(), &mut all);
        assert!(
            all.roots.iter().all(|r| r.trees.len() > 4),
            "{:?}",
            all.roots[0]
        );
        // Room for 4 trees per root: 16 roots x 64 orbits x 4.
        let mut capped = one_tree_per_root(&t);
        add_symmetric_images_within(&t, &t.index(), &mut capped, 16 * 64 * 4);
        for (r, c) in all.roots.iter().zip(&capped.roots) {
            assert_eq!(c.trees.len(), 4);
            assert_eq!(c.trees[..], r.trees[..4]);
        }
    }

    #[test]
    fn a_search_out_of_time_still_offers_nccls_rings() {
        let t = load("hypercube:16").unwrap();
        let mut limits = limits(false);
        limits.deadline = std::time::Instant::now();
        let found = search_allgather(&t, &limits);
        assert!(!found.complete);
        let families: Vec<&crate::origin::Family> =
            found.algorithms.iter().map(|a| &a.origin.family).collect();
        assert!(
            families.contains(&&crate::origin::Family::Rings),
            "{families:?}"
        );
    }

    #[test]
    fn on_a_fat_tree_the_trees_are_packed_over_rails() {
        use crate::cutbound::CutBound;
        use crate::lower::{lower_to_xml, LowerOptions};
        use crate::simulate::{simulate, SimOptions};
        use crate::topology::multinode::{compose, Network, NicFacts, NicPlacement};
        // Two nodes of an irregular 8-GPU box (no automorphism), a 25 GB/s NIC per GPU on
        // a fat tree. Packed on the fat tree, a NIC carries connections to the eight GPUs of
        // the other node and the best tree schedule simulated at 80.6% of the optimum at
        // 1 GB (its NICs busy to the end, the last slices relayed after); over rails 99.6%.
        let nic = NicFacts {
            bandwidth: 25.0,
            alpha: 2.6,
            placement: NicPlacement::PerGpu(1),
        };
        let node = load("random:8:3").unwrap();
        let t = compose(&node, 2, &nic, Network::FatTree, "random8x2").unwrap();
        let found = search_allgather(&t, &limits(false));
        let size = 1 << 30;
        let mut best = 0.0f64;
        for a in found.algorithms.iter().filter(|a| a.origin.rail_view) {
            assert!(a.name.contains("-rv"), "{}", a.name);
            // Between nodes, only rank i to rank i + 8 and back.
            let sends = a.steps.iter().flat_map(|s| &s.sends);
            assert!(sends
                .filter(|s| t.node_of[s.src] != t.node_of[s.dst])
                .all(|s| s.src % 8 == s.dst % 8));
            let (program, _) = lower_to_xml(a, &LowerOptions::default()).unwrap();
            best = best.max(
                simulate(&program, &t, size, &SimOptions::default())
                    .unwrap()
                    .busbw,
            );
        }
        let bound = CutBound::new(runtime::ir::Collective::AllGather, &t, 0).busbw_at(size);
        assert!(best >= 0.99 * bound, "{best} of {bound}");
        // Two DGX-A100s: the packing's trees already put one connection per GPU on each
        // NIC, as many as over rails, so the view is not packed.
        let t = load("dgx-a100x2").unwrap();
        let found = search_allgather(&t, &limits(false));
        assert!(found.algorithms.iter().all(|a| !a.origin.rail_view));
    }

    #[test]
    fn a_relaying_hubs_steps_fit_the_xml_at_the_piece_counts_chosen() {
        use crate::lower::{lower_to_xml, LowerOptions};
        // random:90:4: a hub relays for many roots, so at 7 pieces per root (within the
        // average that `expressible_chunks` allows) its list schedule needed 6446 XML
        // elements of the parser's 4095 and was left out, leaving 98.0% of the optimum.
        let t = load("random:90:4").unwrap();
        let r = allgather_trees(&t, false);
        let schedules: Vec<&Algorithm> = r.algorithms().collect();
        assert!(schedules
            .iter()
            .any(|a| a.origin.family == crate::origin::Family::Listed));
        for a in schedules {
            lower_to_xml(a, &LowerOptions::default())
                .unwrap_or_else(|e| panic!("{}: {e:#}", a.name));
        }
    }

    #[test]
    fn a_1024_rank_allgather_gets_one_piece_per_root_so_its_xml_loads() {
        // 1 algo + 1024 gpus + 2 · 1023 · C steps on a rank: C = 2 would need 5117 elements
        // of the parser's 4095.
        assert_eq!(expressible_chunks(&load("torus-2d:32x32").unwrap()), 1);
        assert_eq!(expressible_chunks(&load("torus-2d:16x16").unwrap()), 7);
        assert!(expressible_chunks(&load("torus-2d:8x8").unwrap()) >= 8);
    }
}
