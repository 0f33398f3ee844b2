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

use crate::ir::{Buffer, Connection, Op, Program, Slot, Step, StepRef, Threadblock};
use crate::semantics::{Contribution, Region, Semantics};
use std::collections::{BTreeMap, HashMap, VecDeque};
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
    /// No threadblock can make progress.
    #[error("{mode}: deadlock: {}", .waits.join("; "))]
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

/// Verifies a program: structure, then symbolic execution in each declared mode.
pub fn verify_with(p: &Program, opts: &VerifyOptions) -> Result<(), VerifyError> {
    check_structure(p)?;
    for inplace in p.modes() {
        let sem = Semantics::of(p, inplace).map_err(VerifyError::Malformed)?;
        check_size(p, &sem)?;
        let mut exec = Execution::run(p, sem, opts.fifo_depth.max(1))?;
        exec.check_races()?;
        if let Some(e) = exec.deferred.take() {
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

/// Rejects a program whose symbolic execution would need more than [`MAX_VERIFY_BYTES`]: about
/// 48 bytes per buffer slot plus the vector clocks (4 bytes an entry): with full clocks, one
/// per threadblock and per dependency target, as wide as the program's threadblocks; with
/// rank-local clocks (over [`FULL_CLOCK_THREADBLOCKS`]), one per threadblock and per step, as
/// wide as the rank's threadblocks.
fn check_size(p: &Program, sem: &Semantics) -> Result<(), VerifyError> {
    let slots = chunk_slots(p, sem);
    let tbs = p
        .gpus
        .iter()
        .map(|g| g.threadblocks.len() as u64)
        .sum::<u64>();
    let clocks = if tbs as usize > FULL_CLOCK_THREADBLOCKS {
        p.gpus
            .iter()
            .map(|g| {
                let n = g.threadblocks.len() as u64;
                let steps: u64 = g.threadblocks.iter().map(|t| t.steps.len() as u64).sum();
                n.saturating_mul(n.saturating_add(steps)).saturating_mul(4)
            })
            .fold(0u64, u64::saturating_add)
    } else {
        let targets: std::collections::HashSet<(usize, usize, usize)> = p
            .gpus
            .iter()
            .flat_map(|g| {
                g.threadblocks.iter().flat_map(move |t| {
                    t.steps
                        .iter()
                        .flat_map(move |st| st.deps.iter().map(move |d| (g.rank, d.tb, d.step)))
                })
            })
            .collect();
        tbs.saturating_mul(tbs.saturating_add(targets.len() as u64))
            .saturating_mul(4)
    };
    let bytes = slots.saturating_mul(48).saturating_add(clocks);
    if bytes > MAX_VERIFY_BYTES {
        return Err(VerifyError::Malformed(format!(
            "too large to verify: {slots} buffer chunks and {tbs} threadblocks need about {} MiB (limit {} MiB)",
            bytes >> 20,
            MAX_VERIFY_BYTES >> 20
        )));
    }
    Ok(())
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

// ---------------------------------------------------------------------------------------
// Symbolic execution

/// Sorted multiset of contributions; `None` = undefined data.
type Content = Option<Vec<Contribution>>;

/// Above this many threadblocks in a program, vector clocks cover each rank's own
/// threadblocks only (full clocks per dependency would need steps × threadblocks memory).
pub const FULL_CLOCK_THREADBLOCKS: usize = 4096;

struct Message {
    from: StepRef,
    count: usize,
    data: Vec<Vec<Contribution>>,
    clock: Vec<u32>,
}

#[derive(Clone, Copy)]
struct Access {
    tb: usize,
    step: usize,
    write: bool,
}

/// What blocks a threadblock's next step.
enum Blocked {
    Dep(usize, usize),
    Empty(Connection),
    Full(Connection),
}

struct Execution<'a> {
    p: &'a Program,
    sem: Semantics,
    mode: Mode,
    depth: usize,
    /// Next step of each threadblock, per rank.
    pc: Vec<Vec<usize>>,
    /// Index of (rank, tb) in vector clocks: global, or within its rank when `local`.
    tb_index: Vec<Vec<usize>>,
    /// Clocks over each rank's own threadblocks only (for programs with more than
    /// [`FULL_CLOCK_THREADBLOCKS`] threadblocks): orders established only through other
    /// ranks are then not seen, so the race check is stricter, never weaker.
    local: bool,
    /// Current clock per threadblock, per rank.
    clock: Vec<Vec<Vec<u32>>>,
    /// Clock after each step, per rank, tb, restricted to the rank's own threadblocks (all
    /// that race checks compare): full clocks per step would take steps × threadblocks.
    step_clock: Vec<Vec<Vec<Vec<u32>>>>,
    /// Full clock after each step that another step depends on.
    dep_clock: HashMap<(usize, usize, usize), Vec<u32>>,
    /// Steps that are dependency targets.
    dep_targets: std::collections::HashSet<(usize, usize, usize)>,
    /// Memory: rank → region → chunk → content.
    mem: Vec<[Vec<Content>; 3]>,
    fifos: BTreeMap<Connection, VecDeque<Message>>,
    /// Accesses per rank, region, chunk.
    accesses: Vec<[Vec<Vec<Access>>; 3]>,
    /// First data error (undefined read, double count), reported after the race check
    /// because a race can be its cause.
    deferred: Option<VerifyError>,
}

impl<'a> Execution<'a> {
    fn run(p: &'a Program, sem: Semantics, depth: usize) -> Result<Execution<'a>, VerifyError> {
        let mut ex = Execution::new(p, sem, depth)?;
        ex.execute()?;
        ex.check_leftovers()?;
        Ok(ex)
    }

    fn new(p: &'a Program, sem: Semantics, depth: usize) -> Result<Execution<'a>, VerifyError> {
        let mut next = 0;
        let tb_index: Vec<Vec<usize>> = p
            .gpus
            .iter()
            .map(|g| {
                (0..g.threadblocks.len())
                    .map(|_| {
                        next += 1;
                        next - 1
                    })
                    .collect()
            })
            .collect();
        let total = next;
        let local = total > FULL_CLOCK_THREADBLOCKS;
        let tb_index: Vec<Vec<usize>> = if local {
            p.gpus
                .iter()
                .map(|g| (0..g.threadblocks.len()).collect())
                .collect()
        } else {
            tb_index
        };
        let mode = Mode::from_inplace(sem.inplace);
        let mut ex = Execution {
            p,
            sem: sem.clone(),
            mode,
            depth,
            pc: p
                .gpus
                .iter()
                .map(|g| vec![0; g.threadblocks.len()])
                .collect(),
            clock: p
                .gpus
                .iter()
                .map(|g| {
                    let width = if local { g.threadblocks.len() } else { total };
                    vec![vec![0; width]; g.threadblocks.len()]
                })
                .collect(),
            local,
            step_clock: p
                .gpus
                .iter()
                .map(|g| {
                    g.threadblocks
                        .iter()
                        .map(|tb| Vec::with_capacity(tb.steps.len()))
                        .collect()
                })
                .collect(),
            dep_clock: HashMap::new(),
            dep_targets: p
                .gpus
                .iter()
                .flat_map(|g| {
                    g.threadblocks.iter().flat_map(move |tb| {
                        tb.steps
                            .iter()
                            .flat_map(move |st| st.deps.iter().map(move |d| (g.rank, d.tb, d.step)))
                    })
                })
                .collect(),
            tb_index,
            mem: Vec::new(),
            fifos: BTreeMap::new(),
            accesses: Vec::new(),
            deferred: None,
        };
        for g in &p.gpus {
            let size = |r: Region| sem.region_chunks(r).unwrap_or(g.scratch_chunks);
            let mem: [Vec<Content>; 3] = Region::ALL.map(|r| vec![None; size(r)]);
            let acc: [Vec<Vec<Access>>; 3] = Region::ALL.map(|r| vec![Vec::new(); size(r)]);
            ex.mem.push(mem);
            ex.accesses.push(acc);
            let input = sem.extent(Buffer::Input).unwrap_or(0);
            for k in 0..input {
                let (region, idx) = sem
                    .resolve(g.rank, Buffer::Input, k)
                    .expect("inside extent");
                ex.mem[g.rank][region.index()][idx] = Some(vec![sem.initial_input(g.rank, k)]);
            }
        }
        ex.check_resolution()?;
        Ok(ex)
    }

    /// Every used slot must resolve inside this mode's memory, and src/dst of one step must
    /// not partially overlap.
    fn check_resolution(&self) -> Result<(), VerifyError> {
        for (at, step) in self.p.steps() {
            let src = if step.op.reads_src() {
                Some(self.range(at, step.src, step.count)?)
            } else {
                None
            };
            let dst = if step.op.writes_dst() {
                Some(self.range(at, step.dst, step.count)?)
            } else {
                None
            };
            if let (Some(a), Some(b)) = (src, dst) {
                let overlap = a.0 == b.0 && a.1 < b.1 + step.count && b.1 < a.1 + step.count;
                if overlap && a.1 != b.1 {
                    return Err(VerifyError::Step {
                        at,
                        what: format!(
                            "source {} and destination {} partially overlap",
                            step.src, step.dst
                        ),
                    });
                }
            }
        }
        Ok(())
    }

    /// The physical start of `count` chunks at `slot`; they must be contiguous and in range.
    fn range(&self, at: StepRef, slot: Slot, count: usize) -> Result<(Region, usize), VerifyError> {
        let oob = |extent: usize| VerifyError::OutOfBounds {
            at,
            slot,
            count,
            buffer: slot.buffer.letter(),
            extent,
        };
        let extent = self
            .sem
            .extent(slot.buffer)
            .unwrap_or(self.p.gpus[at.rank].scratch_chunks);
        if slot.offset + count > extent {
            return Err(oob(extent));
        }
        let (region, start) = self
            .sem
            .resolve(at.rank, slot.buffer, slot.offset)
            .ok_or_else(|| oob(extent))?;
        Ok((region, start))
    }

    fn execute(&mut self) -> Result<(), VerifyError> {
        loop {
            let mut progressed = false;
            for rank in 0..self.p.ngpus {
                for tb in 0..self.pc[rank].len() {
                    while self.blocker(rank, tb).is_none() && !self.finished(rank, tb) {
                        self.step(rank, tb)?;
                        progressed = true;
                    }
                }
            }
            if !progressed {
                break;
            }
        }
        let waits = self.stuck();
        if waits.is_empty() {
            Ok(())
        } else {
            Err(VerifyError::Deadlock {
                mode: self.mode,
                waits,
            })
        }
    }

    fn finished(&self, rank: usize, tb: usize) -> bool {
        self.pc[rank][tb] >= self.p.gpus[rank].threadblocks[tb].steps.len()
    }

    fn send_conn(&self, rank: usize, tb: &Threadblock) -> Option<Connection> {
        tb.send.map(|peer| Connection {
            sender: rank,
            receiver: peer,
            channel: tb.channel,
        })
    }

    fn recv_conn(&self, rank: usize, tb: &Threadblock) -> Option<Connection> {
        tb.recv.map(|peer| Connection {
            sender: peer,
            receiver: rank,
            channel: tb.channel,
        })
    }

    /// Why the next step of a threadblock cannot run now (None if it can, or it is done).
    fn blocker(&self, rank: usize, tbi: usize) -> Option<Blocked> {
        let tb = &self.p.gpus[rank].threadblocks[tbi];
        let step = tb.steps.get(self.pc[rank][tbi])?;
        if let Some(d) = step.deps.iter().find(|d| self.pc[rank][d.tb] <= d.step) {
            return Some(Blocked::Dep(d.tb, d.step));
        }
        if step.op.receives() {
            let conn = self.recv_conn(rank, tb).expect("checked structurally");
            if self.fifos.get(&conn).is_none_or(|q| q.is_empty()) {
                return Some(Blocked::Empty(conn));
            }
        }
        if step.op.sends() {
            let conn = self.send_conn(rank, tb).expect("checked structurally");
            if self.fifos.get(&conn).is_some_and(|q| q.len() >= self.depth) {
                return Some(Blocked::Full(conn));
            }
        }
        None
    }

    fn stuck(&self) -> Vec<String> {
        let mut waits = Vec::new();
        for rank in 0..self.p.ngpus {
            for tb in 0..self.pc[rank].len() {
                let Some(b) = self.blocker(rank, tb) else {
                    continue;
                };
                let step = self.pc[rank][tb];
                let op = self.p.gpus[rank].threadblocks[tb].steps[step].op;
                let what = match b {
                    Blocked::Dep(t, s) => format!("waits for tb {t} step {s}"),
                    Blocked::Empty(c) => format!(
                        "waits to receive from rank {} on channel {}",
                        c.sender, c.channel
                    ),
                    Blocked::Full(c) => format!(
                        "waits for room to send to rank {} on channel {}",
                        c.receiver, c.channel
                    ),
                };
                waits.push(format!("rank {rank} tb {tb} step {step} ({op}) {what}"));
            }
        }
        waits
    }

    /// Executes the next step of a threadblock (it must be runnable).
    fn step(&mut self, rank: usize, tbi: usize) -> Result<(), VerifyError> {
        let p = self.p;
        let tb = &p.gpus[rank].threadblocks[tbi];
        let si = self.pc[rank][tbi];
        let step = &tb.steps[si];
        let at = StepRef {
            rank,
            tb: tbi,
            step: si,
        };
        let mut clock = self.clock[rank][tbi].clone();
        for d in &step.deps {
            if self.local {
                join(&mut clock, &self.step_clock[rank][d.tb][d.step]);
            } else {
                join(&mut clock, &self.dep_clock[&(rank, d.tb, d.step)]);
            }
        }
        let received = if step.op.receives() {
            let conn = self.recv_conn(rank, tb).expect("checked");
            let msg = self
                .fifos
                .get_mut(&conn)
                .and_then(|q| q.pop_front())
                .expect("runnable");
            if msg.count != step.count {
                return Err(VerifyError::CountMismatch {
                    mode: self.mode,
                    conn,
                    send: msg.from,
                    send_count: msg.count,
                    recv: at,
                    recv_count: step.count,
                });
            }
            if !self.local {
                join(&mut clock, &msg.clock);
            }
            Some(msg.data)
        } else {
            None
        };
        clock[self.tb_index[rank][tbi]] += 1;
        let outgoing = self.apply(at, step, received)?;
        if let Some(data) = outgoing {
            let conn = self.send_conn(rank, tb).expect("checked");
            let msg = Message {
                from: at,
                count: step.count,
                data,
                clock: if self.local {
                    Vec::new()
                } else {
                    clock.clone()
                },
            };
            self.fifos.entry(conn).or_default().push_back(msg);
        }
        let base = self.tb_index[rank][0];
        let own = p.gpus[rank].threadblocks.len();
        self.step_clock[rank][tbi].push(clock[base..base + own].to_vec());
        if !self.local && self.dep_targets.contains(&(rank, tbi, si)) {
            self.dep_clock.insert((rank, tbi, si), clock.clone());
        }
        self.clock[rank][tbi] = clock;
        self.pc[rank][tbi] += 1;
        Ok(())
    }

    /// The data effect of one step; returns what it sends.
    fn apply(
        &mut self,
        at: StepRef,
        step: &Step,
        received: Option<Vec<Vec<Contribution>>>,
    ) -> Result<Option<Vec<Vec<Contribution>>>, VerifyError> {
        let src = if step.op.reads_src() {
            Some(self.read(at, step.src, step.count)?)
        } else {
            None
        };
        let combined = match (step.op, received, src) {
            (Op::Nop, _, _) => return Ok(None),
            (Op::Send, _, Some(src)) => return Ok(Some(src)),
            (Op::Recv | Op::RecvCopySend, Some(x), _) => x,
            (Op::Copy, _, Some(src)) => src,
            (
                Op::RecvReduceSend | Op::RecvReduceCopy | Op::RecvReduceCopySend,
                Some(x),
                Some(src),
            ) => self.reduce(at, step.dst, x, src)?,
            (Op::Reduce, _, Some(src)) => {
                let old = self.read(at, step.dst, step.count)?;
                self.reduce(at, step.dst, old, src)?
            }
            _ => unreachable!("op fields are consistent"),
        };
        if step.op.writes_dst() {
            self.write(at, step.dst, &combined);
        }
        Ok(step.op.sends().then_some(combined))
    }

    /// Combines two runs of contents; a contribution counted twice is recorded (first one
    /// only) and kept once so that contents stay small.
    fn reduce(
        &mut self,
        at: StepRef,
        slot: Slot,
        a: Vec<Vec<Contribution>>,
        b: Vec<Vec<Contribution>>,
    ) -> Result<Vec<Vec<Contribution>>, VerifyError> {
        let mut out = Vec::with_capacity(a.len());
        for (k, (mut x, y)) in a.into_iter().zip(b).enumerate() {
            x.extend(y);
            x.sort_unstable();
            if let Some(w) = x.windows(2).find(|w| w[0] == w[1]) {
                let e = VerifyError::DoubleCounted {
                    mode: self.mode,
                    at,
                    slot: Slot::new(slot.buffer, slot.offset + k),
                    contribution: w[0],
                };
                self.deferred.get_or_insert(e);
                x.dedup();
            }
            out.push(x);
        }
        Ok(out)
    }

    fn read(
        &mut self,
        at: StepRef,
        slot: Slot,
        count: usize,
    ) -> Result<Vec<Vec<Contribution>>, VerifyError> {
        let (region, start) = self.range(at, slot, count)?;
        let mut out = Vec::with_capacity(count);
        for k in 0..count {
            let idx = start + k;
            self.accesses[at.rank][region.index()][idx].push(Access {
                tb: at.tb,
                step: at.step,
                write: false,
            });
            match &self.mem[at.rank][region.index()][idx] {
                Some(c) => out.push(c.clone()),
                None => {
                    let e = VerifyError::Undefined {
                        mode: self.mode,
                        at,
                        slot: Slot::new(slot.buffer, slot.offset + k),
                    };
                    self.deferred.get_or_insert(e);
                    out.push(Vec::new());
                }
            }
        }
        Ok(out)
    }

    fn write(&mut self, at: StepRef, slot: Slot, data: &[Vec<Contribution>]) {
        let (region, start) = self
            .range(at, slot, data.len())
            .expect("checked in check_resolution");
        for (k, c) in data.iter().enumerate() {
            let idx = start + k;
            self.accesses[at.rank][region.index()][idx].push(Access {
                tb: at.tb,
                step: at.step,
                write: true,
            });
            self.mem[at.rank][region.index()][idx] = Some(c.clone());
        }
    }

    fn check_leftovers(&self) -> Result<(), VerifyError> {
        for (conn, q) in &self.fifos {
            if let Some(first) = q.front() {
                return Err(VerifyError::UnmatchedSend {
                    mode: self.mode,
                    conn: *conn,
                    first: first.from,
                    count: q.len(),
                });
            }
        }
        Ok(())
    }

    /// True if access `a` happens before access `b` (same rank).
    fn happens_before(&self, rank: usize, a: Access, b: Access) -> bool {
        if a.tb == b.tb {
            return a.step <= b.step;
        }
        let clock_b = &self.step_clock[rank][b.tb][b.step];
        clock_b[a.tb] as usize > a.step
    }

    fn check_races(&self) -> Result<(), VerifyError> {
        for rank in 0..self.p.ngpus {
            for region in Region::ALL {
                for (chunk, list) in self.accesses[rank][region.index()].iter().enumerate() {
                    self.check_slot(rank, region, chunk, list)?;
                }
            }
        }
        Ok(())
    }

    fn check_slot(
        &self,
        rank: usize,
        region: Region,
        chunk: usize,
        list: &[Access],
    ) -> Result<(), VerifyError> {
        for (i, &a) in list.iter().enumerate() {
            for &b in &list[i + 1..] {
                if a.tb == b.tb || !(a.write || b.write) {
                    continue;
                }
                if self.happens_before(rank, a, b) || self.happens_before(rank, b, a) {
                    continue;
                }
                let name = |x: Access| if x.write { "write" } else { "read" };
                return Err(VerifyError::Race {
                    mode: self.mode,
                    rank,
                    region,
                    chunk,
                    first: StepRef {
                        rank,
                        tb: a.tb,
                        step: a.step,
                    },
                    first_access: name(a),
                    second: StepRef {
                        rank,
                        tb: b.tb,
                        step: b.step,
                    },
                    second_access: name(b),
                });
            }
        }
        Ok(())
    }

    fn check_postcondition(&self) -> Result<(), VerifyError> {
        let outputs = self.sem.extent(Buffer::Output).unwrap_or(0);
        for rank in 0..self.p.ngpus {
            for chunk in 0..outputs {
                let Some(expected) = self.sem.expected_output(rank, chunk) else {
                    continue;
                };
                let (region, idx) = self
                    .sem
                    .resolve(rank, Buffer::Output, chunk)
                    .expect("inside extent");
                let actual = &self.mem[rank][region.index()][idx];
                if let Some(problem) = compare(actual.as_deref(), &expected) {
                    return Err(VerifyError::Postcondition {
                        mode: self.mode,
                        rank,
                        chunk,
                        problem,
                    });
                }
            }
        }
        Ok(())
    }
}

fn join(into: &mut [u32], other: &[u32]) {
    for (a, b) in into.iter_mut().zip(other) {
        *a = (*a).max(*b);
    }
}

fn describe(c: &[Contribution]) -> String {
    let items: Vec<String> = c
        .iter()
        .map(|x| format!("{}:{}", x.rank, x.chunk))
        .collect();
    format!("{{{}}}", items.join(" "))
}

/// Compares a final slot with the expected multiset (both sorted); None if equal.
fn compare(actual: Option<&[Contribution]>, expected: &[Contribution]) -> Option<String> {
    let Some(actual) = actual else {
        return Some(format!("never written (expected {})", describe(expected)));
    };
    if actual == expected {
        return None;
    }
    let count = |set: &[Contribution], c: &Contribution| set.iter().filter(|x| *x == c).count();
    if let Some(c) = actual.iter().find(|c| count(actual, c) > 1) {
        return Some(format!(
            "double-counted contribution {c} (has {})",
            describe(actual)
        ));
    }
    if let Some(c) = expected.iter().find(|c| count(actual, c) == 0) {
        return Some(format!(
            "missing contribution {c} (has {})",
            describe(actual)
        ));
    }
    let extra = actual
        .iter()
        .find(|c| count(expected, c) == 0)
        .expect("differs");
    Some(format!(
        "unexpected contribution {extra} (has {})",
        describe(actual)
    ))
}
