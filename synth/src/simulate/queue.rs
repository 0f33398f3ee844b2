//! A min-priority queue over the items `0..n` whose keys change (an indexed binary heap):
//! the simulator keeps one entry per class (its next end) and per link (its next arrival)
//! here and moves it when the key changes, so outdated entries never pile up.

/// The queue; ties between equal keys go to the smaller item.
pub struct IndexedHeap {
    /// Items in heap order.
    heap: Vec<usize>,
    /// Position of each item in `heap` (`usize::MAX`: not queued).
    pos: Vec<usize>,
    key: Vec<f64>,
}

impl IndexedHeap {
    /// An empty queue for items `0..n`.
    pub fn new(n: usize) -> IndexedHeap {
        IndexedHeap {
            heap: Vec::new(),
            pos: vec![usize::MAX; n],
            key: vec![0.0; n],
        }
    }

    /// The item with the smallest key, and its key.
    pub fn peek(&self) -> Option<(usize, f64)> {
        self.heap.first().map(|&i| (i, self.key[i]))
    }

    /// Queues `item` with `key`, or moves it there if it is queued.
    pub fn set(&mut self, item: usize, key: f64) {
        self.key[item] = key;
        if self.pos[item] == usize::MAX {
            self.pos[item] = self.heap.len();
            self.heap.push(item);
        }
        let at = self.pos[item];
        let at = self.up(at);
        self.down(at);
    }

    /// Takes `item` out of the queue (nothing if it is not queued).
    pub fn remove(&mut self, item: usize) {
        let at = self.pos[item];
        if at == usize::MAX {
            return;
        }
        let last = self.heap.len() - 1;
        self.swap(at, last);
        self.heap.pop();
        self.pos[item] = usize::MAX;
        if at < self.heap.len() {
            let at = self.up(at);
            self.down(at);
        }
    }

    fn less(&self, a: usize, b: usize) -> bool {
        let (x, y) = (self.heap[a], self.heap[b]);
        match self.key[x].total_cmp(&self.key[y]) {
            std::cmp::Ordering::Equal => x < y,
            o => o.is_lt(),
        }
    }

    fn swap(&mut self, a: usize, b: usize) {
        self.heap.swap(a, b);
        self.pos[self.heap[a]] = a;
        self.pos[self.heap[b]] = b;
    }

    fn up(&mut self, mut at: usize) -> usize {
        while at > 0 {
            let parent = (at - 1) / 2;
            if !self.less(at, parent) {
                break;
            }
            self.swap(at, parent);
            at = parent;
        }
        at
    }

    fn down(&mut self, mut at: usize) -> usize {
        loop {
            let (l, r) = (2 * at + 1, 2 * at + 2);
            let mut best = at;
            if l < self.heap.len() && self.less(l, best) {
                best = l;
            }
            if r < self.heap.len() && self.less(r, best) {
                best = r;
            }
            if best == at {
                return at;
            }
            self.swap(at, best);
            at = best;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_move_and_the_smallest_comes_first() {
        let mut q = IndexedHeap::new(5);
        for (i, k) in [(0, 5.0), (1, 3.0), (2, 4.0), (3, 3.0)] {
            q.set(i, k);
        }
        assert_eq!(q.peek(), Some((1, 3.0)), "ties go to the smaller item");
        q.set(1, 6.0);
        assert_eq!(q.peek(), Some((3, 3.0)));
        q.remove(3);
        q.remove(4);
        assert_eq!(q.peek(), Some((2, 4.0)));
        q.set(0, 1.0);
        let mut order = Vec::new();
        while let Some((i, _)) = q.peek() {
            order.push(i);
            q.remove(i);
        }
        assert_eq!(order, vec![0, 2, 1]);
    }
}
