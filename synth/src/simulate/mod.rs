//! An event-driven simulator of a [`Program`] on a [`Topology`] (DESIGN §6).
//!
//! # Model
//!
//! * **Ranks.** Program rank `r` runs on topology rank `r`; the rank counts must agree.
//! * **Message size.** `size_bytes` is nccl-tests' `size` column: the bytes of the larger user
//!   buffer, i.e. `count × sizeMultiplier × sizeof(float)` in msccl-ir.md §2.5 (allgather: the
//!   whole output; reduce-scatter: the whole input; alltoall: one rank's whole buffer;
//!   allreduce, broadcast, reduce: the buffer; gather: the root's output; scatter: the root's
//!   input). As in the runtime, the element count `E = size / 4` is rounded down to a multiple
//!   of `nchunksperloop` (at least one element per chunk) and a chunk is `E / nchunksperloop`
//!   elements; [`SimResult::size_bytes`] is the size actually simulated.
//! * **Slices.** Like the MSCCL interpreter, every threadblock replays its whole program once
//!   per slice of each chunk ([`Slicing::Runtime`]: 2 MiB for Simple, 32 KiB for LL, 576,000 B
//!   for LL128 with NCCL's default buffers; at most [`MAX_SLICES`] per chunk, larger past it),
//!   with dependencies re-synchronised per slice; so a long chain pipelines naturally.
//! * **Threadblocks.** Each runs its steps in order. A step starts when its dependencies (the
//!   same step of the same slice, or later, on the other threadblock) are done, when it
//!   receives: the paired message (k-th send ↔ k-th receive per connection) has arrived, and
//!   when it sends: the connection holds fewer than [`ModelParams::fifo_depth`] messages not
//!   yet taken by the receiver.
//! * **Protocols.** Every number that depends on the protocol is a [`ModelParams`] field
//!   (`model.rs`, settable with `--model FILE`): the slice, the wire efficiency (LL 1/2,
//!   LL128 120/128), the per-hop latency (the link's alpha times NCCL's ring per-hop latency
//!   of the protocol over Simple's, by link kind) and a launch latency added once per run
//!   (NCCL's ring base latency). [`SimOptions::protocol`] simulates a program as if its
//!   `proto` were another.
//! * **Transfers.** A sending step (`s`, `rcs`, `rrs`, `rrcs`) pushes `count` chunk-slices
//!   over the link `u → v` (an error if there is none): the bytes (divided by the
//!   protocol's wire efficiency) leave at a rate shared max-min fairly,
//!   recomputed at every event, with all concurrent transfers on the same link and on every
//!   switch constraint (NVSwitch port, NIC) covering it; the step ends when its last byte
//!   has left, and the message arrives the hop latency (µs) later. So a lone Simple transfer
//!   arrives after `launch + alpha + bytes / bw`, and a sender may go on while its message is in
//!   flight (messages in flight count against the FIFO depth). A receiving step takes its
//!   message from the connection when it starts; receiving costs no time beyond the
//!   transfer (the fused reductions of `rrs`, `rrc`, `rrcs` are done as the data streams
//!   in), and forwarding (`rcs`, `rrs`, `rrcs`) starts once the whole message is in.
//! * **Local steps.** `cpy` and `re` move `count` chunk-slices through the rank's memory at
//!   [`ModelParams::local_bandwidth`] (shared by the rank's concurrent local steps); `nop`
//!   costs nothing. A `compute` step (synth's extension) moves its kernel's element
//!   streams (`Kernel::streams`, a copy being two) through the same memory.
//! * **Producer.** With [`SimOptions::producer`] the input buffer is written in tiles over
//!   time, and a step reading input waits for the tile holding its slice;
//!   [`Slicing::Producer`] runs a few slicings at tile boundaries and keeps the fastest
//!   (`producer.rs`); [`producer_bound`] is what no slicing beats.
//!
//! The result reports nccl-tests' algbw (`size / time`) and busbw (algbw times
//! [`runtime::ir::Collective::busbw_factor`]), GB = 1e9 bytes.

