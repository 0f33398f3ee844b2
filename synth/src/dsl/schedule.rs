//! Passes 3 to 5 and the checks of pass 8: priorities, a global order, threadblock and
//! channel assignment (automatic or manual), dependencies, and the send/receive-order check.
//! The result is one instance of the program in the IR.
//!
//! Order: one global list of the instructions of every instance (see [`order`]); every
//! threadblock runs its instructions in that order, so both ends of every connection see its
//! messages in the same order, and running the list front to back is a schedule that never
//! waits on a message not yet sent nor sends into a full connection FIFO. Such a program
//! cannot deadlock: in any state, the earliest instruction of the list not yet run has run
//! everything before it in the list, so its dependencies, its message and room on its
//! connection are there (the verifier checks the program again with bounded FIFOs).

use super::builder::{PBuf, Tracer};
use super::dag::{Dag, Instr, PSlot, TEMP};
use super::error::{DslError, DslResult};
use super::replicate::{self, SlotMap};
use super::Policy;
use runtime::ir::{self, Dep, Gpu, Op, Slot, Step, Threadblock};
use runtime::limits::Limits;
use runtime::verify::DEFAULT_FIFO_DEPTH;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, HashSet, VecDeque};

/// Where an instruction runs: rank, threadblock index on that rank, step index.
#[derive(Debug, Clone, Copy)]
struct Place {
    tb: usize,
    step: usize,
}

/// Transfer chains (a send, its forwarding `rcs`/`rrcs`, the final receive) and lone local
/// instructions, in program order.
fn chains(dag: &Dag) -> Vec<Vec<usize>> {
    let mut out: Vec<Vec<usize>> = (0..dag.instrs.len())
        .filter(|&k| dag.instrs[k].alive && dag.instrs[k].prev.is_none())
        .map(|k| dag.chain(k))
        .collect();
    out.sort_by_key(|c| c.iter().map(|&k| dag.instrs[k].order).min());
    out
}

/// The global order: a list schedule of the instruction graph (same-rank dependencies plus
/// send → receive), taking the ready instruction of least depth first, then the one with the
/// longest path to the end (with `program_order`: the one written first). A receive is ready
/// only once every earlier send on its connection (ranks and channel) has been received, so
/// both ends of every connection list its messages in the same order, and a send only while
/// its connection holds fewer than [`DEFAULT_FIFO_DEPTH`] messages sent and not received.
/// Where that leaves no order (ready sends taken first fill a connection whose receiver
/// waits for an earlier message), the list is made again in program order, which lists
/// every receive right after its send and so never fills a connection.
fn order(
    dag: &Dag,
    channel_of: &HashMap<usize, usize>,
    program_order: bool,
) -> DslResult<Vec<usize>> {
    let graph = InstrGraph::new(dag);
    let topo = graph.topological(dag)?;
    let (depth, reach) = graph.depth_and_reach(&topo);
    // In program order the order operations were written in decides instead.
    let key = |by_program: bool| {
        let (depth, reach) = (&depth, &reach);
        move |k: usize| {
            let (d, r) = if by_program {
                (0, 0)
            } else {
                (depth[k], reach[k])
            };
            Reverse((d, Reverse(r), dag.instrs[k].order, k))
        }
    };
    let listed = graph.list_schedule(dag, channel_of, topo.len(), key(program_order));
    if listed.is_err() && !program_order {
        if let Ok(list) = graph.list_schedule(dag, channel_of, topo.len(), key(true)) {
            return Ok(list);
        }
    }
    listed
}

/// The priority of a ready instruction in [`order`]'s list schedule (greatest first):
/// least depth, then longest reach, then program order, then index.
type Priority = Reverse<(usize, Reverse<usize>, usize, usize)>;

/// The instruction graph of the live instructions of a [`Dag`]: same-rank dependencies plus
/// send → receive.
struct InstrGraph {
    /// The successors of each instruction.
    succ: Vec<Vec<usize>>,
    /// The number of predecessors of each instruction.
    indeg: Vec<usize>,
}

impl InstrGraph {
    /// The graph of `dag`'s live instructions.
    fn new(dag: &Dag) -> InstrGraph {
        let n = dag.instrs.len();
        let mut succ: Vec<Vec<usize>> = vec![Vec::new(); n];
        let mut indeg = vec![0usize; n];
        for k in (0..n).filter(|&k| dag.instrs[k].alive) {
            let i = &dag.instrs[k];
            for &p in i.preds.iter().chain(i.prev.iter()) {
                succ[p].push(k);
                indeg[k] += 1;
            }
        }
        InstrGraph { succ, indeg }
    }

