//! The IR: a [`Program`] is MSCCL's algorithm model held in memory (ranks → threadblocks →
//! steps). It maps one-to-one onto MSCCL XML (see [`crate::xml`]) and has a JSON form through
//! serde. In memory a step lists all of its dependencies directly; the XML's `nop` steps and
//! `hasdep` flags are produced and consumed by the XML module.

use crate::semantics::Contribution;
use serde::{Deserialize, Serialize};
use std::fmt;

/// One of the three buffers a step can address (XML letters `i`, `o`, `s`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Buffer {
    /// The user's send buffer (`i`).
    Input,
    /// The user's receive buffer (`o`).
    Output,
    /// The runtime's scratch buffer (`s`).
    Scratch,
}

impl Buffer {
    /// The XML letter of this buffer.
    pub fn letter(self) -> &'static str {
        match self {
            Buffer::Input => "i",
            Buffer::Output => "o",
            Buffer::Scratch => "s",
        }
    }

    /// The buffer named by an XML letter.
    pub fn from_letter(s: &str) -> Option<Buffer> {
        match s {
            "i" => Some(Buffer::Input),
            "o" => Some(Buffer::Output),
            "s" => Some(Buffer::Scratch),
            _ => None,
        }
    }
}

/// An MSCCL instruction (XML `type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Op {
    /// `s`: send `src` to the send peer.
    Send,
    /// `r`: receive from the receive peer into `dst`.
    Recv,
    /// `rcs`: receive into `dst` and forward the data to the send peer.
    RecvCopySend,
    /// `rrs`: receive x, send `x ⊕ src` (nothing written locally).
    RecvReduceSend,
    /// `rrc`: receive x, write `x ⊕ src` into `dst`.
    RecvReduceCopy,
    /// `rrcs`: receive x, write `x ⊕ src` into `dst` and send it.
    RecvReduceCopySend,
    /// `cpy`: `dst ← src`.
    Copy,
    /// `re`: `dst ← dst ⊕ src`.
    Reduce,
    /// `nop`: no data, only dependencies.
    Nop,
    /// synth's extension, not in MSCCL XML: `dst ← f(dst)` elementwise by the program's
    /// [`crate::compute::Compute`], on fully reduced output chunks.
    Compute,
}

impl Op {
    /// Every op MSCCL XML has, in XML table order ([`Op::Compute`] is synth's own).
    pub const ALL: [Op; 9] = [
        Op::Send,
        Op::Recv,
        Op::RecvCopySend,
        Op::RecvReduceSend,
        Op::RecvReduceCopy,
        Op::RecvReduceCopySend,
        Op::Copy,
        Op::Reduce,
        Op::Nop,
    ];

    /// The XML `type` code.
    pub fn code(self) -> &'static str {
        match self {
            Op::Send => "s",
            Op::Recv => "r",
            Op::RecvCopySend => "rcs",
            Op::RecvReduceSend => "rrs",
            Op::RecvReduceCopy => "rrc",
            Op::RecvReduceCopySend => "rrcs",
            Op::Copy => "cpy",
            Op::Reduce => "re",
            Op::Nop => "nop",
            Op::Compute => "compute",
        }
    }

    /// The op named by an XML `type` code.
    pub fn from_code(s: &str) -> Option<Op> {
        Op::ALL.into_iter().find(|op| op.code() == s)
    }

    /// True if the step puts data on its threadblock's send connection.
    pub fn sends(self) -> bool {
        matches!(
            self,
            Op::Send | Op::RecvCopySend | Op::RecvReduceSend | Op::RecvReduceCopySend
        )
    }

    /// True if the step takes data from its threadblock's receive connection.
    pub fn receives(self) -> bool {
        matches!(
            self,
            Op::Recv
                | Op::RecvCopySend
                | Op::RecvReduceSend
                | Op::RecvReduceCopy
                | Op::RecvReduceCopySend
        )
    }

    /// True if the step reads its local `src` slots.
    pub fn reads_src(self) -> bool {
        matches!(
            self,
            Op::Send
                | Op::RecvReduceSend
                | Op::RecvReduceCopy
                | Op::RecvReduceCopySend
                | Op::Copy
                | Op::Reduce
        )
    }

    /// True if the step writes its local `dst` slots (a `re` also reads them).
    pub fn writes_dst(self) -> bool {
        matches!(
            self,
            Op::Recv
                | Op::RecvCopySend
                | Op::RecvReduceCopy
                | Op::RecvReduceCopySend
                | Op::Copy
                | Op::Reduce
                | Op::Compute
        )
    }

    /// True for the fused instructions that RCCL's MSCCL kernels refuse.
    pub fn is_fused(self) -> bool {
        matches!(
            self,
            Op::RecvCopySend | Op::RecvReduceSend | Op::RecvReduceCopy | Op::RecvReduceCopySend
        )
    }

    /// True if the step combines data with the reduction operator.
    pub fn reduces(self) -> bool {
        matches!(
            self,
            Op::RecvReduceSend | Op::RecvReduceCopy | Op::RecvReduceCopySend | Op::Reduce
        )
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

/// The first chunk of a run of `count` consecutive chunks in one buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Slot {
    /// Which buffer.
    pub buffer: Buffer,
    /// Chunk index into that buffer.
    pub offset: usize,
}

