//! Simulate-and-pick, the last stage of a synthesis: every lowered candidate under every
//! protocol of [`Simulation::protocols`] (its best protocol per size is its [`Point`]) and
//! NCCL's baselines (ring, tree and point-to-point with Simple, those [`crate::baseline`]
//! defines for the collective, and at each size NCCL's own choice of algorithm × protocol
//! by its tuner, [`NcclPoint`]) simulated at a list of message sizes, and the best candidate
//! per size, as a typed [`Table`]. Nothing here prints or writes: the main command and the catalog report
//! the table in their own ways.
//!
//! The two callers differ, and each difference is a parameter, not a compromise:
//!
//! * **How a program meets the sizes** ([`Runs`]): the main command lays a program out once
//!   and runs every size in parallel (a failure fails the program at every size); the
//!   catalog simulates one size at a time (a failure fails that size only).
//! * **Which candidate wins** ([`Rule`]): the main command takes the highest busbw (the
//!   first candidate on a tie); the catalog the least time, prefers within [`TIE`] of it the
//!   candidate that is valid at more sizes ([`Preference`]), and leaves a size to NCCL where
//!   NCCL's choice is faster by more than [`TIE`].
//! * **The baselines' root** (the collective's root for the main command, 0 for the
//!   catalog) and the sizes, simulator options, lowering (flavour, protocol, instances) of
//!   the candidates, which the callers choose.
//!
//! Candidates are simulated one at a time ([`Simulation::curve`]) so that a caller can drop
//! each program before lowering the next (the main command holds a bounded number of
//! steps, at most two programs of a 1024-rank fabric, and simulates those it holds in
//! [`simulation_order`] through a [`Race`]); [`Simulation::table`] then simulates the
//! baselines and picks.

use crate::baseline::{self, Algo, BaselineOptions, Choice, Tuner};
use crate::simulate::{
    bounds_at, simulate, simulate_sizes, simulate_sizes_unless_bounded, Bound, SimOptions,
    SimResult,
};
use crate::topology::Topology;
use anyhow::Result;
use runtime::ir::{Collective, Program, Protocol};
use serde::Serialize;

/// Every protocol of the MSCCL runtimes, the candidates' default.
pub const ALL_PROTOCOLS: [Protocol; 3] = [Protocol::Simple, Protocol::LL, Protocol::LL128];

/// How far a [`Bound`] must clear what it is compared with before a simulation is skipped on
/// its word (it and the event loop round differently, by far less).
const BOUND_MARGIN: f64 = 1e-6;

/// Relative time difference under which two candidates count as equally fast (the
/// catalog's [`Rule::LeastTime`]).
pub const TIE: f64 = 0.005;

/// Whether a busbw is below NCCL's (beyond rounding: by more than one part in 10⁹).
pub fn loses(busbw: f64, nccl_busbw: f64) -> bool {
    busbw < nccl_busbw * (1.0 - 1e-9)
}

/// One simulated size of one program.
#[derive(Debug, Clone, Serialize)]
pub struct Point {
    /// The grid size asked for (bytes).
    pub size: u64,
    /// The size simulated: rounded down to whole elements per chunk (at least one).
    pub simulated_bytes: u64,
    /// Simulated time in µs.
    pub time_us: f64,
    /// nccl-tests busbw in GB/s at the simulated size.
    pub busbw: f64,
    /// The protocol simulated.
    pub protocol: Protocol,
}

impl Point {
    /// The point of a simulation run at the asked `size` with `protocol`.
    fn of(size: u64, run: &SimResult, protocol: Protocol) -> Point {
        Point {
            size,
            simulated_bytes: run.size_bytes,
            time_us: run.time_us,
            busbw: run.busbw,
            protocol,
        }
    }

    /// The faster of two points (the first on a tie).
    fn faster(self, other: Point) -> Point {
        if other.time_us < self.time_us {
            other
        } else {
            self
        }
    }
}

/// A program's [`Bound`]s per protocol of a [`Simulation`] ([`Simulation::bounds`]): the
/// protocol, the indices of the sizes it is simulated at, and its bound at each.
#[derive(Debug, Clone)]
pub struct ProgramBounds {
    sizes: usize,
    per_protocol: Vec<(Protocol, Vec<usize>, Vec<Option<Bound>>)>,
}