    /// A topological order of the live instructions (program order breaks ties); a cycle is
    /// an error at one of its operations.
    fn topological(&self, dag: &Dag) -> DslResult<Vec<usize>> {
        let n = dag.instrs.len();
        let alive = |k: usize| dag.instrs[k].alive;
        let mut topo = Vec::with_capacity(n);
        let mut deg = self.indeg.clone();
        let mut ready: BinaryHeap<Reverse<(usize, usize)>> = (0..n)
            .filter(|&k| alive(k) && deg[k] == 0)
            .map(|k| Reverse((dag.instrs[k].order, k)))
            .collect();
        while let Some(Reverse((_, k))) = ready.pop() {
            topo.push(k);
            for &w in &self.succ[k] {
                deg[w] -= 1;
                if deg[w] == 0 {
                    ready.push(Reverse((dag.instrs[w].order, w)));
                }
            }
        }
        let live = (0..n).filter(|&k| alive(k)).count();
        if topo.len() != live {
            let stuck = (0..n).find(|&k| alive(k) && deg[k] > 0).unwrap_or(0);
            return Err(DslError::new(
                &dag.instrs[stuck].loc,
                "dependency cycle: this operation waits (through others on the same ranks) for itself",
            ));
        }
        Ok(topo)
    }

    /// Per instruction, the longest path from a source to it (depth) and from it to a sink
    /// (reach), over the topological order `topo`.
    fn depth_and_reach(&self, topo: &[usize]) -> (Vec<usize>, Vec<usize>) {
        let n = self.succ.len();
        let mut depth = vec![0usize; n];
        for &k in topo {
            for &w in &self.succ[k] {
                depth[w] = depth[w].max(depth[k] + 1);
            }
        }
        let mut reach = vec![0usize; n];
        for &k in topo.iter().rev() {
            for &w in &self.succ[k] {
                reach[k] = reach[k].max(reach[w] + 1);
            }
        }
        (depth, reach)
    }

    /// Lists the `live` instructions, the ready one of greatest `key` first, a receive
    /// being ready only when it heads its connection's queue of sent messages and a send only
    /// when that queue has room; an error when some instruction can never be listed.
    fn list_schedule(
        &self,
        dag: &Dag,
        channel_of: &HashMap<usize, usize>,
        live: usize,
        key: impl Fn(usize) -> Priority,
    ) -> DslResult<Vec<usize>> {
        let n = dag.instrs.len();
        // The connection a receive listens on.
        let conn = |k: usize| {
            let i = &dag.instrs[k];
            (i.recv.unwrap_or(usize::MAX), i.rank, channel_of[&k])
        };
        // Per connection, the receives whose sends are listed, in order.
        let mut queues: HashMap<(usize, usize, usize), VecDeque<usize>> = HashMap::new();
        // Per connection, ready sends waiting for room.
        let mut parked: HashMap<(usize, usize, usize), Vec<usize>> = HashMap::new();
        let heads = |queues: &HashMap<_, VecDeque<usize>>, k: usize| {
            dag.instrs[k].prev.is_none() || queues.get(&conn(k)).and_then(|q| q.front()) == Some(&k)
        };
        let mut deg = self.indeg.clone();
        let mut ready: BinaryHeap<_> = (0..n)
            .filter(|&k| dag.instrs[k].alive && deg[k] == 0 && dag.instrs[k].prev.is_none())
            .map(&key)
            .collect();
        let mut out = Vec::with_capacity(live);
        while let Some(Reverse((_, _, _, k))) = ready.pop() {
            let i = &dag.instrs[k];
            if let Some(r) = i.next {
                let held = queues.get(&conn(r)).map_or(0, |q| q.len());
                if held >= DEFAULT_FIFO_DEPTH {
                    parked.entry(conn(r)).or_default().push(k);
                    continue;
                }
            }
            out.push(k);
            if i.prev.is_some() {
                let c = conn(k);
                let q = queues.get_mut(&c).expect("a receive is queued by its send");
                q.pop_front();
                if let Some(&f) = q.front() {
                    if deg[f] == 0 {
                        ready.push(key(f));
                    }
                }
                ready.extend(parked.remove(&c).unwrap_or_default().into_iter().map(&key));
            }
            if let Some(r) = i.next {
                queues.entry(conn(r)).or_default().push_back(r);
            }
            for &w in &self.succ[k] {
                deg[w] -= 1;
                if deg[w] == 0 && heads(&queues, w) {
                    ready.push(key(w));
                }
            }
        }
        if out.len() != live {
            let full = parked.values().flatten().next();
            return Err(match full {
                Some(&k) => full_connection(dag, channel_of, k),
                None => misordered_receive(dag, channel_of, &out),
            });
        }
        Ok(out)
    }
}

