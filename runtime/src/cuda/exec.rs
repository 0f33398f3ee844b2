//! The driver-facing part of the CUDA executor (cudarc, libcuda and NVRTC loaded at run
//! time). See the module documentation of [`crate::cuda`].

use super::compute::{compute_kernel_name, compute_source};
use super::data::{input_chunk, wrong_in_output_chunk, Dtype};
use super::launch::{ComputeCall, CopyCall, Driver, EventId, KernelCall, Launcher, StreamId};
use super::nvrtc::{self, NvrtcError};
use super::schedule::Schedule;
use super::{kernel_names, CudaOptions, KERNEL_ARGS};
use crate::compute::Kernel;
use crate::cpu::{elements_for, initial_state, sweep_modes, RunPoint, SweepRow};
use crate::ir::{Buffer, Program};
use crate::semantics::Semantics;
use crate::verify::verify;
use anyhow::{anyhow, bail, Context, Result};
use cudarc::driver::sys::{self, CUdeviceptr};
use cudarc::driver::{result, CudaContext, CudaEvent, CudaStream};
use rayon::prelude::*;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Arc, LazyLock, Mutex};

/// What [`available`] found.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceInfo {
    /// Number of CUDA devices.
    pub count: usize,
    /// Name of device 0.
    pub name: String,
    /// Compute capability of device 0.
    pub capability: (i32, i32),
}

/// Checks for a CUDA driver and at least one device without panicking; the error is one
/// line meant for the user.
pub fn available() -> Result<DeviceInfo> {
    // SAFETY: only tries to open the shared library.
    if !unsafe { sys::is_culib_present() } {
        bail!(
            "no CUDA driver found (libcuda.so could not be loaded): this machine has no usable GPU"
        );
    }
    result::init().map_err(|e| anyhow!("CUDA driver failed to initialise: {e}"))?;
    let count =
        result::device::get_count().map_err(|e| anyhow!("cannot count CUDA devices: {e}"))?;
    if count <= 0 {
        bail!("the CUDA driver reports no GPU");
    }
    let ctx = CudaContext::new(0).map_err(|e| anyhow!("cannot open GPU 0: {e}"))?;
    Ok(DeviceInfo {
        count: count as usize,
        name: ctx.name().unwrap_or_else(|_| "?".into()),
        capability: ctx.compute_capability().unwrap_or((0, 0)),
    })
}

fn drv<T>(r: std::result::Result<T, result::DriverError>, what: &str) -> Result<T> {
    r.map_err(|e| anyhow!("{what}: {e}"))
}

/// The GPUs in use: one context per device, the device of every rank, kernels per device.
struct Devices {
    ctxs: Vec<Arc<CudaContext>>,
    rank_dev: Vec<usize>,
    kernels: Vec<HashMap<String, sys::CUfunction>>,
    _modules: Vec<Arc<cudarc::driver::CudaModule>>,
}

/// PTX (or why not) per compute capability.
type PtxCache = HashMap<(i32, i32), Result<String, NvrtcError>>;

/// PTX of the reduction kernels for a compute capability, compiled once per capability.
fn ptx_for(capability: (i32, i32)) -> Result<cudarc::nvrtc::Ptx> {
    static PTX: LazyLock<Mutex<PtxCache>> = LazyLock::new(Default::default);
    let mut cache = PTX.lock().unwrap_or_else(|e| e.into_inner());
    let r = cache
        .entry(capability)
        .or_insert_with(|| nvrtc::compile(capability));
    match r {
        Ok(src) => Ok(cudarc::nvrtc::Ptx::from_src(src.clone())),
        Err(e) => Err(anyhow!("{e}")),
    }
}

