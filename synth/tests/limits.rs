//! Regression tests of issue 12: out-of-range roots, absurd sizes and numbers that used to
//! panic, allocate gigabytes or solve for minutes are now one-line errors with exit code 1,
//! found before anything is solved or allocated.

use runtime::builders::direct_allgather;
use runtime::ir::Flavor;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A fresh folder for this test's files.
fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("synth-limits-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

/// Asserts a failure with exit code 1, no panic, and exactly one stderr line containing `needle`.
fn fails_with(args: &[&str], needle: &str) {
    let out = Command::new(env!("CARGO_BIN_EXE_synth"))
        .args(args)
        .output()
        .expect("synth runs");
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
    let good = runtime::xml::write(&direct_allgather(2), Flavor::Nccl).unwrap();
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
    let e = format!("{:#}", synth::collective::Collective::from_file(&file, 1).unwrap_err());
    assert!(e.contains("unknown field `ch\\nk`"), "{e}");
    assert!(!e.contains('\n'), "{e}");
}
