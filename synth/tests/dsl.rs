//! The MSCCLang-compatible DSL: the example programs under `examples/dsl/` compiled,
//! verified, executed and simulated; the Rust builder; `--emit-dsl` round trips.

use runtime::cpu::{run, DataType, RunOptions};
use runtime::ir::{Flavor, Program};
use std::path::{Path, PathBuf};
use std::process::Command;
use synth::baseline::{self, BaselineOptions};
use synth::dsl::frontend::run_script;
use synth::dsl::trace::{replay, Overrides};
use synth::dsl::{Buffer, Collective, Connectivity, Kind, Options, Pins};
use synth::simulate::{simulate, SimOptions};
use synth::topology;

fn example(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/dsl")
        .join(name)
        .display()
        .to_string()
}

/// Runs an example under the recorder and compiles it for a flavour.
fn compile(name: &str, args: &[&str], flavor: Flavor) -> Program {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let traced = run_script(
        &example(name),
        &args,
        synth::dsl::frontend::DEFAULT_TIME_LIMIT,
    )
    .expect("the example runs");
    assert_eq!(traced.len(), 1);
    let overrides = Overrides {
        flavor: Some(flavor),
        ..Overrides::default()
    };
    let r = replay(&traced[0], &overrides).expect("the example replays");
    assert!(
        r.wants_xml && !r.checks.is_empty(),
        "{name} calls XML() and Check()"
    );
    for c in &r.checks {
        c.clone().expect("Check() passes");
    }
    r.program
        .compile()
        .expect("the example compiles and verifies")
}

/// A fresh scratch folder for one test, removed when the returned guard drops (also when
/// the test fails).
fn temp_dir(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("synth-dsl-{name}-"))
        .tempdir()
        .unwrap()
}

const EXAMPLES: [(&str, &[&str]); 6] = [
    ("allreduce_ring.py", &["8"]),
    ("allreduce_allpairs.py", &["8"]),
    ("allreduce_hierarchical.py", &["8"]),
    ("alltoall_two_step.py", &["8"]),
    ("allgather_dgx1.py", &[]),
    ("custom_pipeline.py", &["4"]),
];

#[test]
fn examples_verify_and_run_in_every_flavour_with_1_2_and_4_instances() {
    for (name, args) in EXAMPLES {
        for instances in ["1", "2", "4"] {
            let mut all: Vec<&str> = args.to_vec();
            all.push(instances);
            for flavor in Flavor::ALL {
                let p = compile(name, &all, flavor);
                // Only the legacy runtime loads `coll="custom"`: the others' XML is refused.
                if p.collective == runtime::ir::Collective::Custom && flavor != Flavor::Legacy {
                    assert!(
                        runtime::xml::write(&p, flavor).is_err(),
                        "{name} {flavor:?}"
                    );
                    continue;
                }
                let xml = runtime::xml::write(&p, flavor)
                    .unwrap_or_else(|e| panic!("{name} x{instances} {flavor:?}: {e}"));
                let back = runtime::xml::read_str(&xml).expect("our XML reads back");
                runtime::verify::verify(&back).expect("the XML verifies");
                for inplace in back.modes() {
                    let opts = RunOptions {
                        inplace,
                        iters: 1,
                        warmup: 0,
                        ..RunOptions::for_bytes(&back, 64 << 10, DataType::F32)
                    };
                    let report = run(&back, &opts).expect("the CPU executor runs it");
                    assert_eq!(report.wrong, 0, "{name} x{instances} {flavor:?}");
                }
            }
        }
    }
}

#[test]
fn allpairs_allreduce_beats_nccl_ring_on_dgx_a100_up_to_1mb() {
    let p = compile("allreduce_allpairs.py", &["8", "1"], Flavor::Nccl);
    let topo = topology::load("dgx-a100").unwrap();
    let base = BaselineOptions {
        channels: None,
        root: 0,
    };
    let ring = baseline::ring(p.collective, &topo, &base).unwrap();
    let opts = SimOptions::default();
    let mut size = 1u64 << 10;
    while size <= 1 << 20 {
        let ours = simulate(&p, &topo, size, &opts).unwrap();
        let theirs = simulate(&ring, &topo, size, &opts).unwrap();
        assert!(
            ours.busbw >= theirs.busbw,
            "{size} B: all-pairs {:.2} GB/s < NCCL ring {:.2} GB/s",
            ours.busbw,
            theirs.busbw
        );
        size *= 2;
    }
}