/// The error for a list schedule that stopped with send `k` waiting for room: every way on
/// keeps its connection full.
fn full_connection(dag: &Dag, channel_of: &HashMap<usize, usize>, k: usize) -> DslError {
    let i = &dag.instrs[k];
    let to = i.send.unwrap_or(0);
    DslError::new(
        &i.loc,
        format!(
            "rank {} would send more than {DEFAULT_FIFO_DEPTH} messages to rank {to} on channel {} before rank {to} can receive any, which fills the connection; give some of them another ch or threadblock",
            i.rank,
            channel_of[&k],
        ),
    )
}

/// The error for a list schedule that stopped at `out`: a receive left out, whose
/// connection's messages cannot be received in the order they are sent.
fn misordered_receive(dag: &Dag, channel_of: &HashMap<usize, usize>, out: &[usize]) -> DslError {
    let stuck = (0..dag.instrs.len())
        .find(|&k| dag.instrs[k].alive && dag.instrs[k].prev.is_some() && !out.contains(&k))
        .unwrap_or(0);
    let i = &dag.instrs[stuck];
    DslError::new(
        &i.loc,
        format!(
            "the transfers from rank {} to rank {} on channel {} cannot be received in the order they are sent; give some of them another ch",
            i.recv.unwrap_or(0),
            i.rank,
            channel_of[&stuck]
        ),
    )
}

/// The threadblocks of one (rank, channel) under the automatic policy: each has at most one
/// send peer and one receive peer, and each peer and direction belongs to one threadblock.
#[derive(Debug, Clone, Default)]
struct Lane {
    /// Whether a lone send to p and a lone receive from p share a threadblock.
    pair: bool,
    peers: Vec<(Option<usize>, Option<usize>)>,
    parent: Vec<usize>,
    by_send: HashMap<usize, usize>,
    by_recv: HashMap<usize, usize>,
    local: Option<usize>,
}

impl Lane {
    fn find(&self, mut t: usize) -> usize {
        while self.parent[t] != t {
            t = self.parent[t];
        }
        t
    }

    fn open(&mut self, send: Option<usize>, recv: Option<usize>) -> usize {
        let t = self.peers.len();
        self.peers.push((send, recv));
        self.parent.push(t);
        if let Some(w) = send {
            self.by_send.insert(w, t);
        }
        if let Some(u) = recv {
            self.by_recv.insert(u, t);
        }
        t
    }

    /// The threadblock for an instruction with these peers, or `None` on a conflict. Local
    /// work goes to the lane's local threadblock (opened on first use), so it runs beside
    /// the transfers instead of queueing on one of their threadblocks.
    fn place(&mut self, send: Option<usize>, recv: Option<usize>) -> Option<usize> {
        if send.is_none() && recv.is_none() {
            return Some(match self.local {
                Some(t) => self.find(t),
                None => {
                    let t = self.open(None, None);
                    self.local = Some(t);
                    t
                }
            });
        }
        let a = send
            .and_then(|w| self.by_send.get(&w))
            .map(|&t| self.find(t));
        let b = recv
            .and_then(|u| self.by_recv.get(&u))
            .map(|&t| self.find(t));
        match (a, b) {
            (Some(a), Some(b)) if a == b => Some(a),
            (Some(a), Some(b)) => {
                let ok = self.peers[a].1.is_none() && self.peers[b].0.is_none();
                ok.then(|| {
                    self.parent[b] = a;
                    self.peers[a].1 = self.peers[b].1;
                    self.by_recv.insert(recv.expect("b comes from recv"), a);
                    a
                })
            }
            (Some(a), None) => match recv {
                None => Some(a),
                Some(u) => self.peers[a].1.is_none().then(|| {
                    self.peers[a].1 = Some(u);
                    self.by_recv.insert(u, a);
                    a
                }),
            },
            (None, Some(b)) => match send {
                None => Some(b),
                Some(w) => self.peers[b].0.is_none().then(|| {
                    self.peers[b].0 = Some(w);
                    self.by_send.insert(w, b);
                    b
                }),
            },
            (None, None) => Some(self.pair(send, recv)),
        }
    }

