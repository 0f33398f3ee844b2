//! Data races: two threadblocks of a rank touch a slot, at least one writes, and neither
//! happens before the other.
//!
//! Happens-before is tracked with vector clocks. Each access is checked when it is made
//! against the slot's last write and, if it writes, the reads since that write; in an order
//! of the accesses that happens-before allows, this decides every pair: an unordered pair
//! further apart leaves an unordered pair among the accesses in between (clocks are
//! transitive). A read ordered after an earlier read of the slot stands for both.
//!
//! With clocks over every threadblock (small programs) the check runs inside the symbolic
//! execution, where messages order steps across ranks. With clocks over each rank's own
//! threadblocks, happens-before is program order and dependencies only, an order fixed by
//! the program: [`local_races`] then checks one rank at a time, with its clocks in cache.

use super::{Mode, VerifyError};
use crate::ir::{Gpu, Op, Program, Slot, Step, StepRef};
use crate::semantics::{Region, Semantics};
use rustc_hash::FxHashMap;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

/// An access to a slot, packed: threadblock in the high half, step in the low half.
type Access = u64;

/// No access.
const NO_ACCESS: Access = u64::MAX;

fn pack(tb: usize, step: usize) -> Access {
    ((tb as u64) << 32) | step as u64
}

fn access_tb(a: Access) -> usize {
    (a >> 32) as usize
}

fn access_step(a: Access) -> usize {
    (a & 0xffff_ffff) as usize
}

/// What one slot has seen since its last write: the last write and the reads after it that
/// are not ordered behind each other (two inline, more in an overflow map).
#[derive(Clone, Copy)]
struct History {
    write: Access,
    reads: [Access; 2],
}

impl History {
    const EMPTY: History = History {
        write: NO_ACCESS,
        reads: [NO_ACCESS; 2],
    };
}

/// Bytes of race-check state per slot.
pub(super) const HISTORY_BYTES: u64 = std::mem::size_of::<History>() as u64;

/// Where a slot is: (rank, region, chunk), also the order in which races are reported.
pub(super) type SlotKey = (usize, Region, usize);

/// The access histories of a set of slots (by index) and the race on the first slot (by
/// [`SlotKey`]) found to have one.
pub(super) struct Races {
    mode: Mode,
    history: Vec<History>,
    more_reads: FxHashMap<usize, Vec<Access>>,
    found: Option<(SlotKey, VerifyError)>,
}

/// The accessing step and its threadblock's clock, which counts the step itself; `base` is
/// the index in the clock of its rank's threadblock 0.
pub(super) struct Accessor<'c> {
    pub at: StepRef,
    pub clock: &'c [u32],
    pub base: usize,
}

impl Accessor<'_> {
    /// Whether access `a` (by a threadblock of the same rank) happens before this step.
    fn after(&self, a: Access) -> bool {
        let (tb, step) = (access_tb(a), access_step(a));
        tb == self.at.tb || self.clock[self.base + tb] as usize > step
    }
}

impl Races {
    /// No accesses yet to `slots` slots.
    pub fn new(mode: Mode, slots: usize) -> Races {
        Races {
            mode,
            history: vec![History::EMPTY; slots],
            more_reads: FxHashMap::default(),
            found: None,
        }
    }

    /// The race found on the first slot, if any.
    pub fn found(self) -> Option<VerifyError> {
        self.found.map(|(_, e)| e)
    }

    /// Checks an access to slot `slot` (at `key`) and records it.
    pub fn access(&mut self, slot: usize, key: SlotKey, by: &Accessor, write: bool) {
        let h = self.history[slot];
        let unordered = |a: &Access| *a != NO_ACCESS && !by.after(*a);
        let race = if unordered(&h.write) {
            Some((h.write, "write"))
        } else if write {
            let more = self.more_reads.get(&slot).map_or(&[][..], |v| v.as_slice());
            h.reads
                .iter()
                .chain(more)
                .find(|r| unordered(r))
                .map(|&r| (r, "read"))
        } else {
            None
        };
        if let Some((first, first_access)) = race {
            if self.found.as_ref().is_none_or(|(k, _)| key < *k) {
                let (rank, region, chunk) = key;
                let e = VerifyError::Race {
                    mode: self.mode,
                    rank,
                    region,
                    chunk,
                    first: StepRef {
                        rank,
                        tb: access_tb(first),
                        step: access_step(first),
                    },
                    first_access,
                    second: by.at,
                    second_access: if write { "write" } else { "read" },
                };
                self.found = Some((key, e));
            }
        }
        let here = pack(by.at.tb, by.at.step);
        if write {
            self.history[slot] = History {
                write: here,
                reads: [NO_ACCESS; 2],
            };
            if !self.more_reads.is_empty() {
                self.more_reads.remove(&slot);
            }
            return;
        }
        for i in 0..2 {
            let r = h.reads[i];
            if r == NO_ACCESS || by.after(r) {
                self.history[slot].reads[i] = here;
                return;
            }
        }
        self.more_reads.entry(slot).or_default().push(here);
    }
}