#[test]
fn ring_allreduce_fuses_into_rrs_rrcs_and_rcs() {
    let p = compile("allreduce_ring.py", &["8", "1"], Flavor::Nccl);
    let ops: std::collections::HashSet<_> = p.steps().map(|(_, s)| s.op.code()).collect();
    for op in ["rrs", "rrcs", "rcs"] {
        assert!(ops.contains(op), "{op} missing from {ops:?}");
    }
    // One threadblock per rank (receive from the left, send to the right).
    assert!(p.gpus.iter().all(|g| g.threadblocks.len() == 1));
}

/// The same ring allreduce written against the Rust builder gives the Python program's XML.
#[test]
fn rust_builder_matches_the_python_program() {
    let n = 8;
    let coll = Collective::new(Kind::AllReduce, n, n, true, 0).unwrap();
    let prog = synth::dsl::Program::new(
        "allreduce_ring",
        Connectivity::fully_connected(n),
        coll,
        Options::default(),
    )
    .unwrap();
    for i in 0..n {
        let mut partial = prog.chunk(i, Buffer::Input, i);
        for hop in 1..n {
            partial = prog
                .chunk((i + hop) % n, Buffer::Input, i)
                .reduce(&partial)
                .unwrap();
        }
        for hop in n..2 * n - 1 {
            partial = partial.copy((i + hop) % n, Buffer::Input, i).unwrap();
        }
    }
    prog.check().unwrap();
    let ours = prog.compile().unwrap();
    let python = compile("allreduce_ring.py", &["8", "1"], Flavor::Nccl);
    assert_eq!(
        runtime::xml::write(&ours, Flavor::Nccl).unwrap(),
        runtime::xml::write(&python, Flavor::Nccl).unwrap()
    );
}

#[test]
fn rust_builder_reports_the_callers_line() {
    let coll = Collective::new(Kind::AllGather, 4, 1, false, 0).unwrap();
    let prog = synth::dsl::Program::new(
        "bad",
        Connectivity::load("ring:4").unwrap(),
        coll,
        Options::default(),
    )
    .unwrap();
    let line = line!() + 1;
    let err = prog.chunk(0, Buffer::Input, 0).copy(2, Buffer::Output, 0);
    let err = err.unwrap_err().to_string();
    assert!(err.contains(&format!("dsl.rs:{line}:")), "{err}");
    assert!(err.contains("no link 0 -> 2"), "{err}");
    // Pinned copies and scratch buffers work through the builder too.
    let c = prog.chunk(0, Buffer::Input, 0);
    let pins = Pins {
        ch: Some(1),
        ..Pins::default()
    };
    let s = c.copy_pinned(1, Buffer::scratch("relay"), 0, pins).unwrap();
    assert_eq!(prog.scratch_len(1, "relay"), 1);
    assert!(s.copy(2, Buffer::Output, 0).is_ok());
}

fn synth_bin(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_synth"))
        .args(args)
        .output()
        .expect("synth runs")
}

fn times(p: &Program, topo: &str) -> Vec<f64> {
    let topo = topology::load(topo).unwrap();
    [1u64 << 10, 1 << 15, 1 << 20, 1 << 25, 1 << 30]
        .iter()
        .map(|&s| {
            simulate(p, &topo, s, &SimOptions::default())
                .unwrap()
                .time_us
        })
        .collect()
}

fn assert_close(a: &[f64], b: &[f64], tolerance: f64, what: &str) {
    for (x, y) in a.iter().zip(b) {
        assert!((x - y).abs() <= tolerance * y, "{what}: {a:?} vs {b:?}");
    }
}