    /// A new threadblock, except that a lone send to p and a lone receive from p share one
    /// (as a hand-written program would): fewer threadblocks, one per peer.
    fn pair(&mut self, send: Option<usize>, recv: Option<usize>) -> usize {
        if !self.pair {
            return self.open(send, recv);
        }
        let partner = match (send, recv) {
            (Some(w), None) => self.by_recv.get(&w).map(|&t| self.find(t)),
            (None, Some(u)) => self.by_send.get(&u).map(|&t| self.find(t)),
            _ => None,
        };
        match partner {
            Some(t) if send.is_some() && self.peers[t].0.is_none() => {
                self.peers[t].0 = send;
                self.by_send.insert(send.expect("matched Some"), t);
                t
            }
            Some(t) if recv.is_some() && self.peers[t].1.is_none() => {
                self.peers[t].1 = recv;
                self.by_recv.insert(recv.expect("matched Some"), t);
                t
            }
            _ => self.open(send, recv),
        }
    }
}

/// Threadblock key of an instruction before renumbering: (channel, lane-local id) for the
/// automatic policy, (user tb, 0) for the manual one.
type TbKey = (usize, usize);

/// Threadblocks and channels chosen so far.
#[derive(Default)]
struct Assignment {
    /// Threadblock of each instruction.
    tb_of: HashMap<usize, TbKey>,
    /// Channel of each threadblock, per rank.
    tb_channel: HashMap<(usize, TbKey), usize>,
    /// Channel of each instruction (its chain's).
    channel_of: HashMap<usize, usize>,
    /// Local instructions left for [`place_locals`] (automatic policy).
    locals: Vec<usize>,
    /// Automatic threadblocks per (rank, channel).
    lanes: HashMap<(usize, usize), Lane>,
    /// Channels of one copy of the program.
    per_copy: usize,
}

impl Assignment {
    /// The channels the assignment uses (at least one).
    fn channels(&self) -> usize {
        let channels = self.channel_of.values().chain(self.tb_channel.values());
        channels.max().map_or(1, |c| c + 1)
    }

    /// The assignment of every copy in `all` (the DAG of [`replicate::instances`], `origin`
    /// naming each instruction's original): copy i gets threadblocks of its own on the
    /// channels of copy 0 shifted by i × the channels of one copy.
    fn replicate(self, all: &Dag, origin: &[usize], instances: usize, policy: Policy) -> Self {
        let per_copy = self.channels();
        let key = |k: TbKey, i: usize| match policy {
            Policy::Manual => (k.0, i),
            Policy::Auto => (k.0 + i * per_copy, k.1),
        };
        let locals: HashSet<usize> = self.locals.iter().copied().collect();
        let mut a = Assignment {
            per_copy,
            ..Assignment::default()
        };
        for (n, x) in all.instrs.iter().enumerate() {
            let (o, i) = (origin[n], x.copy);
            a.channel_of.insert(n, self.channel_of[&o] + i * per_copy);
            if let Some(&k) = self.tb_of.get(&o) {
                a.tb_of.insert(n, key(k, i));
            }
            if locals.contains(&o) {
                a.locals.push(n);
            }
        }
        for i in 0..instances {
            for (&(rank, k), &c) in &self.tb_channel {
                a.tb_channel.insert((rank, key(k, i)), c + i * per_copy);
            }
            for (&(rank, c), lane) in &self.lanes {
                a.lanes.insert((rank, c + i * per_copy), lane.clone());
            }
        }
        a
    }
}

/// Pass 4 for the manual policy: the user's threadblocks, checked.
fn assign_manual(dag: &Dag, chains: &[Vec<usize>]) -> DslResult<Assignment> {
    let mut a = Assignment::default();
    // (send peer, receive peer, channel) of each (rank, user threadblock).
    type Peers = (Option<usize>, Option<usize>, usize);
    let mut peers: HashMap<(usize, usize), Peers> = HashMap::new();
    let mut owner: HashMap<(usize, usize, usize, bool), usize> = HashMap::new();
    for members in chains {
        let ch = members.iter().find_map(|&m| dag.instrs[m].ch).unwrap_or(0);
        for &m in members {
            let i = &dag.instrs[m];
            let Some(tb) = i.tb_pin() else {
                let which = if i.op.receives() { "recvtb" } else { "sendtb" };
                return Err(DslError::new(
                    &i.loc,
                    format!(
                        "the manual threadblock policy needs {which} on this operation (rank {})",
                        i.rank
                    ),
                ));
            };
            let entry = peers.entry((i.rank, tb)).or_insert((None, None, ch));
            let sides = [
                (i.send, &mut entry.0, "sends to"),
                (i.recv, &mut entry.1, "receives from"),
            ];
            for (mine, have, dir) in sides {
                let Some(p) = mine else { continue };
                match *have {
                    Some(q) if q != p => {
                        return Err(DslError::new(
                            &i.loc,
                            format!("threadblock {tb} of rank {} already {dir} rank {q}; a threadblock has one send peer and one receive peer, so it cannot also use rank {p}", i.rank),
                        ))
                    }
                    _ => *have = Some(p),
                }
            }
            let talks = i.send.is_some() || i.recv.is_some();
            if entry.2 != ch && talks {
                return Err(DslError::new(
                    &i.loc,
                    format!("threadblock {tb} of rank {} is on channel {}; this operation uses channel {ch}", i.rank, entry.2),
                ));
            }
            for (p, is_send) in [(i.send, true), (i.recv, false)] {
                let Some(p) = p else { continue };
                let o = *owner.entry((i.rank, ch, p, is_send)).or_insert(tb);
                if o != tb {
                    let dir = if is_send { "send to" } else { "receive from" };
                    return Err(DslError::new(
                        &i.loc,
                        format!("threadblocks {o} and {tb} of rank {} both {dir} rank {p} on channel {ch}; one threadblock per peer, direction and channel", i.rank),
                    ));
                }
            }
            a.tb_of.insert(m, (tb, 0));
            a.tb_channel.insert((i.rank, (tb, 0)), entry.2);
            a.channel_of.insert(m, ch);
        }
    }
    Ok(a)
}

