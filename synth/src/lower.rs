//! Lowering: a checked [`Algorithm`] becomes a runtime [`Program`] (the MSCCL IR).
//!
//! Buffers: each address has an input slot on the ranks that start with it and an output
//! slot on the ranks that must end with it (layouts of `runtime::semantics`, in place or out
//! of place); data that only passes through a rank lands in scratch. Partial sums of
//! combining steps accumulate in the output slot (or, where the user's buffers must not be
//! touched, in scratch). Threadblocks: one per (peer, direction, channel) plus one for local
//! copies; where a rank has more than the runtimes' 32 threadblocks with a send (or receive)
//! peer on one channel, connections move to further channels; where a rank has more
//! threadblocks than its flavour runs, a fit pass receives unfused reductions in two steps and
//! pairs send and receive threadblocks (`pairs.rs`). Instances: the algorithm is refined N× and piece j runs on channel j.
//! Dependencies: from per-slot read/write sets in algorithm order (read-after-write,
//! write-after-read, write-after-write), keeping the latest step per producer threadblock.

use crate::algorithm::{Algorithm, Send, Step as AlgoStep};
use crate::collective::Kind;
use crate::layout::groups::RESIDENT_THREADBLOCKS;
use crate::origin::Pacing;
use anyhow::{bail, Context, Result};
use runtime::ir::{Buffer, Dep, Flavor, Gpu, Op, Program, Protocol, Slot, Step, Threadblock};
use runtime::limits::{self, Limits};
use rustc_hash::{FxHashMap, FxHashSet};
use std::borrow::Cow;
use std::collections::BTreeMap;

mod error;
mod pairs;
mod peers;
pub use error::LowerError;
use pairs::{PairOrder, Pairing};

/// How to lower.
#[derive(Debug, Clone)]
pub struct LowerOptions {
    /// XML dialect; `Rccl` forbids fused instructions.
    pub flavor: Flavor,
    /// Lower for aliased send/receive buffers.
    pub inplace: bool,
    /// Replicate over this many channels, each piece of every chunk on its own channel.
    pub instances: usize,
    /// NCCL protocol written in the program.
    pub protocol: Protocol,
    /// Smallest message size (bytes) the program is selected for.
    pub min_bytes: u64,
    /// Largest message size (bytes, inclusive; 0 = no limit).
    pub max_bytes: u64,
    /// Channels the pieces of each chunk are spread over (per instance): piece k runs on
    /// channel k mod this, so independent pieces (e.g. different trees) never wait behind
    /// each other in one threadblock. 1 keeps every piece of an instance on one channel.
    pub piece_channels: usize,
    /// Most transfers one connection (link and channel) carries before the next transfers
    /// move to further channels; 0 for no limit. Keeps threadblocks within the runtime's
    /// step limit.
    pub max_transfers: usize,
}

/// Channels a program may use (MSCCL's MAXCHANNELS).
const MAX_CHANNELS: usize = Limits::PORTABLE.max_channels;

impl Default for LowerOptions {
    fn default() -> Self {
        LowerOptions {
            flavor: Flavor::Nccl,
            inplace: false,
            instances: 1,
            protocol: Protocol::Simple,
            min_bytes: 0,
            max_bytes: 0,
            piece_channels: 1,
            max_transfers: 0,
        }
    }
}

/// Which threadblock an instruction runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
/// Ordered ([`TbKey::order`]) so that threadblocks that others depend on (local copies,
/// receives) get the low ids: the runtime stores a dependency's threadblock id in an int8.
enum TbKey {
    /// Local copies, [`LOCAL_STEPS`] per threadblock (`part` is set by `build_gpu`).
    Local {
        part: usize,
    },
    Recv {
        peer: usize,
        channel: usize,
    },
    Send {
        peer: usize,
        channel: usize,
    },
    /// A send and a receive threadblock of one channel paired into one
    /// ([`pairs::pair_threadblocks`]: a rank past its flavour's threadblocks).
    Pair {
        send: usize,
        recv: usize,
        channel: usize,
    },
}

impl TbKey {
    /// The threadblock order: local copies, receives (paired ones among them, by their
    /// receive peer), sends, each by the peer's place in `place` ([`Algorithm::rank_order`])
    /// and then channel.
    fn order(&self, place: impl Fn(usize) -> usize) -> (u8, usize, usize, usize) {
        match *self {
            TbKey::Local { part } => (0, part, 0, 0),
            TbKey::Recv { peer, channel } => (1, place(peer), channel, 0),
            TbKey::Pair {
                send,
                recv,
                channel,
            } => (1, place(recv), channel, place(send) + 1),
            TbKey::Send { peer, channel } => (2, place(peer), channel, 0),
        }
    }
}

/// Where rank `r` comes in the order `algorithm`'s lowering breaks ties between ranks in.
fn place_of(algorithm: &Algorithm, r: usize) -> usize {
    algorithm.rank_order.as_ref().map_or(r, |o| o[r])
}

/// One rank's instructions in algorithm order, before threadblock ids are fixed.
#[derive(Default)]
struct RankCode {
    ops: Vec<(TbKey, Step)>,
    scratch: usize,
    /// Scratch of addresses kept in blocks: the first slot of each block of addresses.
    blocks: FxHashMap<usize, usize>,
    /// Sending threadblocks whose first step waits for the last step of another (a
    /// connection's further channels, in turn: see [`Lowering::emit`]).
    after: FxHashMap<TbKey, TbKey>,
    /// A connection's first channel, whose first step waits for its first transfer on the
    /// last channel: that channel and the transfer's steps (see
    /// [`Lowering::lead_with_the_last_channels`]).
    leads: FxHashMap<TbKey, (TbKey, usize)>,
    /// Where each of the algorithm's steps starts in `ops`.
    step_starts: Vec<usize>,
}

impl RankCode {
    fn scratch_slot(&mut self) -> Slot {
        self.scratch += 1;
        Slot::new(Buffer::Scratch, self.scratch - 1)
    }

    /// The scratch slot of `address` where addresses are kept in aligned blocks of `block`
    /// consecutive slots, so that runs of consecutive addresses lie in consecutive slots
    /// whatever order they land in (messages of several chunks need that); with `block` 1,
    /// the next free slot.
    fn scratch_for(&mut self, address: usize, block: usize) -> Slot {
        if block <= 1 {
            return self.scratch_slot();
        }
        let next = self.scratch;
        let first = *self.blocks.entry(address / block).or_insert(next);
        if first == next {
            self.scratch += block;
        }
        Slot::new(Buffer::Scratch, first + address % block)
    }
}

/// The buffer layout of a collective: where each address starts and must end on a rank.
struct Layout {
    kind: Kind,
    ranks: usize,
    c: usize,
    inplace: bool,
    /// Chunks of the larger user buffer (nchunksperloop).
    total: usize,
}

impl Layout {
    /// The layout of `coll` in place or out of place.
    fn of(coll: &crate::collective::Collective, inplace: bool) -> Layout {
        let kind = coll.kind;
        Layout {
            kind,
            ranks: coll.ranks,
            c: coll.chunks_per_rank,
            inplace,
            // A custom collective's buffers have one chunk per address (address a at chunk a).
            total: if kind == Kind::Custom {
                coll.addresses()
            } else {
                kind.units_per_buffer(coll.ranks) * coll.chunks_per_rank
            },
        }
    }

    /// The canonical buffer of in-place programs (the one msccl-tools addresses).
    fn aliased(&self) -> Buffer {
        match self.kind {
            Kind::AllGather | Kind::Gather => Buffer::Output,
            _ => Buffer::Input,
        }
    }

    fn slot(&self, buffer: Buffer, offset: usize) -> Slot {
        Slot::new(if self.inplace { self.aliased() } else { buffer }, offset)
    }

    /// Where `rank`'s own data for `address` starts.
    fn input(&self, address: usize) -> Slot {
        let (n, c) = (self.ranks, self.c);
        match self.kind {
            Kind::AllGather | Kind::Gather if self.inplace => Slot::new(Buffer::Output, address),
            Kind::AllGather | Kind::Gather => Slot::new(Buffer::Input, address % c),
            Kind::AllToAll => {
                let (dst, piece) = (address / (n * c), address % c);
                Slot::new(Buffer::Input, dst * c + piece)
            }
            _ => Slot::new(Buffer::Input, address),
        }
    }

    /// Where `address` must end on a rank of its postcondition.
    fn output(&self, address: usize) -> Slot {
        let (n, c) = (self.ranks, self.c);
        match self.kind {
            Kind::AllToAll => {
                let src = (address / c) % n;
                self.slot(Buffer::Output, src * c + address % c)
            }
            Kind::ReduceScatter | Kind::Scatter if self.inplace => {
                Slot::new(Buffer::Input, address)
            }
            Kind::ReduceScatter | Kind::Scatter => Slot::new(Buffer::Output, address % c),
            _ => self.slot(Buffer::Output, address),
        }
    }

    /// Full extents of (input, output) in chunks.
    fn extents(&self) -> (usize, usize) {
        let total = self.total;
        match self.kind {
            Kind::AllGather | Kind::Gather => (self.c, total),
            Kind::ReduceScatter | Kind::Scatter => (total, self.c),
            _ => (total, total),
        }
    }
}

/// Which ranks must end with each address: a bit per (address, rank) where the lists are
/// long (a 1024-rank allgather: every rank, for each of 4096 addresses, in half a megabyte),
/// sorted lists where they are short (alltoall: one rank per address).
enum Posts {
    Bits {
        row: FxHashMap<usize, usize>,
        ranks: usize,
        bits: Vec<u64>,
    },
    Lists(FxHashMap<usize, Vec<usize>>),
}

impl Posts {
    fn new(
        coll: &crate::collective::Collective,
        by_address: &std::collections::BTreeMap<usize, Vec<usize>>,
    ) -> Posts {
        let post = |members: &Vec<usize>| &coll.chunks[members[0]].post;
        let entries: usize = by_address.values().map(|m| post(m).len()).sum();
        let n = coll.ranks;
        if entries.saturating_mul(64) >= by_address.len().saturating_mul(n) {
            let row: FxHashMap<usize, usize> = by_address
                .keys()
                .enumerate()
                .map(|(i, &a)| (a, i))
                .collect();
            let mut bits = vec![0u64; (by_address.len() * n).div_ceil(64)];
            for (i, members) in by_address.values().enumerate() {
                for &r in post(members).iter().filter(|&&r| r < n) {
                    let b = i * n + r;
                    bits[b / 64] |= 1 << (b % 64);
                }
            }
            Posts::Bits {
                row,
                ranks: n,
                bits,
            }
        } else {
            Posts::Lists(
                by_address
                    .iter()
                    .map(|(&a, members)| {
                        let mut list = post(members).to_vec();
                        list.sort_unstable();
                        (a, list)
                    })
                    .collect(),
            )
        }
    }

    /// Whether `rank` must end with `address`.
    fn contains(&self, address: usize, rank: usize) -> bool {
        match self {
            Posts::Bits { row, ranks, bits } => row.get(&address).is_some_and(|&i| {
                let b = i * ranks + rank;
                rank < *ranks && bits[b / 64] >> (b % 64) & 1 == 1
            }),
            Posts::Lists(lists) => lists
                .get(&address)
                .is_some_and(|l| l.binary_search(&rank).is_ok()),
        }
    }
}

/// Lowers `algorithm` to a program (not yet verified: see [`runtime::verify`]).
pub fn lower(algorithm: &Algorithm, options: &LowerOptions) -> Result<Program> {
    lower_grouped(algorithm, options, &step_groups_of(algorithm)?, false, None)
}

/// The channel group of every step of `algorithm` ([`Algorithm::step_groups`]; all 0 when
/// unset), or why its list does not fit its steps.
fn step_groups_of(algorithm: &Algorithm) -> Result<Vec<usize>> {
    let steps = algorithm.steps.len();
    match &algorithm.step_groups {
        None => Ok(vec![0; steps]),
        Some(groups) if groups.len() == steps => Ok(groups.clone()),
        Some(groups) => bail!(
            "algorithm {}: step_groups lists {} groups for {steps} steps",
            algorithm.name,
            groups.len()
        ),
    }
}

/// The most chunks per message in every step of `algorithm` ([`Algorithm::message_chunks`];
/// all 1 when unset), or why its list does not fit its steps or the runtimes.
fn message_chunks_of(algorithm: &Algorithm) -> Result<Vec<usize>> {
    let counts = algorithm.message_chunks_or_one();
    if counts.len() != algorithm.steps.len() {
        bail!(
            "algorithm {}: message_chunks lists {} counts for {} steps",
            algorithm.name,
            counts.len(),
            algorithm.steps.len()
        );
    }
    if let Some(bad) = counts.iter().find(|&&c| c == 0 || c > limits::MAX_COUNT) {
        bail!(
            "algorithm {}: message_chunks holds {bad}, outside 1..={} (the runtimes' cnt)",
            algorithm.name,
            limits::MAX_COUNT
        );
    }
    Ok(counts)
}

/// The sends of one step (sorted by link) as messages of at most `count` chunks: runs of
/// adjacent sends over one link, of consecutive addresses within one span of `span`
/// addresses ([`message_span`]) and one aligned block of `count` addresses in it, on one
/// base channel (`channel` of the address). Each run lists indices into `sends` in
/// increasing address order.
fn messages(
    sends: &[Send],
    span: usize,
    count: usize,
    channel: impl Fn(usize) -> usize,
) -> Vec<Vec<usize>> {
    let (span, count) = (span.max(1), count.max(1));
    let block = |a: usize| (a / span, a % span / count);
    let mut runs: Vec<Vec<usize>> = Vec::new();
    for (i, s) in sends.iter().enumerate() {
        if let Some(run) = runs.last_mut() {
            let last = sends[run[run.len() - 1]];
            let stride = s.chunk as i64 - last.chunk as i64;
            let direction = if run.len() > 1 {
                sends[run[1]].chunk as i64 - sends[run[0]].chunk as i64
            } else {
                stride
            };
            if run.len() < count
                && (s.src, s.dst) == (last.src, last.dst)
                && (stride == 1 || stride == -1)
                && stride == direction
                && block(s.chunk) == block(last.chunk)
                && channel(s.chunk) == channel(last.chunk)
            {
                run.push(i);
                continue;
            }
        }
        runs.push(vec![i]);
    }
    for run in &mut runs {
        if run.len() > 1 && sends[run[0]].chunk > sends[run[1]].chunk {
            run.reverse();
        }
    }
    runs
}

