//! The CPU executor: runs a [`Program`] on real data with one OS thread per (rank,
//! threadblock), a bounded FIFO per connection (sender, receiver, channel) and per-threadblock
//! progress counters for dependencies. Like the MSCCL kernel, every threadblock replays its
//! whole program once per slice of each chunk (so messages stay small and dependencies are
//! re-synchronised per slice). Ranks' buffers are shared between threads without locks; the
//! verifier, which always runs first, guarantees that the program is race-free.
//!
//! Results are compared with a reference computed directly from the collective's semantics
//! ([`crate::semantics`]) using random small-integer inputs (exact in floating point under any
//! summation order) and NaN-poisoned outputs.

mod element;
mod memory;
mod plan;
mod sweep;
mod sync;

pub use element::{DataType, Element, ReduceOp};
pub use memory::initial_state;
pub use sweep::{
    format_table, parse_dtype, parse_op, parse_size, parse_sizes, rows_by_size, sweep, sweep_modes,
    RunPoint, SweepOptions, SweepRow, MAX_SIZE,
};

use crate::compute::{Kernel, Real};
use crate::ir::Program;
use crate::semantics::Semantics;
use crate::verify::{chunk_slots, verify_with, VerifyOptions, DEFAULT_FIFO_DEPTH};
use anyhow::{bail, Context, Result};
use memory::Memory;
use plan::Plan;
use serde::{Deserialize, Serialize};
use std::sync::Barrier;
use std::time::Instant;
use sync::{Fifo, Progress};

/// Most memory the buffers of one run may take, in bytes (README "Limits"), checked before
/// they are allocated.
pub const MAX_RUN_BYTES: u64 = 4 << 30;

/// Options of one executor run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunOptions {
    /// Element type.
    pub dtype: DataType,
    /// Reduction operator.
    pub op: ReduceOp,
    /// Run with aliased send/receive buffers (the program must declare `inplace`).
    pub inplace: bool,
    /// Elements of the larger user buffer (count × size multiplier, the runtime's E); must
    /// be a positive multiple of `nchunksperloop`.
    pub elements: usize,
    /// Untimed runs before the timed ones (the first run is always checked).
    pub warmup: usize,
    /// Timed runs (at least 1).
    pub iters: usize,
    /// Seed of the random inputs.
    pub seed: u64,
    /// Bytes of each chunk processed per pass over the program.
    pub slice_bytes: usize,
    /// Messages a connection holds (the verifier runs with the same depth).
    pub fifo_depth: usize,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            dtype: DataType::F32,
            op: ReduceOp::Sum,
            inplace: false,
            elements: 0,
            warmup: 0,
            iters: 1,
            seed: 1,
            slice_bytes: 256 << 10,
            fifo_depth: DEFAULT_FIFO_DEPTH,
        }
    }
}

impl RunOptions {
    /// Options for a message of about `bytes` bytes (nccl-tests' size): the element count is
    /// rounded down to a multiple of `nchunksperloop` (at least one element per chunk).
    pub fn for_bytes(p: &Program, bytes: u64, dtype: DataType) -> RunOptions {
        RunOptions {
            dtype,
            elements: elements_for(p, bytes, dtype.size()),
            ..RunOptions::default()
        }
    }
}

/// Element count of the larger buffer for a message size, with elements of `element_size`
/// bytes, rounded down to whole chunks (at least one element per chunk).
pub fn elements_for(p: &Program, bytes: u64, element_size: usize) -> usize {
    let n = p.nchunksperloop.max(1);
    let e = (bytes as usize) / element_size;
    (e / n).max(1) * n
}

/// Outcome of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunReport {
    /// Elements of the larger buffer.
    pub elements: usize,
    /// Bytes of the larger buffer (nccl-tests' size).
    pub bytes: u64,
    /// Element type.
    pub dtype: DataType,
    /// Reduction operator.
    pub op: ReduceOp,
    /// Whether buffers were aliased.
    pub inplace: bool,
    /// Average wall time of one timed run, in microseconds.
    pub time_us: f64,
    /// Elements of the checked run that differ from the reference.
    pub wrong: usize,
}

/// Verifies the program (with the run's FIFO depth) and runs it.
pub fn run(p: &Program, opts: &RunOptions) -> Result<RunReport> {
    verify_with(
        p,
        &VerifyOptions {
            fifo_depth: opts.fifo_depth.max(1),
        },
    )
    .context("the program does not verify")?;
    run_verified(p, opts)
}

