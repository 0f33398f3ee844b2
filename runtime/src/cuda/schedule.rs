//! The GPU schedule of a [`Program`]: a DAG of copy-engine copies and reduction kernels, each
//! issued on the stream of one threadblock and ordered by its dependencies. Pure logic (no
//! CUDA), so it is tested everywhere; [`Schedule::execute_on_host`] runs it on host memory.
//!
//! Lowering of one step (the k-th send on a connection pairs with the k-th receive):
//! * a `s`/`r` pair whose receive lands data (`r`, `rcs`) becomes one *direct* copy from the
//!   sender's slot into the receiver's slot, ordered after both steps' predecessors
//!   (a rendezvous). Where rendezvous would close a cycle (e.g. two threadblocks that each
//!   send and then receive from one another), the pair is *staged* instead: the sender copies
//!   into a staging area of the receiver as soon as it may, and the receiver copies it into
//!   place when its own predecessors allow;
//! * a receive that reduces (`rrc`, `rrs`, `rrcs`) always lands in a staging area of the
//!   receiver (no rendezvous needed), then a kernel on the receiver computes
//!   `out = staged + src` (`out` = `dst`, or the staging area itself for `rrs`);
//! * `rcs`, `rrs`, `rrcs` forward from the slot they just wrote (`dst`, or the staging area
//!   for `rrs`); `cpy` is a local copy and `re` a local kernel `dst = dst + src`;
//! * `compute` (synth's extension) is a launch of the program's compute kernel
//!   ([`super::compute`]) on its chunks and the state buffers' elements at the same output
//!   indices.
//!
//! With `slices > 1` every chunk is cut into `slices` pieces and the whole program is
//! replayed once per piece (like the MSCCL kernel's loop), each threadblock's pass `j + 1`
//! after its pass `j`.

use crate::compute::Kernel;
use crate::ir::{Buffer, Op, Program, Slot, Step, StepRef};
use crate::semantics::{Region, Semantics};
use anyhow::{bail, Result};
use std::collections::{HashMap, HashSet, VecDeque};

/// A memory space of one rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Space {
    /// The user's send buffer.
    Send,
    /// The user's receive buffer.
    Recv,
    /// The program's scratch buffer.
    Scratch,
    /// The executor's staging area for received data.
    Stage,
}

impl Space {
    /// All spaces, in index order.
    pub const ALL: [Space; 4] = [Space::Send, Space::Recv, Space::Scratch, Space::Stage];

    /// Index 0..4.
    pub fn index(self) -> usize {
        self as usize
    }

    fn of(region: Region) -> Space {
        match region {
            Region::Send => Space::Send,
            Region::Recv => Space::Recv,
            Region::Scratch => Space::Scratch,
        }
    }
}

/// The first of `count` consecutive chunks of one rank's space.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Loc {
    /// Rank owning the memory.
    pub rank: usize,
    /// Which space.
    pub space: Space,
    /// Chunk index in that space.
    pub chunk: usize,
}

/// What a node does, on the piece of every chunk that its pass covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// `dst ← src` for `count` chunks (possibly between ranks).
    Copy {
        /// Source.
        src: Loc,
        /// Destination.
        dst: Loc,
        /// Chunks.
        count: usize,
    },
    /// `out ← a + b` for `count` chunks; all three on the same rank (the stream's).
    Reduce {
        /// Output.
        out: Loc,
        /// First operand.
        a: Loc,
        /// Second operand.
        b: Loc,
        /// Chunks.
        count: usize,
    },
    /// The program's compute on `count` chunks at `at` (output chunks of the stream's rank),
    /// with the state buffers' elements at the same output indices.
    Compute {
        /// The chunks computed.
        at: Loc,
        /// Their first output chunk: where the state buffers and the dropout index start.
        output: usize,
        /// Chunks.
        count: usize,
    },
}

/// Why a node exists (for statistics and tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NodeKind {
    /// A send/receive pair as one copy from the sender's slot to the receiver's slot.
    Direct,
    /// A send's copy into the receiver's staging area.
    ToStage,
    /// A receiver's copy from its staging area into place.
    FromStage,
    /// A reduction kernel of a receive (`rrc`, `rrs`, `rrcs`).
    RecvReduce,
    /// A local `cpy`.
    LocalCopy,
    /// A local `re`.
    LocalReduce,
    /// A `compute` step.
    Compute,
}

