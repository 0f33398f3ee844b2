//! The baseline algorithms written as IR programs: NCCL's ring algorithms over given rings
//! (one ring per channel, the data split evenly over the channels) and its tree allreduce
//! over given trees. Both use the fused instructions of the NCCL flavour (`rcs`, `rrs`,
//! `rrc`, `rrcs`), as NCCL's own kernels do, and are valid out of place.

use anyhow::{bail, Result};
use runtime::ir::{Buffer, Collective, Dep, Gpu, Op, Program, Protocol, Slot, Step, Threadblock};

/// Input chunk `k`.
pub(super) fn i(k: usize) -> Slot {
    Slot::new(Buffer::Input, k)
}

/// Output chunk `k`.
pub(super) fn o(k: usize) -> Slot {
    Slot::new(Buffer::Output, k)
}

/// A program under construction (shared with the point-to-point baselines, [`super::p2p`]).
pub(super) struct Build {
    /// The program so far.
    pub(super) p: Program,
}

impl Build {
    /// An empty out-of-place program: `n` ranks with `in_chunks` input and `out_chunks`
    /// output chunks each, `nchunks` chunks per loop.
    pub(super) fn new(
        name: String,
        coll: Collective,
        root: usize,
        n: usize,
        nchunks: usize,
        in_chunks: usize,
        out_chunks: usize,
    ) -> Build {
        let gpus = (0..n)
            .map(|rank| Gpu {
                rank,
                input_chunks: in_chunks,
                output_chunks: out_chunks,
                scratch_chunks: 0,
                threadblocks: Vec::new(),
            })
            .collect();
        Build {
            p: Program {
                name,
                collective: coll,
                root,
                protocol: Protocol::Simple,
                ngpus: n,
                nchunksperloop: nchunks,
                inplace: false,
                outofplace: true,
                min_bytes: 0,
                max_bytes: 0,
                gpus,
                custom: None,
                compute: None,
            },
        }
    }

    /// Adds a threadblock and returns its id.
    pub(super) fn tb(
        &mut self,
        rank: usize,
        send: Option<usize>,
        recv: Option<usize>,
        channel: usize,
    ) -> usize {
        let tbs = &mut self.p.gpus[rank].threadblocks;
        tbs.push(Threadblock {
            send,
            recv,
            channel,
            steps: Vec::new(),
        });
        tbs.len() - 1
    }

    /// Appends a step and returns its index.
    pub(super) fn step(
        &mut self,
        rank: usize,
        tb: usize,
        op: Op,
        src: Slot,
        dst: Slot,
        deps: Vec<Dep>,
    ) -> usize {
        let steps = &mut self.p.gpus[rank].threadblocks[tb].steps;
        steps.push(Step {
            op,
            src,
            dst,
            count: 1,
            deps,
        });
        steps.len() - 1
    }

    /// The program, with the fields of paired sends and receives made consistent.
    pub(super) fn finish(mut self) -> Program {
        self.p.normalize_transfer_fields();
        self.p
    }
}

fn check_rings(n: usize, rings: &[Vec<usize>]) -> Result<()> {
    if rings.is_empty() {
        bail!("no rings given");
    }
    for (c, ring) in rings.iter().enumerate() {
        let mut seen = vec![false; n];
        for &r in ring {
            if r >= n || std::mem::replace(&mut seen[r], true) {
                bail!("ring {c} is not a permutation of the {n} ranks");
            }
        }
        if ring.len() != n {
            bail!("ring {c} has {} ranks, expected {n}", ring.len());
        }
    }
    Ok(())
}

