//! The CUDA executor. Everything that needs no GPU runs everywhere: the schedule derived from
//! a program (send/receive pairing into copies, staging, stream waits) is executed on host
//! memory in many dependency-respecting orders and must give the collective's exact result,
//! and its DAG must order every pair of conflicting memory accesses. The driver calls that
//! issue it (recorded through the launcher's `Driver` trait) must capture every stream, order
//! every pair of steps the verifier orders, and compute the collective when run on host
//! memory in any order their streams and events allow. Tests that need a GPU
//! (feature `cuda`) skip with a notice when there is no driver or device.

#![allow(clippy::needless_range_loop)]

mod common;

use common::fixture;
use common::recorder::{Call, Recorder};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::Rng;
use rand::SeedableRng;
use runtime::builders::{
    direct_allgather, direct_alltoall, ring_allgather, ring_allreduce, ring_reduce_scatter,
};
use runtime::compute::{adam_scalars, Compute, Kernel, ADAM, BIAS_DROPOUT_RESIDUAL};
use runtime::cpu::initial_state;
use runtime::cuda::data::{input_value, wrong_in_output_chunk};
use runtime::cuda::launch::{ComputeCall, CopyCall, EventId, KernelCall, Launcher, StreamId};
use runtime::cuda::schedule::{piece, Action, Loc, NodeKind, Schedule};
use runtime::cuda::{Dtype, KERNEL_THREADS};
use runtime::ir::StepRef;
use runtime::ir::{Buffer, Dep, Op, Program, Slot, Step, Threadblock};
use runtime::semantics::Semantics;
use runtime::{verify, xml};
use std::collections::HashMap;

fn programs() -> Vec<Program> {
    let mut v = vec![
        ring_allreduce(&[0, 1, 2, 3], 1, false),
        ring_allreduce(&[2, 0, 3, 1], 2, true),
        ring_allgather(&[0, 1, 2], 2, false),
        ring_allgather(&[0, 1, 2, 3], 1, true),
        ring_reduce_scatter(&[0, 1, 2, 3], 1, false),
        ring_reduce_scatter(&[1, 0, 2], 2, true),
        direct_alltoall(4),
        direct_allgather(3),
    ];
    for f in [
        "allreduce-1step-3gpu-LL-inplace.xml",
        "allreduce-ring-4gpu-Simple-inplace.xml",
        "alltoall-8n-0-9kb.xml",
    ] {
        if let Some(text) = fixture(f) {
            v.push(xml::read_str(&text).unwrap_or_else(|e| panic!("{f}: {e}")));
        }
    }
    for p in &v {
        verify::verify(p).unwrap_or_else(|e| panic!("{}: {e}", p.name));
    }
    v
}

/// Host memory poisoned with NaN, inputs written.
fn host_memory(p: &Program, s: &Schedule, chunk: usize) -> Vec<[Vec<f32>; 4]> {
    let sem = Semantics::of(p, s.inplace).unwrap();
    let mut mem: Vec<[Vec<f32>; 4]> = s
        .space_chunks
        .iter()
        .map(|c| std::array::from_fn(|i| vec![f32::NAN; c[i] * chunk]))
        .collect();
    for rank in 0..p.ngpus {
        for k in 0..sem.extent(Buffer::Input).unwrap() {
            let l = Schedule::resolve(p, s.inplace, rank, Buffer::Input, k).unwrap();
            for e in 0..chunk {
                mem[rank][l.space.index()][l.chunk * chunk + e] =
                    input_value(9, rank, k * chunk + e, 32);
            }
        }
    }
    mem
}

fn wrong(p: &Program, s: &Schedule, mem: &[[Vec<f32>; 4]], chunk: usize) -> usize {
    let sem = Semantics::of(p, s.inplace).unwrap();
    let mut wrong = 0;
    for rank in 0..p.ngpus {
        for k in 0..sem.extent(Buffer::Output).unwrap() {
            let Some(exp) = sem.expected_output(rank, k) else {
                continue;
            };
            let l = Schedule::resolve(p, s.inplace, rank, Buffer::Output, k).unwrap();
            for e in 0..chunk {
                let want: f32 = exp
                    .iter()
                    .map(|c| input_value(9, c.rank, c.chunk * chunk + e, 32))
                    .sum();
                if mem[rank][l.space.index()][l.chunk * chunk + e] != want {
                    wrong += 1;
                }
            }
        }
    }
    wrong
}

/// A random order that respects every dependency (randomised Kahn).
fn random_order(s: &Schedule, rng: &mut StdRng) -> Vec<usize> {
    let n = s.nodes.len();
    let mut indeg: Vec<usize> = s.nodes.iter().map(|x| x.deps.len()).collect();
    let mut succ = vec![Vec::new(); n];
    for (v, x) in s.nodes.iter().enumerate() {
        for &d in &x.deps {
            succ[d].push(v);
        }
    }
    let mut ready: Vec<usize> = (0..n).filter(|&v| indeg[v] == 0).collect();
    let mut order = Vec::new();
    while !ready.is_empty() {
        ready.shuffle(rng);
        let v = ready.pop().unwrap();
        order.push(v);
        for &w in &succ[v] {
            indeg[w] -= 1;
            if indeg[w] == 0 {
                ready.push(w);
            }
        }
    }
    assert_eq!(order.len(), n);
    order
}

