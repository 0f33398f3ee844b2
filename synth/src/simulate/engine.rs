//! The event loop of the simulator: threadblocks as state machines, transfers and local
//! steps as fluid flows whose rates are max-min fair at every moment.
//!
//! Flows that cross the same resources (a connection's link and switch constraints, or a
//! rank's memory) always get equal rates, so they are kept together in a *class*: a
//! processor-sharing queue whose flows all advance at the class's rate. The bytes a class
//! has served to each of its flows grow linearly between events, and a flow ends when the
//! class has served its bytes since it started. When a class gains or loses a flow, rates are
//! recomputed for the classes connected to it through shared resources only (one link on a
//! torus, one switch on an NVSwitch box), and the next event comes from heaps: an event costs
//! a logarithm and one connected group, not every flow of the fabric, so a 1024-rank program
//! with millions of transfers simulates in seconds.

use super::queue::IndexedHeap;
use super::share::Sharing;
use super::{wire_overhead, SimOptions, MAX_EVENTS};
use crate::topology::Topology;
use anyhow::{bail, Result};
use runtime::ir::{Op, Program, Step};
use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, HashMap, VecDeque};

/// What one run of the event loop measured.
pub(super) struct Run {
    pub time_us: f64,
    pub transfers: usize,
    pub events: usize,
}

/// One threadblock's progress.
struct Tb<'a> {
    rank: usize,
    id: usize,
    steps: &'a [Step],
    /// Steps completed, over all slices (the next step is `done`).
    done: usize,
    busy: bool,
    send_conn: Option<usize>,
    recv_conn: Option<usize>,
    /// Messages taken from `recv_conn`.
    taken: usize,
}

/// A connection (sender, receiver, channel).
struct Conn {
    /// Messages that have fully arrived.
    arrived: usize,
    /// Messages the receiver has taken.
    taken: usize,
    /// Transfers started.
    started: usize,
    alpha: f64,
    /// Its link.
    link: usize,
    /// The class its transfers belong to.
    class: usize,
}

/// A time or a byte count ordered totally (they are never NaN).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Key(f64);

impl Eq for Key {}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Key {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// A transfer or a local step in progress.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Flow {
    /// Bytes the class has served per flow when this flow ends.
    end: Key,
    /// Start order (ties).
    seq: usize,
    /// Its bytes (for the tolerance of the end).
    bytes: Key,
    tb: usize,
    conn: Option<usize>,
}

/// Flows crossing the same resources, sharing them equally.
struct Class {
    resources: Vec<usize>,
    /// Flows in progress, the first to end on top.
    flows: BinaryHeap<Reverse<Flow>>,
    /// Bytes served to each of its flows since the start of the run, as of `at`.
    served: f64,
    at: f64,
    /// Rate of each of its flows (bytes per µs).
    rate: f64,
    /// Its flows changed since its rate was computed.
    dirty: bool,
    /// In the group being recomputed.
    grouped: bool,
}

impl Class {
    /// Brings `served` to time `now`.
    fn advance_to(&mut self, now: f64) {
        self.served += self.rate * (now - self.at);
        self.at = now;
    }
}

struct Sim<'a> {
    tbs: Vec<Tb<'a>>,
    /// Threadblocks whose next step waits for each threadblock, keyed by the number of
    /// steps it must have done, the first due on top (so a threadblock is woken when the
    /// step it waits for is done, not at every step before it).
    waiting: Vec<BinaryHeap<Reverse<(usize, usize)>>>,
    /// Sending and receiving threadblock of each connection.
    conn_ends: Vec<(Option<usize>, Option<usize>)>,
    /// Global index of (rank, tb id).
    index: Vec<Vec<usize>>,
    conns: Vec<Conn>,
    caps: Vec<f64>,
    classes: Vec<Class>,
    /// Classes using each resource.
    users: Vec<Vec<usize>>,
    /// The class of each rank's local copies.
    local_class: Vec<usize>,
    slices: &'a [f64],
    wire: f64,
    depth: usize,
    /// Flows in progress, over all classes.
    active: usize,
    /// Next end of each class with flows.
    ends: IndexedHeap,
    /// Messages whose bytes have left, per link: (arrival time, connection), in order (a
    /// link's messages share its latency).
    in_flight: Vec<VecDeque<(f64, usize)>>,
    /// Next arrival of each link with messages in flight.
    arrivals: IndexedHeap,
    /// Messages in flight, over all links.
    flying: usize,
    /// Classes whose flows changed since rates were computed.
    dirty: Vec<usize>,
    sharing: Sharing,
    now: f64,
    seq: usize,
    transfers: usize,
}