/// The slots a step reads (in order: its source, then for `re` its destination) and
/// writes, as (buffer slot, count).
pub(super) fn reads_and_writes(step: &Step) -> ([Option<Slot>; 2], Option<Slot>) {
    let src = step.op.reads_src().then_some(step.src);
    let dst_read = matches!(step.op, Op::Reduce | Op::Compute).then_some(step.dst);
    let write = step.op.writes_dst().then_some(step.dst);
    ([src, dst_read], write)
}

/// `into ← max(into, other)` entry by entry; true if an entry was raised.
pub(super) fn join(into: &mut [u32], other: &[u32]) -> bool {
    let mut raised = false;
    for (a, b) in into.iter_mut().zip(other) {
        raised |= *b > *a;
        *a = (*a).max(*b);
    }
    raised
}

/// Clock snapshots of the steps that dependencies name, shared while a threadblock's clock
/// has not changed but for its own entry (whose value a join then raises to the step).
pub(super) struct Snapshots {
    /// Per step (by index): [`NOT_TARGET`], [`PENDING`] or the offset of its snapshot.
    of: Vec<u32>,
    /// The snapshots, `width` entries each, in blocks of `block` entries that are never
    /// moved once allocated (a grown vector copied and faulted in each doubling: a fifth of
    /// a 64-rank allreduce's CPU). A snapshot's offset is its block times `block` plus its
    /// place in the block.
    blocks: Vec<Vec<u32>>,
    block: usize,
    /// Entries stored.
    len: usize,
    width: usize,
    /// Per threadblock: its clock changed since its last snapshot, and that snapshot.
    changed: Vec<bool>,
    last: Vec<u32>,
}

const NOT_TARGET: u32 = u32::MAX;
/// Entries of a block of snapshots, rounded down to whole snapshots (at least one).
const SNAPSHOT_BLOCK_ENTRIES: usize = 1 << 20;
const PENDING: u32 = u32::MAX - 1;

impl Snapshots {
    /// For `steps` steps of `tbs` threadblocks whose clocks have `width` entries;
    /// `targets` gives the index of every step a dependency names.
    pub fn new(
        steps: usize,
        tbs: usize,
        width: usize,
        targets: impl Iterator<Item = usize>,
    ) -> Snapshots {
        let mut of = vec![NOT_TARGET; steps];
        for t in targets {
            of[t] = PENDING;
        }
        // No more snapshots than steps that dependencies name.
        let most = of.iter().filter(|&&o| o == PENDING).count().max(1);
        let block = (SNAPSHOT_BLOCK_ENTRIES / width.max(1)).clamp(1, most) * width.max(1);
        Snapshots {
            of,
            blocks: Vec::new(),
            block,
            len: 0,
            width,
            changed: vec![false; tbs],
            last: vec![NOT_TARGET; tbs],
        }
    }

    /// Bytes held by the snapshots.
    pub fn bytes(&self) -> u64 {
        4 * self.len as u64
    }

    /// Notes that threadblock `tb`'s clock changed in another entry than its own.
    pub fn changed(&mut self, tb: usize) {
        self.changed[tb] = true;
    }

