//! Issue 29 item 4: direct schedules (SMT and greedy) in which one address's reduction ends
//! on many ranks: allreduce and custom collectives, checked, lowered in every flavour,
//! verified, run on the CPU executor, simulated within the bound, label-invariant.

use runtime::cpu::{run, DataType, RunOptions};
use runtime::ir::Flavor;
use std::time::{Duration, Instant};
use synth::algorithm::Algorithm;
use synth::collective::{Collective, Kind};
use synth::cutbound::CutBound;
use synth::direct::{search, DirectEngine};
use synth::engine::{Limits, Search};
use synth::lower::{lower, LowerOptions};
use synth::origin::Family;
use synth::progress::Progress;
use synth::simulate::{simulate, SimOptions};
use synth::synthesize::{resplit, synthesize_with, Method, Request};
use synth::topology::{self, Topology};

fn limits() -> Limits {
    // Far beyond what these small instances need: the outcome never depends on it.
    Limits::new(12, 4, Instant::now() + Duration::from_secs(1800))
}

/// The direct schedules of `engine` for `collective` (C = 1) on `topology`.
fn direct(
    engine: DirectEngine,
    topology: &Topology,
    collective: &Collective,
    how: Search,
) -> Vec<Algorithm> {
    let make = |c: usize| resplit(collective, c);
    let bounds = synth::bounds::reduction_bounds(topology, collective).unwrap();
    let found = search(
        engine,
        topology,
        &make,
        &bounds,
        bounds.rounds_per_chunk,
        how,
        &limits(),
        &Progress::hidden(),
    )
    .unwrap_or_else(|e| panic!("{}: {e:#}", topology.name));
    for a in &found.algorithms {
        synth::check::check(a, topology).unwrap_or_else(|e| panic!("{}: {e}", a.name));
        assert!(a.num_steps() >= bounds.steps, "{}", a.name);
        assert!(
            a.rounds_per_chunk() >= bounds.rounds_per_chunk,
            "{}",
            a.name
        );
    }
    found.algorithms
}

const LEAST_STEPS: Search = Search::LeastSteps {
    chunks: 1,
    rounds: None,
};

/// Lowers in every flavour, in and out of place, one and two instances; verifies; writes
/// and reads back the XML where the flavour loads the collective (custom: legacy only);
/// runs on the CPU executor with no wrong element.
fn exercise(algorithm: &Algorithm) {
    let custom = algorithm.collective.kind == Kind::Custom;
    for flavor in Flavor::ALL {
        for inplace in [false, true] {
            for instances in [1, 2] {
                let what = format!(
                    "{} {flavor:?} inplace={inplace} x{instances}",
                    algorithm.name
                );
                let options = LowerOptions {
                    flavor,
                    inplace,
                    instances,
                    ..LowerOptions::default()
                };
                let program =
                    lower(algorithm, &options).unwrap_or_else(|e| panic!("{what}: {e:#}"));
                runtime::verify::verify(&program).unwrap_or_else(|e| panic!("{what}: {e}"));
                let program = if custom && flavor != Flavor::Legacy {
                    program
                } else {
                    let xml = runtime::xml::write(&program, flavor)
                        .unwrap_or_else(|e| panic!("{what}: {e}"));
                    let back =
                        runtime::xml::read_str(&xml).unwrap_or_else(|e| panic!("{what}: {e}"));
                    runtime::verify::verify(&back).unwrap_or_else(|e| panic!("{what}: {e}"));
                    back
                };
                for bytes in [1u64 << 10, 1 << 16] {
                    let mut opts = RunOptions::for_bytes(&program, bytes, DataType::F32);
                    opts.inplace = inplace;
                    let report = run(&program, &opts).unwrap_or_else(|e| panic!("{what}: {e:#}"));
                    assert_eq!(report.wrong, 0, "{what} at {bytes} B");
                }
            }
        }
    }
}

/// Simulated busbw (GB/s) of `algorithm` (out of place, NCCL flavour) at 1 KB, 1 MB, 1 GB.
fn busbw(algorithm: &Algorithm, topology: &Topology) -> [f64; 3] {
    let (program, _) = synth::lower::lower_to_xml(algorithm, &LowerOptions::default()).unwrap();
    let sim = SimOptions::default();
    [1u64 << 10, 1 << 20, 1 << 30].map(|b| simulate(&program, topology, b, &sim).unwrap().busbw)
}

