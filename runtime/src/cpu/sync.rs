//! Synchronisation of the CPU executor: bounded message FIFOs (one per connection) and
//! per-threadblock progress counters that other threadblocks wait on.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

/// Spins before a waiter blocks in the kernel.
const SPINS: usize = 200;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

struct FifoState<T> {
    queue: VecDeque<Vec<T>>,
    free: Vec<Vec<T>>,
}

/// A bounded FIFO of messages between one sending and one receiving threadblock. Message
/// buffers are recycled so steady state allocates nothing.
pub struct Fifo<T> {
    depth: usize,
    state: Mutex<FifoState<T>>,
    changed: Condvar,
}

impl<T> Fifo<T> {
    /// A FIFO that holds `depth` messages.
    pub fn new(depth: usize) -> Fifo<T> {
        Fifo {
            depth: depth.max(1),
            state: Mutex::new(FifoState {
                queue: VecDeque::new(),
                free: Vec::new(),
            }),
            changed: Condvar::new(),
        }
    }

    /// An empty buffer to fill (recycled when possible).
    pub fn buffer(&self, capacity: usize) -> Vec<T> {
        let mut b = lock(&self.state).free.pop().unwrap_or_default();
        b.clear();
        b.reserve(capacity);
        b
    }

    /// Gives a consumed buffer back for reuse.
    pub fn recycle(&self, buf: Vec<T>) {
        let mut st = lock(&self.state);
        if st.free.len() <= self.depth {
            st.free.push(buf);
        }
    }

    /// Appends a message, waiting while the FIFO is full.
    pub fn push(&self, msg: Vec<T>) {
        let mut st = lock(&self.state);
        while st.queue.len() >= self.depth {
            st = self
                .changed
                .wait(st)
                .unwrap_or_else(PoisonError::into_inner);
        }
        st.queue.push_back(msg);
        drop(st);
        self.changed.notify_all();
    }

    /// Takes the oldest message, waiting while the FIFO is empty.
    pub fn pop(&self) -> Vec<T> {
        let mut st = lock(&self.state);
        loop {
            if let Some(m) = st.queue.pop_front() {
                drop(st);
                self.changed.notify_all();
                return m;
            }
            st = self
                .changed
                .wait(st)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }
}

/// A monotone progress counter of one threadblock that others can wait on.
pub struct Progress {
    value: AtomicU64,
    sleepers: AtomicUsize,
    lock: Mutex<()>,
    wake: Condvar,
}

impl Default for Progress {
    fn default() -> Self {
        Progress {
            value: AtomicU64::new(0),
            sleepers: AtomicUsize::new(0),
            lock: Mutex::new(()),
            wake: Condvar::new(),
        }
    }
}

impl Progress {
    /// Publishes a new (larger) value and wakes waiters.
    pub fn publish(&self, v: u64) {
        self.value.store(v, Ordering::SeqCst);
        if self.sleepers.load(Ordering::SeqCst) > 0 {
            let _g = lock(&self.lock);
            self.wake.notify_all();
        }
    }

    /// Waits until the value is at least `target`.
    pub fn wait_for(&self, target: u64) {
        for i in 0..SPINS {
            if self.value.load(Ordering::Acquire) >= target {
                return;
            }
            if i % 16 == 15 {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        let mut g = lock(&self.lock);
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        while self.value.load(Ordering::SeqCst) < target {
            g = self.wake.wait(g).unwrap_or_else(PoisonError::into_inner);
        }
        self.sleepers.fetch_sub(1, Ordering::SeqCst);
    }
}
