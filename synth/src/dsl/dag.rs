//! Pass 1 and 2: the instruction DAG of a traced program, and instruction fusion.
//!
//! Every operation becomes instructions on the ranks involved (a send and its receive, or one
//! local copy/reduce). Per (rank, buffer, slot) the last writer and the readers since give
//! read-after-write, write-after-read and write-after-write edges, all inside one rank; a
//! send and its receive are linked as partners. Fusion then turns a receive whose result is
//! read only by a send into `rcs` (or `rrcs` after a reduction; other readers would wait for
//! the forward to finish), and an
//! `rrcs` whose stored result is overwritten before anyone reads it into `rrs`.

use super::builder::{Operation, PBuf, Pins, Tracer};
use super::error::Loc;
use super::Policy;
use runtime::ir::Op;
use std::collections::HashMap;

/// A slot reference inside one rank: buffer and first index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct PSlot {
    /// The buffer.
    pub buf: PBuf,
    /// The first slot.
    pub index: usize,
}

/// One instruction of the DAG.
#[derive(Debug, Clone)]
pub(crate) struct Instr {
    /// The rank it runs on.
    pub rank: usize,
    /// Its IR operation.
    pub op: Op,
    /// Local source (for `s`/`r`: see `remote`).
    pub src: PSlot,
    /// Local destination.
    pub dst: PSlot,
    /// The number of slots it moves.
    pub count: usize,
    /// Peer this instruction sends to.
    pub send: Option<usize>,
    /// Peer this instruction receives from.
    pub recv: Option<usize>,
    /// Threadblock pin on the sending side.
    pub sendtb: Option<usize>,
    /// Threadblock pin on the receiving side.
    pub recvtb: Option<usize>,
    /// Channel pin.
    pub ch: Option<usize>,
    /// Where its operation was written.
    pub loc: Loc,
    /// Producers on the same rank this instruction must wait for.
    pub preds: Vec<usize>,
    /// Consumers on the same rank (reverse of `preds`).
    pub succs: Vec<usize>,
    /// The instruction that receives what this one sends.
    pub next: Option<usize>,
    /// The instruction whose send this one receives.
    pub prev: Option<usize>,
    /// Instructions that read this one's result before it is overwritten.
    pub readers: Vec<usize>,
    /// Slots of the result later overwritten by another write.
    pub overwritten: usize,
    /// False once fused into another instruction.
    pub alive: bool,
    /// Position of the operation in the program.
    pub order: usize,
    /// The instance (copy of the program) it belongs to.
    pub copy: usize,
}

impl Instr {
    fn new(rank: usize, op: Op, src: PSlot, dst: PSlot, count: usize, o: &Operation) -> Instr {
        Instr {
            rank,
            op,
            src,
            dst,
            count,
            send: None,
            recv: None,
            sendtb: None,
            recvtb: None,
            ch: o.pins.ch,
            loc: o.loc.clone(),
            preds: Vec::new(),
            succs: Vec::new(),
            next: None,
            prev: None,
            readers: Vec::new(),
            overwritten: 0,
            alive: true,
            order: 0,
            copy: 0,
        }
    }

    /// The slots this instruction reads and writes on its rank.
    fn accesses(&self) -> (Vec<PSlot>, Vec<PSlot>) {
        let run = |s: PSlot| -> Vec<PSlot> {
            (s.index..s.index + self.count)
                .map(|index| PSlot { buf: s.buf, index })
                .collect()
        };
        match self.op {
            Op::Send => (run(self.src), vec![]),
            Op::Recv => (vec![], run(self.dst)),
            Op::Copy | Op::RecvReduceCopy => (run(self.src), run(self.dst)),
            Op::Reduce => {
                let mut r = run(self.src);
                r.extend(run(self.dst));
                (r, run(self.dst))
            }
            Op::Compute => (run(self.dst), run(self.dst)),
            _ => (vec![], vec![]),
        }
    }

    /// The threadblock pin that applies to this instruction's side.
    pub fn tb_pin(&self) -> Option<usize> {
        if self.op.receives() {
            self.recvtb
        } else if self.op.sends() {
            self.sendtb
        } else {
            self.sendtb.or(self.recvtb)
        }
    }
}

fn pslot(r: &super::builder::PRef) -> PSlot {
    PSlot {
        buf: r.buf,
        index: r.index,
    }
}

