//! How a [`Schedule`] is issued to the GPU: the order of event records, stream waits, copies and
//! kernel launches, and what each call carries (addresses, kernel, grid, arguments). Pure
//! logic, always compiled: every call goes through the [`Driver`] trait, implemented by the
//! real driver behind the `cuda` feature and by recording drivers in the tests.
//!
//! One issue of the schedule: the root stream records the fork event and every threadblock
//! stream waits for it; each node then waits for the events of its cross-stream dependencies
//! ([`Schedule::waits`]), issues its copies or its kernel, and records its own event if a
//! later node waits for it (a compute node launches the program's compute kernel); finally every stream records its join event and the root stream
//! waits for all of them. Captured between [`Driver::begin_capture`] and
//! [`Driver::end_capture`] on the root stream, this is the CUDA graph that is replayed.

use super::compute::compute_kernel_name;
use super::data::Dtype;
use super::schedule::{piece, Action, Loc, Schedule};
use super::{kernel_names, kernel_shape, KERNEL_ARGS, KERNEL_THREADS};
use anyhow::Result;

/// A stream of one issue: the root stream, or the stream of a threadblock (index into
/// [`Schedule::streams`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StreamId {
    /// The stream that forks, joins and is captured.
    Root,
    /// The stream of threadblock `i` of the schedule.
    Tb(usize),
}

/// An event of one issue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventId {
    /// Recorded on the root stream first; every threadblock stream waits for it.
    Fork,
    /// Recorded after node `i`, for the nodes of other streams that depend on it.
    Node(usize),
    /// Recorded last on threadblock stream `i`; the root stream waits for it.
    Join(usize),
}

/// A device-to-device copy of `bytes` bytes (source and destination may be on different
/// GPUs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyCall {
    /// The schedule node it implements.
    pub node: usize,
    /// Destination address.
    pub dst: u64,
    /// Source address.
    pub src: u64,
    /// Bytes.
    pub bytes: usize,
}

/// A launch of one reduction kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelCall {
    /// The schedule node it implements.
    pub node: usize,
    /// The kernel's entry point (one of [`kernel_names`]).
    pub kernel: String,
    /// Grid: (blocks, rows, 1).
    pub grid: (u32, u32, u32),
    /// Block: ([`KERNEL_THREADS`], 1, 1).
    pub block: (u32, u32, u32),
    /// The kernel's parameters `(out, a, b, n, stride)`, each passed as 64 bits.
    pub args: [u64; KERNEL_ARGS],
}

/// A launch of the program's compute kernel ([`super::compute::compute_source`]) on one run
/// of elements.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ComputeCall {
    /// The schedule node it implements.
    pub node: usize,
    /// The kernel's entry point ([`compute_kernel_name`]).
    pub kernel: String,
    /// Grid: (blocks, 1, 1); the kernel strides over the run.
    pub grid: (u32, u32, u32),
    /// Block: ([`KERNEL_THREADS`], 1, 1).
    pub block: (u32, u32, u32),
    /// The kernel's parameters `(x, state..., n, index0)`, each passed as 64 bits:
    /// addresses of the run and of each state buffer at its elements, the run's length and
    /// the output index of its first element.
    pub args: Vec<u64>,
}

/// The driver calls that issue a schedule. Every method returns the driver's error.
pub trait Driver {
    /// Starts capturing the root stream into a graph.
    fn begin_capture(&mut self) -> Result<()>;
    /// Ends the capture begun by [`Driver::begin_capture`].
    fn end_capture(&mut self) -> Result<()>;
    /// Records `event` on `stream`.
    fn record(&mut self, event: EventId, stream: StreamId) -> Result<()>;
    /// Makes `stream` wait for the last record of `event`.
    fn wait(&mut self, stream: StreamId, event: EventId) -> Result<()>;
    /// Issues a copy on threadblock stream `stream`.
    fn copy(&mut self, stream: usize, call: &CopyCall) -> Result<()>;
    /// Launches a kernel on threadblock stream `stream`.
    fn launch(&mut self, stream: usize, call: &KernelCall) -> Result<()>;
    /// Launches the program's compute kernel on threadblock stream `stream`.
    fn compute(&mut self, stream: usize, call: &ComputeCall) -> Result<()>;
}

/// A schedule placed in memory: everything needed to issue it.
#[derive(Debug, Clone)]
pub struct Launcher {
    /// The schedule.
    pub sched: Schedule,
    /// Element type.
    pub dtype: Dtype,
    /// Elements per chunk.
    pub chunk: usize,
    /// Base address of every space of every rank (`[rank][Space::index()]`).
    pub bases: Vec<[u64; 4]>,
    /// Per node, the nodes whose events it waits for ([`Schedule::waits`]).
    pub waits: Vec<Vec<usize>>,
    /// Per node, whether it records an event (some node waits for it).
    pub has_event: Vec<bool>,
    /// Per rank, the base address of each state buffer of the program's compute (each
    /// holding the output buffer's chunks); empty without a compute.
    pub state: Vec<Vec<u64>>,
}