impl Devices {
    fn new(ngpus: usize, single_gpu: bool) -> Result<Devices> {
        let info = available()?;
        let ndev = if single_gpu || info.count < ngpus {
            1
        } else {
            ngpus
        };
        let ctxs: Vec<Arc<CudaContext>> = (0..ndev)
            .map(|d| drv(CudaContext::new(d), "cannot open a GPU"))
            .collect::<Result<_>>()?;
        for c in &ctxs {
            // SAFETY: we order all work ourselves with explicit events.
            unsafe { c.disable_event_tracking() };
        }
        // Peer access between every pair that supports it.
        for (i, a) in ctxs.iter().enumerate() {
            for (j, b) in ctxs.iter().enumerate() {
                if i == j {
                    continue;
                }
                let mut can = 0i32;
                // SAFETY: plain driver query on valid devices.
                unsafe { sys::cuDeviceCanAccessPeer(&mut can, a.cu_device(), b.cu_device()) }
                    .result()
                    .map_err(|e| anyhow!("peer query: {e}"))?;
                if can != 0 {
                    drv(a.bind_to_thread(), "bind")?;
                    // SAFETY: both contexts are valid primary contexts.
                    let r = unsafe { sys::cuCtxEnablePeerAccess(b.cu_ctx(), 0) };
                    if r != sys::cudaError_enum::CUDA_SUCCESS
                        && r != sys::cudaError_enum::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED
                    {
                        bail!("cannot enable peer access {i}->{j}: {r:?}");
                    }
                }
            }
        }
        let mut kernels = Vec::new();
        let mut modules = Vec::new();
        for c in &ctxs {
            let capability = drv(c.compute_capability(), "compute capability")?;
            let ptx = ptx_for(capability)?;
            let m = drv(
                c.load_module(ptx.clone()),
                "cannot load the reduction kernels",
            )?;
            let mut fs = HashMap::new();
            for dt in Dtype::ALL {
                let (v, s) = kernel_names(dt);
                for name in [v, s] {
                    let f = drv(m.load_function(&name), "missing kernel")?;
                    fs.insert(name, f.cu_function());
                }
            }
            kernels.push(fs);
            modules.push(m);
        }
        Ok(Devices {
            rank_dev: (0..ngpus).map(|r| if ndev == 1 { 0 } else { r }).collect(),
            ctxs,
            kernels,
            _modules: modules,
        })
    }

    /// Compiles the program's compute kernels ([`compute_source`]) for every device and
    /// loads them beside the reduction kernels.
    fn load_compute(&mut self, kernel: &Kernel) -> Result<()> {
        let source = compute_source(kernel);
        for (c, fs) in self.ctxs.iter().zip(&mut self.kernels) {
            let capability = drv(c.compute_capability(), "compute capability")?;
            let ptx = nvrtc::compile_source(&source, capability)
                .map_err(|e| anyhow!("the compute kernels: {e}"))?;
            let m = drv(
                c.load_module(cudarc::nvrtc::Ptx::from_src(ptx)),
                "cannot load the compute kernels",
            )?;
            for dt in Dtype::ALL {
                let name = compute_kernel_name(dt);
                let f = drv(m.load_function(&name), "missing compute kernel")?;
                fs.insert(name, f.cu_function());
            }
            self._modules.push(m);
        }
        Ok(())
    }

    fn ctx_of_rank(&self, rank: usize) -> &Arc<CudaContext> {
        &self.ctxs[self.rank_dev[rank]]
    }

    fn sync_all(&self) -> Result<()> {
        for c in &self.ctxs {
            drv(c.synchronize(), "synchronize")?;
        }
        Ok(())
    }
}

/// One device allocation.
struct DevBuf {
    ptr: CUdeviceptr,
    bytes: usize,
    ctx: Arc<CudaContext>,
}

impl DevBuf {
    fn new(ctx: &Arc<CudaContext>, bytes: usize) -> Result<DevBuf> {
        drv(ctx.bind_to_thread(), "bind")?;
        let ptr = if bytes == 0 {
            0
        } else {
            // SAFETY: a plain allocation in the bound context.
            unsafe { result::malloc_sync(bytes) }.map_err(|e| {
                anyhow!(
                    "cannot allocate {bytes} bytes on GPU {}: {e}",
                    ctx.ordinal()
                )
            })?
        };
        Ok(DevBuf {
            ptr,
            bytes,
            ctx: ctx.clone(),
        })
    }
}

