//! The driver-facing part of the CUDA executor (cudarc, libcuda and NVRTC loaded at run
//! time). See the module documentation of [`crate::cuda`].

use super::data::{input_chunk, wrong_in_output_chunk, Dtype};
use super::schedule::{piece, Action, Loc, Schedule};
use super::{kernel_names, kernel_shape, kernel_source, CudaOptions, KERNEL_THREADS};
use crate::cpu::{elements_for, sweep_modes, RunPoint, SweepRow};
use crate::ir::{Buffer, Program};
use crate::semantics::Semantics;
use crate::verify::verify;
use anyhow::{anyhow, bail, Context, Result};
use cudarc::driver::sys::{self, CUdeviceptr};
use cudarc::driver::{result, CudaContext, CudaEvent, CudaStream};
use rayon::prelude::*;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Arc, OnceLock};

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

fn ptx() -> Result<cudarc::nvrtc::Ptx> {
    static PTX: OnceLock<std::result::Result<String, String>> = OnceLock::new();
    let r = PTX.get_or_init(|| {
        // SAFETY: only tries to open the shared library.
        if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            return Err("NVRTC (libnvrtc.so) could not be loaded: add the CUDA toolkit's lib64 folder to LD_LIBRARY_PATH".into());
        }
        let ctx = CudaContext::new(0).map_err(|e| e.to_string())?;
        let (major, minor) = ctx.compute_capability().map_err(|e| e.to_string())?;
        let arch: &'static str = Box::leak(format!("compute_{major}{minor}").into_boxed_str());
        let opts = cudarc::nvrtc::CompileOptions {
            arch: Some(arch),
            ..Default::default()
        };
        cudarc::nvrtc::compile_ptx_with_opts(kernel_source(), opts)
            .map(|p| p.to_src())
            .map_err(|e| format!("NVRTC failed to compile the reduction kernels: {e}"))
    });
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
        let ptx = ptx()?;
        let mut kernels = Vec::new();
        let mut modules = Vec::new();
        for c in &ctxs {
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

/// Everything one mode of one program needs on the GPUs, sized for one chunk size.
struct Instance<'a> {
    dev: &'a Devices,
    sched: Schedule,
    dtype: Dtype,
    chunk: usize,
    bufs: Vec<[DevBuf; 4]>,
    streams: Vec<Arc<CudaStream>>,
    root: Arc<CudaStream>,
    waits: Vec<Vec<usize>>,
    node_events: Vec<Option<CudaEvent>>,
    fork: CudaEvent,
    joins: Vec<CudaEvent>,
    graph: Option<(sys::CUgraph, sys::CUgraphExec)>,
}

impl Drop for Instance<'_> {
    fn drop(&mut self) {
        let _ = self.dev.sync_all();
        if let Some((g, e)) = self.graph.take() {
            let _ = self.root.context().bind_to_thread();
            // SAFETY: created by capture/instantiate below and no longer running.
            unsafe {
                let _ = result::graph::exec_destroy(e);
                let _ = result::graph::destroy(g);
            }
        }
    }
}