impl Slot {
    /// A slot in `buffer` at chunk `offset`.
    pub fn new(buffer: Buffer, offset: usize) -> Slot {
        Slot { buffer, offset }
    }
}

impl fmt::Display for Slot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}[{}]", self.buffer.letter(), self.offset)
    }
}

/// A dependency: wait until threadblock `tb` of the same rank has finished its step `step`
/// (an index into that threadblock's `steps`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Dep {
    /// Threadblock id on the same rank.
    pub tb: usize,
    /// Index into that threadblock's `steps`.
    pub step: usize,
}

/// One instruction of a threadblock. For `s`/`r` the field that the runtime ignores names the
/// remote slot (msccl-tools' convention); see [`Op`] for which fields each op uses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Step {
    /// The instruction.
    pub op: Op,
    /// Source slot.
    pub src: Slot,
    /// Destination slot.
    pub dst: Slot,
    /// Number of consecutive chunks.
    pub count: usize,
    /// Every dependency of this step (no nops in memory).
    pub deps: Vec<Dep>,
}

impl Step {
    /// A step with no dependencies.
    pub fn new(op: Op, src: Slot, dst: Slot, count: usize) -> Step {
        Step {
            op,
            src,
            dst,
            count,
            deps: Vec::new(),
        }
    }

    /// The same step with one more dependency.
    pub fn after(mut self, tb: usize, step: usize) -> Step {
        self.deps.push(Dep { tb, step });
        self
    }
}

/// A threadblock: a sequential list of steps with at most one send peer, one receive peer,
/// and one channel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Threadblock {
    /// Rank this threadblock sends to.
    pub send: Option<usize>,
    /// Rank this threadblock receives from.
    pub recv: Option<usize>,
    /// Channel index.
    pub channel: usize,
    /// The instructions, in order.
    pub steps: Vec<Step>,
}

/// One rank's part of a program. `input_chunks`/`output_chunks` are the XML `i_chunks` /
/// `o_chunks`: either 0 (buffer not addressed) or the collective's full extent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gpu {
    /// The rank.
    pub rank: usize,
    /// Chunks of the input buffer this rank addresses.
    pub input_chunks: usize,
    /// Chunks of the output buffer this rank addresses.
    pub output_chunks: usize,
    /// Chunks of scratch this rank needs.
    pub scratch_chunks: usize,
    /// Threadblocks; the index is the XML `tb id`.
    pub threadblocks: Vec<Threadblock>,
}

impl Gpu {
    /// Declared chunk count of a buffer.
    pub fn chunks(&self, buffer: Buffer) -> usize {
        match buffer {
            Buffer::Input => self.input_chunks,
            Buffer::Output => self.output_chunks,
            Buffer::Scratch => self.scratch_chunks,
        }
    }
}

