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
    let name = format!("nccl-ring-{coll}-{n}x{nch}ch");
    let big = n * nch;
    let mut b = match coll {
        Collective::AllGather => Build::new(name, coll, 0, n, big, nch, big),
        Collective::ReduceScatter => Build::new(name, coll, 0, n, big, big, nch),
        Collective::AllReduce => Build::new(name, coll, 0, n, big, big, big),
        Collective::Broadcast | Collective::Reduce => {
            Build::new(name, coll, root, n, nch, nch, nch)
        }
        _ => bail!("NCCL has no ring algorithm for {coll} (it runs it as point-to-point sends)"),
    };
    if n == 1 {
        let t = b.tb(0, None, None, 0);
        for k in 0..b.p.gpus[0].input_chunks.min(b.p.gpus[0].output_chunks) {
            b.step(0, t, Op::Copy, i(k), o(k), vec![]);
        }
        return Ok(b.finish());
    }
    let blk = |q: usize, c: usize| q * nch + c;
    for (c, ring) in rings.iter().enumerate() {
        let pos_of = |r: usize| ring.iter().position(|&x| x == r).expect("permutation");
        let at = |p: isize| ring[p.rem_euclid(n as isize) as usize];
        match coll {
            Collective::AllGather => {
                for (p, &r) in ring.iter().enumerate() {
                    let p = p as isize;
                    let t = b.tb(r, Some(at(p + 1)), Some(at(p - 1)), c);
                    b.step(r, t, Op::Send, i(c), o(blk(r, c)), vec![]);
                    for k in 1..n as isize {
                        let q = at(p - k);
                        let op = if k < n as isize - 1 {
                            Op::RecvCopySend
                        } else {
                            Op::Recv
                        };
                        b.step(r, t, op, o(blk(q, c)), o(blk(q, c)), vec![]);
                    }
                }
            }
            Collective::ReduceScatter | Collective::AllReduce => {
                let all = coll == Collective::AllReduce;
                for (p, &r) in ring.iter().enumerate() {
                    let p = p as isize;
                    let t = b.tb(r, Some(at(p + 1)), Some(at(p - 1)), c);
                    b.step(
                        r,
                        t,
                        Op::Send,
                        i(blk(at(p - 1), c)),
                        i(blk(at(p - 1), c)),
                        vec![],
                    );
                    for k in 1..n as isize - 1 {
                        let q = blk(at(p - k - 1), c);
                        b.step(r, t, Op::RecvReduceSend, i(q), i(q), vec![]);
                    }
                    if all {
                        b.step(
                            r,
                            t,
                            Op::RecvReduceCopySend,
                            i(blk(r, c)),
                            o(blk(r, c)),
                            vec![],
                        );
                        for k in 1..n as isize {
                            let q = blk(at(p - k), c);
                            let op = if k < n as isize - 1 {
                                Op::RecvCopySend
                            } else {
                                Op::Recv
                            };
                            b.step(r, t, op, o(q), o(q), vec![]);
                        }
                    } else {
                        b.step(r, t, Op::RecvReduceCopy, i(blk(r, c)), o(c), vec![]);
                    }
                }
            }
            Collective::Broadcast => {
                let start = pos_of(root) as isize;
                for j in 0..n as isize {
                    let r = at(start + j);
                    let send = (j < n as isize - 1).then(|| at(start + j + 1));
                    let recv = (j > 0).then(|| at(start + j - 1));
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
            Collective::Reduce => {
                // Data flows along the ring from the rank after the root back to the root.
                let start = pos_of(root) as isize;
                for j in 1..=n as isize {
                    let r = at(start + j);
                    let last = j == n as isize;
                    let send = (!last).then(|| at(start + j + 1));
                    let recv = (j > 1).then(|| at(start + j - 1));
                    let t = b.tb(r, send, recv, c);
                    match (send.is_some(), recv.is_some()) {
                        (true, false) => b.step(r, t, Op::Send, i(c), i(c), vec![]),
                        (true, true) => b.step(r, t, Op::RecvReduceSend, i(c), i(c), vec![]),
                        _ => b.step(r, t, Op::RecvReduceCopy, i(c), o(c), vec![]),
                    };
                }
            }
            _ => unreachable!("checked above"),
        }
    }
    if coll == Collective::AllGather {
        for r in 0..n {
            let t = b.tb(r, None, None, 0);
            for c in 0..nch {
                b.step(r, t, Op::Copy, i(c), o(blk(r, c)), vec![]);
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

/// NCCL's tree allreduce: on channel `c` (carrying 1/`trees.len()` of the data) every rank
/// reduces its children's partial sums into its own, sends the result to its parent,
/// receives the total back and passes it to its children. The upward and downward
/// directions run on separate threadblocks, so consecutive slices pipeline in both (a chain
/// rank uses `rrs` going up and `rcs` coming down). `trees[c][r]` is the parent of rank `r`
/// on channel `c` (`None` for the root).
pub fn tree_allreduce_program(n: usize, trees: &[Vec<Option<usize>>]) -> Result<Program> {
    if trees.is_empty() {
        bail!("no trees given");
    }
    let nch = trees.len();
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
            let up_parent = parent[r];
            if up_parent.is_none() && children.is_empty() {
                let t = b.tb(r, None, None, c);
                b.step(r, t, Op::Copy, i(c), o(c), vec![]);
                continue;
            }
            // Upward: tb `up` receives from the first child and sends to the parent.
            let up = b.tb(r, up_parent, children.first().copied(), c);
            let mut last: Option<Dep> = None;
            match (children.len(), up_parent) {
                (0, _) => {
                    b.step(r, up, Op::Send, i(c), i(c), vec![]);
                }
                (1, Some(_)) => {
                    b.step(r, up, Op::RecvReduceSend, i(c), i(c), vec![]);
                }
                _ => {
                    let s = b.step(r, up, Op::RecvReduceCopy, i(c), o(c), vec![]);
                    last = Some(Dep { tb: up, step: s });
                    for &ch in &children[1..] {
                        let t = b.tb(r, None, Some(ch), c);
                        let s = b.step(
                            r,
                            t,
                            Op::RecvReduceCopy,
                            o(c),
                            o(c),
                            last.into_iter().collect(),
                        );
                        last = Some(Dep { tb: t, step: s });
                    }
                    if up_parent.is_some() {
                        let deps = last.filter(|d| d.tb != up).into_iter().collect();
                        b.step(r, up, Op::Send, o(c), o(c), deps);
                    }
                }
            }
            // Downward: tb `down` receives from the parent and sends to the first child.
            let down = b.tb(r, children.first().copied(), up_parent, c);
            let ready = match (up_parent.is_some(), children.is_empty()) {
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
            for &ch in children.iter().skip(1) {
                let t = b.tb(r, Some(ch), None, c);
                b.step(r, t, Op::Send, o(c), o(c), ready.into_iter().collect());
            }
        }
    }
    Ok(b.finish())
}
