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

mod bound;

pub(super) use bound::Chains;

use super::queue::IndexedHeap;
use super::share::Sharing;
use super::{SimOptions, MAX_EVENTS};
use crate::topology::{Topology, TopologyIndex};
use anyhow::{bail, Result};
use runtime::ir::{Gpu, Op, Program, Threadblock};
use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, HashMap, VecDeque};

/// What one run of the event loop measured.
pub(super) struct Run {
    pub time_us: f64,
    pub transfers: usize,
    pub events: usize,
    /// Per slice, when its first step reading the input buffer started (infinite where
    /// none does): the collective's pace through a chunk.
    pub reads: Vec<f64>,
}

/// No threadblock or connection.
const NONE: u32 = u32::MAX;

/// A threadblock: where its steps are in the layout, its connections, and (during a run) its
/// progress, in one record.
#[derive(Clone)]
struct Tb {
    rank: u32,
    id: u32,
    /// Index of its first step in the layout's step arrays, and its step count.
    first: u32,
    len: u32,
    send_conn: u32,
    recv_conn: u32,
    /// Steps completed, over all slices (the next step is `done`).
    done: usize,
    /// Messages taken from `recv_conn`.
    taken: usize,
    busy: bool,
}

impl Tb {
    fn finished(&self, iterations: usize) -> bool {
        self.done >= self.len as usize * iterations
    }
}

/// A connection (sender, receiver, channel).
#[derive(Clone)]
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

/// What the event loop needs of a step, in one record.
#[derive(Clone, Copy)]
struct StepInfo {
    /// Index of its first dependency in [`Layout::deps`].
    deps: u32,
    count: u32,
    op: Op,
    /// Whether it reads the input buffer: with a producer ([`super::Producer`]) it waits
    /// for the tile holding its slice.
    reads_input: bool,
}

/// A program laid out for the event loop: every threadblock's steps (op, count,
/// dependencies) in flat arrays, connections and classes of flows resolved. Built once per
/// program and shared by its runs at every size.
pub(super) struct Layout<'a> {
    p: &'a Program,
    tbs: Vec<Tb>,
    /// Every step, by index (`first` of its threadblock + k), and one past the last.
    steps: Vec<StepInfo>,
    /// Dependencies of step `i`: `deps[steps[i].deps..steps[i + 1].deps]` as (threadblock,
    /// step).
    deps: Vec<(u32, u32)>,
    conns: Vec<Conn>,
    /// Sending and receiving threadblock of each connection.
    conn_ends: Vec<(u32, u32)>,
    /// Resources of each class.
    resources: Vec<Vec<usize>>,
    /// Classes using each resource.
    users: Vec<Vec<usize>>,
    /// For a class that is alone on its one resource (a torus link, a rank's memory): that
    /// resource's capacity and how many times the class lists it. Its flows then share the
    /// resource among themselves only, and its rate needs no group.
    solo: Vec<Option<(f64, f64)>>,
    /// The class of each rank's local copies.
    local_class: Vec<usize>,
    caps: Vec<f64>,
    links: usize,
    wire: f64,
    depth: usize,
    /// Bytes a compute step moves per byte of its chunks, as a copy's bytes (a copy reads
    /// and writes one stream; see [`runtime::compute::Kernel::streams`]).
    compute_weight: f64,
}