/// XML dialects of the three MSCCL runtimes (see msccl-ir.md §1.13).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Flavor {
    /// Azure/msccl-executor-nccl: `reducescatter`, fused ops, `maxBytes="0"` = no limit.
    Nccl,
    /// RCCL's MSCCL: only `s r cpy re nop`, at most 64 threadblocks.
    Rccl,
    /// microsoft/msccl (legacy): `reduce_scatter`, explicit `maxBytes` (exclusive).
    Legacy,
}

impl Flavor {
    /// Every flavour.
    pub const ALL: [Flavor; 3] = [Flavor::Nccl, Flavor::Rccl, Flavor::Legacy];

    /// The name used on command lines and in files: `nccl`, `rccl` or `legacy`.
    pub fn name(self) -> &'static str {
        match self {
            Flavor::Nccl => "nccl",
            Flavor::Rccl => "rccl",
            Flavor::Legacy => "legacy",
        }
    }

    /// The flavour named `name` ([`Flavor::name`]), if any.
    pub fn from_name(name: &str) -> Option<Flavor> {
        Flavor::ALL.into_iter().find(|f| f.name() == name)
    }
}

/// The collective a program implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Collective {
    /// Every rank gets the reduction of all inputs.
    AllReduce,
    /// Every rank gets every rank's input, concatenated.
    AllGather,
    /// Rank r gets the reduction of slice r of all inputs.
    ReduceScatter,
    /// Rank r gets slice r of every rank's input.
    AllToAll,
    /// Every rank gets the root's input.
    Broadcast,
    /// The root gets the reduction of all inputs.
    Reduce,
    /// The root gets every rank's input, concatenated.
    Gather,
    /// Rank r gets slice r of the root's input.
    Scatter,
    /// A user-defined collective: the program's [`Program::custom`] says what every input
    /// chunk holds at the start and what every output chunk must hold at the end.
    Custom,
}

impl Collective {
    /// Every collective.
    pub const ALL: [Collective; 9] = [
        Collective::AllReduce,
        Collective::AllGather,
        Collective::ReduceScatter,
        Collective::AllToAll,
        Collective::Broadcast,
        Collective::Reduce,
        Collective::Gather,
        Collective::Scatter,
        Collective::Custom,
    ];

    /// The runtime's `sizeMultiplier`: the larger buffer has `count × multiplier` elements,
    /// where `count` is the API's per-rank count (ngpus for allgather, reducescatter,
    /// alltoall; 1 otherwise).
    pub fn size_multiplier(self, ngpus: usize) -> usize {
        match self {
            Collective::AllGather | Collective::ReduceScatter | Collective::AllToAll => ngpus,
            _ => 1,
        }
    }

    /// True for collectives with a root rank.
    pub fn is_rooted(self) -> bool {
        matches!(
            self,
            Collective::Broadcast | Collective::Reduce | Collective::Gather | Collective::Scatter
        )
    }

    /// True if the collective combines data with the reduction operator.
    pub fn is_reduction(self) -> bool {
        matches!(
            self,
            Collective::AllReduce | Collective::ReduceScatter | Collective::Reduce
        )
    }

    /// The XML `coll` value in a flavour, or `None` if that runtime lacks the collective.
    pub fn xml_name(self, flavor: Flavor) -> Option<&'static str> {
        let legacy = flavor == Flavor::Legacy;
        Some(match self {
            Collective::AllReduce => "allreduce",
            Collective::AllGather => "allgather",
            Collective::ReduceScatter if legacy => "reduce_scatter",
            Collective::ReduceScatter => "reducescatter",
            Collective::AllToAll => "alltoall",
            Collective::Broadcast => "broadcast",
            Collective::Reduce => "reduce",
            Collective::Gather | Collective::Scatter if legacy => return None,
            Collective::Gather => "gather",
            Collective::Scatter => "scatter",
            // Only the legacy runtime lists `custom`; the executor and RCCL refuse the file.
            Collective::Custom if legacy => "custom",
            Collective::Custom => return None,
        })
    }

    /// The collective named by an XML `coll` value (any flavour's spelling).
    pub fn from_xml_name(s: &str) -> Option<Collective> {
        Some(match s {
            "allreduce" => Collective::AllReduce,
            "allgather" => Collective::AllGather,
            "reducescatter" | "reduce_scatter" => Collective::ReduceScatter,
            "alltoall" => Collective::AllToAll,
            "broadcast" => Collective::Broadcast,
            "reduce" => Collective::Reduce,
            "gather" => Collective::Gather,
            "scatter" => Collective::Scatter,
            "custom" => Collective::Custom,
            _ => return None,
        })
    }

    /// nccl-tests' bus-bandwidth factor: busbw = algbw × factor.
    pub fn busbw_factor(self, ngpus: usize) -> f64 {
        let n = ngpus as f64;
        match self {
            Collective::AllReduce => 2.0 * (n - 1.0) / n,
            Collective::Broadcast | Collective::Reduce | Collective::Custom => 1.0,
            _ => (n - 1.0) / n,
        }
    }
}