    /// After step `step` (index) of threadblock `tb` ran with clock `clock`: keeps the clock
    /// if a dependency names the step. Returns whether a new snapshot was stored.
    pub fn after(&mut self, step: usize, tb: usize, clock: &[u32]) -> bool {
        if self.of[step] == NOT_TARGET {
            return false;
        }
        let (id, new) = match self.last[tb] {
            id if id != NOT_TARGET && !self.changed[tb] => (id, false),
            _ => {
                let at = match self.blocks.last() {
                    Some(b) if b.len() + self.width <= self.block => {
                        (self.blocks.len() - 1) * self.block + b.len()
                    }
                    _ => {
                        self.blocks.push(Vec::with_capacity(self.block));
                        (self.blocks.len() - 1) * self.block
                    }
                };
                let id = u32::try_from(at).unwrap_or(PENDING);
                let last = self.blocks.last_mut().expect("a block was just ensured");
                last.extend_from_slice(clock);
                self.len += clock.len();
                self.changed[tb] = false;
                self.last[tb] = id;
                (id, true)
            }
        };
        self.of[step] = id;
        new
    }

    /// Joins the clock after step `step` (index; the `k`-th step of its threadblock, whose
    /// own entry is `own`) into `clock`; true if an entry was raised.
    pub fn join_into(&self, clock: &mut [u32], step: usize, k: usize, own: usize) -> bool {
        let at = self.of[step] as usize;
        let (b, i) = (at / self.block, at % self.block);
        debug_assert!(
            b < self.blocks.len() && i + self.width <= self.blocks[b].len(),
            "a target runs first"
        );
        let mut raised = join(clock, &self.blocks[b][i..i + self.width]);
        if clock[own] < k as u32 + 1 {
            clock[own] = k as u32 + 1;
            raised = true;
        }
        raised
    }

    /// Whether a snapshot's offset still fits its `u32` index.
    pub fn full(&self) -> bool {
        self.blocks.len() * self.block >= PENDING as usize
    }
}

/// The race check with rank-local clocks: each rank on its own, its steps in an order that
/// program order and dependencies allow (they happen-before nothing else then). Returns the
/// race on the first slot of the first rank that has one. The program ran to completion in
/// the symbolic execution, so its dependencies have no cycle and every range resolves. One
/// rank's state (clocks, snapshots, slot histories) may take at most `available` bytes.
pub(super) fn local_races(
    p: &Program,
    sem: &Semantics,
    mode: Mode,
    available: u64,
) -> Result<(), VerifyError> {
    for g in &p.gpus {
        let mut check = RankCheck::new(g, sem, mode);
        check.run(available)?;
        if let Some(e) = check.races.found() {
            return Err(e);
        }
    }
    Ok(())
}

/// The race check of one rank: its threadblocks' vector clocks, the snapshots other
/// threadblocks join, and every slot's access history.
struct RankCheck<'p> {
    g: &'p Gpu,
    sem: &'p Semantics,
    /// Threadblocks of the rank.
    n: usize,
    /// The first slot of each region in `races`.
    region_base: [usize; 3],
    races: Races,
    /// The index of each threadblock's first step among the rank's steps.
    step_base: Vec<usize>,
    snapshots: Snapshots,
    /// One clock of `n` entries per threadblock.
    clocks: Vec<u32>,
    /// Bytes of the state that does not grow: histories and clocks.
    fixed: u64,
}

