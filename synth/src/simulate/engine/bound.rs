//! A lower bound on a run of the event loop, found without running it: the longest chain
//! of steps that must follow one another (a threadblock's order, its dependencies, a
//! message's send before its receive, each transfer at its connection's full rate and its
//! hop latency), and the most loaded resource at its capacity. The event loop can only take
//! longer: its flows share resources, and senders wait for room in a connection.

use super::{Layout, NONE};
use runtime::ir::Op;

/// What the bound needs of a layout, for every slicing.
pub(in crate::simulate) struct Chains {
    /// Every step in an order that puts it after the steps of its slice it waits for.
    order: Vec<u32>,
    /// The threadblock of each step.
    tb_of: Vec<u32>,
    /// Least time of each step per byte of a slice (µs).
    per_byte: Vec<f64>,
    /// Hop latency of each sending step's message (µs; 0 for the others).
    alpha: Vec<f64>,
    /// For a receiving step, the step that sends its message in the same slice (`NONE`
    /// for the others).
    sender: Vec<u32>,
    /// Time per byte of a chunk that the most loaded resource needs (µs).
    load_per_byte: f64,
    /// The resource class each step's bytes cross (`NONE` for none) and its bytes per byte
    /// of a slice.
    uses: Vec<(u32, f64)>,
}

/// What no slicing of a producer's chunks can beat once its last tile is out
/// ([`Chains::after_last_tile`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(in crate::simulate) struct Drain {
    /// The longest chain of hop latencies from a step reading input to the end (µs).
    pub latency_us: f64,
    /// The least time from the last tile's release to the end (µs).
    pub time_us: f64,
}

impl Chains {
    /// The chains of `layout`, or `None` where its connections carry different numbers of
    /// sends and receives per slice or its steps wait in a cycle (the event loop then pairs
    /// messages across slices or deadlocks; no bound is claimed).
    pub(in crate::simulate) fn new(layout: &Layout) -> Option<Chains> {
        let n = layout.steps.len() - 1;
        let mut tb_of = vec![NONE; n];
        let mut sends: Vec<Vec<u32>> = vec![Vec::new(); layout.conns.len()];
        let mut recvs: Vec<Vec<u32>> = vec![Vec::new(); layout.conns.len()];
        let mut per_byte = vec![0.0; n];
        let mut alpha = vec![0.0; n];
        let mut load = vec![0.0; layout.caps.len()];
        let mut uses = vec![(NONE, 0.0); n];
        for (t, tb) in layout.tbs.iter().enumerate() {
            for i in tb.first as usize..(tb.first + tb.len) as usize {
                tb_of[i] = t as u32;
                let step = layout.steps[i];
                let count = f64::from(step.count);
                let (class, bytes) = if step.op.sends() {
                    let conn = &layout.conns[tb.send_conn as usize];
                    alpha[i] = conn.alpha;
                    (conn.class, count * layout.wire)
                } else if matches!(step.op, Op::Copy | Op::Reduce) {
                    (layout.local_class[tb.rank as usize], count)
                } else if step.op == Op::Compute {
                    let class = layout.local_class[tb.rank as usize];
                    (class, count * layout.compute_weight)
                } else {
                    (NONE as usize, 0.0)
                };
                if step.op.sends() {
                    sends[tb.send_conn as usize].push(i as u32);
                }
                if step.op.receives() {
                    recvs[tb.recv_conn as usize].push(i as u32);
                }
                if class == NONE as usize {
                    continue;
                }
                uses[i] = (class as u32, bytes);
                let list = &layout.resources[class];
                // A flow listing a resource k times gets at most its capacity / k.
                let rate = (list.iter())
                    .map(|&j| layout.caps[j] / list.iter().filter(|&&k| k == j).count() as f64)
                    .fold(f64::INFINITY, f64::min);
                per_byte[i] = bytes / rate;
                for &j in list {
                    load[j] += bytes;
                }
            }
        }
        let mut sender = vec![NONE; n];
        for (s, r) in sends.iter().zip(&recvs) {
            if s.len() != r.len() {
                return None;
            }
            for (&from, &to) in s.iter().zip(r) {
                sender[to as usize] = from;
            }
        }
        let load_per_byte = (load.iter().zip(&layout.caps))
            .map(|(l, c)| l / c)
            .fold(0.0, f64::max);
        let order = topological_order(layout, &tb_of, &sender)?;
        Some(Chains {
            order,
            tb_of,
            per_byte,
            alpha,
            sender,
            load_per_byte,
            uses,
        })
    }