/// [`run`], also returning every rank's output buffer (as f64) after the checked run: what
/// compares two schedules of one computation (a fused one and the plain one).
pub fn run_with_outputs(p: &Program, opts: &RunOptions) -> Result<(RunReport, Vec<Vec<f64>>)> {
    verify_with(
        p,
        &VerifyOptions {
            fifo_depth: opts.fifo_depth.max(1),
        },
    )
    .context("the program does not verify")?;
    let mut outputs = Vec::new();
    let report = run_checked(p, opts, Some(&mut outputs))?;
    Ok((report, outputs))
}

/// Runs a program the caller has verified with `opts.fifo_depth`.
fn run_verified(p: &Program, opts: &RunOptions) -> Result<RunReport> {
    run_checked(p, opts, None)
}

/// [`run_verified`], keeping the outputs of the checked run where `outputs` is given.
fn run_checked(
    p: &Program,
    opts: &RunOptions,
    outputs: Option<&mut Vec<Vec<f64>>>,
) -> Result<RunReport> {
    if opts.inplace && !p.inplace {
        bail!("program {} is not declared valid in place", p.name);
    }
    if !opts.inplace && !p.outofplace {
        bail!("program {} is not declared valid out of place", p.name);
    }
    if opts.elements == 0 || !opts.elements.is_multiple_of(p.nchunksperloop) {
        bail!(
            "elements ({}) must be a positive multiple of nchunksperloop ({})",
            opts.elements,
            p.nchunksperloop
        );
    }
    let sem = Semantics::of(p, opts.inplace).map_err(anyhow::Error::msg)?;
    let kernel = p.compute.as_ref().map(|c| c.kernel()).transpose()?;
    // Every region, plus the logical inputs kept for the reference and the state buffers.
    let inputs =
        (p.ngpus as u64).saturating_mul(sem.extent(crate::ir::Buffer::Input).unwrap_or(0) as u64);
    let state = (p.ngpus as u64)
        .saturating_mul(sem.extent(crate::ir::Buffer::Output).unwrap_or(0) as u64)
        .saturating_mul(kernel.as_ref().map_or(0, |k| k.buffers.len()) as u64);
    let bytes = chunk_slots(p, &sem)
        .saturating_add(inputs)
        .saturating_add(state)
        .saturating_mul((opts.elements / p.nchunksperloop) as u64)
        .saturating_mul(opts.dtype.size() as u64);
    if bytes > MAX_RUN_BYTES {
        bail!(
            "a message of {} bytes needs {} MiB of buffers on {} ranks (limit {} MiB): use a smaller size",
            opts.elements.saturating_mul(opts.dtype.size()),
            bytes >> 20,
            p.ngpus,
            MAX_RUN_BYTES >> 20
        );
    }
    match opts.dtype {
        DataType::F32 => run_typed::<f32>(p, sem, opts, kernel, outputs),
        DataType::F64 => run_typed::<f64>(p, sem, opts, kernel, outputs),
        DataType::F16 => run_typed::<half::f16>(p, sem, opts, kernel, outputs),
        DataType::BF16 => run_typed::<half::bf16>(p, sem, opts, kernel, outputs),
    }
}

/// Everything the worker threads share.
struct Shared<'a, T> {
    plan: &'a Plan,
    mem: &'a Memory<T>,
    fifos: Vec<Fifo<T>>,
    progress: Vec<Progress>,
    barrier: Barrier,
    op: ReduceOp,
    chunk: usize,
    slice: usize,
    runs: usize,
}

fn run_typed<T: Element>(
    p: &Program,
    sem: Semantics,
    opts: &RunOptions,
    kernel: Option<Kernel>,
    mut outputs: Option<&mut Vec<Vec<f64>>>,
) -> Result<RunReport> {
    let chunk = opts.elements / p.nchunksperloop;
    let plan = Plan::new(p, &sem)?;
    let mem = Memory::<T>::new(p, &sem, chunk, opts.seed, kernel);
    let iters = opts.iters.max(1);
    let runs = opts.warmup + iters;
    let shared = Shared {
        plan: &plan,
        mem: &mem,
        fifos: (0..plan.connections)
            .map(|_| Fifo::new(opts.fifo_depth))
            .collect(),
        progress: (0..plan.tbs.len()).map(|_| Progress::default()).collect(),
        barrier: Barrier::new(plan.active().count() + 1),
        op: opts.op,
        chunk,
        slice: (opts.slice_bytes / std::mem::size_of::<T>()).clamp(1, chunk),
        runs,
    };
    let mut total = 0.0;
    let mut wrong = 0;
    std::thread::scope(|s| {
        for tb in plan.active() {
            let shared = &shared;
            s.spawn(move || worker(shared, tb));
        }
        for run in 0..runs {
            shared.barrier.wait();
            let start = Instant::now();
            shared.barrier.wait();
            let dt = start.elapsed().as_secs_f64() * 1e6;
            if run == 0 {
                wrong = shared.mem.count_wrong(&sem, opts.op);
                if let Some(out) = outputs.as_deref_mut() {
                    *out = (0..p.ngpus).map(|r| shared.mem.output(&sem, r)).collect();
                }
            }
            if run >= opts.warmup {
                total += dt;
            }
        }
    });
    Ok(RunReport {
        elements: opts.elements,
        bytes: (opts.elements * std::mem::size_of::<T>()) as u64,
        dtype: T::TYPE,
        op: opts.op,
        inplace: opts.inplace,
        time_us: total / iters as f64,
        wrong,
    })
}