/// ring:4, line:4 and dgx1 allreduce by the direct SMT encoding (least steps, then least
/// rounds) and the direct greedy: checked, run everywhere with no wrong element, and their
/// simulated busbw at 1 KB, 1 MB and 1 GB within `synth bounds`' allreduce bound.
#[test]
fn direct_allreduce_verifies_runs_and_stays_within_the_bound() {
    for (spec, smt_steps) in [("ring:4", 2), ("line:4", 3), ("dgx1", 2)] {
        let topology = topology::load(spec).unwrap();
        let collective = Collective::new(Kind::AllReduce, topology.ranks, 0, 1).unwrap();
        let smt = direct(DirectEngine::Smt, &topology, &collective, LEAST_STEPS);
        assert_eq!(smt.len(), 1, "{spec}");
        // The fewest steps are the diameter: a reduction may end on every rank at once.
        assert_eq!(smt[0].num_steps(), smt_steps, "{spec}: {}", smt[0].name);
        assert_eq!(smt[0].origin.family, Family::DirectSmt);
        let greedy = direct(DirectEngine::Greedy, &topology, &collective, Search::Pareto);
        assert!(!greedy.is_empty(), "{spec}");
        let bound = CutBound::new(runtime::ir::Collective::AllReduce, &topology, 0);
        for a in smt.iter().chain(&greedy) {
            assert!(a.name.len() <= synth::origin::MAX_NAME, "{}", a.name);
            exercise(a);
            let rates = busbw(a, &topology);
            for (rate, bytes) in rates.iter().zip([1u64 << 10, 1 << 20, 1 << 30]) {
                let most = bound.busbw_at(bytes);
                assert!(
                    *rate > 0.0 && *rate <= most * (1.0 + 1e-9),
                    "{}: {rate} GB/s at {bytes} B, bound {most}",
                    a.name
                );
            }
        }
    }
}

/// The main synthesis offers the direct schedules for allreduce: `--method smt` the SMT
/// encoding's, `--method greedy` and `auto` the greedy's (each checked; `auto` leaves the
/// SMT encoding out, since its frontier runs to the time limit); `--method trees` neither.
#[test]
fn direct_schedules_are_candidates_of_the_allreduce_search() {
    let topology = topology::load("ring:4").unwrap();
    let families = |method: Method| -> Vec<Family> {
        let progress = Progress::hidden();
        let request = Request {
            topology: &topology,
            collective: Collective::new(Kind::AllReduce, 4, 0, 1).unwrap(),
            search: Search::Pareto,
            limits: limits(),
            progress: &progress,
        };
        let s = synthesize_with(&request, method, None).unwrap();
        for a in &s.algorithms {
            synth::check::check(a, &topology).unwrap();
        }
        s.algorithms
            .iter()
            .map(|a| a.origin.family.clone())
            .collect()
    };
    let smt = families(Method::Smt);
    assert!(smt.contains(&Family::DirectSmt), "{smt:?}");
    assert!(!smt.contains(&Family::DirectGreedy), "{smt:?}");
    let greedy = families(Method::Greedy { seed: 0 });
    assert!(greedy.contains(&Family::DirectGreedy), "{greedy:?}");
    let auto = families(Method::Auto);
    assert!(auto.contains(&Family::DirectGreedy), "{auto:?}");
    assert!(!auto.contains(&Family::DirectSmt), "{auto:?}");
    let trees = families(Method::Trees);
    assert!(!trees
        .iter()
        .any(|f| matches!(f, Family::DirectSmt | Family::DirectGreedy)));
}