mod engine;
pub mod model;
mod producer;
mod queue;
pub mod share;

pub use model::{ModelError, ModelParams, NcclTuning, PerProtocol};

pub use share::max_min_rates;

use crate::topology::Topology;
use anyhow::{bail, Result};
use runtime::ir::{Program, Protocol};
use serde::{Deserialize, Serialize};

/// Default copy/reduce bandwidth of a GPU's memory in GB/s: of the order of an A100's HBM2
/// (1.5–2 TB/s raw, roughly half of it for a copy that reads and writes).
pub const DEFAULT_LOCAL_BANDWIDTH: f64 = 1000.0;

/// Bytes of one element (the runtime's default `float`).
pub const ELEMENT_BYTES: u64 = 4;

/// Most events one simulation may process before it gives up.
const MAX_EVENTS: usize = 20_000_000;

/// Most slices of a chunk one simulation replays the program on: past it the slices grow, so
/// the cost of a simulation does not grow with the size (Simple's 2 MiB slices reach it at
/// 16 GiB per chunk; only the pipeline's fill, under 1/8192 of the time, changes).
pub const MAX_SLICES: u64 = 8192;

/// How chunks are cut into slices that the whole program is replayed on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Slicing {
    /// The MSCCL runtime's slice for the program's protocol (msccl-ir.md §2.4, §2.5).
    Runtime,
    /// One pass over whole chunks (no pipelining inside a chunk).
    WholeChunks,
    /// Slices of at most this many bytes (at least one element).
    Bytes(u64),
    /// Slices that follow [`SimOptions::producer`] (without one: [`Slicing::Runtime`]): the
    /// fastest of the runtime's slices, one tile per slice, slices paced by the collective
    /// alone, and the faster of the last two with the last tile cut finer; each piece at
    /// most the runtime's slice, each slice waiting for its last tile.
    Producer,
}

/// Options of one simulation.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SimOptions {
    /// The model's parameters.
    pub model: ModelParams,
    /// Slicing of chunks.
    pub slicing: Slicing,
    /// The protocol to simulate the program with, instead of its own `proto`.
    pub protocol: Option<Protocol>,
    /// A producer writing the input buffer in tiles while the program runs (`None`: the
    /// input is there at the start).
    #[serde(default)]
    pub producer: Option<Producer>,
}

/// A producer (a matmul, say) that writes the input buffer in `tiles` equal tiles over
/// `time_us`, in the order the program consumes its slices (tile `t`: the t-th of `tiles`
/// parts of every chunk): tile `t` is out at `(t + 1) · time_us / tiles`, and a step
/// reading input waits for the tile holding the last byte of its slice.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Producer {
    /// Tiles (at least 1).
    pub tiles: usize,
    /// Time to produce all of them, in µs.
    pub time_us: f64,
}

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions {
            model: ModelParams::default(),
            slicing: Slicing::Runtime,
            protocol: None,
            producer: None,
        }
    }
}

impl SimOptions {
    /// The protocol `program` is simulated with.
    pub fn protocol_of(&self, program: &Program) -> Protocol {
        self.protocol.unwrap_or(program.protocol)
    }

    /// These options with `program` simulated under `protocol`.
    pub fn with_protocol(&self, protocol: Protocol) -> SimOptions {
        SimOptions {
            protocol: Some(protocol),
            ..*self
        }
    }
}

/// What a simulation measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SimResult {
    /// The size simulated (the requested size rounded to whole chunks of whole elements).
    pub size_bytes: u64,
    /// Bytes of one chunk.
    pub chunk_bytes: u64,
    /// Passes over the program (slices per chunk).
    pub iterations: usize,
    /// Completion time of the last step, in µs.
    pub time_us: f64,
    /// nccl-tests' algorithm bandwidth, `size / time`, in GB/s.
    pub algbw: f64,
    /// nccl-tests' bus bandwidth, algbw × the collective's factor, in GB/s.
    pub busbw: f64,
    /// Number of transfers (sending steps over all slices).
    pub transfers: usize,
    /// Events processed.
    pub events: usize,
}

