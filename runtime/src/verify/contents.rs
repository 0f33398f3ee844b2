//! The arena of buffer contents the symbolic execution builds: sorted sets of
//! contributions, each contribution packed in 8 bytes (rank and chunk, 32 bits each) and
//! every content stored one after the other in one array. A 1024-rank reduce-scatter makes
//! millions of partial sums of up to 1024 contributions: boxed lists of 16-byte
//! contributions took gigabytes of freshly faulted memory and a sort per reduction; here a
//! sum is one linear merge appended to the array.

use crate::semantics::Contribution;

/// A content's id in the arena.
pub(super) type ContentId = u32;

/// Sorted, duplicate-free sets of contributions, by id, in blocks of [`BLOCK`] packed
/// contributions (a growing single array would copy itself into fresh memory at every
/// doubling).
#[derive(Default)]
pub(super) struct Arena {
    blocks: Vec<Vec<u64>>,
    spans: Vec<Span>,
    /// Scratch space of one sum.
    sum: Vec<u64>,
}

/// Where a content lies: its block, its start there and its length.
#[derive(Clone, Copy)]
struct Span {
    block: u32,
    start: u32,
    len: u32,
}

/// Contributions per block (8 MiB); a larger content gets a block of its own.
const BLOCK: usize = 1 << 20;

/// Bytes one content costs beside its contributions (its span).
pub(super) const CONTENT_BYTES: u64 = std::mem::size_of::<Span>() as u64;

/// Bytes one contribution costs.
pub(super) const CONTRIBUTION_BYTES: u64 = 8;

/// A contribution in 8 bytes, ordered as [`Contribution`] is (rank, then chunk); `None`
/// past 32 bits.
pub(super) fn pack(c: Contribution) -> Option<u64> {
    let rank = u32::try_from(c.rank).ok()?;
    let chunk = u32::try_from(c.chunk).ok()?;
    Some((rank as u64) << 32 | chunk as u64)
}

/// The contribution packed in `x`.
pub(super) fn unpack(x: u64) -> Contribution {
    Contribution {
        rank: (x >> 32) as usize,
        chunk: (x & u32::MAX as u64) as usize,
    }
}

impl Arena {
    /// Number of contents.
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    /// The packed contributions of content `id`, if there is one.
    pub fn get(&self, id: ContentId) -> Option<&[u64]> {
        let span = self.spans.get(id as usize)?;
        let start = span.start as usize;
        Some(&self.blocks[span.block as usize][start..start + span.len as usize])
    }

    /// Adds a content holding `contents` (sorted, without repeats).
    fn push(&mut self, contents: &[u64]) -> ContentId {
        let fits = self
            .blocks
            .last()
            .is_some_and(|b| b.capacity() - b.len() >= contents.len());
        if !fits {
            self.blocks
                .push(Vec::with_capacity(BLOCK.max(contents.len())));
        }
        let block = self.blocks.len() - 1;
        let last = &mut self.blocks[block];
        self.spans.push(Span {
            block: block as u32,
            start: last.len() as u32,
            len: contents.len() as u32,
        });
        last.extend_from_slice(contents);
        (self.spans.len() - 1) as ContentId
    }

    /// Adds the content holding `packed` alone.
    pub fn push_one(&mut self, packed: u64) -> ContentId {
        self.push(&[packed])
    }

    /// Adds the sum of contents `a` and `b` (an unknown id is empty); returns its id and the
    /// first contribution in both, which the sum holds once.
    pub fn push_sum(&mut self, a: ContentId, b: ContentId) -> (ContentId, Option<Contribution>) {
        let mut sum = std::mem::take(&mut self.sum);
        sum.clear();
        let (x, y) = (self.get(a).unwrap_or(&[]), self.get(b).unwrap_or(&[]));
        let (mut i, mut j) = (0, 0);
        let mut twice = None;
        while i < x.len() && j < y.len() {
            if x[i] <= y[j] {
                if x[i] == y[j] {
                    twice.get_or_insert(unpack(x[i]));
                    j += 1;
                }
                sum.push(x[i]);
                i += 1;
            } else {
                sum.push(y[j]);
                j += 1;
            }
        }
        sum.extend_from_slice(&x[i..]);
        sum.extend_from_slice(&y[j..]);
        let id = self.push(&sum);
        self.sum = sum;
        (id, twice)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(rank: usize, chunk: usize) -> Contribution {
        Contribution { rank, chunk }
    }

    #[test]
    fn sums_merge_in_order_and_report_the_first_double() {
        let mut arena = Arena::default();
        let ids: Vec<ContentId> = [c(2, 0), c(0, 5), c(1, 0)]
            .iter()
            .map(|&x| arena.push_one(pack(x).unwrap()))
            .collect();
        let (ab, twice) = arena.push_sum(ids[0], ids[1]);
        assert_eq!(twice, None);
        let (abc, _) = arena.push_sum(ids[2], ab);
        let got: Vec<Contribution> = arena.get(abc).unwrap().iter().map(|&x| unpack(x)).collect();
        assert_eq!(got, vec![c(0, 5), c(1, 0), c(2, 0)]);
        // Summing (0,5) and (2,0) in again: both doubled, the first reported, kept once.
        let (again, twice) = arena.push_sum(abc, ab);
        assert_eq!(twice, Some(c(0, 5)));
        assert_eq!(arena.get(again).unwrap(), arena.get(abc).unwrap());
        // An unwritten slot is empty.
        let (same, twice) = arena.push_sum(u32::MAX, ids[0]);
        assert_eq!(
            (arena.get(same).unwrap(), twice),
            (arena.get(ids[0]).unwrap(), None)
        );
        assert_eq!(arena.len(), 7);
        assert_eq!(pack(c(1 << 32, 0)), None);
    }
}