impl Launcher {
    /// Places `sched` at `bases` (one address per space of every rank, each holding
    /// `sched.space_chunks` chunks of `chunk` elements of `dtype`).
    pub fn new(sched: Schedule, dtype: Dtype, chunk: usize, bases: Vec<[u64; 4]>) -> Launcher {
        let waits = sched.waits();
        let mut has_event = vec![false; sched.nodes.len()];
        for w in &waits {
            for &d in w {
                has_event[d] = true;
            }
        }
        Launcher {
            sched,
            dtype,
            chunk,
            bases,
            waits,
            has_event,
            state: Vec::new(),
        }
    }

    /// The launcher with the compute's state buffers at `state` (`[rank][buffer]`).
    pub fn with_state(mut self, state: Vec<Vec<u64>>) -> Launcher {
        self.state = state;
        self
    }

    /// Address of element `elem` of the `k`-th chunk from `l`.
    pub fn addr(&self, l: Loc, k: usize, elem: usize) -> u64 {
        let off = ((l.chunk + k) * self.chunk + elem) * self.dtype.size();
        self.bases[l.rank][l.space.index()] + off as u64
    }

    /// Issues the whole schedule once (see the module documentation).
    pub fn issue(&self, d: &mut impl Driver) -> Result<()> {
        d.record(EventId::Fork, StreamId::Root)?;
        for s in 0..self.sched.streams.len() {
            d.wait(StreamId::Tb(s), EventId::Fork)?;
        }
        let slices = self.sched.slices;
        for (v, n) in self.sched.nodes.iter().enumerate() {
            for &dep in &self.waits[v] {
                d.wait(StreamId::Tb(n.stream), EventId::Node(dep))?;
            }
            let (lo, hi) = piece(self.chunk, slices, n.pass);
            // Rows: with one pass the chunks of a step are one contiguous run.
            let (rows, n_row) = match n.action {
                Action::Copy { count, .. }
                | Action::Reduce { count, .. }
                | Action::Compute { count, .. } => {
                    if slices == 1 {
                        (1, count * self.chunk)
                    } else {
                        (count, hi - lo)
                    }
                }
            };
            if n_row > 0 {
                match n.action {
                    Action::Copy { src, dst, .. } => {
                        for k in 0..rows {
                            let call = CopyCall {
                                node: v,
                                dst: self.addr(dst, k, lo),
                                src: self.addr(src, k, lo),
                                bytes: n_row * self.dtype.size(),
                            };
                            // Nothing to do where source and destination are the same memory.
                            if call.src != call.dst {
                                d.copy(n.stream, &call)?;
                            }
                        }
                    }
                    Action::Reduce { out, a, b, .. } => {
                        d.launch(n.stream, &self.reduce(v, [out, a, b], rows, lo, n_row))?;
                    }
                    Action::Compute { at, output, .. } => {
                        for k in 0..rows {
                            d.compute(n.stream, &self.compute(v, at, output + k, k, lo, n_row))?;
                        }
                    }
                }
            }
            if self.has_event[v] {
                d.record(EventId::Node(v), StreamId::Tb(n.stream))?;
            }
        }
        for s in 0..self.sched.streams.len() {
            d.record(EventId::Join(s), StreamId::Tb(s))?;
            d.wait(StreamId::Root, EventId::Join(s))?;
        }
        Ok(())
    }

    /// Captures one issue into a graph on the root stream; the capture is ended even when
    /// issuing fails.
    pub fn capture(&self, d: &mut impl Driver) -> Result<()> {
        d.begin_capture()?;
        let issued = self.issue(d);
        let ended = d.end_capture();
        issued?;
        ended
    }

    /// The compute launch of node `node` on row `k` from `at`: `n` elements from element
    /// `lo` of output chunk `output`, with the state buffers' elements at the same indices.
    fn compute(
        &self,
        node: usize,
        at: Loc,
        output: usize,
        k: usize,
        lo: usize,
        n: usize,
    ) -> ComputeCall {
        let index0 = (output * self.chunk + lo) as u64;
        let es = self.dtype.size() as u64;
        let state = self.state.get(at.rank).map_or(&[][..], Vec::as_slice);
        let mut args = vec![self.addr(at, k, lo)];
        args.extend(state.iter().map(|base| base + index0 * es));
        args.extend([n as u64, index0]);
        ComputeCall {
            node,
            kernel: compute_kernel_name(self.dtype),
            grid: (
                (n as u64).div_ceil(KERNEL_THREADS as u64).clamp(1, 1024) as u32,
                1,
                1,
            ),
            block: (KERNEL_THREADS, 1, 1),
            args,
        }
    }

    /// The kernel launch of node `node`, `out ← a + b` over `rows` rows of `n_row` elements
    /// from element `lo` of each chunk.
    fn reduce(
        &self,
        node: usize,
        [out, a, b]: [Loc; 3],
        rows: usize,
        lo: usize,
        n_row: usize,
    ) -> KernelCall {
        let ptrs = [
            self.addr(out, 0, lo),
            self.addr(a, 0, lo),
            self.addr(b, 0, lo),
        ];
        let (vec, units, stride) = kernel_shape(self.dtype, ptrs, n_row, self.chunk, rows);
        let (vname, sname) = kernel_names(self.dtype);
        let blocks = units.div_ceil(KERNEL_THREADS as u64).clamp(1, 1024) as u32;
        KernelCall {
            node,
            kernel: if vec { vname } else { sname },
            grid: (blocks, rows as u32, 1),
            block: (KERNEL_THREADS, 1, 1),
            args: [ptrs[0], ptrs[1], ptrs[2], units, stride],
        }
    }
}