impl<'a> Layout<'a> {
    /// Lays `p` out on `topo` (errors, one line, for a send without a link, a bad peer or a
    /// bad dependency).
    pub fn new(p: &'a Program, topo: &Topology, opts: &SimOptions) -> Result<Layout<'a>> {
        let compute_weight = match &p.compute {
            Some(c) => c.kernel()?.streams() as f64 / 2.0,
            None => 0.0,
        };
        let index = topo.index();
        let mut caps: Vec<f64> = topo.links.iter().map(|l| l.bandwidth * 1e3).collect();
        caps.extend(topo.switches.iter().map(|s| s.bandwidth * 1e3));
        let local_resource: Vec<usize> = (0..p.ngpus).map(|r| caps.len() + r).collect();
        caps.extend(std::iter::repeat_n(
            opts.model.local_bandwidth * 1e3,
            p.ngpus,
        ));
        let protocol = opts.protocol_of(p);
        let mut classes = Classes {
            alpha_factor: [
                opts.model.alpha_factor(protocol, false),
                opts.model.alpha_factor(protocol, true),
            ],
            topo,
            index: &index,
            resources: Vec::new(),
            class_of: HashMap::new(),
            conn_of: HashMap::new(),
            conns: Vec::new(),
        };
        let local_class: Vec<usize> = local_resource
            .iter()
            .map(|&r| classes.class(vec![r]))
            .collect();
        let steps: usize = p.step_count();
        if steps >= NONE as usize {
            bail!("program '{}' has too many steps to simulate", p.name);
        }
        let mut laid = Steps {
            tbs: Vec::new(),
            infos: Vec::with_capacity(steps + 1),
            deps: Vec::new(),
            first_tb: Vec::with_capacity(p.gpus.len()),
        };
        laid.lay_out(p, &mut classes)?;
        let Classes {
            conns, resources, ..
        } = classes;
        let conn_ends = connection_ends(&laid.tbs, conns.len());
        let users = users_of(&resources, caps.len());
        let solo = resources
            .iter()
            .enumerate()
            .map(|(c, list)| {
                let j = *list.first()?;
                (list.iter().all(|&k| k == j) && users[j] == [c])
                    .then(|| (caps[j], list.len() as f64))
            })
            .collect();
        Ok(Layout {
            p,
            solo,
            tbs: laid.tbs,
            steps: laid.infos,
            deps: laid.deps,
            conns,
            conn_ends,
            resources,
            users,
            local_class,
            caps,
            links: topo.links.len(),
            wire: 1.0 / opts.model.wire_efficiency.get(protocol),
            depth: opts.model.fifo_depth.max(1),
            compute_weight,
        })
    }

    /// When the input step `i` reads in slice `iter` is produced (0 without a producer):
    /// tile `t` of `k` (the t-th k-th of every chunk, in the order the program's slices
    /// consume them) is out at `(t + 1) · T / k`; a slice waits for the tile holding its
    /// last byte.
    fn release(
        &self,
        i: usize,
        iter: usize,
        slices: &[f64],
        producer: Option<&super::Producer>,
    ) -> f64 {
        let Some(producer) = producer else {
            return 0.0;
        };
        if !self.steps[i].reads_input {
            return 0.0;
        }
        let chunk: f64 = slices.iter().sum();
        let end = slices[..=iter].iter().sum::<f64>();
        let k = producer.tiles.max(1) as f64;
        let tile = (end * k / chunk - 1e-9).ceil().clamp(1.0, k);
        tile * producer.time_us / k
    }

    /// The dependencies of step `i`.
    fn deps_of(&self, i: usize) -> &[(u32, u32)] {
        &self.deps[self.steps[i].deps as usize..self.steps[i + 1].deps as usize]
    }
}

/// The classes of flows (by the resources they cross) and the connections, as a layout
/// resolves them.
struct Classes<'t> {
    /// The factor on a link's alpha for the protocol: inside a node, between nodes.
    alpha_factor: [f64; 2],
    topo: &'t Topology,
    index: &'t TopologyIndex,
    /// Resources of each class.
    resources: Vec<Vec<usize>>,
    class_of: HashMap<Vec<usize>, usize>,
    /// The connection of each (sender, receiver, channel).
    conn_of: HashMap<(usize, usize, usize), usize>,
    conns: Vec<Conn>,
}