impl<'p> RankCheck<'p> {
    /// The check of rank `g` before any step.
    fn new(g: &'p Gpu, sem: &'p Semantics, mode: Mode) -> RankCheck<'p> {
        let n = g.threadblocks.len();
        let regions = Region::ALL.map(|r| sem.region_chunks(r).unwrap_or(g.scratch_chunks));
        let region_base = [0, regions[0], regions[0] + regions[1]];
        let races = Races::new(mode, regions.iter().sum());
        let mut step_base = Vec::with_capacity(n);
        let mut steps = 0;
        for tb in &g.threadblocks {
            step_base.push(steps);
            steps += tb.steps.len();
        }
        let targets = g
            .threadblocks
            .iter()
            .flat_map(|tb| tb.steps.iter().flat_map(|s| &s.deps))
            .map(|d| step_base[d.tb] + d.step)
            .collect::<Vec<_>>();
        let snapshots = Snapshots::new(steps, n, n, targets.into_iter());
        let fixed =
            (regions.iter().sum::<usize>() as u64) * HISTORY_BYTES + 4 * (n * n + steps) as u64;
        RankCheck {
            g,
            sem,
            n,
            region_base,
            races,
            step_base,
            snapshots,
            clocks: vec![0u32; n * n],
            fixed,
        }
    }

    /// Runs every step of the rank, each threadblock as far as its dependencies allow, then
    /// the threadblocks that waited for it.
    fn run(&mut self, available: u64) -> Result<(), VerifyError> {
        let n = self.n;
        let mut done = vec![0usize; n];
        let mut waiting: Vec<BinaryHeap<Reverse<(usize, usize)>>> =
            (0..n).map(|_| BinaryHeap::new()).collect();
        let mut queue: VecDeque<usize> = (0..n).collect();
        let mut queued = vec![true; n];
        while let Some(tb) = queue.pop_front() {
            queued[tb] = false;
            let steps = &self.g.threadblocks[tb].steps;
            let before = done[tb];
            while let Some(step) = steps.get(done[tb]) {
                if let Some(d) = step.deps.iter().find(|d| done[d.tb] <= d.step) {
                    waiting[d.tb].push(Reverse((d.step + 1, tb)));
                    break;
                }
                self.step(tb, done[tb], step, available)?;
                done[tb] += 1;
            }
            if done[tb] == before {
                continue;
            }
            while let Some(&Reverse((needed, w))) = waiting[tb].peek() {
                if needed > done[tb] {
                    break;
                }
                waiting[tb].pop();
                if !queued[w] {
                    queued[w] = true;
                    queue.push_back(w);
                }
            }
        }
        Ok(())
    }

    /// Step `k` of threadblock `tb`, whose dependencies have run: its clock joins theirs,
    /// and its reads and writes go into the slots' histories.
    fn step(
        &mut self,
        tb: usize,
        k: usize,
        step: &Step,
        available: u64,
    ) -> Result<(), VerifyError> {
        let (n, rank) = (self.n, self.g.rank);
        let clock = &mut self.clocks[tb * n..(tb + 1) * n];
        let mut raised = false;
        for d in &step.deps {
            let target = self.step_base[d.tb] + d.step;
            raised |= self.snapshots.join_into(clock, target, d.step, d.tb);
        }
        clock[tb] += 1;
        if raised {
            self.snapshots.changed(tb);
        }
        let by = Accessor {
            at: StepRef { rank, tb, step: k },
            clock,
            base: 0,
        };
        let (reads, write) = reads_and_writes(step);
        for (slot, is_write) in reads.iter().map(|s| (s, false)).chain([(&write, true)]) {
            let Some(slot) = slot else { continue };
            let (region, start) = self
                .sem
                .resolve(rank, slot.buffer, slot.offset)
                .expect("resolved in the execution");
            for c in start..start + step.count {
                let key = (rank, region, c);
                let index = self.region_base[region.index()] + c;
                self.races.access(index, key, &by, is_write);
            }
        }
        if self.snapshots.after(self.step_base[tb] + k, tb, by.clock)
            && (self.snapshots.full() || self.fixed + self.snapshots.bytes() > available)
        {
            return Err(VerifyError::Malformed(format!(
                "too large to verify: the race check of rank {rank} needs more than {} MiB",
                available >> 20
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Snapshots wider than a block's share keep their values across blocks: 600 targets of
    /// 2,048 entries each fill two blocks of 512 snapshots.
    #[test]
    fn snapshots_across_blocks_keep_their_clocks() {
        let (steps, width) = (600, 2048);
        let mut s = Snapshots::new(steps, 1, width, 0..steps);
        for step in 0..steps {
            let clock: Vec<u32> = (0..width).map(|e| (step * 7 + e) as u32).collect();
            assert!(s.after(step, 0, &clock), "step {step} stores a snapshot");
            s.changed(0);
        }
        assert!(s.blocks.len() > 1, "{} block(s)", s.blocks.len());
        assert_eq!(s.bytes(), 4 * (steps * width) as u64);
        for step in [0, 1, 511, 512, 513, steps - 1] {
            let mut clock = vec![0u32; width];
            s.join_into(&mut clock, step, 0, 0);
            let want: Vec<u32> = (0..width).map(|e| (step * 7 + e) as u32).collect();
            assert_eq!(clock[1..], want[1..], "snapshot of step {step}");
        }
    }

    /// A threadblock whose clock did not change shares its last snapshot.
    #[test]
    fn an_unchanged_clock_shares_its_snapshot() {
        let mut s = Snapshots::new(2, 1, 3, [0, 1].into_iter());
        assert!(s.after(0, 0, &[1, 2, 3]));
        assert!(!s.after(1, 0, &[1, 2, 3]));
        assert_eq!(s.bytes(), 12);
    }
}