impl fmt::Display for Collective {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let legacy_only = matches!(self, Collective::Custom);
        let flavor = if legacy_only {
            Flavor::Legacy
        } else {
            Flavor::Nccl
        };
        f.write_str(self.xml_name(flavor).unwrap_or("?"))
    }
}

/// The NCCL protocol of every transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Protocol {
    /// Bulk copies; best for large messages.
    Simple,
    /// Low latency, 8-byte payload per 16-byte line.
    LL,
    /// 120 bytes payload per 128-byte line.
    LL128,
}

impl Protocol {
    /// The XML `proto` value.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Simple => "Simple",
            Protocol::LL => "LL",
            Protocol::LL128 => "LL128",
        }
    }

    /// The protocol named by an XML `proto` value (case-sensitive, as the runtime).
    pub fn from_name(s: &str) -> Option<Protocol> {
        match s {
            "Simple" => Some(Protocol::Simple),
            "LL" => Some(Protocol::LL),
            "LL128" => Some(Protocol::LL128),
            _ => None,
        }
    }
}

/// A step's position in a program.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct StepRef {
    /// Rank.
    pub rank: usize,
    /// Threadblock id on that rank.
    pub tb: usize,
    /// Step index in that threadblock.
    pub step: usize,
}

impl fmt::Display for StepRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rank {} tb {} step {}", self.rank, self.tb, self.step)
    }
}

/// A point-to-point connection: the FIFO from `sender` to `receiver` on `channel`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Connection {
    /// Sending rank.
    pub sender: usize,
    /// Receiving rank.
    pub receiver: usize,
    /// Channel.
    pub channel: usize,
}

impl fmt::Display for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}->{} channel {}",
            self.sender, self.receiver, self.channel
        )
    }
}

/// Input chunk `chunk` of `rank` starts with `value` (a custom collective's precondition).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Holding {
    /// The rank.
    pub rank: usize,
    /// The chunk of its input buffer.
    pub chunk: usize,
    /// What it holds: the same data as input chunk `value.chunk` of rank `value.rank`.
    pub value: Contribution,
}

/// Output chunk `chunk` of `rank` must end with the reduction of exactly `sum` (one entry:
/// a copy), each contribution once (a custom collective's postcondition).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Requirement {
    /// The rank.
    pub rank: usize,
    /// The chunk of its output buffer.
    pub chunk: usize,
    /// The input chunks reduced into it (a multiset).
    pub sum: Vec<Contribution>,
}

/// The pre- and postcondition of a custom collective ([`Collective::Custom`]). Input and
/// output buffers have fixed chunk counts on every rank (a program's `nchunksperloop` is the
/// larger one); in place they are one buffer, so both counts must then be equal.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CustomCollective {
    /// Chunks of every rank's input buffer.
    pub input_chunks: usize,
    /// Chunks of every rank's output buffer.
    pub output_chunks: usize,
    /// Input chunks that start with another rank's data (the same chunk held by several
    /// ranks); every other input chunk of rank r holds its own value `(r, chunk)`.
    pub pre: Vec<Holding>,
    /// What the output chunks must hold at the end; unlisted ones are unconstrained.
    pub post: Vec<Requirement>,
}

impl CustomCollective {
    /// True if some output chunk is the reduction of several contributions.
    pub fn reduces(&self) -> bool {
        self.post.iter().any(|r| r.sum.len() > 1)
    }