/// The loop of one threadblock's thread: for every run, every slice, every step.
fn worker<T: Element>(sh: &Shared<'_, T>, tbi: usize) {
    let tb = &sh.plan.tbs[tbi];
    let slices = sh.chunk.div_ceil(sh.slice);
    for run in 0..sh.runs {
        sh.barrier.wait();
        for slice in 0..slices {
            let offset = slice * sh.slice;
            let nelem = sh.slice.min(sh.chunk - offset);
            let epoch = (run * slices + slice) as u64;
            for (j, step) in tb.steps.iter().enumerate() {
                for d in &step.deps {
                    sh.progress[d.tb].wait_for(epoch * d.nsteps + d.step + 1);
                }
                execute(sh, tb, step, offset, nelem);
                sh.progress[tbi].publish(epoch * tb.steps.len() as u64 + j as u64 + 1);
            }
        }
        sh.barrier.wait();
    }
}

/// Performs one step on one slice: elements `[offset, offset + nelem)` of each of its chunks.
fn execute<T: Element>(
    sh: &Shared<'_, T>,
    tb: &plan::TbPlan,
    st: &plan::StepPlan,
    offset: usize,
    nelem: usize,
) {
    use crate::ir::Op;
    let at = Slice {
        sh,
        tb,
        offset,
        nelem,
    };
    match st.op {
        Op::Nop => {}
        Op::Send => at.send(st),
        Op::Recv | Op::RecvCopySend => at.receive(st),
        Op::RecvReduceSend | Op::RecvReduceCopySend => at.receive_reduce_send(st),
        Op::RecvReduceCopy => at.receive_reduce_copy(st),
        Op::Copy => at.copy(st),
        Op::Reduce => at.reduce(st),
        Op::Compute => at.compute(st),
    }
}

/// One threadblock's view of one slice: elements `[offset, offset + nelem)` of every chunk.
struct Slice<'s, 'a, T> {
    sh: &'s Shared<'a, T>,
    tb: &'s plan::TbPlan,
    offset: usize,
    nelem: usize,
}

impl<T: Element> Slice<'_, '_, T> {
    /// The slice of chunk `loc + k` on this threadblock's rank.
    fn piece(&self, loc: plan::Loc, k: usize) -> memory::Piece<T> {
        let start = (loc.chunk + k) * self.sh.chunk + self.offset;
        self.sh.mem.piece(self.tb.rank, loc, start, self.nelem)
    }

    /// The FIFO this threadblock sends on.
    fn outgoing(&self) -> &Fifo<T> {
        &self.sh.fifos[self.tb.send.expect("planned")]
    }

    /// The FIFO this threadblock receives from.
    fn incoming(&self) -> &Fifo<T> {
        &self.sh.fifos[self.tb.recv.expect("planned")]
    }

    /// `s`: the source chunks go out as one message.
    fn send(&self, st: &plan::StepPlan) {
        let mut buf = self.outgoing().buffer(st.count * self.nelem);
        for k in 0..st.count {
            // SAFETY: the verifier proved no other threadblock writes this slot now.
            buf.extend_from_slice(unsafe { self.piece(st.src(), k).into_slice() });
        }
        self.outgoing().push(buf);
    }

    /// `r` and `rcs`: a message lands in the destination chunks (and goes on for `rcs`).
    fn receive(&self, st: &plan::StepPlan) {
        let nelem = self.nelem;
        let buf = self.incoming().pop();
        for k in 0..st.count {
            // SAFETY: as above, this threadblock is the only one touching the slot.
            unsafe { self.piece(st.dst(), k).into_mut_slice() }
                .copy_from_slice(&buf[k * nelem..(k + 1) * nelem]);
        }
        if st.op == crate::ir::Op::Recv {
            self.incoming().recycle(buf);
        } else {
            self.outgoing().push(buf);
        }
    }