impl ProgramBounds {
    /// The highest busbw a bound leaves at each size, over the protocols (infinite where a
    /// protocol's bound is not known): [`Simulation::bound_busbw`].
    pub fn busbw(&self) -> Vec<f64> {
        let mut most = vec![f64::NEG_INFINITY; self.sizes];
        for (_, at, bounds) in &self.per_protocol {
            for (&i, bound) in at.iter().zip(bounds) {
                most[i] = most[i].max(bound.map_or(f64::INFINITY, |b| b.busbw));
            }
        }
        most
    }
}

/// The order in which to simulate candidates with `keys` (each one's [`Simulation::bound_busbw`]
/// at the size that matters most): highest key first, a tie in their given order. Bounds do
/// not depend on how ranks are numbered, so the candidate likely to win is simulated first
/// and the later ones are mostly skipped by their bounds, whatever the numbering.
pub fn simulation_order(keys: &[f64]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..keys.len()).collect();
    order.sort_by(|&a, &b| keys[b].total_cmp(&keys[a]).then(a.cmp(&b)));
    order
}

/// Candidates simulated in any order (see [`simulation_order`]) with the winners of
/// simulating them all in the table's order under [`Rule::HighestBusbw`]: per size the best
/// busbw so far and the place of the candidate holding it. A candidate is simulated only
/// where its bound does not rule out beating it, and keeps a point equal to it only if it
/// comes first in the table (whose rule keeps the first on a tie).
#[derive(Debug, Clone)]
pub struct Race {
    bar: Vec<f64>,
    holder: Vec<usize>,
}

impl Race {
    /// No candidate simulated yet among `candidates` (the table's length), at `sizes` sizes.
    pub fn new(candidates: usize, sizes: usize) -> Race {
        Race {
            bar: vec![0.0; sizes],
            holder: vec![candidates; sizes],
        }
    }

    /// The busbw each size's best candidate so far reached (0 where none was entered).
    pub fn bar(&self) -> &[f64] {
        &self.bar
    }

    /// The points of `program`, the candidate at `place` in the table, for the table: `None`
    /// where it cannot win against the candidates entered before
    /// ([`Simulation::curve_winning`]); the bar rises with the points kept.
    pub fn enter(
        &mut self,
        simulation: &Simulation,
        place: usize,
        program: &Program,
    ) -> Result<Vec<Option<Point>>> {
        Ok(self.enter_bounded(simulation, place, program, None)?.points)
    }

    /// [`Self::enter`] with the program's bounds known ([`Simulation::bounds`] of the same
    /// simulation), so that they are not computed again.
    pub fn enter_bounded(
        &mut self,
        simulation: &Simulation,
        place: usize,
        program: &Program,
        bounds: Option<&ProgramBounds>,
    ) -> Result<Entered> {
        let ties_win: Vec<bool> = self.holder.iter().map(|&w| place < w).collect();
        let (points, own) = match (simulation.runs, bounds) {
            (Runs::Together, Some(b)) => {
                let own = simulation.own_best(program, simulation.sizes, &self.bar, Some(b))?;
                (winning(own.clone(), &self.bar, &ties_win), own)
            }
            _ => {
                let points = simulation.curve_winning(program, &self.bar, &ties_win)?;
                (points.clone(), points)
            }
        };
        for ((b, w), p) in self.bar.iter_mut().zip(&mut self.holder).zip(&points) {
            if let Some(p) = p {
                // A kept point beats the bar, or ties it from an earlier place.
                *b = p.busbw;
                *w = place;
            }
        }
        Ok(Entered { points, own })
    }
}

/// The points of `best` that win against `bar`: faster, or as fast from an earlier place
/// (`ties_win`).
fn winning(best: Vec<Option<Point>>, bar: &[f64], ties_win: &[bool]) -> Vec<Option<Point>> {
    (best.into_iter().zip(bar).zip(ties_win))
        .map(|((p, &b), &tie)| p.filter(|p| p.busbw > b || (tie && p.busbw == b)))
        .collect()
}