    /// The compact one-line JSON form written into XML comments.
    pub fn to_json_line(&self) -> String {
        serde_json::to_string(self).expect("a custom collective always serializes")
    }
}

/// A complete algorithm for all ranks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Program {
    /// Free-text name (XML `name`).
    pub name: String,
    /// The collective.
    pub collective: Collective,
    /// Root rank for broadcast/reduce/gather/scatter, else 0.
    pub root: usize,
    /// NCCL protocol.
    pub protocol: Protocol,
    /// Number of ranks.
    pub ngpus: usize,
    /// Chunks the larger user buffer is cut into.
    pub nchunksperloop: usize,
    /// Valid when send buffer and receive buffer alias (per the collective's definition).
    pub inplace: bool,
    /// Valid for distinct buffers.
    pub outofplace: bool,
    /// Smallest message size (bytes) the program is meant for.
    pub min_bytes: u64,
    /// Largest message size (bytes, inclusive); 0 = no limit.
    pub max_bytes: u64,
    /// One entry per rank, indexed by rank.
    pub gpus: Vec<Gpu>,
    /// The pre- and postcondition of a [`Collective::Custom`] program (`None` otherwise).
    /// MSCCL XML cannot hold them in attributes, so the XML writer puts them in a leading
    /// `<!-- synth-custom {...} -->` comment that the runtimes skip and the reader parses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom: Option<CustomCollective>,
    /// The elementwise computation its [`Op::Compute`] steps apply (synth's extension; MSCCL
    /// XML cannot hold it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute: Option<crate::compute::Compute>,
}

impl Program {
    /// XML `nchannels`: the largest channel used plus one (1 for a program without
    /// threadblocks).
    pub fn nchannels(&self) -> usize {
        self.threadblocks()
            .map(|(_, _, tb)| tb.channel + 1)
            .max()
            .unwrap_or(1)
    }

    /// Every threadblock as (rank, tb id, threadblock).
    pub fn threadblocks(&self) -> impl Iterator<Item = (usize, usize, &Threadblock)> {
        self.gpus.iter().flat_map(|g| {
            g.threadblocks
                .iter()
                .enumerate()
                .map(move |(i, tb)| (g.rank, i, tb))
        })
    }

    /// Every step as (position, step).
    pub fn steps(&self) -> impl Iterator<Item = (StepRef, &Step)> {
        self.threadblocks().flat_map(|(rank, tbi, tb)| {
            tb.steps.iter().enumerate().map(move |(step, s)| {
                (
                    StepRef {
                        rank,
                        tb: tbi,
                        step,
                    },
                    s,
                )
            })
        })
    }

    /// The step at a position, if it exists.
    pub fn step(&self, at: StepRef) -> Option<&Step> {
        self.gpus
            .get(at.rank)?
            .threadblocks
            .get(at.tb)?
            .steps
            .get(at.step)
    }

    /// Total number of steps.
    pub fn step_count(&self) -> usize {
        self.threadblocks().map(|(_, _, tb)| tb.steps.len()).sum()
    }

    /// False for a custom collective read without its conditions (another tool's file): its
    /// result cannot be checked, only its structure, deadlock freedom and races.
    pub fn postcondition_known(&self) -> bool {
        self.collective != Collective::Custom || self.custom.is_some()
    }

    /// The modes (in-place = true) this program declares itself valid for.
    pub fn modes(&self) -> Vec<bool> {
        let mut modes = Vec::new();
        if self.outofplace {
            modes.push(false);
        }
        if self.inplace {
            modes.push(true);
        }
        modes
    }

    /// The threadblock of `rank` that sends to `peer` on `channel` (first one if several).
    pub fn sender_tb(&self, rank: usize, peer: usize, channel: usize) -> Option<usize> {
        self.gpus
            .get(rank)?
            .threadblocks
            .iter()
            .position(|tb| tb.send == Some(peer) && tb.channel == channel)
    }