/// The one instruction of operation number `order`, a copy, reduce or compute inside one
/// rank.
fn local_instr(order: usize, o: &Operation) -> Instr {
    let (s, d) = (o.src, o.dst);
    let Pins { sendtb, recvtb, .. } = o.pins;
    let op = match (o.compute, o.reduce) {
        (true, _) => Op::Compute,
        (false, true) => Op::Reduce,
        (false, false) => Op::Copy,
    };
    let mut i = Instr::new(s.rank, op, pslot(&s), pslot(&d), s.size, o);
    i.sendtb = sendtb.or(recvtb);
    i.order = order;
    i
}

/// Pushes the instructions of operation number `order` across ranks: a send and its
/// receive and, for a reduce without `fused`, a local reduce of a receive into a slot of
/// [`TEMP`] (counted in `temp`).
fn push_transfer(
    instrs: &mut Vec<Instr>,
    temp: &mut [usize],
    order: usize,
    o: &Operation,
    fused: bool,
) {
    let (s, d) = (o.src, o.dst);
    let Pins { sendtb, recvtb, .. } = o.pins;
    let mut send = Instr::new(s.rank, Op::Send, pslot(&s), pslot(&d), s.size, o);
    send.send = Some(d.rank);
    send.sendtb = sendtb;
    send.order = order;
    let split = o.reduce && !fused;
    let landing = if split {
        temp[d.rank] += s.size;
        PSlot {
            buf: PBuf::Scratch(TEMP),
            index: temp[d.rank] - s.size,
        }
    } else {
        pslot(&d)
    };
    send.dst = landing;
    let op = if o.reduce && fused {
        Op::RecvReduceCopy
    } else {
        Op::Recv
    };
    let src = if o.reduce { pslot(&d) } else { pslot(&s) };
    let mut recv = Instr::new(d.rank, op, src, landing, s.size, o);
    recv.recv = Some(s.rank);
    recv.recvtb = recvtb;
    recv.order = order;
    let k = instrs.len();
    send.next = Some(k + 1);
    recv.prev = Some(k);
    instrs.push(send);
    instrs.push(recv);
    if split {
        let mut reduce = Instr::new(d.rank, Op::Reduce, landing, pslot(&d), s.size, o);
        reduce.sendtb = recvtb;
        reduce.order = order;
        instrs.push(reduce);
    }
}

/// The last writer of one (rank, slot) and the readers since.
#[derive(Default)]
struct SlotUse {
    writer: Option<usize>,
    readers: Vec<usize>,
}

/// Read/write dependencies per (rank, slot), in program order: fills every instruction's
/// `preds`, `succs`, `readers` and `overwritten`.
fn add_dependencies(instrs: &mut [Instr]) {
    let mut uses: HashMap<(usize, PSlot), SlotUse> = HashMap::new();
    for k in 0..instrs.len() {
        let rank = instrs[k].rank;
        let (reads, writes) = instrs[k].accesses();
        let mut preds = Vec::new();
        for s in &reads {
            let u = uses.entry((rank, *s)).or_default();
            if let Some(w) = u.writer {
                preds.push(w);
                if w != k && !instrs[w].readers.contains(&k) {
                    instrs[w].readers.push(k);
                }
            }
        }
        for s in &writes {
            let u = uses.entry((rank, *s)).or_default();
            if let Some(w) = u.writer {
                preds.push(w);
                if w != k {
                    instrs[w].overwritten += 1;
                }
            }
            preds.extend(u.readers.iter().copied());
        }
        for s in &reads {
            uses.entry((rank, *s)).or_default().readers.push(k);
        }
        for s in &writes {
            let u = uses.entry((rank, *s)).or_default();
            u.writer = Some(k);
            u.readers.clear();
        }
        preds.sort_unstable();
        preds.dedup();
        preds.retain(|&p| p != k);
        for &p in &preds {
            instrs[p].succs.push(k);
        }
        instrs[k].preds = preds;
    }
}

/// The instruction DAG of a traced program.
pub(crate) struct Dag {
    /// The instructions, fused ones not `alive`.
    pub instrs: Vec<Instr>,
    /// Per rank, scratch slots of [`TEMP`] used to receive before a separate reduce.
    pub temp: Vec<usize>,
}

/// The scratch buffer number of the compiler's own receive slots (laid out after the
/// program's named scratch buffers).
pub(crate) const TEMP: usize = usize::MAX;