/// Custom collectives whose addresses end on several ranks, solved directly: each half's
/// allreduce of examples/custom/halves.toml on line:4 in one step (both ends reduce what
/// the other sends), reduce-onto-four on dgx1, and a per-row allreduce on a 3x3 torus.
#[test]
fn custom_reductions_onto_several_ranks_are_solved_directly() {
    let root = env!("CARGO_MANIFEST_DIR");
    let halves =
        Collective::from_file(&format!("{root}/../examples/custom/halves.toml"), 1).unwrap();
    let line = topology::load("line:4").unwrap();
    let smt = direct(DirectEngine::Smt, &line, &halves, LEAST_STEPS);
    assert_eq!(smt[0].num_steps(), 1, "{}", smt[0].name);
    assert!(smt[0].steps[0].reduce);
    exercise(&smt[0]);
    for a in direct(DirectEngine::Greedy, &line, &halves, Search::Pareto) {
        exercise(&a);
    }
    let four = Collective::from_file(
        &format!("{root}/../examples/custom/reduce-onto-four.toml"),
        1,
    )
    .unwrap();
    let dgx1 = topology::load("dgx1").unwrap();
    for a in direct(DirectEngine::Greedy, &dgx1, &four, Search::Pareto) {
        assert_eq!(a.origin.family, Family::DirectGreedy);
        exercise(&a);
    }
    let mut text = String::from("ranks = 9\n");
    for row in 0..3 {
        for r in 0..3 {
            let ranks: Vec<usize> = (0..3).map(|k| row * 3 + k).collect();
            text += &format!(
                "[[chunk]]\npre = [{}]\npost = {ranks:?}\naddress = {row}\n",
                row * 3 + r
            );
        }
    }
    let rows = Collective::from_text("rows.toml", &text, 1).unwrap();
    assert!(rows.ends_on_many());
    let torus = topology::load("torus-2d:3x3").unwrap();
    for a in direct(DirectEngine::Greedy, &torus, &rows, Search::Pareto) {
        exercise(&a);
    }
}

/// A renumbered dgx1 gets the same direct greedy allreduce renumbered (the search runs in
/// the canonical numbering): the same names and the same simulated busbw.
#[test]
fn a_renumbered_twin_gets_the_same_direct_greedy_figures() {
    use synth::topology::toml_format::random_permutation;
    let plain = topology::load("dgx1").unwrap();
    let twin = plain.relabeled(&random_permutation(plain.ranks, 7));
    let direct_of = |topology: &Topology| -> Vec<Algorithm> {
        let progress = Progress::hidden();
        let request = Request {
            topology,
            collective: Collective::new(Kind::AllReduce, topology.ranks, 0, 1).unwrap(),
            search: Search::Pareto,
            limits: limits(),
            progress: &progress,
        };
        let s = synthesize_with(&request, Method::Greedy { seed: 0 }, None).unwrap();
        (s.algorithms.into_iter())
            .filter(|a| a.origin.family == Family::DirectGreedy)
            .collect()
    };
    let (a, b) = (direct_of(&plain), direct_of(&twin));
    assert!(!a.is_empty());
    let names = |x: &[Algorithm]| {
        x.iter()
            .map(|a| a.name.replace(&twin.name, "T").replace(&plain.name, "T"))
            .collect::<Vec<_>>()
    };
    assert_eq!(names(&a), names(&b));
    for (x, y) in a.iter().zip(&b) {
        let (p, q) = (busbw(x, &plain), busbw(y, &twin));
        for (u, v) in p.iter().zip(&q) {
            assert!((u - v).abs() <= 1e-9 * u, "{}: {p:?} against {q:?}", x.name);
        }
    }
}

/// The main command offers the direct SMT schedule of a custom collective (`--method smt`,
/// `--json`), writes its XML, and `synth run` runs it with no wrong element.
#[test]
fn the_main_command_writes_and_runs_a_direct_schedule() {
    let root = env!("CARGO_MANIFEST_DIR");
    let tmp = tempfile::Builder::new()
        .prefix("synth-direct-")
        .tempdir()
        .unwrap();
    let out = tmp.path();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_synth"))
        .args(["--topo", "line:4", "--coll"])
        .arg(format!("{root}/../examples/custom/halves.toml"))
        .args(["--method", "smt", "--json", "--out"])
        .arg(out)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let text = json.to_string();
    assert!(text.contains("direct-smt-s1-r1-c1"), "{text}");
    let xml = std::fs::read_dir(out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            name.contains("direct-smt") && name.ends_with(".xml") && !name.contains("inplace")
        })
        .expect("the direct schedule's XML");
    let run = std::process::Command::new(env!("CARGO_BIN_EXE_synth"))
        .arg("run")
        .arg(&xml)
        .args(["--size", "64K", "--json"])
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
    let rows = report["rows"].as_array().expect("rows");
    assert!(!rows.is_empty(), "{report}");
    assert!(rows.iter().all(|r| r["wrong"] == 0), "{report}");
}