/// The runtime's slice in bytes for a protocol with NCCL's default buffers (the default
/// [`ModelParams::slice_bytes`]).
pub fn runtime_slice_bytes(protocol: Protocol) -> u64 {
    ModelParams::default().slice_bytes.get(protocol)
}

/// The element count of the larger buffer that the runtime would use for `size_bytes`:
/// rounded down to a multiple of `nchunks`, at least one element per chunk.
pub fn elements_for(size_bytes: u64, nchunks: usize) -> u64 {
    let n = nchunks.max(1) as u64;
    ((size_bytes / ELEMENT_BYTES) / n).max(1) * n
}

/// Simulates `program` on `topology` at nccl-tests size `size_bytes` (see the module docs
/// for the model). Errors (one line) when the rank counts differ, a send uses a pair of
/// ranks without a link, the size is 0, or the program deadlocks.
pub fn simulate(
    program: &Program,
    topology: &Topology,
    size_bytes: u64,
    options: &SimOptions,
) -> Result<SimResult> {
    let mut results = simulate_sizes(program, topology, &[size_bytes], options)?;
    Ok(results.remove(0))
}

/// [`simulate`] at each of `sizes`: the program is laid out once and the sizes run in
/// parallel (a 1024-rank program has millions of steps; each run only adds its progress).
pub fn simulate_sizes(
    program: &Program,
    topology: &Topology,
    sizes: &[u64],
    options: &SimOptions,
) -> Result<Vec<SimResult>> {
    use rayon::prelude::*;
    check_inputs(program, topology, sizes, options)?;
    let layout = engine::Layout::new(program, topology, options)?;
    sizes
        .par_iter()
        .map(|&size| run_at(&layout, program, size, options))
        .collect()
}

/// What no slicing beats with a producer ([`producer_bound`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ProducerBound {
    /// The launch latency plus the program's longest chain of hop latencies from a step
    /// reading input to the end (µs): the collective's latency term.
    pub latency_us: f64,
    /// No simulation with the producer, at any slicing, ends before this (µs): the launch
    /// latency, the last tile's release (T_producer), then the longest of that chain, one
    /// threadblock's time on its share of one tile's bytes, and the most loaded resource's
    /// time on them (all of that work follows an input read of the last tile).
    pub time_us: f64,
}

/// [`ProducerBound`] of `program` on `topology` at `size_bytes` with `options.producer`;
/// `None` without a producer or where the program's steps wait in a cycle or pair messages
/// across slices (no bound is claimed).
pub fn producer_bound(
    program: &Program,
    topology: &Topology,
    size_bytes: u64,
    options: &SimOptions,
) -> Result<Option<ProducerBound>> {
    check_inputs(program, topology, &[size_bytes], options)?;
    let Some(producer) = options.producer else {
        return Ok(None);
    };
    let layout = engine::Layout::new(program, topology, options)?;
    let Some(chains) = engine::Chains::new(&layout) else {
        return Ok(None);
    };
    let nchunks = program.nchunksperloop.max(1);
    let chunk_elems = elements_for(size_bytes, nchunks) / nchunks as u64;
    let k = producer.tiles.max(1) as u64;
    // The smallest tile of a chunk (tile boundaries are rounded down).
    let tile_bytes = ((chunk_elems / k) * ELEMENT_BYTES) as f64;
    let drain = chains.after_last_tile(&layout, tile_bytes);
    let launch = options.model.launch_us.get(options.protocol_of(program));
    Ok(Some(ProducerBound {
        latency_us: launch + drain.latency_us,
        time_us: launch + producer.time_us + drain.time_us,
    }))
}

