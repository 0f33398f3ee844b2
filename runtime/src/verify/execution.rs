//! The symbolic execution: threadblocks run their steps as far as dependencies and
//! connection FIFOs allow; every buffer slot holds the multiset of (rank, input chunk)
//! contributions it contains.
//!
//! Memory stays proportional to the program: a slot holds a 4-byte id into an arena of
//! contents (a copy or a send moves an id, not a list), each threadblock's state is one
//! record, and a threadblock is looked at again only when what it waits for happened (the
//! step of another threadblock its next step depends on, a message on its receive
//! connection, room on its send connection), so a run costs about one look per step.

use super::races::{reads_and_writes, Accessor, Races, Snapshots, HISTORY_BYTES};
use super::{Mode, VerifyError, MAX_VERIFY_BYTES};
use crate::ir::{Buffer, Connection, Op, Program, Slot, Step, StepRef};
use crate::semantics::{Contribution, Region, Semantics};
use rustc_hash::FxHashMap;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use super::contents::{pack, unpack, Arena, ContentId, CONTENT_BYTES, CONTRIBUTION_BYTES};

/// The content of a slot nothing has written.
const UNDEFINED: ContentId = u32::MAX;

/// No connection.
const NONE: u32 = u32::MAX;

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
pub(super) enum Blocked {
    Dep(usize, usize),
    Empty(Connection),
    Full(Connection),
}

/// One threadblock's state.
struct Tb<'a> {
    steps: &'a [Step],
    rank: u32,
    id: u32,
    /// Its next step.
    pc: u32,
    send: u32,
    recv: u32,
    /// Index of its first step among all steps.
    step_base: usize,
}

/// Clocks over every threadblock of the program, for the race check during the run (small
/// programs, see [`super::FULL_CLOCK_BYTES`]).
struct Clocks {
    /// The current clock of every threadblock, `width` entries each.
    clock: Vec<u32>,
    width: usize,
    snapshots: Snapshots,
    races: Races,
    /// Message clocks received and joined, whose allocations the next sends reuse.
    spare: Vec<Vec<u32>>,
}

pub(super) struct Execution<'a> {
    p: &'a Program,
    sem: &'a Semantics,
    mode: Mode,
    depth: usize,
    tbs: Vec<Tb<'a>>,
    /// Index in `tbs` of each rank's threadblock 0.
    first: Vec<usize>,
    /// Every step's op and dependencies (global threadblock, step) in flat arrays, by step
    /// index (`step_base + k`): what deciding whether a step can run reads, kept together.
    ops: Vec<Op>,
    dep_at: Vec<u32>,
    deps: Vec<(u32, u32)>,
    connections: Vec<Connection>,
    fifos: Vec<Fifo>,
    /// Memory: every rank's regions, one after the other.
    mem: Vec<ContentId>,
    /// Index in `mem` of each rank's regions.
    region_base: Vec<[usize; 3]>,
    /// The arena of contents (a slot's content is an id into it, or [`UNDEFINED`]).
    contents: Arena,
    clocks: Option<Clocks>,
    /// Bytes allocated so far (checked against [`MAX_VERIFY_BYTES`]).
    bytes: u64,
    /// First data error (undefined read, double count) by step position, reported after the
    /// race check because a race can be its cause.
    deferred: Option<(StepRef, VerifyError)>,
    /// Scratch buffers of one step.
    src_buf: Vec<ContentId>,
    recv_buf: Vec<ContentId>,
}