/// What [`Race::enter_bounded`] learned of a program.
#[derive(Debug, Clone)]
pub struct Entered {
    /// Its points for the table: `None` where it cannot win.
    pub points: Vec<Option<Point>>,
    /// Its own fastest point at each size, won or not: `None` where its bounds ruled the
    /// simulation out (without known bounds, the points it won only).
    pub own: Vec<Option<Point>>,
}

/// NCCL's choice at one size: the algorithm and protocol its tuner picks, simulated (NVLS:
/// its model, [`Tuner::nvls_time_us`]).
#[derive(Debug, Clone, Serialize)]
pub struct NcclPoint {
    /// What NCCL runs.
    pub choice: Choice,
    /// Its figures.
    pub point: Point,
}

/// How a program is simulated at the sizes of a [`Simulation`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runs {
    /// Laid out once, every size in parallel ([`simulate_sizes`]): a failure at one size
    /// fails them all (the main command).
    Together,
    /// One simulation per size ([`simulate`]), in order: a failure fails that size only
    /// (the catalog).
    OneByOne,
}

/// What the simulations of a selection share: the fabric, the sizes, the simulator options
/// and how a program meets the sizes.
#[derive(Debug, Clone, Copy)]
pub struct Simulation<'a> {
    /// The fabric every program runs on.
    pub topology: &'a Topology,
    /// nccl-tests sizes in bytes, in the order of the table's rows.
    pub sizes: &'a [u64],
    /// Simulator options (with `protocol` unset: each program under [`Self::protocols`]).
    pub options: SimOptions,
    /// How a program meets the sizes.
    pub runs: Runs,
    /// The protocols a candidate is simulated with (LL only up to
    /// [`crate::simulate::ModelParams::ll_max_bytes`] where another is listed).
    pub protocols: &'a [Protocol],
}