impl Drop for DevBuf {
    fn drop(&mut self) {
        if self.ptr != 0 {
            let _ = self.ctx.bind_to_thread();
            // SAFETY: allocated by malloc_sync in this context; all work has finished
            // (callers synchronise before dropping).
            let _ = unsafe { result::free_sync(self.ptr) };
        }
    }
}

/// The streams and events of one [`Instance`]: the real [`Driver`].
struct Streams<'a> {
    dev: &'a Devices,
    /// Per threadblock stream, its device.
    tb_dev: Vec<usize>,
    tbs: Vec<Arc<CudaStream>>,
    root: Arc<CudaStream>,
    node_events: Vec<Option<CudaEvent>>,
    fork: CudaEvent,
    joins: Vec<CudaEvent>,
    /// The graph of the last capture.
    captured: Option<sys::CUgraph>,
}

impl Streams<'_> {
    fn stream(&self, s: StreamId) -> &Arc<CudaStream> {
        match s {
            StreamId::Root => &self.root,
            StreamId::Tb(i) => &self.tbs[i],
        }
    }

    fn event(&self, e: EventId) -> Result<&CudaEvent> {
        match e {
            EventId::Fork => Ok(&self.fork),
            EventId::Join(i) => Ok(&self.joins[i]),
            EventId::Node(v) => self.node_events[v]
                .as_ref()
                .with_context(|| format!("internal error: node {v} has no event")),
        }
    }
}

impl Driver for Streams<'_> {
    fn begin_capture(&mut self) -> Result<()> {
        drv(self.root.context().bind_to_thread(), "bind")?;
        // SAFETY: the root stream is valid and not capturing.
        unsafe {
            result::stream::begin_capture(
                self.root.cu_stream(),
                sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
            )
        }
        .map_err(|e| anyhow!("begin capture: {e}"))
    }

    fn end_capture(&mut self) -> Result<()> {
        drv(self.root.context().bind_to_thread(), "bind")?;
        // SAFETY: ends the capture begun on the root stream.
        let g = unsafe { result::stream::end_capture(self.root.cu_stream()) }
            .map_err(|e| anyhow!("end capture: {e}"))?;
        self.captured = Some(g);
        Ok(())
    }

    fn record(&mut self, event: EventId, stream: StreamId) -> Result<()> {
        drv(self.event(event)?.record(self.stream(stream)), "record")
    }

    fn wait(&mut self, stream: StreamId, event: EventId) -> Result<()> {
        drv(self.stream(stream).wait(self.event(event)?), "wait")
    }

    fn copy(&mut self, stream: usize, c: &CopyCall) -> Result<()> {
        let s = &self.tbs[stream];
        drv(s.context().bind_to_thread(), "bind")?;
        // SAFETY: both ranges lie inside live allocations (sized by the schedule); the
        // stream is valid and bound.
        unsafe { sys::cuMemcpyAsync(c.dst, c.src, c.bytes, s.cu_stream()) }
            .result()
            .map_err(|e| anyhow!("copy: {e}"))
    }

    fn launch(&mut self, stream: usize, k: &KernelCall) -> Result<()> {
        let s = &self.tbs[stream];
        drv(s.context().bind_to_thread(), "bind")?;
        let f = *self.dev.kernels[self.tb_dev[stream]]
            .get(&k.kernel)
            .with_context(|| format!("missing kernel {}", k.kernel))?;
        let mut args = k.args;
        let mut params: [*mut c_void; KERNEL_ARGS] =
            std::array::from_fn(|i| &mut args[i] as *mut u64 as *mut c_void);
        // SAFETY: the kernel takes (ptr, ptr, ptr, u64, u64); the pointers address
        // `rows × units` valid units of live allocations.
        unsafe { result::launch_kernel(f, k.grid, k.block, 0, s.cu_stream(), &mut params) }
            .map_err(|e| anyhow!("kernel launch: {e}"))
    }

    fn compute(&mut self, stream: usize, k: &ComputeCall) -> Result<()> {
        let s = &self.tbs[stream];
        drv(s.context().bind_to_thread(), "bind")?;
        let f = *self.dev.kernels[self.tb_dev[stream]]
            .get(&k.kernel)
            .with_context(|| format!("missing kernel {}", k.kernel))?;
        let mut args = k.args.clone();
        let mut params: Vec<*mut c_void> = args
            .iter_mut()
            .map(|a| a as *mut u64 as *mut c_void)
            .collect();
        // SAFETY: the kernel takes (ptr, ptr per state buffer, u64, u64), as many as `args`
        // (the launcher passes one state address per state buffer of the program's kernel);
        // the pointers address `n` valid elements of live allocations.
        unsafe { result::launch_kernel(f, k.grid, k.block, 0, s.cu_stream(), &mut params) }
            .map_err(|e| anyhow!("compute kernel launch: {e}"))
    }
}

