//! The verifier: structural checks plus a symbolic execution of a [`Program`].
//!
//! Every buffer slot holds the multiset of (rank, input chunk) contributions it contains.
//! Each connection (sender, receiver, channel) is a FIFO of bounded depth; the k-th send on it
//! pairs with the k-th receive and both must move the same number of chunks. Because every
//! FIFO has one writer and one reader threadblock and dependency flags only grow, the network
//! is deterministic (Kahn), so one schedule decides deadlock for all. Happens-before (program
//! order, dependencies, send→receive) is tracked with vector clocks to find data races on a
//! rank's memory. The collective's postcondition is checked for each mode the program declares
//! (in place and/or out of place).

mod contents;
mod execution;
mod races;

use crate::ir::{Buffer, Connection, Op, Program, Slot, Step, StepRef, Threadblock};
use crate::semantics::{Contribution, Region, Semantics};
use execution::Execution;
use std::collections::HashMap;
use std::fmt;

/// Messages a connection holds before a send blocks, in the verifier's model and by default in
/// the CPU executor: two, as NCCL's 8-step connection FIFO holds two Simple-protocol chunks
/// of 4 steps.
pub const DEFAULT_FIFO_DEPTH: usize = 2;

/// Most memory the symbolic execution may need, in bytes (README "Limits"): a program that
/// needs more is rejected before anything is allocated.
pub const MAX_VERIFY_BYTES: u64 = 4 << 30;

/// Which buffer arrangement a check ran under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Send and receive buffers alias.
    InPlace,
    /// Distinct buffers.
    OutOfPlace,
}

impl Mode {
    /// The mode for an in-place flag.
    pub fn from_inplace(inplace: bool) -> Mode {
        if inplace {
            Mode::InPlace
        } else {
            Mode::OutOfPlace
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::InPlace => "in-place",
            Mode::OutOfPlace => "out-of-place",
        })
    }
}

/// Why a program is wrong. Messages are one line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    /// Program-level inconsistency (geometry, ranks, declared extents, modes).
    #[error("malformed program: {0}")]
    Malformed(String),
    /// A threadblock-level rule is broken (peers, channel uniqueness).
    #[error("rank {rank} tb {tb}: {what}")]
    Threadblock {
        /// Rank.
        rank: usize,
        /// Threadblock id.
        tb: usize,
        /// What is wrong.
        what: String,
    },
    /// A step-level rule is broken (peer missing, bad dependency, zero count, overlap).
    #[error("{at}: {what}")]
    Step {
        /// The step.
        at: StepRef,
        /// What is wrong.
        what: String,
    },
    /// A step addresses chunks beyond a buffer's extent.
    #[error("{at}: {slot} with count {count} is out of bounds ({buffer} has {extent} chunks)")]
    OutOfBounds {
        /// The step.
        at: StepRef,
        /// First chunk addressed.
        slot: Slot,
        /// Chunks addressed.
        count: usize,
        /// Buffer name.
        buffer: &'static str,
        /// Chunks available.
        extent: usize,
    },
    /// A send and its paired receive move different numbers of chunks.
    #[error("{mode}: mismatched send/receive counts on {conn}: {send} sends {send_count} chunks but {recv} receives {recv_count}")]
    CountMismatch {
        /// Mode.
        mode: Mode,
        /// Connection.
        conn: Connection,
        /// Sending step.
        send: StepRef,
        /// Its count.
        send_count: usize,
        /// Receiving step.
        recv: StepRef,
        /// Its count.
        recv_count: usize,
    },
    /// No threadblock can make progress. The message names the first blocked threadblock
    /// and counts the rest; [`VerifyError::detail`] lists every one.
    #[error("{mode}: deadlock: {}", deadlock_summary(.waits))]
    Deadlock {
        /// Mode.
        mode: Mode,
        /// One entry per stuck threadblock: what it waits for.
        waits: Vec<String>,
    },
    /// Sends that no step ever receives.
    #[error(
        "{mode}: unmatched send: {count} message(s) from {first} on {conn} are never received"
    )]
    UnmatchedSend {
        /// Mode.
        mode: Mode,
        /// Connection.
        conn: Connection,
        /// First unreceived sending step.
        first: StepRef,
        /// Messages left.
        count: usize,
    },
    /// Two threadblocks of a rank touch a slot, one writes, and neither happens before the
    /// other.
    #[error("{mode}: race on rank {rank} {region:?}[{chunk}]: {first} ({first_access}) and {second} ({second_access}) are unordered")]
    Race {
        /// Mode.
        mode: Mode,
        /// Rank.
        rank: usize,
        /// Physical region.
        region: Region,
        /// Chunk in the region.
        chunk: usize,
        /// One access.
        first: StepRef,
        /// "read" or "write".
        first_access: &'static str,
        /// The other access.
        second: StepRef,
        /// "read" or "write".
        second_access: &'static str,
    },
    /// A step reads a slot that holds no defined data.
    #[error("{mode}: {at} reads undefined data in {slot}")]
    Undefined {
        /// Mode.
        mode: Mode,
        /// The step.
        at: StepRef,
        /// The undefined slot.
        slot: Slot,
    },
    /// A reduction counts one contribution twice.
    #[error("{mode}: {at} double-counts {contribution} in {slot}")]
    DoubleCounted {
        /// Mode.
        mode: Mode,
        /// The step.
        at: StepRef,
        /// The slot written.
        slot: Slot,
        /// The contribution counted twice.
        contribution: Contribution,
    },
    /// A compute step is applied to data that is not fully reduced, or a second time.
    #[error("{mode}: {at}: compute on output chunk {chunk}: {problem}")]
    Compute {
        /// Mode.
        mode: Mode,
        /// The compute step.
        at: StepRef,
        /// The output chunk.
        chunk: usize,
        /// What is wrong.
        problem: String,
    },
    /// The final output is not what the collective requires.
    #[error("{mode}: rank {rank} output chunk {chunk}: {problem}")]
    Postcondition {
        /// Mode.
        mode: Mode,
        /// Rank.
        rank: usize,
        /// Output chunk.
        chunk: usize,
        /// What is wrong.
        problem: String,
    },
}

