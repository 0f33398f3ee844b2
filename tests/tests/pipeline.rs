//! End to end: synthesize → lower (in place and out of place, every flavour) → verify →
//! MSCCL XML → read back → run on the CPU executor with random data at three sizes.

use runtime::cpu::{run, DataType, RunOptions};
use runtime::ir::{Flavor, Program};
use std::time::{Duration, Instant};
use synth::algorithm::Algorithm;
use synth::allreduce_shapes::{one_shot, two_shot};
use synth::collective::{Collective, Kind};
use synth::lower::{lower, LowerOptions};
use synth::origin::Family;
use synth::progress::Progress;
use synth::smt::Limits;
use synth::synthesize::{synthesize, synthesize_with, Method, Request, Search};
use synth::topology::{self, Topology};

const ALL: [Kind; 8] = [
    Kind::AllGather,
    Kind::ReduceScatter,
    Kind::AllReduce,
    Kind::AllToAll,
    Kind::Broadcast,
    Kind::Reduce,
    Kind::Gather,
    Kind::Scatter,
];

fn least_steps(topo: &Topology, kind: Kind, root: usize, chunks: usize) -> Algorithm {
    let progress = Progress::hidden();
    let request = Request {
        topology: topo,
        collective: Collective::new(kind, topo.ranks, root, 1).unwrap(),
        search: Search::LeastSteps {
            chunks,
            rounds: None,
        },
        limits: Limits {
            max_steps: 12,
            max_chunks: chunks,
            max_chunks_given: false,
            deadline: Instant::now() + Duration::from_secs(300),
            extra_memory: None,
            work_limit: None,
        },
        progress: &progress,
    };
    let s = synthesize(&request).unwrap();
    s.algorithms
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("{kind} on {}: nothing found", topo.name))
}

/// Lowers, verifies, round-trips through XML and runs at three sizes; returns the program.
fn exercise(algorithm: &Algorithm, inplace: bool, flavor: Flavor, instances: usize) -> Program {
    let options = LowerOptions {
        flavor,
        inplace,
        instances,
        ..LowerOptions::default()
    };
    let what = format!(
        "{} inplace={inplace} {flavor:?} instances={instances}",
        algorithm.name
    );
    let program =
        lower(algorithm, &options).unwrap_or_else(|e| panic!("{what}: lowering failed: {e:#}"));
    runtime::verify::verify(&program).unwrap_or_else(|e| panic!("{what}: {e}"));
    let xml = runtime::xml::write(&program, flavor).unwrap_or_else(|e| panic!("{what}: {e}"));
    let back =
        runtime::xml::read_str(&xml).unwrap_or_else(|e| panic!("{what}: reading our XML: {e}"));
    runtime::verify::verify(&back).unwrap_or_else(|e| panic!("{what}: re-read program: {e}"));
    for bytes in [1u64 << 10, 100_000, 1 << 20] {
        let mut opts = RunOptions::for_bytes(&back, bytes, DataType::F32);
        opts.inplace = inplace;
        let report = run(&back, &opts).unwrap_or_else(|e| panic!("{what} at {bytes} B: {e:#}"));
        assert_eq!(
            report.wrong, 0,
            "{what} at {bytes} B: {} wrong elements",
            report.wrong
        );
    }
    back
}

#[test]
fn every_collective_on_four_topologies() {
    for name in ["dgx1", "ring:8", "fully-connected:4", "dgx-a100"] {
        let topo = topology::load(name).unwrap();
        for kind in ALL {
            let root = if kind.is_rooted() { topo.ranks - 1 } else { 0 };
            let algorithm = least_steps(&topo, kind, root, 1);
            for inplace in [false, true] {
                for flavor in [Flavor::Nccl, Flavor::Rccl] {
                    exercise(&algorithm, inplace, flavor, 1);
                }
            }
        }
    }
}