impl<'a> Instance<'a> {
    fn new(dev: &'a Devices, sched: Schedule, dtype: Dtype, chunk: usize) -> Result<Instance<'a>> {
        let es = dtype.size();
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
        let streams = sched
            .streams
            .iter()
            .map(|&(rank, _)| drv(dev.ctx_of_rank(rank).new_stream(), "stream"))
            .collect::<Result<Vec<_>>>()?;
        let root = drv(dev.ctx_of_rank(0).new_stream(), "stream")?;
        let waits = sched.waits();
        let mut needed = vec![false; sched.nodes.len()];
        for w in &waits {
            for &d in w {
                needed[d] = true;
            }
        }
        let node_events = sched
            .nodes
            .iter()
            .zip(&needed)
            .map(|(n, &need)| {
                if need {
                    let ctx = streams[n.stream].context();
                    drv(ctx.new_event(None), "event").map(Some)
                } else {
                    Ok(None)
                }
            })
            .collect::<Result<Vec<_>>>()?;
        let fork = drv(root.context().new_event(None), "event")?;
        let joins = streams
            .iter()
            .map(|s| drv(s.context().new_event(None), "event"))
            .collect::<Result<Vec<_>>>()?;
        Ok(Instance {
            dev,
            sched,
            dtype,
            chunk,
            bufs,
            streams,
            root,
            waits,
            node_events,
            fork,
            joins,
            graph: None,
        })
    }

    fn addr(&self, l: Loc, k: usize, elem: usize) -> CUdeviceptr {
        let b = &self.bufs[l.rank][l.space.index()];
        let off = ((l.chunk + k) * self.chunk + elem) * self.dtype.size();
        debug_assert!(off <= b.bytes);
        b.ptr + off as u64
    }

    /// Issues the whole DAG once: every stream forks from the root stream and joins it.
    fn issue(&self) -> Result<()> {
        drv(self.fork.record(&self.root), "record")?;
        for s in &self.streams {
            drv(s.wait(&self.fork), "wait")?;
        }
        let slices = self.sched.slices;
        for (v, n) in self.sched.nodes.iter().enumerate() {
            let s = &self.streams[n.stream];
            for &d in &self.waits[v] {
                let ev = self.node_events[d].as_ref().expect("planned event");
                drv(s.wait(ev), "wait")?;
            }
            drv(s.context().bind_to_thread(), "bind")?;
            let (lo, hi) = piece(self.chunk, slices, n.pass);
            let len = hi - lo;
            // Rows: with one pass the chunks of a step are one contiguous run.
            let (rows, n_row) = match n.action {
                Action::Copy { count, .. } | Action::Reduce { count, .. } => {
                    if slices == 1 {
                        (1, count * self.chunk)
                    } else {
                        (count, len)
                    }
                }
            };
            if n_row > 0 {
                match n.action {
                    Action::Copy { src, dst, .. } => {
                        self.issue_copy(s, src, dst, rows, lo, n_row)?
                    }
                    Action::Reduce { out, a, b, .. } => {
                        self.issue_reduce(s, [out, a, b], rows, lo, n_row)?
                    }
                }
            }
            if let Some(ev) = &self.node_events[v] {
                drv(ev.record(s), "record")?;
            }
        }
        for (s, ev) in self.streams.iter().zip(&self.joins) {
            drv(ev.record(s), "record")?;
            drv(self.root.wait(ev), "wait")?;
        }
        Ok(())
    }

    /// Issues `dst ← src` on stream `s`: `rows` rows of `n_row` elements from element `lo`
    /// of each chunk (nothing where source and destination are the same memory).
    fn issue_copy(
        &self,
        s: &CudaStream,
        src: Loc,
        dst: Loc,
        rows: usize,
        lo: usize,
        n_row: usize,
    ) -> Result<()> {
        let es = self.dtype.size();
        for k in 0..rows {
            let (sp, dp) = (self.addr(src, k, lo), self.addr(dst, k, lo));
            if sp != dp {
                // SAFETY: both ranges lie inside live allocations (sized
                // by the schedule); the stream is valid and bound.
                unsafe { sys::cuMemcpyAsync(dp, sp, n_row * es, s.cu_stream()) }
                    .result()
                    .map_err(|e| anyhow!("copy: {e}"))?;
            }
        }
        Ok(())
    }

    /// Launches the reduction kernel `out ← a + b` on stream `s`: `rows` rows of
    /// `n_row` elements from element `lo` of each chunk.
    fn issue_reduce(
        &self,
        s: &CudaStream,
        [out, a, b]: [Loc; 3],
        rows: usize,
        lo: usize,
        n_row: usize,
    ) -> Result<()> {
        let ptrs = [
            self.addr(out, 0, lo),
            self.addr(a, 0, lo),
            self.addr(b, 0, lo),
        ];
        let (vec, units, stride) = kernel_shape(self.dtype, ptrs, n_row, self.chunk, rows);
        let (vname, sname) = kernel_names(self.dtype);
        let dev = self.dev.rank_dev[out.rank];
        let f = self.dev.kernels[dev][if vec { &vname } else { &sname }];
        let blocks = units.div_ceil(KERNEL_THREADS as u64).clamp(1, 1024) as u32;
        let (mut p0, mut p1, mut p2, mut p3, mut p4) = (ptrs[0], ptrs[1], ptrs[2], units, stride);
        let mut params: [*mut c_void; 5] = [
            &mut p0 as *mut u64 as *mut c_void,
            &mut p1 as *mut u64 as *mut c_void,
            &mut p2 as *mut u64 as *mut c_void,
            &mut p3 as *mut u64 as *mut c_void,
            &mut p4 as *mut u64 as *mut c_void,
        ];
        // SAFETY: the kernel takes (ptr, ptr, ptr, u64, u64); the pointers
        // address `rows × units` valid units of live allocations.
        unsafe {
            result::launch_kernel(
                f,
                (blocks, rows as u32, 1),
                (KERNEL_THREADS, 1, 1),
                0,
                s.cu_stream(),
                &mut params,
            )
        }
        .map_err(|e| anyhow!("kernel launch: {e}"))?;
        Ok(())
    }

    fn capture(&mut self) -> Result<()> {
        drv(self.root.context().bind_to_thread(), "bind")?;
        // SAFETY: the root stream is valid and not capturing.
        unsafe {
            result::stream::begin_capture(
                self.root.cu_stream(),
                sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
            )
        }
        .map_err(|e| anyhow!("begin capture: {e}"))?;
        let issued = self.issue();
        drv(self.root.context().bind_to_thread(), "bind")?;
        // SAFETY: ends the capture begun above.
        let g = unsafe { result::stream::end_capture(self.root.cu_stream()) };
        issued.context("while capturing")?;
        let g = g.map_err(|e| anyhow!("end capture: {e}"))?;
        // SAFETY: g is the graph just captured.
        let e = unsafe { result::graph::instantiate(g, sys::CUgraphInstantiate_flags(0)) }
            .map_err(|e| anyhow!("graph instantiate: {e}"))?;
        // SAFETY: valid exec and stream.
        unsafe { result::graph::upload(e, self.root.cu_stream()) }
            .map_err(|e| anyhow!("graph upload: {e}"))?;
        self.graph = Some((g, e));
        Ok(())
    }

    /// One run of the program, issued on the root stream (asynchronous).
    fn launch(&self) -> Result<()> {
        match self.graph {
            Some((_, e)) => {
                drv(self.root.context().bind_to_thread(), "bind")?;
                // SAFETY: valid exec and stream.
                unsafe { result::graph::launch(e, self.root.cu_stream()) }
                    .map_err(|e| anyhow!("graph launch: {e}"))
            }
            None => self.issue(),
        }
    }

    /// Poisons every buffer with NaN and writes the inputs.
    fn init(&self, p: &Program, sem: &Semantics, seed: u64, bound: i32) -> Result<()> {
        let es = self.dtype.size();
        for rank in 0..self.sched.ngpus {
            let ctx = self.dev.ctx_of_rank(rank);
            drv(ctx.bind_to_thread(), "bind")?;
            for b in &self.bufs[rank] {
                if b.bytes == 0 {
                    continue;
                }
                let bits = self.dtype.poison_bits();
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
                let loc = Schedule::resolve(p, self.sched.inplace, rank, Buffer::Input, k)
                    .context("input chunk outside the buffer")?;
                // A custom collective may start a chunk with another rank's data.
                let v = sem.initial_input(rank, k);
                let host = input_chunk(self.dtype, seed, v.rank, v.chunk, self.chunk, bound);
                // SAFETY: the destination range lies inside the rank's allocation.
                unsafe { result::memcpy_htod_sync(self.addr(loc, 0, 0), &host) }
                    .map_err(|e| anyhow!("upload: {e}"))?;
            }
        }
        Ok(())
    }

    /// Counts wrong output elements (all work must have finished).
    fn check(&self, p: &Program, sem: &Semantics, seed: u64, bound: i32) -> Result<usize> {
        let out_chunks = sem.extent(Buffer::Output).unwrap_or(0);
        let mut wrong = 0;
        let bytes = self.chunk * self.dtype.size();
        for rank in 0..self.sched.ngpus {
            drv(self.dev.ctx_of_rank(rank).bind_to_thread(), "bind")?;
            let mut host = vec![0u8; out_chunks * bytes];
            for k in 0..out_chunks {
                let loc = Schedule::resolve(p, self.sched.inplace, rank, Buffer::Output, k)
                    .context("output chunk outside the buffer")?;
                // SAFETY: the source range lies inside the rank's allocation.
                unsafe {
                    result::memcpy_dtoh_sync(
                        &mut host[k * bytes..(k + 1) * bytes],
                        self.addr(loc, 0, 0),
                    )
                }
                .map_err(|e| anyhow!("download: {e}"))?;
            }
            let (dtype, chunk) = (self.dtype, self.chunk);
            wrong += host
                .par_chunks(bytes.max(1))
                .enumerate()
                .map(|(k, b)| wrong_in_output_chunk(sem, dtype, seed, rank, k, chunk, bound, b))
                .sum::<usize>();
        }
        Ok(wrong)
    }

    /// Median time of `iters` runs after `warmup` runs, in microseconds.
    fn time(&self, warmup: usize, iters: usize) -> Result<f64> {
        for _ in 0..warmup {
            self.launch()?;
        }
        self.dev.sync_all()?;
        let ctx = self.root.context();
        let flags = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
        let mut times = Vec::with_capacity(iters);
        let starts = (0..iters)
            .map(|_| drv(ctx.new_event(flags), "event"))
            .collect::<Result<Vec<_>>>()?;
        let ends = (0..iters)
            .map(|_| drv(ctx.new_event(flags), "event"))
            .collect::<Result<Vec<_>>>()?;
        for i in 0..iters {
            drv(starts[i].record(&self.root), "record")?;
            self.launch()?;
            drv(ends[i].record(&self.root), "record")?;
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
    let dev = Devices::new(p.ngpus, opts.single_gpu)?;
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
            let mut inst = Instance::new(&dev, sched.clone(), opts.dtype, chunk)
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
                wrong = inst.check(p, &sem, opts.seed, bound)?;
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