impl Classes<'_> {
    /// The class of flows crossing `list` (resource ids), added if new.
    fn class(&mut self, list: Vec<usize>) -> usize {
        let resources = &mut self.resources;
        *self.class_of.entry(list.clone()).or_insert_with(|| {
            resources.push(list);
            resources.len() - 1
        })
    }

    /// The connection from rank `s` to rank `r` on channel `ch`, added if new (its class:
    /// its link and the switch constraints governing it).
    fn conn(&mut self, s: usize, r: usize, ch: usize) -> Result<usize> {
        if let Some(&c) = self.conn_of.get(&(s, r, ch)) {
            return Ok(c);
        }
        let topo = self.topo;
        let Some(&l) = self.index.link_of.get(&(s, r)) else {
            bail!(
                "rank {s} sends to rank {r} but topology '{}' has no link {s}->{r}",
                topo.name
            );
        };
        let mut list = vec![l];
        list.extend(self.index.governing[l].iter().map(|k| topo.links.len() + k));
        let class = self.class(list);
        self.conns.push(Conn {
            arrived: 0,
            taken: 0,
            started: 0,
            alpha: topo.links[l].alpha.max(0.0)
                * self.alpha_factor[usize::from(topo.node_of.get(s) != topo.node_of.get(r))],
            link: l,
            class,
        });
        self.conn_of.insert((s, r, ch), self.conns.len() - 1);
        Ok(self.conns.len() - 1)
    }
}

/// The threadblocks and steps of a layout under construction.
struct Steps {
    tbs: Vec<Tb>,
    infos: Vec<StepInfo>,
    deps: Vec<(u32, u32)>,
    /// Index of each rank's first threadblock.
    first_tb: Vec<usize>,
}

impl Steps {
    /// Lays out every threadblock of `p` and its steps, then the sentinel step.
    fn lay_out(&mut self, p: &Program, classes: &mut Classes) -> Result<()> {
        for g in &p.gpus {
            self.first_tb.push(self.tbs.len());
            self.tbs.extend(g.threadblocks.iter().map(|_| Tb {
                rank: 0,
                id: 0,
                first: 0,
                len: 0,
                send_conn: NONE,
                recv_conn: NONE,
                done: 0,
                taken: 0,
                busy: false,
            }));
        }
        for g in &p.gpus {
            for (id, tb) in g.threadblocks.iter().enumerate() {
                self.threadblock(p, g, id, tb, classes)?;
            }
        }
        self.infos.push(StepInfo {
            deps: self.deps.len() as u32,
            count: 0,
            op: Op::Nop,
            reads_input: false,
        });
        Ok(())
    }

    /// Lays out threadblock `id` of rank `g`: its connections, then its steps.
    fn threadblock(
        &mut self,
        p: &Program,
        g: &Gpu,
        id: usize,
        tb: &Threadblock,
        classes: &mut Classes,
    ) -> Result<()> {
        let sends = tb.steps.iter().any(|s| s.op.sends());
        let recvs = tb.steps.iter().any(|s| s.op.receives());
        let mut peer = |which: Option<usize>, is_send: bool| -> Result<u32> {
            let Some(q) = which else { return Ok(NONE) };
            if q >= p.ngpus || q == g.rank {
                bail!("rank {} tb {id}: bad peer {q}", g.rank);
            }
            let (s, r) = if is_send { (g.rank, q) } else { (q, g.rank) };
            classes.conn(s, r, tb.channel).map(|c| c as u32)
        };
        let send_conn = if sends { peer(tb.send, true)? } else { NONE };
        let recv_conn = if recvs { peer(tb.recv, false)? } else { NONE };
        let t = self.first_tb[g.rank] + id;
        self.tbs[t] = Tb {
            rank: g.rank as u32,
            id: id as u32,
            first: self.infos.len() as u32,
            len: tb.steps.len() as u32,
            send_conn,
            recv_conn,
            done: 0,
            taken: 0,
            busy: false,
        };
        for (si, s) in tb.steps.iter().enumerate() {
            if s.op.sends() && send_conn == NONE {
                bail!(
                    "rank {} tb {id} step {si}: {} without a send peer",
                    g.rank,
                    s.op
                );
            }
            if s.op.receives() && recv_conn == NONE {
                bail!(
                    "rank {} tb {id} step {si}: {} without a receive peer",
                    g.rank,
                    s.op
                );
            }
            self.step(g, id, si, s)?;
        }
        Ok(())
    }