impl Dag {
    /// Pass 1: instructions and their read/write dependencies. Without `fused` (RCCL) a
    /// reduce across ranks receives into a scratch slot of its own, then reduces locally.
    pub fn build(t: &Tracer, fused: bool) -> Dag {
        let mut instrs: Vec<Instr> = Vec::new();
        let mut temp = vec![0usize; t.collective.ranks];
        for (order, o) in t.ops.iter().enumerate() {
            if o.src.rank == o.dst.rank {
                instrs.push(local_instr(order, o));
            } else {
                push_transfer(&mut instrs, &mut temp, order, o, fused);
            }
        }
        add_dependencies(&mut instrs);
        Dag { instrs, temp }
    }

    /// The first instruction of the transfer chain `k` belongs to.
    pub fn head(&self, mut k: usize) -> usize {
        while let Some(p) = self.instrs[k].prev {
            k = p;
        }
        k
    }

    /// The instructions of the chain starting at `head`.
    pub fn chain(&self, head: usize) -> Vec<usize> {
        let mut out = vec![head];
        let mut k = head;
        while let Some(n) = self.instrs[k].next {
            out.push(n);
            k = n;
        }
        out
    }

    /// Pass 2: fusion into `rcs`, `rrcs` and `rrs`.
    pub fn fuse(&mut self, policy: Policy) {
        for s in 0..self.instrs.len() {
            let Some(r) = self.fusable(s, policy) else {
                continue;
            };
            if self.fusion_cycles(r, s) {
                continue;
            }
            self.merge(r, s);
        }
        for k in 0..self.instrs.len() {
            let i = &self.instrs[k];
            let rrs = i.alive
                && i.op == Op::RecvReduceCopySend
                && i.readers.iter().all(|&x| !self.instrs[x].alive)
                && i.overwritten == i.count;
            if rrs {
                self.instrs[k].op = Op::RecvReduceSend;
            }
        }
    }

    /// The receive `r` that send `s` can fuse with, if any.
    fn fusable(&self, s: usize, policy: Policy) -> Option<usize> {
        let si = &self.instrs[s];
        if !si.alive || si.op != Op::Send || si.preds.len() != 1 {
            return None;
        }
        let r = si.preds[0];
        let ri = &self.instrs[r];
        let ok = ri.alive
            && matches!(ri.op, Op::Recv | Op::RecvReduceCopy)
            && ri.send.is_none()
            && ri.dst == si.src
            && ri.count == si.count
            && ri.readers == [s]
            && (ri.ch.is_none() || si.ch.is_none() || ri.ch == si.ch)
            && (policy == Policy::Auto || (ri.recvtb.is_some() && ri.recvtb == si.sendtb));
        ok.then_some(r)
    }

    /// Would fusing `s` into `r` make a dependency cycle between transfer chains?
    fn fusion_cycles(&self, r: usize, s: usize) -> bool {
        let mut members = self.chain(self.head(r));
        members.extend(self.chain(s));
        let inside = |k: usize| members.contains(&k);
        let mut stack: Vec<usize> = members
            .iter()
            .flat_map(|&m| self.instrs[m].succs.iter().copied())
            .filter(|&x| !inside(x) && self.instrs[x].alive)
            .collect();
        let mut seen = vec![false; self.instrs.len()];
        while let Some(x) = stack.pop() {
            if inside(x) {
                return true;
            }
            if std::mem::replace(&mut seen[x], true) {
                continue;
            }
            // Moving along a chain counts as a dependency in both directions.
            let i = &self.instrs[x];
            stack.extend(i.succs.iter().copied());
            stack.extend(self.chain(self.head(x)).into_iter().filter(|&c| c != x));
        }
        false
    }

    fn merge(&mut self, r: usize, s: usize) {
        let si = self.instrs[s].clone();
        {
            let ri = &mut self.instrs[r];
            ri.op = if ri.op == Op::Recv {
                Op::RecvCopySend
            } else {
                Op::RecvReduceCopySend
            };
            ri.send = si.send;
            ri.sendtb = si.sendtb;
            ri.ch = ri.ch.or(si.ch);
            ri.next = si.next;
            ri.readers.retain(|&x| x != s);
            ri.succs.retain(|&x| x != s);
        }
        if let Some(n) = si.next {
            self.instrs[n].prev = Some(r);
        }
        for x in si.succs {
            let preds = &mut self.instrs[x].preds;
            for p in preds.iter_mut() {
                if *p == s {
                    *p = r;
                }
            }
            preds.sort_unstable();
            preds.dedup();
            if !self.instrs[r].succs.contains(&x) {
                self.instrs[r].succs.push(x);
            }
        }
        self.instrs[s].alive = false;
    }
}