/// One operation of the schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// What it does.
    pub action: Action,
    /// Why it exists.
    pub kind: NodeKind,
    /// The stream (index into [`Schedule::streams`]) it is issued on.
    pub stream: usize,
    /// The pass (slice index) it belongs to.
    pub pass: usize,
    /// The program step it implements (the receiving step for transfers).
    pub step: StepRef,
    /// Nodes (earlier in issue order) that must finish first.
    pub deps: Vec<usize>,
}

/// The whole schedule of a program in one mode.
#[derive(Debug, Clone)]
pub struct Schedule {
    /// Ranks.
    pub ngpus: usize,
    /// nchunksperloop: the larger user buffer holds this many chunks.
    pub nchunks: usize,
    /// Passes over the program (pieces per chunk).
    pub slices: usize,
    /// In place or not.
    pub inplace: bool,
    /// Streams as (rank, threadblock id), one per threadblock.
    pub streams: Vec<(usize, usize)>,
    /// Chunks of every space of every rank (`[rank][Space::index()]`).
    pub space_chunks: Vec<[usize; 4]>,
    /// Nodes in issue order (a topological order: every dep comes earlier).
    pub nodes: Vec<Node>,
    /// Send/receive pairs lowered to one direct copy.
    pub direct_pairs: usize,
    /// Send/receive pairs of plain receives that needed staging to avoid a cycle.
    pub staged_pairs: usize,
    /// Send/receive pairs landing in staging because the receive reduces.
    pub reduce_pairs: usize,
}

/// The element range `[start, end)` of piece `pass` of a chunk of `chunk` elements cut into
/// `slices` pieces.
pub fn piece(chunk: usize, slices: usize, pass: usize) -> (usize, usize) {
    (pass * chunk / slices, (pass + 1) * chunk / slices)
}

/// A dependency in the making: a node, or "everything before step X in pass j".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum DepRef {
    Node(usize),
    Pre(usize, usize),
    /// The last node of the receiving part of a forwarding step (same pass as the draft).
    InLast(usize),
}

#[derive(Debug, Clone)]
struct Draft {
    action: Action,
    kind: NodeKind,
    stream: usize,
    pass: usize,
    step: usize,
    /// (dependency, rank on whose behalf the edge exists).
    deps: Vec<(DepRef, usize)>,
    /// For direct transfers: (sender rank, receiver rank).
    direct: Option<(usize, usize)>,
    /// The pair index for transfers.
    pair: Option<usize>,
}

/// Per (pass, step), the node that completes the step (None: the step has no node).
type Done = Vec<Vec<Option<usize>>>;

/// A resolved edge: predecessor node and the rank on whose behalf it exists.
type Edge = (usize, usize);

struct Lowering<'a> {
    p: &'a Program,
    sem: Semantics,
    /// Flat step index of (rank, tb, 0).
    base: Vec<Vec<usize>>,
    refs: Vec<StepRef>,
    /// Global threadblock (stream) index of each flat step.
    stream_of: Vec<usize>,
    /// Pair index by sending step and by receiving step.
    send_pair: Vec<Option<usize>>,
    recv_pair: Vec<Option<usize>>,
    /// (sending step, receiving step) by pair.
    pairs: Vec<(usize, usize)>,
    /// Stage chunk offset of each receiving step that lands in staging.
    stage_at: HashMap<usize, usize>,
    stage_chunks: Vec<usize>,
}

