//! Every collective's semantics: expected outputs follow the documented formulas, and a
//! small direct program for each collective (including the rooted ones) verifies and runs
//! correctly in both modes; wrong programs fail the postcondition.

mod common;

use common::assert_runs_correctly;
use runtime::builders::{direct_alltoall, ring_allgather, ring_allreduce, ring_reduce_scatter};
use runtime::ir::{
    Buffer, Collective, Dep, Flavor, Gpu, Op, Program, Protocol, Slot, Step, Threadblock,
};
use runtime::semantics::{Contribution, Region, Semantics};
use runtime::{verify, xml};

fn c(rank: usize, chunk: usize) -> Contribution {
    Contribution { rank, chunk }
}

#[test]
fn expected_outputs_follow_the_definitions() {
    let n = 3;
    let sem = |coll, inplace| Semantics::new(coll, n, 6, 1, inplace).unwrap();
    let all = |k| (0..n).map(|j| c(j, k)).collect::<Vec<_>>();
    // f = N / n = 2
    assert_eq!(
        sem(Collective::AllReduce, false).expected_output(2, 5),
        Some(all(5))
    );
    assert_eq!(
        sem(Collective::AllGather, false).expected_output(0, 5),
        Some(vec![c(2, 1)])
    );
    assert_eq!(
        sem(Collective::ReduceScatter, false).expected_output(2, 1),
        Some(all(5))
    );
    assert_eq!(
        sem(Collective::AllToAll, false).expected_output(1, 4),
        Some(vec![c(2, 2)])
    );
    assert_eq!(
        sem(Collective::Broadcast, false).expected_output(0, 3),
        Some(vec![c(1, 3)])
    );
    assert_eq!(
        sem(Collective::Reduce, false).expected_output(1, 3),
        Some(all(3))
    );
    assert_eq!(sem(Collective::Reduce, false).expected_output(0, 3), None);
    assert_eq!(
        sem(Collective::Gather, false).expected_output(1, 3),
        Some(vec![c(1, 1)])
    );
    assert_eq!(sem(Collective::Gather, false).expected_output(2, 3), None);
    assert_eq!(
        sem(Collective::Scatter, false).expected_output(2, 1),
        Some(vec![c(1, 5)])
    );
    // extents: allgather/gather inputs and reducescatter/scatter outputs are one slice
    for (coll, i, o) in [
        (Collective::AllReduce, 6, 6),
        (Collective::AllGather, 2, 6),
        (Collective::ReduceScatter, 6, 2),
        (Collective::AllToAll, 6, 6),
        (Collective::Broadcast, 6, 6),
        (Collective::Reduce, 6, 6),
        (Collective::Gather, 2, 6),
        (Collective::Scatter, 6, 2),
    ] {
        let s = sem(coll, false);
        assert_eq!(
            (s.extent(Buffer::Input), s.extent(Buffer::Output)),
            (Some(i), Some(o)),
            "{coll}"
        );
    }
}

#[test]
fn in_place_aliasing_per_collective() {
    let s = |coll| Semantics::new(coll, 4, 8, 0, true).unwrap();
    for coll in [
        Collective::AllReduce,
        Collective::AllToAll,
        Collective::Broadcast,
        Collective::Reduce,
    ] {
        assert_eq!(
            s(coll).resolve(3, Buffer::Input, 5),
            s(coll).resolve(3, Buffer::Output, 5),
            "{coll}"
        );
    }
    for coll in [Collective::AllGather, Collective::Gather] {
        assert_eq!(
            s(coll).resolve(3, Buffer::Input, 1),
            Some((Region::Recv, 7)),
            "{coll}"
        );
    }
    for coll in [Collective::ReduceScatter, Collective::Scatter] {
        assert_eq!(
            s(coll).resolve(3, Buffer::Output, 1),
            Some((Region::Send, 7)),
            "{coll}"
        );
    }
}

#[test]
fn collective_helpers() {
    assert_eq!(Collective::AllGather.size_multiplier(8), 8);
    assert_eq!(Collective::Gather.size_multiplier(8), 1);
    assert_eq!(
        Collective::ReduceScatter.xml_name(Flavor::Nccl),
        Some("reducescatter")
    );
    assert_eq!(
        Collective::ReduceScatter.xml_name(Flavor::Legacy),
        Some("reduce_scatter")
    );
    assert_eq!(Collective::Gather.xml_name(Flavor::Legacy), None);
    assert!((Collective::AllReduce.busbw_factor(8) - 1.75).abs() < 1e-12);
    assert!((Collective::AllGather.busbw_factor(8) - 0.875).abs() < 1e-12);
    assert_eq!(Collective::Broadcast.busbw_factor(8), 1.0);
}

