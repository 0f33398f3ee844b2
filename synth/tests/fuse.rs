//! Compute fused with communication (issue 32): the schedules built from NCCL's ring pair on
//! a fabric run on the CPU executor with the plain schedule's results, and simulate as
//! CoCoNet says they should.

use runtime::compute::{adam_scalars, Compute, ADAM, BIAS_DROPOUT_RESIDUAL};
use runtime::cpu::{run_with_outputs, DataType, RunOptions};
use runtime::ir::{Collective, Flavor, Op, Program};
use runtime::xml::WriteProblem;
use std::path::Path;
use std::process::Command;
use synth::baseline::{self, BaselineOptions};
use synth::dsl::frontend::{run_script, DEFAULT_TIME_LIMIT};
use synth::dsl::trace::{replay, Overrides};
use synth::fuse::workload::{compare, Workload};
use synth::fuse::{compose, plain, Placement};
use synth::simulate::{producer_bound, simulate, Producer, SimOptions, Slicing};
use synth::topology::{self, Topology};

fn ring_pair(topo: &Topology) -> (Program, Program) {
    let ring = |c| baseline::ring(c, topo, &BaselineOptions::default()).unwrap();
    (ring(Collective::ReduceScatter), ring(Collective::AllGather))
}

/// Every rank's output after one checked run (the run itself checks against the plain
/// reference computed from the inputs: `wrong` must be 0).
fn outputs(p: &Program, dtype: DataType) -> Vec<Vec<f64>> {
    outputs_of(p, dtype, p.nchunksperloop * 48)
}

/// [`outputs`] at `elements` elements (the inputs depend on the element count only).
fn outputs_of(p: &Program, dtype: DataType, elements: usize) -> Vec<Vec<f64>> {
    let opts = RunOptions {
        dtype,
        elements,
        seed: 3,
        ..RunOptions::default()
    };
    let (report, out) = run_with_outputs(p, &opts).unwrap();
    assert_eq!(report.wrong, 0, "{}", p.name);
    out
}

/// The schedules of one compute on a fabric: plain, split, fused.
fn schedules(topo: &Topology, compute: &Compute) -> [Program; 3] {
    let (rs, ag) = ring_pair(topo);
    let allreduce = compose(&rs, &ag, compute, Placement::None).unwrap();
    [
        plain(&allreduce, compute),
        compose(&rs, &ag, compute, Placement::Split).unwrap(),
        compose(&rs, &ag, compute, Placement::Fused).unwrap(),
    ]
}

/// Adam in f32 on dgx-a100x2: the split and fused schedules give the plain schedule's
/// parameters within 1e-6 relative (they compute the same formula on the same reduced
/// gradients, so here they agree exactly; the tolerance covers another summation order).
#[test]
fn adam_split_and_fused_equal_plain_on_dgx_a100x2() {
    let topo = topology::load("dgx-a100x2").unwrap();
    let adam = Compute {
        program: ADAM.into(),
        scalars: adam_scalars(),
        seed: 0,
    };
    let [plain, split, fused] = schedules(&topo, &adam);
    let want = outputs(&plain, DataType::F32);
    for p in [&split, &fused] {
        let got = outputs(p, DataType::F32);
        for (a, b) in got.iter().flatten().zip(want.iter().flatten()) {
            assert!(
                (a - b).abs() <= 1e-6 * b.abs().max(1.0),
                "{}: {a} vs {b}",
                p.name
            );
        }
    }
}