/// One-line errors for inputs that cannot be simulated (see [`simulate`]).
fn check_inputs(
    program: &Program,
    topology: &Topology,
    sizes: &[u64],
    options: &SimOptions,
) -> Result<()> {
    if program.ngpus != topology.ranks {
        bail!(
            "program '{}' has {} ranks but topology '{}' has {}",
            program.name,
            program.ngpus,
            topology.name,
            topology.ranks
        );
    }
    if program.gpus.len() != program.ngpus {
        bail!(
            "program '{}' lists {} gpus for ngpus {}",
            program.name,
            program.gpus.len(),
            program.ngpus
        );
    }
    if sizes.contains(&0) {
        bail!("message size must be positive");
    }
    let local = options.model.local_bandwidth;
    if !(local.is_finite() && local > 0.0) {
        bail!("local bandwidth must be positive, got {local}");
    }
    if let Some(l) = topology
        .links
        .iter()
        .find(|l| !(l.bandwidth.is_finite() && l.bandwidth > 0.0))
    {
        bail!(
            "link {}->{} of '{}' has bandwidth {}",
            l.src,
            l.dst,
            topology.name,
            l.bandwidth
        );
    }
    if let Some(s) = topology
        .switches
        .iter()
        .find(|s| !(s.bandwidth.is_finite() && s.bandwidth > 0.0))
    {
        bail!(
            "switch constraint {} of '{}' has bandwidth {}",
            s.name,
            topology.name,
            s.bandwidth
        );
    }
    Ok(())
}

/// The slicing of a run at `size_bytes`: the elements simulated, a chunk's elements and
/// the bytes of each slice of a chunk ([`Slicing::Producer`]: the runtime's, the first of
/// its candidates).
fn slices_at(program: &Program, size_bytes: u64, options: &SimOptions) -> (u64, u64, Vec<f64>) {
    let nchunks = program.nchunksperloop.max(1);
    let elements = elements_for(size_bytes, nchunks);
    let chunk_elems = elements / nchunks as u64;
    let runtime_elems = (options.model.slice_bytes.get(options.protocol_of(program))
        / ELEMENT_BYTES)
        .max(1)
        .max(chunk_elems.div_ceil(MAX_SLICES));
    let even = |slice_elems: u64| -> Vec<f64> {
        let slice_elems = slice_elems.max(chunk_elems.div_ceil(MAX_SLICES));
        let iterations = chunk_elems.div_ceil(slice_elems).max(1);
        (0..iterations)
            .map(|i| (chunk_elems - i * slice_elems).min(slice_elems) as f64 * ELEMENT_BYTES as f64)
            .collect()
    };
    let slices = match options.slicing {
        Slicing::Runtime | Slicing::Producer => even(runtime_elems),
        Slicing::WholeChunks => even(chunk_elems),
        Slicing::Bytes(b) => even((b / ELEMENT_BYTES).max(1)),
    };
    (elements, chunk_elems, slices)
}

/// nccl-tests' busbw (GB/s) of `program` moving `size` bytes in `time_us`.
fn busbw_of(program: &Program, size: u64, time_us: f64) -> f64 {
    let algbw = if time_us > 0.0 {
        size as f64 / (time_us * 1e3)
    } else {
        f64::INFINITY
    };
    algbw * program.collective.busbw_factor(program.ngpus)
}

/// One run of the event loop at `size_bytes`.
fn run_at(
    layout: &engine::Layout,
    program: &Program,
    size_bytes: u64,
    options: &SimOptions,
) -> Result<SimResult> {
    let (elements, chunk_elems, slices) = slices_at(program, size_bytes, options);
    let (slices, run) = match (options.slicing, options.producer.as_ref()) {
        (Slicing::Producer, Some(p)) => producer::fastest(layout, chunk_elems, p, slices)?,
        (_, producer) => {
            let run = engine::run(layout, &slices, producer)?;
            (slices, run)
        }
    };
    let size = elements * ELEMENT_BYTES;
    let time_us = run.time_us + options.model.launch_us.get(options.protocol_of(program));
    let algbw = if time_us > 0.0 {
        size as f64 / (time_us * 1e3)
    } else {
        f64::INFINITY
    };
    Ok(SimResult {
        size_bytes: size,
        chunk_bytes: chunk_elems * ELEMENT_BYTES,
        iterations: slices.len(),
        time_us,
        algbw,
        busbw: algbw * program.collective.busbw_factor(program.ngpus),
        transfers: run.transfers,
        events: run.events,
    })
}

