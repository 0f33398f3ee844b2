//! The event loop of the simulator: threadblocks as state machines, transfers and local
//! steps as fluid flows whose rates are recomputed (max-min fair) at every event.

use super::share::max_min_rates_of;
use super::{wire_overhead, SimOptions, MAX_EVENTS};
use crate::topology::Topology;
use anyhow::{bail, Result};
use runtime::ir::{Op, Program, Step};
use std::collections::HashMap;

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
    resources: Vec<usize>,
}

/// A transfer or a local step in progress: its bytes flow at a shared rate; a transfer's
/// message then travels for the link's alpha before it arrives.
struct Flow {
    tb: usize,
    conn: Option<usize>,
    resources: Vec<usize>,
    initial: f64,
    remaining: f64,
    rate: f64,
}

/// A message whose bytes have left the sender and that arrives at `at`.
struct InFlight {
    at: f64,
    conn: usize,
}

struct Sim<'a> {
    tbs: Vec<Tb<'a>>,
    /// Threadblocks whose steps depend on each threadblock.
    dependents: Vec<Vec<usize>>,
    /// Sending and receiving threadblock of each connection.
    conn_ends: Vec<(Option<usize>, Option<usize>)>,
    /// Global index of (rank, tb id).
    index: Vec<Vec<usize>>,
    conns: Vec<Conn>,
    caps: Vec<f64>,
    local_resource: Vec<usize>,
    slices: &'a [f64],
    wire: f64,
    depth: usize,
    flows: Vec<Flow>,
    in_flight: Vec<InFlight>,
    now: f64,
    transfers: usize,
    /// The set of flows using bandwidth changed since rates were computed.
    dirty: bool,
}

