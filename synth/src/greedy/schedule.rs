//! One greedy run over the time-expanded fabric with link delays: epoch by epoch (one round
//! each), every link carries at most its capacity and every switch constraint at most its
//! capacity, and a chunk sent on link `l` in epoch `t` may be forwarded by its receiver from
//! epoch `t + delay[l]` (all delays 1: the hop model, one step per epoch). Each link keeps a
//! heap of the chunks its source holds that would bring some needing rank closer; within an
//! epoch the sends are chosen globally by priority (the farthest needing rank first, in the
//! distances of the delays, ties broken by a seeded hash), so the busiest and slowest paths
//! start first. Candidates are added when a chunk arrives (event-driven) and re-evaluated
//! lazily when they reach the top of their heap, so no epoch scans all chunks × links.

use super::demand::{Demand, Distances, Hop};
use crate::collective::Collective;
use std::collections::BinaryHeap;
use std::time::Instant;

/// The fabric as the greedy run sees it (shared by all restarts).
pub struct Fabric<'a> {
    /// Number of ranks.
    pub ranks: usize,
    /// Source rank of each link.
    pub src: Vec<usize>,
    /// Destination rank of each link.
    pub dst: Vec<usize>,
    /// Links leaving each rank.
    pub out_links: &'a [Vec<usize>],
    /// Switch constraints governing each link.
    pub governing: &'a [Vec<usize>],
    /// Chunks per step of each link.
    pub link_cap: &'a [u32],
    /// Chunks per step of each switch constraint.
    pub switch_cap: &'a [u32],
    /// Epochs from a send on each link until its receiver may forward the chunk (>= 1).
    pub delay: Vec<u16>,
    /// Distances over the links weighted by `delay` (hops when every delay is 1).
    pub dist: Distances,
    /// Messages a link may have in flight (sent in the last `delay` epochs), as a
    /// connection's FIFO holds them; 0 for no such limit.
    pub fifo: usize,
}

/// A finished run: per epoch, the sends as (chunk index, link id) in the order chosen.
pub struct Schedule {
    /// The epochs (each one round; empty while every useful chunk is still in flight).
    pub steps: Vec<Vec<(u32, u32)>>,
    /// The epoch from which every chunk has arrived: the last send's epoch plus its delay
    /// (the number of epochs when every delay is 1).
    pub makespan: usize,
}

impl Schedule {
    /// Epochs with at least one send (the steps of the listed layout).
    pub fn busy_epochs(&self) -> usize {
        self.steps.iter().filter(|s| !s.is_empty()).count()
    }
}

/// Why a run stopped without finishing.
#[derive(Debug, PartialEq, Eq)]
pub enum Stop {
    /// More epochs with sends than the step limit allows.
    StepCap,
    /// The deadline passed.
    Deadline,
    /// An epoch made no send although demand is left and nothing is in flight (cannot happen
    /// on a connected fabric).
    Stalled,
}

/// SplitMix64: the seeded tie-break of (seed, restart, chunk, link).
#[inline]
pub fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// A heap entry: priority (16 bits), tie-break (16 bits), chunk (32 bits).
#[inline]
fn key(priority: u16, tie: u16, chunk: u32) -> u64 {
    ((priority as u64) << 48) | ((tie as u64) << 32) | chunk as u64
}

#[inline]
fn priority_of(key: u64) -> u16 {
    (key >> 48) as u16
}

/// Runs one greedy schedule. `salt` seeds the tie-breaks (0: none, so ties go to the higher
/// chunk index); chunk c starts on the ranks of `coll.chunks[c].pre`. At most `max_steps`
/// epochs have sends; empty epochs come only while chunks are in flight, so a run lasts at
/// most `max_steps` times the largest delay epochs.
pub fn run(
    fabric: &Fabric,
    demand: Demand,
    coll: &Collective,
    salt: Option<u64>,
    max_steps: usize,
    deadline: Instant,
) -> Result<Schedule, Stop> {
    let links = fabric.src.len();
    let fifo = fabric.fifo;
    // Arrivals by the epoch from which they can be forwarded, modulo the ring's length.
    let ring = fabric.delay.iter().copied().max().unwrap_or(1) as usize + 1;
    let mut run = Run {
        fabric,
        demand,
        salt,
        heaps: vec![BinaryHeap::new(); links],
        link_left: vec![0u32; links],
        switch_left: fabric.switch_cap.to_vec(),
        touched_switches: Vec::new(),
        pending: vec![Vec::new(); ring],
        in_flight: 0,
        makespan: 0,
        recent: vec![NO_SEND; links * fifo],
        recent_at: vec![0; if fifo > 0 { links } else { 0 }],
    };
    for (c, chunk) in coll.chunks.iter().enumerate() {
        for &u in &chunk.pre {
            run.offer(c as u32, u, 0);
        }
    }
    let mut steps: Vec<Vec<(u32, u32)>> = Vec::new();
    let mut busy = 0usize;
    while run.demand.unsatisfied > 0 {
        if busy >= max_steps {
            return Err(Stop::StepCap);
        }
        if Instant::now() >= deadline {
            return Err(Stop::Deadline);
        }
        let t = steps.len();
        let sends = run.epoch(t);
        if sends.is_empty() && run.in_flight == 0 {
            return Err(Stop::Stalled);
        }
        busy += usize::from(!sends.is_empty());
        run.end_epoch(t);
        steps.push(sends);
    }
    Ok(Schedule {
        steps,
        makespan: run.makespan,
    })
}

/// No send, in a link's ring of recent send epochs.
const NO_SEND: u32 = u32::MAX;