impl Simulation<'_> {
    /// Whether `protocol` is simulated at `size`.
    fn applies(&self, protocol: Protocol, size: u64) -> bool {
        protocol != Protocol::LL
            || size <= self.options.model.ll_max_bytes
            || self.protocols.iter().all(|&p| p == Protocol::LL)
    }

    /// `program` under `protocol` at one `size`.
    pub fn point_with(&self, program: &Program, size: u64, protocol: Protocol) -> Result<Point> {
        let options = self.options.with_protocol(protocol);
        let run = simulate(program, self.topology, size, &options)?;
        Ok(Point::of(size, &run, protocol))
    }

    /// `program` at one `size`, under its fastest protocol (a protocol whose bound shows it
    /// is not faster than one simulated before is not simulated).
    pub fn point(&self, program: &Program, size: u64) -> Result<Point> {
        self.best_of(program, &[size], &[f64::NEG_INFINITY], &[false], None)?
            .remove(0)
            .ok_or_else(|| anyhow::anyhow!("no protocol to simulate"))
    }

    /// `program` at every size under its fastest protocol, or the error of a failing size
    /// (with [`Runs::OneByOne`], the first).
    pub fn curve(&self, program: &Program) -> Result<Vec<Point>> {
        (self
            .curve_beating(program, &vec![f64::NEG_INFINITY; self.sizes.len()])?
            .into_iter())
        .map(|p| p.ok_or_else(|| anyhow::anyhow!("no protocol to simulate")))
        .collect()
    }

    /// [`Self::curve`] where it beats `bar` (a busbw per size, that of the best candidate
    /// before it for [`Rule::HighestBusbw`]), `None` where it does not: a size where a
    /// protocol's [`Bound`] proves that it cannot beat the bar, or the program's own best
    /// protocol so far, is not simulated under that protocol. The points that beat the bar
    /// are exactly those [`Self::curve`] gives.
    pub fn curve_beating(&self, program: &Program, bar: &[f64]) -> Result<Vec<Option<Point>>> {
        self.curve_winning(program, bar, &vec![false; bar.len()])
    }

    /// [`Self::curve_beating`], but at a size where `ties_win` says so a point equal to the
    /// bar is kept too (the program comes before the bar's holder in the table, whose
    /// [`Rule::HighestBusbw`] keeps the first on a tie). With it, candidates can be
    /// simulated in any order (see [`simulation_order`]) and still give the table the
    /// winners that simulating them all would give.
    pub fn curve_winning(
        &self,
        program: &Program,
        bar: &[f64],
        ties_win: &[bool],
    ) -> Result<Vec<Option<Point>>> {
        match self.runs {
            Runs::Together => self.best_of(program, self.sizes, bar, ties_win, None),
            Runs::OneByOne => (self.sizes.iter().zip(bar).zip(ties_win))
                .map(|((&s, &b), &t)| Ok(self.best_of(program, &[s], &[b], &[t], None)?.remove(0)))
                .collect(),
        }
    }

    /// The highest busbw a [`Bound`] leaves `program` at each size, over the protocols
    /// simulated there (infinite where a protocol's bound is not known), found without
    /// simulating: the key of [`simulation_order`].
    pub fn bound_busbw(&self, program: &Program) -> Result<Vec<f64>> {
        Ok(self.bounds(program)?.busbw())
    }

    /// `program`'s [`Bound`]s under each of [`Self::protocols`] at the sizes it is
    /// simulated at, found without simulating (what [`Self::bound_busbw`] reads, kept so
    /// that [`Race::enter_bounded`] does not compute them again).
    pub fn bounds(&self, program: &Program) -> Result<ProgramBounds> {
        let mut per_protocol = Vec::with_capacity(self.protocols.len());
        for &protocol in self.protocols {
            let at: Vec<usize> = (0..self.sizes.len())
                .filter(|&i| self.applies(protocol, self.sizes[i]))
                .collect();
            let bounds = if at.is_empty() {
                Vec::new()
            } else {
                let asked: Vec<u64> = at.iter().map(|&i| self.sizes[i]).collect();
                let options = self.options.with_protocol(protocol);
                bounds_at(program, self.topology, &asked, &options)?
            };
            per_protocol.push((protocol, at, bounds));
        }
        Ok(ProgramBounds {
            sizes: self.sizes.len(),
            per_protocol,
        })
    }

    /// `program` at `sizes` laid out once per protocol, the fastest protocol per size where
    /// it beats `bar`, or ties it where `ties_win` (skipping what a bound rules out; see
    /// [`Self::curve_winning`]).
    fn best_of(
        &self,
        program: &Program,
        sizes: &[u64],
        bar: &[f64],
        ties_win: &[bool],
        known: Option<&ProgramBounds>,
    ) -> Result<Vec<Option<Point>>> {
        let best = self.own_best(program, sizes, bar, known)?;
        Ok(winning(best, bar, ties_win))
    }

    /// `program`'s fastest point at each of `sizes` over the protocols, won against `bar` or
    /// not; `None` where its bounds ruled every simulation there out.
    fn own_best(
        &self,
        program: &Program,
        sizes: &[u64],
        bar: &[f64],
        known: Option<&ProgramBounds>,
    ) -> Result<Vec<Option<Point>>> {
        let mut best: Vec<Option<Point>> = vec![None; sizes.len()];
        for &protocol in self.protocols {
            let at: Vec<usize> = (0..sizes.len())
                .filter(|&i| self.applies(protocol, sizes[i]))
                .collect();
            if at.is_empty() {
                continue;
            }
            let asked: Vec<u64> = at.iter().map(|&i| sizes[i]).collect();
            let options = self.options.with_protocol(protocol);
            let beaten = |k: usize, bound: &Bound| {
                let i = at[k];
                let slower = (best[i].as_ref())
                    .is_some_and(|b| bound.time_us >= b.time_us * (1.0 + BOUND_MARGIN));
                slower || bound.busbw <= bar[i] * (1.0 - BOUND_MARGIN)
            };
            // Bounds computed for the same protocol and sizes are not computed again.
            let bounds = known.and_then(|k| {
                (k.per_protocol.iter())
                    .find(|(p, a, _)| *p == protocol && *a == at)
                    .map(|(_, _, b)| &b[..])
            });
            let runs = simulate_sizes_unless_bounded(
                program,
                self.topology,
                &asked,
                &options,
                bounds,
                beaten,
            )?;
            for ((&i, &size), run) in at.iter().zip(&asked).zip(runs) {
                if let Some(run) = run {
                    let p = Point::of(size, &run, protocol);
                    best[i] = Some(best[i].take().map_or(p.clone(), |b| b.faster(p)));
                }
            }
        }
        Ok(best)
    }

    /// `program` under `protocol` at `sizes` (a failure fails them all).
    fn together(&self, program: &Program, sizes: &[u64], protocol: Protocol) -> Result<Vec<Point>> {
        let options = self.options.with_protocol(protocol);
        let runs = simulate_sizes(program, self.topology, sizes, &options)?;
        Ok((sizes.iter().zip(&runs))
            .map(|(&s, r)| Point::of(s, r, protocol))
            .collect())
    }

    /// `program` under `protocol` at the sizes of index `at`, `None` where its simulation
    /// failed.
    fn points(&self, program: &Program, protocol: Protocol, at: &[usize]) -> Vec<Option<Point>> {
        match self.runs {
            Runs::Together => {
                let sizes: Vec<u64> = at.iter().map(|&i| self.sizes[i]).collect();
                match self.together(program, &sizes, protocol) {
                    Ok(points) => points.into_iter().map(Some).collect(),
                    Err(_) => vec![None; at.len()],
                }
            }
            Runs::OneByOne => (at.iter())
                .map(|&i| self.point_with(program, self.sizes[i], protocol).ok())
                .collect(),
        }
    }

    /// Simulates NCCL's baselines for `collective` (rooted at `root`) and picks the best of
    /// `candidates` (each candidate's points per size, [`Simulation::curve`] or
    /// [`Simulation::curve_beating`]; `None`, or no point at all, where it was not simulated
    /// and so never wins) at every size by `rule`.
    pub fn table(
        &self,
        collective: Collective,
        root: usize,
        candidates: &[Vec<Option<Point>>],
        rule: Rule,
    ) -> Table {
        let nccl = Baselines::simulate(self, collective, root);
        let rows = (self.sizes.iter().enumerate())
            .map(|(i, &size)| {
                let mut row = Row {
                    size,
                    candidates: (candidates.iter())
                        .map(|c| c.get(i).cloned().flatten())
                        .collect(),
                    ring: Baselines::at(&nccl.ring, i),
                    tree: Baselines::at(&nccl.tree, i),
                    p2p: Baselines::at(&nccl.p2p, i),
                    nccl: nccl.choice.get(i).cloned().flatten(),
                    best: None,
                };
                row.best = rule.best(&row);
                row
            })
            .collect();
        Table {
            rows,
            baselines_defined: nccl.defined,
        }
    }
}

