//! `--method greedy` through the binary: checked, lowered algorithms; the same seed gives
//! the same files; bad combinations fail with one line.

use std::path::Path;
use std::process::{Command, Output};

fn synth(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_synth"))
        .args(args)
        .output()
        .expect("synth runs")
}

/// A fresh scratch folder for one test, removed when the returned guard drops (also when
/// the test fails).
fn temp_dir(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("synth-greedy-{name}-"))
        .tempdir()
        .unwrap()
}

/// The algorithm JSON files in `dir`, by name, with their contents.
fn algorithms(dir: &Path) -> Vec<(String, String)> {
    let mut files: Vec<(String, String)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read_to_string(&p).unwrap(),
            )
        })
        .collect();
    files.sort();
    files
}

fn run_json(args: &[&str]) -> serde_json::Value {
    let out = synth(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON on stdout")
}

#[test]
fn alltoall_on_a_torus_same_seed_same_files() {
    let (tmp_a, tmp_b) = (temp_dir("seed-a"), temp_dir("seed-b"));
    let (a, b) = (tmp_a.path(), tmp_b.path());
    let args = |dir: &Path| -> Vec<String> {
        [
            "--topo",
            "torus-2d:4x4",
            "--coll",
            "alltoall",
            "--method",
            "greedy",
            "--seed",
            "3",
            "--max-chunks",
            "2",
            "--json",
            "--out",
            dir.to_str().unwrap(),
        ]
        .map(String::from)
        .to_vec()
    };
    let first = args(a);
    let doc = run_json(&first.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(doc["method"], "greedy");
    assert_eq!(doc["complete"], true);
    let algos = doc["algorithms"].as_array().unwrap();
    assert!(!algos.is_empty());
    // Lowered and verified in both buffer modes.
    assert!(algos
        .iter()
        .all(|x| x["xml"].as_array().unwrap().len() == 2));
    let second = args(b);
    run_json(&second.iter().map(String::as_str).collect::<Vec<_>>());
    let (x, y) = (algorithms(a), algorithms(b));
    assert!(!x.is_empty());
    assert_eq!(x, y, "the same seed must give the same algorithms");
}

#[test]
fn every_collective_through_the_binary() {
    for coll in [
        "allgather",
        "reducescatter",
        "allreduce",
        "broadcast",
        "reduce",
        "gather",
        "scatter",
    ] {
        let tmp = temp_dir(coll);
        let dir = tmp.path();
        let doc = run_json(&[
            "--topo",
            "ring:4",
            "--coll",
            coll,
            "--method",
            "greedy",
            "--max-chunks",
            "2",
            "--json",
            "--out",
            dir.to_str().unwrap(),
        ]);
        assert_eq!(doc["method"], "greedy", "{coll}");
        assert!(!doc["algorithms"].as_array().unwrap().is_empty(), "{coll}");
    }
}

#[test]
fn bad_combinations_fail_with_one_line() {
    for (extra, needle) in [
        (
            vec!["--sketch", "sketches/none.toml"],
            "--sketch applies to the MILP",
        ),
        (
            vec!["--extra-memory", "1"],
            "--extra-memory needs --method smt or milp",
        ),
        (vec!["--seed", "x"], "--seed"),
        (
            vec!["--steps", "1", "--rounds", "1"],
            "the greedy engine found no algorithm within 1 steps",
        ),
    ] {
        let mut args = vec![
            "--topo",
            "ring:4",
            "--coll",
            "allgather",
            "--method",
            "greedy",
        ];
        args.extend(extra);
        let out = synth(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert!(
            stderr.contains(needle),
            "{args:?}: `{needle}` not in {stderr}"
        );
    }
}

#[test]
fn in_place_alltoall_with_more_than_64_local_copies_lowers() {
    use std::time::{Duration, Instant};
    use synth::collective::{Collective, Kind};
    use synth::engine::Limits;
    use synth::lower::{lower_to_xml, LowerOptions};
    use synth::progress::Progress;
    use synth::synthesize::{synthesize_with, Method, Request, Search};
    let topology = synth::topology::load("torus-2d:4x4").unwrap();
    let progress = Progress::hidden();
    let request = Request {
        topology: &topology,
        collective: Collective::new(Kind::AllToAll, 16, 0, 1).unwrap(),
        // 15 peers × 8 pieces = 120 staged copies per rank in place.
        search: Search::LeastSteps {
            chunks: 8,
            rounds: None,
        },
        limits: Limits {
            max_steps: 16,
            max_chunks: 8,
            max_chunks_given: false,
            deadline: Instant::now() + Duration::from_secs(3600),
            extra_memory: None,
            work_limit: None,
        },
        progress: &progress,
    };
    let s = synthesize_with(&request, Method::Greedy { seed: 0 }, None).unwrap();
    let options = LowerOptions {
        inplace: true,
        ..LowerOptions::default()
    };
    let (program, _) = lower_to_xml(&s.algorithms[0], &options).unwrap();
    let local = program.gpus[0]
        .threadblocks
        .iter()
        .filter(|t| t.send.is_none() && t.recv.is_none())
        .count();
    assert!(local >= 2, "the staged copies span local threadblocks");
}

/// `auto` past one box runs tree packing and the greedy engine, keeps both engines'
/// algorithms and simulates them against NCCL at 1 KB, 64 KB, 1 MB, 16 MB and 1 GB: on a 2-D torus
/// the greedy schedule (diameter-deep) wins the small sizes and never loses to NCCL's ring,
/// and the best at 1 GB is the tree packing's.
#[test]
fn auto_runs_trees_and_greedy_and_compares_every_size_with_nccl() {
    let tmp = temp_dir("auto-portfolio");
    let dir = tmp.path();
    let doc = run_json(&[
        "--topo",
        "torus-2d:4x4",
        "--coll",
        "allgather",
        "--json",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(doc["method"], "trees");
    assert_eq!(doc["engines"], serde_json::json!(["trees", "greedy"]));
    let files: Vec<String> = doc["algorithms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["file"].as_str().unwrap().to_string())
        .collect();
    assert!(files.iter().any(|f| f.contains("-greedy")), "{files:?}");
    assert!(files.iter().any(|f| f.contains("-trees-")), "{files:?}");
    let sizes = doc["at_1gb"]["sizes"].as_array().unwrap();
    let bytes: Vec<u64> = sizes.iter().map(|s| s["bytes"].as_u64().unwrap()).collect();
    assert_eq!(bytes, vec![1 << 10, 64 << 10, 1 << 20, 16 << 20, 1 << 30]);
    for s in sizes {
        let (best, ring) = (s["busbw"].as_f64().unwrap(), s["ring"].as_f64().unwrap());
        assert!(best >= ring, "loses to NCCL ring: {s}");
    }
    // At 1 KB latency rules: the winner takes the diameter's 4 steps (greedy's or a tree
    // schedule's, whichever simulates faster).
    assert!(
        sizes[0]["algorithm"].as_str().unwrap().contains("-s4-"),
        "{}",
        sizes[0]
    );
    assert!(
        !sizes[4]["algorithm"].as_str().unwrap().contains("-greedy"),
        "{}",
        sizes[4]
    );
    assert!(
        doc["at_1gb"]["busbw"].as_f64().unwrap() >= 0.99 * doc["at_1gb"]["bound"].as_f64().unwrap()
    );
}

/// A time limit that has passed before tree scheduling ends leaves out the list-scheduled
/// and structured schedules and marks the search partial; the depth schedule of the packing
/// found is still rated and written.
#[test]
fn the_time_limit_stops_tree_scheduling() {
    let tmp = temp_dir("tree-deadline");
    let dir = tmp.path();
    let doc = run_json(&[
        "--topo",
        "torus-2d:8x8",
        "--coll",
        "allgather",
        "--time-limit",
        "0.000001",
        "--json",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(doc["complete"], false);
    let files: Vec<&str> = doc["algorithms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["file"].as_str().unwrap())
        .collect();
    assert!(files.iter().any(|f| f.contains("-trees-")), "{files:?}");
    assert!(
        !files
            .iter()
            .any(|f| f.contains("-listed-") || f.contains("-bucket-")),
        "{files:?}"
    );
}