    /// The threadblock of `rank` that receives from `peer` on `channel` (first one if several).
    pub fn receiver_tb(&self, rank: usize, peer: usize, channel: usize) -> Option<usize> {
        self.gpus
            .get(rank)?
            .threadblocks
            .iter()
            .position(|tb| tb.recv == Some(peer) && tb.channel == channel)
    }

    /// The static send/receive pairing: for every connection, the k-th sending step of the
    /// sender's threadblock pairs with the k-th receiving step of the receiver's threadblock.
    /// Surplus steps on either side are left out (the verifier reports them).
    pub fn transfer_pairs(&self) -> Vec<(StepRef, StepRef)> {
        let mut pairs = Vec::new();
        for (rank, tbi, tb) in self.threadblocks() {
            let Some(peer) = tb.send else { continue };
            let Some(rtb) = self.receiver_tb(peer, rank, tb.channel) else {
                continue;
            };
            let sends = sending_steps(tb, rank, tbi);
            let recvs = receiving_steps(&self.gpus[peer].threadblocks[rtb], peer, rtb);
            pairs.extend(sends.into_iter().zip(recvs));
        }
        pairs
    }

    /// Applies msccl-tools' convention to every `s`/`r` pair: the send's `dst` names the
    /// slot where the data lands and the receive's `src` names where it left from.
    pub fn normalize_transfer_fields(&mut self) {
        for (s, r) in self.transfer_pairs() {
            let (sstep, rstep) = (self.step(s).cloned(), self.step(r).cloned());
            let (Some(sstep), Some(rstep)) = (sstep, rstep) else {
                continue;
            };
            if sstep.op != Op::Send || rstep.op != Op::Recv {
                continue;
            }
            self.gpus[s.rank].threadblocks[s.tb].steps[s.step].dst = rstep.dst;
            self.gpus[r.rank].threadblocks[r.tb].steps[r.step].src = sstep.src;
        }
    }