/// Options of the verifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VerifyOptions {
    /// Messages a connection holds before a send blocks (at least 1).
    pub fifo_depth: usize,
}

impl Default for VerifyOptions {
    fn default() -> Self {
        VerifyOptions {
            fifo_depth: DEFAULT_FIFO_DEPTH,
        }
    }
}

/// Verifies a program with the default options.
pub fn verify(p: &Program) -> Result<(), VerifyError> {
    verify_with(p, &VerifyOptions::default())
}

/// The one-line summary of a deadlock: the first blocked threadblock and how many more.
fn deadlock_summary(waits: &[String]) -> String {
    match waits {
        [] => "no threadblock can run".to_string(),
        [one] => one.clone(),
        [first, rest @ ..] => format!(
            "{first}; {} more threadblocks blocked (all listed with --verbose or in --json)",
            rest.len()
        ),
    }
}

impl VerifyError {
    /// The lines beyond the one-line message: every blocked threadblock of a deadlock (empty
    /// for other errors).
    pub fn detail(&self) -> &[String] {
        match self {
            VerifyError::Deadlock { waits, .. } => waits,
            _ => &[],
        }
    }
}

/// Verifies a program: structure, then symbolic execution in each declared mode.
pub fn verify_with(p: &Program, opts: &VerifyOptions) -> Result<(), VerifyError> {
    verify_clocked(p, opts, full_clocks(p))
}

/// [`verify_with`] with clocks over every threadblock (`full`) or over each rank's own.
fn verify_clocked(p: &Program, opts: &VerifyOptions, full: bool) -> Result<(), VerifyError> {
    check_structure(p)?;
    for inplace in p.modes() {
        let sem = Semantics::of(p, inplace).map_err(VerifyError::Malformed)?;
        let bytes = check_size(p, &sem, full)?;
        let mut exec = Execution::run(p, &sem, opts.fifo_depth.max(1), full, bytes)?;
        if let Some(e) = exec.take_race() {
            return Err(e);
        }
        if !full {
            let available = MAX_VERIFY_BYTES.saturating_sub(exec.bytes());
            races::local_races(p, &sem, Mode::from_inplace(inplace), available)?;
        }
        if let Some(e) = exec.take_deferred() {
            return Err(e);
        }
        exec.check_postcondition()?;
    }
    Ok(())
}

/// Buffer slots (chunks) of all ranks' regions in the mode of `sem`, saturating.
pub fn chunk_slots(p: &Program, sem: &Semantics) -> u64 {
    p.gpus
        .iter()
        .flat_map(|g| Region::ALL.map(|r| sem.region_chunks(r).unwrap_or(g.scratch_chunks) as u64))
        .fold(0, u64::saturating_add)
}