/// NCCL's ring algorithm for `coll` over `rings` (ring `c` on channel `c`, each channel
/// carrying 1/`rings.len()` of the data). Allgather, reduce-scatter and allreduce follow
/// the ring; broadcast and reduce use it as a chain from / to `root`.
pub fn ring_program(
    coll: Collective,
    n: usize,
    rings: &[Vec<usize>],
    root: usize,
) -> Result<Program> {
    check_rings(n, rings)?;
    if root >= n {
        bail!("root {root} is not a rank (ngpus {n})");
    }
    let nch = rings.len();
    let mut b = ring_build(coll, n, nch, root)?;
    if n == 1 {
        let t = b.tb(0, None, None, 0);
        for k in 0..b.p.gpus[0].input_chunks.min(b.p.gpus[0].output_chunks) {
            b.step(0, t, Op::Copy, i(k), o(k), vec![]);
        }
        return Ok(b.finish());
    }
    for (c, ring) in rings.iter().enumerate() {
        let channel = RingChannel { ring, c, nch };
        match coll {
            Collective::AllGather => ring_allgather(&mut b, &channel),
            Collective::ReduceScatter => ring_reduce_scatter(&mut b, &channel, false),
            Collective::AllReduce => ring_reduce_scatter(&mut b, &channel, true),
            Collective::Broadcast => ring_broadcast(&mut b, &channel, root),
            Collective::Reduce => ring_reduce(&mut b, &channel, root),
            _ => unreachable!("checked above"),
        }
    }
    if coll == Collective::AllGather {
        for r in 0..n {
            let t = b.tb(r, None, None, 0);
            for c in 0..nch {
                b.step(r, t, Op::Copy, i(c), o(r * nch + c), vec![]);
            }
        }
    }
    if coll == Collective::Broadcast {
        let t = b.tb(root, None, None, 0);
        for c in 0..nch {
            b.step(root, t, Op::Copy, i(c), o(c), vec![]);
        }
    }
    Ok(b.finish())
}

/// The empty program of NCCL's ring algorithm for `coll` on `n` ranks and `nch` channels;
/// an error for a collective NCCL runs without rings.
fn ring_build(coll: Collective, n: usize, nch: usize, root: usize) -> Result<Build> {
    let name = format!("nccl-ring-{coll}-{n}x{nch}ch");
    let big = n * nch;
    Ok(match coll {
        Collective::AllGather => Build::new(name, coll, 0, n, big, nch, big),
        Collective::ReduceScatter => Build::new(name, coll, 0, n, big, big, nch),
        Collective::AllReduce => Build::new(name, coll, 0, n, big, big, big),
        Collective::Broadcast | Collective::Reduce => {
            Build::new(name, coll, root, n, nch, nch, nch)
        }
        _ => bail!("NCCL has no ring algorithm for {coll} (it runs it as point-to-point sends)"),
    })
}

/// One channel of a ring program: its ring (a permutation of the ranks), its number `c`
/// and the number of channels `nch`.
struct RingChannel<'a> {
    ring: &'a [usize],
    c: usize,
    nch: usize,
}

impl RingChannel<'_> {
    /// The rank at position `p` of the ring (taken modulo its length).
    fn at(&self, p: isize) -> usize {
        self.ring[p.rem_euclid(self.ring.len() as isize) as usize]
    }

    /// The position of rank `r` on the ring.
    fn position(&self, r: usize) -> isize {
        self.ring.iter().position(|&x| x == r).expect("permutation") as isize
    }

    /// The chunk of block `q` carried by this channel.
    fn blk(&self, q: usize) -> usize {
        q * self.nch + self.c
    }
}

/// The ring allgather on one channel: every rank sends its chunk on and forwards the others.
fn ring_allgather(b: &mut Build, ch: &RingChannel) {
    let (c, n) = (ch.c, ch.ring.len() as isize);
    for (p, &r) in ch.ring.iter().enumerate() {
        let p = p as isize;
        let t = b.tb(r, Some(ch.at(p + 1)), Some(ch.at(p - 1)), c);
        b.step(r, t, Op::Send, i(c), o(ch.blk(r)), vec![]);
        for k in 1..n {
            let q = ch.at(p - k);
            let op = if k < n - 1 {
                Op::RecvCopySend
            } else {
                Op::Recv
            };
            b.step(r, t, op, o(ch.blk(q)), o(ch.blk(q)), vec![]);
        }
    }
}