/// NCCL's baselines at every size of a [`Simulation`] (`None`: undefined for the
/// collective; a `None` point: its simulation failed at that size).
struct Baselines {
    ring: Option<Vec<Option<Point>>>,
    tree: Option<Vec<Option<Point>>>,
    p2p: Option<Vec<Option<Point>>>,
    /// NCCL's choice at each size (`None`: nothing chosen, or its simulation failed).
    choice: Vec<Option<NcclPoint>>,
    /// Whether any of the three is defined.
    defined: bool,
}

impl Baselines {
    /// Builds NCCL's ring, tree and point-to-point programs (on the channels NCCL would
    /// pick) and simulates those that exist with Simple, one after the other, so that one
    /// baseline program is held at a time; then NCCL's choice per size (the ring or tree
    /// program under the chosen protocol, or the NVLS model).
    fn simulate(simulation: &Simulation, collective: Collective, root: usize) -> Baselines {
        let options = BaselineOptions {
            channels: None,
            root,
        };
        let topology = simulation.topology;
        let sizes = simulation.sizes;
        let tuner = Tuner::new(collective, topology, &simulation.options.model.nccl).ok();
        let chosen: Vec<Option<Choice>> = (sizes.iter())
            .map(|&s| tuner.as_ref().and_then(|t| t.choose(s)))
            .collect();
        let mut choice: Vec<Option<NcclPoint>> = vec![None; sizes.len()];
        let mut defined = false;
        let all: Vec<usize> = (0..sizes.len()).collect();
        let mut run = |algo: Algo, program: Result<Program>| {
            let program = program.ok()?;
            defined = true;
            let simple = simulation.points(&program, Protocol::Simple, &all);
            for protocol in ALL_PROTOCOLS {
                let at: Vec<usize> = (all.iter().copied())
                    .filter(|&i| {
                        chosen[i].is_some_and(|c| c.algo == algo && c.protocol == protocol)
                    })
                    .collect();
                let points = if protocol == Protocol::Simple {
                    at.iter().map(|&i| simple[i].clone()).collect()
                } else if at.is_empty() {
                    Vec::new()
                } else {
                    simulation.points(&program, protocol, &at)
                };
                for (i, point) in at.into_iter().zip(points) {
                    choice[i] = point
                        .zip(chosen[i])
                        .map(|(point, choice)| NcclPoint { choice, point });
                }
            }
            Some(simple)
        };
        let ring = run(Algo::Ring, baseline::ring(collective, topology, &options));
        let tree = run(Algo::Tree, baseline::tree(collective, topology, &options));
        let p2p = run(Algo::P2p, baseline::p2p(collective, topology, &options));
        for (i, &size) in sizes.iter().enumerate() {
            let Some(c) = chosen[i].filter(|c| c.algo == Algo::Nvls) else {
                continue;
            };
            let Some(time_us) = tuner.as_ref().and_then(|t| t.nvls_time_us(size)) else {
                continue;
            };
            let algbw = size as f64 / (time_us * 1e3);
            let point = Point {
                size,
                simulated_bytes: size,
                time_us,
                busbw: algbw * collective.busbw_factor(topology.ranks),
                protocol: c.protocol,
            };
            choice[i] = Some(NcclPoint { choice: c, point });
        }
        Baselines {
            ring,
            tree,
            p2p,
            choice,
            defined,
        }
    }

