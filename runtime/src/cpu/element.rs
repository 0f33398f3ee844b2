//! Element types and reduction kernels of the CPU executor.

use crate::compute::{Kernel, Real};
use serde::{Deserialize, Serialize};
use std::fmt;

/// Data type of the buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DataType {
    /// 32-bit float (nccl-tests `float`).
    F32,
    /// 64-bit float (nccl-tests `double`).
    F64,
    /// IEEE half precision (nccl-tests `half`).
    F16,
    /// bfloat16 (nccl-tests `bfloat16`).
    BF16,
}

impl DataType {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DataType::F32 => 4,
            DataType::F64 => 8,
            DataType::F16 | DataType::BF16 => 2,
        }
    }

    /// nccl-tests' name.
    pub fn name(self) -> &'static str {
        match self {
            DataType::F32 => "float",
            DataType::F64 => "double",
            DataType::F16 => "half",
            DataType::BF16 => "bfloat16",
        }
    }
}

impl fmt::Display for DataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The reduction operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ReduceOp {
    /// Sum.
    Sum,
    /// Minimum.
    Min,
    /// Maximum.
    Max,
}

impl ReduceOp {
    /// nccl-tests' name.
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Min => "min",
            ReduceOp::Max => "max",
        }
    }
}

impl fmt::Display for ReduceOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An element type the executor can move, reduce and compute on.
pub trait Element: Copy + Send + Sync + PartialEq + Default + 'static {
    /// The runtime data type.
    const TYPE: DataType;
    /// The type a compute kernel works in (f32 for the 16-bit types, as a GPU kernel does).
    type Acc: Real;
    /// A small integer, exactly representable (results stay exact under any order of sums).
    fn from_small(v: i32) -> Self;
    /// The poison value (NaN) that marks unwritten output.
    fn poison() -> Self;
    /// a + b.
    fn add(a: Self, b: Self) -> Self;
    /// min(a, b).
    fn min(a: Self, b: Self) -> Self;
    /// max(a, b).
    fn max(a: Self, b: Self) -> Self;
    /// The value in the compute type (exact).
    fn widen(self) -> Self::Acc;
    /// The compute type's value rounded to nearest even.
    fn narrow(v: Self::Acc) -> Self;
    /// An f64 value rounded to the element type.
    fn from_f64(v: f64) -> Self {
        Self::narrow(Self::Acc::of(v))
    }
}

macro_rules! float_element {
    ($t:ty, $dt:expr) => {
        impl Element for $t {
            const TYPE: DataType = $dt;
            type Acc = $t;
            fn from_small(v: i32) -> Self {
                v as $t
            }
            fn poison() -> Self {
                <$t>::NAN
            }
            #[inline(always)]
            fn add(a: Self, b: Self) -> Self {
                a + b
            }
            #[inline(always)]
            fn min(a: Self, b: Self) -> Self {
                a.min(b)
            }
            #[inline(always)]
            fn max(a: Self, b: Self) -> Self {
                a.max(b)
            }
            #[inline(always)]
            fn widen(self) -> Self {
                self
            }
            #[inline(always)]
            fn narrow(v: Self) -> Self {
                v
            }
        }
    };
}

float_element!(f32, DataType::F32);
float_element!(f64, DataType::F64);

/// The 16-bit types: stored as 16 bits, arithmetic in f32 rounded back (the sum of two
/// 16-bit values is exact in f32, so a sum rounds once, as `__hadd` does).
macro_rules! half_element {
    ($t:ty, $dt:expr) => {
        impl Element for $t {
            const TYPE: DataType = $dt;
            type Acc = f32;
            fn from_small(v: i32) -> Self {
                <$t>::from_f32(v as f32)
            }
            fn poison() -> Self {
                <$t>::NAN
            }
            #[inline(always)]
            fn add(a: Self, b: Self) -> Self {
                <$t>::from_f32(a.to_f32() + b.to_f32())
            }
            #[inline(always)]
            fn min(a: Self, b: Self) -> Self {
                <$t>::from_f32(a.to_f32().min(b.to_f32()))
            }
            #[inline(always)]
            fn max(a: Self, b: Self) -> Self {
                <$t>::from_f32(a.to_f32().max(b.to_f32()))
            }
            #[inline(always)]
            fn widen(self) -> f32 {
                self.to_f32()
            }
            #[inline(always)]
            fn narrow(v: f32) -> Self {
                <$t>::from_f32(v)
            }
        }
    };
}

half_element!(half::f16, DataType::F16);
half_element!(half::bf16, DataType::BF16);

/// Applies a compute kernel to one element the way a GPU kernel does: `x` and the state
/// loaded into [`Element::Acc`], the statements evaluated there, the result and the state
/// rounded back. `scratch` holds the widened state (one per state buffer).
#[inline]
pub fn apply_kernel<T: Element>(
    kernel: &Kernel,
    x: T,
    state: &mut [T],
    scratch: &mut [T::Acc],
    index: u64,
) -> T {
    for (w, s) in scratch.iter_mut().zip(state.iter()) {
        *w = s.widen();
    }
    let out = kernel.apply(x.widen(), scratch, index);
    for (s, w) in state.iter_mut().zip(scratch.iter()) {
        *s = T::narrow(*w);
    }
    T::narrow(out)
}

/// Applies the operator to two values.
#[inline(always)]
pub fn combine<T: Element>(op: ReduceOp, a: T, b: T) -> T {
    match op {
        ReduceOp::Sum => T::add(a, b),
        ReduceOp::Min => T::min(a, b),
        ReduceOp::Max => T::max(a, b),
    }
}

/// `acc[i] = acc[i] ⊕ x[i]`, with the operator chosen outside the loop so it vectorizes.
pub fn reduce_into<T: Element>(op: ReduceOp, acc: &mut [T], x: &[T]) {
    fn go<T: Element>(acc: &mut [T], x: &[T], f: impl Fn(T, T) -> T) {
        for (a, b) in acc.iter_mut().zip(x) {
            *a = f(*a, *b);
        }
    }
    match op {
        ReduceOp::Sum => go(acc, x, T::add),
        ReduceOp::Min => go(acc, x, T::min),
        ReduceOp::Max => go(acc, x, T::max),
    }
}

/// `out[i] = a[i] ⊕ b[i]`.
pub fn reduce_to<T: Element>(op: ReduceOp, out: &mut [T], a: &[T], b: &[T]) {
    fn go<T: Element>(out: &mut [T], a: &[T], b: &[T], f: impl Fn(T, T) -> T) {
        for ((o, x), y) in out.iter_mut().zip(a).zip(b) {
            *o = f(*x, *y);
        }
    }
    match op {
        ReduceOp::Sum => go(out, a, b, T::add),
        ReduceOp::Min => go(out, a, b, T::min),
        ReduceOp::Max => go(out, a, b, T::max),
    }
}