    /// Lays out step `si` of threadblock `id` of rank `g`, with its dependencies.
    fn step(&mut self, g: &Gpu, id: usize, si: usize, s: &runtime::ir::Step) -> Result<()> {
        let dep_start = self.deps.len() as u32;
        for d in &s.deps {
            let ok = (g.threadblocks.get(d.tb)).is_some_and(|t| d.step < t.steps.len());
            if !ok || d.tb == id {
                bail!(
                    "rank {} tb {id} step {si}: bad dependency on tb {} step {}",
                    g.rank,
                    d.tb,
                    d.step
                );
            }
            self.deps
                .push(((self.first_tb[g.rank] + d.tb) as u32, d.step as u32));
        }
        self.infos.push(StepInfo {
            deps: dep_start,
            count: u32::try_from(s.count).unwrap_or(u32::MAX),
            op: s.op,
            reads_input: reads_input(s),
        });
        Ok(())
    }
}

/// The sending and receiving threadblock of each of `conns` connections.
fn connection_ends(tbs: &[Tb], conns: usize) -> Vec<(u32, u32)> {
    let mut conn_ends = vec![(NONE, NONE); conns];
    for (t, tb) in tbs.iter().enumerate() {
        if tb.send_conn != NONE {
            conn_ends[tb.send_conn as usize].0 = t as u32;
        }
        if tb.recv_conn != NONE {
            conn_ends[tb.recv_conn as usize].1 = t as u32;
        }
    }
    conn_ends
}

/// The classes using each of `count` resources, given each class's `resources`.
fn users_of(resources: &[Vec<usize>], count: usize) -> Vec<Vec<usize>> {
    let mut users = vec![Vec::new(); count];
    for (c, list) in resources.iter().enumerate() {
        for &j in list {
            if users[j].last() != Some(&c) {
                users[j].push(c);
            }
        }
    }
    users
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
    tb: u32,
    conn: u32,
}

