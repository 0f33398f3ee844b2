//! Pass 6 (instances), before the global order is chosen, and the final threadblock
//! numbering.
//!
//! The instruction DAG of one copy is copied `instances` times ([`instances`]) and the
//! scheduler orders all copies together, so every threadblock of every copy runs its steps
//! in one global order that never overfills a connection (see `schedule`): replication
//! cannot deadlock. Copy i of a threadblock is a new threadblock on channel
//! `c + i × channels of one copy`. Input and output slots are remapped ([`SlotMap`]) so that
//! every copy keeps the collective's meaning: with interleaved replication, blocks of g slots
//! (g divides every offset, count and rank slice) are interleaved, block b of copy i becoming
//! block `b × instances + i`; otherwise each rank slice holds the copies one after another.
//! Scratch is always laid out copy after copy. With more than one copy every instruction is
//! cut into pieces of g slots, so that each piece stays contiguous and both ends of every
//! transfer (and every link of a forwarding chain) are cut alike.

use super::builder::{PBuf, Tracer};
use super::dag::{Dag, Instr, PSlot};
use super::schedule::scratch_layout;
use num_integer::gcd;
use runtime::ir::{Buffer, Gpu, Slot, Threadblock};

/// Maps slot `k` of one copy to its slot in copy `i`.
#[derive(Clone)]
pub(crate) struct SlotMap {
    /// Copies of the program.
    pub instances: usize,
    interleaved: bool,
    /// Interleaving granule.
    granule: usize,
    /// Chunks of one rank slice.
    slice: usize,
    /// Scratch chunks of one copy, per rank.
    scratch: Vec<usize>,
    /// Instructions stay whole: copies are laid out slice after slice (not interleaved) and
    /// no instruction's input or output slots cross a slice, so every instruction maps to
    /// one contiguous run (cutting it would multiply the messages on each connection).
    whole: bool,
}

impl SlotMap {
    /// The slot map of `t`'s instances for the one-copy DAG `dag`.
    pub fn new(t: &Tracer, dag: &Dag, interleaved: bool) -> SlotMap {
        let instances = t.options.instances;
        let slice = t.collective.slice();
        let live = || dag.instrs.iter().filter(|x| x.alive);
        let user = |s: &&PSlot| !matches!(s.buf, PBuf::Scratch(_));
        let mut granule = slice;
        for x in live() {
            granule = gcd(granule, x.count);
            for s in [x.src, x.dst].iter().filter(|s| user(s)) {
                granule = gcd(granule, s.index);
            }
        }
        let within_slices = live().all(|x| {
            [x.src, x.dst]
                .iter()
                .filter(|s| user(s))
                .all(|s| s.index / slice == (s.index + x.count.max(1) - 1) / slice)
        });
        SlotMap {
            instances,
            interleaved,
            granule: granule.max(1),
            slice,
            scratch: scratch_layout(t, dag).1,
            whole: !interleaved && within_slices,
        }
    }

    /// The same layout with `instances` copies.
    pub fn with_instances(&self, instances: usize) -> SlotMap {
        SlotMap {
            instances,
            ..self.clone()
        }
    }

    /// Slot `s` of `rank` (one copy's layout) in copy `i`.
    pub fn map(&self, rank: usize, s: Slot, i: usize) -> Slot {
        let offset = match s.buffer {
            Buffer::Scratch => i * self.scratch[rank] + s.offset,
            _ => self.user(s.offset, i),
        };
        Slot::new(s.buffer, offset)
    }

    /// Input or output chunk `k` of one copy in copy `i`.
    pub fn user(&self, k: usize, i: usize) -> usize {
        if self.interleaved {
            let g = self.granule;
            ((k / g) * self.instances + i) * g + k % g
        } else {
            let f = self.slice;
            (k / f) * f * self.instances + i * f + k % f
        }
    }