/// Every threadblock of `p` at its first step, with its connections numbered in order of
/// first use: (threadblocks, each rank's first threadblock, connections, steps in all).
fn threadblocks(p: &Program) -> (Vec<Tb<'_>>, Vec<usize>, Vec<Connection>, usize) {
    let mut ids: FxHashMap<Connection, u32> = FxHashMap::default();
    let mut connections = Vec::new();
    let mut id_of = |c: Connection| {
        *ids.entry(c).or_insert_with(|| {
            connections.push(c);
            (connections.len() - 1) as u32
        })
    };
    let mut tbs = Vec::new();
    let mut first = Vec::with_capacity(p.gpus.len());
    let mut steps = 0;
    for g in &p.gpus {
        first.push(tbs.len());
        for (id, tb) in g.threadblocks.iter().enumerate() {
            let mut conn = |peer: Option<usize>, send: bool| {
                peer.map_or(NONE, |peer| {
                    let (sender, receiver) = if send { (g.rank, peer) } else { (peer, g.rank) };
                    id_of(Connection {
                        sender,
                        receiver,
                        channel: tb.channel,
                    })
                })
            };
            let (send, recv) = (conn(tb.send, true), conn(tb.recv, false));
            tbs.push(Tb {
                steps: &tb.steps,
                rank: g.rank as u32,
                id: id as u32,
                pc: 0,
                send,
                recv,
                step_base: steps,
            });
            steps += tb.steps.len();
        }
    }
    (tbs, first, connections, steps)
}

/// The op of every step of `p` in threadblock order, and its dependencies as (global
/// threadblock, step) pairs: those of step `i` are `deps[dep_at[i]..dep_at[i + 1]]`.
fn flat_steps(p: &Program, first: &[usize], steps: usize) -> (Vec<Op>, Vec<u32>, Vec<(u32, u32)>) {
    let mut ops = Vec::with_capacity(steps);
    let mut dep_at = Vec::with_capacity(steps + 1);
    let mut deps = Vec::new();
    for g in &p.gpus {
        for s in g.threadblocks.iter().flat_map(|tb| &tb.steps) {
            dep_at.push(deps.len() as u32);
            ops.push(s.op);
            deps.extend(
                s.deps
                    .iter()
                    .map(|d| ((first[g.rank] + d.tb) as u32, d.step as u32)),
            );
        }
    }
    dep_at.push(deps.len() as u32);
    (ops, dep_at, deps)
}

/// The first slot of each rank's regions in one array of every rank's slots, and its size.
fn region_bases(p: &Program, sem: &Semantics) -> (Vec<[usize; 3]>, usize) {
    let mut region_base = Vec::with_capacity(p.gpus.len());
    let mut slots = 0;
    for g in &p.gpus {
        let size = |r: Region| sem.region_chunks(r).unwrap_or(g.scratch_chunks);
        let [a, b, c] = Region::ALL.map(size);
        region_base.push([slots, slots + a, slots + a + b]);
        slots += a + b + c;
    }
    (region_base, slots)
}