// ----- direct programs for the rooted collectives -----

fn slot(b: Buffer, o: usize) -> Slot {
    Slot::new(b, o)
}

fn tb(send: Option<usize>, recv: Option<usize>, steps: Vec<Step>) -> Threadblock {
    Threadblock {
        send,
        recv,
        channel: 0,
        steps,
    }
}

fn program(
    coll: Collective,
    n: usize,
    nchunks: usize,
    root: usize,
    inplace: bool,
    gpus: Vec<Gpu>,
) -> Program {
    Program {
        name: format!("direct_{coll}"),
        collective: coll,
        root,
        protocol: Protocol::LL,
        ngpus: n,
        nchunksperloop: nchunks,
        inplace,
        outofplace: !inplace,
        min_bytes: 0,
        max_bytes: 1 << 20,
        gpus,
        custom: None,
        compute: None,
    }
}

fn gpu(rank: usize, i: usize, o: usize, s: usize, threadblocks: Vec<Threadblock>) -> Gpu {
    Gpu {
        rank,
        input_chunks: i,
        output_chunks: o,
        scratch_chunks: s,
        threadblocks,
    }
}

fn transfer(op: Op, src: Slot, dst: Slot) -> Step {
    Step::new(op, src, dst, 1)
}

/// Root sends i[0] to every peer; out of place it copies i[0] -> o[0] too.
fn broadcast(n: usize, root: usize, inplace: bool) -> Program {
    let (i, o) = (Buffer::Input, Buffer::Output);
    let gpus = (0..n)
        .map(|r| {
            if r != root {
                return gpu(
                    r,
                    0,
                    1,
                    0,
                    vec![tb(
                        None,
                        Some(root),
                        vec![transfer(Op::Recv, slot(i, 0), slot(o, 0))],
                    )],
                );
            }
            let mut tbs: Vec<Threadblock> = (0..n)
                .filter(|&p| p != root)
                .map(|p| {
                    tb(
                        Some(p),
                        None,
                        vec![transfer(Op::Send, slot(i, 0), slot(o, 0))],
                    )
                })
                .collect();
            if !inplace {
                tbs.push(tb(
                    None,
                    None,
                    vec![transfer(Op::Copy, slot(i, 0), slot(o, 0))],
                ));
            }
            gpu(r, 1, if inplace { 0 } else { 1 }, 0, tbs)
        })
        .collect();
    program(Collective::Broadcast, n, 1, root, inplace, gpus)
}

/// Peers send i[0] to the root, which receives into scratch and reduces into o[0] in order.
fn reduce(n: usize, root: usize, inplace: bool) -> Program {
    let (i, o, s) = (Buffer::Input, Buffer::Output, Buffer::Scratch);
    let gpus = (0..n)
        .map(|r| {
            if r != root {
                return gpu(
                    r,
                    1,
                    0,
                    0,
                    vec![tb(
                        Some(root),
                        None,
                        vec![transfer(Op::Send, slot(i, 0), slot(s, r))],
                    )],
                );
            }
            let acc = if inplace { slot(i, 0) } else { slot(o, 0) };
            let mut local = Vec::new();
            if !inplace {
                local.push(transfer(Op::Copy, slot(i, 0), acc));
            }
            let mut tbs = vec![];
            for p in (0..n).filter(|&p| p != root) {
                tbs.push(tb(
                    None,
                    Some(p),
                    vec![transfer(Op::Recv, slot(i, 0), slot(s, p))],
                ));
                local.push(transfer(Op::Reduce, slot(s, p), acc).after(tbs.len(), 0));
            }
            tbs.insert(0, tb(None, None, local));
            gpu(r, 1, if inplace { 0 } else { 1 }, n, tbs)
        })
        .collect();
    program(Collective::Reduce, n, 1, root, inplace, gpus)
}

/// Peers send i[0] to the root's o[r]; the root copies its own (out of place).
fn gather(n: usize, root: usize, inplace: bool) -> Program {
    let (i, o) = (Buffer::Input, Buffer::Output);
    let gpus = (0..n)
        .map(|r| {
            if r != root {
                let src = if inplace { slot(o, r) } else { slot(i, 0) };
                let (ic, oc) = if inplace { (0, n) } else { (1, 0) };
                return gpu(
                    r,
                    ic,
                    oc,
                    0,
                    vec![tb(
                        Some(root),
                        None,
                        vec![transfer(Op::Send, src, slot(o, r))],
                    )],
                );
            }
            let mut tbs: Vec<Threadblock> = (0..n)
                .filter(|&p| p != root)
                .map(|p| {
                    tb(
                        None,
                        Some(p),
                        vec![transfer(Op::Recv, slot(i, 0), slot(o, p))],
                    )
                })
                .collect();
            if !inplace {
                tbs.push(tb(
                    None,
                    None,
                    vec![transfer(Op::Copy, slot(i, 0), slot(o, root))],
                ));
            }
            gpu(r, if inplace { 0 } else { 1 }, n, 0, tbs)
        })
        .collect();
    program(Collective::Gather, n, n, root, inplace, gpus)
}

