//! Element types of the CUDA executor (f32, f16, bf16 as raw bits on the host), the random
//! inputs and the reference check. Pure logic.
//!
//! Inputs are small integers (exact in every type, and so are their sums under any order as
//! long as `ngpus × max |input|` stays within the type's exact integer range), derived from a
//! hash of (seed, rank, element) so that the reference needs no stored copy of the inputs.

use crate::compute::Kernel;
use crate::ir::Buffer;
use crate::semantics::Semantics;
use std::fmt;

/// Element type of a GPU run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dtype {
    /// 32-bit float.
    F32,
    /// IEEE half.
    F16,
    /// bfloat16.
    BF16,
}

impl Dtype {
    /// Every type.
    pub const ALL: [Dtype; 3] = [Dtype::F32, Dtype::F16, Dtype::BF16];

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            Dtype::F32 => 4,
            Dtype::F16 | Dtype::BF16 => 2,
        }
    }

    /// nccl-tests' name.
    pub fn name(self) -> &'static str {
        match self {
            Dtype::F32 => "float",
            Dtype::F16 => "half",
            Dtype::BF16 => "bfloat16",
        }
    }

    /// The suffix of the reduction kernels' names.
    pub fn kernel_suffix(self) -> &'static str {
        match self {
            Dtype::F32 => "f32",
            Dtype::F16 => "f16",
            Dtype::BF16 => "bf16",
        }
    }

    /// Parses `f32`/`float`, `f16`/`half`, `bf16`/`bfloat16`.
    pub fn parse(s: &str) -> Option<Dtype> {
        match s {
            "f32" | "float" => Some(Dtype::F32),
            "f16" | "half" => Some(Dtype::F16),
            "bf16" | "bfloat16" => Some(Dtype::BF16),
            _ => None,
        }
    }

    /// Largest |input| so that every partial sum over `ngpus` inputs is exact.
    pub fn input_bound(self, ngpus: usize) -> i32 {
        let exact: i32 = match self {
            Dtype::F32 => 1 << 24,
            Dtype::F16 => 1 << 11,
            Dtype::BF16 => 1 << 8,
        };
        (exact / ngpus.max(1) as i32).clamp(1, 32)
    }

    /// The NaN bit pattern used to poison outputs (as 32 or 16 bits).
    pub fn poison_bits(self) -> u32 {
        match self {
            Dtype::F32 => 0x7fc0_0000,
            Dtype::F16 => 0x7e00,
            Dtype::BF16 => 0x7fc0,
        }
    }

    /// Appends the encoding of an exactly representable value.
    pub fn encode(self, v: f32, out: &mut Vec<u8>) {
        match self {
            Dtype::F32 => out.extend_from_slice(&v.to_le_bytes()),
            Dtype::F16 => out.extend_from_slice(&f32_to_f16(v).to_le_bytes()),
            Dtype::BF16 => out.extend_from_slice(&((v.to_bits() >> 16) as u16).to_le_bytes()),
        }
    }

    /// `v` rounded to the type (to nearest even), as a GPU kernel stores an f32 result.
    pub fn round(self, v: f32) -> f32 {
        match self {
            Dtype::F32 => v,
            Dtype::F16 => half::f16::from_f32(v).to_f32(),
            Dtype::BF16 => half::bf16::from_f32(v).to_f32(),
        }
    }

    /// Decodes element `i` of a byte buffer.
    pub fn decode(self, bytes: &[u8], i: usize) -> f32 {
        match self {
            Dtype::F32 => f32::from_le_bytes(bytes[4 * i..4 * i + 4].try_into().expect("4")),
            Dtype::F16 => f16_to_f32(u16::from_le_bytes(
                bytes[2 * i..2 * i + 2].try_into().expect("2"),
            )),
            Dtype::BF16 => f32::from_bits(
                (u16::from_le_bytes(bytes[2 * i..2 * i + 2].try_into().expect("2")) as u32) << 16,
            ),
        }
    }
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// f32 → f16 bits, round to nearest even (normal and subnormal range, ±inf, NaN).
pub fn f32_to_f16(v: f32) -> u16 {
    let x = v.to_bits();
    let sign = ((x >> 16) & 0x8000) as u16;
    let exp = ((x >> 23) & 0xff) as i32;
    let man = x & 0x7f_ffff;
    if exp == 0xff {
        return sign | 0x7c00 | if man != 0 { 0x200 } else { 0 };
    }
    let e = exp - 127 + 15;
    if e >= 0x1f {
        return sign | 0x7c00;
    }
    if e <= 0 {
        if e < -10 {
            return sign;
        }
        let m = man | 0x80_0000;
        let shift = (14 - e) as u32;
        let half = 1u32 << (shift - 1);
        let rest = m & ((1 << shift) - 1);
        let mut r = m >> shift;
        if rest > half || (rest == half && r & 1 == 1) {
            r += 1;
        }
        return sign | r as u16;
    }
    let mut r = ((e as u32) << 10) | (man >> 13);
    let rest = man & 0x1fff;
    if rest > 0x1000 || (rest == 0x1000 && r & 1 == 1) {
        r += 1;
    }
    sign | r as u16
}