/// The addresses one message may run over, given `pieces` per rank: one rank's data, or for
/// an allreduce, whose every address is alike and lies at the same place on every rank, the
/// whole buffer (so that an allreduce may number its addresses to suit its messages, as
/// [`crate::constructions::bucket::in_messages`] does).
fn message_span(kind: Kind, ranks: usize, pieces: usize) -> usize {
    if kind == Kind::AllReduce {
        ranks * pieces
    } else {
        pieces
    }
}

/// The ops of a run's sends (one list per send, in address order) as one list of ops over
/// all of them, where every list has the same ops and its slots follow the previous list's
/// by one chunk; `None` otherwise.
fn merged(parts: &[Vec<Step>]) -> Option<Vec<Step>> {
    let first = parts.first()?;
    let follows = |a: Slot, b: Slot, k: usize| a.buffer == b.buffer && b.offset == a.offset + k;
    let alike = parts.iter().enumerate().all(|(k, ops)| {
        ops.len() == first.len()
            && ops
                .iter()
                .zip(first)
                .all(|(x, f)| x.op == f.op && follows(f.src, x.src, k) && follows(f.dst, x.dst, k))
    });
    alike.then(|| {
        first
            .iter()
            .map(|f| Step::new(f.op, f.src, f.dst, f.count * parts.len()))
            .collect()
    })
}

/// `groups` (one per step) renumbered onto at most `most` groups in the same order: group
/// g of k becomes ⌊g·most/k⌋.
fn squeeze(groups: &[usize], most: usize) -> Vec<usize> {
    let count = groups.iter().max().map_or(1, |g| g + 1);
    if count <= most {
        return groups.to_vec();
    }
    groups.iter().map(|g| g * most.max(1) / count).collect()
}

/// [`lower`] with step `s` on channel group `groups[s]` (squeezed onto the channels left),
/// `compact` receives ([`transfer_steps`]), and with `pairing`, send and receive
/// threadblocks paired on ranks past the flavour's threadblocks.
fn lower_grouped(
    algorithm: &Algorithm,
    options: &LowerOptions,
    groups: &[usize],
    compact: bool,
    pairing: Option<Pairing>,
) -> Result<Program> {
    lower_grouped_noting(algorithm, options, groups, compact, pairing).map(|(p, _)| p)
}

/// [`lower_grouped`], and whether an unfused reduction was received into a slot other than
/// its landing: where none was, `compact` receives lower to the same program.
fn lower_grouped_noting(
    algorithm: &Algorithm,
    options: &LowerOptions,
    groups: &[usize],
    compact: bool,
    pairing: Option<Pairing>,
) -> Result<(Program, bool)> {
    if options.instances == 0 {
        bail!("--instances must be at least 1");
    }
    let instances = options.instances;
    let algorithm = if instances > 1 {
        Cow::Owned(algorithm.refined(algorithm.chunks() * instances))
    } else {
        Cow::Borrowed(algorithm)
    };
    let counts = message_chunks_of(&algorithm)?;
    let mut lowering = Lowering::new(&algorithm, options, groups, scratch_block(&counts));
    lowering.compact = compact;
    for (step_index, step) in algorithm.steps.iter().enumerate() {
        for rc in &mut lowering.code {
            rc.step_starts.push(rc.ops.len());
        }
        lowering.lower_step(step_index, step, counts[step_index])?;
    }
    // Not where threadblocks are paired, which may put a channel's receives before its
    // sends, nor for the twin that lets slices overlap.
    if pairing.is_none() && !algorithm.origin.overlapping_slices {
        lowering.lead_with_the_last_channels();
    }
    let compacts = lowering.compacts;
    Ok((lowering.finish(options, pairing)?, compacts))
}

/// Scratch in blocks that hold every message's run of addresses: the largest count where it
/// is a multiple of every other (1 without messages of several chunks, or where no such
/// block exists: slots in landing order).
fn scratch_block(counts: &[usize]) -> usize {
    let largest = counts.iter().copied().max().unwrap_or(1);
    if counts.iter().all(|&c| largest % c == 0) {
        largest
    } else {
        1
    }
}

/// The channel of every transfer: a base channel per (address, step) from the instances,
/// the piece channels and the step groups, moved on by the base channels' count each time a
/// connection has carried another `max_transfers` transfers on it.
struct Channels {
    instances: usize,
    /// Whether the lanes go by address ([`crate::origin::Origin::address_channels`]), not
    /// by a chunk's piece.
    by_address: bool,
    /// Lanes (piece or address channels) per instance.
    spread: usize,
    /// Pieces per rank.
    pieces: usize,
    /// Channels of one step group.
    per_group: usize,
    /// The step group of every step, squeezed onto the channels.
    groups: Vec<usize>,
    /// Channels of every step group together.
    base: usize,
    /// Most transfers per connection before the next channels (0: no limit).
    max_transfers: usize,
    /// Transfers so far per (sender, receiver, base channel).
    carried: FxHashMap<(usize, usize, usize), usize>,
    /// One past the highest channel handed out.
    used: usize,
}

impl Channels {
    /// The channels of `algorithm` (already refined into its instances) lowered with
    /// `options`, step `s` in group `groups[s]`.
    fn new(algorithm: &Algorithm, options: &LowerOptions, groups: &[usize]) -> Channels {
        let instances = options.instances;
        let by_address = algorithm.origin.address_channels;
        let spread = lanes(
            algorithm,
            options,
            algorithm.collective.addresses() / instances,
        )
        .clamp(1, (MAX_CHANNELS / instances).max(1));
        let per_group = spread * instances;
        let groups = squeeze(groups, MAX_CHANNELS / per_group);
        let base = per_group * groups.iter().max().map_or(1, |g| g + 1);
        Channels {
            instances,
            by_address,
            spread,
            pieces: algorithm.collective.chunks_per_rank,
            per_group,
            groups,
            base,
            max_transfers: options.max_transfers,
            carried: FxHashMap::default(),
            used: 0,
        }
    }

    /// The base channel of `address` in step `step`.
    fn base_of(&self, address: usize, step: usize) -> usize {
        let instances = self.instances;
        let lane = if self.by_address {
            address / instances % self.spread
        } else {
            (address % self.pieces) / instances % self.spread
        };
        lane * instances + address % instances + self.groups[step] * self.per_group
    }

    /// The channel of the next transfer of `address` from `u` to `v` in step `step`, and
    /// its connection's base channel.
    fn next(&mut self, u: usize, v: usize, address: usize, step: usize) -> (usize, usize) {
        let base = self.base_of(address, step);
        let count = self.carried.entry((u, v, base)).or_insert(0);
        let extra = count.checked_div(self.max_transfers).unwrap_or(0);
        *count += 1;
        let channel = base + extra * self.base;
        self.used = self.used.max(channel + 1);
        (channel, base)
    }
}

/// The state of one lowering: every rank's code so far and where each value lives.
struct Lowering<'a> {
    algorithm: &'a Algorithm,
    layout: Layout,
    channels: Channels,
    posts: Posts,
    code: Vec<RankCode>,
    /// Where each (rank, address) value currently lives.
    location: FxHashMap<(usize, usize), Slot>,
    /// Scratch block ([`RankCode::scratch_for`]).
    block: usize,
    /// Whether reductions use fused instructions.
    fused: bool,
    /// Without fusion, whether a value reduced into a slot other than its landing is
    /// received there and reduced with it (two steps), not received into a temporary,
    /// copied and reduced (three).
    compact: bool,
    /// Whether an unfused reduction was received into a slot other than its landing (the
    /// one place where `compact` changes the program).
    compacts: bool,
    /// Addresses one message may run over ([`message_span`]).
    span: usize,
    /// Whether reductions that several messages of one step make into one accumulator
    /// are received into temporaries and reduced on local threadblocks
    /// ([`crate::origin::Origin::local_reductions`]).
    local_reductions: bool,
    /// Every transfer so far, where connections may split over several channels.
    transfers: Vec<Transfer>,
}

/// One transfer's connection (sender, receiver, base channel) and where its steps lie in
/// the sender's and the receiver's code.
struct Transfer {
    connection: (usize, usize, usize),
    sends: std::ops::Range<usize>,
    receives: std::ops::Range<usize>,
}