/// Vector clocks over every threadblock of `p`, with snapshots of the steps that others
/// depend on, for the race check `races`.
fn full_clocks(p: &Program, tbs: &[Tb<'_>], first: &[usize], steps: usize, races: Races) -> Clocks {
    let width = tbs.len();
    let targets: Vec<usize> = p
        .gpus
        .iter()
        .flat_map(|g| {
            let base = first[g.rank];
            g.threadblocks.iter().flat_map(move |tb| {
                tb.steps
                    .iter()
                    .flat_map(|s| &s.deps)
                    .map(move |d| tbs[base + d.tb].step_base + d.step)
            })
        })
        .collect();
    Clocks {
        clock: vec![0; width * width],
        width,
        snapshots: Snapshots::new(steps, width, width, targets.into_iter()),
        races,
        spare: Vec::new(),
    }
}

impl<'a> Execution<'a> {
    /// Runs `p` in the mode of `sem` (with clocks over every threadblock if `full`): errors
    /// on a deadlock, a count mismatch or a message never received; the race check, data
    /// errors and postcondition are asked for afterwards. `bytes` is what the run may
    /// allocate up front (counted against the limit).
    pub fn run(
        p: &'a Program,
        sem: &'a Semantics,
        depth: usize,
        full: bool,
        bytes: u64,
    ) -> Result<Execution<'a>, VerifyError> {
        let mut ex = Execution::new(p, sem, depth, full, bytes)?;
        ex.execute()?;
        ex.check_leftovers()?;
        Ok(ex)
    }

    /// The execution of `p` before any step: every threadblock at its first step, every
    /// input slot holding its initial value.
    fn new(
        p: &'a Program,
        sem: &'a Semantics,
        depth: usize,
        full: bool,
        bytes: u64,
    ) -> Result<Execution<'a>, VerifyError> {
        let mode = Mode::from_inplace(sem.inplace);
        let (tbs, first, connections, steps) = threadblocks(p);
        if steps >= NONE as usize {
            return Err(VerifyError::Malformed(format!(
                "too large to verify: {steps} steps"
            )));
        }
        let (ops, dep_at, deps) = flat_steps(p, &first, steps);
        let (region_base, slots) = region_bases(p, sem);
        let clocks = full.then(|| full_clocks(p, &tbs, &first, steps, Races::new(mode, slots)));
        let connections_count = connections.len();
        let mut ex = Execution {
            p,
            sem,
            mode,
            depth,
            tbs,
            first,
            ops,
            dep_at,
            deps,
            connections,
            fifos: (0..connections_count).map(|_| Fifo::default()).collect(),
            mem: vec![UNDEFINED; slots],
            region_base,
            contents: Arena::default(),
            clocks,
            bytes,
            deferred: None,
            src_buf: Vec::new(),
            recv_buf: Vec::new(),
        };
        ex.load_inputs()?;
        ex.check_resolution()?;
        Ok(ex)
    }

    /// Every rank's input slots hold their initial values.
    fn load_inputs(&mut self) -> Result<(), VerifyError> {
        let (p, sem) = (self.p, self.sem);
        for g in &p.gpus {
            let input = sem.extent(Buffer::Input).unwrap_or(0);
            for k in 0..input {
                let (region, idx) = sem
                    .resolve(g.rank, Buffer::Input, k)
                    .expect("inside extent");
                let id = self.intern_input(sem.initial_input(g.rank, k))?;
                let slot = self.region_base[g.rank][region.index()] + idx;
                self.mem[slot] = id;
            }
        }
        Ok(())
    }

    /// Bytes per buffer slot the run keeps: its content id, and with full clocks its
    /// access history.
    pub fn slot_bytes(full: bool) -> u64 {
        4 + if full { HISTORY_BYTES } else { 0 }
    }

    /// Bytes the run has allocated (what the race check of one rank may add is the rest).
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Adds an input's one contribution to the arena (counted against the memory limit).
    fn intern_input(&mut self, c: Contribution) -> Result<ContentId, VerifyError> {
        self.grow(CONTENT_BYTES + CONTRIBUTION_BYTES)?;
        self.room_for_one()?;
        let packed = pack(c).ok_or_else(|| {
            VerifyError::Malformed(format!(
                "too large to verify: contribution {c} does not fit in 32-bit rank and chunk"
            ))
        })?;
        Ok(self.contents.push_one(packed))
    }

    /// Errors when the arena has no id left.
    fn room_for_one(&self) -> Result<(), VerifyError> {
        if self.contents.len() >= UNDEFINED as usize {
            return Err(VerifyError::Malformed(
                "too large to verify: more than 2^32 distinct buffer contents".into(),
            ));
        }
        Ok(())
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

    fn execute(&mut self) -> Result<(), VerifyError> {
        // The threadblock at each end of every connection.
        let mut sender_of = vec![NONE; self.connections.len()];
        let mut receiver_of = vec![NONE; self.connections.len()];
        for (t, tb) in self.tbs.iter().enumerate() {
            if tb.send != NONE && sender_of[tb.send as usize] == NONE {
                sender_of[tb.send as usize] = t as u32;
            }
            if tb.recv != NONE && receiver_of[tb.recv as usize] == NONE {
                receiver_of[tb.recv as usize] = t as u32;
            }
        }
        // Threadblocks waiting for each threadblock, keyed by the number of steps it must
        // have done, the first due on top.
        let mut waiting: Vec<BinaryHeap<Reverse<(u32, u32)>>> =
            (0..self.tbs.len()).map(|_| BinaryHeap::new()).collect();
        let mut queue: VecDeque<u32> = (0..self.tbs.len() as u32).collect();
        let mut queued = vec![true; self.tbs.len()];
        while let Some(t) = queue.pop_front() {
            let t = t as usize;
            queued[t] = false;
            let mut progressed = false;
            while (self.tbs[t].pc as usize) < self.tbs[t].steps.len() {
                match self.blocker(t) {
                    None => {
                        self.step(t)?;
                        progressed = true;
                    }
                    Some(Blocked::Dep(on, step)) => {
                        waiting[on].push(Reverse((step as u32 + 1, t as u32)));
                        break;
                    }
                    Some(_) => break,
                }
            }
            if !progressed {
                continue;
            }
            let mut wake = |w: u32| {
                if w != NONE && !queued[w as usize] {
                    queued[w as usize] = true;
                    queue.push_back(w);
                }
            };
            let done = self.tbs[t].pc;
            while let Some(&Reverse((needed, w))) = waiting[t].peek() {
                if needed > done {
                    break;
                }
                waiting[t].pop();
                wake(w);
            }
            let tb = &self.tbs[t];
            if tb.send != NONE {
                wake(receiver_of[tb.send as usize]);
            }
            if tb.recv != NONE {
                wake(sender_of[tb.recv as usize]);
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

    /// Why the next step of threadblock `t` cannot run now (None if it can, or it is done);
    /// a dependency is named by its global threadblock.
    fn blocker(&self, t: usize) -> Option<Blocked> {
        let tb = &self.tbs[t];
        if tb.pc as usize >= tb.steps.len() {
            return None;
        }
        let i = tb.step_base + tb.pc as usize;
        let deps = &self.deps[self.dep_at[i] as usize..self.dep_at[i + 1] as usize];
        if let Some(&(on, step)) = deps
            .iter()
            .find(|&&(on, step)| self.tbs[on as usize].pc <= step)
        {
            return Some(Blocked::Dep(on as usize, step as usize));
        }
        let op = self.ops[i];
        if op.receives() && self.fifos[tb.recv as usize].messages.is_empty() {
            return Some(Blocked::Empty(self.connections[tb.recv as usize]));
        }
        if op.sends() && self.fifos[tb.send as usize].messages.len() >= self.depth {
            return Some(Blocked::Full(self.connections[tb.send as usize]));
        }
        None
    }

    fn stuck(&self) -> Vec<String> {
        let mut waits = Vec::new();
        for (t, tb) in self.tbs.iter().enumerate() {
            let Some(b) = self.blocker(t) else {
                continue;
            };
            let op = tb.steps[tb.pc as usize].op;
            let what = match b {
                Blocked::Dep(t, s) => format!("waits for tb {} step {s}", self.tbs[t].id),
                Blocked::Empty(c) => format!(
                    "waits to receive from rank {} on channel {}",
                    c.sender, c.channel
                ),
                Blocked::Full(c) => format!(
                    "waits for room to send to rank {} on channel {}",
                    c.receiver, c.channel
                ),
            };
            waits.push(format!(
                "rank {} tb {} step {} ({op}) {what}",
                tb.rank, tb.id, tb.pc
            ));
        }
        waits
    }

    /// Executes the next step of threadblock `t` (it must be runnable).
    fn step(&mut self, t: usize) -> Result<(), VerifyError> {
        let tb = &self.tbs[t];
        let (steps, rank, si) = (tb.steps, tb.rank as usize, tb.pc as usize);
        let step = &steps[si];
        let at = StepRef {
            rank,
            tb: tb.id as usize,
            step: si,
        };
        let first = self.first[rank];
        let mut received = std::mem::take(&mut self.recv_buf);
        received.clear();
        let mut message_clock = Vec::new();
        if step.op.receives() {
            let c = tb.recv as usize;
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
            message_clock = msg.clock;
        }
        // The clock of this step: the last one, joined with its dependencies' and the
        // message's, counting the step.
        if let Some(c) = &mut self.clocks {
            let w = c.width;
            let clock = &mut c.clock[t * w..(t + 1) * w];
            let mut raised = false;
            for d in &step.deps {
                let on = first + d.tb;
                let index = self.tbs[on].step_base + d.step;
                raised |= c.snapshots.join_into(clock, index, d.step, on);
            }
            raised |= super::races::join(clock, &message_clock);
            clock[t] += 1;
            if raised {
                c.snapshots.changed(t);
            }
            if message_clock.capacity() > 0 {
                c.spare.push(message_clock);
            }
        }
        let outgoing = self.apply(t, at, step, &received)?;
        self.recv_buf = received;
        if let Some(data) = outgoing {
            let c = self.tbs[t].send as usize;
            let clock = match &mut self.clocks {
                Some(k) => {
                    let mut copy = k.spare.pop().unwrap_or_default();
                    copy.clear();
                    copy.extend_from_slice(&k.clock[t * k.width..(t + 1) * k.width]);
                    copy
                }
                None => Vec::new(),
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
        if let Some(c) = &mut self.clocks {
            let w = c.width;
            let index = self.tbs[t].step_base + si;
            if c.snapshots.after(index, t, &c.clock[t * w..(t + 1) * w]) {
                self.bytes = self.bytes.saturating_add(4 * w as u64);
                if c.snapshots.full() || self.bytes > MAX_VERIFY_BYTES {
                    return Err(VerifyError::Malformed(format!(
                        "too large to verify: the symbolic execution needs more than {} MiB (its clocks and contents)",
                        MAX_VERIFY_BYTES >> 20
                    )));
                }
            }
        }
        self.tbs[t].pc += 1;
        Ok(())
    }

    /// The data effect of one step; returns what it sends (in `src_buf`'s allocation).
    fn apply(
        &mut self,
        t: usize,
        at: StepRef,
        step: &Step,
        received: &[ContentId],
    ) -> Result<Option<Vec<ContentId>>, VerifyError> {
        // With full clocks, races are checked as the accesses happen, in the order the data
        // moves: source, `re`'s destination, then the write.
        let mut ranges = [None; 3];
        if self.clocks.is_some() {
            let (reads, write) = reads_and_writes(step);
            for (i, slot) in reads.iter().chain([&write]).enumerate() {
                if let Some(slot) = slot {
                    ranges[i] = Some(self.range(at, *slot, step.count)?);
                }
            }
        }
        if let Some(c) = &mut self.clocks {
            let w = c.width;
            let by = Accessor {
                at,
                clock: &c.clock[t * w..(t + 1) * w],
                base: self.first[at.rank],
            };
            for (i, range) in ranges.iter().enumerate() {
                let Some((region, start)) = *range else {
                    continue;
                };
                let is_write = i == 2;
                let base = self.region_base[at.rank][region.index()];
                for k in start..start + step.count {
                    c.races
                        .access(base + k, (at.rank, region, k), &by, is_write);
                }
            }
        }
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
            Op::Compute => {
                // Read without the undefined-data check: the compute's own error says more.
                let (region, start) = self.range(at, step.dst, step.count)?;
                let base = self.region_base[at.rank][region.index()] + start;
                src.extend_from_slice(&self.mem[base..base + step.count]);
                self.compute(at, step.dst, &mut src)?;
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

    /// A compute on `contents` of output chunks from `slot` on: each must hold exactly the
    /// chunk's full reduction, not yet computed; it then holds that plus [`COMPUTED`].
    fn compute(
        &mut self,
        at: StepRef,
        slot: Slot,
        contents: &mut [ContentId],
    ) -> Result<(), VerifyError> {
        for (k, id) in contents.iter_mut().enumerate() {
            let chunk = slot.offset + k;
            let actual = self.contents.get(*id).unwrap_or(&[]);
            let problem = if actual.last() == Some(&COMPUTED) {
                Some("applied a second time".to_string())
            } else {
                self.sem
                    .expected_output(at.rank, chunk)
                    .and_then(|expected| compare(Some(actual), &expected))
                    .map(|p| format!("the data is not fully reduced: {p}"))
            };
            if let Some(problem) = problem {
                let mode = self.mode;
                self.defer(
                    at,
                    VerifyError::Compute {
                        mode,
                        at,
                        chunk,
                        problem,
                    },
                );
            }
            self.room_for_one()?;
            let marker = self.contents.push_one(COMPUTED);
            let (computed, _) = self.contents.push_sum(*id, marker);
            let len = self.contents.get(computed).map_or(0, <[u64]>::len) as u64;
            self.grow(2 * CONTENT_BYTES + CONTRIBUTION_BYTES * (len + 1))?;
            *id = computed;
        }
        Ok(())
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
            self.room_for_one()?;
            let (sum, twice) = self.contents.push_sum(*x, *y);
            let len = self.contents.get(sum).map_or(0, <[u64]>::len) as u64;
            self.grow(CONTENT_BYTES + CONTRIBUTION_BYTES * len)?;
            if let Some(contribution) = twice {
                let e = VerifyError::DoubleCounted {
                    mode: self.mode,
                    at,
                    slot: Slot::new(slot.buffer, slot.offset + k),
                    contribution,
                };
                self.defer(at, e);
            }
            *y = sum;
        }
        Ok(())
    }

    fn read(
        &mut self,
        at: StepRef,
        slot: Slot,
        count: usize,
        out: &mut Vec<ContentId>,
    ) -> Result<(), VerifyError> {
        let (region, start) = self.range(at, slot, count)?;
        let base = self.region_base[at.rank][region.index()] + start;
        for k in 0..count {
            let id = self.mem[base + k];
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
        let base = self.region_base[at.rank][region.index()] + start;
        self.mem[base..base + data.len()].copy_from_slice(data);
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

    /// The race on the first slot found during the run (with full clocks; with rank-local
    /// clocks see [`super::races::local_races`]).
    pub fn take_race(&mut self) -> Option<VerifyError> {
        self.clocks.take().and_then(|c| c.races.found())
    }

    /// The first data error (undefined read, double count), if any.
    pub fn take_deferred(&mut self) -> Option<VerifyError> {
        self.deferred.take().map(|(_, e)| e)
    }

    pub fn check_postcondition(&self) -> Result<(), VerifyError> {
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
                let id = self.mem[self.region_base[rank][region.index()] + idx];
                let mut actual = self.contents.get(id);
                if self.p.compute.is_some() {
                    match actual {
                        Some([rest @ .., COMPUTED]) => actual = Some(rest),
                        _ => {
                            return Err(VerifyError::Postcondition {
                                mode: self.mode,
                                rank,
                                chunk,
                                problem: "the program's compute was never applied to it".into(),
                            })
                        }
                    }
                }
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

/// The packed marker a compute adds to a content (past every real contribution, which packs
/// rank and chunk in 32 bits each): computed data reduced again, or computed twice, shows.
const COMPUTED: u64 = u64::MAX;

fn describe(c: &[Contribution]) -> String {
    let items: Vec<String> = c
        .iter()
        .map(|x| format!("{}:{}", x.rank, x.chunk))
        .collect();
    format!("{{{}}}", items.join(" "))
}

/// Compares a final slot (packed) with the expected set (both sorted); None if equal.
fn compare(actual: Option<&[u64]>, expected: &[Contribution]) -> Option<String> {
    let Some(actual) = actual else {
        return Some(format!("never written (expected {})", describe(expected)));
    };
    if actual.len() == expected.len()
        && actual
            .iter()
            .zip(expected)
            .all(|(&a, &e)| pack(e) == Some(a))
    {
        return None;
    }
    let actual: Vec<Contribution> = actual.iter().map(|&x| unpack(x)).collect();
    if let Some(c) = expected.iter().find(|c| !actual.contains(c)) {
        return Some(format!(
            "missing contribution {c} (has {})",
            describe(&actual)
        ));
    }
    Some(match actual.iter().find(|c| !expected.contains(c)) {
        Some(extra) => format!(
            "unexpected contribution {extra} (has {})",
            describe(&actual)
        ),
        None => format!(
            "expected {} (has {})",
            describe(expected),
            describe(&actual)
        ),
    })
}
