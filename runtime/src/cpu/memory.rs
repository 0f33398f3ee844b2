//! The ranks' buffers of the CPU executor, shared by all worker threads through raw
//! pointers (no per-element locking), plus their initialisation and checking.

use super::element::{self, combine, Element, ReduceOp};
use super::plan::{region_chunks, Loc};
use crate::compute::{keep_draw, Kernel, Real};
use crate::ir::{Buffer, Program};
use crate::semantics::{Region, Semantics};
use rayon::prelude::*;

/// A raw view of `len` elements.
#[derive(Clone, Copy)]
pub struct Piece<T> {
    /// First element.
    pub ptr: *mut T,
    /// Number of elements.
    pub len: usize,
}

impl<T> Piece<T> {
    /// A shared view.
    ///
    /// # Safety
    /// No thread may write these elements while the view lives.
    pub unsafe fn into_slice<'a>(self) -> &'a [T] {
        std::slice::from_raw_parts(self.ptr, self.len)
    }

    /// An exclusive view.
    ///
    /// # Safety
    /// No other thread may access these elements, and no other view of them may exist,
    /// while the view lives.
    pub unsafe fn into_mut_slice<'a>(self) -> &'a mut [T] {
        std::slice::from_raw_parts_mut(self.ptr, self.len)
    }
}

/// One heap region owned through a raw pointer.
struct RawRegion<T> {
    ptr: *mut T,
    len: usize,
}

impl<T> RawRegion<T> {
    fn new(data: Vec<T>) -> RawRegion<T> {
        let b = data.into_boxed_slice();
        let len = b.len();
        RawRegion {
            ptr: Box::into_raw(b) as *mut T,
            len,
        }
    }
}

impl<T> Drop for RawRegion<T> {
    fn drop(&mut self) {
        // SAFETY: ptr/len come from Box::into_raw of a boxed slice of this length.
        unsafe {
            drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(
                self.ptr, self.len,
            )))
        };
    }
}

/// All ranks' regions plus the logical inputs used for the reference, and for a program
/// with a compute its state buffers (each the output buffer's size on every rank).
pub struct Memory<T> {
    regions: Vec<[RawRegion<T>; 3]>,
    inputs: Vec<Vec<T>>,
    chunk: usize,
    state: Vec<Vec<RawRegion<T>>>,
    kernel: Option<Kernel>,
}

/// The initial value of element `index` of state buffer `buffer` (the same on every rank, as
/// replicated parameters and optimizer state are): a multiple of 1/32 in [0, 1], so Adam's
/// second moment stays non-negative.
pub fn initial_state(buffer: usize, index: u64) -> f64 {
    (keep_draw(0x5EED + buffer as u64, index) % 33) as f64 / 32.0
}

// SAFETY: the regions are plain heap memory; concurrent access is coordinated by the
// executor (race-free programs only, verified before running).
unsafe impl<T: Send> Send for Memory<T> {}
// SAFETY: as above.
unsafe impl<T: Sync> Sync for Memory<T> {}

impl<T: Element> Memory<T> {
    /// Allocates every region poisoned (NaN) and writes random small-integer inputs.
    pub fn new(
        p: &Program,
        sem: &Semantics,
        chunk: usize,
        seed: u64,
        kernel: Option<Kernel>,
    ) -> Memory<T> {
        let in_chunks = sem.extent(Buffer::Input).unwrap_or(0);
        let inputs: Vec<Vec<T>> = (0..p.ngpus)
            .into_par_iter()
            .map(|rank| {
                random_small(
                    in_chunks * chunk,
                    seed.wrapping_mul(1_000_003).wrapping_add(rank as u64),
                )
            })
            .collect();
        let regions = (0..p.ngpus)
            .map(|rank| {
                Region::ALL.map(|r| {
                    RawRegion::new(vec![T::poison(); region_chunks(p, sem, rank, r) * chunk])
                })
            })
            .collect();
        let out_len = sem.extent(Buffer::Output).unwrap_or(0) * chunk;
        let buffers = kernel.as_ref().map_or(0, |k| k.buffers.len());
        let state = (0..p.ngpus)
            .map(|_| {
                (0..buffers)
                    .map(|b| {
                        RawRegion::new(
                            (0..out_len as u64)
                                .map(|i| T::from_f64(initial_state(b, i)))
                                .collect(),
                        )
                    })
                    .collect()
            })
            .collect();
        let mem = Memory {
            regions,
            inputs,
            chunk,
            state,
            kernel,
        };
        for rank in 0..p.ngpus {
            for k in 0..in_chunks {
                let (region, idx) = sem.resolve(rank, Buffer::Input, k).expect("inside extent");
                // A custom collective may start a chunk with another rank's data.
                let value = sem.initial_input(rank, k);
                let src = &mem.inputs[value.rank][value.chunk * chunk..(value.chunk + 1) * chunk];
                let loc = Loc {
                    region: region.index(),
                    chunk: idx,
                };
                // SAFETY: no worker threads exist yet.
                unsafe { mem.piece(rank, loc, idx * chunk, chunk).into_mut_slice() }
                    .copy_from_slice(src);
            }
        }
        mem
    }

    /// A raw view of `len` elements of a rank's region starting at element `start`.
    pub fn piece(&self, rank: usize, loc: Loc, start: usize, len: usize) -> Piece<T> {
        let r = &self.regions[rank][loc.region];
        assert!(start + len <= r.len, "planned access outside its region");
        // SAFETY: in bounds (checked above).
        Piece {
            ptr: unsafe { r.ptr.add(start) },
            len,
        }
    }