/// One greedy run under way (see [`run`]).
struct Run<'f, 'a> {
    fabric: &'f Fabric<'a>,
    demand: Demand,
    salt: Option<u64>,
    /// Each link's candidates.
    heaps: Vec<BinaryHeap<u64>>,
    /// Sends each link may still make this epoch.
    link_left: Vec<u32>,
    /// Sends each switch constraint may still carry this epoch.
    switch_left: Vec<u32>,
    /// The switch constraints used this epoch.
    touched_switches: Vec<usize>,
    /// Arrivals by the epoch from which they can be forwarded, modulo the ring's length.
    pending: Vec<Vec<(u32, usize)>>,
    in_flight: usize,
    makespan: usize,
    /// The epochs of each link's last `fifo` sends (a ring per link; [`NO_SEND`]: none).
    recent: Vec<u32>,
    recent_at: Vec<u32>,
}

impl Run<'_, '_> {
    /// The seeded tie-break of chunk `c` on link `l`.
    fn tie(&self, c: u32, l: usize) -> u16 {
        self.salt.map_or(0, |s| {
            (mix(s ^ mix(((c as u64) << 32) | l as u64)) >> 48) as u16
        })
    }

    /// Link `l` used in `epoch`.
    fn hop(&self, l: usize, epoch: usize) -> Hop {
        let fabric = self.fabric;
        Hop {
            u: fabric.src[l],
            v: fabric.dst[l],
            delay: fabric.delay[l],
            epoch: epoch as u32,
        }
    }

    /// Chunk c on rank u, from `epoch` on: a candidate of every link out of u that helps.
    fn offer(&mut self, c: u32, u: usize, epoch: usize) {
        for &l in &self.fabric.out_links[u] {
            let hop = self.hop(l, epoch);
            if let Some(p) = self.demand.priority(c as usize, hop, &self.fabric.dist) {
                let k = key(p, self.tie(c, l), c);
                self.heaps[l].push(k);
            }
        }
    }

    /// The sends of epoch `t`, chosen globally by priority.
    fn epoch(&mut self, t: usize) -> Vec<(u32, u32)> {
        let mut order = self.open_links(t);
        let mut sends: Vec<(u32, u32)> = Vec::new();
        while let Some((_, std::cmp::Reverse(l))) = order.pop() {
            if (self.fabric.governing[l].iter()).any(|&j| self.switch_left[j] == 0) {
                // Every send of this link needs the exhausted constraint: the link waits for
                // the next epoch, its candidates unexamined (they only lose priority).
                continue;
            }
            let Some(top) = self.heaps[l].pop() else {
                continue;
            };
            let c = top as u32;
            let hop = self.hop(l, t);
            match self.demand.priority(c as usize, hop, &self.fabric.dist) {
                None => {}
                Some(p) if p < priority_of(top) => {
                    let k = key(p, self.tie(c, l), c);
                    self.heaps[l].push(k);
                }
                Some(_) => {
                    self.send(c, l, t);
                    sends.push((c, l as u32));
                }
            }
            if self.link_left[l] > 0 {
                if let Some(&next) = self.heaps[l].peek() {
                    order.push((next, std::cmp::Reverse(l)));
                }
            }
        }
        sends
    }

    /// The links with room and candidates in epoch `t`, by their best candidate (then link
    /// id, for determinism); sets each link's room (its capacity, less the messages a FIFO
    /// still holds in flight).
    fn open_links(&mut self, t: usize) -> BinaryHeap<(u64, std::cmp::Reverse<usize>)> {
        let (fabric, fifo) = (self.fabric, self.fabric.fifo);
        let mut order = BinaryHeap::new();
        for l in 0..fabric.src.len() {
            self.link_left[l] = fabric.link_cap[l];
            if fifo > 0 {
                let d = fabric.delay[l] as usize;
                let flying = self.recent[l * fifo..(l + 1) * fifo]
                    .iter()
                    .filter(|&&e| e != NO_SEND && e as usize + d > t)
                    .count();
                self.link_left[l] = self.link_left[l].min((fifo - flying) as u32);
            }
            if self.link_left[l] == 0 {
                continue;
            }
            if let Some(&top) = self.heaps[l].peek() {
                order.push((top, std::cmp::Reverse(l)));
            }
        }
        order
    }

    /// Sends chunk `c` over link `l` in epoch `t`: takes the capacity, records the arrival.
    fn send(&mut self, c: u32, l: usize, t: usize) {
        let fabric = self.fabric;
        for &j in &fabric.governing[l] {
            if self.switch_left[j] == fabric.switch_cap[j] {
                self.touched_switches.push(j);
            }
            self.switch_left[j] -= 1;
        }
        self.link_left[l] -= 1;
        let fifo = fabric.fifo;
        if fifo > 0 {
            self.recent[l * fifo + self.recent_at[l] as usize] = t as u32;
            self.recent_at[l] = (self.recent_at[l] + 1) % fifo as u32;
        }
        let v = fabric.dst[l];
        let at = t + fabric.delay[l] as usize;
        self.demand.arrive(c as usize, v, at as u32, &fabric.dist);
        self.makespan = self.makespan.max(at);
        let ring = self.pending.len();
        self.pending[at % ring].push((c, v));
        self.in_flight += 1;
    }

    /// Ends epoch `t`: restores the switch constraints and offers the chunks that can be
    /// forwarded from the next epoch on.
    fn end_epoch(&mut self, t: usize) {
        for j in self.touched_switches.drain(..) {
            self.switch_left[j] = self.fabric.switch_cap[j];
        }
        let ring = self.pending.len();
        let mut arrivals = std::mem::take(&mut self.pending[(t + 1) % ring]);
        self.in_flight -= arrivals.len();
        for (c, v) in arrivals.drain(..) {
            self.offer(c, v, t + 1);
        }
        self.pending[(t + 1) % ring] = arrivals;
    }
}