    /// Whether copying would cut some transfer into pieces: more, smaller messages on its
    /// connection (slower than one copy where the copies share each link).
    pub fn cuts_transfers(&self, dag: &Dag) -> bool {
        let transfer = |x: &&Instr| x.alive && (x.send.is_some() || x.recv.is_some());
        (dag.instrs.iter().filter(transfer)).any(|x| self.unit(x.count) < x.count)
    }

    /// The slots of each piece an instruction of `count` slots is cut into: all of them
    /// with one copy or whole instructions, else the granule.
    fn unit(&self, count: usize) -> usize {
        if self.instances == 1 || self.whole {
            count.max(1)
        } else {
            self.granule
        }
    }
}

/// The DAG of every copy: each live instruction of the one-copy `dag`, per copy, cut into
/// pieces of [`SlotMap`]'s unit (slots still in one copy's layout, `copy` naming the copy).
/// Piece j of a transfer pairs with piece j of its partner; a piece waits for every piece of
/// its instruction's producers in the same copy. Also returns each instruction's original.
pub(crate) fn instances(dag: &Dag, map: &SlotMap) -> (Dag, Vec<usize>) {
    let mut instrs: Vec<Instr> = Vec::new();
    let mut origin = Vec::new();
    for i in 0..map.instances {
        // The pieces of each original instruction in this copy.
        let mut pieces: Vec<Vec<usize>> = vec![Vec::new(); dag.instrs.len()];
        for (k, x) in dag.instrs.iter().enumerate().filter(|(_, x)| x.alive) {
            let unit = map.unit(x.count);
            for p in 0..(x.count / unit).max(1) {
                let at = |s: PSlot| PSlot {
                    index: s.index + p * unit,
                    ..s
                };
                pieces[k].push(instrs.len());
                origin.push(k);
                instrs.push(Instr {
                    src: at(x.src),
                    dst: at(x.dst),
                    count: unit.min(x.count),
                    copy: i,
                    preds: Vec::new(),
                    succs: Vec::new(),
                    readers: Vec::new(),
                    overwritten: 0,
                    next: None,
                    prev: None,
                    ..x.clone()
                });
            }
        }
        for (k, x) in dag.instrs.iter().enumerate().filter(|(_, x)| x.alive) {
            for (j, &n) in pieces[k].iter().enumerate() {
                let preds = x.preds.iter().flat_map(|&p| pieces[p].iter().copied());
                instrs[n].preds = preds.collect();
                instrs[n].next = x.next.map(|m| pieces[m][j]);
                instrs[n].prev = x.prev.map(|m| pieces[m][j]);
            }
        }
    }
    for n in 0..instrs.len() {
        for p in instrs[n].preds.clone() {
            instrs[p].succs.push(n);
        }
    }
    let temp = dag.temp.clone();
    (Dag { instrs, temp }, origin)
}

/// Sorts a GPU's threadblocks by (send peer, receive peer, channel), as msccl-tools numbers
/// them, and renumbers dependencies.
pub(crate) fn renumber(mut g: Gpu) -> Gpu {
    let key = |t: &Threadblock| {
        (
            t.send.map_or(-1, |p| p as i64),
            t.recv.map_or(-1, |p| p as i64),
            t.channel,
        )
    };
    let mut order: Vec<usize> = (0..g.threadblocks.len()).collect();
    order.sort_by_key(|&t| key(&g.threadblocks[t]));
    let mut new_id = vec![0; order.len()];
    for (new, &old) in order.iter().enumerate() {
        new_id[old] = new;
    }
    let mut tbs: Vec<Option<Threadblock>> = g.threadblocks.drain(..).map(Some).collect();
    g.threadblocks = order
        .iter()
        .map(|&old| tbs[old].take().expect("each threadblock once"))
        .collect();
    for tb in &mut g.threadblocks {
        for s in &mut tb.steps {
            for d in &mut s.deps {
                d.tb = new_id[d.tb];
            }
        }
    }
    g
}