impl<'a> Lowering<'a> {
    fn new(p: &'a Program, inplace: bool) -> Result<Lowering<'a>> {
        let sem = Semantics::of(p, inplace).map_err(anyhow::Error::msg)?;
        let mut base = Vec::new();
        let mut refs = Vec::new();
        let mut stream_of = Vec::new();
        let mut stream = 0;
        for g in &p.gpus {
            let mut b = Vec::new();
            for (tbi, tb) in g.threadblocks.iter().enumerate() {
                b.push(refs.len());
                for step in 0..tb.steps.len() {
                    refs.push(StepRef {
                        rank: g.rank,
                        tb: tbi,
                        step,
                    });
                    stream_of.push(stream);
                }
                stream += 1;
            }
            base.push(b);
        }
        let flat = |s: StepRef| base[s.rank][s.tb] + s.step;
        let mut send_pair = vec![None; refs.len()];
        let mut recv_pair = vec![None; refs.len()];
        let mut pairs = Vec::new();
        for (s, r) in p.transfer_pairs() {
            let (fs, fr) = (flat(s), flat(r));
            let (ss, rs) = (p.step(s).expect("pair"), p.step(r).expect("pair"));
            if ss.count != rs.count {
                bail!(
                    "{s} sends {} chunks but {r} receives {}",
                    ss.count,
                    rs.count
                );
            }
            send_pair[fs] = Some(pairs.len());
            recv_pair[fr] = Some(pairs.len());
            pairs.push((fs, fr));
        }
        for (i, at) in refs.iter().enumerate() {
            let op = p.step(*at).expect("step").op;
            if op.sends() && send_pair[i].is_none() {
                bail!("{at}: its send has no matching receive");
            }
            if op.receives() && recv_pair[i].is_none() {
                bail!("{at}: its receive has no matching send");
            }
        }
        Ok(Lowering {
            p,
            sem,
            base,
            refs,
            stream_of,
            send_pair,
            recv_pair,
            pairs,
            stage_at: HashMap::new(),
            stage_chunks: vec![0; p.ngpus],
        })
    }

    fn op(&self, x: usize) -> Op {
        self.p.step(self.refs[x]).expect("step").op
    }

    fn loc(&self, x: usize, slot: Slot) -> Result<Loc> {
        let at = self.refs[x];
        let count = self.p.step(at).expect("step").count;
        let Some((region, chunk)) = self.sem.resolve(at.rank, slot.buffer, slot.offset) else {
            bail!("{at}: {slot} is outside its buffer");
        };
        let extent = self
            .sem
            .region_chunks(region)
            .unwrap_or(self.p.gpus[at.rank].scratch_chunks);
        if chunk + count > extent {
            bail!("{at}: {slot} with count {count} is outside its buffer");
        }
        Ok(Loc {
            rank: at.rank,
            space: Space::of(region),
            chunk,
        })
    }

    fn stage(&mut self, x: usize) -> Loc {
        let at = self.refs[x];
        let count = self.p.step(at).expect("step").count;
        let next = &mut self.stage_chunks[at.rank];
        let chunk = *self.stage_at.entry(x).or_insert_with(|| {
            *next += count;
            *next - count
        });
        Loc {
            rank: at.rank,
            space: Space::Stage,
            chunk,
        }
    }

    /// Drafts every node of `passes` passes; plain receives of pairs in `staged` go through
    /// staging. Returns the drafts and, per (pass, step), the node that completes the step.
    fn draft(&mut self, passes: usize, staged: &HashSet<usize>) -> Result<(Vec<Draft>, Done)> {
        let n = self.refs.len();
        // Node ids: first decide, per pass and step, which nodes it owns.
        // in_last[pass][x]: the last node of x's receiving part; pair_node[pass][pair].
        let mut drafts: Vec<Draft> = Vec::new();
        let mut pair_node = vec![vec![usize::MAX; self.pairs.len()]; passes];
        let mut in_last = vec![vec![None; n]; passes];
        let mut local = vec![vec![None; n]; passes];
        for pass in 0..passes {
            for x in 0..n {
                if let Some(pi) = self.recv_pair[x] {
                    let staging = staged.contains(&pi);
                    let (pair, last) = self.draft_receive(&mut drafts, pass, x, pi, staging)?;
                    pair_node[pass][pi] = pair;
                    in_last[pass][x] = Some(last);
                } else {
                    local[pass][x] = self.draft_local(&mut drafts, pass, x)?;
                }
            }
        }
        // Patch the sender-side availability of forwarded data: the last node of the
        // forwarding step's receiving part.
        for d in &mut drafts {
            for (dep, _) in &mut d.deps {
                if let DepRef::InLast(s) = *dep {
                    *dep = DepRef::Node(in_last[d.pass][s].expect("forwarding step receives"));
                }
            }
        }
        let done = self.completions(passes, &pair_node, &in_last, &local);
        Ok((drafts, done))
    }

    /// Drafts the nodes of receiving step `x` (pair `pi`) in `pass`: one direct copy from
    /// the sender, or (`staging`, or a reducing receive) a copy to staging and the node
    /// that takes it from there. Returns (the pair's node, the receiving part's last node).
    fn draft_receive(
        &mut self,
        drafts: &mut Vec<Draft>,
        pass: usize,
        x: usize,
        pi: usize,
        staging: bool,
    ) -> Result<(usize, usize)> {
        let at = self.refs[x];
        let step = self.p.step(at).expect("step").clone();
        let (s, _) = self.pairs[pi];
        let sat = self.refs[s];
        let sstep = self.p.step(sat).expect("step").clone();
        let src = match sstep.op {
            Op::Send => self.loc(s, sstep.src)?,
            Op::RecvCopySend | Op::RecvReduceCopySend => self.loc(s, sstep.dst)?,
            Op::RecvReduceSend => self.stage(s),
            other => bail!("{sat}: {other} cannot send"),
        };
        let avail = match sstep.op {
            Op::Send => DepRef::Pre(s, pass),
            _ => DepRef::InLast(s),
        };
        let plain = matches!(step.op, Op::Recv | Op::RecvCopySend);
        if !plain || staging {
            return self.draft_staged(drafts, (pass, x, pi), src, (avail, sat.rank), &step);
        }
        let dst = self.loc(x, step.dst)?;
        let t = push(
            drafts,
            Draft {
                action: Action::Copy {
                    src,
                    dst,
                    count: step.count,
                },
                kind: NodeKind::Direct,
                stream: self.stream_of[s],
                pass,
                step: x,
                deps: vec![(avail, sat.rank), (DepRef::Pre(x, pass), at.rank)],
                direct: Some((sat.rank, at.rank)),
                pair: Some(pi),
            },
        );
        Ok((t, t))
    }

    /// Drafts a receive through staging: the sender's copy of `src` to the receiver's
    /// staging (after `avail`), then the receiver's copy or reduction from there. `at` is
    /// (pass, receiving step, pair); returns (the first node, the second).
    fn draft_staged(
        &mut self,
        drafts: &mut Vec<Draft>,
        (pass, x, pi): (usize, usize, usize),
        src: Loc,
        avail: (DepRef, usize),
        step: &Step,
    ) -> Result<(usize, usize)> {
        let rank = self.refs[x].rank;
        let (s, _) = self.pairs[pi];
        let plain = matches!(step.op, Op::Recv | Op::RecvCopySend);
        let stage = self.stage(x);
        let t1 = push(
            drafts,
            Draft {
                action: Action::Copy {
                    src,
                    dst: stage,
                    count: step.count,
                },
                kind: NodeKind::ToStage,
                stream: self.stream_of[s],
                pass,
                step: x,
                deps: vec![avail],
                direct: None,
                pair: Some(pi),
            },
        );
        let action = if plain {
            Action::Copy {
                src: stage,
                dst: self.loc(x, step.dst)?,
                count: step.count,
            }
        } else {
            let out = if step.op == Op::RecvReduceSend {
                stage
            } else {
                self.loc(x, step.dst)?
            };
            Action::Reduce {
                out,
                a: stage,
                b: self.loc(x, step.src)?,
                count: step.count,
            }
        };
        let t2 = push(
            drafts,
            Draft {
                action,
                kind: if plain {
                    NodeKind::FromStage
                } else {
                    NodeKind::RecvReduce
                },
                stream: self.stream_of[x],
                pass,
                step: x,
                deps: vec![(DepRef::Pre(x, pass), rank), (DepRef::Node(t1), rank)],
                direct: None,
                pair: None,
            },
        );
        Ok((t1, t2))
    }

    /// Drafts the node of local step `x` (a copy, a reduction or a compute) in `pass`; none
    /// for other steps (sends are drafted with their receives).
    fn draft_local(
        &mut self,
        drafts: &mut Vec<Draft>,
        pass: usize,
        x: usize,
    ) -> Result<Option<usize>> {
        let at = self.refs[x];
        let step = self.p.step(at).expect("step").clone();
        if !matches!(step.op, Op::Copy | Op::Reduce | Op::Compute) {
            return Ok(None);
        }
        let (src, dst) = (self.loc(x, step.src)?, self.loc(x, step.dst)?);
        let count = step.count;
        let (action, kind) = match step.op {
            Op::Copy => (Action::Copy { src, dst, count }, NodeKind::LocalCopy),
            Op::Reduce => (
                Action::Reduce {
                    out: dst,
                    a: dst,
                    b: src,
                    count,
                },
                NodeKind::LocalReduce,
            ),
            // The verifier has checked that a compute names output chunks.
            _ => (
                Action::Compute {
                    at: dst,
                    output: step.dst.offset,
                    count,
                },
                NodeKind::Compute,
            ),
        };
        let draft = Draft {
            action,
            kind,
            stream: self.stream_of[x],
            pass,
            step: x,
            deps: vec![(DepRef::Pre(x, pass), at.rank)],
            direct: None,
            pair: None,
        };
        Ok(Some(push(drafts, draft)))
    }

    /// The node that completes each step in each pass: a sending step's pair node, a
    /// receiving step's last node, a local step's node.
    fn completions(
        &self,
        passes: usize,
        pair_node: &[Vec<usize>],
        in_last: &Done,
        local: &Done,
    ) -> Done {
        let n = self.refs.len();
        let mut done = vec![vec![None; n]; passes];
        for pass in 0..passes {
            for x in 0..n {
                let op = self.op(x);
                done[pass][x] = if op.sends() {
                    Some(pair_node[pass][self.send_pair[x].expect("paired")])
                } else if op.receives() {
                    in_last[pass][x]
                } else {
                    local[pass][x]
                };
            }
        }
        done
    }

    /// The pairs whose plain receives go through staging: on one pass, a pair of each
    /// dependency cycle in turn until the schedule has none.
    fn staged_pairs(&mut self) -> Result<HashSet<usize>> {
        let mut staged: HashSet<usize> = HashSet::new();
        loop {
            self.stage_at.clear();
            self.stage_chunks = vec![0; self.p.ngpus];
            let (drafts, done) = self.draft(1, &staged)?;
            let preds = self.edges(&drafts, &done)?;
            match topological(&preds) {
                Ok(_) => return Ok(staged),
                Err(left) => match pair_to_stage(&drafts, &preds, &left) {
                    Some(pi) => {
                        staged.insert(pi);
                    }
                    None => bail!("the program's dependencies form a cycle (it deadlocks)"),
                },
            }
        }
    }

    /// The drafts as nodes in a topological order of `preds`, each with its predecessors'
    /// new indices.
    fn ordered_nodes(&self, drafts: &[Draft], preds: &[Vec<Edge>]) -> Result<Vec<Node>> {
        let order = topological(preds)
            .map_err(|_| anyhow::anyhow!("internal error: the sliced schedule has a cycle"))?;
        let mut new_id = vec![0usize; drafts.len()];
        for (i, &v) in order.iter().enumerate() {
            new_id[v] = i;
        }
        Ok(order
            .iter()
            .map(|&v| {
                let d = &drafts[v];
                let mut deps: Vec<usize> = preds[v].iter().map(|e| new_id[e.0]).collect();
                deps.sort_unstable();
                deps.dedup();
                Node {
                    action: d.action,
                    kind: d.kind,
                    stream: d.stream,
                    pass: d.pass,
                    step: self.refs[d.step],
                    deps,
                }
            })
            .collect())
    }

    /// Chunks of each rank's spaces: send, receive, scratch and staging.
    fn space_chunks(&self) -> Vec<[usize; 4]> {
        let p = self.p;
        (0..p.ngpus)
            .map(|r| {
                let c = |region: Region| {
                    self.sem
                        .region_chunks(region)
                        .unwrap_or(p.gpus[r].scratch_chunks)
                };
                [
                    c(Region::Send),
                    c(Region::Recv),
                    c(Region::Scratch),
                    self.stage_chunks[r],
                ]
            })
            .collect()
    }

    /// Resolves "everything before step x in pass j" to nodes, with the edge's rank.
    fn pre(
        &self,
        x: usize,
        pass: usize,
        done: &[Vec<Option<usize>>],
        memo: &mut HashMap<(usize, usize), Vec<usize>>,
        visiting: &mut HashSet<(usize, usize)>,
    ) -> Result<Vec<usize>> {
        if let Some(v) = memo.get(&(x, pass)) {
            return Ok(v.clone());
        }
        if !visiting.insert((x, pass)) {
            bail!("{}: its dependencies form a cycle", self.refs[x]);
        }
        let at = self.refs[x];
        let mut preds: Vec<(usize, usize)> = Vec::new();
        let tb_steps = self.p.gpus[at.rank].threadblocks[at.tb].steps.len();
        if at.step > 0 {
            preds.push((x - 1, pass));
        } else if pass > 0 && tb_steps > 0 {
            preds.push((x + tb_steps - 1, pass - 1));
        }
        for d in &self.p.step(at).expect("step").deps {
            let Some(&b) = self.base[at.rank].get(d.tb) else {
                bail!("{at}: depends on a missing threadblock {}", d.tb);
            };
            if d.step >= self.p.gpus[at.rank].threadblocks[d.tb].steps.len() {
                bail!("{at}: depends on a missing step {} of tb {}", d.step, d.tb);
            }
            preds.push((b + d.step, pass));
        }
        let mut out = Vec::new();
        for (y, yp) in preds {
            match done[yp][y] {
                Some(node) => out.push(node),
                None => out.extend(self.pre(y, yp, done, memo, visiting)?),
            }
        }
        out.sort_unstable();
        out.dedup();
        visiting.remove(&(x, pass));
        memo.insert((x, pass), out.clone());
        Ok(out)
    }

    /// Resolves every draft's dependencies to labelled edges.
    fn edges(&self, drafts: &[Draft], done: &[Vec<Option<usize>>]) -> Result<Vec<Vec<Edge>>> {
        let mut memo = HashMap::new();
        let mut visiting = HashSet::new();
        let mut all = Vec::with_capacity(drafts.len());
        for d in drafts {
            let mut e: Vec<Edge> = Vec::new();
            for &(dep, rank) in &d.deps {
                match dep {
                    DepRef::Node(v) => e.push((v, rank)),
                    DepRef::InLast(_) => unreachable!("patched in draft"),
                    DepRef::Pre(x, pass) => {
                        for v in self.pre(x, pass, done, &mut memo, &mut visiting)? {
                            e.push((v, rank));
                        }
                    }
                }
            }
            e.sort_unstable();
            e.dedup();
            all.push(e);
        }
        Ok(all)
    }
}

/// Kahn's algorithm over predecessor lists; returns the order, or the nodes left over.
fn topological(preds: &[Vec<Edge>]) -> std::result::Result<Vec<usize>, Vec<bool>> {
    let n = preds.len();
    let mut indeg = vec![0usize; n];
    let mut succ: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (v, ps) in preds.iter().enumerate() {
        let mut seen: Vec<usize> = ps.iter().map(|e| e.0).collect();
        seen.dedup();
        indeg[v] = seen.len();
        for u in seen {
            succ[u].push(v);
        }
    }
    let mut queue: VecDeque<usize> = (0..n).filter(|&v| indeg[v] == 0).collect();
    let mut order = Vec::with_capacity(n);
    while let Some(u) = queue.pop_front() {
        order.push(u);
        for &v in &succ[u] {
            indeg[v] -= 1;
            if indeg[v] == 0 {
                queue.push_back(v);
            }
        }
    }
    if order.len() == n {
        Ok(order)
    } else {
        Err(indeg.iter().map(|&d| d > 0).collect())
    }
}

/// Finds a direct pair on a cycle whose rendezvous closes it: the cycle enters the copy on
/// the receiver's side and leaves it on the sender's side.
fn pair_to_stage(drafts: &[Draft], preds: &[Vec<Edge>], left: &[bool]) -> Option<usize> {
    let start = left.iter().position(|&l| l)?;
    // Walk backwards through remaining predecessors until a node repeats.
    let mut walk = vec![start];
    let mut pos: HashMap<usize, usize> = HashMap::from([(start, 0)]);
    let cycle = loop {
        let v = *walk.last().expect("non-empty");
        let u = preds[v].iter().map(|e| e.0).find(|&u| left[u])?;
        if let Some(&i) = pos.get(&u) {
            break walk[i..].to_vec();
        }
        pos.insert(u, walk.len());
        walk.push(u);
    };
    // cycle[i+1] is a predecessor of cycle[i] (cyclically).
    let k = cycle.len();
    for i in 0..k {
        let t = cycle[i];
        let Some((sender, receiver)) = drafts[t].direct else {
            continue;
        };
        let from = cycle[(i + 1) % k];
        let to = cycle[(i + k - 1) % k];
        let enters_on_receiver = preds[t].contains(&(from, receiver));
        let leaves_on_sender = preds[to].contains(&(t, sender));
        if enters_on_receiver && leaves_on_sender {
            return drafts[t].pair;
        }
    }
    None
}

/// Appends `d` to `drafts`; returns its index.
fn push(drafts: &mut Vec<Draft>, d: Draft) -> usize {
    drafts.push(d);
    drafts.len() - 1
}

impl Schedule {
    /// Lowers a program in one mode (the caller has verified it) with `slices` passes.
    pub fn new(p: &Program, inplace: bool, slices: usize) -> Result<Schedule> {
        let slices = slices.max(1);
        let mut low = Lowering::new(p, inplace)?;
        let staged = low.staged_pairs()?;
        low.stage_at.clear();
        low.stage_chunks = vec![0; p.ngpus];
        let (drafts, done) = low.draft(slices, &staged)?;
        let preds = low.edges(&drafts, &done)?;
        let nodes = low.ordered_nodes(&drafts, &preds)?;
        let mut streams = Vec::new();
        for g in &p.gpus {
            for tb in 0..g.threadblocks.len() {
                streams.push((g.rank, tb));
            }
        }
        let space_chunks = low.space_chunks();
        let count = |k: NodeKind| nodes.iter().filter(|n| n.kind == k && n.pass == 0).count();
        Ok(Schedule {
            ngpus: p.ngpus,
            nchunks: p.nchunksperloop,
            slices,
            inplace,
            streams,
            space_chunks,
            direct_pairs: count(NodeKind::Direct),
            staged_pairs: count(NodeKind::FromStage),
            reduce_pairs: count(NodeKind::RecvReduce),
            nodes,
        })
    }