/// Everything one mode of one program needs on the GPUs, sized for one chunk size.
struct Instance<'a> {
    dev: &'a Devices,
    plan: Launcher,
    /// The allocations at the plan's addresses.
    bufs: Vec<[DevBuf; 4]>,
    /// The compute's state buffers of every rank (`[rank][buffer]`, each the output
    /// buffer's chunks).
    state: Vec<Vec<DevBuf>>,
    gpu: Streams<'a>,
    graph: Option<(sys::CUgraph, sys::CUgraphExec)>,
}

impl Drop for Instance<'_> {
    fn drop(&mut self) {
        let _ = self.dev.sync_all();
        if let Some((g, e)) = self.graph.take() {
            let _ = self.gpu.root.context().bind_to_thread();
            // SAFETY: created by capture/instantiate below and no longer running.
            unsafe {
                let _ = result::graph::exec_destroy(e);
                let _ = result::graph::destroy(g);
            }
        }
    }
}

impl<'a> Instance<'a> {
    /// Allocates `sched`'s spaces and, for a compute with `state` = (state buffers, output
    /// chunks), its state buffers on every rank.
    fn new(
        dev: &'a Devices,
        sched: Schedule,
        dtype: Dtype,
        chunk: usize,
        (buffers, out_chunks): (usize, usize),
    ) -> Result<Instance<'a>> {
        let es = dtype.size();
        let state = (0..sched.ngpus)
            .map(|rank| {
                (0..buffers)
                    .map(|_| DevBuf::new(dev.ctx_of_rank(rank), out_chunks * chunk * es))
                    .collect::<Result<Vec<_>>>()
            })
            .collect::<Result<Vec<_>>>()?;
        let state_bases = state
            .iter()
            .map(|bs| bs.iter().map(|b| b.ptr).collect())
            .collect();
        let mut bufs = Vec::new();
        for rank in 0..sched.ngpus {
            let ctx = dev.ctx_of_rank(rank);
            let sizes = sched.space_chunks[rank];
            bufs.push([
                DevBuf::new(ctx, sizes[0] * chunk * es)?,
                DevBuf::new(ctx, sizes[1] * chunk * es)?,
                DevBuf::new(ctx, sizes[2] * chunk * es)?,
                DevBuf::new(ctx, sizes[3] * chunk * es)?,
            ]);
        }
        let bases = bufs.iter().map(|b| b.each_ref().map(|b| b.ptr)).collect();
        let tb_dev: Vec<usize> = sched
            .streams
            .iter()
            .map(|&(rank, _)| dev.rank_dev[rank])
            .collect();
        let plan = Launcher::new(sched, dtype, chunk, bases).with_state(state_bases);
        let tbs = tb_dev
            .iter()
            .map(|&d| drv(dev.ctxs[d].new_stream(), "stream"))
            .collect::<Result<Vec<_>>>()?;
        let root = drv(dev.ctx_of_rank(0).new_stream(), "stream")?;
        let node_events = plan
            .sched
            .nodes
            .iter()
            .zip(&plan.has_event)
            .map(|(n, &has)| {
                if has {
                    let ctx = tbs[n.stream].context();
                    drv(ctx.new_event(None), "event").map(Some)
                } else {
                    Ok(None)
                }
            })
            .collect::<Result<Vec<_>>>()?;
        let fork = drv(root.context().new_event(None), "event")?;
        let joins = tbs
            .iter()
            .map(|s| drv(s.context().new_event(None), "event"))
            .collect::<Result<Vec<_>>>()?;
        Ok(Instance {
            dev,
            plan,
            bufs,
            state,
            gpu: Streams {
                dev,
                tb_dev,
                tbs,
                root,
                node_events,
                fork,
                joins,
                captured: None,
            },
            graph: None,
        })
    }

    /// Captures one issue of the schedule into a graph, instantiated and uploaded.
    fn capture(&mut self) -> Result<()> {
        self.plan
            .capture(&mut self.gpu)
            .context("while capturing")?;
        let g = self
            .gpu
            .captured
            .take()
            .context("internal error: no captured graph")?;
        // SAFETY: g is the graph just captured.
        let e = unsafe { result::graph::instantiate(g, sys::CUgraphInstantiate_flags(0)) }
            .map_err(|e| anyhow!("graph instantiate: {e}"))?;
        self.graph = Some((g, e));
        // SAFETY: valid exec and stream.
        unsafe { result::graph::upload(e, self.gpu.root.cu_stream()) }
            .map_err(|e| anyhow!("graph upload: {e}"))?;
        Ok(())
    }

    /// One run of the program, issued on the root stream (asynchronous).
    fn launch(&mut self) -> Result<()> {
        match self.graph {
            Some((_, e)) => {
                drv(self.gpu.root.context().bind_to_thread(), "bind")?;
                // SAFETY: valid exec and stream.
                unsafe { result::graph::launch(e, self.gpu.root.cu_stream()) }
                    .map_err(|e| anyhow!("graph launch: {e}"))
            }
            None => self.plan.issue(&mut self.gpu),
        }
    }

    /// Poisons every buffer with NaN and writes the inputs.
    fn init(&self, p: &Program, sem: &Semantics, seed: u64, bound: i32) -> Result<()> {
        let es = self.plan.dtype.size();
        for rank in 0..self.plan.sched.ngpus {
            let ctx = self.dev.ctx_of_rank(rank);
            drv(ctx.bind_to_thread(), "bind")?;
            for b in &self.bufs[rank] {
                if b.bytes == 0 {
                    continue;
                }
                let bits = self.plan.dtype.poison_bits();
                // SAFETY: fills a live allocation on the null stream of the bound context.
                let r = unsafe {
                    if es == 4 {
                        sys::cuMemsetD32Async(b.ptr, bits, b.bytes / 4, std::ptr::null_mut())
                    } else {
                        sys::cuMemsetD16Async(b.ptr, bits as u16, b.bytes / 2, std::ptr::null_mut())
                    }
                };
                r.result().map_err(|e| anyhow!("memset: {e}"))?;
            }
            drv(ctx.synchronize(), "synchronize")?;
            let in_chunks = sem.extent(Buffer::Input).unwrap_or(0);
            for k in 0..in_chunks {
                let loc = Schedule::resolve(p, self.plan.sched.inplace, rank, Buffer::Input, k)
                    .context("input chunk outside the buffer")?;
                // A custom collective may start a chunk with another rank's data.
                let v = sem.initial_input(rank, k);
                let host = input_chunk(
                    self.plan.dtype,
                    seed,
                    v.rank,
                    v.chunk,
                    self.plan.chunk,
                    bound,
                );
                // SAFETY: the destination range lies inside the rank's allocation.
                unsafe { result::memcpy_htod_sync(self.plan.addr(loc, 0, 0), &host) }
                    .map_err(|e| anyhow!("upload: {e}"))?;
            }
            // The compute's state starts as the CPU executor's does.
            for (b, buf) in self.state[rank].iter().enumerate() {
                let mut host = Vec::with_capacity(buf.bytes);
                for i in 0..(buf.bytes / es) as u64 {
                    self.plan
                        .dtype
                        .encode(initial_state(b, i) as f32, &mut host);
                }
                if !host.is_empty() {
                    // SAFETY: `host` holds exactly the allocation's bytes.
                    unsafe { result::memcpy_htod_sync(buf.ptr, &host) }
                        .map_err(|e| anyhow!("upload: {e}"))?;
                }
            }
        }
        Ok(())
    }

    /// Counts wrong output elements (all work must have finished); with the program's
    /// compute `kernel`, against the plain schedule's results.
    fn check(
        &self,
        p: &Program,
        sem: &Semantics,
        (seed, bound): (u64, i32),
        kernel: Option<&Kernel>,
    ) -> Result<usize> {
        let out_chunks = sem.extent(Buffer::Output).unwrap_or(0);
        let mut wrong = 0;
        let bytes = self.plan.chunk * self.plan.dtype.size();
        for rank in 0..self.plan.sched.ngpus {
            drv(self.dev.ctx_of_rank(rank).bind_to_thread(), "bind")?;
            let mut host = vec![0u8; out_chunks * bytes];
            for k in 0..out_chunks {
                let loc = Schedule::resolve(p, self.plan.sched.inplace, rank, Buffer::Output, k)
                    .context("output chunk outside the buffer")?;
                // SAFETY: the source range lies inside the rank's allocation.
                unsafe {
                    result::memcpy_dtoh_sync(
                        &mut host[k * bytes..(k + 1) * bytes],
                        self.plan.addr(loc, 0, 0),
                    )
                }
                .map_err(|e| anyhow!("download: {e}"))?;
            }
            let (dtype, chunk) = (self.plan.dtype, self.plan.chunk);
            wrong += host
                .par_chunks(bytes.max(1))
                .enumerate()
                .map(|(k, b)| {
                    wrong_in_output_chunk(sem, dtype, seed, rank, k, chunk, bound, kernel, b)
                })
                .sum::<usize>();
        }
        Ok(wrong)
    }

    /// Median time of `iters` runs after `warmup` runs, in microseconds.
    fn time(&mut self, warmup: usize, iters: usize) -> Result<f64> {
        for _ in 0..warmup {
            self.launch()?;
        }
        self.dev.sync_all()?;
        let ctx = self.gpu.root.context();
        let flags = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
        let mut times = Vec::with_capacity(iters);
        let starts = (0..iters)
            .map(|_| drv(ctx.new_event(flags), "event"))
            .collect::<Result<Vec<_>>>()?;
        let ends = (0..iters)
            .map(|_| drv(ctx.new_event(flags), "event"))
            .collect::<Result<Vec<_>>>()?;
        for i in 0..iters {
            drv(starts[i].record(&self.gpu.root), "record")?;
            self.launch()?;
            drv(ends[i].record(&self.gpu.root), "record")?;
        }
        self.dev.sync_all()?;
        for i in 0..iters {
            times.push(drv(starts[i].elapsed_ms(&ends[i]), "elapsed")? as f64 * 1e3);
        }
        Ok(median(&mut times))
    }
}

fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

/// Verifies the program, then runs it on the GPU(s) at every size in every requested mode it
/// allows; rows as the CPU executor's (nccl-tests' columns).
pub fn sweep(p: &Program, opts: &CudaOptions) -> Result<Vec<SweepRow>> {
    verify(p).context("the program does not verify")?;
    let kernel = p.compute.as_ref().map(|c| c.kernel()).transpose()?;
    let mut dev = Devices::new(p.ngpus, opts.single_gpu)?;
    if let Some(k) = &kernel {
        dev.load_compute(k)?;
    }
    let dev = dev;
    let modes = sweep_modes(p, opts.outofplace, opts.inplace)?;
    let scheds = modes
        .iter()
        .map(|&m| Schedule::new(p, m, opts.slices))
        .collect::<Result<Vec<_>>>()?;
    let bound = opts.dtype.input_bound(p.ngpus);
    let mut rows = Vec::new();
    for &size in &opts.sizes {
        let elements = elements_for(p, size, opts.dtype.size());
        let chunk = elements / p.nchunksperloop;
        for (&inplace, sched) in modes.iter().zip(&scheds) {
            let sem = Semantics::of(p, inplace).map_err(anyhow::Error::msg)?;
            let state = (
                kernel.as_ref().map_or(0, |k| k.buffers.len()),
                sem.extent(Buffer::Output).unwrap_or(0),
            );
            let mut inst = Instance::new(&dev, sched.clone(), opts.dtype, chunk, state)
                .with_context(|| format!("size {size}"))?;
            if opts.graph {
                inst.capture()
                    .with_context(|| format!("size {size}: graph capture"))?;
            }
            let mut wrong = 0;
            if opts.check {
                inst.init(p, &sem, opts.seed, bound)?;
                dev.sync_all()?;
                inst.launch()?;
                dev.sync_all()?;
                wrong = inst.check(p, &sem, (opts.seed, bound), kernel.as_ref())?;
            }
            let time_us = inst.time(opts.warmup, opts.iters.max(1))?;
            let bytes = (elements * opts.dtype.size()) as u64;
            let point = RunPoint {
                elements,
                bytes,
                dtype: opts.dtype.name(),
                op: "sum",
                inplace,
            };
            rows.push(SweepRow::new(p, &point, time_us, wrong));
        }
    }
    Ok(rows)
}