/// Adam in f16 and bf16 on dgx-a100x2 (stored in 16 bits, computed in f32 and rounded, as a
/// GPU kernel does): split and fused give the plain schedule's parameters within one unit in
/// the last place of the type (2^-10 for f16, 2^-7 for bf16, relative, at least 1.0 scale;
/// here they agree exactly, as in f32), and the f32 results within the same tolerance.
#[test]
fn adam_split_and_fused_equal_plain_in_f16_and_bf16() {
    let topo = topology::load("dgx-a100x2").unwrap();
    let adam = Compute {
        program: ADAM.into(),
        scalars: adam_scalars(),
        seed: 0,
    };
    let [plain, split, fused] = schedules(&topo, &adam);
    for (dtype, ulp) in [
        (DataType::F16, 2f64.powi(-10)),
        (DataType::BF16, 2f64.powi(-7)),
    ] {
        let want = outputs(&plain, dtype);
        let f32_want = outputs(&plain, DataType::F32);
        for p in [&split, &fused] {
            let got = outputs(p, dtype);
            for (a, b) in got.iter().flatten().zip(want.iter().flatten()) {
                assert!(
                    a == b || (a - b).abs() <= ulp * b.abs().max(1.0),
                    "{} {dtype}: {a} vs {b}",
                    p.name
                );
            }
        }
        // The 16-bit results are the f32 ones within one unit in the last place (the state
        // is rounded to 16 bits too); beyond f16's range (a zero initial `v` with a zero
        // gradient divides by eps) f16 gives an infinity of the same sign.
        for (a, b) in want.iter().flatten().zip(f32_want.iter().flatten()) {
            if dtype == DataType::F16 && b.abs() > 65504.0 {
                assert!(
                    a.is_infinite() && a.signum() == b.signum(),
                    "{dtype}: {a} vs {b}"
                );
            } else {
                assert!(
                    (a - b).abs() <= ulp * b.abs().max(1.0),
                    "{dtype}: {a} vs {b}"
                );
            }
        }
    }
}

/// Bias + dropout (seeded mask) + residual on dgx-a100: fused and plain are identical, in
/// every element type (the same rounding both ways).
#[test]
fn bias_dropout_residual_fused_equals_plain_exactly_on_dgx_a100() {
    let topo = topology::load("dgx-a100").unwrap();
    let bdr = Compute::new(BIAS_DROPOUT_RESIDUAL, &[("prob", 0.25)], 11);
    let [plain, split, fused] = schedules(&topo, &bdr);
    for dtype in [DataType::F32, DataType::F64, DataType::F16, DataType::BF16] {
        let want = outputs(&plain, dtype);
        assert!(
            want.iter().flatten().any(|&v| v == 0.0 || v.fract() != 0.0),
            "the mask drops or scales some elements"
        );
        assert_eq!(outputs(&fused, dtype), want);
        assert_eq!(outputs(&split, dtype), want);
    }
}

/// The acceptance figures at 1 GB on dgx-a100x2: the compute on the slice is N times
/// smaller, and both slice schedules beat allreduce-then-Adam.
#[test]
fn adam_at_1gb_simulates_below_allreduce_then_adam() {
    let topo = topology::load("dgx-a100x2").unwrap();
    let w = Workload::parse(
        "collective = \"allreduce\"\nsize = \"1GB\"\ndtype = \"f32\"\nepilogue = \"adam\"\nmemory_bandwidth = 1500\n",
    )
    .unwrap();
    let (rs, ag) = ring_pair(&topo);
    let cmp = compare(&w, &rs, &ag, &topo).unwrap();
    let row = |s: &str| cmp.rows.iter().find(|r| r.schedule == s).unwrap();
    let (plain, split, fused) = (
        row("allreduce-then-compute"),
        row("rs-compute-ag"),
        row("fused"),
    );
    let n = topo.ranks as f64;
    let whole = plain.compute_us - w.launch_us;
    assert!((whole / split.compute_us - n).abs() < 1e-9);
    assert!((whole / fused.compute_us - n).abs() < 1e-9);
    assert!(split.time_us < plain.time_us, "{split:?} vs {plain:?}");
    assert!(fused.time_us < plain.time_us, "{fused:?} vs {plain:?}");
    // The plain schedule is the allreduce plus a compute over the whole buffer.
    assert!(plain.time_us >= cmp.comm_us + whole);
    assert_ne!(cmp.rows[cmp.best].schedule, "allreduce-then-compute");
}

