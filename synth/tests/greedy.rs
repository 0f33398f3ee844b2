//! `--method greedy` through the binary: checked, lowered algorithms; the same seed gives
//! the same files; bad combinations fail with one line.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn synth(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_synth"))
        .args(args)
        .output()
        .expect("synth runs")
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("synth-greedy-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
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
    let (a, b) = (temp_dir("seed-a"), temp_dir("seed-b"));
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
    let first = args(&a);
    let doc = run_json(&first.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(doc["method"], "greedy");
    assert_eq!(doc["complete"], true);
    let algos = doc["algorithms"].as_array().unwrap();
    assert!(!algos.is_empty());
    // Lowered and verified in both buffer modes.
    assert!(algos
        .iter()
        .all(|x| x["xml"].as_array().unwrap().len() == 2));
    let second = args(&b);
    run_json(&second.iter().map(String::as_str).collect::<Vec<_>>());
    let (x, y) = (algorithms(&a), algorithms(&b));
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
        let dir = temp_dir(coll);
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
