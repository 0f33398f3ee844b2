//! A dense set of (address, rank) pairs, one bit each: replaying a 1024-rank algorithm
//! touches millions of pairs, which a hash set holds slowly and in gigabytes.

use rustc_hash::FxHashMap;

/// A set of (address, rank) pairs over known addresses and ranks `0..ranks`.
#[derive(Debug, Clone)]
pub struct PairSet {
    /// Dense index of each address.
    index: FxHashMap<usize, usize>,
    ranks: usize,
    bits: Vec<u64>,
}

impl PairSet {
    /// An empty set over `addresses` (repeats ignored) and ranks `0..ranks`.
    pub fn new(addresses: impl IntoIterator<Item = usize>, ranks: usize) -> PairSet {
        let mut index = FxHashMap::default();
        for a in addresses {
            let next = index.len();
            index.entry(a).or_insert(next);
        }
        let bits = vec![0u64; (index.len() * ranks).div_ceil(64)];
        PairSet { index, ranks, bits }
    }

    /// Position of the pair (the address's dense index × ranks + rank), if the address is
    /// known and the rank in range (an algorithm file may name any rank).
    pub fn position(&self, address: usize, rank: usize) -> Option<usize> {
        self.index
            .get(&address)
            .filter(|_| rank < self.ranks)
            .map(|&a| a * self.ranks + rank)
    }

    /// Whether the pair at `position` is in the set.
    pub fn contains_at(&self, position: usize) -> bool {
        self.bits[position / 64] >> (position % 64) & 1 == 1
    }

    /// Adds the pair at `position`; true if it was not there.
    pub fn insert_at(&mut self, position: usize) -> bool {
        let (word, bit) = (position / 64, 1u64 << (position % 64));
        let new = self.bits[word] & bit == 0;
        self.bits[word] |= bit;
        new
    }

    /// Removes the pair at `position`.
    pub fn remove_at(&mut self, position: usize) {
        self.bits[position / 64] &= !(1u64 << (position % 64));
    }

    /// Whether (`address`, `rank`) is in the set (never, for an unknown address or rank).
    pub fn contains(&self, address: usize, rank: usize) -> bool {
        self.position(address, rank)
            .is_some_and(|p| self.contains_at(p))
    }

    /// Adds (`address`, `rank`); true if it was not there (false, and nothing added, for an
    /// unknown address or rank).
    pub fn insert(&mut self, address: usize, rank: usize) -> bool {
        self.position(address, rank)
            .is_some_and(|p| self.insert_at(p))
    }
}

#[cfg(test)]
mod tests {
    use super::PairSet;

    #[test]
    fn pairs_are_kept_per_address_and_rank() {
        let mut set = PairSet::new([70, 3, 70, 9], 100);
        assert!(set.insert(3, 99));
        assert!(!set.insert(3, 99));
        assert!(set.contains(3, 99) && !set.contains(70, 99) && !set.contains(3, 98));
        // Unknown addresses and ranks out of range are never in the set.
        assert!(!set.insert(4, 0) && !set.contains(4, 0));
        assert!(!set.insert(3, 100) && !set.contains(3, 100));
        let p = set.position(9, 5).unwrap();
        assert_eq!(p, 2 * 100 + 5);
        assert!(set.insert_at(p) && set.contains(9, 5));
        set.remove_at(p);
        assert!(!set.contains(9, 5) && set.contains(3, 99));
    }
}