pub(super) fn run(p: &Program, topo: &Topology, slices: &[f64], opts: &SimOptions) -> Result<Run> {
    let mut sim = Sim::new(p, topo, slices, opts)?;
    let mut events = 0usize;
    let mut queue: Vec<usize> = (0..sim.tbs.len()).rev().collect();
    let mut queued = vec![true; sim.tbs.len()];
    let mut woken = Vec::new();
    loop {
        events += 1;
        if events > MAX_EVENTS {
            bail!("simulation of '{}' exceeded {MAX_EVENTS} events", p.name);
        }
        // Start everything that can start; progress of one threadblock may unblock its
        // dependents and its connections' peers.
        while let Some(t) = queue.pop() {
            queued[t] = false;
            if sim.start(t) {
                sim.neighbours(t, |w| {
                    if !queued[w] {
                        queued[w] = true;
                        queue.push(w);
                    }
                });
            }
        }
        if sim.active == 0 && sim.flying == 0 {
            if let Some(t) = sim.tbs.iter().find(|t| !t.finished(slices.len())) {
                bail!("{}", sim.stuck(t));
            }
            break;
        }
        // The sharing changes when a flow starts or finishes.
        sim.update_rates();
        sim.advance(&mut woken);
        for t in woken.drain(..) {
            if !queued[t] {
                queued[t] = true;
                queue.push(t);
            }
            sim.neighbours(t, |w| {
                if !queued[w] {
                    queued[w] = true;
                    queue.push(w);
                }
            });
        }
    }
    Ok(Run {
        time_us: sim.now,
        transfers: sim.transfers,
        events,
    })
}

impl Tb<'_> {
    fn total(&self, iterations: usize) -> usize {
        self.steps.len() * iterations
    }

    fn finished(&self, iterations: usize) -> bool {
        self.done >= self.total(iterations)
    }
}

impl<'a> Sim<'a> {
    fn new(
        p: &'a Program,
        topo: &Topology,
        slices: &'a [f64],
        opts: &SimOptions,
    ) -> Result<Sim<'a>> {
        let link_of: HashMap<(usize, usize), usize> = topo
            .links
            .iter()
            .enumerate()
            .map(|(i, l)| ((l.src, l.dst), i))
            .collect();
        let mut caps: Vec<f64> = topo.links.iter().map(|l| l.bandwidth * 1e3).collect();
        caps.extend(topo.switches.iter().map(|s| s.bandwidth * 1e3));
        let governing = topo.governing_constraints(&topo.out_link_ids());
        let local_resource: Vec<usize> = (0..p.ngpus).map(|r| caps.len() + r).collect();
        caps.extend(std::iter::repeat_n(opts.local_bandwidth * 1e3, p.ngpus));