impl<'a> Lowering<'a> {
    /// A lowering of `algorithm` with its inputs in place (staged to scratch where an
    /// in-place output would overwrite them).
    fn new(
        algorithm: &'a Algorithm,
        options: &LowerOptions,
        groups: &[usize],
        block: usize,
    ) -> Lowering<'a> {
        let coll = &algorithm.collective;
        let by_address = coll.by_address();
        let mut lowering = Lowering {
            algorithm,
            layout: Layout::of(coll, options.inplace),
            channels: Channels::new(algorithm, options, groups),
            posts: Posts::new(coll, &by_address),
            code: (0..coll.ranks).map(|_| RankCode::default()).collect(),
            location: FxHashMap::default(),
            block,
            fused: options.flavor != Flavor::Rccl,
            compact: false,
            compacts: false,
            span: message_span(coll.kind, coll.ranks, coll.chunks_per_rank),
            local_reductions: algorithm.origin.local_reductions,
            transfers: Vec::new(),
        };
        lowering.place_inputs(&by_address);
        if options.inplace {
            stage_overwritten_inputs(
                coll,
                &lowering.layout,
                &mut lowering.code,
                &mut lowering.location,
            );
        }
        lowering
    }

    /// Every rank's own data at its input slot, copied to its output slot where it must end
    /// there too (non-combining addresses only).
    fn place_inputs(&mut self, by_address: &BTreeMap<usize, Vec<usize>>) {
        let coll = &self.algorithm.collective;
        for (&address, members) in by_address {
            let post = &coll.chunks[members[0]].post;
            for &m in members {
                for &r in &coll.chunks[m].pre {
                    let input = self.layout.input(address);
                    self.location.insert((r, address), input);
                    let output = self.layout.output(address);
                    let combining = members.len() > 1;
                    if !combining && post.contains(&r) && input != output {
                        self.code[r].ops.push((
                            TbKey::Local { part: 0 },
                            Step::new(Op::Copy, input, output, 1),
                        ));
                    }
                }
            }
        }
    }

    /// Lowers step `step_index` in messages of at most `count` chunks.
    fn lower_step(&mut self, step_index: usize, step: &AlgoStep, count: usize) -> Result<()> {
        let mut sends = step.sends.clone();
        // Grouped by link; within a link the algorithm's order is kept (engines put the
        // sends that feed the longest paths first).
        let place = |r: usize| place_of(self.algorithm, r);
        sends.sort_by_key(|s| (place(s.src), place(s.dst)));
        // All sends read the state before the step.
        let mut sources: Vec<Slot> = sends
            .iter()
            .map(|s| {
                self.location
                    .get(&(s.src, s.chunk))
                    .copied()
                    .with_context(|| {
                        format!(
                            "internal error: rank {} sends chunk {} it does not hold",
                            s.src, s.chunk
                        )
                    })
            })
            .collect::<Result<_>>()?;
        if step.reduce {
            self.stage_reduced_sources(&sends, &mut sources);
        }
        let runs = messages(&sends, self.span, count, |a| {
            self.channels.base_of(a, step_index)
        });
        let local = self.local_reductions && step.reduce;
        let fan_in = if local {
            fan_in(&sends)
        } else {
            FxHashMap::default()
        };
        let arrival = if step.reduce {
            arrival_fractions(&sends)
        } else {
            Vec::new()
        };
        // The reductions into one accumulator run in the order of their messages in the
        // program, so in a reducing step the messages go in the order they should arrive: a
        // receive then seldom waits for the reduction of a message that comes later (while
        // its own connection fills). Each link keeps its order.
        let mut runs = runs;
        if step.reduce {
            runs.sort_by(|a, b| arrival[a[a.len() - 1]].total_cmp(&arrival[b[b.len() - 1]]));
        }
        let mut deferred: Vec<LocalReduction> = Vec::new();
        for run in runs {
            let joined = |&i: &usize| fan_in.get(&(sends[i].dst, sends[i].chunk)) > Some(&1);
            for part in run.chunk_by(|a, b| joined(a) == joined(b)) {
                if joined(&part[0]) {
                    let sent = (&sends[..], &sources[..]);
                    self.lower_run_locally(step_index, sent, part, &arrival, &mut deferred);
                } else {
                    self.lower_run(step_index, step.reduce, &sends, &sources, part);
                }
            }
        }
        // In the order their messages should arrive (an accumulator's first value before
        // every reduction into it), on the local threadblocks.
        deferred.sort_by(|a, b| {
            a.arrival
                .total_cmp(&b.arrival)
                .then(a.sender.cmp(&b.sender))
        });
        for r in deferred {
            let key = TbKey::Local { part: 0 };
            self.code[r.rank]
                .ops
                .extend(r.steps.into_iter().map(|s| (key, s)));
        }
        Ok(())
    }

    /// Where a rank of a reducing step sends an address from the slot it also reduces into
    /// in that step (a one-shot allreduce in place), the value before the step is copied to
    /// scratch first and sent from there, so that every send reads the state before the
    /// step (in address order, so that a rank's staged slots stay consecutive).
    fn stage_reduced_sources(&mut self, sends: &[Send], sources: &mut [Slot]) {
        let receiving: FxHashSet<(usize, usize)> = sends.iter().map(|s| (s.dst, s.chunk)).collect();
        let mut order: Vec<usize> = (0..sends.len())
            .filter(|&i| receiving.contains(&(sends[i].src, sends[i].chunk)))
            .collect();
        order.sort_by_key(|&i| (sends[i].src, sends[i].chunk));
        let mut staged: FxHashMap<(usize, usize), Slot> = FxHashMap::default();
        for i in order {
            let (rank, address, current) = (sends[i].src, sends[i].chunk, sources[i]);
            let post = self.posts.contains(address, rank);
            if accumulator_slot(&self.layout, Some(current), address, post) != Some(current) {
                continue;
            }
            let code = &mut self.code[rank];
            sources[i] = *staged.entry((rank, address)).or_insert_with(|| {
                let slot = code.scratch_slot();
                code.ops.push((
                    TbKey::Local { part: 0 },
                    Step::new(Op::Copy, current, slot, 1),
                ));
                slot
            });
        }
    }

    /// Lowers one run of sends over a link (indices into `sends`, read from `sources`):
    /// one message where both ends merge, else one per send.
    fn lower_run(
        &mut self,
        step_index: usize,
        reduce: bool,
        sends: &[Send],
        sources: &[Slot],
        run: &[usize],
    ) {
        let (u, v) = (sends[run[0]].src, sends[run[0]].dst);
        let landings = self.landings(reduce, sends, run, v);
        self.compacts |= !self.fused
            && landings
                .iter()
                .any(|&(current, landing)| current.is_some_and(|c| c != landing));
        let temporaries: Vec<Option<Slot>> = landings
            .iter()
            .map(|&(current, landing)| {
                // Unfused, a value reduced into a slot other than its landing is received
                // there and reduced with it (no temporary).
                let staged = !self.compact || current == Some(landing);
                (!self.fused && current.is_some() && staged).then(|| self.code[v].scratch_slot())
            })
            .collect();
        let mut received: Vec<Vec<Step>> = Vec::with_capacity(run.len());
        let mut sent: Vec<Vec<Step>> = Vec::with_capacity(run.len());
        for ((&i, &(current, landing)), tmp) in run.iter().zip(&landings).zip(temporaries) {
            let (recv_ops, send_ops) =
                transfer_steps(sources[i], current, landing, tmp, self.fused);
            received.push(recv_ops);
            sent.push(send_ops);
        }
        self.emit_run(u, v, sends[run[0]].chunk, step_index, (received, sent));
        for (&i, &(_, landing)) in run.iter().zip(&landings) {
            self.location.insert((v, sends[i].chunk), landing);
        }
    }

    /// Lowers a run of sends that reduce into accumulators other messages of the step
    /// reduce into too: received into temporaries, reduced by local threadblocks
    /// (`deferred`), so that no receive waits for another's reduction. Where the receiver
    /// holds no value yet, as [`Lowering::lower_run`] does.
    fn lower_run_locally(
        &mut self,
        step_index: usize,
        (sends, sources): (&[Send], &[Slot]),
        run: &[usize],
        arrival: &[f64],
        deferred: &mut Vec<LocalReduction>,
    ) {
        let (u, v) = (sends[run[0]].src, sends[run[0]].dst);
        let landings = self.landings(true, sends, run, v);
        if landings.iter().any(|(current, _)| current.is_none()) {
            return self.lower_run(step_index, true, sends, sources, run);
        }
        let temporaries: Vec<Slot> = run.iter().map(|_| self.code[v].scratch_slot()).collect();
        let steps = |op: Op| -> Vec<Vec<Step>> {
            run.iter()
                .zip(&temporaries)
                .map(|(&i, &tmp)| vec![Step::new(op, sources[i], tmp, 1)])
                .collect()
        };
        let (received, sent) = (steps(Op::Recv), steps(Op::Send));
        self.emit_run(u, v, sends[run[0]].chunk, step_index, (received, sent));
        let sender = place_of(self.algorithm, u);
        for ((&i, &(current, landing)), &tmp) in run.iter().zip(&landings).zip(&temporaries) {
            if let Some(current) = current.filter(|&c| c != landing) {
                deferred.push(LocalReduction {
                    arrival: f64::NEG_INFINITY,
                    sender,
                    rank: v,
                    steps: vec![Step::new(Op::Copy, current, landing, 1)],
                });
            }
            deferred.push(LocalReduction {
                arrival: arrival[i],
                sender,
                rank: v,
                steps: vec![Step::new(Op::Reduce, tmp, landing, 1)],
            });
            self.location.insert((v, sends[i].chunk), landing);
        }
    }

    /// Where each send of `run` lands on `v` (the value held before, if it reduces into
    /// it): accumulators and scratch are allocated before the temporaries of unfused
    /// reductions, so that each lies in consecutive slots.
    fn landings(
        &mut self,
        reduce: bool,
        sends: &[Send],
        run: &[usize],
        v: usize,
    ) -> Vec<(Option<Slot>, Slot)> {
        let mut landings = Vec::with_capacity(run.len());
        for &i in run {
            let a = sends[i].chunk;
            let post = self.posts.contains(a, v);
            landings.push(if reduce {
                let current = self.location.get(&(v, a)).copied();
                let rc = &mut self.code[v];
                let acc = accumulator(&self.layout, rc, current, a, post, self.block);
                (current, acc)
            } else if post {
                (None, self.layout.output(a))
            } else {
                let held = self.location.get(&(v, a)).copied();
                (
                    None,
                    held.unwrap_or_else(|| self.code[v].scratch_for(a, self.block)),
                )
            });
        }
        landings
    }

    /// Emits a run's steps (one list per send, the receiver's and the sender's) as one
    /// message where both ends merge ([`merged`]), else as one message per send.
    fn emit_run(
        &mut self,
        u: usize,
        v: usize,
        address: usize,
        step_index: usize,
        (received, sent): (Vec<Vec<Step>>, Vec<Vec<Step>>),
    ) {
        let messages: Vec<(Vec<Step>, Vec<Step>)> = match (merged(&received), merged(&sent)) {
            (Some(r), Some(s)) => vec![(r, s)],
            _ => received.into_iter().zip(sent).collect(),
        };
        for (recv_ops, send_ops) in messages {
            self.emit(u, v, address, step_index, recv_ops, send_ops);
        }
    }

    /// Appends one message from `u` to `v` (of `address`'s base channel in step
    /// `step_index`) to both ranks' code, on the channel its connection has reached.
    fn emit(
        &mut self,
        u: usize,
        v: usize,
        address: usize,
        step_index: usize,
        recv_ops: Vec<Step>,
        send_ops: Vec<Step>,
    ) {
        let (channel, base) = self.channels.next(u, v, address, step_index);
        let recv_key = TbKey::Recv { peer: u, channel };
        let recv_at = self.code[v].ops.len();
        self.code[v]
            .ops
            .extend(recv_ops.into_iter().map(|s| (recv_key, s)));
        let send_key = TbKey::Send { peer: v, channel };
        // A connection past one threadblock's steps goes on in further channels, in turn:
        // each further channel's first send waits for the last of the channel before, so
        // the overflow never runs beside the transfers before it and shares the link with
        // them (two 79-step rings on random:80:12: the reduce-scatter at 98.8% of the
        // optimum side by side, NCCL's 99.9% in turn; mi250 x 2 on rails 97.7% -> 99.3%).
        if channel >= self.channels.base {
            let before = TbKey::Send {
                peer: v,
                channel: channel - self.channels.base,
            };
            self.code[u].after.entry(send_key).or_insert(before);
        }
        let send_at = self.code[u].ops.len();
        self.code[u]
            .ops
            .extend(send_ops.into_iter().map(|s| (send_key, s)));
        if self.channels.max_transfers > 0 {
            self.transfers.push(Transfer {
                connection: (u, v, base),
                sends: send_at..self.code[u].ops.len(),
                receives: recv_at..self.code[v].ops.len(),
            });
        }
    }

    /// Where a connection needs several channels, moves its first transfer to its last
    /// channel (the others fill the channels from the first, in order), and makes its
    /// first channel start after that transfer. The runtime replays the program
    /// once per slice, each threadblock on its own, so the first channel would start the
    /// next slice while the last still sends this one, beside it on the link
    /// (random:100:3's list-scheduled reduce-scatter at two pieces: 99.8% of the optimum in
    /// one slice, 92.5% in two); so, in every slice past the first, the first channel
    /// starts once the last has finished the slice before, and the link keeps its turn.
    fn lead_with_the_last_channels(&mut self) {
        let most = self.channels.max_transfers;
        if most == 0 || self.channels.carried.values().all(|&c| c <= most) {
            return;
        }
        let mut sent: FxHashMap<(usize, usize, usize), usize> = FxHashMap::default();
        for t in std::mem::take(&mut self.transfers) {
            let (u, v, base) = t.connection;
            let split = self.channels.carried[&t.connection].div_ceil(most);
            if split < 2 {
                continue;
            }
            let index = sent.entry(t.connection).or_insert(0);
            let extra = match *index {
                0 => split - 1,
                i => (i - 1) / most,
            };
            *index += 1;
            let channel = base + extra * self.channels.base;
            for (key, _) in &mut self.code[u].ops[t.sends.clone()] {
                *key = TbKey::Send { peer: v, channel };
            }
            for (key, _) in &mut self.code[v].ops[t.receives] {
                *key = TbKey::Recv { peer: u, channel };
            }
            if *index == 1 {
                let first = TbKey::Send {
                    peer: v,
                    channel: base,
                };
                let last = TbKey::Send { peer: v, channel };
                self.code[u].leads.insert(first, (last, t.sends.len()));
            }
        }
    }

    /// The program, or [`LowerError::TooManyChannels`] where it needs more channels than
    /// the runtimes have.
    fn finish(self, options: &LowerOptions, pairing: Option<Pairing>) -> Result<Program> {
        let algorithm = self.algorithm;
        if self.channels.used > MAX_CHANNELS {
            return Err(LowerError::TooManyChannels {
                name: algorithm.name.clone(),
                needed: self.channels.used,
                allowed: MAX_CHANNELS,
            }
            .into());
        }
        let (layout, coll) = (&self.layout, &algorithm.collective);
        let (input_extent, output_extent) = layout.extents();
        let paced = paced_steps(algorithm);
        let mut gpus: Vec<Gpu> = self
            .code
            .into_iter()
            .enumerate()
            .map(|(rank, mut rc)| {
                let place = |r: usize| place_of(algorithm, r);
                if let Some(pairing) = pairing {
                    pairs::pair_threadblocks(&mut rc, pairing, (rank, coll.ranks), place);
                }
                build_gpu(rank, rc, (input_extent, output_extent), &paced, place)
            })
            .collect();
        peers::spread_peer_channels(&mut gpus, |r| place_of(algorithm, r));
        for gpu in &mut gpus {
            depended_first(gpu);
        }
        let kind = coll.kind;
        Ok(Program {
            name: algorithm.name.clone(),
            collective: kind.to_ir().unwrap_or(runtime::ir::Collective::Custom),
            root: coll.root,
            protocol: options.protocol,
            ngpus: coll.ranks,
            nchunksperloop: layout.total,
            inplace: options.inplace,
            outofplace: !options.inplace,
            min_bytes: options.min_bytes,
            max_bytes: options.max_bytes,
            gpus,
            custom: (kind == Kind::Custom).then(|| custom_conditions(coll, layout.total)),
            compute: None,
        })
    }
}

/// A reduction moved off its receiving threadblock ([`Lowering::lower_run_locally`]).
struct LocalReduction {
    /// Roughly when in its step its message arrives ([`arrival_fractions`]).
    arrival: f64,
    /// The sender's place in [`Algorithm::rank_order`] (ties).
    sender: usize,
    /// The receiving rank, whose local threadblocks reduce.
    rank: usize,
    steps: Vec<Step>,
}

/// How many sends of a step end on each (receiver, address).
fn fan_in(sends: &[Send]) -> FxHashMap<(usize, usize), usize> {
    let mut fan_in: FxHashMap<(usize, usize), usize> = FxHashMap::default();
    for s in sends {
        *fan_in.entry((s.dst, s.chunk)).or_default() += 1;
    }
    fan_in
}

/// For each send of a step, the fraction of the step after which its message arrives were
/// every link busy all the step: `(k + 1/2) / n` for the k-th of its link's n sends.
fn arrival_fractions(sends: &[Send]) -> Vec<f64> {
    let mut on_link: FxHashMap<(usize, usize), usize> = FxHashMap::default();
    let places: Vec<usize> = sends
        .iter()
        .map(|s| {
            let n = on_link.entry((s.src, s.dst)).or_default();
            *n += 1;
            *n - 1
        })
        .collect();
    sends
        .iter()
        .zip(places)
        .map(|(s, k)| (k as f64 + 0.5) / on_link[&(s.src, s.dst)] as f64)
        .collect()
}

/// The steps that move one value from `src` to `landing`: (the receiver's, the sender's).
/// A value that reduces into `current` is received `fused`, or without fusion into the
/// temporary `tmp` (`current` copied to `landing` where they differ) and then reduced, or
/// without a temporary, received into `landing` and `current` reduced into it (two steps
/// instead of three: RCCL's threadblocks run 64 steps).
fn transfer_steps(
    src: Slot,
    current: Option<Slot>,
    landing: Slot,
    tmp: Option<Slot>,
    fused: bool,
) -> (Vec<Step>, Vec<Step>) {
    let received = match (current, tmp) {
        (Some(cur), _) if fused => vec![Step::new(Op::RecvReduceCopy, cur, landing, 1)],
        (Some(cur), Some(tmp)) => {
            let mut ops = vec![Step::new(Op::Recv, src, tmp, 1)];
            if cur != landing {
                ops.push(Step::new(Op::Copy, cur, landing, 1));
            }
            ops.push(Step::new(Op::Reduce, tmp, landing, 1));
            ops
        }
        (Some(cur), None) => vec![
            Step::new(Op::Recv, src, landing, 1),
            Step::new(Op::Reduce, cur, landing, 1),
        ],
        (None, _) => vec![Step::new(Op::Recv, src, landing, 1)],
    };
    (received, vec![Step::new(Op::Send, src, landing, 1)])
}

/// A custom collective's conditions in the IR: address `a` is input and output chunk `a`;
/// a chunk held by several ranks starts everywhere with its first holder's data; an output
/// must hold the first holder's data, or for a reduction every contributor's.
fn custom_conditions(
    coll: &crate::collective::Collective,
    total: usize,
) -> runtime::ir::CustomCollective {
    use runtime::ir::{CustomCollective, Holding, Requirement};
    use runtime::semantics::Contribution;
    let mut pre = Vec::new();
    let mut post = Vec::new();
    for (address, members) in coll.by_address() {
        let value = |m: usize| Contribution {
            rank: coll.chunks[m].pre[0],
            chunk: address,
        };
        for &m in &members {
            for &r in &coll.chunks[m].pre[1..] {
                pre.push(Holding {
                    rank: r,
                    chunk: address,
                    value: value(m),
                });
            }
        }
        let sum: Vec<Contribution> = members.iter().map(|&m| value(m)).collect();
        for &r in coll.chunks[members[0]].post.iter() {
            post.push(Requirement {
                rank: r,
                chunk: address,
                sum: sum.clone(),
            });
        }
    }
    CustomCollective {
        input_chunks: total,
        output_chunks: total,
        pre,
        post,
    }
}

/// Transfers per connection tried, in order, until every threadblock fits the flavour's step
/// limit (0: no split). The steps between 64 and 32 leave room for the nops that carry extra
/// dependencies without doubling the channels (RCCL's 64 threadblocks run out first).
const TRANSFER_LIMITS: [usize; 12] = [0, 64, 56, 48, 40, 32, 24, 16, 8, 4, 2, 1];