/// A chain's threadblocks on one channel: the lanes it changes, and each member's threadblock.
type Trial = (HashMap<usize, Lane>, Vec<(usize, usize)>);

/// Pass 4 for the automatic policy. A transfer chain's flow is the set of connections
/// (sender, receiver) it uses. Each chain goes on its pinned channel, else on the channel of
/// an earlier chain with the same flow, else on the channel below `cap` where the busiest
/// threadblock it lands in holds the fewest instructions so far, the least such channel
/// first (so transfers that could run in parallel get threadblocks of their own instead of
/// queueing on one), else on the first channel where it fits; in each case every
/// instruction must fit a threadblock with one send and one receive peer.
fn assign_auto(dag: &Dag, chains: &[Vec<usize>], pair: bool, cap: usize) -> DslResult<Assignment> {
    let mut a = Assignment::default();
    let fresh = Lane {
        pair,
        ..Lane::default()
    };
    let limit = chains.len() + 1;
    // The channel of each flow, and the instructions on each (rank, channel, threadblock).
    let mut flows: HashMap<Vec<(usize, usize)>, usize> = HashMap::new();
    let mut load: HashMap<(usize, usize, usize), usize> = HashMap::new();
    for members in chains {
        let first = &dag.instrs[members[0]];
        if members.len() == 1 && first.send.is_none() && first.recv.is_none() {
            a.locals.push(members[0]);
            a.channel_of.insert(members[0], 0);
            continue;
        }
        let mut flow: Vec<(usize, usize)> = members
            .iter()
            .filter_map(|&m| dag.instrs[m].send.map(|to| (dag.instrs[m].rank, to)))
            .collect();
        flow.sort_unstable();
        flow.dedup();
        let trial = |c: usize| -> Option<Trial> {
            let mut lanes: HashMap<usize, Lane> = HashMap::new();
            let mut ids = Vec::new();
            for &m in members {
                let i = &dag.instrs[m];
                let lane = lanes
                    .entry(i.rank)
                    .or_insert_with(|| a.lanes.get(&(i.rank, c)).unwrap_or(&fresh).clone());
                ids.push((m, lane.place(i.send, i.recv)?));
            }
            Some((lanes, ids))
        };
        let busiest = |c: usize, ids: &[(usize, usize)]| {
            let on = |&(m, t): &(usize, usize)| load.get(&(dag.instrs[m].rank, c, t));
            ids.iter().filter_map(on).max().copied().unwrap_or(0)
        };
        let pinned = members.iter().find_map(|&m| dag.instrs[m].ch);
        let choice = match pinned {
            Some(c) => trial(c).map(|t| (c, t)),
            None => flows
                .get(&flow)
                .and_then(|&c| trial(c).map(|t| (c, t)))
                .or_else(|| {
                    let fits = (0..cap).filter_map(|c| trial(c).map(|t| (c, t)));
                    fits.min_by_key(|(c, t)| (busiest(*c, &t.1), *c))
                })
                .or_else(|| (cap..limit).find_map(|c| trial(c).map(|t| (c, t)))),
        };
        let Some((c, (lanes, ids))) = choice else {
            return Err(DslError::new(
                &first.loc,
                format!("no threadblock on channel {} can take this transfer: a threadblock has one send peer and one receive peer (pin another ch)", pinned.unwrap_or(0)),
            ));
        };
        for (rank, lane) in lanes {
            a.lanes.insert((rank, c), lane);
        }
        for (m, t) in ids {
            a.tb_of.insert(m, (c, t));
            a.channel_of.insert(m, c);
            *load.entry((dag.instrs[m].rank, c, t)).or_default() += 1;
        }
        flows.entry(flow).or_insert(c);
    }
    Ok(a)
}