pub(super) fn run(p: &Program, topo: &Topology, slices: &[f64], opts: &SimOptions) -> Result<Run> {
    let mut sim = Sim::new(p, topo, slices, opts)?;
    let mut events = 0usize;
    let mut queue: Vec<usize> = (0..sim.tbs.len()).rev().collect();
    let mut queued = vec![true; sim.tbs.len()];
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
                for w in sim.neighbours(t) {
                    if !queued[w] {
                        queued[w] = true;
                        queue.push(w);
                    }
                }
            }
        }
        if sim.flows.is_empty() && sim.in_flight.is_empty() {
            if let Some(t) = sim.tbs.iter().find(|t| !t.finished(slices.len())) {
                bail!("{}", sim.stuck(t));
            }
            break;
        }
        // The sharing changes when a flow starts using bandwidth or finishes.
        if sim.dirty {
            sim.update_rates();
        }
        for t in sim.advance() {
            for w in std::iter::once(t).chain(sim.neighbours(t)) {
                if !queued[w] {
                    queued[w] = true;
                    queue.push(w);
                }
            }
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
        let local_resource: Vec<usize> = (0..p.ngpus).map(|r| caps.len() + r).collect();
        caps.extend(std::iter::repeat_n(opts.local_bandwidth * 1e3, p.ngpus));

        let mut conn_of: HashMap<(usize, usize, usize), usize> = HashMap::new();
        let mut conns: Vec<Conn> = Vec::new();
        let mut conn = |s: usize, r: usize, ch: usize, conns: &mut Vec<Conn>| -> Result<usize> {
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
            for (k, sw) in topo.switches.iter().enumerate() {
                if sw.covers(s, r) {
                    resources.push(topo.links.len() + k);
                }
            }
            conns.push(Conn {
                arrived: 0,
                taken: 0,
                started: 0,
                alpha: topo.links[l].alpha.max(0.0),
                resources,
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
                    conn(s, r, tb.channel, &mut conns).map(Some)
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
        let mut dependents = vec![Vec::new(); tbs.len()];
        let mut conn_ends = vec![(None, None); conns.len()];
        for (t, tb) in tbs.iter().enumerate() {
            for step in tb.steps {
                for d in &step.deps {
                    let on = index[tb.rank][d.tb];
                    if !dependents[on].contains(&t) {
                        dependents[on].push(t);
                    }
                }
            }
            if let Some(c) = tb.send_conn {
                conn_ends[c].0 = Some(t);
            }
            if let Some(c) = tb.recv_conn {
                conn_ends[c].1 = Some(t);
            }
        }
        Ok(Sim {
            tbs,
            dependents,
            conn_ends,
            index,
            conns,
            caps,
            local_resource,
            slices,
            wire: wire_overhead(p.protocol),
            depth: opts.fifo_depth.max(1),
            flows: Vec::new(),
            in_flight: Vec::new(),
            now: 0.0,
            transfers: 0,
            dirty: true,
        })
    }

    /// Threadblocks whose progress may follow from progress of `t`: its dependents, the
    /// sender feeding it (room in the connection) and the receiver it feeds (arrivals).
    fn neighbours(&self, t: usize) -> Vec<usize> {
        let tb = &self.tbs[t];
        let mut v = self.dependents[t].clone();
        if let Some(s) = tb.recv_conn.and_then(|c| self.conn_ends[c].0) {
            v.push(s);
        }
        if let Some(r) = tb.send_conn.and_then(|c| self.conn_ends[c].1) {
            v.push(r);
        }
        v
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
            let deps_ok = step.deps.iter().all(|d| {
                let other = &self.tbs[self.index[tb.rank][d.tb]];
                other.done > iter * other.steps.len() + d.step
            });
            if !deps_ok {
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
                let conn = &mut self.conns[c];
                conn.started += 1;
                let bytes = bytes * self.wire;
                self.flows.push(Flow {
                    tb: t,
                    conn: Some(c),
                    resources: conn.resources.clone(),
                    initial: bytes,
                    remaining: bytes,
                    rate: 0.0,
                });
                self.dirty = true;
                self.tbs[t].busy = true;
                self.transfers += 1;
            } else if matches!(op, Op::Copy | Op::Reduce) {
                self.flows.push(Flow {
                    tb: t,
                    conn: None,
                    resources: vec![self.local_resource[rank]],
                    initial: bytes,
                    remaining: bytes,
                    rate: 0.0,
                });
                self.dirty = true;
                self.tbs[t].busy = true;
            } else {
                self.tbs[t].done += 1;
            }
        }
    }

    fn update_rates(&mut self) {
        let paths: Vec<&[usize]> = self.flows.iter().map(|f| f.resources.as_slice()).collect();
        let rates = max_min_rates_of(&self.caps, &paths);
        for (f, r) in self.flows.iter_mut().zip(rates) {
            f.rate = r;
        }
        self.dirty = false;
    }

    /// Moves time to the next event (a flow's last byte leaves, or a message arrives) and
    /// retires what finished; returns the threadblocks that may now go on.
    fn advance(&mut self) -> Vec<usize> {
        let now = self.now;
        let finish = |f: &Flow| {
            if f.remaining <= 0.0 {
                now
            } else {
                now + f.remaining / f.rate
            }
        };
        let next = self
            .flows
            .iter()
            .map(finish)
            .chain(self.in_flight.iter().map(|m| m.at))
            .fold(f64::INFINITY, f64::min);
        let dt = next - now;
        for f in &mut self.flows {
            f.remaining -= f.rate * dt;
        }
        self.now = next;
        let mut woken = Vec::new();
        let mut i = 0;
        while i < self.flows.len() {
            let f = &self.flows[i];
            if f.remaining <= 1e-9 * f.initial + 1e-6 {
                let f = self.flows.swap_remove(i);
                let tb = &mut self.tbs[f.tb];
                tb.busy = false;
                tb.done += 1;
                if let Some(c) = f.conn {
                    self.in_flight.push(InFlight {
                        at: next + self.conns[c].alpha,
                        conn: c,
                    });
                }
                woken.push(f.tb);
                self.dirty = true;
            } else {
                i += 1;
            }
        }
        let tol = 1e-12 * next.max(1.0);
        let mut i = 0;
        while i < self.in_flight.len() {
            if self.in_flight[i].at <= next + tol {
                // Messages of one connection have equal latency, so they arrive in order.
                let m = self.in_flight.swap_remove(i);
                self.conns[m.conn].arrived += 1;
                woken.extend(self.conn_ends[m.conn].1);
            } else {
                i += 1;
            }
        }
        woken
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