/// Channels per instance in one step group: one per address where `algorithm` asks for
/// address channels ([`crate::origin::Origin::address_channels`]; `addresses`: its
/// addresses before instances), else its piece channels.
fn lanes(algorithm: &Algorithm, options: &LowerOptions, addresses: usize) -> usize {
    if algorithm.origin.address_channels {
        addresses
    } else {
        options
            .piece_channels
            .max(algorithm.piece_channels.unwrap_or(1))
    }
}

/// Lowers `algorithm` with `options` for the runtimes: connections are split over more
/// channels until every threadblock is within the flavour's step limit (pieces stay on the
/// channels `options` gives them: spreading them wider simulates slower, as more
/// threadblocks share each link), and where the algorithm's step groups
/// ([`Algorithm::step_groups`]) leave no such split, they are halved until one fits. The
/// program is verified; returns it with its XML, or the reason it cannot be expressed
/// (nothing is written by this function).
pub fn lower_to_xml(algorithm: &Algorithm, options: &LowerOptions) -> Result<(Program, String)> {
    let program = lower_verified(algorithm, options)?;
    let xml = runtime::xml::write(&program, options.flavor)?;
    Ok((program, xml))
}

/// [`lower_to_xml`] without the XML text: the program found fits the flavour
/// ([`runtime::xml::writable`]) and verifies; [`runtime::xml::write_to`] then streams it to
/// a file (a 1024-rank program's XML is hundreds of megabytes). Where a rank would have more
/// XML elements than the runtimes' parser holds (4,095), messages carry 2, 4, ... times the
/// chunks until it fits. A program the runtimes cannot express fails with a [`LowerError`].
pub fn lower_verified(algorithm: &Algorithm, options: &LowerOptions) -> Result<Program> {
    lower_verified_noting(algorithm, options).map(|v| v.program)
}

/// A program [`lower_verified`] made, and whether its fit pass made it.
#[derive(Debug, Clone)]
pub struct Verified {
    /// The verified program.
    pub program: Program,
    /// Made by the fit pass (unfused receives in two steps, send and receive threadblocks
    /// paired): the algorithm's two-step twin ([`two_step_twin`]) lowers to the same
    /// program but for its name.
    pub fit_pass: bool,
}

/// [`lower_verified`], saying whether the fit pass made the program.
pub fn lower_verified_noting(algorithm: &Algorithm, options: &LowerOptions) -> Result<Verified> {
    let fitted = |program| Verified {
        program,
        fit_pass: true,
    };
    // A two-step twin ([`two_step_twin`]) is lowered as the fit pass lowers.
    if algorithm.origin.two_step_receives {
        return lower_fitted(algorithm, options, true).map(fitted);
    }
    match lower_fitted(algorithm, options, false) {
        Ok(program) => Ok(Verified {
            program,
            fit_pass: false,
        }),
        // Past the flavour's limits as lowered so far: receives without temporaries (where
        // unfused) and send and receive threadblocks paired; else the first reason. A fused
        // flavour gains only the pairing, so it lowers again only past its threadblocks (a
        // 1024-rank program that fits no flavour is not lowered twice).
        Err(e)
            if e.downcast_ref::<LowerError>().is_some_and(|l| {
                options.flavor == Flavor::Rccl || l.is_too_many_threadblocks()
            }) =>
        {
            lower_fitted(algorithm, options, true)
                .map(fitted)
                .map_err(|_| e)
        }
        Err(e) => Err(e),
    }
}

/// The twin of `algorithm` whose unfused reductions are received in two steps (`r` into
/// the accumulator, then `re`, instead of `r` into a temporary, `cpy`, `re`): named `-2r`
/// ([`crate::origin::Origin::two_step_receives`]) and lowered by [`lower_verified`] as its
/// fit pass lowers. Neither form is faster everywhere (the two-step form saves a copy but
/// holds the accumulator's receive until the value before it is there), so both are
/// candidates that the simulation chooses between. `None` where the twin would lower to
/// the same program: a fused flavour, an algorithm with no reduction received into a slot
/// other than its landing, or one that a rank's threadblocks already send to the fit pass
/// (as lowered without splits).
pub fn two_step_twin(algorithm: &Algorithm, options: &LowerOptions) -> Option<Algorithm> {
    if Limits::of(options.flavor).fused_ops || algorithm.origin.two_step_receives {
        return None;
    }
    // What does not lower as found (channels, step groups) has no twin: its own lowering
    // ([`lower_verified`]) says why or finds the split that fits.
    let Ok(groups) = step_groups_of(algorithm) else {
        return None;
    };
    // One lowering decides: the compact form differs exactly where a reduction is received
    // into a slot other than its landing.
    let Ok((staged, compacts)) = lower_grouped_noting(algorithm, options, &groups, false, None)
    else {
        return None;
    };
    let most = staged
        .gpus
        .iter()
        .map(|g| g.threadblocks.len())
        .max()
        .unwrap_or(0);
    if !compacts || most > Limits::of(options.flavor).max_tbs {
        return None;
    }
    let mut twin = algorithm.clone();
    twin.origin.two_step_receives = true;
    Some(twin_named(twin, &algorithm.name, "-2r"))
}

/// The twins of `algorithm` that lower to other programs of the same schedule, in order:
/// its two-step twin ([`two_step_twin`]), its twin with local reductions
/// ([`local_reduction_twin`]), its twins with paced sends ([`paced_twins`]), its twin with
/// overlapping slices ([`overlapping_slices_twin`]) followed by that twin's paced twins,
/// then its twin on address channels ([`address_channel_twin`]) followed by that twin's own.
/// The main command and catalogs simulate each beside its algorithm and pick per size.
pub fn twins(algorithm: &Algorithm, options: &LowerOptions) -> Vec<Algorithm> {
    let own = |a: &Algorithm| {
        let mut own: Vec<Algorithm> = (two_step_twin(a, options).into_iter())
            .chain(local_reduction_twin(a))
            .chain(paced_twins(a))
            .collect();
        if let Some(overlapping) = overlapping_slices_twin(a, options) {
            let paced = paced_twins(&overlapping);
            own.push(overlapping);
            own.extend(paced);
        }
        own
    };
    let mut all = own(algorithm);
    if let Some(spread) = address_channel_twin(algorithm, options) {
        let after = own(&spread);
        all.push(spread);
        all.extend(after);
    }
    all
}

/// Whether `program` (lowered by [`lower`]) has a connection that keeps its turn across
/// slices ([`Lowering::lead_with_the_last_channels`]): a sending threadblock whose first step
/// waits for a step before the last of another that sends to the same peer. Its twin with
/// overlapping slices ([`overlapping_slices_twin`]) lowers to another program; where none
/// does, to the same.
pub fn keeps_turns_across_slices(program: &Program) -> bool {
    program.gpus.iter().any(|gpu| {
        let tbs = &gpu.threadblocks;
        tbs.iter().any(|tb| {
            let Some(peer) = tb.send else {
                return false;
            };
            let first = tb.steps.first().map_or(&[][..], |s| &s.deps[..]);
            first.iter().any(|d| {
                tbs.get(d.tb)
                    .is_some_and(|o| o.send == Some(peer) && d.step + 1 < o.steps.len())
            })
        })
    })
}

/// The twin of `algorithm` whose connections split over several channels let the slices
/// overlap: named `-os` ([`crate::origin::Origin::overlapping_slices`]). The runtime replays
/// the program once per slice, each threadblock on its own; by default a split connection
/// keeps its turn across slices ([`Lowering::lead_with_the_last_channels`]), which keeps the
/// transfers a slice waits for at the link's whole rate (two random:12:5 nodes, a NIC per
/// two GPUs: the listed allgather 91.7% -> 98.5% of the optimum) but leaves the link idle
/// where the next slice could have filled the end of this one (four 4-GPU boxes on a ring:
/// the grown allreduce paced in both halves, 99.4% overlapping, 98.8% in turn). Neither
/// wins everywhere, so both are candidates that the simulation chooses between. `None` for
/// such a twin, and where no connection carries more than [`SPLIT_FREE`] transfers per
/// channel (counted as the lowering plans its splits; a twin past it whose lowering splits
/// nothing lowers to the same program).
pub fn overlapping_slices_twin(algorithm: &Algorithm, options: &LowerOptions) -> Option<Algorithm> {
    if algorithm.origin.overlapping_slices {
        return None;
    }
    let groups = step_groups_of(algorithm).ok()?;
    let spread = lanes(algorithm, options, algorithm.collective.addresses());
    let per_group = spread * options.instances.max(1);
    let groups = squeeze(&groups, MAX_CHANNELS / per_group.max(1));
    let busiest = busiest_connection(algorithm, options, &groups).ok()?;
    if busiest.div_ceil(spread.max(1)) <= SPLIT_FREE {
        return None;
    }
    let mut twin = algorithm.clone();
    twin.origin.overlapping_slices = true;
    Some(twin_named(twin, &algorithm.name, "-os"))
}

/// The twin of `algorithm` with every address on channels of its own: named `-ac`
/// ([`crate::origin::Origin::address_channels`]). Where one threadblock holds the messages
/// of several trees, a receive whose reduction waits for another tree's message holds up
/// the messages behind it, and with them the senders of other trees (mi250's
/// reduce-scatter trees: 85.6% of the optimum at 16 GB on one channel per step group,
/// 99.1% at 4 GB on an address's own); on channels of their own they only share the links.
/// Neither form is faster everywhere (more threadblocks share each link, so a message
/// takes longer to arrive), so both are candidates that the simulation chooses between.
/// `None` for a twin, where no step joins messages ([`joins_messages`]), where no
/// connection carries several addresses, where the addresses of every step group need more
/// than the runtimes' channels or a rank more than its flavour's threadblocks (counted
/// before lowering: a 32-rank one-shot's failed lowering took 10 s), and where the twin
/// does not lower with `options` within [`RESIDENT_THREADBLOCKS`] per rank (all of them
/// spin on each other's flags: dgx-h100x2's grown allreduce twin had 120).
pub fn address_channel_twin(algorithm: &Algorithm, options: &LowerOptions) -> Option<Algorithm> {
    let origin = &algorithm.origin;
    if origin.address_channels || origin.two_step_receives || origin.local_reductions {
        return None;
    }
    let addresses = algorithm.collective.addresses();
    let step_groups = step_groups_of(algorithm).ok()?;
    let groups = step_groups.iter().max().map_or(1, |g| g + 1);
    if addresses < 2
        || addresses * groups * options.instances.max(1) > MAX_CHANNELS
        || !joins_messages(algorithm)
    {
        return None;
    }
    // Counted before lowering, which is costly where it fails (a 32-rank one-shot).
    // All of a program's threadblocks must be resident at once, whatever the flavour holds.
    let (threadblocks, shared) = address_threadblocks(algorithm, &step_groups);
    let most = Limits::of(options.flavor)
        .max_tbs
        .min(RESIDENT_THREADBLOCKS - 1);
    if !shared || threadblocks * options.instances.max(1) > most {
        return None;
    }
    let mut twin = algorithm.clone();
    twin.origin.address_channels = true;
    let program = lower_verified(&twin, options).ok()?;
    let resident = (program.gpus.iter()).all(|g| g.threadblocks.len() < RESIDENT_THREADBLOCKS);
    resident.then(|| twin_named(twin, &algorithm.name, "-ac"))
}

/// The most threadblocks a rank holds with every address on channels of its own (one per
/// peer, direction, step group and address carried, before splits and local
/// threadblocks), and whether some connection carries several addresses (where none does,
/// the twin lowers as the algorithm does).
fn address_threadblocks(algorithm: &Algorithm, groups: &[usize]) -> (usize, bool) {
    let mut carried: FxHashMap<(usize, usize, bool, usize), FxHashSet<usize>> =
        FxHashMap::default();
    for (step, &group) in algorithm.steps.iter().zip(groups) {
        for s in &step.sends {
            for key in [(s.src, s.dst, true, group), (s.dst, s.src, false, group)] {
                carried.entry(key).or_default().insert(s.chunk);
            }
        }
    }
    let mut per_rank = vec![0usize; algorithm.collective.ranks];
    let mut shared = false;
    for (&(rank, _, _, _), addresses) in &carried {
        per_rank[rank] += addresses.len();
        shared |= addresses.len() > 1;
    }
    (per_rank.into_iter().max().unwrap_or(0), shared)
}

/// The twin of `algorithm` with its joined reductions on local threadblocks: named `-lr`
/// ([`crate::origin::Origin::local_reductions`]). Neither form is faster everywhere (the
/// local form frees the receives, and with them the senders, from waiting on each other's
/// reductions, but makes a further pass through memory per message), so both are
/// candidates that the simulation chooses between. `None` where no step reduces two
/// messages into one accumulator, and for a twin (a paced one included).
pub fn local_reduction_twin(algorithm: &Algorithm) -> Option<Algorithm> {
    let origin = &algorithm.origin;
    if origin.local_reductions || origin.two_step_receives || !origin.pacing.is_unpaced() {
        return None;
    }
    if !joins_messages(algorithm) {
        return None;
    }
    let mut twin = algorithm.clone();
    twin.origin.local_reductions = true;
    Some(twin_named(twin, &algorithm.name, "-lr"))
}

/// The twins of `algorithm` with paced sends ([`crate::origin::Origin::pacing`], [`pacing`]):
/// its reducing steps' sends paced (of an allgather: every step's), named `-ps`, and, where
/// it has both reducing and copying steps (an allreduce), every step's, named `-pa`. A
/// schedule list-scheduled one round per step ([`Algorithm::serial_links`]) and reversed
/// into a reduction sends a leaf's own contribution whenever its threadblock gets to it;
/// those sends, ready from the start, share a port or NIC with the partial sums that the
/// next steps wait for (2 x DGX-A100 on rails: the grown reduce-scatter at 82% of the
/// optimum, 99.6% paced). An allgather's own pieces, sent in later steps, likewise crowd
/// the relays (two nodes of 8-GPU rings: the listed allgather 91.9%, paced 98.7%). Pacing
/// does not win everywhere (the rail rings lose; an allreduce paced in both halves wins on
/// two nodes of 8-GPU rings, 94.8% -> 99.96%, and loses on 2 x DGX-A100 on rails, 99.5% ->
/// 98.8%), so each is a candidate that the simulation chooses between. None for a twin,
/// for a schedule not timed for serial links, and where fewer than two paced steps send.
pub fn paced_twins(algorithm: &Algorithm) -> Vec<Algorithm> {
    let origin = &algorithm.origin;
    if !origin.pacing.is_unpaced() || origin.local_reductions || !algorithm.serial_links {
        return Vec::new();
    }
    let sending = |s: &&AlgoStep| !s.sends.is_empty();
    let copies = algorithm.steps.iter().filter(sending).any(|s| !s.reduce);
    let reduces = algorithm.steps.iter().filter(sending).any(|s| s.reduce);
    let mut twins = Vec::new();
    for kind in [Pacing::Reductions, Pacing::Every] {
        if kind == Pacing::Every && !(copies && reduces) {
            continue;
        }
        let mut twin = algorithm.clone();
        twin.origin.pacing = kind;
        let paced = (twin.steps.iter().zip(pacing(&twin)))
            .filter(|(s, paced)| *paced && !s.sends.is_empty())
            .count();
        if paced >= 2 {
            twins.push(twin_named(twin, &algorithm.name, kind.suffix()));
        }
    }
    twins
}