#[test]
fn chunked_and_replicated_programs() {
    let topo = topology::load("dgx1").unwrap();
    for kind in [Kind::AllGather, Kind::AllReduce, Kind::AllToAll] {
        let algorithm = least_steps(&topo, kind, 0, 2);
        let program = exercise(&algorithm, false, Flavor::Nccl, 2);
        assert_eq!(
            program.nchannels(),
            2,
            "{kind}: two instances use two channels"
        );
        exercise(&algorithm, true, Flavor::Legacy, 1);
    }
}

#[test]
fn rccl_programs_use_only_rccl_instructions() {
    let topo = topology::load("ring:5").unwrap();
    let algorithm = least_steps(&topo, Kind::AllReduce, 0, 1);
    let program = exercise(&algorithm, false, Flavor::Rccl, 1);
    assert!(program.steps().all(|(_, s)| !s.op.is_fused()));
    let fused = exercise(&algorithm, false, Flavor::Nccl, 1);
    assert!(
        fused.steps().any(|(_, s)| s.op.is_fused()),
        "the NCCL flavour fuses receive-reduce-copy"
    );
}

/// Lowered as the main command lowers (connections split over further channels until the
/// flavour's limits hold), verified, read back and run at two sizes.
fn exercise_fitted(algorithm: &Algorithm, inplace: bool, flavor: Flavor, instances: usize) {
    let options = LowerOptions {
        flavor,
        inplace,
        instances,
        ..LowerOptions::default()
    };
    let what = format!(
        "{} inplace={inplace} {flavor:?} instances={instances}",
        algorithm.name
    );
    let (program, xml) = synth::lower::lower_to_xml(algorithm, &options)
        .unwrap_or_else(|e| panic!("{what}: lowering failed: {e:#}"));
    runtime::verify::verify(&program).unwrap_or_else(|e| panic!("{what}: {e}"));
    let back =
        runtime::xml::read_str(&xml).unwrap_or_else(|e| panic!("{what}: reading our XML: {e}"));
    for bytes in [1u64 << 10, 1 << 20] {
        let mut opts = RunOptions::for_bytes(&back, bytes, DataType::F32);
        opts.inplace = inplace;
        let report = run(&back, &opts).unwrap_or_else(|e| panic!("{what} at {bytes} B: {e:#}"));
        assert_eq!(report.wrong, 0, "{what} at {bytes} B");
    }
}

/// Every flavour, one and two instances, out of place and in place.
fn exercise_everywhere(algorithm: &Algorithm) {
    for flavor in [Flavor::Nccl, Flavor::Rccl, Flavor::Legacy] {
        for instances in [1, 2] {
            for inplace in [false, true] {
                exercise(algorithm, inplace, flavor, instances);
            }
        }
    }
}

#[test]
fn one_shot_and_two_shot_allreduce_run_in_every_flavour() {
    for name in ["dgx-h100", "fully-connected:5"] {
        let topo = topology::load(name).unwrap();
        for algorithm in [one_shot(&topo, 1), two_shot(&topo, 1), two_shot(&topo, 2)] {
            let algorithm = algorithm.unwrap().expect("every pair is linked");
            synth::check::check(&algorithm, &topo).unwrap();
            exercise_everywhere(&algorithm);
        }
    }
}

#[test]
fn reduce_broadcast_trees_allreduce_runs() {
    for name in ["ring:5", "line:4", "dgx-h100"] {
        let topo = topology::load(name).unwrap();
        let progress = Progress::hidden();
        let request = Request {
            topology: &topo,
            collective: Collective::new(Kind::AllReduce, topo.ranks, 0, 1).unwrap(),
            search: Search::Pareto,
            limits: Limits {
                max_steps: 16,
                max_chunks: 8,
                max_chunks_given: false,
                deadline: Instant::now() + Duration::from_secs(600),
                extra_memory: None,
                work_limit: None,
            },
            progress: &progress,
        };
        let found = synthesize_with(&request, Method::Trees, None).unwrap();
        let trees: Vec<&Algorithm> = found
            .algorithms
            .iter()
            .filter(|a| matches!(a.origin.family, Family::ReduceBroadcast { .. }))
            .collect();
        assert!(!trees.is_empty(), "{name}: no reduce + broadcast candidate");
        for algorithm in trees {
            synth::check::check(algorithm, &topo).unwrap();
            for (flavor, inplace, instances) in [
                (Flavor::Nccl, false, 1),
                (Flavor::Rccl, false, 1),
                (Flavor::Legacy, true, 2),
            ] {
                exercise_fitted(algorithm, inplace, flavor, instances);
            }
        }
    }
}