/// One measurement of a plain device-to-device copy.
#[derive(Debug, Clone, PartialEq)]
pub struct CeilingRow {
    /// Bytes copied.
    pub size: u64,
    /// Median time, microseconds.
    pub time_us: f64,
    /// size / time, GB/s.
    pub gbps: f64,
}

/// Times a plain copy of each size within GPU 0 (captured into a graph like the programs):
/// the ceiling for any algorithm whose ranks share one GPU.
pub fn copy_ceiling(sizes: &[u64], warmup: usize, iters: usize) -> Result<Vec<CeilingRow>> {
    available()?;
    let ctx = drv(CudaContext::new(0), "cannot open GPU 0")?;
    // SAFETY: we order all work ourselves.
    unsafe { ctx.disable_event_tracking() };
    let stream = drv(ctx.new_stream(), "stream")?;
    let flags = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
    let mut out = Vec::new();
    for &size in sizes {
        let bytes = size as usize;
        let (a, b) = (DevBuf::new(&ctx, bytes)?, DevBuf::new(&ctx, bytes)?);
        drv(ctx.bind_to_thread(), "bind")?;
        let copy = || -> Result<()> {
            // SAFETY: both buffers hold `bytes` bytes.
            unsafe { sys::cuMemcpyAsync(b.ptr, a.ptr, bytes, stream.cu_stream()) }
                .result()
                .map_err(|e| anyhow!("copy: {e}"))
        };
        for _ in 0..warmup {
            copy()?;
        }
        let mut times = Vec::new();
        for _ in 0..iters.max(1) {
            let s = drv(stream.record_event(flags), "record")?;
            copy()?;
            let e = drv(stream.record_event(flags), "record")?;
            drv(e.synchronize(), "sync")?;
            times.push(drv(s.elapsed_ms(&e), "elapsed")? as f64 * 1e3);
        }
        drv(stream.synchronize(), "sync")?;
        let t = median(&mut times);
        out.push(CeilingRow {
            size,
            time_us: t,
            gbps: size as f64 / (t * 1e3),
        });
    }
    Ok(out)
}