/// Per step of `algorithm`, whether its sends are paced: each waits for its rank's last send
/// of the paced step before ([`crate::origin::Origin::pacing`]; none where unpaced).
fn paced_steps(algorithm: &Algorithm) -> Vec<bool> {
    if algorithm.origin.pacing.is_unpaced() {
        return Vec::new();
    }
    pacing(algorithm).collect()
}

/// Per step of `algorithm`, whether its pacing ([`Pacing`]) paces it: with
/// [`Pacing::Reductions`] the reducing steps, or every step where none reduces; with
/// [`Pacing::Every`] every step; none unpaced.
fn pacing(algorithm: &Algorithm) -> impl Iterator<Item = bool> + '_ {
    let reduces = algorithm.steps.iter().any(|s| s.reduce);
    let kind = algorithm.origin.pacing;
    algorithm.steps.iter().map(move |s| match kind {
        Pacing::Unpaced => false,
        Pacing::Reductions => s.reduce || !reduces,
        Pacing::Every => true,
    })
}

/// Whether a reducing step of `algorithm` joins several messages in one accumulator (what
/// its twin with local reductions changes).
pub fn joins_messages(algorithm: &Algorithm) -> bool {
    let joined = |step: &AlgoStep| step.reduce && fan_in(&step.sends).values().any(|&n| n > 1);
    algorithm.steps.iter().any(joined)
}

/// A twin's name: rendered from its origin, or for an algorithm read from a file (whose
/// name was not rendered) its algorithm's `name` with `suffix`, within the runtimes' limit.
fn twin_named(twin: Algorithm, name: &str, suffix: &str) -> Algorithm {
    if twin.origin.family != crate::origin::Family::External {
        return twin.renamed();
    }
    let most = crate::origin::MAX_NAME - suffix.len();
    Algorithm {
        name: format!("{}{suffix}", crate::origin::shortened(name, most)),
        ..twin
    }
}

/// Whether two programs are the same but for their names (a two-step twin whose algorithm's
/// own lowering took the fit pass).
pub fn same_but_name(a: &Program, b: &Program) -> bool {
    let Program {
        name: _,
        collective,
        root,
        protocol,
        ngpus,
        nchunksperloop,
        inplace,
        outofplace,
        min_bytes,
        max_bytes,
        gpus,
        custom,
        compute,
    } = a;
    (collective, root, protocol, ngpus, nchunksperloop)
        == (
            &b.collective,
            &b.root,
            &b.protocol,
            &b.ngpus,
            &b.nchunksperloop,
        )
        && (inplace, outofplace, min_bytes, max_bytes)
            == (&b.inplace, &b.outofplace, &b.min_bytes, &b.max_bytes)
        && (gpus, custom, compute) == (&b.gpus, &b.custom, &b.compute)
}

/// [`lower_verified`] with `compact` receives and pairing (`fit`) or without.
fn lower_fitted(algorithm: &Algorithm, options: &LowerOptions, fit: bool) -> Result<Program> {
    let error = match within_elements(algorithm, options)
        .and_then(|()| lower_split(algorithm, options, fit))
    {
        Ok(program) => return Ok(program),
        Err(e) if too_many_elements(&e) => e,
        Err(e) => return Err(e),
    };
    // More XML elements on a rank than the runtimes' parser holds: coarser messages (twice
    // the chunks each, on one piece channel so that consecutive chunks share a message)
    // until one fits, else the first reason; not on while coarser messages leave as many
    // elements (steps that are not messages: a local-reduction twin's copies).
    let mut elements = elements_past_limit(&error).unwrap_or(usize::MAX);
    let mut factor = 2;
    while factor <= limits::MAX_COUNT {
        let counts = algorithm.message_chunks_or_one();
        let coarser = Algorithm {
            message_chunks: Some(
                counts
                    .iter()
                    .map(|c| (c * factor).min(limits::MAX_COUNT))
                    .collect(),
            ),
            piece_channels: Some(1),
            origin: crate::origin::Origin {
                address_channels: false,
                ..algorithm.origin.clone()
            },
            ..algorithm.clone()
        };
        let narrowed = LowerOptions {
            piece_channels: 1,
            ..options.clone()
        };
        match within_elements(&coarser, &narrowed)
            .and_then(|()| lower_split(&coarser, &narrowed, fit))
        {
            Ok(program) => return Ok(program),
            Err(e) => match elements_past_limit(&e) {
                Some(fewer) if fewer < elements => {
                    elements = fewer;
                    factor *= 2;
                }
                _ => break,
            },
        }
    }
    Err(error)
}

/// The writer's refusal of a rank with more XML elements than the parser holds, found
/// before lowering where the fewest any lowering can write are already too many: the `algo`,
/// every rank's `gpu` and one step per message a rank sends or receives (threadblocks,
/// copies and nops come on top). A 1024-rank program is then not lowered in vain.
fn within_elements(algorithm: &Algorithm, options: &LowerOptions) -> Result<()> {
    let coll = &algorithm.collective;
    let counts = message_chunks_of(algorithm)?;
    let span = message_span(
        coll.kind,
        coll.ranks,
        algorithm.chunks() * options.instances.max(1),
    );
    let mut messages_of = vec![0usize; coll.ranks];
    for (step, &count) in algorithm.steps.iter().zip(&counts) {
        let mut sends = step.sends.clone();
        sends.sort_by_key(|s| (s.src, s.dst, s.chunk));
        for run in messages(&sends, span, count, |_| 0) {
            let s = sends[run[0]];
            messages_of[s.src] += options.instances.max(1);
            messages_of[s.dst] += options.instances.max(1);
        }
    }
    let Some((rank, &messages)) = messages_of
        .iter()
        .enumerate()
        .max_by_key(|&(r, m)| (m, std::cmp::Reverse(r)))
    else {
        return Ok(());
    };
    let elements = 1 + coll.ranks + messages;
    if elements <= limits::MAX_RANK_ELEMENTS {
        return Ok(());
    }
    Err(LowerError::Unwritable {
        name: algorithm.name.clone(),
        flavor: options.flavor,
        source: runtime::xml::WriteError {
            flavor: options.flavor,
            problem: runtime::xml::WriteProblem::TooManyElements {
                rank,
                elements,
                limit: limits::MAX_RANK_ELEMENTS,
            },
        },
    }
    .into())
}

/// Whether `e` is the writer's refusal of a rank with more XML elements than the parser
/// holds.
fn too_many_elements(e: &anyhow::Error) -> bool {
    elements_past_limit(e).is_some()
}

/// The XML elements of the rank that [`too_many_elements`] refused.
fn elements_past_limit(e: &anyhow::Error) -> Option<usize> {
    match e.downcast_ref::<LowerError>()?.write_problem()? {
        runtime::xml::WriteProblem::TooManyElements { elements, .. } => Some(*elements),
        _ => None,
    }
}

