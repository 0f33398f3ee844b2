//! A program's compute ([`crate::compute::Kernel`]) as CUDA C source: one elementwise kernel
//! per element type, compiled at run time with NVRTC like the reduction kernels. It computes
//! what the CPU executor computes, bit for bit: every value in f32 (16-bit types loaded and
//! rounded back to nearest even), constants as the f32 the CPU rounds them to, `-e` as
//! `0 - e`, the same dropout draw, and no contraction into FMAs ([`super::nvrtc`] compiles
//! with `--fmad=false`); `+ - * / sqrt` are IEEE-rounded on both. `pow` is the one
//! exception: CUDA's `powf` and the host's may differ in the last place.

use super::data::Dtype;
use crate::compute::{BinOp, Expr, Kernel, Target};
use std::fmt::Write;

/// The compute kernel's name for an element type.
pub fn compute_kernel_name(dtype: Dtype) -> String {
    format!("compute_{}", dtype.kernel_suffix())
}

/// The number of 64-bit parameters of the compute kernel: `(x, state..., n, index0)`.
pub fn compute_kernel_args(kernel: &Kernel) -> usize {
    kernel.buffers.len() + 3
}

/// CUDA C source of the compute kernel in every element type. `compute_T(x, s0.., n, index0)`
/// applies the statements to `x[i]` and the state buffers' `s_b[i]` for `i < n`, with
/// dropout index `index0 + i` (the element's index in the output buffer).
pub fn compute_source(kernel: &Kernel) -> String {
    let mut s = String::from(super::CONVERSIONS);
    s.push_str(&format!(
        r#"
__device__ __forceinline__ u32 keep_draw(u64 seed, u64 index) {{
  u64 z = seed * 0x9E3779B97F4A7C15ull + index + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return (u32)(z >> 32);
}}
__device__ __forceinline__ float dropout(float v, float p, u64 index) {{
  float draw = __uint2float_rn(keep_draw({seed}ull, index)) * 2.3283064365386963e-10f;
  return draw < p ? 0.0f : v / (1.0f - p);
}}
"#,
        seed = kernel.seed
    ));
    let mut body = String::new();
    for (target, e) in &kernel.statements {
        let v = expr(e);
        match target {
            Target::Buf(b) => writeln!(body, "    b{b} = {v};").unwrap(),
            Target::Out => writeln!(body, "    out = {v};").unwrap(),
        }
    }
    let nbuf = kernel.buffers.len();
    for (suffix, ty, load, store) in [
        ("f32", "float", "", ""),
        ("f16", "u16", "h2f", "f2h"),
        ("bf16", "u16", "b2f", "f2b"),
    ] {
        let params: String = (0..nbuf).map(|b| format!(", {ty}* s{b}")).collect();
        let loads: String = (0..nbuf)
            .map(|b| format!("    float b{b} = {load}(s{b}[i]);\n"))
            .collect();
        let stores: String = (0..nbuf)
            .map(|b| format!("    s{b}[i] = {store}(b{b});\n"))
            .collect();
        writeln!(
            s,
            r#"
extern "C" __global__ void compute_{suffix}({ty}* x{params}, u64 n, u64 index0) {{
  for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {{
    const u64 index = index0 + i;
    const float vx = {load}(x[i]);
{loads}    float out = vx;
{body}{stores}    x[i] = {store}(out);
  }}
}}"#
        )
        .unwrap();
    }
    s
}

/// One expression in f32.
fn expr(e: &Expr) -> String {
    match e {
        // The bits of the f32 the CPU rounds the constant to.
        Expr::Num(v) => format!("__uint_as_float(0x{:08x}u)", (*v as f32).to_bits()),
        Expr::X => "vx".into(),
        Expr::Buf(b) => format!("b{b}"),
        Expr::Neg(a) => format!("(0.0f - {})", expr(a)),
        Expr::Bin(op, a, b) => {
            let op = match op {
                BinOp::Add => '+',
                BinOp::Sub => '-',
                BinOp::Mul => '*',
                BinOp::Div => '/',
            };
            format!("({} {op} {})", expr(a), expr(b))
        }
        Expr::Sqrt(a) => format!("sqrtf({})", expr(a)),
        Expr::Pow(a, b) => format!("powf({}, {})", expr(a), expr(b)),
        Expr::Dropout(a, p) => format!("dropout({}, {}, index)", expr(a), expr(p)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compute::{adam_scalars, Compute, ADAM};

    #[test]
    fn adam_source_defines_one_kernel_per_type_with_its_state() {
        let adam = Compute {
            program: ADAM.into(),
            scalars: adam_scalars(),
            seed: 0,
        };
        let k = adam.kernel().unwrap();
        let src = compute_source(&k);
        for dt in Dtype::ALL {
            let name = compute_kernel_name(dt);
            assert_eq!(src.matches(&format!(" {name}(")).count(), 1, "{name}");
        }
        assert_eq!(compute_kernel_args(&k), 6, "x, m, v, p, n, index0");
        assert!(src.contains("float b2 = (s2[i]);"), "p loaded in f32");
        assert!(src.contains("s0[i] = f2h(b0);"), "m rounded back to half");
        // lr = 1e-3 as the f32 the CPU uses.
        assert!(src.contains(&format!("0x{:08x}u", 1e-3f32.to_bits())));
        assert!(src.contains("sqrtf(") && src.contains("powf("));
    }
}