    /// One baseline's point at the `i`-th size, where defined and simulated.
    fn at(points: &Option<Vec<Option<Point>>>, i: usize) -> Option<Point> {
        points.as_ref()?.get(i)?.clone()
    }
}

/// What decides between candidates within [`TIE`] of the fastest, in this order: an
/// in-place program, then fewer chunks per loop, then fewer channels (a program with fewer
/// chunks per loop is valid at more sizes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Preference {
    /// Whether the candidate's in-place lowering verified.
    pub has_inplace: bool,
    /// `nchunksperloop` of its program.
    pub nchunksperloop: usize,
    /// Channels of its program.
    pub nchannels: usize,
}

impl Preference {
    /// Smaller is preferred.
    fn key(&self) -> (bool, usize, usize) {
        (!self.has_inplace, self.nchunksperloop, self.nchannels)
    }
}

/// Index of the preferred candidate among `times` (µs, one per candidate and preference):
/// the fastest, or within [`TIE`] of it the least [`Preference`], then the least time;
/// `None` without candidates.
pub fn preferred(preferences: &[Preference], times: &[f64]) -> Option<usize> {
    let best = times.iter().copied().fold(f64::INFINITY, f64::min);
    let n = preferences.len().min(times.len());
    (0..n)
        .filter(|&i| times[i] <= best * (1.0 + TIE))
        .min_by(|&a, &b| {
            let key = |i: usize| preferences[i].key();
            key(a).cmp(&key(b)).then(times[a].total_cmp(&times[b]))
        })
}

/// How the best candidate at a size is chosen.
#[derive(Debug, Clone, Copy)]
pub enum Rule<'a> {
    /// The highest busbw above 0, the first candidate on a tie (the main command).
    HighestBusbw,
    /// The [`preferred`] candidate by time (one preference per candidate; every candidate
    /// simulated), or none where one of NCCL's baselines is more than [`TIE`] faster than
    /// it (the catalog leaves such sizes to NCCL).
    LeastTime(&'a [Preference]),
}