/// [`lower_verified`] with the algorithm's messages: splits of connections, then fewer step
/// groups and piece channels, until the program fits.
fn lower_split(algorithm: &Algorithm, options: &LowerOptions, fit: bool) -> Result<Program> {
    let groups = step_groups_of(algorithm)?;
    let mut most = groups.iter().max().map_or(1, |g| g + 1);
    // Past the step groups, fewer channels for the pieces (RCCL's 64 threadblocks): the
    // algorithm narrowed to `spread` piece channels.
    let mut spread = lanes(algorithm, options, algorithm.collective.addresses());
    let mut narrowed: Option<(Algorithm, LowerOptions)> = None;
    loop {
        let (a, o) = match &narrowed {
            Some((a, o)) => (a, o),
            None => (algorithm, options),
        };
        match lower_verified_grouped(a, o, &squeeze(&groups, most), fit)? {
            Ok(done) => return Ok(done),
            Err(_) if most > 1 => most /= 2,
            // Address channels are the point of their twin: not narrowed.
            Err(_) if spread > 1 && !algorithm.origin.address_channels => {
                spread /= 2;
                let a = Algorithm {
                    piece_channels: Some(spread),
                    ..algorithm.clone()
                };
                let o = LowerOptions {
                    piece_channels: 1,
                    ..options.clone()
                };
                narrowed = Some((a, o));
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// [`lower_verified`] with step `s` on channel group `groups[s]`: the outer error is fatal
/// (an internal error), the inner one says why the program does not fit the runtime with
/// these groups.
fn lower_verified_grouped(
    algorithm: &Algorithm,
    options: &LowerOptions,
    groups: &[usize],
    fit: bool,
) -> Result<Result<Program, LowerError>> {
    let spread = lanes(algorithm, options, algorithm.collective.addresses());
    let per_group = spread * options.instances.max(1);
    let groups = squeeze(groups, MAX_CHANNELS / per_group.max(1));
    let busiest = busiest_connection(algorithm, options, &groups)?;
    let base = per_group * groups.iter().max().map_or(1, |g| g + 1);
    let per_channel = busiest.div_ceil(spread);
    // Splits that need more than MAX_CHANNELS are not tried.
    let limits = TRANSFER_LIMITS.into_iter().filter(|&l| {
        if l == 0 {
            per_channel <= STEPS
        } else {
            per_channel.div_ceil(l) * base <= MAX_CHANNELS
        }
    });
    let mut last: Option<LowerError> = None;
    let mut over_tbs: Option<LowerError> = None;
    for limit in limits {
        let attempt = LowerOptions {
            max_transfers: limit,
            ..options.clone()
        };
        let program = match lower_grouped(algorithm, &attempt, &groups, fit, None) {
            Ok(p) => p,
            Err(e) => match e.downcast::<LowerError>() {
                // More channels than the runtimes have: try the next split or fewer groups.
                Ok(e @ LowerError::TooManyChannels { .. }) => {
                    last = Some(e);
                    continue;
                }
                Ok(e) => return Err(e.into()),
                Err(e) => return Err(e),
            },
        };
        match fitted(algorithm, options, program)? {
            Ok(program) => return Ok(Ok(program)),
            // Too many steps in a threadblock: split connections further.
            Err(e) if e.is_too_many_steps() => last = Some(e),
            // Too many threadblocks on a rank: pair send and receive threadblocks, else a
            // finer split (more, shorter threadblocks may pair), else fewer groups.
            Err(e) if fit && e.is_too_many_threadblocks() => {
                if let Some(program) = paired(algorithm, &attempt, &groups)? {
                    return Ok(Ok(program));
                }
                over_tbs.get_or_insert(e);
            }
            // Past another limit of the runtime (threadblocks before the fit pass,
            // dependency ids).
            Err(e) => return Ok(Err(e)),
        }
    }
    if let Some(e) = over_tbs {
        return Ok(Err(e));
    }
    Ok(Err(last.unwrap_or_else(|| {
        LowerError::BusiestLinkOverflows {
            name: algorithm.name.clone(),
            busiest,
            channels: MAX_CHANNELS,
            steps: STEPS,
        }
    })))
}

/// Steps per threadblock the lowering plans for: the executor's and RCCL's limit (the
/// legacy runtime allows more).
const STEPS: usize = Limits::PORTABLE.max_steps;

/// Transfers per channel that no connection splits at: the lowering may split a connection
/// of fewer than [`STEPS`] transfers where their dependencies' nops pass the step limit, down
/// to [`TRANSFER_LIMITS`]' 32 before it halves channels.
const SPLIT_FREE: usize = 32;

/// The transfers of the busiest connection (link and step group) of `algorithm` with step
/// `s` in group `groups[s]`, counting a message of several chunks once.
fn busiest_connection(
    algorithm: &Algorithm,
    options: &LowerOptions,
    groups: &[usize],
) -> Result<usize> {
    let mut per_link: FxHashMap<(usize, usize, usize), usize> = FxHashMap::default();
    let counts = message_chunks_of(algorithm)?;
    for ((step, group), &count) in algorithm.steps.iter().zip(groups).zip(&counts) {
        if count == 1 {
            for s in &step.sends {
                *per_link.entry((s.src, s.dst, *group)).or_insert(0) += 1;
            }
            continue;
        }
        let mut sends = step.sends.clone();
        sends.sort_by_key(|s| (s.src, s.dst));
        let coll = &algorithm.collective;
        let pieces = algorithm.chunks() * options.instances.max(1);
        let span = message_span(coll.kind, coll.ranks, pieces);
        for run in messages(&sends, span, count, |_| 0) {
            let s = sends[run[0]];
            *per_link.entry((s.src, s.dst, *group)).or_insert(0) += 1;
        }
    }
    Ok(per_link.values().copied().max().unwrap_or(0))
}

/// `algorithm` lowered with `options` with send and receive threadblocks paired where a
/// rank has more threadblocks than the flavour runs, in the first [`PairOrder`] whose
/// program fits the flavour and verifies (a deadlock under one order is no error: the next
/// is tried); `None` where none does.
fn paired(
    algorithm: &Algorithm,
    options: &LowerOptions,
    groups: &[usize],
) -> Result<Option<Program>> {
    let limits = Limits::of(options.flavor);
    for order in [PairOrder::SendsFirst, PairOrder::Lowered] {
        let pairing = Pairing {
            max_tbs: limits.max_tbs,
            max_steps: limits.max_steps,
            order,
        };
        let mut program = lower_grouped(algorithm, options, groups, true, Some(pairing))?;
        if options.inplace {
            program.name.push_str("-inplace");
        }
        if runtime::xml::writable(&program, options.flavor).is_ok()
            && runtime::verify::verify(&program).is_ok()
        {
            return Ok(Some(program));
        }
    }
    Ok(None)
}

/// The lowered `program` of `algorithm`, named for its buffer mode, if it fits the
/// flavour's format (then it must verify: the outer error is an internal one).
fn fitted(
    algorithm: &Algorithm,
    options: &LowerOptions,
    mut program: Program,
) -> Result<Result<Program, LowerError>> {
    if options.inplace {
        program.name.push_str("-inplace");
    }
    if let Err(source) = runtime::xml::writable(&program, options.flavor) {
        return Ok(Err(LowerError::Unwritable {
            name: algorithm.name.clone(),
            flavor: options.flavor,
            source,
        }));
    }
    runtime::verify::verify(&program)
        .with_context(|| format!("internal error: lowered {} does not verify", program.name))?;
    Ok(Ok(program))
}

/// In place, send and receive buffers alias, so a rank's outgoing data can sit in the slot
/// where another address must land (alltoall: rank r's block for d is where d's block for r
/// goes). Such data is copied to scratch first and sent from there.
fn stage_overwritten_inputs(
    coll: &crate::collective::Collective,
    layout: &Layout,
    code: &mut [RankCode],
    location: &mut FxHashMap<(usize, usize), Slot>,
) {
    let mut landing: FxHashMap<(usize, Slot), usize> = FxHashMap::default();
    for (&address, members) in &coll.by_address() {
        for &r in coll.distinct_posts(members).iter().flat_map(|p| p.iter()) {
            landing.insert((r, layout.output(address)), address);
        }
    }
    for chunk in &coll.chunks {
        for &r in &chunk.pre {
            let input = layout.input(chunk.address);
            let overwritten = landing
                .get(&(r, input))
                .is_some_and(|&b| b != chunk.address);
            if overwritten && location.get(&(r, chunk.address)) == Some(&input) {
                let staged = code[r].scratch_slot();
                code[r].ops.push((
                    TbKey::Local { part: 0 },
                    Step::new(Op::Copy, input, staged, 1),
                ));
                location.insert((r, chunk.address), staged);
            }
        }
    }
}

/// Where a rank accumulates partial sums of `address`: its output slot if it must end with
/// the result, the address's own slot in place (the user's buffer is ours to use), else
/// scratch (out of place, the input must stay intact; in blocks of `block` addresses, see
/// [`RankCode::scratch_for`]).
fn accumulator(
    layout: &Layout,
    rc: &mut RankCode,
    current: Option<Slot>,
    address: usize,
    post: bool,
    block: usize,
) -> Slot {
    accumulator_slot(layout, current, address, post)
        .unwrap_or_else(|| rc.scratch_for(address, block))
}

/// [`accumulator`] where it is a slot already known; `None` where it is new scratch.
fn accumulator_slot(
    layout: &Layout,
    current: Option<Slot>,
    address: usize,
    post: bool,
) -> Option<Slot> {
    if post || layout.kind == Kind::AllReduce {
        return Some(layout.output(address));
    }
    match current {
        Some(slot) if slot.buffer == Buffer::Scratch || layout.inplace => Some(slot),
        _ => None,
    }
}

/// Local copies per local threadblock (the runtimes' step limit).
const LOCAL_STEPS: usize = Limits::PORTABLE.max_steps;

/// Assigns threadblock ids, computes dependencies and extents for one rank.
fn build_gpu(
    rank: usize,
    mut rc: RankCode,
    (input_extent, output_extent): (usize, usize),
    paced: &[bool],
    place: impl Fn(usize) -> usize,
) -> Gpu {
    number_local_parts(&mut rc.ops);
    let mut keys: Vec<TbKey> = rc.ops.iter().map(|(k, _)| *k).collect();
    keys.sort_by_key(|k| k.order(&place));
    keys.dedup();
    let tb_of: FxHashMap<TbKey, usize> = keys.iter().enumerate().map(|(i, k)| (*k, i)).collect();
    let mut threadblocks = empty_threadblocks(&keys, &rc.ops, &tb_of);
    let mut hazards = Hazards::default();
    let (mut uses_input, mut uses_output) = (false, false);
    let mut deps: Vec<Dep> = Vec::new();
    let after = std::mem::take(&mut rc.after);
    let leads = std::mem::take(&mut rc.leads);
    // Threadblocks that start with a connection's first transfer, and its steps.
    let lead_steps: FxHashMap<usize, usize> = leads.values().map(|(k, n)| (tb_of[k], *n)).collect();
    let starts = std::mem::take(&mut rc.step_starts);
    // The rank's last send so far in each paced step ([`paced_steps`]).
    let mut last_send: Vec<Option<Dep>> = vec![None; paced.len()];
    for (at, (key, mut step)) in rc.ops.into_iter().enumerate() {
        let tb = tb_of[&key];
        let here = Dep {
            tb,
            step: threadblocks[tb].steps.len(),
        };
        let (read, reads, written) = operands(&step);
        let read = &read[..reads];
        for slot in read.iter().chain(&written) {
            uses_input |= slot.buffer == Buffer::Input;
            uses_output |= slot.buffer == Buffer::Output;
        }
        // Every chunk of a message of `count` chunks.
        let count = step.count;
        let span = move |slot: &Slot| {
            let slot = *slot;
            (0..count).map(move |k| Slot::new(slot.buffer, slot.offset + k))
        };
        let reads: Vec<Slot> = read.iter().flat_map(span).collect();
        let writes: Vec<Slot> = written.iter().flat_map(span).collect();
        deps.clear();
        hazards.waits(&reads, &writes, &mut deps);
        // A connection's further channel starts after the channel before it (where
        // paired threadblocks put that channel's steps later, it starts when it may).
        let done = threadblocks[tb].steps.len();
        if done == lead_steps.get(&tb).copied().unwrap_or(0) {
            if let Some(&b) = after.get(&key).map(|before| &tb_of[before]) {
                if let Some(step) = threadblocks[b].steps.len().checked_sub(1) {
                    deps.push(Dep { tb: b, step });
                }
            }
        }
        // A connection's first channel starts after its first transfer, on the last.
        if done == 0 {
            if let Some((lead, steps)) = leads.get(&key) {
                if let Some(step) = steps.checked_sub(1) {
                    deps.push(Dep {
                        tb: tb_of[lead],
                        step,
                    });
                }
            }
        }
        if step.op.sends() {
            let algorithm_step = starts.partition_point(|&s| s <= at).saturating_sub(1);
            if paced.get(algorithm_step) == Some(&true) {
                let before = last_send[..algorithm_step].iter().rev().flatten().next();
                deps.extend(before.copied());
                last_send[algorithm_step] = Some(here);
            }
        }
        // The latest step per other threadblock, in threadblock order.
        deps.retain(|d| d.tb != tb);
        deps.sort_by_key(|d| (d.tb, std::cmp::Reverse(d.step)));
        deps.dedup_by_key(|d| d.tb);
        step.deps = deps.clone();
        hazards.record(here, reads, writes);
        threadblocks[tb].steps.push(step);
    }
    Gpu {
        rank,
        input_chunks: if uses_input { input_extent } else { 0 },
        output_chunks: if uses_output { output_extent } else { 0 },
        scratch_chunks: rc.scratch,
        threadblocks,
    }
}

/// Where a dependency of `gpu` names a threadblock past the runtimes' int8 `depid`, numbers
/// the threadblocks that steps depend on first (each group keeping its order), so that up to
/// [`limits::MAX_DEPID`] + 1 depended-on threadblocks fit however many others the rank has
/// (a rank with hundreds of connections, few of which forward what they receive). A rank
/// whose dependencies already fit keeps the lowering's numbering.
fn depended_first(gpu: &mut Gpu) {
    let depended = |gpu: &Gpu| -> Vec<bool> {
        let mut on = vec![false; gpu.threadblocks.len()];
        for tb in &gpu.threadblocks {
            for d in tb.steps.iter().flat_map(|s| &s.deps) {
                on[d.tb] = true;
            }
        }
        on
    };
    let on = depended(gpu);
    if on
        .iter()
        .rposition(|&d| d)
        .is_none_or(|last| last <= limits::MAX_DEPID)
    {
        return;
    }
    let order: Vec<usize> = (0..on.len())
        .filter(|&t| on[t])
        .chain((0..on.len()).filter(|&t| !on[t]))
        .collect();
    let mut id = vec![0usize; order.len()];
    for (new, &old) in order.iter().enumerate() {
        id[old] = new;
    }
    let mut old: Vec<Option<Threadblock>> = std::mem::take(&mut gpu.threadblocks)
        .into_iter()
        .map(Some)
        .collect();
    gpu.threadblocks = order
        .iter()
        .map(|&t| old[t].take().expect("each threadblock once"))
        .collect();
    for d in gpu
        .threadblocks
        .iter_mut()
        .flat_map(|tb| tb.steps.iter_mut())
        .flat_map(|s| s.deps.iter_mut())
    {
        d.tb = id[d.tb];
    }
}

/// Numbers the local threadblocks: local copies beyond one threadblock's step limit (an
/// in-place alltoall past 64 ranks stages one copy per peer) go to further local
/// threadblocks. A reduction counts [`LOCAL_REDUCTION_STEPS`] steps, so that the local
/// reductions of [`Lowering::lower_run_locally`] come in short runs on threadblocks of
/// their own, which run side by side.
fn number_local_parts(ops: &mut [(TbKey, Step)]) {
    let mut locals = 0;
    for (key, step) in ops.iter_mut() {
        if let TbKey::Local { part } = key {
            let steps = if step.op == Op::Reduce {
                LOCAL_REDUCTION_STEPS
            } else {
                1
            };
            if locals % LOCAL_STEPS + steps > LOCAL_STEPS {
                locals = locals.next_multiple_of(LOCAL_STEPS);
            }
            *part = locals / LOCAL_STEPS;
            locals += steps;
        }
    }
}

/// Steps a local reduction may take: itself and a nop for each dependency past its first
/// (its temporary's receive, the accumulator's last writer and its readers since).
const LOCAL_REDUCTION_STEPS: usize = 4;

/// One threadblock per key (in `keys`' order, which gives their ids), each with room for
/// its steps in `ops`.
fn empty_threadblocks(
    keys: &[TbKey],
    ops: &[(TbKey, Step)],
    tb_of: &FxHashMap<TbKey, usize>,
) -> Vec<Threadblock> {
    let mut threadblocks: Vec<Threadblock> = keys
        .iter()
        .map(|k| {
            let (send, recv, channel) = match *k {
                TbKey::Local { .. } => (None, None, 0),
                TbKey::Send { peer, channel } => (Some(peer), None, channel),
                TbKey::Recv { peer, channel } => (None, Some(peer), channel),
                TbKey::Pair {
                    send,
                    recv,
                    channel,
                } => (Some(send), Some(recv), channel),
            };
            Threadblock {
                send,
                recv,
                channel,
                steps: vec![],
            }
        })
        .collect();
    // Steps per threadblock, to allocate each list once.
    let mut sizes = vec![0usize; keys.len()];
    for (key, _) in ops {
        sizes[tb_of[key]] += 1;
    }
    for (tb, n) in threadblocks.iter_mut().zip(sizes) {
        tb.steps.reserve_exact(n);
    }
    threadblocks
}

/// The first slots a step reads (the first `.1` of `.0`) and the one it writes (a message
/// covers `count` slots from each).
fn operands(step: &Step) -> ([Slot; 2], usize, Option<Slot>) {
    let (read, reads) = match step.op {
        Op::Send | Op::Copy | Op::RecvReduceCopy => ([step.src, step.src], 1),
        Op::Reduce => ([step.src, step.dst], 2),
        _ => ([step.src, step.src], 0),
    };
    let written = match step.op {
        Op::Recv | Op::Copy | Op::RecvReduceCopy | Op::Reduce => Some(step.dst),
        _ => None,
    };
    (read, reads, written)
}

/// The accesses to one rank's slots so far, to order a step after those it conflicts with.
#[derive(Default)]
struct Hazards {
    /// The step that last wrote each slot.
    last_writer: FxHashMap<Slot, Dep>,
    /// The steps that read each slot since its last write.
    readers: FxHashMap<Slot, Vec<Dep>>,
}

impl Hazards {
    /// Appends to `deps` the steps that a step reading `reads` and writing `writes` waits
    /// for: the last writer of each slot (read-after-write, write-after-write) and the
    /// readers since of each slot it writes (write-after-read).
    fn waits(&self, reads: &[Slot], writes: &[Slot], deps: &mut Vec<Dep>) {
        for slot in reads.iter().chain(writes) {
            // Overwriting a slot read since its last write waits for those reads, and each
            // read waited for that write (or followed it in its threadblock): the write is
            // implied, and one dependency fewer is one nop fewer in the runtime's 64 steps
            // (an allreduce's allgather receives into the slots its reduce-scatter sent).
            let read_since = self.readers.get(slot).is_some_and(|r| !r.is_empty());
            if read_since && writes.contains(slot) {
                continue;
            }
            deps.extend(self.last_writer.get(slot));
        }
        for slot in writes {
            deps.extend(self.readers.get(slot).into_iter().flatten());
        }
    }

    /// Records that step `here` read `reads` and wrote `writes`.
    fn record(&mut self, here: Dep, reads: Vec<Slot>, writes: Vec<Slot>) {
        for slot in reads {
            self.readers.entry(slot).or_default().push(here);
        }
        for slot in writes {
            self.last_writer.insert(slot, here);
            self.readers.remove(&slot);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collective::Collective;
    use runtime::xml::WriteProblem;

    /// A broadcast down line:3 (0 → 1 → 2), one step per hop.
    fn chain(step_groups: Option<Vec<usize>>) -> Algorithm {
        let step = |src, dst| AlgoStep {
            rounds: 1,
            reduce: false,
            sends: vec![Send { chunk: 0, src, dst }],
        };
        Algorithm {
            step_groups,
            ..Algorithm::plain(
                "broadcast-line_3",
                "line:3",
                Collective::new(Kind::Broadcast, 3, 0, 1).unwrap(),
                vec![step(0, 1), step(1, 2)],
            )
        }
    }

    /// An allgather on `ranks` fully connected ranks in one step: every rank sends its
    /// `pieces` chunks, in order, straight to every other rank.
    fn direct_allgather(ranks: usize, pieces: usize) -> Algorithm {
        let sends = (0..ranks)
            .flat_map(|src| {
                (0..ranks)
                    .filter(move |&dst| dst != src)
                    .flat_map(move |dst| {
                        (0..pieces).map(move |k| Send {
                            chunk: src * pieces + k,
                            src,
                            dst,
                        })
                    })
            })
            .collect();
        let step = AlgoStep {
            rounds: pieces as u32,
            reduce: false,
            sends,
        };
        Algorithm::plain(
            format!("allgather-direct-{ranks}"),
            format!("fully-connected:{ranks}"),
            Collective::new(Kind::AllGather, ranks, 0, pieces).unwrap(),
            vec![step],
        )
    }

    /// Threadblocks with a send (or receive) peer of the busiest rank and channel.
    fn busiest_channel(program: &Program, send: bool) -> usize {
        let mut per: FxHashMap<(usize, usize), usize> = FxHashMap::default();
        for (rank, _, tb) in program.threadblocks() {
            if if send { tb.send } else { tb.recv }.is_some() {
                *per.entry((rank, tb.channel)).or_insert(0) += 1;
            }
        }
        per.into_values().max().unwrap_or(0)
    }

    /// Issue 31, item 3: a rank that talks to more peers than one channel's 32 threadblocks
    /// per direction (a 64-rank greedy allreduce) gets connections on further channels.
    #[test]
    fn connections_past_32_peers_per_channel_move_to_further_channels() {
        let (program, xml) =
            lower_to_xml(&direct_allgather(40, 1), &LowerOptions::default()).unwrap();
        assert_eq!(busiest_channel(&program, true), 32);
        assert_eq!(busiest_channel(&program, false), 32);
        assert!(program.nchannels() > 1);
        runtime::xml::read_str(&xml).expect("the runtimes' rules hold");
    }

    /// Issue 31, item 4: where a rank would have more XML elements than the runtimes' parser
    /// holds (33 ranks x 64 pieces: 4,096 sends and receives on rank 0), the lowering sends
    /// two chunks per message.
    #[test]
    fn programs_past_the_parsers_element_budget_get_coarser_messages() {
        let a = direct_allgather(33, 64);
        let (program, xml) = lower_to_xml(&a, &LowerOptions::default()).unwrap();
        let transfers = program.gpus[0]
            .threadblocks
            .iter()
            .flat_map(|t| &t.steps)
            .filter(|s| s.op != Op::Copy);
        assert!(transfers.clone().all(|s| s.count == 2));
        assert_eq!(transfers.count(), 2 * 32 * 32);
        runtime::xml::read_str(&xml).expect("the runtimes' rules hold");
    }

    /// Issue 27 (nothing dropped for dependency ids): an allgather on 136 fully connected
    /// ranks where rank 0 forwards the chunks of the last six ranks, which reach everyone
    /// else through it. Rank 0 has 135 receive threadblocks, numbered by peer, and the six
    /// that its sends depend on came past the runtimes' int8 `depid` (130 to 135): they are
    /// numbered first, and the program is written and verifies.
    #[test]
    fn depended_on_threadblocks_are_numbered_first_where_ids_pass_the_int8() {
        let n = 136;
        let relayed = |r: usize| r >= n - 6;
        let mut first = Vec::new();
        let mut second = Vec::new();
        for src in 0..n {
            for dst in (0..n).filter(|&d| d != src) {
                let send = Send {
                    chunk: src,
                    src,
                    dst,
                };
                if !relayed(src) || dst == 0 {
                    first.push(send);
                } else {
                    second.push(Send {
                        chunk: src,
                        src: 0,
                        dst,
                    });
                }
            }
        }
        let step = |sends: Vec<Send>| AlgoStep {
            rounds: 6,
            reduce: false,
            sends,
        };
        let a = Algorithm::plain(
            format!("allgather-relayed-{n}"),
            format!("fully-connected:{n}"),
            Collective::new(Kind::AllGather, n, 0, 1).unwrap(),
            vec![step(first), step(second)],
        );
        crate::check::check(&a, &crate::topology::load(&a.topology).unwrap()).unwrap();
        let (program, xml) = lower_to_xml(&a, &LowerOptions::default()).unwrap();
        let deps = || {
            program.gpus[0]
                .threadblocks
                .iter()
                .flat_map(|t| &t.steps)
                .flat_map(|s| &s.deps)
        };
        assert!(deps().all(|d| d.tb <= limits::MAX_DEPID));
        assert!(program.gpus[0].threadblocks.len() > limits::MAX_DEPID + 1);
        // The relayed ranks' receive threadblocks are rank 0's first (in peer order).
        let recv_of = |t: usize| program.gpus[0].threadblocks[t].recv;
        assert_eq!(
            (0..6).map(recv_of).collect::<Vec<_>>(),
            (n - 6..n).map(Some).collect::<Vec<_>>()
        );
        runtime::xml::read_str(&xml).expect("the runtimes' rules hold");
    }

    /// The channel of rank `rank`'s threadblock that sends to (or receives from) `peer`.
    fn channel(program: &Program, rank: usize, peer: usize, send: bool) -> usize {
        let tb = program.gpus[rank]
            .threadblocks
            .iter()
            .find(|t| if send { t.send } else { t.recv } == Some(peer))
            .expect("threadblock");
        tb.channel
    }

    #[test]
    fn step_groups_get_channels_of_their_own() {
        let (program, _) =
            lower_to_xml(&chain(Some(vec![0, 1])), &LowerOptions::default()).unwrap();
        assert_eq!(channel(&program, 1, 0, false), 0);
        assert_eq!(channel(&program, 1, 2, true), 1);
        assert_eq!(channel(&program, 2, 1, false), 1);
        let (program, _) = lower_to_xml(&chain(None), &LowerOptions::default()).unwrap();
        assert_eq!(channel(&program, 1, 2, true), 0);
    }

    #[test]
    fn a_connection_overflows_into_further_channels_in_turn() {
        // Four chunks over 0 → 1, two transfers per channel: channel 0 takes the second
        // and third, channel 1 the first and the fourth.
        let a = line_of_four(Kind::Broadcast, [0, 1, 2, 3], None);
        let options = LowerOptions {
            max_transfers: 2,
            ..LowerOptions::default()
        };
        let program = lower(&a, &options).unwrap();
        let gpu = &program.gpus[0];
        let tb = |channel: usize| {
            gpu.threadblocks
                .iter()
                .position(|t| t.send == Some(1) && t.channel == channel)
                .unwrap()
        };
        let (first, last) = (tb(0), tb(1));
        let sent = |tb: usize| -> Vec<usize> {
            let steps = &gpu.threadblocks[tb].steps;
            steps.iter().map(|s| s.src.offset).collect()
        };
        let waits =
            |tb: usize, step: usize, on: Dep| gpu.threadblocks[tb].steps[step].deps.contains(&on);
        assert_eq!((sent(first), sent(last)), (vec![1, 2], vec![0, 3]));
        // Channel 0 starts after the first transfer, so in every slice past the first only
        // once channel 1 has finished the slice before; channel 1 goes on after channel 0.
        assert!(waits(first, 0, Dep { tb: last, step: 0 }));
        assert!(waits(last, 1, Dep { tb: first, step: 1 }));
        assert!(!waits(last, 0, Dep { tb: first, step: 1 }));
        runtime::verify::verify(&program).unwrap();
    }

    #[test]
    fn a_split_connections_twin_lets_the_slices_overlap() {
        // 40 pieces over each link, 16 transfers per channel: three channels. By default
        // the first transfer goes on the last channel and the first channel waits for it;
        // the twin keeps it on the first channel, which then waits for nothing.
        let a = direct_allgather(2, 40);
        let options = LowerOptions {
            max_transfers: 16,
            ..LowerOptions::default()
        };
        let twin = overlapping_slices_twin(&a, &LowerOptions::default()).expect("a twin");
        assert!(twin.origin.overlapping_slices && twin.name.ends_with("-os"));
        assert!(overlapping_slices_twin(&twin, &options).is_none());
        let first_channel = |a: &Algorithm| {
            let program = lower(a, &options).unwrap();
            runtime::verify::verify(&program).unwrap();
            let gpu = &program.gpus[0];
            let tb = |channel: usize| {
                (gpu.threadblocks.iter())
                    .position(|t| t.send == Some(1) && t.channel == channel)
                    .unwrap()
            };
            let first = &gpu.threadblocks[tb(0)].steps;
            (
                first[0].src.offset,
                first[0].deps.contains(&Dep { tb: tb(2), step: 0 }),
            )
        };
        assert_eq!(first_channel(&a), (1, true));
        assert_eq!(first_channel(&twin), (0, false));
        assert!(keeps_turns_across_slices(&lower(&a, &options).unwrap()));
        assert!(!keeps_turns_across_slices(&lower(&twin, &options).unwrap()));
        assert!(!keeps_turns_across_slices(
            &lower(&a, &LowerOptions::default()).unwrap()
        ));
        // Few transfers per connection: no twin.
        assert!(overlapping_slices_twin(&direct_allgather(2, 8), &options).is_none());
    }

    #[test]
    fn an_overwrite_after_reads_waits_for_the_reads_only() {
        // Allreduce on line:3 (0 - 1 - 2), address a owned by rank a. Rank 1 reduces rank
        // 0's part of address 2 into its slot, sends the sum on to rank 2, and later
        // receives the total into the same slot: that receive waits for the send (which
        // waited for the reduction), not for the reduction too.
        let send = |chunk, src, dst| Send { chunk, src, dst };
        let step = |reduce, sends| AlgoStep {
            rounds: 2,
            reduce,
            sends,
        };
        let a = Algorithm::plain(
            "allreduce-line_3",
            "line:3",
            Collective::new(Kind::AllReduce, 3, 0, 1).unwrap(),
            vec![
                step(
                    true,
                    vec![send(2, 0, 1), send(0, 2, 1), send(1, 0, 1), send(1, 2, 1)],
                ),
                step(true, vec![send(2, 1, 2), send(0, 1, 0)]),
                step(
                    false,
                    vec![send(2, 2, 1), send(0, 0, 1), send(1, 1, 0), send(1, 1, 2)],
                ),
                step(false, vec![send(2, 1, 0), send(0, 1, 2)]),
            ],
        );
        let topology = crate::topology::load("line:3").unwrap();
        crate::check::check(&a, &topology).unwrap();
        let program = lower(&a, &LowerOptions::default()).unwrap();
        runtime::verify::verify(&program).unwrap();
        let gpu = &program.gpus[1];
        let tb = |send: Option<usize>, recv: Option<usize>| {
            gpu.threadblocks
                .iter()
                .position(|t| t.send == send && t.recv == recv)
                .unwrap()
        };
        let from_2 = &gpu.threadblocks[tb(None, Some(2))];
        // Its steps receive the reduce-scatter's parts (reduced), then the total.
        let total = from_2.steps.iter().find(|s| s.op == Op::Recv).unwrap();
        let to_2 = tb(Some(2), None);
        assert_eq!(
            total.deps.iter().map(|d| d.tb).collect::<Vec<_>>(),
            vec![to_2]
        );
    }

    #[test]
    fn step_groups_of_the_wrong_length_are_an_error() {
        let e = lower(&chain(Some(vec![0])), &LowerOptions::default()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "algorithm broadcast-line_3: step_groups lists 1 groups for 2 steps"
        );
    }

    /// `kind` (broadcast or reduce, root at the far end of the data's path) of 4 chunks
    /// down line:3, 0 → 1 → 2, one step per hop with the chunks in `order`, in messages of
    /// `counts` chunks per step.
    fn line_of_four(kind: Kind, order: [usize; 4], counts: Option<Vec<usize>>) -> Algorithm {
        let root = if kind == Kind::Reduce { 2 } else { 0 };
        let step = |src, dst| AlgoStep {
            rounds: 4,
            reduce: kind == Kind::Reduce,
            sends: order
                .iter()
                .map(|&chunk| Send { chunk, src, dst })
                .collect(),
        };
        Algorithm {
            message_chunks: counts,
            ..Algorithm::plain(
                format!("{kind}-line_3"),
                "line:3",
                Collective::new(kind, 3, root, 4).unwrap(),
                vec![step(0, 1), step(1, 2)],
            )
        }
    }

    /// The (op, count) of every step of rank `rank`'s threadblocks that send to or receive
    /// from `peer`.
    fn ops(program: &Program, rank: usize, peer: usize) -> Vec<(Op, usize)> {
        program.gpus[rank]
            .threadblocks
            .iter()
            .filter(|t| t.send == Some(peer) || t.recv == Some(peer))
            .flat_map(|t| t.steps.iter().map(|s| (s.op, s.count)))
            .collect()
    }

    #[test]
    fn consecutive_chunks_on_a_link_go_as_one_message() {
        // In either order within the step; messages of at most the step's count, aligned.
        for order in [[0, 1, 2, 3], [3, 2, 1, 0]] {
            let a = line_of_four(Kind::Broadcast, order, Some(vec![4, 2]));
            let (program, _) = lower_to_xml(&a, &LowerOptions::default()).unwrap();
            assert_eq!(ops(&program, 0, 1), vec![(Op::Send, 4)]);
            assert_eq!(ops(&program, 1, 2), vec![(Op::Send, 2), (Op::Send, 2)]);
            assert_eq!(ops(&program, 2, 1), vec![(Op::Recv, 2), (Op::Recv, 2)]);
        }
        // Without counts, one chunk per message, as before.
        let a = line_of_four(Kind::Broadcast, [0, 1, 2, 3], None);
        let (program, _) = lower_to_xml(&a, &LowerOptions::default()).unwrap();
        assert_eq!(ops(&program, 0, 1), vec![(Op::Send, 1); 4]);
        // Only consecutive chunks next to each other in the step's order merge: 0, then 2
        // and 1, then 3.
        let a = line_of_four(Kind::Broadcast, [0, 2, 1, 3], Some(vec![4, 4]));
        let (program, _) = lower_to_xml(&a, &LowerOptions::default()).unwrap();
        let sizes = vec![(Op::Send, 1), (Op::Send, 2), (Op::Send, 1)];
        assert_eq!(ops(&program, 0, 1), sizes);
    }

    #[test]
    fn joined_reductions_chain_in_the_order_their_messages_arrive() {
        // Rank 1 (the root) gets chunks 0, 1, 2 from rank 0 and 2, 0, 1 from rank 2, in one
        // step: chunk 2 comes first from rank 2 and last from rank 0, so its reduction from
        // rank 0 waits for rank 2's, not the other way round (the chain is not by rank).
        let send = |src, chunk| Send { chunk, src, dst: 1 };
        let step = AlgoStep {
            rounds: 3,
            reduce: true,
            sends: vec![
                send(0, 0),
                send(0, 1),
                send(0, 2),
                send(2, 2),
                send(2, 0),
                send(2, 1),
            ],
        };
        let a = Algorithm::plain(
            "reduce-line_3",
            "line:3",
            Collective::new(Kind::Reduce, 3, 1, 3).unwrap(),
            vec![step],
        );
        let program = lower_verified(&a, &LowerOptions::default()).unwrap();
        let gpu = &program.gpus[1];
        let from = |peer| {
            let id = (gpu.threadblocks.iter())
                .position(|t| t.recv == Some(peer))
                .unwrap();
            (id, &gpu.threadblocks[id])
        };
        let ((id0, tb0), (id2, tb2)) = (from(0), from(2));
        assert!(tb2.steps[0].deps.is_empty(), "{:?}", tb2.steps[0]);
        assert!(
            tb0.steps[2].deps.iter().any(|d| d.tb == id2),
            "{:?}",
            tb0.steps[2]
        );
        assert!(
            tb2.steps[1].deps.iter().any(|d| d.tb == id0),
            "{:?}",
            tb2.steps[1]
        );
    }

    /// A reduce to rank 1 of line:3 in which ranks 0 and 2 send both their chunks in one
    /// step: each connection carries two addresses, and two messages join in each of rank
    /// 1's accumulators.
    fn joined_reduce_on_line_3() -> Algorithm {
        let sends = [0, 2]
            .into_iter()
            .flat_map(|src| (0..2).map(move |chunk| Send { chunk, src, dst: 1 }))
            .collect();
        let step = AlgoStep {
            rounds: 2,
            reduce: true,
            sends,
        };
        Algorithm::plain(
            "reduce-line_3",
            "line:3",
            Collective::new(Kind::Reduce, 3, 1, 2).unwrap(),
            vec![step],
        )
    }

    #[test]
    fn joined_reductions_go_to_local_threadblocks_in_the_local_twin() {
        let a = joined_reduce_on_line_3();
        let twin = local_reduction_twin(&a).expect("two messages join");
        assert!(twin.name.ends_with("-lr"), "{}", twin.name);
        assert!(local_reduction_twin(&twin).is_none());
        for flavor in [Flavor::Nccl, Flavor::Rccl] {
            let options = LowerOptions {
                flavor,
                ..LowerOptions::default()
            };
            let plain = lower_verified(&a, &options).unwrap();
            let local = lower_verified(&twin, &options).unwrap();
            let rank1 = |p: &Program, receiving: bool| -> Vec<Op> {
                (p.gpus[1].threadblocks.iter())
                    .filter(|t| t.recv.is_some() == receiving && t.send.is_none())
                    .flat_map(|t| t.steps.iter().map(|s| s.op))
                    .filter(|&op| op != Op::Nop)
                    .collect()
            };
            // The plain form reduces on its receiving threadblocks, the twin only receives
            // there and reduces (twice per address) on local ones.
            assert!(
                rank1(&plain, true).iter().any(|op| op.reduces()),
                "{flavor:?}"
            );
            assert!(rank1(&local, true).iter().all(|&op| op == Op::Recv));
            let reductions = rank1(&local, false)
                .iter()
                .filter(|&&op| op == Op::Reduce)
                .count();
            assert_eq!(reductions, 4, "{flavor:?}");
        }
        // Nothing joins in a line: no twin.
        assert!(local_reduction_twin(&line_of_four(Kind::Reduce, [0, 1, 2, 3], None)).is_none());
    }

    /// A direct schedule of `kind` in `steps` on three ranks linked all to all.
    fn direct_on_three(kind: Kind, steps: Vec<AlgoStep>) -> Algorithm {
        let coll = Collective::new(kind, 3, 0, 1).unwrap();
        Algorithm::plain(format!("{kind}-fc_3"), "fully-connected:3", coll, steps)
    }

    #[test]
    fn paced_sends_wait_for_the_ranks_send_of_the_step_before() {
        // A direct reduce-scatter on 3 ranks: in step k every rank sends its own
        // contribution to address r + k + 1 straight to its owner.
        let step = |k: usize| AlgoStep {
            rounds: 1,
            reduce: true,
            sends: (0..3)
                .map(|src| {
                    let dst = (src + k + 1) % 3;
                    Send {
                        chunk: dst,
                        src,
                        dst,
                    }
                })
                .collect(),
        };
        let mut a = direct_on_three(Kind::ReduceScatter, vec![step(0), step(1)]);
        assert!(
            paced_twins(&a).is_empty(),
            "only schedules timed for serial links"
        );
        a.serial_links = true;
        let twins = paced_twins(&a);
        assert_eq!(twins.len(), 1, "no copying step: no twin paced everywhere");
        let twin = &twins[0];
        assert!(twin.name.ends_with("-ps"), "{}", twin.name);
        assert!(paced_twins(twin).is_empty());
        for flavor in [Flavor::Nccl, Flavor::Rccl] {
            let options = LowerOptions {
                flavor,
                ..LowerOptions::default()
            };
            // Each rank's second send (to the peer two on) waits for its first, where the
            // plain lowering lets both go at once.
            let second_send_deps = |p: &Program, rank: usize| -> Vec<(Option<usize>, usize)> {
                let gpu = &p.gpus[rank];
                let tb = (gpu.threadblocks.iter())
                    .find(|t| t.send == Some((rank + 2) % 3))
                    .expect("a send threadblock to the peer two on");
                let send = (tb.steps.iter()).find(|s| s.op.sends()).expect("a send");
                (send.deps.iter())
                    .map(|d| (gpu.threadblocks[d.tb].send, d.step))
                    .collect()
            };
            let plain = lower_verified(&a, &options).unwrap();
            let paced = lower_verified(twin, &options).unwrap();
            for rank in 0..3 {
                assert!(second_send_deps(&plain, rank).is_empty(), "{flavor:?}");
                let deps = second_send_deps(&paced, rank);
                assert_eq!(deps, vec![(Some((rank + 1) % 3), 0)], "{flavor:?}");
            }
        }
    }

    #[test]
    fn an_allgathers_paced_twin_paces_every_step() {
        // A direct allgather on 3 ranks: in step k every rank sends its own piece to the
        // rank k + 1 on; paced, its second send waits for its first.
        let step = |k: usize| AlgoStep {
            rounds: 1,
            reduce: false,
            sends: (0..3)
                .map(|src| Send {
                    chunk: src,
                    src,
                    dst: (src + k + 1) % 3,
                })
                .collect(),
        };
        let mut a = direct_on_three(Kind::AllGather, vec![step(0), step(1)]);
        a.serial_links = true;
        let twins = paced_twins(&a);
        assert_eq!(twins.len(), 1, "{twins:?}");
        let paced = lower_verified(&twins[0], &LowerOptions::default()).unwrap();
        let plain = lower_verified(&a, &LowerOptions::default()).unwrap();
        for (program, waits) in [(&plain, false), (&paced, true)] {
            for rank in 0..3 {
                let gpu = &program.gpus[rank];
                let tb = (gpu.threadblocks.iter())
                    .find(|t| t.send == Some((rank + 2) % 3))
                    .expect("a send threadblock to the peer two on");
                let send = (tb.steps.iter()).find(|s| s.op.sends()).expect("a send");
                let first =
                    (send.deps.iter()).any(|d| gpu.threadblocks[d.tb].send == Some((rank + 1) % 3));
                assert_eq!(first, waits, "rank {rank}");
            }
        }
    }

    #[test]
    fn an_allreduce_is_paced_in_its_reductions_or_everywhere() {
        // A direct allreduce on 3 ranks: two steps reduce each rank's address at its owner,
        // two copy the sums back out.
        let step = |k: usize, reduce: bool| AlgoStep {
            rounds: 1,
            reduce,
            sends: (0..3)
                .map(|r| {
                    let other = (r + k + 1) % 3;
                    let (src, dst, chunk) = if reduce {
                        (r, other, other)
                    } else {
                        (other, r, other)
                    };
                    Send { chunk, src, dst }
                })
                .collect(),
        };
        let mut a = direct_on_three(
            Kind::AllReduce,
            vec![step(0, true), step(1, true), step(0, false), step(1, false)],
        );
        a.serial_links = true;
        let twins = paced_twins(&a);
        let paced: Vec<(String, Vec<bool>)> = twins
            .iter()
            .map(|t| (t.name.clone(), paced_steps(t)))
            .collect();
        assert_eq!(paced.len(), 2, "{paced:?}");
        assert!(paced[0].0.ends_with("-ps"), "{paced:?}");
        assert_eq!(paced[0].1, [true, true, false, false]);
        assert!(paced[1].0.ends_with("-pa"), "{paced:?}");
        assert_eq!(paced[1].1, [true; 4]);
        for twin in &twins {
            lower_verified(twin, &LowerOptions::default()).unwrap();
        }
    }

    #[test]
    fn the_address_twin_gives_every_address_threadblocks_of_its_own() {
        let a = joined_reduce_on_line_3();
        for flavor in [Flavor::Nccl, Flavor::Rccl] {
            let options = LowerOptions {
                flavor,
                ..LowerOptions::default()
            };
            let twin = address_channel_twin(&a, &options).expect("two addresses a connection");
            assert!(twin.name.ends_with("-ac"), "{}", twin.name);
            assert!(address_channel_twin(&twin, &options).is_none());
            let receiving = |p: &Program| -> Vec<usize> {
                (p.gpus[1].threadblocks.iter())
                    .filter(|t| t.recv.is_some())
                    .map(|t| t.channel)
                    .collect()
            };
            // One receiving threadblock per peer as lowered; per peer and address in the twin.
            let plain = lower_verified(&a, &options).unwrap();
            let own = lower_verified(&twin, &options).unwrap();
            assert_eq!(receiving(&plain).len(), 2, "{flavor:?}");
            let mut channels = receiving(&own);
            assert_eq!(channels.len(), 4, "{flavor:?}");
            channels.sort_unstable();
            assert_eq!(channels, vec![0, 0, 1, 1], "{flavor:?}");
        }
        // A 32-rank one-shot would hold a threadblock per peer, direction and address: no
        // twin, and no lowering tried.
        let topology = crate::topology::load("fully-connected:32").unwrap();
        let one_shot = crate::allreduce_shapes::one_shot(&topology, 1)
            .unwrap()
            .unwrap();
        assert!(joins_messages(&one_shot));
        assert_eq!(one_shot.collective.addresses(), 32);
        let (threadblocks, shared) = address_threadblocks(&one_shot, &[0]);
        assert!(shared && threadblocks == 31 * 2 * 32, "{threadblocks}");
        assert!(address_channel_twin(&one_shot, &LowerOptions::default()).is_none());
    }

    #[test]
    fn reductions_merge_fused_and_unfused() {
        let a = line_of_four(Kind::Reduce, [3, 2, 1, 0], Some(vec![4, 4]));
        // Rank 1 reduces the message from 0 into scratch (out of place) or its input (in
        // place) and sends the sum on; rank 2 reduces it into its output.
        for inplace in [false, true] {
            let options = LowerOptions {
                inplace,
                ..LowerOptions::default()
            };
            let (program, _) = lower_to_xml(&a, &options).unwrap();
            assert_eq!(ops(&program, 1, 0), vec![(Op::RecvReduceCopy, 4)]);
            assert_eq!(ops(&program, 1, 2), vec![(Op::Send, 4)]);
            assert_eq!(ops(&program, 2, 1), vec![(Op::RecvReduceCopy, 4)]);
        }
        // RCCL: receive into scratch, copy the own value if needed, reduce; each once.
        let options = LowerOptions {
            flavor: Flavor::Rccl,
            ..LowerOptions::default()
        };
        let (program, _) = lower_to_xml(&a, &options).unwrap();
        assert!(ops(&program, 2, 1).iter().all(|&(_, count)| count == 4));
        assert_eq!(ops(&program, 2, 1)[0], (Op::Recv, 4));
    }

    #[test]
    fn message_counts_outside_the_runtimes_or_the_steps_are_errors() {
        for (counts, words) in [
            (vec![4], "message_chunks lists 1 counts for 2 steps"),
            (vec![0, 1], "message_chunks holds 0, outside 1..=71"),
            (vec![72, 1], "message_chunks holds 72, outside 1..=71"),
        ] {
            let a = line_of_four(Kind::Broadcast, [0, 1, 2, 3], Some(counts));
            let e = lower(&a, &LowerOptions::default()).unwrap_err();
            assert!(e.to_string().contains(words), "{e}");
        }
    }

    #[test]
    fn scratch_blocks_keep_consecutive_addresses_together() {
        let mut rc = RankCode::default();
        // Addresses 7, 6, 4 land first; 5 still goes between 4 and 6.
        let slots: Vec<usize> = [7, 6, 4, 5, 8]
            .iter()
            .map(|&a| rc.scratch_for(a, 4).offset)
            .collect();
        assert_eq!(slots, vec![3, 2, 0, 1, 4]);
        assert_eq!(rc.scratch, 8);
        // Block 1: the next free slot, in landing order.
        assert_eq!(rc.scratch_for(100, 1).offset, 8);
    }

    #[test]
    fn a_program_past_a_runtime_limit_is_a_typed_error() {
        // A broadcast straight from the root to 69 ranks: 69 sending threadblocks on the
        // root and one for its local copy, past RCCL's 64 (the executor takes 1024).
        let ranks = 70;
        let sends = (1..ranks)
            .map(|dst| Send {
                chunk: 0,
                src: 0,
                dst,
            })
            .collect();
        let a = Algorithm::plain(
            "broadcast-star",
            "star",
            Collective::new(Kind::Broadcast, ranks, 0, 1).unwrap(),
            vec![AlgoStep {
                rounds: 1,
                reduce: false,
                sends,
            }],
        );
        lower_verified(&a, &LowerOptions::default()).unwrap();
        let options = LowerOptions {
            flavor: Flavor::Rccl,
            ..LowerOptions::default()
        };
        let e = lower_verified(&a, &options).unwrap_err();
        let lowering = e.downcast_ref::<LowerError>().expect("a LowerError");
        assert!(
            matches!(
                lowering.write_problem(),
                Some(WriteProblem::TooManyThreadblocks {
                    rank: 0,
                    count: 70,
                    limit: 64
                })
            ),
            "{e:#}"
        );
        assert_eq!(
            format!("{e:#}"),
            "broadcast-star cannot be expressed for the Rccl runtime: cannot write Rccl XML: rank 0 has 70 threadblocks (limit 64)"
        );
    }

    #[test]
    fn squeeze_keeps_the_order_of_groups() {
        assert_eq!(squeeze(&[0, 1, 2, 3], 4), vec![0, 1, 2, 3]);
        assert_eq!(squeeze(&[0, 1, 2, 3], 2), vec![0, 0, 1, 1]);
        assert_eq!(squeeze(&[0, 1, 2, 3], 1), vec![0, 0, 0, 0]);
    }
}