        let mut classes: Vec<Class> = Vec::new();
        let mut class_of: HashMap<Vec<usize>, usize> = HashMap::new();
        let mut class = |resources: Vec<usize>, classes: &mut Vec<Class>| -> usize {
            *class_of.entry(resources.clone()).or_insert_with(|| {
                classes.push(Class {
                    resources,
                    flows: BinaryHeap::new(),
                    served: 0.0,
                    at: 0.0,
                    rate: 0.0,
                    dirty: false,
                    grouped: false,
                });
                classes.len() - 1
            })
        };
        let local_class: Vec<usize> = local_resource
            .iter()
            .map(|&r| class(vec![r], &mut classes))
            .collect();
        let mut conn_of: HashMap<(usize, usize, usize), usize> = HashMap::new();
        let mut conns: Vec<Conn> = Vec::new();
        let mut conn = |s: usize,
                        r: usize,
                        ch: usize,
                        conns: &mut Vec<Conn>,
                        classes: &mut Vec<Class>|
         -> Result<usize> {
            if let Some(&c) = conn_of.get(&(s, r, ch)) {
                return Ok(c);
            }
            let Some(&l) = link_of.get(&(s, r)) else {
                bail!(
                    "rank {s} sends to rank {r} but topology '{}' has no link {s}->{r}",
                    topo.name
                );
            };
            let mut resources = vec![l];
            resources.extend(governing[l].iter().map(|k| topo.links.len() + k));
            conns.push(Conn {
                arrived: 0,
                taken: 0,
                started: 0,
                alpha: topo.links[l].alpha.max(0.0),
                link: l,
                class: class(resources, classes),
            });
            conn_of.insert((s, r, ch), conns.len() - 1);
            Ok(conns.len() - 1)
        };
        let mut tbs = Vec::new();
        let mut index = Vec::new();
        for g in &p.gpus {
            let mut ids = Vec::new();
            for (id, tb) in g.threadblocks.iter().enumerate() {
                let sends = tb.steps.iter().any(|s| s.op.sends());
                let recvs = tb.steps.iter().any(|s| s.op.receives());
                let mut peer = |which: Option<usize>, is_send: bool| -> Result<Option<usize>> {
                    let Some(q) = which else { return Ok(None) };
                    if q >= p.ngpus || q == g.rank {
                        bail!("rank {} tb {id}: bad peer {q}", g.rank);
                    }
                    let (s, r) = if is_send { (g.rank, q) } else { (q, g.rank) };
                    conn(s, r, tb.channel, &mut conns, &mut classes).map(Some)
                };
                let send_conn = if sends { peer(tb.send, true)? } else { None };
                let recv_conn = if recvs { peer(tb.recv, false)? } else { None };
                for (si, s) in tb.steps.iter().enumerate() {
                    if s.op.sends() && send_conn.is_none() {
                        bail!(
                            "rank {} tb {id} step {si}: {} without a send peer",
                            g.rank,
                            s.op
                        );
                    }
                    if s.op.receives() && recv_conn.is_none() {
                        bail!(
                            "rank {} tb {id} step {si}: {} without a receive peer",
                            g.rank,
                            s.op
                        );
                    }
                    for d in &s.deps {
                        let ok = g
                            .threadblocks
                            .get(d.tb)
                            .is_some_and(|t| d.step < t.steps.len());
                        if !ok || d.tb == id {
                            bail!(
                                "rank {} tb {id} step {si}: bad dependency on tb {} step {}",
                                g.rank,
                                d.tb,
                                d.step
                            );
                        }
                    }
                }
                ids.push(tbs.len());
                tbs.push(Tb {
                    rank: g.rank,
                    id,
                    steps: &tb.steps,
                    done: 0,
                    busy: false,
                    send_conn,
                    recv_conn,
                    taken: 0,
                });
            }
            index.push(ids);
        }
        let mut conn_ends = vec![(None, None); conns.len()];
        for (t, tb) in tbs.iter().enumerate() {
            if let Some(c) = tb.send_conn {
                conn_ends[c].0 = Some(t);
            }
            if let Some(c) = tb.recv_conn {
                conn_ends[c].1 = Some(t);
            }
        }
        let mut users = vec![Vec::new(); caps.len()];
        for (c, class) in classes.iter().enumerate() {
            for &j in &class.resources {
                if users[j].last() != Some(&c) {
                    users[j].push(c);
                }
            }
        }
        let classes_count = classes.len();
        Ok(Sim {
            waiting: (0..tbs.len()).map(|_| BinaryHeap::new()).collect(),
            tbs,
            conn_ends,
            index,
            conns,
            sharing: Sharing::new(caps.len()),
            caps,
            classes,
            users,
            local_class,
            slices,
            wire: wire_overhead(p.protocol),
            depth: opts.fifo_depth.max(1),
            active: 0,
            ends: IndexedHeap::new(classes_count),
            in_flight: vec![VecDeque::new(); topo.links.len()],
            arrivals: IndexedHeap::new(topo.links.len()),
            flying: 0,
            dirty: Vec::new(),
            now: 0.0,
            seq: 0,
            transfers: 0,
        })
    }

    /// Calls `f` on the threadblocks whose progress may follow from progress of `t`: those
    /// waiting for a step of it, the sender feeding it (room in the connection) and the
    /// receiver it feeds (arrivals).
    fn neighbours(&mut self, t: usize, mut f: impl FnMut(usize)) {
        let done = self.tbs[t].done;
        while let Some(&Reverse((needed, w))) = self.waiting[t].peek() {
            if needed > done {
                break;
            }
            self.waiting[t].pop();
            f(w);
        }
        let tb = &self.tbs[t];
        if let Some(s) = tb.recv_conn.and_then(|c| self.conn_ends[c].0) {
            f(s);
        }
        if let Some(r) = tb.send_conn.and_then(|c| self.conn_ends[c].1) {
            f(r);
        }
    }

    /// Starts a flow of `bytes` in `class` for threadblock `tb`.
    fn add_flow(&mut self, class: usize, tb: usize, conn: Option<usize>, bytes: f64) {
        let now = self.now;
        let c = &mut self.classes[class];
        c.advance_to(now);
        c.flows.push(Reverse(Flow {
            end: Key(c.served + bytes),
            seq: self.seq,
            bytes: Key(bytes),
            tb,
            conn,
        }));
        self.seq += 1;
        self.active += 1;
        self.mark(class);
    }

    fn mark(&mut self, class: usize) {
        if !self.classes[class].dirty {
            self.classes[class].dirty = true;
            self.dirty.push(class);
        }
    }

    /// Runs threadblock `t` as far as it goes without waiting; true if it made progress.
    fn start(&mut self, t: usize) -> bool {
        let iterations = self.slices.len();
        let mut progressed = false;
        loop {
            let tb = &self.tbs[t];
            if tb.busy || tb.finished(iterations) {
                return progressed;
            }
            let n = tb.steps.len();
            let (iter, idx) = (tb.done / n, tb.done % n);
            let step = &tb.steps[idx];
            // A dependency is met once the other threadblock has done that step of this
            // slice: more than `needed` steps over all slices.
            let unmet = step.deps.iter().find_map(|d| {
                let on = self.index[tb.rank][d.tb];
                let other = &self.tbs[on];
                let needed = iter * other.steps.len() + d.step;
                (other.done <= needed).then_some((on, needed + 1))
            });
            if let Some((on, needed)) = unmet {
                self.waiting[on].push(Reverse((needed, t)));
                return progressed;
            }
            if step.op.receives() {
                let c = &self.conns[tb.recv_conn.expect("checked in new")];
                if c.arrived <= tb.taken {
                    return progressed;
                }
            }
            if step.op.sends() {
                let c = &self.conns[tb.send_conn.expect("checked in new")];
                if c.started - c.taken >= self.depth {
                    return progressed;
                }
            }
            let bytes = step.count as f64 * self.slices[iter];
            let (op, rank) = (step.op, tb.rank);
            progressed = true;
            if op.receives() {
                let c = self.tbs[t].recv_conn.expect("checked in new");
                self.tbs[t].taken += 1;
                self.conns[c].taken += 1;
            }
            if op.sends() {
                let c = self.tbs[t].send_conn.expect("checked in new");
                self.conns[c].started += 1;
                let class = self.conns[c].class;
                self.add_flow(class, t, Some(c), bytes * self.wire);
                self.tbs[t].busy = true;
                self.transfers += 1;
            } else if matches!(op, Op::Copy | Op::Reduce) {
                self.add_flow(self.local_class[rank], t, None, bytes);
                self.tbs[t].busy = true;
            } else {
                self.tbs[t].done += 1;
            }
        }
    }

    /// Recomputes the rates of the classes connected, through shared resources, to a class
    /// whose flows changed, and schedules their next ends.
    fn update_rates(&mut self) {
        let mut group: Vec<usize> = Vec::new();
        while let Some(start) = self.dirty.pop() {
            if !self.classes[start].dirty {
                continue;
            }
            // The connected group: classes with flows, and changed ones (a class that lost
            // its last flow frees bandwidth for its neighbours).
            group.clear();
            group.push(start);
            self.classes[start].dirty = false;
            self.classes[start].grouped = true;
            let mut i = 0;
            while i < group.len() {
                let c = group[i];
                i += 1;
                for k in 0..self.classes[c].resources.len() {
                    let j = self.classes[c].resources[k];
                    for &other in &self.users[j] {
                        let o = &mut self.classes[other];
                        if !o.grouped && (o.dirty || !o.flows.is_empty()) {
                            o.grouped = true;
                            o.dirty = false;
                            group.push(other);
                        }
                    }
                }
            }
            for &c in &group {
                self.classes[c].grouped = false;
            }
            let now = self.now;
            let members: Vec<(&[usize], f64)> = group
                .iter()
                .filter(|&&c| !self.classes[c].flows.is_empty())
                .map(|&c| {
                    let class = &self.classes[c];
                    (class.resources.as_slice(), class.flows.len() as f64)
                })
                .collect();
            let mut rates = Vec::with_capacity(members.len());
            self.sharing.rates(&self.caps, &members, &mut rates);
            let mut rates = rates.into_iter();
            for &c in &group {
                let class = &mut self.classes[c];
                class.advance_to(now);
                let Some(top) = class.flows.peek() else {
                    class.rate = 0.0;
                    self.ends.remove(c);
                    continue;
                };
                class.rate = rates.next().expect("one rate per class with flows");
                let end = now + (top.0.end.0 - class.served).max(0.0) / class.rate;
                self.ends.set(c, end);
            }
        }
    }

    /// Moves time to the next event (a flow's last byte leaves, or a message arrives) and
    /// retires what finished; `woken` gets the threadblocks that may now go on.
    fn advance(&mut self, woken: &mut Vec<usize>) {
        let next_end = self.ends.peek().map_or(f64::INFINITY, |(_, t)| t);
        let next_arrival = self.arrivals.peek().map_or(f64::INFINITY, |(_, t)| t);
        let next = next_end.min(next_arrival);
        self.now = next;
        let tol = 1e-12 * next.max(1.0);
        while let Some((c, at)) = self.ends.peek() {
            if at > next + tol {
                break;
            }
            self.ends.remove(c);
            let class = &mut self.classes[c];
            class.advance_to(next);
            // The flow this event is for ends; others of the class ending within the
            // tolerance too.
            let mut first = true;
            while let Some(Reverse(f)) = class.flows.peek() {
                let left = f.end.0 - class.served;
                if !first && left > 1e-9 * f.bytes.0 + 1e-6 {
                    break;
                }
                first = false;
                let Reverse(f) = class.flows.pop().expect("peeked");
                self.active -= 1;
                let tb = &mut self.tbs[f.tb];
                tb.busy = false;
                tb.done += 1;
                if let Some(conn) = f.conn {
                    let (link, alpha) = (self.conns[conn].link, self.conns[conn].alpha);
                    if self.in_flight[link].is_empty() {
                        self.arrivals.set(link, next + alpha);
                    }
                    self.in_flight[link].push_back((next + alpha, conn));
                    self.flying += 1;
                }
                woken.push(f.tb);
            }
            self.mark(c);
        }
        while let Some((link, at)) = self.arrivals.peek() {
            if at > next + tol {
                break;
            }
            let queue = &mut self.in_flight[link];
            while let Some(&(at, conn)) = queue.front() {
                if at > next + tol {
                    break;
                }
                queue.pop_front();
                self.flying -= 1;
                self.conns[conn].arrived += 1;
                woken.extend(self.conn_ends[conn].1);
            }
            match queue.front() {
                Some(&(at, _)) => self.arrivals.set(link, at),
                None => self.arrivals.remove(link),
            }
        }
    }

    /// A one-line description of why threadblock `t` cannot go on.
    fn stuck(&self, t: &Tb) -> String {
        let n = t.steps.len();
        let (iter, idx) = (t.done / n, t.done % n);
        let step = &t.steps[idx];
        let why = if let Some(d) = step.deps.iter().find(|d| {
            let other = &self.tbs[self.index[t.rank][d.tb]];
            other.done <= iter * other.steps.len() + d.step
        }) {
            format!("waits for tb {} step {}", d.tb, d.step)
        } else if step.op.receives() {
            "waits for a message that is never sent".to_string()
        } else {
            "waits for room in a connection that is never drained".to_string()
        };
        format!(
            "deadlock: rank {} tb {} step {idx} ({}) of slice {iter} {why}",
            t.rank, t.id, step.op
        )
    }
}
