//! Element types and reduction kernels of the CPU executor.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Data type of the buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DataType {
    /// 32-bit float (nccl-tests `float`).
    F32,
    /// 64-bit float (nccl-tests `double`).
    F64,
}

impl DataType {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DataType::F32 => 4,
            DataType::F64 => 8,
        }
    }

    /// nccl-tests' name.
    pub fn name(self) -> &'static str {
        match self {
            DataType::F32 => "float",
            DataType::F64 => "double",
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

/// An element type the executor can move and reduce.
pub trait Element:
    Copy + Send + Sync + PartialEq + Default + crate::compute::Real + 'static
{
    /// The runtime data type.
    const TYPE: DataType;
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
}

macro_rules! float_element {
    ($t:ty, $dt:expr) => {
        impl Element for $t {
            const TYPE: DataType = $dt;
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
        }
    };
}

float_element!(f32, DataType::F32);
float_element!(f64, DataType::F64);

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