/// Flows crossing the same resources, sharing them equally.
struct Class {
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

/// One run of the event loop at one size.
struct Sim<'a, 'p> {
    layout: &'a Layout<'p>,
    tbs: Vec<Tb>,
    /// Threadblocks whose next step waits for each threadblock, keyed by the number of
    /// steps it must have done, the first due on top (so a threadblock is woken when the
    /// step it waits for is done, not at every step before it).
    waiting: Vec<BinaryHeap<Reverse<(usize, u32)>>>,
    conns: Vec<Conn>,
    classes: Vec<Class>,
    slices: &'a [f64],
    /// The producer of the input (`None`: it is there at the start).
    producer: Option<&'a super::Producer>,
    /// Flows in progress, over all classes.
    active: usize,
    /// Next end of each class with flows.
    ends: IndexedHeap,
    /// Messages whose bytes have left, per link: (arrival time, connection), in order (a
    /// link's messages share its latency).
    in_flight: Vec<VecDeque<(f64, u32)>>,
    /// Next arrival of each link with messages in flight.
    arrivals: IndexedHeap,
    /// Messages in flight, over all links.
    flying: usize,
    /// Classes whose flows changed since rates were computed.
    dirty: Vec<usize>,
    sharing: Sharing,
    /// Resources already expanded while collecting a connected group, and their list.
    reached: Vec<bool>,
    reached_list: Vec<usize>,
    now: f64,
    seq: usize,
    transfers: usize,
    /// Threadblocks waiting for a producer's tile, by its release time.
    timers: BinaryHeap<Reverse<(Key, u32)>>,
    /// Per slice, the first start of a step reading input.
    reads: Vec<f64>,
}

/// Runs `layout`'s program with chunks cut into `slices` (bytes of each slice), its input
/// written by `producer` (`None`: there at the start).
pub(super) fn run(
    layout: &Layout,
    slices: &[f64],
    producer: Option<&super::Producer>,
) -> Result<Run> {
    let mut sim = Sim::new(layout, slices, producer);
    let mut events = 0usize;
    let n = sim.tbs.len();
    let mut queue: Vec<u32> = (0..n as u32).rev().collect();
    let mut queued = vec![true; n];
    let mut woken = Vec::new();
    let mut room = Vec::new();
    loop {
        events += 1;
        if events > MAX_EVENTS {
            bail!(
                "simulation of '{}' exceeded {MAX_EVENTS} events",
                layout.p.name
            );
        }
        // Start everything that can start; progress of one threadblock may unblock its
        // dependents and its connections' peers.
        while let Some(t) = queue.pop() {
            let t = t as usize;
            queued[t] = false;
            if sim.start(t, &mut room) {
                let mut wake = |w: u32| {
                    if !queued[w as usize] {
                        queued[w as usize] = true;
                        queue.push(w);
                    }
                };
                room.drain(..).for_each(&mut wake);
                sim.neighbours(t, wake);
            }
        }
        if sim.active == 0 && sim.flying == 0 && sim.timers.is_empty() {
            if let Some(t) = sim.tbs.iter().find(|t| !t.finished(slices.len())) {
                bail!("{}", sim.stuck(t));
            }
            break;
        }
        // The sharing changes when a flow starts or finishes.
        sim.update_rates();
        sim.advance(&mut woken);
        for t in woken.drain(..) {
            if !queued[t as usize] {
                queued[t as usize] = true;
                queue.push(t);
            }
            sim.neighbours(t as usize, |w| {
                if !queued[w as usize] {
                    queued[w as usize] = true;
                    queue.push(w);
                }
            });
        }
    }
    Ok(Run {
        time_us: sim.now,
        transfers: sim.transfers,
        events,
        reads: sim.reads,
    })
}

impl<'a, 'p> Sim<'a, 'p> {
    fn new(
        layout: &'a Layout<'p>,
        slices: &'a [f64],
        producer: Option<&'a super::Producer>,
    ) -> Sim<'a, 'p> {
        Sim {
            layout,
            tbs: layout.tbs.clone(),
            waiting: (0..layout.tbs.len()).map(|_| BinaryHeap::new()).collect(),
            conns: layout.conns.clone(),
            classes: (0..layout.resources.len())
                .map(|_| Class {
                    flows: BinaryHeap::new(),
                    served: 0.0,
                    at: 0.0,
                    rate: 0.0,
                    dirty: false,
                    grouped: false,
                })
                .collect(),
            slices,
            producer,
            active: 0,
            ends: IndexedHeap::new(layout.resources.len()),
            in_flight: vec![VecDeque::new(); layout.links],
            arrivals: IndexedHeap::new(layout.links),
            flying: 0,
            dirty: Vec::new(),
            sharing: Sharing::new(layout.caps.len()),
            reached: vec![false; layout.caps.len()],
            reached_list: Vec::new(),
            now: 0.0,
            seq: 0,
            transfers: 0,
            timers: BinaryHeap::new(),
            reads: vec![f64::INFINITY; slices.len()],
        }
    }

    /// Calls `f` on the threadblocks waiting for the steps `t` has done. (A receiver is
    /// woken by the arrival of its message, a sender by the room its receiver makes.)
    fn neighbours(&mut self, t: usize, mut f: impl FnMut(u32)) {
        let done = self.tbs[t].done;
        while let Some(&Reverse((needed, w))) = self.waiting[t].peek() {
            if needed > done {
                break;
            }
            self.waiting[t].pop();
            f(w);
        }
    }

