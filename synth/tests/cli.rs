//! The `synth` binary: output formats, files, and one-line errors with a non-zero exit.

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
        .prefix(&format!("synth-cli-{name}-"))
        .tempdir()
        .unwrap()
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
    let tmp = temp_dir("table");
    let dir = tmp.path();
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
    let files: Vec<_> = std::fs::read_dir(dir)
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
    let tmp = temp_dir("json");
    let dir = tmp.path();
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
    // SMT's frontier (2 algorithms), then tree packing's beside it, then the listed
    // schedule's twin with paced sends.
    let algorithms = doc["algorithms"].as_array().unwrap();
    assert_eq!(algorithms.len(), 6);
    assert!(algorithms[5]["file"]
        .as_str()
        .unwrap()
        .ends_with("-ps.json"));
    assert_eq!(doc["engines"], serde_json::json!(["smt", "trees"]));
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
    let tmp = temp_dir("badtoml");
    let dir = tmp.path();
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
    let tmp = temp_dir("disconnected");
    let dir = tmp.path();
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
    let tmp = temp_dir("timeout");
    let dir = tmp.path();
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
    let tmp = temp_dir("expired");
    let dir = tmp.path();
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
    let tmp = temp_dir("sketch64");
    let dir = tmp.path();
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
    let tmp = temp_dir("sketch100000");
    let dir = tmp.path();
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
    let tmp = temp_dir("work");
    let dir = tmp.path();
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
    let tmp = temp_dir("root");
    let dir = tmp.path();
    let custom = write(
        dir,
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
    let tmp = temp_dir("nvsmi");
    let dir = tmp.path();
    let file = write(
        dir,
        "topo.txt",
        "\tGPU0\tGPU1\n GPU0\t X \tNV4294967295\nGPU1\tNV4294967295\t X \n",
    );
    let line = format!("{file}:2: nvidia-smi topo -m: GPU0 column GPU1: cell 'NV4294967295'");
    fails_with(&["topo", "show", &file], &line);
    let file = write(dir, "topo2.txt", "  GPU0 GPU1\nGPU0 X NV65\nGPU1 NV65 X\n");
    fails_with(&["topo", "show", &file], "at most 64");
}

#[test]
fn topologies_beyond_the_rank_and_link_limits() {
    let tmp = temp_dir("sizes");
    let dir = tmp.path();
    let nodes = write(
        dir,
        "nodes.toml",
        "[multinode]\nnode = \"dgx-a100\"\nnodes = 100000\n",
    );
    let ranks = write(dir, "ranks.toml", "ranks = 9223372036854775807\n");
    let node_of = write(
        dir,
        "node_of.toml",
        "ranks = 2\nnode_of = [0, 9223372036854775807]\n[[link]]\nsrc = 0\ndst = 1\n",
    );
    let row = |i: usize| {
        let cells: Vec<&str> = (0..2000).map(|j| if i == j { "0" } else { "1" }).collect();
        format!("[{}]", cells.join(","))
    };
    let rows: Vec<String> = (0..2000).map(row).collect();
    let matrix = write(
        dir,
        "matrix.toml",
        &format!("matrix = [\n{}\n]\n", rows.join(",\n")),
    );
    let coll = write(
        dir,
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
            &["--extra-memory", "2000000"],
            "2000000 is not between 0 and 1048576",
        ),
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
        "100000000 is not between 1 and 10000",
    );
}

#[test]
fn xml_sizes_beyond_the_limits() {
    let tmp = temp_dir("xml");
    let dir = tmp.path();
    let good = runtime::xml::write(
        &runtime::builders::direct_allgather(2),
        runtime::ir::Flavor::Nccl,
    )
    .unwrap();
    let huge = good.replacen("ngpus=\"2\"", "ngpus=\"2147483647\"", 1);
    let huge = write(dir, "huge.xml", &huge);
    let needle = "attribute ngpus: ngpus=2147483647 must be between 1 and 4096";
    fails_with(&["verify", &huge], needle);
    fails_with(&["run", &huge, "--size", "1K"], needle);
    fails_with(&["simulate", &huge, "--topo", "ring:2"], needle);
    let good = write(dir, "good.xml", &good);
    fails_with(&["run", &good, "--size", "16G"], "(limit 4096 MiB)");
    fails_with(
        &["run", &good, "--iters", "100000000"],
        "is not between 1 and 10000",
    );
}

#[test]
fn json_errors_quoting_a_key_with_a_line_break_stay_one_line() {
    // Found by the fuzz target `collective_files`.
    let tmp = temp_dir("json-key");
    let dir = tmp.path();
    let file = write(dir, "c.json", r#"{"ranks": 3, "ch\nk": []}"#);
    let e = format!(
        "{:#}",
        synth::collective::Collective::from_file(&file, 1).unwrap_err()
    );
    assert!(e.contains("unknown field `ch\\nk`"), "{e}");
    assert!(!e.contains('\n'), "{e}");
}

#[test]
fn extra_memory_option() {
    let tmp = temp_dir("extra-memory");
    let dir = tmp.path();
    let d = dir.to_str().unwrap();
    let line3 = [
        "--topo", "line:3", "--coll", "alltoall", "--steps", "2", "--rounds", "2", "--chunks", "1",
        "--method", "smt", "--out", d,
    ];
    fails_with(&[&line3[..], &["--extra-memory", "0"]].concat(), "UNSAT");
    let out = synth(&[&line3[..], &["--extra-memory", "1", "--json"]].concat());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["extra_memory"], 1);
    fails_with(
        &[
            "--topo",
            "ring:4",
            "--coll",
            "reducescatter",
            "--extra-memory",
            "1",
            "--out",
            d,
        ],
        "--extra-memory applies to non-combining collectives",
    );
    fails_with(
        &[
            "--topo",
            "ring:4",
            "--coll",
            "allgather",
            "--method",
            "trees",
            "--extra-memory",
            "1",
        ],
        "--extra-memory needs --method smt or milp",
    );
    fails_with(
        &[
            "--topo",
            "ring:4",
            "--coll",
            "allgather",
            "--extra-memory",
            "x",
        ],
        "--extra-memory",
    );
}

/// The msccl-tools fixture written for these tests: SCCL's HubAndSpoke(4) allgather with one
/// step of three rounds (`synth/tests/data/allgather-hub4.msccl.json`).
fn msccl_fixture() -> String {
    format!(
        "{}/tests/data/allgather-hub4.msccl.json",
        env!("CARGO_MANIFEST_DIR")
    )
}