    /// A lower bound on the event loop's time after a producer's last tile is out, under
    /// any slicing. The steps that follow a step reading input in their slice (through
    /// their threadblock's order, dependencies and messages) cannot start, in the slices
    /// holding the last tile (at least `tile_bytes` of every chunk), before it is out; so
    /// at least the longest of these remains: their longest chain of hop latencies, one
    /// threadblock's time on its share of those bytes (its steps run one at a time), and
    /// the most loaded resource's time on them.
    pub(in crate::simulate) fn after_last_tile(&self, layout: &Layout, tile_bytes: f64) -> Drain {
        let n = self.tb_of.len();
        let mut follows = vec![false; n];
        let mut chain = vec![0.0f64; n];
        let mut busy = vec![0.0f64; layout.tbs.len()];
        let mut load = vec![0.0f64; layout.caps.len()];
        for &i in &self.order {
            let i = i as usize;
            let t = self.tb_of[i] as usize;
            let mut before: Vec<(usize, f64)> = (layout.deps_of(i).iter())
                .map(|&(on, step)| ((layout.tbs[on as usize].first + step) as usize, 0.0))
                .collect();
            if i != layout.tbs[t].first as usize {
                before.push((i - 1, 0.0));
            }
            let s = self.sender[i];
            if s != NONE {
                before.push((s as usize, self.alpha[s as usize]));
            }
            let mut follows_input = layout.steps[i].reads_input;
            for (p, lag) in before {
                if follows[p] {
                    follows_input = true;
                    chain[i] = chain[i].max(chain[p] + lag);
                }
            }
            if !follows_input {
                continue;
            }
            follows[i] = true;
            busy[t] += self.per_byte[i] * tile_bytes;
            let (class, bytes) = self.uses[i];
            if class != NONE {
                for &j in &layout.resources[class as usize] {
                    load[j] += bytes * tile_bytes;
                }
            }
        }
        let latency_us = chain.iter().copied().fold(0.0, f64::max);
        let busiest = busy.iter().copied().fold(0.0, f64::max);
        let loaded = (load.iter().zip(&layout.caps))
            .map(|(l, c)| l / c)
            .fold(0.0, f64::max);
        Drain {
            latency_us,
            time_us: latency_us.max(busiest).max(loaded),
        }
    }

    /// A lower bound on the event loop's time (µs) with chunks cut into `slices` (bytes).
    pub(in crate::simulate) fn time_us(&self, layout: &Layout, slices: &[f64]) -> f64 {
        let mut finish = vec![0.0f64; self.tb_of.len()];
        // Each threadblock's last finish, over the slices so far.
        let mut last = vec![0.0f64; layout.tbs.len()];
        for (iter, &bytes) in slices.iter().enumerate() {
            for &i in &self.order {
                let i = i as usize;
                let t = self.tb_of[i] as usize;
                let tb = &layout.tbs[t];
                let mut start = if i == tb.first as usize {
                    last[t]
                } else {
                    finish[i - 1]
                };
                for &(on, step) in layout.deps_of(i) {
                    start = start.max(finish[(layout.tbs[on as usize].first + step) as usize]);
                }
                let s = self.sender[i];
                if s != NONE {
                    start = start.max(finish[s as usize] + self.alpha[s as usize]);
                }
                start = start.max(layout.release(i, iter, slices, None));
                finish[i] = start + self.per_byte[i] * bytes;
            }
            for (t, tb) in layout.tbs.iter().enumerate() {
                if tb.len > 0 {
                    last[t] = finish[(tb.first + tb.len - 1) as usize];
                }
            }
        }
        // A message's arrival ends the run no earlier than its receive step.
        let path = last.iter().copied().fold(0.0, f64::max);
        let total: f64 = slices.iter().sum();
        path.max(self.load_per_byte * total)
    }
}

/// The steps of one slice in an order where each comes after its threadblock's previous
/// step, its dependencies and the sender of its message (Kahn's algorithm); `None` on a
/// cycle.
fn topological_order(layout: &Layout, tb_of: &[u32], sender: &[u32]) -> Option<Vec<u32>> {
    let n = tb_of.len();
    let mut waits = vec![0u32; n];
    // Who waits for each step: its dependents and its receiver, by counting sort.
    let mut first = vec![0usize; n + 1];
    for i in 0..n {
        let tb = &layout.tbs[tb_of[i] as usize];
        waits[i] = u32::from(i != tb.first as usize);
        for &(on, step) in layout.deps_of(i) {
            first[(layout.tbs[on as usize].first + step) as usize + 1] += 1;
            waits[i] += 1;
        }
        if sender[i] != NONE {
            first[sender[i] as usize + 1] += 1;
            waits[i] += 1;
        }
    }
    for i in 0..n {
        first[i + 1] += first[i];
    }
    let mut next = first.clone();
    let mut after = vec![0u32; first[n]];
    for (i, &s) in sender.iter().enumerate() {
        for &(on, step) in layout.deps_of(i) {
            let d = (layout.tbs[on as usize].first + step) as usize;
            after[next[d]] = i as u32;
            next[d] += 1;
        }
        if s != NONE {
            after[next[s as usize]] = i as u32;
            next[s as usize] += 1;
        }
    }
    let mut order: Vec<u32> = (0..n as u32).filter(|&i| waits[i as usize] == 0).collect();
    let mut k = 0;
    while k < order.len() {
        let i = order[k] as usize;
        k += 1;
        let tb = &layout.tbs[tb_of[i] as usize];
        let next_in_tb = (i + 1 < (tb.first + tb.len) as usize).then_some(i + 1);
        for j in (after[first[i]..first[i + 1]].iter().map(|&j| j as usize)).chain(next_in_tb) {
            waits[j] -= 1;
            if waits[j] == 0 {
                order.push(j as u32);
            }
        }
    }
    (order.len() == n).then_some(order)
}
