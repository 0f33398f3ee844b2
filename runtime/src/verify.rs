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
use rustc_hash::FxHashMap;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
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
        if let Some((_, e)) = exec.deferred.take() {
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

/// Bytes the symbolic execution keeps per buffer slot: its content (an id into the
/// arena of contents) and its access history (last write, two reads).
const SLOT_BYTES: u64 = 28;

/// Rejects a program whose symbolic execution would need more than [`MAX_VERIFY_BYTES`]
/// before anything is allocated: [`SLOT_BYTES`] per buffer slot, 4 bytes per step (its
/// clock snapshot's id) and each threadblock's current vector clock (4 bytes an entry):
/// with full clocks as wide as the program's threadblocks, with rank-local clocks (over
/// [`FULL_CLOCK_BYTES`]) as wide as the rank's. What grows during the run (clock
/// snapshots of dependency targets, reduced contents) is counted against the same limit as
/// it is made.
fn check_size(p: &Program, sem: &Semantics) -> Result<(), VerifyError> {
    let bytes = static_bytes(p, sem);
    if bytes > MAX_VERIFY_BYTES {
        let slots = chunk_slots(p, sem);
        let tbs: usize = p.gpus.iter().map(|g| g.threadblocks.len()).sum();
        return Err(VerifyError::Malformed(format!(
            "too large to verify: {slots} buffer chunks and {tbs} threadblocks need about {} MiB (limit {} MiB)",
            bytes >> 20,
            MAX_VERIFY_BYTES >> 20
        )));
    }
    Ok(())
}

/// The memory the symbolic execution allocates up front (see [`check_size`]), saturating.
fn static_bytes(p: &Program, sem: &Semantics) -> u64 {
    let slots = chunk_slots(p, sem);
    let tbs = p
        .gpus
        .iter()
        .map(|g| g.threadblocks.len() as u64)
        .sum::<u64>();
    let steps = p.step_count() as u64;
    let clocks = if !full_clocks(p) {
        p.gpus
            .iter()
            .map(|g| (g.threadblocks.len() as u64).saturating_pow(2))
            .fold(0u64, u64::saturating_add)
    } else {
        tbs.saturating_mul(tbs)
    };
    slots
        .saturating_mul(SLOT_BYTES)
        .saturating_add(steps.saturating_mul(4))
        .saturating_add(clocks.saturating_mul(4))
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

/// Most memory for vector clocks over every threadblock of a program: one per threadblock,
/// per dependency target and per message in flight, each as wide as the program's
/// threadblocks. Beyond it clocks cover each rank's own threadblocks only (a 256-rank ring
/// allgather in place has 4096 threadblocks and 130,048 dependency targets: 2 GiB of full
/// clocks, and as many 16 KiB copies).
pub const FULL_CLOCK_BYTES: u64 = 256 << 20;

/// Whether the program's clocks cover every threadblock (see [`FULL_CLOCK_BYTES`]): an
/// upper bound of threadblocks × (threadblocks + dependency targets) entries of 4 bytes.
fn full_clocks(p: &Program) -> bool {
    let tbs = p.gpus.iter().map(|g| g.threadblocks.len() as u64).sum::<u64>();
    let deps = p
        .steps()
        .map(|(_, s)| s.deps.len() as u64)
        .fold(0u64, u64::saturating_add);
    tbs.saturating_mul(tbs.saturating_add(deps)).saturating_mul(4) <= FULL_CLOCK_BYTES
}

/// A slot's content: an id into [`Execution::contents`], or [`UNDEFINED`].
type ContentId = u32;

/// The content of a slot nothing has written.
const UNDEFINED: ContentId = u32::MAX;

/// An access to a slot, packed: threadblock in the high half, step in the low half.
type Access = u64;

/// No access.
const NO_ACCESS: Access = u64::MAX;

fn access(tb: usize, step: usize) -> Access {
    ((tb as u64) << 32) | step as u64
}

fn access_tb(a: Access) -> usize {
    (a >> 32) as usize
}

fn access_step(a: Access) -> usize {
    (a & 0xffff_ffff) as usize
}

/// Marks a step that no dependency names (it needs no clock snapshot).
const NOT_TARGET: u32 = u32::MAX;

/// Marks a dependency target not executed yet.
const PENDING: u32 = u32::MAX - 1;

/// What one slot has seen since its last write, for the race check: the last write and the
/// reads after it that are not ordered behind each other (two inline, more in an overflow
/// map).
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

/// A message in a connection: its data (content ids) waits in the connection's `data`.
struct Message {
    from: StepRef,
    count: usize,
    /// The sender's full vector clock (empty with rank-local clocks).
    clock: Vec<u32>,
}

/// One connection's FIFO.
#[derive(Default)]
struct Fifo {
    messages: VecDeque<Message>,
    data: VecDeque<ContentId>,
}

/// What blocks a threadblock's next step.
enum Blocked {
    Dep(usize, usize),
    Empty(Connection),
    Full(Connection),
}

/// The state of a symbolic execution. Memory is kept proportional to the program: a slot
/// holds a 4-byte content id (contents are shared in an arena, so a copy or a send moves an
/// id, not a list), races are checked as each access happens against the slot's last write
/// and the reads since (vector clocks make that equal to comparing every pair), and clocks
/// are stored only for dependency targets, shared while a threadblock's clock has not
/// changed but for its own steps.
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
    /// [`FULL_CLOCK_BYTES`] of full clocks): orders established only through other
    /// ranks are then not seen, so the race check is stricter, never weaker.
    local: bool,
    /// Current clock per threadblock, per rank.
    clock: Vec<Vec<Vec<u32>>>,
    /// Whether a threadblock's clock changed, but for its own entry, since its last snapshot.
    changed: Vec<Vec<bool>>,
    /// Each threadblock's last snapshot.
    last_snapshot: Vec<Vec<Option<u32>>>,
    /// Index of each threadblock's first step in `snapshot_of`, per rank.
    step_base: Vec<Vec<usize>>,
    /// Per step: [`NOT_TARGET`], [`PENDING`], or the snapshot of the clock after it.
    snapshot_of: Vec<u32>,
    /// Clock snapshots; a snapshot may serve several steps of one threadblock, whose own
    /// entry is then raised to the step when it is joined.
    snapshots: Vec<Vec<u32>>,
    /// Send and receive connection of each threadblock, per rank.
    send_conn: Vec<Vec<Option<usize>>>,
    recv_conn: Vec<Vec<Option<usize>>>,
    /// The connections, by id.
    connections: Vec<Connection>,
    fifos: Vec<Fifo>,
    /// Memory: rank → region → chunk → content id.
    mem: Vec<[Vec<ContentId>; 3]>,
    /// The arena of contents: sorted multisets of contributions.
    contents: Vec<Box<[Contribution]>>,
    /// Access histories: rank → region → chunk.
    history: Vec<[Vec<History>; 3]>,
    /// Reads beyond a history's two, by (rank, region, chunk).
    more_reads: FxHashMap<(usize, usize, usize), Vec<Access>>,
    /// Bytes allocated so far (checked against [`MAX_VERIFY_BYTES`]).
    bytes: u64,
    /// The race on the first slot (by rank, region, chunk) found to have one.
    race: Option<((usize, usize, usize), VerifyError)>,
    /// First data error (undefined read, double count) by step position, reported after the
    /// race check because a race can be its cause.
    deferred: Option<(StepRef, VerifyError)>,
    /// Scratch buffers of one step, kept to avoid allocating per step.
    src_buf: Vec<ContentId>,
    recv_buf: Vec<ContentId>,
}

impl<'a> Execution<'a> {
    fn run(p: &'a Program, sem: Semantics, depth: usize) -> Result<Execution<'a>, VerifyError> {
        let mut ex = Execution::new(p, sem, depth)?;
        ex.execute()?;
        ex.check_leftovers()?;
        Ok(ex)
    }

    fn new(p: &'a Program, sem: Semantics, depth: usize) -> Result<Execution<'a>, VerifyError> {
        let total: usize = p.gpus.iter().map(|g| g.threadblocks.len()).sum();
        let local = !full_clocks(p);
        let mut next = 0;
        let tb_index: Vec<Vec<usize>> = p
            .gpus
            .iter()
            .map(|g| {
                (0..g.threadblocks.len())
                    .map(|i| {
                        next += 1;
                        if local {
                            i
                        } else {
                            next - 1
                        }
                    })
                    .collect()
            })
            .collect();
        let mut steps = 0;
        let step_base: Vec<Vec<usize>> = p
            .gpus
            .iter()
            .map(|g| {
                g.threadblocks
                    .iter()
                    .map(|tb| {
                        steps += tb.steps.len();
                        steps - tb.steps.len()
                    })
                    .collect()
            })
            .collect();
        let mut snapshot_of = vec![NOT_TARGET; steps];
        for g in &p.gpus {
            for tb in &g.threadblocks {
                for d in tb.steps.iter().flat_map(|s| &s.deps) {
                    snapshot_of[step_base[g.rank][d.tb] + d.step] = PENDING;
                }
            }
        }
        // Connections by id, and each threadblock's.
        let mut ids: FxHashMap<Connection, usize> = FxHashMap::default();
        let mut connections = Vec::new();
        let mut id_of = |c: Connection| {
            *ids.entry(c).or_insert_with(|| {
                connections.push(c);
                connections.len() - 1
            })
        };
        let mut send_conn = Vec::with_capacity(p.gpus.len());
        let mut recv_conn = Vec::with_capacity(p.gpus.len());
        for g in &p.gpus {
            let (mut sends, mut recvs) = (Vec::new(), Vec::new());
            for tb in &g.threadblocks {
                sends.push(tb.send.map(|peer| {
                    id_of(Connection {
                        sender: g.rank,
                        receiver: peer,
                        channel: tb.channel,
                    })
                }));
                recvs.push(tb.recv.map(|peer| {
                    id_of(Connection {
                        sender: peer,
                        receiver: g.rank,
                        channel: tb.channel,
                    })
                }));
            }
            send_conn.push(sends);
            recv_conn.push(recvs);
        }
        let fifos = (0..connections.len()).map(|_| Fifo::default()).collect();
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
            changed: p
                .gpus
                .iter()
                .map(|g| vec![false; g.threadblocks.len()])
                .collect(),
            last_snapshot: p
                .gpus
                .iter()
                .map(|g| vec![None; g.threadblocks.len()])
                .collect(),
            local,
            tb_index,
            step_base,
            snapshot_of,
            snapshots: Vec::new(),
            send_conn,
            recv_conn,
            connections,
            fifos,
            mem: Vec::with_capacity(p.gpus.len()),
            contents: Vec::new(),
            history: Vec::with_capacity(p.gpus.len()),
            more_reads: FxHashMap::default(),
            bytes: static_bytes(p, &sem),
            race: None,
            deferred: None,
            src_buf: Vec::new(),
            recv_buf: Vec::new(),
        };
        for g in &p.gpus {
            let size = |r: Region| sem.region_chunks(r).unwrap_or(g.scratch_chunks);
            ex.mem.push(Region::ALL.map(|r| vec![UNDEFINED; size(r)]));
            ex.history
                .push(Region::ALL.map(|r| vec![History::EMPTY; size(r)]));
            let input = sem.extent(Buffer::Input).unwrap_or(0);
            for k in 0..input {
                let (region, idx) = sem
                    .resolve(g.rank, Buffer::Input, k)
                    .expect("inside extent");
                let id = ex.intern(vec![sem.initial_input(g.rank, k)])?;
                ex.mem[g.rank][region.index()][idx] = id;
            }
        }
        ex.check_resolution()?;
        Ok(ex)
    }

    /// Adds a content to the arena (counted against the memory limit).
    fn intern(&mut self, content: Vec<Contribution>) -> Result<ContentId, VerifyError> {
        self.grow(16 + 16 * content.len() as u64)?;
        if self.contents.len() >= UNDEFINED as usize {
            return Err(VerifyError::Malformed(
                "too large to verify: more than 2^32 distinct buffer contents".into(),
            ));
        }
        self.contents.push(content.into_boxed_slice());
        Ok((self.contents.len() - 1) as ContentId)
    }

    /// Counts `bytes` more against [`MAX_VERIFY_BYTES`].
    fn grow(&mut self, bytes: u64) -> Result<(), VerifyError> {
        self.bytes = self.bytes.saturating_add(bytes);
        if self.bytes > MAX_VERIFY_BYTES {
            return Err(VerifyError::Malformed(format!(
                "too large to verify: the symbolic execution needs more than {} MiB (its clocks and contents)",
                MAX_VERIFY_BYTES >> 20
            )));
        }
        Ok(())
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

    /// Runs every threadblock as far as it goes. A threadblock is looked at again only when
    /// what it waits for happened (a step of the threadblock its next step depends on, a
    /// message on its receive connection, room on its send connection), so a large program
    /// costs about one look per step.
    fn execute(&mut self) -> Result<(), VerifyError> {
        // The threadblock at each end of every connection.
        let mut sender_of = vec![None; self.connections.len()];
        let mut receiver_of = vec![None; self.connections.len()];
        for (rank, tbs) in self.send_conn.iter().enumerate() {
            for (tb, c) in tbs.iter().enumerate() {
                if let Some(c) = *c {
                    sender_of[c].get_or_insert((rank, tb));
                }
            }
        }
        for (rank, tbs) in self.recv_conn.iter().enumerate() {
            for (tb, c) in tbs.iter().enumerate() {
                if let Some(c) = *c {
                    receiver_of[c].get_or_insert((rank, tb));
                }
            }
        }
        // Threadblocks of the same rank waiting for each threadblock, keyed by the number of
        // steps it must have done, the first due on top (a threadblock is woken when the
        // step it waits for is done, not at every step before it).
        let mut waiting: Vec<Vec<BinaryHeap<Reverse<(usize, usize)>>>> = self
            .pc
            .iter()
            .map(|tbs| (0..tbs.len()).map(|_| BinaryHeap::new()).collect())
            .collect();
        let mut queue: VecDeque<(usize, usize)> = VecDeque::new();
        let mut queued: Vec<Vec<bool>> = Vec::with_capacity(self.p.gpus.len());
        for g in &self.p.gpus {
            queue.extend((0..g.threadblocks.len()).map(|tb| (g.rank, tb)));
            queued.push(vec![true; g.threadblocks.len()]);
        }
        while let Some((rank, tb)) = queue.pop_front() {
            queued[rank][tb] = false;
            let mut progressed = false;
            while !self.finished(rank, tb) {
                match self.blocker(rank, tb) {
                    None => {
                        self.step(rank, tb)?;
                        progressed = true;
                    }
                    Some(Blocked::Dep(on, step)) => {
                        waiting[rank][on].push(Reverse((step + 1, tb)));
                        break;
                    }
                    Some(_) => break,
                }
            }
            if !progressed {
                continue;
            }
            let mut wake = |r: usize, t: usize| {
                if !queued[r][t] {
                    queued[r][t] = true;
                    queue.push_back((r, t));
                }
            };
            let done = self.pc[rank][tb];
            while let Some(&Reverse((needed, t))) = waiting[rank][tb].peek() {
                if needed > done {
                    break;
                }
                waiting[rank][tb].pop();
                wake(rank, t);
            }
            if let Some((r, t)) = self.send_conn[rank][tb].and_then(|c| receiver_of[c]) {
                wake(r, t);
            }
            if let Some((r, t)) = self.recv_conn[rank][tb].and_then(|c| sender_of[c]) {
                wake(r, t);
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

    /// Why the next step of a threadblock cannot run now (None if it can, or it is done).
    fn blocker(&self, rank: usize, tbi: usize) -> Option<Blocked> {
        let tb = &self.p.gpus[rank].threadblocks[tbi];
        let step = tb.steps.get(self.pc[rank][tbi])?;
        if let Some(d) = step.deps.iter().find(|d| self.pc[rank][d.tb] <= d.step) {
            return Some(Blocked::Dep(d.tb, d.step));
        }
        if step.op.receives() {
            let c = self.recv_conn[rank][tbi].expect("checked structurally");
            if self.fifos[c].messages.is_empty() {
                return Some(Blocked::Empty(self.connections[c]));
            }
        }
        if step.op.sends() {
            let c = self.send_conn[rank][tbi].expect("checked structurally");
            if self.fifos[c].messages.len() >= self.depth {
                return Some(Blocked::Full(self.connections[c]));
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

    /// Joins the clock after step `step` of threadblock `tb` of `rank` into `clock`; true if
    /// that raised an entry.
    fn join_step(&self, clock: &mut [u32], rank: usize, tb: usize, step: usize) -> bool {
        let id = self.snapshot_of[self.step_base[rank][tb] + step];
        debug_assert!(id < PENDING, "a dependency target runs before its dependents");
        let mut raised = join(clock, &self.snapshots[id as usize]);
        let own = &mut clock[self.tb_index[rank][tb]];
        if *own < step as u32 + 1 {
            *own = step as u32 + 1;
            raised = true;
        }
        raised
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
        let mut clock = std::mem::take(&mut self.clock[rank][tbi]);
        let mut raised = false;
        for d in &step.deps {
            raised |= self.join_step(&mut clock, rank, d.tb, d.step);
        }
        let mut received = std::mem::take(&mut self.recv_buf);
        received.clear();
        if step.op.receives() {
            let c = self.recv_conn[rank][tbi].expect("checked");
            let fifo = &mut self.fifos[c];
            let msg = fifo.messages.pop_front().expect("runnable");
            if msg.count != step.count {
                return Err(VerifyError::CountMismatch {
                    mode: self.mode,
                    conn: self.connections[c],
                    send: msg.from,
                    send_count: msg.count,
                    recv: at,
                    recv_count: step.count,
                });
            }
            received.extend(fifo.data.drain(..msg.count));
            if !self.local {
                raised |= join(&mut clock, &msg.clock);
            }
        }
        clock[self.tb_index[rank][tbi]] += 1;
        self.changed[rank][tbi] |= raised;
        self.clock[rank][tbi] = clock;
        let outgoing = self.apply(at, step, &received)?;
        self.recv_buf = received;
        if let Some(data) = outgoing {
            let c = self.send_conn[rank][tbi].expect("checked");
            let clock = if self.local {
                Vec::new()
            } else {
                self.clock[rank][tbi].clone()
            };
            let fifo = &mut self.fifos[c];
            fifo.data.extend(data.iter().copied());
            fifo.messages.push_back(Message {
                from: at,
                count: step.count,
                clock,
            });
            self.src_buf = data;
        }
        let g = self.step_base[rank][tbi] + si;
        if self.snapshot_of[g] != NOT_TARGET {
            let id = match self.last_snapshot[rank][tbi] {
                Some(id) if !self.changed[rank][tbi] => id,
                _ => {
                    let width = self.clock[rank][tbi].len() as u64;
                    self.grow(4 * width + 24)?;
                    self.snapshots.push(self.clock[rank][tbi].clone());
                    self.changed[rank][tbi] = false;
                    (self.snapshots.len() - 1) as u32
                }
            };
            self.last_snapshot[rank][tbi] = Some(id);
            self.snapshot_of[g] = id;
        }
        self.pc[rank][tbi] += 1;
        Ok(())
    }

    /// The data effect of one step; returns what it sends (in `src_buf`'s allocation).
    fn apply(
        &mut self,
        at: StepRef,
        step: &Step,
        received: &[ContentId],
    ) -> Result<Option<Vec<ContentId>>, VerifyError> {
        let mut src = std::mem::take(&mut self.src_buf);
        src.clear();
        if step.op.reads_src() {
            self.read(at, step.src, step.count, &mut src)?;
        }
        let combined = match step.op {
            Op::Nop => {
                self.src_buf = src;
                return Ok(None);
            }
            Op::Send => return Ok(Some(src)),
            Op::Recv | Op::RecvCopySend => {
                src.clear();
                src.extend_from_slice(received);
                src
            }
            Op::Copy => src,
            Op::RecvReduceSend | Op::RecvReduceCopy | Op::RecvReduceCopySend => {
                self.reduce(at, step.dst, received, &mut src)?;
                src
            }
            Op::Reduce => {
                let mut old = Vec::with_capacity(step.count);
                self.read(at, step.dst, step.count, &mut old)?;
                self.reduce(at, step.dst, &old, &mut src)?;
                src
            }
        };
        if step.op.writes_dst() {
            self.write(at, step.dst, &combined);
        }
        if step.op.sends() {
            Ok(Some(combined))
        } else {
            self.src_buf = combined;
            Ok(None)
        }
    }

    /// Records a data error; the one at the first step position is reported.
    fn defer(&mut self, at: StepRef, e: VerifyError) {
        if self.deferred.as_ref().is_none_or(|(first, _)| at < *first) {
            self.deferred = Some((at, e));
        }
    }

    /// `into[k] ← a[k] ⊕ into[k]`: merges two runs of contents; a contribution counted twice
    /// is recorded and kept once so that contents stay small.
    fn reduce(
        &mut self,
        at: StepRef,
        slot: Slot,
        a: &[ContentId],
        into: &mut [ContentId],
    ) -> Result<(), VerifyError> {
        for (k, (x, y)) in a.iter().zip(into.iter_mut()).enumerate() {
            let part = |id: ContentId, contents: &[Box<[Contribution]>]| -> Vec<Contribution> {
                contents
                    .get(id as usize)
                    .map_or(Vec::new(), |c| c.to_vec())
            };
            let mut sum = part(*x, &self.contents);
            sum.extend(part(*y, &self.contents));
            sum.sort_unstable();
            if let Some(w) = sum.windows(2).find(|w| w[0] == w[1]) {
                let e = VerifyError::DoubleCounted {
                    mode: self.mode,
                    at,
                    slot: Slot::new(slot.buffer, slot.offset + k),
                    contribution: w[0],
                };
                self.defer(at, e);
                sum.dedup();
            }
            *y = self.intern(sum)?;
        }
        Ok(())
    }

    /// Whether access `a` happens before the current step of threadblock `tb` of `rank`
    /// (whose clock already counts that step).
    fn ordered_before(&self, rank: usize, tb: usize, a: Access) -> bool {
        let (atb, astep) = (access_tb(a), access_step(a));
        if atb == tb {
            return true;
        }
        let base = self.tb_index[rank][0];
        self.clock[rank][tb][base + atb] as usize > astep
    }

    /// Checks an access against a slot's history (it must be ordered after the last write
    /// and, if it writes, after the reads since) and records it.
    fn access(&mut self, at: StepRef, region: Region, idx: usize, write: bool) {
        let (rank, tb) = (at.rank, at.tb);
        let key = (rank, region.index(), idx);
        let h = self.history[rank][region.index()][idx];
        let unordered = |a: &Access| *a != NO_ACCESS && !self.ordered_before(rank, tb, *a);
        let race = if unordered(&h.write) {
            Some((h.write, "write"))
        } else if write {
            let more = self.more_reads.get(&key).map_or(&[][..], |v| v.as_slice());
            h.reads.iter().chain(more).find(|r| unordered(r)).map(|&r| (r, "read"))
        } else {
            None
        };
        if let Some((first, first_access)) = race {
            if self.race.as_ref().is_none_or(|(k, _)| key < *k) {
                let e = VerifyError::Race {
                    mode: self.mode,
                    rank,
                    region,
                    chunk: idx,
                    first: StepRef {
                        rank,
                        tb: access_tb(first),
                        step: access_step(first),
                    },
                    first_access,
                    second: at,
                    second_access: if write { "write" } else { "read" },
                };
                self.race = Some((key, e));
            }
        }
        let here = access(tb, at.step);
        if write {
            self.history[rank][region.index()][idx] = History {
                write: here,
                reads: [NO_ACCESS; 2],
            };
            if !self.more_reads.is_empty() {
                self.more_reads.remove(&key);
            }
            return;
        }
        // A read ordered after an earlier one stands for both: whatever is ordered after
        // it is ordered after the earlier one too.
        for i in 0..2 {
            let r = h.reads[i];
            if r == NO_ACCESS || self.ordered_before(rank, tb, r) {
                self.history[rank][region.index()][idx].reads[i] = here;
                return;
            }
        }
        self.more_reads.entry(key).or_default().push(here);
    }

    fn read(
        &mut self,
        at: StepRef,
        slot: Slot,
        count: usize,
        out: &mut Vec<ContentId>,
    ) -> Result<(), VerifyError> {
        let (region, start) = self.range(at, slot, count)?;
        for k in 0..count {
            let idx = start + k;
            self.access(at, region, idx, false);
            let id = self.mem[at.rank][region.index()][idx];
            if id == UNDEFINED {
                let e = VerifyError::Undefined {
                    mode: self.mode,
                    at,
                    slot: Slot::new(slot.buffer, slot.offset + k),
                };
                self.defer(at, e);
            }
            out.push(id);
        }
        Ok(())
    }

    fn write(&mut self, at: StepRef, slot: Slot, data: &[ContentId]) {
        let (region, start) = self
            .range(at, slot, data.len())
            .expect("checked in check_resolution");
        for (k, &id) in data.iter().enumerate() {
            let idx = start + k;
            self.access(at, region, idx, true);
            self.mem[at.rank][region.index()][idx] = id;
        }
    }

    fn check_leftovers(&self) -> Result<(), VerifyError> {
        let mut order: Vec<usize> = (0..self.connections.len()).collect();
        order.sort_by_key(|&c| self.connections[c]);
        for c in order {
            let q = &self.fifos[c].messages;
            if let Some(first) = q.front() {
                return Err(VerifyError::UnmatchedSend {
                    mode: self.mode,
                    conn: self.connections[c],
                    first: first.from,
                    count: q.len(),
                });
            }
        }
        Ok(())
    }

    /// The race found on the first slot, if any.
    fn check_races(&mut self) -> Result<(), VerifyError> {
        match self.race.take() {
            Some((_, e)) => Err(e),
            None => Ok(()),
        }
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
                let id = self.mem[rank][region.index()][idx];
                let actual = self.contents.get(id as usize).map(|c| &c[..]);
                if let Some(problem) = compare(actual, &expected) {
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

/// `into ← max(into, other)` entry by entry; true if an entry was raised.
fn join(into: &mut [u32], other: &[u32]) -> bool {
    let mut raised = false;
    for (a, b) in into.iter_mut().zip(other) {
        raised |= *b > *a;
        *a = (*a).max(*b);
    }
    raised
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