    /// Starts a flow of `bytes` in `class` for threadblock `tb`.
    fn add_flow(&mut self, class: usize, tb: usize, conn: u32, bytes: f64) {
        let now = self.now;
        let c = &mut self.classes[class];
        c.advance_to(now);
        c.flows.push(Reverse(Flow {
            end: Key(c.served + bytes),
            seq: self.seq,
            bytes: Key(bytes),
            tb: tb as u32,
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
    /// The senders whose connections it took messages from (they have room now) go to
    /// `room`.
    fn start(&mut self, t: usize, room: &mut Vec<u32>) -> bool {
        let layout = self.layout;
        let iterations = self.slices.len();
        let mut progressed = false;
        loop {
            let tb = &self.tbs[t];
            if tb.busy || tb.finished(iterations) {
                return progressed;
            }
            let n = tb.len as usize;
            let (iter, idx) = (tb.done / n, tb.done % n);
            let i = tb.first as usize + idx;
            // A dependency is met once the other threadblock has done that step of this
            // slice: more than `needed` steps over all slices.
            let unmet = layout.deps_of(i).iter().find_map(|&(on, step)| {
                let other = &self.tbs[on as usize];
                let needed = iter * other.len as usize + step as usize;
                (other.done <= needed).then_some((on as usize, needed + 1))
            });
            if let Some((on, needed)) = unmet {
                self.waiting[on].push(Reverse((needed, t as u32)));
                return progressed;
            }
            let release = layout.release(i, iter, self.slices, self.producer);
            if release > self.now {
                self.timers.push(Reverse((Key(release), t as u32)));
                return progressed;
            }
            let op = layout.steps[i].op;
            if op.receives() {
                let c = &self.conns[tb.recv_conn as usize];
                if c.arrived <= tb.taken {
                    return progressed;
                }
            }
            if op.sends() {
                let c = &self.conns[tb.send_conn as usize];
                if c.started - c.taken >= layout.depth {
                    return progressed;
                }
            }
            let bytes = layout.steps[i].count as f64 * self.slices[iter];
            let (rank, recv_conn, send_conn) = (tb.rank as usize, tb.recv_conn, tb.send_conn);
            progressed = true;
            if layout.steps[i].reads_input {
                self.reads[iter] = self.reads[iter].min(self.now);
            }
            if op.receives() {
                self.tbs[t].taken += 1;
                self.conns[recv_conn as usize].taken += 1;
                let sender = layout.conn_ends[recv_conn as usize].0;
                if sender != NONE {
                    room.push(sender);
                }
            }
            if op.sends() {
                let conn = &mut self.conns[send_conn as usize];
                conn.started += 1;
                let class = conn.class;
                self.add_flow(class, t, send_conn, bytes * layout.wire);
                self.tbs[t].busy = true;
                self.transfers += 1;
            } else if matches!(op, Op::Copy | Op::Reduce) {
                self.add_flow(layout.local_class[rank], t, NONE, bytes);
                self.tbs[t].busy = true;
            } else if op == Op::Compute {
                let weighted = bytes * layout.compute_weight;
                self.add_flow(layout.local_class[rank], t, NONE, weighted);
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
        let mut rates = Vec::new();
        while let Some(start) = self.dirty.pop() {
            if !self.classes[start].dirty {
                continue;
            }
            // The connected group: classes with flows, and changed ones (a class that lost
            // its last flow frees bandwidth for its neighbours).
            self.classes[start].dirty = false;
            if let Some((cap, uses)) = self.layout.solo[start] {
                self.update_solo(start, cap, uses);
                continue;
            }
            self.connected_group(start, &mut group);
            self.share_in_group(&group, &mut rates);
        }
    }

    /// The rate of class `c`, alone on one resource of capacity `cap` that it lists `uses`
    /// times: progressive filling gives each flow cap / (flows × uses).
    fn update_solo(&mut self, c: usize, cap: f64, uses: f64) {
        let now = self.now;
        let class = &mut self.classes[c];
        class.advance_to(now);
        match class.flows.peek() {
            Some(top) => {
                class.rate = cap / (class.flows.len() as f64 * uses);
                let end = now + (top.0.end.0 - class.served).max(0.0) / class.rate;
                self.ends.set(c, end);
            }
            None => {
                class.rate = 0.0;
                self.ends.remove(c);
            }
        }
    }

    /// Fills `group` with the classes connected to `start` through shared resources that
    /// have flows or changed.
    fn connected_group(&mut self, start: usize, group: &mut Vec<usize>) {
        let layout = self.layout;
        group.clear();
        group.push(start);
        self.classes[start].grouped = true;
        let mut i = 0;
        while i < group.len() {
            let c = group[i];
            i += 1;
            for &j in &layout.resources[c] {
                // Each resource's users are looked at once per group (a switch has many).
                if self.reached[j] {
                    continue;
                }
                self.reached[j] = true;
                self.reached_list.push(j);
                for &other in &layout.users[j] {
                    let o = &mut self.classes[other];
                    if !o.grouped && (o.dirty || !o.flows.is_empty()) {
                        o.grouped = true;
                        o.dirty = false;
                        group.push(other);
                    }
                }
            }
        }
        for &c in group.iter() {
            self.classes[c].grouped = false;
        }
        for j in self.reached_list.drain(..) {
            self.reached[j] = false;
        }
    }

    /// Shares the resources of `group` max-min fairly among its classes' flows and
    /// reschedules each class's next end (`rates`: a reused buffer).
    fn share_in_group(&mut self, group: &[usize], rates: &mut Vec<f64>) {
        let layout = self.layout;
        let now = self.now;
        let members: Vec<(&[usize], f64)> = group
            .iter()
            .filter(|&&c| !self.classes[c].flows.is_empty())
            .map(|&c| {
                (
                    layout.resources[c].as_slice(),
                    self.classes[c].flows.len() as f64,
                )
            })
            .collect();
        self.sharing.rates(&layout.caps, &members, rates);
        let mut rate = rates.iter();
        for &c in group {
            let class = &mut self.classes[c];
            class.advance_to(now);
            let Some(top) = class.flows.peek() else {
                class.rate = 0.0;
                self.ends.remove(c);
                continue;
            };
            class.rate = *rate.next().expect("one rate per class with flows");
            let end = now + (top.0.end.0 - class.served).max(0.0) / class.rate;
            self.ends.set(c, end);
        }
    }

    /// Moves time to the next event (a flow's last byte leaves, or a message arrives) and
    /// retires what finished; `woken` gets the threadblocks that may now go on.
    fn advance(&mut self, woken: &mut Vec<u32>) {
        let next_end = self.ends.peek().map_or(f64::INFINITY, |(_, t)| t);
        let next_arrival = self.arrivals.peek().map_or(f64::INFINITY, |(_, t)| t);
        let next_timer = self.timers.peek().map_or(f64::INFINITY, |t| t.0 .0 .0);
        let next = next_end.min(next_arrival).min(next_timer);
        self.now = next;
        let tol = 1e-12 * next.max(1.0);
        while let Some(Reverse((at, t))) = self.timers.peek() {
            if at.0 > next + tol {
                break;
            }
            woken.push(*t);
            self.timers.pop();
        }
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
                let tb = &mut self.tbs[f.tb as usize];
                tb.busy = false;
                tb.done += 1;
                if f.conn != NONE {
                    let conn = &self.conns[f.conn as usize];
                    let (link, alpha) = (conn.link, conn.alpha);
                    if self.in_flight[link].is_empty() {
                        self.arrivals.set(link, next + alpha);
                    }
                    self.in_flight[link].push_back((next + alpha, f.conn));
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
                self.conns[conn as usize].arrived += 1;
                let receiver = self.layout.conn_ends[conn as usize].1;
                if receiver != NONE {
                    woken.push(receiver);
                }
            }
            match queue.front() {
                Some(&(at, _)) => self.arrivals.set(link, at),
                None => self.arrivals.remove(link),
            }
        }
    }

    /// A one-line description of why threadblock `t` cannot go on.
    fn stuck(&self, t: &Tb) -> String {
        let layout = self.layout;
        let n = t.len as usize;
        let (iter, idx) = (t.done / n, t.done % n);
        let i = t.first as usize + idx;
        let op = layout.steps[i].op;
        let why = if let Some(&(on, step)) = layout.deps_of(i).iter().find(|&&(on, step)| {
            let other = &self.tbs[on as usize];
            other.done <= iter * other.len as usize + step as usize
        }) {
            format!("waits for tb {} step {step}", self.tbs[on as usize].id)
        } else if op.receives() {
            "waits for a message that is never sent".to_string()
        } else {
            "waits for room in a connection that is never drained".to_string()
        };
        format!(
            "deadlock: rank {} tb {} step {idx} ({op}) of slice {iter} {why}",
            t.rank, t.id
        )
    }
}

/// Whether a step reads the input buffer.
fn reads_input(s: &runtime::ir::Step) -> bool {
    let reads_dst = matches!(s.op, Op::Reduce | Op::Compute);
    (s.op.reads_src() && s.src.buffer == runtime::ir::Buffer::Input)
        || (reads_dst && s.dst.buffer == runtime::ir::Buffer::Input)
}