/// Automatic policy, after ordering: local work runs on the threadblock of its latest
/// producer on the rank, else on the rank's local threadblock; merged threadblocks resolve.
fn place_locals(a: &mut Assignment, dag: &Dag, position: &HashMap<usize, usize>) {
    let mut locals = std::mem::take(&mut a.locals);
    locals.sort_by_key(|m| position[m]);
    for m in locals {
        let i = &dag.instrs[m];
        let latest = i
            .preds
            .iter()
            .filter(|p| a.tb_of.contains_key(p))
            .max_by_key(|p| position[p]);
        let key = match latest {
            Some(p) => a.tb_of[p],
            None => {
                let channel = i.copy * a.per_copy;
                let lane = a.lanes.entry((i.rank, channel)).or_default();
                (
                    channel,
                    lane.place(None, None)
                        .expect("a local threadblock always fits"),
                )
            }
        };
        a.tb_of.insert(m, key);
    }
    for (m, key) in a.tb_of.iter_mut() {
        let rank = dag.instrs[*m].rank;
        if let Some(lane) = a.lanes.get(&(rank, key.0)) {
            key.1 = lane.find(key.1);
        }
        a.tb_channel.insert((rank, *key), key.0);
    }
}

/// Scratch offsets of one copy: each rank's named buffers, name after name, then the
/// compiler's receive slots, in one buffer `s`; returns the offsets and the total per rank.
pub(crate) fn scratch_layout(t: &Tracer, dag: &Dag) -> (Vec<HashMap<usize, usize>>, Vec<usize>) {
    t.scratch
        .iter()
        .zip(&dag.temp)
        .map(|(bufs, &temp)| {
            let mut base = 0;
            let mut at: HashMap<usize, usize> = bufs
                .iter()
                .map(|&(k, len)| {
                    base += len;
                    (k, base - len)
                })
                .collect();
            at.insert(TEMP, base);
            (at, base + temp)
        })
        .unzip()
}

/// Every instance of the program in the IR, the slots of copy i laid out by `map`
/// (threadblocks not yet renumbered), and the layout of the copies it made. With `pair`,
/// the automatic policy lets a lone send to p and a lone receive from p share a threadblock.
///
/// Automatic channels: one copy is assigned as if it were alone (one channel per flow where
/// the runtimes' channels allow). If its channels times the instances exceed them, the
/// program gets the most copies that fit instead: squeezing one copy into its share of the
/// channels puts unrelated transfers into one threadblock, which is slower than fewer copies
/// (measured in `results/dsl-channels.md`); a program with more copies than that and the same
/// channels would be no better, as each copy keeps its own channels.
pub(crate) fn schedule(
    t: &Tracer,
    one: &Dag,
    pair: bool,
    map: &SlotMap,
) -> DslResult<(Vec<Gpu>, SlotMap)> {
    let chains = chains(one);
    let most = Limits::PORTABLE.max_channels;
    let a = match t.options.policy {
        Policy::Manual => assign_manual(one, &chains)?,
        Policy::Auto => assign_auto(one, &chains, pair, most)?,
    };
    let map = match t.options.policy {
        Policy::Auto => map.with_instances(map.instances.min(most / a.channels()).max(1)),
        Policy::Manual => map.clone(),
    };
    let map = &map;
    if a.channels() * map.instances > most {
        return Err(DslError::new(
            &t.loc,
            format!(
                "one instance needs {} channels, so {} instances need {}, more than the runtimes' {most}; use fewer instances or pin ch",
                a.channels(),
                map.instances,
                a.channels() * map.instances
            ),
        ));
    }
    let (all, origin) = replicate::instances(one, map);
    let dag = &all;
    let mut a = a.replicate(dag, &origin, map.instances, t.options.policy);
    let list = order(dag, &a.channel_of, t.options.program_order)?;
    let position: HashMap<usize, usize> = list.iter().enumerate().map(|(p, &k)| (k, p)).collect();
    if t.options.policy == Policy::Auto {
        place_locals(&mut a, dag, &position);
    }
    let (layout, scratch_total) = scratch_layout(t, one);
    let slot = |rank: usize, s: PSlot, copy: usize| -> Slot {
        let at = match s.buf {
            PBuf::Input => Slot::new(ir::Buffer::Input, s.index),
            PBuf::Output => Slot::new(ir::Buffer::Output, s.index),
            PBuf::Scratch(k) => Slot::new(ir::Buffer::Scratch, layout[rank][&k] + s.index),
        };
        map.map(rank, at, copy)
    };
    let (mut tbs, place) = threadblocks(dag, &list, &a, t.collective.ranks, &slot);
    add_dependencies(dag, &list, &place, &mut tbs);
    if t.options.dependence_nop {
        let position: HashMap<(usize, usize, usize), usize> = list
            .iter()
            .enumerate()
            .map(|(k, &m)| {
                let p = place[&m];
                ((dag.instrs[m].rank, p.tb, p.step), k)
            })
            .collect();
        for (rank, g) in tbs.iter_mut().enumerate() {
            hoist_reduce_chain_deps(g, |tb, step| position[&(rank, tb, step)]);
        }
    }
    check_transfer_order(dag, &place, &tbs)?;
    Ok((gpus(t, tbs, &scratch_total, map.instances), map.clone()))
}