    /// Where chunk `chunk` of a logical buffer of `rank` lives (input/output/scratch).
    pub fn resolve(
        p: &Program,
        inplace: bool,
        rank: usize,
        buffer: Buffer,
        chunk: usize,
    ) -> Option<Loc> {
        let sem = Semantics::of(p, inplace).ok()?;
        let (region, chunk) = sem.resolve(rank, buffer, chunk)?;
        Some(Loc {
            rank,
            space: Space::of(region),
            chunk,
        })
    }

    /// For every node, the dependencies that need an event: those on another stream that are
    /// not already implied by an earlier wait of the same stream (streams run in issue order).
    pub fn waits(&self) -> Vec<Vec<usize>> {
        let ns = self.streams.len();
        let mut pos_in_stream = vec![0usize; self.nodes.len()];
        let mut len = vec![0usize; ns];
        for (i, n) in self.nodes.iter().enumerate() {
            pos_in_stream[i] = len[n.stream];
            len[n.stream] += 1;
        }
        // seen[s][t]: how many nodes of stream t stream s has already waited for (+1).
        let mut seen: Vec<HashMap<usize, usize>> = vec![HashMap::new(); ns];
        let mut out = Vec::with_capacity(self.nodes.len());
        for n in &self.nodes {
            let mut w: Vec<usize> = Vec::new();
            // Latest dependency per other stream suffices.
            let mut latest: HashMap<usize, usize> = HashMap::new();
            for &d in &n.deps {
                let s = self.nodes[d].stream;
                if s == n.stream {
                    continue;
                }
                let e = latest.entry(s).or_insert(d);
                if pos_in_stream[d] > pos_in_stream[*e] {
                    *e = d;
                }
            }
            for (s, d) in latest {
                let have = seen[n.stream].get(&s).copied().unwrap_or(0);
                if pos_in_stream[d] + 1 > have {
                    seen[n.stream].insert(s, pos_in_stream[d] + 1);
                    w.push(d);
                }
            }
            w.sort_unstable();
            out.push(w);
        }
        out
    }