/// The ring reduce-scatter on one channel, followed (with `all`: the allreduce) by the ring
/// allgather of the reduced chunks.
fn ring_reduce_scatter(b: &mut Build, ch: &RingChannel, all: bool) {
    let (c, n) = (ch.c, ch.ring.len() as isize);
    for (p, &r) in ch.ring.iter().enumerate() {
        let p = p as isize;
        let t = b.tb(r, Some(ch.at(p + 1)), Some(ch.at(p - 1)), c);
        let first = ch.blk(ch.at(p - 1));
        b.step(r, t, Op::Send, i(first), i(first), vec![]);
        for k in 1..n - 1 {
            let q = ch.blk(ch.at(p - k - 1));
            b.step(r, t, Op::RecvReduceSend, i(q), i(q), vec![]);
        }
        if all {
            let own = ch.blk(r);
            b.step(r, t, Op::RecvReduceCopySend, i(own), o(own), vec![]);
            for k in 1..n {
                let q = ch.blk(ch.at(p - k));
                let op = if k < n - 1 {
                    Op::RecvCopySend
                } else {
                    Op::Recv
                };
                b.step(r, t, op, o(q), o(q), vec![]);
            }
        } else {
            b.step(r, t, Op::RecvReduceCopy, i(ch.blk(r)), o(c), vec![]);
        }
    }
}

/// The broadcast on one channel: a chain along the ring from `root`.
fn ring_broadcast(b: &mut Build, ch: &RingChannel, root: usize) {
    let (c, n) = (ch.c, ch.ring.len() as isize);
    let start = ch.position(root);
    for j in 0..n {
        let r = ch.at(start + j);
        let send = (j < n - 1).then(|| ch.at(start + j + 1));
        let recv = (j > 0).then(|| ch.at(start + j - 1));
        let t = b.tb(r, send, recv, c);
        let op = match (send.is_some(), recv.is_some()) {
            (true, false) => Op::Send,
            (true, true) => Op::RecvCopySend,
            _ => Op::Recv,
        };
        let src = if j == 0 { i(c) } else { o(c) };
        b.step(r, t, op, src, o(c), vec![]);
    }
}

/// The reduce on one channel: data flows along the ring from the rank after `root` back
/// to `root`.
fn ring_reduce(b: &mut Build, ch: &RingChannel, root: usize) {
    let (c, n) = (ch.c, ch.ring.len() as isize);
    let start = ch.position(root);
    for j in 1..=n {
        let r = ch.at(start + j);
        let last = j == n;
        let send = (!last).then(|| ch.at(start + j + 1));
        let recv = (j > 1).then(|| ch.at(start + j - 1));
        let t = b.tb(r, send, recv, c);
        match (send.is_some(), recv.is_some()) {
            (true, false) => b.step(r, t, Op::Send, i(c), i(c), vec![]),
            (true, true) => b.step(r, t, Op::RecvReduceSend, i(c), i(c), vec![]),
            _ => b.step(r, t, Op::RecvReduceCopy, i(c), o(c), vec![]),
        };
    }
}

/// NCCL's tree allreduce: on channel `c` (carrying 1/`trees.len()` of the data) every rank
/// reduces its children's partial sums into its own, sends the result to its parent,
/// receives the total back and passes it to its children. The upward and downward
/// directions run on separate threadblocks, so consecutive slices pipeline in both (a chain
/// rank uses `rrs` going up and `rcs` coming down). `trees[c][r]` is the parent of rank `r`
/// on channel `c` (`None` for the root).
pub fn tree_allreduce_program(n: usize, trees: &[Vec<Option<usize>>]) -> Result<Program> {
    check_trees(n, trees)?;
    let nch = trees.len();
    let mut b = Build::new(
        format!("nccl-tree-allreduce-{n}x{nch}ch"),
        Collective::AllReduce,
        0,
        n,
        nch,
        nch,
        nch,
    );
    for (c, parent) in trees.iter().enumerate() {
        for r in 0..n {
            let children: Vec<usize> = (0..n).filter(|&x| parent[x] == Some(r)).collect();
            let node = TreeNode {
                r,
                c,
                parent: parent[r],
                children: &children,
            };
            if node.parent.is_none() && children.is_empty() {
                let t = b.tb(r, None, None, c);
                b.step(r, t, Op::Copy, i(c), o(c), vec![]);
                continue;
            }
            let last = tree_upward(&mut b, &node);
            tree_downward(&mut b, &node, last);
        }
    }
    Ok(b.finish())
}