/// A producer of 16 tiles, 1/4 to 4 times as long as the allreduce (NCCL's ring pair, 1 GB),
/// on benchmark and generated fabrics: the overlapped allreduce (`Slicing::Producer`) never
/// ends before [`producer_bound`] (so never before the last tile) nor after the runtime's
/// slicing gated on tile arrival. At ×1/4, ×1/2, ×2 and ×4 it ends within one tile's time
/// of max(T_producer, T_comm), up to 0.01% of that (below 1/4 the first tile's wait plus the
/// collective alone is the floor, and following the producer costs one slice more: 0.4 µs
/// at most here). At ×1 the producer leaves the collective no slack and its last tile, out
/// at T_producer = T_comm, must still be allreduced: the bound exceeds max + one tile on
/// three of these fabrics; there the target is one tile plus 16 times the collective's
/// latency term (`latency_us`, a crossing of its latency chain per tile). A renumbered twin
/// gives the same times within 0.5%.
#[test]
fn producer_overlap_ends_within_one_tile_of_the_producer() {
    use synth::topology::toml_format::random_permutation;
    let size = 1 << 30;
    let times = |topo: &Topology| -> Vec<f64> {
        let (rs, ag) = ring_pair(topo);
        let none = Compute::new("out = x", &[], 0);
        let allreduce = compose(&rs, &ag, &none, Placement::None).unwrap();
        let comm = simulate(&allreduce, topo, size, &SimOptions::default())
            .unwrap()
            .time_us;
        let mut times = Vec::new();
        for ratio in [0.25, 0.5, 1.0, 2.0, 4.0] {
            let producer = Producer {
                tiles: 16,
                time_us: ratio * comm,
            };
            let at = |slicing| SimOptions {
                producer: Some(producer),
                slicing,
                ..SimOptions::default()
            };
            let run = |slicing| (simulate(&allreduce, topo, size, &at(slicing)).unwrap()).time_us;
            let (t, gated) = (run(Slicing::Producer), run(Slicing::Runtime));
            let bound = producer_bound(&allreduce, topo, size, &at(Slicing::Producer))
                .unwrap()
                .unwrap();
            let name = &topo.name;
            assert!(
                bound.time_us >= producer.time_us && t >= bound.time_us && t <= gated,
                "{name} ×{ratio}: {t} against the bound {bound:?} and gated {gated}"
            );
            let (target, tile) = (producer.time_us.max(comm), producer.time_us / 16.0);
            // The table in results/fuse.md (`-- --nocapture`).
            eprintln!(
                "| {name} | {ratio} | {comm:.1} | {t:.1} | {:.1} | {:.1} | {gated:.1} | {:.1} |",
                target + tile,
                bound.time_us,
                bound.latency_us
            );
            let slack = if ratio == 1.0 {
                tile + 16.0 * bound.latency_us
            } else {
                tile + 1e-4 * target
            };
            assert!(
                t - target <= slack,
                "{name} ×{ratio}: {t} against {target} + {slack}"
            );
            times.push(t);
        }
        times
    };
    for name in ["dgx-a100x2", "ring:8", "torus-2d:4x4"] {
        times(&topology::load(name).unwrap());
    }
    let topo = topology::load("random:12:3").unwrap();
    let plain = times(&topo);
    let twin = times(&topo.relabeled(&random_permutation(topo.ranks, 5)));
    for (a, b) in plain.iter().zip(&twin) {
        assert!(
            (a - b).abs() <= 0.005 * a,
            "random:12:3 {plain:?}, renumbered {twin:?}"
        );
    }
}

