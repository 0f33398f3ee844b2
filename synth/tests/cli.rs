//! The `synth` binary: output formats, files, and one-line errors with a non-zero exit.

use std::path::Path;
use std::process::{Command, Output};

fn synth(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_synth"))
        .args(args)
        .output()
        .expect("synth runs")
}

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("synth-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Asserts a failure with exit code 1, no panic, and exactly one stderr line containing `needle`.
fn fails_with(args: &[&str], needle: &str) {
    let out = synth(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
    assert!(!stderr.contains("panicked"), "{args:?} panicked: {stderr}");
    assert_eq!(
        stderr.trim_end().lines().count(),
        1,
        "{args:?}: not one line: {stderr}"
    );
    assert!(
        stderr.contains(needle),
        "{args:?}: `{needle}` not in: {stderr}"
    );
}

#[test]
fn main_command_prints_table_and_writes_json() {
    let dir = temp_dir("table");
    let out = synth(&[
        "--topo",
        "dgx1",
        "--coll",
        "allgather",
        "--out",
        dir.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("lower bounds: 2 steps, 7/6 rounds per chunk"),
        "{stdout}"
    );
    assert!(stdout.contains("3/2") && stdout.contains("7/6"), "{stdout}");
    let files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(
        files
            .iter()
            .filter(|f| f.extension().is_some_and(|e| e == "json"))
            .count()
            >= 2,
        "{files:?}"
    );
}

#[test]
fn json_output_follows_the_convention() {
    let dir = temp_dir("json");
    let out = synth(&[
        "--topo",
        "dgx1",
        "--coll",
        "allgather",
        "--json",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(out.status.success());
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    assert_eq!(doc["topology"], "dgx1");
    assert_eq!(doc["collective"], "allgather");
    assert_eq!(doc["bounds"]["steps"], 2);
    assert_eq!(doc["bounds"]["rounds_per_chunk"], "7/6");
    assert_eq!(doc["complete"], true);
    assert!(doc["seconds"].as_f64().is_some());
    let algorithms = doc["algorithms"].as_array().unwrap();
    assert_eq!(algorithms.len(), 2);
    assert_eq!(
        (
            algorithms[0]["steps"].as_u64(),
            algorithms[0]["rounds"].as_u64(),
            algorithms[0]["chunks"].as_u64()
        ),
        (Some(2), Some(3), Some(2))
    );
    let file = algorithms[1]["file"].as_str().unwrap();
    let algo: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
    assert_eq!(algo["steps"].as_array().unwrap().len(), 3);
}

#[test]
fn topo_show_reports_dgx_a100_bandwidth() {
    let out = synth(&["topo", "show", "dgx-a100", "--json"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("300"), "{text}");
}

#[test]
fn unknown_topology() {
    fails_with(&["--topo", "dgx9", "--coll", "allgather"], "dgx9");
}

#[test]
fn unknown_collective() {
    fails_with(
        &["--topo", "dgx1", "--coll", "allscatter"],
        "unknown collective `allscatter`",
    );
}

#[test]
fn malformed_toml_names_file_and_line() {
    let dir = temp_dir("badtoml");
    let path = dir.join("bad.toml");
    std::fs::write(
        &path,
        "name = \"x\"\nranks = 4\n[[link]]\nsrc = 0\ndst = \n",
    )
    .unwrap();
    fails_with(
        &["--topo", path.to_str().unwrap(), "--coll", "allgather"],
        "bad.toml:5",
    );
}

#[test]
fn root_out_of_range() {
    fails_with(
        &["--topo", "dgx1", "--coll", "broadcast", "--root", "8"],
        "--root 8 is out of range",
    );
}

#[test]
fn disconnected_topology_names_chunk_and_rank() {
    let dir = temp_dir("disconnected");
    let path = dir.join("split.toml");
    std::fs::write(&path, "name = \"split\"\nranks = 4\nbandwidth = 25\n[[link]]\nsrc = 0\ndst = 1\n[[link]]\nsrc = 2\ndst = 3\n").unwrap();
    fails_with(
        &["--topo", path.to_str().unwrap(), "--coll", "allgather"],
        "cannot reach rank",
    );
}

#[test]
fn unsat_instance() {
    fails_with(
        &[
            "--topo",
            "dgx1",
            "--coll",
            "allgather",
            "--steps",
            "1",
            "--rounds",
            "1",
            "--chunks",
            "1",
        ],
        "UNSAT",
    );
}

#[test]
fn time_limit_hit() {
    let dir = temp_dir("timeout");
    fails_with(
        &[
            "--topo",
            "dgx1",
            "--coll",
            "alltoall",
            "--steps",
            "8",
            "--rounds",
            "8",
            "--chunks",
            "3",
            "--time-limit",
            "0.001",
            "--out",
            dir.to_str().unwrap(),
        ],
        "time limit of 0.001 s reached while",
    );
}

/// Runs `args` with an already-expired time limit (1 ns) and asserts a prompt one-line
/// failure naming the phase the deadline stopped. The work behind each case takes from
/// seconds to many minutes unbounded; 60 s is far above what the deadline checks need.
fn stops_at_once(args: &[&str], phase: &str) {
    let dir = temp_dir("expired");
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["--time-limit", "1e-9", "--out", dir.to_str().unwrap()]);
    let started = std::time::Instant::now();
    fails_with(
        &all,
        &format!("time limit of 0.000000001 s reached while {phase}"),
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(60),
        "{args:?} took {:?}",
        started.elapsed()
    );
}

#[test]
fn the_time_limit_stops_every_phase() {
    let dir = temp_dir("sketch64");
    let sketch = dir.join("c64.toml");
    std::fs::write(&sketch, "chunks = [64]\n").unwrap();
    let sketch = sketch.to_str().unwrap();
    // Building the MILP model of 64 pieces (took minutes with chunks = [100000]).
    stops_at_once(
        &["--topo", "dgx1", "--coll", "alltoall", "--sketch", sketch],
        "building the MILP model for C=64 pieces",
    );
    // One SMT instance of 64 pieces: building its formula took 20 s past a 2 s limit.
    stops_at_once(
        &[
            "--topo", "dgx1", "--coll", "alltoall", "--steps", "8", "--rounds", "8", "--chunks",
            "64",
        ],
        "deciding the instance (steps=8, rounds=8, chunks=64)",
    );
    // The SMT search of a multi-node fabric (the issue's case: still running after 15 min).
    stops_at_once(
        &[
            "--topo",
            "dgx-a100x2",
            "--coll",
            "allgather",
            "--method",
            "smt",
        ],
        "searching (smt), before any algorithm was found",
    );
}

#[test]
fn huge_sketch_chunk_counts_are_refused() {
    let dir = temp_dir("sketch100000");
    let sketch = dir.join("big.toml");
    std::fs::write(&sketch, "chunks = [100000]\n").unwrap();
    fails_with(
        &[
            "--topo",
            "dgx1",
            "--coll",
            "allgather",
            "--sketch",
            sketch.to_str().unwrap(),
            "--out",
            dir.to_str().unwrap(),
        ],
        "big.toml: chunks: 100000 is not between 1 and 64",
    );
}

#[test]
fn work_limit_is_reported_and_checked() {
    fails_with(
        &["--topo", "dgx1", "--coll", "allgather", "--work-limit", "0"],
        "'0' for '--work-limit <WORK_LIMIT>'",
    );
    let dir = temp_dir("work");
    let sketch = dir.join("s.toml");
    std::fs::write(&sketch, "chunks = [1]\nsteps = 2\nsizes = [\"1KB\"]\n").unwrap();
    let out = synth(&[
        "--topo",
        "ring:4",
        "--coll",
        "allgather",
        "--sketch",
        sketch.to_str().unwrap(),
        "--work-limit",
        "100",
        "--json",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["work_limit"], 100);
    assert_eq!(doc["method"], "milp");
    assert!(doc["cuts"].as_array().is_some());
}

#[test]
fn bounds_reports_steps_rounds_and_cut_bandwidth() {
    let out = synth(&["bounds", "--topo", "dgx1", "--coll", "allgather", "--json"]);
    assert!(out.status.success());
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["bounds"]["steps"], 2);
    assert_eq!(doc["bounds"]["rounds_per_chunk"], "7/6");
    let busbw = doc["busbw_bound_gbps"].as_f64().unwrap();
    assert!(
        (busbw - 150.0).abs() < 0.5,
        "dgx1 allgather cut bound {busbw}"
    );
}

// Issue 12: out-of-range roots, absurd sizes and numbers that used to panic, allocate
// gigabytes or solve for minutes are one-line errors found before anything is solved.

/// Writes `text` to `DIR/NAME`; returns the path.
fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

#[test]
fn root_out_of_range_or_without_a_rooted_collective() {
    let dir = temp_dir("root");
    let custom = write(
        &dir,
        "c.toml",
        "ranks = 4\n[[chunk]]\npre = [0]\npost = [1]\n",
    );
    let cases: &[(&[&str], &str)] = &[
        (
            &["--topo", "ring:4", "--coll", "allgather", "--root", "99"],
            "--root 99: allgather has no root",
        ),
        (
            &["--topo", "ring:4", "--coll", "allgather", "--root", "0"],
            "--root 0: allgather has no root",
        ),
        (
            &["--topo", "ring:4", "--coll", "broadcast", "--root", "99"],
            "--root 99 is out of range: the topology has ranks 0..3",
        ),
        (
            &["--topo", "ring:4", "--coll", &custom, "--root", "1"],
            "a custom collective file has no root",
        ),
        (
            &[
                "bounds",
                "--topo",
                "ring:4",
                "--coll",
                "allgather",
                "--root",
                "99",
            ],
            "--root 99: allgather has no root",
        ),
        (
            &[
                "bounds", "--topo", "ring:4", "--coll", "gather", "--root", "4",
            ],
            "--root 4 is out of range",
        ),
    ];
    for (args, needle) in cases {
        fails_with(args, needle);
    }
}

#[test]
fn absurd_nvlink_counts_in_nvidia_smi_output() {
    let dir = temp_dir("nvsmi");
    let file = write(
        &dir,
        "topo.txt",
        "\tGPU0\tGPU1\n GPU0\t X \tNV4294967295\nGPU1\tNV4294967295\t X \n",
    );
    let line = format!("{file}:2: nvidia-smi topo -m: GPU0 column GPU1: cell 'NV4294967295'");
    fails_with(&["topo", "show", &file], &line);
    let file = write(&dir, "topo2.txt", "  GPU0 GPU1\nGPU0 X NV65\nGPU1 NV65 X\n");
    fails_with(&["topo", "show", &file], "at most 64");
}

#[test]
fn topologies_beyond_the_rank_and_link_limits() {
    let dir = temp_dir("sizes");
    let nodes = write(
        &dir,
        "nodes.toml",
        "[multinode]\nnode = \"dgx-a100\"\nnodes = 100000\n",
    );
    let ranks = write(&dir, "ranks.toml", "ranks = 9223372036854775807\n");
    let node_of = write(
        &dir,
        "node_of.toml",
        "ranks = 2\nnode_of = [0, 9223372036854775807]\n[[link]]\nsrc = 0\ndst = 1\n",
    );
    let row = |i: usize| {
        let cells: Vec<&str> = (0..2000).map(|j| if i == j { "0" } else { "1" }).collect();
        format!("[{}]", cells.join(","))
    };
    let rows: Vec<String> = (0..2000).map(row).collect();
    let matrix = write(
        &dir,
        "matrix.toml",
        &format!("matrix = [\n{}\n]\n", rows.join(",\n")),
    );
    let coll = write(
        &dir,
        "coll.toml",
        "ranks = 9223372036854775807\n[[chunk]]\npre = [0]\npost = [1]\n",
    );
    let cases: &[(&[&str], &str)] = &[
        (
            &["topo", "show", "ring:10000"],
            "10000 ranks exceed the limit of 4096",
        ),
        (
            &["topo", "show", "ring:9223372036854775807"],
            "9223372036854775807 ranks exceed the limit of 4096",
        ),
        (
            &["topo", "show", "torus-2d:100000x100000"],
            "10000000000 ranks exceed the limit of 4096",
        ),
        (
            &["topo", "show", "fully-connected:2000"],
            "3998000 links exceed the limit of 2097152",
        ),
        (&["topo", "show", "dgx-a100x100000"], "800000 ranks exceed"),
        (
            &["topo", "show", &nodes],
            ":3: multinode: 100000 nodes of 8 GPUs",
        ),
        (
            &["topo", "show", &ranks],
            ":1: ranks: 9223372036854775807 ranks exceed the limit of 4096",
        ),
        (
            &["topo", "show", &node_of],
            ":2: node_of: node 9223372036854775807",
        ),
        (
            &["topo", "show", &matrix],
            ":1: matrix: 3998000 links exceed the limit of 2097152",
        ),
        (
            &["--topo", "ring:4", "--coll", &coll],
            "coll.toml: ranks: 9223372036854775807 ranks exceed the limit of 4096",
        ),
    ];
    for (args, needle) in cases {
        fails_with(args, needle);
    }
}

#[test]
fn numeric_options_beyond_their_limits() {
    let main = ["--topo", "dgx1", "--coll", "allreduce"];
    let cases: &[(&[&str], &str)] = &[
        (&["--instances", "33"], "'33' for '--instances <INSTANCES>'"),
        (&["--instances", "5000"], "5000 is not between 1 and 32"),
        (&["--instances", "0"], "0 is not between 1 and 32"),
        (
            &["--rounds", "4294967296"],
            "4294967296 is not between 1 and 256",
        ),
        (
            &["--rounds", "18446744073709551615", "--least-steps"],
            "'18446744073709551615' for '--rounds <ROUNDS>'",
        ),
        (
            &["--steps", "100000", "--rounds", "3"],
            "'100000' for '--steps <STEPS>'",
        ),
        (
            &["--steps", "100000", "--rounds", "100000"],
            "100000 is not between 1 and 256",
        ),
        (&["--chunks", "1000"], "1000 is not between 1 and 64"),
        (
            &["--max-steps", "100000"],
            "100000 is not between 1 and 1024",
        ),
        (&["--max-chunks", "0"], "0 is not between 1 and 64"),
        (
            &["--time-limit", "1e308"],
            "'1e308' for '--time-limit <TIME_LIMIT>'",
        ),
        (&["--time-limit", "1e19"], "at most 31536000"),
        (
            &["--time-limit", "nan"],
            "must be a positive number of seconds",
        ),
        (
            &["--time-limit", "-1"],
            "'-1' for '--time-limit <TIME_LIMIT>'",
        ),
        (
            &["--time-limit", "inf"],
            "must be a positive number of seconds",
        ),
    ];
    for (extra, needle) in cases {
        let args: Vec<&str> = main.iter().chain(extra.iter()).copied().collect();
        fails_with(&args, needle);
    }
    for t in ["1e308", "1e19", "nan", "-1"] {
        let catalog = ["catalog", "--topo", "ring:4", "--time-limit", t];
        fails_with(&catalog, "for '--time-limit <TIME_LIMIT>'");
        fails_with(
            &["bench", "--time-limit", t],
            "for '--time-limit <TIME_LIMIT>'",
        );
    }
    fails_with(
        &["catalog", "--topo", "ring:4", "--instances", "1,33"],
        "33 is not between 1 and 32",
    );
    fails_with(
        &[
            "catalog",
            "--topo",
            "ring:4",
            "--add",
            "allgather:100000,100000,1",
        ],
        "--add allgather:100000,100000,1: steps 100000 is not between 1 and 256",
    );
    fails_with(
        &["bench", "--repeat", "100000000"],
        "100000000 is not between 0 and 10000",
    );
}

#[test]
fn xml_sizes_beyond_the_limits() {
    let dir = temp_dir("xml");
    let good = runtime::xml::write(
        &runtime::builders::direct_allgather(2),
        runtime::ir::Flavor::Nccl,
    )
    .unwrap();
    let huge = good.replacen("ngpus=\"2\"", "ngpus=\"2147483647\"", 1);
    let huge = write(&dir, "huge.xml", &huge);
    let needle = "attribute ngpus: ngpus=2147483647 must be between 1 and 4096";
    fails_with(&["verify", &huge], needle);
    fails_with(&["run", &huge, "--size", "1K"], needle);
    fails_with(&["simulate", &huge, "--topo", "ring:2"], needle);
    let good = write(&dir, "good.xml", &good);
    fails_with(&["run", &good, "--size", "16G"], "(limit 4096 MiB)");
    fails_with(
        &["run", &good, "--iters", "100000000"],
        "is not between 0 and 10000",
    );
}

#[test]
fn json_errors_quoting_a_key_with_a_line_break_stay_one_line() {
    // Found by the fuzz target `collective_files`.
    let dir = temp_dir("json-key");
    let file = write(&dir, "c.json", r#"{"ranks": 3, "ch\nk": []}"#);
    let e = format!(
        "{:#}",
        synth::collective::Collective::from_file(&file, 1).unwrap_err()
    );
    assert!(e.contains("unknown field `ch\\nk`"), "{e}");
    assert!(!e.contains('\n'), "{e}");
}