    /// `rrs` and `rrcs`: a message reduced with the source chunks goes on (and lands in the
    /// destination chunks for `rrcs`).
    fn receive_reduce_send(&self, st: &plan::StepPlan) {
        let nelem = self.nelem;
        let mut buf = self.incoming().pop();
        for k in 0..st.count {
            let x = &mut buf[k * nelem..(k + 1) * nelem];
            // SAFETY: race-free by verification.
            element::reduce_into(self.sh.op, x, unsafe {
                self.piece(st.src(), k).into_slice()
            });
            if st.op == crate::ir::Op::RecvReduceCopySend {
                // SAFETY: race-free by verification; dst may equal src exactly, which
                // is fine because src was read above.
                unsafe { self.piece(st.dst(), k).into_mut_slice() }.copy_from_slice(x);
            }
        }
        self.outgoing().push(buf);
    }

    /// `rrc`: a message reduced with the source chunks lands in the destination chunks.
    fn receive_reduce_copy(&self, st: &plan::StepPlan) {
        let nelem = self.nelem;
        let buf = self.incoming().pop();
        for k in 0..st.count {
            let x = &buf[k * nelem..(k + 1) * nelem];
            let (src, dst) = (self.piece(st.src(), k), self.piece(st.dst(), k));
            combine_pieces(self.sh.op, dst, x, src);
        }
        self.incoming().recycle(buf);
    }

    /// `cpy`: the source chunks are copied to the destination chunks.
    fn copy(&self, st: &plan::StepPlan) {
        for k in 0..st.count {
            let (src, dst) = (self.piece(st.src(), k), self.piece(st.dst(), k));
            // SAFETY: race-free by verification; memmove tolerates src == dst.
            unsafe { std::ptr::copy(src.ptr, dst.ptr, self.nelem) };
        }
    }

    /// `re`: the source chunks are reduced into the destination chunks.
    fn reduce(&self, st: &plan::StepPlan) {
        for k in 0..st.count {
            let (src, dst) = (self.piece(st.src(), k), self.piece(st.dst(), k));
            if src.ptr == dst.ptr {
                // SAFETY: race-free by verification; x ⊕ x needs a copy of x.
                let snapshot: Vec<T> = unsafe { src.into_slice() }.to_vec();
                element::reduce_into(self.sh.op, unsafe { dst.into_mut_slice() }, &snapshot);
            } else {
                // SAFETY: race-free by verification; the verifier rejects partial overlap.
                element::reduce_into(self.sh.op, unsafe { dst.into_mut_slice() }, unsafe {
                    src.into_slice()
                });
            }
        }
    }
}

impl<T: Element> Slice<'_, '_, T> {
    /// `compute`: the program's kernel on the destination chunks and the state buffers'
    /// elements at the same indices.
    fn compute(&self, st: &plan::StepPlan) {
        let kernel = self
            .sh
            .mem
            .kernel()
            .expect("verified: the program has a compute");
        let mut state = vec![T::default(); kernel.buffers.len()];
        let mut scratch = vec![T::Acc::of(0.0); kernel.buffers.len()];
        for k in 0..st.count {
            let start = (st.dst_chunk + k) * self.sh.chunk + self.offset;
            // SAFETY: race-free by verification, and a chunk is computed once, by one step,
            // which alone touches the state at its indices.
            let dst = unsafe { self.piece(st.dst(), k).into_mut_slice() };
            let mut views: Vec<&mut [T]> = (0..state.len())
                .map(|b| unsafe {
                    self.sh
                        .mem
                        .state_piece(self.tb.rank, b, start, self.nelem)
                        .into_mut_slice()
                })
                .collect();
            for (i, x) in dst.iter_mut().enumerate() {
                for (s, v) in state.iter_mut().zip(&views) {
                    *s = v[i];
                }
                *x =
                    element::apply_kernel(kernel, *x, &mut state, &mut scratch, (start + i) as u64);
                for (s, v) in state.iter().zip(views.iter_mut()) {
                    v[i] = *s;
                }
            }
        }
    }
}

/// `dst = x ⊕ src`, where `src` and `dst` are equal or disjoint.
fn combine_pieces<T: Element>(op: ReduceOp, dst: memory::Piece<T>, x: &[T], src: memory::Piece<T>) {
    if src.ptr == dst.ptr {
        // SAFETY: race-free by verification; one mutable view only.
        element::reduce_into(op, unsafe { dst.into_mut_slice() }, x);
    } else {
        // SAFETY: race-free by verification; the verifier rejects partial overlap.
        element::reduce_to(op, unsafe { dst.into_mut_slice() }, x, unsafe {
            src.into_slice()
        });
    }
}