    /// Removes in-memory `Nop` steps: their dependencies move to the next step of the same
    /// threadblock, and dependencies on a nop move to the step before it (or are dropped when
    /// there is none). Fails if a threadblock ends with a nop that carries dependencies.
    pub fn fold_nops(&mut self) -> Result<(), String> {
        for g in &mut self.gpus {
            // new index of each old step (None for nops): a dep on a nop becomes a dep on
            // the last real step before it.
            let maps: Vec<Vec<Option<usize>>> = g
                .threadblocks
                .iter()
                .map(|tb| nop_free_index(&tb.steps))
                .collect();
            for (tbi, tb) in g.threadblocks.iter_mut().enumerate() {
                let mut pending: Vec<Dep> = Vec::new();
                let mut kept = Vec::new();
                for step in tb.steps.drain(..) {
                    if step.op == Op::Nop {
                        pending.extend(step.deps);
                        continue;
                    }
                    let mut step = step;
                    step.deps.append(&mut pending);
                    kept.push(step);
                }
                if !pending.is_empty() {
                    return Err(format!(
                        "rank {} tb {tbi}: ends with a nop that carries dependencies",
                        g.rank
                    ));
                }
                tb.steps = kept;
            }
            for tb in &mut g.threadblocks {
                for step in &mut tb.steps {
                    let deps = std::mem::take(&mut step.deps);
                    for d in deps {
                        let Some(map) = maps.get(d.tb) else {
                            step.deps.push(d);
                            continue;
                        };
                        match map.get(d.step) {
                            Some(Some(new)) => step.deps.push(Dep {
                                tb: d.tb,
                                step: *new,
                            }),
                            Some(None) => {}
                            None => step.deps.push(d),
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// The JSON form.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a Program always serializes")
    }

    /// Reads the JSON form; the error is one line (values quoted in serde's message may
    /// hold line breaks, which are escaped).
    pub fn from_json(s: &str) -> Result<Program, ProgramJsonError> {
        serde_json::from_str(s).map_err(|e| ProgramJsonError {
            line: e.line(),
            message: e.to_string().replace('\n', "\\n").replace('\r', "\\r"),
        })
    }
}

/// A program JSON that does not read, in one line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ProgramJsonError {
    /// The line of the JSON text where reading stopped.
    pub line: usize,
    /// serde's message, line breaks escaped.
    pub message: String,
}

/// For each step, the index it has once nops are removed; a nop maps to the last real step
/// before it (None if there is none).
fn nop_free_index(steps: &[Step]) -> Vec<Option<usize>> {
    let mut next = 0usize;
    steps
        .iter()
        .map(|s| {
            if s.op == Op::Nop {
                next.checked_sub(1)
            } else {
                next += 1;
                Some(next - 1)
            }
        })
        .collect()
}

/// The sending steps of a threadblock, in order.
pub fn sending_steps(tb: &Threadblock, rank: usize, tbi: usize) -> Vec<StepRef> {
    step_refs(tb, rank, tbi, Op::sends)
}

/// The receiving steps of a threadblock, in order.
pub fn receiving_steps(tb: &Threadblock, rank: usize, tbi: usize) -> Vec<StepRef> {
    step_refs(tb, rank, tbi, Op::receives)
}

fn step_refs(tb: &Threadblock, rank: usize, tbi: usize, pred: fn(Op) -> bool) -> Vec<StepRef> {
    tb.steps
        .iter()
        .enumerate()
        .filter(|(_, s)| pred(s.op))
        .map(|(step, _)| StepRef {
            rank,
            tb: tbi,
            step,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(op: Op) -> Step {
        Step::new(
            op,
            Slot::new(Buffer::Input, 0),
            Slot::new(Buffer::Output, 0),
            1,
        )
    }

    fn tb(steps: Vec<Step>) -> Threadblock {
        Threadblock {
            send: None,
            recv: None,
            channel: 0,
            steps,
        }
    }

    fn program(tbs: Vec<Threadblock>) -> Program {
        Program {
            name: "t".into(),
            collective: Collective::AllReduce,
            root: 0,
            protocol: Protocol::Simple,
            ngpus: 1,
            nchunksperloop: 1,
            inplace: false,
            outofplace: true,
            min_bytes: 0,
            max_bytes: 0,
            custom: None,
            compute: None,
            gpus: vec![Gpu {
                rank: 0,
                input_chunks: 1,
                output_chunks: 1,
                scratch_chunks: 0,
                threadblocks: tbs,
            }],
        }
    }

    #[test]
    fn fold_nops_moves_and_remaps_dependencies() {
        // tb 0: cpy, nop(dep tb1 s0), cpy ; tb 1: cpy (dep on tb0's nop = index 1), cpy (dep tb0 s2)
        let mut p = program(vec![
            tb(vec![
                step(Op::Copy),
                step(Op::Nop).after(1, 0),
                step(Op::Copy),
            ]),
            tb(vec![step(Op::Copy).after(0, 1), step(Op::Copy).after(0, 2)]),
        ]);
        p.fold_nops().unwrap();
        let t0 = &p.gpus[0].threadblocks[0].steps;
        assert_eq!(t0.len(), 2);
        assert_eq!(t0[1].deps, vec![Dep { tb: 1, step: 0 }]);
        let t1 = &p.gpus[0].threadblocks[1].steps;
        assert_eq!(
            t1[0].deps,
            vec![Dep { tb: 0, step: 0 }],
            "a dep on a nop moves to the step before it"
        );
        assert_eq!(
            t1[1].deps,
            vec![Dep { tb: 0, step: 1 }],
            "indices shift past the removed nop"
        );
    }

    #[test]
    fn trailing_nop_with_dependencies_cannot_fold() {
        let mut p = program(vec![
            tb(vec![step(Op::Copy), step(Op::Nop).after(1, 0)]),
            tb(vec![step(Op::Copy)]),
        ]);
        assert!(p.fold_nops().unwrap_err().contains("ends with a nop"));
    }

    #[test]
    fn op_codes_round_trip() {
        for op in Op::ALL {
            assert_eq!(Op::from_code(op.code()), Some(op));
        }
        for c in Collective::ALL {
            for f in Flavor::ALL {
                if let Some(name) = c.xml_name(f) {
                    assert_eq!(Collective::from_xml_name(name), Some(c));
                }
            }
        }
        assert_eq!(Program::nchannels(&program(vec![])), 1);
    }
}
