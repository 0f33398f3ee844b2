//! The CUDA executor. A [`Program`](crate::ir::Program) is lowered to a
//! [`schedule::Schedule`]: a DAG of copy-engine copies (transfers, local `cpy`) and small
//! reduction kernels, each issued on the stream of its threadblock, with events for the
//! dependencies between streams. The whole DAG is captured into a CUDA graph once per size
//! and replayed for timing. Ranks map to GPUs one to one when there are enough GPUs (with
//! peer access where the hardware allows it); otherwise every rank is a separate set of
//! buffers on GPU 0.
//!
//! Everything that needs no GPU (the schedule, the order of driver calls that issues it, the
//! kernel source, data encodings, the reference check, reports) is always compiled and
//! tested; the driver-facing part is behind the `cuda` cargo feature and loads libcuda and
//! NVRTC at run time (cudarc's dynamic loading), so no build needs CUDA. Compiling the
//! kernels ([`nvrtc`]) needs NVRTC but no GPU.

pub mod compute;
pub mod data;
pub mod launch;
pub mod report;
pub mod schedule;

#[cfg(feature = "cuda")]
mod exec;
#[cfg(feature = "cuda")]
pub mod nvrtc;

#[cfg(feature = "cuda")]
pub use exec::{available, copy_ceiling, sweep, CeilingRow, DeviceInfo};

pub use data::Dtype;

/// Options of a GPU sweep.
#[derive(Debug, Clone, PartialEq)]
pub struct CudaOptions {
    /// Element type.
    pub dtype: Dtype,
    /// Message sizes (bytes of the larger buffer, as nccl-tests).
    pub sizes: Vec<u64>,
    /// Untimed graph replays before timing.
    pub warmup: usize,
    /// Timed replays; the reported time is their median.
    pub iters: usize,
    /// Seed of the random inputs.
    pub seed: u64,
    /// Pieces each chunk is cut into (passes over the program).
    pub slices: usize,
    /// Capture into a CUDA graph (else issue the streams directly every run).
    pub graph: bool,
    /// Put every rank on GPU 0 even when there are more GPUs.
    pub single_gpu: bool,
    /// Run out of place (if the program allows it).
    pub outofplace: bool,
    /// Run in place (if the program allows it).
    pub inplace: bool,
    /// Check results against the reference (first run of every size and mode).
    pub check: bool,
}

impl Default for CudaOptions {
    fn default() -> Self {
        CudaOptions {
            dtype: Dtype::F32,
            sizes: vec![1 << 20],
            warmup: 5,
            iters: 20,
            seed: 1,
            slices: 1,
            graph: true,
            single_gpu: false,
            outofplace: true,
            inplace: true,
            check: true,
        }
    }
}

/// Threads per block of the reduction kernels.
pub const KERNEL_THREADS: u32 = 256;

/// Parameters of every reduction kernel: `(out, a, b, n, stride)`, three pointers and two
/// 64-bit counts, each passed as 64 bits (see [`launch::KernelCall::args`]).
pub const KERNEL_ARGS: usize = 5;

/// Names of the reduction kernels of a type: (vectorized, scalar). The vectorized one moves
/// 16 bytes per thread and load; it needs 16-byte aligned rows whose length and stride are
/// multiples of 16 bytes, and counts `n`/`stride` in 16-byte units.
pub fn kernel_names(dtype: Dtype) -> (String, String) {
    let s = dtype.kernel_suffix();
    (format!("reduce_{s}_vec"), format!("reduce_{s}_scalar"))
}

/// The integer types and the half/bfloat16 conversions (PTX `cvt` and bit arithmetic, round
/// to nearest even) shared by the reduction and the compute kernels, plus the additions.
pub const CONVERSIONS: &str = r#"
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