/// A lower bound on a simulation's time at one size, and so an upper bound on its busbw
/// (see [`simulate_sizes_unless`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bound {
    /// The size that would be simulated (bytes, as [`SimResult::size_bytes`]).
    pub size_bytes: u64,
    /// No simulation of the program at this size takes less (µs).
    pub time_us: f64,
    /// No simulation of the program at this size reaches more (GB/s).
    pub busbw: f64,
}

/// The [`Bound`] of `program` at each of `sizes`, without simulating it (see
/// [`simulate_sizes_unless`]); `None` where no bound is claimed (a producer's waits, or a
/// program whose messages pair across slices or whose steps wait in a cycle).
pub fn bounds_at(
    program: &Program,
    topology: &Topology,
    sizes: &[u64],
    options: &SimOptions,
) -> Result<Vec<Option<Bound>>> {
    check_inputs(program, topology, sizes, options)?;
    let layout = engine::Layout::new(program, topology, options)?;
    Ok(bounds_of(&layout, program, sizes, options))
}

/// [`bounds_at`] on a program already laid out.
fn bounds_of(
    layout: &engine::Layout,
    program: &Program,
    sizes: &[u64],
    options: &SimOptions,
) -> Vec<Option<Bound>> {
    // A producer's waits are not in the bound's model.
    let chains = engine::Chains::new(layout).filter(|_| options.producer.is_none());
    let launch = options.model.launch_us.get(options.protocol_of(program));
    (sizes.iter())
        .map(|&size| {
            let chains = chains.as_ref()?;
            let (elements, _, slices) = slices_at(program, size, options);
            let time_us = chains.time_us(layout, &slices) + launch;
            let size_bytes = elements * ELEMENT_BYTES;
            Some(Bound {
                size_bytes,
                time_us,
                busbw: busbw_of(program, size_bytes, time_us),
            })
        })
        .collect()
}

/// [`simulate_sizes`], but a size where `beaten` says the program's [`Bound`] there cannot
/// matter is not simulated (`None`). The bound is the launch latency plus the longer of the
/// longest chain of steps (threadblock order, dependencies, each message sent before it is
/// received; a transfer at its connection's full rate plus its hop latency) and the most
/// loaded resource at its capacity; the event loop only adds sharing and waiting for room.
pub fn simulate_sizes_unless(
    program: &Program,
    topology: &Topology,
    sizes: &[u64],
    options: &SimOptions,
    beaten: impl Fn(usize, &Bound) -> bool + Sync,
) -> Result<Vec<Option<SimResult>>> {
    simulate_sizes_unless_bounded(program, topology, sizes, options, None, beaten)
}

/// [`simulate_sizes_unless`] with the bounds at `sizes` already known (`bounds`, what
/// [`bounds_at`] gave for the same program, sizes and options), else computed.
pub fn simulate_sizes_unless_bounded(
    program: &Program,
    topology: &Topology,
    sizes: &[u64],
    options: &SimOptions,
    bounds: Option<&[Option<Bound>]>,
    beaten: impl Fn(usize, &Bound) -> bool + Sync,
) -> Result<Vec<Option<SimResult>>> {
    use rayon::prelude::*;
    check_inputs(program, topology, sizes, options)?;
    let layout = engine::Layout::new(program, topology, options)?;
    let computed;
    let bounds = match bounds {
        Some(b) if b.len() == sizes.len() => b,
        _ => {
            computed = bounds_of(&layout, program, sizes, options);
            &computed[..]
        }
    };
    let skipped: Vec<bool> = (bounds.iter().enumerate())
        .map(|(i, bound)| bound.as_ref().is_some_and(|b| beaten(i, b)))
        .collect();
    (sizes.par_iter().zip(skipped))
        .map(|(&size, skip)| {
            (!skip)
                .then(|| run_at(&layout, program, size, options))
                .transpose()
        })
        .collect()
}