/// Issue 29 item 4c: NCCL's trees (chains in a node, double binary trees across the nodes of
/// dgx-a100x2 and dgx-a100x4) as an allreduce candidate: checked, lowered in every flavour
/// refined to pipeline, verified and run; offered by the main synthesis (ring:5), and not
/// where a tree edge is no link (a star's chain passes through leaves that are not linked).
#[test]
fn nccl_trees_allreduce_is_a_candidate_and_runs() {
    for name in ["ring:5", "line:4", "dgx-h100", "dgx-a100x2", "dgx-a100x4"] {
        let topo = topology::load(name).unwrap();
        let trees = synth::allreduce_shapes::nccl_trees(&topo, 1)
            .unwrap()
            .unwrap_or_else(|| panic!("{name}: no NCCL trees"));
        assert_eq!(trees.origin.family, Family::NcclTrees);
        assert!(trees.steps.iter().any(|s| s.reduce), "{name}");
        synth::check::check(&trees, &topo).unwrap_or_else(|e| panic!("{name}: {e}"));
        let refined = trees.refined(2);
        synth::check::check(&refined, &topo).unwrap();
        for (flavor, inplace, instances) in [
            (Flavor::Nccl, false, 1),
            (Flavor::Rccl, true, 1),
            (Flavor::Legacy, false, 2),
        ] {
            exercise_fitted(&refined, inplace, flavor, instances);
        }
    }
    let star = topology::load("star:5").unwrap();
    assert!(synth::allreduce_shapes::nccl_trees(&star, 1)
        .unwrap()
        .is_none());
    let topo = topology::load("ring:5").unwrap();
    let progress = Progress::hidden();
    let request = Request {
        topology: &topo,
        collective: Collective::new(Kind::AllReduce, topo.ranks, 0, 1).unwrap(),
        search: Search::Pareto,
        limits: Limits {
            max_steps: 16,
            max_chunks: 8,
            max_chunks_given: false,
            deadline: Instant::now() + Duration::from_secs(600),
            extra_memory: None,
            work_limit: None,
        },
        progress: &progress,
    };
    let found = synthesize_with(&request, Method::Trees, None).unwrap();
    assert!(
        found
            .algorithms
            .iter()
            .any(|a| a.origin.family == Family::NcclTrees),
        "no NCCL trees candidate on ring:5"
    );
}

#[test]
fn allreduce_shapes_where_every_pair_is_linked_and_only_there() {
    for name in ["dgx-h100", "dgx-a100", "fully-connected:4", "ring:3"] {
        let topo = topology::load(name).unwrap();
        let shapes = synth::allreduce_shapes::candidates(&topo).unwrap();
        let families: Vec<Family> = shapes.iter().map(|a| a.origin.family.clone()).collect();
        assert_eq!(families, [Family::OneShot, Family::TwoShot], "{name}");
        assert_eq!(shapes[0].num_steps(), 1, "{name}: one-shot in one step");
        assert_eq!(shapes[1].num_steps(), 2, "{name}: two-shot in two steps");
        for shape in &shapes {
            synth::check::check(&shape.refined(3), &topo).unwrap();
        }
    }
    for name in ["ring:5", "line:4", "dgx1", "torus-2d:3x3", "random:8:2"] {
        let topo = topology::load(name).unwrap();
        let shapes = synth::allreduce_shapes::candidates(&topo).unwrap();
        assert!(shapes.is_empty(), "{name}");
    }
}