/// Most memory for vector clocks over every threadblock of a program: one per threadblock
/// and per dependency target, each as wide as the program's threadblocks. Beyond it clocks
/// cover each rank's own threadblocks only: orders established only through other ranks are
/// then not seen, so the race check is stricter, never weaker (a 256-rank ring allgather in
/// place has 4096 threadblocks and 130,048 dependency targets: 2 GiB of full clocks).
pub const FULL_CLOCK_BYTES: u64 = 256 << 20;

/// Whether the program's clocks cover every threadblock (see [`FULL_CLOCK_BYTES`]): an
/// upper bound of threadblocks × (threadblocks + dependency targets) entries of 4 bytes.
fn full_clocks(p: &Program) -> bool {
    let tbs = p
        .gpus
        .iter()
        .map(|g| g.threadblocks.len() as u64)
        .sum::<u64>();
    let deps = p
        .steps()
        .map(|(_, s)| s.deps.len() as u64)
        .fold(0u64, u64::saturating_add);
    tbs.saturating_mul(tbs.saturating_add(deps))
        .saturating_mul(4)
        <= FULL_CLOCK_BYTES
}

/// Rejects a program whose symbolic execution would need more than [`MAX_VERIFY_BYTES`]
/// before anything is allocated, and returns what it allocates up front: per buffer slot a
/// content id (and with full clocks an access history), each threadblock's clock, and for
/// rank-local clocks the race check of the largest rank. What grows during the run (clock
/// snapshots of dependency targets, reduced contents) is counted against the same limit as
/// it is made.
fn check_size(p: &Program, sem: &Semantics, full: bool) -> Result<u64, VerifyError> {
    let slots = chunk_slots(p, sem);
    let tbs = p
        .gpus
        .iter()
        .map(|g| g.threadblocks.len() as u64)
        .sum::<u64>();
    let steps = p.step_count() as u64;
    let run = slots
        .saturating_mul(Execution::slot_bytes(full))
        .saturating_add(tbs.saturating_mul(48));
    let clocks = if full {
        tbs.saturating_mul(tbs)
            .saturating_add(steps)
            .saturating_mul(4)
    } else {
        p.gpus
            .iter()
            .map(|g| {
                let n = g.threadblocks.len() as u64;
                let steps: u64 = g.threadblocks.iter().map(|t| t.steps.len() as u64).sum();
                let slots = Region::ALL
                    .map(|r| sem.region_chunks(r).unwrap_or(g.scratch_chunks) as u64)
                    .iter()
                    .fold(0u64, |a, &b| a.saturating_add(b));
                n.saturating_mul(n)
                    .saturating_add(steps)
                    .saturating_mul(4)
                    .saturating_add(slots.saturating_mul(races::HISTORY_BYTES))
            })
            .max()
            .unwrap_or(0)
    };
    let bytes = run.saturating_add(clocks);
    if bytes > MAX_VERIFY_BYTES {
        return Err(VerifyError::Malformed(format!(
            "too large to verify: {slots} buffer chunks and {tbs} threadblocks need about {} MiB (limit {} MiB)",
            bytes >> 20,
            MAX_VERIFY_BYTES >> 20
        )));
    }
    Ok(if full { bytes } else { run })
}

// ---------------------------------------------------------------------------------------
// Structure

fn check_structure(p: &Program) -> Result<(), VerifyError> {
    check_program_fields(p)?;
    for g in &p.gpus {
        check_peer_uniqueness(p, g.rank, &g.threadblocks)?;
        for (tbi, tb) in g.threadblocks.iter().enumerate() {
            check_threadblock(p, g.rank, tbi, tb)?;
            for (si, step) in tb.steps.iter().enumerate() {
                let at = StepRef {
                    rank: g.rank,
                    tb: tbi,
                    step: si,
                };
                check_step(p, at, tb, step)?;
            }
        }
    }
    Ok(())
}