impl Rule<'_> {
    /// The best candidate of `row`.
    fn best(&self, row: &Row) -> Option<usize> {
        match self {
            Rule::HighestBusbw => {
                let mut best: Option<(usize, f64)> = None;
                for (i, p) in row.candidates.iter().enumerate() {
                    let Some(p) = p else { continue };
                    if p.busbw > best.map_or(0.0, |b| b.1) {
                        best = Some((i, p.busbw));
                    }
                }
                best.map(|b| b.0)
            }
            Rule::LeastTime(preferences) => {
                let times: Option<Vec<f64>> = (row.candidates.iter())
                    .map(|p| p.as_ref().map(|p| p.time_us))
                    .collect();
                let times = times?;
                let w = preferred(preferences, &times)?;
                let nccl_faster = row
                    .nccl_least_time_us()
                    .is_some_and(|b| b * (1.0 + TIE) < times[w]);
                (!nccl_faster).then_some(w)
            }
        }
    }
}

/// The figures at one size.
#[derive(Debug, Clone)]
pub struct Row {
    /// nccl-tests size in bytes.
    pub size: u64,
    /// Each candidate at this size, in the order given (`None`: not simulated).
    pub candidates: Vec<Option<Point>>,
    /// NCCL's ring, where defined and simulated.
    pub ring: Option<Point>,
    /// NCCL's tree (allreduce), where defined and simulated.
    pub tree: Option<Point>,
    /// NCCL's point-to-point algorithm (alltoall, gather, scatter), where defined and
    /// simulated.
    pub p2p: Option<Point>,
    /// NCCL's own choice of algorithm and protocol, simulated.
    pub nccl: Option<NcclPoint>,
    /// The index of the best candidate by the [`Rule`], if any.
    pub best: Option<usize>,
}

impl Row {
    /// The best candidate's index and figures.
    pub fn best_point(&self) -> Option<(usize, &Point)> {
        let i = self.best?;
        Some((i, self.candidates.get(i)?.as_ref()?))
    }

    /// The simulated time of what NCCL runs (µs): its tuner's choice, or where its tuner
    /// chose nothing, the least of its Simple baselines (each at its own rounded size).
    pub fn nccl_least_time_us(&self) -> Option<f64> {
        if let Some(n) = &self.nccl {
            return Some(n.point.time_us);
        }
        [&self.ring, &self.tree, &self.p2p]
            .into_iter()
            .flatten()
            .map(|p| p.time_us)
            .reduce(f64::min)
    }
}

/// Every candidate and baseline at every size, and the best candidate per size.
#[derive(Debug, Clone)]
pub struct Table {
    /// One row per size of the [`Simulation`], in its order.
    pub rows: Vec<Row>,
    /// Whether NCCL defines any of its baselines for the collective on the fabric.
    pub baselines_defined: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(time_us: f64, busbw: f64) -> Option<Point> {
        Some(Point {
            size: 1024,
            simulated_bytes: 1024,
            time_us,
            busbw,
            protocol: Protocol::Simple,
        })
    }

    fn row(candidates: Vec<Option<Point>>, ring: Option<Point>) -> Row {
        Row {
            size: 1024,
            candidates,
            ring,
            tree: None,
            p2p: None,
            nccl: None,
            best: None,
        }
    }

    #[test]
    fn highest_busbw_takes_the_first_on_a_tie_and_skips_the_unsimulated() {
        let r = row(vec![None, point(2.0, 5.0), point(1.0, 5.0)], None);
        assert_eq!(Rule::HighestBusbw.best(&r), Some(1));
        let r = row(vec![None, point(1.0, 0.0)], None);
        assert_eq!(Rule::HighestBusbw.best(&r), None);
    }

    #[test]
    fn least_time_prefers_fewer_chunks_within_the_tie_and_yields_to_nccl() {
        let p = |nchunksperloop| Preference {
            has_inplace: true,
            nchunksperloop,
            nchannels: 1,
        };
        let prefs = [p(8), p(2)];
        let r = row(vec![point(100.0, 1.0), point(100.4, 1.0)], None);
        assert_eq!(Rule::LeastTime(&prefs).best(&r), Some(1));
        let r = row(vec![point(100.0, 1.0), point(101.0, 1.0)], None);
        assert_eq!(Rule::LeastTime(&prefs).best(&r), Some(0));
        let r = row(vec![point(100.0, 1.0), point(101.0, 1.0)], point(90.0, 1.0));
        assert_eq!(Rule::LeastTime(&prefs).best(&r), None);
    }
}