#[test]
fn schedules_compute_every_collective_exactly_in_any_order() {
    let mut rng = StdRng::seed_from_u64(5);
    for p in programs() {
        for inplace in p.modes() {
            for slices in [1, 3] {
                let s = Schedule::new(&p, inplace, slices)
                    .unwrap_or_else(|e| panic!("{}: {e:#}", p.name));
                for (i, node) in s.nodes.iter().enumerate() {
                    assert!(
                        node.deps.iter().all(|&d| d < i),
                        "issue order is topological"
                    );
                }
                let chunk = 7;
                let issue: Vec<usize> = (0..s.nodes.len()).collect();
                let mut orders = vec![issue];
                for _ in 0..6 {
                    orders.push(random_order(&s, &mut rng));
                }
                for order in orders {
                    let mut mem = host_memory(&p, &s, chunk);
                    s.execute_on_host(&mut mem, chunk, &order).unwrap();
                    assert_eq!(
                        wrong(&p, &s, &mem, chunk),
                        0,
                        "{} inplace={inplace} slices={slices}",
                        p.name
                    );
                }
            }
        }
    }
}

/// Element ranges (rank, space, start, end) a node reads and writes.
type Range = (usize, usize, usize, usize);

fn footprint(s: &Schedule, v: usize, chunk: usize) -> (Vec<Range>, Vec<Range>) {
    let n = &s.nodes[v];
    let (lo, hi) = piece(chunk, s.slices, n.pass);
    let r = |l: Loc, count: usize| -> Vec<Range> {
        (0..count)
            .map(|k| {
                let base = (l.chunk + k) * chunk;
                (l.rank, l.space.index(), base + lo, base + hi)
            })
            .collect()
    };
    match n.action {
        Action::Copy { src, dst, count } => (r(src, count), r(dst, count)),
        Action::Compute { at, count, .. } => (r(at, count), r(at, count)),
        Action::Reduce { out, a, b, count } => {
            let mut reads = r(a, count);
            reads.extend(r(b, count));
            (reads, r(out, count))
        }
    }
}

fn overlap(a: &Range, b: &Range) -> bool {
    a.0 == b.0 && a.1 == b.1 && a.2 < b.3 && b.2 < a.3
}