/// f16 bits → f32 (exact).
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = if h & 0x8000 != 0 { -1.0f32 } else { 1.0 };
    let exp = ((h >> 10) & 0x1f) as i32;
    let man = (h & 0x3ff) as f32;
    match exp {
        0 => sign * man * (2.0f32).powi(-24),
        0x1f if man == 0.0 => sign * f32::INFINITY,
        0x1f => f32::NAN,
        _ => sign * (1.0 + man / 1024.0) * (2.0f32).powi(exp - 15),
    }
}

/// The input value of element `index` of `rank`'s logical input buffer: an integer in
/// `-bound..=bound`.
pub fn input_value(seed: u64, rank: usize, index: usize, bound: i32) -> f32 {
    let mut z = seed
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add((rank as u64) << 40)
        .wrapping_add(index as u64);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    let span = 2 * bound as u64 + 1;
    ((z % span) as i64 - bound as i64) as f32
}

/// Encoded contents of logical input chunk `k` of `rank` (`chunk` elements).
pub fn input_chunk(
    dtype: Dtype,
    seed: u64,
    rank: usize,
    k: usize,
    chunk: usize,
    bound: i32,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(chunk * dtype.size());
    for e in 0..chunk {
        dtype.encode(input_value(seed, rank, k * chunk + e, bound), &mut out);
    }
    out
}

/// Counts the wrong elements of logical output chunk `k` of `rank`, given its bytes.
/// Unconstrained chunks count as right. With the program's compute `kernel`, the reference
/// is the plain schedule's, as the CPU executor computes it: the kernel on the reduced
/// element and the initial state ([`crate::cpu::initial_state`]) in f32, rounded to the type.
#[allow(clippy::too_many_arguments)]
pub fn wrong_in_output_chunk(
    sem: &Semantics,
    dtype: Dtype,
    seed: u64,
    rank: usize,
    k: usize,
    chunk: usize,
    bound: i32,
    kernel: Option<&Kernel>,
    bytes: &[u8],
) -> usize {
    let Some(expected) = sem.expected_output(rank, k) else {
        return 0;
    };
    debug_assert!(sem.extent(Buffer::Output).is_some());
    let mut state = Vec::new();
    (0..chunk)
        .filter(|&e| {
            let mut want: f32 = expected
                .iter()
                .map(|c| input_value(seed, c.rank, c.chunk * chunk + e, bound))
                .sum();
            if let Some(kernel) = kernel {
                let index = (k * chunk + e) as u64;
                state.clear();
                state.extend(
                    (0..kernel.buffers.len())
                        .map(|b| dtype.round(crate::cpu::initial_state(b, index) as f32)),
                );
                want = dtype.round(kernel.apply(want, &mut state, index));
            }
            let got = dtype.decode(bytes, e);
            got != want
        })
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_conversions_are_exact_on_small_integers() {
        for v in -2048..=2048 {
            let f = v as f32;
            assert_eq!(f16_to_f32(f32_to_f16(f)), f, "{v}");
        }
        assert_eq!(f32_to_f16(1.0), 0x3c00);
        assert_eq!(f32_to_f16(-2.0), 0xc000);
        assert_eq!(f32_to_f16(65504.0), 0x7bff);
        assert!(f16_to_f32(0x7e00).is_nan());
        assert_eq!(f16_to_f32(0x0001), 2f32.powi(-24));
        assert_eq!(f32_to_f16(2f32.powi(-24)), 1);
    }

    #[test]
    fn encodings_round_trip_and_poison_is_nan() {
        for dt in Dtype::ALL {
            let mut b = Vec::new();
            for v in [-256.0f32, -1.0, 0.0, 3.0, 255.0] {
                dt.encode(v, &mut b);
            }
            let back: Vec<f32> = (0..5).map(|i| dt.decode(&b, i)).collect();
            assert_eq!(back, vec![-256.0, -1.0, 0.0, 3.0, 255.0], "{dt}");
            let mut p = Vec::new();
            match dt.size() {
                4 => p.extend_from_slice(&dt.poison_bits().to_le_bytes()),
                _ => p.extend_from_slice(&(dt.poison_bits() as u16).to_le_bytes()),
            }
            assert!(dt.decode(&p, 0).is_nan(), "{dt}");
            assert_eq!(Dtype::parse(dt.kernel_suffix()), Some(dt));
        }
    }

    #[test]
    fn inputs_stay_within_exact_bounds() {
        assert_eq!(Dtype::BF16.input_bound(8), 32);
        assert_eq!(Dtype::BF16.input_bound(16), 16);
        for i in 0..1000 {
            let v = input_value(3, 1, i, 5);
            assert!((-5.0..=5.0).contains(&v) && v.fract() == 0.0);
        }
        assert_ne!(input_value(3, 0, 7, 32), input_value(3, 0, 8, 32) + 1000.0);
    }
}