__device__ __forceinline__ float h2f(u16 h) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }
__device__ __forceinline__ u16 f2h(float f) { u16 h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
__device__ __forceinline__ float b2f(u16 b) { return __uint_as_float(((u32)b) << 16); }
__device__ __forceinline__ u16 f2b(float f) {
  u32 u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (u16)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (u16)(u >> 16);
}

__device__ __forceinline__ float add_f32(float x, float y) { return x + y; }
__device__ __forceinline__ u16 add_f16(u16 x, u16 y) { return f2h(h2f(x) + h2f(y)); }
__device__ __forceinline__ u16 add_bf16(u16 x, u16 y) { return f2b(b2f(x) + b2f(y)); }

__device__ __forceinline__ u32 add2_f32(u32 x, u32 y) { return __float_as_uint(__uint_as_float(x) + __uint_as_float(y)); }
__device__ __forceinline__ u32 add2_f16(u32 x, u32 y) {
  return (u32)add_f16((u16)(x & 0xffffu), (u16)(y & 0xffffu)) | ((u32)add_f16((u16)(x >> 16), (u16)(y >> 16)) << 16);
}
__device__ __forceinline__ u32 add2_bf16(u32 x, u32 y) {
  return (u32)add_bf16((u16)(x & 0xffffu), (u16)(y & 0xffffu)) | ((u32)add_bf16((u16)(x >> 16), (u16)(y >> 16)) << 16);
}
"#;

/// CUDA C++ source of every reduction kernel, compiled at run time with NVRTC. Needs no
/// headers: half and bfloat16 conversions use PTX `cvt` and bit arithmetic. Every kernel
/// computes `out[row·stride + i] = a[…] + b[…]` for `i < n`, row = `blockIdx.y`; `out` may
/// alias `a` or `b` exactly (each element is read before it is written by the same thread).
pub fn kernel_source() -> String {
    let mut s = String::from(CONVERSIONS);
    for (suffix, ty) in [("f32", "float"), ("f16", "u16"), ("bf16", "u16")] {
        s.push_str(&format!(
            r#"
extern "C" __global__ void reduce_{suffix}_scalar({ty}* out, const {ty}* a, const {ty}* b, u64 n, u64 stride) {{
  u64 base = (u64)blockIdx.y * stride;
  for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {{
    {ty} x = a[base + i];
    {ty} y = b[base + i];
    out[base + i] = add_{suffix}(x, y);
  }}
}}

extern "C" __global__ void reduce_{suffix}_vec(uint4* out, const uint4* a, const uint4* b, u64 n, u64 stride) {{
  u64 base = (u64)blockIdx.y * stride;
  for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {{
    uint4 x = a[base + i];
    uint4 y = b[base + i];
    uint4 r;
    r.x = add2_{suffix}(x.x, y.x);
    r.y = add2_{suffix}(x.y, y.y);
    r.z = add2_{suffix}(x.z, y.z);
    r.w = add2_{suffix}(x.w, y.w);
    out[base + i] = r;
  }}
}}
"#
        ));
    }
    s
}

/// How a reduction over `rows` rows of `n` elements (row stride `stride` elements) at byte
/// addresses `ptrs` is launched: (vectorized?, units per row, stride in units).
pub fn kernel_shape(
    dtype: Dtype,
    ptrs: [u64; 3],
    n: usize,
    stride: usize,
    rows: usize,
) -> (bool, u64, u64) {
    let es = dtype.size();
    let aligned = ptrs.iter().all(|p| p.is_multiple_of(16))
        && (n * es).is_multiple_of(16)
        && (rows <= 1 || (stride * es).is_multiple_of(16));
    if aligned {
        let per = 16 / es;
        (true, (n / per) as u64, (stride / per) as u64)
    } else {
        (false, n as u64, stride as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_source_defines_every_kernel_once() {
        let src = kernel_source();
        for dt in Dtype::ALL {
            let (v, s) = kernel_names(dt);
            assert_eq!(src.matches(&format!("void {v}(")).count(), 1, "{v}");
            assert_eq!(src.matches(&format!("void {s}(")).count(), 1, "{s}");
        }
        assert!(!src.contains("#include"), "NVRTC must not need headers");
        assert_eq!(src.matches('{').count(), src.matches('}').count());
    }

    #[test]
    fn vectorize_only_when_aligned() {
        assert_eq!(kernel_shape(Dtype::F32, [0, 16, 32], 8, 8, 1), (true, 2, 2));
        assert_eq!(
            kernel_shape(Dtype::F16, [0, 16, 32], 16, 32, 3),
            (true, 2, 4)
        );
        assert!(!kernel_shape(Dtype::F32, [4, 16, 32], 8, 8, 1).0);
        assert!(!kernel_shape(Dtype::F32, [0, 16, 32], 6, 8, 1).0);
        assert!(!kernel_shape(Dtype::F32, [0, 16, 32], 8, 6, 2).0);
        assert!(kernel_shape(Dtype::F32, [0, 16, 32], 8, 6, 1).0);
    }
}
