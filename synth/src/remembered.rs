//! The answers of a pure, costly function for its last few inputs, shared by a run's threads:
//! one home for the searches that an allreduce's halves, NCCL's baselines and the tuner would
//! otherwise repeat on the same fabric (ring searches, cycle packings, whole-tree packings).

use std::sync::{Mutex, MutexGuard};

/// The last `capacity` inputs of a function and its answers, the latest at the end.
pub struct Remembered<K, V> {
    capacity: usize,
    kept: Mutex<Vec<(K, V)>>,
}

impl<K, V: Clone> Remembered<K, V> {
    /// Nothing kept yet; at most `capacity` answers later.
    pub const fn new(capacity: usize) -> Remembered<K, V> {
        Remembered {
            capacity,
            kept: Mutex::new(Vec::new()),
        }
    }

    /// The answer kept for an input that `same` accepts.
    pub fn find(&self, same: impl Fn(&K) -> bool) -> Option<V> {
        let kept = self.lock();
        kept.iter().find(|(k, _)| same(k)).map(|(_, v)| v.clone())
    }

    /// Keeps `value` for `key`, unless an input that `same` accepts is kept already (another
    /// thread answered it meanwhile); the oldest answer goes past the capacity.
    pub fn keep(&self, key: K, value: V, same: impl Fn(&K) -> bool) {
        let mut kept = self.lock();
        if kept.iter().any(|(k, _)| same(k)) {
            return;
        }
        if kept.len() >= self.capacity {
            kept.remove(0);
        }
        kept.push((key, value));
    }

    fn lock(&self) -> MutexGuard<'_, Vec<(K, V)>> {
        self.kept.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_answer_goes_past_the_capacity() {
        let kept: Remembered<u32, &str> = Remembered::new(2);
        kept.keep(1, "one", |k| *k == 1);
        kept.keep(2, "two", |k| *k == 2);
        kept.keep(2, "again", |k| *k == 2);
        assert_eq!(kept.find(|k| *k == 2), Some("two"));
        kept.keep(3, "three", |k| *k == 3);
        assert_eq!(kept.find(|k| *k == 1), None);
        assert_eq!(kept.find(|k| *k == 3), Some("three"));
    }
}
