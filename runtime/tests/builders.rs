//! The builders' programs verify, are legal in every flavour, and compute the right result
//! on the CPU executor at three sizes.

mod common;

use common::{assert_runs_correctly, run_wrong};
use runtime::builders::{
    direct_allgather, direct_alltoall, ring_allgather, ring_allreduce, ring_reduce_scatter,
};
use runtime::cpu::{DataType, ReduceOp};
use runtime::ir::{Flavor, Program};
use runtime::{verify, xml};

fn orders() -> Vec<Vec<usize>> {
    vec![
        vec![0, 1],
        vec![0, 1, 2],
        vec![2, 0, 1],
        vec![0, 1, 2, 3],
        vec![3, 1, 0, 2],
        (0..8).collect(),
    ]
}

fn check(p: &Program) {
    verify::verify(p).unwrap_or_else(|e| panic!("{}: {e}", p.name));
    for flavor in Flavor::ALL {
        let text = xml::write(p, flavor).unwrap_or_else(|e| panic!("{} {flavor:?}: {e}", p.name));
        let mut back =
            xml::read_str(&text).unwrap_or_else(|e| panic!("{} {flavor:?}: {e}", p.name));
        if flavor == Flavor::Legacy {
            back.max_bytes = p.max_bytes;
        }
        assert_eq!(&back, p, "{} {flavor:?}", p.name);
    }
    assert_runs_correctly(p);
}

#[test]
fn ring_allgather_programs() {
    for order in orders() {
        for channels in [1, 2] {
            for inplace in [false, true] {
                check(&ring_allgather(&order, channels, inplace));
            }
        }
    }
}

#[test]
fn ring_reduce_scatter_programs() {
    for order in orders() {
        for channels in [1, 3] {
            for inplace in [false, true] {
                check(&ring_reduce_scatter(&order, channels, inplace));
            }
        }
    }
}

#[test]
fn ring_allreduce_programs() {
    for order in orders() {
        for channels in [1, 2] {
            for inplace in [false, true] {
                check(&ring_allreduce(&order, channels, inplace));
            }
        }
    }
}

#[test]
fn direct_programs() {
    for n in [2, 3, 5, 8] {
        check(&direct_alltoall(n));
        check(&direct_allgather(n));
    }
}

#[test]
fn ring_allreduce_with_other_types_and_operators() {
    let p = ring_allreduce(&[1, 3, 0, 2], 2, false);
    for dtype in [DataType::F32, DataType::F64] {
        for op in [ReduceOp::Sum, ReduceOp::Min, ReduceOp::Max] {
            assert_eq!(run_wrong(&p, false, 1025, dtype, op), 0, "{dtype} {op}");
        }
    }
}

#[test]
fn builders_are_rccl_legal_and_use_expected_shapes() {
    let p = ring_allreduce(&(0..8).collect::<Vec<_>>(), 1, true);
    assert!(p.steps().all(|(_, s)| !s.op.is_fused()));
    assert_eq!(p.nchunksperloop, 8);
    assert_eq!(p.gpus[0].output_chunks, 0, "in place addresses only i");
    let p = ring_allgather(&[0, 1, 2, 3], 2, true);
    assert_eq!((p.gpus[0].input_chunks, p.gpus[0].output_chunks), (0, 8));
    assert_eq!(p.nchannels(), 2);
    assert_eq!(
        xml::transmissions(&p),
        vec![6 * 2; 4],
        "s, 3 r, 2 s per channel"
    );
}

#[test]
fn executor_refuses_undeclared_modes_and_bad_sizes() {
    // Verified programs only run; the count of wrong elements is real: a program that is
    // valid out of place reports 0, and the executor refuses a mode the program lacks.
    let p = ring_allgather(&[0, 1, 2], 1, false);
    assert_eq!(run_wrong(&p, false, 5, DataType::F32, ReduceOp::Sum), 0);
    let opts = runtime::cpu::RunOptions {
        inplace: true,
        elements: 15,
        ..Default::default()
    };
    let e = runtime::cpu::run(&p, &opts).unwrap_err();
    assert!(e.to_string().contains("not declared valid in place"), "{e}");
    let opts = runtime::cpu::RunOptions {
        elements: 16,
        ..Default::default()
    };
    assert!(
        runtime::cpu::run(&p, &opts).is_err(),
        "16 is not a multiple of 3 chunks"
    );
}