/// The threadblocks of each of the `n` ranks, numbered per rank in first-use order, with
/// their steps in the global order `list` (no dependencies yet), and where each
/// instruction landed.
fn threadblocks(
    dag: &Dag,
    list: &[usize],
    a: &Assignment,
    n: usize,
    slot: &dyn Fn(usize, PSlot, usize) -> Slot,
) -> (Vec<Vec<Threadblock>>, HashMap<usize, Place>) {
    let mut numbering: Vec<BTreeMap<TbKey, usize>> = vec![BTreeMap::new(); n];
    let mut tbs: Vec<Vec<Threadblock>> = vec![Vec::new(); n];
    let mut place: HashMap<usize, Place> = HashMap::new();
    for &m in list {
        let i = &dag.instrs[m];
        let key = a.tb_of[&m];
        let next = numbering[i.rank].len();
        let tb = *numbering[i.rank].entry(key).or_insert(next);
        if tb == tbs[i.rank].len() {
            tbs[i.rank].push(Threadblock {
                send: None,
                recv: None,
                channel: a.tb_channel[&(i.rank, key)],
                steps: Vec::new(),
            });
        }
        let block = &mut tbs[i.rank][tb];
        block.send = block.send.or(i.send);
        block.recv = block.recv.or(i.recv);
        place.insert(
            m,
            Place {
                tb,
                step: block.steps.len(),
            },
        );
        block.steps.push(step(i, dag, slot));
    }
    (tbs, place)
}

/// Sets each step's dependencies: the latest producer per other threadblock.
fn add_dependencies(
    dag: &Dag,
    list: &[usize],
    place: &HashMap<usize, Place>,
    tbs: &mut [Vec<Threadblock>],
) {
    for &m in list {
        let i = &dag.instrs[m];
        let here = place[&m];
        let mut latest: BTreeMap<usize, usize> = BTreeMap::new();
        for p in &i.preds {
            let there = place[p];
            if there.tb != here.tb {
                let e = latest.entry(there.tb).or_insert(there.step);
                *e = (*e).max(there.step);
            }
        }
        tbs[i.rank][here.tb].steps[here.step].deps = latest
            .into_iter()
            .map(|(tb, step)| Dep { tb, step })
            .collect();
    }
}

/// The GPUs of the program: each rank's threadblocks, with the collective's input and
/// output sizes where its steps use those buffers (else 0) and its scratch size, times the
/// `instances`.
fn gpus(
    t: &Tracer,
    tbs: Vec<Vec<Threadblock>>,
    scratch_total: &[usize],
    instances: usize,
) -> Vec<Gpu> {
    let uses = |g: &[Threadblock], b: ir::Buffer| {
        g.iter().flat_map(|tb| &tb.steps).any(|s| {
            (s.op.reads_src() && s.src.buffer == b)
                || ((s.op.writes_dst() || s.op == Op::RecvReduceSend) && s.dst.buffer == b)
        })
    };
    tbs.into_iter()
        .enumerate()
        .map(|(rank, threadblocks)| Gpu {
            rank,
            input_chunks: if uses(&threadblocks, ir::Buffer::Input) {
                t.collective.size(ir::Buffer::Input) * instances
            } else {
                0
            },
            output_chunks: if uses(&threadblocks, ir::Buffer::Output) {
                t.collective.size(ir::Buffer::Output) * instances
            } else {
                0
            },
            scratch_chunks: scratch_total[rank] * instances,
            threadblocks,
        })
        .collect()
}