/// Issue 32, DSL: `examples/dsl/allreduce_ring_adam.py` on ring:4 (a ring reduce-scatter into
/// each chunk's owner, `.compute("adam", lr=...)` on that chunk, a ring allgather) compiles
/// and verifies with one compute step per rank, has no MSCCL XML (the typed refusal), and
/// runs on the CPU executor (#wrong 0 against its plain reference) with the results of the
/// plain schedule (NCCL's ring allreduce on ring:4, then Adam on the whole buffer) within
/// 1e-6 relative; `synth compile` writes its IR JSON and `synth run` checks it.
#[test]
fn dsl_ring_with_adam_between_the_halves_equals_plain() {
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/dsl/allreduce_ring_adam.py");
    let script = script.to_str().unwrap();
    let args = ["4".to_string(), "--lr".into(), "0.01".into()];
    let traced = run_script(script, &args, DEFAULT_TIME_LIMIT).unwrap();
    let replayed = replay(&traced[0], &Overrides::default()).unwrap();
    for c in &replayed.checks {
        c.clone().expect("Check() passes with the computed outputs");
    }
    let p = replayed.program.compile().unwrap();
    runtime::verify::verify(&p).unwrap();
    let mut scalars = adam_scalars();
    scalars.insert("lr".into(), 0.01);
    let adam = Compute {
        program: ADAM.into(),
        scalars,
        seed: 0,
    };
    assert_eq!(p.compute.as_ref(), Some(&adam));
    let computes: Vec<_> = p.steps().filter(|(_, s)| s.op == Op::Compute).collect();
    assert_eq!(computes.len(), 4, "one compute per owner");
    assert!(computes
        .iter()
        .all(|(at, s)| s.dst.offset == at.rank && s.count == 1));
    let e = runtime::xml::write(&p, Flavor::Nccl).unwrap_err();
    assert!(
        matches!(e.problem, WriteProblem::Compute { steps: 4 }),
        "{e}"
    );

    let topo = topology::load("ring:4").unwrap();
    let (rs, ag) = ring_pair(&topo);
    let reference = plain(&compose(&rs, &ag, &adam, Placement::None).unwrap(), &adam);
    let elements = 4 * 8 * 48;
    let want = outputs_of(&reference, DataType::F32, elements);
    let got = outputs_of(&p, DataType::F32, elements);
    for (a, b) in got.iter().flatten().zip(want.iter().flatten()) {
        assert!((a - b).abs() <= 1e-6 * b.abs().max(1.0), "{a} vs {b}");
    }

    let tmp = tempfile::Builder::new()
        .prefix("synth-fuse-dsl-")
        .tempdir()
        .unwrap();
    let dir = tmp.path();
    let synth = env!("CARGO_BIN_EXE_synth");
    let out = Command::new(synth)
        .args(["compile", script, "--out", dir.to_str().unwrap(), "--", "4"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("no MSCCL XML"), "{stdout}");
    let json = dir.join("allreduce_ring_adam.json");
    assert!(json.exists() && !dir.join("allreduce_ring_adam.xml").exists());
    let out = Command::new(synth)
        .args(["run", json.to_str().unwrap(), "--size", "64K", "--json"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    let doc: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let rows = doc["rows"].as_array().expect("rows");
    assert!(
        !rows.is_empty() && rows.iter().all(|r| r["wrong"] == 0),
        "{stdout}"
    );
}

/// Issue 32, DSL in place: an in-place allreduce with SGD on the reduced chunk before the
/// copy back (the Rust builder, whose program addresses the output through the input
/// buffer) compiles with its compute on the output chunk, verifies and runs with #wrong 0;
/// a second compute on the chunk is refused at its line.
#[test]
fn dsl_in_place_compute_names_the_output_chunk() {
    use synth::dsl::{Buffer, Collective, Connectivity, Kind, Options, Program as Dsl};
    let coll = Collective::new(Kind::AllReduce, 2, 1, true, 0).unwrap();
    let p = Dsl::new(
        "sgd2",
        Connectivity::fully_connected(2),
        coll,
        Options::default(),
    )
    .unwrap();
    let total = p
        .chunk(0, Buffer::Input, 0)
        .reduce(&p.chunk(1, Buffer::Input, 0))
        .unwrap();
    let computed = total.compute("sgd", &[("lr", 0.5)], 0).unwrap();
    computed.copy(1, Buffer::Input, 0).unwrap();
    p.check().unwrap();
    let ir = p.compile().unwrap();
    runtime::verify::verify(&ir).unwrap();
    assert!(ir.inplace);
    let (_, step) = ir.steps().find(|(_, s)| s.op == Op::Compute).unwrap();
    assert_eq!(
        step.dst,
        runtime::ir::Slot::new(runtime::ir::Buffer::Output, 0)
    );
    let opts = RunOptions {
        elements: 64,
        inplace: true,
        ..RunOptions::default()
    };
    let (report, _) = run_with_outputs(&ir, &opts).unwrap();
    assert_eq!(report.wrong, 0);
    let e = computed.compute("sgd", &[("lr", 0.5)], 0).unwrap_err();
    assert!(e.to_string().contains("applied a second time"), "{e}");
    assert!(e.to_string().contains("fuse.rs:"), "{e}");
}