#[test]
fn lower_reads_msccl_tools_algorithm_json() {
    let tmp = temp_dir("lower-msccl");
    let dir = tmp.path();
    let d = dir.to_str().unwrap();
    let fixture = msccl_fixture();
    let out = synth(&[
        "lower",
        &fixture,
        "--flavor",
        "rccl",
        "--instances",
        "2",
        "--out",
        d,
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["format"], "msccl-algorithm-json");
    assert_eq!(doc["collective"], "allgather");
    assert_eq!(
        (doc["steps"].as_u64(), doc["rounds"].as_u64()),
        (Some(1), Some(3))
    );
    let xml = doc["xml"].as_array().unwrap();
    assert_eq!(xml.len(), 2);
    for x in xml {
        let v = synth(&["verify", x.as_str().unwrap()]);
        assert!(v.status.success(), "{}", String::from_utf8_lossy(&v.stderr));
    }
    // verify and simulate take the algorithm JSON itself.
    let v = synth(&["verify", &fixture]);
    let stdout = String::from_utf8_lossy(&v.stdout);
    assert!(
        v.status.success() && stdout.contains("OK (msccl-algorithm-json"),
        "{stdout}"
    );
    let s = synth(&[
        "simulate",
        &fixture,
        "--topo",
        "hub-and-spoke:4",
        "--sizes",
        "1M",
        "--json",
    ]);
    assert!(s.status.success(), "{}", String::from_utf8_lossy(&s.stderr));
    // On one shared hub the same sends overload it: the checker says so in one line.
    fails_with(
        &["verify", &fixture, "--topo", "shared-hub:4"],
        "switch constraint `hub` carries 12 chunks",
    );
}

#[test]
fn verify_simulate_and_lower_take_synths_algorithm_json() {
    let tmp = temp_dir("lower-own");
    let dir = tmp.path();
    let d = dir.to_str().unwrap();
    let out = synth(&[
        "--topo",
        "ring:4",
        "--coll",
        "allreduce",
        "--least-steps",
        "--out",
        d,
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let file = doc["algorithms"][0]["file"].as_str().unwrap().to_string();
    let v = synth(&["verify", &file]);
    let stdout = String::from_utf8_lossy(&v.stdout);
    assert!(
        v.status.success() && stdout.contains("OK (algorithm-json"),
        "{stdout}"
    );
    let s = synth(&["simulate", &file, "--topo", "ring:4", "--sizes", "1K"]);
    assert!(s.status.success(), "{}", String::from_utf8_lossy(&s.stderr));
    let again = dir.join("again");
    let l = synth(&[
        "lower",
        &file,
        "--flavor",
        "legacy",
        "--proto",
        "LL",
        "--out",
        again.to_str().unwrap(),
    ]);
    assert!(l.status.success(), "{}", String::from_utf8_lossy(&l.stderr));
    let xml = std::fs::read_dir(&again).unwrap().count();
    assert_eq!(xml, 2);
}

#[test]
fn bad_algorithm_files_are_one_line_errors() {
    let tmp = temp_dir("lower-bad");
    let dir = tmp.path();
    let fixture: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(msccl_fixture()).unwrap()).unwrap();
    type Edit = Box<dyn Fn(&mut serde_json::Value)>;
    let cases: Vec<(&str, Edit, &str)> = vec![
        (
            "no-instance",
            Box::new(|v| {
                v.as_object_mut().unwrap().remove("instance");
            }),
            "instance: missing",
        ),
        (
            "bad-rank",
            Box::new(|v| v["steps"][0]["sends"][0] = serde_json::json!([0, 0, 9])),
            "steps[0].sends[0]: dst rank 9 out of range",
        ),
        (
            "bad-addr",
            Box::new(|v| v["collective"]["chunks"][1]["addr"] = "x".into()),
            "collective.chunks[1].addr: expected a non-negative integer",
        ),
        (
            "bad-links",
            Box::new(|v| v["topology"]["links"][2] = serde_json::json!([1, 1])),
            "topology.links[2]: expected a list of 4 bandwidths",
        ),
        (
            "no-topology",
            Box::new(|v| {
                v.as_object_mut().unwrap().remove("topology");
            }),
            "topology: missing; give one with --topo",
        ),
        (
            "huge-chunks",
            Box::new(|v| v["instance"]["chunks"] = 1_000_000_000_000u64.into()),
            "instance.chunks",
        ),
        (
            "missing-send",
            Box::new(|v| {
                v["steps"][0]["sends"].as_array_mut().unwrap().pop();
            }),
            "fails the checker",
        ),
        (
            "zero-rounds",
            Box::new(|v| v["steps"][0]["rounds"] = 0.into()),
            "steps[0].rounds",
        ),
        (
            "wrong-tag",
            Box::new(|v| v["steps"][0]["msccl_type"] = "chunk".into()),
            "steps[0].msccl_type: expected `step`",
        ),
    ];
    for (name, edit, needle) in cases {
        let mut v = fixture.clone();
        edit(&mut v);
        let path = dir.join(format!("{name}.json"));
        std::fs::write(&path, v.to_string()).unwrap();
        let p = path.to_str().unwrap();
        fails_with(&["lower", p, "--out", dir.to_str().unwrap()], needle);
        fails_with(&["verify", p], needle);
        assert!(
            synth(&["lower", p])
                .stderr
                .starts_with(format!("error: {p}").as_bytes()),
            "{name}: the error names the file"
        );
    }
    let text = dir.join("not-json.json");
    std::fs::write(&text, "{ nope").unwrap();
    fails_with(&["lower", text.to_str().unwrap()], "not-json.json:1:");
}

#[test]
fn verify_and_lower_take_a_custom_algorithm_json() {
    let tmp = temp_dir("verify-custom");
    let dir = tmp.path();
    let coll = write(
        dir,
        "one-way.toml",
        "ranks = 4\n[[chunk]]\npre = [0]\npost = [1, 2, 3]\n[[chunk]]\npre = [3]\npost = [0]\n",
    );
    let d = dir.to_str().unwrap();
    let out = synth(&[
        "--topo",
        "ring:4",
        "--coll",
        &coll,
        "--least-steps",
        "--out",
        d,
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let file = doc["algorithms"][0]["file"].as_str().unwrap().to_string();
    let v = synth(&["verify", &file]);
    let stdout = String::from_utf8_lossy(&v.stdout);
    assert!(v.status.success() && stdout.contains("OK"), "{stdout}");
    // Custom collectives lower to `coll="custom"` with their conditions beside the XML.
    let relowered = dir.join("relowered");
    let l = synth(&["lower", &file, "--out", relowered.to_str().unwrap()]);
    assert!(l.status.success(), "{}", String::from_utf8_lossy(&l.stderr));
    let xml = std::fs::read_dir(&relowered)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "xml"))
        .expect("an XML file");
    let text = std::fs::read_to_string(&xml).unwrap();
    assert!(text.contains("coll=\"custom\""), "{text}");
    let v = synth(&["verify", xml.to_str().unwrap()]);
    assert!(v.status.success(), "{}", String::from_utf8_lossy(&v.stderr));
}

// Usability issue, item 12: one convention for every command.

#[test]
fn a_missing_argument_is_named() {
    fails_with(
        &["bounds", "--coll", "allgather"],
        "missing required argument --topo",
    );
    fails_with(&["verify"], "missing required argument <FILE>");
    fails_with(&["run", "--size", "1K"], "missing required argument <FILE>");
    fails_with(&["simulate", "x.xml"], "missing required argument --topo");
    fails_with(&["--topo", "dgx1"], "missing --coll");
}

#[test]
fn topo_help_names_its_commands() {
    let out = synth(&["topo", "--help"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(!text.contains("draw"), "{text}");
    assert!(text.contains("topo dot"), "{text}");
}

#[test]
fn catalog_checks_chunks_and_takes_the_legacy_flavor() {
    fails_with(
        &["catalog", "--topo", "ring:4", "--max-chunks", "0"],
        "0 is not between 1 and 64",
    );
    let tmp = temp_dir("catalog-legacy");
    let dir = tmp.path();
    let out = synth(&[
        "catalog",
        "--topo",
        "ring:4",
        "--colls",
        "allgather",
        "--flavor",
        "legacy",
        "--instances",
        "1",
        "--sizes",
        "1K:1M:32",
        "--out",
        dir.to_str().unwrap(),
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["flavor"], "legacy");
    let ranges = doc["collectives"][0]["ranges"].as_array().unwrap();
    let file = ranges.last().unwrap()["file"].as_str().unwrap();
    let xml = std::fs::read_to_string(dir.join(file)).unwrap();
    // The legacy runtime's maxBytes is exclusive and 0 means never: the last range is 2^62.
    assert!(xml.contains("maxBytes=\"4611686018427387904\""), "{xml}");
}

#[test]
fn chunks_or_rounds_without_steps_are_an_error() {
    fails_with(
        &["--topo", "dgx1", "--coll", "allgather", "--chunks", "2"],
        "--chunks needs --steps (one instance) or --least-steps",
    );
    fails_with(
        &["--topo", "dgx1", "--coll", "allgather", "--rounds", "3"],
        "--rounds needs --steps (one instance) or --least-steps",
    );
}

#[test]
fn zero_repeats_iterations_and_sizes_are_errors() {
    let tmp = temp_dir("zeros");
    let dir = tmp.path();
    let xml = runtime::xml::write(
        &runtime::builders::direct_allgather(2),
        runtime::ir::Flavor::Nccl,
    )
    .unwrap();
    let xml = write(dir, "ag.xml", &xml);
    fails_with(&["bench", "--repeat", "0"], "0 is not between 1 and 10000");
    fails_with(
        &["run", &xml, "--iters", "0"],
        "0 is not between 1 and 10000",
    );
    fails_with(&["run", &xml, "--size", "0"], "is 0 bytes");
    fails_with(&["run", &xml, "--sizes", "0:1K"], "is 0 bytes");
    fails_with(
        &["simulate", &xml, "--topo", "ring:2", "--sizes", "0K"],
        "is 0 bytes",
    );
    // Zero warm-up iterations stay allowed.
    let out = synth(&["run", &xml, "--size", "1K", "--iters", "1", "--warmup", "0"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_kilobyte_is_1024_bytes_everywhere() {
    let tmp = temp_dir("kb");
    let dir = tmp.path();
    let xml = runtime::xml::write(
        &runtime::builders::direct_allgather(2),
        runtime::ir::Flavor::Nccl,
    )
    .unwrap();
    let xml = write(dir, "ag.xml", &xml);
    for size in ["1K", "1KB", "1KiB", "1kb"] {
        let out = synth(&["run", &xml, "--size", size, "--iters", "1", "--json"]);
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(doc["rows"][0]["size"], 1024, "{size}");
        let out = synth(&[
            "simulate", &xml, "--topo", "ring:2", "--sizes", size, "--json",
        ]);
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(doc["rows"][0]["size"], 1024, "{size}");
    }
    let out = synth(&["bounds", "--topo", "dgx1", "--coll", "allgather", "--json"]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["time_bound_us"][0][0], 1024.0);
    assert_eq!(doc["time_bound_us"][2][0], 1073741824.0);
    let size = toml::Value::String("1KB".into());
    assert_eq!(synth::sketch::parse_size(&size), Ok(1024.0));
    assert_eq!(synth::sketch::DEFAULT_SIZES[0], 1024.0);
}

#[test]
fn verify_json_prints_a_document_on_a_parse_error() {
    let tmp = temp_dir("verify-json");
    let dir = tmp.path();
    let bad = write(dir, "bad.xml", "<algo\n");
    let out = synth(&["verify", &bad, "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("a JSON document");
    assert_eq!(doc["ok"], false);
    assert!(doc["error"].as_str().unwrap().contains("bad.xml"), "{doc}");
    let out = synth(&["verify", "/nonexistent/x.xml", "--json"]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("a JSON document");
    assert_eq!(doc["ok"], false);
}

// Usability issue, item 4: one name, and one file, per algorithm.

#[test]
fn two_milp_answers_with_the_same_steps_rounds_and_chunks_get_two_names() {
    use synth::algorithm::{name_uniquely, Algorithm, Send, Step};
    use synth::collective::{Collective, Kind};
    // A 4-rank fabric with mixed link speeds: 0-1 at 50 GB/s, every other pair at 25.
    let tmp = temp_dir("het4");
    let dir = tmp.path();
    let mut toml = String::from("name = \"het4\"\nranks = 4\nbandwidth = 25\n");
    for (a, b) in [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)] {
        let bw = if (a, b) == (0, 1) { 50 } else { 25 };
        toml += &format!("[[link]]\nsrc = {a}\ndst = {b}\nbandwidth = {bw}\n");
    }
    let topo = synth::topology::load(&write(dir, "het4.toml", &toml)).unwrap();
    // Two different allgathers with 2 steps, 2 rounds and 1 chunk, named as the MILP names
    // them: each rank sends its chunk one way in step 1 and the other two ways in step 2.
    let schedule = |first: usize| {
        let step = |offsets: &[usize]| Step {
            rounds: 1,
            reduce: false,
            sends: (0..4)
                .flat_map(|r| {
                    offsets.iter().map(move |o| Send {
                        chunk: r,
                        src: r,
                        dst: (r + o) % 4,
                    })
                })
                .collect(),
        };
        let rest: Vec<usize> = (1..4).filter(|&o| o != first).collect();
        Algorithm {
            name: "allgather-het4-milp-s2-r2-c1".into(),
            origin: Default::default(),
            topology: "het4".into(),
            collective: Collective::new(Kind::AllGather, 4, 0, 1).unwrap(),
            steps: vec![step(&[first]), step(&rest)],
            piece_channels: None,
            step_groups: None,
            message_chunks: None,
            serial_links: false,
            rank_order: None,
        }
    };
    let mut found = vec![schedule(1), schedule(2)];
    for a in &found {
        synth::check::check(a, &topo).unwrap();
    }
    name_uniquely(&mut found, None);
    assert_ne!(found[0].name, found[1].name);
    for a in &found {
        assert!(
            a.name.starts_with("allgather-het4-milp-s2-r2-c1-"),
            "{}",
            a.name
        );
    }
    // The names depend on the schedule only, not on the order or the run.
    let mut again = vec![schedule(2), schedule(1)];
    name_uniquely(&mut again, None);
    assert_eq!(again[0].name, found[1].name);
    // Identical copies get a counter.
    let mut copies = vec![schedule(1), schedule(1)];
    name_uniquely(&mut copies, None);
    assert_ne!(copies[0].name, copies[1].name);
    // A long name gives up the end of its engine tag for the hash, so that its in-place
    // program's name stays within the runtimes' 63 characters.
    let long = |first: usize| Algorithm {
        name: "allgather-het4-rail-srings-and-more-words-here-s2-r2-c1-g4".into(),
        origin: Default::default(),
        ..schedule(first)
    };
    let mut long = vec![long(1), long(2)];
    name_uniquely(&mut long, None);
    assert_ne!(long[0].name, long[1].name);
    for a in &long {
        assert_eq!(a.name.len(), synth::algorithm::MAX_NAME, "{}", a.name);
        assert!(
            a.name.starts_with("allgather-het4-rail-srings-"),
            "{}",
            a.name
        );
        assert!(a.name.contains("-s2-r2-c1-g4-"), "{}", a.name);
    }
    // Identical copies of a long name: the counter fits too.
    let mut long_copies = vec![long[0].clone(), long[0].clone(), long[0].clone()];
    name_uniquely(&mut long_copies, None);
    for a in &long_copies {
        assert!(a.name.len() <= synth::algorithm::MAX_NAME, "{}", a.name);
    }
    assert_ne!(long_copies[1].name, long_copies[2].name);
}

#[test]
fn custom_collectives_are_named_after_their_files() {
    let tmp = temp_dir("custom-names");
    let dir = tmp.path();
    let one = write(
        dir,
        "one.toml",
        "ranks = 4\n[[chunk]]\npre = [0]\npost = [1, 3]\n",
    );
    let two = write(
        dir,
        "two.toml",
        "ranks = 4\n[[chunk]]\npre = [0]\npost = [1, 2]\n",
    );
    let out_dir = dir.join("out");
    let mut all = Vec::new();
    for (file, stem) in [(&one, "one"), (&two, "two")] {
        let out = synth(&[
            "--topo",
            "ring:4",
            "--coll",
            file,
            "--max-chunks",
            "2",
            "--out",
            out_dir.to_str().unwrap(),
            "--json",
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        for a in doc["algorithms"].as_array().unwrap() {
            let path = a["file"].as_str().unwrap().to_string();
            let name = Path::new(&path).file_name().unwrap().to_string_lossy();
            assert!(
                name.starts_with(&format!("custom-{stem}-ring_4-")),
                "{name}"
            );
            all.push(path);
        }
    }
    let mut unique = all.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), all.len(), "{all:?}");
    for path in &all {
        assert!(Path::new(path).exists(), "{path}");
    }
}

// Usability issue, item 2: the first command leaves `git status` clean.

#[test]
fn the_main_command_writes_to_an_ignored_folder_and_says_where() {
    let tmp = temp_dir("default-out");
    let dir = tmp.path();
    let out = Command::new(env!("CARGO_BIN_EXE_synth"))
        .args(["--topo", "dgx1", "--coll", "allgather"])
        .current_dir(dir)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    // Six algorithms (SMT's two, tree packing's three, the listed schedule's paced twin):
    // a JSON file and two XML files each.
    assert!(stderr.contains("wrote 18 files to out"), "{stderr}");
    assert_eq!(std::fs::read_dir(dir.join("out")).unwrap().count(), 18);
    assert!(!dir.join("results").exists());
    // The repository ignores that folder.
    let gitignore = include_str!("../../.gitignore");
    assert!(gitignore.lines().any(|l| l == "/out/"), "{gitignore}");
}

// Usability issue, item 10: a Pareto plot and schedule drawings.

#[test]
fn pareto_plot_and_schedule_drawings() {
    let tmp = temp_dir("draw");
    let dir = tmp.path();
    let plot = dir.join("pareto.svg");
    let out = synth(&[
        "--topo",
        "dgx1",
        "--coll",
        "allgather",
        "--out",
        dir.to_str().unwrap(),
        "--plot",
        plot.to_str().unwrap(),
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["plot"], plot.to_str().unwrap());
    let svg = std::fs::read_to_string(&plot).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    assert!(
        svg.contains("(2, 3, 2)") && svg.contains("(3, 7, 6)"),
        "{svg}"
    );
    assert!(svg.contains("R/C bound 7/6"), "{svg}");

    let file = doc["algorithms"][0]["file"].as_str().unwrap();
    let algo: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
    // One arrow per link used in a step.
    let mut links = std::collections::BTreeSet::new();
    for (s, step) in algo["steps"].as_array().unwrap().iter().enumerate() {
        for x in step["sends"].as_array().unwrap() {
            links.insert((s, x["src"].as_u64(), x["dst"].as_u64()));
        }
    }
    let dot = synth(&["draw", file]);
    let dot = String::from_utf8(dot.stdout).unwrap();
    assert!(dot.starts_with("digraph"), "{dot}");
    assert_eq!(dot.matches(", color=blue,").count(), links.len());
    let svg_path = dir.join("schedule.svg");
    let out = synth(&["draw", file, "--out", svg_path.to_str().unwrap()]);
    assert!(out.status.success());
    let svg = std::fs::read_to_string(&svg_path).unwrap();
    assert_eq!(svg.matches("marker-end=").count(), links.len());
    let out = synth(&["draw", file, "--format", "svg", "--json"]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(doc["drawing"].as_str().unwrap().starts_with("<svg"));

    // Bad input: one line naming the file and the field.
    let mut bad = algo.clone();
    bad["steps"][0]["sends"][0]["dst"] = 99.into();
    let bad = write(dir, "bad.json", &bad.to_string());
    fails_with(
        &["draw", &bad],
        "bad.json: steps[0].sends[0]: rank 99 out of range",
    );
    fails_with(
        &["draw", "/nonexistent/a.json"],
        "/nonexistent/a.json: cannot read",
    );
    let junk = write(dir, "junk.json", "{\"name\": 3}");
    fails_with(&["draw", &junk], "junk.json:1:");
}

/// Alltoall has a column to beat: NCCL's point-to-point baseline.
#[test]
fn alltoall_is_compared_with_nccl_p2p() {
    let tmp = temp_dir("alltoall-p2p");
    let dir = tmp.path();
    let args = [
        "--topo", "dgx1", "--coll", "alltoall", "--steps", "3", "--rounds", "3", "--chunks", "1",
        "--out",
    ];
    let out = synth(&[&args[..], &[dir.to_str().unwrap()]].concat());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = stdout
        .lines()
        .find(|l| l.starts_with("simulated at 1 GB"))
        .unwrap_or_else(|| panic!("no comparison line: {stdout}"));
    assert!(line.contains("NCCL Simple ring -, tree -, p2p "), "{line}");
    let p2p: f64 = line.rsplit("p2p ").next().unwrap().parse().unwrap();
    assert!(p2p > 10.0 && p2p < 150.0, "{line}");
    let json = synth(&[&args[..], &[dir.to_str().unwrap(), "--json"]].concat());
    let doc: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let at = &doc["at_1gb"];
    assert!(at["ring"].is_null() && at["tree"].is_null(), "{at}");
    assert!((at["p2p"].as_f64().unwrap() - p2p).abs() < 0.05, "{at}");
    // `synth simulate` has the same column.
    let xml = dir.join("alltoall-dgx1-s3-r3-c1.xml");
    let sim = synth(&[
        "simulate",
        xml.to_str().unwrap(),
        "--topo",
        "dgx1",
        "--sizes",
        "1G",
    ]);
    let table = String::from_utf8_lossy(&sim.stdout);
    assert!(
        table.lines().nth(1).is_some_and(|h| h.contains("p2p")),
        "{table}"
    );
    let sim = synth(&[
        "simulate",
        xml.to_str().unwrap(),
        "--topo",
        "dgx1",
        "--sizes",
        "1G",
        "--json",
    ]);
    let doc: serde_json::Value = serde_json::from_slice(&sim.stdout).unwrap();
    let row = &doc["rows"][0];
    assert!(row["ring_busbw"].is_null(), "{row}");
    assert!(
        (row["p2p_busbw"].as_f64().unwrap() - p2p).abs() < 0.05,
        "{row}"
    );
}

/// Legacy files that use scratch get a real `maxBytes`: the runtime allocates
/// `maxBytes × s_chunks / nchunksperloop` bytes of scratch when it loads one, and 2^62 × 4
/// scratch chunks wrapped to 0 for in-place alltoall with two instances.
#[test]
fn legacy_in_place_alltoall_gets_a_real_max_bytes() {
    let tmp = temp_dir("legacy-maxbytes");
    let dir = tmp.path();
    let out = synth(&[
        "--topo",
        "dgx1",
        "--coll",
        "alltoall",
        "--steps",
        "3",
        "--rounds",
        "3",
        "--chunks",
        "1",
        "--flavor",
        "legacy",
        "--instances",
        "2",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut checked = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "xml") {
            continue;
        }
        let p = runtime::xml::read_file(&path).unwrap();
        let scratch = p.gpus.iter().map(|g| g.scratch_chunks).max().unwrap() as u128;
        let max = p.max_bytes as u128;
        assert!(
            max > 0 && max * scratch <= i64::MAX as u128,
            "{}",
            path.display()
        );
        if scratch > 0 {
            // 1 GiB of scratch at start-up, or what a 1 GiB call needs where that is more.
            let one_gib_call = ((1 << 30) + 1) * scratch;
            assert!(max * scratch <= ((1u128 << 30) * p.nchunksperloop as u128).max(one_gib_call));
            // Calls up to nccl-tests' 1 GB are served.
            assert!(max > 1 << 30, "{}: {max}", path.display());
            checked += 1;
        } else {
            assert_eq!(max, 1 << 62);
        }
    }
    assert!(checked >= 1, "no file uses scratch");
}

#[test]
fn bench_scale_refuses_a_bad_collective_or_fabric_up_front() {
    fails_with(
        &[
            "bench",
            "--cases",
            "scale",
            "--coll",
            "bogus",
            "--fabrics",
            "torus-2d:4x4",
        ],
        "unknown collective `bogus`",
    );
    fails_with(
        &["bench", "--cases", "scale", "--fabrics", "nosuch"],
        "unknown topology 'nosuch'",
    );
}

/// The table row of `fabric` that `synth bench --cases CASES --coll COLL --fabrics FABRIC`
/// prints (the command must succeed).
fn bench_row(cases: &str, coll: &str, fabric: &str) -> String {
    let out = synth(&[
        "bench",
        "--cases",
        cases,
        "--coll",
        coll,
        "--fabrics",
        fabric,
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let start = format!("| {fabric} ");
    stdout
        .lines()
        .find(|l| l.starts_with(&start))
        .unwrap_or_else(|| panic!("no row: {stdout}"))
        .to_string()
}

/// `synth bench --cases scale --coll allreduce` measures against the reduce-scatter +
/// allgather optimum (the issue's 98% is of that), not the allreduce bound.
#[test]
fn bench_scale_rates_an_allreduce_against_the_two_phase_optimum() {
    let row = bench_row("scale", "allreduce", "torus-2d:4x4");
    let cells: Vec<&str> = row.split('|').map(str::trim).collect();
    let (busbw, percent, optimum): (f64, f64, f64) = (
        cells[6].parse().unwrap(),
        cells[7].trim_end_matches('%').parse().unwrap(),
        cells[8].parse().unwrap(),
    );
    // 4x4: 100 GB/s busbw for reduce-scatter then allgather.
    assert!((99.0..=100.5).contains(&optimum), "{row}");
    assert!(busbw <= optimum * 1.001 && percent >= 98.0, "{row}");
}

/// An allreduce's 1 GB line also states the reduce-scatter + allgather optimum, which a
/// composed allreduce cannot beat and which is tighter than the allreduce cut bound.
#[test]
fn allreduce_states_the_two_phase_optimum() {
    let tmp = temp_dir("two-phase");
    let dir = tmp.path();
    let args = [
        "--topo",
        "dgx-a100x2",
        "--coll",
        "allreduce",
        "--json",
        "--out",
        dir.to_str().unwrap(),
    ];
    let out = synth(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let at = &doc["at_1gb"];
    let (best, bound) = (at["busbw"].as_f64().unwrap(), at["bound"].as_f64().unwrap());
    let two_phase = at["two_phase"].as_f64().unwrap();
    assert!(two_phase < bound, "{at}");
    assert!(best <= two_phase * (1.0 + 1e-9), "{at}");
    assert!(best >= 0.9 * two_phase, "{at}");
}

/// On one small box broadcast runs SMT and tree packing: SMT's few pieces alone simulated
/// at 58.3 GB/s on dgx1 at 1 GB, below NCCL's ring (140.1); the shallow trees beat it.
#[test]
fn default_broadcast_on_one_box_beats_nccl_ring() {
    let tmp = temp_dir("broadcast-box");
    let dir = tmp.path();
    let out = synth(&[
        "--topo",
        "dgx1",
        "--coll",
        "broadcast",
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
    let at = &doc["at_1gb"];
    let (best, ring) = (at["busbw"].as_f64().unwrap(), at["ring"].as_f64().unwrap());
    assert!(best > ring, "{at}");
    assert!(best >= 0.95 * at["bound"].as_f64().unwrap(), "{at}");
}

/// `synth bench --cases zoo` runs a zoo fabric as written and renumbered: both reach the
/// exact allgather optimum of a 6-D hypercube (whole trees, no rounding loss) to 99%, within
/// 0.5% of each other.
#[test]
fn bench_zoo_runs_a_fabric_and_its_renumbered_twin() {
    let row = bench_row("zoo", "allgather", "hypercube:64");
    let cells: Vec<&str> = row.split('|').map(str::trim).collect();
    let percent: f64 = cells[8].trim_end_matches('%').parse().unwrap();
    let twin: Vec<&str> = cells[10].split(", ").collect();
    let twin_percent: f64 = twin[1].trim_end_matches('%').parse().unwrap();
    let apart: f64 = cells[11].trim_end_matches('%').parse().unwrap();
    assert!(percent >= 99.0 && twin_percent >= 99.0, "{row}");
    assert!(apart <= 0.5, "{row}");
    fails_with(
        &["bench", "--cases", "zoo", "--fabrics", "nosuch"],
        "'nosuch' is not in the zoo",
    );
}

// Robustness issue 31, items 8, 15 and 16.

/// Arguments that cannot be used are refused before the search: with an expired time limit
/// the search would stop at once with its own error, and no file is written.
#[test]
fn arguments_are_checked_before_the_search() {
    let tmp = temp_dir("args-first");
    let dir = tmp.path();
    let out = dir.join("out");
    let o = out.to_str().unwrap();
    let file = write(dir, "file.txt", "not a folder\n");
    let under = format!("{file}/sub");
    let weird = write(
        dir,
        "weird.toml",
        "name = 'a\"<>&'\ngenerator = \"ring\"\nsize = 4\n",
    );
    let plot_under = format!("{file}/p.svg");
    let dir_str = dir.to_str().unwrap();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["--min-bytes", "100", "--max-bytes", "10", "--out", o],
            "--max-bytes (10) is below --min-bytes (100)",
        ),
        (vec!["--out", &file], "is a file, not a folder"),
        (vec!["--out", &under], "file.txt is a file, not a folder"),
        (
            vec!["--out", o, "--plot", dir_str],
            "is a folder, not a file",
        ),
        (
            vec!["--out", o, "--plot", &plot_under],
            "a folder above it is a file",
        ),
    ];
    for (extra, needle) in cases {
        let mut args = vec![
            "--topo",
            "ring:4",
            "--coll",
            "allgather",
            "--time-limit",
            "1e-9",
        ];
        args.extend(extra);
        fails_with(&args, needle);
    }
    fails_with(
        &[
            "--topo",
            &weird,
            "--coll",
            "allgather",
            "--time-limit",
            "1e-9",
            "--out",
            o,
        ],
        "name: \"a\\\"<>&\" holds '\"', which MSCCL XML names cannot carry",
    );
    assert!(!out.exists(), "nothing is written");
    let fixture = msccl_fixture();
    fails_with(
        &[
            "lower",
            &fixture,
            "--min-bytes",
            "100",
            "--max-bytes",
            "10",
            "--out",
            o,
        ],
        "--max-bytes (10) is below --min-bytes (100)",
    );
    fails_with(
        &["lower", &fixture, "--out", &under],
        "is a file, not a folder",
    );
    fails_with(
        &[
            "catalog",
            "--topo",
            "ring:4",
            "--out",
            &under,
            "--time-limit",
            "1e-9",
        ],
        "is a file, not a folder",
    );
    assert!(!out.exists(), "nothing is written");
}

/// `synth lower` without `--out` writes to `out/`, like every other command.
#[test]
fn lower_writes_to_out_by_default() {
    let tmp = temp_dir("lower-default-out");
    let dir = tmp.path();
    let out = Command::new(env!("CARGO_BIN_EXE_synth"))
        .args(["lower", &msccl_fixture()])
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read_dir(dir.join("out")).unwrap().count(), 2);
    assert!(!dir.join("results").exists());
}

/// A custom collective equal to a built-in but on the wrong number of ranks gets the rank
/// error alone, without the note that it is the built-in.
#[test]
fn a_custom_collective_with_the_wrong_ranks_gets_one_error() {
    let tmp = temp_dir("custom-ranks");
    let dir = tmp.path();
    let bcast = write(
        dir,
        "bcast.toml",
        "ranks = 4\n[[chunk]]\npre = [0]\npost = [0, 1, 2, 3]\n",
    );
    fails_with(
        &["--topo", "ring:8", "--coll", &bcast],
        "the collective has 4 ranks but topology `ring:8` has 8",
    );
}

// Robustness issue 31, items 7 and 14.

/// Sizes stop at 1024T, and a simulation's cost does not grow with the size: the largest
/// sizes simulate in the time of the smaller ones (they ran past the event limit).
#[test]
fn sizes_have_a_cap_and_huge_sizes_simulate_quickly() {
    let tmp = temp_dir("huge-sizes");
    let dir = tmp.path();
    let xml = runtime::xml::write(
        &runtime::builders::direct_allgather(2),
        runtime::ir::Flavor::Nccl,
    )
    .unwrap();
    let xml = write(dir, "ag.xml", &xml);
    let needle = "is above the limit of 1024T (2^50 bytes)";
    fails_with(
        &["simulate", &xml, "--topo", "ring:2", "--sizes", "16777215T"],
        needle,
    );
    fails_with(&["run", &xml, "--size", "1025T"], needle);
    fails_with(
        &["catalog", "--topo", "ring:4", "--sizes", "1:2000T"],
        needle,
    );
    let started = std::time::Instant::now();
    let out = synth(&[
        "simulate", &xml, "--topo", "ring:2", "--sizes", "1K:1024T", "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = doc["rows"].as_array().unwrap();
    assert_eq!(rows.last().unwrap()["size"], 1u64 << 50);
    assert!(started.elapsed().as_secs() < 60, "{:?}", started.elapsed());
}

/// A size that is not whole elements in each chunk runs rounded, and says so on stderr and
/// in `--json`.
#[test]
fn run_says_when_it_rounds_a_size() {
    let tmp = temp_dir("rounded");
    let dir = tmp.path();
    let program = runtime::builders::direct_allgather(2);
    let chunks = program.nchunksperloop;
    let xml = runtime::xml::write(&program, runtime::ir::Flavor::Nccl).unwrap();
    let xml = write(dir, "ag.xml", &xml);
    let out = synth(&["run", &xml, "--size", "3", "--iters", "1", "--json"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let size = 4 * chunks;
    assert!(
        stderr.contains(&format!("note: size 3 B runs as {size} B (rounded up")),
        "{stderr}"
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["rows"][0]["size"], size);
    assert_eq!(doc["rounded"][0]["requested"], 3);
    assert_eq!(doc["rounded"][0]["size"], size);
    // A size the program takes as it is gets no note.
    let out = synth(&["run", &xml, "--size", "1K", "--iters", "1", "--json"]);
    assert!(!String::from_utf8_lossy(&out.stderr).contains("note:"));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["rounded"], serde_json::json!([]));
}

/// Bandwidths with irrational ratios have no common capacity unit: `synth bounds` and the
/// MILP (what auto picks there) work with capacities rounded the safe way, and say so.
#[test]
fn irrational_bandwidths_are_bounded_and_solved() {
    let tmp = temp_dir("irrational");
    let dir = tmp.path();
    let topo = dir.join("irr.toml");
    let mut text = String::from("ranks = 4\n");
    for (i, b) in [
        std::f64::consts::PI,
        std::f64::consts::E,
        2f64.sqrt(),
        3f64.sqrt(),
    ]
    .iter()
    .enumerate()
    {
        // A link goes both ways unless it says otherwise.
        text += &format!(
            "[[link]]\nsrc = {i}\ndst = {}\nbandwidth = {b}\n",
            (i + 1) % 4
        );
    }
    std::fs::write(&topo, text).unwrap();
    let t = topo.to_str().unwrap();
    let bounds = synth(&["bounds", "--topo", t, "--coll", "allgather"]);
    assert!(
        bounds.status.success(),
        "{}",
        String::from_utf8_lossy(&bounds.stderr)
    );
    let out = dir.join("out");
    let run = synth(&[
        "--topo",
        t,
        "--coll",
        "allgather",
        "--steps",
        "2",
        "--rounds",
        "3",
        "--chunks",
        "1",
        "--work-limit",
        "50",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let table = String::from_utf8_lossy(&run.stdout);
    assert!(table.contains("rounded down"), "{table}");
    assert!(table.contains("-milp-"), "{table}");
}

/// A sketch with two symmetries used to crash HiGHS' own symmetry detection (SIGSEGV on the
/// first model); that detection is off, the sketch's symmetries being in the model already.
#[test]
fn a_sketch_with_two_symmetries_solves_without_a_crash() {
    let tmp = temp_dir("two-symmetries");
    let dir = tmp.path();
    let sketch = dir.join("s.toml");
    std::fs::write(
        &sketch,
        "symmetry = [{ offset = 8 }, { offset = 1, group = 8 }]\nsteps = [2, 8]\n",
    )
    .unwrap();
    let out = synth(&[
        "--topo",
        "dgx-a100x2",
        "--coll",
        "allgather",
        "--sketch",
        sketch.to_str().unwrap(),
        "--work-limit",
        "1",
        "--time-limit",
        "20",
        "--out",
        dir.join("out").to_str().unwrap(),
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Only the legacy runtime loads `coll="custom"`: a custom collective is written in the
/// legacy flavour by default (explicit maxBytes), and `--flavor nccl|rccl` is refused in one
/// line before any search.
#[test]
fn custom_collectives_are_written_for_the_runtime_that_loads_them() {
    let tmp = temp_dir("custom-flavor");
    let dir = tmp.path();
    let coll = dir.join("partial.toml");
    std::fs::write(
        &coll,
        "ranks = 8\n[[chunk]]\npre = [0]\npost = [1, 2]\n[[chunk]]\npre = [3]\npost = [0]\n",
    )
    .unwrap();
    let c = coll.to_str().unwrap();
    let out = dir.join("out");
    let o = out.to_str().unwrap();
    for flavor in ["nccl", "rccl"] {
        let refused = synth(&[
            "--topo", "dgx1", "--coll", c, "--flavor", flavor, "--out", o,
        ]);
        let err = String::from_utf8_lossy(&refused.stderr);
        assert!(!refused.status.success());
        assert!(
            err.contains("--flavor legacy") && err.trim().lines().count() == 1,
            "{err}"
        );
        assert!(!out.exists(), "nothing is written");
    }
    let done = synth(&["--topo", "dgx1", "--coll", c, "--out", o]);
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    let xml = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "xml"))
        .unwrap();
    let text = std::fs::read_to_string(xml).unwrap();
    assert!(text.contains("coll=\"custom\"") && !text.contains("maxBytes=\"0\""));
}

/// `synth fuse`: the schedules as one JSON document, the best written as program JSON that
/// `synth run` checks on the CPU executor; a malformed workload is one line naming its field.
#[test]
fn fuse_writes_the_best_schedule_that_runs_and_refuses_bad_workloads() {
    let tmp = temp_dir("fuse");
    let dir = tmp.path();
    let workload = dir.join("fuse.toml");
    std::fs::write(
        &workload,
        "collective = \"allreduce\"\nsize = \"64MB\"\nepilogue = \"sgd\"\nmemory_bandwidth = 1500\n[producer]\ntiles = 4\ntime_us = 100\n",
    )
    .unwrap();
    let best = dir.join("best.json");
    let (w, b) = (workload.to_str().unwrap(), best.to_str().unwrap());
    let out = synth(&["fuse", w, "--topo", "ring:4", "--out", b, "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["rows"].as_array().unwrap().len(), 8);
    assert!(doc["xml"]
        .as_str()
        .unwrap()
        .contains("copies and reductions only"));
    let run = synth(&["run", b, "--size", "64K", "--json"]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
    assert!(report.to_string().contains("\"wrong\":0"), "{report}");
    std::fs::write(&workload, "collective = \"allreduce\"\nsize = \"1GB\"\nepilogue = \"out = x +\"\nmemory_bandwidth = 1\n").unwrap();
    fails_with(
        &["fuse", w, "--topo", "ring:4"],
        "field epilogue: compute column 10",
    );
}

/// Issue 29 item 4a: a custom collective whose reductions end on several ranks (an
/// allreduce within each half) is solved, written as XML that runs with no wrong element,
/// and bounded; one whose destination no contributor reaches is a one-line error.
#[test]
fn reductions_onto_several_ranks_run_from_the_command_line() {
    let tmp = temp_dir("halves");
    let dir = tmp.path();
    let mut text = String::from("ranks = 4\n");
    for (rank, post) in [(0, "[0, 1]"), (1, "[0, 1]"), (2, "[2, 3]"), (3, "[2, 3]")] {
        let address = rank / 2;
        text += &format!("[[chunk]]\npre = [{rank}]\npost = {post}\naddress = {address}\n");
    }
    let halves = write(dir, "halves.toml", &text);
    let out_dir = dir.join("out");
    let out = synth(&[
        "--topo",
        "line:4",
        "--coll",
        &halves,
        "--max-chunks",
        "2",
        "--out",
        out_dir.to_str().unwrap(),
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["bounds"]["steps"], 1, "{doc}");
    let algorithms = doc["algorithms"].as_array().unwrap();
    assert!(!algorithms.is_empty(), "{doc}");
    let mut xmls = 0;
    // Two-phase answers (`-spread`) and, under `auto` on this small node, direct ones.
    let file = |a: &serde_json::Value| a["file"].as_str().unwrap().to_string();
    assert!(
        algorithms.iter().any(|a| file(a).contains("-spread")),
        "{doc}"
    );
    for a in algorithms {
        assert!(
            file(a).contains("-spread") || file(a).contains("-direct-"),
            "{a}"
        );
        // `synth run` fails on any wrong element.
        for xml in a["xml"].as_array().unwrap() {
            xmls += 1;
            let run = synth(&["run", xml.as_str().unwrap(), "--size", "64K"]);
            let stdout = String::from_utf8_lossy(&run.stdout);
            assert!(
                run.status.success(),
                "{stdout}{}",
                String::from_utf8_lossy(&run.stderr)
            );
        }
    }
    assert!(xmls > 0, "no XML written in {}", out_dir.display());
    let bounds = synth(&["bounds", "--topo", "line:4", "--coll", &halves]);
    let stdout = String::from_utf8_lossy(&bounds.stdout);
    assert!(
        bounds.status.success(),
        "{}",
        String::from_utf8_lossy(&bounds.stderr)
    );
    assert!(stdout.contains("at least 1 steps"), "{stdout}");
    let split = write(dir, "split.toml", "name = \"split\"\nranks = 4\nbandwidth = 25\n[[link]]\nsrc = 0\ndst = 1\n[[link]]\nsrc = 2\ndst = 3\n");
    let across = write(
        dir,
        "across.toml",
        "ranks = 4\n[[chunk]]\npre = [0]\npost = [1, 2]\naddress = 0\n[[chunk]]\npre = [1]\npost = [1, 2]\naddress = 0\n",
    );
    fails_with(
        &["--topo", &split, "--coll", &across],
        "address 0 (a chunk starting on rank 0) cannot reach rank 2",
    );
}

/// Issue 27: where the runtime has no fused instructions (amd8 runs RCCL), the main command
/// also lowers each reducing algorithm with its unfused receives in two steps (`r` into the
/// accumulator, then `re`: the twin named `-2r`, with no `cpy`), simulates both and picks
/// per size. Both verify and load on RCCL; on amd8's reduce-scatter the 38-piece layout is
/// chosen at 1 GB.
#[test]
fn rccl_fabrics_choose_between_two_step_and_staged_receives_by_simulation() {
    let tmp = temp_dir("two-step-twins");
    let dir = tmp.path();
    let d = dir.to_str().unwrap();
    let out = synth(&[
        "--topo",
        "amd8",
        "--coll",
        "reducescatter",
        "--out",
        d,
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let files: Vec<&str> = (doc["algorithms"].as_array().unwrap().iter())
        .map(|a| a["file"].as_str().unwrap())
        .collect();
    let twins: Vec<&&str> = files.iter().filter(|f| f.ends_with("-2r.json")).collect();
    assert!(!twins.is_empty(), "{files:?}");
    for twin in &twins {
        let plain = twin.replace("-2r.json", ".json");
        assert!(files.contains(&plain.as_str()), "{plain} in {files:?}");
        for xml in [
            twin.replace(".json", ".xml"),
            twin.replace(".json", ".inplace.xml"),
            plain.replace(".json", ".xml"),
        ] {
            let v = synth(&["verify", "--json", &xml]);
            let report: serde_json::Value = serde_json::from_slice(&v.stdout).unwrap();
            assert_eq!(report["ok"], true, "{xml}: {report}");
            assert_eq!(report["runtimes"]["rccl"]["loads"], true, "{xml}: {report}");
        }
        let text = std::fs::read_to_string(twin.replace(".json", ".xml")).unwrap();
        assert!(!text.contains("type=\"cpy\""), "{twin}");
    }
    // At 1 GB the 38-piece layout is chosen, at 99% of the optimum (its reductions chained in
    // the order their messages arrive).
    let sizes = doc["at_1gb"]["sizes"].as_array().unwrap();
    let at_1gb = sizes.iter().find(|s| s["bytes"] == 1u64 << 30).unwrap();
    let chosen = at_1gb["algorithm"].as_str().unwrap();
    assert!(chosen.contains("-c38"), "{chosen}");
    let (busbw, bound) = (
        doc["at_1gb"]["busbw"].as_f64(),
        doc["at_1gb"]["bound"].as_f64(),
    );
    assert!(
        busbw.unwrap() >= 0.99 * bound.unwrap(),
        "{busbw:?} of {bound:?}"
    );
}

/// The main command's `--json` document for `args`, its files written to `dir`.
fn main_command_json(args: &[&str], dir: &Path) -> serde_json::Value {
    let out = synth(&[args, &["--out", dir.to_str().unwrap(), "--json"]].concat());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The algorithm JSON files a main command's document lists.
fn written_files(doc: &serde_json::Value) -> Vec<String> {
    (doc["algorithms"].as_array().unwrap().iter())
        .map(|a| a["file"].as_str().unwrap().to_string())
        .collect()
}

/// The algorithm chosen at 1 GB, its busbw and the bound, from a main command's document.
fn chosen_at_1gb(doc: &serde_json::Value) -> (String, f64, f64) {
    let sizes = doc["at_1gb"]["sizes"].as_array().unwrap();
    let at_1gb = sizes.iter().find(|s| s["bytes"] == 1u64 << 30).unwrap();
    (
        at_1gb["algorithm"].as_str().unwrap().to_string(),
        doc["at_1gb"]["busbw"].as_f64().unwrap(),
        doc["at_1gb"]["bound"].as_f64().unwrap(),
    )
}

/// Asserts that `synth verify` accepts the XML file `xml`.
fn assert_verifies(xml: &str) {
    let v = synth(&["verify", "--json", xml]);
    let report: serde_json::Value = serde_json::from_slice(&v.stdout).unwrap();
    assert_eq!(report["ok"], true, "{xml}: {report}");
}

/// Issue 27: where an algorithm's receives stall on each other's reductions (dgx-h100x2's
/// 8-piece rail shortcut reduce-scatter simulates faster with connections that never fill),
/// the main command also lowers it with those reductions on local threadblocks, the twin
/// named `-lr`, which verifies. At 1 GB a twin wins: the paced grown trees (`-ps`, below)
/// since they exist, an `-lr` twin before.
#[test]
fn a_stalled_reduction_gets_its_twin_with_local_reductions() {
    let tmp = temp_dir("local-twins");
    let dir = tmp.path();
    let doc = main_command_json(&["--topo", "dgx-h100x2", "--coll", "reducescatter"], dir);
    let files = written_files(&doc);
    let local: Vec<&String> = files.iter().filter(|f| f.ends_with("-lr.json")).collect();
    assert!(!local.is_empty(), "{files:?}");
    for twin in &local {
        let json = std::fs::read_to_string(twin).unwrap();
        assert!(json.contains("\"local_reductions\": true"), "{twin}");
        assert_verifies(&twin.replace(".json", ".xml"));
        assert_verifies(&twin.replace(".json", ".inplace.xml"));
    }
    let (chosen, busbw, bound) = chosen_at_1gb(&doc);
    assert!(
        chosen.ends_with("-lr") || chosen.ends_with("-ps"),
        "{chosen}"
    );
    assert!(busbw >= 0.985 * bound, "{busbw} of {bound}");
}

/// Issue 27: a schedule timed for serial links and reversed into a reduction (dgx-h100x2's
/// grown trees) sends each leaf's own contribution whenever its threadblock gets to it,
/// sharing the ports with the partial sums the next steps wait for. The main command also
/// lowers it with each send of a reducing step waiting for its rank's send of the step
/// before, the twin named `-ps`, which verifies and is chosen at 1 GB, within 1% of the
/// optimum.
#[test]
fn a_reversed_list_schedule_gets_its_twin_with_paced_sends() {
    let tmp = temp_dir("paced-twins");
    let dir = tmp.path();
    let doc = main_command_json(&["--topo", "dgx-h100x2", "--coll", "reducescatter"], dir);
    let files = written_files(&doc);
    let paced: Vec<&String> = files.iter().filter(|f| f.ends_with("-ps.json")).collect();
    assert!(!paced.is_empty(), "{files:?}");
    for twin in &paced {
        let json = std::fs::read_to_string(twin).unwrap();
        assert!(json.contains("\"pacing\": \"reductions\""), "{twin}");
        assert!(json.contains("\"serial_links\": true"), "{twin}");
        assert_verifies(&twin.replace(".json", ".xml"));
        assert_verifies(&twin.replace(".json", ".inplace.xml"));
    }
    let (chosen, busbw, bound) = chosen_at_1gb(&doc);
    assert!(chosen.ends_with("-ps"), "{chosen}");
    assert!(busbw >= 0.99 * bound, "{busbw} of {bound}");
}

/// Issue 27: where one threadblock holds the messages of several trees, a receive whose
/// reduction waits on another tree holds up the messages behind it (mi250's reduce-scatter
/// trees, 85.6% of the optimum even at 16 GB). The main command also lowers such an
/// algorithm with every address on channels of its own, the twin named `-ac`, which
/// verifies, runs the same trees at 99% of the optimum at 4 GB, and is chosen at 1 GB.
#[test]
fn trees_that_wait_behind_each_other_get_channels_of_their_own() {
    let tmp = temp_dir("address-twins");
    let dir = tmp.path();
    let doc = main_command_json(&["--topo", "mi250", "--coll", "reducescatter"], dir);
    let files = written_files(&doc);
    let twin = files
        .iter()
        .find(|f| f.contains("-trees-") && f.ends_with("-ac.json"))
        .unwrap_or_else(|| panic!("no tree twin on address channels: {files:?}"));
    let plain = twin.replace("-ac.json", ".json");
    assert!(files.contains(&plain), "{files:?}");
    let json = std::fs::read_to_string(twin).unwrap();
    assert!(json.contains("\"address_channels\": true"), "{twin}");
    // The same trees as lowered on one channel per step group and as the twin, at 4 GB.
    let at_4gb = |file: &str| -> (f64, f64) {
        let xml_dir = dir.join("lowered");
        let lowered = synth(&["lower", file, "--out", xml_dir.to_str().unwrap()]);
        assert!(lowered.status.success(), "{file}");
        let stem = Path::new(file).file_stem().unwrap().to_str().unwrap();
        let xml = xml_dir.join(format!("{stem}.xml"));
        let xml = xml.to_str().unwrap();
        assert_verifies(xml);
        let s = synth(&[
            "simulate", xml, "--topo", "mi250", "--sizes", "4G", "--json",
        ]);
        let sim: serde_json::Value = serde_json::from_slice(&s.stdout).unwrap();
        let row = &sim["rows"][0];
        (
            row["busbw"].as_f64().unwrap(),
            row["bound_busbw"].as_f64().unwrap(),
        )
    };
    let (own, bound) = at_4gb(twin);
    let (shared, _) = at_4gb(&plain);
    assert!(own >= 0.985 * bound, "{own} of {bound}");
    assert!(shared < 0.9 * bound, "{shared} of {bound}");
    // At 1 GB the twin (96.0% of the bound) was chosen until the 32-piece finer list
    // schedule of session 38 (96.8%); never the trees on shared channels.
    let (chosen, busbw, bound) = chosen_at_1gb(&doc);
    let plain_name = Path::new(&plain).file_stem().unwrap().to_str().unwrap();
    assert_ne!(chosen, plain_name);
    assert!(busbw >= 0.96 * bound, "{chosen}: {busbw} of {bound}");
}

/// Issue 27: a two-step twin whose algorithm's own lowering already took the fit pass
/// (mi250-16's listed shortcut-ring reduce-scatter under RCCL) is the same program: the main
/// command says so and neither writes nor simulates it again; every twin it does write is
/// another program than its algorithm's.
#[test]
fn a_two_step_twin_that_is_its_algorithms_program_is_not_simulated_again() {
    let tmp = temp_dir("same-twin");
    let dir = tmp.path();
    let d = dir.to_str().unwrap();
    let out = synth(&[
        "--topo",
        "mi250-16",
        "--coll",
        "reducescatter",
        "--out",
        d,
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let notes: Vec<&str> = (doc["notes"].as_array().unwrap().iter())
        .map(|n| n.as_str().unwrap())
        .collect();
    let same: Vec<&&str> = notes
        .iter()
        .filter(|n| n.contains("lowers to the same program as"))
        .collect();
    assert!(!same.is_empty(), "{notes:?}");
    let without_name = |path: &str| {
        let text = std::fs::read_to_string(path).unwrap();
        text.lines().skip(1).collect::<Vec<_>>().join("\n")
    };
    for a in doc["algorithms"].as_array().unwrap() {
        let file = a["file"].as_str().unwrap();
        let Some(plain) = file.strip_suffix("-2r.json") else {
            continue;
        };
        let name = Path::new(file)
            .file_stem()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let xml = a["xml"].as_array().unwrap();
        if same.iter().any(|n| n.starts_with(&format!("{name}:"))) {
            assert!(xml.is_empty(), "{name}: {xml:?}");
            // Not lowered by the main command (its algorithm took the fit pass): lowered
            // here, it is its algorithm's program but for the name.
            let again = dir.join("again");
            let lowered = synth(&["lower", "--out", again.to_str().unwrap(), file]);
            assert!(lowered.status.success(), "{name}");
            assert_eq!(
                without_name(&format!("{plain}.xml")),
                without_name(again.join(format!("{name}.xml")).to_str().unwrap()),
                "{name}"
            );
            continue;
        }
        if xml.is_empty() {
            continue;
        }
        assert_ne!(
            without_name(&format!("{plain}.xml")),
            without_name(&format!("{plain}-2r.xml")),
            "{name}"
        );
    }
}

/// A connection that needs several threadblocks (more transfers than the runtimes' 64 steps)
/// keeps its link in turn across the slices the runtime replays the program for: on two
/// nodes of a random 12-GPU fabric, a 25 GB/s NIC per two GPUs, the best reduce-scatter is
/// list-scheduled at 10 pieces. While a connection's first channel started the next slice
/// as its last still sent this one, beside it on the link, the main command reached 91.8%
/// of the optimum at 1 GB; in turn, 98.2%.
#[test]
fn a_connection_over_several_channels_keeps_its_turn_across_slices() {
    let tmp = temp_dir("r12x2");
    let dir = tmp.path();
    let node = "generator = \"random\"\nsize = \"12:5\"\n[nic]\nbandwidth = 25\nalpha = 2.6\nper_node = 6\n";
    write(dir, "node.toml", node);
    let topo = write(
        dir,
        "r12x2.toml",
        "[multinode]\nnode = \"node.toml\"\nnodes = 2\n",
    );
    let doc = main_command_json(&["--topo", &topo, "--coll", "reducescatter"], dir);
    let (_, best, bound) = chosen_at_1gb(&doc);
    assert!(best >= 0.97 * bound, "{}", doc["at_1gb"]);
}

/// Issue 27: where two GPUs share a NIC, the runtime runs their transfers through it side
/// by side, each at half the NIC, while a step of the fabric's own schedules gave the whole
/// NIC to one of them. The trees scheduled on the split view (each GPU its share, `-sv`)
/// keep to what the runtime does: three hypercube:8 boxes on a fat tree with a 25 GB/s NIC
/// per two GPUs, allgather 89.7% of the bound at 1 GB before the view, 99.9% with it; the
/// renumbered fabric the same.
#[test]
fn gpus_sharing_a_nic_are_scheduled_on_the_split_view() {
    let tmp = temp_dir("h8x3-shared-nics");
    let dir = tmp.path();
    let fabric =
        "[multinode]\nnode = \"hypercube:8\"\nnodes = 3\nnic_bandwidth = 25\nnics_per_node = 4\n";
    for (name, text) in [
        ("h8x3.toml", fabric.to_string()),
        ("h8x3_r.toml", format!("relabel = 7\n{fabric}")),
    ] {
        let topo = write(dir, name, &text);
        let doc = main_command_json(&["--topo", &topo, "--coll", "allgather"], dir);
        let (chosen, best, bound) = chosen_at_1gb(&doc);
        assert!(chosen.contains("-sv"), "{chosen}");
        assert!(best >= 0.99 * bound, "{name}: {}", doc["at_1gb"]);
    }
}

/// Where the next slice fills idle link time at the end of this one, the twin that lets a
/// split connection's slices overlap (`-os`, with its paced twins) wins and the main command
/// picks it: four boxes of four GPUs (50 GB/s all to all) on a ring of boxes (two 25 GB/s
/// links to the next box). The grown allreduce paced in both halves kept in turn reached
/// 99.28% of the two-phase optimum at 1 GB; overlapping, 99.42%.
#[test]
fn the_overlapping_slices_twin_is_picked_where_it_wins() {
    let tmp = temp_dir("boxring16");
    let dir = tmp.path();
    let mut text = String::from("name = \"boxring16\"\nranks = 16\nbandwidth = 25.0\n");
    let mut link = |src: usize, dst: usize, bandwidth: u32| {
        text.push_str(&format!(
            "[[link]]\nsrc = {src}\ndst = {dst}\nbandwidth = {bandwidth}\n"
        ));
    };
    for b in 0..4 {
        for i in 0..4 {
            for j in i + 1..4 {
                link(4 * b + i, 4 * b + j, 50);
            }
        }
    }
    for b in 0..4 {
        let next = 4 * ((b + 1) % 4);
        link(4 * b, next + 1, 25);
        link(4 * b + 2, next + 3, 25);
    }
    let topo = write(dir, "boxring16.toml", &text);
    let doc = main_command_json(&["--topo", &topo, "--coll", "allreduce"], dir);
    let (best, busbw, _) = chosen_at_1gb(&doc);
    let two_phase = doc["at_1gb"]["two_phase"].as_f64().unwrap();
    assert!(best.contains("-os"), "{}", doc["at_1gb"]);
    assert!(busbw >= 0.9935 * two_phase, "{}", doc["at_1gb"]);
}