/// `--emit-dsl`, then `synth compile`: the program verifies and simulates like the directly
/// lowered algorithm.
#[test]
fn synthesized_algorithms_round_trip_through_the_dsl() {
    let tmp = temp_dir("roundtrip");
    let dir = tmp.path();
    let d = dir.to_str().unwrap();
    let out = synth_bin(&[
        "--topo",
        "dgx1",
        "--coll",
        "allgather",
        "--emit-dsl",
        "--out",
        d,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut seen = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "py") {
            continue;
        }
        seen += 1;
        let stem = path.file_stem().unwrap().to_str().unwrap().to_string();
        let compiled = dir.join("compiled");
        let out = synth_bin(&[
            "compile",
            path.to_str().unwrap(),
            "--out",
            compiled.to_str().unwrap(),
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let direct = runtime::xml::read_file(dir.join(format!("{stem}.xml"))).unwrap();
        let back = runtime::xml::read_file(compiled.join(format!("{stem}.xml"))).unwrap();
        runtime::verify::verify(&back).unwrap();
        assert_close(&times(&back, "dgx1"), &times(&direct, "dgx1"), 0.01, &stem);
    }
    assert!(seen >= 2, "the Pareto frontier has two algorithms");
}

/// The hand-written DGX-1 allgather is the least-steps SMT optimum (2 steps, 2 rounds).
#[test]
fn dgx1_allgather_example_equals_the_smt_optimum() {
    let tmp = temp_dir("smt");
    let dir = tmp.path();
    let d = dir.to_str().unwrap();
    let out = synth_bin(&[
        "--topo",
        "dgx1",
        "--coll",
        "allgather",
        "--least-steps",
        "--out",
        d,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let smt = runtime::xml::read_file(dir.join("allgather-dgx1-s2-r2-c1.xml")).unwrap();
    let ours = compile("allgather_dgx1.py", &["1"], Flavor::Nccl);
    assert_close(
        &times(&ours, "dgx1"),
        &times(&smt, "dgx1"),
        0.015,
        "dgx1 allgather",
    );
}

/// Every program under `tests/dsl_bad/` fails with one line of at most 300 characters naming
/// its file and the line marked `# error here`, and the reason given in its `# expect:`
/// header; none panics.
#[test]
fn bad_programs_give_one_line_errors_with_file_and_line() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/dsl_bad");
    let tmp = temp_dir("bad");
    let out_dir = tmp.path();
    let mut count = 0;
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        let expect = text
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("# expect: "))
            .unwrap_or_else(|| panic!("{}: no `# expect:` header", path.display()));
        let line = 1 + text
            .lines()
            .position(|l| l.ends_with("# error here"))
            .unwrap_or_else(|| panic!("{}: no `# error here` marker", path.display()));
        let out = synth_bin(&[
            "compile",
            path.to_str().unwrap(),
            "--out",
            out_dir.to_str().unwrap(),
        ]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let name = path.file_name().unwrap().to_str().unwrap();
        assert_eq!(out.status.code(), Some(1), "{name}: {stderr}");
        assert!(!stderr.contains("panicked"), "{name}: {stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{name}: {stderr}");
        assert!(
            stderr.trim_end().chars().count() <= 300,
            "{name}: longer than 300 characters: {stderr}"
        );
        assert!(
            stderr.contains(&format!("{name}:{line}: ")),
            "{name}:{line}: {stderr}"
        );
        assert!(
            stderr.contains(expect),
            "{name}: `{expect}` not in {stderr}"
        );
        count += 1;
    }
    assert!(count >= 20, "only {count} bad programs");
}

/// DSL issue, item 3: a custom collective (a `Collective` subclass with `init_buffers()` and
/// `check()`) compiles to the IR's custom collective with the conditions its buffers imply,
/// and those conditions catch a wrong program.
#[test]
fn custom_collective_compiles_with_its_conditions() {
    let p = compile("custom_pipeline.py", &["4", "1"], Flavor::Nccl);
    assert_eq!(p.collective, runtime::ir::Collective::Custom);
    let custom = p
        .custom
        .clone()
        .expect("the conditions travel with the program");
    assert_eq!((custom.input_chunks, custom.output_chunks), (2, 3));
    // rank 3's extra output slot holds the sum of every rank's slot 0
    let total = custom
        .post
        .iter()
        .find(|r| r.rank == 3 && r.chunk == 2)
        .expect("the sum is required");
    assert_eq!(total.sum.len(), 4);
    // The same program against a postcondition it does not meet fails verification.
    let mut wrong = p.clone();
    let c = wrong.custom.as_mut().unwrap();
    c.post
        .iter_mut()
        .find(|r| r.rank == 1 && r.chunk == 0)
        .unwrap()
        .sum = vec![runtime::semantics::Contribution { rank: 2, chunk: 0 }];
    assert!(runtime::verify::verify(&wrong).is_err());
}

/// Issue 31, item 5: the legacy runtime (the only one that loads `coll="custom"`) requires a
/// custom collective's non-zero `i_chunks` and `o_chunks` to equal nchunksperloop; the
/// reader refuses a file that declares the conditions' own counts (2 input chunks of 3).
#[test]
fn custom_collective_xml_passes_the_legacy_chunk_consistency() {
    let p = compile("custom_pipeline.py", &["4", "1"], Flavor::Legacy);
    let xml = runtime::xml::write(&p, Flavor::Legacy).unwrap();
    let gpus: Vec<&str> = xml.lines().filter(|l| l.contains("<gpu ")).collect();
    assert_eq!(
        gpus[0].trim(),
        "<gpu id=\"0\" i_chunks=\"3\" o_chunks=\"0\" s_chunks=\"1\">"
    );
    assert!(gpus[1..]
        .iter()
        .all(|l| l.contains("i_chunks=\"3\" o_chunks=\"3\"")));
    let read = runtime::xml::read_str(&xml).expect("the legacy rules hold");
    runtime::verify::verify(&read).expect("it verifies");
    assert_eq!(
        read.gpus[1].input_chunks, 2,
        "the conditions' extents in memory"
    );
    let before = xml.replacen(
        "i_chunks=\"3\" o_chunks=\"0\"",
        "i_chunks=\"2\" o_chunks=\"0\"",
        1,
    );
    // The legacy runtime, the only one that loads coll="custom", refuses it.
    let e = runtime::xml::read_str(&before).unwrap_err();
    assert!(
        e.message.contains(
            "no MSCCL runtime loads this file: nccl (line 2): MSCCL: unsupported collective: custom"
        ) && e.message.contains(
            "legacy (line 3): Inconsistency between i_chunks/o_chunks (2/0) and nchunksperloop (3)"
        ),
        "{e}"
    );
    assert!(e.to_string().len() <= 300, "{e}");
}

/// DSL issue: `dependence_nop` hoists the dependencies of a chain of local reduces onto its
/// first step (nops before the chain), so the runtime fuses the chain into one transmission;
/// without it each waiting `re` breaks the fusion. Both programs verify and run.
#[test]
fn dependence_nop_keeps_local_reduce_chains_fused() {
    let build = |dependence_nop: bool| {
        let n = 4;
        let coll = Collective::new(Kind::AllReduce, n, 1, false, 0).unwrap();
        let prog = synth::dsl::Program::new(
            "gather_reduce",
            Connectivity::fully_connected(n),
            coll,
            Options {
                dependence_nop,
                instr_fusion: false,
                ..Options::default()
            },
        )
        .unwrap();
        // Rank 0 receives every other rank's chunk into scratch (one receive threadblock
        // each), then sums them locally into its output: a chain of `re` steps, each
        // waiting for another threadblock.
        for r in 1..n {
            prog.chunk(r, Buffer::Input, 0)
                .copy(0, Buffer::scratch("in"), r - 1)
                .unwrap();
        }
        let total = prog
            .chunk(0, Buffer::Input, 0)
            .copy(0, Buffer::Output, 0)
            .unwrap();
        for r in 1..n {
            total
                .reduce(&prog.chunk(0, Buffer::scratch("in"), r - 1))
                .unwrap();
        }
        for r in 1..n {
            total.copy(r, Buffer::Output, 0).unwrap();
        }
        prog.check().unwrap();
        prog.compile().unwrap()
    };
    let (plain, hoisted) = (build(false), build(true));
    let reduces = |p: &Program| -> Vec<usize> {
        p.gpus[0]
            .threadblocks
            .iter()
            .flat_map(|tb| &tb.steps)
            .filter(|s| s.op == runtime::ir::Op::Reduce)
            .map(|s| s.deps.len())
            .collect()
    };
    assert_eq!(reduces(&hoisted).len(), 3);
    assert_eq!(
        reduces(&hoisted).iter().filter(|&&d| d > 0).count(),
        1,
        "only the chain's first re waits: {:?}",
        reduces(&hoisted)
    );
    assert!(
        reduces(&plain).iter().filter(|&&d| d > 0).count() > 1,
        "{:?}",
        reduces(&plain)
    );
    let t = |p: &Program| runtime::xml::transmissions(p)[0];
    assert!(t(&hoisted) < t(&plain), "{} vs {}", t(&hoisted), t(&plain));
    for p in [&plain, &hoisted] {
        let xml = runtime::xml::write(p, Flavor::Nccl).unwrap();
        let back = runtime::xml::read_str(&xml).unwrap();
        runtime::verify::verify(&back).unwrap();
        let report = run(&back, &RunOptions::for_bytes(&back, 1 << 12, DataType::F32)).unwrap();
        assert_eq!(report.wrong, 0);
    }
}