    /// The compute's kernel, if the program has one.
    pub fn kernel(&self) -> Option<&Kernel> {
        self.kernel.as_ref()
    }

    /// A raw view of `len` elements of a rank's state buffer from element `start`.
    pub fn state_piece(&self, rank: usize, buffer: usize, start: usize, len: usize) -> Piece<T> {
        let r = &self.state[rank][buffer];
        assert!(start + len <= r.len, "compute outside the output buffer");
        // SAFETY: in bounds (checked above).
        Piece {
            ptr: unsafe { r.ptr.add(start) },
            len,
        }
    }

    /// A rank's output buffer, as f64.
    pub fn output(&self, sem: &Semantics, rank: usize) -> Vec<f64> {
        let c = self.chunk;
        let mut out = Vec::new();
        for k in 0..sem.extent(Buffer::Output).unwrap_or(0) {
            let (region, idx) = sem.resolve(rank, Buffer::Output, k).expect("inside extent");
            let loc = Loc {
                region: region.index(),
                chunk: idx,
            };
            // SAFETY: called between runs, when no worker touches memory.
            let piece = unsafe { self.piece(rank, loc, idx * c, c).into_slice() };
            out.extend(piece.iter().map(|v| v.widen().to_f64()));
        }
        out
    }

    /// Counts output elements that differ from the collective's reference result.
    pub fn count_wrong(&self, sem: &Semantics, op: ReduceOp) -> usize {
        let out_chunks = sem.extent(Buffer::Output).unwrap_or(0);
        (0..sem.ngpus)
            .into_par_iter()
            .map(|rank| {
                (0..out_chunks)
                    .map(|k| self.wrong_in_chunk(sem, op, rank, k))
                    .sum::<usize>()
            })
            .sum()
    }

    fn wrong_in_chunk(&self, sem: &Semantics, op: ReduceOp, rank: usize, k: usize) -> usize {
        let Some(expected) = sem.expected_output(rank, k) else {
            return 0;
        };
        let (region, idx) = sem.resolve(rank, Buffer::Output, k).expect("inside extent");
        let c = self.chunk;
        let loc = Loc {
            region: region.index(),
            chunk: idx,
        };
        // SAFETY: called between runs, when no worker touches memory.
        let actual = unsafe { self.piece(rank, loc, idx * c, c).into_slice() };
        let source = |e: usize| {
            &self.inputs[expected[e].rank][expected[e].chunk * c..(expected[e].chunk + 1) * c]
        };
        if expected.len() == 1 && self.kernel.is_none() {
            return actual.iter().zip(source(0)).filter(|(a, b)| a != b).count();
        }
        let mut wrong = 0;
        let mut reference = Vec::with_capacity(c.min(1 << 16));
        for start in (0..c).step_by(1 << 16) {
            let end = (start + (1 << 16)).min(c);
            reference.clear();
            reference.extend_from_slice(&source(0)[start..end]);
            for e in 1..expected.len() {
                for (a, b) in reference.iter_mut().zip(&source(e)[start..end]) {
                    *a = combine(op, *a, *b);
                }
            }
            if let Some(kernel) = &self.kernel {
                // The plain schedule: the compute on the whole reduced buffer, from the
                // initial state, in the same element type.
                let mut state = vec![T::default(); kernel.buffers.len()];
                let mut scratch = vec![T::Acc::of(0.0); kernel.buffers.len()];
                for (i, a) in reference.iter_mut().enumerate() {
                    let index = (k * c + start + i) as u64;
                    for (b, s) in state.iter_mut().enumerate() {
                        *s = T::from_f64(initial_state(b, index));
                    }
                    *a = element::apply_kernel(kernel, *a, &mut state, &mut scratch, index);
                }
            }
            wrong += actual[start..end]
                .iter()
                .zip(&reference)
                .filter(|(a, b)| a != b)
                .count();
        }
        wrong
    }
}

/// `len` random integers in -32..=32 (exact in any float type), from a splitmix64 stream:
/// fast enough to fill gigabytes.
fn random_small<T: Element>(len: usize, seed: u64) -> Vec<T> {
    let mut state = seed;
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        for k in 0..8 {
            if out.len() == len {
                break;
            }
            let byte = ((z >> (8 * k)) & 0xFF) as i32;
            out.push(T::from_small(byte % 65 - 32));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builders::ring_allgather;

    #[test]
    fn poisoned_outputs_count_as_wrong_until_written() {
        let p = ring_allgather(&[0, 1, 2], 1, false);
        let sem = Semantics::of(&p, false).unwrap();
        let chunk = 4;
        let mem = Memory::<f32>::new(&p, &sem, chunk, 7, None);
        assert_eq!(mem.count_wrong(&sem, ReduceOp::Sum), 3 * 3 * chunk);
        for rank in 0..3 {
            for k in 0..3 {
                let loc = Loc {
                    region: Region::Recv.index(),
                    chunk: k,
                };
                let value = mem.inputs[k][..chunk].to_vec();
                // SAFETY: single-threaded test.
                unsafe { mem.piece(rank, loc, k * chunk, chunk).into_mut_slice() }
                    .copy_from_slice(&value);
            }
        }
        assert_eq!(mem.count_wrong(&sem, ReduceOp::Sum), 0);
        // One flipped element is one wrong element.
        let loc = Loc {
            region: Region::Recv.index(),
            chunk: 1,
        };
        // SAFETY: single-threaded test.
        let cell = unsafe { mem.piece(2, loc, chunk + 1, 1).into_mut_slice() };
        cell[0] += 1.0;
        assert_eq!(mem.count_wrong(&sem, ReduceOp::Sum), 1);
    }
}