/// Checks that `trees` is not empty and that each gives every one of the `n` ranks but one
/// a parent, on a path to that root.
fn check_trees(n: usize, trees: &[Vec<Option<usize>>]) -> Result<()> {
    if trees.is_empty() {
        bail!("no trees given");
    }
    for (c, parent) in trees.iter().enumerate() {
        if parent.len() != n || parent.iter().filter(|p| p.is_none()).count() != 1 {
            bail!("tree {c} must give a parent to all {n} ranks but one");
        }
        // Every rank must reach the root.
        for start in 0..n {
            let (mut r, mut hops) = (start, 0);
            while let Some(p) = parent[r] {
                if p >= n || hops > n {
                    bail!("tree {c} has a cycle or a bad parent at rank {r}");
                }
                r = p;
                hops += 1;
            }
        }
    }
    Ok(())
}

/// Rank `r` in the tree of channel `c`: its parent (`None` for the root) and its children.
struct TreeNode<'a> {
    r: usize,
    c: usize,
    parent: Option<usize>,
    children: &'a [usize],
}

/// The upward direction at one rank: threadblock `up` receives from the first child and
/// sends to the parent; the other children get a threadblock each. Returns the step that
/// completes the rank's partial sum when it is in the output buffer (a root or a rank of
/// several children).
fn tree_upward(b: &mut Build, node: &TreeNode) -> Option<Dep> {
    let (r, c) = (node.r, node.c);
    let up = b.tb(r, node.parent, node.children.first().copied(), c);
    let mut last: Option<Dep> = None;
    match (node.children.len(), node.parent) {
        (0, _) => {
            b.step(r, up, Op::Send, i(c), i(c), vec![]);
        }
        (1, Some(_)) => {
            b.step(r, up, Op::RecvReduceSend, i(c), i(c), vec![]);
        }
        _ => {
            let s = b.step(r, up, Op::RecvReduceCopy, i(c), o(c), vec![]);
            last = Some(Dep { tb: up, step: s });
            for &ch in &node.children[1..] {
                let t = b.tb(r, None, Some(ch), c);
                let deps = last.into_iter().collect();
                let s = b.step(r, t, Op::RecvReduceCopy, o(c), o(c), deps);
                last = Some(Dep { tb: t, step: s });
            }
            if node.parent.is_some() {
                let deps = last.filter(|d| d.tb != up).into_iter().collect();
                b.step(r, up, Op::Send, o(c), o(c), deps);
            }
        }
    }
    last
}

/// The downward direction at one rank: threadblock `down` receives from the parent and
/// sends to the first child (the root sends once `last` of [`tree_upward`] is done); the
/// other children get a threadblock each.
fn tree_downward(b: &mut Build, node: &TreeNode, last: Option<Dep>) {
    let (r, c) = (node.r, node.c);
    let down = b.tb(r, node.children.first().copied(), node.parent, c);
    let ready = match (node.parent.is_some(), node.children.is_empty()) {
        (true, true) => {
            b.step(r, down, Op::Recv, o(c), o(c), vec![]);
            None
        }
        (true, false) => {
            let s = b.step(r, down, Op::RecvCopySend, o(c), o(c), vec![]);
            Some(Dep { tb: down, step: s })
        }
        _ => {
            b.step(r, down, Op::Send, o(c), o(c), last.into_iter().collect());
            last
        }
    };
    for &ch in node.children.iter().skip(1) {
        let t = b.tb(r, Some(ch), None, c);
        b.step(r, t, Op::Send, o(c), o(c), ready.into_iter().collect());
    }
}