fn check_program_fields(p: &Program) -> Result<(), VerifyError> {
    let bad = |s: String| Err(VerifyError::Malformed(s));
    if p.gpus.len() != p.ngpus {
        return bad(format!(
            "{} gpu entries for ngpus {}",
            p.gpus.len(),
            p.ngpus
        ));
    }
    if let Some((i, g)) = p.gpus.iter().enumerate().find(|(i, g)| g.rank != *i) {
        return bad(format!("gpu entry {i} has rank {}", g.rank));
    }
    if !p.inplace && !p.outofplace {
        return bad("neither inplace nor outofplace is set".into());
    }
    let sem = Semantics::of(p, false).map_err(VerifyError::Malformed)?;
    for g in &p.gpus {
        for (buffer, declared) in [
            (Buffer::Input, g.input_chunks),
            (Buffer::Output, g.output_chunks),
        ] {
            let full = sem.extent(buffer).unwrap_or(0);
            if declared != 0 && declared != full {
                return bad(format!(
                    "rank {} declares {declared} {} chunks; {} with nchunksperloop {} needs 0 or {full}",
                    g.rank,
                    buffer.letter(),
                    p.collective,
                    p.nchunksperloop
                ));
            }
        }
    }
    Ok(())
}

fn check_peer_uniqueness(p: &Program, rank: usize, tbs: &[Threadblock]) -> Result<(), VerifyError> {
    let mut seen: HashMap<(usize, usize, bool), usize> = HashMap::new();
    for (tbi, tb) in tbs.iter().enumerate() {
        for (peer, is_send) in [(tb.send, true), (tb.recv, false)] {
            let Some(peer) = peer else { continue };
            if let Some(other) = seen.insert((tb.channel, peer, is_send), tbi) {
                let dir = if is_send { "sends to" } else { "receives from" };
                return Err(VerifyError::Threadblock {
                    rank,
                    tb: tbi,
                    what: format!(
                        "tb {other} already {dir} rank {peer} on channel {} (one tb per channel, peer and direction)",
                        tb.channel
                    ),
                });
            }
        }
    }
    let _ = p;
    Ok(())
}

fn check_threadblock(
    p: &Program,
    rank: usize,
    tbi: usize,
    tb: &Threadblock,
) -> Result<(), VerifyError> {
    for (peer, name) in [(tb.send, "send"), (tb.recv, "recv")] {
        let Some(peer) = peer else { continue };
        let what = if peer == rank {
            format!("{name} peer is its own rank")
        } else if peer >= p.ngpus {
            format!("{name} peer {peer} is not a rank (ngpus {})", p.ngpus)
        } else {
            continue;
        };
        return Err(VerifyError::Threadblock {
            rank,
            tb: tbi,
            what,
        });
    }
    Ok(())
}

fn check_step(p: &Program, at: StepRef, tb: &Threadblock, step: &Step) -> Result<(), VerifyError> {
    let fail = |what: String| Err(VerifyError::Step { at, what });
    if step.op.sends() && tb.send.is_none() {
        return fail(format!("{} in a threadblock without a send peer", step.op));
    }
    if step.op.receives() && tb.recv.is_none() {
        return fail(format!(
            "{} in a threadblock without a receive peer",
            step.op
        ));
    }
    if step.op != Op::Nop && step.count == 0 {
        return fail(format!("{} with count 0", step.op));
    }
    if step.op == Op::Compute {
        let Some(compute) = &p.compute else {
            return fail("compute in a program without a compute (its `compute` field)".into());
        };
        if let Err(e) = compute.kernel() {
            return fail(e.to_string());
        }
        if step.dst.buffer != Buffer::Output {
            return fail(format!(
                "compute on {}: it applies to output chunks only",
                step.dst
            ));
        }
    }
    let tbs = &p.gpus[at.rank].threadblocks;
    for d in &step.deps {
        if d.tb == at.tb {
            return fail(format!("depends on its own threadblock (step {})", d.step));
        }
        let Some(target) = tbs.get(d.tb) else {
            return fail(format!("depends on tb {} which does not exist", d.tb));
        };
        if d.step >= target.steps.len() {
            return fail(format!(
                "depends on tb {} step {} but that tb has {} steps",
                d.tb,
                d.step,
                target.steps.len()
            ));
        }
    }
    check_bounds(p, at, step)
}