/// `dependence_nop` (mscclang.md §4.5): in a chain of local reduces that the runtime fuses
/// into one transmission (consecutive `re` steps with one destination and one source
/// buffer), the dependencies of the later steps move to the first, where the XML writer
/// emits them as nops before the chain, so that they no longer break the fusion. A
/// dependency moves only when its producer comes before the chain's first step in the
/// schedule's global order (`position`), so no wait can become a cycle.
fn hoist_reduce_chain_deps(g: &mut [Threadblock], position: impl Fn(usize, usize) -> usize) {
    for (tbi, tb) in g.iter_mut().enumerate() {
        let steps = &mut tb.steps;
        let mut first = 0;
        for j in 1..steps.len() {
            let (prev, cur) = (&steps[j - 1], &steps[j]);
            let chained = prev.op == Op::Reduce
                && cur.op == Op::Reduce
                && prev.dst == cur.dst
                && prev.src.buffer == cur.src.buffer;
            if !chained {
                first = j;
                continue;
            }
            let start = position(tbi, first);
            let deps = std::mem::take(&mut steps[j].deps);
            let (movable, kept): (Vec<Dep>, Vec<Dep>) = deps
                .into_iter()
                .partition(|d| position(d.tb, d.step) < start);
            if !kept.is_empty() {
                // This step still waits: the chain is broken here, a new one may start.
                steps[j].deps = kept;
                steps[j].deps.extend(movable);
                first = j;
                continue;
            }
            for d in movable {
                let target = &mut steps[first].deps;
                match target.iter_mut().find(|e| e.tb == d.tb) {
                    Some(e) => e.step = e.step.max(d.step),
                    None => target.push(d),
                }
            }
            steps[first].deps.sort_by_key(|d| (d.tb, d.step));
        }
    }
}

/// The IR step of an instruction; `s`/`r` name the remote slot in their unused field.
fn step(i: &Instr, dag: &Dag, slot: &dyn Fn(usize, PSlot, usize) -> Slot) -> Step {
    let slot = |rank: usize, s: PSlot| slot(rank, s, i.copy);
    let (src, dst) = match i.op {
        Op::Send => {
            let local = slot(i.rank, i.src);
            let to = i.next.map(|n| &dag.instrs[n]);
            (local, to.map_or(local, |r| slot(r.rank, r.dst)))
        }
        Op::Recv => {
            let local = slot(i.rank, i.dst);
            let from = i.prev.map(|p| &dag.instrs[p]);
            (from.map_or(local, |s| slot(s.rank, s.src)), local)
        }
        Op::RecvCopySend => (slot(i.rank, i.dst), slot(i.rank, i.dst)),
        _ => (slot(i.rank, i.src), slot(i.rank, i.dst)),
    };
    Step::new(i.op, src, dst, i.count)
}

/// Pass 8's order check: on every connection the k-th send pairs with the k-th receive.
fn check_transfer_order(
    dag: &Dag,
    place: &HashMap<usize, Place>,
    tbs: &[Vec<Threadblock>],
) -> DslResult<()> {
    // For each (receiving rank, receiving tb), the sends that feed it in the sender's order.
    let mut fed: BTreeMap<(usize, usize, usize), Vec<usize>> = BTreeMap::new();
    let mut got: BTreeMap<(usize, usize), Vec<(usize, usize)>> = BTreeMap::new();
    for (k, i) in dag.instrs.iter().enumerate() {
        if !i.alive {
            continue;
        }
        if let Some(r) = i.next {
            let there = place[&r];
            let here = place[&k];
            fed.entry((dag.instrs[r].rank, there.tb, here.tb))
                .or_default()
                .push(k);
            got.entry((dag.instrs[r].rank, there.tb))
                .or_default()
                .push((there.step, k));
        }
    }
    for ((rank, tb), mut recvs) in got {
        recvs.sort_unstable();
        let mut by_sender: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for (_, s) in recvs {
            by_sender.entry(place[&s].tb).or_default().push(s);
        }
        for (stb, order) in by_sender {
            let mut sent = fed[&(rank, tb, stb)].clone();
            sent.sort_by_key(|s| place[s].step);
            if sent != order {
                let i = &dag.instrs[order[0]];
                return Err(DslError::new(
                    &i.loc,
                    format!(
                        "sends and receives between rank {} and rank {rank} (channel {}) happen in different orders on the two sides",
                        i.rank, tbs[rank][tb].channel
                    ),
                ));
            }
        }
    }
    Ok(())
}