#[test]
fn schedules_order_every_conflicting_access() {
    for p in programs() {
        for inplace in p.modes() {
            let s = Schedule::new(&p, inplace, 2).unwrap();
            let n = s.nodes.len();
            // reach[v]: bitset of nodes that v (transitively) depends on.
            let words = n.div_ceil(64);
            let mut reach = vec![vec![0u64; words]; n];
            for v in 0..n {
                for &d in &s.nodes[v].deps {
                    reach[v][d / 64] |= 1 << (d % 64);
                    let dr = reach[d].clone();
                    for (a, b) in reach[v].iter_mut().zip(dr) {
                        *a |= b;
                    }
                }
            }
            let fp: Vec<_> = (0..n).map(|v| footprint(&s, v, 8)).collect();
            for v in 0..n {
                for u in 0..v {
                    let conflict = fp[v]
                        .1
                        .iter()
                        .any(|w| fp[u].0.iter().chain(&fp[u].1).any(|x| overlap(w, x)))
                        || fp[u]
                            .1
                            .iter()
                            .any(|w| fp[v].0.iter().any(|x| overlap(w, x)));
                    if conflict {
                        assert!(
                            reach[v][u / 64] >> (u % 64) & 1 == 1,
                            "{} inplace={inplace}: nodes {u} and {v} race ({:?} / {:?})",
                            p.name,
                            s.nodes[u],
                            s.nodes[v]
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn pairs_are_direct_unless_rendezvous_would_deadlock() {
    // A ring whose threadblocks all send before they receive: per round, rendezvous on
    // every hop would close a cycle around the ring, so exactly one hop per round is staged.
    let s = Schedule::new(&ring_allgather(&[0, 1, 2, 3], 1, false), false, 1).unwrap();
    assert_eq!(s.direct_pairs + s.staged_pairs, 4 * 3);
    assert_eq!(s.staged_pairs, 3);
    assert_eq!(s.space_chunks.iter().map(|c| c[3]).sum::<usize>(), 3);
    // A chain (rank 0 sends, rank 1 receives then sends, rank 2 receives): all direct.
    let chain = runtime::ir::Program {
        name: "chain".into(),
        collective: runtime::ir::Collective::Broadcast,
        root: 0,
        protocol: runtime::ir::Protocol::Simple,
        ngpus: 3,
        nchunksperloop: 1,
        inplace: false,
        outofplace: true,
        min_bytes: 0,
        max_bytes: 0,
        custom: None,
        compute: None,
        gpus: (0..3)
            .map(|r| {
                use runtime::ir::{Gpu, Op, Slot, Step, Threadblock};
                let (i, o) = (Slot::new(Buffer::Input, 0), Slot::new(Buffer::Output, 0));
                let steps = match r {
                    0 => vec![Step::new(Op::Copy, i, o, 1), Step::new(Op::Send, i, o, 1)],
                    1 => vec![Step::new(Op::RecvCopySend, i, o, 1)],
                    _ => vec![Step::new(Op::Recv, i, o, 1)],
                };
                Gpu {
                    rank: r,
                    input_chunks: 1,
                    output_chunks: 1,
                    scratch_chunks: 0,
                    threadblocks: vec![Threadblock {
                        send: (r < 2).then_some(r + 1),
                        recv: (r > 0).then(|| r - 1),
                        channel: 0,
                        steps,
                    }],
                }
            })
            .collect(),
    };
    verify::verify(&chain).unwrap();
    let s = Schedule::new(&chain, false, 1).unwrap();
    assert_eq!((s.direct_pairs, s.staged_pairs), (2, 0));
    assert!(
        s.space_chunks.iter().all(|c| c[3] == 0),
        "no staging memory"
    );
    // Direct all-to-all: each threadblock sends to and then receives from one peer, so a
    // rendezvous per pair would deadlock; one side of each exchange is staged.
    let p = direct_alltoall(4);
    let s = Schedule::new(&p, false, 1).unwrap();
    assert_eq!(s.direct_pairs + s.staged_pairs, 12);
    assert!(
        s.staged_pairs >= 6 && s.staged_pairs < 12,
        "{}",
        s.staged_pairs
    );
    // Reductions land in staging and run as kernels on the receiver.
    let s = Schedule::new(&ring_reduce_scatter(&[0, 1, 2], 1, false), false, 1).unwrap();
    assert!(s.nodes.iter().any(|n| n.kind == NodeKind::LocalReduce));
    if let Some(text) = fixture("allreduce-ring-4gpu-Simple-inplace.xml") {
        let p = xml::read_str(&text).unwrap();
        let s = Schedule::new(&p, true, 1).unwrap();
        assert!(s.reduce_pairs > 0);
        for n in &s.nodes {
            if let Action::Reduce { out, a, b, .. } = n.action {
                assert!(out.rank == a.rank && a.rank == b.rank, "kernels are local");
                assert_eq!(s.streams[n.stream].0, out.rank, "on the owner's stream");
            }
        }
    }
}

#[test]
fn stream_waits_imply_every_cross_stream_dependency() {
    for p in programs() {
        let s = Schedule::new(&p, p.modes()[0], 2).unwrap();
        let waits = s.waits();
        let mut pos = vec![0usize; s.nodes.len()];
        let mut len = vec![0usize; s.streams.len()];
        for (i, n) in s.nodes.iter().enumerate() {
            pos[i] = len[n.stream];
            len[n.stream] += 1;
        }
        // covered[stream][other]: nodes of `other` known finished before this point.
        let mut covered = vec![vec![0usize; s.streams.len()]; s.streams.len()];
        for (v, n) in s.nodes.iter().enumerate() {
            for &w in &waits[v] {
                let o = s.nodes[w].stream;
                assert_ne!(o, n.stream);
                covered[n.stream][o] = covered[n.stream][o].max(pos[w] + 1);
            }
            for &d in &n.deps {
                let o = s.nodes[d].stream;
                if o != n.stream {
                    assert!(
                        covered[n.stream][o] > pos[d],
                        "{}: node {v} dep {d}",
                        p.name
                    );
                }
            }
        }
        let total: usize = waits.iter().map(|w| w.len()).sum();
        let cross: usize = s
            .nodes
            .iter()
            .map(|n| {
                n.deps
                    .iter()
                    .filter(|&&d| s.nodes[d].stream != n.stream)
                    .count()
            })
            .sum();
        assert!(total <= cross);
    }
}

#[test]
fn sliced_schedules_replay_the_program_per_piece() {
    let p = ring_allreduce(&[0, 1, 2], 1, false);
    let one = Schedule::new(&p, false, 1).unwrap();
    let four = Schedule::new(&p, false, 4).unwrap();
    assert_eq!(four.nodes.len(), 4 * one.nodes.len());
    assert_eq!(
        four.space_chunks, one.space_chunks,
        "pieces share the chunks"
    );
    assert_eq!(piece(10, 4, 0), (0, 2));
    assert_eq!(piece(10, 4, 3), (7, 10));
    assert_eq!(piece(3, 4, 0), (0, 0));
}

/// A copy or kernel launch of a recorded issue, with what it is ordered after.
#[derive(Debug)]
struct Work {
    /// Threadblock stream.
    stream: usize,
    /// 1-based position among the work of its stream.
    pos: usize,
    /// Per stream (root last), how many of its works are ordered before this one starts
    /// (its own stream: this one included).
    clock: Vec<usize>,
    /// The schedule node.
    node: usize,
    call: Call,
}

impl Work {
    /// Whether `self` finishes before `other` starts (stream order and events).
    fn before(&self, other: &Work) -> bool {
        other.clock[self.stream] >= self.pos
    }
}

fn stream_index(s: StreamId, ns: usize) -> usize {
    match s {
        StreamId::Root => ns,
        StreamId::Tb(i) => i,
    }
}

/// Checks the shape of a captured issue (capture on the root stream, fork and join of every
/// stream, every waited event recorded once before) and orders its work by vector clocks.
fn trace(l: &Launcher, calls: &[Call]) -> Vec<Work> {
    let ns = l.sched.streams.len();
    assert_eq!(calls.first(), Some(&Call::BeginCapture));
    assert_eq!(calls.last(), Some(&Call::EndCapture));
    let inner = &calls[1..calls.len() - 1];
    assert_eq!(
        inner.first(),
        Some(&Call::Record(EventId::Fork, StreamId::Root))
    );
    let mut clocks = vec![vec![0usize; ns + 1]; ns + 1];
    let mut events: HashMap<EventId, Vec<usize>> = HashMap::new();
    let mut started = vec![false; ns];
    let mut joined = vec![false; ns];
    let mut work = Vec::new();
    for (i, c) in inner.iter().enumerate() {
        let on = match c {
            Call::Record(_, s) | Call::Wait(s, _) => stream_index(*s, ns),
            Call::Copy(s, _) | Call::Launch(s, _) | Call::Compute(s, _) => *s,
            _ => panic!("call {i}: {c:?} inside the capture"),
        };
        if on < ns {
            assert!(!joined[on], "call {i}: {c:?} after stream {on} joined");
            if !started[on] {
                assert_eq!(
                    c,
                    &Call::Wait(StreamId::Tb(on), EventId::Fork),
                    "stream {on} starts by joining the capture"
                );
                started[on] = true;
            }
        }
        match c {
            Call::Record(e, s) => {
                assert!(
                    events.insert(*e, clocks[on].clone()).is_none(),
                    "{e:?} recorded twice"
                );
                match e {
                    EventId::Fork => assert_eq!(*s, StreamId::Root),
                    EventId::Join(j) => {
                        assert_eq!(*s, StreamId::Tb(*j));
                        assert_eq!(
                            inner.get(i + 1),
                            Some(&Call::Wait(StreamId::Root, *e)),
                            "the root waits for every join"
                        );
                        joined[*j] = true;
                    }
                    EventId::Node(v) => assert_eq!(*s, StreamId::Tb(l.sched.nodes[*v].stream)),
                }
            }
            Call::Wait(_, e) => {
                let at = events
                    .get(e)
                    .unwrap_or_else(|| panic!("call {i}: waits for {e:?} before its record"));
                for (a, b) in clocks[on].iter_mut().zip(at) {
                    *a = (*a).max(*b);
                }
            }
            Call::Copy(_, CopyCall { node, .. })
            | Call::Launch(_, KernelCall { node, .. })
            | Call::Compute(_, ComputeCall { node, .. }) => {
                assert_eq!(l.sched.nodes[*node].stream, on, "node {node} on its stream");
                clocks[on][on] += 1;
                work.push(Work {
                    stream: on,
                    pos: clocks[on][on],
                    clock: clocks[on].clone(),
                    node: *node,
                    call: c.clone(),
                });
            }
            _ => unreachable!(),
        }
    }
    assert!(joined.iter().all(|&j| j), "every stream joins the root");
    assert!(
        inner.iter().all(|c| !matches!(
            c,
            Call::Record(EventId::Node(_), StreamId::Root)
                | Call::Wait(StreamId::Root, EventId::Node(_))
        )),
        "the root stream only forks and joins"
    );
    work
}

/// The verifier's order of step instances (pass, flat step): program order (a threadblock's
/// pass j + 1 after its pass j), dependencies and send → receive; transitively closed.
/// Returns the flat index of each step and, per instance, the instances before it.
fn program_order(p: &Program, passes: usize) -> (HashMap<StepRef, usize>, Vec<Vec<bool>>) {
    let mut flat = HashMap::new();
    let mut tbs = Vec::new();
    for g in &p.gpus {
        for (tb, t) in g.threadblocks.iter().enumerate() {
            let first = flat.len();
            for step in 0..t.steps.len() {
                flat.insert(
                    StepRef {
                        rank: g.rank,
                        tb,
                        step,
                    },
                    flat.len(),
                );
            }
            tbs.push((first, t.steps.len()));
        }
    }
    let n = flat.len();
    let id = |pass: usize, x: usize| pass * n + x;
    let mut preds: Vec<Vec<usize>> = vec![Vec::new(); passes * n];
    for pass in 0..passes {
        for &(first, len) in &tbs {
            for k in 1..len {
                preds[id(pass, first + k)].push(id(pass, first + k - 1));
            }
            if pass > 0 && len > 0 {
                preds[id(pass, first)].push(id(pass - 1, first + len - 1));
            }
        }
        for (at, &x) in &flat {
            for d in &p.step(*at).unwrap().deps {
                let y = flat[&StepRef {
                    rank: at.rank,
                    tb: d.tb,
                    step: d.step,
                }];
                preds[id(pass, x)].push(id(pass, y));
            }
        }
        for (s, r) in p.transfer_pairs() {
            preds[id(pass, flat[&r])].push(id(pass, flat[&s]));
        }
    }
    // Closure in a topological order (Kahn).
    let total = passes * n;
    let mut indeg: Vec<usize> = preds.iter().map(|v| v.len()).collect();
    let mut succ = vec![Vec::new(); total];
    for (v, ps) in preds.iter().enumerate() {
        for &u in ps {
            succ[u].push(v);
        }
    }
    let mut ready: Vec<usize> = (0..total).filter(|&v| indeg[v] == 0).collect();
    let mut before = vec![vec![false; total]; total];
    let mut done = 0;
    while let Some(v) = ready.pop() {
        done += 1;
        for &u in &preds[v] {
            before[v][u] = true;
            let bu = before[u].clone();
            for (a, b) in before[v].iter_mut().zip(bu) {
                *a |= b;
            }
        }
        for &w in &succ[v] {
            indeg[w] -= 1;
            if indeg[w] == 0 {
                ready.push(w);
            }
        }
    }
    assert_eq!(done, total, "{}: the program order has a cycle", p.name);
    (flat, before)
}

/// The step instances a node implements: a direct copy both the send and the receive, a copy
/// to staging the send, every other node its own step.
fn owners(
    s: &Schedule,
    v: usize,
    flat: &HashMap<StepRef, usize>,
    sender: &HashMap<StepRef, StepRef>,
) -> Vec<usize> {
    let n = &s.nodes[v];
    let base = n.pass * flat.len();
    let own = base + flat[&n.step];
    let send = || base + flat[&sender[&n.step]];
    match n.kind {
        NodeKind::Direct => vec![send(), own],
        NodeKind::ToStage => vec![send()],
        _ => vec![own],
    }
}

/// Asserts that every two pieces of recorded work whose steps the verifier orders
/// (`order`: [`program_order`]) run in that order by their streams and events.
fn assert_in_program_order(
    s: &Schedule,
    work: &[Work],
    (flat, before): (&HashMap<StepRef, usize>, &[Vec<bool>]),
    sender: &HashMap<StepRef, StepRef>,
    what: &str,
) {
    let own: Vec<Vec<usize>> = work
        .iter()
        .map(|w| owners(s, w.node, flat, sender))
        .collect();
    for (i, u) in work.iter().enumerate() {
        for (j, v) in work.iter().enumerate() {
            if u.node == v.node {
                continue; // one node's rows: one stream, in order
            }
            let ordered = own[i].iter().any(|&a| own[j].iter().any(|&b| before[b][a]));
            assert!(
                !ordered || u.before(v),
                "{what}: {:?} must finish before {:?} starts",
                u.call,
                v.call
            );
        }
    }
}

/// Fake device allocations: space `i` of rank `r` at `(4r + i + 1) << 32`.
fn fake_bases(p: &Program) -> Vec<[u64; 4]> {
    (0..p.ngpus as u64)
        .map(|r| std::array::from_fn(|i| (4 * r + i as u64 + 1) << 32))
        .collect()
}

/// (rank, space, element) of a fake address.
fn decode(addr: u64, es: usize) -> (usize, usize, usize) {
    let a = (addr >> 32) as usize - 1;
    (a / 4, a % 4, (addr & 0xffff_ffff) as usize / es)
}

/// Runs recorded f32 work on host memory as the driver would: copies move bytes, kernels
/// compute `out = a + b` row by row (units of 16 bytes for the vectorized ones).
fn run_work(mem: &mut [[Vec<f32>; 4]], c: &Call) {
    match c {
        Call::Copy(_, cp) => {
            let (sr, ss, se) = decode(cp.src, 4);
            let (dr, ds, de) = decode(cp.dst, 4);
            let data = mem[sr][ss][se..se + cp.bytes / 4].to_vec();
            mem[dr][ds][de..de + cp.bytes / 4].copy_from_slice(&data);
        }
        Call::Launch(_, k) => {
            let per = if k.kernel.ends_with("_vec") { 4 } else { 1 };
            let [out, a, b, n, stride] = k.args;
            let (o, a, b) = (decode(out, 4), decode(a, 4), decode(b, 4));
            for row in 0..k.grid.1 as usize {
                for e in 0..n as usize * per {
                    let i = row * stride as usize * per + e;
                    let x = mem[a.0][a.1][a.2 + i] + mem[b.0][b.1][b.2 + i];
                    mem[o.0][o.1][o.2 + i] = x;
                }
            }
        }
        other => panic!("{other:?} is no work"),
    }
}

/// A random order of the work in which each runs after everything ordered before it.
fn random_work_order(work: &[Work], streams: usize, rng: &mut StdRng) -> Vec<usize> {
    let mut done = vec![0usize; streams + 1];
    let mut left: Vec<usize> = (0..work.len()).collect();
    let mut order = Vec::new();
    while !left.is_empty() {
        let ready: Vec<usize> = (0..left.len())
            .filter(|&i| {
                let w = &work[left[i]];
                (0..=streams).all(|t| done[t] + usize::from(t == w.stream) >= w.clock[t])
            })
            .collect();
        assert!(!ready.is_empty(), "the recorded work cannot all run");
        let i = ready[rng.gen_range(0..ready.len())];
        let v = left.swap_remove(i);
        done[work[v].stream] += 1;
        order.push(v);
    }
    order
}

#[test]
fn launcher_captures_the_schedule_in_the_verifiers_order() {
    let mut rng = StdRng::seed_from_u64(11);
    for p in programs() {
        let sender: HashMap<StepRef, StepRef> = p
            .transfer_pairs()
            .into_iter()
            .map(|(s, r)| (r, s))
            .collect();
        for inplace in p.modes() {
            for slices in [1, 3] {
                let s = Schedule::new(&p, inplace, slices).unwrap();
                let (flat, before) = program_order(&p, slices);
                // f32 chunks of 8 elements take the vectorized kernels, of 7 the scalar ones.
                for chunk in [8, 7] {
                    let what =
                        format!("{} inplace={inplace} slices={slices} chunk={chunk}", p.name);
                    let l = Launcher::new(s.clone(), Dtype::F32, chunk, fake_bases(&p));
                    let mut rec = Recorder::default();
                    l.capture(&mut rec).unwrap();
                    let mut direct = Recorder::default();
                    l.issue(&mut direct).unwrap();
                    assert_eq!(direct.calls, rec.calls[1..rec.calls.len() - 1], "{what}");
                    let work = trace(&l, &rec.calls);
                    assert_in_program_order(&s, &work, (&flat, &before), &sender, &what);
                    for _ in 0..3 {
                        let mut mem = host_memory(&p, &s, chunk);
                        for v in random_work_order(&work, s.streams.len(), &mut rng) {
                            run_work(&mut mem, &work[v].call);
                        }
                        assert_eq!(wrong(&p, &s, &mem, chunk), 0, "{what}");
                    }
                }
            }
        }
    }
}

#[test]
fn launcher_passes_kernel_shapes_and_addresses() {
    let p = ring_reduce_scatter(&[0, 1, 2, 3], 1, false);
    let s = Schedule::new(&p, false, 1).unwrap();
    let l = Launcher::new(s.clone(), Dtype::F16, 8, fake_bases(&p));
    let mut rec = Recorder::default();
    l.issue(&mut rec).unwrap();
    let launches: Vec<&KernelCall> = rec
        .calls
        .iter()
        .filter_map(|c| match c {
            Call::Launch(_, k) => Some(k),
            _ => None,
        })
        .collect();
    assert_eq!(
        launches.len(),
        s.nodes
            .iter()
            .filter(|n| matches!(n.action, Action::Reduce { .. }))
            .count()
    );
    for k in launches {
        let Action::Reduce { out, a, b, count } = s.nodes[k.node].action else {
            panic!("a launch for a copy");
        };
        // 8 f16 elements per chunk = one 16-byte unit: vectorized, one row.
        assert_eq!(k.kernel, "reduce_f16_vec");
        assert_eq!(
            k.args,
            [
                l.addr(out, 0, 0),
                l.addr(a, 0, 0),
                l.addr(b, 0, 0),
                count as u64,
                1
            ]
        );
        assert_eq!((k.grid, k.block), ((1, 1, 1), (KERNEL_THREADS, 1, 1)));
    }
}

#[cfg(feature = "cuda")]
mod gpu {
    use super::{compute_programs, programs};
    use runtime::cuda::{self, CudaOptions, Dtype};

    fn gpu() -> bool {
        match cuda::available() {
            Ok(_) => true,
            Err(e) => {
                eprintln!("notice: skipping GPU test: {e}");
                false
            }
        }
    }

    #[test]
    fn programs_run_correctly_on_the_gpu() {
        if !gpu() {
            return;
        }
        // The compute programs' results are checked against the plain schedule's.
        for p in programs().into_iter().chain(compute_programs()) {
            for dtype in Dtype::ALL {
                for (graph, slices) in [(true, 1), (false, 2)] {
                    let opts = CudaOptions {
                        dtype,
                        sizes: vec![4096, 3 << 20],
                        warmup: 1,
                        iters: 3,
                        graph,
                        slices,
                        ..CudaOptions::default()
                    };
                    let rows = cuda::sweep(&p, &opts)
                        .unwrap_or_else(|e| panic!("{} {dtype}: {e:#}", p.name));
                    for r in rows {
                        assert_eq!(r.wrong, 0, "{} {dtype} graph={graph} {r:?}", p.name);
                        assert!(r.time_us > 0.0);
                    }
                }
            }
        }
    }

    #[test]
    fn copy_ceiling_measures() {
        if !gpu() {
            return;
        }
        let rows = cuda::copy_ceiling(&[1 << 20, 64 << 20], 1, 3).unwrap();
        assert!(rows.iter().all(|r| r.gbps > 0.0));
    }
}

/// Programs with a compute (synth's extension): Adam, and bias + dropout + residual, after a
/// ring allreduce on every rank's whole output (the plain schedule), and the DSL's ring with
/// Adam on each owner's chunk between the reduce-scatter and the allgather
/// (`examples/dsl/allreduce_ring_adam.py -- 4`, compiled by `synth compile`).
fn compute_programs() -> Vec<Program> {
    let plain = |compute: Compute| {
        let mut p = ring_allreduce(&[0, 1, 2, 3], 1, false);
        for g in &mut p.gpus {
            let deps = (g.threadblocks.iter().enumerate())
                .filter(|(_, tb)| !tb.steps.is_empty())
                .map(|(tb, t)| Dep {
                    tb,
                    step: t.steps.len() - 1,
                })
                .collect();
            let all = Slot::new(Buffer::Output, 0);
            g.threadblocks.push(Threadblock {
                send: None,
                recv: None,
                channel: 0,
                steps: vec![Step {
                    deps,
                    ..Step::new(Op::Compute, all, all, g.output_chunks)
                }],
            });
        }
        p.compute = Some(compute);
        p
    };
    let adam = Compute {
        program: ADAM.into(),
        scalars: adam_scalars(),
        seed: 0,
    };
    let bdr = Compute::new(BIAS_DROPOUT_RESIDUAL, &[("prob", 0.25)], 42);
    let dsl = Program::from_json(include_str!("data/allreduce_ring_adam_4.json")).unwrap();
    assert!(dsl.compute.is_some());
    let v = vec![plain(adam), plain(bdr), dsl];
    for p in &v {
        verify::verify(p).unwrap_or_else(|e| panic!("{}: {e}", p.name));
    }
    v
}

/// Fake state allocations: state buffer `b` of rank `r` at `((1 << 16) + 8r + b) << 32`.
fn fake_state_bases(p: &Program, buffers: usize) -> Vec<Vec<u64>> {
    (0..p.ngpus as u64)
        .map(|r| {
            (0..buffers as u64)
                .map(|b| ((1 << 16) + 8 * r + b) << 32)
                .collect()
        })
        .collect()
}

/// (rank, buffer, element) of a fake f32 state address.
fn decode_state(addr: u64) -> (usize, usize, usize) {
    let a = (addr >> 32) as usize - (1 << 16);
    (a / 8, a % 8, (addr & 0xffff_ffff) as usize / 4)
}

/// The state buffers of every rank as the CPU executor starts them (`[rank][buffer]`).
fn initial_state_memory(p: &Program, kernel: &Kernel, chunk: usize) -> Vec<Vec<Vec<f32>>> {
    let outputs = Semantics::of(p, false)
        .unwrap()
        .extent(Buffer::Output)
        .unwrap();
    (0..p.ngpus)
        .map(|_| {
            (0..kernel.buffers.len())
                .map(|b| {
                    (0..(outputs * chunk) as u64)
                        .map(|i| initial_state(b, i) as f32)
                        .collect()
                })
                .collect()
        })
        .collect()
}

/// [`run_work`] with compute launches: the kernel on the run at `x` and the state elements
/// at the addresses the launch passes, which must be the run's output indices.
fn run_computing_work(
    mem: &mut [[Vec<f32>; 4]],
    state: &mut [Vec<Vec<f32>>],
    kernel: &Kernel,
    c: &Call,
) {
    let Call::Compute(_, k) = c else {
        return run_work(mem, c);
    };
    let nb = kernel.buffers.len();
    assert_eq!(k.kernel, "compute_f32");
    assert_eq!(k.args.len(), nb + 3, "(x, state..., n, index0)");
    let (rank, space, x0) = decode(k.args[0], 4);
    let (n, index0) = (k.args[nb + 1] as usize, k.args[nb + 2] as usize);
    assert!(k.grid.0 as usize * k.block.0 as usize >= n.min(1024 * KERNEL_THREADS as usize));
    for (b, &a) in k.args[1..=nb].iter().enumerate() {
        assert_eq!(
            decode_state(a),
            (rank, b, index0),
            "state {b} at the run's indices"
        );
    }
    let mut s = vec![0f32; nb];
    for i in 0..n {
        for b in 0..nb {
            s[b] = state[rank][b][index0 + i];
        }
        let x = &mut mem[rank][space][x0 + i];
        *x = kernel.apply(*x, &mut s, (index0 + i) as u64);
        for b in 0..nb {
            state[rank][b][index0 + i] = s[b];
        }
    }
}

/// Wrong output elements against the plain schedule's results, by the CUDA executor's own
/// check ([`wrong_in_output_chunk`] with the kernel), on inputs `input_value(9, .., 32)`.
fn wrong_computed(
    p: &Program,
    s: &Schedule,
    mem: &[[Vec<f32>; 4]],
    chunk: usize,
    kernel: &Kernel,
) -> usize {
    let sem = Semantics::of(p, s.inplace).unwrap();
    let mut wrong = 0;
    for rank in 0..p.ngpus {
        for k in 0..sem.extent(Buffer::Output).unwrap() {
            let l = Schedule::resolve(p, s.inplace, rank, Buffer::Output, k).unwrap();
            let mut bytes = Vec::new();
            for e in 0..chunk {
                let v = mem[rank][l.space.index()][l.chunk * chunk + e];
                bytes.extend_from_slice(&v.to_le_bytes());
            }
            wrong += wrong_in_output_chunk(
                &sem,
                Dtype::F32,
                9,
                rank,
                k,
                chunk,
                32,
                Some(kernel),
                &bytes,
            );
        }
    }
    wrong
}

/// Issue 32, CUDA executor: a program's compute steps become compute nodes after their
/// dependencies, launched through the launcher with the state buffers at the elements'
/// output indices; the recorded launches, ordered as the verifier orders the steps and run
/// on host memory in any order their streams and events allow (and the schedule itself in
/// any dependency order), give the plain schedule's results exactly.
#[test]
fn compute_programs_launch_in_order_and_give_the_plain_results() {
    let mut rng = StdRng::seed_from_u64(32);
    for p in compute_programs() {
        let kernel = p.compute.as_ref().unwrap().kernel().unwrap();
        let sender: HashMap<StepRef, StepRef> = p
            .transfer_pairs()
            .into_iter()
            .map(|(s, r)| (r, s))
            .collect();
        for inplace in p.modes() {
            for slices in [1, 3] {
                let s = Schedule::new(&p, inplace, slices).unwrap();
                let computes = s.nodes.iter().filter(|n| n.kind == NodeKind::Compute);
                assert_eq!(
                    computes.count(),
                    p.steps().filter(|(_, st)| st.op == Op::Compute).count() * slices,
                    "{}: one compute node per compute step and pass",
                    p.name
                );
                let (flat, before) = program_order(&p, slices);
                for chunk in [8, 7] {
                    let what =
                        format!("{} inplace={inplace} slices={slices} chunk={chunk}", p.name);
                    let state = fake_state_bases(&p, kernel.buffers.len());
                    let l = Launcher::new(s.clone(), Dtype::F32, chunk, fake_bases(&p))
                        .with_state(state);
                    let mut rec = Recorder::default();
                    l.capture(&mut rec).unwrap();
                    let work = trace(&l, &rec.calls);
                    assert!(work.iter().any(|w| matches!(w.call, Call::Compute(..))));
                    assert_in_program_order(&s, &work, (&flat, &before), &sender, &what);
                    for _ in 0..3 {
                        let mut mem = host_memory(&p, &s, chunk);
                        let mut state = initial_state_memory(&p, &kernel, chunk);
                        for v in random_work_order(&work, s.streams.len(), &mut rng) {
                            run_computing_work(&mut mem, &mut state, &kernel, &work[v].call);
                        }
                        assert_eq!(wrong_computed(&p, &s, &mem, chunk, &kernel), 0, "{what}");
                        let mut mem = host_memory(&p, &s, chunk);
                        let mut state = initial_state_memory(&p, &kernel, chunk);
                        let order = random_order(&s, &mut rng);
                        s.execute_computing_on_host(
                            &mut mem,
                            Some((&kernel, &mut state)),
                            chunk,
                            &order,
                        )
                        .unwrap();
                        assert_eq!(wrong_computed(&p, &s, &mem, chunk, &kernel), 0, "{what}");
                    }
                    // Without the kernel, the host run refuses the compute nodes.
                    let mut mem = host_memory(&p, &s, chunk);
                    let order = random_order(&s, &mut rng);
                    assert!(s.execute_on_host(&mut mem, chunk, &order).is_err());
                }
            }
        }
    }
}