    /// Runs the schedule on host memory in `order` (a permutation of node indices that the
    /// caller claims respects the dependencies; checked), with `chunk` elements per chunk.
    /// `mem[rank][space]` must hold `space_chunks × chunk` elements. A program with a compute
    /// needs [`Schedule::execute_computing_on_host`].
    pub fn execute_on_host(
        &self,
        mem: &mut [[Vec<f32>; 4]],
        chunk: usize,
        order: &[usize],
    ) -> Result<()> {
        self.execute_computing_on_host(mem, None, chunk, order)
    }

    /// [`Schedule::execute_on_host`] with the program's compute: `compute` is its kernel and
    /// `state[rank][buffer]`, the kernel's state buffers of every rank (each the output
    /// buffer's chunks × `chunk` elements), updated as the compute nodes run.
    pub fn execute_computing_on_host(
        &self,
        mem: &mut [[Vec<f32>; 4]],
        mut compute: Option<(&Kernel, &mut [Vec<Vec<f32>>])>,
        chunk: usize,
        order: &[usize],
    ) -> Result<()> {
        let mut finished = vec![false; self.nodes.len()];
        for &v in order {
            let n = &self.nodes[v];
            if let Some(&d) = n.deps.iter().find(|&&d| !finished[d]) {
                bail!("node {v} runs before its dependency {d}");
            }
            let (lo, hi) = piece(chunk, self.slices, n.pass);
            let at = |l: Loc, k: usize| ((l.chunk + k) * chunk + lo, (l.chunk + k) * chunk + hi);
            match n.action {
                Action::Copy { src, dst, count } => {
                    for k in 0..count {
                        let (s0, s1) = at(src, k);
                        let data = mem[src.rank][src.space.index()][s0..s1].to_vec();
                        let (d0, d1) = at(dst, k);
                        mem[dst.rank][dst.space.index()][d0..d1].copy_from_slice(&data);
                    }
                }
                Action::Reduce { out, a, b, count } => {
                    for k in 0..count {
                        let (a0, a1) = at(a, k);
                        let (b0, _) = at(b, k);
                        let (o0, _) = at(out, k);
                        for e in 0..a1 - a0 {
                            let x = mem[a.rank][a.space.index()][a0 + e]
                                + mem[b.rank][b.space.index()][b0 + e];
                            mem[out.rank][out.space.index()][o0 + e] = x;
                        }
                    }
                }
                Action::Compute {
                    at: l,
                    output,
                    count,
                } => {
                    let Some((kernel, state)) = compute.as_mut() else {
                        bail!("node {v} computes, but no kernel and state were given");
                    };
                    let state = &mut state[l.rank];
                    let mut s = vec![0f32; kernel.buffers.len()];
                    for k in 0..count {
                        let (x0, x1) = at(l, k);
                        let index0 = (output + k) * chunk + lo;
                        for e in 0..x1 - x0 {
                            for (b, v) in s.iter_mut().enumerate() {
                                *v = state[b][index0 + e];
                            }
                            let x = &mut mem[l.rank][l.space.index()][x0 + e];
                            *x = kernel.apply(*x, &mut s, (index0 + e) as u64);
                            for (b, v) in s.iter().enumerate() {
                                state[b][index0 + e] = *v;
                            }
                        }
                    }
                }
            }
            finished[v] = true;
        }
        Ok(())
    }
}