fn check_bounds(p: &Program, at: StepRef, step: &Step) -> Result<(), VerifyError> {
    let g = &p.gpus[at.rank];
    for (used, slot) in [
        (step.op.reads_src(), step.src),
        (step.op.writes_dst(), step.dst),
    ] {
        let extent = g.chunks(slot.buffer);
        if used && slot.offset.saturating_add(step.count) > extent {
            return Err(VerifyError::OutOfBounds {
                at,
                slot,
                count: step.count,
                buffer: slot.buffer.letter(),
                extent,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builders::{direct_allgather, direct_alltoall, ring_allgather, ring_allreduce};

    fn local(p: &Program) -> Result<(), VerifyError> {
        verify_clocked(p, &VerifyOptions::default(), false)
    }

    #[test]
    fn rank_local_clocks_accept_correct_programs() {
        for p in [
            ring_allreduce(&[0, 1, 2, 3], 2, false),
            ring_allreduce(&[0, 1, 2, 3], 2, true),
            ring_allgather(&[2, 0, 1], 1, true),
            direct_alltoall(3),
        ] {
            assert!(full_clocks(&p), "a small program gets full clocks");
            local(&p).unwrap_or_else(|e| panic!("{}: {e}", p.name));
        }
    }

    #[test]
    fn rank_local_clocks_find_the_races_full_clocks_find() {
        // Unordered writes: rank 0's local copy also writes o[1], which a receive writes.
        let mut p = direct_alltoall(2);
        p.gpus[0].threadblocks[0].steps[0].dst.offset = 1;
        let want = "out-of-place: race on rank 0 Recv[1]: rank 0 tb 0 step 0 (write) and rank 0 tb 1 step 1 (write) are unordered";
        assert_eq!(verify(&p).unwrap_err().to_string(), want);
        assert_eq!(local(&p).unwrap_err().to_string(), want);
        // A dependency orders them.
        p.gpus[0].threadblocks[0].steps[0]
            .deps
            .push(crate::ir::Dep { tb: 1, step: 1 });
        assert!(!local(&p).unwrap_err().to_string().contains("race"));
        // In place, a local copy writes the slot a send reads (read/write race).
        let mut p = direct_allgather(2);
        p.inplace = true;
        p.outofplace = false;
        let want = "in-place: race on rank 0 Recv[0]: rank 0 tb 0 step 0 (write) and rank 0 tb 1 step 0 (read) are unordered";
        assert_eq!(verify(&p).unwrap_err().to_string(), want);
        assert_eq!(local(&p).unwrap_err().to_string(), want);
    }

    #[test]
    fn rank_local_clocks_miss_orders_made_only_through_other_ranks() {
        // Rank 0 sends its input to rank 1, which echoes it back (its send depends on its
        // receive); rank 0 receives the echo into the slot its send read. Only the round
        // trip through rank 1 orders that read before that write: full clocks see it,
        // rank-local clocks report a race (stricter, never weaker).
        use crate::ir::{Collective, Gpu, Protocol, Threadblock};
        let tb = |send: Option<usize>, recv: Option<usize>, step: Step| Threadblock {
            send,
            recv,
            channel: 0,
            steps: vec![step],
        };
        let (i0, o0) = (Slot::new(Buffer::Input, 0), Slot::new(Buffer::Output, 0));
        let gpu = |rank: usize, tbs: Vec<Threadblock>| Gpu {
            rank,
            input_chunks: 1,
            output_chunks: 2,
            scratch_chunks: 0,
            threadblocks: tbs,
        };
        let p = Program {
            name: "echo".into(),
            collective: Collective::AllGather,
            root: 0,
            protocol: Protocol::Simple,
            ngpus: 2,
            nchunksperloop: 2,
            inplace: false,
            outofplace: true,
            min_bytes: 0,
            max_bytes: 0,
            gpus: vec![
                gpu(
                    0,
                    vec![
                        tb(Some(1), None, Step::new(Op::Send, i0, o0, 1)),
                        tb(None, Some(1), Step::new(Op::Recv, o0, i0, 1)),
                    ],
                ),
                gpu(
                    1,
                    vec![
                        tb(None, Some(0), Step::new(Op::Recv, i0, o0, 1)),
                        tb(Some(0), None, Step::new(Op::Send, o0, i0, 1).after(0, 0)),
                    ],
                ),
            ],
            custom: None,
            compute: None,
        };
        let full = verify(&p).unwrap_err().to_string();
        assert!(!full.contains("race"), "{full}");
        assert_eq!(
            local(&p).unwrap_err().to_string(),
            "out-of-place: race on rank 0 Send[0]: rank 0 tb 0 step 0 (read) and rank 0 tb 1 step 0 (write) are unordered"
        );
    }
}