/// The root sends i[p] to every peer's o[0] and copies i[root] (out of place).
fn scatter(n: usize, root: usize, inplace: bool) -> Program {
    let (i, o) = (Buffer::Input, Buffer::Output);
    let gpus = (0..n)
        .map(|r| {
            if r != root {
                return gpu(
                    r,
                    0,
                    1,
                    0,
                    vec![tb(
                        None,
                        Some(root),
                        vec![transfer(Op::Recv, slot(i, r), slot(o, 0))],
                    )],
                );
            }
            let mut tbs: Vec<Threadblock> = (0..n)
                .filter(|&p| p != root)
                .map(|p| {
                    tb(
                        Some(p),
                        None,
                        vec![transfer(Op::Send, slot(i, p), slot(o, 0))],
                    )
                })
                .collect();
            if !inplace {
                tbs.push(tb(
                    None,
                    None,
                    vec![transfer(Op::Copy, slot(i, root), slot(o, 0))],
                ));
            }
            gpu(r, n, if inplace { 0 } else { 1 }, 0, tbs)
        })
        .collect();
    program(Collective::Scatter, n, n, root, inplace, gpus)
}

fn check(p: &Program) {
    verify::verify(p).unwrap_or_else(|e| panic!("{} inplace={}: {e}", p.name, p.inplace));
    let text = xml::write(p, Flavor::Nccl).unwrap();
    if p.collective.is_rooted() {
        assert!(text
            .lines()
            .next()
            .unwrap()
            .ends_with(&format!(" root=\"{}\">", p.root)));
    }
    let mut normalized = p.clone();
    normalized.normalize_transfer_fields();
    assert_eq!(xml::read_str(&text).unwrap(), normalized);
    assert_runs_correctly(p);
}

#[test]
fn every_collective_runs_in_both_modes() {
    for inplace in [false, true] {
        for (n, root) in [(2, 0), (3, 2), (4, 1)] {
            check(&broadcast(n, root, inplace));
            check(&reduce(n, root, inplace));
            check(&gather(n, root, inplace));
            check(&scatter(n, root, inplace));
        }
        check(&ring_allreduce(&[0, 2, 1], 1, inplace));
        check(&ring_allgather(&[0, 2, 1], 1, inplace));
        check(&ring_reduce_scatter(&[0, 2, 1], 1, inplace));
    }
    check(&direct_alltoall(4));
}

#[test]
fn wrong_root_fails_the_postcondition() {
    let mut p = broadcast(3, 1, false);
    p.root = 2;
    let e = verify::verify(&p).unwrap_err().to_string();
    assert!(
        e.contains("rank 0 output chunk 0: unexpected contribution (rank 1, chunk 0)")
            || e.contains("missing contribution (rank 2, chunk 0)"),
        "{e}"
    );
}

#[test]
fn reduce_without_ordering_races() {
    let mut p = reduce(3, 0, false);
    for step in &mut p.gpus[0].threadblocks[0].steps {
        step.deps.clear();
    }
    let e = verify::verify(&p).unwrap_err().to_string();
    assert!(e.contains("race on rank 0 Scratch[1]"), "{e}");
}

#[test]
fn multiple_dependencies_become_nops() {
    let mut p = reduce(3, 0, false);
    // One re waits for both receives: first dep on the step, the second as a nop before it.
    let local = &mut p.gpus[0].threadblocks[0].steps;
    local[1].deps = vec![Dep { tb: 1, step: 0 }, Dep { tb: 2, step: 0 }];
    verify::verify(&p).unwrap();
    let text = xml::write(&p, Flavor::Rccl).unwrap();
    assert!(text.contains("<step s=\"1\" type=\"nop\" srcbuf=\"i\" srcoff=\"-1\" dstbuf=\"o\" dstoff=\"-1\" cnt=\"0\" depid=\"2\" deps=\"0\" hasdep=\"0\"/>"), "{text}");
    assert!(text.contains("<step s=\"2\" type=\"re\" srcbuf=\"s\" srcoff=\"1\" dstbuf=\"o\" dstoff=\"0\" cnt=\"1\" depid=\"1\" deps=\"0\" hasdep=\"0\"/>"), "{text}");
    assert_eq!(xml::read_str(&text).unwrap(), p);
    assert_eq!(
        xml::transmissions(&p)[0],
        3 + 2,
        "cpy, re, re + two receive tbs"
    );
}
